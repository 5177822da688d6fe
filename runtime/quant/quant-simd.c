/* The 8-bit activation products of quant.c (ebb_quant_dot_q8_act, ebb_quant_dot_q8k_act) with
 * the CPU's vector unit: the same integer sums per block, computed 32 lanes at a time, then the
 * same float steps in the same order, so that each result has the same bits as the scalar one
 * (tests/unit/test-quant.c checks every type against it). AVX2 (with AVX-VNNI or AVX512-VNNI
 * where present) is chosen at run time, so one x86-64 binary runs everywhere. Other CPUs, arm64
 * included (no NEON version yet), get the scalar functions. */
#include "quant.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- scalar entry points, one per type ---- */

#define SCALAR_Q8(name, type)                                                                      \
    static float name(const void *row, const void *act, uint64_t n)                                \
    {                                                                                              \
        return ebb_quant_dot_q8_act(type, row, act, n);                                            \
    }
#define SCALAR_Q8K(name, type)                                                                     \
    static float name(const void *row, const void *act, uint64_t n)                                \
    {                                                                                              \
        return ebb_quant_dot_q8k_act(type, row, act, n);                                           \
    }
SCALAR_Q8(c_q4_0, EBB_GGML_Q4_0)
SCALAR_Q8(c_q4_1, EBB_GGML_Q4_1)
SCALAR_Q8(c_q5_0, EBB_GGML_Q5_0)
SCALAR_Q8(c_q5_1, EBB_GGML_Q5_1)
SCALAR_Q8(c_q8_0, EBB_GGML_Q8_0)
SCALAR_Q8K(c_q4_k, EBB_GGML_Q4_K)
SCALAR_Q8K(c_q5_k, EBB_GGML_Q5_K)
SCALAR_Q8K(c_q6_k, EBB_GGML_Q6_K)

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

/* An fp16 block scale as a float: normal numbers and zero by their bits, the rest (subnormal,
 * Inf, NaN) through the general function; the same values as quant.c's. */
static inline float h2f(uint16_t h)
{
    uint32_t exp = (h >> 10) & 0x1f;
    if (exp == 0 || exp == 0x1f)
        return ebb_fp16_to_fp32(h);
    uint32_t u = (uint32_t)(h & 0x8000) << 16 | (exp + 112) << 23 | (uint32_t)(h & 0x3ff) << 13;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

AVX2 static inline int32_t hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Signed w times signed a, exactly: |w| <= 128 and |a| <= 127 keep maddubs' 16-bit pair sums
 * (at most 2 * 128 * 127) from saturating. */
AVX2 static inline __m256i dot_ss(__m256i w, __m256i a)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* Unsigned w (<= 63) times signed a, exactly. */
AVX2 static inline __m256i dot_us(__m256i w, __m256i a)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
}

/* The 32 nibbles of a 16-byte block in element order: low nibbles, then high. */
AVX2 static inline __m256i nibbles(const uint8_t *qs)
{
    __m128i q = _mm_loadu_si128((const __m128i *)(const void *)qs);
    __m256i w = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(w, _mm256_set1_epi8(0x0f));
}

/* Bit j of qh as 0x10 in byte j. */
AVX2 static inline __m256i bit4(uint32_t qh)
{
    const __m256i shuf =
        _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    const __m256i bm = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bm), bm);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

