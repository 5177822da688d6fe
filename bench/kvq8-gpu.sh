#!/usr/bin/env bash
# The 8-bit KV cache on the GPU machine (issue 28, docs/PERFORMANCE.md "KV cache in 8 bits"): one
# device call. Builds llama.cpp's CUDA llama-bench in the background (from the carried
# .llama-src, as bench/gpu-longctx.sh does; skip with EBB_NO_LLAMA=1), writes a random-weight
# GGUF (default the Llama-3.1-8B shape, Q4_0, the vocabulary of .device-carry/tok.gguf), then on
# that one file:
#   - ebb bench --kv-type f16 and q8_0: tg64 at depths 16384 and 32768, pp512 at depth 16384,
#     with --stages (attention against products), and decode's bytes per token;
#   - llama-bench -fa 1 with -ctk/-ctv f16 and q8_0: the same measures (the target: ebb's tg64
#     at depth 16384 with q8_0 at least llama.cpp's with -ctk q8_0 -ctv q8_0 -fa 1);
#   - ebb's kernel tests' q8_0 section on the GPU (EBB_KT_ONLY=kvq8 test-kernels) where
#     build-test has it.
# Logs go to $OUT (or /tmp/out): kvq8.log, llama.jsonl.
# Usage (device): source .device-carry/env.sh; bash bench/kvq8-gpu.sh
# Environment: EBB_SHAPE, EBB_TYPE (q4_0), EBB_PARTS (default build,ebb,llama,kernels).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/models /tmp/cache
log=$out/kvq8.log
export XDG_CACHE_HOME=/tmp/cache
shape=${EBB_SHAPE:-llama3.1-8b}
type=${EBB_TYPE:-q4_0}
m=/tmp/models/$shape-$type.gguf
lb=/tmp/lbs
parts=${EBB_PARTS:-build,ebb,llama,kernels}
has() { [[ ",$parts," == *",$1,"* ]]; }
if has build && [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ] && [ ! -f $lb.done ]; then
    setsid bash -c "cmake -B $lb -S .llama-src -G Ninja -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF \
      -DLLAMA_BUILD_SERVER=OFF >$lb.log 2>&1 && \
      ninja -C $lb -j14 llama-bench >>$lb.log 2>&1; echo \$? >$lb.done" \
        </dev/null >/dev/null 2>&1 &
fi
gpu_gen "$shape" "$type" "$m"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"

if has kernels && [ -x build-test/tests/kernels/test-kernels ]; then
    say "test-kernels, section kvq8"
    EBB_KT_ONLY=kvq8 timeout 300 build-test/tests/kernels/test-kernels 2>&1 | tee -a "$log"
fi

ebb_runs=("-d 16384 --prompt-tokens 16 --gen-tokens 64" "-d 32768 --prompt-tokens 16 --gen-tokens 64"
    "-d 16384 --prompt-tokens 512 --gen-tokens 16")
has ebb && for kv in f16 q8_0; do
    for a in "${ebb_runs[@]}"; do
        say "ebb bench --kv-type $kv $a --stages"
        timeout 300 ebb bench -m "$m" --kv-type $kv $a --stages 2>&1 |
            grep -E "^(model|prefill|decode|depth|traffic|stage|  )" | tee -a "$log"
    done
done

if has llama && [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ]; then
    for _ in $(seq 1 150); do [ -f $lb.done ] && break; sleep 4; done
    if [ "$(cat $lb.done 2>/dev/null)" = 0 ]; then
        for kv in f16 q8_0; do
            for a in "-p 0 -n 64 -d 16384 -r 1" "-p 0 -n 64 -d 32768 -r 1" "-p 512 -n 0 -d 16384 -r 1"; do
                say "llama-bench -ctk $kv -ctv $kv -fa 1 $a"
                timeout 300 $lb/bin/llama-bench -m "$m" -ngl 99 -fa 1 -ctk $kv -ctv $kv $a -o jsonl \
                    2>>"$out/llama-bench.err" | tee -a "$out/llama.jsonl" |
                    python3 bench/llama-jsonl.py | tee -a "$log"
            done
        done
    else
        say "llama.cpp build failed"; grep -A20 FAILED $lb.log | head -40 | tee -a "$log"
    fi
fi
