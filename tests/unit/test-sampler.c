/* Sampler: greedy, temperature, truncation (top-k, top-p, min-p), penalties, logit bias, seeded
 * reproducibility, the candidate-list path and the distribution of draws. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sched/sampler.h"

static struct ebb_sampler *make(const struct ebb_sampling *p, uint32_t n_vocab)
{
    struct ebb_sampler *s = NULL;
    struct ebb_diag d;
    ebb_err rc = ebb_sampler_new(p, n_vocab, &s, &d);
    if (rc)
        fail_msg("ebb_sampler_new: %s", d.msg);
    return s;
}

static int32_t sample(struct ebb_sampler *s, const float *logits, uint32_t n)
{
    float buf[64];
    assert_true(n <= 64);
    memcpy(buf, logits, n * sizeof(float));
    int32_t tok = -1;
    assert_int_equal(ebb_sampler_sample(s, buf, &tok, NULL), EBB_OK);
    assert_true(tok >= 0 && (uint32_t)tok < n);
    return tok;
}

/* Draws `draws` tokens and returns their frequencies in freq[0..n). */
static void histogram(struct ebb_sampler *s, const float *logits, uint32_t n, int draws,
                      double *freq)
{
    for (uint32_t i = 0; i < n; i++)
        freq[i] = 0;
    for (int k = 0; k < draws; k++)
        freq[sample(s, logits, n)] += 1.0 / draws;
}

static void test_greedy(void **state)
{
    (void)state;
    struct ebb_sampling p;
    ebb_sampling_defaults(&p);
    p.temperature = 0;
    struct ebb_sampler *s = make(&p, 6);
    const float l[6] = {0.1f, 3.0f, -2.0f, 3.0f, 2.9f, -INFINITY};
    assert_true(ebb_sampler_is_greedy(s));
    assert_false(ebb_sampler_needs_full_logits(s));
    assert_int_equal(ebb_sampler_n_candidates(s), 1);
    for (int k = 0; k < 5; k++)
        assert_int_equal(sample(s, l, 6), 1); /* ties go to the lowest id */
    int32_t ids[2] = {4, 3};
    float cl[2] = {2.9f, 3.0f};
    int32_t tok;
    assert_int_equal(ebb_sampler_sample_candidates(s, ids, cl, 2, &tok, NULL), EBB_OK);
    assert_int_equal(tok, 3);
    ebb_sampler_free(s);
}

static void test_temperature_distribution(void **state)
{
    (void)state;
    struct ebb_sampling p;
    ebb_sampling_defaults(&p);
    p.seed = 42;
    const float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    double f[3];
    struct ebb_sampler *s = make(&p, 3);
    assert_true(ebb_sampler_needs_full_logits(s)); /* no top_k: unbounded */
    histogram(s, l, 3, 100000, f);
    /* 100k draws: the standard error of a frequency is below 0.0016; allow 0.01. */
    assert_true(fabs(f[0] - 0.5) < 0.01 && fabs(f[1] - 0.3) < 0.01 && fabs(f[2] - 0.2) < 0.01);
    ebb_sampler_free(s);

    /* Temperature 0.5 squares the probabilities: 25:9:4. */
    p.temperature = 0.5f;
    s = make(&p, 3);
    histogram(s, l, 3, 100000, f);
    assert_true(fabs(f[0] - 25.0 / 38) < 0.01 && fabs(f[1] - 9.0 / 38) < 0.01 &&
                fabs(f[2] - 4.0 / 38) < 0.01);
    ebb_sampler_free(s);

    /* A high temperature flattens towards uniform. */
    p.temperature = 100.0f;
    s = make(&p, 3);
    histogram(s, l, 3, 30000, f);
    for (int i = 0; i < 3; i++)
        assert_true(fabs(f[i] - 1.0 / 3) < 0.02);
    ebb_sampler_free(s);
}

