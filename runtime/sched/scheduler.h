/* The engine thread and its request queue. A scheduler owns one model (opened on its own thread,
 * after the caller is already serving, so health checks can answer "loading"), a FIFO queue of
 * submitted jobs bounded by queue_cap, and n_seq sequence slots. Each engine step is one
 * batched forward pass (ebb_model_eval_batch): the next token of every decoding slot together
 * with at most prefill_chunk tokens of prompts (oldest job first), so a long prefill is chunked
 * and interleaved with running streams, and a cancel waits at most one step. A queued job goes
 * to the free slot whose cached tokens share the longest prefix with its prompt. A slot's
 * sequence about to be overwritten goes into the model's prompt-cache store (at least
 * EBB__PCACHE_MIN tokens of it lost; least recently used entries evicted to make room), and a
 * job whose prompt shares a longer prefix with a store entry than with its slot gets that
 * entry's KV entries copied into the slot, so only the rest of the prompt is evaluated.
 *
 * Results go out through a sink whose callbacks run on the engine thread: they must be short
 * and must not call back into the scheduler except ebb_sched_cancel. Text handed to the sink is
 * already detokenized, never splits a UTF-8 character, and has stop strings removed (text that
 * could be the start of a stop string is held back until it is known not to be). */
#ifndef EBB_RUNTIME_SCHEDULER_H
#define EBB_RUNTIME_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "model/model.h"
#include "sampler.h"

#define EBB_SCHED_MAX_STOP 4
#define EBB_SCHED_MAX_STOP_LEN 256
#define EBB_SCHED_MAX_CHOICES 16 /* choices of one job (OpenAI's n) at most */

/* What a job asks of the engine besides its prompt. */
struct ebb_gen_params {
    uint32_t max_tokens;          /* 0: until the context is full */
    struct ebb_sampling sampling; /* copied at submit (logit_bias included) */
    uint32_t n_top_logprobs;      /* alternatives per token, <= EBB_SAMPLE_MAX_TOP */
    bool logprobs;                /* report the chosen token's logprob (and n_top_logprobs) */
    bool ignore_eos;              /* keep generating past end-of-generation tokens */
    /* Speculative decoding with n-gram drafts (docs/STREAMER.md): at most this many drafts per
     * pass, 1..EBB_SPEC_DRAFT_CAP; 0 off; -1 (the default) the scheduler's spec_max. Output and
     * usage are the same as without; ignored for grammar and embedding jobs. */
    int32_t spec_max;
    uint32_t n_stop;
    const char *stop[EBB_SCHED_MAX_STOP]; /* NUL-terminated, copied at submit, non-empty */
    /* GBNF grammar (start rule "root") the output must follow, or NULL. Compiled at submit
     * (a syntax error is EBB_EINVAL naming line and column); tokens it does not allow are masked
     * before sampling, end-of-generation tokens are allowed only where the grammar can end, and
     * the job finishes (EBB_FINISH_STOP) once the grammar is complete and allows nothing more. */
    const char *grammar;
    /* Embedding job (n_embed > 0): nothing is sampled. The prompt is n_embed inputs end to end,
     * input i being embed_len[i] tokens (1..n_ctx; copied at submit), each evaluated from
     * position 0 of the slot in prefill chunks like a prompt. embed_out (n_embed x
     * ebb_model_n_embd floats, the caller's, alive until on_done) receives each input's mean
     * hidden state after the final norm (mean pooling; not normalised). */
    uint32_t n_embed;
    const uint32_t *embed_len;
    float *embed_out;
    /* Choices (OpenAI's n; 0 means 1), at most EBB_SCHED_MAX_CHOICES and the scheduler's
     * slots; a job waits in the queue until that many slots are free. The prompt is evaluated
     * once, in the first choice's slot (reusing its cached prefix), then its KV entries are
     * copied into the other choices' slots (ebb_model_kv_copy) and every choice samples from
     * the prompt's last logits with a sampler of its own: with a fixed seed, choice i's is
     * seed + i (a request with that seed and one choice draws the same). Each choice then
     * decodes in its own slot and ends on its own (stop strings, max_tokens, grammar and
     * speculative drafts apply per choice). Not for embedding jobs. */
    uint32_t n_choices;
};

