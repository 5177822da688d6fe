/* The reference's per-head attention, its fp16 rounding and the fp16 GELU table with its gate:
 * plain C, and for the engines that ask for speed (device "cpu", host layers) the same
 * arithmetic with AVX2 and F16C where the CPU has them. The vector versions take the scalar
 * steps in the same order (a lane per partial sum, separate multiplies and adds, no fused
 * multiply-add), so both give the same bits; tests/unit/test-ref-fast.c checks that. */
#include "ref-int.h"

#include <string.h>

/* ---- plain C ---- */

static float f16_round(float x)
{
    return ebb_fp16_to_fp32(ebb_fp32_to_fp16(x));
}

static void attn_head_c(const struct ebb__attn_head *a, float *att, float *out)
{
    float mx = -INFINITY, kb[EBB__ATT_MAX_HD];
    for (uint32_t p = a->p0; p < a->n_kv; p++) {
        const float *kp = a->k + (uint64_t)p * a->stride;
        if (a->k16) {
            for (uint32_t e = 0; e < a->hd; e++)
                kb[e] = ebb_fp16_to_fp32(a->k16[(uint64_t)p * a->stride + e]);
            kp = kb;
        }
        float sc = ebb__ref_dot_f32(a->q, kp, a->hd) * a->scale;
        att[p] = sc;
        mx = sc > mx ? sc : mx;
    }
    float sum = 0;
    for (uint32_t p = a->p0; p < a->n_kv; p++) {
        att[p] = expf(att[p] - mx);
        sum += att[p];
    }
    memset(out, 0, a->hd * sizeof(float));
    for (uint32_t p = a->p0; p < a->n_kv; p++) {
        float w = att[p] / sum;
        if (a->f16_weights)
            w = f16_round(w);
        if (a->v16) {
            const uint16_t *vp = a->v16 + (uint64_t)p * a->stride;
            for (uint32_t e = 0; e < a->hd; e++)
                out[e] += w * ebb_fp16_to_fp32(vp[e]);
            continue;
        }
        const float *vp = a->v + (uint64_t)p * a->stride;
        for (uint32_t e = 0; e < a->hd; e++)
            out[e] += w * vp[e];
    }
}

float ebb__ref_gelu_f16(const float *tab, float x)
{
    if (x <= -10.0f)
        return 0.0f;
    if (x >= 10.0f)
        return x;
    return tab[ebb_fp32_to_fp16(x)];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,f16c")))

/* ebb__ref_dot_f32's closing sum of its eight partial sums (lanes), then its "+ s" of a
 * remainder that is 0 here. */
AVX2 static inline float close8(__m256 acc)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    __m128 u = _mm_add_ps(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehl_ps(u, u))) + 0.0f;
}

/* Eight cached floats at element i of row base: loaded, or (H) converted from fp16 by F16C. */
#define KV8(H, f32, f16, i)                                                                        \
    ((H) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((f16) + (i))))          \
         : _mm256_loadu_ps((f32) + (i)))

/* The scores att[p0..n_kv) turned into the softmax's weights in place, as attn_head_c does (the
 * maximum, exp, their sum, each divided by it), rounded to fp16 with f16 (F16C). */
AVX2 static inline void softmax_avx2(float *att, uint32_t p0, uint32_t n_kv, bool f16)
{
    float mx = -INFINITY, sum = 0;
    for (uint32_t p = p0; p < n_kv; p++)
        mx = att[p] > mx ? att[p] : mx;
    for (uint32_t p = p0; p < n_kv; p++) {
        att[p] = expf(att[p] - mx);
        sum += att[p];
    }
    for (uint32_t p = p0; p < n_kv; p++) {
        float w = att[p] / sum;
        att[p] = f16 ? _cvtsh_ss(_cvtss_sh(w, _MM_FROUND_TO_NEAREST_INT)) : w;
    }
}

/* The scores of four positions at once (each q chunk loaded once), the weights through F16C,
 * and the output in chunks of 64 held in eight registers over all positions. hd % 8 == 0. H:
 * the cache holds fp16 (k16, v16). */
