/* Weight placement: a weight's rows from the GGUF file onto the device in its layout, zero-copy
 * where it can, rearranged into split planes (on several threads) or image2d texels otherwise. */
#include "cl-int.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"

static float half_to_float(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
    float f;
    if (e == 0)
        f = ldexpf((float)m, -24);
    else if (e == 31)
        f = m ? NAN : INFINITY;
    else
        f = ldexpf((float)(m | 1024), (int)e - 25);
    return s ? -f : f;
}

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* fp32 -> fp16 bits, round to nearest even; exact for the scales it is given (fp16 values and
 * Q4_0's -8d). */
static uint16_t float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t s = (x >> 16) & 0x8000u, e = (x >> 23) & 255, m = x & 0x7fffffu;
    if (e == 255)
        return (uint16_t)(s | 0x7c00u | (m ? 0x200u : 0));
    int32_t he = (int32_t)e - 127 + 15;
    if (he >= 31)
        return (uint16_t)(s | 0x7c00u);
    if (he <= 0) {
        if (he < -10)
            return (uint16_t)s;
        m |= 0x800000u;
        uint32_t sh = (uint32_t)(14 - he), r = m >> sh, rem = m & ((1u << sh) - 1),
                 half = 1u << (sh - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(s | r);
    }
    uint32_t r = ((uint32_t)he << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1)))
        r++; /* a carry into the exponent is the right result, up to infinity */
    return (uint16_t)(s | r);
}

/* Rearranges n_out rows of 32-blocks into the quant plane q and the (d, m) plane s. */
static void split_rows(const struct ebb__cl_tinfo *ti, const uint8_t *src, uint64_t n_blocks,
                       uint8_t *q, float *s)
{
    for (uint64_t b = 0; b < n_blocks; b++) {
        const uint8_t *p = src + b * ti->tsize;
        float d = half_to_float(rd16(p));
        if (ti->type == EBB_GGML_Q8_0) {
            memcpy(q + b * 32, p + 2, 32);
            s[2 * b] = d;
            s[2 * b + 1] = 0.0f;
        } else if (ti->type == EBB_GGML_Q4_0) {
            memcpy(q + b * 16, p + 2, 16);
            s[2 * b] = d;
            s[2 * b + 1] = -8.0f * d;
        } else {
            memcpy(q + b * 16, p + 4, 16);
            s[2 * b] = d;
            s[2 * b + 1] = half_to_float(rd16(p + 2));
        }
    }
}

/* A blocking upload. Weights are written this way rather than with CL_MEM_COPY_HOST_PTR, with
 * which a driver may keep its own host copy and upload at first use (NVIDIA: the first
 * evaluation of the 8B shape took ~0.9 s more, and peak RSS held the model twice). */
static ebb_err write_now(struct ebb_cl *cl, cl_mem buf, uint64_t off, uint64_t n, const void *src,
                         struct ebb_diag *diag)
{
    cl_int e = clEnqueueWriteBuffer(cl->q, buf, CL_TRUE, off, n, src, 0, NULL, NULL);
    return ebb_cl_check(e, diag, "uploading a weight");
}

/* split_rows over several threads for large weights (the 8B shape's gate+up is 3.7M blocks):
 * the rearrangement is independent per block. EBB_CL_SPLIT_THREADS caps the count (tests). */
struct split_job {
    const struct ebb__cl_tinfo *ti;
    const uint8_t *src;
    uint64_t n_blocks;
    uint8_t *q;
    float *s;
};

static void *split_thread(void *arg)
{
    struct split_job *j = arg;
    split_rows(j->ti, j->src, j->n_blocks, j->q, j->s);
    return NULL;
}

