/* Memory probes for the layer streamer: how much memory the model may still take right now.
 * Each probe reports "unavailable" cleanly (its ok flag stays false) where the platform, the
 * kernel or the driver does not offer it; the planner then falls back to the configured budget.
 *
 * Sources: Linux /proc/meminfo (MemTotal, MemAvailable); the memory cgroup of this process,
 * found through /proc/self/cgroup and /proc/self/mountinfo: cgroup v2 (memory.max and
 * memory.high, the lower one; memory.current, memory.stat inactive_file) where the unified
 * hierarchy holds the memory controller, else cgroup v1 (memory.limit_in_bytes,
 * memory.usage_in_bytes, memory.stat total_inactive_file), the group and every ancestor up to the
 * mount point, the one leaving the least memory deciding; PSI (the v2 group's memory.pressure, else
 * /proc/pressure/memory); NVIDIA device memory through NVML loaded with dlopen and matched by PCI
 * bus id or UUID; a device free-memory value passed in by the caller (AMD:
 * CL_DEVICE_GLOBAL_FREE_MEMORY_AMD); macOS host_statistics64 and the memory-pressure dispatch
 * source (warn/critical set `pressure`; compiled only on
 * __APPLE__ and not yet run on a Mac).
 *
 * Test hook: when the environment variable EBB_TEST_MEMPROBE_FILE names a file, every probe
 * re-reads it and its `key=value` lines override the readings (see ebb_memprobe_read). */
#ifndef EBB_RUNTIME_MEMPROBE_H
#define EBB_RUNTIME_MEMPROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define EBB_MEMPROBE_UNLIMITED UINT64_MAX

struct ebb_memprobe_reading {
    bool host_ok;            /* MemTotal/MemAvailable (Linux) or host_statistics64 (macOS) */
    uint64_t host_total;     /* bytes */
    uint64_t host_available; /* bytes the kernel estimates can be taken without swapping */

    bool cg_ok;         /* the process's memory cgroup was read */
    int cg_version;     /* 1 or 2 (0 when only the test hook set cg_*) */
    char cg_group[256]; /* the process's group ("/system.slice/ebb.service") */
    char cg_path[256];  /* the group whose limit binds: cg_group or an ancestor ("/" none) */
    /* The binding group's values (the process's own group's when no group has a limit). */
    uint64_t cg_max;           /* memory.max (or a lower memory.high) / memory.limit_in_bytes;
                                  UNLIMITED for "max" and
                                  for values at or above the host's memory (v1's "none") */
    uint64_t cg_current;       /* memory.current / memory.usage_in_bytes */
    uint64_t cg_inactive_file; /* memory.stat (total_)inactive_file: reclaimable page cache */
    uint64_t cg_available;     /* max - (current - inactive_file), or UNLIMITED */

    bool psi_ok;          /* PSI memory pressure was read */
    double psi_some10;    /* "some" avg10, percent */
    double psi_full10;    /* "full" avg10, percent */
    uint64_t psi_some_us; /* "some" total stall, microseconds */

    bool dev_ok;         /* device memory (NVML, or the caller's value) */
    uint64_t dev_total;  /* bytes */
    uint64_t dev_free;   /* bytes */
    const char *dev_src; /* "nvml", "driver" (dev_read), "caller", or NULL */

    bool pressure;   /* PSI full avg10 >= 1% or some avg10 >= 10%, or forced by the test hook */
    bool overridden; /* the test hook file was read */

    /* The memory the compute device may still take: for host-memory devices the smaller of
     * host_available and cg_available; for discrete devices dev_free. available_ok is false
     * when no probe produced a value. */
    bool available_ok;
    uint64_t available;
    /* Which probe decided `available`: "host", "cgroup v1", "cgroup v2", the device's dev_src,
     * "test-hook", or "none". Static strings. */
    const char *available_src;
};

struct ebb_memprobe_params {
    /* Where the compute device's memory is: false for CPUs and unified-memory GPUs (host
     * probes decide), true for discrete GPUs (device probes decide). */
    bool discrete;
    /* NVIDIA device to watch through NVML: PCI bus id ("0000:65:00.0", any case, domain
     * optional) or UUID ("GPU-..."); NULL for none. Copied. */
    const char *pci_bus_id;
    const char *uuid;
    /* The driver's own free-memory query (AMD: CL_DEVICE_GLOBAL_FREE_MEMORY_AMD), called on
     * every read where NVML has no value; NULL for none. May be called from any thread that
     * reads the probes. */
    bool (*dev_read)(void *u, uint64_t *total, uint64_t *free_bytes);
    void *dev_u;
    /* Prefix for /proc and /sys paths (tests build a fake tree); NULL or "" for the real one. */
    const char *root;
};

