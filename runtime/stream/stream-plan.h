/* The residency planner of the layer streamer: which decoder layers stay resident on the
 * compute device and which are streamed from disk for every step. Pure functions plus a small
 * state struct; time, probe readings and throughput come in as arguments, so every rule is
 * unit-testable with fake clocks (docs/STREAMER.md states the rules).
 *
 * Placement rule: the resident set is always a prefix, layers 0..n_resident-1. For uniform
 * layers only the count matters; for non-uniform layers the prefix is the longest one whose
 * bytes fit (no later, smaller layer fills a gap), so shedding always removes the highest
 * resident index first and the streamed layers form one contiguous run of the file. */
#ifndef EBB_RUNTIME_STREAM_PLAN_H
#define EBB_RUNTIME_STREAM_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define EBB_STREAM_MAX_LAYERS 1024

enum ebb_stream_mode {
    EBB_STREAM_SPEED = 0,    /* layers first: KV reserve for a short working context */
    EBB_STREAM_BALANCED = 1, /* KV reserve for half the wanted context */
    EBB_STREAM_CONTEXT = 2,  /* KV reserve for the whole wanted context */
};

struct ebb_stream_plan_cfg {
    uint32_t n_layer;
    const uint64_t *layer_bytes; /* (n_layer) device bytes of each decoder layer; copied */
    uint64_t fixed_bytes;        /* always resident: embeddings, final norm, output head */
    uint64_t runtime_bytes;      /* scratch buffers, programs, queues */
    uint64_t staging_bytes;      /* the streamer's staging ring; not needed at 100% residency */
    uint64_t kv_per_token;       /* KV bytes per position, all layers and slots together */
    uint32_t n_ctx_want;         /* the context asked for (the model's, or --ctx) */
    uint32_t n_ctx_min;          /* the smallest context worth running; 0 = min(256, want) */
    enum ebb_stream_mode mode;
    uint64_t budget;          /* --memory-budget; 0 = auto (the probes alone decide) */
    uint64_t margin;          /* safety margin kept free; 0 = max(64 MiB, 5% of the model) */
    uint64_t grow_hold_ns;    /* room must stay free this long before growing; 0 = 10 s */
    uint64_t hysteresis;      /* extra free bytes growth needs beyond the margin; 0 = margin */
    uint32_t grow_min_tokens; /* tokens measured before/after a growth to judge it; 0 = 32 */
    double grow_min_gain;     /* a growth is kept if tok/s rises by this fraction; 0 = 0.02 */
    uint64_t backoff_ns;      /* after an undone growth, no growth above it for this; 0 = 60 s */
    uint64_t pressure_gap_ns; /* a pressure shed repeats at most this often (PSI avg10 decays
                                 slowly); 0 = 5 s */
};

/* What the daemon knows at a re-plan. Counters are cumulative (the planner keeps the deltas). */
struct ebb_stream_inputs {
    uint64_t now_ns;        /* monotonic clock */
    bool available_ok;      /* a probe produced `available` */
    uint64_t available;     /* bytes the device may still take (memprobe's `available`) */
    uint64_t counted_bytes; /* bytes the model holds now that the probe does NOT count as
                               available (anonymous or device allocations; 0 for file-backed
                               mmap pages, which MemAvailable already includes) */
    bool pressure;          /* a pressure signal (PSI, macOS dispatch source): shed at once */
    uint64_t tokens;        /* generated tokens so far */
    uint64_t busy_ns;       /* engine time spent evaluating so far (idle time excluded) */
};

struct ebb_stream_change {
    uint32_t from, to; /* resident layer counts */
    char reason[192];
};

struct ebb_stream_planner {
    struct ebb_stream_plan_cfg cfg;
    uint64_t layer_bytes[EBB_STREAM_MAX_LAYERS];
    uint32_t n_ctx;      /* context the KV cache was sized for (fixed after the first plan) */
    uint64_t kv_bytes;   /* n_ctx * kv_per_token */
    uint32_t n_resident; /* layers 0..n_resident-1 are resident */
    bool room_seen;      /* room to grow has been seen since room_since */
    uint64_t room_since;
    uint64_t plan_tokens, plan_busy; /* counters when the current plan started */
    double prev_tps;                 /* tok/s measured under the previous plan; 0 = unknown */
    bool trial;                      /* the last change was a growth not yet judged */
    uint32_t trial_from;
    uint32_t ceiling; /* no growth above this until backoff_until */
    uint64_t backoff_until;
    bool pressure_seen;
    uint64_t pressure_at; /* time of the last pressure shed */
    uint32_t n_changes;
    bool regrow;       /* the budget was raised: grow to it at the next step, no hold, no trial */
    bool regrow_limit; /* the regrow is for a raised memory limit (the reason says so) */
};

/* Validates cfg and fills in defaults. EBB_EINVAL names the bad field in diag. */
ebb_err ebb_stream_plan_cfg_check(struct ebb_stream_plan_cfg *cfg, struct ebb_diag *diag);

