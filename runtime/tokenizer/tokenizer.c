/* Tokenizer construction from GGUF metadata, special-token handling and the
 * encode entry point. The rules for defaults, special-token detection and the splitting of text
 * around special tokens follow llama.cpp's llama-vocab so that ids match it exactly. */
#include "tokenizer.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer-int.h"

static bool str_eq(struct ebb_str s, const char *lit)
{
    size_t n = strlen(lit);
    return s.n == n && !memcmp(s.p, lit, n);
}

enum { PF_IGNORE_MERGES = 1, PF_ADD_BOS = 2, PF_NO_BOS = 4 };

/* tokenizer.ggml.pre values and the pre-tokenizer each selects, as llama.cpp maps them: names
 * that share a regular expression share an entry kind. PF_IGNORE_MERGES: a pre-token that is a
 * token itself is not merged; PF_ADD_BOS: BOS is added unless the GGUF says otherwise; PF_NO_BOS:
 * no BOS token unless the GGUF names one. The first
 * entry is what a missing tokenizer.ggml.pre means. */
struct pre_name {
    const char *name;
    enum ebb__bpe_pre pre;
    unsigned flags;
};

static const struct pre_name pre_names[] = {
    {"default", EBB__PRE_DEFAULT, 0},
    {"llama3", EBB__PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"llama-v3", EBB__PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"llama-bpe", EBB__PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"falcon3", EBB__PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"falcon-h1", EBB__PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"pixtral", EBB__PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"midm-2.0", EBB__PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"lfm2", EBB__PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"dbrx", EBB__PRE_LLAMA3, 0},
    {"chatglm-bpe", EBB__PRE_LLAMA3, PF_NO_BOS},
    {"glm4", EBB__PRE_LLAMA3, PF_NO_BOS | PF_IGNORE_MERGES},
    {"glm5", EBB__PRE_LLAMA3, PF_NO_BOS | PF_IGNORE_MERGES},
    {"smaug-bpe", EBB__PRE_LLAMA3, 0},
    {"qwen2", EBB__PRE_QWEN2, 0},
    {"deepseek-r1-qwen", EBB__PRE_QWEN2, 0},
    {"stablelm2", EBB__PRE_QWEN2, 0},
    {"megrez", EBB__PRE_QWEN2, 0},
    {"hunyuan", EBB__PRE_QWEN2, 0},
    {"grok-2", EBB__PRE_QWEN2, 0},
    {"qwen35", EBB__PRE_QWEN35, 0},
    {"falcon", EBB__PRE_FALCON, 0},
    {"deepseek-llm", EBB__PRE_DEEPSEEK_LLM, 0},
    {"deepseek-coder", EBB__PRE_DEEPSEEK_CODER, 0},
    {"deepseek-v3", EBB__PRE_DEEPSEEK3, 0},
    {"gemma4", EBB__PRE_GEMMA4, PF_ADD_BOS},
    {"tekken", EBB__PRE_TEKKEN, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"gpt-4o", EBB__PRE_GPT4O, 0},
    {"llama4", EBB__PRE_GPT4O, 0},
    {"smollm", EBB__PRE_SMOLLM, 0},
    {"starcoder", EBB__PRE_SMOLLM, 0},
    {"refact", EBB__PRE_SMOLLM, 0},
    {"command-r", EBB__PRE_SMOLLM, 0},
    {"codeshell", EBB__PRE_SMOLLM, 0},
    {"exaone", EBB__PRE_SMOLLM, 0},
    {"minerva-7b", EBB__PRE_SMOLLM, 0},
    {"gpt-2", EBB__PRE_GPT2, 0},
    {"gpt2", EBB__PRE_GPT2, 0},
    {"phi-2", EBB__PRE_GPT2, 0},
    {"mpt", EBB__PRE_GPT2, 0},
    {"olmo", EBB__PRE_GPT2, 0},
    {"jais", EBB__PRE_GPT2, 0},
    {"exaone4", EBB__PRE_GPT2, 0},
    {"roberta-bpe", EBB__PRE_GPT2, 0},
};

