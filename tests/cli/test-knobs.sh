#!/bin/bash
# The tuning-knob table (runtime/cl/cl-knobs.c): docs/TUNING.md is what `ebb info --knobs
# --markdown` prints (regenerate it with that command when the table changes), a bad value is an
# error naming the knob, and `ebb info --knobs` lists every knob with its value and source for a
# device (that part skipped without an OpenCL device).
#
#   test-knobs.sh EBB_BINARY TUNING_MD
set -u

ebb=$1
doc=$2
. "$(dirname "$0")/lib.sh"
for v in $(env | grep -o '^EBB_CL_[A-Z0-9_]*'); do unset "$v"; done

expect_status 0 "$ebb" info --knobs --markdown
if ! diff -u "$doc" "$tmp/out" > "$tmp/diff"; then
    fail "docs/TUNING.md and the knob table disagree (regenerate: ebb info --knobs --markdown > docs/TUNING.md):"
    head -40 "$tmp/diff"
else
    echo "ok  docs/TUNING.md matches the table ($(grep -c '^| `EBB_CL_' "$doc") knobs)"
fi
# every knob the engine reads is in the table (no raw getenv of EBB_CL_* outside cl-knobs.c)
src="$(cd "$(dirname "$0")/../.." && pwd)"
raw=$(grep -rn 'getenv("EBB_CL_' "$src/runtime" "$src/api" "$src/daemon" 2> /dev/null)
[ -z "$raw" ] || fail "EBB_CL_ variables read outside the knob table: $raw"

expect_status 2 "$ebb" info --markdown
expect_err "goes with --knobs"

if ! "$ebb" info --devices > /dev/null 2>&1; then
    echo "skip: no OpenCL device for the per-device listing"
    [ "$fails" -eq 0 ] || exit 1
    exit 0
fi
expect_status 0 "$ebb" info --knobs
expect_out "EBB_CL_MMS "
[ "$(grep -c '^EBB_CL_' "$tmp/out")" -eq "$(grep -c '^| `EBB_CL_' "$doc")" ] ||
    fail "ebb info --knobs lists $(grep -c '^EBB_CL_' "$tmp/out") knobs, the table $(grep -c '^| `EBB_CL_' "$doc")"
EBB_CL_MVR=16 EBB_CL_MMA_TILE=128x64 expect_status 0 "$ebb" info --knobs
grep -Eq '^EBB_CL_MVR +16 +environment$' "$tmp/out" || fail "EBB_CL_MVR=16 not listed from the environment: $(grep MVR "$tmp/out")"
grep -Eq '^EBB_CL_MMA_TILE +128,64,[0-9]+,[0-9]+ +environment' "$tmp/out" ||
    fail "EBB_CL_MMA_TILE=128x64 not listed: $(grep MMA_TILE "$tmp/out")"
grep -Eq '^EBB_CL_BLOCKDEC +[01] +(default|vendor default)' "$tmp/out" || fail "EBB_CL_BLOCKDEC's source"
echo "ok  ebb info --knobs: values and sources"

# bad values: exit 1, one line naming the knob, the value and what it accepts
bad() { # VAR=VALUE WANT
    env "$1" "$ebb" info --knobs > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    [ "$rc" -eq 1 ] || fail "$1: exit $rc, want 1"
    grep -qF -- "$1: $2" "$tmp/err" || fail "$1: message lacks '$1: $2': $(cat "$tmp/err")"
    grep -qF -- "accepted:" "$tmp/err" || fail "$1: message lacks the accepted values"
    echo "ok  $1: $(cat "$tmp/err")"
}
bad EBB_CL_MMS=banana "not a number"
bad EBB_CL_MVR=5 "out of range"
bad EBB_CL_MM=fast "not one of the accepted words"
bad EBB_CL_MMA_TILE=64 "too few parts"
bad EBB_CL_MV=32,4,1 "too many parts"
bad EBB_CL_ATT_CHUNK=100 "out of range"
bad EBB_CL_MMS_TILE=64,4,32 "the warps' partial sums exceed 48 KiB"
# a name that is not a knob: a note, not an error
EBB_CL_NO_SUCH_KNOB=1 expect_status 0 "$ebb" info --knobs
expect_err "EBB_CL_NO_SUCH_KNOB is not a tuning knob"

[ "$fails" -eq 0 ] || exit 1
echo "all knob checks passed"
