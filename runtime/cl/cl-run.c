/* The OpenCL runtime's calls: error names and checks, kernel arguments, ebb_cl_run with the
 * profiles of EBB_CL_PROFILE and of ebb bench --stages, and the waits (ebb_cl_finish,
 * ebb_cl_read). cl.c (devices, contexts) calls these; nothing here calls back into it. */
#include "cl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cl-int.h"
#include "cl-knobs.h"

#define EBB__CL_ERRS(X)                                                                            \
    X(CL_SUCCESS)                                                                                  \
    X(CL_DEVICE_NOT_FOUND)                                                                         \
    X(CL_DEVICE_NOT_AVAILABLE)                                                                     \
    X(CL_COMPILER_NOT_AVAILABLE)                                                                   \
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE)                                                            \
    X(CL_OUT_OF_RESOURCES)                                                                         \
    X(CL_OUT_OF_HOST_MEMORY)                                                                       \
    X(CL_PROFILING_INFO_NOT_AVAILABLE)                                                             \
    X(CL_MEM_COPY_OVERLAP)                                                                         \
    X(CL_IMAGE_FORMAT_MISMATCH)                                                                    \
    X(CL_IMAGE_FORMAT_NOT_SUPPORTED)                                                               \
    X(CL_BUILD_PROGRAM_FAILURE)                                                                    \
    X(CL_MAP_FAILURE)                                                                              \
    X(CL_MISALIGNED_SUB_BUFFER_OFFSET)                                                             \
    X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)                                                \
    X(CL_COMPILE_PROGRAM_FAILURE)                                                                  \
    X(CL_LINKER_NOT_AVAILABLE)                                                                     \
    X(CL_LINK_PROGRAM_FAILURE)                                                                     \
    X(CL_DEVICE_PARTITION_FAILED)                                                                  \
    X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)                                                            \
    X(CL_INVALID_VALUE)                                                                            \
    X(CL_INVALID_DEVICE_TYPE)                                                                      \
    X(CL_INVALID_PLATFORM)                                                                         \
    X(CL_INVALID_DEVICE)                                                                           \
    X(CL_INVALID_CONTEXT)                                                                          \
    X(CL_INVALID_QUEUE_PROPERTIES)                                                                 \
    X(CL_INVALID_COMMAND_QUEUE)                                                                    \
    X(CL_INVALID_HOST_PTR)                                                                         \
    X(CL_INVALID_MEM_OBJECT)                                                                       \
    X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)                                                          \
    X(CL_INVALID_IMAGE_SIZE)                                                                       \
    X(CL_INVALID_SAMPLER)                                                                          \
    X(CL_INVALID_BINARY)                                                                           \
    X(CL_INVALID_BUILD_OPTIONS)                                                                    \
    X(CL_INVALID_PROGRAM)                                                                          \
    X(CL_INVALID_PROGRAM_EXECUTABLE)                                                               \
    X(CL_INVALID_KERNEL_NAME)                                                                      \
    X(CL_INVALID_KERNEL_DEFINITION)                                                                \
    X(CL_INVALID_KERNEL)                                                                           \
    X(CL_INVALID_ARG_INDEX)                                                                        \
    X(CL_INVALID_ARG_VALUE)                                                                        \
    X(CL_INVALID_ARG_SIZE)                                                                         \
    X(CL_INVALID_KERNEL_ARGS)                                                                      \
    X(CL_INVALID_WORK_DIMENSION)                                                                   \
    X(CL_INVALID_WORK_GROUP_SIZE)                                                                  \
    X(CL_INVALID_WORK_ITEM_SIZE)                                                                   \
    X(CL_INVALID_GLOBAL_OFFSET)                                                                    \
    X(CL_INVALID_EVENT_WAIT_LIST)                                                                  \
    X(CL_INVALID_EVENT)                                                                            \
    X(CL_INVALID_OPERATION)                                                                        \
    X(CL_INVALID_GL_OBJECT)                                                                        \
    X(CL_INVALID_BUFFER_SIZE)                                                                      \
    X(CL_INVALID_MIP_LEVEL)                                                                        \
    X(CL_INVALID_GLOBAL_WORK_SIZE)                                                                 \
    X(CL_INVALID_PROPERTY)                                                                         \
    X(CL_INVALID_IMAGE_DESCRIPTOR)                                                                 \
    X(CL_INVALID_COMPILER_OPTIONS)                                                                 \
    X(CL_INVALID_LINKER_OPTIONS)                                                                   \
    X(CL_INVALID_DEVICE_PARTITION_COUNT)

