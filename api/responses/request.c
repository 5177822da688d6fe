/* A Responses request translated into the chat-completions body that api/openai/ parses and
 * generates: input items into chat messages (message items with their text parts, function_call
 * items into the assistant's tool_calls, function_call_output items into tool messages,
 * reasoning items into the next assistant message's reasoning_content), instructions first as
 * the system message, the previous response's conversation before the input, function tools and
 * tool_choice into their chat shapes, text.format into response_format, max_output_tokens into
 * max_completion_tokens, reasoning.effort into reasoning_effort. Fields that would change the
 * answer and that ebb does not implement are a 400 naming them. */
#include "responses-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool present(const json_t *v)
{
    return v && !json_is_null(v);
}

static const char *str_or(const json_t *v, const char *dflt)
{
    return json_is_string(v) ? json_string_value(v) : dflt;
}

/* ---- input items -------------------------------------------------------------------------- */

/* The text of a content: a string, or an array of text parts (input_text, output_text, text,
 * refusal) joined. where names the place in errors. */
static ebb_err content_text(json_t *c, const char *where, json_t **out, struct ebb__perr *e)
{
    if (json_is_string(c)) {
        *out = json_incref(c);
        return EBB_OK;
    }
    if (!json_is_array(c))
        return ebb__perr_fail(e, "input", "%s must be a string or an array of content parts",
                              where);
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *p = json_array_get(c, i);
        const char *t = str_or(json_object_get(p, "type"), "");
        const char *key = !strcmp(t, "refusal") ? "refusal" : "text";
        if (!strcmp(t, "input_image") || !strcmp(t, "input_file") || !strcmp(t, "input_audio"))
            return ebb__perr_fail(e, "input",
                                  "%s[%zu]: '%s' parts are not supported (ebb serves text-only "
                                  "models)",
                                  where, i, t);
        if ((strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") &&
             strcmp(t, "refusal")) ||
            !json_is_string(json_object_get(p, key)))
            return ebb__perr_fail(
                e, "input",
                "%s[%zu] must be an input_text or output_text part with a string 'text', "
                "got type '%.40s'",
                where, i, t);
        total += json_string_length(json_object_get(p, key));
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return EBB_ENOMEM;
    size_t w = 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *p = json_array_get(c, i);
        json_t *s = json_object_get(p, "text");
        if (!json_is_string(s))
            s = json_object_get(p, "refusal");
        memcpy(buf + w, json_string_value(s), json_string_length(s));
        w += json_string_length(s);
    }
    *out = json_stringn_nocheck(buf, w);
    free(buf);
    return *out ? EBB_OK : EBB_ENOMEM;
}

/* Conversion state: the messages so far, and reasoning waiting for its assistant message. */
struct conv {
    json_t *msgs;
    size_t first;      /* msgs[first..] are this request's (the ones before are stored, shared) */
    json_t *reasoning; /* string or NULL */
};

static json_t *push(struct conv *cv, const char *role, json_t *content)
{
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", content ? content : json_string(""));
    if (!strcmp(role, "assistant") && cv->reasoning) {
        json_object_set_new(m, "reasoning_content", cv->reasoning);
        cv->reasoning = NULL;
    }
    json_array_append_new(cv->msgs, m);
    return m;
}

/* The assistant message a function_call joins: the last message when it is the assistant's
 * (text then calls is one turn), else a new one. */
static json_t *assistant_for_call(struct conv *cv)
{
    size_t n = json_array_size(cv->msgs);
    json_t *last = n > cv->first ? json_array_get(cv->msgs, n - 1) : NULL;
    if (last && !strcmp(str_or(json_object_get(last, "role"), ""), "assistant") && !cv->reasoning)
        return last;
    return push(cv, "assistant", NULL);
}

