/* 8-bit activations for decode (tuning mv_q8): the input of a matvec, after the norm and SwiGLU
 * folds, is quantized once per product into int8 blocks of 32 with a float scale, so that
 * matvec_q8 reads 36 bytes of input per block instead of 128 and multiplies 4-bit weights by
 * 8-bit inputs four at a time in integers. llama.cpp's CUDA decode quantizes its activations the
 * same way (q8_1 blocks of 32). Options from the prologue:
 *   MV_PTX  1: NVIDIA inline PTX (dp4a, warp shuffles); 0: portable OpenCL C
 *   MV_IDP  1: the 4-byte dots through cl_khr_integer_dot_product's packed builtins (set only
 *           without MV_PTX, where the device lists the extension and passes idp_probe below)
 *   Q8_WG   work-group size of quantize_x8 (a multiple of 32) */

#ifndef MV_PTX
#define MV_PTX 0
#endif
#ifndef MV_IDP
#define MV_IDP 0
#endif
#ifndef Q8_WG
#define Q8_WG 256
#endif

/* The 4-byte integer dots of the 8-bit decode path (matvec.cl's matvec_q8, kq8.cl, moe.cl):
 * dp4a with MV_PTX; with MV_IDP cl_khr_integer_dot_product's dot_4x8packed_*_int (declared
 * under the feature macro __opencl_c_integer_dot_product_input_4x8bit_packed; the
 * non-saturating forms, the accumulator added after, so that every branch gives the same
 * integer); otherwise plain integer products. */

/* c + the dot product of the four unsigned bytes of a with the four signed bytes of b. */
inline int dot4_us(uint a, int b, int c)
{
#if MV_PTX
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#elif MV_IDP
    return c + dot_4x8packed_us_int(a, as_uint(b));
#else
    uchar4 ua = as_uchar4(a);
    char4 sb = as_char4(b);
    return c + (int)ua.x * sb.x + (int)ua.y * sb.y + (int)ua.z * sb.z + (int)ua.w * sb.w;
#endif
}

/* c + the dot product of the four signed bytes of a with those of b. */
inline int dot4_ss(int a, int b, int c)
{
#if MV_PTX
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#elif MV_IDP
    return c + dot_4x8packed_ss_int(as_uint(a), as_uint(b));
#else
    char4 sa = as_char4(a), sb = as_char4(b);
    return c + (int)sa.x * sb.x + (int)sa.y * sb.y + (int)sa.z * sb.z + (int)sa.w * sb.w;
#endif
}

#ifdef IDP_PROBE
/* The start-up probe of MV_IDP (ebb_cl_idp_probe): work-item i writes
 * out[2i] = dot4_ss(a[i], b[i], c[i]) and out[2i + 1] = dot4_us(a[i], b[i], c[i]), which the
 * host compares with its own, and work-item 0 out[2n] = MV_IDP (whether the builtins were
 * used: the host's prologue sets it only where the compiler declares them). Global size n. */
__kernel void idp_probe(__global const uint *a, __global const uint *b, __global const int *c,
                        __global int *out)
{
    int i = get_global_id(0);
    out[2 * i] = dot4_ss(as_int(a[i]), as_int(b[i]), c[i]);
    out[2 * i + 1] = dot4_us(a[i], as_int(b[i]), c[i]);
    if (i == 0)
        out[2 * get_global_size(0)] = MV_IDP;
}
#endif

#if MV_PTX
/* v combined over the 32 lanes of a warp (butterfly: every lane gets the result). */
inline float warp_max(float v)
{
    for (int s = 16; s > 0; s >>= 1) {
        float o;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                     : "=f"(o)
                     : "f"(v), "r"(s));
        v = fmax(v, o);
    }
    return v;
}
inline float warp_sum(float v)
{
    for (int s = 16; s > 0; s >>= 1) {
        float o;
        asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
                     : "=f"(o)
                     : "f"(v), "r"(s));
        v += o;
    }
    return v;
}
#endif

/* The int8 blocks of 32 that every 8-bit input is made of, rounded the same way by quantize_x8,
 * attn_decode_reduce_q8 (block32 and the same steps, written out) and moe.cl's moe_router_q8 and
 * moe_gate_up_q8 (q8_block), so that their outputs agree to the bit. */

/* The scale d of a block whose max |x'| is amax, and the int8 of its input v. */
inline float q8_scale(float amax)
{
    return amax / 127.0f;
}
inline int q8_round(float v, float d)
{
    return d > 0.0f ? convert_int_rte(v / d) : 0;
}

/* The 32 work-items lid & ~31 .. lid | 31 combine v (max when is_max, else sum); every one of
 * them gets the result. red holds a float per work-item; all work-items of the group must call
 * it. */
inline float block32(__local float *red, int lid, float v, int is_max)
{
#if MV_PTX
    (void)red, (void)lid;
    return is_max ? warp_max(v) : warp_sum(v);
#else
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 16; s > 0; s >>= 1) {
        float o = (lid & 31) < s ? red[lid + s] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        if ((lid & 31) < s)
            red[lid] = is_max ? fmax(red[lid], o) : red[lid] + o;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = red[lid & ~31];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
#endif
}

