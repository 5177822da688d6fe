/* Routing and the checks that come before any handler: Host (DNS rebinding), Origin (CORS),
 * API key, method and body size; the small GET endpoints. */
#include "routes-int.h"
#include "api/anthropic/anthropic.h"
#include "api/ollama/ollama.h"
#include "api/responses/responses.h"
#include "api/openai/openai.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- checks --------------------------------------------------------------------------------- */

/* True if host (a Host header) is one of allowed_hosts: an entry without a port matches the
 * name with any port, one with a port only that port; names compare without case and a
 * trailing dot. "*" matches anything. */
static bool host_is_allowed(const struct ebb_api *a, const char *host)
{
    char h[256];
    snprintf(h, sizeof(h), "%s", host);
    /* The name without its port: "[::1]:8077" -> "[::1]", "ebb.internal:8077" -> "ebb.internal". */
    char *port = h[0] == '[' ? strchr(h, ']') : h;
    port = port ? strchr(port, ':') : NULL;
    size_t name_len = port ? (size_t)(port - h) : strlen(h);
    if (name_len && h[name_len - 1] == '.')
        name_len--;
    for (size_t i = 0; i < a->n_allowed_hosts; i++) {
        const char *e = a->allowed_hosts[i];
        if (!strcmp(e, "*"))
            return true;
        const char *eport = e[0] == '[' ? strchr(e, ']') : e;
        eport = eport ? strchr(eport, ':') : NULL;
        size_t elen = eport ? (size_t)(eport - e) : strlen(e);
        if (elen && e[elen - 1] == '.')
            elen--;
        if (elen != name_len || strncasecmp(e, h, elen))
            continue;
        if (!eport || (port && !strcmp(eport, port)))
            return true;
    }
    return false;
}

static bool host_is_loopback_name(const char *host)
{
    char h[256];
    snprintf(h, sizeof(h), "%s", host);
    /* Strip the port: "[::1]:8077", "localhost:8077". */
    if (h[0] == '[') {
        char *e = strchr(h, ']');
        if (!e)
            return false;
        *e = 0;
        return !strcmp(h + 1, "::1");
    }
    char *colon = strchr(h, ':');
    if (colon)
        *colon = 0;
    size_t n = strlen(h);
    if (n && h[n - 1] == '.') /* "localhost." */
        h[n - 1] = 0;
    if (!strcasecmp(h, "localhost") ||
        (strlen(h) > 10 && !strcasecmp(h + strlen(h) - 10, ".localhost")))
        return true;
    struct in_addr in;
    if (inet_pton(AF_INET, h, &in) == 1)
        return (ntohl(in.s_addr) >> 24) == 127;
    return false;
}

static bool key_equal(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    unsigned char d = na != nb;
    for (size_t i = 0; i < na; i++)
        d |= (unsigned char)a[i] ^ (unsigned char)b[i % (nb ? nb : 1)];
    return d == 0;
}

static bool authorized(struct ebb_api *a, struct MHD_Connection *c)
{
    if (a->n_api_keys == 0)
        return true;
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!key && auth && !strncasecmp(auth, "Bearer ", 7)) {
        key = auth + 7;
        while (*key == ' ')
            key++;
    }
    if (!key)
        return false;
    bool ok = false;
    for (size_t i = 0; i < a->n_api_keys; i++)
        ok |= key_equal(key, a->api_keys[i]);
    return ok;
}

static bool origin_allowed(struct ebb_api *a, const char *origin)
{
    for (size_t i = 0; i < a->n_cors_origins; i++) {
        if (!strcmp(a->cors_origins[i], "*") || !strcasecmp(a->cors_origins[i], origin))
            return true;
    }
    return false;
}

/* Request headers a browser may send cross-origin: the ones the OpenAI clients use. */
static bool header_allowed(const char *h, size_t n)
{
    static const char *const ok[] = {"authorization",
                                     "content-type",
                                     "x-api-key",
                                     "accept",
                                     "openai-organization",
                                     "openai-project",
                                     "openai-beta",
                                     "user-agent",
                                     "anthropic-version",
                                     "anthropic-beta",
                                     "anthropic-dangerous-direct-browser-access"};
    if (n >= 11 && !strncasecmp(h, "x-stainless-", 11))
        return true;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        if (strlen(ok[i]) == n && !strncasecmp(h, ok[i], n))
            return true;
    }
    return false;
}

