/* JSON schema -> GBNF: one rule per schema node, named after the root rule with a counter; the
 * shared JSON rules (strings, numbers, any value, whitespace) are written once per builder. */
#include "json-schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-schema-int.h"

#define MAX_DEPTH 64
#define MAX_REFS 256
#define MAX_COUNT 256 /* bounds taken from minItems/maxItems/minLength/maxLength */
#define KW_CHARS "$abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
#define MAX_TEXT (4u << 20)

/* ---- builder ----------------------------------------------------------------------------- */

void ebb_gbnf_builder_init(struct ebb_gbnf_builder *b)
{
    memset(b, 0, sizeof(*b));
}

void ebb_gbnf_builder_fini(struct ebb_gbnf_builder *b)
{
    free(b->text);
    memset(b, 0, sizeof(*b));
}

static void vappend(struct ebb_gbnf_builder *b, const char *fmt, va_list ap)
{
    if (b->oom)
        return;
    va_list ap2;
    va_copy(ap2, ap);
    int w = vsnprintf(b->text ? b->text + b->len : NULL, b->text ? b->cap - b->len : 0, fmt, ap2);
    va_end(ap2);
    if (w < 0) {
        b->oom = true;
        return;
    }
    if (!b->text || b->len + (size_t)w + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->len + (size_t)w + 1)
            nc *= 2;
        char *nt = nc <= MAX_TEXT ? realloc(b->text, nc) : NULL;
        if (!nt) {
            b->oom = true;
            return;
        }
        b->text = nt;
        b->cap = nc;
        vsnprintf(b->text + b->len, b->cap - b->len, fmt, ap);
    }
    b->len += (size_t)w;
}

void ebb_gbnf_printf(struct ebb_gbnf_builder *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vappend(b, fmt, ap);
    va_end(ap);
}

/* s[0..n) as a GBNF string literal. */
static void put_lit(struct ebb_gbnf_builder *b, const char *s, size_t n)
{
    ebb_gbnf_printf(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            ebb_gbnf_printf(b, "\\%c", c);
        else if (c == '\n')
            ebb_gbnf_printf(b, "\\n");
        else if (c < 0x20)
            ebb_gbnf_printf(b, "\\x%02x", c);
        else
            ebb_gbnf_printf(b, "%c", c);
    }
    ebb_gbnf_printf(b, "\"");
}

/* ---- shared rules ------------------------------------------------------------------------ */

enum {
    SH_WS = 1u << 0,
    SH_CHAR = 1u << 1,
    SH_STRING = 1u << 2,
    SH_INT = 1u << 3,
    SH_NUMBER = 1u << 4,
    SH_VALUE = 1u << 5,
    SH_DATE = 1u << 6,
    SH_TIME = 1u << 7,
    SH_UUID = 1u << 8,
};

/* Whitespace between tokens is free but bounded, so a model cannot pad forever. */
static const struct {
    unsigned bit, needs;
    const char *text;
} shared_rules[] = {
    {SH_WS, 0, "json-ws ::= [ \\t\\n]{0,16}\n"},
    {SH_CHAR, 0,
     "json-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"},
    {SH_STRING, SH_CHAR, "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"},
    {SH_INT, 0, "json-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"},
    {SH_NUMBER, SH_INT,
     "json-number ::= json-int ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"},
    {SH_VALUE, SH_WS | SH_STRING | SH_NUMBER,
     "json-value ::= json-object | json-array | json-string | json-number | \"true\" | "
     "\"false\" | \"null\"\n"
     "json-object ::= \"{\" json-ws ( json-string json-ws \":\" json-ws json-value json-ws "
     "( \",\" json-ws json-string json-ws \":\" json-ws json-value json-ws )* )? \"}\"\n"
     "json-array ::= \"[\" json-ws ( json-value json-ws ( \",\" json-ws json-value json-ws )* )? "
     "\"]\"\n"},
    {SH_DATE, 0,
     "json-date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] "
     "[0-9] | \"3\" [01] )\n"},
    {SH_TIME, 0,
     "json-time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
     "[0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"},
    {SH_UUID, 0,
     "json-uuid ::= [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
     "[0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}\n"},
};

