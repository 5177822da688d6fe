/* Weight decoders: each returns four consecutive weights W[o][i..i+3] of a row-major weight
 * (o = output row, i = input column, i a multiple of 4) as float4. The layout prologue that
 * cl-layout.c generates maps READ_W4(o, i) onto one of these, so kernels never index weights
 * themselves. "raw" decoders read GGUF blocks as stored in the file (rowb = bytes per row);
 * "split" decoders read a quant plane (nb = blocks per row) and a float2 (d, m) scale plane,
 * w = d * q + m, so Q4_0 (m = -8d), Q4_1 and Q8_0 (m = 0) share one decoder per storage. */

#define LD_HALF(p) vload_half(0, (const __global half *)(p))

#if defined(MV_CPU) && MV_CPU
/* CPU devices: half.cl's exact integer conversion (scale halves are 2-byte aligned in every
 * block type). */
#undef LD_HALF
#define LD_HALF(p) cpu_half(*(const __global ushort *)(p))
#endif

inline float4 w4_raw_f32(const __global uchar *w, ulong rowb, int o, int i)
{
    return vload4(0, (const __global float *)(w + (ulong)o * rowb) + i);
}

inline float4 w4_raw_f16(const __global uchar *w, ulong rowb, int o, int i)
{
    return vload_half4(0, (const __global half *)(w + (ulong)o * rowb) + i);
}

inline float4 w4_raw_bf16(const __global uchar *w, ulong rowb, int o, int i)
{
    ushort4 u = vload4(0, (const __global ushort *)(w + (ulong)o * rowb) + i);
    return as_float4(convert_uint4(u) << 16);
}

/* Eight consecutive weights W[o][i..i+7] of a raw F16 / BF16 row (i a multiple of 8): matvec's
 * W_RD8, one 16-byte load per work-item and step. */
inline float8 w8_raw_f16(const __global uchar *w, ulong rowb, int o, int i)
{
    return vload_half8(0, (const __global half *)(w + (ulong)o * rowb) + i);
}

inline float8 w8_raw_bf16(const __global uchar *w, ulong rowb, int o, int i)
{
    ushort8 u = vload8(0, (const __global ushort *)(w + (ulong)o * rowb) + i);
    return as_float8(convert_uint8(u) << 16);
}

inline float4 w4_raw_q8_0(const __global uchar *w, ulong rowb, int o, int i)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(i >> 5) * 34;
    char4 q = vload4(0, (const __global char *)(p + 2 + (i & 31)));
    return convert_float4(q) * LD_HALF(p);
}

inline float4 w4_raw_q4_0(const __global uchar *w, ulong rowb, int o, int i)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(i >> 5) * 18;
    int j = i & 31;
    uchar4 b = vload4(0, p + 2 + (j & 15));
    uchar4 q = j < 16 ? (b & (uchar)15) : (b >> (uchar)4);
    return (convert_float4(q) - 8.0f) * LD_HALF(p);
}

/* A whole 4-bit 32-block for GPUs: its 16 quant bytes as a uint4 (byte k: weight k in the low
 * nibble, weight k + 16 in the high one) and (d, m) with w = d q + m. The split plane gives one
 * aligned 16-byte load per block, so a work-item keeps 24 bytes of weights in flight per step;
 * raw Q4_0 blocks are only 2-byte aligned (eight 16-bit loads), raw Q4_1 4-byte aligned. */
inline void q16_raw_q4_0(const __global uchar *w, ulong rowb, int o, int b, uint4 *v, float2 *dm)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 18;
    ushort8 u = vload8(0, (const __global ushort *)(p + 2));
    *v = (uint4)((uint)u.s0 | ((uint)u.s1 << 16), (uint)u.s2 | ((uint)u.s3 << 16),
                 (uint)u.s4 | ((uint)u.s5 << 16), (uint)u.s6 | ((uint)u.s7 << 16));
    float d = LD_HALF(p);
    *dm = (float2)(d, -8.0f * d);
}

inline void q16_raw_q4_1(const __global uchar *w, ulong rowb, int o, int b, uint4 *v, float2 *dm)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 20;
    *v = vload4(0, (const __global uint *)(p + 4));
    *dm = (float2)(LD_HALF(p), LD_HALF(p + 2));
}

inline void q16_split_q4(const __global uchar *q, const __global float2 *s, int nb, int o, int b,
                         uint4 *v, float2 *dm)
{
    ulong blk = (ulong)o * nb + b;
    *v = ((const __global uint4 *)q)[blk];
    *dm = s[blk];
}

