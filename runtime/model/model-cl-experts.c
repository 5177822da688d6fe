/* The expert cache (docs/STREAMER.md, "Experts on demand"): a mixture-of-experts layer keeps its
 * router, norms and attention resident while its three expert stacks stay in the mmapped file;
 * a device pool of n_slots expert slots per layer holds the experts used lately. After the
 * router (moe_route, on the device), the chosen ids are read back (one blocking read per layer:
 * the only host wait of a step), the missing experts get the least recently used slots, and
 * their bytes go from the file into a ring of pinned staging entries (one expert each), filled
 * a batch at a time by a pool of host threads (stream-pool.h), and from there to the slots by
 * non-blocking writes on a second command queue: while the device copies one batch the threads
 * fill the next. The compute queue waits for the copies through a barrier on the last one's
 * event. The expert kernels run over the pool through a table of slot ids (one small upload)
 * in place of the expert ids. A chunk of prefill rows that uses more experts than there are
 * slots runs in passes, each over the rows whose experts fit (a token's k experts always do,
 * n_slots >= k); rows outside a pass carry slot -1, which the kernels skip, and a pass's
 * copies wait for the previous pass's kernels (a marker's event). Two options: prefetch
 * (EBB_EXPERT_PREFETCH) starts copies of the next layer's most used experts at the end of a
 * step, and a host tier (EBB_EXPERT_PINNED) keeps every expert in pinned host memory so that a
 * miss needs no fill. Everything is allocated once at load. model-cl-moe.c drives a layer step
 * (ebb__clm_xc_begin, then ebb__clm_xc_next and its kernels per pass). */
#include "model-cl-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stream/memprobe.h"
#include "stream/stream-pool.h"

#define XC_MAX_THREADS 64
#define XC_MAX_BATCH 16
#define XC_ALIGN 4096u /* staging entries start on pages */
#define XC_ALIGN_UP(b) (((b) + XC_ALIGN - 1) / XC_ALIGN * XC_ALIGN)
#define XC_DECAY 64 /* layer steps between halvings of the use counts */

/* A batch of experts of one layer to fill from the file into staging entries (a pool job). */
struct xc_fill {
    struct clm_xc *x;
    uint32_t l, n, split; /* layer, experts, pieces each record is copied in */
    uint32_t *e;          /* (cap) expert ids */
    int32_t *slot;        /* (cap) their slots */
    uint32_t *ent;        /* (cap) their staging entries */
};

