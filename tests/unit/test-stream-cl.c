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

#include "stream-io.h"

#define N_LAYER 5
#define N_SLOTS 3
#define WORDS 6000 /* uint32 per layer */

static char path[64];
static uint32_t *file_words;
static struct ebb_stream_layer layers[N_LAYER];
static cl_context ctx;
static cl_command_queue q;
static cl_kernel k_copy;
static cl_program prog;

static const char *src =
    "__kernel void copy(__global const uint *w, uint off, __global uint *out)\n"
    "{ size_t i = get_global_id(0); out[i] = w[off + i]; }\n";

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
    void *pinned[N_SLOTS];
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
    for (int i = 0; i < N_SLOTS; i++)
        clReleaseMemObject(pbuf[i]); /* a mapped buffer may be released; the mapping goes too */
    clReleaseMemObject(out);
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
    void **pinned = calloc(ns, sizeof(*pinned));
    cl_mem *pbuf = calloc(ns, sizeof(*pbuf)), dev[2];
    for (uint32_t i = 0; i < ns; i++) {
        pbuf[i] =
            clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, ss + 4096, NULL, &e);
        CK(e);
        uint8_t *p = clEnqueueMapBuffer(q, pbuf[i], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                        ss + 4096, 0, NULL, NULL, &e);
        CK(e);
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
    for (int mode = 0; mode < 3; mode++) {
        struct ebb_stream_io_params p = {.path = file,
                                         .layers = ls,
                                         .n_layer = n,
                                         .slots = pinned,
                                         .n_slots = ns,
                                         .slot_size = ss,
                                         .prefetch = 2,
                                         .cache = (enum ebb_stream_cache)mode};
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
    for (uint32_t i = 0; i < ns; i++)
        clReleaseMemObject(pbuf[i]);
    free(pinned);
    free(pbuf);
    free(ls);
    free(sched);
}

int main(void)
{
    cl_uint n = 0;
    if (clGetPlatformIDs(0, NULL, &n) != CL_SUCCESS || !n) {
        fprintf(stderr, "no OpenCL platform: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unified),
        cmocka_unit_test(discrete),
        cmocka_unit_test(bench),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
