/* Jinja evaluator: walks the syntax tree with Jinja2's semantics (undefined values, scoping of
 * loops and macros, Python operators) and writes the rendered text. Every value lives in the
 * render's arena, so an error anywhere leaves by longjmp to ebb_jinja_render, which frees it
 * all at once. */
#include "jinja-int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void step(struct jctx *c, int line)
{
    c->line = line;
    if (++c->steps > c->max_steps)
        ebb__jinja_fail_err(c, EBB_ERANGE, "the template ran more than %llu steps",
                            (unsigned long long)c->max_steps);
}

static void emit(struct jctx *c, const char *s, size_t n)
{
    if (c->outb->n + n > c->max_output)
        ebb__jinja_fail_err(c, EBB_ERANGE, "the rendered text exceeds %zu bytes", c->max_output);
    ebb__jbuf_put(c->outb, s, n);
}

/* ---- names ---------------------------------------------------------------------------------- */

static struct jframe *frame_new(struct jctx *c, struct jframe *parent)
{
    struct jframe *f = ebb__jinja_alloc(c, sizeof(*f));
    f->parent = parent;
    return f;
}

static void frame_set(struct jctx *c, struct jframe *f, const char *name, struct jv v)
{
    struct jv *old = ebb__jv_dict_gets(&f->vars, name);
    if (old) {
        *old = v;
        return;
    }
    struct jv d = {.t = JV_DICT};
    d.u.d = &f->vars;
    ebb__jv_dict_set(c, d, ebb__jv_cstr(c, name), v);
}

static struct jv lookup(struct jctx *c, struct jframe *f, const char *name)
{
    for (; f; f = f->parent) {
        struct jv *v = ebb__jv_dict_gets(&f->vars, name);
        if (v)
            return *v;
    }
    return ebb__jinja_global(c, name);
}

/* ---- attribute and item access -------------------------------------------------------------- */

static struct jv get_attr(struct jctx *c, struct jv obj, const char *name)
{
    if (obj.t == JV_UNDEF)
        ebb__jinja_fail(c, "'%s' is undefined (reading its attribute '%s')",
                        obj.u.undef ? obj.u.undef : "value", name);
    if (obj.t == JV_DICT && obj.u.d->ns) {
        struct jv *v = ebb__jv_dict_gets(obj.u.d, name);
        return v ? *v : jv_undef(name);
    }
    /* Jinja tries the Python attribute first: dict methods win over keys of the same name. */
    struct jv m = ebb__jinja_method(c, obj, name);
    if (m.t != JV_UNDEF)
        return m;
    if (obj.t == JV_DICT) {
        struct jv *v = ebb__jv_dict_gets(obj.u.d, name);
        if (v)
            return *v;
    }
    return jv_undef(name);
}

static int64_t norm_index(int64_t i, size_t n, bool *ok)
{
    if (i < 0)
        i += (int64_t)n;
    *ok = i >= 0 && (uint64_t)i < n;
    return i;
}

static struct jv get_item(struct jctx *c, struct jv obj, struct jv key)
{
    if (obj.t == JV_UNDEF)
        ebb__jinja_fail(c, "'%s' is undefined (reading an item)",
                        obj.u.undef ? obj.u.undef : "value");
    bool ok;
    if (obj.t == JV_DICT) {
        struct jv *v = ebb__jv_dict_get(obj, key);
        if (v)
            return *v;
    } else if (obj.t == JV_LIST && obj.u.l->gen) {
        ebb__jinja_fail(c, "'generator' object is not subscriptable");
    } else if (obj.t == JV_LIST && (key.t == JV_INT || key.t == JV_BOOL)) {
        int64_t i = norm_index(key.t == JV_INT ? key.u.i : key.u.b, obj.u.l->n, &ok);
        if (ok)
            return obj.u.l->v[i];
    } else if (obj.t == JV_STR && (key.t == JV_INT || key.t == JV_BOOL)) {
        size_t n = ebb__utf8_len(obj.u.s->p, obj.u.s->n);
        int64_t i = norm_index(key.t == JV_INT ? key.u.i : key.u.b, n, &ok);
        if (ok) {
            size_t b = ebb__utf8_offset(obj.u.s->p, obj.u.s->n, (size_t)i);
            size_t e = ebb__utf8_offset(obj.u.s->p, obj.u.s->n, (size_t)i + 1);
            return ebb__jv_str(c, obj.u.s->p + b, e - b);
        }
    }
    if (key.t == JV_STR)
        return get_attr(c, obj, key.u.s->p);
    return jv_undef("item");
}

