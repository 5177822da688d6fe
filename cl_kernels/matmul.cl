/* Prefill's weight products on plain arithmetic, the same result as matvec for n_tok tokens:
 * the tiled matmul (CPUs), matmul_coop (rows shared by MV_WG work-items as in matvec, MM_T
 * tokens each: GPUs) and matmul_gemm (64 x 64 tiles in local memory). Built after matvec.cl in
 * the weight program (its ROW_SUM), against the same layout accessors. Options:
 *   MM_T   tokens per work-item in matmul (register tile), MM_K input chunk held in local
 *   MM_LOCAL  1: stage the token tile in local memory (GPUs); 0: read it in place (CPUs).
 *   MM_WG  matmul's work-group size. */

#ifndef MM_T
#define MM_T 4
#endif
#ifndef MM_K
#define MM_K 128
#endif
#ifndef MM_WG
#define MM_WG 32
#endif
#ifndef MM_LOCAL
#define MM_LOCAL 1
#endif

/* Tiled matrix-matrix product for prefill: the same result as matvec for n_tok tokens. A
 * work-group of MM_WG work-items covers MM_WG output rows and MM_T tokens; the tokens' input
 * chunk of MM_K floats is staged in local memory once for the whole group, and each decoded
 * float4 of weights is reused for MM_T tokens from registers. Global size
 * (round_up(n_out, MM_WG), ceil(n_tok / MM_T)), local (MM_WG, 1). */