struct ebb_memprobe;

/* Creates a probe set. Finding no probe at all is not an error (readings then say
 * unavailable). NVML is loaded only if a bus id or UUID is given; when it cannot be loaded or
 * the device is not found, the device probe is unavailable and note() tells why. */
ebb_err ebb_memprobe_new(const struct ebb_memprobe_params *p, struct ebb_memprobe **out,
                         struct ebb_diag *diag);

/* Frees; accepts NULL. */
void ebb_memprobe_free(struct ebb_memprobe *mp);

/* A one-line human summary of which probes are live ("meminfo cgroup2 psi nvml:..."). */
const char *ebb_memprobe_describe(const struct ebb_memprobe *mp);

/* The process's memory cgroup as the probe set found it: its version (1 or 2, 0 for none), its
 * directory ("/sys/fs/cgroup/memory/x", "" when none; ebb_memprobe_root goes in front) and the
 * length of the cgroup mount point at the start of that directory (ancestors are the prefixes
 * ending in '/' no shorter than it). The string lives as long as the probe set. */
int ebb_memprobe_cgroup(const struct ebb_memprobe *mp, const char **dir, size_t *mount_len);
/* The test root the probe set was created with ("" for the real tree). */
const char *ebb_memprobe_root(const struct ebb_memprobe *mp);

/* Sets the device memory reading the caller obtained itself (AMD's
 * CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, converted to bytes); used when NVML has no value. */
void ebb_memprobe_set_device(struct ebb_memprobe *mp, uint64_t total, uint64_t free_bytes);

/* Takes every reading now (a few small file reads; no allocation). Thread-safe as long as one
 * thread calls it at a time per probe set. The test hook file may set host_total,
 * host_available, cg_max, cg_current, cg_inactive_file, psi_some10, psi_full10, dev_total,
 * dev_free, pressure (0/1) and available (the final value); sizes accept K/M/G/T suffixes. */
ebb_err ebb_memprobe_read(struct ebb_memprobe *mp, struct ebb_memprobe_reading *out);

/* One reading of the host's available memory (the probes of a CPU or of a GPU sharing host
 * memory: MemAvailable within the cgroup's limit, or the test hook's), from a probe set made and
 * freed for it: for code that asks once, at load. False where no probe answers. */
bool ebb_memprobe_host_available(uint64_t *out);

/* Parsers, exposed for tests. Each returns EBB_EFORMAT when the text lacks what it needs. */
ebb_err ebb_memprobe_parse_meminfo(const char *text, uint64_t *total, uint64_t *available);
ebb_err ebb_memprobe_parse_psi(const char *text, double *some10, double *full10, uint64_t *some_us);
/* The cgroup v2 path ("0::/user.slice/x.scope" -> "/user.slice/x.scope") of /proc/self/cgroup
 * text; EBB_ENOTFOUND on a v1-only system. */
ebb_err ebb_memprobe_parse_cgroup(const char *text, char *path, size_t cap);
/* The memory controller's path of /proc/self/cgroup text on cgroup v1 ("4:memory:/x" or
 * "7:cpuset,memory:/x" -> "/x"); EBB_ENOTFOUND when no hierarchy holds the memory controller. */
ebb_err ebb_memprobe_parse_cgroup_v1(const char *text, char *path, size_t cap);
/* The first mount in /proc/self/mountinfo text of file system type fstype ("cgroup2") whose
 * super options hold `option` ("memory"; NULL for any): its mount point and the root of the
 * mounted tree (octal escapes decoded). EBB_ENOTFOUND when none, EBB_EFORMAT when too long. */
ebb_err ebb_memprobe_parse_mountinfo(const char *text, const char *fstype, const char *option,
                                     char *mnt, size_t mcap, char *root, size_t rcap);
/* A decimal number (leading blanks skipped): EBB_EFORMAT without a digit, EBB_ERANGE past
 * 2^64 - 1. */
ebb_err ebb_memprobe_parse_u64(const char *s, uint64_t *out);
/* A field of memory.stat text ("inactive_file"). */
ebb_err ebb_memprobe_parse_stat(const char *text, const char *key, uint64_t *out);

/* Parses a size: plain bytes or a number with K, M, G or T (powers of 1024; an optional
 * trailing "B" or "iB" is accepted), e.g. "256M", "8G", "1.5G". */
ebb_err ebb_memprobe_parse_size(const char *s, uint64_t *out);

#endif
