/* Values of the Jinja interpreter: the arena they live in, conversion from JSON, and the Python
 * behaviour templates rely on (str(), repr(), json.dumps(), ==, <, truthiness). */
#include "jinja-int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---------------------------------------------------------------------------------- */

struct jchunk {
    struct jchunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void *ebb__jarena_alloc(struct jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    struct jchunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > 32768 ? n : 65536 - sizeof(*c);
        if (a->limit && (a->used + size > a->limit || size > a->limit))
            return NULL;
        c = malloc(sizeof(*c) + size);
        a->nomem = !c;
        if (!c)
            return NULL;
        c->size = size;
        c->used = 0;
        a->used += size;
        /* A large allocation gets a chunk of its own behind the current one, so the current
         * chunk's free space stays usable. */
        if (n > 32768 && a->head) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void ebb__jarena_fini(struct jarena *a)
{
    struct jchunk *c = a->head;
    while (c) {
        struct jchunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- render errors and memory ----------------------------------------------------------- */

static _Noreturn void vfail(struct jctx *c, ebb_err err, const char *fmt, va_list ap)
{
    char msg[300];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    snprintf(c->msg, sizeof(c->msg), "chat template line %d: %s", c->line, msg);
    /* A cut can split a UTF-8 character (a raise_exception text, say): drop the partial one, so
     * the message stays valid JSON text. */
    size_t n = strlen(c->msg), k = n;
    while (k > 0 && ((unsigned char)c->msg[k - 1] & 0xc0) == 0x80 && n - k < 3)
        k--;
    if (k > 0 && (unsigned char)c->msg[k - 1] >= 0xc0) {
        unsigned char lead = (unsigned char)c->msg[k - 1];
        size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
        if (n - (k - 1) < want)
            c->msg[k - 1] = 0;
    }
    c->err = err;
    longjmp(c->fail, 1);
}

_Noreturn void ebb__jinja_fail(struct jctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(c, EBB_EINVAL, fmt, ap);
}

_Noreturn void ebb__jinja_fail_err(struct jctx *c, ebb_err err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(c, err, fmt, ap);
}

void *ebb__jinja_alloc(struct jctx *c, size_t n)
{
    void *p = ebb__jarena_alloc(&c->arena, n);
    if (!p && c->arena.nomem)
        ebb__jinja_fail_err(c, EBB_ENOMEM, "out of memory rendering the chat template");
    if (!p)
        ebb__jinja_fail_err(c, EBB_ERANGE, "the template needs more than %zu MiB of memory",
                            c->arena.limit >> 20);
    return p;
}

/* ---- constructors --------------------------------------------------------------------------- */

struct jv ebb__jv_str(struct jctx *c, const char *p, size_t n)
{
    struct jstr *s = ebb__jinja_alloc(c, sizeof(*s) + n + 1);
    s->n = n;
    if (n)
        memcpy(s->p, p, n);
    struct jv v = {.t = JV_STR};
    v.u.s = s;
    return v;
}

struct jv ebb__jv_cstr(struct jctx *c, const char *s)
{
    return ebb__jv_str(c, s, strlen(s));
}

struct jv ebb__jv_list(struct jctx *c, size_t cap)
{
    struct jlist *l = ebb__jinja_alloc(c, sizeof(*l));
    if (cap) {
        l->v = ebb__jinja_alloc(c, cap * sizeof(*l->v));
        l->cap = cap;
    }
    struct jv v = {.t = JV_LIST};
    v.u.l = l;
    return v;
}

struct jv ebb__jv_dict(struct jctx *c, size_t cap)
{
    struct jdict *d = ebb__jinja_alloc(c, sizeof(*d));
    if (cap) {
        d->k = ebb__jinja_alloc(c, cap * sizeof(*d->k));
        d->v = ebb__jinja_alloc(c, cap * sizeof(*d->v));
        d->cap = cap;
    }
    struct jv v = {.t = JV_DICT};
    v.u.d = d;
    return v;
}

void ebb__jv_push(struct jctx *c, struct jv list, struct jv item)
{
    struct jlist *l = list.u.l;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct jv *v = ebb__jinja_alloc(c, cap * sizeof(*v));
        if (l->n)
            memcpy(v, l->v, l->n * sizeof(*v));
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = item;
}

struct jv *ebb__jv_dict_get(struct jv d, struct jv key)
{
    for (size_t i = 0; i < d.u.d->n; i++)
        if (ebb__jv_equal(d.u.d->k[i], key))
            return &d.u.d->v[i];
    return NULL;
}

struct jv *ebb__jv_dict_gets(const struct jdict *d, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->n == n && !memcmp(d->k[i].u.s->p, key, n))
            return &d->v[i];
    return NULL;
}

void ebb__jv_dict_set(struct jctx *c, struct jv dv, struct jv key, struct jv val)
{
    struct jv *old = ebb__jv_dict_get(dv, key);
    if (old) {
        *old = val;
        return;
    }
    struct jdict *d = dv.u.d;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        struct jv *k = ebb__jinja_alloc(c, cap * sizeof(*k));
        struct jv *v = ebb__jinja_alloc(c, cap * sizeof(*v));
        if (d->n) {
            memcpy(k, d->k, d->n * sizeof(*k));
            memcpy(v, d->v, d->n * sizeof(*v));
        }
        d->k = k;
        d->v = v;
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
}

struct jv ebb__jv_from_json(struct jctx *c, const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        struct jv d = ebb__jv_dict(c, json_object_size(j));
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val)
        {
            d.u.d->k[d.u.d->n] = ebb__jv_cstr(c, key);
            d.u.d->v[d.u.d->n] = ebb__jv_from_json(c, val);
            d.u.d->n++;
        }
        return d;
    }
    case JSON_ARRAY: {
        struct jv l = ebb__jv_list(c, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++)
            l.u.l->v[l.u.l->n++] = ebb__jv_from_json(c, json_array_get(j, i));
        return l;
    }
    case JSON_STRING:
        return ebb__jv_str(c, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return jv_int(json_integer_value(j));
    case JSON_REAL:
        return jv_float(json_real_value(j));
    case JSON_TRUE:
        return jv_bool(true);
    case JSON_FALSE:
        return jv_bool(false);
    default:
        return jv_none();
    }
}

/* ---- predicates ----------------------------------------------------------------------------- */

const char *ebb__jv_type_name(struct jv v)
{
    switch (v.t) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        return v.u.l->gen ? "generator" : "list";
    case JV_DICT:
        return v.u.d->ns ? "Namespace" : "dict";
    case JV_FUNC:
        return "builtin_function_or_method";
    default:
        return "Macro";
    }
}