/* One word of a 4-bit 32-block for the tensor-core fragments of matmul_mms: quant bytes
 * 4k..4k+3 of row o's block b (weights 4k.. in the low nibbles, 4k + 16.. in the high ones),
 * and (d, m) with w = d q + m for the low nibbles (dm.xy) and the high ones (dm.zw): the same
 * for these types, two sub-blocks' for Q4_K (qw_raw_q4_k). W_QX(b, h) is the input index of
 * the low (h 0) or high (h 1) nibbles' first weight. */
inline void qw_raw_q4_0(const __global uchar *w, ulong rowb, int o, int b, int k, uint *v,
                        float4 *dm)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 18;
    ushort2 u = vload2(0, (const __global ushort *)(p + 2 + 4 * k));
    *v = (uint)u.x | ((uint)u.y << 16);
    float d = LD_HALF(p);
    *dm = (float4)(d, -8.0f * d, d, -8.0f * d);
}

inline void qw_raw_q4_1(const __global uchar *w, ulong rowb, int o, int b, int k, uint *v,
                        float4 *dm)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 20;
    *v = *(const __global uint *)(p + 4 + 4 * k);
    float d = LD_HALF(p), m = LD_HALF(p + 2);
    *dm = (float4)(d, m, d, m);
}

inline void qw_split_q4(const __global uchar *q, const __global float2 *s, int nb, int o, int b,
                        int k, uint *v, float4 *dm)
{
    ulong blk = (ulong)o * nb + b;
    *v = ((const __global uint *)q)[blk * 4 + k];
    float2 f = s[blk];
    *dm = (float4)(f, f);
}

inline float4 w4_raw_q4_1(const __global uchar *w, ulong rowb, int o, int i)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(i >> 5) * 20;
    int j = i & 31;
    uchar4 b = vload4(0, p + 4 + (j & 15));
    uchar4 q = j < 16 ? (b & (uchar)15) : (b >> (uchar)4);
    return convert_float4(q) * LD_HALF(p) + LD_HALF(p + 2);
}

/* Fifth bits of elements j..j+3 of a Q5_0/Q5_1 block: bit j of the little-endian qh. */
inline float4 q5_hi4(const __global uchar *qh, int j)
{
    uint h = (uint)qh[0] | ((uint)qh[1] << 8) | ((uint)qh[2] << 16) | ((uint)qh[3] << 24);
    uint4 b = (uint4)(h >> j, h >> (j + 1), h >> (j + 2), h >> (j + 3)) & 1u;
    return convert_float4(b) * 16.0f;
}

inline float4 w4_raw_q5_0(const __global uchar *w, ulong rowb, int o, int i)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(i >> 5) * 22;
    int j = i & 31;
    uchar4 b = vload4(0, p + 6 + (j & 15));
    uchar4 q = j < 16 ? (b & (uchar)15) : (b >> (uchar)4);
    return (convert_float4(q) + q5_hi4(p + 2, j) - 16.0f) * LD_HALF(p);
}

inline float4 w4_raw_q5_1(const __global uchar *w, ulong rowb, int o, int i)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(i >> 5) * 24;
    int j = i & 31;
    uchar4 b = vload4(0, p + 8 + (j & 15));
    uchar4 q = j < 16 ? (b & (uchar)15) : (b >> (uchar)4);
    return (convert_float4(q) + q5_hi4(p + 4, j)) * LD_HALF(p) + LD_HALF(p + 2);
}

/* Six-bit scale and min of group g (0..7) of a Q4_K/Q5_K block. */
inline float2 k4_scale_min(const __global uchar *s, int g)
{
    uint sc, mn;
    if (g < 4) {
        sc = s[g] & 63;
        mn = s[g + 4] & 63;
    } else {
        sc = (s[g + 4] & 15) | ((s[g - 4] >> 6) << 4);
        mn = (s[g + 4] >> 4) | ((s[g] >> 6) << 4);
    }
    return (float2)((float)sc, (float)mn);
}

/* matmul_mms's words of a raw Q8_0 row (W_QW8): quant bytes 4k..4k+3 (weights 4k..) in *v0 and
 * 16 + 4k.. (weights 16 + 4k..) in *v1 of row o's block b, one signed weight a byte, w = q dm.x
 * + dm.y for *v0's and q dm.z + dm.w for *v1's (here d, 0, d, 0). The block's quants start 2
 * bytes in, so the words are read as halves. */
