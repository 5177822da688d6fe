/* OpenCL device selection, device properties, the shared contexts, ebb_cl_open and ebb_cl_close
 * (error names, launches and profiles: cl-run.c). */
#include "cl.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cl-int.h"
#include "cl-knobs.h"

static void get_str(cl_device_id d, cl_device_info p, char *buf, size_t cap)
{
    buf[0] = 0;
    if (clGetDeviceInfo(d, p, cap, buf, NULL) != CL_SUCCESS)
        buf[0] = 0;
    buf[cap - 1] = 0;
    /* Drivers pad some strings with spaces. */
    size_t n = strlen(buf);
    while (n && buf[n - 1] == ' ')
        buf[--n] = 0;
}

static uint64_t get_u64(cl_device_id d, cl_device_info p)
{
    cl_ulong v = 0;
    clGetDeviceInfo(d, p, sizeof(v), &v, NULL);
    return v;
}

static uint32_t get_u32(cl_device_id d, cl_device_info p)
{
    cl_uint v = 0;
    clGetDeviceInfo(d, p, sizeof(v), &v, NULL);
    return v;
}

static size_t get_size(cl_device_id d, cl_device_info p)
{
    size_t v = 0;
    clGetDeviceInfo(d, p, sizeof(v), &v, NULL);
    return v;
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    if (!n)
        return true;
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

/* Extension queries by value, so that older headers need not define them. */
#define EBB__CL_DEVICE_UUID_KHR 0x106A
#define EBB__CL_DEVICE_PCI_BUS_INFO_KHR 0x410F
#define EBB__CL_DEVICE_PCI_BUS_ID_NV 0x4008
#define EBB__CL_DEVICE_PCI_SLOT_ID_NV 0x4009
#define EBB__CL_DEVICE_PCI_DOMAIN_ID_NV 0x400A
#define EBB__CL_DEVICE_TOPOLOGY_AMD 0x4037
#define EBB__CL_DEVICE_GLOBAL_FREE_MEMORY_AMD 0x4039
/* cl_khr_integer_dot_product: the capabilities bitfield and its packed 4 x 8-bit input bit. */
#define EBB__CL_DEVICE_INTEGER_DOT_PRODUCT_CAPABILITIES_KHR 0x1073
#define EBB__CL_DEVICE_INTEGER_DOT_PRODUCT_INPUT_4x8BIT_PACKED_KHR (1u << 0)

/* The PCI address and UUID of a device (see ebb_cl_dev_info), from whichever extension the
 * driver lists. */
static void fill_identity(cl_device_id d, const char *ext, struct ebb_cl_dev_info *inf)
{
    cl_uint bus[4] = {0}; /* domain, bus, device, function */
    bool have_bus = false;
    if (strstr(ext, "cl_khr_pci_bus_info"))
        have_bus = clGetDeviceInfo(d, EBB__CL_DEVICE_PCI_BUS_INFO_KHR, sizeof(bus), bus, NULL) ==
                   CL_SUCCESS;
    if (!have_bus && strstr(ext, "cl_nv_device_attribute_query")) {
        cl_uint b = 0, slot = 0, dom = 0;
        if (clGetDeviceInfo(d, EBB__CL_DEVICE_PCI_BUS_ID_NV, sizeof(b), &b, NULL) == CL_SUCCESS &&
            clGetDeviceInfo(d, EBB__CL_DEVICE_PCI_SLOT_ID_NV, sizeof(slot), &slot, NULL) ==
                CL_SUCCESS) {
            if (clGetDeviceInfo(d, EBB__CL_DEVICE_PCI_DOMAIN_ID_NV, sizeof(dom), &dom, NULL))
                dom = 0; /* older drivers: domain 0 */
            /* the slot id packs the PCI device number above the 3-bit function number */
            bus[0] = dom, bus[1] = b, bus[2] = slot >> 3, bus[3] = slot & 7;
            have_bus = true;
        }
    }
    if (!have_bus && strstr(ext, "cl_amd_device_attribute_query")) {
        unsigned char topo[24] = {0}; /* type (cl_uint), 17 unused bytes, bus, device, function */
        cl_uint type = 0;
        if (clGetDeviceInfo(d, EBB__CL_DEVICE_TOPOLOGY_AMD, sizeof(topo), topo, NULL) ==
            CL_SUCCESS) {
            memcpy(&type, topo, sizeof(type));
            if (type == 1) { /* CL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD */
                bus[1] = topo[21], bus[2] = topo[22], bus[3] = topo[23];
                have_bus = true;
            }
        }
    }
    if (have_bus && bus[1] < 256 && bus[2] < 32 && bus[3] < 8 && bus[0] < 65536)
        snprintf(inf->pci_bus_id, sizeof(inf->pci_bus_id), "%04x:%02x:%02x.%x", bus[0], bus[1],
                 bus[2], bus[3]);
    unsigned char u[16];
    if (inf->vendor == EBB_CL_VENDOR_NVIDIA && strstr(ext, "cl_khr_device_uuid") &&
        clGetDeviceInfo(d, EBB__CL_DEVICE_UUID_KHR, sizeof(u), u, NULL) == CL_SUCCESS) {
        char *o = inf->uuid;
        o += sprintf(o, "GPU-");
        for (int i = 0; i < 16; i++)
            o += sprintf(o, "%02x%s", u[i], i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
    }
    inf->amd_free_mem = strstr(ext, "cl_amd_device_attribute_query") != NULL;
}

bool ebb_cl_free_memory(const struct ebb_cl *cl, uint64_t *free_bytes)
{
    size_t kib[2] = {0, 0}; /* total free, largest free block; KiB */
    if (!cl->info.amd_free_mem ||
        clGetDeviceInfo(cl->dev, EBB__CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, sizeof(kib), kib, NULL) !=
            CL_SUCCESS ||
        !kib[0])
        return false;
    *free_bytes = (uint64_t)kib[0] * 1024u;
    return true;
}

static void fill_info(cl_platform_id p, cl_device_id d, uint32_t pi, uint32_t di,
                      struct ebb_cl_dev_info *inf)
{
    memset(inf, 0, sizeof(*inf));
    inf->plat_idx = pi;
    inf->dev_idx = di;
    get_str(d, CL_DEVICE_NAME, inf->name, sizeof(inf->name));
    get_str(d, CL_DEVICE_VENDOR, inf->vendor_str, sizeof(inf->vendor_str));
    get_str(d, CL_DRIVER_VERSION, inf->driver, sizeof(inf->driver));
    get_str(d, CL_DEVICE_VERSION, inf->version, sizeof(inf->version));
    if (clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof(inf->platform), inf->platform, NULL))
        inf->platform[0] = 0;
    inf->platform[sizeof(inf->platform) - 1] = 0;
    cl_device_type t = 0;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof(t), &t, NULL);
    inf->is_gpu = (t & CL_DEVICE_TYPE_GPU) != 0;
    inf->is_cpu = (t & CL_DEVICE_TYPE_CPU) != 0;
    if (contains_ci(inf->platform, "portable computing") || contains_ci(inf->platform, "pocl"))
        inf->vendor = EBB_CL_VENDOR_POCL;
    else if (contains_ci(inf->vendor_str, "nvidia"))
        inf->vendor = EBB_CL_VENDOR_NVIDIA;
    else if (contains_ci(inf->vendor_str, "advanced micro") || contains_ci(inf->vendor_str, "amd"))
        inf->vendor = EBB_CL_VENDOR_AMD;
    else if (contains_ci(inf->vendor_str, "intel"))
        inf->vendor = EBB_CL_VENDOR_INTEL;
    else if (contains_ci(inf->vendor_str, "apple"))
        inf->vendor = EBB_CL_VENDOR_APPLE;
    else if (contains_ci(inf->vendor_str, "arm"))
        inf->vendor = EBB_CL_VENDOR_ARM;
    inf->global_mem = get_u64(d, CL_DEVICE_GLOBAL_MEM_SIZE);
    inf->max_alloc = get_u64(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    inf->local_mem = get_u64(d, CL_DEVICE_LOCAL_MEM_SIZE);
    cl_device_local_mem_type lt = CL_LOCAL;
    clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_TYPE, sizeof(lt), &lt, NULL);
    inf->local_is_global = lt == CL_GLOBAL;
    inf->max_wg = get_size(d, CL_DEVICE_MAX_WORK_GROUP_SIZE);
    inf->compute_units = get_u32(d, CL_DEVICE_MAX_COMPUTE_UNITS);
    inf->image = get_u32(d, CL_DEVICE_IMAGE_SUPPORT) != 0;
    if (inf->image) {
        inf->image2d_w = get_size(d, CL_DEVICE_IMAGE2D_MAX_WIDTH);
        inf->image2d_h = get_size(d, CL_DEVICE_IMAGE2D_MAX_HEIGHT);
        inf->image1d_buf_max = get_size(d, CL_DEVICE_IMAGE_MAX_BUFFER_SIZE);
    }
    inf->host_unified = get_u32(d, CL_DEVICE_HOST_UNIFIED_MEMORY) != 0;
    inf->mem_align = get_u32(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8;
    size_t n = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &n) == CL_SUCCESS && n) {
        char *ext = malloc(n + 1);
        if (ext && clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, n, ext, NULL) == CL_SUCCESS) {
            ext[n] = 0;
            inf->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
            cl_ulong idp = 0; /* cl_device_integer_dot_product_capabilities_khr */
            inf->idp = strstr(ext, "cl_khr_integer_dot_product") &&
                       clGetDeviceInfo(d, EBB__CL_DEVICE_INTEGER_DOT_PRODUCT_CAPABILITIES_KHR,
                                       sizeof(idp), &idp, NULL) == CL_SUCCESS &&
                       (idp & EBB__CL_DEVICE_INTEGER_DOT_PRODUCT_INPUT_4x8BIT_PACKED_KHR);
            fill_identity(d, ext, inf);
        }
        free(ext);
    }
}

