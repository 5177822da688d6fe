/* Memory probes: see memprobe.h. Files are read into a fixed stack buffer, so a probe never
 * allocates; NVML is reached through dlopen so that ebb runs (and builds) without it. */
#include "memprobe.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__APPLE__)
#include <dispatch/dispatch.h>
#include <mach/mach.h>
#include <stdatomic.h>
#include <sys/sysctl.h>
#endif

/* NVML's ABI, declared here so that no NVIDIA header is needed. */
typedef int ebb__nvml_ret;
typedef void *ebb__nvml_dev;
struct ebb__nvml_memory {
    unsigned long long total, free, used;
};

struct ebb_memprobe {
    bool discrete;
    char root[256];
    int cg_version;      /* 0 (none), 1 or 2 */
    char cg_dir[512];    /* the group's directory under the mount, "" when there is none */
    size_t cg_mount_len; /* length of the mount point at the start of cg_dir */
    char cg_path[256];   /* the group as /proc/self/cgroup names it */
    bool have_meminfo, have_psi;
    /* NVML */
    void *nvml;
    ebb__nvml_dev nvdev;
    ebb__nvml_ret (*nv_mem)(ebb__nvml_dev, struct ebb__nvml_memory *);
    ebb__nvml_ret (*nv_shutdown)(void);
    /* the driver's query, and caller-provided device memory */
    bool (*dev_read)(void *u, uint64_t *total, uint64_t *free_bytes);
    void *dev_u;
    bool dev_set;
    uint64_t dev_total, dev_free;
    char desc[256];
#if defined(__APPLE__)
    /* The memory-pressure dispatch source sets mac_pressure from its own serial queue. */
    dispatch_queue_t dq;
    dispatch_source_t ds;
    atomic_int mac_pressure;
#endif
};

static ssize_t read_text(const struct ebb_memprobe *mp, const char *path, char *buf, size_t cap)
{
    char full[1024];
    snprintf(full, sizeof(full), "%s%s", mp ? mp->root : "", path);
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    return (ssize_t)n;
}

/* Finds "key" at the start of a line followed by a separator; returns the text after it. */
static const char *find_line(const char *text, const char *key, const char *seps)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, key, kl) && p[kl] && strchr(seps, p[kl]))
            return p + kl + 1;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return NULL;
}

ebb_err ebb_memprobe_parse_u64(const char *s, uint64_t *out)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (!isdigit((unsigned char)*s))
        return EBB_EFORMAT;
    uint64_t v = 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return EBB_ERANGE;
        v = v * 10 + d;
    }
    *out = v;
    return EBB_OK;
}

ebb_err ebb_memprobe_parse_meminfo(const char *text, uint64_t *total, uint64_t *available)
{
    const char *t = find_line(text, "MemTotal", ":");
    const char *a = find_line(text, "MemAvailable", ":");
    uint64_t tv, av;
    if (!t || !a || ebb_memprobe_parse_u64(t, &tv) || ebb_memprobe_parse_u64(a, &av))
        return EBB_EFORMAT;
    if (tv > UINT64_MAX / 1024 || av > UINT64_MAX / 1024) /* meminfo counts kB */
        return EBB_ERANGE;
    *total = tv * 1024;
    *available = av * 1024;
    return EBB_OK;
}

ebb_err ebb_memprobe_parse_psi(const char *text, double *some10, double *full10, uint64_t *some_us)
{
    const char *s = find_line(text, "some", " ");
    if (!s)
        return EBB_EFORMAT;
    const char *v = strstr(s, "avg10=");
    const char *tot = strstr(s, "total=");
    if (!v || !tot)
        return EBB_EFORMAT;
    *some10 = strtod(v + 6, NULL);
    *some_us = strtoull(tot + 6, NULL, 10);
    const char *f = find_line(text, "full", " ");
    const char *fv = f ? strstr(f, "avg10=") : NULL;
    *full10 = fv ? strtod(fv + 6, NULL) : 0.0; /* older kernels have no "full" line */
    return EBB_OK;
}

