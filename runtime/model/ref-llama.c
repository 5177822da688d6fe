/* The reference forward pass in plain C, the yardstick the OpenCL engine is tested against. It
 * runs a family's description (arch-int.h) op by op, each op over all tokens of the batch, in
 * the order the family file lists them: the input program (token rows into the residual
 * stream), the layer program once per layer, then the output program on the rows whose logits
 * are wanted. Every op is a short function below that reads like llama2.c.
 *
 * Weights stay in the mmapped file in their quantized form; matrix-vector products go through
 * runtime/quant's row dot products (decode) or dequantize each weight row once and multiply it
 * with every token of the batch (prefill). Activations are fp32. Everything is allocated in
 * ebb__ref_backend_new: buffers for up to BATCH tokens at a time and the KV cache for
 * n_ctx x n_seq. Output rows are split between up to two threads (EBB_REF_THREADS=1 turns the
 * helper thread off).
 *
 * The same code runs single layers for the OpenCL engine's host layers (ebb__ref_host_*, the
 * hybrid placement of docs/STREAMER.md): one engine for layers l0..n_layer-1 with a KV cache
 * for those alone, and as many threads per product as the engine asks for.
 *
 * Device "ref-q8" switches on llama.cpp's CPU numerics, to tell its rounding apart from real
 * differences: activations are quantized to Q8 before each quantized matrix product, the KV
 * cache holds fp16 values, and the query and the attention weights are rounded to fp16 before
 * their products with K and V (llama.cpp's defaults without flash attention). */
#include "ref-int.h"

#include "base/log.h"
#include "stream/memprobe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH EBB__REF_BATCH

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
static void rope(const struct ref *r, float *v, uint32_t pos, bool swa, enum ebb__rope kind)
{
    uint32_t half = r->hp.n_rot / 2;
    const float *c = (swa ? r->rope_cos_swa : r->rope_cos) + (uint64_t)pos * half;
    const float *s = (swa ? r->rope_sin_swa : r->rope_sin) + (uint64_t)pos * half;
    for (uint32_t i = 0; i < half; i++) {
        uint32_t a = kind == EBB__ROPE_NORMAL ? 2 * i : i;
        uint32_t b = kind == EBB__ROPE_NORMAL ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x0 * s[i] + x1 * c[i];
    }
}

/* ---- the ops of a description, each over the n tokens of the batch ---- */

/* What one op works on: rows of the batch, from row0 (the output program's first wanted row),
 * of layer l at positions pos.., slot seq. */
struct step {
    const int32_t *tokens;
    uint32_t seq, n, pos, l, row0;
};

static float *rows(const struct ref *r, uint8_t b, const struct step *s)
{
    return r->buf[b] + (uint64_t)s->row0 * r->width[b];
}

/* Element `at` of a KV cache (r->kv_es bytes each), as bytes. */
static uint8_t *kv_el(const struct ref *r, void *cache, uint64_t at)
{
    return (uint8_t *)cache + at * r->kv_es;
}

/* Where layer l's keys (or values) of slot seq begin, in elements. */
static uint64_t kv_slot(const struct ref *r, uint32_t l, uint32_t seq)
{
    const uint64_t KVD = (uint64_t)r->hp.n_head_kv * r->hp.head_dim;
    return ((uint64_t)(l - r->l0) * r->n_seq + seq) * r->n_ctx * KVD;
}

/* Pairs [i0, i1) of step s's (token, head) pairs, with thread part's score buffer (a group of
 * query heads' rows: ebb__ref_attn_heads takes a KV head's query heads together). */
static void attention_pairs(struct ref *r, const struct ebb__op *op, const struct step *s, int part,
                            uint64_t i0, uint64_t i1)
{
    const struct ebb__hparams *hp = &r->hp;
    const uint32_t HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const uint32_t QD = NH * HD, KVD = NKV * HD;
    /* longrope's attention factor scales the rotated q and k: the logits by its square. */
    const float att_scale = hp->attn_factor * hp->attn_factor / sqrtf((float)HD);
    const float *q = rows(r, op->a, s);
    const uint8_t *kc = kv_el(r, r->k_cache, kv_slot(r, s->l, s->seq));
    const uint8_t *vc = kv_el(r, r->v_cache, kv_slot(r, s->l, s->seq));
    const uint32_t window = ebb__arch_window(hp, s->l), grp = NH / NKV;
    float *att = r->att + (uint64_t)part * EBB__ATT_GROUP * r->n_ctx;
    for (uint64_t i = i0; i < i1;) {
        uint32_t t = (uint32_t)(i / NH), h = (uint32_t)(i % NH);
        uint32_t n_kv = s->pos + t + 1;
        uint32_t kvh = h / grp;
        /* The query heads after h that read the same KV head, in this part: taken together. */
        uint64_t g = grp - h % grp;
        g = g < i1 - i ? g : i1 - i;
        g = g < EBB__ATT_GROUP ? g : EBB__ATT_GROUP;
        const uint64_t off = (uint64_t)kvh * HD * r->kv_es;
        const struct ebb__attn_head ah = {
            .q = q + (uint64_t)t * QD + h * HD,
            .k = r->kv16 ? NULL : (const float *)(const void *)(kc + off),
            .v = r->kv16 ? NULL : (const float *)(const void *)(vc + off),
            .k16 = r->kv16 ? (const uint16_t *)(const void *)(kc + off) : NULL,
            .v16 = r->kv16 ? (const uint16_t *)(const void *)(vc + off) : NULL,
            .stride = KVD,
            .hd = HD,
            .p0 = window && n_kv > window ? n_kv - window : 0,
            .n_kv = n_kv,
            .scale = att_scale,
            .f16_weights = r->q8,
        };
        ebb__ref_attn_heads(&ah, (uint32_t)g, r->fast, att, r->n_ctx,
                            rows(r, op->dst, s) + (uint64_t)t * QD + h * HD);
        i += g;
    }
}

/* Part i of the attention's (step, token, head) triples, over the j->n steps at j->step (one, or
 * a batch's slots of one token each): softmax(q k^T) v of each over the positions it sees, in
 * thread i's score buffer. */
static void attention_part(struct ref *r, const struct job *j, int part)
{
    const struct ebb__hparams *hp = &r->hp;
    const uint32_t NH = hp->n_head;
    const struct step *steps = j->step;
    const uint64_t per = (uint64_t)steps[0].n * NH, n_all = per * j->n;
    const uint64_t a0 = n_all * (uint32_t)part / (uint32_t)r->n_threads;
    const uint64_t a1 = n_all * (uint32_t)(part + 1) / (uint32_t)r->n_threads;
    for (uint64_t k = a0; k < a1;) {
        uint64_t si = k / per, end = (si + 1) * per < a1 ? (si + 1) * per : a1;
        attention_pairs(r, j->op, &steps[si], part, k - si * per, end - si * per);
        k = end;
    }
}

