#!/usr/bin/env python3
"""Layer streamer, issue 6: greedy token ids are identical at 0/25/50/75/100% residency, from
the GGUF and from packs (plain and --zstd), and equal the plain path's (no memory budget).
Also checks the stream stats of `ebb run --json` and `ebb bench --json`.
Usage: test-stream.py EBB   (EBB_MODELS_DIR names the models folder; MODEL overrides the file)"""
import json
import os
import subprocess
import sys
import tempfile

EBB = sys.argv[1]
MODELS = os.environ.get("EBB_MODELS_DIR", os.path.expanduser("~/.local/share/ebb/models"))
MODEL = os.environ.get("MODEL", os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf"))
N = os.environ.get("N", "16")


def run(args, env):
    p = subprocess.run([EBB, "run", "-m", MODEL, "-p", "The capital of France is", "-n", N,
                        "--temp", "0", "--json"] + args, env=env, capture_output=True, text=True)
    assert p.returncode == 0, "ebb run %s failed: %s" % (args, p.stderr)
    return json.loads(p.stdout)


def main():
    if not os.path.exists(MODEL):
        print("SKIP: no model", MODEL)
        return 77
    with tempfile.TemporaryDirectory() as d:
        probe = os.path.join(d, "probe")
        with open(probe, "w") as f:  # plenty of memory: the forced residency decides
            f.write("available=64G\n")
        env = dict(os.environ, EBB_TEST_MEMPROBE_FILE=probe)
        packs = {}
        for name, extra in (("pack", []), ("pack-zstd", ["--zstd"])):
            path = os.path.join(d, name)
            subprocess.run([EBB, "pack", MODEL, "-o", path] + extra, check=True,
                           capture_output=True)
            packs[name] = ["--pack", path]
        plain = run([], env)
        assert "stream" not in plain, "plain path reports a streamer"
        ref = plain["tokens"]
        assert len(ref) > 0
        print("plain:", ref)
        n_layer = None
        for src, extra in [("gguf", [])] + list(packs.items()):
            for r in ("0", "0.25", "0.5", "0.75", "1"):
                j = run(["--residency", r] + extra, env)
                st = j["stream"]
                n_layer = st["layers_total"]
                want = int(float(r) * n_layer + 0.5)
                print("%-9s residency %-4s: %2d/%d resident, %d hits %d misses, %.0f B/token, "
                      "peak RSS %.1f MiB" % (src, r, st["layers_resident"], n_layer,
                                             st["prefetch_hits"], st["prefetch_misses"],
                                             st["bytes_per_token"], j["peak_rss_bytes"] / 2**20))
                assert st["layers_resident"] == want, (r, st)
                assert j["tokens"] == ref, "%s at %s: %s != %s" % (src, r, j["tokens"], ref)
                streamed = n_layer - want
                if streamed:
                    assert st["layers_read"] > 0 and st["bytes_per_token"] > 0, st
                else:
                    assert st["layers_read"] == 0 and st["slots"] == 0, st
        # the discrete-GPU staging (pinned slots, async copies into two device buffers) on
        # this device too, as a host tier since the probe file says there is room
        denv = dict(env, EBB_TEST_STREAM_DISCRETE="1")
        for r in ("0", "0.5"):
            j = run(["--residency", r], denv)
            print("discrete staging, residency %s: %d resident" % (r, j["stream"]["layers_resident"]))
            assert j["tokens"] == ref, "discrete staging at %s: %s != %s" % (r, j["tokens"], ref)
            # host tier: a pinned slot per streamed layer, each read from the file once
            n_str = j["stream"]["layers_total"] - j["stream"]["layers_resident"]
            assert j["stream"]["slots"] == n_str, j["stream"]
            assert j["stream"]["layers_read"] == n_str and j["stream"]["reused"] > 0, j["stream"]
        b = subprocess.run([EBB, "bench", "-m", MODEL, "--prompt-tokens", "8", "--gen-tokens", "4",
                            "--residency", "0.5", "--json"], env=env, capture_output=True,
                           text=True)
        assert b.returncode == 0, b.stderr
        bj = json.loads(b.stdout)
        for k in ("prefill_tok_s", "decode_tok_s", "peak_rss_bytes"):
            assert bj[k] > 0, bj
        assert bj["stream"]["layers_resident"] == int(0.5 * n_layer + 0.5), bj
        assert bj["stream"]["prefetch_hits"] + bj["stream"]["prefetch_misses"] > 0, bj
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
