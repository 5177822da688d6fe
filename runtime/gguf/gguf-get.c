/* GGUF accessors: type tables, typed metadata getters, array elements, tensors. The parser
 * (gguf.c) has already checked that every value lies inside the image, so these only check
 * types, indices and conversions. */
#include "gguf.h"

#include <float.h>
#include <string.h>

#include "gguf-int.h"

/* Sizes from the GGML block definitions (checked against the gguf Python package's
 * GGML_QUANT_SIZES). */
static const struct ebb_ggml_type_info type_table[] = {
    [EBB_GGML_F32] = {"F32", 1, 4},       [EBB_GGML_F16] = {"F16", 1, 2},
    [EBB_GGML_Q4_0] = {"Q4_0", 32, 18},   [EBB_GGML_Q4_1] = {"Q4_1", 32, 20},
    [EBB_GGML_Q5_0] = {"Q5_0", 32, 22},   [EBB_GGML_Q5_1] = {"Q5_1", 32, 24},
    [EBB_GGML_Q8_0] = {"Q8_0", 32, 34},   [EBB_GGML_Q8_1] = {"Q8_1", 32, 40},
    [EBB_GGML_Q2_K] = {"Q2_K", 256, 84},  [EBB_GGML_Q3_K] = {"Q3_K", 256, 110},
    [EBB_GGML_Q4_K] = {"Q4_K", 256, 144}, [EBB_GGML_Q5_K] = {"Q5_K", 256, 176},
    [EBB_GGML_Q6_K] = {"Q6_K", 256, 210}, [EBB_GGML_Q8_K] = {"Q8_K", 256, 292},
    [EBB_GGML_BF16] = {"BF16", 1, 2},
};

/* Names of ggml types ebb does not support, so that errors can name them. */
static const char *const other_names[] = {
    [4] = "Q4_2",   [5] = "Q4_3",        [16] = "IQ2_XXS",    [17] = "IQ2_XS",     [18] = "IQ3_XXS",
    [19] = "IQ1_S", [20] = "IQ4_NL",     [21] = "IQ3_S",      [22] = "IQ2_S",      [23] = "IQ4_XS",
    [24] = "I8",    [25] = "I16",        [26] = "I32",        [27] = "I64",        [28] = "F64",
    [29] = "IQ1_M", [31] = "Q4_0_4_4",   [32] = "Q4_0_4_8",   [33] = "Q4_0_8_8",   [34] = "TQ1_0",
    [35] = "TQ2_0", [36] = "IQ4_NL_4_4", [37] = "IQ4_NL_4_8", [38] = "IQ4_NL_8_8", [39] = "MXFP4",
};

const struct ebb_ggml_type_info *ebb_ggml_type_info(uint32_t type)
{
    if (type >= sizeof(type_table) / sizeof(type_table[0]) || !type_table[type].name)
        return NULL;
    return &type_table[type];
}

const char *ebb_ggml_type_name(uint32_t type)
{
    const struct ebb_ggml_type_info *ti = ebb_ggml_type_info(type);
    if (ti)
        return ti->name;
    if (type < sizeof(other_names) / sizeof(other_names[0]))
        return other_names[type];
    return NULL;
}

ebb_err ebb_ggml_row_bytes(uint32_t type, uint64_t n, uint64_t *out)
{
    const struct ebb_ggml_type_info *ti = ebb_ggml_type_info(type);
    uint64_t bytes;
    if (!ti || n % ti->block_size)
        return EBB_EFORMAT;
    if (__builtin_mul_overflow(n / ti->block_size, (uint64_t)ti->type_size, &bytes))
        return EBB_EOVERFLOW;
    *out = bytes;
    return EBB_OK;
}

