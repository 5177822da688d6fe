/* Attention over the half-precision KV cache written by rope_kv (layout per layer:
 * [kv_base + (kv_head * n_ctx + pos % n_ctx) * HEAD_DIM + d], n_ctx the positions the layer's
 * cache holds: the context, or a sliding window's ring). Query heads share KV heads in groups of
 * n_head / n_head_kv (GQA). win > 0 is a sliding window: the query at position p attends to
 * positions p - win + 1 .. p only (the ring must hold them: n_ctx >= win + the queries of a
 * launch - 1). Built with HEAD_DIM, NORM_WG (ops.cl), ATT_CHUNK (decode: positions
 * per split), ATT_TQ and ATT_TK (prefill: queries per work-group, keys per local tile).
 * Needs ops.cl (wg_sum, wg_max) in the same program. */

#ifndef ATT_CHUNK
#define ATT_CHUNK 256
#endif
#ifndef ATT_TQ
#define ATT_TQ 16
#endif
#ifndef ATT_TK
#define ATT_TK 32
#endif

/* Decode, first pass (flash-decoding): work-group (c, h) scores positions
 * [f + c * ATT_CHUNK, min(n_kv, f + (c + 1) * ATT_CHUNK)) of head h (f = att_first(n_kv, win)) and writes the unnormalised partial
 * output po[h][c][d] with its max and sum of exponentials pml[h][c] = (m, l); with a single
 * chunk it writes the normalised result to out[h][d] directly and the reduction is skipped,
 * unless out is NULL (attn_decode_reduce_q8 in q8.cl reduces and quantizes even one chunk).
 * Global size (n_chunks * NORM_WG, n_head), local (NORM_WG, 1). */
/* The first position a query at position n_kv - 1 attends to. */
inline int att_first(int n_kv, int win)
{
    return win > 0 && n_kv > win ? n_kv - win : 0;
}

/* The body of decode's first pass for work-group (c, h): qs holds the scaled query; keys and
 * values of positions p0..p0 + pn - 1 come from the KV head's cache kh / vh (n_ctx positions,
 * position p at p % n_ctx), except, with kn, the chunk's last one (the new token's), whose key
 * and value come from kn / vn in local memory (as the cache holds them). */
inline void decode_part(__local const float *qs, __local float *sc, __local float *tmp,
                        const __global half *kh, const __global half *vh, int p0, int n_ctx,
                        int pn, __local const half *kn, __local const half *vn, int c, int nc,
                        int h, __global float *po, __global float2 *pml, __global float *out)
{
    int lid = get_local_id(0);
    float m = -INFINITY;
    for (int j = lid; j < pn; j += NORM_WG) {
        float4 s4 = (float4)(0.0f);
        const __global half *kb = kh + (size_t)((p0 + j) % n_ctx) * HEAD_DIM;
        if (kn && j == pn - 1)
            for (int d = 0; d < HEAD_DIM; d += 4)
                s4 += vload_half4(0, kn + d) * vload4(0, qs + d);
        else
            for (int d = 0; d < HEAD_DIM; d += 4)
                s4 += vload_half4(0, kb + d) * vload4(0, qs + d);
        float s = s4.x + s4.y + s4.z + s4.w;
        sc[j] = s;
        m = fmax(m, s);
    }
    m = wg_max(m, tmp);
    float l = 0.0f;
    for (int j = lid; j < pn; j += NORM_WG) {
        float e = exp(sc[j] - m);
        sc[j] = e;
        l += e;
    }
    l = wg_sum(l, tmp);
    int pc = kn ? pn - 1 : pn; /* positions read from the cache */
    int s0 = p0 % n_ctx, n1 = min(pc, n_ctx - s0); /* before and after the ring wraps */
    const __global half *vb = vh + (size_t)s0 * HEAD_DIM;
    for (int d = lid; d < HEAD_DIM; d += NORM_WG) {
        float o = 0.0f;
        for (int j = 0; j < n1; j++)
            o += sc[j] * vload_half(0, vb + (size_t)j * HEAD_DIM + d);
        for (int j = n1; j < pc; j++)
            o += sc[j] * vload_half(0, vh + (size_t)(j - n1) * HEAD_DIM + d);
        if (kn)
            o += sc[pn - 1] * vload_half(d, vn);
        if (nc == 1 && out)
            out[h * HEAD_DIM + d] = o / l; /* one chunk: no reduction pass needed */
        else
            po[((size_t)h * nc + c) * HEAD_DIM + d] = o;
    }
    if (lid == 0)
        pml[h * nc + c] = (float2)(m, l);
}

