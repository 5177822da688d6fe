/* moe.cl's mixture-of-experts kernels against CPU references (included by test-kernels.c):
 * the router (softmax, top k with a tie, renormalised and scaled weights) exactly in its choice
 * and within 1e-5 in its weights; the gathered gate/up product and the weighted down product
 * over expert stacks of several types and layouts within test-kernels.c's dot-product bound;
 * the grouped prefill kernels against those two. */

enum { MOE_E = 6, MOE_K = 2, MOE_F = 256, MOE_D = 256, MOE_NT = 3 };

/* The router on the CPU, as ref-moe.c routes. */
static void moe_route_ref(const float *s, int n, int k, int norm, float scale, int *ids, float *w)
{
    float mx = s[0], sum = 0.0f, p[1024];
    for (int e = 1; e < n; e++)
        mx = s[e] > mx ? s[e] : mx;
    for (int e = 0; e < n; e++)
        sum += expf(s[e] - mx);
    for (int e = 0; e < n; e++)
        p[e] = expf(s[e] - mx) / sum;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++)
                taken |= ids[i] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        ids[j] = best;
        w[j] = p[best];
    }
    float tot = 0.0f;
    for (int j = 0; j < k; j++)
        tot += w[j];
    for (int j = 0; j < k; j++)
        w[j] = w[j] / (norm ? tot : 1.0f) * (scale != 0.0f ? scale : 1.0f);
}

static void test_moe_route(cl_program p, int *ids_out, float *w_out)
{
    float s[MOE_NT * MOE_E];
    for (int i = 0; i < MOE_NT * MOE_E; i++)
        s[i] = 2.0f * frand();
    s[1 * MOE_E + 4] = s[1 * MOE_E + 1] = 3.0f; /* a tie for first place: the lower id first */
    cl_mem sb = buf(sizeof(s), s), ib = buf(sizeof(int) * MOE_NT * MOE_K, NULL);
    cl_mem wb = buf(sizeof(float) * MOE_NT * MOE_K, NULL);
    cl_kernel k = kern(p, "moe_route");
    for (int v = 0; v < 2; v++) {
        int n = MOE_E, kk = MOE_K, norm = v == 0;
        float scale = v == 0 ? 0.0f : 2.5f;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(sb),   EBB_CL_ARG(n),     EBB_CL_ARG(kk),
                                 EBB_CL_ARG(norm), EBB_CL_ARG(scale), EBB_CL_ARG(ib),
                                 EBB_CL_ARG(wb)};
        OK(ebb_cl_set_args(k, 0, a, 7, D));
        size_t g[2] = {128, MOE_NT}, l[2] = {128, 1}; /* moe.cl's MOE_ROUTE_WG */
        OK(ebb_cl_run(cl, k, 2, g, l, D));
        int ids[MOE_NT * MOE_K];
        float w[MOE_NT * MOE_K];
        rd(ib, sizeof(ids), ids);
        rd(wb, sizeof(w), w);
        for (int t = 0; t < MOE_NT; t++) {
            int ri[MOE_K];
            float rw[MOE_K];
            moe_route_ref(s + t * MOE_E, MOE_E, MOE_K, norm, scale, ri, rw);
            for (int j = 0; j < MOE_K; j++) {
                CHECK(ids[t * MOE_K + j] == ri[j], "moe_route t %d slot %d: expert %d vs %d", t, j,
                      ids[t * MOE_K + j], ri[j]);
                CHECK(fabsf(w[t * MOE_K + j] - rw[j]) <= 1e-5f * fabsf(rw[j]) + 1e-7f,
                      "moe_route t %d slot %d: weight %g vs %g", t, j, w[t * MOE_K + j], rw[j]);
            }
        }
        if (v == 0) {
            CHECK(ids[MOE_K] == 1 && ids[MOE_K + 1] == 4, "moe_route tie: %d %d", ids[MOE_K],
                  ids[MOE_K + 1]);
            memcpy(ids_out, ids, sizeof(ids));
            memcpy(w_out, w, sizeof(w));
        }
    }
    clReleaseKernel(k);
    clReleaseMemObject(sb);
    clReleaseMemObject(ib);
    clReleaseMemObject(wb);
}

/* moe_route over more experts than its work-group has items (n a multiple of nothing), k = 8
 * with ties (equal scores in different items and in one item), and the widest k (64). */
static void test_moe_route_wide(cl_program p)
{
    enum { E = 301, NT = 2, KMAX = 64 };
    static float s[NT * E];
    for (int i = 0; i < NT * E; i++)
        s[i] = 4.0f * frand();
    s[5] = s[133] = s[261] = 6.0f; /* items 5, 5 and 5 (one item's experts): ids in order */
    s[E + 300] = s[E + 23] = s[E + 7] = 5.0f; /* across items, of one reducer and not */
    cl_mem sb = buf(sizeof(s), s), ib = buf(sizeof(int) * NT * KMAX, NULL);
    cl_mem wb = buf(sizeof(float) * NT * KMAX, NULL);
    cl_kernel k = kern(p, "moe_route");
    int ks[] = {8, KMAX};
    for (int v = 0; v < 2; v++) {
        int n = E, kk = ks[v], norm = 1;
        float scale = v ? 2.5f : 0.0f;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(sb),   EBB_CL_ARG(n),     EBB_CL_ARG(kk),
                                 EBB_CL_ARG(norm), EBB_CL_ARG(scale), EBB_CL_ARG(ib),
                                 EBB_CL_ARG(wb)};
        OK(ebb_cl_set_args(k, 0, a, 7, D));
        size_t g[2] = {128, NT}, l[2] = {128, 1};
        OK(ebb_cl_run(cl, k, 2, g, l, D));
        int ids[NT * KMAX], ri[KMAX];
        float w[NT * KMAX], rw[KMAX];
        rd(ib, sizeof(int) * NT * kk, ids);
        rd(wb, sizeof(float) * NT * kk, w);
        for (int t = 0; t < NT; t++) {
            moe_route_ref(s + t * E, E, kk, norm, scale, ri, rw);
            for (int j = 0; j < kk; j++) {
                CHECK(ids[t * kk + j] == ri[j], "moe_route %d of %d, t %d slot %d: %d vs %d", kk, E,
                      t, j, ids[t * kk + j], ri[j]);
                CHECK(fabsf(w[t * kk + j] - rw[j]) <= 1e-5f * fabsf(rw[j]) + 1e-7f,
                      "moe_route %d of %d, t %d slot %d: weight %g vs %g", kk, E, t, j,
                      w[t * kk + j], rw[j]);
            }
        }
        CHECK(ids[0] == 5 && ids[1] == 133 && ids[2] == 261 && ids[kk] == 7 && ids[kk + 1] == 23 &&
                  ids[kk + 2] == 300,
              "moe_route ties: %d %d %d / %d %d %d", ids[0], ids[1], ids[2], ids[kk], ids[kk + 1],
              ids[kk + 2]);
    }
    clReleaseKernel(k);
    clReleaseMemObject(sb);
    clReleaseMemObject(ib);
    clReleaseMemObject(wb);
}

/* A stack of MOE_E random matrices of rows x n_in in layout l, and its dequantized copy. */
static float *moe_stack(const struct ebb_cl_layout *l, uint32_t rows, uint32_t n_in,
                        struct ebb_cl_weight *wt)
{
    uint64_t rowb = 0;
    uint32_t n = MOE_E * rows;
    OK(ebb_ggml_row_bytes(l->type, n_in, &rowb));
    uint8_t *raw = malloc(rowb * n);
    random_rows(l->type, n, n_in, raw, rowb);
    float *w = malloc(sizeof(float) * n * n_in);
    for (uint32_t o = 0; o < n; o++)
        OK(ebb_quant_dequantize_row(l->type, raw + o * rowb, w + (size_t)o * n_in, n_in));
    struct ebb_cl_wsrc src = {raw, n};
    OK(ebb_cl_weight_new(cl, l, n_in, &src, 1, NULL, wt, D));
    free(raw);
    return w;
}

static double silu_d(double a)
{
    return a / (1.0 + exp(-a));
}

/* quantize_x8 of n values of x (glu: x holds [gate | up], n each) into xq / xd. */
static void moe_quantize(cl_kernel kq, cl_mem x, int n, int glu, cl_mem xq, cl_mem xd)
{
    cl_mem nul = NULL;
    float eps = 1e-5f;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(x),   EBB_CL_ARG(n),  EBB_CL_ARG(nul), EBB_CL_ARG(eps),
                             EBB_CL_ARG(glu), EBB_CL_ARG(xq), EBB_CL_ARG(xd)};
    size_t g = ((size_t)n + EBB_CL_Q8_WG - 1) / EBB_CL_Q8_WG * EBB_CL_Q8_WG, l = EBB_CL_Q8_WG;
    OK(ebb_cl_set_args(kq, 0, a, 7, D));
    OK(ebb_cl_run(cl, kq, 1, &g, &l, D));
}

