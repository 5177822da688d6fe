/* /v1/embeddings (OpenAI's embeddings endpoint) from whatever model is loaded. The inputs are
 * tokenized (or taken as token ids) and submitted as one embedding job (runtime/sched), which
 * evaluates each input from position 0 of a slot in prefill chunks and mean-pools the hidden
 * states after the model's final norm. The answer truncates each vector to `dimensions`, scales
 * it to unit length, and writes it as a float array or as base64 of little-endian float32. */
#include "openai.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

#define EMBD_MAX_INPUTS 2048 /* OpenAI's limit on the number of inputs */

/* One request's state beside its struct ebb__gen (ext). */
struct embd {
    float *out; /* (n_in, n_embd) the engine's mean-pooled rows */
    uint32_t n_in, n_embd, dims;
    bool base64;
    ebb__embd_write_cb write; /* another wire format's answer, NULL: OpenAI's */
};

static void embd_free(void *ext)
{
    struct embd *e = ext;
    if (!e)
        return;
    free(e->out);
    free(e);
}

void ebb__embd_normalize(float *v, uint32_t n)
{
    double ss = 0;
    for (uint32_t i = 0; i < n; i++)
        ss += (double)v[i] * v[i];
    if (ss <= 0)
        return; /* a zero vector has no direction; it stays zero */
    float inv = (float)(1.0 / sqrt(ss));
    for (uint32_t i = 0; i < n; i++)
        v[i] *= inv;
}

size_t ebb__base64_f32(const float *v, uint32_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nb = (size_t)n * 4, w = 0;
    uint8_t b[3];
    for (size_t i = 0; i < nb; i += 3) {
        size_t k = nb - i < 3 ? nb - i : 3;
        for (size_t j = 0; j < 3; j++) {
            size_t at = i + j;
            if (j >= k) {
                b[j] = 0;
                continue;
            }
            uint32_t bits;
            memcpy(&bits, &v[at / 4], 4);
            b[j] = (uint8_t)(bits >> (8 * (at % 4))); /* little-endian on every host */
        }
        uint32_t x = (uint32_t)b[0] << 16 | (uint32_t)b[1] << 8 | b[2];
        out[w++] = tab[x >> 18 & 63];
        out[w++] = tab[x >> 12 & 63];
        out[w++] = k > 1 ? tab[x >> 6 & 63] : '=';
        out[w++] = k > 2 ? tab[x & 63] : '=';
    }
    out[w] = 0;
    return w;
}

/* ---- request ------------------------------------------------------------------------------ */

struct parsed {
    int32_t *ids; /* (n_ids) every input's tokens, end to end */
    size_t n_ids, cap_ids;
    uint32_t *lens; /* (n_in) */
    uint32_t n_in;
};

/* Room for n more ids. */
static bool grow(struct parsed *p, size_t n)
{
    if (p->n_ids + n <= p->cap_ids)
        return true;
    size_t cap = p->cap_ids ? p->cap_ids : 256;
    while (cap < p->n_ids + n)
        cap *= 2;
    int32_t *q = realloc(p->ids, sizeof(int32_t) * cap);
    if (!q)
        return false;
    p->ids = q;
    p->cap_ids = cap;
    return true;
}

static bool push_ids(struct parsed *p, const int32_t *ids, size_t n)
{
    if (!grow(p, n))
        return false;
    if (n)
        memcpy(p->ids + p->n_ids, ids, sizeof(int32_t) * n);
    p->n_ids += n;
    return true;
}

/* Appends text's tokens (BOS/EOS as the model's metadata asks). */
static ebb_err push_text(struct parsed *p, const struct ebb_tokenizer *tok, const char *s, size_t n)
{
    size_t need = 0, got = 0;
    ebb_err rc = ebb_tokenizer_encode(tok, s, n, EBB_TOK_ADD_SPECIAL, NULL, 0, &need);
    if (rc && rc != EBB_ERANGE)
        return rc;
    size_t at = p->n_ids;
    if (!grow(p, need + 1))
        return EBB_ENOMEM;
    rc = ebb_tokenizer_encode(tok, s, n, EBB_TOK_ADD_SPECIAL, p->ids + at, p->cap_ids - at, &got);
    if (!rc)
        p->n_ids = at + got;
    return rc;
}

