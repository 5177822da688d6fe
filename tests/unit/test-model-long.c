/* Long-context correctness (issue 28): the start of tests/data/perplexity/coriolanus.txt, a few
 * thousand tokens, through the OpenCL engine's chunked prefill (each piece given to
 * ebb_model_eval is cut into the engine's own chunks: 128 positions on CPUs, 512 on GPUs, or
 * EBB_CL_BATCH) and greedy decode, against the reference backend ("ref", fp32 throughout) on
 * the same tokens. The prompt goes in pieces of PIECE tokens; after each piece the last
 * position's logits are compared, then the greedy continuation after the whole prompt and the
 * logits of each of its steps.
 *
 * The reference takes minutes per thousand tokens here (2.5 tok/s on 2 loaded cores), so its
 * results are committed: tests/data/long/<name>.json holds, per checkpoint, the reference's
 * top-100 logits and top-2 margin, and the greedy ids with their top-100 logits and margins,
 * written by this program on the reference (EBB_TEST_LONG_WRITE). The 'slow' suite runs the
 * reference again (EBB_TEST_LONG_LIVE=1) and holds the committed data to it as well.
 *
 * Environment:
 *   EBB_TEST_LONG      data name under tests/data/long (default "smollm2-f16"), or a path
 *                      to a data file of one's own (with a '/'). The data names the model
 *                      file (under EBB_MODELS_DIR; the test skips without it), the prompt
 *                      length, the KV cache type and the steps.
 *   EBB_TEST_DEVICE    the engine under test (default "auto": the OpenCL device, PoCL in CI).
 *   EBB_TEST_LONG_LIVE 1: evaluate the reference too, compare the engine with it and the
 *                      committed data with it (fp32 against fp32: 0.02).
 *   EBB_TEST_LONG_WRITE=FILE with EBB_TEST_DEVICE=ref: write the data (EBB_TEST_LONG_MODEL,
 *                      EBB_TEST_LONG_TOKENS and EBB_TEST_LONG_STEPS say what to run).
 *
 * KV cache types: the data says "kv": "f16", the cache it was written for. EBB_TEST_KV=q8_0
 * opens the engine with the 8-bit cache (struct ebb_model_params.kv_type, --kv-type q8_0) on
 * the same data, with a bound of its own (kv_tol below); the reference, fp32, stays the
 * yardstick.
 *
 * Bounds, as test-model.c sets them for the OpenCL engine against fp32 (test_tiny_model,
 * test_prefill_vs_decode): the engine stores K and V in fp16 and keeps some activations in
 * fp16 (relative 2^-11 per value); the logits here reach 29 (SmolLM2) and 34 (Gemma 3), where
 * one such rounding is 0.014-0.016. A long prompt adds more rounded terms to each attention sum
 * but averages them, so the error does not grow with the length: on PoCL (2026-11-28) the worst
 * over both models, both chunk sizes, every checkpoint and step was 0.016 (0.010 without the
 * mean) for SmolLM2 at 1024 and 2048 tokens and 0.010 for Gemma 3 up to 2560, the same with
 * chunks of 128 and 512. The bound, kv_tol, is 0.05: three such roundings. The 8-bit cache rounds
 * each key and value by up to half a step of its block of 32 (max |x| / 254, against 2^-12 relative
 * for a half): on PoCL (2026-11-28, chunks of 512) the worst was 0.42 (0.29 centred) for SmolLM2 at
 * 2048 tokens and 0.35 (0.28) for Gemma 3 at 2560, greedy ids all equal; its kv_tol is 1.0,
 * test-model.c's centred bound for rounded product inputs. With 8-bit decode inputs (NVIDIA's
 * default) or fp16 tensor-core prefill, the products round their inputs too: test-model.c's
 * logit_tol (1.5 raw, 1.0 without the mean offset, from llama.cpp's similar rounding) applies.
 * Greedy ids may differ only where the reference's top-2 margin is below margin_tol, test-model.c's
 * rule; every step is fed the reference's id, so the step logits are compared at every step. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "model/model.h"

#ifndef EBB_TEST_DATA
#define EBB_TEST_DATA "tests/data"
#endif

#define PIECE 1024 /* prompt tokens per ebb_model_eval call: a checkpoint after each */
#define TOP 100    /* reference logits kept per checkpoint and step */
static const float margin_tol = 0.5f;

/* A run's view at a checkpoint (end of each piece) or a greedy step: the reference's top 100
 * (or, for a run held to it, that run's logits at the reference's top-100 ids), the argmax and
 * the top-2 margin. */
