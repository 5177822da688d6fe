/* Weights repacked for the CPU device's prefill: eight rows interleaved so that one vector
 * register holds four consecutive weights of each of the eight rows, as unsigned bytes, and one
 * broadcast of four activation bytes feeds all eight rows in a dpbusd (AVX-VNNI) or
 * maddubs + madd (AVX2). Each int32 lane then sums one row's products for one token: no
 * horizontal sums, and four tokens share every weight load. The block scales are stored
 * decoded (floats, int32-ready bytes, int16 pairs), so nothing is unpacked in the loop but the
 * nibbles of Q4_K.
 *
 * The integer sums are exact, and the float steps are the one-token products' steps
 * (quant-simd.c, quant.c) in their order, each lane one (row, token): every result has the bits
 * ebb_quant_get_dot_act(type, true) gives (tests/unit/test-quant.c checks each type).
 *
 * Layouts, per group of 8 rows, blocks in order; "q[k][r][4]" is 32 bytes per k: row r's
 * weights 4k..4k+3 of the block:
 *   Q4_0, 144 bytes a block of 32 (the file's 8 x 18): qs[4][8][4] as Q4_1's, d fp16[8].
 *   Q4_1, 160 bytes a block of 32 (8 x 20): qs[4][8][4] (the file's bytes 4k..4k+3 of row r: low
 *         nibbles weights 4k..4k+3, high nibbles 16 + 4k..16 + 4k + 3), d fp16[8], m fp16[8].
 *   Q8_0, 272 bytes a block of 32 (8 x 34): q[8][8][4], d fp16[8]. Where the products take
 *         dpbusd (AVX-VNNI, AVX512-VNNI: ebb_quant_simd_vnni) q is stored as q + 128, unsigned,
 *         and the products subtract 128 times the activations' block sum (exact in int32), so
 *         that one dpbusd does what the signed bytes need two sign_epi8 for; AVX2's maddubs
 *         would saturate on 255 x 127 pairs, so there the stored signed q stays.
 *   Q5_0, 272 bytes a block of 32: q[8][8][4] (0..31, the stored q), d fp16[8].
 *   (The 32-block types keep their scales as the file's fp16, converted by F16C as they are read,
 *   exactly: a decode step reads these bytes once per token, so they cost no more than the
 *   file's; the K-quants' scales, a few bytes in 1408 or 2464, are stored decoded.)
 *   Q4_K, 1408 bytes a block of 256: qs[4 chunks][8][8][4] (the file's nibble bytes of chunk c,
 *         low nibble group 2c, high 2c + 1), sc uint8[8 groups][8], mn int16[8 groups][8][2]
 *         (each min twice, for madd against two 16-sums), d float[8], dmin float[8].
 *   Q6_K, 2464 bytes a block of 256: q[8 sub-blocks of 32][8][8][4] (0..63), sc int8[16][8],
 *         scale pairs int16[8][8][2] (groups 2j, 2j + 1), d float[8]. */
#include "quant.h"

#include <string.h>

#define Q4_0_BYTES 144
#define Q4_1_BYTES 160
#define Q5_0_BYTES 272
#define Q8_0_BYTES 272
#define Q4_K_BYTES 1408
#define Q6_K_BYTES 2464

static void put_f32(uint8_t *p, float f)
{
    memcpy(p, &f, sizeof(f));
}

static void put_u16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, sizeof(v));
}

static void put_i16(uint8_t *p, int16_t v)
{
    memcpy(p, &v, sizeof(v));
}

/* The 32 weights of block ib of row r, as unsigned bytes, into the group's q[8][8][4]. */
static void put_q32(uint8_t *q, int r, const uint8_t *w)
{
    for (int k = 0; k < 8; k++)
        memcpy(q + 32 * k + 4 * r, w + 4 * k, 4);
}

