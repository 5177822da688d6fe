/* The expert cache (docs/STREAMER.md, "Experts on demand"): a mixture-of-experts layer keeps its
 * router, norms and attention resident while its three expert stacks stay in the mmapped file;
 * a device pool of n_slots expert slots per layer holds the experts used lately. After the
 * router (moe_route, on the device), the chosen ids are read back (one blocking read per layer),
 * the missing experts are copied from the file through a pinned staging buffer into the least
 * recently used slots, and the expert kernels run over the pool through a table of slot ids
 * (one small upload) in place of the expert ids. A chunk of prefill rows that uses more
 * experts than there are slots runs in passes, each over the rows whose experts fit (a token's
 * k experts always do, n_slots >= k); rows outside a pass carry slot -1, which the kernels
 * skip. Everything is allocated once at load. model-cl-moe.c drives a layer step
 * (ebb__clm_xc_begin, then ebb__clm_xc_next and its kernels per pass). */
#include "model-cl-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    cl_mem stage;     /* pinned host staging: n_slots experts of the three stacks of the layer with
                         the largest experts */
    uint8_t *stage_p; /* its mapping */
    cl_mem sids;      /* (N_BATCH, k) int: the slot table the kernels read */
    int32_t *host_ids, *host_sids;    /* (N_BATCH, k) read back / to upload */
    uint8_t *want;                    /* (n_expert) in the current pass */
    uint32_t *list;                   /* (n_expert) the current pass's experts */
    struct ebb_model_expert_cache st; /* counters (under m->snap_mu when published) */
    /* The layer step under way: its layer, rows, the first row of the next pass, figures. */
    uint32_t l;
    int nt, t0;
    struct ebb_model_expert_cache d;
};

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
        N_BATCH * f *
            (2 * (uint64_t)hp->n_embd + m->n_qkv + m->n_q + 3 * (uint64_t)hp->n_ff + hp->n_expert +
             2 * hp->n_expert_used + 2 * (uint64_t)hp->n_expert_used * hp->n_ff_exp) +
        N_OUT_ROWS * f * (hp->n_embd + (uint64_t)hp->n_vocab) + (16u << 20);
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
    x->host_ids = malloc(sizeof(int32_t) * N_BATCH * k);
    x->host_sids = malloc(sizeof(int32_t) * N_BATCH * k);
    x->want = calloc(E, 1);
    x->list = malloc(sizeof(uint32_t) * E);
    if (!x->src || !x->ebytes || !x->pool || !x->w || !x->slot_of || !x->host_ids ||
        !x->host_sids || !x->want || !x->list)
        return EBB_ENOMEM;
    memset(x->slot_of, 0xff, sizeof(int32_t) * L * E);
    uint64_t stage = 0, experts = 0, per_slot = 0, big = 0, small = UINT64_MAX;
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
    for (uint32_t j = 0; j < L * 3; j++) {
        struct ebb_cl_weight *w = &x->w[j];
        uint64_t eb = x->ebytes[j];
        w->n_out *= n_slots;
        if (!ebb_cl_layout_ok(&m->cl->info, &w->layout, (uint64_t)w->n_in * w->n_out))
            return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                                "--expert-cache: layer %u's expert stack %u has a type (%u) that "
                                "cannot be read in the raw layout on this device",
                                j / 3, j % 3, w->layout.type);
        if ((rc = ebb__clm_alloc(m, (size_t)(eb * n_slots), &x->pool[j], "an expert pool", diag)))
            return rc;
        w->a = x->pool[j];
        w->bytes = eb * n_slots;
    }
    stage = big * n_slots;
    cl_int e = CL_SUCCESS;
    x->stage =
        clCreateBuffer(m->cl->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, stage, NULL, &e);
    if (e)
        return ebb_diag_set(diag, EBB_ENOMEM, "allocating the expert staging (%llu bytes): %s",
                            (unsigned long long)stage, ebb_cl_err_name(e));
    x->stage_p = clEnqueueMapBuffer(m->cl->q, x->stage, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                    stage, 0, NULL, NULL, &e);
    if (e)
        return ebb_diag_set(diag, EBB_ENOMEM, "mapping the expert staging: %s", ebb_cl_err_name(e));
    if ((rc = ebb__clm_alloc(m, sizeof(cl_int) * N_BATCH * k, &x->sids, "expert slot table", diag)))
        return rc;
    x->st.on = true;
    x->st.slots = n_slots;
    x->st.n_layer = L;
    x->st.pool_bytes = per_slot * n_slots;
    x->st.expert_bytes = big;
    x->st.expert_bytes_min = small;
    m->xc_g0 = x->g0;
    m->xc_token_bytes = (uint64_t)k * per_slot;
    fprintf(stderr,
            "ebb: expert cache on: %u of %u experts per layer in device slots%s (%u layers, "
            "%.1f MiB of %.1f MiB of experts)\n",
            n_slots, E, autos ? ", sized from the budget" : "", L,
            (double)x->st.pool_bytes / (1 << 20), (double)experts / (1 << 20));
    return EBB_OK;
}