/* The input rounding bound of a product on 8-bit inputs (as test_matvec_q8's): per block of 32,
 * sum |w| * max |x| / 127 / 2, plus the float tolerance. */
static double q8_bound(const float *w, const double *x, int n, double *ref, double *mag)
{
    double q = 0;
    *ref = 0, *mag = 0;
    for (int b = 0; b < n / 32; b++) {
        double amax = 0, wabs = 0;
        for (int i = b * 32; i < b * 32 + 32; i++) {
            *ref += w[i] * x[i];
            *mag += fabs(w[i] * x[i]);
            amax = fmax(amax, fabs(x[i]));
            wabs += fabs(w[i]);
        }
        q += wabs * amax / 127.0 * 0.51;
    }
    return q;
}

/* One moe_down_q8 launch over the down stack dw (k experts' rows of n_in, n_out a row), no
 * residual: out = the weighted sum. */
static void run_down_q8(cl_program p, const struct ebb_cl_weight *dw, int n_in, int n_out, int k,
                        cl_mem ids, cl_mem wts, cl_mem xq, cl_mem xd, cl_mem out)
{
    cl_mem nul = NULL;
    cl_kernel kd = kern(p, "moe_down_q8");
    OK(ebb_cl_weight_set_args(dw, kd, 0, D));
    struct ebb_cl_arg b[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(n_out), EBB_CL_ARG(k),
                             EBB_CL_ARG(ids),  EBB_CL_ARG(wts),   EBB_CL_ARG(xq),
                             EBB_CL_ARG(xd),   EBB_CL_ARG(out),   EBB_CL_ARG(nul)};
    OK(ebb_cl_set_args(kd, 2, b, 9, D));
    size_t dl = ebb_cl_moe_dn_l(&tu), gd[2] = {(size_t)n_out * dl, 1}, ls[2] = {dl, 1};
    OK(ebb_cl_run(cl, kd, 2, gd, ls, D));
    clReleaseKernel(kd);
}

/* moe_down_q8 over all MOE_E experts' slots, one of them -1 (the zero block of an expert-cache
 * slot): each work-item takes several (expert, group) pairs, and the pairs run out part-way
 * through a round. Returns the largest error over its bound. */
static double test_moe_down_q8_all(cl_program p, const char *name, cl_kernel kq,
                                   const struct ebb_cl_weight *dw, const float *dn)
{
    static const int ids[MOE_E] = {3, -1, 0, 5, 1, 2};
    static const float wts[MOE_E] = {0.3f, 0.9f, -0.2f, 0.25f, 0.15f, 0.1f};
    static float h[2 * MOE_E * MOE_F];
    for (int i = 0; i < 2 * MOE_E * MOE_F; i++)
        h[i] = 2.0f * sinf(0.37f * (float)i + 0.5f);
    cl_mem hb = buf(sizeof(h), h), ib = buf(sizeof(ids), (void *)ids);
    cl_mem wb = buf(sizeof(wts), (void *)wts), ob = buf(sizeof(float) * MOE_D, NULL);
    cl_mem xq = buf(MOE_E * MOE_F, NULL), xd = buf(sizeof(float) * 2 * MOE_E * MOE_F / 32, NULL);
    moe_quantize(kq, hb, MOE_E * MOE_F, 1, xq, xd);
    run_down_q8(p, dw, MOE_F, MOE_D, MOE_E, ib, wb, xq, xd, ob);
    float out[MOE_D];
    rd(ob, sizeof(out), out);
    static double xs[MOE_E * MOE_F];
    for (int i = 0; i < MOE_E * MOE_F; i++)
        xs[i] = silu_d(h[i]) * h[MOE_E * MOE_F + i];
    double worst = 0;
    for (int o = 0; o < MOE_D; o++) {
        double ref = 0, bound = 1e-6;
        for (int j = 0; j < MOE_E; j++) {
            if (ids[j] < 0)
                continue;
            const float *wr = dn + ((size_t)ids[j] * MOE_D + o) * MOE_F;
            double r, mg, q = q8_bound(wr, xs + j * MOE_F, MOE_F, &r, &mg);
            ref += wts[j] * r;
            bound += fabs(wts[j]) * (q + 1e-4 * mg);
        }
        worst = fmax(worst, fabs(out[o] - ref) / bound);
        CHECK(fabs(out[o] - ref) <= bound, "moe_down_q8 %s, %d slots, o %d: %g vs %g (bound %g)",
              name, MOE_E, o, out[o], ref, bound);
    }
    cl_mem ms[] = {hb, ib, wb, ob, xq, xd};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
    return worst;
}

/* moe_gather_q8 and moe_down_q8 (decode, token 0 of x and h) after quantize_x8, against the
 * dequantized stacks within the input rounding bound. */
static void test_moe_q8(cl_program p, const char *name, const struct ebb_cl_weight *gw,
                        const struct ebb_cl_weight *dw, const float *g, const float *dn,
                        const int *ids, const float *wts, const float *x, const float *h)
{
    cl_program ops;
    cl_kernel kq;
    OK(ebb_cl_ops_build(cl, &tu, 64, &ops, D));
    OK(ebb_cl_kernel(ops, "quantize_x8", &kq, D));
    cl_mem xb = buf(sizeof(float) * MOE_D, (void *)x), ib = buf(sizeof(int) * MOE_K, (void *)ids);
    cl_mem wb = buf(sizeof(float) * MOE_K, (void *)wts);
    cl_mem hb = buf(sizeof(float) * 2 * MOE_K * MOE_F, (void *)h);
    cl_mem yb = buf(sizeof(float) * MOE_K * MOE_F, NULL), ob = buf(sizeof(float) * MOE_D, NULL);
    cl_mem xq = buf(MOE_K * MOE_F, NULL), xd = buf(sizeof(float) * 2 * MOE_K * MOE_F / 32, NULL);
    int n_in = MOE_D, rows = MOE_F, kk = MOE_K, y_off = 0;
    moe_quantize(kq, xb, MOE_D, 0, xq, xd);
    cl_kernel k = kern(p, "moe_gather_q8");
    OK(ebb_cl_weight_set_args(gw, k, 0, D));
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(rows), EBB_CL_ARG(kk), EBB_CL_ARG(ib),
                             EBB_CL_ARG(xq),   EBB_CL_ARG(xd),   EBB_CL_ARG(yb), EBB_CL_ARG(y_off)};
    OK(ebb_cl_set_args(k, 2, a, 8, D));
    size_t gs[2] = {(size_t)MOE_K * MOE_F * tu.mv_wg, 1}, ls[2] = {tu.mv_wg, 1};
    OK(ebb_cl_run(cl, k, 2, gs, ls, D));
    static float y[MOE_K * MOE_F];
    rd(yb, sizeof(y), y);
    double xs[2 * MOE_K * MOE_F], worst = 0;
    for (int i = 0; i < MOE_D; i++)
        xs[i] = x[i];
    for (int o = 0; o < MOE_K * MOE_F; o++) {
        const float *wr = g + ((size_t)ids[o / MOE_F] * MOE_F + o % MOE_F) * MOE_D;
        double ref, mag, bound = q8_bound(wr, xs, MOE_D, &ref, &mag) + 1e-4 * mag + 1e-6;
        worst = fmax(worst, fabs(y[o] - ref) / bound);
        CHECK(fabs(y[o] - ref) <= bound, "moe_gather_q8 %s o %d: %g vs %g (bound %g)", name, o,
              y[o], ref, bound);
    }
    clReleaseKernel(k);
    /* Down: the k experts' SwiGLU outputs quantized together (glu 1 over k * F inputs). */
    moe_quantize(kq, hb, MOE_K * MOE_F, 1, xq, xd);
    run_down_q8(p, dw, MOE_F, MOE_D, MOE_K, ib, wb, xq, xd, ob);
    float out[MOE_D];
    rd(ob, sizeof(out), out);
    for (int i = 0; i < MOE_K * MOE_F; i++)
        xs[i] = silu_d(h[i]) * h[MOE_K * MOE_F + i];
    for (int o = 0; o < MOE_D; o++) {
        double ref = 0, bound = 1e-6;
        for (int j = 0; j < MOE_K; j++) {
            const float *wr = dn + ((size_t)ids[j] * MOE_D + o) * MOE_F;
            double r, mg, q = q8_bound(wr, xs + j * MOE_F, MOE_F, &r, &mg);
            ref += wts[j] * r;
            bound += fabs(wts[j]) * (q + 1e-4 * mg);
        }
        worst = fmax(worst, fabs(out[o] - ref) / bound);
        CHECK(fabs(out[o] - ref) <= bound, "moe_down_q8 %s o %d: %g vs %g (bound %g)", name, o,
              out[o], ref, bound);
    }
    cl_mem ms[] = {xb, ib, wb, hb, yb, ob, xq, xd};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
    worst = fmax(worst, test_moe_down_q8_all(p, name, kq, dw, dn));
    clReleaseKernel(kq);
    clReleaseProgram(ops);
    printf("  moe_gather_q8 / moe_down_q8 (%s) max err / bound %.2f\n", name, worst);
}

