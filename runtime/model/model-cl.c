/* The forward pass on the OpenCL engine: the backend's life (open, kernels, scratch, free) and
 * an evaluation (embedding, layers, output head, top-k). The family's description is compiled
 * into the engine's steps by model-cl-plan.c, weights are placed by model-cl-place.c, a layer
 * is computed by model-cl-layer.c, streamed layers go through model-cl-stream.c. The KV cache and
 * every scratch buffer are allocated once, and an evaluation enqueues the whole pass without
 * waiting until the requested outputs are read back. */
#include "model-cl-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

static ebb_err clm_eval(void *ctx, uint32_t seq, const int32_t *tokens, uint32_t n, uint32_t pos,
                        struct ebb_model_out *out, struct ebb_diag *diag);

/* The stage that holds the output head: the last of a layer split, else m itself. */
static struct clm *last_stage(struct clm *m)
{
    while (m->next)
        m = m->next;
    return m;
}

/* Waits for every stage's queue. */
static ebb_err finish_all(struct clm *m, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    for (; m && !rc; m = m->next)
        rc = ebb_cl_finish(m->cl, diag);
    return rc;
}

static void release(cl_mem *m)
{
    if (*m)
        clReleaseMemObject(*m);
    *m = NULL;
}

static ebb_err stream_open(struct clm *m, const struct ebb_gguf *g,
                           const struct ebb_model_params *p, struct ebb_diag *diag)
{
#if EBB_STREAMER
    return ebb__clm_stream_open(m, g, p, diag);
#else
    (void)m, (void)g;
    if (p->memory_budget || p->memory_budget_auto || p->residency_forced || p->residency > 0 ||
        p->pack_path || p->host_layers)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "this ebb was built without the layer streamer (-Dstreamer=false): "
                            "--memory-budget, --residency, --pack and --host-layers are not "
                            "available");
    return EBB_OK;
#endif
}

static void att_set_fini(struct clm_att_set *s)
{
    cl_kernel ks[] = {s->part, s->rope, s->red, s->red_q8, s->rope_q8};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
        if (ks[i])
            clReleaseKernel(ks[i]);
    if (s->ops)
        clReleaseProgram(s->ops);
}

static void clm_free(void *ctx)
{
    struct clm *m = ctx;
    if (!m)
        return;
    ebb__clm_split_hand_free(m);
    clm_free(m->next); /* the stages after this one */
    if (m->sc && m->st)
        ebb_stream_cl_finish(m->sc, m->st, NULL);
    ebb_stream_free(m->st); /* stops the I/O thread before its slots go */
    ebb__ref_host_free(m->host);
    free(m->host_x);
    ebb_stream_cl_free(m->sc);
    free(m->tmpl);
    if (m->snap_init)
        pthread_mutex_destroy(&m->snap_mu);
    if (m->layers) {
        for (uint32_t l = 0; l < m->hp.n_layer; l++) {
            struct layer *L = &m->layers[l];
            for (int k = 0; k < MAX_NORMS; k++)
                release(&L->norm[k]);
            for (int gi = 0; gi < MAX_GROUPS; gi++)
                for (int i = 0; i < GROUP_MAX; i++)
                    ebb_cl_weight_fini(&L->w[gi][i]);
            release(&L->kc);
            release(&L->vc);
            release(&L->bias);
            release(&L->qn);
            release(&L->kn);
        }
        free(m->layers);
    }
    ebb_cl_weight_fini(&m->embd);
    ebb_cl_weight_fini(&m->output);
    release(&m->output_norm);
    release(&m->rope_ff);
    cl_mem *scratch[] = {
        &m->ids,     &m->x,      &m->h,    &m->qkv,  &m->att, &m->gu,      &m->ff,    &m->hl,
        &m->logits,  &m->po,     &m->pml,  &m->tpv,  &m->tpi, &m->tov,     &m->toi,   &m->xq,
        &m->xd,      &m->rt,     &m->dr,   &m->xl,   &m->apo, &m->apml,    &m->mq_x,  &m->mq_h,
        &m->mq_part, &m->mq_cnt, &m->k4_a, &m->k4_b, &m->k8,  &m->att_cnt, &m->mq_x2, &m->mq_h2};
    for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++)
        release(scratch[i]);
    cl_kernel ks[] = {
        m->k_norm,       m->k_rope,          m->k_attn_part,    m->k_attn_red,  m->k_attn_pre,
        m->k_swiglu,     m->k_topk1,         m->k_topk2,        m->k_q8,        m->k_q8r,
        m->k_bias,       m->k_head_norm,     m->k_attn_red_q8,  m->k_attn_rope, m->k_rope_rows,
        m->k_attn_rows,  m->k_attn_red_rows, m->k_attn_pre_mma, m->k_geglu,     m->k_norm_add,
        m->k_attn_merge, m->k_attn_rope_q8};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
        if (ks[i])
            clReleaseKernel(ks[i]);
    if (m->ops)
        clReleaseProgram(m->ops);
    att_set_fini(&m->att_deep);
    att_set_fini(&m->att_shallow);
    ebb__clm_moe_long_fini(m);
    ebb__clm_moe_fini(m);
    ebb__clm_xc_fini(m);
    for (uint32_t i = 0; i < m->n_progs; i++)
        ebb_cl_wprog_fini(&m->progs[i]);
    release(&m->map.buf);
    release(&m->pc);
    free(m->host_logits);
    free(m->host_h);
    free(m->host_ids);
    free(m->host_ti);
    free(m->host_tv);
    free(m->host_rt);
    free(m->host_dr);
    free(m->bparts);
    free(m->ring_toks);
    free(m->ring_top);
    ebb_cl_close(m->cl);
    free(m);
}

/* Query heads per decode attention work-group: the whole GQA group where the tuning asks for
 * it and the work-group's local memory for it (queries, scores, partials) fits half the
 * device's, else 1. */
static uint32_t att_group(const struct clm *m)
{
    uint32_t nh = m->hp.n_head, nkv = m->hp.n_head_kv, g = nkv ? nh / nkv : 1;
    if (!m->tu.att_gqa || !nkv || nh % nkv || g < 2 || g > 8 ||
        ebb_cl_att_local(&m->tu, m->hp.head_dim, g) > m->cl->info.local_mem / 2)
        return 1;
    return g;
}

/* Kernel name of prog into *out where the program has it (a kernel under a build condition),
 * else NULL. */
static ebb_err opt_kernel(cl_program prog, const char *name, cl_kernel *out, struct ebb_diag *diag)
{
    cl_int e;
    *out = clCreateKernel(prog, name, &e);
    if (e == CL_INVALID_KERNEL_NAME) {
        *out = NULL;
        return EBB_OK;
    }
    return ebb_cl_check(e, diag, name);
}

/* An attention set's kernels from the ops program built for tuning t. */
static ebb_err att_set_build(struct clm *m, const struct ebb_cl_tuning *t, struct clm_att_set *s,
                             struct ebb_diag *diag)
{
    ebb_err rc = ebb_cl_ops_build(m->cl, t, m->hp.head_dim, &s->ops, diag);
    if (rc || (rc = ebb_cl_kernel(s->ops, "attn_decode_part", &s->part, diag)) ||
        (rc = ebb_cl_kernel(s->ops, "attn_decode_reduce", &s->red, diag)) ||
        (m->k_attn_rope && (rc = ebb_cl_kernel(s->ops, "attn_decode_rope", &s->rope, diag))) ||
        (m->k_attn_red_q8 &&
         (rc = ebb_cl_kernel(s->ops, "attn_decode_reduce_q8", &s->red_q8, diag))) ||
        (m->k_attn_rope_q8 && (rc = opt_kernel(s->ops, "attn_decode_rope_q8", &s->rope_q8, diag))))
        return rc;
    return EBB_OK;
}

/* The decode attention kernels for deep contexts (m->att_chunk_deep positions a chunk); none
 * where the chunk is not longer than the tuning's (the partials, m->po, are sized for the
 * tuning's chunks) or its work-group's local memory would not fit. */
static ebb_err build_deep(struct clm *m, struct ebb_diag *diag)
{
    struct ebb_cl_tuning td = m->tu;
    td.att_chunk = m->att_chunk_deep;
    if (m->att_chunk_deep <= m->tu.att_chunk ||
        ebb_cl_att_local(&td, m->hp.head_dim, td.att_g) > m->cl->info.local_mem / 2) {
        m->att_chunk_deep = 0;
        return EBB_OK;
    }
    return att_set_build(m, &td, &m->att_deep, diag);
}

/* The one-token decode attention kernels for shallow contexts (one query head a work-group);
 * none where the tuning groups none (att_g 1) or asks for the grouped kernels throughout
 * (att_gqa_from 0). Their partials are laid out as the grouped kernels' (a head's chunk outputs
 * in m->po), so the reductions are interchangeable. */
static ebb_err build_shallow(struct clm *m, struct ebb_diag *diag)
{
    if (m->tu.att_g < 2 || !m->tu.att_gqa_from)
        return EBB_OK;
    struct ebb_cl_tuning ts = m->tu;
    ts.att_g = 1;
    return att_set_build(m, &ts, &m->att_shallow, diag);
}