ebb_err ebb_memprobe_parse_cgroup(const char *text, char *path, size_t cap)
{
    const char *p = find_line(text, "0:", ":");
    if (!p)
        return EBB_ENOTFOUND;
    size_t n = strcspn(p, "\n");
    if (n == 0 || n >= cap)
        return EBB_EFORMAT;
    memcpy(path, p, n);
    path[n] = 0;
    return EBB_OK;
}

/* True when the comma-separated list (up to its end or a newline/space) holds word. */
static bool has_word(const char *list, size_t n, const char *word)
{
    size_t wl = strlen(word);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && list[j] != ',')
            j++;
        if (j - i == wl && !memcmp(list + i, word, wl))
            return true;
        i = j + 1;
    }
    return false;
}

ebb_err ebb_memprobe_parse_cgroup_v1(const char *text, char *path, size_t cap)
{
    /* "hierarchy-id:controller,controller:/path" per line; the memory controller may share a
     * hierarchy with others ("4:memory,cpuset:/x"). */
    for (const char *p = text; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *c1 = memchr(p, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - p)) : NULL;
        if (c2 && has_word(c1 + 1, (size_t)(c2 - c1 - 1), "memory")) {
            size_t n = len - (size_t)(c2 + 1 - p);
            if (n == 0 || n >= cap || c2[1] != '/')
                return EBB_EFORMAT;
            memcpy(path, c2 + 1, n);
            path[n] = 0;
            return EBB_OK;
        }
        p = eol ? eol + 1 : NULL;
    }
    return EBB_ENOTFOUND;
}

/* Copies a mountinfo field, decoding the kernel's octal escapes ("\040" for a space). */
static bool mi_field(const char *f, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = f[i];
        if (c == '\\' && i + 3 < n && f[i + 1] >= '0' && f[i + 1] <= '3' && f[i + 2] >= '0' &&
            f[i + 2] <= '7' && f[i + 3] >= '0' && f[i + 3] <= '7') {
            c = (char)((f[i + 1] - '0') * 64 + (f[i + 2] - '0') * 8 + (f[i + 3] - '0'));
            i += 3;
        }
        if (o + 1 >= cap)
            return false;
        out[o++] = c;
    }
    out[o] = 0;
    return true;
}

ebb_err ebb_memprobe_parse_mountinfo(const char *text, const char *fstype, const char *option,
                                     char *mnt, size_t mcap, char *root, size_t rcap)
{
    /* "id parent maj:min root mountpoint opts [optional...] - fstype source superopts" */
    for (const char *p = text; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *f[16];
        size_t fl[16], nf = 0;
        for (size_t i = 0; i < len && nf < 16;) {
            while (i < len && p[i] == ' ')
                i++;
            size_t j = i;
            while (j < len && p[j] != ' ')
                j++;
            if (j > i) {
                f[nf] = p + i;
                fl[nf++] = j - i;
            }
            i = j;
        }
        size_t dash = 6;
        while (dash < nf && !(fl[dash] == 1 && f[dash][0] == '-'))
            dash++;
        if (dash + 1 < nf && fl[dash + 1] == strlen(fstype) &&
            !memcmp(f[dash + 1], fstype, fl[dash + 1]) &&
            (!option || (dash + 3 < nf && has_word(f[dash + 3], fl[dash + 3], option)))) {
            if (!mi_field(f[4], fl[4], mnt, mcap) || !mi_field(f[3], fl[3], root, rcap))
                return EBB_EFORMAT;
            return EBB_OK;
        }
        p = eol ? eol + 1 : NULL;
    }
    return EBB_ENOTFOUND;
}

ebb_err ebb_memprobe_parse_stat(const char *text, const char *key, uint64_t *out)
{
    const char *v = find_line(text, key, " ");
    if (!v)
        return EBB_ENOTFOUND;
    return ebb_memprobe_parse_u64(v, out);
}

