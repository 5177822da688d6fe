#!/bin/bash
# Decode's 8-bit-input products quantizing their own input (EBB_CL_QIN, matvec_q8_qin) on the
# 8-bit decode path forced on whatever OpenCL device runs (PoCL in CI): greedy ids equal to the
# launch pair's (quantize_x8 + matvec_q8) with the knob at 0, 1 and 2, and fewer launches a token
# at each level, on SmolLM2 (Q4_1), Gemma 3 270M (Q4_K_M: kq8.cl's Q4_K / Q6_K / Q8_0 products,
# GeGLU) and a random-weight llama3.1-tiny in Q4_0 (ebb-gen-model, from the llama-spm vocab of
# scripts/fetch-vocabs.sh).
#
#   test-qin.sh EBB_BINARY EBB_GEN_MODEL
set -u

ebb=$1 gen=$2
. "$(dirname "$0")/lib.sh"

[ -f "$smol" ] || { echo "skip: missing model $smol (set EBB_MODELS_DIR)"; exit 77; }
export EBB_CL_BLOCKDEC=0 EBB_CL_MVQ8=1 EBB_CL_MVQ16=1

models=("$smol")
[ -f "$gemma" ] && models+=("$gemma") || fail "missing model $gemma"
vocab=${EBB_VOCABS_DIR:-$HOME/.cache/ebb/vocabs}/ggml-vocab-llama-spm.gguf
if [ -f "$vocab" ]; then
    "$gen" --shape llama3.1-tiny --tokenizer-from "$vocab" --type q4_0 --seed 3 \
        -o "$tmp/tiny-q4_0.gguf" > /dev/null || fail "ebb-gen-model llama3.1-tiny q4_0"
    models+=("$tmp/tiny-q4_0.gguf")
else
    fail "missing $vocab: run scripts/fetch-vocabs.sh and set EBB_VOCABS_DIR"
fi

for m in "${models[@]}"; do
    name=$(basename "$m")
    for q in 0 1 2; do
        EBB_CL_QIN=$q expect_status 0 "$ebb" run -m "$m" -p "Once upon a time, in a valley" \
            -n 16 --temp 0 --json
        cp "$tmp/out" "$tmp/run$q.json"
        EBB_CL_QIN=$q expect_status 0 "$ebb" bench -m "$m" --prompt-tokens 8 --gen-tokens 8 --json
        cp "$tmp/out" "$tmp/bench$q.json"
    done
    python3 - "$tmp" "$name" <<'PY' || fail "$name: EBB_CL_QIN changed the output or the launches"
import json, sys
tmp, name = sys.argv[1], sys.argv[2]
runs = [json.load(open(f"{tmp}/run{q}.json"))["tokens"] for q in range(3)]
launches = [json.load(open(f"{tmp}/bench{q}.json"))["decode_counters"]["launches_per_token"]
            for q in range(3)]
print(f"  {name}: {len(runs[0])} greedy tokens, launches a token {launches} (EBB_CL_QIN=0, 1, 2)")
assert len(runs[0]) > 8, runs[0]
assert runs[1] == runs[0] and runs[2] == runs[0], runs
assert launches[0] > launches[1] > launches[2], launches
PY
done

# The K-quant mix's q and k in Q4_K with v in Q6_K (one layer of qwen3moe-tiny-k's three) in one
# matvec_q8_mix launch (EBB_CL_KQ8MIX, default 1) or a launch each: the same greedy ids, one
# launch less a token.
if [ -f "$vocab" ]; then
    "$gen" --shape qwen3moe-tiny-k --tokenizer-from "$vocab" --type q4_k_m --seed 3 \
        -o "$tmp/moe-k.gguf" > /dev/null || fail "ebb-gen-model qwen3moe-tiny-k q4_k_m"
    for x in 0 1; do
        EBB_CL_KQ8MIX=$x expect_status 0 "$ebb" run -m "$tmp/moe-k.gguf" -p "Once upon a time" \
            -n 20 --temp 0 --json
        cp "$tmp/out" "$tmp/mix$x.json"
        EBB_CL_KQ8MIX=$x expect_status 0 "$ebb" bench -m "$tmp/moe-k.gguf" --prompt-tokens 8 \
            --gen-tokens 8 --json
        cp "$tmp/out" "$tmp/mixb$x.json"
    done
    python3 - "$tmp" <<'PY' || fail "EBB_CL_KQ8MIX changed the output or the launches"
import json, sys
tmp = sys.argv[1]
runs = [json.load(open(f"{tmp}/mix{x}.json"))["tokens"] for x in range(2)]
launches = [json.load(open(f"{tmp}/mixb{x}.json"))["decode_counters"]["launches_per_token"]
            for x in range(2)]
print(f"  qwen3moe-tiny-k Q4_K_M: {len(runs[0])} greedy tokens, launches a token {launches} "
      "(EBB_CL_KQ8MIX=0, 1)")
assert len(runs[0]) == 20 and runs[1] == runs[0], runs
assert launches[1] == launches[0] - 1, launches
PY
fi

[ "$fails" -eq 0 ] || exit 1
echo OK
