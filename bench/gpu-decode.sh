#!/usr/bin/env bash
# One device call on the GPU machine (docs/PERFORMANCE.md): builds llama.cpp's CUDA llama-bench
# in the background (from .llama-src, if carried; skip with EBB_NO_LLAMA=1), writes random-weight 8B- and 1B-shape Q4_0
# GGUFs, runs the kernel tests, then `ebb bench` (default tuning and the variants in
# EBB_VARIANTS, decode only; every figure the median of 3 runs after a warm-up, `-r 3`, with its
# range) and llama-bench on the same files, both also at a depth of 4096 tokens (tg128 @ d4096).
# Logs go to $OUT (or /tmp/out).
# Usage (device): source .device-carry/env.sh; bash bench/gpu-decode.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out"
log=$out/bench.log
carry=.device-carry
models=/tmp/models
mkdir -p "$models"

gpu_llama_build llama-bench /tmp/lb
for s in llama3-8b llama3.2-1b; do
    [ -f "$models/$s.gguf" ] ||
        ebb-gen-model --shape "$s" --tokenizer-from "$carry/tok.gguf" --type q4_0 \
            -o "$models/$s.gguf" >>"$log" 2>&1 &
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
python3 bench/cl-ext.py >>"$log" 2>&1
say "kernel tests"
XDG_CACHE_HOME=/tmp/cache timeout 300 test-kernels >"$out/kernels.log" 2>&1
echo "test-kernels exit $?: $(tail -1 "$out/kernels.log")" | tee -a "$log"
grep -E "q8|8-bit" "$out/kernels.log" | head -8 >>"$log"
# EBB_KT_VARIANTS: the kernel tests again under each setting (e.g. EBB_CL_MMA_TILE=64,64,64,1).
for v in ${EBB_KT_VARIANTS:-}; do
    env ${v//,/ } XDG_CACHE_HOME=/tmp/cache timeout 300 test-kernels >"$out/kernels-v.log" 2>&1
    echo "test-kernels with $v exit $?: $(tail -1 "$out/kernels-v.log")" | tee -a "$log"
    grep -E "mm-mma|FAIL" "$out/kernels-v.log" | head -4 >>"$log"
done
wait
export XDG_CACHE_HOME=/tmp/cache
for s in llama3-8b llama3.2-1b; do
    m=$models/$s.gguf
    say "ebb $s pp512 tg128 (default tuning, -r 3)"
    timeout 240 ebb bench -m "$m" --prompt-tokens 512 --gen-tokens 128 -r 3 2>&1 | tail -8 |
        tee -a "$log"
    say "ebb $s tg128 after a 16-token prompt (default tuning, -r 3)"
    timeout 240 ebb bench -m "$m" --prompt-tokens 16 --gen-tokens 128 -r 3 2>&1 |
        grep -iE "decode|traffic|launches" | tee -a "$log"
    # llama-bench's pp512 / tg128 @ d4096: 4096 tokens of context first, then each measured
    say "ebb $s pp512 tg128 at depth 4096 (default tuning, -r 3)"
    timeout 300 ebb bench -m "$m" --prompt-tokens 512 --gen-tokens 128 -r 3 -d 4096 2>&1 |
        grep -iE "depth|prefill|decode|traffic|launches" | tee -a "$log"
done
# EBB_VARIANTS: decode after 16 prompt tokens; EBB_PP_VARIANTS: pp512 + tg128 (8B shape);
# EBB_VARIANTS_1B, EBB_PP1B_VARIANTS: the same on the 1B shape. A variant sets several variables
# joined by commas (EBB_CL_ROPEATT=0,EBB_CL_ATTQ8=0).
for v in ${EBB_VARIANTS:-}; do
    say "ebb llama3-8b tg128 after 16 with $v"
    env ${v//,/ } timeout 240 ebb bench -m "$models/llama3-8b.gguf" --prompt-tokens 16 \
        --gen-tokens 128 -r 3 2>&1 | grep -iE "decode" | tee -a "$log"
done
for v in ${EBB_PP_VARIANTS:-}; do
    say "ebb llama3-8b pp512 tg128 with $v"
    env ${v//,/ } timeout 240 ebb bench -m "$models/llama3-8b.gguf" --prompt-tokens 512 \
        --gen-tokens 128 -r 3 2>&1 | grep -iE "prefill|decode" | tee -a "$log"
done
for v in ${EBB_VARIANTS_1B:-}; do
    say "ebb llama3.2-1b tg128 after 16 with $v"
    env ${v//,/ } timeout 240 ebb bench -m "$models/llama3.2-1b.gguf" --prompt-tokens 16 \
        --gen-tokens 128 -r 3 2>&1 | grep -iE "decode" | tee -a "$log"
done
for v in ${EBB_PP1B_VARIANTS:-}; do
    say "ebb llama3.2-1b pp512 tg128 with $v"
    env ${v//,/ } timeout 240 ebb bench -m "$models/llama3.2-1b.gguf" --prompt-tokens 512 \
        --gen-tokens 128 -r 3 2>&1 | grep -iE "prefill|decode" | tee -a "$log"
done
# EBB_PROFILE_PP=1: per-kernel times of the 8B pp512 (EBB_CL_PROFILE, every launch waited for).
if [ -n "${EBB_PROFILE_PP:-}" ]; then
    say "ebb llama3-8b pp512 per-kernel profile"
    EBB_CL_PROFILE=1 timeout 240 ebb bench -m "$models/llama3-8b.gguf" --prompt-tokens 512 \
        --gen-tokens 4 >"$out/profile-pp.log" 2>&1
    grep -iE "prefill|%" "$out/profile-pp.log" | head -24 | tee -a "$log"
fi
# EBB_DEPTH=N: decode after N tokens of context (8B), ebb and llama-bench -d N.
if [ -n "${EBB_DEPTH:-}" ]; then
    say "ebb llama3-8b tg128 after a ${EBB_DEPTH}-token prompt"
    timeout 300 ebb bench -m "$models/llama3-8b.gguf" --prompt-tokens "$EBB_DEPTH" \
        --gen-tokens 128 2>&1 | grep -iE "prefill|decode" | tee -a "$log"
fi
if [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ]; then
    say "waiting for llama-bench"
    if gpu_llama_wait /tmp/lb; then
        for s in llama3-8b llama3.2-1b; do
            say "llama.cpp CUDA $s"
            timeout 200 /tmp/lb/bin/llama-bench -m "$models/$s.gguf" -p 512 -n 128 -r 3 \
                -ngl 99 -fa 1 2>&1 | grep -E "^\|" | tee -a "$log"
            say "llama.cpp CUDA $s at depth 4096"
            timeout 300 /tmp/lb/bin/llama-bench -m "$models/$s.gguf" -p 512 -n 128 -r 3 \
                -d 4096 -ngl 99 -fa 1 2>&1 | grep -E "^\||error" | tee -a "$log"
        done
        if [ -n "${EBB_DEPTH:-}" ]; then
            say "llama.cpp CUDA llama3-8b tg128 at depth $EBB_DEPTH"
            timeout 200 /tmp/lb/bin/llama-bench -m "$models/llama3-8b.gguf" -p 0 -n 128 \
                -d "$EBB_DEPTH" -r 3 -ngl 99 -fa 1 2>&1 | grep -E "^\|" | tee -a "$log"
        fi
    else
        say "llama-bench did not build"; tail -20 /tmp/lb.log >>"$log"
    fi
fi
