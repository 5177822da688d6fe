/* Pressure notifications (mempressure.h) on fake /proc + /sys trees: nothing to arm (the reason
 * named), the system-wide PSI triggers where no memory cgroup exists (both levels written, a
 * wait that times out, a stop that ends every later wait), cgroup v2 triggers on the group's
 * memory.pressure, and cgroup v1's eventfd registrations on the group and its limited ancestor
 * (the lines written to cgroup.event_control). The kernel's own notifications are exercised by
 * tests/cli/test-cgroup-load.py in a real group. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stream/mempressure.h"
#include "stream/memprobe.h"

static char root[256];

static void put(const char *rel, const char *text)
{
    char path[512], dir[512];
    snprintf(path, sizeof(path), "%s%s", root, rel);
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

/* The file's bytes up to its first NUL or newline. */
static void get(const char *rel, char *buf, size_t cap)
{
    char path[512];
    snprintf(path, sizeof(path), "%s%s", root, rel);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    buf[strcspn(buf, "\n")] = 0;
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/ebb-mempressure-XXXXXX");
    assert_non_null(mkdtemp(root));
    unsetenv("EBB_TEST_MEMPROBE_FILE");
    put("/proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static struct ebb_memprobe *probes(void)
{
    struct ebb_memprobe_params p = {.root = root};
    struct ebb_memprobe *mp = NULL;
    assert_int_equal(ebb_memprobe_new(&p, &mp, NULL), EBB_OK);
    return mp;
}

static void nothing_to_arm(void **state)
{
    (void)state;
    struct ebb_memprobe *mp = probes();
    struct ebb_mempressure *w = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_mempressure_open(mp, &w, &d), EBB_EUNSUPPORTED);
    assert_null(w);
    assert_non_null(strstr(d.msg, "/proc/pressure/memory"));
    ebb_mempressure_close(NULL);
    ebb_mempressure_stop(NULL);
    ebb_memprobe_free(mp);
}

static void *stopper(void *arg)
{
    usleep(50000);
    ebb_mempressure_stop(arg);
    return NULL;
}

static void system_psi(void **state)
{
    (void)state;
    put("/proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
    struct ebb_memprobe *mp = probes();
    struct ebb_mempressure *w = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_mempressure_open(mp, &w, &d), EBB_OK);
    assert_non_null(strstr(ebb_mempressure_describe(w), "/proc/pressure/memory triggers"));
    char buf[128];
    get("/proc/pressure/memory", buf, sizeof(buf)); /* each trigger is written from offset 0 */
    assert_string_equal(buf, "full 200000 2000000");
    assert_int_equal(ebb_mempressure_wait(w, 10), EBB_MEMPRESSURE_NONE);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stopper, w), 0);
    assert_int_equal(ebb_mempressure_wait(w, 5000), -1); /* woken by the stop */
    pthread_join(t, NULL);
    assert_int_equal(ebb_mempressure_wait(w, 0), -1);
    assert_string_equal(ebb_mempressure_level_name(EBB_MEMPRESSURE_CRITICAL), "critical");
    ebb_mempressure_close(w);
    ebb_memprobe_free(mp);
}

static void cgroup_v2(void **state)
{
    (void)state;
    put("/proc/self/cgroup", "0::/svc/ebb\n");
    put("/proc/self/mountinfo", "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    put("/sys/fs/cgroup/svc/ebb/memory.current", "1048576\n");
    put("/sys/fs/cgroup/svc/ebb/memory.max", "max\n");
    put("/sys/fs/cgroup/svc/ebb/memory.pressure", "");
    struct ebb_memprobe *mp = probes();
    struct ebb_mempressure *w = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_mempressure_open(mp, &w, &d), EBB_OK);
    assert_string_equal(ebb_mempressure_describe(w),
                        "cgroup v2 /svc/ebb memory.pressure triggers some 300ms/2s,full 200ms/2s");
    char buf[128];
    get("/sys/fs/cgroup/svc/ebb/memory.pressure", buf, sizeof(buf));
    assert_string_equal(buf, "full 200000 2000000");
    ebb_mempressure_close(w);
    ebb_memprobe_free(mp);
}

static void cgroup_v1(void **state)
{
    (void)state;
    put("/proc/self/cgroup", "4:memory:/svc/ebb\n0::/\n");
    put("/proc/self/mountinfo",
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
    put("/sys/fs/cgroup/memory/svc/ebb/memory.usage_in_bytes", "1048576\n");
    put("/sys/fs/cgroup/memory/svc/ebb/memory.limit_in_bytes", "9223372036854771712\n");
    put("/sys/fs/cgroup/memory/svc/memory.limit_in_bytes", "419430400\n");
    /* Without the notification files: the reason names them. */
    struct ebb_memprobe *mp = probes();
    struct ebb_mempressure *w = NULL;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_mempressure_open(mp, &w, &d), EBB_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "cgroup v1 memory.pressure_level"));
    const char *groups[] = {"/sys/fs/cgroup/memory/svc/ebb", "/sys/fs/cgroup/memory/svc",
                            "/sys/fs/cgroup/memory"};
    for (int i = 0; i < 3; i++) {
        char rel[128];
        snprintf(rel, sizeof(rel), "%s/memory.pressure_level", groups[i]);
        put(rel, "");
        snprintf(rel, sizeof(rel), "%s/cgroup.event_control", groups[i]);
        put(rel, "");
    }
    assert_int_equal(ebb_mempressure_open(mp, &w, &d), EBB_OK);
    assert_string_equal(ebb_mempressure_describe(w),
                        "cgroup v1 /svc/ebb /svc memory.pressure_level medium,critical");
    char buf[128];
    int efd, lfd;
    char level[16];
    get("/sys/fs/cgroup/memory/svc/cgroup.event_control", buf, sizeof(buf));
    assert_int_equal(sscanf(buf, "%d %d %15s", &efd, &lfd, level), 3);
    assert_string_equal(level, "critical");
    get("/sys/fs/cgroup/memory/cgroup.event_control", buf, sizeof(buf));
    assert_string_equal(buf, ""); /* the mount's root has no limit */
    assert_int_equal(ebb_mempressure_wait(w, 0), EBB_MEMPRESSURE_NONE);
    ebb_mempressure_close(w);
    ebb_memprobe_free(mp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(nothing_to_arm, setup, teardown),
        cmocka_unit_test_setup_teardown(system_psi, setup, teardown),
        cmocka_unit_test_setup_teardown(cgroup_v2, setup, teardown),
        cmocka_unit_test_setup_teardown(cgroup_v1, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
