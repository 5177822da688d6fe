/* Private to the OpenCL forward pass (model-cl*.c): the engine's state and the functions its
 * files share. Calls go one way: model-cl.c -> model-cl-plan.c, and model-cl.c ->
 * model-cl-stream.c -> model-cl-moe-long.c -> model-cl-layer.c -> model-cl-moe.c ->
 * model-cl-moe-group.c -> model-cl-experts.c -> model-cl-xhost.c -> model-cl-place.c (a file may
 * skip levels, never go back up). */
#ifndef EBB_RUNTIME_MODEL_CL_INT_H
#define EBB_RUNTIME_MODEL_CL_INT_H

#include <pthread.h>

#include "cl/cl-layout.h"
#include "model-int.h"
#include "stream/stream-cl.h"

/* meson -Dstreamer=false builds the plain path alone (EBB_STREAMER 0): every streamer branch
 * below is then compiled out, which is the baseline the streamer's cost at 100% residency is
 * measured against (docs/PERFORMANCE.md). */
#ifndef EBB_STREAMER
#define EBB_STREAMER 1
#endif
#if EBB_STREAMER
#define STREAMING(m) ((m)->st != NULL)
#else
#define STREAMING(m) false
#endif

/* Rows of a prefill chunk (m->n_batch, the scratch's rows): the knob EBB_CL_BATCH (128 on CPU
 * devices, 512 on GPUs, where a chunk of 512 keeps the tensor cores' tiles full and reads the
 * cache a quarter as often at depth: H200, 8B shape, pp8192 11623 -> 20396 tok/s, pp512 after
 * 16384 tokens 4513 -> 11728; docs/PERFORMANCE.md), at least N_BATCH_MIN. */
#define N_BATCH_MIN 128
/* Rows x runs of keys that a split prefill attention launch may write (m->apo): one chunk of
 * 512 in 4 runs. */
#define ATT_SPLIT_ROWS 2048
#define LONG_ROWS 2048     /* a layer-major prefill's rows by default (EBB_STREAM_LONG_ROWS) */
#define LONG_ROWS_MAX 8192 /* and at most */
/* The fewest rows a prompt runs layer-major through the expert cache in one chunk: fewer (a
 * speculative draft's verification, a short follow-up) keep the cache's lookups and hits; from
 * 64 rows of 8 experts a 128-expert layer's every expert is likely chosen anyway. */
#define MOE_LONG_MIN 64
/* Rows of the logits scratch: a batch's wanted rows go through the output head in groups of
 * one per slot, from N_OUT_ROWS up to N_OUT_MAX (clm_out_rows); logits_all too. */
#define N_OUT_ROWS 16
#define N_OUT_MAX 64
#define TOPK_MAX 64 /* as in ops.cl, and its work-group size and tile of logits */
#define TOPK_WG 256
#define TOPK_TILE 1024      /* logits a first-pass work-group takes (TOPK_WG x TOPK_E) */
#define TOPK_PARTS_MAX 1024 /* first-pass work-groups a row may have (TOPK_OWN x TOPK_WG) */
#define MAX_PROGS 8
#define MAX_TYPES 40
#define REPLAN_TOKENS 64 /* the streamer re-plans (reading the probes) this often */

#define MAX_GROUPS 8 /* weight groups per layer */
#define GROUP_MAX 3  /* weights per group */
#define MAX_NORMS 8  /* norm vectors per layer */
#define MAX_STEPS 16 /* steps per layer */

/* The family's description compiled for this engine (model-cl-plan.c): the layer program as a
 * short list of fused steps, the same for every layer, and the tensors they read. */
enum clm_buf {
    CLM_X,   /* m->x (n_batch, n_embd): the residual stream */
    CLM_QKV, /* m->qkv (n_batch, n_q + 2 n_kv): q | k | v */
    CLM_ATT, /* m->att (n_batch, n_q) */
    CLM_GU,  /* m->gu (n_batch, 2 n_ff): gate | up */
};

enum clm_step_kind {
    CLM_PROJ,      /* out (+)= group @ in: decode folds the norm or the SwiGLU into the product,
                      prefill runs them as kernels of their own first */
    CLM_ATTN,      /* rope_kv (rotates q and k in CLM_QKV, stores k and v) and attention into
                      CLM_ATT */
    CLM_BIAS,      /* the layer's bias (n_q + 2 n_kv, plan.bias) added to every row of CLM_QKV */
    CLM_HEAD_NORM, /* RMS norm of each q and k head in CLM_QKV (plan.qk_norm) */
    CLM_MOE,       /* X += the experts' block of rmsnorm(X) (model-cl-moe.c): router, gate,
                      up and down stacks in groups group .. group + 3, one weight each */
};

/* A gated product's activation, as the kernels take it (act.cl). */
enum clm_glu { CLM_GLU_NONE, CLM_GLU_SILU, CLM_GLU_GELU };

struct clm_step {
    uint8_t kind;    /* enum clm_step_kind */
    uint8_t in, out; /* enum clm_buf */
    uint8_t group;   /* CLM_PROJ: index into plan.groups and layer.w */
    int8_t norm;     /* CLM_PROJ: RMS norm of in first (index into plan.norms), or -1 */
    uint8_t post;    /* CLM_PROJ with res: 1 + the index into plan.norms of an RMS norm of the
                        product before it is added to out, 0 none (Gemma's post-block norms) */
    uint8_t glu;     /* CLM_PROJ: enum clm_glu; in is gate | up, act(gate) * up first */
    bool res;        /* CLM_PROJ: the product is added to out (the residual) */
    bool neox;       /* CLM_ATTN: rope on split halves */
};

/* model-cl-moe.c's kernels (one program per expert-stack layout) and scratch. */
struct clm_moe_prog {
    struct ebb_cl_layout layout;
    cl_program prog;
    cl_kernel gather, down;
    cl_kernel gather2;              /* raw layouts: the gate and up stacks in one launch */
    cl_kernel gather_q8, down_q8;   /* decode on 8-bit inputs, where the layout has kq8 */
    cl_kernel gate_up_q8;           /* ... gate and up stacks, SwiGLU and its quantization */
    cl_kernel router_q8;            /* ... an f32 router's product and the experts' input */
    cl_kernel group_gu, group_down; /* prefill grouped by expert (model-cl-moe-group.c) */
};

