#!/usr/bin/env bash
# One device call on the GPU machine: the engine's batched decode alone (`ebb bench --batch N`,
# N sequences decoding together after a 16-token prompt each) on a random-weight GGUF written
# there by ebb-gen-model, under each setting in EBB_BATCH_VARIANTS (space-separated; a variant
# sets several variables comma-joined, "-" for the defaults), after the kernel tests. With
# EBB_PP_VARIANTS, pp512 under each setting too. Logs go to $OUT (or /tmp/out).
# Usage (device): source .device-carry/env.sh; EBB_BATCH_VARIANTS="- EBB_CL_MMS=0" \
#   bash bench/gpu-batch.sh
# Environment: EBB_SHAPE (llama3-8b), EBB_BATCHES (1 4 8 16 32 64), EBB_GEN (64 tokens).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
log=$out/batch.log
shape=${EBB_SHAPE:-llama3-8b}
m=/tmp/models/$shape.gguf
mkdir -p /tmp/models
export XDG_CACHE_HOME=/tmp/cache
say() { echo "== $*" | tee -a "$log"; }
[ -f "$m" ] || ebb-gen-model --shape "$shape" --tokenizer-from .device-carry/tok.gguf \
    --type q4_0 -o "$m" >>"$log" 2>&1 &
gen=$!
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
timeout 400 test-kernels >"$out/kernels.log" 2>&1
say "test-kernels exit $?: $(tail -1 "$out/kernels.log")"
grep -E "mms|FAIL" "$out/kernels.log" | head -12 >>"$log"
wait "$gen"
for v in ${EBB_BATCH_VARIANTS:--}; do
    set --
    [ "$v" != - ] && set -- ${v//,/ }
    for b in ${EBB_BATCHES:-1 4 8 16 32 64}; do
        say "ebb bench --batch $b with $v"
        env "$@" timeout 120 ebb bench -m "$m" --batch "$b" --prompt-tokens 16 \
            --gen-tokens "${EBB_GEN:-64}" 2>&1 | grep -E "^ *(decode|slot)" | tee -a "$log"
    done
done
for v in ${EBB_PP_VARIANTS:-}; do
    set --
    [ "$v" != - ] && set -- ${v//,/ }
    say "ebb bench pp512 with $v"
    env "$@" timeout 120 ebb bench -m "$m" --prompt-tokens 512 --gen-tokens 16 2>&1 | grep -E "^ *(prefill|decode)" |
        tee -a "$log"
done
