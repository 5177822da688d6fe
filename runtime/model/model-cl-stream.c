/* The layer streamer in the OpenCL forward pass (docs/STREAMER.md, "Integration recipe" and
 * "In the engine"): opening the streamer, the streamed form of each layer, staging slots,
 * re-planning between evaluations, the per-layer hand-over and the report snapshot. */
#include "model-cl-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "stream/pack.h"

uint64_t ebb__clm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Raw-layout weights over a streamed layer's bytes: offs[i] is tensor names[i]'s offset from
 * the layer's first byte. Fused into one weight when they share a type and lie back to back. */
static ebb_err tmpl_group(struct clm *m, const struct ebb_gguf *g, const char *const *names,
                          const uint64_t *offs, const uint32_t *rows, uint32_t n, uint32_t n_in,
                          struct ebb_cl_weight *out, uint32_t *n_out, struct ebb_diag *diag)
{
    const struct ebb_gguf_tensor *t[GROUP_MAX] = {NULL};
    ebb_err rc;
    bool fuse = true;
    for (uint32_t i = 0; i < n; i++) {
        if ((rc = ebb__clm_find(g, names[i], n_in, rows[i], &t[i], diag)))
            return rc;
        if (i)
            fuse = fuse && t[i]->type == t[0]->type && offs[i] == offs[i - 1] + t[i - 1]->size;
    }
    *n_out = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct ebb_cl_weight *w = &out[*n_out];
        if (fuse && i) {
            w = &out[0];
            w->n_out += rows[i];
            continue;
        }
        memset(w, 0, sizeof(*w));
        w->layout = (struct ebb_cl_layout){
            .type = t[i]->type, .storage = EBB_CL_STORE_BUFFER, .order = EBB_CL_ORDER_RAW};
        w->n_in = n_in;
        w->n_out = rows[i];
        w->off = offs[i];
        (*n_out)++;
    }
    for (uint32_t i = 0; i < *n_out; i++)
        if (!ebb_cl_layout_ok(&m->cl->info, &out[i].layout, (uint64_t)out[i].n_in * out[i].n_out))
            return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                                "tensor '%s' (type %u) cannot be streamed in the raw layout on "
                                "this device",
                                names[0], t[0]->type);
    return EBB_OK;
}

/* Offsets of a layer's tensors inside its streamed bytes: from the pack's directory, or from
 * the GGUF (tensor file offset minus the extent's start). */
static ebb_err tmpl_offs(const struct ebb_gguf *g, const struct ebb_pack *pk,
                         const struct ebb_stream_layer *ext, const char *const *names, uint32_t n,
                         uint64_t *offs, struct ebb_diag *diag)
{
    for (uint32_t i = 0; i < n; i++) {
        if (pk) {
            const struct ebb_pack_tensor *pt = ebb_pack_find_tensor(pk, names[i]);
            if (!pt)
                return ebb_diag_set(diag, EBB_EFORMAT, "the pack has no tensor '%s'", names[i]);
            offs[i] = pt->off;
        } else {
            const struct ebb_gguf_tensor *t = ebb_gguf_find_tensor(g, names[i]);
            if (!t)
                return ebb_diag_set(diag, EBB_EFORMAT, "tensor '%s' is missing", names[i]);
            offs[i] =
                (uint64_t)((const uint8_t *)t->data - (const uint8_t *)ebb_gguf_base(g)) - ext->off;
        }
    }
    return EBB_OK;
}

/* The GGUF names of layer l's weight matrices, group after group, and how many. */
static uint32_t layer_weight_names(const struct clm *m, uint32_t l,
                                   char nm[MAX_GROUPS * GROUP_MAX][96])
{
    uint32_t n = 0;
    for (uint32_t gi = 0; gi < m->plan.n_groups; gi++)
        for (uint32_t i = 0; i < m->plan.groups[gi].n; i++)
            ebb__arch_tensor_name(m->a, (uint32_t)m->plan.groups[gi].t[i], l, nm[n++], 96);
    return n;
}

