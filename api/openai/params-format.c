/* Structured output fields of a generation request: OpenAI's `response_format` (text,
 * json_object, json_schema) and llama.cpp's `json_schema` and `grammar`. Each becomes one GBNF
 * grammar for the scheduler, which compiles it when the job is submitted. */
#include "openai.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/schema/json-schema.h"
#include "grammar/grammar.h"

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static ebb_err
ffail(struct ebb__perr *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    e->param = param;
    return EBB_EINVAL;
}

/* schema (at the client's path where, e.g. "response_format.json_schema.schema") ->
 * r->grammar. A schema ebb cannot enforce is the client's error (400) whose param is the path
 * of the keyword at fault. The grammar is compiled here once, so that what only the grammar
 * compiler sees (a $ref cycle that writes nothing, a schema too large) is answered in the
 * schema's terms rather than the grammar's; the scheduler compiles it again for the job. */
static ebb_err from_schema(const json_t *schema, const char *param, const char *where,
                           struct ebb__gen_req *r, struct ebb__perr *e)
{
    struct ebb_gbnf_builder b;
    ebb_gbnf_builder_init(&b);
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_json_schema_to_gbnf(schema, "root", &b, &d);
    if (rc == EBB_ENOMEM) {
        ebb_gbnf_builder_fini(&b);
        return rc;
    }
    if (rc) {
        snprintf(e->param_buf, sizeof(e->param_buf), "%s%s", where, b.err_path);
        ebb_gbnf_builder_fini(&b);
        ffail(e, param, "'%s': %s", param, d.msg);
        e->param = e->param_buf;
        return EBB_EINVAL;
    }
    struct ebb_grammar *g = NULL;
    rc = ebb_grammar_compile(b.text, b.len, "root", &g, &d);
    ebb_grammar_free(g);
    if (rc == EBB_ENOMEM) {
        ebb_gbnf_builder_fini(&b);
        return rc;
    }
    if (rc) {
        ebb_gbnf_builder_fini(&b);
        snprintf(e->param_buf, sizeof(e->param_buf), "%s", where);
        if (strstr(d.msg, "left-recursive"))
            ffail(e, param,
                  "'%s': the schema refers to itself through '$ref' before any JSON text is "
                  "written (an endless recursion)",
                  param);
        else if (strstr(d.msg, "longer than"))
            ffail(e, param, "'%s': the schema is too large to enforce (%s)", param, d.msg);
        else
            ffail(e, param, "'%s': the schema cannot be enforced (%s)", param, d.msg);
        e->param = e->param_buf;
        return EBB_EINVAL;
    }
    r->grammar = b.text; /* ownership moves to the request */
    return EBB_OK;
}

/* response_format: {"type": "text" | "json_object" | "json_schema", ...}. */
static ebb_err parse_response_format(json_t *v, struct ebb__gen_req *r, struct ebb__perr *e)
{
    const char *p = "response_format";
    json_t *type = json_object_get(v, "type");
    if (!json_is_object(v) || !json_is_string(type))
        return ffail(e, p, "'response_format' must be an object with a string 'type'");
    const char *t = json_string_value(type);
    if (!strcmp(t, "text"))
        return EBB_OK;
    if (!strcmp(t, "json_object")) {
        /* llama.cpp also takes a schema here; without one, any JSON object. */
        json_t *s = json_object_get(v, "schema");
        json_t *any = s ? NULL : json_pack("{s:s}", "type", "object");
        if (!s && !any)
            return EBB_ENOMEM;
        ebb_err rc = from_schema(s ? s : any, p, "response_format.schema", r, e);
        json_decref(any);
        return rc;
    }
    if (strcmp(t, "json_schema"))
        return ffail(e, p,
                     "'response_format.type' must be \"text\", \"json_object\" or "
                     "\"json_schema\", not \"%.40s\"",
                     t);
    json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
        return ffail(e, p, "'response_format.json_schema' must be an object");
    json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
    if (name && !json_is_string(name))
        return ffail(e, p, "'response_format.json_schema.name' must be a string");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return ffail(e, p, "'response_format.json_schema.strict' must be a boolean");
    /* Output is always constrained to the schema, strict or not. */
    json_t *s = json_object_get(js, "schema");
    if (s && !json_is_object(s) && !json_is_boolean(s))
        return ffail(e, p, "'response_format.json_schema.schema' must be an object");
    return from_schema(s, p, "response_format.json_schema.schema", r, e);
}

ebb_err ebb__parse_structured(json_t *o, struct ebb__gen_req *r, struct ebb__perr *e)
{
    json_t *rf = json_object_get(o, "response_format");
    json_t *js = json_object_get(o, "json_schema");
    json_t *gr = json_object_get(o, "grammar");
    if (rf && json_is_null(rf))
        rf = NULL;
    if (js && json_is_null(js))
        js = NULL;
    if (gr && (json_is_null(gr) || (json_is_string(gr) && json_string_length(gr) == 0)))
        gr = NULL;
    const char *rf_type = json_string_value(json_object_get(rf, "type"));
    bool rf_text = rf && json_is_object(rf) && rf_type && !strcmp(rf_type, "text");
    if ((rf && !rf_text) + !!js + !!gr > 1)
        return ffail(e, gr ? "grammar" : "json_schema",
                     "give only one of 'response_format', 'json_schema' and 'grammar'");
    if (rf)
        return parse_response_format(rf, r, e);
    if (js) {
        if (!json_is_object(js) && !json_is_boolean(js))
            return ffail(e, "json_schema", "'json_schema' must be an object");
        return from_schema(js, "json_schema", "json_schema", r, e);
    }
    if (gr) {
        if (!json_is_string(gr))
            return ffail(e, "grammar", "'grammar' must be a string (GBNF)");
        if (strlen(json_string_value(gr)) != json_string_length(gr))
            return ffail(e, "grammar", "'grammar' must not contain NUL characters");
        /* Compiled here once to name the field in a syntax error; the scheduler compiles it
         * again for the job (microseconds for grammars of a usual size). */
        struct ebb_grammar *g = NULL;
        struct ebb_diag d = {{0}};
        ebb_err rc =
            ebb_grammar_compile(json_string_value(gr), json_string_length(gr), "root", &g, &d);
        ebb_grammar_free(g);
        if (rc == EBB_ENOMEM)
            return rc;
        if (rc)
            return ffail(e, "grammar", "'grammar': %s", d.msg);
        r->grammar = strdup(json_string_value(gr));
        if (!r->grammar)
            return EBB_ENOMEM;
    }
    return EBB_OK;
}
