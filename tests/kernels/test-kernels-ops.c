/* Part of test-kernels.c: the kernels of ops.cl and attention.cl. */

static cl_kernel kern(cl_program p, const char *name)
{
    cl_kernel k;
    OK(ebb_cl_kernel(p, name, &k, D));
    return k;
}

static float h2f(float f)
{
    return ebb_fp16_to_fp32(ebb_fp32_to_fp16(f));
}

static void test_rmsnorm_swiglu_add_softmax(cl_program p)
{
    enum { N = 302, T = 3 };
    float x[T * N], w[N], y[T * N];
    for (int i = 0; i < T * N; i++)
        x[i] = frand() * 3;
    for (int i = 0; i < N; i++)
        w[i] = frand();
    cl_mem xb = buf(sizeof(x), x), wb = buf(sizeof(w), w), yb = buf(sizeof(y), NULL);
    cl_kernel k = kern(p, "rmsnorm");
    int n = N;
    float eps = 1e-5f;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(xb), EBB_CL_ARG(n), EBB_CL_ARG(wb), EBB_CL_ARG(yb),
                             EBB_CL_ARG(n),  EBB_CL_ARG(n), EBB_CL_ARG(eps)};
    OK(ebb_cl_set_args(k, 0, a, 7, D));
    size_t g[2] = {tu.norm_wg, T}, l[2] = {tu.norm_wg, 1};
    OK(ebb_cl_run(cl, k, 2, g, l, D));
    rd(yb, sizeof(y), y);
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < N; i++)
            ss += (double)x[t * N + i] * x[t * N + i];
        double inv = 1.0 / sqrt(ss / N + eps);
        for (int i = 0; i < N; i++) {
            double ref = x[t * N + i] * inv * w[i];
            CHECK(fabs(y[t * N + i] - ref) <= 1e-5 * fabs(ref) + 1e-6, "rmsnorm %d %d: %g vs %g", t,
                  i, y[t * N + i], ref);
        }
    }
    clReleaseKernel(k);

    /* swiglu over rows of [gate | up]: reuse x as T rows of 2 * 151. */
    k = kern(p, "swiglu");
    int two = N, half = N / 2;
    struct ebb_cl_arg b[] = {EBB_CL_ARG(xb), EBB_CL_ARG(two), EBB_CL_ARG(yb), EBB_CL_ARG(half),
                             EBB_CL_ARG(half)};
    OK(ebb_cl_set_args(k, 0, b, 5, D));
    size_t g2[2] = {N / 2, T};
    OK(ebb_cl_run(cl, k, 2, g2, NULL, D));
    rd(yb, sizeof(float) * T * N / 2, y);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < N / 2; i++) {
            double gt = x[t * N + i], up = x[t * N + N / 2 + i];
            double ref = gt / (1 + exp(-gt)) * up;
            CHECK(fabs(y[t * N / 2 + i] - ref) <= 1e-5 * fabs(ref) + 1e-6, "swiglu %d %d", t, i);
        }
    clReleaseKernel(k);

    /* geglu, the same layout with GELU (tanh) as the gate. */
    k = kern(p, "geglu");
    OK(ebb_cl_set_args(k, 0, b, 5, D));
    OK(ebb_cl_run(cl, k, 2, g2, NULL, D));
    rd(yb, sizeof(float) * T * N / 2, y);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < N / 2; i++) {
            double gt = x[t * N + i], up = x[t * N + N / 2 + i];
            double ref = 0.5 * gt *
                         (1 + tanh(sqrt(2 / 3.14159265358979) * (gt + 0.044715 * gt * gt * gt))) *
                         up;
            CHECK(fabs(y[t * N / 2 + i] - ref) <= 1e-5 * fabs(ref) + 1e-6, "geglu %d %d: %g vs %g",
                  t, i, y[t * N / 2 + i], ref);
        }
    clReleaseKernel(k);

    /* rmsnorm_add: y += rmsnorm(x) * w (Gemma's post-block norms into the residual). */
    float y0[T * N];
    for (int i = 0; i < T * N; i++)
        y0[i] = frand() * 10;
    cl_mem rb = buf(sizeof(y0), y0);
    k = kern(p, "rmsnorm_add");
    struct ebb_cl_arg na[] = {EBB_CL_ARG(xb), EBB_CL_ARG(n), EBB_CL_ARG(wb), EBB_CL_ARG(rb),
                              EBB_CL_ARG(n),  EBB_CL_ARG(n), EBB_CL_ARG(eps)};
    OK(ebb_cl_set_args(k, 0, na, 7, D));
    OK(ebb_cl_run(cl, k, 2, g, l, D));
    rd(rb, sizeof(y), y);
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < N; i++)
            ss += (double)x[t * N + i] * x[t * N + i];
        double inv = 1.0 / sqrt(ss / N + eps);
        for (int i = 0; i < N; i++) {
            double ref = y0[t * N + i] + x[t * N + i] * inv * w[i];
            CHECK(fabs(y[t * N + i] - ref) <= 1e-5 * fabs(ref) + 1e-6,
                  "rmsnorm_add %d %d: %g vs %g", t, i, y[t * N + i], ref);
        }
    }
    clReleaseKernel(k);
    clReleaseMemObject(rb);

    k = kern(p, "add");
    struct ebb_cl_arg c[] = {EBB_CL_ARG(xb), EBB_CL_ARG(xb), EBB_CL_ARG(yb)};
    OK(ebb_cl_set_args(k, 0, c, 3, D));
    size_t g3 = N;
    OK(ebb_cl_run(cl, k, 1, &g3, NULL, D));
    rd(yb, sizeof(float) * N, y);
    for (int i = 0; i < N; i++)
        CHECK(y[i] == x[i] + x[i], "add %d", i);
    clReleaseKernel(k);

    k = kern(p, "softmax");
    struct ebb_cl_arg s[] = {EBB_CL_ARG(xb), EBB_CL_ARG(n)};
    OK(ebb_cl_set_args(k, 0, s, 2, D));
    OK(ebb_cl_run(cl, k, 2, g, l, D));
    rd(xb, sizeof(y), y);
    for (int t = 0; t < T; t++) {
        double m = -1e30, sum = 0;
        for (int i = 0; i < N; i++)
            m = fmax(m, x[t * N + i]);
        for (int i = 0; i < N; i++)
            sum += exp(x[t * N + i] - m);
        for (int i = 0; i < N; i++) {
            double ref = exp(x[t * N + i] - m) / sum;
            CHECK(fabs(y[t * N + i] - ref) <= 1e-5 * ref + 1e-8, "softmax %d %d", t, i);
        }
    }
    clReleaseKernel(k);
    clReleaseMemObject(xb);
    clReleaseMemObject(wb);
    clReleaseMemObject(yb);
    printf("  rmsnorm, swiglu, geglu, rmsnorm_add, add, softmax checked\n");
}

/* The k best of x[0..n) by repeated selection: descending, ties to the smaller id, NaN never. */
static void topk_ref(const float *x, int n, int k, int *ids)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            bool taken = false;
            for (int q = 0; q < j && !taken; q++)
                taken = ids[q] == i;
            if (!taken && !isnan(x[i]) && (best < 0 || x[i] > x[best]))
                best = i;
        }
        ids[j] = best;
    }
}

/* topk_part + topk_merge over R rows of N logits (N a multiple of nothing, 5 tiles): ties
 * inside a tile and across tiles, a run of equal values longer than k, -inf and NaN entries,
 * each row different; k = 1, 7 and TOPK_MAX (64). */
