#!/usr/bin/env bash
# One device call for issue 13's GPU figures: random-weight GGUFs of 7-8B-class shapes of each
# family ebb runs on OpenCL (written here by ebb-gen-model with the family's real vocabulary)
# and the Qwen3-30B-A3B shape (Q4_K_M mix), `ebb bench` (pp512, decode after 16 prompt tokens)
# next to llama.cpp's CUDA llama-bench (built in the background from .llama-src) on the same
# files. Carry .device-carry (bin/, lib/, env.sh, vocabs/ with ggml-vocab-{qwen2,llama-bpe,
# phi-3}.gguf from scripts/fetch-vocabs.sh) and .llama-src.
# Usage (device): bash bench/gpu-families.sh   (EBB_FAMILIES overrides the shape list:
# shape:vocab:type entries)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
source .device-carry/env.sh
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/models /tmp/cache
export XDG_CACHE_HOME=/tmp/cache
log=$out/families.log
V=.device-carry/vocabs
gpu_llama_build llama-bench /tmp/lb
fams=${EBB_FAMILIES:-"qwen3-8b:qwen2:q4_0 qwen2.5-7b:qwen2:q4_0 llama3.1-8b:llama-bpe:q4_0 phi3-mini:phi-3:q4_0 qwen3-30b-a3b:qwen2:q4_k_m"}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
for f in $fams; do
    IFS=: read -r s v t <<<"$f"
    [ -f "/tmp/models/$s-$t.gguf" ] ||
        ebb-gen-model --shape "$s" --tokenizer-from "$V/ggml-vocab-$v.gguf" --type "$t" \
            -o "/tmp/models/$s-$t.gguf" >"/tmp/gen-$s.log" 2>&1 &
done
wait
for f in $fams; do
    IFS=: read -r s v t <<<"$f"
    m=/tmp/models/$s-$t.gguf
    say "ebb $s $t: pp512 + tg128, then tg128 after 16 prompt tokens ($(du -h "$m" | cut -f1))"
    timeout 200 ebb bench -m "$m" --prompt-tokens 512 --gen-tokens 128 2>&1 |
        grep -E "model|prefill|decode|error" | tee -a "$log"
    timeout 200 ebb bench -m "$m" --prompt-tokens 16 --gen-tokens 128 2>&1 | grep -E "decode|error" |
        tee -a "$log"
done
say "waiting for llama-bench"
if gpu_llama_wait /tmp/lb; then
    for f in $fams; do
        IFS=: read -r s v t <<<"$f"
        say "llama.cpp CUDA $s $t"
        timeout 200 /tmp/lb/bin/llama-bench -m "/tmp/models/$s-$t.gguf" -p 512 -n 128 -r 2 \
            -ngl 99 -fa 1 2>&1 | grep -E "^\| [a-z]" | tee -a "$log"
    done
else
    say "llama-bench did not build"; tail -20 /tmp/lb.log >>"$log"
fi
