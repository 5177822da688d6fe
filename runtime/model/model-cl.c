/* The llama forward pass on the OpenCL engine. Weights are placed once at load in the layout
 * the device profile picks (zero-copy over the mmapped GGUF on host-unified CPUs, split planes
 * on GPUs), the KV cache and every scratch buffer are allocated once, and an evaluation enqueues
 * the whole pass without waiting until the requested outputs are read back. */
#include "model-cl-int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "quant/quant.h"

static ebb_err clm_eval(void *ctx, uint32_t seq, const int32_t *tokens, uint32_t n, uint32_t pos,
                        struct ebb_model_out *out, struct ebb_diag *diag);

static void release(cl_mem *m)
{
    if (*m)
        clReleaseMemObject(*m);
    *m = NULL;
}

/* meson -Dstreamer=false builds the plain path alone (EBB_STREAMER 0): every streamer branch
 * below is then compiled out, which is the baseline the streamer's cost at 100% residency is
 * measured against (docs/PERFORMANCE.md). */
#ifndef EBB_STREAMER
#define EBB_STREAMER 1
#endif
#if EBB_STREAMER
#define STREAMING(m) ((m)->st != NULL)
#else
#define STREAMING(m) false
#endif

static ebb_err stream_open(struct clm *m, const struct ebb_gguf *g,
                           const struct ebb_model_params *p, struct ebb_diag *diag)
{
#if EBB_STREAMER
    return ebb__clm_stream_open(m, g, p, diag);
#else
    (void)m, (void)g;
    if (p->memory_budget || p->memory_budget_auto || p->residency_forced || p->residency > 0 ||
        p->pack_path)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "this ebb was built without the layer streamer (-Dstreamer=false): "
                            "--memory-budget, --residency and --pack are not available");
    return EBB_OK;
#endif
}

static void clm_free(void *ctx)
{
    struct clm *m = ctx;
    if (!m)
        return;
    if (m->sc && m->st)
        ebb_stream_cl_finish(m->sc, m->st, NULL);
    ebb_stream_free(m->st); /* stops the I/O thread before its slots go */
    ebb_stream_cl_free(m->sc);
    free(m->tmpl);
    if (m->snap_init)
        pthread_mutex_destroy(&m->snap_mu);
    if (m->layers) {
        for (uint32_t l = 0; l < m->hp.n_layer; l++) {
            struct layer *L = &m->layers[l];
            release(&L->attn_norm);
            release(&L->ffn_norm);
            for (int i = 0; i < 3; i++)
                ebb_cl_weight_fini(&L->qkv[i]);
            ebb_cl_weight_fini(&L->wo);
            for (int i = 0; i < 2; i++)
                ebb_cl_weight_fini(&L->gu[i]);
            ebb_cl_weight_fini(&L->down);
            release(&L->kc);
            release(&L->vc);
        }
        free(m->layers);
    }
    ebb_cl_weight_fini(&m->embd);
    ebb_cl_weight_fini(&m->output);
    release(&m->output_norm);
    cl_mem *scratch[] = {&m->ids,    &m->x,  &m->h,   &m->qkv, &m->att, &m->gu,  &m->ff, &m->hl,
                         &m->logits, &m->po, &m->pml, &m->tpv, &m->tpi, &m->tov, &m->toi};
    for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++)
        release(scratch[i]);
    cl_kernel ks[] = {m->k_norm,     m->k_rope,   m->k_attn_part, m->k_attn_red,
                      m->k_attn_pre, m->k_swiglu, m->k_topk1,     m->k_topk2};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
        if (ks[i])
            clReleaseKernel(ks[i]);
    if (m->ops)
        clReleaseProgram(m->ops);
    for (uint32_t i = 0; i < m->n_progs; i++)
        ebb_cl_wprog_fini(&m->progs[i]);
    release(&m->map.buf);
    free(m->host_logits);
    ebb_cl_close(m->cl);
    free(m);
}

