/* GGUF parsing: mapping, header, metadata, tensor infos and their validation. See docs/GGUF.md.
 *
 * Every read goes through a cursor that checks the bytes are there before touching them, and
 * every count is checked against the bytes left before anything is allocated for it, so the
 * memory a file can make us allocate is proportional to its size. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf-int.h"

/* ---- arena: all index memory of one file, freed at once on close ---- */

struct ebb__arena_chunk {
    struct ebb__arena_chunk *next;
    size_t used;
    size_t cap;
    _Alignas(16) unsigned char mem[];
};

#define EBB__ARENA_CHUNK ((size_t)64 * 1024)

static void *arena_alloc(struct ebb_gguf *g, uint64_t bytes)
{
    if (bytes > SIZE_MAX / 2)
        return NULL;
    size_t n = ((size_t)bytes + 15) & ~(size_t)15;
    struct ebb__arena_chunk *c = g->arena;
    if (!c || c->cap - c->used < n) {
        /* Small files get small chunks: the index is proportional to the file. */
        size_t chunk = g->size < EBB__ARENA_CHUNK ? (size_t)g->size + 1024 : EBB__ARENA_CHUNK;
        size_t cap = n > chunk ? n : chunk;
        c = malloc(sizeof(*c) + cap);
        if (!c)
            return NULL;
        c->cap = cap;
        c->used = 0;
        c->next = g->arena;
        g->arena = c;
    }
    void *p = c->mem + c->used;
    c->used += n;
    return p;
}

static void arena_free(struct ebb__arena_chunk *c)
{
    while (c) {
        struct ebb__arena_chunk *next = c->next;
        free(c);
        c = next;
    }
}

/* ---- cursor ---- */

struct parser {
    struct ebb_gguf *g;
    uint64_t pos;
    struct ebb_diag *diag;
    char where[128]; /* "kv 5 'general.name'", "tensor 17 'blk.1.ffn_up.weight'" */
};

static uint64_t left(const struct parser *ps)
{
    return ps->g->size - ps->pos;
}

static ebb_err need(struct parser *ps, uint64_t n, const char *what)
{
    if (n > left(ps))
        return ebb_diag_set(ps->diag, EBB_EFORMAT,
                            "%s: %s (%" PRIu64 " bytes at offset %" PRIu64
                            ") runs past end of file (size %" PRIu64 ")",
                            ps->where, what, n, ps->pos, ps->g->size);
    return EBB_OK;
}

static ebb_err rd_u32(struct parser *ps, const char *what, uint32_t *out)
{
    ebb_err rc = need(ps, 4, what);
    if (rc)
        return rc;
    *out = ebb__gguf_rd32(ps->g->base + ps->pos);
    ps->pos += 4;
    return EBB_OK;
}

static ebb_err rd_u64(struct parser *ps, const char *what, uint64_t *out)
{
    ebb_err rc = need(ps, 8, what);
    if (rc)
        return rc;
    *out = ebb__gguf_rd64(ps->g->base + ps->pos);
    ps->pos += 8;
    return EBB_OK;
}

/* Reads a length-prefixed string and leaves the cursor after it. */
static ebb_err rd_str(struct parser *ps, const char *what, struct ebb_str *out)
{
    uint64_t n;
    ebb_err rc = rd_u64(ps, what, &n);
    if (rc)
        return rc;
    if (n > left(ps))
        return ebb_diag_set(ps->diag, EBB_EFORMAT,
                            "%s: %s length %" PRIu64 " at offset %" PRIu64
                            " runs past end of file (size %" PRIu64 ")",
                            ps->where, what, n, ps->pos - 8, ps->g->size);
    out->p = (const char *)ps->g->base + ps->pos;
    out->n = n;
    ps->pos += n;
    return EBB_OK;
}

/* Keys and tensor names must be printable: no NUL or other control bytes. Bytes >= 0x80 are
 * allowed (UTF-8 names); printers escape them as needed. */