static ebb_err build_tmpl(struct clm *m, const struct ebb_gguf *g, const struct ebb_pack *pk,
                          const struct ebb_stream_layer *ext, uint32_t l, struct ebb_diag *diag)
{
    struct layer *T = &m->tmpl[l];
    char nm[MAX_GROUPS * GROUP_MAX][96];
    const char *np[MAX_GROUPS * GROUP_MAX];
    uint64_t offs[MAX_GROUPS * GROUP_MAX];
    uint32_t n = layer_weight_names(m, l, nm);
    for (uint32_t i = 0; i < n; i++)
        np[i] = nm[i];
    ebb_err rc = tmpl_offs(g, pk, ext, np, n, offs, diag);
    for (uint32_t gi = 0, k = 0; gi < m->plan.n_groups && !rc; gi++) {
        const struct clm_group *G = &m->plan.groups[gi];
        uint32_t rows[GROUP_MAX];
        for (uint32_t i = 0; i < G->n; i++)
            rows[i] = (uint32_t)(ebb__arch_dim(&m->hp, m->a->tensors[G->t[i]].ne1) *
                                 ebb__arch_dim(&m->hp, m->a->tensors[G->t[i]].ne2));
        uint32_t n_in = (uint32_t)ebb__arch_dim(&m->hp, m->a->tensors[G->t[0]].ne0);
        rc = tmpl_group(m, g, np + k, offs + k, rows, G->n, n_in, T->w[gi], &T->n_w[gi], diag);
        k += G->n;
    }
    return rc;
}

static uint64_t tensor_bytes(const struct ebb_gguf *g, const char *name)
{
    const struct ebb_gguf_tensor *t = ebb_gguf_find_tensor(g, name);
    return t ? t->size : 0;
}

/* Discrete GPUs: pinned host staging is planned against host memory (MemAvailable and the
 * cgroup limit, minus 256 MiB kept free), apart from the device budget. A slot per streamed
 * layer (the host tier of docs/STREAMER.md, "Slots as a host tier": each layer read from the
 * file once, later steps only copy it to the device) where that fits, else the ring of
 * min_slots; EBB_ENOMEM with a message when layers are streamed and not even the ring fits. */
static ebb_err host_slots(uint32_t n_streamed, size_t slot, uint32_t min_slots, uint32_t *out,
                          struct ebb_diag *diag)
{
    uint64_t limit = UINT64_MAX, keep = 256u << 20, avail;
    if (ebb_memprobe_host_available(&avail))
        limit = avail > keep ? avail - keep : 0;
    if (n_streamed && limit / slot < min_slots)
        return ebb_diag_set(diag, EBB_ENOMEM,
                            "pinned host staging for the streamed layers needs %.0f MiB (%u slots "
                            "of %.1f MiB) but the host has %.0f MiB to spare; lower --prefetch or "
                            "free host memory",
                            (double)min_slots * slot / (1 << 20), min_slots,
                            (double)slot / (1 << 20), (double)limit / (1 << 20));
    *out = ebb_stream_plan_host_slots(n_streamed, slot, limit, min_slots);
    return EBB_OK;
}

/* The probes' device-memory hook: the driver's own free-memory query (AMD). */
static bool dev_read(void *u, uint64_t *total, uint64_t *free_bytes)
{
    const struct ebb_cl *cl = u;
    if (!ebb_cl_free_memory(cl, free_bytes))
        return false;
    *total = cl->info.global_mem;
    return true;
}

/* Reader threads per streamed layer without --stream-threads: half the physical cores, 1 to 4.
 * A layer-major prefill computes a layer in about the time one thread copies it from the page
 * cache into its slot, so one thread leaves the card waiting (docs/STREAMER.md, "Long
 * prompts"). */
static uint32_t default_io_threads(void)
{
    int n = ebb__model_physical_cores() / 2;
    return n < 1 ? 1u : n > 4 ? 4u : (uint32_t)n;
}

/* The host layers the streamer placed (ebb_stream_first_host): the host engine with their KV
 * cache, the rows' buffer, and their file pages asked for ahead (they are read in place). */