bool ebb__jv_truthy(struct jv v)
{
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0;
    case JV_STR:
        return v.u.s->n != 0;
    case JV_LIST:
        return v.u.l->gen || v.u.l->n != 0;
    case JV_DICT:
        return v.u.d->ns || v.u.d->n != 0;
    default:
        return true;
    }
}

bool ebb__jv_is_num(struct jv v)
{
    return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

double ebb__jv_num(struct jv v)
{
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? v.u.b : 0;
}

bool ebb__jv_equal(struct jv a, struct jv b)
{
    if (ebb__jv_is_num(a) && ebb__jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return ebb__jv_num(a) == ebb__jv_num(b);
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.u.s->n == b.u.s->n && !memcmp(a.u.s->p, b.u.s->p, a.u.s->n);
    case JV_LIST:
        if (a.u.l->gen || b.u.l->gen)
            return a.u.l == b.u.l;
        if (a.u.l->tuple != b.u.l->tuple)
            return false;
        if (a.u.l->n != b.u.l->n)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!ebb__jv_equal(a.u.l->v[i], b.u.l->v[i]))
                return false;
        return true;
    case JV_DICT:
        if (a.u.d->ns || b.u.d->ns)
            return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct jv *o = ebb__jv_dict_get(b, a.u.d->k[i]);
            if (!o || !ebb__jv_equal(a.u.d->v[i], *o))
                return false;
        }
        return true;
    case JV_FUNC:
        return a.u.fn == b.u.fn;
    case JV_MACRO:
        return a.u.m == b.u.m;
    default:
        return false;
    }
}

int ebb__jv_compare(struct jctx *c, struct jv a, struct jv b)
{
    if (ebb__jv_is_num(a) && ebb__jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_INT ? a.u.i : a.u.b, y = b.t == JV_INT ? b.u.i : b.u.b;
            return x < y ? -1 : x > y;
        }
        double x = ebb__jv_num(a), y = ebb__jv_num(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
        int r = memcmp(a.u.s->p, b.u.s->p, n);
        if (r)
            return r < 0 ? -1 : 1;
        return a.u.s->n < b.u.s->n ? -1 : a.u.s->n > b.u.s->n;
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (!ebb__jv_equal(a.u.l->v[i], b.u.l->v[i]))
                return ebb__jv_compare(c, a.u.l->v[i], b.u.l->v[i]);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    ebb__jinja_fail(c, "'<' not supported between instances of '%s' and '%s'", ebb__jv_type_name(a),
                    ebb__jv_type_name(b));
}

/* ---- UTF-8 ---------------------------------------------------------------------------------- */

size_t ebb__utf8_len(const char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)p[i] & 0xc0) != 0x80;
    return k;
}

