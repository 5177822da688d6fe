/* The moe step on OpenCL (cl_kernels/moe.cl): the feed-forward block of a mixture-of-experts
 * layer. model-cl-layer.c RMS-norms the input into m->h (not for one token on 8-bit inputs,
 * which folds the norm); ebb__clm_moe_router runs the router's product into the scores buffer
 * this file provides; then (ebb__clm_moe_experts) moe_route keeps each row's top k with their
 * weights on the device (no read-back), moe_gather runs the chosen experts' gate rows and then
 * their up rows (one launch each covering the k experts), and moe_down runs their down rows
 * with the SwiGLU, the weights, the sum over the k experts and the residual add folded in.
 * Decode of one token on 8-bit inputs takes three launches where it can: moe_router_q8 (the
 * router's product and the experts' quantized input), moe_gate_up_q8 (the top k found in each
 * work-group, both stacks, the SwiGLU quantized) and moe_down_q8. Only the chosen experts' rows
 * are read. Each expert stack is one weight of n_expert x rows rows (placed like any other,
 * model-cl-place.c). */
#include "model-cl-int.h"

#define MOE_ROUTE_WG 128 /* moe.cl's moe_route work-group: one per token */

#include <stdlib.h>

/* The moe.cl program for w's layout, built on first use. */
static ebb_err prog_for(struct clm *m, const struct ebb_cl_weight *w, struct clm_moe_prog **out,
                        struct ebb_diag *diag)
{
    struct clm_moe *mo = &m->moe;
    for (uint32_t i = 0; i < mo->n_progs; i++) {
        const struct ebb_cl_layout *l = &mo->progs[i].layout;
        if (l->type == w->layout.type && l->storage == w->layout.storage &&
            l->order == w->layout.order) {
            *out = &mo->progs[i];
            return EBB_OK;
        }
    }
    if (mo->n_progs == sizeof(mo->progs) / sizeof(mo->progs[0]))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "too many expert weight layouts");
    struct clm_moe_prog *p = &mo->progs[mo->n_progs];
    ebb_err rc = ebb_cl_moe_build(m->cl, &w->layout, &m->tu, &p->prog, diag);
    if (rc)
        return rc;
    p->layout = w->layout;
    mo->n_progs++;
    if ((rc = ebb_cl_kernel(p->prog, "moe_gather", &p->gather, diag)) ||
        (rc = ebb_cl_kernel(p->prog, "moe_down", &p->down, diag)) ||
        (!mo->route && (rc = ebb_cl_kernel(p->prog, "moe_route", &mo->route, diag))))
        return rc;
    if (w->layout.order == EBB_CL_ORDER_RAW &&
        (rc = ebb_cl_kernel(p->prog, "moe_gather2", &p->gather2, diag)))
        return rc;
    if (ebb_cl_layout_has_kq8(&w->layout, &m->tu) &&
        ((rc = ebb_cl_kernel(p->prog, "moe_gather_q8", &p->gather_q8, diag)) ||
         (rc = ebb_cl_kernel(p->prog, "moe_down_q8", &p->down_q8, diag)) ||
         (rc = ebb_cl_kernel(p->prog, "moe_gate_up_q8", &p->gate_up_q8, diag)) ||
         (rc = ebb_cl_kernel(p->prog, "moe_router_q8", &p->router_q8, diag))))
        return rc;
    *out = p;
    return EBB_OK;
}

/* The scratch, once. */
static ebb_err scratch(struct clm *m, struct ebb_diag *diag)
{
    struct clm_moe *mo = &m->moe;
    if (mo->gu)
        return EBB_OK;
    const struct ebb__hparams *hp = &m->hp;
    size_t f = sizeof(float), k = hp->n_expert_used;
    ebb_err rc;
    if ((rc = ebb__clm_alloc(m, m->n_batch * f * hp->n_expert, &mo->scores, "router scores",
                             diag)) ||
        (rc = ebb__clm_alloc(m, m->n_batch * sizeof(cl_int) * k, &mo->ids, "expert ids", diag)) ||
        (rc = ebb__clm_alloc(m, m->n_batch * f * k, &mo->w, "expert weights", diag)) ||
        (rc = ebb__clm_alloc(m, m->n_batch * f * 2 * k * hp->n_ff_exp, &mo->gu, "expert outputs",
                             diag)) ||
        (rc = ebb__clm_alloc(m, k * hp->n_ff_exp, &mo->gq, "expert outputs", diag)) ||
        (rc = ebb__clm_alloc(m, 2 * f * (k * hp->n_ff_exp / 32 + 1), &mo->gd, "expert outputs",
                             diag)))
        return rc;
    /* EBB_CL_MOEFUSE=0: decode on 8-bit inputs in the seven launches of before (measurements). */
    mo->fuse = m->tu.moe_fuse != 0;
    return EBB_OK;
}

