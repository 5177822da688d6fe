/* The OpenCL engine's tuning knobs: one declared table (cl-knobs-table.c) of the EBB_CL_*
 * environment variables, each a row with its name, the fields it sets, its accepted values, its
 * default per kind of device and a line of documentation. The table is parsed and range-checked
 * in one place: a bad value is an error naming the knob (ebb_cl_open refuses to start), `ebb
 * info --knobs` prints each knob's value for a device and where it came from, and
 * docs/TUNING.md is generated from it (`ebb info --knobs --markdown`; the test cli/knobs fails
 * when they disagree). */
#ifndef EBB_RUNTIME_CL_KNOBS_H
#define EBB_RUNTIME_CL_KNOBS_H

#include "cl.h"

/* Kernel variant parameters chosen from the device's properties (ebb_cl_tuning_for): every field
 * a knob sets is named in the knob table (cl-knobs-table.c, docs/TUNING.md); the others follow from
 * them and the device. */
struct ebb_cl_tuning {
    uint32_t mv_wg;         /* work-items per output row in matvec */
    uint32_t mv_rows;       /* output rows per matvec work-group */
    uint32_t mm_t;          /* tokens per work-item in matmul */
    uint32_t mm_k;          /* input chunk staged in local memory by matmul */
    uint32_t mm_wg;         /* matmul work-group size */
    uint32_t mm_local;      /* 1: matmul stages the token tile in local memory */
    uint32_t mm_coop;       /* 1: prefill runs matmul_coop (rows shared by MV_WG work-items, MM_T
                               tokens each) instead of the tiled matmul: GPUs */
    uint32_t mv_q16;        /* 1: matvec takes a whole 4-bit 32-block per work-item and step (W_Q16;
                               GPUs, where block_dec is off) */
    uint32_t mv_xlocal;     /* 1: with mv_q16, the MV_ROWS rows of a work-group share x staged in
                               local memory */
    uint32_t mv_flat;       /* 1: matvec reduces a row's partials in two rounds, not a tree */
    uint32_t mm_gemm_min;   /* prefills of at least this many tokens run matmul_gemm (64 x 64
                               tiles in local memory); 0 = never */
    uint32_t mv_q8;         /* 1: decode quantizes a product's input to int8 blocks once
                               (quantize_x8) and 4-bit weights run matvec_q8 (q8.cl); needs
                               mv_q16 and a device work-group of EBB_CL_Q8_WG */
    uint32_t mv_ptx;        /* 1: NVIDIA inline PTX in q8.cl (dp4a, warp shuffles) */
    uint32_t mv_idp;        /* 1: q8.cl's 4-byte dots through cl_khr_integer_dot_product's
                               packed builtins (MV_IDP): without mv_ptx, where the device
                               lists the extension; kept only after ebb_cl_idp_probe */
    uint32_t mv_h8;         /* 1: matvec reads raw F16 / BF16 rows eight weights a step (W_RD8) */
    uint32_t kq8;           /* 1: with mv_q8, decode of raw Q8_0, Q5_0, Q5_1, Q4_K, Q5_K and
                               Q6_K weights also runs on int8 inputs (kq8.cl's matvec_q8) */
    uint32_t kq8_mix;       /* 1: with kq8, two stacked products of one input in different kq8
                               types (q and k in Q4_K, v in Q6_K) in one matvec_q8_mix launch */
    uint32_t kq8r;          /* with kq8 and q8r_max: kq8.cl's matvec_q8r for products of
                               2..min(q8r_max, kq8r) rows; 0 or 1 = never */
    uint32_t q8r_max;       /* with mv_q8: products of 2..q8r_max token rows quantize their
                               inputs (quantize_x8_rows) and run matvec_q8r, MVR rows per
                               weight read, instead of the tiled kernels; 0 = never */
    uint32_t mvr;           /* matvec_q8r's rows per work-item (MVR: 4, 8 or 16) */
    uint32_t mvo;           /* matvec_q8r's output rows per MV_WG work-items (MVO: 1, 2 or 4) */
    uint32_t mvu;           /* matvec_q8's 4-bit blocks a work-item loads per step (MVU: 1..8) */
    uint32_t mvq_wg;        /* matvec_q8's work-items per row (MVQ_WG; mv_wg unless mv_ptx) */
    uint32_t mvq_rows;      /* matvec_q8's rows per work-group (MVQ_ROWS) */
    uint32_t q8r_fold;      /* 1: batches through matvec_q8r fold the RMS norm and the gate's
                               activation into quantize_x8_rows (0: separate launches) */
    uint32_t qin;           /* with mv_q8, decode products of 4-bit weights quantize their own
                               input in each work-group (matvec_q8_qin, no quantize_x8 launch):
                               0 never, 1 inputs without SwiGLU (norm-folded or plain), 2 also
                               the [gate | up] inputs of SwiGLU / GeGLU */
    uint32_t qin_max;       /* matvec_q8_qin only for inputs of at most this length (0: as long
                               as the int8 row fits local memory) */
    uint32_t qin_rows;      /* matvec_q8_qin's rows per work-group (MVQ_WG work-items each) */
    uint32_t qin_out_max;   /* matvec_q8_qin only for products of at most this many output
                               rows (0: any; every work-group re-reads the input row) */
    uint32_t mm_mma;        /* 1: prefill GEMM tiles run matmul_mma: tensor cores through PTX
                               mma.sync where mv_ptx (after ebb_cl_mma_probe), a portable
                               stand-in otherwise (tests) */
    uint32_t mma_r, mma_t;  /* matmul_mma's tile: rows, tokens (64 or 128 each) */
    uint32_t mma_k;         /* matmul_mma's inputs per step (32, 64 or 128) */
    uint32_t mma_v;         /* prefill GEMM on tensor cores: 1 matmul_mma, 2 matmul_mmb (the
                               same tiles, 8 warps as 4 x 2, double-buffered steps of 32) */
    uint32_t mms_max;       /* with mm_mma: products of 2..mms_max token rows of 4-bit weights
                               run matmul_mms (tensor cores, weights loaded straight into
                               fragments, the inputs split over 8 warps); 0 = never */
    uint32_t mms_t, mms_mi; /* matmul_mms's tokens (8..64) and 16-row groups (1, 2, 4) per
                               work-group */
    uint32_t mms_w;         /* matmul_mms's warps per work-group (4..32), splitting the inputs */
    uint32_t mms_kb;        /* matmul_mms's 32-blocks loaded at once per warp (1, 2, 4) */
    uint32_t mms_big;       /* products of mms_big..mms_max rows run matmul_mms built with the
                               second tile mmp_* (matmul_mmp: prefill); 0 = never */
    uint32_t mmp_t, mmp_mi, mmp_w, mmp_kb; /* that tile (as mms_t, mms_mi, mms_w, mms_kb) */
    uint32_t mmq; /* with mm_mma: products of at least mmq rows of the layouts
                     matmul_mms takes run matmul_mmq (8-bit inputs, int8 tensor-core
                     products) with the mmq_* tile; 0 = never */
    uint32_t mmq_t, mmq_mi, mmq_w, mmq_kb; /* that tile (as mms_t, mms_mi, mms_w, mms_kb) */
    uint32_t mmq_stage;   /* 1: prefill's int8 products run matmul_mmql (tiles staged in local
                             memory) with the mmql_* tile instead of matmul_mmq's mmq_* tile */
    uint32_t mmq_async;   /* 1: matmul_mmql copies split Q4_0 weights' tiles and its inputs with
                             cp.async, mmq_nst steps in flight (after the async probe) */
    uint32_t mmq_nst;     /* those steps: 2 or 3 */
    uint32_t mmq_i2f;     /* 1: the int8 tiles' int32 sums and matmul_mms's byte-wide weights
                             converted to float by integer and float adds (the same bits) */
    uint32_t mmq_jit;     /* accuracy studies: the int8 products' input scales times
                             (1 + mmq_jit 1e-6); 0 = off */
    uint32_t mmqs;        /* with mmq_stage: products of at least mmqs and fewer than mmq token rows
                             of Q4_0 weights run matmul_mmql with the mmqs_* tile (batched decode
                             steps); 0 = never */
    uint32_t mmq_fold;    /* 1: a norm or SwiGLU before int8 products folded into their quantize */
    uint32_t mmq_res;     /* models of at most this n_embd: the int8 tiles' products (prefill,
                             a batch's) of normed inputs (q/k/v, gate/up) and the attention's
                             output (o) run on two passes of 8-bit inputs (the rounding's
                             remainder quantized again); 0 = never */
    uint32_t mmq_res_ops; /* with mmq_res: which products, bits 1 q/k/v, 2 o, 4 gate/up */
    uint32_t mmqs_all;    /* 1: mmqs's products for every weight type with matmul_mmq, not only
                             Q4_0 */
    uint32_t mmqs_split;  /* with mmqs: a product whose tiles fill fewer than mmqs_split
                             work-groups a compute unit splits its inputs into slices (at most
                             EBB_CL_MMQS_SPLIT_MAX; 0: never) */
    uint32_t mmql_split;  /* the same for prefill's products on the mmql_* tiles (mmq_stage) */
    uint32_t k4split;     /* raw Q4_K products of at least this many rows (prefill's, a
                             batch's) rewrite the weight as split Q4_1 first (k4_split), 0:
                             never */
    uint32_t k8split;     /* the same for raw Q6_K and Q5_K weights (k8_split, matmul_mmql
                             with MQL_S8H) */
    uint32_t ks_keep;     /* the rewrites of the layers' raw K-quant weights made once at load
                             and kept beside them (prefill and batches read those) where they
                             take at most this percentage of the device's memory, 0: made for
                             each product */
    uint32_t mql_s8h;     /* not a knob: the program's matmul_mmq / matmul_mmql read Q6_K / Q5_K
                             weights as k8_split wrote them (MQL_S8H) */
    uint32_t mmqs_t, mmqs_mi, mmqs_w, mmqs_kb;     /* that tile, as mmql_* */
    uint32_t mmqs6_t, mmqs6_mi, mmqs6_w, mmqs6_kb; /* the same for Q6_K weights */
    uint32_t mmql_t, mmql_mi, mmql_w, mmql_kb;     /* matmul_mmql's tile: tokens, 16-row groups a
                                                      warp, warps (16 mmql_mi mmql_w rows), 32-blocks
                                                      a step */
    uint32_t mmqk_t, mmqk_mi, mmqk_w, mmqk_kb;     /* the same for Q4_K weights */
    uint32_t mmqk5_t, mmqk5_mi, mmqk5_w, mmqk5_kb; /* the same for Q5_K weights */
    uint32_t mmqk6_t, mmqk6_mi, mmqk6_w, mmqk6_kb; /* the same for Q6_K weights */
    uint32_t mg_mi, mg_w, mg_kb; /* moe_group_mms's tile (16 expert pairs as its tokens): as
                                    mms_mi, mms_w, mms_kb (ebb_cl_moe_mms_build) */
    uint32_t att_rope;     /* 1: decode attention rotates the new token's q and k and writes its
                              k and v to the cache itself (attn_decode_rope: no rope_kv launch) */
    uint32_t att_hnorm;    /* 1: with att_rope, attn_decode_rope also RMS-norms the query and key
                              heads (Qwen 3, Gemma 3: no head_norm launch in decode) */
    uint32_t att_q8;       /* 1: with mv_q8, decode attention's reduction quantizes its output
                              for the output projection (attn_decode_reduce_q8) */
    uint32_t mma_pf;       /* 1: matmul_mma loads the next step during this one's products */
    uint32_t att_gqa;      /* 1: a decode attention work-group serves every query head of its
                              KV head (keys and values read once for the group) */
    uint32_t att_gqa_from; /* with att_gqa, attended positions from which one-token decode
                              groups the heads; below, one query head a work-group (a third
                              build of the ops program; 0: grouped throughout) */
    uint32_t att_fold;     /* with att_q8 and att_rope, one-token decode of at most this many
                              chunks (0..64) runs attn_decode_rope_q8: the last work-group of
                              a head group merges the chunks and quantizes (0: never) */
    uint32_t att_mma;      /* 1: prefill attention on tensor cores (attn_prefill_mma, with
                              mv_ptx after the mma probe, head dimensions 16..128) */
    uint32_t att_async;    /* 1: attn_prefill_mma copies its key and value tiles with cp.async
                              and reads values with ldmatrix (f16 caches; after the async probe) */
    uint32_t att_dasync;   /* 1: decode attention stages its chunk's keys and values with
                              cp.async (f16 caches, after the async probe, where they fit) */
    uint32_t att_sub;   /* decode attention's sub-chunk (ATT_SUB): 0 or not shorter than att_chunk =
                           none */
    uint32_t att_ex2;   /* 1: attn_prefill_mma's probabilities through ex2.approx */
    uint32_t att_mma_w; /* attn_prefill_mma's warps a work-group: 4 (64 queries) or 8 (128) */
    uint32_t att_g;     /* query heads per decode attention work-group (ATT_G): 1, or the
                           model's group when att_gqa allows it (set by the engine) */
    uint32_t kv_q8;     /* 1: the KV cache holds Q8_0 blocks instead of halves (KV_Q8: the
                           rope and attention kernels; set by the engine from --kv-type) */
    uint32_t mv_fold;   /* 1: decode folds the RMS norm and SwiGLU into each product (one
                           launch each less: GPUs); 0: swiglu and the output head's rmsnorm
                           run once per token first (CPUs, where a folded product recomputes
                           them per row; with mv_cpu the layers' norms stay folded) */
    uint32_t mv_cpu;    /* 1: decode runs matvec_cpu (MV_CPU_R rows per work-item, 16-wide
                           accumulators) where the layout has W_DEQ32: CPUs */
    uint32_t mv_cpu_r;  /* matvec_cpu's rows per work-item (MV_CPU_R: 1, 2, 4 or 8) */
    uint32_t mvcpu_max; /* with mv_cpu: products of up to this many token rows run matvec_cpu
                           once per row instead of the tiled matmul (batched decode steps) */
    uint32_t topk_host; /* 1: top-k of the logits on the host after reading them back (CPUs:
                           a read is a copy, cheaper than the device passes) */
    uint32_t norm_wg;   /* work-group size of row reductions */
    uint32_t att_wg;    /* work-group size of decode attention (ATT_WG; norm_wg unless set) */
    uint32_t block_dec; /* 1: whole-block decoders (W_DOT32/W_DEQ32) where the type has them */
    uint32_t att_tq, att_tk, att_chunk;
    /* Read by the engine (runtime/model), not by the kernels' prologues: */
    uint32_t kv_ring;    /* 1: windowed layers keep rings of their window as caches */
    uint32_t split_gate; /* 1: a layer split's next stage is enqueued ahead behind a user event */
    uint32_t moe_group;  /* MoE steps of at least this many rows run grouped by expert (0: never) */
    uint32_t moe_mms;    /* 1: the grouped MoE products on tensor cores where there are some */
    uint32_t moe_mmql;   /* 1: ... on matmul_mmql's int8 tiles (moe_group_mmql) where all three
                            stacks have them */
    uint32_t moe_fuse;   /* 1: MoE decode on 8-bit inputs in its fused launches */
    uint32_t moe_gu_wg;  /* moe_gate_up_q8's work-group (256, 512 or 1024; moe.cl's MOE_GU_WG) */
    uint32_t moe_dn_l;   /* moe_down_q8's work-items a row (0: mv_wg; moe.cl's MOE_DN_L) */
    uint32_t moe_rt_rows;    /* moe_router_q8's router rows a work-group (0: 2; moe.cl's
                                MOE_RT_ROWS) */
    uint32_t batch;          /* rows of a prefill chunk (a multiple of 32) */
    uint32_t att_split;      /* at most this many runs of keys a prefill attention launch */
    uint32_t att_chunk_deep; /* decode attention's chunk deep in the context (0: none) */
    uint32_t att_deep_from;  /* attended positions from which it is used (0: 64 chunks) */
};

