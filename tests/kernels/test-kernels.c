/* Every OpenCL kernel against a CPU reference, on whatever OpenCL device exists (PoCL in CI).
 * Exit 77 (skip) only when no OpenCL device exists at all. Shapes are small so the whole run
 * takes seconds on two CPU cores. Weight kernels are checked for every type and every layout
 * the device supports (raw blocks, split planes in buffers, split planes through an
 * image1d_buffer, split planes in image2d objects, also wrapped and packed under lowered image2d
 * limits) against runtime/quant/quant.c's dequantization.
 *
 * Error bounds: dot products are compared with |y - ref| <= 1e-4 * sum_i |w_i x_i| + 1e-6, i.e.
 * relative to the magnitude of the terms (float accumulation in a different order gives
 * ~n * 2^-24 of that); element-wise results within 1e-5 relative; values stored as halves within
 * one half ulp (2^-11 relative). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>

#include "cl/cl-layout.h"
#include "quant/quant.h"

/* The gate activations of act.cl in double: glu 1 SiLU, 2 GELU (tanh). */
static double glu_ref(double v, int glu)
{
    if (glu == 2)
        return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    return v / (1.0 + exp(-v));
}

static int failures;
static struct ebb_cl *cl;
static struct ebb_cl_tuning tu;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define OK(expr)                                                                                   \
    do {                                                                                           \
        struct ebb_diag d_ = {{0}};                                                                \
        ebb_err rc_ = (expr);                                                                      \
        if (rc_) {                                                                                 \
            fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, ebb_err_name(rc_),        \
                    d_.msg);                                                                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define D (&d_)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float frand(void)
{
    return (float)(rnd() % 2000001) / 1000000.0f - 1.0f;
}

static cl_mem buf(size_t n, const void *host)
{
    cl_int e = CL_SUCCESS;
    cl_mem m = clCreateBuffer(cl->ctx, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), n,
                              (void *)host, &e);
    OK(ebb_cl_check(e, D, "clCreateBuffer"));
    return m;
}

static void rd(cl_mem m, size_t n, void *host)
{
    OK(ebb_cl_check(clEnqueueReadBuffer(cl->q, m, CL_TRUE, 0, n, host, 0, NULL, NULL), D, "read"));
}

/* Random rows of a type: quantized from random floats where quant.c can quantize, else random
 * block bytes with the fp16 scale fields set to small sane values. */
static void random_rows(uint32_t type, uint32_t n_out, uint32_t n_in, uint8_t *dst, uint64_t rowb)
{
    float *tmp = malloc(n_in * sizeof(float));
    for (uint32_t o = 0; o < n_out; o++) {
        for (uint32_t i = 0; i < n_in; i++)
            tmp[i] = frand();
        if (ebb_quant_can_quantize(type)) {
            OK(ebb_quant_quantize_row(type, tmp, dst + o * rowb, n_in));
            continue;
        }
        uint8_t *r = dst + o * rowb;
        for (uint64_t b = 0; b < rowb; b++)
            r[b] = (uint8_t)rnd();
        const struct ebb_ggml_type_info *ti = ebb_ggml_type_info(type);
        for (uint64_t b = 0; b < rowb / ti->type_size; b++) {
            uint8_t *blk = r + b * ti->type_size;
            uint16_t d = ebb_fp32_to_fp16(0.001f + 0.01f * (float)(rnd() % 100) / 100.0f);
            uint16_t m = ebb_fp32_to_fp16(0.002f * (float)(rnd() % 100) / 100.0f);
            switch (type) {
            case EBB_GGML_Q5_0:
                memcpy(blk, &d, 2);
                break;
            case EBB_GGML_Q5_1:
            case EBB_GGML_Q4_K:
            case EBB_GGML_Q5_K:
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &m, 2);
                break;
            case EBB_GGML_Q6_K:
                memcpy(blk + 208, &d, 2);
                break;
            default:
                break;
            }
        }
    }
    free(tmp);
}

/* matvec_q8r after quantize_x8_rows (continuous batching's small batches): nt token rows at
 * once, MVR rows per weight read, MVO output rows per warp, each row against the same bound as
 * matvec_q8's plain case, with a residual; row counts below, at and above MVR and not a
 * multiple of it, and the quantization's folds: the RMS norm (nw) and SwiGLU (rows of
 * [gate | up]). */
static void test_matvec_q8r(const char *name, const struct ebb_cl_weight *wt,
                            const struct ebb_cl_wprog *p, const float *w)
{
    uint32_t n_in = wt->n_in, n_out = wt->n_out;
    const uint32_t max_nt = 2 * tu.mvr + 3;
    cl_program ops;
    cl_kernel kq;
    OK(ebb_cl_ops_build(cl, &tu, 64, &ops, D));
    OK(ebb_cl_kernel(ops, "quantize_x8_rows", &kq, D));
    int x_ld = 2 * (int)n_in + 8, y_ld = (int)n_out + 4;
    float *x = malloc(sizeof(float) * max_nt * x_ld), *res = malloc(sizeof(float) * max_nt * y_ld);
    float *y = malloc(sizeof(float) * max_nt * y_ld), *nw = malloc(sizeof(float) * n_in);
    float *xf = malloc(sizeof(float) * n_in);
    for (size_t i = 0; i < (size_t)max_nt * x_ld; i++)
        x[i] = 2.0f * frand();
    for (size_t i = 0; i < (size_t)max_nt * y_ld; i++)
        res[i] = frand();
    for (uint32_t i = 0; i < n_in; i++)
        nw[i] = 0.5f + frand();
    const float eps = 1e-5f;
    cl_mem xb = buf(sizeof(float) * max_nt * x_ld, x), nwb = buf(sizeof(float) * n_in, nw);
    cl_mem yb = buf(sizeof(float) * max_nt * y_ld, NULL);
    cl_mem xq = buf((size_t)max_nt * n_in, NULL);
    cl_mem xd = buf(sizeof(float) * 2 * max_nt * (n_in / 32), NULL);
    /* (rows, fold: 0 none, 1 the norm, 2 SwiGLU) */
    const uint32_t cases[][2] = {{2, 0},      {tu.mvr, 0},     {tu.mvr + 1, 0},
                                 {max_nt, 0}, {tu.mvr + 1, 1}, {3, 2}};
    double worst = 0;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int nt = (int)cases[c][0], fold = (int)cases[c][1], ni = (int)n_in, no = (int)n_out;
        int zero = 0, glu = fold == 2;
        cl_mem nwa = fold == 1 ? nwb : NULL;
        struct ebb_cl_arg qa[] = {EBB_CL_ARG(xb),  EBB_CL_ARG(x_ld), EBB_CL_ARG(ni),
                                  EBB_CL_ARG(xq),  EBB_CL_ARG(xd),   EBB_CL_ARG(nwa),
                                  EBB_CL_ARG(eps), EBB_CL_ARG(glu)};
        size_t qg[2] = {(n_in + EBB_CL_Q8_WG - 1) / EBB_CL_Q8_WG * EBB_CL_Q8_WG, (size_t)nt};
        size_t ql[2] = {EBB_CL_Q8_WG, 1};
        OK(ebb_cl_set_args(kq, 0, qa, 8, D));
        OK(ebb_cl_run(cl, kq, 2, qg, ql, D));
        OK(ebb_cl_check(clEnqueueWriteBuffer(cl->q, yb, CL_TRUE, 0, sizeof(float) * nt * y_ld, res,
                                             0, NULL, NULL),
                        D, "write"));
        struct ebb_cl_arg a[] = {EBB_CL_ARG(ni),   EBB_CL_ARG(no), EBB_CL_ARG(xq),
                                 EBB_CL_ARG(xd),   EBB_CL_ARG(yb), EBB_CL_ARG(y_ld),
                                 EBB_CL_ARG(zero), EBB_CL_ARG(yb), EBB_CL_ARG(nt)};
        OK(ebb_cl_weight_set_args(wt, p->matvec_q8r, 0, D));
        OK(ebb_cl_set_args(p->matvec_q8r, 2, a, 9, D));
        size_t g[2], lw[2], mvo = tu.mvo ? tu.mvo : 1;
        ebb_cl_wkernel_shape(&tu, EBB_CL_WK_MATVEC, n_out, 1, g, lw);
        g[0] = (n_out + mvo - 1) / mvo * tu.mv_wg;
        g[1] = ((size_t)nt + tu.mvr - 1) / tu.mvr;
        OK(ebb_cl_run(cl, p->matvec_q8r, 2, g, lw, D));
        rd(yb, sizeof(float) * nt * y_ld, y);
        for (int t = 0; t < nt; t++) {
            const float *xt = x + (size_t)t * x_ld;
            double ss = 0;
            for (uint32_t i = 0; i < n_in; i++)
                ss += (double)xt[i] * xt[i];
            double inv = 1.0 / sqrt(ss / n_in + eps);
            for (uint32_t i = 0; i < n_in; i++)
                xf[i] = fold == 1   ? (float)(xt[i] * nw[i] * inv)
                        : fold == 2 ? (float)(xt[i] / (1.0 + exp(-(double)xt[i])) * xt[n_in + i])
                                    : xt[i];
            for (uint32_t o = 0; o < n_out; o++) {
                double ref = res[(size_t)t * y_ld + o], mag = fabs(ref), qerr = 0;
                for (uint32_t b = 0; b < n_in / 32; b++) {
                    double amax = 0, wabs = 0;
                    for (uint32_t i = b * 32; i < b * 32 + 32; i++) {
                        double term = (double)w[(size_t)o * n_in + i] * xf[i];
                        ref += term;
                        mag += fabs(term);
                        amax = fmax(amax, fabs(xf[i]));
                        wabs += fabs(w[(size_t)o * n_in + i]);
                    }
                    qerr += wabs * amax / 127.0 * 0.51;
                }
                double bound = qerr + 1e-4 * mag + 1e-6;
                double err = fabs(y[(size_t)t * y_ld + o] - ref);
                if (err / bound > worst)
                    worst = err / bound;
                CHECK(err <= bound,
                      "%s matvec_q8r %d rows fold %d: row %d o %u: %g vs %g (bound %g)", name, nt,
                      fold, t, o, y[(size_t)t * y_ld + o], ref, bound);
            }
        }
    }
    printf("  %-34s q8 rows max err / bound %.2f (2..%u rows, %u per read, %u outputs a warp)\n",
           name, worst, max_nt, tu.mvr, tu.mvo ? tu.mvo : 1);
    free(nw);
    free(xf);
    cl_mem ms[] = {xb, yb, xq, xd, nwb};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
    clReleaseKernel(kq);
    clReleaseProgram(ops);
    free(x);
    free(res);
    free(y);
}

/* The layout and image2d geometry test_weight_layout last placed its weight in. */
static struct ebb_cl_weight last_placed;

/* matvec_q8 after quantize_x8 (the 8-bit input decode path, tuning mv_q8) for weight wt with
 * dequantized rows w: plain, with the RMS norm folded in, and with SwiGLU folded in, each with a
 * residual. The input is rounded to int8 per 32-block, so the result may differ from the exact
 * product by at most sum_i |w_i| * d_b / 2 (d_b = the block's max |x'| / 127, times 1 / rms with
 * the norm): the bound checked, plus the float tolerance above. */
