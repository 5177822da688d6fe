/* The answer of /v1/responses: the model's output split into typed items (a reasoning item for a
 * thinking model's <think> block, a message item for the text, a function_call item per tool
 * call) and either written as the typed SSE events the openai SDK's responses.stream()
 * accumulates (response.created, response.in_progress, per item output_item.added, its
 * content_part.added and deltas, their .done events and output_item.done, then
 * response.completed or response.incomplete; every event with its sequence_number), or, without
 * streaming, returned as one response object. Both paths run the same item builder (events are
 * simply not written for the body), so a streamed and an unstreamed answer of the same output
 * have the same items. A finished response goes into the store (store.c) unless store is
 * false. */
#include "responses-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

enum kind { K_NONE, K_REASONING, K_MESSAGE, K_CALL };

struct ebb__resp {
    json_t *req;     /* the request (owned) */
    json_t *history; /* the conversation before this answer, without instructions (owned) */
    bool store;
    bool emit;     /* events are written (streams); not while the body is built */
    long long seq; /* the next event's sequence_number */
    struct ebb_think_stream *th;
    struct ebb_tool_stream *tp; /* with tools offered */
    json_t *output;             /* the finished items */
    /* the open item */
    enum kind kind;
    char item_id[48];
    char call_id[48];
    char *call_name;
    struct ebb__abuf text; /* its text (reasoning, message) or arguments (call) */
    struct ebb__abuf ws;   /* whitespace no message has taken yet: dropped if nothing follows */
    /* the answer as a chat message, for the store */
    struct ebb__abuf all_text, all_reasoning;
    json_t *calls;
};

struct ebb__resp *ebb__resp_new(struct ebb__resp_req *q)
{
    struct ebb__resp *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->req = q->req;
    s->history = q->history;
    s->store = q->store;
    q->req = q->history = NULL;
    s->output = json_array();
    s->calls = json_array();
    return s;
}

static void resp_free(void *ext)
{
    struct ebb__resp *s = ext;
    if (!s)
        return;
    json_decref(s->req);
    json_decref(s->history);
    json_decref(s->output);
    json_decref(s->calls);
    ebb_think_stream_free(s->th);
    ebb_tool_stream_free(s->tp);
    free(s->call_name);
    ebb__abuf_fini(&s->text);
    ebb__abuf_fini(&s->ws);
    ebb__abuf_fini(&s->all_text);
    ebb__abuf_fini(&s->all_reasoning);
    free(s);
}

void ebb__resp_id(char *out, size_t cap, const char *prefix)
{
    static uint64_t state;
    if (!state)
        state = (uint64_t)(ebb__unix_now() * 1e6) ^ (uint64_t)getpid() << 40 ^ 0x8BADF00Dull;
    uint64_t v[2];
    for (int i = 0; i < 2; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        v[i] = state * 0x2545F4914F6CDD1Dull;
    }
    snprintf(out, cap, "%s_%016llx%016llx", prefix, (unsigned long long)v[0],
             (unsigned long long)v[1]);
}

/* ---- events ------------------------------------------------------------------------------- */

static json_t *typed(const char *type)
{
    return json_pack("{ss}", "type", type);
}

static json_t *text_of(const struct ebb__abuf *b)
{
    return ebb__json_text(b->p ? b->p : "", b->n);
}

/* Writes "event: <type>\ndata: <o>\n\n" with the next sequence_number (o stolen). */
static void emit(struct ebb__req *r, json_t *o)
{
    struct ebb__resp *s = r->gen->ext;
    if (!s->emit) {
        json_decref(o);
        return;
    }
    json_object_set_new(o, "sequence_number", json_integer(s->seq++));
    char *d = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(15));
    ebb__abuf_printf(&r->out, "event: %s\ndata: ", json_string_value(json_object_get(o, "type")));
    ebb__abuf_puts(&r->out, d ? d : "{}");
    ebb__abuf_puts(&r->out, "\n\n");
    if (!d)
        r->out.oom = true;
    free(d);
    json_decref(o);
}

/* An event about the open item: {type, item_id, output_index[, content_index]}. */
static json_t *item_event(struct ebb__resp *s, const char *type, bool content)
{
    json_t *o = typed(type);
    json_object_set_new(o, "item_id", json_string(s->item_id));
    json_object_set_new(o, "output_index", json_integer((json_int_t)json_array_size(s->output)));
    if (content)
        json_object_set_new(o, "content_index", json_integer(0));
    return o;
}