static void test_topk(cl_program p)
{
    enum { N = 4999, R = 3, K = 64, TILE = 1024, WG = 256 };
    enum { PARTS = (N + TILE - 1) / TILE };
    static float x[R * N];
    for (int i = 0; i < R * N; i++)
        x[i] = frand();
    float *x0 = x, *x1 = x + N, *x2 = x + 2 * N;
    x0[4000] = 5.0f;
    x0[17] = 5.0f; /* tie across tiles: the smaller id comes first */
    x0[18] = 5.0f; /* and inside one */
    x0[2500] = 4.0f;
    x0[4998] = 4.5f; /* the last logit, in the short last tile */
    x0[3] = NAN;
    for (int i = 100; i < 200; i++)
        x1[i * 37 % N] = 2.0f; /* 100 ties above everything else: ids in order */
    x1[1] = -INFINITY;
    for (int i = 0; i < N; i++)
        x2[i] = i % 3 ? -INFINITY : x2[i] - 3.0f; /* few finite logits, many -inf */
    cl_mem xb = buf(sizeof(x), x), pv = buf(sizeof(float) * R * PARTS * K, NULL);
    cl_mem pi = buf(sizeof(int) * R * PARTS * K, NULL), ov = buf(sizeof(float) * R * K, NULL);
    cl_mem oi = buf(sizeof(int) * R * K, NULL);
    cl_kernel k1 = kern(p, "topk_part"), k2 = kern(p, "topk_merge");
    int ks[] = {1, 7, K};
    for (int q = 0; q < 3; q++) {
        int n = N, parts = PARTS, k = ks[q];
        struct ebb_cl_arg a[] = {EBB_CL_ARG(xb), EBB_CL_ARG(n), EBB_CL_ARG(k), EBB_CL_ARG(pv),
                                 EBB_CL_ARG(pi)};
        struct ebb_cl_arg b[] = {EBB_CL_ARG(pv), EBB_CL_ARG(pi), EBB_CL_ARG(parts),
                                 EBB_CL_ARG(k),  EBB_CL_ARG(ov), EBB_CL_ARG(oi)};
        OK(ebb_cl_set_args(k1, 0, a, 5, D));
        OK(ebb_cl_set_args(k2, 0, b, 6, D));
        size_t g1[2] = {PARTS * WG, R}, g2[2] = {WG, R}, l[2] = {WG, 1};
        OK(ebb_cl_run(cl, k1, 2, g1, l, D));
        OK(ebb_cl_run(cl, k2, 2, g2, l, D));
        float v[R * K];
        int id[R * K], ref[K];
        rd(ov, sizeof(float) * R * k, v);
        rd(oi, sizeof(int) * R * k, id);
        for (int r = 0; r < R; r++) {
            topk_ref(x + r * N, N, k, ref);
            for (int j = 0; j < k; j++)
                CHECK(id[r * k + j] == ref[j] && v[r * k + j] == x[r * N + ref[j]],
                      "topk k=%d row %d rank %d: id %d (%g) vs %d (%g)", k, r, j, id[r * k + j],
                      v[r * k + j], ref[j], x[r * N + ref[j]]);
        }
        if (k == K) {
            CHECK(id[0] == 17 && id[1] == 18 && id[2] == 4000 && id[3] == 4998,
                  "topk ties: %d %d %d %d", id[0], id[1], id[2], id[3]);
            CHECK(v[K + K - 1] == 2.0f, "topk row 1: a run of ties longer than k");
        }
    }
    clReleaseKernel(k1);
    clReleaseKernel(k2);
    clReleaseMemObject(xb);
    clReleaseMemObject(pv);
    clReleaseMemObject(pi);
    clReleaseMemObject(ov);
    clReleaseMemObject(oi);
    printf("  top-k (k = 1, 7, 64; 3 rows of %d; ties, -inf, NaN) checked\n", N);
}

enum { HD = 64, NH = 4, NKV = 2, NCTX = 600, QKV_LD = (NH + 2 * NKV) * HD };
/* Query heads per decode attention work-group of a tuning (0 counts as 1). */
#define ATT_G_OF(t) ((t).att_g > 1 ? (t).att_g : 1u)

/* rope_kv for both pair orders; with ff, each pair's frequency divided by its factor (Llama
 * 3.1's scaling: 1 to 8 here). */
static void test_rope(cl_program p, int neox, bool with_ff)
{
    enum { T = 3, NROT = 48 };
    int pos0 = 1000;
    static float qkv[T * QKV_LD], out[T * QKV_LD];
    for (int i = 0; i < T * QKV_LD; i++)
        qkv[i] = frand();
    size_t cache_n = (size_t)2 * NKV * 1100 * HD;
    cl_mem qb = buf(sizeof(qkv), qkv), kc = buf(cache_n * 2, NULL), vc = buf(cache_n * 2, NULL);
    cl_kernel k = kern(p, "rope_kv");
    cl_ulong base = (cl_ulong)NKV * 1100 * HD; /* second sequence slot */
    int n_ctx = 1100, nh = NH, nkv = NKV, hd = HD, nrot = NROT, ld = QKV_LD;
    float fbase = 10000.0f, fscale = 0.5f, ffh[NROT / 2];
    for (int i = 0; i < NROT / 2; i++)
        ffh[i] = 1.0f + 7.0f * (float)i / (NROT / 2 - 1);
    cl_mem ff = with_ff ? buf(sizeof(ffh), ffh) : NULL;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(qb),     EBB_CL_ARG(ld),   EBB_CL_ARG(kc),
                             EBB_CL_ARG(vc),     EBB_CL_ARG(base), EBB_CL_ARG(n_ctx),
                             EBB_CL_ARG(pos0),   EBB_CL_ARG(nh),   EBB_CL_ARG(nkv),
                             EBB_CL_ARG(hd),     EBB_CL_ARG(nrot), EBB_CL_ARG(fbase),
                             EBB_CL_ARG(fscale), EBB_CL_ARG(neox), EBB_CL_ARG(ff)};
    OK(ebb_cl_set_args(k, 0, a, 15, D));
    /* 3 work-items a pair of a row: each rotates every third head (as the engine's 8 heads an
     * item, with heads left over). */
    size_t g[3] = {HD / 2, 3, T};
    OK(ebb_cl_run(cl, k, 3, g, NULL, D));
    rd(qb, sizeof(out), out);
    uint16_t *kh = malloc(cache_n * 2), *vh = malloc(cache_n * 2);
    rd(kc, cache_n * 2, kh);
    rd(vc, cache_n * 2, vh);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH + NKV; h++) {
            const float *src = qkv + t * QKV_LD + h * HD;
            float ref[HD];
            memcpy(ref, src, sizeof(ref));
            for (int i = 0; i < NROT / 2; i++) {
                int i0 = neox ? i : 2 * i, i1 = neox ? i + NROT / 2 : 2 * i + 1;
                double th =
                    (pos0 + t) * 0.5 * pow(10000.0, -2.0 * i / NROT) / (with_ff ? ffh[i] : 1.0);
                ref[i0] = (float)(src[i0] * cos(th) - src[i1] * sin(th));
                ref[i1] = (float)(src[i0] * sin(th) + src[i1] * cos(th));
            }
            for (int d = 0; d < HD; d++) {
                float got;
                double tol = 2e-4;
                if (h < NH) {
                    got = out[t * QKV_LD + h * HD + d];
                } else {
                    size_t off = base + ((size_t)(h - NH) * 1100 + pos0 + t) * HD + d;
                    got = ebb_fp16_to_fp32(kh[off]);
                    tol += fabs(ref[d]) / 2048;
                    float v = ebb_fp16_to_fp32(vh[off]);
                    float vref = qkv[t * QKV_LD + (h + NKV) * HD + d];
                    CHECK(v == h2f(vref), "rope v copy t %d h %d d %d: %g vs %g", t, h, d, v, vref);
                }
                CHECK(fabs(got - ref[d]) <= tol, "rope neox=%d t %d h %d d %d: %g vs %g", neox, t,
                      h, d, got, ref[d]);
            }
        }
    free(kh);
    free(vh);
    clReleaseKernel(k);
    clReleaseMemObject(qb);
    clReleaseMemObject(kc);
    clReleaseMemObject(vc);
    if (ff)
        clReleaseMemObject(ff);
    printf("  rope_kv (%s%s) with KV-cache write checked\n", neox ? "neox" : "normal",
           with_ff ? ", frequency divisors" : "");
}

/* CPU attention of query q (head h) at position last over positions first..last of the half
 * cache, which holds n_ctx positions per head (position p at p % n_ctx: a sliding window's
 * ring when n_ctx is less than the positions). */