AVX2 static inline __m256i load32(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* The generic code's float steps: sum += d * x.d * isum; summ += m * x.s for the types with a
 * min (HAS_M). */
#define Q8_LOOP(BLOCK, ISUM, HAS_M, M)                                                             \
    const struct ebb_q8_act *x = act;                                                              \
    const BLOCK *b = row;                                                                          \
    float sum = 0, summ = 0;                                                                       \
    for (uint64_t ib = 0; ib < n / 32; ib++, b++, x++) {                                           \
        int32_t isum = ISUM;                                                                       \
        sum += h2f(b->d) * x->d * (float)isum;                                                     \
        if (HAS_M)                                                                                 \
            summ += (M)*x->s;                                                                      \
    }                                                                                              \
    return sum + summ;

AVX2 static float avx2_q4_0(const void *row, const void *act, uint64_t n){
    Q8_LOOP(struct ebb_block_q4_0,
            hsum_i32(dot_ss(_mm256_sub_epi8(nibbles(b->qs), _mm256_set1_epi8(8)), load32(x->q))),
            false, 0.0f)}

AVX2 static float avx2_q4_1(const void *row, const void *act, uint64_t n){
    Q8_LOOP(struct ebb_block_q4_1, hsum_i32(dot_us(nibbles(b->qs), load32(x->q))), true, h2f(b->m))}

AVX2 static float avx2_q5_0(const void *row, const void *act, uint64_t n){
    Q8_LOOP(struct ebb_block_q5_0,
            hsum_i32(dot_ss(_mm256_sub_epi8(_mm256_or_si256(nibbles(b->qs), bit4(le32(b->qh))),
                                            _mm256_set1_epi8(16)),
                            load32(x->q))),
            false, 0.0f)}

AVX2 static float avx2_q5_1(const void *row, const void *act, uint64_t n){
    Q8_LOOP(struct ebb_block_q5_1,
            hsum_i32(dot_us(_mm256_or_si256(nibbles(b->qs), bit4(le32(b->qh))), load32(x->q))),
            true, h2f(b->m))}

AVX2 static float avx2_q8_0(const void *row, const void *act, uint64_t n){
    Q8_LOOP(struct ebb_block_q8_0, hsum_i32(dot_ss(load32(b->qs), load32(x->q))), false, 0.0f)}

/* Q4_K and Q5_K: per 64 elements one 32-byte load of nibbles (low: group 2c, high: 2c + 1),
 * each group's products weighted by its scale in madd, summed in one int32 vector per token;
 * nt tokens (act, act + stride, ..) share the unpacked weights. */
AVX2 static inline
    __attribute__((always_inline)) void k4_k5(const void *row, const void *act, uint64_t stride,
                                              uint64_t n, bool q5, int nt, float *out)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    float sum[4] = {0}, summ[4] = {0};
    for (uint64_t ib = 0; ib < n / EBB_QK_K; ib++) {
        const struct ebb_block_q4_k *b4 = (const struct ebb_block_q4_k *)row + ib;
        const struct ebb_block_q5_k *b5 = (const struct ebb_block_q5_k *)row + ib;
        const uint8_t *scales = q5 ? b5->scales : b4->scales, *qs = q5 ? b5->qs : b4->qs;
        const struct ebb_block_q8_k *x[4];
        __m256i acc[4];
        int32_t msum[4] = {0};
        for (int t = 0; t < nt; t++) {
            x[t] = (const struct ebb_block_q8_k *)(const void *)((const uint8_t *)act +
                                                                 stride * (uint64_t)t) +
                   ib;
            acc[t] = _mm256_setzero_si256();
        }
        __m256i qh = q5 ? load32(b5->qh) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            uint8_t sc0, mn0, sc1, mn1;
            ebb_quant_k4_scale_min(scales, 2 * c, &sc0, &mn0);
            ebb_quant_k4_scale_min(scales, 2 * c + 1, &sc1, &mn1);
            __m256i q = load32(qs + 32 * c);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (q5) {
                __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
                __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
            }
            const __m256i s0 = _mm256_set1_epi16(sc0), s1 = _mm256_set1_epi16(sc1);
            for (int t = 0; t < nt; t++) {
                __m256i p0 = _mm256_maddubs_epi16(lo, load32(x[t]->qs + 64 * c));
                __m256i p1 = _mm256_maddubs_epi16(hi, load32(x[t]->qs + 64 * c + 32));
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p0, s0));
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p1, s1));
                msum[t] += mn0 * (x[t]->bsums[4 * c] + x[t]->bsums[4 * c + 1]) +
                           mn1 * (x[t]->bsums[4 * c + 2] + x[t]->bsums[4 * c + 3]);
            }
        }
        float d = h2f(q5 ? b5->d : b4->d), dmin = h2f(q5 ? b5->dmin : b4->dmin);
        for (int t = 0; t < nt; t++) {
            sum[t] += d * x[t]->d * (float)hsum_i32(acc[t]);
            summ[t] += dmin * x[t]->d * (float)msum[t];
        }
    }
    for (int t = 0; t < nt; t++)
        out[t] = sum[t] - summ[t];
}

AVX2 static float avx2_q4_k(const void *row, const void *act, uint64_t n)
{
    float out;
    k4_k5(row, act, 0, n, false, 1, &out);
    return out;
}

AVX2 static float avx2_q5_k(const void *row, const void *act, uint64_t n)
{
    float out;
    k4_k5(row, act, 0, n, true, 1, &out);
    return out;
}

