/* The layer streamer facade: see stream.h. */
#include "stream.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "mempressure.h"

struct ebb_stream {
    char path[1024];
    struct ebb_stream_layer *layers; /* (n_layer) */
    uint32_t *sched;                 /* (n_layer) */
    uint32_t n_layer;
    uint32_t first_host; /* layers first_host..n_layer-1 run on the host */
    struct ebb_stream_planner plan;
    struct ebb_memprobe *mp;
    enum ebb_stream_count count;
    uint32_t prefetch;
    enum ebb_stream_cache cache;
    enum ebb_stream_cache cache_default; /* the params' mode, where a pick starts from */
    bool cache_auto;
    bool cache_limited;     /* a cgroup limit bound at the last pick */
    void *const *slot_ptrs; /* the attached slots (the engine's array, valid while attached) */
    char cache_why[320];
    uint32_t io_threads;
    bool discrete; /* the probes read device memory */
    uint64_t t0;
    uint32_t n_slots;
    size_t slot_size;
    struct ebb_stream_io *io;
    /* Mailbox between ebb_stream_probe (any thread) and the engine. */
    pthread_mutex_t mu;
    struct ebb_memprobe_reading mail;
    uint64_t mail_seq, used_seq;
    bool mail_pressure;
    bool mail_budget_set; /* ebb_stream_set_budget posted mail_budget */
    uint64_t mail_budget;
    uint64_t seen_limit; /* the cgroup limit of the newest reading (UINT64_MAX none) */
    char seen_path[256];
    uint32_t n_limit_changes;
    /* Pressure notifications (mempressure.h): a thread waits on them and posts a reading. */
    struct ebb_mempressure *mpw;
    pthread_t watch;
    bool watching;
    char notify_desc[320];    /* what is armed, or why nothing is */
    uint32_t n_notify;        /* notifications handled */
    bool mail_notified;       /* the mailbox's reading came from a notification */
    bool mail_critical;       /* a critical notification came since the last re-plan */
    uint64_t plan_cg_limit;   /* the cgroup limit at the last re-plan (UINT64_MAX none) */
    uint64_t psi_stale_until; /* PSI's pressure is ignored until then (a limit was raised) */
    void (*wake)(void *u);    /* ebb_stream_set_wake */
    void *wake_u;
    bool host_pressure; /* discrete: host pressure seen by a re-plan, not yet taken */
    uint32_t n_staging_shrink;
    struct ebb_stream_io_stats io_before; /* counters of I/O threads that were detached */
    /* Report. */
    uint64_t limit;
    struct ebb_memprobe_reading last;
    uint32_t n_shrink, n_grow, n_undo;
    uint32_t n_replans, n_replans_notified; /* every re-plan; those a notification started */
    uint32_t n_events; /* total ever; the ring keeps the last EBB_STREAM_EVENTS */
    struct ebb_stream_event events[EBB_STREAM_EVENTS];
};

/* True when a cgroup's reading decided `available` (its limit binds tighter than the host's). */
static bool cg_decides(const struct ebb_memprobe_reading *r)
{
    return r->available_ok && r->available_src && !strncmp(r->available_src, "cgroup", 6);
}

/* What of the plan's memory the probe's `available` already leaves out. Mmapped weights count
 * as available in the host's MemAvailable (file pages), so they are left out there. A cgroup
 * charges the pages it faulted in to its usage and frees only the inactive ones, so under a
 * cgroup's reading the resident layers' mapped pages are counted like any other memory (else
 * a mapped layer counts twice, once in the usage and once in the plan, and the plan sheds
 * layers that fit); but never more than the group's unreclaimable usage (pages not yet
 * touched, or charged to another group, are not in it), so that the limit stays under the
 * group's. */
static uint64_t counted(const struct ebb_stream *s)
{
    const struct ebb_stream_planner *p = &s->plan;
    const struct ebb_memprobe_reading *r = &s->last;
    uint64_t t = ebb_stream_plan_total(p, p->n_resident);
    if (cg_decides(r)) {
        uint64_t used =
            r->cg_current > r->cg_inactive_file ? r->cg_current - r->cg_inactive_file : 0;
        return t < used ? t : used;
    }
    if (s->count == EBB_STREAM_COUNT_NOT_WEIGHTS) {
        uint64_t w = p->cfg.fixed_bytes;
        for (uint32_t l = 0; l < p->n_resident; l++)
            w += p->layer_bytes[l];
        t = t > w ? t - w : 0;
    }
    return t;
}

/* The cgroup limit of a reading, UINT64_MAX when none binds. */
static uint64_t cg_limit(const struct ebb_memprobe_reading *r)
{
    return r->cg_ok ? r->cg_max : UINT64_MAX;
}

static void fmt_bytes(uint64_t v, char *buf, size_t cap)
{
    if (v == UINT64_MAX)
        snprintf(buf, cap, "none");
    else
        snprintf(buf, cap, "%.0f MiB", v / 1048576.0);
}