static int64_t slice_bound(struct jctx *c, struct jv v, int64_t n, int64_t step, bool start)
{
    if (v.t == JV_NONE || v.t == JV_UNDEF)
        return step > 0 ? (start ? 0 : n) : (start ? n - 1 : -1);
    if (v.t != JV_INT && v.t != JV_BOOL)
        ebb__jinja_fail(c, "slice indices must be integers or None");
    int64_t i = v.t == JV_INT ? v.u.i : v.u.b;
    if (i < 0) {
        i += n;
        if (i < 0)
            i = step > 0 ? 0 : -1;
    } else if (i >= n) {
        i = step > 0 ? n : n - 1;
    }
    return i;
}

static struct jv do_slice(struct jctx *c, struct jv obj, struct jv a, struct jv b, struct jv s)
{
    int64_t step = 1;
    if (s.t == JV_INT)
        step = s.u.i;
    else if (s.t != JV_NONE && s.t != JV_UNDEF)
        ebb__jinja_fail(c, "slice step must be an integer");
    if (step == 0)
        ebb__jinja_fail(c, "slice step cannot be zero");
    if (obj.t == JV_LIST && !obj.u.l->gen) {
        int64_t n = (int64_t)obj.u.l->n;
        int64_t i = slice_bound(c, a, n, step, true), e = slice_bound(c, b, n, step, false);
        struct jv r = ebb__jv_list(c, 0);
        for (; step > 0 ? i < e : i > e; i += step)
            ebb__jv_push(c, r, obj.u.l->v[i]);
        return r;
    }
    if (obj.t == JV_STR) {
        const char *p = obj.u.s->p;
        size_t bytes = obj.u.s->n;
        int64_t n = (int64_t)ebb__utf8_len(p, bytes);
        int64_t i = slice_bound(c, a, n, step, true), e = slice_bound(c, b, n, step, false);
        struct jbuf out = {.c = c};
        if (step == 1 && i < e) {
            size_t ob = ebb__utf8_offset(p, bytes, (size_t)i);
            size_t oe = ebb__utf8_offset(p, bytes, (size_t)e);
            ebb__jbuf_put(&out, p + ob, oe - ob);
        } else {
            for (; step > 0 ? i < e : i > e; i += step) {
                size_t ob = ebb__utf8_offset(p, bytes, (size_t)i);
                size_t oe = ebb__utf8_offset(p, bytes, (size_t)i + 1);
                ebb__jbuf_put(&out, p + ob, oe - ob);
            }
        }
        return ebb__jbuf_take(&out);
    }
    if (obj.t == JV_UNDEF)
        ebb__jinja_fail(c, "'%s' is undefined (slicing it)", obj.u.undef ? obj.u.undef : "value");
    ebb__jinja_fail(c, "'%s' object is not subscriptable", ebb__jv_type_name(obj));
}

/* ---- operators ------------------------------------------------------------------------------ */

static _Noreturn void bad_operands(struct jctx *c, const char *op, struct jv a, struct jv b)
{
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) {
        struct jv u = a.t == JV_UNDEF ? a : b;
        ebb__jinja_fail(c, "'%s' is undefined (operand of '%s')", u.u.undef ? u.u.undef : "value",
                        op);
    }
    ebb__jinja_fail(c, "unsupported operand type(s) for %s: '%s' and '%s'", op,
                    ebb__jv_type_name(a), ebb__jv_type_name(b));
}

static bool is_intish(struct jv v)
{
    return v.t == JV_INT || v.t == JV_BOOL;
}

static int64_t ival(struct jv v)
{
    return v.t == JV_INT ? v.u.i : v.u.b;
}

static struct jv repeat(struct jctx *c, struct jv seq, int64_t k)
{
    if (k < 0)
        k = 0;
    if (seq.t == JV_STR) {
        if (seq.u.s->n && (uint64_t)k > c->max_output / seq.u.s->n)
            ebb__jinja_fail_err(c, EBB_ERANGE, "string repetition too large");
        struct jbuf b = {.c = c};
        for (int64_t i = 0; i < k; i++)
            ebb__jbuf_put(&b, seq.u.s->p, seq.u.s->n);
        return ebb__jbuf_take(&b);
    }
    if (seq.u.l->n && (uint64_t)k > (1u << 24) / seq.u.l->n)
        ebb__jinja_fail_err(c, EBB_ERANGE, "list repetition too large");
    struct jv r = ebb__jv_list(c, 0);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq.u.l->n; j++)
            ebb__jv_push(c, r, seq.u.l->v[j]);
    return r;
}

