#!/bin/bash
# `ebb bench --batch N` on SmolLM2 (OpenCL, PoCL in CI): usage errors exit 2, and the batched
# figures come in text and --json, with slot 0 (the single stream's prompt) decoding the single
# stream's tokens.
#
#   test-bench-batch.sh EBB_BINARY
set -u

ebb=$1
. "$(dirname "$0")/lib.sh"

[ -f "$smol" ] || { echo "skip: missing model $smol (set EBB_MODELS_DIR)"; exit 77; }

expect_status 0 "$ebb" bench --help
expect_out "--batch N"
expect_status 2 "$ebb" bench -m "$smol" --batch 0
expect_status 2 "$ebb" bench -m "$smol" --batch 257

args=(-m "$smol" --prompt-tokens 12 --gen-tokens 6 --batch 3)
expect_status 0 "$ebb" bench "${args[@]}"
expect_out "3 sequences together"
expect_out "tok/s aggregate"
expect_status 0 "$ebb" bench "${args[@]}" --json
python3 - "$tmp/out" <<'PY' || fail "bench --batch --json: $(head -c 600 "$tmp/out")"
import json, sys
d = json.load(open(sys.argv[1]))
b = d["batch"]
assert b["n"] == 3, b
for k in ("prefill_ms", "prefill_tok_s", "decode_ms", "decode_tok_s", "step_ms"):
    assert b[k] > 0, (k, b)
# slot 0 runs the single stream's prompt: its greedy tokens are the same (SmolLM2 has no near
# tie in these 6 steps on PoCL)
assert b["slot0_same_tokens"] == d["gen_tokens"], b
PY

[ "$fails" -eq 0 ] || exit 1
echo "ok"
