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
 * \s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen 3.5 (marks) reads [\p{L}\p{M}] for \p{L} in the letter run and the punctuation run. */
static void split_llama3(const struct cur *c, struct ebb__spans *o, size_t digits_max, bool marks)
{
    const unsigned lm = EBB_UC_LETTER | (marks ? EBB_UC_MARK : 0);
    const unsigned wlmn = EBB_UC_WHITESPACE | EBB_UC_NUMBER | lm;
    for (size_t pos = c->ini; pos < c->end;) {
        uint32_t cp = CP(c, pos);
        unsigned f = FL(c, pos);
        size_t k = contraction(c, pos, true);
        if (k) {
            pos += k;
            span_emit(o, pos);
            continue;
        }
        if (!(cp == '\r' || cp == '\n' || IS_N(f)) && ((f & lm) || (FL(c, pos + 1) & lm))) {
            pos++;
            while (FL(c, pos) & lm)
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
        if (!(f2 & wlmn) && f) {
            pos += cp == ' ';
            while (!(f2 & wlmn) && f2)
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

/* Classes of the case-aware letter runs below, as llama.cpp evaluates them: its regex engine
 * sees every non-ASCII letter as one stand-in character, so "upper" is a letter other than a-z
 * and "lower" a letter other than A-Z (a non-ASCII letter is both). */
static bool up_at(const struct cur *c, size_t p)
{
    uint32_t cp = CP(c, p);
    return IS_L(FL(c, p)) && !(cp >= 'a' && cp <= 'z');
}

static bool low_at(const struct cur *c, size_t p)
{
    uint32_t cp = CP(c, p);
    return IS_L(FL(c, p)) && !(cp >= 'A' && cp <= 'Z');
}

/* [^\r\n\p{L}\p{N}] */
static bool prefix_at(const struct cur *c, size_t p)
{
    uint32_t cp = CP(c, p);
    return cp != OOR && cp != '\r' && cp != '\n' && !IS_L(FL(c, p)) && !IS_N(FL(c, p));
}

/* The letter alternatives [^\r\n\p{L}\p{N}]?UPPER*LOWER+ and [^\r\n\p{L}\p{N}]?UPPER+LOWER* at
 * pos, with the backtracking a regex engine does (the longest UPPER run that leaves a LOWER
 * character after it); returns the end of the match or 0. */
static size_t cased_word(const struct cur *c, size_t pos)
{
    size_t q = pos + prefix_at(c, pos), u = 0;
    while (up_at(c, q + u))
        u++;
    size_t k = u; /* the UPPER run is given back one character at a time */
    bool low = low_at(c, q + k);
    while (!low && k > 0)
        low = low_at(c, q + --k);
    if (low) { /* UPPER*LOWER+ */
        size_t e = q + k;
        while (low_at(c, e))
            e++;
        return e;
    }
    if (u == 0) /* UPPER+LOWER* needs an upper character */
        return 0;
    size_t e = q + u;
    while (low_at(c, e))
        e++;
    return e;
}

/* Tekken (digits_max 1, no contractions) and GPT-4o / Llama 4 (digits_max 3, contractions):
 * [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(CONTRACTION)?|
 * [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(CONTRACTION)?|
 * \p{N}{1,N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with the cases read as llama.cpp reads them (up_at, low_at; no marks). */
static void split_cased(const struct cur *c, struct ebb__spans *o, size_t digits_max,
                        bool contractions)
{
    for (size_t pos = c->ini; pos < c->end;) {
        uint32_t cp = CP(c, pos);
        unsigned f = FL(c, pos);
        size_t e = cased_word(c, pos);
        if (e) {
            pos = e + (contractions ? contraction(c, e, true) : 0);
            span_emit(o, pos);
            continue;
        }
        if (IS_N(f)) {
            for (size_t run = 0; run < digits_max && IS_N(FL(c, pos)); run++)
                pos++;
            span_emit(o, pos);
            continue;
        }
        unsigned f2 = cp == ' ' ? FL(c, pos + 1) : f;
        if (f2 && !(f2 & (EBB_UC_WHITESPACE | EBB_UC_LETTER | EBB_UC_NUMBER))) {
            pos += cp == ' ';
            while (!(FL(c, pos) & (EBB_UC_WHITESPACE | EBB_UC_LETTER | EBB_UC_NUMBER)) &&
                   FL(c, pos))
                pos++;
            while (CP(c, pos) == '\r' || CP(c, pos) == '\n' || CP(c, pos) == '/')
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

/* A code point range, both ends included. */
struct cp_range {
    uint32_t lo, hi;
};

static bool in_ranges(const struct cp_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid].hi < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && r[lo].lo <= cp;
}

/* DeepSeek LLM's letter class: the cased letters its tokenizer.json lists by range. */
static const struct cp_range deepseek_letters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943}};

/* Han, the range below it from U+0800, and Hangul: [一-龥ࠀ-一가-퟿]. */
static const struct cp_range cjk[] = {{0x800, 0x9FA5}, {0xAC00, 0xD7FF}};

/* Han, Hiragana and Katakana: [一-龥぀-ゟ゠-ヿ]. */
static const struct cp_range kana_han[] = {{0x3040, 0x30FF}, {0x4E00, 0x9FA5}};

/* DeepSeek LLM's punctuation class: ASCII punctuation and symbols, their full-width forms,
 * quotation marks and the ideographic comma and full stop: [!-/:-~！-／：-～‘-‟　-。]. */
static const struct cp_range deepseek_punct[] = {{0x21, 0x2F},     {0x3A, 0x7E},
                                                 {0x2018, 0x201F}, {0x3000, 0x3002},
                                                 {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E}};

/* Character classes of the expressions below. An explicit code point range never matches a
 * non-ASCII whitespace character (llama.cpp sees those as one whitespace stand-in). */
enum cls {
    CL_NUM,       /* \p{N} */
    CL_LETTER,    /* \p{L} */
    CL_PUNCT,     /* \p{P} */
    CL_PUNCT_SYM, /* [\p{P}\$\+<=>\^~\|] */
    CL_PUNCT_BT,  /* [\p{P}\$\+<=>\^~\|`] */
    CL_DIGIT,     /* [0-9] */
    CL_CR_LF,     /* [\r\n] */
    CL_CJK,
    CL_DS_LETTER,
    CL_DS_PUNCT,
    CL_KANA_HAN, /* [一-龥぀-ゟ゠-ヿ] */
};

static bool ascii_sym(uint32_t cp)
{
    return cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' || cp == '^' ||
           cp == '~' || cp == '|';
}

static bool cls_has(enum cls k, uint32_t cp, unsigned f)
{
    switch (k) {
    case CL_NUM: /* no whitespace is a number, letter or punctuation */
        return IS_N(f);
    case CL_LETTER:
        return IS_L(f);
    case CL_PUNCT:
        return (f & 0xFF) == EBB_UC_PUNCT;
    case CL_PUNCT_SYM:
        return (f & 0xFF) == EBB_UC_PUNCT || ascii_sym(cp);
    case CL_PUNCT_BT:
        return (f & 0xFF) == EBB_UC_PUNCT || ascii_sym(cp) || cp == '`';
    case CL_DIGIT:
        return cp >= '0' && cp <= '9';
    case CL_CR_LF:
        return cp == '\r' || cp == '\n';
    case CL_CJK:
        return cp >= 0x800 && !IS_WS(f) && in_ranges(cjk, sizeof cjk / sizeof cjk[0], cp);
    case CL_DS_LETTER:
        return cp >= 0x41 && !(cp > 0x7F && IS_WS(f)) &&
               in_ranges(deepseek_letters, sizeof deepseek_letters / sizeof deepseek_letters[0],
                         cp);
    case CL_KANA_HAN:
        return cp >= 0x3040 && in_ranges(kana_han, sizeof kana_han / sizeof kana_han[0], cp);
    case CL_DS_PUNCT:
        return cp >= 0x21 && !(cp > 0x7F && IS_WS(f)) &&
               in_ranges(deepseek_punct, sizeof deepseek_punct / sizeof deepseek_punct[0], cp);
    }
    return false;
}

static bool CLS(const struct cur *c, size_t p, enum cls k)
{
    return p >= c->ini && p < c->end && cls_has(k, c->cp[p], c->fl[p]);
}

/* One expression of a pre-tokenizer. */
enum op {
    OP_ONE,      /* X: each code point of the class alone */
    OP_RUN,      /* X+ */
    OP_WS_RUN,   /* \s?X+ */
    OP_DIGIT3,   /* [0-9][0-9][0-9] */
    OP_NUM3,     /* \p{N}{1,3} */
    OP_DSV3,     /* DeepSeek V3's word expression (match_dsv3) */
    OP_TRAIL_WS, /* \s+$ */
    OP_NEWLINES, /* [^\n]+|[\n]+ */
    OP_GPT2,     /* the GPT-2 expression (split_gpt2) */
    OP_LLAMA3,   /* split_llama3 with up to 3 digits */
    OP_QWEN2,    /* split_llama3 with single digits */
    OP_QWEN35,   /* split_llama3 with single digits and marks in letter runs */
    OP_TEKKEN,   /* split_cased with single digits */
    OP_GPT4O,    /* split_cased with up to 3 digits and contractions */
};

struct stage {
    enum op op;
    enum cls cls;
};

/* \p{P} or \p{S} */
static bool punct_sym(unsigned f)
{
    return (f & 0xFF) == EBB_UC_PUNCT || (f & 0xFF) == EBB_UC_SYMBOL;
}

/* DeepSeek V3's third expression at pos (0: no match):
 * [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
 *  ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_dsv3(const struct cur *c, size_t pos)
{
    uint32_t cp = CP(c, pos);
    unsigned f = FL(c, pos);
    size_t k = 0;
    bool ascii_letter = CP(c, pos + 1) < 128 && IS_L(FL(c, pos + 1));
    if (cp < 128 && punct_sym(f) && ascii_letter) {
        k = 1;
        while (CP(c, pos + k) < 128 && IS_L(FL(c, pos + k)))
            k++;
        return k;
    }
    const unsigned lm = EBB_UC_LETTER | EBB_UC_MARK;
    bool pre = f && cp != '\r' && cp != '\n' && !IS_L(f) && !punct_sym(f);
    if ((pre && (FL(c, pos + 1) & lm)) || (f & lm)) {
        k = 1;
        while (FL(c, pos + k) & lm)
            k++;
        return k;
    }
    unsigned f2 = cp == ' ' ? FL(c, pos + 1) : f;
    if (punct_sym(f2)) {
        k = cp == ' ';
        while (punct_sym(FL(c, pos + k)))
            k++;
        while (CP(c, pos + k) == '\r' || CP(c, pos + k) == '\n')
            k++;
        return k;
    }
    size_t n = 0, last_rn = 0;
    while (IS_WS(FL(c, pos + n))) {
        if (CP(c, pos + n) == '\r' || CP(c, pos + n) == '\n')
            last_rn = n + 1;
        n++;
    }
    if (last_rn)
        return last_rn;
    if (n > 1 && CP(c, pos + n) != OOR)
        return n - 1;
    return n;
}

/* Length of the match of stage st at pos, 0 if none. */
static size_t match_at(const struct cur *c, size_t pos, const struct stage *st)
{
    size_t k = 0;
    switch (st->op) {
    case OP_ONE:
        return CLS(c, pos, st->cls);
    case OP_RUN:
        while (CLS(c, pos + k, st->cls))
            k++;
        return k;
    case OP_WS_RUN:
        k = IS_WS(FL(c, pos)) && CLS(c, pos + 1, st->cls);
        if (!k && !CLS(c, pos, st->cls))
            return 0;
        while (CLS(c, pos + k, st->cls))
            k++;
        return k;
    case OP_NUM3:
        while (k < 3 && IS_N(FL(c, pos + k)))
            k++;
        return k;
    case OP_DSV3:
        return match_dsv3(c, pos);
    case OP_DIGIT3:
        return CLS(c, pos, CL_DIGIT) && CLS(c, pos + 1, CL_DIGIT) && CLS(c, pos + 2, CL_DIGIT) ? 3
                                                                                               : 0;
    default:
        return 0;
    }
}

/* An expression stage: matches become pieces and so do the stretches between them. */
static void split_regex(const struct cur *c, struct ebb__spans *o, const struct stage *st)
{
    size_t pos = c->ini;
    if (st->op == OP_TRAIL_WS || st->op == OP_NEWLINES) {
        /* \s+$ cuts off the trailing whitespace; [^\n]+|[\n]+ cuts between newline runs and
         * the rest. */
        size_t tail = c->end;
        while (st->op == OP_TRAIL_WS && tail > c->ini && IS_WS(c->fl[tail - 1]))
            tail--;
        for (pos = c->ini + 1; st->op == OP_NEWLINES && pos < c->end; pos++)
            if ((c->cp[pos] == '\n') != (c->cp[pos - 1] == '\n'))
                span_emit(o, pos);
        span_emit(o, tail);
        span_emit(o, c->end);
        return;
    }
    while (pos < c->end) {
        size_t mlen = match_at(c, pos, st);
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

#define S(op, cls)                                                                                 \
    {                                                                                              \
        OP_##op, CL_##cls                                                                          \
    }
static const struct stage st_default[] = {S(RUN, PUNCT_SYM), S(GPT2, NUM), S(RUN, NUM),
                                          S(DIGIT3, DIGIT)};
static const struct stage st_falcon[] = {S(RUN, PUNCT_BT), S(GPT2, NUM), S(DIGIT3, DIGIT)};
static const struct stage st_gpt2[] = {S(GPT2, NUM)};
static const struct stage st_smollm[] = {S(ONE, NUM), S(GPT2, NUM)};
static const struct stage st_llama3[] = {S(LLAMA3, NUM)};
static const struct stage st_qwen2[] = {S(QWEN2, NUM)};
static const struct stage st_qwen35[] = {S(QWEN35, NUM)};
static const struct stage st_tekken[] = {S(TEKKEN, NUM)};
static const struct stage st_gpt4o[] = {S(GPT4O, NUM)};
static const struct stage st_ds_coder[] = {S(ONE, CR_LF), S(WS_RUN, LETTER), S(WS_RUN, PUNCT),
                                           S(RUN, CJK), S(ONE, NUM)};
static const struct stage st_ds_llm[] = {S(ONE, CR_LF),       S(WS_RUN, DS_LETTER),
                                         S(WS_RUN, DS_PUNCT), S(TRAIL_WS, NUM),
                                         S(RUN, CJK),         S(RUN, NUM)};
static const struct stage st_gemma4[] = {S(NEWLINES, NUM)};
static const struct stage st_dsv3[] = {S(NUM3, NUM), S(RUN, KANA_HAN), S(DSV3, NUM)};
#undef S

/* The expressions of each pre-tokenizer, applied in order. */
static const struct {
    const struct stage *st;
    size_t n;
} pre_stages[] = {
#define P(e, a) [EBB__PRE_##e] = {a, sizeof a / sizeof a[0]}
    P(DEFAULT, st_default), P(FALCON, st_falcon),           P(GPT2, st_gpt2),
    P(SMOLLM, st_smollm),   P(LLAMA3, st_llama3),           P(QWEN2, st_qwen2),
    P(QWEN35, st_qwen35),   P(DEEPSEEK_CODER, st_ds_coder), P(DEEPSEEK_LLM, st_ds_llm),
    P(GEMMA4, st_gemma4),   P(TEKKEN, st_tekken),           P(GPT4O, st_gpt4o),
    P(DEEPSEEK3, st_dsv3),
#undef P
};

static void run_stage(const struct cur *c, struct ebb__spans *o, const struct stage *st)
{
    switch (st->op) {
    case OP_GPT2:
        split_gpt2(c, o);
        break;
    case OP_LLAMA3:
        split_llama3(c, o, 3, false);
        break;
    case OP_QWEN2:
        split_llama3(c, o, 1, false);
        break;
    case OP_QWEN35:
        split_llama3(c, o, 1, true);
        break;
    case OP_TEKKEN:
        split_cased(c, o, 1, false);
        break;
    case OP_GPT4O:
        split_cased(c, o, 3, true);
        break;
    default:
        split_regex(c, o, st);
        break;
    }
}

ebb_err ebb__pretokenize(const struct ebb_tokenizer *t, const uint32_t *cps, const uint16_t *fl,
                         size_t n, struct ebb__spans *out)
{
    const struct stage *st = pre_stages[t->pre].st;
    size_t nst = pre_stages[t->pre].n;
    struct ebb__spans a = {0}, b = {0};
    span_emit(&a, n);
    for (size_t s = 0; s < nst && !a.oom; s++) {
        b.n = 0;
        b.prev = 0;
        size_t start = 0;
        for (size_t i = 0; i < a.n && !b.oom; i++) {
            struct cur c = {cps, fl, start, start + a.len[i]};
            run_stage(&c, &b, &st[s]);
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
