#!/usr/bin/env python3
"""The layer split (docs/SCALING.md, "Layer split") on two PoCL devices (POCL_DEVICES="pthread
pthread"): `--split layer` over cl:0:0,cl:0:1 gives the greedy tokens of one device for SmolLM2
and Gemma 3 270M, a short prompt and one of several chunks (EBB_CL_BATCH 128 and 256 over a
prompt of about 300 tokens; the long one also with the next device's step enqueued ahead
behind a user event, EBB_CL_SPLIT_GATE=1), then 16 decoded tokens; --tensor-split puts the boundary where
asked (the device name lists each device's layers); `ebb bench --batch 3` on the split decodes
slot 0 as the single stream; `ebb perplexity` (every row's logits) over the list alone (split
auto) scores as one device does; three devices (two boundaries) give the same tokens; --split layer
with one device is a no-op (the whole model on it);
--split none with a list and a bad --tensor-split are clear errors; `ebb serve --split layer`
answers a greedy completion as one device does, again from its prompt cache, and so does `ebb
serve` with --split auto when the memory probes say the model does not fit one device.

Usage: test-split.py EBB
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

MODELS = os.environ.get("EBB_MODELS_DIR", os.path.expanduser("~/.local/share/ebb/models"))
SMOL = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA = os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")
SHORT = "The quick brown fox jumps over the lazy dog. "
LONG = ("In the spring the river rose over its banks and the village moved its boats to the "
        "high field, where the children counted them every morning before school. ") * 9
PAIR = "cl:0:0,cl:0:1"


def run(ebb, env, model, prompt, *args, ok=True):
    p = subprocess.run([ebb, "run", "-m", model, "-p", prompt, "-n", "16", "--temp", "0",
                        "--json", *args], capture_output=True, text=True, env=env)
    if not ok:
        return p
    if p.returncode != 0:
        raise SystemExit(f"ebb run {' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    d = json.loads(p.stdout)
    return d["tokens"], d["device"], d.get("prompt_tokens")


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def serve_check(ebb, env, check, auto=False):
    """ebb serve on the split: a greedy completion equals ebb run's text on one device, and again
    once the prompt went to the prompt-cache store (two other prompts took the two slots) and
    came back from it. auto: --split left at auto, with the memory probes saying that 60 MiB are
    free (EBB_TEST_MEMPROBE_FILE), less than SmolLM2's 94 MiB file: the split is chosen."""
    one = subprocess.run([ebb, "run", "-m", SMOL, "-p", LONG[:160], "-n", "12", "--temp", "0",
                          "--json", "--device", "cl:0:0"], capture_output=True, text=True,
                         env=env)
    want = json.loads(one.stdout)["text"] if one.returncode == 0 else None
    err = tempfile.TemporaryFile(mode="w+")
    args = [ebb, "serve", "-m", SMOL, "--port", "0", "--device", PAIR, "--parallel", "2",
            "--ctx", "1024"]
    senv = dict(env)
    if auto:
        probe = tempfile.NamedTemporaryFile(mode="w", suffix=".probe", delete=False)
        probe.write("available=60M\n")
        probe.close()
        senv["EBB_TEST_MEMPROBE_FILE"] = probe.name
    else:
        args += ["--split", "layer"]
    what = "serve (auto, 60 MiB free)" if auto else "serve --split layer"
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True, env=senv)
    try:
        line = p.stdout.readline()
        m = re.search(r":(\d+)\s*$", line)
        if not m:
            err.seek(0)
            check(f"{what} listens", False, line + err.read()[-1000:])
            return
        port = int(m.group(1))
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        texts = []
        for prompt in (LONG[:160], "Write a poem about the sea and the old lighthouse keeper",
                       "List three colors of the rainbow and say why the sky is blue",
                       LONG[:160]):
            d = post(port, "/v1/completions", {"model": os.path.basename(SMOL)[:-5],
                                               "prompt": prompt, "max_tokens": 12,
                                               "temperature": 0})
            texts.append(d["choices"][0]["text"])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        hits = re.search(r"^ebb_prompt_cache_hits_total (\d+)", metrics, re.M)
        check(f"{what}: greedy completion == ebb run on one device",
              texts[0] == want, f"{texts[0]!r} vs {want!r}")
        check(f"{what}: the same again through the prompt cache",
              texts[3] == want and hits and int(hits.group(1)) >= 1,
              f"{texts[3]!r}, hits {hits.group(1) if hits else None}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/models/status", timeout=10) as r:
            st = json.load(r)
        check(f"{what}: one replica over both devices",
              [x["device"] for x in st["data"][0]["replicas"]] == [PAIR], st["data"][0])
        if auto:
            err.seek(0)
            log = err.read()
            check(f"{what}: the log says why", "layer split" in log and "does not fit" in log,
                  log[-800:])
    finally:
        p.terminate()
        p.wait(timeout=60)
        if auto:
            os.unlink(probe.name)