static ebb_err build_kernels(struct clm *m, struct ebb_diag *diag)
{
    m->tu.att_g = att_group(m);
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
              {&m->k_geglu, "geglu"},
              {&m->k_norm_add, "rmsnorm_add"},
              {&m->k_topk1, "topk_part"},
              {&m->k_topk2, "topk_merge"},
              {&m->k_bias, "add_bias"},
              {&m->k_head_norm, "head_norm"},
              {&m->k_rope_rows, "rope_kv_rows"},
              {&m->k_attn_rows, "attn_decode_rows"},
              {&m->k_attn_red_rows, "attn_decode_reduce_rows"}};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
        if ((rc = ebb_cl_kernel(m->ops, ks[i].name, ks[i].k, diag)))
            return rc;
    /* A device that cannot run the top-k passes' work-groups leaves the top-k to the host. */
    size_t wg[2] = {0, 0};
    if (clGetKernelWorkGroupInfo(m->k_topk1, NULL, CL_KERNEL_WORK_GROUP_SIZE, sizeof(size_t),
                                 &wg[0], NULL) ||
        clGetKernelWorkGroupInfo(m->k_topk2, NULL, CL_KERNEL_WORK_GROUP_SIZE, sizeof(size_t),
                                 &wg[1], NULL) ||
        wg[0] < TOPK_WG || wg[1] < TOPK_WG)
        m->tu.topk_host = 1;
    if (m->tu.mv_q8 && (rc = ebb_cl_kernel(m->ops, "quantize_x8", &m->k_q8, diag)))
        return rc;
    if (m->tu.mv_q8 && m->tu.q8r_max > 1 &&
        (rc = ebb_cl_kernel(m->ops, "quantize_x8_rows", &m->k_q8r, diag)))
        return rc;
    if (m->tu.att_rope && (rc = ebb_cl_kernel(m->ops, "attn_decode_rope", &m->k_attn_rope, diag)))
        return rc;
    if (m->tu.att_mma && m->tu.mv_ptx && ebb_cl_att_mma_split(m->hp.head_dim) &&
        ((rc = ebb_cl_kernel(m->ops, "attn_prefill_mma", &m->k_attn_pre_mma, diag)) ||
         (rc = ebb_cl_kernel(m->ops, "attn_prefill_merge", &m->k_attn_merge, diag))))
        return rc;
    if (m->tu.mv_q8 && m->tu.att_q8 && m->hp.head_dim % 32 == 0 &&
        (rc = ebb_cl_kernel(m->ops, "attn_decode_reduce_q8", &m->k_attn_red_q8, diag)))
        return rc;
    if (m->tu.att_fold && m->k_attn_rope && m->k_attn_red_q8 &&
        (rc = opt_kernel(m->ops, "attn_decode_rope_q8", &m->k_attn_rope_q8, diag)))
        return rc;
    if ((rc = build_deep(m, diag)))
        return rc;
    return build_shallow(m, diag);
}

/* The K-quant rewrites' scratch (K4SPLIT, K8SPLIT) where it can be had: a device that cannot
 * hold it (one buffer past its largest allocation, or none left) runs prefill on the raw tiles,
 * with a note on stderr, rather than refusing the model. */
static void alloc_ksplit(struct clm *m)
{
    uint64_t b4 = 0, b8 = 0;
    ebb__clm_ksplit_bytes(m, &b4, &b8);
    struct ebb_diag d = {{0}};
    struct ebb_cl_wprog *ps = NULL;
    if (b4) {
        /* only where split Q4_1 has the int8 prefill tiles under this tuning (the W_Q16
         * layouts' matmul_mms: tu.mv_q16) */
        const struct ebb_cl_layout sl = {EBB_GGML_Q4_1, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT};
        if (ebb__clm_prog_for(m, &sl, &ps, &d) || !ps->matmul_mmqp || !ps->mmq_quantize)
            b4 = 0;
    }
    if (b4 && (ebb__clm_alloc(m, b4 * 16, &m->k4_a, "Q4_K prefill planes", &d) ||
               ebb__clm_alloc(m, b4 * 8, &m->k4_b, "Q4_K prefill planes", &d))) {
        fprintf(stderr, "ebb: %s: Q4_K prefill takes the raw tiles (EBB_CL_K4SPLIT)\n", d.msg);
        release(&m->k4_a);
        release(&m->k4_b);
        b4 = 0;
    }
    m->k4_blocks = b4;
    m->k4_prog = b4 ? ps : NULL;
    if (b8 && ebb__clm_alloc(m, b8 * 40, &m->k8, "Q6_K / Q5_K prefill bytes", &d)) {
        fprintf(stderr, "ebb: %s: Q6_K / Q5_K prefill takes the raw tiles (EBB_CL_K8SPLIT)\n",
                d.msg);
        b8 = 0;
    }
    m->k8_blocks = b8;
    m->k8_on = b8 != 0;
}

/* The program of raw K-quant layer weight w whose rewrite KSPLIT_KEEP would keep (k4: split
 * Q4_1 planes, else k8_split's bytes), or NULL. */
static struct ebb_cl_wprog *keep_prog(struct clm *m, const struct ebb_cl_weight *w, bool *k4,
                                      struct ebb_diag *diag, ebb_err *rc)
{
    uint32_t t = w->layout.type;
    struct ebb_cl_wprog *p = NULL;
    *rc = EBB_OK;
    if (!w->a || w->layout.order != EBB_CL_ORDER_RAW || w->n_in % 32 ||
        (t != EBB_GGML_Q4_K && t != EBB_GGML_Q6_K && t != EBB_GGML_Q5_K) ||
        (*rc = ebb__clm_prog_for(m, &w->layout, &p, diag)))
        return NULL;
    *k4 = p->k4_split && m->k4_prog;
    return *k4 || (p->k8_split && m->k8_on) ? p : NULL;
}

/* KSPLIT_KEEP: each resident layer's raw Q4_K / Q6_K / Q5_K weight (not the expert stacks,
 * which take moe.cl's kernels) rewritten once (ebb__clm_ksplit_write) into buffers of its own
 * (ka, kb), which prefill's and a batch's products then read (model-cl-layer.c), where all of
 * them take at most ks_keep percent of the device's memory. Only where every layer is
 * resident with no budget (STREAMING: the plan's bytes do not count these). A buffer the
 * device refuses ends the keeping with a note; the weights left take a rewrite a product as
 * without the knob. With every one kept, the scratch of the rewrites a product goes (the
 * output head, the only other such product, is larger than it). */
static ebb_err keep_ksplit(struct clm *m, struct ebb_diag *diag)
{
    if (!m->tu.ks_keep || STREAMING(m) || !m->layers || (!m->k4_prog && !m->k8_on))
        return EBB_OK;
    ebb_err rc;
    uint64_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t l = 0; l < m->hp.n_layer; l++)
            for (uint32_t gi = 0; gi < MAX_GROUPS; gi++)
                for (int i = 0; i < GROUP_MAX && !ebb__clm_expert_group(m, gi); i++) {
                    struct ebb_cl_weight *w = &m->layers[l].w[gi][i];
                    bool k4 = false;
                    struct ebb_cl_wprog *p = keep_prog(m, w, &k4, diag, &rc);
                    if (rc)
                        return rc;
                    if (!p)
                        continue;
                    size_t nb = (size_t)w->n_out * (w->n_in / 32);
                    if (!pass) {
                        total += nb * (k4 ? 24 : 40);
                        continue;
                    }
                    struct ebb_diag d = {{0}};
                    if (ebb__clm_alloc(m, nb * (k4 ? 16 : 40), &w->ka, "kept K-quant rewrites",
                                       &d) ||
                        (k4 && ebb__clm_alloc(m, nb * 8, &w->kb, "kept K-quant rewrites", &d))) {
                        fprintf(stderr,
                                "ebb: %s: the rest of the weights are rewritten a product "
                                "(EBB_CL_KSPLIT_KEEP)\n",
                                d.msg);
                        release(&w->ka);
                        release(&w->kb);
                        goto done;
                    }
                    if ((rc = ebb__clm_ksplit_write(m, w, k4 ? p->k4_split : p->k8_split, w->ka,
                                                    w->kb, diag)))
                        return rc;
                    m->kept_bytes += nb * (k4 ? 24 : 40);
                }
        if (!pass && (!total || total > m->cl->info.global_mem / 100 * m->tu.ks_keep)) {
            if (total)
                ebb_log(EBB_LOG_INFO, "model",
                        "K-quant rewrites not kept: %.1f MiB, over %u%% of the device's memory "
                        "(EBB_CL_KSPLIT_KEEP)",
                        total / 1048576.0, m->tu.ks_keep);
            return EBB_OK;
        }
    }
done:
    ebb_log(EBB_LOG_INFO, "model", "K-quant rewrites kept from load: %.1f MiB of %.1f",
            m->kept_bytes / 1048576.0, total / 1048576.0);
    if ((rc = ebb_cl_check(clFinish(m->cl->q), diag, "rewriting the K-quant weights")))
        return rc;
    if (m->kept_bytes == total) {
        release(&m->k4_a);
        release(&m->k4_b);
        release(&m->k8);
        m->k4_blocks = m->k8_blocks = 0;
    }
    return EBB_OK;
}

