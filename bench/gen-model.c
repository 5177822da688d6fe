/* Writes a random-weight GGUF of a real model's shape for benchmarks, streaming tests and the
 * family tests against llama.cpp: the tokenizer metadata is copied from a real GGUF (padded
 * with unused tokens up to the shape's vocabulary), weights are random Q4_0 (or Q8_0, Q5_0, Q5_K,
 * Q6_K, or the Q4_K_M and Q5_K_M mixes) blocks scaled so that activations stay in a sane range
 * through the layers. The llama shapes keep their norms at 1; the other families' norms are random
 * in [0.75, 1.25] and their biases in [-0.5, 0.5], so that a backend that skipped or misplaced one
 * would show. The output is a function of the arguments alone (splitmix64 from --seed): CI
 * regenerates the files the committed llama.cpp data was recorded on, byte for byte.
 *
 *   ebb-gen-model --shape NAME --tokenizer-from MODEL.gguf
 *                 [--type q4_0|q8_0|q5_0|q5_k|q6_k|q4_k_m|q5_k_m]
 *                 [--seed N] [--layers N] [--chat-template FILE] -o OUT.gguf
 *
 * --chat-template stores FILE's text as tokenizer.chat_template (in place of the source's, if it
 * has one); without it the source's template, if any, is copied like its other tokenizer keys.
 *
 * q4_k_m writes the types llama.cpp's Q4_K_M files use: Q4_K matrices, Q6_K for the output head
 * and for attn_v and ffn_down(_exps) in the first and last eighth of the layers and every third
 * one between; f32 norms and router (rows must be multiples of 256: of the tiny shapes only
 * qwen3moe-tiny-k, whose 3 layers get Q6_K down stacks in layer 2 and Q4_K in 0 and 1). q5_k_m
 * is the same mix on Q5_K matrices (llama.cpp's Q5_K_M); q6_k is Q6_K throughout, the token
 * embeddings and the output head too (llama.cpp's Q6_K files).
 *
 * Families and their GGUF names (as llama.cpp reads them): llama (Llama 3.1 shapes with
 * rope_freqs.weight); qwen2 (Qwen 2/2.5: biases attn_{q,k,v}.bias); qwen3
 * (attn_{q,k}_norm.weight per head, key_length may exceed embedding_length / head_count); phi3
 * (attn_qkv.weight fused q|k|v, ffn_up.weight fused gate|up, no ffn_gate); qwen3moe (qwen3's
 * attention; ffn_gate_inp.weight the f32 router, ffn_{gate,up,down}_exps.weight stacks of
 * expert_count matrices); gemma3 (qwen3's head norms plus post_attention_norm and
 * post_ffw_norm, attention.sliding_window; the architecture fixes five local layers to one
 * global); Mistral is llama with attention.sliding_window (every layer windowed). Shapes ending in
 * -tiny are small widths for CI, with an untied output head: a random model with a tied one only
 * ever repeats its last input token (the token's own embedding dominates the residual stream),
 * which would test little.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

enum family { LLAMA, QWEN2, QWEN3, PHI3, QWEN3MOE, GEMMA3 };
static const char *const family_names[] = {"llama", "qwen2", "qwen3", "phi3", "qwen3moe", "gemma3"};

struct shape {
    const char *name;
    uint8_t family; /* enum family */
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_base;
    bool tied;
    uint32_t head_dim; /* 0: n_embd / n_head, and no key_length key */
    float rms_eps;     /* 0: 1e-5 */
    /* Llama 3.1's rope scaling (0: none): rope_freqs.weight holds the divisors of its formula
     * for this factor, low/high frequency factors 1 and 4 and this original context. */
    float rope_factor;
    uint32_t rope_orig_ctx;
    /* qwen3moe: expert_count, expert_used_count, expert_feed_forward_length. */
    uint32_t n_expert, n_expert_used, n_ff_exp;
    /* attention.sliding_window: gemma3's five local layers to one global; llama (Mistral)
     * every layer. */
    uint32_t swa;
};

