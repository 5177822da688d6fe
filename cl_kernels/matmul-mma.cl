/* Prefill's and batched decode's weight products on tensor cores (NVIDIA through inline PTX
 * mma.sync after the start-up probe; a portable stand-in elsewhere, which the kernel tests run):
 * matmul_mma and matmul_mmb (GEMM tiles staged as halves), matmul_mms (4-bit and 8-bit weights
 * loaded straight into fragments, a few token rows) and moe_group_mms (matmul_mms's tile over
 * moe.cl's tiles of expert pairs), matmul_mmq (matmul_mms's tile on 8-bit inputs, int8
 * products) and its mmq_quantize. Built after matvec.cl and matmul.cl in the weight program,
 * with mma.cl's fragments and q8.cl's rounding. Options:
 *   MM_MMA 1: these kernels are built (tuning mm_mma)
 *   MMQ    1: with MM_MMA and the word accessors, matmul_mmq and mmq_quantize (tuning mmq). */

#ifndef MM_MMA
#define MM_MMA 0
#endif
#ifndef MMQ
#define MMQ 0
#endif
#ifndef MQ_I2F
#define MQ_I2F 0
#endif
#ifndef MQ_JIT
#define MQ_JIT 0
#endif

/* Integers to floats without the conversion instruction, which NVIDIA's published tables put at
 * a fraction of the float adds' rate (with MQ_I2F, EBB_CL_MMQ_I2F, off: on an H200 it made 8B
 * prefill 4.5-12% slower, docs/PERFORMANCE.md; the same bits either way, test-kernels checks
 * both helpers over all their inputs). mq_i2f: (float)c, exactly, for |c| < 2^22: c
 * added to the bits of 1.5 x 2^23 (whose last place is 1) is that float plus c, and taking 1.5 x
 * 2^23 away again leaves c with no rounding (the int8 products' int32 sums stay below 2^20: 32 x
 * 128 x 127). ms_s8f: the four signed bytes of v as floats (convert_float4(as_char4(v))), each
 * byte plus 128 put into the low bits of 2^23 and 2^23 + 128 taken away. MQ_F and MS_S8F take
 * them with MQ_I2F: mq_frag's sums (matmul_mmq, matmul_mmql, moe_group_mmql), matmul_mmql's
 * staged K-quant scales and matmul_mms's byte-wide weights (W_QW8). */
inline float mq_i2f(int c)
{
    return as_float(c + 0x4B400000) - 12582912.0f;
}
inline float4 ms_s8f(uint v)
{
    uint u = v ^ 0x80808080u;
    return as_float4((uint4)(u & 0xFFu, (u >> 8) & 0xFFu, (u >> 16) & 0xFFu, u >> 24) |
                     0x4B000000u) -
           8388736.0f;
}
#if MQ_I2F
#define MQ_F(c) mq_i2f(c)
#define MS_S8F(v) ms_s8f(v)
#else
#define MQ_F(c) ((float)(c))
#define MS_S8F(v) convert_float4(as_char4(v))
#endif

#if MM_MMA
/* Prefill on tensor cores (NVIDIA, after the start-up probe): a tile of MA_R rows x MA_T tokens
 * (64 or 128 each), MA_K inputs per step: each step the weights, decoded through READ_W4, and
 * the tokens' inputs are staged in local memory as halves (rows of MA_KP: MA_K halves and 8 of
 * padding, which spreads a warp's fragment loads over the banks), then each of the 8 warps
 * (4 x 2) multiplies MA_R / 4 rows by MA_T / 2 tokens with mma.sync m16n8k16 (f16 inputs, f32
 * accumulation; mma.cl has the fragment layouts). With MA_PF the next step's global loads are
 * issued into registers before this step's products, so their latency hides behind them. The
 * tuning picks the shape (ebb_cl_tuning_for). Without MV_PTX the same tiles are added up from the
 * staged halves one by one: the kernel tests run that on CPUs. Same arguments and result
 * (within f16 rounding of the inputs) as matmul_gemm. Global size
 * (256 * ceil(n_out / MA_R), ceil(n_tok / MA_T)), local (256, 1). */
#ifndef MA_R
#define MA_R 64
#endif
#ifndef MA_T
#define MA_T 64
#endif
#ifndef MA_K
#define MA_K 32
#endif
#ifndef MA_PF
#define MA_PF 0
#endif
/* Shared by matmul_mma and matmul_mmb. A warp's outputs, acc[i][j][e] of its (MA_R / 64) x
 * (MA_T / 16) fragments (row rw + 16 i + g (+ 8), token tw + 8 j + 2 q (+ 1)), of the
 * work-group's tile at row0, t0. MMA_STANDIN: without PTX, their products over the staged
 * halves wh, xh (rows of KP halves, K inputs) computed directly, the tests' stand-in for
 * mma.sync on CPUs. MMA_STORE: written to y with the residual added. */
#define MMA_STANDIN(acc, wh, xh, KP, K)                                                            \
    do {                                                                                           \
        for (int i_ = 0; i_ < MA_R / 64; i_++)                                                     \
            for (int j_ = 0; j_ < MA_T / 16; j_++)                                                 \
                for (int e_ = 0; e_ < 4; e_++) {                                                   \
                    int r_ = rw + i_ * 16 + g + (e_ >> 1) * 8;                                     \
                    int t_ = tw + j_ * 8 + 2 * q + (e_ & 1);                                       \
                    float s_ = 0.0f;                                                               \
                    for (int k_ = 0; k_ < (K); k_++)                                               \
                        s_ += vload_half(r_ * (KP) + k_, wh) * vload_half(t_ * (KP) + k_, xh);     \
                    acc[i_][j_][e_] += s_;                                                         \
                }                                                                                  \
    } while (0)
#define MMA_ZERO(acc, MI, NJ)                                                                      \
    do {                                                                                           \
        _Pragma("unroll")                                                                          \
        for (int i_ = 0; i_ < (MI); i_++)                                                          \
            _Pragma("unroll")                                                                      \
            for (int j_ = 0; j_ < (NJ); j_++)                                                      \
                _Pragma("unroll")                                                                  \
                for (int e_ = 0; e_ < 4; e_++)                                                     \
                    acc[i_][j_][e_] = 0.0f;                                                        \
    } while (0)
#define MMA_STORE(acc)                                                                             \
    do {                                                                                           \
        _Pragma("unroll")                                                                          \
        for (int i_ = 0; i_ < MA_R / 64; i_++)                                                     \
            _Pragma("unroll")                                                                      \
            for (int j_ = 0; j_ < MA_T / 16; j_++)                                                 \
                _Pragma("unroll")                                                                  \
                for (int e_ = 0; e_ < 4; e_++) {                                                   \
                    int row_ = row0 + rw + i_ * 16 + g + (e_ >> 1) * 8;                            \
                    int t_ = t0 + tw + j_ * 8 + 2 * q + (e_ & 1);                                  \
                    if (row_ < n_out && t_ < n_tok) {                                              \
                        float v_ = acc[i_][j_][e_];                                                \
                        if (res)                                                                   \
                            v_ += res[(size_t)t_ * y_ld + y_off + row_];                           \
                        WRITE_Y(y, t_, y_off + row_, v_);                                          \
                    }                                                                              \
                }                                                                                  \
    } while (0)