static ebb_err alloc_scratch(struct clm *m, struct ebb_diag *diag)
{
    const struct ebb__hparams *hp = &m->hp;
    size_t f = sizeof(float);
    uint32_t max_chunks = (m->n_ctx + m->tu.att_chunk - 1) / m->tu.att_chunk;
    size_t rows = m->n_seq < m->n_batch ? m->n_seq : m->n_batch; /* decode rows a chunk can hold */
    m->max_chunks = max_chunks;
    m->n_dec_max = (uint32_t)rows;
    /* The device top-k's partials: a sorted list of up to TOPK_MAX per tile of a row (a
     * vocabulary beyond TOPK_PARTS_MAX tiles takes the host's). */
    size_t parts = ((size_t)hp->n_vocab + TOPK_TILE - 1) / TOPK_TILE;
    if (parts > TOPK_PARTS_MAX)
        m->tu.topk_host = 1;
    m->topk_parts = m->tu.topk_host ? 0 : (int)parts;
    parts = m->topk_parts ? parts : 1;
    size_t out = ebb__clm_out_rows(m);
    ebb_err rc;
    if ((rc = ebb__clm_alloc(m, m->n_batch * sizeof(cl_int), &m->ids, "token ids", diag)) ||
        (rc = ebb__clm_alloc(m, m->n_batch * f * hp->n_embd, &m->x, "activations", diag)) ||
        (rc = ebb__clm_alloc(m, m->n_batch * f * hp->n_embd, &m->h, "activations", diag)) ||
        (rc = ebb__clm_alloc(m, m->n_batch * f * m->n_qkv, &m->qkv, "activations", diag)) ||
        (rc = ebb__clm_alloc(m, m->n_batch * f * m->n_q, &m->att, "activations", diag)) ||
        (rc = ebb__clm_alloc(m, m->n_batch * f * 2 * hp->n_ff, &m->gu, "activations", diag)) ||
        (rc = ebb__clm_alloc(m, m->n_batch * f * hp->n_ff, &m->ff, "activations", diag)) ||
        (rc = ebb__clm_alloc(m, out * f * hp->n_embd, &m->hl, "activations", diag)) ||
        (rc = ebb__clm_alloc(m, out * f * hp->n_vocab, &m->logits, "logits", diag)) ||
        (rc = ebb__clm_alloc(m, rows * f * hp->n_head * max_chunks * hp->head_dim, &m->po,
                             "attention", diag)) ||
        (rc = ebb__clm_alloc(m, rows * 2 * f * hp->n_head * max_chunks, &m->pml, "attention",
                             diag)) ||
        (rc = ebb__clm_alloc(m, 2 * m->n_batch * sizeof(cl_int), &m->rt, "batch rows", diag)) ||
        (rc = ebb__clm_alloc(m, m->n_batch * sizeof(cl_int), &m->dr, "batch rows", diag)) ||
        (m->xl_rows && (STREAMING(m) || m->ml.on) &&
         (rc = ebb__clm_alloc(m, (size_t)m->xl_rows * f * hp->n_embd, &m->xl,
                              "layer-major prefill rows", diag))) ||
        (rc = ebb__clm_alloc(m, f * out * parts * TOPK_MAX, &m->tpv, "top-k", diag)) ||
        (rc = ebb__clm_alloc(m, sizeof(cl_int) * out * parts * TOPK_MAX, &m->tpi, "top-k", diag)) ||
        (m->k_attn_pre_mma &&
         ((rc = ebb__clm_alloc(m, ATT_SPLIT_ROWS * f * m->n_q, &m->apo, "attention", diag)) ||
          (rc = ebb__clm_alloc(m, ATT_SPLIT_ROWS * 2 * f * hp->n_head, &m->apml, "attention",
                               diag)))) ||
        (rc = ebb__clm_alloc(m, f * out * TOPK_MAX, &m->tov, "top-k", diag)) ||
        (rc = ebb__clm_alloc(m, sizeof(cl_int) * out * TOPK_MAX, &m->toi, "top-k", diag)))
        return rc;
    if (m->k_attn_rope_q8) {
        cl_int zero = 0;
        size_t n = sizeof(cl_int) * hp->n_head;
        if ((rc = ebb__clm_alloc(m, n, &m->att_cnt, "attention", diag)) ||
            (rc = ebb_cl_check(clEnqueueFillBuffer(m->cl->q, m->att_cnt, &zero, sizeof(zero), 0, n,
                                                   0, NULL, NULL),
                               diag, "clearing the attention's counts")))
            return rc;
    }
    if (m->tu.mv_q8) {
        size_t wide = hp->n_embd > hp->n_ff ? hp->n_embd : hp->n_ff;
        wide = wide > m->n_q ? wide : m->n_q;
        /* the k experts' SwiGLU outputs of a MoE layer, quantized together for moe_down_q8 */
        size_t moe_w = (size_t)hp->n_expert_used * hp->n_ff_exp;
        wide = wide > moe_w ? wide : moe_w;
        /* one row for decode; matvec_q8r's batches take up to q8r_max rows */
        size_t q8_rows =
            m->tu.q8r_max > 1 ? (m->tu.q8r_max < m->n_batch ? m->tu.q8r_max : m->n_batch) : 1;
        if ((rc = ebb__clm_alloc(m, q8_rows * wide, &m->xq, "8-bit inputs", diag)) ||
            (rc = ebb__clm_alloc(m, q8_rows * 2 * f * (wide / 32 + 1), &m->xd, "8-bit inputs",
                                 diag)))
            return rc;
    }
    if (m->tu.mm_mma && m->tu.mmq && m->tu.mms_max) {
        size_t wide = hp->n_embd > hp->n_ff ? hp->n_embd : hp->n_ff;
        wide = wide > m->n_q ? wide : m->n_q;
        if ((rc = ebb__clm_alloc(m, (size_t)m->n_batch * wide, &m->mq_x, "8-bit prefill inputs",
                                 diag)) ||
            (rc = ebb__clm_alloc(m, (size_t)m->n_batch * 2 * f * (wide / 32), &m->mq_h,
                                 "8-bit prefill inputs", diag)))
            return rc;
        m->mq_wide = (uint32_t)wide;
        /* MMQ_RES's second pass: the normed inputs and the attention's output */
        size_t w2 = hp->n_embd > m->n_q ? hp->n_embd : m->n_q;
        if (hp->n_embd <= m->tu.mmq_res &&
            ((rc = ebb__clm_alloc(m, (size_t)m->n_batch * w2, &m->mq_x2,
                                  "8-bit prefill inputs' second pass", diag)) ||
             (rc = ebb__clm_alloc(m, (size_t)m->n_batch * 2 * f * (w2 / 32), &m->mq_h2,
                                  "8-bit prefill inputs' second pass", diag))))
            return rc;
        m->mq_wide2 = m->mq_x2 ? (uint32_t)w2 : 0;
        /* split products (a batch's of mmqs..mmq - 1 rows, prefill's): the slices' sums of the
         * widest n_out among the layers' products (mmq_slices splits only what fits) */
        bool bs = m->tu.mmqs && m->tu.mmqs_split && m->tu.mmqs < m->tu.mmq,
             ps = m->tu.mmq_stage && m->tu.mmql_split;
        if (bs || ps) {
            /* a batch's products any split (mmq - 1 rows at most); prefill's as many slices as
             * fit in 64 MiB */
            size_t brows = (size_t)m->tu.mmq - 1 < m->n_batch ? (size_t)m->tu.mmq - 1 : m->n_batch;
            size_t bpart = bs ? EBB_CL_MMQS_SPLIT_MAX * brows * wide : 0;
            size_t ppart = ps ? EBB_CL_MMQS_SPLIT_MAX * m->n_batch * wide : 0;
            ppart = ppart < ((size_t)16 << 20) ? ppart : (size_t)16 << 20;
            cl_int zero = 0;
            m->mq_part_n = bpart > ppart ? bpart : ppart;
            if ((rc = ebb__clm_alloc(m, m->mq_part_n * f, &m->mq_part, "split products", diag)) ||
                (rc = ebb__clm_alloc(m, sizeof(cl_int) * EBB_CL_MMQS_TILES_MAX, &m->mq_cnt,
                                     "split products", diag)) ||
                (rc = ebb_cl_check(clEnqueueFillBuffer(m->cl->q, m->mq_cnt, &zero, sizeof(zero), 0,
                                                       sizeof(cl_int) * EBB_CL_MMQS_TILES_MAX, 0,
                                                       NULL, NULL),
                                   diag, "clearing the split products' counts")))
                return rc;
        }
    }
    /* the K-quant rewrites' scratch: the largest such weight a layer holds (placed, or
     * streamed; the output's products go the raw way where they are larger) */
    if (m->mq_x) {
        alloc_ksplit(m);
        if ((rc = keep_ksplit(m, diag)))
            return rc;
    }
    m->host_logits = malloc(f * hp->n_vocab);
    m->host_h = malloc(f * m->n_batch * hp->n_embd);
    m->host_ids = malloc(sizeof(int32_t) * m->n_batch);
    m->host_ti = malloc(sizeof(int32_t) * ebb__clm_out_rows(m) * TOPK_MAX);
    m->host_tv = malloc(f * ebb__clm_out_rows(m) * TOPK_MAX);
    m->host_rt = malloc(sizeof(int32_t) * 2 * m->n_batch);
    m->host_dr = malloc(sizeof(int32_t) * m->n_batch);
    m->bparts = calloc(m->n_seq, sizeof(*m->bparts));
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const struct layer *L = &m->layers[l];
        if (L->kv_len < m->n_ctx) {
            m->ring_len = L->kv_len;
            m->ring_win = L->win;
        }
    }
    if (m->ring_len) {
        m->ring_toks = calloc((size_t)m->n_seq * m->n_ctx, sizeof(int32_t));
        m->ring_top = calloc(m->n_seq, sizeof(uint32_t));
        if (!m->ring_toks || !m->ring_top)
            return EBB_ENOMEM;
    }
    return m->host_logits && m->host_h && m->host_ids && m->host_rt && m->host_dr && m->bparts &&
                   m->host_ti && m->host_tv
               ? EBB_OK
               : EBB_ENOMEM;
}

