/* Private to the Jinja interpreter (jinja-*.c): arena, values, tokens, syntax tree and the
 * render context. */
#ifndef EBB_API_JINJA_INT_H
#define EBB_API_JINJA_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "jinja.h"

/* ---- arena (jinja-value.c) ------------------------------------------------------------------ */

/* Bump allocator: everything a parse or a render makes lives until the arena is freed, so the
 * evaluator can leave by longjmp on any error without leaking. Growth past limit fails. */
struct jarena {
    struct jchunk *head;
    size_t used, limit;
    bool nomem; /* the last NULL came from malloc, not from the limit */
};
void *ebb__jarena_alloc(struct jarena *a, size_t n); /* zeroed; NULL past the limit */
void ebb__jarena_fini(struct jarena *a);

/* ---- values --------------------------------------------------------------------------------- */

enum jv_type {
    JV_UNDEF = 0,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_FUNC,
    JV_MACRO,
};

struct jstr {
    size_t n;
    bool safe; /* markupsafe's Markup (the safe filter): '+' HTML-escapes plain strings added */
    char p[];  /* n bytes of UTF-8 and a NUL */
};

struct jv;
struct jlist {
    size_t n, cap;
    struct jv *v;
    bool tuple; /* a Python tuple: prints as (a, b) */
    bool gen;   /* a generator in Python (select, map, ...): no len(), no JSON, always true */
};

/* Ordered like a Python dict. A namespace() is a dict whose attributes `set` may assign. */
struct jdict {
    size_t n, cap;
    struct jv *k, *v;
    bool ns;
};

struct jctx;
struct jcall;
typedef struct jv (*jfunc_fn)(struct jctx *c, struct jv self, struct jcall *call);

/* A built-in function or a method bound to self. */
struct jfunc {
    jfunc_fn fn;
    const char *name;
    struct jv *self;
};

struct js;
struct jframe;
struct jmacro {
    const struct js *def;
    struct jframe *scope;  /* where it was defined */
    struct jmacro *caller; /* {% call %}: the block that caller() renders */
};

struct jv {
    uint8_t t; /* enum jv_type */
    union {
        bool b;
        int64_t i;
        double f;
        struct jstr *s;
        struct jlist *l;
        struct jdict *d;
        struct jfunc *fn;
        struct jmacro *m;
        const char *undef; /* the name that was undefined, for error messages */
    } u;
};

/* Arguments of a call, evaluated: positional then keyword. */
struct jcall {
    struct jv *pos;
    size_t n_pos;
    const char **kw_names;
    struct jv *kw;
    size_t n_kw;
    int line;
};

/* ---- tokens (jinja-lex.c) ------------------------------------------------------------------- */

enum jtok_type {
    JT_EOF = 0,
    JT_TEXT,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP,
};

struct jtok {
    uint8_t type;
    int line;
    const char *p; /* text, name, decoded string or operator */
    size_t n;
    int64_t i;
    double f;
};

struct jtoks {
    struct jtok *v;
    size_t n, cap;
};

/* Splits the source into tokens with Jinja's whitespace control (trim_blocks and lstrip_blocks
 * on, '-' and '+' markers, one trailing newline dropped, newlines normalised). Strings are
 * decoded into a. */
ebb_err ebb__jinja_lex(const char *src, size_t n, struct jarena *a, struct jtoks *out,
                       struct ebb_diag *diag);

/* ---- syntax tree (jinja-parse.c) ------------------------------------------------------------ */

enum jx_kind {
    JX_LIT,
    JX_NAME,
    JX_LIST,
    JX_TUPLE,
    JX_DICT,   /* args: key, value, key, value, ... */
    JX_ATTR,   /* a.name */
    JX_ITEM,   /* a[b] */
    JX_SLICE,  /* a[b:c:d], missing parts NULL */
    JX_CALL,   /* a(args, kw) */
    JX_FILTER, /* a|name(args, kw); a is NULL inside a filter block */
    JX_TEST,   /* a is [not] name(args) */
    JX_NOT,
    JX_NEG,
    JX_POS,
    JX_BIN, /* op: + - * / // % ** ~ */
    JX_AND,
    JX_OR,
    JX_CMP,  /* a op b; op: == != < <= > >= in, notin */
    JX_COND, /* b if a else c */
};

struct jfilter_def;
struct jtest_def;

