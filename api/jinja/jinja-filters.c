/* Jinja filters and tests the chat templates use, with Jinja2's behaviour (the tojson filter is
 * the one Hugging Face installs: key order kept, non-ASCII kept unless ensure_ascii). */
#include "jinja-int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Argument i by position or by name; def when absent. */
static struct jv arg(struct jcall *call, size_t i, const char *name, struct jv def)
{
    if (i < call->n_pos)
        return call->pos[i];
    for (size_t k = 0; name && k < call->n_kw; k++)
        if (!strcmp(call->kw_names[k], name))
            return call->kw[k];
    return def;
}

static const char *cstr(struct jctx *c, struct jv v, const char *what)
{
    if (v.t != JV_STR)
        ebb__jinja_fail(c, "%s must be a string, not %s", what, ebb__jv_type_name(v));
    return v.u.s->p;
}

/* The items of a sequence filters walk (list items, dict keys, string characters). */
static struct jv seq(struct jctx *c, struct jv v, const char *filter)
{
    if (v.t == JV_LIST)
        return v;
    if (v.t == JV_UNDEF)
        return ebb__jv_list(c, 0);
    if (v.t == JV_DICT && !v.u.d->ns) {
        struct jv l = ebb__jv_list(c, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++)
            ebb__jv_push(c, l, v.u.d->k[i]);
        return l;
    }
    if (v.t == JV_STR) {
        struct jv l = ebb__jv_list(c, 0);
        for (size_t i = 0; i < v.u.s->n;) {
            size_t k = 1;
            while (i + k < v.u.s->n && ((unsigned char)v.u.s->p[i + k] & 0xc0) == 0x80)
                k++;
            ebb__jv_push(c, l, ebb__jv_str(c, v.u.s->p + i, k));
            i += k;
        }
        return l;
    }
    ebb__jinja_fail(c, "%s: '%s' object is not iterable", filter, ebb__jv_type_name(v));
}

/* Attribute lookup as filters do it ("a.b" walks nested dicts). */
static struct jv attr_path(struct jctx *c, struct jv v, const char *path)
{
    const char *p = path;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        struct jv key = ebb__jv_str(c, p, n);
        if (v.t == JV_DICT) {
            struct jv *got = ebb__jv_dict_get(v, key);
            v = got ? *got : jv_undef(path);
        } else if (v.t == JV_LIST && n && p[0] >= '0' && p[0] <= '9') {
            size_t i = (size_t)strtoul(key.u.s->p, NULL, 10);
            v = i < v.u.l->n ? v.u.l->v[i] : jv_undef(path);
        } else {
            v = jv_undef(path);
        }
        p += n + (dot ? 1 : 0);
    }
    return v;
}

/* ---- string filters ------------------------------------------------------------------------- */

static bool py_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v' ||
           (ch >= 0x1c && ch <= 0x1f);
}

/* Length of the character at p[i..n) when it is one of chars[0..cn) (valid UTF-8 both: a whole
 * character's bytes found in chars are one of its characters), else 0. */
static size_t in_set_at(const char *p, size_t n, size_t i, const char *chars, size_t cn)
{
    size_t k;
    ebb__utf8_cp(p, n, i, &k);
    return memmem(chars, cn, p + i, k) ? k : 0;
}

/* The same for the character that ends at p[e - 1]. */
static size_t in_set_before(const char *p, size_t e, const char *chars, size_t cn)
{
    size_t b = e - 1;
    while (b > 0 && e - b < 4 && ((unsigned char)p[b] & 0xc0) == 0x80)
        b--;
    size_t k = in_set_at(p, e, b, chars, cn);
    return b + k == e ? k : 0;
}

/* str.strip(chars) as Python does it: with no chars, the characters str.isspace() is true for
 * (U+00A0, U+3000, U+2028 and the rest of Unicode's whitespace, not only ASCII's); with chars,
 * any of its characters, compared as code points. */
