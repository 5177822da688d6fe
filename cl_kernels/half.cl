/* Half-precision loads for CPU devices (MV_CPU, tu.mv_cpu): PoCL without cl_khr_fp16 turns each
 * vload_half into some twenty scalar instructions, more than the vector work of a weight block;
 * these conversions are as exact (subnormals, infinities, NaN) in a few integer operations.
 * quant.cl reads the weights' scale halves through them (LD_HALF), attention.cl the KV cache
 * (KV4 / KV1). Every program that includes either includes this file before it. */

#if defined(MV_CPU) && MV_CPU
inline float cpu_half(uint h)
{
    uint e = h & 0x7fffu;
    float f = e < 0x400u ? (float)e * 0x1p-24f
                         : as_float(e >= 0x7c00u ? (e << 13) | 0x7f800000u : (e << 13) + 0x38000000u);
    return as_float(as_uint(f) | ((h & 0x8000u) << 16));
}

/* The same for four halves at once. */
inline float4 cpu_half4(ushort4 h)
{
    uint4 u = convert_uint4(h), e = u & 0x7fffu;
    uint4 bits = select((e << 13) + 0x38000000u, (e << 13) | 0x7f800000u, e >= 0x7c00u);
    float4 f = select(as_float4(bits), convert_float4(e) * 0x1p-24f, e < 0x400u);
    return as_float4(as_uint4(f) | ((u & 0x8000u) << 16));
}
#endif