/* One input: a string or an array of token ids. Returns 0 or the HTTP status it replied. */
static unsigned add_input(struct ebb__req *r, struct parsed *p, json_t *v, size_t idx, bool list)
{
    const struct ebb_tokenizer *tok = ebb_model_tokenizer(r->sv->model);
    uint32_t n_vocab = ebb_tokenizer_n_vocab(tok), n_ctx = ebb_model_n_ctx(r->sv->model);
    char where[32] = "'input'", msg[420];
    if (list)
        snprintf(where, sizeof(where), "'input'[%zu]", idx);
    size_t before = p->n_ids;
    if (json_is_string(v)) {
        if (!json_string_length(v)) {
            snprintf(msg, sizeof(msg), "%s is an empty string", where);
            ebb__reply_error(r, 400, msg, "input", NULL);
            return 400;
        }
        ebb_err rc = push_text(p, tok, json_string_value(v), json_string_length(v));
        if (rc) {
            ebb__reply_error(r, 500, ebb_err_str(rc), NULL, "internal_error");
            return 500;
        }
    } else if (json_is_array(v) && json_array_size(v)) {
        /* Token ids are the loaded model's: an id its vocabulary does not have is refused,
         * naming the first, rather than embedded as some other token. Ids another tokenizer made
         * (LangChain's OpenAIEmbeddings sends tiktoken's cl100k ids unless told
         * check_embedding_ctx_length=False) mostly fail here; docs/API.md says more. */
        uint32_t nm = ebb_model_n_vocab(r->sv->model);
        if (nm && nm < n_vocab)
            n_vocab = nm;
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *t = json_array_get(v, i);
            if (!json_is_integer(t)) {
                snprintf(msg, sizeof(msg), "%s[%zu] is not a token id (an integer)", where, i);
                ebb__reply_error(r, 400, msg, "input", NULL);
                return 400;
            }
            json_int_t id = json_integer_value(t);
            if (id < 0 || id >= (json_int_t)n_vocab) {
                snprintf(msg, sizeof(msg),
                         "%s[%zu]: token id %lld is not in this model's vocabulary (ids 0 to %u); "
                         "token ids must come from the loaded model's tokenizer (/tokenize), or "
                         "send text (LangChain's OpenAIEmbeddings: "
                         "check_embedding_ctx_length=False)",
                         where, i, (long long)id, n_vocab - 1);
                ebb__reply_error(r, 400, msg, "input", NULL);
                return 400;
            }
            int32_t one = (int32_t)id;
            if (!push_ids(p, &one, 1)) {
                ebb__reply_error(r, 500, "out of memory", NULL, "internal_error");
                return 500;
            }
        }
    } else {
        snprintf(msg, sizeof(msg), "%s must be a non-empty string or array of token ids", where);
        ebb__reply_error(r, 400, msg, "input", NULL);
        return 400;
    }
    size_t n = p->n_ids - before;
    if (n == 0 || n > n_ctx) {
        snprintf(msg, sizeof(msg),
                 "%s has %zu tokens; this model's maximum context length is %u tokens", where, n,
                 n_ctx);
        ebb__reply_error(r, 400, msg, "input", n ? "context_length_exceeded" : NULL);
        return 400;
    }
    p->lens[p->n_in++] = (uint32_t)n;
    return 0;
}

