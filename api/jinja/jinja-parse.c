/* Jinja parser: tokens into a syntax tree, with Jinja2's operator precedence. Everything outside
 * the subset (unknown statements, filters and tests) is refused here, at load time, naming the
 * line and the construct, so a template either renders or says at once why it cannot. */
#include "jinja-int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NEST 200

struct parser {
    const struct jtoks *toks;
    size_t pos;
    struct jarena *a;
    struct ebb_diag *diag;
    ebb_err rc;
    jmp_buf fail;
    unsigned depth;
    unsigned blocks; /* nested statement bodies */
    unsigned in_if;  /* inside an if statement's condition or branches */
    /* Unknown filters and tests. Jinja2 refuses them when it compiles the template, except
     * inside if statements and conditional expressions, where they fail only if evaluated; ebb
     * does the same so templates that guard an extension filter still load. */
    struct unknown {
        int line;
        const char *what, *name;
        bool cond;
    } unknown[16];
    size_t n_unknown;
};

static void note_unknown(struct parser *P, int line, const char *what, const char *name)
{
    if (P->n_unknown < sizeof(P->unknown) / sizeof(P->unknown[0]))
        P->unknown[P->n_unknown++] = (struct unknown){line, what, name, P->in_if > 0};
    else if (!P->in_if)
        P->unknown[0] = (struct unknown){line, what, name, false};
}

