#!/usr/bin/env python3
"""Layer streamer, issue 6, on a random-weight model of Llama 3.2 1B shape (16 layers, Q4_0)
made by ebb-gen-model with the SmolLM2 tokenizer: greedy token ids and top logits are identical
at 0/25/50/75/100% residency, from the GGUF, a pack and a --zstd pack, and equal the plain
path's (no --residency). Each configuration runs `ebb bench` (ids and top logits of a synthetic
prompt) and `ebb run` (ids of a text prompt). The random model's greedy choice is the same token
at every step whatever the prompt, so the ids alone would miss most divergences: the top logits,
which move with the prompt and every step, carry the check; `ebb run` adds its path and stats.

Uniformly random Q4_0 nibbles do not compress, so a --zstd pack of the raw generated model holds
no zstd record at all. To make that pack exercise decompression, the test narrows the quants of
the odd layers' weight matrices to four levels (5, 7, 9, 11, i.e. -3..3 around Q4_0's zero): those
layers become zstd records and the even ones stay raw, so one stream mixes both codecs.

Usage: test-stream-1b.py EBB EBB-GEN-MODEL
(EBB_MODELS_DIR names the models folder; SmolLM2's GGUF supplies the tokenizer, else SKIP)"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

EBB, GEN = sys.argv[1], sys.argv[2]
MODELS = os.environ.get("EBB_MODELS_DIR", os.path.expanduser("~/.local/share/ebb/models"))
TOK_MODEL = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
# Generated tokens per run: each one streams every non-resident layer again through the same
# slots, so 4 check what 8 did (decode was ~half the CPU of the test's 33 runs: 174 -> 97 s).
N = "4"
PROMPT = "The capital of France is"
RESIDENCIES = ("0", "0.25", "0.5", "0.75", "1")
Q4_0 = 2  # GGML type id
Q4_0_BLOCK = 18  # fp16 scale + 16 bytes of nibbles


def gguf_tensors(path):
    """Returns (data offset, [(name, type, byte offset in data, n elements)]) of a GGUF v3."""
    with open(path, "rb") as f:
        buf = f.read(64 << 20)  # metadata (the tokenizer's arrays included) fits in this
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = buf[pos:pos + n].decode("utf-8", "replace")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
              12: "d"}

    def value(t):
        if t in scalar:
            return take(scalar[t])
        if t == 8:
            return string()
        assert t == 9, "unknown GGUF value type %d" % t
        et, n = take("I"), take("Q")
        if et in scalar:  # skipped, not decoded: only general.alignment is needed
            nonlocal pos
            pos += n * struct.calcsize("<" + scalar[et])
            return None
        for _ in range(n):
            value(et)
        return None

    assert buf[:4] == b"GGUF", "not a GGUF file"
    pos = 4
    version, n_t, n_kv = take("I"), take("Q"), take("Q")
    assert version == 3, version
    align = 32
    for _ in range(n_kv):
        key = string()
        v = value(take("I"))
        if key == "general.alignment":
            align = v
    tensors = []
    for _ in range(n_t):
        name = string()
        n_dims = take("I")
        ne = 1
        for _ in range(n_dims):
            ne *= take("Q")
        ty, off = take("I"), take("Q")
        tensors.append((name, ty, off, ne))
    return (pos + align - 1) // align * align, tensors


def narrow_odd_layers(path):
    """Rewrites the nibbles of every Q4_0 matrix of the odd layers to 5 + 2 * (nibble & 3)."""
    table = bytes(((5 + 2 * ((b >> 4) & 3)) << 4) | (5 + 2 * (b & 3)) for b in range(256))
    data, tensors = gguf_tensors(path)
    n = 0
    with open(path, "r+b") as f:
        for name, ty, off, ne in tensors:
            m = re.match(r"blk\.(\d+)\.", name)
            if not m or int(m.group(1)) % 2 == 0 or ty != Q4_0:
                continue
            size = ne // 32 * Q4_0_BLOCK
            f.seek(data + off)
            blk = bytearray(f.read(size))
            assert len(blk) == size, name
            for k in range(2, Q4_0_BLOCK):
                blk[k::Q4_0_BLOCK] = blk[k::Q4_0_BLOCK].translate(table)
            f.seek(data + off)
            f.write(blk)
            n += 1
    return n


def ebb(args, env):
    p = subprocess.run([EBB] + args, env=env, capture_output=True, text=True)
    assert p.returncode == 0, "ebb %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr)
    return p.stdout


def main():
    if not os.path.exists(TOK_MODEL):
        print("SKIP: no model", TOK_MODEL)
        return 77
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "llama1b-q4_0.gguf")
        subprocess.run([GEN, "--shape", "llama3.2-1b", "--tokenizer-from", TOK_MODEL, "--type",
                        "q4_0", "-o", model], check=True, capture_output=True)
        narrowed = narrow_odd_layers(model)
        assert narrowed == 8 * 7, narrowed  # 8 odd layers x 7 matrices
        probe = os.path.join(d, "probe")
        with open(probe, "w") as f:  # plenty of memory: the forced residency decides
            f.write("available=64G\n")
        env = dict(os.environ, EBB_TEST_MEMPROBE_FILE=probe)
        sources = [("gguf", [])]
        for name, extra in (("pack", []), ("pack-zstd", ["--zstd"])):
            path = os.path.join(d, name)
            out = ebb(["pack", model, "-o", path] + extra, env)
            m = re.search(r"(\d+) records \((\d+) zstd\)", out)
            assert m, out
            recs, zrecs = int(m.group(1)), int(m.group(2))
            print("%s: %d records, %d zstd" % (name, recs, zrecs))
            if extra:  # the odd layers compress, the even ones and the globals do not
                assert zrecs == 8 and recs == 17, out
            else:
                assert zrecs == 0, out
            sources.append((name, ["--pack", path]))
        print("setup (generate, narrow, pack): %.1f s" % (time.monotonic() - t0))

        def both(extra):
            b = json.loads(ebb(["bench", "-m", model, "--prompt-tokens", "8", "--gen-tokens", N,
                                "--json"] + extra, env))
            r = json.loads(ebb(["run", "-m", model, "-p", PROMPT, "-n", N, "--temp", "0",
                                "--json"] + extra, env))
            return b, r

        ref_b, ref_r = both([])
        assert "stream" not in ref_b and "stream" not in ref_r, "plain path reports a streamer"
        assert len(ref_b["tokens"]) == int(N) and len(ref_b["top_logits"]) == int(N), ref_b
        assert len(ref_r["tokens"]) == int(N), ref_r
        print("%-9s residency -   : plain           bench ids %s run ids %s top logits %s" %
              ("gguf", ref_b["tokens"], ref_r["tokens"], ref_b["top_logits"]))
        runs = 1
        for src, extra in sources:
            for res in RESIDENCIES:
                b, r = both(["--residency", res] + extra)
                runs += 1
                n_layer = b["stream"]["layers_total"]
                assert n_layer == 16, b["stream"]
                want = int(float(res) * n_layer + 0.5)
                for tool, j in (("bench", b), ("run", r)):
                    st = j["stream"]
                    assert st["layers_resident"] == want, (src, res, tool, st)
                    if want < n_layer:
                        assert st["layers_read"] > 0 and st["bytes_per_token"] > 0, (tool, st)
                    else:
                        assert st["layers_read"] == 0 and st["slots"] == 0, (tool, st)
                mib = b["stream"]["bytes_per_token"] / 2**20
                print("%-9s residency %-4s: %2d/%d resident, %5.1f MiB/token, bench ids %s, "
                      "run ids %s" % (src, res, want, n_layer, mib, b["tokens"], r["tokens"]))
                assert b["tokens"] == ref_b["tokens"], "bench ids, %s at %s: %s != %s" % (
                    src, res, b["tokens"], ref_b["tokens"])
                assert b["top_logits"] == ref_b["top_logits"], "top logits, %s at %s: %s != %s" % (
                    src, res, b["top_logits"], ref_b["top_logits"])
                assert r["tokens"] == ref_r["tokens"], "run ids, %s at %s: %s != %s" % (
                    src, res, r["tokens"], ref_r["tokens"])
    print("OK: %d configurations (plain + 3 sources x %d residencies), ids and top logits "
          "identical, %.1f s" % (runs, len(RESIDENCIES), time.monotonic() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
