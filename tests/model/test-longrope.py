#!/usr/bin/env python3
"""Phi-3.5's longrope on the reference backend and the OpenCL engine (PoCL in CI).

Writes phi3.5-tiny with ebb-gen-model and the phi-3 vocabulary (scripts/fetch-vocabs.sh,
$EBB_VOCABS_DIR; its absence is a failure): rope_factors_short/long.weight, an original
context of 64 and attention factor sqrt(2). Runs `ebb run --json` greedily (12-token prompt,
40 steps) with --ctx 64 (the short factors) and --ctx 512 (the long ones) and checks that ref
and OpenCL give the same ids for each, that the two contexts give different ids (the factor
sets are applied), and that the file with phi3.rope.scaling.attn_factor set to 1 gives other
ids again (the attention factor is applied). llama.cpp's ids on the long factors are checked
by the model-phi3.5-tiny tests (tests/data/generation/phi3.5-tiny.json).

Usage: test-longrope.py EBB-GEN-MODEL EBB GGUF-SET-KV.py WORKDIR
"""
import json
import os
import subprocess
import sys

PROMPT = "The lighthouse keeper wrote in his log that"
STEPS = 40


def run(ebb, model, device, ctx):
    p = subprocess.run([ebb, "run", "-m", model, "-p", PROMPT, "-n", str(STEPS), "--temp", "0",
                        "--device", device, "--ctx", str(ctx), "--json"], capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise SystemExit(f"ebb run --device {device} --ctx {ctx} failed: {p.stderr}")
    return json.loads(p.stdout)["tokens"]


def main():
    gen_model, ebb, set_kv, work = sys.argv[1:5]
    vocabs = os.environ.get("EBB_VOCABS_DIR") or os.path.expanduser("~/.cache/ebb/vocabs")
    vocab = os.path.join(vocabs, "ggml-vocab-phi-3.gguf")
    if not os.path.exists(vocab):
        print(f"missing {vocab}: run scripts/fetch-vocabs.sh and set EBB_VOCABS_DIR",
              file=sys.stderr)
        return 1
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "phi3.5-tiny.gguf")
    plain = os.path.join(work, "phi3.5-tiny-attn1.gguf")
    subprocess.run([gen_model, "--shape", "phi3.5-tiny", "--tokenizer-from", vocab, "--type",
                    "q8_0", "-o", model], check=True)
    subprocess.run([sys.executable, set_kv, model, plain, "phi3.rope.scaling.attn_factor=f32:1"],
                   check=True, stdout=subprocess.DEVNULL)
    bad = 0
    ids = {}
    for ctx in (64, 512):
        ref, cl = run(ebb, model, "ref", ctx), run(ebb, model, "auto", ctx)
        ids[ctx] = ref
        print(f"# ctx {ctx}: ref {ref[:8]}...")
        if ref != cl:
            k = next(j for j, (a, b) in enumerate(zip(ref, cl)) if a != b)
            print(f"ERROR: ctx {ctx}: opencl differs from ref at step {k}: {cl[k]} vs {ref[k]}")
            bad += 1
        if run(ebb, plain, "ref", ctx) == ref or run(ebb, plain, "auto", ctx) == cl:
            print(f"ERROR: ctx {ctx}: the same ids with attention factor 1")
            bad += 1
    if ids[64] == ids[512]:
        print("ERROR: the short and long factors give the same ids")
        bad += 1
    print("ok" if not bad else f"{bad} failure(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
