/* Private to runtime/model: the reference backend's state (ref-llama.c), shared with its
 * matrix products (ref-matmul.c) and the ops that live in files of their own (ref-moe.c).
 * Calls go one way: ref-llama.c -> ref-moe.c -> ref-matmul.c. */
#ifndef EBB_RUNTIME_MODEL_REF_INT_H
#define EBB_RUNTIME_MODEL_REF_INT_H

#include <math.h>
#include <pthread.h>

#include "model-int.h"
#include "quant/quant.h"

#define EBB__REF_BATCH 64 /* tokens per prefill pass; longer inputs are processed in pieces */

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

/* One matrix product job, split by output rows between the caller and the helper thread. */
struct job {
    const struct wmat *w;
    const float *x;                /* (n, n_in) */
    const struct ebb_q8_act *xact; /* (n, n_in / 32) x quantized, or NULL */
    float *y;                      /* (n, n_out) */
    uint32_t n;
};

struct ref {
    const struct ebb__arch *a;
    struct ebb__hparams hp;
    uint32_t n_ctx, n_seq;
    struct rtensor *t;   /* ((n_layer + 1) * n_tensors): globals first, then each layer's */
    float *k_cache;      /* (n_layer, n_seq, n_ctx, n_head_kv * head_dim) */
    float *v_cache;      /* (n_layer, n_seq, n_ctx, n_head_kv * head_dim) */
    float *pc_k, *pc_v;  /* prompt-cache store: (n_layer, pc_len, n_head_kv * head_dim) */
    uint32_t pc_len;     /* positions the store holds, 0: none */
    float *rope_cos;     /* (n_ctx, n_rot / 2) */
    float *rope_sin;     /* (n_ctx, n_rot / 2) */
    float *rope_cos_swa; /* windowed layers with a rope base of their own: the same with it */
    float *rope_sin_swa;
    /* Activations for up to EBB__REF_BATCH tokens. */
    float *buf[EBB__N_BUF];     /* (EBB__REF_BATCH, width[b]) the description's buffers */
    uint32_t width[EBB__N_BUF]; /* ebb__arch_buf_width */
    float *att;                 /* (n_ctx) attention scores of one head */
    float *rowbuf[2];           /* (max n_in) one dequantized weight row per thread */
    bool q8;                    /* llama.cpp numerics (device "ref-q8") */
    struct ebb_q8_act *xact;    /* (EBB__REF_BATCH, max n_in / 32) quantized activations */
    struct ref_moe moe;         /* allocated when the layer has a MOE op */
    /* Helper thread. */
    int n_threads;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job job;
    uint64_t gen, done;
    bool quit;
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

/* ref-matmul.c: y (n, n_out) = x (n, n_in) @ W^T, rows split with the helper thread, which
 * start_helper starts (unless EBB_REF_THREADS=1) and stop_helper joins. */
void ebb__ref_matmul(struct ref *r, const struct wmat *w, const float *x, float *y, uint32_t n);
void ebb__ref_start_helper(struct ref *r);
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
