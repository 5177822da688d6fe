/* The two staging paths of docs/STREAMER.md on a real OpenCL device (PoCL in CI; skipped with
 * exit 77 when there is none): (1) unified memory: the slot buffer itself (CL_MEM_USE_HOST_PTR
 * over the slot) is the kernel's weight buffer, unmapped while the device reads it and mapped
 * (CL_MAP_WRITE, not INVALIDATE: a slot that still holds its layer is reused) while the I/O
 * thread owns it; (2) discrete: slots are pinned
 * (CL_MEM_ALLOC_HOST_PTR, mapped once) and each layer is copied into one of two device buffers
 * with a non-blocking write, the slot released once the copy's event completes. A kernel copies
 * every streamed layer out and the bytes are compared with the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stream/stream-cl.h"
#include "stream/stream-io.h"
#include "stream/stream.h"

#define N_LAYER 5
#define N_SLOTS 3
#define WORDS 6000 /* uint32 per layer */

static char path[64];
static uint32_t *file_words;
static struct ebb_stream_layer layers[N_LAYER];
static cl_context ctx;
static cl_command_queue q;
static cl_kernel k_copy, k_sum;
static cl_device_id the_dev;
static cl_program prog;

static const char *src =
    "__kernel void copy(__global const uint *w, uint off, __global uint *out)\n"
    "{ size_t i = get_global_id(0); out[i] = w[off + i]; }\n"
    "__kernel void lsum(__global const uint *w, uint off, uint n, __global uint *out, uint idx)\n"
    "{ uint s = 0; for (uint i = 0; i < n; i++) s += w[off + i] * (i + 1); out[idx] = s; }\n";

#define CK(e) assert_int_equal((e), CL_SUCCESS)

static int setup(void **state)
{
    (void)state;
    /* A GPU if there is one (as the engine's "auto"), else the first device. */
    cl_platform_id plats[8];
    cl_device_id dev = NULL;
    cl_uint np = 0, n = 0;
    if (clGetPlatformIDs(8, plats, &np) != CL_SUCCESS || !np)
        return -1;
    for (cl_uint i = 0; i < np && !dev; i++)
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, &n) != CL_SUCCESS || !n)
            dev = NULL;
    if (!dev && clGetDeviceIDs(plats[0], CL_DEVICE_TYPE_ALL, 1, &dev, &n) != CL_SUCCESS)
        return -1;
    char name[128] = "";
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof(name), name, NULL);
    print_message("device: %s\n", name);
    cl_int e;
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    q = clCreateCommandQueue(ctx, dev, 0, &e);
    prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
    if (clBuildProgram(prog, 1, &dev, "", NULL, NULL) != CL_SUCCESS)
        return -1;
    k_copy = clCreateKernel(prog, "copy", &e);
    k_sum = clCreateKernel(prog, "lsum", &e);
    the_dev = dev;
    /* A file of N_LAYER layers of WORDS words, at 4-byte aligned, page-unaligned offsets. */
    snprintf(path, sizeof(path), "/tmp/ebb-stream-cl-XXXXXX");
    int fd = mkstemp(path);
    size_t total = 100 + (size_t)N_LAYER * WORDS;
    file_words = malloc(total * 4);
    for (size_t i = 0; i < total; i++)
        file_words[i] = (uint32_t)(i * 2654435761u);
    for (int l = 0; l < N_LAYER; l++)
        layers[l] = (struct ebb_stream_layer){
            .off = (100 + (uint64_t)l * WORDS) * 4, .size = WORDS * 4, .raw_size = WORDS * 4};
    int ok = fd >= 0 && write(fd, file_words, total * 4) == (ssize_t)(total * 4);
    if (fd >= 0)
        close(fd);
    return ok && e == CL_SUCCESS ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    free(file_words);
    clReleaseKernel(k_copy);
    clReleaseKernel(k_sum);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}

static void check_out(cl_mem out, uint32_t l)
{
    uint32_t *got = malloc(WORDS * 4);
    CK(clEnqueueReadBuffer(q, out, CL_TRUE, 0, WORDS * 4, got, 0, NULL, NULL));
    assert_memory_equal(got, (const uint8_t *)file_words + layers[l].off, WORDS * 4);
    free(got);
}

