/* The SIMD Q4_0 dot with 8-bit activations that host layers and the CPU device use
 * (runtime/quant/quant-simd.c), one token and four at once, gives exactly what the generic
 * ebb_quant_dot_q8_act gives, bit for bit, on random rows with zero, subnormal and large block
 * scales; the AVX2 attention head (runtime/model/ref-attn.c) gives the plain C one's bits, and
 * the GELU table the rounded GELU of the rounded input. Skipped (77) where the CPU or build has
 * no such path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/ref-int.h"
#include "quant/quant.h"

static uint32_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

static void same_as_generic(void **state)
{
    (void)state;
    ebb_quant_dot_act_fn fast = ebb_quant_get_dot_act(EBB_GGML_Q4_0, true);
    ebb_quant_dot_act4_fn fast4 = ebb_quant_get_dot_act4(EBB_GGML_Q4_0);
    assert_non_null(fast);
    assert_non_null(fast4);
    enum { N = 4096, NB = N / 32 };
    static struct ebb_block_q4_0 w[NB];
    static struct ebb_q8_act a[NB];
    static float x[N];
    uint64_t s = 42;
    for (int trial = 0; trial < 200; trial++) {
        for (int i = 0; i < N; i++)
            x[i] = ((float)(rnd(&s) % 20001) - 10000.0f) / (trial % 3 ? 997.0f : 3.0f);
        if (trial % 7 == 0)
            memset(x + 64, 0, 32 * sizeof(float)); /* an all-zero block: scale 0 */
        ebb_quant_q8_act_row(x, N, a);
        for (int b = 0; b < NB; b++) {
            uint32_t k = rnd(&s);
            /* random scales, some zero, some subnormal */
            w[b].d = k % 11 == 0 ? 0 : k % 13 == 0 ? (uint16_t)(k & 0x3ff) : (uint16_t)(k & 0x7bff);
            for (int j = 0; j < 16; j++)
                w[b].qs[j] = (uint8_t)rnd(&s);
        }
        uint32_t n = trial % 5 ? N : 32 * (1 + trial % 17);
        float g = ebb_quant_dot_q8_act(EBB_GGML_Q4_0, w, a, n);
        float f = fast(w, a, n), f4[4];
        assert_memory_equal(&g, &f, sizeof(float));
        fast4(w, a, 0, n, f4); /* the same token four times */
        for (int t = 0; t < 4; t++)
            assert_memory_equal(&g, &f4[t], sizeof(float));
    }
}

/* A head of width hd over n_kv positions for trial (a window from position p0 on every third,
 * fp16 weights on even trials), its query at q; keys and values left to the caller. */
static struct ebb__attn_head test_head(const float *q, uint32_t hd, uint32_t n_kv, uint64_t stride,
                                       int trial, uint64_t *s)
{
    return (struct ebb__attn_head){
        .q = q,
        .stride = stride,
        .hd = hd,
        .p0 = trial % 3 == 0 ? rnd(s) % n_kv : 0,
        .n_kv = n_kv,
        .scale = 1.0f / sqrtf((float)hd),
        .f16_weights = trial % 2 == 0,
    };
}

/* ebb__ref_attn_heads over g = 1..9 query heads sharing keys and values (groups of up to four
 * and the rest, both cache forms, widths with and without a tail of 8, odd and even lengths,
 * windows) gives each head the bits of ebb__ref_attn_head alone. */
