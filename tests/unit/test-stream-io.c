/* Stream I/O thread: bytes delivered match the file for every cache mode, cyclic schedules,
 * prefetch hits after a pause, re-submits that keep matching reads, order errors, truncation,
 * and read errors that name the layer. With EBB_STREAM_BENCH=FILE.gguf it also measures read
 * throughput over that model's layers (manual runs; docs/STREAMER.md has the figures). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "stream/memprobe.h"
#include "stream/pack.h"
#include "stream/stream-io.h"
#include "stream/stream-plan.h"

#define N_LAYER 7
#define N_SLOTS 3

static char path[64];
static struct ebb_stream_layer layers[N_LAYER];
static uint8_t *file_bytes;
static size_t file_size;

static uint8_t byte_at(uint64_t off)
{
    uint64_t x = off * 0x9E3779B97F4A7C15ull;
    return (uint8_t)(x >> 56);
}

/* A file with layers of different sizes at unaligned offsets. */
static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof(path), "/tmp/ebb-stream-io-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    uint64_t off = 100;
    for (int l = 0; l < N_LAYER; l++) {
        uint64_t size = 5000 + (uint64_t)l * 3001;
        layers[l] = (struct ebb_stream_layer){.off = off, .size = size, .raw_size = size};
        off += size + 17;
    }
    file_size = (size_t)off;
    file_bytes = malloc(file_size);
    for (size_t i = 0; i < file_size; i++)
        file_bytes[i] = byte_at(i);
    int ok = write(fd, file_bytes, file_size) == (ssize_t)file_size;
    close(fd);
    return ok ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    free(file_bytes);
    return 0;
}

struct ring {
    void *slots[N_SLOTS];
    size_t size;
};

static void ring_init(struct ring *r, const struct ebb_stream_layer *ls, uint32_t n)
{
    r->size = ebb_stream_io_slot_size(ls, n);
    for (int i = 0; i < N_SLOTS; i++)
        assert_int_equal(posix_memalign(&r->slots[i], EBB_STREAM_ALIGN, r->size), 0);
}

static void ring_fini(struct ring *r)
{
    for (int i = 0; i < N_SLOTS; i++)
        free(r->slots[i]);
}

static struct ebb_stream_io *open_io(struct ring *r, enum ebb_stream_cache cache, uint32_t pf)
{
    struct ebb_stream_io_params p = {.path = path,
                                     .layers = layers,
                                     .n_layer = N_LAYER,
                                     .slots = r->slots,
                                     .n_slots = N_SLOTS,
                                     .slot_size = r->size,
                                     .prefetch = pf,
                                     .cache = cache};
    struct ebb_stream_io *io = NULL;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_stream_io_open(&p, &io, &d);
    if (rc)
        fail_msg("open: %s", d.msg);
    return io;
}

static void consume(struct ebb_stream_io *io, const uint32_t *sched, uint32_t n, int cycles)
{
    struct ebb_diag d = {{0}};
    for (int c = 0; c < cycles; c++)
        for (uint32_t i = 0; i < n; i++) {
            const void *data = NULL;
            ebb_err rc = ebb_stream_io_acquire(io, sched[i], &data, NULL, &d);
            if (rc)
                fail_msg("acquire %u: %s", sched[i], d.msg);
            const struct ebb_stream_layer *L = &layers[sched[i]];
            assert_memory_equal(data, file_bytes + L->off, L->size);
            assert_int_equal(ebb_stream_io_release(io, sched[i]), EBB_OK);
        }
}

/* Waits (up to 5 s) until the I/O thread has completed n reads (reuses included). */
static void wait_reads(struct ebb_stream_io *io, uint64_t n)
{
    struct ebb_stream_io_stats st;
    for (int i = 0; i < 5000; i++) {
        ebb_stream_io_stats(io, &st);
        if (st.layers_read + st.reused >= n)
            return;
        usleep(1000);
    }
    fail_msg("the I/O thread did not complete %llu reads", (unsigned long long)n);
}

