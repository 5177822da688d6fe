#!/usr/bin/env python3
"""Writes a tiny random-weight llama model and the logits an independent fp64 numpy forward pass
gives for it, so the reference backend (and any other) can be checked in CI without the real
models and on features SmolLM2 does not exercise: an untied output head, linear RoPE scaling,
GQA with 2 KV heads, and weights in Q4_0, Q4_1, Q8_0, F16 and F32.

Outputs tests/data/model/tiny-llama.gguf and tests/data/model/tiny-llama.json (token ids and
the logits at every position, float32 base64).

Usage: scripts/ref/tiny-llama.py
"""
import base64
import json
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize, dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "model")
D, H, HKV, HD, FF, L, V, CTX = 64, 4, 2, 16, 96, 2, 256, 64
BASE, SCALE, EPS = 10000.0, 2.0, 1e-5
rng = np.random.default_rng(7)

w = gguf.GGUFWriter(os.path.join(OUT, "tiny-llama.gguf"), "llama")
w.add_name("tiny random llama for tests")
w.add_block_count(L)
w.add_context_length(CTX)
w.add_embedding_length(D)
w.add_feed_forward_length(FF)
w.add_head_count(H)
w.add_head_count_kv(HKV)
w.add_rope_dimension_count(HD)
w.add_rope_freq_base(BASE)
w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
w.add_rope_scaling_factor(SCALE)
w.add_layer_norm_rms_eps(EPS)
w.add_vocab_size(V)
toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
toks = toks[:3] + [f"\u2581t{i}" for i in range(V - 3)]
w.add_tokenizer_model("llama")
w.add_token_list(toks)
w.add_token_scores([0.0] * V)
w.add_token_types([2, 3, 3] + [1] * (V - 3))
w.add_bos_token_id(1)
w.add_eos_token_id(2)
w.add_unk_token_id(0)
w.add_add_bos_token(True)

weights = {}


def put(name, arr, qtype):
    """Stores arr (n_out, n_in) as qtype; keeps the dequantized values for the numpy pass."""
    arr = arr.astype(np.float32)
    if qtype == T.F32:
        w.add_tensor(name, arr)
        weights[name] = arr.astype(np.float64)
    elif qtype == T.F16:
        h = arr.astype(np.float16)
        w.add_tensor(name, h)
        weights[name] = h.astype(np.float64)
    else:
        q = quantize(arr, qtype)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
        weights[name] = dequantize(q, qtype).astype(np.float64).reshape(arr.shape)


put("token_embd.weight", rng.normal(0, 1, (V, D)), T.Q8_0)
put("output.weight", rng.normal(0, 0.2, (V, D)), T.Q4_0)
put("output_norm.weight", rng.uniform(0.5, 1.5, D), T.F32)
for l in range(L):
    p = f"blk.{l}."
    put(p + "attn_norm.weight", rng.uniform(0.5, 1.5, D), T.F32)
    put(p + "attn_q.weight", rng.normal(0, 0.3, (H * HD, D)), T.Q4_0)
    put(p + "attn_k.weight", rng.normal(0, 0.3, (HKV * HD, D)), T.Q4_1)
    put(p + "attn_v.weight", rng.normal(0, 0.3, (HKV * HD, D)), T.Q8_0)
    put(p + "attn_output.weight", rng.normal(0, 0.2, (D, H * HD)), T.F16)
    put(p + "ffn_norm.weight", rng.uniform(0.5, 1.5, D), T.F32)
    put(p + "ffn_gate.weight", rng.normal(0, 0.2, (FF, D)), T.Q4_1)
    put(p + "ffn_up.weight", rng.normal(0, 0.2, (FF, D)), T.F16)
    put(p + "ffn_down.weight", rng.normal(0, 0.2, (D, FF)), T.Q8_0)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

# The independent forward pass, fp64, the llama way (RoPE pairs (2i, 2i+1), positions / SCALE).
ids = [1] + [int(x) for x in rng.integers(3, V, 19)]
n = len(ids)
x = weights["token_embd.weight"][ids]


def norm(v, g):
    return v / np.sqrt((v * v).mean(-1, keepdims=True) + EPS) * g


inv = BASE ** (-np.arange(0, HD, 2) / HD)
ang = (np.arange(n) / SCALE)[:, None] * inv[None, :]
cos, sin = np.cos(ang), np.sin(ang)


def rope(v):
    out = np.empty_like(v)
    out[..., 0::2] = v[..., 0::2] * cos[:, None] - v[..., 1::2] * sin[:, None]
    out[..., 1::2] = v[..., 0::2] * sin[:, None] + v[..., 1::2] * cos[:, None]
    return out


mask = np.triu(np.full((n, n), -np.inf), 1)
for l in range(L):
    p = f"blk.{l}."
    h = norm(x, weights[p + "attn_norm.weight"])
    q = rope((h @ weights[p + "attn_q.weight"].T).reshape(n, H, HD))
    k = np.repeat(rope((h @ weights[p + "attn_k.weight"].T).reshape(n, HKV, HD)), H // HKV, 1)
    v = np.repeat((h @ weights[p + "attn_v.weight"].T).reshape(n, HKV, HD), H // HKV, 1)
    s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(HD) + mask
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    x = x + np.einsum("hqk,khd->qhd", s, v).reshape(n, H * HD) @ weights[p + "attn_output.weight"].T
    h = norm(x, weights[p + "ffn_norm.weight"])
    g = h @ weights[p + "ffn_gate.weight"].T
    x = x + (g / (1 + np.exp(-g)) * (h @ weights[p + "ffn_up.weight"].T)) @ weights[p + "ffn_down.weight"].T
logits = norm(x, weights["output_norm.weight"]) @ weights["output.weight"].T
with open(os.path.join(OUT, "tiny-llama.json"), "w") as f:
    json.dump({"ids": ids, "n_vocab": V,
               "logits_f32_b64": base64.b64encode(logits.astype("<f4").tobytes()).decode()}, f)
    f.write("\n")
print("wrote", OUT, "logits range", float(logits.min()), float(logits.max()))
