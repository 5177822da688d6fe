/* The engine's steps for one slot: starting a job (prefix reuse, sampler, grammar), a prefill
 * chunk or one decoded token (sampling, detokenizing, stop strings), an embedding chunk, and
 * the end of a job. */
#include "scheduler.h"
#include "scheduler-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

double ebb__now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ebb__job_free(struct job *j)
{
    if (!j)
        return;
    free(j->prompt);
    free(j->bias);
    ebb_grammar_free(j->grammar);
    free(j->embed_len);
    free(j);
}

static void job_finish(struct job *j, const struct ebb_sched_result *r)
{
    j->sink.on_done(j->sink.ud, r);
    ebb__job_free(j);
}

void ebb__job_cancelled(struct job *j, double t_queue)
{
    struct ebb_sched_result r = {.finish = EBB_FINISH_CANCEL, .n_prompt = j->n_prompt};
    r.t_queue = t_queue;
    job_finish(j, &r);
}

/* One choice of job j ended with result r: a single-choice job ends with it; otherwise r goes
 * to on_choice and into the job's result, and the job ends with its last choice. */
static void choice_end(struct job *j, const struct ebb_sched_result *r)
{
    if (j->n_choices == 1) {
        job_finish(j, r);
        return;
    }
    if (j->sink.on_choice)
        j->sink.on_choice(j->sink.ud, r);
    struct ebb_sched_result *a = &j->agg;
    if (r->choice == 0) {
        enum ebb_finish f = a->finish;
        a->finish = r->finish;
        if (f == EBB_FINISH_ERROR || (f == EBB_FINISH_CANCEL && r->finish != EBB_FINISH_ERROR))
            a->finish = f; /* a failed or cancelled choice ended first */
        else if (r->finish == EBB_FINISH_ERROR) {
            a->err = r->err;
            snprintf(a->msg, sizeof(a->msg), "%s", r->msg);
        }
        a->n_prompt = r->n_prompt;
        a->n_cached = r->n_cached;
        a->stop_index = r->stop_index;
        a->t_queue = r->t_queue;
        a->t_prefill = r->t_prefill;
        if (!j->forked)
            j->src_end = r->finish; /* the other choices, still waiting, end as it did */
    } else if (r->finish == EBB_FINISH_ERROR && a->finish != EBB_FINISH_ERROR) {
        a->finish = EBB_FINISH_ERROR;
        a->err = r->err;
        snprintf(a->msg, sizeof(a->msg), "%s", r->msg);
    } else if (r->finish == EBB_FINISH_CANCEL && a->finish != EBB_FINISH_ERROR) {
        a->finish = EBB_FINISH_CANCEL;
    }
    a->n_gen += r->n_gen;
    if (r->t_decode > a->t_decode)
        a->t_decode = r->t_decode;
    if (--j->n_live == 0)
        job_finish(j, a);
}

static void slot_end(struct ebb_sched *s, struct slot *sl, enum ebb_finish f, ebb_err err,
                     const char *msg)
{
    struct job *j = sl->job;
    double t = ebb__now_s();
    sl->res.finish = f;
    sl->res.err = err;
    if (msg)
        snprintf(sl->res.msg, sizeof(sl->res.msg), "%s", msg);
    sl->res.n_prompt = j->n_prompt;
    sl->res.n_cached = sl->n_cached;
    sl->res.n_gen = sl->n_gen;
    sl->res.choice = sl->choice;
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
    sl->t_used = t;
    pthread_mutex_lock(&s->mu);
    sl->job = NULL;
    s->n_active--;
    pthread_mutex_unlock(&s->mu);
    choice_end(j, &sl->res);
}

/* Prompt cache: before slot sl's KV entries from position keep on are overwritten, its
 * sequence (prompt and generated tokens) goes into the store if at least EBB__PCACHE_MIN of its
 * tokens would be lost; a failed copy forgets the entry. */
