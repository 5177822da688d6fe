#!/bin/bash
# `ebb pack` end to end on SmolLM2: writing (raw and --zstd), --verify against the right and a
# wrong model, a corrupted byte and a truncated file named in the message, and the exit
# statuses of usage errors (2) and failures (1).
#
#   test-pack.sh EBB_BINARY
set -u

ebb=$1
. "$(dirname "$0")/lib.sh"

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
