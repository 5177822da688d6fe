#!/usr/bin/env bash
# One device call on the GPU machine (issue 15, part 2; docs/STREAMER.md "Host layers"): writes
# a random-weight 8B-shape Q4_0 GGUF, then `ebb bench` at 0% residency with 0, 8, 16 and 24
# host layers (8-bit host numerics, --host-q8), 8 with the reference's fp32 numerics, 16 with
# the helpers sleeping at once (EBB_HOST_SPINS=0), and at 50% residency with 0 and 8; the
# link-only run again at the end (drift). Single runs (decode of 48 tokens after 128).
# Usage (device): source .device-carry/env.sh; bash bench/hybrid-gpu.sh | tee $OUT/hybrid.log
set -u
export XDG_CACHE_HOME=/tmp/cache
mkdir -p /tmp/models
nproc; lscpu | grep -E "Model name|Thread\(s\)|Core\(s\)|Socket\(s\)"
t0=$(date +%s)
[ -f /tmp/models/8b.gguf ] || ebb-gen-model --shape llama3-8b --tokenizer-from .device-carry/tok.gguf --type q4_0 -o /tmp/models/8b.gguf 2>&1 | tail -1
echo "gen $(( $(date +%s) - t0 )) s"
printf 'available=64G\n' > /tmp/probe; export EBB_TEST_MEMPROBE_FILE=/tmp/probe
run() { echo "== $*"; timeout 120 ebb bench -m /tmp/models/8b.gguf --prompt-tokens 128 --gen-tokens 48 "$@" 2>&1 | grep -E "ebb:|prefill|decode|placement|^host|rror|streamed" ; }
run --residency 0 --host-layers 0
run --residency 0 --host-layers 8 --host-q8
run --residency 0 --host-layers 16 --host-q8
run --residency 0 --host-layers 24 --host-q8
run --residency 0 --host-layers 8
EBB_HOST_SPINS=0 run --residency 0 --host-layers 16 --host-q8
run --residency 0.5 --host-layers 0
run --residency 0.5 --host-layers 8 --host-q8
run --residency 0 --host-layers 0