AVX2 static void avx2_q4_k_x4(const void *row, const void *act, uint64_t stride, uint64_t n,
                              float *out)
{
    k4_k5(row, act, stride, n, false, 4, out);
}

AVX2 static void avx2_q5_k_x4(const void *row, const void *act, uint64_t stride, uint64_t n,
                              float *out)
{
    k4_k5(row, act, stride, n, true, 4, out);
}

/* Q6_K: the unsigned 6-bit q (0..63) times a in maddubs, each 16-group weighted by its scale;
 * the -32 offset comes back as 32 * sum(scale * bsum), so the integer total is the scalar's. */
AVX2 static inline __attribute__((always_inline)) void
q6_k(const void *row, const void *act, uint64_t stride, uint64_t n, int nt, float *out)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
    float sum[4] = {0}, summ[4] = {0};
    for (uint64_t ib = 0; ib < n / EBB_QK_K; ib++) {
        const struct ebb_block_q6_k *b = (const struct ebb_block_q6_k *)row + ib;
        const struct ebb_block_q8_k *x[4];
        __m256i acc[4];
        int32_t off[4] = {0};
        for (int t = 0; t < nt; t++) {
            x[t] = (const struct ebb_block_q8_k *)(const void *)((const uint8_t *)act +
                                                                 stride * (uint64_t)t) +
                   ib;
            acc[t] = _mm256_setzero_si256();
            for (int g = 0; g < 16; g++)
                off[t] += b->scales[g] * x[t]->bsums[g];
        }
        for (int half = 0; half < 2; half++) {
            __m256i ql0 = load32(b->ql + 64 * half), ql1 = load32(b->ql + 64 * half + 32);
            __m256i qh = load32(b->qh + 32 * half);
            for (int k = 0; k < 4; k++) {
                __m256i l = (k & 1) ? ql1 : ql0;
                l = k < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
                __m256i h = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m3);
                __m256i q = _mm256_or_si256(l, _mm256_slli_epi16(h, 4));
                int g = 8 * half + 2 * k;
                __m256i sc = _mm256_set_m128i(_mm_set1_epi16(b->scales[g + 1]),
                                              _mm_set1_epi16(b->scales[g]));
                for (int t = 0; t < nt; t++) {
                    __m256i p = _mm256_maddubs_epi16(q, load32(x[t]->qs + 128 * half + 32 * k));
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p, sc));
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            int32_t isum = hsum_i32(acc[t]) - 32 * off[t];
            sum[t] += h2f(b->d) * x[t]->d * (float)isum;
            summ[t] += 0.0f * x[t]->d * (float)0;
        }
    }
    for (int t = 0; t < nt; t++)
        out[t] = sum[t] - summ[t];
}

AVX2 static float avx2_q6_k(const void *row, const void *act, uint64_t n)
{
    float out;
    q6_k(row, act, 0, n, 1, &out);
    return out;
}

AVX2 static void avx2_q6_k_x4(const void *row, const void *act, uint64_t stride, uint64_t n,
                              float *out)
{
    q6_k(row, act, stride, n, 4, out);
}

/* ---- four tokens per weight row: the weights unpacked once, each token's steps as above ---- */

