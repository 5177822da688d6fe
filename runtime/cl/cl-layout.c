/* Weight layouts: the types they hold, the choice per device, image2d shapes, and the code
 * generation: the prologues that resolve the kernels' accessors (READ_W4 and friends) for a layout
 * and define the tuning's options, with the local memory the attention kernels derive from them. */
#include "cl-int.h"

#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static const struct ebb__cl_tinfo tinfos[] = {
    {EBB_GGML_F32, 1, 4, "F32", "f32", 0},        {EBB_GGML_F16, 1, 2, "F16", "f16", 0},
    {EBB_GGML_BF16, 1, 2, "BF16", "bf16", 0},     {EBB_GGML_Q8_0, 32, 34, "Q8_0", "q8_0", 8},
    {EBB_GGML_Q4_0, 32, 18, "Q4_0", "q4_0", 4},   {EBB_GGML_Q4_1, 32, 20, "Q4_1", "q4_1", 4},
    {EBB_GGML_Q5_0, 32, 22, "Q5_0", "q5_0", 0},   {EBB_GGML_Q5_1, 32, 24, "Q5_1", "q5_1", 0},
    {EBB_GGML_Q4_K, 256, 144, "Q4_K", "q4_k", 0}, {EBB_GGML_Q5_K, 256, 176, "Q5_K", "q5_k", 0},
    {EBB_GGML_Q6_K, 256, 210, "Q6_K", "q6_k", 0},
};

const struct ebb__cl_tinfo *ebb__cl_tinfo(uint32_t type)
{
    for (size_t i = 0; i < sizeof(tinfos) / sizeof(tinfos[0]); i++)
        if (tinfos[i].type == type)
            return &tinfos[i];
    return NULL;
}

bool ebb_cl_layout_ok(const struct ebb_cl_dev_info *di, const struct ebb_cl_layout *l,
                      uint64_t n_elements)
{
    const struct ebb__cl_tinfo *ti = ebb__cl_tinfo(l->type);
    if (!ti)
        return false;
    if (l->order == EBB_CL_ORDER_RAW)
        return l->storage == EBB_CL_STORE_BUFFER;
    if (!ti->split)
        return false;
    if (l->storage == EBB_CL_STORE_IMAGE1D) {
        uint64_t texels = n_elements / 32 * (ti->split == 8 ? 2 : 1);
        return di->image && texels <= di->image1d_buf_max;
    }
    if (l->storage == EBB_CL_STORE_IMAGE2D) {
        size_t w, h;
        ebb_cl_image2d_limits(di, &w, &h);
        uint64_t texels = n_elements / 32 * (ti->split == 8 ? 2 : 1);
        return di->image && w && h && texels <= (uint64_t)w * h;
    }
    return true;
}

void ebb_cl_image2d_limits(const struct ebb_cl_dev_info *di, size_t *w, size_t *h)
{
    *w = di->image ? di->image2d_w : 0;
    *h = di->image ? di->image2d_h : 0;
    struct ebb_cl_env env;
    ebb_cl_env_get(&env);
    size_t ew = env.image2d_max[0], eh = env.image2d_max[1];
    if (ew && ew < *w)
        *w = ew;
    if (eh && eh < *h)
        *h = eh;
}

bool ebb_cl_image2d_shape(uint64_t tpr, uint64_t n_rows, size_t w_max, size_t h_max, size_t *w,
                          size_t *h)
{
    if (!tpr || !n_rows || !w_max || !h_max)
        return false;
    if (tpr <= w_max) {
        uint64_t r = (n_rows + h_max - 1) / h_max; /* rows side by side */
        if (r * tpr > w_max)
            return false;
        *w = (size_t)(r * tpr);
        *h = (size_t)((n_rows + r - 1) / r);
        return true;
    }
    uint64_t k = (tpr + w_max - 1) / w_max; /* image rows per weight row */
    if (n_rows * k > h_max)
        return false;
    *w = (size_t)((tpr + k - 1) / k);
    *h = (size_t)(n_rows * k);
    return true;
}

