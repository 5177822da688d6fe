/* ebb-launch-cost: what one kernel launch costs the host and the device on an in-order queue,
 * the question behind decode's launches a token (docs/PERFORMANCE.md): a decoded token of a
 * 48-layer MoE is over 400 launches, each of which the engine thread enqueues in turn.
 *
 * Usage: ebb-launch-cost [DEVICE] [LAUNCHES]
 * Opens DEVICE (as ebb's --device: default the first GPU) and for each case enqueues LAUNCHES
 * (default 2000) launches of a one-work-group kernel back to back, then waits: it prints the
 * host's time a launch in clSetKernelArg and in clEnqueueNDRangeKernel, and the wall time a
 * launch up to the wait's end (best of 5 rounds after one unmeasured round). The cases: kernels
 * of 1 buffer argument, 1 buffer and 8 integers, 8 buffers and a struct of 8 integers, and 8
 * buffers and 8 integers, their arguments set once, set again with the same values before every
 * launch, or changed before every launch (buffers swapped between two sets, or integers
 * stepped); then two threads enqueueing at once, each on a queue of its own (the wall time a
 * launch of the two together). */
#include <pthread.h>
#include <stdbool.h>
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

static const char *src =
    "__kernel void k1(__global float *y)\n"
    "{\n"
    "    if (get_global_id(0) == 0)\n"
    "        y[0] += 1.0f;\n"
    "}\n"
    "typedef struct { int i[8]; } ints8;\n"
    "__kernel void k9s(__global float *y, __global const float *b1, __global const float *b2,\n"
    "                  __global const float *b3, __global const float *b4,\n"
    "                  __global const float *b5, __global const float *b6,\n"
    "                  __global const float *b7, ints8 s)\n"
    "{\n"
    "    if (get_global_id(0) == 0)\n"
    "        y[0] += b1[0] + b2[0] + b3[0] + b4[0] + b5[0] + b6[0] + b7[0] +\n"
    "                (float)(s.i[0] + s.i[1] + s.i[2] + s.i[3] + s.i[4] + s.i[5] + s.i[6] + "
    "s.i[7]);\n"
    "}\n"
    "__kernel void k9i(__global float *y, int i0, int i1, int i2, int i3, int i4, int i5,\n"
    "                  int i6, int i7)\n"
    "{\n"
    "    if (get_global_id(0) == 0)\n"
    "        y[0] += (float)(i0 + i1 + i2 + i3 + i4 + i5 + i6 + i7);\n"
    "}\n"
    "__kernel void k16(__global float *y, __global const float *b1, __global const float *b2,\n"
    "                  __global const float *b3, __global const float *b4,\n"
    "                  __global const float *b5, __global const float *b6,\n"
    "                  __global const float *b7, int i0, int i1, int i2, int i3, int i4,\n"
    "                  int i5, int i6, int i7)\n"
    "{\n"
    "    if (get_global_id(0) == 0)\n"
    "        y[0] += b1[0] + b2[0] + b3[0] + b4[0] + b5[0] + b6[0] + b7[0] +\n"
    "                (float)(i0 + i1 + i2 + i3 + i4 + i5 + i6 + i7);\n"
    "}\n";

enum set_mode { SET_ONCE, SET_SAME, SET_CHANGED };

/* A test kernel: n_mem buffers, then (strct) one struct of 8 integers, then n_int integers. */
struct kdesc {
    const char *fn, *label;
    int n_mem, n_int;
    bool strct;
    cl_kernel k;
};

struct result {
    double arg_us, enq_us, wall_us;
};

/* Sets kd's arguments from buffer set `set` (0 or 1) and integer base `base`. Returns the
 * seconds spent in clSetKernelArg. */
static double set_args(const struct kdesc *kd, cl_mem bufs[2][8], int set, int base, int *err)
{
    double t0 = now_s();
    cl_uint a = 0;
    cl_int e = CL_SUCCESS;
    for (int i = 0; i < kd->n_mem && !e; i++)
        e = clSetKernelArg(kd->k, a++, sizeof(cl_mem), &bufs[set][i]);
    if (kd->strct && !e) {
        int v[8];
        for (int i = 0; i < 8; i++)
            v[i] = base + i;
        e = clSetKernelArg(kd->k, a++, sizeof(v), v);
    }
    for (int i = 0; i < kd->n_int && !e; i++) {
        int v = base + i;
        e = clSetKernelArg(kd->k, a++, sizeof(int), &v);
    }
    if (e) {
        fprintf(stderr, "ebb-launch-cost: clSetKernelArg(%s): %s\n", kd->fn, ebb_cl_err_name(e));
        *err = 1;
    }
    return now_s() - t0;
}

/* n launches of kd on queue q (arguments per mode); the seconds in clSetKernelArg and in
 * clEnqueueNDRangeKernel added to *t_arg / *t_enq. */
static void launches(cl_command_queue q, const struct kdesc *kd, cl_mem bufs[2][8],
                     enum set_mode mode, int n, double *t_arg, double *t_enq, int *err)
{
    size_t g = 64, l = 64;
    *t_arg += set_args(kd, bufs, 0, 0, err);
    for (int i = 0; i < n && !*err; i++) {
        if (mode == SET_SAME)
            *t_arg += set_args(kd, bufs, 0, 0, err);
        else if (mode == SET_CHANGED)
            *t_arg += set_args(kd, bufs, i & 1, i, err);
        double t1 = now_s();
        cl_int e = clEnqueueNDRangeKernel(q, kd->k, 1, NULL, &g, &l, 0, NULL, NULL);
        *t_enq += now_s() - t1;
        if (e) {
            fprintf(stderr, "ebb-launch-cost: enqueue: %s\n", ebb_cl_err_name(e));
            *err = 1;
        }
    }
}