/* Keys b and values c of step s's tokens into the cache at their positions (rounded to fp16 with
 * llama.cpp's numerics, and the queries too). */
static void attention_store(struct ref *r, const struct ebb__op *op, const struct step *s)
{
    const struct ebb__hparams *hp = &r->hp;
    const uint32_t HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const uint32_t QD = NH * HD, KVD = NKV * HD;
    float *q = rows(r, op->a, s), *k = rows(r, op->b, s), *v = rows(r, op->c, s);
    const uint64_t slot = kv_slot(r, s->l, s->seq);
    for (uint32_t t = 0; t < s->n; t++) {
        const uint64_t at = slot + (uint64_t)(s->pos + t) * KVD;
        void *kp = kv_el(r, r->k_cache, at), *vp = kv_el(r, r->v_cache, at);
        if (r->kv16) { /* the fp16 values themselves (kv16: q8, no kv_q8) */
            ebb__ref_f16_store(kp, k + (uint64_t)t * KVD, KVD, r->fast);
            ebb__ref_f16_store(vp, v + (uint64_t)t * KVD, KVD, r->fast);
        } else {
            float *kd = kp, *vd = vp;
            if (r->q8) {
                ebb__ref_f16_round(kd, k + (uint64_t)t * KVD, KVD, r->fast);
                ebb__ref_f16_round(vd, v + (uint64_t)t * KVD, KVD, r->fast);
            } else {
                memcpy(kd, k + (uint64_t)t * KVD, KVD * sizeof(float));
                memcpy(vd, v + (uint64_t)t * KVD, KVD * sizeof(float));
            }
            if (r->kv_q8) /* the values the OpenCL engine's Q8_0 cache gives back */
                for (uint32_t i = 0; i < KVD; i += 32) {
                    struct ebb_block_q8_0 blk;
                    ebb_quant_quantize_row(EBB_GGML_Q8_0, kd + i, &blk, 32);
                    ebb_quant_dequantize_row(EBB_GGML_Q8_0, &blk, kd + i, 32);
                    ebb_quant_quantize_row(EBB_GGML_Q8_0, vd + i, &blk, 32);
                    ebb_quant_dequantize_row(EBB_GGML_Q8_0, &blk, vd + i, 32);
                }
        }
        if (r->q8)
            ebb__ref_f16_round(q + (uint64_t)t * QD, q + (uint64_t)t * QD, QD, r->fast);
    }
}

/* The attention of n steps (a batch's slots, each one token; or one step of any tokens): each
 * step's keys and values stored, then all their (token, head) pairs split between the threads
 * in one job, each pair computed as alone (the same bits). */
static void attention_steps(struct ref *r, const struct ebb__op *op, const struct step *steps,
                            uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        attention_store(r, op, &steps[i]);
    struct job j = {.run = attention_part, .op = op, .step = steps, .n = n};
    ebb__ref_run(r, &j);
}

/* Attention: keys b and values c of the batch into the cache at their positions, then token t
 * sees positions p0..pos+t, p0 = 0 or, in a windowed layer, the last `window` positions; query
 * head h reads KV head h / (NH / NKV). Writes dst (n, n_head * head_dim). */
static void attention(struct ref *r, const struct ebb__op *op, const struct step *s)
{
    attention_steps(r, op, s, 1);
}

static const struct rtensor *tensor(const struct ref *r, int16_t t, uint32_t l)
{
    bool per_layer = r->a->tensors[t].flags & EBB__T_LAYER;
    return &r->t[(per_layer ? (uint64_t)(l + 1) * r->a->n_tensors : 0) + (uint32_t)t];
}

/* d[i] = act(a[i]) * b[i], i < n. Device "cpu": GELU as llama.cpp's CPU backend computes it,
 * from its fp16 table. Gemma 3 270M's first-step logits come 0.78 from llama.cpp's this way
 * (centered, worst of 8 prompts), 1.57 with the plain GELU. */
static void glu(const struct ref *r, const struct ebb__op *op, const float *a, const float *b,
                float *d, uint64_t n)
{
    if (r->gelu_tab && op->arg == EBB__ACT_GELU_TANH) {
        ebb__ref_gelu_glu(r->gelu_tab, a, b, d, n, r->fast);
        return;
    }
    for (uint64_t i = 0; i < n; i++)
        d[i] = (op->arg == EBB__ACT_GELU_TANH ? ebb__ref_gelu(a[i]) : ebb__ref_silu(a[i])) * b[i];
}

/* The device "cpu" splits a GLU of this many elements or more between its threads (a batch's
 * or a prompt's rows; one token's 1536 to 8192 stay on the caller, where a job costs more than
 * it saves). */
enum { GLU_SPLIT = 8192 };

/* Part i of a GLU's elements, in blocks of 64. */
static void glu_part(struct ref *r, const struct job *j, int part)
{
    const uint64_t nb = (j->nd + 63) / 64;
    uint64_t i0 = nb * (uint32_t)part / (uint32_t)r->n_threads * 64;
    uint64_t i1 = nb * (uint32_t)(part + 1) / (uint32_t)r->n_threads * 64;
    i1 = i1 < j->nd ? i1 : j->nd;
    if (i0 < i1)
        glu(r, j->op, j->x + i0, j->b + i0, j->y + i0, i1 - i0);
}

