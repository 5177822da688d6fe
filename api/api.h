/* The OpenAI-compatible HTTP API: libmicrohttpd driven from a libuv loop (external-select mode),
 * routing, validation, OpenAI JSON objects and server-sent events. Everything here runs on the
 * loop thread except the functions documented as thread-safe. Logs go through runtime/base/log.h
 * (module "http"), which the binary links. */
#ifndef EBB_API_API_H
#define EBB_API_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "api/defaults/defaults.h"
#include "base/err.h"
#include "sched/scheduler.h"

/* How MHD is driven. epoll: one uv_poll_t on MHD's epoll fd (Linux). fdset: MHD_get_fdset
 * and a uv_poll_t per socket (portable: macOS, BSD; also selectable on Linux). */
enum ebb_api_poll { EBB_API_POLL_AUTO = 0, EBB_API_POLL_EPOLL, EBB_API_POLL_FDSET };

/* One model of the catalogue (catalogue mode): the API starts its scheduler, which loads it, when
 * a request first names it, and frees it when keep_alive or the memory budget says so. */
struct ebb_api_model {
    const char *id;             /* the name /v1/models lists; copied */
    const char *chat_template;  /* family name overriding the GGUF's template, or NULL */
    struct ebb_sched_params sp; /* sp.model.path: the GGUF; on_loaded and ud are the API's */
    bool pin;                   /* never unloaded */
    double keep_alive;          /* seconds idle before unloading; < 0: never */
};

struct ebb_api_config {
    const char *host;        /* numeric address to bind, "127.0.0.1" if NULL */
    uint16_t port;           /* 0: an ephemeral port (see ebb_api_port) */
    int listen_fd;           /* >= 0: serve on this already-listening socket (socket activation) */
    bool listen_fd_loopback; /* that socket is bound to a loopback address */
    const char *model_id;    /* reported by /v1/models; requests naming another model get 404 */
    const char *chat_template; /* family name overriding the GGUF's template, or NULL */
    size_t max_body;           /* bytes; 0 means 4 MiB */
    char **api_keys;           /* n_api_keys accepted keys; none: no authentication */
    size_t n_api_keys;
    char **cors_origins; /* allowed Origin values ("*" allows any) */
    size_t n_cors_origins;
    /* Host header values accepted besides the loopback names while listening on a loopback
     * address: "name" (any port) or "name:port", compared without case; "*" accepts any. */
    char **allowed_hosts;
    size_t n_allowed_hosts;
    unsigned timeout_s; /* idle connection timeout in seconds (also the keep-alive wait); 0: none */
    /* Edge limits (api/http/limits.c): the time a client gets to send its request head (from accept
     * or from a keep-alive connection's next request line) and then its body, in ms (0: none); the
     * open connections allowed from one client address and in all (0: no cap). Past a cap a small
     * headroom still answers /health. */
    unsigned header_timeout_ms, body_timeout_ms;
    unsigned max_connections, max_connections_per_client;
    unsigned silent_timeout_ms, accept_rate, accept_rate_total;
    unsigned keepalive_ms;    /* SSE comment interval while a stream waits; 0 means 2000 */
    size_t max_stream_buffer; /* unsent SSE bytes per stream before it is cut; 0 means 1 MiB */
    unsigned responses_store; /* /v1/responses kept for previous_response_id and GET; 0: none */
    enum ebb_api_poll poll;
    /* Catalogue mode when n_models > 0: these models are served by name, loaded on request and
     * unloaded by policy (model_id and chat_template are then unused). budget: bytes all loaded
     * models may take together (0: no limit), estimated as each GGUF's size plus its KV cache. */
    const struct ebb_api_model *models;
    size_t n_models;
    uint64_t models_budget;
    /* Catalogue mode: the catalogue's source, asked again as it may change (a models directory
     * that files are added to and removed from while serving). Loop thread, with ud. Returns 1
     * with *models (n) the whole catalogue as it is now (valid until the next call; the API
     * copies what it keeps) when it changed since the last call that returned 1, or when also
     * (a file /api/pull fetched, to be served from now on) is not NULL; 0 when unchanged; < 0
     * on error. It must be cheap when nothing changed: the API asks before listing models and
     * before resolving a request's model name, and once a second. The API adds the models that
     * are new (by path), and drops those that are gone: out of the listings and the names at
     * once, unloaded once their requests in flight are done. NULL: a fixed catalogue. */
    int (*catalogue_scan)(void *ud, const char *also, const struct ebb_api_model **models,
                          size_t *n);
    /* Data parallel (docs/SCALING.md): every model runs one replica (engine, slots, KV pool) on
     * each of these devices ("cl:P:D"; copied), a request going to one of them; n_devices 0:
     * one on the model's own device. In catalogue mode the API opens each replica with its device;
     * outside it the daemon starts one scheduler per device (ebb_api_set_sched). models_budget then
     * bounds each device (every device holds every loaded model). At most 16. */
    const char *const *devices;
    size_t n_devices;
    /* Generation defaults: the configured ones (copied; NULL: none), and whether to skip the
     * model's own general.sampling.* recommendations (api/defaults/defaults.h has the resolution).
     */
    const struct ebb_sampling_set *generation;
    bool ignore_model_sampling;
    /* Where Ollama's /api/pull puts what it fetches (runtime/fetch; a several-model daemon then
     * serves it by name at once). NULL: /api/pull answers 501. */
    const char *models_dir;
    /* Called on the loop thread once the model is ready to serve (ok) or failed to load or to
     * get a chat template (msg says why). May be NULL. */
    void (*on_ready)(void *ud, bool ok, const char *msg);
    void *ud;
};

