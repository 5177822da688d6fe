#!/usr/bin/env python3
"""Mistral's sliding window (llama.attention.sliding_window, every layer windowed) on the
reference backend and the OpenCL engine (PoCL in CI).

Writes mistral-tiny (window 16) with ebb-gen-model and the llama-spm vocabulary
(scripts/fetch-vocabs.sh, $EBB_VOCABS_DIR; its absence is a failure, as for the vocabs test),
then runs `ebb run --json` greedily on two prompts: a short one whose 40 decoded tokens cross
the window, and one of about 150 tokens whose prefill and decode wrap the OpenCL engine's ring
caches (window + 128 positions). The greedy ids of ref, OpenCL with rings and OpenCL with
whole-context caches (EBB_CL_KV_RING=0) must be equal; the same file with the window key set to
0 (no window) must give other ids on both backends, so that the window is shown to be in effect.

llama.cpp gives no reference here: llama-cpp-python 0.3.36 gives the same ids with and without
the key (its llama architecture does not read it).

Usage: test-window.py EBB-GEN-MODEL EBB GGUF-SET-KV.py WORKDIR
"""
import json
import os
import subprocess
import sys

STEPS = 40
PROMPTS = [
    "The lighthouse keeper wrote in his log that",
    " ".join(f"The river bends where the old mill stood, and the children count the stones {i}."
             for i in range(8)),
]


def run(ebb, model, prompt, device, ring=True):
    env = dict(os.environ)
    if not ring:
        env["EBB_CL_KV_RING"] = "0"
    p = subprocess.run([ebb, "run", "-m", model, "-p", prompt, "-n", str(STEPS), "--temp", "0",
                        "--device", device, "--ctx", "512", "--json"], env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"ebb run --device {device} failed: {p.stderr}")
    d = json.loads(p.stdout)
    return d["prompt_tokens"], d["tokens"]


def main():
    gen_model, ebb, set_kv, work = sys.argv[1:5]
    vocabs = os.environ.get("EBB_VOCABS_DIR") or os.path.expanduser("~/.cache/ebb/vocabs")
    vocab = os.path.join(vocabs, "ggml-vocab-llama-spm.gguf")
    if not os.path.exists(vocab):
        print(f"missing {vocab}: run scripts/fetch-vocabs.sh and set EBB_VOCABS_DIR",
              file=sys.stderr)
        return 1
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "mistral-tiny.gguf")
    nowin = os.path.join(work, "mistral-tiny-nowindow.gguf")
    subprocess.run([gen_model, "--shape", "mistral-tiny", "--tokenizer-from", vocab, "--type",
                    "q8_0", "-o", model], check=True)
    subprocess.run([sys.executable, set_kv, model, nowin, "llama.attention.sliding_window=u32:0"],
                   check=True)
    bad = 0
    for i, prompt in enumerate(PROMPTS):
        n, ref = run(ebb, model, prompt, "ref")
        _, cl = run(ebb, model, prompt, "auto")
        _, cl_whole = run(ebb, model, prompt, "auto", ring=False)
        _, ref_nw = run(ebb, model=nowin, prompt=prompt, device="ref")
        _, cl_nw = run(ebb, model=nowin, prompt=prompt, device="auto")
        print(f"# prompt {i}: {n} tokens + {STEPS} steps (window 16): ref {ref[:6]}...")
        for name, ids in (("opencl", cl), ("opencl without rings", cl_whole)):
            if ids != ref:
                k = next(j for j, (a, b) in enumerate(zip(ids, ref)) if a != b)
                print(f"ERROR: prompt {i}: {name} differs from ref at step {k}: {ids[k]} vs "
                      f"{ref[k]}")
                bad += 1
        if ref_nw == ref or cl_nw == cl:
            print(f"ERROR: prompt {i}: the same ids without the window: is it applied?")
            bad += 1
        if ref_nw != cl_nw:
            print(f"# prompt {i}: without the window, ref and opencl differ (not checked)")
    print("ok" if not bad else f"{bad} failure(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
