/* GBNF text -> struct ebb_grammar: a recursive-descent parser that writes each rule's body into
 * its own growable list, rewriting groups and repetitions into generated rules, then flattens
 * the rules and rejects undefined rules and left recursion. */
#include "grammar-int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RULES 65536
#define MAX_ELEMS (1u << 22)
#define MAX_REPEAT 1024
#define MAX_NEST 256

struct prule {
    char *name;
    struct ebb__gelem *e;
    uint32_t n, cap;
    bool defined;
    const char *first_use; /* where an undefined rule was first referenced */
};

struct parser {
    const char *src, *end, *p;
    struct prule *rules;
    uint32_t n_rules, cap_rules;
    struct ebb__grange *ranges;
    uint32_t n_ranges, cap_ranges;
    uint32_t n_elems_total;
    int nest;
    ebb_err rc;
    struct ebb_diag *diag;
};

static void where(const struct parser *ps, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *c = ps->src; c < at && c < ps->end; c++) {
        if (*c == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static ebb_err
perr(struct parser *ps, const char *at, const char *fmt, ...)
{
    if (ps->rc)
        return ps->rc;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    int line, col;
    where(ps, at, &line, &col);
    ps->rc = ebb_diag_set(ps->diag, EBB_EINVAL, "grammar line %d, column %d: %s", line, col, msg);
    return ps->rc;
}

static ebb_err oom(struct parser *ps)
{
    if (!ps->rc)
        ps->rc = ebb_diag_set(ps->diag, EBB_ENOMEM, "out of memory compiling the grammar");
    return ps->rc;
}

/* ---- rules and elements ----------------------------------------------------------------- */

static int32_t rule_new(struct parser *ps, const char *name, size_t len)
{
    if (ps->n_rules >= MAX_RULES) {
        perr(ps, ps->p, "more than %d rules", MAX_RULES);
        return -1;
    }
    if (ps->n_rules == ps->cap_rules) {
        uint32_t nc = ps->cap_rules ? ps->cap_rules * 2 : 32;
        struct prule *nr = realloc(ps->rules, sizeof(*nr) * nc);
        if (!nr) {
            oom(ps);
            return -1;
        }
        ps->rules = nr;
        ps->cap_rules = nc;
    }
    struct prule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof(*r));
    r->name = malloc(len + 1);
    if (!r->name) {
        oom(ps);
        return -1;
    }
    memcpy(r->name, name, len);
    r->name[len] = 0;
    return (int32_t)ps->n_rules++;
}

/* A generated rule, named after the rule it serves ("value-3"). */
static int32_t rule_anon(struct parser *ps, int32_t parent)
{
    char name[160];
    int n = snprintf(name, sizeof(name), "%.120s-%u", ps->rules[parent].name, ps->n_rules);
    int32_t id = rule_new(ps, name, (size_t)n);
    if (id >= 0)
        ps->rules[id].defined = true;
    return id;
}

static int32_t rule_find(struct parser *ps, const char *name, size_t len)
{
    for (uint32_t i = 0; i < ps->n_rules; i++) {
        if (strlen(ps->rules[i].name) == len && !memcmp(ps->rules[i].name, name, len))
            return (int32_t)i;
    }
    return rule_new(ps, name, len);
}

static void emit(struct parser *ps, int32_t rule, uint8_t kind, uint8_t neg, uint32_t a, uint32_t n)
{
    if (ps->rc)
        return;
    struct prule *r = &ps->rules[rule];
    if (++ps->n_elems_total > MAX_ELEMS) {
        perr(ps, ps->p, "the grammar is too large");
        return;
    }
    if (r->n == r->cap) {
        uint32_t nc = r->cap ? r->cap * 2 : 16;
        struct ebb__gelem *ne = realloc(r->e, sizeof(*ne) * nc);
        if (!ne) {
            oom(ps);
            return;
        }
        r->e = ne;
        r->cap = nc;
    }
    r->e[r->n++] = (struct ebb__gelem){.kind = kind, .neg = neg, .a = a, .n = n};
}

static uint32_t range_add(struct parser *ps, uint32_t lo, uint32_t hi)
{
    if (ps->n_ranges == ps->cap_ranges) {
        uint32_t nc = ps->cap_ranges ? ps->cap_ranges * 2 : 64;
        if (nc > MAX_ELEMS) {
            perr(ps, ps->p, "the grammar is too large");
            return 0;
        }
        struct ebb__grange *nr = realloc(ps->ranges, sizeof(*nr) * nc);
        if (!nr) {
            oom(ps);
            return 0;
        }
        ps->ranges = nr;
        ps->cap_ranges = nc;
    }
    ps->ranges[ps->n_ranges] = (struct ebb__grange){lo, hi};
    return ps->n_ranges++;
}

/* ---- lexical ----------------------------------------------------------------------------- */

static bool is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skips blanks and comments; newlines too when newline_ok. */
static void skip_space(struct parser *ps, bool newline_ok)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n')
                ps->p++;
        } else {
            break;
        }
    }
}