static ebb_err item_message(struct conv *cv, json_t *it, const char *where, struct ebb__perr *e)
{
    const char *role = str_or(json_object_get(it, "role"), "");
    if (!strcmp(role, "developer"))
        role = "system";
    if (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system"))
        return ebb__perr_fail(
            e, "input", "%s.role must be 'user', 'assistant', 'system' or 'developer'", where);
    char w2[96];
    snprintf(w2, sizeof(w2), "%.80s.content", where);
    json_t *text = NULL;
    ebb_err rc = content_text(json_object_get(it, "content"), w2, &text, e);
    if (rc)
        return rc;
    push(cv, role, text);
    return EBB_OK;
}

static ebb_err item_call(struct conv *cv, json_t *it, const char *where, struct ebb__perr *e)
{
    json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
    json_t *args = json_object_get(it, "arguments");
    if (!json_is_string(id) || !json_is_string(name) || !json_string_length(name) ||
        (present(args) && !json_is_string(args)))
        return ebb__perr_fail(
            e, "input",
            "%s: a function_call item needs a string 'call_id', a non-empty 'name' and "
            "'arguments' as a JSON string",
            where);
    json_t *m = assistant_for_call(cv);
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls) {
        calls = json_array();
        json_object_set_new(m, "tool_calls", calls);
    }
    json_t *call =
        json_pack("{sOsss{sOso}}", "id", id, "type", "function", "function", "name", name,
                  "arguments", present(args) ? json_incref(args) : json_string("{}"));
    if (!call)
        return EBB_ENOMEM;
    json_array_append_new(calls, call);
    return EBB_OK;
}

static ebb_err item_call_output(struct conv *cv, json_t *it, const char *where, struct ebb__perr *e)
{
    json_t *id = json_object_get(it, "call_id"), *out = json_object_get(it, "output");
    if (!json_is_string(id) || !out)
        return ebb__perr_fail(
            e, "input", "%s: a function_call_output item needs a string 'call_id' and an 'output'",
            where);
    char w2[96];
    snprintf(w2, sizeof(w2), "%.80s.output", where);
    json_t *text = NULL;
    ebb_err rc = content_text(out, w2, &text, e);
    if (rc)
        return rc;
    json_t *m = push(cv, "tool", text);
    json_object_set(m, "tool_call_id", id);
    return EBB_OK;
}

/* A reasoning item: its reasoning_text content (or, without it, its summary) joined, for the
 * template's reasoning_content of the assistant message that follows. */
static ebb_err item_reasoning(struct conv *cv, json_t *it)
{
    json_t *parts = json_object_get(it, "content");
    if (!json_array_size(parts))
        parts = json_object_get(it, "summary");
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(parts); i++)
        total += json_string_length(json_object_get(json_array_get(parts, i), "text")) + 1;
    if (!total)
        return EBB_OK;
    char *buf = malloc(total);
    if (!buf)
        return EBB_ENOMEM;
    size_t w = 0;
    for (size_t i = 0; i < json_array_size(parts); i++) {
        json_t *t = json_object_get(json_array_get(parts, i), "text");
        if (!json_is_string(t))
            continue;
        if (w)
            buf[w++] = '\n';
        memcpy(buf + w, json_string_value(t), json_string_length(t));
        w += json_string_length(t);
    }
    json_decref(cv->reasoning);
    cv->reasoning = json_stringn_nocheck(buf, w);
    free(buf);
    return cv->reasoning ? EBB_OK : EBB_ENOMEM;
}

static ebb_err parse_input(json_t *o, struct conv *cv, struct ebb__perr *e)
{
    json_t *in = json_object_get(o, "input");
    if (json_is_string(in)) {
        push(cv, "user", json_incref(in));
        return EBB_OK;
    }
    if (!json_is_array(in))
        return ebb__perr_fail(e, "input", "'input' must be a string or an array of input items");
    for (size_t i = 0; i < json_array_size(in); i++) {
        json_t *it = json_array_get(in, i);
        char where[48];
        snprintf(where, sizeof(where), "input[%zu]", i);
        if (!json_is_object(it))
            return ebb__perr_fail(e, "input", "%s must be an object", where);
        json_t *type = json_object_get(it, "type");
        /* A message may leave its type out (EasyInputMessage). */
        const char *t = present(type) ? str_or(type, "?") : "message";
        ebb_err rc;
        if (!strcmp(t, "message"))
            rc = item_message(cv, it, where, e);
        else if (!strcmp(t, "function_call"))
            rc = item_call(cv, it, where, e);
        else if (!strcmp(t, "function_call_output"))
            rc = item_call_output(cv, it, where, e);
        else if (!strcmp(t, "reasoning"))
            rc = item_reasoning(cv, it);
        else if (!strcmp(t, "item_reference"))
            rc = ebb__perr_fail(
                e, "input",
                "%s: 'item_reference' items are not supported; send the item itself or "
                "use previous_response_id",
                where);
        else
            rc = ebb__perr_fail(
                e, "input",
                "%s: items of type '%.40s' are not supported (message, function_call, "
                "function_call_output, reasoning)",
                where, t);
        if (rc)
            return rc;
    }
    return EBB_OK;
}

