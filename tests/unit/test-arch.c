/* The family descriptions (runtime/model/arch-*.c) against the real GGUFs: hyper-parameters as
 * the files give them, every declared tensor present with its shape, and every tensor of the
 * file claimed by exactly one declaration (a description that forgets a tensor fails here).
 * Then the checks themselves on small GGUFs written from the descriptions: a missing tensor, a
 * wrong shape, an unknown architecture, a malformed description. What a description implies
 * for memory: the store and the CPU device's repacked copy told from a real file's header
 * before an open, against what the open model holds. The real models come from
 * $EBB_MODELS_DIR (default ~/.local/share/ebb/models); their tests skip without them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf-writer.h"
#include "model/arch-int.h"
#include "model/model.h"
#include "model/model-cl-int.h"

static void model_path(char *buf, size_t cap, const char *file)
{
    const char *dir = getenv("EBB_MODELS_DIR"), *home = getenv("HOME");
    if (dir)
        snprintf(buf, cap, "%s/%s", dir, file);
    else
        snprintf(buf, cap, "%s/.local/share/ebb/models/%s", home ? home : "", file);
}

/* Opens a real model, or skips the test when it is not there. */
static struct ebb_gguf *open_real(const char *file)
{
    char path[1024];
    model_path(path, sizeof(path), file);
    FILE *f = fopen(path, "rb");
    if (!f) {
        print_message("no model at %s\n", path);
        skip();
    }
    fclose(f);
    struct ebb_gguf *g = NULL;
    struct ebb_diag d = {{0}};
    if (ebb_gguf_open(path, &g, &d))
        fail_msg("%s: %s", path, d.msg);
    return g;
}

/* Every tensor of g is claimed by exactly one declaration of a (for some layer), and the
 * declarations resolve with their shapes. */
static void check_claims(const struct ebb__arch *a, const struct ebb__hparams *hp,
                         const struct ebb_gguf *g)
{
    uint64_t n = ebb_gguf_n_tensors(g);
    uint32_t *claims = calloc(n, sizeof(*claims));
    assert_non_null(claims);
    char name[96];
    for (uint32_t t = 0; t < a->n_tensors; t++) {
        uint32_t nl = a->tensors[t].flags & EBB__T_LAYER ? hp->n_layer : 1;
        for (uint32_t l = 0; l < nl; l++) {
            ebb__arch_tensor_name(a, t, l, name, sizeof(name));
            const struct ebb_gguf_tensor *gt = NULL;
            struct ebb_diag d = {{0}};
            if (ebb__arch_tensor(a, hp, g, t, l, &gt, &d))
                fail_msg("%s: %s", a->name, d.msg);
            for (uint64_t i = 0; i < n; i++)
                if (!strcmp(ebb_gguf_tensor_at(g, i)->name, name))
                    claims[i]++;
        }
    }
    for (uint64_t i = 0; i < n; i++)
        if (claims[i] != 1)
            fail_msg("%s: tensor %s claimed %u times", a->name, ebb_gguf_tensor_at(g, i)->name,
                     claims[i]);
    free(claims);
}

static void test_smollm2(void **state)
{
    (void)state;
    struct ebb_gguf *g = open_real("SmolLM2-135M-Instruct.Q4_1.gguf");
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb__arch_read_hparams(g, &a, &hp, &d), EBB_OK);
    assert_ptr_equal(a, &ebb__arch_llama);
    assert_string_equal(hp.arch, "llama");
    assert_int_equal(hp.n_layer, 30);
    assert_int_equal(hp.n_embd, 576);
    assert_int_equal(hp.n_head, 9);
    assert_int_equal(hp.n_head_kv, 3);
    assert_int_equal(hp.head_dim, 64); /* derived: the file has no key_length */
    assert_int_equal(hp.head_dim_v, 64);
    assert_int_equal(hp.n_rot, 64);
    assert_int_equal(hp.n_ff, 1536);
    assert_int_equal(hp.n_vocab, 49152);
    assert_int_equal(hp.n_ctx_train, 8192);
    assert_true(hp.rope_base == 100000.0f);
    assert_true(hp.rope_scale == 1.0f);
    assert_int_equal(hp.swa, 0);
    assert_int_equal(ebb__arch_window(&hp, 5), 0);
    assert_int_equal(ebb__arch_check(a, &hp, g, &d), EBB_OK);
    check_claims(a, &hp, g);
    /* output.weight is absent: the head falls back to the token embeddings. */
    const struct ebb_gguf_tensor *out = NULL;
    assert_null(ebb_gguf_find_tensor(g, "output.weight"));
    for (uint32_t t = 0; t < a->n_tensors; t++)
        if (!strcmp(a->tensors[t].name, "output.weight"))
            assert_int_equal(ebb__arch_tensor(a, &hp, g, t, 0, &out, &d), EBB_OK);
    assert_ptr_equal(out, ebb_gguf_find_tensor(g, "token_embd.weight"));
    ebb_gguf_close(g);
}