ebb_err ebb_memprobe_parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-')
        return EBB_EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || v < 0)
        return EBB_EINVAL;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (mul > 1 && *end == 'i')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return EBB_EINVAL;
    double b = v * mul;
    if (b >= 18446744073709551615.0)
        return EBB_ERANGE;
    *out = (uint64_t)b;
    return EBB_OK;
}

/* dlsym returns an object pointer; POSIX guarantees it converts to a function pointer, ISO C
 * does not, so the bits are copied. */
static void sym(void *lib, const char *name, void *fn, size_t fn_size)
{
    void *p = dlsym(lib, name);
    if (fn_size == sizeof(p))
        memcpy(fn, &p, sizeof(p));
}

static void nvml_open(struct ebb_memprobe *mp, const struct ebb_memprobe_params *p,
                      struct ebb_diag *diag)
{
    const char *why = NULL;
    /* EBB_NVML_LIBRARY: NVML at a path the loader does not search (WSL's /usr/lib/wsl/lib),
     * or the tests' stand-in. */
    const char *lib = getenv("EBB_NVML_LIBRARY");
    if (!lib || !*lib)
        lib = "libnvidia-ml.so.1";
    mp->nvml = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!mp->nvml) {
        why = "libnvidia-ml.so.1 not found (EBB_NVML_LIBRARY names another path)";
        goto out;
    }
    ebb__nvml_ret (*init)(void) = NULL;
    ebb__nvml_ret (*by_bus)(const char *, ebb__nvml_dev *) = NULL;
    ebb__nvml_ret (*by_uuid)(const char *, ebb__nvml_dev *) = NULL;
    sym(mp->nvml, "nvmlInit_v2", &init, sizeof(init));
    sym(mp->nvml, "nvmlDeviceGetHandleByPciBusId_v2", &by_bus, sizeof(by_bus));
    sym(mp->nvml, "nvmlDeviceGetHandleByUUID", &by_uuid, sizeof(by_uuid));
    sym(mp->nvml, "nvmlDeviceGetMemoryInfo", &mp->nv_mem, sizeof(mp->nv_mem));
    sym(mp->nvml, "nvmlShutdown", &mp->nv_shutdown, sizeof(mp->nv_shutdown));
    if (!init || !mp->nv_mem || (!by_bus && !by_uuid)) {
        why = "NVML lacks the needed functions";
        goto out;
    }
    if (init() != 0) {
        why = "nvmlInit_v2 failed";
        mp->nv_shutdown = NULL;
        goto out;
    }
    ebb__nvml_ret r = -1;
    if (p->pci_bus_id && by_bus)
        r = by_bus(p->pci_bus_id, &mp->nvdev);
    if (r != 0 && p->uuid && by_uuid)
        r = by_uuid(p->uuid, &mp->nvdev);
    if (r != 0) {
        why = "no NVML device with that bus id or UUID";
        goto out;
    }
    return;
out:
    ebb_diag_set(diag, EBB_ENOTFOUND, "NVML device memory probe unavailable: %s", why);
    if (mp->nvml) {
        if (mp->nv_shutdown)
            mp->nv_shutdown();
        dlclose(mp->nvml);
    }
    mp->nvml = NULL;
    mp->nvdev = NULL;
}

#if defined(__APPLE__)
static void mac_pressure_event(void *ctx)
{
    struct ebb_memprobe *mp = ctx;
    unsigned long f = dispatch_source_get_data(mp->ds);
    atomic_store(&mp->mac_pressure,
                 (f & (DISPATCH_MEMORYPRESSURE_WARN | DISPATCH_MEMORYPRESSURE_CRITICAL)) ? 1 : 0);
}

static void mac_noop(void *ctx)
{
    (void)ctx;
}