/* The content part of the open reasoning or message item with its text so far. */
static json_t *part(struct ebb__resp *s, bool with_text)
{
    json_t *text = with_text ? text_of(&s->text) : json_string("");
    if (s->kind == K_REASONING)
        return json_pack("{ssso}", "type", "reasoning_text", "text", text);
    return json_pack("{sssos[]s[]}", "type", "output_text", "text", text, "annotations",
                     "logprobs");
}

/* The open item as an object: in_progress and empty when it opens, complete when it closes. */
static json_t *item(struct ebb__resp *s, const char *status, bool done)
{
    json_t *o = json_pack("{ssss}", "id", s->item_id, "type",
                          s->kind == K_REASONING ? "reasoning"
                          : s->kind == K_MESSAGE ? "message"
                                                 : "function_call");
    json_object_set_new(o, "status", json_string(status));
    if (s->kind == K_REASONING) {
        json_object_set_new(o, "summary", json_array());
        json_t *c = json_array();
        if (done)
            json_array_append_new(c, part(s, true));
        json_object_set_new(o, "content", c);
    } else if (s->kind == K_MESSAGE) {
        json_object_set_new(o, "role", json_string("assistant"));
        json_t *c = json_array();
        if (done)
            json_array_append_new(c, part(s, true));
        json_object_set_new(o, "content", c);
    } else {
        json_object_set_new(o, "call_id", json_string(s->call_id));
        json_object_set_new(o, "name", ebb__json_text(s->call_name, strlen(s->call_name)));
        json_object_set_new(o, "arguments", done ? text_of(&s->text) : json_string(""));
    }
    return o;
}

/* Closes the open item: its .done events, output_item.done, and the item into the output. */
static void item_close(struct ebb__req *r, const char *status)
{
    struct ebb__resp *s = r->gen->ext;
    if (s->kind == K_NONE)
        return;
    json_t *o;
    if (s->kind == K_CALL) {
        o = item_event(s, "response.function_call_arguments.done", false);
        json_object_set_new(o, "name", ebb__json_text(s->call_name, strlen(s->call_name)));
        json_object_set_new(o, "arguments", text_of(&s->text));
        emit(r, o);
        json_t *fn = json_pack("{soso}", "name", ebb__json_text(s->call_name, strlen(s->call_name)),
                               "arguments", text_of(&s->text));
        json_array_append_new(
            s->calls, json_pack("{ssssso}", "id", s->call_id, "type", "function", "function", fn));
    } else {
        bool rs = s->kind == K_REASONING;
        o = item_event(s, rs ? "response.reasoning_text.done" : "response.output_text.done", true);
        json_object_set_new(o, "text", text_of(&s->text));
        if (!rs)
            json_object_set_new(o, "logprobs", json_array());
        emit(r, o);
        o = item_event(s, "response.content_part.done", true);
        json_object_set_new(o, "part", part(s, true));
        emit(r, o);
        ebb__abuf_put(rs ? &s->all_reasoning : &s->all_text, s->text.p ? s->text.p : "", s->text.n);
    }
    json_t *it = item(s, status, true);
    o = typed("response.output_item.done");
    json_object_set_new(o, "output_index", json_integer((json_int_t)json_array_size(s->output)));
    json_object_set(o, "item", it);
    emit(r, o);
    json_array_append_new(s->output, it);
    s->kind = K_NONE;
    s->text.n = 0;
    free(s->call_name);
    s->call_name = NULL;
}

/* Opens an item of kind k (closing the one open): output_item.added, and content_part.added for
 * the kinds with content. */
static void item_open(struct ebb__req *r, enum kind k, const char *call_id, const char *name)
{
    struct ebb__resp *s = r->gen->ext;
    item_close(r, "completed");
    s->kind = k;
    ebb__resp_id(s->item_id, sizeof(s->item_id),
                 k == K_REASONING ? "rs"
                 : k == K_MESSAGE ? "msg"
                                  : "fc");
    if (k == K_CALL) {
        snprintf(s->call_id, sizeof(s->call_id), "%s", call_id);
        s->call_name = strdup(name);
        if (!s->call_name)
            r->out.oom = true;
    }
    json_t *o = typed("response.output_item.added");
    json_object_set_new(o, "output_index", json_integer((json_int_t)json_array_size(s->output)));
    json_object_set_new(o, "item", item(s, "in_progress", false));
    emit(r, o);
    if (k != K_CALL) {
        o = item_event(s, "response.content_part.added", true);
        json_object_set_new(o, "part", part(s, false));
        emit(r, o);
    }
}

