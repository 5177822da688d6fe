/* OpenCL device selection, device properties and error names. */
#include "cl.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cl-int.h"
#include "cl-knobs.h"

static bool rec_queues; /* ebb_cl_profile_queues: queues opened from now on keep timestamps */

#define EBB__CL_ERRS(X)                                                                            \
    X(CL_SUCCESS)                                                                                  \
    X(CL_DEVICE_NOT_FOUND)                                                                         \
    X(CL_DEVICE_NOT_AVAILABLE)                                                                     \
    X(CL_COMPILER_NOT_AVAILABLE)                                                                   \
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE)                                                            \
    X(CL_OUT_OF_RESOURCES)                                                                         \
    X(CL_OUT_OF_HOST_MEMORY)                                                                       \
    X(CL_PROFILING_INFO_NOT_AVAILABLE)                                                             \
    X(CL_MEM_COPY_OVERLAP)                                                                         \
    X(CL_IMAGE_FORMAT_MISMATCH)                                                                    \
    X(CL_IMAGE_FORMAT_NOT_SUPPORTED)                                                               \
    X(CL_BUILD_PROGRAM_FAILURE)                                                                    \
    X(CL_MAP_FAILURE)                                                                              \
    X(CL_MISALIGNED_SUB_BUFFER_OFFSET)                                                             \
    X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)                                                \
    X(CL_COMPILE_PROGRAM_FAILURE)                                                                  \
    X(CL_LINKER_NOT_AVAILABLE)                                                                     \
    X(CL_LINK_PROGRAM_FAILURE)                                                                     \
    X(CL_DEVICE_PARTITION_FAILED)                                                                  \
    X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)                                                            \
    X(CL_INVALID_VALUE)                                                                            \
    X(CL_INVALID_DEVICE_TYPE)                                                                      \
    X(CL_INVALID_PLATFORM)                                                                         \
    X(CL_INVALID_DEVICE)                                                                           \
    X(CL_INVALID_CONTEXT)                                                                          \
    X(CL_INVALID_QUEUE_PROPERTIES)                                                                 \
    X(CL_INVALID_COMMAND_QUEUE)                                                                    \
    X(CL_INVALID_HOST_PTR)                                                                         \
    X(CL_INVALID_MEM_OBJECT)                                                                       \
    X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)                                                          \
    X(CL_INVALID_IMAGE_SIZE)                                                                       \
    X(CL_INVALID_SAMPLER)                                                                          \
    X(CL_INVALID_BINARY)                                                                           \
    X(CL_INVALID_BUILD_OPTIONS)                                                                    \
    X(CL_INVALID_PROGRAM)                                                                          \
    X(CL_INVALID_PROGRAM_EXECUTABLE)                                                               \
    X(CL_INVALID_KERNEL_NAME)                                                                      \
    X(CL_INVALID_KERNEL_DEFINITION)                                                                \
    X(CL_INVALID_KERNEL)                                                                           \
    X(CL_INVALID_ARG_INDEX)                                                                        \
    X(CL_INVALID_ARG_VALUE)                                                                        \
    X(CL_INVALID_ARG_SIZE)                                                                         \
    X(CL_INVALID_KERNEL_ARGS)                                                                      \
    X(CL_INVALID_WORK_DIMENSION)                                                                   \
    X(CL_INVALID_WORK_GROUP_SIZE)                                                                  \
    X(CL_INVALID_WORK_ITEM_SIZE)                                                                   \
    X(CL_INVALID_GLOBAL_OFFSET)                                                                    \
    X(CL_INVALID_EVENT_WAIT_LIST)                                                                  \
    X(CL_INVALID_EVENT)                                                                            \
    X(CL_INVALID_OPERATION)                                                                        \
    X(CL_INVALID_GL_OBJECT)                                                                        \
    X(CL_INVALID_BUFFER_SIZE)                                                                      \
    X(CL_INVALID_MIP_LEVEL)                                                                        \
    X(CL_INVALID_GLOBAL_WORK_SIZE)                                                                 \
    X(CL_INVALID_PROPERTY)                                                                         \
    X(CL_INVALID_IMAGE_DESCRIPTOR)                                                                 \
    X(CL_INVALID_COMPILER_OPTIONS)                                                                 \
    X(CL_INVALID_LINKER_OPTIONS)                                                                   \
    X(CL_INVALID_DEVICE_PARTITION_COUNT)