/* y[.., y_off..] = the k chosen experts' rows of stack w times x (rows of x_ld). */
static ebb_err gather(struct clm *m, const struct ebb_cl_weight *w, cl_mem ids, cl_mem x, int x_ld,
                      int y_off, int nt, struct ebb_diag *diag)
{
    struct clm_moe *mo = &m->moe;
    struct clm_moe_prog *p = NULL;
    ebb_err rc = prog_for(m, w, &p, diag);
    if (rc)
        return rc;
    int n_in = (int)w->n_in, rows = (int)m->hp.n_ff_exp, k = (int)m->hp.n_expert_used;
    int y_ld = 2 * k * rows;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in),   EBB_CL_ARG(rows), EBB_CL_ARG(k),
                             EBB_CL_ARG(ids),    EBB_CL_ARG(x),    EBB_CL_ARG(x_ld),
                             EBB_CL_ARG(mo->gu), EBB_CL_ARG(y_ld), EBB_CL_ARG(y_off)};
    size_t g[2] = {(size_t)k * rows * m->tu.mv_wg, (size_t)nt}, l[2] = {m->tu.mv_wg, 1};
    if ((rc = ebb_cl_weight_set_args(w, p->gather, 0, diag)) ||
        (rc = ebb_cl_set_args(p->gather, 2, a, 9, diag)))
        return rc;
    return ebb_cl_run(m->cl, p->gather, 2, g, l, diag);
}

/* gather over the gate and up stacks w[0..1] into m->moe.gu in one launch (moe_gather2) where
 * they share a raw layout; EBB_EUNSUPPORTED (nothing run) where not. */
static ebb_err gather2(struct clm *m, const struct ebb_cl_weight *const w[2], cl_mem ids, int nt,
                       struct ebb_diag *diag)
{
    struct clm_moe *mo = &m->moe;
    struct clm_moe_prog *pg = NULL, *pu = NULL;
    ebb_err rc;
    if ((rc = prog_for(m, w[0], &pg, diag)) || (rc = prog_for(m, w[1], &pu, diag)))
        return rc;
    if (!mo->fuse || pg != pu || !pg->gather2 || w[0]->n_in != w[1]->n_in)
        return EBB_EUNSUPPORTED;
    int n_in = (int)w[0]->n_in, rows = (int)m->hp.n_ff_exp, k = (int)m->hp.n_expert_used;
    int x_ld = (int)m->hp.n_embd, y_ld = 2 * k * rows;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in),   EBB_CL_ARG(rows), EBB_CL_ARG(k),
                             EBB_CL_ARG(ids),    EBB_CL_ARG(m->h), EBB_CL_ARG(x_ld),
                             EBB_CL_ARG(mo->gu), EBB_CL_ARG(y_ld)};
    size_t g[2] = {(size_t)2 * k * rows * m->tu.mv_wg, (size_t)nt}, l[2] = {m->tu.mv_wg, 1};
    if ((rc = ebb_cl_weight_set_args(w[0], pg->gather2, 0, diag)) ||
        (rc = ebb_cl_weight_set_args(w[1], pg->gather2, 2, diag)) ||
        (rc = ebb_cl_set_args(pg->gather2, 4, a, 8, diag)))
        return rc;
    return ebb_cl_run(m->cl, pg->gather2, 2, g, l, diag);
}

/* The moe.cl programs of the three stacks w where all take 8-bit inputs (kq8.cl), else
 * EBB_EUNSUPPORTED. */
