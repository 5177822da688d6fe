/* The OpenCL side of the layer streamer: staging slots on the device's terms and the per-layer
 * hand-over between the I/O thread and the compute queue (docs/STREAMER.md, "Integration").
 *
 * Unified memory (CPUs, PoCL, integrated GPUs): each slot is host memory wrapped in a
 * CL_MEM_USE_HOST_PTR buffer, and that buffer is the streamed layer's weight buffer; it is
 * unmapped while kernels read it and mapped (CL_MAP_WRITE) while the I/O thread owns it.
 * Discrete GPUs: slots are pinned (CL_MEM_ALLOC_HOST_PTR, mapped once), and each layer is copied
 * asynchronously into one of two device buffers. Copies, maps and unmaps run on a second queue,
 * so they overlap the compute queue; the compute queue waits for them through barriers, so the
 * engine's kernel launches need no event lists.
 *
 * Engine thread only. Nothing is allocated per layer or per token. */
#ifndef EBB_RUNTIME_STREAM_CL_H
#define EBB_RUNTIME_STREAM_CL_H

#include "cl/cl.h"
#include "stream.h"

struct ebb_stream_cl_params {
    cl_context ctx;
    cl_device_id dev;
    cl_command_queue q; /* the engine's in-order compute queue */
    bool unified;       /* CL_DEVICE_HOST_UNIFIED_MEMORY (or a CPU device) */
    uint32_t n_slots;   /* staging slots (>= 2) */
    size_t slot_size;   /* ebb_stream_slot_size() */
    size_t layer_size;  /* discrete: bytes of the largest streamed layer (device buffers) */
};

struct ebb_stream_cl;

/* Creates the slots (and on discrete devices the two device buffers and the copy queue). */
ebb_err ebb_stream_cl_new(const struct ebb_stream_cl_params *p, struct ebb_stream_cl **out,
                          struct ebb_diag *diag);
/* Waits for outstanding work and frees; accepts NULL. Call ebb_stream_cl_finish first, and
 * ebb_stream_free (which stops the I/O thread writing into the slots) before this. */
void ebb_stream_cl_free(struct ebb_stream_cl *sc);

/* The host pointers of the slots, to give to ebb_stream_attach(). */
void *const *ebb_stream_cl_slots(const struct ebb_stream_cl *sc);

/* The buffers a streamed layer can be read from: "views" the engine prepares once (a weight
 * struct per view pointing into it). Unified: one per slot; discrete: the two device buffers. */
uint32_t ebb_stream_cl_n_views(const struct ebb_stream_cl *sc);
cl_mem ebb_stream_cl_view(const struct ebb_stream_cl *sc, uint32_t i);

/* Before a streamed layer's kernels: takes the layer from the streamer (waiting only on a
 * prefetch miss), makes it readable by the compute queue and returns the view holding it and
 * the byte offset of the layer's first byte in that view (unified: the head padding of a direct
 * read; discrete: 0). Releases older layers whose device work is done. */
ebb_err ebb_stream_cl_begin(struct ebb_stream_cl *sc, struct ebb_stream *s, uint32_t layer,
                            uint32_t *view, size_t *off, struct ebb_diag *diag);

/* After the layer's kernels are enqueued: marks the point after which its slot may be reused. */
ebb_err ebb_stream_cl_end(struct ebb_stream_cl *sc, struct ebb_stream *s, uint32_t layer,
                          struct ebb_diag *diag);

/* Waits until the device is done with every streamed layer and gives all slots back (end of an
 * evaluation, before a plan change, before freeing). */
ebb_err ebb_stream_cl_finish(struct ebb_stream_cl *sc, struct ebb_stream *s, struct ebb_diag *diag);

/* Host waits (clWaitForEvents) for streamed layers since creation; 0 for NULL. */
uint64_t ebb_stream_cl_waits(const struct ebb_stream_cl *sc);

#endif
