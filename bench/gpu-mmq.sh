#!/usr/bin/env bash
# One device call for the int8 tensor-core prefill (matmul_mmq, issue 29): builds llama.cpp's
# llama-bench (CUDA) in the background from .llama-src when carried, writes Llama-3-8B shapes in
# the given types with ebb-gen-model (in parallel), runs the kernel tests' tensor-core section
# (matmul_mmq through PTX against the CPU reference), then `ebb bench` pp512 / tg128 on each file
# with matmul_mmq (EBB_CL_MMQ=32) and without (EBB_CL_MMQ=0), and llama-bench on the same files
# when it has built. Logs go to $OUT (or /tmp/out).
# Usage (device): source .device-carry/env.sh; bash bench/gpu-mmq.sh
# Environment: EBB_TYPES (q4_0 q4_k_m q8_0), EBB_SHAPE (llama3-8b), EBB_VARIANTS
# (EBB_CL_MMQ=0 EBB_CL_MMQ=32; a + joins several settings), EBB_PP (512), EBB_KT (1: run the
# kernel tests), EBB_TG (128: tokens to decode), EBB_LLAMA_ARGS (extra llama-bench arguments).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/models
log=$out/mmq.log
export XDG_CACHE_HOME=/tmp/cache
gpu_llama_build llama-bench /tmp/lb
types=${EBB_TYPES:-q4_0 q4_k_m q8_0}
shape=${EBB_SHAPE:-llama3-8b}
for t in $types; do
    gpu_gen "$shape" "$t" "/tmp/models/$shape-$t.gguf" &
done
if [ "${EBB_KT:-1}" = 1 ]; then
    EBB_KT_ONLY=mma timeout 300 test-kernels >"$out/kernels-mma.log" 2>&1
    say "test-kernels (mma) exit $?: $(tail -1 "$out/kernels-mma.log")"
    grep -E "matmul_mmq|FAIL|fail" "$out/kernels-mma.log" | head -30 >>"$log"
fi
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
pp=${EBB_PP:-512}
for t in $types; do
    m=/tmp/models/$shape-$t.gguf
    for v in ${EBB_VARIANTS:-EBB_CL_MMQ=0 EBB_CL_MMQ=32}; do
        say "ebb $shape $t pp$pp tg128 with $v"
        # shellcheck disable=SC2086 # the settings split at the + signs
        env ${v//+/ } timeout 200 ebb bench -m "$m" --prompt-tokens "$pp" --gen-tokens "${EBB_TG:-128}" -r 2 \
            2>&1 | grep -iE "prefill|decode|error|path" | tee -a "$log"
    done
done
if [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ]; then
    say "waiting for llama-bench"
    if gpu_llama_wait /tmp/lb; then
        for t in $types; do
            say "llama.cpp CUDA $shape $t"
            # shellcheck disable=SC2086
            timeout 200 /tmp/lb/bin/llama-bench -m "/tmp/models/$shape-$t.gguf" -p "$pp" -n 128 \
                -r 2 -ngl 99 -fa 1 ${EBB_LLAMA_ARGS:-} 2>&1 | grep -E "^\|" | tee -a "$log"
        done
    else
        say "llama-bench did not build"
        tail -20 /tmp/lb.log >>"$log"
    fi
fi
# EBB_PROFILE=TYPE: one more pp$pp run of that type with every launch timed (EBB_CL_PROFILE=1),
# its table in $OUT/profile-TYPE.log.
if [ -n "${EBB_PROFILE:-}" ]; then
    EBB_CL_PROFILE=1 timeout 200 ebb bench -m "/tmp/models/$shape-$EBB_PROFILE.gguf" \
        --prompt-tokens "$pp" --gen-tokens 1 -r 1 >"$out/profile-$EBB_PROFILE.log" 2>&1
    say "profile $EBB_PROFILE: exit $?"
fi
