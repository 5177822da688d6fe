/* Tokenizer tests: every corpus string must give exactly llama.cpp's ids (recorded by
 * scripts/ref/tokenizer-expect.py into tests/data/tokenizer/) for both real models, plus special
 * tokens, BOS/EOS flags, pieces, round trips and the streaming detokenizer. The models come from
 * $EBB_MODELS_DIR (default $XDG_DATA_HOME/ebb/models or ~/.local/share/ebb/models). */
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

#include "gguf-writer.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer-int.h"
#include "tokenizer/tokenizer.h"

#ifndef EBB_TEST_DATA
#error "EBB_TEST_DATA must name tests/data"
#endif

#define SMOLLM2 "SmolLM2-135M-Instruct.Q4_1.gguf"
#define GEMMA3 "gemma-3-270m-q4_k_m.gguf"

struct model {
    struct ebb_gguf *g;
    struct ebb_tokenizer *t;
    json_t *expect;
    double load_ms;
};

static json_t *corpus;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void model_path(const char *file, char *buf, size_t cap)
{
    const char *dir = getenv("EBB_MODELS_DIR");
    if (dir && *dir) {
        snprintf(buf, cap, "%s/%s", dir, file);
        return;
    }
    const char *xdg = getenv("XDG_DATA_HOME");
    if (xdg && *xdg)
        snprintf(buf, cap, "%s/ebb/models/%s", xdg, file);
    else
        snprintf(buf, cap, "%s/.local/share/ebb/models/%s", getenv("HOME") ? getenv("HOME") : "",
                 file);
}

static json_t *load_json(const char *name)
{
    char path[1024];
    json_error_t err;
    snprintf(path, sizeof path, "%s/tokenizer/%s", EBB_TEST_DATA, name);
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &err);
    if (!j)
        fail_msg("cannot read %s: %s (line %d)", path, err.text, err.line);
    return j;
}

static int open_model(void **state, const char *file, const char *expect)
{
    struct model *m = calloc(1, sizeof *m);
    char path[1024];
    struct ebb_diag diag = {{0}};
    model_path(file, path, sizeof path);
    if (ebb_gguf_open(path, &m->g, &diag)) {
        fprintf(stderr, "cannot open %s: %s (set EBB_MODELS_DIR; scripts fetch the models)\n", path,
                diag.msg);
        free(m);
        return -1;
    }
    double t0 = now_ms();
    if (ebb_tokenizer_new(m->g, &m->t, &diag)) {
        fprintf(stderr, "tokenizer of %s: %s\n", path, diag.msg);
        ebb_gguf_close(m->g);
        free(m);
        return -1;
    }
    m->load_ms = now_ms() - t0;
    fprintf(stderr, "[ info ] %s: tokenizer %s, %u tokens, built in %.1f ms\n", file,
            ebb_tokenizer_kind_name(m->t), ebb_tokenizer_n_vocab(m->t), m->load_ms);
    m->expect = load_json(expect);
    *state = m;
    return 0;
}

static int setup_smollm2(void **state)
{
    return open_model(state, SMOLLM2, "expect-smollm2.json");
}

static int setup_gemma3(void **state)
{
    return open_model(state, GEMMA3, "expect-gemma3.json");
}

static int teardown_model(void **state)
{
    struct model *m = *state;
    if (m) {
        ebb_tokenizer_free(m->t);
        ebb_gguf_close(m->g);
        json_decref(m->expect);
        free(m);
    }
    return 0;
}

static const char *corpus_str(size_t i, size_t *len)
{
    json_t *s = json_array_get(json_object_get(corpus, "strings"), i);
    *len = json_string_length(s);
    return json_string_value(s);
}

/* Encodes into a malloc'ed array. */
static int32_t *encode(const struct ebb_tokenizer *t, const char *s, size_t len, unsigned flags,
                       size_t *n)
{
    size_t cap = len + 8;
    int32_t *ids = malloc(sizeof(int32_t) * cap);
    ebb_err rc = ebb_tokenizer_encode(t, s, len, flags, ids, cap, n);
    assert_int_equal(rc, EBB_OK);
    return ids;
}

static void print_escaped(const char *s, size_t n, size_t max)
{
    for (size_t i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stderr);
        else if (c == '\t')
            fputs("\\t", stderr);
        else if (c == '\r')
            fputs("\\r", stderr);
        else if (c < 0x20 || c == 0x7f)
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
    if (n > max)
        fputs("...", stderr);
}

static void print_ids(const char *label, const int32_t *ids, size_t n, size_t from)
{
    fprintf(stderr, "    %s:", label);
    size_t start = from > 4 ? from - 4 : 0;
    if (start)
        fputs(" ...", stderr);
    for (size_t i = start; i < n && i < start + 16; i++)
        fprintf(stderr, i == from ? " [%d]" : " %d", ids[i]);
    if (start + 16 < n)
        fputs(" ...", stderr);
    fputc('\n', stderr);
}

/* Compares one expected set: ids of corpus strings (all, or those in `indices`). Returns the
 * number of mismatches; prints the first few with context. */
