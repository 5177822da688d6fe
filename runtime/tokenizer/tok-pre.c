/* Pre-tokenizers of byte-level BPE vocabularies (tokenizer.ggml.pre): the regular expressions
 * each vocabulary's tokenizer.json names, written out by hand as matchers over Unicode
 * categories (no regex engine). Several expressions apply in turn, each to the pieces the
 * previous one left; what an expression matches becomes a piece and so does the text between
 * matches. Splitting reproduces llama.cpp's behaviour exactly, including its lenient UTF-8
 * decoding and its approximation of `\s+(?!\S)`. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer-int.h"
#include "unicode.h"

#define OOR 0xFFFFFFFFu /* "code point" past the end of the current piece */

static void span_emit(struct ebb__spans *s, size_t end)
{
    if (end <= s->prev)
        return;
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 64;
        uint32_t *nl = realloc(s->len, ncap * sizeof *nl);
        if (!nl) {
            s->oom = true;
            return;
        }
        s->len = nl;
        s->cap = ncap;
    }
    s->len[s->n++] = (uint32_t)(end - s->prev);
    s->prev = end;
}

/* The code points and their flags, with the bounds of the piece being split. */
struct cur {
    const uint32_t *cp;
    const uint16_t *fl;
    size_t ini, end;
};

static uint32_t CP(const struct cur *c, size_t p)
{
    return p >= c->ini && p < c->end ? c->cp[p] : OOR;
}

static unsigned FL(const struct cur *c, size_t p)
{
    return p >= c->ini && p < c->end ? c->fl[p] : 0;
}

#define IS_L(f) ((f)&EBB_UC_LETTER)
#define IS_N(f) ((f)&EBB_UC_NUMBER)
#define IS_WS(f) ((f)&EBB_UC_WHITESPACE)