struct clm_xc {
    uint32_t n_slots, n_layer, n_expert, k;
    uint32_t g0;             /* the gate stack's group (the up and down stacks follow) */
    uint64_t *ebytes;        /* (n_layer, 3) one expert of each stack, in the file's raw
                                rows: the types may differ between layers and stacks
                                (Q4_K_M gives some layers' down stacks Q6_K) */
    const uint8_t **src;     /* (n_layer, 3) each stack's first byte in the mapped file */
    cl_mem *pool;            /* (n_layer, 3) n_slots experts each */
    struct ebb_cl_weight *w; /* (n_layer, 3) raw-layout weights over the pool */
    int32_t *slot_of;        /* (n_layer, n_expert) the slot holding expert e, or -1 */
    int32_t *expert_in;      /* (n_layer, n_slots) the expert in slot s, or -1 */
    uint64_t *used;          /* (n_layer, n_slots) clock of the last pass that used it */
    uint64_t clock;          /* passes so far */
    cl_mem stage;            /* pinned host staging: n_ent entries of ent_bytes (one expert of the
                                layer with the largest) */
    uint8_t *stage_p;        /* its mapping */
    uint64_t ent_bytes;      /* an entry: the largest expert, rounded up to XC_ALIGN */
    uint32_t n_ent;          /* 2 x batch + 2 x pf_max */
    uint32_t batch;          /* experts filled per pool job (EBB_EXPERT_BATCH) */
    cl_event *ent_ev;        /* (n_ent) the last write that reads the entry, or NULL */
    cl_command_queue qio;    /* the copies */
    cl_event last_copy;      /* the last write enqueued on qio */
    bool unwaited;           /* the compute queue has no barrier on last_copy yet */
    /* EBB_EXPERT_RECT (1, the default; 0 turns it off): each layer's three pools in one
     * buffer (the stacks' weights at their offsets), and an expert's gate and up records (with
     * its down record too where all three are the same size) copied by one rectangular write,
     * rows a stack's pool apart. Off where a layer's pools would pass the device's largest
     * buffer. */
    bool rect;
    struct ebb_stream_pool *threads; /* fill the staging (and the host tier at load) */
    struct xc_fill fill;             /* the demand batch */
    /* Prefetch (EBB_EXPERT_PREFETCH): at the end of layer l's step the threads fill up to pf_max
     * guesses for the next layer (its most used experts that are not in its slots) into two
     * alternating sets of pf_max entries after the demand ones; their writes are enqueued at
     * the next ebb__clm_xc_begin, before its read-back (with the host tier: at once). */
    uint32_t pf_max, pf_set;
    bool pf_pending;   /* pf's fill started, its writes not enqueued yet */
    struct xc_fill pf; /* the guesses under way */
    uint32_t *count;   /* (n_layer, n_expert) uses, halved every XC_DECAY steps of a layer */
    uint32_t *steps;   /* (n_layer) layer steps since the last halving */
    uint8_t *pf_flag;  /* (n_layer, n_slots) holds a prefetched expert not looked up yet */
    /* EBB_EXPERT_PINNED=1 (or unset, where pinned_auto says so): every expert of each layer
     * copied once, at load, into pinned host
     * memory (expert e's three records back to back at e x their sizes), so that a miss is one
     * write from there and the staging goes unused. */
    cl_mem *tier;                     /* (n_layer) or NULL */
    uint8_t **tier_p;                 /* (n_layer) their mappings */
    bool tier_auto;                   /* EBB_EXPERT_PINNED unset: pinned_auto decided */
    uint64_t tier_avail;              /* the host memory available then (0: no reading) */
    uint32_t *miss_e;                 /* (n_slots) the current pass's misses */
    int32_t *miss_slot;               /* (n_slots) and their slots */
    cl_mem sids;                      /* (m->n_batch, k) int: the slot table the kernels read */
    int32_t *host_ids, *host_sids;    /* (m->n_batch, k) read back / to upload */
    uint8_t *want;                    /* (n_expert) in the current pass */
    uint32_t *list;                   /* (n_expert) the current pass's experts */
    struct ebb_model_expert_cache st; /* counters (under m->snap_mu when published) */
    /* A layer-major pass of one layer (ebb__clm_xc_long_*): each expert's group and slot
     * (n_expert each, -1: not used), the used experts in group order and each group's first
     * index into them (n_expert + 1), each group's first and last copy (n_expert each: for the
     * copy queue's profiling), the pass's figures. */
    int32_t *lm_group, *lm_slot;
    uint32_t *lm_list, *lm_g0, lm_ng, lm_l;
    cl_event *lm_first, *lm_last;
    struct ebb_model_expert_cache lm_d;
    bool prof;          /* qio profiles its commands (the layer-major copy times) */
    cl_event *first_ev; /* where enqueue_copies leaves its first write's event, or NULL */
    /* With EBB_EXPERT_HOST=auto, a one-token step's first and last copies and their count:
     * the link's time per expert, read at the next step's begin (the copies are over then). */
    cl_event step_first, step_last;
    uint32_t step_n;
    /* The layer step under way: its layer, rows, the first row of the next pass, figures. */
    uint32_t l;
    int nt, t0;
    struct ebb_model_expert_cache d;
    struct clm_xhost *xh; /* missed experts computed by the host (EBB_EXPERT_HOST), or NULL */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The setting: p->expert_cache, or EBB_EXPERT_CACHE when set (tests and the daemon). */
static ebb_err setting(const struct ebb_model_params *p, uint32_t *out, struct ebb_diag *diag)
{
    const char *env = getenv("EBB_EXPERT_CACHE");
    *out = p->expert_cache;
    if (env && !strcmp(env, "auto")) {
        *out = EBB_EXPERT_CACHE_AUTO;
    } else if (env && *env) {
        char *end = NULL;
        unsigned long v = strtoul(env, &end, 10);
        if (end == env || *end || *env == '-' || v > 65536)
            return ebb_diag_set(diag, EBB_EINVAL,
                                "EBB_EXPERT_CACHE='%.40s': expected a slot count per layer", env);
        *out = (uint32_t)v;
    }
    return EBB_OK;
}

bool ebb__clm_xc_wanted(const struct ebb_model_params *p)
{
    uint32_t n = 0;
    return setting(p, &n, NULL) == EBB_OK && n;
}

/* Slots per layer that the budget leaves: the budget minus every tensor but the expert stacks
 * (their sizes in the file), the KV cache and the engine's buffers, over one expert of every
 * layer; at most n_expert. EBB_ENOMEM with the figures when fewer than k fit. */
static ebb_err from_budget(struct clm *m, const struct ebb_gguf *g, uint64_t budget,
                           uint64_t experts, uint64_t per_slot, uint32_t *out,
                           struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    uint64_t fixed = 0, f = sizeof(float);
    for (uint64_t i = 0; i < ebb_gguf_n_tensors(g); i++)
        fixed += ebb_gguf_tensor_at(g, i)->size;
    fixed = fixed > experts ? fixed - experts : 0;
    uint64_t kv = (uint64_t)hp->n_layer * 2 * m->n_kv * 2 * m->n_ctx * m->n_seq;
    uint64_t bufs =
        m->n_batch * f *
            (2 * (uint64_t)hp->n_embd + m->n_qkv + m->n_q + 3 * (uint64_t)hp->n_ff + hp->n_expert +
             2 * hp->n_expert_used + 2 * (uint64_t)hp->n_expert_used * hp->n_ff_exp) +
        (uint64_t)ebb__clm_out_rows(m) * f * (hp->n_embd + (uint64_t)hp->n_vocab) + (16u << 20);
    if (m->tu.moe_group) { /* the layer-major pass's rows and buffers (model-cl-moe-long.c) */
        uint32_t rows = ebb__clm_long_rows(m);
        bufs += (uint64_t)rows * f * hp->n_embd + ebb__clm_xc_long_bytes(m, rows);
    }
    uint64_t used = fixed + kv + bufs;
    uint64_t n = budget > used ? (budget - used) / per_slot : 0;
    if (n < hp->n_expert_used)
        return ebb_diag_set(diag, EBB_ENOMEM,
                            "--expert-cache auto: a budget of %.1f MiB leaves room for %llu "
                            "expert slots per layer, fewer than the %u a token uses (other "
                            "weights %.1f MiB, KV cache %.1f MiB, buffers %.1f MiB; one slot in "
                            "every layer %.1f MiB)",
                            (double)budget / (1 << 20), (unsigned long long)n, hp->n_expert_used,
                            (double)fixed / (1 << 20), (double)kv / (1 << 20),
                            (double)bufs / (1 << 20), (double)per_slot / (1 << 20));
    *out = n > hp->n_expert ? hp->n_expert : (uint32_t)n;
    return EBB_OK;
}

/* Bytes of one expert of layer l: its three records. */
static uint64_t expert_size(const struct clm_xc *x, uint32_t l)
{
    return x->ebytes[(size_t)l * 3] + x->ebytes[(size_t)l * 3 + 1] + x->ebytes[(size_t)l * 3 + 2];
}

/* Task i of the host tier's fill: expert i % n_expert of layer i / n_expert. */
static void tier_task(void *ctx, uint32_t i)
{
    const struct clm_xc *x = ctx;
    uint32_t l = i / x->n_expert, e = i % x->n_expert;
    uint8_t *dst = x->tier_p[l] + (uint64_t)e * expert_size(x, l);
    for (uint32_t r = 0; r < 3; r++) {
        uint64_t eb = x->ebytes[(size_t)l * 3 + r];
        memcpy(dst, x->src[(size_t)l * 3 + r] + (uint64_t)e * eb, eb);
        dst += eb;
    }
}

/* The host tier (EBB_EXPERT_PINNED), allocated, mapped and filled from the file at load. */
static ebb_err tier_open(struct clm *m, struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    x->tier = calloc(x->n_layer, sizeof(*x->tier));
    x->tier_p = calloc(x->n_layer, sizeof(*x->tier_p));
    if (!x->tier || !x->tier_p)
        return EBB_ENOMEM;
    uint64_t total = 0;
    for (uint32_t l = 0; l < x->n_layer; l++) {
        size_t bytes = (size_t)(expert_size(x, l) * x->n_expert);
        cl_int e = CL_SUCCESS;
        x->tier[l] =
            clCreateBuffer(m->cl->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &e);
        if (!e)
            x->tier_p[l] =
                clEnqueueMapBuffer(x->qio, x->tier[l], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                   bytes, 0, NULL, NULL, &e);
        if (e)
            return ebb_diag_set(diag, EBB_ENOMEM,
                                "EBB_EXPERT_PINNED: pinning %.1f MiB of host memory for layer %u's "
                                "experts (%.1f MiB so far): %s",
                                (double)bytes / (1 << 20), l, (double)total / (1 << 20),
                                ebb_cl_err_name(e));
        total += bytes;
    }
    ebb_stream_pool_run(x->threads, x->n_layer * x->n_expert, tier_task, x);
    x->st.host_bytes = total;
    return EBB_OK;
}

/* EBB_EXPERT_PINNED unset: the host tier on a discrete device (EBB_TEST_STREAM_DISCRETE=1 makes
 * tests treat theirs as one) when every expert fits in half of the host memory the probes say
 * is available (MemAvailable, the cgroup limit), so that a miss is one copy over the link
 * rather than a fill from the page cache and a copy; *avail gets that reading (0: none). */
static uint32_t pinned_auto(const struct clm *m, uint64_t experts, uint64_t *avail)
{
    const char *dv = getenv("EBB_TEST_STREAM_DISCRETE");
    bool discrete = (dv && *dv == '1') || !(m->cl->info.host_unified || m->cl->info.is_cpu);
    *avail = 0;
    if (!discrete || !ebb_memprobe_host_available(avail))
        return 0;
    return *avail && experts <= *avail / 2;
}

/* The copy path, at load, from the EBB_EXPERT_* settings: the copy threads, the second queue,
 * the pinned staging ring (two batches and two prefetch sets of entries of `big` bytes, rounded
 * up to pages), the batches' host arrays, the prefetch's counts and flags, and the host tier. */
static ebb_err staging_open(struct clm *m, uint64_t big, struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t threads, pinned, def = ncpu < 1 ? 1 : ncpu > 8 ? 8 : (uint32_t)ncpu;
    ebb_err rc;
    if ((rc = ebb__clm_env_count("EBB_EXPERT_THREADS", def, 1, XC_MAX_THREADS, &threads, diag)) ||
        (rc = ebb__clm_env_count("EBB_EXPERT_BATCH", 2, 1, XC_MAX_BATCH, &x->batch, diag)) ||
        (rc = ebb__clm_env_count("EBB_EXPERT_PREFETCH", 0, 0, 65536, &x->pf_max, diag)) ||
        (rc = ebb__clm_env_count("EBB_EXPERT_PINNED", 2, 0, 1, &pinned, diag)))
        return rc;
    if (pinned == 2) {
        uint64_t experts = 0;
        for (uint32_t l = 0; l < x->n_layer; l++)
            experts += expert_size(x, l) * x->n_expert;
        x->tier_auto = true;
        pinned = pinned_auto(m, experts, &x->tier_avail);
    }
    if (x->pf_max > x->n_slots / 2) /* at most half the next layer's slots */
        x->pf_max = x->n_slots / 2;
    if (x->n_layer < 2) /* the next layer would be this one, whose slots its kernels read */
        x->pf_max = 0;
    if ((rc = ebb_stream_pool_new(threads, &x->threads, diag)))
        return rc;
    x->ent_bytes = (big + XC_ALIGN - 1) / XC_ALIGN * XC_ALIGN;
    x->n_ent = 2 * x->batch + 2 * x->pf_max;
    x->ent_ev = calloc(x->n_ent, sizeof(*x->ent_ev));
    x->fill.e = malloc(sizeof(uint32_t) * x->batch);
    x->fill.slot = malloc(sizeof(int32_t) * x->batch);
    x->fill.ent = malloc(sizeof(uint32_t) * x->batch);
    x->miss_e = malloc(sizeof(uint32_t) * x->n_slots);
    x->miss_slot = malloc(sizeof(int32_t) * x->n_slots);
    if (!x->ent_ev || !x->fill.e || !x->fill.slot || !x->fill.ent || !x->miss_e || !x->miss_slot)
        return EBB_ENOMEM;
    x->fill.x = x;
    if (x->pf_max) {
        size_t L = x->n_layer;
        x->pf.x = x;
        x->pf.e = malloc(sizeof(uint32_t) * x->pf_max);
        x->pf.slot = malloc(sizeof(int32_t) * x->pf_max);
        x->pf.ent = malloc(sizeof(uint32_t) * x->pf_max);
        x->count = calloc(L * x->n_expert, sizeof(uint32_t));
        x->steps = calloc(L, sizeof(uint32_t));
        x->pf_flag = calloc(L * x->n_slots, 1);
        if (!x->pf.e || !x->pf.slot || !x->pf.ent || !x->count || !x->steps || !x->pf_flag)
            return EBB_ENOMEM;
    }
    cl_int e = CL_SUCCESS;
    x->qio = clCreateCommandQueue(m->cl->ctx, m->cl->dev, CL_QUEUE_PROFILING_ENABLE, &e);
    x->prof = !e;
    if (e) /* without the copy times of layer-major passes */
        x->qio = clCreateCommandQueue(m->cl->ctx, m->cl->dev, 0, &e);
    if (e)
        return ebb_diag_set(diag, EBB_EDEVICE, "creating the expert copy queue: %s",
                            ebb_cl_err_name(e));
    size_t bytes = (size_t)(x->ent_bytes * x->n_ent);
    x->stage =
        clCreateBuffer(m->cl->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &e);
    if (e)
        return ebb_diag_set(diag, EBB_ENOMEM, "allocating the expert staging (%zu bytes): %s",
                            bytes, ebb_cl_err_name(e));
    x->stage_p = clEnqueueMapBuffer(x->qio, x->stage, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes,
                                    0, NULL, NULL, &e);
    if (e)
        return ebb_diag_set(diag, EBB_ENOMEM, "mapping the expert staging: %s", ebb_cl_err_name(e));
    return pinned ? tier_open(m, diag) : EBB_OK;
}

ebb_err ebb__clm_xc_open(struct clm *m, const struct ebb_gguf *g, const struct ebb_model_params *p,
                         struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    uint32_t n_slots;
    ebb_err rc = setting(p, &n_slots, diag);
    if (rc || !n_slots)
        return rc;
    int moe = -1;
    for (uint32_t i = 0; i < m->plan.n_steps; i++)
        if (m->plan.steps[i].kind == CLM_MOE)
            moe = (int)i;
    if (moe < 0 || !hp->n_expert)
        return ebb_diag_set(diag, EBB_EINVAL, "--expert-cache: the model (%s) has no experts",
                            m->a->name);
    bool autos = n_slots == EBB_EXPERT_CACHE_AUTO;
    if (autos && !p->memory_budget)
        return ebb_diag_set(diag, EBB_EINVAL,
                            "--expert-cache auto sizes the cache from --memory-budget SIZE; "
                            "give one, or a slot count");
    if (!autos && (n_slots < hp->n_expert_used || n_slots > hp->n_expert))
        return ebb_diag_set(diag, EBB_EINVAL,
                            "--expert-cache %u: a layer needs between %u (experts used per "
                            "token) and %u (its experts) slots",
                            n_slots, hp->n_expert_used, hp->n_expert);
    if (STREAMING(m))
        return ebb_diag_set(diag, EBB_EINVAL,
                            "--expert-cache does not combine with the layer streamer "
                            "(--residency, --memory-budget auto) yet");
    if (p->pack_path)
        return ebb_diag_set(diag, EBB_EINVAL,
                            "--expert-cache copies experts from the GGUF, not from a pack");
    struct clm_xc *x = calloc(1, sizeof(*x));
    if (!x)
        return EBB_ENOMEM;
    m->xc = x;
    uint32_t L = hp->n_layer, E = hp->n_expert, k = hp->n_expert_used;
    x->n_layer = L;
    x->n_expert = E;
    x->k = k;
    x->g0 = m->plan.steps[moe].group + 1u;
    x->src = calloc((size_t)L * 3, sizeof(*x->src));
    x->ebytes = calloc((size_t)L * 3, sizeof(*x->ebytes));
    x->pool = calloc((size_t)L * 3, sizeof(*x->pool));
    x->w = calloc((size_t)L * 3, sizeof(*x->w));
    x->slot_of = malloc(sizeof(int32_t) * L * E);
    x->host_ids = malloc(sizeof(int32_t) * m->n_batch * k);
    x->host_sids = malloc(sizeof(int32_t) * m->n_batch * k);
    x->want = calloc(E, 1);
    x->list = malloc(sizeof(uint32_t) * E);
    x->lm_group = malloc(sizeof(int32_t) * E);
    x->lm_slot = malloc(sizeof(int32_t) * E);
    x->lm_list = malloc(sizeof(uint32_t) * E);
    x->lm_g0 = malloc(sizeof(uint32_t) * (E + 1));
    x->lm_first = calloc(E, sizeof(cl_event));
    x->lm_last = calloc(E, sizeof(cl_event));
    if (!x->src || !x->ebytes || !x->pool || !x->w || !x->slot_of || !x->host_ids ||
        !x->host_sids || !x->want || !x->list || !x->lm_group || !x->lm_slot || !x->lm_list ||
        !x->lm_g0 || !x->lm_first || !x->lm_last)
        return EBB_ENOMEM;
    memset(x->slot_of, 0xff, sizeof(int32_t) * L * E);
    uint64_t experts = 0, per_slot = 0, big = 0, small = UINT64_MAX;
    for (uint32_t l = 0; l < L; l++) {
        for (uint32_t i = 0; i < 3; i++) {
            const struct clm_group *G = &m->plan.groups[x->g0 + i];
            const struct ebb__tensor *d = &m->a->tensors[G->t[0]];
            uint32_t n_in = (uint32_t)ebb__arch_dim(hp, d->ne0);
            uint32_t rows = (uint32_t)ebb__arch_dim(hp, d->ne1);
            char nm[96];
            const struct ebb_gguf_tensor *t;
            ebb__arch_tensor_name(m->a, (uint32_t)G->t[0], l, nm, sizeof(nm));
            if ((rc = ebb__clm_find(g, nm, n_in, (uint64_t)rows * E, &t, diag)))
                return rc;
            if (t->size % E)
                return ebb_diag_set(diag, EBB_EFORMAT, "tensor '%s': %llu bytes for %u experts", nm,
                                    (unsigned long long)t->size, E);
            uint64_t eb = t->size / E;
            x->ebytes[l * 3 + i] = eb;
            x->src[l * 3 + i] = t->data;
            struct ebb_cl_weight *w = &x->w[l * 3 + i];
            w->layout = (struct ebb_cl_layout){
                .type = t->type, .storage = EBB_CL_STORE_BUFFER, .order = EBB_CL_ORDER_RAW};
            w->n_in = n_in;
            w->n_out = rows; /* an expert's, until the slots are counted */
            experts += t->size;
        }
        uint64_t one = x->ebytes[l * 3] + x->ebytes[l * 3 + 1] + x->ebytes[l * 3 + 2];
        per_slot += one;
        big = one > big ? one : big;
        small = one < small ? one : small;
    }
    if (autos && (rc = from_budget(m, g, p->memory_budget, experts, per_slot, &n_slots, diag)))
        return rc;
    if (!autos && p->memory_budget) { /* a count and a budget: the count must fit */
        uint32_t fit = 0;
        if ((rc = from_budget(m, g, p->memory_budget, experts, per_slot, &fit, diag)))
            return rc;
        if (fit < n_slots)
            return ebb_diag_set(diag, EBB_ENOMEM,
                                "--expert-cache %u: the budget of %.1f MiB holds %u expert slots "
                                "per layer (--expert-cache auto takes them)",
                                n_slots, (double)p->memory_budget / (1 << 20), fit);
    }
    x->n_slots = n_slots;
    x->expert_in = malloc(sizeof(int32_t) * L * n_slots);
    x->used = calloc((size_t)L * n_slots, sizeof(uint64_t));
    if (!x->expert_in || !x->used)
        return EBB_ENOMEM;
    memset(x->expert_in, 0xff, sizeof(int32_t) * L * n_slots);
    uint32_t rect;
    if ((rc = ebb__clm_env_count("EBB_EXPERT_RECT", 1, 0, 1, &rect, diag)))
        return rc;
    x->rect = rect;
    for (uint32_t l = 0; l < L && x->rect; l++) { /* each layer's three pools fit one buffer */
        const uint64_t *eb = x->ebytes + (size_t)l * 3;
        if (XC_ALIGN_UP(eb[0] * n_slots) + XC_ALIGN_UP(eb[1] * n_slots) + eb[2] * n_slots >
            m->cl->info.max_alloc)
            x->rect = false;
    }
    for (uint32_t j = 0; j < L * 3; j++) {
        struct ebb_cl_weight *w = &x->w[j];
        uint64_t eb = x->ebytes[j];
        w->n_out *= n_slots;
        if (!ebb_cl_layout_ok(&m->cl->info, &w->layout, (uint64_t)w->n_in * w->n_out))
            return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                                "--expert-cache: layer %u's expert stack %u has a type (%u) that "
                                "cannot be read in the raw layout on this device",
                                j / 3, j % 3, w->layout.type);
        w->bytes = eb * n_slots;
        if (x->rect) { /* the layer's three pools in one buffer, each from a page */
            if (j % 3)
                continue;
            uint64_t o1 = XC_ALIGN_UP(x->ebytes[j] * n_slots),
                     o2 = o1 + XC_ALIGN_UP(x->ebytes[j + 1] * n_slots);
            if ((rc = ebb__clm_alloc(m, (size_t)(o2 + x->ebytes[j + 2] * n_slots), &x->pool[j],
                                     "an expert pool", diag)))
                return rc;
            for (uint32_t r = 0; r < 3; r++) {
                x->w[j + r].a = x->pool[j + r] = x->pool[j];
                x->w[j + r].off = r == 0 ? 0 : r == 1 ? o1 : o2;
                if (r)
                    clRetainMemObject(x->pool[j]);
            }
            continue;
        }
        if ((rc = ebb__clm_alloc(m, (size_t)(eb * n_slots), &x->pool[j], "an expert pool", diag)))
            return rc;
        w->a = x->pool[j];
    }
    if ((rc = staging_open(m, big, diag)))
        return rc;
    if ((rc = ebb__clm_alloc(m, sizeof(cl_int) * m->n_batch * k, &x->sids, "expert slot table",
                             diag)))
        return rc;
    x->st.on = true;
    x->st.slots = n_slots;
    x->st.n_layer = L;
    x->st.pool_bytes = per_slot * n_slots;
    x->st.expert_bytes = big;
    x->st.expert_bytes_min = small;
    x->st.threads = ebb_stream_pool_threads(x->threads);
    if ((rc = ebb__clm_xh_open(m, x->w, x->src, x->tier_p, x->ebytes, &x->xh, diag)))
        return rc;
    m->xc_g0 = x->g0;
    m->xc_token_bytes = (uint64_t)k * per_slot;
    char tier[128] = "";
    if (x->tier)
        snprintf(tier, sizeof(tier), "; every expert in pinned host memory%s",
                 x->tier_auto ? " (half the host's available memory holds them)" : "");
    else if (x->tier_auto && x->tier_avail)
        snprintf(tier, sizeof(tier), "; not pinned: %.1f MiB available on the host",
                 (double)x->tier_avail / (1 << 20));
    fprintf(stderr,
            "ebb: expert cache on: %u of %u experts per layer in device slots%s (%u layers, "
            "%.1f MiB of %.1f MiB of experts; %u copy threads, batches of %u%s%s)\n",
            n_slots, E, autos ? ", sized from the budget" : "", L,
            (double)x->st.pool_bytes / (1 << 20), (double)experts / (1 << 20), x->st.threads,
            x->batch, tier, x->rect ? "" : "; three writes an expert");
    return EBB_OK;
}

