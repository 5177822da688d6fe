#!/usr/bin/env bash
# Compiles the engine's OpenCL programs offline with clang for SPIR (spir64, OpenCL C 3.0), as a
# GPU with cl_khr_integer_dot_product would build them, with MV_IDP on (q8.cl's dot4_us /
# dot4_ss through dot_4x8packed_us_int / dot_4x8packed_ss_int) and off (the portable byte dots),
# and reports pass / fail per program. Neither PoCL nor NVIDIA's OpenCL here declares those
# builtins, so this is the only check the MV_IDP branch gets on this machine: it shows that the
# programs compile with it and that the builtins are what they call, not that they run.
#
# Usage: scripts/cl-offline-check.sh [BUILD_DIR]   (default build-test; needs its
#        tests/kernels/cl-prologue, built by ninja)
# Environment: CLANGS (default "clang-14 clang-15": those that exist are used), KEEP=1 keeps
#        the sources and IR in the work directory it prints.
#
# Each program is what ebb_cl_wprog_build / ebb_cl_moe_build / ebb_cl_ops_build concatenate:
# the prologue that cl-prologue prints (the engine's own ebb_cl_layout_prologue /
# ebb_cl_ops_prologue for a made-up Intel or AMD GPU listing the extension, under the same
# EBB_CL_* variables as the engine: here the 8-bit decode path forced on, EBB_CL_MVQ8=1
# EBB_CL_MVQ16=1 EBB_CL_BLOCKDEC=0, with matvec_q8r and matvec_q8_qin, EBB_CL_Q8R=64
# EBB_CL_QIN=2), then the .cl files in the builders' order. Plus ebb_cl_idp_probe's program
# (q8.cl under the probe's prologue), also at OpenCL C 1.2, where clang declares no such builtins
# and the probe must still compile, without them.
#
# clang flags: -x cl -cl-std=CL3.0 -Xclang -finclude-default-header -target spir64
# -cl-mad-enable (the engine's option) -O2 -S -emit-llvm, and -fgnu89-inline so that every
# inline helper gets a body in the IR (under C99 inline rules an inline function that clang
# does not inline stays an external declaration, hiding its calls). A program passes when clang
# exits 0 with no error and its IR has calls to dot_4x8packed_us_int and dot_4x8packed_ss_int
# with MV_IDP=1 and none with MV_IDP=0 (the prologue's MV_IDP line is checked too).
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build-test}
GEN=$BUILD/tests/kernels/cl-prologue
if [ ! -x "$GEN" ]; then
    echo "cl-offline-check: $GEN not found (run ninja -C $BUILD first)" >&2
    exit 2
fi
clangs=()
for c in ${CLANGS:-clang-14 clang-15}; do
    command -v "$c" > /dev/null && clangs+=("$c")