static ebb_err alloc(struct clm *m, size_t bytes, cl_mem *out, const char *what,
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

ebb_err ebb__clm_find(const struct ebb_gguf *g, const char *name, uint64_t n_in, uint64_t n_out,
                      const struct ebb_gguf_tensor **out, struct ebb_diag *diag)
{
    const struct ebb_gguf_tensor *t = ebb_gguf_find_tensor(g, name);
    if (!t)
        return ebb_diag_set(diag, EBB_EFORMAT, "tensor '%s' is missing", name);
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1)
        return ebb_diag_set(diag, EBB_EFORMAT,
                            "tensor '%s' has shape [%llu, %llu], expected [%llu, %llu]", name,
                            (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                            (unsigned long long)n_in, (unsigned long long)n_out);
    *out = t;
    return EBB_OK;
}

/* A norm vector, converted to f32 on the host and copied. */
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
    if ((rc = ebb_quant_dequantize_row(t->type, t->data, f, m->hp.n_embd))) {
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

static ebb_err prog_for(struct clm *m, const struct ebb_cl_layout *l, struct ebb_cl_wprog **out,
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
    const struct ebb_gguf_tensor *t[3];
    struct ebb_cl_wsrc src[3];
    uint64_t total = 0;
    ebb_err rc;
    for (uint32_t i = 0; i < n; i++) {
        if ((rc = ebb__clm_find(g, names[i], n_in, rows[i], &t[i], diag)))
            return rc;
        src[i].data = t[i]->data;
        src[i].n_out = rows[i];
        total += (uint64_t)rows[i] * n_in;
    }
    bool same = true;
    for (uint32_t i = 1; i < n; i++)
        same = same && t[i]->type == t[0]->type;
    struct ebb_cl_layout l = pick(m, t[0], total);
    bool contiguous = true;
    for (uint32_t i = 1; i < n; i++)
        contiguous = contiguous && (const uint8_t *)t[i]->data ==
                                       (const uint8_t *)t[i - 1]->data + t[i - 1]->size;
    bool fuse = same && (l.order != EBB_CL_ORDER_RAW || !m->map.buf || contiguous);
    struct ebb_cl_wprog *p = NULL;
    if (fuse) {
        *n_out = 1;
        if ((rc = ebb_cl_weight_new(m->cl, &l, n_in, src, n, &m->map, &out[0], diag)))
            return prefix(diag, rc, names[0]);
        if (!out[0].zero_copy)
            for (uint32_t i = 0; i < n; i++)
                drop_file_pages(m, t[i]);
        return prog_for(m, &l, &p, diag);
    }
    *n_out = n;
    for (uint32_t i = 0; i < n; i++) {
        l = pick(m, t[i], (uint64_t)rows[i] * n_in);
        if ((rc = ebb_cl_weight_new(m->cl, &l, n_in, &src[i], 1, &m->map, &out[i], diag)))
            return prefix(diag, rc, names[i]);
        if (!out[i].zero_copy)
            drop_file_pages(m, t[i]);
        if ((rc = prog_for(m, &l, &p, diag)))
            return rc;
    }
    return EBB_OK;
}

/* The weight matrices of decoder layer l (norms and KV cache are placed apart). */
ebb_err ebb__clm_place_layer(struct clm *m, const struct ebb_gguf *g, uint32_t l,
                             struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    struct layer *L = &m->layers[l];
    char nm[6][64];
    uint32_t one;
    ebb_err rc;
    snprintf(nm[0], 64, "blk.%u.attn_q.weight", l);
    snprintf(nm[1], 64, "blk.%u.attn_k.weight", l);
    snprintf(nm[2], 64, "blk.%u.attn_v.weight", l);
    const char *qn[] = {nm[0], nm[1], nm[2]};
    uint32_t qr[] = {m->n_q, m->n_kv, m->n_kv};
    if ((rc = place_group(m, g, qn, qr, 3, hp->n_embd, L->qkv, &L->n_qkv, diag)))
        return rc;
    snprintf(nm[3], 64, "blk.%u.attn_output.weight", l);
    const char *wn[] = {nm[3]};
    uint32_t wr[] = {hp->n_embd};
    if ((rc = place_group(m, g, wn, wr, 1, m->n_q, &L->wo, &one, diag)))
        return rc;
    snprintf(nm[4], 64, "blk.%u.ffn_gate.weight", l);
    snprintf(nm[5], 64, "blk.%u.ffn_up.weight", l);
    const char *gn[] = {nm[4], nm[5]};
    uint32_t gr[] = {hp->n_ff, hp->n_ff};
    if ((rc = place_group(m, g, gn, gr, 2, hp->n_embd, L->gu, &L->n_gu, diag)))
        return rc;
    snprintf(nm[0], 64, "blk.%u.ffn_down.weight", l);
    const char *dn[] = {nm[0]};
    return place_group(m, g, dn, wr, 1, hp->n_ff, &L->down, &one, diag);
}

/* Releases the weight matrices of layer l (it becomes streamed). */
void ebb__clm_drop_layer(struct clm *m, uint32_t l)
{
    struct layer *L = &m->layers[l];
    for (int i = 0; i < 3; i++)
        ebb_cl_weight_fini(&L->qkv[i]);
    ebb_cl_weight_fini(&L->wo);
    for (int i = 0; i < 2; i++)
        ebb_cl_weight_fini(&L->gu[i]);
    ebb_cl_weight_fini(&L->down);
    L->n_qkv = L->n_gu = 0;
}

static ebb_err place_weights(struct clm *m, const struct ebb_gguf *g, struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    ebb_err rc;
    uint32_t one;
    const char *en[] = {"token_embd.weight"};
    uint32_t vr[] = {hp->n_vocab};
    if ((rc = place_group(m, g, en, vr, 1, hp->n_embd, &m->embd, &one, diag)) ||
        (rc = place_norm(m, g, "output_norm.weight", &m->output_norm, diag)))
        return rc;
    if (!hp->tied_output) {
        const char *on[] = {"output.weight"};
        if ((rc = place_group(m, g, on, vr, 1, hp->n_embd, &m->output, &one, diag)))
            return rc;
    }
    m->layers = calloc(hp->n_layer, sizeof(*m->layers));
    if (!m->layers)
        return EBB_ENOMEM;
    size_t kv_bytes = (size_t)m->n_seq * hp->n_head_kv * m->n_ctx * hp->head_dim * 2;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        struct layer *L = &m->layers[l];
        char nm[2][64];
        snprintf(nm[0], 64, "blk.%u.attn_norm.weight", l);
        snprintf(nm[1], 64, "blk.%u.ffn_norm.weight", l);
        if ((rc = place_norm(m, g, nm[0], &L->attn_norm, diag)) ||
            (rc = place_norm(m, g, nm[1], &L->ffn_norm, diag)))
            return rc;
        /* Streamed layers keep only their norms and KV cache on the device. */
        if ((!STREAMING(m) || ebb_stream_is_resident(m->st, l)) &&
            (rc = ebb__clm_place_layer(m, g, l, diag)))
            return rc;
        if ((rc = alloc(m, kv_bytes, &L->kc, "the K cache of a layer", diag)) ||
            (rc = alloc(m, kv_bytes, &L->vc, "the V cache of a layer", diag)))
            return rc;
    }
    return EBB_OK;
}

static ebb_err build_kernels(struct clm *m, struct ebb_diag *diag)
{
    ebb_err rc = ebb_cl_ops_build(m->cl, &m->tu, m->hp.head_dim, &m->ops, diag);
    if (rc)
        return rc;
    struct {
        cl_kernel *k;
        const char *name;
    } ks[] = {{&m->k_norm, "rmsnorm"},
              {&m->k_rope, "rope_kv"},
              {&m->k_attn_part, "attn_decode_part"},
              {&m->k_attn_red, "attn_decode_reduce"},
              {&m->k_attn_pre, "attn_prefill"},
              {&m->k_swiglu, "swiglu"},
              {&m->k_topk1, "topk_part"},
              {&m->k_topk2, "topk_merge"}};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
        if ((rc = ebb_cl_kernel(m->ops, ks[i].name, ks[i].k, diag)))
            return rc;
    return EBB_OK;
}

static ebb_err alloc_scratch(struct clm *m, struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    size_t f = sizeof(float);
    uint32_t max_chunks = (m->n_ctx + m->tu.att_chunk - 1) / m->tu.att_chunk;
    ebb_err rc;
    if ((rc = alloc(m, N_BATCH * sizeof(cl_int), &m->ids, "token ids", diag)) ||
        (rc = alloc(m, N_BATCH * f * hp->n_embd, &m->x, "activations", diag)) ||
        (rc = alloc(m, N_BATCH * f * hp->n_embd, &m->h, "activations", diag)) ||
        (rc = alloc(m, N_BATCH * f * m->n_qkv, &m->qkv, "activations", diag)) ||
        (rc = alloc(m, N_BATCH * f * m->n_q, &m->att, "activations", diag)) ||
        (rc = alloc(m, N_BATCH * f * 2 * hp->n_ff, &m->gu, "activations", diag)) ||
        (rc = alloc(m, N_BATCH * f * hp->n_ff, &m->ff, "activations", diag)) ||
        (rc = alloc(m, N_OUT_ROWS * f * hp->n_embd, &m->hl, "activations", diag)) ||
        (rc = alloc(m, N_OUT_ROWS * f * hp->n_vocab, &m->logits, "logits", diag)) ||
        (rc = alloc(m, f * hp->n_head * max_chunks * hp->head_dim, &m->po, "attention", diag)) ||
        (rc = alloc(m, 2 * f * hp->n_head * max_chunks, &m->pml, "attention", diag)) ||
        (rc = alloc(m, f * TOPK_PARTS * TOPK_MAX, &m->tpv, "top-k", diag)) ||
        (rc = alloc(m, sizeof(cl_int) * TOPK_PARTS * TOPK_MAX, &m->tpi, "top-k", diag)) ||
        (rc = alloc(m, f * TOPK_MAX, &m->tov, "top-k", diag)) ||
        (rc = alloc(m, sizeof(cl_int) * TOPK_MAX, &m->toi, "top-k", diag)))
        return rc;
    m->host_logits = malloc(f * hp->n_vocab);
    return m->host_logits ? EBB_OK : EBB_ENOMEM;
}

/* W x for nt tokens: rows of x (stride x_ld) to rows of y (stride y_ld, from column y_off),
 * adding res (same shape as y, may be y) when given. matvec for decode, tiled matmul for
 * prefill. With nw (decode only), x is RMS-normed and scaled by nw inside the product. */
static ebb_err wmul_glu(struct clm *m, const struct ebb_cl_weight *w, cl_mem x, int x_ld, cl_mem y,
                        int y_ld, int y_off, cl_mem res, cl_mem nw, int glu, int nt,
                        struct ebb_diag *diag);

static ebb_err wmul(struct clm *m, const struct ebb_cl_weight *w, cl_mem x, int x_ld, cl_mem y,
                    int y_ld, int y_off, cl_mem res, cl_mem nw, int nt, struct ebb_diag *diag)
{
    return wmul_glu(m, w, x, x_ld, y, y_ld, y_off, res, nw, 0, nt, diag);
}

/* wmul with, for decode, SwiGLU folded in (glu: x rows are [gate | up], see matvec.cl). */
static ebb_err wmul_glu(struct clm *m, const struct ebb_cl_weight *w, cl_mem x, int x_ld, cl_mem y,
                        int y_ld, int y_off, cl_mem res, cl_mem nw, int glu, int nt,
                        struct ebb_diag *diag)
{
    struct ebb_cl_wprog *p = NULL;
    ebb_err rc = prog_for(m, &w->layout, &p, diag);
    if (rc)
        return rc;
    int n_in = (int)w->n_in, n_out = (int)w->n_out;
    bool mm = nt > 1;
    enum ebb_cl_wkernel kind = !mm ? EBB_CL_WK_MATVEC
                               : m->tu.mm_gemm_min && (uint32_t)nt >= m->tu.mm_gemm_min
                                   ? EBB_CL_WK_GEMM
                               : m->tu.mm_coop ? EBB_CL_WK_COOP
                                               : EBB_CL_WK_MATMUL;
    cl_kernel ks[] = {p->matvec, p->matmul, p->matmul_coop, p->matmul_gemm}, k = ks[kind];
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_in),  EBB_CL_ARG(n_out), EBB_CL_ARG(x),
                             EBB_CL_ARG(x_ld),  EBB_CL_ARG(y),     EBB_CL_ARG(y_ld),
                             EBB_CL_ARG(y_off), EBB_CL_ARG(res),   EBB_CL_ARG(nt)};
    float eps = m->hp.rms_eps;
    struct ebb_cl_arg an[] = {EBB_CL_ARG(nw), EBB_CL_ARG(eps), EBB_CL_ARG(glu)};
    if ((rc = ebb_cl_weight_set_args(w, k, 0, diag)) ||
        (rc = ebb_cl_set_args(k, 2, a, mm ? 9 : 8, diag)) ||
        (!mm && (rc = ebb_cl_set_args(k, 10, an, 3, diag))))
        return rc;
    size_t g[2], l[2];
    ebb_cl_wkernel_shape(&m->tu, kind, (uint32_t)n_out, (uint32_t)nt, g, l);
    return ebb_cl_run(m->cl, k, 2, g, l, diag);
}

