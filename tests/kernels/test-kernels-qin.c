/* matvec_q8_qin (tuning qin: decode's 8-bit-input products quantizing their own input: the
 * 4-bit weights of matvec.cl and the other block types of kq8.cl) against the
 * launch pair it replaces, quantize_x8 then matvec_q8: the same outputs to the bit for plain
 * inputs, the RMS norm folded, SwiGLU and GeGLU folded, over input lengths below, at and above
 * the work-group's width and not multiples of it, and several work-group shapes. Included by
 * test-kernels.c (its helpers and the device). */

/* One weight of layout l, n_out x n_in, under tuning t (qin on): quantize_x8 + matvec_q8 and
 * matvec_q8_qin for each input variant, outputs compared exactly. */
static void test_qin_case(const struct ebb_cl_layout *l, struct ebb_cl_tuning t, uint32_t n_out,
                          uint32_t n_in)
{
    char name[64];
    ebb_cl_layout_name(l, name, sizeof(name));
    uint64_t rowb = 0;
    OK(ebb_ggml_row_bytes(l->type, n_in, &rowb));
    uint8_t *raw = malloc(rowb * n_out);
    random_rows(l->type, n_out, n_in, raw, rowb);
    struct ebb_cl_wsrc src[1] = {{raw, n_out}};
    struct ebb_cl_weight wt;
    OK(ebb_cl_weight_new(cl, l, n_in, src, 1, NULL, &wt, D));
    struct ebb_cl_wprog p;
    OK(ebb_cl_wprog_build(cl, l, &t, &p, D));
    CHECK(p.matvec_q8 && p.matvec_q8_qin, "qin: %s has no matvec_q8_qin (wg %u)", name,
          ebb_cl_qin_wg(&t));
    cl_program ops;
    cl_kernel kq;
    OK(ebb_cl_ops_build(cl, &t, 64, &ops, D));
    OK(ebb_cl_kernel(ops, "quantize_x8", &kq, D));

    float *xg = malloc(sizeof(float) * 2 * n_in), *nw = malloc(sizeof(float) * n_in);
    float *res = malloc(sizeof(float) * n_out), *y0 = malloc(sizeof(float) * n_out);
    float *y1 = malloc(sizeof(float) * n_out);
    for (uint32_t i = 0; i < 2 * n_in; i++) /* some blocks all zero: a zero scale */
        xg[i] = i / 32 % 7 == 3 ? 0.0f : 3.0f * frand();
    for (uint32_t i = 0; i < n_in; i++)
        nw[i] = 0.5f + frand();
    for (uint32_t o = 0; o < n_out; o++)
        res[o] = frand();
    cl_mem xb = buf(sizeof(float) * 2 * n_in, xg), nwb = buf(sizeof(float) * n_in, nw);
    cl_mem rb = buf(sizeof(float) * n_out, res), yb = buf(sizeof(float) * n_out, NULL);
    cl_mem xq = buf(n_in, NULL), xd = buf(sizeof(float) * 2 * (n_in / 32), NULL);
    const float eps = 1e-5f;
    for (int variant = 0; variant < 4 && p.matvec_q8_qin; variant++) {
        int glu = variant >= 2 ? variant - 1 : 0, ni = (int)n_in, no = (int)n_out;
        int off = 0;
        cl_mem nwarg = variant == 1 ? nwb : NULL, rarg = variant == 2 ? NULL : rb;
        /* the launch pair */
        struct ebb_cl_arg qa[] = {EBB_CL_ARG(xb),  EBB_CL_ARG(ni),  EBB_CL_ARG(nwarg),
                                  EBB_CL_ARG(eps), EBB_CL_ARG(glu), EBB_CL_ARG(xq),
                                  EBB_CL_ARG(xd)};
        size_t qg = (n_in + EBB_CL_Q8_WG - 1) / EBB_CL_Q8_WG * EBB_CL_Q8_WG, ql = EBB_CL_Q8_WG;
        OK(ebb_cl_set_args(kq, 0, qa, 7, D));
        OK(ebb_cl_run(cl, kq, 1, &qg, &ql, D));
        struct ebb_cl_arg a[] = {EBB_CL_ARG(ni), EBB_CL_ARG(no),  EBB_CL_ARG(xq),  EBB_CL_ARG(xd),
                                 EBB_CL_ARG(yb), EBB_CL_ARG(off), EBB_CL_ARG(rarg)};
        OK(ebb_cl_weight_set_args(&wt, p.matvec_q8, 0, D));
        OK(ebb_cl_set_args(p.matvec_q8, 2, a, 7, D));
        size_t g[2], lw[2];
        ebb_cl_q8_shape(&t, n_out, g, lw);
        OK(ebb_cl_run(cl, p.matvec_q8, 2, g, lw, D));
        rd(yb, sizeof(float) * n_out, y0);
        /* the fused kernel, into a cleared output */
        float nan = NAN;
        OK(ebb_cl_check(clEnqueueFillBuffer(cl->q, yb, &nan, sizeof(nan), 0, sizeof(float) * n_out,
                                            0, NULL, NULL),
                        D, "fill"));
        size_t xl, dl;
        ebb_cl_qin_local(n_in, &xl, &dl);
        struct ebb_cl_arg b[] = {EBB_CL_ARG(ni),    EBB_CL_ARG(no),  EBB_CL_ARG(xb),
                                 EBB_CL_ARG(nwarg), EBB_CL_ARG(eps), EBB_CL_ARG(glu),
                                 EBB_CL_ARG(yb),    EBB_CL_ARG(off), EBB_CL_ARG(rarg),
                                 {xl, NULL},        {dl, NULL}};
        OK(ebb_cl_weight_set_args(&wt, p.matvec_q8_qin, 0, D));
        OK(ebb_cl_set_args(p.matvec_q8_qin, 2, b, 11, D));
        ebb_cl_qin_shape(&t, n_out, g, lw);
        OK(ebb_cl_run(cl, p.matvec_q8_qin, 1, g, lw, D));
        rd(yb, sizeof(float) * n_out, y1);
        int bad = 0;
        for (uint32_t o = 0; o < n_out; o++)
            if (memcmp(&y0[o], &y1[o], sizeof(float)) && bad++ < 3)
                CHECK(0, "%s qin variant %d n_in %u wg %u o %u: %.9g vs %.9g (quantize_x8)", name,
                      variant, n_in, ebb_cl_qin_wg(&t), o, y1[o], y0[o]);
        CHECK(!bad, "%s qin variant %d n_in %u: %d of %u outputs differ", name, variant, n_in, bad,
              n_out);
    }
    printf("  %-34s qin n_in %5u, %3u work-items (%u rows): %s\n", name, n_in, ebb_cl_qin_wg(&t),
           t.qin_rows, p.matvec_q8_qin ? "plain, norm, glu, gelu identical" : "not built");
    cl_mem ms[] = {xb, nwb, rb, yb, xq, xd};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
    clReleaseKernel(kq);
    clReleaseProgram(ops);
    ebb_cl_wprog_fini(&p);
    ebb_cl_weight_fini(&wt);
    free(raw);
    free(xg);
    free(nw);
    free(res);
    free(y0);
    free(y1);
}

