/* ebb-link-bw: host-to-device copy rate from pinned host memory by the size of each write, the
 * question behind the expert cache's copies (docs/STREAMER.md): a miss is three writes of about
 * 0.9 MiB (gate, up, down) today, where one write of the expert's record would do.
 *
 * Usage: ebb-link-bw [DEVICE] [TOTAL_MIB]
 * Opens DEVICE (as ebb's --device: default the first GPU), a pinned host buffer (mapped
 * CL_MEM_ALLOC_HOST_PTR) and a device buffer of TOTAL_MIB (default 512), and for each write
 * size enqueues non-blocking writes of that size back to back over the whole buffer on one
 * in-order queue, waits, and prints the rate (best of 5 rounds, after one unmeasured round);
 * then the expert pattern: records of 3 writes (sizes a, a, b) against one write of a + a + b,
 * each record to a scattered slot; then records into three pools of one buffer as the expert
 * cache lays them out with EBB_EXPERT_RECT=1, by plain writes and by rectangular ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cl/cl.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes `n` pieces of the sizes in sz (cycled) from host offsets in order into device offsets
 * slot[i] * stride + the piece's place in its record; returns the seconds of the best round. */
static double rounds(struct ebb_cl *cl, cl_mem dev, const uint8_t *host, const size_t *sz, int nsz,
                     size_t stride, const uint32_t *slot, size_t n_rec, int *err)
{
    double best = 1e30;
    for (int r = 0; r < 6 && !*err; r++) {
        double t0 = now_s();
        size_t hoff = 0;
        for (size_t i = 0; i < n_rec && !*err; i++) {
            size_t doff = (size_t)slot[i] * stride;
            for (int k = 0; k < nsz; k++) {
                cl_int e = clEnqueueWriteBuffer(cl->q, dev, CL_FALSE, doff, sz[k], host + hoff, 0,
                                                NULL, NULL);
                if (e) {
                    fprintf(stderr, "ebb-link-bw: write: %s\n", ebb_cl_err_name(e));
                    *err = 1;
                    break;
                }
                doff += sz[k];
                hoff += sz[k];
            }
        }
        clFinish(cl->q);
        double t = now_s() - t0;
        if (r && t < best)
            best = t;
    }
    return best;
}

/* The expert pattern as the expert cache lays a layer out with EBB_EXPERT_RECT=1: three pools
 * of n_rec slots, P bytes apart, in one buffer; record (a, a, b) of slot s to a + s.. of each.
 * rows 3 (b == a): one rectangular write a record; 2: gate and up in one, down in a second;
 * 0: three plain writes. Returns the seconds of the best round. */
static double rounds_rect(struct ebb_cl *cl, cl_mem dev, const uint8_t *host, size_t a, size_t b,
                          size_t P, const uint32_t *slot, size_t n_rec, int rows, int *err)
{
    double best = 1e30;
    for (int r = 0; r < 6 && !*err; r++) {
        double t0 = now_s();
        const uint8_t *h = host;
        for (size_t i = 0; i < n_rec && !*err; i++, h += 2 * a + b) {
            cl_int e = CL_SUCCESS;
            size_t s = slot[i];
            if (rows) {
                size_t bo[3] = {s * a, 0, 0}, ho[3] = {0, 0, 0}, region[3] = {a, (size_t)rows, 1};
                e = clEnqueueWriteBufferRect(cl->q, dev, CL_FALSE, bo, ho, region, P, 0, a, 0, h, 0,
                                             NULL, NULL);
            } else {
                e = clEnqueueWriteBuffer(cl->q, dev, CL_FALSE, s * a, a, h, 0, NULL, NULL);
                if (!e)
                    e = clEnqueueWriteBuffer(cl->q, dev, CL_FALSE, P + s * a, a, h + a, 0, NULL,
                                             NULL);
            }
            if (!e && rows < 3)
                e = clEnqueueWriteBuffer(cl->q, dev, CL_FALSE, 2 * P + s * b, b, h + 2 * a, 0, NULL,
                                         NULL);
            if (e) {
                fprintf(stderr, "ebb-link-bw: write: %s\n", ebb_cl_err_name(e));
                *err = 1;
            }
        }
        clFinish(cl->q);
        double t = now_s() - t0;
        if (r && t < best)
            best = t;
    }
    return best;
}