static size_t check_set(const struct model *m, const char *name, json_t *expected, json_t *indices,
                        unsigned flags, size_t *n_total)
{
    size_t bad = 0, n = json_array_size(expected);
    for (size_t k = 0; k < n; k++) {
        size_t idx = indices ? (size_t)json_integer_value(json_array_get(indices, k)) : k;
        size_t len, got_n;
        const char *s = corpus_str(idx, &len);
        json_t *e = json_array_get(expected, k);
        size_t en = json_array_size(e);
        int32_t *want = malloc(sizeof(int32_t) * (en + 1));
        for (size_t i = 0; i < en; i++)
            want[i] = (int32_t)json_integer_value(json_array_get(e, i));
        int32_t *got = encode(m->t, s, len, flags, &got_n);
        size_t d = 0;
        while (d < en && d < got_n && want[d] == got[d])
            d++;
        if (d != en || d != got_n) {
            if (bad < 5) {
                fprintf(stderr, "  %s mismatch, string %zu (%zu bytes): \"", name, idx, len);
                print_escaped(s, len, 120);
                fprintf(stderr, "\"\n    first difference at id %zu\n", d);
                print_ids("llama.cpp", want, en, d);
                print_ids("ebb      ", got, got_n, d);
            }
            bad++;
        }
        free(want);
        free(got);
    }
    *n_total = n;
    return bad;
}

static void corpus_matches(void **state)
{
    struct model *m = *state;
    size_t n;
    size_t bad = check_set(m, "plain", json_object_get(m->expect, "plain"), NULL, 0, &n);
    fprintf(stderr, "[ info ] %s: plain corpus %zu/%zu match llama.cpp\n",
            json_string_value(json_object_get(m->expect, "model")), n - bad, n);
    assert_int_equal(n, json_integer_value(json_object_get(corpus, "count")));
    assert_int_equal(bad, 0);
}

static void special_sets_match(void **state)
{
    struct model *m = *state;
    json_t *idx = json_object_get(m->expect, "small_indices");
    size_t n1, n2;
    size_t b1 = check_set(m, "parse_special", json_object_get(m->expect, "parse_special"), idx,
                          EBB_TOK_PARSE_SPECIAL, &n1);
    size_t b2 = check_set(m, "add_special", json_object_get(m->expect, "add_special"), idx,
                          EBB_TOK_ADD_SPECIAL, &n2);
    fprintf(stderr, "[ info ] %s: parse_special %zu/%zu, add_special %zu/%zu match llama.cpp\n",
            json_string_value(json_object_get(m->expect, "model")), n1 - b1, n1, n2 - b2, n2);
    assert_true(n1 > 100);
    assert_int_equal(b1, 0);
    assert_int_equal(b2, 0);
}

/* All corpus strings joined by spaces: one long text (SentencePiece merges it in segments). */
static void joined_matches(void **state)
{
    struct model *m = *state;
    json_t *strs = json_object_get(corpus, "strings");
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(strs); i++)
        total += json_string_length(json_array_get(strs, i)) + 1;
    char *buf = malloc(total + 1);
    size_t len = 0;
    for (size_t i = 0; i < json_array_size(strs); i++) {
        json_t *s = json_array_get(strs, i);
        if (i)
            buf[len++] = ' ';
        memcpy(buf + len, json_string_value(s), json_string_length(s));
        len += json_string_length(s);
    }
    size_t n;
    int32_t *got = encode(m->t, buf, len, 0, &n);
    json_t *e = json_object_get(m->expect, "joined");
    size_t d = 0;
    while (d < n && d < json_array_size(e) && got[d] == json_integer_value(json_array_get(e, d)))
        d++;
    fprintf(stderr, "[ info ] %s: joined corpus (%zu bytes): %zu ids, %s\n",
            json_string_value(json_object_get(m->expect, "model")), len, n,
            d == n && n == json_array_size(e) ? "identical to llama.cpp" : "DIFFERENT");
    assert_int_equal(n, json_array_size(e));
    assert_int_equal(d, n);
    free(got);
    free(buf);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10;
}

/* Invalid UTF-8 is never rejected and gives llama.cpp's ids (BPE: U+FFFD per bad byte;
 * SentencePiece: byte tokens). */
static void byte_cases_match(void **state)
{
    struct model *m = *state;
    json_t *hex = json_object_get(corpus, "byte_cases");
    json_t *exp = json_object_get(m->expect, "byte_cases");
    assert_int_equal(json_array_size(hex), json_array_size(exp));
    size_t bad = 0;
    for (size_t k = 0; k < json_array_size(hex); k++) {
        const char *h = json_string_value(json_array_get(hex, k));
        size_t len = strlen(h) / 2, n;
        char *s = malloc(len + 1);
        for (size_t i = 0; i < len; i++)
            s[i] = (char)(hexval(h[2 * i]) << 4 | hexval(h[2 * i + 1]));
        int32_t *got = encode(m->t, s, len, 0, &n);
        json_t *e = json_array_get(exp, k);
        bool same = n == json_array_size(e);
        for (size_t i = 0; same && i < n; i++)
            same = got[i] == json_integer_value(json_array_get(e, i));
        if (!same) {
            fprintf(stderr, "  byte case %s: ebb", h);
            for (size_t i = 0; i < n; i++)
                fprintf(stderr, " %d", got[i]);
            fprintf(stderr, ", llama.cpp");
            for (size_t i = 0; i < json_array_size(e); i++)
                fprintf(stderr, " %d", (int)json_integer_value(json_array_get(e, i)));
            fputc('\n', stderr);
            bad++;
        }
        free(got);
        free(s);
    }
    fprintf(stderr, "[ info ] %s: invalid UTF-8 cases %zu/%zu match llama.cpp\n",
            json_string_value(json_object_get(m->expect, "model")), json_array_size(hex) - bad,
            json_array_size(hex));
    assert_int_equal(bad, 0);
}

