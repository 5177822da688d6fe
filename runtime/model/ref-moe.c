/* The reference's mixture-of-experts op (EBB__OP_MOE, arch-int.h): per row, the router's
 * softmax over the experts, the top k, their weights renormalised and scaled as the family's
 * hyper-parameters say; then, expert by expert, the rows routed to it are gathered and run
 * through its gate, up and down matrices together (each weight row is read once per expert
 * and batch, and only the chosen experts' matrices are read at all), and each row's output is
 * added into its destination row times its weight. */
#include "ref-int.h"

#include <stdlib.h>
#include <string.h>

/* Softmax of one row's router scores in place, then its top k (ties: lower id first) into ids
 * and w, and w renormalised (clamped as llama.cpp clamps the sum) and scaled. */
static void route(const struct ebb__hparams *hp, float *p, int32_t *ids, float *w)
{
    const uint32_t E = hp->n_expert, K = hp->n_expert_used;
    float mx = p[0];
    for (uint32_t e = 1; e < E; e++)
        mx = p[e] > mx ? p[e] : mx;
    double sum = 0;
    for (uint32_t e = 0; e < E; e++) {
        p[e] = expf(p[e] - mx);
        sum += p[e];
    }
    for (uint32_t e = 0; e < E; e++)
        p[e] = (float)(p[e] / sum);
    uint32_t m = 0;
    for (uint32_t e = 0; e < E; e++) {
        if (m == K && !(p[e] > w[m - 1]))
            continue;
        uint32_t i = m < K ? m++ : m - 1;
        while (i > 0 && p[e] > w[i - 1]) {
            ids[i] = ids[i - 1];
            w[i] = w[i - 1];
            i--;
        }
        ids[i] = (int32_t)e;
        w[i] = p[e];
    }
    if (hp->expert_norm) {
        float s = 0;
        for (uint32_t k = 0; k < K; k++)
            s += w[k];
        s = s < 6.103515625e-5f ? 6.103515625e-5f : s;
        for (uint32_t k = 0; k < K; k++)
            w[k] /= s;
    }
    if (hp->expert_scale != 0.0f && hp->expert_scale != 1.0f)
        for (uint32_t k = 0; k < K; k++)
            w[k] *= hp->expert_scale;
}

/* Expert e's block over the m rows gathered in x: d[rows[j]] += roww[j] * down(act(gate x) *
 * up x). */
static void run_expert(struct ref *r, const struct ebb__op *op, const struct rtensor *t, uint32_t e,
                       uint32_t m, float *d)
{
    struct ref_moe *mo = &r->moe;
    const uint32_t D = r->hp.n_embd, F = r->hp.n_ff_exp;
    struct wmat g = ebb__ref_expert(&t[1].m, e), u = ebb__ref_expert(&t[2].m, e);
    struct wmat dn = ebb__ref_expert(&t[3].m, e);
    ebb__ref_matmul(r, &g, mo->x, mo->gate, m);
    ebb__ref_matmul(r, &u, mo->x, mo->up, m);
    for (uint64_t i = 0; i < (uint64_t)m * F; i++)
        mo->gate[i] = (op->arg == EBB__ACT_GELU_TANH ? ebb__ref_gelu(mo->gate[i])
                                                     : ebb__ref_silu(mo->gate[i])) *
                      mo->up[i];
    ebb__ref_matmul(r, &dn, mo->gate, mo->y, m);
    for (uint32_t j = 0; j < m; j++) {
        float *dr = d + (uint64_t)mo->rows[j] * D;
        const float *yr = mo->y + (uint64_t)j * D;
        for (uint32_t i = 0; i < D; i++)
            dr[i] += mo->roww[j] * yr[i];
    }
}

void ebb__ref_moe(struct ref *r, const struct ebb__op *op, const struct rtensor *t, const float *a,
                  float *d, uint32_t n)
{
    struct ref_moe *mo = &r->moe;
    const uint32_t E = r->hp.n_expert, K = r->hp.n_expert_used, D = r->hp.n_embd;
    ebb__ref_matmul(r, &t[0].m, a, mo->logits, n);
    for (uint32_t j = 0; j < n; j++)
        route(&r->hp, mo->logits + (uint64_t)j * E, mo->ids + (uint64_t)j * K,
              mo->w + (uint64_t)j * K);
    memset(d, 0, (uint64_t)n * D * sizeof(float));
    for (uint32_t e = 0; e < E; e++) {
        uint32_t m = 0;
        for (uint32_t j = 0; j < n; j++)
            for (uint32_t k = 0; k < K; k++)
                if (mo->ids[(uint64_t)j * K + k] == (int32_t)e) {
                    memcpy(mo->x + (uint64_t)m * D, a + (uint64_t)j * D, D * sizeof(float));
                    mo->rows[m] = j;
                    mo->roww[m++] = mo->w[(uint64_t)j * K + k];
                }
        if (m)
            run_expert(r, op, t, e, m, d);
    }
}

ebb_err ebb__ref_moe_alloc(struct ref *r, struct ebb_diag *diag)
{
    struct ref_moe *mo = &r->moe;
    const uint64_t B = EBB__REF_BATCH, E = r->hp.n_expert, K = r->hp.n_expert_used;
    const uint64_t D = r->hp.n_embd, F = r->hp.n_ff_exp;
    mo->logits = calloc(B * E, sizeof(float));
    mo->ids = calloc(B * K, sizeof(int32_t));
    mo->w = calloc(B * K, sizeof(float));
    mo->x = calloc(B * D, sizeof(float));
    mo->gate = calloc(B * F, sizeof(float));
    mo->up = calloc(B * F, sizeof(float));
    mo->y = calloc(B * D, sizeof(float));
    mo->rows = calloc(B, sizeof(uint32_t));
    mo->roww = calloc(B, sizeof(float));
    if (!mo->logits || !mo->ids || !mo->w || !mo->x || !mo->gate || !mo->up || !mo->y ||
        !mo->rows || !mo->roww)
        return ebb_diag_set(diag, EBB_ENOMEM, "reference backend: out of memory for experts");
    return EBB_OK;
}

void ebb__ref_moe_free(struct ref *r)
{
    struct ref_moe *mo = &r->moe;
    free(mo->logits);
    free(mo->ids);
    free(mo->w);
    free(mo->x);
    free(mo->gate);
    free(mo->up);
    free(mo->y);
    free(mo->rows);
    free(mo->roww);
}