/* Q4_0 and Q4_1 (min): the file's nibble bytes as they are, the scales decoded. */
static void pack_q4(const uint8_t *rows, uint64_t row_bytes, uint64_t n, uint8_t *dst, bool min)
{
    const uint64_t gb = min ? Q4_1_BYTES : Q4_0_BYTES;
    for (uint64_t ib = 0; ib < n / 32; ib++, dst += gb)
        for (int r = 0; r < 8; r++) {
            const uint8_t *row = rows + r * row_bytes;
            const struct ebb_block_q4_0 *b0 = (const struct ebb_block_q4_0 *)(const void *)row + ib;
            const struct ebb_block_q4_1 *b1 = (const struct ebb_block_q4_1 *)(const void *)row + ib;
            const uint8_t *qs = min ? b1->qs : b0->qs;
            for (int k = 0; k < 4; k++)
                memcpy(dst + 32 * k + 4 * r, qs + 4 * k, 4);
            put_u16(dst + 128 + 2 * r, min ? b1->d : b0->d);
            if (min)
                put_u16(dst + 144 + 2 * r, b1->m);
        }
}

static void pack_q8_0(const uint8_t *rows, uint64_t row_bytes, uint64_t n, uint8_t *dst)
{
    const bool biased = ebb_quant_simd_vnni() != 0;
    for (uint64_t ib = 0; ib < n / 32; ib++, dst += Q8_0_BYTES)
        for (int r = 0; r < 8; r++) {
            const struct ebb_block_q8_0 *b =
                (const struct ebb_block_q8_0 *)(const void *)(rows + r * row_bytes) + ib;
            uint8_t w[32];
            for (int j = 0; j < 32; j++)
                w[j] = (uint8_t)((uint8_t)b->qs[j] + (biased ? 128u : 0u));
            put_q32(dst, r, w);
            put_u16(dst + 256 + 2 * r, b->d);
        }
}

static void pack_q5_0(const uint8_t *rows, uint64_t row_bytes, uint64_t n, uint8_t *dst)
{
    for (uint64_t ib = 0; ib < n / 32; ib++, dst += Q5_0_BYTES)
        for (int r = 0; r < 8; r++) {
            const struct ebb_block_q5_0 *b =
                (const struct ebb_block_q5_0 *)(const void *)(rows + r * row_bytes) + ib;
            uint32_t qh = (uint32_t)b->qh[0] | (uint32_t)b->qh[1] << 8 | (uint32_t)b->qh[2] << 16 |
                          (uint32_t)b->qh[3] << 24;
            uint8_t w[32];
            for (int j = 0; j < 32; j++)
                w[j] = (uint8_t)((b->qs[j & 15] >> (j < 16 ? 0 : 4) & 15) | (qh >> j & 1) << 4);
            put_q32(dst, r, w);
            put_u16(dst + 256 + 2 * r, b->d);
        }
}

static void pack_q4_k(const uint8_t *rows, uint64_t row_bytes, uint64_t n, uint8_t *dst)
{
    for (uint64_t ib = 0; ib < n / EBB_QK_K; ib++, dst += Q4_K_BYTES)
        for (int r = 0; r < 8; r++) {
            const struct ebb_block_q4_k *b =
                (const struct ebb_block_q4_k *)(const void *)(rows + r * row_bytes) + ib;
            for (int c = 0; c < 4; c++)
                put_q32(dst + 256 * c, r, b->qs + 32 * c);
            for (int g = 0; g < 8; g++) {
                uint8_t sc, mn;
                ebb_quant_k4_scale_min(b->scales, g, &sc, &mn);
                dst[1024 + 8 * g + r] = sc;
                put_i16(dst + 1088 + 4 * (8 * g + r), mn);
                put_i16(dst + 1088 + 4 * (8 * g + r) + 2, mn);
            }
            put_f32(dst + 1344 + 4 * r, ebb_fp16_to_fp32(b->d));
            put_f32(dst + 1376 + 4 * r, ebb_fp16_to_fp32(b->dmin));
        }
}

static void pack_q6_k(const uint8_t *rows, uint64_t row_bytes, uint64_t n, uint8_t *dst)
{
    for (uint64_t ib = 0; ib < n / EBB_QK_K; ib++, dst += Q6_K_BYTES)
        for (int r = 0; r < 8; r++) {
            const struct ebb_block_q6_k *b =
                (const struct ebb_block_q6_k *)(const void *)(rows + r * row_bytes) + ib;
            uint8_t w[EBB_QK_K];
            for (int half = 0; half < 2; half++)
                for (int k = 0; k < 4; k++)
                    for (int l = 0; l < 32; l++) {
                        uint8_t lb = b->ql[64 * half + l + 32 * (k & 1)];
                        int lo = k < 2 ? lb & 0x0f : lb >> 4;
                        w[128 * half + 32 * k + l] =
                            (uint8_t)(lo | ((b->qh[32 * half + l] >> (2 * k)) & 3) << 4);
                    }
            for (int j = 0; j < 8; j++)
                put_q32(dst + 256 * j, r, w + 32 * j);
            for (int g = 0; g < 16; g++)
                dst[2048 + 8 * g + r] = (uint8_t)b->scales[g];
            for (int j = 0; j < 8; j++) {
                put_i16(dst + 2176 + 4 * (8 * j + r), b->scales[2 * j]);
                put_i16(dst + 2176 + 4 * (8 * j + r) + 2, b->scales[2 * j + 1]);
            }
            put_f32(dst + 2432 + 4 * r, ebb_fp16_to_fp32(b->d));
        }
}

