/* The streamer's I/O thread: see stream-io.h. Schedule positions are numbered by a monotonic
 * sequence s (position s uses layer sched[(s - base) % n_sched] and slot s % ring, where ring is
 * n_slots, or its largest multiple of n_sched when there are at least as many slots as
 * scheduled layers, so that a layer keeps its slot from step to step); three
 * cursors move forward: next_read (I/O thread), next_acq and next_rel (compute thread). The
 * I/O thread may read position s once s < next_acq + prefetch and s < next_rel + ring. */
#include "stream-io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "pack.h"
#include "stream-pool.h"

struct ebb_stream_io {
    int fd;
    bool direct;
    enum ebb_stream_cache cache;
    struct ebb_stream_layer *layers;
    uint32_t n_layer;
    uint8_t **slots;
    uint32_t n_slots, prefetch;
    uint32_t ring; /* slots in use by the current schedule (see the top of the file) */
    size_t slot_size;
    uint8_t *scratch; /* compressed layers land here before decoding */
    size_t scratch_size;
    ZSTD_DCtx *dctx;

    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t io_cv, done_cv;
    bool stop, busy;
    uint32_t *sched;
    uint32_t n_sched;
    uint64_t base, next_read, next_acq, next_rel;
    uint64_t *slot_seq;   /* position whose read completed into the slot; UINT64_MAX = none */
    uint64_t *slot_off;   /* first raw byte inside the slot */
    uint32_t *slot_layer; /* whose bytes the slot holds (valid after a good read); UINT32_MAX */
    ebb_err *slot_err;
    char (*slot_msg)[160];
    struct ebb_stream_io_stats st;
    /* Reader helpers: a layer's read split into chunks read in parallel (stream-pool.h). */
    struct ebb_stream_pool *pool;
    struct {
        int fd;
        uint8_t *dst;
        uint64_t off, len, chunk, got;
        int err; /* errno of a failed chunk */
        pthread_mutex_t mu;
    } job;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t align_down(uint64_t v)
{
    return v & ~(uint64_t)(EBB_STREAM_ALIGN - 1);
}

static uint64_t align_up(uint64_t v)
{
    return align_down(v + EBB_STREAM_ALIGN - 1);
}

size_t ebb_stream_io_slot_size(const struct ebb_stream_layer *layers, uint32_t n)
{
    uint64_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t need = layers[i].codec == EBB_STREAM_CODEC_RAW
                            ? layers[i].size + 2 * EBB_STREAM_ALIGN
                            : layers[i].raw_size;
        if (need > m)
            m = need;
    }
    return (size_t)align_up(m);
}

static uint32_t layer_at(const struct ebb_stream_io *io, uint64_t s)
{
    return io->sched[(s - io->base) % io->n_sched];
}

/* Reads all of [off, off + len) into dst; short only at the end of the file. */
static ebb_err read_all(int fd, uint8_t *dst, uint64_t off, uint64_t len, uint64_t *got)
{
    uint64_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, dst + done, (size_t)(len - done), (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return EBB_EIO;
        if (r == 0)
            break;
        done += (uint64_t)r;
    }
    *got = done;
    return EBB_OK;
}

/* Chunk i of the current job (a pool task). */
static void read_chunk(void *ctx, uint32_t i)
{
    struct ebb_stream_io *io = ctx;
    uint64_t a = (uint64_t)i * io->job.chunk;
    uint64_t l = io->job.len - a < io->job.chunk ? io->job.len - a : io->job.chunk, got = 0;
    ebb_err rc = read_all(io->job.fd, io->job.dst + a, io->job.off + a, l, &got);
    int err = rc ? errno : 0;
    pthread_mutex_lock(&io->job.mu);
    if (rc && !io->job.err)
        io->job.err = err ? err : EIO;
    if (got < l && a + got < io->job.got)
        io->job.got = a + got; /* the file ends inside this chunk */
    pthread_mutex_unlock(&io->job.mu);
}

/* read_all, split over the pool's threads when there are several and the read is large;
 * *err = errno. */
