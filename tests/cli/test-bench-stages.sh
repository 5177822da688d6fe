#!/bin/bash
# `ebb bench --stages` on the tiny random-weight llama (OpenCL, PoCL in CI): usage errors exit 2;
# the text report has a line per stage for prefill and decode; the JSON's stages add up (stage
# times to the kernel time, kernel time within the wall time, shares to one), every kernel is
# filed under the stage its name says, and the decode's launches equal the engine's own count
# of launches per decoded token (so only the measured runs were profiled, not the depth
# evaluation or the warm-up).
#
#   test-bench-stages.sh EBB_BINARY TINY_GGUF
set -u

ebb=$1
tiny=$2
. "$(dirname "$0")/lib.sh"

expect_status 0 "$ebb" bench --help
expect_out "--stages"
expect_status 2 "$ebb" bench -m "$tiny" --stages --device ref
expect_err "--stages"

args=(-m "$tiny" --prompt-tokens 16 --gen-tokens 8 --stages)
expect_status 0 "$ebb" bench "${args[@]}"
for s in "stages     device time" "  prefill " "  decode " "    attention " "    products " \
    "    norms " "    other " "    outside " "    kernel "; do
    expect_out "$s"
done

expect_status 0 "$ebb" bench "${args[@]}" -r 2 -d 16 --json
python3 - "$tmp/out" <<'PY' || fail "bench --stages --json: $(head -c 1500 "$tmp/out")"
import json, sys
d = json.load(open(sys.argv[1]))
st = d["stages"]
names = ("attention", "products", "norms", "other")
def stage_of(k):
    if k.startswith(("attn_", "rope", "kv_")):
        return "attention"
    if k.startswith(("matvec", "matmul", "moe_", "quantize")):
        return "products"
    if k.startswith(("rmsnorm", "add")) or k in ("head_norm", "swiglu", "geglu", "softmax"):
        return "norms"
    return "other"
for ph in ("prefill", "decode"):
    p = st[ph]
    assert p["runs"] == 2, p
    # the wall time per run is the bench's own median-free mean: close to the reported figure
    assert p["wall_ms"] > 0 and p["kernel_ms"] > 0, p
    tot = sum(p["stages"][n]["ms"] for n in names)
    assert abs(tot - p["kernel_ms"]) <= 1e-6 * p["kernel_ms"] + 1e-9, (tot, p)
    assert p["kernel_ms"] <= 1.02 * p["wall_ms"] + 0.05, p
    shares = sum(p["stages"][n]["share"] for n in names) + p["stages"]["outside"]["share"]
    assert abs(shares - 1) < 0.03, (shares, p)
    for n in ("attention", "products", "norms"):
        assert p["stages"][n]["ms"] > 0 and p["stages"][n]["launches"] >= 1, (n, p)
    ks = p["kernels"]
    assert ks and all(k["stage"] == stage_of(k["name"]) for k in ks), ks
    assert ks == sorted(ks, key=lambda k: -k["ms"]), ks
    assert abs(sum(k["ms"] for k in ks) - p["kernel_ms"]) <= 1e-6 * p["kernel_ms"] + 1e-9, ks
    assert abs(sum(k["launches"] for k in ks) - sum(p["stages"][n]["launches"] for n in names)) < 1e-9
# the decode's launches per run are the engine's launches per token times the steps
steps = d["gen_tokens"] - 1
launches = sum(k["launches"] for k in st["decode"]["kernels"])
want = d["decode_counters"]["launches_per_token"] * steps
assert abs(launches - want) < 1e-6 * want, (launches, want)
# names the report files under attention and products on this llama
kn = {k["name"] for k in st["prefill"]["kernels"]}
assert any(n.startswith("attn_") for n in kn) and any(n.startswith("mat") for n in kn), kn
# "kernels": per weight type the products of several rows that ran; each kernel it names ran in
# the profiled prefill (the 16-token prompt: no batch here)
kl = d["kernels"]
names = set()
for part in kl.split("; "):
    ty, _, ks = part.partition(": ")
    assert "/" in ty and ks, kl
    for k in ks.split(", "):
        n = k.split(" ")[0]
        if n == "matmul_mma/b":  # either tensor-core GEMM
            assert {"matmul_mma", "matmul_mmb"} & kn, (kn, kl)
            continue
        names.add(n)
assert names and names <= kn, (names, kn, kl)
PY
expect_out_re() { grep -Eq "$1" "$tmp/out" || fail "bench: no line matching '$1' in: $(head -c 1500 "$tmp/out")"; }
expect_status 0 "$ebb" bench "${args[@]}"
expect_out_re "^kernels    [A-Z0-9_]+/(raw|split)/[a-z0-9]+: mat"

# With --batch: the batch's decode steps as a third phase, one run of all its steps, launches
# by stage and kernel agreeing; the text report names it.
expect_status 0 "$ebb" bench -m "$tiny" --prompt-tokens 8 --gen-tokens 4 --batch 3 --stages --json
python3 - "$tmp/out" <<'PY' || fail "bench --batch --stages --json: $(head -c 1500 "$tmp/out")"
import json, sys
d = json.load(open(sys.argv[1]))
b = d["stages"]["batch"]
names = ("attention", "products", "norms", "other")
assert b["runs"] == 1 and b["wall_ms"] > 0 and b["kernel_ms"] > 0, b
assert abs(sum(b["stages"][n]["ms"] for n in names) - b["kernel_ms"]) <= 1e-6 * b["kernel_ms"] + 1e-9, b
kn = {k["name"] for k in b["kernels"]}
assert any(n.startswith("attn_decode_rows") for n in kn), kn  # the rows' attention: a batch step
assert abs(sum(k["launches"] for k in b["kernels"]) - sum(b["stages"][n]["launches"] for n in names)) < 1e-9
PY
expect_status 0 "$ebb" bench -m "$tiny" --prompt-tokens 8 --gen-tokens 4 --batch 3 --stages
expect_out "  batch "

# Without --stages the JSON has no stages object.
expect_status 0 "$ebb" bench -m "$tiny" --prompt-tokens 16 --gen-tokens 8 --json
python3 -c 'import json,sys; assert "stages" not in json.load(open(sys.argv[1]))' "$tmp/out" ||
    fail "stages without --stages"

[ "$fails" -eq 0 ] || exit 1
echo "ok"