static void mac_watch(struct ebb_memprobe *mp)
{
    mp->dq = dispatch_queue_create("ebb.memprobe", NULL);
    if (!mp->dq)
        return;
    mp->ds = dispatch_source_create(DISPATCH_SOURCE_TYPE_MEMORYPRESSURE, 0,
                                    DISPATCH_MEMORYPRESSURE_NORMAL | DISPATCH_MEMORYPRESSURE_WARN |
                                        DISPATCH_MEMORYPRESSURE_CRITICAL,
                                    mp->dq);
    if (!mp->ds)
        return;
    dispatch_set_context(mp->ds, mp);
    dispatch_source_set_event_handler_f(mp->ds, mac_pressure_event);
    dispatch_resume(mp->ds);
}

static void mac_unwatch(struct ebb_memprobe *mp)
{
    if (mp->ds) {
        dispatch_source_cancel(mp->ds);
        dispatch_sync_f(mp->dq, NULL, mac_noop); /* a handler in flight has finished */
        dispatch_release(mp->ds);
    }
    if (mp->dq)
        dispatch_release(mp->dq);
}
#endif

/* The group's directory: the mount point (from mountinfo, else the usual place) plus the path
 * /proc/self/cgroup gives, less the mount's own root (a container sees its group mounted as
 * "/"). Returns false when it does not fit or the group's `probe_file` is not there. */
static bool group_dir(struct ebb_memprobe *mp, const char *mountinfo, const char *fstype,
                      const char *option, const char *fallback, const char *path,
                      const char *probe_file)
{
    char mnt[256], root[256], dir[512], probe[640];
    if (!mountinfo || ebb_memprobe_parse_mountinfo(mountinfo, fstype, option, mnt, sizeof(mnt),
                                                   root, sizeof(root))) {
        snprintf(mnt, sizeof(mnt), "%s", fallback);
        snprintf(root, sizeof(root), "/");
    }
    size_t rl = strlen(root);
    const char *rel = path;
    if (rl > 1 && !strncmp(path, root, rl) && (path[rl] == '/' || !path[rl]))
        rel = path + rl;
    if (!strcmp(rel, "/"))
        rel = "";
    size_t ml = strlen(mnt);
    while (ml > 1 && mnt[ml - 1] == '/')
        mnt[--ml] = 0;
    int n = snprintf(dir, sizeof(dir), "%s%s", mnt, rel);
    if (n < 0 || (size_t)n >= sizeof(dir) || (size_t)n >= sizeof(mp->cg_dir))
        return false;
    while (n > (int)ml && dir[n - 1] == '/')
        dir[--n] = 0;
    snprintf(probe, sizeof(probe), "%s/%s", dir, probe_file);
    char buf[64];
    if (read_text(mp, probe, buf, sizeof(buf)) <= 0)
        return false;
    memcpy(mp->cg_dir, dir, (size_t)n + 1);
    mp->cg_mount_len = ml;
    snprintf(mp->cg_path, sizeof(mp->cg_path), "%s", path);
    return true;
}

/* Finds the process's memory cgroup: v2 when the unified hierarchy has the memory controller
 * for this group, else v1's memory hierarchy (hybrid systems mount both; v1 then holds the
 * memory controller and the v2 group has no memory.* files). */
static void find_cgroup(struct ebb_memprobe *mp)
{
    char cg[4096], path[256];
    enum { MI_CAP = 256 * 1024 }; /* hosts with many containers have long mount tables */
    if (read_text(mp, "/proc/self/cgroup", cg, sizeof(cg)) <= 0)
        return;
    char *mi = malloc(MI_CAP); /* only when the probe set is created, never per reading */
    const char *mountinfo = mi && read_text(mp, "/proc/self/mountinfo", mi, MI_CAP) > 0 ? mi : NULL;
    if (!ebb_memprobe_parse_cgroup(cg, path, sizeof(path)) &&
        (group_dir(mp, mountinfo, "cgroup2", NULL, "/sys/fs/cgroup", path, "memory.current") ||
         group_dir(mp, mountinfo, "cgroup2", NULL, "/sys/fs/cgroup", path, "memory.max")))
        mp->cg_version = 2;
    else if (!ebb_memprobe_parse_cgroup_v1(cg, path, sizeof(path)) &&
             group_dir(mp, mountinfo, "cgroup", "memory", "/sys/fs/cgroup/memory", path,
                       "memory.usage_in_bytes"))
        mp->cg_version = 1;
    free(mi);
}