static void test_truncation(void **state)
{
    (void)state;
    struct ebb_sampling p;
    ebb_sampling_defaults(&p);
    p.seed = 7;
    /* Probabilities 0.4, 0.3, 0.2, 0.1 (ids shuffled). */
    const float l[4] = {logf(0.2f), logf(0.4f), logf(0.1f), logf(0.3f)};
    double f[4];

    p.top_k = 2;
    struct ebb_sampler *s = make(&p, 4);
    assert_false(ebb_sampler_needs_full_logits(s));
    assert_int_equal(ebb_sampler_n_candidates(s), 2);
    histogram(s, l, 4, 40000, f);
    assert_true(f[0] == 0 && f[2] == 0);
    assert_true(fabs(f[1] - 4.0 / 7) < 0.015 && fabs(f[3] - 3.0 / 7) < 0.015);
    ebb_sampler_free(s);

    /* top_p 0.85: 0.4 + 0.3 + 0.2 = 0.9 >= 0.85 keeps three. */
    p.top_k = 0;
    p.top_p = 0.85f;
    s = make(&p, 4);
    histogram(s, l, 4, 40000, f);
    assert_true(f[2] == 0 && f[0] > 0.15 && fabs(f[1] - 4.0 / 9) < 0.015);
    ebb_sampler_free(s);

    /* top_p 0.1: only the most probable. */
    p.top_p = 0.1f;
    s = make(&p, 4);
    histogram(s, l, 4, 1000, f);
    assert_true(f[1] > 0.9999);
    ebb_sampler_free(s);

    /* min_p 0.5: keep p >= 0.2 (0.4, 0.3, 0.2), drop 0.1. */
    p.top_p = 1.0f;
    p.min_p = 0.5f;
    s = make(&p, 4);
    histogram(s, l, 4, 40000, f);
    assert_true(f[2] == 0 && fabs(f[0] - 2.0 / 9) < 0.015);
    ebb_sampler_free(s);

    /* min_p 0.8: only p >= 0.32. */
    p.min_p = 0.8f;
    s = make(&p, 4);
    histogram(s, l, 4, 1000, f);
    assert_true(f[1] > 0.9999);
    ebb_sampler_free(s);

    /* Stages in llama.cpp's order: top-k 3 first, then top-p over the renormalised three
     * (0.4/0.9, 0.3/0.9, 0.2/0.9): top_p 0.7 keeps 0.444 + 0.333 = 0.78 -> two tokens. */
    p.min_p = 0;
    p.top_k = 3;
    p.top_p = 0.7f;
    s = make(&p, 4);
    histogram(s, l, 4, 20000, f);
    assert_true(f[0] == 0 && f[2] == 0 && f[1] > 0.5 && f[3] > 0.35);
    ebb_sampler_free(s);
}

static void test_penalties(void **state)
{
    (void)state;
    struct ebb_sampling p;
    ebb_sampling_defaults(&p);
    p.temperature = 0;
    p.repeat_penalty = 2.0f;
    const float l[4] = {2.0f, 1.5f, -1.0f, -1.2f};
    struct ebb_sampler *s = make(&p, 4);
    assert_true(ebb_sampler_needs_full_logits(s));
    assert_int_equal(ebb_sampler_n_candidates(s), 0);
    assert_int_equal(sample(s, l, 4), 0);
    ebb_sampler_accept(s, 0); /* 2.0 -> 1.0 < 1.5 */
    assert_int_equal(sample(s, l, 4), 1);
    ebb_sampler_accept(s, 1); /* 1.5 -> 0.75 < 1.0 */
    assert_int_equal(sample(s, l, 4), 0);
    ebb_sampler_reset(s);
    assert_int_equal(sample(s, l, 4), 0);
    ebb_sampler_free(s);

    /* Negative logits are multiplied: -1.0 * 2 = -2.0 < -1.2. */
    const float neg[2] = {-1.0f, -1.2f};
    s = make(&p, 2);
    ebb_sampler_accept(s, 0);
    assert_int_equal(sample(s, neg, 2), 1);
    ebb_sampler_free(s);

    /* The window: only the last repeat_last_n tokens count. */
    p.repeat_last_n = 1;
    s = make(&p, 4);
    ebb_sampler_accept(s, 0);
    ebb_sampler_accept(s, 3);
    assert_int_equal(sample(s, l, 4), 0);
    ebb_sampler_free(s);

    /* Frequency penalty counts occurrences; presence once. */
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.frequency_penalty = 0.3f;
    s = make(&p, 4);
    ebb_sampler_accept(s, 0); /* 2.0 - 0.3 = 1.7 > 1.5 */
    assert_int_equal(sample(s, l, 4), 0);
    ebb_sampler_accept(s, 0); /* 2.0 - 0.6 = 1.4 < 1.5 */
    assert_int_equal(sample(s, l, 4), 1);
    ebb_sampler_free(s);

    p.frequency_penalty = 0;
    p.presence_penalty = 0.4f;
    s = make(&p, 4);
    ebb_sampler_accept(s, 0);
    ebb_sampler_accept(s, 0);
    ebb_sampler_accept(s, 0); /* 2.0 - 0.4 = 1.6 > 1.5 regardless of count */
    assert_int_equal(sample(s, l, 4), 0);
    ebb_sampler_accept(s, 1); /* 1.5 - 0.4 = 1.1 */
    assert_int_equal(sample(s, l, 4), 0);
    ebb_sampler_free(s);

    /* repeat_last_n 0 turns the penalties off. */
    p.presence_penalty = 5.0f;
    p.repeat_last_n = 0;
    s = make(&p, 4);
    assert_false(ebb_sampler_needs_full_logits(s));
    ebb_sampler_accept(s, 0);
    assert_int_equal(sample(s, l, 4), 0);
    ebb_sampler_free(s);
}

