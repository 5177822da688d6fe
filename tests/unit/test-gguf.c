/* GGUF reader: valid files read back exactly; malformed and hostile files are rejected with the
 * right code and a message, never a crash. Images are built in memory by a small writer; every
 * image is opened from an exact-size heap copy so that ASan/valgrind see any over-read. */
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
#include "gguf/gguf.h"

/* ---- helpers ---- */

/* Opens an exact-size copy of n bytes of img; returns the code, fills diag. */
static ebb_err try_open(const uint8_t *img, size_t n, struct ebb_diag *d, struct ebb_gguf **out)
{
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    if (n)
        memcpy(copy, img, n);
    struct ebb_gguf *g = NULL;
    d->msg[0] = '\0';
    ebb_err rc = ebb_gguf_open_mem(copy, n, &g, d);
    if (rc == EBB_OK && out) {
        *out = g; /* the caller frees the copy through ebb_gguf_base() */
        return rc;
    }
    ebb_gguf_close(g);
    free(copy);
    return rc;
}

static void close_owned(struct ebb_gguf *g)
{
    void *base = (void *)ebb_gguf_base(g);
    ebb_gguf_close(g);
    free(base);
}

static void expect_fail(struct wbuf b, ebb_err want, const char *substr)
{
    struct ebb_diag d;
    ebb_err rc = try_open(b.p, b.n, &d, NULL);
    if (rc != want || (substr && !strstr(d.msg, substr)))
        fail_msg("want %s containing '%s', got %s: '%s'", ebb_err_name(want), substr ? substr : "",
                 ebb_err_name(rc), d.msg);
    assert_true(d.msg[0] != '\0');
    free(b.p);
}

/* A small valid file: two keys, two tensors filling the data section exactly. */
static struct wbuf small_valid(uint32_t version)
{
    struct wbuf kv = {0};
    w_kv(&kv, "general.architecture", 8);
    w_str(&kv, "llama");
    w_kv(&kv, "tokenizer.ggml.tokens", 9);
    w_u32(&kv, 8);
    w_u64(&kv, 2);
    w_str(&kv, "a");
    w_str(&kv, "bc");
    struct tinfo t[2] = {
        {"tok", 2, {4, 2}, 0, 0},    /* F32: 32 bytes */
        {"blk.0.w", 1, {32}, 2, 32}, /* Q4_0: 18 bytes */
    };
    struct wbuf b = make(version, 2, &kv, t, 2, 32, 50);
    free(kv.p);
    return b;
}

/* ---- valid files ---- */