static void preflight(struct ebb__req *r)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return;
    ebb__add_cors(r, resp);
    if (r->origin[0]) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        const char *req_h =
            MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        char allow[1024] = "Authorization, Content-Type, X-Api-Key";
        size_t w = strlen(allow);
        for (const char *p = req_h; p && *p;) {
            while (*p == ' ' || *p == ',')
                p++;
            const char *e = p;
            while (*e && *e != ',')
                e++;
            size_t n = (size_t)(e - p);
            while (n && p[n - 1] == ' ')
                n--;
            if (n && header_allowed(p, n) && w + n + 3 < sizeof(allow)) {
                memcpy(allow + w, ", ", 2);
                memcpy(allow + w + 2, p, n);
                w += n + 2;
                allow[w] = 0;
            }
            p = e;
        }
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", allow);
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    MHD_add_response_header(resp, "Allow", "GET, POST, OPTIONS");
    MHD_queue_response(r->conn, 204, resp);
    MHD_destroy_response(resp);
    r->answered = true;
    r->status = 204;
}

/* ---- simple endpoints -------------------------------------------------------------------- */

static json_t *model_object(const struct ebb__served *sv)
{
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(sv->id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(sv->created));
    json_object_set_new(m, "owned_by", json_string("ebb"));
    /* ebb's extensions: the catalogue's facts (catalogue mode), and the generation defaults
     * of a loaded model and where each came from. */
    if (sv->api->catalogue) {
        json_t *f = ebb__served_json(sv);
        const char *k;
        json_t *v;
        json_object_del(f, "id");
        json_object_foreach(f, k, v) json_object_set(m, k, v);
        json_decref(f);
    }
    if (sv->ready && sv->model) {
        json_t *ext = ebb_defaults_json(&sv->gen_defaults);
        if (ext)
            json_object_set_new(m, "ebb", ext);
    }
    return m;
}

/* Per replica (data parallel, one per device): its load state, the requests placed on it and
 * its engine's queue, labelled by model and device. */
static void metrics_devices(struct ebb_api *a, struct ebb__abuf *b)
{
    static const char *const help[4] = {
        "ebb_device_ready 1 while the model's replica on the device is loaded.\n"
        "# TYPE ebb_device_ready gauge",
        "ebb_device_requests_total Requests placed on the model's replica on the device.\n"
        "# TYPE ebb_device_requests_total counter",
        "ebb_device_jobs_started_total Jobs the device's engine started for the model.\n"
        "# TYPE ebb_device_jobs_started_total counter",
        "ebb_device_in_flight Jobs queued or running on the device's engine for the model.\n"
        "# TYPE ebb_device_in_flight gauge",
    };
    static const char *const name[4] = {"ebb_device_ready", "ebb_device_requests_total",
                                        "ebb_device_jobs_started_total", "ebb_device_in_flight"};
    for (int m = 0; m < 4; m++) {
        ebb__abuf_printf(b, "# HELP %s\n", help[m]);
        for (size_t i = 0; i < a->n_models; i++) {
            const struct ebb__served *sv = a->models[i];
            for (size_t k = 0; ebb__served_listed(sv) && k < sv->n_rep; k++) {
                const struct ebb__replica *rp = &sv->rep[k];
                struct ebb_sched_stats st = {0};
                if (rp->sched)
                    ebb_sched_stats(rp->sched, &st);
                unsigned long long v =
                    m == 0   ? (unsigned long long)!strcmp(ebb__replica_state(rp), "loaded")
                    : m == 1 ? (unsigned long long)rp->n_placed
                    : m == 2 ? (unsigned long long)st.jobs_started
                             : (unsigned long long)(st.queued + st.active);
                ebb__abuf_printf(b, "%s{model=\"%s\",device=\"%s\"} %llu\n", name[m], sv->id,
                                 ebb__replica_device(rp), v);
            }
        }
    }
}

