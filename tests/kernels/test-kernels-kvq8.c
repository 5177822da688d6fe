/* The 8-bit KV cache (--kv-type q8_0: the ops program built with tu.kv_q8, KV_Q8), included by
 * test-kernels.c after test-kernels-ops.c (HD, NH, NKV, NCTX, QKV_LD, attention's helpers).
 *
 * - The write: rope_kv's blocks against the host's Q8_0 rounding (quant.c, GGUF's reference
 *   quantizer) of the rotated keys (computed in double here) and of the values; rope_kv_rows and
 *   attn_decode_rope against rope_kv byte for byte.
 * - The reads: every attention kernel the engine runs on this device (decode with its split
 *   and reduction, the batched decode rows, prefill, the fused decode with rope) over a cache of
 *   Q8_0 blocks, against the CPU attention over the blocks' values (q * d: the same sums as the
 *   f16 cache's test, 1e-4), and against the same kernels over the f16 cache of the same floats
 *   within KVQ8_TOL: the values are in [-1, 1], so a block rounds each by at most 1/254 (half a
 *   step of max |x| / 127); the outputs, averages of the values weighted by softmax, move by
 *   about that much plus the scores' shift (64 products of such errors with queries in [-2, 2],
 *   scaled by 1/8, random in sign). Seen on PoCL: about 3e-3; the bound is 0.02.
 * On PoCL the tensor-core prefill (attn_prefill_mma) is not built (no PTX): the engine runs
 * attn_prefill there, tested here; scripts/cl-offline-check.sh compiles the PTX variant. */

#define KVQ8_TOL 0.02

/* Host Q8_0 blocks of n floats (n a multiple of 32) into dst (n / 32 * 34 bytes), and the
 * values they give back into back (NULL: not wanted). */
static void kvq8_quantize(const float *x, size_t n, uint8_t *dst, float *back)
{
    OK(ebb_quant_quantize_row(EBB_GGML_Q8_0, x, dst, n));
    if (back)
        OK(ebb_quant_dequantize_row(EBB_GGML_Q8_0, dst, back, n));
}

/* rope_kv (neox or not) into a Q8_0 cache: queries rotated in place as the f16 build does, each
 * block of a rotated key and of a value within half a step (plus the rotation's float error)
 * of the exact value, its scale the host's for the exact values within a half's rounding; the
 * values' blocks equal the host's but for a rounding tie (q within 1). rope_kv_rows then writes
 * the same bytes for the same rows. */