/* Writes the shared rules in bits (and those they use) that b does not have yet. */
static void need(struct ebb_gbnf_builder *b, unsigned bits)
{
    const size_t n = sizeof(shared_rules) / sizeof(shared_rules[0]);
    for (int pass = 0; pass < 3; pass++) {
        for (size_t i = 0; i < n; i++) {
            if (bits & shared_rules[i].bit)
                bits |= shared_rules[i].needs;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if ((bits & shared_rules[i].bit) && !(b->shared & shared_rules[i].bit)) {
            ebb_gbnf_printf(b, "%s", shared_rules[i].text);
            b->shared |= shared_rules[i].bit;
        }
    }
}

/* ---- conversion -------------------------------------------------------------------------- */

struct conv {
    struct ebb_gbnf_builder *b;
    const json_t *doc; /* the whole schema, for $ref */
    const char *root;
    struct {
        const char *ref;
        char rule[96];
    } refs[MAX_REFS];
    unsigned n_refs;
    ebb_err rc;
    struct ebb_diag *diag;
};

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static ebb_err
cfail(struct conv *c, ebb_err rc, const char *path, const char *fmt, ...)
{
    if (c->rc)
        return c->rc;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->rc = ebb_diag_set(c->diag, rc, "%s at %.200s", msg, path);
    /* The pointer names the keyword when the message quotes one first ("'minItems' above..."
     * at $.properties.x: .properties.x.minItems). */
    const char *q = strchr(msg, '\''), *q2 = q ? strchr(q + 1, '\'') : NULL;
    bool kw =
        q && q2 && q2 - q - 1 < 40 && q2 > q + 1 && strspn(q + 1, KW_CHARS) == (size_t)(q2 - q - 1);
    snprintf(c->b->err_path, sizeof(c->b->err_path), "%.200s%s%.*s",
             path[0] == '$' ? path + 1 : path, kw ? "." : "", kw ? (int)(q2 - q - 1) : 0,
             kw ? q + 1 : "");
    return c->rc;
}

static void new_rule(struct conv *c, char *name, size_t cap)
{
    snprintf(name, cap, "%.80s-%u", c->root, ++c->b->n_rules);
}

static void sub_path(char *out, size_t cap, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static void sub_path(char *out, size_t cap, const char *path, const char *fmt, ...)
{
    int w = snprintf(out, cap, "%s", path);
    if (w < 0 || (size_t)w >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + w, cap - (size_t)w, fmt, ap);
    va_end(ap);
}

static void gen(struct conv *c, const json_t *s, const char *path, const char *name, int depth);

/* Keywords the converter reads, and annotations that cannot change what is valid. */
static const char *const known[] = {
    "type",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "$defs",
    "definitions",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "discriminator", /* OpenAPI/pydantic: a hint for validators; the alternatives constrain */
    "contentEncoding",
    "contentMediaType",
    "nullable", /* OpenAPI 3.0: the value may also be null */
};

static bool check_keywords(struct conv *c, const json_t *s, const char *path)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v)
    {
        bool ok = false;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]) && !ok; i++)
            ok = !strcmp(key, known[i]);
        if (!ok) {
            cfail(c, EBB_EUNSUPPORTED, path, "the schema keyword '%.60s' is not supported", key);
            return false;
        }
    }
    return true;
}

static bool get_count(struct conv *c, const json_t *s, const char *key, const char *path, long *out)
{
    json_t *v = json_object_get(s, key);
    if (!v)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        cfail(c, EBB_EINVAL, path, "'%s' must be a non-negative integer", key);
        return false;
    }
    *out = json_integer_value(v) > 1000000 ? 1000000 : (long)json_integer_value(v);
    return true;
}

/* "x{min,max}" with max < 0 unbounded; bounds above MAX_COUNT: max dropped, min refused. */
static bool put_bounds(struct conv *c, long min, long max, const char *path, const char *what)
{
    if (min > MAX_COUNT) {
        cfail(c, EBB_EUNSUPPORTED, path, "'%s' above %d is not supported", what, MAX_COUNT);
        return false;
    }
    if (max > MAX_COUNT)
        max = -1;
    if (max >= 0 && max < min) {
        cfail(c, EBB_EINVAL, path, "'%s' is above the maximum (the maximum is below the minimum)",
              what);
        return false;
    }
    if (max < 0)
        ebb_gbnf_printf(c->b, "{%ld,}", min);
    else
        ebb_gbnf_printf(c->b, "{%ld,%ld}", min, max);
    return true;
}

