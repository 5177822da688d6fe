/* The layer split (docs/SCALING.md, "Layer split"): one model's decoder layers spread over
 * several OpenCL devices, each device an engine (a stage, struct clm) that holds the weights and
 * the KV cache of a range of consecutive layers only. This file chooses the ranges and moves
 * the residual rows from one stage to the next; model-cl.c builds the stages and runs them in
 * turn. The devices need not share a context (two GPUs of one vendor's platform may, a GPU and
 * a CPU device do not), so the rows go through host memory: read from one device into a pinned
 * buffer, written from it to the next. */
#include "model-cl-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "model.h"
#include "stream/memprobe.h"

/* The probes' device-memory hook: the driver's own free-memory query (AMD). */
static bool dev_read(void *u, uint64_t *total, uint64_t *free_bytes)
{
    const struct ebb_cl *cl = u;
    if (!ebb_cl_free_memory(cl, free_bytes))
        return false;
    *total = cl->info.global_mem;
    return true;
}

/* The memory a device may still take, as the residency planner reads it: device memory (NVML,
 * the driver) for a discrete GPU, the host's (MemAvailable, the cgroup) for a CPU or a GPU
 * sharing host memory; the device's global memory where no probe answers. */
static uint64_t device_free(const struct ebb_cl *cl)
{
    const struct ebb_cl_dev_info *in = &cl->info;
    bool discrete = !in->host_unified;
    struct ebb_memprobe_params pp = {
        .discrete = discrete,
        .pci_bus_id = discrete && in->pci_bus_id[0] ? in->pci_bus_id : NULL,
        .uuid = discrete && in->uuid[0] ? in->uuid : NULL,
        .dev_read = discrete ? dev_read : NULL,
        .dev_u = (void *)cl,
    };
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    uint64_t v = in->global_mem;
    if (ebb_memprobe_new(&pp, &mp, NULL) == EBB_OK) {
        if (ebb_memprobe_read(mp, &r) == EBB_OK && r.available_ok && r.available)
            v = r.available < in->global_mem || !in->global_mem ? r.available : in->global_mem;
        ebb_memprobe_free(mp);
    }
    return v;
}

/* "3,1": n positive numbers into w. */
static ebb_err parse_shares(const char *s, uint32_t n, double *w, struct ebb_diag *diag)
{
    const char *p = s;
    for (uint32_t i = 0; i < n; i++) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v > 0) || v > 1e12)
            return ebb_diag_set(diag, EBB_EINVAL,
                                "--tensor-split '%s': element %u is not a positive number", s,
                                i + 1);
        w[i] = v;
        p = end;
        if (i + 1 < n && *p++ != ',')
            return ebb_diag_set(diag, EBB_EINVAL, "--tensor-split '%s': %u numbers for %u devices",
                                s, i + 1, n);
    }
    if (*p)
        return ebb_diag_set(diag, EBB_EINVAL,
                            "--tensor-split '%s': more numbers than the %u devices (or a stray "
                            "'%s')",
                            s, n, p);
    return EBB_OK;
}

/* Boundaries in proportion to w: device i takes layers bounds[i]..bounds[i+1]-1, the cumulative
 * share rounded, every device at least one layer. */
static void cut(uint32_t n_layer, const double *w, uint32_t n, uint32_t *bounds)
{
    double sum = 0, acc = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += w[i];
    bounds[0] = 0;
    for (uint32_t i = 1; i < n; i++) {
        acc += w[i - 1];
        double b = (double)n_layer * acc / sum + 0.5;
        uint32_t v = (uint32_t)b;
        uint32_t lo = bounds[i - 1] + 1, hi = n_layer - (n - i);
        bounds[i] = v < lo ? lo : v > hi ? hi : v;
    }
    bounds[n] = n_layer;
}

