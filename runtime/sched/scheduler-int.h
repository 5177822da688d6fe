/* Private to runtime/sched: the scheduler's jobs, slots and state (scheduler.c: queue, admission,
 * the engine loop; scheduler-step.c: a slot's steps), and grammar-constrained sampling for one
 * slot (scheduler-grammar.c). Calls go one way: scheduler.c -> scheduler-step.c ->
 * scheduler-grammar.c, scheduler-stop.c. */
#ifndef EBB_RUNTIME_SCHEDULER_INT_H
#define EBB_RUNTIME_SCHEDULER_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "grammar/grammar.h"
#include "prompt-cache.h"
#include "sampler.h"
#include "scheduler.h"
#include "spec.h"

/* A slot's grammar buffers, allocated on its first grammar job and reused for the next ones
 * (reallocated only when the vocabulary size changes), so sampling allocates nothing. */
struct ebb__sgram {
    struct ebb_grammar_state *st;
    float *raw;       /* (n_vocab) the logits as the model gave them, for a masked second draw */
    uint8_t *allowed; /* ((n_bits + 7) / 8) the next-token mask */
    uint32_t n_vocab; /* the model's logits */
    uint32_t n_bits;  /* the larger of n_vocab and the trie's vocabulary */
    bool active;      /* the slot's current job has a grammar */
    /* this job: tokens sampled, how many needed the full mask, seconds in grammar work */
    uint64_t n_sampled, n_masked;
    double t_grammar;
};

/* Starts grammar g for a job whose model has n_vocab logits, with the tokenizer's trie (g NULL:
 * no grammar, trie unused). */
ebb_err ebb__sgram_begin(struct ebb__sgram *sg, const struct ebb_grammar *g,
                         const struct ebb_token_trie *trie, uint32_t n_vocab,
                         struct ebb_diag *diag);

/* Samples the next token under the grammar and advances it over the token. The sampled token is
 * checked first; only if the grammar rejects it is the full mask computed and the draw repeated
 * over the masked logits (llama.cpp's lazy scheme: most tokens cost one short check).
 * logits is the sampler's scratch as for ebb_sampler_sample. EBB_EINVAL when the grammar allows
 * no token at all. */
ebb_err ebb__sgram_sample(struct ebb__sgram *sg, const struct ebb_token_trie *trie,
                          struct ebb_sampler *smp, float *logits, int32_t *token,
                          struct ebb_sample_info *info, struct ebb_diag *diag);

/* True once the grammar is complete and allows nothing more. */
bool ebb__sgram_done(const struct ebb__sgram *sg);

/* Frees the buffers; the struct may be reused after. */
void ebb__sgram_fini(struct ebb__sgram *sg);

/* Candidates a slot may ask the pass for instead of the whole logit vector (the OpenCL
 * engine's device top-k keeps at most 64). */
#define EBB__SCHED_CAND_MAX 64

struct job {
    uint64_t id;
    int32_t *prompt; /* (n_prompt) */
    uint32_t n_prompt;
    struct ebb_gen_params gp;
    char stop_buf[EBB_SCHED_MAX_STOP][EBB_SCHED_MAX_STOP_LEN];
    struct ebb_logit_bias *bias; /* (gp.sampling.n_logit_bias), owned copy */
    struct ebb_grammar *grammar; /* compiled gp.grammar, or NULL */
    uint32_t *embed_len;         /* (gp.n_embed), owned copy */
    struct ebb_sched_sink sink;
    atomic_bool cancel;
    double t_submit;
    struct job *next;
    /* Choices (gp.n_choices, >= 1), each in a slot of its own; the job ends with the last. */
    uint32_t n_choices, n_live;
    bool forked;                 /* choice 0's prompt KV is in the other choices' slots */
    enum ebb_finish src_end;     /* choice 0 ended before that (its finish), else NONE */
    struct ebb_sched_result agg; /* several choices: what on_done gets, summed as they end */
};