__kernel void matmul(W_ARGS, int n_in, int n_out, __global const float *x, int x_ld,
                     __global float *y, int y_ld, int y_off, __global const float *res, int n_tok)
{
    int row = get_global_id(0);
    int t0 = get_group_id(1) * MM_T;
    float acc[MM_T];
    for (int t = 0; t < MM_T; t++)
        acc[t] = 0.0f;
#if MM_LOCAL
    __local float4 xs[MM_T][MM_K / 4];
    int lid = get_local_id(0);
    for (int k0 = 0; k0 < n_in; k0 += MM_K) {
        int kn = min(MM_K, n_in - k0);
        for (int e = lid; e < MM_T * (MM_K / 4); e += MM_WG) {
            int t = e / (MM_K / 4), i = (e % (MM_K / 4)) * 4;
            xs[t][i / 4] = (t0 + t < n_tok && i < kn) ? READ_X4(x, t0 + t, k0 + i) : (float4)(0.0f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (row < n_out) {
#ifdef W_DEQ32
            for (int i = 0; i < kn; i += 32) {
                float16 lo, hi;
                W_DEQ32(row, (k0 + i) / 32, &lo, &hi);
                for (int t = 0; t < MM_T; t++) {
                    const __local float *xt = (const __local float *)xs[t] + i;
                    acc[t] += hsum16(lo * vload16(0, xt) + hi * vload16(1, xt));
                }
            }
#else
            for (int i = 0; i < kn; i += 4) {
                float4 w = READ_W4(row, k0 + i);
                for (int t = 0; t < MM_T; t++)
                    acc[t] += dot(w, xs[t][i / 4]);
            }
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
    /* Devices whose local memory is ordinary memory (CPUs): the token rows are read in place,
     * the caches do the staging, and no barrier splits the work-group loop. Rows past n_tok
     * read the last valid row and are not written. */
    if (row < n_out) {
        const __global float *xr[MM_T];
        for (int t = 0; t < MM_T; t++)
            xr[t] = x + (size_t)min(t0 + t, n_tok - 1) * x_ld;
#ifdef W_DEQ32
        for (int b = 0; b < n_in / 32; b++) {
            float16 lo, hi;
            W_DEQ32(row, b, &lo, &hi);
            for (int t = 0; t < MM_T; t++)
                acc[t] += hsum16(lo * vload16(0, xr[t] + b * 32) + hi * vload16(1, xr[t] + b * 32));
        }
#else
        for (int i = 0; i < n_in; i += 4) {
            float4 w = READ_W4(row, i);
            for (int t = 0; t < MM_T; t++)
                acc[t] += dot(w, vload4(0, xr[t] + i));
        }
#endif
    }
#endif
    if (row >= n_out)
        return;
    for (int t = 0; t < MM_T && t0 + t < n_tok; t++) {
        float v = acc[t];
        if (res)
            v += res[(size_t)(t0 + t) * y_ld + y_off + row];
        WRITE_Y(y, t0 + t, y_off + row, v);
    }
}

/* Prefill on GPUs: matvec's cooperative rows (MV_WG work-items share an output row, so that
 * consecutive work-items read consecutive weight bytes) with MM_T tokens per work-item, so each
 * decoded float4 of weights serves MM_T tokens from registers. The tiled matmul above gives one
 * row to each work-item, which on a GPU makes neighbouring work-items read bytes a whole row
 * apart. Same arguments and result as matmul. Global size (n_out * MV_WG, ceil(n_tok / MM_T)),
 * local (MV_WG * MV_ROWS, 1). */
__kernel void matmul_coop(W_ARGS, int n_in, int n_out, __global const float *x, int x_ld,
                          __global float *y, int y_ld, int y_off, __global const float *res,
                          int n_tok)
{
    int row = get_global_id(0) / MV_WG;
    int t0 = get_global_id(1) * MM_T;
#if MV_WG > 1
    int lane = get_local_id(0) % MV_WG;
    int slot = get_local_id(0) / MV_WG;
    __local float red[MV_WG * MV_ROWS];
#else
    int lane = 0;
#endif
    float acc[MM_T];
    for (int t = 0; t < MM_T; t++)
        acc[t] = 0.0f;
    if (row < n_out) {
        for (int i = lane * 4; i < n_in; i += MV_WG * 4) {
            float4 w = READ_W4(row, i);
            for (int t = 0; t < MM_T; t++)
                acc[t] += dot(w, READ_X4(x, min(t0 + t, n_tok - 1), i));
        }
    }
    for (int t = 0; t < MM_T; t++) {
        float sum = ROW_SUM(acc[t]);
        if (lane == 0 && row < n_out && t0 + t < n_tok) {
            if (res)
                sum += res[(size_t)(t0 + t) * y_ld + y_off + row];
            WRITE_Y(y, t0 + t, y_off + row, sum);
        }
    }
}

/* Prefill on GPUs for longer prompts: a GEMM tile. A work-group of 256 work-items covers 64
 * rows and 64 tokens; per step of 32 inputs it decodes the rows' weights once into local memory
 * (eight neighbouring work-items read one row's 32 weights) and stages the tokens' inputs
 * beside them, then each work-item accumulates a 4 x 4 block of rows x tokens from local
 * memory. A weight is read from global memory once per 64 tokens instead of once per MM_T.
 * Same arguments and result as matmul. Global size (256 * ceil(n_out / 64), ceil(n_tok / 64)),
 * local (256, 1). */
#define GM_T 64 /* rows and tokens of a tile */
#define GM_K 32 /* inputs per step */
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void
matmul_gemm(W_ARGS, int n_in, int n_out, __global const float *x, int x_ld, __global float *y,
            int y_ld, int y_off, __global const float *res, int n_tok)
{
    __local float4 ws[GM_K][GM_T / 4]; /* ws[k][r/4].s(r%4) = W[row0 + r][k0 + k] */
    __local float4 xs[GM_K][GM_T / 4]; /* xs[k][t/4].s(t%4) = x[t0 + t][k0 + k] */
    int lid = get_local_id(0);
    int row0 = get_group_id(0) * GM_T, t0 = get_group_id(1) * GM_T;
    int ty = lid / 16, tx = lid % 16; /* this work-item's rows ty*4.., tokens tx*4.. */
    float4 acc[4];
    for (int j = 0; j < 4; j++)
        acc[j] = (float4)(0.0f);
    __local float *wsf = (__local float *)ws, *xsf = (__local float *)xs;
    for (int k0 = 0; k0 < n_in; k0 += GM_K) {
        /* 64 rows x 8 float4 of weights and 64 tokens x 8 float4 of inputs: two of each per
         * work-item; e / 8 is the row (token), e % 8 the float4 within the step. */
        for (int e = lid; e < GM_T * (GM_K / 4); e += 256) {
            int r = e / (GM_K / 4), i = (e % (GM_K / 4)) * 4;
            bool in = k0 + i < n_in;
            float4 w = in ? READ_W4(min(row0 + r, n_out - 1), k0 + i) : (float4)(0.0f);
            float4 v = in ? READ_X4(x, min(t0 + r, n_tok - 1), k0 + i) : (float4)(0.0f);
            wsf[(i + 0) * GM_T + r] = w.x;
            wsf[(i + 1) * GM_T + r] = w.y;
            wsf[(i + 2) * GM_T + r] = w.z;
            wsf[(i + 3) * GM_T + r] = w.w;
            xsf[(i + 0) * GM_T + r] = v.x;
            xsf[(i + 1) * GM_T + r] = v.y;
            xsf[(i + 2) * GM_T + r] = v.z;
            xsf[(i + 3) * GM_T + r] = v.w;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < GM_K; k++) {
            float4 a = ws[k][ty], b = xs[k][tx];
            acc[0] += a.x * b;
            acc[1] += a.y * b;
            acc[2] += a.z * b;
            acc[3] += a.w * b;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int j = 0; j < 4; j++) {
        int row = row0 + ty * 4 + j;
        if (row >= n_out)
            break;
        float v4[4] = {acc[j].x, acc[j].y, acc[j].z, acc[j].w};
        for (int q = 0; q < 4; q++) {
            int t = t0 + tx * 4 + q;
            if (t >= n_tok)
                break;
            float v = v4[q];
            if (res)
                v += res[(size_t)t * y_ld + y_off + row];
            WRITE_Y(y, t, y_off + row, v);
        }
    }
}