/* A slot of layer l for a new expert: a free one, else the least recently used one not wanted
 * by this pass (want: n_expert flags, or NULL). The tables forget its old expert; -1 when every
 * slot is wanted (cannot happen: a pass wants at most n_slots experts). */
static int32_t victim(struct clm_xc *x, uint32_t l, const uint8_t *want,
                      struct ebb_model_expert_cache *d)
{
    int32_t *in = x->expert_in + (size_t)l * x->n_slots;
    uint64_t *used = x->used + (size_t)l * x->n_slots;
    int32_t best = -1;
    for (uint32_t s = 0; s < x->n_slots; s++) {
        if (in[s] < 0) {
            best = (int32_t)s;
            break;
        }
        if (want && want[in[s]])
            continue;
        if (best < 0 || used[s] < used[best])
            best = (int32_t)s;
    }
    if (best >= 0 && in[best] >= 0) {
        x->slot_of[(size_t)l * x->n_expert + (uint32_t)in[best]] = -1;
        in[best] = -1;
        d->evictions++;
    }
    if (best >= 0 && x->pf_flag && x->pf_flag[(size_t)l * x->n_slots + (uint32_t)best]) {
        x->pf_flag[(size_t)l * x->n_slots + (uint32_t)best] = 0;
        d->prefetch_wasted++;
    }
    return best;
}

