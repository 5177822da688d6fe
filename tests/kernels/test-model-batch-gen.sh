#!/bin/sh
# The batched pass on a random-weight model of another family (qwen3: q/k head norms, GQA):
# regenerates it with ebb-gen-model from a vocabulary of scripts/fetch-vocabs.sh (qwen2's, or
# another for a shape of another vocabulary size; $EBB_VOCABS_DIR, default ~/.cache/ebb/vocabs;
# missing is a failure, as for the family tests) and runs test-model-batch on it.
# Usage: test-model-batch-gen.sh EBB-GEN-MODEL TEST-MODEL-BATCH WORKDIR [TYPE (q8_0)] [SHAPE
# (qwen3-tiny)] [VOCAB (qwen2)]
set -e
gen=$1 test=$2 work=$3 type=${4:-q8_0} shape=${5:-qwen3-tiny} voc=${6:-qwen2}
vocab=${EBB_VOCABS_DIR:-$HOME/.cache/ebb/vocabs}/ggml-vocab-$voc.gguf
if [ ! -f "$vocab" ]; then
    echo "missing $vocab: run scripts/fetch-vocabs.sh and set EBB_VOCABS_DIR" >&2
    exit 1
fi
mkdir -p "$work"
model=$work/qwen3-tiny-batch.gguf
"$gen" --shape "$shape" --tokenizer-from "$vocab" --type "$type" --seed 1 -o "$model"
exec "$test" "$model"
