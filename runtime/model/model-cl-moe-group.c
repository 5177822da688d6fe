/* Prefill of a mixture-of-experts block grouped by expert (cl_kernels/moe.cl, moe_group_*).
 * moe_gather and moe_down read the chosen experts' rows once per token: a chunk of 128 tokens
 * with 8 experts each reads an expert's rows ~8 times when 128 experts share the chunk, more
 * with skewed routing. Here the chosen ids come back to the host (one blocking read a layer), the
 * (token, j) pairs are sorted by expert with a counting sort, each expert's pairs are cut into
 * tiles of at most MOE_GT, and the gate, up and down kernels read each weight row once per tile.
 * The down kernel writes each pair's output apart (yp) and moe_group_sum adds the weighted sum
 * over the k experts to the residual in the same order as moe_down. The scratch and the host
 * arrays are allocated on first use, at most m->n_batch x k pairs, never per step.
 * A work-group (ebb_cl_moe_group_rows: its size and rows) takes one tile and a block of rows of its
 * expert: teams of MV_WG work-items reading neighbouring weights of a row (as moe_gather does),
 * each team a few rows, each work-item one sum for each of its rows and the tile's pairs; the
 * inputs of the tile's pairs are staged in local memory a slice at a time and the lanes' partial
 * sums are added through local memory at the end.
 * On GPUs from 8 rows by default (EBB_CL_MOE_GROUP=N moves that, 0: never): on the H100 these
 * kernels take Qwen3-30B-A3B's pp512 from 389 to 930 tok/s, and 1, 8 or 32 rows made no
 * difference there (docs/PERFORMANCE.md). Off on CPUs, where they have not been measured. */
#include <stdlib.h>
#include <string.h>

#include "model-cl-int.h"

#define MOE_GT 16 /* moe.cl: pairs a tile */

static ebb_err scratch(struct clm *m, uint32_t n_cnt, struct ebb_diag *diag)
{
    struct clm_moe_group *g = &m->moe.grp;
    if (g->perm)
        return EBB_OK;
    size_t pairs = (size_t)m->n_batch * m->hp.n_expert_used, n_embd = m->hp.n_embd;
    ebb_err rc;
    if ((rc = ebb__clm_alloc(m, pairs * sizeof(cl_int), &g->perm, "expert pairs", diag)) ||
        (rc = ebb__clm_alloc(m, pairs * sizeof(cl_int4), &g->tiles, "expert tiles", diag)) ||
        (rc = ebb__clm_alloc(m, pairs * n_embd * sizeof(float), &g->yp, "expert pair outputs",
                             diag)))
        return rc;
    g->h_ids = malloc(pairs * sizeof(int32_t));
    g->h_perm = malloc(pairs * sizeof(int32_t));
    g->h_tiles = malloc(pairs * 4 * sizeof(int32_t));
    g->h_cnt = malloc((size_t)n_cnt * sizeof(uint32_t));
    g->n_cnt = n_cnt;
    if (!g->h_ids || !g->h_perm || !g->h_tiles || !g->h_cnt)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory for the expert grouping");
    return EBB_OK;
}

/* The three programs' grouped kernels, made on first use. */
static ebb_err kernels(struct clm *m, struct clm_moe_prog *const p[3], struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    for (int i = 0; i < 3 && !rc; i++) {
        if (i < 2 && !p[i]->group_gu)
            rc = ebb_cl_kernel(p[i]->prog, "moe_group_gu", &p[i]->group_gu, diag);
        if (i == 2 && !p[i]->group_down)
            rc = ebb_cl_kernel(p[i]->prog, "moe_group_down", &p[i]->group_down, diag);
    }
    if (!rc && !m->moe.grp.sum)
        rc = ebb_cl_kernel(p[0]->prog, "moe_group_sum", &m->moe.grp.sum, diag);
    return rc;
}

