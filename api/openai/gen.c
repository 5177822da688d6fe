/* /v1/chat/completions and /v1/completions: prompt building, submission to the scheduler, the
 * engine sink (engine thread), and turning engine output into SSE chunks or one JSON body. */
#include "openai.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "tokenizer/tokenizer.h"

struct ebb__gen *ebb__gen_new(uint32_t n_choices)
{
    struct ebb__gen *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->n_ch = n_choices ? n_choices : 1;
    g->ch = g->n_ch == 1 ? &g->one : calloc(g->n_ch, sizeof(*g->ch));
    if (!g->ch) {
        free(g);
        return NULL;
    }
    return g;
}

void ebb__gen_free(struct ebb__gen *g)
{
    if (!g)
        return;
    if (g->fmt && g->fmt->free)
        g->fmt->free(g->ext);
    for (uint32_t i = 0; i < g->n_ch; i++) {
        struct ebb__gen_choice *c = &g->ch[i];
        ebb__abuf_fini(&c->pend);
        ebb__abuf_fini(&c->take);
        ebb__abuf_fini(&c->text);
        free(c->pend_lp);
        free(c->take_lp);
        free(c->all_lp);
        ebb_tool_stream_free(c->tp);
        ebb_think_stream_free(c->th);
    }
    if (g->ch != &g->one)
        free(g->ch);
    free(g->echo);
    json_decref(g->tools);
    free(g);
}

static bool lp_push(struct ebb__lp **v, size_t *n, size_t *cap, const struct ebb__lp *e)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        struct ebb__lp *p = realloc(*v, c * sizeof(*p));
        if (!p)
            return false;
        *v = p;
        *cap = c;
    }
    (*v)[(*n)++] = *e;
    return true;
}

/* ---- engine thread ---------------------------------------------------------------------- */

static void post(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    if (!r->in_ready) {
        r->in_ready = true;
        r->ready_next = a->ready_head;
        a->ready_head = r;
    }
}

/* Releases a->mu, which the caller holds, after queueing a streamed request for the loop
 * thread (once: a request already queued is not woken again). */
static void unlock_wake_stream(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    bool wake = r->gen->stream && !r->in_ready;
    if (wake)
        post(r);
    pthread_mutex_unlock(&a->mu);
    if (wake)
        uv_async_send(&a->async);
}

static void sink_token(void *ud, const struct ebb_sched_token *t)
{
    struct ebb__req *r = ud;
    struct ebb__gen *g = r->gen;
    struct ebb_api *a = r->api;
    struct ebb__gen_choice *c = &g->ch[t->choice < g->n_ch ? t->choice : 0];
    pthread_mutex_lock(&a->mu);
    ebb__abuf_put(&c->pend, t->text, t->len);
    /* Control tokens have no text, but the tool parser needs the ones that open a call. */
    for (int k = 0; k < 2; k++)
        if (g->mark[k] && t->id == g->mark_id[k])
            ebb__abuf_puts(&c->pend, g->mark[k]);
    if (t->info) {
        struct ebb__lp e = {.id = t->id, .logprob = t->info->logprob, .n_top = t->info->n_top};
        memcpy(e.top_ids, t->info->top_ids, sizeof(e.top_ids));
        memcpy(e.top_logprobs, t->info->top_logprobs, sizeof(e.top_logprobs));
        if (!lp_push(&c->pend_lp, &c->n_pend_lp, &c->cap_pend_lp, &e))
            c->pend.oom = true; /* output lost: the loop fails the request */
    }
    unlock_wake_stream(r);
}

/* One of several choices ended: a stream sends its finish chunk at the next pump. */
static void sink_choice(void *ud, const struct ebb_sched_result *res)
{
    struct ebb__req *r = ud;
    struct ebb__gen *g = r->gen;
    struct ebb_api *a = r->api;
    if (res->choice >= g->n_ch)
        return;
    pthread_mutex_lock(&a->mu);
    g->ch[res->choice].res = *res;
    g->ch[res->choice].ended = true;
    unlock_wake_stream(r);
}

static void sink_done(void *ud, const struct ebb_sched_result *res)
{
    struct ebb__req *r = ud;
    struct ebb_api *a = r->api;
    pthread_mutex_lock(&a->mu);
    r->gen->res = *res;
    r->gen->eng_done = true;
    post(r);
    pthread_mutex_unlock(&a->mu);
    uv_async_send(&a->async);
}

/* ---- loop thread: output ----------------------------------------------------------------- */

static const char *finish_name(enum ebb_finish f)
{
    return f == EBB_FINISH_LENGTH ? "length" : "stop";
}

/* Choice i's own result: the job's when there is one choice. */
static const struct ebb_sched_result *choice_res(const struct ebb__gen *g, uint32_t i)
{
    return g->n_ch > 1 ? &g->ch[i].res : &g->res;
}

/* "tool_calls" when the model ended its turn after calling tools. */
static const char *finish_of(const struct ebb__gen *g, uint32_t i, size_t n_calls)
{
    enum ebb_finish f = choice_res(g, i)->finish;
    return f == EBB_FINISH_STOP && n_calls ? "tool_calls" : finish_name(f);
}

static struct ebb_tool_parser_opts tool_opts(struct ebb__req *r)
{
    return (struct ebb_tool_parser_opts){
        .format = r->sv->tmpl.tool_format, .tools = r->gen->tools, .max_calls = r->gen->max_calls};
}