static _Noreturn void perr(struct parser *P, ebb_err rc, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static _Noreturn void perr(struct parser *P, ebb_err rc, int line, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    P->rc = ebb_diag_set(P->diag, rc, "chat template line %d: %s", line, msg);
    longjmp(P->fail, 1);
}

static void *palloc(struct parser *P, size_t n)
{
    void *p = ebb__jarena_alloc(P->a, n);
    if (!p) {
        P->rc = EBB_ENOMEM;
        longjmp(P->fail, 1);
    }
    return p;
}

static const struct jtok *cur(struct parser *P)
{
    return &P->toks->v[P->pos];
}

static const struct jtok *next(struct parser *P)
{
    const struct jtok *t = cur(P);
    if (t->type != JT_EOF)
        P->pos++;
    return t;
}

static bool is_op(const struct jtok *t, const char *op)
{
    return t->type == JT_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}

static bool is_name(const struct jtok *t, const char *name)
{
    return t->type == JT_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}

static const char *describe(const struct jtok *t, char *buf, size_t n)
{
    switch (t->type) {
    case JT_EOF:
        return "the end of the template";
    case JT_TEXT:
        return "template text";
    case JT_VAR_END:
    case JT_BLOCK_END:
        return "the end of the tag";
    case JT_STRING:
        return "a string";
    default:
        snprintf(n ? buf : NULL, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p);
        return buf;
    }
}

static void expect_op(struct parser *P, const char *op)
{
    if (!is_op(cur(P), op)) {
        char b[64];
        perr(P, EBB_EINVAL, cur(P)->line, "expected '%s', got %s", op, describe(cur(P), b, 64));
    }
    next(P);
}

static char *dup_tok(struct parser *P, const struct jtok *t)
{
    char *s = palloc(P, t->n + 1);
    memcpy(s, t->p, t->n);
    return s;
}

static const char *expect_name(struct parser *P, const char *what)
{
    if (cur(P)->type != JT_NAME) {
        char b[64];
        perr(P, EBB_EINVAL, cur(P)->line, "expected %s, got %s", what, describe(cur(P), b, 64));
    }
    return dup_tok(P, next(P));
}

static struct jx *node(struct parser *P, enum jx_kind k, int line)
{
    struct jx *x = palloc(P, sizeof(*x));
    x->kind = (uint8_t)k;
    x->line = line;
    return x;
}

/* A growable array of pointers in the arena. */
struct pvec {
    void **v;
    size_t n, cap;
};

static void pv_push(struct parser *P, struct pvec *pv, void *x)
{
    if (pv->n == pv->cap) {
        size_t cap = pv->cap ? pv->cap * 2 : 4;
        void **v = palloc(P, cap * sizeof(*v));
        if (pv->n)
            memcpy(v, pv->v, pv->n * sizeof(*v));
        pv->v = v;
        pv->cap = cap;
    }
    pv->v[pv->n++] = x;
}

static struct jx *parse_expr(struct parser *P, bool with_cond);
static struct jx *parse_or(struct parser *P);
static struct jx *parse_unary(struct parser *P, bool with_filter);

static void enter(struct parser *P)
{
    if (++P->depth > MAX_NEST)
        perr(P, EBB_EUNSUPPORTED, cur(P)->line, "expressions nested deeper than %d", MAX_NEST);
}

/* (args, name=kw) after the opening parenthesis has been consumed. */
static void parse_args(struct parser *P, struct jx *x)
{
    struct pvec pos = {0}, kw = {0}, kwn = {0};
    while (!is_op(cur(P), ")")) {
        if (pos.n + kw.n)
            expect_op(P, ",");
        if (is_op(cur(P), ")"))
            break;
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            perr(P, EBB_EUNSUPPORTED, cur(P)->line, "*args and **kwargs in calls");
        if (cur(P)->type == JT_NAME && is_op(&P->toks->v[P->pos + 1], "=")) {
            pv_push(P, &kwn, dup_tok(P, next(P)));
            next(P);
            pv_push(P, &kw, parse_expr(P, true));
        } else {
            if (kw.n)
                perr(P, EBB_EINVAL, cur(P)->line, "a positional argument after a keyword one");
            pv_push(P, &pos, parse_expr(P, true));
        }
    }
    next(P);
    x->args = (struct jx **)pos.v;
    x->n_args = pos.n;
    x->kw = (struct jx **)kw.v;
    x->kw_names = (const char **)kwn.v;
    x->n_kw = kw.n;
}

static struct jx *parse_primary(struct parser *P)
{
    const struct jtok *t = cur(P);
    struct jx *x;
    if (t->type == JT_NAME) {
        next(P);
        x = node(P, JX_LIT, t->line);
        if (is_name(t, "true") || is_name(t, "True")) {
            x->lit = jv_bool(true);
        } else if (is_name(t, "false") || is_name(t, "False")) {
            x->lit = jv_bool(false);
        } else if (is_name(t, "none") || is_name(t, "None")) {
            x->lit = jv_none();
        } else {
            x->kind = JX_NAME;
            x->name = dup_tok(P, t);
        }
        return x;
    }
    if (t->type == JT_STRING) {
        /* Adjacent literals concatenate. */
        size_t total = 0, k = P->pos;
        while (P->toks->v[k].type == JT_STRING)
            total += P->toks->v[k++].n;
        struct jstr *s = palloc(P, sizeof(*s) + total + 1);
        while (cur(P)->type == JT_STRING) {
            const struct jtok *u = next(P);
            memcpy(s->p + s->n, u->p, u->n);
            s->n += u->n;
        }
        x = node(P, JX_LIT, t->line);
        x->lit.t = JV_STR;
        x->lit.u.s = s;
        return x;
    }
    if (t->type == JT_INT || t->type == JT_FLOAT) {
        next(P);
        x = node(P, JX_LIT, t->line);
        x->lit = t->type == JT_INT ? jv_int(t->i) : jv_float(t->f);
        return x;
    }
    if (is_op(t, "(")) {
        next(P);
        if (is_op(cur(P), ")")) {
            next(P);
            return node(P, JX_TUPLE, t->line);
        }
        x = parse_expr(P, true);
        if (is_op(cur(P), ",")) {
            struct jx *tup = node(P, JX_TUPLE, t->line);
            struct pvec items = {0};
            pv_push(P, &items, x);
            while (is_op(cur(P), ",")) {
                next(P);
                if (is_op(cur(P), ")"))
                    break;
                pv_push(P, &items, parse_expr(P, true));
            }
            tup->args = (struct jx **)items.v;
            tup->n_args = items.n;
            x = tup;
        }
        expect_op(P, ")");
        return x;
    }
    if (is_op(t, "[") || is_op(t, "{")) {
        bool dict = is_op(t, "{");
        next(P);
        x = node(P, dict ? JX_DICT : JX_LIST, t->line);
        struct pvec items = {0};
        const char *close = dict ? "}" : "]";
        while (!is_op(cur(P), close)) {
            if (items.n)
                expect_op(P, ",");
            if (is_op(cur(P), close))
                break;
            pv_push(P, &items, parse_expr(P, true));
            if (dict) {
                expect_op(P, ":");
                pv_push(P, &items, parse_expr(P, true));
            }
        }
        next(P);
        x->args = (struct jx **)items.v;
        x->n_args = items.n;
        return x;
    }
    char b[64];
    perr(P, EBB_EINVAL, t->line, "unexpected %s in an expression", describe(t, b, sizeof(b)));
}

static struct jx *parse_postfix(struct parser *P, struct jx *x)
{
    for (;;) {
        const struct jtok *t = cur(P);
        if (is_op(t, ".")) {
            next(P);
            if (cur(P)->type == JT_INT) {
                struct jx *it = node(P, JX_ITEM, t->line);
                it->a = x;
                it->b = node(P, JX_LIT, t->line);
                it->b->lit = jv_int(next(P)->i);
                x = it;
                continue;
            }
            struct jx *at = node(P, JX_ATTR, t->line);
            at->a = x;
            at->name = expect_name(P, "an attribute name");
            x = at;
        } else if (is_op(t, "[")) {
            next(P);
            struct jx *parts[3] = {NULL, NULL, NULL};
            int n = 0;
            bool slice = false;
            for (;;) {
                if (!is_op(cur(P), ":") && !is_op(cur(P), "]"))
                    parts[n] = parse_expr(P, true);
                if (is_op(cur(P), ":") && n < 2) {
                    slice = true;
                    next(P);
                    n++;
                    continue;
                }
                break;
            }
            expect_op(P, "]");
            struct jx *it = node(P, slice ? JX_SLICE : JX_ITEM, t->line);
            it->a = x;
            it->b = parts[0];
            it->c = parts[1];
            if (slice) {
                it->args = palloc(P, sizeof(*it->args));
                it->args[0] = parts[2];
                it->n_args = 1;
            } else if (!parts[0]) {
                perr(P, EBB_EINVAL, t->line, "empty subscript");
            }
            x = it;
        } else if (is_op(t, "(")) {
            next(P);
            struct jx *call = node(P, JX_CALL, t->line);
            call->a = x;
            parse_args(P, call);
            x = call;
        } else {
            return x;
        }
    }
}

static struct jx *parse_filter(struct parser *P, struct jx *x)
{
    int line = cur(P)->line;
    const char *name = expect_name(P, "a filter name");
    struct jx *f = node(P, JX_FILTER, line);
    f->a = x;
    f->name = name;
    f->filter = ebb__jinja_filter(name);
    if (!f->filter)
        note_unknown(P, line, "filter", name);
    if (is_op(cur(P), "(")) {
        next(P);
        parse_args(P, f);
    }
    return f;
}

static struct jx *parse_filter_expr(struct parser *P, struct jx *x)
{
    for (;;) {
        const struct jtok *t = cur(P);
        if (is_op(t, "|")) {
            next(P);
            x = parse_filter(P, x);
        } else if (is_name(t, "is")) {
            next(P);
            struct jx *te = node(P, JX_TEST, t->line);
            te->a = x;
            if (is_name(cur(P), "not")) {
                next(P);
                te->negate = true;
            }
            te->name = expect_name(P, "a test name");
            te->test = ebb__jinja_test(te->name);
            if (!te->test)
                note_unknown(P, t->line, "test", te->name);
            const struct jtok *u = cur(P);
            if (is_op(u, "(")) {
                next(P);
                parse_args(P, te);
            } else if ((u->type == JT_NAME || u->type == JT_STRING || u->type == JT_INT ||
                        u->type == JT_FLOAT || is_op(u, "[") || is_op(u, "{")) &&
                       !is_name(u, "else") && !is_name(u, "or") && !is_name(u, "and")) {
                te->args = palloc(P, sizeof(*te->args));
                te->args[0] = parse_postfix(P, parse_primary(P));
                te->n_args = 1;
            }
            x = te;
        } else if (is_op(t, "(")) {
            x = parse_postfix(P, x);
        } else {
            return x;
        }
    }
}

static struct jx *parse_unary(struct parser *P, bool with_filter)
{
    enter(P);
    const struct jtok *t = cur(P);
    struct jx *x;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        x = node(P, is_op(t, "-") ? JX_NEG : JX_POS, t->line);
        x->a = parse_unary(P, false);
    } else {
        x = parse_primary(P);
    }
    x = parse_postfix(P, x);
    if (with_filter)
        x = parse_filter_expr(P, x);
    P->depth--;
    return x;
}