static void test_gemma3(void **state)
{
    (void)state;
    struct ebb_gguf *g = open_real("gemma-3-270m-q4_k_m.gguf");
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb__arch_read_hparams(g, &a, &hp, &d), EBB_OK);
    assert_ptr_equal(a, &ebb__arch_gemma3);
    assert_int_equal(hp.n_layer, 18);
    assert_int_equal(hp.n_embd, 640);
    assert_int_equal(hp.n_head, 4);
    assert_int_equal(hp.n_head_kv, 1);
    assert_int_equal(hp.head_dim, 256); /* from key_length, not n_embd / n_head */
    assert_int_equal(hp.n_ff, 2048);
    assert_int_equal(hp.n_vocab, 262144);
    assert_true(hp.rope_base == 1000000.0f);
    assert_true(hp.rms_eps == 1e-6f);
    /* The window from the file, the pattern and local rope base fixed by the family. */
    assert_int_equal(hp.swa, 512);
    assert_int_equal(hp.swa_pattern, 6);
    assert_true(hp.rope_base_swa == 10000.0f);
    assert_int_equal(ebb__arch_window(&hp, 0), 512);
    assert_int_equal(ebb__arch_window(&hp, 5), 0);
    assert_int_equal(ebb__arch_window(&hp, 11), 0);
    assert_int_equal(ebb__arch_window(&hp, 12), 512);
    assert_int_equal(ebb__arch_check(a, &hp, g, &d), EBB_OK);
    check_claims(a, &hp, g);
    ebb_gguf_close(g);
}

/* ---- small files written from a description ---- */

/* Tiny llama-shaped hyper-parameters. */
static const uint32_t T_LAYER = 2, T_EMBD = 8, T_HEAD = 2, T_HEAD_KV = 1, T_FF = 16, T_VOCAB = 10;
static const uint32_t T_EXPERT = 4, T_EXPERT_USED = 2, T_FF_EXP = 8; /* families with experts */
static uint32_t used_count = T_EXPERT_USED, expert_count = T_EXPERT; /* as build() writes them */

struct built {
    struct wbuf img;
    struct ebb_gguf *g;
};

static uint64_t tiny_dim(uint8_t d)
{
    const uint64_t v[EBB__N_DIM] = {
        [EBB__DIM_1] = 1,
        [EBB__DIM_EMBD] = T_EMBD,
        [EBB__DIM_VOCAB] = T_VOCAB,
        [EBB__DIM_Q] = T_EMBD,
        [EBB__DIM_KV] = T_EMBD / T_HEAD * T_HEAD_KV,
        [EBB__DIM_FF] = T_FF,
        [EBB__DIM_HEAD] = T_EMBD / T_HEAD,
        [EBB__DIM_QKV] = T_EMBD + 2 * (T_EMBD / T_HEAD * T_HEAD_KV),
        [EBB__DIM_FF2] = 2 * T_FF,
        [EBB__DIM_ROT2] = T_EMBD / T_HEAD / 2,
        [EBB__DIM_EXPERT] = T_EXPERT,
        [EBB__DIM_FF_EXP] = T_FF_EXP,
    };
    return v[d];
}

static void kv_u32(struct wbuf *kv, const char *arch, const char *key, uint32_t v)
{
    char k[128];
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    w_kv(kv, k, 4);
    w_u32(kv, v);
}

/* An optional tensor build() writes too (by name; a trailing '*' matches a prefix), or NULL;
 * more metadata entries. */
static const char *with_optional;
static const struct wbuf *extra_kv;
static uint32_t n_extra_kv;

static bool optional_matches(const char *name)
{
    size_t n = strlen(with_optional);
    if (n && with_optional[n - 1] == '*')
        return !strncmp(name, with_optional, n - 1);
    return !strcmp(name, with_optional);
}

/* A GGUF with a's tensors in f32 (drop: a tensor name to leave out, bad: one whose second
 * dimension is off by one) and the hyper-parameter keys above. */
