/* One decoder layer on OpenCL, as the steps the family's description compiled to
 * (model-cl-plan.c), and the weight products they are made of (matvec for decode with the RMS
 * norm and SwiGLU folded in, tiled matmul or GEMM for prefill). */
#include "model-cl-int.h"

#include <math.h>

/* W x for nt tokens: rows of x (stride x_ld) to rows of y (stride y_ld, from column y_off),
 * adding res (same shape as y, may be y) when given. matvec for decode, tiled matmul for
 * prefill. With nw (decode only), x is RMS-normed and scaled by nw inside the product. */
static ebb_err wmul_glu(struct clm *m, const struct ebb_cl_weight *w, cl_mem x, int x_ld, cl_mem y,
                        int y_ld, int y_off, cl_mem res, cl_mem nw, int glu, int nt,
                        struct ebb_diag *diag);

ebb_err ebb__clm_wmul(struct clm *m, const struct ebb_cl_weight *w, cl_mem x, int x_ld, cl_mem y,
                      int y_ld, int y_off, cl_mem res, cl_mem nw, int nt, struct ebb_diag *diag)
{
    return wmul_glu(m, w, x, x_ld, y, y_ld, y_off, res, nw, 0, nt, diag);
}

/* Decode with 8-bit inputs (tu.mv_q8): ebb__clm_q8_quantize (model-cl-q8.c) quantizes x's first
 * n_in inputs once into m->xq / m->xd ... */
/* ... and matvec_q8 (kernel k of w's program) multiplies them in integers. */
static ebb_err q8_matvec(struct clm *m, const struct ebb_cl_weight *w, cl_kernel k, cl_mem y,
                         int y_off, cl_mem res, struct ebb_diag *diag)
{
    int n_in = (int)w->n_in, n_out = (int)w->n_out;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in),  EBB_CL_ARG(n_out), EBB_CL_ARG(m->xq),
                             EBB_CL_ARG(m->xd), EBB_CL_ARG(y),     EBB_CL_ARG(y_off),
                             EBB_CL_ARG(res)};
    ebb_err rc;
    if ((rc = ebb_cl_weight_set_args(w, k, 0, diag)) || (rc = ebb_cl_set_args(k, 2, a, 7, diag)))
        return rc;
    size_t g[2], l[2];
    ebb_cl_q8_shape(&m->tu, (uint32_t)n_out, g, l);
    return ebb_cl_run(m->cl, k, 2, g, l, diag);
}

/* matvec_q8_mix (w[0]'s program) for the two products w[0], w[1] of one input in different kq8
 * types where tuning kq8_mix takes them (the Q4_K_M mixes' q and k in Q4_K, v in Q6_K): one
 * launch over the 8-bit input already quantized, y[0 ..] as two matvec_q8 launches write it. */
static ebb_err q8_mix(struct clm *m, const struct ebb_cl_weight w[2], cl_mem y,
                      struct ebb_diag *diag)
{
    struct ebb_cl_wprog *p = NULL;
    if (w[0].layout.type == w[1].layout.type || !ebb_cl_layout_has_kq8(&w[0].layout, &m->tu) ||
        !ebb_cl_kq8_mix_type(&w[1].layout, &m->tu) || w[1].off % 16 ||
        ebb__clm_prog_for(m, &w[0].layout, &p, NULL) || !p->matvec_q8_mix)
        return EBB_EUNSUPPORTED;
    int n_in = (int)w[0].n_in, n_a = (int)w[0].n_out, n_out = (int)(w[0].n_out + w[1].n_out);
    int tb = (int)w[1].layout.type, y_off = 0;
    cl_ulong u_off = w[1].off;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in),   EBB_CL_ARG(n_a),   EBB_CL_ARG(n_out),
                             EBB_CL_ARG(w[1].a), EBB_CL_ARG(u_off), EBB_CL_ARG(tb),
                             EBB_CL_ARG(m->xq),  EBB_CL_ARG(m->xd), EBB_CL_ARG(y),
                             EBB_CL_ARG(y_off)};
    ebb_err rc;
    cl_kernel k = p->matvec_q8_mix;
    if ((rc = ebb_cl_weight_set_args(&w[0], k, 0, diag)) ||
        (rc = ebb_cl_set_args(k, 2, a, 10, diag)))
        return rc;
    size_t g[2], l[2];
    ebb_cl_q8_shape(&m->tu, (uint32_t)n_out, g, l);
    return ebb_cl_run(m->cl, k, 2, g, l, diag);
}

/* matvec_q8_qin for w's product of x (glu: x holds [gate | up]) when decode lets it quantize
 * its own input (tuning qin, ebb_cl_qin_fits), else NULL. */
static cl_kernel qin_kernel(struct clm *m, const struct ebb_cl_weight *w, int glu)
{
    struct ebb_cl_wprog *p = NULL;
    if (!m->k_q8 || w->off % 16 ||
        !ebb_cl_qin_fits(&m->tu, m->cl->info.local_mem, w->n_in, w->n_out, glu) ||
        ebb__clm_prog_for(m, &w->layout, &p, NULL))
        return NULL;
    return p->matvec_q8_qin;
}

/* matvec_q8_qin (kernel k of w's program): the product of x's first row, folded with the norm
 * (nw) or the gate's activation (glu) and quantized inside each work-group exactly as
 * ebb__clm_q8_quantize quantizes it, so the result is q8_matvec's after it, one launch less. */
static ebb_err qin_matvec(struct clm *m, const struct ebb_cl_weight *w, cl_kernel k, cl_mem x,
                          cl_mem nw, int glu, cl_mem y, int y_off, cl_mem res,
                          struct ebb_diag *diag)
{
    int n_in = (int)w->n_in, n_out = (int)w->n_out;
    float eps = m->hp.rms_eps;
    size_t xl, dl;
    ebb_cl_qin_local(w->n_in, &xl, &dl);
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(n_out), EBB_CL_ARG(x), EBB_CL_ARG(nw),
                             EBB_CL_ARG(eps),  EBB_CL_ARG(glu),   EBB_CL_ARG(y), EBB_CL_ARG(y_off),
                             EBB_CL_ARG(res),  {xl, NULL},        {dl, NULL}}; /* (local memory) */
    ebb_err rc;
    if ((rc = ebb_cl_weight_set_args(w, k, 0, diag)) || (rc = ebb_cl_set_args(k, 2, a, 11, diag)))
        return rc;
    size_t g[2], l[2];
    ebb_cl_qin_shape(&m->tu, (uint32_t)n_out, g, l);
    return ebb_cl_run(m->cl, k, 1, g, l, diag);
}

/* The matvec_q8 kernel for w when decode can take 8-bit inputs for it, else NULL. */
static cl_kernel q8_kernel(struct clm *m, const struct ebb_cl_weight *w, struct ebb_diag *diag)
{
    struct ebb_cl_wprog *p = NULL;
    if (!m->k_q8 || w->n_in % 32 || w->off % 16 || ebb__clm_prog_for(m, &w->layout, &p, diag))
        return NULL;
    return p->matvec_q8;
}

/* The most token rows matvec_q8r of w's program p takes: tu.q8r_max, for kq8.cl's types at
 * most tu.kq8r; 0 where it has none, the rows are not 32-blocks, or kq8.cl's 16-byte loads
 * would meet a misaligned weight. */
static uint32_t q8r_rows(const struct clm *m, const struct ebb_cl_weight *w,
                         const struct ebb_cl_wprog *p)
{
    bool kq8 = ebb_cl_layout_has_kq8(&w->layout, &m->tu);
    if (!p->matvec_q8r || !m->k_q8r || w->n_in % 32 || (kq8 && w->off % 16))
        return 0;
    return kq8 && m->tu.kq8r < m->tu.q8r_max ? m->tu.kq8r : m->tu.q8r_max;
}

/* matvec_q8r for a product of nt token rows of w, where it takes them (2..q8r_rows rows,
 * 8-bit inputs), else NULL. */
static cl_kernel q8r_kernel(struct clm *m, const struct ebb_cl_weight *w, int nt,
                            struct ebb_diag *diag)
{
    struct ebb_cl_wprog *p = NULL;
    if (nt < 2 || (uint32_t)nt > m->tu.q8r_max || ebb__clm_prog_for(m, &w->layout, &p, diag) ||
        (uint32_t)nt > q8r_rows(m, w, p))
        return NULL;
    return p->matvec_q8r;
}

/* quantize_x8_rows: nt rows of x (stride x_ld, n_in inputs each, or with glu [gate | up] of
 * n_in each) into m->xq / m->xd, one row after another, the RMS norm (nw) or the gate's
 * activation (glu) folded in as quantize_x8 folds them for one token. */
static ebb_err q8r_quantize(struct clm *m, cl_mem x, int x_ld, int n_in, cl_mem nw, int glu, int nt,
                            struct ebb_diag *diag)
{
    float eps = m->hp.rms_eps;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(x),     EBB_CL_ARG(x_ld),  EBB_CL_ARG(n_in),
                             EBB_CL_ARG(m->xq), EBB_CL_ARG(m->xd), EBB_CL_ARG(nw),
                             EBB_CL_ARG(eps),   EBB_CL_ARG(glu)};
    size_t g[2] = {((size_t)n_in + EBB_CL_Q8_WG - 1) / EBB_CL_Q8_WG * EBB_CL_Q8_WG, (size_t)nt};
    size_t l[2] = {EBB_CL_Q8_WG, 1};
    ebb_err rc = ebb_cl_set_args(m->k_q8r, 0, a, 8, diag);
    return rc ? rc : ebb_cl_run(m->cl, m->k_q8r, 2, g, l, diag);
}