static void metadata_matches(void **state)
{
    struct model *m = *state;
    json_t *e = m->expect;
    assert_int_equal(ebb_tokenizer_n_vocab(m->t),
                     json_integer_value(json_object_get(e, "n_vocab")));
    assert_int_equal(ebb_tokenizer_bos(m->t), json_integer_value(json_object_get(e, "bos")));
    assert_int_equal(ebb_tokenizer_eos(m->t), json_integer_value(json_object_get(e, "eos")));
    assert_int_equal(ebb_tokenizer_eot(m->t), json_integer_value(json_object_get(e, "eot")));
    assert_int_equal(ebb_tokenizer_add_bos(m->t), json_is_true(json_object_get(e, "add_bos")));
    assert_int_equal(ebb_tokenizer_add_eos(m->t), json_is_true(json_object_get(e, "add_eos")));
    json_t *eog = json_object_get(e, "eog");
    size_t k = 0;
    for (uint32_t id = 0; id < ebb_tokenizer_n_vocab(m->t); id++) {
        bool want = k < json_array_size(eog) && json_integer_value(json_array_get(eog, k)) == id;
        if (want)
            k++;
        if (ebb_tokenizer_is_eog(m->t, (int32_t)id) != want)
            fail_msg("token %u: is_eog %d, llama.cpp %d", id, !want, want);
    }
    assert_false(ebb_tokenizer_is_eog(m->t, -1));
    assert_false(ebb_tokenizer_is_eog(m->t, (int32_t)ebb_tokenizer_n_vocab(m->t)));
}

/* Concatenated pieces of the ids equal the text wherever llama.cpp's detokenizer round-trips;
 * and streaming the same pieces through ebb_detok gives the same bytes. */
static void round_trip(void **state)
{
    struct model *m = *state;
    json_t *rt = json_object_get(m->expect, "roundtrip");
    size_t ok = 0, want_ok = 0;
    for (size_t i = 0; i < json_array_size(rt); i++) {
        if (!json_is_true(json_array_get(rt, i)))
            continue;
        want_ok++;
        size_t len, n;
        const char *s = corpus_str(i, &len);
        int32_t *ids = encode(m->t, s, len, 0, &n);
        char *cat = malloc(len * 4 + 64), *str = malloc(len * 4 + 64);
        size_t cn = 0, sn = 0;
        struct ebb_detok d;
        ebb_detok_init(&d);
        for (size_t k = 0; k < n; k++) {
            struct ebb_str p;
            assert_int_equal(ebb_tokenizer_piece(m->t, ids[k], false, &p), EBB_OK);
            memcpy(cat + cn, p.p, p.n);
            cn += p.n;
            sn += ebb_detok_push(&d, p.p, p.n, str + sn, p.n + 4);
        }
        sn += ebb_detok_finish(&d, str + sn, 3);
        if (cn == len && !memcmp(cat, s, len) && sn == len && !memcmp(str, s, len))
            ok++;
        else if (want_ok - ok <= 3)
            fprintf(stderr, "  round trip differs for string %zu\n", i);
        free(cat);
        free(str);
        free(ids);
    }
    fprintf(stderr, "[ info ] %s: round trip %zu/%zu (llama.cpp round-trips %zu)\n",
            json_string_value(json_object_get(m->expect, "model")), ok, want_ok, want_ok);
    assert_int_equal(ok, want_ok);
}

static void expect_ids(const struct ebb_tokenizer *t, const char *s, unsigned flags,
                       const int32_t *want, size_t wn)
{
    size_t n;
    int32_t *got = encode(t, s, strlen(s), flags, &n);
    if (n != wn || memcmp(got, want, n * sizeof *got)) {
        fprintf(stderr, "  \"%s\" gave", s);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", got[i]);
        fputc('\n', stderr);
    }
    assert_int_equal(n, wn);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i], want[i]);
    free(got);
}

static void expect_piece(const struct ebb_tokenizer *t, int32_t id, bool special, const char *s)
{
    struct ebb_str p;
    assert_int_equal(ebb_tokenizer_piece(t, id, special, &p), EBB_OK);
    assert_int_equal(p.n, strlen(s));
    assert_memory_equal(p.p, s, p.n);
}

static void smollm2_specials(void **state)
{
    struct model *m = *state;
    const struct ebb_tokenizer *t = m->t;
    assert_int_equal(ebb_tokenizer_kind(t), EBB_TOK_BPE);
    assert_string_equal(ebb_tokenizer_kind_name(t), "gpt2 (smollm)");
    assert_int_equal(ebb_tokenizer_find(t, "<|im_start|>", 12), 1);
    assert_int_equal(ebb_tokenizer_find(t, "<|im_end|>", 10), 2);
    assert_int_equal(ebb_tokenizer_find(t, "<|im_end", 8), -1);
    assert_true(ebb_tokenizer_is_eog(t, 2));  /* <|im_end|> */
    assert_true(ebb_tokenizer_is_eog(t, 0));  /* <|endoftext|> */
    assert_false(ebb_tokenizer_is_eog(t, 1)); /* <|im_start|> */
    const int32_t chat[] = {1, 4093, 198, 26843, 2};
    expect_ids(t, "<|im_start|>user\nHi<|im_end|>", EBB_TOK_PARSE_SPECIAL, chat, 5);
    size_t n;
    int32_t *ids = encode(t, "<|im_start|>", 12, 0, &n);
    assert_true(n > 1); /* plain text without PARSE_SPECIAL */
    free(ids);
    /* add_bos_token is false for SmolLM2: ADD_SPECIAL adds nothing. */
    const int32_t hi[] = {26843};
    expect_ids(t, "Hi", EBB_TOK_ADD_SPECIAL, hi, 1);
    /* Pieces: byte-level decoding, control tokens only when rendered. */
    expect_piece(t, 26843, false, "Hi");
    expect_piece(t, 2, false, "");
    expect_piece(t, 2, true, "<|im_end|>");
    int32_t sp = ebb_tokenizer_find(t, "\xc4\xa0world", 7); /* "Ġworld" */
    assert_true(sp >= 0);
    expect_piece(t, sp, false, " world");
    struct ebb_str p;
    assert_int_equal(ebb_tokenizer_piece(t, -1, true, &p), EBB_ERANGE);
    assert_int_equal(ebb_tokenizer_piece(t, 49152, true, &p), EBB_ERANGE);
    /* A split emoji: its 4 bytes come as separate byte tokens. */
    ids = encode(t, "\xf0\x9f\xab\xa8", 4, 0, &n);
    assert_true(n >= 2);
    free(ids);
}