const char *ebb_cl_err_name(cl_int e)
{
    switch (e) {
#define EBB__CL_ERR_CASE(n)                                                                        \
    case n:                                                                                        \
        return #n;
        EBB__CL_ERRS(EBB__CL_ERR_CASE)
#undef EBB__CL_ERR_CASE
    case -1001:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
        return "CL_UNKNOWN_ERROR";
    }
}

ebb_err ebb_cl_check(cl_int e, struct ebb_diag *diag, const char *what)
{
    if (e == CL_SUCCESS)
        return EBB_OK;
    ebb_err rc = EBB_EDEVICE;
    if (e == CL_OUT_OF_HOST_MEMORY || e == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
        e == CL_OUT_OF_RESOURCES || e == CL_INVALID_BUFFER_SIZE)
        rc = EBB_ENOMEM;
    return ebb_diag_set(diag, rc, "%s: %s (%d)", what, ebb_cl_err_name(e), (int)e);
}

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

ebb_err ebb_cl_open(const char *spec, struct ebb_cl **out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    struct pick k = {.spec = spec};
    unsigned a, b;
    char tail;
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
    cl_command_queue_properties qp = env.profile == 2 || rec_queues ? CL_QUEUE_PROFILING_ENABLE : 0;
    cl->q = clCreateCommandQueue(cl->ctx, k.d, qp, &e);
    if ((rc = ebb_cl_check(e, diag, "clCreateCommandQueue")))
        goto out;
    *out = cl;
    cl = NULL;
out:
    ebb_cl_close(cl);
    return rc;
}

static int prof_state; /* the profile's state and drain (below, with ebb_cl_run) */
static void prof_drain(void);

void ebb_cl_close(struct ebb_cl *cl)
{
    if (!cl)
        return;
    if (prof_state == 3 && cl->q) {
        clFinish(cl->q);
        prof_drain();
    }
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

ebb_err ebb_cl_set_args(cl_kernel k, cl_uint first, const struct ebb_cl_arg *a, size_t n,
                        struct ebb_diag *diag)
{
    for (size_t i = 0; i < n; i++) {
        cl_int e = clSetKernelArg(k, first + (cl_uint)i, a[i].size, a[i].p);
        if (e) {
            char name[64] = "?";
            clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(name), name, NULL);
            name[sizeof(name) - 1] = 0;
            return ebb_diag_set(diag, EBB_EDEVICE, "clSetKernelArg(%s, %u): %s", name,
                                first + (unsigned)i, ebb_cl_err_name(e));
        }
    }
    return EBB_OK;
}

/* EBB_CL_PROFILE=1: every launch waits for its kernel and its wall time is added to a table
 * by kernel name, printed on stderr at exit. A development aid; it serialises the queue.
 * EBB_CL_PROFILE=gpu: nothing waits; the queue records each launch's start and end on the
 * device (CL_QUEUE_PROFILING_ENABLE), read at the next wait (ebb_cl_finish, ebb_cl_read, or
 * every PROF_EV launches), and the table gets each kernel's device time and, apart, the idle
 * time between consecutive launches (launch gaps and host waits). */
#define PROF_MAX 1024
#define PROF_EV 4096
static struct {
    char name[48];
    double s;
    unsigned long n;
} prof[PROF_MAX];
/* prof_state: 0 unknown, 1 off, 2 on (wall), 3 on (device timestamps) */
static struct {
    cl_event ev;
    int slot;
} prof_ev[PROF_EV];
static int prof_nev;
static cl_ulong prof_last_end;
static double prof_gap_s;
static unsigned long prof_gap_n;

static void prof_print(void)
{
    double total = 0;
    for (int i = 0; i < PROF_MAX && prof[i].n; i++)
        total += prof[i].s;
    for (int i = 0; i < PROF_MAX && prof[i].n; i++)
        fprintf(stderr, "ebb: profile %-32s %8lu launches %9.4f s %5.1f%%\n", prof[i].name,
                prof[i].n, prof[i].s, total > 0 ? 100.0 * prof[i].s / total : 0.0);
    if (prof_state == 3)
        fprintf(stderr, "ebb: profile %-32s %8lu launches %9.4f s (device idle between launches)\n",
                "(gaps)", prof_gap_n, prof_gap_s);
}

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The table slot of kernel k's name, or with device timestamps of its name and global size
 * (the products of a layer apart); -1 when full. */