/* "devices" of /health on several devices: each device and the state of the replicas on it ("ok"
 * when every model loaded there is ready; "loading" or "error" as one of them is). */
static json_t *health_devices(struct ebb_api *a)
{
    json_t *o = json_object();
    const struct ebb__served *d = a->def;
    for (size_t k = 0; k < d->n_rep; k++) {
        const char *state = a->catalogue ? "ok" : "loading";
        for (size_t i = 0; i < a->n_models; i++) {
            const char *rs = ebb__replica_state(&a->models[i]->rep[k]);
            if (!strcmp(rs, "failed"))
                state = "error";
            else if (!strcmp(rs, "loading") && strcmp(state, "error"))
                state = "loading";
            else if (!a->catalogue && !strcmp(rs, "loaded"))
                state = "ok";
        }
        json_object_set_new(o, ebb__replica_device(&d->rep[k]), json_string(state));
    }
    return o;
}

/* /health outside catalogue mode: the one model's state, 503 until it serves. */
static void health_one(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    struct ebb__served *sv = a->def;
    json_t *o = json_object();
    pthread_mutex_lock(&a->mu);
    int st = sv->load_state;
    pthread_mutex_unlock(&a->mu);
    if (sv->n_rep > 1)
        json_object_set_new(o, "devices", health_devices(a));
    if (st == 1 && sv->ready) {
        json_object_set_new(o, "status", json_string("ok"));
        ebb__reply_json(r, 200, o);
    } else if (st < 0 || (st == 1 && sv->load_seen && !sv->ready)) {
        json_object_set_new(o, "status", json_string("error"));
        json_object_set_new(o, "message",
                            ebb__json_text(sv->tmpl_err[0] ? sv->tmpl_err : sv->load_msg,
                                           strlen(sv->tmpl_err[0] ? sv->tmpl_err : sv->load_msg)));
        ebb__reply_json(r, 503, o);
    } else {
        json_object_set_new(o, "status", json_string("loading"));
        ebb__reply_json(r, 503, o);
    }
}

/* {"object":"list","data":[...]} of every model (/v1/models). */
static json_t *model_list(struct ebb_api *a)
{
    json_t *o = json_object(), *d = json_array();
    for (size_t i = 0; i < a->n_models; i++)
        if (ebb__served_listed(a->models[i]))
            json_array_append_new(d, model_object(a->models[i]));
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", d);
    return o;
}