/* Fills p with the defaults: sampler defaults, no limit, no logprobs, no stop strings. */
void ebb_gen_params_defaults(struct ebb_gen_params *p);

enum ebb_finish {
    EBB_FINISH_NONE = 0,
    EBB_FINISH_STOP,   /* end-of-generation token or a stop string */
    EBB_FINISH_LENGTH, /* max_tokens or the end of the context */
    EBB_FINISH_CANCEL, /* ebb_sched_cancel or shutdown */
    EBB_FINISH_ERROR,  /* the engine failed; see err and msg */
};

/* One generated token as the sink sees it. */
struct ebb_sched_token {
    const char *text; /* newly released text; may be empty (held back or a partial character) */
    size_t len;
    int32_t id;                         /* the sampled token */
    const struct ebb_sample_info *info; /* logprobs, or NULL if the job did not ask */
    uint32_t choice;                    /* the choice it belongs to, 0..n_choices-1 */
};

struct ebb_sched_result {
    enum ebb_finish finish;
    ebb_err err;       /* EBB_OK unless finish is EBB_FINISH_ERROR */
    char msg[256];     /* for errors */
    uint32_t n_prompt; /* prompt tokens */
    uint32_t n_cached; /* prompt tokens whose KV entries were reused from the slot's last job */
    uint32_t n_gen;    /* generated tokens (including a final end-of-generation token) */
    int stop_index;    /* EBB_FINISH_STOP: the index in gen_params.stop of the stop string that
                          ended the job, -1 for an end-of-generation token */
    double t_queue;    /* seconds waiting for a slot */
    double t_prefill;  /* seconds of prompt evaluation */
    double t_decode;   /* seconds from the first generated token to the end */
    uint32_t choice;   /* on_choice: which choice ended */
};

/* Callbacks on the engine thread. on_start comes once when the job leaves the queue, on_token
 * for each generated token, on_done exactly once at the end (also for cancelled jobs and at
 * shutdown); after on_done the scheduler never touches ud again. on_start, on_prefill,
 * on_token and on_choice may be NULL.
 *
 * A job with several choices: on_token says which choice each token belongs to; on_choice, if
 * set, comes once for each choice as it ends (its finish, n_gen, stop_index and timings; not
 * for a job cancelled while queued), then on_done once for the job: n_gen summed over the
 * choices, n_prompt and n_cached counted once, finish EBB_FINISH_ERROR if a choice failed (its
 * err and msg), else EBB_FINISH_CANCEL if a choice was cancelled, else choice 0's. */
struct ebb_sched_sink {
    void (*on_start)(void *ud);
    void (*on_prefill)(void *ud, uint32_t done, uint32_t total);
    void (*on_token)(void *ud, const struct ebb_sched_token *tok);
    void (*on_choice)(void *ud, const struct ebb_sched_result *res);
    void (*on_done)(void *ud, const struct ebb_sched_result *res);
    void *ud;
};

struct ebb_sched_params {
    struct ebb_model_params model; /* strings are copied */
    uint32_t queue_cap;            /* jobs waiting for a slot; 0 means 64 */
    uint32_t prefill_chunk;        /* tokens per prefill step; 0 means 128, and up to the model's
                                      ebb_model_long_rows in a step with no decoding rows */
    uint32_t spec_max; /* jobs with spec_max -1 draft up to this many n-gram tokens; 0: off */
    /* Called once on the engine thread when the model is open (rc EBB_OK) or failed to open
     * (msg says why). */
    void (*on_loaded)(void *ud, ebb_err rc, const char *msg);
    void *ud;
    /* If set, called on the engine thread just before it opens the model (ud as above), for
     * work such as reading the weights into the page cache with progress reports. */
    void (*before_open)(void *ud, const struct ebb_model_params *mp);
    /* Several schedulers of one daemon may share a gate (NULL: none): while an engine with
     * priority set has jobs, the others hold each next step, up to EBB_SCHED_GATE_HOLD_S at a
     * time, so that a latency-sensitive model (an editor's completion model) does not queue
     * its steps behind another model's batches on the same device. */
    struct ebb_sched_gate *gate;
    bool priority;
};

