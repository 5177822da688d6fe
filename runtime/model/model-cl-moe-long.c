/* Long prompts through the expert cache, layer-major (docs/STREAMER.md, "Long prompts through
 * the expert cache"). A chunk of prefill rows routes to nearly every expert of a layer, so a
 * cache of a few slots per layer misses on most of them chunk after chunk, and each chunk copies
 * them again. Here a prompt of several chunks (its rows in m->xl, as the layer streamer's
 * layer-major pass keeps them) takes each MoE layer once: the steps before the experts, the norm,
 * the router and the top k run chunk after chunk, every row's ids and weights kept; the ids come
 * back in one read; the distinct experts, in ascending order, are cut into groups of half the
 * slots, and each group's experts are copied once into its half of the slots while the other
 * half's products run (double-buffered through the cache's own slots and copy path); each group
 * runs the grouped products (moe_group_*, model-cl-moe-group.c) over all the pairs of the pass
 * that chose its experts; at the end moe_group_sum adds every row's k outputs, in order, to its
 * residual row. Every pair's product is the same sum whatever its tile holds (moe.cl), and the
 * sum is the resident path's, so the rows are those of chunk after chunk through the grouped
 * kernels, to the bit. */
#include "model-cl-int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void release(cl_mem *b)
{
    if (*b)
        clReleaseMemObject(*b);
    *b = NULL;
}

bool ebb__clm_moe_long_takes(struct clm *m, uint32_t nt)
{
    return m->ml.on && ebb__clm_moe_group_applies(m, nt);
}

ebb_err ebb__clm_moe_long_open(struct clm *m, struct ebb_diag *diag)
{
    struct clm_moe_long *ml = &m->ml;
    const struct ebb__hparams *hp = &m->hp;
    int step = -1;
    for (uint32_t i = 0; i < m->plan.n_steps && step < 0; i++)
        if (m->plan.steps[i].kind == CLM_MOE)
            step = (int)i;
    uint32_t rows = m->xc ? ebb__clm_long_rows(m) : 0;
    if (step < 0 || !rows || !ebb__clm_moe_group_applies(m, m->n_batch))
        return EBB_OK;
    size_t f = sizeof(float), k = hp->n_expert_used, pairs = (size_t)rows * k;
    ebb_err rc;
    if ((rc = ebb__clm_alloc(m, rows * f * hp->n_embd, &ml->b.h, "layer-major expert inputs",
                             diag)) ||
        (rc = ebb__clm_alloc(m, rows * f * 2 * k * hp->n_ff_exp, &ml->b.gu,
                             "layer-major expert outputs", diag)) ||
        (rc = ebb__clm_alloc(m, pairs * f * hp->n_embd, &ml->b.yp, "layer-major expert outputs",
                             diag)) ||
        (rc = ebb__clm_alloc(m, pairs * sizeof(cl_int), &ml->b.perm, "layer-major expert pairs",
                             diag)) ||
        (rc = ebb__clm_alloc(m, pairs * sizeof(cl_int4), &ml->b.tiles, "layer-major expert tiles",
                             diag)) ||
        (rc =
             ebb__clm_alloc(m, pairs * sizeof(cl_int), &ml->ids, "layer-major expert ids", diag)) ||
        (rc = ebb__clm_alloc(m, pairs * f, &ml->w, "layer-major expert weights", diag)))
        return rc;
    ml->h_ids = malloc(pairs * sizeof(int32_t));
    ml->h_perm = malloc(pairs * sizeof(int32_t));
    ml->h_tiles = malloc(pairs * 4 * sizeof(int32_t));
    ml->h_cnt = malloc(((size_t)hp->n_expert + 1) * sizeof(uint32_t));
    if (!ml->h_ids || !ml->h_perm || !ml->h_tiles || !ml->h_cnt)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory for the layer-major expert pass");
    ml->step = (uint32_t)step;
    ml->on = true;
    m->xl_rows = rows;
    return EBB_OK;
}

void ebb__clm_moe_long_fini(struct clm *m)
{
    struct clm_moe_long *ml = &m->ml;
    cl_mem *bs[] = {&ml->b.h, &ml->b.gu, &ml->b.yp, &ml->b.perm, &ml->b.tiles, &ml->ids, &ml->w};
    for (size_t i = 0; i < sizeof(bs) / sizeof(bs[0]); i++)
        release(bs[i]);
    free(ml->h_ids);
    free(ml->h_perm);
    free(ml->h_tiles);
    free(ml->h_cnt);
    *ml = (struct clm_moe_long){0};
}

/* The pass's n_pairs pairs (ml->h_ids) sorted by expert, in the n_used experts' group order
 * (list), into h_perm, each expert's cut into tiles of at most tp pairs (expert's slot, first
 * index, count) into h_tiles; each group's tiles follow one another: gt[g] is group g's first
 * tile, gt[n_groups] their count. */