static ebb_err open_host(struct clm *m, const struct ebb_model_params *p, struct ebb_diag *diag)
{
    m->first_host = ebb_stream_first_host(m->st);
    if (m->first_host >= m->hp.n_layer)
        return EBB_OK;
    int threads = p->host_threads ? (int)p->host_threads : ebb__model_physical_cores() - 1;
    m->host_x = malloc(sizeof(float) * m->n_batch * m->hp.n_embd);
    if (!m->host_x)
        return EBB_ENOMEM;
    ebb_err rc = ebb__ref_host_new(m->a, &m->hp, m->g, m->n_ctx, m->n_seq, m->first_host,
                                   threads < 1 ? 1 : threads, p->host_q8, &m->host, diag);
    if (rc)
        return ebb_diag_set(diag, rc, "host layers: %.400s", diag ? diag->msg : "");
    for (uint32_t l = m->first_host; l < m->hp.n_layer; l++) {
        char nm[MAX_GROUPS * GROUP_MAX][96];
        uint32_t n = layer_weight_names(m, l, nm);
        for (uint32_t i = 0; i < n; i++) {
            const struct ebb_gguf_tensor *t = ebb_gguf_find_tensor(m->g, nm[i]);
            uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
            if (t && t->size) {
                uintptr_t a = (uintptr_t)t->data & ~(pg - 1);
                madvise((void *)a, (uintptr_t)t->data + t->size - a, MADV_WILLNEED);
            }
        }
    }
    fprintf(stderr, "ebb: %u host layers (%u..%u) on %d threads%s\n", m->hp.n_layer - m->first_host,
            m->first_host, m->hp.n_layer - 1, ebb__ref_host_threads(m->host),
            p->host_q8 ? ", 8-bit activations" : "");
    return EBB_OK;
}

/* Opens the streamer when a memory budget (or a forced residency) is set: extents, the
 * streamed form of every layer, the initial plan. Sets m->n_ctx to the planned context. */