static void attn_heads_same_as_one(void **state)
{
    (void)state;
    enum { MAXHD = 256, STRIDE = 2 * MAXHD, MAXKV = 200, MAXG = 9, LD = MAXKV + 3 };
    static float q[MAXG * MAXHD], k[MAXKV * STRIDE], v[MAXKV * STRIDE], att[MAXG * LD];
    static float o_one[MAXG * MAXHD], o_g[MAXG * MAXHD];
    static uint16_t k16[MAXKV * STRIDE], v16[MAXKV * STRIDE];
    static const uint32_t hds[] = {64, 72, 40, 256, 8};
    uint64_t s = 11;
    for (int trial = 0; trial < 90; trial++) {
        uint32_t hd = hds[trial % 5], n_kv = 1 + rnd(&s) % MAXKV, g = 1 + trial % MAXG;
        for (uint32_t i = 0; i < g * hd; i++)
            q[i] = ((float)(rnd(&s) % 20001) - 10000.0f) / (trial % 4 ? 10000.0f : 250.0f);
        for (uint64_t i = 0; i < (uint64_t)n_kv * STRIDE; i++) {
            k16[i] = ebb_fp32_to_fp16(((float)(rnd(&s) % 20001) - 10000.0f) / 7000.0f);
            v16[i] = ebb_fp32_to_fp16(((float)(rnd(&s) % 20001) - 10000.0f) / 3000.0f);
            k[i] = ebb_fp16_to_fp32(k16[i]);
            v[i] = ebb_fp16_to_fp32(v16[i]);
        }
        struct ebb__attn_head a = test_head(q, hd, n_kv, STRIDE, trial, &s);
        if (trial % 2) {
            a.k16 = k16 + MAXHD;
            a.v16 = v16 + MAXHD;
        } else {
            a.k = k;
            a.v = v;
        }
        for (int simd = 0; simd < 2; simd++) {
            for (uint32_t h = 0; h < g; h++) {
                struct ebb__attn_head one = a;
                one.q = q + h * hd;
                ebb__ref_attn_head(&one, simd, att, o_one + h * hd);
            }
            memset(o_g, 0xff, sizeof(o_g));
            ebb__ref_attn_heads(&a, g, simd, att, LD, o_g);
            assert_memory_equal(o_one, o_g, g * hd * sizeof(float));
        }
    }
}

/* Random heads of several widths (whole chunks of 64 and a tail of 8s), windows, lengths that
 * are and are not multiples of 4, with and without fp16 weights, keys from a wider row. */
static void attn_same_as_c(void **state)
{
    (void)state;
    if (!ebb__ref_attn_simd())
        skip();
    enum { MAXHD = 256, STRIDE = 2 * MAXHD, MAXKV = 300 };
    static float q[MAXHD], k[MAXKV * STRIDE], v[MAXKV * STRIDE], att[MAXKV];
    static float o_c[MAXHD], o_s[MAXHD];
    static uint16_t k16[MAXKV * STRIDE], v16[MAXKV * STRIDE];
    static const uint32_t hds[] = {256, 64, 72, 40, 8};
    uint64_t s = 7;
    for (int trial = 0; trial < 120; trial++) {
        uint32_t hd = hds[trial % 5], n_kv = 1 + rnd(&s) % MAXKV;
        float amp = trial % 4 == 0 ? 40.0f : 1.0f; /* peaked softmax too */
        for (uint32_t i = 0; i < hd; i++)
            q[i] = amp * (((float)(rnd(&s) % 20001) - 10000.0f) / 10000.0f);
        for (uint64_t i = 0; i < (uint64_t)n_kv * STRIDE; i++) {
            k[i] = ((float)(rnd(&s) % 20001) - 10000.0f) / 7000.0f;
            v[i] = ((float)(rnd(&s) % 20001) - 10000.0f) / 3000.0f;
        }
        struct ebb__attn_head a = test_head(q, hd, n_kv, STRIDE, trial, &s);
        a.k = k + (trial % 2 ? MAXHD : 0);
        a.v = v + (trial % 2 ? MAXHD : 0);
        ebb__ref_attn_head(&a, false, att, o_c);
        ebb__ref_attn_head(&a, true, att, o_s);
        assert_memory_equal(o_c, o_s, hd * sizeof(float));
        /* The same keys and values held as fp16 (the CPU device's cache) give the bits of their
         * values held as floats, in both paths. */
        for (uint64_t i = 0; i < (uint64_t)n_kv * STRIDE; i++) {
            k16[i] = ebb_fp32_to_fp16(k[i]);
            v16[i] = ebb_fp32_to_fp16(v[i]);
            k[i] = ebb_fp16_to_fp32(k16[i]);
            v[i] = ebb_fp16_to_fp32(v16[i]);
        }
        ebb__ref_attn_head(&a, true, att, o_c);
        struct ebb__attn_head h = a;
        h.k = h.v = NULL;
        h.k16 = k16 + (trial % 2 ? MAXHD : 0);
        h.v16 = v16 + (trial % 2 ? MAXHD : 0);
        ebb__ref_attn_head(&h, false, att, o_s);
        assert_memory_equal(o_c, o_s, hd * sizeof(float));
        ebb__ref_attn_head(&h, true, att, o_s);
        assert_memory_equal(o_c, o_s, hd * sizeof(float));
    }
    /* The store into an fp16 cache rounds as ebb__ref_f16_round does. */
    static float x[1003], xr[1003];
    static uint16_t xh[1003];
    for (int i = 0; i < 1003; i++)
        x[i] = ((float)(rnd(&s) % 2000001) - 1000000.0f) / (i % 7 ? 1000.0f : 1e9f);
    for (int simd = 0; simd < 2; simd++) {
        ebb__ref_f16_store(xh, x, 1003, simd);
        ebb__ref_f16_round(xr, x, 1003, simd);
        for (int i = 0; i < 1003; i++) {
            float back = ebb_fp16_to_fp32(xh[i]);
            assert_memory_equal(&back, &xr[i], sizeof(float));
        }
    }
}