static ebb_err check_name(struct parser *ps, const char *what, struct ebb_str s, uint64_t max)
{
    if (s.n == 0)
        return ebb_diag_set(ps->diag, EBB_EFORMAT, "%s: empty %s", ps->where, what);
    if (s.n > max)
        return ebb_diag_set(ps->diag, EBB_EFORMAT,
                            "%s: %s of %" PRIu64 " bytes is longer than %" PRIu64, ps->where, what,
                            s.n, max);
    for (uint64_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        if (c < 0x20 || c == 0x7f)
            return ebb_diag_set(ps->diag, EBB_EFORMAT,
                                "%s: %s contains control byte 0x%02x at position %" PRIu64,
                                ps->where, what, c, i);
    }
    return EBB_OK;
}

/* Names what is being parsed for error messages: "kv 5 'general.name'". Bytes outside printable
 * ASCII become '?' so that messages are always valid UTF-8 (the API puts them into JSON). */
static void set_where(struct parser *ps, const char *kind, uint64_t i, struct ebb_str name)
{
    char shown[81];
    size_t n = name.n < sizeof(shown) - 1 ? (size_t)name.n : sizeof(shown) - 1;
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)name.p[k];
        shown[k] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    shown[n] = '\0';
    snprintf(ps->where, sizeof(ps->where), "%s %" PRIu64 " '%s'", kind, i, shown);
}

static char *copy_name(struct ebb_gguf *g, struct ebb_str s)
{
    char *p = arena_alloc(g, s.n + 1);
    if (p) {
        memcpy(p, s.p, s.n);
        p[s.n] = '\0';
    }
    return p;
}

/* ---- metadata values ---- */

static ebb_err parse_array(struct parser *ps, int depth, struct ebb_gguf_arr *out);

static ebb_err check_vtype(struct parser *ps, uint32_t t, const char *what)
{
    if (t > EBB_GGUF_F64)
        return ebb_diag_set(ps->diag, EBB_EFORMAT,
                            "%s: unknown %s type %" PRIu32 " at offset %" PRIu64, ps->where, what,
                            t, ps->pos - 4);
    return EBB_OK;
}

/* Reads an array header and its elements, building the index that random access needs. */
static ebb_err parse_array(struct parser *ps, int depth, struct ebb_gguf_arr *out)
{
    uint32_t et;
    uint64_t n;
    ebb_err rc = rd_u32(ps, "array element type", &et);
    if (!rc)
        rc = check_vtype(ps, et, "array element");
    if (!rc)
        rc = rd_u64(ps, "array count", &n);
    if (rc)
        return rc;
    out->type = (enum ebb_gguf_vtype)et;
    out->n = n;
    out->data = ps->g->base + ps->pos;
    out->priv = NULL;

    uint32_t esz = ebb__gguf_vtype_size(et);
    if (esz) {
        uint64_t bytes;
        if (__builtin_mul_overflow(n, (uint64_t)esz, &bytes) || bytes > left(ps))
            return ebb_diag_set(ps->diag, EBB_EFORMAT,
                                "%s: array of %" PRIu64 " elements of %" PRIu32
                                " bytes at offset %" PRIu64 " runs past end of file (size %" PRIu64
                                ")",
                                ps->where, n, esz, ps->pos, ps->g->size);
        ps->pos += bytes;
        return EBB_OK;
    }

    /* Strings take at least their 8-byte length, arrays their 12-byte header: a count the rest
     * of the file cannot hold is rejected before its index is allocated. */
    uint64_t min = et == EBB_GGUF_STRING ? 8 : EBB__GGUF_ARR_HDR_BYTES;
    if (n > left(ps) / min)
        return ebb_diag_set(ps->diag, EBB_EFORMAT,
                            "%s: array count %" PRIu64 " at offset %" PRIu64
                            " cannot fit in the %" PRIu64 " bytes left",
                            ps->where, n, ps->pos - 8, left(ps));
    if (n == 0)
        return EBB_OK;

    if (et == EBB_GGUF_STRING) {
        const uint8_t **idx = arena_alloc(ps->g, n * sizeof(*idx));
        if (!idx)
            return ebb_diag_set(ps->diag, EBB_ENOMEM, "%s: out of memory", ps->where);
        for (uint64_t i = 0; i < n; i++) {
            struct ebb_str s;
            idx[i] = ps->g->base + ps->pos;
            rc = rd_str(ps, "array string", &s);
            if (rc)
                return rc;
        }
        out->priv = idx;
        return EBB_OK;
    }

    if (depth >= EBB__GGUF_MAX_DEPTH)
        return ebb_diag_set(ps->diag, EBB_EFORMAT,
                            "%s: arrays nested deeper than %d at offset %" PRIu64, ps->where,
                            EBB__GGUF_MAX_DEPTH, ps->pos);
    struct ebb__gguf_sub *sub = arena_alloc(ps->g, n * sizeof(*sub));
    if (!sub)
        return ebb_diag_set(ps->diag, EBB_ENOMEM, "%s: out of memory", ps->where);
    for (uint64_t i = 0; i < n; i++) {
        struct ebb_gguf_arr a;
        sub[i].hdr = ps->g->base + ps->pos;
        rc = parse_array(ps, depth + 1, &a);
        if (rc)
            return rc;
        sub[i].priv = a.priv;
    }
    out->priv = sub;
    return EBB_OK;
}

