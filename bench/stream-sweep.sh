#!/bin/sh
# Layer streamer sweep (issue 6): `ebb bench` at 100/75/50/25/0% residency, printed as a
# markdown table with decode tokens/s next to the bandwidth limit = measured read throughput /
# streamed bytes per token (the I/O thread's own read rate in that run).
#   bench/stream-sweep.sh EBB MODEL [extra ebb bench options...]
# Environment: PROMPT (prompt tokens, default 32), GEN (generated tokens, default 16),
# LEVELS (default "1 0.75 0.5 0.25 0"), LIMIT_GBPS (the bandwidth the limit divides by; default
# the run's own file read rate, which fits streaming from the file: on a discrete GPU whose
# streamed layers stay in pinned slots, give the pinned host-to-device rate, e.g. 55 on the
# H100 machine). Set EBB_TEST_MEMPROBE_FILE to a file holding
# "available=64G" to keep the machine's free memory from lowering a forced residency.
set -eu
EBB=$1
MODEL=$2
shift 2
PROMPT=${PROMPT:-32}
GEN=${GEN:-16}
LEVELS=${LEVELS:-"1 0.75 0.5 0.25 0"}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for r in $LEVELS; do
    "$EBB" bench -m "$MODEL" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --residency "$r" \
        --json "$@" > "$TMP/$r.json"
done
LIMIT_GBPS=${LIMIT_GBPS:-} python3 - "$TMP" $LEVELS <<'PY'
import json, os, sys
d = sys.argv[1]
fixed = float(os.environ["LIMIT_GBPS"]) if os.environ.get("LIMIT_GBPS") else None
print("| residency | resident layers | prefill tok/s | decode tok/s | streamed MiB/token "
      "| read GB/s | limit tok/s | decode / limit | prefetch hits/misses | stall s | peak RSS MiB |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in sys.argv[2:]:
    j = json.load(open(os.path.join(d, r + ".json")))
    s = j.get("stream", {})
    bpt = s.get("bytes_per_token", 0)
    gbps = fixed if fixed else s.get("read_gbps", 0)
    lim = gbps * 1e9 / bpt if bpt and gbps else None
    print("| %d%% | %s/%s | %.2f | %.2f | %.1f | %s | %s | %s | %s/%s | %.3f | %.1f |" % (
        round(float(r) * 100), s.get("layers_resident", "-"), s.get("layers_total", "-"),
        j["prefill_tok_s"], j["decode_tok_s"], bpt / 2**20,
        "%.2f" % gbps if bpt else "-", "%.2f" % lim if lim else "-",
        "%.0f%%" % (100 * j["decode_tok_s"] / lim) if lim else "-",
        s.get("prefetch_hits", 0), s.get("prefetch_misses", 0), s.get("stall_seconds", 0),
        j["peak_rss_bytes"] / 2**20))
PY
