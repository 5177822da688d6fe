/* Layout choice by measurement at first load, cached on disk. */
#include "cl-int.h"

#include "gguf/gguf.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Seconds per matvec of the sample in layout l (the kernel decode runs for it: matvec_q8 where
 * the layout has one, its input quantization being the same for every layout); negative on any
 * failure. */
static double time_layout(struct ebb_cl *cl, const struct ebb_cl_tuning *tu,
                          const struct ebb_cl_layout *l, uint32_t n_in, const void *rows,
                          uint32_t n_out)
{
    double t = -1.0;
    struct ebb_cl_weight w = {0};
    struct ebb_cl_wprog p = {0};
    cl_mem x = NULL, y = NULL, xq = NULL, xd = NULL;
    float *xh = malloc(sizeof(float) * n_in);
    /* The sample is stacked onto itself up to about 32 MiB, so that the timing measures reading
     * weights rather than launching a kernel. */
    struct ebb_cl_wsrc src[64];
    uint64_t rowb = 0, k = 1;
    if (ebb_ggml_row_bytes(l->type, n_in, &rowb) == EBB_OK && rowb)
        k = (32ull << 20) / (rowb * n_out);
    k = k < 1 ? 1 : k > 64 ? 64 : k;
    while (k * n_out > (1u << 30))
        k--;
    for (uint64_t i = 0; i < k; i++)
        src[i] = (struct ebb_cl_wsrc){rows, n_out};
    n_out *= (uint32_t)k;
    cl_int e = CL_SUCCESS;
    /* An image2d weight that did not fit is placed in another layout: not this candidate. */
    if (!xh || ebb_cl_weight_new(cl, l, n_in, src, (size_t)k, NULL, &w, NULL) ||
        w.layout.storage != l->storage || ebb_cl_wprog_build(cl, l, tu, &p, NULL))
        goto out;
    for (uint32_t i = 0; i < n_in; i++)
        xh[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    x = clCreateBuffer(cl->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(float) * n_in, xh,
                       &e);
    if (e)
        goto out;
    y = clCreateBuffer(cl->ctx, CL_MEM_READ_WRITE, sizeof(float) * n_out, NULL, &e);
    if (e)
        goto out;
    int ni = (int)n_in, no = (int)n_out, zero = 0;
    cl_mem nul = NULL;
    float eps = 1e-5f;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(ni),  EBB_CL_ARG(no),  EBB_CL_ARG(x),    EBB_CL_ARG(ni),
                             EBB_CL_ARG(y),   EBB_CL_ARG(no),  EBB_CL_ARG(zero), EBB_CL_ARG(nul),
                             EBB_CL_ARG(nul), EBB_CL_ARG(eps), EBB_CL_ARG(zero)};
    cl_kernel k_mv = p.matvec_q8 ? p.matvec_q8 : p.matvec;
    if (p.matvec_q8) {
        /* int8 input of zeros with unit scales: the timing does not depend on the values */
        xq = clCreateBuffer(cl->ctx, CL_MEM_READ_WRITE, n_in, NULL, &e);
        if (!e)
            xd = clCreateBuffer(cl->ctx, CL_MEM_READ_WRITE, sizeof(float) * 2 * (n_in / 32), NULL,
                                &e);
        uint8_t zb = 0;
        if (e || clEnqueueFillBuffer(cl->q, xq, &zb, 1, 0, n_in, 0, NULL, NULL) ||
            clEnqueueFillBuffer(cl->q, xd, &zb, 1, 0, sizeof(float) * 2 * (n_in / 32), 0, NULL,
                                NULL))
            goto out;
        struct ebb_cl_arg aq[] = {EBB_CL_ARG(ni), EBB_CL_ARG(no),   EBB_CL_ARG(xq), EBB_CL_ARG(xd),
                                  EBB_CL_ARG(y),  EBB_CL_ARG(zero), EBB_CL_ARG(nul)};
        if (ebb_cl_weight_set_args(&w, k_mv, 0, NULL) || ebb_cl_set_args(k_mv, 2, aq, 7, NULL))
            goto out;
    } else if (ebb_cl_weight_set_args(&w, k_mv, 0, NULL) || ebb_cl_set_args(k_mv, 2, a, 11, NULL)) {
        goto out;
    }
    size_t g[2] = {(size_t)n_out * tu->mv_wg, 1}, lw[2] = {tu->mv_wg * tu->mv_rows, 1};
    if (p.matvec_q8)
        ebb_cl_q8_shape(tu, n_out, g, lw);
    enum { WARM = 3, RUNS = 20 };
    double t0 = 0;
    for (int r = 0; r < WARM + RUNS; r++) {
        if (r == WARM) {
            if (clFinish(cl->q))
                goto out;
            t0 = now_s();
        }
        if (ebb_cl_run(cl, k_mv, 2, g, lw, NULL))
            goto out;
    }
    if (clFinish(cl->q))
        goto out;
    t = (now_s() - t0) / RUNS;
out:
    if (x)
        clReleaseMemObject(x);
    if (y)
        clReleaseMemObject(y);
    if (xq)
        clReleaseMemObject(xq);
    if (xd)
        clReleaseMemObject(xd);
    ebb_cl_wprog_fini(&p);
    ebb_cl_weight_fini(&w);
    free(xh);
    return t;
}