static void split_rows_par(const struct ebb__cl_tinfo *ti, const uint8_t *src, uint64_t n_blocks,
                           uint8_t *q, float *s)
{
    enum { MAX_T = 8 };
    uint64_t qb = ti->split == 8 ? 32 : 16;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = nc > MAX_T ? MAX_T : nc < 1 ? 1 : (int)nc;
    struct ebb_cl_env env;
    ebb_cl_env_get(&env);
    if (env.split_threads && (int)env.split_threads < nt)
        nt = (int)env.split_threads;
    uint64_t min_blocks = env.split_threads ? 1 : (1u << 18);
    if (nt < 2 || n_blocks < min_blocks * 2) {
        split_rows(ti, src, n_blocks, q, s);
        return;
    }
    pthread_t th[MAX_T];
    struct split_job jobs[MAX_T];
    bool started[MAX_T] = {false};
    uint64_t per = (n_blocks + (uint64_t)nt - 1) / (uint64_t)nt;
    for (int i = 0; i < nt; i++) {
        uint64_t b0 = per * (uint64_t)i, b1 = b0 + per < n_blocks ? b0 + per : n_blocks;
        jobs[i] = (struct split_job){ti, src + b0 * ti->tsize, b1 > b0 ? b1 - b0 : 0, q + b0 * qb,
                                     s + b0 * 2};
        if (i > 0 && jobs[i].n_blocks)
            started[i] = pthread_create(&th[i], NULL, split_thread, &jobs[i]) == 0;
    }
    split_thread(&jobs[0]);
    for (int i = 1; i < nt; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else if (jobs[i].n_blocks)
            split_thread(&jobs[i]); /* the thread could not start: do its part here */
    }
}

static ebb_err make_buf(struct ebb_cl *cl, uint64_t n, void *host, cl_mem *out,
                        struct ebb_diag *diag)
{
    if (n > cl->info.max_alloc)
        return ebb_diag_set(diag, EBB_ENOMEM,
                            "weight plane of %llu bytes exceeds the device's largest buffer "
                            "(%llu bytes)",
                            (unsigned long long)n, (unsigned long long)cl->info.max_alloc);
    cl_int e = CL_SUCCESS;
    *out = clCreateBuffer(cl->ctx, CL_MEM_READ_ONLY, n, NULL, &e);
    ebb_err rc = ebb_cl_check(e, diag, "clCreateBuffer(weight)");
    if (!rc && host)
        rc = write_now(cl, *out, 0, n, host, diag);
    return rc;
}

/* One image2d of n_rows rows of tpr texels of tsize bytes from row-major host texels src,
 * mapped as ebb_cl_image2d_shape says (row o starts at linear texel o * pitch). */
static ebb_err make_image2d(struct ebb_cl *cl, cl_channel_type ct, size_t tsize, uint64_t tpr,
                            uint64_t n_rows, const uint8_t *src, cl_mem *out, uint32_t dims[2],
                            struct ebb_diag *diag)
{
    size_t wm, hm, w, h;
    ebb_cl_image2d_limits(&cl->info, &wm, &hm);
    if (!ebb_cl_image2d_shape(tpr, n_rows, wm, hm, &w, &h))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "weight plane exceeds image2d limits");
    uint64_t pitch = w >= tpr ? tpr : (tpr + w - 1) / w * w;
    uint8_t *img = calloc((size_t)w * h, tsize);
    if (!img)
        return EBB_ENOMEM;
    for (uint64_t o = 0; o < n_rows; o++)
        memcpy(img + o * pitch * tsize, src + o * tpr * tsize, tpr * tsize);
    cl_image_format fmt = {CL_RGBA, ct};
    cl_image_desc desc;
    memset(&desc, 0, sizeof(desc));
    desc.image_type = CL_MEM_OBJECT_IMAGE2D;
    desc.image_width = w;
    desc.image_height = h;
    cl_int e = CL_SUCCESS;
    *out = clCreateImage(cl->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, &fmt, &desc, img, &e);
    free(img);
    dims[0] = (uint32_t)w;
    dims[1] = (uint32_t)h;
    return ebb_cl_check(e, diag, "clCreateImage(image2d weight)");
}

