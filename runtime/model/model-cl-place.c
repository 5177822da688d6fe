/* Weight placement for the OpenCL forward pass: each weight once at load, in the layout the
 * device profile picks (zero-copy over the mmapped GGUF on host-unified CPUs, split planes on
 * GPUs), with its kernels' program; norms as f32; the KV cache. The streamer (model-cl-stream.c)
 * places and drops whole layers through ebb__clm_place_layer / ebb__clm_drop_layer. */
#include "model-cl-int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "quant/quant.h"

ebb_err ebb__clm_env_count(const char *name, uint32_t def, uint32_t lo, uint32_t hi, uint32_t *out,
                           struct ebb_diag *diag)
{
    const char *env = getenv(name);
    *out = def;
    if (!env || !*env)
        return EBB_OK;
    char *end = NULL;
    unsigned long v = strtoul(env, &end, 10);
    if (end == env || *end || *env == '-' || v < lo || v > hi)
        return ebb_diag_set(diag, EBB_EINVAL, "%s='%.40s': expected a number from %u to %u", name,
                            env, lo, hi);
    *out = (uint32_t)v;
    return EBB_OK;
}

ebb_err ebb__clm_alloc(struct clm *m, size_t bytes, cl_mem *out, const char *what,
                       struct ebb_diag *diag)
{
    if (bytes > m->cl->info.max_alloc)
        return ebb_diag_set(diag, EBB_ENOMEM,
                            "%s needs %zu bytes in one buffer; the device allows %llu (lower "
                            "--ctx)",
                            what, bytes, (unsigned long long)m->cl->info.max_alloc);
    cl_int e = CL_SUCCESS;
    *out = clCreateBuffer(m->cl->ctx, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &e);
    if (e)
        return ebb_diag_set(diag, EBB_ENOMEM, "allocating %s (%zu bytes): %s", what, bytes,
                            ebb_cl_err_name(e));
    return EBB_OK;
}

bool ebb__clm_expert_group(const struct clm *m, uint32_t gi)
{
    for (uint32_t si = 0; si < m->plan.n_steps; si++) {
        const struct clm_step *s = &m->plan.steps[si];
        if (s->kind == CLM_MOE && gi > s->group && gi <= s->group + 3u)
            return true;
    }
    return false;
}

/* The most 32-blocks of a raw weight of type t among the layers' weights (placed, or as
 * streamed) whose products are weight products (not the expert stacks: moe.cl's). */
static uint64_t layer_blocks_max(const struct clm *m, uint32_t t)
{
    uint64_t nb = 0;
    for (uint32_t l = 0; (m->layers || m->tmpl) && l < m->hp.n_layer; l++)
        for (uint32_t gi = 0; gi < MAX_GROUPS; gi++)
            for (int i = 0; i < GROUP_MAX && !ebb__clm_expert_group(m, gi); i++) {
                const struct ebb_cl_weight *w[2] = {m->layers ? &m->layers[l].w[gi][i] : NULL,
                                                    m->tmpl ? &m->tmpl[l].w[gi][i] : NULL};
                for (int k = 0; k < 2; k++)
                    if (w[k] && w[k]->layout.type == t && w[k]->layout.order == EBB_CL_ORDER_RAW &&
                        (uint64_t)w[k]->n_out * (w[k]->n_in / 32) > nb)
                        nb = (uint64_t)w[k]->n_out * (w[k]->n_in / 32);
            }
    return nb;
}

uint64_t ebb__clm_ksplit_bytes(const struct clm *m, uint64_t *k4, uint64_t *k8)
{
    const struct ebb_cl_tuning *tu = &m->tu;
    bool mq = tu->mm_mma && tu->mmq && tu->mms_max && tu->mmq_stage;
    uint64_t b4 = mq && tu->k4split ? layer_blocks_max(m, EBB_GGML_Q4_K) : 0;
    uint64_t b6 = mq && tu->k8split ? layer_blocks_max(m, EBB_GGML_Q6_K) : 0;
    uint64_t b5 = mq && tu->k8split ? layer_blocks_max(m, EBB_GGML_Q5_K) : 0;
    b6 = b6 > b5 ? b6 : b5;
    if (k4)
        *k4 = b4;
    if (k8)
        *k8 = b6;
    return 24 * b4 + 40 * b6;
}

