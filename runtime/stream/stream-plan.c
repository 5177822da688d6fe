/* Residency planner: see stream-plan.h and docs/STREAMER.md. */
#include "stream-plan.h"

#include <stdio.h>
#include <string.h>

#include "memprobe.h"

#define MIB (1024.0 * 1024.0)

static uint64_t sat_sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

ebb_err ebb_stream_plan_cfg_check(struct ebb_stream_plan_cfg *c, struct ebb_diag *diag)
{
    if (!c->n_layer || c->n_layer > EBB_STREAM_MAX_LAYERS)
        return ebb_diag_set(diag, EBB_EINVAL, "planner: %u layers (1..%d supported)", c->n_layer,
                            EBB_STREAM_MAX_LAYERS);
    if (!c->layer_bytes)
        return ebb_diag_set(diag, EBB_EINVAL, "planner: no layer sizes");
    if (c->mode > EBB_STREAM_CONTEXT)
        return ebb_diag_set(diag, EBB_EINVAL, "planner: unknown residency mode %d", (int)c->mode);
    if (!c->n_ctx_want)
        return ebb_diag_set(diag, EBB_EINVAL, "planner: no context length");
    if (!c->n_ctx_min)
        c->n_ctx_min = c->n_ctx_want < 256 ? c->n_ctx_want : 256;
    if (c->n_ctx_min > c->n_ctx_want)
        c->n_ctx_min = c->n_ctx_want;
    if (!c->margin) {
        uint64_t model = c->fixed_bytes;
        for (uint32_t l = 0; l < c->n_layer; l++)
            model = sat_add(model, c->layer_bytes[l]);
        c->margin = model / 20 > (64u << 20) ? model / 20 : (64u << 20);
    }
    if (!c->grow_hold_ns)
        c->grow_hold_ns = 10000000000ull;
    if (!c->hysteresis)
        c->hysteresis = c->margin;
    if (!c->grow_min_tokens)
        c->grow_min_tokens = 32;
    if (c->grow_min_gain <= 0)
        c->grow_min_gain = 0.02;
    if (!c->backoff_ns)
        c->backoff_ns = 60000000000ull;
    if (!c->pressure_gap_ns)
        c->pressure_gap_ns = 5000000000ull;
    return EBB_OK;
}

uint64_t ebb_stream_plan_total(const struct ebb_stream_planner *p, uint32_t n)
{
    const struct ebb_stream_plan_cfg *c = &p->cfg;
    uint64_t t = sat_add(sat_add(c->fixed_bytes, c->runtime_bytes), p->kv_bytes);
    if (n < c->n_layer)
        t = sat_add(t, c->staging_bytes);
    for (uint32_t l = 0; l < n && l < c->n_layer; l++)
        t = sat_add(t, p->layer_bytes[l]);
    return t;
}

uint32_t ebb_stream_plan_fit(const struct ebb_stream_planner *p, uint64_t limit)
{
    /* At 100% residency the staging ring is not needed, so the full plan is checked apart. */
    if (ebb_stream_plan_total(p, p->cfg.n_layer) <= limit)
        return p->cfg.n_layer;
    uint64_t t = ebb_stream_plan_total(p, 0);
    uint32_t n = 0;
    while (n < p->cfg.n_layer - 1 && sat_add(t, p->layer_bytes[n]) <= limit)
        t += p->layer_bytes[n++];
    return t <= limit ? n : 0;
}

uint64_t ebb_stream_plan_limit(const struct ebb_stream_planner *p,
                               const struct ebb_stream_inputs *in)
{
    uint64_t lim = p->cfg.budget ? p->cfg.budget : UINT64_MAX;
    if (in->available_ok) {
        uint64_t a = sat_sub(sat_add(in->counted_bytes, in->available), p->cfg.margin);
        if (a < lim)
            lim = a;
    }
    return lim;
}

static void start_plan(struct ebb_stream_planner *p, const struct ebb_stream_inputs *in, uint32_t n)
{
    p->n_resident = n;
    p->plan_tokens = in->tokens;
    p->plan_busy = in->busy_ns;
    p->room_seen = false;
}

