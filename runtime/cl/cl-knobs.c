/* The tuning knobs: one table of the EBB_CL_* variables (name, fields, accepted values, default
 * per kind of device, a line of documentation), resolved into struct ebb_cl_tuning and struct
 * ebb_cl_env, checked, printed and documented from that table alone (cl-knobs.h). The figures
 * behind each default are in docs/ENGINE.md and docs/PERFORMANCE.md. */
#include "cl-knobs.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The kinds of device a default is given for; a later row of a knob's defaults that matches the
 * device wins over an earlier one. */
enum kclass {
    DC_ANY = 0,
    DC_CPU,    /* CPU devices (PoCL) */
    DC_GPU,    /* GPUs of any vendor */
    DC_AMD,    /* AMD GPUs */
    DC_NVIDIA, /* NVIDIA GPUs */
    DC_ARM,    /* ARM and Apple GPUs */
    DC_IDP,    /* devices listing cl_khr_integer_dot_product with packed 4 x 8-bit inputs */
};
static const char *const class_names[] = {
    "any", "CPUs", "GPUs", "AMD GPUs", "NVIDIA GPUs", "ARM and Apple GPUs", "devices listing IDP"};

enum { T_TUNING, T_ENV };
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
#define NONE (-1)

/* One comma-separated part of a knob's value ("x" separates too: 128x64): the field it sets
 * (NONE: checked only) and what it accepts: "A..B", "pow2 A..B" (a power of two in the range),
 * "A..B step S" (a multiple of S in it) or "a|b|c" (those numbers). */
struct kpart {
    int off;
    const char *field;
    const char *accept;
};

struct kdef {
    enum kclass c;
    uint32_t v[4];
};