static struct result run_case(struct ebb_cl *cl, const struct kdesc *kd, cl_mem bufs[2][8],
                              enum set_mode mode, int n, int *err)
{
    struct result best = {1e30, 1e30, 1e30};
    for (int r = 0; r < 6 && !*err; r++) {
        double t_arg = 0, t_enq = 0, t0 = now_s();
        launches(cl->q, kd, bufs, mode, n, &t_arg, &t_enq, err);
        clFinish(cl->q);
        double wall = now_s() - t0;
        if (r && wall * 1e6 / n < best.wall_us)
            best = (struct result){t_arg * 1e6 / n, t_enq * 1e6 / n, wall * 1e6 / n};
    }
    return best;
}

/* Two threads, each with its own queue and kernel object, enqueueing n launches of k1 at once. */
struct thr {
    cl_command_queue q;
    struct kdesc kd;
    cl_mem (*bufs)[8];
    int n, err;
    double t_arg, t_enq;
};

static void *thr_main(void *arg)
{
    struct thr *t = arg;
    launches(t->q, &t->kd, t->bufs, SET_ONCE, t->n, &t->t_arg, &t->t_enq, &t->err);
    clFinish(t->q);
    return NULL;
}

static double two_threads(struct ebb_cl *cl, cl_program prog, cl_mem bufs[2][8], int n, int *err)
{
    struct thr t[2];
    double best = 1e30;
    for (int i = 0; i < 2; i++) {
        cl_int e;
        t[i] = (struct thr){.bufs = bufs, .n = n};
        t[i].q = clCreateCommandQueue(cl->ctx, cl->dev, 0, &e);
        t[i].kd = (struct kdesc){"k1", "", 1, 0, false, NULL};
        if (!e)
            t[i].kd.k = clCreateKernel(prog, "k1", &e);
        if (e) {
            fprintf(stderr, "ebb-launch-cost: second queue: %s\n", ebb_cl_err_name(e));
            *err = 1;
            return 0;
        }
    }
    for (int r = 0; r < 6 && !*err; r++) {
        pthread_t th[2];
        double t0 = now_s();
        for (int i = 0; i < 2; i++)
            pthread_create(&th[i], NULL, thr_main, &t[i]);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        double wall = now_s() - t0;
        *err |= t[0].err | t[1].err;
        if (r && wall * 1e6 / (2 * n) < best)
            best = wall * 1e6 / (2 * n);
    }
    for (int i = 0; i < 2; i++) {
        clReleaseKernel(t[i].kd.k);
        clReleaseCommandQueue(t[i].q);
    }
    return best;
}

int main(int argc, char **argv)
{
    const char *spec = argc > 1 && *argv[1] ? argv[1] : NULL;
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 2000;
    if (n < 10 || n > 1000000) {
        fprintf(stderr, "ebb-launch-cost: LAUNCHES %ld: expected 10..1000000\n", n);
        return 2;
    }
    struct ebb_diag diag = {0};
    struct ebb_cl *cl = NULL;
    if (ebb_cl_open(spec, &cl, &diag)) {
        fprintf(stderr, "ebb-launch-cost: %s\n", diag.msg);
        return 1;
    }
    cl_program prog = NULL;
    struct kdesc kds[] = {
        {"k1", "1 buffer", 1, 0, false, NULL},
        {"k9i", "1 buffer, 8 ints", 1, 8, false, NULL},
        {"k9s", "8 buffers, a struct of 8 ints", 8, 0, true, NULL},
        {"k16", "8 buffers, 8 ints", 8, 8, false, NULL},
    };
    int nk = (int)(sizeof(kds) / sizeof(kds[0]));
    if (ebb_cl_program_build(cl, &src, 1, "", &prog, &diag)) {
        fprintf(stderr, "ebb-launch-cost: %s\n", diag.msg);
        return 1;
    }
    for (int i = 0; i < nk; i++)
        if (ebb_cl_kernel(prog, kds[i].fn, &kds[i].k, &diag)) {
            fprintf(stderr, "ebb-launch-cost: %s\n", diag.msg);
            return 1;
        }
    cl_mem bufs[2][8];
    float zero[16] = {0};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 8; i++) {
            cl_int e;
            bufs[s][i] = clCreateBuffer(cl->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                        sizeof(zero), zero, &e);
            if (e) {
                fprintf(stderr, "ebb-launch-cost: buffer: %s\n", ebb_cl_err_name(e));
                return 1;
            }
        }
    printf("device: %s; %ld launches a round, best of 5 rounds; us a launch\n", cl->info.name, n);
    printf("%-52s %8s %8s %8s\n", "kernel arguments: how set", "args", "enqueue", "wall");
    static const char *const mode_name[] = {"set once", "set again, same values",
                                            "changed every launch"};
    int err = 0;
    for (int w = 0; w < nk && !err; w++)
        for (int m = 0; m < 3 && !err; m++) {
            struct result r = run_case(cl, &kds[w], bufs, (enum set_mode)m, (int)n, &err);
            char name[96];
            snprintf(name, sizeof(name), "%s: %s", kds[w].label, mode_name[m]);
            if (!err)
                printf("%-52s %8.2f %8.2f %8.2f\n", name, r.arg_us, r.enq_us, r.wall_us);
        }
    double two = err ? 0 : two_threads(cl, prog, bufs, (int)n, &err);
    if (!err)
        printf("%-52s %8s %8s %8.2f\n", "1 buffer: two threads, a queue each", "", "", two);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 8; i++)
            clReleaseMemObject(bufs[s][i]);
    for (int i = 0; i < nk; i++)
        clReleaseKernel(kds[i].k);
    clReleaseProgram(prog);
    ebb_cl_close(cl);
    return err;
}
