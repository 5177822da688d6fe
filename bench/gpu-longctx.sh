#!/usr/bin/env bash
# Long prompts, one device call on the GPU machine (docs/PERFORMANCE.md, "Long prompts"):
# builds llama.cpp's CUDA llama-bench and llama-server in the background (from the carried
# .llama-src, with scripts/ui-assets.cmake copied in as bench/gpu-serve.sh says; skip with
# EBB_NO_LLAMA=1), writes a random-weight GGUF (default the Llama-3.1-8B shape, Q4_0, the
# vocabulary of .device-carry/tok.gguf: llama.cpp's ggml-vocab-llama-bpe.gguf), then on that
# one file:
#   - llama-bench -fa 1 and ebb bench: pp512, pp8192, pp16384, pp512 at depths 4096 and 16384,
#     tg64 at depths 16384 and 32768 (ebb also as EBB_BASE, a binary of an earlier commit, when
#     that is on PATH);
#   - llama-server -np 1 and ebb serve --parallel 1 (context 33792 each) with bench/load-chat.py
#     --long-chat 2000,8000,16000,32000: time to first token cold and on a follow-up turn, and
#     the decode rate after the prompt.
# Logs go to $OUT (or /tmp/out): longctx.log, llama.jsonl, the servers' logs.
# Usage (device): source .device-carry/env.sh; bash bench/gpu-longctx.sh
# Environment: EBB_SHAPE, EBB_TYPE (q4_0), EBB_MODEL_DIR (default /dev/shm/models where it has 16 GB, else /tmp/models), EBB_CHATS (the --long-chat sizes), EBB_BASE (an
# earlier ebb binary's name on PATH, e.g. ebb-base), EBB_PARTS (default build,ebb,llama,serve:
# a call is limited to 10 minutes, so the parts can go in two calls on the same warm machine,
# e.g. build,llama then ebb,serve; the build and the file are kept in /tmp between them),
# EBB_CTX (the servers' context, default 33792), EBB_SERVE_ARGS and LLAMA_SERVER_ARGS (more
# arguments for each server: issue 36's row is EBB_SHAPE=qwen3-30b-a3b EBB_TYPE=q4_k_m
# EBB_PARTS=build,serve EBB_CHATS=4000 EBB_CTX=8192 EBB_SERVE_ARGS="--expert-cache 24"
# LLAMA_SERVER_ARGS="-ot exps=CPU").
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/models /tmp/cache
log=$out/longctx.log
export XDG_CACHE_HOME=/tmp/cache
shape=${EBB_SHAPE:-llama3.1-8b}
type=${EBB_TYPE:-q4_0}
# The file goes to memory (/dev/shm) where it has room: the GPU machine's disk took about 7
# minutes for the 4.3 GiB file beside the llama.cpp build, /dev/shm 5 s (2026-11-29).
mdir=${EBB_MODEL_DIR:-/tmp/models}
if [ -z "${EBB_MODEL_DIR:-}" ] && [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -gt 16000000 ] 2>/dev/null; then
    mdir=/dev/shm/models
fi
mkdir -p "$mdir"
m=$mdir/$shape-$type.gguf
lb=/tmp/lbs
parts=${EBB_PARTS:-build,ebb,llama,serve}
has() { [[ ",$parts," == *",$1,"* ]]; }
if has build && [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ] && [ ! -f $lb.done ]; then
    setsid bash -c "cmake -B $lb -S .llama-src -G Ninja -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF >$lb.log 2>&1 && \
      ninja -C $lb -j14 llama-bench llama-server >>$lb.log 2>&1; echo \$? >$lb.done" \
        </dev/null >/dev/null 2>&1 &
fi
say "gen $m"; gpu_gen "$shape" "$type" "$m"; say "gen done"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"

# ebb bench, each measure as its own run (-d evaluates the depth first, untimed).
ebb_runs=("--prompt-tokens 512 --gen-tokens 128 -r 3" "--prompt-tokens 8192 --gen-tokens 16"
    "--prompt-tokens 16384 --gen-tokens 16" "-d 4096 --prompt-tokens 512 --gen-tokens 16"
    "-d 16384 --prompt-tokens 512 --gen-tokens 64" "-d 32768 --prompt-tokens 16 --gen-tokens 64")
has ebb && for bin in ebb ${EBB_BASE:-}; do
    for a in "${ebb_runs[@]}"; do
        say "$bin bench $a"
        timeout 300 $bin bench -m "$m" $a 2>&1 | grep -E "^(prefill|decode|depth)" | tee -a "$log"
    done
done

if has llama && [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ]; then
    for _ in $(seq 1 150); do [ -f $lb.done ] && break; sleep 4; done
    if [ "$(cat $lb.done 2>/dev/null)" = 0 ]; then
        for a in "-p 512 -n 128 -r 3" "-p 8192 -n 0 -r 1" "-p 16384 -n 0 -r 1" \
            "-p 512 -n 0 -d 4096 -r 1" "-p 512 -n 64 -d 16384 -r 1" "-p 0 -n 64 -d 32768 -r 1"; do
            say "llama-bench $a"
            timeout 300 $lb/bin/llama-bench -m "$m" -ngl 99 -fa 1 $a -o jsonl 2>>"$out/llama-bench.err" |
                tee -a "$out/llama.jsonl" | python3 bench/llama-jsonl.py | tee -a "$log"
        done
    else
        say "llama.cpp build failed"; grep -A20 FAILED $lb.log | head -40 | tee -a "$log"
    fi
fi

has serve || exit 0
chats=${EBB_CHATS:-2000,8000,16000,32000}
wait_http() { # port: until /health answers 200
    for _ in $(seq 1 360); do
        curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    return 1
}
serve_run() { # label port command...
    local label=$1 port=$2
    shift 2
    "$@" >"$out/$label-serve.log" 2>&1 &
    local pid=$!
    if wait_http "$port"; then
        timeout 400 python3 bench/load-chat.py --url "http://127.0.0.1:$port" --long-chat "$chats" \
            --tokens 64 --label "$label" --json "$out/longchat.jsonl" 2>&1 | tee -a "$log"
    else
        say "$label did not come up"; tail -20 "$out/$label-serve.log" | tee -a "$log"
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}
ctx=${EBB_CTX:-33792}
say "ebb serve --parallel 1 --ctx $ctx ${EBB_SERVE_ARGS:-}"
serve_run ebb 8093 ebb serve -m "$m" --port 8093 --parallel 1 --ctx "$ctx" ${EBB_SERVE_ARGS:-}
if [ -x $lb/bin/llama-server ]; then
    say "llama-server -np 1 -c $ctx -fa on ${LLAMA_SERVER_ARGS:-}"
    serve_run llama 8094 $lb/bin/llama-server -m "$m" --port 8094 -np 1 -c "$ctx" -ngl 99 -fa on \
        ${LLAMA_SERVER_ARGS:-}
fi