static struct built build(const struct ebb__arch *a, const char *arch_name, const char *drop,
                          const char *bad)
{
    struct wbuf kv = {0};
    w_kv(&kv, "general.architecture", 8);
    w_str(&kv, arch_name);
    kv_u32(&kv, arch_name, "block_count", T_LAYER);
    kv_u32(&kv, arch_name, "embedding_length", T_EMBD);
    kv_u32(&kv, arch_name, "attention.head_count", T_HEAD);
    kv_u32(&kv, arch_name, "attention.head_count_kv", T_HEAD_KV);
    kv_u32(&kv, arch_name, "feed_forward_length", T_FF);
    kv_u32(&kv, arch_name, "expert_count", expert_count);
    kv_u32(&kv, arch_name, "expert_used_count", used_count);
    kv_u32(&kv, arch_name, "expert_feed_forward_length", T_FF_EXP);
    if (extra_kv)
        w_bytes(&kv, extra_kv->p, extra_kv->n);
    static struct tinfo ti[64];
    static char names[64][96];
    uint32_t n = 0;
    uint64_t off = 0;
    for (uint32_t t = 0; t < a->n_tensors; t++) {
        uint32_t nl = a->tensors[t].flags & EBB__T_LAYER ? T_LAYER : 1;
        for (uint32_t l = 0; l < nl; l++) {
            ebb__arch_tensor_name(a, t, l, names[n], sizeof(names[n]));
            if ((drop && !strcmp(names[n], drop)) ||
                ((a->tensors[t].flags & EBB__T_OPTIONAL) &&
                 !(with_optional && optional_matches(names[n]))))
                continue;
            uint64_t ne0 = tiny_dim(a->tensors[t].ne0), ne1 = tiny_dim(a->tensors[t].ne1);
            uint64_t ne2 = tiny_dim(a->tensors[t].ne2);
            if (bad && !strcmp(names[n], bad))
                ne1++;
            ti[n] = (struct tinfo){names[n],
                                   ne2 > 1    ? 3
                                   : ne1 == 1 ? 1
                                              : 2,
                                   {ne0, ne1, ne2, 1},
                                   0,
                                   off};
            off += (ne0 * ne1 * ne2 * 4 + 31) / 32 * 32;
            n++;
        }
    }
    struct built b = {make(3, 9 + (extra_kv ? n_extra_kv : 0), &kv, ti, n, 32, off), NULL};
    free(kv.p);
    return b;
}

/* Parses the written image. */
static ebb_err open_built(struct built *b, struct ebb_diag *d)
{
    return ebb_gguf_open_mem(b->img.p, b->img.n, &b->g, d);
}

static void free_built(struct built *b)
{
    ebb_gguf_close(b->g);
    free(b->img.p);
}

static void test_tiny_families(void **state)
{
    (void)state;
    const struct ebb__arch *fams[] = {&ebb__arch_llama, &ebb__arch_gemma3, &ebb__arch_qwen2,
                                      &ebb__arch_qwen3, &ebb__arch_phi3,   &ebb__arch_qwen3moe};
    for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
        struct built b = build(fams[i], fams[i]->name, NULL, NULL);
        struct ebb_diag d = {{0}};
        assert_int_equal(open_built(&b, &d), EBB_OK);
        const struct ebb__arch *a = NULL;
        struct ebb__hparams hp;
        if (ebb__arch_read_hparams(b.g, &a, &hp, &d))
            fail_msg("%s: %s", fams[i]->name, d.msg);
        assert_ptr_equal(a, fams[i]);
        assert_int_equal(hp.head_dim, T_EMBD / T_HEAD);
        assert_int_equal(hp.n_vocab, T_VOCAB);
        if (ebb__arch_check(a, &hp, b.g, &d))
            fail_msg("%s: %s", fams[i]->name, d.msg);
        check_claims(a, &hp, b.g);
        free_built(&b);
    }
}

static void expect_check_fails(const char *drop, const char *bad, const char *want)
{
    struct built b = build(&ebb__arch_gemma3, "gemma3", drop, bad);
    struct ebb_diag d = {{0}};
    assert_int_equal(open_built(&b, &d), EBB_OK);
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_OK);
    assert_int_equal(ebb__arch_check(a, &hp, b.g, &d), EBB_EFORMAT);
    if (!strstr(d.msg, want))
        fail_msg("message '%s' lacks '%s'", d.msg, want);
    free_built(&b);
}

static void test_missing_and_misshapen(void **state)
{
    (void)state;
    expect_check_fails("blk.1.attn_k_norm.weight", NULL, "tensor blk.1.attn_k_norm.weight missing");
    expect_check_fails(NULL, "blk.0.ffn_up.weight", "tensor blk.0.ffn_up.weight has shape (8, 17)");
}

/* A file with half of Phi-3.5's longrope factors (the long ones without the short) does not
 * load, and the message names the tensor; qwen2's optional biases are checked for shape when
 * present. */
static void test_refused_and_optional(void **state)
{
    (void)state;
    with_optional = "rope_factors_long.weight";
    struct built b = build(&ebb__arch_phi3, "phi3", NULL, NULL);
    with_optional = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(open_built(&b, &d), EBB_OK);
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "rope_factors_long.weight"));
    free_built(&b);

    with_optional = "blk.1.attn_k.bias";
    b = build(&ebb__arch_qwen2, "qwen2", NULL, "blk.1.attn_k.bias");
    with_optional = NULL;
    assert_int_equal(open_built(&b, &d), EBB_OK);
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_OK);
    assert_int_equal(ebb__arch_check(a, &hp, b.g, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "blk.1.attn_k.bias"));
    free_built(&b);
}

