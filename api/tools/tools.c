/* Tool-call parsing: a small state machine over the generated text that separates content from
 * call markup (tools.h). Calls are buffered until their markup closes (or the output ends), then
 * decoded with jansson; anything that does not decode is handed back as content unchanged. */
#include "tools.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum ebb_tool_format ebb_tool_format_detect(const char *src, size_t n)
{
    static const struct {
        const char *marker;
        enum ebb_tool_format f;
    } marks[] = {
        {"<tool_call>", EBB_TOOL_HERMES},
        {"[TOOL_CALLS]", EBB_TOOL_MISTRAL},
        {"<|python_tag|>", EBB_TOOL_LLAMA3},
        {"<|start_header_id|>", EBB_TOOL_LLAMA3},
    };
    for (size_t i = 0; src && i < sizeof(marks) / sizeof(marks[0]); i++) {
        size_t ml = strlen(marks[i].marker);
        for (size_t k = 0; k + ml <= n; k++)
            if (src[k] == marks[i].marker[0] && !memcmp(src + k, marks[i].marker, ml))
                return marks[i].f;
    }
    return EBB_TOOL_HERMES;
}

const char *ebb_tool_format_name(enum ebb_tool_format f)
{
    switch (f) {
    case EBB_TOOL_LLAMA3:
        return "llama3";
    case EBB_TOOL_MISTRAL:
        return "mistral";
    default:
        return "hermes";
    }
}

const char *const *ebb_tool_format_marker_tokens(enum ebb_tool_format f)
{
    static const char *const none[] = {NULL};
    static const char *const llama3[] = {"<|python_tag|>", NULL};
    static const char *const mistral[] = {"[TOOL_CALLS]", "[ARGS]", NULL};
    return f == EBB_TOOL_LLAMA3 ? llama3 : f == EBB_TOOL_MISTRAL ? mistral : none;
}

/* ---- small helpers ------------------------------------------------------------------------ */

struct tbuf {
    char *p;
    size_t n, cap;
};

static ebb_err tb_put(struct tbuf *b, const char *s, size_t n)
{
    if (n > SIZE_MAX - b->n - 1)
        return EBB_ENOMEM;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1)
            c = c > SIZE_MAX / 2 ? b->n + n + 1 : c * 2;
        char *p = realloc(b->p, c);
        if (!p)
            return EBB_ENOMEM;
        b->p = p;
        b->cap = c;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return EBB_OK;
}

/* Drops the first k bytes of b. */
static void tb_consume(struct tbuf *b, size_t k)
{
    if (k >= b->n) {
        b->n = 0;
    } else {
        memmove(b->p, b->p + k, b->n - k);
        b->n -= k;
    }
    if (b->p)
        b->p[b->n] = 0;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static const char *find(const char *h, size_t hn, const char *needle, size_t from)
{
    size_t nl = strlen(needle);
    for (size_t i = from; i + nl <= hn; i++)
        if (h[i] == needle[0] && !memcmp(h + i, needle, nl))
            return h + i;
    return NULL;
}

/* The longest suffix of s[0..n) that is a proper prefix of marker. */
static size_t partial_suffix(const char *s, size_t n, const char *marker)
{
    size_t ml = strlen(marker);
    for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, marker, k))
            return k;
    return 0;
}

/* ---- decoding calls ------------------------------------------------------------------------ */

/* Appends [name, arguments-json-text] to calls for one call object; false if v is not one. An
 * OpenAI-shaped {"type":"function","function":{...}} is accepted too. */
static bool call_from_json(json_t *v, const json_t *tools, json_t *calls)
{
    if (!json_is_object(v))
        return false;
    /* The top-level "parameters" is Llama 3's name for the arguments; inside an OpenAI-shaped
     * "function" it would be a schema, so only "arguments" counts there. */
    json_t *fn = json_object_get(v, "function");
    bool openai_shape = json_is_object(fn);
    if (openai_shape)
        v = fn;
    json_t *name = json_object_get(v, "name");
    if (!json_is_string(name) || !json_string_length(name))
        return false;
    if (tools) {
        bool known = false;
        for (size_t i = 0; !known && i < json_array_size(tools); i++) {
            json_t *tn =
                json_object_get(json_object_get(json_array_get(tools, i), "function"), "name");
            known = json_is_string(tn) && json_equal(tn, name);
        }
        if (!known)
            return false;
    }
    json_t *args = json_object_get(v, "arguments");
    if (!args && !openai_shape)
        args = json_object_get(v, "parameters");
    json_t *parsed = NULL;
    if (json_is_string(args)) {
        parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        args = parsed;
    }
    bool ok = !args || json_is_object(args);
    char *text = ok ? (args ? json_dumps(args, JSON_COMPACT) : strdup("{}")) : NULL;
    json_decref(parsed);
    if (!text)
        return false;
    json_t *pair = json_pack("[Os]", name, text);
    free(text);
    return pair && !json_array_append_new(calls, pair);
}

