/* The reference forward pass of the llama family in plain C, the yardstick the OpenCL engine is
 * tested against. Read it top to bottom like llama2.c: per layer RMSNorm, Q/K/V projections,
 * RoPE, grouped-query attention over the KV cache, output projection and residual, RMSNorm,
 * SwiGLU feed-forward and residual; then the final norm and the output head. Gemma 3 adds, on
 * the same skeleton: embeddings scaled by sqrt(n_embd), an RMS norm of each q and k head, norms
 * of the attention and feed-forward outputs before their residual adds, GELU (tanh) instead of
 * SiLU in the gate, and local layers that attend to the last `swa` positions only, with a rope
 * base of their own.
 *
 * Weights stay in the mmapped file in their quantized form; matrix-vector products go through
 * runtime/quant's row dot products (decode) or dequantize each weight row once and multiply it
 * with every token of the batch (prefill). Activations are fp32. Everything is allocated in
 * ebb__ref_backend_new: buffers for up to BATCH tokens at a time and the KV cache for
 * n_ctx x n_seq. Output rows are split between up to two threads (EBB_REF_THREADS=1 turns the
 * helper thread off).
 *
 * Device "ref-q8" switches on llama.cpp's CPU numerics, to tell its rounding apart from real
 * differences: activations are quantized to Q8 before each quantized matrix product, the KV
 * cache holds fp16 values, and the query and the attention weights are rounded to fp16 before
 * their products with K and V (llama.cpp's defaults without flash attention). */
#include "model-int.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

#define BATCH 64 /* tokens per prefill pass; longer inputs are processed in pieces */

/* A weight matrix of n_out rows of n_in elements, as stored in the file. */
struct wmat {
    const uint8_t *data;
    uint32_t type;
    uint32_t n_in, n_out;
    uint64_t row_bytes;
    ebb_quant_dot_fn dot;
};

struct layer {
    float *attn_norm; /* (n_embd) */
    struct wmat wq;   /* (n_head * head_dim, n_embd) */
    struct wmat wk;   /* (n_head_kv * head_dim, n_embd) */
    struct wmat wv;   /* (n_head_kv * head_dim, n_embd) */
    struct wmat wo;   /* (n_embd, n_head * head_dim) */
    float *ffn_norm;  /* (n_embd) */
    struct wmat gate; /* (n_ff, n_embd) */
    struct wmat up;   /* (n_ff, n_embd) */
    struct wmat down; /* (n_embd, n_ff) */
    /* Gemma 3 only (NULL otherwise). */
    float *q_norm, *k_norm; /* (head_dim) */
    float *post_attn_norm;  /* (n_embd) */
    float *post_ffn_norm;   /* (n_embd) */
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
    struct ebb__hparams hp;
    uint32_t n_ctx, n_seq;
    struct wmat tok_embd; /* (n_vocab, n_embd) */
    struct wmat output;   /* (n_vocab, n_embd), token_embd when tied */
    float *out_norm;      /* (n_embd) */
    struct layer *layers; /* (n_layer) */
    float *k_cache;       /* (n_layer, n_seq, n_ctx, n_head_kv * head_dim) */
    float *v_cache;       /* (n_layer, n_seq, n_ctx, n_head_kv * head_dim) */
    float *rope_cos;      /* (n_ctx, n_rot / 2) */
    float *rope_sin;      /* (n_ctx, n_rot / 2) */
    float *rope_cos_swa;  /* Gemma 3's local layers: the same with rope_base_swa */
    float *rope_sin_swa;
    /* Activations for up to BATCH tokens. */
    float *x;         /* (BATCH, n_embd) residual stream */
    float *xb;        /* (BATCH, max(n_embd, n_head * head_dim)) normed input / attention out */
    float *q;         /* (BATCH, n_head * head_dim) */
    float *k;         /* (BATCH, n_head_kv * head_dim) */
    float *v;         /* (BATCH, n_head_kv * head_dim) */
    float *hb;        /* (BATCH, n_ff) gate, then the SwiGLU product */
    float *hb2;       /* (BATCH, n_ff) up */
    float *att;       /* (n_ctx) attention scores of one head */
    float *logits;    /* (BATCH, n_vocab) */
    float *rowbuf[2]; /* (max n_in) one dequantized weight row per thread */
    bool q8;          /* llama.cpp numerics (device "ref-q8") */
    struct ebb_q8_act *xact; /* (BATCH, max n_in / 32) quantized activations */
    /* Helper thread. */
    int n_threads;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job job;
    uint64_t gen, done;
    bool quit;
};