static void attn_ref_win(const float *q, const uint16_t *kh, const uint16_t *vh, size_t base, int h,
                         int first, int last, int n_ctx, float scale, double *o)
{
    int hk = h / (NH / NKV);
    double *s = malloc(sizeof(double) * (last + 1)), m = -1e30, sum = 0;
    for (int p = first; p <= last; p++) {
        double acc = 0;
        size_t at = base + ((size_t)hk * n_ctx + p % n_ctx) * HD;
        for (int d = 0; d < HD; d++)
            acc += (double)q[d] * ebb_fp16_to_fp32(kh[at + d]);
        s[p] = acc * scale;
        m = fmax(m, s[p]);
    }
    for (int p = first; p <= last; p++)
        sum += (s[p] = exp(s[p] - m));
    for (int d = 0; d < HD; d++) {
        double acc = 0;
        for (int p = first; p <= last; p++)
            acc += s[p] * ebb_fp16_to_fp32(vh[base + ((size_t)hk * n_ctx + p % n_ctx) * HD + d]);
        o[d] = acc / sum;
    }
    free(s);
}

/* The first position a query at position last sees through a window of win (0: none). */
static int win_first(int last, int win)
{
    return win > 0 && last + 1 > win ? last + 1 - win : 0;
}

static void test_attention(cl_program p)
{
    size_t cache_n = (size_t)2 * NKV * NCTX * HD, base = (size_t)NKV * NCTX * HD;
    uint16_t *kh = malloc(cache_n * 2), *vh = malloc(cache_n * 2);
    for (size_t i = 0; i < cache_n; i++) {
        kh[i] = ebb_fp32_to_fp16(frand());
        vh[i] = ebb_fp32_to_fp16(frand());
    }
    enum { T = 13 };
    static float qkv[T * QKV_LD], out[T * NH * HD];
    for (int i = 0; i < T * QKV_LD; i++)
        qkv[i] = frand() * 2;
    cl_mem kc = buf(cache_n * 2, kh), vc = buf(cache_n * 2, vh), qb = buf(sizeof(qkv), qkv);
    cl_mem ob = buf(sizeof(out), NULL);
    int max_chunks = (NCTX + tu.att_chunk - 1) / tu.att_chunk;
    cl_mem po = buf(sizeof(float) * NH * max_chunks * HD, NULL);
    cl_mem pml = buf(sizeof(float) * 2 * NH * max_chunks, NULL);
    cl_kernel k1 = kern(p, "attn_decode_part"), k2 = kern(p, "attn_decode_reduce");
    cl_kernel k3 = kern(p, "attn_prefill");
    float scale = 1.0f / sqrtf(HD);
    cl_ulong kvb = base;
    int nh = NH, nkv = NKV;
    double ref[HD], worst = 0;

    /* Decode at several lengths: one chunk, a full chunk plus one, and almost the context;
     * then through sliding windows: of 100 positions in a ring of 150 (the window wraps around
     * the ring at 330), and of more than a chunk (tu.att_chunk + 44) in a ring of 10 more,
     * past the context the full cache would have (800 positions). */
    struct {
        int n_kv, win, ring;
    } cases[] = {{1, 0, NCTX},
                 {37, 0, NCTX},
                 {tu.att_chunk + 1, 0, NCTX},
                 {NCTX - 3, 0, NCTX},
                 {37, 100, 150},
                 {290, 100, 150},
                 {330, 100, 150},
                 {800, tu.att_chunk + 44, tu.att_chunk + 54}};
    for (size_t li = 0; li < sizeof(cases) / sizeof(cases[0]); li++) {
        int n_kv = cases[li].n_kv, win = cases[li].win, ring = cases[li].ring;
        int first = win_first(n_kv - 1, win);
        int nc = (n_kv - first + tu.att_chunk - 1) / tu.att_chunk;
        struct ebb_cl_arg a[] = {
            EBB_CL_ARG(qb),   EBB_CL_ARG(kc), EBB_CL_ARG(vc),  EBB_CL_ARG(kvb),   EBB_CL_ARG(ring),
            EBB_CL_ARG(n_kv), EBB_CL_ARG(nh), EBB_CL_ARG(nkv), EBB_CL_ARG(scale), EBB_CL_ARG(po),
            EBB_CL_ARG(pml),  EBB_CL_ARG(ob), EBB_CL_ARG(win)};
        struct ebb_cl_arg b[] = {EBB_CL_ARG(po), EBB_CL_ARG(pml), EBB_CL_ARG(nc), EBB_CL_ARG(ob)};
        OK(ebb_cl_set_args(k1, 0, a, 13, D));
        OK(ebb_cl_set_args(k2, 0, b, 4, D));
        size_t g1[2] = {(size_t)nc * ebb_cl_att_wg(&tu), NH / ATT_G_OF(tu)},
               l1[2] = {ebb_cl_att_wg(&tu), 1};
        /* The second pass's rows of chunk lanes (att_combine): 1, 3 (fewer chunks than lanes at
         * the shorter lengths) or 32, in turn; a work-group per slice of a head. */
        size_t rr = li % 3 == 0 ? 1 : li % 3 == 1 ? 3 : 32, ds = ebb_cl_att_red_ds(HD);
        while (rr > 1 && ds * rr > cl->info.max_wg)
            rr--;
        size_t g2[2] = {ds * rr, NH * HD / ds}, l2[2] = {ds * rr, 1};
        OK(ebb_cl_run(cl, k1, 2, g1, l1, D));
        if (nc > 1) /* one chunk writes the result itself */
            OK(ebb_cl_run(cl, k2, 2, g2, l2, D));
        rd(ob, sizeof(float) * NH * HD, out);
        for (int h = 0; h < NH; h++) {
            attn_ref_win(qkv + h * HD, kh, vh, base, h, first, n_kv - 1, ring, scale, ref);
            for (int d = 0; d < HD; d++) {
                worst = fmax(worst, fabs(out[h * HD + d] - ref[d]));
                CHECK(fabs(out[h * HD + d] - ref[d]) <= 1e-4,
                      "decode n_kv %d win %d ring %d h %d d %d: %g vs %g", n_kv, win, ring, h, d,
                      out[h * HD + d], ref[d]);
            }
        }
    }
    printf("  attention decode (split over KV, chunk %u, %u heads a work-group%s; windows, rings; "
           "1, 3 or 32 rows reducing) max abs err %.2e\n",
           tu.att_chunk, ATT_G_OF(tu),
           ebb_cl_att_stage_fits(&tu, HD, cl->info.local_mem) ? ", staged (cp.async)" : "", worst);

    /* Prefill from position 0 and 290; through a window of 5 (most queries see only part of
     * the positions before them) and of 100 in a ring of 150 >= 100 + T - 1 positions, the
     * ring wrapping inside the tile at 290 and at 1000. */
    worst = 0;
    struct {
        int pos0, win, ring;
    } pcases[] = {{0, 0, NCTX}, {290, 0, NCTX}, {0, 5, NCTX}, {290, 100, 150}, {1000, 100, 150}};
    for (int pi = 0; pi < 5; pi++) {
        int pos0 = pcases[pi].pos0, win = pcases[pi].win, ring = pcases[pi].ring;
        int ntok = T, ld = QKV_LD, old = NH * HD, r0 = 0;
        struct ebb_cl_arg c[] = {
            EBB_CL_ARG(qb),    EBB_CL_ARG(ld),   EBB_CL_ARG(kc),   EBB_CL_ARG(vc), EBB_CL_ARG(kvb),
            EBB_CL_ARG(ring),  EBB_CL_ARG(pos0), EBB_CL_ARG(ntok), EBB_CL_ARG(nh), EBB_CL_ARG(nkv),
            EBB_CL_ARG(scale), EBB_CL_ARG(ob),   EBB_CL_ARG(old),  EBB_CL_ARG(r0), EBB_CL_ARG(win)};
        OK(ebb_cl_set_args(k3, 0, c, 15, D));
        size_t g3[2] = {T, NH}, l3[2] = {tu.att_tq, 1};
        OK(ebb_cl_run(cl, k3, 2, g3, l3, D));
        rd(ob, sizeof(out), out);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                attn_ref_win(qkv + t * QKV_LD + h * HD, kh, vh, base, h, win_first(pos0 + t, win),
                             pos0 + t, ring, scale, ref);
                for (int d = 0; d < HD; d++) {
                    float got = out[t * NH * HD + h * HD + d];
                    worst = fmax(worst, fabs(got - ref[d]));
                    CHECK(fabs(got - ref[d]) <= 1e-4,
                          "prefill pos0 %d win %d t %d h %d d %d: %g vs %g", pos0, win, t, h, d,
                          got, ref[d]);
                }
            }
    }
    printf("  attention prefill (tiled, causal; windows, rings) max abs err %.2e\n", worst);
    clReleaseKernel(k1);
    clReleaseKernel(k2);
    clReleaseKernel(k3);
    cl_mem ms[] = {kc, vc, qb, ob, po, pml};
    for (int i = 0; i < 6; i++)
        clReleaseMemObject(ms[i]);
    free(kh);
    free(vh);
}

