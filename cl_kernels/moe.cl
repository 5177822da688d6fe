/* Mixture-of-experts kernels (the description's moe op, runtime/model/arch-int.h). An expert
 * stack (n_expert matrices of n_rows rows of n_in) is placed as one weight of n_expert * n_rows
 * rows: expert e's row r is row e * n_rows + r. The router's choice for each token (k expert ids
 * and weights, moe_route) stays on the device, and the products read only the chosen experts'
 * rows: moe_gather for the gate and up stacks, moe_down for the down stack with the SwiGLU, the
 * weights and the sum over the k experts folded in. Prefill may instead run grouped by expert
 * (moe_group_*, below: MV_WG work-items share a row as in moe_gather, and a work-group reads
 * each row once for up to MOE_GT of an expert's (token, j) pairs). Built after the weight
 * layout's prologue and quant.cl, as matvec.cl is (READ_W4 reads W's rows whatever the layout);
 * q8.cl and kq8.cl come before it for the decode kernels on 8-bit inputs (moe_gather_q8,
 * moe_down_q8, where the layout has W_KQ8). */

#ifndef MV_WG
#define MV_WG 1
#endif
#define MOE_MAX_K 64 /* EBB__MAX_EXPERT_USED */

/* Sum of v over the n (a power of 2) work-items of lanes 0 .. n - 1 by a tree over red,
 * returned to each (all must call). */