ebb_err ebb__clm_find(const struct ebb_gguf *g, const char *name, uint64_t n_in, uint64_t n_out,
                      const struct ebb_gguf_tensor **out, struct ebb_diag *diag)
{
    const struct ebb_gguf_tensor *t = ebb_gguf_find_tensor(g, name);
    if (!t)
        return ebb_diag_set(diag, EBB_EFORMAT, "tensor '%s' is missing", name);
    /* A stack of matrices (experts) is placed as one of all their rows. */
    if (t->ne[0] != n_in || t->ne[1] * t->ne[2] != n_out || t->ne[3] != 1)
        return ebb_diag_set(diag, EBB_EFORMAT,
                            "tensor '%s' has shape [%llu, %llu], expected [%llu, %llu]", name,
                            (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                            (unsigned long long)n_in, (unsigned long long)n_out);
    *out = t;
    return EBB_OK;
}

/* A norm vector, converted to f32 on the host and copied. */
/* Dequantizes the first n values of a small tensor (a norm, a bias) read in place from the
 * mapped file. The fault asks the kernel for this tensor's pages only (MADV_RANDOM for the time
 * of the read): the default read-around brings in read_ahead_kb around each fault (8 MiB on some
 * disks), so the norms of a layer that is streamed would otherwise leave ~14 MiB of its weights
 * in the page cache, charged to a cgroup's limit, for reads that go around the cache. */
static ebb_err dequant_small(const struct ebb_gguf_tensor *t, float *f, uint32_t n)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)t->data & ~(pg - 1);
    size_t len = (uintptr_t)t->data + t->size - a;
    bool advised = t->size && madvise((void *)a, len, MADV_RANDOM) == 0;
    ebb_err rc = ebb_quant_dequantize_row(t->type, t->data, f, n);
    if (advised)
        madvise((void *)a, len, MADV_NORMAL);
    return rc;
}

static ebb_err place_norm(struct clm *m, const struct ebb_gguf *g, const char *name, cl_mem *out,
                          struct ebb_diag *diag)
{
    const struct ebb_gguf_tensor *t;
    ebb_err rc = ebb__clm_find(g, name, m->hp.n_embd, 1, &t, diag);
    if (rc)
        return rc;
    float *f = malloc(sizeof(float) * m->hp.n_embd);
    if (!f)
        return EBB_ENOMEM;
    if ((rc = dequant_small(t, f, m->hp.n_embd))) {
        rc = ebb_diag_set(diag, rc, "tensor '%s': unsupported type %u", name, t->type);
    } else {
        cl_int e = CL_SUCCESS;
        *out = clCreateBuffer(m->cl->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                              sizeof(float) * m->hp.n_embd, f, &e);
        rc = ebb_cl_check(e, diag, "clCreateBuffer(norm)");
    }
    free(f);
    return rc;
}

ebb_err ebb__clm_prog_for(struct clm *m, const struct ebb_cl_layout *l, struct ebb_cl_wprog **out,
                          struct ebb_diag *diag)
{
    for (uint32_t i = 0; i < m->n_progs; i++) {
        const struct ebb_cl_layout *p = &m->progs[i].layout;
        if (p->type == l->type && p->storage == l->storage && p->order == l->order) {
            *out = &m->progs[i];
            return EBB_OK;
        }
    }
    if (m->n_progs == MAX_PROGS)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "too many weight layouts in one model");
    ebb_err rc = ebb_cl_wprog_build(m->cl, l, &m->tu, &m->progs[m->n_progs], diag);
    if (rc)
        return rc;
    *out = &m->progs[m->n_progs++];
    return EBB_OK;
}

/* Places the weights named names[0..n) (same n_in, stacked along O). Fused into out[0] when
 * they share a type and either the layout is rearranged anyway or they lie back to back in the
 * file (zero-copy); otherwise one weight each. Returns the number of weights in *n_out. */
/* The layout for a weight of t's type: measured once per type per load (ebb_cl_layout_tune,
 * itself cached on disk) with t as the sample, unless it cannot hold n_elements. */