static const struct shape shapes[] = {
    {"llama3-8b", LLAMA, 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f, false, 0, 0, 0, 0, 0, 0,
     0, 0},
    {"llama3.2-1b", LLAMA, 2048, 16, 32, 8, 8192, 128256, 8192, 500000.0f, true, 0, 0, 0, 0, 0, 0,
     0, 0},
    {"llama3.1-8b", LLAMA, 4096, 32, 32, 8, 14336, 128256, 131072, 500000.0f, false, 0, 0, 8.0f,
     8192, 0, 0, 0, 0},
    /* The original context is 64 rather than 8192 so that the divisors change the rotation
     * within the test prompts' few dozen positions. */
    {"llama3.1-tiny", LLAMA, 128, 3, 4, 2, 384, 128256, 131072, 500000.0f, false, 0, 0, 8.0f, 64, 0,
     0, 0, 0},
    {"smollm2-135m", LLAMA, 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, true, 0, 0, 0, 0, 0, 0, 0,
     0},
    {"qwen2.5-0.5b", QWEN2, 896, 24, 14, 2, 4864, 151936, 32768, 1e6f, true, 0, 1e-6f, 0, 0, 0, 0,
     0, 0},
    {"qwen2.5-7b", QWEN2, 3584, 28, 28, 4, 18944, 152064, 32768, 1e6f, false, 0, 1e-6f, 0, 0, 0, 0,
     0, 0},
    {"qwen2-tiny", QWEN2, 128, 3, 4, 2, 384, 151936, 32768, 1e6f, false, 0, 1e-6f, 0, 0, 0, 0, 0,
     0},
    {"qwen3-0.6b", QWEN3, 1024, 28, 16, 8, 3072, 151936, 40960, 1e6f, true, 128, 1e-6f, 0, 0, 0, 0,
     0, 0},
    {"qwen3-8b", QWEN3, 4096, 36, 32, 8, 12288, 151936, 40960, 1e6f, false, 128, 1e-6f, 0, 0, 0, 0,
     0, 0},
    {"qwen3-tiny", QWEN3, 128, 3, 4, 2, 384, 151936, 40960, 1e6f, false, 64, 1e-6f, 0, 0, 0, 0, 0,
     0},
    /* qwen3-tiny with rows of 256 (q4_k_m needs them). */
    {"qwen3-tiny-k", QWEN3, 256, 3, 4, 2, 768, 151936, 40960, 1e6f, false, 64, 1e-6f, 0, 0, 0, 0, 0,
     0},
    /* qwen3-tiny-k with a vocabulary of 32000 (a SentencePiece tokenizer's, llama-spm): the
     * batch tests, whose token ids are below 20000 and whose time was mostly the 151936-row
     * output head on PoCL. */
    {"qwen3-tiny-k32", QWEN3, 256, 3, 4, 2, 768, 32000, 40960, 1e6f, false, 64, 1e-6f, 0, 0, 0, 0,
     0, 0},
    {"qwen3-30b-a3b", QWEN3MOE, 2048, 48, 32, 4, 6144, 151936, 40960, 1e6f, false, 128, 1e-6f, 0, 0,
     128, 8, 768, 0},
    {"qwen3moe-tiny", QWEN3MOE, 128, 3, 4, 2, 384, 151936, 40960, 1e6f, false, 64, 1e-6f, 0, 0, 16,
     4, 96, 0},
    /* qwen3moe-tiny with rows of 256 (q4_k_m needs them): its Q4_K_M mix has layer 2's down
     * stack in Q6_K and layers 0 and 1's in Q4_K, as the real files mix them (the expert cache's
     * test). */
    {"qwen3moe-tiny-k", QWEN3MOE, 256, 3, 4, 2, 768, 151936, 40960, 1e6f, false, 64, 1e-6f, 0, 0,
     16, 4, 256, 0},
    {"phi3-mini", PHI3, 3072, 32, 32, 32, 8192, 32064, 4096, 10000.0f, false, 0, 1e-5f, 0, 0, 0, 0,
     0, 0},
    {"phi3-tiny", PHI3, 128, 3, 4, 4, 384, 32064, 4096, 10000.0f, false, 0, 1e-5f, 0, 0, 0, 0, 0,
     0},
    /* Phi-3.5 mini's longrope (a phi3 shape with rope_orig_ctx): rope_factors_short.weight and
     * rope_factors_long.weight (divisors rising from 1 to 1.1 and to 64 over the rotary pairs),
     * rope.scaling.original_context_length and rope.scaling.attn_factor (sqrt(1 + ln(s) /
     * ln(original context)), s = context / original context, as llama.cpp's converter writes); the
     * tiny one's original context is 64, so a context above 64 runs the long factors and one of 64
     * or less the short ones. */
    {"phi3.5-mini", PHI3, 3072, 32, 32, 32, 8192, 32064, 131072, 10000.0f, false, 0, 1e-5f, 0, 4096,
     0, 0, 0, 0},
    {"phi3.5-tiny", PHI3, 128, 3, 4, 4, 384, 32064, 4096, 10000.0f, false, 0, 1e-5f, 0, 64, 0, 0, 0,
     0},
    /* Gemma 3 4B's text model (head_dim 256, window 1024) and a small one for checks. */
    {"gemma3-4b", GEMMA3, 2560, 34, 8, 4, 10240, 262144, 131072, 1e6f, true, 256, 1e-6f, 0, 0, 0, 0,
     0, 1024},
    /* Mistral 7B v0.1 (window 4096 on every layer, SentencePiece vocabulary of 32000) and a small
     * one whose 16-position window a test prompt crosses. */
    {"mistral-7b", LLAMA, 4096, 32, 32, 8, 14336, 32000, 32768, 10000.0f, false, 0, 0, 0, 0, 0, 0,
     0, 4096},
    {"mistral-tiny", LLAMA, 128, 3, 4, 2, 384, 32000, 32768, 10000.0f, false, 0, 0, 0, 0, 0, 0, 0,
     16},
    {"gemma3-tiny", GEMMA3, 128, 7, 4, 1, 384, 262144, 32768, 1e6f, false, 64, 1e-6f, 0, 0, 0, 0, 0,
     16},
};

/* Little GGUF writer over stdio. */
struct w {
    FILE *f;
    bool err;
};