static void gemma3_specials(void **state)
{
    struct model *m = *state;
    const struct ebb_tokenizer *t = m->t;
    assert_int_equal(ebb_tokenizer_kind(t), EBB_TOK_SPM);
    assert_int_equal(ebb_tokenizer_find(t, "<start_of_turn>", 15), 105);
    assert_int_equal(ebb_tokenizer_find(t, "<end_of_turn>", 13), 106);
    assert_true(ebb_tokenizer_is_eog(t, 106));
    assert_true(ebb_tokenizer_is_eog(t, 1));
    /* Control tokens need PARSE_SPECIAL... */
    const int32_t turn[] = {105};
    expect_ids(t, "<start_of_turn>", EBB_TOK_PARSE_SPECIAL, turn, 1);
    size_t n;
    int32_t *ids = encode(t, "<start_of_turn>", 15, 0, &n);
    assert_true(n > 1);
    free(ids);
    /* ...but user-defined tokens such as <s> or runs of spaces match in raw text regardless. */
    const int32_t s_tag[] = {203};
    expect_ids(t, "<s>", 0, s_tag, 1);
    const int32_t spaces[] = {138};
    expect_ids(t, "  ", 0, spaces, 1);
    /* BOS is added with ADD_SPECIAL (add_bos_token is true), EOS is not. */
    ids = encode(t, "Hi", 2, EBB_TOK_ADD_SPECIAL, &n);
    assert_true(n >= 2);
    assert_int_equal(ids[0], 2);
    assert_int_not_equal(ids[n - 1], 1);
    free(ids);
    ids = encode(t, "", 0, EBB_TOK_ADD_SPECIAL, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);
    free(ids);
    /* Pieces: U+2581 becomes a space, <0xNN> its byte, controls only when rendered. */
    int32_t w = ebb_tokenizer_find(t, "\xe2\x96\x81world", 8);
    assert_true(w >= 0);
    expect_piece(t, w, false, " world");
    int32_t b = ebb_tokenizer_find(t, "<0x41>", 6);
    assert_true(b >= 0);
    expect_piece(t, b, false, "A");
    expect_piece(t, 106, false, "");
    expect_piece(t, 106, true, "<end_of_turn>");
    expect_piece(t, 138, false, "  ");
}

/* The other pre-tokenizers (Llama 3, Qwen2, GPT-2, default) over SmolLM2's vocabulary and
 * merges, against llama.cpp run on copies of the model with tokenizer.ggml.pre replaced. */
static void other_pretokenizers(void **state)
{
    struct model *m = *state;
    json_t *all = load_json("expect-smollm2-pre.json");
    json_t *pres = json_object_get(all, "pre");
    const char *pre;
    json_t *e;
    size_t total_bad = 0, n_pre = 0;
    json_object_foreach(pres, pre, e)
    {
        struct ebb_tokenizer *t = NULL;
        struct ebb_diag diag;
        assert_int_equal(ebb__tokenizer_new_pre(m->g, pre, &t, &diag), EBB_OK);
        struct model mm = *m;
        mm.t = t;
        size_t n, bad = check_set(&mm, pre, json_object_get(e, "plain"), NULL, 0, &n);
        json_t *bc = json_object_get(e, "byte_cases"), *hex = json_object_get(corpus, "byte_cases");
        size_t bbad = 0;
        for (size_t k = 0; k < json_array_size(hex); k++) {
            const char *h = json_string_value(json_array_get(hex, k));
            size_t len = strlen(h) / 2, gn;
            char buf[256];
            for (size_t i = 0; i < len && i < sizeof buf; i++)
                buf[i] = (char)(hexval(h[2 * i]) << 4 | hexval(h[2 * i + 1]));
            int32_t *got = encode(t, buf, len, 0, &gn);
            json_t *w = json_array_get(bc, k);
            bool same = gn == json_array_size(w);
            for (size_t i = 0; same && i < gn; i++)
                same = got[i] == json_integer_value(json_array_get(w, i));
            bbad += !same;
            free(got);
        }
        fprintf(stderr,
                "[ info ] SmolLM2 vocabulary, pre '%s' (%s): corpus %zu/%zu, invalid UTF-8 "
                "%zu/%zu match llama.cpp\n",
                pre, ebb_tokenizer_kind_name(t), n - bad, n, json_array_size(hex) - bbad,
                json_array_size(hex));
        total_bad += bad + bbad;
        n_pre++;
        ebb_tokenizer_free(t);
    }
    json_decref(all);
    assert_int_equal(n_pre, 4);
    assert_int_equal(total_bad, 0);
}

/* Tekken, GPT-4o / Llama 4 and DeepSeek V3 have no reference vocabulary with llama.cpp's ids here;
 * their pre-token boundaries over the corpus are checked against llama.cpp's regular expressions
 * run the way llama.cpp runs them (tests/data/tokenizer/split-expect.py), on SmolLM2's vocabulary.
 */