/* `input`: a string, an array of token ids, or an array of either (one vector each). */
static unsigned parse_input(struct ebb__req *r, json_t *in, struct parsed *p)
{
    if (!in || json_is_null(in)) {
        ebb__reply_error(r, 400, "'input' is required", "input", NULL);
        return 400;
    }
    json_t *first = json_array_get(in, 0);
    bool list = json_is_array(in) && (json_is_string(first) || json_is_array(first));
    size_t n = list ? json_array_size(in) : 1;
    if (json_is_array(in) && json_array_size(in) == 0) {
        ebb__reply_error(r, 400, "'input' is an empty array", "input", NULL);
        return 400;
    }
    if (n > EMBD_MAX_INPUTS) {
        char msg[128];
        snprintf(msg, sizeof(msg), "'input' has %zu items; at most %d are allowed", n,
                 EMBD_MAX_INPUTS);
        ebb__reply_error(r, 400, msg, "input", NULL);
        return 400;
    }
    p->lens = malloc(sizeof(uint32_t) * n);
    if (!p->lens) {
        ebb__reply_error(r, 500, "out of memory", NULL, "internal_error");
        return 500;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned st = add_input(r, p, list ? json_array_get(in, i) : in, i, list);
        if (st)
            return st;
    }
    if (p->n_ids > UINT32_MAX / 2) {
        ebb__reply_error(r, 400, "'input' has too many tokens in all", "input", NULL);
        return 400;
    }
    return 0;
}

/* `model`, `encoding_format` and `dimensions` into e. Returns 0 or the HTTP status replied. */
static unsigned parse_options(struct ebb__req *r, json_t *o, struct embd *e)
{
    char msg[400];
    json_t *m = json_object_get(o, "model");
    if (m && !json_is_null(m) && !json_is_string(m)) {
        ebb__reply_error(r, 400, "'model' must be a string", "model", NULL);
        return 400;
    }
    if (json_is_string(m) && !ebb__served_named(r, json_string_value(m))) {
        ebb__served_unknown(r, json_string_value(m), false);
        return 404;
    }
    json_t *f = json_object_get(o, "encoding_format");
    if (f && !json_is_null(f)) {
        const char *fs = json_is_string(f) ? json_string_value(f) : "";
        if (strcmp(fs, "float") && strcmp(fs, "base64")) {
            ebb__reply_error(r, 400, "'encoding_format' must be 'float' or 'base64'",
                             "encoding_format", NULL);
            return 400;
        }
        e->base64 = !strcmp(fs, "base64");
    }
    e->dims = e->n_embd;
    json_t *d = json_object_get(o, "dimensions");
    if (d && !json_is_null(d)) {
        json_int_t x = json_is_integer(d) ? json_integer_value(d) : 0;
        if (x < 1 || x > (json_int_t)e->n_embd) {
            snprintf(msg, sizeof(msg),
                     "'dimensions' must be an integer from 1 to %u (the width of "
                     "this model's embeddings)",
                     e->n_embd);
            ebb__reply_error(r, 400, msg, "dimensions", NULL);
            return 400;
        }
        e->dims = (uint32_t)x;
    }
    return 0;
}

/* ---- answer ------------------------------------------------------------------------------- */

/* The body: one vector per input, in input order. */
static void embd_body(struct ebb__req *r)
{
    struct ebb__gen *g = r->gen;
    struct embd *e = g->ext;
    const struct ebb_sched_result *res = &g->res;
    if (res->finish == EBB_FINISH_ERROR) {
        ebb__reply_error(r, 500, res->msg[0] ? res->msg : "evaluation failed", NULL,
                         "internal_error");
        return;
    }
    if (res->finish == EBB_FINISH_CANCEL) {
        ebb__reply_error(r, 503, "the request was cancelled (server shutting down)", NULL,
                         "cancelled");
        return;
    }
    if (e->write) {
        e->write(r, e->out, e->n_in, e->n_embd, e->dims, res->n_prompt);
        return;
    }
    struct ebb__abuf b = {0};
    char *b64 = e->base64 ? malloc((size_t)e->dims * 16 / 3 + 8) : NULL;
    if (e->base64 && !b64) {
        ebb__reply_error(r, 500, "out of memory", NULL, "internal_error");
        return;
    }
    ebb__abuf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (uint32_t i = 0; i < e->n_in; i++) {
        float *v = e->out + (size_t)i * e->n_embd;
        ebb__embd_normalize(v, e->dims); /* truncated to dims first: unit length again */
        ebb__abuf_printf(
            &b, "%s{\"object\":\"embedding\",\"index\":%u,\"embedding\":", i ? "," : "", i);
        if (b64) {
            ebb__base64_f32(v, e->dims, b64);
            ebb__abuf_printf(&b, "\"%s\"}", b64);
            continue;
        }
        ebb__abuf_puts(&b, "[");
        for (uint32_t k = 0; k < e->dims; k++) /* %.9g: float32 round-trips exactly */
            ebb__abuf_printf(&b, "%s%.9g", k ? "," : "", isfinite(v[k]) ? (double)v[k] : 0.0);
        ebb__abuf_puts(&b, "]}");
    }
    json_t *model = json_string(r->sv->id);
    char *ms = json_dumps(model, JSON_ENCODE_ANY);
    json_decref(model);
    ebb__abuf_printf(&b, "],\"model\":%s,\"usage\":{\"prompt_tokens\":%u,\"total_tokens\":%u}}",
                     ms ? ms : "\"\"", res->n_prompt, res->n_prompt);
    free(ms);
    free(b64);
    if (b.oom)
        ebb__reply_error(r, 500, "out of memory", NULL, "internal_error");
    else
        ebb__reply(r, 200, "application/json", b.p, b.n);
    ebb__abuf_fini(&b);
}