static void test_matvec_q8(const char *name, const struct ebb_cl_weight *wt,
                           const struct ebb_cl_wprog *p, const float *w)
{
    uint32_t n_in = wt->n_in, n_out = wt->n_out;
    cl_program ops;
    cl_kernel kq;
    OK(ebb_cl_ops_build(cl, &tu, 64, &ops, D));
    OK(ebb_cl_kernel(ops, "quantize_x8", &kq, D));
    float *xg = malloc(sizeof(float) * 2 * n_in), *nw = malloc(sizeof(float) * n_in);
    float *res = malloc(sizeof(float) * n_out), *y = malloc(sizeof(float) * n_out);
    float *xp = malloc(sizeof(float) * n_in);
    for (uint32_t i = 0; i < 2 * n_in; i++)
        xg[i] = 2.0f * frand();
    for (uint32_t i = 0; i < n_in; i++)
        nw[i] = 0.5f + frand();
    for (uint32_t o = 0; o < n_out; o++)
        res[o] = frand();
    cl_mem xb = buf(sizeof(float) * 2 * n_in, xg), nwb = buf(sizeof(float) * n_in, nw);
    cl_mem rb = buf(sizeof(float) * n_out, res), yb = buf(sizeof(float) * n_out, NULL);
    cl_mem xq = buf(n_in, NULL), xd = buf(sizeof(float) * 2 * (n_in / 32), NULL);
    const float eps = 1e-5f;
    for (int variant = 0; variant < 4; variant++) { /* 3: GeGLU (glu 2) */
        int glu = variant >= 2 ? variant - 1 : 0, ni = (int)n_in, no = (int)n_out, zero = 0;
        cl_mem nwarg = variant == 1 ? nwb : NULL;
        double inv = 1.0;
        if (variant == 1) {
            double ss = 0;
            for (uint32_t i = 0; i < n_in; i++)
                ss += (double)xg[i] * xg[i];
            inv = 1.0 / sqrt(ss / n_in + eps);
        }
        for (uint32_t i = 0; i < n_in; i++) {
            double v = variant == 1 ? (double)xg[i] * nw[i] : xg[i];
            if (glu)
                v = glu_ref(v, glu) * xg[n_in + i];
            xp[i] = (float)v;
        }
        struct ebb_cl_arg qa[] = {EBB_CL_ARG(xb),  EBB_CL_ARG(ni),  EBB_CL_ARG(nwarg),
                                  EBB_CL_ARG(eps), EBB_CL_ARG(glu), EBB_CL_ARG(xq),
                                  EBB_CL_ARG(xd)};
        size_t qg = (n_in + EBB_CL_Q8_WG - 1) / EBB_CL_Q8_WG * EBB_CL_Q8_WG, ql = EBB_CL_Q8_WG;
        OK(ebb_cl_set_args(kq, 0, qa, 7, D));
        OK(ebb_cl_run(cl, kq, 1, &qg, &ql, D));
        OK(ebb_cl_check(
            clEnqueueWriteBuffer(cl->q, yb, CL_TRUE, 0, sizeof(float) * n_out, res, 0, NULL, NULL),
            D, "write"));
        struct ebb_cl_arg a[] = {EBB_CL_ARG(ni), EBB_CL_ARG(no),   EBB_CL_ARG(xq), EBB_CL_ARG(xd),
                                 EBB_CL_ARG(yb), EBB_CL_ARG(zero), EBB_CL_ARG(yb)};
        OK(ebb_cl_weight_set_args(wt, p->matvec_q8, 0, D));
        OK(ebb_cl_set_args(p->matvec_q8, 2, a, 7, D));
        size_t g[2], lw[2];
        ebb_cl_q8_shape(&tu, n_out, g, lw);
        OK(ebb_cl_run(cl, p->matvec_q8, 2, g, lw, D));
        rd(yb, sizeof(float) * n_out, y);
        double worst = 0;
        for (uint32_t o = 0; o < n_out; o++) {
            double ref = res[o], mag = fabs(ref), qerr = 0;
            for (uint32_t b = 0; b < n_in / 32; b++) {
                double amax = 0, wabs = 0;
                for (uint32_t i = b * 32; i < b * 32 + 32; i++) {
                    double term = (double)w[(size_t)o * n_in + i] * xp[i] * inv;
                    ref += term;
                    mag += fabs(term);
                    amax = fmax(amax, fabs(xp[i]));
                    wabs += fabs(w[(size_t)o * n_in + i]);
                }
                qerr += wabs * amax / 127.0 * 0.51 * inv;
            }
            double bound = qerr + 1e-4 * mag + 1e-6, err = fabs(y[o] - ref);
            if (err / bound > worst)
                worst = err / bound;
            CHECK(err <= bound, "%s matvec_q8 variant %d o %u: %g vs %g (bound %g)", name, variant,
                  o, y[o], ref, bound);
        }
        static const char *const vname[] = {"q8", "q8+norm", "q8+glu", "q8+gelu"};
        printf("  %-34s %-7s max err / bound %.2f\n", name, vname[variant], worst);
    }
    cl_mem ms[] = {xb, nwb, rb, yb, xq, xd};
    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        clReleaseMemObject(ms[i]);
    clReleaseKernel(kq);
    clReleaseProgram(ops);
    free(xg);
    free(nw);
    free(res);
    free(y);
    free(xp);
}

static void test_weight_layout(const struct ebb_cl_layout *l, uint32_t n_out, uint32_t n_in)
{
    char name[64];
    uint64_t rowb = 0;
    OK(ebb_ggml_row_bytes(l->type, n_in, &rowb));
    uint8_t *raw = malloc(rowb * n_out);
    random_rows(l->type, n_out, n_in, raw, rowb);
    float *w = malloc(sizeof(float) * n_in * n_out);
    for (uint32_t o = 0; o < n_out; o++)
        OK(ebb_quant_dequantize_row(l->type, raw + o * rowb, w + (size_t)o * n_in, n_in));

    /* Two sources stacked along O, as the fused QKV / gate+up weights are placed. */
    uint32_t n0 = n_out / 3;
    struct ebb_cl_wsrc src[2] = {{raw, n0}, {raw + n0 * rowb, n_out - n0}};
    struct ebb_cl_weight wt;
    OK(ebb_cl_weight_new(cl, l, n_in, src, 2, NULL, &wt, D));
    /* An image2d layout that does not fit is placed in another one: test what was placed. */
    ebb_cl_layout_name(&wt.layout, name, sizeof(name));
    last_placed = wt;
    if (wt.layout.storage == EBB_CL_STORE_IMAGE2D)
        snprintf(name + strlen(name), sizeof(name) - strlen(name), " %ux%u+%ux%u", wt.i2d[0],
                 wt.i2d[1], wt.i2d[2], wt.i2d[3]);
    struct ebb_cl_wprog p;
    OK(ebb_cl_wprog_build(cl, &wt.layout, &tu, &p, D));

    enum { NT = 5 };
    float *x = malloc(sizeof(float) * NT * n_in), *res = malloc(sizeof(float) * NT * n_out);
    for (uint32_t i = 0; i < NT * n_in; i++)
        x[i] = frand();
    for (uint32_t i = 0; i < NT * n_out; i++)
        res[i] = frand();
    cl_mem xb = buf(sizeof(float) * NT * n_in, x), yb = buf(sizeof(float) * NT * n_out, NULL);
    cl_mem rb = buf(sizeof(float) * NT * n_out, res);
    float *y = malloc(sizeof(float) * NT * n_out);

    /* Norm weights for the folded RMS norm (variant 3). */
    float *nwh = malloc(sizeof(float) * n_in);
    for (uint32_t i = 0; i < n_in; i++)
        nwh[i] = 0.5f + frand();
    cl_mem nwb = buf(sizeof(float) * n_in, nwh);
    const float eps = 1e-5f;
    /* Rows of [gate | up] for the folded SwiGLU (variant 4). */
    float *xg = malloc(sizeof(float) * NT * 2 * n_in);
    for (uint32_t i = 0; i < NT * 2 * n_in; i++)
        xg[i] = 2.0f * frand();
    cl_mem xgb = buf(sizeof(float) * NT * 2 * n_in, xg);
    for (int vi = 0; vi < 14; vi++) {
        if ((vi >= 7 && vi <= 8 && !p.matmul_mma) || (vi >= 10 && !p.matvec_cpu))
            continue;
        /* 10..13: matvec_cpu (CPUs' decode kernel) as variants 0, 1, 3 and 4 */
        bool cpu = vi >= 10;
        int variant = cpu ? (int[]){0, 1, 3, 4}[vi - 10] : vi;
        /* 0: matvec of one token; 1: matvec of NT tokens plus residual; 2: matmul with
         * residual (in place: y aliases the residual); 3: matvec of NT tokens with the RMS norm
         * folded in (x' = x / rms(x) * nw) plus residual; 4: matvec of NT tokens with SwiGLU
         * folded in (x' = silu(gate) * up from rows of [gate | up]) plus residual; 5: the
         * GPUs' prefill kernel matmul_coop, as variant 2; 6: matmul_gemm (64 x 64 tiles, a
         * partial tile of both rows and tokens here), as variant 2; 7: matmul_mma (the same
         * tiles on tensor cores, inputs rounded to f16: bound 2e-3 of the terms' magnitude);
         * 8: matmul_mmb (the same products, reorganised), as 7; 9: variant 4 with GeGLU
         * (x' = gelu_tanh(gate) * up, glu 2). */
        bool tc = variant == 7 || variant == 8;
        bool mm = variant == 2 || (variant >= 5 && variant <= 8);
        double rel = tc ? 2e-3 : 1e-4;
        int nt = variant == 0 ? 1 : NT;
        bool with_res = variant > 0, norm = variant == 3;
        int glu = variant == 4 ? 1 : variant == 9 ? 2 : 0;
        cl_mem yo = mm ? rb : yb, resb = with_res ? rb : NULL;
        cl_mem nwarg = norm ? nwb : NULL;
        if (vi >= 2) /* the matmul variants wrote their results over it */
            OK(ebb_cl_check(clEnqueueWriteBuffer(cl->q, rb, CL_TRUE, 0, sizeof(float) * NT * n_out,
                                                 res, 0, NULL, NULL),
                            D, "write"));
        int ni = (int)n_in, no = (int)n_out, zero = 0, ntok = nt, xld = glu ? 2 * ni : ni;
        cl_mem xin = glu ? xgb : xb;
        cl_kernel k = variant == 2   ? p.matmul
                      : variant == 5 ? p.matmul_coop
                      : variant == 6 ? p.matmul_gemm
                      : variant == 7 ? p.matmul_mma
                      : variant == 8 ? p.matmul_mmb
                      : cpu          ? p.matvec_cpu
                                     : p.matvec;
        OK(ebb_cl_weight_set_args(&wt, k, 0, D));
        struct ebb_cl_arg a[] = {EBB_CL_ARG(ni),   EBB_CL_ARG(no),   EBB_CL_ARG(xin),
                                 EBB_CL_ARG(xld),  EBB_CL_ARG(yo),   EBB_CL_ARG(no),
                                 EBB_CL_ARG(zero), EBB_CL_ARG(resb), EBB_CL_ARG(ntok)};
        struct ebb_cl_arg an[] = {EBB_CL_ARG(nwarg), EBB_CL_ARG(eps), EBB_CL_ARG(glu)};
        OK(ebb_cl_set_args(k, 2, a, mm ? 9 : 8, D));
        if (!mm)
            OK(ebb_cl_set_args(k, 10, an, 3, D));
        size_t g[2], lw[2];
        ebb_cl_wkernel_shape(&tu,
                             variant == 2   ? EBB_CL_WK_MATMUL
                             : variant == 5 ? EBB_CL_WK_COOP
                             : variant == 6 ? EBB_CL_WK_GEMM
                             : tc           ? EBB_CL_WK_MMA
                             : cpu          ? EBB_CL_WK_MVCPU
                                            : EBB_CL_WK_MATVEC,
                             n_out, (uint32_t)nt, g, lw);
        OK(ebb_cl_run(cl, k, 2, g, lw, D));
        rd(yo, sizeof(float) * nt * n_out, y);
        double worst = 0;
        for (int t = 0; t < nt; t++) {
            double inv = 1.0;
            if (norm) {
                double ss = 0;
                for (uint32_t i = 0; i < n_in; i++)
                    ss += (double)x[t * n_in + i] * x[t * n_in + i];
                inv = 1.0 / sqrt(ss / n_in + eps);
            }
            for (uint32_t o = 0; o < n_out; o++) {
                double ref = with_res ? res[t * n_out + o] : 0, mag = fabs(ref);
                for (uint32_t i = 0; i < n_in; i++) {
                    double xi = norm ? x[t * n_in + i] * inv * nwh[i] : x[t * n_in + i];
                    if (glu) {
                        double gt = xg[t * 2 * n_in + i], up = xg[t * 2 * n_in + n_in + i];
                        xi = glu_ref(gt, glu) * up;
                    }
                    double term = (double)w[(size_t)o * n_in + i] * xi;
                    ref += term;
                    mag += fabs(term);
                }
                double err = fabs(y[t * n_out + o] - ref) / (mag + 1e-2);
                if (err > worst)
                    worst = err;
                CHECK(fabs(y[t * n_out + o] - ref) <= rel * mag + 1e-6,
                      "%s variant %d t %d o %u: %g vs %g", name, variant, t, o, y[t * n_out + o],
                      ref);
            }
        }
        static const char *const vname[] = {"matvec",  "mv+res",  "matmul", "mv+norm", "mv+glu",
                                            "mm-coop", "mm-gemm", "mm-mma", "mm-mmb",  "mv+gelu"};
        printf("  %-34s %-7s%s max rel err %.2e\n", name, vname[variant], cpu ? " (cpu)" : "",
               worst);
    }
    clReleaseMemObject(nwb);
    clReleaseMemObject(xgb);
    free(nwh);
    free(xg);
    if (p.matvec_q8)
        test_matvec_q8(name, &wt, &p, w);
    if (p.matvec_q8r)
        test_matvec_q8r(name, &wt, &p, w);

    /* get_rows with a scale, rows picked out of order. */
    int ids[4] = {(int)n_out - 1, 0, (int)n_out / 2, 1};
    cl_mem ib = buf(sizeof(ids), ids), gb = buf(sizeof(float) * 4 * n_in, NULL);
    float scale = 1.5f;
    int ni = (int)n_in;
    OK(ebb_cl_weight_set_args(&wt, p.get_rows, 0, D));
    struct ebb_cl_arg a[] = {EBB_CL_ARG(ni), EBB_CL_ARG(ib), EBB_CL_ARG(gb), EBB_CL_ARG(scale)};
    OK(ebb_cl_set_args(p.get_rows, 2, a, 4, D));
    size_t g[2] = {n_in / 4, 4};
    OK(ebb_cl_run(cl, p.get_rows, 2, g, NULL, D));
    float *gr = malloc(sizeof(float) * 4 * n_in);
    rd(gb, sizeof(float) * 4 * n_in, gr);
    for (int t = 0; t < 4; t++)
        for (uint32_t i = 0; i < n_in; i++) {
            float ref = w[(size_t)ids[t] * n_in + i] * scale;
            CHECK(fabsf(gr[t * n_in + i] - ref) <= 1e-6f * fabsf(ref) + 1e-7f,
                  "%s get_rows t %d i %u: %g vs %g", name, t, i, gr[t * n_in + i], ref);
        }
    free(gr);
    clReleaseMemObject(ib);
    clReleaseMemObject(gb);
    clReleaseMemObject(xb);
    clReleaseMemObject(yb);
    clReleaseMemObject(rb);
    ebb_cl_wprog_fini(&p);
    ebb_cl_weight_fini(&wt);
    free(x);
    free(y);
    free(res);
    free(w);
    free(raw);
}

