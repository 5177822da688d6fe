/* The scheduler: the job queue, admission into slots, model swaps and the engine thread, which
 * opens the model and then loops giving every active slot one step per turn (scheduler-step.c). */
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

/* ---- queue ------------------------------------------------------------------------------- */

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
    if (p->spec_max < -1 || p->spec_max > EBB_SPEC_DRAFT_CAP)
        return ebb_diag_set(diag, EBB_EINVAL, "speculative drafts per pass %d outside 1..%d",
                            (int)p->spec_max, EBB_SPEC_DRAFT_CAP);
    ebb_err rc = check_embed(p, n_prompt, n_ctx, diag);
    if (rc)
        return rc;
    uint32_t n_choices = p->n_choices ? p->n_choices : 1;
    if (n_choices > EBB_SCHED_MAX_CHOICES || n_choices > s->n_slots)
        return ebb_diag_set(
            diag, EBB_EINVAL, "%u choices need as many slots; at most %u here (--parallel %u)",
            n_choices, s->n_slots < EBB_SCHED_MAX_CHOICES ? s->n_slots : EBB_SCHED_MAX_CHOICES,
            s->n_slots);
    if (n_choices > 1 && p->n_embed)
        return ebb_diag_set(diag, EBB_EINVAL, "an embedding job has one choice");
    struct job *j = calloc(1, sizeof(*j));
    if (!j)
        return EBB_ENOMEM;
    j->prompt = malloc(sizeof(int32_t) * n_prompt);
    if (p->n_embed && (j->embed_len = malloc(sizeof(uint32_t) * p->n_embed)))
        memcpy(j->embed_len, p->embed_len, sizeof(uint32_t) * p->n_embed);
    if (!j->prompt || (p->n_embed && !j->embed_len)) {
        ebb__job_free(j);
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
            ebb__job_free(j);
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
            ebb__job_free(j);
            return grc;
        }
    }
    j->sink = *sink;
    j->n_choices = j->n_live = n_choices;
    j->gp.n_choices = n_choices;
    atomic_init(&j->cancel, false);
    j->t_submit = ebb__now_s();

    pthread_mutex_lock(&s->mu);
    /* Jobs queued while slots are free have not been admitted yet; they do not wait. */
    uint32_t free_slots = s->n_slots - s->n_active;
    if (s->quit || s->n_queued >= s->queue_cap + free_slots) {
        bool quit = s->quit;
        pthread_mutex_unlock(&s->mu);
        ebb__job_free(j);
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
    out->steps = s->stats.steps;
    out->batch_rows = s->stats.rows;
    out->batch_seqs = s->stats.seqs;
    out->last_batch_rows = s->stats.last_rows;
    out->last_batch_seqs = s->stats.last_seqs;
    out->jobs_started = s->stats.jobs;
    out->queue_wait_s = s->stats.t_queue;
    out->cache_hits = s->stats.cache_hits;
    out->cache_tokens = s->stats.cache_tokens;
    out->spec_drafted = s->stats.spec_drafted;
    out->spec_accepted = s->stats.spec_accepted;
    out->kv_copies = s->stats.kv_copies;
    out->store_hits = s->stats.pc_hits;
    out->store_tokens = s->stats.pc_tokens;
    out->store_saves = s->stats.pc_saves;
    out->store_evictions = s->stats.pc_evictions;
    out->store_entries = s->stats.pc_entries;
    out->store_bytes_used = s->stats.pc_bytes_used;
    out->store_bytes = s->stats.pc_bytes;
    pthread_mutex_unlock(&s->mu);
}

