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
for flag in -m -p -n --temp --top-k --top-p --min-p --seed --repeat-penalty --repeat-last-n \
    --presence-penalty --frequency-penalty --config --chat --json --device --ctx --chat-template \
    --system; do
    grep -q -- "$flag" "$tmp/out" || fail "--help does not document $flag"
done

expect_status 2 "$ebb" run -m "$smol"
expect_status 2 "$ebb" run -m "$smol" -p hi --temp abc
expect_status 2 "$ebb" run -m "$smol" -p hi --top-p 1.5
expect_status 2 "$ebb" run -m "$smol" -p hi --temp 2.5
expect_status 2 "$ebb" run -m "$smol" -p hi --repeat-last-n -2
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

# Generation defaults, resolved as the server resolves them (api/defaults/defaults.h): a flag
# wins, then the model's general.sampling.*, then the config file's [generation], then the built-in values.
# Observed through top_k: 1 makes any temperature greedy. The control first: at temperature 1.5
# with the built-in top_k 40, at least one of three seeds leaves the greedy path.
tokens() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"])' "$1"; }
source_of() {
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sampling"][sys.argv[2]]["source"])' "$1" "$2"
}
story() { # story MODEL SEED [flags]: 6 tokens of "Once upon a time" at temperature 1.5
    local m=$1 s=$2
    shift 2
    "$ebb" run -m "$m" -p "Once upon a time" -n 6 --temp 1.5 --seed "$s" --json --device "$dev" \
        --ctx 64 "$@" > "$tmp/story.json" 2> "$tmp/err" || fail "story $m $s $*: $(cat "$tmp/err")"
    tokens "$tmp/story.json"
}
expect_status 0 "$ebb" run -m "$smol" -p "Once upon a time" -n 6 --temp 0 --json --device "$dev" \
    --ctx 64
greedy=$(tokens "$tmp/out")
[ "$(source_of "$tmp/out" temperature)" = flag ] || fail "--temp not reported as a flag"
[ "$(source_of "$tmp/out" top_k)" = builtin ] || fail "top_k not builtin: $(cat "$tmp/out")"
control=""
for s in 1 2 3; do control="$control $(story "$smol" $s)"; done
control2=$(story "$smol" 2)
[ "$control" != " $greedy $greedy $greedy" ] || fail "control: temperature 1.5 stayed greedy"
# A model that recommends top_k 1 (and temperature 0.7, overridden by --temp).
python3 "$set_kv" "$smol" "$tmp/rec.gguf" general.sampling.top_k=i32:1 \
    general.sampling.temp=f32:0.7 || fail "gguf-set-kv"
for s in 1 2 3; do
    got=$(story "$tmp/rec.gguf" $s)
    [ "$got" = "$greedy" ] || fail "general.sampling.top_k 1 not applied (seed $s): $got"
done
[ "$(source_of "$tmp/story.json" top_k)" = gguf ] || fail "top_k source: $(cat "$tmp/story.json")"
[ "$(source_of "$tmp/story.json" temperature)" = flag ] || fail "--temp did not win over the GGUF"
# A flag wins over the model's value: --top-k 40 gives the control's tokens again.
again=""
for s in 1 2 3; do again="$again $(story "$tmp/rec.gguf" $s --top-k 40)"; done
[ "$again" = "$control" ] || fail "--top-k 40 over the GGUF's 1: '$again', want '$control'"
# The config file's [generation] over the built-in value; the model's over the config's, unless
# model_sampling = false.
printf '[generation]\ntop_k = 1\n' > "$tmp/k1.conf"
got=$(story "$smol" 2 --config "$tmp/k1.conf")
[ "$got" = "$greedy" ] || fail "config top_k 1 not applied: $got"
[ "$(source_of "$tmp/story.json" top_k)" = config ] || fail "top_k source with the config"
printf '[generation]\ntop_k = 40\nmodel_sampling = false\n' > "$tmp/k40.conf"
got=$(EBB_CONFIG=$tmp/k40.conf story "$tmp/rec.gguf" 2)
[ "$got" = "$control2" ] || fail "model_sampling = false: $got, want $control2"
EBB_MODEL_SAMPLING=true EBB_CONFIG=$tmp/k40.conf story "$tmp/rec.gguf" 2 > /dev/null
[ "$(source_of "$tmp/story.json" top_k)" = gguf ] || fail "EBB_MODEL_SAMPLING=true over the file"
# A bad config value is an error that names the file, line and key.
printf '[generation]\ntemperature = hot\n' > "$tmp/bad.conf"
expect_status 1 "$ebb" run -m "$smol" -p hi --config "$tmp/bad.conf" --device "$dev"
grep -qF "$tmp/bad.conf:2: temperature: 'hot' is not a number between 0 and 2" "$tmp/err" ||
    fail "bad config: $(cat "$tmp/err")"
rm -f "$tmp/rec.gguf"

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
