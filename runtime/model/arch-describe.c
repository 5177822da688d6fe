/* A family's facts for `ebb info`: what its description does (read from its ops, so a new
 * family is described with nothing to add here) and which backends can run the file. */
#include "model.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "arch-int.h"
#include "model-cl-int.h"

struct sbuf {
    char *p;
    size_t cap, n;
};

static void add(struct sbuf *b, const char *fmt, ...)
{
    if (b->n >= b->cap)
        return;
    if (b->n) {
        int w = snprintf(b->p + b->n, b->cap - b->n, ", ");
        b->n += w > 0 ? (size_t)w : 0;
        if (b->n >= b->cap)
            return;
    }
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += w > 0 ? (size_t)w : 0;
}

/* The first op of the layer program of kind k (and, with arg >= 0, that argument), or NULL. */
static const struct ebb__op *find_op(const struct ebb__arch *a, enum ebb__op_kind k, int arg)
{
    for (uint32_t i = 0; i < a->n_layer_ops; i++)
        if (a->layer[i].kind == k && (arg < 0 || a->layer[i].arg == arg))
            return &a->layer[i];
    return NULL;
}

/* Llama 3.1's rope scaling: the keys when the file has them, the divisors' range either way
 * (from rope_freqs.weight when present). */
static void rope_freqs(const struct ebb__arch *a, const struct ebb__hparams *hp,
                       const struct ebb_gguf *g, struct sbuf *b)
{
    float ff[512];
    bool scaled = false;
    struct ebb_diag d = {{0}};
    if (hp->n_rot / 2 > 512 || ebb__arch_rope_freqs(a, hp, g, ff, &scaled, &d))
        return;
    if (hp->rope_longrope) {
        struct ebb__hparams h = *hp;
        float lo[2], hi[2];
        for (int set = 0; set < 2; set++) {
            h.n_ctx_run = set ? UINT32_MAX : 0;
            if (ebb__arch_rope_freqs(a, &h, g, ff, &scaled, &d))
                return;
            lo[set] = hi[set] = ff[0];
            for (uint32_t i = 1; i < hp->n_rot / 2; i++) {
                lo[set] = ff[i] < lo[set] ? ff[i] : lo[set];
                hi[set] = ff[i] > hi[set] ? ff[i] : hi[set];
            }
        }
        add(b,
            "longrope (divisors %.3g-%.3g up to context %u, %.3g-%.3g above; attention factor "
            "%.4g)",
            (double)lo[0], (double)hi[0], hp->rope_orig_ctx, (double)lo[1], (double)hi[1],
            (double)hp->attn_factor);
        return;
    }
    if (hp->rope_llama3)
        add(b, "llama3 rope scaling x%g (low %g, high %g, original context %u)",
            (double)hp->rope_factor, (double)hp->rope_low_freq, (double)hp->rope_high_freq,
            hp->rope_orig_ctx);
    if (!scaled)
        return;
    float lo = ff[0], hi = ff[0];
    for (uint32_t i = 1; i < hp->n_rot / 2; i++) {
        lo = ff[i] < lo ? ff[i] : lo;
        hi = ff[i] > hi ? ff[i] : hi;
    }
    add(b, "rope frequency divisors %.3g-%.3g%s", (double)lo, (double)hi,
        ebb_gguf_find_tensor(g, "rope_freqs.weight") ? " (rope_freqs.weight)" : "");
}

