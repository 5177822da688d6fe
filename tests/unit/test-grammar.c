/* Grammar engine: GBNF syntax and its errors, strings accepted and rejected, left recursion and
 * the limits, and next-token masks on the real SmolLM2 vocabulary against a brute-force check of
 * every token. The vocabulary tests skip (print why) when the model file is missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <time.h>

#include "grammar/grammar.h"

static struct ebb_grammar *compile(const char *src)
{
    struct ebb_grammar *g = NULL;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_grammar_compile(src, strlen(src), "root", &g, &d);
    if (rc)
        fail_msg("compile failed: %s\n%s", d.msg, src);
    return g;
}

static void expect_error(const char *src, const char *needle)
{
    struct ebb_grammar *g = NULL;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_grammar_compile(src, strlen(src), "root", &g, &d);
    if (rc != EBB_EINVAL || !strstr(d.msg, needle))
        fail_msg("expected an error containing '%s' for:\n%s\ngot rc %d: %s", needle, src, rc,
                 d.msg);
    assert_null(g);
}

/* Whether the grammar accepts s as a whole sentence (advancing one byte at a time, which also
 * exercises UTF-8 split across calls). */
static bool accepts(struct ebb_grammar *g, const char *s)
{
    struct ebb_grammar_state *st = NULL;
    assert_int_equal(ebb_grammar_state_new(&st), EBB_OK);
    assert_int_equal(ebb_grammar_state_reset(st, g, NULL), EBB_OK);
    bool ok = true;
    for (size_t i = 0; s[i] && ok; i++)
        ok = ebb_grammar_state_advance(st, (const uint8_t *)s + i, 1, NULL) == EBB_OK;
    ok = ok && ebb_grammar_state_can_end(st);
    ebb_grammar_state_free(st);
    return ok;
}

static void check(const char *src, const char *const *yes, const char *const *no)
{
    struct ebb_grammar *g = compile(src);
    for (; yes && *yes; yes++) {
        if (!accepts(g, *yes))
            fail_msg("should accept '%s' under:\n%s", *yes, src);
    }
    for (; no && *no; no++) {
        if (accepts(g, *no))
            fail_msg("should reject '%s' under:\n%s", *no, src);
    }
    ebb_grammar_free(g);
}

static void test_literals_and_sequences(void **state)
{
    (void)state;
    check("root ::= \"ab\" \"c\"", (const char *[]){"abc", NULL},
          (const char *[]){"ab", "abcd", "", "abd", NULL});
    check("root ::= \"a\\n\\t\\\\\\\"\\x41\\u00e9\"", (const char *[]){"a\n\t\\\"A\xc3\xa9", NULL},
          (const char *[]){"a", NULL});
    check("root ::= \"é€😀\"", (const char *[]){"é€😀", NULL}, (const char *[]){"é€", NULL});
    check("root ::= \"\"", (const char *[]){"", NULL}, (const char *[]){"a", NULL});
}

static void test_alternation_and_groups(void **state)
{
    (void)state;
    const char *g = "# a comment\n"
                    "root ::= greeting \" \" (\"world\" | name) # trailing\n"
                    "greeting ::= \"hi\" | \"hello\"\n"
                    "  | \"hey\"\n"
                    "name ::= [A-Z] [a-z]*\n";
    check(g, (const char *[]){"hi world", "hello Bob", "hey X", NULL},
          (const char *[]){"hi", "hi bob", "yo world", "hello world!", NULL});
    check("root ::= (\n  \"a\"\n  | \"b\"\n)+", (const char *[]){"a", "abba", NULL},
          (const char *[]){"", "abc", NULL});
}

