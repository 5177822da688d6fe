#!/bin/bash
# `ebb pack` end to end on SmolLM2: writing (raw and --zstd), --verify against the right and a
# wrong model, a corrupted byte and a truncated file named in the message, and the exit
# statuses of usage errors (2) and failures (1).
#
#   test-pack.sh EBB_BINARY
set -u

ebb=$1
models=${EBB_MODELS_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/ebb/models}
smol=$models/SmolLM2-135M-Instruct.Q4_1.gguf
gemma=$models/gemma-3-270m-q4_k_m.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# expect_status WANT CMD...: runs CMD with stdout/stderr to $tmp/out, $tmp/err.
expect_status() {
    local want=$1 got
    shift
    "$@" > "$tmp/out" 2> "$tmp/err"
    got=$?
    [ "$got" -eq "$want" ] || fail "$* exited $got, want $want: $(head -c 300 "$tmp/err")"
}

# expect_err TEXT: the last command's stderr contains TEXT.
expect_err() {
    grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1': $(head -c 300 "$tmp/err")"
}

for f in "$smol" "$gemma"; do
    [ -f "$f" ] || { echo "missing model $f (set EBB_MODELS_DIR)"; exit 1; }
done

# ---- help and usage ----
expect_status 0 "$ebb" pack --help
for flag in -o --output --zstd --level --layout --device-kind --verify; do
    grep -qF -- "$flag" "$tmp/out" || fail "pack --help lacks $flag"
done
expect_status 2 "$ebb" pack
expect_status 2 "$ebb" pack "$smol"
expect_status 2 "$ebb" pack "$smol" -o "$tmp/x.pack" --level 0
expect_status 2 "$ebb" pack "$smol" -o "$tmp/x.pack" --bogus
expect_status 1 "$ebb" pack "$tmp/none.gguf" -o "$tmp/x.pack"
expect_status 1 "$ebb" pack "$smol" -o "$tmp/no/such/dir/x.pack"
expect_status 1 "$ebb" pack "$smol" -o "$tmp/x.pack" --layout q4_0-split
expect_err "needs the engine's converter"

# ---- write and verify ----
expect_status 0 "$ebb" pack "$smol" -o "$tmp/smol.pack"
grep -qF "31 records" "$tmp/out" || fail "pack output: $(cat "$tmp/out")"
size=$(stat -c %s "$tmp/smol.pack")
[ $((size % 4096)) -eq 0 ] || fail "pack size $size is not a multiple of 4096"
[ -e "$tmp/smol.pack.tmp" ] && fail "temporary file left behind"
expect_status 0 "$ebb" pack --verify "$tmp/smol.pack" -m "$smol"
grep -qF "30 layers" "$tmp/out" || fail "verify output: $(cat "$tmp/out")"
expect_status 1 "$ebb" pack --verify "$tmp/smol.pack" -m "$gemma"
expect_err "was made from model"
expect_status 0 "$ebb" pack "$smol" -o "$tmp/smolz.pack" --zstd --level 1 --device-kind pocl-cpu
expect_status 0 "$ebb" pack --verify "$tmp/smolz.pack"
grep -qF "device kind pocl-cpu" "$tmp/out" || fail "verify output: $(cat "$tmp/out")"

# ---- damage ----
cp "$tmp/smol.pack" "$tmp/bad.pack"
printf '\x5a' | dd of="$tmp/bad.pack" bs=1 seek=$((40 * 1024 * 1024)) conv=notrunc status=none
expect_status 1 "$ebb" pack --verify "$tmp/bad.pack"
expect_err "checksum mismatch in layer"
cp "$tmp/smol.pack" "$tmp/short.pack"
truncate -s $((size / 2)) "$tmp/short.pack"
expect_status 1 "$ebb" pack --verify "$tmp/short.pack"
expect_err "truncated"
expect_status 1 "$ebb" pack --verify "$smol"
expect_err "not an ebb pack"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "ok"
