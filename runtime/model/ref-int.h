/* Private to runtime/model: the reference backend's state (ref-llama.c), shared with the ops
 * that live in files of their own (ref-moe.c). */
#ifndef EBB_RUNTIME_MODEL_REF_INT_H
#define EBB_RUNTIME_MODEL_REF_INT_H

#include <math.h>
#include <pthread.h>

#include "model-int.h"
#include "quant/quant.h"

#define EBB__REF_BATCH 64 /* tokens per prefill pass; longer inputs are processed in pieces */

/* A weight matrix of n_out rows of n_in elements, as stored in the file. */
struct wmat {
    const uint8_t *data;
    uint32_t type;
    uint32_t n_in, n_out;
    uint64_t row_bytes;
    ebb_quant_dot_fn dot;
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
    /* Helper thread. */
    int n_threads;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job job;
    uint64_t gen, done;
    bool quit;
};

/* y (n, n_out) = x (n, n_in) @ W^T, rows split with the helper thread. */
void ebb__ref_matmul(struct ref *r, const struct wmat *w, const float *x, float *y, uint32_t n);

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