struct jv ebb__jinja_strip(struct jctx *c, struct jv s, struct jv chars, bool left, bool right)
{
    const char *p = s.u.s->p;
    size_t b = 0, e = s.u.s->n, k;
    bool ws = chars.t == JV_NONE || chars.t == JV_UNDEF;
    if (!ws && chars.t != JV_STR)
        ebb__jinja_fail(c, "strip arg must be None or str");
    const char *cs = ws ? NULL : chars.u.s->p;
    size_t cn = ws ? 0 : chars.u.s->n;
    while (left && b < e && (k = ws ? ebb__py_space_at(p, e, b) : in_set_at(p, e, b, cs, cn)))
        b += k;
    while (right && e > b &&
           (k = ws ? ebb__py_space_before(p + b, e - b) : in_set_before(p + b, e - b, cs, cn)))
        e -= k;
    return ebb__jv_str(c, p + b, e - b);
}

static struct jv f_trim(struct jctx *c, struct jv v, struct jcall *call)
{
    return ebb__jinja_strip(c, ebb__jv_string(c, v), arg(call, 0, "chars", jv_none()), true, true);
}

static struct jv case_map(struct jctx *c, struct jv v, int mode)
{
    struct jv s = ebb__jv_string(c, v);
    struct jv r = ebb__jv_str(c, s.u.s->p, s.u.s->n);
    char *p = r.u.s->p;
    bool start = true;
    for (size_t i = 0; i < r.u.s->n; i++) {
        char ch = p[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        bool up = mode == 0 || ((mode == 2 || mode == 3) && start);
        if (mode == 1 || mode == 0 || mode == 2 || mode == 3) {
            if (up && ch >= 'a' && ch <= 'z')
                p[i] = (char)(ch - 32);
            else if (!up && ch >= 'A' && ch <= 'Z')
                p[i] = (char)(ch + 32);
        }
        if (mode == 2)
            start = false;
        else if (mode == 3)
            start = !alpha &&
                    (py_space(ch) || ch == '-' || ch == '(' || ch == '{' || ch == '[' || ch == '<');
    }
    return r;
}

static struct jv f_upper(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    return case_map(c, v, 0);
}
static struct jv f_lower(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    return case_map(c, v, 1);
}
static struct jv f_capitalize(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    return case_map(c, v, 2);
}
static struct jv f_title(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    return case_map(c, v, 3);
}

struct jv ebb__jinja_replace(struct jctx *c, struct jv s, struct jv old, struct jv new,
                             int64_t count)
{
    const char *o = cstr(c, old, "replace's old"), *nw = cstr(c, new, "replace's new");
    size_t on = old.u.s->n, nn = new.u.s->n;
    struct jbuf b = {.c = c};
    const char *p = s.u.s->p, *end = p + s.u.s->n;
    if (on == 0) {
        /* Python inserts new between every character (code point). */
        for (size_t i = 0; i <= s.u.s->n; i++) {
            if (count < 0 || count > 0) {
                if (i == 0 || i == s.u.s->n || ((unsigned char)p[i] & 0xc0) != 0x80) {
                    if (count != 0) {
                        ebb__jbuf_put(&b, nw, nn);
                        if (count > 0)
                            count--;
                    }
                }
            }
            if (i < s.u.s->n)
                ebb__jbuf_put(&b, p + i, 1);
        }
        return ebb__jbuf_take(&b);
    }
    while (p < end) {
        const char *hit = count == 0 ? NULL : memmem(p, (size_t)(end - p), o, on);
        if (!hit) {
            ebb__jbuf_put(&b, p, (size_t)(end - p));
            break;
        }
        ebb__jbuf_put(&b, p, (size_t)(hit - p));
        ebb__jbuf_put(&b, nw, nn);
        p = hit + on;
        if (count > 0)
            count--;
    }
    return ebb__jbuf_take(&b);
}

static struct jv f_replace(struct jctx *c, struct jv v, struct jcall *call)
{
    struct jv cnt = arg(call, 2, "count", jv_none());
    return ebb__jinja_replace(c, ebb__jv_string(c, v), arg(call, 0, "old", jv_none()),
                              arg(call, 1, "new", jv_none()), cnt.t == JV_INT ? cnt.u.i : -1);
}

static struct jv f_string(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    return ebb__jv_string(c, v);
}

static struct jv f_safe(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    if (v.t == JV_STR && v.u.s->safe)
        return v;
    struct jv s = ebb__jv_string(c, v);
    struct jv r = ebb__jv_str(c, s.u.s->p, s.u.s->n);
    r.u.s->safe = true;
    return r;
}

static struct jv f_indent(struct jctx *c, struct jv v, struct jcall *call)
{
    struct jv w = arg(call, 0, "width", jv_int(4));
    bool first = ebb__jv_truthy(arg(call, 1, "first", jv_bool(false)));
    bool blank = ebb__jv_truthy(arg(call, 2, "blank", jv_bool(false)));
    struct jbuf pad = {.c = c};
    if (w.t == JV_STR)
        ebb__jbuf_put(&pad, w.u.s->p, w.u.s->n);
    else if (w.t == JV_INT)
        for (int64_t i = 0; i < w.u.i && i < 1000; i++)
            ebb__jbuf_put(&pad, " ", 1);
    else
        ebb__jinja_fail(c, "indent width must be an integer or a string");
    struct jv s = ebb__jv_string(c, v);
    struct jbuf b = {.c = c};
    const char *p = s.u.s->p, *end = p + s.u.s->n;
    bool at_first = true;
    /* Jinja splits on line breaks, indents every line but the first (unless first) and, unless
     * blank, leaves empty lines alone. */
    while (p <= end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        bool empty = le == p;
        if (at_first ? first : (blank || !empty))
            ebb__jbuf_put(&b, pad.p, pad.n);
        ebb__jbuf_put(&b, p, (size_t)(le - p));
        if (!nl)
            break;
        ebb__jbuf_put(&b, "\n", 1);
        p = nl + 1;
        at_first = false;
    }
    return ebb__jbuf_take(&b);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

/* Escapes non-ASCII characters and DEL of a JSON text as \uXXXX (surrogate pairs above U+FFFF),
 * as json.dumps(ensure_ascii=True) does. */
static struct jv ascii_json(struct jctx *c, struct jv s)
{
    struct jbuf b = {.c = c};
    const unsigned char *p = (const unsigned char *)s.u.s->p;
    size_t n = s.u.s->n;
    for (size_t i = 0; i < n;) {
        if (p[i] == 0x7f) { /* json.dumps escapes all but the printable ASCII characters */
            ebb__jbuf_puts(&b, "\\u007f");
            i++;
            continue;
        }
        if (p[i] < 0x80) {
            ebb__jbuf_put(&b, (const char *)p + i, 1);
            i++;
            continue;
        }
        uint32_t cp;
        size_t k;
        if ((p[i] & 0xe0) == 0xc0) {
            cp = p[i] & 0x1f;
            k = 2;
        } else if ((p[i] & 0xf0) == 0xe0) {
            cp = p[i] & 0x0f;
            k = 3;
        } else {
            cp = p[i] & 0x07;
            k = 4;
        }
        for (size_t j = 1; j < k && i + j < n; j++)
            cp = (cp << 6) | (p[i + j] & 0x3f);
        i += k;
        char t[16];
        if (cp >= 0x10000) {
            cp -= 0x10000;
            snprintf(t, sizeof(t), "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
        } else {
            snprintf(t, sizeof(t), "\\u%04x", cp);
        }
        ebb__jbuf_puts(&b, t);
    }
    return ebb__jbuf_take(&b);
}

static struct jv f_tojson(struct jctx *c, struct jv v, struct jcall *call)
{
    struct jv ind = arg(call, 1, "indent", jv_none());
    bool ascii = ebb__jv_truthy(arg(call, 0, "ensure_ascii", jv_bool(false)));
    struct jv seps = arg(call, 2, "separators", jv_none());
    bool sort = ebb__jv_truthy(arg(call, 3, "sort_keys", jv_bool(false)));
    int indent = -1;
    if (ind.t == JV_INT)
        indent = ind.u.i < 0 ? 0 : ind.u.i > 64 ? 64 : (int)ind.u.i;
    else if (ind.t != JV_NONE && ind.t != JV_UNDEF)
        ebb__jinja_fail(c, "tojson: indent must be an integer");
    const char *item = indent >= 0 ? "," : ", ", *key = ": ";
    if (seps.t == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].t == JV_STR &&
        seps.u.l->v[1].t == JV_STR) {
        item = seps.u.l->v[0].u.s->p;
        key = seps.u.l->v[1].u.s->p;
    } else if (seps.t != JV_NONE && seps.t != JV_UNDEF) {
        ebb__jinja_fail(c, "tojson: separators must be a pair of strings");
    }
    struct jbuf b = {.c = c};
    ebb__jv_to_json(&b, v, indent, item, key, sort, 0);
    struct jv s = ebb__jbuf_take(&b);
    return ascii ? ascii_json(c, s) : s;
}

/* ---- sequences ------------------------------------------------------------------------------ */

static struct jv f_length(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    switch (v.t) {
    case JV_UNDEF:
        return jv_int(0);
    case JV_STR:
        return jv_int((int64_t)ebb__utf8_len(v.u.s->p, v.u.s->n));
    case JV_LIST:
        if (v.u.l->gen)
            break;
        return jv_int((int64_t)v.u.l->n);
    case JV_DICT:
        if (!v.u.d->ns)
            return jv_int((int64_t)v.u.d->n);
        break;
    default:
        break;
    }
    ebb__jinja_fail(c, "object of type '%s' has no len()", ebb__jv_type_name(v));
}

static struct jv f_default(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)c;
    struct jv def = arg(call, 0, "default_value", ebb__jv_str(c, "", 0));
    bool boolean = ebb__jv_truthy(arg(call, 1, "boolean", jv_bool(false)));
    if (v.t == JV_UNDEF || (boolean && !ebb__jv_truthy(v)))
        return def;
    return v;
}

static struct jv f_join(struct jctx *c, struct jv v, struct jcall *call)
{
    struct jv sep = arg(call, 0, "d", ebb__jv_str(c, "", 0));
    struct jv attr = arg(call, 1, "attribute", jv_none());
    struct jv items = seq(c, v, "join");
    struct jbuf b = {.c = c};
    for (size_t i = 0; i < items.u.l->n; i++) {
        if (i)
            ebb__jv_to_str(&b, sep);
        struct jv it = items.u.l->v[i];
        if (attr.t == JV_STR)
            it = attr_path(c, it, attr.u.s->p);
        ebb__jv_to_str(&b, it);
    }
    return ebb__jbuf_take(&b);
}

static struct jv pair(struct jctx *c, struct jv k, struct jv v)
{
    struct jv p = ebb__jv_list(c, 2);
    ebb__jv_push(c, p, k);
    ebb__jv_push(c, p, v);
    p.u.l->tuple = true;
    return p;
}

static struct jv f_items(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    if (v.t == JV_UNDEF)
        return ebb__jv_list(c, 0);
    if (v.t != JV_DICT || v.u.d->ns)
        ebb__jinja_fail(c, "items: can only get item pairs from a mapping");
    struct jv l = ebb__jv_list(c, v.u.d->n);
    for (size_t i = 0; i < v.u.d->n; i++)
        ebb__jv_push(c, l, pair(c, v.u.d->k[i], v.u.d->v[i]));
    return l;
}

static struct jv f_list(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    if (v.t == JV_UNDEF)
        ebb__jinja_fail(c, "list: '%s' is undefined", v.u.undef ? v.u.undef : "value");
    struct jv s = seq(c, v, "list");
    struct jv l = ebb__jv_list(c, s.u.l->n);
    for (size_t i = 0; i < s.u.l->n; i++)
        ebb__jv_push(c, l, s.u.l->v[i]);
    return l;
}

static struct jv f_first(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    struct jv s = seq(c, v, "first");
    return s.u.l->n ? s.u.l->v[0] : jv_undef("first item");
}

static struct jv f_last(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    if (v.t == JV_LIST && v.u.l->gen)
        ebb__jinja_fail(c, "last: 'generator' object is not reversible");
    struct jv s = seq(c, v, "last");
    return s.u.l->n ? s.u.l->v[s.u.l->n - 1] : jv_undef("last item");
}

static struct jv f_reverse(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    if (v.t == JV_STR) {
        struct jv s = seq(c, v, "reverse");
        struct jbuf b = {.c = c};
        for (size_t i = s.u.l->n; i-- > 0;)
            ebb__jbuf_put(&b, s.u.l->v[i].u.s->p, s.u.l->v[i].u.s->n);
        return ebb__jbuf_take(&b);
    }
    struct jv s = seq(c, v, "reverse");
    struct jv l = ebb__jv_list(c, s.u.l->n);
    for (size_t i = s.u.l->n; i-- > 0;)
        ebb__jv_push(c, l, s.u.l->v[i]);
    l.u.l->gen = v.t == JV_LIST; /* reversed() of a list is an iterator */
    return l;
}

/* Sort key of Jinja's sort and unique: lowercased strings unless case_sensitive. */
static struct jv sort_key(struct jctx *c, struct jv v, struct jv attr, bool cs)
{
    if (attr.t == JV_STR)
        v = attr_path(c, v, attr.u.s->p);
    if (!cs && v.t == JV_STR)
        return case_map(c, v, 1);
    return v;
}

static struct jv sorted(struct jctx *c, struct jv items, struct jv attr, bool cs, bool reverse,
                        bool by_value_pairs)
{
    size_t n = items.u.l->n;
    struct jv out = ebb__jv_list(c, n);
    struct jv *keys = ebb__jinja_alloc(c, (n + 1) * sizeof(*keys));
    for (size_t i = 0; i < n; i++) {
        struct jv it = items.u.l->v[i];
        keys[i] = sort_key(c, by_value_pairs ? it.u.l->v[1] : it, attr, cs);
        out.u.l->v[i] = it;
    }
    out.u.l->n = n;
    /* A stable insertion sort, as Python's sort is stable. */
    for (size_t i = 1; i < n; i++) {
        struct jv k = keys[i], it = out.u.l->v[i];
        size_t j = i;
        while (j > 0) {
            int r = ebb__jv_compare(c, keys[j - 1], k);
            if (reverse ? r >= 0 : r <= 0)
                break;
            keys[j] = keys[j - 1];
            out.u.l->v[j] = out.u.l->v[j - 1];
            j--;
        }
        keys[j] = k;
        out.u.l->v[j] = it;
    }
    return out;
}

static struct jv f_sort(struct jctx *c, struct jv v, struct jcall *call)
{
    bool reverse = ebb__jv_truthy(arg(call, 0, "reverse", jv_bool(false)));
    bool cs = ebb__jv_truthy(arg(call, 1, "case_sensitive", jv_bool(false)));
    return sorted(c, seq(c, v, "sort"), arg(call, 2, "attribute", jv_none()), cs, reverse, false);
}

static struct jv f_dictsort(struct jctx *c, struct jv v, struct jcall *call)
{
    bool cs = ebb__jv_truthy(arg(call, 0, "case_sensitive", jv_bool(false)));
    struct jv by = arg(call, 1, "by", jv_none());
    bool reverse = ebb__jv_truthy(arg(call, 2, "reverse", jv_bool(false)));
    bool by_value = by.t == JV_STR && !strcmp(by.u.s->p, "value");
    struct jv items = f_items(c, v, call);
    if (!by_value) {
        struct jv keys = ebb__jv_list(c, items.u.l->n);
        for (size_t i = 0; i < items.u.l->n; i++)
            ebb__jv_push(c, keys, items.u.l->v[i]);
        /* Sort pairs by their first element. */
        size_t n = keys.u.l->n;
        for (size_t i = 1; i < n; i++) {
            struct jv it = keys.u.l->v[i];
            struct jv k = sort_key(c, it.u.l->v[0], jv_none(), cs);
            size_t j = i;
            while (j > 0) {
                struct jv pk = sort_key(c, keys.u.l->v[j - 1].u.l->v[0], jv_none(), cs);
                int r = ebb__jv_compare(c, pk, k);
                if (reverse ? r >= 0 : r <= 0)
                    break;
                keys.u.l->v[j] = keys.u.l->v[j - 1];
                j--;
            }
            keys.u.l->v[j] = it;
        }
        return keys;
    }
    return sorted(c, items, jv_none(), cs, reverse, true);
}

static struct jv f_unique(struct jctx *c, struct jv v, struct jcall *call)
{
    bool cs = ebb__jv_truthy(arg(call, 0, "case_sensitive", jv_bool(false)));
    struct jv attr = arg(call, 1, "attribute", jv_none());
    struct jv s = seq(c, v, "unique");
    struct jv out = ebb__jv_list(c, 0), seen = ebb__jv_list(c, 0);
    for (size_t i = 0; i < s.u.l->n; i++) {
        struct jv k = sort_key(c, s.u.l->v[i], attr, cs);
        bool dup = false;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++)
            dup = ebb__jv_equal(seen.u.l->v[j], k);
        if (!dup) {
            ebb__jv_push(c, seen, k);
            ebb__jv_push(c, out, s.u.l->v[i]);
        }
    }
    out.u.l->gen = true;
    return out;
}