static void test_kvq8_write(cl_program p, int neox)
{
    enum { T = 3, NROT = 48, CTX = 1100 };
    int pos0 = 1000;
    static float qkv[T * QKV_LD], out[T * QKV_LD];
    for (int i = 0; i < T * QKV_LD; i++)
        qkv[i] = frand();
    size_t cache_n = (size_t)2 * NKV * CTX * HD, cb = cache_n / 32 * 34;
    cl_mem qb = buf(sizeof(qkv), qkv), kc = buf(cb, NULL), vc = buf(cb, NULL);
    cl_ulong base = (cl_ulong)NKV * CTX * HD; /* second sequence slot */
    int n_ctx = CTX, nh = NH, nkv = NKV, hd = HD, nrot = NROT, ld = QKV_LD;
    float fbase = 10000.0f, fscale = 0.5f;
    cl_mem ff = NULL;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(qb),     EBB_CL_ARG(ld),   EBB_CL_ARG(kc),
                             EBB_CL_ARG(vc),     EBB_CL_ARG(base), EBB_CL_ARG(n_ctx),
                             EBB_CL_ARG(pos0),   EBB_CL_ARG(nh),   EBB_CL_ARG(nkv),
                             EBB_CL_ARG(hd),     EBB_CL_ARG(nrot), EBB_CL_ARG(fbase),
                             EBB_CL_ARG(fscale), EBB_CL_ARG(neox), EBB_CL_ARG(ff)};
    cl_kernel k = kern(p, "rope_kv");
    OK(ebb_cl_set_args(k, 0, a, 15, D));
    size_t g[3] = {HD / 2, 2, T}; /* 2 work-items a pair of a row, each several heads */
    OK(ebb_cl_run(cl, k, 3, g, NULL, D));
    rd(qb, sizeof(out), out);
    uint8_t *kh = calloc(1, cb), *vh = calloc(1, cb), blk[34];
    rd(kc, cb, kh);
    rd(vc, cb, vh);
    double worst = 0;
    /* The rotation's float error: angles up to 500 rad here, whose float product and pow (16 ulp
     * allowed by OpenCL) put up to ~5e-4 rad on them; 2e-4 failed on PoCL for a key near a
     * rounding tie when an earlier section had drawn other random numbers. */
    const double rot_err = 6e-4;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH + NKV; h++) {
            const float *src = qkv + t * QKV_LD + h * HD;
            float ref[HD];
            memcpy(ref, src, sizeof(ref));
            for (int i = 0; i < NROT / 2; i++) {
                int i0 = neox ? i : 2 * i, i1 = neox ? i + NROT / 2 : 2 * i + 1;
                double th = (pos0 + t) * 0.5 * pow(10000.0, -2.0 * i / NROT);
                ref[i0] = (float)(src[i0] * cos(th) - src[i1] * sin(th));
                ref[i1] = (float)(src[i0] * sin(th) + src[i1] * cos(th));
            }
            if (h < NH) {
                for (int d = 0; d < HD; d++)
                    CHECK(fabsf(out[t * QKV_LD + h * HD + d] - ref[d]) <= rot_err,
                          "q8 rope q neox=%d t %d h %d d %d", neox, t, h, d);
                continue;
            }
            size_t at = base + ((size_t)(h - NH) * CTX + pos0 + t) * HD;
            const float *vsrc = qkv + t * QKV_LD + (h + NKV) * HD;
            for (int b0 = 0; b0 < HD; b0 += 32) {
                struct ebb_block_q8_0 kb, vb, want;
                memcpy(&kb, kh + (at + b0) / 32 * 34, 34);
                memcpy(&vb, vh + (at + b0) / 32 * 34, 34);
                kvq8_quantize(ref + b0, 32, blk, NULL);
                memcpy(&want, blk, 34);
                float dk = ebb_fp16_to_fp32(kb.d), dw = ebb_fp16_to_fp32(want.d);
                CHECK(fabsf(dk - dw) <= dw / 1024, "q8 key scale t %d h %d block %d: %g vs %g", t,
                      h, b0 / 32, dk, dw);
                for (int j = 0; j < 32; j++) {
                    double e = fabs(kb.qs[j] * dk - ref[b0 + j]);
                    worst = fmax(worst, e);
                    CHECK(e <= 0.5 * dk * 1.001 + rot_err, "q8 key t %d h %d d %d: %g vs %g", t, h,
                          b0 + j, kb.qs[j] * dk, ref[b0 + j]);
                }
                kvq8_quantize(vsrc + b0, 32, blk, NULL);
                memcpy(&want, blk, 34);
                CHECK(vb.d == want.d, "q8 value scale t %d h %d block %d: %04x vs %04x", t, h,
                      b0 / 32, vb.d, want.d);
                for (int j = 0; j < 32; j++)
                    CHECK(abs(vb.qs[j] - want.qs[j]) <= 1, "q8 value t %d h %d d %d: %d vs %d", t,
                          h, b0 + j, vb.qs[j], want.qs[j]);
            }
        }
    /* rope_kv_rows: the same rows as slot 1's positions pos0.. */
    int rt[2 * T];
    for (int t = 0; t < T; t++)
        rt[2 * t] = 1, rt[2 * t + 1] = pos0 + t;
    cl_mem qb2 = buf(sizeof(qkv), qkv), kc2 = buf(cb, NULL), vc2 = buf(cb, NULL);
    cl_mem rtb = buf(sizeof(rt), rt);
    cl_ulong stride = base;
    struct ebb_cl_arg ar[] = {EBB_CL_ARG(qb2),    EBB_CL_ARG(ld),   EBB_CL_ARG(kc2),
                              EBB_CL_ARG(vc2),    EBB_CL_ARG(rtb),  EBB_CL_ARG(stride),
                              EBB_CL_ARG(n_ctx),  EBB_CL_ARG(nh),   EBB_CL_ARG(nkv),
                              EBB_CL_ARG(hd),     EBB_CL_ARG(nrot), EBB_CL_ARG(fbase),
                              EBB_CL_ARG(fscale), EBB_CL_ARG(neox), EBB_CL_ARG(ff)};
    cl_kernel kr = kern(p, "rope_kv_rows");
    OK(ebb_cl_set_args(kr, 0, ar, 15, D));
    OK(ebb_cl_run(cl, kr, 3, g, NULL, D));
    uint8_t *k2 = calloc(1, cb), *v2 = calloc(1, cb);
    rd(kc2, cb, k2);
    rd(vc2, cb, v2);
    /* Both caches started uninitialized: compare the rows written. */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NKV; h++) {
            size_t at = (base + ((size_t)h * CTX + pos0 + t) * HD) / 32 * 34;
            CHECK(!memcmp(kh + at, k2 + at, HD / 32 * 34) &&
                      !memcmp(vh + at, v2 + at, HD / 32 * 34),
                  "q8 rope_kv_rows row %d head %d differs from rope_kv's", t, h);
        }
    printf("  q8_0 KV write: rope_kv (%s) blocks against the host's rounding (worst key error "
           "%.2e), rope_kv_rows byte for byte\n",
           neox ? "neox" : "normal", worst);
    clReleaseKernel(k);
    clReleaseKernel(kr);
    cl_mem ms[] = {qb, kc, vc, qb2, kc2, vc2, rtb};
    for (int i = 0; i < 7; i++)
        clReleaseMemObject(ms[i]);
    free(kh), free(vh), free(k2), free(v2);
}