uint64_t ebb_quant_rp8_bytes(uint32_t type, uint64_t n)
{
    if (!ebb_quant_get_rp8(type))
        return 0;
    switch (type) {
    case EBB_GGML_Q4_0:
        return n / 32 * Q4_0_BYTES;
    case EBB_GGML_Q4_1:
        return n / 32 * Q4_1_BYTES;
    case EBB_GGML_Q5_0:
        return n / 32 * Q5_0_BYTES;
    case EBB_GGML_Q8_0:
        return n / 32 * Q8_0_BYTES;
    case EBB_GGML_Q4_K:
        return n / EBB_QK_K * Q4_K_BYTES;
    case EBB_GGML_Q6_K:
        return n / EBB_QK_K * Q6_K_BYTES;
    default:
        return 0;
    }
}

void ebb_quant_rp8_pack(uint32_t type, const void *rows, uint64_t row_bytes, uint64_t n, void *dst)
{
    if (type == EBB_GGML_Q4_0 || type == EBB_GGML_Q4_1)
        pack_q4(rows, row_bytes, n, dst, type == EBB_GGML_Q4_1);
    else if (type == EBB_GGML_Q5_0)
        pack_q5_0(rows, row_bytes, n, dst);
    else if (type == EBB_GGML_Q8_0)
        pack_q8_0(rows, row_bytes, n, dst);
    else if (type == EBB_GGML_Q4_K)
        pack_q4_k(rows, row_bytes, n, dst);
    else if (type == EBB_GGML_Q6_K)
        pack_q6_k(rows, row_bytes, n, dst);
}

