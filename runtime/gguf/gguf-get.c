/* GGUF accessors: typed metadata getters, array elements, tensors. The parser
 * (gguf.c) has already checked that every value lies inside the image, so these only check
 * types, indices and conversions. */
#include "gguf.h"

#include <float.h>
#include <string.h>

#include "gguf-int.h"

/* ---- scalar conversion shared by getters and array accessors ---- */

static bool read_float(uint32_t t, const uint8_t *p, double *d)
{
    if (t == EBB_GGUF_F32) {
        uint32_t u = ebb__gguf_rd32(p);
        float f;
        memcpy(&f, &u, sizeof(f));
        *d = f;
        return true;
    }
    if (t == EBB_GGUF_F64) {
        uint64_t u = ebb__gguf_rd64(p);
        memcpy(d, &u, sizeof(*d));
        return true;
    }
    return false;
}

static ebb_err to_i64(struct ebb__gguf_ival v, int64_t *out)
{
    if (v.neg ? v.mag > (uint64_t)INT64_MAX + 1 : v.mag > (uint64_t)INT64_MAX)
        return EBB_ERANGE;
    *out =
        v.neg ? (v.mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v.mag) : (int64_t)v.mag;
    return EBB_OK;
}

/* double to float without undefined behaviour for values out of float range. */
static ebb_err to_f32(double d, float *out)
{
    if (d == d && (d > FLT_MAX || d < -FLT_MAX) && d - d == 0)
        return EBB_ERANGE;
    *out = (float)d;
    return EBB_OK;
}

/* Reads a numeric value of type t at p as a float (integers convert, rounding). */
static ebb_err num_f32(uint32_t t, const uint8_t *p, float *out)
{
    double d;
    struct ebb__gguf_ival v;
    if (read_float(t, p, &d))
        return to_f32(d, out);
    if (!ebb__gguf_read_int(t, p, &v))
        return EBB_EINVAL;
    float f = (float)v.mag;
    *out = v.neg ? -f : f;
    return EBB_OK;
}

/* Reads a numeric value as an integer; floats convert only when integral and in range. */
static ebb_err num_i64(uint32_t t, const uint8_t *p, int64_t *out)
{
    double d;
    struct ebb__gguf_ival v;
    if (ebb__gguf_read_int(t, p, &v))
        return to_i64(v, out);
    if (!read_float(t, p, &d))
        return EBB_EINVAL;
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || (double)(int64_t)d != d)
        return EBB_ERANGE;
    *out = (int64_t)d;
    return EBB_OK;
}

static void str_at(const uint8_t *p, struct ebb_str *out)
{
    out->n = ebb__gguf_rd64(p);
    out->p = (const char *)p + 8;
}

/* ---- file-level accessors ---- */

uint32_t ebb_gguf_version(const struct ebb_gguf *g)
{
    return g->version;
}

const void *ebb_gguf_base(const struct ebb_gguf *g)
{
    return g->base;
}

uint64_t ebb_gguf_file_size(const struct ebb_gguf *g)
{
    return g->size;
}

uint64_t ebb_gguf_data_offset(const struct ebb_gguf *g)
{
    return g->data_offset;
}

uint32_t ebb_gguf_n_files(const struct ebb_gguf *g)
{
    return 1 + g->n_parts;
}

uint32_t ebb_gguf_alignment(const struct ebb_gguf *g)
{
    return g->alignment;
}

uint64_t ebb_gguf_n_kv(const struct ebb_gguf *g)
{
    return g->n_kv;
}

const char *ebb_gguf_kv_key(const struct ebb_gguf *g, uint64_t i)
{
    return i < g->n_kv ? g->kv[i].key : NULL;
}

enum ebb_gguf_vtype ebb_gguf_kv_type(const struct ebb_gguf *g, uint64_t i)
{
    return i < g->n_kv ? g->kv[i].type : (enum ebb_gguf_vtype) - 1;
}

uint64_t ebb_gguf_n_tensors(const struct ebb_gguf *g)
{
    return g->n_tensors;
}