int main(int argc, char **argv)
{
    const char *spec = argc > 1 && *argv[1] ? argv[1] : NULL;
    long total_mib = argc > 2 ? strtol(argv[2], NULL, 10) : 512;
    if (total_mib < 16 || total_mib > 16384) {
        fprintf(stderr, "ebb-link-bw: TOTAL_MIB %ld: expected 16..16384\n", total_mib);
        return 2;
    }
    size_t total = (size_t)total_mib << 20;
    struct ebb_diag diag = {0};
    struct ebb_cl *cl = NULL;
    if (ebb_cl_open(spec, &cl, &diag)) {
        fprintf(stderr, "ebb-link-bw: %s\n", diag.msg);
        return 1;
    }
    cl_int e = CL_SUCCESS;
    cl_mem pin =
        clCreateBuffer(cl->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, total, NULL, &e);
    uint8_t *host = e ? NULL
                      : clEnqueueMapBuffer(cl->q, pin, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                           total, 0, NULL, NULL, &e);
    cl_mem dev = e ? NULL : clCreateBuffer(cl->ctx, CL_MEM_READ_WRITE, total, NULL, &e);
    if (e) {
        fprintf(stderr, "ebb-link-bw: buffers of %ld MiB: %s\n", total_mib, ebb_cl_err_name(e));
        return 1;
    }
    memset(host, 1, total);
    printf("device: %s; %ld MiB from pinned host memory, best of 5 rounds\n", cl->info.name,
           total_mib);
    int err = 0;
    static const double sizes_kib[] = {64, 256, 864, 1260, 2700, 8192, 65536};
    uint32_t *slot = calloc(total / (64 << 10), sizeof(uint32_t));
    if (!slot)
        return 1;
    for (size_t s = 0; s < sizeof(sizes_kib) / sizeof(sizes_kib[0]) && !err; s++) {
        size_t sz = (size_t)(sizes_kib[s] * 1024), n = total / sz;
        for (size_t i = 0; i < n; i++)
            slot[i] = (uint32_t)i;
        double t = rounds(cl, dev, host, &sz, 1, sz, slot, n, &err);
        printf("writes of %8.0f KiB: %6.2f GB/s (%zu writes, %.3f ms each)\n", sizes_kib[s],
               (double)(n * sz) / t / 1e9, n, t * 1e3 / (double)n);
    }
    /* The expert pattern: Qwen3-30B-A3B's Q4_K_M records (gate and up 884736 bytes, down
     * 1290240), each to a slot taken in a scattered order. */
    size_t rec[3] = {884736, 884736, 1290240}, one = rec[0] + rec[1] + rec[2];
    size_t n_rec = total / one;
    for (size_t i = 0; i < n_rec; i++)
        slot[i] = (uint32_t)((i * 7919) % n_rec);
    double t3 = rounds(cl, dev, host, rec, 3, one, slot, n_rec, &err);
    double t1 = rounds(cl, dev, host, &one, 1, one, slot, n_rec, &err);
    if (!err) {
        printf("experts of %zu bytes as 3 writes: %6.2f GB/s (%.3f ms an expert)\n", one,
               (double)(n_rec * one) / t3 / 1e9, t3 * 1e3 / (double)n_rec);
        printf("experts of %zu bytes as 1 write:  %6.2f GB/s (%.3f ms an expert)\n", one,
               (double)(n_rec * one) / t1 / 1e9, t1 * 1e3 / (double)n_rec);
    }
    /* The same records in one buffer of three pools (EBB_EXPERT_RECT=1): the Q6_K-down layers'
     * (gate and up one write, down another) and the Q4_K-down layers' (all three one write). */
    for (int eq = 0; eq < 2 && !err; eq++) {
        size_t a = rec[0], b = eq ? rec[0] : rec[2], P = total / 3 / b * b, n = P / b;
        for (size_t i = 0; i < n; i++)
            slot[i] = (uint32_t)((i * 7919) % n);
        double tp = rounds_rect(cl, dev, host, a, b, P, slot, n, 0, &err);
        double tr = rounds_rect(cl, dev, host, a, b, P, slot, n, eq ? 3 : 2, &err);
        if (!err)
            printf("experts (%zu, %zu, %zu) in three pools: 3 writes %6.2f GB/s, %d as a "
                   "rectangle%s %6.2f GB/s (%.3f against %.3f ms an expert)\n",
                   a, a, b, (double)(n * (2 * a + b)) / tp / 1e9, eq ? 3 : 2,
                   eq ? ":" : " + 1:", (double)(n * (2 * a + b)) / tr / 1e9, tr * 1e3 / (double)n,
                   tp * 1e3 / (double)n);
    }
    free(slot);
    clEnqueueUnmapMemObject(cl->q, pin, host, 0, NULL, NULL);
    clFinish(cl->q);
    clReleaseMemObject(dev);
    clReleaseMemObject(pin);
    ebb_cl_close(cl);
    return err;
}