/* Four tokens' integer sums of one block at once: lane t of the result is the sum of p[t]. */
AVX2 static inline __m128i hsum4(__m256i p0, __m256i p1, __m256i p2, __m256i p3)
{
    __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

/* For the 32-block types (W unpacks block b's weights, signed with SIGNED; M is its min): per
 * block the weights unpacked once, the four tokens' sums reduced together and their float
 * steps taken in the four lanes of one vector: lane t adds block after block exactly as the
 * generic code does for token t, so each out[t] has its bits. */
#define Q8_LOOP4(BLOCK, W, SIGNED, M)                                                              \
    const BLOCK *b = row;                                                                          \
    const struct ebb_q8_act *x[4];                                                                 \
    for (int t = 0; t < 4; t++)                                                                    \
        x[t] = (const struct ebb_q8_act *)(const void *)((const uint8_t *)act + stride * t);       \
    __m128 sum = _mm_setzero_ps(), summ = _mm_setzero_ps();                                        \
    const __m256i ones = _mm256_set1_epi16(1);                                                     \
    for (uint64_t ib = 0; ib < n / 32; ib++, b++) {                                                \
        __m256i w = W, wa = SIGNED ? _mm256_sign_epi8(w, w) : w;                                   \
        __m256i p[4];                                                                              \
        for (int t = 0; t < 4; t++) {                                                              \
            __m256i a = load32(x[t][ib].q);                                                        \
            if (SIGNED)                                                                            \
                a = _mm256_sign_epi8(a, w);                                                        \
            p[t] = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, a), ones);                           \
        }                                                                                          \
        __m128 isum = _mm_cvtepi32_ps(hsum4(p[0], p[1], p[2], p[3]));                              \
        __m128 xd = _mm_setr_ps(x[0][ib].d, x[1][ib].d, x[2][ib].d, x[3][ib].d);                   \
        __m128 xs = _mm_setr_ps(x[0][ib].s, x[1][ib].s, x[2][ib].s, x[3][ib].s);                   \
        sum = _mm_add_ps(sum, _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(h2f(b->d)), xd), isum));           \
        if (!SIGNED) /* the types with a min */                                                    \
            summ = _mm_add_ps(summ, _mm_mul_ps(_mm_set1_ps(M), xs));                               \
    }                                                                                              \
    _mm_storeu_ps(out, _mm_add_ps(sum, summ));

AVX2 static void avx2_q4_0_x4(const void *row, const void *act, uint64_t stride, uint64_t n,
                              float *out){
    Q8_LOOP4(struct ebb_block_q4_0, _mm256_sub_epi8(nibbles(b->qs), _mm256_set1_epi8(8)), true,
             0.0f)}

AVX2 static void avx2_q4_1_x4(const void *row, const void *act, uint64_t stride, uint64_t n,
                              float *out){
    Q8_LOOP4(struct ebb_block_q4_1, nibbles(b->qs), false, h2f(b->m))}

AVX2 static void avx2_q5_0_x4(const void *row, const void *act, uint64_t stride, uint64_t n,
                              float *out){
    Q8_LOOP4(struct ebb_block_q5_0,
             _mm256_sub_epi8(_mm256_or_si256(nibbles(b->qs), bit4(le32(b->qh))),
                             _mm256_set1_epi8(16)),
             true, 0.0f)}

AVX2 static void avx2_q5_1_x4(const void *row, const void *act, uint64_t stride, uint64_t n,
                              float *out){
    Q8_LOOP4(struct ebb_block_q5_1, _mm256_or_si256(nibbles(b->qs), bit4(le32(b->qh))), false,
             h2f(b->m))}

AVX2 static void avx2_q8_0_x4(const void *row, const void *act, uint64_t stride, uint64_t n,
                              float *out)
{
    Q8_LOOP4(struct ebb_block_q8_0, load32(b->qs), true, 0.0f)
}

/* ---- eight tokens per weight row (the 32-block types): AVX2, or AVX-VNNI's dpbusd ---- */

#define VNNI __attribute__((target("avx2,avxvnni")))
/* AVX512-VNNI's dpbusd on 256-bit vectors (EVEX, with AVX512VL): the same instruction as
 * AVX-VNNI's, on the CPUs that have the AVX-512 form only (AMD Zen 4 and 5, Intel Ice Lake and
 * later servers). */
#define V512 __attribute__((target("avx2,avx512vnni,avx512vl")))

/* Eight tokens' integer sums of one block: lane t of the result is the sum of p[t]. */
AVX2 static inline __m256i hsum8(const __m256i *p)
{
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* The products of unsigned u and signed a bytes, four to an int32 lane: maddubs' pair sums (exact
 * here, as in dot_ss and dot_us) widened by madd, or dpbusd's sums in one step. */
#define DOT_AVX2(u, a) _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1))
#define DOT_VNNI(u, a) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, a)
#define DOT_V512(u, a) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, a)

/* Q8_LOOP4 for eight tokens: per block the weights unpacked once, eight tokens' sums reduced
 * together (hsum8), their float steps in the eight lanes of one vector, each lane the scalar
 * code's steps for its token in its order (the same bits). */