/* model-cl-moe-group.c's scratch: the pairs sorted by expert and their tiles, on both sides. */
struct clm_moe_group {
    bool init;
    uint32_t min_rows; /* chunks of at least this many rows are grouped (0: never) */
    bool no_mms;       /* EBB_CL_MOE_MMS=0: the plain grouped kernels even where
                          moe_group_mms exists */
    struct {           /* ebb_cl_moe_mms_build's programs, one per expert layout, on first use */
        struct ebb_cl_layout l;
        struct ebb_cl_wprog p;
    } mms[3];
    uint32_t n_mms;
    bool no_mmql; /* EBB_CL_MOE_MMQL=0: never moe_group_mmql */
    struct {      /* ebb_cl_moe_mmql_build's kernels, one per expert layout, on first use */
        struct ebb_cl_layout l;
        struct ebb_cl_moe_mmql k;
    } mq[3];
    uint32_t n_mq;
    cl_mem xq, xh, pq, ph; /* moe_group_mmql's int8 inputs: the rows' (xq_rows of n_embd) and
                              the pairs' (xq_rows k of n_ff_exp), with their (d, d s) */
    size_t xq_rows;
    cl_kernel sum; /* moe_group_sum */
    cl_mem perm, tiles, yp;
    int32_t *h_ids, *h_perm, *h_tiles;
    uint32_t *h_cnt, n_cnt;
};

/* The buffers of grouped expert products (moe_group_gu, moe_group_down): the pairs' inputs
 * (h, rows of n_embd), their gate and up outputs (gu, rows of 2 k n_ff_exp, moe_gather's
 * places), their down outputs (yp, one row of n_embd per pair), the sorted pair indices
 * (perm) and the tiles (int4: expert or slot, first index into perm, count). */
struct clm_moe_gbufs {
    cl_mem h, gu, yp, perm, tiles;
};

/* model-cl-moe-long.c: a long prompt's MoE layers through the expert cache, layer-major
 * (docs/STREAMER.md, "Long prompts through the expert cache"). Allocated at load for xl_rows
 * rows when the cache is on and the grouped products apply to whole chunks. */
struct clm_moe_long {
    bool on;
    uint32_t step;           /* the layer program's CLM_MOE step */
    struct clm_moe_gbufs b;  /* h (xl_rows, n_embd), gu (xl_rows, 2 k n_ff_exp), yp (xl_rows k,
                                n_embd), perm (xl_rows k) int, tiles (xl_rows k) int4 */
    cl_mem ids, w;           /* (xl_rows, k) the chosen experts and their weights, every chunk */
    int32_t *h_ids, *h_perm; /* (xl_rows k) read back / sorted pair indices */
    int32_t *h_tiles;        /* (xl_rows k, 4) every group's tiles, group after group */
    uint32_t *h_cnt;         /* (n_expert + 1) counting sort, then each group's first tile */
};

struct clm_moe {
    struct clm_moe_prog progs[4];
    uint32_t n_progs;
    cl_kernel route;         /* moe_route, from progs[0] */
    cl_mem scores;           /* (n_batch, n_expert) router scores */
    cl_mem ids, w;           /* (n_batch, n_expert_used) the chosen experts (int) and weights */
    cl_mem gu;               /* (n_batch, 2 n_expert_used n_ff_exp) their gate outputs, then up */
    cl_mem gq, gd;           /* (n_expert_used n_ff_exp) int8 SwiGLU outputs of one token, and their
                                (d, d * sum) per 32 (moe_gate_up_q8, for moe_down_q8) */
    struct clm_moe_prog *q8; /* the stacks' program where ebb__clm_moe_prepare found the 8-bit
                                path, else NULL */
    bool xq_ready;           /* the router's launch left the experts' input in m->xq / m->xd */
    bool fuse;               /* EBB_CL_MOEFUSE (default 1): the fused decode launches */
    struct clm_moe_group grp;
};

/* Tensors stacked along their outputs into one buffer (q|k|v, gate|up), fused on placement
 * when they can be. */
struct clm_group {
    int16_t t[GROUP_MAX]; /* the family's tensor indices */
    uint32_t n;
};

struct clm_plan {
    struct clm_step steps[MAX_STEPS];
    uint32_t n_steps;
    struct clm_group groups[MAX_GROUPS];
    uint32_t n_groups;
    int16_t norms[MAX_NORMS]; /* per-layer (n_embd) norm vectors */
    uint32_t n_norms;
    int16_t embd;     /* the input's get_rows tensor */
    bool embd_scale;  /* input: times sqrt(n_embd) */
    int16_t out_norm; /* output: the final norm's vector */
    int16_t output;   /* output: the head's matrix */
    bool has_bias;    /* a CLM_BIAS step: its tensors (q, k, v; optional ones absent: zeros) */
    int16_t bias[3];
    bool has_qk_norm; /* a CLM_HEAD_NORM step: its (head_dim) q and k norm tensors */
    int16_t qk_norm[2];
};

struct layer {
    cl_mem norm[MAX_NORMS];                        /* (n_embd) f32, plan.norms */
    struct ebb_cl_weight w[MAX_GROUPS][GROUP_MAX]; /* group g fused into w[g][0], or one each */
    uint32_t n_w[MAX_GROUPS];
    cl_mem kc, vc;   /* (n_seq, n_head_kv, kv_len, head_dim) halves, or with kv_type q8_0
                        (.., kv_len, head_dim / 32) Q8_0 blocks of 34 bytes */
    uint32_t win;    /* sliding window (positions attended), 0: the whole context */
    uint32_t kv_len; /* positions the cache holds per slot and head: n_ctx, or a windowed
                        layer's ring (position p at p % kv_len) */
    cl_mem bias;     /* (n_q + 2 n_kv) f32 with plan.has_bias */
    cl_mem qn, kn;   /* (head_dim) f32 with plan.has_qk_norm */
};

/* The rows of the chunk being evaluated (at most n_batch), as consecutive parts: part i is
 * rows r0..r0+n-1 of the scratch buffers, tokens of KV slot seq at positions pos..pos+n-1.
 * Single-slot evaluation is one part at row 0. With more than one part, m->rt holds each
 * row's (slot, position) and m->dr the decode rows (parts of one row), written once per
 * chunk. */