/* The batched pass's kernels (several slots at their own positions): rope_kv_rows against
 * rope_kv run row by row (bit for bit), attn_decode_rows + attn_decode_reduce_rows against the
 * CPU attention of each listed row in its slot, rows left out of the list untouched. */
static void test_attention_rows(cl_program p)
{
    enum { T = 5, ND = 4 };
    size_t stride = (size_t)NKV * NCTX * HD, cache_n = 2 * stride;
    uint16_t *kh = malloc(cache_n * 2), *vh = malloc(cache_n * 2), *k2 = malloc(cache_n * 2);
    for (size_t i = 0; i < cache_n; i++) {
        kh[i] = ebb_fp32_to_fp16(frand());
        vh[i] = ebb_fp32_to_fp16(frand());
    }
    static float qkv[T * QKV_LD], q1[T * QKV_LD], q2[T * QKV_LD], out[T * NH * HD];
    for (int i = 0; i < T * QKV_LD; i++)
        qkv[i] = frand() * 2;
    int rt[2 * T] = {1, 0, 0, 37, 1, (int)tu.att_chunk + 1, 0, NCTX - 3, 1, 5};
    int dr[ND] = {0, 2, 3, 4}; /* row 1 is not a decode row */
    cl_mem kc = buf(cache_n * 2, kh), vc = buf(cache_n * 2, vh), qb = buf(sizeof(qkv), qkv);
    cl_mem kc2 = buf(cache_n * 2, kh), vc2 = buf(cache_n * 2, vh), qb2 = buf(sizeof(qkv), qkv);
    cl_mem rtb = buf(sizeof(rt), rt), drb = buf(sizeof(dr), dr);
    for (size_t i = 0; i < T * NH * HD; i++)
        out[i] = -7.0f;
    cl_mem ob = buf(sizeof(out), out);
    int max_nc = (NCTX + tu.att_chunk - 1) / tu.att_chunk;
    cl_mem po = buf(sizeof(float) * ND * NH * max_nc * HD, NULL);
    cl_mem pml = buf(sizeof(float) * 2 * ND * NH * max_nc, NULL);
    cl_kernel kr = kern(p, "rope_kv_rows"), k1 = kern(p, "rope_kv");
    int n_ctx = NCTX, nh = NH, nkv = NKV, hd = HD, nrot = HD, ld = QKV_LD, neox = 0, old = NH * HD;
    float base = 10000.0f, fs = 1.0f, scale = 1.0f / sqrtf(HD);
    cl_ulong sl = stride;
    cl_mem no_ff = NULL; /* no rope frequency divisors */
    struct ebb_cl_arg a[] = {EBB_CL_ARG(qb),  EBB_CL_ARG(ld),   EBB_CL_ARG(kc),    EBB_CL_ARG(vc),
                             EBB_CL_ARG(rtb), EBB_CL_ARG(sl),   EBB_CL_ARG(n_ctx), EBB_CL_ARG(nh),
                             EBB_CL_ARG(nkv), EBB_CL_ARG(hd),   EBB_CL_ARG(nrot),  EBB_CL_ARG(base),
                             EBB_CL_ARG(fs),  EBB_CL_ARG(neox), EBB_CL_ARG(no_ff)};
    OK(ebb_cl_set_args(kr, 0, a, 15, D));
    size_t g[3] = {HD / 2, 2, T}; /* 2 work-items a pair of a row, each several heads */
    OK(ebb_cl_run(cl, kr, 3, g, NULL, D));
    for (int t = 0; t < T; t++) { /* rope_kv on one row at a time, from a sub-range copy */
        cl_mem one = buf(sizeof(float) * QKV_LD, qkv + t * QKV_LD);
        cl_ulong kvb = (cl_ulong)rt[2 * t] * stride;
        int pos = rt[2 * t + 1];
        struct ebb_cl_arg b[] = {EBB_CL_ARG(one), EBB_CL_ARG(ld),   EBB_CL_ARG(kc2),
                                 EBB_CL_ARG(vc2), EBB_CL_ARG(kvb),  EBB_CL_ARG(n_ctx),
                                 EBB_CL_ARG(pos), EBB_CL_ARG(nh),   EBB_CL_ARG(nkv),
                                 EBB_CL_ARG(hd),  EBB_CL_ARG(nrot), EBB_CL_ARG(base),
                                 EBB_CL_ARG(fs),  EBB_CL_ARG(neox), EBB_CL_ARG(no_ff)};
        size_t g1[3] = {HD / 2, NH + NKV, 1};
        OK(ebb_cl_set_args(k1, 0, b, 15, D));
        OK(ebb_cl_run(cl, k1, 3, g1, NULL, D));
        rd(one, sizeof(float) * QKV_LD, q2 + t * QKV_LD);
        clReleaseMemObject(one);
    }
    rd(qb, sizeof(q1), q1);
    CHECK(!memcmp(q1, q2, sizeof(q1)), "rope_kv_rows: rotated q differs from rope_kv's");
    rd(kc, cache_n * 2, kh);
    rd(kc2, cache_n * 2, k2);
    CHECK(!memcmp(kh, k2, cache_n * 2), "rope_kv_rows: stored keys differ from rope_kv's");
    rd(vc, cache_n * 2, vh);

    /* Without a window, then through one of att_chunk + 9 positions (rows past it attend to
     * fewer chunks than their depth has). */
    cl_kernel ka = kern(p, "attn_decode_rows"), kb = kern(p, "attn_decode_reduce_rows");
    double ref[HD], worst = 0;
    for (int wi = 0; wi < 2; wi++) {
        int win = wi ? (int)tu.att_chunk + 9 : 0;
        struct ebb_cl_arg c[] = {EBB_CL_ARG(qb),  EBB_CL_ARG(ld),     EBB_CL_ARG(kc),
                                 EBB_CL_ARG(vc),  EBB_CL_ARG(rtb),    EBB_CL_ARG(drb),
                                 EBB_CL_ARG(sl),  EBB_CL_ARG(n_ctx),  EBB_CL_ARG(nh),
                                 EBB_CL_ARG(nkv), EBB_CL_ARG(scale),  EBB_CL_ARG(po),
                                 EBB_CL_ARG(pml), EBB_CL_ARG(max_nc), EBB_CL_ARG(ob),
                                 EBB_CL_ARG(old), EBB_CL_ARG(win)};
        struct ebb_cl_arg e[] = {EBB_CL_ARG(po),  EBB_CL_ARG(pml),    EBB_CL_ARG(rtb),
                                 EBB_CL_ARG(drb), EBB_CL_ARG(max_nc), EBB_CL_ARG(ob),
                                 EBB_CL_ARG(old), EBB_CL_ARG(win)};
        OK(ebb_cl_set_args(ka, 0, c, 17, D));
        OK(ebb_cl_set_args(kb, 0, e, 8, D));
        size_t ga[3] = {(size_t)max_nc * ebb_cl_att_wg(&tu), NH / ATT_G_OF(tu), ND},
               la[3] = {ebb_cl_att_wg(&tu), 1, 1};
        size_t rr = wi ? 4 : 1, ds = ebb_cl_att_red_ds(HD); /* rows of chunk lanes, a slice */
        size_t gb[3] = {ds * rr, NH * HD / ds, ND}, lb[3] = {ds * rr, 1, 1};
        OK(ebb_cl_run(cl, ka, 3, ga, la, D));
        OK(ebb_cl_run(cl, kb, 3, gb, lb, D));
        rd(ob, sizeof(out), out);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                bool listed = t != 1;
                if (listed)
                    attn_ref_win(q1 + t * QKV_LD + h * HD, kh, vh, (size_t)rt[2 * t] * stride, h,
                                 win_first(rt[2 * t + 1], win), rt[2 * t + 1], NCTX, scale, ref);
                for (int d = 0; d < HD; d++) {
                    float got = out[(t * NH + h) * HD + d];
                    double want = listed ? ref[d] : -7.0;
                    worst = fmax(worst, fabs(got - want));
                    CHECK(fabs(got - want) <= 1e-4,
                          "decode rows: win %d row %d h %d d %d: %g vs %g", win, t, h, d, got,
                          want);
                }
            }
    }
    printf("  attention decode rows (slots at own depths; a window) max abs err %.2e\n", worst);
    cl_kernel ks[] = {kr, k1, ka, kb};
    for (int i = 0; i < 4; i++)
        clReleaseKernel(ks[i]);
    cl_mem ms[] = {kc, vc, qb, kc2, vc2, qb2, rtb, drb, ob, po, pml};
    for (int i = 0; i < 11; i++)
        clReleaseMemObject(ms[i]);
    free(kh);
    free(vh);
    free(k2);
}