/* Enumerates all (platform, device) pairs; calls fn for each until it returns true. */
static ebb_err each_device(bool (*fn)(void *u, cl_platform_id p, cl_device_id d, uint32_t pi,
                                      uint32_t di),
                           void *u, struct ebb_diag *diag)
{
    cl_uint np = 0;
    cl_int e = clGetPlatformIDs(0, NULL, &np);
    if (e == -1001 || np == 0)
        return ebb_diag_set(diag, EBB_ENOTFOUND, "no OpenCL platform found");
    if (e)
        return ebb_cl_check(e, diag, "clGetPlatformIDs");
    cl_platform_id plats[16];
    if (np > 16)
        np = 16;
    if ((e = clGetPlatformIDs(np, plats, NULL)))
        return ebb_cl_check(e, diag, "clGetPlatformIDs");
    for (cl_uint pi = 0; pi < np; pi++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[pi], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) || !nd)
            continue;
        cl_device_id devs[32];
        if (nd > 32)
            nd = 32;
        if (clGetDeviceIDs(plats[pi], CL_DEVICE_TYPE_ALL, nd, devs, NULL))
            continue;
        for (cl_uint di = 0; di < nd; di++)
            if (fn(u, plats[pi], devs[di], pi, di))
                return EBB_OK;
    }
    return EBB_OK;
}