static void gen_literal_values(struct conv *c, const json_t *vals, const char *name)
{
    ebb_gbnf_printf(c->b, "%s ::= ", name);
    for (size_t i = 0; i < json_array_size(vals); i++) {
        char *t = json_dumps(json_array_get(vals, i), JSON_COMPACT | JSON_ENCODE_ANY);
        if (!t) {
            c->b->oom = true;
            return;
        }
        ebb_gbnf_printf(c->b, i ? " | " : "");
        put_lit(c->b, t, strlen(t));
        free(t);
    }
    ebb_gbnf_printf(c->b, "\n");
}

static void gen_string(struct conv *c, const json_t *s, const char *path, const char *name)
{
    json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    long min = 0, max = -1;
    if (!get_count(c, s, "minLength", path, &min) || !get_count(c, s, "maxLength", path, &max))
        return;
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (!f) {
            cfail(c, EBB_EINVAL, path, "'format' must be a string");
            return;
        }
        const char *rule = !strcmp(f, "date")        ? "json-date"
                           : !strcmp(f, "time")      ? "json-time"
                           : !strcmp(f, "date-time") ? "json-date \"T\" json-time"
                           : !strcmp(f, "uuid")      ? "json-uuid"
                                                     : NULL;
        if (!rule) {
            cfail(c, EBB_EUNSUPPORTED, path, "'format': '%.40s' is not supported", f);
            return;
        }
        need(c->b, SH_DATE | SH_TIME | SH_UUID);
        ebb_gbnf_printf(c->b, "%s ::= \"\\\"\" %s \"\\\"\"\n", name, rule);
        return;
    }
    need(c->b, SH_CHAR | SH_STRING);
    if (pat) {
        if (!json_is_string(pat)) {
            cfail(c, EBB_EINVAL, path, "'pattern' must be a string");
            return;
        }
        char *expr = malloc(65536), err[200] = "";
        if (!expr) {
            c->b->oom = true;
            return;
        }
        if (ebb__regex_to_gbnf(json_string_value(pat), "json-char", expr, 65536, err, sizeof(err)))
            ebb_gbnf_printf(c->b, "%s ::= \"\\\"\" %s \"\\\"\"\n", name, expr);
        else
            cfail(c, EBB_EUNSUPPORTED, path, "'pattern': %s", err);
        free(expr);
        return;
    }
    if (min == 0 && max < 0) {
        ebb_gbnf_printf(c->b, "%s ::= json-string\n", name);
        return;
    }
    ebb_gbnf_printf(c->b, "%s ::= \"\\\"\" json-char", name);
    if (put_bounds(c, min, max, path, "minLength"))
        ebb_gbnf_printf(c->b, " \"\\\"\"\n");
}

static void gen_array(struct conv *c, const json_t *s, const char *path, const char *name,
                      int depth)
{
    long min = 0, max = -1;
    if (!get_count(c, s, "minItems", path, &min) || !get_count(c, s, "maxItems", path, &max))
        return;
    if (min > MAX_COUNT) { /* checked here: the rule below counts the items after the first */
        cfail(c, EBB_EUNSUPPORTED, path, "'minItems' above %d is not supported", MAX_COUNT);
        return;
    }
    char item[128], p2[512];
    new_rule(c, item, sizeof(item));
    sub_path(p2, sizeof(p2), path, ".items");
    gen(c, json_object_get(s, "items"), p2, item, depth + 1);
    need(c->b, SH_WS);
    if (max == 0) {
        ebb_gbnf_printf(c->b, "%s ::= \"[\" json-ws \"]\"\n", name);
        return;
    }
    ebb_gbnf_printf(c->b, "%s ::= \"[\" json-ws %s%s json-ws ( \",\" json-ws %s json-ws )", name,
                    min == 0 ? "( " : "", item, item);
    if (!put_bounds(c, min ? min - 1 : 0, max < 0 ? -1 : max - 1, path, "minItems"))
        return;
    ebb_gbnf_printf(c->b, "%s \"]\"\n", min == 0 ? " )?" : "");
}

