/* Tokenizer conformance against llama.cpp's reference vocabularies: every
 * models/ggml-vocab-<name>.gguf that comes with a .gguf.inp (test strings, each followed by a
 * "__ggml_vocab_test__" marker line) and a .gguf.out (the expected ids of each string, one line
 * per string) is loaded, each string is encoded without BOS/EOS and without parsing special
 * tokens (as llama.cpp's test-tokenizer-0 does) and compared with the expected ids. Then the ids
 * are detokenized and compared with the string (round trip). scripts/fetch-vocabs.sh puts the
 * files in $EBB_VOCABS_DIR (default ~/.cache/ebb/vocabs); the test fails without them.
 *
 * Each vocabulary is declared below as supported (every string must match and round-trip) or
 * unsupported (loading must fail with EBB_EUNSUPPORTED and a message naming the metadata key
 * that is not supported). A vocabulary not declared fails the test, so a new file is noticed.
 * Prints one line per vocabulary with its pass counts. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/unicode.h"
#include "tokenizer/tokenizer-int.h"
#include "tokenizer/tokenizer.h"

#define MARKER "\n__ggml_vocab_test__\n"

struct decl {
    const char *name;
    bool supported;
    const char *why; /* for unsupported vocabularies: the key the load error must name */
    bool add_bos;    /* whether llama.cpp adds BOS with add_special (from the GGUF's
                      * add_bos_token, else its default for the tokenizer and pre-tokenizer) */
    bool rstrip;     /* special tokens drop the whitespace after them (Phi-3) */
};

static const struct decl decls[] = {
    {"bert-bge", false, "tokenizer.ggml.model", false, false},
    {"command-r", true, NULL, true, false},
    {"deepseek-coder", true, NULL, true, false},
    {"deepseek-llm", true, NULL, true, false},
    {"falcon", true, NULL, false, false},
    {"gemma-4", true, NULL, true, false},
    {"gpt-2", true, NULL, false, false},
    {"llama-bpe", true, NULL, true, false},
    {"llama-spm", true, NULL, true, false},
    {"mpt", true, NULL, false, false},
    {"phi-3", true, NULL, true, true},
    {"qwen2", true, NULL, false, false},
    {"qwen35", true, NULL, false, false},
    {"refact", true, NULL, false, false},
    {"starcoder", true, NULL, false, false},
};

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *p = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *np = realloc(p, cap);
            if (!np) {
                free(p);
                fclose(f);
                return NULL;
            }
            p = np;
        }
        size_t r = fread(p + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0)
            break;
    }
    fclose(f);
    p[len] = 0;
    *n = len;
    return p;
}

/* Parses one line of the .out file into ids; returns the count (at most cap). */
static size_t parse_ids(const char *line, const char *end, int32_t *ids, size_t cap)
{
    size_t n = 0;
    while (line < end && n < cap) {
        while (line < end && *line == ' ')
            line++;
        if (line >= end)
            break;
        char *e;
        long v = strtol(line, &e, 10);
        if (e == line)
            break;
        ids[n++] = (int32_t)v;
        line = e;
    }
    return n;
}

struct counts {
    unsigned strings, pass, roundtrip;
};

/* Detokenizes ids and compares with the text; SentencePiece vocabularies that add a space
 * prefix drop the leading space the prefix became, as llama.cpp's detokenizer does. */
static bool round_trip(const struct ebb_tokenizer *t, bool strip_prefix, const int32_t *ids,
                       size_t n, const char *text, size_t len)
{
    char *buf = malloc(65536);
    size_t bn = 0;
    bool ok = buf != NULL;
    for (size_t i = 0; i < n && ok; i++) {
        struct ebb_str p;
        if (ebb_tokenizer_piece(t, ids[i], false, &p) || bn + p.n > 65536) {
            ok = false;
            break;
        }
        memcpy(buf + bn, p.p, p.n);
        bn += p.n;
    }
    const char *s = buf;
    if (ok && strip_prefix && bn && s[0] == ' ')
        s++, bn--;
    ok = ok && bn == len && !memcmp(s, text, len);
    free(buf);
    return ok;
}

/* Code points the random strings are drawn from: ASCII letters, digits and punctuation, every
 * kind of whitespace and newline runs, Latin with accents and combining marks, Greek, Cyrillic,
 * CJK, Hangul, full-width forms, ideographic punctuation, emoji and a noncharacter. */