/* Several weights stacked along O write side by side into rows of y. */
static ebb_err wmul_group(struct clm *m, const struct ebb_cl_weight *w, uint32_t n, cl_mem x,
                          int x_ld, cl_mem y, int y_ld, cl_mem nw, int nt, struct ebb_diag *diag)
{
    int off = 0;
    for (uint32_t i = 0; i < n; i++) {
        ebb_err rc = wmul(m, &w[i], x, x_ld, y, y_ld, off, NULL, nw, nt, diag);
        if (rc)
            return rc;
        off += (int)w[i].n_out;
    }
    return EBB_OK;
}

static ebb_err rmsnorm(struct clm *m, cl_mem x, cl_mem w, cl_mem y, int nt, struct ebb_diag *diag)
{
    int n = (int)m->hp.n_embd;
    float eps = m->hp.rms_eps;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(x), EBB_CL_ARG(n), EBB_CL_ARG(w),  EBB_CL_ARG(y),
                             EBB_CL_ARG(n), EBB_CL_ARG(n), EBB_CL_ARG(eps)};
    ebb_err rc = ebb_cl_set_args(m->k_norm, 0, a, 7, diag);
    size_t g[2] = {m->tu.norm_wg, (size_t)nt}, l[2] = {m->tu.norm_wg, 1};
    return rc ? rc : ebb_cl_run(m->cl, m->k_norm, 2, g, l, diag);
}

