#!/usr/bin/env bash
# Issue 29's accuracy check on the GPU machine: perplexity of the int8 tensor-core prefill (the
# default on NVIDIA) against the f16 tiles (EBB_CL_MMQ=0, matmul_mms) on the same files, over
# tests/data/perplexity/coriolanus.txt, or the text EBB_PPL_TEXT names (scripts/fetch-texts.sh's
# whole play, about eleven times as many tokens, carried in .device-carry). Files: the real
# models given in EBB_PPL_MODELS (paths), and random-weight ones written here by ebb-gen-model
# for EBB_PPL_GEN (SHAPE:TYPE ..., Llama shapes with .device-carry/tok.gguf, Qwen shapes with
# .device-carry/tok-qwen.gguf) into /dev/shm/models. The random-weight files take EBB_PPL_CTX
# (default 512) and EBB_PPL_CHUNKS (default 2; 0: the whole text); the real models windows of
# 128 over the whole text. One line a run in $OUT/ppl.log (or /tmp/out), with the relative
# difference of the two paths. EBB_PPL_JITTER="N ..." adds, for
# the real models, an int8 run with EBB_CL_MMQ_JITTER=N for each N (the inputs' scales times
# 1 + N 1e-6: other roundings of the same inputs), and the mean and spread of the int8 runs
# against the f16 tiles. EBB_PPL_ALSO="KEY=VALUE ...[;KEY=VALUE ...]" adds, for every file, an
# int8 run with each group of variables set (e.g. EBB_CL_MMQ_RES=0: one pass of 8-bit inputs
# everywhere), against the same f16 figure.
# Usage (device): source .device-carry/env.sh; EBB_PPL_GEN="llama3-8b:q4_k_m" bash bench/gpu-ppl.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /dev/shm/models /tmp/cache
log=$out/ppl.log
export XDG_CACHE_HOME=/tmp/cache
text=${EBB_PPL_TEXT:-tests/data/perplexity/coriolanus.txt}
files=()
for sm in ${EBB_PPL_GEN:-}; do
    shape=${sm%%:*} type=${sm#*:} f=/dev/shm/models/$shape-$type.gguf vocab=.device-carry/tok.gguf
    [[ $shape == qwen* ]] && vocab=.device-carry/tok-qwen.gguf
    gpu_gen "$shape" "$type" "$f" "$vocab" &
    files+=("$f:${EBB_PPL_CTX:-512}:${EBB_PPL_CHUNKS:-2}")
done
wait
real=" "
for f in ${EBB_PPL_MODELS:-}; do files+=("$f:128:0") real+="$f "; done
say "ebb $(ebb --version); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
say "text $text ($(wc -c <"$text") bytes, sha256 $(sha256sum "$text" | cut -c1-16)...)"
# One line in the log: FILE's int8 run A (JSON) against the f16 tiles' B at CTX, LABEL after it.
compare() {
    python3 - "$@" <<'PY' | tee -a "$log"
import json, os, sys
f, ctx, label, a, b = sys.argv[1:6]
name = f"{os.path.basename(f)} ctx {ctx}{label}"
try:
    a, b = json.loads(a), json.loads(b)
except ValueError:
    print(f"{name}: a run failed ({sys.argv[4]!r}, {sys.argv[5]!r})")
    sys.exit(0)
rel = (a["ppl"] - b["ppl"]) / b["ppl"]
print(f"{name}, {a['n_chunks']} windows ({a['n_scored']} tokens scored): "
      f"int8 {a['ppl']:.4f} ({a['ms'] / 1e3:.1f} s), f16 tiles {b['ppl']:.4f} "
      f"({b['ms'] / 1e3:.1f} s): {100 * rel:+.3f}%")
PY
}

for spec in "${files[@]}"; do
    IFS=: read -r f ctx chunks <<<"$spec"
    args=(-m "$f" -f "$text" --ctx "$ctx" --json)
    [ "$chunks" != 0 ] && args+=(--chunks "$chunks")
    a=$(timeout 300 ebb perplexity "${args[@]}" 2>/dev/null | tail -1)
    b=$(EBB_CL_MMQ=0 timeout 300 ebb perplexity "${args[@]}" 2>/dev/null | tail -1)
    compare "$f" "$ctx" "" "$a" "$b"
    IFS=';' read -ra alsos <<<"${EBB_PPL_ALSO:-}"
    for also in "${alsos[@]}"; do
        # shellcheck disable=SC2086 # (KEY=VALUE words)
        c=$(env $also timeout 300 ebb perplexity "${args[@]}" 2>/dev/null | tail -1)
        compare "$f" "$ctx" " with $also" "$c" "$b"
    done
    [[ $real == *" $f "* ]] && [ -n "${EBB_PPL_JITTER:-}" ] || continue
    js=("$a")
    for j in $EBB_PPL_JITTER; do
        js+=("$(EBB_CL_MMQ_JITTER=$j timeout 300 ebb perplexity "${args[@]}" 2>/dev/null | tail -1)")
    done
    python3 - "$f" "$b" "$EBB_PPL_JITTER" "${js[@]}" <<'PY' | tee -a "$log"
import json, os, statistics, sys
f, b, jit = sys.argv[1], json.loads(sys.argv[2])["ppl"], ["0"] + sys.argv[3].split()
runs = []
for j, a in zip(jit, sys.argv[4:]):
    try:
        runs.append((j, json.loads(a)["ppl"]))
    except ValueError:
        print(f"{os.path.basename(f)} jitter {j}: the run failed ({a!r})")
rel = [100 * (p - b) / b for _, p in runs]
print(f"{os.path.basename(f)}: int8 runs with jitter " +
      ", ".join(f"{j}: {p:.4f}" for j, p in runs))
if len(rel) > 1:
    print(f"{os.path.basename(f)}: {len(rel)} int8 runs against the f16 tiles' {b:.4f}: "
          f"mean {statistics.mean(rel):+.3f}%, sd {statistics.stdev(rel):.3f}%, "
          f"range {min(rel):+.3f}% .. {max(rel):+.3f}%")
PY
done
say "done"