/* matvec_q8r (kernel k of w's program) over the nt rows q8r_quantize left in m->xq / m->xd:
 * each weight block read once per MVR rows, MVO output rows a warp. */
static ebb_err q8r_run(struct clm *m, const struct ebb_cl_weight *w, cl_kernel k, cl_mem y,
                       int y_ld, int y_off, cl_mem res, int nt, struct ebb_diag *diag)
{
    int n_in = (int)w->n_in, n_out = (int)w->n_out;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in),  EBB_CL_ARG(n_out), EBB_CL_ARG(m->xq),
                             EBB_CL_ARG(m->xd), EBB_CL_ARG(y),     EBB_CL_ARG(y_ld),
                             EBB_CL_ARG(y_off), EBB_CL_ARG(res),   EBB_CL_ARG(nt)};
    ebb_err rc;
    if ((rc = ebb_cl_weight_set_args(w, k, 0, diag)) || (rc = ebb_cl_set_args(k, 2, a, 9, diag)))
        return rc;
    size_t g[2], l[2], mvo = m->tu.mvo ? m->tu.mvo : 1;
    ebb_cl_wkernel_shape(&m->tu, EBB_CL_WK_MATVEC, (uint32_t)n_out, 1, g, l);
    g[0] = ((size_t)n_out + mvo - 1) / mvo * m->tu.mv_wg;
    g[1] = ((size_t)nt + m->tu.mvr - 1) / m->tu.mvr;
    return ebb_cl_run(m->cl, k, 2, g, l, diag);
}

/* The slices a product of w (n_in inputs, n_out rows, nt tokens, tiles work-groups on kernel
 * kind's tile; batch: a batch's, on the mmqs_* tile) is split into: enough for tu.mmqs_split
 * (batch) or tu.mmql_split (prefill) work-groups a compute unit, at most EBB_CL_MMQS_SPLIT_MAX,
 * each slice at least 4 of the tile's steps, within mq_part and mq_cnt. */
static size_t mmq_slices(const struct clm *m, enum ebb_cl_wkernel kind, bool batch, int n_in,
                         int n_out, int nt, size_t tiles)
{
    size_t want = (size_t)(batch ? m->tu.mmqs_split : m->tu.mmql_split) * m->cl->info.compute_units;
    if (!m->mq_part || !tiles || tiles >= want || tiles > EBB_CL_MMQS_TILES_MAX)
        return 1;
    uint32_t tile[4];
    ebb_cl_mmql_tile(&m->tu, kind, tile);
    size_t kb = tile[3] ? tile[3] : 2; /* the kernel's MS_KB when the tile leaves it out */
    size_t steps = ((size_t)n_in / 32 + kb - 1) / kb, z = (want + tiles - 1) / tiles;
    z = z < EBB_CL_MMQS_SPLIT_MAX ? z : EBB_CL_MMQS_SPLIT_MAX;
    z = z < steps / 4 ? z : steps / 4;
    while (z > 1 && z * (size_t)nt * (size_t)n_out > m->mq_part_n)
        z--;
    return z > 1 ? z : 1;
}

/* matmul_mmq for a product of nt >= tu.mmq token rows of w (kernel k: p->matmul_mmqp, with
 * the mmq_* tile): x's rows quantized into m->mq_x / m->mq_h by mmq_quantize (q of w's
 * program), then the int8 products. */
static ebb_err mmq_run_kind(struct clm *m, const struct ebb_cl_weight *w, cl_kernel q, cl_kernel k,
                            bool batch, int kind_set, cl_mem x, int x_ld, cl_mem y, int y_ld,
                            int y_off, cl_mem res, int nt, struct ebb_diag *diag);
static ebb_err mmq_run(struct clm *m, const struct ebb_cl_weight *w, cl_kernel q, cl_kernel k,
                       bool batch, cl_mem x, int x_ld, cl_mem y, int y_ld, int y_off, cl_mem res,
                       int nt, struct ebb_diag *diag)
{
    return mmq_run_kind(m, w, q, k, batch, -1, x, x_ld, y, y_ld, y_off, res, nt, diag);
}

/* mmq_run with the tile of kind kind_set where it is not negative (K8SPLIT's mmql_* tile on a
 * Q6_K weight). */
static ebb_err mmq_run_kind(struct clm *m, const struct ebb_cl_weight *w, cl_kernel q, cl_kernel k,
                            bool batch, int kind_set, cl_mem x, int x_ld, cl_mem y, int y_ld,
                            int y_off, cl_mem res, int nt, struct ebb_diag *diag)
{
    int n_in = (int)w->n_in, n_out = (int)w->n_out;
    struct ebb_cl_arg aq[] = {EBB_CL_ARG(x),       EBB_CL_ARG(x_ld),    EBB_CL_ARG(n_in),
                              EBB_CL_ARG(m->mq_x), EBB_CL_ARG(m->mq_h), EBB_CL_ARG(m->mq_x2),
                              EBB_CL_ARG(m->mq_h2)};
    size_t gq[2], lq[2];
    ebb_cl_mmq_quantize_shape((uint32_t)n_in, (uint32_t)nt, gq, lq);
    ebb_err rc = EBB_OK;
    /* MMQ_RES (proj_inner's m->mq_res): the input in two passes, the product run on each, the
     * second adding to the first's output. */
    bool two = m->mq_res;
    if (two) {
        struct ebb_cl_wprog *p = NULL;
        if ((rc = ebb__clm_prog_for(m, &w->layout, &p, diag)))
            return rc;
        q = p->mmq_quant_r;
    }
    /* A group's products after the first find their shared input quantized already. */
    if (!m->mq_held && ((rc = ebb_cl_set_args(q, 0, aq, two ? 7 : 5, diag)) ||
                        (rc = ebb_cl_run(m->cl, q, 2, gq, lq, diag))))
        return rc;
    m->mq_held = m->mq_group;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in),    EBB_CL_ARG(n_out), EBB_CL_ARG(m->mq_x),
                             EBB_CL_ARG(m->mq_h), EBB_CL_ARG(y),     EBB_CL_ARG(y_ld),
                             EBB_CL_ARG(y_off),   EBB_CL_ARG(res),   EBB_CL_ARG(nt)};
    if ((rc = ebb_cl_weight_set_args(w, k, 0, diag)) || (rc = ebb_cl_set_args(k, 2, a, 9, diag)))
        return rc;
    size_t g[3], l[3] = {0, 1, 1};
    enum ebb_cl_wkernel kind = kind_set >= 0      ? (enum ebb_cl_wkernel)kind_set
                               : batch            ? ebb_cl_mmql_batch_kind(&w->layout)
                               : !m->tu.mmq_stage ? EBB_CL_WK_MMQ
                                                  : ebb_cl_mmql_kind(&w->layout);
    ebb_cl_wkernel_shape(&m->tu, kind, (uint32_t)n_out, (uint32_t)nt, g, l);
    int dims = 2;
    if (kind != EBB_CL_WK_MMQ) {
        /* matmul_mmql: a product whose tiles leave the compute units short of mmqs_split (a
         * batch's) or mmql_split (prefill's) work-groups each is split into slices of its
         * inputs (matmul-mma.cl) */
        g[2] = mmq_slices(m, kind, batch, n_in, n_out, nt, g[0] / l[0] * g[1]);
        struct ebb_cl_arg az[] = {EBB_CL_ARG(m->mq_part), EBB_CL_ARG(m->mq_cnt)};
        if ((rc = ebb_cl_set_args(k, 11, az, 2, diag)))
            return rc;
        dims = 3;
    }
    if ((rc = ebb_cl_run(m->cl, k, (cl_uint)dims, g, l, diag)) || !two)
        return rc;
    /* the second pass: y += W (what the first pass's rounding left), in queue order after it */
    struct ebb_cl_arg a2[] = {EBB_CL_ARG(m->mq_x2), EBB_CL_ARG(m->mq_h2)};
    struct ebb_cl_arg ar[] = {EBB_CL_ARG(y)};
    if ((rc = ebb_cl_set_args(k, 4, a2, 2, diag)) || (rc = ebb_cl_set_args(k, 9, ar, 1, diag)))
        return rc;
    return ebb_cl_run(m->cl, k, (cl_uint)dims, g, l, diag);
}

/* Sets path's bit for w's type in paths (m->paths, or m->kept_paths). */
static void note_path_in(uint16_t *paths, const struct ebb_cl_weight *w, enum clm_path path)
{
    if (w->layout.type < MAX_TYPES)
        paths[w->layout.type] |= (uint16_t)(1u << path);
}

/* Records that a product of several rows of w ran through path (ebb__clm_kernels). */
static void note_path(struct clm *m, const struct ebb_cl_weight *w, enum clm_path path)
{
    note_path_in(m->paths, w, path);
}

