/* Memory pressure notifications: see mempressure.h. */
#include "mempressure.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum { MAX_FDS = 8 }; /* levels x groups (v1: 2 levels, up to 3 groups) or 2 PSI triggers */

struct ebb_mempressure {
    int stop_fd;      /* eventfd: written by ebb_mempressure_stop */
    int n;            /* armed notifications */
    int fd[MAX_FDS];  /* v1: the eventfd; v2/PSI: the trigger's file */
    int aux[MAX_FDS]; /* v1: the memory.pressure_level file kept open with it; else -1 */
    int level[MAX_FDS];
    short events[MAX_FDS]; /* POLLIN (eventfd) or POLLPRI (PSI trigger) */
    char desc[320];
};

const char *ebb_mempressure_level_name(int level)
{
    return level == EBB_MEMPRESSURE_CRITICAL ? "critical"
           : level == EBB_MEMPRESSURE_MEDIUM ? "medium"
                                             : "none";
}

static int open_at(const char *root, const char *dir, size_t dl, const char *file, int flags)
{
    char path[1024];
    int n = snprintf(path, sizeof(path), "%s%.*s/%s", root, (int)dl, dir, file);
    if (n < 0 || (size_t)n >= sizeof(path))
        return -1;
    return open(path, flags | O_CLOEXEC);
}

/* True when the group at dir[0..dl) has a limit (v1's "none" is 2^63 - 4096, v2's "max"). */
static bool has_limit(const char *root, const char *dir, size_t dl, const char *file)
{
    int fd = open_at(root, dir, dl, file, O_RDONLY);
    if (fd < 0)
        return false;
    char buf[64];
    ssize_t r = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (r <= 0)
        return false;
    buf[r] = 0;
    uint64_t v;
    return !ebb_memprobe_parse_u64(buf, &v) && v < ((uint64_t)1 << 62);
}

/* cgroup v1: registers an eventfd for each level on the group at dir[0..dl). */
static int arm_v1(struct ebb_mempressure *w, const char *root, const char *dir, size_t dl, int *err)
{
    static const char *const names[] = {"medium", "critical"};
    static const int levels[] = {EBB_MEMPRESSURE_MEDIUM, EBB_MEMPRESSURE_CRITICAL};
    int armed = 0;
    for (int i = 0; i < 2 && w->n < MAX_FDS; i++) {
        int lfd = open_at(root, dir, dl, "memory.pressure_level", O_RDONLY);
        int cfd = open_at(root, dir, dl, "cgroup.event_control", O_WRONLY);
        int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        char line[64];
        int len = snprintf(line, sizeof(line), "%d %d %s", efd, lfd, names[i]);
        if (lfd < 0 || cfd < 0 || efd < 0 || write(cfd, line, (size_t)len) != len) {
            *err = errno;
            if (lfd >= 0)
                close(lfd);
            if (efd >= 0)
                close(efd);
            if (cfd >= 0)
                close(cfd);
            return armed;
        }
        close(cfd);
        w->fd[w->n] = efd;
        w->aux[w->n] = lfd;
        w->level[w->n] = levels[i];
        w->events[w->n] = POLLIN;
        w->n++;
        armed++;
    }
    return armed;
}

/* PSI: one trigger per level on a memory.pressure file (the group's, or /proc's). */
static int arm_psi(struct ebb_mempressure *w, const char *root, const char *dir, size_t dl,
                   const char *file, int *err)
{
    /* Windows of 2 s: the kernel takes those from unprivileged processes too. */
    static const char *const trig[] = {"some 300000 2000000", "full 200000 2000000"};
    static const int levels[] = {EBB_MEMPRESSURE_MEDIUM, EBB_MEMPRESSURE_CRITICAL};
    int armed = 0;
    for (int i = 0; i < 2 && w->n < MAX_FDS; i++) {
        int fd = open_at(root, dir, dl, file, O_RDWR | O_NONBLOCK);
        size_t len = strlen(trig[i]) + 1; /* the kernel wants the terminating NUL */
        if (fd < 0 || write(fd, trig[i], len) != (ssize_t)len) {
            *err = errno;
            if (fd >= 0)
                close(fd);
            return armed;
        }
        w->fd[w->n] = fd;
        w->aux[w->n] = -1;
        w->level[w->n] = levels[i];
        w->events[w->n] = POLLPRI;
        w->n++;
        armed++;
    }
    return armed;
}

