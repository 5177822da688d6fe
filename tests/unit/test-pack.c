/* Pack files: the hash against known XXH64 values, round trips (raw and zstd) of a small
 * generated GGUF and of SmolLM2 (every tensor byte-identical to the GGUF), the fixed tensor
 * order, reading through stream-io, mismatching headers, a corrupted byte named by layer,
 * truncation and foreign files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf-writer.h"
#include "stream/pack.h"

static char dir[64], gpath[128], ppath[128];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/ebb-pack-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(gpath, sizeof(gpath), "%s/tiny.gguf", dir);
    snprintf(ppath, sizeof(ppath), "%s/tiny.pack", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void hash_vectors(void **state)
{
    (void)state;
    /* Published XXH64 values (seed 0). */
    assert_int_equal(ebb_hash64("", 0, 0), 0xEF46DB3751D8E999ull);
    assert_int_equal(ebb_hash64("abc", 3, 0), 0x44BC2CF5AD770999ull);
    uint8_t buf[100];
    for (int i = 0; i < 100; i++)
        buf[i] = (uint8_t)i;
    uint64_t h = ebb_hash64(buf, 100, 0);
    assert_int_not_equal(h, ebb_hash64(buf, 100, 1));
    assert_int_not_equal(h, ebb_hash64(buf, 99, 0));
    buf[57] ^= 1;
    assert_int_not_equal(h, ebb_hash64(buf, 100, 0));
}

/* Three layers stored out of the fixed order (ffn_down first), layer 1 random (incompressible),
 * the rest a counting pattern (compressible). */