/* When decode takes matvec_q8_qin: the knob's levels, the length cap, local memory. */
static void test_qin_fits(struct ebb_cl_tuning t)
{
    t.qin = 0;
    CHECK(!ebb_cl_qin_wg(&t) && !ebb_cl_qin_fits(&t, 1 << 20, 2048, 64, 0), "qin 0 takes it");
    t.qin = 1;
    CHECK(ebb_cl_qin_fits(&t, 1 << 20, 2048, 64, 0), "qin 1: a plain / norm input refused");
    CHECK(!ebb_cl_qin_fits(&t, 1 << 20, 2048, 64, 1), "qin 1: a glu input taken");
    t.qin = 2;
    CHECK(ebb_cl_qin_fits(&t, 1 << 20, 8192, 64, 1), "qin 2: a glu input refused");
    CHECK(!ebb_cl_qin_fits(&t, 1 << 20, 8200, 64, 1), "qin: n_in not a multiple of 32 taken");
    t.qin_max = 4096;
    CHECK(ebb_cl_qin_fits(&t, 1 << 20, 4096, 64, 0) && !ebb_cl_qin_fits(&t, 1 << 20, 4128, 64, 0),
          "qin_max 4096 not applied");
    t.qin_max = 0;
    /* 48 KiB: 8192 inputs take 10 KiB, 65536 80 KiB */
    CHECK(ebb_cl_qin_fits(&t, 48 * 1024, 8192, 64, 1) &&
              !ebb_cl_qin_fits(&t, 48 * 1024, 65536, 64, 1),
          "qin: the local memory bound");
    t.qin_out_max = 4096;
    CHECK(ebb_cl_qin_fits(&t, 1 << 20, 2048, 4096, 0) &&
              !ebb_cl_qin_fits(&t, 1 << 20, 2048, 4097, 0),
          "qin_out_max 4096 not applied");
    t.qin_out_max = 0;
    t.mv_q8 = 0;
    CHECK(!ebb_cl_qin_fits(&t, 1 << 20, 2048, 64, 0), "qin without mv_q8 taken");
}

