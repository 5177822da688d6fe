/* Python methods of strings, dicts and lists that chat templates call (message.content.strip(),
 * tool.get('name'), '{}'.format(x), ...), and the global functions (range, namespace, dict,
 * raise_exception, strftime_now). Methods that would change a list or dict in place fail as
 * they do in Hugging Face's immutable sandbox. */
#include "jinja-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct jv arg(struct jcall *call, size_t i, struct jv def)
{
    return i < call->n_pos ? call->pos[i] : def;
}

static struct jv kwarg(struct jcall *call, size_t i, const char *name, struct jv def)
{
    if (i < call->n_pos)
        return call->pos[i];
    for (size_t k = 0; k < call->n_kw; k++)
        if (!strcmp(call->kw_names[k], name))
            return call->kw[k];
    return def;
}

static struct jstr *need_str(struct jctx *c, struct jv v, const char *what)
{
    if (v.t != JV_STR)
        ebb__jinja_fail(c, "%s must be a string, not %s", what, ebb__jv_type_name(v));
    return v.u.s;
}

/* ---- strings -------------------------------------------------------------------------------- */

#define METHOD(name) static struct jv m_##name(struct jctx *c, struct jv self, struct jcall *call)

METHOD(strip)
{
    return ebb__jinja_strip(c, self, arg(call, 0, jv_none()), true, true);
}
METHOD(lstrip)
{
    return ebb__jinja_strip(c, self, arg(call, 0, jv_none()), true, false);
}
METHOD(rstrip)
{
    return ebb__jinja_strip(c, self, arg(call, 0, jv_none()), false, true);
}

static struct jv split(struct jctx *c, struct jv self, struct jcall *call, bool from_right)
{
    struct jv sepv = kwarg(call, 0, "sep", jv_none());
    struct jv maxv = kwarg(call, 1, "maxsplit", jv_int(-1));
    int64_t max = maxv.t == JV_INT ? maxv.u.i : -1;
    const char *p = self.u.s->p;
    size_t n = self.u.s->n;
    struct jv out = ebb__jv_list(c, 0);
    if (sepv.t == JV_NONE) {
        /* Runs of whitespace (str.isspace: Unicode's) separate; none at either end count. */
        if (!from_right) {
            size_t i = 0;
            while (i < n) {
                for (size_t k; i < n && (k = ebb__py_space_at(p, n, i));)
                    i += k;
                if (i >= n)
                    break;
                if (max >= 0 && (int64_t)out.u.l->n >= max) {
                    /* The rest as it is: Python keeps its trailing whitespace. */
                    ebb__jv_push(c, out, ebb__jv_str(c, p + i, n - i));
                    break;
                }
                size_t b = i;
                while (i < n && !ebb__py_space_at(p, n, i))
                    i++; /* bytewise: no whitespace is seen inside a character */
                ebb__jv_push(c, out, ebb__jv_str(c, p + b, i - b));
            }
            return out;
        }
        struct jv rev = ebb__jv_list(c, 0);
        size_t i = n;
        while (i > 0) {
            for (size_t k; i > 0 && (k = ebb__py_space_before(p, i));)
                i -= k;
            if (i == 0)
                break;
            if (max >= 0 && (int64_t)rev.u.l->n >= max) {
                ebb__jv_push(c, rev, ebb__jv_str(c, p, i)); /* leading whitespace kept */
                break;
            }
            size_t e = i;
            while (i > 0 && !ebb__py_space_before(p, i))
                i--;
            ebb__jv_push(c, rev, ebb__jv_str(c, p + i, e - i));
        }
        for (size_t k = rev.u.l->n; k-- > 0;)
            ebb__jv_push(c, out, rev.u.l->v[k]);
        return out;
    }
    struct jstr *sep = need_str(c, sepv, "split's separator");
    if (!sep->n)
        ebb__jinja_fail(c, "empty separator");
    if (!from_right) {
        const char *q = p, *end = p + n;
        for (;;) {
            const char *hit = (max < 0 || (int64_t)out.u.l->n < max)
                                  ? memmem(q, (size_t)(end - q), sep->p, sep->n)
                                  : NULL;
            if (!hit) {
                ebb__jv_push(c, out, ebb__jv_str(c, q, (size_t)(end - q)));
                return out;
            }
            ebb__jv_push(c, out, ebb__jv_str(c, q, (size_t)(hit - q)));
            q = hit + sep->n;
        }
    }
    struct jv rev = ebb__jv_list(c, 0);
    size_t e = n;
    for (;;) {
        size_t hit = SIZE_MAX;
        if ((max < 0 || (int64_t)rev.u.l->n < max) && e >= sep->n) {
            for (size_t k = e - sep->n + 1; k-- > 0;) {
                if (!memcmp(p + k, sep->p, sep->n)) {
                    hit = k;
                    break;
                }
            }
        }
        if (hit == SIZE_MAX) {
            ebb__jv_push(c, rev, ebb__jv_str(c, p, e));
            break;
        }
        ebb__jv_push(c, rev, ebb__jv_str(c, p + hit + sep->n, e - hit - sep->n));
        e = hit;
    }
    for (size_t k = rev.u.l->n; k-- > 0;)
        ebb__jv_push(c, out, rev.u.l->v[k]);
    return out;
}