/* ---- matrix products ---- */

static float dot_f32(const float *a, const float *b, uint32_t n)
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

/* y[t][o] = W[o] . x[t] for rows o in [o0, o1). One token: the quantized dot directly. More:
 * dequantize each row once and reuse it for every token. */
static void matmul_rows(const struct job *j, float *rowbuf, uint32_t o0, uint32_t o1)
{
    const struct wmat *w = j->w;
    for (uint32_t o = o0; o < o1; o++) {
        const uint8_t *row = w->data + (uint64_t)o * w->row_bytes;
        if (j->xact) {
            for (uint32_t t = 0; t < j->n; t++)
                j->y[(uint64_t)t * w->n_out + o] = ebb_quant_dot_q8_act(
                    w->type, row, j->xact + (uint64_t)t * (w->n_in / 32), w->n_in);
            continue;
        }
        if (j->n == 1) {
            j->y[o] = w->dot(row, j->x, w->n_in);
            continue;
        }
        ebb_quant_dequantize_row(w->type, row, rowbuf, w->n_in);
        for (uint32_t t = 0; t < j->n; t++)
            j->y[(uint64_t)t * w->n_out + o] =
                dot_f32(rowbuf, j->x + (uint64_t)t * w->n_in, w->n_in);
    }
}

static void *helper_main(void *arg)
{
    struct ref *r = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->gen == seen && !r->quit)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->quit)
            break;
        seen = r->gen;
        struct job j = r->job;
        pthread_mutex_unlock(&r->mu);
        uint32_t mid = j.w->n_out / 2;
        matmul_rows(&j, r->rowbuf[1], mid, j.w->n_out);
        pthread_mutex_lock(&r->mu);
        r->done = seen;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* y (n, n_out) = x (n, n_in) @ W^T. */