/* Longest a step waits at a gate for the priority engines to fall idle, in seconds: a stream
 * of priority requests slows the other models, never stops them. */
#define EBB_SCHED_GATE_HOLD_S 0.25

struct ebb_sched;
struct ebb_sched_gate;

/* A gate for ebb_sched_params.gate; NULL when out of memory. Free it after every scheduler
 * that uses it. */
struct ebb_sched_gate *ebb_sched_gate_new(void);
void ebb_sched_gate_free(struct ebb_sched_gate *g);
/* Steps that waited at g, and their total wait in seconds (any thread). */
void ebb_sched_gate_stats(struct ebb_sched_gate *g, uint64_t *holds, double *held_s);

/* Starts the engine thread, which opens the model and then serves jobs. Returns once the
 * thread runs; loading continues in the background. */
ebb_err ebb_sched_new(const struct ebb_sched_params *p, struct ebb_sched **out,
                      struct ebb_diag *diag);

/* Cancels every job (each gets on_done with EBB_FINISH_CANCEL), stops and joins the engine
 * thread and closes the model. Accepts NULL. Call from the thread that called _new. */
void ebb_sched_free(struct ebb_sched *s);

/* The model once on_loaded reported success, else NULL. Its tokenizer and GGUF metadata may be
 * read from any thread; evaluation belongs to the engine thread. */
struct ebb_model *ebb_sched_model(struct ebb_sched *s);

/* Queues a job. prompt (n_prompt >= 1 tokens) and p are copied. On success writes a job id for
 * ebb_sched_cancel; the sink's on_done will be called exactly once, possibly before this
 * returns to the caller's next statement (on another thread). Errors, with no callback:
 * EBB_EBUSY queue full, EBB_ECTX prompt does not fit the context, EBB_EINVAL bad params (more
 * choices than slots, among others) or no model yet, EBB_ENOMEM. Thread-safe. */
ebb_err ebb_sched_submit(struct ebb_sched *s, const int32_t *prompt, uint32_t n_prompt,
                         const struct ebb_gen_params *p, const struct ebb_sched_sink *sink,
                         uint64_t *job_id, struct ebb_diag *diag);

/* Asks a job to stop: a queued job ends at once, a running one within one engine step (one
 * prefill chunk or one token). Unknown or finished ids are ignored. Thread-safe. */
void ebb_sched_cancel(struct ebb_sched *s, uint64_t job_id);

/* Cancels every queued and running job (shutdown after the grace period). Thread-safe. */
void ebb_sched_cancel_all(struct ebb_sched *s);

/* Replaces the model between engine steps. Only while the first model is loaded and no job is
 * queued or running (else EBB_EBUSY): the caller holds new requests back and waits for
 * ebb_sched_stats to show none. The engine thread switches to m, sizes its slots for m (n_seq
 * slots, n_ctx, n_vocab) and forgets cached prefixes; *old receives the previous model, which
 * the caller closes. Blocks until the engine thread has done it. On error nothing changes and
 * m stays the caller's. Call from the thread that called _new. */
ebb_err ebb_sched_swap_model(struct ebb_sched *s, struct ebb_model *m, struct ebb_model **old,
                             struct ebb_diag *diag);

/* Any thread: a new streamer budget for the model (ebb_model_stream_budget); an idle engine
 * applies it at once (ebb_model_stream_settle), a busy one before its next evaluation, so
 * no running job notices more than a slower step. False when no model is loaded or it does
 * not stream. */
bool ebb_sched_stream_budget(struct ebb_sched *s, uint64_t budget);

/* Any thread, after ebb_model_stream_probe posted a reading (the daemon's probe period): an
 * idle engine re-plans on it at once (ebb_model_stream_settle), so a limit changed while no
 * request runs is followed within the period too; a busy engine does before its next
 * evaluation anyway. Nothing when no model is loaded or it does not stream. */