/* ---- tools -------------------------------------------------------------------------------- */

/* tools: function tools {type, name, description, parameters, strict} into chat's
 * {type, function: {...}}; any other type is one of OpenAI's built-in tools. */
static ebb_err convert_tools(json_t *o, json_t *chat, struct ebb__perr *e)
{
    json_t *tools = json_object_get(o, "tools");
    if (!present(tools))
        return EBB_OK;
    if (!json_is_array(tools))
        return ebb__perr_fail(e, "tools", "'tools' must be an array");
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        const char *type = str_or(json_object_get(t, "type"), "");
        if (!json_is_object(t) || !*type)
            return ebb__perr_fail(e, "tools", "tools[%zu] must be an object with a 'type'", i);
        if (strcmp(type, "function"))
            return ebb__perr_fail(
                e, "tools",
                "tools[%zu]: the built-in tool '%.40s' is not supported by ebb; only "
                "function tools ({\"type\": \"function\", \"name\", \"parameters\"}) "
                "are",
                i, type);
        json_t *fn = json_object();
        static const char *const keys[] = {"name", "description", "parameters", "strict"};
        for (size_t k = 0; k < 4; k++) {
            json_t *v = json_object_get(t, keys[k]);
            if (present(v))
                json_object_set(fn, keys[k], v);
        }
        json_array_append_new(out, json_pack("{ssso}", "type", "function", "function", fn));
    }
    return EBB_OK;
}

/* tool_choice: "none" | "auto" | "required" | {"type": "function", "name"}. */
static ebb_err convert_tool_choice(json_t *o, json_t *chat, struct ebb__perr *e)
{
    json_t *tc = json_object_get(o, "tool_choice");
    if (!present(tc))
        return EBB_OK;
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", tc);
        return EBB_OK;
    }
    const char *type = str_or(json_object_get(tc, "type"), "");
    json_t *name = json_object_get(tc, "name");
    if (!strcmp(type, "function") && json_is_string(name)) {
        json_object_set_new(chat, "tool_choice",
                            json_pack("{sss{sO}}", "type", "function", "function", "name", name));
        return EBB_OK;
    }
    return ebb__perr_fail(e, "tool_choice",
                          "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                          "\"function\", \"name\": ...}; '%.40s' is not supported",
                          type);
}

/* ---- the other fields --------------------------------------------------------------------- */

/* text: {format: {type: text | json_object | json_schema, name, schema, strict}, verbosity}. */
static ebb_err convert_text(json_t *o, json_t *chat, struct ebb__perr *e)
{
    json_t *text = json_object_get(o, "text");
    if (!present(text))
        return EBB_OK;
    if (!json_is_object(text))
        return ebb__perr_fail(e, "text", "'text' must be an object");
    json_t *vb = json_object_get(text, "verbosity");
    if (present(vb) && strcmp(str_or(vb, ""), "medium"))
        return ebb__perr_fail(
            e, "text.verbosity",
            "'text.verbosity' is not supported (leave it out or send \"medium\")");
    json_t *f = json_object_get(text, "format");
    if (!present(f))
        return EBB_OK;
    const char *type = str_or(json_object_get(f, "type"), "");
    if (!json_is_object(f) || !*type)
        return ebb__perr_fail(e, "text.format", "'text.format' must be an object with a 'type'");
    if (!strcmp(type, "text") || !strcmp(type, "json_object")) {
        json_object_set_new(chat, "response_format", json_pack("{ss}", "type", type));
        return EBB_OK;
    }
    if (strcmp(type, "json_schema"))
        return ebb__perr_fail(
            e, "text.format",
            "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\", "
            "not \"%.40s\"",
            type);
    json_t *schema = json_object_get(f, "schema");
    if (!json_is_object(schema))
        return ebb__perr_fail(e, "text.format",
                              "'text.format.schema' must be a JSON schema object");
    json_t *js = json_pack("{sO}", "schema", schema);
    static const char *const keys[] = {"name", "strict", "description"};
    for (size_t k = 0; js && k < 3; k++)
        if (present(json_object_get(f, keys[k])))
            json_object_set(js, keys[k], json_object_get(f, keys[k]));
    json_object_set_new(chat, "response_format",
                        json_pack("{ssso}", "type", "json_schema", "json_schema", js));
    return EBB_OK;
}