/* Properties in declared order, each required one present: rule first_i is "the properties
 * from i on, nothing written yet", rule next_i "the same after a comma-separated predecessor". */
static void gen_object(struct conv *c, const json_t *s, const char *path, const char *name,
                       int depth)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    if ((props && !json_is_object(props)) || (req && !json_is_array(req)) ||
        (add && !json_is_boolean(add) && !json_is_object(add))) {
        cfail(c, EBB_EINVAL, path, "malformed 'properties', 'required' or 'additionalProperties'");
        return;
    }
    need(c->b, SH_WS | SH_STRING);
    size_t n = json_object_size(props);
    /* Without properties an object is any object unless additionalProperties says otherwise;
     * with properties, a missing additionalProperties means false (OpenAI's strict mode). */
    bool extra = props ? json_is_true(add) || json_is_object(add) : !json_is_false(add);
    char extra_rule[128] = "json-value";
    if (json_is_object(add)) {
        char p2[512];
        new_rule(c, extra_rule, sizeof(extra_rule));
        sub_path(p2, sizeof(p2), path, ".additionalProperties");
        gen(c, add, p2, extra_rule, depth + 1);
    } else if (extra) {
        need(c->b, SH_VALUE);
    }
    unsigned base = c->b->n_rules;
    c->b->n_rules += (unsigned)(2 * n + 2);
    const char *key;
    json_t *v;
    size_t i = 0;
    json_object_foreach(props, key, v)
    {
        bool required = false;
        for (size_t k = 0; k < json_array_size(req); k++)
            required |= json_is_string(json_array_get(req, k)) &&
                        !strcmp(json_string_value(json_array_get(req, k)), key);
        char vr[128], p2[512];
        new_rule(c, vr, sizeof(vr));
        sub_path(p2, sizeof(p2), path, ".properties.%.100s", key);
        gen(c, v, p2, vr, depth + 1);
        json_t *kjs = json_string(key);
        char *kj = kjs ? json_dumps(kjs, JSON_ENCODE_ANY) : NULL;
        json_decref(kjs);
        if (!kj)
            c->b->oom = true;
        /* kv ::= "\"key\"" ws ":" ws value ws */
        for (int first = 1; first >= 0; first--) {
            ebb_gbnf_printf(c->b, "%s-%u ::= %s", c->root, base + 1 + 2 * (unsigned)i + !first,
                            first ? "" : "\",\" json-ws ");
            put_lit(c->b, kj ? kj : "\"\"", kj ? strlen(kj) : 2);
            ebb_gbnf_printf(c->b, " json-ws \":\" json-ws %s json-ws %s-%u", vr, c->root,
                            base + 1 + 2 * (unsigned)(i + 1) + 1);
            if (!required)
                ebb_gbnf_printf(c->b, " | %s-%u", c->root,
                                base + 1 + 2 * (unsigned)(i + 1) + !first);
            ebb_gbnf_printf(c->b, "\n");
        }
        free(kj);
        i++;
    }
    /* after the last declared property: extra key-value pairs if allowed */
    unsigned f_end = base + 1 + 2 * (unsigned)n, n_end = f_end + 1;
    if (extra) {
        ebb_gbnf_printf(c->b,
                        "%s-%u ::= ( json-string json-ws \":\" json-ws %s json-ws %s-%u )?\n"
                        "%s-%u ::= ( \",\" json-ws json-string json-ws \":\" json-ws %s json-ws "
                        ")*\n",
                        c->root, f_end, extra_rule, c->root, n_end, c->root, n_end, extra_rule);
    } else {
        ebb_gbnf_printf(c->b, "%s-%u ::= \"\"\n%s-%u ::= \"\"\n", c->root, f_end, c->root, n_end);
    }
    ebb_gbnf_printf(c->b, "%s ::= \"{\" json-ws %s-%u \"}\"\n", name, c->root, base + 1);
}

