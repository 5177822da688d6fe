#!/bin/bash
# `ebb tokenize` / `ebb detokenize` end to end on both real models: ids as llama.cpp gives them
# (values from tests/data/tokenizer), --json/--bos/--add-special/--special, stdin, round trips,
# and the exit statuses of usage errors (2) and bad models or ids (1).
#
#   test-tokenize.sh EBB_BINARY
set -u

ebb=$1
. "$(dirname "$0")/lib.sh"

# expect_line WANT CMD...: CMD succeeds and prints exactly the line WANT.
expect_line() {
    local want=$1
    shift
    expect_status 0 "$@"
    [ "$(cat "$tmp/out")" = "$want" ] || fail "$* printed '$(cat "$tmp/out")', want '$want'"
}

for f in "$smol" "$gemma"; do
    [ -f "$f" ] || { echo "missing model $f (set EBB_MODELS_DIR)"; exit 1; }
done

# ---- help and usage ----
expect_status 0 "$ebb" tokenize --help
for flag in -m --model --json --bos --add-special --special --help; do
    grep -qF -- "$flag" "$tmp/out" || fail "tokenize --help lacks $flag"
done
expect_status 0 "$ebb" detokenize --help
for flag in -m --model --special --no-newline --help; do
    grep -qF -- "$flag" "$tmp/out" || fail "detokenize --help lacks $flag"
done
expect_status 2 "$ebb" tokenize "text"
expect_status 2 "$ebb" tokenize -m "$smol" --bogus "text"
expect_status 2 "$ebb" tokenize -m "$smol" one two
expect_status 2 "$ebb" tokenize -m
expect_status 2 "$ebb" detokenize -m "$smol"
expect_status 2 "$ebb" detokenize 1 2 3

# ---- bad models and ids ----
expect_status 1 "$ebb" tokenize -m "$tmp/none.gguf" "x"
grep -qF "none.gguf" "$tmp/err" || fail "missing-model message does not name the file"
printf 'not a gguf file at all, just text\n' > "$tmp/text.gguf"
expect_status 1 "$ebb" tokenize -m "$tmp/text.gguf" "x"
grep -qF "not a GGUF file" "$tmp/err" || fail "non-GGUF message: $(cat "$tmp/err")"
expect_status 1 "$ebb" detokenize -m "$tmp/text.gguf" 1
expect_status 1 "$ebb" detokenize -m "$smol" 12x
grep -qF "not a token id" "$tmp/err" || fail "bad id message: $(cat "$tmp/err")"
expect_status 1 "$ebb" detokenize -m "$smol" 49152
grep -qF "out of range" "$tmp/err" || fail "range message: $(cat "$tmp/err")"
expect_status 1 "$ebb" detokenize -m "$smol" -- -5

# ---- SmolLM2 (byte-level BPE) ----
expect_line "19556 905" "$ebb" tokenize -m "$smol" "Hello world"
expect_line "[19556,905]" "$ebb" tokenize -m "$smol" --json "Hello world"
expect_line "1 19556 905" "$ebb" tokenize -m "$smol" --bos "Hello world"
expect_line "19556 905" "$ebb" tokenize -m "$smol" --add-special "Hello world"
expect_line "1 6004 2" "$ebb" tokenize -m "$smol" --special "<|im_start|>hi<|im_end|>"
expect_line "" "$ebb" tokenize -m "$smol" ""
printf 'a\nb' > "$tmp/in.txt"
expect_line "81 198 82" "$ebb" tokenize -m "$smol" - < "$tmp/in.txt"
expect_line "81 198 82" "$ebb" tokenize -m "$smol" < "$tmp/in.txt"
expect_line "Hello world" "$ebb" detokenize -m "$smol" 19556 905
expect_line "hi" "$ebb" detokenize -m "$smol" 1 6004 2
expect_line "<|im_start|>hi<|im_end|>" "$ebb" detokenize -m "$smol" --special "1,6004,2"

# ---- Gemma 3 (SentencePiece) ----
expect_line "9259 1902" "$ebb" tokenize -m "$gemma" "Hello world"
expect_line "2 9259 1902" "$ebb" tokenize -m "$gemma" --add-special "Hello world"
expect_line "105" "$ebb" tokenize -m "$gemma" --special "<start_of_turn>"
expect_line "Hello world" "$ebb" detokenize -m "$gemma" 2 9259 1902

# ---- round trips of a mixed UTF-8 text through both tokenizers ----
printf 'Caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 x  y\n\tz' \
    > "$tmp/rt.txt"
for m in "$smol" "$gemma"; do
    expect_status 0 "$ebb" tokenize -m "$m" - < "$tmp/rt.txt"
    ids=$(cat "$tmp/out")
    # shellcheck disable=SC2086
    "$ebb" detokenize -m "$m" --no-newline $ids > "$tmp/back.txt" ||
        fail "detokenize of $(basename "$m") ids failed"
    cmp -s "$tmp/rt.txt" "$tmp/back.txt" || fail "round trip through $(basename "$m") differs"
done

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all tokenize/detokenize checks passed"
