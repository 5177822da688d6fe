/* OpenAI's endpoints on the edge (api/http/http.h): /v1/chat/completions and /v1/completions
 * (gen.c, which other wire formats reuse through struct ebb__gen_fmt), /v1/embeddings, /tokenize
 * and /detokenize, the request bodies (params.c, params-format.c), tool fields and prompts with
 * tools (tools-req.c, tools-render.c) and the logprobs objects (logprobs.c). Loop thread only. */
#ifndef EBB_API_OPENAI_H
#define EBB_API_OPENAI_H

#include "api/http/http.h"
#include "api/tools/tools.h"

/* ---- request parsing (params.c) ---------------------------------------------------------- */

/* A validation failure: HTTP 400 with message naming param. */
struct ebb__perr {
    char msg[512];
    const char *param; /* static string, param_buf or NULL */
    char param_buf[320];
};

/* Sets e's message from fmt and its param (a static string or NULL); returns EBB_EINVAL. */
ebb_err ebb__perr_fail(struct ebb__perr *e, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

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
 * template itself when it knows tools, else with the fallback tools-render.c describes. vars:
 * extra template variables or NULL (ebb_chat_template_render_vars). Errors as
 * ebb_chat_template_render. */
ebb_err ebb__tools_render(const struct ebb_chat_template *t, const struct ebb_chat_msg *msgs,
                          size_t n, const json_t *tools, const json_t *vars, char **out,
                          size_t *out_len, struct ebb_diag *diag);

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
    unsigned
        sent; /* EBB_DEF_BIT of each sampling field the request set (api/defaults/defaults.h) */
    struct ebb_gen_params gp;    /* sampling fields not in sent hold ebb_sampling_defaults() */
    struct ebb_logit_bias *bias; /* (gp.sampling.n_logit_bias) */
    struct ebb__tool_req tools;  /* chat only */
    char *grammar;      /* GBNF from response_format, json_schema or grammar; NULL if none */
    uint32_t n_choices; /* n, 1..EBB_SCHED_MAX_CHOICES (gen.c checks it against the slots) */
    /* Reasoning (params.c): extra chat-template variables (chat_template_kwargs, and
     * enable_thinking from reasoning_effort; owned, NULL if none); effort_param names the field
     * that set enable_thinking (gen.c refuses it for a template without that switch), NULL if
     * none did; reasoning: split <think> blocks off the answer (reasoning_format, default on). */
    json_t *tmpl_vars;
    const char *effort_param;
    bool reasoning;
    bool think_open; /* gen.c: the rendered prompt ends inside a <think> block */
};

/* Parses and validates a chat (chat = true) or completions body. On failure fills err and
 * returns EBB_EINVAL (EBB_ENOMEM for allocation failures). Unknown fields are ignored; fields ebb
 * does not implement that would change the answer (tools, response_format, grammar, ...) are
 * rejected unless they hold their neutral value. */
ebb_err ebb__gen_req_parse(const char *body, size_t n, bool chat, struct ebb__gen_req *r,
                           struct ebb__perr *err);
void ebb__gen_req_fini(struct ebb__gen_req *r);
/* reasoning_effort (none/minimal: thinking off; low/medium/high/xhigh: on), chat_template_kwargs
 * and reasoning_format ("auto" or "deepseek": reasoning apart, "none": left in the content) of
 * the request object o into r. */
ebb_err ebb__parse_reasoning(json_t *o, struct ebb__gen_req *r, struct ebb__perr *e);
/* params-format.c: response_format, json_schema and grammar -> r->grammar (at most one of them;
 * an unsupported schema keyword or a malformed field fails naming it). */
ebb_err ebb__parse_structured(json_t *o, struct ebb__gen_req *r, struct ebb__perr *e);

/* ---- logprobs objects (logprobs.c) ------------------------------------------------------- */

/* Chat logprobs.content entries for lps[0..n): [{token, logprob, bytes, top_logprobs}]. */
json_t *ebb__chat_logprobs(const struct ebb_tokenizer *tok, const struct ebb__lp *lps, size_t n);
/* Completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset}. text_offset
 * starts at offset. */
