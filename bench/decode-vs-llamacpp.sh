#!/usr/bin/env bash
# Decode speed of ebb (OpenCL device, default auto) and of llama.cpp (llama-cpp-python, CPU) on
# the same model, prompt and token count, in one run: ROUNDS rounds (default 2), each one `ebb
# run` (and, with EBB_BASE=another ebb binary, the same with that one: a before/after pair in
# the same sitting) and one llama.cpp measurement, so that a shared machine's load falls on all
# of them alike. Needs `pip install llama-cpp-python` for the llama.cpp half (skipped with a
# note when it is missing). LLAMA_THREADS: llama.cpp's threads (default 2; its threads wait for
# each other by spinning, which a loaded machine punishes: 1 is the fairer figure there).
# Usage: [EBB_BASE=OLD_EBB] [ROUNDS=N] [LLAMA_THREADS=T] bench/decode-vs-llamacpp.sh EBB_BINARY MODEL [N_TOKENS] [DEVICE]
set -euo pipefail
ebb=$1 model=$2 n=${3:-128} dev=${4:-auto}
base=${EBB_BASE:-} rounds=${ROUNDS:-2} threads=${LLAMA_THREADS:-2}
prompt="The history of the printing press begins"
echo "date: $(date -u +%FT%TZ)  host: $(uname -n)  cores: $(nproc)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git -C "$(dirname "$0")" describe --always --dirty 2>/dev/null || echo unknown)"
ebb_run() { # label binary
    "$2" run -m "$model" -p "$prompt" -n "$n" --temp 0 --device "$dev" --json 2>/dev/null |
        python3 -c 'import json,sys; j=json.load(sys.stdin); t=j["timings"]; print("'"$1"' ('"$dev"'):", json.dumps(t))'
}
for r in $(seq 1 "$rounds"); do
    echo "round $r, load $(cut -d' ' -f1 /proc/loadavg)"
    ebb_run "ebb run" "$ebb"
    [ -z "$base" ] || ebb_run "ebb run (EBB_BASE)" "$base"
    python3 - "$model" "$n" "$prompt" "$threads" <<'PY' || echo "llama.cpp: llama-cpp-python not available"
import sys, time
from llama_cpp import Llama
model, n, prompt, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
llm = Llama(model_path=model, n_ctx=512, n_threads=threads, verbose=False)
for _ in range(2):  # the first pass warms up
    llm.reset()
    toks = llm.tokenize(prompt.encode(), add_bos=False)
    t0 = time.perf_counter(); llm.eval(toks); t1 = time.perf_counter()
    got = 0
    for _ in range(n):
        tok = llm.sample(temp=0.0)
        llm.eval([tok]); got += 1
    t2 = time.perf_counter()
print(f"llama.cpp (CPU, {threads} threads): prefill {len(toks)/(t1-t0):.1f} tok/s, decode {got/(t2-t1):.1f} tok/s")
PY
done