/* Llama 3.1's rope scaling from its keys (the divisors of its formula), from rope_freqs.weight
 * when the file has one (the tensor wins), and an unknown scaling type refused. */
static void test_llama3_rope(void **state)
{
    (void)state;
    struct wbuf kv = {0};
    w_kv(&kv, "llama.rope.scaling.type", 8);
    w_str(&kv, "llama3");
    kv_u32(&kv, "llama", "rope.scaling.original_context_length", 1024);
    extra_kv = &kv;
    n_extra_kv = 2;
    struct built b = build(&ebb__arch_llama, "llama", NULL, NULL);
    struct ebb_diag d = {{0}};
    assert_int_equal(open_built(&b, &d), EBB_OK);
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_OK);
    assert_true(hp.rope_llama3 && hp.rope_factor == 8.0f && hp.rope_orig_ctx == 1024);
    assert_true(hp.rope_scale == 1.0f && hp.n_rot == 4);
    float ff[2];
    bool scaled = false;
    assert_int_equal(ebb__arch_rope_freqs(a, &hp, b.g, ff, &scaled, &d), EBB_OK);
    assert_true(scaled);
    /* Pair 0's wavelength 2 pi is below 1024 / 4: kept. Pair 1's, 2 pi 10000^(1/2) = 628, lies
     * between 1024 / 4 and 1024 / 1: blended, smooth = (1024 / 628.3 - 1) / 3. */
    double smooth = (1024.0 / (2 * 3.14159265358979 * 100.0) - 1.0) / 3.0;
    assert_float_equal(ff[0], 1.0f, 1e-6);
    assert_float_equal(ff[1], 1.0 / ((1.0 - smooth) / 8.0 + smooth), 1e-4);
    free_built(&b);

    with_optional = "rope_freqs.weight";
    b = build(&ebb__arch_llama, "llama", NULL, NULL);
    with_optional = NULL;
    assert_int_equal(open_built(&b, &d), EBB_OK);
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_OK);
    assert_int_equal(ebb__arch_check(a, &hp, b.g, &d), EBB_OK);
    const struct ebb_gguf_tensor *gt = ebb_gguf_find_tensor(b.g, "rope_freqs.weight");
    assert_non_null(gt);
    float want[2];
    memcpy(want, gt->data, sizeof(want));
    assert_int_equal(ebb__arch_rope_freqs(a, &hp, b.g, ff, &scaled, &d), EBB_OK);
    assert_memory_equal(ff, want, sizeof(want));
    free_built(&b);

    kv.n = 0;
    w_kv(&kv, "llama.rope.scaling.type", 8);
    w_str(&kv, "yarn");
    n_extra_kv = 1;
    b = build(&ebb__arch_llama, "llama", NULL, NULL);
    extra_kv = NULL;
    assert_int_equal(open_built(&b, &d), EBB_OK);
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "'yarn'"));
    free_built(&b);
    free(kv.p);
}

/* The context choice of model-ctx.c on a tiny llama with extra keys kv (n entries). */
static struct ebb_model_ctx choose(const struct wbuf *kv, uint32_t n, uint32_t asked, bool cap)
{
    extra_kv = kv;
    n_extra_kv = n;
    struct built b = build(&ebb__arch_llama, "llama", NULL, NULL);
    extra_kv = NULL;
    struct ebb_diag d = {{0}};
    struct ebb_model_ctx c;
    assert_int_equal(open_built(&b, &d), EBB_OK);
    assert_int_equal(ebb_model_ctx_choose(b.g, asked, 1, cap, &c, &d), EBB_OK);
    free_built(&b);
    return c;
}

/* The context per slot: the trained one by default (capped at 4096), an ask within it kept,
 * one past it capped at it (or kept when the caller allows it); linear rope scaling with its
 * original context reaches factor x original, without it only context_length; Llama 3.1's
 * scaling is inside context_length already. */