ebb_err ebb_memprobe_new(const struct ebb_memprobe_params *p, struct ebb_memprobe **out,
                         struct ebb_diag *diag)
{
    static const struct ebb_memprobe_params none = {0};
    if (!p)
        p = &none;
    struct ebb_memprobe *mp = calloc(1, sizeof(*mp));
    if (!mp)
        return EBB_ENOMEM;
    mp->discrete = p->discrete;
    if (p->root && strlen(p->root) >= sizeof(mp->root)) {
        free(mp);
        return ebb_diag_set(diag, EBB_EINVAL, "probe root path too long");
    }
    snprintf(mp->root, sizeof(mp->root), "%s", p->root ? p->root : "");
    char buf[4096];
    mp->have_meminfo = read_text(mp, "/proc/meminfo", buf, sizeof(buf)) > 0;
    find_cgroup(mp);
    mp->have_psi = read_text(mp, "/proc/pressure/memory", buf, sizeof(buf)) > 0;
    if (p->pci_bus_id || p->uuid)
        nvml_open(mp, p, diag);
    mp->dev_read = p->dev_read;
    mp->dev_u = p->dev_u;
#if defined(__APPLE__)
    mac_watch(mp);
#endif
    snprintf(mp->desc, sizeof(mp->desc), "%s%s%s%s%s%s", mp->have_meminfo ? "meminfo " : "",
             mp->cg_version == 2   ? "cgroup2 "
             : mp->cg_version == 1 ? "cgroup1 "
                                   : "",
             mp->have_psi || mp->cg_version == 2 ? "psi " : "",
             mp->nvdev      ? "nvml "
             : mp->dev_read ? "driver "
                            : "",
#if defined(__APPLE__)
             "host_statistics64 dispatch-pressure ",
#else
             "",
#endif
             getenv("EBB_TEST_MEMPROBE_FILE") ? "test-hook" : "");
    *out = mp;
    return EBB_OK;
}

void ebb_memprobe_free(struct ebb_memprobe *mp)
{
    if (!mp)
        return;
#if defined(__APPLE__)
    mac_unwatch(mp);
#endif
    if (mp->nvml) {
        if (mp->nv_shutdown)
            mp->nv_shutdown();
        dlclose(mp->nvml);
    }
    free(mp);
}

const char *ebb_memprobe_describe(const struct ebb_memprobe *mp)
{
    return mp->desc;
}

int ebb_memprobe_cgroup(const struct ebb_memprobe *mp, const char **dir, size_t *mount_len)
{
    *dir = mp->cg_dir;
    *mount_len = mp->cg_mount_len;
    return mp->cg_version;
}

const char *ebb_memprobe_root(const struct ebb_memprobe *mp)
{
    return mp->root;
}

void ebb_memprobe_set_device(struct ebb_memprobe *mp, uint64_t total, uint64_t free_bytes)
{
    mp->dev_set = true;
    mp->dev_total = total;
    mp->dev_free = free_bytes;
}