/* CPU attention of query q over positions first..last of KV head hk's half cache (n_ctx
 * positions a head, position p at p % n_ctx), any head dimension. */
static void attn_ref_hd(const float *q, const uint16_t *kh, const uint16_t *vh, int hk, int first,
                        int last, int n_ctx, int hd, float scale, double *o)
{
    double *s = malloc(sizeof(double) * (last + 1)), m = -1e30, sum = 0;
    for (int p = first; p <= last; p++) {
        double acc = 0;
        size_t at = ((size_t)hk * n_ctx + p % n_ctx) * hd;
        for (int d = 0; d < hd; d++)
            acc += (double)q[d] * ebb_fp16_to_fp32(kh[at + d]);
        s[p] = acc * scale;
        m = fmax(m, s[p]);
    }
    for (int p = first; p <= last; p++)
        sum += (s[p] = exp(s[p] - m));
    for (int d = 0; d < hd; d++) {
        double acc = 0;
        for (int p = first; p <= last; p++)
            acc += s[p] * ebb_fp16_to_fp32(vh[((size_t)hk * n_ctx + p % n_ctx) * hd + d]);
        o[d] = acc / sum;
    }
    free(s);
}

/* attn_prefill_mma (tensor cores, PTX devices only) against the CPU for heads of hd (the
 * program p built for them; 256 runs two work-groups a head, each writing half the output):
 * 100 queries (two work-groups, the second partial) from positions 0 and 290 (several key
 * tiles, the last partial); through windows of 5 and 70 (most queries see only part of the
 * positions before them, a window's start inside a key tile) and of 100 in a ring of 240 >=
 * 100 + 100 - 1 positions that wraps inside the launch at 290 and at 1000. Each case whole and
 * split over 3 and 8 runs of keys merged by attn_prefill_merge (runs that some rows see no key
 * of, runs past the last key). Inputs and probabilities are rounded to f16: absolute bound
 * 4e-3. */
/* attn_prefill_mma of program p for heads of hd against the CPU; with q8, p is built with
 * KV_Q8 and the cache holds Q8_0 blocks of the same random values, the CPU reading the values the
 * kernel stages: each block's q * d rounded to a half. */
static void test_attention_mma_hd(cl_program p, int hd, bool q8)
{
    cl_int e = CL_SUCCESS;
    cl_kernel k = clCreateKernel(p, "attn_prefill_mma", &e);
    cl_kernel km = k ? clCreateKernel(p, "attn_prefill_merge", &e) : NULL;
    uint32_t split = ebb_cl_att_mma_split((uint32_t)hd);
    if (!k || !split) {
        printf("  attention prefill on tensor cores, head_dim %d: not built on this device\n", hd);
        if (k)
            clReleaseKernel(k);
        if (km)
            clReleaseKernel(km);
        return;
    }
    enum { T = 100, CTX = 600 };
    int nh = 4, nkv = hd > 128 ? 1 : 2, ld = (nh + 2 * nkv) * hd, old = nh * hd, r0 = 0;
    size_t cache_n = (size_t)nkv * CTX * hd;
    uint16_t *kh = malloc(cache_n * 2), *vh = malloc(cache_n * 2);
    size_t cb = q8 ? cache_n / 32 * 34 : cache_n * 2;
    uint8_t *k8 = malloc(cb), *v8 = malloc(cb);
    float *kf = malloc(sizeof(float) * cache_n), *vf = malloc(sizeof(float) * cache_n);
    for (size_t i = 0; i < cache_n; i++) {
        kf[i] = frand();
        vf[i] = frand();
    }
    if (q8) {
        OK(ebb_quant_quantize_row(EBB_GGML_Q8_0, kf, k8, cache_n));
        OK(ebb_quant_quantize_row(EBB_GGML_Q8_0, vf, v8, cache_n));
        OK(ebb_quant_dequantize_row(EBB_GGML_Q8_0, k8, kf, cache_n));
        OK(ebb_quant_dequantize_row(EBB_GGML_Q8_0, v8, vf, cache_n));
    }
    for (size_t i = 0; i < cache_n; i++) {
        kh[i] = ebb_fp32_to_fp16(kf[i]);
        vh[i] = ebb_fp32_to_fp16(vf[i]);
    }
    float *qkv = malloc(sizeof(float) * T * ld), *out = malloc(sizeof(float) * T * old);
    double *ref = malloc(sizeof(double) * hd), worst = 0;
    for (int i = 0; i < T * ld; i++)
        qkv[i] = frand() * 2;
    cl_mem kc = q8 ? buf(cb, k8) : buf(cache_n * 2, kh),
           vc = q8 ? buf(cb, v8) : buf(cache_n * 2, vh);
    cl_mem qb = buf(sizeof(float) * T * ld, qkv), ob = buf(sizeof(float) * T * old, NULL);
    enum { NZ_MAX = 8 };
    cl_mem apo = buf(sizeof(float) * NZ_MAX * T * old, NULL);
    cl_mem apml = buf(sizeof(float) * 2 * NZ_MAX * T * nh, NULL);
    float scale = 1.0f / sqrtf((float)hd);
    cl_ulong kvb = 0;
    struct {
        int pos0, win, ring;
    } cases[] = {{0, 0, CTX},    {290, 0, CTX},   {0, 5, CTX},
                 {290, 70, CTX}, {290, 100, 240}, {1000, 100, 240}};
    for (size_t run = 0; run < 3 * sizeof(cases) / sizeof(cases[0]); run++) {
        size_t ci = run / 3;
        int nz = run % 3 == 0 ? 1 : run % 3 == 1 ? 3 : NZ_MAX;
        int pos0 = cases[ci].pos0, win = cases[ci].win, ring = cases[ci].ring, ntok = T;
        struct ebb_cl_arg c[] = {
            EBB_CL_ARG(qb),    EBB_CL_ARG(ld),   EBB_CL_ARG(kc),   EBB_CL_ARG(vc), EBB_CL_ARG(kvb),
            EBB_CL_ARG(ring),  EBB_CL_ARG(pos0), EBB_CL_ARG(ntok), EBB_CL_ARG(nh), EBB_CL_ARG(nkv),
            EBB_CL_ARG(scale), EBB_CL_ARG(ob),   EBB_CL_ARG(old),  EBB_CL_ARG(r0), EBB_CL_ARG(win),
            EBB_CL_ARG(apo),   EBB_CL_ARG(apml)};
        OK(ebb_cl_set_args(k, 0, c, 17, D));
        size_t wg = ebb_cl_att_mma_wg(&tu);
        size_t g[3] = {(T + wg / 2 - 1) / (wg / 2) * wg, (size_t)nh * split, (size_t)nz},
               l[3] = {wg, 1, 1};
        OK(ebb_cl_run(cl, k, 3, g, l, D));
        if (nz > 1) {
            struct ebb_cl_arg mg[] = {EBB_CL_ARG(apo),  EBB_CL_ARG(apml), EBB_CL_ARG(nz),
                                      EBB_CL_ARG(ntok), EBB_CL_ARG(ob),   EBB_CL_ARG(old),
                                      EBB_CL_ARG(r0)};
            size_t gm[3] = {(size_t)hd, (size_t)nh, T};
            OK(ebb_cl_set_args(km, 0, mg, 7, D));
            OK(ebb_cl_run(cl, km, 3, gm, NULL, D));
        }
        rd(ob, sizeof(float) * T * old, out);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++) {
                attn_ref_hd(qkv + (size_t)t * ld + h * hd, kh, vh, h / (nh / nkv),
                            win_first(pos0 + t, win), pos0 + t, ring, hd, scale, ref);
                for (int d = 0; d < hd; d++) {
                    float got = out[(size_t)t * old + h * hd + d];
                    worst = fmax(worst, fabs(got - ref[d]));
                    CHECK(fabs(got - ref[d]) <= 4e-3,
                          "prefill mma%s head_dim %d runs %d pos0 %d win %d ring %d t %d h %d "
                          "d %d: %g vs %g",
                          q8 ? " (q8_0 KV)" : "", hd, nz, pos0, win, ring, t, h, d, got, ref[d]);
                }
            }
    }
    printf("  attention prefill on tensor cores%s%s, head_dim %d, %u warps (%d queries; windows, "
           "rings; whole and in 3 or 8 runs of keys) max abs err %.2e\n",
           q8 ? " (q8_0 KV)" : "", tu.att_async && !q8 ? " (cp.async)" : "", hd,
           ebb_cl_att_mma_wg(&tu) / 32, T, worst);
    clReleaseKernel(k);
    clReleaseKernel(km);
    cl_mem ms[] = {kc, vc, qb, ob, apo, apml};
    for (int i = 0; i < 6; i++)
        clReleaseMemObject(ms[i]);
    free(kh);
    free(vh);
    free(k8), free(v8), free(kf), free(vf);
    free(qkv);
    free(out);
    free(ref);
}