struct point {
    int32_t ids[TOP];
    float logits[TOP];
    int32_t top;
    float margin;
};
struct expect {
    char model[256];
    char kv[16];
    uint32_t n_tok, n_steps, n_points;
    uint64_t prompt_hash;
    struct point *pts;  /* (n_points) after tokens PIECE, 2 PIECE, ..., n_tok */
    int32_t *gen;       /* (n_steps) greedy ids after the prompt */
    struct point *step; /* (n_steps) the logits that chose gen[i] */
};

static uint64_t fnv1a(const int32_t *ids, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) {
            h ^= (uint64_t)(((uint32_t)ids[i] >> (8 * b)) & 0xff);
            h *= 1099511628211ull;
        }
    return h;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char models_dir[1024];

static void model_path(const char *file, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", models_dir, file);
}

/* The first n tokens of coriolanus.txt as the model's tokenizer gives them (BOS per its
 * metadata), into a malloc'd array. */
static int32_t *prompt_ids(const struct ebb_model *m, uint32_t n)
{
    FILE *f = fopen(EBB_TEST_DATA "/perplexity/coriolanus.txt", "rb");
    assert_non_null(f);
    static char text[1 << 17];
    size_t len = fread(text, 1, sizeof(text), f);
    fclose(f);
    assert_true(len < sizeof(text));
    int32_t *ids = malloc(sizeof(int32_t) * (len + 8));
    assert_non_null(ids);
    size_t got = 0;
    assert_int_equal(ebb_tokenizer_encode(ebb_model_tokenizer(m), text, len, EBB_TOK_ADD_SPECIAL,
                                          ids, len + 8, &got),
                     EBB_OK);
    if (got < n)
        fail_msg("coriolanus.txt gives %zu tokens, %u wanted", got, n);
    return ids;
}

/* p from the logits lg: the top 100, or with at the logits at at's ids. */
static void point_from(const float *lg, uint32_t V, const struct point *at, struct point *p)
{
    float l2[2] = {-INFINITY, -INFINITY};
    for (uint32_t v = 0; v < V; v++) {
        if (lg[v] > l2[0]) {
            l2[1] = l2[0];
            l2[0] = lg[v];
            p->top = (int32_t)v;
        } else if (lg[v] > l2[1]) {
            l2[1] = lg[v];
        }
    }
    p->margin = l2[0] - l2[1];
    if (at) {
        for (int k = 0; k < TOP; k++) {
            p->ids[k] = at->ids[k];
            p->logits[k] = lg[at->ids[k]];
        }
        return;
    }
    for (int k = 0; k < TOP; k++) {
        p->ids[k] = -1;
        p->logits[k] = -INFINITY;
    }
    for (uint32_t v = 0; v < V; v++) {
        if (!(lg[v] > p->logits[TOP - 1]))
            continue;
        int k = TOP - 1;
        while (k > 0 && lg[v] > p->logits[k - 1]) {
            p->ids[k] = p->ids[k - 1];
            p->logits[k] = p->logits[k - 1];
            k--;
        }
        p->ids[k] = (int32_t)v;
        p->logits[k] = lg[v];
    }
}

/* A run of model m over the data's prompt: the checkpoints' and the greedy steps' points. The
 * greedy ids are m's own; with at (the reference's data), each step is fed at's id instead (so
 * that the logits stay comparable after a near-tie flip) and the points hold m's logits at
 * at's top-100 ids. */
static void run(struct ebb_model *m, const int32_t *ids, const struct expect *e,
                const struct expect *at, struct expect *out)
{
    uint32_t V = ebb_model_n_vocab(m);
    float *lg = malloc(sizeof(float) * V);
    assert_non_null(lg);
    struct ebb_diag d = {{0}};
    struct ebb_model_out o = {.logits = lg};
    double t0 = now_s();
    for (uint32_t p = 0, pos = 0; p < e->n_points; p++) {
        uint32_t n = e->n_tok - pos < PIECE ? e->n_tok - pos : PIECE;
        if (ebb_model_eval(m, 0, ids + pos, n, pos, &o, &d))
            fail_msg("eval at %u: %s", pos, d.msg);
        pos += n;
        point_from(lg, V, at ? &at->pts[p] : NULL, &out->pts[p]);
    }
    double t1 = now_s();
    int32_t tok = out->pts[e->n_points - 1].top;
    for (uint32_t s = 0; s < e->n_steps; s++) {
        out->gen[s] = tok;
        int32_t feed = at ? at->gen[s] : tok;
        if (ebb_model_eval(m, 0, &feed, 1, e->n_tok + s, &o, &d))
            fail_msg("decode step %u: %s", s, d.msg);
        point_from(lg, V, at ? &at->step[s] : NULL, &out->step[s]);
        tok = out->step[s].top;
    }
    fprintf(stderr, "# %s: prefill of %u tokens %.1f s, %u decode steps %.1f s\n",
            ebb_model_device_name(m), e->n_tok, t1 - t0, e->n_steps, now_s() - t1);
    free(lg);
}

