#!/usr/bin/env bash
# The CPU device against the OpenCL engine on the same CPU (PoCL) and llama.cpp's llama-bench,
# in alternation: ROUNDS rounds (default 2), each `ebb bench --device cpu`, `ebb bench --device
# cl` and `llama-bench` on the same model, prompt and generation lengths, so that a shared
# machine's load falls on all of them alike; then, with BATCH (default 8), `ebb bench --device
# cpu --batch BATCH` on a BATCH_PROMPT-token prompt (default 32; aggregate decode of BATCH slots
# against one; BATCH=0 skips it). LLAMA_BENCH: a llama-bench
# binary (build it from llama.cpp's source with cmake -DGGML_NATIVE=ON, target llama-bench;
# skipped with a note when unset); THREADS: both sides' threads (default: the online CPUs);
# DEPTH=N: every run after N tokens of context (`ebb bench -d N`, `llama-bench -d N`), the
# OpenCL engine skipped (PoCL at depth is minutes), CL=0 skips it at any depth.
# Usage: [ROUNDS=N] [LLAMA_BENCH=PATH] [THREADS=T] [DEPTH=N] bench/cpu-vs-llamacpp.sh EBB MODEL [PROMPT] [GEN]
set -euo pipefail
ebb=$1 model=$2 np=${3:-256} ng=${4:-64}
rounds=${ROUNDS:-2} threads=${THREADS:-$(nproc)} lb=${LLAMA_BENCH:-} batch=${BATCH:-8}
depth=${DEPTH:-0} cl=${CL:-1}
[ "$depth" -eq 0 ] || cl=0
dargs=() ldargs=()
[ "$depth" -eq 0 ] || dargs=(-d "$depth" --ctx $((depth + np + ng))) ldargs=(-d "$depth")
echo "date: $(date -u +%FT%TZ)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "cores: $(nproc)  load: $(cut -d' ' -f1-3 /proc/loadavg)  threads: $threads"
echo "commit: $(git -C "$(dirname "$0")" describe --always --dirty 2>/dev/null || echo unknown)"
[ -z "$lb" ] || echo "llama.cpp: $("$lb" --version 2>&1 | grep -m1 -i version || echo unknown)"
eb() { # device [extra args]
    local d=$1
    shift
    "$ebb" bench -m "$model" --prompt-tokens "$np" --gen-tokens "$ng" --device "$d" \
        --host-threads "$threads" ${dargs[@]+"${dargs[@]}"} "$@" 2>/dev/null | grep -E '^(prefill|decode|  (prefill|decode)) ' |
        sed "s/^/ebb $d: /"
}
for r in $(seq 1 "$rounds"); do
    echo "round $r, load $(cut -d' ' -f1 /proc/loadavg)"
    eb cpu
    [ "$cl" = 0 ] || eb cl
    if [ -n "$lb" ]; then
        "$lb" -m "$model" -p "$np" -n "$ng" -t "$threads" ${ldargs[@]+"${ldargs[@]}"} -r 1 -o csv \
            2>/dev/null |
            python3 -c '
import csv, sys
for row in csv.DictReader(sys.stdin):
    kind = "prefill" if int(row["n_prompt"]) else "decode"
    print("llama.cpp: %s %.2f tok/s" % (kind, float(row["avg_ts"])))'
    else
        echo "llama.cpp: LLAMA_BENCH not set"
    fi
done
[ "$batch" -gt 0 ] || exit 0
echo "batched decode, $batch slots:"
dargs=() # from position 0
np=${BATCH_PROMPT:-32} eb cpu --batch "$batch" | grep -E 'decode'