static void put(struct w *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        w->err = true;
}
static void put_u32(struct w *w, uint32_t v)
{
    put(w, &v, 4);
}
static void put_u64(struct w *w, uint64_t v)
{
    put(w, &v, 8);
}
static void put_str(struct w *w, const char *p, uint64_t n)
{
    put_u64(w, n);
    put(w, p, n);
}
static void put_cstr(struct w *w, const char *s)
{
    put_str(w, s, strlen(s));
}
static void kv_u32(struct w *w, const char *k, uint32_t v)
{
    put_cstr(w, k);
    put_u32(w, EBB_GGUF_U32);
    put_u32(w, v);
}
static void kv_f32(struct w *w, const char *k, float v)
{
    put_cstr(w, k);
    put_u32(w, EBB_GGUF_F32);
    put(w, &v, 4);
}
static void kv_str(struct w *w, const char *k, const char *v)
{
    put_cstr(w, k);
    put_u32(w, EBB_GGUF_STRING);
    put_cstr(w, v);
}

static size_t vtype_size(enum ebb_gguf_vtype t)
{
    switch (t) {
    case EBB_GGUF_U8:
    case EBB_GGUF_I8:
    case EBB_GGUF_BOOL:
        return 1;
    case EBB_GGUF_U16:
    case EBB_GGUF_I16:
        return 2;
    case EBB_GGUF_U32:
    case EBB_GGUF_I32:
    case EBB_GGUF_F32:
        return 4;
    case EBB_GGUF_U64:
    case EBB_GGUF_I64:
    case EBB_GGUF_F64:
        return 8;
    default:
        return 0;
    }
}

/* Copies one array value, padding it to n_out elements (strings get "<|ebb_pad_N|>", token
 * types 5 = unused, scores -1e9... only the first level is padded). */
static ebb_err copy_arr(struct w *w, const struct ebb_gguf_arr *a, uint64_t n_out, int pad_kind)
{
    put_u32(w, a->type);
    put_u64(w, n_out);
    for (uint64_t i = 0; i < n_out; i++) {
        if (a->type == EBB_GGUF_STRING) {
            struct ebb_str s;
            char buf[48];
            if (i < a->n) {
                ebb_err rc = ebb_gguf_arr_str(a, i, &s);
                if (rc)
                    return rc;
                put_str(w, s.p, s.n);
            } else {
                int n = snprintf(buf, sizeof(buf), "<|ebb_pad_%llu|>", (unsigned long long)i);
                put_str(w, buf, (uint64_t)n);
            }
        } else if (a->type == EBB_GGUF_ARRAY) {
            struct ebb_gguf_arr sub;
            ebb_err rc = ebb_gguf_arr_sub(a, i, &sub);
            if (rc)
                return rc;
            rc = copy_arr(w, &sub, sub.n, 0);
            if (rc)
                return rc;
        } else {
            size_t es = vtype_size(a->type);
            if (i < a->n) {
                put(w, a->data + i * es, es);
            } else if (pad_kind == 1 && a->type == EBB_GGUF_I32) {
                int32_t unused = 5;
                put(w, &unused, 4);
            } else if (a->type == EBB_GGUF_F32) {
                float lo = -1e9f;
                put(w, &lo, 4);
            } else {
                uint64_t zero = 0;
                put(w, &zero, es);
            }
        }
    }
    return EBB_OK;
}

struct tinfo {
    char name[64];
    uint32_t n_dims;
    uint64_t ne[3];
    uint32_t type;
    uint64_t offset, size;
    float scale; /* weight scale; F32: 0 all ones, > 0 uniform in [lo, lo + scale) */
    float lo;
    const float *vals; /* F32: these values instead */
};

static uint64_t rng_state;
static uint64_t rng(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint16_t f32_to_f16(float f)
{
    /* Scales here are small and positive: a simple conversion suffices. */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = (x >> 13) & 0x3ff;
    if (exp <= 0) /* subnormal (the K-quants' small scales): steps of 2^-24, truncated */
        return (uint16_t)(sign | (uint32_t)(fabsf(f) * 16777216.0f));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7bff);
    return (uint16_t)(sign | ((uint32_t)exp << 10) | mant);
}

/* Elements and bytes per block, and the variance of one element over d^2 when every bit but
 * the scales' is random: Q4_0 (q - 8), Q8_0 (int8), Q5_0 (q - 16, q of five bits), Q4_K
 * (sc q - 7.5 m with dmin = 7.5 d, its six-bit sc, m and four-bit q uniform: mean 0), Q5_K
 * (sc q - 15.5 m with dmin = 15.5 d, q of five bits), Q6_K (int8 sc times q - 32). */
struct qinfo {
    uint32_t type, blk, bytes;
    float var;
};

static const struct qinfo qinfos[] = {
    {EBB_GGML_Q4_0, 32, 18, 21.25f},     {EBB_GGML_Q8_0, 32, 34, 5461.5f},
    {EBB_GGML_Q5_0, 32, 22, 85.25f},     {EBB_GGML_Q5_K, 256, 176, 277651.5f},
    {EBB_GGML_Q4_K, 256, 144, 66727.5f}, {EBB_GGML_Q6_K, 256, 210, 1865102.0f},
};

static const struct qinfo *qinfo(uint32_t type)
{
    for (size_t i = 0; i < sizeof(qinfos) / sizeof(qinfos[0]); i++)
        if (qinfos[i].type == type)
            return &qinfos[i];
    return &qinfos[0];
}