#define Q8_LOOP8(BLOCK, W, SIGNED, M, DOT)                                                         \
    const BLOCK *b = row;                                                                          \
    const struct ebb_q8_act *x[8];                                                                 \
    for (int t = 0; t < 8; t++)                                                                    \
        x[t] = (const struct ebb_q8_act *)(const void *)((const uint8_t *)act + stride * t);       \
    __m256 sum = _mm256_setzero_ps(), summ = _mm256_setzero_ps();                                  \
    for (uint64_t ib = 0; ib < n / 32; ib++, b++) {                                                \
        __m256i w = W, wa = SIGNED ? _mm256_sign_epi8(w, w) : w;                                   \
        __m256i p[8];                                                                              \
        for (int t = 0; t < 8; t++) {                                                              \
            __m256i a = load32(x[t][ib].q);                                                        \
            if (SIGNED)                                                                            \
                a = _mm256_sign_epi8(a, w);                                                        \
            p[t] = DOT(wa, a);                                                                     \
        }                                                                                          \
        __m256 isum = _mm256_cvtepi32_ps(hsum8(p));                                                \
        __m256 xd = _mm256_setr_ps(x[0][ib].d, x[1][ib].d, x[2][ib].d, x[3][ib].d, x[4][ib].d,     \
                                   x[5][ib].d, x[6][ib].d, x[7][ib].d);                            \
        __m256 xs = _mm256_setr_ps(x[0][ib].s, x[1][ib].s, x[2][ib].s, x[3][ib].s, x[4][ib].s,     \
                                   x[5][ib].s, x[6][ib].s, x[7][ib].s);                            \
        sum =                                                                                      \
            _mm256_add_ps(sum, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(h2f(b->d)), xd), isum)); \
        if (!SIGNED) /* the types with a min */                                                    \
            summ = _mm256_add_ps(summ, _mm256_mul_ps(_mm256_set1_ps(M), xs));                      \
    }                                                                                              \
    _mm256_storeu_ps(out, _mm256_add_ps(sum, summ));

#define X8(ISA, DOT, name, BLOCK, W, SIGNED, M)                                                    \
    ISA static void name(const void *row, const void *act, uint64_t stride, uint64_t n,            \
                         float *out)                                                               \
    {                                                                                              \
        Q8_LOOP8(BLOCK, W, SIGNED, M, DOT)                                                         \
    }