static ebb_err parse_kv(struct parser *ps, uint64_t i, struct ebb__gguf_kv *kv)
{
    struct ebb_str key;
    uint32_t t;
    snprintf(ps->where, sizeof(ps->where), "kv %" PRIu64, i);
    ebb_err rc = rd_str(ps, "key", &key);
    if (!rc)
        rc = check_name(ps, "key", key, EBB__GGUF_MAX_KEY);
    if (rc)
        return rc;
    set_where(ps, "kv", i, key);
    if (!(kv->key = copy_name(ps->g, key)))
        return ebb_diag_set(ps->diag, EBB_ENOMEM, "%s: out of memory", ps->where);
    rc = rd_u32(ps, "value type", &t);
    if (!rc)
        rc = check_vtype(ps, t, "value");
    if (rc)
        return rc;
    kv->type = (enum ebb_gguf_vtype)t;
    kv->val = ps->g->base + ps->pos;
    memset(&kv->arr, 0, sizeof(kv->arr));
    if (t == EBB_GGUF_STRING) {
        struct ebb_str s;
        return rd_str(ps, "string value", &s);
    }
    if (t == EBB_GGUF_ARRAY)
        return parse_array(ps, 1, &kv->arr);
    rc = need(ps, ebb__gguf_vtype_size(t), "value");
    if (!rc)
        ps->pos += ebb__gguf_vtype_size(t);
    return rc;
}

/* ---- hash tables of names ---- */

uint64_t ebb__gguf_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t *slots_new(struct ebb_gguf *g, uint64_t n, uint64_t *mask)
{
    uint64_t cap = 8;
    while (cap < 2 * n)
        cap *= 2;
    uint64_t *s = arena_alloc(g, cap * sizeof(*s));
    if (s)
        memset(s, 0, cap * sizeof(*s));
    *mask = cap - 1;
    return s;
}

/* Finds name in a table whose entries name(i) gives; returns the slot (empty or matching). */
static uint64_t slot_find(const uint64_t *slots, uint64_t mask, const char *name,
                          const char *(*name_of)(const struct ebb_gguf *, uint64_t),
                          const struct ebb_gguf *g)
{
    uint64_t h = ebb__gguf_hash(name, strlen(name)) & mask;
    while (slots[h] && strcmp(name_of(g, slots[h] - 1), name) != 0)
        h = (h + 1) & mask;
    return h;
}

static const char *kv_name(const struct ebb_gguf *g, uint64_t i)
{
    return g->kv[i].key;
}

static const char *tensor_name(const struct ebb_gguf *g, uint64_t i)
{
    return g->tensors[i].name;
}

int64_t ebb_gguf_find_kv(const struct ebb_gguf *g, const char *key)
{
    if (!g || !key || !g->kv_slots)
        return -1;
    uint64_t s = g->kv_slots[slot_find(g->kv_slots, g->kv_mask, key, kv_name, g)];
    return s ? (int64_t)(s - 1) : -1;
}

const struct ebb_gguf_tensor *ebb_gguf_find_tensor(const struct ebb_gguf *g, const char *name)
{
    if (!g || !name || !g->t_slots)
        return NULL;
    uint64_t s = g->t_slots[slot_find(g->t_slots, g->t_mask, name, tensor_name, g)];
    return s ? &g->tensors[s - 1] : NULL;
}

/* ---- tensors ---- */