struct pick {
    const char *spec;
    int mode; /* 0 = auto GPU pass, 1 = auto any, 2 = indices, 3 = substring */
    uint32_t want_p, want_d;
    bool found;
    cl_platform_id p;
    cl_device_id d;
    struct ebb_cl_dev_info info;
};

static bool pick_fn(void *u, cl_platform_id p, cl_device_id d, uint32_t pi, uint32_t di)
{
    struct pick *k = u;
    struct ebb_cl_dev_info inf;
    fill_info(p, d, pi, di, &inf);
    bool ok = false;
    switch (k->mode) {
    case 0:
        ok = inf.is_gpu;
        break;
    case 1:
        ok = true;
        break;
    case 2:
        ok = pi == k->want_p && di == k->want_d;
        break;
    default:
        ok = contains_ci(inf.name, k->spec) || contains_ci(inf.platform, k->spec);
        break;
    }
    if (ok) {
        k->found = true;
        k->p = p;
        k->d = d;
        k->info = inf;
    }
    return ok;
}

/* One OpenCL context per device for the whole process: every model opened on a device shares
 * it, with a queue of its own, so that a second model's open neither creates a context nor
 * builds programs already built for the first (cl-program.c keeps them). The table holds one
 * reference to each context for the process's life. */
#define SHARED_MAX 16
static struct {
    cl_device_id dev;
    cl_context ctx;
} shared[SHARED_MAX];
static size_t n_shared;
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;