/* Appends the calls of one decoded value: a call object, {"tool_calls": [...]}, or an array. */
static bool calls_from_value(json_t *v, const json_t *tools, json_t *calls)
{
    json_t *tc = json_object_get(v, "tool_calls");
    if (json_is_object(v) && json_is_array(tc) && json_object_size(v) == 1)
        v = tc;
    if (!json_is_array(v))
        return call_from_json(v, tools, calls);
    if (!json_array_size(v))
        return false;
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!call_from_json(json_array_get(v, i), tools, calls))
            return false;
    return true;
}

/* Decodes s[0..n): JSON values separated by whitespace or ';', and in the mistral format also
 * name[ARGS]{...} items and repeated [TOOL_CALLS] markers. All or nothing: any piece that is
 * not a call makes the whole text content. Returns the [[name, args], ...] array or NULL. */
static json_t *decode_calls(const char *s, size_t n, enum ebb_tool_format f, const json_t *tools)
{
    json_t *calls = json_array();
    size_t i = 0;
    while (calls) {
        while (i < n && (is_ws(s[i]) || s[i] == ';'))
            i++;
        if (f == EBB_TOOL_MISTRAL && n - i >= 12 && !memcmp(s + i, "[TOOL_CALLS]", 12)) {
            i += 12;
            continue;
        }
        if (i == n)
            break;
        json_error_t je;
        memset(&je, 0, sizeof(je));
        if (s[i] == '{' || s[i] == '[') {
            json_t *v = json_loadb(s + i, n - i, JSON_DISABLE_EOF_CHECK, &je);
            bool ok = v && calls_from_value(v, tools, calls);
            json_decref(v);
            if (!ok || je.position <= 0)
                goto fail;
            i += (size_t)je.position;
            continue;
        }
        if (f != EBB_TOOL_MISTRAL)
            goto fail;
        /* name[ARGS]{...}: the function name, then its arguments object. */
        size_t b = i;
        while (i < n && s[i] != '[' && s[i] != '{' && !is_ws(s[i]))
            i++;
        if (i == b || i - b > 256)
            goto fail;
        json_t *name = json_stringn(s + b, i - b);
        if (n - i >= 6 && !memcmp(s + i, "[ARGS]", 6))
            i += 6;
        json_t *args =
            i < n && s[i] == '{' ? json_loadb(s + i, n - i, JSON_DISABLE_EOF_CHECK, &je) : NULL;
        json_t *obj = name && args ? json_pack("{sOsO}", "name", name, "arguments", args) : NULL;
        bool ok = obj && call_from_json(obj, tools, calls);
        json_decref(obj);
        json_decref(args);
        json_decref(name);
        if (!ok || je.position <= 0)
            goto fail;
        i += (size_t)je.position;
    }
    if (json_array_size(calls))
        return calls;
fail:
    json_decref(calls);
    return NULL;
}

/* ---- the stream parser --------------------------------------------------------------------- */

enum st {
    ST_TEXT, /* content, watching for the opening marker */
    ST_CALL, /* inside markup, waiting for its end */
    ST_JSON, /* the answer began with '{' or '[': decided at the end */
};

struct ebb_tool_stream {
    struct ebb_tool_parser_opts o;
    const char *open, *close; /* the format's markers; close NULL: the markup runs to the end */
    enum st st;
    bool at_start;   /* only whitespace so far (held) */
    bool after_call; /* whitespace right after a call is dropped */
    struct tbuf buf; /* undecided text */
    size_t scan;     /* ST_CALL: bytes of buf already searched for close */
    size_t n_calls;
    uint64_t rng;
};

ebb_err ebb_tool_stream_new(const struct ebb_tool_parser_opts *o, struct ebb_tool_stream **out)
{
    static uint64_t counter;
    struct ebb_tool_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return EBB_ENOMEM;
    s->o = *o;
    if (!s->o.id_prefix)
        s->o.id_prefix = "call_";
    switch (o->format) {
    case EBB_TOOL_LLAMA3:
        s->open = "<|python_tag|>";
        break;
    case EBB_TOOL_MISTRAL:
        s->open = "[TOOL_CALLS]";
        break;
    default:
        s->open = "<tool_call>";
        s->close = "</tool_call>";
    }
    s->at_start = true;
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    s->rng = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
             ((uint64_t)(uintptr_t)s << 16) ^ (++counter * 0x9E3779B97F4A7C15ull);
    if (!s->rng)
        s->rng = 1;
    *out = s;
    return EBB_OK;
}

void ebb_tool_stream_free(struct ebb_tool_stream *s)
{
    if (!s)
        return;
    free(s->buf.p);
    free(s);
}

