/* `ebb info --memory`: what the layer streamer's memory probes see on this host, in this
 * process's cgroup, on the device: the numbers a plan made here would start from. */
#include "cmds.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl/cl.h"
#include "stream/mempressure.h"
#include "stream/memprobe.h"

#define MiB (1024.0 * 1024.0)

/* The device query for the probes: the driver's own free-memory value (AMD). */
static bool dev_read(void *u, uint64_t *total, uint64_t *free_bytes)
{
    const struct ebb_cl *cl = u;
    if (!ebb_cl_free_memory(cl, free_bytes))
        return false;
    *total = cl->info.global_mem;
    return true;
}

static json_t *bytes_or_null(bool ok, uint64_t v)
{
    return ok && v != EBB_MEMPROBE_UNLIMITED ? json_integer((json_int_t)v) : json_null();
}

/* Whether pressure notifications can be armed here, as a streaming model would arm them:
 * `how` says what or why not. */
struct notify {
    bool armed;
    char how[320];
};

static void print_text(const struct ebb_memprobe_reading *r, const char *probes,
                       const struct notify *nt, const struct ebb_cl *cl, const char *dev_err)
{
    printf("probes:        %s\n", probes);
    if (r->host_ok)
        printf("host:          %.0f MiB total, %.0f MiB available (/proc/meminfo)\n",
               r->host_total / MiB, r->host_available / MiB);
    else
        printf("host:          not read\n");
    if (r->cg_ok && r->cg_version) {
        printf("cgroup:        v%d %s\n", r->cg_version, r->cg_group);
        if (r->cg_max != EBB_MEMPROBE_UNLIMITED)
            printf("  limit:       %.0f MiB (%s %s)\n", r->cg_max / MiB,
                   r->cg_version == 1 ? "memory.limit_in_bytes of" : "memory.max of", r->cg_path);
        else
            printf("  limit:       none (on the group and every ancestor)\n");
        printf("  usage:       %.0f MiB%s, of which inactive file %.0f MiB (reclaimable)\n",
               r->cg_current / MiB, strcmp(r->cg_path, r->cg_group) ? " (of that group)" : "",
               r->cg_inactive_file / MiB);
        if (r->cg_available != EBB_MEMPROBE_UNLIMITED)
            printf("  available:   %.0f MiB under the limit\n", r->cg_available / MiB);
    } else {
        printf("cgroup:        no memory cgroup found\n");
    }
    if (r->psi_ok)
        printf("pressure:      some avg10 %.2f%%, full avg10 %.2f%%%s\n", r->psi_some10,
               r->psi_full10, r->pressure ? " (pressure: the plan sheds layers)" : "");
    else
        printf("pressure:      no PSI (/proc/pressure/memory)\n");
    printf("notifications: %s%s\n", nt->armed ? "armed: " : "", nt->how);
    if (cl) {
        printf("device:        %s (%s), %.0f MiB, %s\n", cl->info.name, cl->info.platform,
               cl->info.global_mem / MiB,
               cl->info.host_unified ? "shares host memory: the host and cgroup numbers decide"
                                     : "discrete: its own memory decides");
        if (r->dev_ok)
            printf("  free:        %.0f MiB of %.0f MiB (%s)\n", r->dev_free / MiB,
                   r->dev_total / MiB, r->dev_src ? r->dev_src : "?");
    } else {
        printf("device:        none (%s)\n", dev_err);
    }
    if (r->available_ok)
        printf("available:     %.0f MiB for the model (decided by %s)\n", r->available / MiB,
               r->available_src);
    else
        printf("available:     unknown (the configured --memory-budget decides)\n");
}

