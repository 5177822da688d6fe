/* Decode with 8-bit inputs for the file's other block types (tuning kq8): Q8_0, Q5_0, Q5_1,
 * Q4_K, Q5_K and Q6_K weights in their raw GGUF blocks against the int8 input blocks that
 * quantize_x8 (q8.cl) writes, as matvec_q8 does for 4-bit 32-blocks. Every type is taken a
 * 32-element group at a time (the K-quants' super-blocks of 256 hold eight), so that one group
 * meets one input block: xq's eight words (element 4j..4j+3 in word j) and xd's (d, d * sum of
 * the block's int8 values), both already times 1 / rms where the norm is folded. A group's dot is
 * integer (q8.cl's dot4_us / dot4_ss: dp4a with MV_PTX, cl_khr_integer_dot_product with MV_IDP,
 * plain integer products otherwise) and one float multiply-add applies the scales:
 *   Q8_0  w = d q (q signed)                       d xd.x (q . xq)
 *   Q5_0  w = d (q - 16), Q5_1 w = d q + m          d xd.x (q . xq) - 16 d xd.y (or + m xd.y)
 *   Q4_K/Q5_K  w = d sc q - dmin mn (6-bit sc, mn)  d sc xd.x (q . xq) - dmin mn xd.y
 *   Q6_K  w = d sc16 (q - 32), an int8 scale per 16  d xd.x (sc0 (q . xq)[0..15] + sc1 (...)[16..31])
 * The prologue defines W_KQ8(o, b, xq, xd) (the contribution of group b of row o) for these raw
 * layouts. Alignment: Q4_K and Q5_K quants are read in 16-byte vectors (their block sizes
 * and quant offsets are multiples of 16), Q5_1 blocks and the K-quant scales in 4-byte words
 * (the host runs this only where the weight's offset is a multiple of 16), Q8_0, Q5_0 and Q6_K
 * in 2-byte ones (16 loads per 32 bytes: the likely limit of those types on GPUs, not yet
 * measured there). The MV_WG work-items of a row take consecutive groups, so a warp's loads
 * cover consecutive bytes of the row (two work-items share each 32-byte quant run of a 4-bit
 * K-quant pair). moe.cl's moe_gather_q8 / moe_down_q8 use the same group dots. */

#if defined(W_KQ8)

/* The int8 input block b of xq (global or local int4s) as eight words: W_KQ8 passes it and the
 * block's scales xd[b] by value, so that its inputs may be in either memory. */
#define KQ8_X(xq, b) ((int8)((xq)[2 * (b)], (xq)[2 * (b) + 1]))

/* Dots of 32 unsigned (q) or signed bytes with 32 signed input bytes. */
inline int kq8_dot_us(uint8 q, int8 x)
{
    int s = dot4_us(q.s0, x.s0, 0);
    s = dot4_us(q.s1, x.s1, s);
    s = dot4_us(q.s2, x.s2, s);
    s = dot4_us(q.s3, x.s3, s);
    s = dot4_us(q.s4, x.s4, s);
    s = dot4_us(q.s5, x.s5, s);
    s = dot4_us(q.s6, x.s6, s);
    return dot4_us(q.s7, x.s7, s);
}

inline int kq8_dot16_ss(int4 q, int4 x)
{
    int s = dot4_ss(q.s0, x.s0, 0);
    s = dot4_ss(q.s1, x.s1, s);
    s = dot4_ss(q.s2, x.s2, s);
    return dot4_ss(q.s3, x.s3, s);
}

/* 32 bytes at p as eight little-endian words: p 2-byte aligned (a2) or 4-byte aligned (a4). */
inline uint8 kq8_ld_a2(const __global uchar *p)
{
    return as_uint8(vload16(0, (const __global ushort *)p));
}
inline uint8 kq8_ld_a4(const __global uchar *p)
{
    return vload8(0, (const __global uint *)p);
}
/* ... and 16-byte aligned (two 16-byte loads where vload8 may give eight 4-byte ones). */
inline uint8 kq8_ld_a16(const __global uchar *p)
{
    const __global uint4 *v = (const __global uint4 *)p;
    return (uint8)(v[0], v[1]);
}

/* Six-bit scale and min of group g of a Q4_K/Q5_K block from its 12 scale bytes at s (4-byte
 * aligned), read as three words and picked without branches (k4_scale_min's bytes: for g < 4
 * the low six bits of bytes g and g + 4, else four bits of byte g + 4 and the top two of bytes
 * g - 4 and g). */
