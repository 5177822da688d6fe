/* The tool fields of a chat request (tools, tool_choice, parallel_tool_calls): validation with a
 * 400 naming what is wrong, and the OpenAI objects the parsed calls become (message.tool_calls
 * and the streamed tool_calls deltas). */
#include "api-int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static ebb_err fail(struct ebb__perr *e, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static ebb_err fail(struct ebb__perr *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    e->param = param;
    return EBB_EINVAL;
}

/* OpenAI's rule for function names: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'. */
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
        return fail(e, "tools", "%s: the schema is nested too deeply", path);
    if (json_is_boolean(s))
        return EBB_OK;
    if (!json_is_object(s))
        return fail(e, "tools", "%s must be a JSON schema object", path);
    json_t *t = json_object_get(s, "type");
    if (t && json_is_array(t)) {
        for (size_t i = 0; i < json_array_size(t); i++)
            if (!valid_type_name(json_array_get(t, i)))
                return fail(e, "tools", "%s.type lists an unknown JSON type", path);
    } else if (t && !valid_type_name(t)) {
        return fail(e, "tools",
                    "%s.type must be one of object, array, string, number, integer, boolean, "
                    "null",
                    path);
    }
    char sub[200];
    json_t *props = json_object_get(s, "properties");
    if (props) {
        if (!json_is_object(props))
            return fail(e, "tools", "%s.properties must be an object", path);
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
            return fail(e, "tools", "%s.required must be an array of property names", path);
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_is_string(json_array_get(req, i)))
                return fail(e, "tools", "%s.required must be an array of property names", path);
    }
    return EBB_OK;
}

static ebb_err check_tool(json_t *tool, size_t i, struct ebb__perr *e)
{
    if (!json_is_object(tool))
        return fail(e, "tools", "tools[%zu] must be an object", i);
    json_t *type = json_object_get(tool, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
        return fail(e, "tools", "tools[%zu].type must be 'function'", i);
    json_t *fn = json_object_get(tool, "function");
    if (!json_is_object(fn))
        return fail(e, "tools", "tools[%zu].function must be an object", i);
    json_t *name = json_object_get(fn, "name");
    if (!name || json_is_null(name))
        return fail(e, "tools", "tools[%zu].function.name is required", i);
    if (!json_is_string(name) || !valid_name(json_string_value(name), json_string_length(name)))
        return fail(e, "tools",
                    "tools[%zu].function.name must be 1 to 64 letters, digits, '_' or '-'", i);
    json_t *desc = json_object_get(fn, "description");
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return fail(e, "tools", "tools[%zu].function.description must be a string", i);
    json_t *strict = json_object_get(fn, "strict");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return fail(e, "tools", "tools[%zu].function.strict must be a boolean", i);
    json_t *params = json_object_get(fn, "parameters");
    if (params && !json_is_null(params)) {
        char path[64];
        snprintf(path, sizeof(path), "tools[%zu].function.parameters", i);
        if (!json_is_object(params))
            return fail(e, "tools", "%s must be a JSON schema object", path);
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
        fail(e, "tool_choice",
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
            return fail(e, "tools", "'tools' must be an array of tool objects");
        if (json_array_size(tools) > 512)
            return fail(e, "tools", "'tools' allows at most 512 tools");
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
                    return fail(e, "tools", "tools[%zu]: the function name '%s' is used twice", i,
                                json_string_value(name));
        }
        if (json_array_size(tools))
            t->tools = tools;
    }
    json_t *par = json_object_get(o, "parallel_tool_calls");
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par))
            return fail(e, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
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
            return fail(e, "tool_choice",
                        "'tool_choice' must be 'none', 'auto', 'required' or a function, got "
                        "'%.32s'",
                        s);
    } else if (json_is_object(tc)) {
        t->name = choice_name(tc, e);
        if (!t->name)
            return EBB_EINVAL;
        t->choice = EBB__TC_NAMED;
    } else {
        return fail(e, "tool_choice", "'tool_choice' must be a string or an object");
    }
    if (t->choice == EBB__TC_REQUIRED && !t->tools)
        return fail(e, "tool_choice", "'tool_choice' is 'required' but no 'tools' are given");
    if (t->choice == EBB__TC_NAMED) {
        bool found = false;
        for (size_t i = 0; !found && i < json_array_size(t->tools); i++) {
            json_t *n =
                json_object_get(json_object_get(json_array_get(t->tools, i), "function"), "name");
            found = !strcmp(json_string_value(n), t->name);
        }
        if (!found)
            return fail(e, "tool_choice",
                        "'tool_choice' names the function '%.64s', which is not "
                        "among 'tools'",
                        t->name);
    }
    if (t->choice == EBB__TC_REQUIRED || t->choice == EBB__TC_NAMED)
        return fail(e, "tool_choice",
                    "'tool_choice' %s is not implemented yet (it needs constrained decoding); use "
                    "'auto' or 'none'",
                    t->choice == EBB__TC_REQUIRED ? "'required'" : "naming a function");
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
