/* Start-up probes: tiny kernels run once per device whose results, compared with the CPU's,
 * decide whether a path (tensor cores through PTX, cl_khr_integer_dot_product) may be used. */
#include "cl-int.h"

#include <pthread.h>
#include <string.h>

/* A start-up probe's run: builds srcs (options opts), runs kernel kname over g work-items (local
 * size *l, or the driver's choice) with the n_in read-only inputs and then one output buffer of
 * out_bytes as its arguments, and reads that into out. False on any failure (no diagnostics:
 * a probe that fails leaves its path off). */
struct probe_in {
    const void *p;
    size_t n;
};
enum { PROBE_MAX_IN = 3 };
static bool probe_run(struct ebb_cl *cl, const char *const *srcs, size_t n_src, const char *opts,
                      const char *kname, const struct probe_in *in, int n_in, void *out,
                      size_t out_bytes, size_t g, const size_t *l)
{
    cl_program prog = NULL;
    cl_kernel k = NULL;
    cl_mem b[PROBE_MAX_IN + 1] = {NULL};
    struct ebb_cl_arg a[PROBE_MAX_IN + 1];
    bool ok = false;
    cl_int e = CL_SUCCESS;
    if (n_in > PROBE_MAX_IN || ebb_cl_program_build(cl, srcs, n_src, opts, &prog, NULL) ||
        ebb_cl_kernel(prog, kname, &k, NULL))
        goto out;
    for (int i = 0; i < n_in && !e; i++)
        b[i] = clCreateBuffer(cl->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, in[i].n,
                              (void *)in[i].p, &e);
    if (!e)
        b[n_in] = clCreateBuffer(cl->ctx, CL_MEM_WRITE_ONLY, out_bytes, NULL, &e);
    if (e)
        goto out;
    for (int i = 0; i <= n_in; i++)
        a[i] = EBB_CL_ARG(b[i]);
    ok = !ebb_cl_set_args(k, 0, a, (size_t)n_in + 1, NULL) && !ebb_cl_run(cl, k, 1, &g, l, NULL) &&
         !clEnqueueReadBuffer(cl->q, b[n_in], CL_TRUE, 0, out_bytes, out, 0, NULL, NULL);
out:
    for (int i = 0; i <= PROBE_MAX_IN; i++)
        if (b[i])
            clReleaseMemObject(b[i]);
    if (k)
        clReleaseKernel(k);
    if (prog)
        clReleaseProgram(prog);
    return ok;
}

/* IEEE half bits of a small integer (|v| < 2048). */
static uint16_t half_of_int(int v)
{
    if (!v)
        return 0;
    unsigned a = (unsigned)(v < 0 ? -v : v), e = 0;
    while ((a >> e) > 1)
        e++;
    unsigned mant = (a << (10 - e)) & 0x3ffu;
    return (uint16_t)((v < 0 ? 0x8000u : 0u) | ((e + 15) << 10) | mant);
}

bool ebb_cl_mma_probe(struct ebb_cl *cl)
{
    /* A = rows m of k - m / 2 (as halves: small integers, exact), B = columns n of (k + n) % 5;
     * the products and sums are exact in f32 too. */
    uint16_t ah[16 * 16], bh[8 * 16];
    float want[16 * 8], got[16 * 8];
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++)
            ah[m * 16 + k] = half_of_int(k - m / 2);
    for (int n = 0; n < 8; n++)
        for (int k = 0; k < 16; k++)
            bh[n * 16 + k] = half_of_int((k + n) % 5);
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            float s = 0.0f;
            for (int k = 0; k < 16; k++)
                s += (float)(k - m / 2) * (float)((k + n) % 5);
            want[m * 8 + n] = s;
        }
    const char *src = NULL;
    if (ebb_cl_source("mma.cl", &src, NULL))
        return false;
    const char *srcs[] = {"#define MV_PTX 1\n#define MMA_PROBE 1\n", src};
    const struct probe_in in[] = {{ah, sizeof(ah)}, {bh, sizeof(bh)}};
    size_t g = 32;
    bool ok = probe_run(cl, srcs, 2, "", "mma_probe", in, 2, got, sizeof(got), g, &g) &&
              !memcmp(got, want, sizeof(got));
    ebb_cl_source_release(src);
    return ok;
}

/* ebb_cl_async_probe's results by device: it builds and runs in a context of its own, which the
 * process's shared context and program cache (cl.c, cl-program.c) do not cover, so each model
 * opened on a device would pay for it again. */
enum { ASYNC_SEEN_MAX = 16 };
static struct {
    cl_device_id dev;
    bool ok;
} async_seen[ASYNC_SEEN_MAX];
static size_t n_async_seen;
static pthread_mutex_t async_mu = PTHREAD_MUTEX_INITIALIZER;

static bool async_probe_run(struct ebb_cl *cl);

bool ebb_cl_async_probe(struct ebb_cl *cl)
{
    pthread_mutex_lock(&async_mu);
    for (size_t i = 0; i < n_async_seen; i++)
        if (async_seen[i].dev == cl->dev) {
            bool ok = async_seen[i].ok;
            pthread_mutex_unlock(&async_mu);
            return ok;
        }
    bool ok = async_probe_run(cl);
    if (n_async_seen < ASYNC_SEEN_MAX) {
        async_seen[n_async_seen].dev = cl->dev;
        async_seen[n_async_seen++].ok = ok;
    }
    pthread_mutex_unlock(&async_mu);
    return ok;
}

