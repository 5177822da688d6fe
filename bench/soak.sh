#!/bin/sh
# Soak: runs ebb serve (SmolLM2) for DURATION seconds under mixed load and checks that it holds
# up. The load, all at once:
#   - wrk on /v1/chat/completions with short answers (bench/wrk-chat.lua, WRK_MAX_TOKENS);
#   - STREAMERS streaming clients that hang up at a random point of their stream (or before
#     sending the whole request), then start again;
#   - a /metrics scrape every 2 s;
#   - FILLERS clients sending distinct long-ish prompts (PROMPT_WORDS words of their own, a few
#     answer tokens), so that the prompt-cache store (PROMPT_CACHE bytes) fills in the first
#     minutes and then evicts for the rest of the run (before the clock starts, PARALLEL such
#     prompts at once prime every slot);
#   - a SIGHUP (configuration reload) every 60 s.
# Recorded every 10 s: the daemon's RSS and the store's bytes used, entries and evictions
# (rss.csv). At the end: the statuses wrk and the streamers saw, wrk's socket errors, the
# reloads, and the engine state (no active slot, empty queue, the next request served). Fails
# when the daemon died, the engine is not idle, or the RSS moved by more than 2% (the last sample
# against the first) after warm-up: WARMUP seconds, or the first sample that sees the store full
# (an eviction counted) if that comes later.
#
#   bench/soak.sh [path/to/ebb]      (default build/daemon/ebb)
#
# Environment: DURATION (600), WARMUP (240), CONNS (4, wrk connections), STREAMERS (2),
# FILLERS (1; 0 = none), PROMPT_WORDS (400), PROMPT_CACHE (256M), WRK_MAX_TOKENS (8),
# PARALLEL (4), EBB_TEST_DEVICE (auto), EBB_MODELS_DIR, OUT (a folder for rss.csv, wrk.txt,
# streams.txt, fill.txt, daemon.log, summary.txt; default build/soak-DATE).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ebb=${1:-$here/../build/daemon/ebb}
models=${EBB_MODELS_DIR:-$HOME/.local/share/ebb/models}
duration=${DURATION:-600}
warmup=${WARMUP:-240}
out=${OUT:-$here/../build/soak-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
conf="$out/ebb.conf"
printf 'log_level = info\n' >"$conf"
commit=$(git -C "$here/.." describe --always --dirty 2>/dev/null || echo ?)

pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

EBB_CONFIG="$conf" "$ebb" serve -m "$models/SmolLM2-135M-Instruct.Q4_1.gguf" --port 0 \
    --device "${EBB_TEST_DEVICE:-auto}" --parallel "${PARALLEL:-4}" --queue 64 \
    --prompt-cache "${PROMPT_CACHE:-256M}" \
    >"$out/daemon.log" 2>&1 &
pid=$!
port=""
for _ in $(seq 1 100); do
    port=$(sed -n 's|^ebb: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$out/daemon.log")
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "soak: the daemon did not start"; cat "$out/daemon.log"; exit 1; }
url=http://127.0.0.1:$port
for _ in $(seq 1 600); do
    curl -sf "$url/health" >/dev/null && break
    sleep 0.2
done
rss() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }
# The store's bytes used, entries and evictions, comma-separated ("" where /metrics failed).
store() {
    curl -sf "$url/metrics" | awk '$1 == "ebb_prompt_store_bytes_used" {b = $2}
        $1 == "ebb_prompt_store_entries" {e = $2} $1 == "ebb_prompt_store_evictions_total" {v = $2}
        END {printf "%s,%s,%s", b, e, v}'
}