/* Reads a number file of a group ("max" and values at or above `huge` mean no limit). */
static bool read_num(const struct ebb_memprobe *mp, const char *dir, size_t dl, const char *file,
                     uint64_t huge, uint64_t *out)
{
    char path[640], buf[64];
    snprintf(path, sizeof(path), "%.*s/%s", (int)dl, dir, file);
    if (read_text(mp, path, buf, sizeof(buf)) <= 0)
        return false;
    if (!strncmp(buf, "max", 3)) {
        *out = EBB_MEMPROBE_UNLIMITED;
        return true;
    }
    uint64_t v;
    if (ebb_memprobe_parse_u64(buf, &v) == EBB_ERANGE)
        v = EBB_MEMPROBE_UNLIMITED;
    else if (ebb_memprobe_parse_u64(buf, &v))
        return false;
    *out = v >= huge ? EBB_MEMPROBE_UNLIMITED : v;
    return true;
}

/* Usage and reclaimable page cache of one group (v1 counts the subtree's cache under
 * total_inactive_file; v2's memory.stat is hierarchical already). */
static bool read_usage(const struct ebb_memprobe *mp, const char *dir, size_t dl, uint64_t *cur,
                       uint64_t *inactive)
{
    char path[640], buf[8192];
    bool v1 = mp->cg_version == 1;
    if (!read_num(mp, dir, dl, v1 ? "memory.usage_in_bytes" : "memory.current",
                  EBB_MEMPROBE_UNLIMITED, cur))
        return false;
    *inactive = 0;
    snprintf(path, sizeof(path), "%.*s/memory.stat", (int)dl, dir);
    if (read_text(mp, path, buf, sizeof(buf)) > 0 &&
        (!v1 || ebb_memprobe_parse_stat(buf, "total_inactive_file", inactive)))
        ebb_memprobe_parse_stat(buf, "inactive_file", inactive);
    return true;
}

/* The group and each ancestor up to the mount point: the one that leaves the least memory
 * decides (a parent's limit binds its children, and its usage counts their siblings). */
static void read_cgroup(struct ebb_memprobe *mp, struct ebb_memprobe_reading *r)
{
    if (!mp->cg_version)
        return;
    /* A "limit" at or above the machine's memory is no limit: v1 writes 2^63 - 4096 there. */
    uint64_t huge = r->host_ok && r->host_total ? r->host_total : (uint64_t)1 << 62;
    const char *lim_file = mp->cg_version == 1 ? "memory.limit_in_bytes" : "memory.max";
    size_t leaf = strlen(mp->cg_dir), best_len = leaf;
    uint64_t best = EBB_MEMPROBE_UNLIMITED;
    if (!read_usage(mp, mp->cg_dir, leaf, &r->cg_current, &r->cg_inactive_file))
        return;
    r->cg_ok = true;
    r->cg_version = mp->cg_version;
    r->cg_max = EBB_MEMPROBE_UNLIMITED;
    for (size_t dl = leaf;;) {
        uint64_t lim = EBB_MEMPROBE_UNLIMITED, high, cur, inact;
        read_num(mp, mp->cg_dir, dl, lim_file, huge, &lim);
        /* v2's memory.high throttles and reclaims hard above it: as binding as max for a plan
         * (systemd's MemoryHigh=). */
        if (mp->cg_version == 2 && read_num(mp, mp->cg_dir, dl, "memory.high", huge, &high) &&
            high < lim)
            lim = high;
        if (lim != EBB_MEMPROBE_UNLIMITED &&
            (dl == leaf ? (cur = r->cg_current, inact = r->cg_inactive_file, true)
                        : read_usage(mp, mp->cg_dir, dl, &cur, &inact))) {
            uint64_t used = cur > inact ? cur - inact : 0;
            uint64_t avail = lim > used ? lim - used : 0;
            if (avail < best || best == EBB_MEMPROBE_UNLIMITED) {
                best = avail;
                best_len = dl;
                r->cg_max = lim;
                r->cg_current = cur;
                r->cg_inactive_file = inact;
            }
        }
        if (dl <= mp->cg_mount_len)
            break;
        while (dl > mp->cg_mount_len && mp->cg_dir[dl - 1] != '/')
            dl--;
        if (dl > mp->cg_mount_len) /* drop the '/' too, unless that is the mount point's */
            dl--;
        if (dl < mp->cg_mount_len)
            dl = mp->cg_mount_len;
    }
    /* The binding group's name as the kernel's cgroup paths spell it. */
    size_t pl = strlen(mp->cg_path), cut = leaf - best_len;
    size_t keep = pl > cut ? pl - cut : 0;
    if (keep == 0 || (keep == 1 && mp->cg_path[0] == '/'))
        snprintf(r->cg_path, sizeof(r->cg_path), "/");
    else
        snprintf(r->cg_path, sizeof(r->cg_path), "%.*s", (int)keep, mp->cg_path);
    snprintf(r->cg_group, sizeof(r->cg_group), "%s", mp->cg_path);
    /* v2's own pressure is the more precise signal where it exists. */
    if (mp->cg_version == 2) {
        char path[640], buf[512];
        snprintf(path, sizeof(path), "%s/memory.pressure", mp->cg_dir);
        if (read_text(mp, path, buf, sizeof(buf)) > 0 &&
            !ebb_memprobe_parse_psi(buf, &r->psi_some10, &r->psi_full10, &r->psi_some_us))
            r->psi_ok = true;
    }
}