static void sort_pairs(struct clm_moe_long *ml, size_t n_pairs, uint32_t n_expert,
                       const uint32_t *list, uint32_t n_used, const int32_t *group,
                       const int32_t *slot, uint32_t tp, uint32_t *gt)
{
    uint32_t *cnt = ml->h_cnt;
    memset(cnt, 0, (size_t)n_expert * sizeof(uint32_t));
    for (size_t p = 0; p < n_pairs; p++)
        cnt[ml->h_ids[p]]++;
    uint32_t at = 0;
    for (uint32_t i = 0; i < n_used; i++) { /* counts become start offsets, in group order */
        uint32_t e = list[i], c = cnt[e];
        cnt[e] = at;
        at += c;
    }
    for (size_t p = 0; p < n_pairs; p++)
        ml->h_perm[cnt[ml->h_ids[p]]++] = (int32_t)p;
    uint32_t n_tiles = 0, start = 0;
    for (uint32_t i = 0; i < n_used; i++) { /* cnt[e] is now e's end */
        uint32_t e = list[i];
        for (uint32_t s = start; s < cnt[e]; s += tp) {
            int32_t *t = ml->h_tiles + (size_t)n_tiles * 4;
            uint32_t n = cnt[e] - s;
            t[0] = slot[e];
            t[1] = (int32_t)s;
            t[2] = (int32_t)(n < tp ? n : tp);
            t[3] = 0;
            n_tiles++;
        }
        start = cnt[e];
        if (group[e] >= 0)
            gt[group[e] + 1] = n_tiles;
    }
    gt[0] = 0;
}

/* bytes from src at so into dst at d on the compute queue. */
static ebb_err copy(struct clm *m, cl_mem src, size_t so, cl_mem dst, size_t d, size_t bytes,
                    struct ebb_diag *diag)
{
    return ebb_cl_check(clEnqueueCopyBuffer(m->cl->q, src, dst, so, d, bytes, 0, NULL, NULL), diag,
                        "copying layer-major rows");
}

/* Steps from..to-1 of layer L for each of the n chunks, their rows brought from m->xl into m->x
 * and back. */
static ebb_err chunks(struct clm *m, const struct layer *L, const struct clm_rows *rows, uint32_t n,
                      uint32_t from, uint32_t to, struct ebb_diag *diag)
{
    size_t row = sizeof(float) * m->hp.n_embd;
    ebb_err rc = EBB_OK;
    for (uint32_t i = 0; i < n && !rc && from < to; i++) {
        size_t off = (size_t)i * m->n_batch * row, bytes = (size_t)rows[i].nt * row;
        if (!(rc = copy(m, m->xl, off, m->x, 0, bytes, diag)) &&
            !(rc = ebb__clm_layer_steps(m, L, &rows[i], from, to, diag)))
            rc = copy(m, m->x, 0, m->xl, off, bytes, diag);
    }
    return rc;
}

/* The experts' phase of layer l over the pass's n rows: their ids read back, the groups planned,
 * each group copied into its half of the slots (the next group's copy enqueued once this one's
 * products are, so that the link works while the device computes) and its products run; then
 * the sums onto the rows in m->xl. Ends with the device done, for the figures. */