#define X8_BOTH(type, BLOCK, W, SIGNED, M)                                                         \
    X8(AVX2, DOT_AVX2, avx2_##type##_x8, BLOCK, W, SIGNED, M)                                      \
    X8(VNNI, DOT_VNNI, vnni_##type##_x8, BLOCK, W, SIGNED, M)                                      \
    X8(V512, DOT_V512, v512_##type##_x8, BLOCK, W, SIGNED, M)
X8_BOTH(q4_0, struct ebb_block_q4_0, _mm256_sub_epi8(nibbles(b->qs), _mm256_set1_epi8(8)), true,
        0.0f)
X8_BOTH(q4_1, struct ebb_block_q4_1, nibbles(b->qs), false, h2f(b->m))
X8_BOTH(q5_0, struct ebb_block_q5_0,
        _mm256_sub_epi8(_mm256_or_si256(nibbles(b->qs), bit4(le32(b->qh))), _mm256_set1_epi8(16)),
        true, 0.0f)
X8_BOTH(q5_1, struct ebb_block_q5_1, _mm256_or_si256(nibbles(b->qs), bit4(le32(b->qh))), false,
        h2f(b->m))
X8_BOTH(q8_0, struct ebb_block_q8_0, load32(b->qs), true, 0.0f)

/* ---- four weight rows per token (decode's products on the file's rows) ---- */

/* Q8_LOOP for rows row, row + row_bytes, .. (four of them) against one token: the token's
 * block loaded once, the four rows' integer sums reduced together (hsum4) and their float steps
 * in the four lanes of one vector, lane r the scalar code's steps for row r in its order (the
 * same bits). */
#ifndef PF_BLOCKS
#define PF_BLOCKS 16
#endif
#define Q8_ROWS4(BLOCK, W, SIGNED, M, DOT)                                                         \
    const struct ebb_q8_act *x = act;                                                              \
    const BLOCK *rb[4];                                                                            \
    for (int r = 0; r < 4; r++)                                                                    \
        rb[r] = (const BLOCK *)(const void *)((const uint8_t *)row + row_bytes * (uint64_t)r);     \
    __m128 sum = _mm_setzero_ps(), summ = _mm_setzero_ps();                                        \
    for (uint64_t ib = 0; ib < n / 32; ib++, x++) {                                                \
        const __m256i a = load32(x->q);                                                            \
        __m256i p[4];                                                                              \
        for (int r = 0; r < 4; r++) {                                                              \
            const BLOCK *b = rb[r] + ib;                                                           \
            _mm_prefetch((const char *)b + 16 * row_bytes, _MM_HINT_T1);                           \
            __m256i w = W;                                                                         \
            p[r] = SIGNED ? DOT(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)) : DOT(w, a);       \
        }                                                                                          \
        /* The four fp16 scales (and mins) converted together: F16C's exact conversion. */         \
        __m128 d =                                                                                 \
            _mm_cvtph_ps(_mm_setr_epi16((short)rb[0][ib].d, (short)rb[1][ib].d,                    \
                                        (short)rb[2][ib].d, (short)rb[3][ib].d, 0, 0, 0, 0));      \
        __m128 isum = _mm_cvtepi32_ps(hsum4(p[0], p[1], p[2], p[3]));                              \
        sum = _mm_add_ps(sum, _mm_mul_ps(_mm_mul_ps(d, _mm_set1_ps(x->d)), isum));                 \
        if (!SIGNED) /* the types with a min */                                                    \
            summ = _mm_add_ps(summ, _mm_mul_ps(M, _mm_set1_ps(x->s)));                             \
    }                                                                                              \
    _mm_storeu_ps(out, _mm_add_ps(sum, summ));

#define AVX2_F16C __attribute__((target("avx2,f16c")))
#define VNNI_F16C __attribute__((target("avx2,avxvnni,f16c")))
#define V512_F16C __attribute__((target("avx2,avx512vnni,avx512vl,f16c")))
#define R4(ISA, DOT, name, BLOCK, W, SIGNED, M)                                                    \
    ISA static void name(const void *row, uint64_t row_bytes, const void *act, uint64_t n,         \
                         float *out)                                                               \
    {                                                                                              \
        Q8_ROWS4(BLOCK, W, SIGNED, M, DOT)                                                         \
    }
#define R4_BOTH(type, BLOCK, W, SIGNED, M)                                                         \
    R4(AVX2_F16C, DOT_AVX2, avx2_##type##_r4, BLOCK, W, SIGNED, M)                                 \
    R4(VNNI_F16C, DOT_VNNI, vnni_##type##_r4, BLOCK, W, SIGNED, M)                                 \
    R4(V512_F16C, DOT_V512, v512_##type##_r4, BLOCK, W, SIGNED, M)
R4_BOTH(q4_0, struct ebb_block_q4_0, _mm256_sub_epi8(nibbles(b->qs), _mm256_set1_epi8(8)), true,
        _mm_setzero_ps())
#define MINS4                                                                                      \
    _mm_cvtph_ps(_mm_setr_epi16((short)rb[0][ib].m, (short)rb[1][ib].m, (short)rb[2][ib].m,        \
                                (short)rb[3][ib].m, 0, 0, 0, 0))
R4_BOTH(q4_1, struct ebb_block_q4_1, nibbles(b->qs), false, MINS4)
R4_BOTH(q5_0, struct ebb_block_q5_0,
        _mm256_sub_epi8(_mm256_or_si256(nibbles(b->qs), bit4(le32(b->qh))), _mm256_set1_epi8(16)),
        true, _mm_setzero_ps())
R4_BOTH(q5_1, struct ebb_block_q5_1, _mm256_or_si256(nibbles(b->qs), bit4(le32(b->qh))), false,
        MINS4)
R4_BOTH(q8_0, struct ebb_block_q8_0, load32(b->qs), true, _mm_setzero_ps())

static bool have_simd(void)
{
    return __builtin_cpu_supports("avx2");
}

/* ---- activation quantization: quant.c's steps eight elements at a time, the same bits ---- */

AVX2_F16C static inline float f16_round(float x)
{
    return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

AVX2 static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

/* 32 rounded floats as int8 in element order (packs interleave the 128-bit halves; the permute
 * puts them back). */
AVX2 static inline __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

AVX2_F16C static void avx2_q8_act_row(const float *x, uint64_t n, struct ebb_q8_act *out)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (uint64_t ib = 0; ib < n / 32; ib++, x += 32, out++) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            m = _mm256_max_ps(m, _mm256_and_ps(v[k], abs));
        }
        float amax = hmax8(m);
        float d = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        __m256i q[4], sum = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            q[k] =
                _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], _mm256_set1_ps(id)),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            sum = _mm256_add_epi32(sum, q[k]);
        }
        _mm256_storeu_si256((__m256i *)(void *)out->q, pack32(q[0], q[1], q[2], q[3]));
        out->d = f16_round(d);
        out->s = f16_round(d * (float)hsum_i32(sum));
    }
}

