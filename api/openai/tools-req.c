/* The tool fields of a chat request (tools, tool_choice, parallel_tool_calls): validation with a
 * 400 naming what is wrong, and the OpenAI objects the parsed calls become (message.tool_calls
 * and the streamed tool_calls deltas). */
#include "openai.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/schema/json-schema.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

/* OpenAI's rule for function names: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'. */
ebb_err ebb__perr_fail(struct ebb__perr *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    e->param = param;
    return EBB_EINVAL;
}

static bool valid_name(const char *s, size_t n)
{
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static bool valid_type_name(const json_t *t)
{
    static const char *const types[] = {"object",  "array",   "string", "number",
                                        "integer", "boolean", "null"};
    if (!json_is_string(t))
        return false;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (!strcmp(json_string_value(t), types[i]))
            return true;
    return false;
}

/* Checks the parts of a JSON schema a template and a grammar rely on: "type" names JSON types,
 * "properties" maps to schemas, "items" is a schema, "required" lists strings. path names the
 * place for the message. */
static ebb_err check_schema(const json_t *s, const char *path, unsigned depth, struct ebb__perr *e)
{
    if (depth > 32)
        return ebb__perr_fail(e, "tools", "%s: the schema is nested too deeply", path);
    if (json_is_boolean(s))
        return EBB_OK;
    if (!json_is_object(s))
        return ebb__perr_fail(e, "tools", "%s must be a JSON schema object", path);
    json_t *t = json_object_get(s, "type");
    if (t && json_is_array(t)) {
        for (size_t i = 0; i < json_array_size(t); i++)
            if (!valid_type_name(json_array_get(t, i)))
                return ebb__perr_fail(e, "tools", "%s.type lists an unknown JSON type", path);
    } else if (t && !valid_type_name(t)) {
        return ebb__perr_fail(
            e, "tools",
            "%s.type must be one of object, array, string, number, integer, boolean, "
            "null",
            path);
    }
    char sub[200];
    json_t *props = json_object_get(s, "properties");
    if (props) {
        if (!json_is_object(props))
            return ebb__perr_fail(e, "tools", "%s.properties must be an object", path);
        const char *k;
        json_t *v;
        json_object_foreach(props, k, v)
        {
            snprintf(sub, sizeof(sub), "%.120s.properties.%.40s", path, k);
            ebb_err rc = check_schema(v, sub, depth + 1, e);
            if (rc)
                return rc;
        }
    }
    json_t *items = json_object_get(s, "items");
    if (items) {
        snprintf(sub, sizeof(sub), "%.120s.items", path);
        ebb_err rc = check_schema(items, sub, depth + 1, e);
        if (rc)
            return rc;
    }
    json_t *req = json_object_get(s, "required");
    if (req) {
        if (!json_is_array(req))
            return ebb__perr_fail(e, "tools", "%s.required must be an array of property names",
                                  path);
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_is_string(json_array_get(req, i)))
                return ebb__perr_fail(e, "tools", "%s.required must be an array of property names",
                                      path);
    }
    return EBB_OK;
}

