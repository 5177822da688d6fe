/* Jinja tests (`x is defined`, `x is mapping`, ...) with Jinja2's meaning, also applied by name
 * by select, reject, selectattr and rejectattr. */
#include "jinja-int.h"

#include <string.h>

/* ---- tests ---------------------------------------------------------------------------------- */

static struct jv targ(struct jctx *c, struct jcall *call, const char *test)
{
    if (!call->n_pos)
        ebb__jinja_fail(c, "test '%s' needs an argument", test);
    return call->pos[0];
}

#define TEST(name) static bool t_##name(struct jctx *c, struct jv v, struct jcall *call)
TEST(defined)
{
    (void)c, (void)call;
    return v.t != JV_UNDEF;
}
TEST(undefined)
{
    (void)c, (void)call;
    return v.t == JV_UNDEF;
}
TEST(none)
{
    (void)c, (void)call;
    return v.t == JV_NONE;
}
TEST(string)
{
    (void)c, (void)call;
    return v.t == JV_STR;
}
TEST(number)
{
    (void)c, (void)call;
    return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}
TEST(integer)
{
    (void)c, (void)call;
    return v.t == JV_INT;
}
TEST(float)
{
    (void)c, (void)call;
    return v.t == JV_FLOAT;
}
TEST(boolean)
{
    (void)c, (void)call;
    return v.t == JV_BOOL;
}
TEST(true)
{
    (void)c, (void)call;
    return v.t == JV_BOOL && v.u.b;
}
TEST(false)
{
    (void)c, (void)call;
    return v.t == JV_BOOL && !v.u.b;
}
TEST(mapping)
{
    (void)c, (void)call;
    return v.t == JV_DICT && !v.u.d->ns;
}
TEST(iterable)
{
    (void)c, (void)call;
    return v.t == JV_STR || v.t == JV_LIST || (v.t == JV_DICT && !v.u.d->ns) || v.t == JV_UNDEF;
}
TEST(sequence)
{
    (void)c, (void)call;
    return v.t == JV_STR || (v.t == JV_LIST && !v.u.l->gen) || (v.t == JV_DICT && !v.u.d->ns);
}
TEST(callable)
{
    (void)c, (void)call;
    return v.t == JV_FUNC || v.t == JV_MACRO;
}
TEST(odd)
{
    (void)call;
    if (v.t != JV_INT)
        ebb__jinja_fail(c, "test 'odd' needs an integer");
    return v.u.i % 2 != 0;
}
TEST(even)
{
    (void)call;
    if (v.t != JV_INT)
        ebb__jinja_fail(c, "test 'even' needs an integer");
    return v.u.i % 2 == 0;
}
TEST(divisibleby)
{
    struct jv d = targ(c, call, "divisibleby");
    if (v.t != JV_INT || d.t != JV_INT || d.u.i == 0)
        ebb__jinja_fail(c, "test 'divisibleby' needs non-zero integers");
    return v.u.i % d.u.i == 0;
}
TEST(eq)
{
    return ebb__jv_equal(v, targ(c, call, "eq"));
}
TEST(ne)
{
    return !ebb__jv_equal(v, targ(c, call, "ne"));
}
TEST(lt)
{
    return ebb__jv_compare(c, v, targ(c, call, "lt")) < 0;
}
TEST(le)
{
    return ebb__jv_compare(c, v, targ(c, call, "le")) <= 0;
}
TEST(gt)
{
    return ebb__jv_compare(c, v, targ(c, call, "gt")) > 0;
}
TEST(ge)
{
    return ebb__jv_compare(c, v, targ(c, call, "ge")) >= 0;
}
TEST(in)
{
    struct jv hay = targ(c, call, "in");
    if (hay.t == JV_STR && v.t == JV_STR)
        return !v.u.s->n || memmem(hay.u.s->p, hay.u.s->n, v.u.s->p, v.u.s->n) != NULL;
    if (hay.t == JV_LIST) {
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (ebb__jv_equal(hay.u.l->v[i], v))
                return true;
        return false;
    }
    if (hay.t == JV_DICT)
        return ebb__jv_dict_get(hay, v) != NULL;
    ebb__jinja_fail(c, "test 'in' needs a container");
}
TEST(sameas)
{
    struct jv o = targ(c, call, "sameas");
    if (v.t != o.t)
        return false;
    switch (v.t) {
    case JV_NONE:
    case JV_UNDEF:
        return true;
    case JV_BOOL:
        return v.u.b == o.u.b;
    case JV_INT:
        return v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython's small ints */
    case JV_STR:
        return v.u.s == o.u.s;
    case JV_LIST:
        return v.u.l == o.u.l;
    case JV_DICT:
        return v.u.d == o.u.d;
    default:
        return ebb__jv_equal(v, o);
    }
}
TEST(lower)
{
    (void)call;
    if (v.t != JV_STR)
        ebb__jinja_fail(c, "test 'lower' needs a string");
    for (size_t i = 0; i < v.u.s->n; i++)
        if (v.u.s->p[i] >= 'A' && v.u.s->p[i] <= 'Z')
            return false;
    return true;
}
TEST(upper)
{
    (void)call;
    if (v.t != JV_STR)
        ebb__jinja_fail(c, "test 'upper' needs a string");
    for (size_t i = 0; i < v.u.s->n; i++)
        if (v.u.s->p[i] >= 'a' && v.u.s->p[i] <= 'z')
            return false;
    return true;
}
#undef TEST

static const struct jtest_def tests[] = {
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"none", t_none},
    {"string", t_string},
    {"number", t_number},
    {"integer", t_integer},
    {"float", t_float},
    {"boolean", t_boolean},
    {"true", t_true},
    {"false", t_false},
    {"mapping", t_mapping},
    {"iterable", t_iterable},
    {"sequence", t_sequence},
    {"callable", t_callable},
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"ne", t_ne},
    {"!=", t_ne},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<", t_lt},
    {"le", t_le},
    {"<=", t_le},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {">", t_gt},
    {"ge", t_ge},
    {">=", t_ge},
    {"in", t_in},
    {"sameas", t_sameas},
    {"lower", t_lower},
    {"upper", t_upper},
};

const struct jtest_def *ebb__jinja_test(const char *name)
{
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
        if (!strcmp(tests[i].name, name))
            return &tests[i];
    return NULL;
}

bool ebb__jinja_apply_test(struct jctx *c, const char *name, struct jv v, struct jv *args,
                           size_t n_args)
{
    const struct jtest_def *t = ebb__jinja_test(name);
    if (!t)
        ebb__jinja_fail(c, "unknown test '%s'", name);
    struct jcall call = {.pos = args, .n_pos = n_args, .line = c->line};
    return t->fn(c, v, &call);
}
