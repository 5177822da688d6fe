/* An Ollama /api/chat or /api/generate body as the chat-completions (or completions) body that
 * api/openai/params.c parses: messages, options, format, tools, think and ebb's extensions
 * mapped, the fields ebb cannot honour refused naming them (docs/API.md has the table). */
#include "ollama-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool present(const json_t *v)
{
    return v && !json_is_null(v);
}

/* options: ollama's names for the sampling fields params.c knows (most are the same), the ones
 * that only tune the runtime (ignored: they do not change the answer), and the sampling
 * methods ebb lacks (accepted only at their neutral value). Anything else is refused. */
static const struct {
    const char *ollama, *chat;
} mapped[] = {{"temperature", "temperature"},
              {"top_k", "top_k"},
              {"top_p", "top_p"},
              {"min_p", "min_p"},
              {"seed", "seed"},
              {"stop", "stop"},
              {"repeat_penalty", "repeat_penalty"},
              {"repeat_last_n", "repeat_last_n"},
              {"presence_penalty", "presence_penalty"},
              {"frequency_penalty", "frequency_penalty"},
              {"num_predict", "max_tokens"}};

static const char *const runtime_only[] = {
    "num_ctx",    "num_batch", "num_gpu", "main_gpu", "use_mmap", "use_mlock",
    "num_thread", "low_vram",  "f16_kv",  "numa",     "num_keep", "penalize_newline"};

static ebb_err map_options(json_t *opts, json_t *b, struct ebb__perr *e)
{
    if (!present(opts))
        return EBB_OK;
    if (!json_is_object(opts))
        return ebb__perr_fail(e, "options", "options must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(opts, key, v)
    {
        bool done = false;
        for (size_t i = 0; i < sizeof(mapped) / sizeof(mapped[0]) && !done; i++) {
            if (strcmp(key, mapped[i].ollama))
                continue;
            done = true;
            /* num_predict -1 (no limit) and -2 (until the context is full): ebb's default. */
            if (!strcmp(key, "num_predict") && json_is_integer(v) && json_integer_value(v) < 0)
                continue;
            if (present(v))
                json_object_set(b, mapped[i].chat, v);
        }
        for (size_t i = 0; i < sizeof(runtime_only) / sizeof(runtime_only[0]) && !done; i++)
            done = !strcmp(key, runtime_only[i]);
        if (done)
            continue;
        /* Sampling methods ebb does not implement, at their neutral ("off") values. */
        double x = json_is_number(v) ? json_number_value(v) : -1;
        if ((!strcmp(key, "typical_p") || !strcmp(key, "tfs_z")) && (x == 1 || !present(v)))
            continue;
        if (!strcmp(key, "mirostat") && (x == 0 || !present(v)))
            continue;
        if (!strcmp(key, "mirostat_tau") || !strcmp(key, "mirostat_eta"))
            continue; /* used only with mirostat, which is refused above unless 0 */
        return ebb__perr_fail(e, "options", "option '%.64s' is not supported by ebb", key);
    }
    return EBB_OK;
}

/* format: "json" or a JSON schema object, as response_format for params-format.c. */
static ebb_err map_format(json_t *f, json_t *b, struct ebb__perr *e)
{
    if (!present(f) || (json_is_string(f) && !json_string_length(f)))
        return EBB_OK;
    if (json_is_string(f) && !strcmp(json_string_value(f), "json")) {
        json_object_set_new(b, "response_format", json_pack("{ss}", "type", "json_object"));
        return EBB_OK;
    }
    if (!json_is_object(f))
        return ebb__perr_fail(e, "format", "format must be \"json\" or a JSON schema object");
    json_object_set_new(b, "response_format",
                        json_pack("{sss{sssO}}", "type", "json_schema", "json_schema", "name",
                                  "format", "schema", f));
    return EBB_OK;
}

/* think: true or false, or "low" / "medium" / "high" (models with levels), as
 * reasoning_effort. false asks a template with an enable_thinking switch to turn it off and is
 * a no-op for the others; true or a level on a template without that switch is refused by
 * gen.c (400 naming think), as ollama refuses it for a model that does not think. */
static ebb_err map_think(const struct ebb__served *a, json_t *t, json_t *b, struct ebb__perr *e)
{
    if (!present(t))
        return EBB_OK;
    if (json_is_boolean(t)) {
        if (json_is_true(t))
            json_object_set_new(b, "reasoning_effort", json_string("medium"));
        else if (a->tmpl.has_thinking)
            json_object_set_new(b, "reasoning_effort", json_string("none"));
        return EBB_OK;
    }
    const char *s = json_is_string(t) ? json_string_value(t) : "";
    if (strcmp(s, "low") && strcmp(s, "medium") && strcmp(s, "high"))
        return ebb__perr_fail(e, "think",
                              "think must be true, false, \"low\", \"medium\" or \"high\"");
    json_object_set_new(b, "reasoning_effort", json_string(s));
    return EBB_OK;
}

/* One Ollama message as an OpenAI one: tool_calls get ids and types, a tool result's
 * tool_name becomes name, thinking becomes reasoning_content (templates that show past
 * reasoning read it there); images are refused. */
static ebb_err map_message(json_t *m, size_t i, json_t *out, struct ebb__perr *e)
{
    if (!json_is_object(m))
        return ebb__perr_fail(e, "messages", "messages[%zu] must be an object", i);
    json_t *img = json_object_get(m, "images");
    if (present(img) && !(json_is_array(img) && !json_array_size(img)))
        return ebb__perr_fail(
            e, "messages",
            "messages[%zu].images: images are not supported (ebb serves text-only "
            "models)",
            i);
    json_t *c = json_object_get(m, "content");
    if (present(c) && !json_is_string(c))
        return ebb__perr_fail(e, "messages", "messages[%zu].content must be a string", i);
    json_t *o = json_object();
    json_array_append_new(out, o);
    json_object_set(o, "role", json_object_get(m, "role"));
    json_object_set_new(o, "content", present(c) ? json_incref(c) : json_string(""));
    json_t *th = json_object_get(m, "thinking");
    if (json_is_string(th) && json_string_length(th))
        json_object_set(o, "reasoning_content", th);
    json_t *tn = json_object_get(m, "tool_name");
    if (present(tn))
        json_object_set(o, "name", tn);
    json_t *calls = json_object_get(m, "tool_calls");
    if (!present(calls))
        return EBB_OK;
    if (!json_is_array(calls))
        return ebb__perr_fail(e, "messages", "messages[%zu].tool_calls must be an array", i);
    json_t *oc = json_array();
    json_object_set_new(o, "tool_calls", oc);
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *fn = json_object_get(json_array_get(calls, k), "function");
        if (!json_is_object(fn))
            return ebb__perr_fail(e, "messages", "messages[%zu].tool_calls[%zu] needs a 'function'",
                                  i, k);
        char id[48];
        snprintf(id, sizeof(id), "call_%zu_%zu", i, k);
        json_t *f2 = json_object();
        json_object_set(f2, "name", json_object_get(fn, "name"));
        json_t *args = json_object_get(fn, "arguments");
        json_object_set_new(f2, "arguments", present(args) ? json_incref(args) : json_object());
        json_array_append_new(oc,
                              json_pack("{sssssO}", "id", id, "type", "function", "function", f2));
        json_decref(f2);
    }
    return EBB_OK;
}