static void every_mode(void **state)
{
    (void)state;
    static const uint32_t sched[] = {1, 3, 4, 6};
    for (int mode = 0; mode < 3; mode++) {
        struct ring r;
        ring_init(&r, layers, N_LAYER);
        struct ebb_stream_io *io = open_io(&r, (enum ebb_stream_cache)mode, 2);
        assert_int_equal(ebb_stream_io_submit(io, sched, 4, NULL), EBB_OK);
        consume(io, sched, 4, 5);
        struct ebb_stream_io_stats st;
        ebb_stream_io_stats(io, &st);
        assert_int_equal(st.hits + st.misses, 20);
        assert_true(st.layers_read >= 20 && st.layers_read <= 22);
        uint64_t raw = 0;
        for (int i = 0; i < 4; i++)
            raw += layers[sched[i]].size;
        assert_true(st.bytes_raw >= 5 * raw);
        if (mode == EBB_STREAM_DIRECT && st.direct)
            assert_int_equal(st.bytes_read % EBB_STREAM_ALIGN, 0);
        print_message("mode %d: direct=%d hits %llu misses %llu\n", mode, st.direct,
                      (unsigned long long)st.hits, (unsigned long long)st.misses);
        ebb_stream_io_close(io);
        ring_fini(&r);
    }
}

static void prefetch_hits(void **state)
{
    (void)state;
    static const uint32_t sched[] = {0, 2, 5};
    struct ring r;
    ring_init(&r, layers, N_LAYER);
    struct ebb_stream_io *io = open_io(&r, EBB_STREAM_CACHED, 3);
    assert_int_equal(ebb_stream_io_submit(io, sched, 3, NULL), EBB_OK);
    wait_reads(io, 3); /* the I/O thread fills the three slots meanwhile */
    consume(io, sched, 3, 1);
    struct ebb_stream_io_stats st;
    ebb_stream_io_stats(io, &st);
    assert_int_equal(st.hits, 3);
    assert_int_equal(st.misses, 0);
    assert_int_equal(st.stall_ns, 0);
    /* Holding two layers at once, in order, works. */
    struct ebb_diag d;
    const void *a, *b, *c;
    wait_reads(io, 6);
    uint32_t sa = 9, sb = 9, sc = 9;
    assert_int_equal(ebb_stream_io_acquire(io, 0, &a, &sa, &d), EBB_OK);
    assert_int_equal(ebb_stream_io_acquire(io, 2, &b, &sb, &d), EBB_OK);
    assert_int_equal(ebb_stream_io_acquire(io, 5, &c, &sc, &d), EBB_OK);
    /* Positions 3, 4, 5 of the schedule use slots 0, 1, 2. */
    assert_int_equal(sa, 0);
    assert_int_equal(sb, 1);
    assert_int_equal(sc, 2);
    assert_ptr_equal(c, r.slots[2]); /* cached reads start at the layer itself */
    assert_int_equal(ebb_stream_io_acquire(io, 0, &a, NULL, &d), EBB_EINVAL); /* all slots held */
    assert_memory_equal(b, file_bytes + layers[2].off, layers[2].size);
    assert_int_equal(ebb_stream_io_release(io, 2), EBB_EINVAL); /* 0 is the oldest */
    assert_int_equal(ebb_stream_io_release(io, 0), EBB_OK);
    assert_int_equal(ebb_stream_io_release(io, 2), EBB_OK);
    assert_int_equal(ebb_stream_io_release(io, 5), EBB_OK);
    assert_int_equal(ebb_stream_io_release(io, 5), EBB_EINVAL); /* nothing held */
    /* Out of order. */
    assert_int_equal(ebb_stream_io_acquire(io, 2, &a, NULL, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "layer 0 is next"));
    ebb_stream_io_close(io);
    ring_fini(&r);
}