/* attn_decode_rope_q8 (the reduction and quantization by each head group's last work-group)
 * against attn_decode_rope with no output (partials for every chunk count) then
 * attn_decode_reduce_q8 with one row a slice (rr 1, the fold's merge order): the same int8
 * blocks and scales to the bit, twice in a row (the counts reset by the launch).
 * kd is attn_decode_rope with its arguments a / ar / ah (the output a[11] set to NULL here and
 * restored); returns 1. */
static int check_fold(cl_kernel kd, cl_kernel kq8, cl_kernel kfold, struct ebb_cl_arg *a,
                      const struct ebb_cl_arg *ar, const struct ebb_cl_arg *ah, cl_mem cnt,
                      cl_mem xqb, cl_mem xdb, int nc, const size_t *g1, const size_t *l1, size_t ds,
                      int nh, int hd, int n_kv, int8_t *xq, float *xd)
{
    cl_mem none = NULL;
    struct ebb_cl_arg keep = a[11];
    a[11] = EBB_CL_ARG(none);
    size_t nq = (size_t)nh * hd, nd = sizeof(float) * 2 * nq / 32;
    int8_t *fq = malloc(nq);
    float *fd = malloc(nd);
    OK(ebb_cl_set_args(kd, 0, a, 12, D));
    OK(ebb_cl_run(cl, kd, 2, g1, l1, D));
    struct ebb_cl_arg bq[] = {a[9], a[10], EBB_CL_ARG(nc), EBB_CL_ARG(xqb), EBB_CL_ARG(xdb)};
    size_t g2[2] = {ds, nq / ds}, l2[2] = {ds, 1};
    OK(ebb_cl_set_args(kq8, 0, bq, 5, D));
    OK(ebb_cl_run(cl, kq8, 2, g2, l2, D));
    rd(xqb, nq, xq);
    rd(xdb, nd, xd);
    struct ebb_cl_arg fa[] = {EBB_CL_ARG(cnt), EBB_CL_ARG(xqb), EBB_CL_ARG(xdb)};
    OK(ebb_cl_set_args(kfold, 0, a, 12, D));
    OK(ebb_cl_set_args(kfold, 12, ar, 6, D));
    OK(ebb_cl_set_args(kfold, 18, ah, 3, D));
    OK(ebb_cl_set_args(kfold, 21, fa, 3, D));
    for (int round = 0; round < 2; round++) {
        memset(fq, 0, nq);
        memset(fd, 0, nd);
        OK(ebb_cl_check(clEnqueueWriteBuffer(cl->q, xqb, CL_TRUE, 0, nq, fq, 0, NULL, NULL), D,
                        "write"));
        OK(ebb_cl_run(cl, kfold, 2, g1, l1, D));
        rd(xqb, nq, fq);
        rd(xdb, nd, fd);
        CHECK(!memcmp(fq, xq, nq) && !memcmp(fd, xd, nd),
              "attn_decode_rope_q8 hd %d n_kv %d (%d chunks) round %d: int8 blocks differ from "
              "attn_decode_rope + attn_decode_reduce_q8's",
              hd, n_kv, nc, round);
    }
    a[11] = keep;
    free(fq);
    free(fd);
    return 1;
}

/* Decode attention under other shapes and tunings than the device's own: head dimensions 64
 * to 256 (96: a head of float4s no power of two), one query head a work-group or a GQA group,
 * work-groups of 16 to 256, the GPU split (4 work-items a key, loads batched) on this device.
 * attn_decode_part and attn_decode_rope (against rope_kv then the CPU reference; its cache
 * write against rope_kv's) at one position, within a chunk, one past a chunk, several chunks,
 * and through sliding windows over rings, a chunk wrapping around the ring. */