static void check_all_types(uint32_t version)
{
    struct wbuf kv = {0};
    w_kv(&kv, "u8", 0);
    w_le(&kv, 200, 1);
    w_kv(&kv, "i8", 1);
    w_le(&kv, (uint8_t)-5, 1);
    w_kv(&kv, "u16", 2);
    w_le(&kv, 65000, 2);
    w_kv(&kv, "i16", 3);
    w_le(&kv, (uint16_t)-300, 2);
    w_kv(&kv, "u32", 4);
    w_u32(&kv, 4000000000u);
    w_kv(&kv, "i32", 5);
    w_u32(&kv, (uint32_t)-70000);
    w_kv(&kv, "f32", 6);
    w_f32(&kv, 1.5f);
    w_kv(&kv, "bool", 7);
    w_le(&kv, 1, 1);
    w_kv(&kv, "str", 8);
    w_strn(&kv, "h\0i", 3); /* values may hold any bytes */
    w_kv(&kv, "u64", 10);
    w_u64(&kv, UINT64_MAX);
    w_kv(&kv, "i64", 11);
    w_u64(&kv, (uint64_t)INT64_MIN);
    w_kv(&kv, "f64", 12);
    w_f64(&kv, 0.25);
    w_kv(&kv, "general.alignment", 4);
    w_u32(&kv, 64);
    w_kv(&kv, "arr.f32", 9);
    w_u32(&kv, 6);
    w_u64(&kv, 3);
    w_f32(&kv, 1.0f);
    w_f32(&kv, -2.0f);
    w_f32(&kv, 0.5f);
    w_kv(&kv, "arr.i16", 9);
    w_u32(&kv, 3);
    w_u64(&kv, 2);
    w_le(&kv, (uint16_t)-7, 2);
    w_le(&kv, 9, 2);
    w_kv(&kv, "arr.str", 9);
    w_u32(&kv, 8);
    w_u64(&kv, 3);
    w_str(&kv, "x");
    w_str(&kv, "");
    w_str(&kv, "yz");
    /* [[1, 2], [], [["deep"]]] as array of arrays (third element holds an array of strings). */
    w_kv(&kv, "arr.nested", 9);
    w_u32(&kv, 9);
    w_u64(&kv, 3);
    w_u32(&kv, 5);
    w_u64(&kv, 2);
    w_u32(&kv, 1);
    w_u32(&kv, 2);
    w_u32(&kv, 0);
    w_u64(&kv, 0);
    w_u32(&kv, 9);
    w_u64(&kv, 1);
    w_u32(&kv, 8);
    w_u64(&kv, 1);
    w_str(&kv, "deep");
    w_kv(&kv, "arr.empty", 9);
    w_u32(&kv, 8);
    w_u64(&kv, 0);
    const uint64_t n_kv = 18;

    struct tinfo t[3] = {
        {"token_embd.weight", 2, {4, 2}, 0, 0},          /* F32, 32 bytes */
        {"blk.0.attn_q.weight", 3, {256, 1, 2}, 12, 64}, /* Q4_K, 288 bytes */
        {"blk.0.ffn.weight", 4, {32, 1, 1, 3}, 30, 384}, /* BF16, 192 bytes */
    };
    struct wbuf b = make(version, n_kv, &kv, t, 3, 64, 576);
    free(kv.p);

    struct ebb_diag d;
    struct ebb_gguf *g = NULL;
    ebb_err rc = try_open(b.p, b.n, &d, &g);
    if (rc)
        fail_msg("%s: %s", ebb_err_name(rc), d.msg);
    free(b.p);

    assert_int_equal(ebb_gguf_version(g), version);
    assert_int_equal(ebb_gguf_n_kv(g), n_kv);
    assert_int_equal(ebb_gguf_alignment(g), 64);
    assert_int_equal(ebb_gguf_data_offset(g) % 64, 0);
    assert_int_equal(ebb_gguf_file_size(g), ebb_gguf_data_offset(g) + 576);
    assert_string_equal(ebb_gguf_kv_key(g, 0), "u8");
    assert_null(ebb_gguf_kv_key(g, n_kv));
    assert_int_equal(ebb_gguf_kv_type(g, 11), EBB_GGUF_F64);
    assert_int_equal(ebb_gguf_find_kv(g, "arr.nested"), 16);
    assert_int_equal(ebb_gguf_find_kv(g, "nope"), -1);

    uint32_t u;
    int64_t i64;
    float f;
    bool bo;
    struct ebb_str s;
    assert_int_equal(ebb_gguf_get_u32(g, "u8", &u), EBB_OK);
    assert_int_equal(u, 200);
    assert_int_equal(ebb_gguf_get_u32(g, "u16", &u), EBB_OK);
    assert_int_equal(u, 65000);
    assert_int_equal(ebb_gguf_get_u32(g, "u32", &u), EBB_OK);
    assert_int_equal(u, 4000000000u);
    u = 7;
    assert_int_equal(ebb_gguf_get_u32(g, "i8", &u), EBB_ERANGE);
    assert_int_equal(ebb_gguf_get_u32(g, "u64", &u), EBB_ERANGE);
    assert_int_equal(u, 7); /* untouched on failure */
    assert_int_equal(ebb_gguf_get_u32(g, "str", &u), EBB_EINVAL);
    assert_int_equal(ebb_gguf_get_u32(g, "f32", &u), EBB_EINVAL);
    assert_int_equal(ebb_gguf_get_u32(g, "missing", &u), EBB_ENOTFOUND);
    assert_int_equal(ebb_gguf_get_i64(g, "i8", &i64), EBB_OK);
    assert_int_equal(i64, -5);
    assert_int_equal(ebb_gguf_get_i64(g, "i16", &i64), EBB_OK);
    assert_int_equal(i64, -300);
    assert_int_equal(ebb_gguf_get_i64(g, "i32", &i64), EBB_OK);
    assert_int_equal(i64, -70000);
    assert_int_equal(ebb_gguf_get_i64(g, "i64", &i64), EBB_OK);
    assert_true(i64 == INT64_MIN);
    assert_int_equal(ebb_gguf_get_i64(g, "u64", &i64), EBB_ERANGE);
    assert_int_equal(ebb_gguf_get_f32(g, "f32", &f), EBB_OK);
    assert_true(f == 1.5f);
    assert_int_equal(ebb_gguf_get_f32(g, "f64", &f), EBB_OK);
    assert_true(f == 0.25f);
    assert_int_equal(ebb_gguf_get_f32(g, "u8", &f), EBB_EINVAL);
    assert_int_equal(ebb_gguf_get_bool(g, "bool", &bo), EBB_OK);
    assert_true(bo);
    assert_int_equal(ebb_gguf_get_bool(g, "u8", &bo), EBB_EINVAL);
    assert_int_equal(ebb_gguf_get_str(g, "str", &s), EBB_OK);
    assert_int_equal(s.n, 3);
    assert_memory_equal(s.p, "h\0i", 3);
    assert_int_equal(ebb_gguf_get_str(g, "u8", &s), EBB_EINVAL);

    struct ebb_gguf_arr a, sub, sub2;
    assert_int_equal(ebb_gguf_get_arr(g, "arr.f32", &a), EBB_OK);
    assert_int_equal(a.type, EBB_GGUF_F32);
    assert_int_equal(a.n, 3);
    assert_int_equal(ebb_gguf_arr_f32(&a, 1, &f), EBB_OK);
    assert_true(f == -2.0f);
    assert_int_equal(ebb_gguf_arr_i64(&a, 1, &i64), EBB_OK);
    assert_int_equal(i64, -2);
    assert_int_equal(ebb_gguf_arr_i64(&a, 2, &i64), EBB_ERANGE); /* 0.5 is not integral */
    assert_int_equal(ebb_gguf_arr_f32(&a, 3, &f), EBB_ERANGE);
    assert_int_equal(ebb_gguf_arr_str(&a, 0, &s), EBB_EINVAL);
    assert_int_equal(ebb_gguf_get_arr(g, "arr.i16", &a), EBB_OK);
    assert_int_equal(ebb_gguf_arr_i64(&a, 0, &i64), EBB_OK);
    assert_int_equal(i64, -7);
    assert_int_equal(ebb_gguf_arr_f32(&a, 1, &f), EBB_OK);
    assert_true(f == 9.0f);
    assert_int_equal(ebb_gguf_get_arr(g, "arr.str", &a), EBB_OK);
    assert_int_equal(ebb_gguf_arr_str(&a, 0, &s), EBB_OK);
    assert_true(s.n == 1 && s.p[0] == 'x');
    assert_int_equal(ebb_gguf_arr_str(&a, 1, &s), EBB_OK);
    assert_int_equal(s.n, 0);
    assert_int_equal(ebb_gguf_arr_str(&a, 2, &s), EBB_OK);
    assert_true(s.n == 2 && !memcmp(s.p, "yz", 2));
    assert_int_equal(ebb_gguf_arr_str(&a, 3, &s), EBB_ERANGE);
    assert_int_equal(ebb_gguf_get_arr(g, "arr.empty", &a), EBB_OK);
    assert_int_equal(a.n, 0);
    assert_int_equal(ebb_gguf_get_arr(g, "u8", &a), EBB_EINVAL);

    assert_int_equal(ebb_gguf_get_arr(g, "arr.nested", &a), EBB_OK);
    assert_int_equal(a.type, EBB_GGUF_ARRAY);
    assert_int_equal(a.n, 3);
    assert_int_equal(ebb_gguf_arr_f32(&a, 0, &f), EBB_EINVAL);
    assert_int_equal(ebb_gguf_arr_sub(&a, 0, &sub), EBB_OK);
    assert_int_equal(sub.type, EBB_GGUF_I32);
    assert_int_equal(sub.n, 2);
    assert_int_equal(ebb_gguf_arr_i64(&sub, 1, &i64), EBB_OK);
    assert_int_equal(i64, 2);
    assert_int_equal(ebb_gguf_arr_sub(&a, 1, &sub), EBB_OK);
    assert_int_equal(sub.n, 0);
    assert_int_equal(ebb_gguf_arr_sub(&a, 2, &sub), EBB_OK);
    assert_int_equal(sub.type, EBB_GGUF_ARRAY);
    assert_int_equal(ebb_gguf_arr_sub(&sub, 0, &sub2), EBB_OK);
    assert_int_equal(sub2.type, EBB_GGUF_STRING);
    assert_int_equal(ebb_gguf_arr_str(&sub2, 0, &s), EBB_OK);
    assert_true(s.n == 4 && !memcmp(s.p, "deep", 4));
    assert_int_equal(ebb_gguf_arr_sub(&a, 3, &sub), EBB_ERANGE);

    assert_int_equal(ebb_gguf_n_tensors(g), 3);
    const uint8_t *base = ebb_gguf_base(g);
    const struct ebb_gguf_tensor *t0 = ebb_gguf_tensor_at(g, 0);
    assert_string_equal(t0->name, "token_embd.weight");
    assert_int_equal(t0->size, 32);
    assert_int_equal(t0->n_elements, 8);
    assert_true(t0->ne[2] == 1 && t0->ne[3] == 1);
    assert_ptr_equal(t0->data, base + ebb_gguf_data_offset(g));
    const struct ebb_gguf_tensor *t1 = ebb_gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_non_null(t1);
    assert_int_equal(t1->type, EBB_GGML_Q4_K);
    assert_int_equal(t1->n_dims, 3);
    assert_int_equal(t1->size, 288);
    assert_int_equal(t1->n_elements, 512);
    assert_ptr_equal(t1->data, base + ebb_gguf_data_offset(g) + 64);
    const struct ebb_gguf_tensor *t2 = ebb_gguf_tensor_at(g, 2);
    assert_int_equal(t2->size, 192);
    assert_int_equal(((const uint8_t *)t2->data)[0], 384 % 256); /* counting data pattern */
    assert_null(ebb_gguf_tensor_at(g, 3));
    assert_null(ebb_gguf_find_tensor(g, "blk.0"));
    close_owned(g);
}