static void test_repetition(void **state)
{
    (void)state;
    check("root ::= \"x\"*", (const char *[]){"", "x", "xxxxxxxx", NULL},
          (const char *[]){"y", NULL});
    check("root ::= \"x\"+", (const char *[]){"x", "xxx", NULL}, (const char *[]){"", NULL});
    check("root ::= \"a\" \"b\"? \"c\"", (const char *[]){"ac", "abc", NULL},
          (const char *[]){"abbc", NULL});
    check("root ::= [0-9]{3}", (const char *[]){"123", NULL}, (const char *[]){"12", "1234", NULL});
    check("root ::= [0-9]{2,4}", (const char *[]){"12", "123", "1234", NULL},
          (const char *[]){"1", "12345", NULL});
    check("root ::= \"ab\"{2,}", (const char *[]){"abab", "ababab", NULL},
          (const char *[]){"ab", "aba", NULL});
    check("root ::= [a]{0,0} \"b\"", (const char *[]){"b", NULL}, (const char *[]){"ab", NULL});
    /* a long right-recursive repetition stays within the depth limit */
    char *big = malloc(5001);
    memset(big, 'x', 5000);
    big[5000] = 0;
    check("root ::= \"x\"*", (const char *[]){big, NULL}, NULL);
    free(big);
}

static void test_classes(void **state)
{
    (void)state;
    check("root ::= [a-cx\\-\\]]", (const char *[]){"a", "b", "c", "x", "-", "]", NULL},
          (const char *[]){"d", "\\", NULL});
    check("root ::= [^\"\\\\]*", (const char *[]){"abc", "é", "", NULL},
          (const char *[]){"a\"", "\\", NULL});
    check("root ::= .", (const char *[]){"a", "é", "😀", "\n", NULL},
          (const char *[]){"", "ab", "\xff", NULL});
    check("root ::= [α-ω]+", (const char *[]){"αβω", NULL}, (const char *[]){"a", "Ω", NULL});
    /* Only valid UTF-8: overlong forms (a model once spelt 'r' as E0 81 B2 to slip past a
     * literal), surrogates and code points past U+10FFFF are refused. */
    check("root ::= \"r\"", (const char *[]){"r", NULL},
          (const char *[]){"\xe0\x81\xb2", "\xc1\xb2", "\xf0\x80\x81\xb2", NULL});
    check("root ::= .", (const char *[]){"\xed\x9f\xbf", "\xf4\x8f\xbf\xbf", NULL},
          (const char *[]){"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", NULL});
}

static void test_json_like(void **state)
{
    (void)state;
    const char *g = "root ::= value\n"
                    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
                    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" "
                    "ws value ws )* )? \"}\"\n"
                    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
                    "string ::= \"\\\"\" ( [^\"\\\\] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\"\n"
                    "number ::= \"-\"? [0-9]+ (\".\" [0-9]+)?\n"
                    "ws ::= [ \\t\\n]*\n";
    check(g,
          (const char *[]){"{}", "{\"a\": [1, 2.5, -3], \"b\": {\"c\": null}}", "[true,false]",
                           "\"x\\\"y\"", NULL},
          (const char *[]){"{", "{\"a\" 1}", "[1,]", "01.", "\"\\q\"", NULL});
}

static void test_syntax_errors(void **state)
{
    (void)state;
    expect_error("root ::= \"abc", "line 1, column 10: unterminated string literal");
    expect_error("root ::= [abc", "unterminated character class");
    expect_error("root ::= a\n\nb ::= \"x\"\n", "line 1, column 10: rule 'a' is not defined");
    expect_error("foo ::= \"x\"", "no rule 'root'");
    expect_error("root ::= \"x\"\nroot ::= \"y\"",
                 "line 2, column 1: rule 'root' is defined twice");
    expect_error("root ::= ( \"x\"", "unclosed '('");
    expect_error("root ::= \"x\" )", "unexpected ')'");
    expect_error("root := \"x\"", "line 1, column 6: expected '::='");
    expect_error("root ::= * \"x\"", "line 1, column 10: unexpected '*'");
    expect_error("root ::= \"x\"{3,2}", "maximum below its minimum");
    expect_error("root ::= \"x\"{5000}", "repetition count above");
    expect_error("root ::= \"\\q\"", "unknown escape");
    expect_error("root ::= \"\\x4\"", "needs 2 hex digits");
    expect_error("root ::= [z-a]", "range out of order");
    expect_error("root ::= \"a\" $", "line 1, column 14: unexpected '$'");
}

