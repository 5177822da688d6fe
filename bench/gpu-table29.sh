#!/usr/bin/env bash
# Issue 29's whole table on the GPU machine, every row against llama.cpp's CUDA build on the same
# file: pp512 / tg128 of the Llama-3-8B shape in Q4_0, Q4_K_M, Q8_0, Q5_K_M and Q6_K, of
# Qwen3-8B Q4_K_M and of Qwen3-30B-A3B Q4_K_M (with pp2048), and the 32-slot aggregate decode
# of the 8B Q4_K_M (`ebb bench --batch 32`) against `llama-batched-bench` at 32 sequences.
# Random-weight GGUFs written by ebb-gen-model into /dev/shm (Llama shapes with
# .device-carry/tok.gguf, llama.cpp's llama-bpe vocabulary; Qwen shapes with
# .device-carry/tok-qwen.gguf, its qwen2 one). llama-bench and llama-batched-bench are built
# from the carried .llama-src in the background first (bench/lib-gpu.sh; about 5.5 minutes),
# and every row waits for the build so that the host's cores are idle when it runs.
#
# The whole table takes more than one call's ten minutes: EBB_ROWS picks the rows of this call
# (default all), and a second call on the same warm machine finds the build and the files
# there. Rows: l8-q4_0 l8-q4_k_m l8-q8_0 l8-q5_k_m l8-q6_k q8b-q4_k_m moe batch32.
# EBB_STAGES=ROW... adds an `ebb bench --stages -r 1` profile of those rows (per-kernel device
# time). EBB_GEN=ROW... (default: the call's rows) names the rows whose files are written while
# llama.cpp builds, so that a first call can write every row's file and run some. EBB_KT=1 runs
# the kernel tests' tensor-core and MoE sections first (test-kernels on PATH, EBB_KT_ONLY=mma and
# moe).
# Logs in $OUT (or /tmp/out): table29.log.
# Usage (device): source .device-carry/env.sh; EBB_ROWS="l8-q4_0 l8-q4_k_m" bash bench/gpu-table29.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /dev/shm/models /tmp/cache
log=$out/table29.log
export XDG_CACHE_HOME=/tmp/cache
d=/dev/shm/models
rows=${EBB_ROWS:-l8-q4_0 l8-q4_k_m l8-q8_0 l8-q5_k_m l8-q6_k q8b-q4_k_m moe batch32}
gen=${EBB_GEN:-$rows}
gpu_llama_build "llama-bench llama-batched-bench" /tmp/lbb

# the file of a row: shape, type, vocabulary
file_of() {
    case $1 in
    l8-*) echo "$d/llama3-8b-${1#l8-}.gguf llama3-8b ${1#l8-} .device-carry/tok.gguf" ;;
    batch32) echo "$d/llama3-8b-q4_k_m.gguf llama3-8b q4_k_m .device-carry/tok.gguf" ;;
    q8b-q4_k_m) echo "$d/qwen3-8b-q4_k_m.gguf qwen3-8b q4_k_m .device-carry/tok-qwen.gguf" ;;
    moe) echo "$d/qwen3-30b-a3b-q4_k_m.gguf qwen3-30b-a3b q4_k_m .device-carry/tok-qwen.gguf" ;;
    esac
}

say "ebb $(ebb --version); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
say "host $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
say "writing the files of: $gen"
for r in $gen; do
    read -r f shape type vocab <<<"$(file_of "$r")"
    gpu_gen "$shape" "$type" "$f" "$vocab" &
done
wait
if [ "${EBB_KT:-0}" = 1 ] && command -v test-kernels >/dev/null; then
    for s in mma moe; do
        say "test-kernels EBB_KT_ONLY=$s"
        EBB_KT_ONLY=$s timeout 240 test-kernels 2>&1 | tail -3 | tee -a "$log"
    done
fi
say "waiting for llama.cpp's build"
have_llama=0
gpu_llama_wait /tmp/lbb && have_llama=1 || tail -5 /tmp/lbb.log | tee -a "$log"
for r in $rows; do
    read -r f shape type vocab <<<"$(file_of "$r")"
    if [ "$r" = batch32 ]; then
        say "$r: ebb bench --batch 32 --prompt-tokens 128 --gen-tokens 128 ($type)"
        timeout 150 ebb bench -m "$f" --batch 32 --prompt-tokens 128 --gen-tokens 128 2>&1 |
            grep -E "^ *(prefill|decode|batch|aggregate|error)" | tee -a "$log"
        [ $have_llama = 1 ] && timeout 150 /tmp/lbb/bin/llama-batched-bench -m "$f" -c 16384 \
            -b 2048 -ub 512 -npp 128 -ntg 128 -npl 32 -ngl 99 -fa on 2>&1 |
            grep -E "^\|" | tail -2 | tee -a "$log"
        continue
    fi
    pp=512
    [ "$r" = moe ] && pp=512,2048
    for p in ${pp//,/ }; do
        say "$r: ebb bench --prompt-tokens $p --gen-tokens 128 -r 3"
        timeout 200 ebb bench -m "$f" --prompt-tokens "$p" --gen-tokens 128 -r 3 2>&1 |
            grep -E "^(prefill|decode|kernels|error)" | tee -a "$log"
    done
    if [[ " ${EBB_STAGES:-} " == *" $r "* ]]; then
        say "$r: ebb bench --stages -r 1 (pp512, tg128)"
        timeout 200 ebb bench -m "$f" --prompt-tokens 512 --gen-tokens 128 -r 1 --stages 2>&1 |
            grep -E "^ *(prefill|decode|kernel|launches|outside)" | tee -a "$log"
    fi
    [ $have_llama = 1 ] && timeout 200 /tmp/lbb/bin/llama-bench -m "$f" -ngl 99 -p "$pp" -n 128 \
        -r 3 2>&1 | grep -E "^\| [a-z]" | tee -a "$log"
done
say "all rows done"