static void test_valid_v3(void **state)
{
    (void)state;
    check_all_types(3);
}

static void test_valid_v2(void **state)
{
    (void)state;
    check_all_types(2);
}

static void test_no_tensors(void **state)
{
    (void)state;
    /* Header only: no metadata, no tensors, no padding. */
    struct wbuf b = make(3, 0, NULL, NULL, 0, 1, 0);
    struct ebb_diag d;
    struct ebb_gguf *g = NULL;
    assert_int_equal(try_open(b.p, b.n, &d, &g), EBB_OK);
    assert_int_equal(ebb_gguf_n_tensors(g), 0);
    assert_int_equal(ebb_gguf_n_kv(g), 0);
    assert_int_equal(ebb_gguf_alignment(g), 32);
    assert_null(ebb_gguf_find_tensor(g, "x"));
    close_owned(g);
    free(b.p);
}

static void test_type_table(void **state)
{
    (void)state;
    static const struct {
        uint32_t id;
        const char *name;
        uint32_t bs, ts;
    } want[] = {
        {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},
        {3, "Q4_1", 32, 20},    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},
        {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 40},    {10, "Q2_K", 256, 84},
        {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292}, {30, "BF16", 1, 2},
    };
    int known = 0;
    for (uint32_t id = 0; id < 256; id++)
        known += ebb_ggml_type_info(id) != NULL;
    assert_int_equal(known, 15);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct ebb_ggml_type_info *ti = ebb_ggml_type_info(want[i].id);
        assert_non_null(ti);
        assert_string_equal(ti->name, want[i].name);
        assert_int_equal(ti->block_size, want[i].bs);
        assert_int_equal(ti->type_size, want[i].ts);
    }
    uint64_t n;
    assert_int_equal(ebb_ggml_row_bytes(EBB_GGML_Q4_1, 576, &n), EBB_OK);
    assert_int_equal(n, 18 * 20);
    assert_int_equal(ebb_ggml_row_bytes(EBB_GGML_Q4_1, 577, &n), EBB_EFORMAT);
    assert_int_equal(ebb_ggml_row_bytes(99, 32, &n), EBB_EFORMAT);
    assert_int_equal(ebb_ggml_row_bytes(EBB_GGML_F32, UINT64_MAX / 2, &n), EBB_EOVERFLOW);
    assert_string_equal(ebb_ggml_type_name(16), "IQ2_XXS");
    assert_null(ebb_ggml_type_name(1000));
}