/* Normed rows h[r0..r0+nr) to rows at..at+nr of the head's input hl. */
static ebb_err head_copy(struct clm *m, int r0, int at, int nr, struct ebb_diag *diag)
{
    size_t row = sizeof(float) * m->hp.n_embd;
    cl_int e =
        clEnqueueCopyBuffer(m->cl->q, m->h, m->hl, row * r0, row * at, row * nr, 0, NULL, NULL);
    return ebb_cl_check(e, diag, "copy rows for the output head");
}

/* Logits of the first nr rows of hl into the logits scratch. */
static ebb_err head_rows(struct clm *m, int nr, struct ebb_diag *diag)
{
    const struct ebb_cl_weight *w = m->tied ? &m->embd : &m->output;
    return ebb__clm_wmul(m, w, m->hl, (int)m->hp.n_embd, m->logits, (int)m->hp.n_vocab, 0, NULL,
                         NULL, nr, diag);
}

/* Logits of normed rows h[r0..r0+nr) into the logits scratch (nr <= ebb__clm_out_rows). */
static ebb_err head(struct clm *m, int r0, int nr, struct ebb_diag *diag)
{
    ebb_err rc = head_copy(m, r0, 0, nr, diag);
    return rc ? rc : head_rows(m, nr, diag);
}

/* Logits of a single decoded token straight from the residual row, the final norm folded in. */
static ebb_err head_decode(struct clm *m, struct ebb_diag *diag)
{
    const struct ebb_cl_weight *w = m->tied ? &m->embd : &m->output;
    if (!m->tu.mv_fold && !m->k_q8) { /* CPUs: the norm once, not once per vocabulary row */
        ebb_err rc = ebb__clm_rmsnorm(m, m->x, m->output_norm, m->hl, 1, diag);
        return rc ? rc : head_rows(m, 1, diag);
    }
    return ebb__clm_wmul(m, w, m->x, (int)m->hp.n_embd, m->logits, (int)m->hp.n_vocab, 0, NULL,
                         m->output_norm, 1, diag);
}

static ebb_err read_back(struct clm *m, cl_mem b, size_t off, size_t n, void *dst,
                         struct ebb_diag *diag)
{
    return ebb_cl_read(m->cl, b, off, n, dst, diag);
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

/* Adds rows r0..r0+n of host_h to sum (n_embd). */
static void add_rows(const struct clm *m, int r0, int n, float *sum)
{
    const uint32_t d = m->hp.n_embd;
    for (int t = r0; t < r0 + n; t++)
        for (uint32_t i = 0; i < d; i++)
            sum[i] += m->host_h[(size_t)t * d + i];
}

/* Embedding output mode: adds the final-normed hidden states of the nt tokens in m->x to sum
 * (n_embd), summed on the host. */
static ebb_err hidden_sum(struct clm *m, int nt, float *sum, struct ebb_diag *diag)
{
    const uint32_t d = m->hp.n_embd;
    ebb_err rc = ebb__clm_rmsnorm(m, m->x, m->output_norm, m->h, nt, diag);
    if (rc || (rc = read_back(m, m->h, 0, sizeof(float) * d * (size_t)nt, m->host_h, diag)))
        return rc;
    add_rows(m, 0, nt, sum);
    return EBB_OK;
}

/* Enqueues the device top-k (k <= TOPK_MAX) of the first nr rows of the logits scratch into
 * tov / toi (nr rows of k): topk_part over tiles of TOPK_TILE logits, then topk_merge, a
 * work-group per row. */
static ebb_err topk_run(struct clm *m, int nr, int k, struct ebb_diag *diag)
{
    int n = (int)m->hp.n_vocab, parts = m->topk_parts;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(m->logits), EBB_CL_ARG(n), EBB_CL_ARG(k),
                             EBB_CL_ARG(m->tpv), EBB_CL_ARG(m->tpi)};
    struct ebb_cl_arg b[] = {EBB_CL_ARG(m->tpv), EBB_CL_ARG(m->tpi), EBB_CL_ARG(parts),
                             EBB_CL_ARG(k),      EBB_CL_ARG(m->tov), EBB_CL_ARG(m->toi)};
    size_t g1[2] = {(size_t)parts * TOPK_WG, (size_t)nr}, g2[2] = {TOPK_WG, (size_t)nr};
    size_t l[2] = {TOPK_WG, 1};
    ebb_err rc;
    if ((rc = ebb_cl_set_args(m->k_topk1, 0, a, 5, diag)) ||
        (rc = ebb_cl_run(m->cl, m->k_topk1, 2, g1, l, diag)) ||
        (rc = ebb_cl_set_args(m->k_topk2, 0, b, 6, diag)))
        return rc;
    return ebb_cl_run(m->cl, m->k_topk2, 2, g2, l, diag);
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
    if (k > TOPK_MAX || m->tu.topk_host) {
        float *lg = out->logits ? out->logits : m->host_logits;
        if (!out->logits && (rc = read_back(m, m->logits, 0, sizeof(float) * nv, lg, diag)))
            return rc;
        host_topk(lg, nv, k, out->top_ids, out->top_logits);
        return EBB_OK;
    }
    if ((rc = topk_run(m, 1, (int)k, diag)))
        return rc;
    /* The ids without waiting, the logits after them with one wait for both. */
    cl_int e = clEnqueueReadBuffer(m->cl->q, m->toi, CL_FALSE, 0, sizeof(int32_t) * k, out->top_ids,
                                   0, NULL, NULL);
    if ((rc = ebb_cl_check(e, diag, "reading top-k")))
        return rc;
    if ((rc = read_back(m, m->tov, 0, sizeof(float) * k, out->top_logits, diag)))
        clFinish(m->cl->q); /* the ids' read must not land after the call */
    return rc;
}

/* The embedding of the token ids in m->ids for nt rows, into m->x. */
static ebb_err embed(struct clm *m, int nt, struct ebb_diag *diag)
{
    float scale = m->embd_scale;
    int n_embd = (int)m->hp.n_embd;
    struct ebb_cl_arg a[] = {EBB_CL_ARG(n_embd), EBB_CL_ARG(m->ids), EBB_CL_ARG(m->x),
                             EBB_CL_ARG(scale)};
    struct ebb_cl_wprog *p = NULL;
    size_t g[2] = {m->hp.n_embd / 4, (size_t)nt};
    ebb_err rc;
    if ((rc = ebb__clm_prog_for(m, &m->embd.layout, &p, diag)) ||
        (rc = ebb_cl_weight_set_args(&m->embd, p->get_rows, 0, diag)) ||
        (rc = ebb_cl_set_args(p->get_rows, 2, a, 4, diag)))
        return rc;
    return ebb_cl_run(m->cl, p->get_rows, 2, g, NULL, diag);
}

/* The embedding of the token ids in m->ids and every layer, for the chunk's rows: the hidden
 * states end in m->x. */
static ebb_err stage_layers(struct clm *m, const struct clm_rows *rows, struct ebb_diag *diag);

static ebb_err forward(struct clm *m, const struct clm_rows *rows, struct ebb_diag *diag)
{
    ebb_err rc = embed(m, rows->nt, diag);
    /* A layer split's stages in order: split_send waits for a stage's rows and writes them to
     * the next stage, whose layers are enqueued after it (with the SPLIT_GATE knob on, every
     * stage is enqueued first, each next one held by a gate opened below once its rows are
     * read back). */
    for (struct clm *s = m; s && !rc; s = s->next)
        if (!(rc = stage_layers(s, rows, diag)) && s->next)
            rc = ebb__clm_split_send(s, rows->nt, diag);
    if (m->next) {
        ebb_err rg = ebb__clm_split_gates(m, !rc, diag);
        rc = rc ? rc : rg;
    }
    return rc;
}

/* Layers l0..l1-1 of stage m for the chunk's rows, from m->x to m->x. */
static ebb_err stage_layers(struct clm *m, const struct clm_rows *rows, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    for (uint32_t l = m->l0; l < m->l1; l++) {
        if (STREAMING(m) && l == m->first_host)
            return ebb__clm_host_layers(m, rows, diag); /* the rest, on the host */
        if (!STREAMING(m) || ebb_stream_is_resident(m->st, l))
            rc = ebb__clm_layer(m, &m->layers[l], rows, diag);
        else
            rc = ebb__clm_streamed_layer(m, l, rows, 1, diag);
        if (rc)
            return rc;
    }
    return EBB_OK;
}

/* Layer-major prefill of n (<= xl_rows) tokens of slot seq at pos (docs/STREAMER.md, "Long
 * prompts"): every chunk is embedded into m->xl, then each layer takes the chunks in turn, so
 * that a streamed layer crosses the link once for them all instead of once per chunk. The
 * kernels and their order within a chunk are those of forward(), so the numbers are the same.
 * Leaves the last chunk's rows in m->x and their count in *nt_last. */