static cl_context shared_context(cl_platform_id p, cl_device_id d, cl_int *e)
{
    pthread_mutex_lock(&shared_mu);
    for (size_t i = 0; i < n_shared; i++) {
        if (shared[i].dev == d) {
            cl_context c = shared[i].ctx;
            *e = clRetainContext(c);
            pthread_mutex_unlock(&shared_mu);
            return *e ? NULL : c;
        }
    }
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)p, 0};
    cl_context c = clCreateContext(props, 1, &d, NULL, NULL, e);
    if (c && !*e && n_shared < SHARED_MAX && clRetainContext(c) == CL_SUCCESS) {
        shared[n_shared].dev = d;
        shared[n_shared].ctx = c;
        n_shared++;
    }
    pthread_mutex_unlock(&shared_mu);
    return c;
}

bool ebb__cl_ctx_shared(cl_context ctx)
{
    bool found = false;
    pthread_mutex_lock(&shared_mu);
    for (size_t i = 0; i < n_shared && !found; i++)
        found = shared[i].ctx == ctx;
    pthread_mutex_unlock(&shared_mu);
    return found;
}

bool ebb_cl_has_gpu(void)
{
    struct pick k = {.mode = 0};
    return !each_device(pick_fn, &k, NULL) && k.found;
}

bool ebb_cl_spec_is_list(const char *spec)
{
    return spec && (!strcmp(spec, "all") || strchr(spec, ','));
}

/* "all": the first platform with a GPU (its GPUs), else the first with any device (all). */
struct every {
    int pass; /* 0: GPUs, 1: any device */
    bool have;
    uint32_t plat;
    char (*ids)[EBB_CL_ID_MAX];
    size_t cap, n;
    bool over;
};

static bool every_fn(void *u, cl_platform_id p, cl_device_id d, uint32_t pi, uint32_t di)
{
    struct every *e = u;
    struct ebb_cl_dev_info inf;
    fill_info(p, d, pi, di, &inf);
    if ((e->pass == 0 && !inf.is_gpu) || (e->have && pi != e->plat))
        return false;
    e->have = true;
    e->plat = pi;
    if (e->n == e->cap) {
        e->over = true;
        return true;
    }
    snprintf(e->ids[e->n++], EBB_CL_ID_MAX, "cl:%u:%u", pi, di);
    return false;
}

/* The "cl:P:D" of the device ebb_cl_open(spec) would open. */
static ebb_err device_id_of(const char *spec, char *id, struct ebb_diag *diag)
{
    struct ebb_cl *cl = NULL;
    ebb_err rc = ebb_cl_open(spec, &cl, diag);
    if (rc)
        return rc;
    snprintf(id, EBB_CL_ID_MAX, "cl:%u:%u", cl->info.plat_idx, cl->info.dev_idx);
    ebb_cl_close(cl);
    return EBB_OK;
}

