#!/usr/bin/env bash
# GPU check of this branch: kernel tests, the llama3.1-tiny and qwen3moe-tiny family tests on
# OpenCL, and decode speed of qwen3-30b-a3b (Q4_K_M mix) and llama3.1-8b (Q4_0).
set -uo pipefail
source .device-carry/env.sh
out=${OUT:-/tmp/out}; mkdir -p "$out" /tmp/models /tmp/cache
export XDG_CACHE_HOME=/tmp/cache
log=$out/gpu.log
V=.device-carry/vocabs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
( ebb-gen-model --shape qwen3-30b-a3b --tokenizer-from $V/ggml-vocab-qwen2.gguf --type q4_k_m -o /tmp/models/q30.gguf > /tmp/gen1.log 2>&1 ) &
mkdir -p /work/wt/moe && ln -sfn "$PWD/tests" /work/wt/moe/tests
timeout 300 test-kernels > "$out/kernels.log" 2>&1; echo "test-kernels exit $?: $(tail -1 $out/kernels.log)" | tee -a "$log"
grep -E "moe|rope" "$out/kernels.log" | tee -a "$log"
for fam in llama3.1-tiny:ggml-vocab-llama-bpe qwen3moe-tiny:ggml-vocab-qwen2; do
  s=${fam%%:*}; v=${fam##*:}
  ebb-gen-model --shape $s --tokenizer-from $V/$v.gguf --type q8_0 --seed 1 -o /tmp/models/$s.gguf >/dev/null 2>&1
  sha256sum /tmp/models/$s.gguf | tee -a "$log"
  EBB_MODELS_DIR=/tmp/models EBB_TEST_PROMPTS=all EBB_TEST_GEN=$s EBB_TEST_DEVICE=auto timeout 300 test-model > "$out/$s.log" 2>&1
  echo "test-model $s exit $?" | tee -a "$log"
  grep -E "^# (model|worst|greedy)|FAILED" "$out/$s.log" | tee -a "$log"
done
wait
tail -1 /tmp/gen1.log | tee -a "$log"
echo "== qwen3-30b-a3b q4_k_m decode after 16 prompt tokens, pp512" | tee -a "$log"
timeout 200 ebb bench -m /tmp/models/q30.gguf --prompt-tokens 16 --gen-tokens 64 2>&1 | tail -6 | tee -a "$log"
timeout 200 ebb bench -m /tmp/models/q30.gguf --prompt-tokens 512 --gen-tokens 16 2>&1 | tail -6 | tee -a "$log"
