/* A real model through the whole streamer on an OpenCL device: SmolLM2's decoder layers from
 * the GGUF directly and from packs (raw and --zstd), at 0, 25, 50, 75 and 100% residency, on the
 * unified and the discrete staging paths. A kernel reduces every layer's bytes, read from its
 * resident buffer or from the view stream-cl hands out, and each step's per-layer results must
 * equal the same reduction of the GGUF's bytes on the host. Skips (77) without the model or an
 * OpenCL device. EBB_STREAM_MODEL=FILE.gguf runs it on another model (manual). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stream/pack.h"
#include "stream/stream-cl.h"
#include "stream/stream.h"

#define PARTS 256 /* work-items per layer reduction */

static char model[512], dir[64], pack_raw[128], pack_zstd[128];
static struct ebb_gguf *g;
static uint32_t n_layer;
static struct ebb_stream_layer gguf_ext[64];
static uint32_t *want;      /* (n_layer, PARTS) from the GGUF spans */
static uint32_t *pack_want; /* (n_layer, PARTS) from the packs' layer records */
static struct ebb_stream_layer raw_ext[64], zstd_ext[64];
static cl_context ctx;
static cl_command_queue q;
static cl_device_id dev;
static cl_program prog;
static cl_kernel k_red;

static const char *src =
    "__kernel void red(__global const uint *w, uint off, uint n, __global uint *out, uint l)\n"
    "{ uint g = get_global_id(0), s = 0;\n"
    "  for (uint i = g; i < n; i += 256) s += w[off + i] * (i | 1u);\n"
    "  out[l * 256 + g] = s; }\n";

/* The host's version of the kernel over a layer's bytes. */
static void reduce(const uint8_t *p, uint64_t size, uint32_t *out)
{
    uint32_t n = (uint32_t)(size / 4);
    for (uint32_t gi = 0; gi < PARTS; gi++) {
        uint32_t s = 0;
        for (uint32_t i = gi; i < n; i += PARTS) {
            uint32_t w;
            memcpy(&w, p + 4 * (size_t)i, 4);
            s += w * (i | 1u);
        }
        out[gi] = s;
    }
}

static int setup(void **state)
{
    (void)state;
    struct ebb_diag d = {{0}};
    if (ebb_gguf_open(model, &g, &d) || ebb_pack_gguf_n_layer(g, &n_layer, &d) || n_layer > 64 ||
        ebb_pack_gguf_extents(g, n_layer, gguf_ext, &d))
        return -1;
    want = malloc(sizeof(*want) * n_layer * PARTS);
    const uint8_t *base = ebb_gguf_base(g);
    for (uint32_t l = 0; l < n_layer; l++)
        reduce(base + gguf_ext[l].off, gguf_ext[l].size, want + l * PARTS);
    snprintf(dir, sizeof(dir), "/tmp/ebb-stream-model-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(pack_raw, sizeof(pack_raw), "%s/raw.pack", dir);
    snprintf(pack_zstd, sizeof(pack_zstd), "%s/zstd.pack", dir);
    struct ebb_pack_write_stats st;
    struct ebb_pack_write_opts oz = {.zstd = true, .level = 1};
    if (ebb_pack_write(g, pack_raw, NULL, &st, &d) || ebb_pack_write(g, pack_zstd, &oz, &st, &d))
        return -1;
    /* A pack layer is its tensors at the directory's offsets: rebuild that from the GGUF. */
    pack_want = malloc(sizeof(*pack_want) * n_layer * PARTS);
    for (int k = 0; k < 2; k++) {
        struct ebb_pack *p = NULL;
        struct ebb_stream_layer *ext = k ? zstd_ext : raw_ext;
        if (ebb_pack_open(k ? pack_zstd : pack_raw, NULL, &p, &d))
            return -1;
        for (uint32_t l = 0; l < n_layer; l++) {
            ebb_pack_group(p, l, &ext[l]);
            if (k)
                continue;
            uint8_t *buf = calloc(1, ext[l].raw_size);
            for (uint32_t t = 0; t < ebb_pack_info(p)->n_tensors; t++) {
                const struct ebb_pack_tensor *pt = ebb_pack_tensor_at(p, t);
                if (pt->group == l)
                    memcpy(buf + pt->off, ebb_gguf_find_tensor(g, pt->name)->data, pt->size);
            }
            reduce(buf, ext[l].raw_size, pack_want + l * PARTS);
            free(buf);
        }
        ebb_pack_close(p);
    }
    cl_platform_id plats[8];
    cl_uint np = 0, n = 0;
    cl_int e;
    if (clGetPlatformIDs(8, plats, &np) || !np)
        return -1;
    dev = NULL;
    for (cl_uint i = 0; i < np && !dev; i++)
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, &n) || !n)
            dev = NULL;
    if (!dev && clGetDeviceIDs(plats[0], CL_DEVICE_TYPE_ALL, 1, &dev, &n))
        return -1;
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    q = clCreateCommandQueue(ctx, dev, 0, &e);
    prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
    if (clBuildProgram(prog, 1, &dev, "", NULL, NULL))
        return -1;
    k_red = clCreateKernel(prog, "red", &e);
    return e == CL_SUCCESS ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    free(want);
    free(pack_want);
    ebb_gguf_close(g);
    clReleaseKernel(k_red);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return system(cmd) == 0 ? 0 : -1;
}

#define CK(x) assert_int_equal((x), CL_SUCCESS)