static const struct pre_name *find_pre(struct ebb_str pre)
{
    for (size_t i = 0; i < sizeof pre_names / sizeof pre_names[0]; i++)
        if (str_eq(pre, pre_names[i].name))
            return &pre_names[i];
    return NULL;
}

static int32_t find_cstr(const struct ebb_tokenizer *t, const char *s)
{
    return ebb__tok_lookup(t, s, strlen(s));
}

/* Reads the token list, scores and types into t. */
static ebb_err load_vocab(struct ebb_tokenizer *t, const struct ebb_gguf *g, struct ebb_diag *diag)
{
    struct ebb_gguf_arr toks, scores = {0}, types = {0};
    bool have_scores = false, have_types = false;
    ebb_err rc = ebb_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks);
    if (rc == EBB_ENOTFOUND)
        return ebb_diag_set(diag, EBB_EFORMAT, "tokenizer.ggml.tokens is missing");
    if (rc || toks.type != EBB_GGUF_STRING)
        return ebb_diag_set(diag, EBB_EFORMAT, "tokenizer.ggml.tokens is not an array of strings");
    if (toks.n == 0 || toks.n > (1u << 24))
        return ebb_diag_set(diag, EBB_EFORMAT, "tokenizer.ggml.tokens has %llu entries",
                            (unsigned long long)toks.n);
    uint32_t n = (uint32_t)toks.n;
    if (!ebb_gguf_get_arr(g, "tokenizer.ggml.scores", &scores)) {
        if ((scores.type != EBB_GGUF_F32 && scores.type != EBB_GGUF_I32) || scores.n < n)
            return ebb_diag_set(diag, EBB_EFORMAT,
                                "tokenizer.ggml.scores has the wrong type or "
                                "fewer entries than the vocabulary");
        have_scores = true;
    }
    if (!ebb_gguf_get_arr(g, "tokenizer.ggml.token_type", &types)) {
        if (types.type != EBB_GGUF_I32 || types.n < n)
            return ebb_diag_set(diag, EBB_EFORMAT,
                                "tokenizer.ggml.token_type has the wrong type "
                                "or fewer entries than the vocabulary");
        have_types = true;
    }

    /* First pass: total text size (empty tokens get llama.cpp's "[EMPTY_<id>]"). */
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct ebb_str s;
        if (ebb_gguf_arr_str(&toks, i, &s))
            return ebb_diag_set(diag, EBB_EFORMAT, "token %u unreadable", i);
        total += s.n ? s.n : 20;
    }
    if (total > UINT32_MAX - 1)
        return ebb_diag_set(diag, EBB_EFORMAT, "token texts too large");

    t->n_vocab = n;
    t->text = malloc(total + 1);
    t->text_off = malloc(sizeof(uint32_t) * (n + 1u));
    t->scores = calloc(n, sizeof(float));
    t->attr = calloc(n, 1);
    t->eog = calloc(n, 1);
    uint32_t hsize = 1;
    while (hsize < 2u * n)
        hsize <<= 1;
    t->hash = malloc(sizeof(int32_t) * hsize);
    t->hash_mask = hsize - 1;
    if (!t->text || !t->text_off || !t->scores || !t->attr || !t->eog || !t->hash)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory for a %u-token vocabulary", n);
    memset(t->hash, 0xff, sizeof(int32_t) * hsize);

    uint32_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct ebb_str s;
        ebb_gguf_arr_str(&toks, i, &s);
        t->text_off[i] = off;
        if (s.n) {
            memcpy(t->text + off, s.p, s.n);
            off += (uint32_t)s.n;
        } else {
            off += (uint32_t)snprintf(t->text + off, 21, "[EMPTY_%u]", i);
        }
        if (have_scores) {
            if (scores.type == EBB_GGUF_F32) {
                ebb_gguf_arr_f32(&scores, i, &t->scores[i]);
            } else {
                int64_t v = 0;
                ebb_gguf_arr_i64(&scores, i, &v);
                t->scores[i] = (float)v;
            }
        }
        int64_t ty = 1;
        if (have_types)
            ebb_gguf_arr_i64(&types, i, &ty);
        switch (ty) {
        case 1:
            t->attr[i] = EBB__TA_NORMAL;
            break;
        case 2:
            t->attr[i] = EBB__TA_UNKNOWN;
            break;
        case 3:
            t->attr[i] = EBB__TA_CONTROL;
            break;
        case 4:
            t->attr[i] = EBB__TA_USER_DEFINED;
            break;
        case 5:
            t->attr[i] = EBB__TA_UNUSED;
            break;
        case 6:
            t->attr[i] = EBB__TA_BYTE;
            break;
        default:
            t->attr[i] = EBB__TA_UNDEFINED;
            break;
        }
    }
    t->text_off[n] = off;
    for (uint32_t i = 0; i < n; i++)
        ebb__tok_hash_insert(t, (int32_t)i);
    return EBB_OK;
}

