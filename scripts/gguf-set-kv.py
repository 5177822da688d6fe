#!/usr/bin/env python3
"""Copies a GGUF file with metadata keys added or replaced; tensors are copied unchanged.

usage: gguf-set-kv.py IN.gguf OUT.gguf KEY=TYPE:VALUE ...

TYPE is one of u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str. Example, a model that recommends
its own sampling settings (what `ebb info` and the server then show as source "gguf"):

    scripts/gguf-set-kv.py SmolLM2.gguf /tmp/s.gguf general.sampling.temp=f32:0 \\
        general.sampling.top_k=i32:1

Only the header is rewritten: the tensor table keeps its offsets (relative to the data section),
the data section is realigned to general.alignment (32 unless the file says otherwise) and then
copied byte for byte.
"""
import shutil
import struct
import sys

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}
NAMES = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7,
         "str": 8, "u64": 10, "i64": 11, "f64": 12}


class Reader:
    def __init__(self, f):
        self.f = f

    def take(self, n):
        b = self.f.read(n)
        if len(b) != n:
            raise SystemExit("gguf-set-kv: truncated file")
        return b

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        return self.take(self.unpack("<Q"))

    def value(self, vtype):
        """Returns the raw bytes of one value of vtype (and its decoded form for scalars)."""
        if vtype in SCALARS:
            raw = self.take(struct.calcsize(SCALARS[vtype]))
            return raw, struct.unpack(SCALARS[vtype], raw)[0]
        if vtype == 8:
            n = self.unpack("<Q")
            s = self.take(n)
            return struct.pack("<Q", n) + s, s
        if vtype == 9:
            etype = self.unpack("<I")
            n = self.unpack("<Q")
            parts = [struct.pack("<IQ", etype, n)]
            for _ in range(n):
                parts.append(self.value(etype)[0])
            return b"".join(parts), None
        raise SystemExit(f"gguf-set-kv: unknown value type {vtype}")


def encode(spec):
    key, _, tv = spec.partition("=")
    tname, _, text = tv.partition(":")
    if not key or tname not in NAMES:
        raise SystemExit(f"gguf-set-kv: expected KEY=TYPE:VALUE, got {spec!r}")
    vtype = NAMES[tname]
    if vtype == 8:
        b = text.encode()
        val = struct.pack("<Q", len(b)) + b
    elif vtype == 7:
        val = struct.pack("<?", text.lower() in ("1", "true", "yes"))
    elif tname.startswith("f"):
        val = struct.pack(SCALARS[vtype], float(text))
    else:
        val = struct.pack(SCALARS[vtype], int(text))
    kb = key.encode()
    return key, struct.pack("<Q", len(kb)) + kb + struct.pack("<I", vtype) + val


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    src, dst, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
    new = dict(encode(s) for s in specs)
    with open(src, "rb") as f:
        r = Reader(f)
        if r.take(4) != b"GGUF":
            raise SystemExit("gguf-set-kv: not a GGUF file")
        version = r.unpack("<I")
        n_tensors = r.unpack("<Q")
        n_kv = r.unpack("<Q")
        kvs = []
        alignment = 32
        for _ in range(n_kv):
            kb = r.string()
            vtype = r.unpack("<I")
            raw, val = r.value(vtype)
            key = kb.decode()
            if key == "general.alignment" and vtype == 4:
                alignment = val
            if key in new:
                continue
            kvs.append(struct.pack("<Q", len(kb)) + kb + struct.pack("<I", vtype) + raw)
        tensors = []
        for _ in range(n_tensors):
            name = r.string()
            n_dims = r.unpack("<I")
            dims = r.take(8 * n_dims)
            rest = r.take(12)  # type (u32) and offset (u64)
            tensors.append(struct.pack("<Q", len(name)) + name + struct.pack("<I", n_dims) +
                           dims + rest)
        pos = f.tell()
        data_start = (pos + alignment - 1) // alignment * alignment
        f.seek(data_start)
        kvs += new.values()
        with open(dst, "wb") as o:
            o.write(b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs)))
            for kv in kvs:
                o.write(kv)
            for t in tensors:
                o.write(t)
            pad = (-o.tell()) % alignment
            o.write(b"\0" * pad)
            shutil.copyfileobj(f, o, 1 << 20)


if __name__ == "__main__":
    main()