void ebb_quant_q8_act_sums(const struct ebb_q8_act *x, uint64_t nb, int32_t *out)
{
    for (uint64_t ib = 0; ib < nb; ib++) {
        int32_t s = 0;
        for (int j = 0; j < 32; j++)
            s += x[ib].q[j];
        out[ib] = s;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,f16c")))
#define VNNI __attribute__((target("avx2,avxvnni,f16c")))
#define V512 __attribute__((target("avx2,avx512vnni,avx512vl,f16c")))
#define INLINE inline __attribute__((always_inline))

/* Four activation bytes at p in every lane. */
#define BCAST(p)                                                                                   \
    __extension__({                                                                                \
        int32_t v_;                                                                                \
        memcpy(&v_, (p), 4);                                                                       \
        _mm256_set1_epi32(v_);                                                                     \
    })
#define LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define LOADF(p) _mm256_loadu_ps((const float *)(const void *)(p))
/* Eight fp16 scales as floats (F16C: exact). */
#define LOADH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))

/* acc + the four-byte dot products of unsigned w (<= 63 here, so maddubs cannot saturate) and
 * signed a, lane by lane. */
#define DOT_AVX2(acc, w, a)                                                                        \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)))
#define DOT_VNNI(acc, w, a) _mm256_dpbusd_avx_epi32(acc, w, a)
#define DOT_V512(acc, w, a) _mm256_dpbusd_epi32(acc, w, a)

/* Q4_0 and Q4_1 (MIN): per block the low nibbles against activations 4k.., the high ones
 * against 16 + 4k.., into one int32 sum per row and token, less 8 times the activations' block
 * sum for Q4_0 (its offset of 8); then Q8_LOOP's steps, sum += d * x.d * isum and, for Q4_1,
 * summ += m * x.s; the result sum + summ (Q4_0's summ staying +0). */
#define RP_Q4(name, ISA, DOT, MIN, BYTES)                                                          \
    ISA static INLINE void name##_n(const uint8_t *g, const void *act, uint64_t stride,            \
                                    const int32_t *asum, uint64_t n, const int nt, const int ng,   \
                                    float *out)                                                    \
    {                                                                                              \
        const uint64_t nb = n / 32, gb = nb * BYTES;                                               \
        const __m256i m4 = _mm256_set1_epi8(0x0f);                                                 \
        const struct ebb_q8_act *x[4];                                                             \
        __m256 sum[2][4], summ[2][4];                                                              \
        for (int t = 0; t < nt; t++) {                                                             \
            x[t] = (const struct ebb_q8_act *)(const void *)((const uint8_t *)act + stride * t);   \
            for (int i = 0; i < ng; i++)                                                           \
                sum[i][t] = summ[i][t] = _mm256_setzero_ps();                                      \
        }                                                                                          \
        for (uint64_t ib = 0; ib < nb; ib++, g += BYTES) {                                         \
            __m256i acc[2][4];                                                                     \
            for (int t = 0; t < nt; t++)                                                           \
                for (int i = 0; i < ng; i++)                                                       \
                    acc[i][t] = _mm256_setzero_si256();                                            \
            for (int k = 0; k < 4; k++) {                                                          \
                __m256i r0 = LOAD(g + 32 * k), r1 = ng > 1 ? LOAD(g + gb + 32 * k) : r0;           \
                __m256i l0 = _mm256_and_si256(r0, m4),                                             \
                        h0 = _mm256_and_si256(_mm256_srli_epi16(r0, 4), m4);                       \
                __m256i l1 = _mm256_and_si256(r1, m4),                                             \
                        h1 = _mm256_and_si256(_mm256_srli_epi16(r1, 4), m4);                       \
                for (int t = 0; t < nt; t++) {                                                     \
                    __m256i al = BCAST(x[t][ib].q + 4 * k), ah = BCAST(x[t][ib].q + 16 + 4 * k);   \
                    acc[0][t] = DOT(DOT(acc[0][t], l0, al), h0, ah);                               \
                    if (ng > 1)                                                                    \
                        acc[1][t] = DOT(DOT(acc[1][t], l1, al), h1, ah);                           \
                }                                                                                  \
            }                                                                                      \
            for (int i = 0; i < ng; i++) {                                                         \
                __m256 d = LOADH(g + gb * (uint64_t)i + 128);                                      \
                for (int t = 0; t < nt; t++) {                                                     \
                    __m256i is = MIN ? acc[i][t]                                                   \
                                     : _mm256_sub_epi32(acc[i][t],                                 \
                                                        _mm256_set1_epi32(8 * asum[t * nb + ib])); \
                    sum[i][t] = _mm256_add_ps(                                                     \
                        sum[i][t], _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[t][ib].d)),     \
                                                 _mm256_cvtepi32_ps(is)));                         \
                    if (MIN)                                                                       \
                        summ[i][t] = _mm256_add_ps(                                                \
                            summ[i][t], _mm256_mul_ps(LOADH(g + gb * (uint64_t)i + 144),           \
                                                      _mm256_set1_ps(x[t][ib].s)));                \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int i = 0; i < ng; i++)                                                               \
            for (int t = 0; t < nt; t++)                                                           \
                _mm256_storeu_ps(out + 8 * (i * nt + t), _mm256_add_ps(sum[i][t], summ[i][t]));    \
    }

/* Q5_0 and Q8_0, whose groups hold whole bytes (q[8][8][4], d float[8]): per block the
 * products summed, less OFF times the activations' block sum (Q5_0's offset of 16), into
 * the scalar isum; Q8_0's signed weights (SIGNED) as |w| against a with w's sign (sign_epi8, as
 * the one-token dot_ss: maddubs' pair sums stay within 16 bits). Then sum += d * x.d * isum, as
 * Q8_LOOP, and the result sum + 0 (Q8_LOOP's summ of a type without a min). */