static void gelu_table(void **state)
{
    (void)state;
    static float tab[EBB__GELU_TAB];
    ebb__ref_gelu_table(tab);
    uint64_t s = 3;
    for (int i = 0; i < 200000; i++) {
        float x = ((float)(rnd(&s) % 2400001) - 1200000.0f) / 100000.0f; /* -12..12 */
        if (i % 10 == 0)
            x *= 1e-6f; /* near zero: fp16 subnormals */
        float want = x <= -10.0f  ? 0.0f
                     : x >= 10.0f ? x
                                  : ebb_fp16_to_fp32(ebb_fp32_to_fp16(
                                        ebb__ref_gelu(ebb_fp16_to_fp32(ebb_fp32_to_fp16(x)))));
        float got = ebb__ref_gelu_f16(tab, x);
        assert_memory_equal(&want, &got, sizeof(float));
    }
    /* The GLU over a row: the vector path's products equal the lookups', exact values at the
     * clamps included, and a tail of fewer than eight. */
    enum { NG = 1003 };
    static float a[NG], b[NG], d0[NG], d1[NG];
    for (int i = 0; i < NG; i++) {
        a[i] = ((float)(rnd(&s) % 2400001) - 1200000.0f) / 100000.0f;
        b[i] = ((float)(rnd(&s) % 20001) - 10000.0f) / 1000.0f;
    }
    a[0] = -10.0f;
    a[1] = 10.0f;
    a[2] = 0.0f;
    a[3] = -0.0f;
    ebb__ref_gelu_glu(tab, a, b, d0, NG, false);
    ebb__ref_gelu_glu(tab, a, b, d1, NG, true);
    assert_memory_equal(d0, d1, sizeof(d0));
}

/* F16C's rounding through fp16 equals the software one: random magnitudes from subnormal to
 * past fp16's range, halfway cases, both signs; in place and with a tail of fewer than 8. */
static void f16_round(void **state)
{
    (void)state;
    enum { N = 4099 };
    static float x[N], a[N], b[N];
    uint64_t s = 11;
    for (int rep = 0; rep < 50; rep++) {
        for (int i = 0; i < N; i++) {
            uint32_t u = rnd(&s);
            float m = (float)(u % 100000) / 1000.0f, e = ldexpf(1.0f, (int)(rnd(&s) % 50) - 30);
            x[i] = (u & 1 ? -m : m) * e;
            if (i % 17 == 0) /* halfway between two fp16 values */
                x[i] = ldexpf(1.0f + ((float)(u % 1024) + 0.5f) / 1024.0f, (int)(u % 20) - 10);
        }
        ebb__ref_f16_round(a, x, N, false);
        memcpy(b, x, sizeof(b));
        ebb__ref_f16_round(b, b, N, true);
        assert_memory_equal(a, b, sizeof(a));
    }
}

/* The CPU device's matrix product on repacked row groups gives the bits of the product on the
 * file's rows: Q4_0, Q4_1, Q5_0, Q8_0, Q4_K and Q6_K, 109 rows (13 groups and 5 rows left over), 11
 * tokens (four, four, then one by one) and one token alone (decode, on either rows), on one thread
 * and on two (the groups split, the last part taking the rows left). */