ebb_err ebb_stream_planner_init(struct ebb_stream_planner *p, const struct ebb_stream_plan_cfg *cfg,
                                const struct ebb_stream_inputs *in, struct ebb_diag *diag)
{
    memset(p, 0, sizeof(*p));
    p->cfg = *cfg;
    ebb_err rc = ebb_stream_plan_cfg_check(&p->cfg, diag);
    if (rc)
        return rc;
    memcpy(p->layer_bytes, cfg->layer_bytes, sizeof(uint64_t) * cfg->n_layer);
    p->cfg.layer_bytes = p->layer_bytes;
    const struct ebb_stream_plan_cfg *c = &p->cfg;
    uint32_t reserve = c->mode == EBB_STREAM_CONTEXT ? c->n_ctx_want
                       : c->mode == EBB_STREAM_BALANCED
                           ? (c->n_ctx_want / 2 > c->n_ctx_min ? c->n_ctx_want / 2 : c->n_ctx_min)
                           : c->n_ctx_min;
    uint64_t limit = ebb_stream_plan_limit(p, in);
    p->n_ctx = reserve;
    p->kv_bytes = (uint64_t)reserve * c->kv_per_token;
    uint64_t need = sat_add(ebb_stream_plan_total(p, 0), 0);
    if (need > limit)
        return ebb_diag_set(diag, EBB_ENOMEM,
                            "memory limit %.0f MiB is below the %.0f MiB needed with every layer "
                            "streamed (fixed tensors %.0f, runtime %.0f, KV for %u tokens %.0f, "
                            "staging %.0f MiB)",
                            limit / MIB, need / MIB, c->fixed_bytes / MIB, c->runtime_bytes / MIB,
                            reserve, p->kv_bytes / MIB, c->staging_bytes / MIB);
    uint32_t n = ebb_stream_plan_fit(p, limit);
    if (c->mode != EBB_STREAM_CONTEXT && c->kv_per_token) {
        /* Layers came first; what is left over (at most a layer's worth unless every layer
         * fits) extends the context up to what was asked for. */
        uint64_t extra = sat_sub(limit, ebb_stream_plan_total(p, n)) / c->kv_per_token;
        uint64_t ctx = reserve + extra;
        p->n_ctx = ctx > c->n_ctx_want ? c->n_ctx_want : (uint32_t)ctx;
        p->kv_bytes = (uint64_t)p->n_ctx * c->kv_per_token;
    }
    start_plan(p, in, n);
    return EBB_OK;
}

static double rate(const struct ebb_stream_planner *p, const struct ebb_stream_inputs *in)
{
    uint64_t dt = sat_sub(in->tokens, p->plan_tokens), db = sat_sub(in->busy_ns, p->plan_busy);
    if (dt < p->cfg.grow_min_tokens || !db)
        return 0;
    return (double)dt * 1e9 / (double)db;
}

static bool change(struct ebb_stream_planner *p, const struct ebb_stream_inputs *in, uint32_t to,
                   struct ebb_stream_change *chg)
{
    chg->from = p->n_resident;
    chg->to = to;
    start_plan(p, in, to);
    p->n_changes++;
    return true;
}

bool ebb_stream_planner_step(struct ebb_stream_planner *p, const struct ebb_stream_inputs *in,
                             struct ebb_stream_change *chg)
{
    const struct ebb_stream_plan_cfg *c = &p->cfg;
    uint64_t limit = ebb_stream_plan_limit(p, in);
    uint32_t fit = ebb_stream_plan_fit(p, limit);
    uint32_t n = p->n_resident;
    if (in->pressure && n > 0 &&
        (!p->pressure_seen || in->now_ns - p->pressure_at >= c->pressure_gap_ns)) {
        uint32_t shed = c->n_layer / 8 ? c->n_layer / 8 : 1;
        uint32_t to = n > shed ? n - shed : 0;
        if (fit < to)
            to = fit;
        snprintf(chg->reason, sizeof(chg->reason),
                 "memory pressure signalled: shed %u layers (limit %.0f MiB)", n - to,
                 limit == UINT64_MAX ? -1.0 : limit / MIB);
        p->trial = false;
        p->pressure_seen = true;
        p->pressure_at = in->now_ns;
        return change(p, in, to, chg);
    }
    if (fit < n) {
        /* A probe near zero cannot show how deep the deficit is (MemAvailable never goes
         * negative), so a starved reading sheds at least an eighth per period as well. */
        uint32_t shed = c->n_layer / 8 ? c->n_layer / 8 : 1;
        if (in->available_ok && in->available < c->margin / 2 && n - fit < shed)
            fit = n > shed ? n - shed : 0;
        snprintf(chg->reason, sizeof(chg->reason),
                 "limit %.1f MiB (%s) holds %u of %u layers: shed %u from the top", limit / MIB,
                 in->available_ok && (!c->budget || limit < c->budget) ? "available - margin"
                                                                       : "budget",
                 fit, c->n_layer, n - fit);
        p->trial = false;
        return change(p, in, fit, chg);
    }
    if (p->trial) {
        double tps = rate(p, in);
        if (tps <= 0)
            return false; /* not judged yet: no further growth meanwhile */
        p->trial = false;
        if (p->prev_tps > 0 && tps < p->prev_tps * (1 + c->grow_min_gain)) {
            uint32_t back = p->trial_from;
            snprintf(chg->reason, sizeof(chg->reason),
                     "growth %u->%u layers gave %.2f tok/s vs %.2f before: undone", back, n, tps,
                     p->prev_tps);
            p->ceiling = back;
            p->backoff_until = in->now_ns + c->backoff_ns;
            p->prev_tps = tps;
            return change(p, in, back, chg);
        }
        p->prev_tps = tps;
    }
    /* Hysteresis applies to what the probes report, not to the configured budget. */
    uint64_t glimit = c->budget ? c->budget : UINT64_MAX;
    if (in->available_ok) {
        uint64_t a = sat_sub(sat_add(in->counted_bytes, in->available), c->margin + c->hysteresis);
        glimit = a < glimit ? a : glimit;
    }
    uint32_t gfit = ebb_stream_plan_fit(p, glimit);
    if (in->now_ns < p->backoff_until && gfit > p->ceiling)
        gfit = p->ceiling > n ? p->ceiling : n;
    if (gfit <= n || in->pressure) {
        p->room_seen = false;
        p->regrow = false;
        return false;
    }
    if (p->regrow) {
        p->regrow = false;
        p->trial = false;
        if (p->regrow_limit)
            snprintf(chg->reason, sizeof(chg->reason),
                     "memory limit raised: grow by %u to %u layers", gfit - n, gfit);
        else if (c->budget)
            snprintf(chg->reason, sizeof(chg->reason),
                     "budget raised to %.1f MiB: grow by %u to %u layers", c->budget / MIB,
                     gfit - n, gfit);
        else
            snprintf(chg->reason, sizeof(chg->reason),
                     "budget lifted (the probes alone): grow by %u to %u layers", gfit - n, gfit);
        return change(p, in, gfit, chg);
    }
    if (!p->room_seen) {
        p->room_seen = true;
        p->room_since = in->now_ns;
    }
    if (in->now_ns - p->room_since < c->grow_hold_ns)
        return false;
    double before = rate(p, in);
    p->prev_tps = before;
    p->trial = true;
    p->trial_from = n;
    snprintf(chg->reason, sizeof(chg->reason),
             "room for %u layers free for %.1f s: grow by %u (tok/s before %.2f, to be checked)",
             gfit, (in->now_ns - p->room_since) / 1e9, gfit - n, before);
    return change(p, in, gfit, chg);
}