static ebb_err experts(struct clm *m, uint32_t l, uint32_t n, struct ebb_diag *diag)
{
    struct clm_moe_long *ml = &m->ml;
    size_t k = m->hp.n_expert_used, n_pairs = (size_t)n * k;
    uint64_t t0 = now_ns();
    ebb_err rc = ebb_cl_read(m->cl, ml->ids, 0, n_pairs * sizeof(int32_t), ml->h_ids, diag);
    uint64_t t1 = now_ns();
    uint32_t ng = 0, halves = 1;
    bool kept = false;
    const uint32_t *list;
    const int32_t *group, *slot;
    if (rc || (rc = ebb__clm_xc_long_plan(m, l, ml->h_ids, n_pairs, &ng, &halves, &kept, &list,
                                          &group, &slot, diag)))
        return rc;
    uint32_t *gt = malloc(((size_t)ng + 1) * sizeof(uint32_t));
    if (!gt)
        return EBB_ENOMEM;
    uint32_t n_used = 0, tp;
    for (uint32_t e = 0; e < m->hp.n_expert; e++)
        n_used += group[e] >= 0;
    const struct ebb_cl_weight *xw = ebb__clm_xc_stacks(m, l);
    const struct ebb_cl_weight *const ws[3] = {&xw[0], &xw[1], &xw[2]};
    if ((rc = ebb__clm_moe_group_gt(m, ws, &tp, diag))) {
        free(gt);
        return rc;
    }
    sort_pairs(ml, n_pairs, m->hp.n_expert, list, n_used, group, slot, tp, gt);
    /* The host arrays stay as they are until the next layer's read-back, which follows every
     * write below in the queue. */
    rc = ebb_cl_check(clEnqueueWriteBuffer(m->cl->q, ml->b.perm, CL_FALSE, 0,
                                           n_pairs * sizeof(int32_t), ml->h_perm, 0, NULL, NULL),
                      diag, "uploading the layer-major expert pairs");
    cl_event prev = NULL; /* the marker after the previous group's products */
    if (!rc)
        rc = ebb__clm_xc_long_copy(m, 0, NULL, diag);
    for (uint32_t g = 0; g < ng && !rc; g++) {
        int n_tiles = (int)(gt[g + 1] - gt[g]);
        cl_event mk = NULL;
        if ((rc = ebb__clm_xc_long_wait(m, g, diag)) ||
            (rc = ebb_cl_check(clEnqueueWriteBuffer(m->cl->q, ml->b.tiles, CL_FALSE, 0,
                                                    (size_t)n_tiles * 4 * sizeof(int32_t),
                                                    ml->h_tiles + (size_t)gt[g] * 4, 0, NULL, NULL),
                               diag, "uploading the layer-major expert tiles")) ||
            (rc = ebb__clm_moe_grouped(m, ws, &ml->b, (int)n, n_tiles, diag)))
            break;
        if (g + 1 < ng) {
            /* Group g + 1 goes into the half that group g - 1 read (with one slot, or after the
             * kept group 0, whose experts sit in either half, the slots group g reads): its copy
             * waits for those products on the device only. */
            rc = ebb_cl_check(clEnqueueMarkerWithWaitList(m->cl->q, 0, NULL, &mk), diag,
                              "marking the end of an expert group");
            if (!rc)
                rc = ebb_cl_check(clFlush(m->cl->q), diag, "flushing the compute queue");
            if (!rc)
                rc =
                    ebb__clm_xc_long_copy(m, g + 1, halves == 2 && !(kept && !g) ? prev : mk, diag);
        }
        if (prev)
            clReleaseEvent(prev);
        prev = mk;
    }
    if (prev)
        clReleaseEvent(prev);
    free(gt);
    if (!rc)
        rc = ebb__clm_moe_group_sum(m, ml->ids, ml->w, ml->b.yp, m->xl, (int)n, diag);
    if (!rc)
        rc = ebb_cl_finish(m->cl, diag);
    ebb__clm_xc_long_end(m, l == 0, t1 - t0, now_ns() - t1);
    return rc;
}

ebb_err ebb__clm_moe_long_layer(struct clm *m, uint32_t l, const struct clm_rows *rows, uint32_t n,
                                struct ebb_diag *diag)
{
    struct clm_moe_long *ml = &m->ml;
    const struct layer *L = &m->layers[l];
    const struct clm_step *s = &m->plan.steps[ml->step];
    if (!ml->on || L->n_w[s->group + 1]) /* (a layer whose experts are placed) */
        return ebb__clm_layer_chunks(m, L, rows, n, diag);
    size_t row = sizeof(float) * m->hp.n_embd, ik = sizeof(int32_t) * m->hp.n_expert_used;
    uint32_t total = 0;
    ebb_err rc = EBB_OK;
    /* Chunk after chunk: the steps before the experts, then the norm, the router and the top k,
     * the rows, their normed copies, ids and weights kept for the whole pass. */
    for (uint32_t i = 0; i < n && !rc; i++) {
        size_t r0 = (size_t)i * m->n_batch, nt = (size_t)rows[i].nt;
        total = (uint32_t)(r0 + nt);
        if (!(rc = copy(m, m->xl, r0 * row, m->x, 0, nt * row, diag)) &&
            !(rc = ebb__clm_layer_steps(m, L, &rows[i], 0, ml->step, diag)) &&
            !(rc = ebb__clm_moe_head(m, L, s, (int)nt, diag)) &&
            !(rc = copy(m, m->x, 0, m->xl, r0 * row, nt * row, diag)) &&
            !(rc = copy(m, m->h, 0, ml->b.h, r0 * row, nt * row, diag)) &&
            !(rc = copy(m, m->moe.ids, 0, ml->ids, r0 * ik, nt * ik, diag)))
            rc = copy(m, m->moe.w, 0, ml->w, r0 * ik, nt * ik, diag);
    }
    if (rc || (rc = experts(m, l, total, diag)) ||
        (rc = chunks(m, L, rows, n, ml->step + 1, m->plan.n_steps, diag)))
        return rc;
    /* The last chunk's rows in m->x, as chunk after chunk leaves them. */
    return copy(m, m->xl, (size_t)(n - 1) * m->n_batch * row, m->x, 0, (size_t)rows[n - 1].nt * row,
                diag);
}
