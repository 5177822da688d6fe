/* Token sampler. The stages follow llama.cpp's default chain (see sampler.h); each is a small
 * function over a candidate list so that the order is visible in ebb__sample_cands(). */
#include "sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HISTORY_CAP 4096

struct cand {
    int32_t id;
    float logit;
};

struct ebb_sampler {
    struct ebb_sampling p; /* logit_bias points at bias below */
    uint32_t n_vocab;
    uint64_t seed;
    uint64_t rng[4];              /* xoshiro256** state */
    struct ebb_logit_bias *bias;  /* (n_logit_bias) */
    struct cand *cands;           /* (n_vocab) scratch candidate list */
    float *orig;                  /* (n_vocab) copy of the input logits for logprobs */
    uint32_t *counts;             /* (n_vocab) occurrences in the penalty window, kept zero */
    int32_t hist[HISTORY_CAP];    /* ring buffer of accepted tokens */
    uint32_t hist_head, hist_len; /* next write position, valid entries */
};

/* ---- PRNG: splitmix64 to seed xoshiro256** (public-domain algorithms by Vigna) ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * 0x1p-53;
}

static void rng_seed(struct ebb_sampler *s)
{
    uint64_t x = s->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
}

static uint64_t os_seed(void)
{
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&v, sizeof(v), 1, f) != 1)
            v = 0;
        fclose(f);
    }
    if (!v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    return v == EBB_SEED_RANDOM ? 1 : v;
}

/* ---- lifecycle ---- */

void ebb_sampling_defaults(struct ebb_sampling *s)
{
    memset(s, 0, sizeof(*s));
    s->temperature = 1.0f;
    s->top_k = 0;
    s->top_p = 1.0f;
    s->min_p = 0.0f;
    s->repeat_penalty = 1.0f;
    s->repeat_last_n = 64;
    s->seed = EBB_SEED_RANDOM;
}

ebb_err ebb_sampler_new(const struct ebb_sampling *p, uint32_t n_vocab, struct ebb_sampler **out,
                        struct ebb_diag *diag)
{
    if (!n_vocab)
        return ebb_diag_set(diag, EBB_EINVAL, "sampler: empty vocabulary");
    if (isnan(p->temperature))
        return ebb_diag_set(diag, EBB_EINVAL, "sampler: temperature is NaN");
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return ebb_diag_set(diag, EBB_EINVAL, "sampler: top_p %g outside [0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return ebb_diag_set(diag, EBB_EINVAL, "sampler: min_p %g outside [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return ebb_diag_set(diag, EBB_EINVAL, "sampler: repeat_penalty %g must be > 0",
                            (double)p->repeat_penalty);
    if (p->repeat_last_n < -1)
        return ebb_diag_set(diag, EBB_EINVAL, "sampler: repeat_last_n %d must be >= -1",
                            (int)p->repeat_last_n);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return ebb_diag_set(diag, EBB_EINVAL, "sampler: penalties must be finite");
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const struct ebb_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || (uint32_t)b->token >= n_vocab)
            return ebb_diag_set(diag, EBB_EINVAL,
                                "sampler: logit bias token %d outside the "
                                "vocabulary (%u tokens)",
                                (int)b->token, n_vocab);
        if (isnan(b->bias))
            return ebb_diag_set(diag, EBB_EINVAL, "sampler: logit bias of token %d is NaN",
                                (int)b->token);
    }

    ebb_err rc = EBB_OK;
    struct ebb_sampler *s = calloc(1, sizeof(*s));
    if (!s)
        return EBB_ENOMEM;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cands = malloc(sizeof(*s->cands) * n_vocab);
    s->orig = malloc(sizeof(*s->orig) * n_vocab);
    s->counts = calloc(n_vocab, sizeof(*s->counts));
    if (p->n_logit_bias) {
        s->bias = malloc(sizeof(*s->bias) * p->n_logit_bias);
        if (s->bias)
            memcpy(s->bias, p->logit_bias, sizeof(*s->bias) * p->n_logit_bias);
    }
    if (!s->cands || !s->orig || !s->counts || (p->n_logit_bias && !s->bias)) {
        rc = ebb_diag_set(diag, EBB_ENOMEM, "sampler: out of memory");
        goto out;
    }
    s->p.logit_bias = s->bias;
    s->seed = p->seed == EBB_SEED_RANDOM ? os_seed() : p->seed;
    rng_seed(s);
out:
    if (rc) {
        ebb_sampler_free(s);
        return rc;
    }
    *out = s;
    return EBB_OK;
}

