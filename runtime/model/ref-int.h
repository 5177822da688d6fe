/* Private to runtime/model: the reference backend's state (ref-llama.c), shared with its
 * matrix products (ref-matmul.c) and the ops that live in files of their own (ref-moe.c).
 * Calls go one way: ref-llama.c -> ref-moe.c -> ref-matmul.c. */
#ifndef EBB_RUNTIME_MODEL_REF_INT_H
#define EBB_RUNTIME_MODEL_REF_INT_H

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

#include "model-int.h"
#include "quant/quant.h"

#define EBB__REF_BATCH 64       /* tokens per prefill pass; longer inputs are processed in pieces */
#define EBB__REF_MAX_THREADS 64 /* threads of one matrix product (the caller and helpers) */

/* A weight matrix of n_out rows of n_in elements, as stored in the file; a 3-D tensor is a
 * stack of n_mat such matrices (experts), mat_bytes apart (ebb__ref_expert picks one). */
struct wmat {
    const uint8_t *data;
    uint32_t type;
    uint32_t n_in, n_out;
    uint64_t row_bytes;
    ebb_quant_dot_fn dot;
    uint32_t n_mat;
    uint64_t mat_bytes;
    /* Device "cpu": the first n_out / 8 * 8 rows repacked in groups of eight
     * (ebb_quant_rp8_pack, rp_bytes each) for the prefill's products, or NULL. */
    uint8_t *rp;
    uint64_t rp_bytes;
    ebb_quant_rp8_fn rp8;
};

/* Scratch of the MOE op (ref-moe.c) for up to EBB__REF_BATCH rows. */
struct ref_moe {
    float *logits;  /* (EBB__REF_BATCH, n_expert) router scores, then probabilities */
    int32_t *ids;   /* (EBB__REF_BATCH, n_expert_used) each row's experts */
    float *w;       /* (EBB__REF_BATCH, n_expert_used) and their weights */
    float *x;       /* (EBB__REF_BATCH, n_embd) the rows routed to one expert */
    float *gate;    /* (EBB__REF_BATCH, n_ff_exp) */
    float *up;      /* (EBB__REF_BATCH, n_ff_exp) */
    float *y;       /* (EBB__REF_BATCH, n_embd) one expert's outputs */
    uint32_t *rows; /* (EBB__REF_BATCH) which rows x holds */
    float *roww;    /* (EBB__REF_BATCH) and their weights for this expert */
};

/* A declared tensor as the reference holds it: matrices stay quantized in the mapping, vectors
 * (norm weights) are dequantized once. */
struct rtensor {
    struct wmat m; /* (ne1, ne0) when a matrix */
    float *v;      /* (ne0) when a vector */
    bool present;  /* false: optional, absent, no fallback (its ops are skipped) */
};

struct ref;

/* One job of the thread pool: run(r, j, i) computes part i of r->n_threads (the caller part 0,
 * helper i part i), so that the results do not depend on the thread count. A matrix product
 * splits its output rows, attention its (token, head) pairs. */
struct job {
    void (*run)(struct ref *r, const struct job *j, int part);
    /* matrix product: y (n, n_out) = x (n, n_in) @ w^T */
    const struct wmat *w;
    ebb_quant_dot_act_fn dot;   /* with xa: w's row times 8-bit activations */
    ebb_quant_dot_act4_fn dot4; /* the same for four tokens at once, or NULL */
    ebb_quant_dot_act4_fn dot8; /* for eight (32-block types), or NULL */
    ebb_quant_dot_rows4_fn r4;  /* one token, four rows at once (32-block types), or NULL */
    ebb_quant_rp8_fn rp8;       /* w's repacked groups for all tokens, or NULL */
    const int32_t *xsum;        /* (n, n_in / 32) xa's block sums, for rp8 on Q8_0 blocks */
    const void *xa;             /* x quantized (ebb_q8_act or Q8_K blocks), or NULL */
    uint64_t xa_stride;         /* bytes per token of xa */
    const float *x;             /* (n, n_in) */
    float *y;                   /* (n, n_out) */
    uint32_t n;
    bool deq; /* without xa: dequantize each row even for one token (prefill's sums) */
    /* elementwise ops split between the threads (ref-llama.c): the second input, the length */
    const float *b;
    uint64_t nd;
    /* attention: the op and its step (ref-llama.c) */
    const struct ebb__op *op;
    const void *step;
};

/* A waiter's polling record with spin_adapt (ref-matmul.c): polls that saw the event and that ran
 * out in this window, and the waits left that sleep at once. */
struct ref_spin {
    int ok, fail, off;
};

/* What a helper thread is started with: its engine and its part of each product. */
struct ref_helper {
    struct ref *r;
    int i;
};