void ebb_sched_offer(struct ebb_sched *s, const int32_t *prompt, uint32_t n_prompt,
                     struct ebb_sched_offer *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&s->mu);
    out->busy = s->n_queued + s->n_active;
    if (atomic_load(&s->model)) {
        out->free_slots = s->n_slots - s->n_active;
        /* A free slot's kv_tokens change only on the engine thread after admit() gives it a
         * job, which takes mu: holding mu, a free slot's tokens stay as its last job left them. */
        for (uint32_t i = 0; i < s->n_slots && out->free_slots > s->n_queued; i++) {
            const struct slot *sl = &s->slots[i];
            if (sl->job || !sl->kv_tokens)
                continue;
            uint32_t pfx = 0;
            while (pfx < sl->n_kv && pfx + 1 < n_prompt && sl->kv_tokens[pfx] == prompt[pfx])
                pfx++;
            if (pfx > 0 && 2 * (uint64_t)pfx >= sl->n_kv && pfx > out->prefix)
                out->prefix = pfx;
        }
        out->free_slots = out->free_slots > s->n_queued ? out->free_slots - s->n_queued : 0;
    }
    pthread_mutex_unlock(&s->mu);
}

struct ebb_model *ebb_sched_model(struct ebb_sched *s)
{
    return atomic_load(&s->model);
}

/* ---- engine ------------------------------------------------------------------------------ */

/* The free slot for job j: among the slots whose cached tokens j's prompt would mostly keep
 * (it shares at least half of them), the one sharing the longest prefix (its KV entries are
 * reused); else an empty slot, else the one idle longest. So a request that merely shares a
 * chat template's opening with a cached conversation does not evict it, and recently used
 * prefixes stay for the requests that resend them. Embedding jobs reuse nothing, and neither
 * do a job's other choices (reuse false: their KV entries are copied from the first's). NULL
 * when every slot is busy. */
static struct slot *best_slot(struct ebb_sched *s, const struct job *j, bool reuse)
{
    struct slot *best = NULL, *spare = NULL;
    uint32_t best_pfx = 0;
    for (uint32_t i = 0; i < s->n_slots; i++) {
        struct slot *sl = &s->slots[i];
        if (sl->job)
            continue;
        uint32_t pfx = 0;
        while (reuse && !j->gp.n_embed && pfx < sl->n_kv && pfx + 1 < j->n_prompt &&
               sl->kv_tokens[pfx] == j->prompt[pfx])
            pfx++;
        if (pfx > 0 && 2 * (uint64_t)pfx >= sl->n_kv && pfx > best_pfx) {
            best = sl;
            best_pfx = pfx;
        }
        if (!spare || (sl->n_kv == 0) > (spare->n_kv == 0) ||
            ((sl->n_kv == 0) == (spare->n_kv == 0) && sl->t_used < spare->t_used))
            spare = sl;
    }
    return best ? best : spare;
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
    /* In order: a job with several choices waits until that many slots are free, and the jobs
     * behind it wait too (none overtakes it). */
    while (s->q_head && s->n_slots - s->n_active >= s->q_head->n_choices) {
        struct job *j = s->q_head;
        s->q_head = j->next;
        if (!s->q_head)
            s->q_tail = NULL;
        j->next = NULL;
        s->n_queued--;
        for (uint32_t c = 0; c < j->n_choices; c++) {
            struct slot *sl = best_slot(s, j, c == 0);
            sl->job = j;
            sl->choice = c;
            s->n_active++;
            sl->smp = NULL;
            sl->prefilled = true; /* marks "not begun": reset when the step begins it */
            sl->n_gen = UINT32_MAX;
        }
    }
    return dead;
}

/* The streamer's notification thread, after a memory pressure notification posted a reading:
 * an idle engine re-plans at once (engine_settle); a busy one does before its next step. */