static void matmul(struct ref *r, const struct wmat *w, const float *x, float *y, uint32_t n)
{
    struct job j = {w, x, NULL, y, n};
    if (r->q8 && ebb_quant_q8_act_supported(w->type)) {
        for (uint32_t t = 0; t < n; t++)
            ebb_quant_q8_act_row(x + (uint64_t)t * w->n_in, w->n_in,
                                 r->xact + (uint64_t)t * (w->n_in / 32));
        j.xact = r->xact;
    }
    if (r->n_threads < 2 || w->n_out < 64) {
        matmul_rows(&j, r->rowbuf[0], 0, w->n_out);
        return;
    }
    pthread_mutex_lock(&r->mu);
    r->job = j;
    r->gen++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    matmul_rows(&j, r->rowbuf[0], 0, w->n_out / 2);
    pthread_mutex_lock(&r->mu);
    while (r->done != r->gen)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

/* ---- small ops ---- */

static void rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps)
{
    double ss = 0;
    for (uint32_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (uint32_t i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

/* Rotates pairs of v (one head) by the angles of position pos: (2i, 2i+1) for the llama
 * ordering, (i, i + n_rot/2) for NeoX. Dimensions past n_rot are left alone. */
static void rope(const struct ref *r, float *v, uint32_t pos, bool swa)
{
    uint32_t half = r->hp.n_rot / 2;
    const float *c = (swa ? r->rope_cos_swa : r->rope_cos) + (uint64_t)pos * half;
    const float *s = (swa ? r->rope_sin_swa : r->rope_sin) + (uint64_t)pos * half;
    for (uint32_t i = 0; i < half; i++) {
        uint32_t a = r->hp.rope_kind == EBB__ROPE_NORMAL ? 2 * i : i;
        uint32_t b = r->hp.rope_kind == EBB__ROPE_NORMAL ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x0 * s[i] + x1 * c[i];
    }
}

/* Rounds through fp16 in ref-q8 mode. */
static float f16r(const struct ref *r, float x)
{
    return r->q8 ? ebb_fp16_to_fp32(ebb_fp32_to_fp16(x)) : x;
}

static float silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* GELU, tanh approximation (Gemma's gate). */
static float gelu(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

/* ---- the forward pass for n <= BATCH tokens ---- */

/* Embedding output mode: adds the final-normed hidden state of each of the n tokens in x to
 * sum (n_embd). */
static void hidden_sum(struct ref *r, uint32_t n, float *sum)
{
    const uint32_t D = r->hp.n_embd;
    for (uint32_t t = 0; t < n; t++) {
        rmsnorm(r->xb, r->x + (uint64_t)t * D, r->out_norm, D, r->hp.rms_eps);
        for (uint32_t i = 0; i < D; i++)
            sum[i] += r->xb[i];
    }
}

/* head: run the output head (false when only the hidden states are wanted). */
static void forward(struct ref *r, uint32_t seq, const int32_t *tokens, uint32_t n, uint32_t pos,
                    bool all_logits, float *hsum, bool head)
{
    const struct ebb__hparams *hp = &r->hp;
    const uint32_t D = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const uint32_t QD = NH * HD, KVD = NKV * HD, FF = hp->n_ff;
    const float att_scale = 1.0f / sqrtf((float)HD);

    /* Token embeddings: dequantized rows of token_embd (Gemma: times sqrt(n_embd)). */
    for (uint32_t t = 0; t < n; t++)
        ebb_quant_dequantize_row(r->tok_embd.type,
                                 r->tok_embd.data + (uint64_t)tokens[t] * r->tok_embd.row_bytes,
                                 r->x + (uint64_t)t * D, D);
    if (hp->gemma3) {
        float sc = sqrtf((float)D);
        for (uint64_t i = 0; i < (uint64_t)n * D; i++)
            r->x[i] *= sc;
    }

    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const struct layer *L = &r->layers[l];
        float *kc = r->k_cache + ((uint64_t)l * r->n_seq + seq) * r->n_ctx * KVD;
        float *vc = r->v_cache + ((uint64_t)l * r->n_seq + seq) * r->n_ctx * KVD;

        /* Attention block: xb = norm(x); q, k, v = xb @ Wq, Wk, Wv. */
        for (uint32_t t = 0; t < n; t++)
            rmsnorm(r->xb + (uint64_t)t * D, r->x + (uint64_t)t * D, L->attn_norm, D, hp->rms_eps);
        matmul(r, &L->wq, r->xb, r->q, n);
        matmul(r, &L->wk, r->xb, r->k, n);
        matmul(r, &L->wv, r->xb, r->v, n);
        bool swa = ebb__layer_is_swa(hp, l);

        /* (Gemma: RMS norm of each q and k head.) RoPE on q and k, then k and v into the cache
         * at their positions. */
        for (uint32_t t = 0; t < n; t++) {
            if (L->q_norm) {
                for (uint32_t h = 0; h < NH; h++) {
                    float *qh = r->q + (uint64_t)t * QD + h * HD;
                    rmsnorm(qh, qh, L->q_norm, HD, hp->rms_eps);
                }
                for (uint32_t h = 0; h < NKV; h++) {
                    float *kh = r->k + (uint64_t)t * KVD + h * HD;
                    rmsnorm(kh, kh, L->k_norm, HD, hp->rms_eps);
                }
            }
            for (uint32_t h = 0; h < NH; h++)
                rope(r, r->q + (uint64_t)t * QD + h * HD, pos + t, swa);
            for (uint32_t h = 0; h < NKV; h++)
                rope(r, r->k + (uint64_t)t * KVD + h * HD, pos + t, swa);
            for (uint32_t i = 0; i < KVD; i++) {
                kc[(uint64_t)(pos + t) * KVD + i] = f16r(r, r->k[(uint64_t)t * KVD + i]);
                vc[(uint64_t)(pos + t) * KVD + i] = f16r(r, r->v[(uint64_t)t * KVD + i]);
            }
            if (r->q8)
                for (uint32_t i = 0; i < QD; i++)
                    r->q[(uint64_t)t * QD + i] = f16r(r, r->q[(uint64_t)t * QD + i]);
        }

        /* Causal attention: token t sees positions p0..pos+t, p0 = 0 or, in a local layer, the
         * last swa positions; query head h reads KV head h / (NH / NKV). The result goes to xb
         * (n, QD). */
        for (uint32_t t = 0; t < n; t++) {
            uint32_t n_kv = pos + t + 1;
            uint32_t p0 = swa && n_kv > hp->swa ? n_kv - hp->swa : 0;
            for (uint32_t h = 0; h < NH; h++) {
                const float *qh = r->q + (uint64_t)t * QD + h * HD;
                uint32_t kvh = h / (NH / NKV);
                float mx = -INFINITY;
                for (uint32_t p = p0; p < n_kv; p++) {
                    float s = dot_f32(qh, kc + (uint64_t)p * KVD + kvh * HD, HD) * att_scale;
                    r->att[p] = s;
                    mx = s > mx ? s : mx;
                }
                float sum = 0;
                for (uint32_t p = p0; p < n_kv; p++) {
                    r->att[p] = expf(r->att[p] - mx);
                    sum += r->att[p];
                }
                float *o = r->xb + (uint64_t)t * QD + h * HD;
                memset(o, 0, HD * sizeof(float));
                for (uint32_t p = p0; p < n_kv; p++) {
                    float a = f16r(r, r->att[p] / sum);
                    const float *vp = vc + (uint64_t)p * KVD + kvh * HD;
                    for (uint32_t i = 0; i < HD; i++)
                        o[i] += a * vp[i];
                }
            }
        }

        /* Output projection and residual: x += xb @ Wo (Gemma: its RMS norm). q is free now
         * and holds the product. */
        matmul(r, &L->wo, r->xb, r->q, n);
        if (L->post_attn_norm)
            for (uint32_t t = 0; t < n; t++)
                rmsnorm(r->q + (uint64_t)t * D, r->q + (uint64_t)t * D, L->post_attn_norm, D,
                        hp->rms_eps);
        for (uint64_t i = 0; i < (uint64_t)n * D; i++)
            r->x[i] += r->q[i];

        /* Feed-forward block: x += (silu(xb @ Wgate) * (xb @ Wup)) @ Wdown, xb = norm(x). */
        for (uint32_t t = 0; t < n; t++)
            rmsnorm(r->xb + (uint64_t)t * D, r->x + (uint64_t)t * D, L->ffn_norm, D, hp->rms_eps);
        matmul(r, &L->gate, r->xb, r->hb, n);
        matmul(r, &L->up, r->xb, r->hb2, n);
        for (uint64_t i = 0; i < (uint64_t)n * FF; i++)
            r->hb[i] = (hp->gemma3 ? gelu(r->hb[i]) : silu(r->hb[i])) * r->hb2[i];
        matmul(r, &L->down, r->hb, r->q, n);
        if (L->post_ffn_norm)
            for (uint32_t t = 0; t < n; t++)
                rmsnorm(r->q + (uint64_t)t * D, r->q + (uint64_t)t * D, L->post_ffn_norm, D,
                        hp->rms_eps);
        for (uint64_t i = 0; i < (uint64_t)n * D; i++)
            r->x[i] += r->q[i];
    }

    if (hsum)
        hidden_sum(r, n, hsum);
    if (!head)
        return;
    /* Final norm and the output head, for every token or only the last one. */
    uint32_t first = all_logits ? 0 : n - 1;
    for (uint32_t t = first; t < n; t++)
        rmsnorm(r->xb + (uint64_t)(t - first) * D, r->x + (uint64_t)t * D, r->out_norm, D,
                hp->rms_eps);
    matmul(r, &r->output, r->xb, r->logits, n - first);
}

/* The k largest of v[0..n) into ids/vals, descending (ties: lower id first). */
static void top_k(const float *v, uint32_t n, uint32_t k, int32_t *ids, float *vals)
{
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (m == k && !(v[i] > vals[m - 1]))
            continue;
        uint32_t p = m < k ? m++ : m - 1;
        while (p > 0 && v[i] > vals[p - 1]) {
            ids[p] = ids[p - 1];
            vals[p] = vals[p - 1];
            p--;
        }
        ids[p] = (int32_t)i;
        vals[p] = v[i];
    }
}

static ebb_err ref_eval(void *ctx, uint32_t seq, const int32_t *tokens, uint32_t n, uint32_t pos,
                        struct ebb_model_out *out, struct ebb_diag *diag)
{
    struct ref *r = ctx;
    const uint32_t V = r->hp.n_vocab;
    bool want_all = out->logits_all != NULL;
    bool head = want_all || out->logits || out->top_k || !out->hidden_sum;
    for (uint32_t done = 0; done < n;) {
        uint32_t c = n - done < BATCH ? n - done : BATCH;
        bool last = done + c == n;
        forward(r, seq, tokens + done, c, pos + done, want_all, out->hidden_sum, head);
        if (!head) {
            done += c;
            continue;
        }
        if (want_all)
            memcpy(out->logits_all + (uint64_t)done * V, r->logits,
                   (uint64_t)c * V * sizeof(float));
        if (last) {
            const float *lg = r->logits + (want_all ? (uint64_t)(c - 1) * V : 0);
            if (out->logits)
                memcpy(out->logits, lg, V * sizeof(float));
            if (out->top_k)
                top_k(lg, V, out->top_k, out->top_ids, out->top_logits);
        }
        done += c;
    }
    (void)diag;
    return EBB_OK;
}

/* ---- construction ---- */

static void ref_free(void *ctx)
{
    struct ref *r = ctx;
    if (!r)
        return;
    if (r->n_threads > 1) {
        pthread_mutex_lock(&r->mu);
        r->quit = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
    if (r->layers) {
        for (uint32_t l = 0; l < r->hp.n_layer; l++) {
            free(r->layers[l].attn_norm);
            free(r->layers[l].ffn_norm);
            free(r->layers[l].q_norm);
            free(r->layers[l].k_norm);
            free(r->layers[l].post_attn_norm);
            free(r->layers[l].post_ffn_norm);
        }
    }
    free(r->layers);
    free(r->out_norm);
    free(r->k_cache);
    free(r->v_cache);
    free(r->rope_cos);
    free(r->rope_sin);
    free(r->rope_cos_swa);
    free(r->rope_sin_swa);
    free(r->x);
    free(r->xb);
    free(r->q);
    free(r->k);
    free(r->v);
    free(r->hb);
    free(r->hb2);
    free(r->att);
    free(r->logits);
    free(r->rowbuf[0]);
    free(r->rowbuf[1]);
    free(r->xact);
    free(r);
}

static const struct ebb__backend_i ref_iface = {
    .name = "ref (plain C)",
    .eval = ref_eval,
    .free = ref_free,
};

static const struct ebb__backend_i ref_q8_iface = {
    .name = "ref-q8 (plain C, llama.cpp CPU numerics)",
    .eval = ref_eval,
    .free = ref_free,
};

/* Finds tensor `name` with shape (n_in, n_out) in a type the dot products support. */
static ebb_err get_mat(const struct ebb_gguf *g, const char *name, uint32_t n_in, uint32_t n_out,
                       struct wmat *w, struct ebb_diag *diag)
{
    const struct ebb_gguf_tensor *t = ebb_gguf_find_tensor(g, name);
    if (!t)
        return ebb_diag_set(diag, EBB_EFORMAT, "tensor %s missing", name);
    if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
        return ebb_diag_set(diag, EBB_EFORMAT, "tensor %s has shape (%llu, %llu), want (%u, %u)",
                            name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], n_in,
                            n_out);
    if (!ebb_quant_supported(t->type) || ebb_ggml_row_bytes(t->type, n_in, &w->row_bytes))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "tensor %s: type %u not supported by the "
                            "reference backend",
                            name, t->type);
    w->data = t->data;
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->dot = ebb_quant_get_dot(t->type);
    return EBB_OK;
}

/* Dequantizes a 1-D tensor of n elements into a new float array. */
static ebb_err get_vec(const struct ebb_gguf *g, const char *name, uint32_t n, float **out,
                       struct ebb_diag *diag)
{
    const struct ebb_gguf_tensor *t = ebb_gguf_find_tensor(g, name);
    if (!t)
        return ebb_diag_set(diag, EBB_EFORMAT, "tensor %s missing", name);
    if (t->n_elements != n)
        return ebb_diag_set(diag, EBB_EFORMAT, "tensor %s has %llu elements, want %u", name,
                            (unsigned long long)t->n_elements, n);
    float *v = malloc(sizeof(float) * n);
    if (!v)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    ebb_err rc = ebb_quant_dequantize_row(t->type, t->data, v, n);
    if (rc) {
        free(v);
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "tensor %s: type %u not supported", name,
                            t->type);
    }
    *out = v;
    return EBB_OK;
}

static void *alloc_floats(uint64_t n, bool *fail)
{
    void *p = n && n < (UINT64_MAX / sizeof(float)) ? calloc(n, sizeof(float)) : NULL;
    if (!p)
        *fail = true;
    return p;
}

ebb_err ebb__ref_backend_new(const struct ebb__hparams *hp, const struct ebb_gguf *g,
                             const struct ebb_model_params *p, uint32_t n_ctx,
                             const struct ebb__backend_i **iface, void **ctx, struct ebb_diag *diag)
{
    if (strcmp(hp->arch, "llama") && !hp->gemma3)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "the reference backend runs the llama and gemma3 architectures, not "
                            "'%s'",
                            hp->arch);
    ebb_err rc = EBB_OK;
    struct ref *r = calloc(1, sizeof(*r));
    if (!r)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    r->hp = *hp;
    r->n_ctx = n_ctx;
    r->n_seq = p->n_seq ? p->n_seq : 1;
    const uint32_t D = hp->n_embd, QD = hp->n_head * hp->head_dim;
    const uint32_t KVD = hp->n_head_kv * hp->head_dim, FF = hp->n_ff, V = hp->n_vocab;
    char name[96];

    r->layers = calloc(hp->n_layer, sizeof(*r->layers));
    if (!r->layers) {
        rc = ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = get_mat(g, "token_embd.weight", D, V, &r->tok_embd, diag)) ||
        (rc = get_mat(g, hp->tied_output ? "token_embd.weight" : "output.weight", D, V, &r->output,
                      diag)) ||
        (rc = get_vec(g, "output_norm.weight", D, &r->out_norm, diag)))
        goto out;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        struct layer *L = &r->layers[l];