json_t *ebb__compl_logprobs(const struct ebb_tokenizer *tok, const struct ebb__lp *lps, size_t n,
                            size_t offset);

/* ---- generation (gen.c) ------------------------------------------------------------------ */

/* A wire format other than OpenAI's chat/completions chunks over the same generation
 * (anthropic/messages.c, embeddings.c): gen.c calls these instead of writing its own. All on the
 * loop thread; ext is the format's per-request state. */
struct ebb__gen_fmt {
    void (*stream_open)(struct ebb__req *r); /* the 200 is being queued: the first events */
    void (*stream_text)(struct ebb__req *r, const char *text, size_t n); /* released text */
    void (*stream_end)(struct ebb__req *r); /* the engine is done (gen->res): final events, and
                                               sets gen->finished */
    void (*body)(struct ebb__req *r);       /* non-stream: the whole reply (gen->text, res) */
    void (*free)(void *ext);                /* from ebb__gen_free; ext may be NULL */
    /* The stream's Content-Type; NULL: "text/event-stream", with ": keep-alive" comments on
     * idle streams. A format that sets it (Ollama's NDJSON) gets no keep-alive comments. */
    const char *stream_type;
};

/* /v1/chat/completions and /v1/completions. Called with the full body; called again
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
/* Renders and tokenizes q's prompt exactly as ebb__gen_run would, without submitting anything:
 * *n_tokens is its length in tokens. Returns 0, or the HTTP status after replying (404 for
 * another model's id, 400 for a conversation the template rejects). */
unsigned ebb__gen_count_prompt(struct ebb__req *r, struct ebb__gen_req *q, uint32_t *n_tokens);
/* Submits ids as generation g of r (owned by r from here on): registers the request as live
 * and either queues the stream's headers (fmt->stream_open) or suspends until the body. Replies
 * with an error when the scheduler refuses the job. */
void ebb__gen_submit(struct ebb__req *r, struct ebb__gen *g, const int32_t *ids, uint32_t n_ids,
                     const struct ebb_gen_params *gp);
/* /tokenize and /detokenize (gen.c). */
void ebb__tokenize_handle(struct ebb__req *r, bool detok);

/* gen.c's steps for tools. tool_choice required or named: builds the call grammar into q (its
 * grammar and gp.grammar); returns 0, or the HTTP status after replying (400 for a schema that
 * cannot be enforced or a second constraint). */
unsigned ebb__tools_constrain(struct ebb__req *r, struct ebb__gen_req *q);
/* Turns on the tool-call parser for r's output (r->gen set): the tools reference, the call
 * limit, the control tokens of the markup, and for streams the incremental parser. */
ebb_err ebb__tools_setup(struct ebb__req *r, const struct ebb__tool_req *t);

/* ---- embeddings (embeddings.c) ---------------------------------------------------------- */

/* /v1/embeddings. Called with the full body, and again after a resume. */
void ebb__embeddings_handle(struct ebb__req *r);
/* Another wire format's answer to an embeddings request: rows (n_in, stride) of the engine's
 * mean-pooled vectors, not yet normalized (the writer may scale them in place), dims the width
 * asked for (<= stride), n_prompt the tokens evaluated. Replies on r. */
typedef void (*ebb__embd_write_cb)(struct ebb__req *r, float *rows, uint32_t n_in, uint32_t stride,
                                   uint32_t dims, uint32_t n_prompt);
/* Runs the embeddings request doc (an OpenAI /v1/embeddings body: input, dimensions; model
 * already checked by the caller, so left out of doc) and answers through write instead of
 * OpenAI's body. doc is borrowed. Resumes go to ebb__embeddings_handle as for /v1/embeddings. */
void ebb__embeddings_run(struct ebb__req *r, json_t *doc, ebb__embd_write_cb write);
/* Scales v[0..n) to unit L2 length (a zero vector stays zero). */
void ebb__embd_normalize(float *v, uint32_t n);
/* Base64 of n floats as little-endian float32 bytes into out (room for 4 * ceil(4n / 3) + 1
 * bytes), NUL-terminated; returns the length. */
size_t ebb__base64_f32(const float *v, uint32_t n, char *out);

#endif
