#!/usr/bin/env bash
# The prompt-cache store (docs/PERFORMANCE.md, "Prompt-cache store"): K chat conversations take
# turns against `ebb serve --parallel 1`, each resending its history (bench/load-chat.py
# --conversations), once with the store (--prompt-cache 256M) and once without (0), in the same
# run; prints the time to first token of the resends with and without.
# Usage: bash bench/prompt-store.sh MODEL.gguf [K,N,R]   (default 3,300,4)
# Environment: EBB_BIN (default: ebb on PATH), EBB_DEVICE (default auto), EBB_PORT (8093),
# PY (python with httpx or aiohttp; default python3), OUT (logs; default /tmp/out),
# EBB_SERVE_ARGS (more ebb serve arguments).
set -uo pipefail
model=${1:?usage: prompt-store.sh MODEL.gguf [K,N,R]}
conv=${2:-3,300,4}
ebb=${EBB_BIN:-ebb}
py=${PY:-python3}
port=${EBB_PORT:-8093}
out=${OUT:-/tmp/out}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for cache in ${EBB_STORE_SIZE:-256M} 0; do
    echo "== ebb serve --parallel 1 --prompt-cache $cache ${EBB_SERVE_ARGS:-}"
    "$ebb" serve -m "$model" --port "$port" --parallel 1 --ctx 4096 --device "${EBB_DEVICE:-auto}" \
        --prompt-cache "$cache" ${EBB_SERVE_ARGS:-} >"$out/prompt-store-$cache.log" 2>&1 &
    pid=$!
    up=
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && up=1 && break
        sleep 0.5
    done
    if [ -n "$up" ]; then
        timeout 900 "$py" "$here/load-chat.py" --url "http://127.0.0.1:$port" --tokens 8 \
            --conversations "$conv" --label "store-$cache" --json "$out/prompt-store.json"
        curl -s "http://127.0.0.1:$port/metrics" | grep -E "^ebb_prompt_(store|cache)"
    else
        echo "ebb serve did not come up"; tail -20 "$out/prompt-store-$cache.log"
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
done