struct slot {
    struct job *job;
    uint32_t choice;    /* which of its job's choices the slot runs; > 0 waits for choice 0's
                           prompt (prefilled false) until the copy of its KV entries */
    int32_t *kv_tokens; /* (n_ctx) tokens whose KV entries are valid, in position order */
    uint32_t n_kv;
    float *logits; /* (n_vocab) of the last evaluated token */
    struct ebb_sampler *smp;
    struct ebb__sgram gram; /* grammar jobs: buffers made on the first, kept for the next */
    struct ebb_detok detok;
    struct ebb_stopper stopper;
    uint32_t n_gen;
    uint32_t n_cached;
    uint32_t emb_i, emb_pos, emb_off; /* embedding job: input, position in it, its offset */
    bool prefilled;
    int32_t next_tok; /* decoding: the sampled token this step evaluates */
    uint32_t n_cand;  /* > 0: the pass returns this many top candidates, not logits */
    int32_t cand_ids[EBB__SCHED_CAND_MAX];
    float cand_logits[EBB__SCHED_CAND_MAX];
    struct ebb_model_out out; /* this step's outputs */
    /* Speculative jobs: the drafter (made on the slot's first one, kept), this job's drafts per
     * pass at most (0: plain), the drafts in the pass just evaluated (its rows are the drafter's
     * ebb_spec_rows) and the pass's tokens [next_tok, drafts...]; logprobs of a verified pass
     * (allocated with the drafter). */
    struct ebb_spec *spec;
    uint32_t spec_max, n_draft;
    int32_t spec_tok[EBB_SPEC_DRAFT_CAP + 1];
    struct ebb_sample_info *spec_info; /* (EBB_SPEC_DRAFT_CAP + 1) */
    double t_start, t_first;
    double t_used; /* when its last job ended (admission prefers the oldest) */
    struct ebb_sched_result res;
};

/* Counters of the engine's steps, summed by the engine and published under mu. */
struct ebb__step_stats {
    uint64_t steps, rows, seqs;           /* passes, tokens evaluated, slots evaluated */
    uint32_t last_rows, last_seqs;        /* the latest pass */
    uint64_t jobs;                        /* jobs started */
    double t_queue;                       /* their seconds in the queue */
    uint64_t cache_hits, cache_tokens;    /* jobs that reused a cached prefix, tokens reused */
    uint64_t spec_drafted, spec_accepted; /* speculative drafts verified, and accepted */
    uint64_t kv_copies;                   /* prompts copied into other choices' slots */
    /* the prompt-cache store: hits, tokens reused, saves, evictions (since start), entries,
     * bytes they hold, and the store's bytes */
    uint64_t pc_hits, pc_tokens, pc_saves, pc_evictions;
    uint32_t pc_entries;
    uint64_t pc_bytes_used, pc_bytes;
};

struct ebb_sched {
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
    bool cancel_all;
    struct job *q_head, *q_tail;
    uint32_t n_queued;
    uint32_t n_active;
    uint64_t next_id;
    uint32_t queue_cap;
    uint32_t prefill_chunk;
    bool prefill_auto; /* prefill_chunk by default: a step with no decoding rows takes up to
                          ebb_model_long_rows tokens of prompts (one layer-major pass) */
    uint32_t spec_max; /* the default of jobs that leave spec_max at -1 */
    double t_pass;     /* the last step's pass, seconds, and its slot count */
    uint32_t np_pass;
    uint64_t spec_drafted, spec_accepted; /* this step's, added to the step's stats */
    struct ebb_model *_Atomic model;
    struct ebb_model_params mp;
    char *path, *device;
    void (*on_loaded)(void *ud, ebb_err rc, const char *msg);
    void *ud;
    void (*before_open)(void *ud, const struct ebb_model_params *mp);
    struct ebb_sched_gate *gate; /* ebb_sched_params' */
    bool priority;
    bool gate_held; /* engine thread: this priority engine counts as busy at the gate */
    /* model swap (mu): the caller waits on swap_cv until the engine clears swap_pending */
    pthread_cond_t swap_cv;
    bool swap_pending;
    bool settle_pending; /* (mu) a streamer budget was posted: apply it while idle */
    struct ebb_model *swap_to, *swap_old;
    ebb_err swap_rc;
    char swap_msg[128];
    struct slot *slots; /* (n_slots) engine-thread owned except slot.job, which mu guards */
    uint32_t n_slots;
    struct ebb_model_seq *parts;  /* (n_slots) a step's batch */
    uint32_t *order;              /* (n_slots) a step's waiting prefills, oldest first */
    struct ebb__step_stats stats; /* (mu) published after every step */
    char *text_buf;               /* scratch for released text */
    size_t text_cap;
    struct ebb_token_trie *trie; /* engine thread: the model's token trie, built on first use */
    struct ebb__pcache pc;       /* engine thread: the prompt-cache store's index */
};

/* scheduler-step.c */
double ebb__now_s(void);
void ebb__job_free(struct job *j);
/* A job that ends before it ran (cancelled in the queue, shutdown). */
void ebb__job_cancelled(struct job *j, double t_queue);
/* One engine step: starts newly admitted jobs, then evaluates in one batched pass a token of
 * every decoding slot and as much prefill as the step's budget (prefill_chunk tokens) allows,
 * oldest job first; samples, releases text and ends jobs as they finish. Adds to *st. */
void ebb__sched_step(struct ebb_sched *s, struct ebb_model *m, struct ebb__step_stats *st);
/* Frees a slot's speculative-decoding state (the struct may be reused after). */
void ebb__slot_spec_fini(struct slot *sl);
#endif
