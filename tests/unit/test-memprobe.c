/* Memory probes: parsers, a fake /proc + /sys tree (cgroup v2 with and without a limit, v1
 * with its huge "no limit", nested groups where an ancestor binds, a hybrid host (v1 memory
 * controller beside the v2 unified tree), a container's group mounted as its root, nothing
 * at all), the caller's device value and the driver hook, NVML absent and a stand-in
 * NVML (tests/unit/fake-nvml, named by EBB_NVML_LIBRARY) found by PCI bus id or UUID, and the
 * test hook file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stream/memprobe.h"

#define MiB (1024ull * 1024)

static char root[256];

static void put(const char *rel, const char *text)
{
    char path[512], dir[512];
    snprintf(path, sizeof(path), "%s%s", root, rel);
    /* mkdir -p of the parent */
    snprintf(dir, sizeof(dir), "%s", path);
    for (char *p = dir + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        mkdir(dir, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/ebb-memprobe-XXXXXX");
    assert_non_null(mkdtemp(root));
    unsetenv("EBB_TEST_MEMPROBE_FILE");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static const char meminfo[] = "MemTotal:       16000000 kB\n"
                              "MemFree:         1000000 kB\n"
                              "MemAvailable:    8000000 kB\n"
                              "Buffers:           10000 kB\n";
static const char psi[] = "some avg10=12.50 avg60=3.00 avg300=1.00 total=123456\n"
                          "full avg10=0.25 avg60=0.10 avg300=0.00 total=999\n";

static void parsers(void **state)
{
    (void)state;
    uint64_t t = 0, a = 0, us = 0, v = 0;
    double s10 = 0, f10 = 0;
    char path[64];
    assert_int_equal(ebb_memprobe_parse_meminfo(meminfo, &t, &a), EBB_OK);
    assert_int_equal(t, 16000000ull * 1024);
    assert_int_equal(a, 8000000ull * 1024);
    assert_int_equal(ebb_memprobe_parse_meminfo("MemTotal: 5 kB\n", &t, &a), EBB_EFORMAT);
    assert_int_equal(ebb_memprobe_parse_psi(psi, &s10, &f10, &us), EBB_OK);
    assert_true(s10 > 12.49 && s10 < 12.51);
    assert_true(f10 > 0.24 && f10 < 0.26);
    assert_int_equal(us, 123456);
    assert_int_equal(ebb_memprobe_parse_psi("garbage", &s10, &f10, &us), EBB_EFORMAT);
    assert_int_equal(
        ebb_memprobe_parse_cgroup("12:memory:/x\n0::/user.slice/a.scope\n", path, sizeof(path)),
        EBB_OK);
    assert_string_equal(path, "/user.slice/a.scope");
    assert_int_equal(ebb_memprobe_parse_cgroup("4:memory:/x\n1:cpu:/\n", path, sizeof(path)),
                     EBB_ENOTFOUND);
    assert_int_equal(
        ebb_memprobe_parse_stat("anon 5\nactive_file 7\ninactive_file 4096\n", "inactive_file", &v),
        EBB_OK);
    assert_int_equal(v, 4096);
    assert_int_equal(ebb_memprobe_parse_stat("file 1\n", "inactive_file", &v), EBB_ENOTFOUND);
    assert_int_equal(ebb_memprobe_parse_size("256M", &v), EBB_OK);
    assert_int_equal(v, 256 * MiB);
    assert_int_equal(ebb_memprobe_parse_size("2k", &v), EBB_OK);
    assert_int_equal(v, 2048);
    assert_int_equal(ebb_memprobe_parse_size("3 G", &v), EBB_EINVAL);
}

static void parsers_v1(void **state)
{
    (void)state;
    char path[64], mnt[64], rt[64];
    uint64_t v = 0;
    assert_int_equal(
        ebb_memprobe_parse_cgroup_v1("5:cpu:/\n4:memory:/a/b\n0::/\n", path, sizeof(path)), EBB_OK);
    assert_string_equal(path, "/a/b");
    assert_int_equal(ebb_memprobe_parse_cgroup_v1("7:cpuset,memory:/x", path, sizeof(path)),
                     EBB_OK);
    assert_string_equal(path, "/x");
    /* "memoryx" is not "memory"; a v2-only file has no memory hierarchy. */
    assert_int_equal(ebb_memprobe_parse_cgroup_v1("3:memoryx:/y\n0::/z\n", path, sizeof(path)),
                     EBB_ENOTFOUND);
    assert_int_equal(ebb_memprobe_parse_cgroup_v1("4:memory:\n", path, sizeof(path)), EBB_EFORMAT);
    assert_int_equal(ebb_memprobe_parse_cgroup_v1("4:memory:/0123456789/0123456789/0123456789/"
                                                  "0123456789/0123456789/0123456789/x\n",
                                                  path, sizeof(path)),
                     EBB_EFORMAT);
    static const char mi[] =
        "22 1 0:21 / /proc rw - proc proc rw\n"
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu\n"
        "35 31 0:32 /docker/abc /sys/fs/cgroup/mem\\040ory rw - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    assert_int_equal(
        ebb_memprobe_parse_mountinfo(mi, "cgroup", "memory", mnt, sizeof(mnt), rt, sizeof(rt)),
        EBB_OK);
    assert_string_equal(mnt, "/sys/fs/cgroup/mem ory");
    assert_string_equal(rt, "/docker/abc");
    assert_int_equal(
        ebb_memprobe_parse_mountinfo(mi, "cgroup2", NULL, mnt, sizeof(mnt), rt, sizeof(rt)),
        EBB_OK);
    assert_string_equal(mnt, "/sys/fs/cgroup/unified");
    assert_int_equal(
        ebb_memprobe_parse_mountinfo(mi, "cgroup", "pids", mnt, sizeof(mnt), rt, sizeof(rt)),
        EBB_ENOTFOUND);
    assert_int_equal(ebb_memprobe_parse_mountinfo("1 2 3\n- -\n", "cgroup2", NULL, mnt, sizeof(mnt),
                                                  rt, sizeof(rt)),
                     EBB_ENOTFOUND);
    /* Numbers from untrusted files: overflow and garbage are errors, not wrapped values. */
    assert_int_equal(ebb_memprobe_parse_u64("18446744073709551615\n", &v), EBB_OK);
    assert_true(v == UINT64_MAX);
    assert_int_equal(ebb_memprobe_parse_u64("18446744073709551616", &v), EBB_ERANGE);
    assert_int_equal(ebb_memprobe_parse_u64("max\n", &v), EBB_EFORMAT);
    assert_int_equal(ebb_memprobe_parse_u64("-1", &v), EBB_EFORMAT);
    assert_int_equal(ebb_memprobe_parse_meminfo("MemTotal: 99999999999999999999 kB\n"
                                                "MemAvailable: 1 kB\n",
                                                &v, &v),
                     EBB_EFORMAT);
    assert_int_equal(ebb_memprobe_parse_meminfo("MemTotal: 18446744073709551 kB\n"
                                                "MemAvailable: 1 kB\n",
                                                &v, &v),
                     EBB_ERANGE);
    assert_int_equal(
        ebb_memprobe_parse_stat("total_inactive_file 12\ninactive_file 3\n", "inactive_file", &v),
        EBB_OK);
    assert_int_equal(v, 3);
}

/* The hybrid layout of this project's CI machines: v1 hierarchies per controller, v2 mounted
 * at /sys/fs/cgroup/unified without the memory controller. */
static const char hybrid_mountinfo[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

static void cgroup_v1(void **state)
{
    (void)state;
    put("/proc/meminfo", meminfo); /* 16000000 kB total, 8000000 kB available */
    put("/proc/self/cgroup", "9:name=systemd:/\n4:memory:/svc/ebb\n1:cpu:/\n0::/\n");
    put("/proc/self/mountinfo", hybrid_mountinfo);
    put("/sys/fs/cgroup/unified/cgroup.procs", "1\n"); /* no memory.* files: not the v2 group */
    put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("/sys/fs/cgroup/memory/memory.usage_in_bytes", "9000000000\n");
    put("/sys/fs/cgroup/memory/svc/memory.limit_in_bytes", "9223372036854771712\n");
    put("/sys/fs/cgroup/memory/svc/memory.usage_in_bytes", "700000000\n");
    put("/sys/fs/cgroup/memory/svc/ebb/memory.limit_in_bytes", "419430400\n");
    put("/sys/fs/cgroup/memory/svc/ebb/memory.usage_in_bytes", "314572800\n");
    put("/sys/fs/cgroup/memory/svc/ebb/memory.stat",
        "cache 1\ninactive_file 1048576\ntotal_inactive_file 104857600\n");
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    assert_int_equal(ebb_memprobe_new(&(struct ebb_memprobe_params){.root = root}, &mp, NULL),
                     EBB_OK);
    assert_non_null(strstr(ebb_memprobe_describe(mp), "cgroup1"));
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_true(r.cg_ok);
    assert_int_equal(r.cg_version, 1);
    assert_string_equal(r.cg_group, "/svc/ebb");
    assert_string_equal(r.cg_path, "/svc/ebb");
    assert_int_equal(r.cg_max, 400 * MiB);
    /* The subtree's inactive file pages (total_) count, not only the group's own. */
    assert_int_equal(r.cg_inactive_file, 100 * MiB);
    assert_int_equal(r.cg_available, 400 * MiB - (300 * MiB - 100 * MiB));
    assert_int_equal(r.available, 200 * MiB);
    assert_string_equal(r.available_src, "cgroup v1");
    /* Raised to v1's "no limit" while running: the next reading sees the host. */
    put("/sys/fs/cgroup/memory/svc/ebb/memory.limit_in_bytes", "9223372036854771712\n");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.cg_max, EBB_MEMPROBE_UNLIMITED);
    assert_int_equal(r.available, 8000000ull * 1024);
    assert_string_equal(r.available_src, "host");
    assert_string_equal(r.cg_path, "/svc/ebb");
    /* A limit at or above the host's memory is no limit either; so is a value past 2^64. */
    put("/sys/fs/cgroup/memory/svc/ebb/memory.limit_in_bytes", "16384000000\n");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.cg_max, EBB_MEMPROBE_UNLIMITED);
    put("/sys/fs/cgroup/memory/svc/ebb/memory.limit_in_bytes", "99999999999999999999999\n");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.cg_max, EBB_MEMPROBE_UNLIMITED);
    /* Garbage in the usage file: no cgroup reading, the host decides. */
    put("/sys/fs/cgroup/memory/svc/ebb/memory.usage_in_bytes", "x\n");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_false(r.cg_ok);
    assert_string_equal(r.available_src, "host");
    ebb_memprobe_free(mp);
}