/* The initial plan: chooses the context the KV cache is allocated for (from the mode's reserve;
 * speed and balanced then give leftover room to more context up to n_ctx_want) and the resident
 * count. Fails with EBB_ENOMEM and a message when not even the fixed tensors, the runtime, the
 * staging ring, the minimal context and one streamed layer fit. */
ebb_err ebb_stream_planner_init(struct ebb_stream_planner *p, const struct ebb_stream_plan_cfg *cfg,
                                const struct ebb_stream_inputs *in, struct ebb_diag *diag);

/* The byte limit the model must stay under now: min(budget, counted + available - margin). */
uint64_t ebb_stream_plan_limit(const struct ebb_stream_planner *p,
                               const struct ebb_stream_inputs *in);

/* The longest resident prefix whose total (fixed + runtime + KV + staging if any layer is
 * streamed + those layers) is <= limit. */
uint32_t ebb_stream_plan_fit(const struct ebb_stream_planner *p, uint64_t limit);

/* Total bytes of a plan with n resident layers. */
uint64_t ebb_stream_plan_total(const struct ebb_stream_planner *p, uint32_t n);

/* One re-plan. Returns true and fills *chg when the resident count changes; the caller applies
 * it at the next layer boundary between steps. Rules: shrink at once when the limit is
 * exceeded (by at least an eighth of the layers when the probe reads under half the margin) or
 * on pressure (pressure sheds at least an eighth of the layers, at most once per
 * pressure_gap_ns, and blocks growth while it lasts); grow only after limit - hysteresis has left
 * room for more layers for grow_hold_ns, and only up to the ceiling of an undone growth; judge a
 * growth once grow_min_tokens were generated under it: kept if tok/s beat the previous plan by
 * grow_min_gain (or nothing was measured before it), otherwise undone and growth held back for
 * backoff_ns. */
bool ebb_stream_planner_step(struct ebb_stream_planner *p, const struct ebb_stream_inputs *in,
                             struct ebb_stream_change *chg);

/* Changes the byte budget (0 = auto) from the next step on. A lower budget sheds layers at the
 * next step as any exceeded limit does; a higher one grows to it at the next step without the
 * hold time or the tok/s trial (the budget was lent to another model, not tried for speed). */
void ebb_stream_planner_set_budget(struct ebb_stream_planner *p, uint64_t budget);

/* A memory limit (a cgroup's) was raised or removed: the next step grows to what the new limit
 * leaves room for as a raised budget does (no hold, no tok/s trial, backoff cleared). The
 * layers were shed because the limit fell, not tried for speed; the hold is for readings that
 * drift, and an operator's new limit does not. */
void ebb_stream_planner_limit_raised(struct ebb_stream_planner *p);

/* Staging slots for a discrete GPU's pinned host memory: n_streamed (a tier: each streamed
 * layer read once and kept, see docs/STREAMER.md) when that many slots fit host_limit, else
 * min_slots (a ring; a partial tier would not keep layers in place). */
uint32_t ebb_stream_plan_host_slots(uint32_t n_streamed, uint64_t slot_size, uint64_t host_limit,
                                    uint32_t min_slots);

/* Where a decoder layer runs (the hybrid placement, docs/STREAMER.md "Host layers"). */
enum ebb_stream_place {
    EBB_STREAM_PLACE_RESIDENT = 0, /* weights on the device */
    EBB_STREAM_PLACE_STREAMED = 1, /* copied over the link into a staging slot every step */
    EBB_STREAM_PLACE_HOST = 2,     /* computed by the host's cores from the mapped file */
};

/* The three-way placement of n_layer layers into kinds[0..n_layer) (kinds may be NULL): the
 * first n_resident resident, the last n_host of the others on the host (never a resident one),
 * the rest streamed. Returns the host layers placed (min(n_host, n_layer - n_resident)). */
uint32_t ebb_stream_plan_place(uint32_t n_layer, uint32_t n_resident, uint32_t n_host,
                               uint8_t *kinds);

/* The host layers (of n_off layers off the device) that make a step cheapest, from measured
 * milliseconds per layer: link_ms to copy a streamed layer, host_ms to compute one on the
 * host. A step costs (n_off - h) link_ms + h host_ms, less the copies of the next step's first
 * streamed layers (at most prefetch of them) that overlap the host's part. 0 when either rate
 * is unknown (<= 0). */
uint32_t ebb_stream_plan_host_count(uint32_t n_off, double link_ms, double host_ms,
                                    uint32_t prefetch);

/* Resident bitmap: bit l of words[l / 64] set when layer l is resident. */
void ebb_stream_plan_bitmap(const struct ebb_stream_planner *p, uint64_t *words, size_t n_words);

static inline bool ebb_stream_plan_resident(const struct ebb_stream_planner *p, uint32_t layer)
{
    return layer < p->n_resident;
}

/* "speed", "balanced", "context" -> mode; EBB_EINVAL otherwise. */
ebb_err ebb_stream_mode_parse(const char *s, enum ebb_stream_mode *out);
const char *ebb_stream_mode_name(enum ebb_stream_mode m);

/* "--memory-budget": "auto" -> 0, else a size as ebb_memprobe_parse_size reads it (> 0). */
ebb_err ebb_stream_budget_parse(const char *s, uint64_t *out);

#endif
