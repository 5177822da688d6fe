/* Attention over the KV cache written by rope_kv (layout per layer, in values:
 * [kv_base + (kv_head * n_ctx + pos % n_ctx) * HEAD_DIM + d], n_ctx the positions the layer's
 * cache holds: the context, or a sliding window's ring), of halves, or with KV_Q8 of Q8_0
 * blocks (ops.cl: value index i's block at byte i / 32 * 34, KV_AT), which every kernel here
 * reads through KV4 and, on tensor cores, dequantizes to halves as it stages its tiles. Query heads share KV heads in groups of
 * n_head / n_head_kv (GQA). win > 0 is a sliding window: the query at position p attends to
 * positions p - win + 1 .. p only (the ring must hold them: n_ctx >= win + the queries of a
 * launch - 1), attn_prefill_mma as attn_prefill. Built
 * with HEAD_DIM, NORM_WG (ops.cl), ATT_WG (decode: work-items per work-group), ATT_CHUNK
 * (decode: positions per split), ATT_TQ and ATT_TK (prefill: queries per work-group, keys per
 * local tile). Needs ops.cl (rope_pair, rope_cs) in the same program. */

#ifndef ATT_CHUNK
#define ATT_CHUNK 256
#endif
#ifndef ATT_TQ
#define ATT_TQ 16
#endif
#ifndef ATT_TK
#define ATT_TK 32
#endif

#if defined(MV_CPU) && MV_CPU
/* CPU devices: the cache's halves through half.cl's exact integer conversion. */
#define KV_H(p) cpu_half(*(const __global ushort *)(p))
#else
#define KV_H(p) vload_half(0, (const __global half *)(p))
#endif
#if defined(KV_Q8) && KV_Q8
/* Values 4i..4i + 3 of a position's head at row (its first block): q * d of their block. */
inline float4 kv_q8_4(int i, const __global uchar *row)
{
    const __global uchar *b = row + (i / 8) * KV_QB;
    return convert_float4(vload4(0, (const __global char *)(b + 2 + (i % 8) * 4))) * KV_H(b);
}
#define KV4(i, p) kv_q8_4((i), (p))
/* The new token's key and value in local memory (attn_decode_rope): floats, as the cache's
 * blocks give them back. */
#define KN_T float
#define KN4(i, p) vload4((i), (p))
#elif defined(MV_CPU) && MV_CPU
#define KV4(i, p) cpu_half4(vload4((i), (const __global ushort *)(p)))
#else
#define KV4(i, p) vload_half4((i), (p))
#endif
#ifndef KN_T
#define KN_T half
#define KN4(i, p) vload_half4((i), (p))
#endif

#ifndef ATT_G
#define ATT_G 1
#endif

/* The first position a query at position n_kv - 1 attends to. */
inline int att_first(int n_kv, int win)
{
    return win > 0 && n_kv > win ? n_kv - win : 0;
}

/* Decode attention (attn_decode_part, attn_decode_rope, attn_decode_rows) runs work-groups of
 * ATT_WG work-items (the tuning's att_wg: NORM_WG unless set) that split both passes over
 * positions and dimensions, so that at short contexts, where a launch is a few work-groups,
 * every work-item has a few independent vector loads in flight instead of a long serial loop:
 * - scores: ATT_KL work-items share a key, each taking its float4s kl, kl + ATT_KL, .. (ATT_DK
 *   of them), ATT_KP keys side by side; the partial dot products meet in local memory (CPUs:
 *   a work-item takes whole keys);
 * - values: ATT_VL work-items share a position, each owning float4s vl, vl + ATT_VL, ..
 *   (ATT_DV) of the output, ATT_VP positions side by side, their partial outputs summed
 *   through local memory at the end;
 * - the keys of ATT_UK rounds and the values of ATT_UV positions a work-item takes are loaded
 *   together, the first batch of each before the queries are staged. */
#ifndef ATT_WG
#define ATT_WG NORM_WG
#endif
#define ATT_D4 (HEAD_DIM / 4)
#if defined(MV_CPU) && MV_CPU
#define ATT_KL 1
#elif ATT_D4 % 4 == 0 && ATT_WG % 4 == 0
#define ATT_KL 4
#elif ATT_D4 % 2 == 0 && ATT_WG % 2 == 0
#define ATT_KL 2
#else
#define ATT_KL 1
#endif
#define ATT_KP (ATT_WG / ATT_KL)
#define ATT_DK (ATT_D4 / ATT_KL)
#define ATT_VL (ATT_D4 < ATT_WG ? ATT_D4 : ATT_WG)
#define ATT_DV ((ATT_D4 + ATT_VL - 1) / ATT_VL)
#define ATT_VP (ATT_WG / ATT_VL)
/* ATT_DASYNC (the host sets it after ebb_cl_async_probe, f16 caches, where the staging fits the
 * work-group's local memory): decode's work-groups copy the keys and values of their whole chunk
 * into local memory with cp.async as they start (keys, then values, one group of copies each),
 * so that all of the chunk's reads are in flight at once instead of a batch per work-item at a
 * time; the scores wait for the keys only, the values' copies land meanwhile. A key row is
 * padded by 8 halves (ATT_KR: the score lanes' reads of eight rows side by side spread over the
 * banks), value rows are not (a value lane group reads a whole row). */
#if defined(ATT_DASYNC) && ATT_DASYNC && MV_PTX && !(defined(KV_Q8) && KV_Q8) && HEAD_DIM % 8 == 0
#define ATT_DA 1
#else
#define ATT_DA 0
#endif
#define ATT_KR (HEAD_DIM + 8)
/* ATT_SUB < ATT_CHUNK: a work-group walks its chunk in sub-chunks of ATT_SUB positions
 * (decode_part_sub), staged (ATT_DA) two buffers of ATT_SUB key rows deep: the next sub-chunk's
 * keys (then values) are copied while this one's are worked on, so a chunk can be longer than
 * local memory holds and the launch writes fewer partials. */
#if !defined(ATT_SUB) || ATT_SUB <= 0 || ATT_SUB >= ATT_CHUNK
#undef ATT_SUB
#define ATT_SUB ATT_CHUNK
#define ATT_SB 0
#else
#define ATT_SB 1
#endif
#define ATT_STAGE                                                                                  \
    (!ATT_DA ? 1 : ATT_SB ? 2 * ATT_SUB * ATT_KR / 8 : ATT_CHUNK * (ATT_KR + HEAD_DIM) / 8)

/* At most 8 float4s of keys and 8 of values in flight per work-item (registers). */
#if defined(MV_CPU) && MV_CPU
#define ATT_UK 1
#define ATT_UV 1
#elif ATT_DA
/* From the staged chunk in local memory: no batches to keep in flight, registers spared. */
#define ATT_UK 1
#define ATT_UV 2
#else
#define ATT_KN ((ATT_CHUNK + ATT_KP - 1) / ATT_KP) /* key rounds of a whole chunk */
#define ATT_VN ((ATT_CHUNK + ATT_VP - 1) / ATT_VP) /* value positions of a whole chunk */
#define ATT_UK (ATT_KN < 8 / ATT_DK ? ATT_KN : 8 / ATT_DK > 1 ? 8 / ATT_DK : 1)
#define ATT_UV (ATT_VN < 8 / ATT_DV ? ATT_VN : 8 / ATT_DV > 1 ? 8 / ATT_DV : 1)
#endif
/* Local memory of a decode work-group, in floats: the staged queries (ATT_G x HEAD_DIM), the
 * scores (ATT_G x ATT_CHUNK), the scratch shared by the partial scores and the partial
 * outputs, per-block maxima and sums (ATT_G x ATT_CHUNK / 4 each) and each head's sum.
 * runtime/cl/cl-layout.c (ebb_cl_att_local) mirrors this. */
#define ATT_SCR_K (ATT_KL > 1 ? ATT_G * ATT_SUB * ATT_KL : 4)
#define ATT_SCR_V (ATT_VP > 1 ? ATT_VP * ATT_G * HEAD_DIM : 4)
/* Staged (ATT_DA), the partial outputs go to the keys' staging, no longer read by then (with
 * sub-chunks, the whole staging: every read of it ends at a barrier), where it holds them
 * (ATT_VSK): less local memory a work-group, more work-groups a multiprocessor. */
#define ATT_VSK                                                                                    \
    (ATT_DA && (ATT_SB ? ATT_STAGE * 4 >= ATT_SCR_V : ATT_CHUNK * ATT_KR >= 2 * ATT_SCR_V))
#define ATT_SCR (ATT_VSK || ATT_SCR_K > ATT_SCR_V ? ATT_SCR_K : ATT_SCR_V)
#define ATT_NB (ATT_CHUNK / 4)
#define ATT_LOCAL (ATT_G * (HEAD_DIM + ATT_CHUNK + 2 * ATT_NB + 1) + ATT_SCR)

/* The cache slot of chunk position j (the chunk's first at slot s0; j < n_ctx). */
inline int att_slot(int s0, int j, int n_ctx)
{
    int r = s0 + j;
    return r >= n_ctx ? r - n_ctx : r;
}

/* Keys of one batch for score lane kl: ATT_UK rounds of position j0 + u * ATT_KP, clamped to
 * the last cached position pc - 1 (a round past it is loaded, never scored). */
inline void att_load_k(float4 *kx, const __global KV_T *kh, int s0, int n_ctx, int pc, int j0,
                       int kl)
{
#pragma unroll
    for (int u = 0; u < ATT_UK; u++) {
        int j = max(min(j0 + u * ATT_KP, pc - 1), 0);
        const __global KV_T *kb = KV_AT(kh, (size_t)att_slot(s0, j, n_ctx) * HEAD_DIM);
#pragma unroll
        for (int i = 0; i < ATT_DK; i++)
            kx[u * ATT_DK + i] = KV4(kl + i * ATT_KL, kb);
    }
}

