/* Ollama's API: which path is whose, the model-name rule, and the small endpoints that describe
 * the one loaded model (/api/tags, /api/show, /api/ps, /api/version) or refuse to manage models
 * (/api/push, /api/create, /api/copy, /api/delete). chat.c and embed.c hold the generating
 * endpoints, pull.c /api/pull. */
#include "ollama.h"
#include "ollama-int.h"
#include "gguf/gguf.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* The ollama release whose API this room follows, for clients that check /api/version before
 * using a feature (structured outputs, tools, thinking). */
#define OLLAMA_API_VERSION "0.12.0"

/* Model management: /api/pull fetches from Hugging Face (pull.c); the others refuse, as ebb
 * never builds, pushes, copies or deletes models through the API. */
static const char *const refused[] = {"/api/pull", "/api/push", "/api/create", "/api/copy",
                                      "/api/delete"};

bool ebb__ollama_post_path(const char *url)
{
    if (!strcmp(url, "/api/show"))
        return true;
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        if (!strcmp(url, refused[i]))
            return true;
    return false;
}

bool ebb__ollama_get_path(const char *url)
{
    return !strcmp(url, "/api/tags") || !strcmp(url, "/api/ps") || !strcmp(url, "/api/version");
}

/* ---- describing the model ----------------------------------------------------------------------
 */

static json_t *details(const struct ebb__served *a)
{
    const char *arch = a->model ? ebb_model_arch(a->model) : a->family;
    return json_pack("{sssssss[s]ssss}", "parent_model", "", "format", "gguf", "family", arch,
                     "families", arch, "parameter_size", "", "quantization_level", "");
}

static uint64_t model_size(const struct ebb__served *a)
{
    return a->model ? ebb_gguf_file_size(ebb_model_gguf(a->model)) : a->file_size;
}