ebb_err ebb_cl_devices(const char *spec, char (*ids)[EBB_CL_ID_MAX], size_t cap, size_t *n,
                       struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    size_t k = 0;
    if (spec && !strcmp(spec, "all")) {
        struct every e = {.ids = ids, .cap = cap};
        for (e.pass = 0; e.pass < 2 && !e.n && !e.over; e.pass++)
            if ((rc = each_device(every_fn, &e, diag)))
                return rc;
        if (e.over)
            return ebb_diag_set(diag, EBB_ERANGE, "--device all: more than %zu devices", cap);
        if (!e.n)
            return ebb_diag_set(diag, EBB_ENOTFOUND, "--device all: no OpenCL device found");
        *n = e.n;
        return EBB_OK;
    }
    const char *p = spec ? spec : "";
    for (;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        char one[128];
        if (!len || len >= sizeof(one))
            return ebb_diag_set(diag, EBB_EINVAL, "--device '%s': %s element in the list", spec,
                                len ? "a too long" : "an empty");
        if (k == cap)
            return ebb_diag_set(diag, EBB_ERANGE, "--device '%s': more than %zu devices", spec,
                                cap);
        memcpy(one, p, len);
        one[len] = 0;
        struct ebb_diag d = {{0}};
        if ((rc = device_id_of(one, ids[k], &d)))
            return ebb_diag_set(diag, rc, "--device '%s': %s", spec, d.msg);
        for (size_t i = 0; i < k; i++)
            if (!strcmp(ids[i], ids[k]))
                return ebb_diag_set(diag, EBB_EINVAL, "--device '%s': '%s' names %s a second time",
                                    spec, one, ids[k]);
        k++;
        if (!c)
            break;
        p = c + 1;
    }
    *n = k;
    return EBB_OK;
}

ebb_err ebb_cl_open(const char *spec, struct ebb_cl **out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    struct pick k = {.spec = spec};
    unsigned a, b;
    char tail;
    if (ebb_cl_spec_is_list(spec))
        return ebb_diag_set(diag, EBB_EINVAL,
                            "device '%s' names several devices, which only 'ebb serve' (an "
                            "engine per device) and --split layer (one model across them) use; "
                            "name one (see 'ebb info --devices')",
                            spec);
    if (!spec || !*spec || !strcmp(spec, "auto") || !strcmp(spec, "cl")) {
        k.mode = 0;
        if ((rc = each_device(pick_fn, &k, diag)))
            return rc;
        if (!k.found) {
            k.mode = 1;
            if ((rc = each_device(pick_fn, &k, diag)))
                return rc;
        }
    } else if (sscanf(spec, "cl:%u:%u%c", &a, &b, &tail) == 2) {
        k.mode = 2;
        k.want_p = a;
        k.want_d = b;
        if ((rc = each_device(pick_fn, &k, diag)))
            return rc;
    } else {
        k.mode = 3;
        if ((rc = each_device(pick_fn, &k, diag)))
            return rc;
    }
    if (!k.found)
        return ebb_diag_set(diag, EBB_ENOTFOUND,
                            "no OpenCL device matches '%s' (see 'ebb info --devices')",
                            spec ? spec : "auto");
    /* the EBB_CL_* knobs, checked against the table for this device before anything uses them */
    if ((rc = ebb_cl_knobs_check(&k.info, diag)))
        return rc;

    struct ebb_cl *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return EBB_ENOMEM;
    cl->plat = k.p;
    cl->dev = k.d;
    cl->info = k.info;
    cl_int e = CL_SUCCESS;
    cl->ctx = shared_context(k.p, k.d, &e);
    if ((rc = ebb_cl_check(e, diag, "clCreateContext")))
        goto out;
    struct ebb_cl_env env;
    ebb_cl_env_get(&env);
    cl_command_queue_properties qp =
        env.profile == 2 || ebb__cl_rec_queues ? CL_QUEUE_PROFILING_ENABLE : 0;
    cl->q = clCreateCommandQueue(cl->ctx, k.d, qp, &e);
    if ((rc = ebb_cl_check(e, diag, "clCreateCommandQueue")))
        goto out;
    *out = cl;
    cl = NULL;
out:
    ebb_cl_close(cl);
    return rc;
}

