#!/usr/bin/env bash
# One device call checking issue 13's Llama 3.1 rope scaling and qwen3moe on a GPU: the kernel
# tests, the llama3.1-tiny and qwen3moe-tiny family tests on OpenCL against the committed
# llama.cpp data, and decode of the qwen3-30b-a3b shape (Q4_K_M mix, 17 GiB written on the
# device). Carry .device-carry with bin/ (ebb, ebb-gen-model, test-kernels, and test-model built
# in this checkout's path, which it reads tests/data from), lib/ and vocabs/
# (ggml-vocab-qwen2.gguf, ggml-vocab-llama-bpe.gguf from scripts/fetch-vocabs.sh).
# Usage (device): bash bench/gpu-moe.sh
set -uo pipefail
source .device-carry/env.sh
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/models /tmp/cache
export XDG_CACHE_HOME=/tmp/cache
log=$out/gpu.log
V=.device-carry/vocabs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
( ebb-gen-model --shape qwen3-30b-a3b --tokenizer-from $V/ggml-vocab-qwen2.gguf --type q4_k_m -o /tmp/models/q30.gguf > /tmp/gen1.log 2>&1 ) &
timeout 150 test-kernels > "$out/kernels.log" 2>&1; echo "test-kernels exit $?: $(tail -1 $out/kernels.log)" | tee -a "$log"
grep -E "moe|rope" "$out/kernels.log" | tee -a "$log"
for fam in llama3.1-tiny:ggml-vocab-llama-bpe qwen3moe-tiny:ggml-vocab-qwen2; do
  s=${fam%%:*}; v=${fam##*:}
  ebb-gen-model --shape $s --tokenizer-from $V/$v.gguf --type q8_0 --seed 1 -o /tmp/models/$s.gguf >/dev/null 2>&1
  sha256sum /tmp/models/$s.gguf | tee -a "$log"
  EBB_MODELS_DIR=/tmp/models EBB_TEST_PROMPTS=all EBB_TEST_GEN=$s EBB_TEST_DEVICE=auto timeout 90 test-model > "$out/$s.log" 2>&1
  echo "test-model $s exit $?" | tee -a "$log"
  grep -E "^# (model|worst|greedy)|FAILED" "$out/$s.log" | tee -a "$log"
done
wait
tail -1 /tmp/gen1.log | tee -a "$log"
echo "== qwen3-30b-a3b q4_k_m decode after 16 prompt tokens" | tee -a "$log"
timeout 120 ebb bench -m /tmp/models/q30.gguf --prompt-tokens 16 --gen-tokens 64 2>&1 | tail -6 | tee -a "$log"