/* Under s->mu: notes the reading's memory limit, logging a change (and the first one). */
static void note_limit(struct ebb_stream *s, const struct ebb_memprobe_reading *r, bool first)
{
    uint64_t lim = cg_limit(r);
    const char *path = r->cg_ok ? r->cg_path : "";
    if (!first && lim == s->seen_limit && !strcmp(path, s->seen_path))
        return;
    char a[32], b[32], av[32];
    fmt_bytes(s->seen_limit, a, sizeof(a));
    fmt_bytes(lim, b, sizeof(b));
    fmt_bytes(r->available_ok ? r->available : UINT64_MAX, av, sizeof(av));
    if (first && r->cg_ok)
        ebb_log(EBB_LOG_INFO, "stream",
                "memory: cgroup v%d %s, limit %s; %s available (decided by %s)", r->cg_version,
                path, b, av, r->available_src ? r->available_src : "none");
    else if (first)
        ebb_log(EBB_LOG_INFO, "stream", "memory: no memory cgroup; %s available (decided by %s)",
                av, r->available_src ? r->available_src : "none");
    else {
        s->n_limit_changes++;
        ebb_log(EBB_LOG_INFO, "stream",
                "memory limit changed: cgroup v%d %s, %s -> %s; %s available (decided by %s); "
                "the plan follows at the next step",
                r->cg_version, path, a, b, av, r->available_src ? r->available_src : "none");
    }
    s->seen_limit = lim;
    snprintf(s->seen_path, sizeof(s->seen_path), "%s", path);
}

static void fill_schedule(struct ebb_stream *s, uint32_t *n)
{
    *n = 0;
    for (uint32_t l = s->plan.n_resident; l < s->first_host; l++)
        s->sched[(*n)++] = l;
}

static bool cg_binds(const struct ebb_memprobe_reading *r);

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Gathers a burst of notifications for up to 100 ms after the first (at level lv); returns
 * the highest level, or -1 when stopped meanwhile. */
static int gather_burst(struct ebb_mempressure *w, int lv)
{
    uint64_t end = mono_ns() + 100000000ull;
    for (uint64_t now = mono_ns(); now < end; now = mono_ns()) {
        int more = ebb_mempressure_wait(w, (int)((end - now + 999999) / 1000000));
        if (more < 0)
            return -1;
        lv = more > lv ? more : lv;
    }
    return lv;
}

/* The notification thread: on a pressure notification it reads the probes at once and posts
 * the reading as ebb_stream_probe does (a critical one also as pressure), so the engine
 * re-plans before its next step instead of at the next probe period; then wakes an idle
 * engine. A burst (v1 signals every reclaim window) is gathered for up to 100 ms into one
 * reading. */
static void *watch_main(void *arg)
{
    struct ebb_stream *s = arg;
    uint64_t logged = 0;
    for (;;) {
        int lv = ebb_mempressure_wait(s->mpw, -1);
        if (lv < 0)
            break;
        if (lv == EBB_MEMPRESSURE_NONE)
            continue;
        uint64_t now = mono_ns();
        if ((lv = gather_burst(s->mpw, lv)) < 0)
            break;
        struct ebb_memprobe_reading r;
        pthread_mutex_lock(&s->mu);
        ebb_memprobe_read(s->mp, &r);
        s->mail = r;
        s->mail_seq++;
        s->mail_notified = true;
        s->mail_critical = s->mail_critical || lv >= EBB_MEMPRESSURE_CRITICAL;
        s->mail_pressure = s->mail_pressure || r.pressure || lv >= EBB_MEMPRESSURE_CRITICAL;
        note_limit(s, &r, false);
        uint32_t n = ++s->n_notify;
        void (*wake)(void *) = s->wake;
        void *wake_u = s->wake_u;
        pthread_mutex_unlock(&s->mu);
        if (!logged || now - logged >= 5000000000ull) { /* a burst logs once per 5 s */
            char av[32];
            fmt_bytes(r.available_ok ? r.available : UINT64_MAX, av, sizeof(av));
            ebb_log(EBB_LOG_INFO, "stream",
                    "memory pressure notification (%s, %u so far): %s available (decided by "
                    "%s); re-planning before the next step",
                    ebb_mempressure_level_name(lv), n, av,
                    r.available_src ? r.available_src : "none");
            logged = now;
        }
        if (wake)
            wake(wake_u);
    }
    return NULL;
}

/* Arms the notifications and starts their thread; where that cannot be done the streamer
 * probes on its period alone (the reason goes to the report and the debug log). */
