#!/bin/bash
# `ebb info` end to end: the facts of both real models (figures checked against the gguf Python
# package's GGUFReader), --json output, usage errors, and malformed files (exit 1, one line on
# stderr naming the file and the problem, nothing on stdout).
#
#   test-info.sh EBB_BINARY [EBB_GEN_MODEL]
#
# With ebb-gen-model, the family facts (layer types, experts, rope scaling) of small written
# files: mistral-tiny (window on every layer) and copies with linear and llama3 rope scaling
# keys, llama3.1-tiny (rope_freqs.weight), qwen3moe-tiny (experts), phi3.5-tiny (longrope). They take their vocabulary
# from llama.cpp's llama-spm vocab ($EBB_VOCABS_DIR, scripts/fetch-vocabs.sh); its absence is a
# failure.
#
# bash, not sh: under `meson test --setup valgrind` the shell itself runs in memcheck, and dash
# leaks a string at startup.
set -u

ebb=$1
gen_model=${2:-}
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
for flag in --json --devices --config --help; do expect_out "$flag"; done
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
        "family:           rope normal over 64 dims, SiLU gate, tied output head" \
        "engines:          ref, opencl" \
        "layers:           30" "embedding:        576" "heads:            9" \
        "layer types:      30 global" "rope scaling:     none" \
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
    # Generation defaults: SmolLM2 recommends none, so the built-in ones (llama-server's).
    expect_status 0 "$ebb" info "$smol"
    expect_out "generation defaults (for fields a request does not send):"
    expect_out "  temperature        0.8      builtin"
    expect_out "  top_k              40       builtin"
    expect_out "  min_p              0.05     builtin"
    # A copy that recommends its own (general.sampling.*, as llama.cpp reads them): those win
    # over the built-in ones; a sampler ebb does not have is noted and not used.
    python3 "$set_kv" "$smol" "$tmp/rec.gguf" general.sampling.temp=f32:0.6 \
        general.sampling.top_k=u32:20 general.sampling.min_p=f64:0 \
        general.sampling.mirostat=i32:2 || fail "gguf-set-kv"
    expect_status 0 "$ebb" info "$tmp/rec.gguf"
    expect_out "  temperature        0.6      gguf"
    expect_out "  top_k              20       gguf"
    expect_out "  min_p              0        gguf"
    expect_out "  top_p              0.95     builtin"
    expect_out "  note: general.sampling.mirostat = 2: ebb has no mirostat sampler; not used"
    # The config file's [generation] beats the built-in values, the model's beat the config's,
    # unless model_sampling is off.
    printf '[generation]\ntemperature = 0.3\ntop_p = 0.5\n' > "$tmp/g.conf"
    expect_status 0 "$ebb" info --config "$tmp/g.conf" "$tmp/rec.gguf"
    expect_out "  temperature        0.6      gguf"
    expect_out "  top_p              0.5      config"
    EBB_MODEL_SAMPLING=false expect_status 0 "$ebb" info --config "$tmp/g.conf" "$tmp/rec.gguf"
    expect_out "  temperature        0.3      config"
    expect_out "  top_k              40       builtin"
    EBB_CONFIG=$tmp/g.conf expect_status 0 "$ebb" info --json "$tmp/rec.gguf"
    python3 - "$tmp/out" <<'PY' || fail "generation defaults in --json"
import json, sys
j = json.load(open(sys.argv[1]))
d = j["generation_defaults"]
assert d["temperature"] == {"value": 0.6, "source": "gguf"}, d
assert d["top_p"] == {"value": 0.5, "source": "config"}, d
assert d["repeat_last_n"] == {"value": 64, "source": "builtin"}, d
assert j["model_sampling"] is True and len(j["model_sampling_notes"]) == 1, j
PY
    # A bad value in the config names file, line and key.
    printf '[generation]\n\ntop_k = many\n' > "$tmp/bad.conf"
    expect_status 1 "$ebb" info --config "$tmp/bad.conf" "$smol"
    expect_err "ebb info: $tmp/bad.conf:3: top_k: 'many' is not a whole number between 0 and"
    printf 'temperature = 0.5\n' > "$tmp/bad.conf"
    expect_status 1 "$ebb" info --config "$tmp/bad.conf" "$smol"
    expect_err "$tmp/bad.conf:1: temperature: belongs under [generation]"
    rm -f "$tmp/rec.gguf"
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
    expect_out "engines:          ref, opencl" # the OpenCL engine runs gemma3 too
    expect_out "layer types:      15 local (window 512, rope base 10000), 3 global (layers 5, 11, 17)"
    expect_out "rope scaling:     none"
    expect_status 0 "$ebb" info --json "$gemma"
    python3 - "$tmp/out" <<'PY' || fail "Gemma 3 --json family facts"