/* After a failed copy: layer l's slots are all empty (what they hold is unknown). */
static void forget_layer(struct clm_xc *x, uint32_t l)
{
    memset(x->slot_of + (size_t)l * x->n_expert, 0xff, sizeof(int32_t) * x->n_expert);
    memset(x->expert_in + (size_t)l * x->n_slots, 0xff, sizeof(int32_t) * x->n_slots);
    if (x->pf_flag)
        memset(x->pf_flag + (size_t)l * x->n_slots, 0, x->n_slots);
}

/* Piece i of a fill job: expert i / (3 split), record (i / split) % 3, part i % split of it,
 * from the mapped file into the expert's staging entry (its records back to back). */
static void fill_task(void *ctx, uint32_t i)
{
    const struct xc_fill *f = ctx;
    const struct clm_xc *x = f->x;
    uint32_t j = i / (3 * f->split), r = (i / f->split) % 3, part = i % f->split;
    const uint64_t *eb = x->ebytes + (size_t)f->l * 3;
    uint64_t roff = 0;
    for (uint32_t q = 0; q < r; q++)
        roff += eb[q];
    uint64_t a = eb[r] * part / f->split, b = eb[r] * (part + 1) / f->split;
    uint8_t *dst = x->stage_p + (uint64_t)f->ent[j] * x->ent_bytes + roff;
    memcpy(dst + a, x->src[(size_t)f->l * 3 + r] + (uint64_t)f->e[j] * eb[r] + a, b - a);
}