static void emulated_splits(void **state)
{
    struct model *m = *state;
    json_t *all = load_json("expect-split.json");
    json_t *pres = json_object_get(all, "pre"), *strs = json_object_get(corpus, "strings");
    const char *pre;
    json_t *e;
    size_t total_bad = 0, n_pre = 0;
    json_object_foreach(pres, pre, e)
    {
        struct ebb_tokenizer *t = NULL;
        struct ebb_diag diag;
        assert_int_equal(ebb__tokenizer_new_pre(m->g, pre, &t, &diag), EBB_OK);
        size_t bad = 0, skipped = 0;
        for (size_t k = 0; k < json_array_size(strs); k++) {
            json_t *js = json_array_get(strs, k), *w = json_array_get(e, k);
            if (json_is_null(w)) { /* a code point the generator's Unicode lacks */
                skipped++;
                continue;
            }
            uint32_t *lens = NULL;
            size_t n = 0;
            assert_int_equal(
                ebb__bpe_split(t, json_string_value(js), json_string_length(js), &lens, &n),
                EBB_OK);
            bool same = n == json_array_size(w);
            for (size_t i = 0; same && i < n; i++)
                same = lens[i] == json_integer_value(json_array_get(w, i));
            if (!same && bad++ < 3) {
                fprintf(stderr, "[ FAIL ] pre '%s' splits corpus string %zu '", pre, k);
                print_escaped(json_string_value(js), json_string_length(js), 80);
                fprintf(stderr, "' differently\n");
            }
            free(lens);
        }
        fprintf(stderr,
                "[ info ] pre '%s': %zu/%zu corpus strings split as llama.cpp's expression does "
                "(%zu with code points the generator's Unicode lacks not checked)\n",
                pre, json_array_size(strs) - skipped - bad, json_array_size(strs) - skipped,
                skipped);
        total_bad += bad;
        n_pre++;
        ebb_tokenizer_free(t);
    }
    json_decref(all);
    assert_int_equal(n_pre, 7);
    assert_int_equal(total_bad, 0);
}

/* Pre-token boundaries of each BPE pre-tokenizer on hand-picked strings; the expected splits are
 * those of the original Hugging Face regular expressions (Python `regex`), which llama.cpp's
 * hand-written splitters reproduce. Digit grouping and contraction case only show here: SmolLM2's
 * merges never join digits. */
static void pretokenizer_splits(void **state)
{
    struct model *m = *state;
    static const struct {
        const char *pre, *text, *want; /* want: pieces joined by '/' */
    } cases[] = {
        {"llama-bpe", "12345 abc", "123/45/ abc"},
        {"llama-bpe", "IT'S we'RE they'll", "IT/'S/ we/'RE/ they/'ll"},
        {"llama-bpe", "x  y   z", "x/ / y/  / z"},
        {"llama-bpe", "a\n\n  b", "a/\n\n/ / b"},
        {"llama-bpe", "  \r\n\tfoo", "  \r\n/\tfoo"},
        {"llama-bpe", "(hello) world!!\n\nok", "(hello/)/ world/!!\n\n/ok"},
        {"llama-bpe", "1234567", "123/456/7"},
        {"llama-bpe", "$100.00 + 7", "$/100/./00/ +/ /7"},
        {"llama-bpe",
         "caf\xc3\xa9"
         " na\xc3\xaf"
         "ve",
         "caf\xc3\xa9"
         "/ na\xc3\xaf"
         "ve"},
        {"llama-bpe", "end   ", "end/   "},
        {"llama-bpe", "a1b22c333", "a/1/b/22/c/333"},
        {"llama-bpe", "don't'", "don/'t/'"},
        {"llama-bpe", "  leading", " / leading"},
        {"qwen2", "12345 abc", "1/2/3/4/5/ abc"},
        {"qwen2", "IT'S we'RE they'll", "IT/'S/ we/'RE/ they/'ll"},
        {"qwen2", "x  y   z", "x/ / y/  / z"},
        {"qwen2", "a\n\n  b", "a/\n\n/ / b"},
        {"qwen2", "  \r\n\tfoo", "  \r\n/\tfoo"},
        {"qwen2", "(hello) world!!\n\nok", "(hello/)/ world/!!\n\n/ok"},
        {"qwen2", "1234567", "1/2/3/4/5/6/7"},
        {"qwen2", "$100.00 + 7", "$/1/0/0/./0/0/ +/ /7"},
        {"qwen2",
         "caf\xc3\xa9"
         " na\xc3\xaf"
         "ve",
         "caf\xc3\xa9"
         "/ na\xc3\xaf"
         "ve"},
        {"qwen2", "end   ", "end/   "},
        {"qwen2", "a1b22c333", "a/1/b/2/2/c/3/3/3"},
        {"qwen2", "don't'", "don/'t/'"},
        {"qwen2", "  leading", " / leading"},
        {"gpt-2", "12345 abc", "12345/ abc"},
        {"gpt-2", "IT'S we'RE they'll", "IT/'/S/ we/'/RE/ they/'ll"},
        {"gpt-2", "x  y   z", "x/ / y/  / z"},
        {"gpt-2", "a\n\n  b", "a/\n\n / b"},
        {"gpt-2", "  \r\n\tfoo", "  \r\n/\t/foo"},
        {"gpt-2", "(hello) world!!\n\nok", "(/hello/)/ world/!!/\n/\n/ok"},
        {"gpt-2", "1234567", "1234567"},
        {"gpt-2", "$100.00 + 7", "$/100/./00/ +/ 7"},
        {"gpt-2",
         "caf\xc3\xa9"
         " na\xc3\xaf"
         "ve",
         "caf\xc3\xa9"
         "/ na\xc3\xaf"
         "ve"},
        {"gpt-2", "end   ", "end/   "},
        {"gpt-2", "a1b22c333", "a/1/b/22/c/333"},
        {"gpt-2", "don't'", "don/'t/'"},
        {"gpt-2", "  leading", " / leading"},
    };
    const char *last_pre = NULL;
    struct ebb_tokenizer *t = NULL;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (!last_pre || strcmp(last_pre, cases[c].pre)) {
            ebb_tokenizer_free(t);
            struct ebb_diag diag;
            assert_int_equal(ebb__tokenizer_new_pre(m->g, cases[c].pre, &t, &diag), EBB_OK);
            last_pre = cases[c].pre;
        }
        const char *s = cases[c].text;
        uint32_t *lens = NULL;
        size_t n = 0;
        assert_int_equal(ebb__bpe_split(t, s, strlen(s), &lens, &n), EBB_OK);
        char got[256];
        size_t g = 0, off = 0;
        for (size_t i = 0; i < n; i++) {
            if (i)
                got[g++] = '/';
            for (uint32_t k = 0; k < lens[i]; k++) {
                size_t cl = ((unsigned char)s[off] < 0x80)   ? 1
                            : ((unsigned char)s[off] < 0xE0) ? 2
                                                             : 3;
                memcpy(got + g, s + off, cl);
                g += cl;
                off += cl;
            }
        }
        got[g] = '\0';
        free(lens);
        if (strcmp(got, cases[c].want))
            fail_msg("pre '%s': \"%s\" split as \"%s\", want \"%s\"", cases[c].pre, s, got,
                     cases[c].want);
    }
    ebb_tokenizer_free(t);
}