static struct jx *binop(struct parser *P, const char *op, struct jx *a, struct jx *b, int line)
{
    struct jx *x = node(P, JX_BIN, line);
    snprintf(x->op, sizeof(x->op), "%s", op);
    x->a = a;
    x->b = b;
    return x;
}

static struct jx *parse_pow(struct parser *P)
{
    struct jx *x = parse_unary(P, true);
    while (is_op(cur(P), "**")) {
        int line = next(P)->line;
        x = binop(P, "**", x, parse_unary(P, true), line);
    }
    return x;
}

static struct jx *parse_math2(struct parser *P)
{
    struct jx *x = parse_pow(P);
    for (;;) {
        const struct jtok *t = cur(P);
        if (!is_op(t, "*") && !is_op(t, "/") && !is_op(t, "//") && !is_op(t, "%"))
            return x;
        next(P);
        char op[4];
        snprintf(op, sizeof(op), "%.*s", (int)t->n, t->p);
        x = binop(P, op, x, parse_pow(P), t->line);
    }
}

static struct jx *parse_concat(struct parser *P)
{
    struct jx *x = parse_math2(P);
    while (is_op(cur(P), "~")) {
        int line = next(P)->line;
        x = binop(P, "~", x, parse_math2(P), line);
    }
    return x;
}