/* Expert e of layer l into a slot: a free one, else the least recently used one not wanted by
 * this pass. Its three records are copied to the staging, then to the pool (non-blocking: the
 * staging is next written after a blocking read of this queue, or after clFinish). */
static ebb_err fetch(struct clm *m, uint32_t l, uint32_t e, uint64_t *stage_off,
                     struct ebb_model_expert_cache *d, struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    int32_t *in = x->expert_in + (size_t)l * x->n_slots;
    uint64_t *used = x->used + (size_t)l * x->n_slots;
    int32_t best = -1;
    for (uint32_t s = 0; s < x->n_slots; s++) {
        if (in[s] < 0) {
            best = (int32_t)s;
            break;
        }
        if (x->want[in[s]])
            continue;
        if (best < 0 || used[s] < used[best])
            best = (int32_t)s;
    }
    if (best < 0) /* cannot happen: a pass wants at most n_slots experts */
        return ebb_diag_set(diag, EBB_EINVAL, "expert cache: no slot free in layer %u", l);
    if (in[best] >= 0) {
        x->slot_of[(size_t)l * x->n_expert + (uint32_t)in[best]] = -1;
        d->evictions++;
    }
    for (uint32_t i = 0; i < 3; i++) {
        uint64_t eb = x->ebytes[l * 3 + i];
        uint8_t *dst = x->stage_p + *stage_off;
        memcpy(dst, x->src[l * 3 + i] + (uint64_t)e * eb, eb);
        ebb_err rc = ebb_cl_check(clEnqueueWriteBuffer(m->cl->q, x->pool[l * 3 + i], CL_FALSE,
                                                       (size_t)(eb * (uint64_t)best), (size_t)eb,
                                                       dst, 0, NULL, NULL),
                                  diag, "copying an expert to its slot");
        if (rc)
            return rc;
        *stage_off += eb;
        d->bytes_copied += eb;
    }
    in[best] = (int32_t)e;
    x->slot_of[(size_t)l * x->n_expert + e] = best;
    return EBB_OK;
}

ebb_err ebb__clm_xc_begin(struct clm *m, uint32_t l, int nt, struct ebb_diag *diag)
{
    struct clm_xc *x = m->xc;
    size_t n_ids = (size_t)nt * x->k;
    x->l = l;
    x->nt = nt;
    x->t0 = 0;
    x->d = (struct ebb_model_expert_cache){0};
    ebb_err rc = ebb_cl_read(m->cl, m->moe.ids, 0, sizeof(cl_int) * n_ids, x->host_ids, diag);
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
    x->st.layer_steps++;
    pthread_mutex_unlock(&m->snap_mu);
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
        publish(m);
        return EBB_OK;
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
    /* Earlier passes' copies read the staging: let them finish before it is rewritten. */
    ebb_err rc = t0 > 0 ? ebb_cl_finish(m->cl, diag) : EBB_OK;
    x->clock++;
    uint64_t stage_off = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        uint32_t e = x->list[i];
        d->lookups++;
        if (slot_of[e] >= 0) {
            d->hits++;
        } else {
            d->misses++;
            rc = fetch(m, l, e, &stage_off, d, diag);
        }
        if (!rc)
            used[slot_of[e]] = x->clock;
    }
    for (size_t r = 0; r < n_ids; r++) {
        int t = (int)(r / k);
        x->host_sids[r] = t >= t0 && t < t1 ? slot_of[x->host_ids[r]] : -1;
    }
    for (uint32_t i = 0; i < n; i++)
        x->want[x->list[i]] = 0;
    d->passes++;
    /* Blocking when another pass follows: it rewrites host_sids. */
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
    if (x->pool)
        for (size_t i = 0; i < (size_t)x->n_layer * 3; i++)
            if (x->pool[i])
                clReleaseMemObject(x->pool[i]);
    if (x->stage_p)
        clEnqueueUnmapMemObject(m->cl->q, x->stage, x->stage_p, 0, NULL, NULL);
    if (x->stage_p)
        clFinish(m->cl->q);
    if (x->stage)
        clReleaseMemObject(x->stage);
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
    free(x);
    m->xc = NULL;
}