void ebb__cl_i2d_tpr(const struct ebb__cl_tinfo *ti, uint32_t n_in, uint64_t *q, uint64_t *s)
{
    uint64_t nb = n_in / 32;
    *q = nb * (ti->split == 8 ? 2 : 1);
    *s = (nb + 1) / 2;
}

bool ebb_cl_layout_fits(const struct ebb_cl_dev_info *di, const struct ebb_cl_layout *l,
                        uint32_t n_in, uint32_t n_out)
{
    if (!ebb_cl_layout_ok(di, l, (uint64_t)n_in * n_out))
        return false;
    if (l->storage != EBB_CL_STORE_IMAGE2D)
        return true;
    size_t wm, hm, w, h;
    uint64_t tq, ts;
    ebb_cl_image2d_limits(di, &wm, &hm);
    ebb__cl_i2d_tpr(ebb__cl_tinfo(l->type), n_in, &tq, &ts);
    return n_in % 32 == 0 && ebb_cl_image2d_shape(tq, n_out, wm, hm, &w, &h) &&
           ebb_cl_image2d_shape(ts, n_out, wm, hm, &w, &h);
}

void ebb__cl_note_image2d(uint32_t type, uint64_t n_out, uint32_t n_in, size_t w, size_t h,
                          const char *instead)
{
    static uint64_t last[3];
    if (last[0] == type + 1 && last[1] == n_out && last[2] == n_in)
        return;
    last[0] = type + 1;
    last[1] = n_out;
    last[2] = n_in;
    const struct ebb__cl_tinfo *ti = ebb__cl_tinfo(type);
    if (n_in)
        fprintf(stderr,
                "ebb: EBB_CL_LAYOUT=image2d: a %s weight of %llu x %u does not fit the "
                "image2d limits %zu x %zu; placed as %s\n",
                ti ? ti->name : "?", (unsigned long long)n_out, n_in, w, h, instead);
    else
        fprintf(stderr,
                "ebb: EBB_CL_LAYOUT=image2d: not possible for a %s weight of %llu "
                "elements (image2d limits %zu x %zu); %s layout used\n",
                ti ? ti->name : "?", (unsigned long long)n_out, w, h, instead);
}

struct ebb_cl_layout ebb_cl_layout_choose(const struct ebb_cl_dev_info *di, uint32_t type,
                                          uint64_t n_elements)
{
    struct ebb_cl_layout raw = {type, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_RAW};
    struct ebb_cl_layout split = {type, EBB_CL_STORE_BUFFER, EBB_CL_ORDER_SPLIT};
    struct ebb_cl_layout img = {type, EBB_CL_STORE_IMAGE1D, EBB_CL_ORDER_SPLIT};
    struct ebb_cl_layout img2d = {type, EBB_CL_STORE_IMAGE2D, EBB_CL_ORDER_SPLIT};
    struct ebb_cl_env env;
    ebb_cl_env_get(&env);
    if (env.layout == EBB_CL_LAYOUT_IMAGE2D) {
        if (ebb_cl_layout_ok(di, &img2d, n_elements))
            return img2d;
        size_t w, h;
        ebb_cl_image2d_limits(di, &w, &h);
        ebb__cl_note_image2d(type, n_elements, 0, w, h, "the default");
    }
    if (env.layout == EBB_CL_LAYOUT_RAW)
        return raw;
    if (env.layout == EBB_CL_LAYOUT_SPLIT && ebb_cl_layout_ok(di, &split, n_elements))
        return split;
    if (env.layout == EBB_CL_LAYOUT_IMAGE && ebb_cl_layout_ok(di, &img, n_elements))
        return img;
    /* CPUs sharing host memory read the file's blocks in place: no copy, and the caches hide
     * the block layout. GPUs get separate planes so that a warp's loads of quants and of scales
     * are each contiguous, through the texture path where images exist. */
    if (!di->is_gpu && di->host_unified)
        return raw;
    /* Measured on an H100 (NVIDIA OpenCL 3.0, driver 580), SmolLM2 Q4_1 decode: raw blocks 432
     * tok/s, split planes 380, image1d 375; the whole-block decoders make the file's layout the
     * fastest there, so NVIDIA keeps it (copied once, fused Q/K/V and gate/up). */
    if (di->vendor == EBB_CL_VENDOR_NVIDIA)
        return raw;
    if (ebb_cl_layout_ok(di, &img, n_elements))
        return img;
    if (ebb_cl_layout_ok(di, &split, n_elements))
        return split;
    return raw;
}

