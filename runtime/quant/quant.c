/* CPU quantization formats: see quant.h for the block layouts. Each type has a block
 * dequantizer written straight from the layout; the row dot products either work on the
 * quantized values directly (the simple types, which the reference forward pass spends its time
 * in) or dequantize one block into a small stack buffer and dot that (the K-quants). */
#include "quant.h"

#include <math.h>
#include <string.h>

_Static_assert(sizeof(struct ebb_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(struct ebb_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(struct ebb_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(struct ebb_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(struct ebb_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(struct ebb_block_q2_k) == 84, "q2_k layout");
_Static_assert(sizeof(struct ebb_block_q3_k) == 110, "q3_k layout");
_Static_assert(sizeof(struct ebb_block_q4_k) == 144, "q4_k layout");
_Static_assert(sizeof(struct ebb_block_q5_k) == 176, "q5_k layout");
_Static_assert(sizeof(struct ebb_block_q6_k) == 210, "q6_k layout");
_Static_assert(sizeof(struct ebb_block_q8_k) == 292, "q8_k layout");

/* ---- fp16 / bf16 ---- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float ebb_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) /* Inf or NaN: keep the payload */
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        /* Zero or subnormal: mant * 2^-24 is exact in float. */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t ebb_fp32_to_fp16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* Inf, or NaN forced quiet */
        return (uint16_t)(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 | ((abs >> 13) & 0x3ff) : 0));
    if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to Inf */
        return (uint16_t)(sign | 0x7c00);
    if (abs < 0x38800000u) {
        /* Result is subnormal (or zero): scale so that the integer part is the mantissa, and
         * let the FPU round to nearest even. */
        float v = bits_f32(abs) * 0x1p24f;
        uint32_t m = (uint32_t)lrintf(v);
        return (uint16_t)(sign | m); /* m == 0x400 carries into the smallest normal: correct */
    }
    /* Normal: rebias the exponent and round the 13 dropped bits to nearest even. */
    uint32_t r = abs - 0x38000000u; /* exponent 127 -> 15 */
    uint32_t lsb = (r >> 13) & 1;
    r += 0xfffu + lsb;
    return (uint16_t)(sign | (r >> 13));
}

float ebb_bf16_to_fp32(uint16_t b)
{
    return bits_f32((uint32_t)b << 16);
}

uint16_t ebb_fp32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* Hot-path fp16 conversion for normal numbers and zero, inlined; everything else (subnormal,
 * Inf, NaN: rare in block scales) goes through the general function. */
static inline float h2f(uint16_t h)
{
    uint32_t exp = (h >> 10) & 0x1f;
    if (exp == 0 || exp == 0x1f)
        return ebb_fp16_to_fp32(h);
    return bits_f32((uint32_t)(h & 0x8000) << 16 | (exp + 112) << 23 | (uint32_t)(h & 0x3ff) << 13);
}
#define H2F(h) h2f(h)

/* ---- block dequantizers: one block of the type into y ---- */

/* The nibble loops first widen to int32 so that the compiler can vectorize the conversion. */
static inline void deq_q4_0(const void *vx, float *y)
{
    const struct ebb_block_q4_0 *b = vx;
    float d = H2F(b->d);
    int32_t q[32];
    for (int j = 0; j < 16; j++) {
        q[j] = (b->qs[j] & 0x0f) - 8;
        q[j + 16] = (b->qs[j] >> 4) - 8;
    }
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)q[j];
}

static inline void deq_q4_1(const void *vx, float *y)
{
    const struct ebb_block_q4_1 *b = vx;
    float d = H2F(b->d), m = H2F(b->m);
    int32_t q[32];
    for (int j = 0; j < 16; j++) {
        q[j] = b->qs[j] & 0x0f;
        q[j + 16] = b->qs[j] >> 4;
    }
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)q[j] + m;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const void *vx, float *y)
{
    const struct ebb_block_q5_0 *b = vx;
    float d = H2F(b->d);
    uint32_t qh = le32(b->qh);
    for (int j = 0; j < EBB_QK5_0 / 2; j++) {
        int lo = (b->qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
        int hi = (b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

static void deq_q5_1(const void *vx, float *y)
{
    const struct ebb_block_q5_1 *b = vx;
    float d = H2F(b->d), m = H2F(b->m);
    uint32_t qh = le32(b->qh);
    for (int j = 0; j < EBB_QK5_1 / 2; j++) {
        int lo = (b->qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
        int hi = (b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

static inline void deq_q8_0(const void *vx, float *y)
{
    const struct ebb_block_q8_0 *b = vx;
    float d = H2F(b->d);
    int32_t q[32];
    for (int j = 0; j < 32; j++)
        q[j] = b->qs[j];
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)q[j];
}

static void deq_q2_k(const void *vx, float *y)
{
    const struct ebb_block_q2_k *b = vx;
    float d = H2F(b->d), dmin = H2F(b->dmin);
    for (int i = 0; i < EBB_QK_K; i++) {
        int half = i / 128, s = (i % 128) / 32, l = i % 32;
        int q = (b->qs[32 * half + l] >> (2 * s)) & 3;
        uint8_t sc = b->scales[i / 16];
        y[i] = d * (float)(sc & 0x0f) * (float)q - dmin * (float)(sc >> 4);
    }
}

/* The 16 six-bit Q3_K scales, unpacked and unbiased (-32..31). */
static void q3_k_scales(const uint8_t *p, int *out)
{
    for (int g = 0; g < 16; g++) {
        int lo = g < 8 ? p[g] & 0x0f : p[g - 8] >> 4;
        int hi = (p[8 + g % 4] >> (2 * (g / 4))) & 3;
        out[g] = (lo | hi << 4) - 32;
    }
}

static void deq_q3_k(const void *vx, float *y)
{
    const struct ebb_block_q3_k *b = vx;
    float d = H2F(b->d);
    int sc[16];
    q3_k_scales(b->scales, sc);
    for (int i = 0; i < EBB_QK_K; i++) {
        int half = i / 128, s = (i % 128) / 32, l = i % 32;
        int q = (b->qs[32 * half + l] >> (2 * s)) & 3;
        int hbit = (b->hmask[l] >> (i / 32)) & 1;
        y[i] = d * (float)sc[i / 16] * (float)(q - (hbit ? 0 : 4));
    }
}

void ebb_quant_k4_scale_min(const uint8_t *p, int j, uint8_t *sc, uint8_t *mn)
{
    if (j < 4) {
        *sc = p[j] & 63;
        *mn = p[j + 4] & 63;
    } else {
        *sc = (uint8_t)((p[j + 4] & 0x0f) | ((p[j - 4] >> 6) << 4));
        *mn = (uint8_t)((p[j + 4] >> 4) | ((p[j] >> 6) << 4));
    }
}

static void deq_q4_k(const void *vx, float *y)
{
    const struct ebb_block_q4_k *b = vx;
    float d = H2F(b->d), dmin = H2F(b->dmin);
    for (int c = 0; c < 4; c++) {
        uint8_t sc0, mn0, sc1, mn1;
        ebb_quant_k4_scale_min(b->scales, 2 * c, &sc0, &mn0);
        ebb_quant_k4_scale_min(b->scales, 2 * c + 1, &sc1, &mn1);
        const uint8_t *q = b->qs + 32 * c;
        for (int l = 0; l < 32; l++) {
            y[64 * c + l] = d * (float)sc0 * (float)(q[l] & 0x0f) - dmin * (float)mn0;
            y[64 * c + 32 + l] = d * (float)sc1 * (float)(q[l] >> 4) - dmin * (float)mn1;
        }
    }
}

static void deq_q5_k(const void *vx, float *y)
{
    const struct ebb_block_q5_k *b = vx;
    float d = H2F(b->d), dmin = H2F(b->dmin);
    for (int c = 0; c < 4; c++) {
        uint8_t sc0, mn0, sc1, mn1;
        ebb_quant_k4_scale_min(b->scales, 2 * c, &sc0, &mn0);
        ebb_quant_k4_scale_min(b->scales, 2 * c + 1, &sc1, &mn1);
        const uint8_t *q = b->qs + 32 * c;
        for (int l = 0; l < 32; l++) {
            int lo = (q[l] & 0x0f) | ((b->qh[l] >> (2 * c)) & 1) << 4;
            int hi = (q[l] >> 4) | ((b->qh[l] >> (2 * c + 1)) & 1) << 4;
            y[64 * c + l] = d * (float)sc0 * (float)lo - dmin * (float)mn0;
            y[64 * c + 32 + l] = d * (float)sc1 * (float)hi - dmin * (float)mn1;
        }
    }
}

/* Q6_K: each 128-element half uses 64 bytes of ql and 32 of qh. Element 32k + l of a half
 * (k = 0..3, l = 0..31) takes its low nibble from ql[l + 32 * (k & 1)] (low nibble for k < 2,
 * high for k >= 2) and its high two bits from qh[l] at shift 2k. */
static void deq_q6_k(const void *vx, float *y)
{
    const struct ebb_block_q6_k *b = vx;
    float d = H2F(b->d);
    for (int half = 0; half < 2; half++) {
        const uint8_t *ql = b->ql + 64 * half;
        const uint8_t *qh = b->qh + 32 * half;
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                uint8_t lb = ql[l + 32 * (k & 1)];
                int lo = k < 2 ? lb & 0x0f : lb >> 4;
                int q = (lo | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
                int i = 128 * half + 32 * k + l;
                y[i] = d * (float)b->scales[i / 16] * (float)q;
            }
        }
    }
}

static void deq_q8_k(const void *vx, float *y)
{
    const struct ebb_block_q8_k *b = vx;
    for (int j = 0; j < EBB_QK_K; j++)
        y[j] = b->d * (float)b->qs[j];
}

static void deq_f16(const void *vx, float *y)
{
    uint16_t h;
    memcpy(&h, vx, 2);
    *y = ebb_fp16_to_fp32(h);
}

static void deq_bf16(const void *vx, float *y)
{
    uint16_t h;
    memcpy(&h, vx, 2);
    *y = ebb_bf16_to_fp32(h);
}

static void deq_f32(const void *vx, float *y)
{
    memcpy(y, vx, 4);
}

/* ---- row dot products ---- */

static float dot_f32(const void *row, const float *x, uint64_t n)
{
    const float *w = row;
    float acc[8] = {0}, s = 0;
    uint64_t n8 = n / 8 * 8;
    for (uint64_t i = 0; i < n8; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += w[i + k] * x[i + k];
    for (uint64_t i = n8; i < n; i++)
        s += w[i] * x[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + s;
}

/* The simple block types: each block is dequantized into 32 floats on the stack and
 * multiplied into 8 independent accumulators, which the compiler turns into SIMD code and
 * which keeps the float additions from forming one long dependency chain. */
#define EBB__DOT_SIMPLE(name, deq, blk_t)                                                          \
    static float name(const void *row, const float *x, uint64_t n)                                 \
    {                                                                                              \
        const blk_t *b = row;                                                                      \
        float acc[8] = {0}, w[32];                                                                 \
        for (uint64_t ib = 0; ib < n / 32; ib++, b++, x += 32) {                                   \
            deq(b, w);                                                                             \
            for (int j = 0; j < 32; j += 8)                                                        \
                for (int k = 0; k < 8; k++)                                                        \
                    acc[k] += w[j + k] * x[j + k];                                                 \
        }                                                                                          \
        return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));  \
    }
EBB__DOT_SIMPLE(dot_q4_0, deq_q4_0, struct ebb_block_q4_0)
EBB__DOT_SIMPLE(dot_q4_1, deq_q4_1, struct ebb_block_q4_1)
EBB__DOT_SIMPLE(dot_q8_0, deq_q8_0, struct ebb_block_q8_0)

/* Generic: dequantize a block, then dot it. */
#define EBB__DOT_VIA_DEQ(name, deq, blk, bytes)                                                    \
    static float name(const void *row, const float *x, uint64_t n)                                 \
    {                                                                                              \
        const uint8_t *p = row;                                                                    \
        float y[blk];                                                                              \
        double sum = 0;                                                                            \
        for (uint64_t ib = 0; ib < n / (blk); ib++, p += (bytes), x += (blk)) {                    \
            deq(p, y);                                                                             \
            sum += (double)dot_f32(y, x, (blk));                                                   \
        }                                                                                          \
        return (float)sum;                                                                         \
    }
EBB__DOT_VIA_DEQ(dot_q5_0, deq_q5_0, 32, 22)
EBB__DOT_VIA_DEQ(dot_q5_1, deq_q5_1, 32, 24)
EBB__DOT_VIA_DEQ(dot_q2_k, deq_q2_k, 256, 84)
EBB__DOT_VIA_DEQ(dot_q3_k, deq_q3_k, 256, 110)
EBB__DOT_VIA_DEQ(dot_q4_k, deq_q4_k, 256, 144)
EBB__DOT_VIA_DEQ(dot_q5_k, deq_q5_k, 256, 176)
EBB__DOT_VIA_DEQ(dot_q6_k, deq_q6_k, 256, 210)
EBB__DOT_VIA_DEQ(dot_q8_k, deq_q8_k, 256, 292)

static float dot_f16(const void *row, const float *x, uint64_t n)
{
    const uint8_t *p = row;
    float s = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        s += ebb_fp16_to_fp32(h) * x[i];
    }
    return s;
}

static float dot_bf16(const void *row, const float *x, uint64_t n)
{
    const uint8_t *p = row;
    float s = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        s += ebb_bf16_to_fp32(h) * x[i];
    }
    return s;
}

/* ---- type table ---- */

struct qtype {
    uint32_t type;
    uint32_t blk;   /* elements per block */
    uint32_t bytes; /* bytes per block */
    void (*deq)(const void *, float *);
    ebb_quant_dot_fn dot;
};

static const struct qtype qtypes[] = {
    {EBB_GGML_F32, 1, 4, deq_f32, dot_f32},        {EBB_GGML_F16, 1, 2, deq_f16, dot_f16},
    {EBB_GGML_BF16, 1, 2, deq_bf16, dot_bf16},     {EBB_GGML_Q4_0, 32, 18, deq_q4_0, dot_q4_0},
    {EBB_GGML_Q4_1, 32, 20, deq_q4_1, dot_q4_1},   {EBB_GGML_Q5_0, 32, 22, deq_q5_0, dot_q5_0},
    {EBB_GGML_Q5_1, 32, 24, deq_q5_1, dot_q5_1},   {EBB_GGML_Q8_0, 32, 34, deq_q8_0, dot_q8_0},
    {EBB_GGML_Q2_K, 256, 84, deq_q2_k, dot_q2_k},  {EBB_GGML_Q3_K, 256, 110, deq_q3_k, dot_q3_k},
    {EBB_GGML_Q4_K, 256, 144, deq_q4_k, dot_q4_k}, {EBB_GGML_Q5_K, 256, 176, deq_q5_k, dot_q5_k},
    {EBB_GGML_Q6_K, 256, 210, deq_q6_k, dot_q6_k}, {EBB_GGML_Q8_K, 256, 292, deq_q8_k, dot_q8_k},
};

static const struct qtype *find_qtype(uint32_t type)
{
    for (size_t i = 0; i < sizeof(qtypes) / sizeof(qtypes[0]); i++)
        if (qtypes[i].type == type)
            return &qtypes[i];
    return NULL;
}

bool ebb_quant_supported(uint32_t type)
{
    return find_qtype(type) != NULL;
}

bool ebb_quant_can_quantize(uint32_t type)
{
    return type == EBB_GGML_F32 || type == EBB_GGML_F16 || type == EBB_GGML_BF16 ||
           type == EBB_GGML_Q4_0 || type == EBB_GGML_Q4_1 || type == EBB_GGML_Q8_0;
}

ebb_err ebb_quant_dequantize_row(uint32_t type, const void *src, float *dst, uint64_t n)
{
    const struct qtype *t = find_qtype(type);
    if (!t)
        return EBB_EUNSUPPORTED;
    if (n % t->blk)
        return EBB_EINVAL;
    const uint8_t *p = src;
    for (uint64_t i = 0; i < n / t->blk; i++)
        t->deq(p + i * t->bytes, dst + i * t->blk);
    return EBB_OK;
}

ebb_err ebb_quant_dot_row(uint32_t type, const void *row, const float *x, uint64_t n, float *out)
{
    const struct qtype *t = find_qtype(type);
    if (!t)
        return EBB_EUNSUPPORTED;
    if (n % t->blk)
        return EBB_EINVAL;
    *out = t->dot(row, x, n);
    return EBB_OK;
}

ebb_quant_dot_fn ebb_quant_get_dot(uint32_t type)
{
    const struct qtype *t = find_qtype(type);
    return t ? t->dot : NULL;
}

/* ---- quantizers ---- */

static void quant_q4_0(const float *x, struct ebb_block_q4_0 *b)
{
    /* The value of largest magnitude maps to -8, so its sign decides the scale's sign and the
     * full range [-8, 7] is used. */
    float amax = 0, vmax = 0;
    for (int j = 0; j < EBB_QK4_0; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            vmax = x[j];
        }
    }
    float d = vmax / -8.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = ebb_fp32_to_fp16(d);
    for (int j = 0; j < 16; j++) {
        int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + 16] * id + 8.5f);
        q0 = q0 > 15 ? 15 : q0 < 0 ? 0 : q0;
        q1 = q1 > 15 ? 15 : q1 < 0 ? 0 : q1;
        b->qs[j] = (uint8_t)(q0 | q1 << 4);
    }
}

static void quant_q4_1(const float *x, struct ebb_block_q4_1 *b)
{
    float lo = x[0], hi = x[0];
    for (int j = 1; j < EBB_QK4_1; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    float d = (hi - lo) / 15.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = ebb_fp32_to_fp16(d);
    b->m = ebb_fp32_to_fp16(lo);
    for (int j = 0; j < 16; j++) {
        int q0 = (int)((x[j] - lo) * id + 0.5f), q1 = (int)((x[j + 16] - lo) * id + 0.5f);
        q0 = q0 > 15 ? 15 : q0 < 0 ? 0 : q0;
        q1 = q1 > 15 ? 15 : q1 < 0 ? 0 : q1;
        b->qs[j] = (uint8_t)(q0 | q1 << 4);
    }
}

static void quant_q8_0(const float *x, struct ebb_block_q8_0 *b)
{
    float amax = 0;
    for (int j = 0; j < EBB_QK8_0; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = ebb_fp32_to_fp16(d);
    for (int j = 0; j < EBB_QK8_0; j++)
        b->qs[j] = (int8_t)lrintf(x[j] * id);
}

ebb_err ebb_quant_quantize_row(uint32_t type, const float *src, void *dst, uint64_t n)
{
    const struct qtype *t = find_qtype(type);
    if (!t || !ebb_quant_can_quantize(type))
        return EBB_EUNSUPPORTED;
    if (n % t->blk)
        return EBB_EINVAL;
    uint8_t *p = dst;
    for (uint64_t i = 0; i < n / t->blk; i++) {
        const float *x = src + i * t->blk;
        void *b = p + i * t->bytes;
        uint16_t h;
        switch (type) {
        case EBB_GGML_F32:
            memcpy(b, x, 4);
            break;
        case EBB_GGML_F16:
            h = ebb_fp32_to_fp16(*x);
            memcpy(b, &h, 2);
            break;
        case EBB_GGML_BF16:
            h = ebb_fp32_to_bf16(*x);
            memcpy(b, &h, 2);
            break;
        case EBB_GGML_Q4_0:
            quant_q4_0(x, b);
            break;
        case EBB_GGML_Q4_1:
            quant_q4_1(x, b);
            break;
        default: /* EBB_GGML_Q8_0 */
            quant_q8_0(x, b);
            break;
        }
    }
    return EBB_OK;
}

/* ---- llama.cpp-style quantized activations ---- */

void ebb_quant_q8_act_row(const float *x, uint64_t n, struct ebb_q8_act *out)
{
    for (uint64_t ib = 0; ib < n / 32; ib++, x += 32, out++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        /* As llama.cpp's x86 SIMD path: scale by 127 / max, round half to even. */
        float d = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            out->q[j] = (int8_t)nearbyintf(x[j] * id);
            sum += out->q[j];
        }
        out->d = ebb_fp16_to_fp32(ebb_fp32_to_fp16(d));
        out->s = ebb_fp16_to_fp32(ebb_fp32_to_fp16(d * (float)sum));
    }
}

bool ebb_quant_q8_act_supported(uint32_t type)
{
    return type == EBB_GGML_Q4_0 || type == EBB_GGML_Q4_1 || type == EBB_GGML_Q5_0 ||
           type == EBB_GGML_Q5_1 || type == EBB_GGML_Q8_0;
}

/* The integer weights of one 32-block (offset removed for the symmetric types), its scale and
 * its min (0 for the symmetric types). */
static void int_block(uint32_t type, const uint8_t *p, int32_t *q, float *d, float *m)
{
    uint32_t qh;
    *m = 0;
    switch (type) {
    case EBB_GGML_Q4_0: {
        const struct ebb_block_q4_0 *b = (const void *)p;
        *d = H2F(b->d);
        for (int j = 0; j < 16; j++) {
            q[j] = (b->qs[j] & 0x0f) - 8;
            q[j + 16] = (b->qs[j] >> 4) - 8;
        }
        break;
    }
    case EBB_GGML_Q4_1: {
        const struct ebb_block_q4_1 *b = (const void *)p;
        *d = H2F(b->d);
        *m = H2F(b->m);
        for (int j = 0; j < 16; j++) {
            q[j] = b->qs[j] & 0x0f;
            q[j + 16] = b->qs[j] >> 4;
        }
        break;
    }
    case EBB_GGML_Q5_0: {
        const struct ebb_block_q5_0 *b = (const void *)p;
        *d = H2F(b->d);
        qh = le32(b->qh);
        for (int j = 0; j < 16; j++) {
            q[j] = ((b->qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4) - 16;
            q[j + 16] = ((b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) - 16;
        }
        break;
    }
    case EBB_GGML_Q5_1: {
        const struct ebb_block_q5_1 *b = (const void *)p;
        *d = H2F(b->d);
        *m = H2F(b->m);
        qh = le32(b->qh);
        for (int j = 0; j < 16; j++) {
            q[j] = (b->qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            q[j + 16] = (b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        }
        break;
    }
    default: { /* EBB_GGML_Q8_0 */
        const struct ebb_block_q8_0 *b = (const void *)p;
        *d = H2F(b->d);
        for (int j = 0; j < 32; j++)
            q[j] = b->qs[j];
        break;
    }
    }
}

float ebb_quant_dot_q8_act(uint32_t type, const void *row, const struct ebb_q8_act *x, uint64_t n)
{
    const struct qtype *t = find_qtype(type);
    const uint8_t *p = row;
    float sum = 0, summ = 0;
    int32_t q[32];
    const bool has_min = type == EBB_GGML_Q4_1 || type == EBB_GGML_Q5_1;
    for (uint64_t ib = 0; ib < n / 32; ib++, p += t->bytes, x++) {
        float d, m;
        int_block(type, p, q, &d, &m);
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += q[j] * x->q[j];
        sum += d * x->d * (float)isum;
        /* Only the types with a min read s: for the others 0 * s would make an overflowed s
         * (a block past 2047 in magnitude, its fp16 sum infinite) a NaN. */
        if (has_min)
            summ += m * x->s;
    }
    return sum + summ;
}

/* ---- Q8_K activations for the K-quant weights ---- */

/* As llama.cpp's reference quantizer: the scale from the element of largest magnitude, its sign
 * kept so that it maps to -127 exactly; round half to even; d stays fp32. */
void ebb_quant_q8k_act_row(const float *x, uint64_t n, struct ebb_block_q8_k *out)
{
    for (uint64_t ib = 0; ib < n / EBB_QK_K; ib++, x += EBB_QK_K, out++) {
        float amax = 0, max = 0;
        for (int j = 0; j < EBB_QK_K; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        if (amax == 0.0f) {
            memset(out, 0, sizeof(*out));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < EBB_QK_K; j++) {
            float v = nearbyintf(iscale * x[j]);
            out->qs[j] = (int8_t)(v > 127.0f ? 127.0f : v);
        }
        for (int g = 0; g < EBB_QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += out->qs[16 * g + j];
            out->bsums[g] = (int16_t)s;
        }
        out->d = 1.0f / iscale;
    }
}

bool ebb_quant_q8k_act_supported(uint32_t type)
{
    return type == EBB_GGML_Q4_K || type == EBB_GGML_Q5_K || type == EBB_GGML_Q6_K;
}

/* Per super-block the integer sums are exact (sum over groups of scale * sum(q * a), and for
 * Q4_K/Q5_K the mins times the activation sums), then two float steps; the SIMD versions
 * (quant-simd.c) compute the same integers, so their results are the same bits. */
float ebb_quant_dot_q8k_act(uint32_t type, const void *row, const struct ebb_block_q8_k *x,
                            uint64_t n)
{
    float sum = 0, summ = 0;
    for (uint64_t ib = 0; ib < n / EBB_QK_K; ib++, x++) {
        int32_t isum = 0, msum = 0;
        float d, dmin = 0;
        if (type == EBB_GGML_Q6_K) {
            const struct ebb_block_q6_k *b = (const struct ebb_block_q6_k *)row + ib;
            d = H2F(b->d);
            for (int half = 0; half < 2; half++) {
                const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
                for (int k = 0; k < 4; k++) {
                    int32_t s0 = 0, s1 = 0;
                    for (int l = 0; l < 32; l++) {
                        uint8_t lb = ql[l + 32 * (k & 1)];
                        int lo = k < 2 ? lb & 0x0f : lb >> 4;
                        int q = (lo | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
                        int i = 128 * half + 32 * k + l;
                        *(l < 16 ? &s0 : &s1) += q * x->qs[i];
                    }
                    int g = 8 * half + 2 * k;
                    isum += b->scales[g] * s0 + b->scales[g + 1] * s1;
                }
            }
        } else {
            const bool q5 = type == EBB_GGML_Q5_K;
            const struct ebb_block_q4_k *b4 = (const struct ebb_block_q4_k *)row + ib;
            const struct ebb_block_q5_k *b5 = (const struct ebb_block_q5_k *)row + ib;
            const uint8_t *scales = q5 ? b5->scales : b4->scales, *qs = q5 ? b5->qs : b4->qs;
            d = H2F(q5 ? b5->d : b4->d);
            dmin = H2F(q5 ? b5->dmin : b4->dmin);
            for (int c = 0; c < 4; c++) {
                uint8_t sc0, mn0, sc1, mn1;
                ebb_quant_k4_scale_min(scales, 2 * c, &sc0, &mn0);
                ebb_quant_k4_scale_min(scales, 2 * c + 1, &sc1, &mn1);
                int32_t s0 = 0, s1 = 0;
                for (int l = 0; l < 32; l++) {
                    int lo = qs[32 * c + l] & 0x0f, hi = qs[32 * c + l] >> 4;
                    if (q5) {
                        lo |= ((b5->qh[l] >> (2 * c)) & 1) << 4;
                        hi |= ((b5->qh[l] >> (2 * c + 1)) & 1) << 4;
                    }
                    s0 += lo * x->qs[64 * c + l];
                    s1 += hi * x->qs[64 * c + 32 + l];
                }
                isum += sc0 * s0 + sc1 * s1;
                msum += mn0 * (x->bsums[4 * c] + x->bsums[4 * c + 1]) +
                        mn1 * (x->bsums[4 * c + 2] + x->bsums[4 * c + 3]);
            }
        }
        sum += d * x->d * (float)isum;
        summ += dmin * x->d * (float)msum;
    }
    return sum - summ;
}