static void alloc_points(struct expect *e)
{
    e->n_points = (e->n_tok + PIECE - 1) / PIECE;
    e->pts = calloc(e->n_points, sizeof(*e->pts));
    e->step = calloc(e->n_steps, sizeof(*e->step));
    e->gen = calloc(e->n_steps, sizeof(*e->gen));
    assert_true(e->pts && e->step && e->gen);
}

static void free_points(struct expect *e)
{
    free(e->pts);
    free(e->step);
    free(e->gen);
}

static struct ebb_model *open_model(const struct expect *e, const char *device, enum ebb_kv_type kv)
{
    char path[1400];
    model_path(e->model, path, sizeof(path));
    struct ebb_model_params p = {
        .path = path, .device = device, .n_ctx = e->n_tok + e->n_steps, .n_seq = 1, .kv_type = kv};
    struct ebb_model *m = NULL;
    struct ebb_diag d = {{0}};
    if (ebb_model_open(&p, &m, &d))
        fail_msg("ebb_model_open(%s, %s): %s", path, device, d.msg);
    fprintf(stderr, "# model %s on %s, ctx %u\n", ebb_model_arch(m), ebb_model_device_name(m),
            ebb_model_n_ctx(m));
    return m;
}

/* ---- the data file ---- */

static json_t *point_json(const struct point *p)
{
    json_t *ids = json_array(), *lg = json_array();
    for (int k = 0; k < TOP; k++) {
        json_array_append_new(ids, json_integer(p->ids[k]));
        json_array_append_new(lg, json_real(round(p->logits[k] * 1e5) / 1e5));
    }
    return json_pack("{s:o, s:o, s:f}", "top_ids", ids, "top_logits", lg, "margin",
                     round(p->margin * 1e5) / 1e5);
}

static void point_of(json_t *j, struct point *p)
{
    json_t *ids = json_object_get(j, "top_ids"), *lg = json_object_get(j, "top_logits");
    assert_int_equal(json_array_size(ids), TOP);
    for (int k = 0; k < TOP; k++) {
        p->ids[k] = (int32_t)json_integer_value(json_array_get(ids, (size_t)k));
        p->logits[k] = (float)json_number_value(json_array_get(lg, (size_t)k));
    }
    p->top = p->ids[0];
    p->margin = (float)json_number_value(json_object_get(j, "margin"));
}

static void load(const char *name, struct expect *e)
{
    char path[1024];
    if (strchr(name, '/')) /* a file of one's own, e.g. a short one written to try a change */
        snprintf(path, sizeof(path), "%s", name);
    else
        snprintf(path, sizeof(path), EBB_TEST_DATA "/long/%s.json", name);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j)
        fail_msg("cannot read %s: %s", path, err.text);
    snprintf(e->model, sizeof(e->model), "%s", json_string_value(json_object_get(j, "model")));
    snprintf(e->kv, sizeof(e->kv), "%s", json_string_value(json_object_get(j, "kv")));
    e->n_tok = (uint32_t)json_integer_value(json_object_get(j, "prompt_tokens"));
    e->n_steps = (uint32_t)json_integer_value(json_object_get(j, "steps"));
    e->prompt_hash = strtoull(json_string_value(json_object_get(j, "prompt_fnv1a")), NULL, 16);
    alloc_points(e);
    json_t *pts = json_object_get(j, "checkpoints"), *steps = json_object_get(j, "steps_top");
    assert_int_equal(json_array_size(pts), e->n_points);
    assert_int_equal(json_array_size(steps), e->n_steps);
    for (uint32_t i = 0; i < e->n_points; i++)
        point_of(json_array_get(pts, i), &e->pts[i]);
    for (uint32_t i = 0; i < e->n_steps; i++) {
        point_of(json_array_get(steps, i), &e->step[i]);
        e->gen[i] = (int32_t)json_integer_value(json_array_get(json_object_get(j, "ids"), i));
    }
    json_decref(j);
}