/* The settings, read once. */
static void init(struct clm *m)
{
    struct clm_moe_group *g = &m->moe.grp;
    if (!g->init) {
        g->min_rows = m->tu.moe_group; /* EBB_CL_MOE_GROUP */
        g->no_mms = !m->tu.moe_mms;    /* EBB_CL_MOE_MMS */
        g->no_mmql = !m->tu.moe_mmql;  /* EBB_CL_MOE_MMQL */
        g->init = true;
    }
}

/* Whether the programs built for layout a serve layout b. */
static bool same_layout(const struct ebb_cl_layout *a, const struct ebb_cl_layout *b)
{
    return a->type == b->type && a->storage == b->storage && a->order == b->order;
}

/* moe_group_mms for the expert stack w (NULL where its layout has none): from the program
 * built with its tile for that layout, made on first use. */
static ebb_err mms_kernel(struct clm *m, const struct ebb_cl_weight *w, cl_kernel *out,
                          struct ebb_diag *diag)
{
    struct clm_moe_group *g = &m->moe.grp;
    *out = NULL;
    if (g->no_mms || !m->tu.mm_mma)
        return EBB_OK;
    uint32_t i = 0;
    while (i < g->n_mms && !same_layout(&g->mms[i].l, &w->layout))
        i++;
    if (i == g->n_mms) {
        if (i == sizeof(g->mms) / sizeof(g->mms[0]))
            return EBB_OK; /* (three products: never) */
        ebb_err rc = ebb_cl_moe_mms_build(m->cl, &w->layout, &m->tu, &g->mms[i].p, diag);
        if (rc)
            return rc;
        g->mms[i].l = w->layout;
        g->n_mms++;
    }
    *out = g->mms[i].p.moe_group_mms;
    return EBB_OK;
}

/* moe_group_mmql's kernels for the expert stack w (NULL where they do not apply: the knob off,
 * or w's layout without them), built on first use. */
static ebb_err mmql_kernels(struct clm *m, const struct ebb_cl_weight *w,
                            const struct ebb_cl_moe_mmql **out, struct ebb_diag *diag)
{
    struct clm_moe_group *g = &m->moe.grp;
    *out = NULL;
    init(m);
    if (g->no_mmql)
        return EBB_OK;
    uint32_t i = 0;
    while (i < g->n_mq && !same_layout(&g->mq[i].l, &w->layout))
        i++;
    if (i == g->n_mq) {
        if (i == sizeof(g->mq) / sizeof(g->mq[0]))
            return EBB_OK;
        ebb_err rc = ebb_cl_moe_mmql_build(m->cl, &w->layout, &m->tu, &g->mq[i].k, diag);
        if (rc)
            return rc;
        g->mq[i].l = w->layout;
        g->n_mq++;
    }
    *out = g->mq[i].k.group ? &g->mq[i].k : NULL;
    return EBB_OK;
}

/* moe_group_mmql's kernels for all three stacks in k (all NULL unless each has them). */
static ebb_err mmql_all(struct clm *m, const struct ebb_cl_weight *const ws[3],
                        const struct ebb_cl_moe_mmql *k[3], struct ebb_diag *diag)
{
    for (int i = 0; i < 3; i++) {
        ebb_err rc = mmql_kernels(m, ws[i], &k[i], diag);
        if (rc || !k[i]) {
            k[0] = k[1] = k[2] = NULL;
            return rc;
        }
    }
    return EBB_OK;
}

ebb_err ebb__clm_moe_group_gt(struct clm *m, const struct ebb_cl_weight *const ws[3], uint32_t *gt,
                              struct ebb_diag *diag)
{
    const struct ebb_cl_moe_mmql *k[3];
    init(m);
    *gt = MOE_GT;
    ebb_err rc = mmql_all(m, ws, k, diag);
    if (!rc && k[0]) {
        *gt = k[0]->t;
        for (int i = 1; i < 3; i++)
            *gt = k[i]->t < *gt ? k[i]->t : *gt;
    }
    return rc;
}

/* Sorts the nt x k pairs of g->h_ids by expert into g->h_perm and cuts them into tiles of at
 * most gt pairs; returns the number of tiles, or -1 when an id is out of range. */