static void test_attention_shapes(void)
{
    struct {
        uint32_t hd, nh, nkv, gqa, wg, chunk, cpu;
    } shapes[] = {{128, 8, 2, 1, 128, 64, 0}, {256, 4, 1, 1, 64, 64, 0},
                  {96, 4, 2, 1, 64, 32, 0},   {64, 4, 2, 0, 256, 32, 0},
                  {256, 2, 1, 0, 16, 64, 0},  {128, 8, 2, 1, 16, 256, 1}};
    struct ebb_cl_tuning keep = tu;
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        int hd = (int)shapes[si].hd, nh = (int)shapes[si].nh, nkv = (int)shapes[si].nkv;
        tu = keep;
        tu.att_wg = shapes[si].wg;
        tu.att_chunk = shapes[si].chunk;
        tu.mv_cpu = shapes[si].cpu;
        tu.att_g = shapes[si].gqa ? (uint32_t)(nh / nkv) : 1;
        tu.mv_q8 = 1; /* builds attn_decode_reduce_q8 too */
        if (tu.att_wg > cl->info.max_wg ||
            ebb_cl_att_local(&tu, (uint32_t)hd, tu.att_g) > cl->info.local_mem / 2) {
            printf("  attention decode head_dim %d: work-group %u not on this device\n", hd,
                   tu.att_wg);
            continue;
        }
        cl_program p;
        OK(ebb_cl_ops_build(cl, &tu, (uint32_t)hd, &p, D));
        cl_kernel kp = kern(p, "attn_decode_part"), kr = kern(p, "attn_decode_rope");
        cl_kernel kred = kern(p, "attn_decode_reduce"), krope = kern(p, "rope_kv");
        enum { CTX = 600 };
        int ld = (nh + 2 * nkv) * hd, c = (int)tu.att_chunk;
        size_t cache_n = (size_t)nkv * CTX * hd;
        uint16_t *kh = malloc(cache_n * 2), *vh = malloc(cache_n * 2);
        uint16_t *k1 = malloc(cache_n * 2), *v1 = malloc(cache_n * 2);
        uint16_t *k2 = malloc(cache_n * 2), *v2 = malloc(cache_n * 2);
        float *qkv = malloc(sizeof(float) * ld), *qr = malloc(sizeof(float) * ld);
        float *out = malloc(sizeof(float) * nh * hd);
        double *ref = malloc(sizeof(double) * hd);
        for (size_t i = 0; i < cache_n; i++) {
            kh[i] = ebb_fp32_to_fp16(frand());
            vh[i] = ebb_fp32_to_fp16(frand());
        }
        for (int i = 0; i < ld; i++)
            qkv[i] = frand() * 2;
        int max_nc = (CTX + 1000 + c - 1) / c;
        cl_mem po = buf(sizeof(float) * nh * max_nc * hd, NULL);
        cl_mem pml = buf(sizeof(float) * 2 * nh * max_nc, NULL),
               ob = buf(sizeof(float) * nh * hd, NULL);
        float scale = 1.0f / sqrtf((float)hd), fbase = 10000.0f, fs = 1.0f;
        cl_ulong kvb = 0;
        int nrot = hd, neox = 1;
        cl_mem no_ff = NULL;
        double worst = 0;
        struct {
            int n_kv, win, ring;
        } cases[] = {{1, 0, CTX},          {37, 0, CTX},    {c, 0, CTX},          {c + 1, 0, CTX},
                     {2 * c + 20, 0, CTX}, {330, 100, 150}, {800, c + 44, c + 54}};
        /* rope 2: attn_decode_rope with the query and key heads' RMS norm folded in (Qwen 3,
         * Gemma 3), against head_norm then rope_kv. */
        float *hw = malloc(sizeof(float) * 2 * hd), hn_eps = 1e-6f;
        for (int i = 0; i < 2 * hd; i++)
            hw[i] = 0.5f + frand();
        cl_mem hwq = buf(sizeof(float) * hd, hw), hwk = buf(sizeof(float) * hd, hw + hd);
        cl_kernel khn = kern(p, "head_norm");
        cl_kernel kq8 = hd % 32 == 0 ? kern(p, "attn_decode_reduce_q8") : NULL;
        cl_mem xqb = buf((size_t)nh * hd, NULL), xdb = buf(sizeof(float) * 2 * nh * hd / 32, NULL);
        int8_t *xq = malloc((size_t)nh * hd);
        float *xd = malloc(sizeof(float) * 2 * nh * hd / 32);
        /* attn_decode_rope_q8 where this build has it (work-groups of a multiple of 32) */
        cl_int fe;
        cl_kernel kfold = kq8 ? clCreateKernel(p, "attn_decode_rope_q8", &fe) : NULL;
        kfold = kq8 && !fe ? kfold : NULL;
        int zeros[64] = {0}, n_fold = 0;
        cl_mem cnt = buf(sizeof(zeros), zeros);
        for (size_t li = 0; li < sizeof(cases) / sizeof(cases[0]); li++)
            for (int rope = 0; rope < 3; rope++) {
                int n_kv = cases[li].n_kv, win = cases[li].win, ring = cases[li].ring;
                int first = win_first(n_kv - 1, win), pos = n_kv - 1;
                int nc = (n_kv - first + c - 1) / c;
                cl_mem kc = buf(cache_n * 2, kh), vc = buf(cache_n * 2, vh);
                cl_mem qb = buf(sizeof(float) * ld, qkv);
                struct ebb_cl_arg a[] = {EBB_CL_ARG(qb),  EBB_CL_ARG(kc),   EBB_CL_ARG(vc),
                                         EBB_CL_ARG(kvb), EBB_CL_ARG(ring), EBB_CL_ARG(n_kv),
                                         EBB_CL_ARG(nh),  EBB_CL_ARG(nkv),  EBB_CL_ARG(scale),
                                         EBB_CL_ARG(po),  EBB_CL_ARG(pml),  EBB_CL_ARG(ob),
                                         EBB_CL_ARG(win)};
                struct ebb_cl_arg ar[] = {EBB_CL_ARG(nrot), EBB_CL_ARG(fbase), EBB_CL_ARG(fs),
                                          EBB_CL_ARG(neox), EBB_CL_ARG(no_ff), EBB_CL_ARG(win)};
                struct ebb_cl_arg b[] = {EBB_CL_ARG(po), EBB_CL_ARG(pml), EBB_CL_ARG(nc),
                                         EBB_CL_ARG(ob)};
                cl_mem hq = rope == 2 ? hwq : NULL, hk = rope == 2 ? hwk : NULL;
                struct ebb_cl_arg ah[] = {EBB_CL_ARG(hq), EBB_CL_ARG(hk), EBB_CL_ARG(hn_eps)};
                cl_kernel kd = rope ? kr : kp;
                OK(ebb_cl_set_args(kd, 0, a, rope ? 12 : 13, D));
                if (rope) {
                    OK(ebb_cl_set_args(kd, 12, ar, 6, D));
                    OK(ebb_cl_set_args(kd, 18, ah, 3, D));
                }
                OK(ebb_cl_set_args(kred, 0, b, 4, D));
                size_t g1[2] = {(size_t)nc * tu.att_wg, (size_t)nh / ATT_G_OF(tu)};
                /* rows of chunk lanes in the second pass: 1, 4, 16; a work-group per slice */
                size_t rr = (size_t)1 << (2 * rope), ds = ebb_cl_att_red_ds((uint32_t)hd);
                while (rr > 1 && ds * rr > cl->info.max_wg)
                    rr /= 2;
                size_t l1[2] = {tu.att_wg, 1}, g2[2] = {ds * rr, (size_t)nh * hd / ds};
                size_t l2[2] = {g2[0], 1};
                OK(ebb_cl_run(cl, kd, 2, g1, l1, D));
                if (nc > 1)
                    OK(ebb_cl_run(cl, kred, 2, g2, l2, D));
                rd(ob, sizeof(float) * nh * hd, out);
                if (kq8 && nc > 1 && rope == 0) {
                    /* The second pass with the quantization fused in, on the same partials:
                     * each block of 32 outputs as int8 with its scale (the largest at 127) and
                     * the scale times the block's sum, within half a step of the outputs. */
                    struct ebb_cl_arg bq[] = {EBB_CL_ARG(po), EBB_CL_ARG(pml), EBB_CL_ARG(nc),
                                              EBB_CL_ARG(xqb), EBB_CL_ARG(xdb)};
                    OK(ebb_cl_set_args(kq8, 0, bq, 5, D));
                    OK(ebb_cl_run(cl, kq8, 2, g2, l2, D));
                    rd(xqb, (size_t)nh * hd, xq);
                    rd(xdb, sizeof(float) * 2 * nh * hd / 32, xd);
                    for (int bk = 0; bk < nh * hd / 32; bk++) {
                        float dq = xd[2 * bk];
                        int amax = 0, sum = 0;
                        for (int i = 0; i < 32; i++) {
                            float v = out[bk * 32 + i], got = xq[bk * 32 + i] * dq;
                            amax = abs(xq[bk * 32 + i]) > amax ? abs(xq[bk * 32 + i]) : amax;
                            sum += xq[bk * 32 + i];
                            CHECK(fabsf(got - v) <= 0.5f * dq + 1e-6f,
                                  "decode reduce_q8 hd %d rr %zu n_kv %d block %d [%d]: %g vs %g",
                                  hd, rr, n_kv, bk, i, got, v);
                        }
                        CHECK(
                            amax == 127 &&
                                fabsf(xd[2 * bk + 1] - dq * sum) <= 1e-5f * fabsf(dq * sum) + 1e-7f,
                            "decode reduce_q8 hd %d rr %zu n_kv %d block %d: max %d, sum %g vs %g",
                            hd, rr, n_kv, bk, amax, xd[2 * bk + 1], dq * sum);
                    }
                }
                if (kfold && rope)
                    n_fold += check_fold(kd, kq8, kfold, a, ar, ah, cnt, xqb, xdb, nc, g1, l1, ds,
                                         nh, hd, n_kv, xq, xd);
                memcpy(qr, qkv, sizeof(float) * ld);
                memcpy(k2, kh, cache_n * 2);
                memcpy(v2, vh, cache_n * 2);
                if (rope) { /* the reference: rope_kv on copies, then the same attention */
                    rd(kc, cache_n * 2, k1);
                    rd(vc, cache_n * 2, v1);
                    cl_mem q2 = buf(sizeof(float) * ld, qkv), kc2 = buf(cache_n * 2, kh);
                    cl_mem vc2 = buf(cache_n * 2, vh);
                    struct ebb_cl_arg e[] = {EBB_CL_ARG(q2),  EBB_CL_ARG(ld),   EBB_CL_ARG(kc2),
                                             EBB_CL_ARG(vc2), EBB_CL_ARG(kvb),  EBB_CL_ARG(ring),
                                             EBB_CL_ARG(pos), EBB_CL_ARG(nh),   EBB_CL_ARG(nkv),
                                             EBB_CL_ARG(hd),  EBB_CL_ARG(nrot), EBB_CL_ARG(fbase),
                                             EBB_CL_ARG(fs),  EBB_CL_ARG(neox), EBB_CL_ARG(no_ff)};
                    size_t g3[3] = {(size_t)hd / 2, (size_t)(nh + nkv), 1};
                    if (rope == 2) {
                        struct ebb_cl_arg en[] = {
                            EBB_CL_ARG(q2), EBB_CL_ARG(ld), EBB_CL_ARG(hwq),   EBB_CL_ARG(hwk),
                            EBB_CL_ARG(nh), EBB_CL_ARG(hd), EBB_CL_ARG(hn_eps)};
                        size_t gn[3] = {tu.norm_wg, (size_t)(nh + nkv), 1};
                        size_t ln[3] = {tu.norm_wg, 1, 1};
                        OK(ebb_cl_set_args(khn, 0, en, 7, D));
                        OK(ebb_cl_run(cl, khn, 3, gn, ln, D));
                    }
                    OK(ebb_cl_set_args(krope, 0, e, 15, D));
                    OK(ebb_cl_run(cl, krope, 3, g3, NULL, D));
                    rd(q2, sizeof(float) * ld, qr);
                    rd(kc2, cache_n * 2, k2);
                    rd(vc2, cache_n * 2, v2);
                    for (size_t i = 0; i < cache_n; i++) {
                        float x = ebb_fp16_to_fp32(k1[i]), y = ebb_fp16_to_fp32(k2[i]);
                        CHECK(fabs(x - y) <= fabs(y) / 1024 + 1e-7 && v1[i] == v2[i],
                              "decode rope hd %d n_kv %d: cache %zu: k %g vs %g, v %04x vs %04x",
                              hd, n_kv, i, x, y, v1[i], v2[i]);
                    }
                    clReleaseMemObject(q2);
                    clReleaseMemObject(kc2);
                    clReleaseMemObject(vc2);
                }
                for (int h = 0; h < nh; h++) {
                    attn_ref_hd(qr + h * hd, k2, v2, h / (nh / nkv), first, pos, ring, hd, scale,
                                ref);
                    for (int d = 0; d < hd; d++) {
                        float got = out[h * hd + d];
                        worst = fmax(worst, fabs(got - ref[d]));
                        CHECK(fabs(got - ref[d]) <= 1e-4,
                              "decode %s hd %d g %u wg %u n_kv %d win %d ring %d h %d d %d: %g "
                              "vs %g",
                              rope == 2 ? "rope+norm"
                              : rope    ? "rope"
                                        : "part",
                              hd, ATT_G_OF(tu), tu.att_wg, n_kv, win, ring, h, d, got, ref[d]);
                    }
                }
                clReleaseMemObject(kc);
                clReleaseMemObject(vc);
                clReleaseMemObject(qb);
            }
        printf("  attention decode head_dim %d, %u heads a work-group of %u, chunk %u%s%s (part, "
               "rope, rope with head norms; windows, rings) max abs err %.2e; "
               "attn_decode_rope_q8 equal to rope + reduce_q8 in %d cases\n",
               hd, ATT_G_OF(tu), tu.att_wg, tu.att_chunk, tu.mv_cpu ? ", CPU loads" : "",
               ebb_cl_att_stage_fits(&tu, (uint32_t)hd, cl->info.local_mem) ? ", staged (cp.async)"
                                                                            : "",
               worst, n_fold);
        if (kfold)
            clReleaseKernel(kfold);
        clReleaseMemObject(cnt);
        cl_kernel ks[] = {kp, kr, kred, krope, khn};
        for (int i = 0; i < 5; i++)
            clReleaseKernel(ks[i]);
        if (kq8)
            clReleaseKernel(kq8);
        clReleaseMemObject(xqb);
        clReleaseMemObject(xdb);
        free(xq);
        free(xd);
        clReleaseMemObject(hwq);
        clReleaseMemObject(hwk);
        free(hw);
        clReleaseMemObject(po);
        clReleaseMemObject(pml);
        clReleaseMemObject(ob);
        clReleaseProgram(p);
        free(kh), free(vh), free(k1), free(v1), free(k2), free(v2);
        free(qkv), free(qr), free(out), free(ref);
    }
    tu = keep;
}