static void write_data(const char *path, const struct expect *e, const struct ebb_model *m)
{
    json_t *pts = json_array(), *steps = json_array(), *gen = json_array();
    for (uint32_t i = 0; i < e->n_points; i++)
        json_array_append_new(pts, point_json(&e->pts[i]));
    for (uint32_t i = 0; i < e->n_steps; i++) {
        json_array_append_new(steps, point_json(&e->step[i]));
        json_array_append_new(gen, json_integer(e->gen[i]));
    }
    char hash[24];
    snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)e->prompt_hash);
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:o, s:o, s:o}", "what",
        "test-model-long.c: the reference backend's top-100 logits after each piece of the "
        "prompt (the first prompt_tokens of coriolanus.txt) and at each greedy step",
        "model", e->model, "device", ebb_model_device_name(m), "kv", e->kv, "prompt_tokens",
        (int)e->n_tok, "piece", PIECE, "steps", (int)e->n_steps, "prompt_fnv1a", hash,
        "checkpoints", pts, "ids", gen, "steps_top", steps);
    assert_int_equal(json_dump_file(j, path, JSON_COMPACT), 0);
    json_decref(j);
}

/* ---- comparison ---- */

/* max |ours - ref| over ref's top 100 (ours holds its logits at those ids), and the same once
 * the mean difference is removed (a common offset changes no probability). */
static void diff_top(const struct point *ours, const struct point *ref, float *raw, float *centered)
{
    double mean = 0;
    for (int k = 0; k < TOP; k++) {
        assert_int_equal(ours->ids[k], ref->ids[k]);
        mean += (double)ours->logits[k] - ref->logits[k];
    }
    mean /= TOP;
    *raw = *centered = 0;
    for (int k = 0; k < TOP; k++) {
        float d = ours->logits[k] - ref->logits[k];
        *raw = fmaxf(*raw, fabsf(d));
        *centered = fmaxf(*centered, fabsf((float)(d - mean)));
    }
}

/* Holds ours to ref within tol (raw and centered): every checkpoint, every greedy step while
 * the ids agree; a divergence only at a reference margin below margin_tol. */
static void compare(const char *what, const struct expect *ours, const struct expect *ref,
                    float tol, float ctol)
{
    float worst = 0, worst_c = 0;
    for (uint32_t p = 0; p < ref->n_points; p++) {
        float raw, cen;
        diff_top(&ours->pts[p], &ref->pts[p], &raw, &cen);
        uint32_t at = p + 1 < ref->n_points ? (p + 1) * PIECE : ref->n_tok;
        fprintf(stderr,
                "# %s, after %u tokens: max |diff| %.4f, %.4f without the mean; argmax %d/%d "
                "(reference margin %.4f)\n",
                what, at, (double)raw, (double)cen, ours->pts[p].top, ref->pts[p].top,
                (double)ref->pts[p].margin);
        if (raw > tol || cen > ctol)
            fail_msg("%s after %u tokens: logits differ by %.4f (%.4f without the mean; bounds "
                     "%.3f, %.3f)",
                     what, at, (double)raw, (double)cen, (double)tol, (double)ctol);
        if (ours->pts[p].top != ref->pts[p].top && !(ref->pts[p].margin < margin_tol))
            fail_msg("%s after %u tokens: argmax %d, the reference's %d at margin %.4f", what, at,
                     ours->pts[p].top, ref->pts[p].top, (double)ref->pts[p].margin);
        worst = fmaxf(worst, raw);
        worst_c = fmaxf(worst_c, cen);
    }
    /* The steps are fed the reference's ids, so their logits stay comparable after a flip. */
    uint32_t same = 0;
    for (uint32_t s = 0; s < ref->n_steps; s++) {
        if (ours->gen[s] != ref->gen[s]) {
            float m = s ? ref->step[s - 1].margin : ref->pts[ref->n_points - 1].margin;
            fprintf(stderr, "# %s: greedy step %u differs (%d, reference %d at margin %.4f)\n",
                    what, s, ours->gen[s], ref->gen[s], (double)m);
            if (!(m < margin_tol))
                fail_msg("%s: greedy step %u gives %d, the reference %d at margin %.4f >= %.2f",
                         what, s, ours->gen[s], ref->gen[s], (double)m, (double)margin_tol);
        } else {
            same++;
        }
        float raw, cen;
        diff_top(&ours->step[s], &ref->step[s], &raw, &cen);
        if (raw > tol || cen > ctol)
            fail_msg("%s: decode step %u logits differ by %.4f (%.4f without the mean)", what, s,
                     (double)raw, (double)cen);
        worst = fmaxf(worst, raw);
        worst_c = fmaxf(worst_c, cen);
    }
    fprintf(stderr,
            "# %s: %u of %u greedy ids equal; worst |diff| %.4f (bound %.3f), %.4f without the "
            "mean (bound %.3f)\n",
            what, same, ref->n_steps, (double)worst, (double)tol, (double)worst_c, (double)ctol);
}

