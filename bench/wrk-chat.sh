#!/bin/sh
# Load test: starts ebb serve with SmolLM2 on an ephemeral port, runs wrk with short chat
# requests, then checks the daemon is alive and compares its RSS before and after.
# Usage: bench/wrk-chat.sh [path/to/ebb] (defaults: build/daemon/ebb)
# Environment: CONNS (32), DURATION (30s), THREADS (2), PARALLEL (4), QUEUE (64),
# EBB_TEST_DEVICE (auto), EBB_MODELS_DIR, WRK_MAX_TOKENS (16), WRK_STREAM (0).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ebb=${1:-$here/../build/daemon/ebb}
models=${EBB_MODELS_DIR:-$HOME/.local/share/ebb/models}
out=$(mktemp)
trap 'kill "$pid" 2>/dev/null || true; rm -f "$out"' EXIT
EBB_CONFIG=/dev/null "$ebb" serve -m "$models/SmolLM2-135M-Instruct.Q4_1.gguf" --port 0 \
    --device "${EBB_TEST_DEVICE:-auto}" --parallel "${PARALLEL:-4}" --queue "${QUEUE:-64}" \
    --log-level warn >"$out" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
    port=$(sed -n 's|^ebb: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$out")
    [ -n "$port" ] && break
    sleep 0.1
done
url=http://127.0.0.1:$port
for _ in $(seq 1 600); do
    curl -sf "$url/health" >/dev/null && break
    sleep 0.2
done
rss() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }
# Warm up (first requests fill caches), then measure RSS around the run.
wrk -t1 -c2 -d3s -s "$here/wrk-chat.lua" "$url" >/dev/null
rss0=$(rss)
wrk -t"${THREADS:-2}" -c"${CONNS:-32}" -d"${DURATION:-30s}" --timeout 60s \
    -s "$here/wrk-chat.lua" "$url"
sleep 1
rss1=$(rss)
wrk -t"${THREADS:-2}" -c"${CONNS:-32}" -d"${DURATION:-30s}" --timeout 60s \
    -s "$here/wrk-chat.lua" "$url" | grep -E "Requests/sec|statuses|socket errors"
sleep 1
rss2=$(rss)
curl -sf "$url/health" >/dev/null && echo "daemon alive after the runs"
echo "RSS KiB: after warm-up $rss0, after run 1 $rss1, after run 2 $rss2"
curl -s "$url/metrics" | grep -E "^ebb_(requests_total|generated_tokens_total|rejected|cancel)"