static void stream_wake(void *u)
{
    struct ebb_sched *s = u;
    pthread_mutex_lock(&s->mu);
    s->settle_pending = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Engine thread, mu held, no job queued or running: switches to s->swap_to with freshly sized
 * slots. Allocates everything first so that a failure leaves the old model in place. */
static void engine_swap(struct ebb_sched *s, struct ebb_model **m)
{
    struct ebb_model *nm = s->swap_to;
    uint32_t n = ebb_model_n_seq(nm), n_ctx = ebb_model_n_ctx(nm), n_vocab = ebb_model_n_vocab(nm);
    struct slot *ns = calloc(n ? n : 1, sizeof(*ns));
    struct ebb_model_seq *np = calloc(n ? n : 1, sizeof(*np));
    uint32_t *no = calloc(n ? n : 1, sizeof(*no));
    bool ok = ns != NULL && np != NULL && no != NULL && n >= 1;
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
        free(np);
        free(no);
        s->swap_rc = EBB_ENOMEM;
        snprintf(s->swap_msg, sizeof(s->swap_msg), "out of memory for the new model's slots");
    } else {
        for (uint32_t i = 0; i < s->n_slots; i++) {
            free(s->slots[i].kv_tokens);
            free(s->slots[i].logits);
            ebb__sgram_fini(&s->slots[i].gram);
            ebb__slot_spec_fini(&s->slots[i]);
        }
        free(s->slots);
        free(s->parts);
        free(s->order);
        ebb_token_trie_free(s->trie);
        s->trie = NULL;
        ebb__pcache_fini(&s->pc);
        if (ebb__pcache_init(&s->pc, ebb_model_kv_store_len(nm)))
            ebb_log(EBB_LOG_WARN, "sched", "no prompt cache: out of memory for its index");
        s->slots = ns;
        s->parts = np;
        s->order = no;
        s->n_slots = n;
        ebb_model_stream_set_wake(*m, NULL, NULL);
        ebb_model_stream_set_wake(nm, stream_wake, s);
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

bool ebb_sched_stream_budget(struct ebb_sched *s, uint64_t budget)
{
    struct ebb_model *m = atomic_load(&s->model);
    if (!m || !ebb_model_stream_budget(m, budget))
        return false;
    pthread_mutex_lock(&s->mu);
    s->settle_pending = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return true;
}

void ebb_sched_stream_poke(struct ebb_sched *s)
{
    struct ebb_model *m = atomic_load(&s->model);
    if (m && ebb_model_streaming(m))
        stream_wake(s);
}

/* Engine thread, mu held, idle: applies a posted streamer budget with mu released meanwhile
 * (moving layers takes a while; submitters must not wait on it). */
static void engine_settle(struct ebb_sched *s, struct ebb_model *m)
{
    struct ebb_diag d = {{0}};
    s->settle_pending = false;
    pthread_mutex_unlock(&s->mu);
    if (ebb_model_stream_settle(m, &d))
        ebb_log(EBB_LOG_WARN, "sched", "streamer re-plan while idle: %s", d.msg);
    pthread_mutex_lock(&s->mu);
}

/* ---- the gate between the schedulers of several models ---- */

struct ebb_sched_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t busy;  /* priority engines with jobs */
    uint64_t holds; /* steps that waited */
    double held_s;
};

struct ebb_sched_gate *ebb_sched_gate_new(void)
{
    struct ebb_sched_gate *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    return g;
}

void ebb_sched_gate_free(struct ebb_sched_gate *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

void ebb_sched_gate_stats(struct ebb_sched_gate *g, uint64_t *holds, double *held_s)
{
    pthread_mutex_lock(&g->mu);
    *holds = g->holds;
    *held_s = g->held_s;
    pthread_mutex_unlock(&g->mu);
}

/* Engine thread of a priority scheduler: counts it as busy (on) or not at its gate. */
static void gate_busy(struct ebb_sched *s, bool on)
{
    if (!s->gate || !s->priority || s->gate_held == on)
        return;
    pthread_mutex_lock(&s->gate->mu);
    s->gate->busy = on ? s->gate->busy + 1 : s->gate->busy - 1;
    if (!s->gate->busy)
        pthread_cond_broadcast(&s->gate->cv);
    pthread_mutex_unlock(&s->gate->mu);
    s->gate_held = on;
}

/* Engine thread of another scheduler, before a step: waits while a priority engine is busy,
 * EBB_SCHED_GATE_HOLD_S at most. (CLOCK_REALTIME: the condition variable's default clock,
 * also on macOS, which cannot set another.) */
static void gate_wait(struct ebb_sched *s)
{
    struct ebb_sched_gate *g = s->gate;
    if (!g || s->priority)
        return;
    pthread_mutex_lock(&g->mu);
    if (g->busy) {
        double t0 = ebb__now_s();
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        long ns = dl.tv_nsec + (long)(EBB_SCHED_GATE_HOLD_S * 1e9);
        dl.tv_sec += ns / 1000000000L;
        dl.tv_nsec = ns % 1000000000L;
        while (g->busy && pthread_cond_timedwait(&g->cv, &g->mu, &dl) == 0)
            ;
        g->holds++;
        g->held_s += ebb__now_s() - t0;
    }
    pthread_mutex_unlock(&g->mu);
}

static void *engine_main(void *arg)
{
    struct ebb_sched *s = arg;
    struct ebb_diag diag = {{0}};
    struct ebb_model *m = NULL;
    struct ebb__step_stats st = {0};
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
        if (!rc && ebb__pcache_init(&s->pc, ebb_model_kv_store_len(m)))
            ebb_log(EBB_LOG_WARN, "sched", "no prompt cache: out of memory for its index");
        if (!rc && s->pc.cap) {
            st.pc_bytes = ebb_model_kv_store_bytes(m);
            pthread_mutex_lock(&s->mu);
            s->stats = st;
            pthread_mutex_unlock(&s->mu);
        }
        if (rc) {
            ebb_model_close(m);
            m = NULL;
        }
    }
    if (!rc) {
        ebb_model_stream_set_wake(m, stream_wake, s);
        atomic_store(&s->model, m);
    }
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
            if (s->settle_pending && m) {
                /* mu was released meanwhile: a quit or a job signalled then is seen here, not
                 * waited for (its signal is gone). */
                engine_settle(s, m);
                quit = s->quit;
                dead = admit(s);
                continue;
            }
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
        double t = ebb__now_s();
        while (dead) {
            struct job *n = dead->next;
            ebb__job_cancelled(dead, t - dead->t_submit);
            dead = n;
        }
        if (quit && idle && !s->q_head)
            break;
        if (m) {
            gate_busy(s, true);
            gate_wait(s);
            ebb__sched_step(s, m, &st);
            pthread_mutex_lock(&s->mu);
            s->stats = st;
            bool rest = s->n_active == 0 && !s->q_head;
            pthread_mutex_unlock(&s->mu);
            if (rest)
                gate_busy(s, false);
        }
    }
    gate_busy(s, false);
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
    s->prefill_auto = !p->prefill_chunk;
    s->spec_max = p->spec_max < EBB_SPEC_DRAFT_CAP ? p->spec_max : EBB_SPEC_DRAFT_CAP;
    s->on_loaded = p->on_loaded;
    s->ud = p->ud;
    s->before_open = p->before_open;
    s->gate = p->gate;
    s->priority = p->priority;
    s->path = p->model.path ? strdup(p->model.path) : NULL;
    s->device = p->model.device ? strdup(p->model.device) : NULL;
    s->mp.path = s->path;
    s->mp.device = s->device;
    s->slots = calloc(s->n_slots, sizeof(*s->slots));
    s->parts = calloc(s->n_slots, sizeof(*s->parts));
    s->order = calloc(s->n_slots, sizeof(*s->order));
    s->text_cap = 16384;
    s->text_buf = malloc(s->text_cap);
    atomic_init(&s->model, NULL);
    if (!s->slots || !s->parts || !s->order || !s->text_buf || (p->model.path && !s->path) ||
        (p->model.device && !s->device)) {
        free(s->slots);
        free(s->parts);
        free(s->order);
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
        ebb__slot_spec_fini(&s->slots[i]);
    }
    ebb_token_trie_free(s->trie);
    ebb__pcache_fini(&s->pc);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->swap_cv);
    free(s->slots);
    free(s->parts);
    free(s->order);
    free(s->text_buf);
    free(s->path);
    free(s->device);
    free(s);
}