struct jx {
    uint8_t kind;
    char op[4];
    bool negate;
    int line;
    struct jv lit;
    const char *name;
    struct jx *a, *b, *c;
    struct jx **args;
    size_t n_args;
    const char **kw_names;
    struct jx **kw;
    size_t n_kw;
    const struct jfilter_def *filter;
    const struct jtest_def *test;
};

enum js_kind {
    JS_TEXT,
    JS_OUT,
    JS_IF,
    JS_FOR,
    JS_SET,
    JS_SET_BLOCK,
    JS_MACRO,
    JS_CALL_BLOCK,
    JS_FILTER_BLOCK,
    JS_BREAK,
    JS_CONTINUE,
    JS_BODY, /* a block that only renders its body ({% generation %}) */
};

struct js {
    uint8_t kind;
    int line;
    struct js *next;
    const char *text; /* JS_TEXT */
    size_t n;
    struct jx *e;       /* OUT, IF condition, FOR iterable, SET value, CALL_BLOCK call, FILTER */
    struct jx *cond;    /* FOR ... if cond */
    struct js *body;    /* IF then, FOR, SET_BLOCK, MACRO, CALL_BLOCK, FILTER_BLOCK, BODY */
    struct js *orelse;  /* IF else (an elif is a nested IF), FOR else */
    const char **names; /* FOR targets, SET targets, MACRO parameters */
    size_t n_names;
    const char *attr;     /* SET ns.attr */
    struct jx **defaults; /* MACRO parameter defaults (NULL entries: none) */
    const char *name;     /* MACRO name */
    bool recursive;       /* FOR ... recursive */
    bool elif;            /* an IF that is another's elif branch */
};

struct ebb_jinja {
    struct jarena arena;
    struct js *root;
};

/* Parses tokens into t->root. */
ebb_err ebb__jinja_parse_toks(struct ebb_jinja *t, const struct jtoks *toks, struct ebb_diag *diag);

/* ---- built-ins (jinja-filters.c, jinja-tests.c, jinja-methods.c) -------------------------- */

/* A filter: applied to v with the call's arguments. */
struct jfilter_def {
    const char *name;
    struct jv (*fn)(struct jctx *c, struct jv v, struct jcall *call);
};
struct jtest_def {
    const char *name;
    bool (*fn)(struct jctx *c, struct jv v, struct jcall *call);
};
const struct jfilter_def *ebb__jinja_filter(const char *name);
const struct jtest_def *ebb__jinja_test(const char *name);
/* A global function (range, namespace, dict, raise_exception, strftime_now, ...) or NULL. */
struct jv ebb__jinja_global(struct jctx *c, const char *name);
/* obj.name for a string, list or dict method; JV_UNDEF when there is none. */
struct jv ebb__jinja_method(struct jctx *c, struct jv obj, const char *name);
/* The strip and replace filters' work, which the string methods of the same names share:
 * s with the characters of chars (whitespace when none) removed from the chosen ends; s with
 * the first count occurrences of old (all when count < 0) replaced by new. */
struct jv ebb__jinja_strip(struct jctx *c, struct jv s, struct jv chars, bool left, bool right);
struct jv ebb__jinja_replace(struct jctx *c, struct jv s, struct jv old, struct jv new,
                             int64_t count);

/* ---- render context (jinja-eval.c) ---------------------------------------------------------- */

struct jframe {
    struct jframe *parent;
    struct jdict vars;
};

struct jctx {
    struct jarena arena;
    jmp_buf fail;
    ebb_err err;
    char msg[400];
    int line;          /* the line being evaluated */
    struct jbuf *outb; /* where rendered text goes now (the result, or a capture) */
    size_t max_output;
    int brk; /* 1 after break, 2 after continue, until the loop sees it */
    uint64_t steps, max_steps;
    unsigned depth, max_depth;
    struct tm now;
    struct jframe *globals; /* the render variables */
    struct jframe *top;     /* the template's own top-level assignments */
    const struct js *root;
};

