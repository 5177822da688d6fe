#!/bin/bash
# The CPU device's repacked prefill rows (runtime/model/ref-llama.c, repack()) on SmolLM2 (Q4_1):
# by default the copy is made (peak RSS above the unrepacked run's by at least the copy's size)
# and the greedy tokens are those of EBB_CPU_REPACK=0; where the host probes say the copy would
# take more than half of the available memory (EBB_TEST_MEMPROBE_FILE: available=100M) it is
# skipped with a log line naming both sizes, the RSS staying at the unrepacked run's, and
# EBB_CPU_REPACK=1 makes it anyway.
#
#   test-cpu-repack.sh EBB_BINARY
set -u

ebb=$1
. "$(dirname "$0")/lib.sh"

[ -f "$smol" ] || { echo "skip: missing model $smol (set EBB_MODELS_DIR)"; exit 77; }
args=(bench -m "$smol" --device cpu --prompt-tokens 16 --gen-tokens 8 --json)
echo "available=100M" > "$tmp/probe"

run() { # label, env...: one bench; its JSON kept as $tmp/label.json, stderr as $tmp/label.err
    local label=$1
    shift
    env "$@" "$ebb" "${args[@]}" > "$tmp/$label.json" 2> "$tmp/$label.err" ||
        fail "$label: exit $?: $(head -c 300 "$tmp/$label.err")"
}
run plain EBB_CPU_REPACK=0
run repacked X=1
run guarded EBB_TEST_MEMPROBE_FILE="$tmp/probe"
run forced EBB_TEST_MEMPROBE_FILE="$tmp/probe" EBB_CPU_REPACK=1

grep -q "would take more than half of the 100 MiB available" "$tmp/guarded.err" ||
    fail "guarded: no log line: $(head -c 400 "$tmp/guarded.err")"
for l in plain repacked forced; do
    grep -q "would take more than half" "$tmp/$l.err" && fail "$l: the guard's line appeared"
done
python3 - "$tmp" <<'PY' || fail "repack memory or tokens"
import json, sys
t = sys.argv[1]
d = {l: json.load(open(f"{t}/{l}.json")) for l in ("plain", "repacked", "guarded", "forced")}
rss = {l: d[l]["peak_rss_bytes"] for l in d}
mib = 1 << 20
# SmolLM2's layers in Q4_1: a copy of about 1.2x their ~63 MiB
assert rss["repacked"] - rss["plain"] > 50 * mib, rss
assert rss["forced"] - rss["plain"] > 50 * mib, rss
assert abs(rss["guarded"] - rss["plain"]) < 20 * mib, rss
toks = {l: d[l]["tokens"] for l in d}
assert all(toks[l] == toks["plain"] for l in toks), toks
PY

[ "$fails" -eq 0 ] || exit 1
echo "ok"
