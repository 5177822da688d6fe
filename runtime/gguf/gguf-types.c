/* GGML tensor type and GGUF value type tables, and the integer read every metadata accessor
 * shares. The parser (gguf.c) and the getters (gguf-get.c) both use these. */
#include "gguf.h"

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

bool ebb__gguf_read_int(uint32_t t, const uint8_t *p, struct ebb__gguf_ival *v)
{
    int64_t s;
    switch (t) {
    case EBB_GGUF_U8:
        *v = (struct ebb__gguf_ival){false, p[0]};
        return true;
    case EBB_GGUF_U16:
        *v = (struct ebb__gguf_ival){false, ebb__gguf_rd16(p)};
        return true;
    case EBB_GGUF_U32:
        *v = (struct ebb__gguf_ival){false, ebb__gguf_rd32(p)};
        return true;
    case EBB_GGUF_U64:
        *v = (struct ebb__gguf_ival){false, ebb__gguf_rd64(p)};
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