/* ---- tests ---- */

static void test_write(void)
{
    struct expect e = {0};
    const char *file = getenv("EBB_TEST_LONG_MODEL");
    snprintf(e.model, sizeof(e.model), "%s", file ? file : "SmolLM2-135M-Instruct.Q4_1.gguf");
    snprintf(e.kv, sizeof(e.kv), "f16"); /* the engine's cache the data is meant for */
    e.n_tok =
        getenv("EBB_TEST_LONG_TOKENS") ? (uint32_t)atoi(getenv("EBB_TEST_LONG_TOKENS")) : 2048;
    e.n_steps = getenv("EBB_TEST_LONG_STEPS") ? (uint32_t)atoi(getenv("EBB_TEST_LONG_STEPS")) : 16;
    alloc_points(&e);
    struct ebb_model *m = open_model(&e, "ref", EBB_KV_F16);
    int32_t *ids = prompt_ids(m, e.n_tok);
    e.prompt_hash = fnv1a(ids, e.n_tok);
    run(m, ids, &e, NULL, &e);
    write_data(getenv("EBB_TEST_LONG_WRITE"), &e, m);
    ebb_model_close(m);
    free(ids);
    free_points(&e);
}

static void test_long(void **state)
{
    (void)state;
    if (getenv("EBB_TEST_LONG_WRITE")) {
        test_write();
        return;
    }
    const char *name = getenv("EBB_TEST_LONG") ? getenv("EBB_TEST_LONG") : "smollm2-f16";
    const char *device = getenv("EBB_TEST_DEVICE") ? getenv("EBB_TEST_DEVICE") : "auto";
    const char *kv = getenv("EBB_TEST_KV") ? getenv("EBB_TEST_KV") : "f16";
    struct expect ref = {0}, ours = {0};
    load(name, &ref);
    enum ebb_kv_type kvt = EBB_KV_F16;
    if (!ebb_kv_type_parse(kv, &kvt))
        fail_msg("EBB_TEST_KV=%s: not f16 or q8_0", kv);
    char path[1400];
    model_path(ref.model, path, sizeof(path));
    FILE *f = fopen(path, "rb");
    if (!f) {
        free_points(&ref);
        skip();
    }
    fclose(f);
    ours = ref;
    alloc_points(&ours);
    struct ebb_model *m = open_model(&ref, device, kvt);
    int32_t *ids = prompt_ids(m, ref.n_tok);
    if (fnv1a(ids, ref.n_tok) != ref.prompt_hash)
        fail_msg("the prompt's tokens differ from those of %s's data", name);
    /* Bounds (top comment): fp16 storage on the engine; with rounded product inputs,
     * llama.cpp's bounds. */
    const char *dn = ebb_model_device_name(m);
    bool rounded = strstr(dn, "8-bit decode inputs") || strstr(dn, "tensor-core prefill");
    const float kv_tol = kvt == EBB_KV_Q8_0 ? 1.0f : 0.05f; /* top comment */
    /* Both roundings at once (8-bit cache on a rounding device): the bounds added, not yet
     * measured on a GPU. */
    float q8_add = kvt == EBB_KV_Q8_0 ? kv_tol : 0.0f;
    float tol = rounded ? 1.5f + q8_add : kv_tol, ctol = rounded ? 1.0f + q8_add : kv_tol;
    run(m, ids, &ref, &ref, &ours);
    ebb_model_close(m);
    compare(device, &ours, &ref, tol, ctol);
    if (getenv("EBB_TEST_LONG_LIVE") && !strcmp(getenv("EBB_TEST_LONG_LIVE"), "1")) {
        struct expect live = ref;
        alloc_points(&live);
        struct ebb_model *r = open_model(&ref, "ref", EBB_KV_F16);
        run(r, ids, &ref, &ref, &live);
        ebb_model_close(r);
        /* The committed data against the reference now (another build, machine or thread
         * split of the same fp32 sums). */
        compare("committed data vs ref now", &ref, &live, 0.02f, 0.02f);
        compare("engine vs ref now", &ours, &live, tol, ctol);
        free_points(&live);
    }
    free(ids);
    free_points(&ours);
    free_points(&ref);
}

int main(void)
{
    const char *dir = getenv("EBB_MODELS_DIR"), *home = getenv("HOME");
    if (dir)
        snprintf(models_dir, sizeof(models_dir), "%s", dir);
    else
        snprintf(models_dir, sizeof(models_dir), "%s/.local/share/ebb/models", home ? home : "");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
