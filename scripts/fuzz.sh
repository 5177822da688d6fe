#!/bin/sh
# Builds one of the request-path libFuzzer targets with clang (ASan + UBSan + libFuzzer, outside
# meson) and runs it for SECONDS (default 600) on one core. docs/FUZZING.md has the targets,
# the hours run and the findings.
#
#   scripts/fuzz.sh TARGET [SECONDS]     TARGET: request, jinja, tokenize, output
#
# Seeds: tests/fuzz/seeds/TARGET (committed, small; scripts/fuzz-seeds.py regenerates them from
# the integration tests' bodies). The corpus grows in build-fuzz/TARGET/corpus (kept between
# runs); crashes land in build-fuzz/TARGET/artifacts/. Exit status is non-zero on a finding,
# 77 when clang is missing.
set -eu

target=${1:?usage: scripts/fuzz.sh TARGET [SECONDS]}
secs=${2:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_OUT:-$root/build-fuzz}/$target
cc=${CC:-$(command -v clang-14 || command -v clang || true)}
[ -n "$cc" ] || { echo "fuzz.sh: clang not found, skipping"; exit 77; }
export EBB_MODELS_DIR="${EBB_MODELS_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/ebb/models}"

base="runtime/base/duration.c runtime/base/err.c runtime/base/log.c"
jinja="api/jinja/jinja-eval.c api/jinja/jinja-filters.c api/jinja/jinja-lex.c
  api/jinja/jinja-methods.c api/jinja/jinja-parse.c api/jinja/jinja-tests.c api/jinja/jinja-unicode.c
  api/jinja/jinja-value.c"
vocab="runtime/gguf/gguf.c runtime/gguf/gguf-get.c runtime/gguf/gguf-file.c runtime/gguf/gguf-types.c
  runtime/tokenizer/tok-bpe.c runtime/tokenizer/tok-detok.c runtime/tokenizer/tok-encode.c
  runtime/tokenizer/tok-pre.c runtime/tokenizer/tok-spm.c runtime/tokenizer/tok-vocab.c runtime/tokenizer/tokenizer.c
  runtime/tokenizer/unicode-data.c runtime/tokenizer/unicode.c"
case $target in
request)
    src="api/openai/params.c api/openai/params-format.c api/openai/tools-req.c
      api/openai/tools-render.c api/http/jsonmem.c api/http/objects.c api/defaults/defaults.c
      api/chat/chat-template.c api/tools/tools.c api/schema/json-schema.c
      api/schema/json-schema-regex.c runtime/grammar/gbnf-parse.c runtime/grammar/grammar-run.c
      runtime/grammar/grammar-trie.c runtime/sched/scheduler-stop.c runtime/sched/sampler.c
      tests/fuzz/fuzz-model-stub.c $jinja $vocab"
    export EBB_FUZZ_TEMPLATE="${EBB_FUZZ_TEMPLATE:-$root/tests/data/chat-templates/qwen2.5.jinja}" ;;
jinja) src="$jinja" ;;
tokenize | output)
    src="api/http/objects.c api/http/jsonmem.c api/openai/logprobs.c $vocab"
    gguf=${EBB_FUZZ_GGUF:-$EBB_MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf}
    [ -f "$gguf" ] || { echo "fuzz.sh: no vocabulary at $gguf, skipping"; exit 77; } ;;
*) echo "fuzz.sh: unknown target $target" >&2; exit 2 ;;
esac

mkdir -p "$out/corpus" "$out/artifacts"
flags="-g -O1 -std=c11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -fno-omit-frame-pointer"
flags="$flags -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
# Each source compiles once into objs/, shared by the targets (the vocabulary's files are in
# three, Jinja's in two, all the same flags): 25 s of the four targets' compiles here. An
# object compiles again when any C source or header is newer than it, and a target links again
# when it is missing or older than one of its objects. One run at a time compiles (scripts/dev
# runs the fuzz tests on two workers).
objs=$(dirname "$out")/objs
mkdir -p "$objs"
exec 8>"$objs/lock"
if command -v flock >/dev/null 2>&1; then flock 8; fi
exe=$out/fuzz-$target
link=0
[ -x "$exe" ] || link=1
list=
for f in "tests/fuzz/fuzz-$target.c" $src $base; do
    o=$objs/$(echo "$f" | tr / _ | sed 's/\.c$/.o/')
    if [ ! -f "$o" ] || [ -n "$(cd "$root" && find tests/fuzz api runtime -newer "$o" -name '*.[ch]' | head -1)" ]; then
        # shellcheck disable=SC2046,SC2086
        (cd "$root" && "$cc" $flags -Iruntime -I. $(pkg-config --cflags jansson libmicrohttpd libuv) \
            -c -o "$o" "$f")
    fi
    [ "$link" = 1 ] || [ -z "$(find "$o" -newer "$exe")" ] || link=1
    list="$list $o"
done
if [ "$link" = 1 ]; then
    # shellcheck disable=SC2046,SC2086
    "$cc" $flags -o "$exe" $list $(pkg-config --libs jansson) -lm -lpthread
fi
exec 8>&-

seeds="$root/tests/fuzz/seeds/$target"
dict="$root/tests/fuzz/$target.dict"
set -- -max_total_time="$secs" -timeout=10 -malloc_limit_mb=512 -rss_limit_mb=2048 \
    -max_len=16384 -print_final_stats=1 -artifact_prefix="$out/artifacts/"
[ -f "$dict" ] && set -- "$@" -dict="$dict"
# FUZZ_ARGS: more libFuzzer flags, e.g. "-fork=1 -ignore_crashes=1" to keep going past findings.
# shellcheck disable=SC2086
"$out/fuzz-$target" "$@" ${FUZZ_ARGS:-} "$out/corpus" $([ -d "$seeds" ] && echo "$seeds")
