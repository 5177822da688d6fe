#!/usr/bin/env bash
# Issue 34's "nginx + 2 daemons (one per GPU) vs one daemon, same call" (docs/SCALING.md): on the
# two-GPU machine, one `ebb serve --parallel 32` per GPU, then bench/load-chat.py's streamed chat
# load (128 tokens, ignore_eos) against daemon 0 alone and against nginx in front of both, with
# deploy/nginx/ebb.conf as shipped (only its addresses replaced). Prints each level's aggregate
# tok/s and the ratio nginx / one daemon at the same clients per GPU. A level that has any
# request fail (non-200, cut stream) aborts load-chat.py with the error: "no error" is a run
# that prints every level. Logs go to $OUT (or /tmp/out).
#
# nginx: the GPU machine has none and reaches no package mirror, so carry one from a Debian or
# Ubuntu machine: `bash bench/gpu-nginx.sh --pack shared/nginx` copies nginx and the libraries
# it links (but glibc's) there; on the device EBB_NGINX=shared/nginx/nginx finds them.
#
# Usage (device, kind nvidia-h200-x2): source .device-carry/env.sh; bash bench/gpu-nginx.sh
# Environment: EBB_MODEL (a GGUF; default a random-weight 8B-shape Q4_0 from ebb-gen-model),
# EBB_DEVICES (cl:0:0,cl:0:1), EBB_LEVELS (clients per GPU: 16,32), EBB_TOKENS (128),
# EBB_NGINX (nginx binary), EBB_SERVE_ARGS (extra ebb serve arguments).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ "${1:-}" = --pack ]; then
    dir=${2:?usage: gpu-nginx.sh --pack DIR}
    nginx=$(command -v nginx || echo /usr/sbin/nginx)
    mkdir -p "$dir/lib"
    cp "$nginx" "$dir/nginx.bin"
    ldd "$nginx" | awk '/=> \//{print $3}' | grep -Ev '/(libc|libm|libpthread|libdl|ld-linux)[.-]' |
        while read -r l; do cp -L "$l" "$dir/lib/"; done
    printf '#!/bin/sh\nd=$(dirname "$0")\nLD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/nginx.bin" "$@"\n' \
        >"$dir/nginx"
    chmod +x "$dir/nginx"
    "$dir/nginx" -v && ls "$dir/lib"
    exit $?
fi

source "$here/lib-gpu.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out"
log=$out/nginx.log
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/cache}
nginx=${EBB_NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
[ -x "$nginx" ] || { say "no nginx ($nginx): see --pack above"; exit 1; }
m=${EBB_MODEL:-/tmp/models/llama3-8b-q4_0.gguf}
if [ -z "${EBB_MODEL:-}" ]; then
    mkdir -p /tmp/models
    gpu_gen llama3-8b q4_0 "$m"
fi
IFS=, read -r dev0 dev1 <<<"${EBB_DEVICES:-cl:0:0,cl:0:1}"
levels=${EBB_LEVELS:-16,32}
tokens=${EBB_TOKENS:-128}
py=${PY:-python3}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
git -C "$here/.." log -1 --format='commit %h %cd' 2>/dev/null | tee -a "$log"

wait_http() { # port: until /health answers 200
    for _ in $(seq 1 360); do
        curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    return 1
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

for i in 0 1; do
    dev=$dev0; [ $i = 1 ] && dev=$dev1
    say "ebb serve --device $dev --port $((8101 + i)) --parallel 32"
    ebb serve -m "$m" --device "$dev" --port $((8101 + i)) --parallel 32 --ctx 2560 \
        ${EBB_SERVE_ARGS:-} >"$out/ebb-$i.log" 2>&1 &
    pids+=($!)
done
for i in 0 1; do
    wait_http $((8101 + i)) || { say "daemon $i did not come up"; tail -20 "$out/ebb-$i.log"; exit 1; }
done

# nginx, unprivileged, from the shipped file with the two daemons and port 8100.
nd=$out/nginx
mkdir -p "$nd"
sed -e '/^\s*server 127\.0\.0\.1:8078 /d' -e 's/127\.0\.0\.1:8077 \(.*\)$/127.0.0.1:8101 \1\n    server 127.0.0.1:8102 \1/' \
    -e 's/^\(\s*\)listen 8080;/\1listen 127.0.0.1:8100;/' "$here/../deploy/nginx/ebb.conf" >"$nd/ebb.conf"
grep -E "^\s*(server 127|listen)" "$nd/ebb.conf" | tee -a "$log"
{
    [ "$(id -u)" = 0 ] && echo "user root;"
    echo "daemon off; worker_processes 2; pid $nd/nginx.pid; error_log stderr warn;"
    echo "events { worker_connections 4096; }"
    echo "http { access_log off;"
    for k in client_body proxy fastcgi uwsgi scgi; do echo "  ${k}_temp_path $nd/$k;"; done
    echo "  include $nd/ebb.conf; }"
} >"$nd/nginx.conf"
"$nginx" -p "$nd/" -c "$nd/nginx.conf" -e stderr >"$out/nginx-stderr.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do curl -s -o /dev/null http://127.0.0.1:8100/health && break; sleep 0.1; done

one=() two=()
for c in ${levels//,/ }; do
    say "one daemon (GPU 0), $c clients"
    r=$(timeout 600 $py "$here/load-chat.py" --url http://127.0.0.1:8101 --levels "$c" \
        --tokens "$tokens" --label one-daemon --json "$out/load.json" 2>&1 | tee -a "$log" |
        tail -1)
    echo "$r"
    one+=("$(sed -n 's/.*: *\([0-9.]*\) tok\/s aggregate.*/\1/p' <<<"$r")")
    say "nginx + 2 daemons, $((2 * c)) clients"
    r=$(timeout 600 $py "$here/load-chat.py" --url http://127.0.0.1:8100 --levels $((2 * c)) \
        --tokens "$tokens" --label nginx-2 --json "$out/load.json" 2>&1 | tee -a "$log" |
        tail -1)
    echo "$r"
    two+=("$(sed -n 's/.*: *\([0-9.]*\) tok\/s aggregate.*/\1/p' <<<"$r")")
done
for d in 8101 8102; do
    curl -s "http://127.0.0.1:$d/metrics" | grep -E '^ebb_requests_total\{endpoint="chat_completions"' |
        sed "s/^/daemon $d: /" | tee -a "$log"
done
i=0
for c in ${levels//,/ }; do
    a=${one[$i]:-} b=${two[$i]:-}
    if [ -n "$a" ] && [ -n "$b" ]; then
        say "$c clients per GPU: one daemon $a tok/s, nginx + 2 daemons $b tok/s, ratio $(awk "BEGIN{printf \"%.2f\", $b/$a}")x"
    else
        say "$c clients per GPU: a run failed (see $log)"
    fi
    i=$((i + 1))
done
grep -E "\[(error|crit|alert|emerg)\]" "$out/nginx-stderr.log" | tail -5 | tee -a "$log"
say "done"
