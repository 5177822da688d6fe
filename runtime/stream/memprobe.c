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
    char cg_dir[512]; /* "" when there is no cgroup v2 group */
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

ebb_err ebb_memprobe_parse_meminfo(const char *text, uint64_t *total, uint64_t *available)
{
    const char *t = find_line(text, "MemTotal", ":");
    const char *a = find_line(text, "MemAvailable", ":");
    if (!t || !a)
        return EBB_EFORMAT;
    unsigned long long tv = strtoull(t, NULL, 10), av = strtoull(a, NULL, 10);
    *total = (uint64_t)tv * 1024; /* meminfo counts kB */
    *available = (uint64_t)av * 1024;
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

ebb_err ebb_memprobe_parse_stat(const char *text, const char *key, uint64_t *out)
{
    const char *v = find_line(text, key, " ");
    if (!v)
        return EBB_ENOTFOUND;
    *out = strtoull(v, NULL, 10);
    return EBB_OK;
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
    char buf[4096], path[400];
    mp->have_meminfo = read_text(mp, "/proc/meminfo", buf, sizeof(buf)) > 0;
    if (read_text(mp, "/proc/self/cgroup", buf, sizeof(buf)) > 0 &&
        !ebb_memprobe_parse_cgroup(buf, path, sizeof(path))) {
        char probe[1024];
        snprintf(probe, sizeof(probe), "/sys/fs/cgroup%s/memory.current",
                 strcmp(path, "/") ? path : "");
        if (read_text(mp, probe, buf, sizeof(buf)) > 0)
            snprintf(mp->cg_dir, sizeof(mp->cg_dir), "/sys/fs/cgroup%s",
                     strcmp(path, "/") ? path : "");
    }
    mp->have_psi = read_text(mp, "/proc/pressure/memory", buf, sizeof(buf)) > 0;
    if (p->pci_bus_id || p->uuid)
        nvml_open(mp, p, diag);
    mp->dev_read = p->dev_read;
    mp->dev_u = p->dev_u;
#if defined(__APPLE__)
    mac_watch(mp);
#endif
    snprintf(mp->desc, sizeof(mp->desc), "%s%s%s%s%s%s", mp->have_meminfo ? "meminfo " : "",
             mp->cg_dir[0] ? "cgroup2 " : "", mp->have_psi || mp->cg_dir[0] ? "psi " : "",
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

void ebb_memprobe_set_device(struct ebb_memprobe *mp, uint64_t total, uint64_t free_bytes)
{
    mp->dev_set = true;
    mp->dev_total = total;
    mp->dev_free = free_bytes;
}

static void read_cgroup(struct ebb_memprobe *mp, struct ebb_memprobe_reading *r)
{
    char buf[8192], path[700];
    if (!mp->cg_dir[0])
        return;
    snprintf(path, sizeof(path), "%s/memory.current", mp->cg_dir);
    if (read_text(mp, path, buf, sizeof(buf)) <= 0)
        return;
    r->cg_current = strtoull(buf, NULL, 10);
    r->cg_max = EBB_MEMPROBE_UNLIMITED;
    snprintf(path, sizeof(path), "%s/memory.max", mp->cg_dir);
    if (read_text(mp, path, buf, sizeof(buf)) > 0 && isdigit((unsigned char)buf[0]))
        r->cg_max = strtoull(buf, NULL, 10);
    snprintf(path, sizeof(path), "%s/memory.stat", mp->cg_dir);
    if (read_text(mp, path, buf, sizeof(buf)) > 0)
        ebb_memprobe_parse_stat(buf, "inactive_file", &r->cg_inactive_file);
    r->cg_ok = true;
    /* The cgroup's own pressure is the more precise signal where it exists. */
    snprintf(path, sizeof(path), "%s/memory.pressure", mp->cg_dir);
    if (read_text(mp, path, buf, sizeof(buf)) > 0 &&
        !ebb_memprobe_parse_psi(buf, &r->psi_some10, &r->psi_full10, &r->psi_some_us))
        r->psi_ok = true;
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
    if (force) {
        r.available_ok = true;
        r.available = forced;
    } else if (mp->discrete) {
        r.available_ok = r.dev_ok;
        r.available = r.dev_free;
    } else if (r.host_ok || r.cg_available != EBB_MEMPROBE_UNLIMITED) {
        r.available_ok = true;
        r.available = r.host_ok ? r.host_available : EBB_MEMPROBE_UNLIMITED;
        if (r.cg_available < r.available)
            r.available = r.cg_available;
    }
    *out = r;
    return EBB_OK;
}