__kernel void attn_decode_part(__global const float *q, __global const half *kc,
                               __global const half *vc, ulong kv_base, int n_ctx, int n_kv,
                               int n_head, int n_head_kv, float scale, __global float *po,
                               __global float2 *pml, __global float *out, int win)
{
    __local float qs[HEAD_DIM];
    __local float sc[ATT_CHUNK];
    __local float tmp[NORM_WG];
    int c = get_group_id(0), h = get_group_id(1), lid = get_local_id(0);
    int nc = get_num_groups(0);
    int hk = h / (n_head / n_head_kv);
    int p0 = att_first(n_kv, win) + c * ATT_CHUNK, pn = min(ATT_CHUNK, n_kv - p0);
    for (int d = lid; d < HEAD_DIM; d += NORM_WG)
        qs[d] = q[h * HEAD_DIM + d] * scale;
    barrier(CLK_LOCAL_MEM_FENCE);
    const __global half *kh = kc + kv_base + (size_t)hk * n_ctx * HEAD_DIM;
    const __global half *vh = vc + kv_base + (size_t)hk * n_ctx * HEAD_DIM;
    decode_part(qs, sc, tmp, kh, vh, p0, n_ctx, pn, NULL, NULL, c, nc, h, po, pml, out);
}

/* attn_decode_part with rope_kv's work for the new token (position n_kv - 1) fused in: each
 * work-group rotates its query head from row 0 of qkv (Q heads, K heads, V heads), the last
 * chunk's work-groups also rotate the key of their KV head and take key and value (rounded to
 * halves as the cache holds them) from local memory, and the first query head of each KV group
 * stores them in the cache for the tokens after. Same results as rope_kv then
 * attn_decode_part, one launch less. */
