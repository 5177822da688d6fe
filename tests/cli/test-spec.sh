#!/bin/bash
# Speculative decoding end to end (`ebb run --spec ngram`, `ebb bench --spec ngram`) on SmolLM2:
# greedy ids identical with and without drafts on repetitive prompts where drafts are accepted
# (acceptance > 0 asserted), on the reference with llama.cpp's rounding (ref-q8, whose
# multi-token products round exactly as its one-token ones: identity must be exact) and on the
# OpenCL engine (EBB_TEST_DEVICE, default auto: its batched products round differently, so a
# near-tie could flip; these prompts have none); a seeded sampled run gives the same tokens;
# -n and an end-of-generation token cut a pass's accepted drafts; usage errors exit 2.
#
#   test-spec.sh EBB_BINARY
set -u

ebb=$1
. "$(dirname "$0")/lib.sh"

[ -f "$smol" ] || { echo "skip: missing model $smol (set EBB_MODELS_DIR)"; exit 77; }
dev=${EBB_TEST_DEVICE:-auto}

expect_status 0 "$ebb" run --help
for flag in --spec --draft-max --draft-min --draft-fixed --draft; do
    grep -q -- "$flag" "$tmp/out" || fail "ebb run --help does not document $flag"
done
expect_status 2 "$ebb" run -m "$smol" -p hi --spec nope
expect_status 2 "$ebb" run -m "$smol" -p hi --draft-max 4
expect_err "need --spec"
expect_status 2 "$ebb" run -m "$smol" -p hi --spec ngram --draft-max 0
expect_status 2 "$ebb" run -m "$smol" -p hi --spec ngram --draft-max 4 --draft-min 6
expect_status 2 "$ebb" bench -m "$smol" --spec nope

numbers="Numbers: $(seq -s ', ' 1 30)
Again: $(seq -s ', ' 1 30)
Again: 1, 2, 3,"
# The reference's runs take the same pattern up to 8 (63 prompt tokens against 190: prefill
# was most of their CPU, 20-30 s a run; up to 12, 13.5 s a run, up to 8, 8.8 s) and 10 tokens,
# all inside the pattern (" 4, 5, 6, ": the drafts of two passes accepted, as on the long
# prompt).
numbers_ref="Numbers: $(seq -s ', ' 1 8)
Again: $(seq -s ', ' 1 8)
Again: 1, 2, 3,"
code='Rewrite this function, renaming the variable x to value. Keep everything else the same.

def scale(x, factor):
    if x is None:
        return None
    result = x * factor
    print("scaled", x, "to", result)
    return result
'

# run_json OUT ARGS...: ebb run --json into $tmp/OUT.json.
run_json() {
    local out=$1
    shift
    "$ebb" run -m "$smol" --json --ctx 512 "$@" > "$tmp/$out.json" 2> "$tmp/$out.err" ||
        fail "ebb run $*: $(tail -c 300 "$tmp/$out.err")"
}

# same_ids A B WHAT: equal token lists; with MIN_ACC, B's spec.accepted >= MIN_ACC.
same_ids() {
    python3 - "$tmp/$1.json" "$tmp/$2.json" "$3" "${4:-0}" <<'PY' || fail "$3"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
what, min_acc = sys.argv[3], int(sys.argv[4])
assert a["tokens"] == b["tokens"], (what, a["tokens"], b["tokens"])
assert a["text"] == b["text"] and a["stop"] == b["stop"], what
assert "spec" not in a and b["spec"]["type"] in ("ngram", "draft"), what
s = b["spec"]
assert s["accepted"] <= s["drafted"] and s["accepted"] >= min_acc, (what, s)
print(f'{what}: {len(b["tokens"])} tokens identical; drafted {s["drafted"]}, '
      f'accepted {s["accepted"]}, {s["tokens_per_pass"]:.2f} tokens per pass')
PY
}

for d in ref-q8 "$dev"; do
    n=40 p=$numbers
    [ "$d" = ref-q8 ] && n=10 p=$numbers_ref # the reference is slow
    run_json plain -p "$p" -n $n --temp 0 --device "$d"
    run_json spec -p "$p" -n $n --temp 0 --device "$d" --spec ngram
    same_ids plain spec "numbers on $d, adaptive" 1
    run_json fixed -p "$p" -n $n --temp 0 --device "$d" --spec ngram --draft-fixed \
        --draft-max 6
    same_ids plain fixed "numbers on $d, 6 drafts a pass" 6
done

# A chat turn that copies code back with an edit, to its end: an end-of-generation token
# inside a pass ends the text there, as without drafts. (The answer is 23 tokens, so one pair of
# runs with room for 200 checks both; a pair with -n 48 gave the same runs.)
run_json plain -p "$code" --chat -n 200 --temp 0 --device "$dev"
run_json spec -p "$code" --chat -n 200 --temp 0 --device "$dev" --spec ngram --draft-fixed
same_ids plain spec "code edit to its end on $dev" 1
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["stop"] == "eog", j["stop"]' \
    "$tmp/spec.json" || fail "the code edit should end at an end-of-generation token"

# --draft MODEL with the model itself as the draft: its greedy drafts are the model's own
# single-token choices, so (ties aside) every one is accepted, and the ids are the same.
run_json spec -p "$code" --chat -n 200 --temp 0 --device "$dev" --draft "$smol"
same_ids plain spec "code edit, the model as its own draft, on $dev" 1
python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["spec"]; assert s["type"] == "draft" and s["accepted"] >= s["drafted"] - 1, s' \
    "$tmp/spec.json" || fail "self-draft acceptance"
expect_status 2 "$ebb" run -m "$smol" -p hi --spec draft
expect_status 1 "$ebb" run -m "$smol" -p hi --draft "$tmp/none.gguf" --device "$dev"
expect_err "--draft"
if [ -f "$gemma" ]; then # another tokenizer: refused with a reason
    expect_status 1 "$ebb" run -m "$smol" -p hi --draft "$gemma" --device ref
    expect_err "tokenizer"
fi

# Sampling with a seed: the same rows and the same draws give the same tokens.
run_json plain -p "$numbers_ref" -n 10 --temp 0.7 --top-k 20 --seed 7 --device ref-q8
run_json spec -p "$numbers_ref" -n 10 --temp 0.7 --top-k 20 --seed 7 --device ref-q8 \
    --spec ngram --draft-fixed
same_ids plain spec "sampled, seed 7, on ref-q8" 0

# -n inside a pass: 8 drafts a pass, yet exactly 5 tokens.
run_json spec -p "$numbers" -n 5 --temp 0 --device "$dev" --spec ngram --draft-fixed
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert len(j["tokens"]) == 5 and j["stop"] == "length", j' \
    "$tmp/spec.json" || fail "-n 5 with drafts"

# ebb bench: the same greedy ids with and without, from a text prompt.
printf '%s' "$numbers" > "$tmp/p.txt"
for s in "" "--spec ngram"; do
    "$ebb" bench -m "$smol" --prompt-file "$tmp/p.txt" --gen-tokens 32 --device "$dev" --json \
        $s > "$tmp/bench$s.json" 2> "$tmp/bench.err" || fail "ebb bench $s: $(cat "$tmp/bench.err")"
done
python3 - "$tmp/bench.json" "$tmp/bench--spec ngram.json" <<'PY' || fail "ebb bench --spec"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["tokens"] == b["tokens"], (a["tokens"], b["tokens"])
assert b["spec"]["accepted"] > 0, b["spec"]
print("bench:", a["decode_tok_s"], "->", b["decode_tok_s"], "tok/s", b["spec"])
PY

[ "$fails" -eq 0 ] || exit 1
echo "ok"