static ebb_err forward_long(struct clm *m, uint32_t seq, const int32_t *tokens, uint32_t n,
                            uint32_t pos, int *nt_last, struct ebb_diag *diag)
{
    struct clm_part parts[LONG_ROWS_MAX / N_BATCH_MIN];
    struct clm_rows rows[LONG_ROWS_MAX / N_BATCH_MIN];
    uint32_t nc = (n + m->n_batch - 1) / m->n_batch;
    size_t row = sizeof(float) * m->hp.n_embd;
    ebb_err rc = EBB_OK;
    for (uint32_t i = 0; i < nc && !rc; i++) {
        int nt = (int)(n - i * m->n_batch < m->n_batch ? n - i * m->n_batch : m->n_batch);
        parts[i] =
            (struct clm_part){.seq = seq, .r0 = 0, .n = nt, .pos = (int)(pos + i * m->n_batch)};
        rows[i] = (struct clm_rows){.nt = nt, .n_parts = 1, .parts = &parts[i]};
        rc = ebb_cl_check(clEnqueueWriteBuffer(m->cl->q, m->ids, CL_FALSE, 0,
                                               sizeof(int32_t) * (size_t)nt,
                                               tokens + (size_t)i * m->n_batch, 0, NULL, NULL),
                          diag, "writing token ids");
        if (!rc && !(rc = embed(m, nt, diag)) && (nc > 1 || m->ml.on))
            rc = ebb_cl_check(clEnqueueCopyBuffer(m->cl->q, m->x, m->xl, 0,
                                                  (size_t)i * m->n_batch * row, nt * row, 0, NULL,
                                                  NULL),
                              diag, "copying a chunk's rows out");
    }
    for (uint32_t l = 0; l < m->hp.n_layer && !rc; l++)
        rc = !STREAMING(m) ? ebb__clm_moe_long_layer(m, l, rows, nc, diag) /* expert cache */
             : ebb_stream_is_resident(m->st, l)
                 ? ebb__clm_layer_chunks(m, &m->layers[l], rows, nc, diag)
                 : ebb__clm_streamed_layer(m, l, rows, nc, diag);
    if (rc)
        return rc;
    /* the last layer ran the last chunk last: its rows are in m->x */
    *nt_last = rows[nc - 1].nt;
    return EBB_OK;
}

/* Rings. A windowed layer whose cache is a ring of ring_len = window + m->n_batch positions
 * (kv_layout) holds, of the positions before an evaluation at pos, those from ring_top - ring_len
 * on: ring_top is one past the highest position written since the slot's last evaluation from
 * 0, and positions are written contiguously from 0, so nothing aliasing them was written since.
 * Continuing (or rolling back up to m->n_batch positions, as speculative decoding does) finds the
 * window there. A caller that goes back further (the scheduler reusing a shorter prefix of a
 * longer previous sequence) would find keys overwritten: the slot's tokens 0..pos-1, kept here,
 * are then evaluated again first, as llama.cpp re-processes a prompt its sliding-window cache
 * cannot serve. */
static ebb_err clm_eval(void *ctx, uint32_t seq, const int32_t *tokens, uint32_t n, uint32_t pos,
                        struct ebb_model_out *out, struct ebb_diag *diag);

/* Before an evaluation of slot seq at pos: rebuilds its rings when they lost part of the
 * window behind pos. */
static ebb_err ring_before(struct clm *m, uint32_t seq, uint32_t pos, struct ebb_diag *diag)
{
    if (!m->ring_toks || !pos)
        return EBB_OK;
    uint64_t need = pos >= m->ring_win ? pos - m->ring_win + 1 : 0;
    if (need + m->ring_len >= m->ring_top[seq])
        return EBB_OK;
    return clm_eval(m, seq, m->ring_toks + (size_t)seq * m->n_ctx, pos, 0, NULL, diag);
}

