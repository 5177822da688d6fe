/* Private to api/: the server, per-request state, request parsing and OpenAI objects. */
#ifndef EBB_API_API_INT_H
#define EBB_API_API_INT_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>

#include "api.h"
#include "api/chat/chat-template.h"
#include "api/defaults/defaults.h"
#include "sched/sampler.h"
#include "api/tools/tools.h"

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

/* ---- request parsing (params.c) ---------------------------------------------------------- */

/* A validation failure: HTTP 400 with message naming param. */
struct ebb__perr {
    char msg[512];
    const char *param; /* static string or NULL */
};

/* ---- tools (tools-req.c, tools-render.c) ------------------------------------------------ */

enum ebb__tool_choice {
    EBB__TC_NONE = 0, /* no tools, or tool_choice "none": plain text, output not parsed */
    EBB__TC_AUTO,     /* the model may call the tools */
    EBB__TC_REQUIRED, /* it must call one */
    EBB__TC_NAMED,    /* it must call the named one */
};

struct ebb__tool_req {
    json_t *tools; /* the validated tools array (borrowed from the request), NULL if none */
    enum ebb__tool_choice choice;
    const char *name; /* EBB__TC_NAMED */
    bool parallel;    /* parallel_tool_calls (default true) */
};

/* Validates tools, tool_choice and parallel_tool_calls of the request object o into t. On
 * failure fills e (param names the field) and returns EBB_EINVAL. */
ebb_err ebb__tool_req_parse(json_t *o, struct ebb__tool_req *t, struct ebb__perr *e);

/* message.tool_calls for a parsed answer: [{id, type, function: {name, arguments}}]. */
json_t *ebb__tool_calls_json(const struct ebb_tool_result *res);
/* The chat delta for a call event: {"tool_calls": [{index, id, type, function: {name,
 * arguments: ""}}]} for CALL_BEGIN, {"tool_calls": [{index, function: {arguments}}]} for
 * CALL_ARGS; NULL for content. */
json_t *ebb__tool_delta(const struct ebb_tool_ev *ev);

/* The GBNF grammar (*out, malloc'd) that admits only calls for tool_choice required or named:
 * the format f's markup around call objects whose arguments follow each tool's parameters
 * schema; up to four calls for required with parallel_tool_calls, one otherwise. A schema the
 * converter cannot enforce is EBB_EINVAL with e naming the tool. */
ebb_err ebb__tool_grammar(const struct ebb__tool_req *t, enum ebb_tool_format f, char **out,
                          struct ebb__perr *e);

/* Renders a chat prompt (with the generation header) offering tools (NULL: none): through the
 * template itself when it knows tools, else with the fallback tools-render.c describes. Errors
 * as ebb_chat_template_render. */
ebb_err ebb__tools_render(const struct ebb_chat_template *t, const struct ebb_chat_msg *msgs,
                          size_t n, const json_t *tools, char **out, size_t *out_len,
                          struct ebb_diag *diag);

struct ebb__gen_req {
    json_t *doc; /* owns every string below */
    bool chat;
    const char *model;         /* NULL if absent or empty */
    struct ebb_chat_msg *msgs; /* (n_msgs), chat only; content is owned by doc or parts_buf */
    size_t n_msgs;
    char **parts_buf;   /* (n_msgs) concatenated text parts, NULL entries for plain strings */
    const char *prompt; /* completions: text prompt, or NULL when prompt_ids is used */
    size_t prompt_len;
    int32_t *prompt_ids; /* (n_prompt_ids) completions: token-array prompt */
    size_t n_prompt_ids;
    const char *suffix;
    bool echo;
    bool stream;
    bool include_usage;
    bool logprobs;
    uint32_t top_logprobs;
    bool max_tokens_set;
    unsigned sent; /* EBB_DEF_BIT of each sampling field the request set (api/defaults.h) */
    struct ebb_gen_params gp;    /* sampling fields not in sent hold ebb_sampling_defaults() */
    struct ebb_logit_bias *bias; /* (gp.sampling.n_logit_bias) */
    struct ebb__tool_req tools;  /* chat only */
    char *grammar;      /* GBNF from response_format, json_schema or grammar; NULL if none */
    uint32_t n_choices; /* n, 1..EBB_SCHED_MAX_CHOICES (gen.c checks it against the slots) */
};

/* Parses and validates a chat (chat = true) or completions body. On failure fills err and
 * returns EBB_EINVAL (EBB_ENOMEM for allocation failures). Unknown fields are ignored; fields ebb
 * does not implement that would change the answer (tools, response_format, grammar, ...) are
 * rejected unless they hold their neutral value. */
ebb_err ebb__gen_req_parse(const char *body, size_t n, bool chat, struct ebb__gen_req *r,
                           struct ebb__perr *err);
