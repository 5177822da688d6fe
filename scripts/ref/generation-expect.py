#!/usr/bin/env python3
"""llama.cpp's greedy continuations of SmolLM2 for the reference-forward test.

For each raw prompt (no chat template; tokenized as llama.cpp does with add_special, so BOS only
if the model's metadata asks for it: SmolLM2's add_bos_token is false), evaluates the prompt
and then 64 greedy steps with llama-cpp-python, recording the chosen ids and, per step, the
margin between llama.cpp's two largest logits (a near tie there may legitimately flip under
different rounding). For every prompt the first step's top-100 logits and statistics of the
full vector are stored; the first prompt's full first-step logits go to a float32 .bin file.

Usage: scripts/ref/generation-expect.py MODEL OUT.json   (writes OUT.json and OUT-logits0.bin)
"""
import base64
import json
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three primary colors are",
    "Water boils at a temperature of",
    "1, 2, 3, 4, 5,",
    "Translate to French: 'Good morning, how are you?'\nFrench:",
    "The quick brown fox",
    "In machine learning, overfitting means",
    "<html>\n<head>\n<title>",
    "Dear Sir or Madam,\n\nI am writing to",
    "The largest planet in our solar system is",
    "Q: What is 12 times 12?\nA:",
    "Photosynthesis is the process by which",
    "import numpy as np\n\nx = np.array([1, 2, 3])\n",
    "Ingredients:\n- 2 cups flour\n-",
    "The history of the Roman Empire",
    "Shakespeare wrote many plays, including",
    "SELECT name, age FROM users WHERE",
    "Les chats sont des animaux",
    "A haiku about autumn:\n",
    "The theory of relativity was developed by",
    "Step 1: Preheat the oven to",
    "Rust and C are both systems programming languages, but",
]
N_GEN = 64
TOP = 100


def greedy(llm, toks, n_gen, top=TOP):
    """Evaluates toks, then n_gen greedy steps: the chosen ids, llama.cpp's top-2 margin at each
    step, the first step's top-`top` logits with statistics, and its full logits vector."""
    llm.reset()
    llm.eval(toks)
    ids, margins, first, full = [], [], None, None
    for step in range(n_gen):
        # With logits_all=False llama.cpp outputs only the batch's last token: row 0.
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(),
                                       shape=(llm.n_vocab(),)).astype(np.float32)
        order = np.argsort(-logits, kind="stable")
        tok = int(order[0])
        margins.append(float(logits[order[0]] - logits[order[1]]))
        ids.append(tok)
        if step == 0:
            first = {
                "top_ids": [int(i) for i in order[:top]],
                "top_logits": [float(logits[i]) for i in order[:top]],
                "mean": float(logits.mean()), "std": float(logits.std()),
                "min": float(logits.min()), "max": float(logits.max()),
            }
            full = logits.copy()
        llm.eval([tok])
    return ids, margins, first, full


def main():
    model, out = sys.argv[1], sys.argv[2]
    llm = Llama(model_path=model, n_ctx=256, n_batch=256, logits_all=False, n_threads=2,
                verbose=False)
    cases = []
    full0 = None
    for pi, prompt in enumerate(PROMPTS):
        toks = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
        ids, margins, first, full = greedy(llm, toks, N_GEN)
        if pi == 0:
            full0 = full
        cases.append({"prompt": prompt, "prompt_ids": [int(t) for t in toks], "ids": ids,
                      "margins": [round(m, 5) for m in margins], "first": first})
        print(f"{pi}: {prompt[:30]!r} -> {llm.detokenize(ids)[:60]!r} min margin "
              f"{min(margins):.4f}", file=sys.stderr)
    with open(out, "w") as f:
        json.dump({"model": model.split("/")[-1], "llama_cpp_python": llama_cpp.__version__,
                   "n_gen": N_GEN, "logits0_bin": out.split("/")[-1].replace(".json", "")
                   + "-logits0.bin", "cases": cases}, f, indent=1)
        f.write("\n")
    full0.astype("<f4").tofile(out.replace(".json", "") + "-logits0.bin")


if __name__ == "__main__":
    main()