/* "#/$defs/name" (any JSON pointer into the document) -> its rule, generated on first use. */
static void gen_ref(struct conv *c, const json_t *s, const char *path, const char *name, int depth)
{
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref || strncmp(ref, "#", 1)) {
        cfail(c, EBB_EUNSUPPORTED, path, "'$ref' must point into the same schema (\"#/...\")");
        return;
    }
    for (unsigned i = 0; i < c->n_refs; i++) {
        if (!strcmp(c->refs[i].ref, ref)) {
            ebb_gbnf_printf(c->b, "%s ::= %s\n", name, c->refs[i].rule);
            return;
        }
    }
    const json_t *t = c->doc;
    char seg[256];
    for (const char *p = ref + 1; *p == '/' && t;) {
        size_t n = 0;
        for (p++; *p && *p != '/' && n + 1 < sizeof(seg); p++) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1'))
                seg[n++] = *++p == '0' ? '~' : '/';
            else
                seg[n++] = *p;
        }
        seg[n] = 0;
        t = json_is_array(t) ? json_array_get(t, (size_t)atol(seg)) : json_object_get(t, seg);
    }
    if (!t) {
        cfail(c, EBB_EINVAL, path, "'$ref' %.100s does not resolve", ref);
        return;
    }
    if (c->n_refs == MAX_REFS) {
        cfail(c, EBB_EUNSUPPORTED, path, "more than %d distinct '$ref's", MAX_REFS);
        return;
    }
    c->refs[c->n_refs].ref = ref;
    new_rule(c, c->refs[c->n_refs].rule, sizeof(c->refs[0].rule));
    char rule[96];
    memcpy(rule, c->refs[c->n_refs++].rule, sizeof(rule));
    ebb_gbnf_printf(c->b, "%s ::= %s\n", name, rule);
    gen(c, t, ref, rule, depth + 1);
}

static void gen_alternatives(struct conv *c, const json_t *alts, const char *kw, const char *path,
                             const char *name, int depth)
{
    if (!json_is_array(alts) || !json_array_size(alts)) {
        cfail(c, EBB_EINVAL, path, "'%s' must be a non-empty array", kw);
        return;
    }
    unsigned first = c->b->n_rules + 1;
    c->b->n_rules += (unsigned)json_array_size(alts);
    ebb_gbnf_printf(c->b, "%s ::=", name);
    for (size_t i = 0; i < json_array_size(alts); i++)
        ebb_gbnf_printf(c->b, "%s %s-%u", i ? " |" : "", c->root, first + (unsigned)i);
    ebb_gbnf_printf(c->b, "\n");
    for (size_t i = 0; i < json_array_size(alts); i++) {
        char r[128], p2[512];
        snprintf(r, sizeof(r), "%.80s-%u", c->root, first + (unsigned)i);
        sub_path(p2, sizeof(p2), path, ".%s[%zu]", kw, i);
        gen(c, json_array_get(alts, i), p2, r, depth + 1);
    }
}

static void gen_type(struct conv *c, const json_t *s, const char *type, const char *path,
                     const char *name, int depth)
{
    if (!strcmp(type, "string")) {
        gen_string(c, s, path, name);
    } else if (!strcmp(type, "integer") || !strcmp(type, "number")) {
        need(c->b, type[0] == 'i' ? SH_INT : SH_NUMBER);
        ebb_gbnf_printf(c->b, "%s ::= %s\n", name, type[0] == 'i' ? "json-int" : "json-number");
    } else if (!strcmp(type, "boolean")) {
        ebb_gbnf_printf(c->b, "%s ::= \"true\" | \"false\"\n", name);
    } else if (!strcmp(type, "null")) {
        ebb_gbnf_printf(c->b, "%s ::= \"null\"\n", name);
    } else if (!strcmp(type, "object")) {
        gen_object(c, s, path, name, depth);
    } else if (!strcmp(type, "array")) {
        gen_array(c, s, path, name, depth);
    } else {
        cfail(c, EBB_EINVAL, path, "'type': unknown type '%.40s'", type);
    }
}