inline float moe_tree_sum(__local float *red, int lane, float v, int n)
{
    red[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lane < s)
            red[lane] += red[lane + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float sum = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return sum;
}

/* ... over the MV_WG work-items of a work-group. */
inline float moe_sum(__local float *red, int lane, float v)
{
#if MV_WG > 1
    return moe_tree_sum(red, lane, v, MV_WG);
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

/* The softmax of moe_route: item lid (< MOE_ROUTE_WG) holds experts lid + j * MOE_ROUTE_WG,
 * j < MOE_ROUTE_E, as probabilities in p, -1 for those past n_expert. Items of a larger
 * work-group (moe_gate_up_q8) hold none and only take part in the barriers; red holds the
 * work-group's items. */
inline void route_probs(const __global float *s, int n_expert, __local float *red, float *p)
{
    int lid = get_local_id(0);
    float mx = -INFINITY;
    /* Every item loads (an index past n_expert reads the last score, then drops it): loads
     * under a condition were each waited for in turn on NVIDIA's compiler. */
    for (int j = 0; j < MOE_ROUTE_E; j++) {
        int e = lid + j * MOE_ROUTE_WG;
        float v = s[min(e, n_expert - 1)];
        p[j] = e < n_expert && lid < MOE_ROUTE_WG ? v : -INFINITY;
        mx = fmax(mx, p[j]);
    }
    mx = route_reduce(red, mx, true);
    float sum = 0.0f;
    for (int j = 0; j < MOE_ROUTE_E; j++) {
        int e = lid + j * MOE_ROUTE_WG;
        p[j] = e < n_expert && lid < MOE_ROUTE_WG ? exp(p[j] - mx) : 0.0f;
        sum += p[j];
    }
    sum = route_reduce(red, sum, false);
    /* Probabilities are >= 0: -1 marks an expert taken or absent. */
    for (int j = 0; j < MOE_ROUTE_E; j++)
        p[j] = lid + j * MOE_ROUTE_WG < n_expert && lid < MOE_ROUTE_WG ? p[j] / sum : -1.0f;
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
    float p[MOE_ROUTE_E];
    route_probs(scores + (size_t)t * n_expert, n_expert, red, p);
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

#if defined(W_RAW)
/* READ_W4 of a raw weight given by its buffer and offset (the gate or the up stack). */
inline float4 moe_rd4(const __global uchar *w_a, ulong w_off, int n_in, int row, int i)
{
    return READ_W4(row, i);
}

/* moe_gather over the gate stack (W_ARGS) and the up stack (u_a, u_off: the same raw layout) in
 * one launch: y[t][o] for o < k * n_rows the gate rows, from k * n_rows the up rows, each
 * computed as moe_gather computes it. Global (2 * k * n_rows * MV_WG, n_tok), local
 * (MV_WG, 1). */
__kernel void moe_gather2(W_ARGS, __global const uchar *u_a, ulong u_off, int n_in, int n_rows,
                          int k, __global const int *ids, __global const float *x, int x_ld,
                          __global float *y, int y_ld)
{
    int o = get_global_id(0) / MV_WG, t = get_global_id(1), lane = get_local_id(0) % MV_WG;
    __local float red[MV_WG];
    bool up = o >= k * n_rows;
    int ou = up ? o - k * n_rows : o, j = ou / n_rows, r = ou % n_rows;
    int id = ids[(size_t)t * k + j];
    const __global uchar *a = up ? u_a : w_a;
    ulong off = up ? u_off : w_off;
    const __global float *xt = x + (size_t)t * x_ld;
    float4 acc = (float4)(0.0f);
    if (id >= 0) /* (-1 gives 0; the whole work-group takes the branch) */
        for (int i = lane * 4; i < n_in; i += MV_WG * 4)
            acc += moe_rd4(a, off, n_in, id * n_rows + r, i) * vload4(0, xt + i);
    float sum = moe_sum(red, lane, acc.x + acc.y + acc.z + acc.w);
    if (lane == 0)
        y[(size_t)t * y_ld + o] = sum;
}
#endif

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
 * work-group of MOE_GW work-items takes one tile and MOE_GR rows of its expert: MOE_GN teams of
 * MV_WG work-items, each team MOE_GQ rows (rows r0 + team + i * MOE_GN). A team's lanes share its
 * rows as in moe_gather (lane i reads inputs i * 4, i * 4 + MV_WG * 4, ..., so that neighbouring
 * work-items read neighbouring weights), and each work-item keeps MOE_GQ x MOE_GT sums, one for
 * each of its rows and the tile's pairs: every weight row is read once per tile rather than once
 * per token, and each staged input serves MOE_GQ rows. The inputs of the tile's pairs are staged
 * MOE_GK at a time in local memory (a whole number of the lanes' steps); at the end, one row of
 * each team at a time, the MV_WG partial sums of each pair go through local memory (a padded
 * stride against bank conflicts) and one work-item adds them in lane order. Every output is the
 * same sum in the same order whatever the tile holds. */
#define MOE_GT 16                                        /* pairs a tile */
#define MOE_GW (MV_WG > 1 ? 256 : 64)                    /* work-items a work-group */
#define MOE_GN (MV_WG < MOE_GW ? MOE_GW / MV_WG : 1)     /* row teams (MV_WG <= MOE_GW) */
#define MOE_GQ (MV_WG >= 32 ? 4 : MV_WG >= 16 ? 2 : 1)   /* rows a team */
#define MOE_GR (MOE_GN * MOE_GQ) /* rows a work-group (the host: ebb_cl_moe_group_rows) */
#define MOE_GK (MV_WG * 4 > 256 ? MV_WG * 4 : 256)       /* inputs a slice */
#define MOE_GP (MV_WG > 1 ? MV_WG + 1 : 1)               /* stride of a row's partial sums */
#define MOE_GX (MOE_GT * MOE_GK)                         /* floats of a slice */
#define MOE_GS (MOE_GT * MOE_GN * MOE_GP)                /* floats of a round of partial sums */
#define MOE_GL (MOE_GX > MOE_GS ? MOE_GX : MOE_GS)       /* local floats: slices, then sums */

/* Stages inputs i0 .. i0 + MOE_GK - 1 of the tile's pairs (src: pair indices, -1 past the tile)
 * into xs[q * MOE_GK + c]: the pair's token's row of x, or (glu) the SwiGLU of the pair's gate
 * and up outputs in x (moe_gather's places, rows of x_ld); 0 past n_in or the tile. The whole
 * work-group calls it; it waits for the previous slice's readers first. */
inline void moe_group_stage(__local float *xs, __local const int *src, int i0, int n_in, int k,
                            const __global float *x, int x_ld, int glu)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int q = get_local_id(0); q < MOE_GX; q += MOE_GW) {
        int tq = q / MOE_GK, i = i0 + q % MOE_GK, sp = src[tq];
        float v = 0.0f;
        if (sp >= 0 && i < n_in) {
            const __global float *xt = x + (size_t)(sp / k) * x_ld;
            if (glu) {
                int j = sp % k;
                float a = xt[(size_t)j * n_in + i];
                v = a / (1.0f + exp(-a)) * xt[(size_t)(k + j) * n_in + i];
            } else {
                v = xt[i];
            }
        }
        xs[q] = v;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Writes the work-item's MOE_GT partial sums for one of its rows (lane of team rw) to buf, once
 * the earlier readers of buf are done; then the sum of team rw's row for pair q is
 * moe_group_part(buf, rw, q). The whole work-group calls it. */
inline void moe_group_parts(__local float *buf, int rw, int lane, const float *acc)
{
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int q = 0; q < MOE_GT; q++)
        buf[(q * MOE_GN + rw) * MOE_GP + lane] = acc[q];
    barrier(CLK_LOCAL_MEM_FENCE);
}

inline float moe_group_part(__local const float *buf, int rw, int q)
{
    __local const float *p = buf + (q * MOE_GN + rw) * MOE_GP;
    float sum = 0.0f;
    for (int i = 0; i < MV_WG; i++)
        sum += p[i];
    return sum;
}

/* The products of the work-item's MOE_GQ rows (row[]) with the staged slice of the tile's
 * inputs (xs) from input i0 on, added to acc[i * MOE_GT + q] (row i, pair q); a macro for
 * READ_W4, which reads the kernel's weight arguments and n_in. */
#define MOE_GROUP_DOT(row, xs, i0, lane, acc)                                                      \
    do {                                                                                           \
        for (int c_ = (lane) * 4; c_ < MOE_GK && (i0) + c_ < n_in; c_ += MV_WG * 4) {              \
            float4 w_[MOE_GQ];                                                                     \
            _Pragma("unroll")                                                                      \
            for (int i_ = 0; i_ < MOE_GQ; i_++)                                                    \
                w_[i_] = READ_W4(row[i_], (i0) + c_);                                              \
            _Pragma("unroll")                                                                      \
            for (int q_ = 0; q_ < MOE_GT; q_++) {                                                  \
                float4 x_ = vload4(0, (xs) + q_ * MOE_GK + c_);                                    \
                _Pragma("unroll")                                                                  \
                for (int i_ = 0; i_ < MOE_GQ; i_++)                                                \
                    acc[i_ * MOE_GT + q_] += dot(w_[i_], x_);                                      \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* y[t][y_off + j * n_rows + r] = W[e * n_rows + r] . x[t] for each pair t * k + j of the tile
 * (e its expert): the gate or up outputs in moe_gather's places. Global (ceil(n_rows / MOE_GR)
 * * MOE_GW, n_tiles), local (MOE_GW, 1); n_in a multiple of 4. */
__kernel __attribute__((reqd_work_group_size(MOE_GW, 1, 1))) void
moe_group_gu(W_ARGS, int n_in, int n_rows, int k, __global const int4 *tiles,
             __global const int *perm, __global const float *x, int x_ld, __global float *y,
             int y_ld, int y_off)
{
    __local float buf[MOE_GL];
    __local int src[MOE_GT];
    int4 tl = tiles[get_group_id(1)];
    int lid = get_local_id(0), lane = lid % MV_WG, rw = lid / MV_WG;
    int r0 = get_group_id(0) * MOE_GR, row[MOE_GQ];
    if (lid < MOE_GT)
        src[lid] = lid < tl.z ? perm[tl.y + lid] : -1;
    float acc[MOE_GQ * MOE_GT];
#pragma unroll
    for (int i = 0; i < MOE_GQ; i++)
        row[i] = tl.x * n_rows + min(r0 + rw + i * MOE_GN, n_rows - 1);
#pragma unroll
    for (int q = 0; q < MOE_GQ * MOE_GT; q++)
        acc[q] = 0.0f;
    for (int i0 = 0; i0 < n_in; i0 += MOE_GK) {
        moe_group_stage(buf, src, i0, n_in, k, x, x_ld, 0);
        MOE_GROUP_DOT(row, buf, i0, lane, acc);
    }
#pragma unroll
    for (int i = 0; i < MOE_GQ; i++) {
        moe_group_parts(buf, rw, lane, acc + i * MOE_GT);
        for (int s = lid; s < MOE_GN * MOE_GT; s += MOE_GW) {
            int sr = s % MOE_GN, q = s / MOE_GN, r = r0 + i * MOE_GN + sr;
            if (q < tl.z && r < n_rows) {
                int sp = src[q], t = sp / k, j = sp % k;
                y[(size_t)t * y_ld + y_off + (size_t)j * n_rows + r] = moe_group_part(buf, sr, q);
            }
        }
    }
}

/* yp[t * k + j][r] = W[e * n_out + r] . h_j(t) for each pair of the tile, h_j the SwiGLU of the
 * pair's gate and up outputs in g (moe_gather's places, rows of g_ld). Global (ceil(n_out /
 * MOE_GR) * MOE_GW, n_tiles), local (MOE_GW, 1); n_in a multiple of 4. */
__kernel __attribute__((reqd_work_group_size(MOE_GW, 1, 1))) void
moe_group_down(W_ARGS, int n_in, int n_out, int k, __global const int4 *tiles,
               __global const int *perm, __global const float *g, int g_ld,
               __global float *yp)
{
    __local float buf[MOE_GL];
    __local int src[MOE_GT];
    int4 tl = tiles[get_group_id(1)];
    int lid = get_local_id(0), lane = lid % MV_WG, rw = lid / MV_WG;
    int r0 = get_group_id(0) * MOE_GR, row[MOE_GQ];
    if (lid < MOE_GT)
        src[lid] = lid < tl.z ? perm[tl.y + lid] : -1;
    float acc[MOE_GQ * MOE_GT];
#pragma unroll
    for (int i = 0; i < MOE_GQ; i++)
        row[i] = tl.x * n_out + min(r0 + rw + i * MOE_GN, n_out - 1);
#pragma unroll
    for (int q = 0; q < MOE_GQ * MOE_GT; q++)
        acc[q] = 0.0f;
    for (int i0 = 0; i0 < n_in; i0 += MOE_GK) {
        moe_group_stage(buf, src, i0, n_in, k, g, g_ld, 1);
        MOE_GROUP_DOT(row, buf, i0, lane, acc);
    }
#pragma unroll
    for (int i = 0; i < MOE_GQ; i++) {
        moe_group_parts(buf, rw, lane, acc + i * MOE_GT);
        for (int s = lid; s < MOE_GN * MOE_GT; s += MOE_GW) {
            int sr = s % MOE_GN, q = s / MOE_GN, r = r0 + i * MOE_GN + sr;
            if (q < tl.z && r < n_out)
                yp[(size_t)src[q] * n_out + r] = moe_group_part(buf, sr, q);
        }
    }
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

#define MOE_DN_U 4 /* moe_down_q8: (expert, group) pairs a work-item has in flight */
#ifndef MOE_DN_L
#define MOE_DN_L MV_WG /* moe_down_q8's work-items a row (the host's EBB_CL_MOE_DN_L) */
#endif

/* The sum of v over moe_down_q8's MOE_DN_L work-items of a row: moe_sum_q8 where they are
 * MV_WG; else each warp's shuffle sum and the warps' in order (PTX), or a tree. */
inline float moe_dn_sum(__local float *red, int lane, float v)
{
#if MOE_DN_L == MV_WG
    return moe_sum_q8(red, lane, v);
#elif MV_PTX && MOE_DN_L % 32 == 0
    float w = warp_sum(v);
    if ((lane & 31) == 0)
        red[lane >> 5] = w;
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f;
    for (int k = 0; k < MOE_DN_L / 32; k++)
        s += red[k];
    return s;
#else
    return moe_tree_sum(red, lane, v, MOE_DN_L);
#endif
}

/* moe_down for one token on 8-bit inputs: the k experts' SwiGLU outputs quantized once by
 * quantize_x8 over the whole [gate | up] row (glu 1, k * n_in inputs: expert j's blocks start
 * at j * n_in / 32). y[o] = (res ? res[o] : 0) + sum_j w[j] (row ids[j] * n_out + o . h_j).
 * The k * n_in / 32 (expert, group) pairs of a row are spread over its MOE_DN_L work-items,
 * MOE_DN_U at a time with no branch between their loads (an index past the last pair reads the
 * last one again and drops it; an id of -1, moe_gate_up_q8's zero block, reads expert 0 and
 * drops it), so that a work-item waits once for MOE_DN_U groups' loads instead of once for each
 * expert in turn. res may alias y. Global (n_out * MOE_DN_L, 1), local (MOE_DN_L, 1). */
__kernel void moe_down_q8(W_ARGS, int n_in, int n_out, int k, __global const int *ids,
                          __global const float *wts, __global const int4 *xq,
                          __global const float2 *xd, __global float *y,
                          __global const float *res)
{
    int o = get_global_id(0) / MOE_DN_L, lane = get_local_id(0) % MOE_DN_L;
    __local float red[MOE_DN_L];
    int nb = n_in / 32, np = k * nb;
    float out = 0.0f;
    for (int p0 = lane; p0 < np; p0 += MOE_DN_U * MOE_DN_L) {
        float part[MOE_DN_U];
#pragma unroll
        for (int u = 0; u < MOE_DN_U; u++) {
            int p = min(p0 + u * MOE_DN_L, np - 1), j = p / nb, b = p - j * nb, id = ids[j];
            float wj = wts[j];
            float v = W_KQ8(max(id, 0) * n_out + o, b, xq + (size_t)j * 2 * nb,
                            xd + (size_t)j * nb);
            part[u] = p0 + u * MOE_DN_L < np && id >= 0 ? wj * v : 0.0f;
        }
        for (int u = 0; u < MOE_DN_U; u++)
            out += part[u];
    }
    float sum = moe_dn_sum(red, lane, out);
    if (lane == 0)
        y[o] = (res ? res[o] : 0.0f) + sum;
}

#ifndef MV_FLAT
#define MV_FLAT 0
#endif
#define MOE_Q8_WG 256 /* EBB_CL_Q8_WG: quantize_x8's work-group, whose sums moe_router_q8 repeats */

/* matvec.cl's row_sum (a tree, or two rounds with MV_FLAT) over the MV_WG items of a row at red,
 * so that moe_router_q8's scores are the router matvec's to the bit. */
inline float moe_row_sum(__local float *red, int lane, float v)
{
#if MV_WG > 1
    red[lane] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
#if MV_FLAT && MV_WG > 8
    if (lane < 8) {
        float s8 = 0.0f;
        for (int k = lane; k < MV_WG; k += 8)
            s8 += red[k];
        red[lane] = s8;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = 0.0f;
    for (int k = 0; k < 8; k++)
        sum += red[k];
#else
    for (int s = MV_WG / 2; s > 0; s >>= 1) {
        if (lane < s)
            red[lane] += red[lane + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float sum = red[0];
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    return sum;
#else
    (void)red, (void)lane;
    return v;
#endif
}

/* Router rows a work-group of moe_router_q8 computes: at most MOE_Q8_WG / MV_WG; fewer spread
 * the router's rows (f32, 1 MiB for 128 experts of 2048) over more compute units, the items of
 * the other rows idle (the host's EBB_CL_MOE_RT_ROWS, ebb_cl_moe_rt_rows). */
#ifndef MOE_RT_ROWS
#define MOE_RT_ROWS (MOE_Q8_WG / MV_WG < 2 ? MOE_Q8_WG / MV_WG : 2)
#endif

/* The router's product and the experts' input in one launch, for one token on 8-bit inputs:
 * work-groups 0 .. n_rg - 1 (n_rg = ceil(n_expert / MOE_RT_ROWS)) compute the scores
 * of an f32 router r (n_expert rows of n_in at r_a + r_off) over x RMS-normed with nw, as the
 * router's matvec does (MV_WG items a row, the norm folded); the next ceil(n_in / MOE_Q8_WG)
 * quantize x normed with nw into xq / xd as quantize_x8 does (the gate and up stacks' input).
 * Both read x and nw only: no order between them. n_in a multiple of 32. Global
 * ((n_rg + ceil(n_in / MOE_Q8_WG)) * MOE_Q8_WG), local (MOE_Q8_WG). */
__kernel __attribute__((reqd_work_group_size(MOE_Q8_WG, 1, 1))) void
moe_router_q8(__global const float *x, int n_in, __global const float *nw, float eps,
              __global const uchar *r_a, ulong r_off, int n_expert, __global float *scores,
              __global char *xq, __global float2 *xd)
{
    __local float red[MOE_Q8_WG];
    int lid = get_local_id(0), g = get_group_id(0);
    int n_rg = (n_expert + MOE_RT_ROWS - 1) / MOE_RT_ROWS;
    int lane = lid % MV_WG, slot = lid / MV_WG, row = g * MOE_RT_ROWS + slot;
    int i = (g - n_rg) * MOE_Q8_WG + lid;
    float ss = 0.0f, inv;
    if (g < n_rg) { /* (the branch is the work-group's: its barriers are uniform) */
        /* The sum of squares and the row's product in one pass over x, each summed in the
         * router matvec's order (the same bits), eight steps' loads in flight. An idle team
         * (past MOE_RT_ROWS or n_expert) reads row 0 and drops it. */
        float4 acc = (float4)(0.0f);
        bool mine = slot < MOE_RT_ROWS && row < n_expert;
        const __global float *wr =
            (const __global float *)(r_a + r_off + (ulong)(mine ? row : 0) * (ulong)n_in * 4);
#pragma unroll 8
        for (int j = lane * 4; j < n_in; j += MV_WG * 4) {
            float4 v = vload4(0, x + j);
            ss += dot(v, v);
            acc += vload4(0, wr + j) * (v * vload4(0, nw + j));
        }
        inv = rsqrt(moe_row_sum(red + slot * MV_WG, lane, ss) / n_in + eps);
        float sum = moe_row_sum(red + slot * MV_WG, lane, (acc.x + acc.y + acc.z + acc.w) * inv);
        if (lane == 0 && mine)
            scores[row] = sum;
    } else {
        for (int j = lid * 4; j < n_in; j += MOE_Q8_WG * 4) {
            float4 v = vload4(0, x + j);
            ss += dot(v, v);
        }
#if MV_PTX
        ss = warp_sum(ss);
        if ((lid & 31) == 0)
            red[lid >> 5] = ss;
        barrier(CLK_LOCAL_MEM_FENCE);
        ss = 0.0f;
        for (int k = 0; k < MOE_Q8_WG / 32; k++)
            ss += red[k];
        inv = rsqrt(ss / n_in + eps);
#else
        red[lid] = ss;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = MOE_Q8_WG / 2; s > 0; s >>= 1) {
            if (lid < s)
                red[lid] += red[lid + s];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        inv = rsqrt(red[0] / n_in + eps);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        bool in = i < n_in;
        float v = in ? x[i] * nw[i] : 0.0f;
        q8_block(red, lid, v, inv, in, xq + i, xd + i / 32);
    }
}

#ifndef MOE_GU_WG
#define MOE_GU_WG 256 /* moe_gate_up_q8's work-group (the host's EBB_CL_MOE_GU_WG) */
#endif
#define MOE_GU_NT (MOE_GU_WG / MV_WG) /* its row teams of MV_WG items */
#define MOE_GU_R ((64 + MOE_GU_NT - 1) / MOE_GU_NT) /* rows a team */

/* W_KQ8 of a raw weight given by its buffer and offset (the gate or the up stack). */
inline float moe_kq8(const __global uchar *w_a, ulong w_off, int n_in, int row, int b,
                     const __global int4 *xq, const __global float2 *xd)
{
    return W_KQ8(row, b, xq, xd);
}

/* The gate and up stacks of one token's k experts and their SwiGLU, quantized for moe_down_q8,
 * in one launch: work-group (j, c) computes rows c * 32 .. c * 32 + 31 of expert j's gate
 * (W_ARGS) and up (u_a, u_off: the same layout) stacks over xq / xd (moe_router_q8's or
 * quantize_x8's) as moe_gather_q8 computes them, then writes silu(gate) * up of those 32
 * outputs as one int8 block, exactly as quantize_x8 with glu 1 would over the [gate | up]
 * outputs: gq[j * n_rows + c * 32 + i] and gd[(j * n_rows) / 32 + c]. With scores (the router's
 * n_expert of them), every work-group finds the top k itself as moe_route does (the same
 * softmax, ranks with ties to the lower id) and work-group 0 writes ids and w for moe_down_q8;
 * without, expert j is ids[j] (the expert cache's slots; -1 gives a zero block). n_rows a
 * multiple of 32, n_expert <= MOE_ROUTE_E * MOE_ROUTE_WG. Global (k * n_rows / 32 * MOE_GU_WG),
 * local (MOE_GU_WG). */
__kernel __attribute__((reqd_work_group_size(MOE_GU_WG, 1, 1))) void
moe_gate_up_q8(W_ARGS, __global const uchar *u_a, ulong u_off, int n_in, int n_rows, int k,
               __global const float *scores, int n_expert, int norm, float scale,
               __global int *ids, __global float *wts, __global const int4 *xq,
               __global const float2 *xd, __global char *gq, __global float2 *gd)
{
    __local float red[MOE_GU_WG], vals[64];
    __local int sel_id[MOE_MAX_K];
    __local float sel_p[MOE_MAX_K], pl[MOE_ROUTE_E * MOE_ROUTE_WG];
    int lid = get_local_id(0), lane = lid % MV_WG, slot = lid / MV_WG;
    int nc = n_rows / 32, j = get_group_id(0) / nc, c = get_group_id(0) % nc;
    int id;
    if (scores) {
        float p[MOE_ROUTE_E];
        if (lid < k) /* (NaN scores rank no expert in a slot: -1 there, a zero block) */
            sel_id[lid] = -1, sel_p[lid] = 0.0f;
        route_probs(scores, n_expert, red, p);
        for (int q = 0; q < MOE_ROUTE_E; q++)
            if (lid < MOE_ROUTE_WG && lid + q * MOE_ROUTE_WG < n_expert)
                pl[lid + q * MOE_ROUTE_WG] = p[q];
        barrier(CLK_LOCAL_MEM_FENCE);
        /* An expert's rank: the experts before it in (probability down, id up), counted over
         * all of them with no early exit, so that the local loads go out back to back (a
         * count stopped at k waited for each load in turn). */
        for (int q = 0; q < MOE_ROUTE_E; q++) {
            int e = lid + q * MOE_ROUTE_WG, rank = 0;
            if (lid >= MOE_ROUTE_WG || e >= n_expert)
                continue;
#pragma unroll 8
            for (int f = 0; f < n_expert; f++)
                rank += pl[f] > p[q] || (pl[f] == p[q] && f < e);
            if (rank < k)
                sel_id[rank] = e, sel_p[rank] = p[q];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        id = sel_id[j];
        if (get_group_id(0) == 0 && lid < k) {
            float tot = 0.0f;
            for (int q = 0; q < k; q++)
                tot += sel_p[q];
            float f = norm ? 1.0f / fmax(tot, 6.103515625e-5f) : 1.0f;
            if (scale != 0.0f && scale != 1.0f)
                f *= scale;
            ids[lid] = sel_id[lid];
            wts[lid] = sel_p[lid] * f;
        }
    } else {
        id = ids[j];
    }
    /* Team slot takes rows slot, slot + MOE_GU_NT, ... of the 64 (gate 0..31, up 32..63), each
     * summed over the groups b = lane, lane + MV_WG, ... in moe_gather_q8's order. Where the
     * teams divide 32 rows, a team's gate row and the up row at the same place are taken
     * together with no branch between their dots, so that all MOE_GU_R rows' loads go out
     * before the first is used (a branch around each row's dot, or a stack picked per row, had
     * NVIDIA's compiler wait for each row's loads in turn). */
    float acc[MOE_GU_R];
    for (int q = 0; q < MOE_GU_R; q++)
        acc[q] = 0.0f;
#if 32 % MOE_GU_NT == 0
#define MOE_GU_H (MOE_GU_R / 2) /* a team's gate rows (and up rows) */
    if (id >= 0) /* (-1: the whole work-group, a zero block) */
        for (int b = lane; b < n_in / 32; b += MV_WG) {
#pragma unroll
            for (int q = 0; q < MOE_GU_H; q++) {
                int row = id * n_rows + c * 32 + slot + q * MOE_GU_NT;
                acc[q] += moe_kq8(w_a, w_off, n_in, row, b, xq, xd);
                acc[MOE_GU_H + q] += moe_kq8(u_a, u_off, n_in, row, b, xq, xd);
            }
        }
    /* acc[q] is row slot + q * MOE_GU_NT of the 64 for q < MOE_GU_H, and the up row 32 + slot
     * + (q - MOE_GU_H) * MOE_GU_NT after: the same r = slot + q * MOE_GU_NT. */
#else
    if (id >= 0)
        for (int b = lane; b < n_in / 32; b += MV_WG)
            for (int q = 0; q < MOE_GU_R; q++) {
                int r = slot + q * MOE_GU_NT, row = id * n_rows + c * 32 + (r & 31);
                if (r < 64)
                    acc[q] += r < 32 ? moe_kq8(w_a, w_off, n_in, row, b, xq, xd)
                                     : moe_kq8(u_a, u_off, n_in, row, b, xq, xd);
            }
#endif
    for (int q = 0; q < MOE_GU_R; q++) {
        int r = slot + q * MOE_GU_NT;
        float sum = moe_sum_q8(red + slot * MV_WG, lane, acc[q]);
        if (lane == 0 && r < 64)
            vals[r] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float v = 0.0f;
    if (lid < 32) {
        float g = vals[lid];
        v = g / (1.0f + exp(-g)) * vals[32 + lid];
    }
    size_t o = (size_t)j * n_rows + c * 32;
    q8_block(red, lid, v, 1.0f, lid < 32, gq + o + lid, gd + o / 32);
}
#endif