/* Decodes one UTF-8 character of the source. */
static uint32_t next_cp(struct parser *ps)
{
    const unsigned char *s = (const unsigned char *)ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    uint32_t c = s[0], n = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    if (c >= 0x80 && (c < 0xC0 || n >= left)) {
        perr(ps, ps->p, "invalid UTF-8 in the grammar");
        return 0;
    }
    if (n)
        c &= 0x3Fu >> n;
    for (uint32_t i = 1; i <= n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            perr(ps, ps->p, "invalid UTF-8 in the grammar");
            return 0;
        }
        c = (c << 6) | (s[i] & 0x3F);
    }
    ps->p += n + 1;
    return c;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class, escapes decoded. */
static uint32_t parse_char(struct parser *ps)
{
    if (ps->p >= ps->end) {
        perr(ps, ps->p, "unexpected end of the grammar");
        return 0;
    }
    if (*ps->p != '\\')
        return next_cp(ps);
    const char *at = ps->p++;
    if (ps->p >= ps->end) {
        perr(ps, at, "unfinished escape");
        return 0;
    }
    char e = *ps->p++;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = ps->p < ps->end ? hexval(*ps->p) : -1;
            if (h < 0) {
                perr(ps, at, "\\%c needs %d hex digits", e, digits);
                return 0;
            }
            v = v * 16 + (uint32_t)h;
            ps->p++;
        }
        if (v > 0x10FFFF)
            perr(ps, at, "code point out of range");
        return v;
    }
    switch (e) {
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case '\\':
    case '"':
    case '[':
    case ']':
    case '-':
    case '^':
    case '/':
        return (uint32_t)e;
    default:
        perr(ps, at, "unknown escape '\\%c'", e);
        return 0;
    }
}

/* ---- syntax ------------------------------------------------------------------------------ */

static void parse_alternates(struct parser *ps, int32_t rule);

static void parse_literal(struct parser *ps, int32_t rule)
{
    const char *at = ps->p++;
    while (!ps->rc && ps->p < ps->end && *ps->p != '"') {
        uint32_t c = parse_char(ps);
        emit(ps, rule, EBB__G_CHAR, 0, range_add(ps, c, c), 1);
    }
    if (!ps->rc && ps->p >= ps->end)
        perr(ps, at, "unterminated string literal");
    ps->p++;
}

static void parse_class(struct parser *ps, int32_t rule)
{
    const char *at = ps->p++;
    uint8_t neg = 0;
    if (ps->p < ps->end && *ps->p == '^') {
        neg = 1;
        ps->p++;
    }
    uint32_t first = ps->n_ranges, n = 0;
    while (!ps->rc && ps->p < ps->end && *ps->p != ']') {
        uint32_t lo = parse_char(ps), hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            hi = parse_char(ps);
            if (hi < lo)
                perr(ps, at, "character range out of order");
        }
        range_add(ps, lo, hi);
        n++;
    }
    if (!ps->rc && ps->p >= ps->end)
        perr(ps, at, "unterminated character class");
    ps->p++;
    emit(ps, rule, EBB__G_CHAR, neg, first, n);
}

static long parse_int(struct parser *ps)
{
    const char *at = ps->p;
    long v = 0;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') {
        perr(ps, at, "expected a number");
        return 0;
    }
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > MAX_REPEAT) {
            perr(ps, at, "repetition count above %d", MAX_REPEAT);
            return 0;
        }
    }
    return v;
}

/* Replaces the item rule->e[start..] by a reference to a new rule that repeats it min..max
 * times (max < 0: unbounded). */
