/* The layer streamer as one object for the engine: memory probes + planner + I/O thread +
 * counters, with the threading rules of docs/STREAMER.md built in. The engine still moves the
 * weights itself (placing or freeing a layer's device buffers when the plan changes, copying
 * or mapping streamed layers out of the staging slots); this object tells it when and which.
 *
 * Threads: ebb_stream_probe() may be called from any thread (the daemon's libuv timer); every
 * other function belongs to the engine thread. */
#ifndef EBB_RUNTIME_STREAM_H
#define EBB_RUNTIME_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "memprobe.h"
#include "stream-io.h"
#include "stream-plan.h"

/* What the probe's `available` already includes of the model's own memory. */
enum ebb_stream_count {
    EBB_STREAM_COUNT_ALL = 0,         /* device/anonymous allocations: count everything */
    EBB_STREAM_COUNT_NOT_WEIGHTS = 1, /* weights are mmapped file pages (zero-copy): the probe
                                         sees them as available, count the rest only */
};

struct ebb_stream_params {
    const char *path;                      /* GGUF or pack the streamed layers are read from */
    const struct ebb_stream_layer *layers; /* (plan.n_layer) extents; copied */
    struct ebb_stream_plan_cfg plan;       /* layer_bytes copied */
    struct ebb_memprobe_params probe;
    enum ebb_stream_count count;
    uint32_t prefetch;           /* layers read ahead (default 2) */
    enum ebb_stream_cache cache; /* default cached */
    /* The user named no mode: ebb_stream_attach picks one that leaves no page cache charged
     * to a memory limit (direct where the file system allows O_DIRECT, else dontneed) when a
     * cgroup's limit binds, or the device shares host memory and less than twice the streamed
     * bytes are free; else it keeps `cache`. */
    bool cache_auto;
    uint32_t io_threads; /* threads per layer read (ebb_stream_io_params.n_threads) */
    uint64_t now_ns;     /* monotonic clock at open */
    uint32_t n_host;     /* the last n_host layers not resident at open are computed on the host
                            (never streamed) for the streamer's whole life; 0 = none */
};

/* One plan change, kept for reports. */
struct ebb_stream_event {
    uint64_t t_ns; /* since open */
    uint32_t from, to;
    char reason[192];
};

#define EBB_STREAM_EVENTS 16

/* The planner's margin under a cgroup's memory limit (no margin configured): a tenth of the
 * limit, at least this, at most the default margin (stream-plan.h). */
#define EBB_STREAM_CG_MARGIN_MIN (16ull << 20)

/* After a cgroup limit was raised or removed, PSI's pressure (its avg10 still averages the time
 * under the old limit) is ignored for this long; critical notifications still count. */
#define EBB_STREAM_PSI_STALE_NS 10000000000ull

/* Everything /metrics and `ebb run --json` show (docs/STREAMER.md, "What to expose"). */
struct ebb_stream_report {
    uint32_t n_resident, n_layer, n_ctx;
    uint32_t n_host; /* layers computed on the host (the last ones); streamed: the rest */
    /* Filled by the engine: host threads, and time spent in host layers (with the activations'
     * trips over the link) over host_steps evaluations that ran them. */
    uint32_t host_threads;
    uint64_t host_ns, host_steps;
    uint64_t budget; /* configured (or set since), 0 = auto */
    /* The plan's bytes now, with no layer resident, and with every layer resident (fixed +
     * runtime + KV + staging where some layer streams + the resident layers). */
    uint64_t bytes, bytes_min, bytes_full;
    enum ebb_stream_mode mode;
    enum ebb_stream_cache cache;
    uint32_t prefetch, n_slots, io_threads; /* n_slots 0 until slots are attached */
    uint64_t limit;                         /* at the last re-plan; UINT64_MAX = none */
    uint64_t margin;                        /* kept free under the probe's reading */
    bool available_ok;
    uint64_t available;        /* last probe reading */
    const char *available_src; /* "host" (MemAvailable), "cgroup v1", "cgroup v2", "nvml",
                                  "driver", "caller", "test-hook", or "none" */
    int cg_version;            /* the process's memory cgroup: 1, 2, or 0 for none */
    char cg_path[256];         /* the group whose limit binds (or the process's own) */
    uint64_t cg_limit;         /* its limit; UINT64_MAX = none */
    uint64_t cg_usage;         /* its usage, and the reclaimable page cache within it */
    uint64_t cg_inactive_file;
    uint32_t n_limit_changes;    /* memory limit changes the probes have seen since open */
    bool notify_armed;           /* pressure notifications armed (mempressure.h) */
    char notify[320];            /* what is armed, or why nothing is */
    uint32_t n_notify;           /* pressure notifications handled */
    uint32_t n_replans;          /* re-plans run (periodic ticks, posted readings, budgets) */
    uint32_t n_replans_notified; /* of those, re-plans on a notification's reading */
    char cache_why[320];         /* why `cache` was picked ("" until slots are attached) */
    char probes[64];             /* the live probes (ebb_memprobe_describe) */
    uint64_t staging_bytes;      /* host memory of the attached staging slots */
    bool pressure;
    uint64_t bytes_per_token; /* streamed raw bytes per step */
    struct ebb_stream_io_stats io;
    uint32_t n_shrink, n_grow, n_undo;
    uint32_t n_staging_shrink; /* pinned staging given back under host pressure */
    uint32_t n_events;         /* valid entries of events[] */
    struct ebb_stream_event events[EBB_STREAM_EVENTS]; /* oldest first */
};

struct ebb_stream;

/* Probes, runs the initial plan (the KV context and the resident count) and remembers the
 * extents. Staging slots are attached later (ebb_stream_attach), only if ever needed. */