ebb_err ebb__clm_stream_open(struct clm *m, const struct ebb_gguf *g,
                             const struct ebb_model_params *p, struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    const char *env = getenv("EBB_TEST_RESIDENCY");
    bool forced = p->residency_forced || p->residency > 0 || (env && *env);
    double frac = env && *env ? strtod(env, NULL) : p->residency;
    /* A byte budget with the expert cache sizes the cache instead (model-cl-experts.c). */
    if (!forced && p->memory_budget && ebb__clm_xc_wanted(p))
        return p->host_layers ? ebb_diag_set(diag, EBB_EINVAL,
                                             "--host-layers does not combine with the expert "
                                             "cache")
                              : EBB_OK;
    if (!p->memory_budget && !p->memory_budget_auto && !forced)
        return p->host_layers ? ebb_diag_set(diag, EBB_EINVAL,
                                             "--host-layers needs the layer streamer "
                                             "(--memory-budget or --residency)")
                              : EBB_OK;
    /* The streamer reads layers from one file by offset; a split model's offsets span its
     * parts. It streams from a pack (ebb pack reads the parts through the mapping), else it
     * stays resident: refused when a budget or residency asks for streaming, quietly kept
     * whole under memory_budget auto. */
    uint32_t n_files = ebb_gguf_n_files(g);
    if (n_files > 1 && !p->pack_path) {
        if (p->memory_budget || forced || p->host_layers)
            return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                                "this model is split in %u files and the layer streamer reads "
                                "one: write a pack (ebb pack MODEL) and pass it with --pack, or "
                                "load it whole (no --memory-budget or --residency)",
                                n_files);
        ebb_log(EBB_LOG_INFO, "stream",
                "a split model (%u files): loaded whole, not streamed (ebb pack makes a file "
                "the streamer can read)",
                n_files);
        return EBB_OK;
    }
    uint32_t n_layer = hp->n_layer;
    ebb_err rc = EBB_OK;
    struct ebb_pack *pk = NULL;
    struct ebb_stream_layer *ext = calloc(n_layer, sizeof(*ext));
    uint64_t *lb = calloc(n_layer, sizeof(*lb));
    m->tmpl = calloc(n_layer, sizeof(*m->tmpl));
    if (!ext || !lb || !m->tmpl) {
        rc = EBB_ENOMEM;
        goto out;
    }
    if (p->pack_path) {
        struct ebb_pack_expect want;
        ebb_pack_expect_from_gguf(g, &want);
        want.layout = EBB_PACK_LAYOUT_GGUF_RAW;
        if ((rc = ebb_pack_open(p->pack_path, &want, &pk, diag)))
            goto out;
        if (ebb_pack_info(pk)->n_layer != n_layer) {
            rc = ebb_diag_set(diag, EBB_EINVAL, "pack '%s' holds %u layers, the model %u",
                              p->pack_path, ebb_pack_info(pk)->n_layer, n_layer);
            goto out;
        }
        for (uint32_t l = 0; l < n_layer && !rc; l++)
            rc = ebb_pack_group(pk, l, &ext[l]);
        if (rc) {
            rc = ebb_diag_set(diag, rc, "pack '%s': bad layer extent", p->pack_path);
            goto out;
        }
    } else if ((rc = ebb_pack_gguf_extents(g, n_layer, ext, diag))) {
        goto out;
    }
    for (uint32_t l = 0; l < n_layer; l++) {
        if ((rc = build_tmpl(m, g, pk, &ext[l], l, diag)))
            goto out;
        lb[l] = ext[l].raw_size;
        if (ext[l].raw_size > m->max_layer)
            m->max_layer = (size_t)ext[l].raw_size;
    }
    m->unified = m->cl->info.host_unified || m->cl->info.is_cpu;
    const char *dv = getenv("EBB_TEST_STREAM_DISCRETE"); /* tests: the discrete-GPU staging */
    if (dv && *dv == '1')
        m->unified = false;
    uint32_t prefetch = p->prefetch ? p->prefetch : 2;
    m->n_slots = m->ring_slots = prefetch + 1;
    size_t slot = ebb_stream_io_slot_size(ext, n_layer);
    size_t f = sizeof(float), nb = m->n_batch;
    /* alloc_scratch's buffers (top-k is small) + host logits ... */
    /* ... and decode attention's partials, for up to min(n_seq, m->n_batch) batched rows */
    uint64_t dec_rows = m->n_seq < m->n_batch ? m->n_seq : m->n_batch;
    uint64_t chunks = (m->n_ctx + m->tu.att_chunk - 1) / m->tu.att_chunk;
    m->xl_rows = ebb__clm_long_rows(m);
    uint64_t scratch =
        nb * f * (2 * hp->n_embd + m->n_qkv + m->n_q + 3 * hp->n_ff) +
        (uint64_t)m->xl_rows * f * hp->n_embd +
        (uint64_t)ebb__clm_out_rows(m) * f * (hp->n_embd + (uint64_t)hp->n_vocab) +
        f * (uint64_t)hp->n_vocab + dec_rows * f * hp->n_head * chunks * (hp->head_dim + 2) +
        /* split prefill attention's partials (tensor-core GPUs) */
        (m->tu.att_mma && m->tu.mv_ptx ? ATT_SPLIT_ROWS * f * (m->n_q + 2 * hp->n_head) : 0);
    char en[96], on[96];
    ebb__arch_tensor_name(m->a, (uint32_t)m->plan.embd, 0, en, sizeof(en));
    ebb__arch_tensor_name(m->a, (uint32_t)m->plan.output, 0, on, sizeof(on));
    struct ebb_stream_plan_cfg cfg = {
        .n_layer = n_layer,
        .layer_bytes = lb,
        .fixed_bytes = tensor_bytes(g, en) + tensor_bytes(g, on) +
                       f * hp->n_embd * (1 + (uint64_t)m->plan.n_norms * n_layer),
        /* plus the K-quant rewrites' scratch, programs and queues */
        .runtime_bytes = scratch + ebb__clm_ksplit_bytes(m, NULL, NULL) + (16u << 20),
        /* in the device's memory: the mapped slots (unified), or the two device buffers the
         * streamed layers are copied into (discrete; the pinned slots are host memory) */
        .staging_bytes = m->unified ? (uint64_t)m->n_slots * slot : 2 * (uint64_t)m->max_layer,
        .kv_per_token = (uint64_t)n_layer * 2 * hp->n_head_kv * ebb__clm_kv_row(m) * m->n_seq,
        .n_ctx_want = m->n_ctx,
        .mode = EBB_STREAM_BALANCED,
        .budget = p->memory_budget_auto ? 0 : p->memory_budget,
    };
    if (p->residency_mode && (rc = ebb_stream_mode_parse(p->residency_mode, &cfg.mode))) {
        rc = ebb_diag_set(diag, rc, "bad residency mode '%s' (speed, balanced, context)",
                          p->residency_mode);
        goto out;
    }
    if (forced) { /* a budget that holds exactly round(frac * n_layer) layers */
        double r = frac < 0 ? 0 : frac > 1 ? 1 : frac;
        uint32_t n = (uint32_t)(r * n_layer + 0.5);
        cfg.mode = EBB_STREAM_CONTEXT;
        cfg.budget = cfg.fixed_bytes + cfg.runtime_bytes + cfg.kv_per_token * cfg.n_ctx_want +
                     (n < n_layer ? cfg.staging_bytes : 0);
        for (uint32_t l = 0; l < n; l++)
            cfg.budget += lb[l];
    }
    struct ebb_stream_params sp = {
        .path = p->pack_path ? p->pack_path : p->path,
        .layers = ext,
        .plan = cfg,
        .probe = {.discrete = !m->unified,
                  /* NVML finds the GPU by UUID or PCI address; the driver hook serves AMD */
                  .pci_bus_id =
                      !m->unified && m->cl->info.pci_bus_id[0] ? m->cl->info.pci_bus_id : NULL,
                  .uuid = !m->unified && m->cl->info.uuid[0] ? m->cl->info.uuid : NULL,
                  .dev_read = m->unified ? NULL : dev_read,
                  .dev_u = m->cl},
        .count = m->map.buf ? EBB_STREAM_COUNT_NOT_WEIGHTS : EBB_STREAM_COUNT_ALL,
        .cache_auto = !p->stream_cache, /* see ebb_stream_params */
        .prefetch = prefetch,
        .io_threads = p->stream_threads ? p->stream_threads : default_io_threads(),
        .now_ns = ebb__clm_now_ns(),
        .n_host = p->host_layers,
    };
    if (p->stream_cache && (rc = ebb_stream_cache_parse(p->stream_cache, &sp.cache))) {
        rc = ebb_diag_set(diag, rc, "bad stream cache mode '%s' (cached, direct, dontneed)",
                          p->stream_cache);
        goto out;
    }
    /* Tuning and test knobs: the re-plan period in tokens, the growth hold time. */
    const char *ev = getenv("EBB_STREAM_REPLAN_TOKENS");
    m->replan_tokens = ev && atoi(ev) > 0 ? (uint32_t)atoi(ev) : REPLAN_TOKENS;
    if ((ev = getenv("EBB_STREAM_GROW_HOLD_MS")) && atoi(ev) > 0)
        sp.plan.grow_hold_ns = (uint64_t)atoi(ev) * 1000000u;
    rc = ebb_stream_new(&sp, &m->st, diag);
    if (rc == EBB_ENOMEM && !p->prefetch && m->unified && !forced) {
        /* No --prefetch: where the default ring (three slots, two layers read ahead) does not
         * fit the limit, two slots (one ahead) may; each slot is a layer's worth of memory. */
        m->n_slots = m->ring_slots = 2;
        sp.prefetch = 1;
        sp.plan.staging_bytes = (uint64_t)m->n_slots * slot;
        ebb_log(EBB_LOG_INFO, "stream", "%s; trying two staging slots (one layer read ahead)",
                diag ? diag->msg : "three staging slots do not fit");
        rc = ebb_stream_new(&sp, &m->st, diag);
    }
    if (rc)
        goto out;
    m->n_ctx = ebb_stream_n_ctx(m->st);
    m->hp.n_ctx_run = m->n_ctx;
    m->next_tick = m->replan_tokens;
    if ((rc = open_host(m, p, diag)))
        goto out;
    if (!m->unified && (rc = host_slots(n_layer - ebb_stream_n_resident(m->st), slot, m->n_slots,
                                        &m->n_slots, diag)))
        goto out;