import json, sys
f = json.load(open(sys.argv[1]))['family']
want = {'layer_types': {'local': 15, 'global': 3, 'window': 512, 'rope_base': 1e6,
                        'rope_base_local': 1e4, 'global_layers': [5, 11, 17]},
        'experts': None,
        'rope_scaling': {'type': 'none', 'factor': 1.0, 'original_context': 0, 'attn_factor': 1.0}}
bad = {k: (f.get(k), v) for k, v in want.items() if f.get(k) != v}
if bad:
    sys.exit('mismatch: %r' % bad)
PY
fi

# ---- family facts of written files ----
if [ -n "$gen_model" ]; then
    vocab=${EBB_VOCABS_DIR:-$HOME/.cache/ebb/vocabs}/ggml-vocab-llama-spm.gguf
    if [ ! -f "$vocab" ]; then
        fail "missing $vocab: run scripts/fetch-vocabs.sh and set EBB_VOCABS_DIR"
    else
        for shape in mistral-tiny llama3.1-tiny qwen3moe-tiny phi3.5-tiny; do
            "$gen_model" --shape $shape --tokenizer-from "$vocab" --type q8_0 \
                -o "$tmp/$shape.gguf" 2> /dev/null || fail "ebb-gen-model $shape"
        done
        expect_status 0 "$ebb" info "$tmp/mistral-tiny.gguf"
        expect_out "layer types:      3 local (window 16, rope base 10000)"
        expect_out "rope scaling:     none"
        grep -qF "window 16 on all layers" "$tmp/out" || fail "mistral-tiny: family line"
        python3 "$set_kv" "$tmp/mistral-tiny.gguf" "$tmp/linear.gguf" \
            llama.rope.scaling.type=str:linear llama.rope.scaling.factor=f32:4 > /dev/null
        expect_status 0 "$ebb" info "$tmp/linear.gguf"
        expect_out "rope scaling:     linear x4"
        python3 "$set_kv" "$tmp/mistral-tiny.gguf" "$tmp/llama3.gguf" \
            llama.rope.scaling.type=str:llama3 llama.rope.scaling.factor=f32:8 \
            llama.rope.scaling.original_context_length=u32:64 > /dev/null
        expect_status 0 "$ebb" info "$tmp/llama3.gguf"
        expect_out "rope scaling:     llama3 x8 (original context 64)"
        expect_status 0 "$ebb" info "$tmp/llama3.1-tiny.gguf"
        expect_out "layer types:      3 global"
        expect_out "rope scaling:     frequency divisors (rope_freqs.weight)"
        ! grep -q "^experts:" "$tmp/out" || fail "llama3.1-tiny: an experts line"
        expect_status 0 "$ebb" info "$tmp/qwen3moe-tiny.gguf"
        expect_out "experts:          4 of 16 per token (width 96)"
        expect_status 0 "$ebb" info --json "$tmp/qwen3moe-tiny.gguf"
        python3 - "$tmp/out" <<'PY' || fail "qwen3moe-tiny --json family facts"
import json, sys
f = json.load(open(sys.argv[1]))['family']
want = {'experts': {'count': 16, 'used': 4, 'width': 96},
        'layer_types': {'local': 0, 'global': 3, 'window': 0, 'rope_base': 1e6,
                        'rope_base_local': 1e6, 'global_layers': [0, 1, 2]}}