static json_t *chunk_base(struct ebb__req *r)
{
    struct ebb__gen *g = r->gen;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(g->id));
    json_object_set_new(o, "object",
                        json_string(g->chat ? "chat.completion.chunk" : "text_completion"));
    json_object_set_new(o, "created", json_integer(g->created));
    json_object_set_new(o, "model", json_string(r->sv->id));
    json_object_set_new(o, "system_fingerprint", json_string("ebb"));
    if (g->include_usage)
        json_object_set_new(o, "usage", json_null());
    return o;
}

/* A chunk for choice idx; delta_text may be NULL (final chunk), lp may be NULL. delta (chat
 * only, stolen), when given, is the whole delta. */
static void sse_delta_chunk(struct ebb__req *r, uint32_t idx, json_t *delta, const char *text,
                            size_t n, json_t *lp, bool role, const char *finish)
{
    struct ebb__gen *g = r->gen;
    json_t *o = chunk_base(r), *ch = json_object(), *arr = json_array();
    json_object_set_new(ch, "index", json_integer(idx));
    if (g->chat) {
        json_t *d = delta ? delta : json_object();
        if (role)
            json_object_set_new(d, "role", json_string("assistant"));
        if (text)
            json_object_set_new(d, "content", ebb__json_text(text, n));
        json_object_set_new(ch, "delta", d);
    } else {
        json_object_set_new(ch, "text", ebb__json_text(text ? text : "", text ? n : 0));
    }
    json_object_set_new(ch, "logprobs", lp ? lp : json_null());
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_array_append_new(arr, ch);
    json_object_set_new(o, "choices", arr);
    ebb__sse_event(&r->out, o);
}

static void sse_chunk(struct ebb__req *r, uint32_t idx, const char *text, size_t n, json_t *lp,
                      bool role, const char *finish)
{
    sse_delta_chunk(r, idx, NULL, text, n, lp, role, finish);
}

static json_t *usage(const struct ebb_sched_result *res)
{
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(res->n_prompt));
    json_object_set_new(u, "completion_tokens", json_integer(res->n_gen));
    json_object_set_new(u, "total_tokens", json_integer(res->n_prompt + res->n_gen));
    if (res->n_cached) {
        json_t *d = json_object();
        json_object_set_new(d, "cached_tokens", json_integer(res->n_cached));
        json_object_set_new(u, "prompt_tokens_details", d);
    }
    return u;
}

static const struct ebb_tokenizer *tokenizer(struct ebb__req *r)
{
    return ebb_model_tokenizer(r->sv->model);
}

static void account(struct ebb__req *r)
{
    struct ebb__metrics *m = &r->api->metrics;
    const struct ebb_sched_result *res = &r->gen->res;
    m->prompt_tokens += res->n_prompt;
    m->cached_tokens += res->n_cached;
    m->generated_tokens += res->n_gen;
    m->prefill_seconds += res->t_prefill;
    m->decode_seconds += res->t_decode;
    m->queue_seconds += res->t_queue;
    if (res->finish == EBB_FINISH_CANCEL)
        m->cancellations++;
    if (res->finish == EBB_FINISH_ERROR)
        m->errors++;
    if (res->n_gen && res->finish != EBB_FINISH_ERROR)
        ebb__metrics_ttft(m, res->t_queue + res->t_prefill);
}

/* Choice i's finish chunk (after its tool parser's last events). */
static void stream_choice_end(struct ebb__req *r, uint32_t i)
{
    struct ebb__gen *g = r->gen;
    struct ebb__gen_choice *c = &g->ch[i];
    size_t n_calls = c->tp ? ebb_tool_stream_n_calls(c->tp) : 0;
    sse_chunk(r, i, g->chat ? NULL : "", 0, NULL, false, finish_of(g, i, n_calls));
    c->end_sent = true;
}

static void stream_finish(struct ebb__req *r)
{
    struct ebb__gen *g = r->gen;
    const struct ebb_sched_result *res = &g->res;
    if (res->finish == EBB_FINISH_ERROR || res->finish == EBB_FINISH_CANCEL) {
        const char *msg = res->finish == EBB_FINISH_ERROR ? res->msg : "the request was cancelled";
        char *e = ebb__error_json(msg, "server_error", NULL,
                                  res->finish == EBB_FINISH_ERROR ? "internal_error" : "cancelled");
        if (e) {
            ebb__abuf_puts(&r->out, "data: ");
            ebb__abuf_puts(&r->out, e);
            ebb__abuf_puts(&r->out, "\n\n");
            free(e);
        }
    } else {
        for (uint32_t i = 0; i < g->n_ch; i++)
            if (!g->ch[i].end_sent)
                stream_choice_end(r, i);
        if (g->include_usage) {
            json_t *o = chunk_base(r);
            json_object_set_new(o, "choices", json_array());
            json_object_set_new(o, "usage", usage(res));
            ebb__sse_event(&r->out, o);
        }
        ebb__abuf_puts(&r->out, "data: [DONE]\n\n");
    }
    g->finished = true;
}

/* A content chunk of choice idx without logprobs, written straight into the output buffer
 * from a prefix built once per request: a streaming token then costs no allocation once the
 * buffer has grown. Returns false (nothing written) if text is not valid UTF-8. */