/* Keeps the ids of an evaluation of slot seq at pos (checked against n_ctx) for ring_before. */
static void ring_record(struct clm *m, uint32_t seq, const int32_t *tokens, uint32_t n,
                        uint32_t pos)
{
    if (!m->ring_toks)
        return;
    int32_t *dst = m->ring_toks + (size_t)seq * m->n_ctx + pos;
    if (dst != tokens)
        memcpy(dst, tokens, sizeof(int32_t) * n);
    m->ring_top[seq] = !pos || pos + n > m->ring_top[seq] ? pos + n : m->ring_top[seq];
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
    if ((rc = ring_before(m, seq, pos, diag)))
        return rc;
    ring_record(m, seq, tokens, n, pos);
    uint64_t t0 = STREAMING(m) ? ebb__clm_now_ns() : 0;
    if (STREAMING(m) && (rc = ebb__clm_stream_between(m, diag)))
        goto out;
    /* Layer-major where streamed layers would otherwise cross the link once per chunk, and only
     * the last row's logits (if any) are wanted. */
    bool lm = STREAMING(m) && m->xl && n > m->n_batch && m->first_host == m->hp.n_layer &&
              ebb_stream_n_resident(m->st) < m->hp.n_layer &&
              !(out && (out->hidden_sum || out->logits_all));
    /* Or where the expert cache would copy a layer's experts once per chunk (docs/STREAMER.md,
     * "Long prompts through the expert cache"); a pass ends on a chunk the grouped products
     * take, as chunk after chunk would, so that the rows are the same. */
    bool lmx = m->ml.on && m->xl && !(out && (out->hidden_sum || out->logits_all));
    for (uint32_t c = 0, step; c < n; c += step) {
        int nt;
        step = n - c < m->xl_rows ? n - c : m->xl_rows;
        if (lmx && step > m->n_batch && step % m->n_batch &&
            !ebb__clm_moe_long_takes(m, step % m->n_batch))
            step -= step % m->n_batch;
        if (lm || (lmx && (step > m->n_batch ||
                           (step >= MOE_LONG_MIN && ebb__clm_moe_long_takes(m, step))))) {
            if ((rc = forward_long(m, seq, tokens + c, step, pos + c, &nt, diag)))
                goto out;
        } else {
            nt = (int)(n - c < m->n_batch ? n - c : m->n_batch);
            step = (uint32_t)nt;
            cl_int e = clEnqueueWriteBuffer(m->cl->q, m->ids, CL_FALSE, 0, sizeof(int32_t) * nt,
                                            tokens + c, 0, NULL, NULL);
            if ((rc = ebb_cl_check(e, diag, "writing token ids")))
                goto out;
            struct clm_part part = {.seq = seq, .r0 = 0, .n = nt, .pos = (int)(pos + c)};
            struct clm_rows rows = {.nt = nt, .n_parts = 1, .parts = &part};
            if ((rc = forward(m, &rows, diag)))
                goto out;
        }
        struct clm *o = last_stage(m); /* the output head's stage */
        if (out && out->hidden_sum && (rc = hidden_sum(o, nt, out->hidden_sum, diag)))
            goto out;
        bool want_last = out && (out->logits || out->top_k) && c + step == n;
        if (!want_last && !(out && out->logits_all))
            continue; /* a prefill chunk or an embedding: no logits */
        if (nt == 1 && !(out && out->logits_all)) {
            if (want_last && (rc = head_decode(o, diag)))
                goto out;
            continue;
        }
        if ((rc = ebb__clm_rmsnorm(o, o->x, o->output_norm, o->h, nt, diag)))
            goto out;
        if (out && out->logits_all) {
            const int g = (int)ebb__clm_out_rows(o);
            for (int r = 0; r < nt; r += g) {
                int nr = nt - r < g ? nt - r : g;
                size_t row = sizeof(float) * o->hp.n_vocab;
                if ((rc = head(o, r, nr, diag)) ||
                    (rc = read_back(o, o->logits, 0, row * nr,
                                    out->logits_all + (c + r) * o->hp.n_vocab, diag)))
                    goto out;
            }
        }
        if (want_last && (rc = head(o, nt - 1, 1, diag)))
            goto out;
    }
    if (out && (out->logits || out->top_k))
        rc = outputs(last_stage(m), out, diag);
    else
        rc = finish_all(m, diag);
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

/* The next chunk of a batch: rows taken in order from the parts, from row *off of part *pi on
 * (a part may straddle chunks); fills m->bparts and the host tables (token ids, each row's
 * slot and position, the decode rows) and advances *pi / *off. */
static void batch_chunk(struct clm *m, const struct ebb_model_seq *seqs, uint32_t n_seqs,
                        uint32_t *pi, uint32_t *off, struct clm_rows *rows)
{
    int nt = 0, n_dec = 0;
    uint32_t np = 0;
    int nb = (int)m->n_batch;
    while (nt < nb && *pi < n_seqs) {
        const struct ebb_model_seq *s = &seqs[*pi];
        int k = (int)(s->n - *off) < nb - nt ? (int)(s->n - *off) : nb - nt;
        struct clm_part *p = &m->bparts[np++];
        *p = (struct clm_part){
            .seq = s->seq, .r0 = nt, .n = k, .pos = (int)(s->pos + *off), .src = *pi, .off = *off};
        memcpy(m->host_ids + nt, s->tokens + *off, sizeof(int32_t) * (size_t)k);
        for (int r = 0; r < k; r++) {
            m->host_rt[2 * (nt + r)] = (int32_t)s->seq;
            m->host_rt[2 * (nt + r) + 1] = p->pos + r;
        }
        if (k == 1)
            m->host_dr[n_dec++] = nt;
        nt += k;
        *off += (uint32_t)k;
        if (*off == s->n) {
            (*pi)++;
            *off = 0;
        }
    }
    *rows = (struct clm_rows){.nt = nt, .n_parts = np, .parts = m->bparts, .n_dec = n_dec};
}

/* Writes the chunk's tables without waiting: the host arrays stay untouched until the queue
 * has finished (the next chunk waits for it first, and the call ends with it finished). */
static ebb_err batch_write(struct clm *m, const struct clm_rows *rows, struct ebb_diag *diag)
{
    size_t nt = (size_t)rows->nt, i4 = sizeof(int32_t);
    cl_int e =
        clEnqueueWriteBuffer(m->cl->q, m->ids, CL_FALSE, 0, i4 * nt, m->host_ids, 0, NULL, NULL);
    /* every stage of a layer split attends with the rows' slots and positions */
    for (struct clm *s = m; s && !e; s = s->next) {
        cl_command_queue q = s->cl->q;
        if (rows->n_parts > 1)
            e = clEnqueueWriteBuffer(q, s->rt, CL_FALSE, 0, 2 * i4 * nt, m->host_rt, 0, NULL, NULL);
        if (!e && rows->n_parts > 1 && rows->n_dec)
            e = clEnqueueWriteBuffer(q, s->dr, CL_FALSE, 0, i4 * (size_t)rows->n_dec, m->host_dr, 0,
                                     NULL, NULL);
    }
    return ebb_cl_check(e, diag, "writing the batch's rows");
}

/* Whether part p of the chunk holds its request's last row and logits of it are wanted. */
static bool wants_last(const struct ebb_model_seq *seqs, const struct clm_part *p)
{
    const struct ebb_model_out *o = seqs[p->src].out;
    return o && (o->logits || o->top_k) && p->off + (uint32_t)p->n == seqs[p->src].n;
}

/* The device top-k (k <= TOPK_MAX) of the first nr rows of the logits scratch, read back
 * without waiting into host_tv / host_ti (nr rows of k). */
static ebb_err topk_rows(struct clm *m, int nr, int k, struct ebb_diag *diag)
{
    size_t bytes = 4 * (size_t)nr * k;
    ebb_err rc = topk_run(m, nr, k, diag);
    if (rc)
        return rc;
    cl_int e = clEnqueueReadBuffer(m->cl->q, m->toi, CL_FALSE, 0, bytes, m->host_ti, 0, NULL, NULL);
    if (!e)
        e = clEnqueueReadBuffer(m->cl->q, m->tov, CL_FALSE, 0, bytes, m->host_tv, 0, NULL, NULL);
    return ebb_cl_check(e, diag, "reading top-k");
}

/* The head over the nr rows gathered in hl for parts grp, and their outputs: logits read back
 * without waiting, one device top-k pass pair for all rows (the largest k asked: a top-k list
 * begins with every shorter one), one wait; top-k beyond TOPK_MAX (or all of it with
 * tu.topk_host) on the host as alone. */
static ebb_err batch_group(struct clm *m, const struct ebb_model_seq *seqs,
                           const struct clm_part *const *grp, int nr, struct ebb_diag *diag)
{
    uint32_t nv = m->hp.n_vocab;
    size_t row = sizeof(float) * nv;
    int kk = 0;
    ebb_err rc = head_rows(m, nr, diag);
    for (int j = 0; j < nr && !rc; j++) {
        struct ebb_model_out *o = seqs[grp[j]->src].out;
        uint32_t k = o->top_k < nv ? o->top_k : nv;
        if (k <= TOPK_MAX && (int)k > kk && !m->tu.topk_host)
            kk = (int)k;
        if (o->logits)
            rc = ebb_cl_check(clEnqueueReadBuffer(m->cl->q, m->logits, CL_FALSE, row * j, row,
                                                  o->logits, 0, NULL, NULL),
                              diag, "reading logits");
    }
    if (rc || (kk && (rc = topk_rows(m, nr, kk, diag))) || (rc = ebb_cl_finish(m->cl, diag)))
        return rc;
    for (int j = 0; j < nr; j++) {
        struct ebb_model_out *o = seqs[grp[j]->src].out;
        uint32_t k = o->top_k < nv ? o->top_k : nv;
        if (k && k <= TOPK_MAX && !m->tu.topk_host) {
            memcpy(o->top_ids, m->host_ti + (size_t)j * kk, sizeof(int32_t) * k);
            memcpy(o->top_logits, m->host_tv + (size_t)j * kk, sizeof(float) * k);
        } else if (k) {
            float *lg = o->logits ? o->logits : m->host_logits;
            if (!o->logits && (rc = read_back(m, m->logits, row * j, row, lg, diag)))
                return rc;
            host_topk(lg, nv, k, o->top_ids, o->top_logits);
        }
    }
    return EBB_OK;
}

/* The last rows' logits and top-k: the wanted rows gathered into the head's input, in groups
 * of ebb__clm_out_rows (a batch's step of up to N_OUT_MAX slots: one group); rows that follow
 * each other in h (a step's decode rows) move with one copy. */
static ebb_err batch_last(struct clm *m, const struct ebb_model_seq *seqs,
                          const struct clm_rows *rows, struct ebb_diag *diag)
{
    const struct clm_part *grp[N_OUT_MAX];
    const int g = (int)ebb__clm_out_rows(m);
    /* the last run rows, from h's row from, wait to be copied to hl's rows nr - run.. */
    int nr = 0, run = 0, from = 0;
    ebb_err rc;
    for (uint32_t i = 0; i < rows->n_parts; i++) {
        const struct clm_part *p = &rows->parts[i];
        if (!wants_last(seqs, p))
            continue;
        int r = p->r0 + p->n - 1;
        if (run && r != from + run) {
            if ((rc = head_copy(m, from, nr - run, run, diag)))
                return rc;
            run = 0;
        }
        if (!run)
            from = r;
        run++;
        grp[nr++] = p;
        if (nr == g) {
            if ((rc = head_copy(m, from, nr - run, run, diag)) ||
                (rc = batch_group(m, seqs, grp, nr, diag)))
                return rc;
            nr = run = 0;
        }
    }
    if (run && (rc = head_copy(m, from, nr - run, run, diag)))
        return rc;
    return nr ? batch_group(m, seqs, grp, nr, diag) : EBB_OK;
}

/* The chunk's outputs for every part: hidden sums, all-row logits, last-row logits. */
static ebb_err batch_outputs(struct clm *m, const struct ebb_model_seq *seqs,
                             const struct clm_rows *rows, struct ebb_diag *diag)
{
    bool hs = false, lg = false;
    for (uint32_t i = 0; i < rows->n_parts; i++) {
        const struct ebb_model_out *o = seqs[rows->parts[i].src].out;
        hs = hs || (o && o->hidden_sum);
        lg = lg || (o && o->logits_all) || wants_last(seqs, &rows->parts[i]);
    }
    if (!hs && !lg)
        return EBB_OK;
    const uint32_t nv = m->hp.n_vocab, d = m->hp.n_embd;
    ebb_err rc = ebb__clm_rmsnorm(m, m->x, m->output_norm, m->h, rows->nt, diag);
    if (!rc && hs)
        rc = read_back(m, m->h, 0, sizeof(float) * d * (size_t)rows->nt, m->host_h, diag);
    for (uint32_t i = 0; i < rows->n_parts && !rc; i++) {
        const struct clm_part *p = &rows->parts[i];
        struct ebb_model_out *o = seqs[p->src].out;
        if (o && o->hidden_sum)
            add_rows(m, p->r0, p->n, o->hidden_sum);
        const int g = (int)ebb__clm_out_rows(m);
        for (int r = 0; o && o->logits_all && r < p->n && !rc; r += g) {
            int n = p->n - r < g ? p->n - r : g;
            if (!(rc = head(m, p->r0 + r, n, diag)))
                rc = read_back(m, m->logits, 0, sizeof(float) * nv * (size_t)n,
                               o->logits_all + (size_t)(p->off + (uint32_t)r) * nv, diag);
        }
    }
    return rc ? rc : batch_last(m, seqs, rows, diag);
}

/* iface.eval_batch: every part's rows concatenated and evaluated in chunks of m->n_batch rows, each
 * chunk one forward pass (weights read once for all its rows; docs/ENGINE.md, "The batched
 * pass"). The parts were checked by model.c. */
static ebb_err clm_eval_batch(void *ctx, const struct ebb_model_seq *seqs, uint32_t n_seqs,
                              struct ebb_diag *diag)
{
    struct clm *m = ctx;
    ebb_err rc = EBB_OK;
    uint64_t total = 0;
    if (n_seqs > m->n_seq)
        return ebb_diag_set(diag, EBB_EINVAL, "%u parts for %u slots", n_seqs, m->n_seq);
    for (uint32_t i = 0; i < n_seqs; i++) {
        if (seqs[i].seq >= m->n_seq || !seqs[i].n || (uint64_t)seqs[i].pos + seqs[i].n > m->n_ctx)
            return ebb_diag_set(diag, EBB_EINVAL, "bad batch part %u (slot %u)", i, seqs[i].seq);
        total += seqs[i].n;
    }
    /* A lone long prompt: clm_eval's layer-major pass (docs/STREAMER.md, "Long prompts"). */
    if (n_seqs == 1 && m->xl && (seqs[0].n > m->n_batch || (m->ml.on && seqs[0].n >= MOE_LONG_MIN)))
        return clm_eval(m, seqs[0].seq, seqs[0].tokens, seqs[0].n, seqs[0].pos, seqs[0].out, diag);
    for (uint32_t i = 0; i < n_seqs; i++) {
        if ((rc = ring_before(m, seqs[i].seq, seqs[i].pos, diag)))
            return rc;
        ring_record(m, seqs[i].seq, seqs[i].tokens, seqs[i].n, seqs[i].pos);
    }
    uint64_t t0 = STREAMING(m) ? ebb__clm_now_ns() : 0;
    if (STREAMING(m) && (rc = ebb__clm_stream_between(m, diag)))
        goto out;
    uint32_t pi = 0, off = 0;
    while (pi < n_seqs) {
        struct clm_rows rows;
        if ((pi || off) && (rc = finish_all(m, diag)))
            goto out; /* the previous chunk's table writes read the host arrays */
        batch_chunk(m, seqs, n_seqs, &pi, &off, &rows);
        if ((rc = batch_write(m, &rows, diag)) || (rc = forward(m, &rows, diag)) ||
            (rc = batch_outputs(last_stage(m), seqs, &rows, diag)))
            goto out;
    }
    rc = finish_all(m, diag);
out:
    if (STREAMING(m)) {
        ebb_err rf = m->sc ? ebb_stream_cl_finish(m->sc, m->st, rc ? NULL : diag) : EBB_OK;
        rc = rc ? rc : rf;
        m->tokens += total;
        m->busy_ns += ebb__clm_now_ns() - t0;
        ebb__clm_stream_snapshot(m);
    }
    return rc;
}

/* Slot src's K and V entries of positions 0..n-1 into slot dst's, layer by layer, by copies on
 * the engine's in-order queue (so every later pass sees them). A layer's cache is (n_seq,
 * n_head_kv, kv_len) rows of ebb__clm_kv_row bytes (head_dim halves or Q8_0 blocks): one
 * rectangle per cache, a row per KV head, each n
 * positions long, or for a ring (kv_len < n_ctx) the whole ring, whatever positions it holds;
 * dst then takes src's ring state and token ids, so that its next evaluation rebuilds its rings
 * (ring_before) if src's no longer held the window behind n. Streamed layers keep their caches
 * resident, so every layer is here. */
static ebb_err clm_kv_copy(void *ctx, uint32_t src, uint32_t dst, uint32_t n, struct ebb_diag *diag)
{
    struct clm *m = ctx;
    if (m->next) { /* a layer split: every stage its own layers */
        ebb_err rc = clm_kv_copy(m->next, src, dst, n, diag);
        if (rc)
            return rc;
    }
    const size_t row = ebb__clm_kv_row(m);
    size_t so[3] = {0, (size_t)src * m->hp.n_head_kv, 0};
    size_t dso[3] = {0, (size_t)dst * m->hp.n_head_kv, 0};
    if (m->ring_toks) {
        memcpy(m->ring_toks + (size_t)dst * m->n_ctx, m->ring_toks + (size_t)src * m->n_ctx,
               sizeof(int32_t) * n);
        m->ring_top[dst] = m->ring_top[src];
    }
    if (m->host)
        ebb__ref_host_kv_copy(m->host, src, dst, n);
    uint32_t l1 = m->l1 < m->first_host ? m->l1 : m->first_host; /* host layers: no device cache */
    for (uint32_t l = m->l0; l < l1; l++) {
        const struct layer *L = &m->layers[l];
        bool ring = L->kv_len < m->n_ctx;
        size_t region[3] = {row * (ring ? L->kv_len : n), m->hp.n_head_kv, 1};
        size_t pitch = row * L->kv_len;
        cl_mem c[2] = {L->kc, L->vc};
        for (int k = 0; k < 2; k++) {
            ebb_err rc = ebb_cl_check(clEnqueueCopyBufferRect(m->cl->q, c[k], c[k], so, dso, region,
                                                              pitch, 0, pitch, 0, 0, NULL, NULL),
                                      diag, "clEnqueueCopyBufferRect (KV copy)");
            if (rc)
                return rc;
        }
    }
    return EBB_OK;
}

/* The prompt-cache store: one buffer of as many positions of every layer's K and V as bytes
 * (and the device's largest buffer) allows, laid out like one slot of pc_len positions per
 * layer so that an entry's positions are a rectangle of n_head_kv rows. Windowed layers whose
 * caches are rings hold only their window, not positions 0..n-1 of a prefix, so a model with
 * rings keeps no store (EBB_CL_KV_RING=0 gives its windowed layers whole caches, and a store);
 * neither does one with host layers (--host-layers), whose caches the host engine holds. */
static ebb_err clm_kv_store_new(void *ctx, uint64_t bytes, uint32_t *n_pos, struct ebb_diag *diag)
{
    struct clm *m = ctx;
    if (m->ring_len)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "windowed layers keep rings of their window (EBB_CL_KV_RING=0 keeps "
                            "whole caches)");
    if (m->host)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "host layers keep their KV cache on the host");
    /* A layer split: each stage keeps the positions of its own layers, the same positions. */
    const uint64_t per = 2 * (uint64_t)m->hp.n_layer * m->hp.n_head_kv * ebb__clm_kv_row(m);
    uint64_t n = per ? bytes / per : 0;
    for (struct clm *s = m; s; s = s->next) {
        uint64_t per_s = 2 * (uint64_t)(s->l1 - s->l0) * s->hp.n_head_kv * ebb__clm_kv_row(s);
        uint64_t most = per_s ? s->cl->info.max_alloc / per_s : n;
        n = n < most ? n : most;
    }
    n = n < UINT32_MAX ? n : UINT32_MAX;
    if (!n)
        return EBB_OK;
    for (struct clm *s = m; s; s = s->next) {
        uint64_t per_s = 2 * (uint64_t)(s->l1 - s->l0) * s->hp.n_head_kv * ebb__clm_kv_row(s);
        ebb_err rc = ebb__clm_alloc(s, (size_t)(n * per_s), &s->pc, "the prompt cache", diag);
        if (rc)
            return rc;
        s->pc_len = (uint32_t)n;
    }
    *n_pos = m->pc_len;
    return EBB_OK;
}

