#!/usr/bin/env bash
# Issue 34's data-parallel ratio from one GPU's engine steps: an 8B Q4_0 (random weights, Llama-3
# shape, written by ebb-gen-model into /dev/shm) decoded as a batch of 16, 32 and 64 slots
# (`ebb bench --batch N --prompt-tokens 128 --gen-tokens 64`): the aggregate tok/s and ms a step
# of each, from which the ratio two GPUs at 32 rows each make against one at 64 (64 clients) is
# the 64-slot step's ms over the 32-slot step's (not printed: computed by hand in the docs).
# EBB_DP_STAGES=1 adds an `--stages` profile of each (per-kernel device time of the batch's
# steps). EBB_DP_ALSO="K=V K=V;K=V" repeats the runs with those knobs (one set per ';').
# EBB_DP_ROWS (default "16 32 64"), EBB_DP_TYPE (default q4_0), EBB_DP_ROUNDS (default 2).
# Logs in $OUT (or /tmp/out): dpsteps.log.
# Usage (device): source .device-carry/env.sh; bash bench/gpu-dpsteps.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /dev/shm/models /tmp/cache
log=$out/dpsteps.log
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/cache}
type=${EBB_DP_TYPE:-q4_0}
f=/dev/shm/models/llama3-8b-$type.gguf
say "ebb $(ebb --version); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
gpu_gen llama3-8b "$type" "$f" || { say "ebb-gen-model failed"; exit 1; }
run() { # ROWS KNOBS...
    local n=$1
    shift
    say "batch $n ${*:-(defaults)}"
    env "$@" timeout 120 ebb bench -m "$f" --batch "$n" --prompt-tokens 128 --gen-tokens 64 \
        2>&1 | grep -E "aggregate|^ *slot|^ *error" | tee -a "$log"
    if [ "${EBB_DP_STAGES:-0}" = 1 ]; then
        env "$@" timeout 120 ebb bench -m "$f" --batch "$n" --prompt-tokens 128 \
            --gen-tokens 64 --stages 2>&1 | sed -n '/^  batch /,/^peak/p' | head -24 | tee -a "$log"
    fi
}
IFS=';' read -r -a sets <<<"${EBB_DP_ALSO:-}"
[ ${#sets[@]} -gt 0 ] || sets=("")
for _ in $(seq 1 "${EBB_DP_ROUNDS:-2}"); do
    for s in "${sets[@]}"; do
        read -r -a kv <<<"$s"
        for n in ${EBB_DP_ROWS:-16 32 64}; do run "$n" ${kv[@]+"${kv[@]}"}; done
    done
done
say "done"