out:
    ebb_pack_close(pk);
    free(ext);
    free(lb);
    return rc;
}

void ebb__clm_stream_snapshot(struct clm *m)
{
    pthread_mutex_lock(&m->snap_mu);
    ebb_stream_report(m->st, &m->snap);
    m->snap.host_threads = m->host ? (uint32_t)ebb__ref_host_threads(m->host) : 0;
    m->snap.host_ns = m->host_ns;
    m->snap.host_steps = m->host_steps;
    pthread_mutex_unlock(&m->snap_mu);
}

bool ebb__clm_stream_report(void *ctx, struct ebb_stream_report *out)
{
    struct clm *m = ctx;
    if (!m->st)
        return false;
    pthread_mutex_lock(&m->snap_mu);
    *out = m->snap;
    pthread_mutex_unlock(&m->snap_mu);
    return true;
}

bool ebb__clm_stream_probe(void *ctx)
{
    struct clm *m = ctx;
    return m->st && ebb_stream_probe(m->st);
}

void ebb__clm_stream_budget(void *ctx, uint64_t budget)
{
    struct clm *m = ctx;
    ebb_stream_set_budget(m->st, budget);
}

void ebb__clm_stream_set_wake(void *ctx, void (*fn)(void *u), void *u)
{
    struct clm *m = ctx;
    ebb_stream_set_wake(m->st, fn, u);
}