struct clm_part {
    uint32_t seq;
    int r0, n, pos;
    uint32_t src, off; /* batched: the request part (ebb_model_seq) and the first of its rows */
};

struct clm_rows {
    int nt; /* rows in all */
    uint32_t n_parts;
    const struct clm_part *parts;
    int n_dec; /* batched (n_parts > 1): parts of one row, listed in m->dr */
};

/* One-token decode attention's kernels from a build of the ops program of its own (a tuning
 * that differs from the engine's in its chunk or its query heads a work-group); the rope and
 * q8 reductions only where the engine's own build has them. */
struct clm_att_set {
    cl_program ops; /* NULL: not built */
    cl_kernel part, rope, red, red_q8, rope_q8;
};

struct clm {
    const struct ebb__arch *a;
    struct clm_plan plan;
    struct ebb__hparams hp;
    struct ebb_cl *cl;
    struct ebb_cl_tuning tu;
    uint32_t n_batch; /* rows of a prefill chunk (the scratch's rows; the knob EBB_CL_BATCH) */
    uint32_t att_split_max; /* runs of keys a prefill attention launch may take (1: whole) */
    /* Decode attention deep in the context: chunks of att_chunk_deep positions (0: none) from
     * att_deep_from attended positions on, with kernels of their own (att_deep, a second build
     * of the ops program); fewer, longer work-groups there. Shallow in it (fewer than
     * tu.att_gqa_from attended positions, where tu.att_g > 1), one-token decode takes one query
     * head a work-group (att_shallow, a third build), so that a model with few KV heads runs
     * more work-groups than it has KV heads. */
    uint32_t att_chunk_deep, att_deep_from;
    struct clm_att_set att_deep, att_shallow;
    uint32_t n_ctx, n_seq, n_q, n_kv, n_qkv; /* n_q/n_kv: floats per token of Q and of K */
    enum ebb_kv_type kv_type; /* the caches' element type (tu.kv_q8 for Q8_0 blocks) */
    struct ebb_cl_hostmap map;
    struct ebb_cl_layout layout[MAX_TYPES]; /* per ggml type, once chosen */
    bool have_layout[MAX_TYPES];
    uint16_t paths[MAX_TYPES];      /* per ggml type: 1 << enum clm_path for each kind of product of
                                       several rows that ran (ebb__clm_kernels) */
    uint16_t kept_paths[MAX_TYPES]; /* the same for CLM_P_K4.. CLM_P_K8B on rewrites kept at
                                       load (KSPLIT_KEEP) */
    struct ebb_cl_wprog progs[MAX_PROGS];
    uint32_t n_progs;
    cl_program ops;
    cl_kernel k_norm, k_rope, k_attn_part, k_attn_red, k_attn_pre, k_swiglu, k_topk1, k_topk2;
    cl_kernel k_geglu, k_norm_add; /* GeGLU, the post-block norm's residual add (gemma3) */
    cl_kernel k_q8;                /* quantize_x8, with tu.mv_q8 */
    cl_kernel k_q8r;               /* quantize_x8_rows, with tu.mv_q8 and tu.q8r_max > 1 */
    cl_kernel k_attn_red_q8;       /* attn_decode_reduce_q8, with tu.mv_q8 */
    cl_kernel k_attn_rope;         /* attn_decode_rope, with tu.att_rope */
    cl_kernel k_attn_rope_q8;      /* attn_decode_rope_q8, with tu.att_fold, k_attn_rope and
                                      k_attn_red_q8 where the ops program has it */
    cl_kernel k_attn_pre_mma;      /* attn_prefill_mma, with tu.att_mma on PTX devices */
    cl_kernel k_attn_merge;        /* attn_prefill_merge, with k_attn_pre_mma */
    bool hn_fold;                  /* decode: the head_norm step left its work to the next
                                      attention (attn_decode_rope) */
    bool att_q8;                   /* decode: the attention output waits in xq / xd (attend
                                      fused its quantization), not in att */
    cl_kernel k_bias, k_head_norm; /* add_bias, head_norm (qwen2's biases, qwen3's q/k norms) */
    cl_kernel k_rope_rows, k_attn_rows, k_attn_red_rows; /* batched: per-row slot and position */
    struct ebb_cl_weight embd, output; /* (n_vocab, n_embd); output unused when tied */
    bool tied;                         /* the head reads embd */
    float embd_scale;                  /* get_rows' factor (1 or sqrt(n_embd)) */
    cl_mem rope_ff;     /* (n_rot / 2) rope frequency divisors (Llama 3.1's scaling), or NULL */
    cl_mem output_norm; /* (n_embd) f32 */
    struct layer *layers;
    bool kv_ring; /* windowed layers keep a ring of their window's positions (kv_layout) */
    /* With a ring (model-cl.c, "Rings"): every slot's evaluated token ids (n_seq, n_ctx), and
     * per slot one past the highest position written since its last evaluation from 0. */
    int32_t *ring_toks;
    uint32_t *ring_top;
    uint32_t ring_len, ring_win; /* the rings' positions and the window they serve */
    /* Prompt-cache store (model-cl.c, clm_kv_store_new): (n_layer, 2, n_head_kv, pc_len,
     * head_dim) halves, K then V of each layer; pc_len 0: none. */
    cl_mem pc;
    uint32_t pc_len;
    /* Scratch, allocated once. */
    cl_mem ids;                /* (n_batch) int */
    cl_mem x, h;               /* (n_batch, n_embd) residual stream and normed copy */
    cl_mem qkv;                /* (n_batch, n_qkv) */
    cl_mem att;                /* (n_batch, n_q) */
    cl_mem gu, ff;             /* (n_batch, 2 n_ff), (n_batch, n_ff) */
    cl_mem hl;                 /* (N_OUT_ROWS, n_embd) normed rows whose logits are wanted */
    cl_mem logits;             /* (N_OUT_ROWS, n_vocab) */
    cl_mem apo, apml;          /* with k_attn_pre_mma: runs of keys' partials, (ATT_SPLIT_ROWS,
                                  n_head, head_dim) and (ATT_SPLIT_ROWS, n_head) float2 */
    cl_mem po, pml;            /* (n_dec_max, n_head, max_chunks, head_dim), (n_dec_max, n_head,
                                  max_chunks) float2 */
    cl_mem tpv, tpi, tov, toi; /* top-k partials (N_OUT_ROWS, topk_parts * TOPK_MAX) and
                                  results (N_OUT_ROWS, TOPK_MAX) */
    int topk_parts;            /* first-pass work-groups a row, 0: no device top-k */
    cl_mem xq, xd;             /* with tu.mv_q8: a decode product's input as int8 (widest
                                  n_in) and its per-32 (d, d * sum) float2 */
    cl_mem mq_x, mq_h;         /* with tu.mmq: matmul_mmq's inputs, n_batch rows of the widest
                                  n_in as int8 and a float2 (d, d * sum) per 32 */
    uint32_t mq_wide;          /* that widest n_in */
    cl_mem mq_x2, mq_h2;       /* with tu.mmq_res (n_embd within it): MMQ_RES's second pass,
                                  n_batch rows of mq_wide2 as mq_x and mq_h hold theirs */
    uint32_t mq_wide2;         /* their width: the wider of n_embd and the attention's n_q */
    cl_mem att_cnt;            /* with k_attn_rope_q8: a count a head group (n_head ints, zero
                                  between launches) */
    cl_mem mq_part, mq_cnt;    /* with tu.mmqs_split: the slices' sums (mq_part_n floats) and a
                                  count a tile (EBB_CL_MMQS_TILES_MAX ints, zero between
                                  products) for matmul_mmql's split products */
    size_t mq_part_n;
    cl_mem k4_a, k4_b; /* with tu.k4split: a raw Q4_K weight rewritten for prefill as split
                          Q4_1 planes (16 quant bytes and a float2 (d, m) a block), for
                          the largest such weight of k4_blocks 32-blocks */
    uint64_t k4_blocks;
    struct ebb_cl_wprog *k4_prog; /* with k4_a (released when every rewrite is kept): the
                                     split Q4_1 program that multiplies them */
    cl_mem k8; /* with tu.k8split: a raw Q6_K / Q5_K weight as k8_split writes it (32 bytes
                  and a float2 a block), for the largest such layer weight of
                  k8_blocks 32-blocks */
    uint64_t k8_blocks;
    bool k8_on;                 /* k8 was allocated at load (K8SPLIT's rewrites may run; with every
                                   rewrite kept, KSPLIT_KEEP, k8 is released and k8_blocks 0) */
    uint64_t kept_bytes;        /* KSPLIT_KEEP: device bytes of the rewrites kept beside the layers'
                                   weights (ebb_cl_weight ka, kb) */
    bool mq_ready;              /* mmq_fold quantized the next group's input already */
    bool mq_group, mq_held;     /* in wmul_group (one input for all products); mq_x and mq_h
                                   hold that input quantized */
    bool mq_res;                /* the next products run MMQ_RES's two passes (proj_inner) */
    cl_mem rt, dr;              /* batched: (n_batch) int2 (KV slot, position) per row, (n_dec_max)
                                   int decode rows */
    uint32_t max_chunks;        /* decode attention chunks of a full context */
    uint32_t n_dec_max;         /* decode rows a chunk can hold (min(n_seq, n_batch)); po and pml
                                   hold this many rows' partials */
    int32_t *host_ti;           /* (N_OUT_ROWS, TOPK_MAX) batched: top-k ids read back */
    float *host_tv;             /* (N_OUT_ROWS, TOPK_MAX) and their logits */
    int32_t *host_ids;          /* (n_batch) batched: the chunk's token ids */
    int32_t *host_rt, *host_dr; /* (2 n_batch), (n_batch): what rt and dr receive */
    struct clm_part *bparts;    /* (n_seq) the chunk's parts */
    float *host_logits;         /* (n_vocab) for host top-k beyond TOPK_MAX */
    float *host_h;              /* (n_batch, n_embd) normed rows read back for hidden_sum */
    /* Layer streamer (docs/STREAMER.md); st is NULL on the plain path. */
    const struct ebb_gguf *g;
    struct ebb_stream *st;
    struct ebb_stream_cl *sc; /* staging, once some layer is streamed */
    struct layer *tmpl;       /* (n_layer) each layer's weights as streamed: a = NULL, off
                                 relative to the layer's first byte */
    uint32_t n_slots;
    uint32_t ring_slots; /* prefetch + 1: the fewest slots streaming works with */
    size_t max_layer;
    bool unified;
    uint64_t tokens, busy_ns, next_tick; /* cumulative, for the planner */
    uint32_t replan_tokens;              /* re-plan period (REPLAN_TOKENS) */
    pthread_mutex_t snap_mu;             /* guards snap (read by other threads) */
    bool snap_init;
    struct ebb_stream_report snap;
    /* Host layers (docs/STREAMER.md, "Host layers"): layers first_host.. run on the host. */
    struct ebb__ref_host *host;
    uint32_t first_host; /* n_layer when none */
    float *host_x;       /* (n_batch, n_embd) the residual rows while the host has them */
    /* Layer-major prefill (docs/STREAMER.md, "Long prompts"): with a streamer, prompts of more
     * than n_batch tokens go through each layer xl_rows at a time, their rows kept in xl. */
    uint32_t xl_rows; /* 0: off */
    cl_mem xl;        /* (xl_rows, n_embd) */
    uint64_t host_ns, host_steps;
    struct clm_moe moe;      /* families with a moe op */
    struct clm_xc *xc;       /* the expert cache (model-cl-experts.c), or NULL */
    struct clm_moe_long ml;  /* with it: long prompts layer-major through it (xl_rows, xl) */
    uint32_t xc_g0;          /* with it: the gate stack's group (placement skips it and the next
                                two); 0 without */
    uint64_t xc_token_bytes; /* with it: the cached experts a decoded token reads */
    /* Layer split (model-cl-split.c; docs/SCALING.md, "Layer split"): this engine is a stage
     * that runs decoder layers l0..l1-1 on its device (0..n_layer: the whole model). Stage 0
     * (the backend's context) embeds the tokens and owns the chain; next is the stage after this
     * one, NULL for the last, which holds the final norm and the output head. The residual rows
     * cross to next through hand, a pinned host buffer (CL_MEM_ALLOC_HOST_PTR) of this stage's
     * context mapped at hand_p: one read from this device, one write to the next, per chunk. */
    uint32_t l0, l1;
    struct clm *next;
    cl_mem hand;        /* (n_batch, n_embd) f32, with next */
    float *hand_p;      /* hand mapped */
    cl_event hand_ev;   /* the last write out of hand_p, waited for before hand_p is refilled */
    cl_event hand_rd;   /* the pending read into hand_p (ebb__clm_split_send .. _gates) */
    cl_event hand_gate; /* the user event holding next's write until that read is done */
    uint64_t hand_n;    /* handoffs, for the counters */
    struct ebb__backend_i iface;
    char name[640]; /* "opencl (device name[, 8-bit decode inputs[, qin][, integer dot
                       product builtins]][, f16 tensor-core prefill])" */
};