/* Enqueues the writes of f's filled entries into their slots on the copy queue, the first one
 * after `after` (or nothing); the last write's event then guards the entries and is the
 * queue's last copy. */
static ebb_err enqueue_copies(struct clm *m, struct xc_fill *f, cl_event after,
                              struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    cl_int e = CL_SUCCESS;
    cl_event last = NULL;
    const uint64_t *eb = x->ebytes + (size_t)f->l * 3;
    const struct ebb_cl_weight *w = x->w + (size_t)f->l * 3;
    /* the records a rectangular write takes (EBB_EXPERT_RECT): gate and up where they are the
     * same size, down too where it also is (the pools then lie w[1].off apart, xc_open) */
    uint32_t rows = !x->rect || eb[0] != eb[1] ? 1 : eb[2] == eb[0] ? 3 : 2;
    for (uint32_t j = 0; j < f->n && !e; j++) {
        uint64_t roff = 0;
        const uint8_t *rec = x->tier_p ? x->tier_p[f->l] + (uint64_t)f->e[j] * expert_size(x, f->l)
                                       : x->stage_p + (uint64_t)f->ent[j] * x->ent_bytes;
        for (uint32_t r = 0; r < 3 && !e; r += r ? 1 : rows) {
            uint32_t n_rec = r ? 1 : rows;
            bool first = !j && !r, end = j + 1 == f->n && r + n_rec == 3;
            cl_event *ev = end ? &last : NULL;
            if (first && !end && x->first_ev && !*x->first_ev)
                ev = x->first_ev;
            cl_uint n_after = first && after ? 1 : 0;
            const cl_event *wait = n_after ? &after : NULL;
            if (n_rec > 1) {
                size_t bo[3] = {(size_t)(eb[0] * (uint64_t)f->slot[j]), 0, 0}, ho[3] = {0, 0, 0};
                size_t region[3] = {(size_t)eb[0], n_rec, 1};
                e = clEnqueueWriteBufferRect(x->qio, x->pool[(size_t)f->l * 3], CL_FALSE, bo, ho,
                                             region, (size_t)w[1].off, 0, (size_t)eb[0], 0, rec,
                                             n_after, wait, ev);
            } else {
                size_t dst = (size_t)(w[r].off + eb[r] * (uint64_t)f->slot[j]);
                e = clEnqueueWriteBuffer(x->qio, x->pool[(size_t)f->l * 3 + r], CL_FALSE, dst,
                                         (size_t)eb[r], rec + roff, n_after, wait, ev);
            }
            if (!e && first && end && x->first_ev && !*x->first_ev) { /* one write in all */
                clRetainEvent(last);
                *x->first_ev = last;
            }
            for (uint32_t q = 0; q < n_rec; q++)
                roff += eb[r + q];
        }
    }
    if (!e)
        e = clFlush(x->qio);
    if (e) { /* the writes enqueued may still read the entries: let them end */
        if (last)
            clReleaseEvent(last);
        clFinish(x->qio);
        return ebb_cl_check(e, diag, "copying an expert to its slot");
    }
    for (uint32_t j = 0; j < f->n && !x->tier_p; j++) { /* the tier is never rewritten */
        clRetainEvent(last);
        x->ent_ev[f->ent[j]] = last;
    }
    if (x->last_copy)
        clReleaseEvent(x->last_copy);
    x->last_copy = last;
    x->unwaited = true;
    return EBB_OK;
}

/* Waits until the device has read what f's staging entries held last. */
static ebb_err wait_entries(struct clm_xc *x, const struct xc_fill *f, struct ebb_diag *diag)
{
    for (uint32_t j = 0; j < f->n; j++) {
        cl_event *ev = &x->ent_ev[f->ent[j]];
        if (*ev) {
            cl_int e = clWaitForEvents(1, ev);
            clReleaseEvent(*ev);
            *ev = NULL;
            if (e)
                return ebb_cl_check(e, diag, "waiting for an expert staging entry");
        }
    }
    return EBB_OK;
}

/* Pieces each of f's records is copied in, so that each of `threads` gets a part. */
static void split_for(struct xc_fill *f, uint32_t threads)
{
    f->split = (threads + 3 * f->n - 1) / (3 * f->n);
}

/* Fills f's staging entries on the copy threads and all of the owner, then enqueues their
 * writes (engine thread). */
static ebb_err fill_and_copy(struct clm *m, struct xc_fill *f, cl_event after,
                             struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    ebb_err rc = wait_entries(x, f, diag);
    if (rc)
        return rc;
    split_for(f, ebb_stream_pool_threads(x->threads));
    ebb_stream_pool_run(x->threads, 3 * f->n * f->split, fill_task, f);
    return enqueue_copies(m, f, after, diag);
}

/* The pass's misses (their slots taken already) from the file to their slots, a batch at a
 * time, alternating between the two halves of the staging ring so that the threads fill one
 * batch while the device copies the previous one; the first write waits for `after`. */
static ebb_err copy_misses(struct clm *m, uint32_t l, uint32_t n, cl_event after,
                           struct ebb_model_expert_cache *d, struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    struct xc_fill *f = &x->fill;
    ebb_err rc = EBB_OK;
    uint64_t t0 = now_ns();
    for (uint32_t i = 0, half = 0; i < n && !rc; i += x->batch, half ^= 1) {
        f->l = l;
        f->n = n - i < x->batch ? n - i : x->batch;
        for (uint32_t j = 0; j < f->n; j++) {
            f->e[j] = x->miss_e[i + j];
            f->slot[j] = x->miss_slot[i + j];
            f->ent[j] = half * x->batch + j;
            for (uint32_t r = 0; r < 3; r++)
                d->bytes_copied += x->ebytes[(size_t)l * 3 + r];
        }
        rc = x->tier_p ? enqueue_copies(m, f, i ? NULL : after, diag)
                       : fill_and_copy(m, f, i ? NULL : after, diag);
    }
    if (rc)
        forget_layer(x, l);
    d->fill_ns += now_ns() - t0;
    return rc;
}

/* The last one-token step's copies: their device time per expert to the host experts' choice
 * (when measured), the events released. */
static void step_copies_end(struct clm_xc *x, bool measure)
{
    cl_ulong t0 = 0, t1 = 0;
    if (measure && x->step_first && x->step_last && x->step_n &&
        !clGetEventProfilingInfo(x->step_first, CL_PROFILING_COMMAND_START, sizeof(t0), &t0,
                                 NULL) &&
        !clGetEventProfilingInfo(x->step_last, CL_PROFILING_COMMAND_END, sizeof(t1), &t1, NULL) &&
        t1 > t0)
        ebb__clm_xh_link(x->xh, (t1 - t0) / x->step_n);
    if (x->step_first)
        clReleaseEvent(x->step_first);
    if (x->step_last)
        clReleaseEvent(x->step_last);
    x->step_first = x->step_last = NULL;
    x->step_n = 0;
}