/* CPU attention over float K and V (the blocks' values) of query q (head h) at positions
 * first..last, the cache's layout as attn_ref_win's. */
static void kvq8_ref(const float *q, const float *kf, const float *vf, size_t base, int h,
                     int first, int last, int n_ctx, float scale, double *o)
{
    int hk = h / (NH / NKV);
    double *s = malloc(sizeof(double) * (last + 1)), m = -1e30, sum = 0;
    for (int p = first; p <= last; p++) {
        double acc = 0;
        size_t at = base + ((size_t)hk * n_ctx + p % n_ctx) * HD;
        for (int d = 0; d < HD; d++)
            acc += (double)q[d] * kf[at + d];
        s[p] = acc * scale;
        m = fmax(m, s[p]);
    }
    for (int p = first; p <= last; p++)
        sum += (s[p] = exp(s[p] - m));
    for (int d = 0; d < HD; d++) {
        double acc = 0;
        for (int p = first; p <= last; p++)
            acc += s[p] * vf[base + ((size_t)hk * n_ctx + p % n_ctx) * HD + d];
        o[d] = acc / sum;
    }
    free(s);
}

/* What one attention run produced: out[t][h][d] of each of the two programs. */
struct kvq8_run {
    cl_program p16, p8;
    cl_mem k16, v16, k8, v8, qb, ob, po, pml;
    float *o16, *o8;
    double worst_ref, worst_f16;
};

/* Checks rows n_rows of r->o8 (row stride NH * HD, rows listed at their qkv row t and query
 * position) against the CPU reference over the blocks and against r->o16. */
static void kvq8_check(struct kvq8_run *r, const char *what, const float *qkv, const float *kq,
                       const float *vq, const int *row_slot, const int *row_pos, int n_rows,
                       int win, int ring, float scale)
{
    double ref[HD];
    size_t stride = (size_t)NKV * NCTX * HD;
    for (int t = 0; t < n_rows; t++)
        for (int h = 0; h < NH; h++) {
            kvq8_ref(qkv + t * QKV_LD + h * HD, kq, vq, (size_t)row_slot[t] * stride, h,
                     win_first(row_pos[t], win), row_pos[t], ring, scale, ref);
            for (int d = 0; d < HD; d++) {
                float g8 = r->o8[(t * NH + h) * HD + d], g16 = r->o16[(t * NH + h) * HD + d];
                r->worst_ref = fmax(r->worst_ref, fabs(g8 - ref[d]));
                r->worst_f16 = fmax(r->worst_f16, fabs(g8 - g16));
                CHECK(fabs(g8 - ref[d]) <= 1e-4, "q8 %s win %d row %d h %d d %d: %g vs ref %g",
                      what, win, t, h, d, g8, ref[d]);
                CHECK(fabs(g8 - g16) <= KVQ8_TOL, "q8 %s win %d row %d h %d d %d: %g vs f16 %g",
                      what, win, t, h, d, g8, g16);
            }
        }
}