static void repeat(struct parser *ps, int32_t rule, uint32_t start, long min, long max)
{
    int32_t item = rule_anon(ps, rule);
    if (item < 0)
        return;
    struct prule *r = &ps->rules[rule];
    for (uint32_t i = start; i < r->n && !ps->rc; i++) {
        struct ebb__gelem e = ps->rules[rule].e[i];
        emit(ps, item, e.kind, e.neg, e.a, e.n);
    }
    emit(ps, item, EBB__G_END, 0, 0, 0);
    ps->rules[rule].n = start;
    for (long i = 0; i < min; i++)
        emit(ps, rule, EBB__G_REF, 0, (uint32_t)item, 0);
    if (max < 0) { /* star ::= item star | () */
        int32_t star = rule_anon(ps, rule);
        if (star < 0)
            return;
        emit(ps, star, EBB__G_REF, 0, (uint32_t)item, 0);
        emit(ps, star, EBB__G_REF, 0, (uint32_t)star, 0);
        emit(ps, star, EBB__G_ALT, 0, 0, 0);
        emit(ps, star, EBB__G_END, 0, 0, 0);
        emit(ps, rule, EBB__G_REF, 0, (uint32_t)star, 0);
        return;
    }
    int32_t prev = -1; /* opt_k ::= item opt_{k-1} | () */
    for (long k = 0; k < max - min && !ps->rc; k++) {
        int32_t opt = rule_anon(ps, rule);
        if (opt < 0)
            return;
        emit(ps, opt, EBB__G_REF, 0, (uint32_t)item, 0);
        if (prev >= 0)
            emit(ps, opt, EBB__G_REF, 0, (uint32_t)prev, 0);
        emit(ps, opt, EBB__G_ALT, 0, 0, 0);
        emit(ps, opt, EBB__G_END, 0, 0, 0);
        prev = opt;
    }
    if (prev >= 0)
        emit(ps, rule, EBB__G_REF, 0, (uint32_t)prev, 0);
}

static void parse_postfix(struct parser *ps, int32_t rule, uint32_t start)
{
    while (!ps->rc && ps->p < ps->end) {
        char c = *ps->p;
        const char *at = ps->p;
        long min, max;
        if (c == '*' || c == '+' || c == '?') {
            ps->p++;
            min = c == '+';
            max = c == '?' ? 1 : -1;
        } else if (c == '{') {
            ps->p++;
            skip_space(ps, false);
            min = parse_int(ps);
            max = min;
            skip_space(ps, false);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                skip_space(ps, false);
                max = ps->p < ps->end && *ps->p == '}' ? -1 : parse_int(ps);
                skip_space(ps, false);
            }
            if (ps->rc)
                return;
            if (ps->p >= ps->end || *ps->p != '}') {
                perr(ps, at, "expected '}' to close the repetition");
                return;
            }
            ps->p++;
            if (max >= 0 && max < min) {
                perr(ps, at, "repetition maximum below its minimum");
                return;
            }
        } else {
            return;
        }
        if (start == ps->rules[rule].n) {
            perr(ps, at, "'%c' follows nothing", c);
            return;
        }
        repeat(ps, rule, start, min, max);
        skip_space(ps, ps->nest > 0);
    }
}

/* A sequence of items into rule; stops at '|', ')', a newline outside groups or the end. */
static void parse_sequence(struct parser *ps, int32_t rule)
{
    while (!ps->rc && ps->p < ps->end) {
        char c = *ps->p;
        uint32_t start = ps->rules[rule].n;
        const char *at = ps->p;
        if (c == '"') {
            parse_literal(ps, rule);
        } else if (c == '[') {
            parse_class(ps, rule);
        } else if (c == '.') {
            ps->p++;
            emit(ps, rule, EBB__G_CHAR, 1, ps->n_ranges, 0);
        } else if (c == '(') {
            ps->p++;
            if (++ps->nest > MAX_NEST) {
                perr(ps, at, "groups nested deeper than %d", MAX_NEST);
                return;
            }
            int32_t sub = rule_anon(ps, rule);
            if (sub < 0)
                return;
            skip_space(ps, true);
            parse_alternates(ps, sub);
            if (ps->rc)
                return;
            if (ps->p >= ps->end || *ps->p != ')') {
                perr(ps, at, "unclosed '('");
                return;
            }
            ps->p++;
            ps->nest--;
            emit(ps, rule, EBB__G_REF, 0, (uint32_t)sub, 0);
        } else if (is_word(c)) {
            const char *name = ps->p;
            while (ps->p < ps->end && is_word(*ps->p))
                ps->p++;
            int32_t id = rule_find(ps, name, (size_t)(ps->p - name));
            if (id < 0)
                return;
            if (!ps->rules[id].first_use)
                ps->rules[id].first_use = name;
            emit(ps, rule, EBB__G_REF, 0, (uint32_t)id, 0);
        } else if (c == '|' || c == ')' || c == '\n' || c == '\r') {
            return;
        } else {
            perr(ps, at, "unexpected '%c'", c);
            return;
        }
        skip_space(ps, ps->nest > 0);
        parse_postfix(ps, rule, start);
    }
}