static void run_copy(cl_mem w, uint32_t off_words, cl_mem out, cl_uint n_wait, cl_event *wait,
                     cl_event *done)
{
    size_t g = WORDS;
    CK(clSetKernelArg(k_copy, 0, sizeof(w), &w));
    CK(clSetKernelArg(k_copy, 1, sizeof(off_words), &off_words));
    CK(clSetKernelArg(k_copy, 2, sizeof(out), &out));
    CK(clEnqueueNDRangeKernel(q, k_copy, 1, NULL, &g, NULL, n_wait, wait, done));
}

static void unified(void **state)
{
    (void)state;
    cl_int e;
    size_t ss = ebb_stream_io_slot_size(layers, N_LAYER);
    void *host[N_SLOTS];
    cl_mem buf[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++) {
        assert_int_equal(posix_memalign(&host[i], EBB_STREAM_ALIGN, ss), 0);
        buf[i] = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, ss, host[i], &e);
        CK(e);
        /* Owned by the I/O thread: mapped for writing. */
        void *p = clEnqueueMapBuffer(q, buf[i], CL_TRUE, CL_MAP_WRITE, 0, ss, 0, NULL, NULL, &e);
        CK(e);
        assert_ptr_equal(p, host[i]); /* USE_HOST_PTR maps to the host memory itself */
    }
    cl_mem out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, WORDS * 4, NULL, &e);
    for (int mode = 0; mode < 3; mode++) {
        struct ebb_stream_io_params p = {.path = path,
                                         .layers = layers,
                                         .n_layer = N_LAYER,
                                         .slots = host,
                                         .n_slots = N_SLOTS,
                                         .slot_size = ss,
                                         .prefetch = 2,
                                         .cache = (enum ebb_stream_cache)mode};
        struct ebb_stream_io *io = NULL;
        struct ebb_diag d = {{0}};
        assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_OK);
        static const uint32_t sched[] = {1, 2, 4};
        assert_int_equal(ebb_stream_io_submit(io, sched, 3, &d), EBB_OK);
        for (int step = 0; step < 3; step++)
            for (int i = 0; i < 3; i++) {
                const void *data;
                uint32_t slot;
                assert_int_equal(ebb_stream_io_acquire(io, sched[i], &data, &slot, &d), EBB_OK);
                size_t off = (size_t)((const uint8_t *)data - (const uint8_t *)host[slot]);
                CK(clEnqueueUnmapMemObject(q, buf[slot], host[slot], 0, NULL, NULL));
                cl_event done;
                run_copy(buf[slot], (uint32_t)(off / 4), out, 0, NULL, &done);
                check_out(out, sched[i]);
                CK(clWaitForEvents(1, &done));
                clReleaseEvent(done);
                void *m = clEnqueueMapBuffer(q, buf[slot], CL_TRUE, CL_MAP_WRITE, 0, ss, 0, NULL,
                                             NULL, &e);
                CK(e);
                assert_ptr_equal(m, host[slot]);
                assert_int_equal(ebb_stream_io_release(io, sched[i]), EBB_OK);
            }
        ebb_stream_io_close(io);
    }
    for (int i = 0; i < N_SLOTS; i++) {
        CK(clEnqueueUnmapMemObject(q, buf[i], host[i], 0, NULL, NULL));
        CK(clFinish(q));
        clReleaseMemObject(buf[i]);
        free(host[i]);
    }
    clReleaseMemObject(out);
}