#if defined(__APPLE__)
static void read_darwin(struct ebb_memprobe_reading *r)
{
    uint64_t total = 0;
    size_t len = sizeof(total);
    vm_statistics64_data_t vs;
    mach_msg_type_number_t cnt = HOST_VM_INFO64_COUNT;
    vm_size_t page = 0;
    if (sysctlbyname("hw.memsize", &total, &len, NULL, 0) ||
        host_page_size(mach_host_self(), &page) != KERN_SUCCESS ||
        host_statistics64(mach_host_self(), HOST_VM_INFO64, (host_info64_t)&vs, &cnt) !=
            KERN_SUCCESS)
        return;
    /* Free, inactive and purgeable pages can be handed out without compressing or swapping. */
    r->host_total = total;
    r->host_available =
        ((uint64_t)vs.free_count + vs.inactive_count + vs.purgeable_count) * (uint64_t)page;
    r->host_ok = true;
}
#endif

/* Applies the test hook file: key=value lines, '#' comments. */
static void apply_hook(struct ebb_memprobe_reading *r, bool *force_avail, uint64_t *avail)
{
    const char *f = getenv("EBB_TEST_MEMPROBE_FILE");
    char buf[4096];
    if (!f || !*f || read_text(NULL, f, buf, sizeof(buf)) < 0)
        return;
    r->overridden = true;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (line[0] == '#' || !eq)
            continue;
        *eq = 0;
        char *k = line, *v = eq + 1;
        while (*k == ' ')
            k++;
        for (char *e = k + strlen(k); e > k && e[-1] == ' ';)
            *--e = 0;
        while (*v == ' ')
            v++;
        for (char *e = v + strlen(v); e > v && (e[-1] == ' ' || e[-1] == '\r');)
            *--e = 0;
        uint64_t n = 0;
        bool num = !ebb_memprobe_parse_size(v, &n);
        if (!strcmp(k, "psi_some10") || !strcmp(k, "psi_full10")) {
            double d = strtod(v, NULL);
            *(k[4] == 's' ? &r->psi_some10 : &r->psi_full10) = d;
            r->psi_ok = true;
        } else if (!num) {
            continue;
        } else if (!strcmp(k, "available")) {
            *force_avail = true;
            *avail = n;
        } else if (!strcmp(k, "host_available") || !strcmp(k, "host_total")) {
            *(k[5] == 'a' ? &r->host_available : &r->host_total) = n;
            r->host_ok = true;
        } else if (!strcmp(k, "cg_max") || !strcmp(k, "cg_current") ||
                   !strcmp(k, "cg_inactive_file")) {
            *(k[3] == 'm' ? &r->cg_max : k[3] == 'c' ? &r->cg_current : &r->cg_inactive_file) = n;
            r->cg_ok = true;
        } else if (!strcmp(k, "dev_free") || !strcmp(k, "dev_total")) {
            *(k[4] == 'f' ? &r->dev_free : &r->dev_total) = n;
            r->dev_ok = true;
            r->dev_src = "test-hook";
        } else if (!strcmp(k, "pressure")) {
            r->pressure = n != 0;
        }
    }
}