size_t ebb__clm_kernels(void *ctx, char *buf, size_t cap)
{
    struct clm *m = ctx;
    static const char *const names[CLM_P_N] = {
        "matmul_mmql", "matmul_mmql",  "matmul_mmq",  "matvec_q8r",  "matmul_mms",
        "matmul_mms",  "matmul_mma/b", "matmul_gemm", "matmul_coop", "matmul",
        "matvec_cpu",  "k4_split",     "k8_split",    "k4_split",    "k8_split"};
    const struct ebb_cl_tuning *tu = &m->tu;
    size_t used = 0;
    if (cap)
        buf[0] = 0;
#define KPUT(...)                                                                                  \
    do {                                                                                           \
        int n_ =                                                                                   \
            snprintf(buf + (used < cap ? used : cap), used < cap ? cap - used : 0, __VA_ARGS__);   \
        used += n_ > 0 ? (size_t)n_ : 0;                                                           \
    } while (0)
    for (uint32_t t = 0; t < MAX_TYPES; t++) {
        if (!(m->paths[t] | m->kept_paths[t]) || !m->have_layout[t])
            continue;
        char ln[64];
        struct ebb_cl_wprog *p = NULL;
        ebb__clm_prog_for(m, &m->layout[t], &p, NULL);
        KPUT("%s%s:", used ? "; " : "", ebb_cl_layout_name(&m->layout[t], ln, sizeof(ln)));
        bool first = true;
        /* every path, then the rewrites' again for the products on rewrites kept from load */
        static const int kept_k[] = {CLM_P_K4, CLM_P_K8, CLM_P_K4B, CLM_P_K8B};
        const int n_kept = (int)(sizeof(kept_k) / sizeof(kept_k[0]));
        for (int kk = 0; kk < CLM_P_N + n_kept; kk++) {
            int k = kk < CLM_P_N ? kk : kept_k[kk - CLM_P_N];
            bool kept = kk >= CLM_P_N;
            bool rw = k == CLM_P_K4 || k == CLM_P_K8 || k == CLM_P_K4B || k == CLM_P_K8B;
            bool k4 = k == CLM_P_K4 || k == CLM_P_K4B, bt = k == CLM_P_K4B || k == CLM_P_K8B;
            if (!((kept ? m->kept_paths[t] : m->paths[t]) & (1u << k)))
                continue;
            if (kept)
                KPUT("%s", first ? "" : ",");
            else
                KPUT("%s %s", first ? "" : ",", names[k]);
            first = false;
            if (k == CLM_P_MMQL || k == CLM_P_MMQLB || rw) {
                /* the tile and staging of the matmul_mmql that ran: the weight's own (prefill,
                 * batch), or after a rewrite the mmql_* tile's of what it multiplies */
                const struct ebb_cl_layout *l = &m->layout[t];
                enum ebb_cl_wkernel kind = k == CLM_P_MMQL    ? ebb_cl_mmql_kind(l)
                                           : k == CLM_P_MMQLB ? ebb_cl_mmql_batch_kind(l)
                                           : bt               ? EBB_CL_WK_MMQLB
                                                              : EBB_CL_WK_MMQL;
                const struct ebb_cl_wprog *pk = k4 ? m->k4_prog : p;
                cl_kernel km = !pk                ? NULL
                               : k == CLM_P_MMQL  ? p->matmul_mmqp
                               : k == CLM_P_MMQLB ? p->matmul_mmqs
                               : k == CLM_P_K4    ? pk->matmul_mmqp
                               : k == CLM_P_K4B   ? pk->matmul_mmqs
                               : k == CLM_P_K8    ? pk->matmul_mmq_s8
                                                  : pk->matmul_mmqs_s8;
                uint32_t tile[4];
                ebb_cl_mmql_tile(tu, kind, tile);
                int st = ebb_cl_mmql_stages(m->cl, km);
                KPUT("%s %u,%u,%u,%u%s%s",
                     kept ? " matmul_mmql"
                     : rw ? " + matmul_mmql"
                          : "",
                     tile[0], tile[1], tile[2], tile[3],
                     k4   ? " on split Q4_1"
                     : rw ? " on its bytes"
                          : "",
                     kept ? " kept from load" : "");
                if (st > 0)
                    KPUT(" cp.async %d stages", st);
                else if (!st)
                    KPUT(" registers");
                if (k == CLM_P_MMQLB || bt)
                    KPUT(" (batch)");
            } else if (k == CLM_P_MMP) {
                KPUT(" (second tile)");
            }
        }
    }
#undef KPUT
    return used;
}

ebb_err ebb__clm_ksplit_write(struct clm *m, const struct ebb_cl_weight *w, cl_kernel kr, cl_mem a,
                              cl_mem b, struct ebb_diag *diag)
{
    uint64_t nb = (uint64_t)w->n_out * (w->n_in / 32);
    int n_in = (int)w->n_in, n_out = (int)w->n_out;
    struct ebb_cl_arg args[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(n_out), EBB_CL_ARG(a), EBB_CL_ARG(b)};
    size_t l = 64, g = (size_t)((nb + l - 1) / l * l);
    ebb_err rc;
    if ((rc = ebb_cl_weight_set_args(w, kr, 0, diag)) ||
        (rc = ebb_cl_set_args(kr, 2, args, b ? 4 : 3, diag)))
        return rc;
    return ebb_cl_run(m->cl, kr, 1, &g, &l, diag);
}

/* A product of nt rows of raw K-quant weight w (program p) through its rewrite (K4SPLIT:
 * split Q4_1 planes multiplied by that layout's matmul_mmql; K8SPLIT: a byte a weight
 * multiplied by the matmul_mmql built to read it): the rewrite kept from load where w has one
 * (KSPLIT_KEEP), else written into the scratch first where the knobs and the scratch allow it
 * (the in-order queue keeps the next product's rewrite after this one's reads). batch: a
 * batch's step on the mmqs_* tile, else prefill's mmql_* tile. EBB_EUNSUPPORTED (nothing run)
 * where neither applies. */
static ebb_err ksplit_try(struct clm *m, const struct ebb_cl_weight *w, struct ebb_cl_wprog *p,
                          bool batch, cl_mem x, int x_ld, cl_mem y, int y_ld, int y_off, cl_mem res,
                          int nt, struct ebb_diag *diag)
{
    uint64_t nb = (uint64_t)w->n_out * (w->n_in / 32);
    bool kept = w->ka != NULL;
    struct ebb_cl_weight s;
    cl_kernel k, q, kr;
    enum clm_path path;
    if (p->k4_split && m->k4_prog) {
        k = batch ? m->k4_prog->matmul_mmqs : m->k4_prog->matmul_mmqp;
        if (!k || (!kept && ((uint32_t)nt < m->tu.k4split || nb > m->k4_blocks)))
            return EBB_EUNSUPPORTED;
        s = (struct ebb_cl_weight){
            .layout = {EBB_GGML_Q4_1, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT},
            .n_in = w->n_in,
            .n_out = w->n_out,
            .a = kept ? w->ka : m->k4_a,
            .b = kept ? w->kb : m->k4_b};
        q = m->k4_prog->mmq_quantize;
        kr = p->k4_split;
        path = batch ? CLM_P_K4B : CLM_P_K4;
    } else if (p->k8_split && m->k8_on) {
        k = batch ? p->matmul_mmqs_s8 : p->matmul_mmq_s8;
        if (!k || (!kept && ((uint32_t)nt < m->tu.k8split || nb > m->k8_blocks)))
            return EBB_EUNSUPPORTED;
        s = *w;
        s.a = kept ? w->ka : m->k8;
        s.b = NULL;
        s.off = 0;
        q = p->mmq_quantize;
        kr = p->k8_split;
        path = batch ? CLM_P_K8B : CLM_P_K8;
    } else {
        return EBB_EUNSUPPORTED;
    }
    ebb_err rc;
    if (!kept && (rc = ebb__clm_ksplit_write(m, w, kr, s.a, s.b, diag)))
        return rc;
    note_path_in(kept ? m->kept_paths : m->paths, w, path);
    return mmq_run_kind(m, &s, q, k, batch, batch ? EBB_CL_WK_MMQLB : EBB_CL_WK_MMQL, x, x_ld, y,
                        y_ld, y_off, res, nt, diag);
}

/* Which int8 tile wmul_glu's product of nt rows of w (no norm or gate folded) runs on:
 * matmul_mmqp (prefill's, from tu.mmq rows), matmul_mmqs (a batch's steps of tu.mmqs..tu.mmq - 1
 * rows), ksplit_try's rewrites of either included; every one quantizes its input with
 * mmq_quantize into m->mq_x / m->mq_h first. MMQ_NONE: decode's matvecs, matvec_q8r's rows, the
 * f16 tiles. */
enum mmq_tile { MMQ_NONE, MMQ_PREFILL, MMQ_BATCH };
static enum mmq_tile mmq_tile_of(const struct clm *m, const struct ebb_cl_weight *w,
                                 const struct ebb_cl_wprog *p, int nt)
{
    if (nt < 2 || (uint32_t)nt > m->tu.mms_max || !p->matmul_mms || w->n_in % 32 || !m->mq_x ||
        w->n_in > m->mq_wide || (uint32_t)nt <= q8r_rows(m, w, p))
        return MMQ_NONE;
    if (p->matmul_mmqp && (uint32_t)nt >= m->tu.mmq)
        return MMQ_PREFILL;
    if (p->matmul_mmqs && (uint32_t)nt >= m->tu.mmqs)
        return MMQ_BATCH;
    return MMQ_NONE;
}