static void test_ctx_choice(void **state)
{
    (void)state;
    struct wbuf kv = {0};
    char why[256];
    kv_u32(&kv, "llama", "context_length", 256);
    struct ebb_model_ctx c = choose(&kv, 1, 0, true);
    assert_true(c.trained == 256 && c.limit == 256 && c.n_ctx == 256 && !c.capped_default);
    c = choose(&kv, 1, 200, true);
    assert_true(c.n_ctx == 200 && !c.capped_trained && !c.over_trained);
    c = choose(&kv, 1, 1000, true);
    assert_true(c.n_ctx == 256 && c.capped_trained && !c.over_trained);
    ebb_model_ctx_describe(&c, why, sizeof(why));
    assert_non_null(strstr(why, "asked 1000, capped at the trained 256"));
    c = choose(&kv, 1, 1000, false);
    assert_true(c.n_ctx == 1000 && c.over_trained && !c.capped_trained);
    ebb_model_ctx_describe(&c, why, sizeof(why));
    assert_non_null(strstr(why, "past the trained 256"));

    /* linear x4 over an original 256: 1024 */
    w_kv(&kv, "llama.rope.scaling.type", 8);
    w_str(&kv, "linear");
    w_kv(&kv, "llama.rope.scaling.factor", 6);
    w_f32(&kv, 4.0f);
    c = choose(&kv, 3, 2000, true);
    assert_true(c.trained == 256 && c.limit == 256 && c.n_ctx == 256); /* no original given */
    kv_u32(&kv, "llama", "rope.scaling.original_context_length", 256);
    c = choose(&kv, 4, 1000, true);
    assert_true(c.limit == 1024 && c.n_ctx == 1000 && !c.capped_trained);
    c = choose(&kv, 4, 2000, true);
    assert_true(c.n_ctx == 1024 && c.capped_trained);
    ebb_model_ctx_describe(&c, why, sizeof(why));
    assert_non_null(strstr(why, "the 1024 its rope scaling covers (trained 256)"));

    /* llama3 (factor 8 over 1024): the stated 8192 is the reach; the default caps at 4096 */
    kv.n = 0;
    kv_u32(&kv, "llama", "context_length", 8192);
    w_kv(&kv, "llama.rope.scaling.type", 8);
    w_str(&kv, "llama3");
    kv_u32(&kv, "llama", "rope.scaling.original_context_length", 1024);
    c = choose(&kv, 3, 16384, true);
    assert_true(c.limit == 8192 && c.n_ctx == 8192 && c.capped_trained);
    c = choose(&kv, 3, 0, true);
    assert_true(c.n_ctx <= EBB_MODEL_DEFAULT_CTX_CAP && c.capped_default);
    free(kv.p);
}

/* Plausible longrope factors in place of build()'s counting pattern (the image is ours). */
static void set_factors(struct built *b)
{
    static const float sf[2] = {1.0f, 1.05f}, lf[2] = {1.5f, 8.0f};
    const struct ebb_gguf_tensor *st = ebb_gguf_find_tensor(b->g, "rope_factors_short.weight");
    const struct ebb_gguf_tensor *lt = ebb_gguf_find_tensor(b->g, "rope_factors_long.weight");
    assert_true(st && lt);
    memcpy(b->img.p + ((const uint8_t *)st->data - b->img.p), sf, sizeof(sf));
    memcpy(b->img.p + ((const uint8_t *)lt->data - b->img.p), lf, sizeof(lf));
}

/* Phi-3.5's longrope: both factor tensors and the original context give the attention factor
 * sqrt(1 + ln(s) / ln(original)) (s = context / original) unless the file states one, and the
 * divisors are the short tensor's up to the original context and the long one's above it; the
 * factors without the original context are refused naming the key. */
static void test_longrope(void **state)
{
    (void)state;
    struct wbuf kv = {0};
    kv_u32(&kv, "phi3", "context_length", 4096);
    kv_u32(&kv, "phi3", "rope.scaling.original_context_length", 64);
    extra_kv = &kv;
    n_extra_kv = 2;
    with_optional = "rope_factors_*";
    struct built b = build(&ebb__arch_phi3, "phi3", NULL, NULL);
    struct ebb_diag d = {{0}};
    assert_int_equal(open_built(&b, &d), EBB_OK);
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    set_factors(&b);
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_OK);
    assert_int_equal(ebb__arch_check(a, &hp, b.g, &d), EBB_OK);
    assert_true(hp.rope_longrope == 1 && hp.rope_orig_ctx == 64);
    assert_float_equal(hp.attn_factor, sqrt(1.0 + log(4096.0 / 64.0) / log(64.0)), 1e-6);
    const struct ebb_gguf_tensor *lt = ebb_gguf_find_tensor(b.g, "rope_factors_long.weight");
    const struct ebb_gguf_tensor *st = ebb_gguf_find_tensor(b.g, "rope_factors_short.weight");
    assert_true(lt && st && lt->n_elements == 2 && st->n_elements == 2);
    float ff[2], want[2];
    bool scaled;
    hp.n_ctx_run = 64;
    assert_int_equal(ebb__arch_rope_freqs(a, &hp, b.g, ff, &scaled, &d), EBB_OK);
    memcpy(want, st->data, sizeof(want));
    assert_memory_equal(ff, want, sizeof(want));
    hp.n_ctx_run = 65;
    assert_int_equal(ebb__arch_rope_freqs(a, &hp, b.g, ff, &scaled, &d), EBB_OK);
    memcpy(want, lt->data, sizeof(want));
    assert_memory_equal(ff, want, sizeof(want));
    free_built(&b);

    /* A stated factor wins. */
    w_kv(&kv, "phi3.rope.scaling.attn_factor", 6);
    w_f32(&kv, 1.25f);
    n_extra_kv = 3;
    b = build(&ebb__arch_phi3, "phi3", NULL, NULL);
    assert_int_equal(open_built(&b, &d), EBB_OK);
    set_factors(&b);
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_OK);
    assert_float_equal(hp.attn_factor, 1.25, 1e-7);
    free_built(&b);

    kv.n = 0;
    kv_u32(&kv, "phi3", "context_length", 4096);
    n_extra_kv = 1;
    b = build(&ebb__arch_phi3, "phi3", NULL, NULL);
    with_optional = NULL;
    extra_kv = NULL;
    assert_int_equal(open_built(&b, &d), EBB_OK);
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_EFORMAT);
    assert_non_null(strstr(d.msg, "phi3.rope.scaling.original_context_length"));
    free_built(&b);
    free(kv.p);
}

