/* Socket activation: real sockets are placed at fds 3 and 4 the way systemd passes them, with
 * LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES set, and the taken fd must accept a real connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/listenfd.h"

/* Opens a TCP socket on 127.0.0.1 (or ::1) with an ephemeral port and moves it to fd target.
 * listening=false leaves it bound but not listening. */
static void tcp_at(int target, int family, int type, bool listening)
{
    int fd = socket(family, type, 0);
    assert_true(fd >= 0);
    if (family == AF_INET) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    } else {
        struct sockaddr_in6 a = {.sin6_family = AF_INET6};
        a.sin6_addr = in6addr_loopback;
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
            close(fd);
            skip(); /* no IPv6 loopback in this sandbox */
        }
    }
    if (listening)
        assert_int_equal(listen(fd, 8), 0);
    if (fd != target) {
        assert_int_equal(dup2(fd, target), target);
        close(fd);
    }
}

static void set_env(long pid, const char *fds, const char *names)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%ld", pid);
    setenv("LISTEN_PID", buf, 1);
    setenv("LISTEN_FDS", fds, 1);
    if (names)
        setenv("LISTEN_FDNAMES", names, 1);
    else
        unsetenv("LISTEN_FDNAMES");
}

static void assert_env_cleared(void)
{
    assert_null(getenv("LISTEN_PID"));
    assert_null(getenv("LISTEN_FDS"));
    assert_null(getenv("LISTEN_FDNAMES"));
}

static void test_not_activated(void **state)
{
    (void)state;
    struct ebb_listenfd l[2];
    size_t n = 99;
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    assert_int_equal(ebb_listenfd_take(l, 2, &n, NULL), EBB_OK);
    assert_int_equal(n, 0);

    /* Variables meant for another process (our parent) are not ours, but are still cleared. */
    set_env((long)getpid() + 1, "1", "x");
    n = 99;
    assert_int_equal(ebb_listenfd_take(l, 2, &n, NULL), EBB_OK);
    assert_int_equal(n, 0);
    assert_env_cleared();
}

static void test_two_sockets_served(void **state)
{
    (void)state;
    tcp_at(3, AF_INET, SOCK_STREAM, true);
    tcp_at(4, AF_INET, SOCK_STREAM, true);
    set_env((long)getpid(), "2", "http:admin");
    struct ebb_listenfd l[4];
    size_t n = 0;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_listenfd_take(l, 4, &n, &d), EBB_OK);
    assert_int_equal(n, 2);
    assert_env_cleared();
    assert_int_equal(l[0].fd, 3);
    assert_int_equal(l[1].fd, 4);
    assert_int_equal(l[0].family, AF_INET);
    assert_string_equal(l[0].name, "http");
    assert_string_equal(l[1].name, "admin");
    assert_true(fcntl(3, F_GETFD) & FD_CLOEXEC);

    /* The fd really serves: connect to the address it describes and accept. */
    char addr[64];
    bool lo = false;
    assert_int_equal(ebb_listenfd_describe(3, addr, sizeof(addr), &lo), EBB_OK);
    assert_true(lo);
    assert_memory_equal(addr, "127.0.0.1:", 10);
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    assert_int_equal(getsockname(3, (struct sockaddr *)&sa, &sl), 0);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(c, (struct sockaddr *)&sa, sl), 0);
    int a = accept(3, NULL, NULL);
    assert_true(a >= 0);
    assert_int_equal(write(c, "ping", 4), 4);
    char buf[8] = {0};
    assert_int_equal(read(a, buf, sizeof(buf)), 4);
    assert_string_equal(buf, "ping");
    close(a);
    close(c);
    assert_int_equal(ebb_listenfd_describe(3, addr, 5, NULL), EBB_ERANGE);
    close(3);
    close(4);
}

static void test_names_mismatch_ignored(void **state)
{
    (void)state;
    tcp_at(3, AF_INET, SOCK_STREAM, true);
    set_env((long)getpid(), "1", "a:b");
    struct ebb_listenfd l[1];
    size_t n = 0;
    assert_int_equal(ebb_listenfd_take(l, 1, &n, NULL), EBB_OK);
    assert_int_equal(n, 1);
    assert_string_equal(l[0].name, "");
    close(3);
}

static void expect_bad(const char *fds, ebb_err want, const char *msg)
{
    set_env((long)getpid(), fds, NULL);
    struct ebb_listenfd l[2];
    size_t n = 77;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_listenfd_take(l, 2, &n, &d);
    if (rc != want || !strstr(d.msg, msg))
        fail_msg("got %s \"%s\", want %s with \"%s\"", ebb_err_name(rc), d.msg, ebb_err_name(want),
                 msg);
    assert_int_equal(n, 77); /* out-parameters untouched on failure */
    assert_env_cleared();
}

static void test_rejects_wrong_fds(void **state)
{
    (void)state;
    tcp_at(3, AF_INET, SOCK_STREAM, false);
    expect_bad("1", EBB_EINVAL, "fd 3 is not listening");
    close(3);
    tcp_at(3, AF_INET, SOCK_DGRAM, false);
    expect_bad("1", EBB_EINVAL, "fd 3 is not a stream socket");
    close(3);
    int f = open("/dev/null", O_RDONLY);
    if (f != 3) {
        assert_int_equal(dup2(f, 3), 3);
        close(f);
    }
    expect_bad("1", EBB_EINVAL, "fd 3 is not a socket");
    close(3);
    expect_bad("1", EBB_EINVAL, "fd 3 is not open");
    expect_bad("two", EBB_EINVAL, "LISTEN_FDS: 'two'");
    expect_bad("-1", EBB_EINVAL, "LISTEN_FDS: '-1'");
    expect_bad("3", EBB_ERANGE, "3 sockets passed, at most 2");
}

static void test_describe_ipv6_and_unix(void **state)
{
    (void)state;
    char addr[128];
    bool lo = false;
    int u = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/ebb-test-listenfd-%ld.sock", (long)getpid());
    unlink(sa.sun_path);
    assert_int_equal(bind(u, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(ebb_listenfd_describe(u, addr, sizeof(addr), &lo), EBB_OK);
    assert_true(lo);
    assert_memory_equal(addr, "unix:/tmp/ebb-test-listenfd-", 28);
    close(u);
    unlink(sa.sun_path);

    tcp_at(3, AF_INET6, SOCK_STREAM, true);
    lo = false;
    assert_int_equal(ebb_listenfd_describe(3, addr, sizeof(addr), &lo), EBB_OK);
    assert_true(lo);
    assert_memory_equal(addr, "[::1]:", 6);
    close(3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_activated),          cmocka_unit_test(test_two_sockets_served),
        cmocka_unit_test(test_names_mismatch_ignored), cmocka_unit_test(test_rejects_wrong_fds),
        cmocka_unit_test(test_describe_ipv6_and_unix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