uint32_t ebb__gguf_vtype_size(uint32_t t)
{
    static const uint8_t sizes[] = {
        [EBB_GGUF_U8] = 1,  [EBB_GGUF_I8] = 1,  [EBB_GGUF_U16] = 2, [EBB_GGUF_I16] = 2,
        [EBB_GGUF_U32] = 4, [EBB_GGUF_I32] = 4, [EBB_GGUF_F32] = 4, [EBB_GGUF_BOOL] = 1,
        [EBB_GGUF_U64] = 8, [EBB_GGUF_I64] = 8, [EBB_GGUF_F64] = 8,
    };
    return t < sizeof(sizes) ? sizes[t] : 0;
}

const char *ebb_gguf_vtype_name(uint32_t t)
{
    static const char *const names[] = {
        [EBB_GGUF_U8] = "u8",       [EBB_GGUF_I8] = "i8",     [EBB_GGUF_U16] = "u16",
        [EBB_GGUF_I16] = "i16",     [EBB_GGUF_U32] = "u32",   [EBB_GGUF_I32] = "i32",
        [EBB_GGUF_F32] = "f32",     [EBB_GGUF_BOOL] = "bool", [EBB_GGUF_STRING] = "string",
        [EBB_GGUF_ARRAY] = "array", [EBB_GGUF_U64] = "u64",   [EBB_GGUF_I64] = "i64",
        [EBB_GGUF_F64] = "f64",
    };
    return t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

/* ---- scalar conversion shared by getters and array accessors ---- */

/* An integer of any stored width, with its sign. */
struct ival {
    bool neg;
    uint64_t mag; /* |value|; for negative values mag = -(value) as unsigned */
};

static bool read_int(uint32_t t, const uint8_t *p, struct ival *v)
{
    int64_t s;
    switch (t) {
    case EBB_GGUF_U8:
        *v = (struct ival){false, p[0]};
        return true;
    case EBB_GGUF_U16:
        *v = (struct ival){false, ebb__gguf_rd16(p)};
        return true;
    case EBB_GGUF_U32:
        *v = (struct ival){false, ebb__gguf_rd32(p)};
        return true;
    case EBB_GGUF_U64:
        *v = (struct ival){false, ebb__gguf_rd64(p)};
        return true;
    case EBB_GGUF_I8:
        s = (int8_t)p[0];
        break;
    case EBB_GGUF_I16:
        s = (int16_t)ebb__gguf_rd16(p);
        break;
    case EBB_GGUF_I32:
        s = (int32_t)ebb__gguf_rd32(p);
        break;
    case EBB_GGUF_I64:
        s = (int64_t)ebb__gguf_rd64(p);
        break;
    default:
        return false;
    }
    v->neg = s < 0;
    v->mag = s < 0 ? 0 - (uint64_t)s : (uint64_t)s;
    return true;
}

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

static ebb_err to_i64(struct ival v, int64_t *out)
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
    struct ival v;
    if (read_float(t, p, &d))
        return to_f32(d, out);
    if (!read_int(t, p, &v))
        return EBB_EINVAL;
    float f = (float)v.mag;
    *out = v.neg ? -f : f;
    return EBB_OK;
}

/* Reads a numeric value as an integer; floats convert only when integral and in range. */
static ebb_err num_i64(uint32_t t, const uint8_t *p, int64_t *out)
{
    double d;
    struct ival v;
    if (read_int(t, p, &v))
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
    struct ival v;
    if (i >= g->n_kv)
        return EBB_ERANGE;
    if (!read_int(g->kv[i].type, g->kv[i].val, &v))
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
    struct ival v;
    if (!kv)
        return EBB_ENOTFOUND;
    if (!read_int(kv->type, kv->val, &v))
        return EBB_EINVAL;
    if (v.neg || v.mag > UINT32_MAX)
        return EBB_ERANGE;
    *out = (uint32_t)v.mag;
    return EBB_OK;
}

ebb_err ebb_gguf_get_i64(const struct ebb_gguf *g, const char *key, int64_t *out)
{
    const struct ebb__gguf_kv *kv = find(g, key);
    struct ival v;
    if (!kv)
        return EBB_ENOTFOUND;
    if (!read_int(kv->type, kv->val, &v))
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
