#!/usr/bin/env python3
"""llama.cpp's first-step logits and greedy continuations on a random-weight GGUF of a family.

Writes the file with bench's ebb-gen-model (seeded: CI regenerates it byte for byte and checks
the sha256 recorded here), runs llama.cpp on it through llama-cpp-python (CPU) and records, for
each raw prompt, the prompt ids, the first step's top logits and N_GEN greedy ids with llama.cpp's
top-2 margin at each step (the near-tie rule of tests/unit/test-model.c). The prompts are
generation-expect.py's first ones; the model is random, so the ids are noise, but the same noise
is what every correct implementation of the family must produce.

Run at data-generation time only (CI does not need llama-cpp-python):
  scripts/ref/family-expect.py BUILD/bench/ebb-gen-model SHAPE VOCAB.gguf OUT.json [SEED]
e.g. scripts/ref/family-expect.py build/bench/ebb-gen-model qwen2-tiny \\
       ~/.cache/ebb/vocabs/ggml-vocab-qwen2.gguf tests/data/generation/qwen2-tiny.json
"""
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import llama_cpp
from llama_cpp import Llama

N_PROMPTS = 12
N_GEN = 32
TOP = 40
TYPE = "q8_0"
# The bounds test-model holds ebb to on this data. These models' logits have a standard
# deviation of ~1 and top-2 margins of ~0.01 (the real models' bounds of 1.5 / 0.5 would catch
# nothing). Measured with llama-cpp-python 0.3.36 against ebb's ref and OpenCL (PoCL) backends
# on qwen2-tiny, qwen3-tiny, phi3-tiny: first-step top-40 logits within 0.031 (0.030 without the
# mean offset), greedy divergences only where llama.cpp's margin was <= 0.03.
TOLERANCES = {"logit": 0.1, "centered": 0.1, "margin": 0.1}
# Mixture-of-experts shapes: where two experts' router probabilities nearly tie for the k-th
# place, rounding alone can pick the other one for a token in a layer, which moves that
# token's logits by more than rounding would. Measured on qwen3moe-tiny: ebb's fp32 reference
# within 0.119 (prompt 5, one such flip; 0.023 elsewhere), its llama.cpp-numerics mode
# (ref-q8) within 0.019 and identical to 4 decimals on 9 of 12 prompts.
MOE_TOLERANCES = {"logit": 0.25, "centered": 0.25, "margin": 0.1}


def load_generation_expect():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("genexp",
                                                  os.path.join(here, "generation-expect.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    gen_model, shape, vocab, out = sys.argv[1:5]
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    ge = load_generation_expect()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, shape + ".gguf")
        subprocess.run([gen_model, "--shape", shape, "--tokenizer-from", vocab, "--type", TYPE,
                        "--seed", str(seed), "-o", path], check=True)
        with open(path, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        llm = Llama(model_path=path, n_ctx=256, n_batch=256, logits_all=False, n_threads=2,
                    verbose=False)
        arch = llm.metadata.get("general.architecture")
        cases = []
        for pi, prompt in enumerate(ge.PROMPTS[:N_PROMPTS]):
            toks = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
            ids, margins, first, _ = ge.greedy(llm, toks, N_GEN, TOP)
            cases.append({"prompt": prompt, "prompt_ids": [int(t) for t in toks], "ids": ids,
                          "margins": [round(m, 5) for m in margins], "first": first})
            print(f"{pi}: {len(toks)} tokens -> {ids[:8]} min margin {min(margins):.4f}",
                  file=sys.stderr)
        n_vocab = llm.n_vocab()
    with open(out, "w") as f:
        json.dump({"model": shape + ".gguf", "arch": arch, "n_vocab": n_vocab,
                   "gen": {"shape": shape, "tokenizer": os.path.basename(vocab), "type": TYPE,
                           "seed": seed, "sha256": sha},
                   "llama_cpp_python": llama_cpp.__version__, "n_gen": N_GEN,
                   "tolerances": MOE_TOLERANCES if "moe" in arch else TOLERANCES,
                   "cases": cases},
                  f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