/* One layer for nt tokens at positions pos..pos+nt-1 of slot seq; x is updated in place. */
ebb_err ebb__clm_layer(struct clm *m, const struct layer *L, uint32_t seq, int nt, int pos,
                       struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    ebb_err rc;
    int n_embd = (int)hp->n_embd, n_qkv = (int)m->n_qkv, n_q = (int)m->n_q;
    int n_ff = (int)hp->n_ff, n_ff2 = 2 * n_ff;
    /* Decode folds each RMS norm into the product that consumes it (one launch less each);
     * prefill normalises once for the whole token tile. */
    bool fold = nt == 1;
    if (fold)
        rc = wmul_group(m, L->qkv, L->n_qkv, m->x, n_embd, m->qkv, n_qkv, L->attn_norm, nt, diag);
    else if (!(rc = rmsnorm(m, m->x, L->attn_norm, m->h, nt, diag)))
        rc = wmul_group(m, L->qkv, L->n_qkv, m->h, n_embd, m->qkv, n_qkv, NULL, nt, diag);
    if (rc)
        return rc;

    cl_ulong kv_base = (cl_ulong)seq * hp->n_head_kv * m->n_ctx * hp->head_dim;
    int n_ctx = (int)m->n_ctx, nh = (int)hp->n_head, nkv = (int)hp->n_head_kv;
    int hd = (int)hp->head_dim, n_rot = (int)hp->n_rot, neox = hp->rope_kind == EBB__ROPE_NEOX;
    float base = hp->rope_base, fscale = hp->rope_scale > 0 ? 1.0f / hp->rope_scale : 1.0f;
    struct ebb_cl_arg ra[] = {EBB_CL_ARG(m->qkv), EBB_CL_ARG(n_qkv),   EBB_CL_ARG(L->kc),
                              EBB_CL_ARG(L->vc),  EBB_CL_ARG(kv_base), EBB_CL_ARG(n_ctx),
                              EBB_CL_ARG(pos),    EBB_CL_ARG(nh),      EBB_CL_ARG(nkv),
                              EBB_CL_ARG(hd),     EBB_CL_ARG(n_rot),   EBB_CL_ARG(base),
                              EBB_CL_ARG(fscale), EBB_CL_ARG(neox)};
    size_t rg[3] = {hp->head_dim / 2, hp->n_head + hp->n_head_kv, (size_t)nt};
    if ((rc = ebb_cl_set_args(m->k_rope, 0, ra, 14, diag)) ||
        (rc = ebb_cl_run(m->cl, m->k_rope, 3, rg, NULL, diag)))
        return rc;

    float scale = 1.0f / sqrtf((float)hp->head_dim);
    if (nt == 1) {
        int n_kv = pos + 1, nc = (n_kv + (int)m->tu.att_chunk - 1) / (int)m->tu.att_chunk;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(m->qkv),  EBB_CL_ARG(L->kc),  EBB_CL_ARG(L->vc),
                                 EBB_CL_ARG(kv_base), EBB_CL_ARG(n_ctx),  EBB_CL_ARG(n_kv),
                                 EBB_CL_ARG(nh),      EBB_CL_ARG(nkv),    EBB_CL_ARG(scale),
                                 EBB_CL_ARG(m->po),   EBB_CL_ARG(m->pml), EBB_CL_ARG(m->att)};
        struct ebb_cl_arg b[] = {EBB_CL_ARG(m->po), EBB_CL_ARG(m->pml), EBB_CL_ARG(nc),
                                 EBB_CL_ARG(m->att)};
        size_t g1[2] = {(size_t)nc * m->tu.norm_wg, hp->n_head}, l1[2] = {m->tu.norm_wg, 1};
        size_t g2[2] = {hp->head_dim, hp->n_head};
        if ((rc = ebb_cl_set_args(m->k_attn_part, 0, a, 12, diag)) ||
            (rc = ebb_cl_run(m->cl, m->k_attn_part, 2, g1, l1, diag)))
            return rc;
        if (nc > 1 && ((rc = ebb_cl_set_args(m->k_attn_red, 0, b, 4, diag)) ||
                       (rc = ebb_cl_run(m->cl, m->k_attn_red, 2, g2, NULL, diag))))
            return rc;
    } else {
        struct ebb_cl_arg a[] = {EBB_CL_ARG(m->qkv), EBB_CL_ARG(n_qkv),   EBB_CL_ARG(L->kc),
                                 EBB_CL_ARG(L->vc),  EBB_CL_ARG(kv_base), EBB_CL_ARG(n_ctx),
                                 EBB_CL_ARG(pos),    EBB_CL_ARG(nt),      EBB_CL_ARG(nh),
                                 EBB_CL_ARG(nkv),    EBB_CL_ARG(scale),   EBB_CL_ARG(m->att),
                                 EBB_CL_ARG(n_q)};
        size_t g[2] = {(size_t)nt, hp->n_head}, l[2] = {m->tu.att_tq, 1};
        if ((rc = ebb_cl_set_args(m->k_attn_pre, 0, a, 13, diag)) ||
            (rc = ebb_cl_run(m->cl, m->k_attn_pre, 2, g, l, diag)))
            return rc;
    }
    /* Output projection with the residual fused: x = x + Wo att. */
    if ((rc = wmul(m, &L->wo, m->att, n_q, m->x, n_embd, 0, m->x, NULL, nt, diag)))
        return rc;
    if (fold)
        rc = wmul_group(m, L->gu, L->n_gu, m->x, n_embd, m->gu, n_ff2, L->ffn_norm, nt, diag);
    else if (!(rc = rmsnorm(m, m->x, L->ffn_norm, m->h, nt, diag)))
        rc = wmul_group(m, L->gu, L->n_gu, m->h, n_embd, m->gu, n_ff2, NULL, nt, diag);
    if (rc)
        return rc;
    if (fold) /* SwiGLU folded into the down projection */
        return wmul_glu(m, &L->down, m->gu, n_ff2, m->x, n_embd, 0, m->x, NULL, 1, nt, diag);
    struct ebb_cl_arg sa[] = {EBB_CL_ARG(m->gu), EBB_CL_ARG(n_ff2), EBB_CL_ARG(m->ff),
                              EBB_CL_ARG(n_ff), EBB_CL_ARG(n_ff)};
    size_t sg[2] = {hp->n_ff, (size_t)nt};
    if ((rc = ebb_cl_set_args(m->k_swiglu, 0, sa, 5, diag)) ||
        (rc = ebb_cl_run(m->cl, m->k_swiglu, 2, sg, NULL, diag)))
        return rc;
    return wmul(m, &L->down, m->ff, n_ff, m->x, n_embd, 0, m->x, NULL, nt, diag);
}

