#!/usr/bin/env bash
# One device call on the GPU machine (docs/PERFORMANCE.md, "Many clients"): builds llama.cpp's
# CUDA llama-server in the background (from .llama-src, carried; skip with EBB_NO_LLAMA=1),
# writes a random-weight 8B-shape Q4_0 GGUF, then drives `ebb serve --parallel 32` and
# `llama-server -np 32` on the same file with bench/load-chat.py (streamed chat requests of 128
# tokens at 1, 4, 8, 16 and 32 clients; aggregate tok/s, TTFT p50/p99) and the prefix-reuse
# check (a ~2000-token prompt resent with ~100 new tokens), then the prompt-cache store
# (bench/prompt-store.sh: alternating conversations on one slot, store on and off). With `ebb bench --batch`, the
# engine's batched decode alone too. Logs go to $OUT (or /tmp/out).
# llama-server's build also needs .llama-src/scripts/ui-assets.cmake, which
# ../shared/device/prep-llama-src leaves out (it drops scripts/): copy that one file from the same
# sdist (vendor/llama.cpp/scripts/); with -DLLAMA_USE_PREBUILT_UI=OFF it embeds no web UI and
# downloads nothing.
# Usage (device): source .device-carry/env.sh; bash bench/gpu-serve.sh
# Environment: EBB_SHAPE (llama3-8b), EBB_LEVELS (1,4,8,16,32), EBB_SERVE_ARGS (extra ebb serve
# arguments), EBB_SERVE_ENV (variables for ebb serve, comma-joined), EBB_NO_EBB=1 (llama-server
# only), EBB_BATCH_VARIANTS (see below), EBB_NO_STORE=1 / EBB_STORE_CONV (the store's run).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out"
log=$out/serve.log
carry=.device-carry
models=/tmp/models
shape=${EBB_SHAPE:-llama3-8b}
levels=${EBB_LEVELS:-1,4,8,16,32}
m=$models/$shape.gguf
mkdir -p "$models"
export XDG_CACHE_HOME=/tmp/cache

gpu_llama_build llama-server /tmp/ls
[ -f "$m" ] || ebb-gen-model --shape "$shape" --tokenizer-from "$carry/tok.gguf" --type q4_0 \
    -o "$m" >>"$log" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
py=python3
$py -c 'import httpx' 2>/dev/null || $py -c 'import aiohttp' 2>/dev/null ||
    say "neither httpx nor aiohttp: load-chat.py cannot run"

wait_http() { # port: until /health answers 200 (both servers answer 503 while loading)
    for _ in $(seq 1 360); do
        curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    return 1
}

if [ -n "${EBB_NO_EBB:-}" ]; then
    : # llama-server only
elif ebb bench --help 2>&1 | grep -q -- --batch; then
    for b in 1 4 8 16 32; do
        say "ebb bench --batch $b (decode 128 after a 16-token prompt each)"
        timeout 180 ebb bench -m "$m" --batch "$b" --prompt-tokens 16 --gen-tokens 128 2>&1 |
            tail -4 | tee -a "$log"
    done
    # EBB_BATCH_VARIANTS: settings (comma-joined variables) tried at batches of 8 and 32.
    for v in ${EBB_BATCH_VARIANTS:-}; do
        for b in 8 32; do
            say "ebb bench --batch $b with $v"
            env ${v//,/ } timeout 180 ebb bench -m "$m" --batch "$b" --prompt-tokens 16 \
                --gen-tokens 128 2>&1 | grep -E "aggregate" | tee -a "$log"
        done
    done
fi

ebb_serve() {
    say "ebb serve --parallel 32 ${EBB_SERVE_ARGS:-}"
    env ${EBB_SERVE_ENV:+${EBB_SERVE_ENV//,/ }} ebb serve -m "$m" --port 8091 --parallel 32 \
        --ctx 2560 ${EBB_SERVE_ARGS:-} >"$out/ebb-serve.log" 2>&1 &
    ebb_pid=$!
    if wait_http 8091; then
        timeout 300 $py bench/load-chat.py --url http://127.0.0.1:8091 --levels "$levels" \
            --label ebb --json "$out/load.json" 2>&1 | tee -a "$log"
        timeout 120 $py bench/load-chat.py --url http://127.0.0.1:8091 --prefix-reuse 400,20 \
            --label ebb --json "$out/load.json" 2>&1 | tee -a "$log"
        curl -s http://127.0.0.1:8091/metrics | grep -E "^ebb_(engine_steps|batch|prompt_cache)" |
            tee -a "$log"
    else
        say "ebb serve did not come up"; tail -20 "$out/ebb-serve.log" | tee -a "$log"
    fi
    kill "$ebb_pid" 2>/dev/null
    wait "$ebb_pid" 2>/dev/null
}
[ -n "${EBB_NO_EBB:-}" ] || ebb_serve
# The prompt-cache store: 3 conversations resending their history to a 1-slot server, with
# --prompt-cache 256M and 0 (skip with EBB_NO_STORE=1; EBB_STORE_CONV sets K,N,R).
if [ -z "${EBB_NO_EBB:-}" ] && [ -z "${EBB_NO_STORE:-}" ]; then
    say "prompt-cache store: bench/prompt-store.sh ${EBB_STORE_CONV:-3,800,4}"
    PY=$py OUT=$out timeout 900 bash bench/prompt-store.sh "$m" "${EBB_STORE_CONV:-3,800,4}" 2>&1 |
        grep -E "conversations:|^ebb_prompt_store_(hits|tokens|bytes)|^==" | tee -a "$log"
fi

if [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ]; then
    say "waiting for llama-server"
    if gpu_llama_wait /tmp/ls; then
        say "llama-server -np 32 (CUDA, -ngl 99, flash attention auto)"
        /tmp/ls/bin/llama-server -m "$m" --port 8092 -np 32 -c $((32 * 2560)) -ngl 99 \
            >"$out/llama-server.log" 2>&1 &
        ls_pid=$!
        if wait_http 8092; then
            timeout 300 $py bench/load-chat.py --url http://127.0.0.1:8092 --levels "$levels" \
                --label llama-server --json "$out/load.json" 2>&1 | tee -a "$log"
            timeout 120 $py bench/load-chat.py --url http://127.0.0.1:8092 \
                --prefix-reuse 400,20 --label llama-server --json "$out/load.json" 2>&1 |
                tee -a "$log"
        else
            say "llama-server did not come up"; tail -20 "$out/llama-server.log" | tee -a "$log"
        fi
        kill "$ls_pid" 2>/dev/null
    else
        say "llama-server build failed or timed out"; grep -A20 FAILED /tmp/ls.log | head -40 >>"$log"
        tail -5 /tmp/ls.log >>"$log"
    fi
fi
say "done"