/* Random K-quant blocks: every byte random, then d (and Q4_K's dmin = 7.5 d, Q5_K's 15.5 d) in
 * place. */
static void write_kquant(struct w *w, const struct tinfo *t, uint16_t d, uint8_t *buf, size_t bufsz)
{
    const bool q4 = t->type == EBB_GGML_Q4_K || t->type == EBB_GGML_Q5_K;
    const size_t bs = t->type == EBB_GGML_Q4_K ? 144 : t->type == EBB_GGML_Q5_K ? 176 : 210;
    uint16_t dmin = f32_to_f16((t->type == EBB_GGML_Q5_K ? 15.5f : 7.5f) * t->scale);
    for (uint64_t left = t->size; left;) {
        size_t n = left < bufsz ? (size_t)left : bufsz - bufsz % bs;
        for (size_t off = 0; off < n; off += bs) {
            for (size_t j = 0; j < bs; j += 8) {
                uint64_t r = rng();
                memcpy(buf + off + j, &r, bs - j < 8 ? bs - j : 8);
            }
            memcpy(buf + off + (q4 ? 0 : 208), &d, 2);
            if (q4)
                memcpy(buf + off + 2, &dmin, 2);
        }
        put(w, buf, n);
        left -= n;
    }
}

static void write_tensor(struct w *w, const struct tinfo *t, uint8_t *buf, size_t bufsz)
{
    uint64_t left = t->size;
    if (t->type == EBB_GGML_F32) {
        for (uint64_t i = 0; i < t->size / 4; i++) {
            float v = 1.0f;
            if (t->vals)
                v = t->vals[i];
            else if (t->scale > 0)
                v = t->lo + t->scale * (float)(rng() >> 40) / (float)(1u << 24);
            put(w, &v, 4);
        }
        return;
    }
    uint16_t d = f32_to_f16(t->scale);
    if (t->type == EBB_GGML_Q4_K || t->type == EBB_GGML_Q5_K || t->type == EBB_GGML_Q6_K) {
        write_kquant(w, t, d, buf, bufsz);
        return;
    }
    size_t bs = t->type == EBB_GGML_Q4_0 ? 18 : t->type == EBB_GGML_Q5_0 ? 22 : 34;
    while (left) {
        size_t n = left < bufsz ? (size_t)left : bufsz - bufsz % bs;
        for (size_t off = 0; off < n; off += bs) {
            memcpy(buf + off, &d, 2);
            for (size_t j = 2; j < bs; j += 8) {
                uint64_t r = rng();
                size_t m = bs - j < 8 ? bs - j : 8;
                memcpy(buf + off + j, &r, m);
            }
        }
        put(w, buf, n);
        left -= n;
    }
}

/* Llama 3.1's frequency divisors for n_rot dimensions (low/high frequency factors 1 and 4). */
static void llama3_freqs(const struct shape *sh, uint32_t n_rot, float *ff)
{
    const double lo = 1.0, hi = 4.0, orig = sh->rope_orig_ctx;
    for (uint32_t i = 0; i < n_rot / 2; i++) {
        double wave = 2.0 * M_PI * pow((double)sh->rope_base, 2.0 * i / n_rot);
        double div = 1.0;
        if (wave > orig / lo)
            div = sh->rope_factor;
        else if (wave >= orig / hi)
            div = 1.0 / ((1.0 - (orig / wave - lo) / (hi - lo)) / sh->rope_factor +
                         (orig / wave - lo) / (hi - lo));
        ff[i] = (float)div;
    }
}

