/* Experts computed by the host beside the expert cache (EBB_EXPERT_HOST, docs/STREAMER.md "Missed
 * experts on the host"). In a one-token step a miss costs its expert's bytes over the link
 * before the device can use it; the host has every expert in its memory already (the pinned
 * tier or the mapped file) and cores that are idle while the device works. Up to `max` of a
 * step's misses are therefore left out of the slots and computed here, by worker threads, while
 * the engine thread enqueues the copies and kernels of the others: the layer's MoE input (the
 * residual row, RMS-normed here with the layer's norm vector) in 8-bit blocks, each expert's
 * gate and up rows, SiLU(gate) x up, and its down rows, weighted by the router's weight. The
 * sum is written to the device and added to the residual after the layer's expert kernels.
 *
 * The work runs in two jobs over all the threads: the gate and up rows of every host expert
 * (their SwiGLU), started at once, while the engine thread enqueues the device's work; then,
 * once the engine thread has enqueued the layer's kernels, the SwiGLU in 8-bit blocks and the
 * down rows, each output element summed over the host's experts in their order. The threads
 * (spin-pool.h) poll for the next job for EBB_EXPERT_HOST_SPIN_US after each one, so that two
 * jobs a layer of a fraction of a millisecond each do not wait for every thread's wake-up. */
#include "model-cl-int.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "quant/quant.h"
#include "stream/spin-pool.h"

#define XH_MAX_THREADS 64
#define XH_ROWS 16  /* rows a task takes at least */
#define XH_TASKS 3  /* tasks a thread */
#define XH_PROBE 64 /* auto: steps between probes of the host's cost while its share is none */
#define XH_WIN 8    /* auto: samples of each cost kept */

struct xh_cost {
    uint64_t s[XH_WIN];
    uint32_t n;
};