/* Decode (attn_decode_part + attn_decode_reduce), prefill (attn_prefill) and the batched decode
 * rows (attn_decode_rows + attn_decode_reduce_rows) over the same floats in a Q8_0 cache (p8)
 * and an f16 one (p16). */
static void test_kvq8_attention(cl_program p16, cl_program p8)
{
    size_t stride = (size_t)NKV * NCTX * HD, cache_n = 2 * stride, cb = cache_n / 32 * 34;
    float *kf = malloc(sizeof(float) * cache_n), *vf = malloc(sizeof(float) * cache_n);
    float *kq = malloc(sizeof(float) * cache_n), *vq = malloc(sizeof(float) * cache_n);
    uint16_t *kh = malloc(cache_n * 2), *vh = malloc(cache_n * 2);
    uint8_t *k8 = malloc(cb), *v8 = malloc(cb);
    for (size_t i = 0; i < cache_n; i++) {
        kf[i] = frand();
        vf[i] = frand();
        kh[i] = ebb_fp32_to_fp16(kf[i]);
        vh[i] = ebb_fp32_to_fp16(vf[i]);
    }
    kvq8_quantize(kf, cache_n, k8, kq);
    kvq8_quantize(vf, cache_n, v8, vq);
    enum { T = 13 };
    static float qkv[T * QKV_LD], o16[T * NH * HD], o8[T * NH * HD];
    for (int i = 0; i < T * QKV_LD; i++)
        qkv[i] = frand() * 2;
    int max_chunks = (NCTX + tu.att_chunk - 1) / tu.att_chunk;
    struct kvq8_run r = {.p16 = p16,
                         .p8 = p8,
                         .k16 = buf(cache_n * 2, kh),
                         .v16 = buf(cache_n * 2, vh),
                         .k8 = buf(cb, k8),
                         .v8 = buf(cb, v8),
                         .qb = buf(sizeof(qkv), qkv),
                         .ob = buf(sizeof(o8), NULL),
                         .po = buf(sizeof(float) * T * NH * max_chunks * HD, NULL),
                         .pml = buf(sizeof(float) * 2 * T * NH * max_chunks, NULL),
                         .o16 = o16,
                         .o8 = o8};
    float scale = 1.0f / sqrtf(HD);
    cl_ulong kvb = stride;
    int nh = NH, nkv = NKV, one = 1;
    size_t wg = ebb_cl_att_wg(&tu);

    /* Decode: one chunk, a chunk plus one, almost the context; a window over a ring. */
    struct {
        int n_kv, win, ring;
    } cases[] = {{1, 0, NCTX},
                 {(int)tu.att_chunk + 1, 0, NCTX},
                 {NCTX - 3, 0, NCTX},
                 {37, 100, 150},
                 {330, 100, 150}};
    for (size_t li = 0; li < sizeof(cases) / sizeof(cases[0]); li++) {
        int n_kv = cases[li].n_kv, win = cases[li].win, ring = cases[li].ring;
        int first = win_first(n_kv - 1, win), pos = n_kv - 1;
        int nc = (n_kv - first + tu.att_chunk - 1) / tu.att_chunk;
        for (int v = 0; v < 2; v++) {
            cl_mem kcv = v ? r.k8 : r.k16, vcv = v ? r.v8 : r.v16;
            cl_program p = v ? p8 : p16;
            cl_kernel k1 = kern(p, "attn_decode_part"), k2 = kern(p, "attn_decode_reduce");
            struct ebb_cl_arg a[] = {EBB_CL_ARG(r.qb), EBB_CL_ARG(kcv),   EBB_CL_ARG(vcv),
                                     EBB_CL_ARG(kvb),  EBB_CL_ARG(ring),  EBB_CL_ARG(n_kv),
                                     EBB_CL_ARG(nh),   EBB_CL_ARG(nkv),   EBB_CL_ARG(scale),
                                     EBB_CL_ARG(r.po), EBB_CL_ARG(r.pml), EBB_CL_ARG(r.ob),
                                     EBB_CL_ARG(win)};
            struct ebb_cl_arg b[] = {EBB_CL_ARG(r.po), EBB_CL_ARG(r.pml), EBB_CL_ARG(nc),
                                     EBB_CL_ARG(r.ob)};
            OK(ebb_cl_set_args(k1, 0, a, 13, D));
            OK(ebb_cl_set_args(k2, 0, b, 4, D));
            size_t g1[2] = {(size_t)nc * wg, NH / ATT_G_OF(tu)}, l1[2] = {wg, 1};
            size_t ds = ebb_cl_att_red_ds(HD), g2[2] = {ds * 2, NH * HD / ds}, l2[2] = {ds * 2, 1};
            OK(ebb_cl_run(cl, k1, 2, g1, l1, D));
            if (nc > 1)
                OK(ebb_cl_run(cl, k2, 2, g2, l2, D));
            rd(r.ob, sizeof(float) * NH * HD, v ? o8 : o16);
            clReleaseKernel(k1);
            clReleaseKernel(k2);
        }
        kvq8_check(&r, "decode", qkv, kq, vq, &one, &pos, 1, win, ring, scale);
    }

    /* Prefill from position 0 and 290, and through a window of 100 over a ring of 150. */
    struct {
        int pos0, win, ring;
    } pcases[] = {{0, 0, NCTX}, {290, 0, NCTX}, {290, 100, 150}, {1000, 100, 150}};
    for (int pi = 0; pi < 4; pi++) {
        int pos0 = pcases[pi].pos0, win = pcases[pi].win, ring = pcases[pi].ring;
        int ntok = T, ld = QKV_LD, old = NH * HD, r0 = 0, slots[T], pos[T];
        for (int v = 0; v < 2; v++) {
            cl_mem kcv = v ? r.k8 : r.k16, vcv = v ? r.v8 : r.v16;
            cl_kernel k3 = kern(v ? p8 : p16, "attn_prefill");
            struct ebb_cl_arg c[] = {EBB_CL_ARG(r.qb), EBB_CL_ARG(ld),    EBB_CL_ARG(kcv),
                                     EBB_CL_ARG(vcv),  EBB_CL_ARG(kvb),   EBB_CL_ARG(ring),
                                     EBB_CL_ARG(pos0), EBB_CL_ARG(ntok),  EBB_CL_ARG(nh),
                                     EBB_CL_ARG(nkv),  EBB_CL_ARG(scale), EBB_CL_ARG(r.ob),
                                     EBB_CL_ARG(old),  EBB_CL_ARG(r0),    EBB_CL_ARG(win)};
            OK(ebb_cl_set_args(k3, 0, c, 15, D));
            size_t g3[2] = {T, NH}, l3[2] = {tu.att_tq, 1};
            OK(ebb_cl_run(cl, k3, 2, g3, l3, D));
            rd(r.ob, sizeof(o8), v ? o8 : o16);
            clReleaseKernel(k3);
        }
        for (int t = 0; t < T; t++)
            slots[t] = 1, pos[t] = pos0 + t;
        kvq8_check(&r, "prefill", qkv, kq, vq, slots, pos, T, win, ring, scale);
    }

    /* Batched decode rows: slots 1, 0, 1, 0 at positions 0, 37, a chunk plus one, NCTX - 3. */
    enum { ND = 4 };
    int rt[2 * ND] = {1, 0, 0, 37, 1, (int)tu.att_chunk + 1, 0, NCTX - 3}, dr[ND] = {0, 1, 2, 3};
    int slots[ND], pos[ND], max_nc = max_chunks, ld = QKV_LD, old = NH * HD, ctx = NCTX, win = 0;
    cl_ulong slot_stride = stride;
    cl_mem rtb = buf(sizeof(rt), rt), drb = buf(sizeof(dr), dr);
    for (int v = 0; v < 2; v++) {
        cl_mem kcv = v ? r.k8 : r.k16, vcv = v ? r.v8 : r.v16;
        cl_program p = v ? p8 : p16;
        cl_kernel ka = kern(p, "attn_decode_rows"), kb = kern(p, "attn_decode_reduce_rows");
        struct ebb_cl_arg a[] = {EBB_CL_ARG(r.qb),        EBB_CL_ARG(ld),     EBB_CL_ARG(kcv),
                                 EBB_CL_ARG(vcv),         EBB_CL_ARG(rtb),    EBB_CL_ARG(drb),
                                 EBB_CL_ARG(slot_stride), EBB_CL_ARG(ctx),    EBB_CL_ARG(nh),
                                 EBB_CL_ARG(nkv),         EBB_CL_ARG(scale),  EBB_CL_ARG(r.po),
                                 EBB_CL_ARG(r.pml),       EBB_CL_ARG(max_nc), EBB_CL_ARG(r.ob),
                                 EBB_CL_ARG(old),         EBB_CL_ARG(win)};
        struct ebb_cl_arg b[] = {EBB_CL_ARG(r.po), EBB_CL_ARG(r.pml),  EBB_CL_ARG(rtb),
                                 EBB_CL_ARG(drb),  EBB_CL_ARG(max_nc), EBB_CL_ARG(r.ob),
                                 EBB_CL_ARG(old),  EBB_CL_ARG(win)};
        OK(ebb_cl_set_args(ka, 0, a, 17, D));
        OK(ebb_cl_set_args(kb, 0, b, 8, D));
        size_t g1[3] = {(size_t)max_nc * wg, NH / ATT_G_OF(tu), ND}, l1[3] = {wg, 1, 1};
        size_t ds = ebb_cl_att_red_ds(HD);
        size_t g2[3] = {ds * 2, NH * HD / ds, ND}, l2[3] = {ds * 2, 1, 1};
        OK(ebb_cl_run(cl, ka, 3, g1, l1, D));
        OK(ebb_cl_run(cl, kb, 3, g2, l2, D));
        rd(r.ob, sizeof(float) * ND * NH * HD, v ? o8 : o16);
        clReleaseKernel(ka);
        clReleaseKernel(kb);
    }
    for (int t = 0; t < ND; t++)
        slots[t] = rt[2 * t], pos[t] = rt[2 * t + 1];
    kvq8_check(&r, "decode rows", qkv, kq, vq, slots, pos, ND, 0, NCTX, scale);
    printf("  q8_0 KV attention (decode split and reduced, prefill, decode rows; windows, rings; "
           "%u heads a work-group): max abs err %.2e against the blocks' values, %.2e against "
           "the f16 cache (bound %g)\n",
           ATT_G_OF(tu), r.worst_ref, r.worst_f16, KVQ8_TOL);
    cl_mem ms[] = {r.k16, r.v16, r.k8, r.v8, r.qb, r.ob, r.po, r.pml, rtb, drb};
    for (int i = 0; i < 10; i++)
        clReleaseMemObject(ms[i]);
    free(kf), free(vf), free(kq), free(vq), free(kh), free(vh), free(k8), free(v8);
}