__kernel void attn_decode_rope(__global const float *qkv, __global half *kc, __global half *vc,
                               ulong kv_base, int n_ctx, int n_kv, int n_head, int n_head_kv,
                               float scale, __global float *po, __global float2 *pml,
                               __global float *out, int n_rot, float base, float freq_scale,
                               int neox, __global const float *ff, int win)
{
    __local float qs[HEAD_DIM];
    __local float sc[ATT_CHUNK];
    __local float tmp[NORM_WG];
    __local ushort kn_[HEAD_DIM], vn_[HEAD_DIM]; /* halves (no cl_khr_fp16 needed) */
    __local half *kn = (__local half *)kn_, *vn = (__local half *)vn_;
    int c = get_group_id(0), h = get_group_id(1), lid = get_local_id(0);
    int nc = get_num_groups(0), group = n_head / n_head_kv;
    int hk = h / group, pos = n_kv - 1;
    int p0 = att_first(n_kv, win) + c * ATT_CHUNK, pn = min(ATT_CHUNK, n_kv - p0);
    bool last = c == nc - 1;
    const __global float *qr = qkv + h * HEAD_DIM, *kr = qkv + (n_head + hk) * HEAD_DIM;
    const __global float *vr = qkv + (n_head + n_head_kv + hk) * HEAD_DIM;
    for (int p = lid; p < HEAD_DIM / 2; p += NORM_WG) {
        int2 i = rope_pair(p, n_rot, neox);
        float2 r = rope_rotate(qr[i.x], qr[i.y], p, pos, n_rot, base, freq_scale, ff);
        qs[i.x] = r.x * scale;
        qs[i.y] = r.y * scale;
        if (last) {
            r = rope_rotate(kr[i.x], kr[i.y], p, pos, n_rot, base, freq_scale, ff);
            vstore_half(r.x, i.x, kn);
            vstore_half(r.y, i.y, kn);
            vstore_half(vr[2 * p], 2 * p, vn);
            vstore_half(vr[2 * p + 1], 2 * p + 1, vn);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const __global half *kh = kc + kv_base + (size_t)hk * n_ctx * HEAD_DIM;
    const __global half *vh = vc + kv_base + (size_t)hk * n_ctx * HEAD_DIM;
    if (last && h % group == 0) {
        size_t off = kv_base + ((size_t)hk * n_ctx + pos % n_ctx) * HEAD_DIM;
        for (int d = lid; d < HEAD_DIM; d += NORM_WG) {
            vstore_half(vload_half(d, kn), off + d, kc);
            vstore_half(vload_half(d, vn), off + d, vc);
        }
    }
    decode_part(qs, sc, tmp, kh, vh, p0, n_ctx, pn, last ? kn : NULL, last ? vn : NULL, c, nc, h,
                po, pml, out);
}

/* Decode, second pass: combines the n_chunks partials of each head. Global (HEAD_DIM, n_head). */
__kernel void attn_decode_reduce(__global const float *po, __global const float2 *pml,
                                 int n_chunks, __global float *out)
{
    int d = get_global_id(0), h = get_global_id(1);
    float m = -INFINITY;
    for (int c = 0; c < n_chunks; c++)
        m = fmax(m, pml[h * n_chunks + c].x);
    float l = 0.0f, o = 0.0f;
    for (int c = 0; c < n_chunks; c++) {
        float2 ml = pml[h * n_chunks + c];
        float w = exp(ml.x - m);
        l += w * ml.y;
        o += w * po[((size_t)h * n_chunks + c) * HEAD_DIM + d];
    }
    out[h * HEAD_DIM + d] = o / l;
}

/* Decode rows of a batch (flash-decoding over slots at different depths): z-th decode row
 * dr[z] of the batch, at position rt[2r + 1] of KV slot rt[2r], attends positions 0..pos in
 * chunks as attn_decode_part does; its partials go to po / pml at row z (max_nc chunks per
 * head), a single chunk's result straight to out row r. Global size (max_nc * NORM_WG, n_head,
 * n_dec), local (NORM_WG, 1, 1): work-groups past a row's own chunk count return at once. */
__kernel void attn_decode_rows(__global const float *qkv, int qkv_ld, __global const half *kc,
                               __global const half *vc, __global const int *rt,
                               __global const int *dr, ulong slot_stride, int n_ctx,
                               int n_head, int n_head_kv, float scale, __global float *po,
                               __global float2 *pml, int max_nc, __global float *out,
                               int out_ld, int win)
{
    __local float qs[HEAD_DIM];
    __local float sc[ATT_CHUNK];
    __local float tmp[NORM_WG];
    int c = get_group_id(0), h = get_group_id(1), z = get_group_id(2), lid = get_local_id(0);
    int r = dr[z], n_kv = rt[2 * r + 1] + 1, f = att_first(n_kv, win);
    int nc = (n_kv - f + ATT_CHUNK - 1) / ATT_CHUNK;
    if (c >= nc)
        return; /* the whole work-group: no barrier is skipped by part of it */
    int hk = h / (n_head / n_head_kv);
    int p0 = f + c * ATT_CHUNK, pn = min(ATT_CHUNK, n_kv - p0);
    const __global float *q = qkv + (size_t)r * qkv_ld;
    for (int d = lid; d < HEAD_DIM; d += NORM_WG)
        qs[d] = q[h * HEAD_DIM + d] * scale;
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong kv_base = (ulong)rt[2 * r] * slot_stride;
    const __global half *kh = kc + kv_base + (size_t)hk * n_ctx * HEAD_DIM;
    const __global half *vh = vc + kv_base + (size_t)hk * n_ctx * HEAD_DIM;
    decode_part(qs, sc, tmp, kh, vh, p0, n_ctx, pn, NULL, NULL, c, nc, h,
                po + (size_t)z * n_head * max_nc * HEAD_DIM, pml + (size_t)z * n_head * max_nc,
                out + (size_t)r * out_ld);
}

/* The second pass of attn_decode_rows for rows of more than one chunk. Global (HEAD_DIM,
 * n_head, n_dec). */
__kernel void attn_decode_reduce_rows(__global const float *po, __global const float2 *pml,
                                      __global const int *rt, __global const int *dr,
                                      int max_nc, __global float *out, int out_ld, int win)
{
    int d = get_global_id(0), h = get_global_id(1), z = get_global_id(2);
    int r = dr[z], n_kv = rt[2 * r + 1] + 1;
    int nc = (n_kv - att_first(n_kv, win) + ATT_CHUNK - 1) / ATT_CHUNK;
    if (nc == 1)
        return;
    const __global float *pz = po + (size_t)z * get_global_size(1) * max_nc * HEAD_DIM;
    const __global float2 *mz = pml + (size_t)z * get_global_size(1) * max_nc;
    float m = -INFINITY;
    for (int c = 0; c < nc; c++)
        m = fmax(m, mz[h * nc + c].x);
    float l = 0.0f, o = 0.0f;
    for (int c = 0; c < nc; c++) {
        float2 ml = mz[h * nc + c];
        float w = exp(ml.x - m);
        l += w * ml.y;
        o += w * pz[((size_t)h * nc + c) * HEAD_DIM + d];
    }
    out[(size_t)r * out_ld + h * HEAD_DIM + d] = o / l;
}

/* Prefill, causal: query t (position pos0 + t) of head h attends positions 0..pos0 + t (with
 * win, att_first(pos0 + t + 1, win)..pos0 + t). A
 * work-group of ATT_TQ queries walks the keys in tiles of ATT_TK staged in local memory, each
 * work-item keeping an online softmax (running max, sum and output) in registers. Q rows are
 * rows r0.. of qkv (row stride qkv_ld), output rows the same rows of out (stride out_ld).
 * Global size (round_up(n_tok, ATT_TQ), n_head), local (ATT_TQ, 1). */
__kernel void attn_prefill(__global const float *qkv, int qkv_ld, __global const half *kc,
                           __global const half *vc, ulong kv_base, int n_ctx, int pos0,
                           int n_tok, int n_head, int n_head_kv, float scale,
                           __global float *out, int out_ld, int r0, int win)
{
    __local float4 ks[ATT_TK][HEAD_DIM / 4];
    __local float4 vs[ATT_TK][HEAD_DIM / 4];
    int t = get_global_id(0), h = get_global_id(1), lid = get_local_id(0);
    int hk = h / (n_head / n_head_kv);
    bool valid = t < n_tok;
    int qp = pos0 + t;
    int t_last = min(n_tok, (int)(get_group_id(0) + 1) * ATT_TQ) - 1;
    int last = pos0 + t_last, qf = att_first(qp + 1, win);
    int first = att_first(pos0 + (int)get_group_id(0) * ATT_TQ + 1, win); /* the group's */
    float4 q[HEAD_DIM / 4], acc[HEAD_DIM / 4];
    for (int d = 0; d < HEAD_DIM / 4; d++) {
        q[d] = valid ? vload4(d, qkv + (size_t)(r0 + t) * qkv_ld + h * HEAD_DIM) * scale
                     : (float4)(0.0f);
        acc[d] = (float4)(0.0f);
    }
    float m = -INFINITY, l = 0.0f;
    const __global half *kb = kc + kv_base + (size_t)hk * n_ctx * HEAD_DIM;
    const __global half *vb = vc + kv_base + (size_t)hk * n_ctx * HEAD_DIM;
    for (int k0 = first; k0 <= last; k0 += ATT_TK) {
        for (int e = lid; e < ATT_TK * (HEAD_DIM / 4); e += ATT_TQ) {
            int j = e / (HEAD_DIM / 4), d = e % (HEAD_DIM / 4);
            bool in = k0 + j <= last;
            size_t at = (size_t)((k0 + j) % n_ctx) * HEAD_DIM;
            ks[j][d] = in ? vload_half4(d, kb + at) : (float4)(0.0f);
            vs[j][d] = in ? vload_half4(d, vb + at) : (float4)(0.0f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (valid) {
            int jn = min(ATT_TK, qp - k0 + 1);
            for (int j = max(0, qf - k0); j < jn; j++) {
                float4 s4 = (float4)(0.0f);
                for (int d = 0; d < HEAD_DIM / 4; d++)
                    s4 += q[d] * ks[j][d];
                float s = s4.x + s4.y + s4.z + s4.w;
                if (s > m) {
                    float corr = exp(m - s);
                    l *= corr;
                    for (int d = 0; d < HEAD_DIM / 4; d++)
                        acc[d] *= corr;
                    m = s;
                }
                float p = exp(s - m);
                l += p;
                for (int d = 0; d < HEAD_DIM / 4; d++)
                    acc[d] += p * vs[j][d];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (!valid)
        return;
    for (int d = 0; d < HEAD_DIM / 4; d++)
        vstore4(acc[d] / l, d, out + (size_t)(r0 + t) * out_ld + h * HEAD_DIM);
}