/* model-cl-split.c (docs/SCALING.md, "Layer split") */
#define SPLIT_MAX 16 /* devices one model's layers spread over */
/* With p->device naming several devices and a layer split asked (or auto): opens each device
 * into cls[0..*n) and chooses the layer ranges, bounds[i]..bounds[i+1] for device i (each at
 * least one layer), in proportion to p->tensor_split or else each device's free memory as the
 * memory probes read it. *n stays 0 (nothing opened) when p->device names one device; a list
 * that resolves to one device ("all" with one) gives it alone, *n 1, the whole model. Errors
 * name the device or the setting; on error nothing stays open. */
ebb_err ebb__clm_split_open(const struct ebb__hparams *hp, const struct ebb_gguf *g,
                            const struct ebb_model_params *p, struct ebb_cl **cls, uint32_t *bounds,
                            uint32_t *n, struct ebb_diag *diag);
/* Allocates m's hand buffer for the rows it passes to m->next (m->n_batch rows). */
ebb_err ebb__clm_split_hand_new(struct clm *m, struct ebb_diag *diag);
/* The first nt residual rows of m->x into m->next->x through the pinned buffer, enqueued
 * without waiting: a read on m's queue after m's layers (event hand_rd), and on next's queue a
 * write held by a user event of next's context (hand_gate; events of one context cannot be
 * waited for in another's queue), so that next's layers can be enqueued behind it at once.
 * ebb__clm_split_gates then, for every stage from m on in order, waits for the read and opens
 * the gate (ok false, or a failed wait: ends the gated commands with an error instead, so that
 * no queue stays blocked). */