static void run_op(struct ref *r, const struct ebb__op *op, const struct step *s)
{
    const struct rtensor *w = op->t >= 0 ? tensor(r, op->t, s->l) : NULL;
    if (w && !w->present)
        return; /* an optional tensor the file does not have */
    const uint32_t wd = r->width[op->dst], HD = r->hp.head_dim;
    const uint64_t nd = (uint64_t)s->n * wd;
    const float eps = r->hp.rms_eps;
    float *d = rows(r, op->dst, s), *a = rows(r, op->a, s), *b = rows(r, op->b, s);
    switch ((enum ebb__op_kind)op->kind) {
    case EBB__OP_GET_ROWS:
        for (uint32_t t = 0; t < s->n; t++)
            ebb_quant_dequantize_row(w->m.type, w->m.data + (uint64_t)s->tokens[t] * w->m.row_bytes,
                                     d + (uint64_t)t * wd, wd);
        break;
    case EBB__OP_SCALE: {
        float sc = sqrtf((float)r->hp.n_embd); /* EBB__SCALE_SQRT_EMBD, the only factor */
        for (uint64_t i = 0; i < nd; i++)
            d[i] *= sc;
        break;
    }
    case EBB__OP_RMS_NORM:
        for (uint32_t t = 0; t < s->n; t++)
            rmsnorm(d + (uint64_t)t * wd, a + (uint64_t)t * wd, w->v, wd, eps);
        break;
    case EBB__OP_HEAD_NORM:
        for (uint64_t h = 0; h < nd / HD; h++)
            rmsnorm(d + h * HD, a + h * HD, w->v, HD, eps);
        break;
    case EBB__OP_MATMUL:
        ebb__ref_matmul(r, &w->m, a, d, s->n);
        break;
    case EBB__OP_ROPE: {
        bool swa = ebb__arch_window(&r->hp, s->l) && r->rope_cos_swa;
        if (d != a)
            memcpy(d, a, nd * sizeof(float));
        for (uint32_t t = 0; t < s->n; t++)
            for (uint32_t h = 0; h < wd / HD; h++)
                rope(r, d + (uint64_t)t * wd + h * HD, s->pos + t, swa, op->arg);
        break;
    }
    case EBB__OP_ATTENTION:
        attention(r, op, s);
        break;
    case EBB__OP_GLU:
        if (r->cpu && r->n_threads > 1 && nd >= GLU_SPLIT) { /* each element alike */
            struct job j = {.run = glu_part, .op = op, .x = a, .b = b, .y = d, .nd = nd};
            ebb__ref_run(r, &j);
            break;
        }
        glu(r, op, a, b, d, nd);
        break;
    case EBB__OP_ADD:
        for (uint64_t i = 0; i < nd; i++)
            d[i] += a[i];
        break;
    case EBB__OP_ADD_BIAS:
        for (uint64_t i = 0; i < nd; i++)
            d[i] = a[i] + w->v[i % wd];
        break;
    case EBB__OP_SPLIT: {
        const uint8_t parts[3] = {op->dst, op->b, op->c};
        uint32_t off = 0, wa = r->width[op->a];
        for (uint32_t k = 0; k < op->arg; k++) {
            uint32_t wk = r->width[parts[k]];
            float *pk = rows(r, parts[k], s);
            for (uint32_t t = 0; t < s->n; t++)
                memcpy(pk + (uint64_t)t * wk, a + (uint64_t)t * wa + off, wk * sizeof(float));
            off += wk;
        }
        break;
    }
    case EBB__OP_MOE:
        ebb__ref_moe(r, op, w, a, d, s->n); /* w: the router, then the expert stacks */
        break;
    case EBB__N_OP:
        break;
    }
}

static void run_prog(struct ref *r, const struct ebb__op *ops, uint32_t n_ops, struct step *s)
{
    for (uint32_t i = 0; i < n_ops; i++)
        run_op(r, &ops[i], s);
}

/* ---- the forward pass for n <= BATCH tokens ---- */

/* Embedding output mode: runs the output program's ops before the one that writes LOGITS (the
 * final norm) over all n tokens and adds each token's row of their result to sum (n_embd). */
static void hidden_sum(struct ref *r, struct step *s, float *sum)
{
    const struct ebb__arch *a = r->a;
    int last = -1;
    for (uint32_t i = 0; i < a->n_output && a->output[i].dst != EBB__BUF_LOGITS; i++) {
        run_op(r, &a->output[i], s);
        last = a->output[i].dst;
    }
    if (last < 0)
        return;
    const uint32_t D = r->hp.n_embd;
    const float *h = rows(r, (uint8_t)last, s);
    for (uint32_t t = 0; t < s->n; t++)
        for (uint32_t i = 0; i < D; i++)
            sum[i] += h[(uint64_t)t * r->width[last] + i];
}

/* Runs the description; the logits land in rows first..n-1 of LOGITS (first = 0 with
 * all_logits, else n - 1). With hsum, the final-normed hidden states of the n tokens are added
 * to it first; head false skips the output head (an embedding). */
