/* The engine thread: opens the model, then loops giving every active slot one step per turn. */
#include "scheduler.h"
#include "scheduler-int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

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
};

struct slot {
    struct job *job;
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
    double t_start, t_first;
    struct ebb_sched_result res;
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
    struct ebb_model *_Atomic model;
    struct ebb_model_params mp;
    char *path, *device;
    void (*on_loaded)(void *ud, ebb_err rc, const char *msg);
    void *ud;
    void (*before_open)(void *ud, const struct ebb_model_params *mp);
    /* model swap (mu): the caller waits on swap_cv until the engine clears swap_pending */
    pthread_cond_t swap_cv;
    bool swap_pending;
    struct ebb_model *swap_to, *swap_old;
    ebb_err swap_rc;
    char swap_msg[128];
    struct slot *slots; /* (n_slots) engine-thread owned except slot.job, which mu guards */
    uint32_t n_slots;
    char *text_buf; /* scratch for released text */
    size_t text_cap;
    struct ebb_token_trie *trie; /* engine thread: the model's token trie, built on first use */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- queue ------------------------------------------------------------------------------- */

static void job_free(struct job *j)
{
    if (!j)
        return;
    free(j->prompt);
    free(j->bias);
    ebb_grammar_free(j->grammar);
    free(j->embed_len);
    free(j);
}

static void job_finish(struct job *j, struct ebb_sched_result *r)
{
    j->sink.on_done(j->sink.ud, r);
    job_free(j);
}

static void job_cancelled(struct job *j, double t_queue)
{
    struct ebb_sched_result r = {.finish = EBB_FINISH_CANCEL, .n_prompt = j->n_prompt};
    r.t_queue = t_queue;
    job_finish(j, &r);
}

/* An embedding job's inputs: each 1..n_ctx tokens, together the whole prompt. */
static ebb_err check_embed(const struct ebb_gen_params *p, uint32_t n_prompt, uint32_t n_ctx,
                           struct ebb_diag *diag)
{
    if (!p->n_embed)
        return EBB_OK;
    if (!p->embed_len || !p->embed_out)
        return ebb_diag_set(diag, EBB_EINVAL, "an embedding job needs its lengths and output");
    uint64_t sum = 0;
    for (uint32_t i = 0; i < p->n_embed; i++) {
        if (p->embed_len[i] == 0 || p->embed_len[i] > n_ctx)
            return ebb_diag_set(diag, EBB_ECTX, "input %u has %u tokens, the context holds %u", i,
                                p->embed_len[i], n_ctx);
        sum += p->embed_len[i];
    }
    if (sum != n_prompt)
        return ebb_diag_set(diag, EBB_EINVAL, "the input lengths add up to %llu, not %u",
                            (unsigned long long)sum, n_prompt);
    return EBB_OK;
}

ebb_err ebb_sched_submit(struct ebb_sched *s, const int32_t *prompt, uint32_t n_prompt,
                         const struct ebb_gen_params *p, const struct ebb_sched_sink *sink,
                         uint64_t *job_id, struct ebb_diag *diag)
{
    struct ebb_model *m = atomic_load(&s->model);
    if (!m)
        return ebb_diag_set(diag, EBB_EINVAL, "the model is not loaded yet");
    if (n_prompt == 0)
        return ebb_diag_set(diag, EBB_EINVAL, "the prompt is empty");
    uint32_t n_ctx = ebb_model_n_ctx(m);
    if (n_prompt >= n_ctx && !p->n_embed)
        return ebb_diag_set(diag, EBB_ECTX, "the prompt has %u tokens, the context holds %u",
                            n_prompt, n_ctx);
    uint32_t n_vocab = ebb_model_n_vocab(m);
    for (uint32_t i = 0; i < n_prompt; i++) {
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= n_vocab)
            return ebb_diag_set(diag, EBB_EINVAL, "token %d is outside the vocabulary",
                                (int)prompt[i]);
    }
    if (p->n_top_logprobs > EBB_SAMPLE_MAX_TOP || p->n_stop > EBB_SCHED_MAX_STOP)
        return ebb_diag_set(diag, EBB_EINVAL, "too many logprobs or stop strings");
    ebb_err rc = check_embed(p, n_prompt, n_ctx, diag);
    if (rc)
        return rc;
    struct job *j = calloc(1, sizeof(*j));
    if (!j)
        return EBB_ENOMEM;
    j->prompt = malloc(sizeof(int32_t) * n_prompt);
    if (p->n_embed && (j->embed_len = malloc(sizeof(uint32_t) * p->n_embed)))
        memcpy(j->embed_len, p->embed_len, sizeof(uint32_t) * p->n_embed);
    if (!j->prompt || (p->n_embed && !j->embed_len)) {
        job_free(j);
        return EBB_ENOMEM;
    }
    memcpy(j->prompt, prompt, sizeof(int32_t) * n_prompt);
    j->n_prompt = n_prompt;
    j->gp = *p;
    for (uint32_t i = 0; i < p->n_stop; i++) {
        snprintf(j->stop_buf[i], sizeof(j->stop_buf[i]), "%s", p->stop[i]);
        j->gp.stop[i] = j->stop_buf[i];
    }
    if (p->sampling.n_logit_bias) {
        j->bias = malloc(sizeof(*j->bias) * p->sampling.n_logit_bias);
        if (!j->bias) {
            job_free(j);
            return EBB_ENOMEM;
        }
        memcpy(j->bias, p->sampling.logit_bias, sizeof(*j->bias) * p->sampling.n_logit_bias);
    }
    j->gp.sampling.logit_bias = j->bias;
    j->gp.grammar = NULL;
    if (p->grammar) {
        ebb_err grc =
            ebb_grammar_compile(p->grammar, strlen(p->grammar), "root", &j->grammar, diag);
        if (grc) {
            job_free(j);
            return grc;
        }
    }
    j->sink = *sink;
    atomic_init(&j->cancel, false);
    j->t_submit = now_s();