/* The fused decode launches against the sequences they replace, to the bit: moe_router_q8
 * against the f32 router's matvec (the norm folded) and quantize_x8 (the same norm);
 * moe_gate_up_q8 with given ids against moe_gather_q8 over the gate and the up stack and
 * quantize_x8 with glu 1, and with the router's scores against moe_route's ids and weights
 * (a tie among the scores) and the same blocks. gw and uw share a layout. */
/* One moe_gate_up_q8 launch (kernel ku) over the gate stack gw and the up stack uw: k experts of
 * rows rows of n_in, routing itself from scores (n_e of them) unless scores is NULL (then ids
 * given); args in the kernel's order. */
static void run_gate_up(cl_kernel ku, const struct ebb_cl_weight *gw,
                        const struct ebb_cl_weight *uw, int n_in, int rows, int k, cl_mem scores,
                        int n_e, int norm, float scale, cl_mem ids, cl_mem wts, cl_mem xq,
                        cl_mem xd, cl_mem gq, cl_mem gd)
{
    OK(ebb_cl_weight_set_args(gw, ku, 0, D));
    OK(ebb_cl_weight_set_args(uw, ku, 2, D));
    struct ebb_cl_arg a[] = {
        EBB_CL_ARG(n_in), EBB_CL_ARG(rows),  EBB_CL_ARG(k),   EBB_CL_ARG(scores), EBB_CL_ARG(n_e),
        EBB_CL_ARG(norm), EBB_CL_ARG(scale), EBB_CL_ARG(ids), EBB_CL_ARG(wts),    EBB_CL_ARG(xq),
        EBB_CL_ARG(xd),   EBB_CL_ARG(gq),    EBB_CL_ARG(gd)};
    OK(ebb_cl_set_args(ku, 4, a, 13, D));
    size_t ls = ebb_cl_moe_gu_wg(&tu), gs = (size_t)k * (size_t)(rows / 32) * ls;
    OK(ebb_cl_run(cl, ku, 1, &gs, &ls, D));
}

static void test_moe_fused(cl_program p, const char *name, const struct ebb_cl_weight *gw,
                           const struct ebb_cl_weight *uw, const float *x)
{
    enum { E = MOE_E, K = MOE_K, F = MOE_F, N = MOE_D };
    cl_program ops;
    struct ebb_cl_wprog rp;
    cl_kernel kq;
    OK(ebb_cl_ops_build(cl, &tu, 64, &ops, D));
    OK(ebb_cl_kernel(ops, "quantize_x8", &kq, D));
    /* The router: f32 rows, and the norm's weights. */
    struct ebb_cl_layout rl = {EBB_GGML_F32, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    static float rw[E * N], nwv[N];
    for (int i = 0; i < E * N; i++)
        rw[i] = frand();
    for (int i = 0; i < N; i++)
        nwv[i] = 0.5f + frand();
    struct ebb_cl_wsrc src = {rw, E};
    struct ebb_cl_weight r;
    OK(ebb_cl_weight_new(cl, &rl, N, &src, 1, NULL, &r, D));
    OK(ebb_cl_wprog_build(cl, &rl, &tu, &rp, D));
    CHECK(rp.matvec != NULL, "no matvec for the f32 router");
    cl_mem xb = buf(sizeof(float) * N, (void *)x), nb = buf(sizeof(nwv), nwv);
    cl_mem s0 = buf(sizeof(float) * E, NULL), s1 = buf(sizeof(float) * E, NULL);
    cl_mem xq0 = buf(N, NULL), xd0 = buf(sizeof(float) * 2 * N / 32, NULL);
    cl_mem xq1 = buf(N, NULL), xd1 = buf(sizeof(float) * 2 * N / 32, NULL);
    int n_in = N, n_out = E, x_ld = N, y_ld = E, y_off = 0, glu = 0, n_e = E;
    float eps = 1e-6f;
    cl_mem nul = NULL;
    cl_kernel mv = rp.matvec;
    OK(ebb_cl_weight_set_args(&r, mv, 0, D));
    struct ebb_cl_arg ma[] = {EBB_CL_ARG(n_in),  EBB_CL_ARG(n_out), EBB_CL_ARG(xb),
                              EBB_CL_ARG(x_ld),  EBB_CL_ARG(s0),    EBB_CL_ARG(y_ld),
                              EBB_CL_ARG(y_off), EBB_CL_ARG(nul),   EBB_CL_ARG(nb),
                              EBB_CL_ARG(eps),   EBB_CL_ARG(glu)};
    OK(ebb_cl_set_args(mv, 2, ma, 11, D));
    size_t g[2], l[2];
    ebb_cl_wkernel_shape(&tu, EBB_CL_WK_MATVEC, E, 1, g, l);
    OK(ebb_cl_run(cl, mv, 2, g, l, D));
    struct ebb_cl_arg qa[] = {EBB_CL_ARG(xb),  EBB_CL_ARG(n_in), EBB_CL_ARG(nb), EBB_CL_ARG(eps),
                              EBB_CL_ARG(glu), EBB_CL_ARG(xq0),  EBB_CL_ARG(xd0)};
    size_t qg = ((size_t)N + EBB_CL_Q8_WG - 1) / EBB_CL_Q8_WG * EBB_CL_Q8_WG, ql = EBB_CL_Q8_WG;
    OK(ebb_cl_set_args(kq, 0, qa, 7, D));
    OK(ebb_cl_run(cl, kq, 1, &qg, &ql, D));
    cl_kernel kr = kern(p, "moe_router_q8");
    cl_ulong roff = r.off;
    struct ebb_cl_arg ra[] = {EBB_CL_ARG(xb),  EBB_CL_ARG(n_in), EBB_CL_ARG(nb),  EBB_CL_ARG(eps),
                              EBB_CL_ARG(r.a), EBB_CL_ARG(roff), EBB_CL_ARG(n_e), EBB_CL_ARG(s1),
                              EBB_CL_ARG(xq1), EBB_CL_ARG(xd1)};
    OK(ebb_cl_set_args(kr, 0, ra, 10, D));
    size_t rows = ebb_cl_moe_rt_rows(&tu), rg = (E + rows - 1) / rows + qg / EBB_CL_Q8_WG;
    size_t rgs = rg * EBB_CL_Q8_WG;
    OK(ebb_cl_run(cl, kr, 1, &rgs, &ql, D));
    float sc0[E], sc1[E];
    static int8_t q0[N], q1[N];
    static float d0[2 * N / 32], d1[2 * N / 32];
    rd(s0, sizeof(sc0), sc0);
    rd(s1, sizeof(sc1), sc1);
    rd(xq0, N, q0);
    rd(xq1, N, q1);
    rd(xd0, sizeof(d0), d0);
    rd(xd1, sizeof(d1), d1);
    CHECK(!memcmp(sc0, sc1, sizeof(sc0)), "moe_router_q8 %s: scores differ from matvec's (%g %g)",
          name, sc0[0], sc1[0]);
    CHECK(!memcmp(q0, q1, sizeof(q0)) && !memcmp(d0, d1, sizeof(d0)),
          "moe_router_q8 %s: the input differs from quantize_x8's", name);

    /* The old sequence over xq0: two moe_gather_q8 into [gate | up], quantize_x8 (glu). */
    float sco[E];
    for (int e = 0; e < E; e++)
        sco[e] = 2.0f * frand();
    sco[1] = sco[4] = 3.0f; /* a tie for first place */
    cl_mem sb = buf(sizeof(sco), sco), ib = buf(sizeof(int) * K, NULL);
    cl_mem wb = buf(sizeof(float) * K, NULL), yb = buf(sizeof(float) * 2 * K * F, NULL);
    cl_mem gq0 = buf(K * F, NULL), gd0 = buf(sizeof(float) * 2 * K * F / 32, NULL);
    cl_mem gq1 = buf(K * F, NULL), gd1 = buf(sizeof(float) * 2 * K * F / 32, NULL);
    cl_mem ib1 = buf(sizeof(int) * K, NULL), wb1 = buf(sizeof(float) * K, NULL);
    int kk = K, norm = 1, fr = F;
    float scale = 0.0f;
    cl_kernel kro = kern(p, "moe_route");
    struct ebb_cl_arg ro[] = {EBB_CL_ARG(sb),    EBB_CL_ARG(n_e), EBB_CL_ARG(kk), EBB_CL_ARG(norm),
                              EBB_CL_ARG(scale), EBB_CL_ARG(ib),  EBB_CL_ARG(wb)};
    OK(ebb_cl_set_args(kro, 0, ro, 7, D));
    size_t rog[2] = {128, 1}, rol[2] = {128, 1};
    OK(ebb_cl_run(cl, kro, 2, rog, rol, D));
    cl_kernel kg = kern(p, "moe_gather_q8");
    for (int i = 0; i < 2; i++) {
        int yo = i * K * F;
        OK(ebb_cl_weight_set_args(i ? uw : gw, kg, 0, D));
        struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(fr),  EBB_CL_ARG(kk), EBB_CL_ARG(ib),
                                 EBB_CL_ARG(xq0),  EBB_CL_ARG(xd0), EBB_CL_ARG(yb), EBB_CL_ARG(yo)};
        OK(ebb_cl_set_args(kg, 2, a, 8, D));
        size_t gs[2] = {(size_t)K * F * tu.mv_wg, 1}, ls[2] = {tu.mv_wg, 1};
        OK(ebb_cl_run(cl, kg, 2, gs, ls, D));
    }
    moe_quantize(kq, yb, K * F, 1, gq0, gd0);
    /* Fused: first with moe_route's ids, then routing itself from the scores. */
    cl_kernel ku = kern(p, "moe_gate_up_q8");
    for (int v = 0; v < 2; v++) {
        run_gate_up(ku, gw, uw, n_in, fr, kk, v ? sb : NULL, n_e, norm, scale, v ? ib1 : ib, wb1,
                    xq0, xd0, gq1, gd1);
        static int8_t a0[K * F], a1[K * F];
        static float b0[2 * K * F / 32], b1[2 * K * F / 32];
        rd(gq0, sizeof(a0), a0);
        rd(gq1, sizeof(a1), a1);
        rd(gd0, sizeof(b0), b0);
        rd(gd1, sizeof(b1), b1);
        int diff = 0;
        for (int i = 0; i < K * F; i++)
            diff += a0[i] != a1[i];
        CHECK(diff == 0 && !memcmp(b0, b1, sizeof(b0)),
              "moe_gate_up_q8 %s (%s): %d of %d int8 values differ from the gathers' (d %g vs %g)",
              name, v ? "routed" : "given ids", diff, K * F, b0[0], b1[0]);
        if (v) {
            int i0[K], i1[K];
            float w0[K], w1[K];
            rd(ib, sizeof(i0), i0);
            rd(ib1, sizeof(i1), i1);
            rd(wb, sizeof(w0), w0);
            rd(wb1, sizeof(w1), w1);
            CHECK(!memcmp(i0, i1, sizeof(i0)) && !memcmp(w0, w1, sizeof(w0)),
                  "moe_gate_up_q8 %s: routed %d %d (%g %g) vs moe_route %d %d (%g %g)", name, i1[0],
                  i1[1], w1[0], w1[1], i0[0], i0[1], w0[0], w0[1]);
            CHECK(i1[0] == 1 && i1[1] == 4, "moe_gate_up_q8 %s: the tie %d %d", name, i1[0], i1[1]);
        }
    }
    cl_kernel ks[] = {kq, kr, kro, kg, ku};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
        clReleaseKernel(ks[i]);
    cl_mem ms[] = {xb, nb, s0, s1,  xq0, xd0, xq1, xd1, sb,
                   ib, wb, yb, gq0, gd0, gq1, gd1, ib1, wb1};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
    ebb_cl_wprog_fini(&rp);
    clReleaseProgram(ops);
    ebb_cl_weight_fini(&r);
    printf("  moe_router_q8 / moe_gate_up_q8 (%s) equal to the launches they replace\n", name);
}

