/* One file of a pull: GET with Range from the .part file's length, the answer checked (206 with
 * a Content-Range that starts where the part ends; 200 starts over; 416 means the part is whole
 * or stale), the body appended and hashed as it arrives, the sha256 compared with the hub's LFS
 * object id, and the part renamed into place. A connection lost mid-body is retried from where
 * the part ends. */
#include "fetch-int.h"
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define BUF_BYTES ((size_t)1 << 16)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool is_sha256(const char *s)
{
    if (strlen(s) != 64)
        return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F')))
            return false;
    return true;
}

/* State of one file across attempts. */
struct job {
    const struct ebb_pull_opts *o;
    const char *dir;
    struct ebb_pull_progress p;
    char sha[65]; /* expected, "" = none reported */
    int64_t size; /* expected whole size, -1 = not known */
    double last_cb;
    char *buf; /* BUF_BYTES: several pulls may run at once (the daemon's /api/pull) */
};

static void report(struct job *j, enum ebb_pull_phase phase, bool force)
{
    if (!j->o->progress)
        return;
    double t = now_s();
    if (!force && t - j->last_cb < 0.1)
        return;
    j->last_cb = t;
    j->p.phase = phase;
    j->p.sha256 = j->sha;
    j->o->progress(&j->p, j->o->ud);
}

/* Hashes the first n bytes of fd into s. */
static ebb_err hash_file(int fd, uint64_t n, struct ebb_sha256 *s, struct job *j,
                         struct ebb_diag *diag)
{
    char *buf = j->buf;
    uint64_t off = 0;
    while (off < n) {
        size_t want = n - off < BUF_BYTES ? (size_t)(n - off) : BUF_BYTES;
        ssize_t r = pread(fd, buf, want, (off_t)off);
        if (r <= 0)
            return ebb_diag_set(diag, EBB_EIO, "reading back %s failed: %s", j->p.file,
                                r < 0 ? strerror(errno) : "short file");
        ebb_sha256_update(s, buf, (size_t)r);
        off += (uint64_t)r;
        j->p.done = off;
        report(j, EBB_PULL_VERIFYING, false);
    }
    return EBB_OK;
}

static ebb_err check_space(const char *dir, uint64_t need, struct ebb_diag *diag)
{
    struct statvfs sv;
    if (statvfs(dir, &sv))
        return EBB_OK; /* nothing to go by: the writes will say */
    uint64_t avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    if (avail < need)
        return ebb_diag_set(diag, EBB_ERANGE,
                            "not enough disk space in %s: %.1f MiB needed, %.1f MiB free", dir,
                            (double)need / 1048576.0, (double)avail / 1048576.0);
    return EBB_OK;
}

static ebb_err status_error(const struct ebb__http *h, const char *url, const char *token,
                            struct ebb_diag *diag)
{
    switch (h->status) {
    case 401:
    case 403: /* EINVAL: not retried */
        return ebb_diag_set(diag, EBB_EINVAL, "%s: HTTP %d (%s)", url, h->status,
                            token ? "the token in HF_TOKEN was refused"
                                  : "a gated or private repository: set HF_TOKEN");
    case 404:
        return ebb_diag_set(diag, EBB_ENOTFOUND, "%s: no such file (HTTP 404)", url);
    default:
        return ebb_diag_set(diag, EBB_EIO, "%s: HTTP %d", url, h->status);
    }
}

/* Parses "bytes S-E/T" (T may be '*'); *total = -1 when not given. */
static bool content_range(const char *v, uint64_t *start, int64_t *total)
{
    unsigned long long s, e;
    char t[32];
    if (sscanf(v, "bytes %llu-%llu/%31s", &s, &e, t) != 3 || e < s)
        return false;
    *start = s;
    *total = strcmp(t, "*") ? strtoll(t, NULL, 10) : -1;
    return true;
}

/* One attempt: fetches from the end of the part on. *progress is set when bytes arrived (so a
 * retry is worth it). EBB_OK when the part holds the whole file, hashed into s. */
