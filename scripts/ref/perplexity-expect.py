#!/usr/bin/env python3
"""llama.cpp's perplexity of a model over a text, for the ebb perplexity test.

Computed as llama.cpp's `perplexity` tool does (tools/perplexity/perplexity.cpp, perplexity()):
the whole text is tokenized once (BOS only if the model's metadata asks for it), cut into
floor(n_tokens / n_ctx) windows of n_ctx tokens; each window is evaluated from an empty KV
cache, its first token replaced by BOS if the model adds BOS; the positions j = n_ctx/2 ..
n_ctx-2 of each window are scored by -log softmax(logits[j])[token[j+1]]; PPL = exp(mean).
`running` holds the value after each window, as the tool prints it, so a test can check a
prefix of the windows.

Usage: scripts/ref/perplexity-expect.py MODEL TEXT CTX [CTX...] > tests/data/perplexity/x.json
"""
import json
import math
import sys

import numpy as np
from llama_cpp import Llama


def main():
    model, text_path = sys.argv[1], sys.argv[2]
    ctxs = [int(c) for c in sys.argv[3:]] or [128]
    text = open(text_path, encoding="utf-8").read()
    results = []
    for n_ctx in ctxs:
        llm = Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, logits_all=True,
                    n_threads=2, verbose=False)
        add_bos = llm._model.add_bos_token() if hasattr(llm._model, "add_bos_token") else False
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        bos = llm.token_bos()
        n_chunk = len(toks) // n_ctx
        first = n_ctx // 2
        nll, count = 0.0, 0
        running = []
        for c in range(n_chunk):
            chunk = list(toks[c * n_ctx:(c + 1) * n_ctx])
            if add_bos:
                chunk[0] = bos
            llm.reset()
            llm.eval(chunk)
            scores = np.asarray(llm.scores[:n_ctx], dtype=np.float64)
            for j in range(first, n_ctx - 1):
                row = scores[j]
                mx = row.max()
                lse = mx + math.log(np.exp(row - mx).sum())
                nll += lse - row[chunk[j + 1]]
                count += 1
            running.append(math.exp(nll / count))
        results.append({"n_ctx": n_ctx, "n_tokens": len(toks), "n_chunks": n_chunk,
                        "n_scored": count, "add_bos": bool(add_bos),
                        "ppl": math.exp(nll / count), "running": running})
        print(f"ctx {n_ctx}: {len(toks)} tokens, {n_chunk} chunks, ppl {math.exp(nll/count):.4f}",
              file=sys.stderr)
        del llm
    import llama_cpp
    json.dump({"model": model.split("/")[-1], "text": text_path.split("/")[-1],
               "llama_cpp_python": llama_cpp.__version__, "results": results},
              sys.stdout, indent=1)
    print()


main()