static struct jv minmax(struct jctx *c, struct jv v, struct jcall *call, bool max)
{
    bool cs = ebb__jv_truthy(arg(call, 0, "case_sensitive", jv_bool(false)));
    struct jv attr = arg(call, 1, "attribute", jv_none());
    struct jv s = seq(c, v, max ? "max" : "min");
    if (!s.u.l->n)
        return jv_undef(max ? "max of an empty sequence" : "min of an empty sequence");
    size_t best = 0;
    for (size_t i = 1; i < s.u.l->n; i++) {
        int r = ebb__jv_compare(c, sort_key(c, s.u.l->v[i], attr, cs),
                                sort_key(c, s.u.l->v[best], attr, cs));
        if (max ? r > 0 : r < 0)
            best = i;
    }
    return s.u.l->v[best];
}

static struct jv f_min(struct jctx *c, struct jv v, struct jcall *call)
{
    return minmax(c, v, call, false);
}

static struct jv f_max(struct jctx *c, struct jv v, struct jcall *call)
{
    return minmax(c, v, call, true);
}

static struct jv f_sum(struct jctx *c, struct jv v, struct jcall *call)
{
    struct jv attr = arg(call, 0, "attribute", jv_none());
    struct jv total = arg(call, 1, "start", jv_int(0));
    struct jv s = seq(c, v, "sum");
    for (size_t i = 0; i < s.u.l->n; i++) {
        struct jv it = attr.t == JV_STR ? attr_path(c, s.u.l->v[i], attr.u.s->p) : s.u.l->v[i];
        if (!ebb__jv_is_num(total) || !ebb__jv_is_num(it))
            ebb__jinja_fail(c, "sum: unsupported operand types");
        if (total.t == JV_FLOAT || it.t == JV_FLOAT)
            total = jv_float(ebb__jv_num(total) + ebb__jv_num(it));
        else
            total = jv_int((int64_t)ebb__jv_num(total) + (int64_t)ebb__jv_num(it));
    }
    return total;
}

