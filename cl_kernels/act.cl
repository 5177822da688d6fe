/* Gate activations of the gated feed-forward products (GLU): glu selects the function, as the
 * engine passes it to swiglu / geglu's callers, matvec's fold and quantize_x8: 1 is SiLU
 * (SwiGLU: llama, qwen, phi3), 2 is GELU with the tanh approximation (GeGLU: Gemma). Both the
 * weight programs and the ops program include this file first. */

inline float gelu_tanh(float x)
{
    return 0.5f * x * (1.0f + tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
}

inline float4 gelu_tanh4(float4 x)
{
    return 0.5f * x * (1.0f + tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
}

inline float16 gelu_tanh16(float16 x)
{
    return 0.5f * x * (1.0f + tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
}

/* act(v) for glu 1 (SiLU) or 2 (GELU, tanh). */
inline float glu_act(float v, int glu)
{
    return glu == 2 ? gelu_tanh(v) : v / (1.0f + exp(-v));
}

inline float4 glu_act4(float4 v, int glu)
{
    return glu == 2 ? gelu_tanh4(v) : v / (1.0f + exp(-v));
}

inline float16 glu_act16(float16 v, int glu)
{
    return glu == 2 ? gelu_tanh16(v) : v / (1.0f + exp(-v));
}

/* SwiGLU of one gate value a and its up value u: ops.cl's swiglu and matmul-mma.cl's
 * mmq_quantize_glu both compute it here, so that their floats are the same. */
inline float silu_mul(float a, float u)
{
    return a / (1.0f + exp(-a)) * u;
}

/* Work-item lid's part of the sum of the squares of row xr's n values, its NORM_WG parts added
 * by a tree over them: ops.cl's rmsnorm_row and matmul-mma.cl's mmq_quantize_norm, so that
 * their norms are the same floats. */
inline float norm_sq_part(const __global float *xr, int n, int lid)
{
    float ss = 0.0f;
    int i = lid;
    for (; i + 3 * NORM_WG < n; i += 4 * NORM_WG) {
        float a = xr[i], b = xr[i + NORM_WG], c = xr[i + 2 * NORM_WG], d = xr[i + 3 * NORM_WG];
        ss += a * a;
        ss += b * b;
        ss += c * c;
        ss += d * d;
    }
    for (; i < n; i += NORM_WG)
        ss += xr[i] * xr[i];
    return ss;
}
