#!/usr/bin/env python3
"""An independent fp32 llama forward pass in numpy (weights dequantized with the gguf package),
to tell apart our reference's own error from llama.cpp's quantized-activation and fp16-KV
rounding. Prints the top logits after a prompt given as token ids.

Usage: scripts/ref/numpy-llama.py MODEL ID [ID...]
"""
import sys

import numpy as np
import gguf
from gguf.quants import dequantize


def main():
    r = gguf.GGUFReader(sys.argv[1])
    ids = [int(a) for a in sys.argv[2:]]
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.")}
    T = {t.name: t for t in r.tensors}

    def W(name):
        t = T[name]
        return dequantize(t.data, t.tensor_type).astype(np.float32).reshape(
            [int(x) for x in reversed(t.shape)])

    a = kv["general.architecture"]
    L, D = kv[a + ".block_count"], kv[a + ".embedding_length"]
    H, HKV = kv[a + ".attention.head_count"], kv[a + ".attention.head_count_kv"]
    HD, eps = D // H, kv[a + ".attention.layer_norm_rms_epsilon"]
    base = kv.get(a + ".rope.freq_base", 10000.0)
    n = len(ids)
    emb = W("token_embd.weight")
    x = emb[ids].astype(np.float64)

    def norm(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    inv = base ** (-np.arange(0, HD, 2) / HD)
    ang = np.arange(n)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(v):  # v (n, heads, HD), pairs (2i, 2i+1)
        v0, v1 = v[..., 0::2], v[..., 1::2]
        out = np.empty_like(v)
        out[..., 0::2] = v0 * cos[:, None] - v1 * sin[:, None]
        out[..., 1::2] = v0 * sin[:, None] + v1 * cos[:, None]
        return out

    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(L):
        p = f"blk.{l}."
        h = norm(x, W(p + "attn_norm.weight"))
        q = rope((h @ W(p + "attn_q.weight").T).reshape(n, H, HD))
        k = rope((h @ W(p + "attn_k.weight").T).reshape(n, HKV, HD))
        v = (h @ W(p + "attn_v.weight").T).reshape(n, HKV, HD)
        k = np.repeat(k, H // HKV, axis=1)
        v = np.repeat(v, H // HKV, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(HD) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", s, v).reshape(n, H * HD)
        x = x + o @ W(p + "attn_output.weight").T
        h = norm(x, W(p + "ffn_norm.weight"))
        g = h @ W(p + "ffn_gate.weight").T
        u = h @ W(p + "ffn_up.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ W(p + "ffn_down.weight").T
    h = norm(x[-1], W("output_norm.weight"))
    out = W("output.weight") if "output.weight" in T else emb
    logits = out @ h
    top = np.argsort(-logits)[:5]
    for i in top:
        print(int(i), f"{logits[i]:.4f}")


main()