static void test_ops(void)
{
    cl_program p;
    /* Decode attention with a work-group per query head, then per KV head (GQA groups of 2). */
    struct ebb_cl_tuning keep = tu;
    tu.att_g = 1;
    OK(ebb_cl_ops_build(cl, &tu, HD, &p, D));
    test_rmsnorm_swiglu_add_softmax(p);
    test_topk(p);
    test_rope(p, 0, false);
    test_rope(p, 1, false);
    test_rope(p, 0, true);
    test_attention(p);
    test_attention_rows(p);
    clReleaseProgram(p);
    tu.att_g = NH / NKV;
    tu.att_mma = 1; /* built where the device runs PTX */
    OK(ebb_cl_ops_build(cl, &tu, HD, &p, D));
    test_attention(p);
    test_attention_rows(p);
    test_attention_mma_hd(p, HD, false);
    clReleaseProgram(p);
    /* The tensor-core prefill attention for heads of 128 and 256 (Gemma 3's), where the device
     * builds it (PTX); with its tiles copied by cp.async where the probe passed, and then
     * through registers too. */
    for (int as = (int)tu.att_async; as >= 0 && tu.mv_ptx; as--) {
        tu.att_async = (uint32_t)as;
        if (!as) {
            tu.att_g = NH / NKV;
            OK(ebb_cl_ops_build(cl, &tu, HD, &p, D));
            test_attention_mma_hd(p, HD, false);
            clReleaseProgram(p);
        }
        for (int hd = 128; hd <= 256; hd *= 2) {
            tu.att_g = 1;
            OK(ebb_cl_ops_build(cl, &tu, (uint32_t)hd, &p, D));
            test_attention_mma_hd(p, hd, false);
            clReleaseProgram(p);
        }
    }
    /* The other work-group width: 4 warps (64 queries a work-group) where the device's is 8
     * (128 queries: the test's 100 in one, partial), else 8. */
    for (int hd = 64; hd <= 256 && tu.mv_ptx; hd *= 2) {
        tu.att_async = keep.att_async;
        tu.att_mma_w = keep.att_mma_w == 8 ? 4 : 8;
        tu.att_g = 1;
        OK(ebb_cl_ops_build(cl, &tu, (uint32_t)hd, &p, D));
        test_attention_mma_hd(p, hd, false);
        clReleaseProgram(p);
    }
    tu.att_mma_w = keep.att_mma_w;
    /* The GPU shape of decode attention on this device: 4 work-items a key, batched loads,
     * work-groups of 128 (partial outputs over 8 position groups), chunks of 64. */
    tu.att_mma = keep.att_mma;
    tu.mv_cpu = 0;
    tu.att_wg = 128;
    tu.att_chunk = 64;
    OK(ebb_cl_ops_build(cl, &tu, HD, &p, D));
    test_attention(p);
    test_attention_rows(p);
    clReleaseProgram(p);
    tu = keep;
    test_attention_shapes();
}