/* Leaves the render with EBB_EINVAL (or err) and a message; never returns. */
_Noreturn void ebb__jinja_fail(struct jctx *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
_Noreturn void ebb__jinja_fail_err(struct jctx *c, ebb_err err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void *ebb__jinja_alloc(struct jctx *c, size_t n); /* fails the render past the memory limit */
/* Calls f (a function or macro) with call. */
struct jv ebb__jinja_call(struct jctx *c, struct jv f, struct jcall *call);
/* Applies a test by name, as select/selectattr do. */
bool ebb__jinja_apply_test(struct jctx *c, const char *name, struct jv v, struct jv *args,
                           size_t n_args);

/* ---- value helpers (jinja-value.c) ---------------------------------------------------------- */

static inline struct jv jv_undef(const char *name)
{
    struct jv v = {.t = JV_UNDEF};
    v.u.undef = name;
    return v;
}
static inline struct jv jv_none(void)
{
    return (struct jv){.t = JV_NONE};
}
static inline struct jv jv_bool(bool b)
{
    struct jv v = {.t = JV_BOOL};
    v.u.b = b;
    return v;
}
static inline struct jv jv_int(int64_t i)
{
    struct jv v = {.t = JV_INT};
    v.u.i = i;
    return v;
}
static inline struct jv jv_float(double f)
{
    struct jv v = {.t = JV_FLOAT};
    v.u.f = f;
    return v;
}

struct jv ebb__jv_str(struct jctx *c, const char *p, size_t n);
struct jv ebb__jv_cstr(struct jctx *c, const char *s);
struct jv ebb__jv_list(struct jctx *c, size_t cap);
struct jv ebb__jv_dict(struct jctx *c, size_t cap);
void ebb__jv_push(struct jctx *c, struct jv list, struct jv item);
/* Sets d[key] (replacing an equal key). */
void ebb__jv_dict_set(struct jctx *c, struct jv d, struct jv key, struct jv val);
/* d[key] or NULL. */
struct jv *ebb__jv_dict_get(struct jv d, struct jv key);
struct jv *ebb__jv_dict_gets(const struct jdict *d, const char *key);
struct jv ebb__jv_from_json(struct jctx *c, const json_t *j);

const char *ebb__jv_type_name(struct jv v); /* Python's name: str, int, list, dict, ... */
bool ebb__jv_truthy(struct jv v);
bool ebb__jv_equal(struct jv a, struct jv b);
/* Python's ordering (numbers, strings, lists); fails the render for other types. */
int ebb__jv_compare(struct jctx *c, struct jv a, struct jv b);
bool ebb__jv_is_num(struct jv v);
double ebb__jv_num(struct jv v);

/* A growable string being built in the arena. */
struct jbuf {
    struct jctx *c;
    char *p;
    size_t n, cap;
};
void ebb__jbuf_put(struct jbuf *b, const char *s, size_t n);
void ebb__jbuf_puts(struct jbuf *b, const char *s);
struct jv ebb__jbuf_take(struct jbuf *b);

/* str(v) as Python prints it (an undefined value is ""); repr for containers' items. */
void ebb__jv_to_str(struct jbuf *b, struct jv v);
void ebb__jv_repr(struct jbuf *b, struct jv v);
struct jv ebb__jv_string(struct jctx *c, struct jv v);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys). indent < 0: none. */
void ebb__jv_to_json(struct jbuf *b, struct jv v, int indent, const char *item_sep,
                     const char *key_sep, bool sort_keys, int level);
/* Python's float repr ("1.0", "1e-05", "0.30000000000000004"). */
void ebb__fmt_float(char *buf, size_t n, double f);

/* Number of code points of a UTF-8 string, and the byte offset of code point i. */
size_t ebb__utf8_len(const char *p, size_t n);
size_t ebb__utf8_offset(const char *p, size_t n, size_t i);
/* The code point of the UTF-8 character at p[i..n) (i < n) and its length in bytes (*len);
 * EBB__CP_INVALID, length 1, for a byte that starts no valid character. */
#define EBB__CP_INVALID 0x110000u
uint32_t ebb__utf8_cp(const char *p, size_t n, size_t i, size_t *len);
/* Length in bytes of the whitespace character (str.isspace) at p[i..n), 0 if there is none; and
 * of the one that ends at p[e - 1] (e > 0). */
size_t ebb__py_space_at(const char *p, size_t n, size_t i);
size_t ebb__py_space_before(const char *p, size_t e);

/* Python's str.isspace() and str.isprintable() of a code point (jinja-unicode.c, generated by
 * scripts/gen-jinja-unicode.py). */
bool ebb__py_isspace(uint32_t cp);
bool ebb__py_isprintable(uint32_t cp);

#endif