static int sort_pairs(struct clm_moe_group *g, size_t n_pairs, uint32_t n_slots, uint32_t gt)
{
    memset(g->h_cnt, 0, (size_t)n_slots * sizeof(uint32_t));
    for (size_t p = 0; p < n_pairs; p++) {
        int32_t e = g->h_ids[p];
        if (e >= (int32_t)n_slots)
            return -1;
        if (e >= 0)
            g->h_cnt[e]++;
    }
    uint32_t at = 0;
    for (uint32_t e = 0; e < n_slots; e++) { /* counts become start offsets */
        uint32_t c = g->h_cnt[e];
        g->h_cnt[e] = at;
        at += c;
    }
    for (size_t p = 0; p < n_pairs; p++) {
        int32_t e = g->h_ids[p];
        if (e >= 0)
            g->h_perm[g->h_cnt[e]++] = (int32_t)p;
    }
    /* h_cnt[e] is now e's end; its start is the previous expert's end. */
    int n_tiles = 0;
    uint32_t start = 0;
    for (uint32_t e = 0; e < n_slots; e++) {
        for (uint32_t s = start; s < g->h_cnt[e]; s += gt) {
            int32_t *t = g->h_tiles + (size_t)n_tiles * 4;
            uint32_t n = g->h_cnt[e] - s;
            t[0] = (int32_t)e;
            t[1] = (int32_t)s;
            t[2] = (int32_t)(n < gt ? n : gt);
            t[3] = 0;
            n_tiles++;
        }
        start = g->h_cnt[e];
    }
    return n_tiles;
}

bool ebb__clm_moe_group_applies(struct clm *m, uint32_t nt)
{
    const struct ebb__hparams *hp = &m->hp;
    init(m);
    uint32_t wg, rows = ebb_cl_moe_group_rows(&m->tu, &wg);
    return m->moe.grp.min_rows && nt >= m->moe.grp.min_rows && nt <= m->n_batch &&
           hp->n_embd % 32 == 0 && hp->n_ff_exp % 32 == 0 && rows && m->cl->info.max_wg >= wg;
}

/* moe_group_mmql's int8 inputs for up to rows rows (and k of pairs each), allocated once for
 * the most rows a pass brings (a chunk, or a layer-major pass's xl_rows). */
static ebb_err mmql_scratch(struct clm *m, size_t rows, struct ebb_diag *diag)
{
    struct clm_moe_group *g = &m->moe.grp;
    if (!g->xq) {
        size_t n = m->n_batch > m->xl_rows ? m->n_batch : m->xl_rows, d = m->hp.n_embd;
        size_t pf = n * m->hp.n_expert_used * m->hp.n_ff_exp;
        ebb_err rc;
        if ((rc = ebb__clm_alloc(m, n * d, &g->xq, "int8 expert inputs", diag)) ||
            (rc = ebb__clm_alloc(m, n * d / 32 * 2 * sizeof(float), &g->xh, "int8 expert inputs",
                                 diag)) ||
            (rc = ebb__clm_alloc(m, pf, &g->pq, "int8 expert down inputs", diag)) ||
            (rc = ebb__clm_alloc(m, pf / 32 * 2 * sizeof(float), &g->ph, "int8 expert down inputs",
                                 diag)))
            return rc;
        g->xq_rows = n;
    }
    if (rows > g->xq_rows)
        return ebb_diag_set(diag, EBB_EINVAL, "%zu rows for the int8 expert inputs of %zu", rows,
                            g->xq_rows);
    return EBB_OK;
}

/* The three products through moe_group_mmql (k: its kernels for ws): b's nt rows of h quantized,
 * gate and up, the pairs' SwiGLU quantized, down. A layer-major pass through the expert cache
 * calls this once per group of slots, so its rows and pairs are quantized again for each group
 * (one or two a layer; not yet measured against the products). */