/* moe_gate_up_q8 routing itself over 301 experts (items holding three experts each), k 8 and 64,
 * with ties within an item and across items: work-group 0's ids and weights against the CPU
 * router, as test_moe_route_wide checks moe_route. The stacks are 301 experts of 32 rows; the
 * products' inputs are zeros (only the routing is checked here). */
static void test_moe_fused_wide(cl_program p, const struct ebb_cl_layout *l)
{
    enum { E = 301, R = 32, N = 64, KMAX = 64 };
    uint64_t rowb = 0;
    OK(ebb_ggml_row_bytes(l->type, N, &rowb));
    uint8_t *raw = malloc(rowb * E * R);
    random_rows(l->type, E * R, N, raw, rowb);
    struct ebb_cl_wsrc src = {raw, E * R};
    struct ebb_cl_weight gw;
    OK(ebb_cl_weight_new(cl, l, N, &src, 1, NULL, &gw, D));
    free(raw);
    static float s[E];
    for (int i = 0; i < E; i++)
        s[i] = 4.0f * frand();
    s[5] = s[133] = s[261] = 6.0f; /* one item's three experts tie for first place */
    s[300] = s[23] = s[7] = 5.0f;  /* then three items' */
    static const int8_t zq[N] = {0};
    static const float zd[2 * N / 32] = {0};
    cl_mem sb = buf(sizeof(s), s), xq = buf(sizeof(zq), (void *)zq),
           xd = buf(sizeof(zd), (void *)zd);
    cl_mem ib = buf(sizeof(int) * KMAX, NULL), wb = buf(sizeof(float) * KMAX, NULL);
    cl_mem gq = buf(KMAX * R, NULL), gd = buf(sizeof(float) * 2 * KMAX * R / 32, NULL);
    cl_kernel ku = kern(p, "moe_gate_up_q8");
    int ks[] = {8, KMAX};
    for (int v = 0; v < 2; v++) {
        int kk = ks[v], norm = 1;
        float scale = v ? 2.5f : 0.0f;
        run_gate_up(ku, &gw, &gw, N, R, kk, sb, E, norm, scale, ib, wb, xq, xd, gq, gd);
        int ids[KMAX], ri[KMAX];
        float w[KMAX], rw[KMAX];
        rd(ib, sizeof(int) * kk, ids);
        rd(wb, sizeof(float) * kk, w);
        moe_route_ref(s, E, kk, norm, scale, ri, rw);
        for (int j = 0; j < kk; j++) {
            CHECK(ids[j] == ri[j], "moe_gate_up_q8 routing %d of %d, slot %d: %d vs %d", kk, E, j,
                  ids[j], ri[j]);
            CHECK(fabsf(w[j] - rw[j]) <= 1e-5f * fabsf(rw[j]) + 1e-7f,
                  "moe_gate_up_q8 routing %d of %d, slot %d: weight %g vs %g", kk, E, j, w[j],
                  rw[j]);
        }
        CHECK(ids[0] == 5 && ids[1] == 133 && ids[2] == 261 && ids[3] == 7 && ids[4] == 23 &&
                  ids[5] == 300,
              "moe_gate_up_q8 routing ties: %d %d %d %d %d %d", ids[0], ids[1], ids[2], ids[3],
              ids[4], ids[5]);
    }
    clReleaseKernel(ku);
    cl_mem ms[] = {sb, xq, xd, ib, wb, gq, gd};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
    ebb_cl_weight_fini(&gw);
    printf("  moe_gate_up_q8 routing itself, top 8 and 64 of %d with ties (%s) checked\n", E,
           ebb_ggml_type_name(l->type));
}

enum { MOEG_NT = 20, MOEG_GT = 16 /* moe.cl's MOE_GT */ };

/* The sum of |terms| of pair q's gate output r (W_e[r] . x[t], e = ids[q]): the scale of its
 * rounding error (0 for a skipped pair). */
static double group_gate_mag(const float *g, const float *x, const int *ids, int q, int r)
{
    double mag = 0;
    if (ids[q] >= 0) {
        const float *wr = g + ((size_t)ids[q] * MOE_F + r) * MOE_D;
        for (int i = 0; i < MOE_D; i++)
            mag += fabs((double)wr[i] * x[(q / MOE_K) * MOE_D + i]);
    }
    return mag;
}

/* The same for token t's weighted down output o over its experts, the SwiGLU of h's gate and
 * up rows (y_ld apart) as their input. */