/* The contraction alternatives 's 't 're 've 'm 'll 'd at p; returns the match length or 0. */
static size_t contraction(const struct cur *c, size_t p, bool any_case)
{
    if (CP(c, p) != '\'' || p + 1 >= c->end)
        return 0;
    uint32_t a = CP(c, p + 1), b = p + 2 < c->end ? CP(c, p + 2) : OOR;
    if (any_case) {
        a = ebb_unicode_tolower(a);
        b = b == OOR ? OOR : ebb_unicode_tolower(b);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* Whitespace tail shared by the splitters: `\s+(?!\S)` as "all but the last whitespace when
 * something follows inside the piece", then `\s+`, else a single code point. */
static size_t ws_tail(const struct cur *c, size_t pos)
{
    size_t k = 0;
    while (IS_WS(FL(c, pos + k)))
        k++;
    if (k > 1 && CP(c, pos + k) != OOR)
        return pos + k - 1;
    if (k > 0)
        return pos + k;
    return pos + 1;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(const struct cur *c, struct ebb__spans *o)
{
    for (size_t pos = c->ini; pos < c->end;) {
        uint32_t cp = CP(c, pos);
        size_t k = contraction(c, pos, false);
        if (k) {
            pos += k;
            span_emit(o, pos);
            continue;
        }
        unsigned f2 = cp == ' ' ? FL(c, pos + 1) : FL(c, pos);
        if (IS_L(f2) || IS_N(f2) ||
            (f2 && !(f2 & (EBB_UC_WHITESPACE | EBB_UC_LETTER | EBB_UC_NUMBER)))) {
            unsigned cls = IS_L(f2) ? 1 : IS_N(f2) ? 2 : 3;
            pos += cp == ' ';
            for (;;) {
                unsigned f = FL(c, pos);
                bool in = cls == 1 ? IS_L(f)
                          : cls == 2
                              ? IS_N(f)
                              : (f && !(f & (EBB_UC_WHITESPACE | EBB_UC_LETTER | EBB_UC_NUMBER)));
                if (!in)
                    break;
                pos++;
            }
            span_emit(o, pos);
            continue;
        }
        pos = ws_tail(c, pos);
        span_emit(o, pos);
    }
}

/* Llama 3 (digits_max 3) and Qwen2 (digits_max 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
static void split_llama3(const struct cur *c, struct ebb__spans *o, size_t digits_max)
{
    for (size_t pos = c->ini; pos < c->end;) {
        uint32_t cp = CP(c, pos);
        unsigned f = FL(c, pos);
        size_t k = contraction(c, pos, true);
        if (k) {
            pos += k;
            span_emit(o, pos);
            continue;
        }
        if (!(cp == '\r' || cp == '\n' || IS_N(f)) && (IS_L(f) || IS_L(FL(c, pos + 1)))) {
            pos++;
            while (IS_L(FL(c, pos)))
                pos++;
            span_emit(o, pos);
            continue;
        }
        if (IS_N(f)) {
            size_t run = 0;
            while (IS_N(FL(c, pos))) {
                pos++;
                if (++run >= digits_max) {
                    span_emit(o, pos);
                    run = 0;
                }
            }
            span_emit(o, pos);
            continue;
        }
        unsigned f2 = cp == ' ' ? FL(c, pos + 1) : f;
        if (!(f2 & (EBB_UC_WHITESPACE | EBB_UC_LETTER | EBB_UC_NUMBER)) && f) {
            pos += cp == ' ';
            while (!(f2 & (EBB_UC_WHITESPACE | EBB_UC_LETTER | EBB_UC_NUMBER)) && f2)
                f2 = FL(c, ++pos);
            while (CP(c, pos) == '\r' || CP(c, pos) == '\n')
                pos++;
            span_emit(o, pos);
            continue;
        }
        size_t n = 0, last_rn = 0;
        while (IS_WS(FL(c, pos + n))) {
            uint32_t c2 = CP(c, pos + n);
            if (c2 == '\r' || c2 == '\n')
                last_rn = pos + n + 1;
            n++;
        }
        if (last_rn) {
            pos = last_rn;
            span_emit(o, pos);
            continue;
        }
        pos = ws_tail(c, pos);
        span_emit(o, pos);
    }
}

/* The characters of the default pre-tokenizer's first pattern [\p{P}\$\+<=>\^~\|]. */
static bool punct_or_listed(uint32_t cp, unsigned f)
{
    if (cp < 128)
        return (f & 0xFF) == EBB_UC_PUNCT || cp == '$' || cp == '+' || cp == '<' || cp == '=' ||
               cp == '>' || cp == '^' || cp == '~' || cp == '|';
    return !IS_WS(f) && (f & 0xFF) == EBB_UC_PUNCT;
}

enum stage {
    ST_NUM_EACH,  /* \p{N}: every number code point alone */
    ST_NUM_RUN,   /* \p{N}+ */
    ST_DIGIT3,    /* [0-9][0-9][0-9] */
    ST_PUNCT_RUN, /* [\p{P}\$\+<=>\^~\|]+ */
    ST_GPT2,
    ST_LLAMA3,
    ST_QWEN2,
};

/* A regex stage: matches become pieces and so do the stretches between them. */
static void split_regex(const struct cur *c, struct ebb__spans *o, enum stage st)
{
    size_t pos = c->ini;
    while (pos < c->end) {
        unsigned f = c->fl[pos];
        uint32_t cp = c->cp[pos];
        size_t mlen = 0;
        switch (st) {
        case ST_NUM_EACH:
            mlen = IS_N(f) ? 1 : 0;
            break;
        case ST_NUM_RUN:
            while (pos + mlen < c->end && IS_N(c->fl[pos + mlen]))
                mlen++;
            break;
        case ST_DIGIT3:
            if (pos + 3 <= c->end && cp >= '0' && cp <= '9' && c->cp[pos + 1] >= '0' &&
                c->cp[pos + 1] <= '9' && c->cp[pos + 2] >= '0' && c->cp[pos + 2] <= '9')
                mlen = 3;
            break;
        case ST_PUNCT_RUN:
            while (pos + mlen < c->end && punct_or_listed(c->cp[pos + mlen], c->fl[pos + mlen]))
                mlen++;
            break;
        default:
            break;
        }
        if (mlen) {
            span_emit(o, pos);
            pos += mlen;
            span_emit(o, pos);
        } else {
            pos++;
        }
    }
    span_emit(o, c->end);
}

static const enum stage stages_default[] = {ST_PUNCT_RUN, ST_GPT2, ST_NUM_RUN, ST_DIGIT3};
static const enum stage stages_gpt2[] = {ST_GPT2};
static const enum stage stages_smollm[] = {ST_NUM_EACH, ST_GPT2};
static const enum stage stages_llama3[] = {ST_LLAMA3};
static const enum stage stages_qwen2[] = {ST_QWEN2};

/* Runs the pre-tokenizer of t over cps[0..n); the pieces come back in *out. */
ebb_err ebb__pretokenize(const struct ebb_tokenizer *t, const uint32_t *cps, const uint16_t *fl,
                         size_t n, struct ebb__spans *out)
{
    const enum stage *st;
    size_t nst;
    switch (t->pre) {
    case EBB__PRE_GPT2:
        st = stages_gpt2, nst = 1;
        break;
    case EBB__PRE_SMOLLM:
        st = stages_smollm, nst = 2;
        break;
    case EBB__PRE_LLAMA3:
        st = stages_llama3, nst = 1;
        break;
    case EBB__PRE_QWEN2:
        st = stages_qwen2, nst = 1;
        break;
    default:
        st = stages_default, nst = 4;
        break;
    }
    struct ebb__spans a = {0}, b = {0};
    span_emit(&a, n);
    for (size_t s = 0; s < nst && !a.oom; s++) {
        b.n = 0;
        b.prev = 0;
        size_t start = 0;
        for (size_t i = 0; i < a.n && !b.oom; i++) {
            struct cur c = {cps, fl, start, start + a.len[i]};
            switch (st[s]) {
            case ST_GPT2:
                split_gpt2(&c, &b);
                break;
            case ST_LLAMA3:
                split_llama3(&c, &b, 3);
                break;
            case ST_QWEN2:
                split_llama3(&c, &b, 1);
                break;
            default:
                split_regex(&c, &b, st[s]);
                break;
            }
            start = c.end;
        }
        struct ebb__spans tmp = a;
        a = b;
        b = tmp;
    }
    free(b.len);
    if (a.oom) {
        free(a.len);
        return EBB_ENOMEM;
    }
    *out = a;
    return EBB_OK;
}

ebb_err ebb__bpe_split(const struct ebb_tokenizer *t, const char *text, size_t len, uint32_t **lens,
                       size_t *n)
{
    struct ebb__spans sp = {0};
    uint32_t *cps = malloc(sizeof(uint32_t) * (len + 1));
    uint16_t *fl = malloc(sizeof(uint16_t) * (len + 1));
    ebb_err rc = EBB_ENOMEM;
    if (cps && fl) {
        size_t nc = 0;
        for (size_t i = 0; i < len;) {
            size_t adv;
            cps[nc] = ebb_utf8_decode_lax((const uint8_t *)text + i, len - i, &adv);
            fl[nc] = (uint16_t)ebb_unicode_flags(cps[nc]);
            nc++;
            i += adv;
        }
        rc = ebb__pretokenize(t, cps, fl, nc, &sp);
    }
    free(cps);
    free(fl);
    if (!rc) {
        *lens = sp.len;
        *n = sp.n;
    }
    return rc;
}