struct knob {
    const char *name;  /* after EBB_CL_ */
    int where;         /* T_TUNING or T_ENV: the struct the parts' fields are in */
    const char *words; /* non-NULL: the value is one of these words ("tile|coop|gemm"), stored
                          as its index in part 0, whose accept is then "0..n-1" */
    int n_parts, min_parts;
    struct kpart part[4];
    struct kdef def[4];
    /* Optional: set the fields from the parts (knobs that stand for several fields), and read
     * them back for printing; a device-dependent check (NULL reason: fine). */
    void (*set)(struct ebb_cl_tuning *t, const uint32_t *v);
    void (*get)(const struct ebb_cl_tuning *t, uint32_t *v);
    const char *set_fields; /* with set: the fields it sets, for the docs */
    const char *(*check)(const uint32_t *v, const struct ebb_cl_dev_info *di);
    const char *doc;
};

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
static const struct knob knobs[] = {
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
    BOOL1("PTX", mv_ptx, "NVIDIA inline PTX (dp4a, warp shuffles, mma.sync); NVIDIA devices only",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    BOOL1("IDP", mv_idp,
          "the 8-bit path's 4-byte dots through cl_khr_integer_dot_product (not with PTX; kept "
          "only after the start-up probe passes)",
          {DC_ANY, {0}}, {DC_IDP, {1}}),
    UINT1("Q8R", q8r_max, "0..1024",
          "with MVQ8: products of 2..N token rows quantize their inputs and run matvec_q8r (0: "
          "never)",
          {DC_ANY, {0}}, {DC_NVIDIA, {8}}),
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
          "the MMQ_TILE tile (0: never)",
          {DC_ANY, {0}}, {DC_NVIDIA, {64}}),
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
          "raw Q4_K weights, and of its inputs with cp.async, unpacking the nibbles as it reads them "
          "(after the async probe; where MMQNST stages fit in 48 KiB)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    UINT1("MMQNST", mmq_nst, "2|3",
          "with MMQASYNC, the steps of copies in flight (stages; 2 where 3 do not fit in 48 KiB)",
          {DC_ANY, {2}}, {DC_NVIDIA, {3}}),
    {.name = "MMQL_TILE", .where = T_TUNING, .n_parts = 4, .min_parts = 3,
     .part = {P(mmql_t, "8|16|32|64|128"), P(mmql_mi, "1|2|4"), P(mmql_w, "pow2 1..32"), P(mmql_kb, "1|2|4")},
     .def = {{DC_ANY, {64, 2, 4, 2}}}, .check = mmql_tile_check,
     .doc = "matmul_mmql's tile T,MI,W[,KB]: tokens, 16-row groups a warp, warps (16 MI W rows), "
     "32-blocks a step"},
    UINT1("MMQS", mmqs, "0..1048576",
          "with MMQ_STAGE: products of at least N and fewer than MMQ token rows of Q4_0 weights "
          "(batched decode steps) run matmul_mmql with the MMQS_TILE tile (0: never; measured in "
          "docs/PERFORMANCE.md)",
          {DC_ANY, {0}}, {DC_NVIDIA, {32}}),
    {.name = "MMQS_TILE", .where = T_TUNING, .n_parts = 4, .min_parts = 3,
     .part = {P(mmqs_t, "8|16|32|64|128"), P(mmqs_mi, "1|2|4"), P(mmqs_w, "pow2 1..32"), P(mmqs_kb, "1|2|4")},
     .def = {{DC_ANY, {16, 1, 4, 2}}}, .check = mmql_tile_check,
     .doc = "matmul_mmql's tile for MMQS's products (fewer tokens and rows a work-group than "
     "MMQL_TILE's: more work-groups for a batch's few rows), as MMQL_TILE"},
    {.name = "MMQL_TILE_K", .where = T_TUNING, .n_parts = 4, .min_parts = 3,
     .part = {P(mmqk_t, "8|16|32|64|128"), P(mmqk_mi, "1|2|4"), P(mmqk_w, "pow2 1..32"), P(mmqk_kb, "1|2|4")},
     .def = {{DC_ANY, {64, 2, 4, 4}}}, .check = mmql_tile_check,
     .doc = "matmul_mmql's tile for K-quant weights (Q4_K, Q5_K, Q6_K), as MMQL_TILE"},
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
    BOOL1("ATTMMA", att_mma,
          "prefill attention on tensor cores (attn_prefill_mma; with PTX after the mma probe)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
    BOOL1("ATTASYNC", att_async,
          "with ATTMMA and an f16 cache, prefill attention copies its key and value tiles with "
          "cp.async (the next tile's during this one's products) and reads the values with "
          "ldmatrix (after the async probe)",
          {DC_ANY, {0}}, {DC_NVIDIA, {1}}),
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
          "kernels (0: none; used only when longer than ATT_CHUNK)",
          {DC_ANY, {0}}, {DC_NVIDIA, {128}}),
    UINT1("ATT_DEEP_FROM", att_deep_from, "0..1073741824",
          "attended positions from which decode uses the ATT_CHUNK_DEEP kernels (0: 64 of its "
          "chunks)",
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
    BOOL1("MOEFUSE", moe_fuse,
          "MoE decode on 8-bit inputs in three launches a layer; 0: the seven of before",
          {DC_ANY, {1}}),
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
#define N_KNOBS (sizeof(knobs) / sizeof(knobs[0]))

enum ksrc { S_DEFAULT, S_VENDOR, S_ENV };
static const char *const src_names[] = {"default", "vendor default", "environment"};

static bool matches(enum kclass c, const struct ebb_cl_dev_info *di)
{
    switch (c) {
    case DC_ANY:
        return true;
    case DC_CPU:
        return di->is_cpu;
    case DC_GPU:
        return di->is_gpu;
    case DC_AMD:
        return di->is_gpu && di->vendor == EBB_CL_VENDOR_AMD;
    case DC_NVIDIA:
        return di->is_gpu && di->vendor == EBB_CL_VENDOR_NVIDIA;
    case DC_ARM:
        return di->is_gpu && (di->vendor == EBB_CL_VENDOR_ARM || di->vendor == EBB_CL_VENDOR_APPLE);
    case DC_IDP:
        return di->idp;
    }
    return false;
}

/* k's default for di into v; its kind of source. */
static enum ksrc knob_default(const struct knob *k, const struct ebb_cl_dev_info *di, uint32_t *v)
{
    enum ksrc s = S_DEFAULT;
    memcpy(v, k->def[0].v, sizeof(k->def[0].v));
    for (int i = 1; i < 4 && k->def[i].c != DC_ANY; i++)
        if (di && matches(k->def[i].c, di)) {
            memcpy(v, k->def[i].v, sizeof(k->def[i].v));
            s = S_VENDOR;
        }
    return s;
}

/* Whether v is accepted by spec ("A..B", "pow2 A..B", "a|b|c"). */
static bool accepts(const char *spec, uint32_t v)
{
    bool pow2 = !strncmp(spec, "pow2 ", 5);
    const char *p = pow2 ? spec + 5 : spec;
    const char *dots = strstr(p, "..");
    if (dots) {
        unsigned long lo = strtoul(p, NULL, 10), hi = strtoul(dots + 2, NULL, 10);
        const char *st = strstr(p, " step ");
        unsigned long step = st ? strtoul(st + 6, NULL, 10) : 1;
        return v >= lo && v <= hi && (!pow2 || !(v & (v - 1))) && v % step == 0;
    }
    while (*p) {
        char *end;
        if (strtoul(p, &end, 10) == v && end != p)
            return true;
        p = *end == '|' ? end + 1 : end + strlen(end);
    }
    return false;
}

/* The accepted values of k in words for messages and the docs: "64|128,32|64|128[,...]". */
static void accepted(const struct knob *k, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    if (k->words) {
        snprintf(buf, cap, "%s", k->words);
        return;
    }
    for (int i = 0; i < k->n_parts; i++) {
        const char *a = k->part[i].accept;
        bool pow2 = !strncmp(a, "pow2 ", 5);
        const char *st = strstr(a, " step ");
        char step[48] = "";
        if (st)
            snprintf(step, sizeof(step), " (a multiple of %s)", st + 6);
        int w = snprintf(buf + n, cap - n, "%s%s%.*s%s%s", i >= k->min_parts ? "[" : "",
                         i ? "," : "", (int)(st ? (size_t)(st - a) : strlen(a)) - (pow2 ? 5 : 0),
                         pow2 ? a + 5 : a, pow2 ? " (a power of two)" : "", step);
        if (w < 0 || (size_t)w >= cap - n)
            return;
        n += (size_t)w;
    }
    for (int i = k->min_parts; i < k->n_parts && n + 1 < cap; i++)
        buf[n++] = ']', buf[n] = 0;
}

/* Parses s as k's value into v (parts not given keep v's); NULL, or why not. */
static const char *parse(const struct knob *k, const char *s, uint32_t *v)
{
    if (k->words) {
        const char *w = k->words;
        for (uint32_t i = 0; *w; i++) {
            size_t n = strcspn(w, "|");
            if (strlen(s) == n && !strncmp(s, w, n)) {
                v[0] = i;
                return NULL;
            }
            w += n + (w[n] == '|');
        }
        return "not one of the accepted words";
    }
    uint32_t got[4];
    int n = 0;
    const char *p = s;
    for (;;) {
        if (*p < '0' || *p > '9')
            return "not a number";
        char *end;
        unsigned long x = strtoul(p, &end, 10);
        if (n == k->n_parts)
            return "too many parts";
        if (x > UINT32_MAX || !accepts(k->part[n].accept, (uint32_t)x))
            return k->n_parts > 1 ? "a part out of range" : "out of range";
        got[n++] = (uint32_t)x;
        if (!*end)
            break;
        if (*end != ',' && *end != 'x')
            return "not a number";
        p = end + 1;
    }
    if (n < k->min_parts)
        return "too few parts";
    memcpy(v, got, sizeof(got[0]) * (size_t)n);
    return NULL;
}

/* k's value from the environment into v (over its default) when set; 1 when set and good, 0
 * unset, -1 bad (why in *why). */
static int from_env(const struct knob *k, const struct ebb_cl_dev_info *di, uint32_t *v,
                    const char **why, const char **raw)
{
    char name[64];
    snprintf(name, sizeof(name), "EBB_CL_%s", k->name);
    const char *s = getenv(name);
    *raw = s;
    if (!s || !*s)
        return 0;
    uint32_t tmp[4];
    memcpy(tmp, v, sizeof(tmp));
    if ((*why = parse(k, s, tmp)) || (k->check && (*why = k->check(tmp, di))))
        return -1;
    memcpy(v, tmp, sizeof(tmp));
    return 1;
}

static void put(const struct knob *k, void *base, const uint32_t *v)
{
    if (k->set) {
        k->set(base, v);
        return;
    }
    for (int i = 0; i < k->n_parts; i++)
        if (k->part[i].off != NONE)
            memcpy((char *)base + k->part[i].off, &v[i], sizeof(uint32_t));
}

static void get(const struct knob *k, const void *base, uint32_t *v)
{
    memset(v, 0, 4 * sizeof(uint32_t));
    if (k->get) {
        k->get(base, v);
        return;
    }
    for (int i = 0; i < k->n_parts; i++)
        if (k->part[i].off != NONE)
            memcpy(&v[i], (const char *)base + k->part[i].off, sizeof(uint32_t));
        else
            v[i] = k->def[0].v[i];
}

/* The values no knob sets, by kind of device. */
static struct ebb_cl_tuning base_tuning(const struct ebb_cl_dev_info *di)
{
    struct ebb_cl_tuning t = {
        .mm_k = 128,
        .mm_wg = di->is_gpu ? 64 : 16,
        .att_tq = di->is_gpu ? 32 : 8,
        .att_tk = 32,
        .mvu = 2,
        .mma_v = 1,
        .mv_h8 = 1,
        .q8r_fold = 1,
        .att_hnorm = 1,
        /* local memory that is ordinary memory buys nothing but barriers */
        .mm_local = !di->local_is_global,
    };
    return t;
}

/* What the device's limits and the knobs' dependencies make of the values (in this order). */
static void fit_device(struct ebb_cl_tuning *t, const struct ebb_cl_dev_info *di, bool norm_wg_env,
                       bool att_wg_env)
{
    if (!t->mv_cpu)
        t->mvcpu_max = 0;
    if (di->max_wg < 256)
        t->mm_gemm_min = 0, t->mm_mma = 0;
    if (di->vendor != EBB_CL_VENDOR_NVIDIA)
        t->mv_ptx = 0;
    if (t->mv_ptx)
        t->mv_idp = 0;
    if (di->max_wg < EBB_CL_Q8_WG)
        t->mv_q8 = 0;
    while (t->mv_wg * t->mv_rows > di->max_wg && t->mv_rows > 1)
        t->mv_rows /= 2;
    t->mvq_wg = t->mv_wg, t->mvq_rows = t->mv_rows;
    if (!t->qin_rows)
        t->qin_rows = t->mvq_rows;
    while ((uint64_t)t->mvq_wg * t->qin_rows > di->max_wg && t->qin_rows > 1)
        t->qin_rows /= 2;
    while (t->mm_wg > di->max_wg)
        t->mm_wg /= 2;
    while (t->norm_wg > di->max_wg)
        t->norm_wg /= 2;
    if (!att_wg_env && (!t->att_wg || norm_wg_env))
        t->att_wg = t->norm_wg;
    while (t->att_wg > di->max_wg)
        t->att_wg /= 2;
    while (t->att_tq > di->max_wg)
        t->att_tq /= 2;
    /* local memory: matmul stages mm_t x mm_k floats; attention 2 x att_tk x head_dim (up to
     * 256) floats */
    while ((uint64_t)t->mm_t * t->mm_k * 4 > di->local_mem / 2 && t->mm_k > 32)
        t->mm_k /= 2;
    while ((uint64_t)2 * t->att_tk * 256 * 4 > di->local_mem / 2 && t->att_tk > 4)
        t->att_tk /= 2;
}

/* Resolves every knob of table part `where` into base for di (NULL: no device): first every
 * knob's default, then the environment's values over them, both in the table's order (so that
 * EBB_CL_GEMM_MIN set moves what EBB_CL_MM set). src[i] (may be NULL) gets knob i's source. A
 * bad value: EBB_EINVAL into diag when strict, else a note on stderr and the default. */
static ebb_err resolve(const struct ebb_cl_dev_info *di, int where, void *base, enum ksrc *src,
                       bool strict, struct ebb_diag *diag)
{
    for (size_t i = 0; i < N_KNOBS; i++) {
        uint32_t v[4];
        if (knobs[i].where != where)
            continue;
        enum ksrc s = knob_default(&knobs[i], di, v);
        put(&knobs[i], base, v);
        if (src)
            src[i] = s;
    }
    for (size_t i = 0; i < N_KNOBS; i++) {
        const struct knob *k = &knobs[i];
        if (k->where != where)
            continue;
        uint32_t v[4];
        knob_default(k, di, v);
        const char *why = NULL, *raw = NULL;
        int e = from_env(k, di, v, &why, &raw);
        if (e < 0) {
            char acc[160];
            accepted(k, acc, sizeof(acc));
            if (strict)
                return ebb_diag_set(diag, EBB_EINVAL, "EBB_CL_%s=%s: %s (accepted: %s)", k->name,
                                    raw, why, acc);
            fprintf(stderr, "ebb: EBB_CL_%s=%s: %s (accepted: %s); ignored\n", k->name, raw, why,
                    acc);
        } else if (e > 0) {
            put(k, base, v);
            if (src)
                src[i] = S_ENV;
        }
    }
    return EBB_OK;
}

static size_t knob_index(const char *name)
{
    for (size_t i = 0; i < N_KNOBS; i++)
        if (!strcmp(knobs[i].name, name))
            return i;
    return N_KNOBS;
}

static struct ebb_cl_tuning tuning(const struct ebb_cl_dev_info *di, enum ksrc *src,
                                   struct ebb_cl_tuning *before)
{
    struct ebb_cl_tuning t = base_tuning(di);
    enum ksrc own[N_KNOBS];
    enum ksrc *s = src ? src : own;
    resolve(di, T_TUNING, &t, s, false, NULL);
    if (before)
        *before = t;
    fit_device(&t, di, s[knob_index("NORM_WG")] == S_ENV, s[knob_index("ATT_WG")] == S_ENV);
    return t;
}

struct ebb_cl_tuning ebb_cl_tuning_for(const struct ebb_cl_dev_info *di)
{
    return tuning(di, NULL, NULL);
}

void ebb_cl_env_get(struct ebb_cl_env *out)
{
    struct ebb_cl_env e;
    memset(&e, 0, sizeof(e));
    resolve(NULL, T_ENV, &e, NULL, false, NULL);
    *out = e;
}

ebb_err ebb_cl_knobs_check(const struct ebb_cl_dev_info *di, struct ebb_diag *diag)
{
    struct ebb_cl_tuning t;
    struct ebb_cl_env e;
    ebb_err rc;
    memset(&t, 0, sizeof(t));
    memset(&e, 0, sizeof(e));
    if ((rc = resolve(di, T_TUNING, &t, NULL, true, diag)) ||
        (rc = resolve(di, T_ENV, &e, NULL, true, diag)))
        return rc;
    for (char **ev = environ; ev && *ev; ev++) {
        if (strncmp(*ev, "EBB_CL_", 7))
            continue;
        char name[64];
        size_t n = strcspn(*ev + 7, "=");
        snprintf(name, sizeof(name), "%.*s", (int)n, *ev + 7);
        if (knob_index(name) == N_KNOBS)
            fprintf(stderr, "ebb: EBB_CL_%s is not a tuning knob (docs/TUNING.md); ignored\n",
                    name);
    }
    return EBB_OK;
}

/* A knob's value as it is written in the environment. */
static void format_value(const struct knob *k, const uint32_t *v, char *buf, size_t cap)
{
    if (k->words) {
        const char *w = k->words;
        for (uint32_t i = 0; i < v[0] && strchr(w, '|'); i++)
            w = strchr(w, '|') + 1;
        snprintf(buf, cap, "%.*s", (int)strcspn(w, "|"), w);
        return;
    }
    size_t n = 0;
    for (int i = 0; i < k->n_parts && n < cap; i++) {
        int w = snprintf(buf + n, cap - n, "%s%u", i ? "," : "", v[i]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

void ebb_cl_knobs_print(FILE *out, const struct ebb_cl_dev_info *di)
{
    enum ksrc src[N_KNOBS];
    struct ebb_cl_tuning before;
    struct ebb_cl_tuning t = tuning(di, src, &before);
    struct ebb_cl_env e;
    memset(&e, 0, sizeof(e));
    resolve(di, T_ENV, &e, src, false, NULL);
    fprintf(out, "knobs for %s (%s); docs/TUNING.md describes them\n", di->name, di->platform);
    for (size_t i = 0; i < N_KNOBS; i++) {
        const struct knob *k = &knobs[i];
        uint32_t v[4], v0[4];
        char val[64], name[64], from[80];
        if (k->where == T_TUNING) {
            get(k, &t, v);
            get(k, &before, v0);
        } else {
            get(k, &e, v);
            memcpy(v0, v, sizeof(v));
        }
        format_value(k, v, val, sizeof(val));
        snprintf(name, sizeof(name), "EBB_CL_%s", k->name);
        uint32_t d[4];
        enum kclass c = DC_ANY;
        knob_default(k, di, d);
        for (int j = 1; j < 4 && k->def[j].c != DC_ANY; j++)
            if (matches(k->def[j].c, di))
                c = k->def[j].c;
        if (src[i] == S_VENDOR)
            snprintf(from, sizeof(from), "vendor default (%s)", class_names[c]);
        else
            snprintf(from, sizeof(from), "%s", src_names[src[i]]);
        fprintf(out, "%-22s %-16s %s%s\n", name, val, from,
                memcmp(v, v0, sizeof(v)) ? ", then fitted to the device and the other knobs" : "");
    }
}

/* s as a Markdown table cell and its closing bar ('|' escaped). */
static void md_cell(FILE *out, const char *s)
{
    fputc(' ', out);
    for (; *s; s++) {
        if (*s == '|')
            fputc('\\', out);
        fputc(*s, out);
    }
    fputs(" |", out);
}

void ebb_cl_knobs_markdown(FILE *out)
{
    fputs("# Tuning knobs\n"
          "\n"
          "<!-- Generated from the knob table in runtime/cl/cl-knobs.c by `ebb info --knobs "
          "--markdown`;\n"
          "     do not edit. The test cli/knobs fails when this file and the table disagree. -->\n"
          "\n"
          "The OpenCL engine picks its kernel variants and shapes from the device (kind, vendor,\n"
          "work-group and local-memory limits). Each `EBB_CL_*` environment variable below "
          "overrides one\n"
          "choice, for measurements, tests and devices not yet measured; none is needed in normal "
          "use. A\n"
          "value outside the accepted ones is an error naming the knob (the engine does not "
          "start); a name\n"
          "that is not a knob gets a note on stderr. `ebb info --knobs [--device SPEC]` prints "
          "every knob's\n"
          "value for a device and where it came from (default, vendor default, environment; \"then "
          "fitted\"\n"
          "where the device's limits or other knobs changed it). Values of several parts are "
          "separated by\n"
          "`,` or `x` (`EBB_CL_MMA_TILE=128x64`); parts in brackets may be left out (they keep "
          "their\n"
          "defaults). The measurements behind the defaults are in docs/ENGINE.md and "
          "docs/PERFORMANCE.md.\n"
          "\n"
          "| knob | field | accepted | default | what |\n"
          "| --- | --- | --- | --- | --- |\n",
          out);
    for (size_t i = 0; i < N_KNOBS; i++) {
        const struct knob *k = &knobs[i];
        char acc[160], field[96] = "", defs[256];
        accepted(k, acc, sizeof(acc));
        if (k->set)
            snprintf(field, sizeof(field), "%s", k->set_fields);
        for (int j = 0; !k->set && j < k->n_parts; j++) {
            size_t n = strlen(field);
            if (k->part[j].field)
                snprintf(field + n, sizeof(field) - n, "%s`%s`", n ? ", " : "", k->part[j].field);
        }
        size_t n = 0;
        for (int j = 0; j < 4 && (j == 0 || k->def[j].c != DC_ANY); j++) {
            char val[64];
            format_value(k, k->def[j].v, val, sizeof(val));
            int w = snprintf(defs + n, sizeof(defs) - n, "%s%s%s%s", j ? "; " : "",
                             j ? class_names[k->def[j].c] : "", j ? " " : "", val);
            if (w < 0 || (size_t)w >= sizeof(defs) - n)
                break;
            n += (size_t)w;
        }
        fprintf(out, "| `EBB_CL_%s` |", k->name);
        md_cell(out, field[0] ? field : "-");
        md_cell(out, acc);
        md_cell(out, defs);
        md_cell(out, k->doc);
        fputc('\n', out);
    }
    fputs("\n"
          "Besides the table: the engine lowers what a device cannot hold (work-groups to its "
          "limit,\n"
          "tiles to its local memory), keeps PTX to NVIDIA devices and integer dot products off "
          "where\n"
          "PTX is on, keeps the 8-bit path and the tensor cores off below work-groups of 256, and "
          "uses\n"
          "the tensor-core and integer-dot paths only after their start-up probes pass.\n",
          out);
}
