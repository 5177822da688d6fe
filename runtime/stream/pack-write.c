/* Pack files, writing side, and the GGUF layer extents: see pack.h. */
#include "pack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "pack-int.h"
#include "stream-plan.h"

/* The fixed order of a layer's tensors in a group; others follow in file order. */
static const char *const layer_order[] = {"attn_norm", "attn_q",      "attn_k",
                                          "attn_v",    "attn_output", "ffn_norm",
                                          "ffn_gate",  "ffn_up",      "ffn_down"};
#define N_ORDER (sizeof(layer_order) / sizeof(layer_order[0]))

/* Layer index of a "blk.N.*" name, or -1; *rest points after "blk.N.". */
static int64_t layer_of(const char *name, const char **rest)
{
    if (strncmp(name, "blk.", 4))
        return -1;
    char *end;
    unsigned long v = strtoul(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || v > 1000000)
        return -1;
    if (rest)
        *rest = end + 1;
    return (int64_t)v;
}

ebb_err ebb_pack_gguf_n_layer(const struct ebb_gguf *g, uint32_t *out, struct ebb_diag *diag)
{
    int64_t max = -1;
    for (uint64_t i = 0; i < ebb_gguf_n_tensors(g); i++) {
        int64_t l = layer_of(ebb_gguf_tensor_at(g, i)->name, NULL);
        if (l > max)
            max = l;
    }
    struct ebb_str arch;
    char key[96];
    uint32_t bc;
    if (!ebb_gguf_get_str(g, "general.architecture", &arch) && arch.n < 64) {
        snprintf(key, sizeof(key), "%.*s.block_count", (int)arch.n, arch.p);
        if (!ebb_gguf_get_u32(g, key, &bc) && (int64_t)bc != max + 1)
            return ebb_diag_set(diag, EBB_EFORMAT, "%s is %u but tensors name %lld layers", key, bc,
                                (long long)(max + 1));
    }
    if (max < 0 || max >= EBB_STREAM_MAX_LAYERS)
        return ebb_diag_set(diag, EBB_EFORMAT, "the model has no (or too many) blk.N tensors");
    *out = (uint32_t)(max + 1);
    return EBB_OK;
}

ebb_err ebb_pack_gguf_extents(const struct ebb_gguf *g, uint32_t n_layer,
                              struct ebb_stream_layer *out, struct ebb_diag *diag)
{
    uint64_t base = ebb_gguf_data_offset(g);
    for (uint32_t l = 0; l < n_layer; l++) {
        uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
        for (uint64_t i = 0; i < ebb_gguf_n_tensors(g); i++) {
            const struct ebb_gguf_tensor *t = ebb_gguf_tensor_at(g, i);
            if (layer_of(t->name, NULL) != (int64_t)l)
                continue;
            lo = t->offset < lo ? t->offset : lo;
            hi = t->offset + t->size > hi ? t->offset + t->size : hi;
            sum += t->size;
        }
        if (!sum)
            return ebb_diag_set(diag, EBB_EFORMAT, "layer %u has no tensors", l);
        if (hi - lo > 2 * sum)
            return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                                "layer %u's tensors are scattered over %llu bytes for %llu of "
                                "weights: write a pack to stream this model",
                                l, (unsigned long long)(hi - lo), (unsigned long long)sum);
        out[l] = (struct ebb_stream_layer){.off = base + lo, .size = hi - lo, .raw_size = hi - lo};
    }
    return EBB_OK;
}

void ebb_pack_expect_from_gguf(const struct ebb_gguf *g, struct ebb_pack_expect *out)
{
    memset(out, 0, sizeof(*out));
    out->model_size = ebb_gguf_file_size(g);
    out->meta_hash = ebb_hash64(ebb_gguf_base(g), (size_t)ebb_gguf_data_offset(g), 0);
}