/* Slot seq's positions 0..n-1 of every layer to store positions at..at+n-1 (save) or back,
 * one rectangle copy per layer and cache on the engine's in-order queue. */
static ebb_err clm_kv_store_xfer(void *ctx, bool save, uint32_t seq, uint32_t at, uint32_t n,
                                 struct ebb_diag *diag)
{
    struct clm *m = ctx;
    if (m->next) { /* a layer split: every stage its own layers */
        ebb_err rc = clm_kv_store_xfer(m->next, save, seq, at, n, diag);
        if (rc)
            return rc;
    }
    const size_t row = ebb__clm_kv_row(m), nh = m->hp.n_head_kv;
    size_t region[3] = {row * n, nh, 1};
    for (uint32_t l = m->l0; l < m->l1; l++) {
        const struct layer *L = &m->layers[l];
        cl_mem c[2] = {L->kc, L->vc};
        for (size_t k = 0; k < 2; k++) {
            size_t co[3] = {0, (size_t)seq * nh, 0};
            size_t po[3] = {row * at, (2 * (size_t)(l - m->l0) + k) * nh, 0};
            size_t cp = row * L->kv_len, pp = row * m->pc_len;
            cl_int e = save ? clEnqueueCopyBufferRect(m->cl->q, c[k], m->pc, co, po, region, cp, 0,
                                                      pp, 0, 0, NULL, NULL)
                            : clEnqueueCopyBufferRect(m->cl->q, m->pc, c[k], po, co, region, pp, 0,
                                                      cp, 0, 0, NULL, NULL);
            ebb_err rc = ebb_cl_check(e, diag, "clEnqueueCopyBufferRect (prompt cache)");
            if (rc)
                return rc;
        }
    }
    return EBB_OK;
}

/* iface.counters: kernels enqueued and host synchronisations, the streamer's waits included. */
static bool clm_counters(void *ctx, struct ebb_model_counters *out)
{
    const struct clm *m = ctx;
    out->launches = out->syncs = out->wait_ns = 0;
    for (const struct clm *s = m; s; s = s->next) { /* a layer split's stages summed */
        out->launches += s->cl->n_launch;
        out->wait_ns += s->cl->wait_ns;
        out->syncs += s->cl->n_sync + ebb_stream_cl_waits(s->sc);
    }
    return true;
}

/* One engine on the opened device cl (taken over, closed with the engine even on failure) for
 * decoder layers l0..l1-1: the whole model, or a stage of a layer split, which places only its
 * layers' weights and KV cache, the token embeddings where it is the first (l0 == 0) and the
 * final norm and output head where it is the last (l1 == n_layer). */