static void pc_save(struct ebb_sched *s, struct slot *sl, struct ebb_model *m, uint32_t keep)
{
    uint32_t at;
    if ((uint64_t)sl->n_kv < (uint64_t)keep + EBB__PCACHE_MIN ||
        !ebb__pcache_put(&s->pc, sl->kv_tokens, sl->n_kv, &at))
        return;
    struct ebb_diag d = {{0}};
    if (ebb_model_kv_save(m, (uint32_t)(sl - s->slots), sl->n_kv, at, &d)) {
        ebb__pcache_drop(&s->pc, at);
        ebb_log(EBB_LOG_WARN, "sched", "prompt cache: saving %u positions failed: %s", sl->n_kv,
                d.msg);
    }
}

/* Prompt cache: the prefix of job j's prompt to reuse in slot sl, which shares pfx tokens with
 * it. A store entry sharing more (at most n_prompt - 1) is copied into the slot, after the
 * slot's own sequence was saved if it is about to be lost. Returns the prefix length. */
static uint32_t pc_reuse(struct ebb_sched *s, struct slot *sl, struct ebb_model *m,
                         const struct job *j, uint32_t pfx)
{
    uint32_t spfx = 0;
    int e = ebb__pcache_match(&s->pc, j->prompt, j->n_prompt, j->n_prompt - 1, &spfx);
    if (e >= 0 && spfx > pfx)
        s->pc.e[e].used = ++s->pc.tick; /* evicted last by the save below */
    pc_save(s, sl, m, pfx);
    if (spfx <= pfx)
        return pfx;
    e = ebb__pcache_match(&s->pc, j->prompt, j->n_prompt, j->n_prompt - 1, &spfx);
    if (e < 0 || spfx <= pfx)
        return pfx;
    struct ebb_diag d = {{0}};
    if (ebb_model_kv_load(m, s->pc.e[e].off, spfx, (uint32_t)(sl - s->slots), &d)) {
        ebb_log(EBB_LOG_WARN, "sched", "prompt cache: loading %u positions failed: %s", spfx,
                d.msg);
        return 0; /* the slot's entries may be partly overwritten */
    }
    memcpy(sl->kv_tokens, s->pc.tok + s->pc.e[e].off, sizeof(int32_t) * spfx);
    ebb__pcache_hit(&s->pc, e, spfx);
    return spfx;
}

/* An embedding job needs every input's hidden states, so nothing cached is reused. */
static ebb_err embed_begin(struct ebb_sched *s, struct slot *sl, struct ebb_model *m)
{
    struct job *j = sl->job;
    pc_save(s, sl, m, 0);
    sl->n_kv = sl->n_cached = sl->n_gen = 0;
    sl->emb_i = sl->emb_pos = sl->emb_off = 0;
    sl->spec_max = sl->n_draft = 0;
    sl->prefilled = false;
    memset(&sl->res, 0, sizeof(sl->res));
    ebb_stopper_init(&sl->stopper, NULL, 0);
    sl->t_start = ebb__now_s();
    sl->res.t_queue = sl->t_start - j->t_submit;
    memset(j->gp.embed_out, 0, sizeof(float) * j->gp.n_embed * ebb_model_n_embd(m));
    if (j->sink.on_start)
        j->sink.on_start(j->sink.ud);
    return EBB_OK;
}

/* An embedding job's part of the step: a chunk of the current input (at most budget tokens),
 * summed into its output row. */
static void embed_part(struct slot *sl, struct ebb_model *m, uint32_t n, struct ebb_model_seq *part)
{
    struct job *j = sl->job;
    sl->out = (struct ebb_model_out){.hidden_sum =
                                         j->gp.embed_out + (size_t)sl->emb_i * ebb_model_n_embd(m)};
    *part = (struct ebb_model_seq){.tokens = j->prompt + sl->emb_off + sl->emb_pos,
                                   .n = n,
                                   .pos = sl->emb_pos,
                                   .out = &sl->out};
}