static void forward(struct ref *r, uint32_t seq, const int32_t *tokens, uint32_t n, uint32_t pos,
                    bool all_logits, float *hsum, bool head)
{
    const struct ebb__arch *a = r->a;
    struct step s = {tokens, seq, n, pos, 0, 0};
    run_prog(r, a->input, a->n_input, &s);
    for (s.l = 0; s.l < r->hp.n_layer; s.l++)
        run_prog(r, a->layer, a->n_layer_ops, &s);
    s.l = 0;
    if (hsum)
        hidden_sum(r, &s, hsum);
    if (!head)
        return;
    s.row0 = all_logits ? 0 : n - 1;
    s.n = n - s.row0;
    run_prog(r, a->output, a->n_output, &s);
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
        const float *logits = r->buf[EBB__BUF_LOGITS];
        if (want_all)
            memcpy(out->logits_all + (uint64_t)done * V, logits, (uint64_t)c * V * sizeof(float));
        if (last) {
            const float *lg = logits + (uint64_t)(c - 1) * V;
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

/* iface.eval_batch of the CPU device: a decode step of several slots (one token each, logits
 * or top-k wanted) as one pass, so that each weight row is read once for all of them; rope and
 * attention run per slot at its own position. Anything else (prefill chunks, all-logits or
 * embedding outputs, more slots than a pass holds) is evaluated part by part. The results equal
 * separate evaluations bit for bit: the products give each token the same sums either way. */
static ebb_err cpu_eval_batch(void *ctx, const struct ebb_model_seq *seqs, uint32_t n_seqs,
                              struct ebb_diag *diag)
{
    struct ref *r = ctx;
    const struct ebb__arch *a = r->a;
    const uint32_t V = r->hp.n_vocab;
    bool one_pass = n_seqs <= BATCH;
    for (uint32_t i = 0; i < n_seqs && one_pass; i++)
        one_pass = seqs[i].n == 1 &&
                   (!seqs[i].out || (!seqs[i].out->logits_all && !seqs[i].out->hidden_sum));
    if (!one_pass) {
        struct ebb_model_out none = {0};
        for (uint32_t i = 0; i < n_seqs; i++) {
            ebb_err rc = ref_eval(ctx, seqs[i].seq, seqs[i].tokens, seqs[i].n, seqs[i].pos,
                                  seqs[i].out ? seqs[i].out : &none, diag);
            if (rc)
                return rc;
        }
        return EBB_OK;
    }
    int32_t tok[BATCH];
    for (uint32_t i = 0; i < n_seqs; i++)
        tok[i] = seqs[i].tokens[0];
    struct step s = {tok, 0, n_seqs, 0, 0, 0};
    run_prog(r, a->input, a->n_input, &s);
    for (s.l = 0; s.l < r->hp.n_layer; s.l++)
        for (uint32_t k = 0; k < a->n_layer_ops; k++) {
            const struct ebb__op *op = &a->layer[k];
            if (op->kind != EBB__OP_ROPE && op->kind != EBB__OP_ATTENTION) {
                run_op(r, op, &s);
                continue;
            }
            struct step one[BATCH];
            for (uint32_t i = 0; i < n_seqs; i++)
                one[i] = (struct step){tok + i, seqs[i].seq, 1, seqs[i].pos, s.l, i};
            if (op->kind == EBB__OP_ATTENTION) { /* the slots' heads in one job */
                attention_steps(r, op, one, n_seqs);
                continue;
            }
            for (uint32_t i = 0; i < n_seqs; i++)
                run_op(r, op, &one[i]);
        }
    s.l = 0;
    run_prog(r, a->output, a->n_output, &s);
    for (uint32_t i = 0; i < n_seqs; i++) {
        const struct ebb_model_out *out = seqs[i].out;
        const float *lg = r->buf[EBB__BUF_LOGITS] + (uint64_t)i * V;
        if (out && out->logits)
            memcpy(out->logits, lg, V * sizeof(float));
        if (out && out->top_k)
            top_k(lg, V, out->top_k, out->top_ids, out->top_logits);
    }
    return EBB_OK;
}

/* ---- construction ---- */

static void ref_free(void *ctx)
{
    struct ref *r = ctx;
    if (!r)
        return;
    ebb__ref_stop_helper(r);
    if (r->t)
        for (uint64_t i = 0; i < (uint64_t)(r->hp.n_layer + 1) * r->a->n_tensors; i++) {
            free(r->t[i].v);
            free(r->t[i].m.rp);
        }
    free(r->t);
    free(r->k_cache);
    free(r->v_cache);
    free(r->pc_k);
    free(r->pc_v);
    free(r->rope_cos);
    free(r->rope_sin);
    free(r->rope_cos_swa);
    free(r->rope_sin_swa);
    for (int b = 0; b < EBB__N_BUF; b++)
        free(r->buf[b]);
    free(r->att);
    for (int i = 0; i < EBB__REF_MAX_THREADS; i++)
        free(r->rowbuf[i]);
    free(r->xact);
    free(r->xk);
    free(r->xsum);
    free(r->gelu_tab);
    ebb__ref_moe_free(r);
    free(r);
}

/* Each layer's K and V rows of positions 0..n-1, from slot src's region to dst's. */
static ebb_err ref_kv_copy(void *ctx, uint32_t src, uint32_t dst, uint32_t n, struct ebb_diag *diag)
{
    (void)diag;
    struct ref *r = ctx;
    const uint64_t KVD = (uint64_t)r->hp.n_head_kv * r->hp.head_dim;
    for (uint32_t l = r->l0; l < r->hp.n_layer; l++) {
        uint64_t s = kv_slot(r, l, src), d = kv_slot(r, l, dst);
        memcpy(kv_el(r, r->k_cache, d), kv_el(r, r->k_cache, s), r->kv_es * n * KVD);
        memcpy(kv_el(r, r->v_cache, d), kv_el(r, r->v_cache, s), r->kv_es * n * KVD);
    }
    return EBB_OK;
}

/* The prompt-cache store in host memory: as many positions of every layer's K and V rows (as the
 * cache holds them, fp32 or fp16) as bytes allows, allocated here once. */
static ebb_err ref_kv_store_new(void *ctx, uint64_t bytes, uint32_t *n_pos, struct ebb_diag *diag)
{
    struct ref *r = ctx;
    const uint64_t NL = r->hp.n_layer - r->l0; /* layers with a KV cache */
    const uint64_t per = 2ull * r->kv_es * NL * r->hp.n_head_kv * r->hp.head_dim;
    uint64_t n = per ? bytes / per : 0;
    n = n < UINT32_MAX ? n : UINT32_MAX;
    if (!n)
        return EBB_OK;
    const uint64_t KVD = (uint64_t)r->hp.n_head_kv * r->hp.head_dim;
    r->pc_k = malloc((uint64_t)r->kv_es * NL * n * KVD);
    r->pc_v = malloc((uint64_t)r->kv_es * NL * n * KVD);
    if (!r->pc_k || !r->pc_v) {
        free(r->pc_k);
        free(r->pc_v);
        r->pc_k = r->pc_v = NULL;
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory for a prompt cache of %llu bytes",
                            (unsigned long long)bytes);
    }
    r->pc_len = (uint32_t)n;
    *n_pos = r->pc_len;
    return EBB_OK;
}

/* Positions 0..n-1 of slot seq to store positions at..at+n-1 (save) or back (load). */
static ebb_err ref_kv_store_xfer(void *ctx, bool save, uint32_t seq, uint32_t at, uint32_t n,
                                 struct ebb_diag *diag)
{
    (void)diag;
    struct ref *r = ctx;
    const uint64_t KVD = (uint64_t)r->hp.n_head_kv * r->hp.head_dim;
    for (uint32_t l = 0; l < r->hp.n_layer - r->l0; l++) {
        uint64_t c = kv_slot(r, l + r->l0, seq);
        uint64_t p = ((uint64_t)l * r->pc_len + at) * KVD;
        uint8_t *ck = kv_el(r, r->k_cache, c), *cv = kv_el(r, r->v_cache, c);
        uint8_t *pk = kv_el(r, r->pc_k, p), *pv = kv_el(r, r->pc_v, p);
        memcpy(save ? pk : ck, save ? ck : pk, r->kv_es * n * KVD);
        memcpy(save ? pv : cv, save ? cv : pv, r->kv_es * n * KVD);
    }
    return EBB_OK;
}

/* Bytes op reads of its tensor for one token of layer l: a matrix whole (GET_ROWS one row, a
 * MOE op its router and the experts used of the stacks after it), a vector as floats. */
static uint64_t op_bytes(const struct ref *r, const struct ebb__op *op, uint32_t l)
{
    const struct rtensor *w = op->t >= 0 ? tensor(r, op->t, l) : NULL;
    if (!w || !w->present)
        return 0;
    if (w->v)
        return sizeof(float) * ebb__arch_dim(&r->hp, r->a->tensors[op->t].ne0);
    if (op->kind == EBB__OP_GET_ROWS)
        return w->m.row_bytes;
    uint64_t b = w->m.mat_bytes * w->m.n_mat;
    for (int16_t e = 1; op->kind == EBB__OP_MOE && e <= 3; e++)
        b += tensor(r, (int16_t)(op->t + e), l)->m.mat_bytes * r->hp.n_expert_used;
    return b;
}

/* iface.decode_bytes: the tensors as the file holds them, the KV cache in floats. */
static void ref_decode_bytes(void *ctx, uint32_t depth, struct ebb_model_decode_bytes *out)
{
    const struct ref *r = ctx;
    const struct ebb__arch *a = r->a;
    uint64_t w = 0, kv = 0, row = 2ull * r->kv_es * r->hp.n_head_kv * r->hp.head_dim;
    for (uint32_t i = 0; i < a->n_input; i++)
        w += op_bytes(r, &a->input[i], 0);
    for (uint32_t i = 0; i < a->n_output; i++)
        w += op_bytes(r, &a->output[i], 0);
    for (uint32_t l = 0; l < r->hp.n_layer; l++) {
        uint64_t win = ebb__arch_window(&r->hp, l), n = (uint64_t)depth + 1;
        for (uint32_t i = 0; i < a->n_layer_ops; i++) {
            w += op_bytes(r, &a->layer[i], l);
            if (a->layer[i].kind == EBB__OP_ATTENTION)
                kv += row * (win && win < n ? win : n);
        }
    }
    out->weights = w;
    out->kv = kv;
}

/* iface.memory: what ref_new allocated (the store is model.c's figure). */
static void ref_memory(void *ctx, struct ebb_model_memory *out)
{
    const struct ref *r = ctx;
    out->repack = r->rp_total;
    out->host = r->host_bytes;
}

static const struct ebb__backend_i ref_iface = {
    .name = "ref (plain C)",
    .eval = ref_eval,
    .free = ref_free,
    .kv_copy = ref_kv_copy,
    .kv_store_new = ref_kv_store_new,
    .kv_store_xfer = ref_kv_store_xfer,
    .decode_bytes = ref_decode_bytes,
    .memory = ref_memory,
};

static const struct ebb__backend_i ref_q8_iface = {
    .name = "ref-q8 (plain C, llama.cpp CPU numerics)",
    .eval = ref_eval,
    .free = ref_free,
    .kv_copy = ref_kv_copy,
    .kv_store_new = ref_kv_store_new,
    .kv_store_xfer = ref_kv_store_xfer,
    .decode_bytes = ref_decode_bytes,
    .memory = ref_memory,
};

/* A matrix (ne[0] = n_in per row, ne[1] = n_out rows) in a type the dot products support. */
static ebb_err get_mat(const struct ebb_gguf_tensor *t, struct wmat *w, struct ebb_diag *diag)
{
    uint32_t n_in = (uint32_t)t->ne[0];
    if (!ebb_quant_supported(t->type) || ebb_ggml_row_bytes(t->type, n_in, &w->row_bytes))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "tensor %s: type %u not supported by the "
                            "reference backend",
                            t->name, t->type);
    w->data = t->data;
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = (uint32_t)t->ne[1];
    w->dot = ebb_quant_get_dot(t->type);
    w->n_mat = t->n_dims == 3 ? (uint32_t)t->ne[2] : 1;
    w->mat_bytes = w->row_bytes * w->n_out;
    return EBB_OK;
}