inline void qw8_raw_q8_0(const __global uchar *w, ulong rowb, int o, int b, int k, uint *v0,
                         uint *v1, float4 *dm)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 34;
    ushort2 u0 = vload2(0, (const __global ushort *)(p + 2 + 4 * k));
    ushort2 u1 = vload2(0, (const __global ushort *)(p + 18 + 4 * k));
    *v0 = (uint)u0.x | ((uint)u0.y << 16);
    *v1 = (uint)u1.x | ((uint)u1.y << 16);
    float d = LD_HALF(p);
    *dm = (float4)(d, 0.0f, d, 0.0f);
}

/* The four high bits x (bits 0..3) as bit 4 of each byte of a word. */
inline uint qw8_hi4(uint x)
{
    return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

/* The same for a raw Q5_0 row (22-byte blocks: d, the 32 high bits qh, 16 quant bytes whose low
 * nibbles are weights 0..15 and high nibbles 16..31): each byte of *v0, *v1 gets its weight's
 * five bits (0..31), w = d q - 16 d. The block's fields start 2 bytes apart, so the words are
 * read as halves. */
inline void qw8_raw_q5_0(const __global uchar *w, ulong rowb, int o, int b, int k, uint *v0,
                         uint *v1, float4 *dm)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 22;
    ushort2 hh = vload2(0, (const __global ushort *)(p + 2));
    ushort2 qq = vload2(0, (const __global ushort *)(p + 6 + 4 * k));
    uint qh = (uint)hh.x | ((uint)hh.y << 16), u = (uint)qq.x | ((uint)qq.y << 16);
    *v0 = (u & 0x0F0F0F0Fu) | qw8_hi4((qh >> (4 * k)) & 15u);
    *v1 = ((u >> 4) & 0x0F0F0F0Fu) | qw8_hi4((qh >> (16 + 4 * k)) & 15u);
    float d = LD_HALF(p);
    *dm = (float4)(d, -16.0f * d, d, -16.0f * d);
}

/* The same for a raw Q5_K row: 32-block b is sub-block j = b % 8 of super-block b / 8 (176
 * bytes: d, dmin, 12 bytes of six-bit scales and mins, qh[32], qs[128]), whose weight l has its
 * low four bits in the low (j even) or high (j odd) nibble of qs[32 (j / 2) + l] and its fifth in
 * bit j of qh[l]; each byte of *v0, *v1 gets one (0..31), w = d sc q - dmin m for both halves. */
inline void qw8_raw_q5_k(const __global uchar *w, ulong rowb, int o, int b, int k, uint *v0,
                         uint *v1, float4 *dm)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(b >> 3) * 176;
    int j = b & 7, ns = 4 * (j & 1);
    const __global uint *qs = (const __global uint *)(p + 48 + 32 * (j >> 1) + 4 * k);
    const __global uint *qh = (const __global uint *)(p + 16 + 4 * k);
    *v0 = ((qs[0] >> ns) & 0x0F0F0F0Fu) | (((qh[0] >> j) & 0x01010101u) << 4);
    *v1 = ((qs[4] >> ns) & 0x0F0F0F0Fu) | (((qh[4] >> j) & 0x01010101u) << 4);
    float2 sm = k4_scale_min(p + 4, j);
    float sc = LD_HALF(p) * sm.x, mn = -LD_HALF(p + 2) * sm.y;
    *dm = (float4)(sc, mn, sc, mn);
}

/* The same for a raw Q6_K row: 32-block b is weights 32 (b % 8).. of super-block b / 8 (210
 * bytes: ql[128], qh[64], 16 scales, d), whose six-bit values sit in the low or high nibbles of
 * 32 ql bytes and in two bits of 32 qh bytes; each byte of *v0, *v1 gets one (0..63), and w =
 * d s q - 32 d s with the sub-block scale s of each half (dm.xy, dm.zw). */