inline float2 kq8_k4_sm(const __global uchar *s, int g)
{
    uint3 w = vload3(0, (const __global uint *)s);
    uint j = 8u * (uint)(g & 3);
    uint b0 = (w.x >> j) & 255u, b1 = (w.y >> j) & 255u, b2 = (w.z >> j) & 255u;
    uint sc = g < 4 ? b0 & 63u : (b2 & 15u) | ((b0 >> 6) << 4);
    uint mn = g < 4 ? b1 & 63u : (b2 >> 4) | ((b1 >> 6) << 4);
    return (float2)((float)sc, (float)mn);
}

/* Bits 0..3 of h moved to bit 4 of bytes 0..3 (the fifth bits of four 5-bit quants). */
inline uint kq8_spread4(uint h)
{
    return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

/* The 32 5-bit quants of a Q5_0/Q5_1 block (qs: 16 bytes of low nibbles, element j in byte j
 * (j < 16) or the high nibble of byte j - 16; h: bit j the fifth bit of element j) as bytes. */
inline uint8 kq8_q5(uint4 qs, uint h)
{
    const uint m = 0x0F0F0F0Fu;
    return (uint8)((qs.s0 & m) | kq8_spread4(h), (qs.s1 & m) | kq8_spread4(h >> 4),
                   (qs.s2 & m) | kq8_spread4(h >> 8), (qs.s3 & m) | kq8_spread4(h >> 12),
                   ((qs.s0 >> 4) & m) | kq8_spread4(h >> 16),
                   ((qs.s1 >> 4) & m) | kq8_spread4(h >> 20),
                   ((qs.s2 >> 4) & m) | kq8_spread4(h >> 24),
                   ((qs.s3 >> 4) & m) | kq8_spread4(h >> 28));
}

inline float kq8_raw_q8_0(const __global uchar *w, ulong rowb, int o, int b,
                          int8 x, float2 dx)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 34;
    int8 q = as_int8(kq8_ld_a2(p + 2));
    int s = kq8_dot16_ss(q.lo, x.lo) + kq8_dot16_ss(q.hi, x.hi);
    return LD_HALF(p) * dx.x * (float)s;
}

inline float kq8_raw_q5_0(const __global uchar *w, ulong rowb, int o, int b,
                          int8 x, float2 dx)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 22;
    ushort2 hh = vload2(0, (const __global ushort *)(p + 2));
    uint4 qs = as_uint4(vload8(0, (const __global ushort *)(p + 6)));
    int s = kq8_dot_us(kq8_q5(qs, (uint)hh.x | ((uint)hh.y << 16)), x);
    return LD_HALF(p) * (dx.x * (float)s - 16.0f * dx.y);
}

inline float kq8_raw_q5_1(const __global uchar *w, ulong rowb, int o, int b,
                          int8 x, float2 dx)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 24;
    uint h = *(const __global uint *)(p + 4);
    uint4 qs = vload4(0, (const __global uint *)(p + 8));
    int s = kq8_dot_us(kq8_q5(qs, h), x);
    return LD_HALF(p) * dx.x * (float)s + LD_HALF(p + 2) * dx.y;
}

inline float kq8_raw_q4_k(const __global uchar *w, ulong rowb, int o, int b,
                          int8 x, float2 dx)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(b >> 3) * 144;
    int g = b & 7;
    uint8 v = kq8_ld_a16(p + 16 + 32 * (g >> 1));
    uint8 q = (v >> (uint)(4 * (g & 1))) & 0x0F0F0F0Fu;
    float2 sm = kq8_k4_sm(p + 4, g);
    int s = kq8_dot_us(q, x);
    return LD_HALF(p) * sm.x * dx.x * (float)s - LD_HALF(p + 2) * sm.y * dx.y;
}

inline float kq8_raw_q5_k(const __global uchar *w, ulong rowb, int o, int b,
                          int8 x, float2 dx)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(b >> 3) * 176;
    int g = b & 7;
    uint8 v = kq8_ld_a16(p + 48 + 32 * (g >> 1)), h = kq8_ld_a16(p + 16);
    uint8 q = ((v >> (uint)(4 * (g & 1))) & 0x0F0F0F0Fu) | (((h >> (uint)g) & 0x01010101u) << 4);
    float2 sm = kq8_k4_sm(p + 4, g);
    int s = kq8_dot_us(q, x);
    return LD_HALF(p) * sm.x * dx.x * (float)s - LD_HALF(p + 2) * sm.y * dx.y;
}