void ebb_cl_close(struct ebb_cl *cl)
{
    if (!cl)
        return;
    ebb__cl_prof_close(cl);
    if (cl->q)
        clReleaseCommandQueue(cl->q);
    if (cl->ctx)
        clReleaseContext(cl->ctx);
    free(cl);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

struct printer {
    FILE *f;
    bool json;
    unsigned n;
};

static bool print_fn(void *u, cl_platform_id p, cl_device_id d, uint32_t pi, uint32_t di)
{
    struct printer *pr = u;
    struct ebb_cl_dev_info i;
    fill_info(p, d, pi, di, &i);
    FILE *f = pr->f;
    const double mib = 1024.0 * 1024.0;
    if (pr->json) {
        fprintf(f, "%s\n  {\"id\": \"cl:%u:%u\", \"platform\": ", pr->n ? "," : "", pi, di);
        json_str(f, i.platform);
        fprintf(f, ", \"name\": ");
        json_str(f, i.name);
        fprintf(f, ", \"vendor\": ");
        json_str(f, i.vendor_str);
        fprintf(f, ", \"driver\": ");
        json_str(f, i.driver);
        fprintf(f, ", \"version\": ");
        json_str(f, i.version);
        fprintf(f,
                ", \"type\": \"%s\", \"global_mem\": %llu, \"max_alloc\": %llu, "
                "\"local_mem\": %llu, \"max_work_group\": %zu, \"compute_units\": %u, "
                "\"image\": %s, \"image2d_max\": [%zu, %zu], \"image1d_buffer_max\": %zu, "
                "\"host_unified\": %s, \"fp16\": %s, \"int_dot_4x8_packed\": %s, "
                "\"pci_bus_id\": \"%s\", \"uuid\": \"%s\"}",
                i.is_gpu   ? "gpu"
                : i.is_cpu ? "cpu"
                           : "other",
                (unsigned long long)i.global_mem, (unsigned long long)i.max_alloc,
                (unsigned long long)i.local_mem, i.max_wg, i.compute_units,
                i.image ? "true" : "false", i.image2d_w, i.image2d_h, i.image1d_buf_max,
                i.host_unified ? "true" : "false", i.fp16 ? "true" : "false",
                i.idp ? "true" : "false", i.pci_bus_id, i.uuid);
    } else {
        fprintf(f, "cl:%u:%u  %s  [%s]  (%s)\n", pi, di, i.name, i.platform,
                i.is_gpu   ? "GPU"
                : i.is_cpu ? "CPU"
                           : "other");
        fprintf(f, "        vendor %s, driver %s, %s\n", i.vendor_str, i.driver, i.version);
        fprintf(f,
                "        global %.0f MiB, max buffer %.0f MiB, local %.0f KiB%s, "
                "work-group %zu, %u compute units\n",
                i.global_mem / mib, i.max_alloc / mib, i.local_mem / 1024.0,
                i.local_is_global ? " (emulated)" : "", i.max_wg, i.compute_units);
        if (i.image)
            fprintf(f, "        images yes: 2d max %zux%zu, 1d buffer max %zu texels\n",
                    i.image2d_w, i.image2d_h, i.image1d_buf_max);
        else
            fprintf(f, "        images no\n");
        fprintf(f, "        host-unified memory %s, fp16 %s, 4x8-bit packed integer dot %s\n",
                i.host_unified ? "yes" : "no", i.fp16 ? "yes" : "no", i.idp ? "yes" : "no");
        if (i.pci_bus_id[0] || i.uuid[0])
            fprintf(f, "        pci %s%s%s\n", i.pci_bus_id[0] ? i.pci_bus_id : "?",
                    i.uuid[0] ? ", uuid " : "", i.uuid);
    }
    pr->n++;
    return false;
}

ebb_err ebb_cl_print_devices(FILE *out, bool json)
{
    struct printer pr = {.f = out, .json = json};
    if (json)
        fputc('[', out);
    ebb_err rc = each_device(print_fn, &pr, NULL);
    if (json)
        fprintf(out, "%s]\n", pr.n ? "\n" : "");
    else if (!pr.n)
        fprintf(out, "no OpenCL devices\n");
    if (!rc && !pr.n)
        rc = EBB_ENOTFOUND;
    return rc;
}