static struct ebb_cl_layout pick(struct clm *m, const struct ebb_gguf_tensor *t,
                                 uint64_t n_elements)
{
    uint32_t ty = t->type;
    if (ty < MAX_TYPES && !m->have_layout[ty]) {
        m->layout[ty] =
            ebb_cl_layout_tune(m->cl, &m->tu, ty, (uint32_t)t->ne[0], t->data, (uint32_t)t->ne[1]);
        m->have_layout[ty] = true;
    }
    if (ty < MAX_TYPES && ebb_cl_layout_ok(&m->cl->info, &m->layout[ty], n_elements))
        return m->layout[ty];
    return ebb_cl_layout_choose(&m->cl->info, ty, n_elements);
}

/* Prefixes diag's message with the tensor name. */
static ebb_err prefix(struct ebb_diag *diag, ebb_err rc, const char *name)
{
    if (!diag)
        return rc;
    char tmp[sizeof(diag->msg)];
    memcpy(tmp, diag->msg, sizeof(tmp));
    return ebb_diag_set(diag, rc, "placing %s: %.400s", name, tmp);
}

/* A tensor now copied to a device with memory of its own: its mmapped file pages leave the
 * process (they are clean; a later growth of the streamer's plan faults them in again), so the
 * footprint does not hold the model twice. Unified-memory devices read weights in place. */
static void drop_file_pages(const struct clm *m, const struct ebb_gguf_tensor *t)
{
    if (!m->cl->info.host_unified && !m->cl->info.is_cpu)
        ebb__clm_drop_pages(t);
}

void ebb__clm_drop_pages(const struct ebb_gguf_tensor *t)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)t->data + pg - 1) & ~(pg - 1);
    uintptr_t e = ((uintptr_t)t->data + (uintptr_t)t->size) & ~(pg - 1);
    if (e > a)
        madvise((void *)a, e - a, MADV_DONTNEED);
}

static ebb_err place_group(struct clm *m, const struct ebb_gguf *g, const char *const *names,
                           const uint32_t *rows, uint32_t n, uint32_t n_in,
                           struct ebb_cl_weight *out, uint32_t *n_out, struct ebb_diag *diag)
{
    const struct ebb_gguf_tensor *t[GROUP_MAX] = {NULL};
    struct ebb_cl_wsrc src[GROUP_MAX];
    ebb_err rc;
    for (uint32_t i = 0; i < n; i++) {
        if ((rc = ebb__clm_find(g, names[i], n_in, rows[i], &t[i], diag)))
            return rc;
        src[i].data = t[i]->data;
        src[i].n_out = rows[i];
    }
    /* Runs of tensors of one type (q, k and v of a Q4_K_M file whose v is Q6_K: q and k) are
     * stacked along their outputs into one weight, a product a run; a raw layout mapped from
     * the file only where the run's bytes follow each other there. */
    *n_out = 0;
    struct ebb_cl_wprog *p = NULL;
    for (uint32_t i = 0, e; i < n; i = e) {
        bool contiguous = true;
        uint64_t run = (uint64_t)rows[i] * n_in;
        for (e = i + 1; e < n && t[e]->type == t[i]->type; e++) {
            contiguous = contiguous && (const uint8_t *)t[e]->data ==
                                           (const uint8_t *)t[e - 1]->data + t[e - 1]->size;
            run += (uint64_t)rows[e] * n_in;
        }
        struct ebb_cl_layout l = pick(m, t[i], run);
        if (e > i + 1 && l.order == EBB_CL_ORDER_RAW && m->map.buf && !contiguous)
            e = i + 1, l = pick(m, t[i], (uint64_t)rows[i] * n_in);
        struct ebb_cl_weight *w = &out[(*n_out)++];
        if ((rc = ebb_cl_weight_new(m->cl, &l, n_in, &src[i], e - i, &m->map, w, diag)))
            return prefix(diag, rc, names[i]);
        if (!w->zero_copy)
            for (uint32_t k = i; k < e; k++)
                drop_file_pages(m, t[k]);
        if ((rc = ebb__clm_prog_for(m, &l, &p, diag)))
            return rc;
    }
    return EBB_OK;
}

