/* Quantization formats on the CPU: the block layouts of ggml's tensor types, conversion between
 * fp16/bf16 and fp32, dequantization of rows to float, a row dot product against a float vector,
 * and quantization from float for the simple block types. This is the reference the OpenCL
 * kernels are tested against, so it favours plain, obviously-correct code over speed.
 *
 * All functions are pure (no global state) and may be called from any thread. Rows are given as
 * n elements; n must be a multiple of the type's block size (32 for the Q*_0/Q*_1 types, 256
 * for the K-quants, 1 for F32/F16/BF16). */
#ifndef EBB_RUNTIME_QUANT_H
#define EBB_RUNTIME_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

/* Elements per block. */
#define EBB_QK4_0 32
#define EBB_QK4_1 32
#define EBB_QK5_0 32
#define EBB_QK5_1 32
#define EBB_QK8_0 32
#define EBB_QK_K 256
#define EBB_K_SCALE_SIZE 12

/* Block layouts, byte for byte as in the GGUF file. Every member is a byte array or an aligned
 * 16-bit value, so the structs have no padding and sizeof() equals the file's type_size (checked
 * by _Static_assert in quant.c). `d`/`m`/`dmin` are IEEE fp16 bit patterns. In the file, blocks
 * are only 2-byte aligned (Q8_K: 4), so read them through these structs only from memory that is
 * at least that aligned (the GGUF data section is). */

/* 32 weights: w = d * (q - 8), q in [0, 15]. qs[j] low nibble is element j, high nibble j+16. */
struct ebb_block_q4_0 {
    uint16_t d;
    uint8_t qs[EBB_QK4_0 / 2];
};
/* 32 weights: w = d * q + m, q in [0, 15]; nibbles as in Q4_0. */
struct ebb_block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[EBB_QK4_1 / 2];
};
/* 32 weights: w = d * (q - 16), q in [0, 31]; low 4 bits as in Q4_0, bit 4 of element j is bit
 * j of the little-endian 32-bit qh. */
struct ebb_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[EBB_QK5_0 / 2];
};
/* 32 weights: w = d * q + m, q in [0, 31]; bits as in Q5_0. */
struct ebb_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[EBB_QK5_1 / 2];
};
/* 32 weights: w = d * q, q in [-128, 127]. */
struct ebb_block_q8_0 {
    uint16_t d;
    int8_t qs[EBB_QK8_0];
};
/* 256 weights in 16 groups of 16: w = d * (scales[g] & 15) * q - dmin * (scales[g] >> 4), q in
 * [0, 3]. Within each half of 128, byte l of qs (32 bytes) holds, at bit shift 2s, element
 * 32s + l. */