#define MA_KP (MA_K + 8)                  /* halves per staged row */
#define MA_MI (MA_R / 64)                 /* 16-row fragments per warp */
#define MA_NJ (MA_T / 16)                 /* 8-token fragments per warp */
#define MA_WN (MA_R * (MA_K / 4) / 256)   /* weight float4s each work-item stages per step */
#define MA_XN (MA_T * (MA_K / 4) / 256)   /* input float4s each work-item stages per step */
/* Loads the step at k0 into the work-item's registers (zeros past n_in). */
#define MA_LOAD(k0)                                                                              \
    do {                                                                                         \
        for (int u = 0; u < MA_WN; u++) {                                                        \
            int e = lid + u * 256, r = e / (MA_K / 4), i = (e % (MA_K / 4)) * 4;                 \
            wr[u] = (k0) + i < n_in ? READ_W4(min(row0 + r, n_out - 1), (k0) + i)               \
                                    : (float4)(0.0f);                                            \
        }                                                                                        \
        for (int u = 0; u < MA_XN; u++) {                                                        \
            int e = lid + u * 256, t = e / (MA_K / 4), i = (e % (MA_K / 4)) * 4;                 \
            xr[u] = (k0) + i < n_in ? READ_X4(x, min(t0 + t, n_tok - 1), (k0) + i)              \
                                    : (float4)(0.0f);                                            \
        }                                                                                        \
    } while (0)
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void
matmul_mma(W_ARGS, int n_in, int n_out, __global const float *x, int x_ld, __global float *y,
           int y_ld, int y_off, __global const float *res, int n_tok)
{
    __local uint ws[MA_R * MA_KP / 2]; /* half W[row0 + r][k0 + k] at r * MA_KP + k */
    __local uint xs[MA_T * MA_KP / 2]; /* half x[t0 + t][k0 + k] at t * MA_KP + k */
    __local half *wh = (__local half *)ws, *xh = (__local half *)xs;
    int lid = get_local_id(0);
    int row0 = get_group_id(0) * MA_R, t0 = get_group_id(1) * MA_T;
    int warp = lid / 32, lane = lid % 32, g = lane >> 2, q = lane & 3;
    int rw = (warp & 3) * (MA_R / 4), tw = (warp >> 2) * (MA_T / 2); /* the warp's rows, tokens */
    float acc[MA_MI][MA_NJ][4];
    float4 wr[MA_WN], xr[MA_XN];
    MMA_ZERO(acc, MA_MI, MA_NJ);
#if MA_PF
    MA_LOAD(0);
#endif
    for (int k0 = 0; k0 < n_in; k0 += MA_K) {
#if !MA_PF
        MA_LOAD(k0);
#endif
        for (int u = 0; u < MA_WN; u++) {
            int e = lid + u * 256;
            vstore_half4_rte(wr[u], 0, wh + (e / (MA_K / 4)) * MA_KP + (e % (MA_K / 4)) * 4);
        }
        for (int u = 0; u < MA_XN; u++) {
            int e = lid + u * 256;
            vstore_half4_rte(xr[u], 0, xh + (e / (MA_K / 4)) * MA_KP + (e % (MA_K / 4)) * 4);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if MA_PF
        if (k0 + MA_K < n_in)
            MA_LOAD(k0 + MA_K); /* the next step's loads fly while the tensor cores work */
#endif
#if MV_PTX
        for (int kk = 0; kk < MA_K; kk += 16) {
            int ka = kk / 2 + q; /* the register of halves kk + 2q, kk + 2q + 1 */
            uint a[MA_MI][4];
            for (int i = 0; i < MA_MI; i++) {
                int r = rw + i * 16 + g;
                a[i][0] = ws[r * (MA_KP / 2) + ka];
                a[i][1] = ws[(r + 8) * (MA_KP / 2) + ka];
                a[i][2] = ws[r * (MA_KP / 2) + ka + 4];
                a[i][3] = ws[(r + 8) * (MA_KP / 2) + ka + 4];
            }
            for (int j = 0; j < MA_NJ; j++) {
                int n = tw + j * 8 + g;
                uint b0 = xs[n * (MA_KP / 2) + ka], b1 = xs[n * (MA_KP / 2) + ka + 4];
                for (int i = 0; i < MA_MI; i++)
                    mma_f16(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b0, b1);
            }
        }
#else
        MMA_STANDIN(acc, wh, xh, MA_KP, MA_K);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    MMA_STORE(acc);
}
#endif

#if MM_MMA
/* matmul_mmb: matmul_mma's product reorganised for fewer instructions per tensor-core product
 * (tuning mma_v = 2). A work-group of 8 warps computes MA_R rows x MA_T tokens (64 or 128
 * rows, 32..128 tokens) in steps of MB_K inputs (one or two 32-blocks: MA_K 32, or 64 and
 * more), the warps 4 (rows) x 2 (tokens), so a warp holds (MA_R / 4) x (MA_T / 2) outputs.
 * Local memory holds two steps (double buffered: one barrier a step), and the next step's
 * global loads fly during this step's products. Split 4-bit planes (W_SPLIT4) and the inputs
 * are read with vector loads from pointers set up once; with PTX, nibbles become halves by
 * byte permutes and one f16x2 multiply-add per pair (exact: d and m are halves in the file,
 * q - 8 a small integer); other 4-bit layouts come through W_Q16, the rest through READ_W4. */
#if MA_K >= 64
#define MB_K 64
#else
#define MB_K 32
#endif
#define MB_KB (MB_K / 32)      /* 32-blocks a step */
#define MB_KP (MB_K + 8)       /* halves per staged row, 8 of padding (conflict-free) */
#define MB_KW (MB_KP / 2)      /* the same in words */
#define MB_MI (MA_R / 64)      /* 16-row fragments per warp */
#define MB_NJ (MA_T / 16)      /* 8-token fragments per warp */
#define MB_TPR (256 / MA_R)    /* work-items staging one weight row's block (2 or 4) */
#define MB_EW (32 / MB_TPR)    /* elements of a block each stages (16 or 8) */
#define MB_TPT (256 / MA_T)    /* work-items staging one token row's block */
#define MB_EX (32 / MB_TPT)    /* inputs of a block each stages (16, 8 or 4) */

#if MV_PTX
inline uint mb_prmt(uint a, uint b, uint sel)
{
    uint d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

/* Two halves (lo: element 2i, hi: 2i + 1) of a * d + m from nibble pairs n (as half2 1024 + q). */
inline uint mb_deq2(uint n, uint d2, uint m2)
{
    uint q, w;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(q) : "r"(n), "r"(0x64006400u));
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(w) : "r"(q), "r"(d2), "r"(m2));
    return w;
}

/* The halves of a 4-bit word v's low nibbles as d q + m (lo0: bytes 0, 1; lo1: bytes 2, 3) and
 * of its high nibbles as e q + n (hi0, hi1); d2, m2, e2, n2 are half2 pairs of one value. */
#define MB_DEQ_WORD(v, d2, m2, e2, n2, lo0, lo1, hi0, hi1)                                         \
    do {                                                                                           \
        uint l_ = (v) & 0x0F0F0F0Fu, h_ = ((v) >> 4) & 0x0F0F0F0Fu;                                \
        lo0 = mb_deq2(mb_prmt(l_, 0x64646464u, 0x5140u), (d2), (m2));                              \
        lo1 = mb_deq2(mb_prmt(l_, 0x64646464u, 0x7362u), (d2), (m2));                              \
        hi0 = mb_deq2(mb_prmt(h_, 0x64646464u, 0x5140u), (e2), (n2));                              \
        hi1 = mb_deq2(mb_prmt(h_, 0x64646464u, 0x7362u), (e2), (n2));                              \
    } while (0)

inline uint mb_h2(float lo, float hi)
{
    uint d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
#endif

inline uint mb_word(uint4 v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void
matmul_mmb(W_ARGS, int n_in, int n_out, __global const float *x, int x_ld, __global float *y,
           int y_ld, int y_off, __global const float *res, int n_tok)
{
    __local uint ws[2][MA_R * MB_KW]; /* halves W[row0 + r][k0 + k] at r * MB_KP + k */
    __local uint xs[2][MA_T * MB_KW]; /* halves x[t0 + t][k0 + k] at t * MB_KP + k */
    int lid = get_local_id(0);
    int row0 = get_group_id(0) * MA_R, t0 = get_group_id(1) * MA_T;
    int warp = lid / 32, lane = lid % 32, g = lane >> 2, q = lane & 3;
    int rw = (warp & 3) * (MA_R / 4), tw = (warp >> 2) * (MA_T / 2);
    /* What this work-item stages of each block: weight row wr, elements we..; token row xr,
     * inputs xe.. */
    int wr = lid / MB_TPR, we = (lid % MB_TPR) * MB_EW;
    int xr = lid / MB_TPT, xe = (lid % MB_TPT) * MB_EX;
    int wrow = min(row0 + wr, n_out - 1), xtok = min(t0 + xr, n_tok - 1), nb = n_in / 32;
    float acc[MB_MI][MB_NJ][4];
    MMA_ZERO(acc, MB_MI, MB_NJ);
#if defined(W_SPLIT4) || defined(W_Q16)
    /* Block b's quant bytes: byte k holds element k (low nibble) and k + 16 (high). This
     * work-item's MB_EW / 8 words of each block hold elements we / 2.. and 16 + we / 2.. */
    uint qv[MB_KB][MB_EW / 8];
    float2 dm[MB_KB];
#endif
#if defined(W_SPLIT4)
    /* Split 4-bit planes in buffers: this row's quant words (4 a block) and (d, m) pairs, read
     * with vector loads from pointers set up once (the generic accessors' per-element address
     * arithmetic and byte loads were most of matmul_mma's instructions). Blocks past n_in are
     * zeros (d = m = 0). */
    const __global uint *wq = (const __global uint *)w_a + (size_t)wrow * nb * 4 + we / 8;
    const __global float2 *wdm = w_b + (size_t)wrow * nb;
#if MB_EW == 16
#define MB_LOADW1(b, kb)                                                                           \
    do {                                                                                           \
        uint2 w2_ = (b) < nb ? *(const __global uint2 *)(wq + (b) * 4) : (uint2)(0);               \
        qv[kb][0] = w2_.x;                                                                         \
        qv[kb][1] = w2_.y;                                                                         \
        dm[kb] = (b) < nb ? wdm[b] : (float2)(0.0f);                                               \
    } while (0)
#else
#define MB_LOADW1(b, kb)                                                                           \
    do {                                                                                           \
        qv[kb][0] = (b) < nb ? wq[(b) * 4] : 0u;                                                   \
        dm[kb] = (b) < nb ? wdm[b] : (float2)(0.0f);                                               \
    } while (0)
#endif
#elif defined(W_Q16)
#define MB_LOADW1(b, kb)                                                                           \
    do {                                                                                           \
        uint4 v_ = (uint4)(0);                                                                     \
        float2 dm_ = (float2)(0.0f);                                                               \
        if ((b) < nb)                                                                              \
            W_Q16(wrow, (b), &v_, &dm_);                                                           \
        dm[kb] = dm_;                                                                              \
        _Pragma("unroll")                                                                          \
        for (int u = 0; u < MB_EW / 8; u++)                                                        \
            qv[kb][u] = mb_word(v_, we / 8 + u);                                                   \
    } while (0)
#else
    float4 wv[MB_KB][MB_EW / 4];
#define MB_LOADW1(b, kb)                                                                           \
    do {                                                                                           \
        _Pragma("unroll")                                                                          \
        for (int u = 0; u < MB_EW / 4; u++)                                                        \
            wv[kb][u] = (b) * 32 + we + 4 * u < n_in ? READ_W4(wrow, (b) * 32 + we + 4 * u)        \
                                                      : (float4)(0.0f);                            \
    } while (0)
#endif
    float4 xv[MB_KB][MB_EX / 4];
    /* The token row as float4s (rows of x_ld floats, a multiple of 4, from the buffer's start:
     * 16-byte aligned), so that each is one vector load. */
    const __global float4 *xp = (const __global float4 *)(x + (size_t)xtok * x_ld + xe);
#define MB_LOAD(k0)                                                                                \
    do {                                                                                           \
        _Pragma("unroll")                                                                          \
        for (int kb = 0; kb < MB_KB; kb++) {                                                       \
            int b_ = (k0) / 32 + kb;                                                               \
            MB_LOADW1(b_, kb);                                                                     \
            _Pragma("unroll")                                                                      \
            for (int u = 0; u < MB_EX / 4; u++)                                                    \
                xv[kb][u] = b_ * 32 + xe + 4 * u < n_in ? xp[b_ * 8 + u] : (float4)(0.0f);         \
        }                                                                                          \
    } while (0)
    MB_LOAD(0);
    for (int k0 = 0, s = 0; k0 < n_in; k0 += MB_K, s ^= 1) {
        /* Stage this step's registers into buffer s, block kb at halves kb * 32 of each row. */
#pragma unroll
        for (int kb = 0; kb < MB_KB; kb++) {
            __local uint *wl = ws[s] + wr * MB_KW + kb * 16, *xl = xs[s] + xr * MB_KW + kb * 16;
#if (defined(W_SPLIT4) || defined(W_Q16)) && MV_PTX
            uint d2 = mb_h2(dm[kb].x, dm[kb].x), m2 = mb_h2(dm[kb].y, dm[kb].y);
#pragma unroll
            for (int u = 0; u < MB_EW / 8; u++) {
                int e = we / 2 + 4 * u; /* element of the word's first byte */
                uint2 l2, h2;
                MB_DEQ_WORD(qv[kb][u], d2, m2, d2, m2, l2.x, l2.y, h2.x, h2.y);
                vstore2(l2, 0, wl + e / 2);
                vstore2(h2, 0, wl + (16 + e) / 2);
            }
#elif defined(W_SPLIT4) || defined(W_Q16)
            __local half *wh = (__local half *)wl;
#pragma unroll
            for (int u = 0; u < MB_EW / 8; u++) {
                uchar4 bq = as_uchar4(qv[kb][u]);
                int e = we / 2 + 4 * u;
                vstore_half4_rte(convert_float4(bq & (uchar)15) * dm[kb].x + dm[kb].y, 0, wh + e);
                vstore_half4_rte(convert_float4(bq >> (uchar)4) * dm[kb].x + dm[kb].y, 0,
                                 wh + 16 + e);
            }
#else
#pragma unroll
            for (int u = 0; u < MB_EW / 4; u++)
                vstore_half4_rte(wv[kb][u], 0, (__local half *)wl + we + 4 * u);
#endif
#if MV_PTX
#pragma unroll
            for (int u = 0; u < MB_EX / 4; u++)
                vstore2((uint2)(mb_h2(xv[kb][u].x, xv[kb][u].y), mb_h2(xv[kb][u].z, xv[kb][u].w)),
                        0, xl + (xe + 4 * u) / 2);
#else
#pragma unroll
            for (int u = 0; u < MB_EX / 4; u++)
                vstore_half4_rte(xv[kb][u], 0, (__local half *)xl + xe + 4 * u);
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + MB_K < n_in) /* the next step's loads fly during this step's products */
            MB_LOAD(k0 + MB_K);
        const __local uint *wsb = ws[s], *xsb = xs[s];
#if MV_PTX
#pragma unroll
        for (int kk = 0; kk < MB_K; kk += 16) {
            int ka = kk / 2 + q;
            uint a[MB_MI][4];
#pragma unroll
            for (int i = 0; i < MB_MI; i++) {
                int r = rw + i * 16 + g;
                a[i][0] = wsb[r * MB_KW + ka];
                a[i][1] = wsb[(r + 8) * MB_KW + ka];
                a[i][2] = wsb[r * MB_KW + ka + 4];
                a[i][3] = wsb[(r + 8) * MB_KW + ka + 4];
            }
#pragma unroll
            for (int j = 0; j < MB_NJ; j++) {
                int n = tw + j * 8 + g;
                uint b0 = xsb[n * MB_KW + ka], b1 = xsb[n * MB_KW + ka + 4];
#pragma unroll
                for (int i = 0; i < MB_MI; i++)
                    MMA_F16(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b0, b1);
            }
        }
#else
        {
            const __local half *wh = (const __local half *)wsb, *xh = (const __local half *)xsb;
            MMA_STANDIN(acc, wh, xh, MB_KP, MB_K);
        }
#endif
    }
    MMA_STORE(acc);
}
#undef MB_LOADW1
#undef MB_LOAD
#endif

#if MM_MMA && (defined(W_QW) || defined(W_QW8))
/* matmul_mms: products of a few token rows (continuous batching's decode steps, 2..MS_T tokens
 * a work-group) on tensor cores, each weight read once for the work-group's tokens. A work-group
 * of MS_W warps takes 16 MS_MI rows and MS_T tokens; the warps split the inputs (warp w takes
 * MS_KB 32-blocks from MS_KB w, then from MS_KB (w + MS_W), ...), so that a product of few
 * rows still has enough warps in flight to keep the memory busy, and their partial sums meet in local
 * memory at the end (halving rounds). No staging: each work-item loads the weight words of its
 * own fragments (W_QW) and its tokens' inputs straight into registers. The trick that allows
 * it: a product is a sum over k, so the tensor core's k order may be any permutation applied to
 * both operands. Lane (g, q) loads quant bytes 4q..4q+3 of rows g and g + 8, which hold weights
 * 4q..4q+3 (low nibbles) and 16 + 4q.. (high); PTX's fragment layout (mma.cl) gives the lane
 * k = 2q, 2q + 1, 2q + 8, 2q + 9 of each 16-wide half, so those k are taken to mean weights
 * 4q..4q+3 (first half) and 16 + 4q.. (second), and the B fragment's inputs follow the same
 * map: one float4 of the token's row per half (inputs 4q..4q+3 as b0 = (4q, 4q + 1),
 * b1 = (4q + 2, 4q + 3)). Without PTX (the tests on CPUs) each work-item computes its fragment
 * elements directly from whole blocks. Byte-wide weights (raw Q8_0 and Q6_K, W_QW8) take two
 * words a lane, the bytes of weights 4q..4q+3 and 16 + 4q.., which fill the same fragment
 * places, a weight a byte. Same arguments and result (within f16 rounding) as
 * matmul. Global size (32 MS_W ceil(n_out / (16 MS_MI)), ceil(n_tok / MS_T)), local
 * (32 MS_W, 1). */
#ifndef MS_T
#define MS_T 32
#endif
#ifndef MS_MI
#define MS_MI 1
#endif
#ifndef MS_W
#define MS_W 8
#endif
#ifndef MS_KB
#define MS_KB 2 /* 32-blocks a warp loads at once */
#endif
#define MS_NJ (MS_T / 8)  /* 8-token fragments */
#if defined(W_QW8)
#define MS_NV 2 /* quant words a lane loads for a row and block */
#else
#define MS_NV 1
#endif
#define MS_R (16 * MS_MI) /* rows of a work-group */
#if !MV_PTX
/* f rounded to the nearest f16 (ties to even), for the stand-in. */
inline float ms_f16(float f)
{
    float a = fabs(f);
    if (a == 0.0f || a >= 65520.0f)
        return a == 0.0f ? f : copysign(INFINITY, f);
    float ulp = a < 0x1p-14f ? 0x1p-24f : ldexp(1.0f, ilogb(a) - 10);
    return rint(f / ulp) * ulp;
}
#endif
/* An input of matmul_mms's products at p: the float there, or with up >= 0 the SwiGLU of the
 * gate there and the up at p + up (moe_group_mms's down product). */
inline float4 ms_in4(const __global float *p, int up)
{
    float4 a = *(const __global float4 *)p;
    if (up < 0)
        return a;
    return a / (1.0f + exp(-a)) * *(const __global float4 *)(p + up);
}

inline float ms_in1(const __global float *p, int up)
{
    float a = *p;
    return up < 0 ? a : a / (1.0f + exp(-a)) * p[up];
}

/* The products of a work-group's rows with its tokens' inputs, added to this lane's fragments
 * acc (rows g, g + 8 of each 16; tokens 2q, 2q + 1 of each 8): wrow holds this lane's rows
 * (clamped), xt[j] the input row of token g of the j-th 8 (the tensor-core path), xs[j][c] that
 * of token 2q + c (the stand-in), up the inputs' SwiGLU offset (ms_in4). The warps split the
 * row's nb 32-blocks as the kernel's comment says. */
inline __attribute__((always_inline)) void ms_products(W_ARGS, int n_in, int warp, int lane, int wrow[MS_MI][2],
                        const __global float *xt[MS_NJ], const __global float *xs[MS_NJ][2],
                        int up, float acc[MS_MI][MS_NJ][4])
{
    int q = lane & 3, nb = n_in / 32;
    for (int b0 = MS_KB * warp; b0 < nb; b0 += MS_KB * MS_W) {
#if MV_PTX
        /* All of the step's loads first (blocks past n_in read the last block, their scales
         * zeroed), so that they are in flight together; then the products. */
        uint v[MS_KB][MS_MI][2][MS_NV];
        float4 dm[MS_KB][MS_MI][2];
        float4 xv[MS_KB][MS_NJ][2];
#pragma unroll
        for (int bb = 0; bb < MS_KB; bb++) {
            int b = min(b0 + bb, nb - 1);
#pragma unroll
            for (int i = 0; i < MS_MI; i++)
#pragma unroll
                for (int r = 0; r < 2; r++)
#if defined(W_QW8)
                    W_QW8(wrow[i][r], b, q, &v[bb][i][r][0], &v[bb][i][r][1], &dm[bb][i][r]);
#else
                    W_QW(wrow[i][r], b, q, &v[bb][i][r][0], &dm[bb][i][r]);
#endif
#pragma unroll
            for (int j = 0; j < MS_NJ; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    xv[bb][j][h] = ms_in4(xt[j] + W_QX(b, h) + 4 * q, up);
        }
#pragma unroll
        for (int bb = 0; bb < MS_KB; bb++) {
            bool in = b0 + bb < nb;
            uint a[MS_MI][2][4]; /* [row group][half of the block][a0..a3] */
#pragma unroll
            for (int i = 0; i < MS_MI; i++)
#pragma unroll
                for (int r = 0; r < 2; r++) { /* rows g (a0, a2) and g + 8 (a1, a3) */
                    float4 f = in ? dm[bb][i][r] : (float4)(0.0f);
#if defined(W_QW8)
                    float4 w0 = MS_S8F(v[bb][i][r][0]) * f.x + f.y;
                    float4 w1 = MS_S8F(v[bb][i][r][1]) * f.z + f.w;
                    a[i][0][r] = mb_h2(w0.x, w0.y);
                    a[i][0][r + 2] = mb_h2(w0.z, w0.w);
                    a[i][1][r] = mb_h2(w1.x, w1.y);
                    a[i][1][r + 2] = mb_h2(w1.z, w1.w);
#else
                    uint d2 = mb_h2(f.x, f.x), m2 = mb_h2(f.y, f.y);
                    uint e2 = mb_h2(f.z, f.z), n2 = mb_h2(f.w, f.w);
                    MB_DEQ_WORD(v[bb][i][r][0], d2, m2, e2, n2, a[i][0][r], a[i][0][r + 2],
                                a[i][1][r], a[i][1][r + 2]);
#endif
                }
#pragma unroll
            for (int j = 0; j < MS_NJ; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float4 x4 = in ? xv[bb][j][h] : (float4)(0.0f);
                    uint b0r = mb_h2(x4.x, x4.y), b1r = mb_h2(x4.z, x4.w);
#pragma unroll
                    for (int i = 0; i < MS_MI; i++)
                        MMA_F16(acc[i][j], a[i][h][0], a[i][h][1], a[i][h][2], a[i][h][3], b0r,
                                b1r);
                }
        }
#else
        for (int bb = 0; bb < MS_KB; bb++) {
            int b = b0 + bb;
            if (b >= nb)
                break;
            /* The stand-in: this lane's fragment elements (rows g, g + 8; tokens 2q, 2q + 1 of
             * each 8) over the whole block, from its four words (W_QW), weights and inputs
             * rounded to f16 as the tensor cores take them. */
            for (int i = 0; i < MS_MI; i++)
                for (int r = 0; r < 2; r++) {
                    float w[32];
                    for (int k = 0; k < 4; k++) {
                        uint v, v1;
                        float4 dm;
#if defined(W_QW8)
                        W_QW8(wrow[i][r], b, k, &v, &v1, &dm);
                        for (int t = 0; t < 4; t++) { /* the signed bytes */
                            int b0 = (int)((v >> (8 * t)) & 0xFFu);
                            int b1 = (int)((v1 >> (8 * t)) & 0xFFu);
                            w[4 * k + t] = ms_f16((float)(b0 - ((b0 & 0x80) << 1)) * dm.x + dm.y);
                            w[16 + 4 * k + t] =
                                ms_f16((float)(b1 - ((b1 & 0x80) << 1)) * dm.z + dm.w);
                        }
#else
                        W_QW(wrow[i][r], b, k, &v, &dm);
                        (void)v1;
                        for (int t = 0; t < 4; t++) {
                            uint byte = (v >> (8 * t)) & 0xFFu;
                            w[4 * k + t] = ms_f16((float)(byte & 15u) * dm.x + dm.y);
                            w[16 + 4 * k + t] = ms_f16((float)(byte >> 4) * dm.z + dm.w);
                        }
#endif
                    }
                    for (int j = 0; j < MS_NJ; j++)
                        for (int c = 0; c < 2; c++) {
                            const __global float *xr = xs[j][c];
                            float s = 0.0f;
                            for (int k = 0; k < 16; k++)
                                s += w[k] * ms_f16(ms_in1(xr + W_QX(b, 0) + k, up)) +
                                     w[16 + k] * ms_f16(ms_in1(xr + W_QX(b, 1) + k, up));
                            acc[i][j][2 * r + c] += s;
                        }
                }
        }
#endif
    }
}

/* The warps' partial sums of acc added up in halving rounds through part (MS_W / 2 x MS_R x
 * MS_T floats): the upper half of the warps still holding sums writes them, the lower half adds
 * them; warp 0 ends with the work-group's sums. */
inline __attribute__((always_inline)) void ms_reduce(__local float (*part)[MS_R * MS_T], int warp, int lane,
                      float acc[MS_MI][MS_NJ][4])
{
    int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int half_w = MS_W / 2; half_w >= 1; half_w /= 2) {
        if (warp >= half_w && warp < 2 * half_w)
#pragma unroll
            for (int i = 0; i < MS_MI; i++)
#pragma unroll
                for (int j = 0; j < MS_NJ; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        part[warp - half_w]
                            [(16 * i + g + (e >> 1) * 8) * MS_T + 8 * j + 2 * q + (e & 1)] =
                                acc[i][j][e];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (warp < half_w)
#pragma unroll
            for (int i = 0; i < MS_MI; i++)
#pragma unroll
                for (int j = 0; j < MS_NJ; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        acc[i][j][e] +=
                            part[warp][(16 * i + g + (e >> 1) * 8) * MS_T + 8 * j + 2 * q + (e & 1)];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

__kernel __attribute__((reqd_work_group_size(32 * MS_W, 1, 1))) void
matmul_mms(W_ARGS, int n_in, int n_out, __global const float *x, int x_ld, __global float *y,
           int y_ld, int y_off, __global const float *res, int n_tok)
{
    __local float part[MS_W > 1 ? MS_W / 2 : 1][MS_R * MS_T]; /* upper half's sums [row][tok] */
    int lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane >> 2, q = lane & 3;
    int row0 = get_group_id(0) * MS_R, t0 = get_group_id(1) * MS_T;
    float acc[MS_MI][MS_NJ][4];
    MMA_ZERO(acc, MS_MI, MS_NJ);
    /* This lane's rows (g and g + 8 of each 16) and tokens, clamped: the extra rows and tokens
     * of a partial tile compute copies that are never written. */
    int wrow[MS_MI][2];
#pragma unroll
    for (int i = 0; i < MS_MI; i++) {
        wrow[i][0] = min(row0 + 16 * i + g, n_out - 1);
        wrow[i][1] = min(row0 + 16 * i + g + 8, n_out - 1);
    }
    const __global float *xt[MS_NJ], *xs[MS_NJ][2];
#pragma unroll
    for (int j = 0; j < MS_NJ; j++) {
        xt[j] = x + (size_t)min(t0 + 8 * j + g, n_tok - 1) * x_ld;
        xs[j][0] = x + (size_t)min(t0 + 8 * j + 2 * q, n_tok - 1) * x_ld;
        xs[j][1] = x + (size_t)min(t0 + 8 * j + 2 * q + 1, n_tok - 1) * x_ld;
    }
    ms_products(W_PASS, n_in, warp, lane, wrow, xt, xs, -1, acc);
    ms_reduce(part, warp, lane, acc);
    if (warp == 0)
#pragma unroll
        for (int i = 0; i < MS_MI; i++)
#pragma unroll
            for (int j = 0; j < MS_NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int row = row0 + 16 * i + g + (e >> 1) * 8, tok = t0 + 8 * j + 2 * q + (e & 1);
                    if (row < n_out && tok < n_tok) {
                        float v = acc[i][j][e];
                        if (res)
                            v += res[(size_t)tok * y_ld + y_off + row];
                        WRITE_Y(y, tok, y_off + row, v);
                    }
                }
}

#if MMQ
/* matmul_mmq: matmul_mms's tile (MS_* as built; prefill builds it with the MMQ_TILE tile) with
 * 8-bit inputs and integer tensor-core products, as llama.cpp's CUDA prefill multiplies
 * quantized weights (its MMQ kernels). mmq_quantize first writes each token row's inputs as int8
 * blocks of 32, xq (n_in bytes a row), with, for each block, xh = (d, d s): the block's scale d
 * (max |x| / 127, q8.cl's rounding) and d times the sum s of its int8 values. A lane then holds
 * the weights' quant words of its fragments as matmul_mms loads them (W_QW: nibbles 0..15;
 * MQ_QW8: a byte a weight), always in the inputs' order here (raw Q4_K through W_QK8N, one
 * sub-block a block, rather than matmul_mms's two sub-blocks a word): weights 4q..4q+3 and
 * 16 + 4q.. of a block, the k places of PTX's s8 fragments (mma.cl). For block b, with
 * w = d_w q + m_w, sum_k w x = d_w d (sum_k q xq) + m_w (d s): the integer product scaled once,
 * the weights' offset (Q4_1's m, Q4_K's and Q5_K's mins) through the inputs' sum; one m16n8k32
 * product a block, or with MQ_H2 (Q6_K: a scale a half) one m16n8k16 product a half. Where the
 * layout says that the offset is m_w = -W_QOFF d_w (Q4_0, Q5_0, Q6_K; Q8_0 with 0), the
 * tensor-core path subtracts W_QOFF from the quant bytes (signed int8) and has no offset term.
 * The warps split the blocks as in matmul_mms and add up in local memory (ms_reduce). Without
 * PTX (the tests on CPUs) each lane computes its fragment elements from whole halves in
 * integers, the same numbers. Work-groups run tokens fastest (dimension 0), so that the token
 * tiles of one row tile, which read the same weights, run together and share them through the
 * cache. Global size (32 MS_W ceil(n_tok / MS_T), ceil(n_out / (16 MS_MI))), local
 * (32 MS_W, 1). */
#if defined(MQL_S8H) && MQL_S8H && defined(W_QW8) && (defined(W_QH2) || defined(W_Q5K))
/* Raw Q6_K or Q5_K as k8_split rewrote it (the host's K8SPLIT builds matmul_mmq / matmul_mmql
 * with MQL_S8H): at w_a + w_off, n_out n_in / 32 blocks of 32 bytes (weight i of a block in byte
 * i: Q6_K's six bits 0..63, Q5_K's five 0..31), then a float2 a block: Q6_K's halves' scales
 * (d s0, d s1), Q5_K's (d sc, -dmin m); the words and scales W_QW8 of the raw layout gives, so
 * the same numbers. */
inline void qw8_s8h(const __global uchar *w, int n_out, int nb, int o, int b, int k, uint *v0,
                    uint *v1, float4 *dm)
{
    size_t blk = (size_t)o * nb + b;
    const __global uint *q = (const __global uint *)(w + blk * 32);
    *v0 = q[k];
    *v1 = q[4 + k];
    float2 s = ((const __global float2 *)(w + (size_t)n_out * nb * 32))[blk];
#if defined(W_QH2)
    *dm = (float4)(s.x, -32.0f * s.x, s.y, -32.0f * s.y);
#else
    *dm = (float4)(s.x, s.y, s.x, s.y);
#endif
}
#define MQ_QW8(o, b, k, v0, v1, dm)                                                                \
    qw8_s8h(w_a + w_off, n_out, n_in / 32, (o), (b), (k), (v0), (v1), (dm))
#elif defined(W_QK8N)
#define MQ_QW8(o, b, k, v0, v1, dm) W_QK8N(o, b, k, v0, v1, dm)
#define MQ_H2 0
#elif defined(W_QW8)
#define MQ_QW8(o, b, k, v0, v1, dm) W_QW8(o, b, k, v0, v1, dm)
#endif
#if !defined(MQ_H2) && defined(W_QH2)
#define MQ_H2 1
#elif !defined(MQ_H2)
#define MQ_H2 0
#endif
#if MQ_H2 && !defined(W_QOFF)
#error "matmul_mmq: a scale a half needs the signed bytes (W_QOFF)"
#endif
#if defined(MQ_QW8)
#define MQ_NV 2
#else
#define MQ_NV 1
#endif
/* test-kernels: bad[0] counts the c = c0 + global id for which mq_i2f(c) and (float)c differ,
 * and the first 2^16 work-items the words id | id << 16 (every byte value in every place) for
 * which ms_s8f and convert_float4(as_char4(...)) differ. */
__kernel void mq_i2f_check(int c0, __global int *bad)
{
    int c = c0 + (int)get_global_id(0);
    if (as_int(mq_i2f(c)) != as_int((float)c))
        atomic_inc(bad);
    uint id = (uint)get_global_id(0), v = id | id << 16;
    if (id < 65536u && any(as_int4(ms_s8f(v)) != as_int4(convert_float4(as_char4(v)))))
        atomic_inc(bad);
}

#if MV_PTX && defined(W_QOFF) && W_QOFF > 0
/* Quant bytes 0..127 less W_QOFF, each byte on its own (no borrow: bit 7 set first). */
#define MQ_SIGNED(v) ((((v) | 0x80808080u) - 0x01010101u * W_QOFF) ^ 0x80808080u)
#else
#define MQ_SIGNED(v) (v)
#endif
#if MV_PTX
/* One fragment of matmul_mmq's / matmul_mmql's products added to acc (rows g, g + 8; tokens
 * 2q, 2q + 1): A's words a00, a01 (rows g, g + 8, weights 4q.. of the block's first 16), a10,
 * a11 (the second 16), B's b0, b1 (the token's inputs likewise), the rows' block scales f0, f1
 * (d, m, and with MQ_H2 the second half's d, m), the tokens' (d, d s) x0, x1. */
inline __attribute__((always_inline)) void mq_frag(float acc[4], uint a00, uint a01, uint a10,
                                                   uint a11, uint b0, uint b1, float4 f0,
                                                   float4 f1, float2 x0, float2 x1)
{
#if MQ_H2
    int c0[4], c1[4];
    MMA_S8K16(c0, a00, a01, b0);
    MMA_S8K16(c1, a10, a11, b1);
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float4 w = e >> 1 ? f1 : f0;
        acc[e] += (e & 1 ? x1 : x0).x * (MQ_F(c0[e]) * w.x + MQ_F(c1[e]) * w.z);
    }
#else
    int c[4];
    MMA_S8K32(c, a00, a01, a10, a11, b0, b1);
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float4 w = e >> 1 ? f1 : f0;
        float2 x = e & 1 ? x1 : x0;
#if defined(W_QOFF)
        acc[e] += MQ_F(c[e]) * (w.x * x.x);
#else
        acc[e] += MQ_F(c[e]) * (w.x * x.x) + w.y * x.y;
#endif
    }
#endif
}
#endif
__kernel __attribute__((reqd_work_group_size(32 * MS_W, 1, 1))) void
matmul_mmq(W_ARGS, int n_in, int n_out, __global const char *xq, __global const float2 *xh,
           __global float *y, int y_ld, int y_off, __global const float *res, int n_tok)
{
    __local float part[MS_W > 1 ? MS_W / 2 : 1][MS_R * MS_T];
    int lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane >> 2, q = lane & 3;
    int t0 = get_group_id(0) * MS_T, row0 = get_group_id(1) * MS_R;
    int nb = n_in / 32;
    float acc[MS_MI][MS_NJ][4];
    MMA_ZERO(acc, MS_MI, MS_NJ);
    int wrow[MS_MI][2];
#pragma unroll
    for (int i = 0; i < MS_MI; i++) {
        wrow[i][0] = min(row0 + 16 * i + g, n_out - 1);
        wrow[i][1] = min(row0 + 16 * i + g + 8, n_out - 1);
    }
    /* B's token (g of each 8) and the tokens of this lane's results (2q, 2q + 1 of each 8). */
    const __global char *xt[MS_NJ];
    const __global float2 *hs[MS_NJ][2];
#pragma unroll
    for (int j = 0; j < MS_NJ; j++) {
        xt[j] = xq + (size_t)min(t0 + 8 * j + g, n_tok - 1) * n_in;
        hs[j][0] = xh + (size_t)min(t0 + 8 * j + 2 * q, n_tok - 1) * nb;
        hs[j][1] = xh + (size_t)min(t0 + 8 * j + 2 * q + 1, n_tok - 1) * nb;
    }
    for (int b0 = MS_KB * warp; b0 < nb; b0 += MS_KB * MS_W) {
#if MV_PTX
        uint v[MS_KB][MS_MI][2][MQ_NV];
        float4 dm[MS_KB][MS_MI][2];
        uint xv[MS_KB][MS_NJ][2];
        float2 xs[MS_KB][MS_NJ][2]; /* [token 2q + c] */
#pragma unroll
        for (int bb = 0; bb < MS_KB; bb++) {
            int b = min(b0 + bb, nb - 1);
#pragma unroll
            for (int i = 0; i < MS_MI; i++)
#pragma unroll
                for (int r = 0; r < 2; r++)
#if defined(MQ_QW8)
                    MQ_QW8(wrow[i][r], b, q, &v[bb][i][r][0], &v[bb][i][r][1], &dm[bb][i][r]);
#else
                    W_QW(wrow[i][r], b, q, &v[bb][i][r][0], &dm[bb][i][r]);
#endif
#pragma unroll
            for (int j = 0; j < MS_NJ; j++) {
                xv[bb][j][0] = *(const __global uint *)(xt[j] + 32 * b + 4 * q);
                xv[bb][j][1] = *(const __global uint *)(xt[j] + 32 * b + 16 + 4 * q);
                xs[bb][j][0] = hs[j][0][b];
                xs[bb][j][1] = hs[j][1][b];
            }
        }
#pragma unroll
        for (int bb = 0; bb < MS_KB; bb++) {
            bool in = b0 + bb < nb;
            uint a[MS_MI][2][2]; /* [row group][half][row g, g + 8] */
            float4 f[MS_MI][2];
#pragma unroll
            for (int i = 0; i < MS_MI; i++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    f[i][r] = in ? dm[bb][i][r] : (float4)(0.0f);
#if defined(MQ_QW8)
                    a[i][0][r] = MQ_SIGNED(v[bb][i][r][0]);
                    a[i][1][r] = MQ_SIGNED(v[bb][i][r][1]);
#else
                    a[i][0][r] = MQ_SIGNED(v[bb][i][r][0] & 0x0F0F0F0Fu);
                    a[i][1][r] = MQ_SIGNED((v[bb][i][r][0] >> 4) & 0x0F0F0F0Fu);
#endif
                }
#pragma unroll
            for (int j = 0; j < MS_NJ; j++)
#pragma unroll
                for (int i = 0; i < MS_MI; i++)
                    mq_frag(acc[i][j], a[i][0][0], a[i][0][1], a[i][1][0], a[i][1][1],
                            xv[bb][j][0], xv[bb][j][1], f[i][0], f[i][1], xs[bb][j][0],
                            xs[bb][j][1]);
        }
#else
        for (int bb = 0; bb < MS_KB; bb++) {
            int b = b0 + bb;
            if (b >= nb)
                break;
            for (int i = 0; i < MS_MI; i++)
                for (int r = 0; r < 2; r++) {
                    uint lo[4], hi[4];
                    float4 dm;
                    for (int k = 0; k < 4; k++) {
#if defined(MQ_QW8)
                        MQ_QW8(wrow[i][r], b, k, &lo[k], &hi[k], &dm);
#else
                        uint v;
                        W_QW(wrow[i][r], b, k, &v, &dm);
                        lo[k] = v & 0x0F0F0F0Fu;
                        hi[k] = (v >> 4) & 0x0F0F0F0Fu;
#endif
                    }
                    for (int j = 0; j < MS_NJ; j++)
                        for (int c = 0; c < 2; c++) {
                            int tk = min(t0 + 8 * j + 2 * q + c, n_tok - 1);
                            const __global char *xr = xq + (size_t)tk * n_in + 32 * b;
                            int s0 = 0, s1 = 0, u0 = 0, u1 = 0;
                            for (int k = 0; k < 4; k++) {
                                char4 w0 = as_char4(lo[k]), w1 = as_char4(hi[k]);
                                char4 x0 = vload4(0, xr + 4 * k), x1 = vload4(0, xr + 16 + 4 * k);
                                s0 += w0.x * x0.x + w0.y * x0.y + w0.z * x0.z + w0.w * x0.w;
                                s1 += w1.x * x1.x + w1.y * x1.y + w1.z * x1.z + w1.w * x1.w;
                                u0 += x0.x + x0.y + x0.z + x0.w;
                                u1 += x1.x + x1.y + x1.z + x1.w;
                            }
                            float2 x = hs[j][c][b];
#if MQ_H2
                            acc[i][j][2 * r + c] += x.x * ((float)s0 * dm.x + dm.y * (float)u0 +
                                                           (float)s1 * dm.z + dm.w * (float)u1);
#else
                            (void)u0, (void)u1;
                            acc[i][j][2 * r + c] += x.x * ((float)s0 * dm.x + (float)s1 * dm.z) +
                                                    dm.y * x.y;
#endif
                        }
                }
        }
#endif
    }
    ms_reduce(part, warp, lane, acc);
    if (warp == 0)
#pragma unroll
        for (int i = 0; i < MS_MI; i++)
#pragma unroll
            for (int j = 0; j < MS_NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int row = row0 + 16 * i + g + (e >> 1) * 8, tok = t0 + 8 * j + 2 * q + (e & 1);
                    if (row < n_out && tok < n_tok) {
                        float v = acc[i][j][e];
                        if (res)
                            v += res[(size_t)tok * y_ld + y_off + row];
                        WRITE_Y(y, tok, y_off + row, v);
                    }
                }
}

/* matmul_mmql: matmul_mmq's products with the work-group's tiles staged in local memory, as
 * llama.cpp's CUDA MMQ stages them. A work-group of MS_W warps takes MQL_R = 16 MS_MI MS_W rows
 * and MS_T tokens; warp w takes rows 16 MS_MI w.. of the tile and all of its tokens (no partial
 * sums to add up). Each step of MS_KB 32-blocks: the work-items copy the rows' quant words
 * (coalesced, one word an item: W_QW or MQ_QW8 with k = the item's word) into la, unpacked to a
 * byte a weight and made signed as matmul_mmq makes them (MQ_SIGNED), with each row's block
 * scales into ls, and the tokens' int8 blocks (16-byte loads) and their (d, d s) into lx and lh;
 * then each warp multiplies from local memory, the B fragments (inputs) shared by all warps. la
 * and lx keep a row's words in the inputs' natural order (word u: weights 4u..4u+3 of the first
 * 16, word 4 + u: of the second 16), padded to MQL_KW words (conflict-free fragment reads). The
 * next step's words are loaded into registers while the current step multiplies. Blocks past
 * n_in get zero scales. Global size (32 MS_W ceil(n_tok / MS_T), ceil(n_out / MQL_R)), local
 * (32 MS_W, 1); tokens fastest, as matmul_mmq. Same arguments and results as matmul_mmq. */
#define MQL_R (16 * MS_MI * MS_W)
#define MQL_NT (32 * MS_W)
#define MQL_KW (8 * MS_KB + 4)
#define MQL_NWI (2 * MS_MI * MS_KB)                               /* weight words an item */
#define MQL_NXI ((MS_T * MS_KB * 2 + MQL_NT - 1) / MQL_NT)        /* 16-byte input loads */
#define MQL_NHI ((MS_T * MS_KB + MQL_NT - 1) / MQL_NT)            /* input scales */
#if MQ_H2
#define MQL_SN 4 /* floats of a row's block scales: (d, m) a half */
typedef float4 mql_sc;
#define MQL_SC(v) (v)
#define MQL_F4(v) (v)
#else
#define MQL_SN 2 /* (d, m) */
typedef float2 mql_sc;
#define MQL_SC(v) ((v).xy)
#define MQL_F4(v) ((float4)((v), 0.0f, 0.0f))
#endif
#ifndef MQL_PF
#define MQL_PF 1 /* the next step's loads in flight while the current step multiplies */
#endif
#define MQL_BYTES                                                                                  \
    (4 * (MQL_R * MQL_KW + MS_T * MQL_KW + MQL_SN * MQL_R * MS_KB + 2 * MS_T * MS_KB))
#if MQL_BYTES <= 49152
/* MQL_ASYNC (the host sets it after ebb_cl_async_probe; PTX only), for Q4_0 and Q4_1 weights in
 * the split 4-bit layout (W_SPLIT4: a row's blocks' 16 quant bytes in w_a, their (d, m) in w_b;
 * split Q4_1 is also what raw Q4_K becomes for prefill through k4_split): the work-items
 * copy the step's tiles with cp.async as they are in memory, the quant words still packed (two
 * weights a byte) into la, the scales into ls, the tokens' int8 blocks into lx and their (d, d s)
 * into lh, for MQL_NST steps in flight (stages: the next MQL_NST - 1 steps' copies go on while
 * this step multiplies, one barrier a step); each warp unpacks its own rows' nibbles as it reads
 * its A fragments (no warp shares them, so no unpacking is repeated), so no word passes through
 * registers on its way to local memory. A row keeps MQA_AKW words (4 a block, padded to an odd
 * multiple of 4: conflict-free fragment reads), a token MQA_XKW. Blocks past n_in are copied as
 * zeros (no source bytes). Raw Q4_K, Q5_K, Q6_K and Q8_0 (below) are copied the same way, as
 * they lie. Where the stages do not fit in 48 KiB, the tile stages through registers as above. */
#ifndef MQL_NST
#define MQL_NST 2
#endif
#if defined(MQL_S8H) && MQL_S8H && (defined(W_QH2) || defined(W_Q5K))
/* Q6_K or Q5_K as k8_split rewrote it (MQL_S8H, above): a row keeps the step's KB blocks of 32
 * bytes (8 words each, 4-byte aligned: no realignment) and after them the blocks' float2s, padded
 * to an odd multiple of 4 words (64,2,4,2: 20 words a row, three stages in 48 KiB). */
#define MQA_K 0
#define MQA_Q8 0
#define MQA_K6 0
#define MQA_S8 1
#define MQA_AKW ((10 * MS_KB + 3) / 4 * 4 + ((10 * MS_KB + 3) / 4 % 2 ? 0 : 4))
#define MQA_SN 0
#elif defined(W_QK8N) || defined(W_Q5K)
/* Raw Q4_K (W_QK8N): a row keeps its super-block's 16-byte header (d, dmin, the packed scales)
 * and the step's KB / 2 chunks of 32 quant bytes (sub-blocks 2c and 2c + 1 in the low and high
 * nibbles), KB even and dividing 8 (a step within one super-block); the scales are decoded from
 * the header as the fragments are read. Raw Q5_K (W_Q5K; 176-byte super-blocks, 16-byte aligned
 * as Q4_K's 144) keeps its 32 bytes of high bits (bit j of byte l: weight l of sub-block j) after
 * the header, then the chunks: MQA_KP 16-byte pieces a row. */
#define MQA_K 1
#define MQA_Q8 0
#define MQA_K6 0
#if defined(W_Q5K)
#define MQA_K5 1
#define MQA_SBB 176
#define MQA_KP (MS_KB + 3)
#else
#define MQA_K5 0
#define MQA_SBB 144
#define MQA_KP (MS_KB + 1)
#endif
#define MQA_AKW (4 * MQA_KP)
#define MQA_SN 0
#elif defined(W_QH2) && defined(W_RAW)
/* Raw Q6_K (W_QH2; 210-byte super-blocks, 2-byte aligned), KB 4: a step is half a super-block
 * (n = (b0 & 7) / 4), whose parts are copied as they lie from the 4-byte boundary at or below
 * each, one word more where that is 2 bytes below (sh, the row's shift in bits, kept in word
 * MQA_K6SH): the half's 64 ql bytes (17 words from word 0), 32 qh bytes (9 from word 17), 8
 * scales (3 from word 26) and d (word 29); each word read back is put together from two staged
 * words when sh is 16. */
#define MQA_K 0
#define MQA_Q8 0
#define MQA_K6 1
#define MQA_K6SH 30
#define MQA_AKW 36
#define MQA_SN 0
#elif defined(W_Q80)
/* Raw Q8_0 (W_Q80): a row keeps the step's KB blocks (KB even) as they lie, 34 bytes each (the
 * half d, then 32 quant bytes): MQA_Q8W words, copied 4 bytes at a time (a pair of blocks is 68
 * bytes from a 4-byte boundary when a row's blocks are an even count), padded to an odd multiple
 * of 4 words (conflict-free fragment reads); an even block's quant words straddle two staged
 * words (2 bytes in) and are put together as they are read. */
#define MQA_K 0
#define MQA_Q8 1
#define MQA_K6 0
#define MQA_Q8W (17 * MS_KB / 2)
#define MQA_AKW ((MQA_Q8W + 3) / 4 * 4 + ((MQA_Q8W + 3) / 4 % 2 ? 0 : 4))
#define MQA_SN 0
#else
#define MQA_K 0
#define MQA_Q8 0
#define MQA_K6 0
#define MQA_AKW (4 * (MS_KB + 1 + (MS_KB & 1)))
#define MQA_SN (2 * MS_KB)
#endif
#ifndef MQA_S8
#define MQA_S8 0
#endif
#define MQA_XKW (8 * MS_KB + 4)
#define MQA_STAGE (4 * (MQL_R * MQA_AKW + MQA_SN * MQL_R + MS_T * MQA_XKW + 2 * MS_T * MS_KB))
#if MQL_NST == 3 && 3 * MQA_STAGE > 49152
#define MQA_NST 2 /* three stages do not fit: two */
#else
#define MQA_NST MQL_NST
#endif
#if MV_PTX && defined(MQL_ASYNC) && MQL_ASYNC && MQA_NST * MQA_STAGE <= 49152 &&                   \
    ((defined(W_SPLIT4) && !MQ_H2) ||                                                              \
     (MQA_K && defined(W_RAW) && MS_KB % 2 == 0 && 8 % MS_KB == 0 && MQA_KP % 2 == 1) ||          \
     (MQA_Q8 && defined(W_RAW) && MS_KB % 2 == 0) || (MQA_K6 && MS_KB == 4) || MQA_S8)
#define MQL_A 1
#else
#define MQL_A 0
#endif
/* MQL_G (moe_group_mmql's programs, ebb_cl_moe_mmql_build): a tile's token t takes its inputs
 * from row mrow[t] of xq / xh (its pair's row; past the tile's n_tok pairs, the last one's), and
 * the helpers below take mrow; otherwise token t of the work-group's tile is row t0 + t (past
 * n_tok, the last). */
#if defined(MQL_G) && MQL_G
#define MQL_TROW(t) mrow[min((t), n_tok - 1)]
#define MQL_MROW_ARG , __local const int *mrow
#define MQL_MROW_PASS , mrow
#else
#define MQL_TROW(t) min(t0 + (t), n_tok - 1)
#define MQL_MROW_ARG
#define MQL_MROW_PASS
#endif
#if MQL_A
/* matmul_mmql's copies of the step from block b0 into the stage at shared addresses sa (quant
 * words), ss (scales), sx (inputs), sh (input scales); rows past n_out and tokens past n_tok
 * repeat the last (their results are not written). */
inline __attribute__((always_inline)) void
mqa_copy(W_ARGS, int n_in, int n_out, __global const char *xq, __global const float2 *xh,
         int n_tok, int lid, int row0, int t0, int b0, uint sa, uint ss, uint sx, uint sh MQL_MROW_ARG)
{
    int nb = n_in / 32;
#if MQA_K
    /* Piece k of row r: 0 the header, (Q5_K) 1 and 2 the high bits, then the 16-byte pieces
     * of the step's quant bytes. */
    ulong rowb = (ulong)(n_in / 256) * MQA_SBB;
    const int hb = MQA_K5 ? 3 : 1, qb = MQA_K5 ? 48 : 16; /* first quant piece, its byte */
    (void)ss;
#pragma unroll
    for (int n = 0; n < (MQL_R * MQA_KP + MQL_NT - 1) / MQL_NT; n++) {
        int c = lid + n * MQL_NT;
        if (c < MQL_R * MQA_KP) {
            int r = c / MQA_KP, k = c % MQA_KP;
            const __global uchar *p = w_a + w_off + (ulong)min(row0 + r, n_out - 1) * rowb +
                                      (ulong)(b0 >> 3) * MQA_SBB;
            cp_async16(sa + (uint)(r * MQA_AKW + 4 * k) * 4u,
                       p + (k >= hb ? qb + 32 * ((b0 & 7) >> 1) + 16 * (k - hb) : 16 * k), 16);
        }
    }
#elif MQA_S8
    /* Piece k of row r: k < 2 KB the quant bytes' 16-byte halves of block k / 2 (at word 4 k),
     * then block kb's scale pair (at word 8 KB + 2 kb); blocks past nb as zeros. */
    const __global uchar *wq = w_a + w_off, *ws = wq + (size_t)n_out * nb * 32;
    (void)ss;
#pragma unroll
    for (int n = 0; n < (MQL_R * 3 * MS_KB + MQL_NT - 1) / MQL_NT; n++) {
        int c = lid + n * MQL_NT;
        if (c < MQL_R * 3 * MS_KB) {
            int r = c / (3 * MS_KB), k = c % (3 * MS_KB);
            int kb = k < 2 * MS_KB ? k >> 1 : k - 2 * MS_KB, b = b0 + kb;
            size_t blk = (size_t)min(row0 + r, n_out - 1) * nb + min(b, nb - 1);
            if (k < 2 * MS_KB)
                cp_async16(sa + (uint)(r * MQA_AKW + 4 * k) * 4u, wq + blk * 32 + 16 * (k & 1),
                           b < nb ? 16 : 0);
            else
                cp_async8(sa + (uint)(r * MQA_AKW + 8 * MS_KB + 2 * kb) * 4u, ws + blk * 8,
                          b < nb ? 8 : 0);
        }
    }
#elif MQA_K6
    /* Word k of row r (k < 30): its part's word, from the 4-byte boundary at or below the part
     * (sh 16: 2 bytes below, one word more); the extra word of a part is copied as zeros when
     * sh is 0 (it would pass the super-block's end for the scales), d's word takes 2 bytes then.
     * Each row's sh goes into word MQA_K6SH (a plain store: not in flight). */
    ulong rowb = (ulong)(n_in / 256) * 210;
    int hn = (b0 & 7) >> 2;
    (void)ss;
#pragma unroll
    for (int n = 0; n < (MQL_R * 31 + MQL_NT - 1) / MQL_NT; n++) {
        int c = lid + n * MQL_NT;
        if (c < MQL_R * 31) {
            int r = c / 31, k = c % 31;
            ulong sb = w_off + (ulong)min(row0 + r, n_out - 1) * rowb + (ulong)(b0 >> 3) * 210;
            uint sh = (uint)(sb & 2u) * 8u;
            uint dst = sa + (uint)(r * MQA_AKW + k) * 4u;
            if (k == 30) {
                st_shared32(sa + (uint)(r * MQA_AKW + MQA_K6SH) * 4u, sh);
                continue;
            }
            /* the part: byte offset in the super-block, its words with sh 0, the first word */
            int off = k < 17 ? 64 * hn : k < 26 ? 128 + 32 * hn : k < 29 ? 192 + 8 * hn : 208;
            int nw = k < 17 ? 16 : k < 26 ? 8 : k < 29 ? 2 : 1, k0 = k < 17 ? 0 : k < 26 ? 17 : k < 29 ? 26 : 29;
            int i = k - k0;
            const __global uchar *p = w_a + (sb + (ulong)off - sh / 8u) + 4 * i;
            int bytes = k == 29 ? (sh ? 4 : 2) : i < nw || sh ? 4 : 0;
            cp_async4(dst, bytes ? p : w_a + (sb & ~(ulong)3), bytes);
        }
    }
#elif MQA_Q8
    /* Word k of row r: bytes 4k.. of the step's blocks; a pair of blocks past nb as zeros. Rows
     * of an odd number of blocks (2-byte aligned) are read as two halves a word and stored
     * directly, bytes past the row's end as zeros (the same words, not in flight). */
    ulong rowb = (ulong)nb * 34;
    bool al = (nb & 1) == 0 && (w_off & 3) == 0;
    (void)ss;
#pragma unroll
    for (int n = 0; n < (MQL_R * MQA_Q8W + MQL_NT - 1) / MQL_NT; n++) {
        int c = lid + n * MQL_NT;
        if (c < MQL_R * MQA_Q8W) {
            int r = c / MQA_Q8W, k = c % MQA_Q8W;
            const __global uchar *p = w_a + w_off + (ulong)min(row0 + r, n_out - 1) * rowb +
                                      (ulong)b0 * 34 + 4 * k;
            uint dst = sa + (uint)(r * MQA_AKW + k) * 4u;
            if (al) {
                cp_async4(dst, p, b0 + 2 * (k / 17) < nb ? 4 : 0);
            } else {
                int left = (nb - b0) * 34 - 4 * k; /* bytes of the row from p on */
                uint lo = left >= 2 ? *(const __global ushort *)p : 0u;
                uint hi = left >= 4 ? *(const __global ushort *)(p + 2) : 0u;
                st_shared32(dst, lo | hi << 16);
            }
        }
    }
#else
#pragma unroll
    for (int n = 0; n < (MQL_R * MS_KB + MQL_NT - 1) / MQL_NT; n++) {
        int c = lid + n * MQL_NT;
        if (c < MQL_R * MS_KB) {
            int r = c / MS_KB, kb = c % MS_KB, b = b0 + kb;
            size_t blk = (size_t)min(row0 + r, n_out - 1) * nb + min(b, nb - 1);
            cp_async16(sa + (uint)(r * MQA_AKW + 4 * kb) * 4u, w_a + blk * 16, b < nb ? 16 : 0);
            cp_async8(ss + (uint)(r * MS_KB + kb) * 8u, w_b + blk, b < nb ? 8 : 0);
        }
    }
#endif
#pragma unroll
    for (int n = 0; n < (MS_T * MS_KB * 2 + MQL_NT - 1) / MQL_NT; n++) {
        int c = lid + n * MQL_NT;
        if (c < MS_T * MS_KB * 2) {
            int h = c & 1, kb = (c >> 1) % MS_KB, t = (c >> 1) / MS_KB, b = b0 + kb;
            cp_async16(sx + (uint)(t * MQA_XKW + 8 * kb + 4 * h) * 4u,
                       xq + (size_t)MQL_TROW(t) * n_in + 32 * min(b, nb - 1) + 16 * h,
                       b < nb ? 16 : 0);
        }
    }
#pragma unroll
    for (int n = 0; n < (MS_T * MS_KB + MQL_NT - 1) / MQL_NT; n++) {
        int c = lid + n * MQL_NT;
        if (c < MS_T * MS_KB) {
            int t = c / MS_KB, kb = c % MS_KB, b = b0 + kb;
            cp_async8(sh + (uint)(t * MS_KB + kb) * 8u,
                      xh + (size_t)MQL_TROW(t) * nb + min(b, nb - 1), b < nb ? 8 : 0);
        }
    }
}
#if MQA_K
/* Sub-block j's (d sc, -dmin m) from a staged Q4_K header h (words: d and dmin as halves, then
 * the 12 bytes of six-bit scales and mins, packed as k4_scale_min reads them). */
inline float2 mqa_k4_dm(__local const uint *h, int j)
{
    uint s0 = h[1], s1 = h[2], s2 = h[3], sc, mn;
    int sh = 8 * (j & 3);
    if (j < 4) {
        sc = (s0 >> sh) & 63u;
        mn = (s1 >> sh) & 63u;
    } else {
        uint e = (s2 >> sh) & 255u;
        sc = (e & 15u) | (((s0 >> sh) >> 6 & 3u) << 4);
        mn = (e >> 4) | (((s1 >> sh) >> 6 & 3u) << 4);
    }
    float2 dd = vload_half2(0, (__local const half *)h);
    return (float2)(dd.x * MQ_F((int)sc), -dd.y * MQ_F((int)mn));
}
#endif
#if MQA_K6
/* Word i of a staged raw Q6_K row h (shift sh: 0 or 16 bits). */
inline uint mqa_k6w(__local const uint *h, int i, uint sh)
{
    return sh ? (h[i] >> 16) | (h[i + 1] << 16) : h[i];
}
#endif
#if MQA_Q8
/* Quant word u (bytes 4u..4u + 3: u < 4 the first 16 weights, 4.. the second) of block kb of a
 * staged raw Q8_0 row h, and the block's d. */
inline uint mqa_q8w(__local const uint *h, int kb, int u)
{
    int w = (34 * kb + 2) / 4 + u;
    return kb & 1 ? h[w] : (h[w] >> 16) | (h[w + 1] << 16);
}
inline float mqa_q8d(__local const uint *h, int kb)
{
    return vload_half(17 * kb, (__local const half *)h);
}
#endif
#endif
#if defined(MQ_QW8)
#define MQL_QW(o, b, k, v, dm) MQ_QW8(o, b, k, &(v)[0], &(v)[1], dm)
#else
#define MQL_QW(o, b, k, v, dm) W_QW(o, b, k, &(v)[0], dm)
#endif
/* matmul_mmql's global loads of the step from block b0 into an item's registers: weight words
 * (item it: word it % 4 of block b0 + (it / 4) % MS_KB of the tile's row it / (4 MS_KB)) with
 * their block's scales, the tokens' 16-byte input loads and their (d, d s). */
inline __attribute__((always_inline)) void
mql_fetch(W_ARGS, int n_in, int n_out, __global const char *xq, __global const float2 *xh,
          int n_tok, int lid, int row0, int t0, int b0, uint wv[MQL_NWI][MQ_NV], mql_sc *wd,
          uint4 *xv, float2 *hv MQL_MROW_ARG)
{
    int nb = n_in / 32;
#pragma unroll
    for (int n = 0; n < MQL_NWI; n++) {
        int it = lid + n * MQL_NT, kb = (it >> 2) % MS_KB, r = (it >> 2) / MS_KB;
        int o = min(row0 + r, n_out - 1), b = min(b0 + kb, nb - 1);
        float4 dm;
        MQL_QW(o, b, it & 3, wv[n], &dm);
        wd[n] = b0 + kb < nb ? MQL_SC(dm) : (mql_sc)(0.0f);
    }
#pragma unroll
    for (int n = 0; n < MQL_NXI; n++) {
        int it = lid + n * MQL_NT;
        if (it < MS_T * MS_KB * 2) {
            int h = it & 1, kb = (it >> 1) % MS_KB, t = (it >> 1) / MS_KB;
            int b = min(b0 + kb, nb - 1);
            xv[n] = *(const __global uint4 *)(xq + (size_t)MQL_TROW(t) * n_in + 32 * b + 16 * h);
        }
    }
#pragma unroll
    for (int n = 0; n < MQL_NHI; n++) {
        int it = lid + n * MQL_NT;
        if (it < MS_T * MS_KB)
            hv[n] = xh[(size_t)MQL_TROW(it / MS_KB) * nb + min(b0 + it % MS_KB, nb - 1)];
    }
}

#if defined(MQL_G) && MQL_G
/* moe_group_mmql: moe.cl's grouped prefill products (gate and up, down) on matmul_mmql's tiles,
 * its tokens one tile of at most MS_T pairs of expert e (moe.cl's tiles and perm: tiles[g] =
 * (e, first index into perm, count)), its rows those of e in the stacked weight (e n_rows + r).
 * Pair p = perm[..] takes its inputs from row p / kdiv of xq / xh (kdiv k: its token's row of the
 * quantized h; 1: its own row, mmq_quantize_glu's), and writes y[(p / k) y_ld + y_off + (p % k)
 * n_rows + r] (moe_group_mms's places). Global (MQL_NT n_tiles, ceil(n_rows / MQL_R)), local
 * (MQL_NT, 1); the same steps as matmul_mmql's over each pair's row. */
__kernel __attribute__((reqd_work_group_size(MQL_NT, 1, 1))) void
moe_group_mmql(W_ARGS, int n_in, int n_rows, int k, int kdiv, __global const int4 *tiles,
               __global const int *perm, __global const char *xq, __global const float2 *xh,
               __global float *y, int y_ld, int y_off)
#else
__kernel __attribute__((reqd_work_group_size(MQL_NT, 1, 1))) void
matmul_mmql(W_ARGS, int n_in, int n_out, __global const char *xq, __global const float2 *xh,
            __global float *y, int y_ld, int y_off, __global const float *res, int n_tok,
            __global float *part, __global int *cnt)
#endif
{
#if defined(MQL_G) && MQL_G
#define MQL_NZ 1
#define MQL_Z 0
    int4 tl = tiles[get_group_id(0)];
    int n_tok = tl.z, wb = tl.x * n_rows, n_out = wb + n_rows; /* weight rows wb..n_out - 1 */
    __local int mrow[MS_T];
    for (int t = get_local_id(0); t < MS_T; t += MQL_NT)
        mrow[t] = perm[tl.y + min(t, n_tok - 1)] / kdiv;
    barrier(CLK_LOCAL_MEM_FENCE);
#define MQL_T0 0
#define MQL_ROW0 (wb + (int)get_group_id(1) * MQL_R)
#else
#define MQL_T0 ((int)get_group_id(0) * MS_T)
#define MQL_ROW0 ((int)get_group_id(1) * MQL_R)
#define MQL_NZ ((int)get_num_groups(2))
#define MQL_Z ((int)get_group_id(2))
    __local int zlast; /* with slices: this work-group's tile is complete (mql_join) */
#endif
#if MQL_A
    __local uint la[MQA_NST * MQL_R * MQA_AKW] __attribute__((aligned(16)));
#if MQA_SN
    __local float2 ls[MQA_NST * MQL_R * MS_KB] __attribute__((aligned(16)));
#endif
    __local uint lx[MQA_NST * MS_T * MQA_XKW] __attribute__((aligned(16)));
    __local float2 lh[MQA_NST * MS_T * MS_KB] __attribute__((aligned(16)));
    int lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane >> 2, q = lane & 3;
    int t0 = MQL_T0, row0 = MQL_ROW0, nb = n_in / 32;
    int ns = (nb + MS_KB - 1) / MS_KB, rw = 16 * MS_MI * warp;
    /* slice MQL_Z of MQL_NZ: steps sb..sb + ns - 1 */
    int sb = ns * MQL_Z / MQL_NZ;
    ns = ns * (MQL_Z + 1) / MQL_NZ - sb;
#if MQA_SN
    uint ss = local_saddr(ls);
#else
    uint ss = 0u; /* the scales are in la */
#endif
    uint sa = local_saddr(la), sx = local_saddr(lx), sh = local_saddr(lh);
    float acc[MS_MI][MS_T / 8][4];
    MMA_ZERO(acc, MS_MI, MS_T / 8);
#pragma unroll
    for (int s = 0; s < MQA_NST - 1; s++) {
        if (s < ns)
            mqa_copy(W_PASS, n_in, n_out, xq, xh, n_tok, lid, row0, t0, (sb + s) * MS_KB,
                     sa + (uint)(s * MQL_R * MQA_AKW * 4), ss + (uint)(s * MQL_R * MS_KB * 8),
                     sx + (uint)(s * MS_T * MQA_XKW * 4), sh + (uint)(s * MS_T * MS_KB * 8) MQL_MROW_PASS);
        CP_COMMIT();
    }
    for (int s = 0; s < ns; s++) {
        /* This step's copies done (each step commits one group, empty or not), seen by all. */
#if MQA_NST == 3
        CP_WAIT(1);
#else
        CP_WAIT(0);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        /* Step s + MQA_NST - 1 into the stage that every warp finished reading at step s - 1. */
        int sn = s + MQA_NST - 1, pn = sn % MQA_NST;
        if (sn < ns)
            mqa_copy(W_PASS, n_in, n_out, xq, xh, n_tok, lid, row0, t0, (sb + sn) * MS_KB,
                     sa + (uint)(pn * MQL_R * MQA_AKW * 4), ss + (uint)(pn * MQL_R * MS_KB * 8),
                     sx + (uint)(pn * MS_T * MQA_XKW * 4), sh + (uint)(pn * MS_T * MS_KB * 8) MQL_MROW_PASS);
        CP_COMMIT();
        int st = s % MQA_NST;
        __local const uint *A = la + st * MQL_R * MQA_AKW, *X = lx + st * MS_T * MQA_XKW;
#if MQA_SN
        __local const float2 *S = ls + st * MQL_R * MS_KB;
#endif
        __local const float2 *H = lh + st * MS_T * MS_KB;
#if MQA_K
#pragma unroll 1 /* the scales' decoding of both sub-blocks at once spills registers */
#else
#pragma unroll
#endif
        for (int kb = 0; kb < MS_KB; kb++) {
            uint a[MS_MI][4]; /* rows g, g + 8: first half (low nibbles), then second */
            float4 f[MS_MI][2];
#pragma unroll
            for (int i = 0; i < MS_MI; i++) {
                int ra = rw + 16 * i + g, rb = ra + 8;
#if MQA_K
                /* Sub-block kb of the step: chunk kb / 2, its nibble by kb's parity (the step
                 * starts on an even sub-block); weights 4q.. are word q, 16 + 4q.. word 4 + q. */
                __local const uint *ha = A + ra * MQA_AKW, *hb = A + rb * MQA_AKW;
                int wq = 4 * (MQA_K5 ? 3 : 1) + 8 * (kb >> 1) + q, nsh = 4 * (kb & 1);
                a[i][0] = (ha[wq] >> nsh) & 0x0F0F0F0Fu;
                a[i][1] = (hb[wq] >> nsh) & 0x0F0F0F0Fu;
                a[i][2] = (ha[wq + 4] >> nsh) & 0x0F0F0F0Fu;
                a[i][3] = (hb[wq + 4] >> nsh) & 0x0F0F0F0Fu;
#if MQA_K5
                /* The fifth bit: bit j of the high-bit bytes of weights 4q.. (word 4 + q) and
                 * 16 + 4q.. (word 8 + q), as bit 4 of each byte. */
                int jh = ((sb + s) * MS_KB + kb) & 7;
                a[i][0] |= ((ha[4 + q] >> jh) & 0x01010101u) << 4;
                a[i][1] |= ((hb[4 + q] >> jh) & 0x01010101u) << 4;
                a[i][2] |= ((ha[8 + q] >> jh) & 0x01010101u) << 4;
                a[i][3] |= ((hb[8 + q] >> jh) & 0x01010101u) << 4;
#endif
                f[i][0] = (float4)(mqa_k4_dm(ha, ((sb + s) * MS_KB + kb) & 7), 0.0f, 0.0f);
                f[i][1] = (float4)(mqa_k4_dm(hb, ((sb + s) * MS_KB + kb) & 7), 0.0f, 0.0f);
#elif MQA_K6
                /* Block kb of the half: weights 4q.. of its first 16 in ql word 8 (kb & 1) + q
                 * (nibble by kb / 2) and qh word q (bits 2 kb..), of the second 16 four words on;
                 * scales kb's pair of the half's eight, times d. */
                __local const uint *ha = A + ra * MQA_AKW, *hb = A + rb * MQA_AKW;
                uint sa_ = ha[MQA_K6SH], sb_ = hb[MQA_K6SH];
                int wl = 8 * (kb & 1) + q, ns = 4 * (kb >> 1), hs = 2 * kb;
                a[i][0] = MQ_SIGNED(((mqa_k6w(ha, wl, sa_) >> ns) & 0x0F0F0F0Fu) |
                                    (((mqa_k6w(ha, 17 + q, sa_) >> hs) & 0x03030303u) << 4));
                a[i][1] = MQ_SIGNED(((mqa_k6w(hb, wl, sb_) >> ns) & 0x0F0F0F0Fu) |
                                    (((mqa_k6w(hb, 17 + q, sb_) >> hs) & 0x03030303u) << 4));
                a[i][2] = MQ_SIGNED(((mqa_k6w(ha, wl + 4, sa_) >> ns) & 0x0F0F0F0Fu) |
                                    (((mqa_k6w(ha, 21 + q, sa_) >> hs) & 0x03030303u) << 4));
                a[i][3] = MQ_SIGNED(((mqa_k6w(hb, wl + 4, sb_) >> ns) & 0x0F0F0F0Fu) |
                                    (((mqa_k6w(hb, 21 + q, sb_) >> hs) & 0x03030303u) << 4));
                uint sca = mqa_k6w(ha, 26 + (kb >> 1), sa_) >> (16 * (kb & 1));
                uint scb = mqa_k6w(hb, 26 + (kb >> 1), sb_) >> (16 * (kb & 1));
                float da = vload_half(sa_ ? 1 : 0, (__local const half *)(ha + 29));
                float db = vload_half(sb_ ? 1 : 0, (__local const half *)(hb + 29));
                f[i][0] = (float4)(da * MQ_F((char)sca), 0.0f, da * MQ_F((char)(sca >> 8)), 0.0f);
                f[i][1] = (float4)(db * MQ_F((char)scb), 0.0f, db * MQ_F((char)(scb >> 8)), 0.0f);
#elif MQA_S8
                /* block kb: weights 4q.. in word 8 kb + q, 16 + 4q.. four words on, one a byte */
                __local const uint *ha = A + ra * MQA_AKW, *hb = A + rb * MQA_AKW;
                a[i][0] = MQ_SIGNED(ha[8 * kb + q]);
                a[i][1] = MQ_SIGNED(hb[8 * kb + q]);
                a[i][2] = MQ_SIGNED(ha[8 * kb + 4 + q]);
                a[i][3] = MQ_SIGNED(hb[8 * kb + 4 + q]);
                float sa0 = as_float(ha[8 * MS_KB + 2 * kb]), sa1 = as_float(ha[8 * MS_KB + 2 * kb + 1]);
                float sb0 = as_float(hb[8 * MS_KB + 2 * kb]), sb1 = as_float(hb[8 * MS_KB + 2 * kb + 1]);
#if MQ_H2 /* Q6_K: the halves' scales (the offset in the signed bytes) */
                f[i][0] = (float4)(sa0, 0.0f, sa1, 0.0f);
                f[i][1] = (float4)(sb0, 0.0f, sb1, 0.0f);
#else /* Q5_K: (d sc, -dmin m) */
                f[i][0] = (float4)(sa0, sa1, 0.0f, 0.0f);
                f[i][1] = (float4)(sb0, sb1, 0.0f, 0.0f);
#endif
#elif MQA_Q8
                __local const uint *ha = A + ra * MQA_AKW, *hb = A + rb * MQA_AKW;
                a[i][0] = mqa_q8w(ha, kb, q);
                a[i][1] = mqa_q8w(hb, kb, q);
                a[i][2] = mqa_q8w(ha, kb, 4 + q);
                a[i][3] = mqa_q8w(hb, kb, 4 + q);
                f[i][0] = (float4)(mqa_q8d(ha, kb), 0.0f, 0.0f, 0.0f);
                f[i][1] = (float4)(mqa_q8d(hb, kb), 0.0f, 0.0f, 0.0f);
#else
                uint w0 = A[ra * MQA_AKW + 4 * kb + q], w1 = A[rb * MQA_AKW + 4 * kb + q];
                a[i][0] = MQ_SIGNED(w0 & 0x0F0F0F0Fu);
                a[i][1] = MQ_SIGNED(w1 & 0x0F0F0F0Fu);
                a[i][2] = MQ_SIGNED((w0 >> 4) & 0x0F0F0F0Fu);
                a[i][3] = MQ_SIGNED((w1 >> 4) & 0x0F0F0F0Fu);
                f[i][0] = (float4)(S[ra * MS_KB + kb], 0.0f, 0.0f);
                f[i][1] = (float4)(S[rb * MS_KB + kb], 0.0f, 0.0f);
#endif
            }
#pragma unroll
            for (int j = 0; j < MS_T / 8; j++) {
                uint bx0 = X[(8 * j + g) * MQA_XKW + 8 * kb + q];
                uint bx1 = X[(8 * j + g) * MQA_XKW + 8 * kb + 4 + q];
                float2 bh0 = H[(8 * j + 2 * q) * MS_KB + kb];
                float2 bh1 = H[(8 * j + 2 * q + 1) * MS_KB + kb];
#pragma unroll
                for (int i = 0; i < MS_MI; i++)
                    mq_frag(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], bx0, bx1, f[i][0],
                            f[i][1], bh0, bh1);
            }
        }
    }
#else
    __local uint la[MQL_R * MQL_KW], lx[MS_T * MQL_KW];
    __local mql_sc ls[MQL_R * MS_KB];
    __local float2 lh[MS_T * MS_KB];
    int lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane >> 2, q = lane & 3;
    int t0 = MQL_T0, row0 = MQL_ROW0, nb = n_in / 32;
    int wk = lid & 3; /* the word of a block this item copies (MQL_NT is a multiple of 4) */
    float acc[MS_MI][MS_T / 8][4];
    MMA_ZERO(acc, MS_MI, MS_T / 8);
    uint wv[MQL_NWI][MQ_NV];
    mql_sc wd[MQL_NWI];
    uint4 xv[MQL_NXI];
    float2 hv[MQL_NHI];
    /* slice MQL_Z of MQL_NZ: blocks bs..be - 1, whole steps */
    int nst = (nb + MS_KB - 1) / MS_KB, bs = MS_KB * (nst * MQL_Z / MQL_NZ);
    int be = min(nb, MS_KB * (nst * (MQL_Z + 1) / MQL_NZ));
#if MQL_PF
    if (bs < be)
        mql_fetch(W_PASS, n_in, n_out, xq, xh, n_tok, lid, row0, t0, bs, wv, wd, xv, hv MQL_MROW_PASS);
#endif
    for (int b0 = bs; b0 < be; b0 += MS_KB) {
#if !MQL_PF
        mql_fetch(W_PASS, n_in, n_out, xq, xh, n_tok, lid, row0, t0, b0, wv, wd, xv, hv MQL_MROW_PASS);
#endif
        /* The registers into local memory. */
#pragma unroll
        for (int n = 0; n < MQL_NWI; n++) {
            int it = lid + n * MQL_NT, kb = (it >> 2) % MS_KB, r = (it >> 2) / MS_KB;
            __local uint *a = la + r * MQL_KW + 8 * kb + wk;
#if defined(MQ_QW8)
            a[0] = MQ_SIGNED(wv[n][0]);
            a[4] = MQ_SIGNED(wv[n][1]);
#else
            a[0] = MQ_SIGNED(wv[n][0] & 0x0F0F0F0Fu);
            a[4] = MQ_SIGNED((wv[n][0] >> 4) & 0x0F0F0F0Fu);
#endif
            if (wk == 0)
                ls[r * MS_KB + kb] = wd[n];
        }
#pragma unroll
        for (int n = 0; n < MQL_NXI; n++) {
            int it = lid + n * MQL_NT;
            if (it < MS_T * MS_KB * 2) {
                int h = it & 1, kb = (it >> 1) % MS_KB, t = (it >> 1) / MS_KB;
                vstore4(xv[n], 0, lx + t * MQL_KW + 8 * kb + 4 * h);
            }
        }
#pragma unroll
        for (int n = 0; n < MQL_NHI; n++) {
            int it = lid + n * MQL_NT;
            if (it < MS_T * MS_KB)
                lh[it] = hv[n];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (MQL_PF && b0 + MS_KB < be)
            mql_fetch(W_PASS, n_in, n_out, xq, xh, n_tok, lid, row0, t0, b0 + MS_KB, wv, wd, xv,
                      hv MQL_MROW_PASS);
#pragma unroll 1
        for (int kb = 0; kb < MS_KB; kb++) {
            int rw = 16 * MS_MI * warp;
#if MV_PTX
            uint a[MS_MI][4]; /* rows g, g + 8: first half, then second */
            mql_sc f[MS_MI][2];
#pragma unroll
            for (int i = 0; i < MS_MI; i++) {
                int ra = rw + 16 * i + g, rb = ra + 8;
                a[i][0] = la[ra * MQL_KW + 8 * kb + q];
                a[i][1] = la[rb * MQL_KW + 8 * kb + q];
                a[i][2] = la[ra * MQL_KW + 8 * kb + 4 + q];
                a[i][3] = la[rb * MQL_KW + 8 * kb + 4 + q];
                f[i][0] = ls[ra * MS_KB + kb];
                f[i][1] = ls[rb * MS_KB + kb];
            }
#pragma unroll
            for (int j = 0; j < MS_T / 8; j++) {
                uint bx0 = lx[(8 * j + g) * MQL_KW + 8 * kb + q];
                uint bx1 = lx[(8 * j + g) * MQL_KW + 8 * kb + 4 + q];
                float2 bh[2] = {lh[(8 * j + 2 * q) * MS_KB + kb],
                                lh[(8 * j + 2 * q + 1) * MS_KB + kb]};
#pragma unroll
                for (int i = 0; i < MS_MI; i++)
                    mq_frag(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], bx0, bx1,
                            MQL_F4(f[i][0]), MQL_F4(f[i][1]), bh[0], bh[1]);
            }
#else
            /* The stand-in: this lane's fragment elements from the staged words in integers
             * (the quant bytes unsigned, the offset through the inputs' sums, as matmul_mmq's). */
            for (int i = 0; i < MS_MI; i++)
                for (int r = 0; r < 2; r++) {
                    int row = rw + 16 * i + g + 8 * r;
                    mql_sc dm = ls[row * MS_KB + kb];
                    for (int j = 0; j < MS_T / 8; j++)
                        for (int c = 0; c < 2; c++) {
                            int t = 8 * j + 2 * q + c, s0 = 0, s1 = 0, u0 = 0, u1 = 0;
                            for (int k = 0; k < 4; k++) {
                                char4 w0 = as_char4(la[row * MQL_KW + 8 * kb + k]);
                                char4 w1 = as_char4(la[row * MQL_KW + 8 * kb + 4 + k]);
                                char4 x0 = as_char4(lx[t * MQL_KW + 8 * kb + k]);
                                char4 x1 = as_char4(lx[t * MQL_KW + 8 * kb + 4 + k]);
                                s0 += w0.x * x0.x + w0.y * x0.y + w0.z * x0.z + w0.w * x0.w;
                                s1 += w1.x * x1.x + w1.y * x1.y + w1.z * x1.z + w1.w * x1.w;
                                u0 += x0.x + x0.y + x0.z + x0.w;
                                u1 += x1.x + x1.y + x1.z + x1.w;
                            }
                            float2 x = lh[t * MS_KB + kb];
#if MQ_H2
                            acc[i][j][2 * r + c] += x.x * ((float)s0 * dm.x + dm.y * (float)u0 +
                                                           (float)s1 * dm.z + dm.w * (float)u1);
#else
                            (void)u0, (void)u1;
                            acc[i][j][2 * r + c] += x.x * ((float)s0 + (float)s1) * dm.x + dm.y * x.y;
#endif
                        }
                }
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif
    /* MQL_EACH(code): code for each of the work-item's fragment sums acc[i][j][e], at row and
     * tok of the product (rows past n_out and tokens past n_tok skipped). */
#define MQL_EACH(...)                                                                              \
    _Pragma("unroll") for (int i = 0; i < MS_MI; i++)                                              \
        _Pragma("unroll") for (int j = 0; j < MS_T / 8; j++)                                       \
            _Pragma("unroll") for (int e = 0; e < 4; e++)                                          \
    {                                                                                              \
        int row = row0 + 16 * MS_MI * warp + 16 * i + g + (e >> 1) * 8;                           \
        int tok = t0 + 8 * j + 2 * q + (e & 1);                                                    \
        if (row < n_out && tok < n_tok) {                                                          \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    }
#if defined(MQL_G) && MQL_G
    MQL_EACH(int pr = perm[tl.y + tok];
             y[(size_t)(pr / k) * y_ld + y_off + (size_t)(pr % k) * n_rows + (row - wb)] =
                 acc[i][j][e];)
#else
    /* With slices (global size MQL_NZ along dimension 2, ebb's MMQS_SPLIT): each work-group
     * leaves its slice's sums in part (MQL_NZ planes of n_tok x n_out), then counts itself in its
     * tile's cnt; the tile's last work-group (which resets the count for the next product) adds
     * the planes up in plane order, so that the result does not depend on which slice ended
     * last, and writes y as below. */
    if (MQL_NZ > 1) {
        __global float *pz = part + (size_t)MQL_Z * n_tok * n_out;
        MQL_EACH(pz[(size_t)tok * n_out + row] = acc[i][j][e];)
        GLOBAL_FENCE();
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        if (lid == 0) {
            int c = (int)get_group_id(0) + (int)get_num_groups(0) * (int)get_group_id(1);
            zlast = atomic_inc(cnt + c) == MQL_NZ - 1;
            if (zlast)
                atomic_xchg(cnt + c, 0);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!zlast)
            return;
        GLOBAL_FENCE();
        __global const volatile float *pv = part;
        MQL_EACH(float v = 0.0f; for (int z = 0; z < MQL_NZ; z++) v +=
                 pv[((size_t)z * n_tok + tok) * n_out + row];
                 acc[i][j][e] = v;)
    }
    MQL_EACH(float v = acc[i][j][e]; if (res) v += res[(size_t)tok * y_ld + y_off + row];
             WRITE_Y(y, tok, y_off + row, v);)
#endif
#undef MQL_EACH
}
#undef MQL_T0
#undef MQL_ROW0
#undef MQL_NZ
#undef MQL_Z

/* How this build of matmul_mmql stages its tiles, for reports (`ebb bench`'s kernels line):
 * o[0] = the cp.async stages (0: through registers). One work-item. */
__kernel void mmql_info(__global int *o)
{
#if MQL_A
    o[0] = MQA_NST;
#else
    o[0] = 0;
#endif
}
#endif

#if defined(W_QK8N) && defined(W_RAW)
/* Raw Q4_K rows rewritten as split Q4_1 planes for prefill's int8 products (the host's K4SPLIT:
 * matmul_mmql of the split Q4_1 program then reads 16 quant bytes and a (d, m) a block, with no
 * super-block header to decode in its inner loop). Block b (row b / (n_in / 32), sub-block kb =
 * b % (n_in / 32)) goes to qa[b] in Q4_1's order (byte i: weight i in the low nibble, weight
 * 16 + i in the high) and qs[b] = (d sc, -dmin m), the floats W_QK8N gives the raw path, so the
 * weights are the same numbers. One work-item a block; global size n_out n_in / 32 rounded up. */
__kernel void k4_split(W_ARGS, int n_in, int n_out, __global uint4 *qa, __global float2 *qs)
{
    size_t b = get_global_id(0), nb = (size_t)(n_in / 32);
    if (b >= (size_t)n_out * nb)
        return;
    int o = (int)(b / nb), kb = (int)(b % nb);
    uint v[4][2];
    float4 dm = (float4)(0.0f);
#pragma unroll
    for (int k = 0; k < 4; k++)
        W_QK8N(o, kb, k, &v[k][0], &v[k][1], &dm);
    qa[b] = (uint4)(v[0][0] | v[0][1] << 4, v[1][0] | v[1][1] << 4, v[2][0] | v[2][1] << 4,
                    v[3][0] | v[3][1] << 4);
    qs[b] = dm.xy;
}
#endif

#if defined(W_QW8) && (defined(W_QH2) || defined(W_Q5K)) && defined(W_RAW) &&                     \
    !(defined(MQL_S8H) && MQL_S8H)
/* Raw Q6_K or Q5_K rows rewritten for prefill's int8 products (the host's K8SPLIT; read back by
 * MQL_S8H's qw8_s8h and staging, above): block b's 32 values a byte at qa + 32 b (W_QW8's words
 * in order), at qs[b] (qs = (float2 *)(qa + 32 n_out n_in / 32)) Q6_K's halves' scales
 * (d s0, d s1) or Q5_K's (d sc, -dmin m). One work-item a block; global size n_out n_in / 32
 * rounded up. */
__kernel void k8_split(W_ARGS, int n_in, int n_out, __global uint *qa)
{
    size_t b = get_global_id(0), nb = (size_t)(n_in / 32);
    if (b >= (size_t)n_out * nb)
        return;
    int o = (int)(b / nb), kb = (int)(b % nb);
    float4 dm = (float4)(0.0f);
    uint v[4][2];
#pragma unroll
    for (int k = 0; k < 4; k++)
        W_QW8(o, kb, k, &v[k][0], &v[k][1], &dm);
    __global uint4 *q4 = (__global uint4 *)(qa + 8 * b);
    q4[0] = (uint4)(v[0][0], v[1][0], v[2][0], v[3][0]);
    q4[1] = (uint4)(v[0][1], v[1][1], v[2][1], v[3][1]);
#if defined(W_QH2)
    ((__global float2 *)(qa + 8 * (size_t)n_out * nb))[b] = dm.xz;
#else
    ((__global float2 *)(qa + 8 * (size_t)n_out * nb))[b] = dm.xy;
#endif
}
#endif

/* matmul_mmq's inputs: n_tok rows of x (stride x_ld, n_in inputs, a multiple of 32) as int8
 * blocks of 32 at xq + t n_in and a (d, d s) for each at xh + t n_in / 32 (see matmul_mmq),
 * rounded as q8.cl rounds (q8_scale, q8_round). Eight work-items a block, each loading and
 * storing 4 of its values (a warp's loads and stores contiguous), the block's largest magnitude
 * and sum through local memory. Global size (round_up(n_in / 4, 64), n_tok), local (64, 1)
 * (ebb_cl_mmq_quantize_shape). */
/* mmq_quantize's block of work-item l (lane j of 8) holding v of row t's block b (in: b within
 * the row), am and sm its work-group's local arrays. Returns what the rounding left of v
 * (v - d q), the second pass's input (mmq_quant_res). */
inline float4 mmq_quant4(float4 v, bool in, int l, int j, int b, size_t t, int n_in,
                       __global char *xq, __global float2 *xh, __local float *am, __local int *sm)
{
    int l0 = l & ~7;
    float4 a = fabs(v);
    am[l] = fmax(fmax(a.x, a.y), fmax(a.z, a.w));
    barrier(CLK_LOCAL_MEM_FENCE);
    float amax = am[l0];
#pragma unroll
    for (int u = 1; u < 8; u++)
        amax = fmax(amax, am[l0 + u]);
    float d = q8_scale(amax);
#if MQ_JIT
    d *= 1.0f + 1e-6f * (float)MQ_JIT; /* MMQ_JITTER: accuracy studies only */
#endif
    int4 qi = (int4)(q8_round(v.x, d), q8_round(v.y, d), q8_round(v.z, d), q8_round(v.w, d));
    sm[l] = qi.x + qi.y + qi.z + qi.w;
    barrier(CLK_LOCAL_MEM_FENCE);
    float4 left = v - d * convert_float4(qi);
    if (!in)
        return left;
    ((__global char4 *)(xq + t * n_in + 32 * b))[j] = convert_char4(qi);
    if (j == 0) {
        int s = 0;
#pragma unroll
        for (int u = 0; u < 8; u++)
            s += sm[l0 + u];
        xh[t * (n_in / 32) + b] = (float2)(d, d * (float)s);
    }
    return left;
}

/* MMQ_RES's two passes: v rounded into xq / xh as mmq_quantize rounds it, and what that left
 * rounded the same way into xq2 / xh2 (a block's second scale about 1/254 of its first), so that
 * the sum of the two int8 products (matmul_mmql run on each, the second adding to the first's
 * output) carries about 15 bits of each input instead of 8. Every work-item of the group calls
 * it (the barriers of both passes). */
inline void mmq_quant_res(float4 v, bool in, int l, int j, int b, size_t t, int n_in,
                          __global char *xq, __global float2 *xh, __global char *xq2,
                          __global float2 *xh2, __local float *am, __local int *sm)
{
    float4 left = mmq_quant4(v, in, l, j, b, t, n_in, xq, xh, am, sm);
    barrier(CLK_LOCAL_MEM_FENCE); /* am and sm are the second pass's */
    mmq_quant4(left, in, l, j, b, t, n_in, xq2, xh2, am, sm);
}

/* A quantize kernel's work-item: its group's local arrays am and sm (mmq_quant4's), lane j of 8
 * in block b of row t, in: b within the row (past it: no loads or stores, but in the barriers). */
#define MQ_ITEM                                                                                    \
    __local float am[64];                                                                          \
    __local int sm[64];                                                                            \
    int l = get_local_id(0), j = l & 7, b = get_global_id(0) >> 3;                                 \
    size_t t = get_global_id(1);                                                                   \
    bool in = b < n_in / 32

__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void
mmq_quantize(__global const float *x, int x_ld, int n_in, __global char *xq, __global float2 *xh)
{
    MQ_ITEM;
    float4 v = in ? ((const __global float4 *)(x + t * x_ld + 32 * b))[j] : (float4)(0.0f);
    mmq_quant4(v, in, l, j, b, t, n_in, xq, xh, am, sm);
}

/* mmq_quantize in two passes (mmq_quant_res; MMQ_RES): x's rows into xq / xh as mmq_quantize
 * writes them, what their rounding left into xq2 / xh2. Same shape as mmq_quantize. */
__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void
mmq_quantize_res(__global const float *x, int x_ld, int n_in, __global char *xq,
                 __global float2 *xh, __global char *xq2, __global float2 *xh2)
{
    MQ_ITEM;
    float4 v = in ? ((const __global float4 *)(x + t * x_ld + 32 * b))[j] : (float4)(0.0f);
    mmq_quant_res(v, in, l, j, b, t, n_in, xq, xh, xq2, xh2, am, sm);
}

/* The RMS norm of x's row t times nw as ops.cl's rmsnorm computes it, for work-item l's 4
 * values of block b (zeros past the row: in false); am the work-group's 64 floats, free again
 * on return. Every work-item of the group calls it. */
inline float4 mmq_norm4(const __global float *xr, int n_in, const __global float *nw, float eps,
                        int l, int j, int b, bool in, __local float *am)
{
    am[l] = l < NORM_WG ? norm_sq_part(xr, n_in, l) : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = NORM_WG / 2; h > 0; h >>= 1) {
        if (l < h)
            am[l] += am[l + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float inv = rsqrt(am[0] / n_in + eps);
    barrier(CLK_LOCAL_MEM_FENCE); /* am is mmq_quant4's next */
    return in ? vload4(j, xr + 32 * b) * inv * vload4(j, nw + 32 * b) : (float4)(0.0f);
}

/* mmq_quantize of the RMS norm of each row times nw, the same floats as ops.cl's rmsnorm writes
 * (its first NORM_WG work-items sum the squares as it does, act.cl's norm_sq_part, and add them
 * up in its tree; the scaling in its order), so that a norm and the products after it are one launch fewer with the
 * same results: each work-group sums its row itself (read again from cache by each of its
 * n_in / 256 work-groups). Same shape as mmq_quantize; NORM_WG at most 64. */
__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void
mmq_quantize_norm(__global const float *x, int x_ld, int n_in, __global const float *nw,
                  float eps, __global char *xq, __global float2 *xh)
{
    MQ_ITEM;
    float4 v = mmq_norm4(x + t * x_ld, n_in, nw, eps, l, j, b, in, am);
    mmq_quant4(v, in, l, j, b, t, n_in, xq, xh, am, sm);
}

/* mmq_quantize_norm in two passes (mmq_quant_res; MMQ_RES). Same shape as mmq_quantize. */
__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void
mmq_quantize_norm_res(__global const float *x, int x_ld, int n_in, __global const float *nw,
                      float eps, __global char *xq, __global float2 *xh, __global char *xq2,
                      __global float2 *xh2)
{
    MQ_ITEM;
    float4 v = mmq_norm4(x + t * x_ld, n_in, nw, eps, l, j, b, in, am);
    mmq_quant_res(v, in, l, j, b, t, n_in, xq, xh, xq2, xh2, am, sm);
}

/* mmq_quantize of the SwiGLU of gate and up outputs: row p (pair p of token p / k, expert slot
 * j = p % k) is silu(g) u of x[(p / k) x_ld + j n_in + i] and x[(p / k) x_ld + (k + j) n_in + i],
 * each value as ops.cl's swiglu computes it (act.cl's silu_mul). With k 1 the dense products'
 * [gate | up] rows (MMQ_FOLD: the down product's input in one launch, the same floats as swiglu
 * and mmq_quantize); with the experts' k, moe_group_mms's outputs (moe_group_mmql's down
 * inputs). Same shape as mmq_quantize. */
__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void
mmq_quantize_glu(__global const float *x, int x_ld, int n_in, int k, __global char *xq,
                 __global float2 *xh)
{
    MQ_ITEM;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const __global float *gp = x + (t / k) * x_ld + (t % k) * n_in + 32 * b + 4 * j;
    for (int u = 0; in && u < 4; u++)
        v[u] = silu_mul(gp[u], gp[k * n_in + u]);
    mmq_quant4((float4)(v[0], v[1], v[2], v[3]), in, l, j, b, t, n_in, xq, xh, am, sm);
}
#endif

#if MS_T == 16
/* moe_group_mms: moe.cl's grouped prefill products (moe_group_gu's gate and up, moe_group_down's
 * down) on tensor cores: matmul_mms's tile with one tile of pairs (moe.cl's MOE_GT = 16, its
 * tiles and perm) for its tokens, and the rows of the pairs' expert e (rows e n_rows + r of the
 * stacked weight). y[t y_ld + y_off + j n_rows + r] = W[e n_rows + r] . in(t, j) for each pair
 * t k + j of the tile: in the pair's token's row of x (glu 0; moe_group_gu's places), or (glu 1)
 * the SwiGLU of its gate and up outputs x[t][j n_in + i] and x[t][(k + j) n_in + i]
 * (moe_group_down's yp with y_ld = k n_rows, y_off 0). Global (32 MS_W ceil(n_rows / MS_R),
 * n_tiles), local (32 MS_W, 1). */
__kernel __attribute__((reqd_work_group_size(32 * MS_W, 1, 1))) void
moe_group_mms(W_ARGS, int n_in, int n_rows, int k, __global const int4 *tiles,
              __global const int *perm, __global const float *x, int x_ld, int glu,
              __global float *y, int y_ld, int y_off)
{
    __local float part[MS_W > 1 ? MS_W / 2 : 1][MS_R * MS_T];
    int lid = get_local_id(0), warp = lid / 32, lane = lid % 32, g = lane >> 2, q = lane & 3;
    int4 tl = tiles[get_group_id(1)];
    int row0 = get_group_id(0) * MS_R, up = glu ? k * n_in : -1;
    float acc[MS_MI][MS_NJ][4];
    MMA_ZERO(acc, MS_MI, MS_NJ);
    int wrow[MS_MI][2];
#pragma unroll
    for (int i = 0; i < MS_MI; i++) {
        wrow[i][0] = tl.x * n_rows + min(row0 + 16 * i + g, n_rows - 1);
        wrow[i][1] = tl.x * n_rows + min(row0 + 16 * i + g + 8, n_rows - 1);
    }
    /* The input row of the tile's s-th pair (the last pair's past the tile). */
#define MG_ROW(s)                                                                                  \
    (x + (size_t)(perm[tl.y + min((s), tl.z - 1)] / k) * x_ld +                                   \
     (glu ? (size_t)(perm[tl.y + min((s), tl.z - 1)] % k) * n_in : 0))
    const __global float *xt[MS_NJ], *xs[MS_NJ][2];
#pragma unroll
    for (int j = 0; j < MS_NJ; j++) {
        xt[j] = MG_ROW(8 * j + g);
        xs[j][0] = MG_ROW(8 * j + 2 * q);
        xs[j][1] = MG_ROW(8 * j + 2 * q + 1);
    }
#undef MG_ROW
    ms_products(W_PASS, n_in, warp, lane, wrow, xt, xs, up, acc);
    ms_reduce(part, warp, lane, acc);
    if (warp == 0)
#pragma unroll
        for (int i = 0; i < MS_MI; i++)
#pragma unroll
            for (int j = 0; j < MS_NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int r = row0 + 16 * i + g + (e >> 1) * 8, s = 8 * j + 2 * q + (e & 1);
                    if (r < n_rows && s < tl.z) {
                        int pr = perm[tl.y + s];
                        y[(size_t)(pr / k) * y_ld + y_off + (size_t)(pr % k) * n_rows + r] =
                            acc[i][j][e];
                    }
                }
}
#endif
#endif