const char *ebb_cl_err_name(cl_int e)
{
    switch (e) {
#define EBB__CL_ERR_CASE(n)                                                                        \
    case n:                                                                                        \
        return #n;
        EBB__CL_ERRS(EBB__CL_ERR_CASE)
#undef EBB__CL_ERR_CASE
    case -1001:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
        return "CL_UNKNOWN_ERROR";
    }
}

ebb_err ebb_cl_check(cl_int e, struct ebb_diag *diag, const char *what)
{
    if (e == CL_SUCCESS)
        return EBB_OK;
    ebb_err rc = EBB_EDEVICE;
    if (e == CL_OUT_OF_HOST_MEMORY || e == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
        e == CL_OUT_OF_RESOURCES || e == CL_INVALID_BUFFER_SIZE)
        rc = EBB_ENOMEM;
    return ebb_diag_set(diag, rc, "%s: %s (%d)", what, ebb_cl_err_name(e), (int)e);
}

bool ebb__cl_rec_queues; /* ebb_cl_profile_queues: queues opened from now on keep timestamps */
static int prof_state;   /* the profile's state and drain (below, with ebb_cl_run) */
static void prof_drain(void);

void ebb__cl_prof_close(struct ebb_cl *cl)
{
    if (prof_state == 3 && cl->q) {
        clFinish(cl->q);
        prof_drain();
    }
}

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* EBB_DBG_HOSTTIME=1 (a development aid, docs/PERFORMANCE.md "Reading ebb bench"): the engine
 * thread's time in clSetKernelArg and in clEnqueueNDRangeKernel, the latter by kernel, printed
 * on stderr at exit. */
static int dbg_on = -1;
static double ht_arg, ht_enq;
static unsigned long ht_n, ht_na;
static struct {
    cl_kernel k;
    double s;
    unsigned long n;
    char name[48];
    cl_uint na;
} ht_k[128];
static void dbg_print(void)
{
    fprintf(stderr, "ebb: host %lu launches: %lu clSetKernelArg %.3f s, enqueue %.3f s\n", ht_n,
            ht_na, ht_arg, ht_enq);
    for (int i = 0; i < 128 && ht_k[i].k; i++) {
        fprintf(stderr, "ebb: host enqueue %-28s %2u args %8lu launches %7.2f us each\n",
                ht_k[i].name, ht_k[i].na, ht_k[i].n, ht_k[i].s * 1e6 / (double)ht_k[i].n);
    }
}
static void dbg_add(cl_kernel k, double s)
{
    for (int i = 0; i < 128; i++)
        if (!ht_k[i].k || ht_k[i].k == k) {
            if (!ht_k[i].k) {
                clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(ht_k[i].name), ht_k[i].name,
                                NULL);
                clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof(cl_uint), &ht_k[i].na, NULL);
                ht_k[i].name[47] = 0;
            }
            ht_k[i].k = k, ht_k[i].s += s, ht_k[i].n++;
            return;
        }
}
static void dbg_init(void)
{
    if (dbg_on >= 0)
        return;
    dbg_on = getenv("EBB_DBG_HOSTTIME") != NULL;
    if (dbg_on)
        atexit(dbg_print);
}
cl_int ebb__cl_setarg(cl_kernel k, cl_uint i, size_t size, const void *p)
{
    dbg_init();
    if (!dbg_on)
        return clSetKernelArg(k, i, size, p);
    double t0 = mono_s();
    cl_int e = clSetKernelArg(k, i, size, p);
    ht_arg += mono_s() - t0;
    ht_na++;
    return e;
}