static void run_red(cl_mem w, size_t off, uint64_t size, cl_mem out, uint32_t l)
{
    uint32_t o = (uint32_t)(off / 4), n = (uint32_t)(size / 4);
    size_t gsz = PARTS;
    CK(clSetKernelArg(k_red, 0, sizeof(w), &w));
    CK(clSetKernelArg(k_red, 1, sizeof(o), &o));
    CK(clSetKernelArg(k_red, 2, sizeof(n), &n));
    CK(clSetKernelArg(k_red, 3, sizeof(out), &out));
    CK(clSetKernelArg(k_red, 4, sizeof(l), &l));
    CK(clEnqueueNDRangeKernel(q, k_red, 1, NULL, &gsz, NULL, 0, NULL, NULL));
}

/* Two steps over every layer with `pct`% resident, layers from `path` (extents ext). */
static void run(const char *path, const struct ebb_stream_layer *ext, uint32_t pct, bool unified,
                enum ebb_stream_cache cache)
{
    uint64_t lb[64], sum = 0, max = 0;
    uint32_t n_res = n_layer * pct / 100;
    for (uint32_t l = 0; l < n_layer; l++) {
        lb[l] = ext[l].raw_size;
        if (l < n_res)
            sum += lb[l];
        max = lb[l] > max ? lb[l] : max;
    }
    struct ebb_stream_params sp = {
        .path = path,
        .layers = ext,
        .plan = {.n_layer = n_layer,
                 .layer_bytes = lb,
                 .staging_bytes = n_res < n_layer ? 1 : 0,
                 .n_ctx_want = 1,
                 .margin = 1,
                 .budget = sum + (n_res < n_layer ? 1 : 0)},
        .prefetch = 2,
        .cache = cache,
        .io_threads = 2,
    };
    struct ebb_stream *s = NULL;
    struct ebb_stream_cl *sc = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_stream_new(&sp, &s, &d), EBB_OK);
    assert_int_equal(ebb_stream_n_resident(s), n_res);
    cl_int e;
    cl_mem res[64] = {0};
    cl_mem out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, 4 * PARTS * n_layer, NULL, &e);
    for (uint32_t l = 0; l < n_res; l++) {
        /* Resident layers come from the GGUF, as the engine places them at load. */
        res[l] = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, gguf_ext[l].size,
                                (void *)((const uint8_t *)ebb_gguf_base(g) + gguf_ext[l].off), &e);
        CK(e);
    }
    if (ebb_stream_needs_slots(s)) {
        struct ebb_stream_cl_params cp = {.ctx = ctx,
                                          .dev = dev,
                                          .q = q,
                                          .unified = unified,
                                          .n_slots = 3,
                                          .slot_size = ebb_stream_slot_size(s),
                                          .layer_size = max};
        if (ebb_stream_cl_new(&cp, &sc, &d))
            fail_msg("%s", d.msg);
        assert_int_equal(ebb_stream_attach(s, ebb_stream_cl_slots(sc), 3, &d), EBB_OK);
    }
    uint32_t *got = malloc(4 * PARTS * n_layer);
    for (int step = 0; step < 2; step++) {
        for (uint32_t l = 0; l < n_layer; l++) {
            if (ebb_stream_is_resident(s, l)) {
                run_red(res[l], 0, gguf_ext[l].size, out, l);
                continue;
            }
            uint32_t v;
            size_t off;
            if (ebb_stream_cl_begin(sc, s, l, &v, &off, &d))
                fail_msg("%s layer %u: %s", path, l, d.msg);
            run_red(ebb_stream_cl_view(sc, v), off, ext[l].raw_size, out, l);
            assert_int_equal(ebb_stream_cl_end(sc, s, l, &d), EBB_OK);
        }
        CK(clEnqueueReadBuffer(q, out, CL_TRUE, 0, 4 * PARTS * n_layer, got, 0, NULL, NULL));
        if (sc)
            assert_int_equal(ebb_stream_cl_finish(sc, s, &d), EBB_OK);
        if (ext == gguf_ext) {
            assert_memory_equal(got, want, 4 * PARTS * n_layer);
        } else {
            for (uint32_t l = 0; l < n_res; l++)
                assert_memory_equal(got + l * PARTS, want + l * PARTS, 4 * PARTS);
            for (uint32_t l = n_res; l < n_layer; l++)
                assert_memory_equal(got + l * PARTS, pack_want + l * PARTS, 4 * PARTS);
        }
    }
    free(got);
    ebb_stream_free(s);
    ebb_stream_cl_free(sc);
    for (uint32_t l = 0; l < n_res; l++)
        clReleaseMemObject(res[l]);
    clReleaseMemObject(out);
}

static void from_gguf(void **state)
{
    (void)state;
    static const uint32_t pcts[] = {0, 25, 50, 75, 100};
    for (int u = 0; u < 2; u++)
        for (int i = 0; i < 5; i++)
            run(model, gguf_ext, pcts[i], u == 0, (enum ebb_stream_cache)(i % 3));
}

static void from_packs(void **state)
{
    (void)state;
    static const uint32_t pcts[] = {0, 25, 50, 75, 100};
    for (int k = 0; k < 2; k++)
        for (int u = 0; u < 2; u++)
            for (int i = 0; i < 5; i++)
                run(k ? pack_zstd : pack_raw, k ? zstd_ext : raw_ext, pcts[i], u == 0,
                    (enum ebb_stream_cache)((i + k) % 3));
}

int main(void)
{
    const char *env = getenv("EBB_MODELS_DIR"), *other = getenv("EBB_STREAM_MODEL");
    if (other) /* manual runs on another model, e.g. the generated 1B */
        snprintf(model, sizeof(model), "%s", other);
    else if (env)
        snprintf(model, sizeof(model), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", env);
    else
        snprintf(model, sizeof(model), "%s/.local/share/ebb/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "/root");
    cl_uint np = 0;
    if (access(model, R_OK) || clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || !np) {
        fprintf(stderr, "no SmolLM2 (set EBB_MODELS_DIR) or no OpenCL platform: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(from_gguf),
        cmocka_unit_test(from_packs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
