/* OpenCL runtime: device selection, the device properties the engine specializes on, program
 * builds with an on-disk binary cache, and OpenCL error names. One struct ebb_cl owns a context
 * and an in-order queue on one device; it is used from one thread (the engine thread). */
#ifndef EBB_RUNTIME_CL_H
#define EBB_RUNTIME_CL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#ifndef CL_USE_DEPRECATED_OPENCL_1_2_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#endif
#include <CL/cl.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

enum ebb_cl_vendor {
    EBB_CL_VENDOR_OTHER = 0,
    EBB_CL_VENDOR_NVIDIA,
    EBB_CL_VENDOR_AMD,
    EBB_CL_VENDOR_INTEL,
    EBB_CL_VENDOR_APPLE,
    EBB_CL_VENDOR_ARM,
    EBB_CL_VENDOR_POCL,
};

/* The device facts the engine's layout and kernel choices depend on. */
struct ebb_cl_dev_info {
    char name[128];
    char vendor_str[128];
    char platform[128];
    char driver[128];  /* CL_DRIVER_VERSION */
    char version[128]; /* CL_DEVICE_VERSION */
    enum ebb_cl_vendor vendor;
    uint32_t plat_idx, dev_idx;
    bool is_gpu;
    bool is_cpu;
    uint64_t global_mem;  /* bytes */
    uint64_t max_alloc;   /* largest single buffer, bytes */
    uint64_t local_mem;   /* bytes per work-group */
    bool local_is_global; /* CL_GLOBAL local memory (CPU devices): tiling through it buys nothing */
    size_t max_wg;        /* max work-group size */
    uint32_t compute_units;
    bool image; /* image support */
    size_t image2d_w, image2d_h;
    size_t image1d_buf_max; /* texels of an image1d_buffer */
    bool host_unified;      /* CL_DEVICE_HOST_UNIFIED_MEMORY */
    bool fp16;              /* cl_khr_fp16 */
    bool idp;               /* cl_khr_integer_dot_product with packed 4 x 8-bit inputs
                               (CL_DEVICE_INTEGER_DOT_PRODUCT_INPUT_4x8BIT_PACKED_KHR) */
    uint32_t mem_align;     /* CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes */
    /* Identity for matching the device in other APIs (NVML): the PCI address as
     * "dddd:bb:dd.f" (cl_khr_pci_bus_info, NVIDIA's or AMD's attribute queries) and the
     * cl_khr_device_uuid UUID as NVML spells it ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
     * NVIDIA only); empty strings when the driver offers neither. */
    char pci_bus_id[16];
    char uuid[48];
    bool amd_free_mem; /* cl_amd_device_attribute_query: CL_DEVICE_GLOBAL_FREE_MEMORY_AMD */
};

struct ebb_cl {
    cl_platform_id plat;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    struct ebb_cl_dev_info info;
    /* What the engine asked of the queue since open, for `ebb bench` (plain increments on the
     * engine thread, nothing allocated): kernels enqueued by ebb_cl_run, and host
     * synchronisations through ebb_cl_finish and ebb_cl_read (blocking reads), and the wall
     * time the engine thread spent blocked in those (ns). */
    uint64_t n_launch, n_sync, wait_ns;
};

/* Returns the symbolic name of an OpenCL error code ("CL_OUT_OF_RESOURCES"). */
const char *ebb_cl_err_name(cl_int e);

/* If e is not CL_SUCCESS, writes "<what>: <CL name>" to diag and returns an ebb error
 * (EBB_ENOMEM for allocation failures, EBB_EDEVICE otherwise); returns EBB_OK for CL_SUCCESS. */
ebb_err ebb_cl_check(cl_int e, struct ebb_diag *diag, const char *what);

/* Opens a device. spec: NULL, "auto" or "cl" = first GPU of any platform, else the first
 * device of any kind; "cl:P:D" = platform P, device D (indices as ebb_cl_print_devices lists them);
 * any other string = first device whose name or platform name contains it (case-insensitive).
 * EBB_ENOTFOUND with a message when nothing matches. */
ebb_err ebb_cl_open(const char *spec, struct ebb_cl **out, struct ebb_diag *diag);
/* Data parallel serving: the devices spec names, each as "cl:P:D", into ids[0..cap), their
 * count in *n. "all": every GPU of the first platform that has one, else every device of the
 * first platform that has any (PoCL's CPU devices); "A,B,...": each element (any form
 * ebb_cl_open takes) resolved to the device it opens, in order, none twice. EBB_ENOTFOUND
 * naming the element that matches no device, EBB_EINVAL for one named twice or an empty
 * element, EBB_ERANGE past cap. */
#define EBB_CL_ID_MAX 24
ebb_err ebb_cl_devices(const char *spec, char (*ids)[EBB_CL_ID_MAX], size_t cap, size_t *n,
                       struct ebb_diag *diag);
/* True when spec names several devices ("all" or a comma list): `ebb serve`'s data parallel
 * and the layer split (runtime/model/model-cl-split.c) take one; ebb_cl_open does not. */
bool ebb_cl_spec_is_list(const char *spec);
/* True when some OpenCL platform lists a GPU device (what "auto" would open first); false
 * with none, with CPU devices only (PoCL) or without an OpenCL runtime. */