struct ebb_block_q2_k {
    uint8_t scales[EBB_QK_K / 16];
    uint8_t qs[EBB_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
};
/* 256 weights in 16 groups of 16: w = d * (s[g] - 32) * (q - (hbit ? 0 : 4)), q in [0, 3] laid
 * out as in Q2_K, hbit of element i at bit (i / 32) of hmask[i % 32]. The 16 six-bit scales s[g]
 * are packed into 12 bytes: low 4 bits from scales[g % 8] (low nibble for g < 8, high nibble
 * otherwise), high 2 bits from scales[8 + g % 4] at bit shift 2 * (g / 4). */
struct ebb_block_q3_k {
    uint8_t hmask[EBB_QK_K / 8];
    uint8_t qs[EBB_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
/* 256 weights in 8 groups of 32: w = d * sc[g] * q - dmin * mn[g], q in [0, 15]. In each
 * 64-element chunk c, byte l of qs[32c..32c+32) holds element 64c + l (low nibble) and
 * 64c + 32 + l (high nibble). The six-bit sc/mn are packed into 12 bytes (see
 * ebb_quant_k4_scale_min). */
struct ebb_block_q4_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[EBB_K_SCALE_SIZE];
    uint8_t qs[EBB_QK_K / 2];
};
/* Like Q4_K with a fifth bit: element 64c + l takes bit 2c of qh[l], element 64c + 32 + l bit
 * 2c + 1; q in [0, 31]. */
struct ebb_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[EBB_K_SCALE_SIZE];
    uint8_t qh[EBB_QK_K / 8];
    uint8_t qs[EBB_QK_K / 2];
};
/* 256 weights in 16 groups of 16: w = d * scales[g] * (q - 32), q in [0, 63]; low 4 bits in ql,
 * high 2 bits in qh (see quant.c for the exact interleave). */
struct ebb_block_q6_k {
    uint8_t ql[EBB_QK_K / 2];
    uint8_t qh[EBB_QK_K / 4];
    int8_t scales[EBB_QK_K / 16];
    uint16_t d;
};
/* Activation format: w = d * q, d an fp32; bsums[g] = sum of qs over group g of 16. */
struct ebb_block_q8_k {
    float d;
    int8_t qs[EBB_QK_K];
    int16_t bsums[EBB_QK_K / 16];
};

/* IEEE half and bfloat16 conversions (round to nearest even; NaN and Inf preserved). */
float ebb_fp16_to_fp32(uint16_t h);
uint16_t ebb_fp32_to_fp16(float f);
float ebb_bf16_to_fp32(uint16_t b);
uint16_t ebb_fp32_to_bf16(float f);

/* Unpacks the six-bit scale and min of group j (0..7) of a Q4_K/Q5_K block's 12 scale bytes. */
void ebb_quant_k4_scale_min(const uint8_t *scales, int j, uint8_t *sc, uint8_t *mn);

/* True if dequantize/dot below handle this ggml type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K). */
bool ebb_quant_supported(uint32_t type);

/* True if ebb_quant_quantize_row handles this type (F32, F16, BF16, Q4_0, Q4_1, Q8_0). */
bool ebb_quant_can_quantize(uint32_t type);

/* Dequantizes n elements of type from src (a row in the file's layout) into dst[0..n).
 * EBB_EUNSUPPORTED for an unknown type, EBB_EINVAL if n is not a multiple of the block size. */
ebb_err ebb_quant_dequantize_row(uint32_t type, const void *src, float *dst, uint64_t n);

/* Row dot product: *out = sum_i w[i] * x[i] over n elements of a quantized row and a float
 * vector, accumulated in float per block and summed in double across blocks (no rounding of x
 * to a quantized activation format, unlike llama.cpp's CPU path). Errors as dequantize_row. */
ebb_err ebb_quant_dot_row(uint32_t type, const void *row, const float *x, uint64_t n, float *out);

/* The same dot product as a function pointer for hot loops (the reference forward pass); NULL
 * for unsupported types. The caller guarantees n is a multiple of the block size. */
typedef float (*ebb_quant_dot_fn)(const void *row, const float *x, uint64_t n);
ebb_quant_dot_fn ebb_quant_get_dot(uint32_t type);

/* Quantizes n floats into dst, which must hold ebb_ggml_row_bytes(type, n) bytes. Scales are
 * chosen as ggml's reference quantizers do (Q4_0: d = max-magnitude value / -8; Q4_1: range /
 * 15; Q8_0: max |x| / 127; round to nearest), so a round trip is within half a step per
 * element. EBB_EUNSUPPORTED for types ebb_quant_can_quantize() rejects. */
ebb_err ebb_quant_quantize_row(uint32_t type, const float *src, void *dst, uint64_t n);

/* Activation quantization as llama.cpp's CPU backend does it before a quantized matrix product
 * (Q8_0/Q8_1): per block of 32, d = max|x| / 127 and q = round(x / d); the stored d and the
 * block sum s = d * sum(q) are rounded to fp16. The reference backend's "ref-q8" mode uses this
 * to reproduce llama.cpp's numbers closely; the default reference keeps activations in fp32. */
struct ebb_q8_act {
    float d; /* fp16-rounded scale */
    float s; /* fp16-rounded d * sum(q) (used by the Q*_1 types) */
    int8_t q[32];
};

/* Quantizes n floats (a multiple of 32) into n / 32 blocks. */
void ebb_quant_q8_act_row(const float *x, uint64_t n, struct ebb_q8_act *out);

/* True for the weight types ebb_quant_dot_q8_act handles: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0. */
bool ebb_quant_q8_act_supported(uint32_t type);

/* Dot product of a weight row with quantized activations, as llama.cpp computes it: per block
 * d_w * d_x * sum(q_w * q_x) (+ m_w * s_x for the Q*_1 types), summed in float. The caller
 * guarantees a supported type and n a multiple of 32. */
float ebb_quant_dot_q8_act(uint32_t type, const void *row, const struct ebb_q8_act *x, uint64_t n);

/* Q8_K activations (llama.cpp's format for the K-quant products): per block of 256, d = the
 * element of largest magnitude / -127 (fp32), q = round(x / d) half to even, bsums the sums of
 * each 16 q. Quantizes n floats (a multiple of 256) into n / 256 blocks. */
void ebb_quant_q8k_act_row(const float *x, uint64_t n, struct ebb_block_q8_k *out);

/* True for the weight types ebb_quant_dot_q8k_act handles: Q4_K, Q5_K, Q6_K. */
bool ebb_quant_q8k_act_supported(uint32_t type);

/* Dot product of a K-quant row with Q8_K activations: per super-block the integer sum of the
 * groups' scales times sum(q_w * q_x) (and of the mins times the activations' group sums), then
 * d_w * d_x * that in float, summed in float. The caller guarantees a supported type and n a
 * multiple of 256. */
float ebb_quant_dot_q8k_act(uint32_t type, const void *row, const struct ebb_block_q8_k *x,
                            uint64_t n);

/* quant-simd.c: the 8-bit products above for one weight type as a function pointer, act being
 * struct ebb_q8_act blocks (ebb_quant_q8_act_supported types) or struct ebb_block_q8_k blocks
 * (ebb_quant_q8k_act_supported types); NULL for other types. With simd, the version for this
 * CPU's vector unit (AVX2 on x86-64, detected at run time; none yet on arm64) where one
 * exists, else the scalar one; both give the same bits, because the integer
 * sums are exact and the float steps are the same in the same order. */
typedef float (*ebb_quant_dot_act_fn)(const void *row, const void *act, uint64_t n);
ebb_quant_dot_act_fn ebb_quant_get_dot_act(uint32_t type, bool simd);
/* The same product for four tokens at once (act, act + stride, .. bytes apart), each out[t]
 * the bits ebb_quant_get_dot_act(type, true) gives for its token: the weights are unpacked once
 * for all four (the blocked product of a prefill). Every type above; NULL where this CPU has
 * no SIMD version. */
typedef void (*ebb_quant_dot_act4_fn)(const void *row, const void *act, uint64_t stride, uint64_t n,
                                      float *out);
ebb_quant_dot_act4_fn ebb_quant_get_dot_act4(uint32_t type);
/* The same for eight tokens (out[0..7]), for the 32-block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0):
 * with VNNI's dpbusd where the CPU has it (ebb_quant_simd_vnni), else AVX2; NULL elsewhere and for
 * other types. */
ebb_quant_dot_act4_fn ebb_quant_get_dot_act8(uint32_t type);
/* One token against four weight rows (row, row + row_bytes, ..): out[r] has the bits
 * ebb_quant_get_dot_act(type, true) gives for row r; the token's blocks are loaded once for
 * the four (decode's products on the file's rows). The 32-block types, with AVX-VNNI or AVX2
 * as ebb_quant_get_dot_act8; NULL elsewhere and for other types. */
typedef void (*ebb_quant_dot_rows4_fn)(const void *row, uint64_t row_bytes, const void *act,
                                       uint64_t n, float *out);
ebb_quant_dot_rows4_fn ebb_quant_get_dot_rows4(uint32_t type);
/* The dpbusd ebb_quant_get_dot_act8, ebb_quant_get_dot_rows4 and ebb_quant_get_rp8 take on this
 * CPU: 1 AVX-VNNI, 2 AVX512-VNNI on 256-bit vectors (AVX512VL), 0 none, where they use AVX2's
 * maddubs + madd (EBB_CPU_VNNI=0: 0 always, so that the tests reach the AVX2 versions too). */
int ebb_quant_simd_vnni(void);
/* quant-simd.c: ebb_quant_q8_act_row and ebb_quant_q8k_act_row with AVX2 (and F16C) where the
 * CPU has them, else the same functions; the same bits for finite inputs. */
void ebb_quant_q8_act_row_fast(const float *x, uint64_t n, struct ebb_q8_act *out);
void ebb_quant_q8k_act_row_fast(const float *x, uint64_t n, struct ebb_block_q8_k *out);
/* quant-repack.c: weights repacked for blocked products, eight rows at a time (the CPU
 * device's prefill; the layouts are in quant-repack.c). ebb_quant_get_rp8 gives the product for
 * a type (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K) where this CPU has AVX2, else NULL;
 * ebb_quant_rp8_bytes the bytes of one group of 8 rows of n elements (0 where get_rp8 is NULL);
 * ebb_quant_rp8_pack writes the group of rows[0..7] (row_bytes apart, the file's layout) into dst.
 * The product takes ng consecutive groups (grp, grp + ebb_quant_rp8_bytes(type, n), ..) and writes
 * out[8 * (i * nt + t) + r] = row r of group i times token t's activations (act + t * stride bytes,
 * blocks as for ebb_quant_get_dot_act) for t < nt, each with the bits ebb_quant_get_dot_act(type,
 * true) gives; asum holds, for Q5_0, the integer sums of every token's activation blocks (n / 32 a
 * token, token after token; ebb_quant_q8_act_sums), and is unused (may be NULL) for the
 * K-quants. */
typedef void (*ebb_quant_rp8_fn)(const void *grp, const void *act, uint64_t stride,
                                 const int32_t *asum, uint64_t n, int ng, int nt, float *out);
ebb_quant_rp8_fn ebb_quant_get_rp8(uint32_t type);
uint64_t ebb_quant_rp8_bytes(uint32_t type, uint64_t n);
void ebb_quant_rp8_pack(uint32_t type, const void *rows, uint64_t row_bytes, uint64_t n, void *dst);
/* out[ib] = the sum of the 32 q of block ib, for ib < nb. */
void ebb_quant_q8_act_sums(const struct ebb_q8_act *x, uint64_t nb, int32_t *out);
/* The vector unit ebb_quant_get_dot_act(.., true) uses: "avx2" (with ", avx-vnni" or ",
 * avx512-vnni" where the eight-token, four-row and repacked products take it) or "scalar". */
const char *ebb_quant_simd_name(void);

#endif
