/* Pack files, reading side, and the checksum: see pack.h. */
#include "pack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "pack-int.h"

#define H1 11400714785074694791ull
#define H2 14029467366897019727ull
#define H3 1609587929392839161ull
#define H4 9650029242287828579ull
#define H5 2870177450012600261ull

static uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t lane(uint64_t acc, uint64_t in)
{
    return rotl(acc + in * H2, 31) * H1;
}

static uint64_t fold(uint64_t h, uint64_t acc)
{
    return (h ^ lane(0, acc)) * H1 + H4;
}

uint64_t ebb_hash64(const void *data, size_t n, uint64_t seed)
{
    const uint8_t *p = data, *end = p + n;
    uint64_t h;
    if (n >= 32) {
        /* Four independent lanes over 32-byte stripes keep the multiplier pipelines busy. */
        uint64_t a = seed + H1 + H2, b = seed + H2, c = seed, d = seed - H1;
        for (; end - p >= 32; p += 32) {
            a = lane(a, rd64(p));
            b = lane(b, rd64(p + 8));
            c = lane(c, rd64(p + 16));
            d = lane(d, rd64(p + 24));
        }
        h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18);
        h = fold(fold(fold(fold(h, a), b), c), d);
    } else {
        h = seed + H5;
    }
    h += (uint64_t)n;
    for (; end - p >= 8; p += 8)
        h = rotl(h ^ lane(0, rd64(p)), 27) * H1 + H4;
    if (end - p >= 4) {
        h = rotl(h ^ (uint64_t)rd32(p) * H1, 23) * H2 + H3;
        p += 4;
    }
    for (; p < end; p++)
        h = rotl(h ^ (uint64_t)*p * H5, 11) * H1;
    h ^= h >> 33;
    h *= H2;
    h ^= h >> 29;
    h *= H3;
    h ^= h >> 32;
    return h;
}

struct ebb_pack {
    int fd;
    char path[512];
    struct ebb_pack_info info;
    struct ebb__pack_group *groups;
    struct ebb_pack_tensor *tensors;
    ZSTD_DCtx *dctx;
    uint8_t *scratch;
    size_t scratch_size;
};

static ebb_err pread_all(int fd, void *dst, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (uint8_t *)dst + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? EBB_EIO : EBB_EFORMAT;
        done += (size_t)r;
    }
    return EBB_OK;
}

static bool has_nul(const char *s, size_t cap)
{
    return memchr(s, 0, cap) != NULL;
}

static ebb_err check_expect(const struct ebb_pack *p, const struct ebb_pack_expect *w,
                            struct ebb_diag *diag)
{
    const struct ebb_pack_info *i = &p->info;
    if (!w)
        return EBB_OK;
    if ((w->model_size && w->model_size != i->model_size) ||
        (w->meta_hash && w->meta_hash != i->meta_hash))
        return ebb_diag_set(diag, EBB_EINVAL,
                            "pack '%s' was made from model '%s' (%llu bytes, metadata hash "
                            "%016llx), not from this model (%llu bytes, metadata hash %016llx): "
                            "re-run ebb pack",
                            p->path, i->model_name, (unsigned long long)i->model_size,
                            (unsigned long long)i->meta_hash, (unsigned long long)w->model_size,
                            (unsigned long long)w->meta_hash);
    if (w->layout && strcmp(w->layout, i->layout))
        return ebb_diag_set(diag, EBB_EINVAL,
                            "pack '%s' holds weight layout '%s', the engine needs '%s': re-run "
                            "ebb pack for this device",
                            p->path, i->layout, w->layout);
    if (w->device_kind && strcmp(w->device_kind, i->device_kind) && strcmp(i->device_kind, "any"))
        return ebb_diag_set(diag, EBB_EINVAL,
                            "pack '%s' was made for device kind '%s', this device is '%s'", p->path,
                            i->device_kind, w->device_kind);
    return EBB_OK;
}