uint32_t ebb__utf8_cp(const char *p, size_t n, size_t i, size_t *len)
{
    const unsigned char *s = (const unsigned char *)p + i;
    size_t left = n - i, k;
    uint32_t cp, min;
    *len = 1;
    if (s[0] < 0x80)
        return s[0];
    if ((s[0] & 0xe0) == 0xc0) {
        k = 2, cp = s[0] & 0x1fu, min = 0x80;
    } else if ((s[0] & 0xf0) == 0xe0) {
        k = 3, cp = s[0] & 0x0fu, min = 0x800;
    } else if ((s[0] & 0xf8) == 0xf0) {
        k = 4, cp = s[0] & 0x07u, min = 0x10000;
    } else {
        return EBB__CP_INVALID;
    }
    if (left < k)
        return EBB__CP_INVALID;
    for (size_t j = 1; j < k; j++) {
        if ((s[j] & 0xc0) != 0x80)
            return EBB__CP_INVALID;
        cp = cp << 6 | (s[j] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return EBB__CP_INVALID;
    *len = k;
    return cp;
}

size_t ebb__py_space_at(const char *p, size_t n, size_t i)
{
    unsigned char ch = (unsigned char)p[i];
    if (ch < 0x80)
        return ch == ' ' || (ch >= 0x09 && ch <= 0x0d) || (ch >= 0x1c && ch <= 0x1f);
    size_t k;
    uint32_t cp = ebb__utf8_cp(p, n, i, &k);
    return cp != EBB__CP_INVALID && ebb__py_isspace(cp) ? k : 0;
}

size_t ebb__py_space_before(const char *p, size_t e)
{
    size_t b = e - 1;
    while (b > 0 && e - b < 4 && ((unsigned char)p[b] & 0xc0) == 0x80)
        b--;
    size_t k = ebb__py_space_at(p, e, b);
    return b + k == e ? k : 0;
}

void ebb_jinja_trim(const char *s, size_t n, size_t *off, size_t *len)
{
    size_t b = 0, e = n, k;
    while (b < e && (k = ebb__py_space_at(s, e, b)))
        b += k;
    while (e > b && (k = ebb__py_space_before(s + b, e - b)))
        e -= k;
    *off = b;
    *len = e - b;
}

size_t ebb__utf8_offset(const char *p, size_t n, size_t idx)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)p[i] & 0xc0) != 0x80) {
            if (k == idx)
                return i;
            k++;
        }
    }
    return n;
}

/* ---- building strings ----------------------------------------------------------------------- */

void ebb__jbuf_put(struct jbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) {
            if (cap > SIZE_MAX / 2)
                ebb__jinja_fail_err(b->c, EBB_ERANGE, "string too large");
            cap *= 2;
        }
        char *p = ebb__jinja_alloc(b->c, cap);
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
}

void ebb__jbuf_puts(struct jbuf *b, const char *s)
{
    ebb__jbuf_put(b, s, strlen(s));
}

struct jv ebb__jbuf_take(struct jbuf *b)
{
    return ebb__jv_str(b->c, b->p ? b->p : "", b->n);
}