# Streaming clients that hang up at random points.
cat >"$out/streamer.py" <<'PY'
import json, random, socket, sys, time
port, until, seed = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
stats = {"started": 0, "cut_in_request": 0, "cut_in_stream": 0, "completed": 0, "errors": 0}
statuses = {}
while time.time() < until:
    body = json.dumps({"messages": [{"role": "user", "content": "Tell me a story about a %s."
                                     % rng.choice(["cat", "ship", "tree", "robot"])}],
                       "max_tokens": 48, "stream": True, "temperature": 0.7}).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    stats["started"] += 1
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        if rng.random() < 0.1:  # hang up before the request is complete
            s.sendall(req[: rng.randrange(1, len(req))])
            s.close()
            stats["cut_in_request"] += 1
            continue
        s.sendall(req)
        want = rng.choice([0, 50, 200, 600, 1500, 10 ** 9])
        got = b""
        while len(got) < want:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        if got.startswith(b"HTTP/1.1 "):
            code = got[9:12].decode()
            statuses[code] = statuses.get(code, 0) + 1
        if b"data: [DONE]" in got:
            stats["completed"] += 1
        else:
            stats["cut_in_stream"] += 1
        s.close()
    except OSError:
        stats["errors"] += 1
    time.sleep(rng.random() * 0.2)
print(json.dumps({"stats": stats, "statuses": statuses}))
PY

# Fillers: each prompt is PROMPT_WORDS words no other prompt starts with (a numbered opening,
# then words drawn at random), so every answer saves a new sequence into the store.
cat >"$out/filler.py" <<'PY'
import json, random, sys, time, urllib.request
port, until, seed, words = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
once = len(sys.argv) > 5  # one request, then the stats (the priming round)
rng = random.Random(seed)
vocab = ("river stone lamp garden winter copper letter engine harbor violet thunder meadow "
         "lantern marble orchard signal candle forest quartz ribbon saddle timber velvet anchor "
         "basket cellar falcon glacier hollow island jasmine kettle ladder mirror needle").split()
stats = {"sent": 0, "ok": 0, "failed": 0, "prompt_tokens": 0}
n = 0
while time.time() < until:
    n += 1
    text = "Note %d-%d: " % (seed, n) + " ".join(rng.choice(vocab) for _ in range(words))
    body = json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": 2,
                       "temperature": 0}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port, body,
                                 {"Content-Type": "application/json"})
    stats["sent"] += 1
    try:
        # The priming round's prompts arrive at once and wait for each other: minutes on a
        # loaded machine (at 120 s all four timed out, and their slots were cancelled).
        with urllib.request.urlopen(req, timeout=1800 if once else 120) as r:
            stats["prompt_tokens"] += json.load(r)["usage"]["prompt_tokens"]
            stats["ok"] += 1
    except Exception:
        stats["failed"] += 1
        time.sleep(1)
    if once:
        break
print(json.dumps(stats))
PY

# Priming: PARALLEL long prompts at once, so that every slot has held one (its KV pages up to
# that length are touched) before the RSS is first sampled: otherwise a slot that first gets a
# long prompt late in the run raises the RSS's high-water mark then, which is not growth.
if [ "${FILLERS:-1}" -gt 0 ]; then
    prime_pids=""
    for i in $(seq 1 "${PARALLEL:-4}"); do
        python3 "$out/filler.py" "$port" "$(($(date +%s) + 3600))" "$((1000 + i))" \
            "${PROMPT_WORDS:-400}" once >>"$out/prime.txt" 2>&1 &
        prime_pids="$prime_pids $!"
    done
    for p in $prime_pids; do wait "$p" || true; done
fi

t0=$(date +%s)
end=$((t0 + duration))
echo "seconds,rss_kb,store_bytes_used,store_entries,store_evictions" >"$out/rss.csv"
echo "0,$(rss),$(store)" >>"$out/rss.csv"
WRK_MAX_TOKENS=${WRK_MAX_TOKENS:-8} wrk -t1 -c"${CONNS:-4}" -d"${duration}s" --timeout 30s \
    -s "$here/wrk-chat.lua" "$url" >"$out/wrk.txt" 2>&1 &
pids="$pids $!"
wrk_pid=$!
stream_pids=""
for i in $(seq 1 "${STREAMERS:-2}"); do
    python3 "$out/streamer.py" "$port" "$end" "$i" >"$out/streams-$i.txt" 2>&1 &
    pids="$pids $!"
    stream_pids="$stream_pids $!"
done
for i in $(seq 1 "${FILLERS:-1}"); do
    python3 "$out/filler.py" "$port" "$end" "$i" "${PROMPT_WORDS:-400}" >"$out/fill-$i.txt" 2>&1 &
    pids="$pids $!"
    stream_pids="$stream_pids $!"
