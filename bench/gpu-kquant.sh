#!/usr/bin/env bash
# One device call on the GPU machine for the K-quant decode paths (kq8.cl, issue 13's "all quant
# types on the fast GPU paths"): builds llama.cpp's llama-bench (CUDA) in the background from
# .llama-src when carried (skip with EBB_NO_LLAMA=1), writes the Llama-3-8B shape and the
# Qwen3-30B-A3B shape as the Q4_K_M mix with ebb-gen-model, runs the kernel tests, then `ebb bench`
# on both with the 8-bit-input K-quant kernels (default) and without (EBB_CL_KQ8=0), and
# llama-bench on the same files. Logs go to $OUT (or /tmp/out).
# Usage (device): source .device-carry/env.sh; bash bench/gpu-kquant.sh
# Environment: EBB_SHAPES (llama3-8b qwen3-30b-a3b), EBB_VARIANTS (- EBB_CL_KQ8=0).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/models
log=$out/kquant.log
export XDG_CACHE_HOME=/tmp/cache
gpu_llama_build llama-bench /tmp/lb
shapes=${EBB_SHAPES:-llama3-8b qwen3-30b-a3b}
for s in $shapes; do
    m=/tmp/models/$s-q4_k_m.gguf
    [ -f "$m" ] || ebb-gen-model --shape "$s" --tokenizer-from .device-carry/tok.gguf \
        --type q4_k_m -o "$m" >>"$log" 2>&1
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
timeout 400 test-kernels >"$out/kernels.log" 2>&1
say "test-kernels exit $?: $(tail -1 "$out/kernels.log")"
grep -iE "kq8|FAIL" "$out/kernels.log" | head -8 >>"$log"
for s in $shapes; do
    m=/tmp/models/$s-q4_k_m.gguf
    for v in ${EBB_VARIANTS:-- EBB_CL_KQ8=0}; do
        set --
        [ "$v" != - ] && set -- ${v//,/ }
        say "ebb $s Q4_K_M pp512 tg128 with $v"
        env "$@" timeout 200 ebb bench -m "$m" --prompt-tokens 512 --gen-tokens 128 -r 2 2>&1 |
            grep -iE "prefill|decode|traffic" | tee -a "$log"
    done
done
if [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ]; then
    say "waiting for llama-bench"
    if gpu_llama_wait /tmp/lb; then
        for s in $shapes; do
            say "llama.cpp CUDA $s Q4_K_M"
            timeout 200 /tmp/lb/bin/llama-bench -m "/tmp/models/$s-q4_k_m.gguf" -p 512 -n 128 \
                -r 2 -ngl 99 -fa 1 2>&1 | grep -E "^\|" | tee -a "$log"
        done
    else
        say "llama-bench did not build"; tail -20 /tmp/lb.log >>"$log"
    fi
fi