const struct ebb_gguf_tensor *ebb_gguf_tensor_at(const struct ebb_gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

/* ---- metadata by index ---- */

ebb_err ebb_gguf_kv_str(const struct ebb_gguf *g, uint64_t i, struct ebb_str *out)
{
    if (i >= g->n_kv)
        return EBB_ERANGE;
    if (g->kv[i].type != EBB_GGUF_STRING)
        return EBB_EINVAL;
    str_at(g->kv[i].val, out);
    return EBB_OK;
}

ebb_err ebb_gguf_kv_arr(const struct ebb_gguf *g, uint64_t i, struct ebb_gguf_arr *out)
{
    if (i >= g->n_kv)
        return EBB_ERANGE;
    if (g->kv[i].type != EBB_GGUF_ARRAY)
        return EBB_EINVAL;
    *out = g->kv[i].arr;
    return EBB_OK;
}

ebb_err ebb_gguf_kv_u64(const struct ebb_gguf *g, uint64_t i, uint64_t *out)
{
    struct ebb__gguf_ival v;
    if (i >= g->n_kv)
        return EBB_ERANGE;
    if (!ebb__gguf_read_int(g->kv[i].type, g->kv[i].val, &v))
        return EBB_EINVAL;
    if (v.neg)
        return EBB_ERANGE;
    *out = v.mag;
    return EBB_OK;
}

/* ---- metadata by key ---- */

static const struct ebb__gguf_kv *find(const struct ebb_gguf *g, const char *key)
{
    int64_t i = ebb_gguf_find_kv(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

ebb_err ebb_gguf_get_u32(const struct ebb_gguf *g, const char *key, uint32_t *out)
{
    const struct ebb__gguf_kv *kv = find(g, key);
    struct ebb__gguf_ival v;
    if (!kv)
        return EBB_ENOTFOUND;
    if (!ebb__gguf_read_int(kv->type, kv->val, &v))
        return EBB_EINVAL;
    if (v.neg || v.mag > UINT32_MAX)
        return EBB_ERANGE;
    *out = (uint32_t)v.mag;
    return EBB_OK;
}

ebb_err ebb_gguf_get_i64(const struct ebb_gguf *g, const char *key, int64_t *out)
{
    const struct ebb__gguf_kv *kv = find(g, key);
    struct ebb__gguf_ival v;
    if (!kv)
        return EBB_ENOTFOUND;
    if (!ebb__gguf_read_int(kv->type, kv->val, &v))
        return EBB_EINVAL;
    return to_i64(v, out);
}

ebb_err ebb_gguf_get_f32(const struct ebb_gguf *g, const char *key, float *out)
{
    const struct ebb__gguf_kv *kv = find(g, key);
    double d;
    if (!kv)
        return EBB_ENOTFOUND;
    if (!read_float(kv->type, kv->val, &d))
        return EBB_EINVAL;
    return to_f32(d, out);
}

ebb_err ebb_gguf_get_bool(const struct ebb_gguf *g, const char *key, bool *out)
{
    const struct ebb__gguf_kv *kv = find(g, key);
    if (!kv)
        return EBB_ENOTFOUND;
    if (kv->type != EBB_GGUF_BOOL)
        return EBB_EINVAL;
    *out = kv->val[0] != 0;
    return EBB_OK;
}

ebb_err ebb_gguf_get_str(const struct ebb_gguf *g, const char *key, struct ebb_str *out)
{
    int64_t i = ebb_gguf_find_kv(g, key);
    return i < 0 ? EBB_ENOTFOUND : ebb_gguf_kv_str(g, (uint64_t)i, out);
}

ebb_err ebb_gguf_get_arr(const struct ebb_gguf *g, const char *key, struct ebb_gguf_arr *out)
{
    int64_t i = ebb_gguf_find_kv(g, key);
    return i < 0 ? EBB_ENOTFOUND : ebb_gguf_kv_arr(g, (uint64_t)i, out);
}

/* ---- array elements ---- */

ebb_err ebb_gguf_arr_f32(const struct ebb_gguf_arr *a, uint64_t i, float *out)
{
    uint32_t sz = ebb__gguf_vtype_size(a->type);
    if (i >= a->n)
        return EBB_ERANGE;
    if (!sz || a->type == EBB_GGUF_BOOL)
        return EBB_EINVAL;
    return num_f32(a->type, a->data + i * sz, out);
}

ebb_err ebb_gguf_arr_i64(const struct ebb_gguf_arr *a, uint64_t i, int64_t *out)
{
    uint32_t sz = ebb__gguf_vtype_size(a->type);
    if (i >= a->n)
        return EBB_ERANGE;
    if (!sz || a->type == EBB_GGUF_BOOL)
        return EBB_EINVAL;
    return num_i64(a->type, a->data + i * sz, out);
}

ebb_err ebb_gguf_arr_str(const struct ebb_gguf_arr *a, uint64_t i, struct ebb_str *out)
{
    if (i >= a->n)
        return EBB_ERANGE;
    if (a->type != EBB_GGUF_STRING)
        return EBB_EINVAL;
    str_at(((const uint8_t *const *)a->priv)[i], out);
    return EBB_OK;
}

ebb_err ebb_gguf_arr_sub(const struct ebb_gguf_arr *a, uint64_t i, struct ebb_gguf_arr *out)
{
    if (i >= a->n)
        return EBB_ERANGE;
    if (a->type != EBB_GGUF_ARRAY)
        return EBB_EINVAL;
    const struct ebb__gguf_sub *s = &((const struct ebb__gguf_sub *)a->priv)[i];
    out->type = (enum ebb_gguf_vtype)ebb__gguf_rd32(s->hdr);
    out->n = ebb__gguf_rd64(s->hdr + 4);
    out->data = s->hdr + EBB__GGUF_ARR_HDR_BYTES;
    out->priv = s->priv;
    return EBB_OK;
}