struct clm_xhost {
    uint32_t max; /* experts a step may leave to the host (0: off) */
    /* EBB_EXPERT_HOST=auto: each step's share picked from the measured costs of an expert on
     * the host (the threads' work) and over the link (the copy queue's device time), the least
     * of each one's latest XH_WIN samples; `probe` counts steps given none. */
    bool autop;
    struct xh_cost host, link;
    uint32_t probe;
    bool busy;                 /* the last step with room gave the host experts (true at first) */
    uint32_t room;             /* the step's room (ebb__clm_xh_room) */
    uint64_t t_start;          /* the step's start (its gate and up rows) */
    _Atomic uint64_t t_gu_end; /* the last gate/up task's end */
    uint32_t n_embd, n_ff, k, n_layer;
    struct ebb_spin_pool *threads;
    const uint8_t *const *src; /* (n_layer, 3) the stacks in the mapped file */
    uint8_t *const *tier;      /* (n_layer) expert e's three records back to back, or NULL */
    const uint64_t *ebytes;    /* (n_layer, 3) one expert of each stack */
    uint32_t *type;            /* (n_layer, 3) the stacks' types */
    bool *ok;                  /* (n_layer) the host has products for all three */
    float *norm;               /* (n_layer, n_embd) the layers' norm vectors, read once */
    bool *norm_read;           /* (n_layer) */
    cl_mem io;                 /* pinned: x, y, w */
    float *io_p;               /* its mapping */
    cl_command_queue q;        /* the queue that mapped it */
    float *x, *w, *xn;         /* the residual row and the router's weights read back; x normed */
    struct ebb_q8_act *xq;     /* xn in 32-blocks (a stack of a 32-block type) */
    struct ebb_block_q8_k *xk; /* xn in 256-blocks (a K-quant stack) */
    float *act;                /* (k, n_ff) SwiGLU outputs */
    void *actq;                /* (k, n_ff) their 8-bit blocks (the down stack's format) */
    size_t actq_es;            /* bytes of actq per expert */
    float *y;                  /* (n_embd) the experts' weighted sum */
    cl_mem yb;                 /* y on the device */
    /* The step under way: its layer, its experts and their router weights, each job's tasks. */
    uint32_t l, n, tasks;
    uint32_t e[64];
    float we[64];
    bool pending;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The 8-bit block a weight type's products take: 256 (K-quants), 32 (the 32-block types), 0
 * where the host has no product for it. */
static uint32_t act_block(uint32_t type)
{
    if (!ebb_quant_get_dot_act(type, true))
        return 0;
    return ebb_quant_q8k_act_supported(type) ? EBB_QK_K : ebb_quant_q8_act_supported(type) ? 32 : 0;
}

ebb_err ebb__clm_xh_open(struct clm *m, const struct ebb_cl_weight *stacks,
                         const uint8_t *const *src, uint8_t *const *tier, const uint64_t *ebytes,
                         struct clm_xhost **out, struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    uint32_t max, threads, spin_us;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t def_threads = online > 1 ? (uint32_t)(online < 32 ? online : 32) : 1;
    /* auto by default on a GPU (H200, Qwen3-30B-A3B through 24 slots: 53.6-58.1 tok/s against
     * 39.0-42.5 with no host experts, docs/PERFORMANCE.md); none where the device is the host's
     * own cores */
    const char *as = getenv("EBB_EXPERT_HOST");
    bool autop = as && *as ? !strcmp(as, "auto") : m->cl->info.is_gpu;
    ebb_err rc =
        autop ? EBB_OK : ebb__clm_env_count("EBB_EXPERT_HOST", 0, 0, hp->n_expert_used, &max, diag);
    if (autop)
        max = hp->n_expert_used;
    if (!rc)
        rc = ebb__clm_env_count("EBB_EXPERT_HOST_THREADS", def_threads, 1, XH_MAX_THREADS, &threads,
                                diag);
    if (!rc)
        rc = ebb__clm_env_count("EBB_EXPERT_HOST_SPIN_US", 2000, 0, 1000000, &spin_us, diag);
    *out = NULL;
    if (rc || !max)
        return rc;
    if (hp->n_expert_used > 64)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "EBB_EXPERT_HOST: %u experts a token",
                            hp->n_expert_used);
    struct clm_xhost *h = calloc(1, sizeof(*h));
    if (!h)
        return EBB_ENOMEM;
    *out = h;
    uint32_t L = hp->n_layer, D = hp->n_embd, F = hp->n_ff_exp, k = hp->n_expert_used;
    h->max = max;
    h->autop = autop;
    h->busy = true;
    h->n_embd = D;
    h->n_ff = F;
    h->k = k;
    h->n_layer = L;
    h->src = src;
    /* the mapped file by default (the page cache, as llama.cpp's host products read it);
     * EBB_EXPERT_HOST_TIER=1 reads the pinned tier where there is one */
    const char *ts = getenv("EBB_EXPERT_HOST_TIER");
    h->tier = ts && !strcmp(ts, "1") ? tier : NULL;
    h->ebytes = ebytes;
    h->type = calloc((size_t)L * 3, sizeof(uint32_t));
    h->ok = calloc(L, sizeof(bool));
    h->norm = calloc((size_t)L * D, sizeof(float));
    h->norm_read = calloc(L, sizeof(bool));
    h->xn = calloc(D, sizeof(float));
    h->xq = calloc(D / 32 + 1, sizeof(*h->xq));
    h->xk = calloc(D / EBB_QK_K + 1, sizeof(*h->xk));
    h->act = calloc((size_t)k * F, sizeof(float));
    h->actq_es = sizeof(struct ebb_q8_act) * (F / 32 + 1);
    if (sizeof(struct ebb_block_q8_k) * (F / EBB_QK_K + 1) > h->actq_es)
        h->actq_es = sizeof(struct ebb_block_q8_k) * (F / EBB_QK_K + 1);
    h->actq = calloc(k, h->actq_es);
    if (!h->type || !h->ok || !h->norm || !h->norm_read || !h->xn || !h->xq || !h->xk || !h->act ||
        !h->actq)
        return EBB_ENOMEM;
    /* the residual row and the router's weights read back every step, and the sum written, in
     * pinned memory: the device copies them straight, not through a bounce buffer */
    cl_int e = CL_SUCCESS;
    size_t io_bytes = sizeof(float) * ((size_t)2 * D + k);
    h->io =
        clCreateBuffer(m->cl->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, io_bytes, NULL, &e);
    if (!e)
        h->io_p = clEnqueueMapBuffer(m->cl->q, h->io, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0,
                                     io_bytes, 0, NULL, NULL, &e);
    if (e)
        return ebb_diag_set(diag, EBB_ENOMEM, "EBB_EXPERT_HOST: pinning %zu bytes: %s", io_bytes,
                            ebb_cl_err_name(e));
    h->q = m->cl->q;
    h->x = h->io_p;
    h->y = h->io_p + D;
    h->w = h->io_p + 2 * (size_t)D;
    uint32_t n_ok = 0;
    for (uint32_t l = 0; l < L; l++) {
        bool ok = true;
        for (uint32_t r = 0; r < 3; r++) {
            const struct ebb_cl_weight *w = stacks + (size_t)l * 3 + r;
            uint32_t t = w->layout.type, b = act_block(t);
            uint32_t n_in = r < 2 ? D : F, rows = r < 2 ? F : D;
            h->type[l * 3 + r] = t;
            /* whole blocks a row, and rows of whole bytes */
            ok = ok && b && n_in % b == 0 && ebytes[l * 3 + r] % rows == 0;
        }
        h->ok[l] = ok;
        n_ok += ok;
    }
    /* the engine thread is one of them (the down rows); the workers poll between the jobs of
     * a decode and sleep once it stops */
    if ((rc = ebb_spin_pool_new(threads, (uint64_t)spin_us * 1000, &h->threads, diag)) ||
        (rc = ebb__clm_alloc(m, sizeof(float) * D, &h->yb, "the host experts' sum", diag)))
        return rc;
    fprintf(stderr,
            "ebb: expert cache: up to %u missed experts a one-token step computed on the host%s "
            "(%u threads; %u of %u layers have host products for their types)\n",
            max, autop ? ", as many as the measured costs of host and link favour" : "", threads,
            n_ok, L);
    return EBB_OK;
}