static ebb_err check_tool(json_t *tool, size_t i, struct ebb__perr *e)
{
    if (!json_is_object(tool))
        return ebb__perr_fail(e, "tools", "tools[%zu] must be an object", i);
    json_t *type = json_object_get(tool, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
        return ebb__perr_fail(e, "tools", "tools[%zu].type must be 'function'", i);
    json_t *fn = json_object_get(tool, "function");
    if (!json_is_object(fn))
        return ebb__perr_fail(e, "tools", "tools[%zu].function must be an object", i);
    json_t *name = json_object_get(fn, "name");
    if (!name || json_is_null(name))
        return ebb__perr_fail(e, "tools", "tools[%zu].function.name is required", i);
    if (!json_is_string(name) || !valid_name(json_string_value(name), json_string_length(name)))
        return ebb__perr_fail(
            e, "tools", "tools[%zu].function.name must be 1 to 64 letters, digits, '_' or '-'", i);
    json_t *desc = json_object_get(fn, "description");
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return ebb__perr_fail(e, "tools", "tools[%zu].function.description must be a string", i);
    json_t *strict = json_object_get(fn, "strict");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return ebb__perr_fail(e, "tools", "tools[%zu].function.strict must be a boolean", i);
    json_t *params = json_object_get(fn, "parameters");
    if (params && !json_is_null(params)) {
        char path[64];
        snprintf(path, sizeof(path), "tools[%zu].function.parameters", i);
        if (!json_is_object(params))
            return ebb__perr_fail(e, "tools", "%s must be a JSON schema object", path);
        ebb_err rc = check_schema(params, path, 0, e);
        if (rc)
            return rc;
    }
    return EBB_OK;
}

/* The name a tool_choice object names, or NULL with e filled. */
static const char *choice_name(json_t *tc, struct ebb__perr *e)
{
    json_t *type = json_object_get(tc, "type");
    json_t *name = json_object_get(json_object_get(tc, "function"), "name");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function") ||
        !json_is_string(name)) {
        ebb__perr_fail(
            e, "tool_choice",
            "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", "
            "\"function\": {\"name\": ...}}");
        return NULL;
    }
    return json_string_value(name);
}

ebb_err ebb__tool_req_parse(json_t *o, struct ebb__tool_req *t, struct ebb__perr *e)
{
    memset(t, 0, sizeof(*t));
    t->choice = EBB__TC_AUTO;
    t->parallel = true;
    json_t *tools = json_object_get(o, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return ebb__perr_fail(e, "tools", "'tools' must be an array of tool objects");
        if (json_array_size(tools) > 512)
            return ebb__perr_fail(e, "tools", "'tools' allows at most 512 tools");
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_t *tool = json_array_get(tools, i);
            ebb_err rc = check_tool(tool, i, e);
            if (rc)
                return rc;
            json_t *name = json_object_get(json_object_get(tool, "function"), "name");
            for (size_t k = 0; k < i; k++)
                if (json_equal(
                        name, json_object_get(json_object_get(json_array_get(tools, k), "function"),
                                              "name")))
                    return ebb__perr_fail(e, "tools",
                                          "tools[%zu]: the function name '%s' is used twice", i,
                                          json_string_value(name));
        }
        if (json_array_size(tools))
            t->tools = tools;
    }
    json_t *par = json_object_get(o, "parallel_tool_calls");
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par))
            return ebb__perr_fail(e, "parallel_tool_calls",
                                  "'parallel_tool_calls' must be a boolean");
        t->parallel = json_is_true(par);
    }
    json_t *tc = json_object_get(o, "tool_choice");
    if (!tc || json_is_null(tc)) {
        t->choice = t->tools ? EBB__TC_AUTO : EBB__TC_NONE;
        return EBB_OK;
    }
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "none"))
            t->choice = EBB__TC_NONE;
        else if (!strcmp(s, "auto"))
            t->choice = t->tools ? EBB__TC_AUTO : EBB__TC_NONE;
        else if (!strcmp(s, "required"))
            t->choice = EBB__TC_REQUIRED;
        else
            return ebb__perr_fail(
                e, "tool_choice",
                "'tool_choice' must be 'none', 'auto', 'required' or a function, got "
                "'%.32s'",
                s);
    } else if (json_is_object(tc)) {
        t->name = choice_name(tc, e);
        if (!t->name)
            return EBB_EINVAL;
        t->choice = EBB__TC_NAMED;
    } else {
        return ebb__perr_fail(e, "tool_choice", "'tool_choice' must be a string or an object");
    }
    if (t->choice == EBB__TC_REQUIRED && !t->tools)
        return ebb__perr_fail(e, "tool_choice",
                              "'tool_choice' is 'required' but no 'tools' are given");
    if (t->choice == EBB__TC_NAMED) {
        bool found = false;
        for (size_t i = 0; !found && i < json_array_size(t->tools); i++) {
            json_t *n =
                json_object_get(json_object_get(json_array_get(t->tools, i), "function"), "name");
            found = !strcmp(json_string_value(n), t->name);
        }
        if (!found)
            return ebb__perr_fail(e, "tool_choice",
                                  "'tool_choice' names the function '%.64s', which is not "
                                  "among 'tools'",
                                  t->name);
    }
    return EBB_OK;
}