/* HTML escaping as markupsafe does it. */
static void escape_into(struct jbuf *b, const struct jstr *s)
{
    for (size_t i = 0; i < s->n; i++) {
        switch (s->p[i]) {
        case '&':
            ebb__jbuf_puts(b, "&amp;");
            break;
        case '<':
            ebb__jbuf_puts(b, "&lt;");
            break;
        case '>':
            ebb__jbuf_puts(b, "&gt;");
            break;
        case '"':
            ebb__jbuf_puts(b, "&#34;");
            break;
        case '\'':
            ebb__jbuf_puts(b, "&#39;");
            break;
        default:
            ebb__jbuf_put(b, s->p + i, 1);
        }
    }
}

/* Markup + str escapes the plain side and stays Markup (templates hit this after |safe). */
static struct jv markup_concat(struct jctx *c, struct jv a, struct jv b)
{
    struct jbuf buf = {.c = c};
    if (a.u.s->safe)
        ebb__jbuf_put(&buf, a.u.s->p, a.u.s->n);
    else
        escape_into(&buf, a.u.s);
    if (b.u.s->safe)
        ebb__jbuf_put(&buf, b.u.s->p, b.u.s->n);
    else
        escape_into(&buf, b.u.s);
    struct jv r = ebb__jbuf_take(&buf);
    r.u.s->safe = true;
    return r;
}

static struct jv arith(struct jctx *c, const char *op, struct jv a, struct jv b)
{
    if (op[0] == '~') {
        struct jbuf buf = {.c = c};
        ebb__jv_to_str(&buf, a);
        ebb__jv_to_str(&buf, b);
        return ebb__jbuf_take(&buf);
    }
    if (op[0] == '+' && a.t == b.t &&
        (a.t == JV_STR || (a.t == JV_LIST && !a.u.l->gen && !b.u.l->gen))) {
        if (a.t == JV_STR && (a.u.s->safe || b.u.s->safe))
            return markup_concat(c, a, b);
        if (a.t == JV_STR) {
            struct jbuf buf = {.c = c};
            ebb__jbuf_put(&buf, a.u.s->p, a.u.s->n);
            ebb__jbuf_put(&buf, b.u.s->p, b.u.s->n);
            return ebb__jbuf_take(&buf);
        }
        struct jv r = ebb__jv_list(c, a.u.l->n + b.u.l->n);
        for (size_t i = 0; i < a.u.l->n; i++)
            ebb__jv_push(c, r, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++)
            ebb__jv_push(c, r, b.u.l->v[i]);
        return r;
    }
    if (op[0] == '*' && !op[1]) {
        if ((a.t == JV_STR || a.t == JV_LIST) && is_intish(b))
            return repeat(c, a, ival(b));
        if ((b.t == JV_STR || b.t == JV_LIST) && is_intish(a))
            return repeat(c, b, ival(a));
    }
    if (op[0] == '%' && a.t == JV_STR)
        ebb__jinja_fail(c, "printf-style '%%' string formatting is not supported");
    if (!ebb__jv_is_num(a) || !ebb__jv_is_num(b))
        bad_operands(c, op, a, b);
    if (is_intish(a) && is_intish(b) && strcmp(op, "/")) {
        int64_t x = ival(a), y = ival(b), r = 0;
        switch (op[0]) {
        case '+':
            if (__builtin_add_overflow(x, y, &r))
                goto overflow;
            return jv_int(r);
        case '-':
            if (__builtin_sub_overflow(x, y, &r))
                goto overflow;
            return jv_int(r);
        case '*':
            if (op[1] == '*') {
                if (y < 0)
                    return jv_float(pow((double)x, (double)y));
                r = 1;
                for (int64_t i = 0; i < y; i++) {
                    if (__builtin_mul_overflow(r, x, &r))
                        goto overflow;
                    if (r == 0 || r == 1)
                        break;
                }
                return jv_int(r);
            }
            if (__builtin_mul_overflow(x, y, &r))
                goto overflow;
            return jv_int(r);
        case '/': /* // */
        case '%':
            if (y == 0)
                ebb__jinja_fail(c, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1)
                goto overflow;
            r = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0)))
                r--;
            return op[0] == '%' ? jv_int(x - r * y) : jv_int(r);
        }
    overflow:
        ebb__jinja_fail(c, "integer overflow in '%s'", op);
    }
    double x = ebb__jv_num(a), y = ebb__jv_num(b);
    switch (op[0]) {
    case '+':
        return jv_float(x + y);
    case '-':
        return jv_float(x - y);
    case '*':
        return jv_float(op[1] == '*' ? pow(x, y) : x * y);
    case '/':
        if (y == 0)
            ebb__jinja_fail(c, "division by zero");
        return jv_float(op[1] == '/' ? floor(x / y) : x / y);
    case '%': {
        if (y == 0)
            ebb__jinja_fail(c, "float modulo by zero");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0)))
            m += y;
        return jv_float(m);
    }
    }
    bad_operands(c, op, a, b);
}

