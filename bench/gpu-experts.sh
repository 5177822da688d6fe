#!/usr/bin/env bash
# One device call on the GPU machine for the expert cache (issue 15, part 3; docs/STREAMER.md):
# writes the Qwen3-30B-A3B shape as the Q4_K_M mix with ebb-gen-model, runs `ebb bench` fully
# resident and with --expert-cache N slots a layer (the attention and shared tensors resident,
# the experts through the cache), then llama.cpp's llama-bench (CUDA, built in the background
# from .llama-src when carried; skip with EBB_NO_LLAMA=1) with every expert tensor on the CPU
# (`-ngl 99 -ot exps=CPU`), the partial offload a user without the memory would run, on the same
# file, and fully resident (-ngl 99) for the resident comparison. Logs go to $OUT (or /tmp/out).
# Usage (device): source .device-carry/env.sh; bash bench/gpu-experts.sh
# Environment: EBB_SLOTS (24 48: slots a layer; 24 is about a quarter of the file's size in
# device memory with the resident tensors), EBB_PP (512), EBB_TG (128), EBB_XC_VARIANTS (the
# copy-path settings tried on the first slot count; see below), EBB_EXPERT_THREADS,
# EBB_EXPERT_BATCH, EBB_EXPERT_PREFETCH, EBB_EXPERT_PINNED (passed through to every cached run).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/models
log=$out/experts.log
export XDG_CACHE_HOME=/tmp/cache
gpu_llama_build llama-bench /tmp/lb
m=/tmp/models/qwen3-30b-a3b-q4_k_m.gguf
[ -f "$m" ] || ebb-gen-model --shape qwen3-30b-a3b --tokenizer-from .device-carry/tok.gguf \
    --type q4_k_m -o "$m" >>"$log" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
say "file $(du -h "$m" | cut -f1)"
pp=${EBB_PP:-512} tg=${EBB_TG:-128}
say "ebb bench resident"
timeout 240 ebb bench -m "$m" --prompt-tokens "$pp" --gen-tokens "$tg" -r 2 2>&1 |
    grep -iE "prefill|decode|traffic|launches|memory" | tee -a "$log"
for n in ${EBB_SLOTS:-24 48}; do
    say "ebb bench --expert-cache $n"
    timeout 300 ebb bench -m "$m" --expert-cache "$n" --prompt-tokens "$pp" --gen-tokens "$tg" \
        2>&1 | grep -iE "prefill|decode|traffic|launches|expert|memory|error" | tee -a "$log"
done
# The copy path's knobs on the first slot count (docs/STREAMER.md, "The copy path", "Prefetch"):
# one copy thread (the fill alone, as before the pool), prefetch of 4 guesses a layer, every
# expert in pinned host memory (no fill), and both.
# EBB_XC_VARIANTS replaces the list (space-separated VAR=VALUE,VAR=VALUE sets; "" skips).
n1=${EBB_SLOTS:-24 48}
n1=${n1%% *}
for v in ${EBB_XC_VARIANTS-EBB_EXPERT_THREADS=1 EBB_EXPERT_PREFETCH=4 EBB_EXPERT_PINNED=1 \
    EBB_EXPERT_PINNED=1,EBB_EXPERT_PREFETCH=4}; do
    say "ebb bench --expert-cache $n1 with ${v//,/ }"
    env ${v//,/ } timeout 300 ebb bench -m "$m" --expert-cache "$n1" --prompt-tokens "$pp" \
        --gen-tokens "$tg" 2>&1 | grep -iE "prefill|decode|launches|expert|error" | tee -a "$log"
done
# Greedy ids with the cache against the resident run's (the mix's Q6_K and Q4_K down stacks
# through the same slots): identical, or the difference is printed.
slots=${EBB_SLOTS:-24 48}
say "greedy ids: resident vs --expert-cache ${slots%% *}"
ids() { timeout 240 ebb run -m "$m" -p "The capital of France is" -n 32 --temp 0 --json "$@" \
    2>>"$log" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'; }
a=$(ids) b=$(ids --expert-cache "${slots%% *}")
[ -n "$a" ] && [ "$a" = "$b" ] && say "ids identical" ||
    say "ids differ or failed: $a / $b"
if [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ]; then
    say "waiting for llama-bench"
    if gpu_llama_wait /tmp/lb; then
        say "llama.cpp CUDA, resident (-ngl 99)"
        timeout 200 /tmp/lb/bin/llama-bench -m "$m" -p "$pp" -n "$tg" -r 2 -ngl 99 -fa 1 2>&1 |
            grep -E "^\||error" | tee -a "$log"
        say "llama.cpp CUDA, experts on the CPU (-ngl 99 -ot exps=CPU)"
        timeout 400 /tmp/lb/bin/llama-bench -m "$m" -p "$pp" -n "$tg" -r 1 -ngl 99 -fa 1 \
            -ot "exps=CPU" 2>&1 | grep -E "^\||error" | tee -a "$log"
    else
        say "llama-bench did not build"; tail -20 /tmp/lb.log >>"$log"
    fi
fi
