/* The tuning knobs' table (cl-knobs-int.h): every EBB_CL_* variable with its fields, accepted
 * values, defaults per kind of device and its line of documentation; cl-knobs.c resolves,
 * checks, prints and documents it. The figures behind each default are in docs/ENGINE.md and
 * docs/PERFORMANCE.md. */
#include "cl-knobs-int.h"

#include <stddef.h>

const char *const ebb__cl_class_names[] = {
    "any", "CPUs", "GPUs", "AMD GPUs", "NVIDIA GPUs", "ARM and Apple GPUs", "devices listing IDP"};

/* A part setting field f of struct ebb_cl_tuning (P) or struct ebb_cl_env (PE), or none (P0). */
#define P(f, acc)                                                                                  \
    {                                                                                              \
        (int)offsetof(struct ebb_cl_tuning, f), #f, acc                                            \
    }
#define PE(f, acc)                                                                                 \
    {                                                                                              \
        (int)offsetof(struct ebb_cl_env, f), #f, acc                                               \
    }
#define P0(acc)                                                                                    \
    {                                                                                              \
        NONE, NULL, acc                                                                            \
    }
/* EBB_CL_MM: the prefill kernel, tile (the tiled matmul), coop (matmul_coop) or gemm (the GEMM
 * from 2 rows); EBB_CL_GEMM_MIN, after it in the table, sets the GEMM's rows (its default
 * gives coop's GPUs the GEMM from 32 rows). */
static void mm_set(struct ebb_cl_tuning *t, const uint32_t *v)
{
    t->mm_coop = v[0] != 0;
    t->mm_gemm_min = v[0] == 2 ? 2 : 0;
}
static void mm_get(const struct ebb_cl_tuning *t, uint32_t *v)
{
    v[0] = !t->mm_coop ? 0 : t->mm_gemm_min == 2 ? 2 : 1;
}
/* EBB_CL_MMA: 0 no tensor-core GEMM, 1 matmul_mma, 2 matmul_mmb. */
static void mma_set(struct ebb_cl_tuning *t, const uint32_t *v)
{
    t->mm_mma = v[0] != 0;
    if (v[0])
        t->mma_v = v[0];
}
static void mma_get(const struct ebb_cl_tuning *t, uint32_t *v)
{
    v[0] = t->mm_mma ? t->mma_v : 0;
}
static const char *mma_tile_check(const uint32_t *v, const struct ebb_cl_dev_info *di)
{
    (void)di;
    return (v[0] + v[1]) * (v[2] + 8) * 2 > 48 * 1024 ? "the tiles exceed 48 KiB of local memory"
                                                      : NULL;
}
/* matmul_mms's tiles (EBB_CL_MMS_TILE, _MMP_TILE, _MOE_TILE): the warps' partial sums within
 * 48 KiB of local memory, the warps within the device's work-group. */
static const char *mms_tile_check(const uint32_t *v, const struct ebb_cl_dev_info *di)
{
    if ((size_t)(v[2] > 1 ? v[2] / 2 : 1) * 16 * v[1] * v[0] * 4 > 48 * 1024)
        return "the warps' partial sums exceed 48 KiB of local memory";
    if (di && 32 * (size_t)v[2] > di->max_wg)
        return "more warps than the device's work-group holds";
    return NULL;
}
size_t ebb_cl_mmql_bytes(uint32_t t, uint32_t mi, uint32_t w, uint32_t kb)
{
    size_t r = 16 * (size_t)mi * w, kw = 8 * (size_t)kb + 4;
    return 4 * (r * kw + t * kw + 4 * r * kb + 2 * (size_t)t * kb);
}

/* matmul_mmql's tile (EBB_CL_MMQL_TILE): its staged words and scales within 48 KiB of local
 * memory, the warps within the device's work-group. */
static const char *mmql_tile_check(const uint32_t *v, const struct ebb_cl_dev_info *di)
{
    if (ebb_cl_mmql_bytes(v[0], v[1], v[2], v[3] ? v[3] : 2) > 48 * 1024)
        return "the staged tiles exceed 48 KiB of local memory";
    if (di && 32 * (size_t)v[2] > di->max_wg)
        return "more warps than the device's work-group holds";
    return NULL;
}

/* A knob of one part on one field, accepting 0 or 1 (BOOL1) or acc (UINT1): its doc line, then
 * its defaults. */
#define BOOL1(nm, f, doc_, ...) UINT1(nm, f, "0..1", doc_, __VA_ARGS__)
#define UINT1(nm, f, acc, doc_, ...)                                                               \
    {                                                                                              \
        .name = nm, .where = T_TUNING, .n_parts = 1, .min_parts = 1, .part = {P(f, acc)},          \
        .def = {__VA_ARGS__}, .doc = doc_                                                          \
    }