METHOD(split)
{
    return split(c, self, call, false);
}
METHOD(rsplit)
{
    return split(c, self, call, true);
}

METHOD(splitlines)
{
    (void)call;
    struct jv out = ebb__jv_list(c, 0);
    const char *p = self.u.s->p;
    size_t n = self.u.s->n, b = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n' || p[i] == '\r') {
            ebb__jv_push(c, out, ebb__jv_str(c, p + b, i - b));
            if (p[i] == '\r' && i + 1 < n && p[i + 1] == '\n')
                i++;
            b = i + 1;
        }
    }
    if (b < n)
        ebb__jv_push(c, out, ebb__jv_str(c, p + b, n - b));
    return out;
}

static bool affix(struct jctx *c, struct jv self, struct jcall *call, bool end)
{
    struct jv a = arg(call, 0, jv_none());
    if (call->n_pos > 1)
        ebb__jinja_fail(c, "startswith/endswith with start or end positions");
    size_t n = self.u.s->n;
    if (a.t == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n; i++) {
            struct jstr *x = need_str(c, a.u.l->v[i], "the prefix");
            if (x->n <= n && !memcmp(self.u.s->p + (end ? n - x->n : 0), x->p, x->n))
                return true;
        }
        return false;
    }
    struct jstr *x = need_str(c, a, end ? "endswith's suffix" : "startswith's prefix");
    return x->n <= n && !memcmp(self.u.s->p + (end ? n - x->n : 0), x->p, x->n);
}

METHOD(startswith)
{
    return jv_bool(affix(c, self, call, false));
}
METHOD(endswith)
{
    return jv_bool(affix(c, self, call, true));
}

METHOD(replace)
{
    struct jv cnt = arg(call, 2, jv_int(-1));
    return ebb__jinja_replace(c, self, arg(call, 0, jv_none()), arg(call, 1, jv_none()),
                              cnt.t == JV_INT ? cnt.u.i : -1);
}

static struct jv recase(struct jctx *c, struct jv self, int mode)
{
    struct jv r = ebb__jv_str(c, self.u.s->p, self.u.s->n);
    char *p = r.u.s->p;
    bool prev_cased = false;
    for (size_t i = 0; i < r.u.s->n; i++) {
        char ch = p[i];
        bool lower = ch >= 'a' && ch <= 'z', upper = ch >= 'A' && ch <= 'Z';
        bool up = mode == 0 || (mode == 2 && i == 0) || (mode == 3 && !prev_cased);
        if (up && lower)
            p[i] = (char)(ch - 32);
        else if (!up && upper)
            p[i] = (char)(ch + 32);
        prev_cased = lower || upper;
    }
    return r;
}

METHOD(upper)
{
    (void)call;
    return recase(c, self, 0);
}
METHOD(lower)
{
    (void)call;
    return recase(c, self, 1);
}
METHOD(capitalize)
{
    (void)call;
    return recase(c, self, 2);
}
METHOD(title)
{
    (void)call;
    return recase(c, self, 3);
}