/* select/reject/selectattr/rejectattr: the test's name and arguments follow the attribute. */
static struct jv select_common(struct jctx *c, struct jv v, struct jcall *call, bool attr,
                               bool keep)
{
    struct jv s =
        ebb__jv_truthy(v) ? seq(c, v, attr ? "selectattr" : "select") : ebb__jv_list(c, 0);
    size_t first = attr ? 1 : 0;
    const char *aname = attr ? cstr(c, arg(call, 0, NULL, jv_none()), "the attribute") : NULL;
    const char *test = call->n_pos > first ? cstr(c, call->pos[first], "the test name") : NULL;
    size_t n_args = call->n_pos > first + 1 ? call->n_pos - first - 1 : 0;
    struct jv *args = n_args ? call->pos + first + 1 : NULL;
    struct jv out = ebb__jv_list(c, 0);
    for (size_t i = 0; i < s.u.l->n; i++) {
        struct jv it = aname ? attr_path(c, s.u.l->v[i], aname) : s.u.l->v[i];
        bool ok = test ? ebb__jinja_apply_test(c, test, it, args, n_args) : ebb__jv_truthy(it);
        if (ok == keep)
            ebb__jv_push(c, out, s.u.l->v[i]);
    }
    out.u.l->gen = true;
    return out;
}