/* wmul with, for decode, SwiGLU folded in (glu: x rows are [gate | up], see matvec.cl). */
static ebb_err wmul_glu(struct clm *m, const struct ebb_cl_weight *w, cl_mem x, int x_ld, cl_mem y,
                        int y_ld, int y_off, cl_mem res, cl_mem nw, int glu, int nt,
                        struct ebb_diag *diag)
{
    struct ebb_cl_wprog *p = NULL;
    ebb_err rc = ebb__clm_prog_for(m, &w->layout, &p, diag);
    if (rc)
        return rc;
    /* (w->off % 16: kq8.cl's 16-byte loads of K-quant blocks; file offsets are that aligned
     * unless a file sets general.alignment below 16.) */
    if (nt == 1 && p->matvec_q8 && m->k_q8 && w->n_in % 32 == 0 && w->off % 16 == 0) {
        cl_kernel kqin = qin_kernel(m, w, glu);
        if (kqin)
            return qin_matvec(m, w, kqin, x, nw, glu, y, y_off, res, diag);
        if ((rc = ebb__clm_q8_quantize(m, x, (int)w->n_in, nw, glu, diag)))
            return rc;
        return q8_matvec(m, w, p->matvec_q8, y, y_off, res, diag);
    }
    if (nt > 1 && (uint32_t)nt <= q8r_rows(m, w, p)) {
        if ((rc = q8r_quantize(m, x, x_ld, (int)w->n_in, nw, glu, nt, diag)))
            return rc;
        note_path(m, w, CLM_P_Q8R);
        return q8r_run(m, w, p->matvec_q8r, y, y_ld, y_off, res, nt, diag);
    }
    /* Longer products of 4-bit weights on tensor cores with the weights loaded straight into
     * the fragments: one tile for small batches, the second (mmp) for prefill. */
    bool mms = nt > 1 && (uint32_t)nt <= m->tu.mms_max && p->matmul_mms && !nw && !glu &&
               w->n_in % 32 == 0;
    bool mmp = mms && p->matmul_mmp && (uint32_t)nt >= m->tu.mms_big;
    enum mmq_tile tile = nw || glu ? MMQ_NONE : mmq_tile_of(m, w, p, nt);
    if (tile != MMQ_NONE) {
        bool batch = tile == MMQ_BATCH;
        rc = ksplit_try(m, w, p, batch, x, x_ld, y, y_ld, y_off, res, nt, diag);
        if (rc != EBB_EUNSUPPORTED)
            return rc;
        note_path(m, w, batch ? CLM_P_MMQLB : m->tu.mmq_stage ? CLM_P_MMQL : CLM_P_MMQ);
        return mmq_run(m, w, p->mmq_quantize, batch ? p->matmul_mmqs : p->matmul_mmqp, batch, x,
                       x_ld, y, y_ld, y_off, res, nt, diag);
    }
    int n_in = (int)w->n_in, n_out = (int)w->n_out;
    bool mm = nt > 1;
    enum ebb_cl_wkernel kind = !mm ? EBB_CL_WK_MATVEC
                               : m->tu.mm_gemm_min && (uint32_t)nt >= m->tu.mm_gemm_min
                                   ? EBB_CL_WK_GEMM
                               : m->tu.mm_coop ? EBB_CL_WK_COOP
                                               : EBB_CL_WK_MATMUL;
    if (kind == EBB_CL_WK_GEMM && p->matmul_mma)
        kind = EBB_CL_WK_MMA;
    if (mms)
        kind = mmp ? EBB_CL_WK_MMP : EBB_CL_WK_MMS;
    if (!mms && p->matvec_cpu && (kind == EBB_CL_WK_MATVEC || (uint32_t)nt <= m->tu.mvcpu_max))
        kind = EBB_CL_WK_MVCPU;
    bool mv = kind == EBB_CL_WK_MATVEC || kind == EBB_CL_WK_MVCPU; /* matvec's arguments */
    if (mm) {
        static const enum clm_path pk[] = {CLM_P_N,   CLM_P_MM,  CLM_P_COOP, CLM_P_GEMM,
                                           CLM_P_MMA, CLM_P_CPU, CLM_P_MMS,  CLM_P_MMP};
        if ((size_t)kind < sizeof(pk) / sizeof(pk[0]) && pk[kind] != CLM_P_N)
            note_path(m, w, pk[kind]);
    }
    cl_kernel ks[] = {p->matvec,
                      p->matmul,
                      p->matmul_coop,
                      p->matmul_gemm,
                      m->tu.mma_v == 2 ? p->matmul_mmb : p->matmul_mma,
                      p->matvec_cpu,
                      p->matmul_mms,
                      p->matmul_mmp},
              k = ks[kind];
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in),  EBB_CL_ARG(n_out), EBB_CL_ARG(x),
                             EBB_CL_ARG(x_ld),  EBB_CL_ARG(y),     EBB_CL_ARG(y_ld),
                             EBB_CL_ARG(y_off), EBB_CL_ARG(res),   EBB_CL_ARG(nt)};
    float eps = m->hp.rms_eps;
    struct ebb_cl_arg an[] = {EBB_CL_ARG(nw), EBB_CL_ARG(eps), EBB_CL_ARG(glu)};
    if ((rc = ebb_cl_weight_set_args(w, k, 0, diag)) ||
        (rc = ebb_cl_set_args(k, 2, a, mv ? 8 : 9, diag)) ||
        (mv && (rc = ebb_cl_set_args(k, 10, an, 3, diag))))
        return rc;
    size_t g[2], l[2];
    ebb_cl_wkernel_shape(&m->tu, kind, (uint32_t)n_out, (uint32_t)nt, g, l);
    return ebb_cl_run(m->cl, k, 2, g, l, diag);
}

/* Several weights stacked along O write side by side into rows of y. Decode with 8-bit inputs
 * quantizes their shared input once (weights the file keeps apart, e.g. attn_q, attn_k and
 * attn_v of llama.cpp's converter, which writes them in name order). */
static ebb_err wmul_group(struct clm *m, const struct ebb_cl_weight *w, uint32_t n, cl_mem x,
                          int x_ld, cl_mem y, int y_ld, cl_mem nw, int nt, struct ebb_diag *diag)
{
    cl_kernel kq[GROUP_MAX] = {NULL}, kqin[GROUP_MAX] = {NULL};
    bool q8 = nt == 1 && n > 1 && n <= GROUP_MAX, q8r = nt > 1 && n > 1 && n <= GROUP_MAX;
    for (uint32_t i = 0; q8 && i < n; i++)
        q8 = (kq[i] = q8_kernel(m, &w[i], NULL)) != NULL && w[i].n_in == w[0].n_in;
    /* With tuning qin each product quantizes the input itself: n launches instead of n + 1. */
    bool qin = q8;
    for (uint32_t i = 0; qin && i < n; i++)
        qin = (kqin[i] = qin_kernel(m, &w[i], 0)) != NULL;
    for (uint32_t i = 0, off = 0; qin && i < n; off += w[i].n_out, i++) {
        ebb_err rc = qin_matvec(m, &w[i], kqin[i], x, nw, 0, y, (int)off, NULL, diag);
        if (rc)
            return rc;
    }
    if (qin)
        return EBB_OK;
    for (uint32_t i = 0; q8r && i < n; i++)
        q8r = (kq[i] = q8r_kernel(m, &w[i], nt, NULL)) != NULL && w[i].n_in == w[0].n_in;
    ebb_err rc;
    if (q8 && (rc = ebb__clm_q8_quantize(m, x, (int)w[0].n_in, nw, 0, diag)))
        return rc;
    if (q8r && (rc = q8r_quantize(m, x, x_ld, (int)w[0].n_in, nw, 0, nt, diag)))
        return rc;
    int off = 0;
    rc = EBB_OK;
    /* mmq_run's input quantized once (or already, by mmq_fold) */
    m->mq_group = !q8 && !q8r, m->mq_held = m->mq_ready;
    m->mq_ready = false;
    if (q8 && n == 2 && (rc = q8_mix(m, w, y, diag)) != EBB_EUNSUPPORTED)
        n = 0; /* (one launch for both: matvec_q8_mix took them) */
    else
        rc = EBB_OK;
    for (uint32_t i = 0; i < n && !rc; i++) {
        if (q8r)
            note_path(m, &w[i], CLM_P_Q8R);
        rc = q8    ? q8_matvec(m, &w[i], kq[i], y, off, NULL, diag)
             : q8r ? q8r_run(m, &w[i], kq[i], y, y_ld, off, NULL, nt, diag)
                   : ebb__clm_wmul(m, &w[i], x, x_ld, y, y_ld, off, NULL, nw, nt, diag);
        off += (int)w[i].n_out;
    }
    m->mq_group = m->mq_held = false;
    return rc;
}

/* rmsnorm or rmsnorm_add (k) over nt rows of n_embd. */
static ebb_err norm_rows(struct clm *m, cl_kernel k, cl_mem x, cl_mem w, cl_mem y, int nt,
                         struct ebb_diag *diag)
{
    int n = (int)m->hp.n_embd;
    float eps = m->hp.rms_eps;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(x), EBB_CL_ARG(n), EBB_CL_ARG(w),  EBB_CL_ARG(y),
                             EBB_CL_ARG(n), EBB_CL_ARG(n), EBB_CL_ARG(eps)};
    ebb_err rc = ebb_cl_set_args(k, 0, a, 7, diag);
    size_t g[2] = {m->tu.norm_wg, (size_t)nt}, l[2] = {m->tu.norm_wg, 1};
    return rc ? rc : ebb_cl_run(m->cl, k, 2, g, l, diag);
}

ebb_err ebb__clm_rmsnorm(struct clm *m, cl_mem x, cl_mem w, cl_mem y, int nt, struct ebb_diag *diag)
{
    return norm_rows(m, m->k_norm, x, w, y, nt, diag);
}

/* The rows of an engine buffer and their stride. */
static void buf_of(struct clm *m, uint8_t b, cl_mem *mem, int *ld)
{
    switch ((enum clm_buf)b) {
    default:
    case CLM_X:
        *mem = m->x, *ld = (int)m->hp.n_embd;
        break;
    case CLM_QKV:
        *mem = m->qkv, *ld = (int)m->n_qkv;
        break;
    case CLM_ATT:
        *mem = m->att, *ld = (int)m->n_q;
        break;
    case CLM_GU:
        *mem = m->gu, *ld = 2 * (int)m->hp.n_ff;
        break;
    }
}