ebb_err ebb__clm_split_send(struct clm *m, int nt, struct ebb_diag *diag);
ebb_err ebb__clm_split_gates(struct clm *m, bool ok, struct ebb_diag *diag);
void ebb__clm_split_hand_free(struct clm *m);

/* model-cl-plan.c */
/* Compiles a's programs into plan for this engine; EBB_EUNSUPPORTED naming the first op it
 * has no kernels for. */
ebb_err ebb__clm_plan(const struct ebb__arch *a, struct clm_plan *plan, struct ebb_diag *diag);

/* model-cl-place.c */
/* A small count from the environment: def when unset, EBB_EINVAL naming it when not a number
 * within lo..hi. */
ebb_err ebb__clm_env_count(const char *name, uint32_t def, uint32_t lo, uint32_t hi, uint32_t *out,
                           struct ebb_diag *diag);
/* The rows of a layer-major prefill: EBB_STREAM_LONG_ROWS (default LONG_ROWS, at most
 * LONG_ROWS_MAX, 0: off) in whole chunks, no more than the context asks; 0 under two chunks. */
uint32_t ebb__clm_long_rows(const struct clm *m);
/* One device buffer of bytes, failing with a message that names what when it is too large. */
/* The bytes of the K-quant rewrites' scratch (K4SPLIT, K8SPLIT) for the layers' weights placed
 * or templated so far under m->tu, and (k4, k8; may be NULL) the 32-blocks of each part. */
uint64_t ebb__clm_ksplit_bytes(const struct clm *m, uint64_t *k4, uint64_t *k8);
/* Whether weight group gi of a layer is an expert stack (a CLM_MOE step's groups after its
 * router), whose products are moe.cl's, not weight products. */
bool ebb__clm_expert_group(const struct clm *m, uint32_t gi);
ebb_err ebb__clm_alloc(struct clm *m, size_t bytes, cl_mem *out, const char *what,
                       struct ebb_diag *diag);
/* The weight kernels' program for layout l (built on first use). */
ebb_err ebb__clm_prog_for(struct clm *m, const struct ebb_cl_layout *l, struct ebb_cl_wprog **out,
                          struct ebb_diag *diag);
/* Every weight, norm and KV cache at load (streamed layers: norms and KV cache only). */
ebb_err ebb__clm_place_weights(struct clm *m, const struct ebb_gguf *g, struct ebb_diag *diag);
ebb_err ebb__clm_find(const struct ebb_gguf *g, const char *name, uint64_t n_in, uint64_t n_out,
                      const struct ebb_gguf_tensor **out, struct ebb_diag *diag);
/* Places / releases the weight matrices of decoder layer l (norms and KV cache apart). */
ebb_err ebb__clm_place_layer(struct clm *m, const struct ebb_gguf *g, uint32_t l,
                             struct ebb_diag *diag);
void ebb__clm_drop_layer(struct clm *m, uint32_t l);
/* Drops a tensor's mmapped file pages from the process (madvise DONTNEED over the whole pages
 * inside it; they are clean and fault in again when read). */
void ebb__clm_drop_pages(const struct ebb_gguf_tensor *t);

/* The backend interface's decode_bytes (model.h, ebb_model_decode_bytes): the weights as
 * placed (streamed layers as their templates), the experts a token uses, fp16 KV. */
void ebb__clm_decode_bytes(void *ctx, uint32_t depth, struct ebb_model_decode_bytes *out);

/* The kernels that multiplied several rows (prefill chunks, batched steps) of the dense weights
 * (model-cl-layer.c records them; `ebb bench`'s kernels line): */