/* Logits of normed rows h[r0..r0+nr) into the logits scratch (nr <= N_OUT_ROWS). */
static ebb_err head(struct clm *m, int r0, int nr, struct ebb_diag *diag)
{
    size_t row = sizeof(float) * m->hp.n_embd;
    cl_int e = clEnqueueCopyBuffer(m->cl->q, m->h, m->hl, row * r0, 0, row * nr, 0, NULL, NULL);
    ebb_err rc = ebb_cl_check(e, diag, "copy rows for the output head");
    if (rc)
        return rc;
    const struct ebb_cl_weight *w = m->hp.tied_output ? &m->embd : &m->output;
    return wmul(m, w, m->hl, (int)m->hp.n_embd, m->logits, (int)m->hp.n_vocab, 0, NULL, NULL, nr,
                diag);
}

/* Logits of a single decoded token straight from the residual row, the final norm folded in. */
static ebb_err head_decode(struct clm *m, struct ebb_diag *diag)
{
    const struct ebb_cl_weight *w = m->hp.tied_output ? &m->embd : &m->output;
    return wmul(m, w, m->x, (int)m->hp.n_embd, m->logits, (int)m->hp.n_vocab, 0, NULL,
                m->output_norm, 1, diag);
}

static ebb_err read_back(struct clm *m, cl_mem b, size_t off, size_t n, void *dst,
                         struct ebb_diag *diag)
{
    cl_int e = clEnqueueReadBuffer(m->cl->q, b, CL_TRUE, off, n, dst, 0, NULL, NULL);
    return ebb_cl_check(e, diag, "reading results");
}