static void resubmit(void **state)
{
    (void)state;
    static const uint32_t s1[] = {1, 2, 3}, s2[] = {1, 2, 5}, s3[] = {4, 5};
    struct ring r;
    ring_init(&r, layers, N_LAYER);
    struct ebb_stream_io *io = open_io(&r, EBB_STREAM_CACHED, 3);
    struct ebb_stream_io_stats st;
    assert_int_equal(ebb_stream_io_submit(io, s1, 3, NULL), EBB_OK);
    consume(io, s1, 3, 2);
    wait_reads(io, 9); /* positions 6, 7, 8 (layers 1, 2, 3) ready ahead */
    assert_int_equal(ebb_stream_io_submit(io, s2, 3, NULL), EBB_OK); /* keeps 1 and 2 */
    ebb_stream_io_stats(io, &st);
    assert_int_equal(st.dropped, 1);
    consume(io, s2, 3, 2);
    wait_reads(io, 16); /* position 8 again, then up to 14 */
    assert_int_equal(ebb_stream_io_submit(io, s3, 2, NULL), EBB_OK);
    consume(io, s3, 2, 3);
    ebb_stream_io_stats(io, &st);
    assert_int_equal(st.dropped, 4);
    /* Submit while holding a layer is refused; an empty schedule reads nothing. */
    const void *a;
    usleep(20000);
    assert_int_equal(ebb_stream_io_acquire(io, 4, &a, NULL, NULL), EBB_OK);
    assert_int_equal(ebb_stream_io_submit(io, s1, 2, NULL), EBB_EBUSY);
    assert_int_equal(ebb_stream_io_release(io, 4), EBB_OK);
    assert_int_equal(ebb_stream_io_submit(io, NULL, 0, NULL), EBB_OK);
    assert_int_equal(ebb_stream_io_acquire(io, 4, &a, NULL, NULL), EBB_EINVAL);
    ebb_stream_io_close(io);
    ring_fini(&r);
}

/* As many slots as streamed layers: each layer is read once, later steps reuse the slots. */
static void slots_as_tier(void **state)
{
    (void)state;
    static const uint32_t s1[] = {2, 4, 5}, s2[] = {0, 4, 6};
    struct ring r;
    ring_init(&r, layers, N_LAYER);
    struct ebb_stream_io *io = open_io(&r, EBB_STREAM_DIRECT, 3);
    struct ebb_stream_io_stats st;
    assert_int_equal(ebb_stream_io_submit(io, s1, 3, NULL), EBB_OK);
    consume(io, s1, 3, 4);
    ebb_stream_io_stats(io, &st);
    assert_int_equal(st.layers_read, 3);
    assert_true(st.reused >= 9);
    /* A new schedule: only the slot whose layer stays in place (4, position 1) is reused. */
    usleep(20000);
    assert_int_equal(ebb_stream_io_submit(io, s2, 3, NULL), EBB_OK);
    consume(io, s2, 3, 3);
    ebb_stream_io_stats(io, &st);
    assert_int_equal(st.layers_read, 5);
    /* Two layers on three slots: two slots are used, so each layer still keeps its slot. */
    static const uint32_t s3[] = {3, 1};
    assert_int_equal(ebb_stream_io_submit(io, s3, 2, NULL), EBB_OK);
    consume(io, s3, 2, 4);
    ebb_stream_io_stats(io, &st);
    assert_int_equal(st.layers_read, 7);
    ebb_stream_io_close(io);
    ring_fini(&r);
}

/* Layers large enough to be split over reader threads: bytes intact in every mode, and a file
 * that ends inside a chunk is reported for the right layer. */