static void write_tiny(void)
{
    struct wbuf kv = {0};
    w_kv(&kv, "general.architecture", 8);
    w_str(&kv, "llama");
    w_kv(&kv, "general.name", 8);
    w_str(&kv, "tiny");
    w_kv(&kv, "llama.block_count", 4);
    w_u32(&kv, 3);
    struct tinfo t[11];
    char names[11][40];
    int n = 0;
    uint64_t off = 0;
#define T(nm, a, b)                                                                                \
    do {                                                                                           \
        snprintf(names[n], sizeof(names[n]), "%s", nm);                                            \
        t[n] = (struct tinfo){names[n], (b) > 1 ? 2u : 1u, {a, b, 1, 1}, 0, off};                  \
        off += (uint64_t)(a) * (b)*4;                                                              \
        n++;                                                                                       \
    } while (0)
    T("token_embd.weight", 64, 16);
    for (int l = 0; l < 3; l++) {
        char nm[40];
        snprintf(nm, sizeof(nm), "blk.%d.ffn_down.weight", l);
        T(nm, 64, 64);
        snprintf(nm, sizeof(nm), "blk.%d.attn_norm.weight", l);
        T(nm, 64, 1);
        snprintf(nm, sizeof(nm), "blk.%d.attn_q.weight", l);
        T(nm, 64, 64);
    }
    T("output_norm.weight", 64, 1);
#undef T
    struct wbuf b = make(3, 3, &kv, t, (uint64_t)n, 32, (size_t)off);
    uint8_t *data = b.p + b.n - off;
    uint64_t x = 88172645463325252ull;
    for (uint64_t i = t[4].offset; i < t[7].offset; i++) { /* layer 1 */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data[i] = (uint8_t)x;
    }
    FILE *f = fopen(gpath, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
    fclose(f);
    free(b.p);
    free(kv.p);
}

/* Every tensor of g read back from the pack equals the GGUF's bytes. */
static void check_all(const struct ebb_gguf *g, struct ebb_pack *p)
{
    const struct ebb_pack_info *i = ebb_pack_info(p);
    uint64_t max = 0;
    for (uint32_t k = 0; k < i->n_groups; k++) {
        struct ebb_stream_layer L;
        assert_int_equal(ebb_pack_group(p, k, &L), EBB_OK);
        max = L.raw_size > max ? L.raw_size : max;
    }
    uint8_t *buf = malloc(max);
    assert_int_equal(i->n_tensors, ebb_gguf_n_tensors(g));
    for (uint32_t k = 0; k < i->n_groups; k++) {
        struct ebb_diag d = {{0}};
        ebb_err rc = ebb_pack_read_group(p, k, buf, max, &d);
        if (rc)
            fail_msg("group %u: %s", k, d.msg);
        for (uint32_t j = 0; j < i->n_tensors; j++) {
            const struct ebb_pack_tensor *pt = ebb_pack_tensor_at(p, j);
            if (pt->group != k)
                continue;
            const struct ebb_gguf_tensor *gt = ebb_gguf_find_tensor(g, pt->name);
            assert_non_null(gt);
            assert_int_equal(pt->size, gt->size);
            assert_int_equal(pt->type, gt->type);
            assert_int_equal(pt->off % EBB_PACK_TENSOR_ALIGN, 0);
            assert_memory_equal(buf + pt->off, gt->data, gt->size);
        }
    }
    free(buf);
}

static void tiny_round_trip(void **state)
{
    (void)state;
    write_tiny();
    struct ebb_gguf *g = NULL;
    struct ebb_pack *p = NULL;
    struct ebb_diag d = {{0}};
    struct ebb_pack_write_stats st;
    struct ebb_pack_expect want;
    assert_int_equal(ebb_gguf_open(gpath, &g, &d), EBB_OK);
    ebb_pack_expect_from_gguf(g, &want);
    want.layout = "gguf-raw";
    want.device_kind = "pocl-cpu";
    for (int z = 0; z < 2; z++) {
        struct ebb_pack_write_opts o = {.zstd = z != 0, .level = 5};
        assert_int_equal(ebb_pack_write(g, ppath, &o, &st, &d), EBB_OK);
        assert_int_equal(st.n_groups, 4);
        assert_int_equal(st.n_compressed, z ? 3 : 0); /* layer 1 is random: kept raw */
        assert_int_equal(st.file_bytes % EBB_STREAM_ALIGN, 0);
        assert_int_equal(ebb_pack_open(ppath, &want, &p, &d), EBB_OK);
        const struct ebb_pack_info *i = ebb_pack_info(p);
        assert_string_equal(i->model_name, "tiny");
        assert_string_equal(i->layout, "gguf-raw");
        assert_string_equal(i->device_kind, "any");
        assert_int_equal(i->n_layer, 3);
        struct ebb_stream_layer L;
        assert_int_equal(ebb_pack_group(p, 1, &L), EBB_OK);
        assert_int_equal(L.codec, EBB_STREAM_CODEC_RAW);
        assert_int_equal(ebb_pack_group(p, 2, &L), EBB_OK);
        assert_int_equal(L.codec, z ? EBB_STREAM_CODEC_ZSTD : EBB_STREAM_CODEC_RAW);
        assert_int_equal(L.off % EBB_STREAM_ALIGN, 0);
        /* Fixed order inside a layer: attn_norm, attn_q, ffn_down. */
        const struct ebb_pack_tensor *an = ebb_pack_find_tensor(p, "blk.2.attn_norm.weight");
        const struct ebb_pack_tensor *aq = ebb_pack_find_tensor(p, "blk.2.attn_q.weight");
        const struct ebb_pack_tensor *fd = ebb_pack_find_tensor(p, "blk.2.ffn_down.weight");
        assert_true(an && aq && fd);
        assert_int_equal(an->off, 0);
        assert_true(an->off < aq->off && aq->off < fd->off);
        assert_int_equal(ebb_pack_find_tensor(p, "token_embd.weight")->group, 3);
        check_all(g, p);
        ebb_pack_close(p);
        p = NULL;
    }
    ebb_gguf_close(g);
}

static void through_stream_io(void **state)
{
    (void)state;
    write_tiny();
    struct ebb_gguf *g = NULL;
    struct ebb_pack *p = NULL;
    struct ebb_diag d = {{0}};
    struct ebb_pack_write_stats st;
    struct ebb_pack_write_opts o = {.zstd = true};
    assert_int_equal(ebb_gguf_open(gpath, &g, &d), EBB_OK);
    assert_int_equal(ebb_pack_write(g, ppath, &o, &st, &d), EBB_OK);
    assert_int_equal(ebb_pack_open(ppath, NULL, &p, &d), EBB_OK);
    struct ebb_stream_layer ls[3];
    for (uint32_t l = 0; l < 3; l++)
        assert_int_equal(ebb_pack_group(p, l, &ls[l]), EBB_OK);
    void *slots[2];
    size_t ss = ebb_stream_io_slot_size(ls, 3);
    for (int i = 0; i < 2; i++)
        assert_int_equal(posix_memalign(&slots[i], EBB_STREAM_ALIGN, ss), 0);
    for (int mode = 0; mode < 3; mode++) {
        struct ebb_stream_io_params ip = {.path = ppath,
                                          .layers = ls,
                                          .n_layer = 3,
                                          .slots = slots,
                                          .n_slots = 2,
                                          .slot_size = ss,
                                          .cache = (enum ebb_stream_cache)mode};
        struct ebb_stream_io *io = NULL;
        assert_int_equal(ebb_stream_io_open(&ip, &io, &d), EBB_OK);
        static const uint32_t sched[] = {0, 1, 2};
        assert_int_equal(ebb_stream_io_submit(io, sched, 3, &d), EBB_OK);
        for (int c = 0; c < 2; c++)
            for (uint32_t l = 0; l < 3; l++) {
                const uint8_t *data;
                if (ebb_stream_io_acquire(io, l, (const void **)&data, NULL, &d))
                    fail_msg("acquire %u: %s", l, d.msg);
                for (uint32_t j = 0; j < ebb_pack_info(p)->n_tensors; j++) {
                    const struct ebb_pack_tensor *pt = ebb_pack_tensor_at(p, j);
                    if (pt->group == l)
                        assert_memory_equal(data + pt->off, ebb_gguf_find_tensor(g, pt->name)->data,
                                            pt->size);
                }
                assert_int_equal(ebb_stream_io_release(io, l), EBB_OK);
            }
        ebb_stream_io_close(io);
    }
    /* Corrupt one stored byte of layer 2: both readers name the layer. */
    FILE *f = fopen(ppath, "r+b");
    assert_non_null(f);
    fseek(f, (long)(ls[2].off + ls[2].size / 2), SEEK_SET);
    int c = fgetc(f);
    fseek(f, (long)(ls[2].off + ls[2].size / 2), SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    uint8_t *buf = malloc(ls[2].raw_size);
    assert_int_equal(ebb_pack_read_group(p, 2, buf, ls[2].raw_size, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "checksum mismatch in layer 2"));
    assert_int_equal(ebb_pack_read_group(p, 1, buf, ls[2].raw_size, &d), EBB_OK);
    free(buf);
    struct ebb_stream_io_params ip = {
        .path = ppath, .layers = ls, .n_layer = 3, .slots = slots, .n_slots = 2, .slot_size = ss};
    struct ebb_stream_io *io = NULL;
    assert_int_equal(ebb_stream_io_open(&ip, &io, &d), EBB_OK);
    static const uint32_t s2[] = {2};
    assert_int_equal(ebb_stream_io_submit(io, s2, 1, &d), EBB_OK);
    const void *data;
    assert_int_equal(ebb_stream_io_acquire(io, 2, &data, NULL, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "layer 2: checksum mismatch"));
    ebb_stream_io_close(io);
    for (int i = 0; i < 2; i++)
        free(slots[i]);
    ebb_pack_close(p);
    ebb_gguf_close(g);
}

static void refusals(void **state)
{
    (void)state;
    write_tiny();
    struct ebb_gguf *g = NULL;
    struct ebb_pack *p = NULL;
    struct ebb_diag d = {{0}};
    struct ebb_pack_write_stats st;
    struct ebb_pack_write_opts o = {.device_kind = "nvidia-gpu"};
    assert_int_equal(ebb_gguf_open(gpath, &g, &d), EBB_OK);
    o.layout = "q4_0-split";
    assert_int_equal(ebb_pack_write(g, ppath, &o, &st, &d), EBB_EUNSUPPORTED);
    o.layout = NULL;
    assert_int_equal(ebb_pack_write(g, ppath, &o, &st, &d), EBB_OK);
    struct ebb_pack_expect want;
    ebb_pack_expect_from_gguf(g, &want);
    want.meta_hash ^= 1;
    assert_int_equal(ebb_pack_open(ppath, &want, &p, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "was made from model 'tiny'"));
    ebb_pack_expect_from_gguf(g, &want);
    want.layout = "q4_0-split";
    assert_int_equal(ebb_pack_open(ppath, &want, &p, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "holds weight layout 'gguf-raw', the engine needs 'q4_0-split'"));
    want.layout = "gguf-raw";
    want.device_kind = "amd-gpu";
    assert_int_equal(ebb_pack_open(ppath, &want, &p, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "made for device kind 'nvidia-gpu'"));
    want.device_kind = "nvidia-gpu";
    assert_int_equal(ebb_pack_open(ppath, &want, &p, &d), EBB_OK);
    struct ebb_stream_layer L;
    assert_int_equal(ebb_pack_group(p, 1, &L), EBB_OK);
    ebb_pack_close(p);
    /* Truncated in the middle of layer 1. */
    assert_int_equal(truncate(ppath, (off_t)(L.off + 100)), 0);
    assert_int_equal(ebb_pack_open(ppath, NULL, &p, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "truncated"));
    /* Not a pack at all. */
    assert_int_equal(ebb_pack_open(gpath, NULL, &p, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "not an ebb pack"));
    assert_int_equal(ebb_pack_open("/nonexistent.pack", NULL, &p, &d), EBB_ENOENT);
    /* A flipped header byte. */
    assert_int_equal(ebb_pack_write(g, ppath, &o, &st, &d), EBB_OK);
    FILE *f = fopen(ppath, "r+b");
    fseek(f, 40, SEEK_SET);
    fputc('X', f);
    fclose(f);
    assert_int_equal(ebb_pack_open(ppath, NULL, &p, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "header is corrupt"));
    ebb_gguf_close(g);
}

/* A toy device layout: attn_q tensors are stored byte-inverted with 64 bytes of 0xEE after
 * them; every other tensor unchanged. */
static uint64_t toy_size(void *ctx, const struct ebb_gguf_tensor *t)
{
    (void)ctx;
    return strstr(t->name, "attn_q") ? t->size + 64 : 0;
}

static ebb_err toy_convert(void *ctx, const struct ebb_gguf_tensor *t, void *dst,
                           struct ebb_diag *diag)
{
    (*(int *)ctx)++;
    if (strstr(t->name, "blk.2.") && getenv("EBB_TEST_TOY_FAIL"))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "toy: cannot convert %s", t->name);
    const uint8_t *src = t->data;
    uint8_t *d = dst;
    for (uint64_t i = 0; i < t->size; i++)
        d[i] = (uint8_t)~src[i];
    memset(d + t->size, 0xEE, 64);
    return EBB_OK;
}

static void converter(void **state)
{
    (void)state;
    write_tiny();
    struct ebb_gguf *g = NULL;
    struct ebb_pack *p = NULL;
    struct ebb_diag d = {{0}};
    struct ebb_pack_write_stats st;
    static const struct ebb_pack_convert_i toy = {toy_size, toy_convert};
    int calls = 0;
    struct ebb_pack_write_opts o = {.layout = "toy-inverted", .conv = &toy, .conv_ctx = &calls};
    assert_int_equal(ebb_gguf_open(gpath, &g, &d), EBB_OK);
    assert_int_equal(ebb_pack_write(g, ppath, &o, &st, &d), EBB_OK);
    assert_int_equal(calls, 3);
    struct ebb_pack_expect want;
    ebb_pack_expect_from_gguf(g, &want);
    want.layout = "toy-inverted";
    assert_int_equal(ebb_pack_open(ppath, &want, &p, &d), EBB_OK);
    const struct ebb_pack_tensor *q = ebb_pack_find_tensor(p, "blk.1.attn_q.weight");
    const struct ebb_gguf_tensor *gq = ebb_gguf_find_tensor(g, "blk.1.attn_q.weight");
    assert_int_equal(q->size, gq->size + 64);
    struct ebb_stream_layer L;
    assert_int_equal(ebb_pack_group(p, 1, &L), EBB_OK);
    uint8_t *buf = malloc(L.raw_size);
    assert_int_equal(ebb_pack_read_group(p, 1, buf, L.raw_size, &d), EBB_OK);
    for (uint64_t i = 0; i < gq->size; i++)
        assert_int_equal(buf[q->off + i], (uint8_t) ~((const uint8_t *)gq->data)[i]);
    assert_int_equal(buf[q->off + gq->size + 63], 0xEE);
    const struct ebb_pack_tensor *f = ebb_pack_find_tensor(p, "blk.1.ffn_down.weight");
    assert_memory_equal(buf + f->off, ebb_gguf_find_tensor(g, f->name)->data, f->size);
    free(buf);
    ebb_pack_close(p);
    /* A failing converter leaves no file behind; a layout without converter is refused. */
    unlink(ppath);
    setenv("EBB_TEST_TOY_FAIL", "1", 1);
    assert_int_equal(ebb_pack_write(g, ppath, &o, &st, &d), EBB_EUNSUPPORTED);
    unsetenv("EBB_TEST_TOY_FAIL");
    assert_non_null(strstr(d.msg, "toy: cannot convert blk.2.attn_q.weight"));
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", ppath);
    assert_int_equal(access(ppath, F_OK), -1);
    assert_int_equal(access(tmp, F_OK), -1);
    o.conv = NULL;
    assert_int_equal(ebb_pack_write(g, ppath, &o, &st, &d), EBB_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "needs the engine's converter"));
    o.conv = &toy;
    o.layout = NULL;
    assert_int_equal(ebb_pack_write(g, ppath, &o, &st, &d), EBB_EINVAL);
    ebb_gguf_close(g);
}