static int print_json(const struct ebb_memprobe_reading *r, const char *probes,
                      const struct notify *nt, const struct ebb_cl *cl)
{
    json_t *o = json_object();
    json_object_set_new(o, "probes", json_string(probes));
    json_object_set_new(o, "host_total_bytes", bytes_or_null(r->host_ok, r->host_total));
    json_object_set_new(o, "host_available_bytes", bytes_or_null(r->host_ok, r->host_available));
    if (r->cg_ok && r->cg_version) {
        json_t *c = json_object();
        json_object_set_new(c, "version", json_integer(r->cg_version));
        json_object_set_new(c, "group", json_string(r->cg_group));
        json_object_set_new(c, "path", json_string(r->cg_path));
        json_object_set_new(c, "limit_bytes", bytes_or_null(true, r->cg_max));
        json_object_set_new(c, "usage_bytes", json_integer((json_int_t)r->cg_current));
        json_object_set_new(c, "inactive_file_bytes",
                            json_integer((json_int_t)r->cg_inactive_file));
        json_object_set_new(c, "available_bytes", bytes_or_null(true, r->cg_available));
        json_object_set_new(o, "cgroup", c);
    } else {
        json_object_set_new(o, "cgroup", json_null());
    }
    if (r->psi_ok) {
        json_t *p = json_object();
        json_object_set_new(p, "some_avg10", json_real(r->psi_some10));
        json_object_set_new(p, "full_avg10", json_real(r->psi_full10));
        json_object_set_new(p, "some_total_us", json_integer((json_int_t)r->psi_some_us));
        json_object_set_new(o, "psi", p);
    } else {
        json_object_set_new(o, "psi", json_null());
    }
    json_object_set_new(o, "pressure", json_boolean(r->pressure));
    json_t *n = json_object();
    json_object_set_new(n, "armed", json_boolean(nt->armed));
    json_object_set_new(n, "how", json_string(nt->how));
    json_object_set_new(o, "pressure_notify", n);
    if (cl) {
        json_t *d = json_object();
        json_object_set_new(d, "name", json_string(cl->info.name));
        json_object_set_new(d, "global_mem_bytes", json_integer((json_int_t)cl->info.global_mem));
        json_object_set_new(d, "shares_host_memory", json_boolean(cl->info.host_unified));
        json_object_set_new(d, "free_bytes", bytes_or_null(r->dev_ok, r->dev_free));
        json_object_set_new(d, "free_source", r->dev_ok ? json_string(r->dev_src) : json_null());
        json_object_set_new(o, "device", d);
    } else {
        json_object_set_new(o, "device", json_null());
    }
    json_object_set_new(o, "available_bytes", bytes_or_null(r->available_ok, r->available));
    json_object_set_new(o, "available_source", json_string(r->available_src));
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(o);
    if (!s)
        return 1;
    printf("%s\n", s);
    free(s);
    return 0;
}

int ebb_cmd_info_memory(const char *device, bool json)
{
    struct ebb_cl *cl = NULL;
    struct ebb_diag d = {{0}};
    /* EBB_DEVICE=none (or "--device none"): the probes of the host alone, no OpenCL. */
    if (!device || strcmp(device, "none"))
        ebb_cl_open(device, &cl, &d);
    bool discrete = cl && !cl->info.host_unified;
    struct ebb_memprobe_params p = {
        .discrete = discrete,
        .pci_bus_id = discrete && cl->info.pci_bus_id[0] ? cl->info.pci_bus_id : NULL,
        .uuid = discrete && cl->info.uuid[0] ? cl->info.uuid : NULL,
        .dev_read = discrete ? dev_read : NULL,
        .dev_u = cl,
        /* Tests point the probes at a fake /proc and cgroup tree. */
        .root = getenv("EBB_TEST_MEMPROBE_ROOT"),
    };
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    int status = 1;
    if (ebb_memprobe_new(&p, &mp, NULL) || ebb_memprobe_read(mp, &r)) {
        fprintf(stderr, "ebb info: cannot read the memory probes\n");
        goto out;
    }
    char probes[256];
    snprintf(probes, sizeof(probes), "%s", ebb_memprobe_describe(mp));
    for (size_t n = strlen(probes); n && probes[n - 1] == ' ';)
        probes[--n] = 0;
    struct notify nt = {0};
    struct ebb_mempressure *w = NULL;
    struct ebb_diag wd = {{0}};
    const char *off = getenv("EBB_STREAM_PRESSURE_NOTIFY");
    if (off && !strcmp(off, "0")) {
        snprintf(nt.how, sizeof(nt.how), "off (EBB_STREAM_PRESSURE_NOTIFY=0)");
    } else if (ebb_mempressure_open(mp, &w, &wd) == EBB_OK) {
        nt.armed = true;
        snprintf(nt.how, sizeof(nt.how), "%s", ebb_mempressure_describe(w));
    } else {
        snprintf(nt.how, sizeof(nt.how), "not armed: %.300s", wd.msg);
    }
    ebb_mempressure_close(w);
    if (json) {
        status = print_json(&r, probes, &nt, cl);
    } else {
        print_text(&r, probes, &nt, cl, d.msg[0] ? d.msg : "no OpenCL device");
        status = 0;
    }
out:
    ebb_memprobe_free(mp);
    ebb_cl_close(cl);
    return status;
}
