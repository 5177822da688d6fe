#!/usr/bin/env python3
"""`ebb perplexity` against llama.cpp's value (tests/data/perplexity/smollm2.json, made by
scripts/ref/perplexity-expect.py): within 1% on the same text and window length.

Usage: test-perplexity.py EBB DATA_DIR CTX CHUNKS [MODEL NAME]   (CHUNKS 0 = all windows;
MODEL the file in EBB_MODELS_DIR, default SmolLM2-135M-Instruct.Q4_1.gguf, with llama.cpp's
values in DATA_DIR/perplexity/NAME.json, default smollm2)
Environment: EBB_MODELS_DIR (default ~/.local/share/ebb/models; skipped when the model is
absent), EBB_TEST_DEVICE (default ref), EBB_TEST_KV (--kv-type: f16, the default, or q8_0; the
same bound against llama.cpp's f16-cache value, which q8_0 moved by +0.004% (SmolLM2) and +0.2%
(Gemma 3) over the whole text on PoCL: docs/PERFORMANCE.md), EBB_TEST_VS_ENV ("KEY=VALUE ...":
a second evaluation with those variables set, whose perplexity must be within EBB_TEST_VS_TOL
(default 0.002) of the first's as well, e.g. the f32 products against the int8 ones).
"""
import json
import os
import subprocess
import sys

TOL = 0.01
VS_TOL = float(os.environ.get("EBB_TEST_VS_TOL", "0.002"))


def evaluate(cmd, env):
    """The JSON of one `ebb perplexity` run, None (its stderr printed) when it failed."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        print(out.stderr)
        return None
    return json.loads(out.stdout)


def main():
    ebb, data, ctx, chunks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    name = sys.argv[5] if len(sys.argv) > 5 else "SmolLM2-135M-Instruct.Q4_1.gguf"
    ref = sys.argv[6] if len(sys.argv) > 6 else "smollm2"
    models = os.environ.get("EBB_MODELS_DIR", os.path.expanduser("~/.local/share/ebb/models"))
    model = os.path.join(models, name)
    if not os.path.exists(model):
        print(f"skip: {model} not found")
        return 77
    exp = json.load(open(os.path.join(data, "perplexity", ref + ".json")))
    res = next(r for r in exp["results"] if r["n_ctx"] == ctx)
    want = res["ppl"] if chunks == 0 else res["running"][chunks - 1]
    cmd = [ebb, "perplexity", "-m", model, "-f", os.path.join(data, "perplexity", "coriolanus.txt"),
           "--ctx", str(ctx), "--json", "--device", os.environ.get("EBB_TEST_DEVICE", "ref"),
           "--kv-type", os.environ.get("EBB_TEST_KV", "f16")]
    if chunks:
        cmd += ["--chunks", str(chunks)]
    got = evaluate(cmd, os.environ)
    if got is None:
        return 1
    n_chunks = chunks or res["n_chunks"]
    assert got["n_tokens"] == res["n_tokens"], (got["n_tokens"], res["n_tokens"])
    assert got["n_chunks"] == n_chunks, (got["n_chunks"], n_chunks)
    rel = abs(got["ppl"] - want) / want
    print(f"ctx {ctx}, {n_chunks} windows, kv {got['kv_type']}: ebb {got['ppl']:.4f}, "
          f"llama.cpp {want:.4f}, "
          f"relative difference {100 * rel:.3f}% (limit {100 * TOL:.0f}%), {got['ms'] / 1e3:.1f} s")
    ok = rel <= TOL
    vs = os.environ.get("EBB_TEST_VS_ENV", "").split()
    if vs:
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in vs)
        other = evaluate(cmd, env)
        if other is None:
            return 1
        vrel = abs(got["ppl"] - other["ppl"]) / other["ppl"]
        print(f"with {' '.join(vs)}: {other['ppl']:.4f}, relative difference {100 * vrel:.3f}% "
              f"(limit {100 * VS_TOL:g}%), {other['ms'] / 1e3:.1f} s")
        ok = ok and vrel <= VS_TOL
    return 0 if ok else 1


sys.exit(main())