/* The image2d planes of a split weight from its quant plane q and (d, m) plane s. */
static ebb_err place_image2d(struct ebb_cl *cl, const struct ebb__cl_tinfo *ti, uint32_t n_in,
                             const uint8_t *q, const float *s, struct ebb_cl_weight *w,
                             struct ebb_diag *diag)
{
    uint64_t tq, ts, nb = n_in / 32;
    ebb__cl_i2d_tpr(ti, n_in, &tq, &ts);
    /* (d, m) of blocks 2k and 2k + 1 of a row as four halves; an odd row's last half-texel is
     * zero. */
    uint16_t *sh = calloc((size_t)(ts * w->n_out), 8);
    if (!sh)
        return EBB_ENOMEM;
    for (uint64_t o = 0; o < w->n_out; o++)
        for (uint64_t b = 0; b < nb; b++)
            for (int c = 0; c < 2; c++)
                sh[o * ts * 4 + b * 2 + (uint64_t)c] =
                    float_to_half(s[2 * (o * nb + b) + (uint64_t)c]);
    ebb_err rc = make_image2d(cl, CL_UNSIGNED_INT32, 16, tq, w->n_out, q, &w->a, &w->i2d[0], diag);
    if (!rc)
        rc = make_image2d(cl, CL_HALF_FLOAT, 8, ts, w->n_out, (const uint8_t *)sh, &w->b,
                          &w->i2d[2], diag);
    free(sh);
    if (!rc)
        w->bytes = (uint64_t)w->i2d[0] * w->i2d[1] * 16 + (uint64_t)w->i2d[2] * w->i2d[3] * 8;
    return rc;
}

ebb_err ebb_cl_weight_new(struct ebb_cl *cl, const struct ebb_cl_layout *l, uint32_t n_in,
                          const struct ebb_cl_wsrc *src, size_t n, const struct ebb_cl_hostmap *map,
                          struct ebb_cl_weight *out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    const struct ebb__cl_tinfo *ti = ebb__cl_tinfo(l->type);
    struct ebb_cl_weight w = {.layout = *l, .n_in = n_in};
    uint8_t *qh = NULL;
    float *sh = NULL;
    char name[64];
    if (!ti || !n_in || n_in % ti->blk || n_in % 4)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "weight of %u columns in layout %s", n_in,
                            ebb_cl_layout_name(l, name, sizeof(name)));
    uint64_t rowb = (uint64_t)n_in / ti->blk * ti->tsize;
    for (size_t i = 0; i < n; i++)
        w.n_out += src[i].n_out;
    uint64_t total = rowb * w.n_out;

    if (l->order == EBB_CL_ORDER_RAW) {
        bool contiguous = map && map->buf;
        const uint8_t *p0 = src[0].data;
        for (size_t i = 0, r = 0; contiguous && i < n; r += src[i].n_out, i++)
            contiguous = (const uint8_t *)src[i].data == p0 + r * rowb;
        if (contiguous && p0 >= map->base && p0 + total <= map->base + map->size) {
            w.a = map->buf;
            clRetainMemObject(w.a);
            w.off = (uint64_t)(p0 - map->base);
            w.zero_copy = true;
            goto done;
        }
        /* A copy: the sources go straight to the device, stacked, without a host copy. */
        if ((rc = make_buf(cl, total, NULL, &w.a, diag)))
            goto out;
        for (size_t i = 0, r = 0; i < n && !rc; r += src[i].n_out, i++)
            rc = write_now(cl, w.a, r * rowb, src[i].n_out * rowb, src[i].data, diag);
        if (rc)
            goto out;
        w.bytes = total;
        goto done;
    }

    if (l->storage == EBB_CL_STORE_IMAGE2D && !ebb_cl_layout_fits(&cl->info, l, n_in, w.n_out)) {
        /* The shape does not fit the image2d limits: the same planes in an image1d_buffer, or
         * in buffers. */
        size_t wm, hm;
        ebb_cl_image2d_limits(&cl->info, &wm, &hm);
        w.layout.storage = EBB_CL_STORE_IMAGE1D;
        if (!ebb_cl_layout_ok(&cl->info, &w.layout, (uint64_t)n_in * w.n_out))
            w.layout.storage = EBB_CL_STORE_BUFFER;
        struct ebb_cl_env env;
        ebb_cl_env_get(&env);
        if (env.layout == EBB_CL_LAYOUT_IMAGE2D)
            ebb__cl_note_image2d(l->type, w.n_out, n_in, wm, hm,
                                 ebb_cl_layout_name(&w.layout, name, sizeof(name)));
    }
    uint64_t nb = (uint64_t)w.n_out * (n_in / 32), qb = ti->split == 8 ? 32 : 16;
    qh = malloc(nb * qb);
    sh = malloc(nb * 2 * sizeof(float));
    if (!qh || !sh) {
        rc = EBB_ENOMEM;
        goto out;
    }
    for (size_t i = 0, r = 0; i < n; r += src[i].n_out, i++)
        split_rows_par(ti, src[i].data, (uint64_t)src[i].n_out * (n_in / 32),
                       qh + r * (n_in / 32) * qb, sh + r * (n_in / 32) * 2);
    if (w.layout.storage == EBB_CL_STORE_IMAGE2D) {
        if ((rc = place_image2d(cl, ti, n_in, qh, sh, &w, diag)))
            goto out;
        goto done;
    }
    if ((rc = make_buf(cl, nb * qb, qh, &w.a, diag)) ||
        (rc = make_buf(cl, nb * 2 * sizeof(float), sh, &w.b, diag)))
        goto out;
    w.bytes = nb * qb + nb * 2 * sizeof(float);
    if (w.layout.storage == EBB_CL_STORE_IMAGE1D) {
        cl_image_format fmt = {CL_RGBA, CL_UNSIGNED_INT32};
        cl_image_desc desc;
        memset(&desc, 0, sizeof(desc));
        desc.image_type = CL_MEM_OBJECT_IMAGE1D_BUFFER;
        desc.image_width = nb * qb / 16;
        desc.buffer = w.a;
        cl_int e = CL_SUCCESS;
        w.img = clCreateImage(cl->ctx, CL_MEM_READ_ONLY, &fmt, &desc, NULL, &e);
        if ((rc = ebb_cl_check(e, diag, "clCreateImage(image1d_buffer weight)")))
            goto out;
    }