#define RP_Q8B(name, ISA, DOT, SIGNED, OFF, BYTES)                                                 \
    ISA static INLINE void name##_n(const uint8_t *g, const void *act, uint64_t stride,            \
                                    const int32_t *asum, uint64_t n, const int nt, const int ng,   \
                                    float *out)                                                    \
    {                                                                                              \
        const uint64_t nb = n / 32, gb = nb * BYTES;                                               \
        const struct ebb_q8_act *x[4];                                                             \
        __m256 sum[2][4];                                                                          \
        for (int t = 0; t < nt; t++) {                                                             \
            x[t] = (const struct ebb_q8_act *)(const void *)((const uint8_t *)act + stride * t);   \
            for (int i = 0; i < ng; i++)                                                           \
                sum[i][t] = _mm256_setzero_ps();                                                   \
        }                                                                                          \
        for (uint64_t ib = 0; ib < nb; ib++, g += BYTES) {                                         \
            __m256i acc[2][4];                                                                     \
            for (int t = 0; t < nt; t++)                                                           \
                for (int i = 0; i < ng; i++)                                                       \
                    acc[i][t] = _mm256_setzero_si256();                                            \
            for (int k = 0; k < 8; k++) {                                                          \
                __m256i w0 = LOAD(g + 32 * k), w1 = ng > 1 ? LOAD(g + gb + 32 * k) : w0;           \
                __m256i u0 = SIGNED ? _mm256_sign_epi8(w0, w0) : w0;                               \
                __m256i u1 = SIGNED ? _mm256_sign_epi8(w1, w1) : w1;                               \
                for (int t = 0; t < nt; t++) {                                                     \
                    __m256i a = BCAST(x[t][ib].q + 4 * k);                                         \
                    acc[0][t] = DOT(acc[0][t], u0, SIGNED ? _mm256_sign_epi8(a, w0) : a);          \
                    if (ng > 1)                                                                    \
                        acc[1][t] = DOT(acc[1][t], u1, SIGNED ? _mm256_sign_epi8(a, w1) : a);      \
                }                                                                                  \
            }                                                                                      \
            for (int i = 0; i < ng; i++) {                                                         \
                __m256 d = LOADH(g + gb * (uint64_t)i + 256);                                      \
                for (int t = 0; t < nt; t++) {                                                     \
                    __m256i is = OFF ? _mm256_sub_epi32(                                           \
                                           acc[i][t], _mm256_set1_epi32(OFF * asum[t * nb + ib]))  \
                                     : acc[i][t];                                                  \
                    sum[i][t] = _mm256_add_ps(                                                     \
                        sum[i][t], _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[t][ib].d)),     \
                                                 _mm256_cvtepi32_ps(is)));                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int i = 0; i < ng; i++)                                                               \
            for (int t = 0; t < nt; t++)                                                           \
                _mm256_storeu_ps(out + 8 * (i * nt + t),                                           \
                                 _mm256_add_ps(sum[i][t], _mm256_setzero_ps()));                   \
    }

/* Q4_K: per group the products summed, times the group's scale (mullo), into one int32 sum
 * per token; the mins against the activations' 16-sums in madd; then k4_k5's float steps. */