ebb_err ebb_cl_set_args(cl_kernel k, cl_uint first, const struct ebb_cl_arg *a, size_t n,
                        struct ebb_diag *diag)
{
    for (size_t i = 0; i < n; i++) {
        cl_int e = ebb__cl_setarg(k, first + (cl_uint)i, a[i].size, a[i].p);
        if (e) {
            char name[64] = "?";
            clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(name), name, NULL);
            name[sizeof(name) - 1] = 0;
            return ebb_diag_set(diag, EBB_EDEVICE, "clSetKernelArg(%s, %u): %s", name,
                                first + (unsigned)i, ebb_cl_err_name(e));
        }
    }
    return EBB_OK;
}

/* EBB_CL_PROFILE=1: every launch waits for its kernel and its wall time is added to a table
 * by kernel name, printed on stderr at exit. A development aid; it serialises the queue.
 * EBB_CL_PROFILE=gpu: nothing waits; the queue records each launch's start and end on the
 * device (CL_QUEUE_PROFILING_ENABLE), read at the next wait (ebb_cl_finish, ebb_cl_read, or
 * every PROF_EV launches), and the table gets each kernel's device time and, apart, the idle
 * time between consecutive launches (launch gaps and host waits). */
#define PROF_MAX 1024
#define PROF_EV 4096
static struct {
    char name[48];
    double s;
    unsigned long n;
} prof[PROF_MAX];
/* prof_state: 0 unknown, 1 off, 2 on (wall), 3 on (device timestamps) */
static struct {
    cl_event ev;
    int slot;
} prof_ev[PROF_EV];
static int prof_nev;
static cl_ulong prof_last_end;
static double prof_gap_s;
static unsigned long prof_gap_n;

static void prof_print(void)
{
    double total = 0;
    for (int i = 0; i < PROF_MAX && prof[i].n; i++)
        total += prof[i].s;
    for (int i = 0; i < PROF_MAX && prof[i].n; i++)
        fprintf(stderr, "ebb: profile %-32s %8lu launches %9.4f s %5.1f%%\n", prof[i].name,
                prof[i].n, prof[i].s, total > 0 ? 100.0 * prof[i].s / total : 0.0);
    if (prof_state == 3)
        fprintf(stderr, "ebb: profile %-32s %8lu launches %9.4f s (device idle between launches)\n",
                "(gaps)", prof_gap_n, prof_gap_s);
}

/* The table slot of kernel k's name, or with device timestamps of its name and global size
 * (the products of a layer apart); -1 when full. */
static int prof_slot(cl_kernel k, const size_t *g, cl_uint dims)
{
    char name[48] = "?";
    clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(name), name, NULL);
    name[sizeof(name) - 1] = 0;
    if (prof_state == 3 && g) {
        size_t n = strlen(name);
        for (cl_uint d = 0; d < dims && n < sizeof(name) - 12; d++)
            n += (size_t)snprintf(name + n, sizeof(name) - n, "%c%zu", d ? 'x' : '/', g[d]);
    }
    for (int i = 0; i < PROF_MAX; i++) {
        if (!prof[i].n || !strcmp(prof[i].name, name)) {
            if (!prof[i].n)
                memcpy(prof[i].name, name, sizeof(name));
            return i;
        }
    }
    return -1;
}

static void prof_add(cl_kernel k, double s)
{
    int i = prof_slot(k, NULL, 0);
    if (i >= 0) {
        prof[i].s += s;
        prof[i].n++;
    }
}

/* Device timestamps of the recorded launches into the table (they have all completed or are
 * waited for here). */