done
scrapes=0
scrape_fail=0
hups=0
next_rss=$((t0 + 10))
next_hup=$((t0 + 60))
while [ "$(date +%s)" -lt "$end" ]; do
    kill -0 "$pid" 2>/dev/null || { echo "soak: the daemon died"; tail -20 "$out/daemon.log"; exit 1; }
    if curl -sf -o /dev/null "$url/metrics"; then scrapes=$((scrapes + 1)); else scrape_fail=$((scrape_fail + 1)); fi
    now=$(date +%s)
    if [ "$now" -ge "$next_rss" ]; then
        echo "$((now - t0)),$(rss),$(store)" >>"$out/rss.csv"
        next_rss=$((next_rss + 10))
    fi
    if [ "$now" -ge "$next_hup" ]; then
        kill -HUP "$pid"
        hups=$((hups + 1))
        next_hup=$((next_hup + 60))
    fi
    sleep 2
done
wait "$wrk_pid" || true
for p in $stream_pids; do wait "$p" || true; done
pids=""
sleep 3
now=$(date +%s)
echo "$((now - t0)),$(rss),$(store)" >>"$out/rss.csv"

metrics=$(curl -sf "$url/metrics")
active=$(echo "$metrics" | awk '$1 == "ebb_active_slots" {print $2}')
queued=$(echo "$metrics" | awk '$1 == "ebb_queue_depth" {print $2}')
conns=$(echo "$metrics" | awk '$1 == "ebb_http_connections" {print $2}')
cancels=$(echo "$metrics" | awk '$1 == "ebb_cancellations_total" {print $2}')
after=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}' "$url/v1/chat/completions")
reloads=$(grep -c "configuration reloaded" "$out/daemon.log" || true)
alive=yes
kill -0 "$pid" 2>/dev/null || alive=no

# RSS after warm-up: the first and the last sample past WARMUP and past the store's first
# eviction (when there are fillers), and the range between them.
full_at=$(awk -F, -v f="${FILLERS:-1}" 'NR > 1 && (f == 0 || $5 > 0) {print $1; exit}' "$out/rss.csv")
[ -n "$full_at" ] || full_at=never
rss_verdict=$(awk -F, -v w="$warmup" -v f="$full_at" 'NR > 1 && $1 >= w && f != "never" && $1 >= f {
        if (!first) first = $2; last = $2
        if (!min || $2 < min) min = $2; if ($2 > max) max = $2 }
    END { if (!first) exit
          g = (last - first) * 100 / first; r = (max - min) * 100 / min
          printf "first %d kB, last %d kB, min %d, max %d: growth %+.2f%%, range %.2f%% %s\n",
                 first, last, min, max, g, r, (g <= 2 && g >= -2) ? "ok" : "FAIL" }' "$out/rss.csv")
[ -n "$rss_verdict" ] || rss_verdict="no sample after warm-up with the store full: FAIL"

{
    echo "soak: ended $(date -u +%FT%TZ), ${duration} s, commit $commit (at the start)"
    echo "daemon alive: $alive; reloads: $hups SIGHUP sent, $reloads logged"
    echo "wrk (chat, max_tokens ${WRK_MAX_TOKENS:-8}, ${CONNS:-4} connections):"
    grep -E "requests in|Requests/sec|statuses:|socket errors|latency ms" "$out/wrk.txt" | sed 's/^/  /'
    for f in "$out"/streams-*.txt; do echo "streamers: $(cat "$f")"; done
    for f in "$out"/fill-*.txt; do [ -e "$f" ] && echo "fillers: $(cat "$f")"; done
    echo "prompt store: full (first eviction) at ${full_at} s; at the end $(tail -1 "$out/rss.csv" | cut -d, -f3-) (bytes used, entries, evictions)"
    echo "metrics scrapes: $scrapes ok, $scrape_fail failed; cancellations: $cancels"
    echo "at the end: active slots $active, queue $queued, open connections $conns, next chat $after"
    echo "rss after ${warmup} s warm-up and the store full: $rss_verdict"
} | tee "$out/summary.txt"

[ "$alive" = yes ] && [ "$active" = 0 ] && [ "$queued" = 0 ] && [ "$after" = 200 ] &&
    echo "$rss_verdict" | grep -q ' ok$'