static void discrete(void **state)
{
    (void)state;
    cl_int e;
    size_t ss = ebb_stream_io_slot_size(layers, N_LAYER);
    void *pinned[N_SLOTS], *mapped[N_SLOTS];
    cl_mem pbuf[N_SLOTS], dev[2];
    /* Pinned staging: allocated by the driver, mapped once for the model's lifetime; only its
     * host pointer is used (as the source of writes), never the buffer object in a kernel. */
    for (int i = 0; i < N_SLOTS; i++) {
        pbuf[i] =
            clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, ss + 4096, NULL, &e);
        CK(e);
        uint8_t *p = clEnqueueMapBuffer(q, pbuf[i], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                        ss + 4096, 0, NULL, NULL, &e);
        CK(e);
        mapped[i] = p;
        pinned[i] = p + (4096 - (uintptr_t)p % 4096) % 4096;
    }
    for (int i = 0; i < 2; i++) {
        dev[i] = clCreateBuffer(ctx, CL_MEM_READ_ONLY, WORDS * 4, NULL, &e);
        CK(e);
    }
    cl_mem out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, WORDS * 4, NULL, &e);
    struct ebb_stream_io_params p = {.path = path,
                                     .layers = layers,
                                     .n_layer = N_LAYER,
                                     .slots = pinned,
                                     .n_slots = N_SLOTS,
                                     .slot_size = ss,
                                     .prefetch = 2};
    struct ebb_stream_io *io = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_OK);
    static const uint32_t sched[] = {0, 3, 4};
    assert_int_equal(ebb_stream_io_submit(io, sched, 3, &d), EBB_OK);
    cl_event done[2] = {NULL, NULL};
    for (int step = 0, k = 0; step < 3; step++)
        for (int i = 0; i < 3; i++, k ^= 1) {
            const void *data;
            assert_int_equal(ebb_stream_io_acquire(io, sched[i], &data, NULL, &d), EBB_OK);
            /* The copy into dev[k] waits for the compute that last read dev[k]. */
            cl_event copied;
            CK(clEnqueueWriteBuffer(q, dev[k], CL_FALSE, 0, WORDS * 4, data, done[k] ? 1 : 0,
                                    done[k] ? &done[k] : NULL, &copied));
            if (done[k])
                clReleaseEvent(done[k]);
            run_copy(dev[k], 0, out, 1, &copied, &done[k]);
            CK(clWaitForEvents(1, &copied)); /* then the slot is free again */
            clReleaseEvent(copied);
            assert_int_equal(ebb_stream_io_release(io, sched[i]), EBB_OK);
            check_out(out, sched[i]);
        }
    CK(clFinish(q));
    for (int i = 0; i < 2; i++) {
        if (done[i])
            clReleaseEvent(done[i]);
        clReleaseMemObject(dev[i]);
    }
    ebb_stream_io_close(io);
    for (int i = 0; i < N_SLOTS; i++) {
        CK(clEnqueueUnmapMemObject(q, pbuf[i], mapped[i], 0, NULL, NULL));
        CK(clFinish(q));
        clReleaseMemObject(pbuf[i]);
    }
    clReleaseMemObject(out);
}

/* A fake forward pass over the streamer facade and stream-cl: each layer's kernel sums its
 * words (resident buffer, or the view stream-cl hands out), over steps before and after a plan
 * change; every sum must match the file. */
static void run_sum(cl_mem w, uint32_t off_words, cl_mem out, uint32_t idx)
{
    uint32_t n = WORDS;
    size_t g = 1;
    CK(clSetKernelArg(k_sum, 0, sizeof(w), &w));
    CK(clSetKernelArg(k_sum, 1, sizeof(off_words), &off_words));
    CK(clSetKernelArg(k_sum, 2, sizeof(n), &n));
    CK(clSetKernelArg(k_sum, 3, sizeof(out), &out));
    CK(clSetKernelArg(k_sum, 4, sizeof(idx), &idx));
    CK(clEnqueueNDRangeKernel(q, k_sum, 1, NULL, &g, NULL, 0, NULL, NULL));
}