AVX2 static inline __attribute__((always_inline)) void
attn_head_avx2_kv(const struct ebb__attn_head *a, float *att, float *out, const bool H)
{
    const uint32_t hd = a->hd, p0 = a->p0, n_kv = a->n_kv;
    const uint64_t st = a->stride;
    uint32_t p = p0;
    for (; p + 4 <= n_kv; p += 4) {
        const float *k = H ? NULL : a->k + (uint64_t)p * st;
        const uint16_t *kh = H ? a->k16 + (uint64_t)p * st : NULL;
        __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
        for (uint32_t i = 0; i < hd; i += 8) {
            __m256 qv = _mm256_loadu_ps(a->q + i);
            c0 = _mm256_add_ps(c0, _mm256_mul_ps(qv, KV8(H, k, kh, i)));
            c1 = _mm256_add_ps(c1, _mm256_mul_ps(qv, KV8(H, k, kh, st + i)));
            c2 = _mm256_add_ps(c2, _mm256_mul_ps(qv, KV8(H, k, kh, 2 * st + i)));
            c3 = _mm256_add_ps(c3, _mm256_mul_ps(qv, KV8(H, k, kh, 3 * st + i)));
        }
        att[p] = close8(c0) * a->scale;
        att[p + 1] = close8(c1) * a->scale;
        att[p + 2] = close8(c2) * a->scale;
        att[p + 3] = close8(c3) * a->scale;
    }
    for (; p < n_kv; p++) {
        const float *k = H ? NULL : a->k + (uint64_t)p * st;
        const uint16_t *kh = H ? a->k16 + (uint64_t)p * st : NULL;
        __m256 c0 = _mm256_setzero_ps();
        for (uint32_t i = 0; i < hd; i += 8)
            c0 = _mm256_add_ps(c0, _mm256_mul_ps(_mm256_loadu_ps(a->q + i), KV8(H, k, kh, i)));
        att[p] = close8(c0) * a->scale;
    }
    softmax_avx2(att, p0, n_kv, a->f16_weights);
    uint32_t e = 0;
    for (; e + 64 <= hd; e += 64) {
        __m256 o[8];
        for (int j = 0; j < 8; j++)
            o[j] = _mm256_setzero_ps();
        for (p = p0; p < n_kv; p++) {
            __m256 w = _mm256_set1_ps(att[p]);
            const float *vp = H ? NULL : a->v + e + (uint64_t)p * st;
            const uint16_t *vh = H ? a->v16 + e + (uint64_t)p * st : NULL;
            for (int j = 0; j < 8; j++)
                o[j] = _mm256_add_ps(o[j], _mm256_mul_ps(w, KV8(H, vp, vh, 8 * j)));
        }
        for (int j = 0; j < 8; j++)
            _mm256_storeu_ps(out + e + 8 * j, o[j]);
    }
    for (; e < hd; e += 8) {
        __m256 o = _mm256_setzero_ps();
        for (p = p0; p < n_kv; p++)
            o = _mm256_add_ps(o, _mm256_mul_ps(_mm256_set1_ps(att[p]),
                                               KV8(H, H ? NULL : a->v + (uint64_t)p * st,
                                                   H ? a->v16 + (uint64_t)p * st : NULL, e)));
        _mm256_storeu_ps(out + e, o);
    }
}

/* attn_head_avx2_kv for G query heads that read the same keys and values (a's q, att and out
 * for head 0; head h's at q + h * hd, att + h * ld, out + h * hd): each key and value chunk
 * loaded (and converted from fp16) once for the G heads, each head's sums taken in the single
 * head's order (positions' scores alike, the values over the positions in order), so each
 * head's bits are those of attn_head_avx2_kv. Two positions' scores at once and the output in
 * chunks of 16, so that G <= 4 heads' sums stay in registers. */
AVX2 static inline __attribute__((always_inline)) void
attn_heads_avx2_kv(const struct ebb__attn_head *a, const int G, float *att, uint64_t ld, float *out,
                   const bool H)
{
    const uint32_t hd = a->hd, p0 = a->p0, n_kv = a->n_kv;
    const uint64_t st = a->stride;
    uint32_t p = p0;
    for (; p < n_kv; p += 2) {
        const bool two = p + 1 < n_kv;
        const float *k = H ? NULL : a->k + (uint64_t)p * st;
        const uint16_t *kh = H ? a->k16 + (uint64_t)p * st : NULL;
        __m256 c[4][2];
        for (int h = 0; h < G; h++)
            c[h][0] = c[h][1] = _mm256_setzero_ps();
        for (uint32_t i = 0; i < hd; i += 8) {
            __m256 k0 = KV8(H, k, kh, i), k1 = two ? KV8(H, k, kh, st + i) : k0;
            for (int h = 0; h < G; h++) {
                __m256 qv = _mm256_loadu_ps(a->q + (uint64_t)h * hd + i);
                c[h][0] = _mm256_add_ps(c[h][0], _mm256_mul_ps(qv, k0));
                c[h][1] = _mm256_add_ps(c[h][1], _mm256_mul_ps(qv, k1));
            }
        }
        for (int h = 0; h < G; h++) {
            att[(uint64_t)h * ld + p] = close8(c[h][0]) * a->scale;
            if (two)
                att[(uint64_t)h * ld + p + 1] = close8(c[h][1]) * a->scale;
        }
    }
    for (int h = 0; h < G; h++)
        softmax_avx2(att + (uint64_t)h * ld, p0, n_kv, a->f16_weights);
    for (uint32_t e = 0; e < hd; e += 16) {
        const bool two = e + 8 < hd;
        __m256 o[4][2];
        for (int h = 0; h < G; h++)
            o[h][0] = o[h][1] = _mm256_setzero_ps();
        for (p = p0; p < n_kv; p++) {
            const float *vp = H ? NULL : a->v + e + (uint64_t)p * st;
            const uint16_t *vh = H ? a->v16 + e + (uint64_t)p * st : NULL;
            __m256 v0 = KV8(H, vp, vh, 0), v1 = two ? KV8(H, vp, vh, 8) : v0;
            for (int h = 0; h < G; h++) {
                __m256 w = _mm256_set1_ps(att[(uint64_t)h * ld + p]);
                o[h][0] = _mm256_add_ps(o[h][0], _mm256_mul_ps(w, v0));
                o[h][1] = _mm256_add_ps(o[h][1], _mm256_mul_ps(w, v1));
            }
        }
        for (int h = 0; h < G; h++) {
            _mm256_storeu_ps(out + (uint64_t)h * hd + e, o[h][0]);
            if (two)
                _mm256_storeu_ps(out + (uint64_t)h * hd + e + 8, o[h][1]);
        }
    }
}