ebb_err ebb_stream_new(const struct ebb_stream_params *p, struct ebb_stream **out,
                       struct ebb_diag *diag);
void ebb_stream_free(struct ebb_stream *s);

uint32_t ebb_stream_n_resident(const struct ebb_stream *s);
uint32_t ebb_stream_n_ctx(const struct ebb_stream *s);
/* The first host layer (n_layer when none): layers from it on run on the host, whatever the
 * resident count becomes later. */
uint32_t ebb_stream_first_host(const struct ebb_stream *s);
/* Layer l's place now (enum ebb_stream_place). */
static inline bool ebb_stream_is_host(const struct ebb_stream *s, uint32_t layer)
{
    return layer >= ebb_stream_first_host(s);
}
static inline bool ebb_stream_is_resident(const struct ebb_stream *s, uint32_t layer)
{
    return layer < ebb_stream_n_resident(s) && !ebb_stream_is_host(s, layer);
}

/* Raw bytes of a layer as streamed (its extent's raw_size); 0 for an unknown layer. */
uint64_t ebb_stream_layer_size(const struct ebb_stream *s, uint32_t layer);

/* True while some layer is streamed and no slots are attached yet. */
bool ebb_stream_needs_slots(const struct ebb_stream *s);

/* Gives the streamer the engine's staging slots (pinned/mapped host buffers; n_slots >
 * prefetch, each ebb_stream_slot_size() bytes, 4096-aligned); they must stay valid until
 * ebb_stream_free, and the array itself while attached (a re-plan that sees a cgroup limit
 * set or removed reopens the I/O thread on it with another mode, see cache_auto). Starts the
 * I/O thread on the current schedule. */
ebb_err ebb_stream_attach(struct ebb_stream *s, void *const *slots, uint32_t n_slots,
                          struct ebb_diag *diag);
size_t ebb_stream_slot_size(const struct ebb_stream *s);

/* Engine thread, between steps, every slot given back (ebb_stream_cl_finish): stops the I/O
 * thread and forgets the slots, keeping the counters, so that ebb_stream_attach can take a new
 * set (fewer pinned slots under host-memory pressure). */
void ebb_stream_detach(struct ebb_stream *s);

/* Engine thread: true once after a re-plan that saw host-memory pressure on a discrete device.
 * There the plan follows the device's memory, so host pressure does not shed layers; the
 * engine answers it by giving back pinned staging beyond the ring. */
bool ebb_stream_take_host_pressure(struct ebb_stream *s);

/* Any thread: the device's free memory as the engine reads it itself (AMD's
 * CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, in bytes), used where NVML gives none. */
void ebb_stream_set_device_memory(struct ebb_stream *s, uint64_t total, uint64_t free_bytes);

/* Any thread: reads the probes into a mailbox for the next ebb_stream_replan. Returns true
 * when the reading signals pressure (the engine should re-plan before its next step). A
 * changed memory limit (a cgroup's limit set, lowered, raised or removed) is logged here and
 * counted (ebb_stream_memory_limit_changes_total). */
bool ebb_stream_probe(struct ebb_stream *s);

/* Any thread: fn(u) is called from the notification thread after a pressure notification
 * posted a reading (mempressure.h), so that an idle engine can re-plan at once (the scheduler
 * runs ebb_model_stream_settle); a busy one re-plans before its next step anyway. NULL for
 * none. fn must not call back into the streamer. */
void ebb_stream_set_wake(struct ebb_stream *s, void (*fn)(void *u), void *u);

/* Any thread: a new byte budget (0 = auto) for the next ebb_stream_replan, which sheds layers
 * down to it or grows up to it at once (ebb_stream_planner_set_budget); the daemon lends an
 * idle model's memory to another model this way. */
void ebb_stream_set_budget(struct ebb_stream *s, uint64_t budget);

/* Engine thread, between steps. True when a re-plan is due: pressure was posted, or a
 * reading newer than the last re-plan is waiting. */
bool ebb_stream_replan_due(struct ebb_stream *s);

/* Engine thread, between steps: runs the planner on the newest reading (reading the probes
 * first when read_now) and the cumulative token/busy counters. Returns true with *chg filled
 * when the resident count must change; the engine then frees layers chg->to..from-1 or places
 * layers from..to-1, and calls ebb_stream_commit(chg). */
bool ebb_stream_replan(struct ebb_stream *s, uint64_t now_ns, uint64_t tokens, uint64_t busy_ns,
                       bool read_now, struct ebb_stream_change *chg);

/* Engine thread: the change is applied; resubmits the schedule (chg->to .. n_layer-1). */
ebb_err ebb_stream_commit(struct ebb_stream *s, const struct ebb_stream_change *chg,
                          struct ebb_diag *diag);

/* Engine thread, during a step: the streamed layer's bytes (see ebb_stream_io_acquire) and
 * their slot; put gives the slot back once the device no longer reads it. */
ebb_err ebb_stream_get(struct ebb_stream *s, uint32_t layer, const void **data, uint32_t *slot,
                       struct ebb_diag *diag);
ebb_err ebb_stream_put(struct ebb_stream *s, uint32_t layer);

/* A snapshot for reports (engine thread, or any thread while the engine is quiet). */
void ebb_stream_report(struct ebb_stream *s, struct ebb_stream_report *out);

/* The report as one JSON object for `ebb run --json` / `ebb bench --json` (keys in
 * docs/STREAMER.md); returns the length it needed (like snprintf). */
size_t ebb_stream_report_json(const struct ebb_stream_report *r, char *buf, size_t cap);

/* Prometheus text of a report (the metric names of docs/STREAMER.md); returns the length it
 * needed (like snprintf: output truncated when >= cap). */
size_t ebb_stream_report_prometheus(const struct ebb_stream_report *r, char *buf, size_t cap);

#endif
