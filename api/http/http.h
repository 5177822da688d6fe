/* The HTTP edge of api/ (the rooms above it use this header): libmicrohttpd inside the libuv
 * loop, the life of a request (struct ebb__req) and of its generation state (struct ebb__gen:
 * the edge cancels and logs it, the protocol rooms fill it), responses, edge limits, metrics,
 * and the pieces every room writes with (buffers, JSON text, SSE, error objects). The rooms
 * above reach the edge by name; the edge reaches them only through struct ebb__handlers. All of
 * it runs on the loop thread unless a field says (mu). */
#ifndef EBB_API_HTTP_H
#define EBB_API_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>

#include "api/api.h"
#include "api/chat/chat-template.h"
#include "api/defaults/defaults.h"
#include "sched/sampler.h"

/* ---- clocks, buffers, JSON text, SSE, error objects (objects.c) -------------------------- */

/* Monotonic seconds (durations, deadlines) and Unix seconds (created fields, ids). */
double ebb__now(void);
double ebb__unix_now(void);

/* A growable byte buffer with a cap; growth past cap fails (oom set). */
struct ebb__abuf {
    char *p;
    size_t n, cap, limit;
    bool oom;
};
void ebb__abuf_put(struct ebb__abuf *b, const char *s, size_t n);
void ebb__abuf_puts(struct ebb__abuf *b, const char *s);
void ebb__abuf_printf(struct ebb__abuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void ebb__abuf_fini(struct ebb__abuf *b);

/* {"error":{"message","type","param","code"}} as compact JSON, malloc'd. */
char *ebb__error_json(const char *message, const char *type, const char *param, const char *code);
/* The error type OpenAI uses for an HTTP status. */
const char *ebb__error_type(unsigned status);
/* Anthropic's error object for an HTTP status, {"type":"error","error":{"type","message"}}, as
 * compact JSON, malloc'd (/v1/messages answers its errors in this shape). */
char *ebb__anthropic_error_json(unsigned status, const char *message);
/* True for a path whose errors take Anthropic's shape: /v1/messages and every path under it
 * (/v1/messages/count_tokens, and unknown ones, whose 404 an Anthropic client must parse). */
bool ebb__anthropic_path(const char *path);
/* True for a path under /api/ (Ollama's API), whose errors take Ollama's shape, {"error": msg}. */
bool ebb__ollama_path(const char *path);
/* The error body for a request to path (Anthropic's, Ollama's or OpenAI's shape), malloc'd. */
char *ebb__error_body(const char *path, unsigned status, const char *message, const char *param,
                      const char *code);

/* True if s[0..n) is valid UTF-8. */
bool ebb__utf8_valid(const char *s, size_t n);
/* Appends s[0..n) (valid UTF-8) as a JSON string literal, quotes included. */
void ebb__json_escape(struct ebb__abuf *b, const char *s, size_t n);

/* Appends "data: <compact json>\n\n" for obj (stolen) to b. */
void ebb__sse_event(struct ebb__abuf *b, json_t *obj);

/* Appends the valid UTF-8 prefix handling for JSON: jansson rejects invalid UTF-8, so text is
 * made valid (U+FFFD for bad bytes) before it becomes a JSON string. */
json_t *ebb__json_text(const char *s, size_t n);

/* ---- jansson's allocator (jsonmem.c) ----------------------------------------------------- */

/* Makes jansson allocate through ebb__json_alloc_failed's record (once, before any JSON). */
void ebb__json_alloc_init(void);
/* True if a jansson allocation failed on this thread since the last clear; clear resets. */
bool ebb__json_alloc_failed(bool clear);

/* ---- metrics (metrics.c) ----------------------------------------------------------------- */

enum ebb__ep {
    EBB__EP_OTHER = 0,
    EBB__EP_CHAT,
    EBB__EP_COMPLETIONS,
    EBB__EP_MODELS,
    EBB__EP_HEALTH,
    EBB__EP_METRICS,
    EBB__EP_TOKENIZE,
    EBB__EP_DETOKENIZE,
    EBB__EP_EMBEDDINGS,
    EBB__EP_MESSAGES,
    EBB__EP_COUNT_TOKENS, /* /v1/messages/count_tokens */
    EBB__EP_RESPONSES,
    EBB__EP_OLLAMA_CHAT,     /* /api/chat */
    EBB__EP_OLLAMA_GENERATE, /* /api/generate */
    EBB__EP_OLLAMA_EMBED,    /* /api/embed, /api/embeddings */
    EBB__EP_OLLAMA,          /* Ollama's other paths under /api/ */
    EBB__EP_COUNT
};

/* Why the edge limits (limits.c) refused or closed a connection. */
enum ebb__refusal {
    EBB__REFUSE_CLIENT = 0,     /* over max_connections_per_client */
    EBB__REFUSE_GLOBAL,         /* over max_connections */
    EBB__REFUSE_HEADER_TIMEOUT, /* no complete request head within header_timeout */
    EBB__REFUSE_BODY_TIMEOUT,   /* no complete body within body_timeout */
    EBB__REFUSE_FRAMING,        /* a request head framed ambiguously (framing.c): 400/501 */
    EBB__REFUSE_PEER_CLOSED,    /* the client closed with its request head or body unfinished */
    EBB__REFUSE_RATE,           /* over accept_rate (its address) or accept_rate_total (all) */
    EBB__REFUSE_SILENT,         /* no request line within silent_timeout of connecting */
    EBB__REFUSE_N
};

#define EBB__N_STATUS 12
#define EBB__TTFT_BUCKETS 12

struct ebb__metrics {
    uint64_t requests[EBB__EP_COUNT][EBB__N_STATUS];
    uint64_t prompt_tokens, cached_tokens, generated_tokens;
    double prefill_seconds, decode_seconds, queue_seconds;
    uint64_t ttft_bucket[EBB__TTFT_BUCKETS + 1]; /* cumulative at render time, +Inf last */
    double ttft_sum;
    uint64_t ttft_count;
    uint64_t cancellations, errors, rejected_queue_full;
    uint64_t refused[EBB__REFUSE_N]; /* connections and requests refused by the edge limits */
    size_t open_connections;
    double started_at; /* unix seconds */
};

void ebb__metrics_request(struct ebb__metrics *m, enum ebb__ep ep, unsigned status);
void ebb__metrics_ttft(struct ebb__metrics *m, double seconds);
/* Prometheus text exposition of m plus the scheduler's live gauges. */
void ebb__metrics_render(const struct ebb__metrics *m, const struct ebb_sched_stats *st,
                         bool loaded, struct ebb__abuf *out);

/* ---- requests (server.c) ------------------------------------------------------------------ */

enum ebb__watch { EBB__WATCH_IDLE = 0, EBB__WATCH_ACTIVE, EBB__WATCH_CLOSING };

/* One token's logprob record as the engine reported it. */
struct ebb__lp {
    int32_t id;
    float logprob;
    uint32_t n_top;
    int32_t top_ids[EBB_SAMPLE_MAX_TOP];
    float top_logprobs[EBB_SAMPLE_MAX_TOP];
};

struct ebb__gen_fmt;     /* a wire format over the generation: api/openai/openai.h */
struct ebb__pull;        /* an Ollama /api/pull on its thread: api/ollama/pull.c */
struct ebb_tool_stream;  /* api/tools/tools.h */
struct ebb_think_stream; /* api/tools/tools.h */

/* One choice's output (a request has one unless it asked for n). Fields marked (mu) are shared
 * with the engine thread under api->mu; the rest belong to the loop thread. */
struct ebb__gen_choice {
    /* (mu) written by the engine */
    struct ebb__abuf pend;
    struct ebb__lp *pend_lp;
    size_t n_pend_lp, cap_pend_lp;
    bool ended;                  /* several choices: this one ended, with res */
    struct ebb_sched_result res; /* several choices: its own finish and n_gen */
    /* loop copies swapped in from pend */
    struct ebb__abuf take;
    struct ebb__lp *take_lp;
    size_t n_take_lp, cap_take_lp;
    bool end_sent; /* stream: its finish chunk is written */
    /* non-stream accumulation */
    struct ebb__abuf text;
    struct ebb__lp *all_lp;
    size_t n_all_lp, cap_all_lp;
    struct ebb_tool_stream *tp;  /* streams with tools: the incremental parser of its output */
    struct ebb_think_stream *th; /* chat streams: the reasoning splitter, before tp */
};

/* Generation state of one request. Fields marked (mu) are shared with the engine thread under
 * api->mu; the rest belong to the loop thread. */
struct ebb__gen {
    char id[48];
    long long created;
    bool chat, stream, include_usage, logprobs;
    uint32_t n_prompt;
    uint64_t job_id;
    struct ebb_sched *sched; /* the replica's scheduler that runs job_id */
    double t_submit;
    bool first_token_seen;
    bool finished;        /* the final chunks (or the whole body) are written */
    char chunk_head[640]; /* "data: {...,"choices":[{"index": */
    char *echo;           /* completions with echo: prompt text to put first */
    size_t echo_len;
    const struct ebb__gen_fmt *fmt; /* NULL: OpenAI chat/completions */
    void *ext;                      /* fmt's state, freed with the generation */
    /* tool calls: the output goes through the parser when tools are offered */
    json_t *tools;       /* the offered tools (a reference), NULL if none */
    size_t max_calls;    /* 1 without parallel_tool_calls, else 0 */
    int32_t mark_id[2];  /* control tokens of the call markup (-1: none), for sink_token */
    const char *mark[2]; /* their texts */
    uint32_t cur;        /* the choice whose output the tool parser is writing */
    /* reasoning: <think> blocks go apart from the answer (chat: reasoning_content); think_open:
     * the prompt ended inside one, so the output starts as reasoning */
    bool reasoning, think_open;
    /* (mu) written by the engine */
    bool eng_done;
    struct ebb_sched_result res; /* the job's: n_gen summed over the choices */
    /* The choices' outputs, n_ch >= 1 (ch points to one when there is a single choice). */
    struct ebb__gen_choice *ch;
    uint32_t n_ch;
    struct ebb__gen_choice one;
};

struct ebb__req {
    struct ebb_api *api;
    struct MHD_Connection *conn; /* NULL once MHD has finished with the connection */
    enum ebb__ep ep;
    char method[8];
    char path[128];
    struct ebb__abuf body;
    bool too_big;
    bool body_nomem; /* too_big because memory ran out, not max_body */
    bool answered;
    unsigned status;
    double t_start;
    char origin[256]; /* allowed Origin to echo, "" if none */
    char remote[64];  /* client address for the request log */
    /* generation */
    struct ebb__gen *gen;
    /* /api/pull: the pull holding the request (engine_ref is set while it runs); pull_done once
     * it has ended and its last bytes are in out (or, not streamed, its answer) */
    struct ebb__pull *pull;
    bool pull_done;
    bool gen_counted;            /* counted in api->n_gen_conns */
    bool engine_ref;             /* the engine may still call the sink */
    bool in_ready;               /* (mu) queued on api->ready */
    struct ebb__req *ready_next; /* (mu) */
    struct ebb__req *pump_next;  /* loop thread only: on_async's batch being pumped */
    bool suspended;
    bool disconnected;
    bool parked;            /* waiting for ebb_api_hold(false) or its model's load */
    struct ebb__served *sv; /* the model it asked for (the default until its body is read) */
    bool sv_picked;         /* sv resolved from the body */
    bool sv_named;          /* the body named sv (its keep_alive then applies to sv) */
    bool sv_counted;        /* counted in sv->n_live */
    double keep_alive;      /* the request's keep_alive in seconds; NAN: none sent */
    struct ebb__req *park_prev, *park_next;
    enum ebb__watch watch_state;
    uv_poll_t watch;      /* client hang-up detection while suspended */
    struct ebb__abuf out; /* SSE bytes not yet handed to MHD */
    size_t out_off;
    double last_out;
    struct ebb__req *live_prev, *live_next;
};

struct ebb__fdpoll;

/* ---- the served models (catalogue.c) ------------------------------------------------------ */

/* Catalogue mode: asks the catalogue's source whether it changed, and if so adds the models
 * that are new and drops the ones that are gone (api.h, catalogue_scan). Before listing models
 * and before resolving a request's model name; loop thread. */
void ebb__catalogue_refresh(struct ebb_api *a);
/* r's model from now on (a request holds a reference on its model, which keeps a model that
 * is gone from being freed under it). */
void ebb__served_take(struct ebb__req *r, struct ebb__served *sv);
/* True if sv is listed and named (its file is not gone). */
bool ebb__served_listed(const struct ebb__served *sv);
/* A model whose file is gone and that is not freed yet (one still loaded first), by its exact
 * id; NULL if none. */
struct ebb__served *ebb__served_find_gone(struct ebb_api *a, const char *name);
/* The model name picks: an exact id; in catalogue mode also the id ignoring case or an Ollama
 * ":latest" tag, or a unique prefix (*ambiguous when several start so). NULL if none. */
struct ebb__served *ebb__served_find(struct ebb_api *a, const char *name, bool *ambiguous);
/* Answers r with 404 model_not_found for name, listing the close names the server has. */
void ebb__served_unknown(struct ebb__req *r, const char *name, bool ambiguous);
/* True if name (NULL or "": none) names r's model. */
bool ebb__served_named(struct ebb__req *r, const char *name);
/* A keep_alive value (seconds, or a duration string such as "5m"; negative: forever), NAN if
 * it is neither. */
double ebb__keep_alive_secs(json_t *v);
/* Once r's body is read: its "model" (catalogue mode) picks r->sv and its "keep_alive" is kept.
 * False if r was answered (404 for a name the catalogue lacks). */
bool ebb__served_pick(struct ebb__req *r);
/* True if r's model is ready. Otherwise r was answered (503) or, in catalogue mode, parked
 * while its model loads (the load started here if need be; unloading idle models under the
 * budget first). */
bool ebb__served_ready(struct ebb__req *r);
/* r reaches (or waits for) its model's engine: counted as in flight until ebb__served_release
 * (at its end), so that the model is not unloaded under it. */
void ebb__served_count(struct ebb__req *r);
void ebb__served_release(struct ebb__req *r);
/* Unloads sv now if it is idle, else once it is; false if not now (or not the API's to unload). */
bool ebb__served_unload(struct ebb__served *sv, const char *why);
/* The memory sv is counted for under the budget before it loads: its file, an estimate of its
 * KV cache, and what the load would add as its header tells (sv->est: the prompt-cache store,
 * the CPU device's repacked weights). */
uint64_t ebb__served_bytes(const struct ebb__served *sv);
/* What a model counts against models_budget now. Loaded: its streamer's plan (bounded by a lent
 * budget not yet applied) and its prompt-cache store; without a streamer (the host engines)
 * its file, what the engine allocated beside it and its store (ebb_model_memory). Else
 * ebb__served_bytes. */
uint64_t ebb__served_used(const struct ebb__served *sv);
/* "loaded", "loading", "failed" or "unloaded". */
const char *ebb__served_state(const struct ebb__served *sv);
/* The replica that takes a prompt (ebb_sched_place over the replicas' offers); NULL when no
 * replica has a scheduler. */
struct ebb__replica *ebb__served_place(struct ebb__served *sv, const int32_t *prompt,
                                       uint32_t n_prompt);
/* A replica's state as /health and /models/status say it: "loaded", "loading", "failed" or
 * "unloaded". */
const char *ebb__replica_state(const struct ebb__replica *rp);
/* The device a replica runs on, as labels show it ("auto" when none was named). */
const char *ebb__replica_device(const struct ebb__replica *rp);
/* {id, state, loaded, pinned, size, family, context, keep_alive, in_flight, loads, unloads}. */
json_t *ebb__served_json(const struct ebb__served *sv);

/* ---- edge limits (limits.c): phase deadlines and connection caps ------------------------- */

enum ebb__phase { EBB__PHASE_HEADER = 0, EBB__PHASE_BODY, EBB__PHASE_BUSY };

/* One open connection (MHD's socket context), from accept to close. */
struct ebb__conn {
    int fd;
    enum ebb__phase phase;
    double t_phase;      /* monotonic seconds when phase began */
    unsigned excess;     /* accepted over a cap (enum ebb__refusal + 1): /health only; 0 if not */
    bool close_now;      /* shut down at the next sweep (a headroom connection was answered) */
    bool shut;           /* shut down already; MHD closes it */
    bool started;        /* the request line of the next request has arrived */
    bool spoke;          /* a request line has arrived on this connection */
    unsigned n_requests; /* answered on this connection */
    uint8_t key[16], key_len; /* client address bytes (4 or 16), 0: not counted per address */
    struct ebb__conn *prev, *next;
};

/* A client address with open connections, or whose accept-rate bucket is not yet full again. */
struct ebb__addr {
    uint8_t key[16], len;
    unsigned n;    /* open connections */
    double tokens; /* accept_rate bucket: connections it may open now */
    double t_fill; /* monotonic seconds tokens was last refilled */
};

struct ebb__limits {
    double header_s, body_s; /* phase deadlines; 0: none */
    double idle_s;           /* keep-alive wait for the next request (request_timeout); 0: none */
    unsigned max_conns, max_per_client; /* 0: no cap */
    double silent_s;                    /* time to send a first request line; 0: none */
    unsigned rate, rate_total;          /* accepts per second per address / in all; 0: none */
    double tokens_total, t_fill_total;  /* the accept_rate_total bucket */
    size_t n_active;                    /* addresses with open connections */
    struct ebb__conn *conns;
    size_t n_conns;
    struct ebb__addr *addrs; /* (n_addrs) addresses with open connections */
    size_t n_addrs, cap_addrs;
    double last_log[EBB__REFUSE_N];
    uint64_t pending_log[EBB__REFUSE_N];
};

/* What server.c calls in the rooms above it (routes/routes.c, openai/gen.c); routes/api.c
 * fills it. */
struct ebb__handlers {
    MHD_AccessHandlerCallback on_access; /* ebb__on_access */
    void (*gen_pump)(struct ebb__req *r);
    void (*gen_keepalive)(struct ebb__req *r, double now);
    void (*gen_conn_closed)(struct ebb__req *r);
    void (*gen_free)(struct ebb__gen *g);
    /* the catalogue's (catalogue.c, below), which itself parks and answers requests through
     * server.c: the server reaches it only through this table */
    ebb_err (*catalogue_init)(struct ebb_api *a, const struct ebb_api_config *cfg);
    void (*catalogue_fini)(struct ebb_api *a);
    void (*catalogue_async)(struct ebb_api *a);
    void (*catalogue_tick)(struct ebb_api *a, double now);
    void (*served_release)(struct ebb__req *r);
    /* Ollama's /api/pull (api/ollama/pull.c): the tick hands the pulls' progress to their
     * requests; stop (ebb_api_free) stops and joins them */
    void (*pull_tick)(struct ebb_api *a);
    void (*pull_stop)(struct ebb_api *a);
};

/* ---- the catalogue's life (catalogue.c; the server calls these through struct ebb__handlers) */

/* Builds a's served models: cfg's catalogue, or the one model named model_id. */
ebb_err ebb__catalogue_init(struct ebb_api *a, const struct ebb_api_config *cfg);
/* Frees the models (their schedulers first, the ones the API owns). */
void ebb__catalogue_fini(struct ebb_api *a);
/* The async callback: loads that ended since the last call are prepared or reported, and the
 * requests waiting for them go on. */
void ebb__catalogue_async(struct ebb_api *a);
/* The tick: unloads the models keep_alive or an unload request says to. */
void ebb__catalogue_tick(struct ebb_api *a, double now);
/* Adds the GGUF at path to a several-model daemon's catalogue (named as a file under
 * models_dir is), with the settings of the default model; *added false when the id was there
 * already or the daemon serves a single model. */
ebb_err ebb__catalogue_add(struct ebb_api *a, const char *path, bool *added);

/* Data parallel: one device's copy of a served model, with an engine, slots and KV pool of
 * its own (the same weights opened on that device). A model has one replica per device of
 * --device (one without a list); requests go to one of them (ebb__served_place). */
#define EBB__MAX_REPLICAS 16
struct ebb__replica {
    struct ebb__served *sv;
    char *device;            /* "cl:P:D" of a device list, or NULL: the served model's device */
    struct ebb_sched *sched; /* NULL: not loaded and not loading */
    int load_state;          /* (mu) 0 loading, 1 ready, -1 failed */
    char load_msg[512];      /* (mu) */
    uint64_t n_placed;       /* requests placed on it since start */
};

/* One model the server can serve (catalogue.c). Outside catalogue mode there is one, whose
 * scheduler the daemon owns and hands over (ebb_api_set_sched); in catalogue mode the API
 * starts a model's scheduler (which loads it) on the first request naming it and frees it by
 * the keep_alive and budget policies. Loop thread, except the fields marked (mu). */
struct ebb__served {
    struct ebb_api *api;
    char *id;                   /* what /v1/models lists and requests name */
    char *chat_template;        /* family name overriding the GGUF's template, or NULL */
    char *path, *device;        /* catalogue mode: the GGUF and the device it loads on */
    struct ebb_sched_params sp; /* catalogue mode: the scheduler's settings (strings above) */
    uint64_t file_size;         /* bytes of the GGUF */
    char family[32];            /* general.architecture, "" if unread */
    uint32_t n_ctx_train;       /* the GGUF's trained context, 0 if unread */
    bool pin;                   /* never unloaded by keep_alive or the budget */
    double keep_alive;          /* seconds idle before it is unloaded; < 0: never */
    double keep_alive_cfg;      /* the configured one, which a request without keep_alive sets */
    bool owned;                 /* the API starts and frees sched */
    struct ebb_sched *sched;    /* rep[0].sched: NULL when not loaded and not loading */
    /* (n_rep >= 1) the replicas, one per device; sched, model and load_state speak for them
     * all: the model is ready once every replica loaded, failed once one failed */
    struct ebb__replica rep[EBB__MAX_REPLICAS];
    size_t n_rep;
    int load_state;     /* (mu) 0 loading, 1 ready, -1 failed */
    char load_msg[512]; /* (mu) */
    bool load_seen;     /* the loop has seen the load end (and prepared the template) */
    bool ready;         /* loop view: model and template usable */
    struct ebb_model *model;
    struct ebb_chat_template tmpl;
    struct ebb_gen_defaults gen_defaults; /* resolved for model under the configuration */
    char tmpl_err[512];
    int32_t fim_pre, fim_suf, fim_mid;
    long long created;
    size_t n_live;    /* requests submitted to it whose response is not yet freed */
    double last_used; /* monotonic seconds of the last request's start or end */
    double t_load;    /* monotonic seconds the current load started */
    double load_secs; /* how long the last load took */
    uint64_t n_loads, n_unloads;
    bool unload_asked; /* /models/unload or keep_alive 0 while busy: unload once idle */
    uint64_t lent;     /* what it was shrunk to for another model, store included; 0: none */
    uint64_t n_shrinks, n_regrows;
    bool shrink_tried; /* catalogue.c's shrink_idle: asked this round */
    /* Its file left the catalogue's source (catalogue_scan): out of the listings and the names,
     * unloaded once idle, freed once no request points at it (n_refs) and it is not def. */
    bool gone;
    size_t n_refs;       /* requests whose sv it is */
    uint64_t facts_size; /* the file's size when read_facts last failed (a copy under way) */
    /* Under a budget: what its load would add to the file, as its header tells
     * (read_facts; ebb__served_bytes). */
    struct ebb_model_memory est;
};

struct ebb_api {
    const struct ebb__handlers *h;
    uv_loop_t *loop;
    struct MHD_Daemon *mhd;
    bool use_epoll;
    uv_poll_t epoll_watch;
    bool epoll_started;
    struct ebb__fdpoll *fdpolls; /* fdset mode: polls of the last MHD_get_fdset */
    uv_timer_t mhd_timer;
    uv_timer_t tick;
    uv_async_t async;
    bool in_mhd;
    bool closing;
    uint16_t port;
    bool loopback;
    /* configuration (owned copies) */
    size_t max_body;
    char **api_keys;
    size_t n_api_keys;
    char **cors_origins;
    size_t n_cors_origins;
    char **allowed_hosts; /* Host names accepted besides the loopback ones ("*": any) */
    size_t n_allowed_hosts;
    unsigned timeout_s, keepalive_ms;
    size_t max_stream_buffer;
    struct ebb_sampling_set cfg_defaults; /* configured generation defaults */
    bool ignore_model_sampling;
    /* models (catalogue.c): one served model per catalogue entry; def is the one a request
     * that names none gets (the only one outside catalogue mode) */
    struct ebb__served **models; /* (n_models) sorted by id */
    size_t n_models;
    struct ebb__served *def;
    bool catalogue;       /* the API loads and unloads its models (no single -m) */
    char *added_template; /* catalogue mode: the configured chat template (NULL: the GGUF's) of
                           * models added later (ebb__catalogue_add) */
    /* catalogue mode: the source's scan (api.h's catalogue_scan; NULL: a fixed catalogue), with
     * scan_ud, and when the tick last asked it */
    int (*scan)(void *ud, const char *also, const struct ebb_api_model **models, size_t *n);
    void *scan_ud;
    double t_scan;
    /* data parallel: the devices every model has a replica on (copies); none: one replica on
     * the configured device */
    char *devices[EBB__MAX_REPLICAS];
    size_t n_devices;
    bool stopping;   /* quiesced or being freed: no model loads any more */
    bool freeing;    /* ebb_api_free: the engines are gone, nothing may reach them */
    uint64_t budget; /* bytes all loaded models may take together; 0: no limit */
    pthread_mutex_t mu;
    struct ebb__req *ready_head; /* (mu) requests with engine output to process */
    struct ebb__metrics metrics;
    struct ebb__req *live;   /* requests with a generation in progress */
    bool hold;               /* a model swap is pending: new generations wait */
    bool draining;           /* SIGTERM: /health and new generations 503, idle conns closed */
    struct ebb__req *parked; /* suspended until the hold ends */
    size_t n_gen_conns;      /* connections with a generation whose response is not complete */
    struct ebb__limits limits;
    /* Stored responses of /v1/responses (api/responses/ creates the store on first use and
     * frees it through store_free); store_cap is the configured size. */
    unsigned resp_store_cap;
    void *resp_store;
    void (*resp_store_free)(void *store);
    char *models_dir;        /* /api/pull's target; NULL: refused */
    struct ebb__pull *pulls; /* pulls running (api/ollama/pull.c) */
    void (*on_ready)(void *ud, bool ok, const char *msg);
    void *ud;
};

/* Queues a JSON or text response and records its status. body is copied. */
void ebb__reply(struct ebb__req *r, unsigned status, const char *ctype, const char *body,
                size_t len);
/* Queues obj (stolen) as compact JSON. */
void ebb__reply_json(struct ebb__req *r, unsigned status, json_t *o);
/* Queues an error object: OpenAI's, Anthropic's under /v1/messages (ebb__anthropic_path) or
 * Ollama's under /api/ (ebb__ollama_path). */
void ebb__reply_error(struct ebb__req *r, unsigned status, const char *message, const char *param,
                      const char *code);
/* Adds the CORS headers for r's origin to a response. */
void ebb__add_cors(struct ebb__req *r, struct MHD_Response *resp);
/* Resumes a suspended connection (closing its hang-up watch) and schedules an MHD run. */
void ebb__resume(struct ebb__req *r);
/* Suspends r's connection and watches the socket for a client hang-up. */
void ebb__suspend(struct ebb__req *r);
/* A content reader's copy of r's queued output (r->out from r->out_off) into MHD's buf: up to
 * max bytes, the buffer emptied once all of it went. Returns the bytes copied (0: none queued). */
size_t ebb__out_take(struct ebb__req *r, char *buf, size_t max);
/* Suspends r until the hold on new generations ends (ebb_api_hold) or its model has loaded. */
void ebb__park(struct ebb__req *r);
/* Takes r off the parked list (it stays suspended). */
void ebb__unpark(struct ebb__req *r);
/* Schedules MHD_run on the next loop iteration. */
void ebb__kick(struct ebb_api *a);
/* The generation (openai/gen.c) is done with the engine for r: r leaves the live list and is
 * freed if MHD is done with its connection too. */
void ebb__req_engine_released(struct ebb__req *r);
/* ebb_api_new's body (server.c): h names the routes' and the generator's entry points. */
ebb_err ebb__server_new(uv_loop_t *loop, const struct ebb_api_config *cfg,
                        const struct ebb__handlers *h, struct ebb_api **out, struct ebb_diag *diag);

#endif