static int prof_slot(cl_kernel k, const size_t *g, cl_uint dims)
{
    char name[48] = "?";
    clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(name), name, NULL);
    name[sizeof(name) - 1] = 0;
    if (prof_state == 3 && g) {
        size_t n = strlen(name);
        for (cl_uint d = 0; d < dims && n < sizeof(name) - 12; d++)
            n += (size_t)snprintf(name + n, sizeof(name) - n, "%c%zu", d ? 'x' : '/', g[d]);
    }
    for (int i = 0; i < PROF_MAX; i++) {
        if (!prof[i].n || !strcmp(prof[i].name, name)) {
            if (!prof[i].n)
                memcpy(prof[i].name, name, sizeof(name));
            return i;
        }
    }
    return -1;
}

static void prof_add(cl_kernel k, double s)
{
    int i = prof_slot(k, NULL, 0);
    if (i >= 0) {
        prof[i].s += s;
        prof[i].n++;
    }
}

/* Device timestamps of the recorded launches into the table (they have all completed or are
 * waited for here). */
static void prof_drain(void)
{
    if (prof_nev)
        clWaitForEvents(1, &prof_ev[prof_nev - 1].ev);
    for (int i = 0; i < prof_nev; i++) {
        cl_ulong t0 = 0, t1 = 0;
        clGetEventProfilingInfo(prof_ev[i].ev, CL_PROFILING_COMMAND_START, sizeof(t0), &t0, NULL);
        clGetEventProfilingInfo(prof_ev[i].ev, CL_PROFILING_COMMAND_END, sizeof(t1), &t1, NULL);
        clReleaseEvent(prof_ev[i].ev);
        if (prof_ev[i].slot >= 0 && t1 >= t0) {
            prof[prof_ev[i].slot].s += (double)(t1 - t0) * 1e-9;
            prof[prof_ev[i].slot].n++;
        }
        if (prof_last_end && t0 > prof_last_end) {
            prof_gap_s += (double)(t0 - prof_last_end) * 1e-9;
            prof_gap_n++;
        }
        if (t1 > prof_last_end)
            prof_last_end = t1;
    }
    prof_nev = 0;
}

/* A caller's profile (ebb_cl_profile_begin .. ebb_cl_profile_take): each launch keeps its
 * event and its table slot by plain kernel name; the device's start and end timestamps are
 * read back when the events are drained (at take, or when PROF_EV are pending, which waits for
 * the queue then). Independent of EBB_CL_PROFILE's table. */
static struct {
    bool on;
    int nev;
    unsigned long missing; /* launches whose queue gave no timestamps */
    struct {
        cl_event ev;
        int slot;
    } ev[PROF_EV];
    struct ebb_cl_profile tab[PROF_MAX];
    size_t n;
} rec;

static int rec_slot(cl_kernel k)
{
    char name[sizeof(rec.tab[0].name)] = "?";
    clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(name), name, NULL);
    name[sizeof(name) - 1] = 0;
    for (size_t i = 0; i < rec.n; i++)
        if (!strcmp(rec.tab[i].name, name))
            return (int)i;
    if (rec.n == PROF_MAX)
        return -1;
    memset(&rec.tab[rec.n], 0, sizeof(rec.tab[0]));
    memcpy(rec.tab[rec.n].name, name, sizeof(name));
    return (int)rec.n++;
}

/* Waits for the pending launches and adds their device times to the table. */
static void rec_drain(void)
{
    for (int i = 0; i < rec.nev; i++) {
        cl_ulong t0 = 0, t1 = 0;
        cl_int e = clWaitForEvents(1, &rec.ev[i].ev);
        if (!e)
            e = clGetEventProfilingInfo(rec.ev[i].ev, CL_PROFILING_COMMAND_START, sizeof(t0), &t0,
                                        NULL);
        if (!e)
            e = clGetEventProfilingInfo(rec.ev[i].ev, CL_PROFILING_COMMAND_END, sizeof(t1), &t1,
                                        NULL);
        clReleaseEvent(rec.ev[i].ev);
        if (e || t1 < t0) {
            rec.missing++;
            continue;
        }
        if (rec.ev[i].slot >= 0) {
            rec.tab[rec.ev[i].slot].ms += (double)(t1 - t0) * 1e-6;
            rec.tab[rec.ev[i].slot].n++;
        }
    }
    rec.nev = 0;
}