static bool async_probe_run(struct ebb_cl *cl)
{
    /* v: 16 rows of 16 halves, small distinct integers (exact as halves); rows 14 and 15 arrive
     * as zeros. Lane 4g + q's register i: rows r = (i & 1) * 8 + 2q and r + 1 of column (i >> 1)
     * * 8 + g, the lower row in the low half. */
    uint16_t v[16 * 16];
    uint32_t want[32 * 4], got[32 * 4];
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            v[r * 16 + c] = half_of_int((r * 16 + c) % 37 - 18);
    for (int lane = 0; lane < 32; lane++)
        for (int i = 0; i < 4; i++) {
            int r = (i & 1) * 8 + 2 * (lane & 3), c = (i >> 1) * 8 + lane / 4;
            uint32_t lo = r < 14 ? v[r * 16 + c] : 0, hi = r + 1 < 14 ? v[(r + 1) * 16 + c] : 0;
            want[4 * lane + i] = lo | hi << 16;
        }
    /* In a context of its own: a kernel that faults (a driver that places or addresses the
     * shared memory otherwise) leaves the context it ran in unusable, and the engine's must
     * stay whole for the fallback. */
    const char *src = NULL;
    if (ebb_cl_source("mma.cl", &src, NULL))
        return false;
    struct ebb_cl own = *cl;
    cl_int e = CL_SUCCESS;
    own.ctx = clCreateContext(NULL, 1, &cl->dev, NULL, NULL, &e);
    own.q = own.ctx ? clCreateCommandQueue(own.ctx, cl->dev, 0, &e) : NULL;
    const char *srcs[] = {"#define MV_PTX 1\n#define ASYNC_PROBE 1\n", src};
    const struct probe_in in[] = {{v, sizeof(v)}};
    size_t g = 32;
    bool ok = own.q &&
              probe_run(&own, srcs, 2, "", "async_probe", in, 1, got, sizeof(got), g, &g) &&
              !memcmp(got, want, sizeof(got));
    if (own.q)
        clReleaseCommandQueue(own.q);
    if (own.ctx)
        clReleaseContext(own.ctx);
    ebb_cl_source_release(src);
    return ok;
}

bool ebb_cl_idp_probe_with(struct ebb_cl *cl, const char *defs, bool *exact)
{
    if (exact)
        *exact = false;
    /* Byte patterns with every sign and the extremes (-128, 127, 255 unsigned, 0), words from a
     * fixed LCG for the rest, and accumulators of both signs. */
    enum { N = 64 };
    static const uint32_t fixed[][2] = {
        {0x80808080u, 0x80808080u}, {0x7f7f7f7fu, 0x7f7f7f7fu}, {0xffffffffu, 0x80808080u},
        {0xffffffffu, 0x7f7f7f7fu}, {0x80808080u, 0x7f7f7f7fu}, {0x00000000u, 0xffffffffu},
        {0xff7f8001u, 0x807fff01u}, {0x01020304u, 0xfffefdfcu},
    };
    uint32_t a[N], b[N];
    int32_t c[N], want[2 * N + 1], got[2 * N + 1];
    uint32_t r = 12345u;
    for (int i = 0; i < N; i++) {
        if (i < (int)(sizeof(fixed) / sizeof(fixed[0]))) {
            a[i] = fixed[i][0];
            b[i] = fixed[i][1];
        } else {
            a[i] = r = r * 1664525u + 1013904223u;
            b[i] = r = r * 1664525u + 1013904223u;
        }
        c[i] = i % 3 == 0 ? 0 : i % 3 == 1 ? -100000 - i : 70000 + 7 * i;
        int ss = c[i], us = c[i];
        for (int k = 0; k < 4; k++) {
            int ub = (int)((a[i] >> (8 * k)) & 0xffu), vb = (int)((b[i] >> (8 * k)) & 0xffu);
            int sa = ub >= 128 ? ub - 256 : ub, sb = vb >= 128 ? vb - 256 : vb;
            ss += sa * sb;
            us += ub * sb;
        }
        want[2 * i] = ss;
        want[2 * i + 1] = us;
    }
    want[2 * N] = 1; /* MV_IDP */
    const char *src = NULL;
    if (ebb_cl_source("q8.cl", &src, NULL))
        return false;
    /* MV_IDP only where the compiler declares the builtins: otherwise the kernel runs the
     * portable dots (still compared, for *exact) and reports MV_IDP 0, without a build error. */
    const char *srcs[] = {defs ? defs : "",
                          "#if defined(cl_khr_integer_dot_product) || "
                          "defined(__opencl_c_integer_dot_product_input_4x8bit_packed)\n"
                          "#define MV_IDP 1\n#endif\n#define IDP_PROBE 1\n",
                          src};
    const struct probe_in in[] = {{a, sizeof(a)}, {b, sizeof(b)}, {c, sizeof(c)}};
    bool ok = false;
    if (probe_run(cl, srcs, 3, "-cl-mad-enable", "idp_probe", in, 3, got, sizeof(got), N, NULL)) {
        if (exact)
            *exact = !memcmp(got, want, 2 * N * sizeof(got[0]));
        ok = !memcmp(got, want, sizeof(got));
    }
    ebb_cl_source_release(src);
    return ok;
}

bool ebb_cl_idp_probe(struct ebb_cl *cl, bool *exact)
{
    return ebb_cl_idp_probe_with(cl, NULL, exact);
}
