/* Long prompts layer-major through the expert cache (docs/STREAMER.md, "Long prompts through the
 * expert cache"), through the model API on the OpenCL engine (PoCL in CI): qwen3moe-tiny (3
 * layers, 16 experts, 4 a token; q8_0, written by ebb-gen-model with the qwen2 vocabulary of
 * $EBB_VOCABS_DIR) with the grouped MoE products on (EBB_CL_MOE_GROUP=1, as GPUs have them from
 * 8 rows), a 300-token prompt and one decoded token. The logits after each must equal the
 * resident model's to the bit with 4 slots a layer in one layer-major pass, chunk after chunk
 * (EBB_STREAM_LONG_ROWS=0), in a pass of 256 rows and a chunk, as a batch of one part
 * (ebb_model_eval_batch), with 5 slots and every expert pinned in host memory, and with 16; a
 * prompt of one chunk of 100 rows (a batch part) runs as one pass, one of 40 through the lookups;
 * with EBB_CL_MOE_GROUP=64 the last chunk (44 rows) is left to the ordinary path, and equals the
 * resident run's under the same setting. The counters must say that each expert the prompt
 * used was copied once per layer per pass, in groups of half the slots. Usage:
 * test-model-moe-long EBB-GEN-MODEL WORKDIR */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/model.h"

#define N_LAYER 3
#define N_EXPERT 16
#define N_PROMPT 300
#define N_VOCAB_MAX 160000

static char g_model[1024];

struct run {
    float logits[3][N_VOCAB_MAX]; /* after the prompt, the token, a follow-up */
    uint32_t long_rows;
    struct ebb_model_expert_cache x;
};

static uint32_t g_vocab;

/* A prompt of n tokens and one token, then (follow > 0) a follow-up prompt of that many tokens,
 * with the given slots (0: resident), EBB_STREAM_LONG_ROWS (NULL: unset), the first prompt as
 * one batch part or an evaluation. */
static void run_f(uint32_t n, uint32_t follow, uint32_t slots, const char *rows, bool batch,
                  struct run *r)
{
    if (rows)
        setenv("EBB_STREAM_LONG_ROWS", rows, 1);
    else
        unsetenv("EBB_STREAM_LONG_ROWS");
    struct ebb_model_params p = {.path = g_model, .n_ctx = 384, .expert_cache = slots};
    struct ebb_model *m = NULL;
    struct ebb_diag d = {{0}};
    if (ebb_model_open(&p, &m, &d) != EBB_OK)
        fail_msg("open: %s", d.msg);
    g_vocab = ebb_model_n_vocab(m);
    assert_true(g_vocab <= N_VOCAB_MAX);
    int32_t ids[384];
    for (int i = 0; i < 384; i++)
        ids[i] = 100 + (i * 37) % 4000;
    r->long_rows = ebb_model_long_rows(m);
    struct ebb_model_out out = {.logits = r->logits[0]};
    struct ebb_model_seq part = {.seq = 0, .tokens = ids, .n = n, .pos = 0, .out = &out};
    ebb_err rc =
        batch ? ebb_model_eval_batch(m, &part, 1, &d) : ebb_model_eval(m, 0, ids, n, 0, &out, &d);
    if (rc)
        fail_msg("prompt: %s", d.msg);
    out.logits = r->logits[1];
    if (ebb_model_eval(m, 0, ids + n, 1, n, &out, &d))
        fail_msg("token: %s", d.msg);
    out.logits = r->logits[2];
    if (follow && ebb_model_eval(m, 0, ids + n + 1, follow, n + 1, &out, &d))
        fail_msg("follow-up: %s", d.msg);
    assert_int_equal(ebb_model_expert_cache(m, &r->x), slots != 0);
    ebb_model_close(m);
}

static void run_n(uint32_t n, uint32_t slots, const char *rows, bool batch, struct run *r)
{
    run_f(n, 0, slots, rows, batch, r);
}

static void run(uint32_t slots, const char *rows, bool batch, struct run *r)
{
    run_n(N_PROMPT, slots, rows, batch, r);
}

static void same(const struct run *a, const struct run *b, const char *what)
{
    for (int i = 0; i < 3; i++)
        if (memcmp(a->logits[i], b->logits[i], sizeof(float) * g_vocab))
            fail_msg("%s: the logits after the %s differ from the resident run's", what,
                     i == 2 ? "follow-up"
                     : i    ? "token"
                            : "prompt");
}

/* The layer-major counters of n passes over every one of the N_EXPERT experts of each layer (a
 * prompt of 64 tokens or more of this file chooses them all) with groups of `per` experts, none
 * of them in the slots before the pass (the first evaluation). */
static void passes(const struct run *r, uint64_t n, uint32_t per, const char *what)
{
    const struct ebb_model_expert_cache *x = &r->x;
    fprintf(stderr,
            "# %s: %llu passes, %llu layer steps, %llu experts copied in %llu groups (%llu kept), "
            "%llu bytes; copies %.3f ms on the device, experts' phase %.3f ms\n",
            what, (unsigned long long)x->lm_passes, (unsigned long long)x->lm_layer_steps,
            (unsigned long long)x->lm_copied, (unsigned long long)x->lm_groups,
            (unsigned long long)x->lm_kept, (unsigned long long)x->lm_bytes,
            (double)x->lm_copy_ns / 1e6, (double)x->lm_ns / 1e6);
    assert_int_equal(x->lm_passes, n);
    assert_int_equal(x->lm_layer_steps, n * N_LAYER);
    assert_int_equal(x->lm_copied, n * N_LAYER * N_EXPERT); /* each once a layer a pass */
    assert_int_equal(x->lm_kept, 0);
    assert_int_equal(x->lm_groups, n * N_LAYER * ((N_EXPERT + per - 1) / per));
    assert_int_equal(x->lm_bytes, x->lm_copied * x->expert_bytes);
    if (n)
        assert_true(x->lm_ns > 0 && x->lm_ids_ns > 0);
}