/* The table, in the order the knobs are applied (EBB_CL_GEMM_MIN after EBB_CL_MM). */
/* One knob a paragraph: */
/* clang-format off */
const struct knob ebb__cl_knobs[] = {
    /* decode's products */
    BOOL1("BLOCKDEC", block_dec,
          "whole-block decoders (W_DOT32 / W_DEQ32): 32 weights and inputs live per work-item, 5x "
          "on PoCL, 4x slower on an H100",
          {DC_ANY, {1}}, {DC_GPU, {0}}),
    BOOL1("MVFOLD", mv_fold,
          "decode folds the RMS norm and SwiGLU into each product; 0: they run once per token "
          "first (CPUs, where a folded product recomputes them per row)",
          {DC_ANY, {1}}, {DC_CPU, {0}}),
    BOOL1("MVCPU", mv_cpu,
          "decode through matvec_cpu (MVCPU_R rows a work-item, 16-wide accumulators) where the "
          "layout has W_DEQ32",
          {DC_ANY, {0}}, {DC_CPU, {1}}),
    UINT1("MVCPU_R", mv_cpu_r, "1|2|4|8", "matvec_cpu's rows per work-item", {DC_ANY, {4}}),
    UINT1("MVCPU_MAX", mvcpu_max, "0..65536",
          "with MVCPU: products of up to this many token rows run matvec_cpu once per row instead "
          "of the tiled matmul (0: never)",
          {DC_ANY, {4}}),
    BOOL1("TOPKHOST", topk_host,
          "the top-k of the logits on the host after reading them back (a copy on CPUs)",
          {DC_ANY, {0}}, {DC_CPU, {1}}),
    {.name = "MV", .where = T_TUNING, .n_parts = 2, .min_parts = 2,
     .part = {P(mv_wg, "pow2 1..1024"), P(mv_rows, "1..1024")},
     .def = {{DC_ANY, {1, 16}}, {DC_GPU, {32, 2}}, {DC_AMD, {64, 2}}, {DC_NVIDIA, {32, 4}}},
     .doc = "matvec's shape WG,ROWS: work-items sharing a row, rows a work-group (rows halved to "
     "fit the device's work-group)"},
    BOOL1("MVQ16", mv_q16,
          "matvec takes a whole 4-bit 32-block per work-item and step (W_Q16; without BLOCKDEC)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    BOOL1("MVXL", mv_xlocal,
          "with MVQ16, a work-group's rows share the input staged in local memory", {DC_ANY, {0}},
          {DC_NVIDIA, {1}}),
    {.name = "MVRED", .where = T_TUNING, .words = "tree|flat", .n_parts = 1, .min_parts = 1,
     .part = {P(mv_flat, "0..1")}, .def = {{DC_ANY, {0}}, {DC_NVIDIA, {1}}},
     .doc = "how matvec adds a row's partials: a tree, or flat (two rounds)"},
    /* 8-bit inputs */
    BOOL1("MVQ8", mv_q8,
          "decode quantizes a product's input to int8 blocks once (quantize_x8); 4-bit weights run "
          "matvec_q8 (needs MVQ16 and a work-group of 256)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    BOOL1("KQ8", kq8,
          "with MVQ8, raw Q8_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weights also run on the int8 "
          "inputs (kq8.cl); 0: the float matvec",
          {DC_ANY, {1}}),
    BOOL1("KQ8MIX", kq8_mix,
          "with KQ8, a group of two decode products of one input in different types (q and k in "
          "Q4_K, v in Q6_K: the Q4_K_M mixes) in one launch (matvec_q8_mix); 0: a launch each",
          {DC_ANY, {1}}),
    UINT1("KQ8R", kq8r, "0..1024",
          "with KQ8 and Q8R, products of 2..min(Q8R, N) token rows of those types also run "
          "matvec_q8r (kq8.cl's: each group of a row against every token row, the group's bytes "
          "read again from cache for each; 0 or 1: never). 2 (8B on an H200: 2 slots of Q4_K_M "
          "4.87 ms a step against 7.13 on MMQS's tile, Q8_0 5.49 against 8.77; 4 slots 7.05 "
          "against 6.81, docs/PERFORMANCE.md)",
          {DC_ANY, {2}}),
    BOOL1("PTX", mv_ptx, "NVIDIA inline PTX (dp4a, warp shuffles, mma.sync); NVIDIA devices only",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    BOOL1("IDP", mv_idp,
          "the 8-bit path's 4-byte dots through cl_khr_integer_dot_product (not with PTX; kept "
          "only after the start-up probe passes)",
          {DC_ANY, {0}}, {DC_IDP, {1}}),
    UINT1("Q8R", q8r_max, "0..1024",
          "with MVQ8: products of 2..N token rows quantize their inputs and run matvec_q8r (0: "
          "never; NVIDIA's 6: 8B Q4_0 on an H200, 6 slots 5.85 ms a step against 6.02 on "
          "MMQS's tile, 8 slots 7.08 against 5.78, docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {6}}),
    UINT1("MVR", mvr, "4|8|16", "matvec_q8r's rows per weight read", {DC_ANY, {8}},
          {DC_NVIDIA, {4}}),
    UINT1("MVO", mvo, "1|2|4", "matvec_q8r's output rows per MV_WG work-items", {DC_ANY, {1}},
          {DC_NVIDIA, {2}}),
    UINT1("QIN", qin, "0..2",
          "with MVQ8, 4-bit products quantize their own input in each work-group (matvec_q8_qin): "
          "1 inputs without SwiGLU, 2 also SwiGLU's",
          {DC_ANY, {0}}),
    UINT1("QIN_MAX", qin_max, "0..1073741824",
          "matvec_q8_qin only for inputs of at most N (0: as long as local memory holds)",
          {DC_ANY, {0}}),
    UINT1("QIN_OUT", qin_out_max, "0..1073741824",
          "matvec_q8_qin only for products of at most N output rows (0: any)", {DC_ANY, {0}}),
    UINT1("QIN_ROWS", qin_rows, "1..64",
          "matvec_q8_qin's rows per work-group (default matvec_q8's)", {DC_ANY, {0}}),
    /* prefill and batches */
    {.name = "MM", .where = T_TUNING, .words = "tile|coop|gemm", .n_parts = 1, .min_parts = 1,
     .part = {P0("0..2")}, .def = {{DC_ANY, {0}}, {DC_GPU, {1}}}, .set = mm_set, .get = mm_get,
     .set_fields = "`mm_coop`, `mm_gemm_min`",
     .doc = "prefill's kernel: the tiled matmul, matmul_coop (then the GEMM from GEMM_MIN rows) or "
     "the GEMM from 2 rows"},
    UINT1("GEMM_MIN", mm_gemm_min, "0..1048576",
          "products of at least N rows run matmul_gemm or the tensor cores (0: never; devices with "
          "work-groups of 256)",
          {DC_ANY, {0}}, {DC_GPU, {32}}),
    UINT1("MM_T", mm_t, "pow2 1..32", "token rows per tiled or coop work-item", {DC_ANY, {8}},
          {DC_ARM, {4}}),
    {.name = "MMA", .where = T_TUNING, .n_parts = 1, .min_parts = 1, .part = {P0("0..2")},
     .def = {{DC_ANY, {0}}, {DC_NVIDIA, {2}}}, .set = mma_set, .get = mma_get,
     .set_fields = "`mm_mma`, `mma_v`",
     .doc = "prefill GEMM tiles on tensor cores: 0 off, 1 matmul_mma, 2 matmul_mmb (PTX after the "
     "mma probe; a portable stand-in elsewhere, for tests)"},
    {.name = "MMA_TILE", .where = T_TUNING, .n_parts = 4, .min_parts = 2,
     .part = {P(mma_r, "64|128"), P(mma_t, "32|64|128"), P(mma_k, "32|64|128"), P(mma_pf, "0..1")},
     .def = {{DC_ANY, {64, 64, 32, 0}}, {DC_NVIDIA, {64, 64, 64, 1}}}, .check = mma_tile_check,
     .doc = "matmul_mma's tile R,T[,K[,PF]]: rows, tokens, inputs a step, 1: next step's loads "
     "early"},
    UINT1("MMS", mms_max, "0..1048576",
          "with MMA: products of 2..N token rows of 4-bit and 8-bit weights run matmul_mms "
          "(weights straight into fragments; 0: never)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1048576}}),
    UINT1("MMS_BIG", mms_big, "0..1048576",
          "products of MMS_BIG..MMS rows run matmul_mms with the MMP_TILE tile (0: never)",
          {DC_ANY, {0}}, {DC_NVIDIA, {32}}),
    {.name = "MMS_TILE", .where = T_TUNING, .n_parts = 4, .min_parts = 2,
     .part = {P(mms_t, "8|16|32|64"), P(mms_mi, "1|2|4"), P(mms_w, "pow2 1..32"), P(mms_kb, "1|2|4")},
     .def = {{DC_ANY, {32, 1, 8, 2}}, {DC_NVIDIA, {16, 2, 8, 2}}}, .check = mms_tile_check,
     .doc = "matmul_mms's tile T,MI[,W[,KB]]: tokens, 16-row groups, warps, 32-blocks a warp loads "
     "at once"},
    {.name = "MMP_TILE", .where = T_TUNING, .n_parts = 4, .min_parts = 2,
     .part = {P(mmp_t, "8|16|32|64"), P(mmp_mi, "1|2|4"), P(mmp_w, "pow2 1..32"), P(mmp_kb, "1|2|4")},
     .def = {{DC_ANY, {32, 4, 4, 2}}}, .check = mms_tile_check,
     .doc = "matmul_mms's second tile (from MMS_BIG rows: prefill), as MMS_TILE"},
    UINT1("MMQ", mmq, "0..1048576",
          "with MMA: products of at least N token rows of the weights matmul_mms takes run "
          "matmul_mmq (inputs quantized to int8 per 32-block, int8 tensor-core products) with "
          "the MMQ_TILE tile (0: never; NVIDIA's 128: 64..127 rows on MMQS's tile, 8B Q4_K_M "
          "pp64 3389 tok/s against 1774 with 64 on an H200, docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {128}}),
    {.name = "MMQ_TILE", .where = T_TUNING, .n_parts = 4, .min_parts = 2,
     .part = {P(mmq_t, "8|16|32|64"), P(mmq_mi, "1|2|4"), P(mmq_w, "pow2 1..32"), P(mmq_kb, "1|2|4")},
     .def = {{DC_ANY, {64, 4, 2, 1}}}, .check = mms_tile_check,
     .doc = "matmul_mmq's tile (from MMQ rows: prefill), as MMS_TILE"},
    BOOL1("MMQ_STAGE", mmq_stage,
          "prefill's int8 products (from MMQ rows) run matmul_mmql, whose work-groups stage "
          "their weights and inputs in local memory, with the MMQL_TILE tile; 0: matmul_mmq",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    BOOL1("MMQASYNC", mmq_async,
          "with MMQ_STAGE, matmul_mmql copies the tiles of Q4_0 weights in the split layout, of "
          "raw Q4_K and Q8_0 weights, and of its inputs with cp.async, unpacking the nibbles as it "
          "reads them (after the async probe; where MMQNST stages fit in 48 KiB)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    UINT1("MMQNST", mmq_nst, "2|3",
          "with MMQASYNC, the steps of copies in flight (stages; 2 where 3 do not fit in 48 KiB)",
          {DC_ANY, {2}}, {DC_NVIDIA, {3}}),
    BOOL1("MMQ_I2F", mmq_i2f,
          "with PTX, the int8 tiles' int32 sums (matmul_mmq, matmul_mmql, moe_group_mmql) and "
          "matmul_mms's byte-wide weights turned into floats by integer and float adds instead of "
          "the conversion instruction: the same bits; off (on an H200 8B pp512 was 4.5-12% "
          "slower with it, docs/PERFORMANCE.md)",
          {DC_ANY, {0}}),
    UINT1("MMQ_JITTER", mmq_jit, "0..1000",
          "for accuracy studies: the int8 products' input scales (mmq_quantize's) multiplied by "
          "1 + N x 1e-6, so that the inputs round differently and one file's perplexity can be "
          "sampled over several roundings (0: off; docs/PERFORMANCE.md)",
          {DC_ANY, {0}}),
    {.name = "MMQL_TILE", .where = T_TUNING, .n_parts = 4, .min_parts = 3,
     .part = {P(mmql_t, "8|16|32|64|128"), P(mmql_mi, "1|2|4"), P(mmql_w, "pow2 1..32"), P(mmql_kb, "1|2|4")},
     .def = {{DC_ANY, {64, 2, 4, 2}}}, .check = mmql_tile_check,
     .doc = "matmul_mmql's tile T,MI,W[,KB]: tokens, 16-row groups a warp, warps (16 MI W rows), "
     "32-blocks a step"},
    UINT1("MMQS", mmqs, "0..1048576",
          "with MMQ_STAGE: products of at least N and fewer than MMQ token rows of Q4_0 weights "
          "(batched decode steps) run matmul_mmql with the MMQS_TILE tile, where Q8R's "
          "matvec_q8r does not take them (0: never; NVIDIA's 2: K-quants past KQ8R's rows, Q4_0 "
          "past Q8R's; on an H200 8 slots of 8B Q4_K_M 6.9 ms a step against 14.2 on "
          "matmul_mms, 16 slots 7.1 against 15.0, docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {2}}),
    BOOL1("MMQ_FOLD", mmq_fold,
          "the RMS norm or SwiGLU before int8 products (MMQ, MMQS) folded into the quantization "
          "of their input (mmq_quantize_norm, mmq_quantize_glu: one launch instead of two, the "
          "same numbers); 0: rmsnorm or swiglu, then mmq_quantize",
          {DC_ANY, {1}}),
    UINT1("MMQ_RES", mmq_res, "0..1048576",
          "models of at most N embedding values (n_embd): the int8 tiles' products (MMQ's and "
          "MMQS's: prefill and a batch's steps) of the normed inputs (q/k/v, gate/up) and of the "
          "attention's output (o) run twice, on the 8-bit inputs and on what their rounding left "
          "quantized again (mmq_quantize_norm_res, mmq_quantize_res: about 15 bits an input for "
          "twice those products' work); the down product keeps one pass. 0: never. Small models "
          "lose the most to 8-bit inputs (on an H200 SmolLM2-135M's perplexity +0.35% over the "
          "f16 tiles in one pass, +0.08% in two; its pp512 a fifth to a third slower, "
          "docs/PERFORMANCE.md)",
          {DC_ANY, {1024}}),
    UINT1("MMQ_RES_OPS", mmq_res_ops, "0..7",
          "with MMQ_RES: the products that take its two passes, a sum of 1 (q/k/v), 2 (o) and "
          "4 (gate/up)",
          {DC_ANY, {7}}),
    BOOL1("MMQS_ALL", mmqs_all,
          "MMQS's products for every weight type matmul_mmq takes (K-quants, Q8_0, Q5_0, ...), "
          "not only Q4_0 (0: those batches take matmul_mms's tiles; measured in "
          "docs/PERFORMANCE.md)",
          {DC_ANY, {1}}),
    UINT1("MMQS_SPLIT", mmqs_split, "0..64",
          "with MMQS: a batch's products whose tiles fill fewer than N work-groups a compute unit "
          "split their inputs into up to 8 slices (more work-groups, each a part of the sums; the "
          "tile's last work-group adds the slices in order: the same result whichever ends "
          "first); 0: never (NVIDIA's 4: 32 slots of 8B Q4_K_M 13.3 ms a step against 18.1 on an "
          "H200, docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {4}}),
    UINT1("MMQL_SPLIT", mmql_split, "0..64",
          "with MMQ_STAGE: prefill's int8 products (MMQ rows and more) split as MMQS_SPLIT's, "
          "their tile MMQL_TILE's (the slices' sums of at most 64 MiB); 0: never (4 on an H200: "
          "8B pp512 4-11% slower, Q4_0 pp128 24% slower, Q4_K_M pp128 9% faster; "
          "docs/PERFORMANCE.md)",
          {DC_ANY, {0}}),
    UINT1("K4SPLIT", k4split, "0..65536",
          "with MMQ_STAGE: products of raw Q4_K weights over at least N token rows (prefill's, "
          "and a batch's under MMQ rows on the MMQS tile) first rewrite the weight as split Q4_1 planes into one scratch buffer (k4_split: the "
          "same numbers; the scratch is the largest such weight's 0.75 bytes a weight, allocated "
          "at load) and run matmul_mmql on those, whose inner loop has no super-block header to "
          "decode; 0: never (docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {128}}),
    UINT1("K8SPLIT", k8split, "0..65536",
          "K4SPLIT for raw Q6_K and Q5_K weights: the weight rewritten as a byte a weight (its six "
          "or five bits) and a float2 a block (Q6_K's halves' scales, Q5_K's scale and min; "
          "k8_split: the same numbers; 1.25 bytes a weight of scratch for the largest such layer "
          "weight), multiplied by matmul_mmql on the MMQL_TILE tile, which stages it with no "
          "realignment; 0: never (docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {128}}),
    UINT1("KSPLIT_KEEP", ks_keep, "0..100",
          "with K4SPLIT / K8SPLIT and every layer resident (no memory budget): where the "
          "rewrites of the layers' raw Q4_K, Q6_K and Q5_K weights take at most N% of the "
          "device's memory (0.75 bytes a Q4_K weight, 1.25 a Q6_K or Q5_K one: more than the "
          "weights themselves; 5.3 GiB for an 8B Q4_K_M), each is rewritten once at load and "
          "kept beside it, and prefill's and a batch's products (MMQS rows and more) read it "
          "with no rewrite a product; decode keeps the raw weights. 0: never (a rewrite a "
          "product, over the knobs' rows only). NVIDIA's 10: an 8B Q4_K_M keeps them on an "
          "80 GiB card, not on a 48 GiB one (computed from their size; on an H200 32 slots stepped in 11.1 ms against "
          "13.7, pp512 +6%; docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {10}}),
    {.name = "MMQS_TILE", .where = T_TUNING, .n_parts = 4, .min_parts = 3,
     .part = {P(mmqs_t, "8|16|32|64|128"), P(mmqs_mi, "1|2|4"), P(mmqs_w, "pow2 1..32"), P(mmqs_kb, "1|2|4")},
     .def = {{DC_ANY, {16, 1, 4, 2}}, {DC_NVIDIA, {16, 1, 4, 4}}}, .check = mmql_tile_check,
     .doc = "matmul_mmql's tile for MMQS's products (fewer tokens and rows a work-group than "
     "MMQL_TILE's: more work-groups for a batch's few rows), as MMQL_TILE (NVIDIA's four "
     "blocks a step: 32 slots of 8B Q4_0 8.5-8.6 ms a step against 9.4-9.6 with two on an "
     "H200, docs/PERFORMANCE.md)"},
    {.name = "MMQS_TILE_K6", .where = T_TUNING, .n_parts = 4, .min_parts = 3,
     .part = {P(mmqs6_t, "8|16|32|64|128"), P(mmqs6_mi, "1|2|4"), P(mmqs6_w, "pow2 1..32"), P(mmqs6_kb, "1|2|4")},
     .def = {{DC_ANY, {16, 1, 4, 2}}}, .check = mmql_tile_check,
     .doc = "MMQS_TILE for Q6_K weights (whose cp.async path takes 4 blocks a step; on an H200 "
            "16,1,4,2 through registers stepped 32 slots of 8B Q4_K_M in 16.4-16.6 ms, 16,1,4,4 "
            "through cp.async in 17.8-17.9, docs/PERFORMANCE.md)"},
    {.name = "MMQL_TILE_K", .where = T_TUNING, .n_parts = 4, .min_parts = 3,
     .part = {P(mmqk_t, "8|16|32|64|128"), P(mmqk_mi, "1|2|4"), P(mmqk_w, "pow2 1..32"), P(mmqk_kb, "1|2|4")},
     .def = {{DC_ANY, {64, 2, 4, 4}}}, .check = mmql_tile_check,
     .doc = "matmul_mmql's tile for Q4_K weights, as MMQL_TILE"},
    {.name = "MMQL_TILE_K5", .where = T_TUNING, .n_parts = 4, .min_parts = 3,
     .part = {P(mmqk5_t, "8|16|32|64|128"), P(mmqk5_mi, "1|2|4"), P(mmqk5_w, "pow2 1..32"), P(mmqk5_kb, "1|2|4")},
     .def = {{DC_ANY, {64, 1, 4, 4}}}, .check = mmql_tile_check,
     .doc = "matmul_mmql's tile for Q5_K weights (and Q6_K's in moe_group_mmql), as MMQL_TILE "
            "(their cp.async stages fit 48 KiB in 64,1,4,4, not in MMQL_TILE_K's 64,2,4,4; Q6_K's "
            "need 4 blocks a step)"},
    {.name = "MMQL_TILE_K6", .where = T_TUNING, .n_parts = 4, .min_parts = 3,
     .part = {P(mmqk6_t, "8|16|32|64|128"), P(mmqk6_mi, "1|2|4"), P(mmqk6_w, "pow2 1..32"), P(mmqk6_kb, "1|2|4")},
     .def = {{DC_ANY, {64, 1, 4, 4}}, {DC_NVIDIA, {128, 1, 8, 4}}}, .check = mmql_tile_check,
     .doc = "matmul_mmql's tile for Q6_K weights in dense prefill, as MMQL_TILE (NVIDIA's "
            "128,1,8,4 does not fit two cp.async stages: its words go through registers, unpacked "
            "to int8 once a step; 8B Q6_K pp512 6146 tok/s against 4637 with 64,1,4,4 through "
            "cp.async on an H200, docs/PERFORMANCE.md)"},
    {.name = "MOE_TILE", .where = T_TUNING, .n_parts = 4, .min_parts = 2,
     .part = {P0("16"), P(mg_mi, "1|2|4"), P(mg_w, "pow2 1..32"), P(mg_kb, "1|2|4")},
     .def = {{DC_ANY, {16, 1, 8, 2}}, {DC_NVIDIA, {16, 2, 4, 2}}}, .check = mms_tile_check,
     .doc = "moe_group_mms's tile 16,MI[,W[,KB]] (its tokens are moe.cl's 16 expert pairs), as "
     "MMS_TILE"},
    /* attention */
    BOOL1("ROPEATT", att_rope,
          "decode attention rotates the new token's q and k and stores k and v itself "
          "(attn_decode_rope: no rope_kv launch)",
          {DC_ANY, {1}}),
    BOOL1("ATTQ8", att_q8,
          "with MVQ8, decode attention's reduction quantizes its output for the output projection "
          "(attn_decode_reduce_q8)",
          {DC_ANY, {1}}),
    BOOL1("ATTGQA", att_gqa,
          "a decode attention work-group serves every query head of its KV head (the cache read "
          "once for the group)",
          {DC_ANY, {0}}, {DC_GPU, {1}}),
    UINT1("ATTGQA_FROM", att_gqa_from, "0..1073741824",
          "with ATTGQA, attended positions from which one-token decode groups a KV head's query "
          "heads in one work-group; fewer take one query head a work-group, from a third build "
          "of the attention kernels (0: grouped throughout; NVIDIA's 1024: with EBB_CL_ATTGQA=0 for "
          "whole runs, 8-layer Qwen3-30B-A3B files with 4 KV heads decoded 7-12% faster up to "
          "1024 positions and 4-6% slower from 2048 on; as the default, the full 48-layer file "
          "decoded 7-11% faster after 512 prompt tokens than with 0, Qwen3-8B by under 1%, "
          "docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1024}}),
    UINT1("ATT_FOLD", att_fold, "0..64",
          "with ATTQ8 and ROPEATT, one-token decode attention of at most N chunks runs "
          "attn_decode_rope_q8: the last work-group of each head group merges the chunks (one "
          "after another, as attn_decode_reduce_q8 with one row a slice) and quantizes the "
          "output projection's input, one launch a layer less (where ATT_WG is a multiple of "
          "32); 0: never",
          {DC_ANY, {0}}, {DC_NVIDIA, {32}}),
    BOOL1("ATTMMA", att_mma,
          "prefill attention on tensor cores (attn_prefill_mma; with PTX after the mma probe)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    BOOL1("ATTASYNC", att_async,
          "with ATTMMA and an f16 cache, prefill attention copies its key and value tiles with "
          "cp.async (the next tile's during this one's products) and reads the values with "
          "ldmatrix (after the async probe)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    BOOL1("ATT_DASYNC", att_dasync,
          "with an f16 cache, decode attention's work-groups copy their chunk's keys and values "
          "into local memory with cp.async as they start (after the async probe; where the "
          "chunk fits the work-group's local memory; measured in docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    UINT1("ATT_SUB", att_sub, "0|16|32|64|128|256|512",
          "decode attention's work-group walks its chunk in sub-chunks of N positions (0 or not "
          "shorter than ATT_CHUNK: none); with ATT_DASYNC two sub-chunks are staged, the next "
          "one's copies in flight while this one is read, so chunks can outgrow local memory "
          "(NVIDIA's 64: its deep kernels' chunks of 256 in sub-chunks of 64, measured in "
          "docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {64}}),
    BOOL1("ATTEX2", att_ex2,
          "with ATTMMA, prefill attention's probabilities through ex2.approx (scores in base 2)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    UINT1("ATTMMA_W", att_mma_w, "4|8",
          "with ATTMMA, prefill attention's warps a work-group: 4 (64 queries) or 8 (128 "
          "queries, each key tile staged once for twice the queries)",
          {DC_ANY, {4}}, {DC_NVIDIA, {8}}),
    UINT1("ATT_CHUNK", att_chunk, "pow2 32..1024", "decode attention's positions per work-group",
          {DC_ANY, {256}}, {DC_GPU, {64}}),
    UINT1("NORM_WG", norm_wg, "pow2 1..256",
          "work-group of row reductions (and of decode attention where ATT_WG is not set)",
          {DC_ANY, {16}}, {DC_GPU, {64}}),
    UINT1("ATT_WG", att_wg, "pow2 1..256",
          "decode attention's work-group (0: NORM_WG; NORM_WG set alone also sets it)",
          {DC_ANY, {0}}, {DC_NVIDIA, {128}}),
    UINT1("ATT_SPLIT", att_split, "1..32",
          "at most N runs of keys a prefill attention launch (1: never split)",
          {DC_ANY, {32}}),
    UINT1("ATT_CHUNK_DEEP", att_chunk_deep, "0|32|64|128|256|512|1024",
          "decode attention deep in the context in chunks of N positions, a second build of its "
          "kernels (0: none; used only when longer than ATT_CHUNK; NVIDIA's 256, walked in "
          "ATT_SUB's staged sub-chunks, measured in docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {256}}),
    UINT1("ATT_DEEP_FROM", att_deep_from, "0..1073741824",
          "attended positions from which decode uses the ATT_CHUNK_DEEP kernels (0: 24 of its "
          "chunks, 6144 positions at NVIDIA's 256, where the H200 measured the two builds even)",
          {DC_ANY, {0}}),
    BOOL1("KV_RING", kv_ring,
          "windowed layers keep rings of their window as caches; 0: whole-context caches (and a "
          "prompt-cache store)",
          {DC_ANY, {1}}),
    BOOL1("SPLIT_GATE", split_gate,
          "a layer split's next device has its step enqueued ahead, held by a user event until "
          "the rows it takes are read back (0: the host waits for the read, then enqueues the "
          "next device's step; decode 0.93x -> 1.02x one H200, docs/PERFORMANCE.md)",
          {DC_ANY, {0}}),
    UINT1("BATCH", batch, "128..1024 step 32",
          "rows of a prefill chunk (the engine's scratch rows; 512 keeps the tensor cores' tiles "
          "full)",
          {DC_ANY, {128}}, {DC_GPU, {512}}),
    /* mixtures of experts */
    UINT1("MOE_GROUP", moe_group, "0..1048576",
          "MoE steps of at least N rows run grouped by expert (each row read once per tile; 0: "
          "never, 1: one-token steps too)",
          {DC_ANY, {0}}, {DC_GPU, {8}}),
    BOOL1("MOE_MMS", moe_mms,
          "the grouped MoE products on tensor cores (moe_group_mms) where MMA is on",
          {DC_ANY, {1}}),
    BOOL1("MOE_MMQL", moe_mmql,
          "the grouped MoE products on matmul_mmql's int8 tiles (moe_group_mmql: the pairs' "
          "inputs quantized, tiles of MMQL_TILE's tokens in pairs) where MMQ, MMQ_STAGE and "
          "all three expert stacks allow it; before moe_group_mms (NVIDIA's 1: Qwen3-30B-A3B "
          "prefill 2.0x on the H200, docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    BOOL1("MOEFUSE", moe_fuse,
          "MoE decode on 8-bit inputs in three launches a layer; 0: the seven of before",
          {DC_ANY, {1}}),
    UINT1("MOE_GU_WG", moe_gu_wg, "256|512|1024",
          "moe_gate_up_q8's work-group: its 64 rows (32 of the gate, 32 of the up stack) over "
          "this many work-items, teams of MV_WG a row (more: fewer rows a team, more loads in "
          "flight on the card; NVIDIA's 512: Qwen3-30B-A3B decode +6% on the H200 with "
          "MOE_DN_L 64, docs/PERFORMANCE.md)",
          {DC_ANY, {256}}, {DC_NVIDIA, {512}}),
    UINT1("MOE_DN_L", moe_dn_l, "0|32|64|128|256",
          "moe_down_q8's work-items a row (its k experts' pairs of groups spread over them); 0: "
          "MV_WG's (NVIDIA's 64, with MOE_GU_WG 512)",
          {DC_ANY, {0}}, {DC_NVIDIA, {64}}),
    UINT1("MOE_RT_ROWS", moe_rt_rows, "0|1|2|4|8",
          "moe_router_q8's router rows a work-group (of EBB_CL_Q8_WG work-items, MV_WG a row; at "
          "most EBB_CL_Q8_WG / MV_WG): fewer spread the router over more compute units; 0: 2",
          {DC_ANY, {0}}),
    /* the engine's other settings (struct ebb_cl_env) */
    {.name = "LAYOUT", .where = T_ENV, .words = "auto|raw|split|image|image2d", .n_parts = 1,
     .min_parts = 1, .part = {PE(layout, "0..4")}, .def = {{DC_ANY, {0}}},
     .doc = "weight layout: auto (the engine's choice, timed at first load on GPUs), raw blocks, "
     "split planes, split in an image1d_buffer or in image2d objects, where valid"},
    {.name = "IMAGE2D_MAX", .where = T_ENV, .n_parts = 2, .min_parts = 1,
     .part = {PE(image2d_max[0], "1..1073741824"), PE(image2d_max[1], "1..1073741824")},
     .def = {{DC_ANY, {0, 0}}},
     .doc = "W[,H] lowers the device's image2d limits (tests: rows wrapped or side by side; 0: the "
     "device's)"},
    {.name = "TUNE", .where = T_ENV, .n_parts = 1, .min_parts = 1, .part = {PE(tune, "0..1")},
     .def = {{DC_ANY, {0}}},
     .doc = "1: the layout timing at first load runs on CPUs too (tests)"},
    {.name = "SPLIT_THREADS", .where = T_ENV, .n_parts = 1, .min_parts = 1,
     .part = {PE(split_threads, "1..64")}, .def = {{DC_ANY, {0}}},
     .doc = "threads of the split layouts' rearrangement at load, also for small weights (tests; "
     "default: the cores up to 8, for weights of 512 Ki blocks or more)"},
    {.name = "PROFILE", .where = T_ENV, .words = "0|1|gpu", .n_parts = 1, .min_parts = 1,
     .part = {PE(profile, "0..2")}, .def = {{DC_ANY, {0}}},
     .doc = "per-kernel times on stderr at exit: 1 every launch waited for (wall time), gpu the "
     "queue's timestamps"},
};
/* clang-format on */

const size_t ebb__cl_n_knobs = sizeof(ebb__cl_knobs) / sizeof(ebb__cl_knobs[0]);
_Static_assert(sizeof(ebb__cl_knobs) / sizeof(ebb__cl_knobs[0]) <= EBB_CL_KNOBS_MAX,
               "more knobs than EBB_CL_KNOBS_MAX");