static bool contains(struct jctx *c, struct jv hay, struct jv needle)
{
    switch (hay.t) {
    case JV_STR:
        if (needle.t != JV_STR)
            ebb__jinja_fail(c, "'in <string>' requires string as left operand, not %s",
                            ebb__jv_type_name(needle));
        if (!needle.u.s->n)
            return true;
        return memmem(hay.u.s->p, hay.u.s->n, needle.u.s->p, needle.u.s->n) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (ebb__jv_equal(hay.u.l->v[i], needle))
                return true;
        return false;
    case JV_DICT:
        return hay.u.d->ns ? false : ebb__jv_dict_get(hay, needle) != NULL;
    case JV_UNDEF:
        return false;
    default:
        ebb__jinja_fail(c, "argument of type '%s' is not iterable", ebb__jv_type_name(hay));
    }
}

static bool compare(struct jctx *c, const char *op, struct jv a, struct jv b)
{
    if (!strcmp(op, "=="))
        return ebb__jv_equal(a, b);
    if (!strcmp(op, "!="))
        return !ebb__jv_equal(a, b);
    if (!strcmp(op, "in"))
        return contains(c, b, a);
    if (!strcmp(op, "nin"))
        return !contains(c, b, a);
    if (a.t == JV_UNDEF || b.t == JV_UNDEF)
        bad_operands(c, op, a, b);
    int r = ebb__jv_compare(c, a, b);
    if (!strcmp(op, "<"))
        return r < 0;
    if (!strcmp(op, "<="))
        return r <= 0;
    if (!strcmp(op, ">"))
        return r > 0;
    return r >= 0;
}

/* ---- expressions ---------------------------------------------------------------------------- */

struct env {
    struct jframe *f;
    struct jv block_value; /* the captured text a filter block or set block filters */
};

static struct jv eval(struct jctx *c, struct env *e, const struct jx *x);

static void eval_args(struct jctx *c, struct env *e, const struct jx *x, struct jcall *call)
{
    memset(call, 0, sizeof(*call));
    call->line = x->line;
    call->n_pos = x->n_args;
    if (x->n_args) {
        call->pos = ebb__jinja_alloc(c, x->n_args * sizeof(*call->pos));
        for (size_t i = 0; i < x->n_args; i++)
            call->pos[i] = eval(c, e, x->args[i]);
    }
    call->n_kw = x->n_kw;
    call->kw_names = x->kw_names;
    if (x->n_kw) {
        call->kw = ebb__jinja_alloc(c, x->n_kw * sizeof(*call->kw));
        for (size_t i = 0; i < x->n_kw; i++)
            call->kw[i] = eval(c, e, x->kw[i]);
    }
}

static void exec_body(struct jctx *c, struct env *e, const struct js *s);