/* ---- malformed files ---- */

static void test_truncated_everywhere(void **state)
{
    (void)state;
    for (uint32_t v = 2; v <= 3; v++) {
        struct wbuf b = small_valid(v);
        struct ebb_diag d;
        struct ebb_gguf *g = NULL;
        assert_int_equal(try_open(b.p, b.n, &d, &g), EBB_OK);
        close_owned(g);
        for (size_t n = 0; n < b.n; n++) {
            ebb_err rc = try_open(b.p, n, &d, NULL);
            if (rc != EBB_EFORMAT)
                fail_msg("prefix of %zu/%zu bytes: %s '%s'", n, b.n, ebb_err_name(rc), d.msg);
        }
        free(b.p);
    }
}

static void test_bad_header(void **state)
{
    (void)state;
    struct wbuf b = small_valid(3);
    b.p[0] = 'X';
    expect_fail(b, EBB_EFORMAT, "bad magic");
    b = small_valid(3);
    b.p[4] = 1;
    expect_fail(b, EBB_EUNSUPPORTED, "version 1");
    b = small_valid(3);
    b.p[4] = 99;
    expect_fail(b, EBB_EUNSUPPORTED, "version 99");
    b = small_valid(3);
    b.p[4] = 0;
    b.p[7] = 3;
    expect_fail(b, EBB_EUNSUPPORTED, "big-endian");
    /* kv count 2^60, tensor count 2^60, both maximal. */
    b = make(3, 1ull << 60, NULL, NULL, 0, 1, 0);
    expect_fail(b, EBB_EFORMAT, "cannot fit");
    b = make(3, 0, NULL, NULL, 1ull << 60, 1, 0);
    expect_fail(b, EBB_EFORMAT, "cannot fit");
    b = make(3, UINT64_MAX, NULL, NULL, UINT64_MAX, 1, 0);
    expect_fail(b, EBB_EFORMAT, "cannot fit");
}