static struct jv f_select(struct jctx *c, struct jv v, struct jcall *call)
{
    return select_common(c, v, call, false, true);
}
static struct jv f_reject(struct jctx *c, struct jv v, struct jcall *call)
{
    return select_common(c, v, call, false, false);
}
static struct jv f_selectattr(struct jctx *c, struct jv v, struct jcall *call)
{
    return select_common(c, v, call, true, true);
}
static struct jv f_rejectattr(struct jctx *c, struct jv v, struct jcall *call)
{
    return select_common(c, v, call, true, false);
}

static struct jv f_map(struct jctx *c, struct jv v, struct jcall *call)
{
    struct jv s = ebb__jv_truthy(v) ? seq(c, v, "map") : ebb__jv_list(c, 0);
    struct jv out = ebb__jv_list(c, s.u.l->n);
    out.u.l->gen = true;
    struct jv attr = arg(call, 99, "attribute", jv_none());
    if (attr.t == JV_STR) {
        struct jv def = arg(call, 99, "default", jv_undef(attr.u.s->p));
        for (size_t i = 0; i < s.u.l->n; i++) {
            struct jv it = attr_path(c, s.u.l->v[i], attr.u.s->p);
            ebb__jv_push(c, out, it.t == JV_UNDEF ? def : it);
        }
        return out;
    }
    const char *name = cstr(c, arg(call, 0, NULL, jv_none()), "map's filter name");
    const struct jfilter_def *f = ebb__jinja_filter(name);
    if (!f)
        ebb__jinja_fail(c, "map: unknown filter '%s'", name);
    struct jcall sub = *call;
    sub.pos = call->pos + 1;
    sub.n_pos = call->n_pos - 1;
    for (size_t i = 0; i < s.u.l->n; i++)
        ebb__jv_push(c, out, f->fn(c, s.u.l->v[i], &sub));
    return out;
}