static void matmul_repacked(void **state)
{
    (void)state;
    enum { NIN = 512, NOUT = 109, NT = 11 };
    const uint32_t types[] = {EBB_GGML_Q4_0, EBB_GGML_Q4_1, EBB_GGML_Q5_0,
                              EBB_GGML_Q8_0, EBB_GGML_Q4_K, EBB_GGML_Q6_K};
    const uint32_t block[] = {32, 32, 32, 32, 256, 256}, dpos[] = {0, 0, 0, 0, 0, 208};
    uint64_t s = 5;
    static float x[NT * NIN], y0[NT * NOUT], y1[NT * NOUT];
    for (int i = 0; i < NT * NIN; i++)
        x[i] = ((float)(rnd(&s) % 20001) - 10000.0f) / 2000.0f;
    for (int ty = 0; ty < 6; ty++) {
        if (!ebb_quant_get_rp8(types[ty]))
            skip();
        uint64_t rb;
        assert_int_equal(ebb_ggml_row_bytes(types[ty], NIN, &rb), EBB_OK);
        uint64_t bb = rb / (NIN / block[ty]);
        uint8_t *data = malloc(rb * NOUT);
        assert_non_null(data);
        for (uint64_t i = 0; i < rb * NOUT; i++)
            data[i] = (uint8_t)rnd(&s);
        for (uint64_t b = 0; b < rb * NOUT / bb; b++) { /* sane fp16 scales (d, dmin / m) */
            uint16_t d = ebb_fp32_to_fp16((float)(rnd(&s) % 1000) / 50000.0f);
            memcpy(data + b * bb + dpos[ty], &d, 2);
            if (types[ty] == EBB_GGML_Q4_K || types[ty] == EBB_GGML_Q4_1) {
                uint16_t m = ebb_fp32_to_fp16((float)(rnd(&s) % 1000) / 50000.0f);
                memcpy(data + b * bb + 2, &m, 2);
            }
        }
        for (int threads = 1; threads <= 2; threads++) {
            struct ref *r = calloc(1, sizeof(*r));
            assert_non_null(r);
            r->q8 = r->kq8 = r->fast = r->cpu = true;
            r->xact = calloc(NT * (NIN / 32), sizeof(*r->xact));
            r->xk = calloc(NT * (NIN / 256), sizeof(*r->xk));
            r->xsum = calloc(NT * (NIN / 32), sizeof(*r->xsum));
            for (int i = 0; i < 2; i++)
                r->rowbuf[i] = calloc(NIN, sizeof(float));
            ebb__ref_start_helper(r, threads);
            assert_int_equal(r->n_threads, threads);
            struct wmat w = {.data = data,
                             .type = types[ty],
                             .n_in = NIN,
                             .n_out = NOUT,
                             .row_bytes = rb,
                             .dot = ebb_quant_get_dot(types[ty]),
                             .n_mat = 1,
                             .mat_bytes = rb * NOUT};
            ebb__ref_matmul(r, &w, x, y0, NT);
            /* One token (decode) on the file's rows: four rows at a time where the type has
             * that product (ebb_quant_get_dot_rows4), the rows left one by one. */
            static float y2[NOUT];
            memset(y2, 0xff, sizeof(y2));
            ebb__ref_matmul(r, &w, x, y2, 1);
            assert_memory_equal(y0, y2, sizeof(y2));
            w.rp_bytes = ebb_quant_rp8_bytes(types[ty], NIN);
            w.rp = malloc(w.rp_bytes * (NOUT / 8));
            assert_non_null(w.rp);
            for (uint32_t o = 0; o + 8 <= NOUT; o += 8)
                ebb_quant_rp8_pack(types[ty], data + o * rb, rb, NIN, w.rp + o / 8 * w.rp_bytes);
            w.rp8 = ebb_quant_get_rp8(types[ty]);
            memset(y1, 0xff, sizeof(y1)); /* NaNs where a row is left unwritten */
            ebb__ref_matmul(r, &w, x, y1, NT);
            assert_memory_equal(y0, y1, sizeof(y0));
            /* One token on the repacked rows (decode's default, rp8_min 1) and, with rp8_min
             * 4, on the file's rows: the same bits. */
            for (uint32_t min = 1; min <= 4; min += 3) {
                r->rp8_min = min;
                memset(y2, 0xff, sizeof(y2));
                ebb__ref_matmul(r, &w, x + NIN, y2, 1);
                assert_memory_equal(y0 + NOUT, y2, sizeof(y2));
            }
            ebb__ref_stop_helper(r);
            free(w.rp);
            free(r->xact);
            free(r->xk);
            free(r->xsum);
            for (int i = 0; i < 2; i++)
                free(r->rowbuf[i]);
            free(r);
        }
        free(data);
    }
}

int main(void)
{
    if (!strcmp(ebb_quant_simd_name(), "scalar")) {
        fprintf(stderr, "no SIMD Q4_0 dot on this CPU/build: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(same_as_generic),
                                       cmocka_unit_test(attn_same_as_c),
                                       cmocka_unit_test(attn_heads_same_as_one),
                                       cmocka_unit_test(gelu_table),
                                       cmocka_unit_test(f16_round),
                                       cmocka_unit_test(matmul_repacked)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