static ebb_err read_dir(struct ebb_pack *p, const struct ebb__pack_hdr *h, uint64_t fsize,
                        struct ebb_diag *diag)
{
    uint64_t gbytes = (uint64_t)h->n_groups * sizeof(struct ebb__pack_group);
    uint64_t tbytes = (uint64_t)h->n_tensors * sizeof(struct ebb__pack_tensor);
    if (h->groups_off > fsize || gbytes > fsize - h->groups_off || h->tensors_off > fsize ||
        tbytes > fsize - h->tensors_off || h->tensors_off != h->groups_off + gbytes)
        return ebb_diag_set(diag, EBB_EFORMAT, "pack '%s': directory lies outside the file",
                            p->path);
    uint8_t *dir = malloc(gbytes + tbytes);
    if (!dir)
        return EBB_ENOMEM;
    ebb_err rc = pread_all(p->fd, dir, gbytes + tbytes, h->groups_off);
    if (!rc && ebb_hash64(dir, gbytes + tbytes, 0) != h->dir_hash)
        rc = ebb_diag_set(diag, EBB_EFORMAT, "pack '%s': directory checksum mismatch", p->path);
    if (!rc) {
        p->groups = malloc(gbytes ? gbytes : 1);
        p->tensors = malloc(tbytes ? tbytes : 1);
        if (!p->groups || !p->tensors)
            rc = EBB_ENOMEM;
    }
    if (!rc) {
        memcpy(p->groups, dir, gbytes);
        memcpy(p->tensors, dir + gbytes, tbytes);
    }
    free(dir);
    if (rc)
        return rc;
    uint64_t max_stored = 0;
    for (uint32_t g = 0; g < h->n_groups; g++) {
        const struct ebb__pack_group *G = &p->groups[g];
        if (G->off % EBB_STREAM_ALIGN || G->codec > EBB_STREAM_CODEC_ZSTD ||
            (G->codec == EBB_STREAM_CODEC_RAW && G->stored != G->raw) ||
            G->first_tensor > h->n_tensors || G->n_tensors > h->n_tensors - G->first_tensor)
            return ebb_diag_set(diag, EBB_EFORMAT, "pack '%s': group %u record is malformed",
                                p->path, g);
        if (G->off > fsize || G->stored > fsize - G->off)
            return ebb_diag_set(diag, EBB_EFORMAT,
                                "pack '%s' is truncated: %s %u ends at byte %llu but the file has "
                                "%llu bytes",
                                p->path, g < h->n_layer ? "layer" : "group", g,
                                (unsigned long long)(G->off + G->stored),
                                (unsigned long long)fsize);
        if (G->codec != EBB_STREAM_CODEC_RAW && G->stored > max_stored)
            max_stored = G->stored;
    }
    for (uint32_t t = 0; t < h->n_tensors; t++) {
        const struct ebb_pack_tensor *T = &p->tensors[t];
        if (!has_nul(T->name, sizeof(T->name)) || T->group >= h->n_groups ||
            T->off > p->groups[T->group].raw || T->size > p->groups[T->group].raw - T->off)
            return ebb_diag_set(diag, EBB_EFORMAT, "pack '%s': tensor entry %u is malformed",
                                p->path, t);
    }
    p->scratch_size = (size_t)max_stored;
    return EBB_OK;
}

