/* The batched forward pass (ebb_model_eval_batch on the OpenCL engine, issue 12) against
 * separate ebb_model_eval calls of the same parts:
 *   1. a batch of 8 parts of 8 slots at different depths: single-token rows (decode, one of
 *      them past the first attention chunk) and prefill parts, one of which straddles the
 *      128-row chunk boundary; every output field (logits, logits_all, top_k, hidden_sum);
 *   2. greedy continuations of 8 prompts of different lengths, prefilled in one batch and
 *      decoded together for 32 steps, against each prompt alone;
 *   3. bad batches (a slot twice, past the context, a slot out of range) refused;
 *   4. with EBB_TEST_WIDE=1, on a second instance of N_WIDE slots, steps wider than the output
 *      head's largest group (N_OUT_MAX, 64): a batch of short prompts and a decode step of
 *      every slot in another order, some rows without outputs, against each part alone.
 * Logits within logit_tol (the batched products run the tiled matmul where a lone token runs
 * matvec, which rounds differently); argmax and greedy ids equal except where the lone run's
 * top-2 margin is below margin_tol (a near tie). Usage: test-model-batch [MODEL.gguf] (default
 * SmolLM2 in EBB_MODELS_DIR); EBB_TEST_DEVICE picks the device (default auto; "cpu": the CPU
 * device's one-pass decode); EBB_TEST_STEPS, fewer greedy steps than 32 (the ASan+UBSan pass
 * takes 8: the same code runs, and the plain build checks all 32); skips (77) without an
 * OpenCL device or the model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"

/* Observed on PoCL: SmolLM2 logits within 0.001, the qwen3-tiny model within 1e-5. With 8-bit
 * inputs (the NVIDIA default: a lone token's products quantize its normed input inside
 * matvec_q8, a batch's quantize the rows the norm kernel wrote, through matvec_q8r), the int8
 * rounding lands at different points: qwen3-tiny Q4_0 within 0.07. */
static float logit_tol = 0.02f, margin_tol = 0.05f;
/* The mixed batch's hidden sums within hs_tol of their norm. With 8-bit inputs a part alone
 * of a few rows runs matvec_q8r on int8 inputs where the batch's 194 rows run the tiles: 0.5%
 * (observed on PoCL: qwen3-tiny-k32 0.18% in Q5_K_M, 0.12% in Q6_K; qwen3-tiny 0.04% in Q4_0). */
static float hs_tol = 1e-3f;
#define N_SEQ 8
#define N_GEN 32
static int n_gen = N_GEN; /* EBB_TEST_STEPS can lower it */

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static uint32_t nv;