/* Reads an optional token id key; out-of-range values keep the default, as llama.cpp does. */
static void meta_id(const struct ebb_tokenizer *t, const struct ebb_gguf *g, const char *key,
                    int32_t *id)
{
    if (*id >= 0 && (uint32_t)*id >= t->n_vocab)
        *id = -1;
    uint32_t v;
    if (!ebb_gguf_get_u32(g, key, &v) && v < t->n_vocab)
        *id = (int32_t)v;
}

static void make_control(struct ebb_tokenizer *t, int32_t id)
{
    t->attr[id] |= EBB__TA_CONTROL;
}

/* First token of names[] present in the vocab; -1 if none. llama.cpp takes whichever its hash
 * map yields first; the lists are ordered so the same ids come out for the vocabularies we test. */
static int32_t detect_first(struct ebb_tokenizer *t, const char *const *names)
{
    for (size_t i = 0; names[i]; i++) {
        int32_t id = find_cstr(t, names[i]);
        if (id >= 0)
            return id;
    }
    return -1;
}

/* Auto-detection of EOT/EOM/FIM and end-of-generation tokens by their text. */
static void detect_specials(struct ebb_tokenizer *t, const struct ebb_gguf *g)
{
    static const char *const eot_names[] = {"<|eot_id|>",
                                            "<|endoftext|>", /* before <|im_end|>: SmolLM2 */
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<end_of_turn>",
                                            "<|end_of_text|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "[EOT]",
                                            "<\xef\xbd\x9c"
                                            "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                            "<end_of_utterance>",
                                            NULL};
    static const char *const eom_names[] = {"<|eom_id|>", NULL};
    static const char *const fim_pre[] = {"<|fim_prefix|>",
                                          "<fim-prefix>",
                                          "<fim_prefix>",
                                          "<\xef\xbd\x9c"
                                          "fim\xe2\x96\x81"
                                          "begin\xef\xbd\x9c>",
                                          "<PRE>",
                                          "\xe2\x96\x81<PRE>",
                                          "<|code_prefix|>",
                                          "<|prefix|>",
                                          NULL};
    static const char *const fim_suf[] = {"<|fim_suffix|>",
                                          "<fim-suffix>",
                                          "<fim_suffix>",
                                          "<\xef\xbd\x9c"
                                          "fim\xe2\x96\x81hole\xef\xbd\x9c>",
                                          "<SUF>",
                                          "\xe2\x96\x81<SUF>",
                                          "<|code_suffix|>",
                                          "<|suffix|>",
                                          NULL};
    static const char *const fim_mid[] = {"<|fim_middle|>",
                                          "<fim-middle>",
                                          "<fim_middle>",
                                          "<\xef\xbd\x9c"
                                          "fim\xe2\x96\x81"
                                          "end\xef\xbd\x9c>",
                                          "<MID>",
                                          "\xe2\x96\x81<MID>",
                                          "<|code_middle|>",
                                          "<|middle|>",
                                          NULL};
    static const char *const fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                          "<PAD>",       "[PAD]",     NULL};
    static const char *const fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                          "<REPO>",       "<reponame>",    NULL};
    static const char *const fim_sep[] = {"<|file_sep|>", NULL};
    static const char *const eog_names[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<|return|>",
                                            "<|call|>",
                                            "<|flush|>",
                                            "<|calls|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "</s>",
                                            "<|eom_id|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "[EOT]",
                                            "[EOS]",
                                            "<|end_of_text|>",
                                            "<end_of_utterance>",
                                            "<eos>",
                                            "<turn|>",
                                            "<|tool_response>",
                                            "<\xef\xbd\x9c"
                                            "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                            "[e~[",
                                            NULL};
    static const char *const fim_keys[] = {
        "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
        "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
        "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"};
    static const char *const *const fim_lists[] = {fim_pre, fim_suf, fim_mid,
                                                   fim_pad, fim_rep, fim_sep};

    if (t->eot < 0) {
        t->eot = detect_first(t, eot_names);
        if (t->eot >= 0)
            make_control(t, t->eot);
    }
    if (t->eom < 0) {
        t->eom = detect_first(t, eom_names);
        if (t->eom >= 0)
            make_control(t, t->eom);
    }
    int32_t fim[6];
    for (int k = 0; k < 6; k++) {
        fim[k] = -1;
        meta_id(t, g, fim_keys[k], &fim[k]);
        if (fim[k] < 0) {
            fim[k] = detect_first(t, fim_lists[k]);
            if (fim[k] >= 0)
                make_control(t, fim[k]);
        }
    }

    /* Control tokens named "unused..." are unused. */
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (!(t->attr[i] & EBB__TA_CONTROL))
            continue;
        size_t n;
        const char *s = ebb__tok_text(t, (int32_t)i, &n);
        for (size_t j = 0; j + 6 <= n; j++) {
            if (!memcmp(s + j, "unused", 6)) {
                t->attr[i] |= EBB__TA_UNUSED;
                break;
            }
        }
    }

    for (int k = 3; k < 6; k++) /* FIM pad, repo and file-separator end generation */
        if (fim[k] >= 0)
            t->eog[fim[k]] = 1;
    for (size_t i = 0; eog_names[i]; i++) {
        int32_t id = find_cstr(t, eog_names[i]);
        if (id >= 0) {
            t->eog[id] = 1;
            make_control(t, id);
        }
    }
    if (t->eos >= 0)
        t->eog[t->eos] = 1;
    if (t->eot >= 0)
        t->eog[t->eot] = 1;
    if (t->eom >= 0)
        t->eog[t->eom] = 1;

    /* Vocabularies with <|return|> and <|call|> (or <|calls|> and <|flush|>) use <|end|> as a
     * plain separator, not an end of generation. */
    int32_t ret = find_cstr(t, "<|return|>"), call = find_cstr(t, "<|call|>");
    int32_t calls = find_cstr(t, "<|calls|>"), flush = find_cstr(t, "<|flush|>");
    int32_t end = find_cstr(t, "<|end|>");
    if (end >= 0 && ((ret >= 0 && call >= 0) || (calls >= 0 && flush >= 0))) {
        t->eog[end] = 0;
        t->attr[end] = EBB__TA_USER_DEFINED;
    }
    /* Where <|tool_response> or <|plamo:eos|> exists, </s> is an ordinary token. */
    int32_t s_end = find_cstr(t, "</s>");
    if (s_end >= 0 &&
        (find_cstr(t, "<|tool_response>") >= 0 || find_cstr(t, "<|plamo:eos|>") >= 0)) {
        t->eog[s_end] = 0;
        t->attr[s_end] = EBB__TA_NORMAL;
    }
}

