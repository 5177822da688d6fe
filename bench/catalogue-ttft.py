#!/usr/bin/env python3
"""Time to first token of a request to a model that is not loaded while another model serves
(issue 32's target: SmolLM2 while Gemma 3 270M streams), against the same request once the
model is loaded. Starts `ebb serve` without -m over a models dir holding the two files (links).

usage: bench/catalogue-ttft.py EBB_BIN [--runs 3] [--models-dir DIR] [--log FILE] [--idle]
                               [-- extra serve flags]
Prints one JSON line: cold (unloaded -> first token) and warm TTFTs in seconds, their medians,
and the load times the daemon reported. "warm" repeats the cold request (its whole prompt then
comes from the prompt cache); "warm_new_prompt" sends one the loaded model has not seen.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time

SMOL = "SmolLM2-135M-Instruct.Q4_1"
GEMMA = "gemma-3-270m-q4_k_m"


def req(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request(method, path, body=json.dumps(body) if body else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data) if data else None
    except ValueError:  # not JSON (a proxy's page, a cut body): the text as it came
        return r.status, data.decode(errors="replace")


def ttft(port, model, max_tokens=8, prompt="Say hello."):
    """Seconds from sending a streamed chat request to its first content chunk."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": prompt}]}
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    first = None
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ch = json.loads(line[6:])["choices"]
        if first is None and ch and ch[0]["delta"].get("content"):
            first = time.perf_counter() - t0
    c.close()
    return first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ebb")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--models-dir", default=os.path.expanduser("~/.local/share/ebb/models"))
    ap.add_argument("--log", help="the daemon's log goes here (its open and load timings)")
    ap.add_argument("--idle", action="store_true",
                    help="Gemma stays idle while SmolLM2 loads (no concurrent stream)")
    a, extra = ap.parse_known_args()
    a.extra = [x for x in extra if x != "--"]
    d = tempfile.mkdtemp(prefix="ebb-cat-")
    for m in (SMOL, GEMMA):
        os.symlink(os.path.join(a.models_dir, m + ".gguf"), os.path.join(d, m + ".gguf"))
    env = dict(os.environ, EBB_CONFIG="/dev/null")
    p = subprocess.Popen([a.ebb, "serve", "--models-dir", d, "--port", "0", "--ctx", "512",
                          "--parallel", "1", "--keep-alive", "-1", *a.extra],
                         stdout=subprocess.PIPE, text=True, env=env,
                         stderr=open(a.log, "w") if a.log else subprocess.DEVNULL)
    port = int(re.search(r":(\d+)$", p.stdout.readline().strip()).group(1))
    cold, warm, fresh, loads = [], [], [], []
    try:
        assert req(port, "POST", "/models/load", {"model": GEMMA})[0] == 200
        for _ in range(a.runs):
            req(port, "POST", "/models/unload", {"model": SMOL})
            busy = threading.Thread(target=ttft, args=(port, GEMMA, 64))
            if not a.idle:
                busy.start()  # Gemma streams while SmolLM2 loads
                time.sleep(0.5)
            cold.append(ttft(port, SMOL))
            if not a.idle:
                busy.join()
            st = {m["id"]: m for m in req(port, "GET", "/models/status")[1]["data"]}
            loads.append(st[SMOL]["load_seconds"])
            warm.append(ttft(port, SMOL))
            # The same request again reuses the whole prompt's KV entries (the prompt cache);
            # a prompt of the same length it has not seen pays the prefill a cold one does.
            fresh.append(ttft(port, SMOL, prompt="Name a %s." % ["fruit", "color", "tree",
                                                                 "bird", "fish"][len(fresh) % 5]))
    finally:
        p.terminate()
        p.wait()
    print(json.dumps({"cold_ttft_s": cold, "cold_median_s": statistics.median(cold),
                      "warm_ttft_s": warm, "warm_median_s": statistics.median(warm),
                      "warm_new_prompt_ttft_s": fresh,
                      "warm_new_prompt_median_s": statistics.median(fresh),
                      "load_seconds": loads}))


if __name__ == "__main__":
    main()