static ebb_err q8_progs(struct clm *m, const struct ebb_cl_weight *const w[3],
                        struct clm_moe_prog *p[3], struct ebb_diag *diag)
{
    if (!m->k_q8 || m->hp.n_embd % 32 || m->hp.n_ff_exp % 32)
        return EBB_EUNSUPPORTED;
    for (int i = 0; i < 3; i++) {
        ebb_err rc = prog_for(m, w[i], &p[i], diag);
        if (rc)
            return rc;
        if (!p[i]->gather_q8 || w[i]->off % 16)
            return EBB_EUNSUPPORTED;
    }
    return EBB_OK;
}

/* Whether one token's gate and up stacks w[0..1] run in one moe_gate_up_q8 launch (same
 * layout, 8-bit inputs): then it can also find the top k itself. */
static bool gate_up_fused(struct clm *m, const struct ebb_cl_weight *const w[3])
{
    struct clm_moe_prog *p[3];
    return m->moe.fuse && q8_progs(m, w, p, NULL) == EBB_OK && p[0] == p[1] && p[0]->gate_up_q8 &&
           m->hp.n_expert <= 1024 && m->hp.n_expert_used <= 64 &&
           m->tu.mv_wg <= ebb_cl_moe_gu_wg(&m->tu);
}

/* Decode (one token) on 8-bit inputs, where the three stacks' layouts have kq8 (kq8.cl): the
 * experts' input m->h (or m->x normed with nw inside the quantization) quantized once for the
 * gate and up stacks, unless moe_router_q8 did it (mo->xq_ready); then moe_gate_up_q8 (with
 * route, finding the top k of the scores itself and writing mo->ids / mo->w) or two
 * moe_gather_q8 and quantize_x8 with the SwiGLU folded; then moe_down_q8. Returns
 * EBB_EUNSUPPORTED (nothing run) where it does not apply, so that the float kernels take it. */
static ebb_err experts_q8(struct clm *m, const struct ebb_cl_weight *const w[3], cl_mem ids,
                          cl_mem nw, bool route, struct ebb_diag *diag)
{
    struct clm_moe *mo = &m->moe;
    struct clm_moe_prog *p[3];
    int n_embd = (int)m->hp.n_embd, f = (int)m->hp.n_ff_exp, k = (int)m->hp.n_expert_used;
    ebb_err rc = q8_progs(m, w, p, diag);
    if (rc)
        return rc;
    if (!mo->xq_ready && (rc = ebb__clm_q8_quantize(m, nw ? m->x : m->h, n_embd, nw, 0, diag)))
        return rc;
    size_t l[2] = {m->tu.mv_wg, 1};
    cl_mem dq = m->xq, dd = m->xd; /* moe_down_q8's input */
    if (gate_up_fused(m, w)) {
        cl_mem scores = route ? mo->scores : NULL;
        int n_expert = (int)m->hp.n_expert, norm = (int)m->hp.expert_norm;
        float scale = m->hp.expert_scale;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(n_embd), EBB_CL_ARG(f),        EBB_CL_ARG(k),
                                 EBB_CL_ARG(scores), EBB_CL_ARG(n_expert), EBB_CL_ARG(norm),
                                 EBB_CL_ARG(scale),  EBB_CL_ARG(ids),      EBB_CL_ARG(mo->w),
                                 EBB_CL_ARG(m->xq),  EBB_CL_ARG(m->xd),    EBB_CL_ARG(mo->gq),
                                 EBB_CL_ARG(mo->gd)};
        /* a work-group per 32 rows of an expert */
        size_t lg = ebb_cl_moe_gu_wg(&m->tu), g = (size_t)k * (size_t)(f / 32) * lg;
        if ((rc = ebb_cl_weight_set_args(w[0], p[0]->gate_up_q8, 0, diag)) ||
            (rc = ebb_cl_weight_set_args(w[1], p[0]->gate_up_q8, 2, diag)) ||
            (rc = ebb_cl_set_args(p[0]->gate_up_q8, 4, a, 13, diag)) ||
            (rc = ebb_cl_run(m->cl, p[0]->gate_up_q8, 1, &g, &lg, diag)))
            return rc;
        dq = mo->gq, dd = mo->gd;
    } else {
        for (int i = 0; i < 2 && !rc; i++) {
            int y_off = i * k * f;
            struct ebb_cl_arg a[] = {EBB_CL_ARG(n_embd), EBB_CL_ARG(f),     EBB_CL_ARG(k),
                                     EBB_CL_ARG(ids),    EBB_CL_ARG(m->xq), EBB_CL_ARG(m->xd),
                                     EBB_CL_ARG(mo->gu), EBB_CL_ARG(y_off)};
            size_t g[2] = {(size_t)k * f * m->tu.mv_wg, 1};
            if (!(rc = ebb_cl_weight_set_args(w[i], p[i]->gather_q8, 0, diag)) &&
                !(rc = ebb_cl_set_args(p[i]->gather_q8, 2, a, 8, diag)))
                rc = ebb_cl_run(m->cl, p[i]->gather_q8, 2, g, l, diag);
        }
        if (rc || (rc = ebb__clm_q8_quantize(m, mo->gu, k * f, NULL, 1, diag)))
            return rc;
    }
    struct ebb_cl_arg a[] = {EBB_CL_ARG(f),   EBB_CL_ARG(n_embd), EBB_CL_ARG(k),
                             EBB_CL_ARG(ids), EBB_CL_ARG(mo->w),  EBB_CL_ARG(dq),
                             EBB_CL_ARG(dd),  EBB_CL_ARG(m->x),   EBB_CL_ARG(m->x)};
    size_t dl = ebb_cl_moe_dn_l(&m->tu), g[2] = {(size_t)n_embd * dl, 1}, ld[2] = {dl, 1};
    if ((rc = ebb_cl_weight_set_args(w[2], p[2]->down_q8, 0, diag)) ||
        (rc = ebb_cl_set_args(p[2]->down_q8, 2, a, 9, diag)))
        return rc;
    return ebb_cl_run(m->cl, p[2]->down_q8, 2, g, ld, diag);
}