static ebb_err stage_new(const struct ebb__arch *a, const struct ebb__hparams *hp,
                         const struct ebb_gguf *g, const struct ebb_model_params *p, uint32_t n_ctx,
                         struct ebb_cl *cl, uint32_t l0, uint32_t l1, uint64_t t_open,
                         struct clm **out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    struct clm *m = calloc(1, sizeof(*m));
    if (!m) {
        ebb_cl_close(cl);
        return EBB_ENOMEM;
    }
    m->cl = cl;
    m->l0 = l0;
    m->l1 = l1;
    m->a = a;
    m->hp = *hp;
    m->hp.n_ctx_run = n_ctx; /* longrope: the factor set for this context */
    m->n_ctx = n_ctx;
    m->g = g;
    if (pthread_mutex_init(&m->snap_mu, NULL)) {
        free(m);
        return EBB_ENOMEM;
    }
    m->snap_init = true;
    m->n_seq = p->n_seq ? p->n_seq : 1;
    m->first_host = hp->n_layer; /* no host layers unless the streamer places some */
    m->n_q = hp->n_head * hp->head_dim;
    m->n_kv = hp->n_head_kv * hp->head_dim;
    m->n_qkv = m->n_q + 2 * m->n_kv;
    if ((rc = ebb__clm_plan(a, &m->plan, diag)))
        goto out;
    if (!hp->n_head_kv || hp->n_head % hp->n_head_kv || hp->head_dim % 4 || hp->n_embd % 4 ||
        hp->n_ff % 4 || hp->n_rot > hp->head_dim || hp->n_rot % 2 || !n_ctx) {
        rc = ebb_diag_set(diag, EBB_EUNSUPPORTED,
                          "unsupported shape (heads %u/%u, head_dim %u, n_rot %u, n_ctx %u)",
                          hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_rot, n_ctx);
        goto out;
    }
    uint64_t t_dev = ebb__clm_now_ns();
    m->tu = ebb_cl_tuning_for(&m->cl->info);
    m->kv_type = p->kv_type;
    m->tu.kv_q8 = p->kv_type == EBB_KV_Q8_0;
    if (m->tu.kv_q8 && hp->head_dim % 32) {
        rc = ebb_diag_set(diag, EBB_EUNSUPPORTED,
                          "--kv-type q8_0 needs a head dimension that is a multiple of 32 (this "
                          "model's is %u); use --kv-type f16",
                          hp->head_dim);
        goto out;
    }
    /* The knobs' table (runtime/cl/cl-knobs-table.c, docs/TUNING.md) checked their ranges. */
    m->n_batch = m->tu.batch;
    m->att_split_max = m->tu.att_split;
    m->att_chunk_deep = m->tu.att_chunk_deep;
    m->att_deep_from = m->tu.att_deep_from ? m->tu.att_deep_from : 24 * m->att_chunk_deep;
    if ((m->tu.mm_mma || m->tu.att_mma) && m->tu.mv_ptx && !ebb_cl_mma_probe(m->cl))
        m->tu.mm_mma = m->tu.att_mma = 0; /* no tensor cores through PTX here: the fp32 GEMM */
    if (m->tu.att_async &&
        (!m->tu.att_mma || !m->tu.mv_ptx || m->tu.kv_q8 || !ebb_cl_async_probe(m->cl)))
        m->tu.att_async = 0; /* attn_prefill_mma stages its tiles through registers */
    if (m->tu.att_dasync && (!m->tu.mv_ptx || m->tu.kv_q8 || !ebb_cl_async_probe(m->cl)))
        m->tu.att_dasync = 0; /* decode attention's loads through registers */
    if (m->tu.mmq_async && (!m->tu.mm_mma || !m->tu.mv_ptx || !ebb_cl_async_probe(m->cl)))
        m->tu.mmq_async = 0; /* matmul_mmql stages its tiles through registers */
    /* the integer dot product builtins only for the 8-bit decode path, once they pass */
    if (m->tu.mv_idp && (!m->tu.mv_q8 || !ebb_cl_idp_probe(m->cl, NULL)))
        m->tu.mv_idp = 0;
    m->kv_ring = m->tu.kv_ring != 0; /* EBB_CL_KV_RING=0: windowed layers keep the whole context */
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
    uint64_t t_probe = ebb__clm_now_ns();
    if ((rc = build_kernels(m, diag)))
        goto out;
    uint64_t t_prog = ebb__clm_now_ns();
    if ((rc = stream_open(m, g, p, diag)) || (rc = ebb__clm_xc_open(m, g, p, diag)) ||
        (rc = ebb__clm_moe_long_open(m, diag)))
        goto out;
    uint64_t t_stream = ebb__clm_now_ns();
    if ((rc = ebb__clm_place_weights(m, g, diag)) || (rc = alloc_scratch(m, diag)))
        goto out;
    /* Where a model's open goes (issue 32: the first request to a model not loaded). */
    uint64_t t_end = ebb__clm_now_ns();
    ebb_log(EBB_LOG_INFO, "model",
            "OpenCL engine opened in %.3f s: device %.3f, probes %.3f, programs %.3f, streamer "
            "%.3f, weights and scratch %.3f",
            (t_end - t_open) / 1e9, (t_dev - t_open) / 1e9, (t_probe - t_dev) / 1e9,
            (t_prog - t_probe) / 1e9, (t_stream - t_prog) / 1e9, (t_end - t_stream) / 1e9);
    if (m->xc)
        m->iface.expert_cache = ebb__clm_xc_report;
    if (m->ml.on && m->xl) /* long prompts layer-major through the expert cache */
        m->iface.long_rows = m->xl_rows;
    if (STREAMING(m)) {
        if ((rc = ebb__clm_ensure_slots(m, diag)))
            goto out;
        ebb__clm_stream_snapshot(m);
        m->iface.stream_report = ebb__clm_stream_report;
        m->iface.stream_probe = ebb__clm_stream_probe;
        m->iface.stream_budget = ebb__clm_stream_budget;
        m->iface.stream_settle = ebb__clm_stream_settle;
        m->iface.stream_set_wake = ebb__clm_stream_set_wake;
        m->iface.n_ctx = m->n_ctx;
        m->iface.long_rows = m->xl && m->first_host == hp->n_layer ? m->xl_rows : 0;
    }
    m->iface.batch_rows = m->n_batch;
    char qin[48] = "";
    if (m->k_q8 && ebb_cl_qin_wg(&m->tu))
        snprintf(qin, sizeof(qin), ", quantized in the products (qin %u)", m->tu.qin);
    snprintf(m->name, sizeof(m->name), "opencl (%s%s%s%s%s%s)", m->cl->info.name,
             m->k_q8 ? ", 8-bit decode inputs" : "", qin,
             m->k_q8 && m->tu.mv_idp ? ", integer dot product builtins" : "",
             !m->tu.mm_mma || !m->tu.mv_ptx ? ""
             : m->mq_x                      ? ", int8 tensor-core prefill"
                                            : ", f16 tensor-core prefill",
             m->mq_x2 ? ", two-pass 8-bit prefill inputs (mmq_res)" : "");
    m->iface.name = m->name;
    m->iface.eval = clm_eval;
    m->iface.eval_batch = clm_eval_batch;
    m->iface.kv_copy = clm_kv_copy;
    m->iface.kv_store_new = clm_kv_store_new;
    m->iface.kv_store_xfer = clm_kv_store_xfer;
    m->iface.free = clm_free;
    m->iface.counters = clm_counters;
    m->iface.decode_bytes = ebb__clm_decode_bytes;
    m->iface.kernels = ebb__clm_kernels;
    *out = m;
    m = NULL;
out:
    clm_free(m);
    return rc;
}

/* A layer split's name: each device and its layers (the log line at open names the devices;
 * model.c keeps 127 characters). */
static void split_name(struct clm *m)
{
    size_t o = (size_t)snprintf(m->name, sizeof(m->name), "opencl layer split (");
    for (struct clm *s = m; s && o < sizeof(m->name); s = s->next)
        o += (size_t)snprintf(m->name + o, sizeof(m->name) - o, "%scl:%u:%u layers %u-%u%s",
                              s == m ? "" : ", ", s->cl->info.plat_idx, s->cl->info.dev_idx, s->l0,
                              s->l1 - 1, s->next ? "" : ")");
}

ebb_err ebb__cl_backend_new(const struct ebb__arch *a, const struct ebb__hparams *hp,
                            const struct ebb_gguf *g, const struct ebb_model_params *p,
                            uint32_t n_ctx, const struct ebb__backend_i **iface, void **ctx,
                            struct ebb_diag *diag)
{
    struct ebb_cl *cls[SPLIT_MAX] = {0};
    uint32_t bounds[SPLIT_MAX + 1], n = 0;
    struct clm *m = NULL, **link = &m;
    uint64_t t_open = ebb__clm_now_ns();
    ebb_err rc = ebb__clm_split_open(hp, g, p, cls, bounds, &n, diag);
    if (rc)
        return rc;
    if (!n) { /* one device */
        if (p->split == EBB_SPLIT_LAYER)
            ebb_log(EBB_LOG_INFO, "model",
                    "--split layer with one device ('%s'): nothing to split, the whole model on "
                    "it",
                    p->device ? p->device : "auto");
        if ((rc = ebb_cl_open(p->device, &cls[0], diag)))
            return rc;
        bounds[0] = 0;
        bounds[1] = hp->n_layer;
        n = 1;
    }
    for (uint32_t i = 0; i < n && !rc; i++) {
        rc = stage_new(a, hp, g, p, n_ctx, cls[i], bounds[i], bounds[i + 1],
                       i ? ebb__clm_now_ns() : t_open, link, diag); /* "device": the first's */
        cls[i] = NULL; /* the stage has it, or closed it */
        if (!rc)
            link = &(*link)->next;
    }
    for (struct clm *s = m; s && s->next && !rc; s = s->next)
        rc = ebb__clm_split_hand_new(s, diag);
    if (rc) {
        for (uint32_t i = 0; i < n; i++)
            ebb_cl_close(cls[i]);
        clm_free(m);
        return rc;
    }
    if (m->next) {
        split_name(m);
        m->iface.long_rows = 0;
        m->iface.expert_cache = NULL;
    }
    *iface = &m->iface;
    *ctx = m;
    return EBB_OK;
}