static void features(const struct ebb__arch *a, const struct ebb__hparams *hp,
                     const struct ebb_gguf *g, struct sbuf *b)
{
    for (uint32_t i = 0; i < a->n_input; i++)
        if (a->input[i].kind == EBB__OP_SCALE)
            add(b, "scaled embeddings");
    if (find_op(a, EBB__OP_SPLIT, 3))
        add(b, "fused q|k|v");
    if (find_op(a, EBB__OP_ADD_BIAS, -1))
        add(b, "q|k|v bias");
    if (find_op(a, EBB__OP_HEAD_NORM, -1))
        add(b, "q/k head norms");
    for (uint32_t i = 0; i < a->n_layer_ops; i++)
        if (a->layer[i].kind == EBB__OP_RMS_NORM && a->layer[i].dst == EBB__BUF_OUT) {
            add(b, "post-block norms");
            break;
        }
    const struct ebb__op *r = find_op(a, EBB__OP_ROPE, -1);
    if (r)
        add(b, "rope %s over %u dims", r->arg == EBB__ROPE_NEOX ? "neox" : "normal", hp->n_rot);
    if (hp->rope_scale != 1.0f)
        add(b, "linear rope scaling x%g", (double)hp->rope_scale);
    rope_freqs(a, hp, g, b);
    if (find_op(a, EBB__OP_SPLIT, 2))
        add(b, "fused gate|up");
    const struct ebb__op *glu = find_op(a, EBB__OP_GLU, -1);
    if (glu)
        add(b, "%s gate", glu->arg == EBB__ACT_GELU_TANH ? "GELU-tanh" : "SiLU");
    const struct ebb__op *moe = find_op(a, EBB__OP_MOE, -1);
    if (moe) {
        add(b, "%u of %u experts per token (width %u, %s gate, softmax router%s)",
            hp->n_expert_used, hp->n_expert, hp->n_ff_exp,
            moe->arg == EBB__ACT_GELU_TANH ? "GELU-tanh" : "SiLU",
            hp->expert_norm ? ", weights renormalised" : "");
        if (hp->expert_scale != 0.0f && hp->expert_scale != 1.0f)
            add(b, "expert weights x%g", (double)hp->expert_scale);
    }
    if (hp->swa && hp->swa_pattern)
        add(b, "window %u on %u of %u layers", hp->swa, hp->swa_pattern - 1, hp->swa_pattern);
    else if (hp->swa)
        add(b, "window %u on all layers", hp->swa);
    const struct ebb__op *head = &a->output[a->n_output - 1];
    const struct ebb_gguf_tensor *ht = NULL, *et = NULL;
    struct ebb_diag d = {{0}};
    if (head->t >= 0 && !ebb__arch_tensor(a, hp, g, (uint32_t)head->t, 0, &ht, &d) &&
        !ebb__arch_tensor(a, hp, g, (uint32_t)a->input[0].t, 0, &et, &d))
        add(b, ht == et ? "tied output head" : "own output head");
}

ebb_err ebb_model_facts(const struct ebb_gguf *g, struct ebb_model_facts *f, struct ebb_diag *diag)
{
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    ebb_err rc = ebb__arch_read_hparams(g, &a, &hp, diag);
    if (!rc)
        rc = ebb__arch_check(a, &hp, g, diag);
    if (rc)
        return rc;
    memset(f, 0, sizeof(*f));
    f->n_layer = hp.n_layer;
    f->window = hp.swa;
    for (uint32_t l = 0; l < hp.n_layer; l++)
        f->n_local += ebb__arch_window(&hp, l) != 0;
    f->rope_base = hp.rope_base;
    f->rope_base_local = hp.swa && hp.rope_base_swa > 0 ? hp.rope_base_swa : hp.rope_base;
    if (find_op(a, EBB__OP_MOE, -1)) {
        f->n_expert = hp.n_expert;
        f->n_expert_used = hp.n_expert_used;
        f->n_ff_exp = hp.n_ff_exp;
    }
    f->rope_scaling = "none";
    f->rope_factor = 1.0f;
    float ff[512];
    bool scaled = false;
    struct ebb_diag d = {{0}};
    f->attn_factor = hp.attn_factor;
    if (hp.rope_longrope) {
        f->rope_scaling = "longrope";
        f->rope_orig_ctx = hp.rope_orig_ctx;
    } else if (hp.rope_llama3) {
        f->rope_scaling = "llama3";
        f->rope_factor = hp.rope_factor;
        f->rope_orig_ctx = hp.rope_orig_ctx;
    } else if (hp.n_rot / 2 <= 512 && !ebb__arch_rope_freqs(a, &hp, g, ff, &scaled, &d) && scaled) {
        f->rope_scaling = "freqs";
    } else if (hp.rope_scale != 1.0f) {
        f->rope_scaling = "linear";
        f->rope_factor = hp.rope_scale;
    }
    return EBB_OK;
}

bool ebb_model_layer_is_local(const struct ebb_gguf *g, uint32_t l)
{
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    struct ebb_diag d = {{0}};
    return !ebb__arch_read_hparams(g, &a, &hp, &d) && l < hp.n_layer && ebb__arch_window(&hp, l);
}

ebb_err ebb_model_describe(const struct ebb_gguf *g, char *family, size_t fcap, char *engines,
                           size_t ecap, struct ebb_diag *diag)
{
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    ebb_err rc = ebb__arch_read_hparams(g, &a, &hp, diag);
    if (!rc)
        rc = ebb__arch_check(a, &hp, g, diag);
    if (rc)
        return rc;
    struct sbuf b = {family, fcap, 0};
    if (fcap)
        family[0] = 0;
    features(a, &hp, g, &b);
    struct clm_plan plan;
    struct ebb_diag d = {{0}};
    if (ebb__clm_plan(a, &plan, &d))
        snprintf(engines, ecap, "ref (opencl refuses: %s)", d.msg);
    else
        snprintf(engines, ecap, "ref, opencl");
    return EBB_OK;
}