static void test_logit_bias(void **state)
{
    (void)state;
    struct ebb_sampling p;
    ebb_sampling_defaults(&p);
    p.temperature = 0;
    const float l[3] = {5.0f, 1.0f, 0.0f};
    struct ebb_logit_bias b[2] = {{0, -INFINITY}, {2, 1.5f}};
    p.logit_bias = b;
    p.n_logit_bias = 2;
    struct ebb_sampler *s = make(&p, 3);
    b[1].bias = 0; /* the sampler keeps its own copy */
    assert_true(ebb_sampler_needs_full_logits(s));
    assert_int_equal(sample(s, l, 3), 2);
    ebb_sampler_free(s);

    /* Everything banned is an error, not a token. */
    struct ebb_logit_bias all[3] = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}};
    p.logit_bias = all;
    p.n_logit_bias = 3;
    p.temperature = 1.0f;
    p.seed = 1;
    s = make(&p, 3);
    float buf[3] = {1, 2, 3};
    int32_t tok;
    assert_int_equal(ebb_sampler_sample(s, buf, &tok, NULL), EBB_EINVAL);
    ebb_sampler_free(s);

    /* Sampling with a ban never draws it. */
    struct ebb_logit_bias ban = {1, -INFINITY};
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    s = make(&p, 3);
    const float flat[3] = {0, 0, 0};
    double f[3];
    histogram(s, flat, 3, 3000, f);
    assert_true(f[1] == 0 && f[0] > 0.4 && f[2] > 0.4);
    ebb_sampler_free(s);
}

static void test_seed(void **state)
{
    (void)state;
    struct ebb_sampling p;
    ebb_sampling_defaults(&p);
    p.seed = 1234;
    float l[50];
    for (int i = 0; i < 50; i++)
        l[i] = (float)(i % 7) * 0.3f;
    int32_t a[200], b[200];
    struct ebb_sampler *s1 = make(&p, 50), *s2 = make(&p, 50);
    for (int k = 0; k < 200; k++) {
        a[k] = sample(s1, l, 50);
        b[k] = sample(s2, l, 50);
    }
    assert_memory_equal(a, b, sizeof(a));
    ebb_sampler_reset(s1);
    for (int k = 0; k < 200; k++)
        assert_int_equal(sample(s1, l, 50), a[k]);
    assert_true(ebb_sampler_seed(s1) == 1234);
    ebb_sampler_free(s1);
    ebb_sampler_free(s2);

    p.seed = 1235;
    s1 = make(&p, 50);
    int same = 0;
    for (int k = 0; k < 200; k++)
        same += sample(s1, l, 50) == a[k];
    assert_true(same < 100);
    ebb_sampler_free(s1);

    p.seed = EBB_SEED_RANDOM;
    s1 = make(&p, 50);
    assert_true(ebb_sampler_seed(s1) != EBB_SEED_RANDOM);
    ebb_sampler_free(s1);
}