/* A vector dequantized into a new float array. */
static ebb_err get_vec(const struct ebb_gguf_tensor *t, float **out, struct ebb_diag *diag)
{
    float *v = malloc(sizeof(float) * t->n_elements);
    if (!v)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    ebb_err rc = ebb_quant_dequantize_row(t->type, t->data, v, t->n_elements);
    if (rc) {
        free(v);
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "tensor %s: type %u not supported", t->name,
                            t->type);
    }
    *out = v;
    return EBB_OK;
}

/* Every declared tensor of every layer: matrices by reference into the mapping, vectors
 * dequantized. */
static ebb_err load_tensors(struct ref *r, const struct ebb_gguf *g, struct ebb_diag *diag)
{
    const struct ebb__arch *a = r->a;
    r->t = calloc((uint64_t)(r->hp.n_layer + 1) * a->n_tensors, sizeof(*r->t));
    if (!r->t)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < a->n_tensors; i++) {
        bool per_layer = a->tensors[i].flags & EBB__T_LAYER;
        for (uint32_t l = 0; l < (per_layer ? r->hp.n_layer : 1); l++) {
            struct rtensor *rt = (struct rtensor *)tensor(r, (int16_t)i, l);
            const struct ebb_gguf_tensor *gt;
            ebb_err rc = ebb__arch_tensor(a, &r->hp, g, i, l, &gt, diag);
            if (!rc && gt)
                rc = a->tensors[i].ne1 == EBB__DIM_1 ? get_vec(gt, &rt->v, diag)
                                                     : get_mat(gt, &rt->m, diag);
            if (rc)
                return rc;
            if (rt->v)
                r->host_bytes += sizeof(float) * gt->n_elements;
            rt->present = gt != NULL;
        }
    }
    return EBB_OK;
}

/* The bytes of the repacked copy of n_mat matrices of n_out rows of n_in elements of type:
 * 0 where repack() leaves them on the file's rows (a type without a repacked product
 * (ebb_quant_get_rp8), an expert stack, fewer than 8 rows). */
static uint64_t repack_size(uint32_t type, uint32_t n_in, uint32_t n_out, uint32_t n_mat)
{
    uint64_t gb = ebb_quant_get_rp8(type) ? ebb_quant_rp8_bytes(type, n_in) : 0;
    return n_mat == 1 && n_out >= 8 ? gb * (n_out / 8) : 0;
}

/* The matrix products repack() looks at, each once: the layers' (layer after layer), then the
 * output head's when head. Returns the next one's op and writes its layer to *ol; NULL at the
 * end. */
static const struct ebb__op *repack_walk(const struct ebb__arch *a, uint32_t n_layer, bool head,
                                         uint32_t *l, uint32_t *i, uint32_t *ol)
{
    for (;;) {
        const struct ebb__op *op;
        if (*l < n_layer) {
            if (*i >= a->n_layer_ops) {
                ++*l, *i = 0;
                continue;
            }
            op = &a->layer[*i], *ol = *l;
        } else if (*i < a->n_output && head) {
            op = &a->output[*i], *ol = 0;
        } else {
            return NULL;
        }
        ++*i;
        if (op->kind == EBB__OP_MATMUL && op->t >= 0)
            return op;
    }
}