static struct jv call_macro(struct jctx *c, const struct jmacro *m, struct jcall *call)
{
    const struct js *def = m->def;
    if (++c->depth > c->max_depth)
        ebb__jinja_fail_err(c, EBB_ERANGE, "macro calls nested deeper than %u", c->max_depth);
    struct env me = {.f = frame_new(c, m->scope)};
    struct jv varargs = ebb__jv_list(c, 0), kwargs = ebb__jv_dict(c, 0);
    bool *set = ebb__jinja_alloc(c, def->n_names + 1);
    for (size_t i = 0; i < call->n_pos; i++) {
        if (i < def->n_names) {
            frame_set(c, me.f, def->names[i], call->pos[i]);
            set[i] = true;
        } else {
            ebb__jv_push(c, varargs, call->pos[i]);
        }
    }
    for (size_t k = 0; k < call->n_kw; k++) {
        size_t i = 0;
        while (i < def->n_names && strcmp(def->names[i], call->kw_names[k]))
            i++;
        if (i < def->n_names) {
            frame_set(c, me.f, def->names[i], call->kw[k]);
            set[i] = true;
        } else {
            ebb__jv_dict_set(c, kwargs, ebb__jv_cstr(c, call->kw_names[k]), call->kw[k]);
        }
    }
    for (size_t i = 0; i < def->n_names; i++) {
        if (set[i])
            continue;
        struct jv v = jv_undef(def->names[i]);
        if (def->defaults && def->defaults[i])
            v = eval(c, &me, def->defaults[i]);
        frame_set(c, me.f, def->names[i], v);
    }
    frame_set(c, me.f, "varargs", varargs);
    frame_set(c, me.f, "kwargs", kwargs);
    if (m->caller) {
        struct jv cv = {.t = JV_MACRO};
        cv.u.m = m->caller;
        frame_set(c, me.f, "caller", cv);
    }
    struct jbuf out = {.c = c}, *saved = c->outb;
    int saved_line = c->line;
    c->outb = &out;
    exec_body(c, &me, def->body);
    c->outb = saved;
    c->line = saved_line;
    c->brk = 0;
    c->depth--;
    return ebb__jbuf_take(&out);
}

struct jv ebb__jinja_call(struct jctx *c, struct jv f, struct jcall *call)
{
    if (f.t == JV_FUNC)
        return f.u.fn->fn(c, f.u.fn->self ? *f.u.fn->self : jv_none(), call);
    if (f.t == JV_MACRO)
        return call_macro(c, f.u.m, call);
    if (f.t == JV_UNDEF)
        ebb__jinja_fail(c, "'%s' is undefined (called as a function)",
                        f.u.undef ? f.u.undef : "value");
    ebb__jinja_fail(c, "'%s' object is not callable", ebb__jv_type_name(f));
}