/* qwen3moe's hyper-parameters (n_ff_exp derived from n_ff / k when the key is missing), its
 * expert stacks checked as 3-D shapes, and implausible expert counts refused. */
static void test_experts(void **state)
{
    (void)state;
    struct built b = build(&ebb__arch_qwen3moe, "qwen3moe", NULL, "blk.1.ffn_up_exps.weight");
    struct ebb_diag d = {{0}};
    assert_int_equal(open_built(&b, &d), EBB_OK);
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_OK);
    assert_true(hp.n_expert == T_EXPERT && hp.n_expert_used == T_EXPERT_USED &&
                hp.n_ff_exp == T_FF_EXP && hp.expert_norm == 1 && hp.expert_scale == 0.0f);
    assert_int_equal(ebb__arch_check(a, &hp, b.g, &d), EBB_EFORMAT);
    if (!strstr(d.msg, "blk.1.ffn_up_exps.weight has shape (8, 9, 4), want (8, 8, 4)"))
        fail_msg("message '%s'", d.msg);
    free_built(&b);

    /* 5 of 4 experts; a used count past the backends' bound. */
    for (int i = 0; i < 2; i++) {
        used_count = i ? EBB__MAX_EXPERT_USED + 1 : 5;
        expert_count = i ? 1000 : 4;
        b = build(&ebb__arch_qwen3moe, "qwen3moe", NULL, NULL);
        used_count = T_EXPERT_USED;
        expert_count = T_EXPERT;
        assert_int_equal(open_built(&b, &d), EBB_OK);
        assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_EFORMAT);
        assert_non_null(strstr(d.msg, "unsupported experts"));
        free_built(&b);
    }
}

static void test_unknown_arch(void **state)
{
    (void)state;
    struct built b = build(&ebb__arch_llama, "mamba", NULL, NULL);
    struct ebb_diag d = {{0}};
    assert_int_equal(open_built(&b, &d), EBB_OK);
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "'mamba'"));
    assert_non_null(strstr(d.msg, "llama, gemma3"));
    assert_null(a);
    assert_null(ebb__arch_find("mamba"));
    free_built(&b);
}

/* A description whose ops do not fit its own tensors is refused at load, naming the op. */
static void test_bad_description(void **state)
{
    (void)state;
    struct built b = build(&ebb__arch_llama, "llama", NULL, NULL);
    struct ebb_diag d = {{0}};
    assert_int_equal(open_built(&b, &d), EBB_OK);
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    assert_int_equal(ebb__arch_read_hparams(b.g, &a, &hp, &d), EBB_OK);
    struct ebb__op layer[32];
    assert_true(a->n_layer_ops <= 32);
    memcpy(layer, a->layer, a->n_layer_ops * sizeof(layer[0]));
    struct ebb__arch bad = *a;
    bad.layer = layer;
    /* Wq applied to the attention output's width is fine (both n_embd here); writing the
     * up projection into K (n_kv wide) is not. */
    for (uint32_t i = 0; i < bad.n_layer_ops; i++)
        if (layer[i].kind == EBB__OP_MATMUL && layer[i].dst == EBB__BUF_UP)
            layer[i].dst = EBB__BUF_K;
    assert_int_equal(ebb__arch_check(&bad, &hp, b.g, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "layer op 11 (matmul) has operands of mismatched widths"));
    /* A norm without its tensor. */
    memcpy(layer, a->layer, a->n_layer_ops * sizeof(layer[0]));
    layer[0].t = -1;
    assert_int_equal(ebb__arch_check(&bad, &hp, b.g, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "layer op 0 (rms_norm) needs a tensor"));
    free_built(&b);
}