static bool sse_text_chunk(struct ebb__req *r, uint32_t idx, const char *text, size_t n)
{
    struct ebb__gen *g = r->gen;
    if (!ebb__utf8_valid(text, n))
        return false;
    if (!g->chunk_head[0]) {
        json_t *jid = json_string(g->id), *m = json_string(r->sv->id);
        char *id = json_dumps(jid, JSON_ENCODE_ANY), *model = json_dumps(m, JSON_ENCODE_ANY);
        json_decref(jid);
        json_decref(m);
        snprintf(g->chunk_head, sizeof(g->chunk_head),
                 "data: {\"id\":%s,\"object\":\"%s\",\"created\":%lld,\"model\":%s,"
                 "\"system_fingerprint\":\"ebb\",%s\"choices\":[{\"index\":",
                 id ? id : "\"\"", g->chat ? "chat.completion.chunk" : "text_completion",
                 g->created, model ? model : "\"\"", g->include_usage ? "\"usage\":null," : "");
        free(id);
        free(model);
    }
    ebb__abuf_puts(&r->out, g->chunk_head);
    ebb__abuf_printf(&r->out, "%u%s", idx, g->chat ? ",\"delta\":{\"content\":" : ",\"text\":");
    ebb__json_escape(&r->out, text, n);
    ebb__abuf_puts(&r->out, g->chat ? "},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
                                    : ",\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    return true;
}

/* A tool parser's event for choice r->gen->cur. */
static ebb_err tool_event(void *ud, const struct ebb_tool_ev *ev)
{
    struct ebb__req *r = ud;
    uint32_t idx = r->gen->cur;
    if (ev->kind == EBB_TOOL_EV_CONTENT) {
        if (!sse_text_chunk(r, idx, ev->text, ev->len))
            sse_chunk(r, idx, ev->text, ev->len, NULL, false, NULL);
        return EBB_OK;
    }
    json_t *d = ebb__tool_delta(ev);
    if (!d)
        return EBB_ENOMEM;
    sse_delta_chunk(r, idx, d, NULL, 0, NULL, false, NULL);
    return EBB_OK;
}

/* The reasoning splitter's output for choice r->gen->cur: reasoning as reasoning_content deltas,
 * the answer on to the tool parser or as content deltas. */
static ebb_err think_event(void *ud, bool reasoning, const char *text, size_t n)
{
    struct ebb__req *r = ud;
    struct ebb__gen *g = r->gen;
    uint32_t i = g->cur;
    if (reasoning) {
        json_t *d = json_object();
        json_object_set_new(d, "reasoning_content", ebb__json_text(text, n));
        sse_delta_chunk(r, i, d, NULL, 0, NULL, false, NULL);
        return EBB_OK;
    }
    if (g->ch[i].tp)
        return ebb_tool_stream_feed(g->ch[i].tp, text, n, tool_event, r);
    if (!sse_text_chunk(r, i, text, n))
        sse_chunk(r, i, text, n, NULL, false, NULL);
    return EBB_OK;
}

/* Streams choice i's text through its tool parser: content as content deltas, calls as
 * tool_calls deltas, markup never; logprobs (lp, stolen) go in a chunk of their own. */
static void stream_tools(struct ebb__req *r, uint32_t i, const char *t, size_t n, json_t *lp,
                         bool final)
{
    struct ebb__gen *g = r->gen;
    struct ebb_tool_stream *tp = g->ch[i].tp;
    g->cur = i;
    ebb_err rc = final ? ebb_tool_stream_finish(tp, tool_event, r)
                       : ebb_tool_stream_feed(tp, t, n, tool_event, r);
    if (lp)
        sse_chunk(r, i, NULL, 0, lp, false, NULL);
    if (rc)
        r->out.oom = true; /* cut the stream like a buffer overflow */
}

/* Choice i's new output as chunks (its text and logprobs taken from the engine). */
static void stream_choice(struct ebb__req *r, uint32_t i)
{
    struct ebb__gen *g = r->gen;
    struct ebb__gen_choice *c = &g->ch[i];
    if (!c->take.n && !c->n_take_lp)
        return;
    json_t *lp = NULL;
    if (g->logprobs) {
        if (g->chat) {
            lp = json_object();
            json_object_set_new(lp, "content",
                                ebb__chat_logprobs(tokenizer(r), c->take_lp, c->n_take_lp));
        } else {
            lp = ebb__compl_logprobs(tokenizer(r), c->take_lp, c->n_take_lp, 0);
        }
    }
    const char *t = c->take.p ? c->take.p : "";
    if (c->th) {
        g->cur = i;
        if (ebb_think_stream_feed(c->th, t, c->take.n, think_event, r))
            r->out.oom = true; /* cut the stream like a buffer overflow */
        if (lp)
            sse_chunk(r, i, NULL, 0, lp, false, NULL);
    } else if (c->tp)
        stream_tools(r, i, t, c->take.n, lp, false);
    else if (lp || !sse_text_chunk(r, i, t, c->take.n))
        sse_chunk(r, i, t, c->take.n, lp, false, NULL);
}

/* Under api->mu: choice c's pending output becomes its take (the buffers swap). */
static void take_pending(struct ebb__gen_choice *c)
{
    struct ebb__abuf tb = c->take;
    c->take = c->pend;
    c->pend = tb;
    c->pend.n = 0;
    struct ebb__lp *tl = c->take_lp;
    size_t tc = c->cap_take_lp;
    c->take_lp = c->pend_lp;
    c->n_take_lp = c->n_pend_lp;
    c->cap_take_lp = c->cap_pend_lp;
    c->pend_lp = tl;
    c->cap_pend_lp = tc;
    c->n_pend_lp = 0;
}

void ebb__gen_pump(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    struct ebb__gen *g = r->gen;
    bool ended[EBB_SCHED_MAX_CHOICES] = {false};
    pthread_mutex_lock(&a->mu);
    for (uint32_t i = 0; i < g->n_ch; i++) {
        take_pending(&g->ch[i]);
        ended[i] = g->ch[i].ended;
    }
    bool done = g->eng_done;
    /* Queued again since on_async took it (the engine's last output came meanwhile): the
     * engine is released at that pump, so r is not freed while api->ready_head links it. */
    bool queued = r->in_ready;
    pthread_mutex_unlock(&a->mu);
    /* The engine's output did not all fit in memory: the answer would miss text. */
    bool lost = false;
    for (uint32_t i = 0; i < g->n_ch; i++) {
        lost = lost || g->ch[i].take.oom;
        g->ch[i].take.oom = false;
    }

    bool newly_done = done && r->engine_ref && !queued;
    if (g->stream) {
        if (r->conn && !r->disconnected && !g->finished) {
            if (g->fmt) {
                if (g->ch[0].take.n)
                    g->fmt->stream_text(r, g->ch[0].take.p, g->ch[0].take.n);
                if (done)
                    g->fmt->stream_end(r);
            }
            for (uint32_t i = 0; !g->fmt && i < g->n_ch; i++) {
                struct ebb__gen_choice *c = &g->ch[i];
                stream_choice(r, i);
                /* A choice that ended (several choices: on its own; else with the job) closes
                 * its parser; one that stopped or hit its length sends its finish chunk now. */
                bool end = g->n_ch > 1 ? ended[i] : done;
                if (!end || c->end_sent)
                    continue;
                g->cur = i;
                if (c->th && ebb_think_stream_finish(c->th, think_event, r))
                    r->out.oom = true;
                if (c->tp)
                    stream_tools(r, i, "", 0, NULL, true);
                enum ebb_finish f = choice_res(g, i)->finish;
                if (g->n_ch == 1)
                    continue; /* stream_finish ends the one choice */
                if (f != EBB_FINISH_ERROR && f != EBB_FINISH_CANCEL)
                    stream_choice_end(r, i);
                else
                    c->end_sent = true; /* the request ends with an error event */
            }
            if (done && !g->fmt)
                stream_finish(r);
            r->last_out = ebb__now();
            if (r->out.oom || lost) {
                /* The client reads slower than we generate and the buffer hit its cap, or
                 * memory ran out. */
                ebb_log(EBB_LOG_WARN, "http", "%s: %s, stream cut", r->path,
                        lost ? "out of memory" : "client too slow");
                r->disconnected = true;
                ebb_sched_cancel(g->sched, g->job_id);
            }
            ebb__resume(r);
        }
    } else {
        for (uint32_t i = 0; i < g->n_ch; i++) {
            struct ebb__gen_choice *c = &g->ch[i];
            ebb__abuf_put(&c->text, c->take.p ? c->take.p : "", c->take.n);
            for (size_t k = 0; k < c->n_take_lp; k++)
                if (!lp_push(&c->all_lp, &c->n_all_lp, &c->cap_all_lp, &c->take_lp[k]))
                    lost = true;
            if (c->text.oom)
                lost = true;
        }
        if (lost)
            g->ch[0].text.oom = true; /* reply_body answers 503 */
        if (done)
            ebb__resume(r);
    }
    for (uint32_t i = 0; i < g->n_ch; i++) {
        g->ch[i].take.n = 0;
        g->ch[i].n_take_lp = 0;
    }
    if (newly_done) {
        account(r);
        ebb__req_engine_released(r); /* may free r */
    }
}

void ebb__gen_keepalive(struct ebb__req *r, double now)
{
    struct ebb__gen *g = r->gen;
    if (!g || !g->stream || g->finished || !r->conn || r->disconnected)
        return;
    if (g->fmt && g->fmt->stream_type) /* not SSE: no comment lines */
        return;
    if ((now - r->last_out) * 1e3 < r->api->keepalive_ms)
        return;
    ebb__abuf_puts(&r->out, ": keep-alive\n\n");
    r->last_out = now;
    ebb__resume(r);
}

void ebb__gen_conn_closed(struct ebb__req *r)
{
    if (r->engine_ref && r->gen->sched)
        ebb_sched_cancel(r->gen->sched, r->gen->job_id);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct ebb__req *r = cls;
    /* Out of buffer (a slow client or no memory): the last event may be partial, so nothing
     * more is sent. */
    if (r->disconnected || r->out.oom)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = ebb__out_take(r, buf, max);
    if (n)
        return (ssize_t)n;
    if (r->gen->finished)
        return MHD_CONTENT_READER_END_OF_STREAM;
    ebb__suspend(r);
    return 0;
}

/* ---- loop thread: answering ----------------------------------------------------------------- */

/* Choice i of a finished non-stream request as an OpenAI choice object. */
static json_t *choice_json(struct ebb__req *r, uint32_t i)
{
    struct ebb__gen *g = r->gen;
    struct ebb__gen_choice *c = &g->ch[i];
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(i));
    const char *text = c->text.p ? c->text.p : "";
    json_t *lp = json_null();
    const char *finish = finish_of(g, i, 0);
    if (g->chat) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("assistant"));
        struct ebb_tool_result tr = {0};
        struct ebb_tool_parser_opts po = tool_opts(r);
        /* A thinking model's <think> block goes into reasoning_content, the rest on. */
        char *rs = NULL, *cs = NULL;
        size_t rn = 0, n = c->text.n;
        if (g->reasoning && !ebb_think_split(text, c->text.n, g->think_open, &rs, &rn, &cs, &n))
            text = cs;
        if (rs)
            json_object_set_new(m, "reasoning_content", ebb__json_text(rs, rn));
        if (g->tools && !ebb_tools_parse(&po, text, n, &tr)) {
            json_object_set_new(m, "content",
                                tr.content ? ebb__json_text(tr.content, tr.content_len)
                                           : json_null());
            if (tr.n_calls)
                json_object_set_new(m, "tool_calls", ebb__tool_calls_json(&tr));
            finish = finish_of(g, i, tr.n_calls);
            ebb_tool_result_fini(&tr);
        } else {
            json_object_set_new(m, "content", ebb__json_text(text, n));
        }
        free(rs);
        free(cs);
        json_object_set_new(ch, "message", m);
        if (g->logprobs) {
            lp = json_object();
            json_object_set_new(lp, "content",
                                ebb__chat_logprobs(tokenizer(r), c->all_lp, c->n_all_lp));
        }
    } else {
        struct ebb__abuf full = {0};
        ebb__abuf_put(&full, g->echo ? g->echo : "", g->echo_len);
        ebb__abuf_put(&full, text, c->text.n);
        json_object_set_new(ch, "text", ebb__json_text(full.p ? full.p : "", full.n));
        ebb__abuf_fini(&full);
        if (g->logprobs)
            lp = ebb__compl_logprobs(tokenizer(r), c->all_lp, c->n_all_lp, g->echo_len);
    }
    json_object_set_new(ch, "logprobs", lp);
    json_object_set_new(ch, "finish_reason", json_string(finish));
    return ch;
}