/* After the pass: the row becomes the input's mean once the input is complete. */
static void embed_apply(struct ebb_sched *s, struct slot *sl, struct ebb_model *m,
                        const struct ebb_model_seq *p)
{
    struct job *j = sl->job;
    uint32_t len = j->embed_len[sl->emb_i], d = ebb_model_n_embd(m);
    float *row = sl->out.hidden_sum;
    memcpy(sl->kv_tokens + sl->emb_pos, p->tokens, sizeof(int32_t) * p->n);
    sl->emb_pos += p->n;
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

void ebb__slot_spec_fini(struct slot *sl)
{
    ebb_spec_free(sl->spec);
    free(sl->spec_info);
    sl->spec = NULL;
    sl->spec_info = NULL;
    sl->spec_max = sl->n_draft = 0;
}

/* A speculative job (not for grammars: their masks are per token): the slot's drafter, made
 * or remade when this job wants more drafts per pass than it holds, reset to the prompt. */
static ebb_err spec_begin(struct ebb_sched *s, struct slot *sl, struct ebb_model *m,
                          struct ebb_diag *diag)
{
    struct job *j = sl->job;
    int32_t want = j->gp.spec_max < 0 ? (int32_t)s->spec_max : j->gp.spec_max;
    sl->spec_max = j->grammar || want <= 0 ? 0 : (uint32_t)want;
    sl->n_draft = 0;
    if (!sl->spec_max)
        return EBB_OK;
    if (sl->spec && ebb_spec_draft_max(sl->spec) < sl->spec_max) {
        ebb__slot_spec_fini(sl);
        sl->spec_max = (uint32_t)want;
    }
    if (!sl->spec) {
        struct ebb_spec_params sp;
        ebb_spec_params_defaults(&sp);
        sp.draft_max = sl->spec_max;
        ebb_err rc = ebb_spec_new(&sp, ebb_model_n_vocab(m), ebb_model_n_ctx(m), &sl->spec, diag);
        if (rc)
            return rc;
        sl->spec_info = calloc(EBB_SPEC_DRAFT_CAP + 1, sizeof(*sl->spec_info));
        if (!sl->spec_info)
            return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    }
    ebb_spec_reset(sl->spec);
    ebb_spec_push(sl->spec, j->prompt, j->n_prompt);
    return EBB_OK;
}

static ebb_err slot_begin(struct ebb_sched *s, struct slot *sl, struct ebb_model *m,
                          struct ebb_diag *diag)
{
    struct job *j = sl->job;
    if (j->gp.n_embed)
        return embed_begin(s, sl, m);
    /* Choice i draws with seed + i (a drawn seed stays drawn: each sampler draws its own). */
    struct ebb_sampling sp = j->gp.sampling;
    if (sp.seed != EBB_SEED_RANDOM && (sp.seed += sl->choice) == EBB_SEED_RANDOM)
        sp.seed = 0; /* as the API maps the seed -1 */
    ebb_err rc = ebb_sampler_new(&sp, ebb_model_n_vocab(m), &sl->smp, diag);
    if (rc)
        return rc;
    if (j->grammar && !s->trie && (rc = ebb_token_trie_new(ebb_model_tokenizer(m), &s->trie, diag)))
        return rc;
    if ((rc = ebb__sgram_begin(&sl->gram, j->grammar, s->trie, ebb_model_n_vocab(m), diag)))
        return rc;
    /* Reuse the KV entries of the longest common prefix with this slot's previous job; at least
     * one prompt token is evaluated so that there are logits to sample from. The other choices
     * get theirs copied from choice 0's slot; until then their KV entries stay as they are. */
    uint32_t pfx = 0;
    while (!sl->choice && pfx < sl->n_kv && pfx + 1 < j->n_prompt &&
           sl->kv_tokens[pfx] == j->prompt[pfx])
        pfx++;
    if (!sl->choice)
        sl->n_kv = pfx = pc_reuse(s, sl, m, j, pfx);
    else
        pc_save(s, sl, m, 0); /* its entries are about to be replaced by choice 0's */
    sl->n_cached = pfx;
    sl->n_gen = 0;
    sl->prefilled = false;
    memset(&sl->res, 0, sizeof(sl->res));
    sl->t_start = ebb__now_s();
    sl->res.t_queue = sl->t_start - j->t_submit;
    ebb_detok_init(&sl->detok);
    ebb_stopper_init(&sl->stopper, j->gp.stop, j->gp.n_stop);
    for (uint32_t i = 0; i < j->n_prompt; i++)
        ebb_sampler_accept(sl->smp, j->prompt[i]);
    if ((rc = spec_begin(s, sl, m, diag)))
        return rc;
    if (j->sink.on_start && !sl->choice)
        j->sink.on_start(j->sink.ud);
    return EBB_OK;
}

/* Choice 0's slot src has evaluated the prompt: every other choice of its job still waiting
 * gets a copy of the prompt's KV entries and of the last token's outputs (logits or
 * candidates, as choice 0 asked: the choices sample alike), and decodes from the next step. */
static void fork_choices(struct ebb_sched *s, struct slot *src, struct ebb_model *m,
                         struct ebb__step_stats *st)
{
    struct job *j = src->job;
    uint32_t n = j->n_prompt, from = (uint32_t)(src - s->slots);
    j->forked = true;
    for (uint32_t i = 0; i < s->n_slots; i++) {
        struct slot *sl = &s->slots[i];
        if (sl->job != j || sl == src)
            continue;
        struct ebb_diag diag = {{0}};
        ebb_err rc = ebb_model_kv_copy(m, from, i, n, &diag);
        if (rc) {
            sl->n_kv = 0;
            slot_end(s, sl, EBB_FINISH_ERROR, rc, diag.msg);
            continue;
        }
        st->kv_copies++;
        memcpy(sl->kv_tokens, src->kv_tokens, sizeof(int32_t) * n);
        sl->n_kv = n;
        sl->n_cand = src->n_cand;
        if (src->n_cand) {
            memcpy(sl->cand_ids, src->cand_ids, sizeof(int32_t) * src->n_cand);
            memcpy(sl->cand_logits, src->cand_logits, sizeof(float) * src->n_cand);
        } else {
            memcpy(sl->logits, src->logits, sizeof(float) * ebb_model_n_vocab(m));
        }
        sl->prefilled = true;
        sl->t_first = ebb__now_s();
        sl->res.t_prefill = sl->t_first - sl->t_start;
    }
}

static void emit(struct slot *sl, const char *text, size_t n, int32_t id,
                 const struct ebb_sample_info *info)
{
    struct job *j = sl->job;
    if (!j->sink.on_token)
        return;
    struct ebb_sched_token t = {
        .text = text, .len = n, .id = id, .info = info, .choice = sl->choice};
    j->sink.on_token(j->sink.ud, &t);
}

/* Takes a sampled token (already accepted by the sampler): releases its text and checks the
 * ends (end of generation, stop string, grammar complete, max_tokens, context). Returns true
 * when the job goes on with sl->next_tok = id to evaluate. */
static bool slot_take(struct ebb_sched *s, struct slot *sl, struct ebb_model *m, int32_t id,
                      const struct ebb_sample_info *pi)
{
    struct job *j = sl->job;
    uint32_t n_ctx = ebb_model_n_ctx(m);
    const struct ebb_tokenizer *tok = ebb_model_tokenizer(m);
    sl->n_gen++;
    if (sl->spec_max)
        ebb_spec_push(sl->spec, &id, 1);
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
        return false;
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
        return false;
    }
    if (at_end) {
        slot_end(s, sl, EBB_FINISH_LENGTH, EBB_OK, NULL);
        return false;
    }
    sl->next_tok = id;
    return true;
}