static void watch_start(struct ebb_stream *s)
{
    const char *ev = getenv("EBB_STREAM_PRESSURE_NOTIFY");
    if (ev && !strcmp(ev, "0")) {
        snprintf(s->notify_desc, sizeof(s->notify_desc), "off (EBB_STREAM_PRESSURE_NOTIFY=0)");
        return;
    }
    struct ebb_diag d = {{0}};
    if (ebb_mempressure_open(s->mp, &s->mpw, &d)) {
        snprintf(s->notify_desc, sizeof(s->notify_desc), "not armed: %.300s", d.msg);
        ebb_log(EBB_LOG_DEBUG, "stream", "memory pressure notifications %s", s->notify_desc);
        return;
    }
    if (pthread_create(&s->watch, NULL, watch_main, s)) {
        ebb_mempressure_close(s->mpw);
        s->mpw = NULL;
        snprintf(s->notify_desc, sizeof(s->notify_desc), "not armed: no thread");
        return;
    }
    s->watching = true;
    snprintf(s->notify_desc, sizeof(s->notify_desc), "%s", ebb_mempressure_describe(s->mpw));
    ebb_log(EBB_LOG_INFO, "stream", "memory pressure notifications armed: %s", s->notify_desc);
}

ebb_err ebb_stream_new(const struct ebb_stream_params *p, struct ebb_stream **out,
                       struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    uint32_t n = p->plan.n_layer;
    if (!p->path || !p->layers || !n || n > EBB_STREAM_MAX_LAYERS)
        return ebb_diag_set(diag, EBB_EINVAL, "streamer: no file or layers");
    struct ebb_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return EBB_ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    snprintf(s->path, sizeof(s->path), "%s", p->path);
    s->n_layer = n;
    s->count = p->count;
    s->prefetch = p->prefetch ? p->prefetch : 2;
    s->cache = p->cache;
    s->cache_default = p->cache;
    s->cache_auto = p->cache_auto;
    s->io_threads = p->io_threads;
    s->discrete = p->probe.discrete;
    s->t0 = p->now_ns;
    s->layers = malloc(sizeof(*s->layers) * n);
    s->sched = malloc(sizeof(*s->sched) * n);
    if (!s->layers || !s->sched) {
        rc = EBB_ENOMEM;
        goto out;
    }
    memcpy(s->layers, p->layers, sizeof(*s->layers) * n);
    s->slot_size = ebb_stream_io_slot_size(s->layers, n);
    struct ebb_diag note;
    if ((rc = ebb_memprobe_new(&p->probe, &s->mp, &note)))
        goto out;
    ebb_memprobe_read(s->mp, &s->last);
    note_limit(s, &s->last, true);
    struct ebb_stream_inputs in = {
        .now_ns = p->now_ns, .available_ok = s->last.available_ok, .available = s->last.available};
    struct ebb_stream_plan_cfg cfg = p->plan;
    if (!cfg.margin && cg_binds(&s->last)) {
        /* The default margin (64 MiB or 5% of the model) is a sixth of a 400 MiB container:
         * under a cgroup's limit the margin is a tenth of the limit (at least
         * EBB_STREAM_CG_MARGIN_MIN), never above the default. The kernel reclaims the group's
         * inactive page cache before it fails a charge, so less slack is needed there than
         * against MemAvailable's estimate. */
        struct ebb_stream_plan_cfg d = p->plan;
        if (ebb_stream_plan_cfg_check(&d, NULL) == EBB_OK) {
            uint64_t m = s->last.cg_max / 10;
            if (m < EBB_STREAM_CG_MARGIN_MIN)
                m = EBB_STREAM_CG_MARGIN_MIN;
            cfg.margin = m < d.margin ? m : d.margin;
        }
    }
    if ((rc = ebb_stream_planner_init(&s->plan, &cfg, &in, diag)))
        goto out;
    s->limit = ebb_stream_plan_limit(&s->plan, &in);
    s->first_host = n - ebb_stream_plan_place(n, s->plan.n_resident, p->n_host, NULL);
    s->plan_cg_limit = cg_limit(&s->last);
    watch_start(s);
    *out = s;
    s = NULL;
out:
    ebb_stream_free(s);
    return rc;
}