/* v, one item of a 32-block (items lid & ~31 .. lid | 31), as int8 at *q and, from the block's
 * first item, (d inv, d inv * the sum of its int8 values) at *qd, d = max |v| / 127 (q8_scale).
 * All items of the work-group call it (red: a float each); those with w false write nothing. */
inline void q8_block(__local float *red, int lid, float v, float inv, bool w, __global char *q,
                     __global float2 *qd)
{
    float d = q8_scale(block32(red, lid, fabs(v), 1));
    int qi = q8_round(v, d);
    float s = block32(red, lid, (float)qi, 0);
    if (w)
        *q = (char)qi;
    if (w && (lid & 31) == 0)
        *qd = (float2)(d * inv, d * inv * s);
}

#if defined(Q8_QUANTIZE) || defined(Q8_QIN)
/* The pieces of quantize_x8 that matvec_q8_qin (matvec.cl, tuning qin) repeats inside each of
 * its work-groups: written once here so that both compute the same numbers. */

/* Sum of the squares of x's inputs 4 * vl .. 4 * vl + 3, 4 * (vl + Q8_WG) .., the share of
 * quantize_x8's work-item vl in the norm. */
inline float q8_ss_part(const __global float *x, int n_in, int vl)
{
    float ss = 0.0f;
    for (int j = vl * 4; j < n_in; j += Q8_WG * 4) {
        float4 v = vload4(0, x + j);
        ss += dot(v, v);
    }
    return ss;
}

/* Input i of the product after the folds: x[i] * nw[i] with nw given, then with glu
 * act(gate) * up (x holding [gate | up]). */
inline float q8_in(const __global float *x, int n_in, const __global float *nw, int glu, int i)
{
    float v = x[i];
    if (nw)
        v *= nw[i];
    if (glu)
        v = glu_act(v, glu) * x[n_in + i];
    return v;
}

#endif

#ifdef Q8_QUANTIZE
/* quantize_x8: xq[i] = round(x'[i] / d_b) and xd[b] = (d_b * inv, d_b * inv * sum of block b's xq), where x'
 * is matvec's folded input of row 0 of x (x * nw with nw given; act(gate) * up with glu, x
 * holding [gate | up]), d_b = max |x'| over block b / 127, and inv = 1 / rms(x) with nw given
 * (else 1), so that sum_i W[o][i] x'[i] / rms = sum_b d_w,b xd[b].x sum q_w xq + m_w,b xd[b].y
 * for 4-bit weights q_w d_w + m_w. One work-item per input; n_in a multiple of 32. Every
 * work-group adds up the squares of the whole row itself, which costs a re-read of a row that
 * is in cache and saves a launch. Global size (round_up(n_in, Q8_WG)), local (Q8_WG). */
