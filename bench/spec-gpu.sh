#!/usr/bin/env bash
# One device call on the GPU machine (docs/PERFORMANCE.md, "Speculative decoding"): writes the
# random-weight 8B-shape Q4_0 GGUF, then `ebb bench` on a raw code-editing prompt
# (bench/spec-prompt.txt) at 0% residency (every layer streamed) and resident, each plainly,
# with --spec ngram (adaptive k), with 8 and with 16 drafts a pass, with a random-weight 1B-shape
# draft model (--draft, resident; same vocabulary), and plainly again. Prints one
# line per run: decode tok/s, drafted/accepted, and whether the ids equal the first plain run's.
# Usage (device): source .device-carry/env.sh; bash bench/spec-gpu.sh   (ebb, ebb-gen-model on
# PATH; .device-carry/tok.gguf as for bench/gpu-decode.sh). Logs and JSON go to $OUT.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
m=${MODEL:-/tmp/models/llama3-8b.gguf}
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/cache}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/spec.log"
mkdir -p "$(dirname "$m")"
dm=$(dirname "$m")/llama3.2-1b.gguf
[ -f "$m" ] || ebb-gen-model --shape llama3-8b --tokenizer-from .device-carry/tok.gguf \
    --type q4_0 -o "$m" >> "$out/spec.log" 2>&1
[ -f "$dm" ] || ebb-gen-model --shape llama3.2-1b --tokenizer-from .device-carry/tok.gguf \
    --type q4_0 -o "$dm" >> "$out/spec.log" 2>&1
ebb bench -m "$m" --prompt-tokens 16 --gen-tokens 8 --residency 0 > /dev/null 2>&1 # warm caches
for r in 0 all; do
    ra=()
    [ $r = all ] || ra=(--residency "$r")
    for s in plain spec fixed8 fixed16 draft1b plain2; do
        case $s in
        plain | plain2) sa=() ;;
        spec) sa=(--spec ngram) ;;
        fixed8) sa=(--spec ngram --draft-fixed) ;;
        fixed16) sa=(--spec ngram --draft-fixed --draft-max 16) ;;
        draft1b) sa=(--draft "$dm" --draft-max 4) ;;
        esac
        ebb bench -m "$m" --prompt-file bench/spec-prompt.txt --gen-tokens "${GEN:-128}" \
            "${ra[@]}" "${sa[@]}" --json > "$out/r$r-$s.json" 2>> "$out/spec.log"
        python3 - "$out/r$r-plain.json" "$out/r$r-$s.json" "r=$r $s" <<'PY' | tee -a "$out/spec.log"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
s = b.get("spec", {})
print("%s: decode %.2f tok/s, drafted %s, accepted %s, ids %s" % (
    sys.argv[3], b["decode_tok_s"], s.get("drafted", "-"), s.get("accepted", "-"),
    "same" if a["tokens"] == b["tokens"] else "DIFFERENT"))
PY
    done
done
