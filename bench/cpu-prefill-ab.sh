#!/usr/bin/env bash
# Two ebb binaries' CPU-device prefill on one model, in alternation with llama.cpp's llama-bench,
# so that a shared machine's load falls on all of them alike: ROUNDS rounds (default 3), each
# `OLD bench --device cpu`, `NEW bench --device cpu` (the same prompt length, one generated
# token) and, with LLAMA_BENCH set, `llama-bench -p PROMPT -n 0 -r 1`; the load average before
# each round. THREADS: both sides' threads (default: the online CPUs).
# Usage: [ROUNDS=N] [LLAMA_BENCH=PATH] [THREADS=T] bench/cpu-prefill-ab.sh OLD NEW MODEL [PROMPT]
set -euo pipefail
old=$1 new=$2 model=$3 np=${4:-256}
rounds=${ROUNDS:-3} threads=${THREADS:-$(nproc)} lb=${LLAMA_BENCH:-}
echo "date: $(date -u +%FT%TZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "cores: $(nproc)  threads: $threads  prompt: $np  model: $model"
eb() { # label binary
    "$2" bench -m "$model" --prompt-tokens "$np" --gen-tokens 1 --device cpu \
        --host-threads "$threads" 2>/dev/null | grep -E '^prefill ' | sed "s/^/$1: /"
}
for r in $(seq 1 "$rounds"); do
    echo "round $r, load $(cut -d' ' -f1-3 /proc/loadavg)"
    eb old "$old"
    eb new "$new"
    if [ -n "$lb" ]; then
        "$lb" -m "$model" -p "$np" -n 0 -t "$threads" -r 1 -o csv 2>/dev/null |
            python3 -c '
import csv, sys
for row in csv.DictReader(sys.stdin):
    print("llama.cpp: prefill %.2f tok/s" % float(row["avg_ts"]))'
    fi
done
