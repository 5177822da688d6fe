/* libFuzzer target for the GGUF reader: parse an arbitrary image and, when it is accepted, read
 * every value, array element and tensor byte range the API exposes. Any crash, sanitizer report,
 * leak or allocation over the fuzzer's malloc limit is a finding. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void walk_arr(const struct ebb_gguf_arr *a, int depth)
{
    for (uint64_t i = 0; i < a->n; i++) {
        float f;
        int64_t v;
        struct ebb_str s;
        struct ebb_gguf_arr sub;
        if (ebb_gguf_arr_f32(a, i, &f) == EBB_OK)
            sink += (uint64_t)(f == f);
        if (ebb_gguf_arr_i64(a, i, &v) == EBB_OK)
            sink += (uint64_t)v;
        if (ebb_gguf_arr_str(a, i, &s) == EBB_OK && s.n)
            sink += (uint8_t)s.p[0] + (uint8_t)s.p[s.n - 1];
        if (ebb_gguf_arr_sub(a, i, &sub) == EBB_OK && depth < 16)
            walk_arr(&sub, depth + 1);
    }
    float f;
    if (ebb_gguf_arr_f32(a, a->n, &f) != EBB_ERANGE)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ebb_gguf *g = NULL;
    struct ebb_diag diag;
    if (ebb_gguf_open_mem(data, size, &g, &diag) != EBB_OK) {
        if (!memchr(diag.msg, '\0', sizeof(diag.msg)) || !diag.msg[0])
            __builtin_trap(); /* every failure carries a message */
        return 0;
    }
    sink += ebb_gguf_version(g) + ebb_gguf_alignment(g) + ebb_gguf_data_offset(g) +
            ebb_gguf_file_size(g);
    for (uint64_t i = 0; i < ebb_gguf_n_kv(g); i++) {
        const char *key = ebb_gguf_kv_key(g, i);
        if (ebb_gguf_find_kv(g, key) != (int64_t)i)
            __builtin_trap();
        uint32_t u;
        int64_t v;
        uint64_t w;
        float f;
        bool b;
        struct ebb_str s;
        struct ebb_gguf_arr a;
        sink += ebb_gguf_kv_type(g, i);
        sink += ebb_gguf_get_u32(g, key, &u) == EBB_OK ? u : 0;
        sink += ebb_gguf_get_i64(g, key, &v) == EBB_OK ? (uint64_t)v : 0;
        sink += ebb_gguf_get_f32(g, key, &f) == EBB_OK ? (f == f) : 0;
        sink += ebb_gguf_get_bool(g, key, &b) == EBB_OK ? b : 0;
        sink += ebb_gguf_kv_u64(g, i, &w) == EBB_OK ? w : 0;
        if (ebb_gguf_get_str(g, key, &s) == EBB_OK && s.n)
            sink += (uint8_t)s.p[s.n - 1];
        if (ebb_gguf_get_arr(g, key, &a) == EBB_OK)
            walk_arr(&a, 0);
        if (ebb_gguf_kv_str(g, i, &s) == EBB_OK)
            sink += s.n;
        if (ebb_gguf_kv_arr(g, i, &a) == EBB_OK)
            sink += a.n;
    }
    for (uint64_t i = 0; i < ebb_gguf_n_tensors(g); i++) {
        const struct ebb_gguf_tensor *t = ebb_gguf_tensor_at(g, i);
        if (ebb_gguf_find_tensor(g, t->name) != t || t->size == 0)
            __builtin_trap();
        const uint8_t *p = t->data;
        sink += p[0] + p[t->size - 1] + t->n_elements;
        uint64_t row;
        if (ebb_ggml_row_bytes(t->type, t->ne[0], &row) != EBB_OK)
            __builtin_trap();
    }
    if (ebb_gguf_tensor_at(g, ebb_gguf_n_tensors(g)) || ebb_gguf_kv_key(g, ebb_gguf_n_kv(g)))
        __builtin_trap();
    ebb_gguf_close(g);
    return 0;
}