done:
    *out = w;
    memset(&w, 0, sizeof(w));
out:
    ebb_cl_weight_fini(&w);
    free(qh);
    free(sh);
    return rc;
}

uint64_t ebb_cl_weight_read_bytes(const struct ebb_cl_weight *w)
{
    const struct ebb__cl_tinfo *ti = ebb__cl_tinfo(w->layout.type);
    if (!ti)
        return 0;
    if (w->layout.order == EBB_CL_ORDER_RAW)
        return (uint64_t)w->n_in / ti->blk * ti->tsize * w->n_out;
    /* split: 16 or 32 quant bytes per 32-block, and its (d, m) as floats, or as halves in an
     * image2d */
    uint64_t nb = (uint64_t)w->n_out * (w->n_in / 32), qb = ti->split == 8 ? 32 : 16;
    return nb * (qb + (w->layout.storage == EBB_CL_STORE_IMAGE2D ? 4 : 8));
}

void ebb_cl_weight_fini(struct ebb_cl_weight *w)
{
    if (w->kb)
        clReleaseMemObject(w->kb);
    if (w->ka)
        clReleaseMemObject(w->ka);
    if (w->img)
        clReleaseMemObject(w->img);
    if (w->b)
        clReleaseMemObject(w->b);
    if (w->a)
        clReleaseMemObject(w->a);
    memset(w, 0, sizeof(*w));
}

ebb_err ebb_cl_weight_set_args(const struct ebb_cl_weight *w, cl_kernel k, cl_uint first,
                               struct ebb_diag *diag)
{
    cl_int e;
    if (w->layout.order == EBB_CL_ORDER_RAW) {
        cl_ulong off = w->off;
        e = ebb__cl_setarg(k, first, sizeof(cl_mem), &w->a);
        if (!e)
            e = ebb__cl_setarg(k, first + 1, sizeof(off), &off);
    } else {
        const cl_mem *q = w->layout.storage == EBB_CL_STORE_IMAGE1D ? &w->img : &w->a;
        e = ebb__cl_setarg(k, first, sizeof(cl_mem), q);
        if (!e)
            e = ebb__cl_setarg(k, first + 1, sizeof(cl_mem), &w->b);
    }
    return ebb_cl_check(e, diag, "clSetKernelArg(weight)");
}