static const struct ebb__gen_fmt embd_fmt = {.body = embd_body, .free = embd_free};

/* Parses doc (borrowed, NULL for a body that was not JSON: je says why) and submits the
 * request; write as ebb__embeddings_run. */
static void embd_start_doc(struct ebb__req *r, json_t *doc, const json_error_t *je,
                           ebb__embd_write_cb write)
{
    struct parsed p = {0};
    struct embd *e = calloc(1, sizeof(*e));
    struct ebb__gen *g = ebb__gen_new(1);
    if (!e || !g) {
        ebb__reply_error(r, 500, "out of memory", NULL, "internal_error");
        goto out;
    }
    if (!json_is_object(doc)) {
        char msg[300];
        snprintf(msg, sizeof(msg), "the body must be a JSON object%s%s", doc ? "" : ": ",
                 doc ? "" : je->text);
        ebb__reply_error(r, 400, msg, NULL, NULL);
        goto out;
    }
    e->n_embd = ebb_model_n_embd(r->sv->model);
    e->write = write;
    if (parse_options(r, doc, e) || parse_input(r, json_object_get(doc, "input"), &p))
        goto out;
    e->n_in = p.n_in;
    e->out = malloc(sizeof(float) * e->n_embd * p.n_in);
    if (!e->out) {
        ebb__reply_error(r, 500, "out of memory", NULL, "internal_error");
        goto out;
    }
    g->fmt = &embd_fmt;
    g->ext = e;
    e = NULL;
    snprintf(g->id, sizeof(g->id), "embd-%llx%04x", (unsigned long long)(ebb__unix_now() * 1e3),
             (unsigned)(r->api->metrics.requests[EBB__EP_EMBEDDINGS][0] & 0xffff));
    struct ebb_gen_params gp;
    ebb_gen_params_defaults(&gp);
    gp.n_embed = p.n_in;
    gp.embed_len = p.lens;
    gp.embed_out = ((struct embd *)g->ext)->out;
    ebb__gen_submit(r, g, p.ids, (uint32_t)p.n_ids, &gp);
    g = NULL;
out:
    ebb__gen_free(g);
    embd_free(e);
    free(p.ids);
    free(p.lens);
}

static void embd_start(struct ebb__req *r)
{
    if (!ebb__gen_ready(r))
        return;
    json_error_t je;
    json_t *doc = json_loadb(r->body.p ? r->body.p : "", r->body.n, JSON_REJECT_DUPLICATES, &je);
    embd_start_doc(r, doc, &je, NULL);
    json_decref(doc);
}

void ebb__embeddings_run(struct ebb__req *r, json_t *doc, ebb__embd_write_cb write)
{
    if (!ebb__gen_ready(r))
        return;
    embd_start_doc(r, doc, NULL, write);
}

void ebb__embeddings_handle(struct ebb__req *r)
{
    if (r->gen)
        ebb__gen_handle(r); /* resumed: the body once the engine is done */
    else
        embd_start(r);
}