void ebb__fmt_float(char *buf, size_t n, double f)
{
    if (isnan(f)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, n, f < 0 ? "-inf" : "inf");
        return;
    }
    /* The shortest digits that read back as f, placed as Python's repr places them. */
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f)
            break;
    }
    char digits[24];
    size_t nd = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < sizeof(digits) - 1)
            digits[nd++] = *p;
    digits[nd] = 0;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        digits[--nd] = 0;
    char out[64];
    size_t w = 0;
    if (neg)
        out[w++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[w++] = '0';
            out[w++] = '.';
            for (int i = -1; i > exp; i--)
                out[w++] = '0';
            for (size_t i = 0; i < nd; i++)
                out[w++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++)
                out[w++] = (size_t)i < nd ? digits[i] : '0';
            out[w++] = '.';
            if ((size_t)exp + 1 < nd) {
                for (size_t i = (size_t)exp + 1; i < nd; i++)
                    out[w++] = digits[i];
            } else {
                out[w++] = '0';
            }
        }
        out[w] = 0;
    } else {
        out[w++] = digits[0];
        if (nd > 1) {
            out[w++] = '.';
            for (size_t i = 1; i < nd; i++)
                out[w++] = digits[i];
        }
        snprintf(out + w, sizeof(out) - w, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(buf, n, "%s", out);
}

static void put_num(struct jbuf *b, struct jv v)
{
    char t[64];
    if (v.t == JV_INT)
        snprintf(t, sizeof(t), "%lld", (long long)v.u.i);
    else
        ebb__fmt_float(t, sizeof(t), v.u.f);
    ebb__jbuf_puts(b, t);
}

/* Python's repr of a string: single quotes unless the text has a single quote and no double. */
static void repr_str(struct jbuf *b, const char *s, size_t n)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    ebb__jbuf_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char t[8];
        if (ch == (unsigned char)q || ch == '\\') {
            t[0] = '\\';
            t[1] = (char)ch;
            ebb__jbuf_put(b, t, 2);
        } else if (ch == '\n') {
            ebb__jbuf_puts(b, "\\n");
        } else if (ch == '\r') {
            ebb__jbuf_puts(b, "\\r");
        } else if (ch == '\t') {
            ebb__jbuf_puts(b, "\\t");
        } else if (ch < 0x20 || ch == 0x7f) {
            snprintf(t, sizeof(t), "\\x%02x", ch);
            ebb__jbuf_puts(b, t);
        } else if (ch < 0x80) {
            ebb__jbuf_put(b, (const char *)&ch, 1);
        } else {
            /* A character str.isprintable() is false for is escaped as repr() does (\xa0, \x85,
             * \u2028, \u200b, \U000e0001); a byte that starts no UTF-8 character is copied. */
            size_t k;
            uint32_t cp = ebb__utf8_cp(s, n, i, &k);
            if (cp == EBB__CP_INVALID || ebb__py_isprintable(cp)) {
                ebb__jbuf_put(b, s + i, k);
            } else {
                char u[16];
                snprintf(u, sizeof(u),
                         cp < 0x100     ? "\\x%02x"
                         : cp < 0x10000 ? "\\u%04x"
                                        : "\\U%08x",
                         (unsigned)cp);
                ebb__jbuf_puts(b, u);
            }
            i += k - 1;
        }
    }
    ebb__jbuf_put(b, &q, 1);
}

static void repr_at(struct jbuf *b, struct jv v, int level)
{
    if (level > 100)
        ebb__jinja_fail(b->c, "a value nested deeper than 100 levels (or containing itself)");
    switch (v.t) {
    case JV_STR:
        repr_str(b, v.u.s->p, v.u.s->n);
        return;
    case JV_LIST:
        if (v.u.l->gen) {
            ebb__jbuf_puts(b, "<generator object>");
            return;
        }
        ebb__jbuf_puts(b, v.u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                ebb__jbuf_puts(b, ", ");
            repr_at(b, v.u.l->v[i], level + 1);
        }
        ebb__jbuf_puts(b, !v.u.l->tuple ? "]" : v.u.l->n == 1 ? ",)" : ")");
        return;
    case JV_DICT:
        ebb__jbuf_puts(b, v.u.d->ns ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                ebb__jbuf_puts(b, ", ");
            repr_at(b, v.u.d->k[i], level + 1);
            ebb__jbuf_puts(b, ": ");
            repr_at(b, v.u.d->v[i], level + 1);
        }
        ebb__jbuf_puts(b, v.u.d->ns ? "}>" : "}");
        return;
    default:
        ebb__jv_to_str(b, v);
    }
}

void ebb__jv_repr(struct jbuf *b, struct jv v)
{
    repr_at(b, v, 0);
}

void ebb__jv_to_str(struct jbuf *b, struct jv v)
{
    switch (v.t) {
    case JV_UNDEF:
        return;
    case JV_NONE:
        ebb__jbuf_puts(b, "None");
        return;
    case JV_BOOL:
        ebb__jbuf_puts(b, v.u.b ? "True" : "False");
        return;
    case JV_INT:
    case JV_FLOAT:
        put_num(b, v);
        return;
    case JV_STR:
        ebb__jbuf_put(b, v.u.s->p, v.u.s->n);
        return;
    case JV_LIST:
    case JV_DICT:
        ebb__jv_repr(b, v);
        return;
    case JV_FUNC:
        ebb__jbuf_puts(b, "<built-in function ");
        ebb__jbuf_puts(b, v.u.fn->name);
        ebb__jbuf_puts(b, ">");
        return;
    default:
        ebb__jbuf_puts(b, "<Macro>");
    }
}