ebb_err ebb__clm_xc_begin(struct clm *m, uint32_t l, int nt, cl_mem norm, struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    size_t n_ids = (size_t)nt * x->k;
    x->l = l;
    x->nt = nt;
    x->t0 = 0;
    x->d = (struct ebb_model_expert_cache){0};
    ebb_err rc = EBB_OK;
    if (x->pf_pending) { /* the guesses for this layer: their copies overlap the read-back */
        ebb_stream_pool_wait(x->threads);
        x->pf_pending = false;
        if ((rc = enqueue_copies(m, &x->pf, NULL, diag))) {
            forget_layer(x, x->pf.l);
            return rc;
        }
    }
    /* the host's experts read their input with the ids (the same wait) */
    if (ebb__clm_xh_room(x->xh, l, nt) && (rc = ebb__clm_xh_read(m, x->xh, l, norm, diag)))
        return rc;
    uint64_t t0 = now_ns();
    rc = ebb_cl_read(m->cl, m->moe.ids, 0, sizeof(cl_int) * n_ids, x->host_ids, diag);
    x->d.ids_ns = now_ns() - t0;
    if (x->step_first || x->step_last) /* the last step's copies ran before its kernels */
        step_copies_end(x, !rc);
    for (size_t r = 0; r < n_ids && !rc; r++)
        if (x->host_ids[r] < 0 || (uint32_t)x->host_ids[r] >= x->n_expert)
            rc = ebb_diag_set(diag, EBB_EINVAL, "expert cache: the router chose expert %d",
                              x->host_ids[r]);
    return rc;
}

/* The layer step's figures into the counters other threads read. */
static void publish(struct clm *m)
{
    struct clm_xc *x = m->xc;
    pthread_mutex_lock(&m->snap_mu);
    x->st.lookups += x->d.lookups;
    x->st.hits += x->d.hits;
    x->st.misses += x->d.misses;
    x->st.bytes_copied += x->d.bytes_copied;
    x->st.evictions += x->d.evictions;
    x->st.passes += x->d.passes;
    x->st.fill_ns += x->d.fill_ns;
    x->st.ids_ns += x->d.ids_ns;
    x->st.prefetched += x->d.prefetched;
    x->st.prefetch_hits += x->d.prefetch_hits;
    x->st.prefetch_wasted += x->d.prefetch_wasted;
    x->st.host_experts += x->d.host_experts;
    x->st.host_ns += x->d.host_ns;
    ebb__clm_xh_costs(x->xh, &x->st.host_cost_ns, &x->st.link_cost_ns);
    x->st.layer_steps++;
    pthread_mutex_unlock(&m->snap_mu);
}

/* The end of layer l's step with prefetch on: its prefetched experts that no pass used count as
 * wasted, the use counts age, and the threads start filling the next layer's guesses: its most
 * used experts that are not in its slots (a use count above 0), into its least recently used
 * slots (no expert of layer l's step is among them: they are another layer's). */
static ebb_err prefetch(struct clm *m, uint32_t l, struct ebb_model_expert_cache *d,
                        struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    uint8_t *flag = x->pf_flag + (size_t)l * x->n_slots;
    for (uint32_t s = 0; s < x->n_slots; s++)
        if (flag[s]) {
            flag[s] = 0;
            d->prefetch_wasted++;
        }
    if (++x->steps[l] == XC_DECAY) {
        x->steps[l] = 0;
        for (uint32_t e = 0; e < x->n_expert; e++)
            x->count[(size_t)l * x->n_expert + e] >>= 1;
    }
    /* The layer's kernels start while the threads fill. */
    ebb_err rc = ebb_cl_check(clFlush(m->cl->q), diag, "flushing the compute queue");
    uint32_t tl = (l + 1) % x->n_layer;
    const uint32_t *count = x->count + (size_t)tl * x->n_expert;
    const int32_t *slot_of = x->slot_of + (size_t)tl * x->n_expert;
    struct xc_fill *f = &x->pf;
    f->l = tl;
    f->n = 0;
    while (!rc && f->n < x->pf_max) {
        int32_t best = -1;
        for (uint32_t e = 0; e < x->n_expert; e++)
            if (slot_of[e] < 0 && count[e] && (best < 0 || count[e] > count[best]))
                best = (int32_t)e;
        if (best < 0)
            break;
        int32_t s = victim(x, tl, NULL, d);
        if (s < 0)
            break;
        x->expert_in[(size_t)tl * x->n_slots + (uint32_t)s] = best;
        x->slot_of[(size_t)tl * x->n_expert + (uint32_t)best] = s;
        x->used[(size_t)tl * x->n_slots + (uint32_t)s] = x->clock;
        x->pf_flag[(size_t)tl * x->n_slots + (uint32_t)s] = 1;
        f->e[f->n] = (uint32_t)best;
        f->slot[f->n] = s;
        f->ent[f->n] = 2 * x->batch + x->pf_set * x->pf_max + f->n;
        f->n++;
        d->prefetched++;
        for (uint32_t r = 0; r < 3; r++)
            d->bytes_copied += x->ebytes[(size_t)tl * 3 + r];
    }
    if (rc || !f->n)
        return rc;
    if (x->tier_p) { /* straight from the tier: the copies overlap this layer's kernels */
        if ((rc = enqueue_copies(m, f, NULL, diag)))
            forget_layer(x, tl);
        return rc;
    }
    x->pf_set ^= 1;
    if ((rc = wait_entries(x, f, diag))) {
        forget_layer(x, tl);
        return rc;
    }
    uint32_t workers = ebb_stream_pool_threads(x->threads) - 1;
    split_for(f, workers ? workers : 1);
    ebb_stream_pool_start(x->threads, 3 * f->n * f->split, fill_task, f);
    x->pf_pending = true;
    return EBB_OK;
}

