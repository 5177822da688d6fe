/* Element-wise and row-wise kernels of the forward pass. Activations are rows of floats, one
 * row per token; the KV cache stores halves through vstore_half (no cl_khr_fp16 needed).
 * Options: NORM_WG (work-group size of row reductions, a power of two). */

#ifndef NORM_WG
#define NORM_WG 64
#endif

/* Sum of v over the work-group (NORM_WG items); every item gets the result. */
inline float wg_sum(float v, __local float *tmp)
{
    int lid = get_local_id(0);
    tmp[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = NORM_WG / 2; s > 0; s >>= 1) {
        if (lid < s)
            tmp[lid] += tmp[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = tmp[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

inline float wg_max(float v, __local float *tmp)
{
    int lid = get_local_id(0);
    tmp[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = NORM_WG / 2; s > 0; s >>= 1) {
        if (lid < s)
            tmp[lid] = fmax(tmp[lid], tmp[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = tmp[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* The RMS norm of row t of x times w, stored into row t of y or (add) added to it. One
 * work-group per row; tmp holds NORM_WG floats. Each item sums its squares in the order it
 * always did (x[lid], x[lid + NORM_WG], ...: results do not move with this kernel's shape) with
 * four loads issued before they are added; the output goes four floats a load and store (vload4
 * needs only a float's alignment), the n % 4 tail one by one. */
inline void rmsnorm_row(__global const float *x, int x_ld, __global const float *w,
                        __global float *y, int y_ld, int n, float eps, bool add,
                        __local float *tmp)
{
    int t = get_global_id(1), lid = get_local_id(0), n4 = n / 4;
    const __global float *xr = x + (size_t)t * x_ld;
    float ss = wg_sum(norm_sq_part(xr, n, lid), tmp);
    float inv = rsqrt(ss / n + eps);
    __global float *yr = y + (size_t)t * y_ld;
    for (int j = lid; j < n4; j += NORM_WG) {
        float4 v = vload4(j, xr) * inv * vload4(j, w);
        vstore4(add ? vload4(j, yr) + v : v, j, yr);
    }
    for (int j = 4 * n4 + lid; j < n; j += NORM_WG)
        yr[j] = (add ? yr[j] : 0.0f) + xr[j] * inv * w[j];
}

/* RMSNorm of row t: y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w. One work-group per row
 * (global (NORM_WG, n_tok), local (NORM_WG, 1)); y may alias x. */
__kernel void rmsnorm(__global const float *x, int x_ld, __global const float *w,
                      __global float *y, int y_ld, int n, float eps)
{
    __local float tmp[NORM_WG];
    rmsnorm_row(x, x_ld, w, y, y_ld, n, eps, false, tmp);
}

/* Post-norm residual add (Gemma's norms of a block's output): y[t] += x[t] /
 * sqrt(mean(x[t]^2) + eps) * w. One work-group per row, as rmsnorm; y must not alias x. */
__kernel void rmsnorm_add(__global const float *x, int x_ld, __global const float *w,
                          __global float *y, int y_ld, int n, float eps)
{
    __local float tmp[NORM_WG];
    rmsnorm_row(x, x_ld, w, y, y_ld, n, eps, true, tmp);
}

/* Rotary embedding of the Q and K heads of row t of qkv (layout per row: n_head heads of
 * head_dim for Q, then n_head_kv for K, then n_head_kv for V), fused with the KV-cache write:
 * Q is rotated in place, K is rotated into kc and V copied into vc, as halves, at position
 * pos0 + t. Cache layout per layer: [kv_base + (h * n_ctx + pos % n_ctx) * head_dim + d]: a
 * layer whose cache holds fewer positions than the context (a sliding window's ring) keeps the
 * last n_ctx of them.
 * neox selects pairs (i, i + n_rot/2) instead of (2i, 2i+1). Dimensions past n_rot are copied.
 * Global size (head_dim / 2, G, n_tok) for any G >= 1: work-item (p, g, t) rotates pair p of
 * heads g, g + G, ... by one angle (its sine and cosine computed once).
 * With KV_Q8 (--kv-type q8_0) the cache holds GGUF's Q8_0 blocks instead of halves: each run of
 * 32 values of a position's head is one half scale d = max |x| / 127 and 32 int8 q = round(x / d),
 * 34 bytes (KV_QB), so a head of HEAD_DIM values takes HEAD_DIM / 32 * 34 bytes and the value
 * at index i of the half layout starts the block at byte i / 32 * 34 (KV_AT). Work-item p < head_dim
 * / 32 of a K head then writes block p of its key (each value rotated on its own) and value. */
/* The pair of dimensions rotated by pair index p: (2p, 2p + 1), or with neox (p, p + n_rot / 2)
 * for p < n_rot / 2. */
inline int2 rope_pair(int p, int n_rot, int neox)
{
    return neox && p < n_rot / 2 ? (int2)(p, p + n_rot / 2) : (int2)(2 * p, 2 * p + 1);
}

/* The cosine and sine of pair p's angle at position pos ((1, 0) past n_rot). ff, when given,
 * holds each pair's frequency divisor (Llama 3.1's rope scaling, n_rot / 2 floats). */
inline float2 rope_cs(int p, int pos, int n_rot, float base, float freq_scale,
                      __global const float *ff)
{
    if (p >= n_rot / 2)
        return (float2)(1.0f, 0.0f);
    /* base^(-2p/n_rot) through exp2/log2: pow is several times slower on CPU devices. */
    float theta = (float)pos * freq_scale * exp2(-2.0f * (float)p / (float)n_rot * log2(base));
    if (ff)
        theta /= ff[p];
    float c;
    float s = sincos(theta, &c);
    return (float2)(c, s);
}

/* (a, b) rotated by the angle of cosine and sine cs. */
inline float2 rope_apply(float a, float b, float2 cs)
{
    return (float2)(a * cs.x - b * cs.y, a * cs.y + b * cs.x);
}

/* (a, b) of pair p rotated for position pos (unchanged past n_rot). */
inline float2 rope_rotate(float a, float b, int p, int pos, int n_rot, float base,
                          float freq_scale, __global const float *ff)
{
    if (p >= n_rot / 2)
        return (float2)(a, b);
    return rope_apply(a, b, rope_cs(p, pos, n_rot, base, freq_scale, ff));
}

#if defined(KV_Q8) && KV_Q8
#define KV_T uchar
#define KV_QB 34 /* bytes of a block of 32 values */
/* The cache's bytes from value index off (a multiple of 32) of the half layout on. */
#define KV_AT(c, off) ((c) + (size_t)(off) / 32 * KV_QB)

/* Dimension d of a head rotated for position pos (rope_rotate's value for it, partner read
 * from the unrotated row v). */
inline float rope_dim(const __global float *v, int d, int pos, int n_rot, float base,
                      float freq_scale, int neox, __global const float *ff)
{
    int p = neox && d < n_rot ? d % (n_rot / 2) : d / 2;
    int2 i = rope_pair(p, n_rot, neox);
    float2 r = rope_rotate(v[i.x], v[i.y], p, pos, n_rot, base, freq_scale, ff);
    return d == i.x ? r.x : r.y;
}

/* A block's scale d for its largest magnitude amax (stored as a half), and 1 / d (0 for an
 * all-zero block) by which its values are multiplied and rounded: GGUF's reference quantizer. */
inline float kv_q8_scale(float amax, float *id)
{
    float d = amax / 127.0f;
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

/* 32 values as one Q8_0 block at b. */
inline void kv_put_q8(__global uchar *b, const float *x)
{
    float amax = 0.0f, id;
    for (int j = 0; j < 32; j++)
        amax = fmax(amax, fabs(x[j]));
    vstore_half(kv_q8_scale(amax, &id), 0, (__global half *)b);
    for (int j = 0; j < 32; j++)
        ((__global char *)b)[2 + j] = convert_char_sat(round(x[j] * id));
}
#else
#define KV_T half
#define KV_AT(c, off) ((c) + (off))
#endif

/* rope_kv's work for head h of one row at position pos (cache offset kv_base); cs: pair p's
 * cosine and sine at pos (rope_cs). */
inline void rope_kv_one(__global float *row, __global KV_T *kc, __global KV_T *vc, ulong kv_base,
                        int n_ctx, int pos, int p, int h, int n_head, int n_head_kv,
                        int head_dim, int n_rot, float base, float freq_scale, int neox,
                        __global const float *ff, float2 cs)
{
    __global float *v = row + h * head_dim; /* Q heads, then K heads */
#if defined(KV_Q8) && KV_Q8
    if (h >= n_head) {
        if (p >= head_dim / 32)
            return;
        int hk = h - n_head;
        size_t off = kv_base + ((size_t)hk * n_ctx + pos % n_ctx) * head_dim + p * 32;
        const __global float *vv = row + (n_head + n_head_kv + hk) * head_dim + p * 32;
        float x[32];
        for (int j = 0; j < 32; j++)
            x[j] = rope_dim(v, p * 32 + j, pos, n_rot, base, freq_scale, neox, ff);
        kv_put_q8(KV_AT(kc, off), x);
        for (int j = 0; j < 32; j++)
            x[j] = vv[j];
        kv_put_q8(KV_AT(vc, off), x);
        return;
    }
#endif
    int2 i = rope_pair(p, n_rot, neox);
    float2 r = rope_apply(v[i.x], v[i.y], cs);
    if (h < n_head) {
        v[i.x] = r.x;
        v[i.y] = r.y;
        return;
    }
#if !defined(KV_Q8) || !KV_Q8
    int hk = h - n_head;
    size_t off = kv_base + ((size_t)hk * n_ctx + pos % n_ctx) * head_dim;
    vstore_half(r.x, off + i.x, kc);
    vstore_half(r.y, off + i.y, kc);
    const __global float *vv = row + (n_head + n_head_kv + hk) * head_dim;
    vstore_half(vv[2 * p], off + 2 * p, vc);
    vstore_half(vv[2 * p + 1], off + 2 * p + 1, vc);
#endif
}

__kernel void rope_kv(__global float *qkv, int qkv_ld, __global KV_T *kc, __global KV_T *vc,
                      ulong kv_base, int n_ctx, int pos0, int n_head, int n_head_kv,
                      int head_dim, int n_rot, float base, float freq_scale, int neox,
                      __global const float *ff)
{
    int p = get_global_id(0), t = get_global_id(2), pos = pos0 + t;
    float2 cs = rope_cs(p, pos, n_rot, base, freq_scale, ff);
    for (int h = get_global_id(1); h < n_head + n_head_kv; h += get_global_size(1))
        rope_kv_one(qkv + (size_t)t * qkv_ld, kc, vc, kv_base, n_ctx, pos, p, h, n_head,
                    n_head_kv, head_dim, n_rot, base, freq_scale, neox, ff, cs);
}

/* rope_kv for a batch of rows of several slots: row t is at position rt[2t + 1] of KV slot
 * rt[2t] (cache offset rt[2t] * slot_stride). Global size as rope_kv's. */
__kernel void rope_kv_rows(__global float *qkv, int qkv_ld, __global KV_T *kc, __global KV_T *vc,
                           __global const int *rt, ulong slot_stride, int n_ctx, int n_head,
                           int n_head_kv, int head_dim, int n_rot, float base, float freq_scale,
                           int neox, __global const float *ff)
{
    int p = get_global_id(0), t = get_global_id(2), pos = rt[2 * t + 1];
    float2 cs = rope_cs(p, pos, n_rot, base, freq_scale, ff);
    for (int h = get_global_id(1); h < n_head + n_head_kv; h += get_global_size(1))
        rope_kv_one(qkv + (size_t)t * qkv_ld, kc, vc, (ulong)rt[2 * t] * slot_stride, n_ctx, pos,
                    p, h, n_head, n_head_kv, head_dim, n_rot, base, freq_scale, neox, ff, cs);
}

/* SwiGLU: y[t][i] = silu(g[t][i]) * g[t][n + i] (gate and up side by side in one row of 2n, as
 * the fused gate+up matvec writes them). Global size (n, n_tok). */
__kernel void swiglu(__global const float *g, int g_ld, __global float *y, int y_ld, int n)
{
    int i = get_global_id(0), t = get_global_id(1);
    const __global float *r = g + (size_t)t * g_ld;
    y[(size_t)t * y_ld + i] = silu_mul(r[i], r[n + i]);
}

/* GeGLU: y[t][i] = gelu_tanh(g[t][i]) * g[t][n + i] (act.cl), swiglu's layout. Global size
 * (n, n_tok). */
__kernel void geglu(__global const float *g, int g_ld, __global float *y, int y_ld, int n)
{
    int i = get_global_id(0), t = get_global_id(1);
    const __global float *r = g + (size_t)t * g_ld;
    y[(size_t)t * y_ld + i] = gelu_tanh(r[i]) * r[n + i];
}

/* y = a + b over n floats. */
__kernel void add(__global const float *a, __global const float *b, __global float *y)
{
    int i = get_global_id(0);
    y[i] = a[i] + b[i];
}

/* y[t][i] += b[i]: a bias over the first n columns of each row (qwen2's q | k | v biases).
 * Global size (n, n_tok). */
__kernel void add_bias(__global float *y, int y_ld, __global const float *b)
{
    int i = get_global_id(0), t = get_global_id(1);
    y[(size_t)t * y_ld + i] += b[i];
}

/* RMS norm of each head of row t of qkv in place: the n_head query heads scaled by wq, the
 * next n_head_kv key heads by wk (both head_dim long); V is left alone. One work-group per
 * head and row: global (NORM_WG, n_head + n_head_kv, n_tok), local (NORM_WG, 1, 1). */
__kernel void head_norm(__global float *qkv, int qkv_ld, __global const float *wq,
                        __global const float *wk, int n_head, int head_dim, float eps)
{
    __local float tmp[NORM_WG];
    int lid = get_local_id(0), h = get_global_id(1), t = get_global_id(2);
    __global float *v = qkv + (size_t)t * qkv_ld + (size_t)h * head_dim;
    const __global float *w = h < n_head ? wq : wk;
    float ss = 0.0f;
    for (int i = lid; i < head_dim; i += NORM_WG)
        ss += v[i] * v[i];
    ss = wg_sum(ss, tmp);
    float inv = rsqrt(ss / head_dim + eps);
    for (int i = lid; i < head_dim; i += NORM_WG)
        v[i] = v[i] * inv * w[i];
}

/* Softmax of each row of n floats in place. One work-group per row (global (NORM_WG, rows)). */
__kernel void softmax(__global float *x, int n)
{
    __local float tmp[NORM_WG];
    int lid = get_local_id(0);
    __global float *r = x + (size_t)get_global_id(1) * n;
    float m = -INFINITY;
    for (int i = lid; i < n; i += NORM_WG)
        m = fmax(m, r[i]);
    m = wg_max(m, tmp);
    float s = 0.0f;
    for (int i = lid; i < n; i += NORM_WG)
        s += exp(r[i] - m);
    s = wg_sum(s, tmp);
    for (int i = lid; i < n; i += NORM_WG)
        r[i] = exp(r[i] - m) / s;
}

/* Device top-k of rows of n logits: descending values, ties to the smaller id, k <= TOPK_MAX.
 * topk_part gives each work-group of TOPK_WG items a tile of TOPK_TILE logits of a row (each item
 * TOPK_E of them, loaded together and kept sorted in registers) and writes the tile's best k, in
 * order, to its slot of the partials; topk_merge takes one row's sorted partial lists in one
 * work-group. Both select by rounds of work-group arg-max over the items' list heads: the winner
 * advances its list, so no list is read past its first element that did not make the cut. NaN
 * counts as the empty entry (-inf, 0x7fffffff), which sorts after every real logit. */
#define TOPK_MAX 64
#define TOPK_WG 256
#define TOPK_E 4
#define TOPK_TILE (TOPK_WG * TOPK_E)
#define TOPK_R 16  /* first-level reducers of an arg-max round, TOPK_WG / TOPK_R items each */
#define TOPK_OWN 4 /* partial lists per topk_merge item: rows of up to 4 * TOPK_WG tiles */
#define TOPK_NONE 0x7fffffff

inline bool topk_better(float a, int ia, float b, int ib)
{
    return a > b || (a == b && ia < ib);
}

/* The best (v, id) over the work-group, to every item; two barriers. A call's local writes come
 * after every read of the previous call's (each side of a barrier), so calls may follow. */
inline void topk_wg_best(float *v, int *id, __local float *lv, __local int *li, __local float *rv,
                         __local int *ri)
{
    int lid = get_local_id(0);
    lv[lid] = *v;
    li[lid] = *id;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < TOPK_R) {
        float bv = lv[lid];
        int bi = li[lid];
        for (int j = lid + TOPK_R; j < TOPK_WG; j += TOPK_R) {
            float x = lv[j];
            int xi = li[j];
            if (topk_better(x, xi, bv, bi))
                bv = x, bi = xi;
        }
        rv[lid] = bv;
        ri[lid] = bi;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float bv = rv[0];
    int bi = ri[0];
    for (int j = 1; j < TOPK_R; j++) {
        float x = rv[j];
        int xi = ri[j];
        if (topk_better(x, xi, bv, bi))
            bv = x, bi = xi;
    }
    *v = bv;
    *id = bi;
}

/* Orders (a, ia) before (b, ib). */
#define TOPK_CSWAP(a, ia, b, ib)                                                                  \
    if (topk_better(b, ib, a, ia)) {                                                              \
        float t_ = a;                                                                             \
        int ti_ = ia;                                                                             \
        a = b, ia = ib, b = t_, ib = ti_;                                                         \
    }

/* First pass over rows of x (n logits each): work-group g of row r = get_global_id(1) writes the
 * best k of its tile, sorted, to pv/pi[(r * P + g) * k ...] (P = get_num_groups(0)). Global
 * (P * TOPK_WG, n_rows), local (TOPK_WG, 1), P = ceil(n / TOPK_TILE). */
__kernel __attribute__((reqd_work_group_size(TOPK_WG, 1, 1))) void
topk_part(__global const float *x, int n, int k, __global float *pv, __global int *pi)
{
    __local float lv[TOPK_WG], rv[TOPK_R];
    __local int li[TOPK_WG], ri[TOPK_R];
    int lid = get_local_id(0), g = get_group_id(0), P = get_num_groups(0), r = get_global_id(1);
    const __global float *xr = x + (size_t)r * n;
    int i0 = g * TOPK_TILE + lid, i1 = i0 + TOPK_WG, i2 = i1 + TOPK_WG, i3 = i2 + TOPK_WG;
    float a0 = i0 < n ? xr[i0] : NAN, a1 = i1 < n ? xr[i1] : NAN;
    float a2 = i2 < n ? xr[i2] : NAN, a3 = i3 < n ? xr[i3] : NAN;
    if (isnan(a0))
        a0 = -INFINITY, i0 = TOPK_NONE;
    if (isnan(a1))
        a1 = -INFINITY, i1 = TOPK_NONE;
    if (isnan(a2))
        a2 = -INFINITY, i2 = TOPK_NONE;
    if (isnan(a3))
        a3 = -INFINITY, i3 = TOPK_NONE;
    TOPK_CSWAP(a0, i0, a1, i1);
    TOPK_CSWAP(a2, i2, a3, i3);
    TOPK_CSWAP(a0, i0, a2, i2);
    TOPK_CSWAP(a1, i1, a3, i3);
    TOPK_CSWAP(a1, i1, a2, i2);
    size_t o = ((size_t)r * P + g) * k;
    for (int j = 0; j < k; j++) {
        float v = a0;
        int id = i0;
        topk_wg_best(&v, &id, lv, li, rv, ri);
        if (lid == 0) {
            pv[o + j] = v;
            pi[o + j] = id;
        }
        if (id == i0 && id != TOPK_NONE) {
            a0 = a1, i0 = i1, a1 = a2, i1 = i2, a2 = a3, i2 = i3;
            a3 = -INFINITY, i3 = TOPK_NONE;
        }
    }
}

/* Second pass: row r = get_global_id(1)'s P sorted lists of k (topk_part's) into its final k at
 * ov/oi[r * k ...]. Item l holds lists l, l + TOPK_WG, ... (P <= TOPK_OWN * TOPK_WG), each as
 * its head and the element after it, so that a list winning twice in a row rarely waits for a
 * load. Global (TOPK_WG, n_rows), local (TOPK_WG, 1). */
__kernel __attribute__((reqd_work_group_size(TOPK_WG, 1, 1))) void
topk_merge(__global const float *pv, __global const int *pi, int P, int k, __global float *ov,
           __global int *oi)
{
    __local float lv[TOPK_WG], rv[TOPK_R];
    __local int li[TOPK_WG], ri[TOPK_R];
    int lid = get_local_id(0), r = get_global_id(1);
    const __global float *vr = pv + (size_t)r * P * k;
    const __global int *ir = pi + (size_t)r * P * k;
    float hv[TOPK_OWN], nv[TOPK_OWN];
    int hi[TOPK_OWN], ni[TOPK_OWN], pos[TOPK_OWN];
    for (int j = 0; j < TOPK_OWN; j++) {
        int l = lid + j * TOPK_WG;
        bool has = l < P;
        hv[j] = has ? vr[(size_t)l * k] : -INFINITY;
        hi[j] = has ? ir[(size_t)l * k] : TOPK_NONE;
        nv[j] = has && k > 1 ? vr[(size_t)l * k + 1] : -INFINITY;
        ni[j] = has && k > 1 ? ir[(size_t)l * k + 1] : TOPK_NONE;
        pos[j] = 1;
    }
    for (int t = 0; t < k; t++) {
        float v = hv[0];
        int id = hi[0];
        for (int j = 1; j < TOPK_OWN; j++)
            if (topk_better(hv[j], hi[j], v, id))
                v = hv[j], id = hi[j];
        topk_wg_best(&v, &id, lv, li, rv, ri);
        if (lid == 0) {
            ov[(size_t)r * k + t] = v;
            oi[(size_t)r * k + t] = id;
        }
        for (int j = 0; j < TOPK_OWN; j++) {
            if (hi[j] != id || id == TOPK_NONE)
                continue;
            int l = lid + j * TOPK_WG, p = ++pos[j];
            hv[j] = nv[j];
            hi[j] = ni[j];
            nv[j] = p < k ? vr[(size_t)l * k + p] : -INFINITY;
            ni[j] = p < k ? ir[(size_t)l * k + p] : TOPK_NONE;
        }
    }
}