const char *ebb_cl_layout_name(const struct ebb_cl_layout *l, char *buf, size_t cap)
{
    const struct ebb__cl_tinfo *ti = ebb__cl_tinfo(l->type);
    snprintf(buf, cap, "%s/%s/%s", ti ? ti->name : "?",
             l->order == EBB_CL_ORDER_RAW ? "raw" : "split",
             l->storage == EBB_CL_STORE_IMAGE1D   ? "image1d"
             : l->storage == EBB_CL_STORE_IMAGE2D ? "image2d"
                                                  : "buffer");
    return buf;
}

bool ebb_cl_layout_has_deq32(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu)
{
    const struct ebb__cl_tinfo *ti = ebb__cl_tinfo(l->type);
    bool b32_only = ti && (ti->type == EBB_GGML_Q5_0 || ti->type == EBB_GGML_Q4_K ||
                           ti->type == EBB_GGML_Q5_K || ti->type == EBB_GGML_Q6_K);
    return ti && tu->block_dec && (b32_only || ti->split);
}

bool ebb_cl_layout_has_q16(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu)
{
    const struct ebb__cl_tinfo *ti = ebb__cl_tinfo(l->type);
    return ti && ti->split == 4 && tu->mv_q16 && !tu->block_dec &&
           l->storage == EBB_CL_STORE_BUFFER;
}

bool ebb_cl_layout_has_kq8(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu)
{
    uint32_t t = l->type;
    bool kt = t == EBB_GGML_Q8_0 || t == EBB_GGML_Q5_0 || t == EBB_GGML_Q5_1 ||
              t == EBB_GGML_Q4_K || t == EBB_GGML_Q5_K || t == EBB_GGML_Q6_K;
    return kt && tu->mv_q8 && tu->kq8 && l->order == EBB_CL_ORDER_RAW &&
           l->storage == EBB_CL_STORE_BUFFER;
}

bool ebb_cl_kq8_mix_type(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu)
{
    uint32_t t = l->type;
    return tu->kq8_mix && ebb_cl_layout_has_kq8(l, tu) &&
           (t == EBB_GGML_Q8_0 || t == EBB_GGML_Q4_K || t == EBB_GGML_Q5_K || t == EBB_GGML_Q6_K);
}

enum ebb_cl_wkernel ebb_cl_mmql_group_kind(const struct ebb_cl_layout *l)
{
    return l->type == EBB_GGML_Q5_K || l->type == EBB_GGML_Q6_K ? EBB_CL_WK_MMQLK5
           : l->type == EBB_GGML_Q4_K                           ? EBB_CL_WK_MMQLK
                                                                : EBB_CL_WK_MMQL;
}

enum ebb_cl_wkernel ebb_cl_mmql_kind(const struct ebb_cl_layout *l)
{
    return l->type == EBB_GGML_Q6_K ? EBB_CL_WK_MMQLK6 : ebb_cl_mmql_group_kind(l);
}

enum ebb_cl_wkernel ebb_cl_mmql_batch_kind(const struct ebb_cl_layout *l)
{
    return l->type == EBB_GGML_Q6_K ? EBB_CL_WK_MMQLB6 : EBB_CL_WK_MMQLB;
}