static void prof_drain(void)
{
    if (prof_nev)
        clWaitForEvents(1, &prof_ev[prof_nev - 1].ev);
    for (int i = 0; i < prof_nev; i++) {
        cl_ulong t0 = 0, t1 = 0;
        clGetEventProfilingInfo(prof_ev[i].ev, CL_PROFILING_COMMAND_START, sizeof(t0), &t0, NULL);
        clGetEventProfilingInfo(prof_ev[i].ev, CL_PROFILING_COMMAND_END, sizeof(t1), &t1, NULL);
        clReleaseEvent(prof_ev[i].ev);
        if (prof_ev[i].slot >= 0 && t1 >= t0) {
            prof[prof_ev[i].slot].s += (double)(t1 - t0) * 1e-9;
            prof[prof_ev[i].slot].n++;
        }
        if (prof_last_end && t0 > prof_last_end) {
            prof_gap_s += (double)(t0 - prof_last_end) * 1e-9;
            prof_gap_n++;
        }
        if (t1 > prof_last_end)
            prof_last_end = t1;
    }
    prof_nev = 0;
}

/* A caller's profile (ebb_cl_profile_begin .. ebb_cl_profile_take): each launch keeps its
 * event and its table slot by plain kernel name; the device's start and end timestamps are
 * read back when the events are drained (at take, or when PROF_EV are pending, which waits for
 * the queue then). Independent of EBB_CL_PROFILE's table. */
static struct {
    bool on;
    int nev;
    unsigned long missing; /* launches whose queue gave no timestamps */
    struct {
        cl_event ev;
        int slot;
    } ev[PROF_EV];
    struct ebb_cl_profile tab[PROF_MAX];
    size_t n;
} rec;

static int rec_slot(cl_kernel k)
{
    char name[sizeof(rec.tab[0].name)] = "?";
    clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(name), name, NULL);
    name[sizeof(name) - 1] = 0;
    for (size_t i = 0; i < rec.n; i++)
        if (!strcmp(rec.tab[i].name, name))
            return (int)i;
    if (rec.n == PROF_MAX)
        return -1;
    memset(&rec.tab[rec.n], 0, sizeof(rec.tab[0]));
    memcpy(rec.tab[rec.n].name, name, sizeof(name));
    return (int)rec.n++;
}

/* Waits for the pending launches and adds their device times to the table. */
static void rec_drain(void)
{
    for (int i = 0; i < rec.nev; i++) {
        cl_ulong t0 = 0, t1 = 0;
        cl_int e = clWaitForEvents(1, &rec.ev[i].ev);
        if (!e)
            e = clGetEventProfilingInfo(rec.ev[i].ev, CL_PROFILING_COMMAND_START, sizeof(t0), &t0,
                                        NULL);
        if (!e)
            e = clGetEventProfilingInfo(rec.ev[i].ev, CL_PROFILING_COMMAND_END, sizeof(t1), &t1,
                                        NULL);
        clReleaseEvent(rec.ev[i].ev);
        if (e || t1 < t0) {
            rec.missing++;
            continue;
        }
        if (rec.ev[i].slot >= 0) {
            rec.tab[rec.ev[i].slot].ms += (double)(t1 - t0) * 1e-6;
            rec.tab[rec.ev[i].slot].n++;
        }
    }
    rec.nev = 0;
}

static void rec_push(cl_kernel k, cl_event ev)
{
    if (rec.nev == PROF_EV)
        rec_drain();
    rec.ev[rec.nev].ev = ev;
    rec.ev[rec.nev++].slot = rec_slot(k);
}

void ebb_cl_profile_queues(bool on)
{
    ebb__cl_rec_queues = on;
}

void ebb_cl_profile_begin(void)
{
    rec_drain();
    rec.n = 0;
    rec.missing = 0;
    rec.on = true;
}

ebb_err ebb_cl_profile_take(struct ebb_cl_profile *tab, size_t cap, size_t *n,
                            struct ebb_diag *diag)
{
    rec_drain();
    rec.on = false;
    if (rec.missing)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "%lu kernel launches have no device timestamps (the queue was "
                            "opened without profiling)",
                            rec.missing);
    if (rec.n > cap)
        return ebb_diag_set(diag, EBB_ERANGE, "%zu kernel names, room for %zu", rec.n, cap);
    memcpy(tab, rec.tab, sizeof(rec.tab[0]) * rec.n);
    *n = rec.n;
    return EBB_OK;
}