static double group_down_mag(const float *dn, const float *h, int y_ld, const int *ids,
                             const float *wts, int t, int o)
{
    double mag = 0;
    for (int j = 0; j < MOE_K; j++) {
        int e = ids[t * MOE_K + j];
        if (e < 0)
            continue;
        const float *wr = dn + ((size_t)e * MOE_D + o) * MOE_F;
        const float *hg = h + t * y_ld + j * MOE_F, *hu = h + t * y_ld + (MOE_K + j) * MOE_F;
        for (int i = 0; i < MOE_F; i++)
            mag += fabs(wr[i] * silu_d(hg[i]) * hu[i] * wts[t * MOE_K + j]);
    }
    return mag;
}

/* moe_group_sum (program p) of the pairs' down outputs yp with the ids ib and weights wb onto
 * db (MOEG_NT rows of MOE_D), read back into out. */
static void group_sum(cl_program p, cl_mem ib, cl_mem wb, cl_mem yp, cl_mem db, float *out)
{
    int n = MOE_D, kk = MOE_K;
    cl_kernel k = kern(p, "moe_group_sum");
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n),  EBB_CL_ARG(kk), EBB_CL_ARG(ib), EBB_CL_ARG(wb),
                             EBB_CL_ARG(yp), EBB_CL_ARG(db), EBB_CL_ARG(n)};
    OK(ebb_cl_set_args(k, 0, a, 7, D));
    size_t g[2] = {MOE_D, MOEG_NT};
    OK(ebb_cl_run(cl, k, 2, g, NULL, D));
    clReleaseKernel(k);
    rd(db, sizeof(float) * MOEG_NT * MOE_D, out);
}

/* moe_group_mmql (km, for weight w under tuning t) over n_tiles tiles (tb, pb) of rows of n_in
 * int8 inputs (xq, xh) whose pair p reads row p / kdiv, n_rows outputs a pair into y. */
static void group_mmql(const struct ebb_cl_weight *w, const struct ebb_cl_moe_mmql *km,
                       const struct ebb_cl_tuning *t, int n_in, int n_rows, int kdiv, cl_mem tb,
                       cl_mem pb, cl_mem xq, cl_mem xh, cl_mem y, int y_ld, int y_off, int n_tiles)
{
    int kk = MOE_K;
    uint32_t pt[4];
    ebb_cl_mmql_tile(t, ebb_cl_mmql_group_kind(&w->layout), pt);
    size_t l[2] = {32 * (size_t)pt[2], 1}, r = 16 * (size_t)pt[1] * pt[2];
    size_t g[2] = {l[0] * (size_t)n_tiles, ((size_t)n_rows + r - 1) / r};
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(n_rows), EBB_CL_ARG(kk),
                             EBB_CL_ARG(kdiv), EBB_CL_ARG(tb),     EBB_CL_ARG(pb),
                             EBB_CL_ARG(xq),   EBB_CL_ARG(xh),     EBB_CL_ARG(y),
                             EBB_CL_ARG(y_ld), EBB_CL_ARG(y_off)};
    OK(ebb_cl_weight_set_args(w, km->group, 0, D));
    OK(ebb_cl_set_args(km->group, 2, a, 11, D));
    OK(ebb_cl_run(cl, km->group, 2, g, l, D));
}

/* The grouped gate outputs y (kernel kn) against moe_gather's y0, rows of y_ld with the k pairs'
 * outputs from y_off on, within rel of each output's terms' magnitude plus ab; nothing written
 * before y_off. Returns the worst error over its bound. */
static double check_group_gate(const char *kn, const char *name, const float *y, const float *y0,
                               int y_ld, int y_off, double rel, double ab, const float *g,
                               const float *x, const int *ids)
{
    double worst = 0;
    for (int q = 0; q < MOEG_NT * MOE_K; q++) {
        int t = q / MOE_K, j = q % MOE_K;
        for (int r = 0; r < MOE_F; r++) {
            size_t at = (size_t)t * y_ld + (size_t)y_off + (size_t)j * MOE_F + r;
            double bound = rel * group_gate_mag(g, x, ids, q, r) + ab;
            double err = fabs((double)y[at] - y0[at]);
            worst = fmax(worst, err / bound);
            CHECK(err <= bound, "%s gate %s t %d j %d r %d: %g vs moe_gather %g", kn, name, t, j, r,
                  y[at], y0[at]);
        }
    }
    for (int i = 0; i < MOEG_NT * y_ld; i++)
        if (i % y_ld < y_off)
            CHECK(y[i] == 0.0f, "%s %s wrote before y_off at %d", kn, name, i);
    return worst;
}

/* The grouped down outputs summed by moe_group_sum (d) against moe_down's d0, as above. */
static double check_group_down(const char *kn, const char *name, const float *d, const float *d0,
                               double rel, double ab, const float *dn, const float *h, int y_ld,
                               const int *ids, const float *wts)
{
    double worst = 0;
    for (int t = 0; t < MOEG_NT; t++)
        for (int o = 0; o < MOE_D; o++) {
            double bound = rel * group_down_mag(dn, h, y_ld, ids, wts, t, o) + ab;
            double err = fabs((double)d[t * MOE_D + o] - d0[t * MOE_D + o]);
            worst = fmax(worst, err / bound);
            CHECK(err <= bound, "%s down %s t %d o %d: %g vs moe_down %g", kn, name, t, o,
                  d[t * MOE_D + o], d0[t * MOE_D + o]);
        }
    return worst;
}

/* The grouped prefill (moe_group_gu, moe_group_down, moe_group_sum) against moe_gather and
 * moe_down on the same inputs, within the dot-product bound: 20 tokens whose first expert is
 * expert 0 (two tiles, one full), the second spread over the others, one pair skipped (-1).
 * The pairs are sorted and tiled as runtime/model/model-cl-moe-group.c does. */
