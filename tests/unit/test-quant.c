/* Quantization formats: fp16/bf16 conversion, hand-built blocks of every type (the packing is
 * written here independently from the layout descriptions in quant.h), quantize/dequantize
 * round trips, dot products against dequantize-then-multiply, and real and random rows against
 * the Python gguf package's dequantizer (tests/data/quant/expected.bin, made by
 * scripts/ref/quant-expect.py). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "quant/quant.h"

#ifndef EBB_TEST_DATA
#define EBB_TEST_DATA "tests/data"
#endif

/* A deterministic PRNG for test data (xorshift32). */
static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}
static float rndf(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rnd() >> 8) / (float)(1u << 24);
}

static void test_fp16(void **state)
{
    (void)state;
    assert_true(ebb_fp16_to_fp32(0x3c00) == 1.0f);
    assert_true(ebb_fp16_to_fp32(0xc000) == -2.0f);
    assert_true(ebb_fp16_to_fp32(0x7bff) == 65504.0f);
    assert_true(ebb_fp16_to_fp32(0x0001) == 0x1p-24f);
    assert_true(ebb_fp16_to_fp32(0x0400) == 0x1p-14f);
    assert_true(isinf(ebb_fp16_to_fp32(0x7c00)) && ebb_fp16_to_fp32(0x7c00) > 0);
    assert_true(isnan(ebb_fp16_to_fp32(0x7e00)));
    assert_true(signbit(ebb_fp16_to_fp32(0x8000)));
    assert_int_equal(ebb_fp32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(ebb_fp32_to_fp16(65519.0f), 0x7bff); /* rounds down to max */
    assert_int_equal(ebb_fp32_to_fp16(65520.0f), 0x7c00); /* rounds up to Inf */
    assert_int_equal(ebb_fp32_to_fp16(0x1p-25f), 0x0000); /* tie to even: zero */
    assert_int_equal(ebb_fp32_to_fp16(0x1.8p-25f), 0x0001);
    assert_int_equal(ebb_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    assert_int_equal(ebb_fp32_to_fp16(1.0f + 0x1.8p-11f), 0x3c01);
    assert_int_equal(ebb_fp32_to_fp16(1.0f + 0x1.8p-10f), 0x3c02); /* tie to even, up */
    assert_true((ebb_fp32_to_fp16(NAN) & 0x7c00) == 0x7c00 && (ebb_fp32_to_fp16(NAN) & 0x3ff));
    /* Every finite half survives a round trip through float. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00)
            continue;
        assert_int_equal(ebb_fp32_to_fp16(ebb_fp16_to_fp32((uint16_t)h)), h);
    }
    assert_true(ebb_bf16_to_fp32(0x3f80) == 1.0f);
    assert_true(ebb_bf16_to_fp32(0xc040) == -3.0f);
    assert_int_equal(ebb_fp32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(ebb_fp32_to_bf16(1.0f + 0x1p-8f), 0x3f80);   /* tie to even */
    assert_int_equal(ebb_fp32_to_bf16(1.0f + 0x1.8p-7f), 0x3f82); /* tie to even, up */
}

static void expect_row(uint32_t type, const void *blk, const float *want, int n, float tol)
{
    float got[256];
    assert_int_equal(ebb_quant_dequantize_row(type, blk, got, (uint64_t)n), EBB_OK);
    for (int i = 0; i < n; i++) {
        if (fabsf(got[i] - want[i]) > tol) {
            fail_msg("type %u element %d: got %g want %g", type, i, (double)got[i],
                     (double)want[i]);
        }
    }
}

static void test_simple_blocks(void **state)
{
    (void)state;
    float want[32];
    int q[32];
    for (int i = 0; i < 32; i++)
        q[i] = (i * 7 + 3) % 32;

    struct ebb_block_q4_0 b40 = {.d = ebb_fp32_to_fp16(0.5f)};
    for (int j = 0; j < 16; j++)
        b40.qs[j] = (uint8_t)((q[j] % 16) | (q[j + 16] % 16) << 4);
    for (int i = 0; i < 32; i++)
        want[i] = 0.5f * (float)(q[i] % 16 - 8);
    expect_row(EBB_GGML_Q4_0, &b40, want, 32, 0);

    struct ebb_block_q4_1 b41 = {.d = ebb_fp32_to_fp16(0.25f), .m = ebb_fp32_to_fp16(-1.5f)};
    memcpy(b41.qs, b40.qs, 16);
    for (int i = 0; i < 32; i++)
        want[i] = 0.25f * (float)(q[i] % 16) - 1.5f;
    expect_row(EBB_GGML_Q4_1, &b41, want, 32, 0);

    struct ebb_block_q5_0 b50 = {.d = ebb_fp32_to_fp16(0.125f)};
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        b50.qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        qh |= (uint32_t)(q[j] >> 4) << j | (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++)
        b50.qh[k] = (uint8_t)(qh >> (8 * k));
    for (int i = 0; i < 32; i++)
        want[i] = 0.125f * (float)(q[i] - 16);
    expect_row(EBB_GGML_Q5_0, &b50, want, 32, 0);

    struct ebb_block_q5_1 b51 = {.d = ebb_fp32_to_fp16(2.0f), .m = ebb_fp32_to_fp16(3.0f)};
    memcpy(b51.qh, b50.qh, 4);
    memcpy(b51.qs, b50.qs, 16);
    for (int i = 0; i < 32; i++)
        want[i] = 2.0f * (float)q[i] + 3.0f;
    expect_row(EBB_GGML_Q5_1, &b51, want, 32, 0);

    struct ebb_block_q8_0 b80 = {.d = ebb_fp32_to_fp16(0.5f)};
    for (int i = 0; i < 32; i++) {
        b80.qs[i] = (int8_t)(i * 8 - 128);
        want[i] = 0.5f * (float)(i * 8 - 128);
    }
    expect_row(EBB_GGML_Q8_0, &b80, want, 32, 0);
}

/* Packs Q4_K/Q5_K six-bit scales and mins as quant.h describes. */
static void pack_k4_scales(const int *sc, const int *mn, uint8_t *p)
{
    memset(p, 0, 12);
    for (int j = 0; j < 4; j++) {
        p[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        p[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
        p[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

static void test_k_blocks(void **state)
{
    (void)state;
    float want[256];
    int q[256], sc[16], mn[16];
    for (int i = 0; i < 256; i++)
        q[i] = (int)(rnd() % 64);
    for (int g = 0; g < 16; g++) {
        sc[g] = (int)(rnd() % 64);
        mn[g] = (int)(rnd() % 64);
    }
    sc[5] = 63; /* exercise the top bits of the packed scales */
    mn[6] = 48;

    /* Q2_K: 4-bit scale and min per group of 16, 2-bit q. */
    struct ebb_block_q2_k b2 = {.d = ebb_fp32_to_fp16(0.5f), .dmin = ebb_fp32_to_fp16(0.25f)};
    for (int i = 0; i < 256; i++) {
        int v = q[i] & 3;
        b2.qs[32 * (i / 128) + i % 32] |= (uint8_t)(v << (2 * ((i % 128) / 32)));
        want[i] = 0.5f * (float)(sc[i / 16] & 15) * (float)v - 0.25f * (float)(mn[i / 16] & 15);
    }
    for (int g = 0; g < 16; g++)
        b2.scales[g] = (uint8_t)((sc[g] & 15) | (mn[g] & 15) << 4);
    expect_row(EBB_GGML_Q2_K, &b2, want, 256, 0);

    /* Q3_K: six-bit signed scales, 2-bit q plus a high bit (clear = subtract 4). */
    struct ebb_block_q3_k b3 = {.d = ebb_fp32_to_fp16(0.125f)};
    for (int g = 0; g < 16; g++) {
        int lo = sc[g] & 15, hi = sc[g] >> 4;
        if (g < 8)
            b3.scales[g] |= (uint8_t)lo;
        else
            b3.scales[g - 8] |= (uint8_t)(lo << 4);
        b3.scales[8 + g % 4] |= (uint8_t)(hi << (2 * (g / 4)));
    }
    for (int i = 0; i < 256; i++) {
        int v = q[i] & 3, h = (q[i] >> 2) & 1;
        b3.qs[32 * (i / 128) + i % 32] |= (uint8_t)(v << (2 * ((i % 128) / 32)));
        b3.hmask[i % 32] |= (uint8_t)(h << (i / 32));
        want[i] = 0.125f * (float)(sc[i / 16] - 32) * (float)(v - (h ? 0 : 4));
    }
    expect_row(EBB_GGML_Q3_K, &b3, want, 256, 0);

    /* Q4_K: 8 groups of 32. */
    struct ebb_block_q4_k b4 = {.d = ebb_fp32_to_fp16(0.5f), .dmin = ebb_fp32_to_fp16(0.125f)};
    pack_k4_scales(sc, mn, b4.scales);
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        ebb_quant_k4_scale_min(b4.scales, j, &s, &m);
        assert_int_equal(s, sc[j]);
        assert_int_equal(m, mn[j]);
    }
    for (int i = 0; i < 256; i++) {
        int c = i / 64, l = i % 32, hi = (i % 64) / 32, v = q[i] & 15;
        b4.qs[32 * c + l] |= (uint8_t)(v << (4 * hi));
        want[i] = 0.5f * (float)sc[i / 32] * (float)v - 0.125f * (float)mn[i / 32];
    }
    expect_row(EBB_GGML_Q4_K, &b4, want, 256, 0);

    /* Q5_K: Q4_K plus a fifth bit in qh. */
    struct ebb_block_q5_k b5 = {.d = ebb_fp32_to_fp16(0.25f), .dmin = ebb_fp32_to_fp16(0.5f)};
    pack_k4_scales(sc, mn, b5.scales);
    for (int i = 0; i < 256; i++) {
        int c = i / 64, l = i % 32, hi = (i % 64) / 32, v = q[i] & 31;
        b5.qs[32 * c + l] |= (uint8_t)((v & 15) << (4 * hi));
        b5.qh[l] |= (uint8_t)((v >> 4) << (2 * c + hi));
        want[i] = 0.25f * (float)sc[i / 32] * (float)v - 0.5f * (float)mn[i / 32];
    }
    expect_row(EBB_GGML_Q5_K, &b5, want, 256, 0);

    /* Q6_K: signed 8-bit scales per 16, 6-bit q. */
    struct ebb_block_q6_k b6 = {.d = ebb_fp32_to_fp16(0.0625f)};
    for (int g = 0; g < 16; g++)
        b6.scales[g] = (int8_t)(sc[g] * 4 - 128);
    for (int i = 0; i < 256; i++) {
        int half = i / 128, k = (i % 128) / 32, l = i % 32, v = q[i];
        b6.ql[64 * half + l + 32 * (k & 1)] |= (uint8_t)((v & 15) << (k < 2 ? 0 : 4));
        b6.qh[32 * half + l] |= (uint8_t)((v >> 4) << (2 * k));
        want[i] = 0.0625f * (float)b6.scales[i / 16] * (float)(v - 32);
    }
    expect_row(EBB_GGML_Q6_K, &b6, want, 256, 0);

    /* Q8_K: fp32 scale, int8 q. */
    struct ebb_block_q8_k b8 = {.d = 0.03125f};
    for (int i = 0; i < 256; i++) {
        b8.qs[i] = (int8_t)(q[i] * 4 - 128);
        want[i] = 0.03125f * (float)b8.qs[i];
    }
    expect_row(EBB_GGML_Q8_K, &b8, want, 256, 0);
}

static void test_round_trip(void **state)
{
    (void)state;
    enum { N = 256 };
    float x[N], y[N];
    uint8_t buf[N * 4];
    const uint32_t types[] = {EBB_GGML_Q4_0, EBB_GGML_Q4_1, EBB_GGML_Q8_0,
                              EBB_GGML_F16,  EBB_GGML_BF16, EBB_GGML_F32};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        for (int trial = 0; trial < 20; trial++) {
            float scale = trial == 0 ? 0.0f : rndf(0.001f, 10.0f);
            for (int i = 0; i < N; i++)
                x[i] = scale * rndf(-1.0f, 1.0f) + (trial % 3 == 1 ? scale : 0.0f);
            assert_int_equal(ebb_quant_quantize_row(types[t], x, buf, N), EBB_OK);
            assert_int_equal(ebb_quant_dequantize_row(types[t], buf, y, N), EBB_OK);
            for (int b = 0; b < N / 32; b++) {
                float lo = x[32 * b], hi = x[32 * b], amax = 0;
                for (int j = 0; j < 32; j++) {
                    lo = fminf(lo, x[32 * b + j]);
                    hi = fmaxf(hi, x[32 * b + j]);
                    amax = fmaxf(amax, fabsf(x[32 * b + j]));
                }
                /* Half a quantization step, plus slack for the fp16 rounding of the scale
                 * (relative 2^-11 of the largest value) and of Q4_1's min. */
                float bound;
                switch (types[t]) {
                case EBB_GGML_Q4_0:
                    /* The extreme value maps to -8, so one of the opposite sign can sit a
                     * whole step beyond +7. */
                    bound = amax / 8.0f + amax * 2e-3f;
                    break;
                case EBB_GGML_Q4_1:
                    bound = (hi - lo) / 15.0f * 0.5f + amax * 2e-3f;
                    break;
                case EBB_GGML_Q8_0:
                    bound = amax / 127.0f * 0.5f + amax * 1e-3f;
                    break;
                case EBB_GGML_F16:
                    bound = amax * 0x1p-11f;
                    break;
                case EBB_GGML_BF16:
                    bound = amax * 0x1p-8f;
                    break;
                default:
                    bound = 0;
                }
                for (int j = 0; j < 32; j++) {
                    float e = fabsf(x[32 * b + j] - y[32 * b + j]);
                    if (e > bound)
                        fail_msg("type %u trial %d elem %d err %g > %g", types[t], trial,
                                 32 * b + j, (double)e, (double)bound);
                }
            }
        }
    }
    assert_int_equal(ebb_quant_quantize_row(EBB_GGML_Q4_K, x, buf, N), EBB_EUNSUPPORTED);
    assert_int_equal(ebb_quant_quantize_row(EBB_GGML_Q4_0, x, buf, 33), EBB_EINVAL);
    assert_int_equal(ebb_quant_dequantize_row(EBB_GGML_Q4_K, buf, y, 128), EBB_EINVAL);
    assert_int_equal(ebb_quant_dequantize_row(99, buf, y, 32), EBB_EUNSUPPORTED);
    assert_null(ebb_quant_get_dot(99));
}

struct rec {
    uint32_t type, n, nbytes;
    char name[128];
    uint8_t *raw;
    float *want;
};

static uint32_t rd32(FILE *f)
{
    uint8_t b[4];
    assert_int_equal(fread(b, 1, 4, f), 4);
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Compares against gguf.quants.dequantize and checks the dot product on the same rows. */
static void test_against_gguf_py(void **state)
{
    (void)state;
    const char *path = EBB_TEST_DATA "/quant/expected.bin";
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    char magic[4];
    assert_int_equal(fread(magic, 1, 4, f), 4);
    assert_memory_equal(magic, "EBQ1", 4);
    uint32_t count = rd32(f);
    assert_true(count >= 20);
    uint32_t seen[32] = {0};
    for (uint32_t r = 0; r < count; r++) {
        struct rec c;
        c.type = rd32(f);
        c.n = rd32(f);
        c.nbytes = rd32(f);
        uint32_t nl = rd32(f);
        assert_true(nl < sizeof(c.name) && c.n <= 65536 && c.nbytes <= 4 * 65536);
        assert_int_equal(fread(c.name, 1, nl, f), nl);
        c.name[nl] = 0;
        c.raw = malloc(c.nbytes);
        c.want = malloc(4 * (size_t)c.n);
        float *got = malloc(4 * (size_t)c.n);
        float *x = malloc(4 * (size_t)c.n);
        assert_non_null(c.raw);
        assert_non_null(c.want);
        assert_non_null(got);
        assert_non_null(x);
        assert_int_equal(fread(c.raw, 1, c.nbytes, f), c.nbytes);
        assert_int_equal(fread(c.want, 4, c.n, f), c.n);

        assert_int_equal(ebb_quant_dequantize_row(c.type, c.raw, got, c.n), EBB_OK);
        float amax = 0;
        for (uint32_t i = 0; i < c.n; i++)
            amax = fmaxf(amax, fabsf(c.want[i]));
        /* numpy may multiply the scale factors in another order: allow a few ulps of the row's
         * largest value. */
        float tol = amax * 1e-6f;
        for (uint32_t i = 0; i < c.n; i++) {
            if (!(fabsf(got[i] - c.want[i]) <= tol))
                fail_msg("%s elem %u: got %.9g want %.9g", c.name, i, (double)got[i],
                         (double)c.want[i]);
        }
        /* Dot product against a random vector, versus the float dot of the expected row. */
        double ref = 0, mag = 0;
        for (uint32_t i = 0; i < c.n; i++) {
            x[i] = rndf(-1, 1);
            ref += (double)c.want[i] * x[i];
            mag += fabs((double)c.want[i] * x[i]);
        }
        float dot;
        assert_int_equal(ebb_quant_dot_row(c.type, c.raw, x, c.n, &dot), EBB_OK);
        if (fabs(dot - ref) > 1e-5 * mag + 1e-30)
            fail_msg("%s dot: got %.9g want %.9g (mag %g)", c.name, (double)dot, ref, mag);
        seen[c.type & 31]++;
        free(c.raw);
        free(c.want);
        free(got);
        free(x);
    }
    fclose(f);
    const uint32_t need[] = {EBB_GGML_Q4_0, EBB_GGML_Q4_1, EBB_GGML_Q5_0, EBB_GGML_Q5_1,
                             EBB_GGML_Q8_0, EBB_GGML_Q2_K, EBB_GGML_Q3_K, EBB_GGML_Q4_K,
                             EBB_GGML_Q5_K, EBB_GGML_Q6_K, EBB_GGML_F16};
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
        assert_true(seen[need[i]] > 0);
}

/* llama.cpp-style Q8 activations: the block scale and sum, and dot products that stay within
 * the activation rounding of the float result. */
static void test_q8_act(void **state)
{
    (void)state;
    enum { N = 128 };
    float x[N], w[N], y[N];
    uint8_t buf[N * 2];
    struct ebb_q8_act a[N / 32];
    for (int i = 0; i < N; i++) {
        x[i] = rndf(-3, 3);
        w[i] = rndf(-1, 1);
    }
    x[5] = 0;
    ebb_quant_q8_act_row(x, N, a);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        int sum = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[32 * b + j]));
        for (int j = 0; j < 32; j++) {
            sum += a[b].q[j];
            assert_true(fabsf(a[b].q[j] * amax / 127.0f - x[32 * b + j]) <= amax / 254.0f * 1.01f);
        }
        assert_true(fabsf(a[b].d - amax / 127.0f) <= amax / 127.0f * 0x1p-10f);
        assert_true(fabsf(a[b].s - a[b].d * (float)sum) <=
                    fabsf(a[b].d * (float)sum) * 0x1p-10f + 1e-6f);
    }
    const uint32_t types[] = {EBB_GGML_Q4_0, EBB_GGML_Q4_1, EBB_GGML_Q8_0};
    for (size_t t = 0; t < 3; t++) {
        assert_true(ebb_quant_q8_act_supported(types[t]));
        assert_int_equal(ebb_quant_quantize_row(types[t], w, buf, N), EBB_OK);
        assert_int_equal(ebb_quant_dequantize_row(types[t], buf, y, N), EBB_OK);
        double ref = 0, mag = 0;
        for (int i = 0; i < N; i++) {
            ref += (double)y[i] * x[i];
            mag += fabs((double)y[i]) * 3.0 / 254.0; /* worst-case activation rounding */
        }
        float got = ebb_quant_dot_q8_act(types[t], buf, a, N);
        if (fabs(got - ref) > mag)
            fail_msg("type %u: q8 dot %g, float dot %g, bound %g", types[t], (double)got, ref, mag);
    }
    assert_false(ebb_quant_q8_act_supported(EBB_GGML_Q4_K));
    /* The vector quantizers give the scalar ones' bytes: random rows, rows of ties (x.5 steps),
     * a zero block, the largest magnitude twice with both signs. */
    enum { NF = 1024 };
    static float xf[NF];
    static struct ebb_q8_act qa[NF / 32], qb[NF / 32];
    static struct ebb_block_q8_k ka[NF / 256], kb[NF / 256];
    for (int rep = 0; rep < 40; rep++) {
        for (int i = 0; i < NF; i++)
            xf[i] = rep % 4 == 1 ? (float)((int)(rnd() % 255) - 127) / 2.0f
                                 : rndf(-3.0f, 3.0f) * (rep % 3 ? 1.0f : 1e4f);
        if (rep % 5 == 0)
            memset(xf + 256, 0, 256 * sizeof(float));
        xf[9] = 7.0f;
        xf[13] = -7.0f;
        ebb_quant_q8_act_row(xf, NF, qa);
        ebb_quant_q8_act_row_fast(xf, NF, qb);
        assert_memory_equal(qa, qb, sizeof(qa));
        ebb_quant_q8k_act_row(xf, NF, ka);
        ebb_quant_q8k_act_row_fast(xf, NF, kb);
        assert_memory_equal(ka, kb, sizeof(ka));
    }
}

/* A row of nb random blocks of type with sane fp16 scales (random bytes elsewhere). */
static void random_row(uint32_t type, uint8_t *row, uint64_t bytes, int nb)
{
    for (uint64_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)rnd();
    for (int b = 0; b < nb; b++) {
        uint16_t d = ebb_fp32_to_fp16(rndf(-0.02f, 0.02f)), m = ebb_fp32_to_fp16(rndf(-0.1f, 0.1f));
        switch (type) {
        case EBB_GGML_Q4_0:
            ((struct ebb_block_q4_0 *)(void *)row)[b].d = d;
            break;
        case EBB_GGML_Q4_1:
            ((struct ebb_block_q4_1 *)(void *)row)[b].d = d;
            ((struct ebb_block_q4_1 *)(void *)row)[b].m = m;
            break;
        case EBB_GGML_Q5_0:
            ((struct ebb_block_q5_0 *)(void *)row)[b].d = d;
            break;
        case EBB_GGML_Q5_1:
            ((struct ebb_block_q5_1 *)(void *)row)[b].d = d;
            ((struct ebb_block_q5_1 *)(void *)row)[b].m = m;
            break;
        case EBB_GGML_Q8_0:
            ((struct ebb_block_q8_0 *)(void *)row)[b].d = d;
            break;
        case EBB_GGML_Q4_K:
            ((struct ebb_block_q4_k *)(void *)row)[b].d = d;
            ((struct ebb_block_q4_k *)(void *)row)[b].dmin = m;
            break;
        case EBB_GGML_Q5_K:
            ((struct ebb_block_q5_k *)(void *)row)[b].d = d;
            ((struct ebb_block_q5_k *)(void *)row)[b].dmin = m;
            break;
        default: /* Q6_K */
            ((struct ebb_block_q6_k *)(void *)row)[b].d = d;
            break;
        }
    }
}

/* Every 8-bit activation product: the SIMD version (where this CPU has one) gives the scalar
 * one's bits, and the scalar one is within the activation rounding of the float dot of the
 * dequantized row. */
static void test_dot_act(void **state)
{
    (void)state;
    enum { N = 1024 };
    static float x[N], y[N];
    static uint8_t row[N * 2];
    static struct ebb_q8_act a[N / 32];
    static struct ebb_block_q8_k k[N / 256];
    const uint32_t types[] = {EBB_GGML_Q4_0, EBB_GGML_Q4_1, EBB_GGML_Q5_0, EBB_GGML_Q5_1,
                              EBB_GGML_Q8_0, EBB_GGML_Q4_K, EBB_GGML_Q5_K, EBB_GGML_Q6_K};
    printf("SIMD: %s\n", ebb_quant_simd_name());
    for (int rep = 0; rep < 50; rep++) {
        float amp = rep % 5 == 0 ? 1000.0f : 3.0f;
        for (int i = 0; i < N; i++)
            x[i] = rndf(-amp, amp);
        if (rep == 1)
            memset(x, 0, sizeof(x)); /* all-zero activations: d = 0 */
        ebb_quant_q8_act_row(x, N, a);
        ebb_quant_q8k_act_row(x, N, k);
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            bool kq = ebb_quant_q8k_act_supported(types[t]);
            assert_true(kq != ebb_quant_q8_act_supported(types[t]));
            const size_t blk[] = {sizeof(struct ebb_block_q4_0), sizeof(struct ebb_block_q4_1),
                                  sizeof(struct ebb_block_q5_0), sizeof(struct ebb_block_q5_1),
                                  sizeof(struct ebb_block_q8_0), sizeof(struct ebb_block_q4_k),
                                  sizeof(struct ebb_block_q5_k), sizeof(struct ebb_block_q6_k)};
            uint64_t bytes = blk[t] * (kq ? N / 256 : N / 32);
            random_row(types[t], row, bytes, kq ? N / 256 : N / 32);
            ebb_quant_dot_act_fn c = ebb_quant_get_dot_act(types[t], false);
            ebb_quant_dot_act_fn v = ebb_quant_get_dot_act(types[t], true);
            assert_non_null(c);
            assert_non_null(v);
            const void *act = kq ? (const void *)k : (const void *)a;
            float got = c(row, act, N), simd = v(row, act, N);
            if (memcmp(&got, &simd, sizeof(float)))
                fail_msg("type %u: SIMD %a, scalar %a", types[t], (double)simd, (double)got);
            float direct = kq ? ebb_quant_dot_q8k_act(types[t], row, k, N)
                              : ebb_quant_dot_q8_act(types[t], row, a, N);
            assert_true(memcmp(&got, &direct, sizeof(float)) == 0);
            assert_int_equal(ebb_quant_dequantize_row(types[t], row, y, N), EBB_OK);
            double ref = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                ref += (double)y[i] * x[i];
                mag += fabs((double)y[i]) * amp / 254.0 * 1.01 + fabs((double)y[i] * x[i]) * 2e-3;
            }
            if (fabs(got - ref) > mag + 1e-3)
                fail_msg("type %u: 8-bit dot %g, float dot %g, bound %g", types[t], (double)got,
                         ref, mag);
        }
    }
    /* Activations past 2047 in magnitude: the fp16 block sum s overflows to infinity, which the
     * types without a min must not read (0 * s would be a NaN). */
    for (int i = 0; i < N; i++)
        x[i] = rndf(2500.0f, 5000.0f) * (i & 64 ? -1.0f : 1.0f); /* blocks of one sign */
    ebb_quant_q8_act_row(x, N, a);
    assert_true(isinf(a[0].s));
    const uint32_t sym[] = {EBB_GGML_Q4_0, EBB_GGML_Q5_0, EBB_GGML_Q8_0};
    const size_t sym_blk[] = {sizeof(struct ebb_block_q4_0), sizeof(struct ebb_block_q5_0),
                              sizeof(struct ebb_block_q8_0)};
    for (int t = 0; t < 3; t++) {
        random_row(sym[t], row, sym_blk[t] * (N / 32), N / 32);
        float got = ebb_quant_dot_q8_act(sym[t], row, a, N);
        float simd = ebb_quant_get_dot_act(sym[t], true)(row, a, N);
        assert_true(isfinite(got));
        assert_memory_equal(&got, &simd, sizeof(float));
        float o[8];
        ebb_quant_dot_act4_fn f4 = ebb_quant_get_dot_act4(sym[t]),
                              f8 = ebb_quant_get_dot_act8(sym[t]);
        if (f4) { /* the same token four times */
            f4(row, a, 0, N, o);
            for (int tk = 0; tk < 4; tk++)
                assert_memory_equal(&got, &o[tk], sizeof(float));
        }
        if (f8) { /* and eight */
            f8(row, a, 0, N, o);
            for (int tk = 0; tk < 8; tk++)
                assert_memory_equal(&got, &o[tk], sizeof(float));
        }
    }
    /* The four-token products: each token's result has the one-token product's bits. */
    static struct ebb_q8_act a4[4][N / 32];
    static struct ebb_block_q8_k k4[4][N / 256];
    for (int t = 0; t < 4; t++) {
        for (int i = 0; i < N; i++)
            x[i] = rndf(-3, 3) * (float)(t + 1);
        ebb_quant_q8_act_row(x, N, a4[t]);
        ebb_quant_q8k_act_row(x, N, k4[t]);
    }
    const size_t blk[] = {sizeof(struct ebb_block_q4_0), sizeof(struct ebb_block_q4_1),
                          sizeof(struct ebb_block_q5_0), sizeof(struct ebb_block_q5_1),
                          sizeof(struct ebb_block_q8_0), sizeof(struct ebb_block_q4_k),
                          sizeof(struct ebb_block_q5_k), sizeof(struct ebb_block_q6_k)};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        ebb_quant_dot_act4_fn f4 = ebb_quant_get_dot_act4(types[t]);
        if (!f4)
            continue; /* no SIMD on this CPU */
        bool kq = ebb_quant_q8k_act_supported(types[t]);
        int nb = kq ? N / 256 : N / 32;
        random_row(types[t], row, blk[t] * (uint64_t)nb, nb);
        float out[4];
        if (kq)
            f4(row, k4, sizeof(k4[0]), N, out);
        else
            f4(row, a4, sizeof(a4[0]), N, out);
        for (int tk = 0; tk < 4; tk++) {
            float want = kq ? ebb_quant_dot_q8k_act(types[t], row, k4[tk], N)
                            : ebb_quant_dot_q8_act(types[t], row, a4[tk], N);
            if (memcmp(&want, &out[tk], sizeof(float)))
                fail_msg("type %u token %d: x4 %a, scalar %a", types[t], tk, (double)out[tk],
                         (double)want);
        }
    }
    /* The eight-token products of the 32-block types, with VNNI where the CPU has it (AVX-VNNI, or
     * AVX512-VNNI on 256-bit vectors) and with AVX2 (EBB_CPU_VNNI=0): each token's result has the
     * one-token product's bits. */
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512vnni") &&
        __builtin_cpu_supports("avx512vl"))
        assert_true(ebb_quant_simd_vnni() != 0); /* 2, or 1 where it has AVX-VNNI too */