void ebb__clm_xh_free(struct clm_xhost *h)
{
    if (!h)
        return;
    ebb_spin_pool_free(h->threads);
    if (h->yb)
        clReleaseMemObject(h->yb);
    if (h->io_p) { /* nothing reads or writes it any more: the queue has finished */
        clEnqueueUnmapMemObject(h->q, h->io, h->io_p, 0, NULL, NULL);
        clFinish(h->q);
    }
    if (h->io)
        clReleaseMemObject(h->io);
    free(h->type);
    free(h->ok);
    free(h->norm);
    free(h->norm_read);
    free(h->xn);
    free(h->xq);
    free(h->xk);
    free(h->act);
    free(h->actq);
    free(h);
}

/* A cost's latest samples. */
static void cost_add(struct xh_cost *c, uint64_t v)
{
    c->s[c->n++ % XH_WIN] = v;
}

/* The least of the latest samples: the time an expert takes when nothing gets in the way (a
 * thread that lost its core, a wake-up from sleep only ever add); 0 with none. */
static uint64_t cost_of(const struct xh_cost *c)
{
    uint64_t v = 0;
    for (uint32_t i = 0; i < XH_WIN && i < c->n; i++)
        if (!v || c->s[i] < v)
            v = c->s[i];
    return v;
}

/* auto: the share of `misses` that evens n x host cost against (misses - n) x link cost; -1
 * while either is unmeasured. */
static int share(const struct clm_xhost *h, uint32_t misses)
{
    uint64_t c = cost_of(&h->link), w = cost_of(&h->host);
    if (!c || !w)
        return -1;
    return (int)(((uint64_t)misses * c + (c + w) / 2) / (c + w));
}