static struct jv eval(struct jctx *c, struct env *e, const struct jx *x)
{
    step(c, x->line);
    switch (x->kind) {
    case JX_LIT:
        return x->lit;
    case JX_NAME:
        return lookup(c, e->f, x->name);
    case JX_LIST:
    case JX_TUPLE: {
        struct jv l = ebb__jv_list(c, x->n_args);
        for (size_t i = 0; i < x->n_args; i++)
            ebb__jv_push(c, l, eval(c, e, x->args[i]));
        l.u.l->tuple = x->kind == JX_TUPLE;
        return l;
    }
    case JX_DICT: {
        struct jv d = ebb__jv_dict(c, x->n_args / 2);
        for (size_t i = 0; i + 1 < x->n_args; i += 2) {
            struct jv k = eval(c, e, x->args[i]);
            if (k.t == JV_LIST || k.t == JV_DICT || k.t == JV_UNDEF)
                ebb__jinja_fail(c, "unhashable dict key of type '%s'", ebb__jv_type_name(k));
            ebb__jv_dict_set(c, d, k, eval(c, e, x->args[i + 1]));
        }
        return d;
    }
    case JX_ATTR:
        return get_attr(c, eval(c, e, x->a), x->name);
    case JX_ITEM: {
        struct jv obj = eval(c, e, x->a);
        return get_item(c, obj, eval(c, e, x->b));
    }
    case JX_SLICE: {
        struct jv obj = eval(c, e, x->a);
        struct jv a = x->b ? eval(c, e, x->b) : jv_none();
        struct jv b = x->c ? eval(c, e, x->c) : jv_none();
        struct jv s = x->args[0] ? eval(c, e, x->args[0]) : jv_none();
        return do_slice(c, obj, a, b, s);
    }
    case JX_CALL: {
        struct jv f = eval(c, e, x->a);
        struct jcall call;
        eval_args(c, e, x, &call);
        c->line = x->line;
        return ebb__jinja_call(c, f, &call);
    }
    case JX_FILTER: {
        struct jv v = x->a ? eval(c, e, x->a) : e->block_value;
        struct jcall call;
        eval_args(c, e, x, &call);
        c->line = x->line;
        if (!x->filter)
            ebb__jinja_fail_err(c, EBB_EUNSUPPORTED, "unknown filter '%s'", x->name);
        return x->filter->fn(c, v, &call);
    }
    case JX_TEST: {
        struct jv v = eval(c, e, x->a);
        struct jcall call;
        eval_args(c, e, x, &call);
        c->line = x->line;
        if (!x->test)
            ebb__jinja_fail_err(c, EBB_EUNSUPPORTED, "unknown test '%s'", x->name);
        return jv_bool(x->test->fn(c, v, &call) != x->negate);
    }
    case JX_NOT:
        return jv_bool(!ebb__jv_truthy(eval(c, e, x->a)));
    case JX_NEG:
    case JX_POS: {
        struct jv v = eval(c, e, x->a);
        if (v.t == JV_INT || v.t == JV_BOOL) {
            int64_t i = ival(v);
            if (x->kind == JX_NEG && i == INT64_MIN)
                ebb__jinja_fail(c, "integer overflow in unary '-'");
            return jv_int(x->kind == JX_NEG ? -i : i);
        }
        if (v.t == JV_FLOAT)
            return jv_float(x->kind == JX_NEG ? -v.u.f : v.u.f);
        ebb__jinja_fail(c, "bad operand type for unary %s: '%s'", x->kind == JX_NEG ? "-" : "+",
                        ebb__jv_type_name(v));
    }
    case JX_BIN: {
        struct jv a = eval(c, e, x->a);
        struct jv b = eval(c, e, x->b);
        c->line = x->line;
        return arith(c, x->op, a, b);
    }
    case JX_AND: {
        struct jv a = eval(c, e, x->a);
        return ebb__jv_truthy(a) ? eval(c, e, x->b) : a;
    }
    case JX_OR: {
        struct jv a = eval(c, e, x->a);
        return ebb__jv_truthy(a) ? a : eval(c, e, x->b);
    }
    case JX_CMP: {
        struct jv a = eval(c, e, x->a);
        struct jv b = eval(c, e, x->b);
        c->line = x->line;
        return jv_bool(compare(c, x->op, a, b));
    }
    case JX_COND:
        if (ebb__jv_truthy(eval(c, e, x->a)))
            return eval(c, e, x->b);
        return x->c ? eval(c, e, x->c) : jv_undef("conditional expression");
    }
    ebb__jinja_fail(c, "bad expression");
}

/* ---- statements ----------------------------------------------------------------------------- */

/* The items a for loop walks: a list's items, a dict's keys, a string's characters. */
static struct jv iterable(struct jctx *c, struct jv v)
{
    switch (v.t) {
    case JV_UNDEF:
        return ebb__jv_list(c, 0);
    case JV_LIST:
        return v;
    case JV_DICT: {
        if (v.u.d->ns)
            break;
        struct jv l = ebb__jv_list(c, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++)
            ebb__jv_push(c, l, v.u.d->k[i]);
        return l;
    }
    case JV_STR: {
        struct jv l = ebb__jv_list(c, 0);
        const char *p = v.u.s->p;
        for (size_t i = 0; i < v.u.s->n;) {
            size_t k = 1;
            while (i + k < v.u.s->n && ((unsigned char)p[i + k] & 0xc0) == 0x80)
                k++;
            ebb__jv_push(c, l, ebb__jv_str(c, p + i, k));
            i += k;
        }
        return l;
    }
    default:
        break;
    }
    ebb__jinja_fail(c, "'%s' object is not iterable", ebb__jv_type_name(v));
}

static void assign(struct jctx *c, struct jframe *f, const char *const *names, size_t n,
                   struct jv v)
{
    if (n == 1) {
        frame_set(c, f, names[0], v);
        return;
    }
    struct jv items = iterable(c, v);
    if (items.u.l->n != n)
        ebb__jinja_fail(c, "cannot unpack %zu values into %zu names", items.u.l->n, n);
    for (size_t i = 0; i < n; i++)
        frame_set(c, f, names[i], items.u.l->v[i]);
}

static void set_key(struct jctx *c, struct jv d, const char *k, struct jv v)
{
    ebb__jv_dict_set(c, d, ebb__jv_cstr(c, k), v);
}