#endif
    static struct ebb_q8_act a8[8][N / 32];
    for (int t = 0; t < 8; t++) {
        for (int i = 0; i < N; i++)
            x[i] = rndf(-3, 3) * (float)(t + 1);
        ebb_quant_q8_act_row(x, N, a8[t]);
    }
    /* With them, the four-row products of the same types: one token against four different
     * rows, each row's result with the one-row product's bits. */
    static uint8_t rows4[4][sizeof(struct ebb_block_q8_0) * (N / 32)];
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            setenv("EBB_CPU_VNNI", "0", 1);
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            ebb_quant_dot_act4_fn f8 = ebb_quant_get_dot_act8(types[t]);
            ebb_quant_dot_rows4_fn fr = ebb_quant_get_dot_rows4(types[t]);
            if (ebb_quant_q8k_act_supported(types[t]) || !f8) {
                assert_true(!f8 || !ebb_quant_q8k_act_supported(types[t]));
                assert_true(!fr || !ebb_quant_q8k_act_supported(types[t]));
                continue;
            }
            random_row(types[t], row, blk[t] * (uint64_t)(N / 32), N / 32);
            float out[8];
            f8(row, a8, sizeof(a8[0]), N, out);
            for (int tk = 0; tk < 8; tk++) {
                float want = ebb_quant_dot_q8_act(types[t], row, a8[tk], N);
                if (memcmp(&want, &out[tk], sizeof(float)))
                    fail_msg("type %u token %d (%s): x8 %a, scalar %a", types[t], tk,
                             ebb_quant_simd_name(), (double)out[tk], (double)want);
            }
            if (!fr)
                continue; /* no F16C */
            for (int r = 0; r < 4; r++)
                random_row(types[t], rows4[r], blk[t] * (uint64_t)(N / 32), N / 32);
            fr(rows4, sizeof(rows4[0]), a8[5], N, out);
            for (int r = 0; r < 4; r++) {
                float want = ebb_quant_dot_q8_act(types[t], rows4[r], a8[5], N);
                if (memcmp(&want, &out[r], sizeof(float)))
                    fail_msg("type %u row %d (%s): r4 %a, scalar %a", types[t], r,
                             ebb_quant_simd_name(), (double)out[r], (double)want);
            }
        }
        if (pass)
            assert_false(ebb_quant_simd_vnni());
        unsetenv("EBB_CPU_VNNI");
    }
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        assert_non_null(ebb_quant_get_dot_rows4(EBB_GGML_Q4_0));
#endif
    assert_null(ebb_quant_get_dot_rows4(EBB_GGML_Q4_K));
    /* Q8_K: the largest magnitude maps to -127 exactly, the group sums add up. */
    for (int i = 0; i < N; i++)
        x[i] = rndf(-2, 2);
    x[7] = 5.0f;
    ebb_quant_q8k_act_row(x, N, k);
    assert_int_equal(k[0].qs[7], -127);
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++)
            s += k[1].qs[16 * g + j];
        assert_int_equal(k[1].bsums[g], s);
    }
    assert_null(ebb_quant_get_dot_act(EBB_GGML_Q2_K, true));
}