/* image2d placement under image2d limits lowered by EBB_CL_IMAGE2D_MAX (the device's are far
 * larger than these shapes): 37 rows of 544 inputs (17 blocks, so a row's last scale texel is
 * half used) wrapped over several image rows, packed several rows side by side, and neither
 * possible (then placed in another layout, still checked). */
static void test_image2d_shapes(void)
{
    if (!cl->info.image) {
        printf("  image2d: no image support, skipped\n");
        return;
    }
    static const uint32_t types[] = {EBB_GGML_Q4_0, EBB_GGML_Q4_1, EBB_GGML_Q8_0};
    static const char *const lim[] = {"5", "512,8", "4,8"};
    const uint32_t n_out = 37, n_in = 544;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        for (int k = 0; k < 3; k++) {
            setenv("EBB_CL_IMAGE2D_MAX", lim[k], 1);
            struct ebb_cl_layout l = {types[i], EBB_CL_STORE_IMAGE2D, EBB_CL_ORDER_SPLIT};
            test_weight_layout(&l, n_out, n_in);
            uint32_t tq = n_in / 32 * (types[i] == EBB_GGML_Q8_0 ? 2 : 1);
            const uint32_t *g = last_placed.i2d;
            bool is2d = last_placed.layout.storage == EBB_CL_STORE_IMAGE2D;
            if (k == 0)
                CHECK(is2d && g[0] <= 5 && g[0] < tq && g[1] == n_out * ((tq + g[0] - 1) / g[0]) &&
                          g[2] <= 5 && g[3] == 2 * n_out,
                      "limit %s: not wrapped: %ux%u + %ux%u", lim[k], g[0], g[1], g[2], g[3]);
            else if (k == 1)
                CHECK(is2d && g[0] == 5 * tq && g[1] == 8 && g[2] == 5 * 9 && g[3] == 8,
                      "limit %s: not packed: %ux%u + %ux%u", lim[k], g[0], g[1], g[2], g[3]);
            else
                CHECK(!is2d, "limit %s: placed as image2d %ux%u", lim[k], g[0], g[1]);
            unsetenv("EBB_CL_IMAGE2D_MAX");
        }
}

static void test_mma_tiles(const struct ebb_cl_layout *l, struct ebb_cl_tuning t, uint32_t n_in,
                           bool mms_only);
static void test_k4_split(struct ebb_cl_tuning t);
static void test_k8_split(struct ebb_cl_tuning t, uint32_t type);
/* With it set, test_mma_tiles takes this one tile (tokens, 16-row groups, warps) for matmul_mms,
 * matmul_mmq and matmul_mmql, and no GEMM tile. */
static const uint32_t *mma_one_tile;