void ebb_stream_free(struct ebb_stream *s)
{
    if (!s)
        return;
    if (s->watching) {
        ebb_mempressure_stop(s->mpw);
        pthread_join(s->watch, NULL);
    }
    ebb_mempressure_close(s->mpw);
    ebb_stream_io_close(s->io);
    ebb_memprobe_free(s->mp);
    free(s->layers);
    free(s->sched);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

uint32_t ebb_stream_n_resident(const struct ebb_stream *s)
{
    return s->plan.n_resident;
}

uint32_t ebb_stream_first_host(const struct ebb_stream *s)
{
    return s->first_host;
}

uint32_t ebb_stream_n_ctx(const struct ebb_stream *s)
{
    return s->plan.n_ctx;
}

uint64_t ebb_stream_layer_size(const struct ebb_stream *s, uint32_t layer)
{
    return layer < s->n_layer ? s->layers[layer].raw_size : 0;
}

bool ebb_stream_needs_slots(const struct ebb_stream *s)
{
    return !s->io && s->plan.n_resident < s->first_host;
}

size_t ebb_stream_slot_size(const struct ebb_stream *s)
{
    return s->slot_size;
}

/* No --stream-io: cached reads leave the streamed layers in the page cache, which a cgroup
 * charges to the limit it has and unified memory shares with the model, so the kernel then
 * reclaims (or thrashes) what the plan counted on; dontneed drops each range after reading
 * it (direct, which bypasses the cache, ran slower end to end: pick_cache). The cache is
 * kept where it costs nothing: no cgroup limit binds and the device has its own memory, or
 * the host has twice the streamed bytes free (a budget or forced residency below what the
 * machine holds: warm cached reads run at memory speed, direct ones at the disk's). */
static bool cg_binds(const struct ebb_memprobe_reading *r)
{
    return r->cg_ok && r->cg_max != EBB_MEMPROBE_UNLIMITED &&
           (!r->host_ok || r->cg_available <= r->host_available);
}

static void pick_cache(struct ebb_stream *s)
{
    static const char *const names[] = {"cached", "direct", "dontneed"};
    const struct ebb_memprobe_reading *r = &s->last;
    bool limited = cg_binds(r);
    s->cache_limited = limited;
    s->cache = s->cache_default;
    uint64_t streamed = 0;
    for (uint32_t l = s->plan.n_resident; l < s->first_host; l++)
        streamed += s->layers[l].size;
    bool roomy = r->available_ok && r->available / 2 >= streamed;
    if (!limited && (s->discrete || roomy)) {
        if (s->discrete)
            snprintf(s->cache_why, sizeof(s->cache_why),
                     "no cgroup memory limit binds and the device has its own memory");
        else
            snprintf(s->cache_why, sizeof(s->cache_why),
                     "no cgroup memory limit binds and %.0f MiB free holds the %.0f MiB streamed "
                     "twice over",
                     r->available / 1048576.0, streamed / 1048576.0);
    } else {
        /* dontneed rather than direct: both leave no page cache charged (0 failed charges in a
         * 400 MiB v1 group), and on a quiet machine the 1B shape decoded 3.64-4.02 tok/s with
         * dontneed against 2.16-3.06 with direct (docs/PERFORMANCE.md, issue 35's table,
         * 2026-11-30); it also needs no O_DIRECT support from the file system. */
        s->cache = EBB_STREAM_DONTNEED;
        if (limited)
            snprintf(s->cache_why, sizeof(s->cache_why),
                     "cgroup v%d %.200s limits memory: no page cache charged", r->cg_version,
                     r->cg_path);
        else
            snprintf(s->cache_why, sizeof(s->cache_why),
                     "the device shares host memory and less than twice the %.0f MiB streamed "
                     "is free: no page cache beside the model",
                     streamed / 1048576.0);
    }
    ebb_log(EBB_LOG_INFO, "stream", "stream-io %s (no --stream-io given): %s", names[s->cache],
            s->cache_why);
}

ebb_err ebb_stream_attach(struct ebb_stream *s, void *const *slots, uint32_t n_slots,
                          struct ebb_diag *diag)
{
    if (s->io)
        return ebb_diag_set(diag, EBB_EINVAL, "streamer: slots already attached");
    if (s->cache_auto && !s->cache_why[0])
        pick_cache(s);
    struct ebb_stream_io_params ip = {.path = s->path,
                                      .layers = s->layers,
                                      .n_layer = s->n_layer,
                                      .slots = slots,
                                      .n_slots = n_slots,
                                      .slot_size = s->slot_size,
                                      .prefetch = s->prefetch < n_slots ? s->prefetch : n_slots,
                                      .cache = s->cache,
                                      .n_threads = s->io_threads};
    ebb_err rc = ebb_stream_io_open(&ip, &s->io, diag);
    if (rc)
        return rc;
    s->n_slots = n_slots;
    s->slot_ptrs = slots;
    uint32_t n;
    fill_schedule(s, &n);
    return ebb_stream_io_submit(s->io, s->sched, n, diag);
}

/* The counters of detached I/O threads plus the live one's. */
static void io_totals(const struct ebb_stream *s, struct ebb_stream_io_stats *out)
{
    *out = s->io_before;
    if (!s->io)
        return;
    struct ebb_stream_io_stats st;
    ebb_stream_io_stats(s->io, &st);
    out->layers_read += st.layers_read;
    out->bytes_read += st.bytes_read;
    out->bytes_raw += st.bytes_raw;
    out->read_ns += st.read_ns;
    out->hits += st.hits;
    out->misses += st.misses;
    out->stall_ns += st.stall_ns;
    out->dropped += st.dropped;
    out->reused += st.reused;
    out->direct = st.direct;
}

/* Engine thread, between steps (every slot given back): a cgroup limit set or removed since
 * the last pick picks the I/O mode again, and a new mode reopens the I/O thread on the same
 * slots. Where that fails the old mode is kept. */
static void repick_cache(struct ebb_stream *s)
{
    if (!s->cache_auto || !s->io || cg_binds(&s->last) == s->cache_limited)
        return;
    enum ebb_stream_cache was = s->cache;
    pick_cache(s);
    if (s->cache == was)
        return;
    void *const *slots = s->slot_ptrs;
    uint32_t n_slots = s->n_slots;
    io_totals(s, &s->io_before);
    ebb_stream_io_close(s->io);
    s->io = NULL;
    struct ebb_diag d = {{0}};
    if (ebb_stream_attach(s, slots, n_slots, &d) == EBB_OK)
        return;
    ebb_log(EBB_LOG_WARN, "stream",
            "stream-io: reopening the reads failed (%s); keeping the "
            "previous mode",
            d.msg);
    s->cache = was;
    if (ebb_stream_attach(s, slots, n_slots, &d))
        ebb_log(EBB_LOG_ERROR, "stream", "stream-io: cannot reopen the reads: %s", d.msg);
}

void ebb_stream_detach(struct ebb_stream *s)
{
    if (!s->io)
        return;
    io_totals(s, &s->io_before);
    ebb_stream_io_close(s->io);
    s->io = NULL;
    s->n_slots = 0;
    s->n_staging_shrink++;
}

bool ebb_stream_take_host_pressure(struct ebb_stream *s)
{
    bool p = s->host_pressure;
    s->host_pressure = false;
    return p;
}

void ebb_stream_set_device_memory(struct ebb_stream *s, uint64_t total, uint64_t free_bytes)
{
    pthread_mutex_lock(&s->mu);
    ebb_memprobe_set_device(s->mp, total, free_bytes);
    pthread_mutex_unlock(&s->mu);
}

bool ebb_stream_probe(struct ebb_stream *s)
{
    struct ebb_memprobe_reading r;
    pthread_mutex_lock(&s->mu);
    ebb_memprobe_read(s->mp, &r); /* under the lock: one reader of the probe set at a time */
    s->mail = r;
    s->mail_seq++;
    s->mail_pressure = s->mail_pressure || r.pressure;
    note_limit(s, &r, false);
    pthread_mutex_unlock(&s->mu);
    return r.pressure;
}

void ebb_stream_set_wake(struct ebb_stream *s, void (*wake)(void *u), void *u)
{
    pthread_mutex_lock(&s->mu);
    s->wake = wake;
    s->wake_u = u;
    pthread_mutex_unlock(&s->mu);
}

void ebb_stream_set_budget(struct ebb_stream *s, uint64_t budget)
{
    pthread_mutex_lock(&s->mu);
    s->mail_budget = budget;
    s->mail_budget_set = true;
    pthread_mutex_unlock(&s->mu);
}

bool ebb_stream_replan_due(struct ebb_stream *s)
{
    pthread_mutex_lock(&s->mu);
    bool due = s->mail_pressure || s->mail_seq != s->used_seq || s->mail_budget_set;
    pthread_mutex_unlock(&s->mu);
    return due;
}

bool ebb_stream_replan(struct ebb_stream *s, uint64_t now_ns, uint64_t tokens, uint64_t busy_ns,
                       bool read_now, struct ebb_stream_change *chg)
{
    if (read_now)
        ebb_stream_probe(s);
    pthread_mutex_lock(&s->mu);
    struct ebb_memprobe_reading r = s->mail;
    bool pressure = s->mail_pressure;
    bool critical = s->mail_critical;
    s->mail_critical = false;
    bool fresh = s->mail_seq != 0;
    bool notified = s->mail_notified && s->mail_seq != s->used_seq;
    s->mail_notified = false;
    s->n_replans++;
    s->n_replans_notified += notified;
    if (s->mail_budget_set)
        ebb_stream_planner_set_budget(&s->plan, s->mail_budget);
    s->mail_budget_set = false;
    s->mail_pressure = false;
    s->used_seq = s->mail_seq;
    pthread_mutex_unlock(&s->mu);
    if (!fresh)
        r = s->last;
    s->last = r;
    /* A raised (or removed) limit grows back at once (ebb_stream_planner_limit_raised). PSI's
     * avg10 is the last 10 s: after the raise it still reports the stalls under the old limit
     * and would block that growth. It counts again once a window has passed; a critical
     * notification counts at once. */
    uint64_t lim = cg_limit(&r);
    if (lim > s->plan_cg_limit) {
        s->psi_stale_until = now_ns + EBB_STREAM_PSI_STALE_NS;
        ebb_stream_planner_limit_raised(&s->plan);
    }
    s->plan_cg_limit = lim;
    if (now_ns < s->psi_stale_until && !critical)
        pressure = false;
    repick_cache(s);
    if (s->discrete) { /* host pressure is not about the device's memory: see stream.h */
        s->host_pressure = s->host_pressure || pressure;
        pressure = false;
    }
    struct ebb_stream_inputs in = {.now_ns = now_ns,
                                   .available_ok = r.available_ok,
                                   .available = r.available,
                                   .counted_bytes = counted(s),
                                   .pressure = pressure,
                                   .tokens = tokens,
                                   .busy_ns = busy_ns};
    s->limit = ebb_stream_plan_limit(&s->plan, &in);
    if (!ebb_stream_planner_step(&s->plan, &in, chg))
        return false;
    if (chg->to > chg->from)
        s->n_grow++;
    else if (strstr(chg->reason, "undone"))
        s->n_undo++;
    else
        s->n_shrink++;
    struct ebb_stream_event *e = &s->events[s->n_events++ % EBB_STREAM_EVENTS];
    e->t_ns = now_ns - s->t0;
    e->from = chg->from;
    e->to = chg->to;
    memcpy(e->reason, chg->reason, sizeof(e->reason));
    return true;
}

ebb_err ebb_stream_commit(struct ebb_stream *s, const struct ebb_stream_change *chg,
                          struct ebb_diag *diag)
{
    if (chg->to != s->plan.n_resident)
        return ebb_diag_set(diag, EBB_EINVAL, "streamer: change to %u is not the plan (%u)",
                            chg->to, s->plan.n_resident);
    if (!s->io)
        return chg->to < s->first_host
                   ? ebb_diag_set(diag, EBB_EINVAL, "streamer: attach staging slots first")
                   : EBB_OK;
    uint32_t n;
    fill_schedule(s, &n);
    return ebb_stream_io_submit(s->io, s->sched, n, diag);
}

ebb_err ebb_stream_get(struct ebb_stream *s, uint32_t layer, const void **data, uint32_t *slot,
                       struct ebb_diag *diag)
{
    if (!s->io)
        return ebb_diag_set(diag, EBB_EINVAL, "streamer: layer %u is not streamed", layer);
    return ebb_stream_io_acquire(s->io, layer, data, slot, diag);
}

ebb_err ebb_stream_put(struct ebb_stream *s, uint32_t layer)
{
    return s->io ? ebb_stream_io_release(s->io, layer) : EBB_EINVAL;
}

void ebb_stream_report(struct ebb_stream *s, struct ebb_stream_report *out)
{
    memset(out, 0, sizeof(*out));
    out->n_resident = s->plan.n_resident < s->first_host ? s->plan.n_resident : s->first_host;
    out->n_layer = s->n_layer;
    out->n_host = s->n_layer - s->first_host;
    out->n_ctx = s->plan.n_ctx;
    out->budget = s->plan.cfg.budget;
    out->bytes = ebb_stream_plan_total(&s->plan, s->plan.n_resident);
    out->bytes_min = ebb_stream_plan_total(&s->plan, 0);
    out->bytes_full = ebb_stream_plan_total(&s->plan, s->n_layer);
    out->mode = s->plan.cfg.mode;
    out->cache = s->cache;
    out->prefetch = s->prefetch;
    out->n_slots = s->n_slots;
    out->io_threads = s->io_threads ? s->io_threads : 1;
    out->limit = s->limit;
    out->margin = s->plan.cfg.margin;
    out->available_ok = s->last.available_ok;
    out->available = s->last.available;
    out->available_src = !s->last.available_ok   ? "none"
                         : s->last.overridden    ? "test-hook"
                         : s->last.available_src ? s->last.available_src
                                                 : "none";
    out->cg_version = s->last.cg_ok ? s->last.cg_version : 0;
    snprintf(out->cg_path, sizeof(out->cg_path), "%s", s->last.cg_ok ? s->last.cg_path : "");
    out->cg_limit = cg_limit(&s->last);
    out->cg_usage = s->last.cg_ok ? s->last.cg_current : 0;
    out->cg_inactive_file = s->last.cg_ok ? s->last.cg_inactive_file : 0;
    pthread_mutex_lock(&s->mu);
    out->n_limit_changes = s->n_limit_changes;
    out->n_notify = s->n_notify;
    pthread_mutex_unlock(&s->mu);
    out->notify_armed = s->watching;
    snprintf(out->notify, sizeof(out->notify), "%s", s->notify_desc);
    out->n_replans = s->n_replans;
    out->n_replans_notified = s->n_replans_notified;
    snprintf(out->cache_why, sizeof(out->cache_why), "%s", s->cache_why);
    snprintf(out->probes, sizeof(out->probes), "%s", ebb_memprobe_describe(s->mp));
    size_t pl = strlen(out->probes);
    if (pl && out->probes[pl - 1] == ' ')
        out->probes[pl - 1] = 0;
    out->staging_bytes = (uint64_t)s->n_slots * s->slot_size;
    out->pressure = s->last.pressure;
    for (uint32_t l = s->plan.n_resident; l < s->first_host; l++)
        out->bytes_per_token += s->layers[l].raw_size;
    io_totals(s, &out->io);
    out->n_staging_shrink = s->n_staging_shrink;
    out->n_shrink = s->n_shrink;
    out->n_grow = s->n_grow;
    out->n_undo = s->n_undo;
    uint32_t k = s->n_events < EBB_STREAM_EVENTS ? s->n_events : EBB_STREAM_EVENTS;
    for (uint32_t i = 0; i < k; i++)
        out->events[i] = s->events[(s->n_events - k + i) % EBB_STREAM_EVENTS];
    out->n_events = k;
}

/* Appends to buf like snprintf, tracking the length that would have been needed. */
static void add(char *buf, size_t cap, size_t *len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static void add(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*len < cap ? buf + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        *len += (size_t)n;
}

/* Appends s as a JSON string (our reasons are ASCII; quotes, backslashes, controls escaped). */
static void add_str(char *buf, size_t cap, size_t *len, const char *s)
{
    add(buf, cap, len, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            add(buf, cap, len, "\\%c", c);
        else if (c < 0x20)
            add(buf, cap, len, "\\u%04x", c);
        else
            add(buf, cap, len, "%c", c);
    }
    add(buf, cap, len, "\"");
}

size_t ebb_stream_report_json(const struct ebb_stream_report *r, char *buf, size_t cap)
{
    static const char *const caches[] = {"cached", "direct", "dontneed"};
    size_t n = 0;
    if (cap)
        buf[0] = 0;
    double gbps = r->io.read_ns ? r->io.bytes_read / (r->io.read_ns / 1e9) / 1e9 : 0;
    add(buf, cap, &n,
        "{\"layers_resident\":%u,\"layers_total\":%u,\"layers_host\":%u,\"n_ctx\":%u,"
        "\"budget_bytes\":%llu,"
        "\"mode\":\"%s\",\"cache\":\"%s\",\"prefetch\":%u,\"slots\":%u,\"io_threads\":%u,",
        r->n_resident, r->n_layer, r->n_host, r->n_ctx, (unsigned long long)r->budget,
        ebb_stream_mode_name(r->mode), (unsigned)r->cache < 3 ? caches[r->cache] : "?", r->prefetch,
        r->n_slots, r->io_threads);
    if (r->n_host)
        add(buf, cap, &n, "\"host_threads\":%u,\"host_seconds\":%.6f,\"host_steps\":%llu,",
            r->host_threads, r->host_ns / 1e9, (unsigned long long)r->host_steps);
    if (r->limit != UINT64_MAX)
        add(buf, cap, &n, "\"limit_bytes\":%llu,", (unsigned long long)r->limit);
    add(buf, cap, &n, "\"margin_bytes\":%llu,", (unsigned long long)r->margin);
    if (r->available_ok)
        add(buf, cap, &n, "\"available_bytes\":%llu,", (unsigned long long)r->available);
    add(buf, cap, &n, "\"available_source\":");
    add_str(buf, cap, &n, r->available_src ? r->available_src : "none");
    if (r->cg_version) {
        add(buf, cap, &n, ",\"cgroup\":{\"version\":%d,\"path\":", r->cg_version);
        add_str(buf, cap, &n, r->cg_path);
        if (r->cg_limit != UINT64_MAX)
            add(buf, cap, &n, ",\"limit_bytes\":%llu", (unsigned long long)r->cg_limit);
        add(buf, cap, &n, ",\"usage_bytes\":%llu,\"inactive_file_bytes\":%llu}",
            (unsigned long long)r->cg_usage, (unsigned long long)r->cg_inactive_file);
    }
    add(buf, cap, &n, ",\"memory_limit_changes\":%u", r->n_limit_changes);
    add(buf, cap, &n,
        ",\"pressure_notify\":{\"armed\":%s,\"how\":", r->notify_armed ? "true" : "false");
    add_str(buf, cap, &n, r->notify);
    add(buf, cap, &n, ",\"notifications\":%u},\"replans\":%u,\"replans_notified\":%u", r->n_notify,
        r->n_replans, r->n_replans_notified);
    if (r->cache_why[0]) {
        add(buf, cap, &n, ",\"cache_why\":");
        add_str(buf, cap, &n, r->cache_why);
    }
    add(buf, cap, &n, ",\"probes\":");
    add_str(buf, cap, &n, r->probes);
    add(buf, cap, &n, ",\"staging_bytes\":%llu,", (unsigned long long)r->staging_bytes);
    add(buf, cap, &n,
        "\"pressure\":%s,\"bytes_per_token\":%llu,\"read_bytes\":%llu,\"read_gbps\":%.3f,"
        "\"layers_read\":%llu,\"reused\":%llu,\"prefetch_hits\":%llu,"
        "\"prefetch_misses\":%llu,\"stall_seconds\":%.6f,\"staging_shrinks\":%u,"
        "\"plan_changes\":[",
        r->pressure ? "true" : "false", (unsigned long long)r->bytes_per_token,
        (unsigned long long)r->io.bytes_read, gbps, (unsigned long long)r->io.layers_read,
        (unsigned long long)r->io.reused, (unsigned long long)r->io.hits,
        (unsigned long long)r->io.misses, r->io.stall_ns / 1e9, r->n_staging_shrink);
    for (uint32_t i = 0; i < r->n_events; i++) {
        const struct ebb_stream_event *e = &r->events[i];
        add(buf, cap, &n, "%s{\"t\":%.3f,\"from\":%u,\"to\":%u,\"reason\":", i ? "," : "",
            e->t_ns / 1e9, e->from, e->to);
        add_str(buf, cap, &n, e->reason);
        add(buf, cap, &n, "}");
    }
    add(buf, cap, &n, "]}");
    return n;
}

size_t ebb_stream_report_prometheus(const struct ebb_stream_report *r, char *buf, size_t cap)
{
    size_t n = 0;
    if (cap)
        buf[0] = 0;
#define GAUGE(name, help, fmt, v)                                                                  \
    add(buf, cap, &n, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " " fmt "\n", v)
#define COUNTER(name, help, fmt, v)                                                                \
    add(buf, cap, &n, "# HELP " name " " help "\n# TYPE " name " counter\n" name " " fmt "\n", v)
    GAUGE("ebb_stream_layers_resident", "Decoder layers resident on the device.", "%u",
          r->n_resident);
    GAUGE("ebb_stream_layers_total", "Decoder layers of the model.", "%u", r->n_layer);
    GAUGE("ebb_stream_layers_host", "Decoder layers computed on the host's cores.", "%u",
          r->n_host);
    GAUGE("ebb_stream_layers_streamed", "Decoder layers read from the file for every step.", "%u",
          r->n_layer - r->n_resident - r->n_host);
    if (r->limit != UINT64_MAX)
        GAUGE("ebb_stream_memory_limit_bytes", "The planner's memory limit at the last re-plan.",
              "%llu", (unsigned long long)r->limit);
    if (r->available_ok)
        GAUGE("ebb_stream_memory_available_bytes", "Memory the probes report available.", "%llu",
              (unsigned long long)r->available);
    if (r->cg_limit != UINT64_MAX)
        GAUGE("ebb_stream_cgroup_limit_bytes",
              "The memory limit of the cgroup that binds (v1 or v2) at the last re-plan.", "%llu",
              (unsigned long long)r->cg_limit);
    if (r->cg_version)
        GAUGE("ebb_stream_cgroup_usage_bytes", "That cgroup's memory usage at the last re-plan.",
              "%llu", (unsigned long long)r->cg_usage);
    COUNTER("ebb_stream_memory_limit_changes_total",
            "Memory limit changes (cgroup limits set, lowered, raised) the probes have seen.", "%u",
            r->n_limit_changes);
    GAUGE("ebb_stream_pressure_notify_armed",
          "1 when memory pressure notifications (cgroup v1 pressure_level, PSI triggers) are "
          "armed.",
          "%d", r->notify_armed ? 1 : 0);
    COUNTER("ebb_stream_pressure_notifications_total",
            "Memory pressure notifications handled (each reads the probes at once).", "%u",
            r->n_notify);
    COUNTER("ebb_stream_replans_total",
            "Re-plans run (on the token tick, a posted probe reading, a budget or a notification).",
            "%u", r->n_replans);
    COUNTER("ebb_stream_replans_notified_total",
            "Re-plans run on the reading a pressure notification posted.", "%u",
            r->n_replans_notified);
    GAUGE("ebb_stream_staging_bytes", "Host memory of the streamer's staging slots.", "%llu",
          (unsigned long long)r->staging_bytes);
    GAUGE("ebb_stream_memory_pressure", "1 while the probes report memory pressure.", "%d",
          r->pressure ? 1 : 0);
    GAUGE("ebb_stream_bytes_per_token", "Streamed bytes read per evaluation step.", "%llu",
          (unsigned long long)r->bytes_per_token);
    COUNTER("ebb_stream_read_bytes_total", "Bytes read by the streamer's I/O thread.", "%llu",
            (unsigned long long)r->io.bytes_read);
    COUNTER("ebb_stream_read_seconds_total", "Time the I/O thread spent reading and checking.",
            "%.6f", r->io.read_ns / 1e9);
    COUNTER("ebb_stream_prefetch_hits_total", "Streamed layers that were ready when needed.",
            "%llu", (unsigned long long)r->io.hits);
    COUNTER("ebb_stream_prefetch_misses_total", "Streamed layers the compute had to wait for.",
            "%llu", (unsigned long long)r->io.misses);
    COUNTER("ebb_stream_stall_seconds_total", "Time the compute waited for streamed layers.",
            "%.6f", r->io.stall_ns / 1e9);
#undef GAUGE
#undef COUNTER
    add(buf, cap, &n,
        "# HELP ebb_stream_plan_changes_total Residency plan changes.\n"
        "# TYPE ebb_stream_plan_changes_total counter\n"
        "ebb_stream_plan_changes_total{direction=\"shrink\"} %u\n"
        "ebb_stream_plan_changes_total{direction=\"grow\"} %u\n"
        "ebb_stream_plan_changes_total{direction=\"undo\"} %u\n"
        "# HELP ebb_stream_staging_shrinks_total Pinned staging given back under host memory "
        "pressure.\n"
        "# TYPE ebb_stream_staging_shrinks_total counter\n"
        "ebb_stream_staging_shrinks_total %u\n",
        r->n_shrink, r->n_grow, r->n_undo, r->n_staging_shrink);
    add(buf, cap, &n,
        "# HELP ebb_stream_memory_available_source The probe that decided the available memory.\n"
        "# TYPE ebb_stream_memory_available_source gauge\n"
        "ebb_stream_memory_available_source{source=\"%s\"} 1\n",
        r->available_src ? r->available_src : "none");
    return n;
}
