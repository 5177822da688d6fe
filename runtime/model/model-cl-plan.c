/* The family's description compiled for the OpenCL engine, once at load: runs of ops are
 * matched to the engine's fused steps, so an evaluation enqueues the same kernels a
 * hand-written forward pass would (decode folds each RMS norm and the gate activation into the
 * product that consumes it, adds the residual inside the product; prefill runs norm and
 * SwiGLU / GeGLU kernels over the token tile). The patterns:
 *   rms_norm(CUR, X) matmul(Q, CUR) matmul(K, CUR) matmul(V, CUR)  -> proj X -> q|k|v
 *   rms_norm(CUR, X) matmul(GATE, CUR) matmul(UP, CUR)             -> proj X -> gate|up
 *   rms_norm(CUR, X) matmul(QKV or GU, CUR) split(...)              -> the same, one fused weight
 *   rope(Q) rope(K) attention(ATT, Q, K, V)                         -> attn (rope_kv, attention;
 *                                                                      windowed layers: their
 *                                                                      window, rope base, ring)
 *   matmul(OUT, ATT) add(X, OUT)                                    -> proj ATT -> X, residual
 *   matmul(OUT, ATT) rms_norm(OUT, OUT) add(X, OUT)                 -> proj ATT -> h, then
 *                                                                      rmsnorm_add h -> X (gemma3)
 *   glu(GATE, GATE, UP, silu|gelu) matmul(OUT, GATE) add(X, OUT)    -> proj gate|up -> X, the
 *                                                                      gate folded (SwiGLU/GeGLU)
 *   glu(...) matmul(OUT, GATE) rms_norm(OUT, OUT) add(X, OUT)       -> the same into h, then
 *                                                                      rmsnorm_add h -> X (gemma3)
 *   add_bias(Q) add_bias(K) add_bias(V)                             -> bias of q|k|v (qwen2)
 *   head_norm(Q, Q) head_norm(K, K)                                 -> head_norm of q|k (qwen3,
 *                                                                      gemma3)
 *   rms_norm(CUR, X) moe(OUT, CUR, silu) add(X, OUT)                -> moe (qwen3moe)
 * and, around the layers, get_rows(X) [scale(X, sqrt_embd)] and rms_norm(CUR, X)
 * matmul(LOGITS, CUR). An op outside them is refused with its name: the engine has no kernel
 * for it yet (adding one means a pattern here and a step in model-cl-layer.c). */
#include "model-cl-int.h"

#define OP(i) (&ops[i])

static bool is(const struct ebb__op *o, enum ebb__op_kind k, enum ebb__buf dst, enum ebb__buf a)
{
    return o->kind == k && o->dst == dst && o->a == a;
}

static ebb_err refuse(const struct ebb__arch *a, const char *prog, uint32_t i,
                      const struct ebb__op *o, const char *why, struct ebb_diag *diag)
{
    return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                        "the OpenCL engine cannot run %s's %s op %u (%s%s); the plain-C "
                        "reference does: --device ref",
                        a->name, prog, i, ebb__arch_op_name(o->kind), why);
}

static ebb_err add_group(struct clm_plan *p, const struct ebb__op *ops, uint32_t n, uint8_t *out,
                         struct ebb_diag *diag)
{
    if (p->n_groups == MAX_GROUPS || n > GROUP_MAX)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "too many weight groups in one layer");
    struct clm_group *g = &p->groups[p->n_groups];
    g->n = n;
    for (uint32_t i = 0; i < n; i++)
        g->t[i] = ops[i].t;
    *out = (uint8_t)p->n_groups++;
    return EBB_OK;
}

static ebb_err add_step(struct clm_plan *p, struct clm_step s, struct ebb_diag *diag)
{
    if (p->n_steps == MAX_STEPS)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "too many steps in one layer");
    p->steps[p->n_steps++] = s;
    return EBB_OK;
}