static void reply_body(struct ebb__req *r)
{
    struct ebb__gen *g = r->gen;
    const struct ebb_sched_result *res = &g->res;
    if (res->finish == EBB_FINISH_ERROR) {
        ebb__reply_error(r, 500, res->msg[0] ? res->msg : "generation failed", NULL,
                         "internal_error");
        return;
    }
    if (res->finish == EBB_FINISH_CANCEL) {
        ebb__reply_error(r, 503, "the request was cancelled (server shutting down)", NULL,
                         "cancelled");
        return;
    }
    if (g->ch[0].text.oom) {
        ebb__reply_error(r, 503, "out of memory while collecting the answer", NULL,
                         "out_of_memory");
        return;
    }
    json_t *o = json_object(), *arr = json_array();
    json_object_set_new(o, "id", json_string(g->id));
    json_object_set_new(o, "object", json_string(g->chat ? "chat.completion" : "text_completion"));
    json_object_set_new(o, "created", json_integer(g->created));
    json_object_set_new(o, "model", json_string(r->sv->id));
    json_object_set_new(o, "system_fingerprint", json_string("ebb"));
    for (uint32_t i = 0; i < g->n_ch; i++)
        json_array_append_new(arr, choice_json(r, i));
    json_object_set_new(o, "choices", arr);
    json_object_set_new(o, "usage", usage(res));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    /* jansson leaves keys out when an allocation fails (api/http/jsonmem.c). */
    if (!s || ebb__json_alloc_failed(true)) {
        free(s);
        ebb__reply_error(r, 503, "out of memory", NULL, "out_of_memory");
        return;
    }
    ebb__reply(r, 200, "application/json", s, strlen(s));
    free(s);
}