static void test_moe_group(cl_program p, const char *name, const struct ebb_cl_weight *gw,
                           const struct ebb_cl_weight *dw, const float *g, const float *dn)
{
    uint32_t wg, wg_rows = ebb_cl_moe_group_rows(&tu, &wg);
    if (!wg_rows || cl->info.max_wg < wg)
        return;
    enum { NP = MOEG_NT * MOE_K, Y_LD = 2 * MOE_K * MOE_F };
    int ids[NP], perm[NP], tiles[NP * 4], n_tiles = 0, n_sorted = 0;
    float wts[NP];
    static float x[MOEG_NT * MOE_D], h[MOEG_NT * Y_LD], y0[MOEG_NT * Y_LD], y1[MOEG_NT * Y_LD];
    static float zero[MOEG_NT * Y_LD], d0[MOEG_NT * MOE_D], d1[MOEG_NT * MOE_D];
    for (int t = 0; t < MOEG_NT; t++) {
        ids[t * MOE_K] = 0;
        for (int j = 1; j < MOE_K; j++)
            ids[t * MOE_K + j] = 1 + (t + j) % (MOE_E - 1);
    }
    ids[3 * MOE_K + 1] = -1;
    for (int i = 0; i < NP; i++)
        wts[i] = frand();
    for (int i = 0; i < MOEG_NT * MOE_D; i++)
        x[i] = frand();
    for (int i = 0; i < MOEG_NT * Y_LD; i++)
        h[i] = 2.0f * frand();
    for (int e = 0; e < MOE_E; e++) {
        int start = n_sorted;
        for (int q = 0; q < NP; q++)
            if (ids[q] == e)
                perm[n_sorted++] = q;
        for (int s = start; s < n_sorted; s += MOEG_GT) {
            int *tl = tiles + n_tiles++ * 4;
            tl[0] = e, tl[1] = s, tl[2] = n_sorted - s < MOEG_GT ? n_sorted - s : MOEG_GT,
            tl[3] = 0;
        }
    }
    CHECK(tiles[2] == MOEG_GT && tiles[6] == MOEG_NT - MOEG_GT, "moe_group tiles %d %d", tiles[2],
          tiles[6]);
    cl_mem xb = buf(sizeof(x), x), hb = buf(sizeof(h), h), ib = buf(sizeof(ids), ids);
    cl_mem wb = buf(sizeof(wts), wts), pb = buf(sizeof(perm), perm);
    cl_mem tb = buf(sizeof(int) * 4 * n_tiles, tiles), yb0 = buf(sizeof(zero), zero);
    cl_mem yb1 = buf(sizeof(zero), zero), ypb = buf(sizeof(float) * NP * MOE_D, NULL);
    cl_mem db0 = buf(sizeof(d0), zero), db1 = buf(sizeof(d1), zero);
    int n_in = MOE_D, rows = MOE_F, kk = MOE_K, x_ld = MOE_D, y_ld = Y_LD, y_off = MOE_K * MOE_F;
    size_t ls[2] = {tu.mv_wg, 1}, lg[2] = {wg, 1};

    /* Gate/up: moe_gather against moe_group_gu, written at an offset into the row. */
    cl_kernel k = kern(p, "moe_gather");
    OK(ebb_cl_weight_set_args(gw, k, 0, D));
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(rows), EBB_CL_ARG(kk),
                             EBB_CL_ARG(ib),   EBB_CL_ARG(xb),   EBB_CL_ARG(x_ld),
                             EBB_CL_ARG(yb0),  EBB_CL_ARG(y_ld), EBB_CL_ARG(y_off)};
    OK(ebb_cl_set_args(k, 2, a, 9, D));
    size_t gs[2] = {(size_t)MOE_K * MOE_F * tu.mv_wg, MOEG_NT};
    OK(ebb_cl_run(cl, k, 2, gs, ls, D));
    clReleaseKernel(k);
    k = kern(p, "moe_group_gu");
    OK(ebb_cl_weight_set_args(gw, k, 0, D));
    struct ebb_cl_arg ag[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(rows), EBB_CL_ARG(kk),   EBB_CL_ARG(tb),
                              EBB_CL_ARG(pb),   EBB_CL_ARG(xb),   EBB_CL_ARG(x_ld), EBB_CL_ARG(yb1),
                              EBB_CL_ARG(y_ld), EBB_CL_ARG(y_off)};
    OK(ebb_cl_set_args(k, 2, ag, 10, D));
    size_t gg[2] = {(MOE_F + wg_rows - 1) / wg_rows * wg, (size_t)n_tiles};
    OK(ebb_cl_run(cl, k, 2, gg, lg, D));
    clReleaseKernel(k);
    rd(yb0, sizeof(y0), y0);
    rd(yb1, sizeof(y1), y1);
    double worst =
        check_group_gate("moe_group_gu", name, y1, y0, Y_LD, y_off, 1e-5, 1e-6, g, x, ids);

    /* Down, then the weighted sum: moe_down (no residual: zeros) against moe_group_down and
     * moe_group_sum over zeros. */
    int dn_in = MOE_F, dn_out = MOE_D, g_ld = Y_LD;
    k = kern(p, "moe_down");
    OK(ebb_cl_weight_set_args(dw, k, 0, D));
    struct ebb_cl_arg b[] = {EBB_CL_ARG(dn_in), EBB_CL_ARG(dn_out), EBB_CL_ARG(kk),
                             EBB_CL_ARG(ib),    EBB_CL_ARG(wb),     EBB_CL_ARG(hb),
                             EBB_CL_ARG(g_ld),  EBB_CL_ARG(db0),    EBB_CL_ARG(dn_out),
                             EBB_CL_ARG(db0)};
    OK(ebb_cl_set_args(k, 2, b, 10, D));
    size_t gd[2] = {(size_t)MOE_D * tu.mv_wg, MOEG_NT};
    OK(ebb_cl_run(cl, k, 2, gd, ls, D));
    clReleaseKernel(k);
    k = kern(p, "moe_group_down");
    OK(ebb_cl_weight_set_args(dw, k, 0, D));
    struct ebb_cl_arg bg[] = {EBB_CL_ARG(dn_in), EBB_CL_ARG(dn_out), EBB_CL_ARG(kk),
                              EBB_CL_ARG(tb),    EBB_CL_ARG(pb),     EBB_CL_ARG(hb),
                              EBB_CL_ARG(g_ld),  EBB_CL_ARG(ypb)};
    OK(ebb_cl_set_args(k, 2, bg, 8, D));
    size_t ggd[2] = {(MOE_D + wg_rows - 1) / wg_rows * wg, (size_t)n_tiles};
    OK(ebb_cl_run(cl, k, 2, ggd, lg, D));
    clReleaseKernel(k);
    rd(db0, sizeof(d0), d0);
    group_sum(p, ib, wb, ypb, db1, d1);
    worst = fmax(
        worst, check_group_down("moe_group_down", name, d1, d0, 1e-5, 1e-6, dn, h, Y_LD, ids, wts));
    printf("  moe_group_gu / moe_group_down (%s, %d tiles) against moe_gather / moe_down, max "
           "err / bound %.2f\n",
           name, n_tiles, worst);

    /* moe_group_mms (matmul_mms's tile over the same tiles, in the programs of
     * ebb_cl_moe_mms_build for tensor cores with 2 x 16 rows and 4 warps, the word accessors
     * on; a stand-in without PTX)
     * against the same moe_gather and moe_down outputs, within fp16 rounding of weights and
     * inputs: 2e-3 of the products' magnitude. */
    /* Once a layout: the kernel does not depend on the row sharing or the 8-bit decode path the
     * later passes vary, and each check builds two whole weight programs. */
    static uint64_t mms_done;
    uint64_t bit = 1ull << (gw->layout.type % 64);
    bool mms_once = !(mms_done & bit);
    mms_done |= bit;
    struct ebb_cl_tuning t = tu;
    t.mm_mma = 1;
    t.mg_mi = 2;
    t.mg_w = 4;
    t.block_dec = 0; /* the words of raw K-quants and Q8_0 (W_QW, W_QW8) */
    struct ebb_cl_wprog wg_p = {0}, wd_p = {0};
    if (mms_once) {
        OK(ebb_cl_moe_mms_build(cl, &gw->layout, &t, &wg_p, D));
        OK(ebb_cl_moe_mms_build(cl, &dw->layout, &t, &wd_p, D));
    }
    if (wg_p.moe_group_mms && wd_p.moe_group_mms) {
        double worst_m = 0;
        cl_mem yb2 = buf(sizeof(zero), zero), ypb2 = buf(sizeof(float) * NP * MOE_D, NULL);
        cl_mem db2 = buf(sizeof(d1), zero);
        int glu = 0, dn_ld = MOE_K * MOE_D, dn_off = 0;
        size_t lm[2] = {32 * t.mg_w, 1};
        k = wg_p.moe_group_mms;
        OK(ebb_cl_weight_set_args(gw, k, 0, D));
        struct ebb_cl_arg am[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(rows), EBB_CL_ARG(kk),
                                  EBB_CL_ARG(tb),   EBB_CL_ARG(pb),   EBB_CL_ARG(xb),
                                  EBB_CL_ARG(x_ld), EBB_CL_ARG(glu),  EBB_CL_ARG(yb2),
                                  EBB_CL_ARG(y_ld), EBB_CL_ARG(y_off)};
        OK(ebb_cl_set_args(k, 2, am, 11, D));
        size_t gm[2] = {(MOE_F + 16 * t.mg_mi - 1) / (16 * t.mg_mi) * lm[0], (size_t)n_tiles};
        OK(ebb_cl_run(cl, k, 2, gm, lm, D));
        static float y2[MOEG_NT * Y_LD];
        rd(yb2, sizeof(y2), y2);
        worst_m =
            check_group_gate("moe_group_mms", name, y2, y0, Y_LD, y_off, 2e-3, 1e-5, g, x, ids);
        glu = 1;
        k = wd_p.moe_group_mms;
        OK(ebb_cl_weight_set_args(dw, k, 0, D));
        struct ebb_cl_arg dm[] = {EBB_CL_ARG(dn_in), EBB_CL_ARG(dn_out), EBB_CL_ARG(kk),
                                  EBB_CL_ARG(tb),    EBB_CL_ARG(pb),     EBB_CL_ARG(hb),
                                  EBB_CL_ARG(g_ld),  EBB_CL_ARG(glu),    EBB_CL_ARG(ypb2),
                                  EBB_CL_ARG(dn_ld), EBB_CL_ARG(dn_off)};
        OK(ebb_cl_set_args(k, 2, dm, 11, D));
        size_t gdm[2] = {(MOE_D + 16 * t.mg_mi - 1) / (16 * t.mg_mi) * lm[0], (size_t)n_tiles};
        OK(ebb_cl_run(cl, k, 2, gdm, lm, D));
        static float d2[MOEG_NT * MOE_D];
        group_sum(p, ib, wb, ypb2, db2, d2);
        worst_m = fmax(worst_m, check_group_down("moe_group_mms", name, d2, d0, 2e-3, 1e-5, dn, h,
                                                 Y_LD, ids, wts));
        clReleaseMemObject(yb2);
        clReleaseMemObject(ypb2);
        clReleaseMemObject(db2);
        printf("  moe_group_mms (%s, %s) against moe_gather / moe_down, max err / bound %.2f\n",
               name, t.mv_ptx ? "tensor cores" : "stand-in", worst_m);
    }
    ebb_cl_wprog_fini(&wg_p);
    ebb_cl_wprog_fini(&wd_p);

    /* moe_group_mmql (matmul_mmql's tiles over the same tiles of 16 pairs, on int8 inputs: x's
     * rows by mmq_quantize, the down inputs by mmq_quantize_glu from h) against moe_gather and
     * moe_down: the int8 rounding of the inputs, 2e-2 of the products' magnitude (check_mmq's
     * bound against float inputs). Once a layout, as above. */
    struct ebb_cl_tuning tq = tu;
    tq.mm_mma = 1;
    tq.mmq = 1;
    tq.mmq_stage = 1;
    tq.block_dec = 0;
    struct ebb_cl_moe_mmql kg = {0}, kd = {0};
    if (mms_once) {
        OK(ebb_cl_moe_mmql_build(cl, &gw->layout, &tq, &kg, D));
        OK(ebb_cl_moe_mmql_build(cl, &dw->layout, &tq, &kd, D));
    }
    if (kg.group && kd.group) {
        CHECK(kg.t >= MOEG_GT && kd.t >= MOEG_GT, "moe_group_mmql %s: tiles of %u / %u pairs", name,
              kg.t, kd.t);
        double worst_q = 0;
        cl_mem xq = buf(MOEG_NT * MOE_D, NULL),
               xh = buf(sizeof(float) * 2 * MOEG_NT * MOE_D / 32, NULL);
        cl_mem pq = buf(NP * MOE_F, NULL), ph = buf(sizeof(float) * 2 * NP * MOE_F / 32, NULL);
        cl_mem yb3 = buf(sizeof(zero), zero), ypb3 = buf(sizeof(float) * NP * MOE_D, NULL);
        cl_mem db3 = buf(sizeof(d1), zero);
        int nd = MOE_D, dn_ld = MOE_K * MOE_D, dn_off = 0;
        size_t gq[2], lq[2];
        struct ebb_cl_arg aq[] = {EBB_CL_ARG(xb), EBB_CL_ARG(nd), EBB_CL_ARG(nd), EBB_CL_ARG(xq),
                                  EBB_CL_ARG(xh)};
        OK(ebb_cl_set_args(kg.quantize, 0, aq, 5, D));
        ebb_cl_mmq_quantize_shape(MOE_D, MOEG_NT, gq, lq);
        OK(ebb_cl_run(cl, kg.quantize, 2, gq, lq, D));
        group_mmql(gw, &kg, &tq, n_in, rows, MOE_K, tb, pb, xq, xh, yb3, y_ld, y_off, n_tiles);
        static float y3[MOEG_NT * Y_LD];
        rd(yb3, sizeof(y3), y3);
        worst_q =
            check_group_gate("moe_group_mmql", name, y3, y0, Y_LD, y_off, 2e-2, 1e-5, g, x, ids);
        struct ebb_cl_arg aglu[] = {EBB_CL_ARG(hb), EBB_CL_ARG(g_ld), EBB_CL_ARG(dn_in),
                                    EBB_CL_ARG(kk), EBB_CL_ARG(pq),   EBB_CL_ARG(ph)};
        OK(ebb_cl_set_args(kd.quantize_glu, 0, aglu, 6, D));
        ebb_cl_mmq_quantize_shape(MOE_F, NP, gq, lq);
        OK(ebb_cl_run(cl, kd.quantize_glu, 2, gq, lq, D));
        group_mmql(dw, &kd, &tq, dn_in, dn_out, 1, tb, pb, pq, ph, ypb3, dn_ld, dn_off, n_tiles);
        static float d3[MOEG_NT * MOE_D];
        group_sum(p, ib, wb, ypb3, db3, d3);
        worst_q = fmax(worst_q, check_group_down("moe_group_mmql", name, d3, d0, 2e-2, 1e-5, dn, h,
                                                 Y_LD, ids, wts));
        cl_mem qs[] = {xq, xh, pq, ph, yb3, ypb3, db3};
        for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++)
            clReleaseMemObject(qs[i]);
        printf("  moe_group_mmql (%s, %s, tiles of %u / %u pairs) against moe_gather / moe_down, "
               "max err / bound %.2f\n",
               name, tq.mv_ptx ? "tensor cores" : "stand-in", kg.t, kd.t, worst_q);
    }
    ebb_cl_moe_mmql_fini(&kg);
    ebb_cl_moe_mmql_fini(&kd);
    cl_mem ms[] = {xb, hb, ib, wb, pb, tb, yb0, yb1, ypb, db0, db1};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
}