static struct jx *parse_math1(struct parser *P)
{
    struct jx *x = parse_concat(P);
    for (;;) {
        const struct jtok *t = cur(P);
        if (!is_op(t, "+") && !is_op(t, "-"))
            return x;
        next(P);
        x = binop(P, is_op(t, "+") ? "+" : "-", x, parse_concat(P), t->line);
    }
}

static struct jx *parse_compare(struct parser *P)
{
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
    struct jx *x = parse_math1(P), *prev = x, *res = NULL;
    for (;;) {
        const struct jtok *t = cur(P);
        const char *op = NULL;
        for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
            if (is_op(t, ops[k]))
                op = ops[k];
        if (!op && is_name(t, "in"))
            op = "in";
        if (!op && is_name(t, "not") && is_name(&P->toks->v[P->pos + 1], "in")) {
            next(P);
            op = "nin";
        }
        if (!op)
            return res ? res : x;
        next(P);
        struct jx *rhs = parse_math1(P);
        struct jx *c = node(P, JX_CMP, t->line);
        snprintf(c->op, sizeof(c->op), "%s", op);
        c->a = prev;
        c->b = rhs;
        /* a < b < c is a < b and b < c. */
        if (res) {
            struct jx *and = node(P, JX_AND, t->line);
            and->a = res;
            and->b = c;
            res = and;
        } else {
            res = c;
        }
        prev = rhs;
    }
}

static struct jx *parse_not(struct parser *P)
{
    if (is_name(cur(P), "not")) {
        enter(P);
        struct jx *x = node(P, JX_NOT, next(P)->line);
        x->a = parse_not(P);
        P->depth--;
        return x;
    }
    return parse_compare(P);
}

static struct jx *parse_and(struct parser *P)
{
    struct jx *x = parse_not(P);
    while (is_name(cur(P), "and")) {
        struct jx *y = node(P, JX_AND, next(P)->line);
        y->a = x;
        y->b = parse_not(P);
        x = y;
    }
    return x;
}

