/* moe.cl's mixture-of-experts kernels against CPU references (included by test-kernels.c):
 * the router (softmax, top k with a tie, renormalised and scaled weights) exactly in its choice
 * and within 1e-5 in its weights; the gathered gate/up product and the weighted down product
 * over expert stacks of several types and layouts within test-kernels.c's dot-product bound. */

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
    int dn_in = MOE_F, dn_out = MOE_D;
    cl_mem nul = NULL;
    k = kern(p, "moe_down_q8");
    OK(ebb_cl_weight_set_args(dw, k, 0, D));
    struct ebb_cl_arg b[] = {EBB_CL_ARG(dn_in), EBB_CL_ARG(dn_out), EBB_CL_ARG(kk),
                             EBB_CL_ARG(ib),    EBB_CL_ARG(wb),     EBB_CL_ARG(xq),
                             EBB_CL_ARG(xd),    EBB_CL_ARG(ob),     EBB_CL_ARG(nul)};
    OK(ebb_cl_set_args(k, 2, b, 9, D));
    size_t gd[2] = {(size_t)MOE_D * tu.mv_wg, 1};
    OK(ebb_cl_run(cl, k, 2, gd, ls, D));
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
    clReleaseKernel(k);
    cl_mem ms[] = {xb, ib, wb, hb, yb, ob, xq, xd};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
    clReleaseKernel(kq);
    clReleaseProgram(ops);
    printf("  moe_gather_q8 / moe_down_q8 (%s) max err / bound %.2f\n", name, worst);
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
    if (ebb_cl_layout_has_kq8(&gw.layout, &tu))
        test_moe_q8(p, name, &gw, &dw, g, dn, ids, wts, x, h);
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
    tu = keep;
}