void ebb__gen_req_fini(struct ebb__gen_req *r);
/* params-format.c: response_format, json_schema and grammar -> r->grammar (at most one of them;
 * an unsupported schema keyword or a malformed field fails naming it). */
ebb_err ebb__parse_structured(json_t *o, struct ebb__gen_req *r, struct ebb__perr *e);

/* ---- jansson's allocator (jsonmem.c) ----------------------------------------------------- */

/* Makes jansson allocate through ebb__json_alloc_failed's record (once, before any JSON). */
void ebb__json_alloc_init(void);
/* True if a jansson allocation failed on this thread since the last clear; clear resets. */
bool ebb__json_alloc_failed(bool clear);

/* ---- OpenAI objects (objects.c) ---------------------------------------------------------- */

/* {"error":{"message","type","param","code"}} as compact JSON, malloc'd. */
char *ebb__error_json(const char *message, const char *type, const char *param, const char *code);
/* The error type OpenAI uses for an HTTP status. */
const char *ebb__error_type(unsigned status);
/* Anthropic's error object for an HTTP status, {"type":"error","error":{"type","message"}}, as
 * compact JSON, malloc'd (/v1/messages answers its errors in this shape). */
char *ebb__anthropic_error_json(unsigned status, const char *message);

/* One token's logprob record as the engine reported it. */
struct ebb__lp {
    int32_t id;
    float logprob;
    uint32_t n_top;
    int32_t top_ids[EBB_SAMPLE_MAX_TOP];
    float top_logprobs[EBB_SAMPLE_MAX_TOP];
};

/* Chat logprobs.content entries for lps[0..n): [{token, logprob, bytes, top_logprobs}]. */
json_t *ebb__chat_logprobs(const struct ebb_tokenizer *tok, const struct ebb__lp *lps, size_t n);
/* Completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset}. text_offset
 * starts at offset. */
json_t *ebb__compl_logprobs(const struct ebb_tokenizer *tok, const struct ebb__lp *lps, size_t n,
                            size_t offset);

/* True if s[0..n) is valid UTF-8. */
bool ebb__utf8_valid(const char *s, size_t n);
/* Appends s[0..n) (valid UTF-8) as a JSON string literal, quotes included. */
void ebb__json_escape(struct ebb__abuf *b, const char *s, size_t n);

/* Appends "data: <compact json>\n\n" for obj (stolen) to b. */
void ebb__sse_event(struct ebb__abuf *b, json_t *obj);

/* Appends the valid UTF-8 prefix handling for JSON: jansson rejects invalid UTF-8, so text is
 * made valid (U+FFFD for bad bytes) before it becomes a JSON string. */
json_t *ebb__json_text(const char *s, size_t n);

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
    EBB__EP_COUNT
};

/* Why the edge limits (limits.c) refused or closed a connection. */
enum ebb__refusal {
    EBB__REFUSE_CLIENT = 0,     /* over max_connections_per_client */
    EBB__REFUSE_GLOBAL,         /* over max_connections */
    EBB__REFUSE_HEADER_TIMEOUT, /* no complete request head within header_timeout */
    EBB__REFUSE_BODY_TIMEOUT,   /* no complete body within body_timeout */
    EBB__REFUSE_N
};

#define EBB__N_STATUS 10
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

/* ---- server and requests (server.c, gen.c) ----------------------------------------------- */

enum ebb__watch { EBB__WATCH_IDLE = 0, EBB__WATCH_ACTIVE, EBB__WATCH_CLOSING };

/* A wire format other than OpenAI's chat/completions chunks over the same generation
 * (messages.c, embeddings.c): gen.c calls these instead of writing its own. All on the loop
 * thread; ext is the format's per-request state. */
struct ebb__req;
struct ebb__gen_fmt {
    void (*stream_open)(struct ebb__req *r); /* the 200 is being queued: the first events */
    void (*stream_text)(struct ebb__req *r, const char *text, size_t n); /* released text */
    void (*stream_end)(struct ebb__req *r); /* the engine is done (gen->res): final events, and
                                               sets gen->finished */
    void (*body)(struct ebb__req *r);       /* non-stream: the whole reply (gen->text, res) */
    void (*free)(void *ext);                /* from ebb__gen_free; ext may be NULL */
};

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
    struct ebb_tool_stream *tp; /* streams with tools: the incremental parser of its output */
};

/* Generation state of one request. Fields marked (mu) are shared with the engine thread under
 * api->mu; the rest belong to the loop thread. */