/* One metadata entry written by fn into an otherwise empty file. */
static struct wbuf one_kv(void (*fn)(struct wbuf *))
{
    struct wbuf kv = {0};
    fn(&kv);
    w_bytes(&kv, "0123456789abcdef", 16); /* so that the header's count check passes */
    struct wbuf b = make(3, 1, &kv, NULL, 0, 1, 0);
    free(kv.p);
    return b;
}

static void kv_long_string(struct wbuf *kv)
{
    w_kv(kv, "s", 8);
    w_u64(kv, 1ull << 40);
    w_bytes(kv, "abc", 3);
}

static void kv_huge_key(struct wbuf *kv)
{
    w_u64(kv, UINT64_MAX);
    w_bytes(kv, "key and some bytes after it", 27);
}

static void kv_nul_key(struct wbuf *kv)
{
    w_strn(kv, "a\0b", 3);
    w_u32(kv, 0);
    w_le(kv, 1, 1);
}

static void kv_empty_key(struct wbuf *kv)
{
    w_strn(kv, "", 0);
    w_u32(kv, 0);
    w_le(kv, 1, 1);
}

static void kv_bad_vtype(struct wbuf *kv)
{
    w_kv(kv, "k", 13);
    w_u64(kv, 0);
}

static void kv_arr_u32_overflow(struct wbuf *kv)
{
    w_kv(kv, "a", 9);
    w_u32(kv, 4);
    w_u64(kv, 1ull << 62); /* 2^62 * 4 overflows */
    w_u32(kv, 0);
}

static void kv_arr_past_end(struct wbuf *kv)
{
    w_kv(kv, "a", 9);
    w_u32(kv, 10);
    w_u64(kv, 1000);
    w_u64(kv, 0);
}

static void kv_arr_str_count(struct wbuf *kv)
{
    w_kv(kv, "a", 9);
    w_u32(kv, 8);
    w_u64(kv, 1ull << 61);
    w_str(kv, "x");
}

static void kv_arr_str_len(struct wbuf *kv)
{
    w_kv(kv, "a", 9);
    w_u32(kv, 8);
    w_u64(kv, 2);
    w_str(kv, "x");
    w_u64(kv, 1ull << 50);
}

static void kv_arr_bad_elem(struct wbuf *kv)
{
    w_kv(kv, "a", 9);
    w_u32(kv, 77);
    w_u64(kv, 1);
}

/* Arrays of arrays 100 deep. */
static void kv_deep_bomb(struct wbuf *kv)
{
    w_kv(kv, "a", 9);
    for (int i = 0; i < 100; i++) {
        w_u32(kv, 9);
        w_u64(kv, 1);
    }
    w_u32(kv, 0);
    w_u64(kv, 0);
}

/* An array claiming 2^58 sub-arrays. */
static void kv_wide_bomb(struct wbuf *kv)
{
    w_kv(kv, "a", 9);
    w_u32(kv, 9);
    w_u64(kv, 1ull << 58);
    for (int i = 0; i < 4; i++) {
        w_u32(kv, 0);
        w_u64(kv, 0);
    }
}