#define RP_Q4_K(name, ISA, DOT)                                                                    \
    ISA static INLINE void name##_n(const uint8_t *g, const void *act, uint64_t stride,            \
                                    const int32_t *asum, uint64_t n, const int nt, const int ng,   \
                                    float *out)                                                    \
    {                                                                                              \
        (void)asum;                                                                                \
        const uint64_t gb = n / EBB_QK_K * Q4_K_BYTES;                                             \
        const __m256i m4 = _mm256_set1_epi8(0x0f);                                                 \
        const struct ebb_block_q8_k *x[4];                                                         \
        __m256 sum[2][4], summ[2][4];                                                              \
        for (int t = 0; t < nt; t++) {                                                             \
            x[t] =                                                                                 \
                (const struct ebb_block_q8_k *)(const void *)((const uint8_t *)act + stride * t);  \
            for (int i = 0; i < ng; i++)                                                           \
                sum[i][t] = summ[i][t] = _mm256_setzero_ps();                                      \
        }                                                                                          \
        for (uint64_t ib = 0; ib < n / EBB_QK_K; ib++, g += Q4_K_BYTES) {                          \
            __m256i acc[2][4], ms[4];                                                              \
            for (int t = 0; t < nt; t++)                                                           \
                for (int i = 0; i < ng; i++)                                                       \
                    acc[i][t] = _mm256_setzero_si256();                                            \
            for (int gr = 0; gr < 8; gr++) {                                                       \
                const uint8_t *q = g + 256 * (gr / 2);                                             \
                __m256i ga[2][4];                                                                  \
                for (int t = 0; t < nt; t++)                                                       \
                    for (int i = 0; i < ng; i++)                                                   \
                        ga[i][t] = _mm256_setzero_si256();                                         \
                for (int k = 0; k < 8; k++) {                                                      \
                    __m256i r0 = LOAD(q + 32 * k), r1 = ng > 1 ? LOAD(q + gb + 32 * k) : r0;       \
                    __m256i w0 = _mm256_and_si256(gr & 1 ? _mm256_srli_epi16(r0, 4) : r0, m4);     \
                    __m256i w1 = _mm256_and_si256(gr & 1 ? _mm256_srli_epi16(r1, 4) : r1, m4);     \
                    for (int t = 0; t < nt; t++) {                                                 \
                        __m256i a = BCAST(x[t][ib].qs + 32 * gr + 4 * k);                          \
                        ga[0][t] = DOT(ga[0][t], w0, a);                                           \
                        if (ng > 1)                                                                \
                            ga[1][t] = DOT(ga[1][t], w1, a);                                       \
                    }                                                                              \
                }                                                                                  \
                for (int i = 0; i < ng; i++) {                                                     \
                    __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(                             \
                        (const __m128i *)(const void *)(g + gb * (uint64_t)i + 1024 + 8 * gr)));   \
                    for (int t = 0; t < nt; t++)                                                   \
                        acc[i][t] = _mm256_add_epi32(acc[i][t], _mm256_mullo_epi32(ga[i][t], sc)); \
                }                                                                                  \
            }                                                                                      \
            for (int i = 0; i < ng; i++) {                                                         \
                const uint8_t *gi = g + gb * (uint64_t)i;                                          \
                for (int t = 0; t < nt; t++)                                                       \
                    ms[t] = _mm256_setzero_si256();                                                \
                for (int gr = 0; gr < 8; gr++) {                                                   \
                    __m256i mn = LOAD(gi + 1088 + 32 * gr);                                        \
                    for (int t = 0; t < nt; t++)                                                   \
                        ms[t] = _mm256_add_epi32(                                                  \
                            ms[t], _mm256_madd_epi16(mn, BCAST(x[t][ib].bsums + 2 * gr)));         \
                }                                                                                  \
                __m256 d = LOADF(gi + 1344), dmin = LOADF(gi + 1376);                              \
                for (int t = 0; t < nt; t++) {                                                     \
                    __m256 xd = _mm256_set1_ps(x[t][ib].d);                                        \
                    sum[i][t] =                                                                    \
                        _mm256_add_ps(sum[i][t], _mm256_mul_ps(_mm256_mul_ps(d, xd),               \
                                                               _mm256_cvtepi32_ps(acc[i][t])));    \
                    summ[i][t] =                                                                   \
                        _mm256_add_ps(summ[i][t], _mm256_mul_ps(_mm256_mul_ps(dmin, xd),           \
                                                                _mm256_cvtepi32_ps(ms[t])));       \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int i = 0; i < ng; i++)                                                               \
            for (int t = 0; t < nt; t++)                                                           \
                _mm256_storeu_ps(out + 8 * (i * nt + t), _mm256_sub_ps(sum[i][t], summ[i][t]));    \
    }

/* Q6_K: per group of 16 the products times the signed scale; the -32 offset as 32 times the
 * scales against the 16-sums (madd); q6_k's float steps (sum - summ, summ staying +0). */
#define RP_Q6_K(name, ISA, DOT)                                                                    \
    ISA static INLINE void name##_n(const uint8_t *g, const void *act, uint64_t stride,            \
                                    const int32_t *asum, uint64_t n, const int nt, const int ng,   \
                                    float *out)                                                    \
    {                                                                                              \
        (void)asum;                                                                                \
        const uint64_t gb = n / EBB_QK_K * Q6_K_BYTES;                                             \
        const struct ebb_block_q8_k *x[4];                                                         \
        __m256 sum[2][4];                                                                          \
        for (int t = 0; t < nt; t++) {                                                             \
            x[t] =                                                                                 \
                (const struct ebb_block_q8_k *)(const void *)((const uint8_t *)act + stride * t);  \
            for (int i = 0; i < ng; i++)                                                           \
                sum[i][t] = _mm256_setzero_ps();                                                   \
        }                                                                                          \
        for (uint64_t ib = 0; ib < n / EBB_QK_K; ib++, g += Q6_K_BYTES) {                          \
            __m256i acc[2][4], off[4];                                                             \
            for (int t = 0; t < nt; t++)                                                           \
                for (int i = 0; i < ng; i++)                                                       \
                    acc[i][t] = _mm256_setzero_si256();                                            \
            for (int gr = 0; gr < 16; gr++) {                                                      \
                const uint8_t *q = g + 128 * gr;                                                   \
                __m256i ga[2][4];                                                                  \
                for (int t = 0; t < nt; t++)                                                       \
                    for (int i = 0; i < ng; i++)                                                   \
                        ga[i][t] = _mm256_setzero_si256();                                         \
                for (int k = 0; k < 4; k++) {                                                      \
                    __m256i w0 = LOAD(q + 32 * k), w1 = ng > 1 ? LOAD(q + gb + 32 * k) : w0;       \
                    for (int t = 0; t < nt; t++) {                                                 \
                        __m256i a = BCAST(x[t][ib].qs + 16 * gr + 4 * k);                          \
                        ga[0][t] = DOT(ga[0][t], w0, a);                                           \
                        if (ng > 1)                                                                \
                            ga[1][t] = DOT(ga[1][t], w1, a);                                       \
                    }                                                                              \
                }                                                                                  \
                for (int i = 0; i < ng; i++) {                                                     \
                    __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(                             \
                        (const __m128i *)(const void *)(g + gb * (uint64_t)i + 2048 + 8 * gr)));   \
                    for (int t = 0; t < nt; t++)                                                   \
                        acc[i][t] = _mm256_add_epi32(acc[i][t], _mm256_mullo_epi32(ga[i][t], sc)); \
                }                                                                                  \
            }                                                                                      \
            for (int i = 0; i < ng; i++) {                                                         \
                const uint8_t *gi = g + gb * (uint64_t)i;                                          \
                for (int t = 0; t < nt; t++)                                                       \
                    off[t] = _mm256_setzero_si256();                                               \
                for (int j = 0; j < 8; j++) {                                                      \
                    __m256i sp = LOAD(gi + 2176 + 32 * j);                                         \
                    for (int t = 0; t < nt; t++)                                                   \
                        off[t] = _mm256_add_epi32(                                                 \
                            off[t], _mm256_madd_epi16(sp, BCAST(x[t][ib].bsums + 2 * j)));         \
                }                                                                                  \
                __m256 d = LOADF(gi + 2432);                                                       \
                for (int t = 0; t < nt; t++) {                                                     \
                    __m256i is = _mm256_sub_epi32(acc[i][t], _mm256_slli_epi32(off[t], 5));        \
                    sum[i][t] = _mm256_add_ps(                                                     \
                        sum[i][t], _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[t][ib].d)),     \
                                                 _mm256_cvtepi32_ps(is)));                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int i = 0; i < ng; i++) /* q6_k's sum - summ, summ +0 */                              \
            for (int t = 0; t < nt; t++)                                                           \
                _mm256_storeu_ps(out + 8 * (i * nt + t),                                           \
                                 _mm256_sub_ps(sum[i][t], _mm256_setzero_ps()));                   \
    }