/* Random bytes (seeded), with every flag combination: never an error, only valid ids, and the
 * pieces stream through ebb_detok within the documented room of 3 * (n + 3) bytes. */
static void random_bytes(void **state)
{
    struct model *m = *state;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    const char alphabet[] = "<|>_ \n\tabc'sS0123456789\xe2\x96\x81\xc3\xa9\xf0\x9f\x98\x80";
    for (int iter = 0; iter < 400; iter++) {
        char buf[300];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t len = x % sizeof buf;
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = (iter & 1) ? (char)(x >> 24) : alphabet[(x >> 24) % (sizeof alphabet - 1)];
        }
        for (unsigned flags = 0; flags < 4; flags++) {
            size_t n;
            int32_t *ids = encode(m->t, buf, len, flags, &n);
            struct ebb_detok d;
            ebb_detok_init(&d);
            for (size_t i = 0; i < n; i++) {
                assert_true(ids[i] >= 0 && (uint32_t)ids[i] < ebb_tokenizer_n_vocab(m->t));
                struct ebb_str p;
                assert_int_equal(ebb_tokenizer_piece(m->t, ids[i], true, &p), EBB_OK);
                char out[1024];
                assert_true(3 * (p.n + 3) <= sizeof out);
                ebb_detok_push(&d, p.p, p.n, out, 3 * (p.n + 3));
            }
            free(ids);
        }
    }
}

/* A too-small output array gives EBB_ERANGE and the count needed. */
static void range_error(void **state)
{
    struct model *m = *state;
    const char *s = "The quick brown fox jumps over the lazy dog.";
    size_t need = 0, n = 0;
    int32_t ids[64];
    assert_int_equal(ebb_tokenizer_encode(m->t, s, strlen(s), 0, ids, 64, &need), EBB_OK);
    assert_true(need > 3);
    assert_int_equal(ebb_tokenizer_encode(m->t, s, strlen(s), 0, ids, 3, &n), EBB_ERANGE);
    assert_int_equal(n, need);
    assert_int_equal(ebb_tokenizer_encode(m->t, s, strlen(s), 0, NULL, 0, &n), EBB_ERANGE);
    assert_int_equal(n, need);
}

/* Streaming detokenizer over hand-made splits. */
static size_t push_all(struct ebb_detok *d, const char *const *parts, size_t np, char *out)
{
    size_t w = 0;
    for (size_t i = 0; i < np; i++) {
        size_t n = strlen(parts[i]);
        size_t k = ebb_detok_push(d, parts[i], n, out + w, 3 * (n + 3));
        /* Never ends inside a character. */
        if (k) {
            size_t back = 0;
            while (back < k && (((unsigned char)out[w + k - 1 - back]) & 0xC0) == 0x80)
                back++;
            assert_true(back < k);
            unsigned char lead = (unsigned char)out[w + k - 1 - back];
            size_t need = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
            assert_int_equal(back + 1, need);
        }
        w += k;
    }
    w += ebb_detok_finish(d, out + w, 3);
    out[w] = '\0';
    return w;
}

static void detok_case(const char *const *parts, size_t np, const char *want)
{
    struct ebb_detok d;
    char out[512];
    ebb_detok_init(&d);
    size_t w = push_all(&d, parts, np, out);
    assert_int_equal(w, strlen(want));
    assert_memory_equal(out, want, w);
}