inline float kq8_raw_q6_k(const __global uchar *w, ulong rowb, int o, int b,
                          int8 x, float2 dx)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(b >> 3) * 210;
    int g = b & 7, n = g >> 2, qd = g & 3;
    uint8 l = kq8_ld_a2(p + n * 64 + (qd & 1) * 32), h = kq8_ld_a2(p + 128 + n * 32);
    uint8 q = ((l >> (uint)(qd & 2 ? 4 : 0)) & 0x0F0F0F0Fu) |
              (((h >> (uint)(2 * qd)) & 0x03030303u) << 4);
    /* q - 32 per byte without borrows between bytes: 0..63 | 0x80 minus 32 stays >= 0x60,
     * and flipping bit 7 back gives the two's complement byte of q - 32. */
    int8 sq = as_int8(((q | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
    const __global char *sc = (const __global char *)p + 192 + n * 8 + 2 * qd;
    int s = (int)sc[0] * kq8_dot16_ss(sq.lo, x.lo) + (int)sc[1] * kq8_dot16_ss(sq.hi, x.hi);
    return LD_HALF(p + 208) * dx.x * (float)s;
}

#if defined(ROW_SUM) /* the weight program (matvec.cl before this file); moe.cl has its own */
/* matvec_q8's groups a work-item loads per step. 4 decoded slower than 2 on an H200 (Llama-3-8B
 * and Qwen3-8B Q4_K_M 2-8%, docs/PERFORMANCE.md, twentieth session). */
#define KQU 2
/* A row's sum over lane's groups b = lane, lane + MVQ_WG, .. of nb, KQU groups a step (KQU
 * weight loads in flight), added in one order for matvec_q8, matvec_q8_qin and matvec_q8_mix:
 * T(b, ...) is group b's term, KQ8_T (this program's W_KQ8) or KQ8_TF (a named kq8_raw_*). */
#define KQ8_ROW(acc, lane, nb, T, ...)                                                          \
    do {                                                                                       \
        int b_ = (lane);                                                                       \
        for (; b_ + (KQU - 1) * MVQ_WG < (nb); b_ += KQU * MVQ_WG) {                           \
            float a_[KQU];                                                                     \
            for (int u_ = 0; u_ < KQU; u_++)                                                   \
                a_[u_] = T(b_ + u_ * MVQ_WG, __VA_ARGS__);                                     \
            float s_ = a_[0];                                                                  \
            for (int u_ = 1; u_ < KQU; u_++)                                                   \
                s_ += a_[u_];                                                                  \
            (acc) += s_;                                                                       \
        }                                                                                      \
        for (; b_ < (nb); b_ += MVQ_WG)                                                        \
            (acc) += T(b_, __VA_ARGS__);                                                       \
    } while (0)
#define KQ8_T(b, row, xq, xd) W_KQ8((row), (b), (xq), (xd))
#define KQ8_TF(b, f, w, rowb, row, xq, xd) f((w), (rowb), (row), (b), KQ8_X((xq), (b)), (xd)[(b)])

/* matvec_q8 for these types: y[y_off + o] = (res ? res[y_off + o] : 0) + sum over the 32-groups
 * b of W_KQ8(o, b), the input quantized by quantize_x8 (norm and SwiGLU folded there). Same
 * arguments, global and local sizes as the 4-bit matvec_q8 in matvec.cl (the two are never in
 * one program). */
__kernel void matvec_q8(W_ARGS, int n_in, int n_out, __global const int4 *xq,
                        __global const float2 *xd, __global float *y, int y_off,
                        __global const float *res)
{
    int row = get_global_id(0) / MVQ_WG;
    int lane = get_local_id(0) % MVQ_WG;
#if MVQ_WG > 1 && !(MV_PTX && MVQ_WG == 32)
    int slot = get_local_id(0) / MVQ_WG;
    __local float red[MVQ_WG * MVQ_ROWS];
#endif
    float acc = 0.0f;
    if (row < n_out)
        KQ8_ROW(acc, lane, n_in / 32, KQ8_T, row, xq, xd);
    q8_row_store(Q8_ROW_SUM(acc), lane, row, n_out, y, y_off, res);
}

/* matvec_q8r for these types (matvec.cl's frame and arguments, global and local sizes): group
 * b of each of the work-item's MVO rows against each of its nr token rows, W_KQ8 summed as
 * matvec_q8r sums the 4-bit products (one group after another). The group's bytes come from
 * memory for the first token row and from cache for the others. */
__kernel void matvec_q8r(W_ARGS, int n_in, int n_out, __global const int4 *xq,
                         __global const float2 *xd, __global float *y, int y_ld, int y_off,
                         __global const float *res, int n_tok)
{
    Q8R_FRAME;
    if (row0 < n_out)
        for (int b = lane; b < nb; b += MV_WG)
            for (int r = 0; r < MVR; r++)
                if (r < nr)
                    for (int o = 0; o < MVO; o++)
                        acc[o][r] += W_KQ8(min(row0 + o, n_out - 1), b, xq0 + (size_t)r * xs,
                                           xd0 + (size_t)r * nb);
    Q8R_STORE;
}

/* GGML's ids of the types matvec_q8_mix takes as its second weight (the host's
 * ebb_cl_kq8_mix_type) */
#define KQ8_MIX_Q8_0 8
#define KQ8_MIX_Q4_K 12
#define KQ8_MIX_Q5_K 13
#define KQ8_MIX_Q6_K 14
/* matvec_q8 over two weights stacked along the output, one launch: rows 0 .. n_a - 1 are this
 * program's weight (W_ARGS), rows n_a .. n_out - 1 the rows of u (u_a + u_off: raw blocks of
 * GGML type tb, one of KQ8_MIX_*, e.g. attn_v in Q6_K after q and k in Q4_K), both over the
 * input xq / xd; each row summed as matvec_q8 sums it, y[y_off + o] (no residual). Where n_a
 * is a multiple of a work-group's rows (q and k: heads of 64-256), each work-group's rows lie in
 * one weight and the branch is uniform in it. Global and local sizes as matvec_q8's for n_out
 * rows. */
__kernel void matvec_q8_mix(W_ARGS, int n_in, int n_a, int n_out, __global const uchar *u_a,
                            ulong u_off, int tb, __global const int4 *xq,
                            __global const float2 *xd, __global float *y, int y_off)
{
    int row = get_global_id(0) / MVQ_WG;
    int lane = get_local_id(0) % MVQ_WG;
#if MVQ_WG > 1 && !(MV_PTX && MVQ_WG == 32)
    int slot = get_local_id(0) / MVQ_WG;
    __local float red[MVQ_WG * MVQ_ROWS];
#endif
    float acc = 0.0f;
    int nb = n_in / 32, r = row - n_a;
    const __global uchar *u = u_a + u_off;
    if (row < n_a)
        KQ8_ROW(acc, lane, nb, KQ8_T, row, xq, xd);
    else if (row < n_out && tb == KQ8_MIX_Q6_K)
        KQ8_ROW(acc, lane, nb, KQ8_TF, kq8_raw_q6_k, u, (ulong)(nb / 8) * 210, r, xq, xd);
    else if (row < n_out && tb == KQ8_MIX_Q4_K)
        KQ8_ROW(acc, lane, nb, KQ8_TF, kq8_raw_q4_k, u, (ulong)(nb / 8) * 144, r, xq, xd);
    else if (row < n_out && tb == KQ8_MIX_Q5_K)
        KQ8_ROW(acc, lane, nb, KQ8_TF, kq8_raw_q5_k, u, (ulong)(nb / 8) * 176, r, xq, xd);
    else if (row < n_out && tb == KQ8_MIX_Q8_0)
        KQ8_ROW(acc, lane, nb, KQ8_TF, kq8_raw_q8_0, u, (ulong)nb * 34, r, xq, xd);
    q8_row_store(Q8_ROW_SUM(acc), lane, row, n_out, y, y_off, NULL);
}

#if defined(QIN_ON)
/* matvec_q8 quantizing its own input (tuning qin), as matvec.cl's matvec_q8_qin for 4-bit
 * weights: each work-group turns x into int8 blocks in local memory (qin_fill, quantize_x8's
 * numbers), then sums its QIN_ROWS rows as matvec_q8 does: the outputs are quantize_x8 +
 * matvec_q8's to the bit, one launch instead of two. Same arguments, global and local sizes as
 * the 4-bit matvec_q8_qin. */
__kernel __attribute__((reqd_work_group_size(QIN_L, 1, 1))) void
matvec_q8_qin(W_ARGS, int n_in, int n_out, __global const float *x, __global const float *nw,
              float eps, int glu, __global float *y, int y_off, __global const float *res,
              __local int4 *xl, __local float2 *dl)
{
    __local float qred[Q8_WG];
    int lid = get_local_id(0);
    int row = get_group_id(0) * QIN_ROWS + lid / MVQ_WG;
    int lane = lid % MVQ_WG;
    qin_fill(x, n_in, nw, eps, glu, xl, dl, qred);
#if MVQ_WG > 1 && !(MV_PTX && MVQ_WG == 32)
    int slot = lid / MVQ_WG;
    __local float red[MVQ_WG * QIN_ROWS];
#endif
    float acc = 0.0f;
    if (row < n_out)
        KQ8_ROW(acc, lane, n_in / 32, KQ8_T, row, xl, dl);
    q8_row_store(Q8_ROW_SUM(acc), lane, row, n_out, y, y_off, res);
}
#endif
#endif

#endif
