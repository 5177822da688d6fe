#!/bin/sh
# The batched pass on a random-weight model of another family (qwen3: q/k head norms, GQA):
# regenerates it with ebb-gen-model from the qwen2 vocabulary of scripts/fetch-vocabs.sh
# ($EBB_VOCABS_DIR, default ~/.cache/ebb/vocabs; missing is a failure, as for the family tests)
# and runs test-model-batch on it.
# Usage: test-model-batch-gen.sh EBB-GEN-MODEL TEST-MODEL-BATCH WORKDIR [TYPE (q8_0)] [SHAPE
# (qwen3-tiny)]
set -e
gen=$1 test=$2 work=$3 type=${4:-q8_0} shape=${5:-qwen3-tiny}
vocab=${EBB_VOCABS_DIR:-$HOME/.cache/ebb/vocabs}/ggml-vocab-qwen2.gguf
if [ ! -f "$vocab" ]; then
    echo "missing $vocab: run scripts/fetch-vocabs.sh and set EBB_VOCABS_DIR" >&2
    exit 1
fi
mkdir -p "$work"
model=$work/qwen3-tiny-batch.gguf
"$gen" --shape "$shape" --tokenizer-from "$vocab" --type "$type" --seed 1 -o "$model"
exec "$test" "$model"