struct ebb_api;

/* Binds and starts listening on loop. The strings and arrays in cfg are copied. */
ebb_err ebb_api_new(uv_loop_t *loop, const struct ebb_api_config *cfg, struct ebb_api **out,
                    struct ebb_diag *diag);

/* Stops listening, ends every connection and frees everything. The scheduler must be freed
 * first (so no engine callback can arrive). Accepts NULL. */
void ebb_api_free(struct ebb_api *a);

/* Applies the settings a configuration reload may change on a running server: API keys, CORS
 * origins, allowed hosts, max_body, keepalive_ms, max_stream_buffer, responses_store, the edge
 * limits (header and body timeouts, connection caps), generation and ignore_model_sampling (other
 * fields are ignored). Connections stay open; the next request sees the new values. */
ebb_err ebb_api_reconfigure(struct ebb_api *a, const struct ebb_api_config *cfg);

/* The bound port (useful with port 0). */
uint16_t ebb_api_port(const struct ebb_api *a);

/* Hands the scheduler of replica i (devices[i] of the configuration; 0 without a device list)
 * to the API before its model is loaded; the API submits jobs to it. */
void ebb_api_set_sched(struct ebb_api *a, size_t i, struct ebb_sched *s);

/* The ud for ebb_api_on_loaded of replica i's scheduler. */
void *ebb_api_replica(struct ebb_api *a, size_t i);

/* Thread-safe: tells the API a replica's model finished loading (rc EBB_OK) or failed (the
 * model serves once every replica loaded). Suitable as the scheduler's on_loaded callback with
 * ud = ebb_api_replica(api, i). */
void ebb_api_on_loaded(void *replica, ebb_err rc, const char *msg);

/* True once the model failed to load (the daemon then exits with the message logged). */
bool ebb_api_load_failed(const struct ebb_api *a);

/* Model swap, step 1: while held, new generation requests wait (their connections suspended)
 * instead of reaching the engine; releasing the hold lets them continue on whatever model is
 * then served. Requests already submitted are not affected. */
void ebb_api_hold(struct ebb_api *a, bool hold);

/* Model swap, step 2, with nothing in flight (ebb_api_in_flight() == 0) and requests held:
 * picks m's chat template (chat_template: a family name, or NULL to detect it from the GGUF)
 * and generation defaults, and from now on serves m under model_id. The caller then makes the
 * scheduler use m. On error (no usable template) nothing changes. */
ebb_err ebb_api_set_model(struct ebb_api *a, struct ebb_model *m, const char *model_id,
                          const char *chat_template, struct ebb_diag *diag);

/* Catalogue mode: cancels every job of every loaded model (the end of a shutdown's grace). */
void ebb_api_cancel_all(struct ebb_api *a);

/* Catalogue mode: lets every loaded model's layer streamer re-read the memory probes. */
void ebb_api_stream_probe(struct ebb_api *a);

/* Graceful stop, step 1 (a drain): stop accepting new connections; on the connections already
 * open, /health answers 503 {"status":"draining"} and new generation requests 503 with
 * Retry-After, every answer closes its connection, and keep-alive connections waiting for a next
 * request are closed at once. Requests in flight, streams included, continue. */
void ebb_api_quiesce(struct ebb_api *a);

/* Generation requests still being answered: a job running, or a response not fully sent. */
size_t ebb_api_in_flight(const struct ebb_api *a);

#endif