/* The OpenCL engine compiles llama's layer into its five fused steps (the kernel sequence of
 * the hand-written pass), the other families into theirs, and refuses an op outside its
 * patterns, naming it. */
static void test_cl_plan(void **state)
{
    (void)state;
    struct clm_plan p;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb__clm_plan(&ebb__arch_llama, &p, &d), EBB_OK);
    assert_int_equal(p.n_steps, 5);
    assert_int_equal(p.n_norms, 2);
    assert_int_equal(p.n_groups, 4);
    const struct clm_step *s = p.steps;
    assert_true(s[0].kind == CLM_PROJ && s[0].in == CLM_X && s[0].out == CLM_QKV &&
                s[0].norm == 0 && !s[0].res && !s[0].glu);
    assert_int_equal(p.groups[s[0].group].n, 3);
    assert_true(s[1].kind == CLM_ATTN && !s[1].neox);
    assert_true(s[2].kind == CLM_PROJ && s[2].in == CLM_ATT && s[2].out == CLM_X && s[2].norm < 0 &&
                s[2].res);
    assert_true(s[3].kind == CLM_PROJ && s[3].out == CLM_GU && s[3].norm == 1);
    assert_int_equal(p.groups[s[3].group].n, 2);
    assert_true(s[4].kind == CLM_PROJ && s[4].in == CLM_GU && s[4].out == CLM_X && s[4].glu &&
                s[4].res);
    assert_false(p.embd_scale);
    /* gemma3: qwen3's head norms, the post-block norms as the products' post norms, GeGLU. */
    assert_int_equal(ebb__clm_plan(&ebb__arch_gemma3, &p, &d), EBB_OK);
    assert_int_equal(p.n_steps, 6);
    assert_int_equal(p.n_norms, 4);
    assert_true(p.embd_scale && p.has_qk_norm);
    s = p.steps;
    assert_true(s[0].kind == CLM_PROJ && s[0].out == CLM_QKV && s[0].norm == 0 && !s[0].post);
    assert_true(s[1].kind == CLM_HEAD_NORM && s[2].kind == CLM_ATTN && s[2].neox);
    assert_true(s[3].kind == CLM_PROJ && s[3].in == CLM_ATT && s[3].out == CLM_X && s[3].res &&
                s[3].post == 2);
    assert_true(s[4].kind == CLM_PROJ && s[4].out == CLM_GU && s[4].norm == 2);
    assert_true(s[5].kind == CLM_PROJ && s[5].in == CLM_GU && s[5].glu == CLM_GLU_GELU &&
                s[5].res && s[5].post == 4);
    /* A norm of the attention output into another buffer matches no pattern: refused with
     * the op's place and the way out. */
    struct ebb__op glayer[32];
    memcpy(glayer, ebb__arch_gemma3.layer, ebb__arch_gemma3.n_layer_ops * sizeof(glayer[0]));
    struct ebb__arch odd = ebb__arch_gemma3;
    odd.layer = glayer;
    glayer[10].dst = EBB__BUF_CUR;
    assert_int_equal(ebb__clm_plan(&odd, &p, &d), EBB_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "gemma3's layer op 9 (matmul)"));
    assert_non_null(strstr(d.msg, "--device ref"));
    /* qwen2: llama's steps with the q|k|v bias between the projection and the attention. */
    assert_int_equal(ebb__clm_plan(&ebb__arch_qwen2, &p, &d), EBB_OK);
    assert_int_equal(p.n_steps, 6);
    assert_true(p.steps[0].kind == CLM_PROJ && p.steps[1].kind == CLM_BIAS &&
                p.steps[2].kind == CLM_ATTN && p.steps[2].neox && p.has_bias);
    /* qwen3: the head norms there instead. */
    assert_int_equal(ebb__clm_plan(&ebb__arch_qwen3, &p, &d), EBB_OK);
    assert_int_equal(p.n_steps, 6);
    assert_true(p.steps[1].kind == CLM_HEAD_NORM && p.has_qk_norm && !p.has_bias);
    /* phi3: llama's five steps, the fused weights as groups of one. */
    assert_int_equal(ebb__clm_plan(&ebb__arch_phi3, &p, &d), EBB_OK);
    assert_int_equal(p.n_steps, 5);
    assert_true(p.steps[0].out == CLM_QKV && p.groups[p.steps[0].group].n == 1);
    assert_true(p.steps[3].out == CLM_GU && p.groups[p.steps[3].group].n == 1);
    assert_true(p.steps[4].glu && p.steps[4].res);
    /* qwen3moe: qwen3's attention steps, then one moe step with its norm and four groups of
     * one weight (the router, the gate, up and down stacks). */
    assert_int_equal(ebb__clm_plan(&ebb__arch_qwen3moe, &p, &d), EBB_OK);
    assert_int_equal(p.n_steps, 5);
    assert_true(p.steps[4].kind == CLM_MOE && p.steps[4].norm == 1 && p.steps[4].group == 2);
    assert_int_equal(p.n_groups, 6);
    for (int k = 0; k < 4; k++)
        assert_true(p.groups[2 + k].n == 1 && p.groups[2 + k].t[0] == p.groups[2].t[0] + k);
    /* A moe op with another activation has no kernel. */
    struct ebb__op layer[32];
    memcpy(layer, ebb__arch_qwen3moe.layer, ebb__arch_qwen3moe.n_layer_ops * sizeof(layer[0]));
    struct ebb__arch gelu_moe = ebb__arch_qwen3moe;
    gelu_moe.layer = layer;
    layer[12].arg = EBB__ACT_GELU_TANH;
    assert_int_equal(ebb__clm_plan(&gelu_moe, &p, &d), EBB_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "qwen3moe's layer op 11 (rms_norm)"));
}

