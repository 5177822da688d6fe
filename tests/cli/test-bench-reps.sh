#!/bin/bash
# `ebb bench -r N -d N` on SmolLM2 (OpenCL, PoCL in CI; the reference for the backend without
# counters): usage errors exit 2; repetitions give per-run figures with their median and spread
# (and a warm-up, -r 1 included);
# a depth moves prefill and decode to that position; decode's bytes per token follow the model's
# shape; the OpenCL engine counts launches and host syncs per decoded token, the reference none.
#
#   test-bench-reps.sh EBB_BINARY
set -u

ebb=$1
. "$(dirname "$0")/lib.sh"

[ -f "$smol" ] || { echo "skip: missing model $smol (set EBB_MODELS_DIR)"; exit 77; }

expect_status 0 "$ebb" bench --help
expect_out "--repetitions N"
expect_out "--depth N"
expect_status 2 "$ebb" bench -m "$smol" -r 0
expect_status 2 "$ebb" bench -m "$smol" -r 1001
expect_status 2 "$ebb" bench -m "$smol" -d 0
expect_status 2 "$ebb" bench -m "$smol" -d x
expect_status 2 "$ebb" bench -m "$smol" -d 32 --batch 2
expect_err "--depth"
expect_status 1 "$ebb" bench -m "$smol" -d 64 --ctx 64 --prompt-tokens 8
expect_err "exceed the context"

args=(-m "$smol" --prompt-tokens 8 --gen-tokens 8)
expect_status 0 "$ebb" bench "${args[@]}" -r 2 -d 32
expect_out "median of 2"
expect_out "depth      32 tokens"
expect_out "MiB per decoded token"
expect_out "host syncs per decoded token"

expect_status 0 "$ebb" bench "${args[@]}" --json
cp "$tmp/out" "$tmp/one.json"
expect_status 0 "$ebb" bench "${args[@]}" --json -r 2
cp "$tmp/out" "$tmp/two.json"
expect_status 0 "$ebb" bench "${args[@]}" --json -r 2 -d 32
cp "$tmp/out" "$tmp/depth.json"
expect_status 0 "$ebb" bench "${args[@]}" --json -r 1
cp "$tmp/out" "$tmp/r1.json"
expect_status 0 "$ebb" bench "${args[@]}" --json --device ref
cp "$tmp/out" "$tmp/ref.json"
python3 - "$tmp" <<'PY' || fail "bench -r/-d --json: $(head -c 900 "$tmp/depth.json")"
import json, sys
t = sys.argv[1]
one, two, dep, ref, r1 = (json.load(open(f"{t}/{n}.json")) for n in ("one", "two", "depth", "ref", "r1"))
# SmolLM2-135M: 30 layers, 3 KV heads of 64; fp16 KV on OpenCL, f32 on the reference
layers, kv_row = 30, 3 * 64
assert one["repetitions"] == 1 and not one["warmup"] and one["depth"] == 0, one
assert one["decode_depth"] == 8, one
# -r 1 asked for: a warm-up, then the one measured run (as -r N's help says)
assert r1["repetitions"] == 1 and r1["warmup"] and len(r1["prefill_tok_s_runs"]) == 1, r1
for d in (two, dep):
    assert d["repetitions"] == 2 and d["warmup"], d
    for ph in ("prefill", "decode"):
        runs, st = d[ph + "_tok_s_runs"], d[ph + "_stats"]
        assert len(runs) == 2 and all(r > 0 for r in runs), (ph, d)
        assert st["min"] == min(runs) and st["max"] == max(runs), (ph, st, runs)
        assert abs(st["median"] - sum(runs) / 2) < 1e-6 * st["median"], (ph, st)
        assert st["stddev"] >= 0 and d[ph + "_tok_s"] == st["median"], (ph, d)
# the warm-up and a second run leave the greedy tokens as one run gives them
assert two["tokens"] == one["tokens"], (one["tokens"], two["tokens"])
assert dep["depth"] == 32 and dep["decode_depth"] == 32 and dep["n_ctx"] == 40, dep
# the KV read by the 7 decode steps at positions 32..38, each over its position + 1 entries
steps = dep["gen_tokens"] - 1
want = sum(layers * 2 * kv_row * 2 * (p + 1) for p in range(32, 32 + steps)) // steps
b = dep["decode_bytes"]
assert b["kv"] == want and b["per_token"] == b["weights"] + b["kv"], (b, want)
assert abs(b["gb_s"] - b["per_token"] * dep["decode_tok_s"] / 1e9) < 1e-6 * b["gb_s"], b
want = sum(layers * 2 * kv_row * 4 * (p + 1) for p in range(8, 8 + steps)) // steps
rb = ref["decode_bytes"]
assert rb["kv"] == want, (rb, want)
# the weights: the reference reads the file's tensors; the engine the same or its split planes
# (float scales: at most a fifth more for Q4_1), and both more than the 4-bit matrices alone
assert 0.99 * rb["weights"] <= b["weights"] <= 1.25 * rb["weights"], (b, rb)
assert rb["weights"] > 80e6, rb
c = dep["decode_counters"]
assert c["launches_per_token"] >= layers and 1 <= c["syncs_per_token"] <= 2, c
assert "decode_counters" not in ref, ref
PY

[ "$fails" -eq 0 ] || exit 1
echo "ok"