ebb_err ebb__clm_xc_next(struct clm *m, const struct ebb_cl_weight *ws[3], cl_mem *sids,
                         bool *ready, struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    uint32_t k = x->k, l = x->l;
    int nt = x->nt, t0 = x->t0;
    size_t n_ids = (size_t)nt * k;
    *ready = false;
    if (t0 >= nt) {
        ebb_err rc = EBB_OK;
        if (ebb__clm_xh_pending(x->xh)) { /* after the layer's kernels: the host's sum added */
            uint64_t w = 0;
            rc = ebb__clm_xh_finish(m, x->xh, &w, diag);
            x->d.host_ns += w;
        }
        if (!rc && x->pf_max)
            rc = prefetch(m, l, &x->d, diag);
        publish(m);
        return rc;
    }
    const int32_t *slot_of = x->slot_of + (size_t)l * x->n_expert;
    uint64_t *used = x->used + (size_t)l * x->n_slots;
    struct ebb_model_expert_cache *d = &x->d;
    /* The pass: rows t0..t1-1, as many as keep their experts within the slots. */
    uint32_t n = 0;
    int t1 = t0;
    for (; t1 < nt; t1++) {
        uint32_t add = 0;
        for (uint32_t j = 0; j < k; j++)
            add += !x->want[x->host_ids[(size_t)t1 * k + j]];
        if (n + add > x->n_slots)
            break;
        for (uint32_t j = 0; j < k; j++) {
            int32_t e = x->host_ids[(size_t)t1 * k + j];
            if (!x->want[e]) {
                x->want[e] = 1;
                x->list[n++] = (uint32_t)e;
            }
        }
    }
    /* Slots for the misses (never one this pass wants), then their copies. A pass after the
     * first overwrites slots the previous pass's kernels read: its copies wait for them. */
    ebb_err rc = EBB_OK;
    uint32_t n_miss = 0, host = 0;
    if (nt == 1 && x->xh) { /* the room ebb__clm_xc_begin found, shared by cost */
        uint32_t misses = 0;
        for (uint32_t i = 0; i < n; i++)
            misses += slot_of[x->list[i]] < 0;
        host = ebb__clm_xh_pick(x->xh, misses);
    }
    x->clock++;
    for (uint32_t i = 0; i < n && !rc; i++) {
        uint32_t e = x->list[i];
        d->lookups++;
        if (x->count)
            x->count[(size_t)l * x->n_expert + e]++;
        if (slot_of[e] >= 0) {
            d->hits++;
            uint8_t *pf = x->pf_flag ? x->pf_flag + (size_t)l * x->n_slots + slot_of[e] : NULL;
            if (pf && *pf) {
                *pf = 0;
                d->prefetch_hits++;
            }
        } else if (host) { /* left out of the slots (its ids stay -1): the host computes it */
            uint32_t j = 0;
            while (j + 1 < k && x->host_ids[j] != (int32_t)e)
                j++;
            ebb__clm_xh_add(x->xh, e, j);
            d->host_experts++;
            host--;
            continue;
        } else {
            int32_t s = victim(x, l, x->want, d);
            if (s < 0) {
                rc = ebb_diag_set(diag, EBB_EINVAL, "expert cache: no slot free in layer %u", l);
                break;
            }
            d->misses++;
            x->expert_in[(size_t)l * x->n_slots + (uint32_t)s] = (int32_t)e;
            x->slot_of[(size_t)l * x->n_expert + e] = s;
            x->miss_e[n_miss] = e;
            x->miss_slot[n_miss++] = s;
        }
        used[slot_of[e]] = x->clock;
    }
    /* the host's experts start now, on its threads, while this thread enqueues the rest */
    if (!rc && d->host_experts && !ebb__clm_xh_pending(x->xh))
        ebb__clm_xh_start(x->xh, l, &m->hp);
    cl_event after = NULL;
    if (!rc && n_miss && t0 > 0)
        rc = ebb_cl_check(clEnqueueMarkerWithWaitList(m->cl->q, 0, NULL, &after), diag,
                          "marking the end of an expert pass");
    /* with the host's share picked by cost, a one-token step's copies are timed */
    bool timed = !rc && n_miss && nt == 1 && x->prof && ebb__clm_xh_auto(x->xh) && !x->step_first;
    if (timed)
        x->first_ev = &x->step_first;
    if (!rc && n_miss)
        rc = copy_misses(m, l, n_miss, after, d, diag);
    if (timed) {
        x->first_ev = NULL;
        if (!rc && x->step_first && x->last_copy) {
            clRetainEvent(x->last_copy);
            x->step_last = x->last_copy;
            x->step_n = n_miss;
        }
    }
    if (after)
        clReleaseEvent(after);
    if (rc)
        forget_layer(x, l);
    for (size_t r = 0; r < n_ids && !rc; r++) {
        int t = (int)(r / k);
        x->host_sids[r] = t >= t0 && t < t1 ? slot_of[x->host_ids[r]] : -1;
    }
    for (uint32_t i = 0; i < n; i++)
        x->want[x->list[i]] = 0;
    d->passes++;
    /* The kernels wait for the copies; the slot table's upload blocks when another pass
     * follows (it rewrites host_sids). */
    if (!rc && x->unwaited) {
        rc = ebb_cl_check(clEnqueueBarrierWithWaitList(m->cl->q, 1, &x->last_copy, NULL), diag,
                          "waiting for the expert copies");
        x->unwaited = false;
    }
    if (!rc)
        rc = ebb_cl_check(clEnqueueWriteBuffer(m->cl->q, x->sids, t1 < nt ? CL_TRUE : CL_FALSE, 0,
                                               sizeof(cl_int) * n_ids, x->host_sids, 0, NULL, NULL),
                          diag, "uploading the expert slot table");
    if (rc)
        return rc;
    for (uint32_t i = 0; i < 3; i++)
        ws[i] = &x->w[l * 3 + i];
    *sids = x->sids;
    x->t0 = t1;
    *ready = true;
    return EBB_OK;
}

uint64_t ebb__clm_xc_long_bytes(const struct clm *m, uint32_t rows)
{
    const struct ebb__hparams *hp = &m->hp;
    uint64_t k = hp->n_expert_used, pairs = (uint64_t)rows * k;
    return (uint64_t)rows * sizeof(float) * (hp->n_embd + 2 * k * hp->n_ff_exp) +
           pairs * sizeof(float) * hp->n_embd + pairs * 2 * sizeof(float) + /* yp, ids, w */
           pairs * sizeof(cl_int) + pairs * sizeof(cl_int4);                /* perm, tiles */
}

ebb_err ebb__clm_xc_long_plan(struct clm *m, uint32_t l, const int32_t *ids, size_t n_pairs,
                              uint32_t *n_groups, uint32_t *halves, bool *kept_group,
                              const uint32_t **list, const int32_t **group, const int32_t **slot,
                              struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    ebb_err rc = EBB_OK;
    x->lm_l = l;
    x->lm_d = (struct ebb_model_expert_cache){0};
    if (x->pf_pending) { /* a guess for this layer under way: let its copies go first */
        ebb_stream_pool_wait(x->threads);
        x->pf_pending = false;
        if ((rc = enqueue_copies(m, &x->pf, NULL, diag))) {
            forget_layer(x, x->pf.l);
            return rc;
        }
    }
    if (x->pf_flag) { /* the pass replaces the layer's slots: its guesses are wasted */
        uint8_t *flag = x->pf_flag + (size_t)l * x->n_slots;
        for (uint32_t s = 0; s < x->n_slots; s++) {
            x->lm_d.prefetch_wasted += flag[s];
            flag[s] = 0;
        }
    }
    memset(x->lm_group, 0xff, sizeof(int32_t) * x->n_expert);
    memset(x->lm_slot, 0xff, sizeof(int32_t) * x->n_expert);
    for (size_t p = 0; p < n_pairs; p++) {
        if (ids[p] < 0 || (uint32_t)ids[p] >= x->n_expert)
            return ebb_diag_set(diag, EBB_EINVAL, "expert cache: the router chose expert %d",
                                ids[p]);
        x->lm_group[ids[p]] = 0;
    }
    /* The used experts the slots hold already are group 0, in their slots, copied by no one.
     * Then two halves of the slots take the other groups in turn, so that one half is filled
     * while the other's products run; with one slot, one group at a time. */
    const int32_t *slot_of = x->slot_of + (size_t)l * x->n_expert;
    uint32_t per = x->n_slots >= 2 ? x->n_slots / 2 : 1, n = 0, kept = 0;
    *halves = x->n_slots >= 2 ? 2 : 1;
    x->lm_g0[0] = 0;
    for (uint32_t e = 0; e < x->n_expert; e++)
        if (x->lm_group[e] == 0 && slot_of[e] >= 0) {
            x->lm_slot[e] = slot_of[e];
            x->lm_list[n++] = e;
            kept++;
        }
    for (uint32_t e = 0, i = 0; e < x->n_expert; e++) {
        if (x->lm_group[e] < 0 || x->lm_slot[e] >= 0)
            continue;
        uint32_t g = (kept ? 1 : 0) + i / per;
        if (i % per == 0)
            x->lm_g0[g] = n;
        x->lm_group[e] = (int32_t)g;
        x->lm_slot[e] = (int32_t)((i / per % *halves) * per + i % per);
        x->lm_list[n++] = e;
        i++;
    }
    x->lm_ng = (kept ? 1 : 0) + (n - kept + per - 1) / per;
    x->lm_g0[x->lm_ng] = n;
    x->lm_d.hits = kept;
    *n_groups = x->lm_ng;
    *kept_group = kept != 0;
    *list = x->lm_list;
    *group = x->lm_group;
    *slot = x->lm_slot;
    return EBB_OK;
}