static void parallel_reads(void **state)
{
    (void)state;
    char big[64];
    snprintf(big, sizeof(big), "/tmp/ebb-stream-par-XXXXXX");
    int fd = mkstemp(big);
    assert_true(fd >= 0);
    struct ebb_stream_layer ls[3];
    uint64_t off = 777;
    for (int l = 0; l < 3; l++) {
        uint64_t size = (5u << 20) + 12345 * (uint64_t)l;
        ls[l] = (struct ebb_stream_layer){.off = off, .size = size, .raw_size = size};
        off += size + 99;
    }
    uint8_t *bytes = malloc(off);
    for (uint64_t i = 0; i < off; i++)
        bytes[i] = byte_at(i * 3 + 1);
    assert_int_equal(write(fd, bytes, off), (ssize_t)off);
    close(fd);
    void *slots[2];
    size_t ss = ebb_stream_io_slot_size(ls, 3);
    for (int i = 0; i < 2; i++)
        assert_int_equal(posix_memalign(&slots[i], EBB_STREAM_ALIGN, ss), 0);
    static const uint32_t sched[] = {0, 1, 2};
    struct ebb_diag d = {{0}};
    for (int mode = 0; mode < 3; mode++) {
        struct ebb_stream_io_params p = {.path = big,
                                         .layers = ls,
                                         .n_layer = 3,
                                         .slots = slots,
                                         .n_slots = 2,
                                         .slot_size = ss,
                                         .cache = (enum ebb_stream_cache)mode,
                                         .n_threads = 3};
        struct ebb_stream_io *io = NULL;
        assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_OK);
        assert_int_equal(ebb_stream_io_submit(io, sched, 3, &d), EBB_OK);
        for (int c = 0; c < 2; c++)
            for (uint32_t l = 0; l < 3; l++) {
                const void *data;
                if (ebb_stream_io_acquire(io, l, &data, NULL, &d))
                    fail_msg("layer %u: %s", l, d.msg);
                assert_memory_equal(data, bytes + ls[l].off, ls[l].size);
                assert_int_equal(ebb_stream_io_release(io, l), EBB_OK);
            }
        ebb_stream_io_close(io);
    }
    /* The file shrinks after open and now ends 3 MiB into layer 1. */
    struct ebb_stream_io_params p = {.path = big,
                                     .layers = ls,
                                     .n_layer = 2,
                                     .slots = slots,
                                     .n_slots = 2,
                                     .slot_size = ss,
                                     .prefetch = 1,
                                     .n_threads = 4};
    struct ebb_stream_io *io = NULL;
    assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_OK);
    assert_int_equal(truncate(big, (off_t)(ls[1].off + (3u << 20))), 0);
    assert_int_equal(ebb_stream_io_submit(io, sched, 2, &d), EBB_OK);
    const void *data;
    assert_int_equal(ebb_stream_io_acquire(io, 0, &data, NULL, &d), EBB_OK);
    assert_memory_equal(data, bytes + ls[0].off, ls[0].size);
    assert_int_equal(ebb_stream_io_release(io, 0), EBB_OK);
    assert_int_equal(ebb_stream_io_acquire(io, 1, &data, NULL, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "layer 1: file ends 3145728 bytes into"));
    ebb_stream_io_close(io);
    for (int i = 0; i < 2; i++)
        free(slots[i]);
    free(bytes);
    unlink(big);
}