static void engine(bool unified)
{
    char hook[96];
    snprintf(hook, sizeof(hook), "%s.hook", path);
    FILE *f = fopen(hook, "w");
    assert_non_null(f);
    fputs("available=1G\n", f);
    fclose(f);
    setenv("EBB_TEST_MEMPROBE_FILE", hook, 1);
    uint64_t lb[N_LAYER];
    for (int l = 0; l < N_LAYER; l++)
        lb[l] = WORDS * 4;
    struct ebb_stream_params sp = {.path = path,
                                   .layers = layers,
                                   .plan = {.n_layer = N_LAYER,
                                            .layer_bytes = lb,
                                            .staging_bytes = 8192,
                                            .n_ctx_want = 1,
                                            .margin = 4096,
                                            .budget = 8192 + 2 * WORDS * 4 + 100},
                                   .prefetch = 2,
                                   .cache = unified ? EBB_STREAM_DIRECT : EBB_STREAM_CACHED};
    struct ebb_stream *s = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_stream_new(&sp, &s, &d), EBB_OK);
    assert_int_equal(ebb_stream_n_resident(s), 2);
    struct ebb_stream_cl_params cp = {.ctx = ctx,
                                      .dev = the_dev,
                                      .q = q,
                                      .unified = unified,
                                      .n_slots = 3,
                                      .slot_size = ebb_stream_slot_size(s),
                                      .layer_size = WORDS * 4};
    struct ebb_stream_cl *sc = NULL;
    if (ebb_stream_cl_new(&cp, &sc, &d))
        fail_msg("%s", d.msg);
    assert_true(ebb_stream_needs_slots(s));
    assert_int_equal(ebb_stream_attach(s, ebb_stream_cl_slots(sc), 3, &d), EBB_OK);
    cl_int e;
    cl_mem res[N_LAYER], out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, 4 * N_LAYER, NULL, &e);
    uint32_t want[N_LAYER];
    for (int l = 0; l < N_LAYER; l++) {
        const uint32_t *w = (const uint32_t *)((const uint8_t *)file_words + layers[l].off);
        res[l] =
            clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, WORDS * 4, (void *)w, &e);
        CK(e);
        want[l] = 0;
        for (uint32_t i = 0; i < WORDS; i++)
            want[l] += w[i] * (i + 1);
    }
    for (int step = 0; step < 8; step++) {
        if (step == 4) { /* pressure: the plan sheds a layer between steps */
            f = fopen(hook, "w");
            fputs("available=1G\npressure=1\n", f);
            fclose(f);
            struct ebb_stream_change chg;
            assert_int_equal(ebb_stream_cl_finish(sc, s, &d), EBB_OK);
            assert_true(ebb_stream_replan(s, 1000000000ull, 64, 1000000000ull, true, &chg));
            assert_int_equal(chg.to, 1);
            assert_int_equal(ebb_stream_commit(s, &chg, &d), EBB_OK);
        }
        uint32_t zero[N_LAYER] = {0}, got[N_LAYER];
        CK(clEnqueueWriteBuffer(q, out, CL_TRUE, 0, sizeof(zero), zero, 0, NULL, NULL));
        for (uint32_t l = 0; l < N_LAYER; l++) {
            if (ebb_stream_is_resident(s, l)) {
                run_sum(res[l], 0, out, l);
                continue;
            }
            uint32_t v;
            size_t off;
            if (ebb_stream_cl_begin(sc, s, l, &v, &off, &d))
                fail_msg("begin %u: %s", l, d.msg);
            assert_true(v < ebb_stream_cl_n_views(sc));
            run_sum(ebb_stream_cl_view(sc, v), (uint32_t)(off / 4), out, l);
            assert_int_equal(ebb_stream_cl_end(sc, s, l, &d), EBB_OK);
        }
        CK(clEnqueueReadBuffer(q, out, CL_TRUE, 0, sizeof(got), got, 0, NULL, NULL));
        assert_int_equal(ebb_stream_cl_finish(sc, s, &d), EBB_OK);
        assert_memory_equal(got, want, sizeof(want));
    }
    struct ebb_stream_report r;
    ebb_stream_report(s, &r);
    print_message("%s: resident %u, hits %llu misses %llu reused %llu\n",
                  unified ? "unified" : "discrete", r.n_resident, (unsigned long long)r.io.hits,
                  (unsigned long long)r.io.misses, (unsigned long long)r.io.reused);
    assert_int_equal(r.io.hits + r.io.misses, 4 * 3 + 4 * 4);
    ebb_stream_free(s); /* stops the I/O thread, which writes into the slots */
    ebb_stream_cl_free(sc);
    for (int l = 0; l < N_LAYER; l++)
        clReleaseMemObject(res[l]);
    clReleaseMemObject(out);
    unsetenv("EBB_TEST_MEMPROBE_FILE");
    unlink(hook);
}

