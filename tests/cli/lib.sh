# Shared by the tests/cli scripts (sourced, after `ebb=$1`): the models, a scratch folder
# removed on exit, and small assertions that count failures instead of stopping.
models=${EBB_MODELS_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/ebb/models}
smol=$models/SmolLM2-135M-Instruct.Q4_1.gguf
gemma=$models/gemma-3-270m-q4_k_m.gguf
tmp=$(mktemp -d)
# The generation defaults of ebb run and ebb info read the config file and EBB_* variables as
# ebb serve does: none of the caller's may change what the tests see.
export EBB_CONFIG=/dev/null
unset EBB_TEMPERATURE EBB_TOP_K EBB_TOP_P EBB_MIN_P EBB_REPEAT_PENALTY EBB_REPEAT_LAST_N \
    EBB_PRESENCE_PENALTY EBB_FREQUENCY_PENALTY EBB_MODEL_SAMPLING
# scripts/gguf-set-kv.py: a copy of a model with metadata keys set.
set_kv="$(cd "$(dirname "$0")/../.." && pwd)/scripts/gguf-set-kv.py"
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

# expect_out TEXT / expect_err TEXT: the last command's stdout / stderr contains TEXT.
expect_out() {
    grep -qF -- "$1" "$tmp/out" || fail "stdout lacks '$1'"
}
expect_err() {
    grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1': $(head -c 300 "$tmp/err")"
}