/* Host top-k over n_vocab logits, for k beyond what the device kernel keeps: one pass with
 * insertion into the sorted list, ties to the smaller id as on the device. */
static void host_topk(const float *x, uint32_t n, uint32_t k, int32_t *ids, float *vals)
{
    uint32_t have = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (have == k && !(x[i] > vals[k - 1]))
            continue;
        uint32_t j = have < k ? have++ : k - 1;
        while (j > 0 && x[i] > vals[j - 1]) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = x[i];
        ids[j] = (int32_t)i;
    }
}

static ebb_err outputs(struct clm *m, struct ebb_model_out *out, struct ebb_diag *diag)
{
    ebb_err rc;
    uint32_t nv = m->hp.n_vocab;
    if (out->logits && (rc = read_back(m, m->logits, 0, sizeof(float) * nv, out->logits, diag)))
        return rc;
    if (!out->top_k)
        return EBB_OK;
    uint32_t k = out->top_k < nv ? out->top_k : nv;
    if (k > TOPK_MAX) {
        float *lg = out->logits ? out->logits : m->host_logits;
        if (!out->logits && (rc = read_back(m, m->logits, 0, sizeof(float) * nv, lg, diag)))
            return rc;
        host_topk(lg, nv, k, out->top_ids, out->top_logits);
        return EBB_OK;
    }
    int n = (int)nv, kk = (int)k, parts = TOPK_PARTS;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(m->logits), EBB_CL_ARG(n), EBB_CL_ARG(kk),
                             EBB_CL_ARG(m->tpv), EBB_CL_ARG(m->tpi)};
    struct ebb_cl_arg b[] = {EBB_CL_ARG(m->tpv), EBB_CL_ARG(m->tpi), EBB_CL_ARG(parts),
                             EBB_CL_ARG(kk),     EBB_CL_ARG(m->tov), EBB_CL_ARG(m->toi)};
    size_t g = TOPK_PARTS, one = 1;
    if ((rc = ebb_cl_set_args(m->k_topk1, 0, a, 5, diag)) ||
        (rc = ebb_cl_run(m->cl, m->k_topk1, 1, &g, NULL, diag)) ||
        (rc = ebb_cl_set_args(m->k_topk2, 0, b, 6, diag)) ||
        (rc = ebb_cl_run(m->cl, m->k_topk2, 1, &one, NULL, diag)))
        return rc;
    if ((rc = read_back(m, m->toi, 0, sizeof(int32_t) * k, out->top_ids, diag)))
        return rc;
    return read_back(m, m->tov, 0, sizeof(float) * k, out->top_logits, diag);
}