struct ebb__gen {
    char id[48];
    long long created;
    bool chat, stream, include_usage, logprobs;
    uint32_t n_prompt;
    uint64_t job_id;
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
    bool gen_counted;            /* counted in api->n_gen_conns */
    bool engine_ref;             /* the engine may still call the sink */
    bool in_ready;               /* (mu) queued on api->ready */
    struct ebb__req *ready_next; /* (mu) */
    struct ebb__req *pump_next;  /* loop thread only: on_async's batch being pumped */
    bool suspended;
    bool disconnected;
    bool parked; /* waiting for ebb_api_hold(false) */
    struct ebb__req *park_prev, *park_next;
    enum ebb__watch watch_state;
    uv_poll_t watch;      /* client hang-up detection while suspended */
    struct ebb__abuf out; /* SSE bytes not yet handed to MHD */
    size_t out_off;
    double last_out;
    struct ebb__req *live_prev, *live_next;
};

struct ebb__fdpoll;

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
    unsigned n_requests; /* answered on this connection */
    uint8_t key[16], key_len; /* client address bytes (4 or 16), 0: not counted per address */
    struct ebb__conn *prev, *next;
};

/* Open connections of one client address. */
struct ebb__addr {
    uint8_t key[16], len;
    unsigned n;
};

struct ebb__limits {
    double header_s, body_s; /* phase deadlines; 0: none */
    double idle_s;           /* keep-alive wait for the next request (request_timeout); 0: none */
    unsigned max_conns, max_per_client; /* 0: no cap */
    struct ebb__conn *conns;
    size_t n_conns;
    struct ebb__addr *addrs; /* (n_addrs) addresses with open connections */
    size_t n_addrs, cap_addrs;
    double last_log[EBB__REFUSE_N];
    uint64_t pending_log[EBB__REFUSE_N];
};

/* The con_cls of a request the limits answered (never an ebb__req). */
extern void *const ebb__limits_refused;
/* Takes the deadlines and caps of cfg (at start and on reload). */
void ebb__limits_set(struct ebb__limits *l, const struct ebb_api_config *cfg);
void ebb__limits_fini(struct ebb__limits *l);
/* MHD's accept policy (cls: the api): closes connections past the caps' headroom. */
enum MHD_Result ebb__limits_accept(void *cls, const struct sockaddr *sa, socklen_t len);
/* MHD's connection notification (cls: the api): tracks each connection. */
void ebb__limits_notify(void *cls, struct MHD_Connection *mc, void **socket_context,
                        enum MHD_ConnectionNotificationCode code);
/* MHD's access handler (cls: the api): moves the connection through its phases, answers the
 * requests of connections over a cap (except /health), then calls api->h->on_access. */
enum MHD_Result ebb__limits_access(void *cls, struct MHD_Connection *mc, const char *url,
                                   const char *method, const char *version, const char *upload,
                                   size_t *upload_size, void **con_cls);
/* MHD's URI log callback (cls: the api): the request line has arrived. Returns NULL. */
void *ebb__limits_uri(void *cls, const char *uri, struct MHD_Connection *mc);
/* A request of mc is complete: the connection waits for the next one (header phase). */
void ebb__limits_request_done(struct MHD_Connection *mc);
/* Shuts down the sockets past their deadline; true if it shut any (then run MHD). */
bool ebb__limits_sweep(struct ebb_api *a);

/* What server.c calls in the files above it (routes.c, gen.c); api.c fills it. */
struct ebb__handlers {
    MHD_AccessHandlerCallback on_access; /* ebb__on_access */
    void (*gen_pump)(struct ebb__req *r);
    void (*gen_keepalive)(struct ebb__req *r, double now);
    void (*gen_conn_closed)(struct ebb__req *r);
    void (*gen_free)(struct ebb__gen *g);
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
    char *model_id;
    char *chat_template;
    size_t max_body;
    char **api_keys;
    size_t n_api_keys;
    char **cors_origins;
    size_t n_cors_origins;
    unsigned timeout_s, keepalive_ms;
    size_t max_stream_buffer;
    struct ebb_sampling_set cfg_defaults; /* configured generation defaults */
    bool ignore_model_sampling;
    long long model_created;
    /* model */
    struct ebb_sched *sched;
    pthread_mutex_t mu;
    int load_state; /* (mu) 0 loading, 1 ready, -1 failed */
    char load_msg[512];
    bool load_seen; /* the loop has prepared the template for the loaded model */
    bool ready;     /* loop view: model and template usable */
    struct ebb_model *model;
    struct ebb_chat_template tmpl;
    struct ebb_gen_defaults gen_defaults; /* resolved for model under the configuration */
    char tmpl_err[512];
    int32_t fim_pre, fim_suf, fim_mid;
    struct ebb__req *ready_head; /* (mu) requests with engine output to process */
    struct ebb__metrics metrics;
    struct ebb__req *live;   /* requests with a generation in progress */
    bool hold;               /* a model swap is pending: new generations wait */
    struct ebb__req *parked; /* suspended until the hold ends */
    size_t n_gen_conns;      /* connections with a generation whose response is not complete */
    struct ebb__limits limits;
    void (*on_ready)(void *ud, bool ok, const char *msg);
    void *ud;
};