/* Weight group gi of layer l (the plan's tensors stacked along their outputs). */
static ebb_err place_plan_group(struct clm *m, const struct ebb_gguf *g, uint32_t gi, uint32_t l,
                                struct ebb_diag *diag)
{
    const struct clm_group *G = &m->plan.groups[gi];
    char nm[GROUP_MAX][96];
    const char *names[GROUP_MAX];
    uint32_t rows[GROUP_MAX];
    for (uint32_t i = 0; i < G->n; i++) {
        ebb__arch_tensor_name(m->a, (uint32_t)G->t[i], l, nm[i], sizeof(nm[i]));
        names[i] = nm[i];
        const struct ebb__tensor *d = &m->a->tensors[G->t[i]];
        rows[i] = (uint32_t)(ebb__arch_dim(&m->hp, d->ne1) * ebb__arch_dim(&m->hp, d->ne2));
    }
    uint32_t n_in = (uint32_t)ebb__arch_dim(&m->hp, m->a->tensors[G->t[0]].ne0);
    struct layer *L = &m->layers[l];
    return place_group(m, g, names, rows, G->n, n_in, L->w[gi], &L->n_w[gi], diag);
}

/* The weight matrices of decoder layer l (norms and KV cache are placed apart). */
ebb_err ebb__clm_place_layer(struct clm *m, const struct ebb_gguf *g, uint32_t l,
                             struct ebb_diag *diag)
{
    for (uint32_t gi = 0; gi < m->plan.n_groups; gi++) {
        if (m->xc_g0 && gi >= m->xc_g0 && gi < m->xc_g0 + 3)
            continue; /* the expert cache's slots hold them */
        ebb_err rc = place_plan_group(m, g, gi, l, diag);
        if (rc)
            return rc;
    }
    return EBB_OK;
}

/* Releases the weight matrices of layer l (it becomes streamed). */
void ebb__clm_drop_layer(struct clm *m, uint32_t l)
{
    struct layer *L = &m->layers[l];
    for (uint32_t gi = 0; gi < MAX_GROUPS; gi++) {
        for (int i = 0; i < GROUP_MAX; i++)
            ebb_cl_weight_fini(&L->w[gi][i]);
        L->n_w[gi] = 0;
    }
}

/* A norm vector of the plan (tensor t of layer l). */
static ebb_err place_plan_norm(struct clm *m, const struct ebb_gguf *g, int16_t t, uint32_t l,
                               cl_mem *out, struct ebb_diag *diag)
{
    char nm[96];
    ebb__arch_tensor_name(m->a, (uint32_t)t, l, nm, sizeof(nm));
    return place_norm(m, g, nm, out, diag);
}

/* Tensors ts[0..n) of layer l (vectors of the family's table) dequantized side by side into
 * one f32 device vector of `len` floats; an optional tensor the file lacks leaves zeros. */
static ebb_err place_vecs(struct clm *m, const struct ebb_gguf *g, const int16_t *ts, uint32_t n,
                          uint32_t l, uint32_t len, cl_mem *out, struct ebb_diag *diag)
{
    float *f = calloc(len, sizeof(float));
    if (!f)
        return EBB_ENOMEM;
    ebb_err rc = EBB_OK;
    uint64_t off = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        const struct ebb_gguf_tensor *t = NULL;
        uint64_t w = ebb__arch_dim(&m->hp, m->a->tensors[ts[i]].ne0);
        if (off + w > len) {
            rc = ebb_diag_set(diag, EBB_EINVAL, "vectors wider than %u", len);
            break;
        }
        rc = ebb__arch_tensor(m->a, &m->hp, g, (uint32_t)ts[i], l, &t, diag);
        if (!rc && t && (rc = dequant_small(t, f + off, (uint32_t)w)))
            rc = ebb_diag_set(diag, rc, "tensor '%s': unsupported type %u", t->name, t->type);
        off += w;
    }
    if (!rc) {
        cl_int e = CL_SUCCESS;
        *out = clCreateBuffer(m->cl->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                              sizeof(float) * len, f, &e);
        rc = ebb_cl_check(e, diag, "clCreateBuffer(vector)");
    }
    free(f);
    return rc;
}