bad = {k: (f.get(k), v) for k, v in want.items() if f.get(k) != v}
if bad:
    sys.exit('mismatch: %r' % bad)
PY
        expect_status 0 "$ebb" info "$tmp/phi3.5-tiny.gguf"
        expect_out "rope scaling:     longrope (short factors up to context 64, long above; attention factor 1.414)"
        expect_out "longrope (divisors 1-1.1 up to context 64, 1-64 above; attention factor 1.414)"
        echo "ok  family facts of mistral-tiny, llama3.1-tiny, qwen3moe-tiny, phi3.5-tiny"
    fi
fi
# ebb info --memory against a fake /proc and cgroup v1 tree (EBB_TEST_MEMPROBE_ROOT): a hybrid
# host, the limit on the parent of the process's group, v1's "no limit" on the group itself.
fake=$tmp/memroot
mkdir -p "$fake/proc/self" "$fake/sys/fs/cgroup/memory/svc/ebb" "$fake/sys/fs/cgroup/unified"
printf 'MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\n' > "$fake/proc/meminfo"
printf '4:memory:/svc/ebb\n0::/\n' > "$fake/proc/self/cgroup"
cat > "$fake/proc/self/mountinfo" <<'MI'
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
MI
printf '419430400\n' > "$fake/sys/fs/cgroup/memory/svc/memory.limit_in_bytes"
printf '104857600\n' > "$fake/sys/fs/cgroup/memory/svc/memory.usage_in_bytes"
printf 'total_inactive_file 52428800\n' > "$fake/sys/fs/cgroup/memory/svc/memory.stat"
printf '9223372036854771712\n' > "$fake/sys/fs/cgroup/memory/svc/ebb/memory.limit_in_bytes"
printf '10485760\n' > "$fake/sys/fs/cgroup/memory/svc/ebb/memory.usage_in_bytes"
EBB_TEST_MEMPROBE_ROOT=$fake expect_status 0 "$ebb" info --memory --device none
expect_out "cgroup:        v1 /svc/ebb"
expect_out "limit:       400 MiB (memory.limit_in_bytes of /svc)"
expect_out "available:     350 MiB for the model (decided by cgroup v1)"
expect_out "notifications: not armed: cgroup v1 memory.pressure_level: No such file or directory"
EBB_TEST_MEMPROBE_ROOT=$fake expect_status 0 "$ebb" info --memory --device none --json
python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["cgroup"] == {"version": 1, "group": "/svc/ebb", "path": "/svc", "limit_bytes": 419430400,
                       "usage_bytes": 104857600, "inactive_file_bytes": 52428800,
                       "available_bytes": 367001600}, j
assert j["available_source"] == "cgroup v1" and j["device"] is None and j["psi"] is None, j
assert j["pressure_notify"]["armed"] is False, j
' "$tmp/out" || fail "info --memory --json"
# With the v1 notification files (plain files here: each registration line lands at the start
# of its group's file, the critical one last), the group itself and its limited parent are
# armed; the unlimited root is not.
for d in "$fake/sys/fs/cgroup/memory/svc/ebb" "$fake/sys/fs/cgroup/memory/svc" \
    "$fake/sys/fs/cgroup/memory"; do
    : > "$d/memory.pressure_level"
    : > "$d/cgroup.event_control"
done
EBB_TEST_MEMPROBE_ROOT=$fake expect_status 0 "$ebb" info --memory --device none
expect_out "notifications: armed: cgroup v1 /svc/ebb /svc memory.pressure_level medium,critical"
grep -Eq '^[0-9]+ [0-9]+ critical$' \
    "$fake/sys/fs/cgroup/memory/svc/cgroup.event_control" || fail "v1 registration lines"
[ -s "$fake/sys/fs/cgroup/memory/cgroup.event_control" ] && fail "the unlimited root was armed"
expect_status 2 "$ebb" info --memory "$tmp/x.gguf"
echo "ok  info --memory on a fake cgroup v1 tree"

[ "$checked" -gt 0 ] || echo "note: no real models in $models; only malformed files checked"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all ebb info checks passed ($checked real models)"