AVX2 static void avx2_q8k_act_row(const float *x, uint64_t n, struct ebb_block_q8_k *out)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (uint64_t ib = 0; ib < n / EBB_QK_K; ib++, x += EBB_QK_K, out++) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < EBB_QK_K; j += 8)
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + j), abs));
        float amax = hmax8(m), max = 0;
        if (amax == 0.0f) {
            memset(out, 0, sizeof(*out));
            continue;
        }
        for (int j = 0; j < EBB_QK_K; j++) /* the first element of that magnitude */
            if (fabsf(x[j]) == amax) {
                max = x[j];
                break;
            }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale), top = _mm256_set1_ps(127.0f);
        for (int j = 0; j < EBB_QK_K; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                __m256 r = _mm256_round_ps(_mm256_mul_ps(is, _mm256_loadu_ps(x + j + 8 * k)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[k] = _mm256_cvtps_epi32(_mm256_min_ps(r, top));
            }
            _mm256_storeu_si256((__m256i *)(void *)(out->qs + j), pack32(q[0], q[1], q[2], q[3]));
            out->bsums[j / 16] = (int16_t)hsum_i32(_mm256_add_epi32(q[0], q[1]));
            out->bsums[j / 16 + 1] = (int16_t)hsum_i32(_mm256_add_epi32(q[2], q[3]));
        }
        out->d = 1.0f / iscale;
    }
}

static bool have_f16c(void)
{
    return have_simd() && __builtin_cpu_supports("f16c");
}

void ebb_quant_q8_act_row_fast(const float *x, uint64_t n, struct ebb_q8_act *out)
{
    if (have_f16c())
        avx2_q8_act_row(x, n, out);
    else
        ebb_quant_q8_act_row(x, n, out);
}

void ebb_quant_q8k_act_row_fast(const float *x, uint64_t n, struct ebb_block_q8_k *out)
{
    if (have_simd())
        avx2_q8k_act_row(x, n, out);
    else
        ebb_quant_q8k_act_row(x, n, out);
}

/* The dpbusd this CPU has: 1 for AVX-VNNI (VEX on 256-bit vectors: CPUID leaf 7, sub-leaf 1, EAX
 * bit 4, which clang does not know by name in __builtin_cpu_supports), 2 for AVX512-VNNI with
 * AVX512VL (the EVEX form on 256-bit vectors; __builtin_cpu_supports checks that the OS saves
 * the AVX-512 state), 0 for neither or with EBB_CPU_VNNI=0. CPUID is read once: in a virtual
 * machine each CPUID exits to the hypervisor (microseconds), and the products look their
 * function up per matrix (3% of a batched decode here before). Threads racing on the first
 * call store the same value. */
static int have_vnni(void)
{
    static _Atomic int cpu = -1;
    int v = atomic_load_explicit(&cpu, memory_order_relaxed);
    if (v < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        v = !have_simd()                                                                 ? 0
            : __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1u)                   ? 1
            : __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") ? 2
                                                                                         : 0;
        atomic_store_explicit(&cpu, v, memory_order_relaxed);
    }
    const char *off = getenv("EBB_CPU_VNNI");
    return off && !strcmp(off, "0") ? 0 : v;
}

const char *ebb_quant_simd_name(void)
{
    int v = have_vnni();
    return v == 1        ? "avx2, avx-vnni"
           : v == 2      ? "avx2, avx512-vnni"
           : have_simd() ? "avx2"
                         : "scalar";
}

#define SIMD(fn) fn
#else
static bool have_simd(void)
{
    return false;
}

const char *ebb_quant_simd_name(void)
{
    return "scalar";
}

#define SIMD(fn) NULL

void ebb_quant_q8_act_row_fast(const float *x, uint64_t n, struct ebb_q8_act *out)
{
    ebb_quant_q8_act_row(x, n, out);
}

void ebb_quant_q8k_act_row_fast(const float *x, uint64_t n, struct ebb_block_q8_k *out)
{
    ebb_quant_q8k_act_row(x, n, out);
}
#endif