ebb_err ebb__clm_stream_settle(void *ctx, struct ebb_diag *diag)
{
    struct clm *m = ctx;
    if (!ebb_stream_replan_due(m->st))
        return EBB_OK;
    ebb_err rc = ebb__clm_stream_between(m, diag);
    ebb__clm_stream_snapshot(m);
    return rc;
}

/* Staging slots, the first time some layer is streamed. */
ebb_err ebb__clm_ensure_slots(struct clm *m, struct ebb_diag *diag)
{
    if (m->sc || !ebb_stream_needs_slots(m->st))
        return EBB_OK;
    struct ebb_stream_cl_params cp = {.ctx = m->cl->ctx,
                                      .dev = m->cl->dev,
                                      .q = m->cl->q,
                                      .unified = m->unified,
                                      .n_slots = m->n_slots,
                                      .slot_size = ebb_stream_slot_size(m->st),
                                      .layer_size = m->max_layer};
    ebb_err rc = ebb_stream_cl_new(&cp, &m->sc, diag);
    if (!rc)
        rc = ebb_stream_attach(m->st, ebb_stream_cl_slots(m->sc), m->n_slots, diag);
    return rc;
}

/* A shed layer whose weights were zero-copy over the mmapped GGUF: drops its file pages from
 * the process (they are clean, so a later growth faults them in again), so the footprint
 * shrinks at once instead of when the kernel reclaims them. */
static void release_pages(struct clm *m, uint32_t l)
{
    if (!m->map.buf)
        return;
    char nm[MAX_GROUPS * GROUP_MAX][96];
    uint32_t n = layer_weight_names(m, l, nm);
    for (uint32_t i = 0; i < n; i++) {
        const struct ebb_gguf_tensor *t = ebb_gguf_find_tensor(m->g, nm[i]);
        if (t)
            ebb__clm_drop_pages(t);
    }
}

/* Between evaluations: re-plans on the 64-token tick or a posted probe reading, and moves
 * layers (the device is idle here: every evaluation ends with its queue finished). */