static ebb_err parse_tinfo(struct parser *ps, uint64_t i, struct ebb_gguf_tensor *t)
{
    struct ebb_str name;
    snprintf(ps->where, sizeof(ps->where), "tensor %" PRIu64, i);
    ebb_err rc = rd_str(ps, "name", &name);
    if (!rc)
        rc = check_name(ps, "name", name, EBB__GGUF_MAX_NAME);
    if (rc)
        return rc;
    set_where(ps, "tensor", i, name);
    if (!(t->name = copy_name(ps->g, name)))
        return ebb_diag_set(ps->diag, EBB_ENOMEM, "%s: out of memory", ps->where);
    rc = rd_u32(ps, "n_dims", &t->n_dims);
    if (rc)
        return rc;
    if (t->n_dims < 1 || t->n_dims > 4)
        return ebb_diag_set(ps->diag, EBB_EFORMAT, "%s: n_dims %" PRIu32 " is not in 1..4",
                            ps->where, t->n_dims);
    t->n_elements = 1;
    for (uint32_t d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if (d < t->n_dims && (rc = rd_u64(ps, "dimension", &t->ne[d])))
            return rc;
        if (t->ne[d] == 0)
            return ebb_diag_set(ps->diag, EBB_EFORMAT, "%s: dimension %" PRIu32 " is 0", ps->where,
                                d);
        if (__builtin_mul_overflow(t->n_elements, t->ne[d], &t->n_elements) ||
            t->n_elements > (uint64_t)INT64_MAX)
            return ebb_diag_set(ps->diag, EBB_EFORMAT,
                                "%s: element count overflows at dimension %" PRIu32
                                " (ne = %" PRIu64 ")",
                                ps->where, d, t->ne[d]);
    }
    rc = rd_u32(ps, "type", &t->type);
    if (!rc)
        rc = rd_u64(ps, "offset", &t->offset);
    return rc;
}

/* Checks what needs the data offset: type, size, alignment, bounds. */
static ebb_err check_tensor(struct parser *ps, uint64_t i, struct ebb_gguf_tensor *t)
{
    struct ebb_gguf *g = ps->g;
    const struct ebb_ggml_type_info *ti = ebb_ggml_type_info(t->type);
    set_where(ps, "tensor", i, (struct ebb_str){t->name, strlen(t->name)});
    if (!ti) {
        const char *name = ebb_ggml_type_name(t->type);
        if (name)
            return ebb_diag_set(ps->diag, EBB_EUNSUPPORTED,
                                "%s: tensor type %s (%" PRIu32 ") is not supported", ps->where,
                                name, t->type);
        return ebb_diag_set(ps->diag, EBB_EUNSUPPORTED, "%s: unknown tensor type %" PRIu32,
                            ps->where, t->type);
    }
    if (t->ne[0] % ti->block_size)
        return ebb_diag_set(ps->diag, EBB_EFORMAT,
                            "%s: row of %" PRIu64 " elements is not a whole number of %s blocks "
                            "of %" PRIu32,
                            ps->where, t->ne[0], ti->name, ti->block_size);
    uint64_t row, size = 0;
    if (ebb_ggml_row_bytes(t->type, t->ne[0], &row) ||
        __builtin_mul_overflow(row, t->n_elements / t->ne[0], &size))
        return ebb_diag_set(ps->diag, EBB_EFORMAT, "%s: byte size overflows", ps->where);
    t->size = size;
    if (t->offset % g->alignment)
        return ebb_diag_set(ps->diag, EBB_EFORMAT,
                            "%s: offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
                            ps->where, t->offset, g->alignment);
    uint64_t a, b;
    if (__builtin_add_overflow(g->data_offset, t->offset, &a) ||
        __builtin_add_overflow(a, t->size, &b) || b > g->size)
        return ebb_diag_set(
            ps->diag, EBB_EFORMAT,
            "%s: data [%" PRIu64 ", %" PRIu64 ") past end of file (size %" PRIu64 ")", ps->where,
            g->data_offset + t->offset, g->data_offset + t->offset + t->size, g->size);
    t->data = g->base + a;
    return EBB_OK;
}

