#!/usr/bin/env bash
# Issue 34's layer split figure (docs/SCALING.md, "Layer split"): on the two-GPU machine, in one
# device call of at most 9 minutes, the random-weight 8B-shape Q4_0 GGUF from ebb-gen-model
#   1. `ebb bench --prompt-tokens 512 --gen-tokens 128 -r 3 --device cl:0:0`  (one GPU),
#   2. the same with `--device all --split layer`                            (both GPUs),
#   3. llama.cpp's CUDA `llama-bench -p 512 -n 128 -r 3 -ngl 99 -fa 1 -sm none` and `-sm layer`
#      (built in the background from the carried .llama-src while ebb runs; skipped with
#      EBB_NO_LLAMA=1 or without .llama-src),
# then the ratios split / one GPU for pp512 and tg128 (issue 34's target: >= 0.9 each) and ebb's
# split against llama.cpp's -sm layer. Every run's JSON and the log go to $OUT (or /tmp/out).
#
# Usage (device, kind nvidia-h200-x2): source .device-carry/env.sh; bash bench/gpu-split.sh
# Environment: EBB_MODEL (a GGUF; default the generated one), EBB_SHAPE (llama3-8b),
# EBB_SPLIT_ARGS (extra arguments for the split run, e.g. --tensor-split 1,1), EBB_NO_LLAMA=1.
# Tried here only on PoCL's two CPU devices with SmolLM2 (EBB_MODEL, EBB_NO_LLAMA=1,
# POCL_DEVICES="pthread pthread", ebb and python3 on PATH): both runs and the ratios printed;
# CPU figures say nothing about GPUs and are not recorded.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out"
log=$out/split.log
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/cache}
shape=${EBB_SHAPE:-llama3-8b}

gpu_llama_build llama-bench /tmp/lb # once; it builds while ebb runs
m=${EBB_MODEL:-/tmp/models/$shape-q4_0.gguf}
if [ -z "${EBB_MODEL:-}" ]; then
    mkdir -p /tmp/models
    say "generating $m"
    gpu_gen "$shape" q4_0 "$m"
fi
[ -f "$m" ] || { say "no model $m"; exit 1; }
command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=index,name,driver_version,memory.free --format=csv,noheader |
    tee -a "$log"
git -C "$here/.." log -1 --format='commit %h %cd' 2>/dev/null | tee -a "$log"
ebb info --devices 2>&1 | grep '^cl:' | tee -a "$log"

# run NAME ARGS...: ebb bench pp512 + tg128, three measured runs; its JSON in $out/NAME.json.
run() {
    local name=$1
    shift
    say "ebb $name: ebb bench -m $m --prompt-tokens 512 --gen-tokens 128 -r 3 $*"
    timeout 200 ebb bench -m "$m" --prompt-tokens 512 --gen-tokens 128 -r 3 --json "$@" \
        >"$out/$name.json" 2>"$out/$name.err"
    local rc=$?
    grep -E "layer split|OpenCL engine opened" "$out/$name.err" | tee -a "$log"
    [ $rc -eq 0 ] || { say "ebb $name failed ($rc)"; tail -5 "$out/$name.err" | tee -a "$log"; }
    python3 - "$out/$name.json" <<'PY' 2>/dev/null | tee -a "$log"
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{d['device']}: pp512 {d['prefill_tok_s']:.1f} tok/s, tg128 {d['decode_tok_s']:.2f} tok/s")
PY
}

run one-gpu --device cl:0:0
# shellcheck disable=SC2086
run split --device all --split layer ${EBB_SPLIT_ARGS:-}

if [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ]; then
    say "waiting for llama-bench"
    # no later than 380 s into the call, so that the whole fits a 9-minute call
    while [ ! -f /tmp/lb.done ] && [ "$SECONDS" -lt 380 ]; do sleep 5; done
    if [ -f /tmp/lb.done ] && gpu_llama_wait /tmp/lb; then
        for sm in none layer; do
            say "llama.cpp CUDA -sm $sm"
            timeout 70 /tmp/lb/bin/llama-bench -m "$m" -p 512 -n 128 -r 3 -ngl 99 -fa 1 \
                -sm "$sm" -o json >"$out/llama-$sm.json" 2>"$out/llama-$sm.err"
            python3 - "$out/llama-$sm.json" <<'PY' 2>/dev/null | tee -a "$log"
import json, sys
for r in json.load(open(sys.argv[1])):
    print(f"llama-bench pp{r['n_prompt']} tg{r['n_gen']}: {r['avg_ts']:.2f} tok/s")
PY
        done
    else
        say "llama-bench did not build"
        tail -20 /tmp/lb.log >>"$log"
    fi
fi

say "ratios"
python3 - "$out" <<'PY' | tee -a "$log"
import json, os, sys
out = sys.argv[1]

def ebb(name):
    try:
        d = json.load(open(os.path.join(out, name + ".json")))
        return d["prefill_tok_s"], d["decode_tok_s"]
    except (OSError, ValueError, KeyError):
        return None

def llama(sm):
    try:
        rows = json.load(open(os.path.join(out, f"llama-{sm}.json")))
        pp = next(r["avg_ts"] for r in rows if r["n_prompt"] and not r["n_gen"])
        tg = next(r["avg_ts"] for r in rows if r["n_gen"] and not r["n_prompt"])
        return pp, tg
    except (OSError, ValueError, KeyError, StopIteration):
        return None

one, split, ln, ll = ebb("one-gpu"), ebb("split"), llama("none"), llama("layer")
def ratio(label, a, b):
    if a and b:
        print(f"{label}: pp512 {a[0] / b[0]:.3f}x, tg128 {a[1] / b[1]:.3f}x")
    else:
        print(f"{label}: missing a run")
ratio("ebb split / ebb one GPU (target >= 0.9 / 0.9)", split, one)
ratio("llama.cpp -sm layer / -sm none", ll, ln)
ratio("ebb split / llama.cpp -sm layer (target >= 1)", split, ll)
ratio("ebb one GPU / llama.cpp -sm none", one, ln)
PY