static void make_id(char *out, size_t cap, const char *prefix)
{
    static uint64_t state;
    if (!state)
        state = (uint64_t)ebb__unix_now() * 2654435761u ^ (uint64_t)getpid() << 32 ^ 0x9E37u;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    uint64_t b = state * 0x2545F4914F6CDD1Dull;
    snprintf(out, cap, "%s-%016llx%08llx", prefix, (unsigned long long)state,
             (unsigned long long)(b >> 32));
}

/* Encodes text (with flags) into a malloc'd token array appended after *ids. */
static ebb_err encode_append(const struct ebb_tokenizer *tok, const char *s, size_t n,
                             unsigned flags, int32_t **ids, size_t *n_ids)
{
    size_t need = 0;
    ebb_err rc = ebb_tokenizer_encode(tok, s, n, flags, NULL, 0, &need);
    if (rc && rc != EBB_ERANGE)
        return rc;
    int32_t *p = realloc(*ids, sizeof(int32_t) * (*n_ids + need + 1));
    if (!p)
        return EBB_ENOMEM;
    *ids = p;
    size_t got = 0;
    rc = ebb_tokenizer_encode(tok, s, n, flags, p + *n_ids, need + 1, &got);
    if (rc)
        return rc;
    *n_ids += got;
    return EBB_OK;
}

static ebb_err push_id(int32_t **ids, size_t *n, int32_t id)
{
    int32_t *p = realloc(*ids, sizeof(int32_t) * (*n + 1));
    if (!p)
        return EBB_ENOMEM;
    p[(*n)++] = id;
    *ids = p;
    return EBB_OK;
}

/* True when a rendered prompt ends inside a <think> block (templates of models that always
 * think open it in the generation prompt): the output then starts as reasoning. */
static bool ends_in_think(const char *s, size_t n)
{
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r'))
        n--;
    return n >= 7 && !memcmp(s + n - 7, "<think>", 7);
}

