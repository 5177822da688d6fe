#!/bin/bash
# The CPU device's fused products (runtime/model/ref-llama.c run_fused: q, k and v, gate and up,
# the products of one input, in one job of the threads with the input quantized once): every
# result has the bits of the products run one by one (EBB_CPU_FUSE=0), so on both real models
# (SmolLM2's Q4_1, Gemma 3's Q4_K / Q6_K / Q8_0 mix) the perplexity over 3 windows of 128 tokens
# (prefill) is the same double (--json), and 16 greedy tokens (decode) and the 8-slot batch's
# agreement with the single stream (ebb bench --batch) are the same.
#
#   test-cpu-fuse.sh EBB_BINARY
set -u

ebb=$1
. "$(dirname "$0")/lib.sh"

text="$(dirname "$0")/../data/perplexity/coriolanus.txt"
for m in "$smol" "$gemma"; do
    [ -f "$m" ] || { echo "skip: missing model $m (set EBB_MODELS_DIR)"; exit 77; }
    name=$(basename "$m")
    for f in 0 1; do
        EBB_CPU_FUSE=$f "$ebb" perplexity -m "$m" -f "$text" --ctx 128 --chunks 3 --device cpu \
            --json > "$tmp/ppl$f" 2> "$tmp/ppl$f.err" ||
            fail "$name: perplexity (EBB_CPU_FUSE=$f) exit $?"
        EBB_CPU_FUSE=$f "$ebb" run -m "$m" -p "The tides of the northern sea" -n 16 --temp 0 \
            --device cpu --json > "$tmp/run$f" 2> "$tmp/run$f.err" ||
            fail "$name: run (EBB_CPU_FUSE=$f) exit $?"
        EBB_CPU_FUSE=$f "$ebb" bench -m "$m" --device cpu --batch 8 --prompt-tokens 8 \
            --gen-tokens 16 > "$tmp/batch$f" 2>&1 || fail "$name: bench --batch (EBB_CPU_FUSE=$f)"
    done
    python3 - "$tmp" <<'PY' || fail "$name: perplexity (its 17 digits) or greedy tokens differ"
import json, sys
t = sys.argv[1]
p0, p1 = (json.load(open(f"{t}/ppl{f}")) for f in (0, 1))
assert p0["n_scored"] == 189 and p0["nll"] == p1["nll"] and p0["ppl"] == p1["ppl"], (p0, p1)
a, b = (json.load(open(f"{t}/run{f}"))["tokens"] for f in (0, 1))
assert len(a) == 16 and a == b, (a, b)
PY
    for f in 0 1; do
        grep -q "slot 0   16 of 16 tokens as the single stream's" "$tmp/batch$f" ||
            fail "$name: batch (EBB_CPU_FUSE=$f): $(grep -E 'slot|error' "$tmp/batch$f" | head -3)"
    done
done

[ "$fails" -eq 0 ] || exit 1
echo "ok"