/* True when s contains the lowercase ASCII word w, ignoring the case of s. */
static bool contains_lower(struct ebb_str s, const char *w)
{
    size_t n = strlen(w);
    for (size_t i = 0; i + n <= s.n; i++) {
        size_t k = 0;
        while (k < n && tolower((unsigned char)s.p[i + k]) == w[k])
            k++;
        if (k == n)
            return true;
    }
    return false;
}

/* Phi-3 models (general.name containing "phi-3" or "phi3", as llama.cpp decides) drop the
 * whitespace that follows a special token: every special token but <unk>, <s> and
 * <|endoftext|> gets the RSTRIP attribute, </s> too. */
static void strip_by_name(struct ebb_tokenizer *t, const struct ebb_gguf *g)
{
    struct ebb_str name;
    if (ebb_gguf_get_str(g, "general.name", &name) ||
        !(contains_lower(name, "phi-3") || contains_lower(name, "phi3")))
        return;
    for (uint32_t i = 0; i < t->n_specials; i++)
        t->attr[t->specials[i]] |= EBB__TA_RSTRIP;
    int32_t id = find_cstr(t, "</s>");
    if (id >= 0)
        t->attr[id] |= EBB__TA_RSTRIP;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t k = 0; k < 3; k++) {
        id = find_cstr(t, keep[k]);
        if (id >= 0)
            t->attr[id] &= (uint8_t)~EBB__TA_RSTRIP;
    }
}

