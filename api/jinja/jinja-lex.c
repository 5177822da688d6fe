/* Jinja lexer: template text and tags into tokens, with the whitespace control Hugging Face
 * renders chat templates with (trim_blocks: a block or comment tag eats the newline after it;
 * lstrip_blocks: spaces and tabs between a line start and a block or comment tag go; '-' strips
 * all whitespace on its side of a tag, '+' turns the two options off for that tag). */
#include "jinja-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Python's str.isspace() for ASCII, which is what rstrip() and the regex \s strip. */
static bool is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v' ||
           (ch >= 0x1c && ch <= 0x1f);
}

static bool is_name_start(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

static bool is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

struct lexer {
    const char *s;
    size_t n, pos;
    int line;
    struct jarena *a;
    struct jtoks *out;
    struct ebb_diag *diag;
    ebb_err rc;
};

static struct jtok *emit(struct lexer *L, enum jtok_type type, const char *p, size_t n)
{
    if (L->out->n == L->out->cap) {
        size_t cap = L->out->cap ? L->out->cap * 2 : 256;
        struct jtok *v = ebb__jarena_alloc(L->a, cap * sizeof(*v));
        if (!v) {
            L->rc = EBB_ENOMEM;
            return NULL;
        }
        if (L->out->n)
            memcpy(v, L->out->v, L->out->n * sizeof(*v));
        L->out->v = v;
        L->out->cap = cap;
    }
    struct jtok *t = &L->out->v[L->out->n++];
    memset(t, 0, sizeof(*t));
    t->type = (uint8_t)type;
    t->line = L->line;
    t->p = p;
    t->n = n;
    return t;
}

static int count_lines(const char *p, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += p[i] == '\n';
    return k;
}

static ebb_err lex_fail(struct lexer *L, const char *what)
{
    L->rc = ebb_diag_set(L->diag, EBB_EINVAL, "chat template line %d: %s", L->line, what);
    return L->rc;
}

static void put_utf8(char *d, size_t *w, uint32_t cp)
{
    if (cp < 0x80) {
        d[(*w)++] = (char)cp;
    } else if (cp < 0x800) {
        d[(*w)++] = (char)(0xc0 | (cp >> 6));
        d[(*w)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        d[(*w)++] = (char)(0xe0 | (cp >> 12));
        d[(*w)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        d[(*w)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        d[(*w)++] = (char)(0xf0 | (cp >> 18));
        d[(*w)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        d[(*w)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        d[(*w)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* A quoted string literal, decoded as Python's unicode-escape does (unknown escapes stay). */
static ebb_err lex_string(struct lexer *L)
{
    char q = L->s[L->pos];
    size_t b = L->pos + 1, e = b;
    while (e < L->n && L->s[e] != q) {
        if (L->s[e] == '\\' && e + 1 < L->n)
            e++;
        e++;
    }
    if (e >= L->n)
        return lex_fail(L, "unterminated string literal");
    char *d = ebb__jarena_alloc(L->a, e - b + 1);
    if (!d)
        return L->rc = EBB_ENOMEM;
    size_t w = 0;
    for (size_t i = b; i < e; i++) {
        char ch = L->s[i];
        if (ch != '\\') {
            d[w++] = ch;
            continue;
        }
        char x = L->s[++i];
        int digits = x == 'x' ? 2 : x == 'u' ? 4 : x == 'U' ? 8 : 0;
        if (digits) {
            uint32_t cp = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + 1 + (size_t)k < e ? hexval(L->s[i + 1 + (size_t)k]) : -1;
                if (h < 0)
                    return lex_fail(L, "bad \\x, \\u or \\U escape in a string literal");
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10ffff)
                return lex_fail(L, "escape beyond U+10FFFF in a string literal");
            i += (size_t)digits;
            put_utf8(d, &w, cp); /* at most 4 bytes for at least 4 source bytes */
            continue;
        }
        if (x >= '0' && x <= '7') {
            uint32_t cp = 0;
            size_t k = 0;
            while (k < 3 && i < e && L->s[i] >= '0' && L->s[i] <= '7') {
                cp = cp * 8 + (uint32_t)(L->s[i] - '0');
                i++;
                k++;
            }
            i--;
            put_utf8(d, &w, cp);
            continue;
        }
        switch (x) {
        case 'n':
            d[w++] = '\n';
            break;
        case 't':
            d[w++] = '\t';
            break;
        case 'r':
            d[w++] = '\r';
            break;
        case 'a':
            d[w++] = '\a';
            break;
        case 'b':
            d[w++] = '\b';
            break;
        case 'f':
            d[w++] = '\f';
            break;
        case 'v':
            d[w++] = '\v';
            break;
        case '\\':
            d[w++] = '\\';
            break;
        case '\'':
            d[w++] = '\'';
            break;
        case '"':
            d[w++] = '"';
            break;
        case '\n':
            break; /* a backslash-newline continues the line */
        default:
            d[w++] = '\\';
            d[w++] = x;
        }
    }
    d[w] = 0;
    L->line += count_lines(L->s + b, e - b);
    struct jtok *t = emit(L, JT_STRING, d, w);
    L->pos = e + 1;
    return t ? EBB_OK : L->rc;
}

static ebb_err lex_number(struct lexer *L)
{
    size_t b = L->pos, e = b;
    char buf[128];
    size_t w = 0;
    bool is_float = false;
    while (e < L->n &&
           (is_digit(L->s[e]) || (L->s[e] == '_' && e + 1 < L->n && is_digit(L->s[e + 1])))) {
        if (L->s[e] != '_' && w < sizeof(buf) - 1)
            buf[w++] = L->s[e];
        e++;
    }
    if (e + 1 < L->n && L->s[e] == '.' && is_digit(L->s[e + 1])) {
        is_float = true;
        buf[w < sizeof(buf) - 1 ? w++ : w] = '.';
        e++;
        while (e < L->n && (is_digit(L->s[e]) || L->s[e] == '_')) {
            if (L->s[e] != '_' && w < sizeof(buf) - 1)
                buf[w++] = L->s[e];
            e++;
        }
    }
    if (e < L->n && (L->s[e] == 'e' || L->s[e] == 'E')) {
        size_t k = e + 1;
        if (k < L->n && (L->s[k] == '+' || L->s[k] == '-'))
            k++;
        if (k < L->n && is_digit(L->s[k])) {
            is_float = true;
            for (size_t j = e; j < k; j++)
                if (w < sizeof(buf) - 1)
                    buf[w++] = L->s[j];
            e = k;
            while (e < L->n && is_digit(L->s[e])) {
                if (w < sizeof(buf) - 1)
                    buf[w++] = L->s[e];
                e++;
            }
        }
    }
    if (w >= sizeof(buf) - 1)
        return lex_fail(L, "number literal too long");
    buf[w] = 0;
    struct jtok *t = emit(L, is_float ? JT_FLOAT : JT_INT, L->s + b, e - b);
    if (!t)
        return L->rc;
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        if (w > 19 || (w == 19 && strcmp(buf, "9223372036854775807") > 0))
            return lex_fail(L, "integer literal too large");
        t->i = (int64_t)strtoull(buf, NULL, 10);
    }
    L->pos = e;
    return EBB_OK;
}

/* The tokens inside one {{ }} or {% %} tag, up to and including its end marker. */
static ebb_err lex_tag(struct lexer *L, bool block, bool *line_starting)
{
    static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
    int depth = 0;
    for (;;) {
        while (L->pos < L->n && is_ws(L->s[L->pos])) {
            L->line += L->s[L->pos] == '\n';
            L->pos++;
        }
        if (L->pos >= L->n)
            return lex_fail(L, block ? "unclosed '{%' tag" : "unclosed '{{' tag");
        const char *p = L->s + L->pos;
        size_t left = L->n - L->pos;
        char ec = block ? '%' : '}';
        if (depth == 0) {
            char mod = 0;
            size_t off = 0;
            if ((p[0] == '-' || p[0] == '+') && left >= 3 && p[1] == ec && p[2] == '}') {
                mod = p[0];
                off = 1;
            }
            if (left >= off + 2 && p[off] == ec && p[off + 1] == '}') {
                if (!emit(L, block ? JT_BLOCK_END : JT_VAR_END, p, off + 2))
                    return L->rc;
                L->pos += off + 2;
                *line_starting = false;
                if (mod == '-') {
                    while (L->pos < L->n && is_ws(L->s[L->pos])) {
                        L->line += L->s[L->pos] == '\n';
                        *line_starting = L->s[L->pos] == '\n';
                        L->pos++;
                    }
                } else if (mod == 0 && block && L->pos < L->n && L->s[L->pos] == '\n') {
                    L->pos++;
                    L->line++;
                    *line_starting = true;
                }
                return EBB_OK;
            }
        }
        char ch = p[0];
        ebb_err rc;
        if (ch == '\'' || ch == '"') {
            if ((rc = lex_string(L)))
                return rc;
            continue;
        }
        if (is_digit(ch)) {
            if ((rc = lex_number(L)))
                return rc;
            continue;
        }
        if (is_name_start(ch)) {
            size_t e = 1;
            while (e < left && (is_name_start(p[e]) || is_digit(p[e])))
                e++;
            if (!emit(L, JT_NAME, p, e))
                return L->rc;
            L->pos += e;
            continue;
        }
        size_t len = 0;
        for (size_t k = 0; k < sizeof(ops2) / sizeof(ops2[0]); k++)
            if (left >= 2 && !memcmp(p, ops2[k], 2))
                len = 2;
        if (!len && strchr("+-*/%~<>=.,:|()[]{}", ch) && ch)
            len = 1;
        if (!len) {
            char what[64];
            if (ch > 0x20 && ch < 0x7f)
                snprintf(what, sizeof(what), "unexpected character '%c' in a tag", ch);
            else
                snprintf(what, sizeof(what), "unexpected byte 0x%02x in a tag", (unsigned char)ch);
            return lex_fail(L, what);
        }
        if (ch == '(' || ch == '[' || ch == '{')
            depth++;
        else if ((ch == ')' || ch == ']' || ch == '}') && depth > 0)
            depth--;
        if (!emit(L, JT_OP, p, len))
            return L->rc;
        L->pos += len;
    }
}

ebb_err ebb__jinja_lex(const char *src, size_t n, struct jarena *a, struct jtoks *out,
                       struct ebb_diag *diag)
{
    /* Newlines normalised to \n and one trailing newline dropped, as Jinja does. */
    char *s = ebb__jarena_alloc(a, n + 1);
    if (!s)
        return EBB_ENOMEM;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[w++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n')
                i++;
        } else {
            s[w++] = src[i];
        }
    }
    if (w && s[w - 1] == '\n')
        w--;
    s[w] = 0;
    struct lexer L = {.s = s, .n = w, .line = 1, .a = a, .out = out, .diag = diag};
    bool line_starting = true;
    while (L.pos < L.n) {
        /* The next tag opener. */
        size_t t = L.pos;
        char kind = 0;
        while (t + 1 < L.n) {
            if (s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')) {
                kind = s[t + 1];
                break;
            }
            t++;
        }
        if (!kind)
            t = L.n;
        char mod = kind && t + 2 < L.n && (s[t + 2] == '-' || s[t + 2] == '+') ? s[t + 2] : 0;
        size_t tn = t - L.pos; /* text length before the tag */
        const char *text = s + L.pos;
        if (kind && mod == '-') {
            while (tn && is_ws(text[tn - 1]))
                tn--;
        } else if (kind && mod != '+' && kind != '{') {
            size_t lpos = tn;
            while (lpos && text[lpos - 1] != '\n')
                lpos--;
            if (lpos > 0 || line_starting) {
                size_t k = lpos;
                while (k < tn && (text[k] == ' ' || text[k] == '\t'))
                    k++;
                if (k == tn)
                    tn = lpos;
            }
        }
        if (tn && !emit(&L, JT_TEXT, text, tn))
            return L.rc;
        L.line += count_lines(s + L.pos, t - L.pos);
        if (!kind)
            break;
        L.pos = t + 2 + (mod ? 1 : 0);
        line_starting = false;
        if (kind == '#') {
            const char *e = strstr(s + L.pos, "#}");
            if (!e)
                return lex_fail(&L, "unclosed comment");
            bool dash = e > s + L.pos && e[-1] == '-';
            bool plus = e > s + L.pos && e[-1] == '+';
            L.line += count_lines(s + L.pos, (size_t)(e - (s + L.pos)));
            L.pos = (size_t)(e - s) + 2;
            if (dash) {
                while (L.pos < L.n && is_ws(s[L.pos])) {
                    L.line += s[L.pos] == '\n';
                    line_starting = s[L.pos] == '\n';
                    L.pos++;
                }
            } else if (!plus && L.pos < L.n && s[L.pos] == '\n') {
                L.pos++;
                L.line++;
                line_starting = true;
            }
            continue;
        }
        if (!emit(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, s + t, 2))
            return L.rc;
        ebb_err rc = lex_tag(&L, kind == '%', &line_starting);
        if (rc)
            return rc;
    }
    if (!emit(&L, JT_EOF, s + L.n, 0))
        return L.rc;
    return EBB_OK;
}