enum clm_path {
    CLM_P_MMQL,  /* matmul_mmql with the prefill tile (mmql_*, mmqk_*, mmqk5_*) */
    CLM_P_MMQLB, /* matmul_mmql with the batch tile (mmqs_*) */
    CLM_P_MMQ,   /* matmul_mmq (mmq_stage off) */
    CLM_P_Q8R,   /* matvec_q8r */
    CLM_P_MMS,   /* matmul_mms */
    CLM_P_MMP,   /* matmul_mms, the second tile */
    CLM_P_MMA,   /* matmul_mma / matmul_mmb */
    CLM_P_GEMM,  /* matmul_gemm */
    CLM_P_COOP,  /* matmul_coop */
    CLM_P_MM,    /* matmul */
    CLM_P_CPU,   /* matvec_cpu */
    CLM_P_K4,    /* k4_split, then matmul_mmql on the split Q4_1 planes (tu.k4split) */
    CLM_P_K8,    /* k8_split, then matmul_mmql with MQL_S8H on its bytes (tu.k8split) */
    CLM_P_K4B,   /* CLM_P_K4 on the batch tile (mmqs_*) */
    CLM_P_K8B,   /* CLM_P_K8 on the batch tile */
    CLM_P_N
};
/* model.h's ebb_model_kernels: "TYPE/LAYOUT: kernel [tile] [staging], ...; ..." for each weight
 * type whose products of several rows ran, on the first device. */
size_t ebb__clm_kernels(void *ctx, char *buf, size_t cap);

/* Bytes of one position of one KV head in a layer's cache: head_dim halves, or head_dim / 32
 * Q8_0 blocks (model-types.h's ebb_kv_type_bytes). */
static inline size_t ebb__clm_kv_row(const struct clm *m)
{
    return (size_t)ebb_kv_type_bytes(m->kv_type, m->hp.head_dim);
}

/* Rows of the logits scratch (hl, logits, the top-k buffers): one per slot a chunk can hold,
 * at least N_OUT_ROWS and at most N_OUT_MAX, so that a batch's step of up to N_OUT_MAX slots
 * runs its output head as one product (the int8 batch tile from tu.mmqs rows) and one wait. */
static inline uint32_t ebb__clm_out_rows(const struct clm *m)
{
    uint32_t n = m->n_seq < m->n_batch ? m->n_seq : m->n_batch;
    n = n < N_OUT_MAX ? n : N_OUT_MAX;
    return n > N_OUT_ROWS ? n : N_OUT_ROWS;
}

/* model-cl-layer.c */
/* W x for nt tokens: rows of x (stride x_ld) to rows of y (stride y_ld, from column y_off),
 * adding res when given; with nw (decode only) x is RMS-normed and scaled by nw inside. */
/* Decode with 8-bit inputs (tu.mv_q8, m->k_q8): x's first n_in values, the RMS norm (nw) and
 * SwiGLU / GeGLU (glu; x holds [gate | up]) folded, quantized once into m->xq / m->xd. */
ebb_err ebb__clm_q8_quantize(struct clm *m, cl_mem x, int n_in, cl_mem nw, int glu,
                             struct ebb_diag *diag);
ebb_err ebb__clm_wmul(struct clm *m, const struct ebb_cl_weight *w, cl_mem x, int x_ld, cl_mem y,
                      int y_ld, int y_off, cl_mem res, cl_mem nw, int nt, struct ebb_diag *diag);
/* Raw K-quant weight w rewritten by kernel kr of its program (k4_split: split Q4_1 planes a and
 * b; k8_split: a byte a weight and a float2 a block in a, b NULL), one launch. */
ebb_err ebb__clm_ksplit_write(struct clm *m, const struct ebb_cl_weight *w, cl_kernel kr, cl_mem a,
                              cl_mem b, struct ebb_diag *diag);
/* y = rmsnorm(x) * w over nt rows of n_embd. */
ebb_err ebb__clm_rmsnorm(struct clm *m, cl_mem x, cl_mem w, cl_mem y, int nt,
                         struct ebb_diag *diag);
/* One layer for the chunk's rows; m->x is updated in place. */
ebb_err ebb__clm_layer(struct clm *m, const struct layer *L, const struct clm_rows *rows,
                       struct ebb_diag *diag);
/* Steps from..to-1 of the layer program for the chunk's rows (ebb__clm_layer runs them all). */
ebb_err ebb__clm_layer_steps(struct clm *m, const struct layer *L, const struct clm_rows *rows,
                             uint32_t from, uint32_t to, struct ebb_diag *diag);
/* The first half of the CLM_MOE step s for nt > 1 rows of m->x: the norm into m->h, the
 * router's product and moe_route into m->moe.ids and m->moe.w (the experts not run). */
ebb_err ebb__clm_moe_head(struct clm *m, const struct layer *L, const struct clm_step *s, int nt,
                          struct ebb_diag *diag);
/* The same for n chunks in turn (layer-major prefill, n > 1): chunk i's rows are kept in m->xl
 * from row i * n_batch on and pass through m->x for the layer. n == 1: ebb__clm_layer. */
ebb_err ebb__clm_layer_chunks(struct clm *m, const struct layer *L, const struct clm_rows *rows,
                              uint32_t n, struct ebb_diag *diag);

/* model-cl-moe.c: a CLM_MOE step over nt rows of m->x (in place) is ebb__clm_moe_prepare
 * (the kernels and scratch, made on the first call; *scores: where the caller writes the
 * router's product of the normed rows; *q8: whether one token's experts take 8-bit inputs),
 * then ebb__clm_moe_experts: with nw NULL, m->h holds the normed rows; else (one token, *q8)
 * m->h was not written and nw is the norm's weight, folded into the experts' 8-bit inputs.
 * ebb__clm_moe_fini releases what they made (accepts an engine that never ran one). */
ebb_err ebb__clm_moe_prepare(struct clm *m, const struct layer *L, const struct clm_step *s,
                             cl_mem *scores, bool *q8, struct ebb_diag *diag);
/* The router's product of one token into the scores (after ebb__clm_moe_prepare), with nw (on
 * 8-bit inputs) of m->x with the norm folded, where an f32 router also quantizes the experts'
 * input in the same launch (moe_router_q8); EBB_EUNSUPPORTED (nothing run) elsewhere, where the
 * caller runs the ordinary product (ebb__clm_wmul) into the scores. */
ebb_err ebb__clm_moe_router(struct clm *m, const struct layer *L, const struct clm_step *s, int nt,
                            cl_mem nw, struct ebb_diag *diag);
