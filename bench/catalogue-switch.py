#!/usr/bin/env python3
"""Switching between two loaded models (issue 32): alternating requests to SmolLM2 and Gemma 3
270M against the same SmolLM2 requests with SmolLM2 alone in use. Starts `ebb serve` without -m
over a models dir holding the two files (links), loads both, then times SmolLM2's TTFT on
prompts it has not seen (no prompt-cache hits either way) and reads the loads counter.

usage: bench/catalogue-switch.py EBB_BIN [--rounds 5] [--models-dir DIR] [-- extra serve flags]
Prints one JSON line: SmolLM2's TTFTs alone and alternating with Gemma, their medians, and the
loads of each model before and after (equal: nothing reloaded).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

from importlib import util

spec = util.spec_from_file_location("ct", os.path.join(os.path.dirname(__file__),
                                                       "catalogue-ttft.py"))
ct = util.module_from_spec(spec)
spec.loader.exec_module(ct)

WORDS = ["fruit", "color", "tree", "bird", "fish", "city", "river", "metal", "flower", "planet",
         "animal", "song", "sport", "tool", "game", "drink", "stone", "cloud", "shape", "month"]


def loads(port):
    return {m["id"]: m["loads"] for m in ct.req(port, "GET", "/models/status")[1]["data"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ebb")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models-dir", default=os.path.expanduser("~/.local/share/ebb/models"))
    a, extra = ap.parse_known_args()
    a.extra = [x for x in extra if x != "--"]
    d = tempfile.mkdtemp(prefix="ebb-switch-")
    for m in (ct.SMOL, ct.GEMMA):
        os.symlink(os.path.join(a.models_dir, m + ".gguf"), os.path.join(d, m + ".gguf"))
    env = dict(os.environ, EBB_CONFIG="/dev/null")
    p = subprocess.Popen([a.ebb, "serve", "--models-dir", d, "--port", "0", "--ctx", "512",
                          "--parallel", "1", "--keep-alive", "-1", *a.extra],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    port = int(re.search(r":(\d+)$", p.stdout.readline().strip()).group(1))
    alone, alternating = [], []
    words = iter(WORDS * 4)
    try:
        for m in (ct.SMOL, ct.GEMMA):
            assert ct.req(port, "POST", "/models/load", {"model": m})[0] == 200
        before = loads(port)
        for _ in range(a.rounds):
            alone.append(ct.ttft(port, ct.SMOL, prompt="Name a %s." % next(words)))
        for _ in range(a.rounds):
            ct.ttft(port, ct.GEMMA, prompt="Name a %s." % next(words))
            alternating.append(ct.ttft(port, ct.SMOL, prompt="Name a %s." % next(words)))
        after = loads(port)
    finally:
        p.terminate()
        p.wait()
    print(json.dumps({"smol_alone_ttft_s": alone, "smol_alone_median_s": statistics.median(alone),
                      "smol_alternating_ttft_s": alternating,
                      "smol_alternating_median_s": statistics.median(alternating),
                      "loads_before": before, "loads_after": after}))


if __name__ == "__main__":
    main()