ebb_err ebb__clm_xc_long_copy(struct clm *m, uint32_t g, cl_event after, struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    uint32_t l = x->lm_l, n = 0;
    int32_t *slot_of = x->slot_of + (size_t)l * x->n_expert;
    if (g == 0 && x->lm_d.hits) /* the experts the slots held: nothing to copy */
        return EBB_OK;
    int32_t *in = x->expert_in + (size_t)l * x->n_slots;
    x->clock++;
    for (uint32_t i = x->lm_g0[g]; i < x->lm_g0[g + 1]; i++, n++) {
        uint32_t e = x->lm_list[i];
        int32_t s = x->lm_slot[e];
        if (in[s] >= 0) /* the slot's expert leaves it */
            slot_of[in[s]] = -1;
        if (slot_of[e] >= 0) /* held in another slot: copied again, into this group's */
            in[slot_of[e]] = -1;
        in[s] = (int32_t)e;
        slot_of[e] = s;
        x->used[(size_t)l * x->n_slots + (uint32_t)s] = x->clock;
        x->miss_e[n] = e;
        x->miss_slot[n] = s;
    }
    x->lm_d.misses += n;
    x->first_ev = x->prof ? &x->lm_first[g] : NULL;
    ebb_err rc = n ? copy_misses(m, l, n, after, &x->lm_d, diag) : EBB_OK;
    x->first_ev = NULL;
    if (!rc && n && x->last_copy) {
        clRetainEvent(x->last_copy);
        x->lm_last[g] = x->last_copy;
    }
    return rc;
}

ebb_err ebb__clm_xc_long_wait(struct clm *m, uint32_t g, struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    if (!x->lm_last[g])
        return EBB_OK;
    ebb_err rc = ebb_cl_check(clEnqueueBarrierWithWaitList(m->cl->q, 1, &x->lm_last[g], NULL), diag,
                              "waiting for a group of expert copies");
    if (!rc && x->last_copy == x->lm_last[g])
        x->unwaited = false;
    return rc;
}

/* The device time of group g's copies (the first write's start to the last one's end), from the
 * copy queue's profiling; 0 where there is none. */
static uint64_t copy_time(const struct clm_xc *x, uint32_t g)
{
    cl_ulong t0 = 0, t1 = 0;
    if (!x->prof || !x->lm_first[g] || !x->lm_last[g] ||
        clGetEventProfilingInfo(x->lm_first[g], CL_PROFILING_COMMAND_START, sizeof(t0), &t0,
                                NULL) ||
        clGetEventProfilingInfo(x->lm_last[g], CL_PROFILING_COMMAND_END, sizeof(t1), &t1, NULL))
        return 0;
    return t1 > t0 ? t1 - t0 : 0;
}

void ebb__clm_xc_long_end(struct clm *m, bool first_layer, uint64_t ids_ns, uint64_t ns)
{
    struct clm_xc *x = m->xc;
    uint64_t copy_ns = 0;
    for (uint32_t g = 0; g < x->lm_ng; g++) {
        copy_ns += copy_time(x, g);
        if (x->lm_first[g])
            clReleaseEvent(x->lm_first[g]);
        if (x->lm_last[g])
            clReleaseEvent(x->lm_last[g]);
        x->lm_first[g] = x->lm_last[g] = NULL;
    }
    pthread_mutex_lock(&m->snap_mu);
    x->st.lm_passes += first_layer;
    x->st.lm_layer_steps++;
    x->st.lm_groups += x->lm_ng;
    x->st.lm_copied += x->lm_d.misses;
    x->st.lm_kept += x->lm_d.hits;
    x->st.lm_bytes += x->lm_d.bytes_copied;
    x->st.prefetch_wasted += x->lm_d.prefetch_wasted;
    x->st.lm_fill_ns += x->lm_d.fill_ns;
    x->st.lm_copy_ns += copy_ns;
    x->st.lm_ids_ns += ids_ns;
    x->st.lm_ns += ns;
    pthread_mutex_unlock(&m->snap_mu);
}

const struct ebb_cl_weight *ebb__clm_xc_stacks(struct clm *m, uint32_t l)
{
    return &m->xc->w[(size_t)l * 3];
}

bool ebb__clm_xc_report(void *ctx, struct ebb_model_expert_cache *out)
{
    struct clm *m = ctx;
    if (!m->xc)
        return false;
    pthread_mutex_lock(&m->snap_mu);
    *out = m->xc->st;
    pthread_mutex_unlock(&m->snap_mu);
    return true;
}

void ebb__clm_xc_fini(struct clm *m)
{
    struct clm_xc *x = m->xc;
    if (!x)
        return;
    ebb_stream_pool_free(x->threads); /* waits for a fill under way */
    ebb__clm_xh_free(x->xh);          /* and for the host's experts */
    step_copies_end(x, false);
    if (x->qio)
        clFinish(x->qio);
    clFinish(m->cl->q);
    for (uint32_t i = 0; x->ent_ev && i < x->n_ent; i++)
        if (x->ent_ev[i])
            clReleaseEvent(x->ent_ev[i]);
    if (x->last_copy)
        clReleaseEvent(x->last_copy);
    if (x->pool)
        for (size_t i = 0; i < (size_t)x->n_layer * 3; i++)
            if (x->pool[i])
                clReleaseMemObject(x->pool[i]);
    if (x->stage_p) {
        clEnqueueUnmapMemObject(x->qio, x->stage, x->stage_p, 0, NULL, NULL);
        clFinish(x->qio);
    }
    if (x->stage)
        clReleaseMemObject(x->stage);
    for (uint32_t l = 0; x->tier && x->tier_p && l < x->n_layer; l++) {
        if (x->tier_p[l])
            clEnqueueUnmapMemObject(x->qio, x->tier[l], x->tier_p[l], 0, NULL, NULL);
        if (x->tier_p[l])
            clFinish(x->qio);
        if (x->tier[l])
            clReleaseMemObject(x->tier[l]);
    }
    if (x->qio)
        clReleaseCommandQueue(x->qio);
    if (x->sids)
        clReleaseMemObject(x->sids);
    free(x->src);
    free(x->ebytes);
    free(x->pool);
    free(x->w);
    free(x->slot_of);
    free(x->expert_in);
    free(x->used);
    free(x->host_ids);
    free(x->host_sids);
    free(x->want);
    free(x->list);
    free(x->ent_ev);
    free(x->fill.e);
    free(x->fill.slot);
    free(x->fill.ent);
    free(x->miss_e);
    free(x->miss_slot);
    free(x->pf.e);
    free(x->pf.slot);
    free(x->pf.ent);
    free(x->count);
    free(x->steps);
    free(x->pf_flag);
    free(x->tier);
    free(x->tier_p);
    for (uint32_t i = 0; x->lm_first && x->lm_last && i < x->n_expert; i++) {
        if (x->lm_first[i])
            clReleaseEvent(x->lm_first[i]);
        if (x->lm_last[i])
            clReleaseEvent(x->lm_last[i]);
    }
    free(x->lm_group);
    free(x->lm_slot);
    free(x->lm_list);
    free(x->lm_g0);
    free(x->lm_first);
    free(x->lm_last);
    free(x);
    m->xc = NULL;
}