ebb_err ebb__clm_split_open(const struct ebb__hparams *hp, const struct ebb_gguf *g,
                            const struct ebb_model_params *p, struct ebb_cl **cls, uint32_t *bounds,
                            uint32_t *n, struct ebb_diag *diag)
{
    char ids[SPLIT_MAX][EBB_CL_ID_MAX];
    size_t nd = 0;
    double w[SPLIT_MAX];
    ebb_err rc = EBB_OK;
    *n = 0;
    if (!ebb_cl_spec_is_list(p->device))
        return EBB_OK;
    if (p->split == EBB_SPLIT_NONE)
        return ebb_diag_set(diag, EBB_EINVAL,
                            "device '%s' names several devices: data parallel (--split none) is "
                            "for 'ebb serve', one engine per device; --split layer runs one "
                            "model across them",
                            p->device);
    if (p->memory_budget || p->memory_budget_auto || p->residency_forced || p->residency > 0 ||
        p->pack_path || p->host_layers || p->expert_cache || getenv("EBB_EXPERT_CACHE") ||
        getenv("EBB_TEST_RESIDENCY"))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "--split layer does not stream layers or experts yet: "
                            "--memory-budget, --residency, --pack, --host-layers and "
                            "--expert-cache take one device");
    if ((rc = ebb_cl_devices(p->device, ids, SPLIT_MAX, &nd, diag)))
        return rc;
    if (nd == 1) { /* "all" on a machine with one device: nothing to split */
        ebb_log(EBB_LOG_INFO, "model", "device '%s' is one device (%s): nothing to split",
                p->device, ids[0]);
        if ((rc = ebb_cl_open(ids[0], &cls[0], diag)))
            return rc;
        bounds[0] = 0;
        bounds[1] = hp->n_layer;
        *n = 1;
        return EBB_OK;
    }
    if (nd > hp->n_layer)
        return ebb_diag_set(diag, EBB_EINVAL, "--split layer: %zu devices for %u layers", nd,
                            hp->n_layer);
    if (p->tensor_split && (rc = parse_shares(p->tensor_split, (uint32_t)nd, w, diag)))
        return rc;
    for (size_t i = 0; i < nd && !rc; i++) {
        struct ebb_diag d = {{0}};
        if ((rc = ebb_cl_open(ids[i], &cls[i], &d)))
            rc = ebb_diag_set(diag, rc, "--split layer: device %s: %s", ids[i], d.msg);
        else if (!p->tensor_split)
            w[i] = (double)device_free(cls[i]);
    }
    if (rc) {
        for (size_t i = 0; i < nd; i++) {
            ebb_cl_close(cls[i]);
            cls[i] = NULL;
        }
        return rc;
    }
    for (size_t i = 0; i < nd; i++)
        w[i] = w[i] > 0 ? w[i] : 1;
    cut(hp->n_layer, w, (uint32_t)nd, bounds);
    char line[1024];
    size_t o = 0;
    for (size_t i = 0; i < nd && o < sizeof(line); i++)
        o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%s (%s) layers %u-%u", i ? ", " : "",
                              ids[i], cls[i]->info.name, bounds[i], bounds[i + 1] - 1);
    ebb_log(EBB_LOG_INFO, "model", "layer split of %u layers (%s): %s", hp->n_layer,
            p->tensor_split ? p->tensor_split : "by free memory", line);
    (void)g;
    *n = (uint32_t)nd;
    return EBB_OK;
}

ebb_err ebb__clm_split_hand_new(struct clm *m, struct ebb_diag *diag)
{
    size_t bytes = sizeof(float) * m->n_batch * m->hp.n_embd;
    cl_int e = CL_SUCCESS;
    m->hand =
        clCreateBuffer(m->cl->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &e);
    if (e)
        return ebb_cl_check(e, diag, "clCreateBuffer(pinned rows for the next device)");
    m->hand_p = clEnqueueMapBuffer(m->cl->q, m->hand, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes,
                                   0, NULL, NULL, &e);
    return ebb_cl_check(e, diag, "clEnqueueMapBuffer(pinned rows for the next device)");
}