static const uint32_t fuzz_cps[] = {
    'a',    'Z',    'q',    '0',    '7',     '9',     ' ',     ' ',     ' ',    '\n',   '\n',
    '\r',   '\t',   '\'',   '.',    ',',     '!',     '$',     '`',     '<',    '/',    '_',
    0x0B,   0x0C,   0x85,   0xA0,   0xB5,    0xC4,    0xE9,    0x301,   0x308,  0x3A9,  0x3B1,
    0x416,  0x44F,  0x5D0,  0x627,  0x663,   0x905,   0x93F,   0xE01,   0x1680, 0x2003, 0x2019,
    0x2028, 0x3000, 0x3001, 0x3042, 0x30A2,  0x4E00,  0x6F22,  0x9FA5,  0xAC00, 0xD55C, 0xFF01,
    0xFF21, 0xFF41, 0xFFFD, 0xFDD0, 0x1F600, 0x1F999, 0x10400, 0x1D11E,
};

/* Seeded random strings of those code points: encoding must succeed and detokenize back to the
 * string where the vocabulary has a token for every byte (llama.cpp drops a byte it has no
 * token for, and so does ebb). Returns the number of failures (at most 3 are printed). */
static int fuzz_round_trip(const struct ebb_tokenizer *t, const struct decl *d, bool strip,
                           int32_t *ids, size_t cap, int *n_covered)
{
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int bad = 0;
    char text[256];
    for (int k = 0; k < 300; k++) {
        size_t len = 0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int ncp = (int)(x % 40) + 1;
        for (int i = 0; i < ncp; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            uint32_t cp = fuzz_cps[x % (sizeof fuzz_cps / sizeof fuzz_cps[0])];
            uint8_t u[4];
            size_t un = ebb_utf8_encode(cp, u);
            memcpy(text + len, u, un);
            len += un;
        }
        size_t n = 0;
        bool covered = true; /* byte-level BPE: every byte has a token (falcon lacks 0x0B) */
        for (size_t i = 0; i < len && t->kind == EBB_TOK_BPE && !t->raw_bpe; i++)
            covered = covered && t->byte_tok[(uint8_t)text[i]] >= 0;
        *n_covered += covered;
        if (ebb_tokenizer_encode(t, text, len, 0, ids, cap, &n) ||
            (covered && !round_trip(t, strip, ids, n, text, len))) {
            if (bad++ < 3)
                printf("%-16s random string %d '%.*s' does not round-trip\n", d->name, k, (int)len,
                       text);
        }
    }
    return bad;
}