/* The outputs a slot's next token is sampled from: the top candidates when the sampler can
 * work from them (greedy, or a top_k of at most EBB__SCHED_CAND_MAX, and no penalty, bias,
 * grammar or logprobs, which need the whole vector), so the pass reads back a few values
 * instead of n_vocab logits; else the logits. */
static void want_logits(struct slot *sl)
{
    const struct job *j = sl->job;
    uint32_t k = 0;
    if (!j->gp.logprobs && !sl->gram.active && !ebb_sampler_needs_full_logits(sl->smp))
        k = ebb_sampler_n_candidates(sl->smp);
    sl->n_cand = k <= EBB__SCHED_CAND_MAX ? k : 0;
    if (sl->n_cand)
        sl->out = (struct ebb_model_out){
            .top_k = sl->n_cand, .top_ids = sl->cand_ids, .top_logits = sl->cand_logits};
    else
        sl->out = (struct ebb_model_out){.logits = sl->logits};
}

/* After a verification pass (sl->n_draft drafts): the sampler keeps the drafts it agrees with
 * and adds its own next token; each is taken in order as a single step would take it (so
 * max_tokens, stop strings and end-of-generation cut inside the pass), with the KV length
 * each would have seen. The rejected drafts' KV entries are overwritten by the next pass. */