/* m->x += the weighted sum of the chosen experts' down rows over their SwiGLU outputs. */
static ebb_err down(struct clm *m, const struct ebb_cl_weight *w, cl_mem ids, int nt,
                    struct ebb_diag *diag)
{
    struct clm_moe *mo = &m->moe;
    struct clm_moe_prog *p = NULL;
    ebb_err rc = prog_for(m, w, &p, diag);
    if (rc)
        return rc;
    int n_in = (int)m->hp.n_ff_exp, n_out = (int)m->hp.n_embd, k = (int)m->hp.n_expert_used;
    int g_ld = 2 * k * n_in;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(n_out), EBB_CL_ARG(k),
                             EBB_CL_ARG(ids),  EBB_CL_ARG(mo->w), EBB_CL_ARG(mo->gu),
                             EBB_CL_ARG(g_ld), EBB_CL_ARG(m->x),  EBB_CL_ARG(n_out),
                             EBB_CL_ARG(m->x)};
    size_t g[2] = {(size_t)n_out * m->tu.mv_wg, (size_t)nt}, l[2] = {m->tu.mv_wg, 1};
    if ((rc = ebb_cl_weight_set_args(w, p->down, 0, diag)) ||
        (rc = ebb_cl_set_args(p->down, 2, a, 10, diag)))
        return rc;
    return ebb_cl_run(m->cl, p->down, 2, g, l, diag);
}

/* The three expert stacks ws (gate, up, down) over nt rows of m->h into m->x, the k experts of
 * each row read as rows ids[row * k + j] of each stack (-1: that row skipped), weighted by the
 * router's weights; with route (one token, gate_up_fused) the top k not yet chosen. */
static ebb_err run(struct clm *m, const struct ebb_cl_weight *const ws[3], cl_mem ids, int nt,
                   cl_mem nw, bool route, struct ebb_diag *diag)
{
    int n_embd = (int)m->hp.n_embd, kf = (int)(m->hp.n_expert_used * m->hp.n_ff_exp);
    ebb_err rc;
    if (nt == 1) {
        rc = experts_q8(m, ws, ids, nw, route, diag);
        if (rc != EBB_EUNSUPPORTED || nw) /* nw: prepare found the 8-bit path, m->h unset */
            return rc;
    }
    struct clm_moe_prog *gp[3];
    for (int i = 0; i < 3; i++)
        if ((rc = prog_for(m, ws[i], &gp[i], diag)))
            return rc;
    if ((rc = ebb__clm_moe_group(m, ws, gp, ids, nt, diag)) != EBB_EUNSUPPORTED)
        return rc;
    rc = gather2(m, ws, ids, nt, diag);
    if (rc == EBB_EUNSUPPORTED && !(rc = gather(m, ws[0], ids, m->h, n_embd, 0, nt, diag)))
        rc = gather(m, ws[1], ids, m->h, n_embd, kf, nt, diag);
    if (rc)
        return rc;
    return down(m, ws[2], ids, nt, diag);
}