struct jv ebb__jv_string(struct jctx *c, struct jv v)
{
    if (v.t == JV_STR)
        return v;
    struct jbuf b = {.c = c};
    ebb__jv_to_str(&b, v);
    return ebb__jbuf_take(&b);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

static void json_str(struct jbuf *b, const char *s, size_t n)
{
    ebb__jbuf_puts(b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char t[8];
        switch (ch) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        default:
            if (ch < 0x20) {
                snprintf(t, sizeof(t), "\\u%04x", ch);
                esc = t;
            }
        }
        if (esc) {
            ebb__jbuf_put(b, s + i - run, run);
            run = 0;
            ebb__jbuf_puts(b, esc);
        } else {
            run++;
        }
    }
    ebb__jbuf_put(b, s + n - run, run);
    ebb__jbuf_puts(b, "\"");
}

static void newline_indent(struct jbuf *b, int indent, int level)
{
    ebb__jbuf_puts(b, "\n");
    for (int i = 0; i < indent * level; i++)
        ebb__jbuf_puts(b, " ");
}

void ebb__jv_to_json(struct jbuf *b, struct jv v, int indent, const char *item_sep,
                     const char *key_sep, bool sort_keys, int level)
{
    struct jctx *c = b->c;
    if (level > 200)
        ebb__jinja_fail(c, "tojson: value nested too deeply");
    switch (v.t) {
    case JV_NONE:
        ebb__jbuf_puts(b, "null");
        return;
    case JV_BOOL:
        ebb__jbuf_puts(b, v.u.b ? "true" : "false");
        return;
    case JV_INT:
        put_num(b, v);
        return;
    case JV_FLOAT:
        if (isnan(v.u.f))
            ebb__jbuf_puts(b, "NaN");
        else if (isinf(v.u.f))
            ebb__jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else
            put_num(b, v);
        return;
    case JV_STR:
        json_str(b, v.u.s->p, v.u.s->n);
        return;
    case JV_LIST:
        if (v.u.l->gen)
            break;
        if (!v.u.l->n) {
            ebb__jbuf_puts(b, "[]");
            return;
        }
        ebb__jbuf_puts(b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                ebb__jbuf_puts(b, item_sep);
            if (indent >= 0)
                newline_indent(b, indent, level + 1);
            ebb__jv_to_json(b, v.u.l->v[i], indent, item_sep, key_sep, sort_keys, level + 1);
        }
        if (indent >= 0)
            newline_indent(b, indent, level);
        ebb__jbuf_puts(b, "]");
        return;
    case JV_DICT: {
        if (v.u.d->ns)
            break;
        size_t n = v.u.d->n;
        if (!n) {
            ebb__jbuf_puts(b, "{}");
            return;
        }
        size_t *order = ebb__jinja_alloc(c, n * sizeof(*order));
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        if (sort_keys) { /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < n; i++) {
                size_t k = order[i], j = i;
                while (j > 0 && ebb__jv_compare(c, v.u.d->k[order[j - 1]], v.u.d->k[k]) > 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = k;
            }
        }
        ebb__jbuf_puts(b, "{");
        for (size_t i = 0; i < n; i++) {
            struct jv k = v.u.d->k[order[i]];
            if (i)
                ebb__jbuf_puts(b, item_sep);
            if (indent >= 0)
                newline_indent(b, indent, level + 1);
            if (k.t == JV_STR) {
                json_str(b, k.u.s->p, k.u.s->n);
            } else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
                struct jbuf t = {.c = c};
                ebb__jv_to_json(&t, k, -1, item_sep, key_sep, false, level + 1);
                json_str(b, t.p, t.n);
            } else {
                ebb__jinja_fail(c, "keys must be str, int, float, bool or None, not %s",
                                ebb__jv_type_name(k));
            }
            ebb__jbuf_puts(b, key_sep);
            ebb__jv_to_json(b, v.u.d->v[order[i]], indent, item_sep, key_sep, sort_keys, level + 1);
        }
        if (indent >= 0)
            newline_indent(b, indent, level);
        ebb__jbuf_puts(b, "}");
        return;
    }
    default:
        break;
    }
    ebb__jinja_fail(c, "Object of type %s is not JSON serializable", ebb__jv_type_name(v));
}
