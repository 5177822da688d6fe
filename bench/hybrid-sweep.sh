#!/bin/sh
# Hybrid placement sweep (issue 15, part 2; docs/STREAMER.md "Host layers"): `ebb bench` at each
# forced residency in RES with each host-layer count in HOSTS, printed as a markdown table with
# the placement, prefill and decode tokens/s (medians of -r REPS after a warm-up, with their
# range), the host layers' milliseconds a step, decode against the same residency without host
# layers, and whether the greedy ids equal that run's.
#   bench/hybrid-sweep.sh EBB MODEL [extra ebb bench options...]
# Environment: RES (default "0 0.25 0.5 0.75"), HOSTS (default "0 2 4 8 16"), PROMPT (prompt
# tokens, default 512), GEN (generated tokens, default 128), REPS (default 3), THREADS
# (--host-threads; default the engine's, the physical cores minus one). Set
# EBB_TEST_MEMPROBE_FILE to a file holding "available=64G" to keep the machine's free memory
# from lowering a forced residency.
set -eu
EBB=$1
MODEL=$2
shift 2
RES=${RES:-"0 0.25 0.5 0.75"}
HOSTS=${HOSTS:-"0 2 4 8 16"}
PROMPT=${PROMPT:-512}
GEN=${GEN:-128}
REPS=${REPS:-3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for r in $RES; do
    for h in $HOSTS; do
        if [ -n "${THREADS:-}" ]; then
            "$EBB" bench -m "$MODEL" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" -r "$REPS" \
                --residency "$r" --host-layers "$h" --host-threads "$THREADS" --json "$@" \
                >"$TMP/$r-$h.json" || echo "{}" >"$TMP/$r-$h.json"
        else
            "$EBB" bench -m "$MODEL" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" -r "$REPS" \
                --residency "$r" --host-layers "$h" --json "$@" \
                >"$TMP/$r-$h.json" || echo "{}" >"$TMP/$r-$h.json"
        fi
    done
done
python3 - "$TMP" "$RES" "$HOSTS" <<'PY'
import json, os, sys
d, res, hosts = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print("| residency | resident/streamed/host | host threads | prefill tok/s | decode tok/s "
      "| host ms/step | decode vs 0 host | same ids |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
def stats(j, k):
    s = j.get(k + "_stats") or {}
    if not s:
        return "%.2f" % j.get(k + "_tok_s", 0), j.get(k + "_tok_s", 0)
    return "%.2f (%.2f-%.2f)" % (s["median"], s["min"], s["max"]), s["median"]
for r in res:
    base = None
    for h in hosts:
        try:
            j = json.load(open(os.path.join(d, "%s-%s.json" % (r, h))))
        except ValueError:
            j = {}
        if "stream" not in j:
            print("| %d%% | failed (%s host) | | | | | | |" % (round(float(r) * 100), h))
            continue
        s = j["stream"]
        nr, nl, nh = s["layers_resident"], s["layers_total"], s.get("layers_host", 0)
        pf, _ = stats(j, "prefill")
        dc, dm = stats(j, "decode")
        if base is None and nh == 0:
            base = (dm, j.get("tokens"))
        steps = s.get("host_steps", 0)
        hms = "%.2f" % (1e3 * s["host_seconds"] / steps) if steps else "-"
        rel = "%.2fx" % (dm / base[0]) if base and base[0] else "-"
        same = ("yes" if j.get("tokens") == base[1] else "no") if base else "-"
        print("| %d%% | %d/%d/%d | %s | %s | %s | %s | %s | %s |" % (
            round(float(r) * 100), nr, nl - nr - nh, nh, s.get("host_threads", "-"), pf, dc,
            hms, rel, same))
PY