static void test_left_recursion(void **state)
{
    (void)state;
    expect_error("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]",
                 "rule 'expr' is left-recursive");
    expect_error("root ::= a\na ::= b \"x\"\nb ::= c\nc ::= \"y\" | a", "left-recursive");
    /* through a nullable prefix */
    expect_error("root ::= opt root \"x\" | \"y\"\nopt ::= \"z\"?", "left-recursive");
    /* a repeated nullable item would loop too */
    expect_error("root ::= (\"a\"?)*", "left-recursive");
    /* right recursion is fine */
    check("root ::= \"a\" root | \"b\"", (const char *[]){"aab", "b", NULL},
          (const char *[]){"aa", NULL});
}

static void test_limits(void **state)
{
    (void)state;
    /* an exponentially ambiguous grammar hits the stack limit instead of growing without bound */
    struct ebb_grammar *g = compile("root ::= x*\nx ::= \"a\" | \"a\" | \"aa\" | (\"a\" \"a\"?)");
    struct ebb_grammar_state *st = NULL;
    assert_int_equal(ebb_grammar_state_new(&st), EBB_OK);
    assert_int_equal(ebb_grammar_state_reset(st, g, NULL), EBB_OK);
    ebb_err rc = EBB_OK;
    for (int i = 0; i < 2000 && !rc; i++)
        rc = ebb_grammar_state_advance(st, (const uint8_t *)"a", 1, NULL);
    assert_true(rc == EBB_OK || rc == EBB_ERANGE);
    ebb_grammar_state_free(st);
    ebb_grammar_free(g);
    /* exponentially many ways to derive the same stack: bounded work, an error, no hang */
    char src[600] = "root ::=";
    for (int k = 0; k < 60; k++)
        strcat(src, " x");
    strcat(src, " \"z\"\nx ::= \"\" | \"\"");
    g = compile(src);
    assert_int_equal(ebb_grammar_state_new(&st), EBB_OK);
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_grammar_state_reset(st, g, &d), EBB_ERANGE);
    assert_non_null(strstr(d.msg, "limits"));
    ebb_grammar_state_free(st);
    ebb_grammar_free(g);
    /* a long chain of rules that consume nothing is bounded too */
    size_t cap = 2000 * 24;
    char *chain = malloc(cap);
    size_t o = (size_t)snprintf(chain, cap, "root ::= r0\n");
    for (int k = 0; k < 1999; k++)
        o += (size_t)snprintf(chain + o, cap - o, "r%d ::= r%d\n", k, k + 1);
    snprintf(chain + o, cap - o, "r1999 ::= \"z\"\n");
    g = compile(chain);
    free(chain);
    assert_int_equal(ebb_grammar_state_new(&st), EBB_OK);
    assert_int_equal(ebb_grammar_state_reset(st, g, NULL), EBB_ERANGE);
    ebb_grammar_state_free(st);
    ebb_grammar_free(g);
    /* deep nesting of a non-tail rule is bounded */
    g = compile("root ::= \"(\" root \")\" | \"x\"");
    assert_int_equal(ebb_grammar_state_new(&st), EBB_OK);
    assert_int_equal(ebb_grammar_state_reset(st, g, NULL), EBB_OK);
    rc = EBB_OK;
    int i = 0;
    for (; i < EBB_GRAMMAR_MAX_DEPTH + 10 && !rc; i++)
        rc = ebb_grammar_state_advance(st, (const uint8_t *)"(", 1, NULL);
    assert_int_equal(rc, EBB_ERANGE);
    assert_true(i > 100);
    ebb_grammar_state_free(st);
    ebb_grammar_free(g);
}