/* Per-model gauges and counters of the catalogue. */
static void metrics_models(struct ebb_api *a, struct ebb__abuf *b)
{
    ebb__abuf_puts(b, "# HELP ebb_catalogue_model_loaded 1 while the model is loaded and ready, "
                      "0.5 while it loads.\n# TYPE ebb_catalogue_model_loaded gauge\n");
    for (size_t i = 0; i < a->n_models; i++) {
        const struct ebb__served *sv = a->models[i];
        if (!ebb__served_listed(sv))
            continue;
        ebb__abuf_printf(b, "ebb_catalogue_model_loaded{model=\"%s\"} %s\n", sv->id,
                         sv->ready                     ? "1"
                         : sv->sched && !sv->load_seen ? "0.5"
                                                       : "0");
    }
    ebb__abuf_puts(b, "# HELP ebb_catalogue_model_loads_total Loads of the model since start.\n"
                      "# TYPE ebb_catalogue_model_loads_total counter\n");
    for (size_t i = 0; i < a->n_models; i++)
        if (ebb__served_listed(a->models[i]))
            ebb__abuf_printf(b, "ebb_catalogue_model_loads_total{model=\"%s\"} %llu\n",
                             a->models[i]->id, (unsigned long long)a->models[i]->n_loads);
    /* The gate of priority = high models (one for the daemon, in every model's parameters). */
    struct ebb_sched_gate *g = a->n_models ? a->models[0]->sp.gate : NULL;
    if (g) {
        uint64_t holds;
        double held_s;
        ebb_sched_gate_stats(g, &holds, &held_s);
        ebb__abuf_printf(b,
                         "# HELP ebb_catalogue_priority_holds_total Engine steps of other models "
                         "held while a priority = high model had requests.\n"
                         "# TYPE ebb_catalogue_priority_holds_total counter\n"
                         "ebb_catalogue_priority_holds_total %llu\n"
                         "# HELP ebb_catalogue_priority_held_seconds_total Their total wait.\n"
                         "# TYPE ebb_catalogue_priority_held_seconds_total counter\n"
                         "ebb_catalogue_priority_held_seconds_total %.6f\n",
                         (unsigned long long)holds, held_s);
    }
    ebb__abuf_puts(b, "# HELP ebb_catalogue_model_unloads_total Unloads of the model since "
                      "start.\n# TYPE ebb_catalogue_model_unloads_total counter\n");
    for (size_t i = 0; i < a->n_models; i++)
        if (ebb__served_listed(a->models[i]))
            ebb__abuf_printf(b, "ebb_catalogue_model_unloads_total{model=\"%s\"} %llu\n",
                             a->models[i]->id, (unsigned long long)a->models[i]->n_unloads);
    ebb__abuf_puts(b, "# HELP ebb_catalogue_model_in_flight Requests on the model now.\n"
                      "# TYPE ebb_catalogue_model_in_flight gauge\n");
    for (size_t i = 0; i < a->n_models; i++)
        if (ebb__served_listed(a->models[i]))
            ebb__abuf_printf(b, "ebb_catalogue_model_in_flight{model=\"%s\"} %zu\n",
                             a->models[i]->id, a->models[i]->n_live);
    ebb__abuf_puts(b, "# HELP ebb_catalogue_model_load_seconds How long its last load took.\n"
                      "# TYPE ebb_catalogue_model_load_seconds gauge\n");
    for (size_t i = 0; i < a->n_models; i++)
        if (ebb__served_listed(a->models[i]))
            ebb__abuf_printf(b, "ebb_catalogue_model_load_seconds{model=\"%s\"} %.3f\n",
                             a->models[i]->id, a->models[i]->load_secs);
    /* Layers of loaded models that stream (under models_budget): an idle model lends memory to
     * another by streaming its top layers. */
    ebb__abuf_puts(b, "# HELP ebb_catalogue_model_layers Decoder layers of a loaded model by "
                      "place (resident on the device, streamed from the file each step).\n"
                      "# TYPE ebb_catalogue_model_layers gauge\n");
    for (size_t i = 0; i < a->n_models; i++) {
        const struct ebb__served *sv = a->models[i];
        struct ebb_model_residency rs;
        if (!ebb__served_listed(sv) || !sv->ready || !sv->model ||
            !ebb_model_residency(sv->model, &rs))
            continue;
        ebb__abuf_printf(b,
                         "ebb_catalogue_model_layers{model=\"%s\",place=\"resident\"} %u\n"
                         "ebb_catalogue_model_layers{model=\"%s\",place=\"streamed\"} %u\n",
                         sv->id, rs.n_resident, sv->id, rs.n_streamed);
    }
    ebb__abuf_puts(b, "# HELP ebb_catalogue_model_memory_bytes What a loaded model counts against "
                      "models_budget.\n# TYPE ebb_catalogue_model_memory_bytes gauge\n");
    for (size_t i = 0; i < a->n_models; i++)
        if (ebb__served_listed(a->models[i]) && a->models[i]->ready)
            ebb__abuf_printf(b, "ebb_catalogue_model_memory_bytes{model=\"%s\"} %llu\n",
                             a->models[i]->id, (unsigned long long)ebb__served_used(a->models[i]));
}

