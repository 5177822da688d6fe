/* The OpenCL side of the layer streamer: see stream-cl.h. A FIFO keeps, per streamed layer the
 * device has not finished with, the event after which its slot may be reused: on unified
 * devices the re-map of the slot (enqueued after the layer's last kernel), on discrete devices
 * the copy out of the pinned slot. */
#include "stream-cl.h"

#include <stdlib.h>
#include <string.h>

struct fifo_ent {
    uint32_t layer;
    cl_event ev;
};

struct ebb_stream_cl {
    cl_context ctx;
    cl_command_queue q, qio;
    bool unified;
    uint32_t n_slots;
    size_t slot_size, layer_size;
    void **host;      /* (n_slots) 4 KiB-aligned slot memory */
    void **base;      /* (n_slots) unified: the allocation; discrete: the mapped pointer */
    cl_mem *buf;      /* (n_slots) slot buffers */
    cl_mem dev[2];    /* discrete: device copies of streamed layers */
    cl_event done[2]; /* discrete: the compute that last read dev[i] */
    uint32_t k;       /* discrete: the device buffer of the next layer */
    bool in_layer;
    uint32_t cur_slot;
    cl_event cur_copy;
    struct fifo_ent *fifo; /* (n_slots) */
    uint32_t head, count;
    uint64_t waits; /* host waits for a layer's event (ebb_stream_cl_waits) */
};

static ebb_err clerr(struct ebb_diag *diag, cl_int e, const char *what)
{
    return ebb_diag_set(diag,
                        e == CL_OUT_OF_HOST_MEMORY || e == CL_MEM_OBJECT_ALLOCATION_FAILURE
                            ? EBB_ENOMEM
                            : EBB_EDEVICE,
                        "stream-cl: %s failed (OpenCL error %d)", what, (int)e);
}

static void release_ev(cl_event *e)
{
    if (*e)
        clReleaseEvent(*e);
    *e = NULL;
}

ebb_err ebb_stream_cl_new(const struct ebb_stream_cl_params *p, struct ebb_stream_cl **out,
                          struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    cl_int e = CL_SUCCESS;
    if (p->n_slots < 2 || !p->slot_size || (!p->unified && !p->layer_size))
        return ebb_diag_set(diag, EBB_EINVAL, "stream-cl: need >= 2 slots and their sizes");
    struct ebb_stream_cl *sc = calloc(1, sizeof(*sc));
    if (!sc)
        return EBB_ENOMEM;
    sc->ctx = p->ctx;
    sc->q = p->q;
    sc->unified = p->unified;
    sc->n_slots = p->n_slots;
    sc->slot_size = p->slot_size;
    sc->layer_size = p->layer_size;
    sc->host = calloc(p->n_slots, sizeof(*sc->host));
    sc->base = calloc(p->n_slots, sizeof(*sc->base));
    sc->buf = calloc(p->n_slots, sizeof(*sc->buf));
    sc->fifo = calloc(p->n_slots, sizeof(*sc->fifo));
    if (!sc->host || !sc->base || !sc->buf || !sc->fifo) {
        rc = EBB_ENOMEM;
        goto out;
    }
    sc->qio = clCreateCommandQueue(p->ctx, p->dev, 0, &e);
    if (e) {
        rc = clerr(diag, e, "clCreateCommandQueue(copies)");
        goto out;
    }
    for (uint32_t i = 0; i < p->n_slots; i++) {
        if (p->unified) {
            if (posix_memalign(&sc->base[i], EBB_STREAM_ALIGN, p->slot_size)) {
                sc->base[i] = NULL;
                rc = EBB_ENOMEM;
                goto out;
            }
            sc->host[i] = sc->base[i];
            sc->buf[i] = clCreateBuffer(p->ctx, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR,
                                        p->slot_size, sc->host[i], &e);
        } else {
            sc->buf[i] = clCreateBuffer(p->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
                                        p->slot_size + EBB_STREAM_ALIGN, NULL, &e);
        }
        if (e) {
            rc = clerr(diag, e, "clCreateBuffer(staging slot)");
            goto out;
        }
        /* The I/O thread owns every slot at first: mapped. */
        size_t len = p->unified ? p->slot_size : p->slot_size + EBB_STREAM_ALIGN;
        cl_map_flags fl = p->unified ? CL_MAP_WRITE : CL_MAP_READ | CL_MAP_WRITE;
        void *m = clEnqueueMapBuffer(sc->qio, sc->buf[i], CL_TRUE, fl, 0, len, 0, NULL, NULL, &e);
        if (e) {
            rc = clerr(diag, e, "clEnqueueMapBuffer(staging slot)");
            goto out;
        }
        if (p->unified && m != sc->host[i]) {
            clEnqueueUnmapMemObject(sc->qio, sc->buf[i], m, 0, NULL, NULL);
            rc = ebb_diag_set(diag, EBB_EUNSUPPORTED,
                              "stream-cl: the device maps host-pointer buffers elsewhere; "
                              "stage as for a discrete device");
            goto out;
        }
        if (!p->unified) {
            sc->base[i] = m;
            sc->host[i] = (uint8_t *)m +
                          (EBB_STREAM_ALIGN - (uintptr_t)m % EBB_STREAM_ALIGN) % EBB_STREAM_ALIGN;
        }
    }
    for (int i = 0; !p->unified && i < 2; i++) {
        sc->dev[i] = clCreateBuffer(p->ctx, CL_MEM_READ_ONLY, p->layer_size, NULL, &e);
        if (e) {
            rc = clerr(diag, e, "clCreateBuffer(streamed layer)");
            goto out;
        }
    }
    *out = sc;
    sc = NULL;
out:
    ebb_stream_cl_free(sc);
    return rc;
}