/* A whole text file, NUL-terminated (NULL with a message on failure or an embedded NUL). */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "ebb-gen-model: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    while (p) {
        n += fread(p + n, 1, cap - 1 - n, f);
        if (n < cap - 1)
            break;
        char *q = cap > SIZE_MAX / 2 ? NULL : realloc(p, cap * 2);
        if (!q) {
            free(p);
            p = NULL;
            break;
        }
        p = q;
        cap *= 2;
    }
    bool bad = !p || ferror(f);
    fclose(f);
    if (!bad) {
        p[n] = '\0';
        bad = strlen(p) != n;
    }
    if (bad) {
        fprintf(stderr, "ebb-gen-model: %s: cannot read a text file\n", path);
        free(p);
        return NULL;
    }
    return p;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: ebb-gen-model --shape NAME --tokenizer-from MODEL.gguf\n"
               "                     [--type q4_0|q8_0|q5_0|q5_k|q6_k|q4_k_m|q5_k_m]\n"
               "                     [--seed N] [--layers N] [--chat-template FILE]\n"
               "                     -o OUT.gguf\n"
               "shapes:");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        fprintf(f, " %s", shapes[i].name);
    fprintf(f, "\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *shape_name = NULL, *tok_path = NULL, *out_path = NULL, *type_name = "q4_0";
    const char *tmpl_path = NULL;
    uint64_t seed = 1;
    long layers = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return usage(stdout) - 2;
        if (!v)
            return usage(stderr);
        if (!strcmp(a, "--shape"))
            shape_name = v;
        else if (!strcmp(a, "--tokenizer-from"))
            tok_path = v;
        else if (!strcmp(a, "-o"))
            out_path = v;
        else if (!strcmp(a, "--type"))
            type_name = v;
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--layers"))
            layers = strtol(v, NULL, 10);
        else if (!strcmp(a, "--chat-template"))
            tmpl_path = v;
        else
            return usage(stderr);
        i++;
    }
    if (!shape_name || !tok_path || !out_path)
        return usage(stderr);
    const struct shape *sh = NULL;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        if (!strcmp(shapes[i].name, shape_name))
            sh = &shapes[i];
    if (!sh) {
        fprintf(stderr, "ebb-gen-model: unknown shape '%s'\n", shape_name);
        return usage(stderr);
    }
    uint32_t wtype;
    bool mix = false; /* q4_k_m, q5_k_m: Q4_K or Q5_K, and Q6_K where llama.cpp's mixes give
                         more bits */
    if (!strcmp(type_name, "q4_0"))
        wtype = EBB_GGML_Q4_0;
    else if (!strcmp(type_name, "q8_0"))
        wtype = EBB_GGML_Q8_0;
    else if (!strcmp(type_name, "q5_0"))
        wtype = EBB_GGML_Q5_0;
    else if (!strcmp(type_name, "q5_k"))
        wtype = EBB_GGML_Q5_K;
    else if (!strcmp(type_name, "q6_k"))
        wtype = EBB_GGML_Q6_K;
    else if (!strcmp(type_name, "q4_k_m"))
        wtype = EBB_GGML_Q4_K, mix = true;
    else if (!strcmp(type_name, "q5_k_m"))
        wtype = EBB_GGML_Q5_K, mix = true;
    else {
        fprintf(stderr,
                "ebb-gen-model: unsupported --type '%s' (q4_0, q8_0, q5_0, q5_k, q6_k, q4_k_m, "
                "q5_k_m)\n",
                type_name);
        return 2;
    }
    if ((mix || wtype == EBB_GGML_Q5_K || wtype == EBB_GGML_Q6_K) &&
        (sh->n_embd % 256 ||
         (sh->head_dim ? sh->head_dim : sh->n_embd / sh->n_head) * sh->n_head % 256 ||
         (sh->n_expert ? sh->n_ff_exp : sh->n_ff) % 256)) {
        fprintf(stderr, "ebb-gen-model: %s needs rows of multiples of 256 (shape %s)\n", type_name,
                sh->name);
        return 2;
    }
    uint32_t n_layer = layers > 0 ? (uint32_t)layers : sh->n_layer;
    rng_state = seed;
    char *tmpl = NULL;
    if (tmpl_path && !(tmpl = read_text(tmpl_path)))
        return 1;

    struct ebb_diag diag = {{0}};
    struct ebb_gguf *src = NULL;
    if (ebb_gguf_open(tok_path, &src, &diag)) {
        fprintf(stderr, "ebb-gen-model: %s: %s\n", tok_path, diag.msg);
        free(tmpl);
        return 1;
    }
    struct ebb_gguf_arr toks;
    if (!ebb_gguf_get_arr(src, "tokenizer.ggml.tokens", &toks) && toks.n > sh->n_vocab) {
        fprintf(stderr,
                "ebb-gen-model: %s has %llu tokens, more than shape %s's vocabulary of %u\n",
                tok_path, (unsigned long long)toks.n, sh->name, sh->n_vocab);
        ebb_gguf_close(src);
        free(tmpl);
        return 1;
    }
    FILE *f = fopen(out_path, "wb");
    if (!f) {
        fprintf(stderr, "ebb-gen-model: %s: %s\n", out_path, strerror(errno));
        ebb_gguf_close(src);
        free(tmpl);
        return 1;
    }
    struct w w = {f, false};

    /* Tensor list in file order: globals, then layers (contiguous per layer). */
    const bool moe = sh->family == QWEN3MOE;
    const bool qwen2 = sh->family == QWEN2, qwen3 = sh->family == QWEN3 || moe;
    const bool rnd = sh->family != LLAMA || sh->rope_factor > 0 || sh->swa;
    const bool phi3 = sh->family == PHI3, gemma3 = sh->family == GEMMA3;
    uint32_t hd = sh->head_dim ? sh->head_dim : sh->n_embd / sh->n_head;
    uint32_t n_q = hd * sh->n_head, n_kv = hd * sh->n_head_kv;
    uint32_t per_layer =
        phi3 ? 6
             : 9 + (qwen2 ? 3 : 0) + (qwen3 || gemma3 ? 2 : 0) + (moe ? 1 : 0) + (gemma3 ? 2 : 0);
    const bool longrope = phi3 && sh->rope_orig_ctx > 0;
    uint32_t n_t =
        2 + (sh->tied ? 0 : 1) + (sh->rope_factor > 0) + (longrope ? 2 : 0) + per_layer * n_layer;
    struct tinfo *ts = calloc(n_t, sizeof(*ts));
    if (!ts)
        return 1;
    uint32_t k = 0;
    const float qvar = qinfo(wtype)->var;
    /* A tensor of another type than wtype gets its scale rescaled to the same spread. */