static ebb_err read_par(struct ebb_stream_io *io, uint8_t *dst, uint64_t off, uint64_t len,
                        uint64_t *got, int *err)
{
    const uint64_t min_chunk = 1u << 20;
    uint32_t nt = io->pool ? ebb_stream_pool_threads(io->pool) : 1;
    if (nt < 2 || len < 2 * min_chunk) {
        ebb_err rc = read_all(io->fd, dst, off, len, got);
        *err = rc ? errno : 0;
        return rc;
    }
    uint64_t chunk = align_up((len + nt - 1) / nt);
    if (chunk < min_chunk)
        chunk = min_chunk;
    io->job.fd = io->fd;
    io->job.dst = dst;
    io->job.off = off;
    io->job.len = len;
    io->job.chunk = chunk;
    io->job.got = len;
    io->job.err = 0;
    ebb_stream_pool_run(io->pool, (uint32_t)((len + chunk - 1) / chunk), read_chunk, io);
    *got = io->job.got;
    *err = io->job.err;
    return *err ? EBB_EIO : EBB_OK;
}

/* Reads one layer into slot (I/O thread, without the lock). */
static ebb_err read_layer(struct ebb_stream_io *io, uint32_t li, uint8_t *slot, uint64_t *data_off,
                          char *msg, size_t cap)
{
    const struct ebb_stream_layer *L = &io->layers[li];
    bool raw = L->codec == EBB_STREAM_CODEC_RAW;
    uint8_t *dst = raw ? slot : io->scratch;
    uint64_t start = io->direct ? align_down(L->off) : L->off;
    uint64_t end = io->direct ? align_up(L->off + L->size) : L->off + L->size;
    uint64_t got = 0, t0 = now_ns();
    int err = 0;
    ebb_err rc = read_par(io, dst, start, end - start, &got, &err);
    if (rc) {
        snprintf(msg, cap, "layer %u: read of %llu bytes at %llu failed: %s", li,
                 (unsigned long long)(end - start), (unsigned long long)start, strerror(err));
        return rc;
    }
    if (got < L->off + L->size - start) {
        snprintf(msg, cap, "layer %u: file ends %llu bytes into a %llu-byte layer (truncated?)", li,
                 (unsigned long long)(got > L->off - start ? got - (L->off - start) : 0),
                 (unsigned long long)L->size);
        return EBB_EFORMAT;
    }
    if (io->cache == EBB_STREAM_DONTNEED)
        posix_fadvise(io->fd, (off_t)start, (off_t)(end - start), POSIX_FADV_DONTNEED);
    const uint8_t *stored = dst + (L->off - start);
    if (L->has_sum && ebb_hash64(stored, L->size, 0) != L->sum) {
        snprintf(msg, cap, "layer %u: checksum mismatch (stored bytes at offset %llu corrupt)", li,
                 (unsigned long long)L->off);
        return EBB_EFORMAT;
    }
    if (raw) {
        *data_off = L->off - start;
    } else {
        size_t n = ZSTD_decompressDCtx(io->dctx, slot, io->slot_size, stored, L->size);
        if (ZSTD_isError(n) || n != L->raw_size) {
            snprintf(msg, cap, "layer %u: zstd frame does not decode to %llu bytes: %s", li,
                     (unsigned long long)L->raw_size,
                     ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong size");
            return EBB_EFORMAT;
        }
        *data_off = 0;
    }
    pthread_mutex_lock(&io->mu);
    io->st.layers_read++;
    io->st.bytes_read += end - start;
    io->st.bytes_raw += L->raw_size;
    io->st.read_ns += now_ns() - t0;
    pthread_mutex_unlock(&io->mu);
    return EBB_OK;
}

static void *io_main(void *arg)
{
    struct ebb_stream_io *io = arg;
    pthread_mutex_lock(&io->mu);
    while (!io->stop) {
        uint64_t s = io->next_read;
        if (!io->n_sched || s >= io->next_acq + io->prefetch || s >= io->next_rel + io->ring) {
            pthread_cond_wait(&io->io_cv, &io->mu);
            continue;
        }
        uint32_t li = layer_at(io, s), slot = (uint32_t)(s % io->ring);
        if (io->slot_layer[slot] == li && !io->slot_err[slot]) {
            /* The slot still holds this layer (as many slots as streamed layers): no read. */
            io->st.reused++;
            io->slot_seq[slot] = s;
            io->next_read = s + 1;
            pthread_cond_broadcast(&io->done_cv);
            continue;
        }
        io->slot_layer[slot] = UINT32_MAX;
        io->busy = true;
        pthread_mutex_unlock(&io->mu);
        uint64_t off = 0;
        char msg[160] = "";
        ebb_err rc = read_layer(io, li, io->slots[slot], &off, msg, sizeof(msg));
        pthread_mutex_lock(&io->mu);
        io->busy = false;
        io->slot_layer[slot] = rc ? UINT32_MAX : li;
        io->slot_seq[slot] = s;
        io->slot_off[slot] = off;
        io->slot_err[slot] = rc;
        memcpy(io->slot_msg[slot], msg, sizeof(msg));
        io->next_read = s + 1;
        pthread_cond_broadcast(&io->done_cv);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

ebb_err ebb_stream_cache_parse(const char *s, enum ebb_stream_cache *out)
{
    static const char *const names[] = {"cached", "direct", "dontneed"};
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, names[i])) {
            *out = (enum ebb_stream_cache)i;
            return EBB_OK;
        }
    return EBB_EINVAL;
}

static ebb_err check_params(const struct ebb_stream_io_params *p, uint64_t fsize,
                            struct ebb_diag *diag)
{
    if (!p->n_layer || !p->layers || !p->n_slots || !p->slots)
        return ebb_diag_set(diag, EBB_EINVAL, "stream-io: no layers or no staging slots");
    if (p->prefetch > p->n_slots)
        return ebb_diag_set(diag, EBB_EINVAL, "stream-io: prefetch %u exceeds the %u slots",
                            p->prefetch, p->n_slots);
    size_t need = ebb_stream_io_slot_size(p->layers, p->n_layer);
    if (p->slot_size < need)
        return ebb_diag_set(diag, EBB_EINVAL, "stream-io: slots of %zu bytes, %zu needed",
                            p->slot_size, need);
    for (uint32_t i = 0; i < p->n_slots; i++)
        if (!p->slots[i] || (uintptr_t)p->slots[i] % EBB_STREAM_ALIGN)
            return ebb_diag_set(diag, EBB_EINVAL, "stream-io: slot %u is not %u-byte aligned", i,
                                EBB_STREAM_ALIGN);
    for (uint32_t i = 0; i < p->n_layer; i++) {
        const struct ebb_stream_layer *L = &p->layers[i];
        if (L->off > fsize || L->size > fsize - L->off)
            return ebb_diag_set(diag, EBB_EFORMAT,
                                "layer %u (%llu bytes at %llu) lies past the end of '%s' (%llu "
                                "bytes): truncated file?",
                                i, (unsigned long long)L->size, (unsigned long long)L->off, p->path,
                                (unsigned long long)fsize);
        if (L->codec > EBB_STREAM_CODEC_ZSTD ||
            (L->codec == EBB_STREAM_CODEC_RAW && L->raw_size != L->size))
            return ebb_diag_set(diag, EBB_EFORMAT, "layer %u: bad codec or sizes", i);
    }
    return EBB_OK;
}

ebb_err ebb_stream_io_open(const struct ebb_stream_io_params *p, struct ebb_stream_io **out,
                           struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    struct ebb_stream_io *io = calloc(1, sizeof(*io));
    if (!io)
        return EBB_ENOMEM;
    io->fd = -1;
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->io_cv, NULL);
    pthread_cond_init(&io->done_cv, NULL);
    pthread_mutex_init(&io->job.mu, NULL);
    int fd = open(p->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = ebb_diag_set(diag, errno == ENOENT ? EBB_ENOENT : EBB_EIO, "cannot open '%s': %s",
                          p->path, strerror(errno));
        goto out;
    }
    off_t fsize = lseek(fd, 0, SEEK_END);
    io->fd = fd;
    if ((rc = check_params(p, fsize < 0 ? 0 : (uint64_t)fsize, diag)))
        goto out;
    io->cache = p->cache;
    if (p->cache == EBB_STREAM_DIRECT) {
        int dfd = open(p->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (dfd >= 0) {
            close(io->fd);
            io->fd = dfd;
            io->direct = true;
        }
    }
    io->st.direct = io->direct;
    io->n_layer = p->n_layer;
    io->n_slots = p->n_slots;
    io->ring = p->n_slots;
    io->prefetch = p->prefetch ? p->prefetch : p->n_slots;
    io->slot_size = p->slot_size;
    io->layers = malloc(sizeof(*io->layers) * p->n_layer);
    io->sched = malloc(sizeof(*io->sched) * p->n_layer);
    io->slots = malloc(sizeof(*io->slots) * p->n_slots);
    io->slot_seq = malloc(sizeof(*io->slot_seq) * p->n_slots);
    io->slot_off = calloc(p->n_slots, sizeof(*io->slot_off));
    io->slot_layer = malloc(sizeof(*io->slot_layer) * p->n_slots);
    io->slot_err = calloc(p->n_slots, sizeof(*io->slot_err));
    io->slot_msg = calloc(p->n_slots, sizeof(*io->slot_msg));
    if (!io->layers || !io->sched || !io->slots || !io->slot_seq || !io->slot_off ||
        !io->slot_layer || !io->slot_err || !io->slot_msg) {
        rc = EBB_ENOMEM;
        goto out;
    }
    memcpy(io->layers, p->layers, sizeof(*io->layers) * p->n_layer);
    for (uint32_t i = 0; i < p->n_slots; i++) {
        io->slots[i] = p->slots[i];
        io->slot_seq[i] = UINT64_MAX;
        io->slot_layer[i] = UINT32_MAX;
    }
    uint64_t max_stored = 0;
    for (uint32_t i = 0; i < p->n_layer; i++)
        if (p->layers[i].codec != EBB_STREAM_CODEC_RAW && p->layers[i].size > max_stored)
            max_stored = p->layers[i].size;
    if (max_stored) {
        io->scratch_size = (size_t)align_up(max_stored + 2 * EBB_STREAM_ALIGN);
        io->dctx = ZSTD_createDCtx();
        if (posix_memalign((void **)&io->scratch, EBB_STREAM_ALIGN, io->scratch_size) ||
            !io->dctx) {
            io->scratch = NULL;
            rc = EBB_ENOMEM;
            goto out;
        }
    }
    if (p->n_threads > 1 && (rc = ebb_stream_pool_new(p->n_threads, &io->pool, diag)))
        goto out;
    if (pthread_create(&io->thread, NULL, io_main, io)) {
        rc = ebb_diag_set(diag, EBB_ENOMEM, "stream-io: cannot start the I/O thread");
        goto out;
    }
    io->started = true;
    *out = io;
    io = NULL;
out:
    ebb_stream_io_close(io);
    return rc;
}

void ebb_stream_io_close(struct ebb_stream_io *io)
{
    if (!io)
        return;
    if (io->started) {
        pthread_mutex_lock(&io->mu);
        io->stop = true;
        pthread_cond_broadcast(&io->io_cv);
        pthread_cond_broadcast(&io->done_cv);
        pthread_mutex_unlock(&io->mu);
        pthread_join(io->thread, NULL);
    }
    ebb_stream_pool_free(io->pool);
    pthread_mutex_destroy(&io->job.mu);
    if (io->fd >= 0)
        close(io->fd);
    ZSTD_freeDCtx(io->dctx);
    free(io->scratch);
    free(io->layers);
    free(io->sched);
    free(io->slots);
    free(io->slot_seq);
    free(io->slot_off);
    free(io->slot_layer);
    free(io->slot_err);
    free(io->slot_msg);
    pthread_cond_destroy(&io->io_cv);
    pthread_cond_destroy(&io->done_cv);
    pthread_mutex_destroy(&io->mu);
    free(io);
}

static void wait_idle(struct ebb_stream_io *io)
{
    while (io->busy)
        pthread_cond_wait(&io->done_cv, &io->mu);
}

ebb_err ebb_stream_io_submit(struct ebb_stream_io *io, const uint32_t *layers, uint32_t n,
                             struct ebb_diag *diag)
{
    if (n > io->n_layer)
        return ebb_diag_set(diag, EBB_EINVAL, "stream-io: schedule of %u layers, %u exist", n,
                            io->n_layer);
    for (uint32_t i = 0; i < n; i++)
        if (layers[i] >= io->n_layer)
            return ebb_diag_set(diag, EBB_EINVAL, "stream-io: no layer %u", layers[i]);
    pthread_mutex_lock(&io->mu);
    if (io->next_acq != io->next_rel) {
        pthread_mutex_unlock(&io->mu);
        return ebb_diag_set(diag, EBB_EBUSY, "stream-io: submit while a layer is acquired");
    }
    wait_idle(io);
    /* Keep the reads that the new schedule starts with, in order. */
    uint32_t ring = n && io->n_slots >= n ? io->n_slots / n * n : io->n_slots;
    uint64_t keep = 0, ahead = io->next_read - io->next_acq;
    while (io->n_sched && ring == io->ring && keep < ahead && keep < n &&
           layer_at(io, io->next_acq + keep) == layers[keep] &&
           !io->slot_err[(io->next_acq + keep) % io->ring])
        keep++;
    io->st.dropped += ahead - keep;
    for (uint64_t k = keep; k < ahead; k++)
        io->slot_seq[(io->next_acq + k) % io->ring] = UINT64_MAX;
    io->ring = ring;
    if (n)
        memcpy(io->sched, layers, sizeof(*layers) * n);
    io->n_sched = n;
    io->base = io->next_acq;
    io->next_read = io->next_acq + keep;
    pthread_cond_signal(&io->io_cv);
    pthread_mutex_unlock(&io->mu);
    return EBB_OK;
}

/* After a failed read the step is abandoned: every slot is released and the schedule starts
 * again at its first layer with nothing read ahead. */
static void restart(struct ebb_stream_io *io)
{
    wait_idle(io);
    io->next_acq = io->next_read = io->next_rel = io->next_read + io->n_slots;
    io->base = io->next_acq;
    for (uint32_t i = 0; i < io->n_slots; i++) {
        io->slot_seq[i] = UINT64_MAX;
        io->slot_layer[i] = UINT32_MAX;
    }
    pthread_cond_signal(&io->io_cv);
}

ebb_err ebb_stream_io_acquire(struct ebb_stream_io *io, uint32_t layer, const void **data,
                              uint32_t *slot_out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    pthread_mutex_lock(&io->mu);
    uint64_t s = io->next_acq;
    if (!io->n_sched || layer_at(io, s) != layer) {
        rc = ebb_diag_set(diag, EBB_EINVAL, "stream-io: layer %u acquired, layer %d is next", layer,
                          io->n_sched ? (int)layer_at(io, s) : -1);
        goto out;
    }
    if (s >= io->next_rel + io->ring) {
        rc = ebb_diag_set(diag, EBB_EINVAL, "stream-io: every slot is acquired; release first");
        goto out;
    }
    uint32_t slot = (uint32_t)(s % io->ring);
    if (io->slot_seq[slot] == s) {
        io->st.hits++;
    } else {
        uint64_t t0 = now_ns();
        io->st.misses++;
        while (io->slot_seq[slot] != s && !io->stop)
            pthread_cond_wait(&io->done_cv, &io->mu);
        io->st.stall_ns += now_ns() - t0;
    }
    if (io->slot_err[slot]) {
        rc = ebb_diag_set(diag, io->slot_err[slot], "%s", io->slot_msg[slot]);
        restart(io);
        goto out;
    }
    *data = io->slots[slot] + io->slot_off[slot];
    if (slot_out)
        *slot_out = slot;
    io->next_acq = s + 1;
    pthread_cond_signal(&io->io_cv);
out:
    pthread_mutex_unlock(&io->mu);
    return rc;
}

ebb_err ebb_stream_io_release(struct ebb_stream_io *io, uint32_t layer)
{
    ebb_err rc = EBB_OK;
    pthread_mutex_lock(&io->mu);
    if (io->next_rel == io->next_acq || layer_at(io, io->next_rel) != layer) {
        rc = EBB_EINVAL;
    } else {
        io->next_rel++;
        pthread_cond_signal(&io->io_cv);
    }
    pthread_mutex_unlock(&io->mu);
    return rc;
}

void ebb_stream_io_stats(struct ebb_stream_io *io, struct ebb_stream_io_stats *out)
{
    pthread_mutex_lock(&io->mu);
    *out = io->st;
    pthread_mutex_unlock(&io->mu);
}