uint32_t ebb__clm_xh_room(struct clm_xhost *h, uint32_t l, int nt)
{
    if (!h)
        return 0;
    h->room = nt == 1 && l < h->n_layer && h->ok[l] ? h->max : 0;
    /* auto: none where even a step whose k experts all missed would leave none to the host,
     * so that such steps skip the input's reads too; but one now and then, to measure the host
     * again (its cost moves with other work on its cores). A probe costs the step little: one
     * expert on the host beside k - 1 over the link. */
    bool probe = false;
    if (h->autop && h->room && !share(h, h->k)) {
        probe = ++h->probe % XH_PROBE == 0;
        h->room = probe ? 1 : 0;
    }
    /* workers asleep (after a prefill, or between probes) are woken now, while the device
     * computes the router, so that the step's cost sample holds the host's work rather than
     * their wake-up (H200, 2026-11-30: after a 512-token prefill the samples stayed at 1.97 ms
     * an expert, against 0.05-0.09 ms in runs where the workers were busy, and held auto's share
     * at none for the whole run; the wake-up is the presumed cause). Only for a probe or while
     * the host has work: steps whose experts all hit leave the workers to sleep. */
    if (h->room && (probe || h->busy))
        ebb_spin_pool_wake(h->threads);
    return h->room;
}

uint32_t ebb__clm_xh_pick(struct clm_xhost *h, uint32_t misses)
{
    if (!h || !h->room)
        return 0;
    int n = (int)h->room;
    if (!misses) {
        n = 0;
    } else if (h->autop) {
        n = share(h, misses);
        if (n < 0) /* nothing measured yet on one side: half each */
            n = (int)(misses + 1) / 2;
        if (!n && h->room == 1) /* a probe */
            n = 1;
        if ((uint32_t)n > h->room)
            n = (int)h->room;
    }
    h->busy = n > 0;
    return (uint32_t)n;
}

void ebb__clm_xh_link(struct clm_xhost *h, uint64_t ns_per_expert)
{
    if (h && ns_per_expert)
        cost_add(&h->link, ns_per_expert);
}

void ebb__clm_xh_costs(const struct clm_xhost *h, uint64_t *host_ns, uint64_t *link_ns)
{
    *host_ns = h && h->autop ? cost_of(&h->host) : 0;
    *link_ns = h && h->autop ? cost_of(&h->link) : 0;
}

bool ebb__clm_xh_auto(const struct clm_xhost *h)
{
    return h && h->autop;
}

ebb_err ebb__clm_xh_read(struct clm *m, struct clm_xhost *h, uint32_t l, cl_mem norm,
                         struct ebb_diag *diag)
{
    cl_int e = CL_SUCCESS;
    if (h->pending) { /* a step that failed after its start: its workers end first */
        ebb_spin_pool_wait(h->threads);
        h->pending = false;
    }
    h->n = 0;
    if (!norm)
        return ebb_diag_set(diag, EBB_EINVAL, "EBB_EXPERT_HOST: layer %u has no norm vector", l);
    if (!h->norm_read[l]) {
        e = clEnqueueReadBuffer(m->cl->q, norm, CL_FALSE, 0, sizeof(float) * h->n_embd,
                                h->norm + (size_t)l * h->n_embd, 0, NULL, NULL);
        h->norm_read[l] = !e;
    }
    if (!e)
        e = clEnqueueReadBuffer(m->cl->q, m->x, CL_FALSE, 0, sizeof(float) * h->n_embd, h->x, 0,
                                NULL, NULL);
    if (!e)
        e = clEnqueueReadBuffer(m->cl->q, m->moe.w, CL_FALSE, 0, sizeof(float) * h->k, h->w, 0,
                                NULL, NULL);
    return ebb_cl_check(e, diag, "reading the MoE input for the host's experts");
}

void ebb__clm_xh_add(struct clm_xhost *h, uint32_t e, uint32_t j)
{
    h->e[h->n] = e;
    h->we[h->n] = h->w[j];
    h->n++;
}

/* Expert i's stack r (0 gate, 1 up, 2 down) of layer l: its first byte. */
static const uint8_t *stack(const struct clm_xhost *h, uint32_t l, uint32_t e, uint32_t r)
{
    const uint64_t *eb = h->ebytes + (size_t)l * 3;
    if (h->tier) {
        const uint8_t *p = h->tier[l] + (uint64_t)e * (eb[0] + eb[1] + eb[2]);
        for (uint32_t q = 0; q < r; q++)
            p += eb[q];
        return p;
    }
    return h->src[(size_t)l * 3 + r] + (uint64_t)e * eb[r];
}

