/* Speculative decoding with n-gram drafts (see spec.h): the drafter over the sequence's own
 * history, verification by the sampler row by row, and the adaptive number of drafts. */
#include "spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Acceptance prior and the weight of one draft's outcome in its moving average. */
#define ACCEPT_PRIOR 0.6
#define ACCEPT_ALPHA 0.25
/* Cost of one more row relative to a one-row pass until passes of two sizes were timed. */
#define ROW_COST_PRIOR 0.1
/* Decay of the timing moments per observed pass. */
#define COST_DECAY 0.9
/* With k at 0, every PROBE_EVERY-th step still tries one draft, so the average can recover
 * when the text turns repetitive. */
#define PROBE_EVERY 16

struct ebb_spec {
    struct ebb_spec_params p;
    uint32_t n_vocab;
    int32_t *hist; /* (hist_cap) prompt and emitted tokens, oldest first */
    uint32_t hist_len, hist_cap;
    int32_t *batch;             /* (draft_max + 1) the evaluated tokens: last, then the drafts */
    float *rows;                /* (draft_max + 1, n_vocab) logits rows of a verification pass */
    uint32_t k;                 /* drafts per pass now */
    double accept;              /* moving per-draft acceptance */
    double w, sn, snn, st, snt; /* decayed moments of (rows, seconds) of timed passes */
    uint32_t idle;              /* steps with k at 0 since the last probe */
    uint64_t timed[2];          /* pass sizes (rows 1..128) timed once already: the first pass
                                   of a size may build kernels or buffers, so it is not timed */
    uint64_t dropped;           /* history tokens forgotten (the history is then no longer
                                   indexed by position) */
    /* Draft model (ebb_spec_attach_model): its slot holds KV for positions < dm_valid, and
     * dm_tok[0..dm_n) are the drafts it evaluated at positions dm_base.. in its last call. */
    struct ebb_model *dm;
    uint32_t dm_seq, dm_valid, dm_base, dm_n;
    int32_t *dm_tok; /* (draft_max) */
    struct ebb_spec_stats stats;
};

void ebb_spec_params_defaults(struct ebb_spec_params *p)
{
    memset(p, 0, sizeof(*p));
    p->ngram_min = 2;
    p->ngram_max = 8;
    p->draft_max = 8;
    p->draft_min = 1;
}

static void adapt_reset(struct ebb_spec *s)
{
    s->accept = ACCEPT_PRIOR;
    s->w = s->sn = s->snn = s->st = s->snt = 0;
    s->idle = 0;
    s->k = s->p.fixed_k ? s->p.draft_max : 0;
}

static double row_cost(const struct ebb_spec *s);
static uint32_t choose_k(const struct ebb_spec *s);

