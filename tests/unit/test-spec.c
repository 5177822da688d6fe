/* Speculative decoding (runtime/sched/spec.c): the n-gram drafter on crafted histories, the
 * verification rule (greedy and sampled, token for token against plain sampling with the same
 * seed), its output distribution against the sampler's own under a chi-square bound (which a
 * plausible wrong rule fails), the adaptive number of drafts, and whole decode steps against a
 * fake model whose logits depend on the cached tokens (so a wrong position shows). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "sched/spec.h"

/* ---- a fake model: the row at position p depends on the tokens cached at p and p - 1 ---- */

#define FV 32    /* vocabulary */
#define FCTX 256 /* context */

struct ebb_model {
    int32_t kv[FCTX];
    uint32_t evals, rows;
    int32_t skew; /* a draft model that guesses differently: favourite + skew at some places */
};

uint32_t ebb_model_n_ctx(const struct ebb_model *m)
{
    (void)m;
    return FCTX;
}

uint32_t ebb_model_n_vocab(const struct ebb_model *m)
{
    (void)m;
    return FV;
}

uint32_t ebb_model_n_seq(const struct ebb_model *m)
{
    (void)m;
    return 1;
}

static float noise(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t h = a * 2654435761u ^ (b + 0x9e3779b9u) * 40503u ^ c * 2246822519u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (float)(h & 0xffff) / 65536.0f;
}

/* The favourite continuation: a cycle of period 5 over tokens 1..5, with a detour at every
 * 13th position, so that drafts are often right and sometimes wrong. */
static void fake_row(const struct ebb_model *m, uint32_t p, float *row)
{
    int32_t t = m->kv[p], prev = p ? m->kv[p - 1] : 0;
    int32_t next = p % 13 == 12 ? (t + 7) % FV : t % 5 + 1;
    if (m->skew && p % 3 == 0)
        next = (next + m->skew) % FV;
    for (uint32_t v = 0; v < FV; v++)
        row[v] = noise(p, (uint32_t)(t * FV + prev), v);
    row[next] += 5.0f;
}