inline void qw8_raw_q6_k(const __global uchar *w, ulong rowb, int o, int b, int k, uint *v0,
                         uint *v1, float4 *dm)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(b >> 3) * 210;
    int bi = b & 7, n = bi >> 2, c = bi & 3;
    const __global ushort *ql = (const __global ushort *)(p + n * 64 + (c & 1) * 32 + 4 * k);
    const __global ushort *qh = (const __global ushort *)(p + 128 + n * 32 + 4 * k);
    uint l0 = (uint)ql[0] | ((uint)ql[1] << 16), l1 = (uint)ql[8] | ((uint)ql[9] << 16);
    uint h0 = (uint)qh[0] | ((uint)qh[1] << 16), h1 = (uint)qh[8] | ((uint)qh[9] << 16);
    int ns = 4 * (c >> 1), hs = 2 * c;
    *v0 = ((l0 >> ns) & 0x0F0F0F0Fu) | (((h0 >> hs) & 0x03030303u) << 4);
    *v1 = ((l1 >> ns) & 0x0F0F0F0Fu) | (((h1 >> hs) & 0x03030303u) << 4);
    const __global char *sc = (const __global char *)(p + 192);
    float d = LD_HALF(p + 208);
    float s0 = d * (float)sc[n * 8 + 2 * c], s1 = d * (float)sc[n * 8 + 2 * c + 1];
    *dm = (float4)(s0, -32.0f * s0, s1, -32.0f * s1);
}

/* matmul_mmq's words of a raw Q4_K row in the inputs' own order (W_QK8N): 32-block b is
 * sub-block j = b % 8 of super-block b / 8, whose weight l sits in the low (j even) or high (j
 * odd) nibble of qs[32 (j / 2) + l]; *v0 gets weights 4k..4k+3 and *v1 16 + 4k.. (0..15 a byte),
 * w = d sc q - dmin m for both halves. */
inline void qw8n_raw_q4_k(const __global uchar *w, ulong rowb, int o, int b, int k, uint *v0,
                          uint *v1, float4 *dm)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(b >> 3) * 144;
    int j = b & 7, ns = 4 * (j & 1);
    const __global uint *qs = (const __global uint *)(p + 16 + 32 * (j >> 1) + 4 * k);
    *v0 = (qs[0] >> ns) & 0x0F0F0F0Fu;
    *v1 = (qs[4] >> ns) & 0x0F0F0F0Fu;
    float2 sm = k4_scale_min(p + 4, j);
    float sc = LD_HALF(p) * sm.x, mn = -LD_HALF(p + 2) * sm.y;
    *dm = (float4)(sc, mn, sc, mn);
}

/* matmul_mms's word of a raw Q4_K row (qw_raw_q4_0 above): its "32-block" b is 16 quant bytes,
 * whose low nibbles are 16 weights of sub-block 2j and whose high nibbles the same 16 of
 * sub-block 2j + 1 (super-block b / 8, j = (b / 2) % 4, the half b % 2), each with its own
 * six-bit scale and min. */
inline void qw_raw_q4_k(const __global uchar *w, ulong rowb, int o, int b, int k, uint *v,
                        float4 *dm)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(b >> 3) * 144;
    int j = (b >> 1) & 3;
    *v = *(const __global uint *)(p + 16 + 32 * j + 16 * (b & 1) + 4 * k);
    float d = LD_HALF(p), dmin = LD_HALF(p + 2);
    float2 s0 = k4_scale_min(p + 4, 2 * j), s1 = k4_scale_min(p + 4, 2 * j + 1);
    *dm = (float4)(d * s0.x, -dmin * s0.y, d * s1.x, -dmin * s1.y);
}

inline float4 w4_raw_q4_k(const __global uchar *w, ulong rowb, int o, int i)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(i >> 8) * 144;
    int j = i & 255, c = j >> 6, r = j & 63, l = r & 31;
    float2 sm = k4_scale_min(p + 4, 2 * c + (r >> 5));
    uchar4 b = vload4(0, p + 16 + 32 * c + l);
    uchar4 q = r < 32 ? (b & (uchar)15) : (b >> (uchar)4);
    return convert_float4(q) * (LD_HALF(p) * sm.x) - LD_HALF(p + 2) * sm.y;
}

inline float4 w4_raw_q5_k(const __global uchar *w, ulong rowb, int o, int i)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(i >> 8) * 176;
    int j = i & 255, c = j >> 6, r = j & 63, l = r & 31, g = 2 * c + (r >> 5);
    float2 sm = k4_scale_min(p + 4, g);
    uchar4 b = vload4(0, p + 48 + 32 * c + l);
    uchar4 q = r < 32 ? (b & (uchar)15) : (b >> (uchar)4);
    uchar4 h = (vload4(0, p + 16 + l) >> (uchar)g) & (uchar)1;
    float4 qf = convert_float4(q) + convert_float4(h) * 16.0f;
    return qf * (LD_HALF(p) * sm.x) - LD_HALF(p + 2) * sm.y;
}