/* Work-group size of quantize_x8 (q8.cl). */
#define EBB_CL_Q8_WG 256

/* mmqs_split: the most slices a product's inputs are split into, and the most tiles (token tiles
 * x row groups) a split product may have (matmul_mmql's counters, one a tile). */
#define EBB_CL_MMQS_SPLIT_MAX 8
#define EBB_CL_MMQS_TILES_MAX 4096

/* Settings of the engine that are not kernel variants: where weights go, how the engine is
 * watched. Read from the environment at each use (tests change them between calls). */
enum {
    EBB_CL_LAYOUT_AUTO = 0, /* the engine's choice */
    EBB_CL_LAYOUT_RAW,
    EBB_CL_LAYOUT_SPLIT,
    EBB_CL_LAYOUT_IMAGE, /* split, quants in an image1d_buffer */
    EBB_CL_LAYOUT_IMAGE2D,
};
struct ebb_cl_env {
    uint32_t layout;         /* EBB_CL_LAYOUT: EBB_CL_LAYOUT_* */
    uint32_t image2d_max[2]; /* EBB_CL_IMAGE2D_MAX: width, height lowering the device's (0: its) */
    uint32_t split_threads;  /* EBB_CL_SPLIT_THREADS: threads of the split rearrangement (0: the
                                cores up to 8, for large weights only) */
    uint32_t tune;           /* EBB_CL_TUNE: 1 times layouts on CPUs too */
    uint32_t profile;        /* EBB_CL_PROFILE: 0 off, 1 every launch timed, 2 device timestamps */
};