static void engine_unified(void **state)
{
    (void)state;
    engine(true);
}

static void engine_discrete(void **state)
{
    (void)state;
    engine(false);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Manual: EBB_STREAM_CL_BENCH=FILE streams FILE as layers of EBB_STREAM_CL_LAYER bytes (default
 * 32 MiB) through pinned slots into two device buffers, and times it against plain copies from
 * one pinned buffer (the host-to-device limit). */
static void bench(void **state)
{
    (void)state;
    const char *file = getenv("EBB_STREAM_CL_BENCH");
    if (!file)
        skip();
    const char *ls_env = getenv("EBB_STREAM_CL_LAYER");
    uint64_t lsz = ls_env ? strtoull(ls_env, NULL, 10) : 32ull << 20;
    FILE *f = fopen(file, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    uint64_t fsz = (uint64_t)ftell(f);
    fclose(f);
    uint32_t n = (uint32_t)(fsz / lsz);
    assert_true(n >= 2);
    struct ebb_stream_layer *ls = calloc(n, sizeof(*ls));
    uint32_t *sched = calloc(n, sizeof(*sched));
    for (uint32_t l = 0; l < n; l++) {
        ls[l] = (struct ebb_stream_layer){.off = l * lsz, .size = lsz, .raw_size = lsz};
        sched[l] = l;
    }
    const char *ns_env = getenv("EBB_STREAM_CL_SLOTS");
    uint32_t ns = ns_env ? (uint32_t)atoi(ns_env) : N_SLOTS;
    assert_true(ns >= 2);
    cl_int e;
    size_t ss = ebb_stream_io_slot_size(ls, n);
    void **pinned = calloc(ns, sizeof(*pinned)), **mapped = calloc(ns, sizeof(*mapped));
    cl_mem *pbuf = calloc(ns, sizeof(*pbuf)), dev[2];
    for (uint32_t i = 0; i < ns; i++) {
        pbuf[i] =
            clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, ss + 4096, NULL, &e);
        CK(e);
        uint8_t *p = clEnqueueMapBuffer(q, pbuf[i], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                        ss + 4096, 0, NULL, NULL, &e);
        CK(e);
        mapped[i] = p;
        pinned[i] = p + (4096 - (uintptr_t)p % 4096) % 4096;
    }
    for (int i = 0; i < 2; i++) {
        dev[i] = clCreateBuffer(ctx, CL_MEM_READ_ONLY, lsz, NULL, &e);
        CK(e);
    }
    /* The limit: pinned -> device copies alone. */
    memset(pinned[0], 1, lsz);
    CK(clEnqueueWriteBuffer(q, dev[0], CL_TRUE, 0, lsz, pinned[0], 0, NULL, NULL));
    double t0 = now_s();
    for (uint32_t i = 0; i < 2 * n; i++)
        CK(clEnqueueWriteBuffer(q, dev[i % 2], CL_FALSE, 0, lsz, pinned[0], 0, NULL, NULL));
    CK(clFinish(q));
    double h2d = 2.0 * n * lsz / (now_s() - t0) / 1e9;
    const char *th_env = getenv("EBB_STREAM_CL_THREADS");
    uint32_t threads = th_env ? (uint32_t)atoi(th_env) : 1;
    print_message("reader threads: %u\n", threads);
    for (int mode = 0; mode < 3; mode++) {
        struct ebb_stream_io_params p = {.path = file,
                                         .layers = ls,
                                         .n_layer = n,
                                         .slots = pinned,
                                         .n_slots = ns,
                                         .slot_size = ss,
                                         .prefetch = 2,
                                         .cache = (enum ebb_stream_cache)mode,
                                         .n_threads = threads};
        struct ebb_stream_io *io = NULL;
        struct ebb_diag d = {{0}};
        assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_OK);
        assert_int_equal(ebb_stream_io_submit(io, sched, n, &d), EBB_OK);
        cl_event copied[2] = {NULL, NULL};
        uint32_t held[2];
        int n_held = 0;
        int passes = ns >= n ? 6 : 2;
        t0 = now_s();
        double t1 = 0; /* end of the first pass */
        for (int pass = 0; pass < passes; pass++, t1 = t1 ? t1 : now_s())
            for (uint32_t l = 0; l < n; l++) {
                const void *data;
                assert_int_equal(ebb_stream_io_acquire(io, l, &data, NULL, &d), EBB_OK);
                int k = (int)(l % 2);
                if (copied[k]) { /* the copy two layers back used dev[k] and its slot */
                    CK(clWaitForEvents(1, &copied[k]));
                    clReleaseEvent(copied[k]);
                    assert_int_equal(ebb_stream_io_release(io, held[0]), EBB_OK);
                    held[0] = held[1];
                    n_held--;
                }
                CK(clEnqueueWriteBuffer(q, dev[k], CL_FALSE, 0, lsz, data, 0, NULL, &copied[k]));
                CK(clFlush(q));
                held[n_held++] = l;
            }
        CK(clFinish(q));
        double t2 = now_s(), dt = t2 - t0;
        for (int k = 0; k < 2; k++)
            if (copied[k])
                clReleaseEvent(copied[k]);
        struct ebb_stream_io_stats st;
        ebb_stream_io_stats(io, &st);
        const char *mn = mode == 0 ? "cached" : mode == 1 ? "direct" : "dontneed";
        print_message("%-8s: %u layers of %.1f MiB, %u slots, %d passes: %.2f GB/s to the "
                      "device (pinned -> device alone %.2f GB/s); read %llu reused %llu, hits "
                      "%llu misses %llu stall %.3f s; after the first pass %.2f GB/s\n",
                      mn, n, lsz / 1048576.0, ns, passes, (double)passes * n * lsz / dt / 1e9, h2d,
                      (unsigned long long)st.layers_read, (unsigned long long)st.reused,
                      (unsigned long long)st.hits, (unsigned long long)st.misses, st.stall_ns / 1e9,
                      (double)(passes - 1) * n * lsz / (t2 - t1) / 1e9);
        ebb_stream_io_close(io);
    }
    for (int i = 0; i < 2; i++)
        clReleaseMemObject(dev[i]);
    for (uint32_t i = 0; i < ns; i++) {
        CK(clEnqueueUnmapMemObject(q, pbuf[i], mapped[i], 0, NULL, NULL));
        CK(clFinish(q));
        clReleaseMemObject(pbuf[i]);
    }
    free(mapped);
    free(pinned);
    free(pbuf);
    free(ls);
    free(sched);
}