/* One entry of /api/tags (ps: of /api/ps, with its expiry and context). */
static json_t *model_entry(const struct ebb__served *a, bool ps)
{
    char name[300], when[64];
    snprintf(name, sizeof(name), "%s:latest", a->id);
    json_t *m = json_object();
    json_object_set_new(m, "name", json_string(name));
    json_object_set_new(m, "model", json_string(name));
    json_object_set_new(m, "size", json_integer((json_int_t)model_size(a)));
    json_object_set_new(m, "digest", json_string(""));
    json_object_set_new(m, "details", details(a));
    if (ps) {
        /* A model that stays (pinned, keep_alive -1): the far future ollama shows for it. */
        char exp[64] = "2318-01-01T00:00:00Z";
        if (!a->pin && a->keep_alive >= 0) {
            struct tm tm;
            time_t t = (time_t)(ebb__unix_now() + a->keep_alive -
                                (a->n_live ? 0 : ebb__now() - a->last_used));
            gmtime_r(&t, &tm);
            strftime(exp, sizeof(exp), "%Y-%m-%dT%H:%M:%SZ", &tm);
        }
        json_object_set_new(m, "expires_at", json_string(exp));
        json_object_set_new(m, "size_vram", json_integer((json_int_t)model_size(a)));
        json_object_set_new(m, "context_length",
                            json_integer(a->model ? ebb_model_n_ctx(a->model) : 0));
    } else {
        struct tm tm;
        time_t t = (time_t)a->created;
        gmtime_r(&t, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
        json_object_set_new(m, "modified_at", json_string(when));
    }
    return m;
}

static void tags(struct ebb__req *r, bool ps)
{
    json_t *list = json_array();
    struct ebb_api *a = r->api;
    /* /api/ps: the loaded models; /api/tags: every model of the catalogue (outside catalogue
     * mode, the one model once it is loaded). */
    for (size_t i = 0; i < a->n_models; i++) {
        const struct ebb__served *sv = a->models[i];
        if (ebb__served_listed(sv) && ((ps || !a->catalogue) ? sv->ready && sv->model : true))
            json_array_append_new(list, model_entry(sv, ps));
    }
    ebb__reply_json(r, 200, json_pack("{so}", "models", list));
}

/* /api/show: the model's details, its chat template, what it can do and the GGUF facts
 * ollama's clients read (architecture, context and embedding lengths). The thinking and insert
 * capabilities are known only for a loaded model. */
static void show(struct ebb__req *r)
{
    struct ebb__served *a = r->sv;
    json_error_t je;
    json_t *o = json_loadb(r->body.p ? r->body.p : "", r->body.n, 0, &je);
    if (!json_is_object(o)) {
        ebb__reply_error(r, 400, "the body must be a JSON object", NULL, NULL);
        goto out;
    }
    /* The older clients send "name". */
    if (!json_object_get(o, "model") && json_is_string(json_object_get(o, "name")))
        json_object_set(o, "model", json_object_get(o, "name"));
    /* Several models: one that is not loaded is described from its file's header (clients ask
     * /api/show of every model they list; loading each for that would evict the others). */
    struct ebb_gguf *own = NULL;
    if (r->api->catalogue && !a->ready) {
        if (!ebb__ollama_model_ok(r, o))
            goto out;
        if (ebb_gguf_open(a->path, &own, NULL)) {
            ebb__reply_error(r, 500, "cannot read the model file", NULL, NULL);
            goto out;
        }
    } else if (!ebb__gen_ready(r) || !ebb__ollama_model_ok(r, o)) {
        goto out;
    }
    const char *arch = own ? a->family : ebb_model_arch(a->model);
    const struct ebb_gguf *gg = own ? own : ebb_model_gguf(a->model);
    struct ebb_str src = {0};
    json_t *tmpl = ebb_gguf_get_str(gg, "tokenizer.chat_template", &src) == EBB_OK
                       ? ebb__json_text(src.p, (size_t)src.n)
                       : json_string("");
    json_t *info = json_object();
    char key[160];
    json_object_set_new(info, "general.architecture", json_string(arch));
    snprintf(key, sizeof(key), "%s.context_length", arch);
    json_object_set_new(info, key, json_integer(own ? a->n_ctx_train : ebb_model_n_ctx(a->model)));
    snprintf(key, sizeof(key), "%s.embedding_length", arch);
    uint32_t n_embd = 0;
    if (own)
        ebb_gguf_get_u32(own, key, &n_embd);
    json_object_set_new(info, key, json_integer(own ? n_embd : ebb_model_n_embd(a->model)));
    ebb_gguf_close(own);
    /* tools always: a template that does not render tools gets ebb's fallback description
     * (api/openai/tools-render.c) and the hermes call format. */
    json_t *caps = json_pack("[sss]", "completion", "embedding", "tools");
    if (a->tmpl.has_thinking)
        json_array_append_new(caps, json_string("thinking"));
    if (a->fim_pre >= 0 && a->fim_suf >= 0 && a->fim_mid >= 0)
        json_array_append_new(caps, json_string("insert"));
    json_t *res = json_object();
    json_object_set_new(res, "modelfile", json_string(""));
    json_object_set_new(res, "parameters", json_string(""));
    json_object_set_new(res, "template", tmpl);
    json_object_set_new(res, "details", details(a));
    json_object_set_new(res, "model_info", info);
    json_object_set_new(res, "capabilities", caps);
    json_object_set_new(res, "modified_at", json_string("1970-01-01T00:00:00Z"));
    ebb__reply_json(r, 200, res);
out:
    json_decref(o);
}

static void refuse(struct ebb__req *r)
{
    char msg[400];
    snprintf(msg, sizeof(msg),
             "%.40s is not supported: ebb does not push, create, copy or delete models through "
             "the API (put GGUF files in the models directory, or /api/pull them from Hugging "
             "Face)",
             r->path);
    ebb__reply_error(r, 501, msg, NULL, NULL);
}

void ebb__ollama_handle(struct ebb__req *r)
{
    if (r->pull_done) {
        ebb__ollama_pull_resumed(r); /* a pull not streamed: its answer */
        return;
    }
    if (r->pull) { /* resumed while the pull runs: the client went away, or spurious */
        if (r->disconnected)
            ebb__reply_error(r, 503, "the client went away; the pull goes on", NULL, NULL);
        else
            ebb__suspend(r);
        return;
    }
    if (r->gen) {
        ebb__gen_handle(r); /* resumed: the body once the engine is done */
        return;
    }
    switch (r->ep) {
    case EBB__EP_OLLAMA_CHAT:
    case EBB__EP_OLLAMA_GENERATE:
        ebb__ollama_chat_start(r, r->ep == EBB__EP_OLLAMA_GENERATE);
        return;
    case EBB__EP_OLLAMA_EMBED:
        ebb__ollama_embed_start(r, !strcmp(r->path, "/api/embeddings"));
        return;
    default:
        break;
    }
    if (!strcmp(r->path, "/api/tags") || !strcmp(r->path, "/api/ps"))
        tags(r, !strcmp(r->path, "/api/ps"));
    else if (!strcmp(r->path, "/api/version"))
        ebb__reply_json(r, 200, json_pack("{ss}", "version", OLLAMA_API_VERSION));
    else if (!strcmp(r->path, "/api/show"))
        show(r);
    else if (!strcmp(r->path, "/api/pull"))
        ebb__ollama_pull_start(r);
    else
        refuse(r);
}