#define RESCALE(ty) ((ty) == wtype ? 1.0f : sqrtf(qvar / qinfo(ty)->var))
    /* F32 vectors: norms (all ones for llama, else random around 1) and biases. */
    const float norm_sc = rnd ? 0.5f : 0.0f, norm_lo = 0.75f;
#define ADD_LO(nm, n0, n1, ty, sc, l0)                                                             \
    do {                                                                                           \
        struct tinfo *t = &ts[k++];                                                                \
        snprintf(t->name, sizeof(t->name), "%s", nm);                                              \
        t->n_dims = ((n1) != 0) ? 2 : 1;                                                           \
        t->ne[0] = (n0);                                                                           \
        t->ne[1] = ((n1) != 0) ? (n1) : 1;                                                         \
        t->type = (ty);                                                                            \
        t->size = (ty) == EBB_GGML_F32 ? t->ne[0] * t->ne[1] * 4                                   \
                                       : t->ne[0] / qinfo(ty)->blk * qinfo(ty)->bytes * t->ne[1];  \
        t->scale = (ty) == EBB_GGML_F32 ? (sc) : (sc)*RESCALE(ty);                                 \
        t->lo = (l0);                                                                              \
    } while (0)
#define ADD(nm, n0, n1, ty, sc) ADD_LO(nm, n0, n1, ty, sc, 0.0f)
    /* A stack of n2 matrices (experts). */
#define ADD3(nm, n0, n1, n2, ty, sc)                                                               \
    do {                                                                                           \
        ADD(nm, n0, n1, ty, sc);                                                                   \
        ts[k - 1].n_dims = 3;                                                                      \
        ts[k - 1].ne[2] = (n2);                                                                    \
        ts[k - 1].size *= (n2);                                                                    \
    } while (0)
    float embd_scale = 1.0f / sqrtf(qvar);
    const uint32_t hi = mix ? EBB_GGML_Q6_K : wtype; /* the mix's output head */
    ADD("token_embd.weight", sh->n_embd, sh->n_vocab, wtype, embd_scale);
    ADD_LO("output_norm.weight", sh->n_embd, 0, EBB_GGML_F32, norm_sc, norm_lo);
    if (!sh->tied)
        ADD("output.weight", sh->n_embd, sh->n_vocab, hi, 1.0f / sqrtf(qvar * sh->n_embd));
    static float rope_ff[512];
    if (sh->rope_factor > 0 && hd <= 1024) {
        llama3_freqs(sh, hd, rope_ff);
        ADD("rope_freqs.weight", hd / 2, 0, EBB_GGML_F32, 0.0f);
        ts[k - 1].vals = rope_ff;
    }
    static float lr_short[512], lr_long[512];
    if (longrope && hd <= 1024) {
        uint32_t n = hd / 2;
        for (uint32_t i = 0; i < n; i++) {
            float t = n > 1 ? (float)i / (float)(n - 1) : 0.0f;
            lr_short[i] = 1.0f + 0.1f * t;
            lr_long[i] = 1.0f + 63.0f * t * t;
        }
        ADD("rope_factors_long.weight", n, 0, EBB_GGML_F32, 0.0f);
        ts[k - 1].vals = lr_long;
        ADD("rope_factors_short.weight", n, 0, EBB_GGML_F32, 0.0f);
        ts[k - 1].vals = lr_short;
    }
    for (uint32_t l = 0; l < n_layer; l++) {
        char nm[64];
        float se = 1.0f / sqrtf(qvar * sh->n_embd), sf = 1.0f / sqrtf(qvar * sh->n_ff);
        float sq = 1.0f / sqrtf(qvar * n_q);
        /* Q4_K_M's (and Q5_K_M's) attn_v and ffn_down: Q6_K in the first and last eighth of
         * the layers and every third one between. */
        const bool more =
            mix && (l < n_layer / 8 || l >= 7 * n_layer / 8 || (l - n_layer / 8) % 3 == 2);
        const uint32_t vt = more ? EBB_GGML_Q6_K : wtype;
#define L(suffix, n0, n1, ty, sc)                                                                  \
    snprintf(nm, sizeof(nm), "blk.%u.%s", l, suffix);                                              \
    ADD(nm, n0, n1, ty, sc)
#define L_LO(suffix, n0, ty, sc, l0)                                                               \
    snprintf(nm, sizeof(nm), "blk.%u.%s", l, suffix);                                              \
    ADD_LO(nm, n0, 0, ty, sc, l0)
        L_LO("attn_norm.weight", sh->n_embd, EBB_GGML_F32, norm_sc, norm_lo);
        if (phi3) {
            L("attn_qkv.weight", sh->n_embd, n_q + 2 * n_kv, wtype, se);
            L("attn_output.weight", n_q, sh->n_embd, wtype, sq * 0.5f);
            L_LO("ffn_norm.weight", sh->n_embd, EBB_GGML_F32, norm_sc, norm_lo);
            L("ffn_up.weight", sh->n_embd, 2 * sh->n_ff, wtype, se);
            L("ffn_down.weight", sh->n_ff, sh->n_embd, wtype, sf * 0.5f);
            continue;
        }
        L("attn_q.weight", sh->n_embd, n_q, wtype, se);
        if (qwen2) {
            L_LO("attn_q.bias", n_q, EBB_GGML_F32, 1.0f, -0.5f);
        }
        L("attn_k.weight", sh->n_embd, n_kv, wtype, se);
        if (qwen2) {
            L_LO("attn_k.bias", n_kv, EBB_GGML_F32, 1.0f, -0.5f);
        }
        L("attn_v.weight", sh->n_embd, n_kv, vt, se);
        if (qwen2) {
            L_LO("attn_v.bias", n_kv, EBB_GGML_F32, 1.0f, -0.5f);
        }
        if (qwen3 || gemma3) {
            L_LO("attn_q_norm.weight", hd, EBB_GGML_F32, norm_sc, norm_lo);
            L_LO("attn_k_norm.weight", hd, EBB_GGML_F32, norm_sc, norm_lo);
        }
        L("attn_output.weight", n_q, sh->n_embd, wtype, sq * 0.5f);
        if (gemma3) { /* the norms of the blocks' outputs, before their residual adds */
            L_LO("post_attention_norm.weight", sh->n_embd, EBB_GGML_F32, norm_sc, norm_lo);
        }
        L_LO("ffn_norm.weight", sh->n_embd, EBB_GGML_F32, norm_sc, norm_lo);
        if (moe) {
            /* The router in f32 as the real files have it, its scores of standard deviation
             * ~2 (decisive but not one-hot); each expert scaled like a dense block. */
            float rs = 2.0f * sqrtf(3.0f / sh->n_embd), sx = 1.0f / sqrtf(qvar * sh->n_ff_exp);
            snprintf(nm, sizeof(nm), "blk.%u.ffn_gate_inp.weight", l);
            ADD_LO(nm, sh->n_embd, sh->n_expert, EBB_GGML_F32, 2.0f * rs, -rs);
            snprintf(nm, sizeof(nm), "blk.%u.ffn_gate_exps.weight", l);
            ADD3(nm, sh->n_embd, sh->n_ff_exp, sh->n_expert, wtype, se);
            snprintf(nm, sizeof(nm), "blk.%u.ffn_up_exps.weight", l);
            ADD3(nm, sh->n_embd, sh->n_ff_exp, sh->n_expert, wtype, se);
            snprintf(nm, sizeof(nm), "blk.%u.ffn_down_exps.weight", l);
            ADD3(nm, sh->n_ff_exp, sh->n_embd, sh->n_expert, vt, sx * 0.5f);
            continue;
        }
        L("ffn_gate.weight", sh->n_embd, sh->n_ff, wtype, se);
        L("ffn_up.weight", sh->n_embd, sh->n_ff, wtype, se);
        L("ffn_down.weight", sh->n_ff, sh->n_embd, vt, sf * 0.5f);
        if (gemma3) {
            L_LO("post_ffw_norm.weight", sh->n_embd, EBB_GGML_F32, norm_sc, norm_lo);
        }
#undef L
#undef L_LO
    }