static void cgroup_nested(void **state)
{
    (void)state;
    put("/proc/meminfo", meminfo);
    /* v2 at a non-standard mount point, found through mountinfo. */
    put("/proc/self/cgroup", "0::/a/b/c\n");
    put("/proc/self/mountinfo", "29 23 0:26 / /cg2 rw - cgroup2 cgroup2 rw,nsdelegate\n");
    put("/cg2/a/memory.max", "1073741824\n");
    put("/cg2/a/memory.current", "943718400\n"); /* 900 MiB: siblings use most of it */
    put("/cg2/a/memory.stat", "inactive_file 0\n");
    put("/cg2/a/b/memory.max", "max\n");
    put("/cg2/a/b/memory.current", "104857600\n");
    put("/cg2/a/b/c/memory.max", "2147483648\n");
    put("/cg2/a/b/c/memory.current", "104857600\n");
    put("/cg2/a/b/c/memory.stat", "inactive_file 0\n");
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    assert_int_equal(ebb_memprobe_new(&(struct ebb_memprobe_params){.root = root}, &mp, NULL),
                     EBB_OK);
    assert_non_null(strstr(ebb_memprobe_describe(mp), "cgroup2"));
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.cg_version, 2);
    assert_string_equal(r.cg_group, "/a/b/c");
    /* The grandparent leaves 124 MiB; the group's own 2 GiB would leave 1948 MiB. */
    assert_string_equal(r.cg_path, "/a");
    assert_int_equal(r.cg_max, 1024 * MiB);
    assert_int_equal(r.available, 124 * MiB);
    assert_string_equal(r.available_src, "cgroup v2");
    /* The group's own limit lowered below that: now it binds. */
    put("/cg2/a/b/c/memory.max", "157286400\n");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_string_equal(r.cg_path, "/a/b/c");
    assert_int_equal(r.available, 50 * MiB);
    /* memory.high below memory.max (systemd's MemoryHigh=) binds like a max. */
    put("/cg2/a/b/c/memory.high", "136314880\n");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.cg_max, 130 * MiB);
    assert_int_equal(r.available, 30 * MiB);
    put("/cg2/a/b/c/memory.high", "max\n");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.cg_max, 150 * MiB);
    ebb_memprobe_free(mp);
}