static ebb_err mmql_launch(struct clm *m, const struct ebb_cl_weight *const ws[3],
                           const struct ebb_cl_moe_mmql *const k[3], const struct clm_moe_gbufs *b,
                           int nt, int n_tiles, struct ebb_diag *diag)
{
    struct clm_moe_group *g = &m->moe.grp;
    const struct ebb__hparams *hp = &m->hp;
    int kk = (int)hp->n_expert_used, f = (int)hp->n_ff_exp, n_embd = (int)hp->n_embd;
    int y_ld = 2 * kk * f, np = nt * kk;
    ebb_err rc = mmql_scratch(m, (size_t)nt, diag);
    size_t gq[2], lq[2];
    struct ebb_cl_arg aq[] = {EBB_CL_ARG(b->h), EBB_CL_ARG(n_embd), EBB_CL_ARG(n_embd),
                              EBB_CL_ARG(g->xq), EBB_CL_ARG(g->xh)};
    ebb_cl_mmq_quantize_shape((uint32_t)n_embd, (uint32_t)nt, gq, lq);
    if (rc || (rc = ebb_cl_set_args(k[0]->quantize, 0, aq, 5, diag)) ||
        (rc = ebb_cl_run(m->cl, k[0]->quantize, 2, gq, lq, diag)))
        return rc;
    for (int i = 0; i < 3; i++) {
        bool down = i == 2;
        if (down) { /* the pairs' SwiGLU of their gate and up outputs, as int8 rows */
            struct ebb_cl_arg ag[] = {EBB_CL_ARG(b->gu), EBB_CL_ARG(y_ld),  EBB_CL_ARG(f),
                                      EBB_CL_ARG(kk),    EBB_CL_ARG(g->pq), EBB_CL_ARG(g->ph)};
            ebb_cl_mmq_quantize_shape((uint32_t)f, (uint32_t)np, gq, lq);
            if ((rc = ebb_cl_set_args(k[2]->quantize_glu, 0, ag, 6, diag)) ||
                (rc = ebb_cl_run(m->cl, k[2]->quantize_glu, 2, gq, lq, diag)))
                return rc;
        }
        int n_in = down ? f : n_embd, n_rows = down ? n_embd : f, kdiv = down ? 1 : kk;
        int o_ld = down ? kk * n_embd : y_ld, o_off = down ? 0 : i * kk * f;
        cl_mem xq = down ? g->pq : g->xq, xh = down ? g->ph : g->xh, y = down ? b->yp : b->gu;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(n_rows),   EBB_CL_ARG(kk),
                                 EBB_CL_ARG(kdiv), EBB_CL_ARG(b->tiles), EBB_CL_ARG(b->perm),
                                 EBB_CL_ARG(xq),   EBB_CL_ARG(xh),       EBB_CL_ARG(y),
                                 EBB_CL_ARG(o_ld), EBB_CL_ARG(o_off)};
        uint32_t pt[4];
        ebb_cl_mmql_tile(&m->tu, ebb_cl_mmql_group_kind(&ws[i]->layout), pt);
        size_t r = 16 * (size_t)pt[1] * pt[2], w = 32 * (size_t)pt[2];
        size_t gm[2] = {w * (size_t)n_tiles, ((size_t)n_rows + r - 1) / r}, lm[2] = {w, 1};
        if ((rc = ebb_cl_weight_set_args(ws[i], k[i]->group, 0, diag)) ||
            (rc = ebb_cl_set_args(k[i]->group, 2, a, 11, diag)) ||
            (rc = ebb_cl_run(m->cl, k[i]->group, 2, gm, lm, diag)))
            return rc;
    }
    return EBB_OK;
}