void ebb_cl_mmql_tile(const struct ebb_cl_tuning *tu, enum ebb_cl_wkernel k, uint32_t tile[4])
{
    const uint32_t t[][4] = {
        {tu->mmql_t, tu->mmql_mi, tu->mmql_w, tu->mmql_kb},
        {tu->mmqk_t, tu->mmqk_mi, tu->mmqk_w, tu->mmqk_kb},
        {tu->mmqk5_t, tu->mmqk5_mi, tu->mmqk5_w, tu->mmqk5_kb},
        {tu->mmqk6_t, tu->mmqk6_mi, tu->mmqk6_w, tu->mmqk6_kb},
        {tu->mmqs_t, tu->mmqs_mi, tu->mmqs_w, tu->mmqs_kb},
        {tu->mms_t, tu->mms_mi, tu->mms_w, tu->mms_kb},
        {tu->mmqs6_t, tu->mmqs6_mi, tu->mmqs6_w, tu->mmqs6_kb},
    };
    int i = k == EBB_CL_WK_MMQLK    ? 1
            : k == EBB_CL_WK_MMQLK5 ? 2
            : k == EBB_CL_WK_MMQLK6 ? 3
            : k == EBB_CL_WK_MMQLB  ? 4
            : k == EBB_CL_WK_MMQLS  ? 5
            : k == EBB_CL_WK_MMQLB6 ? 6
                                    : 0;
    memcpy(tile, t[i], sizeof(t[i]));
}

bool ebb_cl_layout_has_qw(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu)
{
    return ebb_cl_layout_has_q16(l, tu) ||
           ((l->type == EBB_GGML_Q4_K || l->type == EBB_GGML_Q8_0 || l->type == EBB_GGML_Q6_K ||
             l->type == EBB_GGML_Q5_0 || l->type == EBB_GGML_Q5_K) &&
            l->order == EBB_CL_ORDER_RAW && l->storage == EBB_CL_STORE_BUFFER && !tu->block_dec);
}