/* The repacked eight-row products (quant-repack.c), with VNNI where the CPU has it and with
 * AVX2 (EBB_CPU_VNNI=0): seven tokens (four at once, then one at a time) of three groups of
 * eight random rows (a pair and a single group where the kernel pairs them), each result with
 * the scalar product's bits; one token's activations all zero. */
static void test_rp8(void **state)
{
    (void)state;
    enum { N = 1024, NT = 7, NG = 3 };
    static float x[N];
    static uint8_t rows[8 * NG][2 * N]; /* Q8_0 takes 34 bytes per 32 weights */
    static uint8_t grp[NG][8 * 2 * N];
    static struct ebb_q8_act a[NT][N / 32];
    static struct ebb_block_q8_k k[NT][N / 256];
    static int32_t asum[NT * (N / 32)];
    const uint32_t types[] = {EBB_GGML_Q4_0, EBB_GGML_Q4_1, EBB_GGML_Q5_0,
                              EBB_GGML_Q8_0, EBB_GGML_Q4_K, EBB_GGML_Q6_K};
    const size_t blk[] = {sizeof(struct ebb_block_q4_0), sizeof(struct ebb_block_q4_1),
                          sizeof(struct ebb_block_q5_0), sizeof(struct ebb_block_q8_0),
                          sizeof(struct ebb_block_q4_k), sizeof(struct ebb_block_q6_k)};
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            setenv("EBB_CPU_VNNI", "0", 1);
        for (int rep = 0; rep < 20; rep++) {
            for (int t = 0; t < NT; t++) {
                float amp = rep % 5 == 0 ? 1000.0f : 3.0f * (float)(t + 1);
                for (int i = 0; i < N; i++) /* token 6: blocks whose fp16 sum s overflows */
                    x[i] = t == 5 ? 0.0f : t == 6 ? rndf(2500.0f, 5000.0f) : rndf(-amp, amp);
                ebb_quant_q8_act_row(x, N, a[t]);
                ebb_quant_q8k_act_row(x, N, k[t]);
                ebb_quant_q8_act_sums(a[t], N / 32, asum + t * (N / 32));
            }
            for (size_t ty = 0; ty < sizeof(types) / sizeof(types[0]); ty++) {
                ebb_quant_rp8_fn f = ebb_quant_get_rp8(types[ty]);
                if (!f)
                    continue; /* no AVX2 on this CPU */
                bool kq = ebb_quant_q8k_act_supported(types[ty]);
                int nb = kq ? N / 256 : N / 32;
                uint64_t row_bytes = blk[ty] * (uint64_t)nb;
                for (int r = 0; r < 8 * NG; r++)
                    random_row(types[ty], rows[r], row_bytes, nb);
                uint64_t gb = ebb_quant_rp8_bytes(types[ty], N);
                assert_true(gb <= sizeof(grp[0]));
                for (int g = 0; g < NG; g++) /* consecutive groups, gb bytes apart */
                    ebb_quant_rp8_pack(types[ty], rows[8 * g], sizeof(rows[0]), N,
                                       (uint8_t *)grp + gb * (uint64_t)g);
                float out[8 * NT * NG];
                if (kq)
                    f(grp, k, sizeof(k[0]), NULL, N, NG, NT, out);
                else
                    f(grp, a, sizeof(a[0]), asum, N, NG, NT, out);
                for (int g = 0; g < NG; g++)
                    for (int t = 0; t < NT; t++)
                        for (int r = 0; r < 8; r++) {
                            const uint8_t *row = rows[8 * g + r];
                            float want = kq ? ebb_quant_dot_q8k_act(types[ty], row, k[t], N)
                                            : ebb_quant_dot_q8_act(types[ty], row, a[t], N);
                            float got = out[8 * (g * NT + t) + r];
                            if (memcmp(&want, &got, sizeof(float)))
                                fail_msg("type %u group %d token %d row %d (%s): rp8 %a, scalar %a",
                                         types[ty], g, t, r, pass ? "avx2" : ebb_quant_simd_name(),
                                         (double)got, (double)want);
                        }
            }
        }
        unsetenv("EBB_CPU_VNNI");
    }
    assert_null(ebb_quant_get_rp8(EBB_GGML_Q5_1)); /* no repacked product */
    assert_int_equal(ebb_quant_rp8_bytes(EBB_GGML_Q5_1, N), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_simple_blocks),
        cmocka_unit_test(test_k_blocks),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_against_gguf_py),
        cmocka_unit_test(test_q8_act),
        cmocka_unit_test(test_dot_act),
        cmocka_unit_test(test_rp8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