size_t ebb_tool_stream_n_calls(const struct ebb_tool_stream *s)
{
    return s->n_calls;
}

static ebb_err emit_text(const char *t, size_t n, ebb_tool_ev_cb cb, void *ud)
{
    if (!n)
        return EBB_OK;
    struct ebb_tool_ev ev = {.kind = EBB_TOOL_EV_CONTENT, .text = t, .len = n};
    return cb(ud, &ev);
}

static ebb_err emit_calls(struct ebb_tool_stream *s, json_t *calls, ebb_tool_ev_cb cb, void *ud)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    ebb_err rc = EBB_OK;
    for (size_t i = 0; !rc && i < json_array_size(calls); i++) {
        if (s->o.max_calls && s->n_calls >= s->o.max_calls)
            break;
        json_t *pair = json_array_get(calls, i);
        char id[48];
        size_t k = (size_t)snprintf(id, sizeof(id), "%.20s", s->o.id_prefix), end = k + 24;
        for (; k < end; k++) {
            s->rng ^= s->rng << 13;
            s->rng ^= s->rng >> 7;
            s->rng ^= s->rng << 17;
            id[k] = abc[(s->rng * 0x2545F4914F6CDD1Dull >> 40) % 62];
        }
        id[k] = 0;
        const char *args = json_string_value(json_array_get(pair, 1));
        struct ebb_tool_ev b = {.kind = EBB_TOOL_EV_CALL_BEGIN,
                                .index = s->n_calls,
                                .id = id,
                                .name = json_string_value(json_array_get(pair, 0))};
        struct ebb_tool_ev a = {
            .kind = EBB_TOOL_EV_CALL_ARGS, .index = s->n_calls, .text = args, .len = strlen(args)};
        s->n_calls++;
        rc = cb(ud, &b);
        if (!rc)
            rc = cb(ud, &a);
    }
    return rc;
}

/* Decides markup: calls if it decodes to calls of offered tools, else the raw text (open marker
 * included) as content. */
static ebb_err decide(struct ebb_tool_stream *s, const char *inner, size_t n, const char *raw_open,
                      const char *raw_close, bool generic, ebb_tool_ev_cb cb, void *ud)
{
    /* Every format checks the names: a call to a tool that was not offered (a model that
     * invents get_weather_args next to get_weather) is text, never a call the client would
     * have to dispatch. */
    json_t *calls = decode_calls(inner, n, generic ? EBB_TOOL_HERMES : s->o.format, s->o.tools);
    ebb_err rc = EBB_OK;
    if (calls) {
        rc = emit_calls(s, calls, cb, ud);
        json_decref(calls);
        s->after_call = true;
        return rc;
    }
    s->after_call = false;
    if (raw_open)
        rc = emit_text(raw_open, strlen(raw_open), cb, ud);
    if (!rc)
        rc = emit_text(inner, n, cb, ud);
    if (!rc && raw_close)
        rc = emit_text(raw_close, strlen(raw_close), cb, ud);
    return rc;
}

/* ST_TEXT at the start of the answer or after a call: whitespace is held (or dropped after a
 * call) until the first other character shows whether a bare JSON call begins. Returns true
 * when the caller must wait for more text. */
static bool text_lead(struct ebb_tool_stream *s, bool final)
{
    size_t i = 0;
    while (i < s->buf.n && is_ws(s->buf.p[i]))
        i++;
    if (i == s->buf.n)
        return !final;
    const char *rest = s->buf.p + i;
    size_t rn = s->buf.n - i, ol = strlen(s->open);
    if (rn < ol && !memcmp(rest, s->open, rn) && !final)
        return true;
    bool marker = rn >= ol && !memcmp(rest, s->open, ol);
    if (s->at_start && !marker && (rest[0] == '{' || rest[0] == '[')) {
        s->st = ST_JSON;
        return false;
    }
    if (s->after_call)
        tb_consume(&s->buf, i);
    s->at_start = s->after_call = false;
    return false;
}

