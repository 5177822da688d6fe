#!/usr/bin/env bash
# Decode speed of ebb (OpenCL device, default auto) and of llama.cpp (llama-cpp-python, CPU) on
# the same model, prompt and token count, in one run. Needs `pip install llama-cpp-python`
# for the llama.cpp half (skipped with a note when it is missing).
# Usage: bench/decode-vs-llamacpp.sh EBB_BINARY MODEL [N_TOKENS] [DEVICE]
set -euo pipefail
ebb=$1 model=$2 n=${3:-128} dev=${4:-auto}
prompt="The history of the printing press begins"
echo "date: $(date -u +%FT%TZ)  host: $(uname -n)  cores: $(nproc)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git -C "$(dirname "$0")" describe --always --dirty 2>/dev/null || echo unknown)"
for i in 1 2; do
    "$ebb" run -m "$model" -p "$prompt" -n "$n" --temp 0 --device "$dev" --json 2>/dev/null |
        python3 -c 'import json,sys; j=json.load(sys.stdin); t=j["timings"]; print("ebb run ('"$dev"'):", json.dumps(t))'
done
python3 - "$model" "$n" "$prompt" <<'PY' || echo "llama.cpp: llama-cpp-python not available"
import sys, time
from llama_cpp import Llama
model, n, prompt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
llm = Llama(model_path=model, n_ctx=512, n_threads=2, verbose=False)
for _ in range(2):
    llm.reset()
    toks = llm.tokenize(prompt.encode(), add_bos=False)
    t0 = time.perf_counter(); llm.eval(toks); t1 = time.perf_counter()
    got = 0
    for _ in range(n):
        tok = llm.sample(temp=0.0)
        llm.eval([tok]); got += 1
    t2 = time.perf_counter()
    print(f"llama.cpp (CPU, 2 threads): prefill {len(toks)/(t1-t0):.1f} tok/s, decode {got/(t2-t1):.1f} tok/s")
PY