/* A container with its own cgroup namespace sees its group as "/" mounted at /sys/fs/cgroup
 * (v2), or a v1 group whose mount root is the group's path (Docker without a namespace). */
static void cgroup_container(void **state)
{
    (void)state;
    put("/proc/meminfo", meminfo);
    put("/proc/self/cgroup", "0::/\n");
    put("/proc/self/mountinfo", "700 600 0:30 / /sys/fs/cgroup ro - cgroup2 cgroup rw\n");
    put("/sys/fs/cgroup/memory.max", "536870912\n");
    put("/sys/fs/cgroup/memory.current", "0\n");
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    assert_int_equal(ebb_memprobe_new(&(struct ebb_memprobe_params){.root = root}, &mp, NULL),
                     EBB_OK);
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.cg_version, 2);
    assert_string_equal(r.cg_path, "/");
    assert_int_equal(r.available, 512 * MiB);
    ebb_memprobe_free(mp);
    put("/proc/self/cgroup", "4:memory:/docker/abc\n");
    put("/proc/self/mountinfo",
        "35 31 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n");
    put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "268435456\n");
    put("/sys/fs/cgroup/memory/memory.usage_in_bytes", "0\n");
    assert_int_equal(ebb_memprobe_new(&(struct ebb_memprobe_params){.root = root}, &mp, NULL),
                     EBB_OK);
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.cg_version, 1);
    assert_string_equal(r.cg_path, "/docker/abc");
    assert_int_equal(r.available, 256 * MiB);
    assert_string_equal(r.available_src, "cgroup v1");
    ebb_memprobe_free(mp);
}