ebb_err ebb_pack_open(const char *path, const struct ebb_pack_expect *want, struct ebb_pack **out,
                      struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    struct ebb__pack_hdr h;
    struct stat sb;
    struct ebb_pack *p = calloc(1, sizeof(*p));
    if (!p)
        return EBB_ENOMEM;
    snprintf(p->path, sizeof(p->path), "%s", path);
    p->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (p->fd < 0) {
        rc = ebb_diag_set(diag, errno == ENOENT ? EBB_ENOENT : EBB_EIO, "cannot open pack '%s': %s",
                          path, strerror(errno));
        goto out;
    }
    if (fstat(p->fd, &sb) || !S_ISREG(sb.st_mode)) {
        rc = ebb_diag_set(diag, EBB_EIO, "pack '%s' is not a regular file", path);
        goto out;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    if (fsize < sizeof(h) || pread_all(p->fd, &h, sizeof(h), 0) ||
        memcmp(h.magic, EBB__PACK_MAGIC, 8)) {
        rc = ebb_diag_set(diag, EBB_EFORMAT, "'%s' is not an ebb pack file (bad magic)", path);
        goto out;
    }
    if (h.version != EBB__PACK_VERSION || h.hdr_size != EBB__PACK_HDR) {
        rc = ebb_diag_set(diag, EBB_EUNSUPPORTED, "pack '%s' has version %u; this ebb reads %u",
                          path, h.version, EBB__PACK_VERSION);
        goto out;
    }
    if (ebb_hash64(&h, offsetof(struct ebb__pack_hdr, hdr_hash), 0) != h.hdr_hash ||
        !has_nul(h.model_name, sizeof(h.model_name)) || !has_nul(h.layout, sizeof(h.layout)) ||
        !has_nul(h.device_kind, sizeof(h.device_kind)) || h.n_groups != h.n_layer + 1) {
        rc = ebb_diag_set(diag, EBB_EFORMAT, "pack '%s': header is corrupt", path);
        goto out;
    }
    if (h.file_size != fsize) {
        rc = ebb_diag_set(diag, EBB_EFORMAT,
                          "pack '%s' is truncated or extended: its header says %llu bytes, the "
                          "file has %llu",
                          path, (unsigned long long)h.file_size, (unsigned long long)fsize);
        goto out;
    }
    struct ebb_pack_info *i = &p->info;
    memcpy(i->model_name, h.model_name, sizeof(i->model_name));
    memcpy(i->layout, h.layout, sizeof(i->layout));
    memcpy(i->device_kind, h.device_kind, sizeof(i->device_kind));
    i->model_size = h.model_size;
    i->meta_hash = h.meta_hash;
    i->file_size = fsize;
    i->n_layer = h.n_layer;
    i->n_groups = h.n_groups;
    i->n_tensors = h.n_tensors;
    if ((rc = read_dir(p, &h, fsize, diag)) || (rc = check_expect(p, want, diag)))
        goto out;
    *out = p;
    p = NULL;
out:
    ebb_pack_close(p);
    return rc;
}

void ebb_pack_close(struct ebb_pack *p)
{
    if (!p)
        return;
    if (p->fd >= 0)
        close(p->fd);
    free(p->groups);
    free(p->tensors);
    free(p->scratch);
    ZSTD_freeDCtx(p->dctx);
    free(p);
}

const struct ebb_pack_info *ebb_pack_info(const struct ebb_pack *p)
{
    return &p->info;
}

const struct ebb_pack_tensor *ebb_pack_tensor_at(const struct ebb_pack *p, uint32_t i)
{
    return i < p->info.n_tensors ? &p->tensors[i] : NULL;
}

const struct ebb_pack_tensor *ebb_pack_find_tensor(const struct ebb_pack *p, const char *name)
{
    for (uint32_t i = 0; i < p->info.n_tensors; i++)
        if (!strcmp(p->tensors[i].name, name))
            return &p->tensors[i];
    return NULL;
}

ebb_err ebb_pack_group(const struct ebb_pack *p, uint32_t g, struct ebb_stream_layer *out)
{
    if (g >= p->info.n_groups)
        return EBB_ERANGE;
    const struct ebb__pack_group *G = &p->groups[g];
    out->off = G->off;
    out->size = G->stored;
    out->raw_size = G->raw;
    out->codec = G->codec;
    out->has_sum = true;
    out->sum = G->sum;
    return EBB_OK;
}

ebb_err ebb_pack_read_group(struct ebb_pack *p, uint32_t g, void *dst, size_t cap,
                            struct ebb_diag *diag)
{
    if (g >= p->info.n_groups)
        return ebb_diag_set(diag, EBB_ERANGE, "pack '%s' has no group %u", p->path, g);
    const struct ebb__pack_group *G = &p->groups[g];
    if (cap < G->raw)
        return ebb_diag_set(diag, EBB_EINVAL, "buffer of %zu bytes for a %llu-byte group", cap,
                            (unsigned long long)G->raw);
    bool raw = G->codec == EBB_STREAM_CODEC_RAW;
    if (!raw && !p->scratch) {
        p->scratch = malloc(p->scratch_size ? p->scratch_size : 1);
        p->dctx = ZSTD_createDCtx();
        if (!p->scratch || !p->dctx)
            return EBB_ENOMEM;
    }
    uint8_t *buf = raw ? dst : p->scratch;
    ebb_err rc = pread_all(p->fd, buf, (size_t)G->stored, G->off);
    if (rc)
        return ebb_diag_set(diag, rc, "pack '%s': cannot read %s %u", p->path,
                            g < p->info.n_layer ? "layer" : "group", g);
    if (ebb_hash64(buf, (size_t)G->stored, 0) != G->sum)
        return ebb_diag_set(diag, EBB_EFORMAT,
                            "pack '%s': checksum mismatch in %s %u (bytes %llu..%llu are corrupt)",
                            p->path, g < p->info.n_layer ? "layer" : "group", g,
                            (unsigned long long)G->off, (unsigned long long)(G->off + G->stored));
    if (!raw) {
        size_t n = ZSTD_decompressDCtx(p->dctx, dst, cap, buf, (size_t)G->stored);
        if (ZSTD_isError(n) || n != G->raw)
            return ebb_diag_set(diag, EBB_EFORMAT, "pack '%s': %s %u does not decode", p->path,
                                g < p->info.n_layer ? "layer" : "group", g);
    }
    return EBB_OK;
}
