/* Chat prompts with tools. A template that knows tools (its source uses `tools`) receives them
 * and the history's tool calls and tool results as they are. For one that does not (SmolLM2,
 * Gemma, the built-in families), the conversation is rewritten before rendering: the tools are
 * described in the system message in the Hermes style the default parser reads
 * (<tool_call>{"name": ..., "arguments": ...}</tool_call>), an assistant message's tool_calls
 * become that markup in its content, and tool results become a user message of
 * <tool_response> blocks (consecutive results merged, so user and assistant turns still
 * alternate). */
#include "openai.h"

#include <stdlib.h>
#include <string.h>

/* Owned strings of the rewritten conversation. */
struct strs {
    char **v;
    size_t n, cap;
};

static char *keep(struct strs *s, struct ebb__abuf *b)
{
    if (b->oom || !b->p)
        return NULL;
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 8;
        char **p = realloc(s->v, c * sizeof(*p));
        if (!p)
            return NULL;
        s->v = p;
        s->cap = c;
    }
    s->v[s->n++] = b->p;
    char *p = b->p;
    b->p = NULL;
    b->n = b->cap = 0;
    return p;
}

static void strs_fini(struct strs *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
}

static bool has_tool_history(const struct ebb_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(msgs[i].role, "tool") ||
            json_array_size(json_object_get(msgs[i].msg, "tool_calls")))
            return true;
    return false;
}

static void put_json(struct ebb__abuf *b, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) {
        b->oom = true;
        return;
    }
    ebb__abuf_puts(b, s);
    free(s);
}

/* The system text that describes the tools. */
static void describe_tools(struct ebb__abuf *b, const json_t *tools)
{
    ebb__abuf_puts(b, "# Tools\n\nYou can call the functions described below, one JSON object "
                      "per line between <tools> and </tools>:\n<tools>");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        ebb__abuf_puts(b, "\n");
        put_json(b, json_array_get(tools, i));
    }
    ebb__abuf_puts(b, "\n</tools>\n\nTo call a function, reply with one block per call, each "
                      "holding a JSON object with the function's name and its arguments:\n"
                      "<tool_call>\n{\"name\": \"function_name\", \"arguments\": {\"argument\": "
                      "\"value\"}}\n</tool_call>");
}

/* Content plus the calls as <tool_call> blocks. */
static void calls_markup(struct ebb__abuf *b, const struct ebb_chat_msg *m)
{
    json_t *calls = json_object_get(m->msg, "tool_calls");
    ebb__abuf_put(b, m->content, m->len);
    for (size_t k = 0; k < json_array_size(calls); k++) {
        json_t *fn = json_object_get(json_array_get(calls, k), "function");
        json_t *args = json_object_get(fn, "arguments");
        if (b->n)
            ebb__abuf_puts(b, "\n");
        ebb__abuf_puts(b, "<tool_call>\n{\"name\": ");
        put_json(b, json_object_get(fn, "name"));
        ebb__abuf_puts(b, ", \"arguments\": ");
        if (json_is_string(args))
            ebb__abuf_put(b, json_string_value(args), json_string_length(args));
        else if (args)
            put_json(b, args);
        else
            ebb__abuf_puts(b, "{}");
        ebb__abuf_puts(b, "}\n</tool_call>");
    }
}

/* Rewrites msgs[0..n) into out (room for n + 1) as the file comment describes. */
static ebb_err rewrite(const struct ebb_chat_msg *msgs, size_t n, const json_t *tools,
                       struct ebb_chat_msg *out, size_t *n_out, struct strs *owned)
{
    struct ebb__abuf b = {0};
    size_t w = 0, i = 0;
    if (json_array_size(tools)) {
        if (n && !strcmp(msgs[0].role, "system")) {
            ebb__abuf_put(&b, msgs[0].content, msgs[0].len);
            ebb__abuf_puts(&b, "\n\n");
            out[w] = msgs[0];
            i = 1;
        } else {
            out[w] = (struct ebb_chat_msg){.role = "system"};
        }
        describe_tools(&b, tools);
        out[w].len = b.n;
        if (!(out[w].content = keep(owned, &b)))
            goto oom;
        w++;
    }
    for (; i < n; i++) {
        const struct ebb_chat_msg *m = &msgs[i];
        if (!strcmp(m->role, "tool")) {
            for (; i < n && !strcmp(msgs[i].role, "tool"); i++) {
                if (b.n)
                    ebb__abuf_puts(&b, "\n");
                ebb__abuf_puts(&b, "<tool_response>\n");
                ebb__abuf_put(&b, msgs[i].content, msgs[i].len);
                ebb__abuf_puts(&b, "\n</tool_response>");
            }
            i--;
            out[w] = (struct ebb_chat_msg){.role = "user", .len = b.n};
        } else if (json_array_size(json_object_get(m->msg, "tool_calls"))) {
            calls_markup(&b, m);
            out[w] = (struct ebb_chat_msg){.role = "assistant", .len = b.n};
        } else {
            out[w++] = *m;
            continue;
        }
        if (!(out[w].content = keep(owned, &b)))
            goto oom;
        w++;
    }
    *n_out = w;
    return EBB_OK;
oom:
    ebb__abuf_fini(&b);
    return EBB_ENOMEM;
}

ebb_err ebb__tools_render(const struct ebb_chat_template *t, const struct ebb_chat_msg *msgs,
                          size_t n, const json_t *tools, const json_t *vars, char **out,
                          size_t *out_len, struct ebb_diag *diag)
{
    if (t->tools_native || (!json_array_size(tools) && !has_tool_history(msgs, n)))
        return ebb_chat_template_render_vars(t, msgs, n, tools, vars, true, out, out_len, diag);
    struct strs owned = {0};
    size_t nn = 0;
    struct ebb_chat_msg *mm = calloc(n + 1, sizeof(*mm));
    ebb_err rc = mm ? rewrite(msgs, n, tools, mm, &nn, &owned) : EBB_ENOMEM;
    if (!rc)
        rc = ebb_chat_template_render_vars(t, mm, nn, NULL, vars, true, out, out_len, diag);
    else
        ebb_diag_set(diag, rc, "out of memory rendering the conversation");
    free(mm);
    strs_fini(&owned);
    return rc;
}
