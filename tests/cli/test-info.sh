#!/bin/bash
# `ebb info` end to end: the facts of both real models (figures checked against the gguf Python
# package's GGUFReader), --json output, usage errors, and malformed files (exit 1, one line on
# stderr naming the file and the problem, nothing on stdout).
#
#   test-info.sh EBB_BINARY
#
# bash, not sh: under `meson test --setup valgrind` the shell itself runs in memcheck, and dash
# leaks a string at startup.
set -u

ebb=$1
. "$(dirname "$0")/lib.sh"

# bad_file NAME SUBSTRING: ebb info on $tmp/NAME fails with one stderr line naming it.
bad_file() {
    expect_status 1 "$ebb" info "$tmp/$1"
    [ ! -s "$tmp/out" ] || fail "$1: output on stdout"
    [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "$1: stderr is not one line: $(cat "$tmp/err")"
    grep -qF -- "ebb info: $tmp/$1: " "$tmp/err" || fail "$1: message does not name the file"
    grep -qF -- "$2" "$tmp/err" || fail "$1: message lacks '$2': $(cat "$tmp/err")"
    echo "ok  $1: $(cat "$tmp/err")"
}

# ---- usage ----
expect_status 0 "$ebb" info --help
for flag in --json --devices --help; do expect_out "$flag"; done
expect_status 2 "$ebb" info
expect_status 2 "$ebb" info --bogus x.gguf
expect_status 2 "$ebb" info a.gguf b.gguf

# ---- malformed files ----
: > "$tmp/empty.gguf"
bad_file empty.gguf "too short"
printf 'GGML\003\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' \
    > "$tmp/magic.gguf"
bad_file magic.gguf "bad magic"
printf 'GGUF\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' \
    > "$tmp/v1.gguf"
bad_file v1.gguf "version 1"
printf 'GGUF\003\000\000\000\000\000\000\000\000\000\000\020\001\000\000\000\000\000\000\000' \
    > "$tmp/counts.gguf"
bad_file counts.gguf "cannot fit"
mkfifo "$tmp/fifo.gguf"
bad_file fifo.gguf "not a regular file"
expect_status 1 "$ebb" info "$tmp/missing.gguf"
grep -qF "cannot open" "$tmp/err" || fail "missing file: $(cat "$tmp/err")"
expect_status 1 "$ebb" info "$tmp"
grep -qF "not a regular file" "$tmp/err" || fail "directory: $(cat "$tmp/err")"

# ---- real models ----
checked=0
if [ -f "$smol" ]; then
    checked=$((checked + 1))
    expect_status 0 "$ebb" info "$smol"
    for want in "architecture:     llama" "parameters:       134515008 (134.5M)" \
        "layers:           30" "embedding:        576" "heads:            9" \
        "kv heads:         3" "head dim:         64" "ffn:              1536" \
        "context:          8192" "rope base:        100000" "vocab:            49152" \
        "tokenizer:        gpt2 (pre: smollm)" "chat template:    yes" \
        "non-layer bytes:  30083328" "layer bytes:      2216448 each (30 layers)" \
        "Q4_1      210 tensors     66355200 bytes" "Q8_0        1 tensors     30081024 bytes" \
        "F32        61 tensors       140544 bytes" "98362432 bytes, GGUF v3"; do
        expect_out "$want"
    done
    expect_status 0 "$ebb" info --json "$smol"
    python3 - "$tmp/out" <<'PY' || fail "SmolLM2 --json"
import json, sys
j = json.load(open(sys.argv[1]))
want = dict(architecture='llama', n_params=134515008, n_layer=30, n_embd=576, n_head=9,
            n_head_kv=3, head_dim=64, n_ff=1536, n_ctx=8192, rope_freq_base=100000.0,
            n_vocab=49152, tokenizer={'model': 'gpt2', 'pre': 'smollm'}, chat_template=True,
            non_layer_bytes=30083328, layer_bytes={'count': 30, 'min': 2216448, 'max': 2216448},
            file_size=98362432, gguf_version=3, n_tensors=272, n_kv=33,
            types={'F32': {'count': 61, 'bytes': 140544}, 'Q4_1': {'count': 210, 'bytes': 66355200},
                   'Q8_0': {'count': 1, 'bytes': 30081024}})
bad = {k: (j.get(k), v) for k, v in want.items() if j.get(k) != v}
if bad:
    sys.exit('mismatch: %r' % bad)
PY
    # The same file cut short by one byte: the last tensor runs past the end.
    head -c 98362431 "$smol" > "$tmp/cut.gguf"
    bad_file cut.gguf "past end of file (size 98362431)"
    head -c 100000 "$smol" > "$tmp/head.gguf"
    bad_file head.gguf "'tokenizer.ggml.tokens': array count 49152"
fi
if [ -f "$gemma" ]; then
    checked=$((checked + 1))
    expect_status 0 "$ebb" info --json "$gemma"
    python3 - "$tmp/out" <<'PY' || fail "Gemma 3 --json"
import json, sys
j = json.load(open(sys.argv[1]))
want = dict(architecture='gemma3', n_params=268098176, n_layer=18, n_embd=640, n_head=4,
            n_head_kv=1, head_dim=256, n_ff=2048, n_ctx=32768, rope_freq_base=1000000.0,
            n_vocab=262144, tokenizer={'model': 'llama', 'pre': 'default'}, chat_template=False,
            non_layer_bytes=178260480, layer_bytes={'count': 18, 'min': 3596288, 'max': 3995648},
            file_size=253113024, n_tensors=236,
            types={'F32': {'count': 109, 'bytes': 223744}, 'Q8_0': {'count': 10, 'bytes': 179824640},
                   'Q5_0': {'count': 81, 'bytes': 43591680}, 'Q4_K': {'count': 27, 'bytes': 13271040},
                   'Q6_K': {'count': 9, 'bytes': 9676800}})
bad = {k: (j.get(k), v) for k, v in want.items() if j.get(k) != v}
if bad:
    sys.exit('mismatch: %r' % bad)
PY
    expect_status 0 "$ebb" info "$gemma"
    expect_out "layer bytes:      3596288..3995648 (18 layers)"
fi
[ "$checked" -gt 0 ] || echo "note: no real models in $models; only malformed files checked"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all ebb info checks passed ($checked real models)"
