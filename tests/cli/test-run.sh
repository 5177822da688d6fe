#!/bin/bash
# `ebb run` end to end on SmolLM2 with the reference device: --help documents every flag, usage
# errors exit 2, a prompt longer than the context exits 1, --json carries the agreed fields, the
# greedy ids start like llama.cpp's (tests/data/generation), streaming prints the same text as
# --json, a seed reproduces a sampled run, and -n / the context bound the output.
#
#   test-run.sh EBB_BINARY DATA_DIR
set -u

ebb=$1
data=$2
. "$(dirname "$0")/lib.sh"

dev=${EBB_TEST_DEVICE:-ref}
[ -f "$smol" ] || { echo "skip: missing model $smol (set EBB_MODELS_DIR)"; exit 77; }

expect_status 0 "$ebb" run --help
for flag in -m -p -n --temp --top-k --top-p --min-p --seed --repeat-penalty --chat --json \
    --device --ctx --chat-template --system; do
    grep -q -- "$flag" "$tmp/out" || fail "--help does not document $flag"
done

expect_status 2 "$ebb" run -m "$smol"
expect_status 2 "$ebb" run -m "$smol" -p hi --temp abc
expect_status 2 "$ebb" run -m "$smol" -p hi --top-p 1.5
expect_status 2 "$ebb" run -m "$smol" -p hi --bogus
expect_status 2 "$ebb" run -m "$smol" -p hi --system "be brief"
grep -q -- "--system need --chat" "$tmp/err" || fail "--system without --chat: $(cat "$tmp/err")"
expect_status 1 "$ebb" run -m "$smol" -p hi --chat --chat-template nope --device "$dev"
grep -q "unknown --chat-template 'nope'" "$tmp/err" || fail "bad --chat-template: $(cat "$tmp/err")"
expect_status 1 "$ebb" run -m "$tmp/none.gguf" -p hi --device "$dev"
expect_status 1 "$ebb" run -m "$smol" -p "$(printf 'word %.0s' $(seq 40))" --ctx 16 --device "$dev"
grep -q "context" "$tmp/err" || fail "too-long prompt error does not mention the context"

# Greedy, --json: fields, and the first ids equal llama.cpp's for the same raw prompt (the
# committed data diverges only later, at a near tie).
prompt="The capital of France is"
expect_status 0 "$ebb" run -m "$smol" -p "$prompt" -n 5 --temp 0 --json --device "$dev" --ctx 64
cp "$tmp/out" "$tmp/greedy.json"
python3 - "$tmp/greedy.json" "$data/generation/smollm2.json" <<'PY' || fail "greedy --json check"
import json, sys
got = json.load(open(sys.argv[1]))
exp = json.load(open(sys.argv[2]))["cases"][0]
for key in ("tokens", "text", "prompt_tokens", "timings", "stop"):
    assert key in got, key
assert got["prompt_ids"] == exp["prompt_ids"], (got["prompt_ids"], exp["prompt_ids"])
assert got["prompt_tokens"] == len(exp["prompt_ids"])
assert got["tokens"] == exp["ids"][:5], (got["tokens"], exp["ids"][:5])
assert got["stop"] == "length"
t = got["timings"]
assert t["prefill_ms"] > 0 and t["decode_tok_s"] > 0, t
PY

# Streaming prints the same text (plus a final newline) and speed on stderr.
expect_status 0 "$ebb" run -m "$smol" -p "$prompt" -n 5 --temp 0 --device "$dev" --ctx 64
python3 -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["text"] + "\n")' \
    "$tmp/greedy.json" > "$tmp/want.txt"
cmp -s "$tmp/out" "$tmp/want.txt" || fail "streamed text differs from --json text"
grep -q "tok/s" "$tmp/err" || fail "no tokens/s on stderr"