ebb_err ebb_mempressure_open(const struct ebb_memprobe *mp, struct ebb_mempressure **out,
                             struct ebb_diag *diag)
{
    const char *dir, *root = ebb_memprobe_root(mp);
    size_t mount_len;
    int ver = ebb_memprobe_cgroup(mp, &dir, &mount_len);
    struct ebb_mempressure *w = calloc(1, sizeof(*w));
    if (!w)
        return EBB_ENOMEM;
    w->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->stop_fd < 0) {
        free(w);
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "eventfd: %s", strerror(errno));
    }
    int err = 0;
    size_t dl = strlen(dir);
    char groups[200] = "";
    if (ver == 1) {
        /* The group itself, then every ancestor with a limit (at most three groups): the
         * kernel signals the group whose limit reclaims. */
        int ng = 0;
        for (size_t l = dl; ng < 3;) {
            if ((l == dl || has_limit(root, dir, l, "memory.limit_in_bytes")) &&
                arm_v1(w, root, dir, l, &err) > 0) {
                size_t gl = strlen(groups);
                snprintf(groups + gl, sizeof(groups) - gl, "%s%.*s", ng ? " " : "",
                         l > mount_len ? (int)(l - mount_len) : 1,
                         l > mount_len ? dir + mount_len : "/");
                ng++;
            }
            if (l <= mount_len)
                break;
            while (l > mount_len && dir[l - 1] != '/')
                l--;
            if (l > mount_len)
                l--;
        }
        if (w->n)
            snprintf(w->desc, sizeof(w->desc), "cgroup v1 %s memory.pressure_level medium,critical",
                     groups);
    } else if (ver == 2 && arm_psi(w, root, dir, dl, "memory.pressure", &err) > 0) {
        snprintf(w->desc, sizeof(w->desc),
                 "cgroup v2 %.*s memory.pressure triggers some 300ms/2s,full 200ms/2s",
                 dl > mount_len ? (int)(dl - mount_len) : 1,
                 dl > mount_len ? dir + mount_len : "/");
    } else if (!ver && arm_psi(w, root, "/proc/pressure", 14, "memory", &err) > 0) {
        snprintf(w->desc, sizeof(w->desc),
                 "/proc/pressure/memory triggers some 300ms/2s,full 200ms/2s");
    }
    if (!w->n) {
        const char *where = ver == 1   ? "cgroup v1 memory.pressure_level"
                            : ver == 2 ? "cgroup v2 memory.pressure"
                                       : "/proc/pressure/memory";
        ebb_mempressure_close(w);
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "%s: %s", where,
                            err ? strerror(err) : "not there");
    }
    *out = w;
    return EBB_OK;
}

void ebb_mempressure_close(struct ebb_mempressure *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n; i++) {
        close(w->fd[i]);
        if (w->aux[i] >= 0)
            close(w->aux[i]);
    }
    close(w->stop_fd);
    free(w);
}

const char *ebb_mempressure_describe(const struct ebb_mempressure *w)
{
    return w ? w->desc : "";
}

int ebb_mempressure_wait(struct ebb_mempressure *w, int timeout_ms)
{
    struct pollfd p[MAX_FDS + 1];
    p[0] = (struct pollfd){.fd = w->stop_fd, .events = POLLIN};
    for (int i = 0; i < w->n; i++)
        p[i + 1] = (struct pollfd){.fd = w->events[i] ? w->fd[i] : -1, .events = w->events[i]};
    int r = poll(p, (nfds_t)w->n + 1, timeout_ms);
    if (r < 0 && errno == EINTR)
        return EBB_MEMPRESSURE_NONE;
    if (r < 0 || (p[0].revents & POLLIN))
        return -1;
    int level = EBB_MEMPRESSURE_NONE;
    for (int i = 0; i < w->n; i++) {
        if (!w->events[i] || !(p[i + 1].revents & (w->events[i] | POLLERR)))
            continue;
        if (w->events[i] == POLLIN) {
            uint64_t c;
            if (read(w->fd[i], &c, sizeof(c)) != (ssize_t)sizeof(c))
                continue;
        } else if (p[i + 1].revents & POLLERR) {
            /* The group is gone: this trigger fires no more; poll() skips it from now on. */
            w->events[i] = 0;
            continue;
        }
        if (w->level[i] > level)
            level = w->level[i];
    }
    return level;
}

void ebb_mempressure_stop(struct ebb_mempressure *w)
{
    uint64_t one = 1;
    if (w && write(w->stop_fd, &one, sizeof(one)) < 0)
        return; /* the counter is full: a stop is posted already */
}