static struct jx *parse_or(struct parser *P)
{
    struct jx *x = parse_and(P);
    while (is_name(cur(P), "or")) {
        struct jx *y = node(P, JX_OR, next(P)->line);
        y->a = x;
        y->b = parse_and(P);
        x = y;
    }
    return x;
}

static struct jx *parse_expr(struct parser *P, bool with_cond)
{
    enter(P);
    size_t first_unknown = P->n_unknown;
    struct jx *x = parse_or(P);
    while (with_cond && is_name(cur(P), "if")) {
        for (size_t i = first_unknown; i < P->n_unknown; i++)
            P->unknown[i].cond = true;
        P->in_if++;
        struct jx *c = node(P, JX_COND, next(P)->line);
        c->a = parse_or(P); /* condition */
        c->b = x;
        if (is_name(cur(P), "else")) {
            next(P);
            c->c = parse_expr(P, true);
        }
        P->in_if--;
        x = c;
    }
    P->depth--;
    return x;
}

/* An expression, or a tuple of them separated by commas. */
static struct jx *parse_tuple(struct parser *P, bool with_cond)
{
    int line = cur(P)->line;
    struct jx *x = parse_expr(P, with_cond);
    if (!is_op(cur(P), ","))
        return x;
    struct pvec items = {0};
    pv_push(P, &items, x);
    while (is_op(cur(P), ",")) {
        next(P);
        if (cur(P)->type == JT_BLOCK_END || cur(P)->type == JT_VAR_END || is_name(cur(P), "if") ||
            is_name(cur(P), "recursive"))
            break;
        pv_push(P, &items, parse_expr(P, with_cond));
    }
    struct jx *t = node(P, JX_TUPLE, line);
    t->args = (struct jx **)items.v;
    t->n_args = items.n;
    return t;
}

/* ---- statements ------------------------------------------------------------------------------ */

static void expect_block_end(struct parser *P)
{
    if (cur(P)->type != JT_BLOCK_END) {
        char b[64];
        perr(P, EBB_EINVAL, cur(P)->line, "expected the end of the tag, got %s",
             describe(cur(P), b, sizeof(b)));
    }
    next(P);
}

static struct js *stmt(struct parser *P, enum js_kind k, int line)
{
    struct js *s = palloc(P, sizeof(*s));
    s->kind = (uint8_t)k;
    s->line = line;
    return s;
}

/* Statements up to a block tag named in ends (NULL-terminated); returns the index of the end
 * tag found with the parser just after its name. */
static struct js *parse_body(struct parser *P, const char *const *ends, int *which, int open_line,
                             const char *opener);

static void names_list(struct parser *P, struct js *s, bool allow_attr)
{
    struct pvec names = {0};
    bool paren = is_op(cur(P), "(");
    if (paren)
        next(P);
    for (;;) {
        pv_push(P, &names, (void *)expect_name(P, "a variable name"));
        if (allow_attr && names.n == 1 && is_op(cur(P), ".")) {
            next(P);
            s->attr = expect_name(P, "an attribute name");
            break;
        }
        if (!is_op(cur(P), ","))
            break;
        next(P);
    }
    if (paren)
        expect_op(P, ")");
    s->names = (const char **)names.v;
    s->n_names = names.n;
}