ebb_err ebb__clm_moe_experts(struct clm *m, const struct layer *L, const struct clm_step *s, int nt,
                             cl_mem nw, struct ebb_diag *diag);
/* moe_route over nt rows of the scores into m->moe.ids and m->moe.w. */
ebb_err ebb__clm_moe_route(struct clm *m, int nt, struct ebb_diag *diag);
/* The grouped products (gate, up, down) of the three stacks ws over n_tiles tiles of b (whose
 * tiles and perm are on the device already; nt: b's rows), the same kernels as
 * ebb__clm_moe_group. */
ebb_err ebb__clm_moe_grouped(struct clm *m, const struct ebb_cl_weight *const ws[3],
                             const struct clm_moe_gbufs *b, int nt, int n_tiles,
                             struct ebb_diag *diag);
void ebb__clm_moe_fini(struct clm *m);

/* model-cl-moe-group.c: the experts' block of nt rows (m->h in, m->x updated) grouped by expert
 * (p: the three stacks' moe.cl programs):
 * ids (nt x k, -1: skipped) read back, the pairs sorted by expert on the host, each weight row
 * read once per tile of pairs. EBB_EUNSUPPORTED (nothing run) where it does not apply: fewer
 * rows than EBB_CL_MOE_GROUP (default 0: never), or shapes it does not take. */
ebb_err ebb__clm_moe_group(struct clm *m, const struct ebb_cl_weight *const ws[3],
                           struct clm_moe_prog *const p[3], cl_mem ids, int nt,
                           struct ebb_diag *diag);
/* Whether ebb__clm_moe_group takes chunks of nt rows over stacks of n_out rows per expert
 * times a whole number of experts or slots (the same rules; nothing run). */
bool ebb__clm_moe_group_applies(struct clm *m, uint32_t nt);
/* The pairs a tile of b may hold for the products of ws (*gt): matmul_mmql's tile's tokens where
 * moe_group_mmql takes all three (EBB_CL_MOE_MMQL), else moe.cl's 16; builds their kernels on
 * first use. */
ebb_err ebb__clm_moe_group_gt(struct clm *m, const struct ebb_cl_weight *const ws[3], uint32_t *gt,
                              struct ebb_diag *diag);
/* Its three products alone over n_tiles tiles of b (p: the stacks' programs; nt: b's rows). */
ebb_err ebb__clm_moe_group_launch(struct clm *m, const struct ebb_cl_weight *const ws[3],
                                  struct clm_moe_prog *const p[3], const struct clm_moe_gbufs *b,
                                  int nt, int n_tiles, struct ebb_diag *diag);
/* Its sum: x (rows of n_embd) += sum_j w[t][j] yp[t k + j] for nt rows, j in order. */
ebb_err ebb__clm_moe_group_sum(struct clm *m, cl_mem ids, cl_mem wts, cl_mem yp, cl_mem x, int nt,
                               struct ebb_diag *diag);
void ebb__clm_moe_group_fini(struct clm *m);

/* model-cl-experts.c (docs/STREAMER.md, "Experts on demand"): the expert cache, on when
 * p->expert_cache or EBB_EXPERT_CACHE asks for it (bad settings fail with a message). Opened
 * after the streamer and before the weights are placed; the placement then skips the expert
 * stacks (m->xc_g0). A layer step after moe_route: ebb__clm_xc_begin reads layer l's chosen
 * ids back for nt rows; each ebb__clm_xc_next fills the slots for the next pass and gives the
 * pool's weights and the slot table the expert kernels read in place of the ids (*ready), until
 * it returns with *ready false (the step's figures then published). */
struct clm_xc;
bool ebb__clm_xc_wanted(const struct ebb_model_params *p); /* asked for (valid or not) */
ebb_err ebb__clm_xc_open(struct clm *m, const struct ebb_gguf *g, const struct ebb_model_params *p,
                         struct ebb_diag *diag);
ebb_err ebb__clm_xc_begin(struct clm *m, uint32_t l, int nt, cl_mem norm, struct ebb_diag *diag);
ebb_err ebb__clm_xc_next(struct clm *m, const struct ebb_cl_weight *ws[3], cl_mem *sids,
                         bool *ready, struct ebb_diag *diag);
bool ebb__clm_xc_report(void *ctx, struct ebb_model_expert_cache *out);
/* Layer l's three stacks over its slot pool (gate, up, down), as ebb__clm_xc_next gives them. */
const struct ebb_cl_weight *ebb__clm_xc_stacks(struct clm *m, uint32_t l);
void ebb__clm_xc_fini(struct clm *m); /* accepts an engine without a cache */
/* model-cl-xhost.c: missed experts of one-token steps computed by the host (EBB_EXPERT_HOST=N
 * or auto; 0 or unset: off, *out NULL). Opened by ebb__clm_xc_open over its stacks' host bytes (the
 * mapped file's, or the pinned tier's where it has one; stacks: its (n_layer, 3) weights, for their
 * types). ebb__clm_xh_room: experts layer l's step of nt
 * rows may leave to the host (0 unless one row and the host has products for the layer's
 * types; with auto also 0 where the measured costs would give the host none), kept for
 * ebb__clm_xh_pick; ebb__clm_xh_read enqueues the reads of the residual row, the router's weights
 * and (once) the layer's norm vector before the ids' blocking read; ebb__clm_xh_add takes expert e
 * (position j of the row's k); ebb__clm_xh_start starts the workers on the experts' gate and up
 * rows; ebb__clm_xh_finish, after the layer's kernels were enqueued, flushes, waits for them,
 * runs the down rows on the workers and itself (*wait_ns: both), writes the sum and enqueues its
 * addition to the residual. */
struct clm_xhost;
ebb_err ebb__clm_xh_open(struct clm *m, const struct ebb_cl_weight *stacks,
                         const uint8_t *const *src, uint8_t *const *tier, const uint64_t *ebytes,
                         struct clm_xhost **out, struct ebb_diag *diag);