ebb_err ebb__clm_stream_between(struct clm *m, struct ebb_diag *diag)
{
    bool tick = m->tokens >= m->next_tick;
    if (!tick && !ebb_stream_replan_due(m->st))
        return EBB_OK;
    if (tick)
        m->next_tick = m->tokens + m->replan_tokens;
    struct ebb_stream_change chg;
    bool change = ebb_stream_replan(m->st, ebb__clm_now_ns(), m->tokens, m->busy_ns, tick, &chg);
    ebb_err rc = EBB_OK;
    /* Discrete GPUs: host pressure gives back the pinned host tier (the device plan follows
     * device memory); the slots are free here, every evaluation ends with them returned. */
    if (ebb_stream_take_host_pressure(m->st) && m->sc && m->n_slots > m->ring_slots) {
        uint32_t from = m->n_slots;
        ebb_stream_detach(m->st);
        ebb_stream_cl_free(m->sc);
        m->sc = NULL;
        m->n_slots = m->ring_slots;
        if ((rc = ebb__clm_ensure_slots(m, diag)))
            return rc;
        fprintf(stderr, "ebb: stream staging %u -> %u pinned slots: host memory pressure\n", from,
                m->n_slots);
    }
    if (!change)
        return EBB_OK;
    /* Host layers stay on the host whatever the count: their pages are read in place. */
    uint32_t from = chg.from < m->first_host ? chg.from : m->first_host;
    uint32_t to = chg.to < m->first_host ? chg.to : m->first_host;
    for (uint32_t l = to; l < from; l++) { /* shrink */
        ebb__clm_drop_layer(m, l);
        release_pages(m, l);
    }
    for (uint32_t l = from; l < to && !rc; l++) /* grow */
        rc = ebb__clm_place_layer(m, m->g, l, diag);
    if (rc) {
        for (uint32_t l = from; l < to; l++)
            ebb__clm_drop_layer(m, l);
        return rc;
    }
    if ((rc = ebb__clm_ensure_slots(m, diag)) || (rc = ebb_stream_commit(m->st, &chg, diag)))
        return rc;
    fprintf(stderr, "ebb: stream plan %u -> %u resident layers: %s\n", chg.from, chg.to,
            chg.reason);
    return EBB_OK;
}

/* A streamed layer: its weights read from the view the streamer hands over. */
ebb_err ebb__clm_streamed_layer(struct clm *m, uint32_t l, const struct clm_rows *rows, uint32_t n,
                                struct ebb_diag *diag)
{
    uint32_t v;
    size_t off;
    ebb_err rc = ebb_stream_cl_begin(m->sc, m->st, l, &v, &off, diag);
    if (rc)
        return rc;
    cl_mem view = ebb_stream_cl_view(m->sc, v);
    const struct layer *T = &m->tmpl[l];
    struct layer S = m->layers[l]; /* norms and KV cache stay resident */
    for (uint32_t gi = 0; gi < m->plan.n_groups; gi++) {
        S.n_w[gi] = T->n_w[gi];
        for (uint32_t i = 0; i < T->n_w[gi]; i++) {
            S.w[gi][i] = T->w[gi][i];
            S.w[gi][i].a = view;
            S.w[gi][i].off += off;
        }
    }
    rc = ebb__clm_layer_chunks(m, &S, rows, n, diag);
    ebb_err rc2 = ebb_stream_cl_end(m->sc, m->st, l, rc ? NULL : diag);
    return rc ? rc : rc2;
}

ebb_err ebb__clm_host_layers(struct clm *m, const struct clm_rows *rows, struct ebb_diag *diag)
{
    uint64_t t0 = ebb__clm_now_ns();
    size_t bytes = sizeof(float) * (size_t)rows->nt * m->hp.n_embd;
    /* The blocking read waits for the device's layers before it; the streamer's I/O thread
     * goes on filling slots for the next step meanwhile. */
    ebb_err rc = ebb_cl_check(
        clEnqueueReadBuffer(m->cl->q, m->x, CL_TRUE, 0, bytes, m->host_x, 0, NULL, NULL), diag,
        "reading the rows for the host layers");
    for (uint32_t i = 0; i < rows->n_parts && !rc; i++) {
        const struct clm_part *p = &rows->parts[i];
        float *x = m->host_x + (size_t)p->r0 * m->hp.n_embd;
        for (uint32_t l = m->first_host; l < m->hp.n_layer && !rc; l++)
            rc = ebb__ref_host_layer(m->host, l, p->seq, (uint32_t)p->pos, x, (uint32_t)p->n, diag);
    }
    /* Not blocking: host_x is next written by the read of a later call, queued after this. */
    if (!rc)
        rc = ebb_cl_check(
            clEnqueueWriteBuffer(m->cl->q, m->x, CL_FALSE, 0, bytes, m->host_x, 0, NULL, NULL),
            diag, "writing the rows back from the host layers");
    m->host_ns += ebb__clm_now_ns() - t0;
    m->host_steps++;
    return rc;
}