/* y[t] += rmsnorm(x[t]) * w over nt rows of n_embd (x and y distinct). */
static ebb_err rmsnorm_add(struct clm *m, cl_mem x, cl_mem w, cl_mem y, int nt,
                           struct ebb_diag *diag)
{
    return norm_rows(m, m->k_norm_add, x, w, y, nt, diag);
}

static ebb_err proj_inner(struct clm *m, const struct layer *L, const struct clm_step *s, int nt,
                          struct ebb_diag *diag);

/* A CLM_PROJ step. Decode folds the RMS norm (into each product of the group) or the gate
 * activation (into the product) and adds the residual inside; prefill normalises into m->h or
 * gates into m->ff once for the whole token tile first. With a post norm (Gemma) the product
 * goes to m->h (free again: the norm's rows were consumed by the step before), and
 * rmsnorm_add adds its norm to the residual. */
static ebb_err proj(struct clm *m, const struct layer *L, const struct clm_step *s, int nt,
                    struct ebb_diag *diag)
{
    if (!s->post)
        return proj_inner(m, L, s, nt, diag);
    struct clm_step t = *s;
    t.res = false;
    ebb_err rc = proj_inner(m, L, &t, nt, diag);
    return rc ? rc : rmsnorm_add(m, m->h, L->norm[s->post - 1], m->x, nt, diag);
}

/* Where all n products of w (one input) of nt rows take int8 tiles (mmq_tile_of): their input
 * quantized from rows of x (stride x_ld) with the RMS norm (nw) or SwiGLU (glu: x rows are
 * [gate | up]) folded, in one launch (mmq_quantize_norm / mmq_quantize_glu with k 1, of w[0]'s
 * program, the same floats as rmsnorm's or swiglu's) instead of two; m->mq_ready tells
 * wmul_group that the input is there. EBB_EUNSUPPORTED (nothing enqueued) where they do not. */
static ebb_err mmq_fold(struct clm *m, const struct ebb_cl_weight *w, uint32_t n, cl_mem x,
                        int x_ld, cl_mem nw, int glu, int nt, struct ebb_diag *diag)
{
    struct ebb_cl_wprog *p = NULL;
    if (!m->tu.mmq_fold)
        return EBB_EUNSUPPORTED;
    for (uint32_t i = 0; i < n; i++)
        if (w[i].n_in != w[0].n_in || ebb__clm_prog_for(m, &w[i].layout, &p, NULL) ||
            mmq_tile_of(m, &w[i], p, nt) == MMQ_NONE)
            return EBB_EUNSUPPORTED;
    ebb_err rc = ebb__clm_prog_for(m, &w[0].layout, &p, diag);
    bool two = m->mq_res && !glu; /* (proj_inner's: the norm's groups only) */
    cl_kernel k = glu ? p->mmq_quant_glu : two ? p->mmq_quant_nw_r : p->mmq_quant_nw;
    if (rc || !k || (!glu && m->tu.norm_wg > 64)) /* (mmq_quantize_norm's sums: rmsnorm's) */
        return rc ? rc : EBB_EUNSUPPORTED;
    int n_in = (int)w[0].n_in, k1 = 1;
    float eps = m->hp.rms_eps;
    struct ebb_cl_arg an[] = {EBB_CL_ARG(x),       EBB_CL_ARG(x_ld),     EBB_CL_ARG(n_in),
                              EBB_CL_ARG(nw),      EBB_CL_ARG(eps),      EBB_CL_ARG(m->mq_x),
                              EBB_CL_ARG(m->mq_h), EBB_CL_ARG(m->mq_x2), EBB_CL_ARG(m->mq_h2)};
    struct ebb_cl_arg ag[] = {EBB_CL_ARG(x),  EBB_CL_ARG(x_ld),    EBB_CL_ARG(n_in),
                              EBB_CL_ARG(k1), EBB_CL_ARG(m->mq_x), EBB_CL_ARG(m->mq_h)};
    size_t g[2], l[2];
    ebb_cl_mmq_quantize_shape((uint32_t)n_in, (uint32_t)nt, g, l);
    if ((rc = glu ? ebb_cl_set_args(k, 0, ag, 6, diag)
                  : ebb_cl_set_args(k, 0, an, two ? 9 : 7, diag)) ||
        (rc = ebb_cl_run(m->cl, k, 2, g, l, diag)))
        return rc;
    m->mq_ready = true;
    return EBB_OK;
}

/* Whether the n products of w (one input of nt rows: the norm's, or the attention's output)
 * run MMQ_RES's two passes: a model within tu.mmq_res (mq_x2 allocated), every product of at
 * most mq_wide2 inputs on an int8 tile (prefill's, or a batch's: the same products of fewer
 * rows, e.g. a window's halves in `ebb perplexity`) with the two-pass quantize kernels built. */
static bool mmq_res_ok(struct clm *m, const struct ebb_cl_weight *w, uint32_t n, int nt)
{
    if (!m->mq_x2)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        struct ebb_cl_wprog *p = NULL;
        if (w[i].n_in > m->mq_wide2 || ebb__clm_prog_for(m, &w[i].layout, &p, NULL) ||
            mmq_tile_of(m, &w[i], p, nt) == MMQ_NONE || !p->mmq_quant_r || !p->mmq_quant_nw_r)
            return false;
    }
    return true;
}

static ebb_err proj_inner(struct clm *m, const struct layer *L, const struct clm_step *s, int nt,
                          struct ebb_diag *diag)
{
    cl_mem in, out;
    int in_ld, out_ld, n_embd = (int)m->hp.n_embd, n_ff = (int)m->hp.n_ff;
    buf_of(m, s->in, &in, &in_ld);
    buf_of(m, s->out, &out, &out_ld);
    if (s->post) /* the product alone, into h (proj adds its norm to out) */
        out = m->h, out_ld = n_embd;
    const struct ebb_cl_weight *w = L->w[s->group];
    uint32_t n_w = L->n_w[s->group];
    cl_mem res = s->res ? out : NULL;
    /* CPUs (mv_cpu): matvec_cpu's work-items share the norm over MV_CPU_R rows, so it stays
     * folded; SwiGLU's exponentials would be recomputed per work-item, so it runs first. */
    bool fold = nt == 1 && (m->tu.mv_fold || m->k_q8);
    bool fold_norm = fold || (nt == 1 && m->tu.mv_cpu);
    /* Batches that matvec_q8r takes fold the norm or the gate into their quantization. */
    bool rows_q8 = nt > 1 && m->tu.q8r_fold && q8r_kernel(m, &w[0], nt, NULL);
    for (uint32_t i = 1; rows_q8 && i < n_w; i++)
        rows_q8 = q8r_kernel(m, &w[i], nt, NULL) && w[i].n_in == w[0].n_in;
    fold = fold || rows_q8;
    fold_norm = fold_norm || rows_q8;
    ebb_err rc;
    if (s->norm >= 0) {
        cl_mem nw = L->norm[s->norm];
        if (fold_norm)
            return wmul_group(m, w, n_w, in, in_ld, out, out_ld, nw, nt, diag);
        /* MMQ_RES_OPS: 1 the q/k/v group, 4 gate/up (and any other normed group) */
        m->mq_res =
            (m->tu.mmq_res_ops & (s->out == CLM_QKV ? 1u : 4u)) && mmq_res_ok(m, w, n_w, nt);
        if ((rc = mmq_fold(m, w, n_w, in, in_ld, nw, 0, nt, diag)) == EBB_EUNSUPPORTED)
            rc = ebb__clm_rmsnorm(m, in, nw, m->h, nt, diag);
        if (!rc)
            rc = wmul_group(m, w, n_w, m->h, n_embd, out, out_ld, NULL, nt, diag);
        m->mq_res = false;
        return rc;
    }
    if (m->att_q8 && s->in == CLM_ATT && nt == 1) { /* attend quantized it (att_q8_ok) */
        m->att_q8 = false;
        return q8_matvec(m, &w[0], q8_kernel(m, &w[0], diag), out, 0, res, diag);
    }
    if (!s->glu) {
        m->mq_res = s->in == CLM_ATT && (m->tu.mmq_res_ops & 2u) && mmq_res_ok(m, w, 1, nt);
        rc = ebb__clm_wmul(m, &w[0], in, in_ld, out, out_ld, 0, res, NULL, nt, diag);
        m->mq_res = false;
        return rc;
    }
    if (fold) /* SwiGLU / GeGLU folded into the product */
        return wmul_glu(m, &w[0], in, in_ld, out, out_ld, 0, res, NULL, s->glu, nt, diag);
    if (s->glu == CLM_GLU_SILU) {
        rc = mmq_fold(m, w, 1, in, in_ld, NULL, 1, nt, diag);
        if (rc != EBB_EUNSUPPORTED) {
            if (rc)
                return rc;
            m->mq_ready = false, m->mq_held = true; /* the product's input, quantized already */
            rc = ebb__clm_wmul(m, &w[0], m->ff, n_ff, out, out_ld, 0, res, NULL, nt, diag);
            m->mq_held = false; /* (also where the product failed before its launch) */
            return rc;
        }
    }
    cl_kernel kg = s->glu == CLM_GLU_GELU ? m->k_geglu : m->k_swiglu;
    struct ebb_cl_arg sa[] = {EBB_CL_ARG(in), EBB_CL_ARG(in_ld), EBB_CL_ARG(m->ff),
                              EBB_CL_ARG(n_ff), EBB_CL_ARG(n_ff)};
    size_t sg[2] = {m->hp.n_ff, (size_t)nt};
    if ((rc = ebb_cl_set_args(kg, 0, sa, 5, diag)) ||
        (rc = ebb_cl_run(m->cl, kg, 2, sg, NULL, diag)))
        return rc;
    return ebb__clm_wmul(m, &w[0], m->ff, n_ff, out, out_ld, 0, res, NULL, nt, diag);
}