static uint64_t align_to(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* Orders tensors into groups; fills entries (group, off) and per-group raw sizes. */
static ebb_err plan_groups(const struct ebb_gguf *g, uint32_t n_layer,
                           const struct ebb_pack_write_opts *o, struct ebb__pack_tensor *ts,
                           uint64_t *order, struct ebb__pack_group *gs, struct ebb_diag *diag)
{
    uint64_t nt = ebb_gguf_n_tensors(g), k = 0;
    for (uint32_t grp = 0; grp <= n_layer; grp++) {
        gs[grp].first_tensor = (uint32_t)k;
        /* Rank 0..N_ORDER-1 for the named layer tensors, N_ORDER for the rest. */
        for (uint32_t rank = 0; rank <= N_ORDER; rank++) {
            for (uint64_t i = 0; i < nt; i++) {
                const struct ebb_gguf_tensor *t = ebb_gguf_tensor_at(g, i);
                const char *rest = NULL;
                int64_t l = layer_of(t->name, &rest);
                uint32_t tg = l < 0 ? n_layer : (uint32_t)l;
                if (tg != grp)
                    continue;
                uint32_t r = N_ORDER;
                for (uint32_t j = 0; l >= 0 && j < N_ORDER; j++) {
                    size_t n = strlen(layer_order[j]);
                    if (!strncmp(rest, layer_order[j], n) && rest[n] == '.')
                        r = j;
                }
                if (grp == n_layer ? rank != N_ORDER : r != rank)
                    continue;
                if (strlen(t->name) >= sizeof(ts[k].name))
                    return ebb_diag_set(diag, EBB_EUNSUPPORTED, "tensor name too long: %.80s",
                                        t->name);
                struct ebb__pack_tensor *e = &ts[k];
                memset(e, 0, sizeof(*e));
                snprintf(e->name, sizeof(e->name), "%s", t->name);
                e->type = t->type;
                e->group = grp;
                memcpy(e->ne, t->ne, sizeof(e->ne));
                e->off = align_to(gs[grp].raw, EBB_PACK_TENSOR_ALIGN);
                uint64_t cs = o->conv ? o->conv->size(o->conv_ctx, t) : 0;
                e->size = cs ? cs : t->size;
                gs[grp].raw = e->off + e->size;
                order[k++] = i;
            }
        }
        gs[grp].n_tensors = (uint32_t)k - gs[grp].first_tensor;
    }
    return EBB_OK;
}

static ebb_err pwrite_all(int fd, const void *src, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pwrite(fd, (const uint8_t *)src + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return EBB_EIO;
        done += (size_t)r;
    }
    return EBB_OK;
}

static void model_name(const struct ebb_gguf *g, char *dst, size_t cap)
{
    struct ebb_str s;
    if (!ebb_gguf_get_str(g, "general.name", &s) && s.n)
        snprintf(dst, cap, "%.*s", (int)(s.n < cap - 1 ? s.n : cap - 1), s.p);
    else
        snprintf(dst, cap, "unnamed");
}

ebb_err ebb_pack_write(const struct ebb_gguf *g, const char *path,
                       const struct ebb_pack_write_opts *o, struct ebb_pack_write_stats *st,
                       struct ebb_diag *diag)
{
    static const struct ebb_pack_write_opts defaults = {0};
    ebb_err rc = EBB_OK;
    uint32_t n_layer = 0;
    uint64_t nt = ebb_gguf_n_tensors(g), *order = NULL;
    struct ebb__pack_tensor *ts = NULL;
    struct ebb__pack_group *gs = NULL;
    uint8_t *blob = NULL, *cbuf = NULL;
    ZSTD_CCtx *cctx = NULL;
    char tmp[1100];
    int fd = -1;
    if (!o)
        o = &defaults;
    const char *layout = o->layout ? o->layout : EBB_PACK_LAYOUT_GGUF_RAW;
    const char *dev = o->device_kind ? o->device_kind : "any";
    bool raw = !strcmp(layout, EBB_PACK_LAYOUT_GGUF_RAW);
    if (!raw && !o->conv)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "layout '%s' needs the engine's converter; without one only '%s' "
                            "can be written",
                            layout, EBB_PACK_LAYOUT_GGUF_RAW);
    if (raw && o->conv)
        return ebb_diag_set(diag, EBB_EINVAL, "a converter changes the bytes: name its layout");
    if (strlen(layout) >= 64)
        return ebb_diag_set(diag, EBB_EINVAL, "layout name too long");
    if (strlen(dev) >= 64 || strlen(path) + 5 > sizeof(tmp))
        return ebb_diag_set(diag, EBB_EINVAL, "device kind or output path too long");
    if ((rc = ebb_pack_gguf_n_layer(g, &n_layer, diag)))
        return rc;
    ts = calloc(nt ? nt : 1, sizeof(*ts));
    order = calloc(nt ? nt : 1, sizeof(*order));
    gs = calloc(n_layer + 1, sizeof(*gs));
    if (!ts || !order || !gs) {
        rc = EBB_ENOMEM;
        goto out;
    }
    if ((rc = plan_groups(g, n_layer, o, ts, order, gs, diag)))
        goto out;
    uint64_t gbytes = (uint64_t)(n_layer + 1) * sizeof(*gs), tbytes = nt * sizeof(*ts);
    uint64_t pos = align_to(EBB__PACK_HDR + gbytes + tbytes, EBB_STREAM_ALIGN), max_raw = 0;
    for (uint32_t i = 0; i <= n_layer; i++)
        max_raw = gs[i].raw > max_raw ? gs[i].raw : max_raw;
    size_t cap = ZSTD_compressBound((size_t)max_raw);
    blob = calloc(1, (size_t)max_raw + 1);
    cbuf = o->zstd ? malloc(cap) : NULL;
    cctx = o->zstd ? ZSTD_createCCtx() : NULL;
    if (!blob || (o->zstd && (!cbuf || !cctx))) {
        rc = EBB_ENOMEM;
        goto out;
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = ebb_diag_set(diag, EBB_EIO, "cannot create '%s': %s", tmp, strerror(errno));
        goto out;
    }
    memset(st, 0, sizeof(*st));
    st->n_groups = n_layer + 1;
    for (uint32_t i = 0; i <= n_layer; i++) {
        struct ebb__pack_group *G = &gs[i];
        memset(blob, 0, (size_t)G->raw);
        for (uint32_t k = G->first_tensor; k < G->first_tensor + G->n_tensors; k++) {
            const struct ebb_gguf_tensor *t = ebb_gguf_tensor_at(g, order[k]);
            if (o->conv && o->conv->size(o->conv_ctx, t)) {
                if ((rc = o->conv->convert(o->conv_ctx, t, blob + ts[k].off, diag)))
                    goto out_unlink;
            } else {
                memcpy(blob + ts[k].off, t->data, (size_t)ts[k].size);
            }
        }
        const uint8_t *src = blob;
        G->stored = G->raw;
        G->codec = EBB_STREAM_CODEC_RAW;
        if (o->zstd) {
            size_t n =
                ZSTD_compressCCtx(cctx, cbuf, cap, blob, (size_t)G->raw, o->level ? o->level : 3);
            if (!ZSTD_isError(n) && (uint64_t)n * 10 <= G->raw * 9) {
                src = cbuf;
                G->stored = n;
                G->codec = EBB_STREAM_CODEC_ZSTD;
                st->n_compressed++;
            }
        }
        G->off = pos;
        G->sum = ebb_hash64(src, (size_t)G->stored, 0);
        if ((rc = pwrite_all(fd, src, (size_t)G->stored, pos)))
            goto io_err;
        st->raw_bytes += G->raw;
        st->stored_bytes += G->stored;
        pos = align_to(pos + G->stored, EBB_STREAM_ALIGN);
    }
    struct ebb__pack_hdr h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, EBB__PACK_MAGIC, 8);
    h.version = EBB__PACK_VERSION;
    h.hdr_size = EBB__PACK_HDR;
    h.file_size = pos;
    struct ebb_pack_expect id;
    ebb_pack_expect_from_gguf(g, &id);
    h.model_size = id.model_size;
    h.meta_hash = id.meta_hash;
    model_name(g, h.model_name, sizeof(h.model_name));
    snprintf(h.layout, sizeof(h.layout), "%s", layout);
    snprintf(h.device_kind, sizeof(h.device_kind), "%s", dev);
    h.n_layer = n_layer;
    h.n_groups = n_layer + 1;
    h.n_tensors = (uint32_t)nt;
    h.groups_off = EBB__PACK_HDR;
    h.tensors_off = EBB__PACK_HDR + gbytes;
    /* The directory is hashed as one run: group records, then tensor entries. */
    uint8_t *dir = malloc(gbytes + tbytes);
    if (!dir) {
        rc = EBB_ENOMEM;
        goto out_unlink;
    }
    memcpy(dir, gs, gbytes);
    memcpy(dir + gbytes, ts, tbytes);
    h.dir_hash = ebb_hash64(dir, gbytes + tbytes, 0);
    h.hdr_hash = ebb_hash64(&h, offsetof(struct ebb__pack_hdr, hdr_hash), 0);
    rc = pwrite_all(fd, dir, gbytes + tbytes, EBB__PACK_HDR);
    free(dir);
    if (rc || (rc = pwrite_all(fd, &h, sizeof(h), 0)) || ftruncate(fd, (off_t)pos) || fsync(fd))
        goto io_err;
    close(fd);
    fd = -1;
    if (rename(tmp, path)) {
        rc = ebb_diag_set(diag, EBB_EIO, "cannot rename '%s' to '%s': %s", tmp, path,
                          strerror(errno));
        unlink(tmp);
        goto out;
    }
    st->file_bytes = pos;
    goto out;
io_err:
    rc = ebb_diag_set(diag, EBB_EIO, "writing '%s' failed: %s", tmp, strerror(errno));
out_unlink:
    unlink(tmp);
out:
    if (fd >= 0)
        close(fd);
    ZSTD_freeCCtx(cctx);
    free(cbuf);
    free(blob);
    free(gs);
    free(order);
    free(ts);
    return rc;
}