ebb_err ebb_spec_new(const struct ebb_spec_params *p, uint32_t n_vocab, uint32_t hist_cap,
                     struct ebb_spec **out, struct ebb_diag *diag)
{
    if (!n_vocab || !hist_cap)
        return ebb_diag_set(diag, EBB_EINVAL, "spec: empty vocabulary or history");
    if (p->ngram_min < 1 || p->ngram_max < p->ngram_min || p->ngram_max > 1024)
        return ebb_diag_set(diag, EBB_EINVAL, "spec: n-gram sizes %u..%u (need 1 <= min <= max)",
                            p->ngram_min, p->ngram_max);
    if (p->draft_max < 1 || p->draft_max > EBB_SPEC_DRAFT_CAP)
        return ebb_diag_set(diag, EBB_EINVAL, "spec: draft_max %u outside 1..%d", p->draft_max,
                            EBB_SPEC_DRAFT_CAP);
    if (p->draft_min > p->draft_max)
        return ebb_diag_set(diag, EBB_EINVAL, "spec: draft_min %u exceeds draft_max %u",
                            p->draft_min, p->draft_max);
    struct ebb_spec *s = calloc(1, sizeof(*s));
    if (!s)
        return ebb_diag_set(diag, EBB_ENOMEM, "spec: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->hist_cap = hist_cap;
    s->hist = malloc(sizeof(int32_t) * hist_cap);
    s->batch = malloc(sizeof(int32_t) * (p->draft_max + 1));
    s->rows = malloc(sizeof(float) * n_vocab * (size_t)(p->draft_max + 1));
    if (!s->hist || !s->batch || !s->rows) {
        ebb_spec_free(s);
        return ebb_diag_set(diag, EBB_ENOMEM, "spec: out of memory");
    }
    adapt_reset(s);
    s->k = choose_k(s);
    *out = s;
    return EBB_OK;
}

void ebb_spec_free(struct ebb_spec *s)
{
    if (!s)
        return;
    free(s->dm_tok);
    free(s->hist);
    free(s->batch);
    free(s->rows);
    free(s);
}

void ebb_spec_reset(struct ebb_spec *s)
{
    s->hist_len = 0;
    s->dropped = 0;
    s->dm_valid = s->dm_base = s->dm_n = 0;
    adapt_reset(s);
    s->k = choose_k(s);
}

void ebb_spec_push(struct ebb_spec *s, const int32_t *tokens, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (s->hist_len == s->hist_cap) { /* forget the older half at once: amortised O(1) */
            uint32_t keep = s->hist_cap / 2;
            memmove(s->hist, s->hist + (s->hist_len - keep), sizeof(int32_t) * keep);
            s->dropped += s->hist_len - keep;
            s->hist_len = keep;
        }
        s->hist[s->hist_len++] = tokens[i];
    }
}

/* ---- drafting ---- */

ebb_err ebb_spec_attach_model(struct ebb_spec *s, struct ebb_model *dm, uint32_t seq,
                              struct ebb_diag *diag)
{
    if (dm && ebb_model_n_vocab(dm) != s->n_vocab)
        return ebb_diag_set(diag, EBB_EINVAL,
                            "spec: the draft model has %u tokens, the model %u (they must share "
                            "the tokenizer)",
                            ebb_model_n_vocab(dm), s->n_vocab);
    if (dm && seq >= ebb_model_n_seq(dm))
        return ebb_diag_set(diag, EBB_EINVAL, "spec: the draft model has no slot %u", seq);
    if (dm && !s->dm_tok && !(s->dm_tok = malloc(sizeof(int32_t) * s->p.draft_max)))
        return ebb_diag_set(diag, EBB_ENOMEM, "spec: out of memory");
    s->dm = dm;
    s->dm_seq = seq;
    s->dm_valid = s->dm_base = s->dm_n = 0;
    return EBB_OK;
}

/* The draft model's greedy continuation of the history: catch up from the first position
 * whose cached token differs from the history (at least the last token, for its logits), then
 * one pass per further draft. Position = history index, so only while nothing was dropped. */
static uint32_t draft_model(struct ebb_spec *s, int32_t *draft, uint32_t k)
{
    uint32_t L = s->hist_len, valid = s->dm_valid;
    if (s->dropped || !L)
        return 0;
    for (uint32_t i = 0; i < s->dm_n && s->dm_base + i == valid; i++)
        if (valid < L && s->hist[valid] == s->dm_tok[i])
            valid++;
    if (valid > L - 1)
        valid = L - 1;
    if ((uint64_t)L + k > ebb_model_n_ctx(s->dm))
        k = L < ebb_model_n_ctx(s->dm) ? ebb_model_n_ctx(s->dm) - L : 0;
    s->dm_n = 0;
    s->dm_valid = valid;
    if (!k)
        return 0;
    int32_t top;
    float top_logit;
    struct ebb_model_out o = {.top_k = 1, .top_ids = &top, .top_logits = &top_logit};
    if (ebb_model_eval(s->dm, s->dm_seq, s->hist + valid, L - valid, valid, &o, NULL))
        return 0;
    s->dm_valid = L;
    s->dm_base = L;
    uint32_t n = 0;
    for (;;) {
        draft[n++] = top;
        if (n == k)
            break;
        if (ebb_model_eval(s->dm, s->dm_seq, &top, 1, L + n - 1, &o, NULL))
            break;
        s->dm_tok[s->dm_n++] = draft[n - 1];
    }
    return n;
}