/* Builds the prompt tokens. Returns 0 or an HTTP status after replying. */
static unsigned build_prompt(struct ebb__req *r, struct ebb__gen_req *q, int32_t **ids,
                             size_t *n_ids, char **echo, size_t *echo_len)
{
    const struct ebb_tokenizer *tok = tokenizer(r);
    struct ebb_diag d = {{0}};
    ebb_err rc = EBB_OK;
    if (q->chat) {
        char *text = NULL;
        size_t len = 0;
        const json_t *tools = q->tools.choice != EBB__TC_NONE ? q->tools.tools : NULL;
        rc = ebb__tools_render(&r->sv->tmpl, q->msgs, q->n_msgs, tools, q->tmpl_vars, &text, &len,
                               &d);
        if (rc == EBB_ENOMEM || (rc && ebb__json_alloc_failed(false))) {
            ebb__reply_error(r, 503, d.msg[0] ? d.msg : "out of memory", NULL, "out_of_memory");
            return 503;
        }
        if (rc) {
            ebb__reply_error(r, 400, d.msg, "messages", NULL);
            return 400;
        }
        if (!rc)
            q->think_open = ends_in_think(text, len);
        rc = encode_append(tok, text, len, EBB_TOK_ADD_SPECIAL | EBB_TOK_PARSE_SPECIAL, ids, n_ids);
        free(text);
    } else if (q->prompt_ids) {
        uint32_t nv = ebb_tokenizer_n_vocab(tok);
        for (size_t i = 0; i < q->n_prompt_ids; i++) {
            if ((uint32_t)q->prompt_ids[i] >= nv) {
                char msg[128];
                snprintf(msg, sizeof(msg),
                         "token id %d in 'prompt' is outside the vocabulary "
                         "(size %u)",
                         (int)q->prompt_ids[i], nv);
                ebb__reply_error(r, 400, msg, "prompt", NULL);
                return 400;
            }
        }
        *ids = malloc(sizeof(int32_t) * q->n_prompt_ids);
        if (!*ids)
            rc = EBB_ENOMEM;
        else {
            memcpy(*ids, q->prompt_ids, sizeof(int32_t) * q->n_prompt_ids);
            *n_ids = q->n_prompt_ids;
        }
        if (!rc && q->echo) {
            struct ebb__abuf b = {0};
            struct ebb_detok dt;
            ebb_detok_init(&dt);
            char tmp[3100];
            for (size_t i = 0; i < q->n_prompt_ids; i++) {
                struct ebb_str p = {0};
                if (ebb_tokenizer_piece(tok, q->prompt_ids[i], false, &p))
                    continue;
                size_t pn = p.n > 1000 ? 1000 : (size_t)p.n;
                ebb__abuf_put(&b, tmp, ebb_detok_push(&dt, p.p, pn, tmp, sizeof(tmp)));
            }
            ebb__abuf_put(&b, tmp, ebb_detok_finish(&dt, tmp, sizeof(tmp)));
            *echo = b.p;
            *echo_len = b.n;
        }
    } else if (q->suffix) {
        if (r->sv->fim_pre < 0) {
            ebb__reply_error(r, 400,
                             "'suffix' needs a model with fill-in-the-middle tokens; this one "
                             "has none",
                             "suffix", NULL);
            return 400;
        }
        if (ebb_tokenizer_add_bos(tok) && ebb_tokenizer_bos(tok) >= 0)
            rc = push_id(ids, n_ids, ebb_tokenizer_bos(tok));
        if (!rc)
            rc = push_id(ids, n_ids, r->sv->fim_pre);
        if (!rc)
            rc = encode_append(tok, q->prompt, q->prompt_len, 0, ids, n_ids);
        if (!rc)
            rc = push_id(ids, n_ids, r->sv->fim_suf);
        if (!rc)
            rc = encode_append(tok, q->suffix, strlen(q->suffix), 0, ids, n_ids);
        if (!rc)
            rc = push_id(ids, n_ids, r->sv->fim_mid);
    } else {
        rc = encode_append(tok, q->prompt, q->prompt_len, EBB_TOK_ADD_SPECIAL, ids, n_ids);
    }
    if (!rc && q->echo && !q->prompt_ids && q->prompt) {
        *echo = malloc(q->prompt_len + 1);
        if (!*echo)
            rc = EBB_ENOMEM;
        else {
            memcpy(*echo, q->prompt, q->prompt_len);
            (*echo)[q->prompt_len] = 0;
            *echo_len = q->prompt_len;
        }
    }
    if (rc) {
        ebb__reply_error(r, 500, ebb_err_str(rc), NULL, "internal_error");
        return 500;
    }
    if (*n_ids == 0) {
        ebb__reply_error(r, 400, "the prompt is empty", q->chat ? "messages" : "prompt", NULL);
        return 400;
    }
    return 0;
}

bool ebb__gen_ready(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    if (!ebb__served_ready(r))
        return false;
    if (a->hold) {
        ebb__park(r);
        return false;
    }
    return true;
}

void ebb__gen_submit(struct ebb__req *r, struct ebb__gen *g, const int32_t *ids, uint32_t n_ids,
                     const struct ebb_gen_params *gp)
{
    struct ebb_api *a = r->api;
    r->gen = g;
    if (!g->id[0])
        make_id(g->id, sizeof(g->id), g->chat ? "chatcmpl" : "cmpl");
    if (!g->created)
        g->created = (long long)ebb__unix_now();
    g->n_prompt = n_ids;
    g->t_submit = ebb__now();
    r->out.limit = a->max_stream_buffer;
    struct ebb_sched_sink sink = {
        .on_token = sink_token, .on_choice = sink_choice, .on_done = sink_done, .ud = r};
    struct ebb_diag d = {{0}};
    /* Data parallel: the replica whose free slot holds the longest prefix of the prompt, else
     * the least busy (ebb_sched_place). */
    struct ebb__replica *rp = ebb__served_place(r->sv, ids, n_ids);
    if (!rp) {
        ebb__reply_error(r, 503, "the model is not loaded", NULL, "model_unavailable");
        return;
    }
    g->sched = rp->sched;
    r->engine_ref = true; /* before submit: on_done may come at once */
    ebb__served_count(r);
    ebb_err rc = ebb_sched_submit(g->sched, ids, n_ids, gp, &sink, &g->job_id, &d);
    if (!rc)
        rp->n_placed++;
    if (rc) {
        r->engine_ref = false;
        if (rc == EBB_EBUSY) {
            a->metrics.rejected_queue_full++;
            ebb__reply_error(r, 503, d.msg, NULL, "queue_full");
        } else if (rc == EBB_ECTX || rc == EBB_EINVAL) {
            ebb__reply_error(r, 400, d.msg, NULL, NULL);
        } else {
            ebb__reply_error(r, 500, d.msg[0] ? d.msg : ebb_err_str(rc), NULL, "internal_error");
        }
        return;
    }
    r->gen_counted = true;
    a->n_gen_conns++;
    r->live_next = a->live;
    if (a->live)
        a->live->live_prev = r;
    a->live = r;
    r->last_out = ebb__now();
    if (g->stream) {
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, r, NULL);
        MHD_add_response_header(resp, "Content-Type",
                                g->fmt && g->fmt->stream_type ? g->fmt->stream_type
                                                              : "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        ebb__add_cors(r, resp);
        if (g->fmt)
            g->fmt->stream_open(r);
        for (uint32_t i = 0; !g->fmt && i < g->n_ch; i++) {
            if (g->chat)
                sse_chunk(r, i, "", 0, NULL, true, NULL);
            else if (g->echo_len)
                sse_chunk(r, i, g->echo, g->echo_len, NULL, false, NULL);
        }
        MHD_queue_response(r->conn, 200, resp);
        MHD_destroy_response(resp);
        r->answered = true;
        r->status = 200;
    } else {
        ebb__suspend(r);
    }
}