def main():
    ebb = sys.argv[1]
    env = dict(os.environ)
    env.pop("EBB_AUTO_DEVICE", None)
    env["POCL_DEVICES"] = "pthread pthread"
    p = subprocess.run([ebb, "info", "--devices"], capture_output=True, text=True, env=env)
    if "cl:0:1" not in p.stdout:
        print(f"skip: two PoCL devices not listed: {p.stdout} {p.stderr}")
        return 77
    for m in (SMOL, GEMMA):
        if not os.path.exists(m):
            print(f"skip: missing model {m} (set EBB_MODELS_DIR)")
            return 77
    fails = []

    def check(what, cond, detail=""):
        print(("ok   " if cond else "FAIL ") + what + (f": {detail}" if not cond else ""))
        if not cond:
            fails.append(what)

    for model, n_layer in ((SMOL, 30), (GEMMA, 18)):
        name = os.path.basename(model)
        for batch in ("128", "256"):
            e = dict(env, EBB_CL_BATCH=batch)
            prompts = (("short", SHORT), ("long", LONG)) if batch == "128" else (("long", LONG),)
            for label, prompt in prompts:
                one, dev1, n_prompt = run(ebb, e, model, prompt, "--device", "cl:0:0")
                two, dev2, _ = run(ebb, e, model, prompt, "--device", PAIR, "--split", "layer")
                half = (n_layer + 1) // 2
                check(f"{name} {label} prompt ({n_prompt} tokens, chunks of {batch}): split "
                      "tokens == one device's", one == two, f"{one} vs {two}")
                want = f"cl:0:0 layers 0-{half - 1}, cl:0:1 layers {half}-{n_layer - 1}"
                check(f"{name}: equal free memory splits at layer {half}", want in dev2,
                      f"{dev2!r} lacks {want!r}")
                if label == "long" and batch == "128":
                    check(f"{name}: the long prompt takes several chunks", n_prompt > 256,
                          n_prompt)
                    # the next device's step enqueued ahead behind a user event (not the default)
                    gated, _, _ = run(ebb, dict(e, EBB_CL_SPLIT_GATE="1"), model, prompt,
                                      "--device", PAIR, "--split", "layer")
                    check(f"{name}: long prompt, EBB_CL_SPLIT_GATE=1: split tokens == one "
                          "device's", one == gated, f"{one} vs {gated}")
        # a forced proportion: a quarter of the layers on the first device
        q = (n_layer + 2) // 4
        one, _, _ = run(ebb, env, model, SHORT, "--device", "cl:0:0")
        three, dev, _ = run(ebb, env, model, SHORT, "--device", PAIR, "--split", "layer",
                            "--tensor-split", "1,3")
        want = f"cl:0:0 layers 0-{q - 1}, cl:0:1 layers {q}-{n_layer - 1}"
        check(f"{name}: --tensor-split 1,3 puts the boundary at layer {q}", want in dev,
              f"{dev!r} lacks {want!r}")
        check(f"{name}: --tensor-split 1,3 tokens == one device's", one == three,
              f"{one} vs {three}")

    # the batched pass: slot 0 of three decodes the single stream's tokens, on the split
    p = subprocess.run([ebb, "bench", "-m", SMOL, "--device", PAIR, "--split", "layer",
                        "--prompt-tokens", "12", "--gen-tokens", "8", "--batch", "3", "--json"],
                       capture_output=True, text=True, env=env)
    ok = p.returncode == 0
    d = json.loads(p.stdout) if ok else {}
    check("bench --batch 3 on the split: slot 0 == the single stream",
          ok and d["batch"]["slot0_same_tokens"] == d["gen_tokens"] and
          "layer split" in d.get("device", "layer split"),
          p.stderr[-1500:] if not ok else d.get("batch"))

    # one device: nothing to split, the whole model on it
    one, dev1, _ = run(ebb, env, SMOL, SHORT, "--device", "cl:0:0")
    same, dev, _ = run(ebb, env, SMOL, SHORT, "--device", "cl:0:0", "--split", "layer")
    check("--split layer with one device is a no-op", same == one and "split" not in dev, dev)

    # every row's logits (ebb perplexity, logits_all), the list alone taken as a layer split
    text = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "perplexity",
                        "coriolanus.txt")
    ppl = []
    for dev in ("cl:0:0", PAIR):
        p = subprocess.run([ebb, "perplexity", "-m", SMOL, "-f", text, "--ctx", "128",
                            "--chunks", "2", "--json", "--device", dev], capture_output=True,
                           text=True, env=env)
        ppl.append(json.loads(p.stdout)["nll"] if p.returncode == 0 else p.stderr[-500:])
    check("perplexity over the device list (split auto) == one device's, bit for bit",
          isinstance(ppl[0], float) and ppl[0] == ppl[1], ppl)

    # three devices: two boundaries, the gates opened in turn
    e3 = dict(env, POCL_DEVICES="pthread pthread pthread")
    one, _, _ = run(ebb, e3, SMOL, SHORT, "--device", "cl:0:0")
    three, dev, _ = run(ebb, e3, SMOL, SHORT, "--device", "all", "--split", "layer",
                        "--tensor-split", "1,2,1")
    want = "cl:0:0 layers 0-7, cl:0:1 layers 8-22, cl:0:2 layers 23-29"
    check("three devices (1,2,1): boundaries and tokens == one device's",
          three == one and want in dev, f"{dev!r}: {three} vs {one}")

    serve_check(ebb, env, check)
    serve_check(ebb, env, check, auto=True)

    # errors
    p = run(ebb, env, SMOL, SHORT, "--device", PAIR, "--split", "none", ok=False)
    check("--split none with a list: exit 1 naming data parallel",
          p.returncode == 1 and "--split none" in p.stderr and "--split layer" in p.stderr,
          (p.returncode, p.stderr[-500:]))
    p = run(ebb, env, SMOL, SHORT, "--device", PAIR, "--split", "layer", "--tensor-split",
            "1,2,3", ok=False)
    check("--tensor-split with three numbers for two devices: exit 1 naming it",
          p.returncode == 1 and "--tensor-split '1,2,3'" in p.stderr, p.stderr[-500:])
    p = run(ebb, env, SMOL, SHORT, "--device", PAIR, "--split", "sideways", ok=False)
    check("--split sideways: usage error", p.returncode == 2 and "--split" in p.stderr,
          p.stderr[-300:])
    return 1 if fails else 0


sys.exit(main())