/* The entry point of one type and ISA: two groups at a time where the type's kernel takes two
 * (PAIR), four tokens at a time, the rest one by one. */
#define RP_ENTRY(name, ISA, PAIR, GROUP_BYTES)                                                     \
    ISA static void name(const void *grp, const void *act, uint64_t stride, const int32_t *asum,   \
                         uint64_t n, int ng, int nt, float *out)                                   \
    {                                                                                              \
        const uint64_t as = n / 32, gb = GROUP_BYTES;                                              \
        for (int i = 0; i < ng;) {                                                                 \
            const uint8_t *g = (const uint8_t *)grp + gb * (uint64_t)i;                            \
            const bool two = PAIR && i + 1 < ng;                                                   \
            int t = 0;                                                                             \
            for (; t + 4 <= nt; t += 4) {                                                          \
                const void *a = (const uint8_t *)act + stride * t;                                 \
                const int32_t *s = asum ? asum + as * t : NULL;                                    \
                if (two) {                                                                         \
                    float o[64];                                                                   \
                    name##_n(g, a, stride, s, n, 4, 2, o);                                         \
                    memcpy(out + 8 * (i * nt + t), o, 32 * sizeof(float));                         \
                    memcpy(out + 8 * ((i + 1) * nt + t), o + 32, 32 * sizeof(float));              \
                } else {                                                                           \
                    name##_n(g, a, stride, s, n, 4, 1, out + 8 * (i * nt + t));                    \
                }                                                                                  \
            }                                                                                      \
            for (int j = 0; j < (two ? 2 : 1); j++)                                                \
                for (int tt = t; tt < nt; tt++)                                                    \
                    name##_n(g + gb * (uint64_t)j, (const uint8_t *)act + stride * tt, stride,     \
                             asum ? asum + as * tt : NULL, n, 1, 1,                                \
                             out + 8 * ((i + j) * nt + tt));                                       \
            i += two ? 2 : 1;                                                                      \
        }                                                                                          \
    }