bool ebb_cl_has_gpu(void);

/* Releases the queue and context; accepts NULL. */
void ebb_cl_close(struct ebb_cl *cl);

/* Lists every platform and device with the properties above, as text or as one JSON array.
 * Returns EBB_ENOTFOUND (after printing an empty list) when no OpenCL platform exists. */
ebb_err ebb_cl_print_devices(FILE *out, bool json);

/* The device's free memory as the driver reports it (AMD: CL_DEVICE_GLOBAL_FREE_MEMORY_AMD,
 * KiB converted to bytes); false where the driver offers no such query. */
bool ebb_cl_free_memory(const struct ebb_cl *cl, uint64_t *free_bytes);

/* Looks up an OpenCL source file by name ("matvec.cl"): the embedded copy, or with the
 * kernels_from_disk build option the file in the source tree, read at each call. *out stays
 * valid until ebb_cl_source_release(). */
ebb_err ebb_cl_source(const char *name, const char **out, struct ebb_diag *diag);
void ebb_cl_source_release(const char *src);

/* Builds a program from the concatenation of srcs[0..n) with options, for cl's device. A
 * binary cache in $XDG_CACHE_HOME/ebb/kernels (default ~/.cache/ebb/kernels; EBB_KERNEL_CACHE=0
 * disables it) is keyed by a hash of the sources, options, device name, device version and
 * driver version, so any change rebuilds. On a failed build the log is in diag (truncated) and
 * on stderr (whole), and EBB_EBUILD is returned. */
ebb_err ebb_cl_program_build(struct ebb_cl *cl, const char *const *srcs, size_t n,
                             const char *options, cl_program *out, struct ebb_diag *diag);

/* Writes the kernel cache directory ($XDG_CACHE_HOME/ebb/kernels or ~/.cache/ebb/kernels),
 * creating it; false when caching is off (EBB_KERNEL_CACHE=0) or no directory is usable. */
bool ebb_cl_cache_dir(char *buf, size_t cap);

/* Creates a kernel by name from a built program. */
ebb_err ebb_cl_kernel(cl_program prog, const char *name, cl_kernel *out, struct ebb_diag *diag);

/* A kernel argument for ebb_cl_set_args: EBB_CL_ARG(var) passes sizeof(var) and &var, so a
 * NULL cl_mem variable passes a NULL buffer. */
struct ebb_cl_arg {
    size_t size;
    const void *p;
};
#define EBB_CL_ARG(v) ((struct ebb_cl_arg){sizeof(v), &(v)})

/* Sets args a[0..n) at indices first, first + 1, ... */
ebb_err ebb_cl_set_args(cl_kernel k, cl_uint first, const struct ebb_cl_arg *a, size_t n,
                        struct ebb_diag *diag);

/* clFinish on cl's queue, counted in n_sync. */
ebb_err ebb_cl_finish(struct ebb_cl *cl, struct ebb_diag *diag);

/* A blocking read of n bytes at off of b into dst (after everything enqueued before it),
 * counted in n_sync. */
ebb_err ebb_cl_read(struct ebb_cl *cl, cl_mem b, size_t off, size_t n, void *dst,
                    struct ebb_diag *diag);

/* Enqueues k over dims dimensions; global sizes are rounded up to multiples of local (when
 * local is non-NULL). local NULL: the implementation picks, except on a CPU device with dims > 1,
 * where it is (the largest power of two up to 64 dividing global[0], 1, 1), the same for any
 * row count (PoCL builds a kernel once per local size). Does not wait. Counted in n_launch. */
cl_int ebb__cl_setarg(cl_kernel k, cl_uint i, size_t size, const void *p);
ebb_err ebb_cl_run(struct ebb_cl *cl, cl_kernel k, cl_uint dims, const size_t *global,
                   const size_t *local, struct ebb_diag *diag);

/* Device time per kernel name over a stretch of launches a caller marks (`ebb bench
 * --stages`), from the queue's timestamps. Process-wide state for one engine thread: begin,
 * launches through ebb_cl_run on any queue, then take, all on the same thread.
 * ebb_cl_profile_queues(true) makes the queues opened after it keep timestamps
 * (CL_QUEUE_PROFILING_ENABLE); call it before the device is opened. While recording nothing
 * waits, except once every 4096 launches, when the pending timestamps are read back. */
struct ebb_cl_profile {
    char name[48];   /* kernel function name */
    double ms;       /* device time, start to end of each launch, summed */
    unsigned long n; /* launches */
};
void ebb_cl_profile_queues(bool on);
/* Starts recording every launch; discards what an earlier stretch recorded. */
void ebb_cl_profile_begin(void);
/* Waits for the recorded launches, stops recording, and writes one entry per kernel name (in
 * the order they were first launched) to tab[0..*n). EBB_EUNSUPPORTED when a queue kept no
 * timestamps (opened before ebb_cl_profile_queues), EBB_ERANGE when cap is too small; *n is
 * written only on success. */
ebb_err ebb_cl_profile_take(struct ebb_cl_profile *tab, size_t cap, size_t *n,
                            struct ebb_diag *diag);

#endif
