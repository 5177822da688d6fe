#!/usr/bin/env bash
# One device call for issue 36 (docs/STREAMER.md, "Long prompts through the expert cache"):
# prefill of a mixture-of-experts model whose experts stay in host memory, ebb's layer-major
# pass through the expert cache against llama.cpp's experts on the CPU. Writes the Qwen3-30B-A3B
# shape as the Q4_K_M mix with ebb-gen-model (random weights, the vocabulary of
# .device-carry/tok.gguf: llama.cpp's qwen2), then on that file:
#  - `ebb bench --expert-cache 24 --prompt-tokens P --gen-tokens 64 -r 2` for P in 512 and 4096
#    (24 of 128 slots a layer; every expert pinned in host memory where half the host's memory
#    holds them), its text (prefill, decode, the experts' lines: the layer-major passes' copies,
#    bytes, device copy time and experts' phase per layer step) and --json;
#  - the same at 512 with EBB_STREAM_LONG_ROWS=0 (chunk after chunk through the cache: before);
#  - at 4096 with EBB_STREAM_LONG_ROWS=4096 (one pass instead of two of 2048);
#  - greedy ids of a 600-token prompt resident and with --expert-cache 24 (identical expected:
#    the resident path runs the same grouped kernels from 8 rows);
#  - llama.cpp's llama-bench (CUDA, built in the background from .llama-src when carried; skip
#    with EBB_NO_LLAMA=1) with every expert tensor on the CPU (`-ngl 99 -ot exps=CPU`), -p 512
#    and 4096, -n 64, -r 2, on the same file.
# Logs go to $OUT (or /tmp/out): moe-prefill.log, and bench-*.json.
# Usage (device): source .device-carry/env.sh; bash bench/gpu-moe-prefill.sh
# Environment: EBB_SLOTS (24), EBB_PPS ("512 4096"), EBB_TG (64).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/models
log=$out/moe-prefill.log
export XDG_CACHE_HOME=/tmp/cache
gpu_llama_build llama-bench /tmp/lb
m=/tmp/models/qwen3-30b-a3b-q4_k_m.gguf
gpu_gen qwen3-30b-a3b q4_k_m "$m"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$log"
say "file $(du -h "$m" | cut -f1), host $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB"
n=${EBB_SLOTS:-24} tg=${EBB_TG:-64}
bench() { # LABEL PP [VAR=VALUE...]: one ebb bench with the cache, text and json
    local label=$1 pp=$2
    shift 2
    say "ebb bench --expert-cache $n --prompt-tokens $pp --gen-tokens $tg -r 2 $*"
    env "$@" timeout 580 ebb bench -m "$m" --expert-cache "$n" --prompt-tokens "$pp" \
        --gen-tokens "$tg" -r 2 2>&1 | grep -iE "prefill|decode|expert|launches|memory|error" |
        tee -a "$log"
    env "$@" timeout 580 ebb bench -m "$m" --expert-cache "$n" --prompt-tokens "$pp" \
        --gen-tokens "$tg" -r 1 --json >"$out/bench-$label.json" 2>>"$log"
}
for pp in ${EBB_PPS:-512 4096}; do
    bench "pp$pp" "$pp"
done
bench "pp512-chunks" 512 EBB_STREAM_LONG_ROWS=0
bench "pp4096-rows4096" 4096 EBB_STREAM_LONG_ROWS=4096
say "greedy ids of a 600-token prompt: resident vs --expert-cache $n"
prompt=$(python3 -c 'print(" ".join(f"Row {i}: the keeper counts the boats that pass the mill." for i in range(40)))')
ids() { timeout 300 ebb run -m "$m" -p "$prompt" -n 32 --temp 0 --json "$@" 2>>"$log" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["prompt_tokens"], d["tokens"])'; }
a=$(ids) b=$(ids --expert-cache "$n")
[ -n "$a" ] && [ "$a" = "$b" ] && say "ids identical ($a)" || say "ids differ or failed: $a / $b"
if [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ]; then
    say "waiting for llama-bench"
    if gpu_llama_wait /tmp/lb; then
        say "llama.cpp CUDA, experts on the CPU (-ngl 99 -ot exps=CPU)"
        pps=${EBB_PPS:-512 4096}
        timeout 580 /tmp/lb/bin/llama-bench -m "$m" -p "${pps// /,}" -n "$tg" -r 2 -ngl 99 \
            -fa 1 -ot "exps=CPU" 2>&1 | grep -E "^\||error" | tee -a "$log"
    else
        say "llama-bench did not build"
        tail -20 /tmp/lb.log >>"$log"
    fi
fi