ebb_err ebb_cl_layout_prologue(const struct ebb_cl_layout *l, const struct ebb_cl_tuning *tu,
                               char *buf, size_t cap, struct ebb_diag *diag)
{
    const struct ebb__cl_tinfo *ti = ebb__cl_tinfo(l->type);
    char name[64];
    if (!ti || (l->order == EBB_CL_ORDER_SPLIT && !ti->split) ||
        (l->order == EBB_CL_ORDER_RAW && l->storage != EBB_CL_STORE_BUFFER))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "no OpenCL decoder for layout %s",
                            ebb_cl_layout_name(l, name, sizeof(name)));
    int n = snprintf(
        buf, cap,
        "/* layout %s */\n"
        "#define MV_WG %u\n#define MV_ROWS %u\n#define MM_T %u\n#define MM_K %u\n"
        "#define MM_WG %u\n#define MM_LOCAL %u\n#define NORM_WG %u\n"
        "#define BLOCK_DEC %u\n#define MV_FLAT %u\n#define MV_XLOCAL %u\n"
        "#define W_BLK %u\n#define MV_PTX %u\n#define MV_Q8 %u\n#define MM_MMA %u\n"
        "#define MA_R %u\n#define MA_T %u\n#define MA_K %u\n#define MA_PF %u\n"
        "#define MVR %u\n#define MV_CPU %u\n#define MV_CPU_R %u\n#define MS_T %u\n"
        "#define MS_MI %u\n#define MS_W %u\n#define MS_KB %u\n#define MVO %u\n#define MVU %u\n"
        "#define MVQ_WG %u\n#define MVQ_ROWS %u\n#define MV_IDP %u\n#define MMQ %u\n"
        "#define MQL_ASYNC %u\n#define MQL_NST %u\n#define MQ_I2F %u\n#define MQ_JIT %u\n",
        ebb_cl_layout_name(l, name, sizeof(name)), tu->mv_wg, tu->mv_rows, tu->mm_t, tu->mm_k,
        tu->mm_wg, tu->mm_local, tu->norm_wg, tu->block_dec, tu->mv_flat, tu->mv_xlocal, ti->blk,
        tu->mv_ptx, tu->mv_q8 && ebb_cl_layout_has_q16(l, tu) ? 1u : 0u, tu->mm_mma, tu->mma_r,
        tu->mma_t, tu->mma_k, tu->mma_pf, tu->mvr, tu->mv_cpu, tu->mv_cpu_r ? tu->mv_cpu_r : 4,
        tu->mms_t ? tu->mms_t : 32, tu->mms_mi ? tu->mms_mi : 1, tu->mms_w ? tu->mms_w : 8,
        tu->mms_kb ? tu->mms_kb : 2, tu->mvo ? tu->mvo : 1, tu->mvu ? tu->mvu : 2,
        tu->mv_ptx && tu->mvq_wg ? tu->mvq_wg : tu->mv_wg,
        tu->mv_ptx && tu->mvq_wg ? tu->mvq_rows : tu->mv_rows, tu->mv_idp && !tu->mv_ptx ? 1u : 0u,
        tu->mm_mma && tu->mmq && ebb_cl_layout_has_qw(l, tu) ? 1u : 0u,
        tu->mmq_async && tu->mv_ptx ? 1u : 0u, tu->mmq_nst == 3 ? 3u : 2u, tu->mmq_i2f ? 1u : 0u,
        tu->mmq_jit);
    if (n < 0 || (size_t)n >= cap)
        return EBB_ERANGE;
    size_t used = (size_t)n;
    if (tu->mql_s8h) {
        n = snprintf(buf + used, cap - used, "#define MQL_S8H 1\n");
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    const char *bits = ti->split == 8 ? "q8" : "q4";
    if (l->order == EBB_CL_ORDER_RAW)
        n = snprintf(buf + used, cap - used,
                     "#define W_RAW 1\n"
                     "#define W_ARGS __global const uchar *w_a, ulong w_off\n"
                     "#define W_PASS w_a, w_off\n"
                     "#define READ_W4(o, i) w4_raw_%s(w_a + w_off, (ulong)(n_in / %u) * %u, "
                     "(o), (i))\n",
                     ti->dec, ti->blk, ti->tsize);
    else if (l->storage == EBB_CL_STORE_BUFFER)
        n = snprintf(buf + used, cap - used,
                     "#define W_ARGS __global const uchar *w_a, __global const float2 *w_b\n"
                     "#define W_PASS w_a, w_b\n"
                     "#define READ_W4(o, i) w4_split_%s(w_a, w_b, n_in / 32, (o), (i))\n%s",
                     bits, ti->split == 4 ? "#define W_SPLIT4 1\n" : "");
    else if (l->storage == EBB_CL_STORE_IMAGE1D)
        n = snprintf(buf + used, cap - used,
                     "#define EBB_IMAGES 1\n"
                     "#define W_ARGS __read_only image1d_buffer_t w_a, __global const float2 *w_b\n"
                     "#define W_PASS w_a, w_b\n"
                     "#define READ_W4(o, i) w4_img_%s(w_a, w_b, n_in / 32, (o), (i))\n",
                     bits);
    else
        n = snprintf(buf + used, cap - used,
                     "#define EBB_IMAGES2D 1\n"
                     "#define W_ARGS __read_only image2d_t w_a, __read_only image2d_t w_b\n"
                     "#define W_PASS w_a, w_b\n"
                     "#define READ_W4(o, i) w4_i2d_%s(w_a, w_b, n_in / 32, (o), (i))\n",
                     bits);
    if (n < 0 || (size_t)n >= cap - used)
        return EBB_ERANGE;
    used += (size_t)n;
    bool b32_only = ti->type == EBB_GGML_Q5_0 || ti->type == EBB_GGML_Q4_K ||
                    ti->type == EBB_GGML_Q5_K || ti->type == EBB_GGML_Q6_K;
    if (b32_only && tu->block_dec) {
        n = snprintf(buf + used, cap - used,
                     "#define W_DEQ32(o, b, lo, hi) b32_raw_%s(w_a + w_off, "
                     "(ulong)(n_in / %u) * %u, (o), (b), (lo), (hi))\n",
                     ti->dec, ti->blk, ti->tsize);
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    if (ti->split && tu->block_dec) {
        const char *sto = l->storage == EBB_CL_STORE_IMAGE1D   ? "img"
                          : l->storage == EBB_CL_STORE_IMAGE2D ? "i2d"
                                                               : "split";
        if (l->order == EBB_CL_ORDER_RAW)
            n = snprintf(buf + used, cap - used,
                         "#define W_DOT32(o, b, xt) d32_raw_%s(w_a + w_off, "
                         "(ulong)(n_in / 32) * %u, (o), (b), (xt))\n"
                         "#define W_DEQ32(o, b, lo, hi) b32_raw_%s(w_a + w_off, "
                         "(ulong)(n_in / 32) * %u, (o), (b), (lo), (hi))\n",
                         ti->dec, ti->tsize, ti->dec, ti->tsize);
        else
            n = snprintf(buf + used, cap - used,
                         "#define W_DOT32(o, b, xt) d32_%s_%s(w_a, w_b, n_in / 32, (o), (b), "
                         "(xt))\n"
                         "#define W_DEQ32(o, b, lo, hi) b32_%s_%s(w_a, w_b, n_in / 32, (o), "
                         "(b), (lo), (hi))\n",
                         sto, bits, sto, bits);
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    if (tu->mv_h8 && l->order == EBB_CL_ORDER_RAW &&
        (ti->type == EBB_GGML_F16 || ti->type == EBB_GGML_BF16)) {
        n = snprintf(buf + used, cap - used,
                     "#define W_RD8(o, i) w8_raw_%s(w_a + w_off, (ulong)n_in * 2, (o), (i))\n",
                     ti->dec);
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    if (ebb_cl_layout_has_kq8(l, tu)) {
        n = snprintf(buf + used, cap - used,
                     "#define W_KQ8(o, b, xq, xd) kq8_raw_%s(w_a + w_off, "
                     "(ulong)(n_in / %u) * %u, (o), (b), KQ8_X((xq), (b)), (xd)[(b)])\n",
                     ti->dec, ti->blk, ti->tsize);
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    if (ebb_cl_layout_has_q16(l, tu)) {
        if (l->order == EBB_CL_ORDER_RAW)
            n = snprintf(buf + used, cap - used,
                         "#define W_Q16(o, b, v, dm) q16_raw_%s(w_a + w_off, "
                         "(ulong)(n_in / 32) * %u, (o), (b), (v), (dm))\n"
                         "#define W_QW(o, b, k, v, dm) qw_raw_%s(w_a + w_off, "
                         "(ulong)(n_in / 32) * %u, (o), (b), (k), (v), (dm))\n%s",
                         ti->dec, ti->tsize, ti->dec, ti->tsize,
                         l->type == EBB_GGML_Q4_0 ? "#define W_QOFF 8\n" : "");
        else
            n = snprintf(buf + used, cap - used,
                         "#define W_Q16(o, b, v, dm) q16_split_q4(w_a, w_b, n_in / 32, (o), (b), "
                         "(v), (dm))\n"
                         "#define W_QW(o, b, k, v, dm) qw_split_q4(w_a, w_b, n_in / 32, (o), (b), "
                         "(k), (v), (dm))\n%s",
                         l->type == EBB_GGML_Q4_0 ? "#define W_QOFF 8\n" : "");
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
        n = snprintf(buf + used, cap - used, "#define W_QX(b, h) ((b) * 32 + (h) * 16)\n");
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    } else if (ebb_cl_layout_has_qw(l, tu) && l->type != EBB_GGML_Q4_K) { /* a byte a weight */
        n = snprintf(buf + used, cap - used,
                     "#define W_QW8(o, b, k, v0, v1, dm) qw8_raw_%s(w_a + w_off, "
                     "(ulong)(n_in / %u) * %u, (o), (b), (k), (v0), (v1), (dm))\n"
                     "#define W_QX(b, h) ((b) * 32 + (h) * 16)\n%s",
                     ti->dec, ti->blk, ti->tsize,
                     l->type == EBB_GGML_Q6_K   ? "#define W_QH2 1\n#define W_QOFF 32\n"
                     : l->type == EBB_GGML_Q5_0 ? "#define W_QOFF 16\n"
                     : l->type == EBB_GGML_Q8_0 ? "#define W_QOFF 0\n#define W_Q80 1\n"
                     : l->type == EBB_GGML_Q5_K ? "#define W_Q5K 1\n"
                                                : "");
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    } else if (ebb_cl_layout_has_qw(l, tu)) { /* raw Q4_K: matmul_mms's words only */
        n = snprintf(buf + used, cap - used,
                     "#define W_QW(o, b, k, v, dm) qw_raw_q4_k(w_a + w_off, "
                     "(ulong)(n_in / 256) * 144, (o), (b), (k), (v), (dm))\n"
                     "#define W_QX(b, h) (((b) >> 3) * 256 + (((b) >> 1) & 3) * 64 + "
                     "((b) & 1) * 16 + (h) * 32)\n#define W_QH2 1\n"
                     "#define W_QK8N(o, b, k, v0, v1, dm) qw8n_raw_q4_k(w_a + w_off, "
                     "(ulong)(n_in / 256) * 144, (o), (b), (k), (v0), (v1), (dm))\n");
        if (n < 0 || (size_t)n >= cap - used)
            return EBB_ERANGE;
        used += (size_t)n;
    }
    n = snprintf(buf + used, cap - used,
                 "#define READ_W(o, i) w_pick(READ_W4((o), (i) & ~3), (i) & 3)\n"
                 "#define READ_X4(x, t, i) vload4(0, (x) + (size_t)(t) * x_ld + (i))\n"
                 "#define WRITE_Y(y, t, o, v) ((y)[(size_t)(t) * y_ld + (o)] = (v))\n"
                 "inline float w_pick(float4 v, int k) "
                 "{ return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }\n");
    if (n < 0 || (size_t)n >= cap - used)
        return EBB_ERANGE;
    return EBB_OK;
}

uint32_t ebb_cl_att_wg(const struct ebb_cl_tuning *tu)
{
    return tu->att_wg ? tu->att_wg : tu->norm_wg;
}

uint32_t ebb_cl_att_mma_wg(const struct ebb_cl_tuning *tu)
{
    return tu->att_mma_w == 8 ? 256 : 128;
}

uint32_t ebb_cl_att_mma_split(uint32_t head_dim)
{
    if (!head_dim || head_dim % 16)
        return 0;
    if (head_dim <= 128)
        return 1;
    return head_dim % 128 == 0 && head_dim <= 256 ? head_dim / 128 : 0;
}

uint32_t ebb_cl_att_red_ds(uint32_t head_dim)
{
    return head_dim % 32 == 0 ? 32 : head_dim;
}

uint64_t ebb_cl_att_local(const struct ebb_cl_tuning *tu, uint32_t head_dim, uint32_t g)
{
    /* attention.cl's ATT_KL, ATT_VL, ATT_VP, ATT_SCR and ATT_LOCAL, and the rope kernel's key
     * and value halves. */
    uint64_t wg = ebb_cl_att_wg(tu), d4 = head_dim / 4, c = tu->att_chunk, kl = 1;
    if (!tu->mv_cpu && d4 % 4 == 0 && wg % 4 == 0)
        kl = 4;
    else if (!tu->mv_cpu && d4 % 2 == 0 && wg % 2 == 0)
        kl = 2;
    uint64_t vl = d4 < wg ? d4 : wg, vp = wg / vl, sub = ebb_cl_att_sub(tu);
    uint64_t scr_k = kl > 1 ? g * sub * kl : 4, scr_v = vp > 1 ? vp * g * head_dim : 4;
    /* ATT_VSK: staged, the partial outputs in the keys' staging (with sub-chunks, the whole
     * staging) where it holds them */
    uint64_t st = ebb_cl_att_stage(tu, head_dim);
    bool vsk = st && (sub < c ? st >= 4 * scr_v : c * (head_dim + 8) >= 2 * scr_v);
    uint64_t floats = g * (head_dim + c + 2 * (c / 4) + 1) + (vsk || scr_k > scr_v ? scr_k : scr_v);
    /* attn_decode_rope's new key and value: halves, or floats and the blocks' scales (KV_Q8) */
    uint64_t kv = tu->kv_q8 ? (uint64_t)head_dim * 8 + head_dim / 32 * 4 : (uint64_t)head_dim * 4;
    return floats * sizeof(float) + kv;
}

uint64_t ebb_cl_att_stage(const struct ebb_cl_tuning *tu, uint32_t head_dim)
{
    /* attention.cl's ATT_STAGE: a chunk's keys (rows of head_dim + 8 halves) and values, or
     * with sub-chunks two buffers of a sub-chunk's key rows */
    if (!tu->att_dasync || !tu->mv_ptx || tu->kv_q8 || head_dim % 8)
        return 0;
    uint32_t sub = ebb_cl_att_sub(tu);
    if (sub < tu->att_chunk)
        return (uint64_t)2 * sub * (head_dim + 8) * 2;
    return (uint64_t)tu->att_chunk * (2 * head_dim + 8) * 2;
}

uint32_t ebb_cl_att_sub(const struct ebb_cl_tuning *tu)
{
    return tu->att_sub && tu->att_sub < tu->att_chunk ? tu->att_sub : tu->att_chunk;
}

bool ebb_cl_att_stage_fits(const struct ebb_cl_tuning *tu, uint32_t head_dim, uint64_t local_mem)
{
    uint64_t st = ebb_cl_att_stage(tu, head_dim), g = tu->att_g ? tu->att_g : 1;
    /* with ebb_cl_att_local's arrays and attn_decode_rope's reduction scratch (wg + g + 1) */
    return st && ebb_cl_att_local(tu, head_dim, (uint32_t)g) + st +
                         4 * ((uint64_t)ebb_cl_att_wg(tu) + g + 1) <=
                     local_mem;
}

ebb_err ebb_cl_ops_prologue(const struct ebb_cl_tuning *tu, uint32_t head_dim, char *buf,
                            size_t cap, struct ebb_diag *diag)
{
    if (!head_dim || head_dim % 4)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "head dimension %u", head_dim);
    if (tu->kv_q8 && head_dim % 32)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "--kv-type q8_0 needs a head dimension that is a multiple of 32 "
                            "(this model's is %u)",
                            head_dim);
    int n = snprintf(buf, cap,
                     "#define NORM_WG %u\n#define ATT_WG %u\n#define HEAD_DIM %u\n"
                     "#define ATT_CHUNK %u\n#define ATT_TQ %u\n#define ATT_TK %u\n"
                     "#define MV_PTX %u\n#define MV_IDP %u\n#define Q8_WG %u\n#define ATT_G %u\n"
                     "#define ATT_MMA %u\n#define ATT_ASYNC %u\n#define ATT_EX2 %u\n"
                     "#define ATT_MMA_W %u\n#define ATT_DASYNC %u\n#define ATT_SUB %u\n"
                     "#define MV_CPU %u\n%s%s",
                     tu->norm_wg, ebb_cl_att_wg(tu), head_dim, tu->att_chunk, tu->att_tq,
                     tu->att_tk, tu->mv_ptx, tu->mv_idp && !tu->mv_ptx ? 1u : 0u, EBB_CL_Q8_WG,
                     tu->att_g > 1 ? tu->att_g : 1u, tu->att_mma && tu->mv_ptx ? 1u : 0u,
                     tu->att_async && tu->mv_ptx ? 1u : 0u, tu->att_ex2 && tu->mv_ptx ? 1u : 0u,
                     ebb_cl_att_mma_wg(tu) / 32, ebb_cl_att_stage(tu, head_dim) ? 1u : 0u,
                     ebb_cl_att_sub(tu), tu->mv_cpu, tu->mv_q8 ? "#define Q8_QUANTIZE 1\n" : "",
                     tu->kv_q8 ? "#define KV_Q8 1\n" : "");
    return n < 0 || (size_t)n >= cap ? EBB_ERANGE : EBB_OK;
}