/* The next matrix repack() copies, not copied yet, with the bytes of one group of its rows. */
static struct wmat *repack_next(struct ref *r, uint32_t *l, uint32_t *i, uint64_t *gb)
{
    const struct ebb__op *op;
    uint32_t ol;
    while ((op = repack_walk(r->a, r->hp.n_layer, r->repack_head, l, i, &ol))) {
        struct wmat *w = &((struct rtensor *)tensor(r, op->t, ol))->m;
        if (w->data && !w->rp && repack_size(w->type, w->n_in, w->n_out, w->n_mat)) {
            *gb = ebb_quant_rp8_bytes(w->type, w->n_in);
            return w;
        }
    }
    return NULL;
}

/* Whether repack() makes a copy of total bytes: EBB_CPU_REPACK=0 never, EBB_CPU_REPACK=1
 * always, else where it takes at most half of the memory the host probes call available
 * (written to *avail, 0 when no probe answers). */
static bool repack_fits(uint64_t total, uint64_t *avail)
{
    const char *env = getenv("EBB_CPU_REPACK");
    *avail = 0;
    if (env && !strcmp(env, "0"))
        return false;
    if (env && !strcmp(env, "1"))
        return true;
    return !ebb_memprobe_host_available(avail) || total <= *avail / 2;
}

static bool repack_head_env(void)
{
    const char *head = getenv("EBB_CPU_REPACK_HEAD");
    return !(head && !strcmp(head, "0"));
}

uint64_t ebb__ref_repack_bytes(const struct ebb__arch *a, const struct ebb__hparams *hp,
                               const struct ebb_gguf *g)
{
    uint64_t total = 0, avail;
    uint32_t l = 0, i = 0, ol;
    const struct ebb__op *op;
    while ((op = repack_walk(a, hp->n_layer, repack_head_env(), &l, &i, &ol))) {
        const struct ebb_gguf_tensor *t;
        if (!ebb__arch_tensor(a, hp, g, (uint32_t)op->t, ol, &t, NULL) && t && t->n_dims >= 2)
            total += repack_size(t->type, (uint32_t)t->ne[0], (uint32_t)t->ne[1],
                                 t->n_dims == 3 ? (uint32_t)t->ne[2] : 1);
    }
    return total && repack_fits(total, &avail) ? total : 0;
}

/* Device "cpu": every single matrix of the layers' products and the output head in a type with a
 * repacked product (ebb_quant_get_rp8) gets a copy of its rows in groups of eight, which prefill
 * and decode read instead of the mapping (the Q4_0, Q4_1 and Q8_0 copies are the file's bytes,
 * Q5_0's 1.55x, Q4_K's 1.22x, Q6_K's 1.47x): one sequential stream a group of rows, which the CPU's
 * prefetchers follow, and no horizontal sums (docs/PERFORMANCE.md, "Decode on the repacked rows").
 * A tied head's copy is the embedding's size again; the embedding's lookups keep reading the
 * mapping (EBB_CPU_REPACK_HEAD=0 leaves the head on the file's rows: with float scales that
 * measured 156 MiB less peak RSS for the 1B shape and 180 MiB for Gemma 3 270M, and some 6% of
 * their decode).
 * The copy is made only where it takes at most half of the memory the host probes call
 * available (MemAvailable, the cgroup's limit), so that a model near the machine's size is not
 * pushed over it by a speed-up: EBB_CPU_REPACK=0 never repacks, EBB_CPU_REPACK=1 always does.
 * ebb__ref_repack_bytes tells the same from the file's header before the open. */
static ebb_err repack(struct ref *r, struct ebb_diag *diag)
{
    const char *env = getenv("EBB_CPU_REPACK");
    if (env && !strcmp(env, "0"))
        return EBB_OK;
    r->repack_head = repack_head_env();
    uint64_t total = 0, gb, avail;
    struct wmat *w;
    uint32_t l = 0, i = 0;
    while ((w = repack_next(r, &l, &i, &gb)))
        total += gb * (w->n_out / 8);
    if (!total)
        return EBB_OK;
    if (!repack_fits(total, &avail)) {
        ebb_log(EBB_LOG_INFO, "model",
                "CPU device: products on the file's rows: their repacked copy (%.0f MiB) "
                "would take more than half of the %.0f MiB available (EBB_CPU_REPACK=1 "
                "makes it anyway)",
                (double)total / (1 << 20), (double)avail / (1 << 20));
        return EBB_OK;
    }
    l = i = 0;
    while ((w = repack_next(r, &l, &i, &gb))) {
        w->rp = malloc(gb * (w->n_out / 8));
        if (!w->rp)
            return ebb_diag_set(diag, EBB_ENOMEM,
                                "out of memory for the CPU device's repacked "
                                "weights (EBB_CPU_REPACK=0 reads the file's)");
        for (uint32_t o = 0; o + 8 <= w->n_out; o += 8)
            ebb_quant_rp8_pack(w->type, w->data + (uint64_t)o * w->row_bytes, w->row_bytes, w->n_in,
                               w->rp + (uint64_t)(o / 8) * gb);
        w->rp_bytes = gb;
        w->rp8 = ebb_quant_get_rp8(w->type);
        r->rp_total += gb * (w->n_out / 8);
    }
    return EBB_OK;
}

/* The widest input of any matrix product (the dequantized row and 8-bit input buffers). */
static uint32_t max_matmul_in(const struct ebb__arch *a, const struct ebb__hparams *hp)
{
    const struct ebb__op *progs[] = {a->input, a->layer, a->output};
    uint32_t n[] = {a->n_input, a->n_layer_ops, a->n_output}, m = 1;
    for (int p = 0; p < 3; p++)
        for (uint32_t i = 0; i < n[p]; i++)
            if (progs[p][i].kind == EBB__OP_MATMUL || progs[p][i].kind == EBB__OP_MOE) {
                uint32_t w = (uint32_t)ebb__arch_dim(hp, a->tensors[progs[p][i].t].ne0);
                m = w > m ? w : m;
                if (progs[p][i].kind == EBB__OP_MOE)
                    m = hp->n_ff_exp > m ? hp->n_ff_exp : m; /* the down experts' input */
            }
    return m;
}

/* calloc, the bytes counted in r->host_bytes (ebb_model_memory). */
static void *ref_calloc(struct ref *r, uint64_t n, uint64_t es)
{
    void *p = calloc(n, es);
    if (p)
        r->host_bytes += n * es;
    return p;
}