ebb_err ebb__clm_split_send(struct clm *m, int nt, struct ebb_diag *diag)
{
    size_t bytes = sizeof(float) * m->hp.n_embd * (size_t)nt;
    cl_int e = CL_SUCCESS;
    ebb_err rc;
    if (m->hand_ev) { /* the previous rows must have left hand_p before new ones land */
        e = clWaitForEvents(1, &m->hand_ev);
        m->cl->n_sync++;
        clReleaseEvent(m->hand_ev);
        m->hand_ev = NULL;
        if ((rc = ebb_cl_check(e, diag, "waiting for the rows sent to the next device")))
            return rc;
    }
    if (!m->tu.split_gate) {
        /* The host waits for the rows, then writes them with nothing to wait for: the next
         * device's step is enqueued after this returns. */
        e = clEnqueueReadBuffer(m->cl->q, m->x, CL_TRUE, 0, bytes, m->hand_p, 0, NULL, NULL);
        m->cl->n_sync++;
        if ((rc = ebb_cl_check(e, diag, "reading rows for the next device")))
            return rc;
        e = clEnqueueWriteBuffer(m->next->cl->q, m->next->x, CL_FALSE, 0, bytes, m->hand_p, 0, NULL,
                                 &m->hand_ev);
        m->hand_n++;
        return ebb_cl_check(e, diag, "writing rows to the next device");
    }
    e = clEnqueueReadBuffer(m->cl->q, m->x, CL_FALSE, 0, bytes, m->hand_p, 0, NULL, &m->hand_rd);
    if ((rc = ebb_cl_check(e, diag, "reading rows for the next device")))
        return rc;
    clFlush(m->cl->q);
    m->hand_gate = clCreateUserEvent(m->next->cl->ctx, &e);
    if ((rc = ebb_cl_check(e, diag, "clCreateUserEvent (rows for the next device)")))
        return rc;
    e = clEnqueueWriteBuffer(m->next->cl->q, m->next->x, CL_FALSE, 0, bytes, m->hand_p, 1,
                             &m->hand_gate, &m->hand_ev);
    m->hand_n++;
    return ebb_cl_check(e, diag, "writing rows to the next device");
}

ebb_err ebb__clm_split_gates(struct clm *m, bool ok, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    for (; m; m = m->next) {
        if (m->hand_rd) {
            if (ok && !rc) {
                cl_int e = clWaitForEvents(1, &m->hand_rd);
                m->cl->n_sync++;
                rc = ebb_cl_check(e, diag, "reading rows for the next device");
            }
            clReleaseEvent(m->hand_rd);
            m->hand_rd = NULL;
        }
        if (m->hand_gate) {
            /* a failed step ends the next device's waiting commands instead of leaving its
             * queue blocked */
            clSetUserEventStatus(m->hand_gate, ok && !rc ? CL_COMPLETE : -1);
            clReleaseEvent(m->hand_gate);
            m->hand_gate = NULL;
            clFlush(m->next->cl->q);
        }
    }
    return rc;
}

void ebb__clm_split_hand_free(struct clm *m)
{
    ebb__clm_split_gates(m, false, NULL);
    if (m->hand_ev) {
        clWaitForEvents(1, &m->hand_ev);
        clReleaseEvent(m->hand_ev);
        m->hand_ev = NULL;
    }
    if (m->hand && m->hand_p)
        clEnqueueUnmapMemObject(m->cl->q, m->hand, m->hand_p, 0, NULL, NULL);
    if (m->hand_p)
        clFinish(m->cl->q);
    if (m->hand)
        clReleaseMemObject(m->hand);
    m->hand = NULL;
    m->hand_p = NULL;
}

bool ebb_model_split_needed(const char *path, const char *spec)
{
    char ids[SPLIT_MAX][EBB_CL_ID_MAX];
    size_t nd = 0;
    struct stat st;
    if (!path || !ebb_cl_spec_is_list(spec) || stat(path, &st) != 0 ||
        ebb_cl_devices(spec, ids, SPLIT_MAX, &nd, NULL) || nd < 2)
        return false;
    uint64_t least = UINT64_MAX;
    for (size_t i = 0; i < nd; i++) {
        struct ebb_cl *cl = NULL;
        if (ebb_cl_open(ids[i], &cl, NULL))
            return false;
        uint64_t f = device_free(cl);
        least = f < least ? f : least;
        ebb_cl_close(cl);
    }
    /* a tenth kept for the KV cache and the buffers */
    return (uint64_t)st.st_size > least / 10 * 9;
}