/* Code-point index of needle in self (from the right with rev), or -1. */
static int64_t find(struct jctx *c, struct jv self, struct jcall *call, bool rev)
{
    if (call->n_pos > 1)
        ebb__jinja_fail(c, "find with start or end positions");
    struct jstr *x = need_str(c, arg(call, 0, jv_none()), "the substring");
    const char *p = self.u.s->p;
    size_t n = self.u.s->n;
    if (x->n > n)
        return -1;
    const char *hit = NULL;
    if (!rev) {
        hit = memmem(p, n, x->p, x->n);
    } else {
        for (size_t k = n - x->n + 1; k-- > 0 && !hit;)
            if (!memcmp(p + k, x->p, x->n))
                hit = p + k;
    }
    return hit ? (int64_t)ebb__utf8_len(p, (size_t)(hit - p)) : -1;
}

METHOD(find)
{
    return jv_int(find(c, self, call, false));
}
METHOD(rfind)
{
    return jv_int(find(c, self, call, true));
}
METHOD(index)
{
    int64_t i = find(c, self, call, false);
    if (i < 0)
        ebb__jinja_fail(c, "substring not found");
    return jv_int(i);
}

METHOD(count)
{
    struct jstr *x = need_str(c, arg(call, 0, jv_none()), "the substring");
    const char *p = self.u.s->p, *end = p + self.u.s->n;
    if (!x->n)
        return jv_int((int64_t)ebb__utf8_len(p, self.u.s->n) + 1);
    int64_t k = 0;
    for (const char *h; (h = memmem(p, (size_t)(end - p), x->p, x->n)); p = h + x->n)
        k++;
    return jv_int(k);
}

METHOD(join)
{
    struct jv items = arg(call, 0, jv_none());
    if (items.t != JV_LIST)
        ebb__jinja_fail(c, "join needs a list of strings");
    struct jbuf b = {.c = c};
    for (size_t i = 0; i < items.u.l->n; i++) {
        struct jstr *s = need_str(c, items.u.l->v[i], "each joined item");
        if (i)
            ebb__jbuf_put(&b, self.u.s->p, self.u.s->n);
        ebb__jbuf_put(&b, s->p, s->n);
    }
    return ebb__jbuf_take(&b);
}

static struct jv classify(struct jv self, int kind)
{
    size_t n = self.u.s->n;
    if (!n)
        return jv_bool(false);
    if (kind == 3) { /* str.isspace(): Unicode's whitespace */
        for (size_t i = 0, k; i < n; i += k)
            if (!(k = ebb__py_space_at(self.u.s->p, n, i)))
                return jv_bool(false);
        return jv_bool(true);
    }
    bool any_cased = false;
    for (size_t i = 0; i < n; i++) {
        char ch = self.u.s->p[i];
        bool d = ch >= '0' && ch <= '9', lo = ch >= 'a' && ch <= 'z', up = ch >= 'A' && ch <= 'Z';
        any_cased |= lo || up;
        bool ok = kind == 0   ? d
                  : kind == 1 ? lo || up
                  : kind == 2 ? d || lo || up
                  : kind == 4 ? !lo
                              : !up;
        if (!ok)
            return jv_bool(false);
    }
    return jv_bool(kind >= 4 ? any_cased : true);
}

METHOD(isdigit)
{
    (void)c, (void)call;
    return classify(self, 0);
}
METHOD(isalpha)
{
    (void)c, (void)call;
    return classify(self, 1);
}
METHOD(isalnum)
{
    (void)c, (void)call;
    return classify(self, 2);
}
METHOD(isspace)
{
    (void)c, (void)call;
    return classify(self, 3);
}
METHOD(isupper)
{
    (void)c, (void)call;
    return classify(self, 4);
}
METHOD(islower)
{
    (void)c, (void)call;
    return classify(self, 5);
}