static void fake_cgroup(void **state)
{
    (void)state;
    put("/proc/meminfo", meminfo);
    put("/proc/self/cgroup", "0::/ebb.slice\n");
    put("/proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"
                                 "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
    put("/sys/fs/cgroup/ebb.slice/memory.max", "2147483648\n");
    put("/sys/fs/cgroup/ebb.slice/memory.current", "1610612736\n");
    put("/sys/fs/cgroup/ebb.slice/memory.stat", "anon 1000\ninactive_file 536870912\n");
    put("/sys/fs/cgroup/ebb.slice/memory.pressure", psi);
    struct ebb_memprobe_params p = {.root = root};
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    assert_int_equal(ebb_memprobe_new(&p, &mp, NULL), EBB_OK);
    assert_non_null(strstr(ebb_memprobe_describe(mp), "cgroup2"));
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_true(r.host_ok);
    assert_true(r.cg_ok);
    assert_int_equal(r.cg_max, 2048 * MiB);
    /* 2 GiB - (1.5 GiB - 0.5 GiB reclaimable cache) = 1 GiB, below MemAvailable. */
    assert_int_equal(r.cg_available, 1024 * MiB);
    assert_true(r.available_ok);
    assert_int_equal(r.available, 1024 * MiB);
    /* The cgroup's pressure file wins over the system one: some 12.5% -> pressure. */
    assert_true(r.psi_ok);
    assert_true(r.pressure);
    assert_false(r.dev_ok);
    /* memory.max "max": the host decides. The probe re-reads files on every call. */
    put("/sys/fs/cgroup/ebb.slice/memory.max", "max\n");
    put("/sys/fs/cgroup/ebb.slice/memory.pressure", "some avg10=0.10 avg60=0 avg300=0 total=1\n");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.cg_max, EBB_MEMPROBE_UNLIMITED);
    assert_int_equal(r.available, 8000000ull * 1024);
    assert_false(r.pressure);
    ebb_memprobe_free(mp);
}

