/* The SIMD Q4_0 dot with 8-bit activations that host layers and the CPU device use
 * (runtime/quant/quant-simd.c), one token and four at once, gives exactly what the generic
 * ebb_quant_dot_q8_act gives, bit for bit, on random rows with zero, subnormal and large block
 * scales. Skipped (77) where the CPU or build has no such path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

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

int main(void)
{
    if (!strcmp(ebb_quant_simd_name(), "scalar")) {
        fprintf(stderr, "no SIMD Q4_0 dot on this CPU/build: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(same_as_generic)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