inline float4 w4_raw_q6_k(const __global uchar *w, ulong rowb, int o, int i)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(i >> 8) * 210;
    int j = i & 255, n = j >> 7, r = j & 127, qd = r >> 5, l = r & 31;
    uchar4 b = vload4(0, p + n * 64 + l + (qd & 1) * 32);
    uchar4 lo = qd >= 2 ? (b >> (uchar)4) : (b & (uchar)15);
    uchar4 hi = (vload4(0, p + 128 + n * 32 + l) >> (uchar)(2 * qd)) & (uchar)3;
    float sc = (float)((const __global char *)p)[192 + n * 8 + (l >> 4) + 2 * qd];
    float4 q = convert_float4(lo | (hi << (uchar)4)) - 32.0f;
    return q * (LD_HALF(p + 208) * sc);
}

/* Split planes in buffers: 4-bit quants, 16 bytes per block of 32. */
inline float4 w4_split_q4(const __global uchar *q, const __global float2 *s, int nb, int o, int i)
{
    ulong blk = (ulong)o * nb + (i >> 5);
    int j = i & 31;
    uchar4 b = vload4(0, q + blk * 16 + (j & 15));
    uchar4 v = j < 16 ? (b & (uchar)15) : (b >> (uchar)4);
    float2 dm = s[blk];
    return convert_float4(v) * dm.x + dm.y;
}

/* Split planes in buffers: 8-bit quants, 32 bytes per block of 32. */
inline float4 w4_split_q8(const __global uchar *q, const __global float2 *s, int nb, int o, int i)
{
    ulong blk = (ulong)o * nb + (i >> 5);
    char4 v = vload4(0, (const __global char *)q + blk * 32 + (i & 31));
    float2 dm = s[blk];
    return convert_float4(v) * dm.x + dm.y;
}

#ifdef EBB_IMAGES
/* Split planes with the quant plane viewed as an image1d_buffer of RGBA32UI texels (16 bytes):
 * one texel per 4-bit block, two per 8-bit block. Reads go through the texture path. */
inline float4 w4_img_q4(__read_only image1d_buffer_t q, const __global float2 *s, int nb, int o,
                        int i)
{
    int blk = o * nb + (i >> 5);
    int j = i & 31;
    uint4 t = read_imageui(q, blk);
    int c = (j & 15) >> 2;
    uint word = c == 0 ? t.x : c == 1 ? t.y : c == 2 ? t.z : t.w;
    uchar4 b = as_uchar4(word);
    uchar4 v = j < 16 ? (b & (uchar)15) : (b >> (uchar)4);
    float2 dm = s[blk];
    return convert_float4(v) * dm.x + dm.y;
}

inline float4 w4_img_q8(__read_only image1d_buffer_t q, const __global float2 *s, int nb, int o,
                        int i)
{
    int blk = o * nb + (i >> 5);
    int j = i & 31;
    uint4 t = read_imageui(q, 2 * blk + (j >> 4));
    int c = (j & 15) >> 2;
    uint word = c == 0 ? t.x : c == 1 ? t.y : c == 2 ? t.z : t.w;
    float2 dm = s[blk];
    return convert_float4(as_char4(word)) * dm.x + dm.y;
}
#endif

/* Whole-block dot products for the 32-element block types: sum over block b of row o of
 * W[o][32b + j] * x[32b + j], with x pointing at the token's row. Decoding a block at once
 * (one scale load, one 16- or 32-byte quant load) is what matvec uses when the layout prologue
 * defines W_DOT32. w = d * q + m, so the dot is d * (q . x) + m * sum(x). */
inline float hsum16(float16 v)
{
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    return b.x + b.y + b.z + b.w;
}

inline float dot32_q4(uchar16 q, float d, float m, const __global float *x)
{
    float16 x0 = vload16(0, x), x1 = vload16(0, x + 16);
    float16 s = convert_float16(q & (uchar)15) * x0 + convert_float16(q >> (uchar)4) * x1;
    return d * hsum16(s) + m * hsum16(x0 + x1);
}

inline float dot32_q8(char16 q0, char16 q1, float d, float m, const __global float *x)
{
    float16 x0 = vload16(0, x), x1 = vload16(0, x + 16);
    float16 s = convert_float16(q0) * x0 + convert_float16(q1) * x1;
    return d * hsum16(s) + m * hsum16(x0 + x1);
}

inline float d32_raw_q4_0(const __global uchar *w, ulong rowb, int o, int b,
                          const __global float *x)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 18;
    float d = LD_HALF(p);
    return dot32_q4(vload16(0, p + 2), d, -8.0f * d, x + b * 32);
}