ebb_quant_dot_act4_fn ebb_quant_get_dot_act4(uint32_t type)
{
    static const struct {
        uint32_t type;
        ebb_quant_dot_act4_fn fn;
    } tab[] = {
        {EBB_GGML_Q4_0, SIMD(avx2_q4_0_x4)}, {EBB_GGML_Q4_1, SIMD(avx2_q4_1_x4)},
        {EBB_GGML_Q5_0, SIMD(avx2_q5_0_x4)}, {EBB_GGML_Q5_1, SIMD(avx2_q5_1_x4)},
        {EBB_GGML_Q8_0, SIMD(avx2_q8_0_x4)}, {EBB_GGML_Q4_K, SIMD(avx2_q4_k_x4)},
        {EBB_GGML_Q5_K, SIMD(avx2_q5_k_x4)}, {EBB_GGML_Q6_K, SIMD(avx2_q6_k_x4)},
    };
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
        if (tab[i].type == type)
            return tab[i].fn && have_simd() ? tab[i].fn : NULL;
    return NULL;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The 32-block types' eight-token (x8) and four-row (r4) products by dpbusd, indexed by
 * have_vnni(): [0] AVX2's maddubs + madd, [1] AVX-VNNI, [2] AVX512-VNNI. */
static const struct {
    uint32_t type;
    ebb_quant_dot_act4_fn x8[3];
    ebb_quant_dot_rows4_fn r4[3];
} vnni_tab[] = {
#define T(T, t)                                                                                    \
    {                                                                                              \
        EBB_GGML_##T, {avx2_##t##_x8, vnni_##t##_x8, v512_##t##_x8},                               \
        {                                                                                          \
            avx2_##t##_r4, vnni_##t##_r4, v512_##t##_r4                                            \
        }                                                                                          \
    }
    T(Q4_0, q4_0), T(Q4_1, q4_1), T(Q5_0, q5_0), T(Q5_1, q5_1), T(Q8_0, q8_0),
#undef T
};

/* type's row of vnni_tab, or -1. */
static int vnni_row(uint32_t type)
{
    for (size_t i = 0; i < sizeof(vnni_tab) / sizeof(vnni_tab[0]); i++)
        if (vnni_tab[i].type == type)
            return (int)i;
    return -1;
}

ebb_quant_dot_act4_fn ebb_quant_get_dot_act8(uint32_t type)
{
    int i = vnni_row(type);
    return i < 0 || !have_simd() ? NULL : vnni_tab[i].x8[have_vnni()];
}

ebb_quant_dot_rows4_fn ebb_quant_get_dot_rows4(uint32_t type)
{
    int i = vnni_row(type);
    return i < 0 || !have_f16c() ? NULL : vnni_tab[i].r4[have_vnni()];
}

int ebb_quant_simd_vnni(void)
{
    return have_vnni();
}
#else

ebb_quant_dot_rows4_fn ebb_quant_get_dot_rows4(uint32_t type)
{
    (void)type;
    return NULL;
}

ebb_quant_dot_act4_fn ebb_quant_get_dot_act8(uint32_t type)
{
    (void)type;
    return NULL;
}

int ebb_quant_simd_vnni(void)
{
    return 0;
}
#endif

ebb_quant_dot_act_fn ebb_quant_get_dot_act(uint32_t type, bool simd)
{
    static const struct {
        uint32_t type;
        ebb_quant_dot_act_fn scalar, simd;
    } tab[] = {
        {EBB_GGML_Q4_0, c_q4_0, SIMD(avx2_q4_0)}, {EBB_GGML_Q4_1, c_q4_1, SIMD(avx2_q4_1)},
        {EBB_GGML_Q5_0, c_q5_0, SIMD(avx2_q5_0)}, {EBB_GGML_Q5_1, c_q5_1, SIMD(avx2_q5_1)},
        {EBB_GGML_Q8_0, c_q8_0, SIMD(avx2_q8_0)}, {EBB_GGML_Q4_K, c_q4_k, SIMD(avx2_q4_k)},
        {EBB_GGML_Q5_K, c_q5_k, SIMD(avx2_q5_k)}, {EBB_GGML_Q6_K, c_q6_k, SIMD(avx2_q6_k)},
    };
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        if (tab[i].type != type)
            continue;
        if (simd && tab[i].simd && have_simd())
            return tab[i].simd;
        return tab[i].scalar;
    }
    return NULL;
}
