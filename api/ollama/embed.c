/* /api/embed and the legacy /api/embeddings: the input becomes an OpenAI embeddings request run
 * by api/openai/embeddings.c, answered in Ollama's shape through its writer hook: /api/embed
 * gives {"model", "embeddings": [[...]], "total_duration", "load_duration",
 * "prompt_eval_count"} of unit-length vectors, /api/embeddings {"embedding": [...]} of the raw
 * mean-pooled vector, as ollama does. */
#include "ollama-int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_row(struct ebb__abuf *b, const float *v, uint32_t dims)
{
    ebb__abuf_puts(b, "[");
    for (uint32_t k = 0; k < dims; k++) /* %.9g: float32 round-trips exactly */
        ebb__abuf_printf(b, "%s%.9g", k ? "," : "", isfinite(v[k]) ? (double)v[k] : 0.0);
    ebb__abuf_puts(b, "]");
}

/* The request's model name, echoed as ollama does (the request was checked before). */
static char *model_json(struct ebb__req *r)
{
    json_t *o = json_loadb(r->body.p ? r->body.p : "", r->body.n, 0, NULL);
    char *s = json_dumps(json_object_get(o, "model"), JSON_ENCODE_ANY);
    json_decref(o);
    return s;
}

static void write_embed(struct ebb__req *r, float *rows, uint32_t n_in, uint32_t stride,
                        uint32_t dims, uint32_t n_prompt)
{
    struct ebb__abuf b = {0};
    char *model = model_json(r);
    ebb__abuf_printf(&b, "{\"model\":%s,\"embeddings\":[", model ? model : "\"\"");
    for (uint32_t i = 0; i < n_in; i++) {
        float *v = rows + (size_t)i * stride;
        ebb__embd_normalize(v, dims);
        if (i)
            ebb__abuf_puts(&b, ",");
        put_row(&b, v, dims);
    }
    ebb__abuf_printf(&b, "],\"total_duration\":%lld,\"load_duration\":0,\"prompt_eval_count\":%u}",
                     (long long)((ebb__now() - r->t_start) * 1e9), n_prompt);
    free(model);
    if (b.oom)
        ebb__reply_error(r, 500, "out of memory", NULL, NULL);
    else
        ebb__reply(r, 200, "application/json", b.p, b.n);
    ebb__abuf_fini(&b);
}

static void write_legacy(struct ebb__req *r, float *rows, uint32_t n_in, uint32_t stride,
                         uint32_t dims, uint32_t n_prompt)
{
    (void)n_in;
    (void)stride;
    (void)n_prompt;
    struct ebb__abuf b = {0};
    ebb__abuf_puts(&b, "{\"embedding\":");
    put_row(&b, rows, dims);
    ebb__abuf_puts(&b, "}");
    if (b.oom)
        ebb__reply_error(r, 500, "out of memory", NULL, NULL);
    else
        ebb__reply(r, 200, "application/json", b.p, b.n);
    ebb__abuf_fini(&b);
}

void ebb__ollama_embed_start(struct ebb__req *r, bool legacy)
{
    if (!ebb__gen_ready(r))
        return;
    json_error_t je;
    json_t *o = json_loadb(r->body.p ? r->body.p : "", r->body.n, JSON_REJECT_DUPLICATES, &je);
    json_t *doc = json_object();
    char msg[300];
    if (!json_is_object(o)) {
        snprintf(msg, sizeof(msg), "the body must be a JSON object%s%s", o ? "" : ": ",
                 o ? "" : je.text);
        ebb__reply_error(r, 400, msg, NULL, NULL);
        goto out;
    }
    if (!ebb__ollama_model_ok(r, o))
        goto out;
    if (!ebb__ollama_keep_alive_ok(json_object_get(o, "keep_alive"), msg, sizeof(msg))) {
        ebb__reply_error(r, 400, msg, "keep_alive", NULL);
        goto out;
    }
    json_t *opts = json_object_get(o, "options");
    if (opts && !json_is_null(opts) && !json_is_object(opts)) {
        ebb__reply_error(r, 400, "options must be an object", "options", NULL);
        goto out;
    }
    /* truncate (default true in ollama): ebb never shortens an input; one longer than the
     * context is refused with a 400 whatever truncate says. */
    json_t *tr = json_object_get(o, "truncate");
    if (tr && !json_is_null(tr) && !json_is_boolean(tr)) {
        ebb__reply_error(r, 400, "truncate must be a boolean", "truncate", NULL);
        goto out;
    }
    json_t *in = json_object_get(o, legacy ? "prompt" : "input");
    if (legacy && !json_is_string(in)) {
        ebb__reply_error(r, 400, "prompt must be a string", "prompt", NULL);
        goto out;
    }
    if (!legacy && !json_is_string(in) && !json_is_array(in)) {
        ebb__reply_error(r, 400, "input must be a string or an array of strings", "input", NULL);
        goto out;
    }
    for (size_t i = 0; json_is_array(in) && i < json_array_size(in); i++) {
        if (!json_is_string(json_array_get(in, i))) {
            ebb__reply_error(r, 400, "input must be a string or an array of strings", "input",
                             NULL);
            goto out;
        }
    }
    json_object_set(doc, "input", in);
    json_t *dims = json_object_get(o, "dimensions");
    if (!legacy && dims && !json_is_null(dims))
        json_object_set(doc, "dimensions", dims);
    ebb__embeddings_run(r, doc, legacy ? write_legacy : write_embed);
out:
    json_decref(doc);
    json_decref(o);
}