static void test_layer_major(void **state)
{
    (void)state;
    static struct run res, a, off, p256, bat, pin, all, res64, a64;
    unsetenv("EBB_EXPERT_CACHE");
    unsetenv("EBB_EXPERT_PINNED");
    setenv("EBB_CL_MOE_GROUP", "1", 1);
    run(0, NULL, false, &res);
    assert_int_equal(res.long_rows, 0); /* resident: no layer-major pass */
    run(4, NULL, false, &a);
    assert_int_equal(a.long_rows, 384); /* the context in whole chunks */
    same(&a, &res, "4 slots, one pass");
    passes(&a, 1, 2, "4 slots, one pass");
    run(4, "0", false, &off);
    assert_int_equal(off.long_rows, 0);
    same(&off, &res, "4 slots, chunk after chunk");
    passes(&off, 0, 2, "4 slots, chunk after chunk");
    assert_true(off.x.lookups > 0); /* the chunks went through the cache's lookups */
    run(4, "256", false, &p256);
    same(&p256, &res, "4 slots, a pass of 256 rows and a chunk");
    passes(&p256, 1, 2, "4 slots, a pass of 256 rows");
    run(4, NULL, true, &bat);
    same(&bat, &res, "4 slots, a batch of one part");
    passes(&bat, 1, 2, "4 slots, a batch of one part");
    setenv("EBB_EXPERT_PINNED", "1", 1);
    run(5, NULL, false, &pin); /* halves of 2, one slot left out */
    unsetenv("EBB_EXPERT_PINNED");
    same(&pin, &res, "5 slots, pinned");
    passes(&pin, 1, 2, "5 slots, pinned");
    assert_true(pin.x.host_bytes > 0);
    run(16, NULL, false, &all);
    same(&all, &res, "16 slots");
    passes(&all, 1, 8, "16 slots");
    /* One chunk: of 100 rows, layer-major (the experts once each); of 40, fewer than
     * MOE_LONG_MIN (64), through the cache's lookups, as decode. */
    static struct run res100, a100, res40, a40;
    run_n(100, 0, NULL, false, &res100);
    run_n(100, 4, NULL, true, &a100);
    same(&a100, &res100, "4 slots, a chunk of 100 rows");
    passes(&a100, 1, 2, "4 slots, a chunk of 100 rows");
    run_n(40, 0, NULL, false, &res40);
    run_n(40, 4, NULL, false, &a40);
    same(&a40, &res40, "4 slots, a chunk of 40 rows");
    passes(&a40, 0, 2, "4 slots, a chunk of 40 rows");
    /* A follow-up of 70 tokens after the prompt and a token: a second pass, in which the
     * experts the slots hold (the previous pass's last groups, the token's) are kept, not copied
     * again: group 0, then groups of 2. */
    static struct run resf, af;
    run_f(N_PROMPT, 70, 0, NULL, false, &resf);
    run_f(N_PROMPT, 70, 4, NULL, false, &af);
    same(&af, &resf, "4 slots, a follow-up");
    fprintf(stderr, "# 4 slots, a follow-up: %llu passes, %llu copied, %llu kept, %llu groups\n",
            (unsigned long long)af.x.lm_passes, (unsigned long long)af.x.lm_copied,
            (unsigned long long)af.x.lm_kept, (unsigned long long)af.x.lm_groups);
    assert_int_equal(af.x.lm_passes, 2);
    assert_int_equal(af.x.lm_copied + af.x.lm_kept, 2 * N_LAYER * N_EXPERT);
    assert_true(af.x.lm_kept > 0 && af.x.lm_kept <= N_LAYER * 4);
    assert_int_equal(af.x.lm_bytes, af.x.lm_copied * af.x.expert_bytes);
    /* A last chunk the grouped products do not take (44 < 64 rows) runs as chunk after chunk
     * does: the pass is the first 256 rows. */
    setenv("EBB_CL_MOE_GROUP", "64", 1);
    run(0, NULL, false, &res64);
    run(4, NULL, false, &a64);
    same(&a64, &res64, "4 slots, grouped from 64 rows");
    passes(&a64, 1, 2, "4 slots, grouped from 64 rows");
    unsetenv("EBB_CL_MOE_GROUP");
    unsetenv("EBB_STREAM_LONG_ROWS");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test-model-moe-long EBB-GEN-MODEL WORKDIR\n");
        return 2;
    }
    const char *vocabs = getenv("EBB_VOCABS_DIR"), *home = getenv("HOME");
    char vocab[1024], cmd[4096];
    if (vocabs && *vocabs)
        snprintf(vocab, sizeof(vocab), "%s/ggml-vocab-qwen2.gguf", vocabs);
    else
        snprintf(vocab, sizeof(vocab), "%s/.cache/ebb/vocabs/ggml-vocab-qwen2.gguf",
                 home ? home : "");
    if (access(vocab, R_OK)) { /* a failure, as for the vocabularies' test */
        fprintf(stderr, "missing %s: run scripts/fetch-vocabs.sh and set EBB_VOCABS_DIR\n", vocab);
        return 1;
    }
    mkdir(argv[2], 0755);
    snprintf(g_model, sizeof(g_model), "%s/qwen3moe-tiny-long.gguf", argv[2]);
    snprintf(cmd, sizeof(cmd),
             "'%s' --shape qwen3moe-tiny --tokenizer-from '%s' --type q8_0 -o '%s' >/dev/null",
             argv[1], vocab, g_model);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "ebb-gen-model failed: %s\n", cmd);
        return 1;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_layer_major)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