ebb_err ebb__clm_moe_group_launch(struct clm *m, const struct ebb_cl_weight *const ws[3],
                                  struct clm_moe_prog *const p[3], const struct clm_moe_gbufs *b,
                                  int nt, int n_tiles, struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    int k = (int)hp->n_expert_used, f = (int)hp->n_ff_exp, n_embd = (int)hp->n_embd;
    uint32_t wg, rows = ebb_cl_moe_group_rows(&m->tu, &wg); /* a work-group's */
    const struct ebb_cl_moe_mmql *mk[3];
    ebb_err rc = kernels(m, p, diag); /* (moe_group_sum, which follows either way) */
    if (rc || (rc = mmql_all(m, ws, mk, diag)))
        return rc;
    if (mk[0])
        return mmql_launch(m, ws, mk, b, nt, n_tiles, diag);
    int y_ld = 2 * k * f;
    size_t l[2] = {wg, 1};
    for (int i = 0; i < 3; i++) {
        /* Gate and up: y_off i k f of the rows of moe_gather's places; down: the pairs' rows of
         * yp. On tensor cores (moe_group_mms) where the weights' program has it. */
        bool down = i == 2;
        int n_in = down ? f : n_embd, n_rows = down ? n_embd : f, x_ld = down ? y_ld : n_embd;
        int glu = down, o_ld = down ? k * n_embd : y_ld, o_off = down ? 0 : i * k * f;
        cl_mem x = down ? b->gu : b->h, y = down ? b->yp : b->gu;
        cl_kernel km;
        if ((rc = mms_kernel(m, ws[i], &km, diag)))
            return rc;
        if (km) {
            struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in),     EBB_CL_ARG(n_rows),  EBB_CL_ARG(k),
                                     EBB_CL_ARG(b->tiles), EBB_CL_ARG(b->perm), EBB_CL_ARG(x),
                                     EBB_CL_ARG(x_ld),     EBB_CL_ARG(glu),     EBB_CL_ARG(y),
                                     EBB_CL_ARG(o_ld),     EBB_CL_ARG(o_off)};
            size_t r = 16 * (size_t)m->tu.mg_mi, w = 32 * (size_t)m->tu.mg_w;
            size_t gm[2] = {((size_t)n_rows + r - 1) / r * w, (size_t)n_tiles}, lm[2] = {w, 1};
            if ((rc = ebb_cl_weight_set_args(ws[i], km, 0, diag)) ||
                (rc = ebb_cl_set_args(km, 2, a, 11, diag)) ||
                (rc = ebb_cl_run(m->cl, km, 2, gm, lm, diag)))
                return rc;
            continue;
        }
        cl_kernel kg = down ? p[2]->group_down : p[i]->group_gu;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in),     EBB_CL_ARG(n_rows),  EBB_CL_ARG(k),
                                 EBB_CL_ARG(b->tiles), EBB_CL_ARG(b->perm), EBB_CL_ARG(x),
                                 EBB_CL_ARG(x_ld),     EBB_CL_ARG(y),       EBB_CL_ARG(o_ld),
                                 EBB_CL_ARG(o_off)};
        size_t gs[2] = {((size_t)n_rows + rows - 1) / rows * wg, (size_t)n_tiles};
        /* moe_group_down takes no y_ld / y_off: its yp rows are the pairs' */
        if ((rc = ebb_cl_weight_set_args(ws[i], kg, 0, diag)) ||
            (rc = ebb_cl_set_args(kg, 2, a, down ? 8 : 10, diag)) ||
            (rc = ebb_cl_run(m->cl, kg, 2, gs, l, diag)))
            return rc;
    }
    return EBB_OK;
}

ebb_err ebb__clm_moe_group_sum(struct clm *m, cl_mem ids, cl_mem wts, cl_mem yp, cl_mem x, int nt,
                               struct ebb_diag *diag)
{
    int n_embd = (int)m->hp.n_embd, k = (int)m->hp.n_expert_used;
    struct ebb_cl_arg sa[] = {EBB_CL_ARG(n_embd), EBB_CL_ARG(k), EBB_CL_ARG(ids),   EBB_CL_ARG(wts),
                              EBB_CL_ARG(yp),     EBB_CL_ARG(x), EBB_CL_ARG(n_embd)};
    size_t gsum[2] = {(size_t)n_embd, (size_t)nt};
    ebb_err rc = ebb_cl_set_args(m->moe.grp.sum, 0, sa, 7, diag);
    return rc ? rc : ebb_cl_run(m->cl, m->moe.grp.sum, 2, gsum, NULL, diag);
}

