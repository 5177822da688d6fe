/* Tensor cores from OpenCL on NVIDIA: inline PTX mma.sync (sm_80 and later), used by matmul-mma.cl's
 * matmul_mma for prefill when the device passed the start-up probe (mma_probe below, run by
 * ebb_cl_mma_probe). The fragment layouts are PTX's for m16n8k16 with f16 inputs and f32
 * accumulators; a warp of 32 work-items holds one tile, lane = 4 * g + q:
 *   A (16 x 16, row-major): a0 = rows g, k 2q..2q+1; a1 = row g + 8; a2 = row g, k 2q+8..;
 *                            a3 = row g + 8, k 2q+8..   (two halves per register, lower k low)
 *   B (16 x 8, k-major per column): b0 = column g, k 2q..2q+1; b1 = column g, k 2q+8..
 *   C/D (16 x 8): c0, c1 = row g, columns 2q, 2q+1; c2, c3 = row g + 8. */

#ifndef MV_PTX
#define MV_PTX 0
#endif

#if MV_PTX
/* c += A B for one 16 x 8 x 16 tile (see the layouts above). */
inline void mma_f16(float *c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1)
{
    float d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
                   "f"(c[2]), "f"(c[3]));
    c[0] = d0;
    c[1] = d1;
    c[2] = d2;
    c[3] = d3;
}

/* The same as a statement on four accumulator lvalues (no pointer to the accumulators, which
 * would put them in memory when the compiler does not inline). */
#define MMA_F16(c, a0, a1, a2, a3, b0, b1)                                                       \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "                           \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"          \
                 : "=f"((c)[0]), "=f"((c)[1]), "=f"((c)[2]), "=f"((c)[3])                       \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"((c)[0]),           \
                   "f"((c)[1]), "f"((c)[2]), "f"((c)[3]))

/* Integer products for matmul_mmq: c = A B with int8 inputs and int32 results (c's four ints
 * in C's places above). m16n8k32: A's registers a0 = row g, k 4q..4q+3 (a byte each), a1 = row
 * g + 8, a2 = row g, k 16 + 4q.., a3 = row g + 8, k 16 + 4q..; B's b0 = column g, k 4q..4q+3,
 * b1 = column g, k 16 + 4q... m16n8k16: a0, a1 and b0 alone. */
#define MMA_S8K32(c, a0, a1, a2, a3, b0, b1)                                                     \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "                             \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"          \
                 : "=r"((c)[0]), "=r"((c)[1]), "=r"((c)[2]), "=r"((c)[3])                       \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0))
#define MMA_S8K16(c, a0, a1, b0)                                                                 \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "                             \
                 "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};"                          \
                 : "=r"((c)[0]), "=r"((c)[1]), "=r"((c)[2]), "=r"((c)[3])                       \
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0))
#endif

#ifdef MMA_PROBE
/* One warp multiplies A (16 x 16, a[m * 16 + k]) by B (16 x 8, b[n * 16 + k]), both given as
 * halves, through mma_f16 and writes C (16 x 8) to c[m * 8 + n]. Global and local size (32). */
__kernel void mma_probe(__global const uint *a, __global const uint *b, __global float *c)
{
    int lane = get_local_id(0), g = lane >> 2, q = lane & 3;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_f16(acc, a[g * 8 + q], a[(g + 8) * 8 + q], a[g * 8 + q + 4], a[(g + 8) * 8 + q + 4],
            b[g * 8 + q], b[g * 8 + q + 4]);
    c[g * 8 + 2 * q] = acc[0];
    c[g * 8 + 2 * q + 1] = acc[1];
    c[(g + 8) * 8 + 2 * q] = acc[2];
    c[(g + 8) * 8 + 2 * q + 1] = acc[3];
}
#endif