/* rms_norm(CUR, X), one fused product of CUR into QKV or GU and its split into q, k, v or
 * gate, up: the same step with a group of one weight (phi3). Returns the ops used. */
static uint32_t match_norm_fused(const struct ebb__op *ops, uint32_t n, struct clm_step *s)
{
    if (n < 3 || !is(OP(0), EBB__OP_RMS_NORM, EBB__BUF_CUR, EBB__BUF_X) ||
        OP(1)->kind != EBB__OP_MATMUL || OP(1)->a != EBB__BUF_CUR || OP(2)->kind != EBB__OP_SPLIT ||
        OP(2)->a != OP(1)->dst)
        return 0;
    const struct ebb__op *sp = OP(2);
    if (OP(1)->dst == EBB__BUF_QKV && sp->arg == 3 && sp->dst == EBB__BUF_Q &&
        sp->b == EBB__BUF_K && sp->c == EBB__BUF_V)
        *s = (struct clm_step){.kind = CLM_PROJ, .in = CLM_X, .out = CLM_QKV};
    else if (OP(1)->dst == EBB__BUF_GU && sp->arg == 2 && sp->dst == EBB__BUF_GATE &&
             sp->b == EBB__BUF_UP)
        *s = (struct clm_step){.kind = CLM_PROJ, .in = CLM_X, .out = CLM_GU};
    else
        return 0;
    return 3;
}

/* rms_norm(CUR, X) moe(OUT, CUR, silu) add(X, OUT): the experts' block, its router and three
 * stacks as four groups of one weight (model-cl-moe.c). Returns the ops used, 0 if no match. */
static uint32_t match_moe(struct clm_plan *p, const struct ebb__op *ops, uint32_t n,
                          struct clm_step *s, struct ebb_diag *diag, ebb_err *rc)
{
    if (n < 3 || !is(OP(0), EBB__OP_RMS_NORM, EBB__BUF_CUR, EBB__BUF_X) ||
        !is(OP(1), EBB__OP_MOE, EBB__BUF_OUT, EBB__BUF_CUR) || OP(1)->arg != EBB__ACT_SILU ||
        !is(OP(2), EBB__OP_ADD, EBB__BUF_X, EBB__BUF_OUT))
        return 0;
    if (p->n_norms == MAX_NORMS || p->n_groups + 4 > MAX_GROUPS) {
        *rc = ebb_diag_set(diag, EBB_EUNSUPPORTED, "too many weights in one layer");
        return 3;
    }
    *s = (struct clm_step){
        .kind = CLM_MOE, .norm = (int8_t)p->n_norms, .group = (uint8_t)p->n_groups};
    p->norms[p->n_norms++] = OP(0)->t;
    for (int k = 0; k < 4; k++) /* the router, then the gate, up and down stacks */
        p->groups[p->n_groups++] = (struct clm_group){.t = {(int16_t)(OP(1)->t + k)}, .n = 1};
    *rc = add_step(p, *s, diag);
    return 3;
}

/* rms_norm(CUR, X) then the products of CUR into q|k|v or gate|up. Returns the ops used. */
static uint32_t match_norm_proj(const struct ebb__op *ops, uint32_t n, struct clm_step *s,
                                uint32_t *n_mm)
{
    static const uint8_t qkv[] = {EBB__BUF_Q, EBB__BUF_K, EBB__BUF_V};
    static const uint8_t gu[] = {EBB__BUF_GATE, EBB__BUF_UP};
    if (n < 2 || !is(OP(0), EBB__OP_RMS_NORM, EBB__BUF_CUR, EBB__BUF_X))
        return 0;
    const uint8_t *want[] = {qkv, gu};
    uint32_t len[] = {3, 2};
    uint8_t outs[] = {CLM_QKV, CLM_GU};
    for (int k = 0; k < 2; k++) {
        uint32_t j = 0;
        while (j < len[k] && 1 + j < n && is(OP(1 + j), EBB__OP_MATMUL, want[k][j], EBB__BUF_CUR))
            j++;
        if (j == len[k]) {
            *s = (struct clm_step){.kind = CLM_PROJ, .in = CLM_X, .out = outs[k]};
            *n_mm = j;
            return 1 + j;
        }
    }
    return 0;
}