/* Whether decode's attention (step si) may hand its output to the next step quantized: that
 * step is a plain product of the attention output (no norm, no SwiGLU) of one weight that takes
 * 8-bit inputs. */
static bool att_q8_ok(struct clm *m, const struct layer *L, uint32_t si)
{
    if (!m->k_attn_red_q8 || si + 1 >= m->plan.n_steps)
        return false;
    const struct clm_step *s = &m->plan.steps[si + 1];
    if (s->kind != CLM_PROJ || s->in != CLM_ATT || s->norm >= 0 || s->glu || L->n_w[s->group] != 1)
        return false;
    const struct ebb_cl_weight *w = &L->w[s->group][0];
    return w->n_in == m->n_q && q8_kernel(m, w, NULL) != NULL;
}

/* Layer L's rope: its base, position factor and frequency divisors (a windowed layer with a
 * base of its own: that base, no scaling, as the reference has it). */
static void rope_of(struct clm *m, const struct layer *L, float *base, float *fscale, cl_mem *ff)
{
    const struct ebb__hparams *hp = &m->hp;
    if (L->win && hp->rope_base_swa > 0) {
        *base = hp->rope_base_swa, *fscale = 1.0f, *ff = NULL;
        return;
    }
    *base = hp->rope_base;
    *fscale = hp->rope_scale > 0 ? 1.0f / hp->rope_scale : 1.0f;
    *ff = m->rope_ff;
}

/* The positions a query at position n_kv - 1 of layer L attends to. */
static int att_span(const struct layer *L, int n_kv)
{
    return L->win && (uint32_t)n_kv > L->win ? (int)L->win : n_kv;
}

/* The decode attention chunks of a query at position n_kv - 1 in layer L. */
static int att_chunks(struct clm *m, const struct layer *L, int n_kv)
{
    return (att_span(L, n_kv) + (int)m->tu.att_chunk - 1) / (int)m->tu.att_chunk;
}

/* The work-group of decode attention's second pass (attention.cl's att_combine) over nc
 * chunks: a slice of the head's dimensions (ebb_cl_att_red_ds) times rr, each row taking every
 * rr-th chunk; rr grows with the chunks (about 8 a work-item, at most 32 rows, within the
 * device's work-group), 1 on CPUs. Its launch has n_head x att_red_slices work-groups. */
static size_t att_red_wg(const struct clm *m, int nc)
{
    size_t ds = ebb_cl_att_red_ds(m->hp.head_dim), rr = 1;
    while (!m->tu.mv_cpu && rr < 32 && (size_t)nc > 8 * rr && ds * rr * 2 <= m->cl->info.max_wg)
        rr *= 2;
    return ds * rr;
}

static size_t att_red_slices(const struct clm *m)
{
    return m->hp.head_dim / ebb_cl_att_red_ds(m->hp.head_dim);
}

/* Runs of keys attn_prefill_mma splits nt queries at position pos into (n_split): doubled
 * while the launch would not fill the device twice over (ceil(nt / 64) x heads x runs
 * work-groups of 128, about 3 resident a compute unit; 128 queries a work-group of 256 with
 * att_mma_w 8), each run keeps at least 512 keys and
 * the partials fit m->apo. A 512-token chunk after 16384 tokens runs 4 ways. */
static int prefill_splits(const struct clm *m, int nt, int pos, int win)
{
    if (!m->k_attn_merge)
        return 1;
    int first = win > 0 && pos + 1 > win ? pos + 1 - win : 0, keys = pos + nt - first;
    size_t tq = ebb_cl_att_mma_wg(&m->tu) / 2; /* queries a work-group */
    size_t wgs = ((size_t)nt + tq - 1) / tq * m->hp.n_head * ebb_cl_att_mma_split(m->hp.head_dim);
    size_t want = 6 * (size_t)m->cl->info.compute_units;
    int nz = 1;
    while (nz * 2 <= (int)m->att_split_max && wgs * nz < want && keys / (2 * nz) >= 512 &&
           (size_t)nt * 2 * nz <= ATT_SPLIT_ROWS)
        nz *= 2;
    return nz;
}

/* Prefill attention of nt queries at position pos (window win) with attn_prefill's 15
 * arguments (the window last): on tensor cores where built (attn_prefill_mma, 64 queries a
 * work-group of 128, ebb_cl_att_mma_split work-groups a head, split over runs of keys and
 * merged by attn_prefill_merge where prefill_splits says; windows and rings as attn_prefill),
 * else attn_prefill. */
static ebb_err prefill_attention(struct clm *m, const struct ebb_cl_arg *a, int nt, int pos,
                                 int win, struct ebb_diag *diag)
{
    bool mma = m->k_attn_pre_mma != NULL;
    cl_kernel k = mma ? m->k_attn_pre_mma : m->k_attn_pre;
    size_t g[3] = {(size_t)nt, m->hp.n_head, 1}, l[3] = {m->tu.att_tq, 1, 1};
    ebb_err rc = ebb_cl_set_args(k, 0, a, 15, diag);
    if (rc || !mma)
        return rc ? rc : ebb_cl_run(m->cl, k, 2, g, l, diag);
    int nz = prefill_splits(m, nt, pos, win);
    size_t wg = ebb_cl_att_mma_wg(&m->tu); /* 2 work-items a query */
    g[0] = ((size_t)nt + wg / 2 - 1) / (wg / 2) * wg;
    g[1] = (size_t)m->hp.n_head * ebb_cl_att_mma_split(m->hp.head_dim);
    g[2] = (size_t)nz;
    l[0] = wg;
    struct ebb_cl_arg p[] = {EBB_CL_ARG(m->apo), EBB_CL_ARG(m->apml)};
    if ((rc = ebb_cl_set_args(k, 15, p, 2, diag)) || (rc = ebb_cl_run(m->cl, k, 3, g, l, diag)) ||
        nz == 1)
        return rc;
    /* a[11..13]: out, out_ld, r0 */
    struct ebb_cl_arg b[] = {EBB_CL_ARG(m->apo),
                             EBB_CL_ARG(m->apml),
                             EBB_CL_ARG(nz),
                             EBB_CL_ARG(nt),
                             a[11],
                             a[12],
                             a[13]};
    size_t gm[3] = {m->hp.head_dim, m->hp.n_head, (size_t)nt};
    return (rc = ebb_cl_set_args(m->k_attn_merge, 0, b, 7, diag))
               ? rc
               : ebb_cl_run(m->cl, m->k_attn_merge, 3, gm, NULL, diag);
}

/* rope_kv's and rope_kv_rows' launch for nt rows: a work-item a pair of a row and up to 8 heads
 * (the angle computed once for them), a head's pairs a work-group. */
static void rope_shape(const struct ebb__hparams *hp, int nt, size_t g[3], size_t l[3])
{
    g[0] = l[0] = hp->head_dim / 2;
    g[1] = (hp->n_head + hp->n_head_kv + 7) / 8, g[2] = (size_t)nt;
    l[1] = l[2] = 1;
}

/* A CLM_ATTN step: rope_kv rotates q and k in m->qkv and stores k and v in the layer's cache,
 * then attention of the nt queries into m->att (decode: in chunks, reduced when more than
 * one; with tu.att_rope the first decode pass does rope_kv's work itself). */