/* ---- constrained calls ---------------------------------------------------------------------- */

/* The rule tc-<i> for one call of tools[i]: the format's call object with the function's name
 * and arguments that follow its parameters schema (any object when it has none). */
static ebb_err call_rule(json_t *fn, size_t i, enum ebb_tool_format f, struct ebb_gbnf_builder *b,
                         struct ebb__perr *e)
{
    json_t *params = json_object_get(fn, "parameters"), *any = NULL;
    if (!json_is_object(params) || !json_object_size(params))
        params = any = json_pack("{ss}", "type", "object");
    if (!params)
        return EBB_ENOMEM;
    char rule[40];
    snprintf(rule, sizeof(rule), "tc-%zu-args", i);
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_json_schema_to_gbnf(params, rule, b, &d);
    json_decref(any);
    if (rc == EBB_ENOMEM)
        return rc;
    if (rc) {
        ebb__perr_fail(
            e, "tools",
            "tools[%zu].function.parameters cannot constrain the call 'tool_choice' asks "
            "for: %s",
            i, d.msg);
        snprintf(e->param_buf, sizeof(e->param_buf), "tools[%zu].function.parameters%s", i,
                 b->err_path);
        e->param = e->param_buf;
        return EBB_EINVAL;
    }
    /* Names are letters, digits, '_' and '-' (checked at parse), safe inside a GBNF literal. */
    ebb_gbnf_printf(b, "tc-%zu ::= \"{\\\"name\\\": \\\"%s\\\", \\\"%s\\\": \" %s \"}\"\n", i,
                    json_string_value(json_object_get(fn, "name")),
                    f == EBB_TOOL_LLAMA3 ? "parameters" : "arguments", rule);
    return EBB_OK;
}