static bool slot_verify(struct ebb_sched *s, struct slot *sl, struct ebb_model *m)
{
    struct job *j = sl->job;
    uint32_t nd = sl->n_draft, n = 0, base = sl->n_kv - (nd + 1);
    int32_t out[EBB_SPEC_DRAFT_CAP + 1];
    struct ebb_sample_info *info = j->gp.logprobs ? sl->spec_info : NULL;
    for (uint32_t i = 0; info && i <= nd; i++)
        info[i].n_top = j->gp.n_top_logprobs;
    sl->n_draft = 0;
    ebb_err rc = ebb_spec_verify(sl->smp, ebb_spec_rows(sl->spec), ebb_model_n_vocab(m),
                                 sl->spec_tok + 1, nd, out, &n, info);
    if (rc) {
        sl->n_kv = base + 1 + n;
        slot_end(s, sl, EBB_FINISH_ERROR, rc, "sampling failed: every token is banned");
        return false;
    }
    ebb_spec_feedback(sl->spec, nd, n - 1, s->np_pass == 1 ? s->t_pass : 0);
    s->spec_drafted += nd;
    s->spec_accepted += n - 1;
    for (uint32_t i = 0; i < n; i++) {
        sl->n_kv = base + 1 + i;
        if (!slot_take(s, sl, m, out[i], info ? &info[i] : NULL))
            return false;
    }
    return true;
}

/* A decoding slot's turn: samples the next token from the logits of the last pass (or
 * verifies the drafts of a speculative pass) and takes it (slot_take). */
static bool slot_sample(struct ebb_sched *s, struct slot *sl, struct ebb_model *m)
{
    struct job *j = sl->job;
    struct ebb_diag diag = {{0}};
    struct ebb_sample_info info = {.n_top = j->gp.n_top_logprobs};
    int32_t id;
    ebb_err rc;
    if (sl->n_draft)
        return slot_verify(s, sl, m);
    if (sl->gram.active) {
        rc = ebb__sgram_sample(&sl->gram, s->trie, sl->smp, sl->logits, &id,
                               j->gp.logprobs ? &info : NULL, &diag);
        if (rc) {
            slot_end(s, sl, EBB_FINISH_ERROR, rc, diag.msg);
            return false;
        }
    } else if ((rc = sl->n_cand ? ebb_sampler_sample_candidates(sl->smp, sl->cand_ids,
                                                                sl->cand_logits, sl->n_cand, &id,
                                                                j->gp.logprobs ? &info : NULL)
                                : ebb_sampler_sample(sl->smp, sl->logits, &id,
                                                     j->gp.logprobs ? &info : NULL))) {
        slot_end(s, sl, EBB_FINISH_ERROR, rc, "sampling failed: every token is banned");
        return false;
    }
    ebb_sampler_accept(sl->smp, id);
    if (sl->spec_max)
        ebb_spec_feedback(sl->spec, 0, 0, s->np_pass == 1 ? s->t_pass : 0);
    return slot_take(s, sl, m, id, j->gp.logprobs ? &info : NULL);
}

/* A speculating slot's part: [next_tok, drafts] with a logits row each, the drafts capped so
 * that the kept tokens never pass max_tokens or the context. False: no drafts this step. */