static void test_state_queries(void **state)
{
    (void)state;
    struct ebb_grammar *g = compile("root ::= \"ab\" [0-9]*");
    struct ebb_grammar_state *st = NULL;
    assert_int_equal(ebb_grammar_state_new(&st), EBB_OK);
    assert_int_equal(ebb_grammar_state_reset(st, g, NULL), EBB_OK);
    assert_false(ebb_grammar_state_can_end(st));
    assert_true(ebb_grammar_state_allows(st, (const uint8_t *)"ab1", 3));
    assert_false(ebb_grammar_state_allows(st, (const uint8_t *)"ax", 2));
    assert_int_equal(ebb_grammar_state_advance(st, (const uint8_t *)"ax", 2, NULL), EBB_EINVAL);
    assert_int_equal(ebb_grammar_state_advance(st, (const uint8_t *)"ab", 2, NULL), EBB_OK);
    assert_true(ebb_grammar_state_can_end(st));
    assert_false(ebb_grammar_state_done(st));
    ebb_grammar_state_free(st);
    ebb_grammar_free(g);
    g = compile("root ::= \"é\"");
    assert_int_equal(ebb_grammar_state_new(&st), EBB_OK);
    assert_int_equal(ebb_grammar_state_reset(st, g, NULL), EBB_OK);
    assert_true(ebb_grammar_state_allows(st, (const uint8_t *)"\xc3", 1));
    assert_false(ebb_grammar_state_allows(st, (const uint8_t *)"\xc4", 1));
    assert_int_equal(ebb_grammar_state_advance(st, (const uint8_t *)"\xc3", 1, NULL), EBB_OK);
    assert_false(ebb_grammar_state_can_end(st));
    assert_int_equal(ebb_grammar_state_advance(st, (const uint8_t *)"\xa9", 1, NULL), EBB_OK);
    assert_true(ebb_grammar_state_done(st));
    ebb_grammar_state_free(st);
    ebb_grammar_free(g);
}

/* ---- masks on the real vocabulary -------------------------------------------------------- */

struct vocab {
    struct ebb_gguf *gguf;
    struct ebb_tokenizer *tok;
    struct ebb_token_trie *trie;
};

static int open_vocab(void **state, const char *file)
{
    char path[1024];
    const char *dir = getenv("EBB_MODELS_DIR");
    if (dir && *dir)
        snprintf(path, sizeof path, "%s/%s", dir, file);
    else
        snprintf(path, sizeof path, "%s/.local/share/ebb/models/%s",
                 getenv("HOME") ? getenv("HOME") : "", file);
    struct vocab *v = calloc(1, sizeof(*v));
    struct ebb_diag d = {{0}};
    if (ebb_gguf_open(path, &v->gguf, &d)) {
        fprintf(stderr, "[ skip ] %s: %s\n", path, d.msg);
        free(v);
        *state = NULL;
        return 0;
    }
    assert_int_equal(ebb_tokenizer_new(v->gguf, &v->tok, &d), EBB_OK);
    assert_int_equal(ebb_token_trie_new(v->tok, &v->trie, &d), EBB_OK);
    *state = v;
    return 0;
}

static int vocab_setup(void **state)
{
    return open_vocab(state, "SmolLM2-135M-Instruct.Q4_1.gguf");
}

/* Gemma 3: a SentencePiece vocabulary of 262144 tokens ('▁' pieces, byte tokens <0xNN>). */
static int vocab_setup_gemma(void **state)
{
    return open_vocab(state, "gemma-3-270m-q4_k_m.gguf");
}

static int vocab_teardown(void **state)
{
    struct vocab *v = *state;
    if (v) {
        ebb_token_trie_free(v->trie);
        ebb_tokenizer_free(v->tok);
        ebb_gguf_close(v->gguf);
        free(v);
    }
    return 0;
}

/* The mask of st equals ebb_grammar_token_allowed over every token; returns how many are
 * allowed. */
static uint32_t check_mask(struct vocab *v, struct ebb_grammar_state *st)
{
    uint32_t nv = ebb_token_trie_n_vocab(v->trie), n_ok = 0;
    uint8_t *bits = malloc((nv + 7) / 8);
    assert_int_equal(ebb_grammar_mask(st, v->trie, bits, NULL), EBB_OK);
    for (uint32_t i = 0; i < nv; i++) {
        bool m = bits[i >> 3] >> (i & 7) & 1;
        bool b = ebb_grammar_token_allowed(st, v->trie, (int32_t)i);
        if (m != b)
            fail_msg("token %u: mask says %d, brute force %d", i, m, b);
        n_ok += m;
    }
    free(bits);
    return n_ok;
}