uint32_t ebb_spec_draft(struct ebb_spec *s, int32_t *draft, uint32_t cap)
{
    uint32_t k = s->k;
    if (!k && !s->p.fixed_k && ++s->idle >= PROBE_EVERY) {
        k = s->p.draft_min > 1 ? s->p.draft_min : 1;
        s->idle = 0;
    }
    if (cap < k)
        k = cap;
    if (s->dm) {
        uint32_t n = k ? draft_model(s, draft, k) : 0;
        return n < s->p.draft_min ? 0 : n;
    }
    const int32_t *h = s->hist;
    uint32_t L = s->hist_len;
    if (!k || L < s->p.ngram_min + 1)
        return 0;
    /* i is the last position of an earlier occurrence; m its match length with the suffix. */
    uint32_t best_m = 0, best_i = 0;
    for (uint32_t i = L - 1; i-- > 0;) {
        uint32_t m = 0;
        while (m < s->p.ngram_max && m <= i && h[i - m] == h[L - 1 - m])
            m++;
        if (m > best_m) {
            best_m = m;
            best_i = i;
            if (m == s->p.ngram_max)
                break;
        }
    }
    if (best_m < s->p.ngram_min)
        return 0;
    /* The continuation after best_i; past the end of the history it reads the drafts already
     * written, i.e. the match's period repeats. */
    uint32_t n = 0;
    for (; n < k; n++) {
        uint32_t src = best_i + 1 + n;
        draft[n] = src < L ? h[src] : draft[src - L];
    }
    if (n < s->p.draft_min)
        return 0;
    return n;
}

/* ---- verification ---- */

ebb_err ebb_spec_verify(struct ebb_sampler *smp, float *rows, uint32_t n_vocab,
                        const int32_t *draft, uint32_t n_draft, int32_t *out, uint32_t *n_out,
                        struct ebb_sample_info *info)
{
    for (uint32_t j = 0; j <= n_draft; j++) {
        int32_t t;
        ebb_err rc =
            ebb_sampler_sample(smp, rows + (size_t)j * n_vocab, &t, info ? &info[j] : NULL);
        if (rc) {
            *n_out = j;
            return rc;
        }
        ebb_sampler_accept(smp, t);
        out[j] = t;
        if (j == n_draft || t != draft[j]) {
            *n_out = j + 1;
            return EBB_OK;
        }
    }
    return EBB_OK; /* not reached: the loop returns at j == n_draft */
}

/* ---- adaptation ---- */

/* Marginal seconds of one more row over a one-row pass, from a least-squares line through the
 * decayed (rows, seconds) moments; the prior until two pass sizes were timed. */
static double row_cost(const struct ebb_spec *s)
{
    double var = s->w * s->snn - s->sn * s->sn;
    if (s->w <= 0 || var <= 1e-6 * s->w * s->w)
        return ROW_COST_PRIOR;
    double b = (s->w * s->snt - s->sn * s->st) / var;
    double a = (s->st - b * s->sn) / s->w;
    double t1 = a + b;
    if (!(t1 > 0) || !isfinite(b))
        return ROW_COST_PRIOR;
    double r = b / t1;
    return r < 0 ? 0 : r > 4 ? 4 : r;
}

/* The k in 0..draft_max that maximises expected tokens per pass, (1 - a^(k+1)) / (1 - a) for a
 * per-draft acceptance a, over the relative cost of the pass, 1 + r k. */
