#!/usr/bin/env python3
"""Prints one line per llama-bench JSON line on stdin (llama-bench -o jsonl): prompt, generated
and depth tokens and the mean tokens per second, as bench/gpu-longctx.sh logs them."""
import json
import sys

for line in sys.stdin:
    if not line.strip().startswith("{"):
        continue
    r = json.loads(line)
    print(f"llama-bench n_prompt {r['n_prompt']} n_gen {r['n_gen']} n_depth {r.get('n_depth', 0)}: "
          f"{r['avg_ts']:.1f} tok/s", flush=True)