#undef RESCALE
#undef ADD3
#undef ADD
#undef ADD_LO
    const uint64_t align = 32;
    uint64_t off = 0;
    for (uint32_t i = 0; i < k; i++) {
        ts[i].offset = off;
        off += (ts[i].size + align - 1) / align * align;
    }

    /* Metadata: our own keys plus every tokenizer.* key of the source, padded to n_vocab. */
    uint64_t n_src_tok = 0;
    for (uint64_t i = 0; i < ebb_gguf_n_kv(src); i++)
        if (!strncmp(ebb_gguf_kv_key(src, i), "tokenizer.", 10) &&
            !(tmpl && !strcmp(ebb_gguf_kv_key(src, i), "tokenizer.chat_template")))
            n_src_tok++;
    char gname[96];
    snprintf(gname, sizeof(gname), "ebb random %s %s seed %llu", sh->name, type_name,
             (unsigned long long)seed);
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, k);
    put_u64(&w, 14 + (sh->head_dim ? 2 : 0) + (moe ? 3 : 0) + (sh->swa ? 1 : 0) + (tmpl ? 1 : 0) +
                    (longrope ? 2 : 0) + n_src_tok);
    const char *fam = family_names[sh->family];
    char kb[96];
#define KEY(suffix) (snprintf(kb, sizeof(kb), "%s.%s", fam, suffix), kb)
    kv_str(&w, "general.architecture", fam);
    kv_str(&w, "general.name", gname);
    kv_u32(&w, "general.alignment", (uint32_t)align);
    kv_u32(&w, "general.file_type",
           mix && wtype == EBB_GGML_Q4_K ? 15
           : wtype == EBB_GGML_Q4_0      ? 2
           : wtype == EBB_GGML_Q5_0      ? 8
           : wtype == EBB_GGML_Q5_K      ? 17
           : wtype == EBB_GGML_Q6_K      ? 18
                                         : 7);
    kv_u32(&w, KEY("block_count"), n_layer);
    kv_u32(&w, KEY("context_length"), sh->n_ctx);
    kv_u32(&w, KEY("embedding_length"), sh->n_embd);
    kv_u32(&w, KEY("feed_forward_length"), sh->n_ff);
    kv_u32(&w, KEY("attention.head_count"), sh->n_head);
    kv_u32(&w, KEY("attention.head_count_kv"), sh->n_head_kv);
    kv_f32(&w, KEY("rope.freq_base"), sh->rope_base);
    kv_f32(&w, KEY("attention.layer_norm_rms_epsilon"), sh->rms_eps > 0 ? sh->rms_eps : 1e-5f);
    kv_u32(&w, KEY("vocab_size"), sh->n_vocab);
    kv_u32(&w, KEY("rope.dimension_count"), hd);
    if (sh->head_dim) {
        kv_u32(&w, KEY("attention.key_length"), hd);
        kv_u32(&w, KEY("attention.value_length"), hd);
    }
    if (moe) {
        kv_u32(&w, KEY("expert_count"), sh->n_expert);
        kv_u32(&w, KEY("expert_used_count"), sh->n_expert_used);
        kv_u32(&w, KEY("expert_feed_forward_length"), sh->n_ff_exp);
    }
    if (sh->swa)
        kv_u32(&w, KEY("attention.sliding_window"), sh->swa);
    if (longrope) { /* the attention factor as llama.cpp's converter writes it */
        double s = (double)sh->n_ctx / sh->rope_orig_ctx;
        kv_u32(&w, KEY("rope.scaling.original_context_length"), sh->rope_orig_ctx);
        kv_f32(&w, KEY("rope.scaling.attn_factor"),
               s > 1 ? (float)sqrt(1.0 + log(s) / log((double)sh->rope_orig_ctx)) : 1.0f);
    }