static void detok_streaming(void **state)
{
    (void)state;
    /* 2-, 3- and 4-byte characters split at every point. */
    const char *a[] = {"caf", "\xc3", "\xa9", "!"};
    detok_case(a, 4, "caf\xc3\xa9!");
    const char *b[] = {"\xe2", "\x82", "\xac", "1"};
    detok_case(b, 4,
               "\xe2\x82\xac"
               "1");
    const char *c[] = {"\xe2\x82", "\xac"};
    detok_case(c, 2, "\xe2\x82\xac");
    const char *e[] = {"\xf0", "\x9f", "\x98", "\x80"};
    detok_case(e, 4, "\xf0\x9f\x98\x80");
    const char *f[] = {"\xf0\x9f\x98", "\x80\xf0\x9f", "\x98\x81"};
    detok_case(f, 3, "\xf0\x9f\x98\x80\xf0\x9f\x98\x81");
    /* Emoji ZWJ family split inside the joiners. */
    const char *zwj[] = {"\xf0\x9f\x91\xa8\xe2", "\x80\x8d\xf0\x9f", "\x91\xa9\xe2\x80",
                         "\x8d\xf0\x9f\x91\xa7"};
    detok_case(zwj, 4, "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7");
    /* A flag (two regional indicators) one byte at a time. */
    const char *flag[] = {"\xf0", "\x9f", "\x87", "\xba", "\xf0", "\x9f", "\x87", "\xb8"};
    detok_case(flag, 8, "\xf0\x9f\x87\xba\xf0\x9f\x87\xb8");
    /* Invalid input becomes U+FFFD: stray continuation, bad leads, overlong, surrogate, an
     * interrupted sequence, and one left incomplete at the end. */
    const char *inv1[] = {"a\x80"
                          "b"};
    detok_case(inv1, 1,
               "a\xef\xbf\xbd"
               "b");
    const char *inv2[] = {"\xff\xfe"};
    detok_case(inv2, 1, "\xef\xbf\xbd\xef\xbf\xbd");
    const char *inv3[] = {"\xc0\xaf"};
    detok_case(inv3, 1, "\xef\xbf\xbd\xef\xbf\xbd");
    const char *inv4[] = {"\xed\xa0\x80"};
    detok_case(inv4, 1, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    const char *inv5[] = {"\xe2\x82", "x"};
    detok_case(inv5, 2, "\xef\xbf\xbdx");
    const char *inv6[] = {"ok\xf0\x9f\x98"};
    detok_case(inv6, 1, "ok\xef\xbf\xbd");
    const char *inv7[] = {"\xf5\x80"};
    detok_case(inv7, 1, "\xef\xbf\xbd\xef\xbf\xbd");
    const char *inv8[] = {"\xf4\x90\x80\x80"};
    detok_case(inv8, 1, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");

    /* Never writes past cap: valid text fits n + 4, invalid output beyond cap is dropped. */
    struct ebb_detok d;
    char out[16];
    memset(out, 'Z', sizeof out);
    ebb_detok_init(&d);
    size_t w = ebb_detok_push(&d, "\xff\xff\xff", 3, out, 7);
    assert_true(w <= 7);
    assert_int_equal(out[7], 'Z');
    ebb_detok_init(&d);
    assert_int_equal(ebb_detok_push(&d, "\xe2\x82", 2, out, 6), 0);
    assert_int_equal(ebb_detok_push(&d,
                                    "\xac"
                                    "abc",
                                    4, out, 8),
                     6);
    assert_memory_equal(out,
                        "\xe2\x82\xac"
                        "abc",
                        6);
    assert_int_equal(ebb_detok_finish(&d, out, 3), 0);
}

/* Tokenizer metadata that is missing or unsupported gives a clear error, never a crash. */
static struct ebb_gguf *mem_gguf(struct wbuf *file, const char *model, const char *pre,
                                 bool with_tokens)
{
    struct wbuf kv = {0};
    uint64_t n_kv = 0;
    if (model) {
        w_kv(&kv, "tokenizer.ggml.model", 8);
        w_str(&kv, model);
        n_kv++;
    }
    if (pre) {
        w_kv(&kv, "tokenizer.ggml.pre", 8);
        w_str(&kv, pre);
        n_kv++;
    }
    if (with_tokens) {
        const char *toks[] = {"<unk>",
                              "<s>",
                              "</s>",
                              "a",
                              "b",
                              "ab",
                              "\xe2\x96\x81"
                              "ab"};
        w_kv(&kv, "tokenizer.ggml.tokens", 9);
        w_u32(&kv, 8);
        w_u64(&kv, 7);
        for (int i = 0; i < 7; i++)
            w_str(&kv, toks[i]);
        n_kv++;
        w_kv(&kv, "tokenizer.ggml.scores", 9);
        w_u32(&kv, 6);
        w_u64(&kv, 7);
        for (int i = 0; i < 7; i++)
            w_f32(&kv, (float)-i);
        n_kv++;
    }
    *file = make(3, n_kv, &kv, NULL, 0, 32, 0);
    free(kv.p);
    struct ebb_gguf *g = NULL;
    struct ebb_diag diag;
    assert_int_equal(ebb_gguf_open_mem(file->p, file->n, &g, &diag), EBB_OK);
    return g;
}

static void bad_metadata(void **state)
{
    (void)state;
    struct {
        const char *model, *pre;
        bool tokens;
        ebb_err want;
    } cases[] = {
        {NULL, NULL, true, EBB_EFORMAT},
        {"llama", NULL, false, EBB_EFORMAT},
        {"bert-ish", NULL, true, EBB_EUNSUPPORTED},
        {"gpt2", "nonsense", true, EBB_EUNSUPPORTED},
        {"gpt2", "smollm", true, EBB_EFORMAT}, /* no merges */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct wbuf file;
        struct ebb_gguf *g = mem_gguf(&file, cases[i].model, cases[i].pre, cases[i].tokens);
        struct ebb_tokenizer *t = NULL;
        struct ebb_diag diag = {{0}};
        assert_int_equal(ebb_tokenizer_new(g, &t, &diag), cases[i].want);
        assert_null(t);
        assert_true(diag.msg[0] != '\0');
        ebb_gguf_close(g);
        free(file.p);
    }
    /* A tiny SentencePiece vocabulary works: "ab ab" -> ▁ab ▁ab with the default space prefix. */
    struct wbuf file;
    struct ebb_gguf *g = mem_gguf(&file, "llama", NULL, true);
    struct ebb_tokenizer *t = NULL;
    struct ebb_diag diag;
    assert_int_equal(ebb_tokenizer_new(g, &t, &diag), EBB_OK);
    ebb_gguf_close(g); /* everything needed was copied */
    free(file.p);
    const int32_t want[] = {1, 6, 6};
    expect_ids(t, "ab ab", EBB_TOK_ADD_SPECIAL, want, 3);
    /* "▁ac": neither U+2581 alone nor 'c' is a token and there are no <0xNN> tokens, so their
     * bytes fall back to <unk>. */
    const int32_t unk[] = {0, 0, 0, 3, 0};
    expect_ids(t, "ac", 0, unk, 5);
    ebb_tokenizer_free(t);
    ebb_tokenizer_free(NULL);
}

/* A byte-level BPE vocabulary with a long token of characters outside the byte mapping: its
 * piece (llama.cpp's "[UNK_BYTE_..]" rendering) is capped instead of growing quadratically. */
static void hostile_piece(void **state)
{
    (void)state;
    size_t long_n = 3 * 20000;
    char *longtok = malloc(long_n + 1);
    for (size_t i = 0; i < long_n; i += 3)
        memcpy(longtok + i, "\xe4\xb8\xad", 3);
    longtok[long_n] = '\0';
    struct wbuf kv = {0};
    w_kv(&kv, "tokenizer.ggml.model", 8);
    w_str(&kv, "gpt2");
    w_kv(&kv, "tokenizer.ggml.pre", 8);
    w_str(&kv, "smollm");
    w_kv(&kv, "tokenizer.ggml.tokens", 9);
    w_u32(&kv, 8);
    w_u64(&kv, 4);
    w_str(&kv, "a");
    w_str(&kv, "b");
    w_str(&kv, "ab");
    w_str(&kv, longtok);
    w_kv(&kv, "tokenizer.ggml.merges", 9);
    w_u32(&kv, 8);
    w_u64(&kv, 1);
    w_str(&kv, "a b");
    struct wbuf file = make(3, 4, &kv, NULL, 0, 32, 0);
    free(kv.p);
    struct ebb_gguf *g = NULL;
    struct ebb_tokenizer *t = NULL;
    struct ebb_diag diag;
    assert_int_equal(ebb_gguf_open_mem(file.p, file.n, &g, &diag), EBB_OK);
    assert_int_equal(ebb_tokenizer_new(g, &t, &diag), EBB_OK);
    struct ebb_str p;
    assert_int_equal(ebb_tokenizer_piece(t, 3, false, &p), EBB_OK);
    assert_true(p.n > 0 && p.n <= 65536);
    const int32_t ab[] = {2, 0};
    expect_ids(t, "aba", 0, ab, 2);
    ebb_tokenizer_free(t);
    ebb_gguf_close(g);
    free(file.p);
    free(longtok);
}

/* `test-tokenizer --encode MODEL FILE FLAGS`: encodes records "<byte count>\n<bytes>" from FILE
 * and prints one line of ids per record; scripts/ref/tokenizer-fuzz-diff.py compares these with
 * llama.cpp on random strings. */
static int encode_records(const char *model, const char *file, unsigned flags)
{
    struct ebb_gguf *g;
    struct ebb_tokenizer *t;
    struct ebb_diag d;
    if (ebb_gguf_open(model, &g, &d) || ebb_tokenizer_new(g, &t, &d)) {
        fprintf(stderr, "%s: %s\n", model, d.msg);
        return 1;
    }
    FILE *f = fopen(file, "rb");
    size_t len;
    int rc = f ? 0 : 1;
    while (f && fscanf(f, "%zu", &len) == 1 && fgetc(f) == '\n') {
        char *b = malloc(len + 1);
        size_t n, cap = 2 * len + 8;
        int32_t *ids = malloc(sizeof(int32_t) * cap);
        if (fread(b, 1, len, f) != len || ebb_tokenizer_encode(t, b, len, flags, ids, cap, &n)) {
            rc = 1;
            free(b);
            free(ids);
            break;
        }
        for (size_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
        free(b);
        free(ids);
    }
    if (f)
        fclose(f);
    ebb_tokenizer_free(t);
    ebb_gguf_close(g);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--encode"))
        return encode_records(argv[2], argv[3], (unsigned)atoi(argv[4]));
    corpus = load_json("corpus.json");
    const struct CMUnitTest smollm2[] = {
        cmocka_unit_test(corpus_matches),   cmocka_unit_test(special_sets_match),
        cmocka_unit_test(byte_cases_match), cmocka_unit_test(joined_matches),
        cmocka_unit_test(metadata_matches), cmocka_unit_test(round_trip),
        cmocka_unit_test(smollm2_specials), cmocka_unit_test(other_pretokenizers),
        cmocka_unit_test(emulated_splits),  cmocka_unit_test(pretokenizer_splits),
        cmocka_unit_test(range_error),      cmocka_unit_test(random_bytes),
    };
    const struct CMUnitTest gemma3[] = {
        cmocka_unit_test(corpus_matches),   cmocka_unit_test(special_sets_match),
        cmocka_unit_test(byte_cases_match), cmocka_unit_test(joined_matches),
        cmocka_unit_test(metadata_matches), cmocka_unit_test(round_trip),
        cmocka_unit_test(gemma3_specials),  cmocka_unit_test(range_error),
        cmocka_unit_test(random_bytes),
    };
    const struct CMUnitTest other[] = {
        cmocka_unit_test(detok_streaming),
        cmocka_unit_test(bad_metadata),
        cmocka_unit_test(hostile_piece),
    };
    int fails =
        cmocka_run_group_tests_name("tokenizer-smollm2", smollm2, setup_smollm2, teardown_model);
    fails += cmocka_run_group_tests_name("tokenizer-gemma3", gemma3, setup_gemma3, teardown_model);
    fails += cmocka_run_group_tests_name("tokenizer-other", other, NULL, NULL);
    json_decref(corpus);
    return fails ? 1 : 0;
}
