/* GGUF files on disk: one file mapped and parsed, or a split model opened as one.
 *
 * A split GGUF (NAME-00001-of-00003.gguf ...) is opened as one model. Each part is a GGUF of its
 * own: the first carries the metadata, every part its own tensor table with offsets into its
 * own data section, and split.no / split.count / split.tensors.count say where it belongs.
 * The parts are mapped into one reserved span, each at a page boundary after the one before,
 * so the model sees one image: a tensor's data pointer, its offset from the first part's data
 * section and the span's size (ebb_gguf_file_size) mean what they mean for a single file. */
#include "gguf.h"
#include "gguf-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_PARTS 999u

static bool kv_int(const struct ebb_gguf *g, const char *key, uint64_t *out)
{
    int64_t i = ebb_gguf_find_kv(g, key);
    struct ebb__gguf_ival v;
    if (i < 0 || !ebb__gguf_read_int(g->kv[i].type, g->kv[i].val, &v) || v.neg)
        return false;
    *out = v.mag;
    return true;
}

static uint32_t split_count(const struct ebb_gguf *g)
{
    uint64_t n;
    return kv_int(g, "split.count", &n) && n >= 1 && n <= MAX_PARTS ? (uint32_t)n : 1;
}

/* Part k's (1-based) path from the first's: the -00001-of-NNNNN.gguf ending rewritten. */
static bool part_path(const char *first, uint32_t k, uint32_t count, char *out, size_t cap)
{
    size_t n = strlen(first);
    char tail[32];
    snprintf(tail, sizeof(tail), "-00001-of-%05u.gguf", count);
    size_t tl = strlen(tail);
    if (n <= tl || strcmp(first + n - tl, tail))
        return false;
    return snprintf(out, cap, "%.*s-%05u-of-%05u.gguf", (int)(n - tl), first, k, count) < (int)cap;
}