/* Appends text to the open item of kind k (opening one when needed) with its delta event. */
static void item_delta(struct ebb__req *r, enum kind k, const char *text, size_t n)
{
    struct ebb__resp *s = r->gen->ext;
    if (k == K_MESSAGE && s->kind != K_MESSAGE) {
        /* Whitespace alone (between calls, at the end) opens no message. */
        size_t i = 0;
        while (i < n && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r'))
            i++;
        ebb__abuf_put(&s->ws, text, i);
        if (i == n)
            return;
        item_open(r, K_MESSAGE, NULL, NULL);
        if (s->ws.n) {
            struct ebb__abuf ws = s->ws;
            s->ws = (struct ebb__abuf){0};
            item_delta(r, K_MESSAGE, ws.p, ws.n);
            ebb__abuf_fini(&ws);
        }
        text += i, n -= i;
    } else if (k == K_REASONING && s->kind != K_REASONING) {
        item_open(r, K_REASONING, NULL, NULL);
    }
    if (k != K_MESSAGE)
        s->ws.n = 0;
    ebb__abuf_put(&s->text, text, n);
    json_t *o = item_event(s,
                           k == K_REASONING ? "response.reasoning_text.delta"
                           : k == K_MESSAGE ? "response.output_text.delta"
                                            : "response.function_call_arguments.delta",
                           k != K_CALL);
    json_object_set_new(o, "delta", ebb__json_text(text, n));
    if (k == K_MESSAGE)
        json_object_set_new(o, "logprobs", json_array());
    emit(r, o);
}

/* ---- the model's output into items -------------------------------------------------------- */

static ebb_err tool_event(void *ud, const struct ebb_tool_ev *ev)
{
    struct ebb__req *r = ud;
    if (ev->kind == EBB_TOOL_EV_CONTENT)
        item_delta(r, K_MESSAGE, ev->text, ev->len);
    else if (ev->kind == EBB_TOOL_EV_CALL_BEGIN)
        item_open(r, K_CALL, ev->id, ev->name);
    else
        item_delta(r, K_CALL, ev->text, ev->len);
    return EBB_OK;
}

static ebb_err think_event(void *ud, bool reasoning, const char *text, size_t n)
{
    struct ebb__req *r = ud;
    struct ebb__resp *s = r->gen->ext;
    if (reasoning)
        item_delta(r, K_REASONING, text, n);
    else if (s->tp)
        return ebb_tool_stream_feed(s->tp, text, n, tool_event, r);
    else
        item_delta(r, K_MESSAGE, text, n);
    return EBB_OK;
}

/* The splitter and the tool parser for r's output. */
static ebb_err setup(struct ebb__req *r)
{
    struct ebb__gen *g = r->gen;
    struct ebb__resp *s = g->ext;
    ebb_err rc = ebb_think_stream_new(g->think_open, &s->th);
    if (!rc && g->tools) {
        struct ebb_tool_parser_opts po = {.format = r->sv->tmpl.tool_format,
                                          .tools = g->tools,
                                          .max_calls = g->max_calls,
                                          .id_prefix = "call_"};
        rc = ebb_tool_stream_new(&po, &s->tp);
    }
    return rc;
}

static void feed(struct ebb__req *r, const char *text, size_t n)
{
    struct ebb__gen *g = r->gen;
    struct ebb__resp *s = g->ext;
    /* Without its splitter (out of memory at the start) the stream is being cut already. */
    if (!s->th)
        return;
    ebb_err rc = g->reasoning ? ebb_think_stream_feed(s->th, text, n, think_event, r)
                              : think_event(r, false, text, n);
    if (rc)
        r->out.oom = true;
}

/* The end of the output: what the parsers held back, the last item closed (incomplete when
 * the length limit cut it), and an empty message when the model wrote nothing at all. */
static void finish(struct ebb__req *r)
{
    struct ebb__gen *g = r->gen;
    struct ebb__resp *s = g->ext;
    ebb_err rc = EBB_OK;
    if (!s->th)
        return;
    if (g->reasoning)
        rc = ebb_think_stream_finish(s->th, think_event, r);
    if (!rc && s->tp)
        rc = ebb_tool_stream_finish(s->tp, tool_event, r);
    if (rc)
        r->out.oom = true;
    if (!json_array_size(s->output) && s->kind == K_NONE)
        item_open(r, K_MESSAGE, NULL, NULL);
    item_close(r, g->res.finish == EBB_FINISH_LENGTH ? "incomplete" : "completed");
}

/* ---- the response object ------------------------------------------------------------------ */

static json_t *req_or(struct ebb__resp *s, const char *key, json_t *dflt)
{
    json_t *v = json_object_get(s->req, key);
    if (v && !json_is_null(v)) {
        json_decref(dflt);
        return json_incref(v);
    }
    return dflt;
}

/* Reasoning tokens: the reasoning text tokenized again (ebb counts generated tokens, not which
 * part of the answer each went to). */
static uint32_t reasoning_tokens(struct ebb__req *r)
{
    struct ebb__resp *s = r->gen->ext;
    size_t need = 0;
    if (!s->all_reasoning.n)
        return 0;
    ebb_tokenizer_encode(ebb_model_tokenizer(r->sv->model), s->all_reasoning.p, s->all_reasoning.n,
                         0, NULL, 0, &need);
    return need > r->gen->res.n_gen ? r->gen->res.n_gen : (uint32_t)need;
}

static json_t *usage(struct ebb__req *r)
{
    const struct ebb_sched_result *res = &r->gen->res;
    return json_pack("{sIs{sIsI}sIs{sI}sI}", "input_tokens", (json_int_t)res->n_prompt,
                     "input_tokens_details", "cached_tokens", (json_int_t)res->n_cached,
                     "cache_write_tokens", (json_int_t)0, "output_tokens", (json_int_t)res->n_gen,
                     "output_tokens_details", "reasoning_tokens", (json_int_t)reasoning_tokens(r),
                     "total_tokens", (json_int_t)(res->n_prompt + res->n_gen));
}

/* The response object in status; output and usage once it is done. */
static json_t *response(struct ebb__req *r, const char *status, json_t *error)
{
    struct ebb__gen *g = r->gen;
    struct ebb__resp *s = g->ext;
    bool done = strcmp(status, "in_progress") != 0;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(g->id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer(g->created));
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "background", json_false());
    json_object_set_new(o, "error", error ? error : json_null());
    json_object_set_new(o, "incomplete_details",
                        !strcmp(status, "incomplete")
                            ? json_pack("{ss}", "reason", "max_output_tokens")
                            : json_null());
    json_object_set_new(o, "instructions", req_or(s, "instructions", json_null()));
    json_object_set_new(o, "max_output_tokens", req_or(s, "max_output_tokens", json_null()));
    json_object_set_new(o, "metadata", req_or(s, "metadata", json_object()));
    json_object_set_new(o, "model", json_string(r->sv->id));
    json_object_set_new(o, "output", done ? json_deep_copy(s->output) : json_array());
    json_object_set_new(o, "parallel_tool_calls", req_or(s, "parallel_tool_calls", json_true()));
    json_object_set_new(o, "previous_response_id", req_or(s, "previous_response_id", json_null()));
    json_t *rs = json_object_get(s->req, "reasoning");
    json_t *effort = json_object_get(rs, "effort");
    json_object_set_new(o, "reasoning",
                        json_pack("{sOsn}", "effort", effort ? effort : json_null(), "summary"));
    json_object_set_new(o, "store", json_boolean(s->store));
    json_object_set_new(o, "temperature", req_or(s, "temperature", json_null()));
    json_t *text = json_object_get(s->req, "text"), *fmt = json_object_get(text, "format");
    json_object_set_new(
        o, "text",
        json_pack("{so}", "format",
                  json_is_object(fmt) ? json_incref(fmt) : json_pack("{ss}", "type", "text")));
    json_object_set_new(o, "tool_choice", req_or(s, "tool_choice", json_string("auto")));
    json_object_set_new(o, "tools", req_or(s, "tools", json_array()));
    json_object_set_new(o, "top_p", req_or(s, "top_p", json_null()));
    json_object_set_new(o, "truncation", json_string("disabled"));
    json_object_set_new(o, "usage", done && !error ? usage(r) : json_null());
    json_object_set_new(o, "user", req_or(s, "user", json_null()));
    return o;
}