/* Alternatives into rule, ended by END. A '|' may also open the next line. */
static void parse_alternates(struct parser *ps, int32_t rule)
{
    for (;;) {
        parse_sequence(ps, rule);
        if (ps->rc)
            return;
        const char *save = ps->p;
        skip_space(ps, true);
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            emit(ps, rule, EBB__G_ALT, 0, 0, 0);
            skip_space(ps, true);
            continue;
        }
        if (ps->nest == 0)
            ps->p = save;
        break;
    }
    emit(ps, rule, EBB__G_END, 0, 0, 0);
}

static void parse_rule(struct parser *ps)
{
    const char *name = ps->p;
    while (ps->p < ps->end && is_word(*ps->p))
        ps->p++;
    if (ps->p == name) {
        perr(ps, name, "expected a rule name");
        return;
    }
    size_t len = (size_t)(ps->p - name);
    skip_space(ps, false);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3)) {
        perr(ps, ps->p, "expected '::=' after the rule name");
        return;
    }
    ps->p += 3;
    int32_t id = rule_find(ps, name, len);
    if (id < 0)
        return;
    if (ps->rules[id].defined) {
        perr(ps, name, "rule '%.*s' is defined twice", (int)len, name);
        return;
    }
    ps->rules[id].defined = true;
    skip_space(ps, false);
    parse_alternates(ps, id);
    if (ps->rc)
        return;
    skip_space(ps, false);
    if (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r')
        perr(ps, ps->p, "unexpected '%c'", *ps->p);
}

/* ---- checks and flattening --------------------------------------------------------------- */

static bool *nullable_rules(struct parser *ps)
{
    bool *nl = calloc(ps->n_rules, sizeof(bool));
    if (!nl)
        return NULL;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < ps->n_rules; r++) {
            if (nl[r])
                continue;
            bool alt_ok = true;
            for (uint32_t i = 0; i < ps->rules[r].n; i++) {
                struct ebb__gelem e = ps->rules[r].e[i];
                if (e.kind == EBB__G_ALT || e.kind == EBB__G_END) {
                    if (alt_ok) {
                        nl[r] = changed = true;
                        break;
                    }
                    alt_ok = true;
                } else if (e.kind == EBB__G_CHAR || !nl[e.a]) {
                    alt_ok = false;
                }
            }
        }
    }
    return nl;
}

/* Depth-first search over "rule r may begin with rule s"; a back edge is left recursion. */
static bool left_rec(struct parser *ps, const bool *nl, uint8_t *color, uint32_t *path,
                     uint32_t depth, uint32_t r)
{
    color[r] = 1;
    path[depth] = r;
    bool at_start = true;
    for (uint32_t i = 0; i < ps->rules[r].n; i++) {
        struct ebb__gelem e = ps->rules[r].e[i];
        if (e.kind == EBB__G_ALT || e.kind == EBB__G_END) {
            at_start = true;
            continue;
        }
        if (!at_start)
            continue;
        if (e.kind == EBB__G_CHAR) {
            at_start = false;
            continue;
        }
        if (color[e.a] == 1) {
            char chain[300];
            size_t o = 0;
            uint32_t k = depth;
            while (k > 0 && path[k] != e.a)
                k--;
            for (; k <= depth && o < sizeof(chain) - 40; k++)
                o += (size_t)snprintf(chain + o, sizeof(chain) - o, "%.30s -> ",
                                      ps->rules[path[k]].name);
            snprintf(chain + o, sizeof(chain) - o, "%.30s", ps->rules[e.a].name);
            ps->rc = ebb_diag_set(ps->diag, EBB_EINVAL, "rule '%s' is left-recursive: %s",
                                  ps->rules[e.a].name, chain);
            return true;
        }
        if (color[e.a] == 0 && left_rec(ps, nl, color, path, depth + 1, e.a))
            return true;
        at_start = nl[e.a];
    }
    color[r] = 2;
    return false;
}