/* reasoning: {effort, summary}; effort none/minimal turns thinking off, the others on (where
 * the template has enable_thinking: gen.c refuses it otherwise). summary is ignored: ebb returns
 * the reasoning itself. */
static ebb_err convert_reasoning(json_t *o, json_t *chat, struct ebb__perr *e)
{
    json_t *rs = json_object_get(o, "reasoning");
    if (!present(rs))
        return EBB_OK;
    if (!json_is_object(rs))
        return ebb__perr_fail(e, "reasoning", "'reasoning' must be an object");
    json_t *ef = json_object_get(rs, "effort");
    if (!present(ef))
        return EBB_OK;
    static const char *const ok[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    for (size_t i = 0; i < 6; i++)
        if (!strcmp(str_or(ef, ""), ok[i])) {
            json_object_set(chat, "reasoning_effort", ef);
            return EBB_OK;
        }
    return ebb__perr_fail(
        e, "reasoning.effort",
        "'reasoning.effort' must be one of none, minimal, low, medium, high, xhigh");
}

/* Fields of the Responses API that would change the answer and that ebb does not implement:
 * any value but the neutral one is a 400 naming the field. */
static ebb_err check_unsupported(json_t *o, struct ebb__perr *e)
{
    static const struct {
        const char *key, *why;
    } none[] = {
        {"conversation", "conversations are not supported; use previous_response_id"},
        {"prompt", "prompt templates are not supported; send instructions and input"},
        {"max_tool_calls", "a cap on tool calls is not supported (see parallel_tool_calls)"},
        {"context_management", "context management is not supported"},
    };
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
        if (present(json_object_get(o, none[i].key)))
            return ebb__perr_fail(e, none[i].key, "'%s' is not supported: %s", none[i].key,
                                  none[i].why);
    json_t *bg = json_object_get(o, "background");
    if (present(bg) && !json_is_false(bg))
        return ebb__perr_fail(e, "background",
                              "'background' is not supported: responses are answered on "
                              "the request's connection");
    json_t *tl = json_object_get(o, "top_logprobs");
    if (present(tl) && !(json_is_integer(tl) && json_integer_value(tl) == 0))
        return ebb__perr_fail(
            e, "top_logprobs",
            "'top_logprobs' is not supported on /v1/responses (Chat Completions has "
            "logprobs)");
    json_t *tr = json_object_get(o, "truncation");
    if (present(tr) && strcmp(str_or(tr, ""), "disabled"))
        return ebb__perr_fail(
            e, "truncation",
            "'truncation' must be \"disabled\": ebb does not drop input to fit the "
            "context (a prompt too long is a 400)");
    json_t *inc = json_object_get(o, "include");
    for (size_t i = 0; i < json_array_size(inc); i++)
        if (!strcmp(str_or(json_array_get(inc, i), ""), "message.output_text.logprobs"))
            return ebb__perr_fail(e, "include",
                                  "'include': output logprobs are not supported on "
                                  "/v1/responses");
    return EBB_OK;
}

/* Request fields that are chat-completions fields too (the sampling table's, ebb's extensions),
 * passed on as they are. */
static const char *const passed[] = {
    "model",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "logit_bias",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
    "grammar",
    "speculative",
    "ignore_eos",
    "chat_template_kwargs",
    "reasoning_format",
    "parallel_tool_calls",
};

static ebb_err build(struct ebb_api *a, json_t *o, struct ebb__resp_req *q, struct ebb__perr *e)
{
    ebb_err rc = check_unsupported(o, e);
    if (rc)
        return rc;
    json_t *chat = q->chat;
    for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++) {
        json_t *v = json_object_get(o, passed[i]);
        if (present(v))
            json_object_set(chat, passed[i], v);
    }
    json_t *st = json_object_get(o, "stream"), *sto = json_object_get(o, "store");
    json_t *mt = json_object_get(o, "max_output_tokens"), *md = json_object_get(o, "metadata");
    json_t *ins = json_object_get(o, "instructions"),
           *prev = json_object_get(o, "previous_response_id");
    if (present(st) && !json_is_boolean(st))
        return ebb__perr_fail(e, "stream", "'stream' must be a boolean");
    if (present(sto) && !json_is_boolean(sto))
        return ebb__perr_fail(e, "store", "'store' must be a boolean");
    if (present(md) && !json_is_object(md))
        return ebb__perr_fail(e, "metadata", "'metadata' must be an object");
    if (present(ins) && !json_is_string(ins))
        return ebb__perr_fail(e, "instructions", "'instructions' must be a string");
    if (present(prev) && !json_is_string(prev))
        return ebb__perr_fail(e, "previous_response_id", "'previous_response_id' must be a string");
    if (present(mt) &&
        (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > (1 << 30)))
        return ebb__perr_fail(e, "max_output_tokens",
                              "'max_output_tokens' must be a positive integer");
    q->stream = json_is_true(st);
    q->store = !json_is_false(sto);
    json_object_set_new(chat, "stream", json_boolean(q->stream));
    if (present(mt))
        json_object_set(chat, "max_completion_tokens", mt);
    if ((rc = convert_tools(o, chat, e)) || (rc = convert_tool_choice(o, chat, e)) ||
        (rc = convert_text(o, chat, e)) || (rc = convert_reasoning(o, chat, e)))
        return rc;
    /* The conversation: the previous response's, then this input. */
    struct conv cv = {.msgs = q->history};
    if (present(prev)) {
        json_t *resp = NULL, *hist = NULL;
        if (!ebb__resp_store_get(ebb__resp_store_of(a), json_string_value(prev), &resp, &hist)) {
            ebb__perr_fail(e, "previous_response_id",
                           "Previous response with id '%.100s' not found.",
                           json_string_value(prev));
            return EBB_ENOTFOUND;
        }
        json_array_extend(q->history, hist);
        cv.first = json_array_size(q->history);
    }
    rc = parse_input(o, &cv, e);
    json_decref(cv.reasoning);
    if (rc)
        return rc;
    if (!json_array_size(q->history))
        return ebb__perr_fail(e, "input", "'input' must not be empty");
    json_t *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    if (present(ins) && json_string_length(ins))
        json_array_append_new(msgs, json_pack("{sssO}", "role", "system", "content", ins));
    json_array_extend(msgs, q->history);
    return EBB_OK;
}

ebb_err ebb__resp_req_parse(struct ebb_api *a, const char *body, size_t n, struct ebb__resp_req *q,
                            struct ebb__perr *e)
{
    memset(q, 0, sizeof(*q));
    memset(e, 0, sizeof(*e));
    json_error_t je;
    ebb__json_alloc_failed(true);
    q->req = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
    if (ebb__json_alloc_failed(true))
        return EBB_ENOMEM;
    if (!q->req)
        return ebb__perr_fail(e, NULL, "the body is not valid JSON: %s (line %d, column %d)",
                              je.text, je.line, je.column);
    if (!json_is_object(q->req))
        return ebb__perr_fail(e, NULL, "the body must be a JSON object");
    q->chat = json_object();
    q->history = json_array();
    if (!q->chat || !q->history)
        return EBB_ENOMEM;
    ebb_err rc = build(a, q->req, q, e);
    if (!rc && ebb__json_alloc_failed(true))
        rc = EBB_ENOMEM;
    return rc;
}

void ebb__resp_req_fini(struct ebb__resp_req *q)
{
    json_decref(q->req);
    json_decref(q->chat);
    json_decref(q->history);
    memset(q, 0, sizeof(*q));
}