static struct js *parse_tag(struct parser *P, const char *const *ends, int *which, bool *done)
{
    const struct jtok *t = cur(P);
    int line = t->line;
    if (t->type != JT_NAME) {
        char b[64];
        perr(P, EBB_EINVAL, line, "expected a statement name, got %s", describe(t, b, 64));
    }
    for (int i = 0; ends && ends[i]; i++) {
        if (is_name(t, ends[i])) {
            next(P);
            *which = i;
            *done = true;
            return NULL;
        }
    }
    next(P);
    struct js *s;
    int w;
    if (is_name(t, "if")) {
        static const char *const e[] = {"elif", "else", "endif", NULL};
        s = stmt(P, JS_IF, line);
        P->in_if++;
        s->e = parse_tuple(P, true);
        expect_block_end(P);
        s->body = parse_body(P, e, &w, line, "if");
        struct js *tail = s;
        while (w == 0) {
            struct js *el = stmt(P, JS_IF, cur(P)->line);
            el->elif = true;
            el->e = parse_tuple(P, true);
            expect_block_end(P);
            el->body = parse_body(P, e, &w, line, "if");
            tail->orelse = el;
            tail = el;
        }
        if (w == 1) {
            static const char *const e2[] = {"endif", NULL};
            expect_block_end(P);
            tail->orelse = parse_body(P, e2, &w, line, "if");
        }
        P->in_if--;
    } else if (is_name(t, "for")) {
        static const char *const e[] = {"else", "endfor", NULL};
        s = stmt(P, JS_FOR, line);
        names_list(P, s, false);
        if (!is_name(cur(P), "in"))
            perr(P, EBB_EINVAL, line, "expected 'in' in a for statement");
        next(P);
        s->e = parse_tuple(P, false);
        if (is_name(cur(P), "if")) {
            next(P);
            s->cond = parse_expr(P, true);
        }
        if (is_name(cur(P), "recursive"))
            perr(P, EBB_EUNSUPPORTED, line, "recursive for loops");
        expect_block_end(P);
        s->body = parse_body(P, e, &w, line, "for");
        if (w == 0) {
            static const char *const e2[] = {"endfor", NULL};
            expect_block_end(P);
            s->orelse = parse_body(P, e2, &w, line, "for");
        }
    } else if (is_name(t, "set")) {
        s = stmt(P, JS_SET, line);
        names_list(P, s, true);
        if (is_op(cur(P), "=")) {
            next(P);
            s->e = parse_tuple(P, true);
        } else {
            static const char *const e[] = {"endset", NULL};
            s->kind = JS_SET_BLOCK;
            if (s->attr || s->n_names != 1)
                perr(P, EBB_EUNSUPPORTED, line, "a block set of several names");
            while (is_op(cur(P), "|")) {
                next(P);
                s->e = parse_filter(P, s->e);
            }
            expect_block_end(P);
            s->body = parse_body(P, e, &w, line, "set");
        }
    } else if (is_name(t, "macro")) {
        static const char *const e[] = {"endmacro", NULL};
        s = stmt(P, JS_MACRO, line);
        s->name = expect_name(P, "a macro name");
        expect_op(P, "(");
        struct pvec names = {0}, defs = {0};
        while (!is_op(cur(P), ")")) {
            if (names.n)
                expect_op(P, ",");
            pv_push(P, &names, (void *)expect_name(P, "a parameter name"));
            struct jx *d = NULL;
            if (is_op(cur(P), "=")) {
                next(P);
                d = parse_expr(P, true);
            }
            pv_push(P, &defs, d);
        }
        next(P);
        s->names = (const char **)names.v;
        s->n_names = names.n;
        s->defaults = (struct jx **)defs.v;
        expect_block_end(P);
        s->body = parse_body(P, e, &w, line, "macro");
    } else if (is_name(t, "call")) {
        static const char *const e[] = {"endcall", NULL};
        s = stmt(P, JS_CALL_BLOCK, line);
        s->name = "caller";
        if (is_op(cur(P), "(")) {
            next(P);
            struct pvec names = {0}, defs = {0};
            while (!is_op(cur(P), ")")) {
                if (names.n)
                    expect_op(P, ",");
                pv_push(P, &names, (void *)expect_name(P, "a parameter name"));
                struct jx *d = NULL;
                if (is_op(cur(P), "=")) {
                    next(P);
                    d = parse_expr(P, true);
                }
                pv_push(P, &defs, d);
            }
            next(P);
            s->names = (const char **)names.v;
            s->n_names = names.n;
            s->defaults = (struct jx **)defs.v;
        }
        s->e = parse_expr(P, true);
        if (s->e->kind != JX_CALL)
            perr(P, EBB_EINVAL, line, "a call block needs a macro call");
        expect_block_end(P);
        s->body = parse_body(P, e, &w, line, "call");
    } else if (is_name(t, "filter")) {
        static const char *const e[] = {"endfilter", NULL};
        s = stmt(P, JS_FILTER_BLOCK, line);
        s->e = parse_filter(P, NULL);
        while (is_op(cur(P), "|")) {
            next(P);
            s->e = parse_filter(P, s->e);
        }
        expect_block_end(P);
        s->body = parse_body(P, e, &w, line, "filter");
    } else if (is_name(t, "generation")) {
        /* transformers' assistant-mask marker: renders its body unchanged. */
        static const char *const e[] = {"endgeneration", NULL};
        s = stmt(P, JS_BODY, line);
        expect_block_end(P);
        s->body = parse_body(P, e, &w, line, "generation");
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        s = stmt(P, is_name(t, "break") ? JS_BREAK : JS_CONTINUE, line);
    } else if ((t->n > 3 && !memcmp(t->p, "end", 3)) || is_name(t, "elif") || is_name(t, "else")) {
        perr(P, EBB_EINVAL, line, "unexpected '%.*s'%s%s", (int)t->n, t->p,
             ends ? ", expected " : "", ends ? ends[0] : "");
    } else {
        perr(P, EBB_EUNSUPPORTED, line, "unsupported statement '%.*s'", (int)t->n, t->p);
    }
    /* The statement's own %}, or its end tag's. */
    expect_block_end(P);
    return s;
}