/* n zeroed elements of es bytes; *fail set where that cannot be had. */
static void *alloc_elems(struct ref *r, uint64_t n, uint32_t es, bool *fail)
{
    void *p = n && n < (UINT64_MAX / es) ? ref_calloc(r, n, es) : NULL;
    if (!p)
        *fail = true;
    return p;
}

static void *alloc_floats(struct ref *r, uint64_t n, bool *fail)
{
    return alloc_elems(r, n, sizeof(float), fail);
}

bool ebb__ref_kv16(const char *device, int kv_type, uint32_t head_dim)
{
    return device && (!strcmp(device, "cpu") || !strcmp(device, "ref-q8")) &&
           kv_type != EBB_KV_Q8_0 && head_dim <= EBB__ATT_MAX_HD;
}

/* Writes a zero to each page of the n floats at p (calloc's large blocks are mapped pages that
 * become resident only when first written), so that the scratch rows are resident from the
 * open instead of as prompts of new lengths first reach each row: the logits rows alone are
 * 64 x n_vocab floats (12 MiB for SmolLM2), a soak's slow climb otherwise (docs/PERFORMANCE.md,
 * "Soak"). */
static void touch_floats(float *p, uint64_t n)
{
    volatile float *v = p;
    for (uint64_t i = 0; p && i < n; i += 4096 / sizeof(float))
        v[i] = 0.0f;
}

/* RoPE angles per position: theta_i = pos / scale * base^(-2i / n_rot) / ff_i (ff: the
 * frequency divisors of Llama 3.1's scaling, else 1); windowed layers with a base of their own
 * use it and no scaling. */
static void rope_tables(struct ref *r, const float *ff)
{
    const struct ebb__hparams *hp = &r->hp;
    uint32_t half = hp->n_rot / 2;
    for (uint32_t pos = 0; pos < r->n_ctx; pos++) {
        for (uint32_t i = 0; i < half; i++) {
            double theta = (double)pos / hp->rope_scale *
                           pow((double)hp->rope_base, -2.0 * i / (double)hp->n_rot) / ff[i];
            r->rope_cos[(uint64_t)pos * half + i] = (float)cos(theta);
            r->rope_sin[(uint64_t)pos * half + i] = (float)sin(theta);
            if (r->rope_cos_swa) {
                double ts = (double)pos * pow((double)hp->rope_base_swa, -2.0 * i / hp->n_rot);
                r->rope_cos_swa[(uint64_t)pos * half + i] = (float)cos(ts);
                r->rope_sin_swa[(uint64_t)pos * half + i] = (float)sin(ts);
            }
        }
    }
}

/* The engine for layers l0..n_layer-1 (their KV cache; every layer's tensors are found) with
 * n_threads threads per product; host engines (host) take the SIMD dots and keep their helpers
 * polling between products. */
static ebb_err ref_new(const struct ebb__arch *a, const struct ebb__hparams *hp,
                       const struct ebb_gguf *g, const struct ebb_model_params *p, uint32_t n_ctx,
                       uint32_t l0, int n_threads, bool host, struct ref **out,
                       struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    struct ref *r = calloc(1, sizeof(*r));
    if (!r)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    r->a = a;
    r->hp = *hp;
    r->hp.n_ctx_run = n_ctx; /* longrope: the factor set for this context */
    r->n_ctx = n_ctx;
    r->n_seq = p->n_seq ? p->n_seq : 1;
    r->l0 = l0 < hp->n_layer ? l0 : hp->n_layer;
    if ((rc = load_tensors(r, g, diag)))
        goto out;

    bool fail = false;
    const uint32_t KVD = hp->n_head_kv * hp->head_dim, max_in = max_matmul_in(a, hp);
    uint64_t kv = (uint64_t)(hp->n_layer - r->l0) * r->n_seq * n_ctx * KVD;
    r->kv16 = ebb__ref_kv16(p->device, p->kv_type, hp->head_dim);
    r->kv_es = r->kv16 ? 2 : 4;
    r->k_cache = alloc_elems(r, kv ? kv : 1, r->kv_es, &fail);
    r->v_cache = alloc_elems(r, kv ? kv : 1, r->kv_es, &fail);
    r->rope_cos = alloc_floats(r, (uint64_t)n_ctx * (hp->n_rot / 2), &fail);
    r->rope_sin = alloc_floats(r, (uint64_t)n_ctx * (hp->n_rot / 2), &fail);
    if (hp->swa && hp->rope_base_swa > 0) {
        r->rope_cos_swa = alloc_floats(r, (uint64_t)n_ctx * (hp->n_rot / 2), &fail);
        r->rope_sin_swa = alloc_floats(r, (uint64_t)n_ctx * (hp->n_rot / 2), &fail);
    }
    for (int b = 0; b < EBB__N_BUF; b++) {
        r->width[b] = ebb__arch_buf_width(hp, b);
        r->buf[b] = alloc_floats(r, (uint64_t)BATCH * r->width[b], &fail);
        touch_floats(r->buf[b], (uint64_t)BATCH * r->width[b]);
    }
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > EBB__REF_MAX_THREADS)
        n_threads = EBB__REF_MAX_THREADS;
    r->att = alloc_floats(r, (uint64_t)n_ctx * EBB__ATT_GROUP * (uint32_t)n_threads, &fail);
    for (int i = 0; i < n_threads; i++)
        r->rowbuf[i] = alloc_floats(r, max_in, &fail);
    bool cpu = p->device && !strcmp(p->device, "cpu");
    r->cpu = cpu;
    r->q8 = cpu || (p->device && !strcmp(p->device, "ref-q8"));
    r->kq8 = cpu;
    r->kv_q8 = p->kv_type == EBB_KV_Q8_0;
    if (r->kv_q8 && hp->head_dim % 32) {
        rc = ebb_diag_set(diag, EBB_EUNSUPPORTED,
                          "--kv-type q8_0 needs a head dimension that is a multiple of 32 (this "
                          "model's is %u)",
                          hp->head_dim);
        goto out;
    }
    if (r->q8) {
        r->xact = ref_calloc(r, (uint64_t)BATCH * (max_in / 32), sizeof(*r->xact));
        fail |= r->xact == NULL;
    }
    if (cpu) {
        r->xsum =
            ref_calloc(r, (uint64_t)BATCH * (max_in / 32 ? max_in / 32 : 1), sizeof(*r->xsum));
        fail |= r->xsum == NULL;
        r->gelu_tab = alloc_floats(r, EBB__GELU_TAB, &fail);
        if (r->gelu_tab)
            ebb__ref_gelu_table(r->gelu_tab);
    }
    if (r->kq8 && max_in >= EBB_QK_K) {
        r->xk = ref_calloc(r, (uint64_t)BATCH * (max_in / EBB_QK_K), sizeof(*r->xk));
        fail |= r->xk == NULL;
    }
    if (fail) {
        rc = ebb_diag_set(diag, EBB_ENOMEM,
                          "reference backend: out of memory for a %u-token "
                          "context (KV cache %.0f MiB)",
                          n_ctx, 2.0 * (double)kv * sizeof(float) / 1048576.0);
        goto out;
    }
    for (uint32_t i = 0; i < a->n_layer_ops; i++)
        if (a->layer[i].kind == EBB__OP_MOE && !r->moe.logits && (rc = ebb__ref_moe_alloc(r, diag)))
            goto out;
    bool scaled;
    float *ff = calloc(hp->n_rot / 2 + 1, sizeof(float));
    if (!ff || (rc = ebb__arch_rope_freqs(a, &r->hp, g, ff, &scaled, diag))) {
        if (!rc)
            rc = ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
        free(ff);
        goto out;
    }
    rope_tables(r, ff);
    free(ff);
    if (cpu && (rc = repack(r, diag)))
        goto out;
    /* Decode (one token) on the repacked rows too, where they exist: no horizontal sum per
     * block, one sequential stream per group, the same bits (docs/PERFORMANCE.md, "Decode on
     * the repacked rows");
     * EBB_CPU_REPACK_DECODE=0 reads the mapping's rows for fewer than four tokens. */
    const char *rd = getenv("EBB_CPU_REPACK_DECODE");
    r->rp8_min = rd && !strcmp(rd, "0") ? 4 : 1;
    r->fast = host || cpu;
    /* Host engines poll briefly (2000 pauses, some 0.1 ms) between products, then sleep
     * (EBB_HOST_SPINS sets the polls; 0 sleeps at once, for machines with fewer free cores than
     * threads). The CPU device polls as much unless EBB_HOST_SPINS is set, but each waiter stops
     * while most of its polls run out (spin_adapt): on this loaded 2-core machine SmolLM2's
     * decode went from 6.8-8.1 tok/s with 2000 polls to 15.8-30.7 without, and on it quiet
     * from 31-38 without to 43-46 with (docs/PERFORMANCE.md, "The CPU device" and "CPU-device
     * prefill"). */
    const char *sp = getenv("EBB_HOST_SPINS");
    r->spins = !(host || cpu) ? 0 : sp && *sp ? atoi(sp) : 2000;
    r->spin_adapt = cpu && !(sp && *sp);
    ebb__ref_start_helper(r, n_threads);
