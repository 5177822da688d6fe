#!/bin/sh
# Speculative decoding with n-gram drafts (issue 15, part 1) on a code-editing prompt set: each
# prompt asks for a piece of code or data back with a small edit, so the answer repeats the
# prompt and drafts from it are often right. Runs `ebb run --chat --temp 0` on each prompt
# plainly, with --spec ngram (adaptive k) and with --spec ngram --draft-fixed, and prints a
# markdown table of decode tokens/s, the speed-up, drafted/accepted drafts and whether the
# greedy ids are identical to the plain run's.
#   bench/spec-bench.sh EBB MODEL [extra ebb run options, e.g. --device, --memory-budget ...]
# Environment: N (tokens to generate, default 160), DRAFT_MAX (default 8).
set -eu
EBB=$1
MODEL=$2
shift 2
N=${N:-160}
DRAFT_MAX=${DRAFT_MAX:-8}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cat > "$TMP/rename.txt" <<'P'
Rewrite this function, renaming the variable x to value. Keep everything else the same.

def scale(x, factor):
    if x is None:
        return None
    result = x * factor
    if result > 100:
        result = 100
    print("scaled", x, "to", result)
    return result
P
cat > "$TMP/c-rename.txt" <<'P'
Rename the function sum_array to array_sum in this C code and return the whole code.

#include <stdio.h>

int sum_array(const int *a, int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += a[i];
    return s;
}

int main(void)
{
    int a[4] = {1, 2, 3, 4};
    printf("%d\n", sum_array(a, 4));
    return 0;
}
P
cat > "$TMP/json.txt" <<'P'
Change every "open" status to "closed" in this JSON and return the whole JSON.

[
  {"id": 1, "title": "fix login", "status": "open"},
  {"id": 2, "title": "update docs", "status": "open"},
  {"id": 3, "title": "add tests", "status": "done"},
  {"id": 4, "title": "release 1.2", "status": "open"}
]
P
cat > "$TMP/logging.txt" <<'P'
Replace each print call with logging.info in this code and return the whole code.

def load(path):
    print("loading", path)
    data = open(path).read()
    print("read", len(data), "bytes")
    rows = data.splitlines()
    print("parsed", len(rows), "rows")
    return rows
P

for p in rename c-rename json logging; do
    "$EBB" run -m "$MODEL" -p "$(cat "$TMP/$p.txt")" --chat -n "$N" --temp 0 --json "$@" \
        > "$TMP/$p.plain.json" 2> /dev/null
    "$EBB" run -m "$MODEL" -p "$(cat "$TMP/$p.txt")" --chat -n "$N" --temp 0 --json "$@" \
        --spec ngram --draft-max "$DRAFT_MAX" > "$TMP/$p.spec.json" 2> /dev/null
    "$EBB" run -m "$MODEL" -p "$(cat "$TMP/$p.txt")" --chat -n "$N" --temp 0 --json "$@" \
        --spec ngram --draft-max "$DRAFT_MAX" --draft-fixed > "$TMP/$p.fixed.json" 2> /dev/null
done

python3 - "$TMP" rename c-rename json logging <<'PY'
import json, os, sys
d = sys.argv[1]
print("| prompt | tokens | plain tok/s | spec tok/s (adaptive) | x | spec tok/s (k fixed) | x "
      "| drafted / accepted (adaptive) | acceptance | tokens per pass | ids identical |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
tot = {"plain": 0, "spec": 0, "fixed": 0}
for p in sys.argv[2:]:
    j = {k: json.load(open(os.path.join(d, "%s.%s.json" % (p, k)))) for k in tot}
    n = len(j["plain"]["tokens"])
    for k in tot:
        tot[k] += j[k]["timings"]["decode_ms"]
    tps = {k: j[k]["timings"]["decode_tok_s"] for k in tot}
    s = j["spec"]["spec"]
    same = all(j[k]["tokens"] == j["plain"]["tokens"] for k in ("spec", "fixed"))
    print("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %d / %d | %.0f%% | %.2f | %s |" % (
        p, n, tps["plain"], tps["spec"], tps["spec"] / tps["plain"], tps["fixed"],
        tps["fixed"] / tps["plain"], s["drafted"], s["accepted"], 100 * s["acceptance"],
        s["tokens_per_pass"], "yes" if same else "NO"))
print()
print("decode time over the set: plain %.0f ms, adaptive %.0f ms (%.2fx), fixed k %.0f ms "
      "(%.2fx)" % (tot["plain"], tot["spec"], tot["plain"] / tot["spec"], tot["fixed"],
                   tot["plain"] / tot["fixed"]))
PY