/* Opens the split model whose first part is path (already parsed as first) as one. */
static ebb_err open_split(const char *path, const struct ebb_gguf *first, struct ebb_gguf **out,
                          struct ebb_diag *diag)
{
    uint32_t count = split_count(first);
    uint64_t no = 0;
    if (!kv_int(first, "split.no", &no) || no != 0)
        return ebb_diag_set(diag, EBB_EINVAL,
                            "part %" PRIu64 " of a split model: open its first part "
                            "(NAME-00001-of-%05u.gguf)",
                            no + 1, count);
    ebb_err rc = EBB_OK;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int *fds = calloc(count, sizeof(int));
    uint64_t *sizes = calloc(count, sizeof(uint64_t)), *offs = calloc(count, sizeof(uint64_t));
    struct ebb_gguf **sub = calloc(count, sizeof(*sub));
    uint8_t *span = MAP_FAILED;
    uint64_t total = 0;
    char p[4096];
    if (!fds || !sizes || !offs || !sub) {
        rc = ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
        goto out;
    }
    for (uint32_t k = 0; k < count; k++)
        fds[k] = -1;
    for (uint32_t k = 0; k < count; k++) {
        if (!part_path(path, k + 1, count, p, sizeof(p))) {
            rc = ebb_diag_set(diag, EBB_EINVAL,
                              "split.count is %u but the file is not named "
                              "NAME-00001-of-%05u.gguf, so its other parts cannot be found",
                              count, count);
            goto out;
        }
        struct stat st;
        fds[k] = open(p, O_RDONLY | O_CLOEXEC);
        if (fds[k] < 0 || fstat(fds[k], &st) || !S_ISREG(st.st_mode)) {
            rc = ebb_diag_set(diag, errno == ENOENT ? EBB_ENOENT : EBB_EIO,
                              "part %u of %u of the split model, %s: %s", k + 1, count, p,
                              fds[k] < 0 ? strerror(errno) : "not a regular file");
            goto out;
        }
        sizes[k] = (uint64_t)st.st_size;
        offs[k] = total;
        uint64_t padded = (sizes[k] + page - 1) / page * page;
        if (sizes[k] < 24 || __builtin_add_overflow(total, padded, &total) || total > SIZE_MAX) {
            rc = ebb_diag_set(diag, EBB_EFORMAT, "part %u of the split model, %s: bad size", k + 1,
                              p);
            goto out;
        }
    }
    /* One span reserved, then each part mapped over its place in it. */
    span = mmap(NULL, (size_t)total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (span == MAP_FAILED) {
        rc = ebb_diag_set(diag, EBB_EIO, "cannot reserve %" PRIu64 " bytes for the split model",
                          total);
        goto out;
    }
    for (uint32_t k = 0; k < count; k++) {
        if (mmap(span + offs[k], (size_t)sizes[k], PROT_READ, MAP_PRIVATE | MAP_FIXED, fds[k], 0) ==
            MAP_FAILED) {
            rc = ebb_diag_set(diag, EBB_EIO, "cannot map part %u: %s", k + 1, strerror(errno));
            goto out;
        }
    }
    uint64_t n_tensors = 0;
    for (uint32_t k = 0; k < count; k++) {
        struct ebb_diag d = {{0}};
        uint64_t kno, kcount;
        part_path(path, k + 1, count, p, sizeof(p));
        if ((rc = ebb__gguf_open_image(span + offs[k], sizes[k], false, &sub[k], &d))) {
            ebb_diag_set(diag, rc, "part %u of the split model, %s: %s", k + 1, p, d.msg);
            goto out;
        }
        if (!kv_int(sub[k], "split.no", &kno) || kno != k ||
            !kv_int(sub[k], "split.count", &kcount) || kcount != count) {
            rc = ebb_diag_set(diag, EBB_EFORMAT,
                              "%s does not say it is part %u of %u (split.no, split.count)", p,
                              k + 1, count);
            goto out;
        }
        if (sub[k]->alignment != sub[0]->alignment) {
            rc = ebb_diag_set(diag, EBB_EFORMAT, "%s: alignment %u, the first part's is %u", p,
                              sub[k]->alignment, sub[0]->alignment);
            goto out;
        }
        n_tensors += sub[k]->n_tensors;
    }
    uint64_t want;
    if (kv_int(sub[0], "split.tensors.count", &want) && want != n_tensors) {
        rc = ebb_diag_set(diag, EBB_EFORMAT,
                          "the parts hold %" PRIu64 " tensors, split.tensors.count says %" PRIu64,
                          n_tensors, want);
        goto out;
    }
    /* The first part's index becomes the whole model's: every tensor, offsets from its data
     * section (the later parts' lie further into the span), the span as its image. */
    struct ebb_gguf *g = sub[0];
    struct ebb_gguf_tensor *all = ebb__gguf_alloc(g, n_tensors * sizeof(*all));
    g->parts = calloc(count - 1, sizeof(*g->parts));
    if (!all || !g->parts) {
        rc = ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
        goto out;
    }
    uint64_t n = 0;
    for (uint32_t k = 0; k < count; k++)
        for (uint64_t i = 0; i < sub[k]->n_tensors; i++) {
            all[n] = sub[k]->tensors[i];
            all[n].offset = (uint64_t)((const uint8_t *)all[n].data - span) - g->data_offset;
            n++;
        }
    g->tensors = all;
    g->n_tensors = n;
    for (uint32_t k = 1; k < count; k++) {
        g->parts[k - 1] = sub[k];
        sub[k] = NULL;
    }
    g->n_parts = count - 1;
    if ((rc = ebb__gguf_index_tensors(g, diag)))
        goto out;
    g->size = total;
    g->mapped = true;
    span = MAP_FAILED; /* g unmaps it */
    *out = g;
    sub[0] = NULL;
out:
    for (uint32_t k = 0; sub && k < count; k++)
        ebb_gguf_close(sub[k]);
    if (span != MAP_FAILED)
        munmap(span, (size_t)total);
    for (uint32_t k = 0; fds && k < count; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    free(fds);
    free(sizes);
    free(offs);
    free(sub);
    return rc;
}

ebb_err ebb_gguf_open(const char *path, struct ebb_gguf **out, struct ebb_diag *diag)
{
    if (!path || !out)
        return ebb_diag_set(diag, EBB_EINVAL, "invalid argument");
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is rejected below. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        return ebb_diag_set(diag, e == ENOENT ? EBB_ENOENT : EBB_EIO, "cannot open: %s",
                            strerror(e));
    }
    ebb_err rc = EBB_OK;
    void *map = MAP_FAILED;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = ebb_diag_set(diag, EBB_EIO, "cannot stat: %s", strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ebb_diag_set(diag, EBB_EINVAL, "not a regular file");
        goto out;
    }
    if (st.st_size < (off_t)EBB__GGUF_HEADER_BYTES) {
        rc = ebb_diag_set(diag, EBB_EFORMAT,
                          "file of %lld bytes is too short for a GGUF header (24 bytes)",
                          (long long)st.st_size);
        goto out;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        rc = ebb_diag_set(diag, EBB_ERANGE, "file too large to map");
        goto out;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = ebb_diag_set(diag, EBB_EIO, "cannot map: %s", strerror(errno));
        goto out;
    }
    struct ebb_gguf *g = NULL;
    rc = ebb__gguf_open_image(map, (uint64_t)st.st_size, true, &g, diag);
    if (rc) {
        munmap(map, (size_t)st.st_size);
        goto out;
    }
    /* The first part of a split model brings the others (gguf-split.c). */
    if (split_count(g) > 1) {
        struct ebb_gguf *whole = NULL;
        rc = open_split(path, g, &whole, diag);
        ebb_gguf_close(g);
        g = whole;
    }
    if (!rc)
        *out = g;
out:
    close(fd);
    return rc;
}