double ebb__now(void);
double ebb__unix_now(void);
/* Queues a JSON or text response and records its status. body is copied. */
void ebb__reply(struct ebb__req *r, unsigned status, const char *ctype, const char *body,
                size_t len);
/* Queues obj (stolen) as compact JSON. */
void ebb__reply_json(struct ebb__req *r, unsigned status, json_t *o);
/* MHD's access handler (routes.c). */
enum MHD_Result ebb__on_access(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls);
/* Queues an OpenAI error object. */
void ebb__reply_error(struct ebb__req *r, unsigned status, const char *message, const char *param,
                      const char *code);
/* Adds the CORS headers for r's origin to a response. */
void ebb__add_cors(struct ebb__req *r, struct MHD_Response *resp);
/* Resumes a suspended connection (closing its hang-up watch) and schedules an MHD run. */
void ebb__resume(struct ebb__req *r);
/* Suspends r's connection and watches the socket for a client hang-up. */
void ebb__suspend(struct ebb__req *r);
/* Suspends r until the hold on new generations ends (ebb_api_hold). */
void ebb__park(struct ebb__req *r);
/* Schedules MHD_run on the next loop iteration. */
void ebb__kick(struct ebb_api *a);
/* ebb_api_new's body (server.c): h names the routes' and the generator's entry points. */
ebb_err ebb__server_new(uv_loop_t *loop, const struct ebb_api_config *cfg,
                        const struct ebb__handlers *h, struct ebb_api **out, struct ebb_diag *diag);

/* gen.c: /v1/chat/completions and /v1/completions. Called with the full body; called again
 * after a resume (r->gen set). */
void ebb__gen_handle(struct ebb__req *r);
/* Engine output for r arrived (loop thread, from the async callback). */
void ebb__gen_pump(struct ebb__req *r);
/* The keep-alive sweep: an SSE comment for streams idle longer than keepalive_ms. */
void ebb__gen_keepalive(struct ebb__req *r, double now);
/* MHD is done with r's connection; cancels the job if it still runs. */
void ebb__gen_conn_closed(struct ebb__req *r);
void ebb__gen_free(struct ebb__gen *g);
/* A zeroed generation with n_choices (>= 1) outputs; NULL when out of memory. */
struct ebb__gen *ebb__gen_new(uint32_t n_choices);
/* True when the model is ready for a generation; otherwise r was answered (503) or parked until
 * a model swap ends. */
bool ebb__gen_ready(struct ebb__req *r);
/* Renders and tokenizes q's prompt and submits it as g (fmt and ext set by the caller, the rest
 * zero; owned from here on, also on failure, when it is freed after an error reply). */
void ebb__gen_run(struct ebb__req *r, struct ebb__gen_req *q, struct ebb__gen *g);
/* Submits ids as generation g of r (owned by r from here on): registers the request as live
 * and either queues the stream's headers (fmt->stream_open) or suspends until the body. Replies
 * with an error when the scheduler refuses the job. */
void ebb__gen_submit(struct ebb__req *r, struct ebb__gen *g, const int32_t *ids, uint32_t n_ids,
                     const struct ebb_gen_params *gp);
/* embeddings.c: /v1/embeddings. Called with the full body, and again after a resume. */
void ebb__embeddings_handle(struct ebb__req *r);
/* Scales v[0..n) to unit L2 length (a zero vector stays zero). */
void ebb__embd_normalize(float *v, uint32_t n);
/* Base64 of n floats as little-endian float32 bytes into out (room for 4 * ceil(4n / 3) + 1
 * bytes), NUL-terminated; returns the length. */
size_t ebb__base64_f32(const float *v, uint32_t n, char *out);
/* messages.c: /v1/messages (Anthropic). Called with the full body, and again after a resume. */
void ebb__messages_handle(struct ebb__req *r);
/* /tokenize and /detokenize. */
void ebb__tokenize_handle(struct ebb__req *r, bool detok);

/* gen.c's steps for tools. tool_choice required or named: builds the call grammar into q (its
 * grammar and gp.grammar); returns 0, or the HTTP status after replying (400 for a schema that
 * cannot be enforced or a second constraint). */
unsigned ebb__tools_constrain(struct ebb__req *r, struct ebb__gen_req *q);
/* Turns on the tool-call parser for r's output (r->gen set): the tools reference, the call
 * limit, the control tokens of the markup, and for streams the incremental parser. */
ebb_err ebb__tools_setup(struct ebb__req *r, const struct ebb__tool_req *t);

#endif