ebb_err ebb__tool_grammar(const struct ebb__tool_req *t, enum ebb_tool_format f, char **out,
                          struct ebb__perr *e)
{
    struct ebb_gbnf_builder b;
    ebb_gbnf_builder_init(&b);
    ebb_err rc = EBB_OK;
    for (size_t i = 0; i < json_array_size(t->tools); i++) {
        json_t *fn = json_object_get(json_array_get(t->tools, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (t->choice == EBB__TC_NAMED && strcmp(name, t->name))
            continue;
        if ((rc = call_rule(fn, i, f, &b, e)))
            goto out;
    }
    /* tc-call: any of the allowed tools' calls. */
    ebb_gbnf_printf(&b, "tc-call ::= ");
    bool first = true;
    for (size_t i = 0; i < json_array_size(t->tools); i++) {
        const char *name = json_string_value(
            json_object_get(json_object_get(json_array_get(t->tools, i), "function"), "name"));
        if (t->choice == EBB__TC_NAMED && strcmp(name, t->name))
            continue;
        ebb_gbnf_printf(&b, "%stc-%zu", first ? "" : " | ", i);
        first = false;
    }
    /* Up to four calls when parallel calls are allowed, one otherwise. The markup is the one the
     * parser reads for f; llama3 and mistral calls are bare JSON (their markers are control
     * tokens, which a grammar over token text cannot produce). */
    unsigned more = t->parallel && t->choice == EBB__TC_REQUIRED ? 3 : 0;
    if (f == EBB_TOOL_HERMES)
        ebb_gbnf_printf(&b,
                        "\ntc-one ::= \"<tool_call>\\n\" tc-call \"\\n</tool_call>\"\n"
                        "root ::= tc-one ( \"\\n\" tc-one ){0,%u}\n",
                        more);
    else if (f == EBB_TOOL_LLAMA3)
        ebb_gbnf_printf(&b, "\nroot ::= tc-call ( \"; \" tc-call ){0,%u}\n", more);
    else
        ebb_gbnf_printf(&b, "\nroot ::= \"[\" tc-call ( \", \" tc-call ){0,%u} \"]\"\n", more);
    if (b.oom) {
        rc = EBB_ENOMEM;
        goto out;
    }
    *out = b.text;
    b.text = NULL;
out:
    ebb_gbnf_builder_fini(&b);
    return rc;
}

/* ---- per request ------------------------------------------------------------------------- */

/* tool_choice required or named: decoding constrained to calls. Returns 0 or the HTTP status
 * after replying. */
unsigned ebb__tools_constrain(struct ebb__req *r, struct ebb__gen_req *q)
{
    if (q->tools.choice != EBB__TC_REQUIRED && q->tools.choice != EBB__TC_NAMED)
        return 0;
    if (q->grammar) {
        ebb__reply_error(r, 400,
                         "'tool_choice' that requires a call cannot be combined with "
                         "'response_format', 'json_schema' or 'grammar'",
                         "tool_choice", NULL);
        return 400;
    }
    struct ebb__perr pe = {.param = NULL};
    ebb_err rc = ebb__tool_grammar(&q->tools, r->sv->tmpl.tool_format, &q->grammar, &pe);
    if (rc == EBB_EINVAL) {
        ebb__reply_error(r, 400, pe.msg, pe.param, NULL);
        return 400;
    }
    if (rc) {
        ebb__reply_error(r, 500, ebb_err_str(rc), NULL, "internal_error");
        return 500;
    }
    q->gp.grammar = q->grammar;
    return 0;
}

/* Turns on the tool-call parser for r's output. */
ebb_err ebb__tools_setup(struct ebb__req *r, const struct ebb__tool_req *t)
{
    struct ebb__gen *g = r->gen;
    g->tools = json_incref(t->tools);
    g->max_calls = t->parallel ? 0 : 1;
    g->mark_id[0] = g->mark_id[1] = -1;
    const char *const *marks = ebb_tool_format_marker_tokens(r->sv->tmpl.tool_format);
    for (int k = 0; k < 2 && marks[k]; k++) {
        g->mark_id[k] =
            ebb_tokenizer_find(ebb_model_tokenizer(r->sv->model), marks[k], strlen(marks[k]));
        g->mark[k] = g->mark_id[k] >= 0 ? marks[k] : NULL;
    }
    if (!g->stream)
        return EBB_OK;
    struct ebb_tool_parser_opts po = {
        .format = r->sv->tmpl.tool_format, .tools = g->tools, .max_calls = g->max_calls};
    for (uint32_t i = 0; i < g->n_ch; i++) {
        ebb_err rc = ebb_tool_stream_new(&po, &g->ch[i].tp);
        if (rc)
            return rc;
    }
    return EBB_OK;
}

/* ---- responses ------------------------------------------------------------------------------ */

json_t *ebb__tool_calls_json(const struct ebb_tool_result *res)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < res->n_calls; i++) {
        const struct ebb_tool_call *c = &res->calls[i];
        json_t *o = json_pack("{sssss{ssss}}", "id", c->id, "type", "function", "function", "name",
                              c->name, "arguments", c->arguments ? c->arguments : "{}");
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

json_t *ebb__tool_delta(const struct ebb_tool_ev *ev)
{
    json_t *call = NULL;
    if (ev->kind == EBB_TOOL_EV_CALL_BEGIN)
        call = json_pack("{sIsssss{ssss}}", "index", (json_int_t)ev->index, "id", ev->id, "type",
                         "function", "function", "name", ev->name, "arguments", "");
    else if (ev->kind == EBB_TOOL_EV_CALL_ARGS)
        call = json_pack("{sIs{so}}", "index", (json_int_t)ev->index, "function", "arguments",
                         ebb__json_text(ev->text, ev->len));
    if (!call)
        return NULL;
    return json_pack("{s[o]}", "tool_calls", call);
}