#define RP_BOTH(type, MACRO, PAIR, GROUP_BYTES)                                                    \
    MACRO(avx2_##type, AVX2, DOT_AVX2)                                                             \
    MACRO(vnni_##type, VNNI, DOT_VNNI)                                                             \
    MACRO(v512_##type, V512, DOT_V512)                                                             \
    RP_ENTRY(avx2_##type, AVX2, PAIR, GROUP_BYTES)                                                 \
    RP_ENTRY(vnni_##type, VNNI, PAIR, GROUP_BYTES)                                                 \
    RP_ENTRY(v512_##type, V512, PAIR, GROUP_BYTES)
#define RP_Q4_0(name, ISA, DOT) RP_Q4(name, ISA, DOT, false, Q4_0_BYTES)
#define RP_Q4_1(name, ISA, DOT) RP_Q4(name, ISA, DOT, true, Q4_1_BYTES)
#define RP_Q5_0(name, ISA, DOT) RP_Q8B(name, ISA, DOT, false, 16, Q5_0_BYTES)
#define RP_Q8_0(name, ISA, DOT) RP_Q8B(name, ISA, DOT, true, 0, Q8_0_BYTES)
RP_BOTH(q4_0, RP_Q4_0, true, n / 32 * Q4_0_BYTES)
RP_BOTH(q4_1, RP_Q4_1, true, n / 32 * Q4_1_BYTES)
RP_BOTH(q5_0, RP_Q5_0, true, n / 32 * Q5_0_BYTES)
/* Q8_0: AVX2 on the signed bytes; the dpbusd variants on q + 128 (pack_q8_0) */
#define RP_Q8_0U(name, ISA, DOT) RP_Q8B(name, ISA, DOT, false, 128, Q8_0_BYTES)
RP_Q8_0(avx2_q8_0, AVX2, DOT_AVX2)
RP_Q8_0U(vnni_q8_0, VNNI, DOT_VNNI)
RP_Q8_0U(v512_q8_0, V512, DOT_V512)
RP_ENTRY(avx2_q8_0, AVX2, true, n / 32 * Q8_0_BYTES)
RP_ENTRY(vnni_q8_0, VNNI, true, n / 32 * Q8_0_BYTES)
RP_ENTRY(v512_q8_0, V512, true, n / 32 * Q8_0_BYTES)
RP_BOTH(q4_k, RP_Q4_K, true, n / EBB_QK_K * Q4_K_BYTES)
RP_BOTH(q6_k, RP_Q6_K, true, n / EBB_QK_K * Q6_K_BYTES)

ebb_quant_rp8_fn ebb_quant_get_rp8(uint32_t type)
{
    static const struct {
        uint32_t type;
        ebb_quant_rp8_fn avx2, vnni, v512;
    } tab[] = {
#define T(T, t) {EBB_GGML_##T, avx2_##t, vnni_##t, v512_##t}
        T(Q4_0, q4_0), T(Q4_1, q4_1), T(Q5_0, q5_0), T(Q8_0, q8_0), T(Q4_K, q4_k), T(Q6_K, q6_k),
#undef T
    };
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c"))
        return NULL;
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
        if (tab[i].type == type) {
            int v = ebb_quant_simd_vnni();
            return v == 1 ? tab[i].vnni : v == 2 ? tab[i].v512 : tab[i].avx2;
        }
    return NULL;
}
#else
ebb_quant_rp8_fn ebb_quant_get_rp8(uint32_t type)
{
    (void)type;
    return NULL;
}
#endif
