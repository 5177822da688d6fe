# Sourced by the bench/gpu-*.sh scripts on the GPU machine: the parts they share. Expects the
# repository root as the working directory and .device-carry/env.sh sourced (ebb, ebb-gen-model
# on PATH).

# say TEXT: a heading on stdout and in $log.
say() { echo "== $(date +%T) $*" | tee -a "${log:-/dev/null}"; }

# gpu_llama_build TARGET DIR: builds llama.cpp's CUDA TARGET (llama-bench or llama-server) from
# the carried .llama-src into DIR in the background, once per machine: DIR.done receives the
# build's exit status (a failed build is tried again by the next call), DIR.log its output.
# Nothing happens without .llama-src or with EBB_NO_LLAMA set. llama-server is built with
# -DLLAMA_USE_PREBUILT_UI=OFF (no web UI, nothing downloaded; it needs
# .llama-src/scripts/ui-assets.cmake, see bench/gpu-serve.sh).
gpu_llama_build() {
    local target=$1 dir=$2 opt=-DLLAMA_BUILD_SERVER=OFF
    [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ] || return 0
    [ -f "$dir.done" ] && [ "$(cat "$dir.done")" != 0 ] && rm -f "$dir.done"
    [ -f "$dir.done" ] && return 0
    # a build already under way (started by an earlier step of this call) is not started again:
    # two builds into one folder break each other
    [ -f "$dir.started" ] && kill -0 "$(cat "$dir.started")" 2>/dev/null && return 0
    [ "$target" = llama-server ] && opt="-DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF"
    # in a subshell, so that it is not a job of the caller: a script's plain `wait` for its model
    # writers must not wait for the build too (it did, minutes a call, until 2026-11-30)
    (setsid bash -c "cmake -B $dir -S .llama-src -G Ninja -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF $opt \
      >$dir.log 2>&1 && ninja -C $dir -j12 $target >>$dir.log 2>&1; echo \$? >$dir.done" \
        </dev/null >/dev/null 2>&1 &
        echo $! >"$dir.started")
}

# gpu_llama_wait DIR: waits up to ten minutes for gpu_llama_build's build into DIR; succeeds when
# it built.
gpu_llama_wait() {
    [ -d .llama-src ] && [ -z "${EBB_NO_LLAMA:-}" ] || return 1
    for _ in $(seq 1 120); do
        [ -f "$1.done" ] && break
        sleep 5
    done
    [ "$(cat "$1.done" 2>/dev/null)" = 0 ]
}

# gpu_gen SHAPE TYPE OUT [TOKENIZER]: writes the random-weight GGUF OUT with ebb-gen-model
# unless it exists (TOKENIZER: a GGUF to take the vocabulary from, default
# .device-carry/tok.gguf); its output goes to $log.
gpu_gen() {
    [ -f "$3" ] && return 0
    ebb-gen-model --shape "$1" --type "$2" --tokenizer-from "${4:-.device-carry/tok.gguf}" \
        -o "$3" >>"${log:-/dev/null}" 2>&1
}