static ebb_err run(struct ebb_tool_stream *s, bool final, ebb_tool_ev_cb cb, void *ud)
{
    ebb_err rc = EBB_OK;
    for (;;) {
        if (s->st == ST_TEXT) {
            if ((s->at_start || s->after_call) && text_lead(s, final))
                return EBB_OK;
            if (s->st != ST_TEXT)
                continue;
            if (s->after_call && final) { /* only whitespace followed the last call */
                s->buf.n = 0;
                return EBB_OK;
            }
            const char *m = find(s->buf.p ? s->buf.p : "", s->buf.n, s->open, 0);
            if (m) {
                size_t at = (size_t)(m - s->buf.p);
                if ((rc = emit_text(s->buf.p, at, cb, ud)))
                    return rc;
                tb_consume(&s->buf, at + strlen(s->open));
                s->st = ST_CALL;
                s->scan = 0;
                continue;
            }
            size_t keep = final ? 0 : partial_suffix(s->buf.p, s->buf.n, s->open);
            rc = emit_text(s->buf.p, s->buf.n - keep, cb, ud);
            tb_consume(&s->buf, s->buf.n - keep);
            return rc;
        }
        if (s->st == ST_CALL) {
            const char *c = s->close ? find(s->buf.p, s->buf.n, s->close, s->scan) : NULL;
            if (!c && !final) {
                size_t cl = s->close ? strlen(s->close) : 0;
                s->scan = s->buf.n >= cl ? s->buf.n - cl + 1 : 0;
                return EBB_OK;
            }
            size_t n = c ? (size_t)(c - s->buf.p) : s->buf.n;
            rc =
                decide(s, s->buf.p ? s->buf.p : "", n, s->open, c ? s->close : NULL, false, cb, ud);
            tb_consume(&s->buf, c ? n + strlen(s->close) : n);
            s->st = ST_TEXT;
            if (rc || final)
                return rc;
            continue;
        }
        /* ST_JSON */
        if (!final)
            return EBB_OK;
        rc = decide(s, s->buf.p, s->buf.n, NULL, NULL, true, cb, ud);
        s->buf.n = 0;
        s->st = ST_TEXT;
        return rc;
    }
}

ebb_err ebb_tool_stream_feed(struct ebb_tool_stream *s, const char *text, size_t n,
                             ebb_tool_ev_cb cb, void *ud)
{
    ebb_err rc = tb_put(&s->buf, text, n);
    return rc ? rc : run(s, false, cb, ud);
}

ebb_err ebb_tool_stream_finish(struct ebb_tool_stream *s, ebb_tool_ev_cb cb, void *ud)
{
    if (!s->buf.p && tb_put(&s->buf, "", 0))
        return EBB_ENOMEM;
    return run(s, true, cb, ud);
}

/* ---- the whole text at once ------------------------------------------------------------------ */

struct collect {
    struct tbuf content;
    struct ebb_tool_result *r;
    size_t cap;
};

static ebb_err collect_ev(void *ud, const struct ebb_tool_ev *ev)
{
    struct collect *c = ud;
    struct ebb_tool_result *r = c->r;
    if (ev->kind == EBB_TOOL_EV_CONTENT)
        return tb_put(&c->content, ev->text, ev->len);
    if (ev->kind == EBB_TOOL_EV_CALL_BEGIN) {
        if (r->n_calls == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 4;
            struct ebb_tool_call *p = realloc(r->calls, cap * sizeof(*p));
            if (!p)
                return EBB_ENOMEM;
            r->calls = p;
            c->cap = cap;
        }
        struct ebb_tool_call *k = &r->calls[r->n_calls];
        memset(k, 0, sizeof(*k));
        snprintf(k->id, sizeof(k->id), "%s", ev->id);
        k->name = strdup(ev->name);
        r->n_calls++;
        return k->name ? EBB_OK : EBB_ENOMEM;
    }
    struct ebb_tool_call *k = &r->calls[ev->index];
    size_t old = k->arguments ? strlen(k->arguments) : 0;
    char *p = realloc(k->arguments, old + ev->len + 1);
    if (!p)
        return EBB_ENOMEM;
    memcpy(p + old, ev->text, ev->len);
    p[old + ev->len] = 0;
    k->arguments = p;
    return EBB_OK;
}

ebb_err ebb_tools_parse(const struct ebb_tool_parser_opts *o, const char *text, size_t n,
                        struct ebb_tool_result *out)
{
    struct ebb_tool_result r = {0};
    struct collect c = {.r = &r};
    struct ebb_tool_stream *s = NULL;
    ebb_err rc = ebb_tool_stream_new(o, &s);
    if (!rc)
        rc = ebb_tool_stream_feed(s, text, n, collect_ev, &c);
    if (!rc)
        rc = ebb_tool_stream_finish(s, collect_ev, &c);
    if (!rc)
        rc = tb_put(&c.content, "", 0);
    ebb_tool_stream_free(s);
    if (rc) {
        free(c.content.p);
        ebb_tool_result_fini(&r);
        return rc;
    }
    char *p = c.content.p;
    size_t len = c.content.n;
    if (r.n_calls) {
        size_t b = 0;
        while (b < len && is_ws(p[b]))
            b++;
        while (len > b && is_ws(p[len - 1]))
            len--;
        memmove(p, p + b, len - b);
        len -= b;
        p[len] = 0;
        if (!len) {
            free(p);
            p = NULL;
        }
    }
    r.content = p;
    r.content_len = len;
    *out = r;
    return EBB_OK;
}

void ebb_tool_result_fini(struct ebb_tool_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    free(r->content);
    memset(r, 0, sizeof(*r));
}