enum { N_CAND = 4 };
static const char *const order_names[N_CAND] = {"raw", "split", "image", "image2d"};

struct ebb_cl_layout ebb_cl_layout_tune(struct ebb_cl *cl, const struct ebb_cl_tuning *tu,
                                        uint32_t type, uint32_t n_in, const void *rows,
                                        uint32_t n_out)
{
    const struct ebb_cl_dev_info *di = &cl->info;
    uint64_t n_el = (uint64_t)n_in * n_out;
    struct ebb_cl_layout def = ebb_cl_layout_choose(di, type, n_el);
    struct ebb_cl_layout cand[N_CAND] = {
        {type, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW},
        {type, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT},
        {type, EBB_CL_STORE_IMAGE1D, EBB_CL_ORDER_SPLIT},
        {type, EBB_CL_STORE_IMAGE2D, EBB_CL_ORDER_SPLIT},
    };
    int n_ok = 0;
    for (int i = 0; i < N_CAND; i++)
        n_ok += ebb_cl_layout_fits(di, &cand[i], n_in, n_out);
    /* EBB_CL_TUNE=1 measures on CPUs too (tests of this function on PoCL). */
    struct ebb_cl_env env;
    ebb_cl_env_get(&env);
    bool measure = di->is_gpu || env.tune;
    if (!measure || n_ok < 2 || env.layout != EBB_CL_LAYOUT_AUTO)
        return def;
    /* Prefill's staged int8 products copy Q4_0 tiles with cp.async from the split layout only
     * (matmul_mmql's MQL_ASYNC): there it gave 1.46-1.53x raw's pp512, for 7% less decode
     * (H200, Llama-3.1-8B shape, docs/PERFORMANCE.md), so split without timing. */
    if (type == EBB_GGML_Q4_0 && tu->mmq_async && tu->mmq_stage && tu->mm_mma && tu->mmq &&
        ebb_cl_layout_fits(di, &cand[1], n_in, n_out))
        return cand[1];
    /* ...and Q8_0 tiles from the raw blocks only (1.32x register staging's pp512 there, H200,
     * Llama-3.1-8B shape): raw, untimed. */
    if (type == EBB_GGML_Q8_0 && tu->mmq_async && tu->mmq_stage && tu->mm_mma && tu->mmq)
        return cand[0];

    char dir[900], path[1000], line[16] = {0};
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, di->name, strlen(di->name));
    h = fnv(h, di->platform, strlen(di->platform));
    h = fnv(h, di->driver, strlen(di->driver));
    uint32_t key[3] = {type, n_in, n_out};
    h = fnv(h, key, sizeof(key));
    /* The kernels and their shapes decide the timings: a cached answer from other kernels
     * (an older ebb, or EBB_CL_* overrides) must not be reused. */
    h = fnv(h, tu, sizeof(*tu));
    for (size_t i = 0; i < ebb__cl_n_wprog_srcs; i++) {
        const char *src = NULL;
        if (ebb_cl_source(ebb__cl_wprog_srcs[i], &src, NULL) == EBB_OK) {
            h = fnv(h, src, strlen(src));
            ebb_cl_source_release(src);
        }
    }
    bool cache = ebb_cl_cache_dir(dir, sizeof(dir));
    if (cache) {
        snprintf(path, sizeof(path), "%s/layout-%016llx.txt", dir, (unsigned long long)h);
        FILE *f = fopen(path, "r");
        if (f) {
            bool got = fgets(line, sizeof(line), f) != NULL;
            fclose(f);
            line[strcspn(line, "\r\n")] = 0;
            for (int i = 0; got && i < N_CAND; i++)
                if (!strcmp(line, order_names[i]) && ebb_cl_layout_fits(di, &cand[i], n_in, n_out))
                    return cand[i];
        }
    }
    int best = -1;
    double best_t = 0, raw_t = 0;
    for (int i = 0; i < N_CAND; i++) {
        if (!ebb_cl_layout_fits(di, &cand[i], n_in, n_out))
            continue;
        double t = time_layout(cl, tu, &cand[i], n_in, rows, n_out);
        if (i == 0)
            raw_t = t;
        if (t > 0 && (best < 0 || t < best_t)) {
            best = i;
            best_t = t;
        }
    }
    if (best < 0)
        return def;
    /* Raw needs no rearrangement at load (and is zero-copy where memory is shared): it wins
     * unless another layout is clearly faster. (H200, Llama-3-8B shape Q4_0: split won the
     * timing and decodes at 157.6-158.0 tok/s against raw's 146.4-147.0, for a load of
     * 2.1-2.3 s instead of 1.1 s (4.7-5.4 s before the rearrangement was threaded) and a peak
     * RSS of 859 MiB instead of 483.) */
    if (best != 0 && raw_t > 0 && raw_t <= best_t * 1.05)
        best = 0;
    if (cache) {
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "%s\n", order_names[best]);
            fclose(f);
        }
    }
    return cand[best];
}