static bool spec_part(struct slot *sl, struct ebb_model *m, struct ebb_model_seq *part)
{
    struct job *j = sl->job;
    uint32_t cap = sl->spec_max, n_ctx = ebb_model_n_ctx(m);
    uint32_t left = j->gp.max_tokens ? j->gp.max_tokens - sl->n_gen : UINT32_MAX;
    if (left - 1 < cap)
        cap = left - 1;
    if (n_ctx - sl->n_kv - 1 < cap)
        cap = n_ctx - sl->n_kv - 1;
    uint32_t nd = cap ? ebb_spec_draft(sl->spec, sl->spec_tok + 1, cap) : 0;
    if (!nd)
        return false;
    sl->spec_tok[0] = sl->next_tok;
    sl->n_draft = nd;
    sl->out = (struct ebb_model_out){.logits_all = ebb_spec_rows(sl->spec)};
    part->tokens = sl->spec_tok;
    part->n = nd + 1;
    part->pos = sl->n_kv;
    part->out = &sl->out;
    return true;
}

/* Phase one of a step for a slot: ends it if cancelled; else fills *part with what it
 * evaluates this step and returns true. A decoding slot samples first (slot_sample) and
 * contributes one row; a prefill (or an embedding input) takes up to *budget tokens of the
 * step's prefill budget and waits when none is left. */
static bool slot_prepare(struct ebb_sched *s, struct slot *sl, struct ebb_model *m,
                         uint32_t *budget, struct ebb_model_seq *part)
{
    struct job *j = sl->job;
    if (atomic_load(&j->cancel)) {
        slot_end(s, sl, EBB_FINISH_CANCEL, EBB_OK, NULL);
        return false;
    }
    uint32_t seq = (uint32_t)(sl - s->slots);
    if (j->gp.n_embed) {
        uint32_t left = j->embed_len[sl->emb_i] - sl->emb_pos;
        if (!*budget)
            return false;
        uint32_t n = left < *budget ? left : *budget;
        *budget -= n;
        embed_part(sl, m, n, part);
        part->seq = seq;
        return true;
    }
    if (!sl->prefilled) {
        /* The last prompt token is always evaluated on its own, so its logits come from the
         * same single-token part whether or not the slot reused cached KV entries. */
        uint32_t left = j->n_prompt - sl->n_kv;
        uint32_t n = left > 1 ? left - 1 : 1;
        if (!*budget)
            return false;
        n = n < *budget ? n : *budget;
        *budget -= n;
        sl->out = (struct ebb_model_out){0};
        if (n == left)
            want_logits(sl);
        *part = (struct ebb_model_seq){
            .seq = seq, .tokens = j->prompt + sl->n_kv, .n = n, .pos = sl->n_kv, .out = &sl->out};
        return true;
    }
    if (!slot_sample(s, sl, m))
        return false;
    if (sl->spec_max && spec_part(sl, m, part)) {
        part->seq = seq;
        return true;
    }
    want_logits(sl);
    *part = (struct ebb_model_seq){
        .seq = seq, .tokens = &sl->next_tok, .n = 1, .pos = sl->n_kv, .out = &sl->out};
    return true;
}

/* Phase two, after a successful pass: the slot's KV now holds its part's tokens. */
static void slot_apply(struct ebb_sched *s, struct slot *sl, struct ebb_model *m,
                       const struct ebb_model_seq *p, struct ebb__step_stats *st)
{
    struct job *j = sl->job;
    if (j->gp.n_embed) {
        embed_apply(s, sl, m, p);
        return;
    }
    memcpy(sl->kv_tokens + sl->n_kv, p->tokens, sizeof(int32_t) * p->n);
    sl->n_kv += p->n;
    if (sl->prefilled)
        return;
    if (j->sink.on_prefill)
        j->sink.on_prefill(j->sink.ud, sl->n_kv, j->n_prompt);
    if (sl->n_kv == j->n_prompt) {
        sl->prefilled = true;
        sl->t_first = ebb__now_s();
        sl->res.t_prefill = sl->t_first - sl->t_start;
        if (j->n_choices > 1)
            fork_choices(s, sl, m, st);
    }
}

/* Whether slot a's job came before slot b's (prefill goes in submission order). */
static bool before(const struct slot *a, const struct slot *b)
{
    return a->job->id < b->job->id;
}