inline float d32_raw_q4_1(const __global uchar *w, ulong rowb, int o, int b,
                          const __global float *x)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 20;
    return dot32_q4(vload16(0, p + 4), LD_HALF(p), LD_HALF(p + 2), x + b * 32);
}

inline float d32_raw_q8_0(const __global uchar *w, ulong rowb, int o, int b,
                          const __global float *x)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 34;
    const __global char *q = (const __global char *)(p + 2);
    return dot32_q8(vload16(0, q), vload16(1, q), LD_HALF(p), 0.0f, x + b * 32);
}

inline float d32_split_q4(const __global uchar *q, const __global float2 *s, int nb, int o, int b,
                          const __global float *x)
{
    ulong blk = (ulong)o * nb + b;
    float2 dm = s[blk];
    return dot32_q4(vload16(0, q + blk * 16), dm.x, dm.y, x + b * 32);
}

inline float d32_split_q8(const __global uchar *q, const __global float2 *s, int nb, int o, int b,
                          const __global float *x)
{
    ulong blk = (ulong)o * nb + b;
    float2 dm = s[blk];
    const __global char *c = (const __global char *)q + blk * 32;
    return dot32_q8(vload16(0, c), vload16(1, c), dm.x, dm.y, x + b * 32);
}

#ifdef EBB_IMAGES
inline float d32_img_q4(__read_only image1d_buffer_t q, const __global float2 *s, int nb, int o,
                        int b, const __global float *x)
{
    int blk = o * nb + b;
    float2 dm = s[blk];
    return dot32_q4(as_uchar16(read_imageui(q, blk)), dm.x, dm.y, x + b * 32);
}

inline float d32_img_q8(__read_only image1d_buffer_t q, const __global float2 *s, int nb, int o,
                        int b, const __global float *x)
{
    int blk = o * nb + b;
    float2 dm = s[blk];
    return dot32_q8(as_char16(read_imageui(q, 2 * blk)), as_char16(read_imageui(q, 2 * blk + 1)),
                    dm.x, dm.y, x + b * 32);
}
#endif

/* Whole-block decode for the tiled matmul (W_DEQ32): block b of row o as two float16 halves
 * (elements 0..15 and 16..31), reused for every token of the tile. */
inline void deq32_q4(uchar16 q, float d, float m, float16 *lo, float16 *hi)
{
    *lo = convert_float16(q & (uchar)15) * d + m;
    *hi = convert_float16(q >> (uchar)4) * d + m;
}

inline void deq32_q8(char16 q0, char16 q1, float d, float m, float16 *lo, float16 *hi)
{
    *lo = convert_float16(q0) * d + m;
    *hi = convert_float16(q1) * d + m;
}

inline void b32_raw_q4_0(const __global uchar *w, ulong rowb, int o, int b, float16 *lo,
                         float16 *hi)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 18;
    float d = LD_HALF(p);
    deq32_q4(vload16(0, p + 2), d, -8.0f * d, lo, hi);
}

inline void b32_raw_q4_1(const __global uchar *w, ulong rowb, int o, int b, float16 *lo,
                         float16 *hi)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 20;
    deq32_q4(vload16(0, p + 4), LD_HALF(p), LD_HALF(p + 2), lo, hi);
}

inline void b32_raw_q8_0(const __global uchar *w, ulong rowb, int o, int b, float16 *lo,
                         float16 *hi)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 34;
    const __global char *q = (const __global char *)(p + 2);
    deq32_q8(vload16(0, q), vload16(1, q), LD_HALF(p), 0.0f, lo, hi);
}

inline void b32_split_q4(const __global uchar *q, const __global float2 *s, int nb, int o, int b,
                         float16 *lo, float16 *hi)
{
    ulong blk = (ulong)o * nb + b;
    float2 dm = s[blk];
    deq32_q4(vload16(0, q + blk * 16), dm.x, dm.y, lo, hi);
}

inline void b32_split_q8(const __global uchar *q, const __global float2 *s, int nb, int o, int b,
                         float16 *lo, float16 *hi)
{
    ulong blk = (ulong)o * nb + b;
    float2 dm = s[blk];
    const __global char *c = (const __global char *)q + blk * 32;
    deq32_q8(vload16(0, c), vload16(1, c), dm.x, dm.y, lo, hi);
}