static void handle_get(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    switch (r->ep) {
    case EBB__EP_HEALTH: {
        if (a->draining) {
            /* A balancer or readiness probe takes this daemon out while it finishes its
             * requests (SIGTERM). */
            json_t *o = json_object();
            json_object_set_new(o, "status", json_string("draining"));
            json_object_set_new(o, "in_flight", json_integer((json_int_t)ebb_api_in_flight(a)));
            ebb__reply_json(r, 503, o);
            return;
        }
        if (!a->catalogue) {
            health_one(r);
            return;
        }
        /* Catalogue mode: the server is up whatever its models do; each says its state. */
        json_t *o = json_object(), *ms = json_object();
        for (size_t i = 0; i < a->n_models; i++)
            if (ebb__served_listed(a->models[i]))
                json_object_set_new(ms, a->models[i]->id,
                                    json_string(ebb__served_state(a->models[i])));
        json_object_set_new(o, "status", json_string("ok"));
        json_object_set_new(o, "models", ms);
        if (a->def->n_rep > 1)
            json_object_set_new(o, "devices", health_devices(a));
        ebb__reply_json(r, 200, o);
        return;
    }
    case EBB__EP_MODELS: {
        const char *id = r->path + strlen("/v1/models");
        if (*id == '/' && id[1]) {
            bool amb;
            struct ebb__served *sv = ebb__served_find(a, id + 1, &amb);
            if (!sv) {
                char msg[300];
                snprintf(msg, sizeof(msg), "The model '%.200s' does not exist", id + 1);
                ebb__reply_error(r, 404, msg, "model", "model_not_found");
                return;
            }
            ebb__reply_json(r, 200, model_object(sv));
            return;
        }
        ebb__reply_json(r, 200, model_list(a));
        return;
    }
    case EBB__EP_METRICS: {
        struct ebb_sched_stats st = {0};
        bool any_ready = false;
        size_t n_sched = 0;
        for (size_t i = 0; i < a->n_models; i++)
            for (size_t k = 0; k < a->models[i]->n_rep; k++)
                n_sched += a->models[i]->rep[k].sched != NULL;
        for (size_t i = 0; i < a->n_models; i++)
            any_ready |= a->models[i]->ready;
        /* every replica of every model: one engine's figures whole, several summed */
        for (size_t i = 0; i < a->n_models; i++) {
            for (size_t k = 0; k < a->models[i]->n_rep; k++) {
                struct ebb_sched *sc = a->models[i]->rep[k].sched;
                if (!sc)
                    continue;
                struct ebb_sched_stats one = {0};
                ebb_sched_stats(sc, &one);
                if (n_sched == 1) {
                    st = one;
                    continue;
                }
                st.queued += one.queued;
                st.active += one.active;
                st.n_slots += one.n_slots;
                st.steps += one.steps;
                st.batch_rows += one.batch_rows;
                st.batch_seqs += one.batch_seqs;
                st.jobs_started += one.jobs_started;
                st.queue_wait_s += one.queue_wait_s;
                st.cache_hits += one.cache_hits;
                st.cache_tokens += one.cache_tokens;
            }
        }
        struct ebb__abuf b = {0};
        ebb__metrics_render(&a->metrics, &st, a->catalogue ? any_ready : a->def->ready, &b);
        if (a->catalogue)
            metrics_models(a, &b);
        metrics_devices(a, &b);
        for (size_t i = 0; i < a->n_models; i++) {
            struct ebb__served *sv = a->models[i];
            if (!sv->ready || !sv->model)
                continue;
            if (ebb_model_streaming(sv->model)) {
                /* the layer streamer's ebb_stream_* metrics (docs/STREAMER.md) */
                size_t need = ebb_model_stream_prometheus(sv->model, NULL, 0);
                char *sp = need ? malloc(need + 1) : NULL;
                if (sp) {
                    ebb_model_stream_prometheus(sv->model, sp, need + 1);
                    ebb__abuf_puts(&b, sp);
                    free(sp);
                }
            }
            char xp[4096]; /* the expert cache's ebb_expert_cache_* (STREAMER.md) */
            if (ebb_model_expert_cache_prometheus(sv->model, xp, sizeof(xp)))
                ebb__abuf_puts(&b, xp);
        }
        ebb__reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p ? b.p : "", b.n);
        ebb__abuf_fini(&b);
        return;
    }
    default:
        ebb__reply_error(r, 404, "not found", NULL, "unknown_url");
    }
}

/* ---- routing ------------------------------------------------------------------------------- */