/* A fan-out of sub-arrays each claiming more elements than remain. */
static void kv_nested_count(struct wbuf *kv)
{
    w_kv(kv, "a", 9);
    w_u32(kv, 9);
    w_u64(kv, 2);
    w_u32(kv, 9);
    w_u64(kv, UINT64_MAX / 12);
    w_u32(kv, 0);
    w_u64(kv, 0);
}

static void kv_dup(struct wbuf *kv)
{
    w_kv(kv, "same", 4);
    w_u32(kv, 1);
}

static void test_bad_metadata(void **state)
{
    (void)state;
    expect_fail(one_kv(kv_long_string), EBB_EFORMAT, "past end of file");
    expect_fail(one_kv(kv_huge_key), EBB_EFORMAT, "key length");
    expect_fail(one_kv(kv_nul_key), EBB_EFORMAT, "control byte 0x00");
    expect_fail(one_kv(kv_empty_key), EBB_EFORMAT, "empty key");
    expect_fail(one_kv(kv_bad_vtype), EBB_EFORMAT, "unknown value type 13");
    expect_fail(one_kv(kv_arr_u32_overflow), EBB_EFORMAT, "past end of file");
    expect_fail(one_kv(kv_arr_past_end), EBB_EFORMAT, "past end of file");
    expect_fail(one_kv(kv_arr_str_count), EBB_EFORMAT, "cannot fit");
    expect_fail(one_kv(kv_arr_str_len), EBB_EFORMAT, "array string length");
    expect_fail(one_kv(kv_arr_bad_elem), EBB_EFORMAT, "unknown array element type 77");
    expect_fail(one_kv(kv_deep_bomb), EBB_EFORMAT, "nested deeper");
    expect_fail(one_kv(kv_wide_bomb), EBB_EFORMAT, "cannot fit");
    expect_fail(one_kv(kv_nested_count), EBB_EFORMAT, "cannot fit");

    struct wbuf kv = {0};
    kv_dup(&kv);
    kv_dup(&kv);
    struct wbuf b = make(3, 2, &kv, NULL, 0, 1, 0);
    free(kv.p);
    expect_fail(b, EBB_EFORMAT, "kv 1 'same': duplicate key");
}

/* A file with one alignment entry of the given type and value, and one tensor. */
static struct wbuf with_alignment(uint32_t type, uint64_t value)
{
    struct wbuf kv = {0};
    w_kv(&kv, "general.alignment", type);
    if (type == 8)
        w_str(&kv, "32");
    else
        w_le(&kv, value, type == 10 ? 8 : 4);
    struct tinfo t = {"t", 1, {8}, 0, 0};
    struct wbuf b = make(3, 1, &kv, &t, 1, 32, 32);
    free(kv.p);
    return b;
}

static void test_bad_alignment(void **state)
{
    (void)state;
    struct ebb_diag d;
    struct ebb_gguf *g = NULL;
    struct wbuf b = with_alignment(4, 32);
    assert_int_equal(try_open(b.p, b.n, &d, &g), EBB_OK);
    close_owned(g);
    free(b.p);
    expect_fail(with_alignment(4, 0), EBB_EFORMAT, "power of two");
    expect_fail(with_alignment(4, 48), EBB_EFORMAT, "power of two");
    expect_fail(with_alignment(10, 1ull << 40), EBB_EFORMAT, "power of two");
    expect_fail(with_alignment(5, (uint32_t)-32), EBB_EFORMAT, "power of two");
    expect_fail(with_alignment(8, 0), EBB_EFORMAT, "not an integer");
}

/* A file of the given tensors, data section of data_bytes. */
static struct wbuf with_tensors(const struct tinfo *t, uint64_t n, size_t data_bytes)
{
    return make(3, 0, NULL, t, n, 32, data_bytes);
}