static void bad_params(void **state)
{
    (void)state;
    struct ring r;
    ring_init(&r, layers, N_LAYER);
    struct ebb_stream_layer past[N_LAYER];
    memcpy(past, layers, sizeof(past));
    past[6].size += 100; /* runs past the end of the file */
    struct ebb_stream_io_params p = {.path = path,
                                     .layers = past,
                                     .n_layer = N_LAYER,
                                     .slots = r.slots,
                                     .n_slots = N_SLOTS,
                                     .slot_size = r.size};
    struct ebb_stream_io *io = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "layer 6"));
    p.layers = layers;
    p.slot_size = 4096;
    assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_EINVAL);
    p.slot_size = r.size;
    p.prefetch = N_SLOTS + 1;
    assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_EINVAL);
    p.prefetch = 0;
    p.path = "/nonexistent/x";
    assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_ENOENT);
    /* A file that shrinks after open: the read reports the layer and the truncation. */
    p.path = path;
    assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_OK);
    assert_int_equal(truncate(path, (off_t)layers[3].off + 10), 0);
    static const uint32_t sched[] = {2, 3};
    assert_int_equal(ebb_stream_io_submit(io, sched, 2, NULL), EBB_OK);
    const void *a;
    assert_int_equal(ebb_stream_io_acquire(io, 2, &a, NULL, &d), EBB_OK);
    assert_int_equal(ebb_stream_io_release(io, 2), EBB_OK);
    assert_int_equal(ebb_stream_io_acquire(io, 3, &a, NULL, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "layer 3"));
    /* After the error the schedule starts over at its first layer. */
    assert_int_equal(ebb_stream_io_acquire(io, 2, &a, NULL, &d), EBB_OK);
    assert_memory_equal(a, file_bytes + layers[2].off, layers[2].size);
    assert_int_equal(ebb_stream_io_release(io, 2), EBB_OK);
    ebb_stream_io_close(io);
    ring_fini(&r);
    /* Restore the file for later tests. */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(file_bytes, 1, file_size, f), file_size);
    fclose(f);
}

/* The recipe of docs/STREAMER.md with a fake engine: every token "evaluates" all layers (a
 * digest of their bytes, resident copies or streamed slots), the planner runs every 8 tokens
 * on readings from the memory probe's test hook, and plan changes are applied between tokens.
 * Squeezing the available memory sheds layers within one period, the digest (the "output")
 * never changes, and the plan grows back after the squeeze ends. */
static void hook_write(const char *hook, uint64_t avail)
{
    FILE *f = fopen(hook, "w");
    assert_non_null(f);
    fprintf(f, "available=%llu\n", (unsigned long long)avail);
    fclose(f);
}