static float max_diff(const float *a, const float *b, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

/* The argmax of x and the margin to the runner-up. */
static int32_t argmax(const float *x, float *margin)
{
    int32_t b = 0, s = -1;
    for (uint32_t i = 1; i < nv; i++) {
        if (x[i] > x[b]) {
            s = b;
            b = (int32_t)i;
        } else if (s < 0 || x[i] > x[s]) {
            s = (int32_t)i;
        }
    }
    *margin = x[b] - x[s];
    return b;
}

static int32_t tok(int i, int k)
{
    return (int32_t)((uint32_t)(i * 7919 + k * 104729 + 13) % 20000u);
}

/* Fills slot seq with n history tokens alone. */
static ebb_err history(struct ebb_model *m, uint32_t seq, uint32_t n)
{
    static int32_t t[512];
    struct ebb_diag d = {{0}};
    for (uint32_t i = 0; i < n; i++)
        t[i] = tok((int)i, (int)seq);
    ebb_err rc = n ? ebb_model_eval(m, seq, t, n, 0, NULL, &d) : EBB_OK;
    if (rc)
        fprintf(stderr, "history: %s\n", d.msg);
    return rc;
}

/* 1. A mixed batch against the same parts alone. */
static void test_mixed(struct ebb_model *m)
{
    static const uint32_t hist[N_SEQ] = {5, 37, 0, 130, 64, 1, 300, 20};
    static const uint32_t len[N_SEQ] = {1, 1, 40, 1, 9, 1, 1, 140}; /* 194 rows: 2 chunks */
    const uint32_t ne = ebb_model_n_embd(m);
    int32_t toks[N_SEQ][140];
    float *lg[2], *all[2], *hs[2];
    static int32_t tid[2][N_SEQ][100];
    static float tv[2][N_SEQ][100];
    struct ebb_model_out out[2][N_SEQ];
    struct ebb_model_seq parts[N_SEQ];
    for (int v = 0; v < 2; v++) {
        lg[v] = malloc(sizeof(float) * nv * N_SEQ);
        all[v] = malloc(sizeof(float) * nv * (40 + 140));
        hs[v] = calloc(ne, sizeof(float));
        for (int i = 0; i < N_SEQ; i++) {
            out[v][i] = (struct ebb_model_out){.logits = lg[v] + (size_t)i * nv};
            if (i % 3 == 1) { /* top-k on rows other than the first (100: the host's) */
                out[v][i].top_k = i == 4 ? 100 : 8;
                out[v][i].top_ids = tid[v][i];
                out[v][i].top_logits = tv[v][i];
            }
        }
        out[v][2].logits_all = all[v];
        out[v][7].logits_all = all[v] + (size_t)40 * nv;
        out[v][4].hidden_sum = hs[v];
    }
    for (int i = 0; i < N_SEQ; i++) {
        for (uint32_t k = 0; k < len[i]; k++)
            toks[i][k] = tok((int)(hist[i] + k), i);
        if (history(m, (uint32_t)i, hist[i]))
            failures++;
    }
    struct ebb_diag d = {{0}};
    for (int i = 0; i < N_SEQ; i++) { /* alone */
        ebb_err rc = ebb_model_eval(m, (uint32_t)i, toks[i], len[i], hist[i], &out[0][i], &d);
        CHECK(!rc, "part %d alone: %s", i, d.msg);
    }
    for (int i = 0; i < N_SEQ; i++) /* a different order than the slots */
        parts[i] = (struct ebb_model_seq){.seq = (uint32_t)(N_SEQ - 1 - i),
                                          .tokens = toks[N_SEQ - 1 - i],
                                          .n = len[N_SEQ - 1 - i],
                                          .pos = hist[N_SEQ - 1 - i],
                                          .out = &out[1][N_SEQ - 1 - i]};
    ebb_err rc = ebb_model_eval_batch(m, parts, N_SEQ, &d);
    CHECK(!rc, "batch: %s", d.msg);
    if (rc)
        return;
    float worst = 0;
    for (int i = 0; i < N_SEQ; i++) {
        const float *a = lg[0] + (size_t)i * nv, *b = lg[1] + (size_t)i * nv;
        float md = max_diff(a, b, nv), margin;
        worst = fmaxf(worst, md);
        CHECK(md < logit_tol, "part %d (slot %d, %u rows at %u): logits differ by %g", i, i, len[i],
              hist[i], md);
        int32_t am = argmax(a, &margin), bm = argmax(b, &(float){0});
        CHECK(am == bm || margin < margin_tol, "part %d: argmax %d alone, %d batched (margin %g)",
              i, am, bm, margin);
        for (int j = 0; j < (int)out[0][i].top_k; j++) {
            int nx = j + 1 < (int)out[0][i].top_k ? j + 1 : j, pv = j > 0 ? j - 1 : j;
            CHECK(tid[0][i][j] == tid[1][i][j] || fabsf(tv[0][i][j] - tv[0][i][nx]) < margin_tol ||
                      fabsf(tv[0][i][j] - tv[0][i][pv]) < margin_tol,
                  "part %d top-k rank %d: %d alone, %d batched", i, j, tid[0][i][j], tid[1][i][j]);
            CHECK(tid[1][i][j] >= 0 && (uint32_t)tid[1][i][j] < nv &&
                      tv[1][i][j] == b[tid[1][i][j]],
                  "part %d top-k rank %d: %g is not its logit", i, j, tv[1][i][j]);
        }
    }
    float ma = max_diff(all[0], all[1], (size_t)nv * 180);
    double nr = 0;
    for (uint32_t i = 0; i < ne; i++)
        nr += (double)hs[0][i] * hs[0][i];
    float mh = max_diff(hs[0], hs[1], ne);
    printf("  mixed batch of %d parts (194 rows): last-row logits max |diff| %.5f, logits_all "
           "%.5f, hidden sum %.5f (norm %.1f)\n",
           N_SEQ, worst, ma, mh, sqrt(nr));
    CHECK(ma < logit_tol, "logits_all differ by %g", ma);
    CHECK(nr > 0 && mh < hs_tol * (float)sqrt(nr), "hidden sums differ by %g", mh);
    for (int v = 0; v < 2; v++) {
        free(lg[v]);
        free(all[v]);
        free(hs[v]);
    }
}

/* 2. Greedy continuations alone and batched. ids[i][s]: step s of prompt i; margins of the
 * lone run. */
static void test_greedy(struct ebb_model *m)
{
    static const uint32_t plen[N_SEQ] = {3, 17, 40, 5, 70, 1, 23, 50}; /* 209: 2 chunks */
    static int32_t prompt[N_SEQ][70], ids[2][N_SEQ][N_GEN];
    static float margin[N_SEQ][N_GEN];
    float *lg = malloc(sizeof(float) * nv * N_SEQ);
    struct ebb_diag d = {{0}};
    for (int i = 0; i < N_SEQ; i++)
        for (uint32_t k = 0; k < plen[i]; k++)
            prompt[i][k] = tok((int)k, 100 + i);
    for (int i = 0; i < N_SEQ; i++) { /* alone */
        struct ebb_model_out o = {.logits = lg};
        ebb_err rc = ebb_model_eval(m, (uint32_t)i, prompt[i], plen[i], 0, &o, &d);
        for (int s = 0; !rc && s < n_gen; s++) {
            ids[0][i][s] = argmax(lg, &margin[i][s]);
            if (s + 1 < n_gen)
                rc =
                    ebb_model_eval(m, (uint32_t)i, &ids[0][i][s], 1, plen[i] + (uint32_t)s, &o, &d);
        }
        CHECK(!rc, "prompt %d alone: %s", i, d.msg);
    }
    struct ebb_model_seq parts[N_SEQ];
    struct ebb_model_out outs[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) { /* all prompts in one batch (3 chunks) */
        outs[i] = (struct ebb_model_out){.logits = lg + (size_t)i * nv};
        parts[i] = (struct ebb_model_seq){
            .seq = (uint32_t)i, .tokens = prompt[i], .n = plen[i], .pos = 0, .out = &outs[i]};
    }
    ebb_err rc = ebb_model_eval_batch(m, parts, N_SEQ, &d);
    for (int s = 0; !rc && s < n_gen; s++) {
        for (int i = 0; i < N_SEQ; i++) {
            ids[1][i][s] = argmax(lg + (size_t)i * nv, &(float){0});
            parts[i].tokens = &ids[1][i][s];
            parts[i].n = 1;
            parts[i].pos = plen[i] + (uint32_t)s;
        }
        if (s + 1 < n_gen)
            rc = ebb_model_eval_batch(m, parts, N_SEQ, &d);
    }
    CHECK(!rc, "batched greedy: %s", d.msg);
    int same = 0, ties = 0;
    for (int i = 0; !rc && i < N_SEQ; i++) {
        int s = 0;
        while (s < n_gen && ids[0][i][s] == ids[1][i][s])
            s++;
        if (s == n_gen) {
            same++;
            continue;
        }
        CHECK(margin[i][s] < margin_tol,
              "prompt %d (%u tokens) step %d: %d alone, %d batched, lone top-2 margin %g", i,
              plen[i], s, ids[0][i][s], ids[1][i][s], margin[i][s]);
        ties += margin[i][s] < margin_tol;
    }
    printf("  greedy, %d prompts x %d steps: %d identical, %d diverge at a near tie\n", N_SEQ,
           n_gen, same, ties);
    free(lg);
}

/* 3. Bad batches. */
static void test_errors(struct ebb_model *m)
{
    const int32_t t[2] = {1, 2};
    struct ebb_diag d = {{0}};
    struct ebb_model_seq p[2] = {{.seq = 3, .tokens = t, .n = 1, .pos = 0},
                                 {.seq = 3, .tokens = t, .n = 2, .pos = 4}};
    ebb_err rc = ebb_model_eval_batch(m, p, 2, &d);
    CHECK(rc == EBB_EINVAL && strstr(d.msg, "twice"), "a slot twice: %s (%s)", ebb_err_name(rc),
          d.msg);
    p[1].seq = 4;
    p[1].pos = ebb_model_n_ctx(m) - 1;
    rc = ebb_model_eval_batch(m, p, 2, &d);
    CHECK(rc == EBB_ECTX && strstr(d.msg, "context"), "past the context: %s (%s)", ebb_err_name(rc),
          d.msg);
    p[1].pos = 0;
    p[1].seq = N_SEQ;
    rc = ebb_model_eval_batch(m, p, 2, &d);
    CHECK(rc == EBB_EINVAL && strstr(d.msg, "slot"), "slot out of range: %s (%s)", ebb_err_name(rc),
          d.msg);
    rc = ebb_model_eval_batch(m, p, 0, &d);
    CHECK(rc == EBB_EINVAL, "an empty batch: %s", ebb_err_name(rc));
}

static double now_s(void);

/* 4. Steps of N_WIDE slots (the engine's output head takes the wanted rows in groups of at most
 * 64, the rows that follow each other in one copy): a batch of 2-4-token prompts, then one
 * token each in reverse slot order; every seventh part wants no output, every fourth a top-k. */
#define N_WIDE 72
static void test_wide(const struct ebb_model_params *base)
{
    struct ebb_model_params p = *base;
    p.n_seq = N_WIDE;
    p.n_ctx = 64;
    struct ebb_model *m = NULL;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_model_open(&p, &m, &d);
    CHECK(!rc, "open with %d slots: %s", N_WIDE, d.msg);
    if (rc)
        return;
    float *lg[2] = {calloc((size_t)nv * N_WIDE, sizeof(float)),
                    calloc((size_t)nv * N_WIDE, sizeof(float))};
    static int32_t toks[N_WIDE][4], tid[2][N_WIDE][8];
    static float tv[2][N_WIDE][8];
    static uint32_t hist[N_WIDE], len[N_WIDE];
    struct ebb_model_out out[2][N_WIDE];
    struct ebb_model_seq parts[N_WIDE];
    float worst = 0;
    int rows = 0;
    for (int step = 0; step < 2 && lg[0] && lg[1]; step++) {
        for (int i = 0; i < N_WIDE; i++) {
            len[i] = step ? 1 : 2 + (uint32_t)i % 3;
            for (uint32_t k = 0; k < len[i]; k++)
                toks[i][k] = tok((int)(hist[i] + k), 200 + i);
            for (int v = 0; v < 2; v++) {
                out[v][i] = (struct ebb_model_out){.logits = lg[v] + (size_t)i * nv};
                if (i % 4 == 1)
                    out[v][i] = (struct ebb_model_out){
                        .top_k = 8, .top_ids = tid[v][i], .top_logits = tv[v][i]};
            }
        }
        for (int i = 0; i < N_WIDE; i++) { /* alone */
            rc = ebb_model_eval(m, (uint32_t)i, toks[i], len[i], hist[i], &out[0][i], &d);
            CHECK(!rc, "wide step %d, slot %d alone: %s", step, i, d.msg);
        }
        for (int i = 0; i < N_WIDE; i++) {
            int s = step ? N_WIDE - 1 - i : i;
            parts[i] = (struct ebb_model_seq){.seq = (uint32_t)s,
                                              .tokens = toks[s],
                                              .n = len[s],
                                              .pos = hist[s],
                                              .out = s % 7 == 3 ? NULL : &out[1][s]};
        }
        rc = ebb_model_eval_batch(m, parts, N_WIDE, &d);
        CHECK(!rc, "wide step %d batched: %s", step, d.msg);
        for (int i = 0; !rc && i < N_WIDE; i++) {
            if (i % 7 == 3)
                continue;
            rows++;
            if (i % 4 == 1) {
                for (int j = 0; j < 8; j++) {
                    int nx = j < 7 ? j + 1 : j, pv = j ? j - 1 : j;
                    CHECK(tid[0][i][j] == tid[1][i][j] ||
                              fabsf(tv[0][i][j] - tv[0][i][nx]) < margin_tol ||
                              fabsf(tv[0][i][j] - tv[0][i][pv]) < margin_tol,
                          "wide step %d slot %d top-k rank %d: %d alone, %d batched", step, i, j,
                          tid[0][i][j], tid[1][i][j]);
                    CHECK(fabsf(tv[0][i][j] - tv[1][i][j]) < logit_tol,
                          "wide step %d slot %d top-k rank %d: logit %g alone, %g batched", step, i,
                          j, tv[0][i][j], tv[1][i][j]);
                }
                continue;
            }
            float md = max_diff(lg[0] + (size_t)i * nv, lg[1] + (size_t)i * nv, nv);
            worst = fmaxf(worst, md);
            CHECK(md < logit_tol, "wide step %d slot %d: logits differ by %g", step, i, md);
        }
        for (int i = 0; i < N_WIDE; i++)
            hist[i] += len[i];
    }
    printf("  %d slots, a batch and a decode step: %d rows with outputs, logits max |diff| %.5f\n",
           N_WIDE, rows, worst);
    CHECK(rows == 2 * (N_WIDE - N_WIDE / 7 - (N_WIDE % 7 > 3)), "%d rows checked", rows);
    free(lg[0]);
    free(lg[1]);
    ebb_model_close(m);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    char path[1024];
    const char *dir = getenv("EBB_MODELS_DIR"), *home = getenv("HOME");
    if (argc > 1)
        snprintf(path, sizeof(path), "%s", argv[1]);
    else if (dir)
        snprintf(path, sizeof(path), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else
        snprintf(path, sizeof(path), "%s/.local/share/ebb/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : "");
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("SKIP: no model at %s\n", path);
        return 77;
    }
    fclose(f);
    struct ebb_model *m = NULL;
    struct ebb_diag d = {{0}};
    const char *dev = getenv("EBB_TEST_DEVICE"); /* default auto; "cpu" for the CPU device */
    struct ebb_model_params p = {
        .path = path, .device = dev && *dev ? dev : "auto", .n_ctx = 512, .n_seq = N_SEQ};
    ebb_err rc = ebb_model_open(&p, &m, &d);
    if (rc == EBB_ENOTFOUND || rc == EBB_ENOTIMPL) {
        printf("SKIP: no OpenCL device (%s)\n", d.msg);
        return 77;
    }
    if (rc) {
        fprintf(stderr, "open: %s: %s\n", ebb_err_name(rc), d.msg);
        return 1;
    }
    nv = ebb_model_n_vocab(m);
    if (getenv("EBB_TEST_STEPS") && atoi(getenv("EBB_TEST_STEPS")) > 0 &&
        atoi(getenv("EBB_TEST_STEPS")) < N_GEN)
        n_gen = atoi(getenv("EBB_TEST_STEPS"));
    printf("%s on %s\n", path, ebb_model_device_name(m));
    if (strstr(ebb_model_device_name(m), "8-bit decode inputs")) {
        logit_tol = 0.15f;
        margin_tol = 0.3f;
        hs_tol = 5e-3f;
    }
    double t0 = now_s();
    test_mixed(m);
    double t1 = now_s();
    test_greedy(m);
    printf("  (%.1f s, %.1f s)\n", t1 - t0, now_s() - t1);
    test_errors(m);
    ebb_model_close(m);
    if (getenv("EBB_TEST_WIDE") && atoi(getenv("EBB_TEST_WIDE"))) {
        t0 = now_s();
        test_wide(&p);
        printf("  (%.1f s)\n", now_s() - t0);
    }
    printf("%s (%d failures)\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