static int cmp_offset(const void *pa, const void *pb)
{
    const struct ebb_gguf_tensor *a = *(const struct ebb_gguf_tensor *const *)pa;
    const struct ebb_gguf_tensor *b = *(const struct ebb_gguf_tensor *const *)pb;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

static ebb_err check_overlap(struct parser *ps)
{
    struct ebb_gguf *g = ps->g;
    if (g->n_tensors < 2)
        return EBB_OK;
    const struct ebb_gguf_tensor **by = malloc(g->n_tensors * sizeof(*by));
    if (!by)
        return ebb_diag_set(ps->diag, EBB_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++)
        by[i] = &g->tensors[i];
    qsort(by, g->n_tensors, sizeof(*by), cmp_offset);
    ebb_err rc = EBB_OK;
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const struct ebb_gguf_tensor *p = by[i - 1], *t = by[i];
        if (p->offset + p->size > t->offset) {
            rc = ebb_diag_set(ps->diag, EBB_EFORMAT,
                              "tensor %" PRIu64 " '%.80s' data [%" PRIu64 ", %" PRIu64
                              ") overlaps tensor %" PRIu64 " '%.80s' data [%" PRIu64 ", %" PRIu64
                              ")",
                              (uint64_t)(t - g->tensors), t->name, t->offset, t->offset + t->size,
                              (uint64_t)(p - g->tensors), p->name, p->offset, p->offset + p->size);
            break;
        }
    }
    free(by);
    return rc;
}

/* ---- whole file ---- */

static ebb_err read_alignment(struct parser *ps)
{
    struct ebb_gguf *g = ps->g;
    g->alignment = EBB__GGUF_DEFAULT_ALIGN;
    int64_t i = ebb_gguf_find_kv(g, "general.alignment");
    if (i < 0)
        return EBB_OK;
    struct ebb__gguf_ival v;
    if (!ebb__gguf_read_int(g->kv[i].type, g->kv[i].val, &v))
        return ebb_diag_set(ps->diag, EBB_EFORMAT, "general.alignment has type %s, not an integer",
                            ebb_gguf_vtype_name(g->kv[i].type));
    uint32_t a = v.neg || v.mag > UINT32_MAX ? 0 : (uint32_t)v.mag;
    if (a == 0 || (a & (a - 1)))
        return ebb_diag_set(ps->diag, EBB_EFORMAT,
                            "general.alignment is not a nonzero 32-bit power of two");
    g->alignment = a;
    return EBB_OK;
}