/* ---- numbers -------------------------------------------------------------------------------- */

static struct jv f_int(struct jctx *c, struct jv v, struct jcall *call)
{
    struct jv def = arg(call, 0, "default", jv_int(0));
    switch (v.t) {
    case JV_INT:
        return v;
    case JV_BOOL:
        return jv_int(v.u.b);
    case JV_FLOAT:
        return isfinite(v.u.f) && fabs(v.u.f) < 9.2e18 ? jv_int((int64_t)v.u.f) : def;
    case JV_STR: {
        char *end;
        const char *p = v.u.s->p;
        long long x = strtoll(p, &end, 10);
        while (py_space(*end))
            end++;
        if (end != p && !*end)
            return jv_int(x);
        double d = strtod(p, &end);
        while (py_space(*end))
            end++;
        if (end != p && !*end && isfinite(d) && fabs(d) < 9.2e18)
            return jv_int((int64_t)d);
        return def;
    }
    default:
        return def;
    }
}

static struct jv f_float(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)c;
    struct jv def = arg(call, 0, "default", jv_float(0));
    if (v.t == JV_FLOAT)
        return v;
    if (v.t == JV_INT || v.t == JV_BOOL)
        return jv_float(ebb__jv_num(v));
    if (v.t == JV_STR) {
        char *end;
        double d = strtod(v.u.s->p, &end);
        if (end != v.u.s->p && !*end)
            return jv_float(d);
    }
    return def;
}