/* The input in the block format of a type's products. */
static const void *input_for(const struct clm_xhost *h, uint32_t type)
{
    return ebb_quant_q8k_act_supported(type) ? (const void *)h->xk : (const void *)h->xq;
}

/* Rows [a, b) of n split into `tasks` parts: part i's. */
static void split(uint64_t n, uint32_t i, uint32_t tasks, uint64_t *a, uint64_t *b)
{
    *a = n * i / tasks;
    *b = n * (i + 1) / tasks;
}

/* Task i of the first job: its share of the host experts' gate and up rows (expert j's row f is
 * row j x n_ff + f of all), each SiLU(gate) x up into act. */
static void gate_up(void *ctx, uint32_t i)
{
    struct clm_xhost *h = ctx;
    const uint32_t l = h->l, D = h->n_embd, F = h->n_ff;
    const uint32_t *ty = h->type + (size_t)l * 3;
    const uint64_t *eb = h->ebytes + (size_t)l * 3, rb_g = eb[0] / F, rb_u = eb[1] / F;
    ebb_quant_dot_act_fn dg = ebb_quant_get_dot_act(ty[0], true);
    ebb_quant_dot_act_fn du = ebb_quant_get_dot_act(ty[1], true);
    const void *xg = input_for(h, ty[0]), *xu = input_for(h, ty[1]);
    uint64_t a, b;
    split((uint64_t)h->n * F, i, h->tasks, &a, &b);
    for (uint64_t r = a; r < b;) { /* expert by expert: its rows' start found once */
        uint32_t j = (uint32_t)(r / F), f = (uint32_t)(r % F);
        uint64_t end = (uint64_t)(j + 1) * F < b ? (uint64_t)(j + 1) * F : b;
        const uint8_t *g = stack(h, l, h->e[j], 0), *u = stack(h, l, h->e[j], 1);
        for (; r < end; r++, f++) {
            float x = dg(g + f * rb_g, xg, D), y = du(u + f * rb_u, xu, D);
            h->act[(size_t)j * F + f] = x / (1.0f + expf(-x)) * y;
        }
    }
    uint64_t t = now_ns(), prev = atomic_load(&h->t_gu_end);
    while (t > prev && !atomic_compare_exchange_weak(&h->t_gu_end, &prev, t))
        ;
}

/* Task i of the second job: its share of the output elements, each the host experts' down rows
 * against their SwiGLU blocks, weighted and summed in the experts' order. */
static void down(void *ctx, uint32_t i)
{
    struct clm_xhost *h = ctx;
    const uint32_t l = h->l, D = h->n_embd, F = h->n_ff;
    const uint64_t rb_d = h->ebytes[(size_t)l * 3 + 2] / D;
    ebb_quant_dot_act_fn dd = ebb_quant_get_dot_act(h->type[(size_t)l * 3 + 2], true);
    const uint8_t *dn[64];
    for (uint32_t j = 0; j < h->n; j++)
        dn[j] = stack(h, l, h->e[j], 2);
    uint64_t a, b;
    split(D, i, h->tasks, &a, &b);
    for (uint64_t d = a; d < b; d++) {
        float y = 0.0f;
        for (uint32_t j = 0; j < h->n; j++)
            y += h->we[j] * dd(dn[j] + d * rb_d, (const uint8_t *)h->actq + j * h->actq_es, F);
        h->y[d] = y;
    }
}

/* Tasks for a job of `rows` rows: XH_TASKS a thread (the owner too when it takes part), so that
 * a thread that started late or lost its core holds up the job by a small share, none of fewer
 * than XH_ROWS rows. */
static uint32_t tasks_for(const struct clm_xhost *h, uint64_t rows, bool owner)
{
    uint32_t t = ebb_spin_pool_threads(h->threads);
    t = (owner || t < 2 ? t : t - 1) * XH_TASKS;
    uint64_t most = rows / XH_ROWS ? rows / XH_ROWS : 1;
    return t > most ? (uint32_t)most : t;
}