static uint32_t choose_k(const struct ebb_spec *s)
{
    if (s->p.fixed_k)
        return s->p.draft_max;
    double a = s->accept, r = row_cost(s), best = 1.0, e = 1.0, ai = 1.0;
    uint32_t best_k = 0;
    for (uint32_t k = 1; k <= s->p.draft_max; k++) {
        ai *= a;
        e += ai;
        double v = e / (1.0 + r * k);
        if (v > best * 1.0001) {
            best = v;
            best_k = k;
        }
    }
    return best_k < s->p.draft_min ? 0 : best_k;
}

void ebb_spec_feedback(struct ebb_spec *s, uint32_t drafted, uint32_t accepted, double seconds)
{
    if (accepted > drafted)
        accepted = drafted;
    if (drafted) {
        s->stats.passes++;
        s->stats.drafted += drafted;
        s->stats.accepted += accepted;
        /* Each accepted draft is one success; the first rejected one a failure; the drafts
         * after it were never tried. */
        for (uint32_t i = 0; i < accepted; i++)
            s->accept += ACCEPT_ALPHA * (1.0 - s->accept);
        if (accepted < drafted)
            s->accept -= ACCEPT_ALPHA * s->accept;
    } else {
        s->stats.plain++;
    }
    uint32_t rows = drafted + 1, w = (rows - 1) / 64 % 2;
    uint64_t bit = 1ull << ((rows - 1) % 64);
    bool first = !(s->timed[w] & bit);
    s->timed[w] |= bit;
    if (!first && seconds > 0 && isfinite(seconds)) {
        double n = (double)drafted + 1.0;
        s->w = s->w * COST_DECAY + 1.0;
        s->sn = s->sn * COST_DECAY + n;
        s->snn = s->snn * COST_DECAY + n * n;
        s->st = s->st * COST_DECAY + seconds;
        s->snt = s->snt * COST_DECAY + n * seconds;
    }
    s->k = choose_k(s);
}

void ebb_spec_stats(const struct ebb_spec *s, struct ebb_spec_stats *st)
{
    *st = s->stats;
    st->k = s->k;
    st->accept_ema = s->accept;
    st->row_cost = row_cost(s);
}

float *ebb_spec_rows(struct ebb_spec *s)
{
    return s->rows;
}

uint32_t ebb_spec_draft_max(const struct ebb_spec *s)
{
    return s->p.draft_max;
}

/* ---- one step on its own ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ebb_err ebb_spec_decode(struct ebb_spec *s, struct ebb_model *m, uint32_t seq,
                        struct ebb_sampler *smp, int32_t last, uint32_t pos, uint32_t max_new,
                        int32_t *out, uint32_t *n_out, struct ebb_diag *diag)
{
    uint32_t n_ctx = ebb_model_n_ctx(m);
    if (!max_new || pos >= n_ctx)
        return ebb_diag_set(diag, EBB_EINVAL, "spec: no room for a token at position %u", pos);
    uint32_t cap = max_new - 1;
    if (cap > n_ctx - pos - 1)
        cap = n_ctx - pos - 1;
    if (cap > s->p.draft_max)
        cap = s->p.draft_max;
    s->batch[0] = last;
    double t0 = now_s(); /* drafting counts in the step's cost: a draft model's passes do */
    uint32_t nd = ebb_spec_draft(s, s->batch + 1, cap);
    struct ebb_model_out o = {0};
    if (nd)
        o.logits_all = s->rows;
    else
        o.logits = s->rows;
    ebb_err rc = ebb_model_eval(m, seq, s->batch, nd + 1, pos, &o, diag);
    if (rc)
        return rc;
    double dt = now_s() - t0;
    uint32_t n = 0;
    rc = ebb_spec_verify(smp, s->rows, s->n_vocab, s->batch + 1, nd, out, &n, NULL);
    if (rc)
        return ebb_diag_set(diag, rc, "no token can be sampled (all banned)");
    ebb_spec_feedback(s, nd, n - 1, dt);
    ebb_spec_push(s, out, n);
    *n_out = n;
    return EBB_OK;
}