static ebb_err clm_eval(void *ctx, uint32_t seq, const int32_t *tokens, uint32_t n, uint32_t pos,
                        struct ebb_model_out *out, struct ebb_diag *diag)
{
    struct clm *m = ctx;
    ebb_err rc = EBB_OK;
    if (seq >= m->n_seq || !n || !tokens)
        return ebb_diag_set(diag, EBB_EINVAL, "bad evaluation request (slot %u, %u tokens)", seq,
                            n);
    if ((uint64_t)pos + n > m->n_ctx)
        return ebb_diag_set(diag, EBB_ECTX, "%u tokens at position %u exceed the context of %u", n,
                            pos, m->n_ctx);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= m->hp.n_vocab)
            return ebb_diag_set(diag, EBB_EINVAL, "token id %d out of range", (int)tokens[i]);
    uint64_t t0 = STREAMING(m) ? ebb__clm_now_ns() : 0;
    if (STREAMING(m) && (rc = ebb__clm_stream_between(m, diag)))
        goto out;
    float one = 1.0f;
    int n_embd = (int)m->hp.n_embd;
    for (uint32_t c = 0; c < n; c += N_BATCH) {
        int nt = (int)(n - c < N_BATCH ? n - c : N_BATCH);
        cl_int e = clEnqueueWriteBuffer(m->cl->q, m->ids, CL_FALSE, 0, sizeof(int32_t) * nt,
                                        tokens + c, 0, NULL, NULL);
        if ((rc = ebb_cl_check(e, diag, "writing token ids")))
            goto out;
        struct ebb_cl_arg a[] = {EBB_CL_ARG(n_embd), EBB_CL_ARG(m->ids), EBB_CL_ARG(m->x),
                                 EBB_CL_ARG(one)};
        struct ebb_cl_wprog *p = NULL;
        size_t g[2] = {m->hp.n_embd / 4, (size_t)nt};
        if ((rc = prog_for(m, &m->embd.layout, &p, diag)) ||
            (rc = ebb_cl_weight_set_args(&m->embd, p->get_rows, 0, diag)) ||
            (rc = ebb_cl_set_args(p->get_rows, 2, a, 4, diag)) ||
            (rc = ebb_cl_run(m->cl, p->get_rows, 2, g, NULL, diag)))
            goto out;
        for (uint32_t l = 0; l < m->hp.n_layer; l++) {
            if (!STREAMING(m) || ebb_stream_is_resident(m->st, l))
                rc = ebb__clm_layer(m, &m->layers[l], seq, nt, (int)(pos + c), diag);
            else
                rc = ebb__clm_streamed_layer(m, l, seq, nt, (int)(pos + c), diag);
            if (rc)
                goto out;
        }
        bool want_last = out && (out->logits || out->top_k) && c + (uint32_t)nt == n;
        if (nt == 1 && !(out && out->logits_all)) {
            if (want_last && (rc = head_decode(m, diag)))
                goto out;
            continue;
        }
        if ((rc = rmsnorm(m, m->x, m->output_norm, m->h, nt, diag)))
            goto out;
        if (out && out->logits_all) {
            for (int r = 0; r < nt; r += N_OUT_ROWS) {
                int nr = nt - r < N_OUT_ROWS ? nt - r : N_OUT_ROWS;
                size_t row = sizeof(float) * m->hp.n_vocab;
                if ((rc = head(m, r, nr, diag)) ||
                    (rc = read_back(m, m->logits, 0, row * nr,
                                    out->logits_all + (c + r) * m->hp.n_vocab, diag)))
                    goto out;
            }
        }
        if (want_last && (rc = head(m, nt - 1, 1, diag)))
            goto out;
    }
    if (out && (out->logits || out->top_k))
        rc = outputs(m, out, diag);
    else
        rc = ebb_cl_check(clFinish(m->cl->q), diag, "clFinish");