/* The prompt-cache store's figures into the step's stats. */
static void pc_stats(const struct ebb_sched *s, struct ebb_model *m, struct ebb__step_stats *st)
{
    const struct ebb__pcache *pc = &s->pc;
    uint64_t bytes = pc->cap ? ebb_model_kv_store_bytes(m) : 0;
    st->pc_hits = pc->hits;
    st->pc_tokens = pc->hit_tokens;
    st->pc_saves = pc->saves;
    st->pc_evictions = pc->evictions;
    st->pc_entries = pc->n_e;
    st->pc_bytes = bytes;
    st->pc_bytes_used = pc->cap ? bytes / pc->cap * ebb__pcache_used(pc) : 0;
}

void ebb__sched_step(struct ebb_sched *s, struct ebb_model *m, struct ebb__step_stats *st)
{
    struct ebb_diag diag = {{0}};
    /* New jobs start; decoding slots go first (one row each, never held back), then prefills
     * and embedding inputs, oldest job first, within the step's prefill budget. */
    uint32_t n_wait = 0, np = 0, budget = s->prefill_chunk;
    for (uint32_t i = 0; i < s->n_slots; i++) {
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
            if (!sl->choice) {
                st->jobs++;
                st->t_queue += sl->res.t_queue;
                st->cache_hits += sl->n_cached > 0;
                st->cache_tokens += sl->n_cached;
            }
        }
        if (sl->choice && !sl->prefilled) {
            /* Waits for choice 0's prompt, or ends as choice 0 did before it was copied. */
            struct job *j = sl->job;
            if (atomic_load(&j->cancel))
                slot_end(s, sl, EBB_FINISH_CANCEL, EBB_OK, NULL);
            else if (j->src_end == EBB_FINISH_ERROR)
                slot_end(s, sl, EBB_FINISH_ERROR, j->agg.err, j->agg.msg);
            else if (j->src_end != EBB_FINISH_NONE)
                slot_end(s, sl, EBB_FINISH_CANCEL, EBB_OK, NULL);
            continue;
        }
        if (sl->prefilled && !sl->job->gp.n_embed) {
            if (slot_prepare(s, sl, m, &budget, &s->parts[np]))
                np++;
            continue;
        }
        uint32_t k = n_wait++; /* insertion into the waiting list, oldest first */
        while (k > 0 && before(sl, &s->slots[s->order[k - 1]])) {
            s->order[k] = s->order[k - 1];
            k--;
        }
        s->order[k] = i;
    }
    /* No decoding rows wait for this pass: it takes as many prompt tokens as the backend
     * evaluates in one pass (512 on GPUs: fuller tiles, the cache read a quarter as often as
     * in passes of 128), and a streaming model a long prompt in one layer-major pass
     * (docs/STREAMER.md, "Long prompts") rather than in passes of prefill_chunk tokens that
     * each move every streamed layer over the link. With decoding rows, prefill_chunk keeps
     * their step short. */
    if (!np && s->prefill_auto && ebb_model_batch_rows(m) > budget)
        budget = ebb_model_batch_rows(m);
    if (!np && s->prefill_auto && ebb_model_long_rows(m) > budget)
        budget = ebb_model_long_rows(m);
    for (uint32_t w = 0; w < n_wait; w++)
        if (slot_prepare(s, &s->slots[s->order[w]], m, &budget, &s->parts[np]))
            np++;
    pc_stats(s, m, st);
    if (!np)
        return;
    double t0 = ebb__now_s();
    ebb_err rc = ebb_model_eval_batch(m, s->parts, np, &diag);
    s->t_pass = ebb__now_s() - t0;
    s->np_pass = np;
    uint32_t rows = 0;
    for (uint32_t p = 0; p < np; p++) {
        struct slot *sl = &s->slots[s->parts[p].seq];
        rows += s->parts[p].n;
        if (rc) {
            sl->n_kv = 0;
            slot_end(s, sl, EBB_FINISH_ERROR, rc, diag.msg);
        } else {
            slot_apply(s, sl, m, &s->parts[p], st);
        }
    }
    st->steps++;
    st->rows += rows;
    st->seqs += np;
    st->last_rows = rows;
    st->last_seqs = np;
    st->spec_drafted += s->spec_drafted;
    st->spec_accepted += s->spec_accepted;
    s->spec_drafted = s->spec_accepted = 0;
}