/* A layer's bias and q/k norm vectors, where the plan has those steps. */
static ebb_err place_layer_vecs(struct clm *m, const struct ebb_gguf *g, uint32_t l,
                                struct layer *L, struct ebb_diag *diag)
{
    const struct clm_plan *p = &m->plan;
    ebb_err rc = EBB_OK;
    if (p->has_bias)
        rc = place_vecs(m, g, p->bias, 3, l, m->n_qkv, &L->bias, diag);
    if (!rc && p->has_qk_norm &&
        !(rc = place_vecs(m, g, &p->qk_norm[0], 1, l, m->hp.head_dim, &L->qn, diag)))
        rc = place_vecs(m, g, &p->qk_norm[1], 1, l, m->hp.head_dim, &L->kn, diag);
    return rc;
}

/* The embeddings and the output head: the input's get_rows tensor, and the output's matrix,
 * which is the same tensor when the family's fallback ties them. A stage of a layer split
 * places the embeddings where it is the first or its head reads them (tied), the final norm
 * and the head where it is the last. */
static ebb_err place_ends(struct clm *m, const struct ebb_gguf *g, struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    const struct ebb_gguf_tensor *te, *to;
    ebb_err rc;
    uint32_t one, vr[] = {hp->n_vocab};
    if ((rc = ebb__arch_tensor(m->a, hp, g, (uint32_t)m->plan.embd, 0, &te, diag)) ||
        (rc = ebb__arch_tensor(m->a, hp, g, (uint32_t)m->plan.output, 0, &to, diag)))
        return rc;
    if (!te || !to)
        return ebb_diag_set(diag, EBB_EFORMAT, "no token embeddings or output head");
    m->tied = te == to;
    m->embd_scale = m->plan.embd_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    const char *en[] = {te->name}, *on[] = {to->name};
    bool first = m->l0 == 0, last = m->l1 == hp->n_layer;
    if ((first || (last && m->tied)) &&
        (rc = place_group(m, g, en, vr, 1, hp->n_embd, &m->embd, &one, diag)))
        return rc;
    if (!last)
        return EBB_OK;
    if ((rc = place_plan_norm(m, g, m->plan.out_norm, 0, &m->output_norm, diag)))
        return rc;
    if (!m->tied && (rc = place_group(m, g, on, vr, 1, hp->n_embd, &m->output, &one, diag)))
        return rc;
    return EBB_OK;
}

/* Llama 3.1's rope frequency divisors (ebb__arch_rope_freqs), when they are not all 1. */
static ebb_err place_rope_freqs(struct clm *m, const struct ebb_gguf *g, struct ebb_diag *diag)
{
    float ff[512]; /* n_rot <= head_dim <= 1024 */
    bool scaled = false;
    ebb_err rc = ebb__arch_rope_freqs(m->a, &m->hp, g, ff, &scaled, diag);
    if (rc || !scaled)
        return rc;
    cl_int e = CL_SUCCESS;
    m->rope_ff = clCreateBuffer(m->cl->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                sizeof(float) * (m->hp.n_rot / 2), ff, &e);
    return ebb_cl_check(e, diag, "clCreateBuffer(rope_freqs)");
}

/* Layer l's window and the positions its KV cache holds: the whole context, or for a windowed
 * layer KV_RING positions (the window and one chunk of rows, so that a chunk's queries still
 * find the window behind its first row after its own keys are stored, and a rollback of up to
 * m->n_batch positions finds the keys it needs) when that is shorter. */
static void kv_layout(struct clm *m, uint32_t l, struct layer *L)
{
    L->win = ebb__arch_window(&m->hp, l);
    L->kv_len = m->n_ctx;
    if (L->win && m->kv_ring && (uint64_t)L->win + m->n_batch < m->n_ctx)
        L->kv_len = L->win + m->n_batch;
}