/* The gate product of the routed experts, then down over [gate | up] rows with the weights. */
static void test_moe_layout(const struct ebb_cl_layout *l, const int *ids, const float *wts)
{
    struct ebb_cl_weight gw, dw;
    float *g = moe_stack(l, MOE_F, MOE_D, &gw), *dn = moe_stack(l, MOE_D, MOE_F, &dw);
    char name[64];
    ebb_cl_layout_name(&gw.layout, name, sizeof(name));
    cl_program p;
    OK(ebb_cl_moe_build(cl, &gw.layout, &tu, &p, D));
    float x[MOE_NT * MOE_D], h[MOE_NT * 2 * MOE_K * MOE_F], res[MOE_NT * MOE_D];
    for (int i = 0; i < MOE_NT * MOE_D; i++)
        x[i] = frand(), res[i] = frand();
    for (int i = 0; i < MOE_NT * 2 * MOE_K * MOE_F; i++)
        h[i] = 2.0f * frand();
    cl_mem xb = buf(sizeof(x), x), ib = buf(sizeof(int) * MOE_NT * MOE_K, ids);
    cl_mem wb = buf(sizeof(float) * MOE_NT * MOE_K, wts), hb = buf(sizeof(h), h);
    cl_mem yb = buf(sizeof(h), NULL), rb = buf(sizeof(res), res);
    int n_in = MOE_D, rows = MOE_F, kk = MOE_K, x_ld = MOE_D, y_ld = 2 * MOE_K * MOE_F, y_off = 0;
    size_t gs[2] = {(size_t)MOE_K * MOE_F * tu.mv_wg, MOE_NT}, ls[2] = {tu.mv_wg, 1};
    cl_kernel k = kern(p, "moe_gather");
    OK(ebb_cl_weight_set_args(&gw, k, 0, D));
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(rows), EBB_CL_ARG(kk),
                             EBB_CL_ARG(ib),   EBB_CL_ARG(xb),   EBB_CL_ARG(x_ld),
                             EBB_CL_ARG(yb),   EBB_CL_ARG(y_ld), EBB_CL_ARG(y_off)};
    OK(ebb_cl_set_args(k, 2, a, 9, D));
    OK(ebb_cl_run(cl, k, 2, gs, ls, D));
    static float y[MOE_NT * 2 * MOE_K * MOE_F];
    rd(yb, sizeof(y), y);
    for (int t = 0; t < MOE_NT; t++)
        for (int o = 0; o < MOE_K * MOE_F; o++) {
            const float *wr = g + ((size_t)ids[t * MOE_K + o / MOE_F] * MOE_F + o % MOE_F) * MOE_D;
            double ref = 0, mag = 0;
            for (int i = 0; i < MOE_D; i++) {
                ref += (double)wr[i] * x[t * MOE_D + i];
                mag += fabs((double)wr[i] * x[t * MOE_D + i]);
            }
            float got = y[t * y_ld + o];
            CHECK(fabs(got - ref) <= 1e-4 * mag + 1e-6, "moe_gather %s t %d o %d: %g vs %g", name,
                  t, o, got, ref);
        }
    clReleaseKernel(k);
    /* Raw layouts: moe_gather2 (gate and up in one launch) against moe_gather over each, to
     * the bit, one token's rows skipped by an id of -1 (zeros). */
    if (l->order == EBB_CL_ORDER_RAW) {
        struct ebb_cl_weight uw;
        float *u = moe_stack(l, MOE_F, MOE_D, &uw);
        int ids2[MOE_NT * MOE_K];
        memcpy(ids2, ids, sizeof(ids2));
        ids2[MOE_K] = -1; /* token 1's first expert */
        cl_mem ib2 = buf(sizeof(ids2), ids2), y1 = buf(sizeof(h), NULL);
        k = kern(p, "moe_gather");
        for (int i = 0; i < 2; i++) {
            int yo = i * MOE_K * MOE_F;
            OK(ebb_cl_weight_set_args(i ? &uw : &gw, k, 0, D));
            struct ebb_cl_arg a1[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(rows), EBB_CL_ARG(kk),
                                      EBB_CL_ARG(ib2),  EBB_CL_ARG(xb),   EBB_CL_ARG(x_ld),
                                      EBB_CL_ARG(yb),   EBB_CL_ARG(y_ld), EBB_CL_ARG(yo)};
            OK(ebb_cl_set_args(k, 2, a1, 9, D));
            OK(ebb_cl_run(cl, k, 2, gs, ls, D));
        }
        clReleaseKernel(k);
        k = kern(p, "moe_gather2");
        OK(ebb_cl_weight_set_args(&gw, k, 0, D));
        OK(ebb_cl_weight_set_args(&uw, k, 2, D));
        struct ebb_cl_arg a2[] = {EBB_CL_ARG(n_in), EBB_CL_ARG(rows), EBB_CL_ARG(kk),
                                  EBB_CL_ARG(ib2),  EBB_CL_ARG(xb),   EBB_CL_ARG(x_ld),
                                  EBB_CL_ARG(y1),   EBB_CL_ARG(y_ld)};
        OK(ebb_cl_set_args(k, 4, a2, 8, D));
        size_t g2[2] = {2 * gs[0], MOE_NT};
        OK(ebb_cl_run(cl, k, 2, g2, ls, D));
        static float ya[MOE_NT * 2 * MOE_K * MOE_F], yc[MOE_NT * 2 * MOE_K * MOE_F];
        rd(yb, sizeof(ya), ya);
        rd(y1, sizeof(yc), yc);
        CHECK(!memcmp(ya, yc, sizeof(ya)), "moe_gather2 %s differs from moe_gather", name);
        CHECK(yc[y_ld] == 0.0f && yc[y_ld + MOE_K * MOE_F] == 0.0f && yc[y_ld + MOE_F] != 0.0f,
              "moe_gather2 %s: id -1 gives %g %g", name, yc[y_ld], yc[y_ld + MOE_K * MOE_F]);
        clReleaseKernel(k);
        clReleaseMemObject(ib2);
        clReleaseMemObject(y1);
        ebb_cl_weight_fini(&uw);
        free(u);
    }

    /* Down, the residual added in place (y aliases res). */
    int dn_in = MOE_F, dn_out = MOE_D, g_ld = 2 * MOE_K * MOE_F;
    k = kern(p, "moe_down");
    OK(ebb_cl_weight_set_args(&dw, k, 0, D));
    struct ebb_cl_arg b[] = {
        EBB_CL_ARG(dn_in), EBB_CL_ARG(dn_out), EBB_CL_ARG(kk), EBB_CL_ARG(ib),     EBB_CL_ARG(wb),
        EBB_CL_ARG(hb),    EBB_CL_ARG(g_ld),   EBB_CL_ARG(rb), EBB_CL_ARG(dn_out), EBB_CL_ARG(rb)};
    OK(ebb_cl_set_args(k, 2, b, 10, D));
    size_t gd[2] = {(size_t)MOE_D * tu.mv_wg, MOE_NT};
    OK(ebb_cl_run(cl, k, 2, gd, ls, D));
    float out[MOE_NT * MOE_D];
    rd(rb, sizeof(out), out);
    for (int t = 0; t < MOE_NT; t++)
        for (int o = 0; o < MOE_D; o++) {
            double ref = res[t * MOE_D + o], mag = fabs(ref);
            for (int j = 0; j < MOE_K; j++) {
                const float *wr = dn + ((size_t)ids[t * MOE_K + j] * MOE_D + o) * MOE_F;
                const float *hg = h + t * g_ld + j * MOE_F,
                            *hu = h + t * g_ld + (MOE_K + j) * MOE_F;
                double s = 0;
                for (int i = 0; i < MOE_F; i++) {
                    double v = wr[i] * silu_d(hg[i]) * hu[i];
                    s += v;
                    mag += fabs(v * wts[t * MOE_K + j]);
                }
                ref += wts[t * MOE_K + j] * s;
            }
            CHECK(fabs(out[t * MOE_D + o] - ref) <= 1e-4 * mag + 1e-6,
                  "moe_down %s t %d o %d: %g vs %g", name, t, o, out[t * MOE_D + o], ref);
        }
    clReleaseKernel(k);
    test_moe_group(p, name, &gw, &dw, g, dn);
    if (ebb_cl_layout_has_kq8(&gw.layout, &tu)) {
        test_moe_q8(p, name, &gw, &dw, g, dn, ids, wts, x, h);
        struct ebb_cl_weight uw;
        float *u = moe_stack(l, MOE_F, MOE_D, &uw);
        test_moe_fused(p, name, &gw, &uw, x);
        if (l->type == EBB_GGML_Q8_0)
            test_moe_fused_wide(p, l);
        ebb_cl_weight_fini(&uw);
        free(u);
    }
    clReleaseProgram(p);
    cl_mem ms[] = {xb, ib, wb, hb, yb, rb};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
    ebb_cl_weight_fini(&gw);
    ebb_cl_weight_fini(&dw);
    free(g);
    free(dn);
    printf("  moe_gather / moe_down (%s) checked\n", name);
}