/* Keeps a finished response and the conversation it ends (the history, then the answer as one
 * assistant message) for previous_response_id and GET. */
static void keep(struct ebb__req *r, json_t *resp)
{
    struct ebb__resp *s = r->gen->ext;
    if (!s->store || !r->api->resp_store_cap)
        return;
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", text_of(&s->all_text));
    if (s->all_reasoning.n)
        json_object_set_new(m, "reasoning_content", text_of(&s->all_reasoning));
    if (json_array_size(s->calls))
        json_object_set(m, "tool_calls", s->calls);
    json_t *hist = json_array();
    json_array_extend(hist, s->history);
    json_array_append_new(hist, m);
    ebb__resp_store_put(ebb__resp_store_of(r->api), r->api->resp_store_cap, r->gen->id, resp, hist);
    json_decref(hist);
}

static const char *final_status(const struct ebb__gen *g)
{
    return g->res.finish == EBB_FINISH_LENGTH ? "incomplete" : "completed";
}

/* ---- the hooks ---------------------------------------------------------------------------- */

static void resp_body(struct ebb__req *r)
{
    struct ebb__gen *g = r->gen;
    struct ebb__resp *s = g->ext;
    if (g->res.finish == EBB_FINISH_ERROR) {
        ebb__reply_error(r, 500, g->res.msg[0] ? g->res.msg : "generation failed", NULL,
                         "internal_error");
        return;
    }
    if (g->res.finish == EBB_FINISH_CANCEL) {
        ebb__reply_error(r, 503, "the request was cancelled (server shutting down)", NULL,
                         "cancelled");
        return;
    }
    if (g->ch[0].text.oom || setup(r)) {
        ebb__reply_error(r, 503, "out of memory while collecting the answer", NULL,
                         "out_of_memory");
        return;
    }
    s->emit = false;
    feed(r, g->ch[0].text.p ? g->ch[0].text.p : "", g->ch[0].text.n);
    finish(r);
    json_t *o = response(r, final_status(g), NULL);
    keep(r, o);
    ebb__reply_json(r, 200, o);
}