void ebb_sched_stream_poke(struct ebb_sched *s);

/* Changes how many jobs may wait (a configuration reload); jobs already queued stay. */
void ebb_sched_set_queue_cap(struct ebb_sched *s, uint32_t cap);

struct ebb_sched_stats {
    uint32_t queued;
    uint32_t active; /* busy slots (a job with n choices holds n) */
    uint32_t n_slots;
    /* Since start: engine steps (batched passes), the tokens (rows) and slots they evaluated,
     * and the latest step's; jobs started, their summed seconds in the queue; jobs that reused
     * a cached prompt prefix and the prompt tokens so reused. */
    uint64_t steps, batch_rows, batch_seqs;
    uint32_t last_batch_rows, last_batch_seqs;
    uint64_t jobs_started;
    double queue_wait_s;
    uint64_t cache_hits, cache_tokens;
    uint64_t spec_drafted, spec_accepted; /* speculative drafts verified, and accepted */
    uint64_t kv_copies; /* a prompt's KV entries copied into another choice's slot */
    /* The prompt-cache store (docs/ARCHITECTURE.md): jobs whose prefix came from it and the
     * tokens so reused (also counted in cache_hits and cache_tokens), sequences saved into it,
     * entries evicted to make room; entries held now, the bytes they hold and the store's. */
    uint64_t store_hits, store_tokens, store_saves, store_evictions;
    uint32_t store_entries;
    uint64_t store_bytes_used, store_bytes;
};

/* A consistent snapshot of the queue. Thread-safe. */
void ebb_sched_stats(struct ebb_sched *s, struct ebb_sched_stats *out);

/* What a replica's scheduler offers a prompt, for placing it among replicas: its free slots
 * and the longest prefix (tokens) that prompt shares with a free slot's cached tokens, the KV
 * entries that slot would reuse (best_slot's rule). Zeros before the model is loaded.
 * Thread-safe; reads the slots under the queue's lock, O(slots x prefix). */
struct ebb_sched_offer {
    uint32_t free_slots;
    uint32_t busy; /* queued jobs plus busy slots */
    uint32_t prefix;
};
void ebb_sched_offer(struct ebb_sched *s, const int32_t *prompt, uint32_t n_prompt,
                     struct ebb_sched_offer *out);

/* Data parallel placement (placement.c): which of n replicas takes a job, from their offers
 * (ready[i] false: replica i cannot take it). Among the replicas with a free slot, the one with
 * the longest shared prefix, if any shares one; else among those with a free slot, the least
 * busy; else (all full) the least busy; ties go to the lowest index. -1 when none is ready.
 * Pure: no lock, no state. */
int ebb_sched_place(const struct ebb_sched_offer *offers, const bool *ready, size_t n);

/* Stop-string matcher used by the engine, public for tests. Feed text pieces; it releases the
 * text that cannot be part of a stop string and reports when one matched. */
struct ebb_stopper {
    const char *stop[EBB_SCHED_MAX_STOP];
    size_t stop_len[EBB_SCHED_MAX_STOP];
    uint32_t n_stop;
    char held[EBB_SCHED_MAX_STOP_LEN];
    size_t n_held;
    const char *matched; /* the stop[] entry of the last match, NULL before one */
};

/* stop strings must stay alive while the stopper is used; each is 1..MAX_STOP_LEN-1 bytes. */
void ebb_stopper_init(struct ebb_stopper *st, const char *const *stop, uint32_t n_stop);
/* Appends text; writes the releasable text to out (cap >= n + EBB_SCHED_MAX_STOP_LEN always
 * suffices), sets *matched when a stop string completed (text from its start on is dropped).
 * Returns bytes written. */
size_t ebb_stopper_push(struct ebb_stopper *st, const char *text, size_t n, char *out, size_t cap,
                        bool *matched);
/* Releases whatever is held (generation ended for another reason). Returns bytes written. */
size_t ebb_stopper_flush(struct ebb_stopper *st, char *out, size_t cap);

#endif