static void test_weights(void)
{
    static const uint32_t types[] = {EBB_GGML_F32,  EBB_GGML_F16,  EBB_GGML_BF16, EBB_GGML_Q8_0,
                                     EBB_GGML_Q4_0, EBB_GGML_Q4_1, EBB_GGML_Q5_0, EBB_GGML_Q4_K,
                                     EBB_GGML_Q5_K, EBB_GGML_Q6_K};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        struct ebb_cl_layout ls[4] = {
            {types[i], EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
            {types[i], EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT},
            {types[i], EBB_CL_STORE_IMAGE1D, EBB_CL_ORDER_SPLIT},
            {types[i], EBB_CL_STORE_IMAGE2D, EBB_CL_ORDER_SPLIT},
        };
        for (int j = 0; j < 4; j++)
            if (ebb_cl_layout_fits(&cl->info, &ls[j], 512, 37))
                test_weight_layout(&ls[j], 37, 512);
    }
    test_image2d_shapes();
    /* The other matmul variant (token tile in local memory or read in place) and the other
     * decoder granularity than this device uses, for a 32-block type, a K-quant and a split
     * layout. */
    /* ...and the other row sharing: a GPU's 32 work-items per row (the reductions of matvec and
     * matmul_coop) on a CPU, one per row on a GPU. */
    struct ebb_cl_tuning keep = tu;
    tu.mm_local = !tu.mm_local;
    tu.block_dec = !tu.block_dec;
    tu.mv_wg = tu.mv_wg > 1 ? 1 : 32;
    tu.mv_rows = 2;
    tu.mv_q16 = !tu.mv_q16;   /* a whole 4-bit block per work-item, GPU style, */
    tu.mv_xlocal = tu.mv_q16; /* with x staged in local memory, */
    tu.mv_q8 = tu.mv_q16;     /* and 8-bit inputs for decode (matvec_q8) */
    tu.mm_mma = !tu.mm_mma;   /* prefill tiles on tensor cores (their stand-in on CPUs) */
    tu.mv_flat = !tu.mv_flat; /* and the other reduction, */
    tu.mv_cpu = !tu.mv_cpu;   /* and matvec_cpu where the device's own tuning has none, */
    tu.mv_cpu_r = 8;          /* 8 rows per work-item (37 rows: a partial last one) */
    tu.mvo = 2;               /* matvec_q8r: 2 output rows a warp (37: a partial last pair) */
    printf("  (matmul with MM_LOCAL=%u, block decoders %s, %u work-items per matvec row, "
           "whole-block q4 %u, 8-bit inputs %u, flat reduction %u, matvec_cpu %u x %u rows)\n",
           tu.mm_local, tu.block_dec ? "on" : "off", tu.mv_wg, tu.mv_q16, tu.mv_q8, tu.mv_flat,
           tu.mv_cpu, tu.mv_cpu_r);
    struct ebb_cl_layout other[] = {
        {EBB_GGML_Q4_1, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
        {EBB_GGML_Q6_K, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
        {EBB_GGML_Q8_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT},
        {EBB_GGML_Q4_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
        {EBB_GGML_Q4_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT},
    };
    for (int j = 0; j < 5; j++)
        test_weight_layout(&other[j], 37, 512);
    test_image2d_shapes();
    /* The other reduction of a shared row's partials, on two of them. */
    tu.mv_flat = !tu.mv_flat;
    printf("  (flat reduction %u)\n", tu.mv_flat);
    test_weight_layout(&other[1], 37, 512);
    tu.mvo = 4; /* and 4 output rows a warp (37: one row in the last group) */
    test_weight_layout(&other[3], 37, 512);
    /* matvec_q8 with 3 blocks a lane per step: 100 blocks over 32 lanes, one full step each
     * and a tail of 4. */
    tu.mvu = 3;
    printf("  (matvec_q8: %u blocks a step)\n", tu.mvu);
    test_weight_layout(&other[4], 37, 3200);
    tu = keep;
    /* matvec_cpu with the other row counts per work-item (37 rows: the last one partial). */
    for (uint32_t r = 1; tu.mv_cpu && tu.block_dec && r <= 8; r *= 2) {
        if (r == keep.mv_cpu_r)
            continue;
        tu.mv_cpu_r = r;
        printf("  (matvec_cpu %u rows per work-item)\n", r);
        test_weight_layout(&other[0], 37, 512);
        test_weight_layout(&other[1], 37, 512);
    }
    tu = keep;
    /* 8-bit-input decode of the other raw block types (kq8.cl's matvec_q8, checked by
     * test_matvec_q8 against the dequantized rows) with one work-item per row and with 8
     * (the two-groups-a-step loop, its tail, idle lanes and the row reduction): 544 inputs (17
     * groups, not a multiple of 256) for the 32-block types, 768 (3 super-blocks) for the
     * K-quants, 37 rows; and their matvec_q8r over several token rows (test_matvec_q8r), with
     * 8 work-items a row two output rows a group (37: a partial last pair). */
    static const uint32_t kq_types[] = {EBB_GGML_Q8_0, EBB_GGML_Q5_0, EBB_GGML_Q5_1,
                                        EBB_GGML_Q4_K, EBB_GGML_Q5_K, EBB_GGML_Q6_K};
    static const uint32_t kq_wg[] = {1, 8};
    for (size_t k = 0; k < sizeof(kq_wg) / sizeof(kq_wg[0]); k++) {
        tu = keep;
        tu.mv_q8 = 1;
        tu.kq8 = 1;
        tu.mv_wg = kq_wg[k];
        tu.mv_rows = kq_wg[k] > 1 ? 4 : keep.mv_rows;
        tu.kq8r = 8;
        tu.mvo = kq_wg[k] > 1 ? 2 : 1;
        printf("  (8-bit inputs for the other block types, %u work-items per row, matvec_q8r %u "
               "output rows a group)\n",
               tu.mv_wg, tu.mvo);
        for (size_t i = 0; i < sizeof(kq_types) / sizeof(kq_types[0]); i++) {
            struct ebb_cl_layout l = {kq_types[i], EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
            uint32_t n_in = ebb_ggml_type_info(kq_types[i])->block_size == 256 ? 768 : 544;
            struct ebb_cl_wprog p;
            OK(ebb_cl_wprog_build(cl, &l, &tu, &p, D));
            CHECK(p.matvec_q8 != NULL && p.matvec_q8r != NULL,
                  "kq8: %s has no matvec_q8 or matvec_q8r", ebb_ggml_type_info(kq_types[i])->name);
            ebb_cl_wprog_fini(&p);
            test_weight_layout(&l, 37, n_in);
        }
        /* F16 / BF16 rows eight weights a step (W_RD8), 516 inputs: the last four alone. */
        static const uint32_t h_types[] = {EBB_GGML_F16, EBB_GGML_BF16};
        for (size_t i = 0; i < 2; i++) {
            struct ebb_cl_layout l = {h_types[i], EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
            test_weight_layout(&l, 37, 516);
        }
    }
    tu = keep;
}

/* The tensor-core GEMMs over several tiles (test_mma_tiles). */
static void test_mma(void)
{
    /* The tensor-core GEMMs over several tiles: split 4-bit weights staged from their words
     * (W_Q16: whole-block q4 on, block decoders off), and a K-quant through READ_W4. */
    const struct ebb_cl_layout q41 = {EBB_GGML_Q4_1, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
                               q6k = {EBB_GGML_Q6_K, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
                               q40 = {EBB_GGML_Q4_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
                               q40s = {EBB_GGML_Q4_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT};
    struct ebb_cl_tuning tq = tu;
    tq.mv_q16 = 1;
    tq.block_dec = 0;
    test_mma_tiles(&q40s, tq, 288, false); /* 9 blocks: a partial step of 64 inputs */
    test_mma_tiles(&q6k, tu, 256, false);
    test_mma_tiles(&q40, tq, 288, true); /* matmul_mms on raw Q4_0 (NVIDIA's layout) */
    test_mma_tiles(&q41, tq, 288, true); /* and raw Q4_1 */
    /* and split Q4_1 (on PTX through cp.async): what raw Q4_K becomes for prefill (K4SPLIT) */
    const struct ebb_cl_layout q41s = {EBB_GGML_Q4_1, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT};
    test_mma_tiles(&q41s, tq, 288, true);
    test_k4_split(tq);
    test_k8_split(tq, EBB_GGML_Q6_K); /* and raw Q6_K and Q5_K as a byte a weight (K8SPLIT) */
    test_k8_split(tq, EBB_GGML_Q5_K);
    struct ebb_cl_layout q4k = {EBB_GGML_Q4_K, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    test_mma_tiles(&q4k, tq, 512, true); /* and raw Q4_K: two scales a word */
    struct ebb_cl_layout q80 = {EBB_GGML_Q8_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    /* and raw Q8_0: two words a lane; 9 blocks, so on PTX 2-byte aligned rows staged without
     * cp.async */
    test_mma_tiles(&q80, tq, 288, true);
    test_mma_tiles(&q80, tq, 448, true); /* 14 blocks: rows 4-byte aligned, cp.async (PTX) */
    test_mma_tiles(&q6k, tq, 512, true); /* and raw Q6_K: six bits a byte, a scale a half */
    struct ebb_cl_layout q50 = {EBB_GGML_Q5_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    test_mma_tiles(&q50, tq, 288, true); /* and raw Q5_0: five bits a byte */
    struct ebb_cl_layout q5k = {EBB_GGML_Q5_K, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    test_mma_tiles(&q5k, tq, 512, true); /* and raw Q5_K: five bits a byte, a scale a block */
    /* The K-quants again with steps of 4 blocks (MMQL_TILE_K's default KB): raw Q4_K's cp.async
     * copies two 32-byte chunks a step there (on PTX), the others stage 4 blocks' words. */
    tq.mms_kb = 4;
    test_mma_tiles(&q4k, tq, 512, true);
    test_mma_tiles(&q5k, tq, 512, true);
    test_mma_tiles(&q6k, tq, 512, true);
    /* Raw Q6_K of one super-block a row: on PTX with cp.async, rows alternately 4- and 2-byte
     * aligned (210-byte rows). */
    test_mma_tiles(&q6k, tq, 256, true);
    /* Raw Q8_0 with steps of 4 blocks: 14 blocks, the last step's second pair past n_in (copied
     * as zeros on PTX). */
    test_mma_tiles(&q80, tq, 448, true);
    /* Raw Q6_K on NVIDIA's dense prefill tile for it (MMQL_TILE_K6 128,1,8,4: 128 tokens, 128
     * rows; its staging exactly 48 KiB, through registers): 70 tokens, a partial token tile. */
    static const uint32_t k6_tile[3] = {128, 1, 8};
    mma_one_tile = k6_tile;
    test_mma_tiles(&q6k, tq, 512, true);
    mma_one_tile = NULL;
}

/* mq_i2f and ms_s8f (matmul-mma.cl's exact int-to-float for mq_frag's sums and matmul_mms's
 * byte-wide weights with MMQ_I2F) against the device's own conversions, once: every c in [-2^22,
 * 2^22) and every byte value in every place of a word (kernel mq_i2f_check of the program that
 * holds k). */
static void check_i2f(cl_kernel k)
{
    static bool done;
    cl_program prog = NULL;
    cl_kernel kc = NULL;
    if (done || !k)
        return;
    done = true;
    OK(ebb_cl_check(clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof(prog), &prog, NULL), D,
                    "program"));
    OK(ebb_cl_kernel(prog, "mq_i2f_check", &kc, D));
    int bad = 0, c0 = -(1 << 22);
    cl_mem bb = buf(sizeof(bad), &bad);
    struct ebb_cl_arg a[] = {EBB_CL_ARG(c0), EBB_CL_ARG(bb)};
    OK(ebb_cl_set_args(kc, 0, a, 2, D));
    size_t g[1] = {(size_t)1 << 23}, l[1] = {256};
    OK(ebb_cl_run(cl, kc, 1, g, l, D));
    rd(bb, sizeof(bad), &bad);
    CHECK(bad == 0, "mq_i2f / ms_s8f: %d values differ from the conversions", bad);
    printf("  mq_i2f, ms_s8f equal to the conversions (every c in [-2^22, 2^22), every byte): %s\n",
           bad ? "no" : "yes");
    clReleaseMemObject(bb);
    clReleaseKernel(kc);
}

/* mmq_quantize_norm and mmq_quantize_glu (program p's mmq_quant_nw / mmq_quant_glu) on x
 * (ntok rows of n_in, in xb): the first on the rows RMS-normed and scaled by a weight, the second
 * (where n_in / 32 is even) on the SwiGLU of each row's halves (k 1), both against the host's norm
 * or gate (in doubles) and q8.cl's rounding: one step off at most (the device sums the squares and
 * rounds the exponential in another order), the scales within 1e-5. */
static void check_mmq_fold(const struct ebb_cl_wprog *p, const float *x, cl_mem xb, uint32_t n_in,
                           uint32_t ntok, const char *name)
{
    CHECK(p->mmq_quant_nw && p->mmq_quant_glu, "%s: no mmq_quantize_norm / _glu", name);
    if (!p->mmq_quant_nw || !p->mmq_quant_glu)
        return;
    size_t nq = (size_t)ntok * n_in, nh = nq / 32;
    float *nw = malloc(sizeof(float) * n_in), *v = malloc(sizeof(float) * nq);
    float *xh = malloc(sizeof(float) * 2 * nh);
    int8_t *xq = malloc(nq);
    for (uint32_t i = 0; i < n_in; i++)
        nw[i] = 0.5f + 0.1f * (float)(i % 7);
    cl_mem qb = buf(nq, NULL), hb = buf(sizeof(float) * 2 * nh, NULL), wb = buf(4 * n_in, nw);
    int ni = (int)n_in, one = 1, off = 0, moved = 0, seen = 0;
    float eps = 1e-5f;
    for (int glu = 0; glu < 2; glu++) {
        int n = glu ? ni / 2 : ni;
        if (glu && (n_in / 32) % 2)
            break;
        struct ebb_cl_arg an[] = {EBB_CL_ARG(xb),  EBB_CL_ARG(ni), EBB_CL_ARG(n), EBB_CL_ARG(wb),
                                  EBB_CL_ARG(eps), EBB_CL_ARG(qb), EBB_CL_ARG(hb)};
        struct ebb_cl_arg ag[] = {EBB_CL_ARG(xb),  EBB_CL_ARG(ni), EBB_CL_ARG(n),
                                  EBB_CL_ARG(one), EBB_CL_ARG(qb), EBB_CL_ARG(hb)};
        cl_kernel k = glu ? p->mmq_quant_glu : p->mmq_quant_nw;
        OK(glu ? ebb_cl_set_args(k, 0, ag, 6, D) : ebb_cl_set_args(k, 0, an, 7, D));
        size_t g[2], l[2];
        ebb_cl_mmq_quantize_shape((uint32_t)n, ntok, g, l);
        OK(ebb_cl_run(cl, k, 2, g, l, D));
        rd(qb, (size_t)ntok * n, xq);
        rd(hb, sizeof(float) * 2 * ntok * (n / 32), xh);
        for (uint32_t tk = 0; tk < ntok; tk++) {
            const float *r = x + (size_t)tk * n_in;
            double ss = 0;
            for (int i = 0; i < ni; i++)
                ss += (double)r[i] * r[i];
            for (int i = 0; i < n; i++) {
                double g2 = r[i];
                v[i] = glu ? (float)(g2 / (1.0 + exp(-g2)) * r[n + i])
                           : (float)(r[i] / sqrt(ss / ni + eps) * nw[i]);
            }
            for (int b = 0; b < n / 32; b++) {
                float amax = 0.0f;
                for (int i = 0; i < 32; i++)
                    amax = fmaxf(amax, fabsf(v[32 * b + i]));
                float d = amax / 127.0f;
                size_t hi = (size_t)tk * (n / 32) + b;
                for (int i = 0; i < 32; i++) {
                    int e = d > 0.0f ? (int)rintf(v[32 * b + i] / d) : 0;
                    int q = xq[(size_t)tk * n + 32 * b + i];
                    moved += e != q;
                    seen++;
                    CHECK(abs(e - q) <= 1, "%s mmq_quantize_%s t %u i %d: %d vs %d", name,
                          glu ? "glu" : "norm", tk, 32 * b + i, q, e);
                }
                CHECK(fabsf(xh[2 * hi] - d) <= 1e-5f * d,
                      "%s mmq_quantize_%s t %u block %d: %g vs %g", name, glu ? "glu" : "norm", tk,
                      b, xh[2 * hi], d);
            }
        }
        off++;
    }
    printf("  %-34s mmq_quantize_norm%s: %d of %d values one step off the host's\n", name,
           off > 1 ? ", _glu" : "", moved, seen);
    clReleaseMemObject(qb);
    clReleaseMemObject(hb);
    clReleaseMemObject(wb);
    free(nw);
    free(v);
    free(xh);
    free(xq);
}

/* mmq_quantize_res and mmq_quantize_norm_res (MMQ_RES's two passes, program p's mmq_quant_r /
 * mmq_quant_nw_r) on x (ntok rows of n_in, in xb), against the host's rows (x itself, or RMS-normed
 * times a weight in doubles): the first pass as mmq_quantize rounds (one step off at most), each
 * block's second scale at most 1/254 of its first, and the two passes together (d1 q1 + d2 q2)
 * within half a second-pass step of the value (plus 1e-5 of the block's largest magnitude for the
 * norm's float sums). */
static void check_mmq_res(const struct ebb_cl_wprog *p, const float *x, cl_mem xb, uint32_t n_in,
                          uint32_t ntok, const char *name)
{
    CHECK(p->mmq_quant_r && p->mmq_quant_nw_r, "%s: no mmq_quantize_res / _norm_res", name);
    if (!p->mmq_quant_r || !p->mmq_quant_nw_r)
        return;
    size_t nq = (size_t)ntok * n_in, nh = nq / 32;
    float *nw = malloc(sizeof(float) * n_in), *v = malloc(sizeof(float) * n_in);
    float *h1 = malloc(sizeof(float) * 2 * nh), *h2 = malloc(sizeof(float) * 2 * nh);
    int8_t *q1 = malloc(nq), *q2 = malloc(nq);
    for (uint32_t i = 0; i < n_in; i++)
        nw[i] = 0.5f + 0.1f * (float)(i % 7);
    cl_mem wb = buf(4 * n_in, nw), qb1 = buf(nq, NULL), qb2 = buf(nq, NULL);
    cl_mem hb1 = buf(sizeof(float) * 2 * nh, NULL), hb2 = buf(sizeof(float) * 2 * nh, NULL);
    int ni = (int)n_in, moved = 0;
    float eps = 1e-5f;
    double worst = 0; /* the largest error of the two passes, in second-pass steps */
    for (int norm = 0; norm < 2; norm++) {
        struct ebb_cl_arg ap[] = {EBB_CL_ARG(xb),  EBB_CL_ARG(ni),  EBB_CL_ARG(ni), EBB_CL_ARG(qb1),
                                  EBB_CL_ARG(hb1), EBB_CL_ARG(qb2), EBB_CL_ARG(hb2)};
        struct ebb_cl_arg an[] = {EBB_CL_ARG(xb),  EBB_CL_ARG(ni),  EBB_CL_ARG(ni),
                                  EBB_CL_ARG(wb),  EBB_CL_ARG(eps), EBB_CL_ARG(qb1),
                                  EBB_CL_ARG(hb1), EBB_CL_ARG(qb2), EBB_CL_ARG(hb2)};
        cl_kernel k = norm ? p->mmq_quant_nw_r : p->mmq_quant_r;
        OK(norm ? ebb_cl_set_args(k, 0, an, 9, D) : ebb_cl_set_args(k, 0, ap, 7, D));
        size_t g[2], l[2];
        ebb_cl_mmq_quantize_shape(n_in, ntok, g, l);
        OK(ebb_cl_run(cl, k, 2, g, l, D));
        rd(qb1, nq, q1);
        rd(qb2, nq, q2);
        rd(hb1, sizeof(float) * 2 * nh, h1);
        rd(hb2, sizeof(float) * 2 * nh, h2);
        const char *kn = norm ? "mmq_quantize_norm_res" : "mmq_quantize_res";
        for (uint32_t tk = 0; tk < ntok; tk++) {
            const float *r = x + (size_t)tk * n_in;
            double ss = 0;
            for (uint32_t i = 0; i < n_in; i++)
                ss += (double)r[i] * r[i];
            for (uint32_t i = 0; i < n_in; i++)
                v[i] = norm ? (float)(r[i] / sqrt(ss / ni + eps) * nw[i]) : r[i];
            for (uint32_t b = 0; b < n_in / 32; b++) {
                float amax = 0.0f;
                for (int i = 0; i < 32; i++)
                    amax = fmaxf(amax, fabsf(v[32 * b + i]));
                size_t hi = (size_t)tk * (n_in / 32) + b;
                float d = amax / 127.0f, d1 = h1[2 * hi], d2 = h2[2 * hi];
                CHECK(fabsf(d1 - d) <= 1e-5f * d, "%s %s t %u block %u: first scale %g vs %g", name,
                      kn, tk, b, d1, d);
                CHECK(d2 <= d1 / 254.0f * 1.001f, "%s %s t %u block %u: second scale %g of %g",
                      name, kn, tk, b, d2, d1);
                for (int i = 0; i < 32; i++) {
                    size_t at = (size_t)tk * n_in + 32 * b + i;
                    int e = d > 0.0f ? (int)rintf(v[32 * b + i] / d) : 0;
                    moved += e != q1[at];
                    CHECK(abs(e - q1[at]) <= 1, "%s %s t %u i %u: %d vs %d", name, kn, tk,
                          32 * b + i, q1[at], e);
                    double got = (double)d1 * q1[at] + (double)d2 * q2[at];
                    double err = fabs(got - v[32 * b + i]), lim = 0.5 * d2 + 1e-5 * amax;
                    CHECK(err <= lim + 1e-30, "%s %s t %u i %u: %g from %g (limit %g)", name, kn,
                          tk, 32 * b + i, got, v[32 * b + i], lim);
                    if (d2 > 0.0f && err / d2 > worst)
                        worst = err / d2;
                }
            }
        }
    }
    printf("  %-34s mmq_quantize_res, _norm_res: %d first-pass values one step off the host's, "
           "two passes within %.2f of a second step\n",
           name, moved, worst);
    clReleaseMemObject(wb);
    clReleaseMemObject(qb1);
    clReleaseMemObject(qb2);
    clReleaseMemObject(hb1);
    clReleaseMemObject(hb2);
    free(nw);
    free(v);
    free(h1);
    free(h2);
    free(q1);
    free(q2);
}

/* matmul_mmq and matmul_mmql (program p, built with tuning t's mms_* tile) on x (NTOK rows of n_in,
 * in xb) and weight wt (n_out rows, w its rows dequantized), the residual res added in place
 * through rb: mmq_quantize's int8 blocks against the host's rounding of the same inputs (q8.cl's: d
 * = max |x| / 127, round to nearest even; one step off at most where the device divides
 * differently), and the products against sums over the quantized inputs in doubles (within float
 * rounding: 1e-5 of the terms' magnitude), then against the float inputs (the int8 rounding: 2e-2).
 */
static void check_mmq(const struct ebb_cl_weight *wt, const struct ebb_cl_wprog *p,
                      const struct ebb_cl_tuning *t, const float *w, const float *x,
                      const float *res, cl_mem xb, cl_mem rb, uint32_t n_in, uint32_t n_out,
                      uint32_t ntok, const char *name)
{
    size_t nq = (size_t)ntok * n_in, nh = nq / 32;
    cl_mem qb = buf(nq, NULL), hb = buf(sizeof(float) * 2 * nh, NULL);
    int ni = (int)n_in, no = (int)n_out, nt = (int)ntok, zero = 0;
    struct ebb_cl_arg aq[] = {EBB_CL_ARG(xb), EBB_CL_ARG(ni), EBB_CL_ARG(ni), EBB_CL_ARG(qb),
                              EBB_CL_ARG(hb)};
    OK(ebb_cl_set_args(p->mmq_quantize, 0, aq, 5, D));
    size_t gq[2], lq[2];
    ebb_cl_mmq_quantize_shape(n_in, ntok, gq, lq);
    OK(ebb_cl_run(cl, p->mmq_quantize, 2, gq, lq, D));
    int8_t *xq = malloc(nq);
    float *xh = malloc(sizeof(float) * 2 * nh), *y = malloc(sizeof(float) * ntok * n_out);
    rd(qb, nq, xq);
    rd(hb, sizeof(float) * 2 * nh, xh);
    for (uint32_t tk = 0; tk < ntok; tk++)
        for (uint32_t b = 0; b < n_in / 32; b++) {
            const float *v = x + (size_t)tk * n_in + 32 * b;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++)
                amax = fmaxf(amax, fabsf(v[i]));
            float d = amax / 127.0f;
            size_t hi = (size_t)tk * (n_in / 32) + b;
            long s = 0;
            for (int i = 0; i < 32; i++) {
                int e = d > 0.0f ? (int)rintf(v[i] / d) : 0, g = xq[(size_t)tk * n_in + 32 * b + i];
                CHECK(abs(e - g) <= 1, "%s mmq_quantize t %u i %u: %d vs %d", name, tk, 32 * b + i,
                      g, e);
                s += g;
            }
            CHECK(fabsf(xh[2 * hi] - d) <= 1e-6f * d &&
                      fabsf(xh[2 * hi + 1] - d * (float)s) <= 1e-5f * d * (float)labs(s) + 1e-30f,
                  "%s mmq_quantize t %u block %u: (%g, %g) vs (%g, %g)", name, tk, b, xh[2 * hi],
                  xh[2 * hi + 1], d, d * (float)s);
        }
    check_i2f(p->matmul_mmq);
    check_mmq_fold(p, x, xb, n_in, ntok, name);
    check_mmq_res(p, x, xb, n_in, ntok, name);
    /* matmul_mmq, then matmul_mmql (where its staging fits) whole and split into NZ slices of
     * its inputs (a batch's split products, MMQS_SPLIT; n_in of 8 or 9 blocks gives slices of
     * unequal steps), on the same inputs. The split run goes twice: the same bits both times
     * (the slices are added in order, whichever ends last), and every tile's count back at 0. */
    enum { NZ = 3 };
    size_t n_tiles = 0;
    cl_mem pb = buf(sizeof(float) * NZ * ntok * n_out, NULL), cb = NULL;
    float *y1 = malloc(sizeof(float) * ntok * n_out);
    for (int v = 0; v < 4; v++) {
        cl_kernel k = v ? p->matmul_mmql : p->matmul_mmq;
        const char *kn = v == 0 ? "matmul_mmq" : v == 1 ? "matmul_mmql" : "matmul_mmql/3";
        if (!k)
            continue;
        OK(ebb_cl_check(clEnqueueWriteBuffer(cl->q, rb, CL_TRUE, 0, sizeof(float) * ntok * n_out,
                                             res, 0, NULL, NULL),
                        D, "write"));
        struct ebb_cl_arg a[] = {EBB_CL_ARG(ni),   EBB_CL_ARG(no), EBB_CL_ARG(qb),
                                 EBB_CL_ARG(hb),   EBB_CL_ARG(rb), EBB_CL_ARG(no),
                                 EBB_CL_ARG(zero), EBB_CL_ARG(rb), EBB_CL_ARG(nt)};
        OK(ebb_cl_weight_set_args(wt, k, 0, D));
        OK(ebb_cl_set_args(k, 2, a, 9, D));
        size_t g[3], lw[3] = {0, 1, 1};
        ebb_cl_wkernel_shape(t, v ? EBB_CL_WK_MMQLS : EBB_CL_WK_MMQS, n_out, ntok, g, lw);
        g[2] = v >= 2 ? NZ : 1;
        if (v >= 2 && !cb) {
            n_tiles = g[0] / lw[0] * g[1];
            int *z = calloc(n_tiles, sizeof(int));
            cb = buf(sizeof(int) * n_tiles, z);
            free(z);
        }
        if (v) {
            cl_mem pa = v >= 2 ? pb : NULL, ca = v >= 2 ? cb : NULL;
            struct ebb_cl_arg az[] = {EBB_CL_ARG(pa), EBB_CL_ARG(ca)};
            OK(ebb_cl_set_args(k, 11, az, 2, D));
        }
        OK(ebb_cl_run(cl, k, v ? 3 : 2, g, lw, D));
        rd(rb, sizeof(float) * ntok * n_out, y);
        if (v == 2)
            memcpy(y1, y, sizeof(float) * ntok * n_out);
        if (v == 3) {
            CHECK(!memcmp(y1, y, sizeof(float) * ntok * n_out),
                  "%s matmul_mmql in %d slices: two runs differ", name, NZ);
            int *z = malloc(sizeof(int) * n_tiles);
            rd(cb, sizeof(int) * n_tiles, z);
            size_t nz = 0;
            for (size_t i = 0; i < n_tiles; i++)
                nz += z[i] != 0;
            CHECK(nz == 0, "%s matmul_mmql in %d slices: %zu of %zu tile counts not reset", name,
                  NZ, nz, n_tiles);
            free(z);
            continue;
        }
        double worst = 0, worst_f = 0;
        for (uint32_t tk = 0; tk < ntok; tk++)
            for (uint32_t o = 0; o < n_out; o++) {
                double ref = res[tk * n_out + o], mag = fabs(ref), reff = ref;
                for (uint32_t i = 0; i < n_in; i++) {
                    double xd = (double)xq[(size_t)tk * n_in + i] *
                                xh[2 * ((size_t)tk * (n_in / 32) + i / 32)];
                    double term = (double)w[(size_t)o * n_in + i] * xd;
                    ref += term;
                    mag += fabs(term);
                    reff += (double)w[(size_t)o * n_in + i] * x[(size_t)tk * n_in + i];
                }
                double got = y[tk * n_out + o], err = fabs(got - ref), errf = fabs(got - reff);
                worst = fmax(worst, err / (mag + 1e-2));
                worst_f = fmax(worst_f, errf / (mag + 1e-2));
                CHECK(err <= 1e-5 * mag + 1e-6, "%s %s t %u o %u: %g vs %g (int8 inputs)", name, kn,
                      tk, o, got, ref);
                CHECK(errf <= 2e-2 * mag + 1e-6, "%s %s t %u o %u: %g vs %g (float inputs)", name,
                      kn, tk, o, got, reff);
            }
        printf("  %-34s %-11s %3ux%-3ux%-3u %u tokens max rel err %.2e (%.2e to float inputs)\n",
               name, kn, 16 * t->mms_mi * (v ? t->mms_w : 1), t->mms_t, t->mms_w, ntok, worst,
               worst_f);
    }
    clReleaseMemObject(qb);
    clReleaseMemObject(hb);
    clReleaseMemObject(pb);
    if (cb)
        clReleaseMemObject(cb);
    free(xq);
    free(xh);
    free(y);
    free(y1);
}

/* The tensor-core GEMMs (matmul_mma, matmul_mmb) and the small-batch matmul_mms (only it with
 * mms_only) over several tiles of rows and tokens, partial ones at both ends and n_in inputs (8 or
 * 9 blocks), with each tile shape: residual added in place, inputs rounded to f16 (bound 2e-3 of
 * the terms' magnitude). On CPUs this runs their stand-in.
 * Each distinct program costs PoCL a front-end compile (about 2 s of CPU, the sources and its
 * kernel library), so one program carries a GEMM tile and a matmul_mms tile at once (the
 * kernels read only their own MA_* or MS_* defines), and matmul_mmq's prefill tile is set to
 * matmul_mms's so that the wprog's extra tile program is the main program again (a cache hit;
 * the test runs matmul_mmq with the MS_* tile, never the prefill one). */
static void test_mma_tiles(const struct ebb_cl_layout *l, struct ebb_cl_tuning t, uint32_t n_in,
                           bool mms_only)
{
    enum { N_OUT = 200, NTOK = 70, N_IN_MAX = 512 };
    const uint32_t n_in_ = n_in < N_IN_MAX ? n_in : N_IN_MAX;
#define N_IN n_in_
    uint64_t rowb = 0;
    OK(ebb_ggml_row_bytes(l->type, N_IN, &rowb));
    uint8_t *raw = malloc(rowb * N_OUT);
    random_rows(l->type, N_OUT, N_IN, raw, rowb);
    float *w = malloc(sizeof(float) * N_IN * N_OUT), *x = malloc(sizeof(float) * NTOK * N_IN);
    float *res = malloc(sizeof(float) * NTOK * N_OUT), *y = malloc(sizeof(float) * NTOK * N_OUT);
    for (uint32_t o = 0; o < N_OUT; o++)
        OK(ebb_quant_dequantize_row(l->type, raw + o * rowb, w + (size_t)o * N_IN, N_IN));
    for (uint32_t i = 0; i < NTOK * N_IN; i++)
        x[i] = frand();
    for (uint32_t i = 0; i < NTOK * N_OUT; i++)
        res[i] = frand();
    struct ebb_cl_wsrc src[1] = {{raw, N_OUT}};
    struct ebb_cl_weight wt;
    OK(ebb_cl_weight_new(cl, l, N_IN, src, 1, NULL, &wt, D));
    char name[64];
    ebb_cl_layout_name(&wt.layout, name, sizeof(name));
    static const uint32_t shapes[][3] = {{64, 64, 32}, {128, 64, 32}, {64, 128, 32}, {128, 128, 32},
                                         {64, 32, 32}, {64, 64, 64},  {128, 64, 64}};
    cl_mem xb = buf(sizeof(float) * NTOK * N_IN, x), rb = buf(sizeof(float) * NTOK * N_OUT, NULL);
    /* matmul_mms's tiles after the GEMMs' (shapes index 7..): tokens, 16-row groups. */
    static const uint32_t ms_shapes[][3] = {{32, 1, 8}, {16, 1, 32}, {8, 1, 4},
                                            {16, 2, 8}, {32, 4, 4},  {64, 1, 1}};
    const size_t n_shapes = sizeof(shapes) / sizeof(shapes[0]);
    const size_t n_ms = sizeof(ms_shapes) / sizeof(ms_shapes[0]);
    /* Program si: GEMM tile si (unless mms_only) and matmul_mms tile si, where there are. */
    bool has_mms = true;
    /* EBB_KT_TYPES=q4_k,q8_0 (by hand, as EBB_KT_ONLY): only these weight types' tiles. */
    const char *types = getenv("EBB_KT_TYPES");
    if (types) {
        char tl[64], tn[16];
        size_t k = 0;
        for (; types[k] && k < sizeof(tl) - 1; k++)
            tl[k] = (char)tolower((unsigned char)types[k]);
        tl[k] = 0;
        for (k = 0; name[k] && name[k] != '/' && k < sizeof(tn) - 1; k++)
            tn[k] = (char)tolower((unsigned char)name[k]);
        tn[k] = 0;
        if (!strstr(tl, tn))
            n_in = 0; /* no program below */
    }
    for (size_t si = 0; n_in && si < (mma_one_tile ? 1 : mms_only ? 2 : n_shapes); si++) {
        /* the layout's words: two matmul_mms tiles suffice */
        bool mma = !mms_only && !mma_one_tile, ms = has_mms && si < n_ms;
        if (!mma && !ms)
            break;
        if (ms) {
            const uint32_t *sh = mma_one_tile ? mma_one_tile : ms_shapes[si];
            t.mms_t = sh[0];
            t.mms_mi = sh[1];
            t.mms_w = sh[2];
            t.mmq_t = t.mms_t;
            t.mmq_mi = t.mms_mi;
            t.mmq_w = t.mms_w;
            t.mmq_kb = t.mms_kb;
        }
        t.mm_mma = 1;
        t.mmq = ms;
        if (mma) {
            t.mma_r = shapes[si][0];
            t.mma_t = shapes[si][1];
            t.mma_k = shapes[si][2];
        }
        struct ebb_cl_wprog p;
        OK(ebb_cl_wprog_build(cl, &wt.layout, &t, &p, D));
        if (ms && !p.matmul_mms) /* matmul_mms is built for 4-bit layouts with W_Q16 */
            has_mms = ms = false;
        for (int v = mma ? 0 : 2; v < (ms ? 3 : 2); v++) {
            cl_kernel k = v == 2 ? p.matmul_mms : v ? p.matmul_mmb : p.matmul_mma;
            const char *kn = v == 2 ? "matmul_mms" : v ? "matmul_mmb" : "matmul_mma";
            uint32_t sr = v == 2 ? 16 * t.mms_mi : t.mma_r, st = v == 2 ? t.mms_t : t.mma_t,
                     sk = v == 2 ? t.mms_w : t.mma_k;
            OK(ebb_cl_check(clEnqueueWriteBuffer(cl->q, rb, CL_TRUE, 0,
                                                 sizeof(float) * NTOK * N_OUT, res, 0, NULL, NULL),
                            D, "write"));
            int ni = N_IN, no = N_OUT, zero = 0, nt = NTOK;
            struct ebb_cl_arg a[] = {EBB_CL_ARG(ni),   EBB_CL_ARG(no), EBB_CL_ARG(xb),
                                     EBB_CL_ARG(ni),   EBB_CL_ARG(rb), EBB_CL_ARG(no),
                                     EBB_CL_ARG(zero), EBB_CL_ARG(rb), EBB_CL_ARG(nt)};
            OK(ebb_cl_weight_set_args(&wt, k, 0, D));
            OK(ebb_cl_set_args(k, 2, a, 9, D));
            size_t g[2], lw[2];
            ebb_cl_wkernel_shape(&t, v == 2 ? EBB_CL_WK_MMS : EBB_CL_WK_MMA, N_OUT, NTOK, g, lw);
            OK(ebb_cl_run(cl, k, 2, g, lw, D));
            rd(rb, sizeof(float) * NTOK * N_OUT, y);
            double worst = 0;
            for (int tk = 0; tk < NTOK; tk++)
                for (uint32_t o = 0; o < N_OUT; o++) {
                    double ref = res[tk * N_OUT + o], mag = fabs(ref);
                    for (uint32_t i = 0; i < N_IN; i++) {
                        double term = (double)w[(size_t)o * N_IN + i] * x[tk * N_IN + i];
                        ref += term;
                        mag += fabs(term);
                    }
                    double err = fabs(y[tk * N_OUT + o] - ref);
                    worst = fmax(worst, err / (mag + 1e-2));
                    CHECK(err <= 2e-3 * mag + 1e-6, "%s %s %ux%ux%u t %d o %u: %g vs %g", name, kn,
                          sr, st, sk, tk, o, y[tk * N_OUT + o], ref);
                }
            printf("  %-34s %s %3ux%-3ux%-3u %d tokens max rel err %.2e\n", name, kn, sr, st, sk,
                   NTOK, worst);
        }
        if (ms) {
            CHECK(p.matmul_mmq && p.mmq_quantize, "%s: no matmul_mmq with matmul_mms", name);
            if (p.matmul_mmq)
                check_mmq(&wt, &p, &t, w, x, res, xb, rb, N_IN, N_OUT, NTOK, name);
        }
        ebb_cl_wprog_fini(&p);
    }
    clReleaseMemObject(xb);
    clReleaseMemObject(rb);
    ebb_cl_weight_fini(&wt);
    free(raw);
    free(w);
    free(x);
    free(res);
    free(y);
#undef N_IN
}

/* The inputs of the rewrite checks below: n_out random rows of n_in inputs of type (raw, rowb
 * bytes a row), dequantized (w), ntok rows of inputs (x) and a residual (res). */
struct kcase {
    uint8_t *raw;
    uint64_t rowb;
    float *w, *x, *res;
};

static void kcase_init(struct kcase *c, uint32_t type, uint32_t n_out, uint32_t n_in, uint32_t ntok)
{
    OK(ebb_ggml_row_bytes(type, n_in, &c->rowb));
    c->raw = malloc(c->rowb * n_out);
    c->w = malloc(sizeof(float) * n_in * n_out);
    c->x = malloc(sizeof(float) * ntok * n_in);
    c->res = malloc(sizeof(float) * ntok * n_out);
    random_rows(type, n_out, n_in, c->raw, c->rowb);
    for (uint32_t o = 0; o < n_out; o++)
        OK(ebb_quant_dequantize_row(type, c->raw + o * c->rowb, c->w + (size_t)o * n_in, n_in));
    for (uint32_t i = 0; i < ntok * n_in; i++)
        c->x[i] = frand();
    for (uint32_t i = 0; i < ntok * n_out; i++)
        c->res[i] = frand();
}

static void kcase_fini(struct kcase *c)
{
    free(c->raw);
    free(c->w);
    free(c->x);
    free(c->res);
}

/* K4SPLIT (t: the tuning of test_mma, with k4split on): k4_split's planes of a raw Q4_K weight
 * of 200 rows of 768 inputs (3 super-blocks) against the host's own reading of the same bytes,
 * exactly (16 quant bytes in Q4_1's order and (d sc, -dmin m) as floats a block); the planes
 * dequantized as Q4_1 equal to the Q4_K rows; and matmul_mmql of the split Q4_1 program on
 * those planes (check_mmq, with the Q4_K rows as the weights). */
static void test_k4_split(struct ebb_cl_tuning t)
{
    enum { N_OUT = 200, N_IN = 768, NTOK = 70, NB = N_OUT * N_IN / 32 };
    const struct ebb_cl_layout l = {EBB_GGML_Q4_K, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
                               ls = {EBB_GGML_Q4_1, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT};
    t.mm_mma = 1;
    t.mmq = t.mmq ? t.mmq : 32;
    t.mmq_stage = 1;
    t.k4split = 1;
    struct kcase c;
    kcase_init(&c, l.type, N_OUT, N_IN, NTOK);
    const uint8_t *raw = c.raw;
    const uint64_t rowb = c.rowb;
    const float *w = c.w, *x = c.x, *res = c.res;
    uint8_t *qa = malloc((size_t)NB * 16);
    float *qs = malloc(sizeof(float) * 2 * NB), *ws = malloc(sizeof(float) * N_IN * N_OUT);
    struct ebb_cl_wsrc src[1] = {{raw, N_OUT}};
    struct ebb_cl_weight wt, sw = {.layout = ls, .n_in = N_IN, .n_out = N_OUT};
    OK(ebb_cl_weight_new(cl, &l, N_IN, src, 1, NULL, &wt, D));
    struct ebb_cl_wprog p, ps;
    OK(ebb_cl_wprog_build(cl, &l, &t, &p, D));
    OK(ebb_cl_wprog_build(cl, &ls, &t, &ps, D));
    CHECK(p.k4_split != NULL, "raw Q4_K with K4SPLIT: no k4_split");
    CHECK(ps.matmul_mmql != NULL, "split Q4_1: no matmul_mmql");
    sw.a = buf((size_t)NB * 16, NULL);
    sw.b = buf(sizeof(float) * 2 * NB, NULL);
    if (p.k4_split) {
        int ni = N_IN, no = N_OUT;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(ni), EBB_CL_ARG(no), EBB_CL_ARG(sw.a),
                                 EBB_CL_ARG(sw.b)};
        size_t lw = 64, g = (NB + 63) / 64 * 64;
        OK(ebb_cl_weight_set_args(&wt, p.k4_split, 0, D));
        OK(ebb_cl_set_args(p.k4_split, 2, a, 4, D));
        OK(ebb_cl_run(cl, p.k4_split, 1, &g, &lw, D));
        rd(sw.a, (size_t)NB * 16, qa);
        rd(sw.b, sizeof(float) * 2 * NB, qs);
        size_t bad_q = 0, bad_s = 0, bad_w = 0;
        for (uint32_t b = 0; b < NB; b++) {
            uint32_t o = b / (N_IN / 32), kb = b % (N_IN / 32), j = kb % 8;
            const uint8_t *sb = raw + o * rowb + (kb / 8) * 144, *sc = sb + 4;
            const uint8_t *q = sb + 16 + 32 * (j / 2);
            for (int i = 0; i < 16; i++) {
                int lo = (q[i] >> (4 * (j & 1))) & 15, hi = (q[16 + i] >> (4 * (j & 1))) & 15;
                bad_q += qa[16 * (size_t)b + i] != (uint8_t)(lo | hi << 4);
            }
            int s6 = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
            int m6 = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
            float d = ebb_fp16_to_fp32((uint16_t)(sb[0] | sb[1] << 8)),
                  dmin = ebb_fp16_to_fp32((uint16_t)(sb[2] | sb[3] << 8));
            float e0 = d * (float)s6, e1 = -dmin * (float)m6;
            bad_s += memcmp(&qs[2 * b], &e0, 4) != 0 || memcmp(&qs[2 * b + 1], &e1, 4) != 0;
            /* the block as Q4_1: d q + m */
            for (int i = 0; i < 32; i++) {
                int v = i < 16 ? qa[16 * (size_t)b + i] & 15 : qa[16 * (size_t)b + i - 16] >> 4;
                ws[(size_t)o * N_IN + 32 * kb + i] = qs[2 * b] * (float)v + qs[2 * b + 1];
            }
        }
        for (size_t i = 0; i < (size_t)N_IN * N_OUT; i++)
            bad_w += fabsf(ws[i] - w[i]) > 1e-6f * fabsf(w[i]) + 1e-30f;
        CHECK(bad_q == 0 && bad_s == 0,
              "k4_split: %zu quant bytes and %zu scale pairs of %u "
              "blocks differ from the host's",
              bad_q, bad_s, NB);
        CHECK(bad_w == 0, "k4_split: %zu of %u weights as Q4_1 differ from the Q4_K rows", bad_w,
              N_IN * N_OUT);
        printf("  k4_split: raw Q4_K %ux%u as split Q4_1 planes, quant bytes and scales equal to "
               "the host's: %s\n",
               N_OUT, N_IN, bad_q || bad_s || bad_w ? "no" : "yes");
        if (ps.matmul_mmql) {
            cl_mem xb = buf(sizeof(float) * NTOK * N_IN, x),
                   rb = buf(sizeof(float) * NTOK * N_OUT, NULL);
            check_mmq(&sw, &ps, &t, w, x, res, xb, rb, N_IN, N_OUT, NTOK, "Q4_K/k4_split");
            clReleaseMemObject(xb);
            clReleaseMemObject(rb);
        }
    }
    clReleaseMemObject(sw.a);
    clReleaseMemObject(sw.b);
    ebb_cl_wprog_fini(&p);
    ebb_cl_wprog_fini(&ps);
    ebb_cl_weight_fini(&wt);
    kcase_fini(&c);
    free(qa);
    free(qs);
    free(ws);
}

/* K8SPLIT (t: test_mma's tuning with k8split on), for raw Q6_K and Q5_K (type): k8_split's bytes
 * of a weight of 200 rows of 768 inputs, dequantized (Q6_K: s (q - 32), a scale a half; Q5_K:
 * d q + m), equal to the rows, every byte within six (five) bits; then matmul_mmq and
 * matmul_mmql built with MQL_S8H (the program that reads those bytes; on PTX matmul_mmql stages
 * them through cp.async) on them (check_mmq, the rows as the weights). */
static void test_k8_split(struct ebb_cl_tuning t, uint32_t type)
{
    enum { N_OUT = 200, N_IN = 768, NTOK = 70, NB = N_OUT * N_IN / 32 };
    const struct ebb_cl_layout l = {type, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    const bool k6 = type == EBB_GGML_Q6_K;
    const char *tn = k6 ? "Q6_K" : "Q5_K";
    t.mm_mma = 1;
    t.mmq = t.mmq ? t.mmq : 32;
    t.mmq_stage = 1;
    t.k8split = 1;
    struct ebb_cl_tuning t8 = t;
    t8.k8split = 0;
    t8.mql_s8h = 1;
    struct kcase c;
    kcase_init(&c, l.type, N_OUT, N_IN, NTOK);
    const float *w = c.w, *x = c.x, *res = c.res;
    uint8_t *kb = malloc((size_t)NB * 40);
    struct ebb_cl_wsrc src[1] = {{c.raw, N_OUT}};
    struct ebb_cl_weight wt;
    OK(ebb_cl_weight_new(cl, &l, N_IN, src, 1, NULL, &wt, D));
    struct ebb_cl_wprog p, p8;
    OK(ebb_cl_wprog_build(cl, &l, &t, &p, D));
    OK(ebb_cl_wprog_build(cl, &l, &t8, &p8, D));
    CHECK(p.k8_split != NULL && p.matmul_mmq_s8 != NULL,
          "raw %s with K8SPLIT: no k8_split or matmul_mmql with MQL_S8H", tn);
    struct ebb_cl_weight sw = wt;
    sw.a = buf((size_t)NB * 40, NULL);
    sw.off = 0;
    if (p.k8_split) {
        int ni = N_IN, no = N_OUT;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(ni), EBB_CL_ARG(no), EBB_CL_ARG(sw.a)};
        size_t lw = 64, g = (NB + 63) / 64 * 64;
        OK(ebb_cl_weight_set_args(&wt, p.k8_split, 0, D));
        OK(ebb_cl_set_args(p.k8_split, 2, a, 3, D));
        OK(ebb_cl_run(cl, p.k8_split, 1, &g, &lw, D));
        rd(sw.a, (size_t)NB * 40, kb);
        const float *sc = (const float *)(kb + (size_t)NB * 32);
        size_t bad_q = 0, bad_w = 0;
        for (size_t i = 0; i < (size_t)N_IN * N_OUT; i++) {
            size_t b = i / 32;
            int q = kb[i];
            bad_q += q > (k6 ? 63 : 31);
            float v = k6 ? sc[2 * b + (i % 32) / 16] * (float)(q - 32)
                         : sc[2 * b] * (float)q + sc[2 * b + 1];
            bad_w += fabsf(v - w[i]) > 1e-6f * fabsf(w[i]) + 1e-30f;
        }
        CHECK(bad_q == 0 && bad_w == 0,
              "k8_split %s: %zu bytes past its bits, %zu of %u weights differ from the rows", tn,
              bad_q, bad_w, N_IN * N_OUT);
        printf("  k8_split: raw %s %ux%u as a byte a weight and a float2 a block, equal to the "
               "rows: %s\n",
               tn, N_OUT, N_IN, bad_q || bad_w ? "no" : "yes");
        cl_mem xb = buf(sizeof(float) * NTOK * N_IN, x),
               rb = buf(sizeof(float) * NTOK * N_OUT, NULL);
        check_mmq(&sw, &p8, &t8, w, x, res, xb, rb, N_IN, N_OUT, NTOK,
                  k6 ? "Q6_K/k8_split" : "Q5_K/k8_split");
        clReleaseMemObject(xb);
        clReleaseMemObject(rb);
    }
    clReleaseMemObject(sw.a);
    ebb_cl_wprog_fini(&p);
    ebb_cl_wprog_fini(&p8);
    ebb_cl_weight_fini(&wt);
    kcase_fini(&c);
    free(kb);
}

static int count_files(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "ls '%s' 2>/dev/null | grep -c '\\.bin$'", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f) {
        if (fscanf(f, "%d", &n) != 1)
            n = -1;
        pclose(f);
    }
    return n;
}

/* Saves an environment variable (a copy, or NULL when unset) and unsets it. */
static char *env_take(const char *name)
{
    const char *v = getenv(name);
    char *c = v ? strdup(v) : NULL;
    unsetenv(name);
    return c;
}
static void env_restore(const char *name, char *v)
{
    if (v)
        setenv(name, v, 1);
    else
        unsetenv(name);
    free(v);
}

/* cl_khr_integer_dot_product (MV_IDP): the tuning's choice on made-up devices (the extension
 * listed or not, NVIDIA where PTX wins) and under EBB_CL_IDP / EBB_CL_PTX, the weight
 * programs' prologue, and the probe on this device. Where the device does not list the
 * extension (PoCL here) the probe must fail even when forced, with its kernel's portable dots
 * still equal to the CPU's: the path stays off and nothing breaks. */
static void test_idp(void)
{
    char *old_idp = env_take("EBB_CL_IDP"), *old_ptx = env_take("EBB_CL_PTX");
    struct ebb_cl_dev_info di = {.is_gpu = true,
                                 .vendor = EBB_CL_VENDOR_INTEL,
                                 .max_wg = 512,
                                 .local_mem = 64 * 1024,
                                 .idp = true};
    struct ebb_cl_tuning t = ebb_cl_tuning_for(&di);
    CHECK(t.mv_idp == 1 && !t.mv_ptx, "idp device: mv_idp %u mv_ptx %u", t.mv_idp, t.mv_ptx);
    di.idp = false;
    t = ebb_cl_tuning_for(&di);
    CHECK(t.mv_idp == 0, "device without the extension: mv_idp %u", t.mv_idp);
    setenv("EBB_CL_IDP", "1", 1);
    t = ebb_cl_tuning_for(&di);
    CHECK(t.mv_idp == 1, "EBB_CL_IDP=1: mv_idp %u", t.mv_idp);
    di.idp = true;
    di.vendor = EBB_CL_VENDOR_NVIDIA;
    t = ebb_cl_tuning_for(&di);
    CHECK(t.mv_ptx == 1 && t.mv_idp == 0, "NVIDIA, EBB_CL_IDP=1: mv_ptx %u mv_idp %u", t.mv_ptx,
          t.mv_idp);
    setenv("EBB_CL_PTX", "0", 1);
    t = ebb_cl_tuning_for(&di);
    CHECK(t.mv_ptx == 0 && t.mv_idp == 1, "NVIDIA, EBB_CL_PTX=0: mv_ptx %u mv_idp %u", t.mv_ptx,
          t.mv_idp);
    unsetenv("EBB_CL_PTX");
    setenv("EBB_CL_IDP", "0", 1);
    di.vendor = EBB_CL_VENDOR_INTEL;
    t = ebb_cl_tuning_for(&di);
    CHECK(t.mv_idp == 0, "EBB_CL_IDP=0: mv_idp %u", t.mv_idp);
    env_restore("EBB_CL_PTX", old_ptx);
    env_restore("EBB_CL_IDP", old_idp);

    /* The prologue defines MV_IDP 1 only with mv_idp and without PTX. */
    struct ebb_cl_layout l = {EBB_GGML_Q4_0, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    struct ebb_cl_tuning pt = tu;
    char pro[2048];
    const uint32_t cases[][3] = {{1, 0, 1}, {0, 0, 0}, {1, 1, 0}}; /* mv_idp, mv_ptx, MV_IDP */
    for (int i = 0; i < 3; i++) {
        pt.mv_idp = cases[i][0];
        pt.mv_ptx = cases[i][1];
        OK(ebb_cl_layout_prologue(&l, &pt, pro, sizeof(pro), D));
        char want[32];
        snprintf(want, sizeof(want), "#define MV_IDP %u\n", cases[i][2]);
        CHECK(strstr(pro, want) != NULL, "prologue lacks '%.17s' (mv_idp %u mv_ptx %u)", want,
              cases[i][0], cases[i][1]);
    }

    bool exact = false, ok = ebb_cl_idp_probe(cl, &exact);
    printf("  integer dot product probe (cl_khr_integer_dot_product, extension %s): %s, the "
           "kernel's dots %s\n",
           cl->info.idp ? "listed" : "not listed", ok ? "passed" : "failed",
           exact ? "equal to the CPU's" : "differ from the CPU's");
    if (!cl->info.idp) {
        CHECK(exact, "the probe kernel's portable dots differ from the CPU's");
        CHECK(!ok, "the probe passed on %s, which lists no cl_khr_integer_dot_product",
              cl->info.name);
        /* The probe's passing side, with OpenCL C stand-ins for the builtins (as the extension
         * defines them: us = unsigned bytes of a times signed bytes of b): it must pass with
         * right ones and fail with a swapped signedness or a saturating sum. */
        static const char *const right =
            "#define cl_khr_integer_dot_product 1\n"
            "int dot_4x8packed_ss_int(uint a, uint b) {\n"
            "    char4 x = as_char4(a), y = as_char4(b);\n"
            "    return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w; }\n"
            "int dot_4x8packed_us_int(uint a, uint b) {\n"
            "    uchar4 x = as_uchar4(a); char4 y = as_char4(b);\n"
            "    return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w; }\n";
        static const char *const swapped =
            "#define cl_khr_integer_dot_product 1\n"
            "int dot_4x8packed_ss_int(uint a, uint b) {\n"
            "    char4 x = as_char4(a), y = as_char4(b);\n"
            "    return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w; }\n"
            "int dot_4x8packed_us_int(uint a, uint b) {\n"
            "    char4 x = as_char4(a); uchar4 y = as_uchar4(b);\n"
            "    return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w; }\n";
        static const char *const clamped =
            "#define cl_khr_integer_dot_product 1\n"
            "int dot_4x8packed_ss_int(uint a, uint b) {\n"
            "    char4 x = as_char4(a), y = as_char4(b);\n"
            "    return clamp(x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w, -32768, 32767); }\n"
            "int dot_4x8packed_us_int(uint a, uint b) {\n"
            "    uchar4 x = as_uchar4(a); char4 y = as_char4(b);\n"
            "    return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w; }\n";
        bool ex = false;
        CHECK(ebb_cl_idp_probe_with(cl, right, &ex) && ex,
              "the probe failed with right stand-ins for the builtins");
        CHECK(!ebb_cl_idp_probe_with(cl, swapped, &ex) && !ex,
              "the probe passed with dot_4x8packed_us_int's signedness swapped");
        CHECK(!ebb_cl_idp_probe_with(cl, clamped, &ex) && !ex,
              "the probe passed with a clamped dot_4x8packed_ss_int");
    }
}

/* The binary cache: one file per (source, options, device, driver); a second build of the same
 * program is a cache hit (no new file) whose kernel runs, different options make a new entry,
 * and a broken source fails with EBB_EBUILD and the compiler's log in the message. In a
 * directory of its own with the cache on, whatever EBB_KERNEL_CACHE says (scripts/dev test
 * turns it off for the rest: PoCL's own cache shares the kernels between the test programs). */
static void test_program_cache(void)
{
    char tmpl[] = "/tmp/ebb-kcache-XXXXXX", dir[600];
    if (!mkdtemp(tmpl)) {
        CHECK(0, "mkdtemp");
        return;
    }
    const char *old = getenv("XDG_CACHE_HOME");
    char *saved = old ? strdup(old) : NULL;
    char *saved_en = env_take("EBB_KERNEL_CACHE");
    setenv("XDG_CACHE_HOME", tmpl, 1);
    snprintf(dir, sizeof(dir), "%s/ebb/kernels", tmpl);
    const char *src[] = {"__kernel void k(__global float *x) { x[0] = VAL; }\n"};
    cl_program p = NULL;
    struct ebb_diag d = {{0}};
    OK(ebb_cl_program_build(cl, src, 1, "-DVAL=1.0f", &p, D));
    clReleaseProgram(p);
    CHECK(count_files(dir) == 1, "cache entries after first build: %d", count_files(dir));
    OK(ebb_cl_program_build(cl, src, 1, "-DVAL=1.0f", &p, D));
    CHECK(count_files(dir) == 1, "cache entries after a hit: %d", count_files(dir));
    /* The program built from the cached binary runs. */
    cl_kernel k = NULL;
    float x = 0;
    cl_mem xb = buf(sizeof(float), &x);
    struct ebb_cl_arg a[] = {EBB_CL_ARG(xb)};
    size_t g = 1;
    OK(ebb_cl_kernel(p, "k", &k, D));
    OK(ebb_cl_set_args(k, 0, a, 1, D));
    OK(ebb_cl_run(cl, k, 1, &g, NULL, D));
    rd(xb, sizeof(float), &x);
    CHECK(x == 1.0f, "the cached program wrote %g, want 1", (double)x);
    clReleaseMemObject(xb);
    clReleaseKernel(k);
    clReleaseProgram(p);
    OK(ebb_cl_program_build(cl, src, 1, "-DVAL=2.0f", &p, D));
    clReleaseProgram(p);
    CHECK(count_files(dir) == 2, "cache entries after new options: %d", count_files(dir));
    const char *bad[] = {"__kernel void k(__global float *x) { x[0] = undefined_name; }\n"};
    fprintf(stderr, "(an OpenCL build log for a deliberately broken kernel follows)\n");
    ebb_err rc = ebb_cl_program_build(cl, bad, 1, "", &p, &d);
    CHECK(rc == EBB_EBUILD && strstr(d.msg, "undefined_name"), "broken kernel: %s, message '%s'",
          ebb_err_name(rc), d.msg);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
    if (system(cmd) != 0)
        CHECK(0, "cleanup");
    if (saved)
        setenv("XDG_CACHE_HOME", saved, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    free(saved);
    env_restore("EBB_KERNEL_CACHE", saved_en);
    printf("  program cache: hit (its kernel run), miss on new options, build log on failure "
           "checked\n");
}

/* half.cl's conversions for CPU devices (MV_CPU: cpu_half behind quant.cl's LD_HALF, cpu_half4)
 * against the host's on all 65536 halves, NaN as NaN; the same built into a program of this
 * device, whatever its own tuning. */
static void test_cpu_half(void)
{
    const char *half = NULL, *quant = NULL;
    OK(ebb_cl_source("half.cl", &half, D));
    OK(ebb_cl_source("quant.cl", &quant, D));
    const char *k = "__kernel void halves(__global const ushort *h, __global float *f,\n"
                    "                     __global float *f4) {\n"
                    "    int i = get_global_id(0);\n"
                    "    f[i] = LD_HALF(h + i);\n"
                    "    if (i % 4 == 0) vstore4(cpu_half4(vload4(i / 4, h)), i / 4, f4);\n"
                    "}\n";
    const char *srcs[] = {"#define MV_CPU 1\n", half, quant, k};
    cl_program prog = NULL;
    cl_kernel kh = NULL;
    OK(ebb_cl_program_build(cl, srcs, 4, "", &prog, D));
    ebb_cl_source_release(half);
    ebb_cl_source_release(quant);
    OK(ebb_cl_kernel(prog, "halves", &kh, D));
    enum { N = 65536 };
    uint16_t *h = malloc(sizeof(uint16_t) * N);
    float *f = malloc(sizeof(float) * N), *f4 = malloc(sizeof(float) * N);
    for (uint32_t i = 0; i < N; i++)
        h[i] = (uint16_t)i;
    cl_mem hb = buf(sizeof(uint16_t) * N, h), fb = buf(sizeof(float) * N, NULL);
    cl_mem f4b = buf(sizeof(float) * N, NULL);
    struct ebb_cl_arg a[] = {EBB_CL_ARG(hb), EBB_CL_ARG(fb), EBB_CL_ARG(f4b)};
    size_t g = N;
    OK(ebb_cl_set_args(kh, 0, a, 3, D));
    OK(ebb_cl_run(cl, kh, 1, &g, NULL, D));
    rd(fb, sizeof(float) * N, f);
    rd(f4b, sizeof(float) * N, f4);
    int bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        float want = ebb_fp16_to_fp32((uint16_t)i);
        for (int v = 0; v < 2; v++) {
            float got = v ? f4[i] : f[i];
            bool same = isnan(want) ? isnan(got) : memcmp(&got, &want, sizeof(float)) == 0;
            if (!same && bad++ < 5)
                CHECK(0, "cpu_half%s(0x%04x) = %a, want %a", v ? "4" : "", i, got, want);
        }
    }
    CHECK(bad == 0, "%d half conversions differ", bad);
    printf("  cpu_half / cpu_half4: all 65536 halves as the host converts them\n");
    clReleaseMemObject(hb);
    clReleaseMemObject(fb);
    clReleaseMemObject(f4b);
    clReleaseKernel(kh);
    clReleaseProgram(prog);
    free(h);
    free(f);
    free(f4);
}

/* Device selection by index and by name substring, and a clear error for no match. */
static void test_device_select(void)
{
    struct ebb_diag d = {{0}};
    char spec[64];
    snprintf(spec, sizeof(spec), "cl:%u:%u", cl->info.plat_idx, cl->info.dev_idx);
    struct ebb_cl *c2 = NULL;
    ebb_err rc = ebb_cl_open(spec, &c2, &d);
    CHECK(rc == EBB_OK && c2 && !strcmp(c2->info.name, cl->info.name), "open %s: %s", spec, d.msg);
    ebb_cl_close(c2);
    c2 = NULL;
    /* A substring of the name, in other case. */
    char sub[8] = {0};
    for (int i = 0; i < 4 && cl->info.name[i]; i++)
        sub[i] = (char)((cl->info.name[i] >= 'a' && cl->info.name[i] <= 'z') ? cl->info.name[i] - 32
                                                                             : cl->info.name[i]);
    rc = ebb_cl_open(sub, &c2, &d);
    CHECK(rc == EBB_OK && c2, "open by substring '%s': %s", sub, d.msg);
    ebb_cl_close(c2);
    c2 = NULL;
    rc = ebb_cl_open("cl:99:0", &c2, &d);
    CHECK(rc == EBB_ENOTFOUND && !c2 && strstr(d.msg, "cl:99:0"), "cl:99:0: %s '%s'",
          ebb_err_name(rc), d.msg);
    rc = ebb_cl_open("no-such-device-name", &c2, &d);
    CHECK(rc == EBB_ENOTFOUND && !c2, "bogus name: %s", ebb_err_name(rc));
    CHECK(!strcmp(ebb_cl_err_name(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES") &&
              ebb_cl_check(CL_MEM_OBJECT_ALLOCATION_FAILURE, &d, "x") == EBB_ENOMEM &&
              ebb_cl_check(CL_INVALID_KERNEL, &d, "x") == EBB_EDEVICE,
          "error names");
    printf("  device selection (index, substring, no match) and error names checked\n");
}

/* Reads the one layout-*.txt answer of ebb_cl_layout_tune in dir into line ("" if none); with
 * put, overwrites it with put first. */
static void tune_answer(const char *dir, const char *put, char *line, size_t cap)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "ls '%s'/layout-*.txt 2>/dev/null | head -n 1", dir);
    FILE *p = popen(cmd, "r"), *f;
    char path[700] = {0};
    line[0] = 0;
    if (!p)
        return;
    if (!fgets(path, sizeof(path), p))
        path[0] = 0;
    pclose(p);
    path[strcspn(path, "\n")] = 0;
    if (!path[0])
        return;
    if (put && (f = fopen(path, "w"))) {
        fputs(put, f);
        fclose(f);
    }
    if ((f = fopen(path, "r"))) {
        if (!fgets(line, (int)cap, f))
            line[0] = 0;
        fclose(f);
    }
    line[strcspn(line, "\n")] = 0;
}

/* ebb_cl_layout_tune, forced to measure on this device (EBB_CL_TUNE=1; GPUs always do): the
 * answer is a layout that fits, written to the cache under its name, and a cached answer is read
 * back exactly (image2d is not taken for image, nor image for image2d), unless it no longer fits
 * the image2d limits. */
static void test_tune(void)
{
    char tmpl[] = "/tmp/ebb-tune-XXXXXX", dir[600], line[32], name[64];
    if (!mkdtemp(tmpl)) {
        CHECK(0, "mkdtemp");
        return;
    }
    const char *old = getenv("XDG_CACHE_HOME");
    char *saved = old ? strdup(old) : NULL;
    /* The tune cache lives beside the binary cache and is on here whatever EBB_KERNEL_CACHE
     * says (test_program_cache). */
    char *saved_en = env_take("EBB_KERNEL_CACHE");
    setenv("XDG_CACHE_HOME", tmpl, 1);
    setenv("EBB_CL_TUNE", "1", 1);
    snprintf(dir, sizeof(dir), "%s/ebb/kernels", tmpl);
    const uint32_t n_in = 512, n_out = 64, type = EBB_GGML_Q4_0;
    uint64_t rowb = 0;
    OK(ebb_ggml_row_bytes(type, n_in, &rowb));
    uint8_t *rows = malloc(rowb * n_out);
    random_rows(type, n_out, n_in, rows, rowb);
    /* The measured choice: without prefill's cp.async tiles, which take split Q4_0 unmeasured. */
    struct ebb_cl_tuning tm = tu;
    tm.mmq_async = 0;
    struct ebb_cl_layout l = ebb_cl_layout_tune(cl, &tm, type, n_in, rows, n_out);
    tune_answer(dir, NULL, line, sizeof(line));
    static const char *const names[] = {"raw", "split", "image", "image2d"};
    static const enum ebb_cl_storage sto[] = {EBB_CL_STORE_BUFFER, EBB_CL_STORE_BUFFER,
                                              EBB_CL_STORE_IMAGE1D, EBB_CL_STORE_IMAGE2D};
    int k = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(line, names[i]))
            k = i;
    CHECK(k >= 0 && l.type == type && l.storage == sto[k] &&
              (l.order == EBB_CL_ORDER_RAW) == (k == 0) &&
              ebb_cl_layout_fits(&cl->info, &l, n_in, n_out),
          "tune chose %s, cached '%s'", ebb_cl_layout_name(&l, name, sizeof(name)), line);
    printf("  tune (forced) chose %s\n", ebb_cl_layout_name(&l, name, sizeof(name)));
    if (cl->info.image) {
        tune_answer(dir, "image2d\n", line, sizeof(line));
        l = ebb_cl_layout_tune(cl, &tm, type, n_in, rows, n_out);
        CHECK(l.storage == EBB_CL_STORE_IMAGE2D && l.order == EBB_CL_ORDER_SPLIT,
              "cached image2d read as %s", ebb_cl_layout_name(&l, name, sizeof(name)));
        tune_answer(dir, "image\n", line, sizeof(line));
        l = ebb_cl_layout_tune(cl, &tm, type, n_in, rows, n_out);
        CHECK(l.storage == EBB_CL_STORE_IMAGE1D && l.order == EBB_CL_ORDER_SPLIT,
              "cached image read as %s", ebb_cl_layout_name(&l, name, sizeof(name)));
        /* A cached image2d answer that no longer fits is measured again without it. */
        tune_answer(dir, "image2d\n", line, sizeof(line));
        setenv("EBB_CL_IMAGE2D_MAX", "4,8", 1);
        l = ebb_cl_layout_tune(cl, &tm, type, n_in, rows, n_out);
        unsetenv("EBB_CL_IMAGE2D_MAX");
        tune_answer(dir, NULL, line, sizeof(line));
        CHECK(l.storage != EBB_CL_STORE_IMAGE2D && strcmp(line, "image2d"),
              "image2d kept under limits 4x8: %s, cached '%s'",
              ebb_cl_layout_name(&l, name, sizeof(name)), line);
        printf("  tune cache: image2d / image answers read back exactly, image2d dropped when it "
               "no longer fits\n");
    }
    /* With matmul_mmql's cp.async tiles (MQL_ASYNC, NVIDIA's default after the probe), Q4_0
     * goes split without a timing (none cached). */
    struct ebb_cl_tuning ta = tu;
    ta.mmq_async = ta.mmq_stage = ta.mm_mma = 1;
    ta.mmq = ta.mmq ? ta.mmq : 32;
    char rm[700];
    snprintf(rm, sizeof(rm), "rm -f '%s'/layout-*.txt", dir);
    if (system(rm) != 0)
        CHECK(0, "%s", rm);
    l = ebb_cl_layout_tune(cl, &ta, type, n_in, rows, n_out);
    tune_answer(dir, NULL, line, sizeof(line));
    CHECK(l.order == EBB_CL_ORDER_SPLIT && l.storage == EBB_CL_STORE_BUFFER && !line[0],
          "with MQL_ASYNC Q4_0 went %s, cached '%s'", ebb_cl_layout_name(&l, name, sizeof(name)),
          line);
    l = ebb_cl_layout_tune(cl, &ta, EBB_GGML_Q8_0, n_in, rows, n_out / 2);
    tune_answer(dir, NULL, line, sizeof(line));
    CHECK(l.order == EBB_CL_ORDER_RAW && l.storage == EBB_CL_STORE_BUFFER && !line[0],
          "with MQL_ASYNC Q8_0 went %s, cached '%s'", ebb_cl_layout_name(&l, name, sizeof(name)),
          line);
    printf("  tune with prefill's cp.async tiles: Q4_0 split, Q8_0 raw, not timed\n");
    free(rows);
    unsetenv("EBB_CL_TUNE");
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
    if (system(cmd) != 0)
        CHECK(0, "cleanup");
    if (saved)
        setenv("XDG_CACHE_HOME", saved, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    free(saved);
    env_restore("EBB_KERNEL_CACHE", saved_en);
}

#include "test-kernels-ops.c"
#include "test-kernels-moe.c"
#include "test-kernels-qin.c"
#include "test-kernels-kvq8.c"

int main(void)
{
    struct ebb_diag d = {{0}};
    /* EBB_TEST_DEVICE is shared with the model test, where "ref" means the CPU reference. */
    const char *dev = getenv("EBB_TEST_DEVICE");
    if (dev && !strcmp(dev, "ref"))
        dev = NULL;
    ebb_err rc = ebb_cl_open(dev, &cl, &d);
    if (rc == EBB_ENOTFOUND && !dev) {
        printf("SKIP: no OpenCL device (%s)\n", d.msg);
        return 77;
    }
    if (rc) {
        fprintf(stderr, "ebb_cl_open: %s\n", d.msg);
        return 1;
    }
    tu = ebb_cl_tuning_for(&cl->info);
    printf("device: %s (%s)\n", cl->info.name, cl->info.platform);
    if (tu.mm_mma && tu.mv_ptx) {
        /* NVIDIA: the tensor-core probe must pass on the GPUs we run (sm_80 and later). */
        bool ok = ebb_cl_mma_probe(cl);
        printf("tensor-core probe (mma.sync through PTX): %s\n", ok ? "passed" : "failed");
        CHECK(ok, "the mma.sync probe failed on %s", cl->info.name);
        tu.mm_mma = ok;
    }
    if (tu.att_async && tu.mv_ptx) {
        /* NVIDIA: cp.async and ldmatrix (attn_prefill_mma's ATT_ASYNC) on sm_80 and later. */
        bool ok = ebb_cl_async_probe(cl);
        printf("async copy probe (cp.async, ldmatrix through PTX): %s\n", ok ? "passed" : "failed");
        CHECK(ok, "the cp.async / ldmatrix probe failed on %s", cl->info.name);
        tu.att_async = ok;
    }
    if (tu.mmq_async && tu.mv_ptx)
        tu.mmq_async = ebb_cl_async_probe(cl); /* matmul_mmql's MQL_ASYNC (split 4-bit tiles) */
    if (tu.att_dasync && tu.mv_ptx)
        tu.att_dasync = ebb_cl_async_probe(cl); /* decode attention's staged chunks */
    if (tu.mv_idp) {
        /* A device listing cl_khr_integer_dot_product (or EBB_CL_IDP=1): the kernels below run
         * MV_IDP where the probe passes, as the engine would. */
        bool ok = ebb_cl_idp_probe(cl, NULL);
        printf("integer dot product probe: %s\n", ok ? "passed (MV_IDP)" : "failed");
        tu.mv_idp = ok;
    }
    /* EBB_KT_ONLY=name,name runs only those sections (by hand; unset: all). */
    const char *only = getenv("EBB_KT_ONLY");
#define SECTION(name)                                                                              \
    if (!only || strstr(only, #name))                                                              \
        test_##name();
    SECTION(device_select)
    SECTION(program_cache)
    SECTION(idp)
    SECTION(cpu_half)
    SECTION(weights)
    SECTION(mma)
    SECTION(tune)
    SECTION(ops)
    SECTION(moe)
    SECTION(qin)
    SECTION(kq8mix)
    SECTION(kvq8)
#undef SECTION
    ebb_cl_close(cl);
    printf("%s (%d failures)\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
