/* Memory probes: parsers, a fake /proc + /sys tree (cgroup v2 with and without a limit, v1
 * only, nothing at all), the caller's device value and the driver hook, NVML absent and a stand-in
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
    /* cgroup v1 only: no cgroup reading. */
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
        cmocka_unit_test_setup_teardown(fake_cgroup, setup, teardown),
        cmocka_unit_test_setup_teardown(nothing_there, setup, teardown),
        cmocka_unit_test_setup_teardown(device_value, setup, teardown),
        cmocka_unit_test_setup_teardown(driver_hook, setup, teardown),
        cmocka_unit_test_setup_teardown(fake_nvml, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hook, setup, teardown),
        cmocka_unit_test(real_system),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
