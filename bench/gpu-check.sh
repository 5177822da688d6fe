#!/usr/bin/env bash
# One device call of A/B checks on the GPU machine: `ebb bench` under settings side by side, with
# llama.cpp's CUDA llama-bench on the same random-weight files, each entry as the caller names it.
# Builds llama-bench in the background (bench/lib-gpu.sh), writes the files once.
#   EBB_CHECKS        ';'-separated "SHAPE:TYPE|ebb bench arguments|VAR=V,VAR=V" (settings may be
#                     empty; EBB_BIN=NAME among them runs that binary from PATH instead of ebb,
#                     e.g. a build of the session's starting commit carried next to it, for A/B
#                     runs of two builds alternated in one call)
#   EBB_LLAMA_CHECKS  ';'-separated "SHAPE:TYPE|llama-bench arguments"
#   EBB_VOCAB_<shape with - and . as _>  a vocabulary GGUF for that shape (default
#                     .device-carry/tok.gguf)
# Logs go to $OUT (or /tmp/out), check.log.
# Usage (device): source .device-carry/env.sh; EBB_CHECKS=... bash bench/gpu-check.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/models /tmp/cache
log=$out/check.log
export XDG_CACHE_HOME=/tmp/cache
gpu_llama_build llama-bench /tmp/lb
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
model_of() { echo "/tmp/models/${1%%:*}-${1##*:}.gguf"; }
IFS=';' read -ra checks <<<"${EBB_CHECKS:-}"
IFS=';' read -ra lchecks <<<"${EBB_LLAMA_CHECKS:-}"
declare -A seen
for c in "${checks[@]}" "${lchecks[@]}"; do
    f=$(echo "${c%%|*}" | xargs)
    [ -z "$f" ] || [ -n "${seen[$f]:-}" ] && continue
    seen[$f]=1
    s=${f%%:*}
    v=EBB_VOCAB_${s//[-.]/_}
    gpu_gen "$s" "${f##*:}" "$(model_of "$f")" "${!v:-}" &
done
wait
for c in "${checks[@]}"; do
    IFS='|' read -r f args env <<<"$c"
    f=$(echo "$f" | xargs)
    [ -z "$f" ] && continue
    bin=ebb
    for kv in ${env//,/ }; do [[ $kv == EBB_BIN=* ]] && bin=${kv#EBB_BIN=}; done
    say "$bin ($($bin --version 2>/dev/null)) $f $args ${env:+with $env}"
    env ${env//,/ } timeout 300 "$bin" bench -m "$(model_of "$f")" $args 2>&1 |
        grep -E "prefill|decode|traffic|launches|experts|error" | tee -a "$log"
done
if [ "${#lchecks[@]}" -gt 0 ]; then
    say "waiting for llama-bench"
    if gpu_llama_wait /tmp/lb; then
        for c in "${lchecks[@]}"; do
            IFS='|' read -r f args <<<"$c"
            f=$(echo "$f" | xargs)
            [ -z "$f" ] && continue
            say "llama.cpp CUDA $f $args"
            timeout 300 /tmp/lb/bin/llama-bench -m "$(model_of "$f")" $args 2>&1 |
                grep -E "^\| [a-z]|error" | tee -a "$log"
        done
    else
        say "llama-bench did not build"
        tail -20 /tmp/lb.log >>"$log" 2>/dev/null
    fi
fi
say done