static void nothing_there(void **state)
{
    (void)state;
    struct ebb_memprobe_params p = {.root = root, .pci_bus_id = "0000:99:00.0"};
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    struct ebb_diag d = {{0}};
    /* No files, and (on this machine) no NVML: still a probe set, every reading unavailable. */
    assert_int_equal(ebb_memprobe_new(&p, &mp, &d), EBB_OK);
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_false(r.host_ok);
    assert_false(r.cg_ok);
    assert_false(r.psi_ok);
    assert_false(r.available_ok);
    assert_false(r.pressure);
    if (!r.dev_ok)
        assert_non_null(strstr(d.msg, "NVML"));
    ebb_memprobe_free(mp);
    /* cgroup v1 named, but no v1 files: no cgroup reading. */
    put("/proc/meminfo", meminfo);
    put("/proc/self/cgroup", "4:memory:/x\n");
    assert_int_equal(ebb_memprobe_new(&(struct ebb_memprobe_params){.root = root}, &mp, NULL),
                     EBB_OK);
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_false(r.cg_ok);
    assert_int_equal(r.available, 8000000ull * 1024);
    ebb_memprobe_free(mp);
}

static void device_value(void **state)
{
    (void)state;
    put("/proc/meminfo", meminfo);
    struct ebb_memprobe_params p = {.root = root, .discrete = true};
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    assert_int_equal(ebb_memprobe_new(&p, &mp, NULL), EBB_OK);
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_true(r.host_ok);
    assert_false(r.available_ok); /* discrete: the host does not decide */
    ebb_memprobe_set_device(mp, 8192 * MiB, 3000 * MiB);
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_true(r.dev_ok);
    assert_string_equal(r.dev_src, "caller");
    assert_int_equal(r.available, 3000 * MiB);
    ebb_memprobe_free(mp);
}

static bool fake_driver(void *u, uint64_t *total, uint64_t *free_bytes)
{
    int *calls = u;
    (*calls)++;
    if (*calls > 2) /* the driver stops answering: the reading says unavailable */
        return false;
    *total = 4096 * MiB;
    *free_bytes = (uint64_t)*calls * 1000 * MiB;
    return true;
}

static void driver_hook(void **state)
{
    (void)state;
    put("/proc/meminfo", meminfo);
    int calls = 0;
    struct ebb_memprobe_params p = {
        .root = root, .discrete = true, .dev_read = fake_driver, .dev_u = &calls};
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    assert_int_equal(ebb_memprobe_new(&p, &mp, NULL), EBB_OK);
    assert_non_null(strstr(ebb_memprobe_describe(mp), "driver"));
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_true(r.dev_ok && r.available_ok);
    assert_string_equal(r.dev_src, "driver");
    assert_int_equal(r.available, 1000 * MiB);
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.available, 2000 * MiB); /* read again each time */
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_false(r.available_ok);
    ebb_memprobe_set_device(mp, 4096 * MiB, 700 * MiB); /* the caller's value is the fallback */
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_string_equal(r.dev_src, "caller");
    assert_int_equal(r.available, 700 * MiB);
    ebb_memprobe_free(mp);
}

/* The stand-in NVML (path in FAKE_NVML_PATH, set by meson): found by bus id and by UUID, its
 * free memory decides on a discrete device, a wrong id or a failing init leaves the device
 * probe unavailable with a note that says why. */