#undef KEY
    if (tmpl)
        kv_str(&w, "tokenizer.chat_template", tmpl);
    ebb_err rc = EBB_OK;
    for (uint64_t i = 0; i < ebb_gguf_n_kv(src) && !rc; i++) {
        const char *key = ebb_gguf_kv_key(src, i);
        if (strncmp(key, "tokenizer.", 10) || (tmpl && !strcmp(key, "tokenizer.chat_template")))
            continue;
        enum ebb_gguf_vtype t = ebb_gguf_kv_type(src, i);
        put_cstr(&w, key);
        put_u32(&w, t);
        if (t == EBB_GGUF_STRING) {
            struct ebb_str s;
            rc = ebb_gguf_kv_str(src, i, &s);
            if (!rc)
                put_str(&w, s.p, s.n);
        } else if (t == EBB_GGUF_ARRAY) {
            struct ebb_gguf_arr a;
            rc = ebb_gguf_kv_arr(src, i, &a);
            bool per_token = !strcmp(key, "tokenizer.ggml.tokens") ||
                             !strcmp(key, "tokenizer.ggml.token_type") ||
                             !strcmp(key, "tokenizer.ggml.scores");
            uint64_t n = per_token && a.n < sh->n_vocab ? sh->n_vocab : a.n;
            if (!rc)
                rc = copy_arr(&w, &a, n, !strcmp(key, "tokenizer.ggml.token_type"));
        } else {
            /* Scalars: re-read through the typed getters. */
            int64_t iv;
            float fv;
            bool bv;
            if (t == EBB_GGUF_BOOL && !ebb_gguf_get_bool(src, key, &bv)) {
                uint8_t b = bv;
                put(&w, &b, 1);
            } else if ((t == EBB_GGUF_F32) && !ebb_gguf_get_f32(src, key, &fv)) {
                put(&w, &fv, 4);
            } else if (vtype_size(t) && !ebb_gguf_get_i64(src, key, &iv)) {
                put(&w, &iv, vtype_size(t)); /* little-endian truncation keeps the value */
            } else {
                rc = EBB_EUNSUPPORTED;
            }
        }
        if (rc)
            fprintf(stderr, "ebb-gen-model: cannot copy key %s: %s\n", key, ebb_err_name(rc));
    }
    for (uint32_t i = 0; i < k; i++) {
        put_cstr(&w, ts[i].name);
        put_u32(&w, ts[i].n_dims);
        for (uint32_t d = 0; d < ts[i].n_dims; d++)
            put_u64(&w, ts[i].ne[d]);
        put_u32(&w, ts[i].type);
        put_u64(&w, ts[i].offset);
    }
    long pos = ftell(f);
    static const uint8_t zeros[64];
    if (pos >= 0)
        put(&w, zeros, (size_t)((align - (uint64_t)pos % align) % align));
    size_t bufsz = 8u << 20;
    uint8_t *buf = malloc(bufsz);
    if (!buf)
        rc = EBB_ENOMEM;
    uint64_t written = 0;
    for (uint32_t i = 0; i < k && !rc && !w.err; i++) {
        if (ts[i].offset > written)
            put(&w, zeros, (size_t)(ts[i].offset - written));
        write_tensor(&w, &ts[i], buf, bufsz);
        written = ts[i].offset + ts[i].size;
    }
    free(buf);
    free(ts);
    free(tmpl);
    ebb_gguf_close(src);
    if (fclose(f) != 0)
        w.err = true;
    if (rc || w.err) {
        fprintf(stderr, "ebb-gen-model: writing %s failed\n", out_path);
        remove(out_path);
        return 1;
    }
    fprintf(stderr, "ebb-gen-model: wrote %s (%s, %u layers, %.1f MiB of tensors)\n", out_path,
            sh->name, n_layer, (double)off / (1 << 20));
    return 0;
}