/* Whether layer L's stacks are held by the expert cache (a layer of m->layers, never a
 * streamed copy). */
static bool cached(const struct clm *m, const struct layer *L, const struct clm_step *s)
{
    return m->xc && !L->n_w[s->group + 1] && L >= m->layers && L < m->layers + m->hp.n_layer;
}

ebb_err ebb__clm_moe_prepare(struct clm *m, const struct layer *L, const struct clm_step *s,
                             cl_mem *scores, bool *q8, struct ebb_diag *diag)
{
    struct clm_moe_prog *p[3] = {NULL};
    const struct ebb_cl_weight *ws[3] = {&L->w[s->group + 1][0], &L->w[s->group + 2][0],
                                         &L->w[s->group + 3][0]};
    /* A layer whose stacks the expert cache holds: its programs and the 8-bit path are
     * decided on its slot pool's weights (raw rows), the ones its passes run. */
    if (cached(m, L, s)) {
        const struct ebb_cl_weight *xw = ebb__clm_xc_stacks(m, (uint32_t)(L - m->layers));
        for (int i = 0; i < 3; i++)
            ws[i] = &xw[i];
    }
    ebb_err rc = scratch(m, diag);
    if (!rc)
        rc = prog_for(m, ws[0], &p[0], diag); /* also makes moe_route */
    *q8 = false;
    if (!rc) {
        rc = q8_progs(m, ws, p, diag);
        *q8 = !rc;
        rc = rc == EBB_EUNSUPPORTED ? EBB_OK : rc;
    }
    m->moe.q8 = *q8 ? p[0] : NULL;
    *scores = m->moe.scores;
    return rc;
}

ebb_err ebb__clm_moe_router(struct clm *m, const struct layer *L, const struct clm_step *s, int nt,
                            cl_mem nw, struct ebb_diag *diag)
{
    struct clm_moe *mo = &m->moe;
    const struct ebb_cl_weight *r = &L->w[s->group][0];
    int n_embd = (int)m->hp.n_embd, n_expert = (int)m->hp.n_expert;
    mo->xq_ready = false;
    bool f32 = r->layout.type == EBB_GGML_F32 && r->layout.order == EBB_CL_ORDER_RAW &&
               r->layout.storage == EBB_CL_STORE_BUFFER && r->off % 4 == 0 &&
               m->tu.mv_wg <= EBB_CL_Q8_WG;
    if (!nw || nt != 1 || !mo->fuse || !mo->q8 || !mo->q8->router_q8 || !f32 ||
        r->n_in != m->hp.n_embd || r->n_out != m->hp.n_expert)
        return EBB_EUNSUPPORTED; /* the caller runs the ordinary product */
    /* One launch: the router's rows (MV_WG work-items each), then x's quantization. */
    float eps = m->hp.rms_eps;
    cl_ulong off = r->off;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(m->x),     EBB_CL_ARG(n_embd),     EBB_CL_ARG(nw),
                             EBB_CL_ARG(eps),      EBB_CL_ARG(r->a),       EBB_CL_ARG(off),
                             EBB_CL_ARG(n_expert), EBB_CL_ARG(mo->scores), EBB_CL_ARG(m->xq),
                             EBB_CL_ARG(m->xd)};
    size_t rows = ebb_cl_moe_rt_rows(&m->tu), n_rg = ((size_t)n_expert + rows - 1) / rows;
    size_t n_qg = ((size_t)n_embd + EBB_CL_Q8_WG - 1) / EBB_CL_Q8_WG;
    size_t g = (n_rg + n_qg) * EBB_CL_Q8_WG, l = EBB_CL_Q8_WG;
    ebb_err rc = ebb_cl_set_args(mo->q8->router_q8, 0, a, 10, diag);
    if (!rc)
        rc = ebb_cl_run(m->cl, mo->q8->router_q8, 1, &g, &l, diag);
    mo->xq_ready = !rc;
    return rc;
}