/* attn_decode_rope (the fused decode step) on a Q8_0 cache against rope_kv then
 * attn_decode_part: the same blocks for the new token, the same outputs (its key and value
 * taken back from the blocks, as the cache holds them). */
static void test_kvq8_decode_rope(cl_program p)
{
    enum { CTX = 300 };
    size_t cache_n = (size_t)NKV * CTX * HD, cb = cache_n / 32 * 34;
    float *f = malloc(sizeof(float) * cache_n);
    uint8_t *k8 = malloc(cb), *v8 = malloc(cb), *ka = malloc(cb), *kb = malloc(cb);
    uint8_t *va = malloc(cb), *vb = malloc(cb);
    for (size_t i = 0; i < cache_n; i++)
        f[i] = frand();
    kvq8_quantize(f, cache_n, k8, NULL);
    for (size_t i = 0; i < cache_n; i++)
        f[i] = frand();
    kvq8_quantize(f, cache_n, v8, NULL);
    static float qkv[QKV_LD], oa[NH * HD], ob[NH * HD];
    for (int i = 0; i < QKV_LD; i++)
        qkv[i] = frand() * 2;
    int max_nc = (CTX + tu.att_chunk - 1) / tu.att_chunk;
    cl_mem po = buf(sizeof(float) * NH * max_nc * HD, NULL);
    cl_mem pml = buf(sizeof(float) * 2 * NH * max_nc, NULL), obuf = buf(sizeof(oa), NULL);
    cl_kernel kpart = kern(p, "attn_decode_part"), kred = kern(p, "attn_decode_reduce");
    cl_kernel krope = kern(p, "rope_kv"), kfused = kern(p, "attn_decode_rope");
    float scale = 1.0f / sqrtf(HD), fbase = 10000.0f, fs = 1.0f, eps = 1e-6f;
    cl_ulong kvb = 0;
    int nh = NH, nkv = NKV, hd = HD, nrot = HD, neox = 1, ld = QKV_LD, win = 0, ctx = CTX;
    cl_mem no = NULL;
    double worst = 0;
    int lens[] = {1, (int)tu.att_chunk + 1, CTX - 1};
    for (int li = 0; li < 3; li++) {
        int n_kv = lens[li], pos = n_kv - 1;
        int nc = (n_kv + tu.att_chunk - 1) / tu.att_chunk;
        size_t g1[2] = {(size_t)nc * ebb_cl_att_wg(&tu), NH / ATT_G_OF(tu)};
        size_t ds = ebb_cl_att_red_ds(HD);
        size_t l1[2] = {ebb_cl_att_wg(&tu), 1}, g2[2] = {ds, NH * HD / ds}, l2[2] = {ds, 1};
        struct ebb_cl_arg b[] = {EBB_CL_ARG(po), EBB_CL_ARG(pml), EBB_CL_ARG(nc), EBB_CL_ARG(obuf)};
        OK(ebb_cl_set_args(kred, 0, b, 4, D));
        for (int fused = 0; fused < 2; fused++) {
            cl_mem kc = buf(cb, k8), vc = buf(cb, v8), qb = buf(sizeof(qkv), qkv);
            struct ebb_cl_arg a[] = {EBB_CL_ARG(qb),  EBB_CL_ARG(kc),  EBB_CL_ARG(vc),
                                     EBB_CL_ARG(kvb), EBB_CL_ARG(ctx), EBB_CL_ARG(n_kv),
                                     EBB_CL_ARG(nh),  EBB_CL_ARG(nkv), EBB_CL_ARG(scale),
                                     EBB_CL_ARG(po),  EBB_CL_ARG(pml), EBB_CL_ARG(obuf),
                                     EBB_CL_ARG(win)};
            if (fused) {
                struct ebb_cl_arg ar[] = {EBB_CL_ARG(nrot), EBB_CL_ARG(fbase), EBB_CL_ARG(fs),
                                          EBB_CL_ARG(neox), EBB_CL_ARG(no),    EBB_CL_ARG(win),
                                          EBB_CL_ARG(no),   EBB_CL_ARG(no),    EBB_CL_ARG(eps)};
                OK(ebb_cl_set_args(kfused, 0, a, 12, D));
                OK(ebb_cl_set_args(kfused, 12, ar, 9, D));
                OK(ebb_cl_run(cl, kfused, 2, g1, l1, D));
            } else {
                struct ebb_cl_arg r[] = {EBB_CL_ARG(qb),  EBB_CL_ARG(ld),   EBB_CL_ARG(kc),
                                         EBB_CL_ARG(vc),  EBB_CL_ARG(kvb),  EBB_CL_ARG(ctx),
                                         EBB_CL_ARG(pos), EBB_CL_ARG(nh),   EBB_CL_ARG(nkv),
                                         EBB_CL_ARG(hd),  EBB_CL_ARG(nrot), EBB_CL_ARG(fbase),
                                         EBB_CL_ARG(fs),  EBB_CL_ARG(neox), EBB_CL_ARG(no)};
                size_t gr[3] = {HD / 2, NH + NKV, 1};
                OK(ebb_cl_set_args(krope, 0, r, 15, D));
                OK(ebb_cl_run(cl, krope, 3, gr, NULL, D));
                OK(ebb_cl_set_args(kpart, 0, a, 13, D));
                OK(ebb_cl_run(cl, kpart, 2, g1, l1, D));
            }
            if (nc > 1)
                OK(ebb_cl_run(cl, kred, 2, g2, l2, D));
            rd(obuf, sizeof(oa), fused ? ob : oa);
            rd(kc, cb, fused ? kb : ka);
            rd(vc, cb, fused ? vb : va);
            clReleaseMemObject(kc);
            clReleaseMemObject(vc);
            clReleaseMemObject(qb);
        }
        CHECK(!memcmp(ka, kb, cb) && !memcmp(va, vb, cb),
              "q8 attn_decode_rope n_kv %d: cache differs from rope_kv's", n_kv);
        for (int i = 0; i < NH * HD; i++) {
            worst = fmax(worst, fabs(oa[i] - ob[i]));
            CHECK(fabsf(oa[i] - ob[i]) <= 1e-5f, "q8 attn_decode_rope n_kv %d [%d]: %g vs %g", n_kv,
                  i, ob[i], oa[i]);
        }
    }
    printf("  q8_0 KV attn_decode_rope: blocks as rope_kv's, outputs max abs diff %.2e\n", worst);
    clReleaseKernel(kpart);
    clReleaseKernel(kred);
    clReleaseKernel(krope);
    clReleaseKernel(kfused);
    clReleaseMemObject(po);
    clReleaseMemObject(pml);
    clReleaseMemObject(obuf);
    free(f), free(k8), free(v8), free(ka), free(kb), free(va), free(vb);
}

