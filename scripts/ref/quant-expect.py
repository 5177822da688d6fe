#!/usr/bin/env python3
"""Writes tests/data/quant/expected.bin: raw quantized rows and the floats the Python `gguf`
package's reference dequantizer (gguf.quants.dequantize) makes of them. test-quant.c reads the
file and checks ebb's dequantizer and dot product against it.

Rows come from the real models where they have that type (SmolLM2: Q4_1, Q8_0; gemma-3-270m:
Q5_0, Q4_K, Q6_K, Q8_0), and from seeded random bytes for the other types (every bit pattern of
a block is a valid encoding; only the fp16 scales are replaced by finite values).

File format (little-endian): b"EBQ1", u32 record count, then per record:
  u32 ggml type, u32 n elements, u32 n bytes, u32 name length, name (utf-8),
  raw bytes, n float32 expected values.

Usage: scripts/ref/quant-expect.py [MODELS_DIR]   (default $EBB_MODELS_DIR or
~/.local/share/ebb/models)
"""
import os
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "quant", "expected.bin")

models = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
    "EBB_MODELS_DIR", os.path.expanduser("~/.local/share/ebb/models"))

records = []


def add(name, qtype, raw, n):
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if qtype == T.F16:
        exp = raw.view(np.float16).astype(np.float32)
    elif qtype == T.F32:
        exp = raw.view(np.float32)
    else:
        exp = dequantize(raw.reshape(1, -1), qtype).reshape(-1).astype(np.float32)
    assert exp.size == n, (name, exp.size, n)
    records.append((int(qtype), n, raw.tobytes(), name, exp.tobytes()))


def from_model(path, picks):
    r = gguf.GGUFReader(path)
    by_name = {t.name: t for t in r.tensors}
    for tname, rows in picks:
        t = by_name[tname]
        data = np.asarray(t.data)  # (rows, bytes per row) for quantized types
        n = int(t.shape[0])
        for row in rows:
            add(f"{os.path.basename(path)}:{tname}[{row}]", t.tensor_type, data[row], n)


smol = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
gemma = os.path.join(models, "gemma-3-270m-q4_k_m.gguf")
from_model(smol, [("blk.0.attn_q.weight", [0, 301]), ("blk.29.ffn_down.weight", [7]),
                  ("token_embd.weight", [1, 4096])])
from_model(gemma, [("blk.0.attn_k.weight", [0, 255]), ("blk.0.attn_output.weight", [3]),
                   ("blk.0.ffn_down.weight", [0, 639]), ("token_embd.weight", [2])])

rng = np.random.default_rng(1234)
SIZES = gguf.constants.GGML_QUANT_SIZES


def random_blocks(qtype, nblocks, half_offsets):
    """Random block bytes with the fp16 fields at half_offsets set to finite scales."""
    blk, size = SIZES[qtype]
    raw = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
    for off in half_offsets:
        d = rng.uniform(-0.05, 0.05, size=nblocks).astype(np.float16)
        raw[:, off:off + 2] = d.view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(-1), blk * nblocks


for qtype, offs, nb in [(T.Q4_0, [0], 4), (T.Q4_1, [0, 2], 4), (T.Q5_0, [0], 4),
                        (T.Q5_1, [0, 2], 4), (T.Q8_0, [0], 4), (T.Q2_K, [80, 82], 2),
                        (T.Q3_K, [108], 2), (T.Q4_K, [0, 2], 2), (T.Q5_K, [0, 2], 2),
                        (T.Q6_K, [208], 2)]:
    raw, n = random_blocks(qtype, nb, offs)
    add(f"random:{qtype.name}", qtype, raw, n)

f16 = rng.normal(0, 2, size=64).astype(np.float16)
f16[:4] = [0.0, -0.0, 6.1e-5, 65504.0]  # zero, negative zero, near-subnormal, max
add("random:F16", T.F16, f16.view(np.uint8), 64)

with open(OUT, "wb") as f:
    f.write(b"EBQ1" + struct.pack("<I", len(records)))
    for qtype, n, raw, name, exp in records:
        nb = name.encode()
        f.write(struct.pack("<IIII", qtype, n, len(raw), len(nb)) + nb + raw + exp)
print(f"wrote {len(records)} records to {OUT} ({os.path.getsize(OUT)} bytes)")
