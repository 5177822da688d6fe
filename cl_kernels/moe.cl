/* Mixture-of-experts kernels (the description's moe op, runtime/model/arch-int.h). An expert
 * stack (n_expert matrices of n_rows rows of n_in) is placed as one weight of n_expert * n_rows
 * rows: expert e's row r is row e * n_rows + r. The router's choice for each token (k expert ids
 * and weights, moe_route) stays on the device, and the products read only the chosen experts'
 * rows: moe_gather for the gate and up stacks, moe_down for the down stack with the SwiGLU, the
 * weights and the sum over the k experts folded in. Built after the weight layout's prologue
 * and quant.cl, as matvec.cl is (READ_W4 reads W's rows whatever the layout); q8.cl and kq8.cl
 * come before it for the decode kernels on 8-bit inputs (moe_gather_q8, moe_down_q8, where the
 * layout has W_KQ8). */

#ifndef MV_WG
#define MV_WG 1
#endif
#define MOE_MAX_K 64 /* EBB__MAX_EXPERT_USED */

/* Sum of v over the MV_WG work-items of a work-group, returned to each (all must call). */
inline float moe_sum(__local float *red, int lane, float v)
{
#if MV_WG > 1
    red[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = MV_WG / 2; s > 0; s >>= 1) {
        if (lane < s)
            red[lane] += red[lane + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float sum = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return sum;
#else
    return v;
#endif
}

#define MOE_ROUTE_WG 128 /* moe_route's work-group: one per token */
#define MOE_ROUTE_E 8     /* experts an item holds: n_expert <= 1024 (EBB__MAX_EXPERT) */
#define MOE_ROUTE_R 16    /* first-level reducers of an arg-max round */

/* Sum (max: maximum) of v over moe_route's work-group, returned to each item. */
inline float route_reduce(__local float *red, float v, bool max)
{
    int lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = MOE_ROUTE_WG / 2; s > 0; s >>= 1) {
        if (lid < s)
            red[lid] = max ? fmax(red[lid], red[lid + s]) : red[lid] + red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* Per token t = get_global_id(1), one work-group: softmax of its n_expert router scores, the k
 * best (ties: the lower id first), their probabilities renormalised to sum 1 with norm (the sum
 * clamped below at 2^-14) and multiplied by scale unless it is 0 or 1. ids and w are (n_tok, k).
 * Item l holds experts l, l + MOE_ROUTE_WG, ...; the k are chosen by rounds of work-group
 * arg-max. Global (MOE_ROUTE_WG, n_tok), local (MOE_ROUTE_WG, 1). */
__kernel __attribute__((reqd_work_group_size(MOE_ROUTE_WG, 1, 1))) void
moe_route(__global const float *scores, int n_expert, int k, int norm, float scale,
          __global int *ids, __global float *w)
{
    __local float red[MOE_ROUTE_WG], rv[MOE_ROUTE_R];
    __local int ri[MOE_ROUTE_R], li[MOE_ROUTE_WG];
    int t = get_global_id(1), lid = get_local_id(0);
    const __global float *s = scores + (size_t)t * n_expert;
    float p[MOE_ROUTE_E];
    float mx = -INFINITY;
    for (int j = 0; j < MOE_ROUTE_E; j++) {
        int e = lid + j * MOE_ROUTE_WG;
        p[j] = e < n_expert ? s[e] : -INFINITY;
        mx = fmax(mx, p[j]);
    }
    mx = route_reduce(red, mx, true);
    float sum = 0.0f;
    for (int j = 0; j < MOE_ROUTE_E; j++) {
        int e = lid + j * MOE_ROUTE_WG;
        p[j] = e < n_expert ? exp(p[j] - mx) : 0.0f;
        sum += p[j];
    }
    sum = route_reduce(red, sum, false);
    /* Probabilities are >= 0: -1 marks an expert taken or absent. */
    for (int j = 0; j < MOE_ROUTE_E; j++)
        p[j] = lid + j * MOE_ROUTE_WG < n_expert ? p[j] / sum : -1.0f;
    float tot = 0.0f;
    for (int q = 0; q < k; q++) {
        float bv = p[0];
        int bi = lid;
        for (int j = 1; j < MOE_ROUTE_E; j++)
            if (p[j] > bv)
                bv = p[j], bi = lid + j * MOE_ROUTE_WG;
        red[lid] = bv;
        li[lid] = bi;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < MOE_ROUTE_R) {
            for (int j = lid + MOE_ROUTE_R; j < MOE_ROUTE_WG; j += MOE_ROUTE_R)
                if (red[j] > bv || (red[j] == bv && li[j] < bi))
                    bv = red[j], bi = li[j];
            rv[lid] = bv;
            ri[lid] = bi;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        bv = rv[0];
        bi = ri[0];
        for (int j = 1; j < MOE_ROUTE_R; j++)
            if (rv[j] > bv || (rv[j] == bv && ri[j] < bi))
                bv = rv[j], bi = ri[j];
        for (int j = 0; j < MOE_ROUTE_E; j++)
            if (bi == lid + j * MOE_ROUTE_WG)
                p[j] = -1.0f;
        tot += bv;
        if (lid == 0) {
            ids[(size_t)t * k + q] = bi;
            w[(size_t)t * k + q] = bv;
        }
    }
    float f = norm ? 1.0f / fmax(tot, 6.103515625e-5f) : 1.0f;
    if (scale != 0.0f && scale != 1.0f)
        f *= scale;
    /* Item 0 wrote the k weights itself: it scales them in place. */
    if (lid == 0)
        for (int q = 0; q < k; q++)
            w[(size_t)t * k + q] *= f;
}

/* y[t][y_off + o] = sum_i W[ids[t][j] * n_rows + r][i] x[t][i], o = j * n_rows + r < k * n_rows:
 * the k chosen experts' rows of a gate or up stack, side by side. An id of -1 (the expert
 * cache's rows outside a pass, runtime/model/model-cl-experts.c) gives 0. Global
 * (k * n_rows * MV_WG, n_tok), local (MV_WG, 1). */
__kernel void moe_gather(W_ARGS, int n_in, int n_rows, int k, __global const int *ids,
                         __global const float *x, int x_ld, __global float *y, int y_ld,
                         int y_off)
{
    int o = get_global_id(0) / MV_WG, t = get_global_id(1), lane = get_local_id(0) % MV_WG;
    __local float red[MV_WG];
    int j = o / n_rows, r = o % n_rows;
    int id = ids[(size_t)t * k + j];
    if (id < 0) { /* the whole work-group: one output */
        if (lane == 0)
            y[(size_t)t * y_ld + y_off + o] = 0.0f;
        return;
    }
    int row = id * n_rows + r;
    const __global float *xt = x + (size_t)t * x_ld;
    float4 acc = (float4)(0.0f);
    for (int i = lane * 4; i < n_in; i += MV_WG * 4)
        acc += READ_W4(row, i) * vload4(0, xt + i);
    float sum = moe_sum(red, lane, acc.x + acc.y + acc.z + acc.w);
    if (lane == 0)
        y[(size_t)t * y_ld + y_off + o] = sum;
}

/* y[t][o] = (res ? res[t][o] : 0) + sum_j w[t][j] sum_i W[ids[t][j] * n_out + o][i] h_j[i],
 * h_j = silu(g[t][j n_in + i]) * g[t][(k + j) n_in + i]: the down stack over the k experts'
 * gate (first k * n_in values of a row of g) and up (the next k * n_in) outputs, weighted and
 * summed, the residual added; an id of -1 is left out of the sum (moe_gather). res may alias y.
 * Global (n_out * MV_WG, n_tok), local (MV_WG, 1). */
__kernel void moe_down(W_ARGS, int n_in, int n_out, int k, __global const int *ids,
                       __global const float *wts, __global const float *g, int g_ld,
                       __global float *y, int y_ld, __global const float *res)
{
    int o = get_global_id(0) / MV_WG, t = get_global_id(1), lane = get_local_id(0) % MV_WG;
    __local float red[MV_WG];
    const __global float *gt = g + (size_t)t * g_ld;
    float out = 0.0f;
    for (int j = 0; j < k; j++) {
        int id = ids[(size_t)t * k + j];
        if (id < 0)
            continue;
        int row = id * n_out + o;
        const __global float *gj = gt + j * n_in, *uj = gt + (k + j) * n_in;
        float4 acc = (float4)(0.0f);
        for (int i = lane * 4; i < n_in; i += MV_WG * 4) {
            float4 a = vload4(0, gj + i);
            acc += READ_W4(row, i) * (a / (1.0f + exp(-a)) * vload4(0, uj + i));
        }
        out += wts[(size_t)t * k + j] * (acc.x + acc.y + acc.z + acc.w);
    }
    float sum = moe_sum(red, lane, out);
    if (lane == 0)
        y[(size_t)t * y_ld + o] = (res ? res[(size_t)t * y_ld + o] : 0.0f) + sum;
}

/* Prefill grouped by expert (runtime/model/model-cl-moe-group.c): the host reads the chosen ids
 * back, sorts the (token, j) pairs by expert (perm: pair indices t * k + j, grouped) and cuts each
 * expert's pairs into tiles of at most MOE_GT (tiles: expert, first index into perm, count). A
 * work-group takes one tile and MOE_GR rows of its expert, so each weight row is read once per
 * tile rather than once per token; the inputs of the tile's pairs are staged MOE_GK at a time in
 * local memory. Every output is the same sum in the same order whatever the tile holds. */
#define MOE_GT 16
#define MOE_GR 64
#define MOE_GK 32

/* y[t][y_off + j * n_rows + r] = W[e * n_rows + r] . x[t] for each pair t * k + j of the tile
 * (e its expert): the gate or up outputs in moe_gather's places. Global (ceil(n_rows / MOE_GR)
 * * MOE_GR, n_tiles), local (MOE_GR, 1); n_in a multiple of 4. */
__kernel __attribute__((reqd_work_group_size(MOE_GR, 1, 1))) void
moe_group_gu(W_ARGS, int n_in, int n_rows, int k, __global const int4 *tiles,
             __global const int *perm, __global const float *x, int x_ld, __global float *y,
             int y_ld, int y_off)
{
    __local float xs[MOE_GT][MOE_GK];
    __local int src[MOE_GT];
    int4 tl = tiles[get_group_id(1)];
    int lid = get_local_id(0), r = get_group_id(0) * MOE_GR + lid;
    if (lid < MOE_GT)
        src[lid] = lid < tl.z ? perm[tl.y + lid] : -1;
    barrier(CLK_LOCAL_MEM_FENCE);
    int row = tl.x * n_rows + min(r, n_rows - 1);
    float acc[MOE_GT];
    for (int q = 0; q < MOE_GT; q++)
        acc[q] = 0.0f;
    for (int i0 = 0; i0 < n_in; i0 += MOE_GK) {
        for (int q = lid; q < MOE_GT * MOE_GK; q += MOE_GR) {
            int tq = q / MOE_GK, c = q % MOE_GK, sp = src[tq];
            xs[tq][c] = sp >= 0 && i0 + c < n_in ? x[(size_t)(sp / k) * x_ld + i0 + c] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = 0; c < MOE_GK && i0 + c < n_in; c += 4) {
            float4 w = READ_W4(row, i0 + c);
            for (int q = 0; q < MOE_GT; q++)
                acc[q] += dot(w, vload4(0, &xs[q][c]));
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (r >= n_rows)
        return;
    for (int q = 0; q < tl.z; q++) {
        int sp = src[q], t = sp / k, j = sp % k;
        y[(size_t)t * y_ld + y_off + (size_t)j * n_rows + r] = acc[q];
    }
}

/* yp[t * k + j][r] = W[e * n_out + r] . h_j(t) for each pair of the tile, h_j the SwiGLU of the
 * pair's gate and up outputs in g (moe_gather's places, rows of g_ld). Global (ceil(n_out /
 * MOE_GR) * MOE_GR, n_tiles), local (MOE_GR, 1); n_in a multiple of 4. */
__kernel __attribute__((reqd_work_group_size(MOE_GR, 1, 1))) void
moe_group_down(W_ARGS, int n_in, int n_out, int k, __global const int4 *tiles,
               __global const int *perm, __global const float *g, int g_ld,
               __global float *yp)
{
    __local float xs[MOE_GT][MOE_GK];
    __local int src[MOE_GT];
    int4 tl = tiles[get_group_id(1)];
    int lid = get_local_id(0), r = get_group_id(0) * MOE_GR + lid;
    if (lid < MOE_GT)
        src[lid] = lid < tl.z ? perm[tl.y + lid] : -1;
    barrier(CLK_LOCAL_MEM_FENCE);
    int row = tl.x * n_out + min(r, n_out - 1);
    float acc[MOE_GT];
    for (int q = 0; q < MOE_GT; q++)
        acc[q] = 0.0f;
    for (int i0 = 0; i0 < n_in; i0 += MOE_GK) {
        for (int q = lid; q < MOE_GT * MOE_GK; q += MOE_GR) {
            int tq = q / MOE_GK, c = q % MOE_GK, sp = src[tq];
            float v = 0.0f;
            if (sp >= 0 && i0 + c < n_in) {
                const __global float *gt = g + (size_t)(sp / k) * g_ld;
                int j = sp % k;
                float a = gt[(size_t)j * n_in + i0 + c];
                v = a / (1.0f + exp(-a)) * gt[(size_t)(k + j) * n_in + i0 + c];
            }
            xs[tq][c] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = 0; c < MOE_GK && i0 + c < n_in; c += 4) {
            float4 w = READ_W4(row, i0 + c);
            for (int q = 0; q < MOE_GT; q++)
                acc[q] += dot(w, vload4(0, &xs[q][c]));
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (r >= n_out)
        return;
    for (int q = 0; q < tl.z; q++)
        yp[(size_t)src[q] * n_out + r] = acc[q];
}

/* x[t][o] += sum_j w[t][j] yp[t * k + j][o] over the pairs whose id is not -1, j in order.
 * Global (n_out, n_tok). */
__kernel void moe_group_sum(int n_out, int k, __global const int *ids,
                            __global const float *wts, __global const float *yp,
                            __global float *x, int x_ld)
{
    int o = get_global_id(0), t = get_global_id(1);
    float sum = 0.0f;
    for (int j = 0; j < k; j++) {
        int p = t * k + j;
        if (ids[p] >= 0)
            sum += wts[p] * yp[(size_t)p * n_out + o];
    }
    x[(size_t)t * x_ld + o] += sum;
}

#if defined(W_KQ8)
/* The row sum of v for the q8 kernels below: warp shuffles where a row is one warp. */
inline float moe_sum_q8(__local float *red, int lane, float v)
{
#if MV_PTX && MV_WG == 32
    (void)red, (void)lane;
    return warp_sum(v);
#else
    return moe_sum(red, lane, v);
#endif
}

/* moe_gather for one token (decode) on 8-bit inputs: x quantized once by quantize_x8 (xq, xd),
 * the chosen experts' rows in kq8.cl's integer group dots (W_KQ8). y[y_off + o] as moe_gather's
 * row 0. Global (k * n_rows * MV_WG, 1), local (MV_WG, 1). */
__kernel void moe_gather_q8(W_ARGS, int n_in, int n_rows, int k, __global const int *ids,
                            __global const int4 *xq, __global const float2 *xd,
                            __global float *y, int y_off)
{
    int o = get_global_id(0) / MV_WG, lane = get_local_id(0) % MV_WG;
    __local float red[MV_WG];
    int j = o / n_rows, r = o % n_rows;
    int row = ids[j] * n_rows + r;
    float acc = 0.0f;
    for (int b = lane; b < n_in / 32; b += MV_WG)
        acc += W_KQ8(row, b, xq, xd);
    float sum = moe_sum_q8(red, lane, acc);
    if (lane == 0)
        y[y_off + o] = sum;
}

/* moe_down for one token on 8-bit inputs: the k experts' SwiGLU outputs quantized once by
 * quantize_x8 over the whole [gate | up] row (glu 1, k * n_in inputs: expert j's blocks start
 * at j * n_in / 32). y[o] = (res ? res[o] : 0) + sum_j w[j] (row ids[j] * n_out + o . h_j).
 * res may alias y. Global (n_out * MV_WG, 1), local (MV_WG, 1). */
__kernel void moe_down_q8(W_ARGS, int n_in, int n_out, int k, __global const int *ids,
                          __global const float *wts, __global const int4 *xq,
                          __global const float2 *xd, __global float *y,
                          __global const float *res)
{
    int o = get_global_id(0) / MV_WG, lane = get_local_id(0) % MV_WG;
    __local float red[MV_WG];
    int nb = n_in / 32;
    float out = 0.0f;
    for (int j = 0; j < k; j++) {
        int row = ids[j] * n_out + o;
        const __global int4 *xqj = xq + (size_t)j * 2 * nb;
        const __global float2 *xdj = xd + (size_t)j * nb;
        float acc = 0.0f;
        for (int b = lane; b < nb; b += MV_WG)
            acc += W_KQ8(row, b, xqj, xdj);
        out += wts[j] * acc;
    }
    float sum = moe_sum_q8(red, lane, out);
    if (lane == 0)
        y[o] = (res ? res[o] : 0.0f) + sum;
}
#endif