ebb_err ebb__clm_moe_group(struct clm *m, const struct ebb_cl_weight *const ws[3],
                           struct clm_moe_prog *const p[3], cl_mem ids, int nt,
                           struct ebb_diag *diag)
{
    struct clm_moe *mo = &m->moe;
    struct clm_moe_group *g = &mo->grp;
    const struct ebb__hparams *hp = &m->hp;
    int k = (int)hp->n_expert_used, f = (int)hp->n_ff_exp;
    if (!ebb__clm_moe_group_applies(m, (uint32_t)nt) || ws[0]->n_out % (uint32_t)f ||
        ws[2]->n_in != (uint32_t)f)
        return EBB_EUNSUPPORTED;
    uint32_t n_slots = ws[0]->n_out / (uint32_t)f; /* experts, or the expert cache's slots */
    if (g->h_cnt && n_slots > g->n_cnt)
        return EBB_EUNSUPPORTED;
    ebb_err rc;
    if ((rc = scratch(m, n_slots > hp->n_expert ? n_slots : hp->n_expert, diag)))
        return rc;
    size_t n_pairs = (size_t)nt * (size_t)k;
    if ((rc = ebb_cl_read(m->cl, ids, 0, n_pairs * sizeof(int32_t), g->h_ids, diag)))
        return rc;
    uint32_t gt;
    if ((rc = ebb__clm_moe_group_gt(m, ws, &gt, diag)))
        return rc;
    int n_tiles = sort_pairs(g, n_pairs, n_slots, gt);
    if (n_tiles < 0)
        return ebb_diag_set(diag, EBB_EINVAL, "an expert id beyond the %u experts", n_slots);
    if (n_tiles == 0) /* every pair skipped (an expert-cache pass without its experts) */
        return EBB_OK;
    /* The host arrays are rewritten only after the next layer's blocking read, which follows
     * these writes in the queue. */
    size_t n_sorted = (size_t)g->h_tiles[(size_t)(n_tiles - 1) * 4 + 1] +
                      (size_t)g->h_tiles[(size_t)(n_tiles - 1) * 4 + 2];
    if ((rc = ebb_cl_check(clEnqueueWriteBuffer(m->cl->q, g->perm, CL_FALSE, 0,
                                                n_sorted * sizeof(int32_t), g->h_perm, 0, NULL,
                                                NULL),
                           diag, "clEnqueueWriteBuffer")) ||
        (rc = ebb_cl_check(clEnqueueWriteBuffer(m->cl->q, g->tiles, CL_FALSE, 0,
                                                (size_t)n_tiles * 4 * sizeof(int32_t), g->h_tiles,
                                                0, NULL, NULL),
                           diag, "clEnqueueWriteBuffer")))
        return rc;
    struct clm_moe_gbufs b = {
        .h = m->h, .gu = mo->gu, .yp = g->yp, .perm = g->perm, .tiles = g->tiles};
    if ((rc = ebb__clm_moe_group_launch(m, ws, p, &b, nt, n_tiles, diag)))
        return rc;
    return ebb__clm_moe_group_sum(m, ids, mo->w, g->yp, m->x, nt, diag);
}

void ebb__clm_moe_group_fini(struct clm *m)
{
    struct clm_moe_group *g = &m->moe.grp;
    if (g->sum)
        clReleaseKernel(g->sum);
    for (uint32_t i = 0; i < g->n_mms; i++)
        ebb_cl_wprog_fini(&g->mms[i].p);
    for (uint32_t i = 0; i < g->n_mq; i++)
        ebb_cl_moe_mmql_fini(&g->mq[i].k);
    cl_mem ms[] = {g->perm, g->tiles, g->yp, g->xq, g->xh, g->pq, g->ph};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        if (ms[i])
            clReleaseMemObject(ms[i]);
    free(g->h_ids);
    free(g->h_perm);
    free(g->h_tiles);
    free(g->h_cnt);
    *g = (struct clm_moe_group){0};
}