static ebb_err attempt(struct job *j, const char *url, int fd, struct ebb_sha256 *s, bool *progress,
                       struct ebb_diag *diag)
{
    struct ebb__http h;
    struct stat st;
    ebb_err rc;
    *progress = false;
    if (fstat(fd, &st))
        return ebb_diag_set(diag, EBB_EIO, "%s.part: %s", j->p.file, strerror(errno));
    uint64_t have = (uint64_t)st.st_size;
    const char *token = j->o->token;
    struct ebb__http_req req = {.method = "GET",
                                .token = token,
                                .range_from = have,
                                .timeout_s = j->o->timeout_s,
                                .cancel = j->o->cancel};
    if ((rc = ebb__http_open(&h, url, &req, diag)))
        return rc;
    if (h.linked_size >= 0)
        j->size = h.linked_size;
    if (!j->sha[0]) {
        if (is_sha256(h.linked_etag))
            memcpy(j->sha, h.linked_etag, 65);
        else if (is_sha256(h.etag))
            memcpy(j->sha, h.etag, 65);
        for (char *c = j->sha; *c; c++)
            if (*c >= 'A' && *c <= 'F')
                *c = (char)(*c - 'A' + 'a');
    }
    uint64_t start = 0;
    int64_t total = -1;
    if (h.status == 416) {
        /* Nothing past the part's end: whole when the sizes agree, else stale. */
        if (content_range(h.content_range, &start, &total) ||
            sscanf(h.content_range, "bytes */%lld", (long long *)&total) == 1) {
            if (j->size < 0)
                j->size = total;
        }
        ebb__http_close(&h);
        if (have > 0 && j->size >= 0 && (uint64_t)j->size == have) {
            ebb_sha256_init(s);
            return hash_file(fd, have, s, j, diag);
        }
        if (ftruncate(fd, 0))
            return ebb_diag_set(diag, EBB_EIO, "%s.part: %s", j->p.file, strerror(errno));
        *progress = true; /* the next attempt starts from nothing */
        return ebb_diag_set(diag, EBB_EIO,
                            "%s: the partial download did not match the file on "
                            "the server (HTTP 416); starting over",
                            j->p.file);
    }
    if (h.status != 200 && h.status != 206) {
        rc = status_error(&h, url, token, diag);
        ebb__http_close(&h);
        return rc;
    }
    if (h.status == 206) {
        if (!content_range(h.content_range, &start, &total) || start != have) {
            ebb__http_close(&h);
            if (ftruncate(fd, 0))
                return ebb_diag_set(diag, EBB_EIO, "%s.part: %s", j->p.file, strerror(errno));
            *progress = true;
            return ebb_diag_set(diag, EBB_EIO,
                                "%s: the server answered the range with '%s'; "
                                "starting over",
                                j->p.file, h.content_range);
        }
        if (total >= 0)
            j->size = total;
    } else {
        have = 0; /* a 200 is the whole file: start over */
        if (ftruncate(fd, 0)) {
            ebb__http_close(&h);
            return ebb_diag_set(diag, EBB_EIO, "%s.part: %s", j->p.file, strerror(errno));
        }
        if (h.content_length >= 0)
            j->size = h.content_length;
    }
    j->p.total = j->size >= 0 ? (uint64_t)j->size : 0;
    j->p.resumed = have;
    j->p.done = have;
    /* Disk space before the first byte: what is still to come must fit. */
    if (j->size >= 0 && (uint64_t)j->size > have &&
        (rc = check_space(j->dir, (uint64_t)j->size - have, diag))) {
        ebb__http_close(&h);
        return rc;
    }
    report(j, EBB_PULL_DOWNLOADING, true); /* the sizes are known: the first line */
    ebb_sha256_init(s);
    if (have && (rc = hash_file(fd, have, s, j, diag))) {
        ebb__http_close(&h);
        return rc;
    }
    char *buf = j->buf;
    for (;;) {
        size_t got;
        if (j->o->cancel && *j->o->cancel) {
            rc = ebb_diag_set(diag, EBB_ECANCELED, "%s: the pull was stopped", j->p.file);
            break;
        }
        if ((rc = ebb__http_read(&h, buf, BUF_BYTES, &got, diag)))
            break;
        if (!got)
            break;
        for (size_t off = 0; off < got;) {
            ssize_t w = pwrite(fd, buf + off, got - off, (off_t)(j->p.done + off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                ebb__http_close(&h);
                return ebb_diag_set(diag, EBB_EIO, "writing %s.part failed: %s", j->p.file,
                                    w < 0 ? strerror(errno) : "no space");
            }
            off += (size_t)w;
        }
        ebb_sha256_update(s, buf, got);
        j->p.done += got;
        *progress = true;
        report(j, EBB_PULL_DOWNLOADING, false);
    }
    ebb__http_close(&h);
    if (rc)
        return rc;
    if (j->size >= 0 && j->p.done != (uint64_t)j->size)
        return ebb_diag_set(diag, EBB_EIO, "%s: the body ended at %llu of %lld bytes", j->p.file,
                            (unsigned long long)j->p.done, (long long)j->size);
    return EBB_OK;
}

ebb_err ebb__pull_file(const char *url, const char *dir, const char *name, int part, int n_parts,
                       const struct ebb_pull_opts *o, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    char dest[4096], tmp[4200];
    int fd = -1;
    struct job j = {.o = o, .dir = dir, .size = -1};
    j.p.file = name;
    j.p.part = part;
    j.p.n_parts = n_parts;
    if (snprintf(dest, sizeof(dest), "%s/%s", dir, name) >= (int)sizeof(dest))
        return ebb_diag_set(diag, EBB_EINVAL, "path too long: %s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.part", dest);
    struct stat st;
    if (stat(dest, &st) == 0) {
        /* Kept as it is: a file the user has (or an earlier pull finished) is not fetched again. */
        j.p.done = j.p.total = (uint64_t)st.st_size;
        j.p.present = true;
        report(&j, EBB_PULL_DONE, true);
        return EBB_OK;
    }
    if (!(j.buf = malloc(BUF_BYTES)))
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    fd = open(tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(j.buf);
        return ebb_diag_set(diag, EBB_EIO, "cannot write %s: %s", tmp, strerror(errno));
    }
    /* One writer per part: a second pull of the same file waits for nobody, it says so. */
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        close(fd);
        free(j.buf);
        return ebb_diag_set(diag, EBB_EBUSY, "another pull is writing %s", tmp);
    }
    int retries = o->retries < 0 ? 3 : o->retries;
    struct ebb_sha256 s;
    bool progress;
    struct ebb_diag d = {{0}};
    for (int tries = 0;; tries++) {
        d.msg[0] = '\0';
        rc = attempt(&j, url, fd, &s, &progress, &d);
        if (rc == EBB_OK || tries >= retries || rc != EBB_EIO || (o->cancel && *o->cancel))
            break;
        j.p.note = d.msg; /* why the next attempt */
        report(&j, EBB_PULL_RETRYING, true);
        j.p.note = NULL;
        /* Nothing arrived: wait a little longer each time (1, 2, 4, 8 s), as a cancel allows. */
        for (int q = 0; !progress && q < 4 << (tries < 3 ? tries : 3); q++) {
            if (o->cancel && *o->cancel)
                break;
            usleep(250000);
        }
    }
    if (rc) {
        struct stat ps;
        if (fstat(fd, &ps) == 0 && ps.st_size == 0) {
            unlink(tmp);
            ebb_diag_set(diag, rc, "%s", d.msg);
        } else {
            ebb_diag_set(diag, rc, "%s (the partial file %s is kept: pull again to resume)", d.msg,
                         tmp);
        }
        goto out;
    }
    uint8_t digest[32];
    char got[65];
    ebb_sha256_final(&s, digest);
    ebb_sha256_hex(digest, got);
    if (j.sha[0] && strcmp(got, j.sha)) {
        unlink(tmp);
        rc = ebb_diag_set(diag, EBB_EIO,
                          "%s: sha256 mismatch: the server reported %s, the download is %s; the "
                          "partial file was removed",
                          name, j.sha, got);
        goto out;
    }
    if (fsync(fd) || rename(tmp, dest)) {
        rc = ebb_diag_set(diag, EBB_EIO, "cannot finish %s: %s", dest, strerror(errno));
        goto out;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    j.p.total = j.p.done;
    report(&j, EBB_PULL_DONE, true);
out:
    close(fd);
    free(j.buf);
    return rc;
}