/* ebb_model_memory_estimate from the header is what ebb_model_memory says once the model is
 * open on the CPU device: its repacked copy to the byte (walking the description's products,
 * the tied head included) and the store to the byte; EBB_CPU_REPACK=0 makes no copy. The
 * OpenCL engine repacks nothing, and keeps no store for a windowed family whose window is
 * shorter than the context (Gemma 3's 512 positions), where the host engines keep one. */
static void test_memory_estimate(void **state)
{
    (void)state;
    const char *file = "SmolLM2-135M-Instruct.Q4_1.gguf";
    struct ebb_gguf *g = open_real(file);
    char path[1024];
    model_path(path, sizeof(path), file);
    struct ebb_model_params p = {
        .path = path, .device = "cpu", .n_ctx = 128, .n_seq = 1, .prompt_cache = 8 << 20};
    struct ebb_model_memory est, got;
    struct ebb_diag d = {{0}};
    setenv("EBB_CPU_REPACK", "1", 1); /* whatever the memory available now */
    assert_int_equal(ebb_model_memory_estimate(g, &p, &est, &d), EBB_OK);
    /* Q4_1 copies are the file's bytes: the layers' matrices and the tied head, about the file
     * again (98.4 MB) */
    assert_true(est.repack > 80u << 20 && est.repack < ebb_gguf_file_size(g));
    assert_true(est.store > (8u << 20) - 23040 && est.store <= 8u << 20);
    assert_int_equal(est.host, 0);
    struct ebb_model *m = NULL;
    if (ebb_model_open(&p, &m, &d))
        fail_msg("open %s on cpu: %s", path, d.msg);
    ebb_model_memory(m, &got);
    assert_int_equal(got.repack, est.repack);
    assert_int_equal(got.store, est.store);
    assert_int_equal(got.store, ebb_model_kv_store_bytes(m));
    /* the fp16 KV cache (30 layers, 3 heads of 64, 128 positions) and the logits rows at
     * least */
    assert_true(got.host > 2ull * 30 * 3 * 64 * 2 * 128 + 64ull * 49152 * 4);
    ebb_model_close(m);
    setenv("EBB_CPU_REPACK", "0", 1);
    assert_int_equal(ebb_model_memory_estimate(g, &p, &est, &d), EBB_OK);
    assert_int_equal(est.repack, 0);
    unsetenv("EBB_CPU_REPACK");
    p.device = "cl:0:0";
    assert_int_equal(ebb_model_memory_estimate(g, &p, &est, &d), EBB_OK);
    assert_int_equal(est.repack, 0);
    assert_true(est.store > 0);
    ebb_gguf_close(g);

    g = open_real("gemma-3-270m-q4_k_m.gguf");
    p.n_ctx = 256;
    assert_int_equal(ebb_model_memory_estimate(g, &p, &est, &d), EBB_OK);
    assert_true(est.store > 0 && est.repack == 0);
    p.n_ctx = 1024;
    assert_int_equal(ebb_model_memory_estimate(g, &p, &est, &d), EBB_OK);
    assert_int_equal(est.store, 0);
    p.device = "cpu";
    assert_int_equal(ebb_model_memory_estimate(g, &p, &est, &d), EBB_OK);
    assert_true(est.store > 0 && est.repack > 0);
    ebb_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2),         cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_tiny_families),   cmocka_unit_test(test_missing_and_misshapen),
        cmocka_unit_test(test_unknown_arch),    cmocka_unit_test(test_refused_and_optional),
        cmocka_unit_test(test_bad_description), cmocka_unit_test(test_cl_plan),
        cmocka_unit_test(test_llama3_rope),     cmocka_unit_test(test_experts),
        cmocka_unit_test(test_longrope),        cmocka_unit_test(test_ctx_choice),
        cmocka_unit_test(test_memory_estimate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
