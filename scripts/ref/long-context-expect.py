#!/usr/bin/env python3
"""llama.cpp's view of one long prompt, for models whose attention changes past some length
(Gemma 3's local layers see only the last 512 positions): the first N tokens of
tests/data/perplexity/coriolanus.txt (tokenized by llama.cpp, BOS as the metadata asks) are
evaluated at once, then 16 greedy steps follow. Stores, in the format of
generation-expect.py (one case, no full logits file), the chosen ids, the per-step top-2
margins and the first step's top-100 logits, plus the context the test must open.

Usage: scripts/ref/long-context-expect.py MODEL OUT.json N_TOKENS"""
import importlib.util
import json
import os
import sys

import llama_cpp
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("generation_expect",
                                               os.path.join(HERE, "generation-expect.py"))
generation_expect = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generation_expect)

N_GEN = 16


def main():
    model, out, n_tok = sys.argv[1], sys.argv[2], int(sys.argv[3])
    text = open(os.path.join(HERE, "..", "..", "tests", "data", "perplexity", "coriolanus.txt"),
                encoding="utf-8").read()
    n_ctx = 1 << (n_tok + N_GEN).bit_length()
    llm = Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, logits_all=False, n_threads=2,
                verbose=False)
    toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)[:n_tok]
    ids, margins, first, _ = generation_expect.greedy(llm, toks, N_GEN)
    case = {"prompt": "coriolanus.txt, first %d tokens" % n_tok,
            "prompt_ids": [int(t) for t in toks], "ids": ids,
            "margins": [round(m, 5) for m in margins], "first": first}
    with open(out, "w") as f:
        json.dump({"model": model.split("/")[-1], "llama_cpp_python": llama_cpp.__version__,
                   "n_gen": N_GEN, "n_ctx": n_ctx, "cases": [case]}, f, indent=1)
        f.write("\n")
    print("%d prompt tokens, n_ctx %d, ids %s" % (len(toks), n_ctx, llm.detokenize(ids)[:60]),
          file=sys.stderr)


main()
