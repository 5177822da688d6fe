#!/usr/bin/env bash
# Issue 31's soak by hand on the GPU machine, one device call (a call is limited to 10 minutes,
# so DURATION defaults to 540 s): bench/soak.sh against a random-weight model written there (the
# real SmolLM2 file is larger than a call may carry, and no SmolLM2 vocabulary is on that
# machine): the Llama-3.2-1B shape with 4 layers, Q4_0, the vocabulary of .device-carry/tok.gguf
# (llama.cpp's ggml-vocab-llama-bpe.gguf) and tests/data/chat-templates/llama3.jinja, under the
# file name soak.sh serves. The prompt-cache store is small (PROMPT_CACHE 32M) and two fillers
# fill it in seconds, so the RSS after WARMUP is the plateau soak.sh checks (within 2%); the
# device's memory is sampled by nvidia-smi every 10 s into gpu-mem.csv beside soak.sh's rss.csv.
# Needs wrk on the device (carry /usr/bin/wrk and its libluajit in .device-carry/bin and lib).
# Checked on PoCL with DURATION=40 (store full at 10 s, RSS +0.21%).
#
#   source .device-carry/env.sh; bash bench/gpu-soak.sh      (logs in $OUT or /tmp/out)
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/dev/shm/cache} EBB_MODELS_DIR=${EBB_MODELS_DIR:-/dev/shm/models}
mkdir -p "$EBB_MODELS_DIR"
ebb --version | tee "$out/log"
ebb-gen-model --shape llama3.2-1b --layers 4 --type q4_0 --tokenizer-from .device-carry/tok.gguf \
    --chat-template tests/data/chat-templates/llama3.jinja \
    -o "$EBB_MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf" 2>&1 | tail -1 | tee -a "$out/log"
(while sleep 10; do nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader; done) \
    >"$out/gpu-mem.csv" 2>&1 &
smi=$!
DURATION=${DURATION:-540} WARMUP=${WARMUP:-120} PROMPT_CACHE=${PROMPT_CACHE:-32M} \
    FILLERS=${FILLERS:-2} PROMPT_WORDS=${PROMPT_WORDS:-500} OUT="$out/soak" \
    timeout $(( ${DURATION:-540} + 50 )) sh bench/soak.sh "$(command -v ebb)" 2>&1 | tail -30 |
    tee -a "$out/log"
kill "$smi" 2>/dev/null
echo "device memory (first, last samples):" | tee -a "$out/log"
head -1 "$out/gpu-mem.csv" | tee -a "$out/log"
tail -1 "$out/gpu-mem.csv" | tee -a "$out/log"