done
if [ ${#clangs[@]} -eq 0 ]; then
    echo "cl-offline-check: none of ${CLANGS:-clang-14 clang-15} found" >&2
    exit 2
fi
work=$(mktemp -d /tmp/ebb-cl-offline-XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT

export EBB_CL_MVQ8=1 EBB_CL_MVQ16=1 EBB_CL_BLOCKDEC=0 EBB_CL_Q8R=64 EBB_CL_QIN=2
K=cl_kernels
# the builders' sources, in their order, from the engine's own lists (runtime/cl/cl-build.c)
files_of() { "$GEN" sources "$1" | sed "s|^|$K/|" | tr '\n' ' '; }
WEIGHT_FILES=$(files_of weight)
MOE_FILES=$(files_of moe)
OPS_FILES=$(files_of ops)
if [ -z "$WEIGHT_FILES" ] || [ -z "$MOE_FILES" ] || [ -z "$OPS_FILES" ]; then
    echo "cl-offline-check: $GEN sources failed" >&2
    exit 2
fi
# ebb_cl_idp_probe's prologue (runtime/cl/cl-probe.c)
PROBE_PRO='#if defined(cl_khr_integer_dot_product) || defined(__opencl_c_integer_dot_product_input_4x8bit_packed)
#define MV_IDP 1
#endif
#define IDP_PROBE 1'

pass=0
fail=0
# compile NAME STD WANT_IDP(0|1) SRC: compiles SRC with every clang, checks the builtin calls.
compile() {
    local name=$1 std=$2 want=$3 src=$4 c ll log us ss ok why
    for c in "${clangs[@]}"; do
        ll=$work/$name.$c.ll
        log=$work/$name.$c.log
        ok=1
        why=""
        if ! "$c" -x cl -cl-std="$std" -Xclang -finclude-default-header -target spir64 \
            -cl-mad-enable -fgnu89-inline -O2 -S -emit-llvm -o "$ll" "$src" > "$log" 2>&1 ||
            grep -q "error:" "$log"; then
            ok=0
            why="does not compile"
        else
            us=$(grep -c "call.*dot_4x8packed_us_int" "$ll")
            ss=$(grep -c "call.*dot_4x8packed_ss_int" "$ll")
            if [ "$want" = 1 ] && { [ "$us" = 0 ] || [ "$ss" = 0 ]; }; then
                ok=0
                why="MV_IDP 1 but the IR calls dot_4x8packed_us_int $us, _ss_int $ss times"
            elif [ "$want" = 0 ] && [ "$us$ss" != 00 ]; then
                ok=0
                why="MV_IDP 0 but the IR calls the builtins ($us, $ss)"
            else
                why="builtin calls: us $us, ss $ss"
            fi
        fi
        local warn
        warn=$(grep -c "warning:" "$log")
        if [ $ok = 1 ]; then
            pass=$((pass + 1))
            printf 'PASS  %-44s %-9s %s; %s warnings\n' "$name" "$c" "$why" "$warn"
        else
            fail=$((fail + 1))
            printf 'FAIL  %-44s %-9s %s\n' "$name" "$c" "$why"
            sed -n '1,30p' "$log" | sed 's/^/      /'
        fi
    done
}

# program NAME WANT_IDP PROLOGUE-ARGS... -- FILES...: the prologue from cl-prologue, then FILES.
program() {
    local name=$1 want=$2 src=$work/$1.cl pro=()
    shift 2
    while [ "$1" != -- ]; do
        pro+=("$1")
        shift
    done
    shift
    if ! "$GEN" "${pro[@]}" > "$src"; then
        fail=$((fail + 1))
        echo "FAIL  $name: cl-prologue ${pro[*]} failed"
        return
    fi
    if ! grep -qx "#define MV_IDP $want" "$src"; then
        fail=$((fail + 1))
        echo "FAIL  $name: the prologue lacks '#define MV_IDP $want'"
        return
    fi
    cat "$@" >> "$src"
    compile "$name" CL3.0 "$want" "$src"
}

for idp in 1 0; do
    export EBB_CL_IDP=$idp
    for t in Q4_0:raw Q4_0:split Q4_1:split Q8_0:raw Q5_0:raw Q5_1:raw Q4_K:raw Q5_K:raw \
        Q6_K:raw; do
        program "weight-intel-${t%%:*}-${t##*:}-idp$idp" $idp intel weight "${t%%:*}" "${t##*:}" \
            -- $WEIGHT_FILES
    done
    for t in Q4_0:raw Q4_K:raw; do
        program "weight-amd-${t%%:*}-${t##*:}-idp$idp" $idp amd weight "${t%%:*}" "${t##*:}" \
            -- $WEIGHT_FILES
    done
    for t in Q4_K Q6_K Q8_0 Q4_0; do
        program "moe-intel-$t-raw-idp$idp" $idp intel moe "$t" raw -- $MOE_FILES
    done
    program "ops-intel-hd64-idp$idp" $idp intel ops 64 -- $OPS_FILES
    program "ops-intel-hd128-idp$idp" $idp intel ops 128 -- $OPS_FILES
    program "ops-intel-hd128-kvq8-idp$idp" $idp intel ops 128 q8_0 -- $OPS_FILES
done
unset EBB_CL_IDP

# The probe: MV_IDP from the compiler's macros (OpenCL C 3.0 on SPIR: declared), and at 1.2
# (clang declares none there): it must still compile, on the portable dots.
printf '%s\n' "$PROBE_PRO" > "$work/probe.cl"
cat $K/q8.cl >> "$work/probe.cl"
compile probe-CL3.0 CL3.0 1 "$work/probe.cl"
compile probe-CL1.2 CL1.2 0 "$work/probe.cl"

# NVIDIA's inline PTX (MV_PTX: q8.cl's dp4a and shuffles, attention.cl's attn_prefill_mma on
# mma.sync) for nvptx64 (OpenCL C 1.2, -fgnu-keywords for asm; cl_khr_fp16 declared, as NVIDIA's
# driver lists it, without which clang's header leaves vload_half out on this target): the ops
# program of heads of 64, 128 and 256 with the f16 KV cache and with q8_0 (cl-prologue ... q8_0,
# KV_Q8). A program passes when clang exits 0 with no error and its PTX has the
# attn_prefill_mma entry and mma.sync instructions.
for hd in 64 128 256; do
    for kv in f16 q8_0; do
        name="ops-nvidia-hd$hd-kv$kv"
        src=$work/$name.cl
        if ! "$GEN" nvidia ops $hd $([ $kv = q8_0 ] && echo q8_0) > "$src"; then
            fail=$((fail + 1))
            echo "FAIL  $name: cl-prologue failed"
            continue
        fi
        cat $OPS_FILES >> "$src"
        for c in "${clangs[@]}"; do
            ptx=$work/$name.$c.ptx
            log=$work/$name.$c.log
            if "$c" -x cl -cl-std=CL1.2 -fgnu-keywords -Xclang -cl-ext=+cl_khr_fp16 \
                -Xclang -finclude-default-header -target nvptx64-nvidia-nvcl -cl-mad-enable \
                -O2 -S -o "$ptx" "$src" > "$log" 2>&1 && ! grep -q "error:" "$log" &&
                grep -q "\.entry attn_prefill_mma" "$ptx" && grep -q "mma\.sync" "$ptx"; then
                pass=$((pass + 1))
                printf 'PASS  %-44s %-9s nvptx64, attn_prefill_mma on mma.sync; %s warnings\n' \
                    "$name" "$c" "$(grep -c "warning:" "$log")"
            else
                fail=$((fail + 1))
                printf 'FAIL  %-44s %-9s nvptx64\n' "$name" "$c"
                sed -n '1,30p' "$log" | sed 's/^/      /'
            fi
        done
    done
done

echo "cl-offline-check: $pass passed, $fail failed (${clangs[*]}, spir64, nvptx64)${KEEP:+; files in $work}"
[ $fail = 0 ]
