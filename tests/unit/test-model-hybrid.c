/* Host layers (the hybrid placement, docs/STREAMER.md "Host layers") on the OpenCL engine: with
 * every layer streamed, some or all of the last layers computed on the host's cores give the
 * same greedy ids as none, through a prefill, decode steps, a KV copy to another slot and a
 * batched step of two slots; the report counts them; 8-bit host layers agree with themselves
 * across thread counts. SmolLM2 on whatever device exists (PoCL in
 * CI). Skipped (77) without the model or an OpenCL device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/model.h"

#define N_PROMPT 20
#define N_STEPS 6

static char g_model[1024];

struct run {
    int32_t ids[N_STEPS]; /* greedy ids of slot 0 after the prompt */
    int32_t copy[2];      /* slot 1 from a KV copy of slot 0's prompt: its next two ids */
    int32_t batch[2];     /* one batched step of slots 0 and 1 */
    char json[4096];
};

static int32_t greedy(struct ebb_model *m, uint32_t seq, const int32_t *t, uint32_t n, uint32_t pos)
{
    int32_t top = -1;
    float lg;
    struct ebb_model_out out = {.top_k = 1, .top_ids = &top, .top_logits = &lg};
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_model_eval(m, seq, t, n, pos, &out, &d), EBB_OK);
    return top;
}

static void run_q8(uint32_t host_layers, double residency, uint32_t threads, bool q8,
                   struct run *r);

static void run_with(uint32_t host_layers, double residency, struct run *r)
{
    run_q8(host_layers, residency, 2, false, r);
}

static void run_q8(uint32_t host_layers, double residency, uint32_t threads, bool q8, struct run *r)
{
    struct ebb_model_params p = {.path = g_model,
                                 .n_ctx = 64,
                                 .n_seq = 2,
                                 .residency = residency,
                                 .residency_forced = true,
                                 .host_layers = host_layers,
                                 .host_threads = threads,
                                 .host_q8 = q8};
    struct ebb_model *m = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_model_open(&p, &m, &d), EBB_OK);
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        prompt[i] = 1 + (int32_t)((i * 7919u) % 4000u);
    int32_t t = greedy(m, 0, prompt, N_PROMPT, 0);
    for (uint32_t i = 0; i < N_STEPS; i++) {
        r->ids[i] = t;
        t = greedy(m, 0, &t, 1, N_PROMPT + i);
    }
    /* Slot 1 continues slot 0's prompt from a copy of its KV entries. */
    assert_int_equal(ebb_model_kv_copy(m, 0, 1, N_PROMPT, &d), EBB_OK);
    int32_t u = 17;
    r->copy[0] = greedy(m, 1, &u, 1, N_PROMPT);
    r->copy[1] = greedy(m, 1, &r->copy[0], 1, N_PROMPT + 1);
    /* Both slots in one batched pass. */
    int32_t top[2] = {-1, -1}, in0 = r->ids[N_STEPS - 1], in1 = r->copy[1];
    float lg[2];
    struct ebb_model_out o0 = {.top_k = 1, .top_ids = &top[0], .top_logits = &lg[0]};
    struct ebb_model_out o1 = {.top_k = 1, .top_ids = &top[1], .top_logits = &lg[1]};
    struct ebb_model_seq seqs[2] = {{0, &in0, 1, N_PROMPT + N_STEPS, &o0},
                                    {1, &in1, 1, N_PROMPT + 2, &o1}};
    assert_int_equal(ebb_model_eval_batch(m, seqs, 2, &d), EBB_OK);
    r->batch[0] = top[0];
    r->batch[1] = top[1];
    size_t n = ebb_model_stream_json(m, r->json, sizeof(r->json));
    assert_true(n > 0 && n < sizeof(r->json));
    ebb_model_close(m);
}

static void test_host_layers_same_ids(void **state)
{
    (void)state;
    static struct run none, some, all, half;
    run_with(0, 0, &none);
    assert_non_null(strstr(none.json, "\"layers_resident\":0,\"layers_total\":30,"
                                      "\"layers_host\":0,"));
    run_with(10, 0, &some);
    assert_non_null(strstr(some.json, "\"layers_host\":10,"));
    assert_non_null(strstr(some.json, "\"host_threads\":2,"));
    run_with(30, 0, &all);
    assert_non_null(strstr(all.json, "\"layers_host\":30,"));
    /* Half resident: only the 15 layers off the device can go to the host. */
    run_with(30, 0.5, &half);
    assert_non_null(strstr(half.json, "\"layers_resident\":15,\"layers_total\":30,"
                                      "\"layers_host\":15,"));
    const struct run *rs[] = {&some, &all, &half};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < N_STEPS; i++)
            assert_int_equal(rs[k]->ids[i], none.ids[i]);
        assert_int_equal(rs[k]->copy[0], none.copy[0]);
        assert_int_equal(rs[k]->copy[1], none.copy[1]);
        assert_int_equal(rs[k]->batch[0], none.batch[0]);
        assert_int_equal(rs[k]->batch[1], none.batch[1]);
    }
}

/* 8-bit host layers (llama.cpp's CPU numerics) differ from the engine's numerics, so their ids
 * are compared with themselves: the same for 1 and 3 threads, and the batched step agrees
 * with the single-slot steps' continuation of each slot. */
static void test_host_q8_consistent(void **state)
{
    (void)state;
    static struct run one, three;
    run_q8(12, 0, 1, true, &one);
    run_q8(12, 0, 3, true, &three);
    assert_non_null(strstr(three.json, "\"layers_host\":12,\"n_ctx\""));
    assert_non_null(strstr(three.json, "\"host_threads\":3,"));
    assert_memory_equal(one.ids, three.ids, sizeof(one.ids));
    assert_memory_equal(one.copy, three.copy, sizeof(one.copy));
    assert_memory_equal(one.batch, three.batch, sizeof(one.batch));
}

/* --host-layers without the streamer is refused with a message. */
static void test_needs_streamer(void **state)
{
    (void)state;
    struct ebb_model_params p = {.path = g_model, .n_ctx = 64, .host_layers = 4};
    struct ebb_model *m = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_model_open(&p, &m, &d), EBB_EINVAL);
    assert_null(m);
    assert_non_null(strstr(d.msg, "--host-layers needs the layer streamer"));
}

int main(void)
{
    const char *dir = getenv("EBB_MODELS_DIR"), *home = getenv("HOME");
    if (dir)
        snprintf(g_model, sizeof(g_model), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else
        snprintf(g_model, sizeof(g_model),
                 "%s/.local/share/ebb/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : "");
    FILE *f = fopen(g_model, "rb");
    if (!f) {
        fprintf(stderr, "no SmolLM2 (set EBB_MODELS_DIR): skipped\n");
        return 77;
    }
    fclose(f);
    unsetenv("EBB_TEST_RESIDENCY");
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_host_layers_same_ids),
                                       cmocka_unit_test(test_host_q8_consistent),
                                       cmocka_unit_test(test_needs_streamer)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