void ebb_stream_cl_free(struct ebb_stream_cl *sc)
{
    if (!sc)
        return;
    if (sc->qio)
        clFinish(sc->qio);
    clFinish(sc->q);
    for (uint32_t i = 0; i < sc->count; i++)
        release_ev(&sc->fifo[(sc->head + i) % sc->n_slots].ev);
    release_ev(&sc->cur_copy);
    for (int i = 0; i < 2; i++) {
        release_ev(&sc->done[i]);
        if (sc->dev[i])
            clReleaseMemObject(sc->dev[i]);
    }
    for (uint32_t i = 0; sc->buf && i < sc->n_slots; i++) {
        if (sc->buf[i] && sc->base[i] && sc->qio) {
            void *mapped = sc->unified ? sc->host[i] : sc->base[i];
            clEnqueueUnmapMemObject(sc->qio, sc->buf[i], mapped, 0, NULL, NULL);
        }
    }
    if (sc->qio)
        clFinish(sc->qio);
    for (uint32_t i = 0; sc->buf && i < sc->n_slots; i++) {
        if (sc->buf[i])
            clReleaseMemObject(sc->buf[i]);
        if (sc->unified)
            free(sc->base[i]);
    }
    if (sc->qio)
        clReleaseCommandQueue(sc->qio);
    free(sc->host);
    free(sc->base);
    free(sc->buf);
    free(sc->fifo);
    free(sc);
}

void *const *ebb_stream_cl_slots(const struct ebb_stream_cl *sc)
{
    return sc->host;
}

uint32_t ebb_stream_cl_n_views(const struct ebb_stream_cl *sc)
{
    return sc->unified ? sc->n_slots : 2;
}

cl_mem ebb_stream_cl_view(const struct ebb_stream_cl *sc, uint32_t i)
{
    return sc->unified ? sc->buf[i] : sc->dev[i];
}

/* Gives back the oldest layer's slot once its event is complete (or waits for it). */
static ebb_err pop(struct ebb_stream_cl *sc, struct ebb_stream *s, bool wait, bool *popped,
                   struct ebb_diag *diag)
{
    *popped = false;
    if (!sc->count)
        return EBB_OK;
    struct fifo_ent *f = &sc->fifo[sc->head];
    cl_int st = CL_COMPLETE;
    sc->waits += wait;
    cl_int e =
        wait ? clWaitForEvents(1, &f->ev)
             : clGetEventInfo(f->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(st), &st, NULL);
    if (e)
        return clerr(diag, e, "waiting for a streamed layer");
    if (st < 0)
        return clerr(diag, st, "a streamed layer's copy or mapping");
    if (st != CL_COMPLETE)
        return EBB_OK;
    release_ev(&f->ev);
    sc->head = (sc->head + 1) % sc->n_slots;
    sc->count--;
    *popped = true;
    return ebb_stream_put(s, f->layer);
}