static enum ebb__ep route(const char *url, bool *post)
{
    *post = true;
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions"))
        return EBB__EP_CHAT;
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions"))
        return EBB__EP_COMPLETIONS;
    if (!strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings"))
        return EBB__EP_EMBEDDINGS;
    if (!strcmp(url, "/v1/messages"))
        return EBB__EP_MESSAGES;
    if (!strcmp(url, "/v1/messages/count_tokens"))
        return EBB__EP_COUNT_TOKENS;
    if (!strcmp(url, "/v1/responses") || !strcmp(url, "/responses"))
        return EBB__EP_RESPONSES;
    if (!strcmp(url, "/api/chat"))
        return EBB__EP_OLLAMA_CHAT;
    if (!strcmp(url, "/api/generate"))
        return EBB__EP_OLLAMA_GENERATE;
    if (!strcmp(url, "/api/embed") || !strcmp(url, "/api/embeddings"))
        return EBB__EP_OLLAMA_EMBED;
    if (ebb__ollama_post_path(url))
        return EBB__EP_OLLAMA;
    if (!strcmp(url, "/tokenize"))
        return EBB__EP_TOKENIZE;
    if (!strcmp(url, "/models/load") || !strcmp(url, "/models/unload"))
        return EBB__EP_MODELS;
    if (!strcmp(url, "/detokenize"))
        return EBB__EP_DETOKENIZE;
    *post = false;
    if (!strncmp(url, "/v1/responses/", 14) || !strncmp(url, "/responses/", 11))
        return EBB__EP_RESPONSES;
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11) ||
        !strcmp(url, "/models/status"))
        return EBB__EP_MODELS;
    if (ebb__ollama_get_path(url))
        return EBB__EP_OLLAMA;
    if (!strcmp(url, "/health"))
        return EBB__EP_HEALTH;
    if (!strcmp(url, "/metrics"))
        return EBB__EP_METRICS;
    return EBB__EP_OTHER;
}

/* First call for a request (headers complete). Returns false if the request was answered. */
static bool check_request(struct ebb__req *r, const char *url, const char *method)
{
    struct ebb_api *a = r->api;
    struct MHD_Connection *c = r->conn;
    bool post;
    r->ep = route(url, &post);
    if (a->loopback) {
        const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
        if (host && !host_is_loopback_name(host) && !host_is_allowed(a, host)) {
            ebb__reply_error(r, 403,
                             "the Host header must name this machine (localhost, 127.0.0.1 "
                             "or [::1]) or a name in allowed_hosts while ebb listens on a "
                             "loopback address",
                             NULL, "host_not_allowed");
            return false;
        }
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin) {
        if (!origin_allowed(a, origin)) {
            ebb__reply_error(r, 403, "this Origin is not allowed (see --cors-origin)", NULL,
                             "origin_not_allowed");
            return false;
        }
        snprintf(r->origin, sizeof(r->origin), "%s", origin);
    }
    if (!strcmp(method, "OPTIONS")) {
        preflight(r);
        return false;
    }
    if (r->ep != EBB__EP_HEALTH && !authorized(a, c)) {
        ebb__reply_error(r, 401, "missing or invalid API key", NULL, "invalid_api_key");
        return false;
    }
    if (r->ep == EBB__EP_OTHER) {
        char msg[260];
        snprintf(msg, sizeof(msg), "unknown URL %.100s %.100s", method, url);
        ebb__reply_error(r, 404, msg, NULL, "unknown_url");
        return false;
    }
    bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    /* A stored response, /v1/responses/{id}: read or deleted. */
    if (r->ep == EBB__EP_RESPONSES && !post)
        is_get = is_get || !strcmp(method, "DELETE");
    /* Ollama's model deletion is DELETE /api/delete (answered with its refusal). */
    if (r->ep == EBB__EP_OLLAMA && !strcmp(url, "/api/delete") && !strcmp(method, "DELETE"))
        post = false, is_get = true;
    if (post ? strcmp(method, "POST") : !is_get) {
        char msg[260];
        snprintf(msg, sizeof(msg), "method %.16s is not allowed on %.100s", method, url);
        ebb__reply_error(r, 405, msg, NULL, "method_not_allowed");
        return false;
    }
    if (post && a->draining) {
        /* Answered 503 with Retry-After (ebb__reply) and the connection closed: the client or
         * balancer retries, and the retry cannot reach this daemon again. */
        ebb__reply_error(r, 503, "the server is shutting down; retry (another server takes it)",
                         NULL, "server_draining");
        return false;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > a->max_body) {
        char msg[160];
        snprintf(msg, sizeof(msg), "the request body is larger than %zu bytes (--max-body)",
                 a->max_body);
        ebb__reply_error(r, 413, msg, NULL, "request_too_large");
        return false;
    }
    return true;
}