/* Manual: EBB_STREAM_CL_ENGINE_BENCH=FILE runs the fake forward pass through the facade and
 * stream-cl with every layer streamed (layers of EBB_STREAM_CL_LAYER bytes, default 32 MiB),
 * with a ring of 3 slots and with a slot per layer, on the discrete path (unified devices take
 * the unified one), and prints GB/s of streamed weights per step. */
static void engine_bench(void **state)
{
    (void)state;
    const char *file = getenv("EBB_STREAM_CL_ENGINE_BENCH");
    if (!file)
        skip();
    const char *ls_env = getenv("EBB_STREAM_CL_LAYER");
    uint64_t lsz = ls_env ? strtoull(ls_env, NULL, 10) : 32ull << 20;
    FILE *f = fopen(file, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    uint32_t n = (uint32_t)((uint64_t)ftell(f) / lsz);
    fclose(f);
    struct ebb_stream_layer *ls = calloc(n, sizeof(*ls));
    uint64_t *lb = calloc(n, sizeof(*lb));
    for (uint32_t l = 0; l < n; l++) {
        ls[l] = (struct ebb_stream_layer){.off = l * lsz, .size = lsz, .raw_size = lsz};
        lb[l] = lsz;
    }
    cl_bool unified_mem = CL_FALSE;
    clGetDeviceInfo(the_dev, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof(unified_mem), &unified_mem,
                    NULL);
    cl_int e;
    cl_mem out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, 4 * n, NULL, &e);
    uint32_t slot_counts[2] = {3, n};
    for (int t = 0; t < 2; t++) {
        struct ebb_stream_params sp = {.path = file,
                                       .layers = ls,
                                       .plan = {.n_layer = n,
                                                .layer_bytes = lb,
                                                .staging_bytes = 1,
                                                .n_ctx_want = 1,
                                                .margin = 1,
                                                .budget = 2},
                                       .prefetch = 2};
        struct ebb_stream *s = NULL;
        struct ebb_stream_cl *sc = NULL;
        struct ebb_diag d = {{0}};
        assert_int_equal(ebb_stream_new(&sp, &s, &d), EBB_OK);
        assert_int_equal(ebb_stream_n_resident(s), 0);
        struct ebb_stream_cl_params cp = {.ctx = ctx,
                                          .dev = the_dev,
                                          .q = q,
                                          .unified = unified_mem != CL_FALSE,
                                          .n_slots = slot_counts[t],
                                          .slot_size = ebb_stream_slot_size(s),
                                          .layer_size = lsz};
        if (ebb_stream_cl_new(&cp, &sc, &d))
            fail_msg("%s", d.msg);
        assert_int_equal(ebb_stream_attach(s, ebb_stream_cl_slots(sc), slot_counts[t], &d), EBB_OK);
        double t0 = 0, t1;
        int steps = t ? 8 : 3;
        for (int step = 0; step <= steps; step++) {
            if (step == 1)
                t0 = now_s(); /* the first step fills the slots */
            for (uint32_t l = 0; l < n; l++) {
                uint32_t v;
                size_t off;
                assert_int_equal(ebb_stream_cl_begin(sc, s, l, &v, &off, &d), EBB_OK);
                uint32_t one = 1, idx = l, offw = (uint32_t)(off / 4);
                cl_mem w = ebb_stream_cl_view(sc, v);
                size_t g = 1;
                CK(clSetKernelArg(k_sum, 0, sizeof(w), &w));
                CK(clSetKernelArg(k_sum, 1, sizeof(offw), &offw));
                CK(clSetKernelArg(k_sum, 2, sizeof(one), &one));
                CK(clSetKernelArg(k_sum, 3, sizeof(out), &out));
                CK(clSetKernelArg(k_sum, 4, sizeof(idx), &idx));
                CK(clEnqueueNDRangeKernel(q, k_sum, 1, NULL, &g, NULL, 0, NULL, NULL));
                assert_int_equal(ebb_stream_cl_end(sc, s, l, &d), EBB_OK);
            }
            CK(clFinish(q));
            assert_int_equal(ebb_stream_cl_finish(sc, s, &d), EBB_OK);
        }
        t1 = now_s();
        struct ebb_stream_report r;
        ebb_stream_report(s, &r);
        print_message("%s, %u slots: %u layers of %.1f MiB streamed per step, %.1f ms per step "
                      "= %.2f GB/s; read %llu reused %llu misses %llu stall %.3f s\n",
                      cp.unified ? "unified" : "discrete", slot_counts[t], n, lsz / 1048576.0,
                      (t1 - t0) / steps * 1e3, (double)steps * n * lsz / (t1 - t0) / 1e9,
                      (unsigned long long)r.io.layers_read, (unsigned long long)r.io.reused,
                      (unsigned long long)r.io.misses, r.io.stall_ns / 1e9);
        ebb_stream_free(s);
        ebb_stream_cl_free(sc);
    }
    clReleaseMemObject(out);
    free(ls);
    free(lb);
}

int main(void)
{
    cl_uint n = 0;
    if (clGetPlatformIDs(0, NULL, &n) != CL_SUCCESS || !n) {
        fprintf(stderr, "no OpenCL platform: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unified),        cmocka_unit_test(discrete),
        cmocka_unit_test(engine_unified), cmocka_unit_test(engine_discrete),
        cmocka_unit_test(bench),          cmocka_unit_test(engine_bench),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