static void gen(struct conv *c, const json_t *s, const char *path, const char *name, int depth)
{
    if (c->rc || c->b->oom)
        return;
    if (depth > MAX_DEPTH) {
        cfail(c, EBB_EUNSUPPORTED, path, "the schema nests deeper than %d", MAX_DEPTH);
        return;
    }
    if (!s || json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        need(c->b, SH_VALUE);
        ebb_gbnf_printf(c->b, "%s ::= json-value\n", name);
        return;
    }
    if (!json_is_object(s)) {
        cfail(c, EBB_EINVAL, path, "a schema must be an object or true");
        return;
    }
    if (!check_keywords(c, s, path))
        return;
    json_t *v = json_object_get(s, "nullable");
    if (v && !json_is_boolean(v)) {
        cfail(c, EBB_EINVAL, path, "'nullable' must be a boolean");
        return;
    }
    if (json_is_true(v)) { /* name ::= the schema without nullable | null */
        json_t *inner = json_copy((json_t *)s);
        if (!inner) {
            c->b->oom = true;
            return;
        }
        json_object_del(inner, "nullable");
        char r[128];
        new_rule(c, r, sizeof(r));
        ebb_gbnf_printf(c->b, "%s ::= %s | \"null\"\n", name, r);
        gen(c, inner, path, r, depth + 1);
        json_decref(inner);
        return;
    }
    if ((v = json_object_get(s, "$ref"))) {
        gen_ref(c, s, path, name, depth);
    } else if ((v = json_object_get(s, "const"))) {
        json_t *one = json_pack("[O]", v);
        gen_literal_values(c, one, name);
        json_decref(one);
    } else if ((v = json_object_get(s, "enum"))) {
        if (!json_is_array(v) || !json_array_size(v))
            cfail(c, EBB_EINVAL, path, "'enum' must be a non-empty array");
        else
            gen_literal_values(c, v, name);
    } else if ((v = json_object_get(s, "anyOf")) || (v = json_object_get(s, "oneOf"))) {
        gen_alternatives(c, v, json_object_get(s, "anyOf") ? "anyOf" : "oneOf", path, name, depth);
    } else if ((v = json_object_get(s, "allOf"))) {
        if (!json_is_array(v) || json_array_size(v) != 1) {
            cfail(c, EBB_EUNSUPPORTED, path, "'allOf' with other than one schema is not supported");
            return;
        }
        char p2[512];
        sub_path(p2, sizeof(p2), path, ".allOf[0]");
        gen(c, json_array_get(v, 0), p2, name, depth + 1);
    } else if ((v = json_object_get(s, "type"))) {
        if (json_is_string(v)) {
            gen_type(c, s, json_string_value(v), path, name, depth);
            return;
        }
        if (!json_is_array(v) || !json_array_size(v)) {
            cfail(c, EBB_EINVAL, path, "'type' must be a string or a non-empty array");
            return;
        }
        unsigned first = c->b->n_rules + 1;
        c->b->n_rules += (unsigned)json_array_size(v);
        ebb_gbnf_printf(c->b, "%s ::=", name);
        for (size_t i = 0; i < json_array_size(v); i++)
            ebb_gbnf_printf(c->b, "%s %s-%u", i ? " |" : "", c->root, first + (unsigned)i);
        ebb_gbnf_printf(c->b, "\n");
        for (size_t i = 0; i < json_array_size(v) && !c->rc; i++) {
            char r[128];
            snprintf(r, sizeof(r), "%.80s-%u", c->root, first + (unsigned)i);
            const char *t = json_string_value(json_array_get(v, i));
            if (!t)
                cfail(c, EBB_EINVAL, path, "'type' entries must be strings");
            else
                gen_type(c, s, t, path, r, depth);
        }
    } else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties")) {
        gen_object(c, s, path, name, depth);
    } else if (json_object_get(s, "items")) {
        gen_array(c, s, path, name, depth);
    } else {
        need(c->b, SH_VALUE); /* only annotations and $defs: any value */
        ebb_gbnf_printf(c->b, "%s ::= json-value\n", name);
    }
}

ebb_err ebb_json_schema_to_gbnf(const json_t *schema, const char *root_rule_name,
                                struct ebb_gbnf_builder *b, struct ebb_diag *diag)
{
    struct conv *c = calloc(1, sizeof(*c));
    if (!c)
        return EBB_ENOMEM;
    c->b = b;
    c->doc = schema;
    c->root = root_rule_name;
    c->diag = diag;
    b->err_path[0] = 0;
    gen(c, schema, "$", root_rule_name, 0);
    ebb_err rc = c->rc;
    if (!rc && b->oom)
        rc = ebb_diag_set(diag, EBB_ENOMEM, "out of memory converting the schema");
    free(c);
    return rc;
}