void ebb__clm_xh_start(struct clm_xhost *h, uint32_t l, const struct ebb__hparams *hp)
{
    const uint32_t D = h->n_embd;
    const float *nw = h->norm + (size_t)l * D;
    double ss = 0;
    for (uint32_t i = 0; i < D; i++)
        ss += (double)h->x[i] * h->x[i];
    float sc = 1.0f / sqrtf((float)(ss / D) + hp->rms_eps);
    for (uint32_t i = 0; i < D; i++)
        h->xn[i] = h->x[i] * sc * nw[i];
    const uint32_t *ty = h->type + (size_t)l * 3;
    if (ebb_quant_q8k_act_supported(ty[0]) || ebb_quant_q8k_act_supported(ty[1]))
        ebb_quant_q8k_act_row_fast(h->xn, D, h->xk);
    if (ebb_quant_q8_act_supported(ty[0]) || ebb_quant_q8_act_supported(ty[1]))
        ebb_quant_q8_act_row_fast(h->xn, D, h->xq);
    h->l = l;
    h->tasks = tasks_for(h, (uint64_t)h->n * h->n_ff, false);
    h->pending = true;
    h->t_start = now_ns();
    atomic_store(&h->t_gu_end, 0);
    ebb_spin_pool_start(h->threads, h->tasks, gate_up, h);
}

bool ebb__clm_xh_pending(const struct clm_xhost *h)
{
    return h && h->pending;
}

ebb_err ebb__clm_xh_finish(struct clm *m, struct clm_xhost *h, uint64_t *wait_ns,
                           struct ebb_diag *diag)
{
    const uint32_t D = h->n_embd;
    /* the device starts on what was enqueued while the host works */
    ebb_err rc = ebb_cl_check(clFlush(m->cl->q), diag, "flushing the compute queue");
    uint64_t t0 = now_ns();
    ebb_spin_pool_wait(h->threads);
    h->pending = false;
    if (rc) {
        *wait_ns = now_ns() - t0;
        return rc;
    }
    /* the SwiGLU of each expert in the down stack's 8-bit blocks, then the down rows */
    const uint32_t F = h->n_ff, td = h->type[(size_t)h->l * 3 + 2];
    for (uint32_t j = 0; j < h->n; j++) {
        uint8_t *aq = (uint8_t *)h->actq + j * h->actq_es;
        if (ebb_quant_q8k_act_supported(td))
            ebb_quant_q8k_act_row_fast(h->act + (size_t)j * F, F, (struct ebb_block_q8_k *)aq);
        else
            ebb_quant_q8_act_row_fast(h->act + (size_t)j * F, F, (struct ebb_q8_act *)aq);
    }
    uint64_t t1 = now_ns();
    h->tasks = tasks_for(h, D, true);
    ebb_spin_pool_run(h->threads, h->tasks, down, h);
    uint64_t t2 = now_ns(), gu_end = atomic_load(&h->t_gu_end);
    *wait_ns = t2 - t0;
    /* the host's cost of an expert: its gate/up job (start to the last task's end) and the rest
     * (the SwiGLU blocks and the down job) */
    if (h->n && gu_end > h->t_start)
        cost_add(&h->host, (gu_end - h->t_start + t2 - t1) / h->n);
    /* y stays untouched until this write has run: the next step's reads block on the same
     * in-order queue before the host writes y again */
    cl_int e =
        clEnqueueWriteBuffer(m->cl->q, h->yb, CL_FALSE, 0, sizeof(float) * D, h->y, 0, NULL, NULL);
    if (e)
        return ebb_cl_check(e, diag, "writing the host experts' sum");
    int ld = (int)D;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(m->x), EBB_CL_ARG(ld), EBB_CL_ARG(h->yb)};
    size_t g[2] = {D, 1};
    rc = ebb_cl_set_args(m->k_bias, 0, a, 3, diag);
    return rc ? rc : ebb_cl_run(m->cl, m->k_bias, 2, g, NULL, diag);
}