/* attn_heads_avx2_kv with G a constant (2, 3 or 4) and H decided. */
#define ATTN_HEADS(G)                                                                              \
    AVX2 static void attn_heads##G##_avx2(const struct ebb__attn_head *a, float *att, uint64_t ld, \
                                          float *out)                                              \
    {                                                                                              \
        if (a->k16)                                                                                \
            attn_heads_avx2_kv(a, G, att, ld, out, true);                                          \
        else                                                                                       \
            attn_heads_avx2_kv(a, G, att, ld, out, false);                                         \
    }
ATTN_HEADS(2)
ATTN_HEADS(3)
ATTN_HEADS(4)

AVX2 static void attn_head_avx2(const struct ebb__attn_head *a, float *att, float *out)
{
    if (a->k16)
        attn_head_avx2_kv(a, att, out, true);
    else
        attn_head_avx2_kv(a, att, out, false);
}

AVX2 static void f16_store_avx2(uint16_t *dst, const float *src, uint64_t n)
{
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = ebb_fp32_to_fp16(src[i]);
}

static bool have_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

AVX2 static void gelu_glu_avx2(const float *tab, const float *a, const float *b, float *d,
                               uint64_t n)
{
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(a + i);
        __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
        __m256 g = _mm256_i32gather_ps(tab, h, 4);
        g = _mm256_blendv_ps(g, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
        g = _mm256_blendv_ps(g, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        _mm256_storeu_ps(d + i, _mm256_mul_ps(g, _mm256_loadu_ps(b + i)));
    }
    for (; i < n; i++)
        d[i] = ebb__ref_gelu_f16(tab, a[i]) * b[i];
}

AVX2 static void f16_round_avx2(float *dst, const float *src, uint64_t n)
{
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                                                  _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++)
        dst[i] = f16_round(src[i]);
}
#else
static bool have_avx2(void)
{
    return false;
}
#endif

void ebb__ref_attn_head(const struct ebb__attn_head *a, bool simd, float *att, float *out)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (simd && a->hd % 8 == 0 && have_avx2()) {
        attn_head_avx2(a, att, out);
        return;
    }
#else
    (void)simd;
#endif
    attn_head_c(a, att, out);
}

void ebb__ref_attn_heads(const struct ebb__attn_head *a, uint32_t g, bool simd, float *att,
                         uint64_t ld, float *out)
{
    struct ebb__attn_head cur = *a;
    for (uint32_t h0 = 0, n; h0 < g; h0 += n) {
        n = g - h0 > EBB__ATT_GROUP ? EBB__ATT_GROUP : g - h0;
        cur.q = a->q + (uint64_t)h0 * a->hd;
        float *at = att + h0 * ld, *o = out + (uint64_t)h0 * a->hd;
#if defined(__x86_64__) && defined(__GNUC__)
        if (simd && n > 1 && a->hd % 8 == 0 && have_avx2()) {
            (n == 2   ? attn_heads2_avx2
             : n == 3 ? attn_heads3_avx2
                      : attn_heads4_avx2)(&cur, at, ld, o);
            continue;
        }
#endif
        n = 1; /* one head at a time */
        ebb__ref_attn_head(&cur, simd, at, o);
    }
}

void ebb__ref_f16_store(uint16_t *dst, const float *src, uint64_t n, bool simd)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (simd && have_avx2()) {
        f16_store_avx2(dst, src, n);
        return;
    }
#else
    (void)simd;
#endif
    for (uint64_t i = 0; i < n; i++)
        dst[i] = ebb_fp32_to_fp16(src[i]);
}

void ebb__ref_f16_round(float *dst, const float *src, uint64_t n, bool simd)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (simd && have_avx2()) {
        f16_round_avx2(dst, src, n);
        return;
    }
#else
    (void)simd;
#endif
    for (uint64_t i = 0; i < n; i++)
        dst[i] = f16_round(src[i]);
}

void ebb__ref_gelu_glu(const float *tab, const float *a, const float *b, float *d, uint64_t n,
                       bool simd)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (simd && have_avx2()) {
        gelu_glu_avx2(tab, a, b, d, n);
        return;
    }
#else
    (void)simd;
#endif
    for (uint64_t i = 0; i < n; i++)
        d[i] = ebb__ref_gelu_f16(tab, a[i]) * b[i];
}

void ebb__ref_gelu_table(float *tab)
{
    for (uint32_t h = 0; h < 65536; h++)
        tab[h] = f16_round(ebb__ref_gelu(ebb_fp16_to_fp32((uint16_t)h)));
}

bool ebb__ref_attn_simd(void)
{
    return have_avx2();
}