struct ref {
    const struct ebb__arch *a;
    struct ebb__hparams hp;
    uint32_t n_ctx, n_seq;
    uint32_t l0;       /* first layer with a KV cache: 0, or a host-layer engine's first */
    struct rtensor *t; /* ((n_layer + 1) * n_tensors): globals first, then each layer's */
    /* The KV cache, (n_layer - l0, n_seq, n_ctx, n_head_kv * head_dim) elements of kv_es bytes:
     * floats, or with kv16 (llama.cpp's numerics without the Q8_0 cache, whose values are
     * rounded to fp16 anyway) the fp16 values themselves, half the bytes and the same numbers. */
    void *k_cache, *v_cache;
    void *pc_k, *pc_v; /* prompt-cache store: (n_layer, pc_len, n_head_kv * head_dim), kv_es */
    bool kv16;
    uint32_t kv_es;      /* bytes per cached element: 4, or 2 with kv16 */
    uint32_t pc_len;     /* positions the store holds, 0: none */
    float *rope_cos;     /* (n_ctx, n_rot / 2) */
    float *rope_sin;     /* (n_ctx, n_rot / 2) */
    float *rope_cos_swa; /* windowed layers with a rope base of their own: the same with it */
    float *rope_sin_swa;
    /* Activations for up to EBB__REF_BATCH tokens. */
    float *buf[EBB__N_BUF];     /* (EBB__REF_BATCH, width[b]) the description's buffers */
    uint32_t width[EBB__N_BUF]; /* ebb__arch_buf_width */
    float *att; /* (n_threads, EBB__ATT_GROUP, n_ctx) attention scores, a group of heads each */
    float *rowbuf[EBB__REF_MAX_THREADS]; /* (max n_in) one dequantized weight row per thread */
    bool q8;                             /* llama.cpp numerics (device "ref-q8") */
    bool kv_q8;      /* --kv-type q8_0: keys and values rounded through Q8_0 blocks as stored */
    bool fast;       /* host layers and device "cpu": SIMD 8-bit dots where the CPU has them */
    bool cpu;        /* device "cpu" */
    bool kq8;        /* device "cpu": K-quant weights on Q8_K activations too (ref-q8 keeps fp32) */
    float *gelu_tab; /* (EBB__GELU_TAB) device "cpu": the fp16 GELU by table, or NULL */
    struct ebb_q8_act *xact;   /* (EBB__REF_BATCH, max n_in / 32) quantized activations */
    struct ebb_block_q8_k *xk; /* (EBB__REF_BATCH, max n_in / 256) the same as Q8_K, kq8 */
    int32_t *xsum;             /* (EBB__REF_BATCH, max n_in / 32) xact's block sums, cpu */
    uint32_t rp8_min;          /* the fewest tokens a product takes the repacked rows for */
    bool repack_head;          /* device "cpu": the output head repacked too */
    struct ref_moe moe;        /* allocated when the layer has a MOE op */
    /* Host memory allocated at open (ebb_model_memory): the repacked weights, and the rest
     * (KV cache, dequantized vectors, scratch rows; the store aside). */
    uint64_t rp_total, host_bytes;
    /* Helper threads: n_threads - 1 of them; thread i computes part i of each product's output
     * rows (the caller part 0), so the results do not depend on the thread count. */
    int n_threads;
    pthread_t th[EBB__REF_MAX_THREADS];
    struct ref_helper helper[EBB__REF_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job job;           /* written before gen moves on, read after */
    _Atomic uint64_t gen;     /* bumped for each job (and at quit) */
    _Atomic int n_done;       /* helpers done with job gen */
    _Atomic int sleepers;     /* helpers waiting on cv for the next job */
    _Atomic bool main_sleeps; /* the caller waits on cv for the helpers */
    _Atomic bool quit;
    int spins; /* polls before sleeping: host engines spin between products, the backend not */
    bool spin_adapt; /* device "cpu" by default: each waiter stops polling while most polls fail */
    struct ref_spin main_spin;   /* the caller's (one thread runs the jobs) */
    char name[64];               /* device "cpu": its name with the threads and vector unit */
    struct ebb__backend_i iface; /* device "cpu": ref_iface with that name */
};

/* Dot product of n floats, eight partial sums. */
static inline float ebb__ref_dot_f32(const float *a, const float *b, uint32_t n)
{
    float acc[8] = {0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += a[i + k] * b[i + k];
    float s = 0;
    for (; i < n; i++)
        s += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s;
}

/* ref-matmul.c: y (n, n_out) = x (n, n_in) @ W^T, rows split with the helper threads, which
 * start_helper starts (n_threads in all, the caller included; n_threads 1 none; rowbuf[i] must
 * exist for each) and stop_helper joins. The reference backend asks for 2 (1 with
 * EBB_REF_THREADS=1), device "cpu" for the physical cores. */
void ebb__ref_matmul(struct ref *r, const struct wmat *w, const float *x, float *y, uint32_t n);
/* Runs j on every thread (j->run with each part) and returns when all parts are done. */
void ebb__ref_run(struct ref *r, const struct job *j);
void ebb__ref_start_helper(struct ref *r, int n_threads);
void ebb__ref_stop_helper(struct ref *r);

/* Matrix e of a stack, as a matrix of its own. */
static inline struct wmat ebb__ref_expert(const struct wmat *stack, uint32_t e)
{
    struct wmat w = *stack;
    w.data += (uint64_t)e * stack->mat_bytes;
    w.n_mat = 1;
    return w;
}

/* ref-moe.c: the MOE op over n rows of a (n, n_embd) into d (n, n_embd); t: the router and the
 * gate, up and down stacks of the layer, consecutive. The scratch is allocated with the
 * backend (alloc when the family has a MOE op; free accepts what alloc left). */
void ebb__ref_moe(struct ref *r, const struct ebb__op *op, const struct rtensor *t, const float *a,
                  float *d, uint32_t n);
ebb_err ebb__ref_moe_alloc(struct ref *r, struct ebb_diag *diag);
void ebb__ref_moe_free(struct ref *r);

/* ref-attn.c: one query head's attention, softmax(q k^T * scale) v over positions p0..n_kv-1
 * of the cache rows k and v (stride floats apart), as the reference computes it; with
 * f16_weights (ref-q8, cpu) each weight rounded to fp16 before its product with v. att holds
 * n_kv floats of scratch, out hd results. With simd, AVX2 where the CPU has it (the same bits). */
struct ebb__attn_head {
    const float *q; /* (hd) */
    const float *k; /* (n_kv, stride) the head's keys at column 0 */
    const float *v; /* (n_kv, stride) */
    /* Or, where non-NULL, the keys and values as fp16 (the same layout): converted exactly as they
     * are read, so the results are those of their float values. hd <= EBB__ATT_MAX_HD. */
    const uint16_t *k16, *v16;
    uint64_t stride;
    uint32_t hd, p0, n_kv;
    float scale;
    bool f16_weights;
};
void ebb__ref_attn_head(const struct ebb__attn_head *a, bool simd, float *att, float *out);
/* The query heads ebb__ref_attn_heads takes together at most (its AVX2 kernels' sums in
 * registers; more are taken in groups of this many). */
enum { EBB__ATT_GROUP = 4 };
/* ebb__ref_attn_head for g query heads that read the same keys and values: head h's query at
 * a->q + h * hd, its scores at att + h * ld (ld >= n_kv), its output at out + h * hd; the same
 * bits as g calls of ebb__ref_attn_head, each key and value read once for up to EBB__ATT_GROUP
 * heads with simd (AVX2 and F16C). */
void ebb__ref_attn_heads(const struct ebb__attn_head *a, uint32_t g, bool simd, float *att,
                         uint64_t ld, float *out);
/* dst[i] = src[i] rounded to fp16 (the rounding of ebb__ref_f16_round), i < n; with simd through
 * F16C where the CPU has it. */
void ebb__ref_f16_store(uint16_t *dst, const float *src, uint64_t n, bool simd);
/* dst[i] = src[i] rounded to fp16 and back, i < n (dst may be src); with simd through F16C
 * where the CPU has it (the same values). */
void ebb__ref_f16_round(float *dst, const float *src, uint64_t n, bool simd);
/* Whether ebb__ref_attn_head's simd path runs on this CPU (AVX2 and F16C). */
bool ebb__ref_attn_simd(void);
/* The GELU of every fp16 input h, rounded to fp16, into tab[0..65535] (EBB__GELU_TAB floats),
 * and the lookup: 0 at or below -10, x at or above 10, else tab of x rounded to fp16. The same
 * values as computing the rounded GELU of the rounded input each time (llama.cpp's table). */
#define EBB__GELU_TAB 65536
void ebb__ref_gelu_table(float *tab);
float ebb__ref_gelu_f16(const float *tab, float x);
/* d[i] = ebb__ref_gelu_f16(tab, a[i]) * b[i], i < n; with simd through F16C and a gather where
 * the CPU has AVX2 (the same values for every input but NaN payloads). */
void ebb__ref_gelu_glu(const float *tab, const float *a, const float *b, float *d, uint64_t n,
                       bool simd);

static inline float ebb__ref_silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* GELU, tanh approximation (Gemma's gate). */
static inline float ebb__ref_gelu(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

#endif