static ebb_err parse(struct ebb_gguf *g, struct ebb_diag *diag)
{
    struct parser ps = {.g = g, .pos = 0, .diag = diag, .where = "header"};
    uint32_t version;
    uint64_t n_tensors, n_kv;
    ebb_err rc = EBB_OK;
    if (g->size < EBB__GGUF_HEADER_BYTES)
        return ebb_diag_set(diag, EBB_EFORMAT,
                            "file of %" PRIu64 " bytes is too short for a GGUF header (24 bytes)",
                            g->size);
    if (memcmp(g->base, "GGUF", 4) != 0)
        return ebb_diag_set(diag, EBB_EFORMAT, "not a GGUF file (bad magic %02x %02x %02x %02x)",
                            g->base[0], g->base[1], g->base[2], g->base[3]);
    ps.pos = 4;
    rd_u32(&ps, "version", &version);
    if (version == 1)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "GGUF version 1 is not supported (only versions 2 and 3)");
    if (version == 0x02000000u || version == 0x03000000u)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "big-endian GGUF files are not supported");
    if (version != 2 && version != 3)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "GGUF version %" PRIu32 " is not supported (only versions 2 and 3)",
                            version);
    g->version = version;
    rd_u64(&ps, "tensor count", &n_tensors);
    rd_u64(&ps, "kv count", &n_kv);

    /* Bound both counts by the smallest record each needs before allocating anything. */
    uint64_t kv_min, t_min, total;
    if (__builtin_mul_overflow(n_kv, (uint64_t)EBB__GGUF_MIN_KV_BYTES, &kv_min) ||
        __builtin_mul_overflow(n_tensors, (uint64_t)EBB__GGUF_MIN_TINFO_BYTES, &t_min) ||
        __builtin_add_overflow(kv_min, t_min, &total) || total > left(&ps))
        return ebb_diag_set(diag, EBB_EFORMAT,
                            "header: %" PRIu64 " metadata entries and %" PRIu64
                            " tensors cannot fit in a file of %" PRIu64 " bytes",
                            n_kv, n_tensors, g->size);

    g->kv = arena_alloc(g, n_kv * sizeof(*g->kv));
    g->tensors = arena_alloc(g, n_tensors * sizeof(*g->tensors));
    g->kv_slots = slots_new(g, n_kv, &g->kv_mask);
    g->t_slots = slots_new(g, n_tensors, &g->t_mask);
    if (!g->kv || !g->tensors || !g->kv_slots || !g->t_slots)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");

    for (uint64_t i = 0; i < n_kv; i++) {
        if ((rc = parse_kv(&ps, i, &g->kv[i])))
            return rc;
        g->n_kv = i + 1;
        uint64_t s = slot_find(g->kv_slots, g->kv_mask, g->kv[i].key, kv_name, g);
        if (g->kv_slots[s])
            return ebb_diag_set(diag, EBB_EFORMAT, "%s: duplicate key (first at kv %" PRIu64 ")",
                                ps.where, g->kv_slots[s] - 1);
        g->kv_slots[s] = i + 1;
    }
    if ((rc = read_alignment(&ps)))
        return rc;

    for (uint64_t i = 0; i < n_tensors; i++) {
        if ((rc = parse_tinfo(&ps, i, &g->tensors[i])))
            return rc;
        g->n_tensors = i + 1;
        uint64_t s = slot_find(g->t_slots, g->t_mask, g->tensors[i].name, tensor_name, g);
        if (g->t_slots[s])
            return ebb_diag_set(diag, EBB_EFORMAT,
                                "%s: duplicate tensor name (first at tensor %" PRIu64 ")", ps.where,
                                g->t_slots[s] - 1);
        g->t_slots[s] = i + 1;
    }

    /* The data section starts at the next multiple of the alignment. With no tensors a file
     * may end before it, so only tensors are checked against the file size. */
    uint64_t a = g->alignment;
    if (__builtin_add_overflow(ps.pos, a - 1, &g->data_offset))
        return ebb_diag_set(diag, EBB_EFORMAT, "data offset overflows");
    g->data_offset &= ~(a - 1);
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((rc = check_tensor(&ps, i, &g->tensors[i])))
            return rc;
    return check_overlap(&ps);
}

void *ebb__gguf_alloc(struct ebb_gguf *g, uint64_t bytes)
{
    return arena_alloc(g, bytes);
}

ebb_err ebb__gguf_index_tensors(struct ebb_gguf *g, struct ebb_diag *diag)
{
    g->t_slots = slots_new(g, g->n_tensors, &g->t_mask);
    if (!g->t_slots)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        uint64_t s = slot_find(g->t_slots, g->t_mask, g->tensors[i].name, tensor_name, g);
        if (g->t_slots[s])
            return ebb_diag_set(diag, EBB_EFORMAT,
                                "tensor '%.80s' is in two parts of the split model",
                                g->tensors[i].name);
        g->t_slots[s] = i + 1;
    }
    return EBB_OK;
}

ebb_err ebb__gguf_open_image(const void *data, uint64_t size, bool mapped, struct ebb_gguf **out,
                             struct ebb_diag *diag)
{
    struct ebb_gguf *g = calloc(1, sizeof(*g));
    if (!g)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    g->base = data;
    g->size = size;
    ebb_err rc = parse(g, diag);
    if (rc) {
        g->mapped = false; /* the caller unmaps on failure */
        ebb_gguf_close(g);
        return rc;
    }
    g->mapped = mapped;
    *out = g;
    return EBB_OK;
}

ebb_err ebb_gguf_open_mem(const void *data, size_t size, struct ebb_gguf **out,
                          struct ebb_diag *diag)
{
    if (!out || (!data && size))
        return ebb_diag_set(diag, EBB_EINVAL, "invalid argument");
    static const uint8_t empty[1];
    return ebb__gguf_open_image(data ? data : empty, size, false, out, diag);
}

void ebb_gguf_close(struct ebb_gguf *g)
{
    if (!g)
        return;
    if (g->mapped)
        munmap((void *)g->base, (size_t)g->size);
    for (uint32_t i = 0; i < g->n_parts; i++)
        ebb_gguf_close(g->parts[i]);
    free(g->parts);
    arena_free(g->arena);
    free(g);
}