static void test_moe(void)
{
    struct ebb_cl_layout l0 = {EBB_GGML_F32, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    cl_program p;
    OK(ebb_cl_moe_build(cl, &l0, &tu, &p, D));
    int ids[MOE_NT * MOE_K];
    float w[MOE_NT * MOE_K];
    test_moe_route(p, ids, w);
    test_moe_route_wide(p);
    clReleaseProgram(p);
    printf("  moe_route (softmax, top %d of %d with a tie, renormalised / scaled; top 8 and 64 of "
           "301 with ties) checked\n",
           MOE_K, MOE_E);
    static const struct ebb_cl_layout ls[] = {
        {EBB_GGML_Q4_K, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
        {EBB_GGML_Q6_K, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
        {EBB_GGML_Q8_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
        {EBB_GGML_Q4_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT},
    };
    for (size_t i = 0; i < sizeof(ls) / sizeof(ls[0]); i++)
        if (ebb_cl_layout_fits(&cl->info, &ls[i], MOE_D, MOE_E * MOE_F))
            test_moe_layout(&ls[i], ids, w);
    /* The other row sharing: a GPU's 32 work-items per row (the reduction) on a CPU, one on a
     * GPU. */
    struct ebb_cl_tuning keep = tu;
    tu.mv_wg = tu.mv_wg > 1 ? 1 : 32;
    printf("  (%u work-items per row)\n", tu.mv_wg);
    test_moe_layout(&ls[0], ids, w);
    test_moe_layout(&ls[2], ids, w);
    /* Decode on 8-bit inputs (moe_gather_q8, moe_down_q8) for the K-quants and Q8_0, with both
     * row sharings. */
    for (int r = 0; r < 2; r++) {
        tu = keep;
        tu.mv_q8 = 1;
        tu.kq8 = 1;
        tu.mv_wg = r ? (keep.mv_wg > 1 ? 1 : 32) : keep.mv_wg;
        printf("  (8-bit inputs, %u work-items per row)\n", tu.mv_wg);
        for (size_t i = 0; i < 3; i++)
            test_moe_layout(&ls[i], ids, w);
    }
    /* ... with moe_gate_up_q8's wider work-groups (EBB_CL_MOE_GU_WG: 4 or 2 rows a team of 32),
     * moe_down_q8's rows over 64 or 128 work-items (EBB_CL_MOE_DN_L: two or four warps' sums,
     * or a tree) and moe_router_q8's rows one or eight a work-group (EBB_CL_MOE_RT_ROWS), 32
     * work-items a row elsewhere */
    static const uint32_t shapes[2][3] = {{512, 64, 1}, {1024, 128, 8}};
    for (size_t i = 0; i < 2; i++) {
        tu = keep;
        tu.mv_q8 = 1;
        tu.kq8 = 1;
        tu.mv_wg = 32;
        tu.moe_gu_wg = cl->info.max_wg >= shapes[i][0] ? shapes[i][0] : 256;
        tu.moe_dn_l = cl->info.max_wg >= shapes[i][1] ? shapes[i][1] : 0;
        tu.moe_rt_rows = shapes[i][2];
        printf("  (8-bit inputs, moe_gate_up_q8 work-groups of %u, moe_down_q8 rows of %u, "
               "moe_router_q8 %u rows a work-group)\n",
               ebb_cl_moe_gu_wg(&tu), ebb_cl_moe_dn_l(&tu), ebb_cl_moe_rt_rows(&tu));
        test_moe_layout(&ls[0], ids, w);
    }
    tu = keep;
}
