/* The OpenCL forward pass (runtime/model/model-cl.c) on the real SmolLM2, against the reference
 * backend and against itself: prompt logits vs "ref" within 0.05 (both keep activations in
 * fp32; observed ~0.01), device top-k equal to the logits' own order, prefill split across
 * chunks and calls equal to one call within 0.02 (the last token, evaluated alone by the decode
 * path, within 0.5 where decode quantizes its inputs to 8 bits: observed 0.29 on PoCL with
 * EBB_CL_MVQ16=1 EBB_CL_MVQ8=1 EBB_CL_BLOCKDEC=0), slots that do not disturb each other (bit
 * for bit), and request errors. Skips (77) without an OpenCL device or without the model
 * (EBB_MODELS_DIR, default ~/.local/share/ebb/models). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

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

static float max_diff(const float *a, const float *b, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

static ebb_err eval(struct ebb_model *m, uint32_t seq, const int32_t *t, uint32_t n, uint32_t pos,
                    float *logits, float *all)
{
    struct ebb_diag d = {{0}};
    struct ebb_model_out o = {.logits = logits, .logits_all = all};
    ebb_err rc = ebb_model_eval(m, seq, t, n, pos, &o, &d);
    if (rc)
        fprintf(stderr, "eval: %s: %s\n", ebb_err_name(rc), d.msg);
    return rc;
}

int main(void)
{
    char path[1024];
    const char *dir = getenv("EBB_MODELS_DIR"), *home = getenv("HOME");
    if (dir)
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
    struct ebb_model *cl = NULL, *ref = NULL;
    struct ebb_diag d = {{0}};
    struct ebb_model_params p = {.path = path, .device = "auto", .n_ctx = 256, .n_seq = 2};
    ebb_err rc = ebb_model_open(&p, &cl, &d);
    if (rc == EBB_ENOTFOUND || rc == EBB_ENOTIMPL) {
        printf("SKIP: no OpenCL device (%s)\n", d.msg);
        return 77;
    }
    if (rc) {
        fprintf(stderr, "open: %s: %s\n", ebb_err_name(rc), d.msg);
        return 1;
    }
    p.device = "ref";
    p.n_seq = 1;
    if ((rc = ebb_model_open(&p, &ref, &d))) {
        fprintf(stderr, "open ref: %s: %s\n", ebb_err_name(rc), d.msg);
        return 1;
    }
    printf("device: %s\n", ebb_model_device_name(cl));
    const uint32_t nv = ebb_model_n_vocab(cl);
    float *a = malloc(sizeof(float) * nv), *b = malloc(sizeof(float) * nv);
    enum { N = 150 };
    float *all1 = malloc(sizeof(float) * nv * N), *all2 = malloc(sizeof(float) * nv * N);
    int32_t toks[N];
    for (int i = 0; i < N; i++)
        toks[i] = (int32_t)((i * 7919 + 13) % 20000);
    const int32_t prompt[5] = {504, 3575, 282, 4649, 314}; /* "The capital of France is" */

    /* 1. Against the reference. With 8-bit inputs (the NVIDIA default), products of up to
     * tu.q8r_max rows (this prompt, the 49-token chunk below) quantize their inputs to int8 as
     * llama.cpp's CUDA backend does: SmolLM2 logits within 0.72 of the fp32 reference. */
    bool q8 = strstr(ebb_model_device_name(cl), "8-bit decode inputs") != NULL;
    if (!eval(cl, 0, prompt, 5, 0, a, NULL) && !eval(ref, 0, prompt, 5, 0, b, NULL)) {
        float md = max_diff(a, b, nv);
        printf("  logits vs ref: max |diff| %.5f\n", md);
        CHECK(md < (q8 ? 1.0f : 0.05f), "logits vs ref differ by %g", md);
    } else {
        failures++;
    }

    /* 2. Device top-k against the logits' own order (ties to the smaller id). */
    int32_t ids[8];
    float vals[8];
    struct ebb_model_out o = {.logits = a, .top_k = 8, .top_ids = ids, .top_logits = vals};
    rc = ebb_model_eval(cl, 0, prompt, 5, 0, &o, &d);
    CHECK(!rc, "eval with top_k: %s", d.msg);
    for (int j = 0; !rc && j < 8; j++) {
        int32_t best = -1;
        for (uint32_t i = 0; i < nv; i++) {
            bool taken = false;
            for (int q = 0; q < j; q++)
                taken = taken || ids[q] == (int32_t)i;
            if (!taken && (best < 0 || a[i] > a[best]))
                best = (int32_t)i;
        }
        CHECK(ids[j] == best && vals[j] == a[best], "top-k rank %d: %d vs %d", j, ids[j], best);
    }

    /* 2b. k beyond the device kernel's 64: the host path, same contract. */
    enum { BIGK = 100 };
    int32_t bids[BIGK];
    float bvals[BIGK];
    struct ebb_model_out ob = {.top_k = BIGK, .top_ids = bids, .top_logits = bvals};
    rc = ebb_model_eval(cl, 0, prompt, 5, 0, &ob, &d);
    CHECK(!rc, "eval with top_k %d: %s", BIGK, d.msg);
    for (int j = 0; !rc && j < BIGK; j++) {
        bool ok = bvals[j] == a[bids[j]];
        if (j > 0)
            ok = ok &&
                 (bvals[j] < bvals[j - 1] || (bvals[j] == bvals[j - 1] && bids[j] > bids[j - 1]));
        CHECK(ok, "top-%d rank %d: id %d value %g", BIGK, j, bids[j], bvals[j]);
    }
    if (!rc) {
        int above = 0; /* nothing outside the list may beat its last entry */
        for (uint32_t i = 0; i < nv; i++)
            above += a[i] > bvals[BIGK - 1];
        CHECK(above <= BIGK - 1, "%d logits above the %d-th", above, BIGK);
        CHECK(bids[0] == ids[0] && bids[7] == ids[7], "host and device top-k disagree");
    }

    /* 3. Prefill in one call (chunks of 128 + 22 inside) vs three calls (100 + 49 + 1). */
    if (!eval(cl, 1, toks, N, 0, NULL, all1) && !eval(cl, 1, toks, 100, 0, NULL, all2) &&
        !eval(cl, 1, toks + 100, 49, 100, NULL, all2 + (size_t)100 * nv) &&
        !eval(cl, 1, toks + 149, 1, 149, NULL, all2 + (size_t)149 * nv)) {
        float md = max_diff(all1, all2, (size_t)(N - 1) * nv);
        float mdl = max_diff(all1 + (size_t)(N - 1) * nv, all2 + (size_t)(N - 1) * nv, nv);
        printf("  %d-token prefill, one call vs three: max |diff| %.5f, last token (decode%s) "
               "%.5f\n",
               N, md, q8 ? ", 8-bit inputs" : "", mdl);
        CHECK(md < (q8 ? 1.0f : 0.02f), "chunked prefill differs by %g", md);
        /* (8-bit: 0.354 with the batch's norm and SwiGLU run before its quantization, 0.538
         * with them folded into it as decode folds them; the chunked prefill 0.621 / 0.565.) */
        CHECK(mdl < (q8 ? 0.75f : 0.02f), "decode of the last token differs by %g", mdl);
    } else {
        failures++;
    }

    /* 4. Slots: the same calls on slot 0 give the same logits whatever slot 1 did between. */
    const int32_t next = 7042;
    eval(cl, 0, prompt, 5, 0, NULL, NULL);
    eval(cl, 0, &next, 1, 5, a, NULL);
    eval(cl, 0, prompt, 5, 0, NULL, NULL);
    eval(cl, 1, toks, 40, 0, NULL, NULL);
    eval(cl, 0, &next, 1, 5, b, NULL);
    CHECK(max_diff(a, b, nv) == 0.0f, "slot 1 disturbed slot 0: %g", max_diff(a, b, nv));

    /* 5. Embedding output (hidden_sum): the 150-token sum of final-normed hidden states
     * (chunks of 128 + 22 inside) against the reference, relative to its norm.
     * EBB_TEST_SUM_TOKENS=n sums the first n instead: the ASan+UBSan pass takes 24, as the
     * instrumented reference spent most of that run's two minutes on the 150 (the 150 are
     * checked in the plain build; chunked prefill is check 3's). */
    uint32_t n_sum = N;
    if (getenv("EBB_TEST_SUM_TOKENS") && atoi(getenv("EBB_TEST_SUM_TOKENS")) > 0 &&
        atoi(getenv("EBB_TEST_SUM_TOKENS")) < N)
        n_sum = (uint32_t)atoi(getenv("EBB_TEST_SUM_TOKENS"));
    const uint32_t ne = ebb_model_n_embd(cl);
    float *hc = calloc(ne, sizeof(float)), *hr = calloc(ne, sizeof(float));
    struct ebb_model_out oc = {.hidden_sum = hc}, orf = {.hidden_sum = hr};
    rc = ebb_model_eval(cl, 1, toks, n_sum, 0, &oc, &d);
    CHECK(!rc, "hidden_sum on the device: %s", d.msg);
    rc = rc ? rc : ebb_model_eval(ref, 0, toks, n_sum, 0, &orf, &d);
    CHECK(!rc, "hidden_sum on ref: %s", d.msg);
    if (!rc) {
        double nr = 0;
        for (uint32_t i = 0; i < ne; i++)
            nr += (double)hr[i] * hr[i];
        float md = max_diff(hc, hr, ne);
        printf("  hidden sum of %u tokens vs ref: max |diff| %.4f (norm %.1f)\n", n_sum, md,
               sqrt(nr));
        CHECK(nr > 0 && md < 0.01f * (float)sqrt(nr), "hidden sum differs by %g", md);
    }
    free(hc);
    free(hr);

    /* 6. KV copy (ebb_model_kv_copy): the prompt prefilled in slot 0, copied into slot 1 (which
     * holds the 150 tokens above), continues greedily in slot 1 exactly as in slot 0. */
    enum { NG = 8 };
    float *ga = malloc(sizeof(float) * nv * NG), *gb = malloc(sizeof(float) * nv * NG);
    int32_t ia[NG], ib[NG];
    rc = eval(cl, 0, prompt, 5, 0, a, NULL);
    rc = rc ? rc : ebb_model_kv_copy(cl, 0, 1, 5, &d);
    CHECK(!rc, "KV copy: %s", d.msg);
    for (int s = 0; !rc && s < 2; s++) {
        int32_t t = 0;
        for (uint32_t i = 1; i < nv; i++)
            t = a[i] > a[t] ? (int32_t)i : t;
        for (int i = 0; !rc && i < NG; i++) {
            float *row = (s ? gb : ga) + (size_t)i * nv;
            (s ? ib : ia)[i] = t;
            rc = eval(cl, (uint32_t)s, &t, 1, 5 + (uint32_t)i, row, NULL);
            t = 0;
            for (uint32_t k = 1; k < nv; k++)
                t = row[k] > row[t] ? (int32_t)k : t;
        }
    }
    if (!rc) {
        CHECK(!memcmp(ia, ib, sizeof(ia)), "greedy ids differ after the KV copy");
        CHECK(max_diff(ga, gb, (size_t)nv * NG) == 0.0f, "logits after the KV copy differ by %g",
              max_diff(ga, gb, (size_t)nv * NG));
        printf("  KV copy of 5 positions: %d greedy tokens equal in both slots\n", NG);
    }
    rc = ebb_model_kv_copy(cl, 0, 2, 5, &d);
    CHECK(rc == EBB_EINVAL, "KV copy to slot 2 of 2: %s", ebb_err_name(rc));
    free(ga);
    free(gb);

    /* 7. Request errors. */
    struct ebb_model_out none = {0};
    rc = ebb_model_eval(cl, 0, toks, 10, 250, &none, &d);
    CHECK(rc == EBB_ECTX, "past the context: %s", ebb_err_name(rc));
    int32_t bad = (int32_t)nv;
    rc = ebb_model_eval(cl, 0, &bad, 1, 0, &none, &d);
    CHECK(rc != EBB_OK, "token id %d accepted", bad);
    rc = ebb_model_eval(cl, 2, prompt, 1, 0, &none, &d);
    CHECK(rc != EBB_OK, "slot 2 of 2 accepted");

    ebb_model_close(cl);
    ebb_model_close(ref);
    free(a);
    free(b);
    free(all1);
    free(all2);
    printf("%s (%d failures)\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