#ifdef EBB_IMAGES
inline void b32_img_q4(__read_only image1d_buffer_t q, const __global float2 *s, int nb, int o,
                       int b, float16 *lo, float16 *hi)
{
    int blk = o * nb + b;
    float2 dm = s[blk];
    deq32_q4(as_uchar16(read_imageui(q, blk)), dm.x, dm.y, lo, hi);
}

inline void b32_img_q8(__read_only image1d_buffer_t q, const __global float2 *s, int nb, int o,
                       int b, float16 *lo, float16 *hi)
{
    int blk = o * nb + b;
    float2 dm = s[blk];
    deq32_q8(as_char16(read_imageui(q, 2 * blk)), as_char16(read_imageui(q, 2 * blk + 1)), dm.x,
             dm.y, lo, hi);
}
#endif

/* Whole 32-element decode for the raw Q5_0 and K-quant blocks (b counts 32-element groups
 * along the row: for the K-quants group b & 7 of super-block b >> 3). */
inline void b32_raw_q5_0(const __global uchar *w, ulong rowb, int o, int b, float16 *lo,
                         float16 *hi)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)b * 22;
    uint h = (uint)p[2] | ((uint)p[3] << 8) | ((uint)p[4] << 16) | ((uint)p[5] << 24);
    const uint16 sh = (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    uchar16 q = vload16(0, p + 6);
    float d = LD_HALF(p);
    float16 h0 = convert_float16(((uint16)(h) >> sh) & 1u);
    float16 h1 = convert_float16(((uint16)(h >> 16) >> sh) & 1u);
    *lo = (convert_float16(q & (uchar)15) + h0 * 16.0f - 16.0f) * d;
    *hi = (convert_float16(q >> (uchar)4) + h1 * 16.0f - 16.0f) * d;
}

inline void b32_raw_q4_k(const __global uchar *w, ulong rowb, int o, int b, float16 *lo,
                         float16 *hi)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(b >> 3) * 144;
    int g = b & 7, c = g >> 1;
    float2 sm = k4_scale_min(p + 4, g);
    uchar16 q0 = vload16(0, p + 16 + 32 * c), q1 = vload16(1, p + 16 + 32 * c);
    uchar s = (uchar)((g & 1) * 4);
    float d = LD_HALF(p) * sm.x, m = LD_HALF(p + 2) * sm.y;
    *lo = convert_float16((q0 >> s) & (uchar)15) * d - m;
    *hi = convert_float16((q1 >> s) & (uchar)15) * d - m;
}

inline void b32_raw_q5_k(const __global uchar *w, ulong rowb, int o, int b, float16 *lo,
                         float16 *hi)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(b >> 3) * 176;
    int g = b & 7, c = g >> 1;
    float2 sm = k4_scale_min(p + 4, g);
    uchar16 q0 = vload16(0, p + 48 + 32 * c), q1 = vload16(1, p + 48 + 32 * c);
    uchar16 h0 = (vload16(0, p + 16) >> (uchar)g) & (uchar)1;
    uchar16 h1 = (vload16(1, p + 16) >> (uchar)g) & (uchar)1;
    uchar s = (uchar)((g & 1) * 4);
    float d = LD_HALF(p) * sm.x, m = LD_HALF(p + 2) * sm.y;
    *lo = convert_float16(((q0 >> s) & (uchar)15) | (h0 << (uchar)4)) * d - m;
    *hi = convert_float16(((q1 >> s) & (uchar)15) | (h1 << (uchar)4)) * d - m;
}

inline void b32_raw_q6_k(const __global uchar *w, ulong rowb, int o, int b, float16 *lo,
                         float16 *hi)
{
    const __global uchar *p = w + (ulong)o * rowb + (ulong)(b >> 3) * 210;
    int g = b & 7, n = g >> 2, qd = g & 3;
    const __global uchar *ql = p + n * 64 + (qd & 1) * 32, *qh = p + 128 + n * 32;
    uchar s = (uchar)(qd >= 2 ? 4 : 0), hs = (uchar)(2 * qd);
    uchar16 l0 = (vload16(0, ql) >> s) & (uchar)15, l1 = (vload16(1, ql) >> s) & (uchar)15;
    uchar16 h0 = (vload16(0, qh) >> hs) & (uchar)3, h1 = (vload16(1, qh) >> hs) & (uchar)3;
    const __global char *sc = (const __global char *)p + 192 + n * 8 + 2 * qd;
    float d = LD_HALF(p + 208);
    *lo = (convert_float16(l0 | (h0 << (uchar)4)) - 32.0f) * (d * (float)sc[0]);
    *hi = (convert_float16(l1 | (h1 << (uchar)4)) - 32.0f) * (d * (float)sc[1]);
}