struct len_id {
    uint32_t len;
    int32_t id;
};

/* Longest text first; ties by id so the order is deterministic. */
static int cmp_special(const void *a, const void *b)
{
    const struct len_id *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static ebb_err build_specials(struct ebb_tokenizer *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (EBB__TA_CONTROL | EBB__TA_USER_DEFINED | EBB__TA_UNKNOWN))
            n++;
    struct len_id *tmp = malloc(sizeof *tmp * (n ? n : 1));
    t->specials = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!t->specials || !tmp) {
        free(tmp);
        return EBB_ENOMEM;
    }
    n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & (EBB__TA_CONTROL | EBB__TA_USER_DEFINED | EBB__TA_UNKNOWN))
            tmp[n++] = (struct len_id){t->text_off[i + 1] - t->text_off[i], (int32_t)i};
    qsort(tmp, n, sizeof *tmp, cmp_special);
    for (uint32_t i = 0; i < n; i++)
        t->specials[i] = tmp[i].id;
    t->n_specials = n;
    free(tmp);
    return EBB_OK;
}

/* Appends the piece of one token with special tokens rendered (render_special = true). */
static ebb_err piece_of(const struct ebb_tokenizer *t, int32_t id, struct ebb__buf *b)
{
    size_t n;
    const char *s = ebb__tok_text(t, id, &n);
    uint8_t a = t->attr[id];
    if (a & (EBB__TA_UNKNOWN | EBB__TA_CONTROL | EBB__TA_USER_DEFINED))
        return ebb__buf_put(b, s, n);
    if (a & EBB__TA_NORMAL) {
        if (t->kind == EBB_TOK_BPE && !t->raw_bpe)
            return ebb__bpe_decode_text(t, s, n, b);
        ebb_err rc = EBB_OK;
        for (size_t i = 0; i < n && !rc; i++) {
            if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
                rc = ebb__buf_put(b, " ", 1);
                i += 2;
            } else {
                rc = ebb__buf_put(b, s + i, 1);
            }
        }
        return rc;
    }
    if (a & EBB__TA_BYTE) {
        unsigned v = 0;
        for (size_t i = 3; i < 5 && i < n; i++) {
            char c = s[i];
            v = v * 16 + (unsigned)(c >= '0' && c <= '9'   ? c - '0'
                                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                           : 0);
        }
        char c = (char)v;
        return ebb__buf_put(b, &c, 1);
    }
    return EBB_OK; /* unused and undefined tokens have no text */
}

static ebb_err build_pieces(struct ebb_tokenizer *t)
{
    ebb_err rc = EBB_OK;
    struct ebb__buf b = {0};
    t->piece_off = malloc(sizeof(uint32_t) * (t->n_vocab + 1u));
    if (!t->piece_off)
        return EBB_ENOMEM;
    /* Pieces are about as large as the token texts; a file whose pieces grow far beyond that
     * is rejected rather than allowed to exhaust memory. */
    size_t limit = 8 * (size_t)t->text_off[t->n_vocab] + (16u << 20);
    for (uint32_t i = 0; i < t->n_vocab && !rc; i++) {
        t->piece_off[i] = (uint32_t)b.n;
        rc = piece_of(t, (int32_t)i, &b);
        if (!rc && (b.n > UINT32_MAX || b.n > limit))
            rc = EBB_EFORMAT;
    }
    t->piece_off[t->n_vocab] = (uint32_t)b.n;
    if (!rc)
        rc = ebb__buf_put(&b, "", 1); /* never an empty allocation */
    t->piece = b.p;
    return rc;
}

