#!/usr/bin/env python3
"""Writes a GGUF that holds only the tokenizer.* keys (and general.architecture) of another
GGUF: a 2 MiB stand-in for the whole model wherever ebb-gen-model needs --tokenizer-from, e.g.
on the GPU machine, where only 64 MiB travel with a run.
Usage: bench/tokenizer-gguf.py MODEL.gguf OUT.gguf   (needs the `gguf` Python package)"""
import sys

import gguf


def main():
    src, out = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out, arch)
    n = 0
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_array(name, f.contents())
        elif vt == gguf.GGUFValueType.STRING:
            w.add_string(name, f.contents())
        else:
            w.add_key_value(name, f.contents(), vt)
        n += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("%s: %d tokenizer keys of %s" % (out, n, src))


if __name__ == "__main__":
    main()