/* The candidate-list path gives the same tokens as the full vector when it is allowed. */
static void test_candidates_match_full(void **state)
{
    (void)state;
    struct ebb_sampling p;
    ebb_sampling_defaults(&p);
    p.seed = 99;
    p.top_k = 5;
    p.top_p = 0.9f;
    p.min_p = 0.02f;
    p.temperature = 0.7f;
    float l[64];
    for (int i = 0; i < 64; i++)
        l[i] = sinf((float)i * 1.7f) * 3.0f;
    /* The top 8 by value, in a scrambled order, as a device top-k might return them. */
    int32_t ids[8];
    float cl[8];
    int n = 0;
    for (int k = 0; k < 8; k++) {
        int best = -1;
        for (int i = 0; i < 64; i++) {
            bool used = false;
            for (int j = 0; j < n; j++)
                used |= ids[j] == i;
            if (!used && (best < 0 || l[i] > l[best]))
                best = i;
        }
        ids[n] = best;
        cl[n++] = l[best];
    }
    for (int k = 0; k < 4; k++) {
        int32_t ti = ids[k], tf = ids[7 - k];
        float li = cl[k];
        ids[k] = tf;
        ids[7 - k] = ti;
        cl[k] = cl[7 - k];
        cl[7 - k] = li;
    }
    struct ebb_sampler *s1 = make(&p, 64), *s2 = make(&p, 64);
    assert_false(ebb_sampler_needs_full_logits(s1));
    assert_int_equal(ebb_sampler_n_candidates(s1), 5);
    for (int k = 0; k < 500; k++) {
        int32_t t1 = sample(s1, l, 64), t2;
        assert_int_equal(ebb_sampler_sample_candidates(s2, ids, cl, 8, &t2, NULL), EBB_OK);
        assert_int_equal(t1, t2);
    }
    ebb_sampler_free(s1);
    ebb_sampler_free(s2);
}

static void test_logprobs(void **state)
{
    (void)state;
    struct ebb_sampling p;
    ebb_sampling_defaults(&p);
    p.temperature = 0;
    p.repeat_penalty = 10.0f; /* logprobs ignore penalties: they describe the model */
    float l[5] = {1.0f, 3.0f, 2.0f, 0.0f, -1.0f};
    struct ebb_sampler *s = make(&p, 5);
    ebb_sampler_accept(s, 1);
    struct ebb_sample_info info = {.n_top = 3};
    int32_t tok;
    assert_int_equal(ebb_sampler_sample(s, l, &tok, &info), EBB_OK);
    assert_int_equal(tok, 2); /* 3.0 / 10 = 0.3 < 2.0 */
    double z = exp(1) + exp(3) + exp(2) + exp(0) + exp(-1);
    assert_int_equal(info.n_top, 3);
    assert_int_equal(info.top_ids[0], 1);
    assert_int_equal(info.top_ids[1], 2);
    assert_int_equal(info.top_ids[2], 0);
    assert_true(fabs(info.top_logprobs[0] - (3 - log(z))) < 1e-5);
    assert_true(fabs(info.top_logprobs[2] - (1 - log(z))) < 1e-5);
    assert_true(fabs(info.logprob - (2 - log(z))) < 1e-5);
    ebb_sampler_free(s);
}

static void test_bad_params(void **state)
{
    (void)state;
    struct ebb_sampling p;
    struct ebb_sampler *s = NULL;
    struct ebb_diag d;
    ebb_sampling_defaults(&p);
    assert_int_equal(ebb_sampler_new(&p, 0, &s, &d), EBB_EINVAL);
    p.top_p = 1.5f;
    assert_int_equal(ebb_sampler_new(&p, 10, &s, &d), EBB_EINVAL);
    ebb_sampling_defaults(&p);
    p.min_p = -0.1f;
    assert_int_equal(ebb_sampler_new(&p, 10, &s, &d), EBB_EINVAL);
    ebb_sampling_defaults(&p);
    p.repeat_penalty = 0;
    assert_int_equal(ebb_sampler_new(&p, 10, &s, &d), EBB_EINVAL);
    ebb_sampling_defaults(&p);
    p.temperature = NAN;
    assert_int_equal(ebb_sampler_new(&p, 10, &s, &d), EBB_EINVAL);
    ebb_sampling_defaults(&p);
    struct ebb_logit_bias b = {10, 1.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    assert_int_equal(ebb_sampler_new(&p, 10, &s, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "token 10"));
    assert_null(s);
    ebb_sampler_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_temperature_distribution),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_candidates_match_full),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