ebb_err ebb_stream_cl_begin(struct ebb_stream_cl *sc, struct ebb_stream *s, uint32_t layer,
                            uint32_t *view, size_t *off, struct ebb_diag *diag)
{
    ebb_err rc;
    bool popped = true;
    if (sc->in_layer)
        return ebb_diag_set(diag, EBB_EINVAL, "stream-cl: begin without end");
    while (popped)
        if ((rc = pop(sc, s, false, &popped, diag)))
            return rc;
    while (sc->count + 1 >= sc->n_slots)
        if ((rc = pop(sc, s, true, &popped, diag)))
            return rc;
    const void *data;
    uint32_t slot;
    if ((rc = ebb_stream_get(s, layer, &data, &slot, diag)))
        return rc;
    cl_event ev = NULL;
    cl_int e;
    if (sc->unified) {
        e = clEnqueueUnmapMemObject(sc->qio, sc->buf[slot], sc->host[slot], 0, NULL, &ev);
        *view = slot;
        *off = (size_t)((const uint8_t *)data - (const uint8_t *)sc->host[slot]);
    } else {
        uint32_t k = sc->k;
        e = clEnqueueWriteBuffer(sc->qio, sc->dev[k], CL_FALSE, 0,
                                 (size_t)ebb_stream_layer_size(s, layer), data, sc->done[k] ? 1 : 0,
                                 sc->done[k] ? &sc->done[k] : NULL, &ev);
        *view = k;
        *off = 0;
    }
    if (!e)
        e = clFlush(sc->qio);
    /* The compute queue waits for the slot's hand-over, not the engine's kernels. */
    if (!e)
        e = clEnqueueBarrierWithWaitList(sc->q, 1, &ev, NULL);
    if (e) {
        release_ev(&ev);
        ebb_stream_put(s, layer);
        return clerr(diag, e, sc->unified ? "unmapping a staging slot" : "copying a layer");
    }
    if (sc->unified)
        release_ev(&ev);
    else
        sc->cur_copy = ev;
    sc->cur_slot = slot;
    sc->in_layer = true;
    return EBB_OK;
}

ebb_err ebb_stream_cl_end(struct ebb_stream_cl *sc, struct ebb_stream *s, uint32_t layer,
                          struct ebb_diag *diag)
{
    (void)s;
    if (!sc->in_layer)
        return ebb_diag_set(diag, EBB_EINVAL, "stream-cl: end without begin");
    sc->in_layer = false;
    cl_event done = NULL, rel = NULL;
    cl_int e = clEnqueueMarkerWithWaitList(sc->q, 0, NULL, &done);
    if (!e)
        e = clFlush(sc->q);
    if (e)
        return clerr(diag, e, "marking a streamed layer's end");
    if (sc->unified) {
        void *m = clEnqueueMapBuffer(sc->qio, sc->buf[sc->cur_slot], CL_FALSE, CL_MAP_WRITE, 0,
                                     sc->slot_size, 1, &done, &rel, &e);
        release_ev(&done);
        if (!e && m != sc->host[sc->cur_slot])
            e = CL_MAP_FAILURE;
        if (!e)
            e = clFlush(sc->qio);
        if (e) {
            release_ev(&rel);
            return clerr(diag, e, "mapping a staging slot back");
        }
    } else {
        release_ev(&sc->done[sc->k]);
        sc->done[sc->k] = done;
        sc->k ^= 1;
        rel = sc->cur_copy;
        sc->cur_copy = NULL;
    }
    sc->fifo[(sc->head + sc->count) % sc->n_slots] = (struct fifo_ent){layer, rel};
    sc->count++;
    return EBB_OK;
}

ebb_err ebb_stream_cl_finish(struct ebb_stream_cl *sc, struct ebb_stream *s, struct ebb_diag *diag)
{
    bool popped;
    ebb_err rc;
    if (sc->in_layer)
        return ebb_diag_set(diag, EBB_EINVAL, "stream-cl: finish inside a layer");
    while (sc->count)
        if ((rc = pop(sc, s, true, &popped, diag)))
            return rc;
    return EBB_OK;
}

uint64_t ebb_stream_cl_waits(const struct ebb_stream_cl *sc)
{
    return sc ? sc->waits : 0;
}
