#!/usr/bin/env bash
# Per-kernel profiles on the GPU machine (EBB_CL_PROFILE=1: every launch waited for, its wall
# time, launch cost included, added up by kernel name): writes shapes with ebb-gen-model (few
# layers: a layer's profile does not depend on the count) and runs `ebb bench` on each setting.
# Logs go to $OUT (or /tmp/out).
# Usage (device): source .device-carry/env.sh; bash bench/gpu-profile.sh
# Environment: EBB_PROFILES ("shape:type:layers:bench args[:env,...]" entries, space separated;
# commas in the args stand for spaces).
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/models
log=$out/profile.log
export XDG_CACHE_HOME=/tmp/cache
say() { echo "== $*" | tee -a "$log"; }
profiles=${EBB_PROFILES:-"llama3-8b:q4_0:8:--batch,4,--prompt-tokens,16,--gen-tokens,32 \
qwen3-30b-a3b:q4_k_m:8:--prompt-tokens,16,--gen-tokens,64"}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
for p in $profiles; do
    IFS=: read -r shape type layers args envs <<<"$p"
    m=/tmp/models/$shape-$type-$layers.gguf
    [ -f "$m" ] || ebb-gen-model --shape "$shape" --tokenizer-from .device-carry/tok.gguf \
        --type "$type" --layers "$layers" -o "$m" >>"$log" 2>&1
    set --
    [ -n "${envs:-}" ] && set -- ${envs//,/ }
    say "$shape $type $layers layers: ebb bench ${args//,/ } ${envs:-}"
    env "$@" timeout 120 ebb bench -m "$m" ${args//,/ } 2>&1 |
        grep -iE "prefill|decode|step|traffic|kernels" | tee -a "$log"
    env "$@" EBB_CL_PROFILE=1 timeout 120 ebb bench -m "$m" ${args//,/ } 2>&1 |
        grep -E "profile" | sort -k6 -n -r | tee -a "$log"
done