static ebb_err attend(struct clm *m, const struct layer *L, uint32_t seq, int nt, int pos,
                      uint32_t si, struct ebb_diag *diag)
{
    bool is_neox = m->plan.steps[si].neox;
    m->att_q8 = false;
    const struct ebb__hparams *hp = &m->hp;
    ebb_err rc;
    int n_qkv = (int)m->n_qkv, n_q = (int)m->n_q, win = (int)L->win;
    cl_ulong kv_base = (cl_ulong)seq * hp->n_head_kv * L->kv_len * hp->head_dim;
    int n_ctx = (int)L->kv_len, nh = (int)hp->n_head, nkv = (int)hp->n_head_kv;
    int hd = (int)hp->head_dim, n_rot = (int)hp->n_rot, neox = is_neox;
    float base, fscale;
    cl_mem ff;
    rope_of(m, L, &base, &fscale, &ff);
    struct ebb_cl_arg ra[] = {EBB_CL_ARG(m->qkv), EBB_CL_ARG(n_qkv),   EBB_CL_ARG(L->kc),
                              EBB_CL_ARG(L->vc),  EBB_CL_ARG(kv_base), EBB_CL_ARG(n_ctx),
                              EBB_CL_ARG(pos),    EBB_CL_ARG(nh),      EBB_CL_ARG(nkv),
                              EBB_CL_ARG(hd),     EBB_CL_ARG(n_rot),   EBB_CL_ARG(base),
                              EBB_CL_ARG(fscale), EBB_CL_ARG(neox),    EBB_CL_ARG(ff)};
    size_t rg[3], rl[3];
    rope_shape(hp, nt, rg, rl);
    bool fused_rope = nt == 1 && m->k_attn_rope; /* attn_decode_rope does rope_kv's work */
    if (!fused_rope && ((rc = ebb_cl_set_args(m->k_rope, 0, ra, 15, diag)) ||
                        (rc = ebb_cl_run(m->cl, m->k_rope, 3, rg, rl, diag))))
        return rc;

    float scale = hp->attn_factor * hp->attn_factor / sqrtf((float)hp->head_dim); /* longrope */
    if (nt == 1) {
        int n_kv = pos + 1;
        /* Deep in the context, the kernels of longer chunks (m->att_chunk_deep). */
        bool deep = m->att_chunk_deep && att_span(L, n_kv) >= (int)m->att_deep_from;
        /* Shallow, one query head a work-group (m->att_shallow). */
        bool shallow = !deep && m->att_shallow.ops && att_span(L, n_kv) < (int)m->tu.att_gqa_from;
        const struct clm_att_set *as = deep ? &m->att_deep : shallow ? &m->att_shallow : NULL;
        int chunk = deep ? (int)m->att_chunk_deep : (int)m->tu.att_chunk;
        cl_kernel k_part = as ? as->part : m->k_attn_part;
        cl_kernel k_rope = as ? as->rope : m->k_attn_rope;
        cl_kernel k_red = as ? as->red : m->k_attn_red;
        cl_kernel k_red_q8 = as ? as->red_q8 : m->k_attn_red_q8;
        int nc = (att_span(L, n_kv) + chunk - 1) / chunk;
        /* With 8-bit inputs for the output projection, the reduction (run even for one chunk)
         * quantizes the output for it: one launch of quantize_x8 less; with few chunks, the
         * attention's last work-groups do it (attn_decode_rope_q8), one launch less again. */
        bool q8 = att_q8_ok(m, L, si);
        cl_kernel k_fold = as ? as->rope_q8 : m->k_attn_rope_q8;
        bool fold = q8 && fused_rope && k_fold && nc <= (int)m->tu.att_fold;
        cl_mem att = q8 ? NULL : m->att;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(m->qkv),  EBB_CL_ARG(L->kc),  EBB_CL_ARG(L->vc),
                                 EBB_CL_ARG(kv_base), EBB_CL_ARG(n_ctx),  EBB_CL_ARG(n_kv),
                                 EBB_CL_ARG(nh),      EBB_CL_ARG(nkv),    EBB_CL_ARG(scale),
                                 EBB_CL_ARG(m->po),   EBB_CL_ARG(m->pml), EBB_CL_ARG(att),
                                 EBB_CL_ARG(win)};
        struct ebb_cl_arg b[] = {EBB_CL_ARG(m->po), EBB_CL_ARG(m->pml), EBB_CL_ARG(nc),
                                 EBB_CL_ARG(m->att)};
        struct ebb_cl_arg bq[] = {EBB_CL_ARG(m->po), EBB_CL_ARG(m->pml), EBB_CL_ARG(nc),
                                  EBB_CL_ARG(m->xq), EBB_CL_ARG(m->xd)};
        size_t wg = ebb_cl_att_wg(&m->tu);
        size_t g1[2] = {(size_t)nc * wg, hp->n_head / (shallow ? 1 : m->tu.att_g)}, l1[2] = {wg, 1};
        size_t g2[2] = {att_red_wg(m, nc), hp->n_head * att_red_slices(m)}, l2[2] = {g2[0], 1};
        struct ebb_cl_arg ar[] = {EBB_CL_ARG(n_rot), EBB_CL_ARG(base), EBB_CL_ARG(fscale),
                                  EBB_CL_ARG(neox),  EBB_CL_ARG(ff),   EBB_CL_ARG(win)};
        cl_mem hnq = m->hn_fold ? L->qn : NULL, hnk = m->hn_fold ? L->kn : NULL;
        float hn_eps = hp->rms_eps;
        struct ebb_cl_arg hn[] = {EBB_CL_ARG(hnq), EBB_CL_ARG(hnk), EBB_CL_ARG(hn_eps)};
        m->hn_fold = false;
        struct ebb_cl_arg fa[] = {EBB_CL_ARG(m->att_cnt), EBB_CL_ARG(m->xq), EBB_CL_ARG(m->xd)};
        cl_kernel kp = fold ? k_fold : fused_rope ? k_rope : k_part;
        if ((rc = ebb_cl_set_args(kp, 0, a, fused_rope ? 12 : 13, diag)) ||
            (fused_rope && (rc = ebb_cl_set_args(kp, 12, ar, 6, diag))) ||
            (fused_rope && (rc = ebb_cl_set_args(kp, 18, hn, 3, diag))) ||
            (fold && (rc = ebb_cl_set_args(kp, 21, fa, 3, diag))) ||
            (rc = ebb_cl_run(m->cl, kp, 2, g1, l1, diag)))
            return rc;
        if (fold) {
            m->att_q8 = true;
            return EBB_OK;
        }
        if (q8) {
            if ((rc = ebb_cl_set_args(k_red_q8, 0, bq, 5, diag)) ||
                (rc = ebb_cl_run(m->cl, k_red_q8, 2, g2, l2, diag)))
                return rc;
            m->att_q8 = true;
            return EBB_OK;
        }
        if (nc > 1 && ((rc = ebb_cl_set_args(k_red, 0, b, 4, diag)) ||
                       (rc = ebb_cl_run(m->cl, k_red, 2, g2, l2, diag))))
            return rc;
        return EBB_OK;
    }
    int r0 = 0;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(m->qkv), EBB_CL_ARG(n_qkv),   EBB_CL_ARG(L->kc),
                             EBB_CL_ARG(L->vc),  EBB_CL_ARG(kv_base), EBB_CL_ARG(n_ctx),
                             EBB_CL_ARG(pos),    EBB_CL_ARG(nt),      EBB_CL_ARG(nh),
                             EBB_CL_ARG(nkv),    EBB_CL_ARG(scale),   EBB_CL_ARG(m->att),
                             EBB_CL_ARG(n_q),    EBB_CL_ARG(r0),      EBB_CL_ARG(win)};
    return prefill_attention(m, a, nt, pos, win, diag);
}

/* Prefill attention of part p's rows of a batch (their keys and values already stored). */
static ebb_err attend_prefill_part(struct clm *m, const struct layer *L, const struct clm_part *p,
                                   struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    int n_qkv = (int)m->n_qkv, n_q = (int)m->n_q, n_ctx = (int)L->kv_len, win = (int)L->win;
    int nh = (int)hp->n_head, nkv = (int)hp->n_head_kv, pos = p->pos, nt = p->n, r0 = p->r0;
    cl_ulong kv_base = (cl_ulong)p->seq * hp->n_head_kv * L->kv_len * hp->head_dim;
    float scale = hp->attn_factor * hp->attn_factor / sqrtf((float)hp->head_dim); /* longrope */
    struct ebb_cl_arg a[] = {EBB_CL_ARG(m->qkv), EBB_CL_ARG(n_qkv),   EBB_CL_ARG(L->kc),
                             EBB_CL_ARG(L->vc),  EBB_CL_ARG(kv_base), EBB_CL_ARG(n_ctx),
                             EBB_CL_ARG(pos),    EBB_CL_ARG(nt),      EBB_CL_ARG(nh),
                             EBB_CL_ARG(nkv),    EBB_CL_ARG(scale),   EBB_CL_ARG(m->att),
                             EBB_CL_ARG(n_q),    EBB_CL_ARG(r0),      EBB_CL_ARG(win)};
    return prefill_attention(m, a, nt, pos, win, diag);
}

/* Decode attention of every one-row part of a batch (slots at different depths) in one
 * flash-decoding launch over (chunk, head, decode row), reduced in one more. */
static ebb_err attend_decode_rows(struct clm *m, const struct layer *L, const struct clm_rows *rows,
                                  struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    int max_nc = 1;
    for (uint32_t i = 0; i < rows->n_parts; i++) {
        const struct clm_part *p = &rows->parts[i];
        int nc = att_chunks(m, L, p->pos + 1);
        if (p->n == 1 && nc > max_nc)
            max_nc = nc;
    }
    int n_qkv = (int)m->n_qkv, n_q = (int)m->n_q, n_ctx = (int)L->kv_len, win = (int)L->win;
    int nh = (int)hp->n_head, nkv = (int)hp->n_head_kv, stride_nc = (int)m->max_chunks;
    cl_ulong slot = (cl_ulong)hp->n_head_kv * L->kv_len * hp->head_dim;
    float scale = hp->attn_factor * hp->attn_factor / sqrtf((float)hp->head_dim); /* longrope */
    struct ebb_cl_arg a[] = {EBB_CL_ARG(m->qkv), EBB_CL_ARG(n_qkv),     EBB_CL_ARG(L->kc),
                             EBB_CL_ARG(L->vc),  EBB_CL_ARG(m->rt),     EBB_CL_ARG(m->dr),
                             EBB_CL_ARG(slot),   EBB_CL_ARG(n_ctx),     EBB_CL_ARG(nh),
                             EBB_CL_ARG(nkv),    EBB_CL_ARG(scale),     EBB_CL_ARG(m->po),
                             EBB_CL_ARG(m->pml), EBB_CL_ARG(stride_nc), EBB_CL_ARG(m->att),
                             EBB_CL_ARG(n_q),    EBB_CL_ARG(win)};
    struct ebb_cl_arg b[] = {EBB_CL_ARG(m->po), EBB_CL_ARG(m->pml),    EBB_CL_ARG(m->rt),
                             EBB_CL_ARG(m->dr), EBB_CL_ARG(stride_nc), EBB_CL_ARG(m->att),
                             EBB_CL_ARG(n_q),   EBB_CL_ARG(win)};
    size_t wg = ebb_cl_att_wg(&m->tu);
    size_t g1[3] = {(size_t)max_nc * wg, hp->n_head / m->tu.att_g, (size_t)rows->n_dec};
    size_t l1[3] = {wg, 1, 1};
    size_t g2[3] = {att_red_wg(m, max_nc), hp->n_head * att_red_slices(m), (size_t)rows->n_dec};
    size_t l2[3] = {g2[0], 1, 1};
    ebb_err rc;
    if ((rc = ebb_cl_set_args(m->k_attn_rows, 0, a, 17, diag)) ||
        (rc = ebb_cl_run(m->cl, m->k_attn_rows, 3, g1, l1, diag)))
        return rc;
    if (max_nc == 1)
        return EBB_OK; /* every row wrote its result itself */
    if ((rc = ebb_cl_set_args(m->k_attn_red_rows, 0, b, 8, diag)))
        return rc;
    return ebb_cl_run(m->cl, m->k_attn_red_rows, 3, g2, l2, diag);
}