ebb_err ebb__clm_moe_route(struct clm *m, int nt, struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    struct clm_moe *mo = &m->moe;
    int n_expert = (int)hp->n_expert, k = (int)hp->n_expert_used;
    int norm = (int)hp->expert_norm;
    float scale = hp->expert_scale;
    struct ebb_cl_arg ra[] = {EBB_CL_ARG(mo->scores), EBB_CL_ARG(n_expert), EBB_CL_ARG(k),
                              EBB_CL_ARG(norm),       EBB_CL_ARG(scale),    EBB_CL_ARG(mo->ids),
                              EBB_CL_ARG(mo->w)};
    size_t rg[2] = {MOE_ROUTE_WG, (size_t)nt}, rl[2] = {MOE_ROUTE_WG, 1};
    ebb_err rc = ebb_cl_set_args(mo->route, 0, ra, 7, diag);
    return rc ? rc : ebb_cl_run(m->cl, mo->route, 2, rg, rl, diag);
}

ebb_err ebb__clm_moe_grouped(struct clm *m, const struct ebb_cl_weight *const ws[3],
                             const struct clm_moe_gbufs *b, int nt, int n_tiles,
                             struct ebb_diag *diag)
{
    struct clm_moe_prog *gp[3];
    ebb_err rc;
    for (int i = 0; i < 3; i++)
        if ((rc = prog_for(m, ws[i], &gp[i], diag)))
            return rc;
    return ebb__clm_moe_group_launch(m, ws, gp, b, nt, n_tiles, diag);
}

ebb_err ebb__clm_moe_experts(struct clm *m, const struct layer *L, const struct clm_step *s, int nt,
                             cl_mem nw, struct ebb_diag *diag)
{
    struct clm_moe *mo = &m->moe;
    const struct ebb_cl_weight *ws[3] = {&L->w[s->group + 1][0], &L->w[s->group + 2][0],
                                         &L->w[s->group + 3][0]};
    /* One resident token on 8-bit inputs: moe_gate_up_q8 finds the top k itself. */
    bool route = nt == 1 && nw && !cached(m, L, s) && gate_up_fused(m, ws);
    ebb_err rc;
    if (!route && (rc = ebb__clm_moe_route(m, nt, diag)))
        return rc;
    /* A layer of m->layers whose stacks the expert cache holds (never a streamed copy): its
     * passes over the pool, through the slot table instead of the ids. */
    if (cached(m, L, s)) {
        const struct ebb_cl_weight *xs[3];
        cl_mem sids;
        bool ready = false;
        rc = ebb__clm_xc_begin(m, (uint32_t)(L - m->layers), nt, L->norm[s->norm], diag);
        while (!rc && !(rc = ebb__clm_xc_next(m, xs, &sids, &ready, diag)) && ready)
            rc = run(m, xs, sids, nt, nw, false, diag);
        return rc;
    }
    return run(m, ws, mo->ids, nt, nw, route, diag);
}

void ebb__clm_moe_fini(struct clm *m)
{
    struct clm_moe *mo = &m->moe;
    for (uint32_t i = 0; i < mo->n_progs; i++) {
        if (mo->progs[i].gather)
            clReleaseKernel(mo->progs[i].gather);
        if (mo->progs[i].down)
            clReleaseKernel(mo->progs[i].down);
        if (mo->progs[i].gather_q8)
            clReleaseKernel(mo->progs[i].gather_q8);
        if (mo->progs[i].down_q8)
            clReleaseKernel(mo->progs[i].down_q8);
        if (mo->progs[i].group_gu)
            clReleaseKernel(mo->progs[i].group_gu);
        if (mo->progs[i].group_down)
            clReleaseKernel(mo->progs[i].group_down);
        if (mo->progs[i].gather2)
            clReleaseKernel(mo->progs[i].gather2);
        if (mo->progs[i].gate_up_q8)
            clReleaseKernel(mo->progs[i].gate_up_q8);
        if (mo->progs[i].router_q8)
            clReleaseKernel(mo->progs[i].router_q8);
        if (mo->progs[i].prog)
            clReleaseProgram(mo->progs[i].prog);
    }
    if (mo->route)
        clReleaseKernel(mo->route);
    ebb__clm_moe_group_fini(m);
    cl_mem ms[] = {mo->scores, mo->ids, mo->w, mo->gu, mo->gq, mo->gd};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        if (ms[i])
            clReleaseMemObject(ms[i]);
    *mo = (struct clm_moe){0};
}
