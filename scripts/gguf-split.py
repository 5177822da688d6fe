#!/usr/bin/env python3
"""Splits a GGUF file into N parts the way split models are published:
OUT-00001-of-0000N.gguf, ... Every part is a GGUF of its own with split.no (u16, 0-based),
split.count (u16) and split.tensors.count (i32); the first part also carries the input's
metadata; each part holds a run of the tensors in file order, with offsets into its own data
section. The tests make a split model with it to pull and load.

usage: gguf-split.py IN.gguf OUT_PREFIX N
"""
import importlib.util
import os
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("gguf_set_kv", os.path.join(here, "gguf-set-kv.py"))
kvmod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kvmod)


def kv(key, vtype, raw):
    kb = key.encode()
    return struct.pack("<Q", len(kb)) + kb + struct.pack("<I", vtype) + raw


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    src, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(src, "rb") as f:
        r = kvmod.Reader(f)
        if r.take(4) != b"GGUF":
            raise SystemExit("gguf-split: not a GGUF file")
        version = r.unpack("<I")
        n_tensors = r.unpack("<Q")
        n_kv = r.unpack("<Q")
        kvs, alignment = [], 32
        for _ in range(n_kv):
            kb = r.string()
            vtype = r.unpack("<I")
            raw, val = r.value(vtype)
            if kb == b"general.alignment" and vtype == 4:
                alignment = val
            if not kb.startswith(b"split."):
                kvs.append(struct.pack("<Q", len(kb)) + kb + struct.pack("<I", vtype) + raw)
        tensors = []  # (name, n_dims, dims bytes, type, offset)
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.unpack("<I")
            dims = r.take(8 * n_dims)
            ttype = r.unpack("<I")
            off = r.unpack("<Q")
            tensors.append((name, n_dims, dims, ttype, off))
        data_start = (f.tell() + alignment - 1) // alignment * alignment
        f.seek(0, 2)
        data_end = f.tell() - data_start
        if n < 1 or n > n_tensors:
            raise SystemExit("gguf-split: N must be 1..%d" % n_tensors)
        # A tensor's bytes run to the next tensor's offset (padding included, so each stays
        # aligned where it lands); the last one's to the end of the file.
        offs = sorted(t[4] for t in tensors) + [data_end]
        size = {o: offs[i + 1] - o for i, o in enumerate(offs[:-1])}
        per = (n_tensors + n - 1) // n
        for k in range(n):
            part = tensors[k * per:(k + 1) * per]
            head = [kv("split.no", 2, struct.pack("<H", k)), kv("split.count", 2, struct.pack("<H", n)),
                    kv("split.tensors.count", 5, struct.pack("<i", n_tensors))]
            meta = (kvs if k == 0 else []) + head
            if k and alignment != 32:
                meta.append(kv("general.alignment", 4, struct.pack("<I", alignment)))
            infos, blobs, pos = [], [], 0
            for name, n_dims, dims, ttype, off in part:
                infos.append(struct.pack("<Q", len(name)) + name + struct.pack("<I", n_dims) + dims +
                             struct.pack("<IQ", ttype, pos))
                f.seek(data_start + off)
                blob = f.read(size[off])
                blob += b"\0" * ((-len(blob)) % alignment)
                blobs.append(blob)
                pos += len(blob)
            with open("%s-%05d-of-%05d.gguf" % (prefix, k + 1, n), "wb") as o:
                o.write(b"GGUF" + struct.pack("<IQQ", version, len(part), len(meta)))
                for m in meta:
                    o.write(m)
                for i in infos:
                    o.write(i)
                o.write(b"\0" * ((-o.tell()) % alignment))
                for b in blobs:
                    o.write(b)


if __name__ == "__main__":
    main()