METHOD(removeprefix)
{
    struct jstr *x = need_str(c, arg(call, 0, jv_none()), "the prefix");
    if (x->n <= self.u.s->n && !memcmp(self.u.s->p, x->p, x->n))
        return ebb__jv_str(c, self.u.s->p + x->n, self.u.s->n - x->n);
    return self;
}
METHOD(removesuffix)
{
    struct jstr *x = need_str(c, arg(call, 0, jv_none()), "the suffix");
    size_t n = self.u.s->n;
    if (x->n <= n && !memcmp(self.u.s->p + n - x->n, x->p, x->n))
        return ebb__jv_str(c, self.u.s->p, n - x->n);
    return self;
}

/* str.format with {}, {0}, {name} fields and !s / !r conversions (no format specs). */
METHOD(format)
{
    const char *p = self.u.s->p, *end = p + self.u.s->n;
    struct jbuf b = {.c = c};
    size_t auto_idx = 0;
    while (p < end) {
        if (*p == '{' && p + 1 < end && p[1] == '{') {
            ebb__jbuf_put(&b, "{", 1);
            p += 2;
            continue;
        }
        if (*p == '}' && p + 1 < end && p[1] == '}') {
            ebb__jbuf_put(&b, "}", 1);
            p += 2;
            continue;
        }
        if (*p != '{') {
            ebb__jbuf_put(&b, p, 1);
            p++;
            continue;
        }
        const char *close = memchr(p, '}', (size_t)(end - p));
        if (!close)
            ebb__jinja_fail(c, "format: single '{' encountered in format string");
        const char *f = p + 1;
        size_t fn = (size_t)(close - f);
        char conv = 0;
        const char *bang = memchr(f, '!', fn), *colon = memchr(f, ':', fn);
        if (colon && (!bang || colon < bang)) {
            if (colon + 1 != close)
                ebb__jinja_fail(c, "format: format specifications are not supported");
            fn = (size_t)(colon - f);
        }
        if (bang && (!colon || bang < colon)) {
            conv = bang + 1 < close ? bang[1] : 0;
            fn = (size_t)(bang - f);
        }
        struct jv v;
        if (fn == 0) {
            if (auto_idx >= call->n_pos)
                ebb__jinja_fail(c, "format: not enough positional arguments");
            v = call->pos[auto_idx++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t i = (size_t)strtoul(f, NULL, 10);
            if (i >= call->n_pos)
                ebb__jinja_fail(c, "format: replacement index %zu out of range", i);
            v = call->pos[i];
        } else {
            size_t k = 0;
            while (k < call->n_kw &&
                   (strlen(call->kw_names[k]) != fn || memcmp(call->kw_names[k], f, fn)))
                k++;
            if (k == call->n_kw)
                ebb__jinja_fail(c, "format: no argument named '%.*s'", (int)fn, f);
            v = call->kw[k];
        }
        if (conv == 'r')
            ebb__jv_repr(&b, v);
        else
            ebb__jv_to_str(&b, v);
        p = close + 1;
    }
    return ebb__jbuf_take(&b);
}

/* ---- dicts and lists ------------------------------------------------------------------------ */

METHOD(get)
{
    struct jv *v = ebb__jv_dict_get(self, arg(call, 0, jv_none()));
    if (!call->n_pos)
        ebb__jinja_fail(c, "get expected at least 1 argument");
    return v ? *v : arg(call, 1, jv_none());
}

METHOD(items)
{
    (void)call;
    struct jv l = ebb__jv_list(c, self.u.d->n);
    for (size_t i = 0; i < self.u.d->n; i++) {
        struct jv p = ebb__jv_list(c, 2);
        ebb__jv_push(c, p, self.u.d->k[i]);
        ebb__jv_push(c, p, self.u.d->v[i]);
        p.u.l->tuple = true;
        ebb__jv_push(c, l, p);
    }
    return l;
}

METHOD(keys)
{
    (void)call;
    struct jv l = ebb__jv_list(c, self.u.d->n);
    for (size_t i = 0; i < self.u.d->n; i++)
        ebb__jv_push(c, l, self.u.d->k[i]);
    return l;
}

METHOD(values)
{
    (void)call;
    struct jv l = ebb__jv_list(c, self.u.d->n);
    for (size_t i = 0; i < self.u.d->n; i++)
        ebb__jv_push(c, l, self.u.d->v[i]);
    return l;
}

METHOD(copy)
{
    (void)call;
    if (self.t == JV_LIST) {
        struct jv l = ebb__jv_list(c, self.u.l->n);
        for (size_t i = 0; i < self.u.l->n; i++)
            ebb__jv_push(c, l, self.u.l->v[i]);
        return l;
    }
    struct jv d = ebb__jv_dict(c, self.u.d->n);
    for (size_t i = 0; i < self.u.d->n; i++)
        ebb__jv_dict_set(c, d, self.u.d->k[i], self.u.d->v[i]);
    return d;
}

METHOD(list_index)
{
    struct jv x = arg(call, 0, jv_none());
    for (size_t i = 0; i < self.u.l->n; i++)
        if (ebb__jv_equal(self.u.l->v[i], x))
            return jv_int((int64_t)i);
    ebb__jinja_fail(c, "value is not in list");
}

METHOD(list_count)
{
    (void)c;
    struct jv x = arg(call, 0, jv_none());
    int64_t k = 0;
    for (size_t i = 0; i < self.u.l->n; i++)
        k += ebb__jv_equal(self.u.l->v[i], x);
    return jv_int(k);
}

METHOD(unsafe)
{
    (void)self, (void)call;
    ebb__jinja_fail(c, "the template changes a list or dict in place, which the sandbox "
                       "chat templates run in forbids");
}
#undef METHOD

struct mdef {
    const char *name;
    jfunc_fn fn;
};

static const struct mdef str_methods[] = {
    {"strip", m_strip},
    {"lstrip", m_lstrip},
    {"rstrip", m_rstrip},
    {"split", m_split},
    {"rsplit", m_rsplit},
    {"splitlines", m_splitlines},
    {"startswith", m_startswith},
    {"endswith", m_endswith},
    {"replace", m_replace},
    {"upper", m_upper},
    {"lower", m_lower},
    {"capitalize", m_capitalize},
    {"title", m_title},
    {"find", m_find},
    {"rfind", m_rfind},
    {"index", m_index},
    {"count", m_count},
    {"join", m_join},
    {"isdigit", m_isdigit},
    {"isalpha", m_isalpha},
    {"isalnum", m_isalnum},
    {"isspace", m_isspace},
    {"isupper", m_isupper},
    {"islower", m_islower},
    {"removeprefix", m_removeprefix},
    {"removesuffix", m_removesuffix},
    {"format", m_format},
    {NULL, NULL},
};

static const struct mdef dict_methods[] = {
    {"get", m_get},      {"items", m_items},    {"keys", m_keys},     {"values", m_values},
    {"copy", m_copy},    {"pop", m_unsafe},     {"update", m_unsafe}, {"setdefault", m_unsafe},
    {"clear", m_unsafe}, {"popitem", m_unsafe}, {NULL, NULL},
};

static const struct mdef list_methods[] = {
    {"index", m_list_index}, {"count", m_list_count}, {"copy", m_copy},    {"append", m_unsafe},
    {"extend", m_unsafe},    {"insert", m_unsafe},    {"pop", m_unsafe},   {"remove", m_unsafe},
    {"sort", m_unsafe},      {"reverse", m_unsafe},   {"clear", m_unsafe}, {NULL, NULL},
};

struct jv ebb__jinja_method(struct jctx *c, struct jv obj, const char *name)
{
    const struct mdef *t = obj.t == JV_STR    ? str_methods
                           : obj.t == JV_DICT ? (obj.u.d->ns ? NULL : dict_methods)
                           : obj.t == JV_LIST ? list_methods
                                              : NULL;
    for (; t && t->name; t++) {
        if (!strcmp(t->name, name)) {
            struct jfunc *f = ebb__jinja_alloc(c, sizeof(*f));
            f->fn = t->fn;
            f->name = t->name;
            f->self = ebb__jinja_alloc(c, sizeof(*f->self));
            *f->self = obj;
            struct jv v = {.t = JV_FUNC};
            v.u.fn = f;
            return v;
        }
    }
    return jv_undef(name);
}

/* ---- globals -------------------------------------------------------------------------------- */

static struct jv g_range(struct jctx *c, struct jv self, struct jcall *call)
{
    (void)self;
    int64_t a = 0, b, s = 1;
    for (size_t i = 0; i < call->n_pos; i++)
        if (call->pos[i].t != JV_INT)
            ebb__jinja_fail(c, "range() arguments must be integers");
    if (call->n_pos == 1) {
        b = call->pos[0].u.i;
    } else if (call->n_pos == 2 || call->n_pos == 3) {
        a = call->pos[0].u.i;
        b = call->pos[1].u.i;
        if (call->n_pos == 3)
            s = call->pos[2].u.i;
    } else {
        ebb__jinja_fail(c, "range() takes 1 to 3 arguments");
    }
    if (s == 0)
        ebb__jinja_fail(c, "range() arg 3 must not be zero");
    struct jv l = ebb__jv_list(c, 0);
    for (int64_t i = a; s > 0 ? i < b : i > b; i += s) {
        if (l.u.l->n >= 1000000)
            ebb__jinja_fail_err(c, EBB_ERANGE, "range() longer than a million items");
        ebb__jv_push(c, l, jv_int(i));
        if ((s > 0 && i > INT64_MAX - s) || (s < 0 && i < INT64_MIN - s))
            break;
    }
    return l;
}

static struct jv make_dict(struct jctx *c, struct jcall *call, bool ns)
{
    struct jv d = ebb__jv_dict(c, call->n_kw);
    d.u.d->ns = ns;
    if (call->n_pos) {
        struct jv src = call->pos[0];
        if (call->n_pos > 1 || src.t != JV_DICT)
            ebb__jinja_fail(c, "%s() takes a mapping and keyword arguments",
                            ns ? "namespace" : "dict");
        for (size_t i = 0; i < src.u.d->n; i++)
            ebb__jv_dict_set(c, d, src.u.d->k[i], src.u.d->v[i]);
    }
    for (size_t i = 0; i < call->n_kw; i++)
        ebb__jv_dict_set(c, d, ebb__jv_cstr(c, call->kw_names[i]), call->kw[i]);
    return d;
}

static struct jv g_namespace(struct jctx *c, struct jv self, struct jcall *call)
{
    (void)self;
    return make_dict(c, call, true);
}

static struct jv g_dict(struct jctx *c, struct jv self, struct jcall *call)
{
    (void)self;
    return make_dict(c, call, false);
}

static struct jv g_raise(struct jctx *c, struct jv self, struct jcall *call)
{
    (void)self;
    struct jv m = call->n_pos ? ebb__jv_string(c, call->pos[0]) : ebb__jv_cstr(c, "");
    ebb__jinja_fail(c, "the template raised an error: %.300s", m.u.s->p);
}

static struct jv g_strftime_now(struct jctx *c, struct jv self, struct jcall *call)
{
    (void)self;
    struct jstr *f = need_str(c, arg(call, 0, jv_none()), "strftime_now's format");
    char buf[512];
    size_t n = f->n ? strftime(buf, sizeof(buf), f->p, &c->now) : 0;
    if (f->n && n == 0)
        ebb__jinja_fail(c, "strftime_now: format '%.64s' gives nothing or too much", f->p);
    return ebb__jv_str(c, buf, n);
}

static const struct mdef globals[] = {
    {"range", g_range},           {"namespace", g_namespace},       {"dict", g_dict},
    {"raise_exception", g_raise}, {"strftime_now", g_strftime_now}, {NULL, NULL},
};

struct jv ebb__jinja_global(struct jctx *c, const char *name)
{
    for (const struct mdef *g = globals; g->name; g++) {
        if (!strcmp(g->name, name)) {
            struct jfunc *f = ebb__jinja_alloc(c, sizeof(*f));
            f->fn = g->fn;
            f->name = g->name;
            struct jv v = {.t = JV_FUNC};
            v.u.fn = f;
            return v;
        }
    }
    return jv_undef(name);
}