ebb_err ebb_cl_run(struct ebb_cl *cl, cl_kernel k, cl_uint dims, const size_t *global,
                   const size_t *local, struct ebb_diag *diag)
{
    if (!prof_state) {
        struct ebb_cl_env env;
        ebb_cl_env_get(&env);
        prof_state = env.profile == 2 ? 3 : env.profile == 1 ? 2 : 1;
        if (prof_state >= 2)
            atexit(prof_print);
    }
    double t0 = 0;
    if (prof_state == 2) {
        clFinish(cl->q);
        t0 = mono_s();
    }
    /* A CPU device's grid of several dimensions without a local size: (the largest power of two
     * up to 64 that divides the first, 1, 1). PoCL compiles a kernel once per local size, and the
     * one it picked for a NULL local size followed the grid's other dimensions, the rows of a
     * prompt: a CI run built get_rows 336 times and swiglu 130 times, once per prompt length. */
    size_t lw[3] = {1, 1, 1};
    if (!local && dims > 1 && cl->info.is_cpu) {
        while (lw[0] < 64 && global[0] % (lw[0] * 2) == 0 && lw[0] * 2 <= cl->info.max_wg)
            lw[0] *= 2;
        local = lw;
    }
    size_t g[3];
    for (cl_uint i = 0; i < dims; i++) {
        g[i] = global[i];
        if (local && g[i] % local[i])
            g[i] += local[i] - g[i] % local[i];
        if (!g[i])
            return EBB_OK;
    }
    cl_event ev = NULL;
    dbg_init();
    double th = dbg_on ? mono_s() : 0;
    cl_int e = clEnqueueNDRangeKernel(cl->q, k, dims, NULL, g, local, 0, NULL,
                                      prof_state == 3 || rec.on ? &ev : NULL);
    if (dbg_on) {
        double dt = mono_s() - th;
        ht_enq += dt, ht_n++;
        dbg_add(k, dt);
    }

    if (e) {
        char name[64] = "?";
        clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(name), name, NULL);
        name[sizeof(name) - 1] = 0;
        return ebb_diag_set(diag, e == CL_OUT_OF_RESOURCES ? EBB_ENOMEM : EBB_EDEVICE,
                            "enqueue %s: %s", name, ebb_cl_err_name(e));
    }
    cl->n_launch++;
    if (ev && rec.on) {
        if (prof_state == 3)
            clRetainEvent(ev); /* the env profile below keeps its own reference */
        rec_push(k, ev);
    }
    if (ev && prof_state == 3) {
        if (prof_nev == PROF_EV)
            prof_drain();
        prof_ev[prof_nev].ev = ev;
        prof_ev[prof_nev++].slot = prof_slot(k, g, dims);
    }
    if (prof_state == 2) {
        clFinish(cl->q);
        prof_add(k, mono_s() - t0);
    }
    return EBB_OK;
}

ebb_err ebb_cl_finish(struct ebb_cl *cl, struct ebb_diag *diag)
{
    cl->n_sync++;
    double t0 = mono_s();
    ebb_err rc = ebb_cl_check(clFinish(cl->q), diag, "clFinish");
    cl->wait_ns += (uint64_t)((mono_s() - t0) * 1e9);
    if (prof_state == 3)
        prof_drain();
    return rc;
}

ebb_err ebb_cl_read(struct ebb_cl *cl, cl_mem b, size_t off, size_t n, void *dst,
                    struct ebb_diag *diag)
{
    cl->n_sync++;
    double t0 = mono_s();
    cl_int e = clEnqueueReadBuffer(cl->q, b, CL_TRUE, off, n, dst, 0, NULL, NULL);
    cl->wait_ns += (uint64_t)((mono_s() - t0) * 1e9);
    if (prof_state == 3)
        prof_drain();
    return ebb_cl_check(e, diag, "reading results");
}