static bool has_id(const int32_t *ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* BOS/EOS as add_special asks, and special tokens: the EOS token's text inside a string is that
 * token with parse_special and plain text without it (when it is a control token). Returns the
 * number of failed checks. */
static int check_specials(const struct ebb_tokenizer *t, const struct decl *d, int32_t *ids,
                          size_t cap)
{
    int bad = 0;
    size_t n = 0;
    int32_t bos = ebb_tokenizer_bos(t), eos = ebb_tokenizer_eos(t);
    if (ebb_tokenizer_add_bos(t) != d->add_bos || ebb_tokenizer_add_eos(t)) {
        printf("%-16s add_bos %d add_eos %d, llama.cpp has %d 0\n", d->name,
               ebb_tokenizer_add_bos(t), ebb_tokenizer_add_eos(t), d->add_bos);
        bad++;
    }
    if (ebb_tokenizer_encode(t, "Hi", 2, EBB_TOK_ADD_SPECIAL, ids, cap, &n) || n == 0 ||
        (ids[0] == bos) != d->add_bos) {
        printf("%-16s add_special: BOS %s\n", d->name, d->add_bos ? "missing" : "added");
        bad++;
    }
    struct ebb_str e;
    if (eos < 0 || ebb_tokenizer_piece(t, eos, true, &e) || e.n == 0 || e.n > 200)
        return bad;
    char text[256];
    int tn = snprintf(text, sizeof text, "Hi%.*s there", (int)e.n, e.p);
    bool control = ebb_tokenizer_piece(t, eos, false, &e) == EBB_OK && e.n == 0;
    if (ebb_tokenizer_encode(t, text, (size_t)tn, EBB_TOK_PARSE_SPECIAL, ids, cap, &n) ||
        !has_id(ids, n, eos)) {
        printf("%-16s parse_special: '%s' does not give EOS %d\n", d->name, text, eos);
        bad++;
    }
    if (control &&
        (ebb_tokenizer_encode(t, text, (size_t)tn, 0, ids, cap, &n) || has_id(ids, n, eos))) {
        printf("%-16s without parse_special '%s' gives EOS %d\n", d->name, text, eos);
        bad++;
    }
    return bad;
}

/* Whether "TOK\n Hi" and "TOKHi" give the same ids with parse_special (TOK: the text of tok). */
static int same_after(const struct ebb_tokenizer *t, int32_t tok, int32_t *ids, size_t cap)
{
    struct ebb_str e;
    if (tok < 0 || ebb_tokenizer_piece(t, tok, true, &e) || e.n == 0 || e.n > 100)
        return -1;
    char a[128], b[128];
    int32_t ib[256];
    int an = snprintf(a, sizeof a, "%.*s\n Hi", (int)e.n, e.p);
    int bn = snprintf(b, sizeof b, "%.*sHi", (int)e.n, e.p);
    size_t na = 0, nb = 0;
    if (ebb_tokenizer_encode(t, a, (size_t)an, EBB_TOK_PARSE_SPECIAL, ids, cap, &na) ||
        ebb_tokenizer_encode(t, b, (size_t)bn, EBB_TOK_PARSE_SPECIAL, ib, 256, &nb))
        return -1;
    return na == nb && !memcmp(ids, ib, na * sizeof *ids);
}

/* Phi-3 (llama.cpp decides by general.name) drops the whitespace after every special token
 * but <unk>, <s> and <|endoftext|>; other vocabularies keep it. */
static int check_rstrip(const struct ebb_tokenizer *t, const struct decl *d, int32_t *ids,
                        size_t cap)
{
    int32_t tok = d->rstrip ? ebb_tokenizer_find(t, "<|end|>", 7) : ebb_tokenizer_eos(t);
    int same = same_after(t, tok, ids, cap);
    int kept = d->rstrip ? same_after(t, ebb_tokenizer_find(t, "<|endoftext|>", 13), ids, cap) : 0;
    if (same != (int)d->rstrip || kept != 0) {
        printf("%-16s whitespace after special token %d %s\n", d->name, tok,
               same < 0 || kept < 0 ? "cannot be checked"
               : d->rstrip          ? "is not dropped (or is after <|endoftext|>)"
                                    : "is dropped");
        return 1;
    }
    return 0;
}

static int check_vocab(const char *dir, const struct decl *d, struct counts *c)
{
    char path[2048];
    struct ebb_diag diag = {{0}};
    struct ebb_gguf *g = NULL;
    struct ebb_tokenizer *t = NULL;
    char *inp = NULL, *out = NULL;
    int32_t *ids = malloc(sizeof(int32_t) * 65536), *want = malloc(sizeof(int32_t) * 65536);
    int failed = 0;
    size_t inp_n, out_n;
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", dir, d->name);
    if (!ids || !want || ebb_gguf_open(path, &g, &diag)) {
        printf("%-16s cannot open %s: %s\n", d->name, path, diag.msg);
        failed = 1;
        goto out;
    }
    ebb_err rc = ebb_tokenizer_new(g, &t, &diag);
    if (!d->supported) {
        if (rc != EBB_EUNSUPPORTED || !strstr(diag.msg, d->why)) {
            printf("%-16s declared unsupported, but loading gave %s (%s)\n", d->name,
                   ebb_err_name(rc), diag.msg);
            failed = 1;
        } else {
            printf("%-16s unsupported: %s\n", d->name, diag.msg);
        }
        goto out;
    }
    if (rc) {
        printf("%-16s load failed: %s: %s\n", d->name, ebb_err_name(rc), diag.msg);
        failed = 1;
        goto out;
    }
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.inp", dir, d->name);
    inp = slurp(path, &inp_n);
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.out", dir, d->name);
    out = slurp(path, &out_n);
    if (!inp || !out) {
        printf("%-16s missing .inp/.out next to the vocabulary\n", d->name);
        failed = 1;
        goto out;
    }
    bool strip = ebb_tokenizer_kind(t) == EBB_TOK_SPM;
    const char *s = inp, *s_end = inp + inp_n, *o = out, *o_end = out + out_n;
    while (s < s_end) {
        const char *m = strstr(s, MARKER);
        size_t len = m ? (size_t)(m - s) : (size_t)(s_end - s);
        const char *nl = memchr(o, '\n', (size_t)(o_end - o));
        const char *le = nl ? nl : o_end;
        if (o >= o_end) {
            printf("%-16s .out has fewer lines than .inp has strings\n", d->name);
            failed = 1;
            break;
        }
        size_t nw = parse_ids(o, le, want, 65536), n = 0;
        c->strings++;
        rc = ebb_tokenizer_encode(t, s, len, 0, ids, 65536, &n);
        bool ok = !rc && n == nw && !memcmp(ids, want, n * sizeof *ids);
        if (ok) {
            c->pass++;
        } else {
            failed = 1;
            printf("%-16s string %u '%.*s' mismatch\n  want:", d->name, c->strings,
                   (int)(len > 60 ? 60 : len), s);
            for (size_t i = 0; i < nw; i++)
                printf(" %d", want[i]);
            printf("\n  got: ");
            for (size_t i = 0; i < n && i < 65536; i++)
                printf(" %d", ids[i]);
            printf("\n");
        }
        if (!rc && round_trip(t, strip && t->add_space_prefix, ids, n, s, len)) {
            c->roundtrip++;
        } else {
            failed = 1;
            printf("%-16s string %u '%.*s' does not round-trip\n", d->name, c->strings,
                   (int)(len > 60 ? 60 : len), s);
        }
        o = nl ? nl + 1 : o_end;
        if (!m)
            break;
        s = m + strlen(MARKER);
    }
    int n_cov = 0;
    int bad_fuzz = fuzz_round_trip(t, d, strip && t->add_space_prefix, ids, 65536, &n_cov);
    failed |= bad_fuzz != 0;
    int bad_special = check_specials(t, d, ids, 65536) + check_rstrip(t, d, ids, 65536);
    failed |= bad_special != 0;
    printf("%-16s %-22s %u/%u strings match, %u/%u round-trip, %d/%d random round-trip, "
           "specials %s\n",
           d->name, ebb_tokenizer_kind_name(t), c->pass, c->strings, c->roundtrip, c->strings,
           n_cov - bad_fuzz, n_cov, bad_special ? "FAIL" : "ok");
out:
    ebb_tokenizer_free(t);
    ebb_gguf_close(g);
    free(inp);
    free(out);
    free(ids);
    free(want);
    return failed;
}

/* A pre-tokenizer ebb does not implement (on the gpt-2 vocabulary) fails to load with an error
 * that names tokenizer.ggml.pre and the value, never a guessed split. */
static int check_unknown_pre(const char *dir)
{
    char path[2048];
    struct ebb_diag diag = {{0}};
    struct ebb_gguf *g = NULL;
    struct ebb_tokenizer *t = NULL;
    int bad = 0;
    snprintf(path, sizeof path, "%s/ggml-vocab-gpt-2.gguf", dir);
    if (ebb_gguf_open(path, &g, &diag))
        return printf("cannot open %s: %s\n", path, diag.msg), 1;
    const char *pres[] = {"kimi-k2", "seed-coder", "bloom", "no-such-pre"};
    for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "tokenizer.ggml.pre = '%s'", pres[i]);
        ebb_err rc = ebb__tokenizer_new_pre(g, pres[i], &t, &diag);
        if (rc != EBB_EUNSUPPORTED || !strstr(diag.msg, want)) {
            printf("pre-tokenizer '%s': loading gave %s (%s), not a clear error\n", pres[i],
                   ebb_err_name(rc), rc ? diag.msg : "");
            bad = 1;
        }
        if (!rc)
            ebb_tokenizer_free(t);
    }
    ebb_gguf_close(g);
    if (!bad)
        printf("unknown pre-tokenizers are refused: %s\n", diag.msg);
    return bad;
}