static void exec_for(struct jctx *c, struct env *e, const struct js *s)
{
    struct jv all = iterable(c, eval(c, e, s->e));
    struct jv items = all;
    if (s->cond) {
        items = ebb__jv_list(c, 0);
        for (size_t i = 0; i < all.u.l->n; i++) {
            struct env ce = {.f = frame_new(c, e->f)};
            assign(c, ce.f, s->names, s->n_names, all.u.l->v[i]);
            if (ebb__jv_truthy(eval(c, &ce, s->cond)))
                ebb__jv_push(c, items, all.u.l->v[i]);
        }
    }
    size_t n = items.u.l->n;
    for (size_t i = 0; i < n; i++) {
        step(c, s->line);
        struct env ie = {.f = frame_new(c, e->f)};
        assign(c, ie.f, s->names, s->n_names, items.u.l->v[i]);
        struct jv loop = ebb__jv_dict(c, 12);
        set_key(c, loop, "index", jv_int((int64_t)i + 1));
        set_key(c, loop, "index0", jv_int((int64_t)i));
        set_key(c, loop, "revindex", jv_int((int64_t)(n - i)));
        set_key(c, loop, "revindex0", jv_int((int64_t)(n - i - 1)));
        set_key(c, loop, "first", jv_bool(i == 0));
        set_key(c, loop, "last", jv_bool(i + 1 == n));
        set_key(c, loop, "length", jv_int((int64_t)n));
        set_key(c, loop, "depth", jv_int(1));
        set_key(c, loop, "depth0", jv_int(0));
        if (i > 0)
            set_key(c, loop, "previtem", items.u.l->v[i - 1]);
        if (i + 1 < n)
            set_key(c, loop, "nextitem", items.u.l->v[i + 1]);
        frame_set(c, ie.f, "loop", loop);
        exec_body(c, &ie, s->body);
        int brk = c->brk;
        c->brk = 0;
        if (brk == 1)
            break;
    }
    if (n == 0 && s->orelse)
        exec_body(c, e, s->orelse);
}

static struct jv capture(struct jctx *c, struct env *e, const struct js *body)
{
    struct jbuf out = {.c = c}, *saved = c->outb;
    c->outb = &out;
    exec_body(c, e, body);
    c->outb = saved;
    return ebb__jbuf_take(&out);
}

static void exec_stmt(struct jctx *c, struct env *e, const struct js *s)
{
    step(c, s->line);
    switch (s->kind) {
    case JS_TEXT:
        emit(c, s->text, s->n);
        return;
    case JS_OUT: {
        struct jv v = eval(c, e, s->e);
        struct jbuf *b = c->outb;
        size_t before = b->n;
        ebb__jv_to_str(b, v);
        if (b->n > c->max_output) {
            b->n = before;
            emit(c, "", c->max_output + 1); /* fails with the size message */
        }
        return;
    }
    case JS_IF:
        for (const struct js *br = s;;) {
            c->line = br->line;
            if (ebb__jv_truthy(eval(c, e, br->e))) {
                exec_body(c, e, br->body);
                return;
            }
            if (br->orelse && br->orelse->elif) {
                br = br->orelse;
                continue;
            }
            exec_body(c, e, br->orelse);
            return;
        }
    case JS_FOR:
        exec_for(c, e, s);
        return;
    case JS_SET: {
        struct jv v = eval(c, e, s->e);
        c->line = s->line;
        if (s->attr) {
            struct jv ns = lookup(c, e->f, s->names[0]);
            if (ns.t != JV_DICT || !ns.u.d->ns)
                ebb__jinja_fail(c,
                                "cannot assign attribute '%s' on '%s', which is not a "
                                "namespace",
                                s->attr, s->names[0]);
            set_key(c, ns, s->attr, v);
        } else {
            assign(c, e->f, s->names, s->n_names, v);
        }
        return;
    }
    case JS_SET_BLOCK: {
        struct jv v = capture(c, e, s->body);
        if (s->e) {
            struct env fe = {.f = e->f, .block_value = v};
            v = eval(c, &fe, s->e);
        }
        frame_set(c, e->f, s->names[0], v);
        return;
    }
    case JS_MACRO: {
        struct jmacro *m = ebb__jinja_alloc(c, sizeof(*m));
        m->def = s;
        m->scope = e->f;
        struct jv mv = {.t = JV_MACRO};
        mv.u.m = m;
        frame_set(c, e->f, s->name, mv);
        return;
    }
    case JS_CALL_BLOCK: {
        struct jmacro *body = ebb__jinja_alloc(c, sizeof(*body));
        body->def = s;
        body->scope = e->f;
        struct jv f = eval(c, e, s->e->a);
        if (f.t != JV_MACRO)
            ebb__jinja_fail(c, "a call block needs a macro, got '%s'", ebb__jv_type_name(f));
        struct jmacro m = *f.u.m;
        m.caller = body;
        struct jcall call;
        eval_args(c, e, s->e, &call);
        struct jv out = call_macro(c, &m, &call);
        emit(c, out.u.s->p, out.u.s->n);
        return;
    }
    case JS_FILTER_BLOCK: {
        struct env fe = {.f = e->f, .block_value = capture(c, e, s->body)};
        struct jv v = ebb__jv_string(c, eval(c, &fe, s->e));
        emit(c, v.u.s->p, v.u.s->n);
        return;
    }
    case JS_BREAK:
        c->brk = 1;
        return;
    case JS_CONTINUE:
        c->brk = 2;
        return;
    case JS_BODY:
        exec_body(c, e, s->body);
        return;
    }
}