void ebb__clm_xh_free(struct clm_xhost *h); /* accepts NULL; waits for a job under way */
uint32_t ebb__clm_xh_room(struct clm_xhost *h, uint32_t l, int nt);
/* How many of a step's `misses` the host takes (after ebb__clm_xh_room, once a step, gave it
 * room; 0 without): the room, or with EBB_EXPERT_HOST=auto the share that evens the host's
 * measured cost of an expert against the link's (half each until both are measured; room
 * none where even k misses would leave the host none, but one step in XH_PROBE probes the host
 * with one). ebb__clm_xh_link gives it a step's copy time per expert (the copy queue's
 * profiling); ebb__clm_xh_auto: the setting is auto. */
uint32_t ebb__clm_xh_pick(struct clm_xhost *h, uint32_t misses);
void ebb__clm_xh_link(struct clm_xhost *h, uint64_t ns_per_expert);
bool ebb__clm_xh_auto(const struct clm_xhost *h);
/* The averaged costs of an expert auto weighs (host, link; 0 unmeasured or not auto). */
void ebb__clm_xh_costs(const struct clm_xhost *h, uint64_t *host_ns, uint64_t *link_ns);
ebb_err ebb__clm_xh_read(struct clm *m, struct clm_xhost *h, uint32_t l, cl_mem norm,
                         struct ebb_diag *diag);
void ebb__clm_xh_add(struct clm_xhost *h, uint32_t e, uint32_t j);
void ebb__clm_xh_start(struct clm_xhost *h, uint32_t l, const struct ebb__hparams *hp);
bool ebb__clm_xh_pending(const struct clm_xhost *h);
ebb_err ebb__clm_xh_finish(struct clm *m, struct clm_xhost *h, uint64_t *wait_ns,
                           struct ebb_diag *diag);
/* A layer-major pass of layer l (model-cl-moe-long.c): ebb__clm_xc_long_plan takes the pass's
 * n_pairs chosen ids (validated here): the distinct experts the layer's slots hold already are
 * group 0 where there are some (*kept_group; copied by no one), the others, in ascending order,
 * are cut into groups of half the slots (*halves 2; with one slot, *halves 1, a group fills it),
 * alternating between the halves; *list gives the experts in group order, *group and *slot
 * (n_expert each) each expert's group and slot, -1 for one not used; *n_groups their count.
 * ebb__clm_xc_long_copy brings group g into its slots on the copy queue, its first write after
 * `after` (or at once); ebb__clm_xc_long_wait makes the compute queue wait for those copies;
 * ebb__clm_xc_long_end, after the layer's products are done (a finish), adds the pass's figures
 * (ids_ns: the read-back; ns: the experts' phase) to the counters. */
ebb_err ebb__clm_xc_long_plan(struct clm *m, uint32_t l, const int32_t *ids, size_t n_pairs,
                              uint32_t *n_groups, uint32_t *halves, bool *kept_group,
                              const uint32_t **list, const int32_t **group, const int32_t **slot,
                              struct ebb_diag *diag);
ebb_err ebb__clm_xc_long_copy(struct clm *m, uint32_t g, cl_event after, struct ebb_diag *diag);
ebb_err ebb__clm_xc_long_wait(struct clm *m, uint32_t g, struct ebb_diag *diag);
void ebb__clm_xc_long_end(struct clm *m, bool first_layer, uint64_t ids_ns, uint64_t ns);
/* Device bytes of the layer-major buffers for rows rows (struct clm_moe_long). */
uint64_t ebb__clm_xc_long_bytes(const struct clm *m, uint32_t rows);

/* model-cl-moe-long.c */
/* At load, after the expert cache: m->xl_rows and the buffers of the layer-major pass where it
 * applies (the cache on, the grouped products taking whole chunks, EBB_STREAM_LONG_ROWS not 0). */
ebb_err ebb__clm_moe_long_open(struct clm *m, struct ebb_diag *diag);
/* Whether a layer-major pass may end with a chunk of nt rows (the grouped products take it). */
bool ebb__clm_moe_long_takes(struct clm *m, uint32_t nt);
/* Layer l for the n chunks of rows kept in m->xl (as ebb__clm_layer_chunks): the steps before
 * its CLM_MOE step chunk after chunk, routing every row; each used expert copied to the slots
 * once, double-buffered; the grouped products over all the rows; the steps after it chunk after
 * chunk. The last chunk's rows are left in m->x too. */
ebb_err ebb__clm_moe_long_layer(struct clm *m, uint32_t l, const struct clm_rows *rows, uint32_t n,
                                struct ebb_diag *diag);
void ebb__clm_moe_long_fini(struct clm *m);

/* model-cl-stream.c (docs/STREAMER.md, "In the engine") */
uint64_t ebb__clm_now_ns(void);
/* Opens the streamer when a budget or a forced residency is set (else leaves m->st NULL);
 * sets m->n_ctx to the planned context. Before the weights are placed. */
ebb_err ebb__clm_stream_open(struct clm *m, const struct ebb_gguf *g,
                             const struct ebb_model_params *p, struct ebb_diag *diag);
/* Creates and attaches the staging slots the first time some layer is streamed. */
ebb_err ebb__clm_ensure_slots(struct clm *m, struct ebb_diag *diag);
/* Between evaluations: re-plans when due and moves layers. */
ebb_err ebb__clm_stream_between(struct clm *m, struct ebb_diag *diag);
/* Host layers first_host..n_layer-1 for the chunk's rows: the residual rows read back, each
 * layer run on the host (ebb__ref_host_layer), the rows written back. */
ebb_err ebb__clm_host_layers(struct clm *m, const struct clm_rows *rows, struct ebb_diag *diag);
/* A streamed layer through the view the streamer hands over, for n chunks
 * (ebb__clm_layer_chunks). */
ebb_err ebb__clm_streamed_layer(struct clm *m, uint32_t l, const struct clm_rows *rows, uint32_t n,
                                struct ebb_diag *diag);
/* Refreshes the report snapshot other threads read. */
void ebb__clm_stream_snapshot(struct clm *m);
/* The backend interface's stream_report / stream_probe. */
bool ebb__clm_stream_report(void *ctx, struct ebb_stream_report *out);
bool ebb__clm_stream_probe(void *ctx);
void ebb__clm_stream_budget(void *ctx, uint64_t budget);
ebb_err ebb__clm_stream_settle(void *ctx, struct ebb_diag *diag);
void ebb__clm_stream_set_wake(void *ctx, void (*fn)(void *u), void *u);

#endif
