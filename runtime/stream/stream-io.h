/* The streamer's I/O thread: reads streamed layers, one large aligned contiguous read per
 * layer, from a GGUF file or a pack into a ring of staging buffers the caller provides (pinned
 * or mapped OpenCL host buffers), working up to `prefetch` layers ahead of the compute thread.
 *
 * Usage (compute thread): ebb_stream_io_submit() the streamed layers of a step in the order
 * the forward pass uses them (the schedule then repeats for every following step until the
 * next submit), then for each streamed layer ebb_stream_io_acquire() (blocks only when its read
 * is not done yet: a prefetch miss, its wait counted as stall time) and, when the device no
 * longer reads the slot, ebb_stream_io_release(). Nothing is allocated per token.
 *
 * Position s of the schedule always uses slot s % n_slots, and a slot that still holds the
 * layer it is about to receive is not read again. So with as many slots as streamed layers (or
 * a multiple), the slots become a host-memory tier: each layer is read once, and every later
 * step costs no I/O (on a discrete GPU: only the pinned host-to-device copy). */
#ifndef EBB_RUNTIME_STREAM_IO_H
#define EBB_RUNTIME_STREAM_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define EBB_STREAM_ALIGN 4096u

enum ebb_stream_codec {
    EBB_STREAM_CODEC_RAW = 0,
    EBB_STREAM_CODEC_ZSTD = 1, /* one zstd frame */
};

/* Where one layer's bytes are in the file. */
struct ebb_stream_layer {
    uint64_t off;      /* file offset of the layer's first byte */
    uint64_t size;     /* bytes stored in the file */
    uint64_t raw_size; /* bytes after decoding (== size for RAW) */
    uint32_t codec;    /* enum ebb_stream_codec */
    bool has_sum;      /* verify `sum` (ebb_hash64 of the stored bytes) on every read */
    uint64_t sum;
};

enum ebb_stream_cache {
    EBB_STREAM_CACHED = 0,   /* plain pread through the page cache */
    EBB_STREAM_DIRECT = 1,   /* O_DIRECT (falls back to CACHED where the file system refuses) */
    EBB_STREAM_DONTNEED = 2, /* pread, then posix_fadvise(DONTNEED) on the range */
};

struct ebb_stream_io_params {
    const char *path;                      /* GGUF or pack file */
    const struct ebb_stream_layer *layers; /* (n_layer) extents; copied */
    uint32_t n_layer;
    void *const *slots; /* (n_slots) staging buffers, EBB_STREAM_ALIGN-aligned, each
                           slot_size bytes (see ebb_stream_io_slot_size); the caller owns them */
    uint32_t n_slots;   /* >= 1 */
    size_t slot_size;
    uint32_t prefetch; /* layers read ahead of the consumer, 1..n_slots (0 = n_slots) */
    enum ebb_stream_cache cache;
    uint32_t n_threads; /* threads sharing each layer's read (in chunks of >= 1 MiB): 0 or 1 =
                           the I/O thread alone; more help page-cache copies and NVMe queues */
};

struct ebb_stream_io_stats {
    uint64_t layers_read;
    uint64_t bytes_read; /* bytes requested from the file (alignment padding included) */
    uint64_t bytes_raw;  /* layer bytes delivered */
    uint64_t read_ns;    /* I/O thread time in reads, checksums and decoding */
    uint64_t hits;       /* acquires whose read was already done */
    uint64_t misses;     /* acquires that had to wait */
    uint64_t stall_ns;   /* total wait in acquire */
    uint64_t dropped;    /* reads thrown away by a submit that changed the schedule */
    uint64_t reused;     /* reads skipped: the slot still held that layer */
    bool direct;         /* O_DIRECT is in effect */
};

struct ebb_stream_io;

/* Bytes one staging slot needs for these layers: the largest raw size plus the alignment
 * padding a direct read adds on both ends. */
size_t ebb_stream_io_slot_size(const struct ebb_stream_layer *layers, uint32_t n);

/* Opens the file, checks every extent against its size and the slots' size and alignment,
 * and starts the I/O thread (idle until the first submit). */
ebb_err ebb_stream_io_open(const struct ebb_stream_io_params *p, struct ebb_stream_io **out,
                           struct ebb_diag *diag);

/* Stops the thread and closes the file; accepts NULL. The slots stay the caller's. */
void ebb_stream_io_close(struct ebb_stream_io *io);

/* Sets the schedule: streamed layer indices in order of use within one step (n may be 0:
 * nothing is read). Call between steps, with no slot acquired. Reads already done or under way
 * that match the start of the new schedule are kept; others are dropped. */
ebb_err ebb_stream_io_submit(struct ebb_stream_io *io, const uint32_t *layers, uint32_t n,
                             struct ebb_diag *diag);

/* Waits until `layer` (the next one in schedule order) is in its slot and returns a pointer
 * to its first raw byte (valid until release) and, if slot is non-NULL, the slot's index (so
 * an engine can use views it prepared per slot). EBB_EINVAL if layer is not the next scheduled
 * one; EBB_EIO / EBB_EFORMAT (checksum, decode) with the layer named in diag; after an error
 * every slot is released and the schedule starts again at its first layer. */
ebb_err ebb_stream_io_acquire(struct ebb_stream_io *io, uint32_t layer, const void **data,
                              uint32_t *slot, struct ebb_diag *diag);

/* Returns the slot of the oldest acquired layer (which must be `layer`) to the I/O thread. */
ebb_err ebb_stream_io_release(struct ebb_stream_io *io, uint32_t layer);

/* A consistent copy of the counters. */
void ebb_stream_io_stats(struct ebb_stream_io *io, struct ebb_stream_io_stats *out);

/* "cached", "direct", "dontneed" -> mode. */
ebb_err ebb_stream_cache_parse(const char *s, enum ebb_stream_cache *out);

#endif