out:
    if (rc) {
        ref_free(r);
        return rc;
    }
    *out = r;
    return EBB_OK;
}

ebb_err ebb__ref_backend_new(const struct ebb__arch *a, const struct ebb__hparams *hp,
                             const struct ebb_gguf *g, const struct ebb_model_params *p,
                             uint32_t n_ctx, const struct ebb__backend_i **iface, void **ctx,
                             struct ebb_diag *diag)
{
    const char *env = getenv("EBB_REF_THREADS");
    bool cpu = p->device && !strcmp(p->device, "cpu");
    int threads = env && atoi(env) == 1 ? 1 : 2;
    if (cpu) /* --host-threads, else the physical cores */
        threads = p->host_threads ? (int)p->host_threads : ebb__model_physical_cores();
    struct ref *r;
    ebb_err rc = ref_new(a, hp, g, p, n_ctx, 0, threads, false, &r, diag);
    if (rc)
        return rc;
    if (cpu) {
        snprintf(r->name, sizeof(r->name), "cpu (%d threads, %s)", r->n_threads,
                 ebb_quant_simd_name());
        r->iface = ref_iface;
        r->iface.name = r->name;
        r->iface.eval_batch = cpu_eval_batch;
        *iface = &r->iface;
    } else {
        *iface = r->q8 ? &ref_q8_iface : &ref_iface;
    }
    *ctx = r;
    return EBB_OK;
}

/* ---- host layers of the OpenCL engine (model-int.h) ---- */

ebb_err ebb__ref_host_new(const struct ebb__arch *a, const struct ebb__hparams *hp,
                          const struct ebb_gguf *g, uint32_t n_ctx, uint32_t n_seq, uint32_t l0,
                          int n_threads, bool q8, struct ebb__ref_host **out, struct ebb_diag *diag)
{
    struct ebb_model_params p = {.n_seq = n_seq, .device = q8 ? "ref-q8" : NULL};
    struct ref *r;
    ebb_err rc = ref_new(a, hp, g, &p, n_ctx, l0, n_threads, true, &r, diag);
    if (rc)
        return rc;
    *out = (struct ebb__ref_host *)r;
    return EBB_OK;
}

void ebb__ref_host_free(struct ebb__ref_host *h)
{
    ref_free(h);
}

int ebb__ref_host_threads(const struct ebb__ref_host *h)
{
    return ((const struct ref *)h)->n_threads;
}

ebb_err ebb__ref_host_layer(struct ebb__ref_host *h, uint32_t l, uint32_t seq, uint32_t pos,
                            float *x, uint32_t n, struct ebb_diag *diag)
{
    struct ref *r = (struct ref *)h;
    const uint32_t D = r->hp.n_embd;
    if (l < r->l0 || l >= r->hp.n_layer || seq >= r->n_seq || (uint64_t)pos + n > r->n_ctx)
        return ebb_diag_set(diag, EBB_EINVAL, "host layer %u: bad request (slot %u, %u at %u)", l,
                            seq, n, pos);
    for (uint32_t done = 0; done < n;) {
        uint32_t c = n - done < BATCH ? n - done : BATCH;
        struct step s = {NULL, seq, c, pos + done, l, 0};
        memcpy(r->buf[EBB__BUF_X], x + (uint64_t)done * D, sizeof(float) * c * D);
        run_prog(r, r->a->layer, r->a->n_layer_ops, &s);
        memcpy(x + (uint64_t)done * D, r->buf[EBB__BUF_X], sizeof(float) * c * D);
        done += c;
    }
    return EBB_OK;
}

ebb_err ebb__ref_host_kv_copy(struct ebb__ref_host *h, uint32_t src, uint32_t dst, uint32_t n)
{
    return ref_kv_copy(h, src, dst, n, NULL);
}