static const struct decl *find_decl(const char *name)
{
    for (size_t i = 0; i < sizeof decls / sizeof decls[0]; i++)
        if (!strcmp(decls[i].name, name))
            return &decls[i];
    return NULL;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

int main(int argc, char **argv)
{
    const char *dir = getenv("EBB_VOCABS_DIR");
    char dflt[1024];
    if (!dir || !*dir) {
        const char *home = getenv("HOME");
        snprintf(dflt, sizeof dflt, "%s/.cache/ebb/vocabs", home ? home : ".");
        dir = dflt;
    }
    DIR *dd = opendir(dir);
    if (!dd) {
        fprintf(stderr, "cannot open %s: run scripts/fetch-vocabs.sh and set EBB_VOCABS_DIR\n",
                dir);
        return 1;
    }
    /* Sorted names, so the report reads the same on every machine. */
    char names[64][128];
    int n_vocabs = 0, failed = 0;
    for (struct dirent *de; (de = readdir(dd));) {
        const char *nm = de->d_name;
        size_t l = strlen(nm);
        if (strncmp(nm, "ggml-vocab-", 11) || l < 20 || l - 20 >= sizeof names[0] ||
            strcmp(nm + l - 9, ".gguf.inp"))
            continue;
        if (n_vocabs == 64) {
            fprintf(stderr, "more than 64 vocabularies in %s\n", dir);
            closedir(dd);
            return 1;
        }
        snprintf(names[n_vocabs++], sizeof names[0], "%.*s", (int)(l - 20), nm + 11);
    }
    closedir(dd);
    qsort(names, (size_t)n_vocabs, sizeof names[0], cmp_name);
    for (int i = 0; i < n_vocabs; i++) {
        if (argc > 1 && strcmp(argv[1], names[i]))
            continue;
        const struct decl *d = find_decl(names[i]);
        if (!d) {
            printf("%-16s not declared in test-vocabs.c: declare it supported or not\n", names[i]);
            failed = 1;
            continue;
        }
        struct counts c = {0};
        failed |= check_vocab(dir, d, &c);
    }
    if (n_vocabs == 0) {
        fprintf(stderr, "no ggml-vocab-*.gguf.inp in %s\n", dir);
        return 1;
    }
    if (argc < 2)
        failed |= check_unknown_pre(dir);
    printf("%s\n", failed ? "FAILED" : "all declared vocabularies conform");
    return failed;
}