static struct js *parse_body(struct parser *P, const char *const *ends, int *which, int open_line,
                             const char *opener)
{
    struct js *head = NULL, **tail = &head;
    if (++P->blocks > MAX_NEST)
        perr(P, EBB_EUNSUPPORTED, open_line, "blocks nested deeper than %d", MAX_NEST);
    for (;;) {
        const struct jtok *t = next(P);
        struct js *s = NULL;
        if (t->type == JT_EOF) {
            if (ends)
                perr(P, EBB_EINVAL, open_line, "'%s' is never closed (expected '%s')", opener,
                     ends[0]);
            P->blocks--;
            return head;
        }
        if (t->type == JT_TEXT) {
            s = stmt(P, JS_TEXT, t->line);
            s->text = t->p;
            s->n = t->n;
        } else if (t->type == JT_VAR_BEGIN) {
            s = stmt(P, JS_OUT, t->line);
            s->e = parse_tuple(P, true);
            if (cur(P)->type != JT_VAR_END) {
                char b[64];
                perr(P, EBB_EINVAL, cur(P)->line, "expected '}}', got %s",
                     describe(cur(P), b, sizeof(b)));
            }
            next(P);
        } else if (t->type == JT_BLOCK_BEGIN) {
            bool done = false;
            s = parse_tag(P, ends, which, &done);
            if (done) {
                P->blocks--;
                return head;
            }
        } else {
            perr(P, EBB_EINVAL, t->line, "unexpected token");
        }
        *tail = s;
        tail = &s->next;
    }
}

static ebb_err parse_root(struct parser *P, struct ebb_jinja *t, struct ebb_diag *diag)
{
    int w;
    t->root = parse_body(P, NULL, &w, 0, NULL);
    for (size_t i = 0; i < P->n_unknown; i++)
        if (!P->unknown[i].cond)
            return ebb_diag_set(diag, EBB_EUNSUPPORTED, "chat template line %d: unknown %s '%s'",
                                P->unknown[i].line, P->unknown[i].what, P->unknown[i].name);
    return EBB_OK;
}

ebb_err ebb__jinja_parse_toks(struct ebb_jinja *t, const struct jtoks *toks, struct ebb_diag *diag)
{
    /* On the heap: longjmp leaves locals of this frame indeterminate. */
    struct parser *P = calloc(1, sizeof(*P));
    if (!P)
        return EBB_ENOMEM;
    P->toks = toks;
    P->a = &t->arena;
    P->diag = diag;
    ebb_err rc;
    if (setjmp(P->fail))
        rc = P->rc ? P->rc : EBB_EINVAL;
    else
        rc = parse_root(P, t, diag);
    free(P);
    return rc;
}