/* A model named in the request must be the loaded one. Returns 0 or 404 after replying. */
static unsigned check_model(struct ebb__req *r, const struct ebb__gen_req *q)
{
    if (ebb__served_named(r, q->model))
        return 0;
    ebb__served_unknown(r, q->model, false);
    return 404;
}

unsigned ebb__gen_count_prompt(struct ebb__req *r, struct ebb__gen_req *q, uint32_t *n_tokens)
{
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *echo = NULL;
    size_t echo_len = 0;
    unsigned st = check_model(r, q);
    if (!st)
        st = build_prompt(r, q, &ids, &n_ids, &echo, &echo_len);
    if (!st)
        *n_tokens = (uint32_t)n_ids;
    free(ids);
    free(echo);
    return st;
}

void ebb__gen_run(struct ebb__req *r, struct ebb__gen_req *q, struct ebb__gen *g)
{
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *echo = NULL;
    size_t echo_len = 0;
    if (check_model(r, q))
        goto out;
    uint32_t n_slots = ebb_model_n_seq(r->sv->model);
    if (q->n_choices > n_slots) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "'n' is %u, but this server decodes at most %u sequences at once (--parallel "
                 "%u): ask for at most %u choices",
                 q->n_choices, n_slots, n_slots, n_slots);
        ebb__reply_error(r, 400, msg, "n", NULL);
        goto out;
    }
    /* The fields the request left out take the model's, the configured or the built-in
     * defaults (api/defaults/defaults.h). */
    ebb_defaults_apply(&r->sv->gen_defaults, q->sent, &q->gp.sampling);
    uint32_t nv = ebb_model_n_vocab(r->sv->model);
    for (size_t i = 0; i < q->gp.sampling.n_logit_bias; i++) {
        if ((uint32_t)q->bias[i].token >= nv) {
            char msg[128];
            snprintf(msg, sizeof(msg), "'logit_bias' token %d is outside the vocabulary (size %u)",
                     (int)q->bias[i].token, nv);
            ebb__reply_error(r, 400, msg, "logit_bias", NULL);
            goto out;
        }
    }
    if (q->effort_param && !r->sv->tmpl.has_thinking) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "'%s' is not supported with this model: its chat template has no "
                 "enable_thinking switch",
                 q->effort_param);
        ebb__reply_error(r, 400, msg, q->effort_param, "unsupported_parameter");
        goto out;
    }
    if (ebb__tools_constrain(r, q) || build_prompt(r, q, &ids, &n_ids, &echo, &echo_len))
        goto out;
    uint32_t n_ctx = ebb_model_n_ctx(r->sv->model);
    if (n_ids >= n_ctx) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "This model's maximum context length is %u tokens, but the prompt has %zu "
                 "tokens (n_prompt_tokens=%zu, n_ctx=%u)",
                 n_ctx, n_ids, n_ids, n_ctx);
        ebb__reply_error(r, 400, msg, q->chat ? "messages" : "prompt", "context_length_exceeded");
        goto out;
    }
    g->chat = q->chat;
    g->stream = q->stream;
    g->include_usage = q->stream && q->include_usage;
    g->logprobs = q->logprobs;
    g->echo = echo;
    g->echo_len = echo_len;
    echo = NULL;
    g->reasoning = q->chat && q->reasoning;
    g->think_open = q->think_open;
    for (uint32_t i = 0; g->reasoning && g->stream && !g->fmt && i < g->n_ch; i++) {
        if (ebb_think_stream_new(g->think_open, &g->ch[i].th)) {
            ebb__reply_error(r, 500, "out of memory", NULL, "internal_error");
            goto out;
        }
    }
    if (q->chat && q->tools.choice != EBB__TC_NONE) {
        r->gen = g; /* ebb__tools_setup reads it; r owns g from here on */
        if (ebb__tools_setup(r, &q->tools)) {
            ebb__reply_error(r, 500, "out of memory", NULL, "internal_error");
            g = NULL;
            goto out;
        }
    }
    ebb__gen_submit(r, g, ids, (uint32_t)n_ids, &q->gp);
    g = NULL;
out:
    ebb__gen_free(g);
    free(ids);
    free(echo);
}