static void test_kvq8(void)
{
    struct ebb_cl_tuning keep = tu;
    cl_program p16, p8;
    /* The device's own tuning, then the GPU shape of decode attention (4 work-items a key,
     * batched loads, work-groups of 128, chunks of 64) with a work-group per GQA group. */
    for (int shape = 0; shape < 2; shape++) {
        tu = keep;
        tu.att_g = shape ? NH / NKV : 1;
        if (shape) {
            tu.mv_cpu = 0;
            tu.att_wg = 128;
            tu.att_chunk = 64;
            tu.att_mma = 1; /* built where the device runs PTX */
        }
        tu.kv_q8 = 0;
        OK(ebb_cl_ops_build(cl, &tu, HD, &p16, D));
        tu.kv_q8 = 1;
        OK(ebb_cl_ops_build(cl, &tu, HD, &p8, D));
        if (!shape) {
            test_kvq8_write(p8, 0);
            test_kvq8_write(p8, 1);
        }
        test_kvq8_attention(p16, p8);
        test_kvq8_decode_rope(p8);
        if (shape)
            test_attention_mma_hd(p8, HD, true);
        clReleaseProgram(p16);
        clReleaseProgram(p8);
    }
    /* The tensor-core prefill for Gemma 3's heads of 256 and those of 128, where built (PTX). */
    for (int hd = 128; hd <= 256 && keep.mv_ptx; hd *= 2) {
        tu = keep;
        tu.att_g = 1;
        tu.att_mma = 1;
        tu.kv_q8 = 1;
        OK(ebb_cl_ops_build(cl, &tu, (uint32_t)hd, &p8, D));
        test_attention_mma_hd(p8, hd, true);
        clReleaseProgram(p8);
    }
    /* A head dimension that is no multiple of 32 is refused by the build. */
    struct ebb_diag d = {{0}};
    CHECK(ebb_cl_ops_build(cl, &tu, 48, &p8, &d) == EBB_EUNSUPPORTED && strstr(d.msg, "q8_0"),
          "q8 KV with head_dim 48: %s", d.msg);
    tu = keep;
}