static void test_qin(void)
{
    struct ebb_cl_tuning t = tu;
    t.block_dec = 0;
    t.mv_q16 = 1;
    t.mv_xlocal = 1;
    t.mv_q8 = 1;
    t.qin = 2;
    t.mvu = 2;
    t.mv_ptx = tu.mv_ptx;
    test_qin_fits(t);
    struct ebb_cl_layout q40 = {EBB_GGML_Q4_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    struct ebb_cl_layout q41 = {EBB_GGML_Q4_1, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    struct ebb_cl_layout q40s = {EBB_GGML_Q4_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT};
    /* work-items a row x rows a work-group: one (a CPU's), 2 x 3 (6: not a multiple of 32), a
     * warp x 4 (NVIDIA's matvec_q8), 8 x 4, and a warp x 12 (384: wider than quantize_x8's 256) */
    static const uint32_t shapes[][2] = {{1, 1}, {2, 3}, {32, 4}, {8, 4}, {32, 12}};
    /* 32 inputs (one block), 96, 544 (17 blocks), 2048, 3200 and 8192 (the 1B's n_ff) */
    static const uint32_t n_ins[] = {32, 96, 544, 2048, 3200, 8192};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        if (shapes[s][0] * shapes[s][1] > cl->info.max_wg)
            continue;
        t.mv_wg = t.mvq_wg = shapes[s][0];
        t.mv_rows = t.mvq_rows = t.qin_rows = shapes[s][1];
        if (t.mv_ptx && (shapes[s][0] % 32 || !ebb_cl_qin_wg(&t)))
            continue; /* (PTX builds want whole warps) */
        for (size_t i = 0; i < sizeof(n_ins) / sizeof(n_ins[0]); i++) {
            if (!ebb_cl_qin_fits(&t, cl->info.local_mem, n_ins[i], 37, 1))
                continue;
            /* the two long inputs only on the widest shapes: CI time */
            if (n_ins[i] > 3200 && shapes[s][0] * shapes[s][1] < 128)
                continue;
            test_qin_case(&q40, t, 37, n_ins[i]);
        }
        if (shapes[s][0] == 32 && shapes[s][1] == 4) { /* Q4_1, and a split layout */
            test_qin_case(&q41, t, 37, 544);
            test_qin_case(&q40s, t, 37, 544);
        }
    }
    /* matvec_q8_qin with more rows a work-group than matvec_q8 (EBB_CL_QIN_ROWS) */
    t.mv_wg = t.mvq_wg = 32;
    t.mv_rows = t.mvq_rows = 4;
    t.qin_rows = 8;
    if (32 * 8 <= cl->info.max_wg)
        test_qin_case(&q40, t, 37, 2048);
    /* kq8.cl's matvec_q8_qin for the other raw block types: 544 inputs (17 groups) for the
     * 32-block types, 768 (3 super-blocks) for the K-quants, one work-item a row (not on PTX),
     * a warp x 4 and a warp x 8 (more rows than matvec_q8's); Q4_K and Q6_K (the Q4_K_M mixes'
     * attention) also at 2048 inputs. */
    static const uint32_t kq_types[] = {EBB_GGML_Q8_0, EBB_GGML_Q5_0, EBB_GGML_Q5_1,
                                        EBB_GGML_Q4_K, EBB_GGML_Q5_K, EBB_GGML_Q6_K};
    static const uint32_t kq_shapes[][3] = {{1, 1, 1}, {32, 4, 4}, {32, 4, 8}};
    t.kq8 = 1;
    for (size_t s = 0; s < sizeof(kq_shapes) / sizeof(kq_shapes[0]); s++) {
        t.mv_wg = t.mvq_wg = kq_shapes[s][0];
        t.mv_rows = t.mvq_rows = kq_shapes[s][1];
        t.qin_rows = kq_shapes[s][2];
        if (kq_shapes[s][0] * kq_shapes[s][2] > cl->info.max_wg ||
            (t.mv_ptx && (kq_shapes[s][0] % 32 || !ebb_cl_qin_wg(&t))))
            continue;
        for (size_t i = 0; i < sizeof(kq_types) / sizeof(kq_types[0]); i++) {
            struct ebb_cl_layout l = {kq_types[i], EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
            bool k256 = ebb_ggml_type_info(kq_types[i])->block_size == 256;
            test_qin_case(&l, t, 37, k256 ? 768 : 544);
            if (s == 1 && (kq_types[i] == EBB_GGML_Q4_K || kq_types[i] == EBB_GGML_Q6_K))
                test_qin_case(&l, t, 37, 2048);
        }
    }
}

/* matvec_q8_mix (tuning kq8_mix: two products of one input in different kq8 types in one
 * launch) against matvec_q8 of each weight: weight a (n_a rows, type ta: the program's) and b
 * (n_b rows of type tb), the same 8-bit input, outputs side by side compared to the bit. */
static void test_mix_case(struct ebb_cl_tuning t, uint32_t ta, uint32_t tb, uint32_t n_a,
                          uint32_t n_b, uint32_t n_in)
{
    const uint32_t ty[2] = {ta, tb}, n[2] = {n_a, n_b};
    struct ebb_cl_weight wt[2];
    struct ebb_cl_wprog p[2];
    uint8_t *raw[2];
    for (int i = 0; i < 2; i++) {
        struct ebb_cl_layout l = {ty[i], EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
        uint64_t rowb = 0;
        OK(ebb_ggml_row_bytes(ty[i], n_in, &rowb));
        raw[i] = malloc(rowb * n[i]);
        random_rows(ty[i], n[i], n_in, raw[i], rowb);
        struct ebb_cl_wsrc src[1] = {{raw[i], n[i]}};
        OK(ebb_cl_weight_new(cl, &l, n_in, src, 1, NULL, &wt[i], D));
        OK(ebb_cl_wprog_build(cl, &l, &t, &p[i], D));
    }
    CHECK(p[0].matvec_q8_mix && ebb_cl_kq8_mix_type(&wt[1].layout, &t),
          "kq8 mix: %s has no matvec_q8_mix or %s is not taken", ebb_ggml_type_info(ta)->name,
          ebb_ggml_type_info(tb)->name);
    uint32_t n_out = n_a + n_b;
    int8_t *xq = malloc(n_in);
    float *xd = malloc(sizeof(float) * 2 * (n_in / 32)), *y0 = malloc(sizeof(float) * n_out);
    float *y1 = malloc(sizeof(float) * n_out);
    for (uint32_t i = 0; i < n_in; i++)
        xq[i] = (int8_t)(rand() % 255 - 127);
    for (uint32_t b = 0; b < n_in / 32; b++) {
        xd[2 * b] = 0.01f + 0.02f * frand();
        xd[2 * b + 1] = frand() - 0.5f;
    }
    cl_mem xqb = buf(n_in, xq), xdb = buf(sizeof(float) * 2 * (n_in / 32), xd);
    cl_mem yb = buf(sizeof(float) * n_out, NULL);
    cl_mem none = NULL;
    size_t g[2], lw[2];
    int ni = (int)n_in, off = 0;
    for (int i = 0; i < 2 && p[0].matvec_q8_mix; i++) { /* the two launches */
        int no = (int)n[i];
        struct ebb_cl_arg a[] = {EBB_CL_ARG(ni), EBB_CL_ARG(no),  EBB_CL_ARG(xqb), EBB_CL_ARG(xdb),
                                 EBB_CL_ARG(yb), EBB_CL_ARG(off), EBB_CL_ARG(none)};
        OK(ebb_cl_weight_set_args(&wt[i], p[i].matvec_q8, 0, D));
        OK(ebb_cl_set_args(p[i].matvec_q8, 2, a, 7, D));
        ebb_cl_q8_shape(&t, n[i], g, lw);
        OK(ebb_cl_run(cl, p[i].matvec_q8, 2, g, lw, D));
        off += no;
    }
    rd(yb, sizeof(float) * n_out, y0);
    float nan = NAN;
    OK(ebb_cl_check(
        clEnqueueFillBuffer(cl->q, yb, &nan, sizeof(nan), 0, sizeof(float) * n_out, 0, NULL, NULL),
        D, "fill"));
    if (p[0].matvec_q8_mix) { /* the one launch */
        int na = (int)n_a, no = (int)n_out, itb = (int)tb, zero = 0;
        cl_ulong u_off = wt[1].off;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(ni),      EBB_CL_ARG(na),    EBB_CL_ARG(no),
                                 EBB_CL_ARG(wt[1].a), EBB_CL_ARG(u_off), EBB_CL_ARG(itb),
                                 EBB_CL_ARG(xqb),     EBB_CL_ARG(xdb),   EBB_CL_ARG(yb),
                                 EBB_CL_ARG(zero)};
        OK(ebb_cl_weight_set_args(&wt[0], p[0].matvec_q8_mix, 0, D));
        OK(ebb_cl_set_args(p[0].matvec_q8_mix, 2, a, 10, D));
        ebb_cl_q8_shape(&t, n_out, g, lw);
        OK(ebb_cl_run(cl, p[0].matvec_q8_mix, 2, g, lw, D));
    }
    rd(yb, sizeof(float) * n_out, y1);
    int bad = 0;
    for (uint32_t o = 0; o < n_out; o++)
        if (memcmp(&y0[o], &y1[o], sizeof(float)) && bad++ < 3)
            CHECK(0, "kq8 mix %s + %s n_in %u o %u: %.9g vs %.9g (matvec_q8)",
                  ebb_ggml_type_info(ta)->name, ebb_ggml_type_info(tb)->name, n_in, o, y1[o],
                  y0[o]);
    CHECK(!bad, "kq8 mix %s + %s: %d of %u outputs differ", ebb_ggml_type_info(ta)->name,
          ebb_ggml_type_info(tb)->name, bad, n_out);
    printf("  matvec_q8_mix %-5s %3u rows + %-5s %3u rows, n_in %4u, %u x %u: %s\n",
           ebb_ggml_type_info(ta)->name, n_a, ebb_ggml_type_info(tb)->name, n_b, n_in, t.mvq_wg,
           t.mvq_rows, bad ? "DIFFER" : "identical to two matvec_q8");
    cl_mem ms[] = {xqb, xdb, yb};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
    for (int i = 0; i < 2; i++) {
        ebb_cl_wprog_fini(&p[i]);
        ebb_cl_weight_fini(&wt[i]);
        free(raw[i]);
    }
    free(xq);
    free(xd);
    free(y0);
    free(y1);
}

/* matvec_q8_mix over each second type it takes, behind Q4_K and Q5_K (the K-quant mixes' q and
 * k) and Q8_0: 37 + 13 rows (a work-group straddling the two weights), 768 inputs, one
 * work-item a row (not on PTX) and a warp x 4 (NVIDIA's). */
static void test_kq8mix(void)
{
    struct ebb_cl_tuning t = tu;
    t.mv_q8 = 1;
    t.kq8 = 1;
    t.kq8_mix = 1;
    static const uint32_t shapes[][2] = {{1, 1}, {32, 4}};
    static const uint32_t pairs[][2] = {{EBB_GGML_Q4_K, EBB_GGML_Q6_K},
                                        {EBB_GGML_Q4_K, EBB_GGML_Q8_0},
                                        {EBB_GGML_Q5_K, EBB_GGML_Q6_K},
                                        {EBB_GGML_Q6_K, EBB_GGML_Q4_K},
                                        {EBB_GGML_Q8_0, EBB_GGML_Q5_K}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        if (shapes[s][0] * shapes[s][1] > cl->info.max_wg || (t.mv_ptx && shapes[s][0] % 32))
            continue;
        t.mv_wg = t.mvq_wg = shapes[s][0];
        t.mv_rows = t.mvq_rows = shapes[s][1];
        for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
            test_mix_case(t, pairs[i][0], pairs[i][1], 37, 13, 768);
    }
    /* a type it does not take second: Q5_0 */
    struct ebb_cl_layout q50 = {EBB_GGML_Q5_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    CHECK(!ebb_cl_kq8_mix_type(&q50, &t), "kq8 mix: Q5_0 taken as the second weight");
    t.kq8_mix = 0;
    struct ebb_cl_layout q6k = {EBB_GGML_Q6_K, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    CHECK(!ebb_cl_kq8_mix_type(&q6k, &t), "kq8 mix: taken with EBB_CL_KQ8MIX=0");
}
