/* A minimal GGUF writer for tests: builds images byte by byte in a growable buffer, so that
 * tests can write valid files and every kind of malformed one. Test-only; not a product API. */
#ifndef EBB_TESTS_GGUF_WRITER_H
#define EBB_TESTS_GGUF_WRITER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct wbuf {
    uint8_t *p;
    size_t n, cap;
};

static inline void w_bytes(struct wbuf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    if (n)
        memcpy(b->p + b->n, d, n);
    b->n += n;
}

static inline void w_le(struct wbuf *b, uint64_t v, int bytes)
{
    uint8_t t[8];
    for (int i = 0; i < bytes; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    w_bytes(b, t, (size_t)bytes);
}

static inline void w_u32(struct wbuf *b, uint32_t v)
{
    w_le(b, v, 4);
}

static inline void w_u64(struct wbuf *b, uint64_t v)
{
    w_le(b, v, 8);
}

static inline void w_f32(struct wbuf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    w_u32(b, u);
}

static inline void w_f64(struct wbuf *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    w_u64(b, u);
}

static inline void w_strn(struct wbuf *b, const char *s, size_t n)
{
    w_u64(b, n);
    w_bytes(b, s, n);
}

static inline void w_str(struct wbuf *b, const char *s)
{
    w_strn(b, s, strlen(s));
}

/* Key and value type of one metadata entry; the caller writes the value. */
static inline void w_kv(struct wbuf *b, const char *key, uint32_t type)
{
    w_str(b, key);
    w_u32(b, type);
}

struct tinfo {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t offset;
};

/* A whole file: header, n_kv entries already written to kvs, tensor infos, padding to align,
 * then data_bytes bytes of data (a counting pattern). */
static inline struct wbuf make(uint32_t version, uint64_t n_kv, const struct wbuf *kvs,
                               const struct tinfo *t, uint64_t n_t, uint32_t align,
                               size_t data_bytes)
{
    struct wbuf b = {0};
    w_bytes(&b, "GGUF", 4);
    w_u32(&b, version);
    w_u64(&b, n_t);
    w_u64(&b, n_kv);
    if (kvs)
        w_bytes(&b, kvs->p, kvs->n);
    for (uint64_t i = 0; t && i < n_t; i++) {
        w_str(&b, t[i].name);
        w_u32(&b, t[i].n_dims);
        for (uint32_t d = 0; d < t[i].n_dims; d++)
            w_u64(&b, d < 4 ? t[i].ne[d] : 1); /* n_dims 5 gets a fifth 1 */
        w_u32(&b, t[i].type);
        w_u64(&b, t[i].offset);
    }
    while (b.n % align)
        w_bytes(&b, "\0", 1);
    for (size_t i = 0; i < data_bytes; i++) {
        uint8_t c = (uint8_t)i;
        w_bytes(&b, &c, 1);
    }
    return b;
}

#endif