#ifdef EBB_IMAGES2D
/* Split planes in two image2d objects (cl-weight.c places them): the quant plane as RGBA32UI
 * texels (one per 4-bit block, two per 8-bit block, tpr texels per weight row) and the scale
 * plane as RGBA half texels holding (d, m) of two consecutive blocks of a row (ceil(nb / 2)
 * texels per row). Where a plane is exactly tpr texels wide, weight row o is image row o; a
 * plane R * tpr wide holds R weight rows side by side (tall matrices: embeddings, output heads);
 * a plane narrower than tpr wraps each weight row over ceil(tpr / width) image rows, padded. */
inline int2 i2d_pos(int w, int tpr, int o, int t)
{
    if (w == tpr)
        return (int2)(t, o);
    uint pitch = w > tpr ? (uint)tpr : (uint)((tpr + w - 1) / w * w);
    uint l = (uint)o * pitch + (uint)t;
    return (int2)((int)(l % (uint)w), (int)(l / (uint)w));
}

inline uint4 i2d_q(__read_only image2d_t q, int tpr, int o, int t)
{
    return read_imageui(q, i2d_pos(get_image_width(q), tpr, o, t));
}

/* (d, m) of block b of row o (nb blocks per row). */
inline float2 i2d_dm(__read_only image2d_t s, int nb, int o, int b)
{
    float4 v = read_imagef(s, i2d_pos(get_image_width(s), (nb + 1) >> 1, o, b >> 1));
    return (b & 1) ? v.zw : v.xy;
}

inline float4 w4_i2d_q4(__read_only image2d_t q, __read_only image2d_t s, int nb, int o, int i)
{
    int b = i >> 5, j = i & 31;
    uint4 t = i2d_q(q, nb, o, b);
    int c = (j & 15) >> 2;
    uint word = c == 0 ? t.x : c == 1 ? t.y : c == 2 ? t.z : t.w;
    uchar4 u = as_uchar4(word);
    uchar4 v = j < 16 ? (u & (uchar)15) : (u >> (uchar)4);
    float2 dm = i2d_dm(s, nb, o, b);
    return convert_float4(v) * dm.x + dm.y;
}

inline float4 w4_i2d_q8(__read_only image2d_t q, __read_only image2d_t s, int nb, int o, int i)
{
    int b = i >> 5, j = i & 31;
    uint4 t = i2d_q(q, 2 * nb, o, 2 * b + (j >> 4));
    int c = (j & 15) >> 2;
    uint word = c == 0 ? t.x : c == 1 ? t.y : c == 2 ? t.z : t.w;
    float2 dm = i2d_dm(s, nb, o, b);
    return convert_float4(as_char4(word)) * dm.x + dm.y;
}

inline float d32_i2d_q4(__read_only image2d_t q, __read_only image2d_t s, int nb, int o, int b,
                        const __global float *x)
{
    float2 dm = i2d_dm(s, nb, o, b);
    return dot32_q4(as_uchar16(i2d_q(q, nb, o, b)), dm.x, dm.y, x + b * 32);
}

inline float d32_i2d_q8(__read_only image2d_t q, __read_only image2d_t s, int nb, int o, int b,
                        const __global float *x)
{
    float2 dm = i2d_dm(s, nb, o, b);
    return dot32_q8(as_char16(i2d_q(q, 2 * nb, o, 2 * b)),
                    as_char16(i2d_q(q, 2 * nb, o, 2 * b + 1)), dm.x, dm.y, x + b * 32);
}

inline void b32_i2d_q4(__read_only image2d_t q, __read_only image2d_t s, int nb, int o, int b,
                       float16 *lo, float16 *hi)
{
    float2 dm = i2d_dm(s, nb, o, b);
    deq32_q4(as_uchar16(i2d_q(q, nb, o, b)), dm.x, dm.y, lo, hi);
}

inline void b32_i2d_q8(__read_only image2d_t q, __read_only image2d_t s, int nb, int o, int b,
                       float16 *lo, float16 *hi)
{
    float2 dm = i2d_dm(s, nb, o, b);
    deq32_q8(as_char16(i2d_q(q, 2 * nb, o, 2 * b)), as_char16(i2d_q(q, 2 * nb, o, 2 * b + 1)),
             dm.x, dm.y, lo, hi);
}
#endif
