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

/* Orders a work-item's global stores before what follows for every other work-group (a
 * launch's last work-group joining what the others wrote: matmul_mmql's slices,
 * attn_decode_rope_q8's chunks): membar.gl through PTX, where the compiler's mem_fence may stop
 * at the work-group; mem_fence elsewhere (PoCL's CPUs keep their caches coherent). */
#if MV_PTX
#define GLOBAL_FENCE() __asm__ volatile("membar.gl;" ::: "memory")
#else
#define GLOBAL_FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)
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

/* Asynchronous copies and matrix loads from local memory (sm_80; attn_prefill_mma with
 * ATT_ASYNC and matmul_mmql with MQL_ASYNC, after async_probe below passed). local_saddr gives a __local pointer's address in
 * shared memory, which both instructions take (the pointer's integer value is that address, or
 * a generic address in the shared window, which cvta converts). cp_async16 copies 16 bytes from
 * src to the shared address dst (both 16-byte aligned), of which the first n (0 or 16) come from
 * src and the rest are zeros; the copies of a thread are grouped by CP_COMMIT and waited for by
 * CP_WAIT(n) (all but the newest n groups complete; other threads see them after a barrier).
 * LDSM_X4_T loads four 8 x 8 matrices of halves transposed: lanes 8i..8i + 7 give the shared
 * addresses of matrix i's rows (16 bytes each), and lane 4g + q receives in register i the halves
 * at rows 2q and 2q + 1 of column g, the lower row in the low half: a B fragment of mma_f16 when
 * rows are its k. All are volatile statements, kept in order with each other and the barriers. */
inline uint local_saddr(__local void *p)
{
    uint r;
    asm("{ .reg .pred s; .reg .u64 a; isspacep.shared s, %1; @s cvta.to.shared.u64 a, %1; "
        "@!s mov.u64 a, %1; cvt.u32.u64 %0, a; }"
        : "=r"(r)
        : "l"((ulong)(size_t)p));
    return r;
}
inline void cp_async16(uint dst, const __global void *src, int n)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :
                 : "r"(dst), "l"((ulong)(size_t)src), "r"(n));
}
/* cp_async8: the same for 8 bytes (both 8-byte aligned), through the L1 (.ca: .cg takes 16 only). */
inline void cp_async8(uint dst, const __global void *src, int n)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;"
                 :
                 : "r"(dst), "l"((ulong)(size_t)src), "r"(n));
}
/* cp_async4: 4 bytes (both 4-byte aligned), through the L1. st_shared32 stores a word at a
 * shared address (where a copy cannot be asynchronous: matmul_mmql's raw Q8_0 rows of an odd
 * number of blocks, 2-byte aligned). */
inline void cp_async4(uint dst, const __global void *src, int n)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :
                 : "r"(dst), "l"((ulong)(size_t)src), "r"(n));
}
inline void st_shared32(uint dst, uint v)
{
    asm volatile("st.shared.u32 [%0], %1;" : : "r"(dst), "r"(v));
}
#define CP_COMMIT() asm volatile("cp.async.commit_group;")
#define CP_WAIT(n) asm volatile("cp.async.wait_group " #n ";")
#define LDSM_X4_T(r0, r1, r2, r3, addr)                                                          \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"       \
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)                                       \
                 : "r"(addr))
#endif

#ifdef ASYNC_PROBE
/* One warp copies 16 rows of 16 halves (v, row-major) into local rows of 24 halves with
 * cp_async16, rows 14 and 15 as zeros (0 source bytes), and loads them back with LDSM_X4_T:
 * matrix i is rows (i & 1) * 8.. and columns (i >> 1) * 8..; lane l writes its four registers
 * to out[4 l + i]. Global and local size (32). */
__kernel void async_probe(__global const uint *v, __global uint *out)
{
    __local uint t[16 * 12] __attribute__((aligned(16)));
    int lane = get_local_id(0), r = lane / 2, c = lane % 2 * 8;
    uint t0 = local_saddr(t);
    cp_async16(t0 + (uint)(r * 24 + c) * 2u, v + (r * 16 + c) / 2, r >= 14 ? 0 : 16);
    CP_COMMIT();
    CP_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    uint b0, b1, b2, b3;
    LDSM_X4_T(b0, b1, b2, b3, t0 + (uint)((lane & 15) * 24 + (lane >> 4) * 8) * 2u);
    out[4 * lane] = b0;
    out[4 * lane + 1] = b1;
    out[4 * lane + 2] = b2;
    out[4 * lane + 3] = b3;
}
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