static void exec_body(struct jctx *c, struct env *e, const struct js *s)
{
    for (; s && !c->brk; s = s->next)
        exec_stmt(c, e, s);
}

/* ---- entry points --------------------------------------------------------------------------- */

ebb_err ebb_jinja_parse(const char *src, size_t n, struct ebb_jinja **out, struct ebb_diag *diag)
{
    struct ebb_jinja *t = calloc(1, sizeof(*t));
    if (!t)
        return EBB_ENOMEM;
    t->arena.limit = 64u << 20;
    struct jtoks toks = {0};
    ebb_err rc = ebb__jinja_lex(src, n, &t->arena, &toks, diag);
    if (!rc)
        rc = ebb__jinja_parse_toks(t, &toks, diag);
    if (rc) {
        if (rc == EBB_ENOMEM)
            ebb_diag_set(diag, rc, "out of memory parsing the chat template");
        ebb_jinja_free(t);
        return rc;
    }
    *out = t;
    return EBB_OK;
}

void ebb_jinja_free(struct ebb_jinja *t)
{
    if (!t)
        return;
    ebb__jarena_fini(&t->arena);
    free(t);
}

static ebb_err render_root(struct jctx *c, const struct ebb_jinja *t, const json_t *vars,
                           char **out, size_t *out_len)
{
    c->globals = frame_new(c, NULL);
    if (vars && json_is_object(vars)) {
        struct jv d = ebb__jv_from_json(c, vars);
        c->globals->vars = *d.u.d;
    }
    c->top = frame_new(c, c->globals);
    struct jbuf result = {.c = c};
    c->outb = &result;
    struct env e = {.f = c->top};
    exec_body(c, &e, t->root);
    char *s = malloc(result.n + 1);
    if (!s)
        return EBB_ENOMEM;
    if (result.n)
        memcpy(s, result.p, result.n);
    s[result.n] = 0;
    *out = s;
    *out_len = result.n;
    return EBB_OK;
}

ebb_err ebb_jinja_render(const struct ebb_jinja *t, const json_t *vars, const struct tm *now,
                         const struct ebb_jinja_limits *limits, char **out, size_t *out_len,
                         struct ebb_diag *diag)
{
    /* On the heap: longjmp leaves this frame's modified locals indeterminate. */
    struct jctx *c = calloc(1, sizeof(*c));
    if (!c)
        return EBB_ENOMEM;
    struct ebb_jinja_limits lim = limits ? *limits : (struct ebb_jinja_limits){0};
    c->arena.limit = lim.max_memory ? lim.max_memory : 256u << 20;
    c->max_output = lim.max_output ? lim.max_output : 16u << 20;
    c->max_steps = lim.max_steps ? lim.max_steps : 50000000;
    c->max_depth = lim.max_depth ? lim.max_depth : 64;
    if (now) {
        c->now = *now;
    } else {
        time_t tt = time(NULL);
        localtime_r(&tt, &c->now);
    }
    ebb_err rc;
    if (setjmp(c->fail)) {
        rc = c->err ? c->err : EBB_EINVAL;
        ebb_diag_set(diag, rc, "%s", c->msg);
    } else {
        rc = render_root(c, t, vars, out, out_len);
    }
    ebb__jarena_fini(&c->arena);
    free(c);
    return rc;
}