static void plan_loop(void **state)
{
    (void)state;
    char hook[80];
    snprintf(hook, sizeof(hook), "%s.hook", path);
    uint64_t total = 0, lb[N_LAYER];
    for (int l = 0; l < N_LAYER; l++)
        total += lb[l] = layers[l].size;
    struct ring r;
    ring_init(&r, layers, N_LAYER);
    uint64_t staging = (uint64_t)N_SLOTS * r.size;
    hook_write(hook, total + staging + 8192); /* everything fits */
    setenv("EBB_TEST_MEMPROBE_FILE", hook, 1);
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading rd;
    assert_int_equal(ebb_memprobe_new(NULL, &mp, NULL), EBB_OK);
    struct ebb_stream_plan_cfg cfg = {.n_layer = N_LAYER,
                                      .layer_bytes = lb,
                                      .staging_bytes = 8192, /* counted as 2 small slots */
                                      .n_ctx_want = 1,
                                      .margin = 4096,
                                      .grow_hold_ns = 2000000000ull,
                                      .grow_min_tokens = 4};
    struct ebb_stream_planner pl;
    struct ebb_stream_inputs in = {0};
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_memprobe_read(mp, &rd), EBB_OK);
    in.available_ok = rd.available_ok;
    in.available = rd.available;
    assert_int_equal(ebb_stream_planner_init(&pl, &cfg, &in, &d), EBB_OK);
    assert_int_equal(pl.n_resident, N_LAYER);
    struct ebb_stream_io *io = open_io(&r, EBB_STREAM_CACHED, 2);
    uint8_t *res[N_LAYER] = {0};
    uint32_t sched[N_LAYER];
    uint64_t want = 0;
    for (int l = 0; l < N_LAYER; l++) {
        want = want * 31 + ebb_hash64(file_bytes + layers[l].off, layers[l].size, 0);
        res[l] = malloc(layers[l].size); /* "load" the resident layers */
        memcpy(res[l], file_bytes + layers[l].off, layers[l].size);
    }
    int shrunk_at = -1, grown_at = -1, changes = 0;
    uint32_t applied = N_LAYER, min_applied = N_LAYER;
    for (int tok = 0; tok < 120; tok++) {
        if (tok == 20) /* another program takes memory: half the model's bytes remain for us */
            hook_write(hook, total / 2);
        if (tok == 50)
            hook_write(hook, total + staging + 8192);
        /* One token: every layer, resident from memory, streamed through the ring. */
        uint64_t dig = 0;
        for (uint32_t l = 0; l < N_LAYER; l++) {
            const uint8_t *data = res[l];
            if (l >= applied && ebb_stream_io_acquire(io, l, (const void **)&data, NULL, &d))
                fail_msg("token %d layer %u: %s", tok, l, d.msg);
            dig = dig * 31 + ebb_hash64(data, layers[l].size, 0);
            if (l >= applied)
                assert_int_equal(ebb_stream_io_release(io, l), EBB_OK);
        }
        assert_int_equal(dig, want);
        in.tokens++;
        in.busy_ns += 10000000ull + 5000000ull * (N_LAYER - applied); /* streaming costs */
        in.now_ns += 250000000ull;
        if (tok % 8 != 7)
            continue;
        /* Re-plan; apply at the boundary between tokens. */
        assert_int_equal(ebb_memprobe_read(mp, &rd), EBB_OK);
        in.available_ok = rd.available_ok;
        in.available = rd.available;
        in.counted_bytes = ebb_stream_plan_total(&pl, pl.n_resident);
        /* The hook states what the machine has for the model; what the probe would report is
         * that minus what the model holds (freeing memory raises MemAvailable). */
        in.available = rd.available > in.counted_bytes ? rd.available - in.counted_bytes : 0;
        struct ebb_stream_change chg;
        if (!ebb_stream_planner_step(&pl, &in, &chg))
            continue;
        changes++;
        print_message("token %d: %u -> %u (%s)\n", tok, chg.from, chg.to, chg.reason);
        for (uint32_t l = chg.to; l < chg.from; l++) { /* shed from the top */
            free(res[l]);
            res[l] = NULL;
        }
        for (uint32_t l = chg.from; l < chg.to; l++) { /* grow: load once */
            res[l] = malloc(layers[l].size);
            memcpy(res[l], file_bytes + layers[l].off, layers[l].size);
        }
        uint32_t n = 0;
        for (uint32_t l = chg.to; l < N_LAYER; l++)
            sched[n++] = l;
        assert_int_equal(ebb_stream_io_submit(io, sched, n, &d), EBB_OK);
        applied = chg.to;
        min_applied = applied < min_applied ? applied : min_applied;
        if (chg.to < chg.from && shrunk_at < 0)
            shrunk_at = tok;
        if (chg.to > chg.from)
            grown_at = tok;
    }
    assert_true(shrunk_at >= 20 && shrunk_at < 28); /* within one period */
    assert_int_equal(min_applied, 3); /* 8192 + 24003 <= 49010 - 4096 < 8192 + 38006 */
    assert_true(grown_at > 50);
    assert_int_equal(applied, N_LAYER);
    for (int l = 0; l < N_LAYER; l++)
        free(res[l]);
    ebb_stream_io_close(io);
    ring_fini(&r);
    ebb_memprobe_free(mp);
    unsetenv("EBB_TEST_MEMPROBE_FILE");
    unlink(hook);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Manual measurement: every layer of a GGUF, prefetch 2 of 3 slots, a few passes per mode. */