/* Values of one batch for value lane vl: ATT_UV positions j0 + u * ATT_VP, clamped as keys. */
inline void att_load_v(float4 *vx, const __global KV_T *vh, int s0, int n_ctx, int pc, int j0,
                       int vl)
{
#pragma unroll
    for (int u = 0; u < ATT_UV; u++) {
        int j = max(min(j0 + u * ATT_VP, pc - 1), 0);
        const __global KV_T *vb = KV_AT(vh, (size_t)att_slot(s0, j, n_ctx) * HEAD_DIM);
#pragma unroll
        for (int i = 0; i < ATT_DV; i++) {
            int f = vl + i * ATT_VL;
            vx[u * ATT_DV + i] =
                ATT_D4 % ATT_VL == 0 || f < ATT_D4 ? KV4(f, vb) : (float4)(0.0f);
        }
    }
}

/* The first batches of keys and values of a work-item (loaded before the queries are staged,
 * so that they are in flight meanwhile). */
inline void att_prefetch(float4 *kx, float4 *vx, const __global KV_T *kh,
                         const __global KV_T *vh, int p0, int n_ctx, int pc)
{
    int lid = get_local_id(0), s0 = p0 % n_ctx;
    att_load_k(kx, kh, s0, n_ctx, pc, lid / ATT_KL, lid % ATT_KL);
    att_load_v(vx, vh, s0, n_ctx, pc, lid / ATT_VL, lid % ATT_VL);
}

#if ATT_DA
/* Positions p0 .. p0 + pc - 1 of the KV head's cache kh / vh into st: keys at row j * ATT_KR,
 * values after them at ATT_CHUNK * ATT_KR + j * HEAD_DIM (halves), 16 bytes a copy. */
inline void att_stage(__local uint4 *st, const __global KV_T *kh, const __global KV_T *vh,
                      int p0, int n_ctx, int pc)
{
    int lid = get_local_id(0), s0 = p0 % n_ctx;
    uint sk = local_saddr(st), sv = sk + ATT_CHUNK * ATT_KR * 2u;
    for (int e = lid; e < pc * (HEAD_DIM / 8); e += ATT_WG) {
        int j = e / (HEAD_DIM / 8), d = e % (HEAD_DIM / 8) * 8;
        cp_async16(sk + (uint)(j * ATT_KR + d) * 2u,
                   kh + (size_t)att_slot(s0, j, n_ctx) * HEAD_DIM + d, 16);
    }
    CP_COMMIT();
    for (int e = lid; e < pc * (HEAD_DIM / 8); e += ATT_WG) {
        int j = e / (HEAD_DIM / 8), d = e % (HEAD_DIM / 8) * 8;
        cp_async16(sv + (uint)(j * HEAD_DIM + d) * 2u,
                   vh + (size_t)att_slot(s0, j, n_ctx) * HEAD_DIM + d, 16);
    }
    CP_COMMIT();
}
/* Rows j0 .. j0 + cnt - 1 of a chunk (its first at slot s0) of the KV head's cache src into
 * the local rows at shared address dst, pitch halves apart (ATT_SB's buffers). */
inline void att_stage_rows(uint dst, int pitch, const __global KV_T *src, int s0, int n_ctx,
                           int j0, int cnt)
{
    for (int e = get_local_id(0); e < cnt * (HEAD_DIM / 8); e += ATT_WG) {
        int j = e / (HEAD_DIM / 8), d = e % (HEAD_DIM / 8) * 8;
        cp_async16(dst + (uint)(j * pitch + d) * 2u,
                   src + (size_t)att_slot(s0, j0 + j, n_ctx) * HEAD_DIM + d, 16);
    }
}

/* A decode work-group's first loads: its chunk staged (with sub-chunks, the first one's keys),
 * or each work-item's first batches. */
#if ATT_SB
#define ATT_START(kx, vx, st, kh, vh, p0, n_ctx, pc)                                               \
    do {                                                                                           \
        att_stage_rows(local_saddr(st), ATT_KR, (kh), (p0) % (n_ctx), (n_ctx), 0,                  \
                       min(ATT_SUB, (pc)));                                                        \
        CP_COMMIT();                                                                               \
    } while (0)
#else
#define ATT_START(kx, vx, st, kh, vh, p0, n_ctx, pc)                                               \
    att_stage((st), (kh), (vh), (p0), (n_ctx), (pc))
#endif
#else
#define ATT_START(kx, vx, st, kh, vh, p0, n_ctx, pc)                                               \
    att_prefetch((kx), (vx), (kh), (vh), (p0), (n_ctx), (pc))
#endif

/* att_load_k and att_load_v from the staged chunk (ATT_DA): rows clamped as there. */
inline void att_load_kl(float4 *kx, __local const half *ks, int pc, int j0, int kl)
{
#pragma unroll
    for (int u = 0; u < ATT_UK; u++) {
        int j = max(min(j0 + u * ATT_KP, pc - 1), 0);
#pragma unroll
        for (int i = 0; i < ATT_DK; i++)
            kx[u * ATT_DK + i] = vload_half4(kl + i * ATT_KL, ks + j * ATT_KR);
    }
}

inline void att_load_vl(float4 *vx, __local const half *vs, int pc, int j0, int vl)
{
#pragma unroll
    for (int u = 0; u < ATT_UV; u++) {
        int j = max(min(j0 + u * ATT_VP, pc - 1), 0);
#pragma unroll
        for (int i = 0; i < ATT_DV; i++) {
            int f = vl + i * ATT_VL;
            vx[u * ATT_DV + i] = ATT_D4 % ATT_VL == 0 || f < ATT_D4
                                     ? vload_half4(f, vs + j * HEAD_DIM)
                                     : (float4)(0.0f);
        }
    }
}

/* Score lane kl's share of the dot products of a key (its ATT_DK float4s) with the ATT_G
 * staged queries. */
inline void att_dot(float *s, const float4 *k, __local const float *qs, int kl)
{
#pragma unroll
    for (int g = 0; g < ATT_G; g++) {
        float4 a = (float4)(0.0f);
#pragma unroll
        for (int i = 0; i < ATT_DK; i++)
            a += k[i] * vload4(kl + i * ATT_KL, qs + g * HEAD_DIM);
        s[g] = a.x + a.y + a.z + a.w;
    }
}

/* Stores lane kl's share s of the scores of position j: the scores themselves (ATT_KL 1) or
 * the partials summed later. */
inline void att_put(const float *s, __local float *sc, __local float *scr, int j, int kl)
{
#pragma unroll
    for (int g = 0; g < ATT_G; g++)
        if (ATT_KL == 1)
            sc[g * ATT_CHUNK + j] = s[g];
        else
            scr[(g * ATT_CHUNK + j) * ATT_KL + kl] = s[g];
}

inline float att_max(__local const float *t, int n)
{
    float4 m4 = (float4)(-INFINITY);
    for (int i = 0; i < n / 4; i++)
        m4 = fmax(m4, vload4(i, t));
    float m = fmax(fmax(m4.x, m4.y), fmax(m4.z, m4.w));
    for (int i = n / 4 * 4; i < n; i++)
        m = fmax(m, t[i]);
    return m;
}

inline float att_sum(__local const float *t, int n)
{
    float4 s4 = (float4)(0.0f);
    for (int i = 0; i < n / 4; i++)
        s4 += vload4(i, t);
    float s = s4.x + s4.y + s4.z + s4.w;
    for (int i = n / 4 * 4; i < n; i++)
        s += t[i];
    return s;
}

/* Output float4 f of head h: normalised into out with a single chunk, else the partial. */
inline void att_out(float4 o, int f, int h, float l, int c, int nc, __global float *po,
                    __global float *out)
{
    if (nc == 1 && out)
        vstore4(o / l, f, out + h * HEAD_DIM); /* one chunk: no reduction pass needed */
    else
        vstore4(o, f, po + ((size_t)h * nc + c) * HEAD_DIM);
}

/* Decode's softmax over a chunk's pn scores of ATT_G heads (sc, rows ATT_CHUNK apart; with
 * partials, their lanes' partial sums in scr are summed first), for decode_part and
 * decode_part_sub. Blocks of 4 positions of one head a work-item: -inf past the chunk and each
 * block's max (bm), then the blocks turned into exponentials (the head's max from the block
 * maxima) with their sums (bl), then each head's max and sum into pml[h][c] and its sum into hl.
 * Staged (ATT_DA) with wait_values, the work-item's copies of values are waited for before the
 * last barrier. Every work-item must call it. */
inline void att_softmax(__local float *sc, __local const float *scr, __local float *bm,
                        __local float *bl, __local float *hl, __global float2 *pml, int pn,
                        int h0, int nc, int c, bool partials, bool wait_values)
{
    int lid = get_local_id(0), nb = (pn + 3) / 4;
    for (int e = lid; e < ATT_G * nb; e += ATT_WG) {
        int g = e / nb, b = e % nb, j = 4 * b;
        float4 s4;
        if (!partials) {
            s4 = vload4(b, sc + g * ATT_CHUNK);
        } else {
            float t[4];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                t[q] = 0.0f;
#pragma unroll
                for (int k = 0; k < ATT_KL; k++)
                    t[q] += scr[(g * ATT_CHUNK + j + q) * ATT_KL + k];
            }
            s4 = (float4)(t[0], t[1], t[2], t[3]);
        }
        s4 = (float4)(s4.x, j + 1 < pn ? s4.y : -INFINITY, j + 2 < pn ? s4.z : -INFINITY,
                      j + 3 < pn ? s4.w : -INFINITY);
        vstore4(s4, b, sc + g * ATT_CHUNK);
        bm[g * ATT_NB + b] = fmax(fmax(s4.x, s4.y), fmax(s4.z, s4.w));
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < ATT_G * nb; e += ATT_WG) {
        int g = e / nb, b = e % nb;
        float4 p = exp(vload4(b, sc + g * ATT_CHUNK) - att_max(bm + g * ATT_NB, nb));
        vstore4(p, b, sc + g * ATT_CHUNK);
        bl[g * ATT_NB + b] = p.x + p.y + p.z + p.w;
    }
