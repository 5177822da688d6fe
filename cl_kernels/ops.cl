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
 * work-group per row; tmp holds NORM_WG floats. */
inline void rmsnorm_row(__global const float *x, int x_ld, __global const float *w,
                        __global float *y, int y_ld, int n, float eps, bool add,
                        __local float *tmp)
{
    int t = get_global_id(1), lid = get_local_id(0);
    const __global float *xr = x + (size_t)t * x_ld;
    float ss = 0.0f;
    for (int i = lid; i < n; i += NORM_WG)
        ss += xr[i] * xr[i];
    ss = wg_sum(ss, tmp);
    float inv = rsqrt(ss / n + eps);
    __global float *yr = y + (size_t)t * y_ld;
    for (int i = lid; i < n; i += NORM_WG)
        yr[i] = (add ? yr[i] : 0.0f) + xr[i] * inv * w[i];
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
 * Global size (head_dim / 2, n_head + n_head_kv, n_tok). */
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

/* (a, b) of pair p rotated for position pos (unchanged past n_rot). */
inline float2 rope_rotate(float a, float b, int p, int pos, int n_rot, float base,
                          float freq_scale, __global const float *ff)
{
    if (p >= n_rot / 2)
        return (float2)(a, b);
    float2 cs = rope_cs(p, pos, n_rot, base, freq_scale, ff);
    return (float2)(a * cs.x - b * cs.y, a * cs.y + b * cs.x);
}

/* rope_kv's work for head h of one row at position pos (cache offset kv_base). */
inline void rope_kv_one(__global float *row, __global half *kc, __global half *vc, ulong kv_base,
                        int n_ctx, int pos, int p, int h, int n_head, int n_head_kv,
                        int head_dim, int n_rot, float base, float freq_scale, int neox,
                        __global const float *ff)
{
    __global float *v = row + h * head_dim; /* Q heads, then K heads */
    int2 i = rope_pair(p, n_rot, neox);
    float2 r = rope_rotate(v[i.x], v[i.y], p, pos, n_rot, base, freq_scale, ff);
    if (h < n_head) {
        v[i.x] = r.x;
        v[i.y] = r.y;
        return;
    }
    int hk = h - n_head;
    size_t off = kv_base + ((size_t)hk * n_ctx + pos % n_ctx) * head_dim;
    vstore_half(r.x, off + i.x, kc);
    vstore_half(r.y, off + i.y, kc);
    const __global float *vv = row + (n_head + n_head_kv + hk) * head_dim;
    vstore_half(vv[2 * p], off + 2 * p, vc);
    vstore_half(vv[2 * p + 1], off + 2 * p + 1, vc);
}

__kernel void rope_kv(__global float *qkv, int qkv_ld, __global half *kc, __global half *vc,
                      ulong kv_base, int n_ctx, int pos0, int n_head, int n_head_kv,
                      int head_dim, int n_rot, float base, float freq_scale, int neox,
                      __global const float *ff)
{
    int p = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    rope_kv_one(qkv + (size_t)t * qkv_ld, kc, vc, kv_base, n_ctx, pos0 + t, p, h, n_head,
                n_head_kv, head_dim, n_rot, base, freq_scale, neox, ff);
}

/* rope_kv for a batch of rows of several slots: row t is at position rt[2t + 1] of KV slot
 * rt[2t] (cache offset rt[2t] * slot_stride). Global size (head_dim / 2, n_head + n_head_kv,
 * n_rows). */
__kernel void rope_kv_rows(__global float *qkv, int qkv_ld, __global half *kc, __global half *vc,
                           __global const int *rt, ulong slot_stride, int n_ctx, int n_head,
                           int n_head_kv, int head_dim, int n_rot, float base, float freq_scale,
                           int neox, __global const float *ff)
{
    int p = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    rope_kv_one(qkv + (size_t)t * qkv_ld, kc, vc, (ulong)rt[2 * t] * slot_stride, n_ctx,
                rt[2 * t + 1], p, h, n_head, n_head_kv, head_dim, n_rot, base, freq_scale, neox,
                ff);
}

/* SwiGLU: y[t][i] = silu(g[t][i]) * g[t][n + i] (gate and up side by side in one row of 2n, as
 * the fused gate+up matvec writes them). Global size (n, n_tok). */
__kernel void swiglu(__global const float *g, int g_ld, __global float *y, int y_ld, int n)
{
    int i = get_global_id(0), t = get_global_id(1);
    const __global float *r = g + (size_t)t * g_ld;
    float a = r[i];
    y[(size_t)t * y_ld + i] = a / (1.0f + exp(-a)) * r[n + i];
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

/* Inserts (v, id) into the descending list (lv, li) of length k if it belongs there; ties keep
 * the smaller id first. */
inline void topk_insert(float *lv, int *li, int k, float v, int id)
{
    if (!(v > lv[k - 1] || (v == lv[k - 1] && id < li[k - 1])))
        return;
    int j = k - 1;
    while (j > 0 && (v > lv[j - 1] || (v == lv[j - 1] && id < li[j - 1]))) {
        lv[j] = lv[j - 1];
        li[j] = li[j - 1];
        j--;
    }
    lv[j] = v;
    li[j] = id;
}

#define TOPK_MAX 64

/* Top-k, first pass: work-item g keeps the k largest of x[g], x[g + G], ... (G = global size)
 * and writes them to pv/pi[g * k ...]. k <= TOPK_MAX. */
__kernel void topk_part(__global const float *x, int n, int k, __global float *pv,
                        __global int *pi)
{
    float lv[TOPK_MAX];
    int li[TOPK_MAX];
    int g = get_global_id(0), G = get_global_size(0);
    for (int j = 0; j < k; j++) {
        lv[j] = -INFINITY;
        li[j] = 0x7fffffff;
    }
    for (int i = g; i < n; i += G)
        topk_insert(lv, li, k, x[i], i);
    for (int j = 0; j < k; j++) {
        pv[g * k + j] = lv[j];
        pi[g * k + j] = li[j];
    }
}

/* Top-k, second pass (one work-item): merges the m * k candidates into the final k. */
__kernel void topk_merge(__global const float *pv, __global const int *pi, int m, int k,
                         __global float *ov, __global int *oi)
{
    float lv[TOPK_MAX];
    int li[TOPK_MAX];
    for (int j = 0; j < k; j++) {
        lv[j] = -INFINITY;
        li[j] = 0x7fffffff;
    }
    for (int c = 0; c < m * k; c++)
        topk_insert(lv, li, k, pv[c], pi[c]);
    for (int j = 0; j < k; j++) {
        ov[j] = lv[j];
        oi[j] = li[j];
    }
}

/* topk_part for several rows of n logits at once (the batched pass's last rows): row r =
 * get_global_id(1) of x, its partials at pv/pi[(r * G + g) * k ...] (G = get_global_size(0)).
 * Global size (G, n_rows). */
__kernel void topk_part_rows(__global const float *x, int n, int k, __global float *pv,
                             __global int *pi)
{
    float lv[TOPK_MAX];
    int li[TOPK_MAX];
    int g = get_global_id(0), G = get_global_size(0), r = get_global_id(1);
    const __global float *xr = x + (size_t)r * n;
    for (int j = 0; j < k; j++) {
        lv[j] = -INFINITY;
        li[j] = 0x7fffffff;
    }
    for (int i = g; i < n; i += G)
        topk_insert(lv, li, k, xr[i], i);
    size_t o = ((size_t)r * G + g) * k;
    for (int j = 0; j < k; j++) {
        pv[o + j] = lv[j];
        pi[o + j] = li[j];
    }
}

/* topk_merge for row get_global_id(0): its m * k candidates into ov/oi[r * k ...]. */
__kernel void topk_merge_rows(__global const float *pv, __global const int *pi, int m, int k,
                              __global float *ov, __global int *oi)
{
    float lv[TOPK_MAX];
    int li[TOPK_MAX];
    int r = get_global_id(0);
    for (int j = 0; j < k; j++) {
        lv[j] = -INFINITY;
        li[j] = 0x7fffffff;
    }
    for (int c = 0; c < m * k; c++)
        topk_insert(lv, li, k, pv[(size_t)r * m * k + c], pi[(size_t)r * m * k + c]);
    for (int j = 0; j < k; j++) {
        ov[r * k + j] = lv[j];
        oi[r * k + j] = li[j];
    }
}