static void test_bad_tensors(void **state)
{
    (void)state;
    struct tinfo t[2];
    t[0] = (struct tinfo){"blk.1.ffn_up.weight", 1, {64}, 0, 0};
    struct wbuf b = with_tensors(t, 1, 255);
    expect_fail(b, EBB_EFORMAT, "tensor 0 'blk.1.ffn_up.weight': data [");
    b = with_tensors(t, 1, 255);
    expect_fail(b, EBB_EFORMAT, "past end of file (size");
    t[0].offset = UINT64_MAX - 31;
    expect_fail(with_tensors(t, 1, 256), EBB_EFORMAT, "past end of file");
    t[0].offset = 16;
    expect_fail(with_tensors(t, 1, 512), EBB_EFORMAT, "not a multiple of the alignment 32");

    t[0] = (struct tinfo){"a", 1, {16}, 0, 0};
    t[1] = (struct tinfo){"b", 1, {16}, 0, 32};
    expect_fail(with_tensors(t, 2, 128), EBB_EFORMAT, "overlaps");
    t[1].offset = 0;
    expect_fail(with_tensors(t, 2, 128), EBB_EFORMAT, "overlaps");
    t[1].offset = 64;
    b = with_tensors(t, 2, 128);
    struct ebb_diag d;
    struct ebb_gguf *g = NULL;
    assert_int_equal(try_open(b.p, b.n, &d, &g), EBB_OK); /* adjacent is fine */
    close_owned(g);
    free(b.p);
    t[1].name = "a";
    expect_fail(with_tensors(t, 2, 128), EBB_EFORMAT, "tensor 1 'a': duplicate tensor name");

    t[0] = (struct tinfo){"t", 1, {32}, 99, 0};
    expect_fail(with_tensors(t, 1, 64), EBB_EUNSUPPORTED, "unknown tensor type 99");
    t[0].type = 16;
    expect_fail(with_tensors(t, 1, 64), EBB_EUNSUPPORTED, "IQ2_XXS");
    t[0].type = 2;
    t[0].ne[0] = 33;
    expect_fail(with_tensors(t, 1, 64), EBB_EFORMAT, "whole number of Q4_0 blocks");
    t[0] = (struct tinfo){"t", 0, {0}, 0, 0};
    expect_fail(with_tensors(t, 1, 64), EBB_EFORMAT, "n_dims 0");
    t[0] = (struct tinfo){"t", 5, {1, 1, 1, 1}, 0, 0};
    expect_fail(with_tensors(t, 1, 64), EBB_EFORMAT, "n_dims 5");
    t[0] = (struct tinfo){"t", 2, {1ull << 32, 1ull << 32}, 0, 0};
    expect_fail(with_tensors(t, 1, 64), EBB_EFORMAT, "element count overflows");
    t[0] = (struct tinfo){"t", 2, {1ull << 62, 2}, 0, 0}; /* fits u64 elements, not i64 */
    expect_fail(with_tensors(t, 1, 64), EBB_EFORMAT, "element count overflows");
    t[0] = (struct tinfo){"t", 1, {1ull << 62}, 0, 0}; /* elements fit, bytes overflow */
    expect_fail(with_tensors(t, 1, 64), EBB_EFORMAT, "byte size overflows");
    t[0] = (struct tinfo){"t", 2, {8, 0}, 0, 0};
    expect_fail(with_tensors(t, 1, 64), EBB_EFORMAT, "dimension 1 is 0");
    t[0] = (struct tinfo){"bad\nname", 1, {8}, 0, 0};
    expect_fail(with_tensors(t, 1, 64), EBB_EFORMAT, "control byte 0x0a");
}

/* ---- random input ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Reads everything a successfully opened file offers. */
static void touch_all(const struct ebb_gguf *g)
{
    for (uint64_t i = 0; i < ebb_gguf_n_kv(g); i++) {
        struct ebb_gguf_arr a, sub;
        struct ebb_str s;
        uint64_t u;
        assert_int_equal(ebb_gguf_find_kv(g, ebb_gguf_kv_key(g, i)), (int64_t)i);
        (void)ebb_gguf_kv_str(g, i, &s);
        (void)ebb_gguf_kv_u64(g, i, &u);
        if (ebb_gguf_kv_arr(g, i, &a) == EBB_OK && a.n) {
            float f;
            int64_t v;
            (void)ebb_gguf_arr_f32(&a, a.n - 1, &f);
            (void)ebb_gguf_arr_i64(&a, 0, &v);
            (void)ebb_gguf_arr_str(&a, a.n - 1, &s);
            (void)ebb_gguf_arr_sub(&a, a.n - 1, &sub);
        }
    }
    for (uint64_t i = 0; i < ebb_gguf_n_tensors(g); i++) {
        const struct ebb_gguf_tensor *t = ebb_gguf_tensor_at(g, i);
        assert_ptr_equal(ebb_gguf_find_tensor(g, t->name), t);
        const volatile uint8_t *p = t->data;
        (void)p[0];
        (void)p[t->size - 1];
    }
}