# A seed reproduces a sampled run.
run_sampled() {
    "$ebb" run -m "$smol" -p "Once upon a time" -n 6 --temp 1.0 --top-k 0 --top-p 1 \
        --min-p 0 --seed "$1" --json --device "$dev" --ctx 64 2> /dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'
}
a=$(run_sampled 42)
b=$(run_sampled 42)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "seed 42 gave '$a' then '$b'"

# -n 0 generates nothing; a small context stops generation with stop "context".
expect_status 0 "$ebb" run -m "$smol" -p "$prompt" -n 0 --json --device "$dev" --ctx 64
grep -q '"tokens":\[\]' "$tmp/out" || fail "-n 0 generated tokens: $(cat "$tmp/out")"
expect_status 0 "$ebb" run -m "$smol" -p "$prompt" -n 50 --temp 0 --json --device "$dev" --ctx 8
grep -q '"stop":"context"' "$tmp/out" || fail "--ctx 8 did not stop at the context"

# --chat renders the model's own template (SmolLM2: ChatML with its default system message):
# the prompt is <|im_start|> (id 1) ... and generation ends at EOG.
expect_status 0 "$ebb" run -m "$smol" -p "What is the capital of France?" --chat -n 24 --temp 0 \
    --json --device "$dev" --ctx 128
python3 - "$tmp/out" <<'PY' || fail "--chat check"
import json, sys
got = json.load(open(sys.argv[1]))
assert got["prompt_ids"][0] == 1, got["prompt_ids"]
assert "Paris" in got["text"], got["text"]
assert got["stop"] == "eog", got["stop"]
PY
ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' "$tmp/out")
"$ebb" detokenize -m "$smol" --special "$ids" > "$tmp/rendered" || fail "detokenize"
grep -q "^<|im_start|>system$" "$tmp/rendered" && grep -q "SmolLM" "$tmp/rendered" ||
    fail "--chat did not render SmolLM2's default system message: $(cat "$tmp/rendered")"
# --system replaces it, and the ids are exactly the ChatML text tokenized with specials.
expect_status 0 "$ebb" run -m "$smol" -p "What is the capital of France?" --chat \
    --system "Answer in one word." -n 1 --temp 0 --json --device "$dev" --ctx 128
printf '<|im_start|>system\nAnswer in one word.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n' > "$tmp/want.txt"
"$ebb" tokenize -m "$smol" --special --add-special --json - < "$tmp/want.txt" > "$tmp/want.json" ||
    fail "tokenize"
python3 - "$tmp/out" "$tmp/want.json" <<'PY' || fail "--chat --system ids"
import json, sys
got = json.load(open(sys.argv[1]))["prompt_ids"]
want = json.load(open(sys.argv[2]))
assert got == want, (got, want)
PY
# A named family overrides the model's: llama3 headers around the same turn.
expect_status 0 "$ebb" run -m "$smol" -p "Hi" --chat --chat-template llama3 -n 1 --temp 0 \
    --json --device "$dev" --ctx 128
ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' "$tmp/out")
"$ebb" detokenize -m "$smol" --special "$ids" > "$tmp/rendered" || fail "detokenize"
grep -q "<|start_header_id|>user<|end_header_id|>" "$tmp/rendered" ||
    fail "--chat-template llama3 not used: $(cat "$tmp/rendered")"

# The default context is capped by memory: with the probe reporting 100 MB available, SmolLM2's
# KV cache (46080 bytes a token, counted at 4 bytes an element) may take 50 MB: 1024 tokens.
echo available=100M > "$tmp/probe"
long=$(printf 'word %.0s' $(seq 1500))
EBB_TEST_MEMPROBE_FILE=$tmp/probe expect_status 1 "$ebb" run -m "$smol" -p "$long" -n 1 \
    --device "$dev"
grep -q "the context holds 1024" "$tmp/err" || fail "memory-capped context: $(head -c 300 "$tmp/err")"

[ "$fails" -eq 0 ] && echo "ok" || echo "$fails failure(s)"
[ "$fails" -eq 0 ]
