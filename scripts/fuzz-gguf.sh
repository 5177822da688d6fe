#!/bin/sh
# Builds the GGUF parser's libFuzzer target with clang (ASan + UBSan + libFuzzer, outside meson)
# and runs it for SECONDS (default 600) on one core.
#
#   scripts/fuzz-gguf.sh [SECONDS]
#
# Seeds: the first 64 KiB of every model in $EBB_MODELS_DIR (default ~/.local/share/ebb/models)
# and a few small valid files generated here. The corpus grows in build-fuzz-gguf/corpus (kept
# between runs); crashes land in build-fuzz-gguf/artifacts/. Exit status is non-zero on a finding.
set -eu

secs=${1:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_OUT:-$root/build-fuzz-gguf}
models=${EBB_MODELS_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/ebb/models}
cc=${CC:-$(command -v clang-14 || command -v clang)}

mkdir -p "$out/corpus" "$out/seeds" "$out/artifacts"
flags="-g -O1 -std=c11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -fno-omit-frame-pointer"
flags="$flags -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
# shellcheck disable=SC2086
"$cc" $flags -I"$root/runtime" -o "$out/fuzz-gguf" "$root/tests/fuzz/fuzz-gguf.c" \
    "$root/runtime/gguf/gguf.c" "$root/runtime/gguf/gguf-get.c" "$root/runtime/gguf/gguf-file.c" "$root/runtime/gguf/gguf-types.c" "$root/runtime/base/err.c" "$root/runtime/base/log.c"

for m in "$models"/*.gguf; do
    [ -f "$m" ] && head -c 65536 "$m" > "$out/seeds/$(basename "$m" .gguf).head"
done

python3 - "$out/seeds" <<'PY'
# Small valid GGUF files: every value type, nested arrays, one tensor of each supported type.
import struct, sys
out = sys.argv[1]
def s(x): x = x.encode(); return struct.pack('<Q', len(x)) + x
def kv(key, t, payload): return s(key) + struct.pack('<I', t) + payload
def arr(t, items): return struct.pack('<IQ', t, len(items)) + b''.join(items)
kvs = [
    kv('general.architecture', 8, s('llama')),
    kv('general.alignment', 4, struct.pack('<I', 32)),
    kv('u8', 0, b'\x07'), kv('i8', 1, b'\xf9'), kv('u16', 2, struct.pack('<H', 9)),
    kv('i16', 3, struct.pack('<h', -9)), kv('i32', 5, struct.pack('<i', -1)),
    kv('f32', 6, struct.pack('<f', 1.5)), kv('bool', 7, b'\x01'),
    kv('u64', 10, struct.pack('<Q', 1 << 40)), kv('i64', 11, struct.pack('<q', -5)),
    kv('f64', 12, struct.pack('<d', 2.5)),
    kv('llama.block_count', 4, struct.pack('<I', 2)),
    kv('tokenizer.ggml.tokens', 9, arr(8, [s('a'), s('b'), s('<s>')])),
    kv('tokenizer.ggml.scores', 9, arr(6, [struct.pack('<f', -1.0)] * 3)),
    kv('nested', 9, arr(9, [arr(5, [struct.pack('<i', 1)]), arr(9, [arr(8, [s('x')])]),
                            arr(0, [])])),
]
types = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         9: (32, 40), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
         14: (256, 210), 15: (256, 292), 30: (1, 2)}
def gguf(version, kvs, tensors):
    b = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs)) + b''.join(kvs)
    off = 0; infos = b''; sizes = []
    for i, (name, t, ne) in enumerate(tensors):
        bs, ts = types[t]
        n = 1
        for d in ne: n *= d
        size = n // bs * ts
        infos += s(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', d) for d in ne)
        infos += struct.pack('<IQ', t, off)
        sizes.append(size); off = (off + size + 31) // 32 * 32
    b += infos
    b += b'\0' * (-len(b) % 32)
    data = bytearray()
    for size in sizes:
        data += bytes(range(256)) * (size // 256) + bytes(size % 256)
        data += b'\0' * (-len(data) % 32)
    return b + bytes(data[:off - (-sizes[-1] % 32)] if sizes else b'')
ts = [('blk.%d.w' % i, t, [bs, 1 + i % 2]) for i, (t, (bs, _)) in enumerate(types.items())]
files = {
    'all-v3': gguf(3, kvs, ts), 'all-v2': gguf(2, kvs, ts),
    'kv-only': gguf(3, kvs, []), 'empty': gguf(3, [], []),
    'one-tensor': gguf(3, kvs[:2], [('token_embd.weight', 0, [4, 2, 1, 1])]),
}
for name, data in files.items():
    open('%s/%s.gguf' % (out, name), 'wb').write(data)
PY

cat > "$out/gguf.dict" <<'DICT'
"GGUF"
"general.alignment"
"general.architecture"
"tokenizer.ggml.tokens"
"blk.0."
"\x09\x00\x00\x00"
"\x08\x00\x00\x00"
"\x03\x00\x00\x00"
"\xff\xff\xff\xff\xff\xff\xff\xff"
DICT

cd "$out"
# A single allocation above 64 MiB from inputs of at most 64 KiB would be a bug: fail on it.
./fuzz-gguf -max_total_time="$secs" -timeout=10 -malloc_limit_mb=64 -rss_limit_mb=2048 \
    -max_len=65536 -dict=gguf.dict -print_final_stats=1 -artifact_prefix=artifacts/ \
    corpus seeds