static void bench(void **state)
{
    (void)state;
    const char *model = getenv("EBB_STREAM_BENCH");
    if (!model)
        skip();
    struct ebb_diag d = {{0}};
    uint32_t n = 0;
    struct ebb_stream_layer *ls = NULL;
    size_t len = strlen(model);
    if (len > 5 && !strcmp(model + len - 5, ".pack")) {
        struct ebb_pack *pk = NULL;
        assert_int_equal(ebb_pack_open(model, NULL, &pk, &d), EBB_OK);
        n = ebb_pack_info(pk)->n_layer;
        ls = calloc(n, sizeof(*ls));
        for (uint32_t i = 0; i < n; i++)
            assert_int_equal(ebb_pack_group(pk, i, &ls[i]), EBB_OK);
        ebb_pack_close(pk);
    } else {
        struct ebb_gguf *g = NULL;
        assert_int_equal(ebb_gguf_open(model, &g, &d), EBB_OK);
        assert_int_equal(ebb_pack_gguf_n_layer(g, &n, &d), EBB_OK);
        ls = calloc(n, sizeof(*ls));
        assert_int_equal(ebb_pack_gguf_extents(g, n, ls, &d), EBB_OK);
        ebb_gguf_close(g);
    }
    uint32_t *sched = calloc(n, sizeof(*sched));
    for (uint32_t i = 0; i < n; i++)
        sched[i] = i;
    const char *env_passes = getenv("EBB_STREAM_BENCH_PASSES");
    int passes = env_passes ? atoi(env_passes) : 3;
    struct ring r;
    ring_init(&r, ls, n);
    const char *th_env = getenv("EBB_STREAM_BENCH_THREADS");
    uint32_t threads = th_env ? (uint32_t)atoi(th_env) : 1;
    print_message("reader threads: %u\n", threads);
    for (int mode = 0; mode < 3; mode++) {
        struct ebb_stream_io_params p = {.path = model,
                                         .layers = ls,
                                         .n_layer = n,
                                         .slots = r.slots,
                                         .n_slots = N_SLOTS,
                                         .slot_size = r.size,
                                         .prefetch = 2,
                                         .cache = (enum ebb_stream_cache)mode,
                                         .n_threads = threads};
        struct ebb_stream_io *io = NULL;
        assert_int_equal(ebb_stream_io_open(&p, &io, &d), EBB_OK);
        assert_int_equal(ebb_stream_io_submit(io, sched, n, &d), EBB_OK);
        double t0 = now_s();
        uint64_t bytes = 0;
        for (int c = 0; c < passes; c++)
            for (uint32_t i = 0; i < n; i++) {
                const void *a;
                assert_int_equal(ebb_stream_io_acquire(io, i, &a, NULL, &d), EBB_OK);
                bytes += ls[i].raw_size;
                assert_int_equal(ebb_stream_io_release(io, i), EBB_OK);
            }
        double dt = now_s() - t0;
        struct ebb_stream_io_stats st;
        ebb_stream_io_stats(io, &st);
        print_message("%-8s direct=%d: %u layers x %d passes, %.1f MiB in %.3f s = %.2f GB/s "
                      "delivered; I/O thread %.2f GB/s; hits %llu misses %llu stall %.3f s\n",
                      mode == 0   ? "cached"
                      : mode == 1 ? "direct"
                                  : "dontneed",
                      st.direct, n, passes, bytes / 1048576.0, dt, bytes / dt / 1e9,
                      st.bytes_read / (st.read_ns / 1e9) / 1e9, (unsigned long long)st.hits,
                      (unsigned long long)st.misses, st.stall_ns / 1e9);
        ebb_stream_io_close(io);
    }
    /* The checksum's own speed, over one slot. */
    memset(r.slots[0], 7, r.size);
    double t0 = now_s();
    uint64_t acc = 0;
    for (int i = 0; i < 10; i++)
        acc += ebb_hash64(r.slots[0], r.size, (uint64_t)i);
    double dt = now_s() - t0;
    print_message("ebb_hash64: %.2f GB/s (%llx)\n", 10.0 * r.size / dt / 1e9,
                  (unsigned long long)(acc & 0xf));
    ring_fini(&r);
    free(ls);
    free(sched);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_mode),     cmocka_unit_test(prefetch_hits),
        cmocka_unit_test(resubmit),       cmocka_unit_test(slots_as_tier),
        cmocka_unit_test(parallel_reads), cmocka_unit_test(bad_params),
        cmocka_unit_test(plan_loop),      cmocka_unit_test(bench),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