ebb_err ebb__ollama_request(const struct ebb__served *a, json_t *o, bool generate, json_t *b,
                            bool * compl, bool *load, struct ebb__perr *e)
{
    json_t *stream = json_object_get(o, "stream");
    if (present(stream) && !json_is_boolean(stream))
        return ebb__perr_fail(e, "stream", "stream must be a boolean");
    json_object_set_new(b, "stream", json_boolean(!json_is_false(stream)));
    json_object_set_new(b, "model", json_string(a->id));
    char msg[200];
    if (!ebb__ollama_keep_alive_ok(json_object_get(o, "keep_alive"), msg, sizeof(msg)))
        return ebb__perr_fail(e, "keep_alive", "%s", msg);
    json_t *img = json_object_get(o, "images");
    if (present(img) && !(json_is_array(img) && !json_array_size(img)))
        return ebb__perr_fail(e, "images",
                              "images are not supported (ebb serves text-only models)");
    ebb_err rc;
    if ((rc = map_options(json_object_get(o, "options"), b, e)) ||
        (rc = map_format(json_object_get(o, "format"), b, e)))
        return rc;
    /* ebb's extension (ollama has none): a GBNF grammar, as llama.cpp's grammar field on the
     * OpenAI endpoints (at most one of it and format). */
    json_t *gr = json_object_get(o, "grammar");
    if (present(gr))
        json_object_set(b, "grammar", gr);
    *compl = false;
    if (!generate) {
        json_t *ms = json_object_get(o, "messages"), *out = json_array();
        json_object_set_new(b, "messages", out);
        if (present(ms) && !json_is_array(ms))
            return ebb__perr_fail(e, "messages", "messages must be an array");
        for (size_t i = 0; i < json_array_size(ms); i++)
            if ((rc = map_message(json_array_get(ms, i), i, out, e)))
                return rc;
        *load = !json_array_size(out);
        json_t *tools = json_object_get(o, "tools");
        if (present(tools) && !(json_is_array(tools) && !json_array_size(tools)))
            json_object_set(b, "tools", tools);
        /* ebb's extensions (ollama has neither): tool_choice and parallel_tool_calls as
         * OpenAI's, to force a call or allow only one. */
        static const char *const ext[] = {"tool_choice", "parallel_tool_calls"};
        for (size_t i = 0; i < 2; i++)
            if (present(json_object_get(o, ext[i])))
                json_object_set(b, ext[i], json_object_get(o, ext[i]));
        return map_think(a, json_object_get(o, "think"), b, e);
    }
    json_t *tmpl = json_object_get(o, "template"), *ctx = json_object_get(o, "context");
    if (present(tmpl) && !(json_is_string(tmpl) && !json_string_length(tmpl)))
        return ebb__perr_fail(
            e, "template",
            "template is not supported: ebb renders the model's own chat template (use "
            "raw: true with a prompt you templated yourself)");
    if (present(ctx) && !(json_is_array(ctx) && !json_array_size(ctx)))
        return ebb__perr_fail(e, "context",
                              "context is not supported (it is deprecated in ollama too): send the "
                              "conversation to /api/chat");
    json_t *prompt = json_object_get(o, "prompt"), *sys = json_object_get(o, "system");
    json_t *suffix = json_object_get(o, "suffix"), *raw = json_object_get(o, "raw");
    if ((present(prompt) && !json_is_string(prompt)) || (present(sys) && !json_is_string(sys)) ||
        (present(suffix) && !json_is_string(suffix)))
        return ebb__perr_fail(e, "prompt", "prompt, system and suffix must be strings");
    if (present(raw) && !json_is_boolean(raw))
        return ebb__perr_fail(e, "raw", "raw must be a boolean");
    bool has_suffix = json_is_string(suffix) && json_string_length(suffix);
    *load = !json_string_length(prompt) && !has_suffix;
    if (json_is_true(raw) || has_suffix) {
        /* Untemplated (raw), or fill-in-the-middle (suffix): a completion. */
        if (json_is_string(sys) && json_string_length(sys))
            return ebb__perr_fail(
                e, "system",
                "system cannot be used with raw or suffix: the prompt is not templated");
        if (present(json_object_get(o, "think")))
            return ebb__perr_fail(e, "think",
                                  "think needs the chat template: not with raw or suffix");
        *compl = true;
        json_object_set_new(b, "prompt", present(prompt) ? json_incref(prompt) : json_string(""));
        if (has_suffix)
            json_object_set(b, "suffix", suffix);
        return EBB_OK;
    }
    json_t *ms = json_array();
    json_object_set_new(b, "messages", ms);
    if (json_is_string(sys) && json_string_length(sys))
        json_array_append_new(ms, json_pack("{sssO}", "role", "system", "content", sys));
    json_t *user = json_object();
    json_object_set_new(user, "role", json_string("user"));
    json_object_set_new(user, "content",
                        json_is_string(prompt) ? json_incref(prompt) : json_string(""));
    json_array_append_new(ms, user);
    return map_think(a, json_object_get(o, "think"), b, e);
}

void ebb__ollama_rename_param(struct ebb__perr *e)
{
    static const struct {
        const char *chat, *ollama;
    } names[] = {{"max_tokens", "options.num_predict"},
                 {"response_format", "format"},
                 {"reasoning_effort", "think"},
                 {"temperature", "options.temperature"},
                 {"top_k", "options.top_k"},
                 {"top_p", "options.top_p"},
                 {"min_p", "options.min_p"},
                 {"seed", "options.seed"},
                 {"stop", "options.stop"},
                 {"repeat_penalty", "options.repeat_penalty"},
                 {"repeat_last_n", "options.repeat_last_n"}};
    for (size_t i = 0; e->param && i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(e->param, names[i].chat))
            continue;
        char msg[sizeof(e->msg) + 64];
        snprintf(msg, sizeof(msg), "%s: %s", names[i].ollama, e->msg);
        snprintf(e->msg, sizeof(e->msg), "%.*s", (int)sizeof(e->msg) - 1, msg);
        e->param = names[i].ollama;
        return;
    }
}