#if ATT_DA
    if (wait_values)
        CP_WAIT(0); /* the values (the barrier below makes everyone's visible) */
#else
    (void)wait_values;
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < ATT_G) {
        float mg = att_max(bm + lid * ATT_NB, nb), lg = att_sum(bl + lid * ATT_NB, nb);
        hl[lid] = lg;
        pml[(h0 + lid) * nc + c] = (float2)(mg, lg);
    }
}

/* The end of decode's first pass, for decode_part and decode_part_sub: the new token's value
 * (with kn), the partial outputs o of value lane vl at positions vp, vp + ATT_VP, .. summed
 * through vscr, and the work-group's outputs (att_out: normalised by hl with one chunk). */
inline void att_finish(float4 *o, int vl, int vp, bool vact, __local const float *sc,
                       __local float *vscr, __local const float *hl, __local const KN_T *kn,
                       __local const KN_T *vn, int pn, int c, int nc, int h0,
                       __global float *po, __global float *out)
{
    int lid = get_local_id(0);
    if (kn && vact && vp == 0) {
#pragma unroll
        for (int i = 0; i < ATT_DV; i++) {
            int f = vl + i * ATT_VL;
            float4 v4 = ATT_D4 % ATT_VL == 0 || f < ATT_D4 ? KN4(f, vn) : (float4)(0.0f);
#pragma unroll
            for (int g = 0; g < ATT_G; g++)
                o[g * ATT_DV + i] += sc[g * ATT_CHUNK + pn - 1] * v4;
        }
    }
    if (ATT_VP > 1 && vact) {
#pragma unroll
        for (int g = 0; g < ATT_G; g++)
#pragma unroll
            for (int i = 0; i < ATT_DV; i++) {
                int f = vl + i * ATT_VL;
                if (ATT_D4 % ATT_VL == 0 || f < ATT_D4)
                    vstore4(o[g * ATT_DV + i], f, vscr + (vp * ATT_G + g) * HEAD_DIM);
            }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (ATT_VP > 1) {
        for (int e = lid; e < ATT_G * ATT_D4; e += ATT_WG) {
            int g = e / ATT_D4, f = e % ATT_D4;
            float4 o4 = vload4(f, vscr + g * HEAD_DIM);
            for (int v = 1; v < ATT_VP; v++)
                o4 += vload4(f, vscr + (v * ATT_G + g) * HEAD_DIM);
            att_out(o4, f, h0 + g, hl[g], c, nc, po, out);
        }
    } else if (vact) {
#pragma unroll
        for (int g = 0; g < ATT_G; g++)
#pragma unroll
            for (int i = 0; i < ATT_DV; i++) {
                int f = vl + i * ATT_VL;
                if (ATT_D4 % ATT_VL == 0 || f < ATT_D4)
                    att_out(o[g * ATT_DV + i], f, h0 + g, hl[g], c, nc, po, out);
            }
    }
}

/* Decode, first pass (flash-decoding): work-group (c, hg) scores positions
 * [f + c * ATT_CHUNK, min(n_kv, f + (c + 1) * ATT_CHUNK)) (f = att_first(n_kv, win)) for the
 * ATT_G query heads h0 = hg * ATT_G ..
 * (1, or every query head of one KV head, which then reads its keys and values once for all of
 * them) and writes, per head h, the unnormalised partial output po[h][c][d] with its max and sum
 * of exponentials pml[h][c] = (m, l); with a single chunk it writes the normalised result to
 * out[h][d] directly and the reduction is skipped, unless out is NULL (attn_decode_reduce_q8 in
 * q8.cl reduces and quantizes even one chunk).
 * Global size (n_chunks * ATT_WG, n_head / ATT_G), local (ATT_WG, 1). */
/* The body of decode's first pass for work-group (c, heads h0..): lm (ATT_LOCAL floats) starts
 * with the scaled queries (ATT_G rows of HEAD_DIM); keys and values of positions p0..p0 + pn - 1
 * come from the KV head's cache kh / vh (n_ctx positions, position p at p % n_ctx), except,
 * with kn, the chunk's last one (the new token's), whose key and value come from kn / vn in
 * local memory (as the cache holds them). kx and vx hold the work-item's first batches
 * (att_prefetch); later batches reuse them. Staged (ATT_DA), keys and values come from st
 * instead (att_stage), which with ATT_VSK also takes the partial outputs. */
inline void decode_part(__local float *lm, float4 *kx, float4 *vx, const __global KV_T *kh,
                        const __global KV_T *vh, __local uint4 *st, int p0, int n_ctx,
                        int pn, __local const KN_T *kn, __local const KN_T *vn, int c, int nc,
                        int h0, __global float *po, __global float2 *pml, __global float *out)
{
    __local const half *ks = (__local const half *)st, *vs = ks + ATT_CHUNK * ATT_KR;
    __local float *qs = lm, *sc = qs + ATT_G * HEAD_DIM, *scr = sc + ATT_G * ATT_CHUNK;
    __local float *bm = scr + ATT_SCR, *bl = bm + ATT_G * ATT_NB, *hl = bl + ATT_G * ATT_NB;
    __local float *vscr = ATT_VSK ? (__local float *)st : scr; /* the partial outputs */
    int lid = get_local_id(0), s0 = p0 % n_ctx;
    int pc = kn ? pn - 1 : pn; /* positions read from the cache */

    /* Scores (or their partials) of the cached positions, then the new token's. */
    int kl = lid % ATT_KL, kp = lid / ATT_KL;
#if ATT_DA
    CP_WAIT(1); /* this work-item's keys; the barrier, everyone's */
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    for (int j0 = kp; j0 < pc; j0 += ATT_UK * ATT_KP) {
        if (ATT_DA)
            att_load_kl(kx, ks, pc, j0, kl);
        else if (j0 != kp)
            att_load_k(kx, kh, s0, n_ctx, pc, j0, kl);
#pragma unroll
        for (int u = 0; u < ATT_UK; u++) {
            float s[ATT_G];
            att_dot(s, kx + u * ATT_DK, qs, kl);
            if (j0 + u * ATT_KP < pc)
                att_put(s, sc, scr, j0 + u * ATT_KP, kl);
        }
    }
    if (kn && kp == 0) {
        float4 k4[ATT_DK];
        float s[ATT_G];
#pragma unroll
        for (int i = 0; i < ATT_DK; i++)
            k4[i] = KN4(kl + i * ATT_KL, kn);
        att_dot(s, k4, qs, kl);
        att_put(s, sc, scr, pn - 1, kl);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    att_softmax(sc, scr, bm, bl, hl, pml, pn, h0, nc, c, ATT_KL > 1, true);

    /* Values: lane vl's float4s over positions vp, vp + ATT_VP, .. */
    int vl = lid % ATT_VL, vp = lid / ATT_VL;
    bool vact = ATT_WG % ATT_VL == 0 || vp < ATT_VP;
    float4 o[ATT_G * ATT_DV];
#pragma unroll
    for (int i = 0; i < ATT_G * ATT_DV; i++)
        o[i] = (float4)(0.0f);
    for (int j0 = vp; vact && j0 < pc; j0 += ATT_UV * ATT_VP) {
        if (ATT_DA)
            att_load_vl(vx, vs, pc, j0, vl);
        else if (j0 != vp)
            att_load_v(vx, vh, s0, n_ctx, pc, j0, vl);
#pragma unroll
        for (int u = 0; u < ATT_UV; u++) {
            int j = j0 + u * ATT_VP;
            bool in = j < pc;
            j = min(j, pc - 1);
#pragma unroll
            for (int g = 0; g < ATT_G; g++) {
                float p = in ? sc[g * ATT_CHUNK + j] : 0.0f;
#pragma unroll
                for (int i = 0; i < ATT_DV; i++)
                    o[g * ATT_DV + i] += p * vx[u * ATT_DV + i];
            }
        }
    }
    att_finish(o, vl, vp, vact, sc, vscr, hl, kn, vn, pn, c, nc, h0, po, out);
}

#if ATT_SB
#if ATT_SUB % ATT_VP
#error "ATT_SUB must be a multiple of the value lanes' positions side by side (ATT_VP)"
#endif
/* Lane kl's share s of the scores of position b0 + j of a sub-chunk: the scores (ATT_KL 1) or
 * the sub-chunk's partials. */
inline void att_put_sub(const float *s, __local float *sc, __local float *scr, int b0, int j,
                        int kl)
{
#pragma unroll
    for (int g = 0; g < ATT_G; g++)
        if (ATT_KL == 1)
            sc[g * ATT_CHUNK + b0 + j] = s[g];
        else
            scr[(g * ATT_SUB + j) * ATT_KL + kl] = s[g];
}

/* decode_part over sub-chunks of ATT_SUB positions (ATT_SB): each sub-chunk's scores (their
 * lanes' partials summed as decode_part sums them) into the chunk's row of scores, the chunk's
 * softmax as decode_part's, then the values sub-chunk by sub-chunk. Staged (ATT_DA), two
 * buffers of ATT_SUB rows at st take the keys of sub-chunk k + 1 (after the last one, the values
 * of sub-chunk 0) while sub-chunk k's are read, then the values likewise (the first sub-chunk's
 * keys are att_stage_rows' of ATT_START); unstaged, each work-item reads the cache as
 * decode_part does. Every score and every output's sum over its positions takes decode_part's
 * steps in its order: the results are decode_part's with the same ATT_CHUNK. */
inline void decode_part_sub(__local float *lm, float4 *kx, float4 *vx, const __global KV_T *kh,
                            const __global KV_T *vh, __local uint4 *st, int p0, int n_ctx,
                            int pn, __local const KN_T *kn, __local const KN_T *vn, int c,
                            int nc, int h0, __global float *po, __global float2 *pml,
                            __global float *out)
{
    __local float *qs = lm, *sc = qs + ATT_G * HEAD_DIM, *scr = sc + ATT_G * ATT_CHUNK;
    __local float *bm = scr + ATT_SCR, *bl = bm + ATT_G * ATT_NB, *hl = bl + ATT_G * ATT_NB;
    __local float *vscr = ATT_VSK ? (__local float *)st : scr; /* the partial outputs */
    int lid = get_local_id(0), s0 = p0 % n_ctx;
    int pc = kn ? pn - 1 : pn; /* positions read from the cache */
    int nsk = (pn + ATT_SUB - 1) / ATT_SUB; /* sub-chunks with scores (the new token's too) */
    int nsv = (pc + ATT_SUB - 1) / ATT_SUB; /* sub-chunks with cached values */
#if ATT_DA
    uint sa = local_saddr(st), sbuf = ATT_SUB * ATT_KR * 2u; /* buffer b at sa + b * sbuf */
#endif

    /* Scores, sub-chunk by sub-chunk. */
    int kl = lid % ATT_KL, kp = lid / ATT_KL;
    for (int sb = 0; sb < nsk; sb++) {
        int b0 = sb * ATT_SUB, cnt = min(ATT_SUB, pc - b0), n = min(ATT_SUB, pn - b0);
#if ATT_DA
        if (sb + 1 < nsk)
            att_stage_rows(sa + (uint)((sb + 1) & 1) * sbuf, ATT_KR, kh, s0, n_ctx, b0 + ATT_SUB,
                           min(ATT_SUB, pc - b0 - ATT_SUB));
        else if (nsv > 0)
            att_stage_rows(sa + (uint)(nsk & 1) * sbuf, HEAD_DIM, vh, s0, n_ctx, 0,
                           min(ATT_SUB, pc));
        CP_COMMIT();
        CP_WAIT(1); /* this sub-chunk's keys; the barrier, everyone's */
        barrier(CLK_LOCAL_MEM_FENCE);
        __local const half *ks = (__local const half *)st + (sb & 1) * (ATT_SUB * ATT_KR);
#endif
        for (int j0 = kp; j0 < cnt; j0 += ATT_UK * ATT_KP) {
#if ATT_DA
            att_load_kl(kx, ks, cnt, j0, kl);
#else
            att_load_k(kx, kh, s0, n_ctx, pc, b0 + j0, kl);
#endif
#pragma unroll
            for (int u = 0; u < ATT_UK; u++) {
                float s[ATT_G];
                att_dot(s, kx + u * ATT_DK, qs, kl);
                if (j0 + u * ATT_KP < cnt)
                    att_put_sub(s, sc, scr, b0, j0 + u * ATT_KP, kl);
            }
        }
        if (kn && kp == 0 && pn - 1 < b0 + ATT_SUB && pn - 1 >= b0) {
            float4 k4[ATT_DK];
            float s[ATT_G];
#pragma unroll
            for (int i = 0; i < ATT_DK; i++)
                k4[i] = KN4(kl + i * ATT_KL, kn);
            att_dot(s, k4, qs, kl);
            att_put_sub(s, sc, scr, b0, pn - 1 - b0, kl);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (ATT_KL > 1) {
            for (int e = lid; e < ATT_G * n; e += ATT_WG) {
                int g = e / n, j = e % n;
                float t = 0.0f;
#pragma unroll
                for (int k = 0; k < ATT_KL; k++)
                    t += scr[(g * ATT_SUB + j) * ATT_KL + k];
                sc[g * ATT_CHUNK + b0 + j] = t;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    /* The chunk's softmax, as decode_part's (the values' first copies still in flight). */
    att_softmax(sc, scr, bm, bl, hl, pml, pn, h0, nc, c, false, false);

    /* Values, sub-chunk by sub-chunk: lane vl's float4s over positions vp, vp + ATT_VP, .. */
    int vl = lid % ATT_VL, vp = lid / ATT_VL;
    bool vact = ATT_WG % ATT_VL == 0 || vp < ATT_VP;
    float4 o[ATT_G * ATT_DV];
#pragma unroll
    for (int i = 0; i < ATT_G * ATT_DV; i++)
        o[i] = (float4)(0.0f);
    for (int sb = 0; sb < nsv; sb++) {
        int b0 = sb * ATT_SUB, cnt = min(ATT_SUB, pc - b0);
#if ATT_DA
        if (sb + 1 < nsv) {
            att_stage_rows(sa + (uint)((nsk + sb + 1) & 1) * sbuf, HEAD_DIM, vh, s0, n_ctx,
                           b0 + ATT_SUB, min(ATT_SUB, pc - b0 - ATT_SUB));
            CP_COMMIT();
            CP_WAIT(1); /* this sub-chunk's values */
        } else {
            CP_WAIT(0);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        __local const half *vs = (__local const half *)st + ((nsk + sb) & 1) * (ATT_SUB * ATT_KR);
#endif
        for (int j0 = vp; vact && j0 < cnt; j0 += ATT_UV * ATT_VP) {
#if ATT_DA
            att_load_vl(vx, vs, cnt, j0, vl);
#else
            att_load_v(vx, vh, s0, n_ctx, pc, b0 + j0, vl);
#endif
#pragma unroll
            for (int u = 0; u < ATT_UV; u++) {
                int j = j0 + u * ATT_VP;
                bool in = j < cnt;
                j = b0 + min(j, cnt - 1);
#pragma unroll
                for (int g = 0; g < ATT_G; g++) {
                    float p = in ? sc[g * ATT_CHUNK + j] : 0.0f;
#pragma unroll
                    for (int i = 0; i < ATT_DV; i++)
                        o[g * ATT_DV + i] += p * vx[u * ATT_DV + i];
                }
            }
        }
#if ATT_DA
        barrier(CLK_LOCAL_MEM_FENCE); /* the buffer takes sub-chunk sb + 2 next */
#endif
    }
    att_finish(o, vl, vp, vact, sc, vscr, hl, kn, vn, pn, c, nc, h0, po, out);
}
#define ATT_PART decode_part_sub
#else
#define ATT_PART decode_part
#endif

__kernel void attn_decode_part(__global const float *q, __global const KV_T *kc,
                               __global const KV_T *vc, ulong kv_base, int n_ctx, int n_kv,
                               int n_head, int n_head_kv, float scale, __global float *po,
                               __global float2 *pml, __global float *out, int win)
{
    __local float lm[ATT_LOCAL];
    int c = get_group_id(0), h0 = get_group_id(1) * ATT_G, lid = get_local_id(0);
    int nc = get_num_groups(0);
    int hk = h0 / (n_head / n_head_kv);
    int p0 = att_first(n_kv, win) + c * ATT_CHUNK, pn = min(ATT_CHUNK, n_kv - p0);
    const __global KV_T *kh = KV_AT(kc, kv_base + (size_t)hk * n_ctx * HEAD_DIM);
    const __global KV_T *vh = KV_AT(vc, kv_base + (size_t)hk * n_ctx * HEAD_DIM);
    __local uint4 st[ATT_STAGE];
    float4 kx[ATT_UK * ATT_DK], vx[ATT_UV * ATT_DV];
    ATT_START(kx, vx, st, kh, vh, p0, n_ctx, pn);
    for (int e = lid; e < ATT_G * ATT_D4; e += ATT_WG)
        vstore4(vload4(e, q + h0 * HEAD_DIM) * scale, e, lm);
    barrier(CLK_LOCAL_MEM_FENCE);
    ATT_PART(lm, kx, vx, kh, vh, st, p0, n_ctx, pn, NULL, NULL, c, nc, h0, po, pml, out);
}

/* attn_decode_part with rope_kv's work for the new token (position n_kv - 1) fused in: each
 * work-group rotates its query heads from row 0 of qkv (Q heads, K heads, V heads), the last
 * chunk's work-groups also rotate the key of their KV head and take key and value (rounded to
 * halves as the cache holds them) from local memory, and the work-group of the first query head
 * of each KV group stores them in the cache for the tokens after. A pair's angle is computed
 * once for the work-group's heads (ATT_RG of them side by side when a head has fewer pairs than
 * the work-group has work-items). Same results as rope_kv then attn_decode_part, one launch
 * less. */
#define ATT_RP (HEAD_DIM / 2)
#define ATT_RG (ATT_WG > ATT_RP ? ATT_WG / ATT_RP : 1)
/* attn_decode_rope's arguments, and its local memory (declared in a kernel, passed to
 * att_rope_body by ATT_ROPE_LOCAL_ARGS): lm, the new key and value (kn, vn; halves, or floats
 * with the 8-bit cache's block scales in kd_), the head norms' sums (hr, hs), the staged chunk
 * (st). */
#define ATT_ROPE_PARAMS                                                                            \
    __global const float *qkv, __global KV_T *kc, __global KV_T *vc, ulong kv_base, int n_ctx,    \
        int n_kv, int n_head, int n_head_kv, float scale, __global float *po,                      \
        __global float2 *pml, __global float *out, int n_rot, float base, float freq_scale,        \
        int neox, __global const float *ff, int win, __global const float *hnq,                    \
        __global const float *hnk, float hn_eps
#define ATT_ROPE_ARGS                                                                              \
    qkv, kc, vc, kv_base, n_ctx, n_kv, n_head, n_head_kv, scale, po, pml, out, n_rot, base,      \
        freq_scale, neox, ff, win, hnq, hnk, hn_eps
#if defined(KV_Q8) && KV_Q8
#define ATT_ROPE_LOCALS                                                                            \
    __local float lm[ATT_LOCAL], kn[HEAD_DIM], vn[HEAD_DIM], hr[ATT_WG], hs[ATT_G + 1];           \
    __local ushort kd_[2 * (HEAD_DIM / 32)]; /* the blocks' scales as halves */                    \
    __local uint4 st[ATT_STAGE];
#define ATT_ROPE_LOCAL_ARGS lm, kn, vn, kd_, hr, hs, st
#else
#define ATT_ROPE_LOCALS                                                                            \
    __local float lm[ATT_LOCAL], hr[ATT_WG], hs[ATT_G + 1];                                       \
    __local ushort kn_[HEAD_DIM], vn_[HEAD_DIM]; /* halves (no cl_khr_fp16 needed) */              \
    __local uint4 st[ATT_STAGE];
#define ATT_ROPE_LOCAL_ARGS lm, (__local half *)kn_, (__local half *)vn_, NULL, hr, hs, st
#endif
inline void att_rope_body(ATT_ROPE_PARAMS, __local float *lm, __local KN_T *kn, __local KN_T *vn,
                          __local ushort *kd_, __local float *hr, __local float *hs,
                          __local uint4 *st)
{
    int c = get_group_id(0), h0 = get_group_id(1) * ATT_G, lid = get_local_id(0);
    int nc = get_num_groups(0), group = n_head / n_head_kv;
    int hk = h0 / group, pos = n_kv - 1;
    int p0 = att_first(n_kv, win) + c * ATT_CHUNK, pn = min(ATT_CHUNK, n_kv - p0);
    bool last = c == nc - 1;
    const __global KV_T *kh = KV_AT(kc, kv_base + (size_t)hk * n_ctx * HEAD_DIM);
    const __global KV_T *vh = KV_AT(vc, kv_base + (size_t)hk * n_ctx * HEAD_DIM);
    float4 kx[ATT_UK * ATT_DK], vx[ATT_UV * ATT_DV];
    ATT_START(kx, vx, st, kh, vh, p0, n_ctx, last ? pn - 1 : pn);
    const __global float *kr = qkv + (n_head + hk) * HEAD_DIM;
    const __global float *vr = qkv + (n_head + n_head_kv + hk) * HEAD_DIM;
    /* With hnq (Qwen 3, Gemma 3: head_norm folded in), each query head and the key head are
     * RMS-normed over HEAD_DIM and scaled by hnq / hnk before the rotation: hs[g] becomes head
     * g's factor (hs[ATT_G] the key's), every work-group computing its own. */
    if (hnq) {
        for (int g = 0; g <= ATT_G; g++) {
            const __global float *r = g < ATT_G ? qkv + (h0 + g) * HEAD_DIM : kr;
            float ss = 0.0f;
            for (int d = lid; d < HEAD_DIM; d += ATT_WG)
                ss += r[d] * r[d];
            hr[lid] = ss;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int st = 1; st < ATT_WG; st <<= 1) {
                if (lid % (2 * st) == 0 && lid + st < ATT_WG)
                    hr[lid] += hr[lid + st];
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            if (lid == 0)
                hs[g] = rsqrt(hr[0] / HEAD_DIM + hn_eps);
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    int rp = ATT_WG < ATT_RP ? lid : lid % ATT_RP, rg = ATT_WG < ATT_RP ? 0 : lid / ATT_RP;
    for (int p = rp; rg < ATT_RG && p < ATT_RP; p += ATT_WG < ATT_RP ? ATT_WG : ATT_RP) {
        int2 i = rope_pair(p, n_rot, neox);
        float2 cs = rope_cs(p, pos, n_rot, base, freq_scale, ff);
        for (int g = rg; g < ATT_G; g += ATT_RG) {
            const __global float *qr = qkv + (h0 + g) * HEAD_DIM;
            float a = qr[i.x], b = qr[i.y];
            if (hnq) {
                a = a * hs[g] * hnq[i.x];
                b = b * hs[g] * hnq[i.y];
            }
            lm[g * HEAD_DIM + i.x] = (a * cs.x - b * cs.y) * scale;
            lm[g * HEAD_DIM + i.y] = (a * cs.y + b * cs.x) * scale;
        }
        if (last && rg == 0) {
            float a = kr[i.x], b = kr[i.y];
            if (hnq) {
                a = a * hs[ATT_G] * hnk[i.x];
                b = b * hs[ATT_G] * hnk[i.y];
            }
#if defined(KV_Q8) && KV_Q8
            kn[i.x] = a * cs.x - b * cs.y;
            kn[i.y] = a * cs.y + b * cs.x;
            vn[2 * p] = vr[2 * p];
            vn[2 * p + 1] = vr[2 * p + 1];
#else
            vstore_half(a * cs.x - b * cs.y, i.x, kn);
            vstore_half(a * cs.y + b * cs.x, i.y, kn);
            vstore_half(vr[2 * p], 2 * p, vn);
            vstore_half(vr[2 * p + 1], 2 * p + 1, vn);
#endif
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#if defined(KV_Q8) && KV_Q8
    /* The new key's and value's Q8_0 blocks (rope_kv's kv_put_q8), one a work-item: stored by
     * the work-group of the first query head, and given back to kn / vn as the cache will hold
     * them (q * d), so that this token attends to what the tokens after it will read. */
    if (last) {
        size_t off = kv_base + ((size_t)hk * n_ctx + pos % n_ctx) * HEAD_DIM;
        for (int e = lid; e < 2 * (HEAD_DIM / 32); e += ATT_WG) {
            int blk = e % (HEAD_DIM / 32);
            __local float *x = (e < HEAD_DIM / 32 ? kn : vn) + blk * 32;
            __global uchar *gb = KV_AT(e < HEAD_DIM / 32 ? kc : vc, off + blk * 32);
            float amax = 0.0f, id;
            for (int j = 0; j < 32; j++)
                amax = fmax(amax, fabs(x[j]));
            vstore_half(kv_q8_scale(amax, &id), e, (__local half *)kd_);
            float dh = vload_half(e, (__local half *)kd_);
            if (h0 % group == 0)
                vstore_half(kv_q8_scale(amax, &id), 0, (__global half *)gb);
            for (int j = 0; j < 32; j++) {
                char q = convert_char_sat(round(x[j] * id));
                if (h0 % group == 0)
                    ((__global char *)gb)[2 + j] = q;
                x[j] = convert_float(q) * dh;
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#else
    if (last && h0 % group == 0) {
        size_t off = kv_base + ((size_t)hk * n_ctx + pos % n_ctx) * HEAD_DIM;
        for (int d = lid; d < HEAD_DIM; d += ATT_WG) {
            vstore_half(vload_half(d, kn), off + d, kc);
            vstore_half(vload_half(d, vn), off + d, vc);
        }
    }
#endif
    ATT_PART(lm, kx, vx, kh, vh, st, p0, n_ctx, pn, last ? kn : NULL, last ? vn : NULL, c,
                nc, h0, po, pml, out);
}

__kernel void attn_decode_rope(ATT_ROPE_PARAMS)
{
    ATT_ROPE_LOCALS
    att_rope_body(ATT_ROPE_ARGS, ATT_ROPE_LOCAL_ARGS);
}

/* Decode's second pass, the partials of one head (n_chunks of them: outputs po[c][d], maxima
 * and sums pml[c]) combined into output dimension d of one slice of ATT_DS dimensions (a block
 * of 32 where HEAD_DIM allows, else the whole head). A work-group takes one slice of one head,
 * so that the launch has HEAD_DIM / ATT_DS work-groups a head instead of one (H200, 8B shape,
 * 32768 positions in chunks of 128: 32 work-groups of a whole head each took about 21 us a
 * layer); it is ATT_DS x rr work-items (rr = get_local_size(0) / ATT_DS, 1..ATT_RR_MAX):
 * work-item (d, r) takes chunks r, r + rr, .. with a running max of its own, four loads at a
 * time, so that a deep context's hundreds of chunks are not one serial loop per work-item; the
 * rr partials meet in red (ATT_RED_LOCAL floats). po points at the slice's first dimension of
 * chunk 0 (chunks HEAD_DIM floats apart). Every work-item returns its d's result; all must
 * call it. runtime/cl/cl-layout.c (ebb_cl_att_red_ds) mirrors ATT_DS. */
#if HEAD_DIM % 32 == 0
#define ATT_DS 32
#else
#define ATT_DS HEAD_DIM
#endif
#define ATT_NS (HEAD_DIM / ATT_DS) /* slices a head */
#define ATT_RR_MAX 32
#define ATT_RED_LOCAL (ATT_RR_MAX * (ATT_DS + 2))
/* Chunks c0, c0 + step, .. < n_chunks of output dimension d (po's chunks HEAD_DIM floats apart)
 * merged by a running max: returns the output's sum, the max and the sum of exponentials in *mp
 * and *lp (-inf, 0 and 0 where it has no chunk). The partials are read as volatile: in
 * attn_decode_rope_q8 other work-groups of the same launch wrote them. */
inline float att_merge(const volatile __global float *po, const volatile __global float2 *pml,
                       int c0, int step, int n_chunks, int d, float *mp, float *lp)
{
    float m = -INFINITY, l = 0.0f, o = 0.0f;
#pragma unroll 4
    for (int c = c0; c < n_chunks; c += step) {
        float2 ml = pml[c];
        float mn = fmax(m, ml.x); /* a chunk holds a position: its max is finite */
        float a = exp(m - mn), b = exp(ml.x - mn);
        l = l * a + ml.y * b;
        o = o * a + po[(size_t)c * HEAD_DIM + d] * b;
        m = mn;
    }
    *mp = m;
    *lp = l;
    return o;
}

inline float att_combine(const __global float *po, const __global float2 *pml, int n_chunks,
                         __local float *red)
{
    int lid = get_local_id(0), d = lid % ATT_DS, r = lid / ATT_DS;
    int rr = (int)get_local_size(0) / ATT_DS;
    float m, l, o = att_merge(po, pml, r, rr, n_chunks, d, &m, &l);
    if (rr == 1)
        return o / l;
    __local float *rm = red + ATT_RR_MAX * ATT_DS, *rl = rm + ATT_RR_MAX;
    red[r * ATT_DS + d] = o;
    if (d == 0) {
        rm[r] = m; /* -inf (with l and o 0) where r >= n_chunks */
        rl[r] = l;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float mx = -INFINITY, lt = 0.0f, ot = 0.0f;
    for (int i = 0; i < rr; i++)
        mx = fmax(mx, rm[i]);
    for (int i = 0; i < rr; i++) {
        float w = exp(rm[i] - mx);
        lt += w * rl[i];
        ot += w * red[i * ATT_DS + d];
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* red free for the caller */
    return ot / lt;
}

/* Decode, second pass: combines the n_chunks partials of each head (att_combine). Global
 * (ATT_DS x rr, n_head x ATT_NS), local (ATT_DS x rr, 1): work-group (0, h x ATT_NS + s) writes
 * dimensions s x ATT_DS .. of head h. */
__kernel void attn_decode_reduce(__global const float *po, __global const float2 *pml,
                                 int n_chunks, __global float *out)
{
    __local float red[ATT_RED_LOCAL];
    int hs = get_group_id(1), h = hs / ATT_NS, d = hs % ATT_NS * ATT_DS + get_local_id(0) % ATT_DS;
    float v = att_combine(po + (size_t)h * n_chunks * HEAD_DIM + (d - d % ATT_DS),
                          pml + h * n_chunks, n_chunks, red);
    if (get_local_id(0) < ATT_DS)
        out[h * HEAD_DIM + d] = v;
}

/* Decode rows of a batch (flash-decoding over slots at different depths): z-th decode row
 * dr[z] of the batch, at position rt[2r + 1] of KV slot rt[2r], attends positions 0..pos in
 * chunks as attn_decode_part does; its partials go to po / pml at row z (max_nc chunks per
 * head), a single chunk's result straight to out row r. Global size (max_nc * ATT_WG,
 * n_head / ATT_G, n_dec), local (ATT_WG, 1, 1): work-groups past a row's own chunk count return
 * at once. */
__kernel void attn_decode_rows(__global const float *qkv, int qkv_ld, __global const KV_T *kc,
                               __global const KV_T *vc, __global const int *rt,
                               __global const int *dr, ulong slot_stride, int n_ctx,
                               int n_head, int n_head_kv, float scale, __global float *po,
                               __global float2 *pml, int max_nc, __global float *out,
                               int out_ld, int win)
{
    __local float lm[ATT_LOCAL];
    int c = get_group_id(0), h0 = get_group_id(1) * ATT_G, z = get_group_id(2);
    int lid = get_local_id(0);
    int r = dr[z], n_kv = rt[2 * r + 1] + 1, f = att_first(n_kv, win);
    int nc = (n_kv - f + ATT_CHUNK - 1) / ATT_CHUNK;
    if (c >= nc)
        return; /* the whole work-group: no barrier is skipped by part of it */
    int hk = h0 / (n_head / n_head_kv);
    int p0 = f + c * ATT_CHUNK, pn = min(ATT_CHUNK, n_kv - p0);
    ulong kv_base = (ulong)rt[2 * r] * slot_stride;
    const __global KV_T *kh = KV_AT(kc, kv_base + (size_t)hk * n_ctx * HEAD_DIM);
    const __global KV_T *vh = KV_AT(vc, kv_base + (size_t)hk * n_ctx * HEAD_DIM);
    __local uint4 st[ATT_STAGE];
    float4 kx[ATT_UK * ATT_DK], vx[ATT_UV * ATT_DV];
    ATT_START(kx, vx, st, kh, vh, p0, n_ctx, pn);
    const __global float *q = qkv + (size_t)r * qkv_ld + h0 * HEAD_DIM;
    for (int e = lid; e < ATT_G * ATT_D4; e += ATT_WG)
        vstore4(vload4(e, q) * scale, e, lm);
    barrier(CLK_LOCAL_MEM_FENCE);
    ATT_PART(lm, kx, vx, kh, vh, st, p0, n_ctx, pn, NULL, NULL, c, nc, h0,
                po + (size_t)z * n_head * max_nc * HEAD_DIM, pml + (size_t)z * n_head * max_nc,
                out + (size_t)r * out_ld);
}

/* The second pass of attn_decode_rows for rows of more than one chunk (att_combine). Global
 * (ATT_DS x rr, n_head x ATT_NS, n_dec), local (ATT_DS x rr, 1, 1), slices as
 * attn_decode_reduce's. */
__kernel void attn_decode_reduce_rows(__global const float *po, __global const float2 *pml,
                                      __global const int *rt, __global const int *dr,
                                      int max_nc, __global float *out, int out_ld, int win)
{
    __local float red[ATT_RED_LOCAL];
    int hs = get_group_id(1), h = hs / ATT_NS, z = get_group_id(2);
    int d = hs % ATT_NS * ATT_DS + get_local_id(0) % ATT_DS;
    int r = dr[z], n_kv = rt[2 * r + 1] + 1;
    int nc = (n_kv - att_first(n_kv, win) + ATT_CHUNK - 1) / ATT_CHUNK;
    if (nc == 1)
        return; /* the whole work-group */
    int n_head = (int)get_num_groups(1) / ATT_NS;
    const __global float *pz = po + (size_t)z * n_head * max_nc * HEAD_DIM;
    const __global float2 *mz = pml + (size_t)z * n_head * max_nc;
    float v = att_combine(pz + (size_t)h * nc * HEAD_DIM + (d - d % ATT_DS), mz + h * nc, nc, red);
    if (get_local_id(0) < ATT_DS)
        out[(size_t)r * out_ld + h * HEAD_DIM + d] = v;
}

/* Prefill, causal: query t (position pos0 + t) of head h attends positions 0..pos0 + t (with
 * win, att_first(pos0 + t + 1, win)..pos0 + t). A
 * work-group of ATT_TQ queries walks the keys in tiles of ATT_TK staged in local memory, each
 * work-item keeping an online softmax (running max, sum and output) in registers. Q rows are
 * rows r0.. of qkv (row stride qkv_ld), output rows the same rows of out (stride out_ld).
 * Global size (round_up(n_tok, ATT_TQ), n_head), local (ATT_TQ, 1). */
__kernel void attn_prefill(__global const float *qkv, int qkv_ld, __global const KV_T *kc,
                           __global const KV_T *vc, ulong kv_base, int n_ctx, int pos0,
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
    const __global KV_T *kb = KV_AT(kc, kv_base + (size_t)hk * n_ctx * HEAD_DIM);
    const __global KV_T *vb = KV_AT(vc, kv_base + (size_t)hk * n_ctx * HEAD_DIM);
    for (int k0 = first; k0 <= last; k0 += ATT_TK) {
        for (int e = lid; e < ATT_TK * (HEAD_DIM / 4); e += ATT_TQ) {
            int j = e / (HEAD_DIM / 4), d = e % (HEAD_DIM / 4);
            bool in = k0 + j <= last;
            size_t at = (size_t)((k0 + j) % n_ctx) * HEAD_DIM;
            ks[j][d] = in ? KV4(d, KV_AT(kb, at)) : (float4)(0.0f);
            vs[j][d] = in ? KV4(d, KV_AT(vb, at)) : (float4)(0.0f);
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

#if defined(ATT_MMA) && ATT_MMA && MV_PTX && HEAD_DIM % 16 == 0 &&                              \
    (HEAD_DIM <= 128 || (HEAD_DIM % 128 == 0 && HEAD_DIM <= 256))
/* Prefill attention on tensor cores (flash attention through PTX mma.sync, f16 inputs and f32
 * accumulation): a work-group of 4 warps takes 64 queries of one head, 16 a warp, and walks the
 * keys in tiles of FA_KT staged in local memory as halves (keys as rows; values transposed, a
 * row per dimension, so that both are read as B fragments with 32-bit loads). A warp's scores
 * S = Q K^T (16 x FA_KT) stay in registers, are masked (causal, and the sliding window where
 * win > 0) and turned into probabilities with a running max per query row (quads of lanes share
 * a row: shuffles), and then serve directly as the A fragments of O += P V (the C layout of two
 * 8-key tiles is the A layout of one 16-key step). Heads over 128 dimensions (Gemma 3's 256)
 * split the output: each work-group writes FA_DV of them and computes the scores over the whole
 * head, so that Q, O and the staged tiles fit the registers and local memory. Same arguments and
 * results as attn_prefill, rings included (position p at p % n_ctx; the ring holds the window
 * of every query of the launch); global size (ceil(n_tok / 64) * 128, n_head * HEAD_DIM /
 * FA_DV, n_split), local (128, 1, 1); with ATT_MMA_W 8, work-groups of 8 warps take 128
 * queries: (ceil(n_tok / 128) * 256, .., ..), local (256, 1, 1). The keys walked are those
 * the work-group's queries see, from the window's start of its first query; keys past its last query are staged as zeros (the
 * cache may hold anything there). With n_split > 1 (a long context behind few queries, whose
 * work-groups alone would leave most of the device idle) work-group z walks the z-th of n_split
 * equal runs of whole key tiles and writes its unnormalised output and each row's max and sum to
 * po / pml (attn_prefill_merge combines them) instead of out. Staging: keys row by row as they
 * lie in the cache; values transposed, each work-item packing two keys' halves of a dimension
 * into one 32-bit word, a warp's words side by side (no bank conflicts). */
#if HEAD_DIM > 128
#define FA_KT 32  /* keys per tile */
#define FA_DV 128 /* output dimensions a work-group */
#else
#define FA_KT 64
#define FA_DV HEAD_DIM
#endif
#define FA_NV (HEAD_DIM / FA_DV) /* work-groups per head */
#ifndef ATT_MMA_W
#define ATT_MMA_W 4 /* warps a work-group (4 or 8: 64 or 128 queries) */
#endif
#define FA_WG (32 * ATT_MMA_W)
#define FA_TQ (16 * ATT_MMA_W)
#define FA_KP (HEAD_DIM + 8)     /* halves per staged key row */
#define FA_VP (FA_KT + 8)        /* halves per staged value column */
#define FA_DS (HEAD_DIM / 16)    /* 16-wide steps over a head */
#define FA_DN (FA_DV / 8)        /* 8-wide output tiles of the work-group's dimensions */

/* ATT_ASYNC (the host sets it after ebb_cl_async_probe, f16 caches only): the tiles are copied
 * with cp.async (sm_80), keys and values row by row as they lie in the cache, so that the next
 * tile's keys load while this tile's probabilities and values are worked on, and its values
 * while the next tile's scores are; the values are read as B fragments by ldmatrix.trans. One
 * buffer each for keys and values: the keys' copy is issued once every warp has its scores, the
 * values' once every warp has added its P V. */
#if defined(ATT_ASYNC) && ATT_ASYNC && !(defined(KV_Q8) && KV_Q8)
#define FA_ASYNC 1
#define FA_VR (FA_DV + 8) /* halves per staged value row (the rows 16-byte aligned) */
/* FA_KT positions from k0 of dims values a position (src at the first), 8 halves a copy, into
 * rows of pitch halves; zeros past n_keys (a copy of 0 source bytes fills its 16 with zeros). */
inline void fa_stage(uint dst, int pitch, const __global half *src, int dims, int k0, int n_keys,
                     int n_ctx, int lid)
{
    for (int c = lid; c < FA_KT * (dims / 8); c += FA_WG) {
        int j = c / (dims / 8), d = c % (dims / 8) * 8;
        bool in = k0 + j < n_keys;
        const __global half *s = src + (in ? (size_t)((k0 + j) % n_ctx) * HEAD_DIM + d : 0);
        cp_async16(dst + (uint)(j * pitch + d) * 2u, s, in ? 16 : 0);
    }
}
#else
#define FA_ASYNC 0
#endif

/* ATT_EX2: probabilities through ex2.approx on scores in base 2 (the queries scaled by log2 e),
 * the row maxima written for attn_prefill_merge back in base e. */
#if defined(ATT_EX2) && ATT_EX2
#define FA_QS (scale * M_LOG2E_F)
inline float fa_exp(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#define FA_ML(m) ((m) * M_LN2_F)
#else
#define FA_QS scale
#define fa_exp(x) exp(x)
#define FA_ML(m) (m)
#endif

inline float fa_shfl_xor(float v, int m)
{
    float o;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(v), "r"(m));
    return o;
}

inline uint fa_h2(float lo, float hi)
{
    uint d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

/* Values d..d + 7 (d a multiple of 8) of the position's head that starts at value index at of c
 * as 8 halves (16 bytes, the first in the low half of the first word): copied, or with KV_Q8
 * dequantized from their block and rounded. */
#if defined(KV_Q8) && KV_Q8
inline uint4 fa_kv8(const __global uchar *row, int d)
{
    const __global uchar *b = row + d / 32 * KV_QB;
    float s = vload_half(0, (const __global half *)b);
    float8 x = convert_float8(vload8(0, (const __global char *)(b + 2 + d % 32))) * s;
    return (uint4)(fa_h2(x.s0, x.s1), fa_h2(x.s2, x.s3), fa_h2(x.s4, x.s5), fa_h2(x.s6, x.s7));
}
#define FA_KV8(c, at, d) fa_kv8(KV_AT((c), (at)), (d))
#else
#define FA_KV8(c, at, d) vload4(0, (const __global uint *)((c) + (at) + (d)))
#endif

__kernel __attribute__((reqd_work_group_size(FA_WG, 1, 1))) void
attn_prefill_mma(__global const float *qkv, int qkv_ld, __global const KV_T *kc,
                 __global const KV_T *vc, ulong kv_base, int n_ctx, int pos0, int n_tok,
                 int n_head, int n_head_kv, float scale, __global float *out, int out_ld, int r0,
                 int win, __global float *po, __global float2 *pml)
{
    /* half K[k0 + j][d] at j * FA_KP + d (rows 16-byte aligned for cp.async) */
    __local uint ks[FA_KT * FA_KP / 2] __attribute__((aligned(16)));
#if FA_ASYNC
    /* half V[k0 + j][dv0 + d] at j * FA_VR + d (rows 16-byte aligned for cp.async, ldmatrix) */
    __local uint vs[FA_KT * FA_VR / 2] __attribute__((aligned(16)));
#else
    __local uint vt[FA_DV * FA_VP / 2]; /* half V[k0 + j][dv0 + d] at d * FA_VP + j */
#endif
    int lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane >> 2, q = lane & 3;
    int h = get_group_id(1) / FA_NV, dv0 = (get_group_id(1) % FA_NV) * FA_DV;
    int hk = h / (n_head / n_head_kv);
    int t0 = get_group_id(0) * FA_TQ, tw = t0 + warp * 16;
    int n_keys = pos0 + min(n_tok, t0 + FA_TQ); /* keys the work-group's queries see */
    int k_lo = att_first(pos0 + t0 + 1, win);  /* the first of them */
    /* This work-group's run of them: the z-th of nz, whole tiles. */
    int nz = get_num_groups(2), z = get_group_id(2);
    int span = ((n_keys - k_lo + nz - 1) / nz + FA_KT - 1) / FA_KT * FA_KT;
    int k_end = min(n_keys, k_lo + (z + 1) * span);
    k_lo += z * span;
    int w_lo = att_first(pos0 + tw + 1, win);  /* the first key the warp's queries see */
    /* This lane's two query rows (g and g + 8 of the warp's 16) and their positions. */
    int qa = min(tw + g, n_tok - 1), qb = min(tw + g + 8, n_tok - 1);
    int pa = pos0 + tw + g, pb = pos0 + tw + g + 8;
    int fa = win > 0 ? pa - win : -1, fb = win > 0 ? pb - win : -1; /* keys <= these are out */
    const __global float *qra = qkv + (size_t)(r0 + qa) * qkv_ld + h * HEAD_DIM;
    const __global float *qrb = qkv + (size_t)(r0 + qb) * qkv_ld + h * HEAD_DIM;
    uint qf[FA_DS][4];
#pragma unroll
    for (int s = 0; s < FA_DS; s++) {
        int d = s * 16 + 2 * q;
        qf[s][0] = fa_h2(qra[d] * FA_QS, qra[d + 1] * FA_QS);
        qf[s][1] = fa_h2(qrb[d] * FA_QS, qrb[d + 1] * FA_QS);
        qf[s][2] = fa_h2(qra[d + 8] * FA_QS, qra[d + 9] * FA_QS);
        qf[s][3] = fa_h2(qrb[d + 8] * FA_QS, qrb[d + 9] * FA_QS);
    }
    float o[FA_DN][4];
#pragma unroll
    for (int n = 0; n < FA_DN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[n][e] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;
    const __global KV_T *kb = KV_AT(kc, kv_base + (size_t)hk * n_ctx * HEAD_DIM);
    const __global KV_T *vb = KV_AT(vc, kv_base + (size_t)hk * n_ctx * HEAD_DIM + dv0);
#if FA_ASYNC
    /* The first tile's keys and values in flight (two groups of copies). */
    uint ks0 = local_saddr(ks), vs0 = local_saddr(vs); /* shared addresses */
    if (k_lo < k_end)
        fa_stage(ks0, FA_KP, kb, HEAD_DIM, k_lo, n_keys, n_ctx, lid);
    CP_COMMIT();
    if (k_lo < k_end)
        fa_stage(vs0, FA_VR, vb, FA_DV, k_lo, n_keys, n_ctx, lid);
    CP_COMMIT();
#endif
    for (int k0 = k_lo; k0 < k_end; k0 += FA_KT) {
#if FA_ASYNC
        CP_WAIT(1); /* this tile's keys (its values may still be in flight) */
#else
        /* Stage FA_KT keys and values, 8 halves (16 bytes) per copy; zeros past n_keys. */
        for (int c = lid; c < FA_KT * (HEAD_DIM / 8); c += FA_WG) {
            int j = c / (HEAD_DIM / 8), d = (c % (HEAD_DIM / 8)) * 8;
            uint4 kv4 = (uint4)(0);
            if (k0 + j < n_keys)
                kv4 = FA_KV8(kb, (size_t)((k0 + j) % n_ctx) * HEAD_DIM, d);
            vstore4(kv4, 0, ks + (j * FA_KP + d) / 2);
        }
        for (int c = lid; c < FA_KT / 2 * (FA_DV / 8); c += FA_WG) {
            int j = c % (FA_KT / 2) * 2, d = c / (FA_KT / 2) * 8; /* keys j, j + 1; 8 dims */
            uint4 va = (uint4)(0), vn = (uint4)(0);
            if (k0 + j < n_keys)
                va = FA_KV8(vb, (size_t)((k0 + j) % n_ctx) * HEAD_DIM, d);
            if (k0 + j + 1 < n_keys)
                vn = FA_KV8(vb, (size_t)((k0 + j + 1) % n_ctx) * HEAD_DIM, d);
            uint wa[4] = {va.x, va.y, va.z, va.w}, wn[4] = {vn.x, vn.y, vn.z, vn.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                vt[((d + 2 * i) * FA_VP + j) / 2] = (wa[i] & 0xffffu) | (wn[i] << 16);
                vt[((d + 2 * i + 1) * FA_VP + j) / 2] = (wa[i] >> 16) | (wn[i] & 0xffff0000u);
            }
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        /* Some of the warp's queries see this tile: not all past them, not all before the
         * window of the first. */
        bool act = k0 <= pos0 + tw + 15 && k0 + FA_KT > w_lo;
        float sc[FA_KT / 8][4];
        if (act) {
#pragma unroll
            for (int n = 0; n < FA_KT / 8; n++) {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    sc[n][e] = 0.0f;
                int kr = (n * 8 + g) * (FA_KP / 2) + q;
#pragma unroll
                for (int s = 0; s < FA_DS; s++) {
                    uint b0 = ks[kr + s * 8], b1 = ks[kr + s * 8 + 4];
                    MMA_F16(sc[n], qf[s][0], qf[s][1], qf[s][2], qf[s][3], b0, b1);
                }
            }
        }
#if FA_ASYNC
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp has read the keys: the next tile's load */
        if (k0 + FA_KT < k_end)
            fa_stage(ks0, FA_KP, kb, HEAD_DIM, k0 + FA_KT, n_keys, n_ctx, lid);
        CP_COMMIT();
#endif
        uint pf[FA_KT / 8][2]; /* probabilities as halves: rows a and b of each 8-key tile */
        if (act) {
            /* Causal mask and the window, on the tiles that cross a row's position or its
             * window's start (the same for the whole warp), and the running max of rows g (a)
             * and g + 8 (b). */
            float xa = -INFINITY, xb = -INFINITY;
            bool cut = k0 + FA_KT - 1 > pos0 + tw || (win > 0 && k0 <= pos0 + tw + 15 - win);
#pragma unroll
            for (int n = 0; n < FA_KT / 8; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int kp = k0 + n * 8 + 2 * q + e;
                    if (cut && (kp > pa || kp <= fa))
                        sc[n][e] = -INFINITY;
                    if (cut && (kp > pb || kp <= fb))
                        sc[n][2 + e] = -INFINITY;
                    xa = fmax(xa, sc[n][e]);
                    xb = fmax(xb, sc[n][2 + e]);
                }
            xa = fmax(xa, fa_shfl_xor(xa, 1));
            xa = fmax(xa, fa_shfl_xor(xa, 2));
            xb = fmax(xb, fa_shfl_xor(xb, 1));
            xb = fmax(xb, fa_shfl_xor(xb, 2));
            float na = fmax(ma, xa), nb = fmax(mb, xb);
            /* A row that has seen no key yet keeps -inf: its factor and probabilities are 0. */
            float ca = na == -INFINITY ? 0.0f : fa_exp(ma - na);
            float cb = nb == -INFINITY ? 0.0f : fa_exp(mb - nb);
            ma = na;
            mb = nb;
            la *= ca;
            lb *= cb;
#pragma unroll
            for (int n = 0; n < FA_DN; n++) {
                o[n][0] *= ca;
                o[n][1] *= ca;
                o[n][2] *= cb;
                o[n][3] *= cb;
            }
#pragma unroll
            for (int n = 0; n < FA_KT / 8; n++) {
                float p0 = na == -INFINITY ? 0.0f : fa_exp(sc[n][0] - na);
                float p1 = na == -INFINITY ? 0.0f : fa_exp(sc[n][1] - na);
                float p2 = nb == -INFINITY ? 0.0f : fa_exp(sc[n][2] - nb);
                float p3 = nb == -INFINITY ? 0.0f : fa_exp(sc[n][3] - nb);
                la += p0 + p1;
                lb += p2 + p3;
                pf[n][0] = fa_h2(p0, p1);
                pf[n][1] = fa_h2(p2, p3);
            }
        }
#if FA_ASYNC
        CP_WAIT(1); /* this tile's values (the next tile's keys may still be in flight) */
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        if (act) {
            /* O += P V: 16-key steps, the A fragment from two 8-key tiles of P. */
#pragma unroll
            for (int kk = 0; kk < FA_KT / 16; kk++) {
                uint a0 = pf[2 * kk][0], a1 = pf[2 * kk][1];
                uint a2 = pf[2 * kk + 1][0], a3 = pf[2 * kk + 1][1];
#if FA_ASYNC
                /* ldmatrix.x4.trans: lanes 8i..8i + 7 give the rows of matrix i: keys kk * 16 +
                 * (i & 1) * 8 + 0..7 at dimensions (n + i / 2) * 8: matrices 0 and 1 are the B
                 * fragment of output tile n, 2 and 3 that of n + 1. */
                int vrow = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
                for (int n = 0; n < FA_DN; n += 2) {
                    uint addr = vs0 + (uint)(vrow * FA_VR + (n + (lane >> 4)) * 8) * 2u;
                    uint b0, b1, b2, b3;
                    LDSM_X4_T(b0, b1, b2, b3, addr);
                    MMA_F16(o[n], a0, a1, a2, a3, b0, b1);
                    MMA_F16(o[n + 1], a0, a1, a2, a3, b2, b3);
                }
#else
#pragma unroll
                for (int n = 0; n < FA_DN; n++) {
                    int vr = (n * 8 + g) * (FA_VP / 2) + kk * 8 + q;
                    MMA_F16(o[n], a0, a1, a2, a3, vt[vr], vt[vr + 4]);
                }
#endif
            }
        }
#if FA_ASYNC
        barrier(CLK_LOCAL_MEM_FENCE); /* every warp has read the values: the next tile's load */
        if (k0 + FA_KT < k_end)
            fa_stage(vs0, FA_VR, vb, FA_DV, k0 + FA_KT, n_keys, n_ctx, lid);
        CP_COMMIT();
#else
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
    }
    la += fa_shfl_xor(la, 1);
    la += fa_shfl_xor(la, 2);
    lb += fa_shfl_xor(lb, 1);
    lb += fa_shfl_xor(lb, 2);
    bool wa = tw + g < n_tok, wb = tw + g + 8 < n_tok;
    if (nz > 1) {
        /* A run of the keys: its unnormalised rows at po[((z * n_head + h) * n_tok + t) *
         * HEAD_DIM + d] and (max, sum) at pml[(z * n_head + h) * n_tok + t]; a row that saw no
         * key of the run has max -inf and sum 0. */
        size_t zr = ((size_t)z * n_head + h) * n_tok;
        __global float *oa = po + (zr + tw + g) * HEAD_DIM + dv0;
        __global float *ob = po + (zr + tw + g + 8) * HEAD_DIM + dv0;
#pragma unroll
        for (int n = 0; n < FA_DN; n++) {
            int d = n * 8 + 2 * q;
            if (wa)
                vstore2((float2)(o[n][0], o[n][1]), 0, oa + d);
            if (wb)
                vstore2((float2)(o[n][2], o[n][3]), 0, ob + d);
        }
        if (q == 0 && dv0 == 0) {
            if (wa)
                pml[zr + tw + g] = (float2)(FA_ML(ma), la);
            if (wb)
                pml[zr + tw + g + 8] = (float2)(FA_ML(mb), lb);
        }
        return;
    }
    __global float *oa = out + (size_t)(r0 + tw + g) * out_ld + h * HEAD_DIM + dv0;
    __global float *ob = out + (size_t)(r0 + tw + g + 8) * out_ld + h * HEAD_DIM + dv0;
#pragma unroll
    for (int n = 0; n < FA_DN; n++) {
        int d = n * 8 + 2 * q;
        if (wa)
            vstore2((float2)(o[n][0] / la, o[n][1] / la), 0, oa + d);
        if (wb)
            vstore2((float2)(o[n][2] / lb, o[n][3] / lb), 0, ob + d);
    }
}

/* attn_prefill_mma's runs of keys combined: row t of head h from the n_split partials that
 * attn_prefill_mma wrote to po / pml, normalised into out (as attn_prefill_mma would have written
 * it, stride out_ld from row r0). Global size (HEAD_DIM, n_head, n_tok). */
__kernel void attn_prefill_merge(__global const float *po, __global const float2 *pml,
                                 int n_split, int n_tok, __global float *out, int out_ld, int r0)
{
    int d = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    int n_head = get_global_size(1);
    float m = -INFINITY;
    for (int z = 0; z < n_split; z++)
        m = fmax(m, pml[((size_t)z * n_head + h) * n_tok + t].x);
    float l = 0.0f, o = 0.0f;
    for (int z = 0; z < n_split; z++) {
        size_t zr = ((size_t)z * n_head + h) * n_tok + t;
        float2 ml = pml[zr];
        float w = ml.x == -INFINITY ? 0.0f : exp(ml.x - m);
        l += w * ml.y;
        o += w * po[zr * HEAD_DIM + d];
    }
    out[(size_t)(r0 + t) * out_ld + h * HEAD_DIM + d] = o / l;
}
#endif