static void fake_nvml(void **state)
{
    (void)state;
    const char *lib = getenv("FAKE_NVML_PATH");
    if (!lib || !*lib) {
        print_message("FAKE_NVML_PATH not set: stand-in NVML not built here\n");
        skip();
    }
    setenv("EBB_NVML_LIBRARY", lib, 1);
    put("/proc/meminfo", meminfo);
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    struct ebb_diag d = {{0}};
    setenv("FAKE_NVML_BUS", "0000:65:00.0", 1);
    setenv("FAKE_NVML_FREE_MIB", "5000", 1);
    struct ebb_memprobe_params p = {.root = root, .discrete = true, .pci_bus_id = "0000:65:00.0"};
    assert_int_equal(ebb_memprobe_new(&p, &mp, &d), EBB_OK);
    assert_non_null(strstr(ebb_memprobe_describe(mp), "nvml"));
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_true(r.dev_ok && r.available_ok);
    assert_string_equal(r.dev_src, "nvml");
    assert_int_equal(r.dev_total, 8192 * MiB);
    assert_int_equal(r.available, 5000 * MiB);
    setenv("FAKE_NVML_FREE_MIB", "1234", 1); /* every read asks NVML again */
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.available, 1234 * MiB);
    ebb_memprobe_free(mp);
    /* By UUID when the bus id does not match. */
    p.pci_bus_id = "0000:66:00.0";
    p.uuid = "GPU-00000000-1111-2222-3333-444444444444";
    assert_int_equal(ebb_memprobe_new(&p, &mp, &d), EBB_OK);
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_string_equal(r.dev_src, "nvml");
    ebb_memprobe_free(mp);
    /* Neither matches: no device reading, and the note names the reason. */
    p.uuid = "GPU-ffffffff-1111-2222-3333-444444444444";
    memset(&d, 0, sizeof(d));
    assert_int_equal(ebb_memprobe_new(&p, &mp, &d), EBB_OK);
    assert_non_null(strstr(d.msg, "no NVML device"));
    assert_null(strstr(ebb_memprobe_describe(mp), "nvml"));
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_false(r.dev_ok);
    assert_false(r.available_ok);
    ebb_memprobe_free(mp);
    /* Init fails. */
    setenv("FAKE_NVML_INIT_FAIL", "1", 1);
    p.pci_bus_id = "0000:65:00.0";
    memset(&d, 0, sizeof(d));
    assert_int_equal(ebb_memprobe_new(&p, &mp, &d), EBB_OK);
    assert_non_null(strstr(d.msg, "nvmlInit_v2 failed"));
    ebb_memprobe_free(mp);
    unsetenv("FAKE_NVML_INIT_FAIL");
    /* A path that is not there. */
    setenv("EBB_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    memset(&d, 0, sizeof(d));
    assert_int_equal(ebb_memprobe_new(&p, &mp, &d), EBB_OK);
    assert_non_null(strstr(d.msg, "not found"));
    ebb_memprobe_free(mp);
    unsetenv("EBB_NVML_LIBRARY");
}

static void test_hook(void **state)
{
    (void)state;
    char hook[300];
    snprintf(hook, sizeof(hook), "%s/hook", root);
    put("/proc/meminfo", meminfo);
    put("/hook", "# test\navailable=123456789\n");
    setenv("EBB_TEST_MEMPROBE_FILE", hook, 1);
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    assert_int_equal(ebb_memprobe_new(&(struct ebb_memprobe_params){.root = root}, &mp, NULL),
                     EBB_OK);
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_true(r.overridden);
    assert_int_equal(r.available, 123456789);
    /* Changed while running: the next reading follows. */
    put("/hook", "host_available = 512M\ncg_max=1G\ncg_current=900M\ncg_inactive_file=100M\n"
                 "psi_full10=2.5\n");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_int_equal(r.host_available, 512 * MiB);
    assert_int_equal(r.cg_available, 224 * MiB);
    assert_int_equal(r.available, 224 * MiB);
    assert_true(r.pressure);
    put("/hook", "pressure=1\n");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_true(r.pressure);
    assert_int_equal(r.available, 8000000ull * 1024);
    unsetenv("EBB_TEST_MEMPROBE_FILE");
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
    assert_false(r.overridden);
    assert_false(r.pressure);
    ebb_memprobe_free(mp);
}

static void real_system(void **state)
{
    (void)state;
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    assert_int_equal(ebb_memprobe_new(NULL, &mp, NULL), EBB_OK);
    assert_int_equal(ebb_memprobe_read(mp, &r), EBB_OK);
#if defined(__linux__) || defined(__APPLE__)
    assert_true(r.host_ok);
    assert_true(r.host_total >= r.host_available);
    assert_true(r.available_ok);
#endif
    print_message("probes: %s; available %.0f MiB\n", ebb_memprobe_describe(mp),
                  r.available / (double)MiB);
    ebb_memprobe_free(mp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parsers),
        cmocka_unit_test(parsers_v1),
        cmocka_unit_test_setup_teardown(fake_cgroup, setup, teardown),
        cmocka_unit_test_setup_teardown(cgroup_v1, setup, teardown),
        cmocka_unit_test_setup_teardown(cgroup_nested, setup, teardown),
        cmocka_unit_test_setup_teardown(cgroup_container, setup, teardown),
        cmocka_unit_test_setup_teardown(nothing_there, setup, teardown),
        cmocka_unit_test_setup_teardown(device_value, setup, teardown),
        cmocka_unit_test_setup_teardown(driver_hook, setup, teardown),
        cmocka_unit_test_setup_teardown(fake_nvml, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hook, setup, teardown),
        cmocka_unit_test(real_system),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