inline void quantize_row(const __global float *x, int n_in, const __global float *nw, float eps,
                         int glu, __global char *xq, __global float2 *xd, __local float *red)
{
    int i = get_global_id(0), lid = get_local_id(0);
    float inv = 1.0f;
    if (nw) {
        float ss = q8_ss_part(x, n_in, lid);
#if MV_PTX /* each warp's sum by shuffles, then the Q8_WG / 32 partials: two barriers */
        ss = warp_sum(ss);
        if ((lid & 31) == 0)
            red[lid >> 5] = ss;
        barrier(CLK_LOCAL_MEM_FENCE);
        ss = 0.0f;
        for (int k = 0; k < Q8_WG / 32; k++)
            ss += red[k];
        inv = rsqrt(ss / n_in + eps);
#else
        red[lid] = ss;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = Q8_WG / 2; s > 0; s >>= 1) {
            if (lid < s)
                red[lid] += red[lid + s];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        inv = rsqrt(red[0] / n_in + eps);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    bool in = i < n_in;
    float v = in ? q8_in(x, n_in, nw, glu, i) : 0.0f;
    q8_block(red, lid, v, inv, in, xq + i, xd + i / 32); /* (i & 31 is lid & 31) */
}

__kernel __attribute__((reqd_work_group_size(Q8_WG, 1, 1))) void
quantize_x8(__global const float *x, int n_in, __global const float *nw, float eps, int glu,
            __global char *xq, __global float2 *xd)
{
    __local float red[Q8_WG];
    quantize_row(x, n_in, nw, eps, glu, xq, xd, red);
}

/* quantize_x8 for the n rows of x (stride x_ld) given by the global size's second dimension,
 * each with quantize_x8's folds (the norm with nw, SwiGLU / GeGLU with glu: row t holds
 * [gate | up] of n_in each): row t's bytes at xq + t * n_in, its blocks' scales at
 * xd + t * n_in / 32, as matvec_q8r reads them. Global size (round_up(n_in, Q8_WG), n), local
 * (Q8_WG, 1). */
__kernel __attribute__((reqd_work_group_size(Q8_WG, 1, 1))) void
quantize_x8_rows(__global const float *x, int x_ld, int n_in, __global char *xq,
                 __global float2 *xd, __global const float *nw, float eps, int glu)
{
    __local float red[Q8_WG];
    size_t t = get_global_id(1);
    quantize_row(x + t * x_ld, n_in, nw, eps, glu, xq + t * n_in, xd + t * (n_in / 32), red);
}

/* Decode attention's second pass with the output projection's quantization fused in: the
 * n_chunks partials of head h are combined as attn_decode_reduce combines them (attention.cl's
 * att_combine, a work-group per slice of ATT_DS = 32 dimensions, ATT_DS x rr work-items), and
 * the slice's outputs are written as one int8 block of 32 into xq / xd exactly as quantize_x8
 * writes an input without norm or SwiGLU, so the projection runs matvec_q8 with no launch of
 * quantize_x8 of its own. The outputs themselves are not stored. HEAD_DIM a multiple of 32.
 * Global size (ATT_DS x rr, n_head x ATT_NS), local (ATT_DS x rr, 1): every row r of ATT_DS
 * work-items quantizes the same values, row 0 writes them. */
#if HEAD_DIM % 32 == 0
__kernel void attn_decode_reduce_q8(__global const float *po, __global const float2 *pml,
                                    int n_chunks, __global char *xq, __global float2 *xd)
{
    __local float red[ATT_RED_LOCAL];
    int lid = get_local_id(0), hs = get_group_id(1), h = hs / ATT_NS;
    int i = h * HEAD_DIM + hs % ATT_NS * ATT_DS + lid % ATT_DS; /* the output's index */
    float v = att_combine(po + (size_t)h * n_chunks * HEAD_DIM + hs % ATT_NS * ATT_DS,
                          pml + h * n_chunks, n_chunks, red);
    float dq = block32(red, lid, fabs(v), 1) / 127.0f;
    int q = dq > 0.0f ? convert_int_rte(v / dq) : 0;
    float s = block32(red, lid, (float)q, 0);
    if (lid >= ATT_DS)
        return;
    xq[i] = (char)q;
    if ((i & 31) == 0)
        xd[i / 32] = (float2)(dq, dq * s);
}

/* attn_decode_rope with attn_decode_reduce_q8's work done by the last work-group of each head
 * group: every work-group leaves its chunk's partials in po / pml as attn_decode_rope does (out
 * NULL), then counts itself in cnt[head group]; the group's last (which resets the count for
 * the next launch) merges each head's chunks one after another, a row of 32 work-items a slice
 * of 32 dimensions (attn_decode_reduce_q8's merge with one row a slice: the same floats; the
 * host runs that one with more rows past 8 chunks, whose sums round differently), and writes
 * each slice as one int8 block into xq / xd as attn_decode_reduce_q8 does. One launch a layer
 * less (the host's EBB_CL_ATT_FOLD). Global and local size as attn_decode_rope's; cnt holds a
 * zero for each head group. */
#if ATT_WG % 32 == 0
__kernel void attn_decode_rope_q8(ATT_ROPE_PARAMS, __global int *cnt, __global char *xq,
                                  __global float2 *xd)
{
    ATT_ROPE_LOCALS
    __local int last_;
    __local float red[ATT_WG];
    att_rope_body(ATT_ROPE_ARGS, ATT_ROPE_LOCAL_ARGS);
    int lid = get_local_id(0), hg = get_group_id(1), nc = get_num_groups(0);
    GLOBAL_FENCE();
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        last_ = atomic_inc(cnt + hg) == nc - 1;
        if (last_)
            atomic_xchg(cnt + hg, 0);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    bool last = last_;
    GLOBAL_FENCE();
    int r = lid / 32, d = lid % 32;
    /* Rounds of ATT_WG / 32 slices; every work-item of every work-group in each (block32's
     * barriers; an early return of the others broke PoCL's work-group loops), the last one's
     * active. */
    for (int b = 0; b < ATT_G * ATT_NS; b += ATT_WG / 32) {
        int e = b + r, h = hg * ATT_G + e / ATT_NS, o = e % ATT_NS * ATT_DS;
        bool act = last && e < ATT_G * ATT_NS;
        float m, l, v = 0.0f;
        if (act)
            v = att_merge(po + (size_t)h * nc * HEAD_DIM + o, pml + h * nc, 0, 1, nc, d, &m, &l) /
                l;
        float dq = block32(red, lid, fabs(v), 1) / 127.0f;
        int q = dq > 0.0f ? convert_int_rte(v / dq) : 0;
        float s = block32(red, lid, (float)q, 0);
        int i = h * HEAD_DIM + o + d; /* the output's index */
        if (act)
            xq[i] = (char)q;
        if (act && d == 0)
            xd[i / 32] = (float2)(dq, dq * s);
    }
}
#endif
#endif
#endif