    pthread_mutex_lock(&s->mu);
    /* Jobs queued while slots are free have not been admitted yet; they do not wait. */
    uint32_t free_slots = s->n_slots - s->n_active;
    if (s->quit || s->n_queued >= s->queue_cap + free_slots) {
        bool quit = s->quit;
        pthread_mutex_unlock(&s->mu);
        job_free(j);
        return ebb_diag_set(diag, EBB_EBUSY,
                            quit ? "the server is shutting down" : "the request queue is full");
    }
    j->id = ++s->next_id;
    if (s->q_tail)
        s->q_tail->next = j;
    else
        s->q_head = j;
    s->q_tail = j;
    s->n_queued++;
    *job_id = j->id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return EBB_OK;
}

void ebb_sched_cancel(struct ebb_sched *s, uint64_t job_id)
{
    pthread_mutex_lock(&s->mu);
    for (struct job *j = s->q_head; j; j = j->next) {
        if (j->id == job_id)
            atomic_store(&j->cancel, true);
    }
    for (uint32_t i = 0; i < s->n_slots; i++) {
        if (s->slots[i].job && s->slots[i].job->id == job_id)
            atomic_store(&s->slots[i].job->cancel, true);
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void ebb_sched_cancel_all(struct ebb_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->cancel_all = true;
    for (struct job *j = s->q_head; j; j = j->next)
        atomic_store(&j->cancel, true);
    for (uint32_t i = 0; i < s->n_slots; i++) {
        if (s->slots[i].job)
            atomic_store(&s->slots[i].job->cancel, true);
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void ebb_sched_set_queue_cap(struct ebb_sched *s, uint32_t cap)
{
    pthread_mutex_lock(&s->mu);
    s->queue_cap = cap ? cap : 64;
    pthread_mutex_unlock(&s->mu);
}

void ebb_sched_stats(struct ebb_sched *s, struct ebb_sched_stats *out)
{
    pthread_mutex_lock(&s->mu);
    out->queued = s->n_queued;
    out->active = s->n_active;
    out->n_slots = s->n_slots;
    pthread_mutex_unlock(&s->mu);
}

struct ebb_model *ebb_sched_model(struct ebb_sched *s)
{
    return atomic_load(&s->model);
}

/* ---- engine ------------------------------------------------------------------------------ */

static void slot_end(struct ebb_sched *s, struct slot *sl, enum ebb_finish f, ebb_err err,
                     const char *msg)
{
    struct job *j = sl->job;
    double t = now_s();
    sl->res.finish = f;
    sl->res.err = err;
    if (msg)
        snprintf(sl->res.msg, sizeof(sl->res.msg), "%s", msg);
    sl->res.n_prompt = j->n_prompt;
    sl->res.n_cached = sl->n_cached;
    sl->res.n_gen = sl->n_gen;
    sl->res.stop_index = -1;
    for (uint32_t i = 0; f == EBB_FINISH_STOP && sl->stopper.matched && i < j->gp.n_stop; i++)
        if (j->gp.stop[i] == sl->stopper.matched)
            sl->res.stop_index = (int)i;
    if (sl->prefilled)
        sl->res.t_decode = sl->n_gen ? t - sl->t_first : 0;
    else
        sl->res.t_prefill = t - sl->t_start;
    ebb_sampler_free(sl->smp);
    sl->smp = NULL;
    if (sl->gram.active) {
        ebb_log(EBB_LOG_DEBUG, "grammar",
                "%llu tokens, %llu needed the full mask, %.2f ms in the grammar (%.3f ms/token)",
                (unsigned long long)sl->gram.n_sampled, (unsigned long long)sl->gram.n_masked,
                sl->gram.t_grammar * 1e3,
                sl->gram.n_sampled ? sl->gram.t_grammar * 1e3 / (double)sl->gram.n_sampled : 0.0);
        sl->gram.active = false;
    }
    pthread_mutex_lock(&s->mu);
    sl->job = NULL;
    s->n_active--;
    pthread_mutex_unlock(&s->mu);
    job_finish(j, &sl->res);
}

/* An embedding job needs every input's hidden states, so nothing cached is reused. */
static ebb_err embed_begin(struct slot *sl, struct ebb_model *m)
{
    struct job *j = sl->job;
    sl->n_kv = sl->n_cached = sl->n_gen = 0;
    sl->emb_i = sl->emb_pos = sl->emb_off = 0;
    sl->prefilled = false;
    memset(&sl->res, 0, sizeof(sl->res));
    ebb_stopper_init(&sl->stopper, NULL, 0);
    sl->t_start = now_s();
    sl->res.t_queue = sl->t_start - j->t_submit;
    memset(j->gp.embed_out, 0, sizeof(float) * j->gp.n_embed * ebb_model_n_embd(m));
    if (j->sink.on_start)
        j->sink.on_start(j->sink.ud);
    return EBB_OK;
}

/* One step of an embedding job: a chunk of the current input, summed into its output row,
 * which becomes the mean when the input is complete. */
static void embed_step(struct ebb_sched *s, struct slot *sl, struct ebb_model *m)
{
    struct job *j = sl->job;
    struct ebb_diag diag = {{0}};
    uint32_t len = j->embed_len[sl->emb_i], d = ebb_model_n_embd(m);
    uint32_t n = len - sl->emb_pos < s->prefill_chunk ? len - sl->emb_pos : s->prefill_chunk;
    float *row = j->gp.embed_out + (size_t)sl->emb_i * d;
    struct ebb_model_out out = {.hidden_sum = row};
    const int32_t *t = j->prompt + sl->emb_off + sl->emb_pos;
    ebb_err rc = ebb_model_eval(m, (uint32_t)(sl - s->slots), t, n, sl->emb_pos, &out, &diag);
    if (rc) {
        sl->n_kv = 0;
        slot_end(s, sl, EBB_FINISH_ERROR, rc, diag.msg);
        return;
    }
    memcpy(sl->kv_tokens + sl->emb_pos, t, sizeof(int32_t) * n);
    sl->emb_pos += n;
    sl->n_kv = sl->emb_pos;
    if (sl->emb_pos == len) {
        for (uint32_t i = 0; i < d; i++)
            row[i] /= (float)len;
        sl->emb_off += len;
        sl->emb_pos = 0;
        sl->emb_i++;
    }
    if (j->sink.on_prefill)
        j->sink.on_prefill(j->sink.ud, sl->emb_off + sl->emb_pos, j->n_prompt);
    if (sl->emb_i == j->gp.n_embed)
        slot_end(s, sl, EBB_FINISH_STOP, EBB_OK, NULL);
}

static ebb_err slot_begin(struct ebb_sched *s, struct slot *sl, struct ebb_model *m,
                          struct ebb_diag *diag)
{
    struct job *j = sl->job;
    if (j->gp.n_embed)
        return embed_begin(sl, m);
    ebb_err rc = ebb_sampler_new(&j->gp.sampling, ebb_model_n_vocab(m), &sl->smp, diag);
    if (rc)
        return rc;
    if (j->grammar && !s->trie && (rc = ebb_token_trie_new(ebb_model_tokenizer(m), &s->trie, diag)))
        return rc;
    if ((rc = ebb__sgram_begin(&sl->gram, j->grammar, s->trie, ebb_model_n_vocab(m), diag)))
        return rc;
    /* Reuse the KV entries of the longest common prefix with this slot's previous job; at least
     * one prompt token is evaluated so that there are logits to sample from. */
    uint32_t pfx = 0;
    while (pfx < sl->n_kv && pfx + 1 < j->n_prompt && sl->kv_tokens[pfx] == j->prompt[pfx])
        pfx++;
    sl->n_kv = pfx;
    sl->n_cached = pfx;
    sl->n_gen = 0;
    sl->prefilled = false;
    memset(&sl->res, 0, sizeof(sl->res));
    sl->t_start = now_s();
    sl->res.t_queue = sl->t_start - j->t_submit;
    ebb_detok_init(&sl->detok);
    ebb_stopper_init(&sl->stopper, j->gp.stop, j->gp.n_stop);
    for (uint32_t i = 0; i < j->n_prompt; i++)
        ebb_sampler_accept(sl->smp, j->prompt[i]);
    if (j->sink.on_start)
        j->sink.on_start(j->sink.ud);
    return EBB_OK;
}

static void emit(struct slot *sl, const char *text, size_t n, int32_t id,
                 const struct ebb_sample_info *info)
{
    struct job *j = sl->job;
    if (!j->sink.on_token)
        return;
    struct ebb_sched_token t = {.text = text, .len = n, .id = id, .info = info};
    j->sink.on_token(j->sink.ud, &t);
}

/* One step of a slot: a prefill chunk or one generated token. */
static void slot_step(struct ebb_sched *s, struct slot *sl, struct ebb_model *m)
{
    struct job *j = sl->job;
    struct ebb_diag diag = {{0}};
    uint32_t n_ctx = ebb_model_n_ctx(m);
    if (atomic_load(&j->cancel)) {
        slot_end(s, sl, EBB_FINISH_CANCEL, EBB_OK, NULL);
        return;
    }
    if (j->gp.n_embed) {
        embed_step(s, sl, m);
        return;
    }
    if (!sl->prefilled) {
        /* The last prompt token is always evaluated on its own, so its logits come from the
         * same single-token path whether or not the slot reused cached KV entries: devices
         * whose batched and single-token kernels round differently then still give the same
         * text for the same request and seed. */
        uint32_t left = j->n_prompt - sl->n_kv;
        uint32_t n = left > 1 ? left - 1 : 1;
        if (n > s->prefill_chunk)
            n = s->prefill_chunk;
        struct ebb_model_out out = {0};
        if (n == left)
            out.logits = sl->logits;
        ebb_err rc = ebb_model_eval(m, (uint32_t)(sl - s->slots), j->prompt + sl->n_kv, n, sl->n_kv,
                                    &out, &diag);
        if (rc) {
            sl->n_kv = 0;
            slot_end(s, sl, EBB_FINISH_ERROR, rc, diag.msg);
            return;
        }
        memcpy(sl->kv_tokens + sl->n_kv, j->prompt + sl->n_kv, sizeof(int32_t) * n);
        sl->n_kv += n;
        if (j->sink.on_prefill)
            j->sink.on_prefill(j->sink.ud, sl->n_kv, j->n_prompt);
        if (n == left) {
            sl->prefilled = true;
            sl->t_first = now_s();
            sl->res.t_prefill = sl->t_first - sl->t_start;
        }
        return;
    }

    const struct ebb_tokenizer *tok = ebb_model_tokenizer(m);
    struct ebb_sample_info info = {.n_top = j->gp.n_top_logprobs};
    int32_t id;
    ebb_err rc;
    if (sl->gram.active) {
        rc = ebb__sgram_sample(&sl->gram, s->trie, sl->smp, sl->logits, &id,
                               j->gp.logprobs ? &info : NULL, &diag);
        if (rc) {
            slot_end(s, sl, EBB_FINISH_ERROR, rc, diag.msg);
            return;
        }
    } else if ((rc = ebb_sampler_sample(sl->smp, sl->logits, &id, j->gp.logprobs ? &info : NULL))) {
        slot_end(s, sl, EBB_FINISH_ERROR, rc, "sampling failed: every token is banned");
        return;
    }
    ebb_sampler_accept(sl->smp, id);
    sl->n_gen++;
    const struct ebb_sample_info *pi = j->gp.logprobs ? &info : NULL;
    char *buf = s->text_buf;
    if (!j->gp.ignore_eos && ebb_tokenizer_is_eog(tok, id)) {
        size_t w = ebb_detok_finish(&sl->detok, buf, s->text_cap);
        bool matched = false;
        size_t w2 =
            ebb_stopper_push(&sl->stopper, buf, w, buf + w + 8, s->text_cap - w - 8, &matched);
        if (!matched)
            w2 += ebb_stopper_flush(&sl->stopper, buf + w + 8 + w2, s->text_cap - w - 8 - w2);
        emit(sl, buf + w + 8, w2, id, pi);
        slot_end(s, sl, EBB_FINISH_STOP, EBB_OK, NULL);
        return;
    }
    struct ebb_str piece = {0};
    if (ebb_tokenizer_piece(tok, id, false, &piece))
        piece.n = 0;
    /* Pieces are short; one is capped at 1 KiB, whose detokenized text (invalid bytes may
     * triple) fits the first 4 KiB of the scratch buffer; released text goes after it. */
    size_t pn = piece.n < 1024 ? (size_t)piece.n : 1024;
    size_t w = ebb_detok_push(&sl->detok, piece.p, pn, buf, 4096);
    bool matched = false;
    char *rel = buf + 4096;
    size_t rel_cap = s->text_cap - 4096;
    size_t w2 = ebb_stopper_push(&sl->stopper, buf, w, rel, rel_cap, &matched);
    /* A complete grammar that allows nothing more ends the job like a stop string. */
    bool g_done = ebb__sgram_done(&sl->gram);
    bool at_end = g_done || sl->n_gen >= (j->gp.max_tokens ? j->gp.max_tokens : UINT32_MAX) ||
                  sl->n_kv >= n_ctx;
    if (!matched && at_end) {
        size_t w3 = ebb_detok_finish(&sl->detok, buf, 4096);
        bool m2 = false;
        w2 += ebb_stopper_push(&sl->stopper, buf, w3, rel + w2, rel_cap - w2, &m2);
        matched = m2;
        if (!matched)
            w2 += ebb_stopper_flush(&sl->stopper, rel + w2, rel_cap - w2);
    }
    emit(sl, rel, w2, id, pi);
    if (matched || g_done) {
        slot_end(s, sl, EBB_FINISH_STOP, EBB_OK, NULL);
        return;
    }
    if (at_end) {
        slot_end(s, sl, EBB_FINISH_LENGTH, EBB_OK, NULL);
        return;
    }
    struct ebb_model_out out = {.logits = sl->logits};
    rc = ebb_model_eval(m, (uint32_t)(sl - s->slots), &id, 1, sl->n_kv, &out, &diag);
    if (rc) {
        sl->n_kv = 0;
        slot_end(s, sl, EBB_FINISH_ERROR, rc, diag.msg);
        return;
    }
    sl->kv_tokens[sl->n_kv++] = id;
}

/* Moves queued jobs into free slots and collects cancelled queued jobs. Called with mu held;
 * returns the cancelled jobs for the caller to finish outside the lock. */
static struct job *admit(struct ebb_sched *s)
{
    struct job *dead = NULL, **pp = &s->q_head, *prev = NULL;
    while (*pp) {
        struct job *j = *pp;
        if (atomic_load(&j->cancel)) {
            *pp = j->next;
            s->n_queued--;
            j->next = dead;
            dead = j;
            continue;
        }
        prev = j;
        pp = &j->next;
    }
    s->q_tail = prev;
    for (uint32_t i = 0; i < s->n_slots && s->q_head; i++) {
        if (s->slots[i].job)
            continue;
        struct job *j = s->q_head;
        s->q_head = j->next;
        if (!s->q_head)
            s->q_tail = NULL;
        j->next = NULL;
        s->n_queued--;
        s->slots[i].job = j;
        s->n_active++;
        s->slots[i].smp = NULL;
        s->slots[i].prefilled = true; /* marks "not begun": reset in slot_begin */
        s->slots[i].n_gen = UINT32_MAX;
    }
    return dead;
}

/* Engine thread, mu held, no job queued or running: switches to s->swap_to with freshly sized
 * slots. Allocates everything first so that a failure leaves the old model in place. */
static void engine_swap(struct ebb_sched *s, struct ebb_model **m)
{
    struct ebb_model *nm = s->swap_to;
    uint32_t n = ebb_model_n_seq(nm), n_ctx = ebb_model_n_ctx(nm), n_vocab = ebb_model_n_vocab(nm);
    struct slot *ns = calloc(n ? n : 1, sizeof(*ns));
    bool ok = ns != NULL && n >= 1;
    for (uint32_t i = 0; ok && i < n; i++) {
        ns[i].kv_tokens = malloc(sizeof(int32_t) * n_ctx);
        ns[i].logits = malloc(sizeof(float) * n_vocab);
        ok = ns[i].kv_tokens && ns[i].logits;
    }
    if (!ok) {
        for (uint32_t i = 0; ns && i < n; i++) {
            free(ns[i].kv_tokens);
            free(ns[i].logits);
        }
        free(ns);
        s->swap_rc = EBB_ENOMEM;
        snprintf(s->swap_msg, sizeof(s->swap_msg), "out of memory for the new model's slots");
    } else {
        for (uint32_t i = 0; i < s->n_slots; i++) {
            free(s->slots[i].kv_tokens);
            free(s->slots[i].logits);
            ebb__sgram_fini(&s->slots[i].gram);
        }
        free(s->slots);
        ebb_token_trie_free(s->trie);
        s->trie = NULL;
        s->slots = ns;
        s->n_slots = n;
        s->swap_old = *m;
        *m = nm;
        atomic_store(&s->model, nm);
        s->swap_rc = EBB_OK;
    }
    s->swap_pending = false;
    pthread_cond_broadcast(&s->swap_cv);
}

ebb_err ebb_sched_swap_model(struct ebb_sched *s, struct ebb_model *m, struct ebb_model **old,
                             struct ebb_diag *diag)
{
    pthread_mutex_lock(&s->mu);
    if (s->quit || !atomic_load(&s->model) || s->n_active || s->q_head) {
        pthread_mutex_unlock(&s->mu);
        return ebb_diag_set(diag, EBB_EBUSY, "the engine is busy or has no model yet");
    }
    s->swap_to = m;
    s->swap_old = NULL;
    s->swap_pending = true;
    pthread_cond_signal(&s->cv);
    while (s->swap_pending)
        pthread_cond_wait(&s->swap_cv, &s->mu);
    ebb_err rc = s->swap_rc;
    if (rc)
        ebb_diag_set(diag, rc, "%s", s->swap_msg);
    else
        *old = s->swap_old;
    s->swap_to = s->swap_old = NULL;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static void *engine_main(void *arg)
{
    struct ebb_sched *s = arg;
    struct ebb_diag diag = {{0}};
    struct ebb_model *m = NULL;
    if (s->before_open)
        s->before_open(s->ud, &s->mp);
    ebb_err rc = ebb_model_open(&s->mp, &m, &diag);
    if (!rc) {
        uint32_t n_ctx = ebb_model_n_ctx(m), n_vocab = ebb_model_n_vocab(m);
        for (uint32_t i = 0; i < s->n_slots && !rc; i++) {
            s->slots[i].kv_tokens = malloc(sizeof(int32_t) * n_ctx);
            s->slots[i].logits = malloc(sizeof(float) * n_vocab);
            if (!s->slots[i].kv_tokens || !s->slots[i].logits)
                rc = ebb_diag_set(&diag, EBB_ENOMEM, "out of memory for the slots");
        }
        if (rc) {
            ebb_model_close(m);
            m = NULL;
        }
    }
    if (!rc)
        atomic_store(&s->model, m);
    if (s->on_loaded)
        s->on_loaded(s->ud, rc, rc ? diag.msg : NULL);

    for (;;) {
        pthread_mutex_lock(&s->mu);
        struct job *dead = NULL;
        if (s->quit) {
            for (uint32_t i = 0; i < s->n_slots; i++) {
                if (s->slots[i].job)
                    atomic_store(&s->slots[i].job->cancel, true);
            }
            for (struct job *j = s->q_head; j; j = j->next)
                atomic_store(&j->cancel, true);
        }
        if (s->swap_pending && m && s->n_active == 0 && !s->q_head)
            engine_swap(s, &m);
        if (m)
            dead = admit(s);
        bool quit = s->quit;
        while (!quit && !dead && s->n_active == 0 && (!s->q_head || !m)) {
            pthread_cond_wait(&s->cv, &s->mu);
            quit = s->quit;
            if (s->swap_pending && m && s->n_active == 0 && !s->q_head)
                engine_swap(s, &m);
            if (m)
                dead = admit(s);
        }
        if (quit && !m) {
            dead = s->q_head;
            s->q_head = s->q_tail = NULL;
            s->n_queued = 0;
        }
        bool idle = s->n_active == 0;
        pthread_mutex_unlock(&s->mu);
        double t = now_s();
        while (dead) {
            struct job *n = dead->next;
            job_cancelled(dead, t - dead->t_submit);
            dead = n;
        }
        if (quit && idle && !s->q_head)
            break;
        for (uint32_t i = 0; m && i < s->n_slots; i++) {
            struct slot *sl = &s->slots[i];
            if (!sl->job)
                continue;
            if (sl->n_gen == UINT32_MAX) {
                ebb_err brc = slot_begin(s, sl, m, &diag);
                if (brc) {
                    sl->n_gen = 0;
                    slot_end(s, sl, EBB_FINISH_ERROR, brc, diag.msg);
                    continue;
                }
            }
            slot_step(s, sl, m);
        }
    }
    return NULL;
}

ebb_err ebb_sched_new(const struct ebb_sched_params *p, struct ebb_sched **out,
                      struct ebb_diag *diag)
{
    struct ebb_sched *s = calloc(1, sizeof(*s));
    if (!s)
        return EBB_ENOMEM;
    s->mp = p->model;
    s->n_slots = p->model.n_seq ? p->model.n_seq : 1;
    s->mp.n_seq = s->n_slots;
    s->queue_cap = p->queue_cap ? p->queue_cap : 64;
    s->prefill_chunk = p->prefill_chunk ? p->prefill_chunk : 128;
    s->on_loaded = p->on_loaded;
    s->ud = p->ud;
    s->before_open = p->before_open;
    s->path = p->model.path ? strdup(p->model.path) : NULL;
    s->device = p->model.device ? strdup(p->model.device) : NULL;
    s->mp.path = s->path;
    s->mp.device = s->device;
    s->slots = calloc(s->n_slots, sizeof(*s->slots));
    s->text_cap = 16384;
    s->text_buf = malloc(s->text_cap);
    atomic_init(&s->model, NULL);
    if (!s->slots || !s->text_buf || (p->model.path && !s->path) ||
        (p->model.device && !s->device)) {
        free(s->slots);
        free(s->text_buf);
        free(s->path);
        free(s->device);
        free(s);
        return EBB_ENOMEM;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->swap_cv, NULL);
    if (pthread_create(&s->thread, NULL, engine_main, s)) {
        ebb_diag_set(diag, EBB_ENOMEM, "cannot start the engine thread");
        s->thread_started = false;
        ebb_sched_free(s);
        return EBB_ENOMEM;
    }
    s->thread_started = true;
    *out = s;
    return EBB_OK;
}

void ebb_sched_free(struct ebb_sched *s)
{
    if (!s)
        return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->quit = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    ebb_model_close(atomic_load(&s->model));
    for (uint32_t i = 0; i < s->n_slots; i++) {
        free(s->slots[i].kv_tokens);
        free(s->slots[i].logits);
        ebb__sgram_fini(&s->slots[i].gram);
    }
    ebb_token_trie_free(s->trie);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->swap_cv);
    free(s->slots);
    free(s->text_buf);
    free(s->path);
    free(s->device);
    free(s);
}