/* Tuning for a device: the knob table's defaults for its kind and vendor, the environment's
 * values over them, then what the device's limits allow (work-group sizes, local memory). Reads
 * the environment at each call; a value that is bad at that point is ignored with a note on
 * stderr (ebb_cl_open has already refused the ones set at start-up). */
struct ebb_cl_tuning ebb_cl_tuning_for(const struct ebb_cl_dev_info *di);

/* The engine's other settings (struct ebb_cl_env) from the environment, as above. */
void ebb_cl_env_get(struct ebb_cl_env *out);

/* Checks every EBB_CL_* variable of the environment against the table for device di (NULL: the
 * checks that need no device): EBB_EINVAL with "EBB_CL_NAME=value: why (accepted values)" in
 * diag for the first bad value. A name the table does not know is not an error: a note on
 * stderr names it. Called by ebb_cl_open. */
ebb_err ebb_cl_knobs_check(const struct ebb_cl_dev_info *di, struct ebb_diag *diag);

/* Prints each knob with its value for device di and where it came from (default, vendor
 * default, environment; "adjusted" where the device's limits changed it), one a line. */
void ebb_cl_knobs_print(FILE *out, const struct ebb_cl_dev_info *di);

/* Prints the table as docs/TUNING.md (Markdown). */
void ebb_cl_knobs_markdown(FILE *out);

/* Bytes of local memory matmul_mmql stages with tile (t tokens, mi 16-row groups a warp, w
 * warps, kb 32-blocks a step); matmul-mma.cl's MQL_BYTES. */
size_t ebb_cl_mmql_bytes(uint32_t t, uint32_t mi, uint32_t w, uint32_t kb);

#endif