ebb_err ebb_memprobe_read(struct ebb_memprobe *mp, struct ebb_memprobe_reading *out)
{
    struct ebb_memprobe_reading r;
    memset(&r, 0, sizeof(r));
    char buf[4096];
    if (mp->have_meminfo && read_text(mp, "/proc/meminfo", buf, sizeof(buf)) > 0 &&
        !ebb_memprobe_parse_meminfo(buf, &r.host_total, &r.host_available))
        r.host_ok = true;
#if defined(__APPLE__)
    read_darwin(&r);
    if (atomic_load(&mp->mac_pressure))
        r.pressure = true;
#endif
    read_cgroup(mp, &r);
    if (!r.psi_ok && mp->have_psi && read_text(mp, "/proc/pressure/memory", buf, sizeof(buf)) > 0 &&
        !ebb_memprobe_parse_psi(buf, &r.psi_some10, &r.psi_full10, &r.psi_some_us))
        r.psi_ok = true;
    struct ebb__nvml_memory nm;
    if (mp->nvdev && mp->nv_mem(mp->nvdev, &nm) == 0) {
        r.dev_ok = true;
        r.dev_total = nm.total;
        r.dev_free = nm.free;
        r.dev_src = "nvml";
    } else if (mp->dev_read && mp->dev_read(mp->dev_u, &r.dev_total, &r.dev_free)) {
        r.dev_ok = true;
        r.dev_src = "driver";
    } else if (mp->dev_set) {
        r.dev_ok = true;
        r.dev_total = mp->dev_total;
        r.dev_free = mp->dev_free;
        r.dev_src = "caller";
    }
    bool force = false;
    uint64_t forced = 0;
    apply_hook(&r, &force, &forced);
    if (r.psi_ok && (r.psi_full10 >= 1.0 || r.psi_some10 >= 10.0))
        r.pressure = true;
    r.cg_available = EBB_MEMPROBE_UNLIMITED;
    if (r.cg_ok && r.cg_max != EBB_MEMPROBE_UNLIMITED) {
        uint64_t used = r.cg_current > r.cg_inactive_file ? r.cg_current - r.cg_inactive_file : 0;
        r.cg_available = r.cg_max > used ? r.cg_max - used : 0;
    }
    r.available_src = "none";
    if (force) {
        r.available_ok = true;
        r.available = forced;
        r.available_src = "test-hook";
    } else if (mp->discrete) {
        r.available_ok = r.dev_ok;
        r.available = r.dev_free;
        r.available_src = r.dev_ok && r.dev_src ? r.dev_src : "none";
    } else if (r.host_ok || r.cg_available != EBB_MEMPROBE_UNLIMITED) {
        r.available_ok = true;
        r.available = r.host_ok ? r.host_available : EBB_MEMPROBE_UNLIMITED;
        r.available_src = "host";
        if (r.cg_available < r.available) {
            r.available = r.cg_available;
            r.available_src = r.cg_version == 1   ? "cgroup v1"
                              : r.cg_version == 2 ? "cgroup v2"
                                                  : "cgroup";
        }
    }
    *out = r;
    return EBB_OK;
}

bool ebb_memprobe_host_available(uint64_t *out)
{
    struct ebb_memprobe_params p = {.discrete = false};
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    bool ok = false;
    if (ebb_memprobe_new(&p, &mp, NULL) == EBB_OK) {
        ok = ebb_memprobe_read(mp, &r) == EBB_OK && r.available_ok;
        if (ok)
            *out = r.available;
        ebb_memprobe_free(mp);
    }
    return ok;
}