static void test_random_bytes(void **state)
{
    (void)state;
    uint8_t buf[600];
    int opened = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = (size_t)(rng() % sizeof(buf));
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)rng();
        /* Most random files die at the magic; give two thirds of them a plausible header with
         * small counts so the metadata and tensor parsers see random bytes too. */
        if (iter % 3 && n >= 24) {
            memcpy(buf, "GGUF", 4);
            buf[4] = (uint8_t)(2 + iter % 2);
            memset(buf + 5, 0, 3);
            memset(buf + 9, 0, 7);
            memset(buf + 17, 0, 7);
            buf[8] = (uint8_t)(rng() % 3);
            buf[16] = (uint8_t)(rng() % 4);
        }
        struct ebb_diag d;
        struct ebb_gguf *g = NULL;
        if (try_open(buf, n, &d, &g) == EBB_OK) {
            touch_all(g);
            close_owned(g);
            opened++;
        } else {
            assert_true(d.msg[0] != '\0');
        }
    }
    /* Mutations of a valid file: flip a few bytes each time. */
    struct wbuf b = small_valid(3);
    for (int iter = 0; iter < 3000; iter++) {
        uint8_t *m = malloc(b.n);
        assert_non_null(m);
        memcpy(m, b.p, b.n);
        int flips = 1 + (int)(rng() % 4);
        for (int k = 0; k < flips; k++)
            m[rng() % b.n] = (uint8_t)rng();
        struct ebb_diag d;
        struct ebb_gguf *g = NULL;
        if (try_open(m, b.n, &d, &g) == EBB_OK) {
            touch_all(g);
            close_owned(g);
            opened++;
        }
        free(m);
    }
    free(b.p);
    assert_true(opened > 0); /* some mutations only touch data bytes */
}

/* ---- real files ---- */

static void test_open_errors(void **state)
{
    (void)state;
    struct ebb_diag d;
    struct ebb_gguf *g = NULL;
    assert_int_equal(ebb_gguf_open("/nonexistent/x.gguf", &g, &d), EBB_ENOENT);
    assert_null(g);
    assert_int_equal(ebb_gguf_open("/", &g, &d), EBB_EINVAL);
    char path[] = "/tmp/test-gguf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(ebb_gguf_open(path, &g, &d), EBB_EFORMAT); /* empty */
    struct wbuf b = small_valid(2);
    assert_int_equal(write(fd, b.p, b.n), (ssize_t)b.n);
    close(fd);
    assert_int_equal(ebb_gguf_open(path, &g, &d), EBB_OK);
    assert_int_equal(ebb_gguf_version(g), 2);
    assert_int_equal(ebb_gguf_n_tensors(g), 2);
    ebb_gguf_close(g);
    ebb_gguf_close(NULL);
    unlink(path);
    free(b.p);
}

static void test_real_model(void **state)
{
    (void)state;
    char path[4096];
    const char *dir = getenv("EBB_MODELS_DIR");
    const char *home = getenv("HOME");
    if (dir)
        snprintf(path, sizeof(path), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else
        snprintf(path, sizeof(path), "%s/.local/share/ebb/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : "");
    if (access(path, R_OK) != 0)
        skip();
    struct ebb_diag d;
    struct ebb_gguf *g = NULL;
    ebb_err rc = ebb_gguf_open(path, &g, &d);
    if (rc)
        fail_msg("%s: %s", ebb_err_name(rc), d.msg);
    /* Figures from the gguf Python package's GGUFReader on the same file. */
    assert_int_equal(ebb_gguf_n_tensors(g), 272);
    assert_int_equal(ebb_gguf_n_kv(g), 33);
    assert_int_equal(ebb_gguf_data_offset(g), 1785664);
    uint64_t params = 0;
    for (uint64_t i = 0; i < ebb_gguf_n_tensors(g); i++)
        params += ebb_gguf_tensor_at(g, i)->n_elements;
    assert_int_equal(params, 134515008);
    struct ebb_gguf_arr a;
    struct ebb_str s;
    assert_int_equal(ebb_gguf_get_arr(g, "tokenizer.ggml.merges", &a), EBB_OK);
    assert_int_equal(a.n, 48900);
    assert_int_equal(ebb_gguf_get_str(g, "tokenizer.ggml.pre", &s), EBB_OK);
    assert_true(s.n == 6 && !memcmp(s.p, "smollm", 6));
    const struct ebb_gguf_tensor *t = ebb_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, EBB_GGML_Q8_0);
    assert_true(t->ne[0] == 576 && t->ne[1] == 49152);
    ebb_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_valid_v3),
        cmocka_unit_test(test_valid_v2),
        cmocka_unit_test(test_no_tensors),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_real_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