static struct jv f_abs(struct jctx *c, struct jv v, struct jcall *call)
{
    (void)call;
    if (v.t == JV_INT)
        return v.u.i == INT64_MIN ? v : jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    if (v.t == JV_FLOAT)
        return jv_float(fabs(v.u.f));
    ebb__jinja_fail(c, "bad operand type for abs(): '%s'", ebb__jv_type_name(v));
}

static struct jv f_round(struct jctx *c, struct jv v, struct jcall *call)
{
    struct jv prec = arg(call, 0, "precision", jv_int(0));
    struct jv method = arg(call, 1, "method", jv_none());
    if (!ebb__jv_is_num(v))
        ebb__jinja_fail(c, "round: '%s' is not a number", ebb__jv_type_name(v));
    double x = ebb__jv_num(v), m = pow(10, prec.t == JV_INT ? (double)prec.u.i : 0);
    const char *how = method.t == JV_STR ? method.u.s->p : "common";
    if (!strcmp(how, "floor"))
        return jv_float(floor(x * m) / m);
    if (!strcmp(how, "ceil"))
        return jv_float(ceil(x * m) / m);
    return jv_float(round(x * m) / m);
}

/* ---- table ---------------------------------------------------------------------------------- */

static const struct jfilter_def filters[] = {
    {"abs", f_abs},
    {"capitalize", f_capitalize},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"first", f_first},
    {"float", f_float},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
};

const struct jfilter_def *ebb__jinja_filter(const char *name)
{
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++)
        if (!strcmp(filters[i].name, name))
            return &filters[i];
    return NULL;
}