static void smollm2(void **state)
{
    (void)state;
    const char *env = getenv("EBB_MODELS_DIR");
    char model[512];
    if (env)
        snprintf(model, sizeof(model), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", env);
    else
        snprintf(model, sizeof(model), "%s/.local/share/ebb/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : "/root");
    struct ebb_gguf *g = NULL;
    struct ebb_diag d = {{0}};
    if (access(model, R_OK) || ebb_gguf_open(model, &g, &d))
        skip();
    uint32_t n = 0;
    assert_int_equal(ebb_pack_gguf_n_layer(g, &n, &d), EBB_OK);
    assert_int_equal(n, 30);
    /* The GGUF extents cover exactly each layer's tensors (they are adjacent in this file). */
    struct ebb_stream_layer ls[30];
    assert_int_equal(ebb_pack_gguf_extents(g, n, ls, &d), EBB_OK);
    for (uint32_t l = 0; l < n; l++) {
        uint64_t sum = 0;
        char pre[16];
        snprintf(pre, sizeof(pre), "blk.%u.", l);
        for (uint64_t i = 0; i < ebb_gguf_n_tensors(g); i++) {
            const struct ebb_gguf_tensor *t = ebb_gguf_tensor_at(g, i);
            if (!strncmp(t->name, pre, strlen(pre))) {
                sum += t->size;
                assert_true(t->offset + ebb_gguf_data_offset(g) >= ls[l].off);
                assert_true(t->offset + ebb_gguf_data_offset(g) + t->size <=
                            ls[l].off + ls[l].size);
            }
        }
        assert_true(ls[l].size >= sum && ls[l].size < sum + 9 * 32);
    }
    struct ebb_pack_expect want;
    ebb_pack_expect_from_gguf(g, &want);
    for (int z = 0; z < 2; z++) {
        struct ebb_pack_write_opts o = {.zstd = z != 0, .level = 1};
        struct ebb_pack_write_stats st;
        struct ebb_pack *p = NULL;
        assert_int_equal(ebb_pack_write(g, ppath, &o, &st, &d), EBB_OK);
        assert_int_equal(ebb_pack_open(ppath, &want, &p, &d), EBB_OK);
        assert_int_equal(ebb_pack_info(p)->n_layer, 30);
        check_all(g, p);
        print_message("SmolLM2 %s: %u of %u records compressed, %.1f -> %.1f MiB\n",
                      z ? "zstd" : "raw", st.n_compressed, st.n_groups, st.raw_bytes / 1048576.0,
                      st.stored_bytes / 1048576.0);
        ebb_pack_close(p);
    }
    ebb_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hash_vectors),      cmocka_unit_test(tiny_round_trip),
        cmocka_unit_test(through_stream_io), cmocka_unit_test(refusals),
        cmocka_unit_test(converter),         cmocka_unit_test(smollm2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