#define EBB__T(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, l), name)
        if ((rc = get_vec(g, EBB__T("attn_norm.weight"), D, &L->attn_norm, diag)) ||
            (rc = get_mat(g, EBB__T("attn_q.weight"), D, QD, &L->wq, diag)) ||
            (rc = get_mat(g, EBB__T("attn_k.weight"), D, KVD, &L->wk, diag)) ||
            (rc = get_mat(g, EBB__T("attn_v.weight"), D, KVD, &L->wv, diag)) ||
            (rc = get_mat(g, EBB__T("attn_output.weight"), QD, D, &L->wo, diag)) ||
            (rc = get_vec(g, EBB__T("ffn_norm.weight"), D, &L->ffn_norm, diag)) ||
            (rc = get_mat(g, EBB__T("ffn_gate.weight"), D, FF, &L->gate, diag)) ||
            (rc = get_mat(g, EBB__T("ffn_up.weight"), D, FF, &L->up, diag)) ||
            (rc = get_mat(g, EBB__T("ffn_down.weight"), FF, D, &L->down, diag)))
            goto out;
        if (hp->gemma3 &&
            ((rc = get_vec(g, EBB__T("attn_q_norm.weight"), hp->head_dim, &L->q_norm, diag)) ||
             (rc = get_vec(g, EBB__T("attn_k_norm.weight"), hp->head_dim, &L->k_norm, diag)) ||
             (rc = get_vec(g, EBB__T("post_attention_norm.weight"), D, &L->post_attn_norm, diag)) ||
             (rc = get_vec(g, EBB__T("post_ffw_norm.weight"), D, &L->post_ffn_norm, diag))))
            goto out;