void ebb_sampler_free(struct ebb_sampler *s)
{
    if (!s)
        return;
    free(s->bias);
    free(s->cands);
    free(s->orig);
    free(s->counts);
    free(s);
}

void ebb_sampler_reset(struct ebb_sampler *s)
{
    s->hist_head = 0;
    s->hist_len = 0;
    rng_seed(s);
}

void ebb_sampler_accept(struct ebb_sampler *s, int32_t token)
{
    s->hist[s->hist_head] = token;
    s->hist_head = (s->hist_head + 1) % HISTORY_CAP;
    if (s->hist_len < HISTORY_CAP)
        s->hist_len++;
}

bool ebb_sampler_is_greedy(const struct ebb_sampler *s)
{
    return s->p.temperature <= 0.0f;
}

static bool penalties_active(const struct ebb_sampler *s)
{
    return s->p.repeat_last_n != 0 &&
           (s->p.repeat_penalty != 1.0f || s->p.presence_penalty != 0.0f ||
            s->p.frequency_penalty != 0.0f);
}

bool ebb_sampler_needs_full_logits(const struct ebb_sampler *s)
{
    if (penalties_active(s) || s->p.n_logit_bias)
        return true;
    return !ebb_sampler_is_greedy(s) && s->p.top_k <= 0;
}

uint32_t ebb_sampler_n_candidates(const struct ebb_sampler *s)
{
    if (ebb_sampler_needs_full_logits(s))
        return 0;
    if (ebb_sampler_is_greedy(s))
        return 1;
    return (uint32_t)s->p.top_k < s->n_vocab ? (uint32_t)s->p.top_k : s->n_vocab;
}

uint64_t ebb_sampler_seed(const struct ebb_sampler *s)
{
    return s->seed;
}

/* ---- stages ---- */

/* Applies the repeat, frequency and presence penalties to the tokens seen in the last
 * repeat_last_n accepted tokens, either in the full vector logits or (logits NULL) to the
 * candidates, writing their new logits to out_cands. s->counts is scratch, left zeroed. */
static void penalize(struct ebb_sampler *s, float *logits, const struct cand *cands, uint32_t n,
                     struct cand *out_cands)
{
    uint32_t win = s->p.repeat_last_n < 0 ? s->hist_len : (uint32_t)s->p.repeat_last_n;
    if (win > s->hist_len)
        win = s->hist_len;
    if (!win)
        return;
    for (uint32_t k = 0; k < win; k++) {
        int32_t t = s->hist[(s->hist_head + HISTORY_CAP - 1 - k) % HISTORY_CAP];
        if (t >= 0 && (uint32_t)t < s->n_vocab)
            s->counts[t]++;
    }
    float rp = s->p.repeat_penalty, fp = s->p.frequency_penalty, pp = s->p.presence_penalty;
    if (logits) {
        /* Full vector: visit each distinct token of the window once. */
        for (uint32_t k = 0; k < win; k++) {
            int32_t t = s->hist[(s->hist_head + HISTORY_CAP - 1 - k) % HISTORY_CAP];
            if (t < 0 || (uint32_t)t >= s->n_vocab || !s->counts[t])
                continue;
            float l = logits[t];
            l = l <= 0.0f ? l * rp : l / rp;
            logits[t] = l - (float)s->counts[t] * fp - pp;
            s->counts[t] = 0;
        }
    } else {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t c = s->counts[cands[i].id];
            float l = cands[i].logit;
            if (c) {
                l = l <= 0.0f ? l * rp : l / rp;
                l -= (float)c * fp + pp;
            }
            out_cands[i].logit = l;
        }
    }
    for (uint32_t k = 0; k < win; k++) {
        int32_t t = s->hist[(s->hist_head + HISTORY_CAP - 1 - k) % HISTORY_CAP];
        if (t >= 0 && (uint32_t)t < s->n_vocab)
            s->counts[t] = 0;
    }
}