static ebb_err check(struct parser *ps)
{
    for (uint32_t r = 0; r < ps->n_rules; r++) {
        if (!ps->rules[r].defined)
            return perr(ps, ps->rules[r].first_use ? ps->rules[r].first_use : ps->src,
                        "rule '%s' is not defined", ps->rules[r].name);
    }
    bool *nl = nullable_rules(ps);
    uint8_t *color = calloc(ps->n_rules, 1);
    uint32_t *path = calloc(ps->n_rules + 1, sizeof(uint32_t));
    if (!nl || !color || !path) {
        oom(ps);
    } else {
        for (uint32_t r = 0; r < ps->n_rules && !ps->rc; r++) {
            if (color[r] == 0)
                left_rec(ps, nl, color, path, 0, r);
        }
    }
    free(nl);
    free(color);
    free(path);
    return ps->rc;
}

static ebb_err flatten(struct parser *ps, uint32_t root, struct ebb_grammar **out)
{
    struct ebb_grammar *g = calloc(1, sizeof(*g));
    if (!g)
        return oom(ps);
    uint32_t n_alts = 0;
    for (uint32_t r = 0; r < ps->n_rules; r++) {
        for (uint32_t i = 0; i < ps->rules[r].n; i++)
            n_alts += ps->rules[r].e[i].kind <= EBB__G_ALT;
    }
    g->elems = malloc(sizeof(*g->elems) * (ps->n_elems_total + 1));
    g->ranges = malloc(sizeof(*g->ranges) * (ps->n_ranges + 1));
    g->alts = malloc(sizeof(uint32_t) * (n_alts + 1));
    g->rule_alt0 = malloc(sizeof(uint32_t) * ps->n_rules);
    g->rule_nalt = malloc(sizeof(uint32_t) * ps->n_rules);
    if (!g->elems || !g->ranges || !g->alts || !g->rule_alt0 || !g->rule_nalt) {
        ebb_grammar_free(g);
        return oom(ps);
    }
    if (ps->n_ranges)
        memcpy(g->ranges, ps->ranges, sizeof(*g->ranges) * ps->n_ranges);
    g->n_ranges = ps->n_ranges;
    uint32_t na = 0;
    for (uint32_t r = 0; r < ps->n_rules; r++) {
        g->rule_alt0[r] = na;
        g->rule_nalt[r] = 0;
        bool start = true;
        for (uint32_t i = 0; i < ps->rules[r].n; i++) {
            struct ebb__gelem e = ps->rules[r].e[i];
            if (start) {
                g->alts[na++] = g->n_elems;
                g->rule_nalt[r]++;
            }
            g->elems[g->n_elems++] = e;
            start = e.kind == EBB__G_ALT;
        }
    }
    g->n_rules = ps->n_rules;
    g->root = root;
    *out = g;
    return EBB_OK;
}

ebb_err ebb_grammar_compile(const char *src, size_t len, const char *root, struct ebb_grammar **out,
                            struct ebb_diag *diag)
{
    if (len > EBB_GRAMMAR_MAX_SRC)
        return ebb_diag_set(diag, EBB_EINVAL, "the grammar is longer than %u bytes",
                            EBB_GRAMMAR_MAX_SRC);
    struct parser ps = {.src = src, .end = src + len, .p = src, .diag = diag};
    for (;;) {
        skip_space(&ps, true);
        if (ps.rc || ps.p >= ps.end)
            break;
        parse_rule(&ps);
    }
    int32_t r = -1;
    for (uint32_t i = 0; i < ps.n_rules && !ps.rc; i++) {
        if (!strcmp(ps.rules[i].name, root))
            r = (int32_t)i;
    }
    if (!ps.rc && (r < 0 || !ps.rules[r].defined))
        ebb_diag_set(diag, ps.rc = EBB_EINVAL, "the grammar has no rule '%s'", root);
    if (!ps.rc)
        check(&ps);
    if (!ps.rc)
        flatten(&ps, (uint32_t)r, out);
    for (uint32_t i = 0; i < ps.n_rules; i++) {
        free(ps.rules[i].name);
        free(ps.rules[i].e);
    }
    free(ps.rules);
    free(ps.ranges);
    return ps.rc;
}

void ebb_grammar_free(struct ebb_grammar *g)
{
    if (!g)
        return;
    free(g->elems);
    free(g->ranges);
    free(g->alts);
    free(g->rule_alt0);
    free(g->rule_nalt);
    free(g);
}