static void gen_start(struct ebb__req *r)
{
    if (!ebb__gen_ready(r))
        return;
    struct ebb__gen_req q;
    struct ebb__perr pe;
    bool chat = r->ep == EBB__EP_CHAT;
    ebb_err rc = ebb__gen_req_parse(r->body.p ? r->body.p : "", r->body.n, chat, &q, &pe);
    if (rc) {
        if (rc == EBB_EINVAL)
            ebb__reply_error(r, 400, pe.msg, pe.param, NULL);
        else
            ebb__reply_error(r, 500, ebb_err_str(rc), NULL, "internal_error");
        goto out;
    }
    struct ebb__gen *g = ebb__gen_new(q.n_choices);
    if (!g) {
        ebb__reply_error(r, 500, "out of memory", NULL, "internal_error");
        goto out;
    }
    ebb__gen_run(r, &q, g);
out:
    ebb__gen_req_fini(&q);
}

void ebb__gen_handle(struct ebb__req *r)
{
    if (!r->gen) {
        gen_start(r);
        return;
    }
    if (r->answered)
        return;
    pthread_mutex_lock(&r->api->mu);
    bool done = r->gen->eng_done;
    pthread_mutex_unlock(&r->api->mu);
    if (done && !r->engine_ref && r->gen->fmt)
        r->gen->fmt->body(r);
    else if (done && !r->engine_ref)
        reply_body(r);
    else
        ebb__suspend(r);
}

/* ---- /tokenize and /detokenize ------------------------------------------------------------- */

void ebb__tokenize_handle(struct ebb__req *r, bool detok)
{
    if (!ebb__served_ready(r))
        return;
    const struct ebb_tokenizer *tok = tokenizer(r);
    json_error_t je;
    json_t *doc = json_loadb(r->body.p ? r->body.p : "", r->body.n, 0, &je), *o = NULL;
    char msg[300];
    if (!json_is_object(doc)) {
        snprintf(msg, sizeof(msg), "the body must be a JSON object%s%s", doc ? "" : ": ",
                 doc ? "" : je.text);
        ebb__reply_error(r, 400, msg, NULL, NULL);
        goto out;
    }
    if (!detok) {
        json_t *c = json_object_get(doc, "content");
        json_t *as = json_object_get(doc, "add_special");
        json_t *ps = json_object_get(doc, "parse_special");
        json_t *wp = json_object_get(doc, "with_pieces");
        if (!json_is_string(c)) {
            ebb__reply_error(r, 400, "'content' must be a string", "content", NULL);
            goto out;
        }
        if ((as && !json_is_boolean(as)) || (ps && !json_is_boolean(ps)) ||
            (wp && !json_is_boolean(wp))) {
            ebb__reply_error(r, 400,
                             "'add_special', 'parse_special' and 'with_pieces' must be "
                             "booleans",
                             as && !json_is_boolean(as) ? "add_special" : NULL, NULL);
            goto out;
        }
        unsigned flags = (json_is_true(as) ? EBB_TOK_ADD_SPECIAL : 0) |
                         (!ps || json_is_true(ps) ? EBB_TOK_PARSE_SPECIAL : 0);
        int32_t *ids = NULL;
        size_t n = 0;
        ebb_err rc =
            encode_append(tok, json_string_value(c), json_string_length(c), flags, &ids, &n);
        if (rc) {
            free(ids);
            ebb__reply_error(r, 500, ebb_err_str(rc), NULL, "internal_error");
            goto out;
        }
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) {
            if (json_is_true(wp)) {
                struct ebb_str p = {0};
                ebb_tokenizer_piece(tok, ids[i], true, &p);
                json_t *e = json_object();
                json_object_set_new(e, "id", json_integer(ids[i]));
                json_object_set_new(e, "piece", ebb__json_text(p.p ? p.p : "", (size_t)p.n));
                json_array_append_new(arr, e);
            } else {
                json_array_append_new(arr, json_integer(ids[i]));
            }
        }
        free(ids);
        o = json_object();
        json_object_set_new(o, "tokens", arr);
    } else {
        json_t *t = json_object_get(doc, "tokens");
        if (!json_is_array(t)) {
            ebb__reply_error(r, 400, "'tokens' must be an array of token ids", "tokens", NULL);
            goto out;
        }
        uint32_t nv = ebb_tokenizer_n_vocab(tok);
        struct ebb__abuf b = {0};
        struct ebb_detok dt;
        ebb_detok_init(&dt);
        char tmp[3100];
        for (size_t i = 0; i < json_array_size(t); i++) {
            json_t *v = json_array_get(t, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= (json_int_t)nv) {
                ebb__abuf_fini(&b);
                snprintf(msg, sizeof(msg), "'tokens'[%zu] is not a token id below %u", i, nv);
                ebb__reply_error(r, 400, msg, "tokens", NULL);
                goto out;
            }
            struct ebb_str p = {0};
            if (ebb_tokenizer_piece(tok, (int32_t)json_integer_value(v), false, &p))
                continue;
            size_t pn = p.n > 1000 ? 1000 : (size_t)p.n;
            ebb__abuf_put(&b, tmp, ebb_detok_push(&dt, p.p, pn, tmp, sizeof(tmp)));
        }
        ebb__abuf_put(&b, tmp, ebb_detok_finish(&dt, tmp, sizeof(tmp)));
        o = json_object();
        json_object_set_new(o, "content", ebb__json_text(b.p ? b.p : "", b.n));
        ebb__abuf_fini(&b);
    }
    char *s = json_dumps(o, JSON_COMPACT);
    ebb__reply(r, 200, "application/json", s ? s : "{}", s ? strlen(s) : 2);
    free(s);
out:
    json_decref(o);
    json_decref(doc);
}
