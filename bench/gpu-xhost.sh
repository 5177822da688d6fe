#!/usr/bin/env bash
# Missed experts on the host against the link (EBB_EXPERT_HOST, docs/STREAMER.md "Missed experts
# on the host", issue 36's decode), one device call on the GPU machine: builds llama.cpp's CUDA
# llama-bench from the carried .llama-src first (about 4.5 minutes on 16 cores; skip with
# EBB_NO_LLAMA=1), so that the host's cores are free when ebb's rows run; writes the
# Qwen3-30B-A3B shape as the Q4_K_M mix with ebb-gen-model (the vocabulary of
# .device-carry/tok-qwen.gguf: llama.cpp's ggml-vocab-qwen2.gguf) into /dev/shm; then
# `llama-bench -ngl 99 -ot exps=CPU -p 0 -n 64 -r 2` and, for each EBB_EXPERT_HOST setting in
# EBB_HOST_LIST (N[,threads[,spin_us[,rect]]] each, rect 1: EBB_EXPERT_RECT=1; default 0, 0
# with one write an expert, 2, 2 with one write, auto, then 0 again), `ebb bench --expert-cache 24
# --prompt-tokens 16 --gen-tokens 64 -r 2` with its experts lines. Logs in $OUT (or /tmp/out).
# First, where .device-carry/bin has it, ebb-link-bw (bench/link-bw.c): the link's rate by
# write size and an expert as three writes or one.
# Usage (device): source .device-carry/env.sh; bash bench/gpu-xhost.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /dev/shm/models /tmp/cache
log=$out/xhost.log
export XDG_CACHE_HOME=/tmp/cache
m=/dev/shm/models/qwen3-30b-a3b-q4_k_m.gguf
gpu_llama_build llama-bench /tmp/lb
if command -v ebb-link-bw >/dev/null; then # the link by write size (bench/link-bw.c)
    say "ebb-link-bw"
    ebb-link-bw "" 2048 2>&1 | tee -a "$log"
fi
say "gen $m"
gpu_gen qwen3-30b-a3b q4_k_m "$m" .device-carry/tok-qwen.gguf
ebb --version | tee -a "$log"
if gpu_llama_wait /tmp/lb; then
    say "llama-bench -ot exps=CPU"
    timeout 150 /tmp/lb/bin/llama-bench -m "$m" -ngl 99 -ot exps=CPU -p 0 -n 64 -r 2 2>&1 |
        grep -E '^\| [a-z]' | tee -a "$log"
fi
for spec in ${EBB_HOST_LIST:-0 0,,,1 2 2,,,1 auto 0}; do
    IFS=, read -r n threads spin rect <<<"$spec"
    say "EBB_EXPERT_HOST=$n threads=${threads:-default} spin_us=${spin:-default} rect=${rect:-0}"
    env EBB_EXPERT_HOST="$n" ${threads:+EBB_EXPERT_HOST_THREADS=$threads} \
        ${spin:+EBB_EXPERT_HOST_SPIN_US=$spin} ${rect:+EBB_EXPERT_RECT=$rect} timeout 150 ebb bench -m "$m" --expert-cache 24 \
        --prompt-tokens 16 --gen-tokens 64 -r 2 2>&1 | grep -E '^(decode|experts|error|ebb: expert)' |
        tee -a "$log"
done