static void resp_stream_open(struct ebb__req *r)
{
    struct ebb__resp *s = r->gen->ext;
    s->emit = true;
    if (setup(r))
        r->out.oom = true;
    json_t *o = typed("response.created");
    json_object_set_new(o, "response", response(r, "in_progress", NULL));
    emit(r, o);
    o = typed("response.in_progress");
    json_object_set_new(o, "response", response(r, "in_progress", NULL));
    emit(r, o);
}

static void resp_stream_text(struct ebb__req *r, const char *text, size_t n)
{
    feed(r, text, n);
}

static void resp_stream_end(struct ebb__req *r)
{
    struct ebb__gen *g = r->gen;
    g->finished = true;
    if (g->res.finish == EBB_FINISH_ERROR || g->res.finish == EBB_FINISH_CANCEL) {
        bool err = g->res.finish == EBB_FINISH_ERROR;
        const char *msg =
            err ? (g->res.msg[0] ? g->res.msg : "generation failed") : "the request was cancelled";
        const char *code = err ? "server_error" : "cancelled";
        json_t *o = typed("error");
        json_object_set_new(o, "code", json_string(code));
        json_object_set_new(o, "message", json_string(msg));
        json_object_set_new(o, "param", json_null());
        emit(r, o);
        o = typed("response.failed");
        json_object_set_new(
            o, "response",
            response(r, "failed", json_pack("{ssss}", "code", code, "message", msg)));
        emit(r, o);
        return;
    }
    finish(r);
    const char *status = final_status(g);
    json_t *resp = response(r, status, NULL);
    keep(r, resp);
    json_t *o = typed(!strcmp(status, "completed") ? "response.completed" : "response.incomplete");
    json_object_set_new(o, "response", resp);
    emit(r, o);
}

const struct ebb__gen_fmt ebb__resp_fmt = {
    .stream_open = resp_stream_open,
    .stream_text = resp_stream_text,
    .stream_end = resp_stream_end,
    .body = resp_body,
    .free = resp_free,
};