ebb_err ebb__clm_place_weights(struct clm *m, const struct ebb_gguf *g, struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    ebb_err rc;
    if ((rc = place_ends(m, g, diag)) || (rc = place_rope_freqs(m, g, diag)))
        return rc;
    m->layers = calloc(hp->n_layer, sizeof(*m->layers));
    if (!m->layers)
        return EBB_ENOMEM;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        struct layer *L = &m->layers[l];
        kv_layout(m, l, L); /* every layer's, so that every stage of a split sees the rings */
        if (l < m->l0 || l >= m->l1)
            continue; /* another stage's layer */
        size_t kv_bytes = (size_t)m->n_seq * hp->n_head_kv * L->kv_len * ebb__clm_kv_row(m);
        for (uint32_t k = 0; k < m->plan.n_norms; k++)
            if ((rc = place_plan_norm(m, g, m->plan.norms[k], l, &L->norm[k], diag)))
                return rc;
        if ((rc = place_layer_vecs(m, g, l, L, diag)))
            return rc;
        /* Streamed layers keep only their norms and KV cache on the device. */
        if ((!STREAMING(m) || ebb_stream_is_resident(m->st, l)) &&
            (rc = ebb__clm_place_layer(m, g, l, diag)))
            return rc;
        if (l >= m->first_host)
            continue; /* a host layer: its cache is the host's (ebb__ref_host_new) */
        if ((rc = ebb__clm_alloc(m, kv_bytes, &L->kc, "the K cache of a layer", diag)) ||
            (rc = ebb__clm_alloc(m, kv_bytes, &L->vc, "the V cache of a layer", diag)))
            return rc;
    }
    return EBB_OK;
}

/* Bytes one decoded token reads of layer l's weight group gi: every weight of the group, an
 * expert stack (a CLM_MOE step's groups after its router) only for the experts used. */
static uint64_t group_bytes(const struct clm *m, const struct layer *L, uint32_t gi)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < L->n_w[gi]; i++)
        b += ebb_cl_weight_read_bytes(&L->w[gi][i]);
    return ebb__clm_expert_group(m, gi) && m->hp.n_expert ? b / m->hp.n_expert * m->hp.n_expert_used
                                                          : b;
}

void ebb__clm_decode_bytes(void *ctx, uint32_t depth, struct ebb_model_decode_bytes *out)
{
    const struct clm *m0 = ctx, *m = m0;
    const struct ebb__hparams *hp = &m->hp;
    const uint64_t f = sizeof(float);
    uint64_t w = ebb_cl_weight_read_bytes(&m->embd) / hp->n_vocab; /* the token's row */
    while (m->next) /* a layer split: the head is the last stage's */
        m = m->next;
    w += f * hp->n_embd + ebb_cl_weight_read_bytes(m->tied ? &m->embd : &m->output);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        for (m = m0; m->next && l >= m->l1;) /* the stage that holds layer l */
            m = m->next;
        const struct layer *L = &m->layers[l];
        if (!L->n_w[0] && m->tmpl) /* streamed: the weights as the streamer hands them over */
            L = &m->tmpl[l];
        for (uint32_t gi = 0; gi < m->plan.n_groups; gi++)
            w += group_bytes(m, L, gi);
        w += f * hp->n_embd * m->plan.n_norms;
        w += m->plan.has_bias ? f * m->n_qkv : 0;
        w += m->plan.has_qk_norm ? 2 * f * hp->head_dim : 0;
    }
    out->weights = w + m0->xc_token_bytes; /* the expert cache's, from its slots */
    /* keys and values of depth + 1 positions, fp16 or Q8_0 blocks, every layer */
    out->kv =
        (uint64_t)hp->n_layer * 2 * hp->n_head_kv * ebb__clm_kv_row(m) * ((uint64_t)depth + 1);
}

uint32_t ebb__clm_long_rows(const struct clm *m)
{
    const char *lr = getenv("EBB_STREAM_LONG_ROWS");
    long want = lr && *lr ? strtol(lr, NULL, 10) : LONG_ROWS;
    want = want < 0 ? 0 : want > LONG_ROWS_MAX ? LONG_ROWS_MAX : want;
    uint64_t ctx_rows = ((uint64_t)m->n_ctx + m->n_batch - 1) / m->n_batch * m->n_batch;
    uint32_t rows =
        (uint32_t)((uint64_t)want < ctx_rows ? (uint64_t)want : ctx_rows) / m->n_batch * m->n_batch;
    return rows <= m->n_batch ? 0 : rows;
}