/* The end of a block at ops: add(X, OUT), or rms_norm(OUT, OUT) add(X, OUT) (a norm of the
 * block's output before the residual add, whose vector goes to p->norms; *post = 1 + its
 * index). Returns the ops used, 0 if neither. */
static uint32_t match_residual(struct clm_plan *p, const struct ebb__op *ops, uint32_t n,
                               uint8_t *post)
{
    *post = 0;
    if (n >= 1 && is(OP(0), EBB__OP_ADD, EBB__BUF_X, EBB__BUF_OUT))
        return 1;
    if (n < 2 || !is(OP(0), EBB__OP_RMS_NORM, EBB__BUF_OUT, EBB__BUF_OUT) ||
        !is(OP(1), EBB__OP_ADD, EBB__BUF_X, EBB__BUF_OUT) || p->n_norms == MAX_NORMS)
        return 0;
    p->norms[p->n_norms++] = OP(0)->t;
    *post = (uint8_t)p->n_norms;
    return 2;
}

static ebb_err plan_layer(const struct ebb__arch *a, struct clm_plan *p, struct ebb_diag *diag)
{
    const struct ebb__op *all = a->layer;
    uint32_t n = a->n_layer_ops;
    ebb_err rc = EBB_OK;
    for (uint32_t i = 0; i < n && !rc;) {
        const struct ebb__op *ops = all + i;
        struct clm_step s;
        uint32_t n_mm, used;
        uint8_t post;
        if ((used = match_moe(p, ops, n - i, &s, diag, &rc))) {
            i += used;
        } else if (match_norm_proj(ops, n - i, &s, &n_mm)) {
            if (p->n_norms == MAX_NORMS)
                return ebb_diag_set(diag, EBB_EUNSUPPORTED, "too many norms in one layer");
            s.norm = (int8_t)p->n_norms;
            p->norms[p->n_norms++] = OP(0)->t;
            if (!(rc = add_group(p, OP(1), n_mm, &s.group, diag)))
                rc = add_step(p, s, diag);
            i += 1 + n_mm;
        } else if (match_norm_fused(ops, n - i, &s)) {
            if (p->n_norms == MAX_NORMS)
                return ebb_diag_set(diag, EBB_EUNSUPPORTED, "too many norms in one layer");
            s.norm = (int8_t)p->n_norms;
            p->norms[p->n_norms++] = OP(0)->t;
            if (!(rc = add_group(p, OP(1), 1, &s.group, diag)))
                rc = add_step(p, s, diag);
            i += 3;
        } else if (n - i >= 3 && is(OP(0), EBB__OP_ROPE, EBB__BUF_Q, EBB__BUF_Q) &&
                   is(OP(1), EBB__OP_ROPE, EBB__BUF_K, EBB__BUF_K) && OP(0)->arg == OP(1)->arg &&
                   is(OP(2), EBB__OP_ATTENTION, EBB__BUF_ATT, EBB__BUF_Q) &&
                   OP(2)->b == EBB__BUF_K && OP(2)->c == EBB__BUF_V) {
            s = (struct clm_step){.kind = CLM_ATTN, .neox = OP(0)->arg == EBB__ROPE_NEOX};
            rc = add_step(p, s, diag);
            i += 3;
        } else if (n - i >= 2 && is(OP(0), EBB__OP_MATMUL, EBB__BUF_OUT, EBB__BUF_ATT) &&
                   (used = match_residual(p, OP(1), n - i - 1, &post))) {
            s = (struct clm_step){.kind = CLM_PROJ,
                                  .in = CLM_ATT,
                                  .out = CLM_X,
                                  .norm = -1,
                                  .post = post,
                                  .res = true};
            if (!(rc = add_group(p, OP(0), 1, &s.group, diag)))
                rc = add_step(p, s, diag);
            i += 1 + used;
        } else if (n - i >= 3 && is(OP(0), EBB__OP_GLU, EBB__BUF_GATE, EBB__BUF_GATE) &&
                   OP(0)->b == EBB__BUF_UP &&
                   (OP(0)->arg == EBB__ACT_SILU || OP(0)->arg == EBB__ACT_GELU_TANH) &&
                   is(OP(1), EBB__OP_MATMUL, EBB__BUF_OUT, EBB__BUF_GATE) &&
                   (used = match_residual(p, OP(2), n - i - 2, &post))) {
            s = (struct clm_step){.kind = CLM_PROJ,
                                  .in = CLM_GU,
                                  .out = CLM_X,
                                  .norm = -1,
                                  .post = post,
                                  .glu = OP(0)->arg == EBB__ACT_GELU_TANH ? CLM_GLU_GELU
                                                                          : CLM_GLU_SILU,
                                  .res = true};
            if (!(rc = add_group(p, OP(1), 1, &s.group, diag)))
                rc = add_step(p, s, diag);
            i += 2 + used;
        } else if (n - i >= 3 && is(OP(0), EBB__OP_ADD_BIAS, EBB__BUF_Q, EBB__BUF_Q) &&
                   is(OP(1), EBB__OP_ADD_BIAS, EBB__BUF_K, EBB__BUF_K) &&
                   is(OP(2), EBB__OP_ADD_BIAS, EBB__BUF_V, EBB__BUF_V) && !p->has_bias) {
            p->has_bias = true;
            for (int k = 0; k < 3; k++)
                p->bias[k] = OP(k)->t;
            rc = add_step(p, (struct clm_step){.kind = CLM_BIAS}, diag);
            i += 3;
        } else if (n - i >= 2 && is(OP(0), EBB__OP_HEAD_NORM, EBB__BUF_Q, EBB__BUF_Q) &&
                   is(OP(1), EBB__OP_HEAD_NORM, EBB__BUF_K, EBB__BUF_K) && !p->has_qk_norm) {
            p->has_qk_norm = true;
            p->qk_norm[0] = OP(0)->t;
            p->qk_norm[1] = OP(1)->t;
            rc = add_step(p, (struct clm_step){.kind = CLM_HEAD_NORM}, diag);
            i += 2;
        } else {
            return refuse(a, "layer", i, OP(0), "", diag);
        }
    }
    return rc;
}

ebb_err ebb__clm_plan(const struct ebb__arch *a, struct clm_plan *p, struct ebb_diag *diag)
{
    *p = (struct clm_plan){0};
    const struct ebb__op *ops = a->input;
    uint32_t n = a->n_input;
    p->embd = OP(0)->t;
    if (n > 1 && is(OP(1), EBB__OP_SCALE, EBB__BUF_X, EBB__BUF_X) &&
        OP(1)->arg == EBB__SCALE_SQRT_EMBD)
        p->embd_scale = true;
    uint32_t used = p->embd_scale ? 2 : 1;
    if (n > used)
        return refuse(a, "input", used, OP(used), "", diag);
    ops = a->output;
    n = a->n_output;
    if (n != 2 || !is(OP(0), EBB__OP_RMS_NORM, EBB__BUF_CUR, EBB__BUF_X) ||
        !is(OP(1), EBB__OP_MATMUL, EBB__BUF_LOGITS, EBB__BUF_CUR))
        return refuse(a, "output", 0, OP(0), ", not a norm and the head", diag);
    p->out_norm = OP(0)->t;
    p->output = OP(1)->t;
    return plan_layer(a, p, diag); /* windows are per layer: struct layer (model-cl-place.c) */
}