static ebb_err spm_byte_tokens(struct ebb_tokenizer *t)
{
    t->n_inner_ws = 0;
    for (uint32_t i = 0; i < t->n_vocab && t->n_inner_ws >= 0; i++) {
        size_t n;
        const char *s = ebb__tok_text(t, (int32_t)i, &n);
        for (size_t j = 1; j + 3 <= n; j++) {
            if (!memcmp(s + j, "\xe2\x96\x81", 3)) {
                if (t->n_inner_ws == 64)
                    t->n_inner_ws = -1;
                else
                    t->inner_ws[t->n_inner_ws++] = (int32_t)i;
                break;
            }
        }
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t id = find_cstr(t, name);
        if (id < 0) {
            char c = (char)b;
            id = ebb__tok_lookup(t, &c, 1);
        }
        t->byte_tok[b] = id >= 0 ? id : t->unk;
    }
    return EBB_OK;
}

ebb_err ebb__tokenizer_new_pre(const struct ebb_gguf *g, const char *pre_override,
                               struct ebb_tokenizer **out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    struct ebb_str model = {0}, pre = {0};
    struct ebb_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    if (ebb_gguf_get_str(g, "tokenizer.ggml.model", &model)) {
        rc = ebb_diag_set(diag, EBB_EFORMAT, "tokenizer.ggml.model is missing");
        goto out;
    }
    bool has_pre = !ebb_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    if (pre_override) {
        pre = (struct ebb_str){pre_override, strlen(pre_override)};
        has_pre = true;
    }
    if (str_eq(model, "llama")) {
        t->kind = EBB_TOK_SPM;
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
        snprintf(t->kind_name, sizeof t->kind_name, "llama (spm)");
    } else if (str_eq(model, "gpt2") || str_eq(model, "gemma4")) {
        t->kind = EBB_TOK_BPE;
        t->bos = t->eos = t->unk = -1;
        if (str_eq(model, "gemma4")) {
            pre = (struct ebb_str){"gemma4", 6}; /* llama.cpp ignores tokenizer.ggml.pre here */
            has_pre = true;
        } else {
            t->bos = t->eos = 11;
        }
        const struct pre_name *pn = has_pre ? find_pre(pre) : &pre_names[0];
        if (!pn) {
            rc = ebb_diag_set(diag, EBB_EUNSUPPORTED,
                              "unsupported pre-tokenizer: tokenizer.ggml.pre = '%.*s' (see "
                              "docs/TOKENIZER.md for the supported ones)",
                              (int)(pre.n > 64 ? 64 : pre.n), pre.p);
            goto out;
        }
        t->pre = pn->pre;
        t->ignore_merges = pn->flags & PF_IGNORE_MERGES;
        t->add_bos = pn->flags & PF_ADD_BOS;
        if (pn->flags & PF_NO_BOS)
            t->bos = -1;
        t->raw_bpe = pn->pre == EBB__PRE_GEMMA4;
        snprintf(t->kind_name, sizeof t->kind_name, "%.*s (%.*s)", (int)model.n, model.p,
                 has_pre ? (int)(pre.n > 40 ? 40 : pre.n) : 7, has_pre ? pre.p : "default");
    } else {
        rc = ebb_diag_set(
            diag, EBB_EUNSUPPORTED,
            "unsupported tokenizer: tokenizer.ggml.model = '%.*s' (see docs/TOKENIZER.md)",
            (int)(model.n > 64 ? 64 : model.n), model.p);
        goto out;
    }
    t->eot = t->eom = -1;
    bool b;
    if (!ebb_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b))
        t->add_space_prefix = t->kind == EBB_TOK_SPM ? b : false;

    rc = load_vocab(t, g, diag);
    if (rc)
        goto out;
    if (t->kind == EBB_TOK_BPE) {
        rc = ebb__bpe_load(t, g, diag);
        if (rc)
            goto out;
    }

    meta_id(t, g, "tokenizer.ggml.bos_token_id", &t->bos);
    meta_id(t, g, "tokenizer.ggml.eos_token_id", &t->eos);
    meta_id(t, g, "tokenizer.ggml.eot_token_id", &t->eot);
    meta_id(t, g, "tokenizer.ggml.eom_token_id", &t->eom);
    meta_id(t, g, "tokenizer.ggml.unknown_token_id", &t->unk);
    if (!ebb_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b))
        t->add_bos = b;
    if (!ebb_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b))
        t->add_eos = b;
    if (t->pre == EBB__PRE_GEMMA4)
        t->add_bos = true; /* as llama.cpp does, whatever the GGUF says */
    if (t->add_bos && t->bos < 0)
        t->add_bos = false;
    if (t->add_eos && t->eos < 0)
        t->add_eos = false;

    detect_specials(t, g);
    rc = build_specials(t);
    if (!rc)
        strip_by_name(t, g);
    if (!rc && t->kind == EBB_TOK_SPM)
        rc = spm_byte_tokens(t);
    if (!rc)
        rc = build_pieces(t);
    if (rc) {
        ebb_diag_set(diag, rc,
                     rc == EBB_EFORMAT ? "detokenized token texts are implausibly large"
                                       : "out of memory building the tokenizer");
        goto out;
    }