/* A CLM_ATTN step over the chunk's rows. One part: as attend does for a single slot. Several
 * (a batch): rope_kv_rows rotates every row at its own position and stores its key and value
 * in its slot's cache, then parts of two rows or more attend as prefill, and the one-row parts
 * (decode rows of many slots) in one batched launch. */
static ebb_err attend_rows(struct clm *m, const struct layer *L, const struct clm_rows *rows,
                           uint32_t si, struct ebb_diag *diag)
{
    if (rows->n_parts == 1) {
        const struct clm_part *p = &rows->parts[0];
        return attend(m, L, p->seq, p->n, p->pos, si, diag);
    }
    const struct ebb__hparams *hp = &m->hp;
    m->att_q8 = false;
    int n_qkv = (int)m->n_qkv, n_ctx = (int)L->kv_len, nh = (int)hp->n_head;
    int nkv = (int)hp->n_head_kv, hd = (int)hp->head_dim, n_rot = (int)hp->n_rot;
    int neox = m->plan.steps[si].neox;
    float base, fscale;
    cl_mem ff;
    rope_of(m, L, &base, &fscale, &ff);
    cl_ulong slot = (cl_ulong)hp->n_head_kv * L->kv_len * hp->head_dim;
    struct ebb_cl_arg ra[] = {EBB_CL_ARG(m->qkv), EBB_CL_ARG(n_qkv), EBB_CL_ARG(L->kc),
                              EBB_CL_ARG(L->vc),  EBB_CL_ARG(m->rt), EBB_CL_ARG(slot),
                              EBB_CL_ARG(n_ctx),  EBB_CL_ARG(nh),    EBB_CL_ARG(nkv),
                              EBB_CL_ARG(hd),     EBB_CL_ARG(n_rot), EBB_CL_ARG(base),
                              EBB_CL_ARG(fscale), EBB_CL_ARG(neox),  EBB_CL_ARG(ff)};
    size_t rg[3], rl[3];
    rope_shape(hp, (int)rows->nt, rg, rl);
    ebb_err rc;
    if ((rc = ebb_cl_set_args(m->k_rope_rows, 0, ra, 15, diag)) ||
        (rc = ebb_cl_run(m->cl, m->k_rope_rows, 3, rg, rl, diag)))
        return rc;
    for (uint32_t i = 0; i < rows->n_parts; i++)
        if (rows->parts[i].n > 1 && (rc = attend_prefill_part(m, L, &rows->parts[i], diag)))
            return rc;
    return rows->n_dec ? attend_decode_rows(m, L, rows, diag) : EBB_OK;
}

/* A CLM_BIAS step: the layer's q | k | v bias added to the nt rows of m->qkv. */
static ebb_err add_bias(struct clm *m, const struct layer *L, int nt, struct ebb_diag *diag)
{
    int ld = (int)m->n_qkv;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(m->qkv), EBB_CL_ARG(ld), EBB_CL_ARG(L->bias)};
    size_t g[2] = {m->n_qkv, (size_t)nt};
    ebb_err rc = ebb_cl_set_args(m->k_bias, 0, a, 3, diag);
    return rc ? rc : ebb_cl_run(m->cl, m->k_bias, 2, g, NULL, diag);
}

/* A CLM_HEAD_NORM step (step si): each query and key head of the nt rows of m->qkv RMS-normed
 * and scaled by the layer's q / k norm vector; in decode, when the next step's attention
 * rotates q and k itself (attn_decode_rope, tu.att_hnorm), left to it (m->hn_fold). */
static ebb_err head_norm(struct clm *m, const struct layer *L, int nt, uint32_t si,
                         struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    if (nt == 1 && m->k_attn_rope && m->tu.att_hnorm && si + 1 < m->plan.n_steps &&
        m->plan.steps[si + 1].kind == CLM_ATTN) {
        m->hn_fold = true;
        return EBB_OK;
    }
    int ld = (int)m->n_qkv, nh = (int)hp->n_head, hd = (int)hp->head_dim;
    float eps = hp->rms_eps;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(m->qkv), EBB_CL_ARG(ld), EBB_CL_ARG(L->qn),
                             EBB_CL_ARG(L->kn),  EBB_CL_ARG(nh), EBB_CL_ARG(hd),
                             EBB_CL_ARG(eps)};
    size_t g[3] = {m->tu.norm_wg, hp->n_head + hp->n_head_kv, (size_t)nt};
    size_t l[3] = {m->tu.norm_wg, 1, 1};
    ebb_err rc = ebb_cl_set_args(m->k_head_norm, 0, a, 7, diag);
    return rc ? rc : ebb_cl_run(m->cl, m->k_head_norm, 3, g, l, diag);
}

/* A CLM_MOE step: the norm here, the router's product and the experts in model-cl-moe.c. One
 * token whose experts take 8-bit inputs folds the norm into the router's product and the
 * experts' quantization (no m->h, no norm launch); the float experts need m->h. */
static ebb_err moe(struct clm *m, const struct layer *L, const struct clm_step *s, int nt,
                   struct ebb_diag *diag)
{
    cl_mem scores, nw = NULL;
    bool q8 = false;
    ebb_err rc = ebb__clm_moe_prepare(m, L, s, &scores, &q8, diag);
    if (rc)
        return rc;
    if (nt == 1 && q8)
        nw = L->norm[s->norm];
    if (!nw && (rc = ebb__clm_rmsnorm(m, m->x, L->norm[s->norm], m->h, nt, diag)))
        return rc;
    rc = ebb__clm_moe_router(m, L, s, nt, nw, diag);
    if (rc == EBB_EUNSUPPORTED) /* the router's ordinary product */
        rc = ebb__clm_wmul(m, &L->w[s->group][0], nw ? m->x : m->h, (int)m->hp.n_embd, scores,
                           (int)m->hp.n_expert, 0, NULL, nw, nt, diag);
    if (rc)
        return rc;
    return ebb__clm_moe_experts(m, L, s, nt, nw, diag);
}

ebb_err ebb__clm_moe_head(struct clm *m, const struct layer *L, const struct clm_step *s, int nt,
                          struct ebb_diag *diag)
{
    cl_mem scores;
    bool q8 = false;
    ebb_err rc = ebb__clm_moe_prepare(m, L, s, &scores, &q8, diag);
    if (rc || (rc = ebb__clm_rmsnorm(m, m->x, L->norm[s->norm], m->h, nt, diag)))
        return rc;
    rc = ebb__clm_moe_router(m, L, s, nt, NULL, diag);
    if (rc == EBB_EUNSUPPORTED)
        rc = ebb__clm_wmul(m, &L->w[s->group][0], m->h, (int)m->hp.n_embd, scores,
                           (int)m->hp.n_expert, 0, NULL, NULL, nt, diag);
    return rc ? rc : ebb__clm_moe_route(m, nt, diag);
}

ebb_err ebb__clm_layer_steps(struct clm *m, const struct layer *L, const struct clm_rows *rows,
                             uint32_t from, uint32_t to, struct ebb_diag *diag)
{
    int nt = rows->nt;
    for (uint32_t i = from; i < to; i++) {
        const struct clm_step *s = &m->plan.steps[i];
        ebb_err rc;
        switch ((enum clm_step_kind)s->kind) {
        case CLM_ATTN:
            rc = attend_rows(m, L, rows, i, diag);
            break;
        case CLM_BIAS:
            rc = add_bias(m, L, nt, diag);
            break;
        case CLM_HEAD_NORM:
            rc = head_norm(m, L, nt, i, diag);
            break;
        case CLM_MOE:
            rc = moe(m, L, s, nt, diag);
            break;
        default:
            rc = proj(m, L, s, nt, diag);
            break;
        }
        if (rc)
            return rc;
    }
    return EBB_OK;
}

/* One layer for the chunk's rows: the compiled steps of the family's layer program
 * (model-cl-plan.c); x is updated in place. */
ebb_err ebb__clm_layer(struct clm *m, const struct layer *L, const struct clm_rows *rows,
                       struct ebb_diag *diag)
{
    return ebb__clm_layer_steps(m, L, rows, 0, m->plan.n_steps, diag);
}

ebb_err ebb__clm_layer_chunks(struct clm *m, const struct layer *L, const struct clm_rows *rows,
                              uint32_t n, struct ebb_diag *diag)
{
    if (n == 1)
        return ebb__clm_layer(m, L, rows, diag);
    size_t row = sizeof(float) * m->hp.n_embd;
    for (uint32_t i = 0; i < n; i++) {
        size_t off = (size_t)i * m->n_batch * row, bytes = (size_t)rows[i].nt * row;
        ebb_err rc =
            ebb_cl_check(clEnqueueCopyBuffer(m->cl->q, m->xl, m->x, off, 0, bytes, 0, NULL, NULL),
                         diag, "copying a chunk's rows in");
        if (rc || (rc = ebb__clm_layer(m, L, &rows[i], diag)) ||
            (rc = ebb_cl_check(
                 clEnqueueCopyBuffer(m->cl->q, m->x, m->xl, 0, off, bytes, 0, NULL, NULL), diag,
                 "copying a chunk's rows out")))
            return rc;
    }
    return EBB_OK;
}
