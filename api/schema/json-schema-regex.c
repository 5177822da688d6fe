/* JSON Schema `pattern` -> a GBNF expression over a JSON string's content. A small recursive
 * descent over the regular expression that writes GBNF as it goes. */
#include "json-schema-int.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_REPEAT 256
#define MAX_NEST 32

struct rx {
    const char *p;
    char *out;
    size_t n, cap;
    const char *char_rule;
    char *err;
    size_t err_cap;
    bool bad;
    int nest;
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
put(struct rx *x, const char *fmt, ...)
{
    if (x->bad)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(x->out + x->n, x->cap - x->n, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= x->cap - x->n) {
        snprintf(x->err, x->err_cap, "the pattern is too long");
        x->bad = true;
        return;
    }
    x->n += (size_t)w;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
fail(struct rx *x, const char *fmt, ...)
{
    if (x->bad)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err, x->err_cap, fmt, ap);
    va_end(ap);
    x->bad = true;
}

/* One literal character as GBNF: how it appears inside a JSON string. */
static void put_literal(struct rx *x, unsigned char c)
{
    if (c == '"')
        put(x, "\"\\\\\\\"\"");
    else if (c == '\\')
        put(x, "\"\\\\\\\\\"");
    else if (c == '\n')
        put(x, "\"\\\\n\"");
    else if (c == '\t')
        put(x, "\"\\\\t\"");
    else if (c == '\r')
        put(x, "\"\\\\r\"");
    else if (c < 0x20)
        fail(x, "control characters in a pattern are not supported");
    else
        put(x, "\"%c\"", c);
}

/* A class item character as GBNF inside [...]; quotes, backslashes and controls are refused. */
static void put_class_char(struct rx *x, unsigned char c)
{
    if (c == '"' || c == '\\' || c < 0x20)
        fail(x, "a quote, backslash or control character inside a pattern's class is not "
                "supported");
    else if (c == ']' || c == '-' || c == '^' || c == '[')
        put(x, "\\%c", c);
    else
        put(x, "%c", c);
}

/* \d \w \s and their negations inside or outside a class. */
static bool put_shorthand(struct rx *x, char c, bool in_class)
{
    const char *pos = c == 'd' ? "0-9" : c == 'w' ? "a-zA-Z0-9_" : c == 's' ? " " : NULL;
    if (pos) {
        put(x, in_class ? "%s" : "[%s]", pos);
        return true;
    }
    if (c == 'D' || c == 'W' || c == 'S') {
        if (in_class) {
            fail(x, "\\%c inside a class is not supported in patterns", c);
            return true;
        }
        const char *neg = c == 'D' ? "0-9" : c == 'W' ? "a-zA-Z0-9_" : " ";
        put(x, "( [^%s\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\/bfnrt] )", neg);
        return true;
    }
    return false;
}

static char escaped_literal(char c)
{
    switch (c) {
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    default:
        return strchr(".^$*+?()[]{}|\\/-\"'", c) && c ? c : 0;
    }
}

static void parse_class(struct rx *x)
{
    x->p++;
    bool neg = *x->p == '^';
    if (neg)
        x->p++;
    put(x, neg ? "[^\"\\\\\\x00-\\x1f" : "[");
    bool first = true;
    while (!x->bad && *x->p && (*x->p != ']' || first)) {
        first = false;
        unsigned char c = (unsigned char)*x->p++;
        if (c == '\\') {
            char e = *x->p++;
            if (!e) {
                fail(x, "unfinished escape in a pattern");
                return;
            }
            if (put_shorthand(x, e, true))
                continue;
            c = (unsigned char)escaped_literal(e);
            if (!c) {
                fail(x, "the escape \\%c in a pattern is not supported", e);
                return;
            }
        }
        put_class_char(x, c);
        if (x->p[0] == '-' && x->p[1] && x->p[1] != ']') {
            x->p++;
            unsigned char hi = (unsigned char)*x->p++;
            if (hi == '\\') {
                hi = (unsigned char)escaped_literal(*x->p);
                if (!hi) {
                    fail(x, "unsupported escape in a pattern's range");
                    return;
                }
                x->p++;
            }
            if (hi < c) {
                fail(x, "the range %c-%c in a class is out of order", c, hi);
                return;
            }
            put(x, "-");
            put_class_char(x, hi);
        }
    }
    if (*x->p != ']') {
        fail(x, "unterminated class in the pattern");
        return;
    }
    x->p++;
    put(x, "]");
}

static int parse_num(struct rx *x)
{
    int v = 0;
    if (*x->p < '0' || *x->p > '9')
        return -1;
    while (*x->p >= '0' && *x->p <= '9') {
        v = v * 10 + (*x->p++ - '0');
        if (v > MAX_REPEAT)
            return -2;
    }
    return v;
}

static void parse_alt(struct rx *x);

/* An atom and its quantifier. */
static void parse_piece(struct rx *x)
{
    char c = *x->p;
    put(x, "(");
    if (c == '(') {
        x->p++;
        if (x->p[0] == '?') {
            if (x->p[1] != ':') {
                fail(x, "lookaround and named groups in patterns are not supported");
                return;
            }
            x->p += 2;
        }
        if (++x->nest > MAX_NEST) {
            fail(x, "the pattern nests too deeply");
            return;
        }
        parse_alt(x);
        x->nest--;
        if (*x->p != ')') {
            fail(x, "unbalanced parenthesis in the pattern");
            return;
        }
        x->p++;
    } else if (c == '[') {
        parse_class(x);
    } else if (c == '.') {
        x->p++;
        put(x, "%s", x->char_rule);
    } else if (c == '\\') {
        char e = x->p[1];
        x->p += e ? 2 : 1;
        if (e >= '1' && e <= '9') {
            fail(x, "backreferences in patterns are not supported");
        } else if (e == 'b' || e == 'B') {
            fail(x, "word boundaries in patterns are not supported");
        } else if (!put_shorthand(x, e, false)) {
            char l = escaped_literal(e);
            if (!l)
                fail(x, "the escape \\%c in a pattern is not supported", e);
            else
                put_literal(x, (unsigned char)l);
        }
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        fail(x, "'%c' follows nothing in the pattern", c);
    } else {
        /* a UTF-8 character is copied whole */
        unsigned char u = (unsigned char)c;
        size_t len = u < 0x80 ? 1 : u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : 2;
        if (u < 0x80) {
            put_literal(x, u);
        } else {
            for (size_t i = 1; i < len; i++) {
                if (!x->p[i]) {
                    fail(x, "invalid UTF-8 in the pattern");
                    return;
                }
            }
            put(x, "\"%.*s\"", (int)len, x->p);
        }
        x->p += len;
    }
    put(x, ")");
    c = *x->p;
    if (c == '*' || c == '+' || c == '?') {
        x->p++;
        put(x, "%c", c);
    } else if (c == '{') {
        x->p++;
        int lo = parse_num(x), hi = lo;
        if (*x->p == ',') {
            x->p++;
            hi = *x->p == '}' ? -1 : parse_num(x);
        }
        if (lo < 0 || (hi < 0 && hi != -1) || *x->p != '}' || (hi >= 0 && hi < lo)) {
            fail(x, "bad or too large repetition in the pattern (at most %d)", MAX_REPEAT);
            return;
        }
        x->p++;
        if (hi < 0)
            put(x, "{%d,}", lo);
        else
            put(x, "{%d,%d}", lo, hi);
    } else {
        return;
    }
    if (*x->p == '?' || *x->p == '+')
        fail(x, "lazy and possessive quantifiers in patterns are not supported");
}

static void parse_alt(struct rx *x)
{
    put(x, "( ");
    for (;;) {
        while (!x->bad && *x->p && *x->p != '|' && *x->p != ')') {
            if (*x->p == '^' || (*x->p == '$' && x->p[1])) {
                fail(x, "anchors inside a pattern (not at its ends) are not supported");
                return;
            }
            if (*x->p == '$')
                break;
            parse_piece(x);
            put(x, " ");
        }
        if (x->bad || *x->p != '|')
            break;
        x->p++;
        put(x, "| ");
    }
    put(x, ")");
}

bool ebb__regex_to_gbnf(const char *re, const char *char_rule, char *out, size_t cap, char *err,
                        size_t err_cap)
{
    struct rx x = {
        .p = re, .out = out, .cap = cap, .char_rule = char_rule, .err = err, .err_cap = err_cap};
    bool head = *x.p == '^';
    if (head)
        x.p++;
    if (!head)
        put(&x, "%s* ", char_rule);
    parse_alt(&x);
    bool tail = *x.p == '$';
    if (tail)
        x.p++;
    if (!x.bad && *x.p)
        fail(&x, "unbalanced parenthesis in the pattern");
    if (!tail)
        put(&x, " %s*", char_rule);
    return !x.bad;
}