void ebb_stream_planner_set_budget(struct ebb_stream_planner *p, uint64_t budget)
{
    bool raised = !budget || (p->cfg.budget && budget > p->cfg.budget);
    p->cfg.budget = budget;
    if (raised) {
        p->regrow = true;
        p->regrow_limit = false;
        p->backoff_until = 0;
        p->ceiling = p->cfg.n_layer;
    }
}

void ebb_stream_planner_limit_raised(struct ebb_stream_planner *p)
{
    p->regrow = true;
    p->regrow_limit = true;
    p->backoff_until = 0;
    p->ceiling = p->cfg.n_layer;
}

uint32_t ebb_stream_plan_host_slots(uint32_t n_streamed, uint64_t slot_size, uint64_t host_limit,
                                    uint32_t min_slots)
{
    if (n_streamed > min_slots && slot_size && host_limit / slot_size >= n_streamed)
        return n_streamed;
    return min_slots;
}

uint32_t ebb_stream_plan_place(uint32_t n_layer, uint32_t n_resident, uint32_t n_host,
                               uint8_t *kinds)
{
    if (n_resident > n_layer)
        n_resident = n_layer;
    if (n_host > n_layer - n_resident)
        n_host = n_layer - n_resident;
    for (uint32_t l = 0; kinds && l < n_layer; l++)
        kinds[l] = l < n_resident          ? EBB_STREAM_PLACE_RESIDENT
                   : l >= n_layer - n_host ? EBB_STREAM_PLACE_HOST
                                           : EBB_STREAM_PLACE_STREAMED;
    return n_host;
}

uint32_t ebb_stream_plan_host_count(uint32_t n_off, double link_ms, double host_ms,
                                    uint32_t prefetch)
{
    if (!(link_ms > 0) || !(host_ms > 0))
        return 0;
    uint32_t best = 0;
    double best_ms = n_off * link_ms;
    for (uint32_t h = 1; h <= n_off; h++) {
        uint32_t ahead = n_off - h < prefetch ? n_off - h : prefetch;
        double overlap = ahead * link_ms < h * host_ms ? ahead * link_ms : h * host_ms;
        double ms = (n_off - h) * link_ms + h * host_ms - overlap;
        if (ms < best_ms) {
            best_ms = ms;
            best = h;
        }
    }
    return best;
}

void ebb_stream_plan_bitmap(const struct ebb_stream_planner *p, uint64_t *words, size_t n_words)
{
    memset(words, 0, n_words * sizeof(*words));
    for (uint32_t l = 0; l < p->n_resident && l / 64 < n_words; l++)
        words[l / 64] |= 1ull << (l % 64);
}

static const char *const mode_names[] = {"speed", "balanced", "context"};

ebb_err ebb_stream_mode_parse(const char *s, enum ebb_stream_mode *out)
{
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, mode_names[i])) {
            *out = (enum ebb_stream_mode)i;
            return EBB_OK;
        }
    return EBB_EINVAL;
}

const char *ebb_stream_mode_name(enum ebb_stream_mode m)
{
    return (unsigned)m < 3 ? mode_names[m] : "?";
}

ebb_err ebb_stream_budget_parse(const char *s, uint64_t *out)
{
    if (s && !strcmp(s, "auto")) {
        *out = 0;
        return EBB_OK;
    }
    uint64_t v;
    ebb_err rc = ebb_memprobe_parse_size(s, &v);
    if (rc)
        return rc;
    if (!v)
        return EBB_EINVAL;
    *out = v;
    return EBB_OK;
}