ebb_err ebb_model_eval(struct ebb_model *m, uint32_t seq, const int32_t *tokens, uint32_t n,
                       uint32_t pos, struct ebb_model_out *out, struct ebb_diag *diag)
{
    (void)seq;
    if (pos + n > FCTX)
        return ebb_diag_set(diag, EBB_ECTX, "fake: past the context");
    m->evals++;
    m->rows += n;
    /* A pass costs 400 us plus 40 us a row, as a streamed pass might: the adaptation times it. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double want = 400e-6 + 40e-6 * n, took;
    do {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    } while (took < want);
    for (uint32_t i = 0; i < n; i++)
        m->kv[pos + i] = tokens[i];
    for (uint32_t i = 0; i < n; i++) {
        if (out->logits_all)
            fake_row(m, pos + i, out->logits_all + (size_t)i * FV);
    }
    if (out->logits)
        fake_row(m, pos + n - 1, out->logits);
    if (out->top_k) {
        float row[FV];
        fake_row(m, pos + n - 1, row);
        uint32_t b = 0;
        for (uint32_t v = 1; v < FV; v++)
            b = row[v] > row[b] ? v : b;
        out->top_ids[0] = (int32_t)b;
        out->top_logits[0] = row[b];
    }
    return EBB_OK;
}

/* ---- helpers ---- */

static struct ebb_spec *make_spec(uint32_t draft_max, bool fixed, uint32_t cap)
{
    struct ebb_spec_params p;
    ebb_spec_params_defaults(&p);
    p.draft_max = draft_max;
    p.fixed_k = fixed;
    struct ebb_spec *s = NULL;
    struct ebb_diag d;
    if (ebb_spec_new(&p, FV, cap, &s, &d))
        fail_msg("ebb_spec_new: %s", d.msg);
    return s;
}

static struct ebb_sampler *make_sampler(float temp, int32_t top_k, float rep, uint64_t seed,
                                        uint32_t n_vocab)
{
    struct ebb_sampling p;
    ebb_sampling_defaults(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.repeat_penalty = rep;
    p.seed = seed;
    struct ebb_sampler *s = NULL;
    struct ebb_diag d;
    if (ebb_sampler_new(&p, n_vocab, &s, &d))
        fail_msg("ebb_sampler_new: %s", d.msg);
    return s;
}

static uint32_t draft_of(const int32_t *hist, uint32_t n, uint32_t k, int32_t *draft)
{
    struct ebb_spec *s = make_spec(k, true, 64);
    ebb_spec_push(s, hist, n);
    uint32_t nd = ebb_spec_draft(s, draft, k);
    ebb_spec_free(s);
    return nd;
}

/* ---- the drafter ---- */

static void test_draft_basic(void **state)
{
    (void)state;
    int32_t d[8];
    const int32_t h[] = {1, 2, 3, 4, 9, 8, 1, 2, 3};
    assert_int_equal(draft_of(h, 9, 4, d), 4);
    assert_int_equal(d[0], 4);
    assert_int_equal(d[1], 9);
    assert_int_equal(d[2], 8);
    assert_int_equal(d[3], 1);
    /* No earlier occurrence of the last two tokens: nothing. */
    const int32_t none[] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(draft_of(none, 6, 4, d), 0);
    /* A one-token match is below ngram_min (2). */
    const int32_t one[] = {7, 1, 2, 3, 7};
    assert_int_equal(draft_of(one, 5, 4, d), 0);
    /* Too short a history. */
    assert_int_equal(draft_of(h, 2, 4, d), 0);
}

static void test_draft_longest_then_recent(void **state)
{
    (void)state;
    int32_t d[4];
    /* "5 6 7" occurs early followed by 10; "6 7" later followed by 11: the longer one wins. */
    const int32_t h[] = {5, 6, 7, 10, 0, 0, 9, 6, 7, 11, 0, 5, 6, 7};
    assert_int_equal(draft_of(h, 14, 1, d), 1);
    assert_int_equal(d[0], 10);
    /* Equal lengths: the most recent wins. */
    const int32_t r[] = {6, 7, 10, 0, 9, 6, 7, 11, 0, 4, 6, 7};
    assert_int_equal(draft_of(r, 12, 1, d), 1);
    assert_int_equal(d[0], 11);
}

static void test_draft_period(void **state)
{
    (void)state;
    int32_t d[6];
    /* The continuation runs into the suffix: the period repeats. */
    const int32_t h[] = {1, 2, 1, 2};
    assert_int_equal(draft_of(h, 4, 6, d), 6);
    const int32_t want[] = {1, 2, 1, 2, 1, 2};
    assert_memory_equal(d, want, sizeof(want));
    const int32_t a[] = {3, 3, 3};
    assert_int_equal(draft_of(a, 3, 3, d), 3);
    assert_true(d[0] == 3 && d[1] == 3 && d[2] == 3);
}

static void test_draft_limits(void **state)
{
    (void)state;
    int32_t d[8];
    struct ebb_spec_params p;
    ebb_spec_params_defaults(&p);
    p.draft_max = 8;
    p.draft_min = 3;
    p.fixed_k = true;
    struct ebb_spec *s = NULL;
    assert_int_equal(ebb_spec_new(&p, FV, 16, &s, NULL), EBB_OK);
    const int32_t h[] = {1, 2, 3, 4, 5, 6, 1, 2};
    ebb_spec_push(s, h, 8);
    assert_int_equal(ebb_spec_draft(s, d, 2), 0); /* the caller's cap below draft_min */
    assert_int_equal(ebb_spec_draft(s, d, 5), 5);
    assert_int_equal(d[0], 3);
    /* The history keeps the newest tokens past its capacity: 16 pushes later the old "1 2"
     * is forgotten, the recent one still matches. */
    for (int32_t i = 0; i < 16; i++)
        ebb_spec_push(s, &(int32_t){20 + i % 8}, 1);
    int32_t tail[] = {1, 2};
    ebb_spec_push(s, tail, 2);
    assert_int_equal(ebb_spec_draft(s, d, 8), 0);
    ebb_spec_push(s, (int32_t[]){9, 1, 2}, 3);
    assert_int_equal(ebb_spec_draft(s, d, 8), 8);
    assert_int_equal(d[0], 9);
    ebb_spec_reset(s);
    assert_int_equal(ebb_spec_draft(s, d, 8), 0);
    ebb_spec_free(s);

    /* Bad settings are refused with a reason. */
    struct ebb_diag dg;
    p.draft_max = 0;
    assert_int_equal(ebb_spec_new(&p, FV, 16, &s, &dg), EBB_EINVAL);
    p.draft_max = EBB_SPEC_DRAFT_CAP + 1;
    assert_int_equal(ebb_spec_new(&p, FV, 16, &s, &dg), EBB_EINVAL);
    p.draft_max = 4;
    p.draft_min = 5;
    assert_int_equal(ebb_spec_new(&p, FV, 16, &s, &dg), EBB_EINVAL);
    assert_non_null(strstr(dg.msg, "draft_min"));
    p.draft_min = 1;
    p.ngram_min = 3;
    p.ngram_max = 2;
    assert_int_equal(ebb_spec_new(&p, FV, 16, &s, &dg), EBB_EINVAL);
}

/* ---- verification ---- */

static void test_verify_greedy(void **state)
{
    (void)state;
    struct ebb_sampler *smp = make_sampler(0, 0, 1.0f, 1, 4);
    /* Argmaxes 2, 1, 3, 0. */
    const float base[4][4] = {{0, 1, 5, 2}, {0, 4, 1, 2}, {1, 0, 0, 3}, {9, 0, 0, 3}};
    float rows[4][4];
    int32_t out[4];
    uint32_t n = 0;
    struct {
        int32_t draft[3];
        uint32_t nd, n_out;
        int32_t last;
    } cases[] = {
        {{2, 1, 3}, 3, 4, 0}, /* all accepted, then the bonus token */
        {{2, 1, 0}, 3, 3, 3}, /* third rejected: the correction is row 2's argmax */
        {{1, 1, 3}, 3, 1, 2}, /* first rejected */
        {{0}, 0, 1, 2},       /* no drafts: a plain step */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        memcpy(rows, base, sizeof(rows));
        assert_int_equal(
            ebb_spec_verify(smp, &rows[0][0], 4, cases[c].draft, cases[c].nd, out, &n, NULL),
            EBB_OK);
        assert_int_equal(n, cases[c].n_out);
        for (uint32_t i = 0; i + 1 < n; i++)
            assert_int_equal(out[i], cases[c].draft[i]);
        assert_int_equal(out[n - 1], cases[c].last);
    }
    ebb_sampler_free(smp);
}

/* Random rows and drafts (right with probability 0.7): verification must give exactly the
 * tokens that plain sampling of the same rows gives with the same seed, penalties included. */
static void verify_matches_plain(float temp, int32_t top_k, float rep)
{
    enum { V = 24, R = 9 };
    struct ebb_sampler *a = make_sampler(temp, top_k, rep, 99, V);
    struct ebb_sampler *b = make_sampler(temp, top_k, rep, 99, V);
    float rows[R][V], copy[V];
    int32_t draft[R - 1], out[R];
    uint32_t checked = 0, accepted = 0;
    for (uint32_t step = 0; step < 400; step++) {
        for (uint32_t r = 0; r < R; r++)
            for (uint32_t v = 0; v < V; v++)
                rows[r][v] = 3.0f * noise(step, r, v) + (v == (step + r) % 5 ? 2.0f : 0.0f);
        uint32_t nd = step % R;
        for (uint32_t j = 0; j < nd; j++)
            draft[j] = noise(step, j, 7) < 0.7f ? (int32_t)((step + j) % 5) : (int32_t)(j % V);
        /* Plain: sample row j as a single-token step would, until it leaves the drafts. */
        int32_t want[R];
        uint32_t nw = 0;
        for (uint32_t j = 0; j <= nd; j++) {
            memcpy(copy, rows[j], sizeof(copy));
            int32_t t;
            assert_int_equal(ebb_sampler_sample(b, copy, &t, NULL), EBB_OK);
            ebb_sampler_accept(b, t);
            want[nw++] = t;
            if (j == nd || t != draft[j])
                break;
        }
        uint32_t n = 0;
        assert_int_equal(ebb_spec_verify(a, &rows[0][0], V, draft, nd, out, &n, NULL), EBB_OK);
        assert_int_equal(n, nw);
        assert_memory_equal(out, want, sizeof(int32_t) * n);
        checked += n;
        accepted += n - 1;
    }
    assert_true(checked > 400 && accepted > 50);
    ebb_sampler_free(a);
    ebb_sampler_free(b);
}

static void test_verify_matches_plain(void **state)
{
    (void)state;
    verify_matches_plain(0.0f, 0, 1.0f); /* greedy */
    verify_matches_plain(0.0f, 0, 1.3f); /* greedy with a repeat penalty over accepted drafts */
    verify_matches_plain(1.0f, 0, 1.0f); /* sampling */
    verify_matches_plain(0.7f, 8, 1.2f); /* sampling with top-k and a penalty */
    verify_matches_plain(1.5f, 3, 1.0f); /* hot, narrow */
}

/* ---- the output distribution ---- */

enum { SV = 6 };
static const float stat_logits[SV] = {1.0f, 2.2f, 0.3f, 1.8f, -0.5f, 2.0f};

/* The sampler's final distribution for temperature 0.8, top-k 4, computed here on its own. */
static void final_p(double *p)
{
    const double t = 0.8;
    int keep[SV] = {0};
    for (int n = 0; n < 4; n++) { /* the 4 largest */
        int b = -1;
        for (int i = 0; i < SV; i++)
            if (!keep[i] && (b < 0 || stat_logits[i] > stat_logits[b]))
                b = i;
        keep[b] = 1;
    }
    double z = 0;
    for (int i = 0; i < SV; i++)
        z += keep[i] ? exp(stat_logits[i] / t) : 0;
    for (int i = 0; i < SV; i++)
        p[i] = keep[i] ? exp(stat_logits[i] / t) / z : 0;
}

/* Pearson's chi-square of counts against probabilities p over draws; a token of probability
 * 0 that was drawn gives infinity. */
static double chi_square(const double *count, const double *p, double draws)
{
    double x = 0;
    for (int i = 0; i < SV; i++) {
        if (p[i] == 0) {
            if (count[i] > 0)
                return INFINITY;
            continue;
        }
        double e = p[i] * draws;
        x += (count[i] - e) * (count[i] - e) / e;
    }
    return x;
}

/* 3 degrees of freedom (4 tokens kept): P(X > 21.11) = 1e-4. */
#define CHI2_3DF_1E4 21.11

static void test_verify_distribution(void **state)
{
    (void)state;
    double p[SV];
    final_p(p);
    struct ebb_sampling sp;
    ebb_sampling_defaults(&sp);
    sp.temperature = 0.8f;
    sp.top_k = 4;
    sp.seed = 2026;
    struct ebb_sampler *smp = NULL;
    assert_int_equal(ebb_sampler_new(&sp, SV, &smp, NULL), EBB_OK);
    const int N = 200000;
    /* Drafts of every kind: likely (1), middling (0), and outside the top-k (4, p = 0). */
    const int32_t drafts[] = {1, 0, 4};
    for (size_t c = 0; c < sizeof(drafts) / sizeof(drafts[0]); c++) {
        int32_t x = drafts[c];
        double count[SV] = {0}, rej[SV] = {0}, n_acc = 0;
        for (int i = 0; i < N; i++) {
            float rows[2][SV];
            memcpy(rows[0], stat_logits, sizeof(stat_logits));
            memcpy(rows[1], stat_logits, sizeof(stat_logits));
            int32_t out[2];
            uint32_t n = 0;
            assert_int_equal(ebb_spec_verify(smp, &rows[0][0], SV, &x, 1, out, &n, NULL), EBB_OK);
            count[out[0]] += 1;
            if (n == 2)
                n_acc += 1;
            else
                rej[out[0]] += 1;
        }
        /* The first token follows p whatever the draft. */
        assert_true(chi_square(count, p, N) < CHI2_3DF_1E4);
        /* The draft is accepted with probability p(x) (5 standard errors). */
        double se = sqrt(p[x] * (1 - p[x]) / N) + 1e-9;
        assert_true(fabs(n_acc / N - p[x]) < 5 * se);
        /* After a rejection, the token follows p without x, renormalised. */
        if (p[x] < 1) {
            double q[SV], nr = N - n_acc;
            for (int i = 0; i < SV; i++)
                q[i] = i == x ? 0 : p[i] / (1 - p[x]);
            assert_true(chi_square(rej, q, nr) < CHI2_3DF_1E4); /* at most 3 free cells */
        }
    }
    ebb_sampler_free(smp);
}

/* The test's power: a plausible wrong rule (accept with probability p(x), else draw from p
 * without removing x) must fail the same bound. */
static void test_distribution_test_catches_wrong_rule(void **state)
{
    (void)state;
    double p[SV];
    final_p(p);
    struct ebb_sampling sp;
    ebb_sampling_defaults(&sp);
    sp.temperature = 0.8f;
    sp.top_k = 4;
    sp.seed = 5;
    struct ebb_sampler *smp = NULL;
    assert_int_equal(ebb_sampler_new(&sp, SV, &smp, NULL), EBB_OK);
    const int N = 200000;
    const int32_t x = 0;
    double count[SV] = {0};
    uint64_t lcg = 12345;
    for (int i = 0; i < N; i++) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(lcg >> 11) * 0x1p-53;
        int32_t t = x;
        if (u >= p[x]) {
            float row[SV];
            memcpy(row, stat_logits, sizeof(row));
            assert_int_equal(ebb_sampler_sample(smp, row, &t, NULL), EBB_OK);
        }
        count[t] += 1;
    }
    assert_true(chi_square(count, p, N) > CHI2_3DF_1E4);
    ebb_sampler_free(smp);
}

/* ---- adaptation ---- */

static void test_adaptive_k(void **state)
{
    (void)state;
    struct ebb_spec *s = make_spec(8, false, 64);
    struct ebb_spec_stats st;
    ebb_spec_stats(s, &st);
    assert_true(st.k >= 1 && st.k <= 8); /* the prior */
    /* The first pass of each size is not timed: here the first of 5 rows took 50 times longer
     * (a kernel build), which would make rows look dear for many passes. */
    ebb_spec_feedback(s, 0, 0, 0.100);
    ebb_spec_feedback(s, 0, 0, 0.100);
    ebb_spec_feedback(s, 4, 4, 5.0);
    for (int i = 0; i < 3; i++)
        ebb_spec_feedback(s, 4, 4, 0.100 + 0.001 * 4);
    ebb_spec_stats(s, &st);
    assert_true(st.row_cost < 0.05);
    /* Rows nearly free (a streamed pass): success drives k to the maximum. */
    for (int i = 0; i < 37; i++)
        ebb_spec_feedback(s, 4, 4, 0.100 + 0.001 * 4);
    ebb_spec_stats(s, &st);
    assert_int_equal(st.k, 8);
    assert_true(st.accept_ema > 0.9 && st.row_cost < 0.05);
    /* Drafts that keep failing drive k to 0; the drafter then only probes now and then. */
    for (int i = 0; i < 60; i++)
        ebb_spec_feedback(s, 2, 0, 0.100 + 0.001 * 2);
    ebb_spec_stats(s, &st);
    assert_int_equal(st.k, 0);
    assert_int_equal(st.passes, 101);
    assert_int_equal(st.plain, 2);
    assert_int_equal(st.drafted, 4 * 41 + 2 * 60);
    assert_int_equal(st.accepted, 4 * 41);
    int32_t h[] = {1, 2, 3, 1, 2}, d[8];
    ebb_spec_push(s, h, 5);
    uint32_t proposed = 0;
    for (int i = 0; i < 32; i++)
        proposed += ebb_spec_draft(s, d, 8);
    assert_true(proposed >= 1 && proposed <= 2);
    ebb_spec_free(s);

    /* Expensive rows (each as dear as the whole one-row pass, as on a compute-bound device):
     * even good acceptance keeps k small. */
    s = make_spec(8, false, 64);
    for (int i = 0; i < 40; i++) {
        ebb_spec_feedback(s, 3, 2, 0.010 * 4);
        ebb_spec_feedback(s, 0, 0, 0.010);
    }
    ebb_spec_stats(s, &st);
    assert_true(st.row_cost > 0.8);
    assert_true(st.k <= 2);
    ebb_spec_free(s);
}

/* ---- whole decode steps against the fake model ---- */

/* Plain decoding: one token per pass. */
static uint32_t plain_run(struct ebb_sampler *smp, const int32_t *prompt, uint32_t np,
                          uint32_t n_gen, int32_t *gen)
{
    struct ebb_model m = {0};
    float row[FV];
    struct ebb_model_out o = {.logits = row};
    assert_int_equal(ebb_model_eval(&m, 0, prompt, np, 0, &o, NULL), EBB_OK);
    uint32_t pos = np;
    for (uint32_t i = 0; i < n_gen; i++) {
        assert_int_equal(ebb_sampler_sample(smp, row, &gen[i], NULL), EBB_OK);
        ebb_sampler_accept(smp, gen[i]);
        if (i + 1 < n_gen)
            assert_int_equal(ebb_model_eval(&m, 0, &gen[i], 1, pos++, &o, NULL), EBB_OK);
    }
    return m.evals;
}

static uint32_t spec_run(struct ebb_spec *s, struct ebb_sampler *smp, const int32_t *prompt,
                         uint32_t np, uint32_t n_gen, int32_t *gen)
{
    static struct ebb_model m;
    memset(&m, 0, sizeof(m));
    float row[FV];
    struct ebb_model_out o = {.logits = row};
    assert_int_equal(ebb_model_eval(&m, 0, prompt, np, 0, &o, NULL), EBB_OK);
    assert_int_equal(ebb_sampler_sample(smp, row, &gen[0], NULL), EBB_OK);
    ebb_sampler_accept(smp, gen[0]);
    ebb_spec_push(s, prompt, np);
    ebb_spec_push(s, gen, 1);
    uint32_t n = 1, pos = np;
    while (n < n_gen) {
        uint32_t got = 0;
        assert_int_equal(
            ebb_spec_decode(s, &m, 0, smp, gen[n - 1], pos, n_gen - n, gen + n, &got, NULL),
            EBB_OK);
        assert_true(got >= 1 && got <= n_gen - n);
        n += got;
        pos += got;
    }
    return m.evals;
}

static void decode_case(float temp, bool fixed)
{
    enum { NG = 120 };
    const int32_t prompt[] = {9, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 17};
    int32_t want[NG], got[NG];
    struct ebb_sampler *a = make_sampler(temp, 0, 1.0f, 31, FV);
    struct ebb_sampler *b = make_sampler(temp, 0, 1.0f, 31, FV);
    struct ebb_spec *s = make_spec(6, fixed, FCTX);
    uint32_t plain_evals = plain_run(a, prompt, 12, NG, want);
    uint32_t spec_evals = spec_run(s, b, prompt, 12, NG, got);
    assert_memory_equal(got, want, sizeof(want));
    struct ebb_spec_stats st;
    ebb_spec_stats(s, &st);
    assert_true(st.accepted > 0);
    if (temp <= 0)
        assert_true(spec_evals < plain_evals * 2 / 3); /* the cycle is predictable */
    ebb_spec_free(s);
    ebb_sampler_free(a);
    ebb_sampler_free(b);
}

static void test_decode_identical(void **state)
{
    (void)state;
    decode_case(0.0f, false);
    decode_case(0.0f, true);
    decode_case(1.0f, false); /* same seed, same rows: the same draws */
    decode_case(1.0f, true);
}

/* A draft model: the same fake (its greedy guesses are the model's own, so every draft is
 * accepted when greedy) and a skewed one (wrong at every third position); the output equals
 * plain decoding either way, and the draft model is caught up after rejections. */
static void test_decode_draft_model(void **state)
{
    (void)state;
    enum { NG = 100 };
    const int32_t prompt[] = {9, 3, 17, 2};
    for (int32_t skew = 0; skew < 2; skew++) {
        for (int temp = 0; temp < 2; temp++) {
            static struct ebb_model dm;
            memset(&dm, 0, sizeof(dm));
            dm.skew = skew;
            int32_t want[NG], got[NG];
            struct ebb_sampler *a = make_sampler((float)temp, 0, 1.0f, 5, FV);
            struct ebb_sampler *b = make_sampler((float)temp, 0, 1.0f, 5, FV);
            struct ebb_spec *s = make_spec(4, true, FCTX);
            assert_int_equal(ebb_spec_attach_model(s, &dm, 0, NULL), EBB_OK);
            plain_run(a, prompt, 4, NG, want);
            spec_run(s, b, prompt, 4, NG, got);
            assert_memory_equal(got, want, sizeof(want));
            struct ebb_spec_stats st;
            ebb_spec_stats(s, &st);
            if (!skew && !temp)
                assert_int_equal(st.accepted, st.drafted);
            if (skew && !temp)
                assert_true(st.accepted < st.drafted && st.accepted > st.drafted / 4);
            /* The draft model never re-evaluates what it has: at most its prompt pass, one
             * catch-up token and k - 1 drafts per step. */
            assert_true(dm.rows <= 4 + (st.passes + st.plain) * 5);
            ebb_spec_free(s);
            ebb_sampler_free(a);
            ebb_sampler_free(b);
        }
    }
}

static void test_decode_limits(void **state)
{
    (void)state;
    struct ebb_model m = {0};
    struct ebb_sampler *smp = make_sampler(0, 0, 1.0f, 1, FV);
    struct ebb_spec *s = make_spec(8, true, FCTX);
    const int32_t h[] = {1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1};
    float row[FV];
    struct ebb_model_out o = {.logits = row};
    assert_int_equal(ebb_model_eval(&m, 0, h, 16, 0, &o, NULL), EBB_OK);
    ebb_spec_push(s, h, 16);
    int32_t out[9];
    uint32_t n = 0;
    /* max_new 1: no drafts at all, a plain single-token pass. */
    assert_int_equal(ebb_spec_decode(s, &m, 0, smp, 1, 15, 1, out, &n, NULL), EBB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(m.rows, 16 + 1);
    /* max_new 3: at most 2 drafts. */
    assert_int_equal(ebb_spec_decode(s, &m, 0, smp, out[0], 16, 3, out, &n, NULL), EBB_OK);
    assert_true(n >= 1 && n <= 3);
    assert_int_equal(m.rows, 16 + 1 + 3);
    /* At the end of the context: drafts shrink to fit, and past it the step fails. */
    m.rows = 0;
    assert_int_equal(ebb_spec_decode(s, &m, 0, smp, 2, FCTX - 2, 8, out, &n, NULL), EBB_OK);
    assert_true(m.rows <= 2);
    assert_int_equal(ebb_spec_decode(s, &m, 0, smp, 2, FCTX, 8, out, &n, NULL), EBB_EINVAL);
    ebb_spec_free(s);
    ebb_sampler_free(smp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draft_basic),
        cmocka_unit_test(test_draft_longest_then_recent),
        cmocka_unit_test(test_draft_period),
        cmocka_unit_test(test_draft_limits),
        cmocka_unit_test(test_verify_greedy),
        cmocka_unit_test(test_verify_matches_plain),
        cmocka_unit_test(test_verify_distribution),
        cmocka_unit_test(test_distribution_test_catches_wrong_rule),
        cmocka_unit_test(test_adaptive_k),
        cmocka_unit_test(test_decode_identical),
        cmocka_unit_test(test_decode_draft_model),
        cmocka_unit_test(test_decode_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