static void rec_push(cl_kernel k, cl_event ev)
{
    if (rec.nev == PROF_EV)
        rec_drain();
    rec.ev[rec.nev].ev = ev;
    rec.ev[rec.nev++].slot = rec_slot(k);
}

void ebb_cl_profile_queues(bool on)
{
    rec_queues = on;
}

void ebb_cl_profile_begin(void)
{
    rec_drain();
    rec.n = 0;
    rec.missing = 0;
    rec.on = true;
}

ebb_err ebb_cl_profile_take(struct ebb_cl_profile *tab, size_t cap, size_t *n,
                            struct ebb_diag *diag)
{
    rec_drain();
    rec.on = false;
    if (rec.missing)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "%lu kernel launches have no device timestamps (the queue was "
                            "opened without profiling)",
                            rec.missing);
    if (rec.n > cap)
        return ebb_diag_set(diag, EBB_ERANGE, "%zu kernel names, room for %zu", rec.n, cap);
    memcpy(tab, rec.tab, sizeof(rec.tab[0]) * rec.n);
    *n = rec.n;
    return EBB_OK;
}

ebb_err ebb_cl_run(struct ebb_cl *cl, cl_kernel k, cl_uint dims, const size_t *global,
                   const size_t *local, struct ebb_diag *diag)
{
    if (!prof_state) {
        struct ebb_cl_env env;
        ebb_cl_env_get(&env);
        prof_state = env.profile == 2 ? 3 : env.profile == 1 ? 2 : 1;
        if (prof_state >= 2)
            atexit(prof_print);
    }
    double t0 = 0;
    if (prof_state == 2) {
        clFinish(cl->q);
        t0 = mono_s();
    }
    size_t g[3];
    for (cl_uint i = 0; i < dims; i++) {
        g[i] = global[i];
        if (local && g[i] % local[i])
            g[i] += local[i] - g[i] % local[i];
        if (!g[i])
            return EBB_OK;
    }
    cl_event ev = NULL;
    cl_int e = clEnqueueNDRangeKernel(cl->q, k, dims, NULL, g, local, 0, NULL,
                                      prof_state == 3 || rec.on ? &ev : NULL);
    if (e) {
        char name[64] = "?";
        clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(name), name, NULL);
        name[sizeof(name) - 1] = 0;
        return ebb_diag_set(diag, e == CL_OUT_OF_RESOURCES ? EBB_ENOMEM : EBB_EDEVICE,
                            "enqueue %s: %s", name, ebb_cl_err_name(e));
    }
    cl->n_launch++;
    if (ev && rec.on) {
        if (prof_state == 3)
            clRetainEvent(ev); /* the env profile below keeps its own reference */
        rec_push(k, ev);
    }
    if (ev && prof_state == 3) {
        if (prof_nev == PROF_EV)
            prof_drain();
        prof_ev[prof_nev].ev = ev;
        prof_ev[prof_nev++].slot = prof_slot(k, g, dims);
    }
    if (prof_state == 2) {
        clFinish(cl->q);
        prof_add(k, mono_s() - t0);
    }
    return EBB_OK;
}

ebb_err ebb_cl_finish(struct ebb_cl *cl, struct ebb_diag *diag)
{
    cl->n_sync++;
    ebb_err rc = ebb_cl_check(clFinish(cl->q), diag, "clFinish");
    if (prof_state == 3)
        prof_drain();
    return rc;
}

ebb_err ebb_cl_read(struct ebb_cl *cl, cl_mem b, size_t off, size_t n, void *dst,
                    struct ebb_diag *diag)
{
    cl->n_sync++;
    cl_int e = clEnqueueReadBuffer(cl->q, b, CL_TRUE, off, n, dst, 0, NULL, NULL);
    if (prof_state == 3)
        prof_drain();
    return ebb_cl_check(e, diag, "reading results");
}