static void advance_text(struct vocab *v, struct ebb_grammar_state *st, const char *text)
{
    int32_t ids[256];
    size_t n = 0;
    assert_int_equal(ebb_tokenizer_encode(v->tok, text, strlen(text), 0, ids, 256, &n), EBB_OK);
    for (size_t i = 0; i < n; i++) {
        struct ebb_diag d = {{0}};
        if (ebb_grammar_accept_token(st, v->trie, ids[i], &d))
            fail_msg("token %d of '%s' rejected: %s", ids[i], text, d.msg);
    }
}

static void test_mask_vs_brute_force(void **state)
{
    struct vocab *v = *state;
    if (!v)
        skip();
    const char *src = "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws str ws \",\" ws "
                      "\"\\\"age\\\"\" ws \":\" ws [0-9]+ ws \"}\"\n"
                      "str ::= \"\\\"\" ( [^\"\\\\] | \"\\\\\" [\"\\\\nt] )* \"\\\"\"\n"
                      "ws ::= [ \\n]{0,4}\n";
    struct ebb_grammar *g = compile(src);
    struct ebb_grammar_state *st = NULL;
    assert_int_equal(ebb_grammar_state_new(&st), EBB_OK);
    assert_int_equal(ebb_grammar_state_reset(st, g, NULL), EBB_OK);
    const char *steps[] = {"", "{", " \"name\": \"Al", "ice é", "\", \"age\": 4", "2 }"};
    uint32_t counts[6];
    for (int i = 0; i < 6; i++) {
        advance_text(v, st, steps[i]);
        counts[i] = check_mask(v, st);
        fprintf(stderr, "[ info ] after '%s': %u tokens allowed\n", steps[i], counts[i]);
    }
    assert_true(counts[0] > 0 && counts[0] < 100); /* "{" and a few "{ ..." tokens */
    assert_true(counts[2] > 10000);                /* inside a string almost anything */
    assert_true(ebb_grammar_state_done(st));
    int32_t eos = ebb_tokenizer_eos(v->tok);
    assert_true(ebb_grammar_token_allowed(st, v->trie, eos));
    assert_int_equal(counts[5], check_mask(v, st));
    ebb_grammar_state_free(st);
    ebb_grammar_free(g);
}

static void test_mask_any_text(void **state)
{
    struct vocab *v = *state;
    if (!v)
        skip();
    /* Every token with text is allowed under .*, so the walk visits the whole trie. */
    struct ebb_grammar *g = compile("root ::= .*");
    struct ebb_grammar_state *st = NULL;
    assert_int_equal(ebb_grammar_state_new(&st), EBB_OK);
    assert_int_equal(ebb_grammar_state_reset(st, g, NULL), EBB_OK);
    uint32_t n = check_mask(v, st);
    fprintf(stderr, "[ info ] .* allows %u of %u tokens\n", n, ebb_token_trie_n_vocab(v->trie));
    /* the cost of the worst case, a walk over the whole trie, and of one token check */
    uint8_t *bits = malloc((ebb_token_trie_n_vocab(v->trie) + 7) / 8);
    struct timespec t0, t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(ebb_grammar_mask(st, v->trie, bits, NULL), EBB_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint32_t ok = 0;
    for (int32_t i = 0; i < 10000; i++)
        ok += ebb_grammar_token_allowed(st, v->trie, i);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    fprintf(stderr, "[ info ] full mask %.2f ms, one token check %.2f us (%u)\n",
            ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / 10,
            ((double)(t2.tv_sec - t1.tv_sec) * 1e6 + (double)(t2.tv_nsec - t1.tv_nsec) / 1e3) / 1e4,
            ok);
    free(bits);
    assert_true(n > 48000);
    int32_t eos = ebb_tokenizer_eos(v->tok);
    assert_true(ebb_grammar_token_allowed(st, v->trie, eos));
    ebb_grammar_state_free(st);
    ebb_grammar_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals_and_sequences),
        cmocka_unit_test(test_alternation_and_groups),
        cmocka_unit_test(test_repetition),
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_json_like),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_left_recursion),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_state_queries),
        cmocka_unit_test_setup_teardown(test_mask_vs_brute_force, vocab_setup, vocab_teardown),
        cmocka_unit_test_setup_teardown(test_mask_any_text, vocab_setup, vocab_teardown),
        cmocka_unit_test_setup_teardown(test_mask_vs_brute_force, vocab_setup_gemma,
                                        vocab_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
