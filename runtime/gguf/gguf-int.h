/* Internals of the GGUF reader shared by gguf.c (parsing) and gguf-get.c (accessors). */
#ifndef EBB_RUNTIME_GGUF_INT_H
#define EBB_RUNTIME_GGUF_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"

/* Limits that keep a hostile file from costing stack or time; real files are far below them. */
#define EBB__GGUF_MAX_DEPTH 8        /* nesting of arrays inside arrays */
#define EBB__GGUF_MAX_KEY 65535      /* bytes of a metadata key (the GGUF spec's bound) */
#define EBB__GGUF_MAX_NAME 1024      /* bytes of a tensor name */
#define EBB__GGUF_DEFAULT_ALIGN 32u  /* general.alignment when absent */
#define EBB__GGUF_HEADER_BYTES 24u   /* magic, version, tensor count, kv count */
#define EBB__GGUF_MIN_KV_BYTES 14u   /* key length, 1-byte key, value type, 1-byte value */
#define EBB__GGUF_MIN_TINFO_BYTES 33 /* name length, 1-byte name, n_dims, one ne, type, offset */
#define EBB__GGUF_ARR_HDR_BYTES 12u  /* element type + element count */

/* One element of an array of arrays: where its header lies and its own index (or NULL). */
struct ebb__gguf_sub {
    const uint8_t *hdr;
    const void *priv;
};

/* Index behind ebb_gguf_arr.priv:
 * - STRING elements: `const uint8_t *const *`, element i's length prefix;
 * - ARRAY elements: `const struct ebb__gguf_sub *`, element i's header and index;
 * - fixed-size elements: NULL (element i is at data + i * size). */

struct ebb__gguf_kv {
    const char *key;          /* NUL-terminated copy */
    enum ebb_gguf_vtype type; /* value type */
    const uint8_t *val;       /* value bytes in the image; STRING: the length prefix */
    struct ebb_gguf_arr arr;  /* type == EBB_GGUF_ARRAY only */
};

struct ebb__arena_chunk;

struct ebb_gguf {
    const uint8_t *base;
    uint64_t size;
    bool mapped; /* base came from mmap and is unmapped on close */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;

    uint64_t n_kv;
    struct ebb__gguf_kv *kv;
    uint64_t n_tensors;
    struct ebb_gguf_tensor *tensors;

    /* Open-addressing hash tables of index + 1 (0 = empty slot), sized to a power of two. */
    uint64_t *kv_slots;
    uint64_t kv_mask;
    uint64_t *t_slots;
    uint64_t t_mask;

    struct ebb__arena_chunk *arena;

    /* A split model opened as one (gguf-file.c): base maps every part, each at a page
     * boundary after the one before, size spans them all; parts are the later parts' own
     * indexes (their tensor names), unmapped by this one. */
    struct ebb_gguf **parts;
    uint32_t n_parts;
};

/* Little-endian loads from possibly unaligned bytes. */
static inline uint16_t ebb__gguf_rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t ebb__gguf_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t ebb__gguf_rd64(const uint8_t *p)
{
    return (uint64_t)ebb__gguf_rd32(p) | ((uint64_t)ebb__gguf_rd32(p + 4) << 32);
}

/* Bytes of one fixed-size value of type t; 0 for STRING, ARRAY and unknown types. */
uint32_t ebb__gguf_vtype_size(uint32_t t);

/* An integer of any stored width, with its sign. */
struct ebb__gguf_ival {
    bool neg;
    uint64_t mag; /* |value|; for negative values mag = -(value) as unsigned */
};

/* Reads an integer value of GGUF type t at p; false when t is not an integer type. */
bool ebb__gguf_read_int(uint32_t t, const uint8_t *p, struct ebb__gguf_ival *v);

/* gguf.c's pieces gguf-file.c builds on: the parse of an image (mapped: close unmaps it), an
 * allocation from g's arena, and g's tensor index built again over g->tensors. */
ebb_err ebb__gguf_open_image(const void *data, uint64_t size, bool mapped, struct ebb_gguf **out,
                             struct ebb_diag *diag);
void *ebb__gguf_alloc(struct ebb_gguf *g, uint64_t bytes);
ebb_err ebb__gguf_index_tensors(struct ebb_gguf *g, struct ebb_diag *diag);

/* FNV-1a over n bytes; the hash tables use it for keys and tensor names. */
uint64_t ebb__gguf_hash(const char *s, size_t n);

#endif