#undef EBB__T
    }

    bool fail = false;
    uint64_t kv = (uint64_t)hp->n_layer * r->n_seq * n_ctx * KVD;
    uint32_t wide = QD > D ? QD : D, max_in = FF > wide ? FF : wide;
    r->k_cache = alloc_floats(kv, &fail);
    r->v_cache = alloc_floats(kv, &fail);
    r->rope_cos = alloc_floats((uint64_t)n_ctx * (hp->n_rot / 2), &fail);
    r->rope_sin = alloc_floats((uint64_t)n_ctx * (hp->n_rot / 2), &fail);
    if (hp->gemma3) {
        r->rope_cos_swa = alloc_floats((uint64_t)n_ctx * (hp->n_rot / 2), &fail);
        r->rope_sin_swa = alloc_floats((uint64_t)n_ctx * (hp->n_rot / 2), &fail);
    }
    r->x = alloc_floats((uint64_t)BATCH * D, &fail);
    r->xb = alloc_floats((uint64_t)BATCH * wide, &fail);
    r->q = alloc_floats((uint64_t)BATCH * wide, &fail);
    r->k = alloc_floats((uint64_t)BATCH * KVD, &fail);
    r->v = alloc_floats((uint64_t)BATCH * KVD, &fail);
    r->hb = alloc_floats((uint64_t)BATCH * FF, &fail);
    r->hb2 = alloc_floats((uint64_t)BATCH * FF, &fail);
    r->att = alloc_floats(n_ctx, &fail);
    r->logits = alloc_floats((uint64_t)BATCH * V, &fail);
    r->rowbuf[0] = alloc_floats(max_in, &fail);
    r->rowbuf[1] = alloc_floats(max_in, &fail);
    r->q8 = p->device && !strcmp(p->device, "ref-q8");
    if (r->q8) {
        r->xact = calloc((uint64_t)BATCH * (max_in / 32), sizeof(*r->xact));
        fail |= r->xact == NULL;
    }
    if (fail) {
        rc = ebb_diag_set(diag, EBB_ENOMEM,
                          "reference backend: out of memory for a %u-token "
                          "context (KV cache %.0f MiB)",
                          n_ctx, 2.0 * (double)kv * sizeof(float) / 1048576.0);
        goto out;
    }

    /* RoPE angles per position: theta_i = pos / scale * base^(-2i / n_rot); Gemma's local
     * layers use their own base and no scaling. */
    uint32_t half = hp->n_rot / 2;
    for (uint32_t pos = 0; pos < n_ctx; pos++) {
        for (uint32_t i = 0; i < half; i++) {
            double theta = (double)pos / hp->rope_scale *
                           pow((double)hp->rope_base, -2.0 * i / (double)hp->n_rot);
            r->rope_cos[(uint64_t)pos * half + i] = (float)cos(theta);
            r->rope_sin[(uint64_t)pos * half + i] = (float)sin(theta);
            if (r->rope_cos_swa) {
                double ts = (double)pos * pow((double)hp->rope_base_swa, -2.0 * i / hp->n_rot);
                r->rope_cos_swa[(uint64_t)pos * half + i] = (float)cos(ts);
                r->rope_sin_swa[(uint64_t)pos * half + i] = (float)sin(ts);
            }
        }
    }

    r->n_threads = 2;
    const char *env = getenv("EBB_REF_THREADS");
    if (env && atoi(env) == 1)
        r->n_threads = 1;
    if (r->n_threads > 1) {
        pthread_mutex_init(&r->mu, NULL);
        pthread_cond_init(&r->cv, NULL);
        if (pthread_create(&r->th, NULL, helper_main, r)) {
            pthread_mutex_destroy(&r->mu);
            pthread_cond_destroy(&r->cv);
            r->n_threads = 1;
        }
    }
out:
    if (rc) {
        ref_free(r);
        return rc;
    }
    *iface = r->q8 ? &ref_q8_iface : &ref_iface;
    *ctx = r;
    return EBB_OK;
}