out:
    if (rc) {
        ebb_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return EBB_OK;
}

ebb_err ebb_tokenizer_new(const struct ebb_gguf *g, struct ebb_tokenizer **out,
                          struct ebb_diag *diag)
{
    return ebb__tokenizer_new_pre(g, NULL, out, diag);
}

void ebb_tokenizer_free(struct ebb_tokenizer *t)
{
    if (!t)
        return;
    free(t->text);
    free(t->text_off);
    free(t->scores);
    free(t->attr);
    free(t->eog);
    free(t->piece);
    free(t->piece_off);
    free(t->hash);
    free(t->specials);
    free(t->merge_key);
    free(t->merge_rank);
    free(t->merge_result);
    free(t);
}

enum ebb_tok_kind ebb_tokenizer_kind(const struct ebb_tokenizer *t)
{
    return t->kind;
}

const char *ebb_tokenizer_kind_name(const struct ebb_tokenizer *t)
{
    return t->kind_name;
}

uint32_t ebb_tokenizer_n_vocab(const struct ebb_tokenizer *t)
{
    return t->n_vocab;
}

int32_t ebb_tokenizer_bos(const struct ebb_tokenizer *t)
{
    return t->bos;
}

int32_t ebb_tokenizer_eos(const struct ebb_tokenizer *t)
{
    return t->eos;
}

int32_t ebb_tokenizer_eot(const struct ebb_tokenizer *t)
{
    return t->eot;
}

bool ebb_tokenizer_add_bos(const struct ebb_tokenizer *t)
{
    return t->add_bos;
}

bool ebb_tokenizer_add_eos(const struct ebb_tokenizer *t)
{
    return t->add_eos;
}

bool ebb_tokenizer_is_eog(const struct ebb_tokenizer *t, int32_t id)
{
    return id >= 0 && (uint32_t)id < t->n_vocab && t->eog[id];
}

int32_t ebb_tokenizer_find(const struct ebb_tokenizer *t, const char *text, size_t len)
{
    return ebb__tok_lookup(t, text, len);
}

ebb_err ebb_tokenizer_piece(const struct ebb_tokenizer *t, int32_t id, bool render_special,
                            struct ebb_str *out)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return EBB_ERANGE;
    if (!render_special && (t->attr[id] & (EBB__TA_CONTROL | EBB__TA_UNKNOWN))) {
        out->p = t->piece + t->piece_off[id];
        out->n = 0;
        return EBB_OK;
    }
    out->p = t->piece + t->piece_off[id];
    out->n = t->piece_off[id + 1] - t->piece_off[id];
    return EBB_OK;
}
