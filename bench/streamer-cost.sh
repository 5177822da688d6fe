#!/bin/sh
# The layer streamer's cost at 100% residency (issue 6: "within 3% of a build without the
# streamer"). Runs `ebb bench` alternately with a build made with -Dstreamer=false (the plain
# path alone), the normal build without a budget (the streamer not opened) and the normal build
# with a budget every layer fits in (the streamer opened, re-planning every 64 tokens, all layers
# resident), and prints the median decode tokens/s of each and their ratios to the baseline.
#   bench/streamer-cost.sh EBB EBB_NO_STREAMER MODEL [extra ebb bench options...]
# Environment: ROUNDS (default 10), PROMPT (prompt tokens, default 16), GEN (tokens decoded per
# run, default 128), BUDGET (default 1T: the probes' free memory is then the limit).
# The order of the three variants rotates from round to round so that drift (clocks, caches,
# other load) spreads over all of them.
set -eu
WITH=$1
WITHOUT=$2
MODEL=$3
shift 3
ROUNDS=${ROUNDS:-10}
PROMPT=${PROMPT:-16}
GEN=${GEN:-128}
BUDGET=${BUDGET:-1T}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
one() { # variant [extra options]
    v=$1
    shift
    case $v in
    base) "$WITHOUT" bench -m "$MODEL" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --json "$@" ;;
    plain) "$WITH" bench -m "$MODEL" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --json "$@" ;;
    budget) "$WITH" bench -m "$MODEL" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --json \
        --memory-budget "$BUDGET" "$@" ;;
    esac
}
i=0
while [ "$i" -lt "$ROUNDS" ]; do
    case $((i % 3)) in
    0) order="base plain budget" ;;
    1) order="plain budget base" ;;
    *) order="budget base plain" ;;
    esac
    for v in $order; do
        one "$v" "$@" > "$TMP/$v.$i.json"
    done
    i=$((i + 1))
done
python3 - "$TMP" "$ROUNDS" <<'PY'
import json, os, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
res = {}
for v in ("base", "plain", "budget"):
    runs = [json.load(open(os.path.join(d, "%s.%d.json" % (v, i)))) for i in range(n)]
    res[v] = [r["decode_tok_s"] for r in runs]
    if v == "budget":
        s = runs[0].get("stream")
        assert s and s["layers_resident"] == s["layers_total"], \
            "the budget did not keep every layer resident: %s" % s
    if v != "budget":
        assert "stream" not in runs[0], "%s opened the streamer" % v
b = statistics.median(res["base"])
names = {"base": "-Dstreamer=false", "plain": "streamer built, no budget",
         "budget": "streamer open, 100% resident"}
print("| build | runs | decode tok/s median | min | max | median / baseline |")
print("| --- | --- | --- | --- | --- | --- |")
for v in ("base", "plain", "budget"):
    m = statistics.median(res[v])
    print("| %s | %d | %.2f | %.2f | %.2f | %.3f |" % (names[v], n, m, min(res[v]),
                                                      max(res[v]), m / b))
# paired: each round's ratio to that round's baseline run
for v in ("plain", "budget"):
    r = sorted(p / q for p, q in zip(res[v], res["base"]))
    print("%s: per-round ratio to the baseline: median %.3f, range %.3f..%.3f" % (
        names[v], statistics.median(r), r[0], r[-1]))
PY
