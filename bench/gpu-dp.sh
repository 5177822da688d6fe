#!/usr/bin/env bash
# Issue 34's data parallel figure (docs/SCALING.md, "Several GPUs in one daemon"): on the
# two-GPU machine, in one device call, bench/load-chat.py's streamed chat load (128 tokens,
# 64 clients by default) against
#   1. `ebb serve --device cl:0:0 --parallel 64`      (one GPU),
#   2. `ebb serve --device all --parallel 32`         (both GPUs, 32 slots each: 64 in all),
#   3. `llama-server -np 64` over both GPUs (CUDA, -ngl 99, llama.cpp's default layer split;
#      built in the background from the carried .llama-src as bench/gpu-serve.sh does; skipped
#      with EBB_NO_LLAMA=1 or without .llama-src),
# all on the same random-weight 8B-shape Q4_0 GGUF from ebb-gen-model. Prints each run's
# aggregate tok/s and the ratio of `--device all` to one GPU, and the per-device request
# counters of the `--device all` daemon (both must have served). A run that has any request
# fail (non-200, cut stream) makes load-chat.py print the error instead of a figure. Logs and
# load-chat.py's JSON lines go to $OUT (or /tmp/out).
#
# Usage (device, kind nvidia-h200-x2): source .device-carry/env.sh; bash bench/gpu-dp.sh
# Environment: EBB_MODEL (a GGUF; default the generated one), EBB_SHAPE (llama3-8b),
# EBB_CLIENTS (64), EBB_TOKENS (128), EBB_SERVE_ARGS (extra ebb serve arguments for both runs),
# EBB_NO_LLAMA=1 (skip llama-server), PY (a python with httpx or aiohttp for load-chat.py).
# Tried end to end on PoCL's two CPU devices with SmolLM2 (EBB_MODEL, EBB_CLIENTS=4,
# EBB_TOKENS=8, EBB_NO_LLAMA=1, POCL_DEVICES="pthread pthread"): both runs completed and both
# devices counted requests; CPU figures say nothing about GPUs and are not recorded.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out"
log=$out/dp.log
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/cache}
shape=${EBB_SHAPE:-llama3-8b}
clients=${EBB_CLIENTS:-64}
tokens=${EBB_TOKENS:-128}
half=$(((clients + 1) / 2))
py=${PY:-python3}

gpu_llama_build llama-server /tmp/ls
m=${EBB_MODEL:-/tmp/models/$shape-q4_0.gguf}
if [ -z "${EBB_MODEL:-}" ]; then
    mkdir -p /tmp/models
    gpu_gen "$shape" q4_0 "$m"
fi
[ -f "$m" ] || { say "no model $m"; exit 1; }
command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee -a "$log"
git -C "$here/.." log -1 --format='commit %h %cd' 2>/dev/null | tee -a "$log"
ebb info --devices 2>&1 | grep '^cl:' | tee -a "$log"

wait_http() { # port: until /health answers 200 (every server answers 503 while loading)
    for _ in $(seq 1 480); do
        curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    return 1
}
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

# load PORT LABEL: the streamed load at $clients clients; echoes the aggregate tok/s (empty if
# the run failed).
load() {
    local r
    r=$(timeout 900 "$py" "$here/load-chat.py" --url "http://127.0.0.1:$1" --levels "$clients" \
        --tokens "$tokens" --label "$2" --json "$out/load.json" 2>&1 | tee -a "$log" | tail -1)
    sed -n 's/.*: *\([0-9.]*\) tok\/s aggregate.*/\1/p' <<<"$r"
}

# serve NAME PORT ARGS...: starts ebb serve, waits for it, runs the load, stops it.
declare -A tps
serve() {
    local name=$1 port=$2
    shift 2
    say "$name: ebb serve $*"
    ebb serve -m "$m" --port "$port" --ctx 2560 "$@" ${EBB_SERVE_ARGS:-} \
        >"$out/ebb-$name.log" 2>&1 &
    pid=$!
    if wait_http "$port"; then
        curl -s "http://127.0.0.1:$port/health" | tee -a "$log"
        echo | tee -a "$log"
        tps[$name]=$(load "$port" "$name")
        say "$name: ${tps[$name]:-failed} tok/s aggregate at $clients clients"
        curl -s "http://127.0.0.1:$port/metrics" | grep -E '^ebb_device_(requests|jobs_started)' |
            tee -a "$log"
    else
        say "$name did not come up"
        tail -20 "$out/ebb-$name.log" | tee -a "$log"
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=
}

serve one-gpu 8111 --device cl:0:0 --parallel "$clients"
serve device-all 8112 --device all --parallel "$half"

if [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ]; then
    say "waiting for llama-server's build"
    if gpu_llama_wait /tmp/ls; then
        say "llama-server -np $clients over both GPUs (CUDA, -ngl 99, default split)"
        /tmp/ls/bin/llama-server -m "$m" --port 8113 -np "$clients" -c $((clients * 2560)) \
            -ngl 99 >"$out/llama-server.log" 2>&1 &
        pid=$!
        if wait_http 8113; then
            tps[llama]=$(load 8113 llama-server-2gpu)
            say "llama-server: ${tps[llama]:-failed} tok/s aggregate at $clients clients"
        else
            say "llama-server did not come up"
            tail -20 "$out/llama-server.log" | tee -a "$log"
        fi
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        pid=
    else
        say "llama-server build failed or timed out"
        tail -5 /tmp/ls.log >>"$log"
    fi
fi

a=${tps[one-gpu]:-} b=${tps[device-all]:-}
if [ -n "$a" ] && [ -n "$b" ]; then
    l=${tps[llama]:+${tps[llama]} tok/s}
    say "$clients clients: one GPU $a tok/s, --device all $b tok/s, ratio $(awk "BEGIN{printf \"%.2f\", $b/$a}")x; llama-server over both GPUs ${l:-not run}"
else
    say "a run failed (see $log)"
fi
say "done"