enum MHD_Result ebb__on_access(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    (void)version;
    struct ebb_api *a = cls;
    struct ebb__req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r)
            return MHD_NO;
        r->api = a;
        r->conn = c;
        r->t_start = ebb__now();
        snprintf(r->method, sizeof(r->method), "%s", method);
        snprintf(r->path, sizeof(r->path), "%s", url);
        r->body.limit = a->max_body;
        ebb__served_take(r, a->def);
        r->keep_alive = NAN;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr,
                          r->remote, sizeof(r->remote));
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr,
                          r->remote, sizeof(r->remote));
        }
        *con_cls = r;
        check_request(r, url, method);
        return MHD_YES;
    }
    if (r->answered)
        return MHD_YES;
    if (*upload_size) {
        if (!r->too_big) {
            size_t had = r->body.n;
            ebb__abuf_put(&r->body, upload, *upload_size);
            if (r->body.oom) {
                r->too_big = true;
                /* Within max_body, the buffer could not grow: out of memory, not too big. */
                r->body_nomem = had + *upload_size <= a->max_body;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->disconnected)
        return MHD_NO;
    if (r->body_nomem) {
        ebb__reply_error(r, 503, "out of memory while reading the request body", NULL,
                         "out_of_memory");
        return MHD_YES;
    }
    if (r->too_big) {
        char msg[160];
        snprintf(msg, sizeof(msg), "the request body is larger than %zu bytes (--max-body)",
                 a->max_body);
        ebb__reply_error(r, 413, msg, NULL, "request_too_large");
        return MHD_YES;
    }
    /* A catalogue that follows its directory is brought up to date before it is listed or a
     * name is looked up in it (a stat when nothing changed). */
    if (a->catalogue && !r->sv_picked && r->ep != EBB__EP_HEALTH && r->ep != EBB__EP_METRICS &&
        strcmp(r->path, "/api/pull"))
        ebb__catalogue_refresh(a);
    /* /api/pull's model is the one to fetch, not one of the catalogue's. */
    if (a->catalogue && !r->sv_picked && r->ep != EBB__EP_MODELS && r->ep != EBB__EP_HEALTH &&
        r->ep != EBB__EP_METRICS && strcmp(r->path, "/api/pull") && !ebb__served_pick(r))
        return MHD_YES;
    switch (r->ep) {
    case EBB__EP_CHAT:
    case EBB__EP_COMPLETIONS:
        ebb__gen_handle(r);
        break;
    case EBB__EP_EMBEDDINGS:
        ebb__embeddings_handle(r);
        break;
    case EBB__EP_MESSAGES:
        ebb__messages_handle(r);
        break;
    case EBB__EP_COUNT_TOKENS:
        ebb__messages_count_handle(r);
        break;
    case EBB__EP_RESPONSES:
        ebb__responses_handle(r);
        break;
    case EBB__EP_OLLAMA_CHAT:
    case EBB__EP_OLLAMA_GENERATE:
    case EBB__EP_OLLAMA_EMBED:
    case EBB__EP_OLLAMA:
        ebb__ollama_handle(r);
        break;
    case EBB__EP_TOKENIZE:
    case EBB__EP_DETOKENIZE:
        ebb__tokenize_handle(r, r->ep == EBB__EP_DETOKENIZE);
        break;
    case EBB__EP_MODELS:
        if (!strncmp(r->path, "/models/", 8))
            ebb__admin_handle(r);
        else
            handle_get(r);
        break;
    default:
        handle_get(r);
    }
    return MHD_YES;
}