out:
    if (STREAMING(m)) {
        ebb_err rf = m->sc ? ebb_stream_cl_finish(m->sc, m->st, rc ? NULL : diag) : EBB_OK;
        rc = rc ? rc : rf;
        m->tokens += n;
        m->busy_ns += ebb__clm_now_ns() - t0;
        ebb__clm_stream_snapshot(m);
    }
    return rc;
}

ebb_err ebb__cl_backend_new(const struct ebb__hparams *hp, const struct ebb_gguf *g,
                            const struct ebb_model_params *p, uint32_t n_ctx,
                            const struct ebb__backend_i **iface, void **ctx, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    struct clm *m = calloc(1, sizeof(*m));
    if (!m)
        return EBB_ENOMEM;
    m->hp = *hp;
    m->n_ctx = n_ctx;
    m->g = g;
    if (pthread_mutex_init(&m->snap_mu, NULL)) {
        free(m);
        return EBB_ENOMEM;
    }
    m->snap_init = true;
    m->n_seq = p->n_seq ? p->n_seq : 1;
    m->n_q = hp->n_head * hp->head_dim;
    m->n_kv = hp->n_head_kv * hp->head_dim;
    m->n_qkv = m->n_q + 2 * m->n_kv;
    if (strcmp(hp->arch, "llama")) {
        rc = ebb_diag_set(diag, EBB_EUNSUPPORTED,
                          "the OpenCL engine runs 'llama' models, not '%s'%s", hp->arch,
                          hp->gemma3 ? " (the plain-C reference does: --device ref)" : "");
        goto out;
    }
    if (!hp->n_head_kv || hp->n_head % hp->n_head_kv || hp->head_dim % 4 || hp->n_embd % 4 ||
        hp->n_ff % 4 || hp->n_rot > hp->head_dim || hp->n_rot % 2 || !n_ctx) {
        rc = ebb_diag_set(diag, EBB_EUNSUPPORTED,
                          "unsupported shape (heads %u/%u, head_dim %u, n_rot %u, n_ctx %u)",
                          hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_rot, n_ctx);
        goto out;
    }
    if ((rc = ebb_cl_open(p->device, &m->cl, diag)))
        goto out;
    m->tu = ebb_cl_tuning_for(&m->cl->info);
    /* Zero-copy: one buffer over the whole mapped file where the device shares host memory. */
    if (m->cl->info.host_unified && ebb_gguf_file_size(g) <= m->cl->info.max_alloc) {
        cl_int e = CL_SUCCESS;
        m->map.base = ebb_gguf_base(g);
        m->map.size = ebb_gguf_file_size(g);
        m->map.buf = clCreateBuffer(m->cl->ctx, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, m->map.size,
                                    (void *)m->map.base, &e);
        if (e)
            m->map.buf = NULL; /* fall back to copies */
    }
    if ((rc = build_kernels(m, diag)) || (rc = stream_open(m, g, p, diag)) ||
        (rc = place_weights(m, g, diag)) || (rc = alloc_scratch(m, diag)))
        goto out;
    if (STREAMING(m)) {
        if ((rc = ebb__clm_ensure_slots(m, diag)))
            goto out;
        ebb__clm_stream_snapshot(m);
        m->iface.stream_report = ebb__clm_stream_report;
        m->iface.stream_probe = ebb__clm_stream_probe;
        m->iface.n_ctx = m->n_ctx;
    }
    snprintf(m->name, sizeof(m->name), "opencl (%s)", m->cl->info.name);
    m->iface.name = m->name;
    m->iface.eval = clm_eval;
    m->iface.free = clm_free;
    *iface = &m->iface;
    *ctx = m;
    m = NULL;
out:
    clm_free(m);
    return rc;
}