/* Descending by logit; ties by ascending id so that results never depend on qsort's order. */
static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* True if a ranks before b in cand_cmp's order. */
static bool before(const struct cand *a, const struct cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* Keeps the k best of c[0..n) in c[0..k), sorted, using a bounded min-heap at the front. */
static uint32_t top_k_select(struct cand *c, uint32_t n, uint32_t k)
{
    if (k >= n) {
        qsort(c, n, sizeof(*c), cand_cmp);
        return n;
    }
    /* c[0..k) is a heap whose root is the worst kept candidate. */
    for (uint32_t i = 0; i < n; i++) {
        struct cand x = c[i];
        uint32_t pos;
        if (i < k) {
            pos = i;
            while (pos > 0 && before(&c[(pos - 1) / 2], &x)) {
                c[pos] = c[(pos - 1) / 2];
                pos = (pos - 1) / 2;
            }
            c[pos] = x;
            continue;
        }
        if (!before(&x, &c[0]))
            continue;
        pos = 0;
        for (;;) {
            uint32_t l = 2 * pos + 1, r = l + 1, w = pos;
            const struct cand *worst = &x;
            if (l < k && before(worst, &c[l]))
                w = l, worst = &c[l];
            if (r < k && before(worst, &c[r]))
                w = r;
            if (w == pos)
                break;
            c[pos] = c[w];
            pos = w;
        }
        c[pos] = x;
    }
    qsort(c, k, sizeof(*c), cand_cmp);
    return k;
}

/* How many of the sorted candidates top-p keeps: the shortest prefix whose softmax mass
 * reaches top_p (at least one). */
static uint32_t top_p_cut(const struct cand *c, uint32_t n, float top_p)
{
    if (top_p >= 1.0f || n <= 1)
        return n;
    double z = 0;
    for (uint32_t i = 0; i < n; i++)
        z += exp((double)(c[i].logit - c[0].logit));
    double cum = 0;
    for (uint32_t i = 0; i < n; i++) {
        cum += exp((double)(c[i].logit - c[0].logit)) / z;
        if (cum >= (double)top_p)
            return i + 1;
    }
    return n;
}

static uint32_t min_p_cut(const struct cand *c, uint32_t n, float min_p)
{
    if (min_p <= 0.0f || n <= 1)
        return n;
    /* p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p). */
    float floor_logit = c[0].logit + logf(min_p);
    uint32_t keep = 1;
    while (keep < n && c[keep].logit >= floor_logit)
        keep++;
    return keep;
}

/* Truncation, temperature and the draw over sorted candidates c[0..n). */
static int32_t draw(struct ebb_sampler *s, struct cand *c, uint32_t n)
{
    n = top_p_cut(c, n, s->p.top_p);
    n = min_p_cut(c, n, s->p.min_p);
    double t = s->p.temperature, z = 0;
    for (uint32_t i = 0; i < n; i++)
        z += exp(((double)c[i].logit - c[0].logit) / t);
    double u = rng_uniform(s->rng) * z, cum = 0;
    for (uint32_t i = 0; i < n; i++) {
        cum += exp(((double)c[i].logit - c[0].logit) / t);
        if (u < cum)
            return c[i].id;
    }
    return c[n - 1].id; /* rounding left u at the very top */
}

/* Log-softmax statistics of the untouched input for ebb_sample_info. */
static void fill_info(struct ebb_sample_info *info, const struct cand *c, uint32_t n,
                      const float *logits, uint32_t n_vocab, int32_t chosen)
{
    /* Either c (candidate list) or logits (full vector) is given. */
    uint32_t n_top = info->n_top > EBB_SAMPLE_MAX_TOP ? EBB_SAMPLE_MAX_TOP : info->n_top;
    uint32_t cnt = logits ? n_vocab : n;
    float mx = -INFINITY, chosen_logit = -INFINITY;
    for (uint32_t i = 0; i < cnt; i++) {
        float l = logits ? logits[i] : c[i].logit;
        int32_t id = logits ? (int32_t)i : c[i].id;
        mx = l > mx ? l : mx;
        if (id == chosen)
            chosen_logit = l;
    }
    double z = 0;
    for (uint32_t i = 0; i < cnt; i++)
        z += exp((double)(logits ? logits[i] : c[i].logit) - mx);
    double lz = (double)mx + log(z);
    struct cand top[EBB_SAMPLE_MAX_TOP];
    uint32_t nt = 0;
    for (uint32_t i = 0; i < cnt && n_top; i++) {
        struct cand x = {logits ? (int32_t)i : c[i].id, logits ? logits[i] : c[i].logit};
        if (nt == n_top && !before(&x, &top[nt - 1]))
            continue;
        uint32_t pos = nt < n_top ? nt++ : nt - 1;
        while (pos > 0 && before(&x, &top[pos - 1])) {
            top[pos] = top[pos - 1];
            pos--;
        }
        top[pos] = x;
    }
    for (uint32_t i = 0; i < nt; i++) {
        info->top_ids[i] = top[i].id;
        info->top_logprobs[i] = (float)((double)top[i].logit - lz);
    }
    info->n_top = nt;
    info->logprob = (float)((double)chosen_logit - lz);
}

ebb_err ebb_sampler_sample(struct ebb_sampler *s, float *logits, int32_t *token,
                           struct ebb_sample_info *info)
{
    if (info)
        memcpy(s->orig, logits, sizeof(float) * s->n_vocab);
    /* 1. logit bias, 2. penalties: on the full vector. */
    for (size_t i = 0; i < s->p.n_logit_bias; i++)
        logits[s->bias[i].token] += s->bias[i].bias;
    if (penalties_active(s))
        penalize(s, logits, NULL, 0, NULL);

    int32_t best = -1;
    if (ebb_sampler_is_greedy(s)) {
        float bl = -INFINITY;
        for (uint32_t i = 0; i < s->n_vocab; i++) {
            if (logits[i] > bl) {
                bl = logits[i];
                best = (int32_t)i;
            }
        }
    } else {
        /* 3. top-k (or all finite candidates), sorted. */
        uint32_t n = 0;
        for (uint32_t i = 0; i < s->n_vocab; i++) {
            if (logits[i] > -INFINITY) /* drops -inf and NaN */
                s->cands[n++] = (struct cand){(int32_t)i, logits[i]};
        }
        if (n) {
            uint32_t k = s->p.top_k > 0 ? (uint32_t)s->p.top_k : n;
            n = top_k_select(s->cands, n, k);
            /* 4. top-p, 5. min-p, 6. temperature, 7. draw. */
            best = draw(s, s->cands, n);
        }
    }
    if (best < 0)
        return EBB_EINVAL;
    if (info)
        fill_info(info, NULL, 0, s->orig, s->n_vocab, best);
    *token = best;
    return EBB_OK;
}

ebb_err ebb_sampler_sample_candidates(struct ebb_sampler *s, const int32_t *ids,
                                      const float *logits, uint32_t n, int32_t *token,
                                      struct ebb_sample_info *info)
{
    if (n > s->n_vocab)
        return EBB_EINVAL;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= s->n_vocab)
            return EBB_EINVAL;
        float l = logits[i];
        for (size_t b = 0; b < s->p.n_logit_bias; b++)
            if (s->bias[b].token == ids[i])
                l += s->bias[b].bias;
        s->cands[i] = (struct cand){ids[i], l};
    }
    if (penalties_active(s))
        penalize(s, NULL, s->cands, n, s->cands);
    for (uint32_t i = 0; i < n; i++)
        if (s->cands[i].logit > -INFINITY)
            s->cands[m++] = s->cands[i];
    if (!m)
        return EBB_EINVAL;
    int32_t best;
    if (ebb_sampler_is_greedy(s)) {
        uint32_t b = 0;
        for (uint32_t i = 1; i < m; i++)
            if (before(&s->cands[i], &s->cands[b]))
                b = i;
        best = s->cands[b].id;
    } else {
        uint32_t k = s->p.top_k > 0 ? (uint32_t)s->p.top_k : m;
        m = top_k_select(s->cands, m, k);
        best = draw(s, s->cands, m);
    }
    if (info) {
        /* Rebuild the untouched input as candidates for the statistics. */
        for (uint32_t i = 0; i < n; i++)
            s->cands[i] = (struct cand){ids[i], logits[i]};
        fill_info(info, s->cands, n, NULL, s->n_vocab, best);
    }
    *token = best;
    return EBB_OK;
}
