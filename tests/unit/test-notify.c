/* sd_notify protocol: a real AF_UNIX datagram socket stands in for systemd, bound to a path or
 * to an abstract name, and receives what the daemon sends (with the sender's credentials). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/notify.h"

struct listener {
    int fd;
    char path[108];
};

/* Binds a datagram socket: to a file under /tmp, or to an abstract name when abstract is set,
 * and points NOTIFY_SOCKET at it the way systemd would write it. */
static void listener_open(struct listener *l, bool abstract)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    l->fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    assert_true(l->fd >= 0);
    socklen_t len;
    if (abstract) {
        snprintf(l->path, sizeof(l->path), "@ebb-test-notify-%ld", (long)getpid());
        memcpy(sa.sun_path, l->path, strlen(l->path));
        sa.sun_path[0] = '\0';
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(l->path));
    } else {
        snprintf(l->path, sizeof(l->path), "/tmp/ebb-test-notify-%ld.sock", (long)getpid());
        unlink(l->path);
        memcpy(sa.sun_path, l->path, strlen(l->path) + 1);
        len = sizeof(sa);
    }
    assert_int_equal(bind(l->fd, (struct sockaddr *)&sa, len), 0);
#ifdef SO_PASSCRED
    int one = 1;
    assert_int_equal(setsockopt(l->fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
#endif
    setenv("NOTIFY_SOCKET", l->path, 1);
}

static void listener_close(struct listener *l)
{
    close(l->fd);
    if (l->path[0] == '/')
        unlink(l->path);
    unsetenv("NOTIFY_SOCKET");
}

/* Receives one datagram (waiting at most a second) into buf; checks the sender is us. */
static void recv_msg(struct listener *l, char *buf, size_t n)
{
    struct pollfd p = {.fd = l->fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 1000), 1);
    struct iovec iov = {.iov_base = buf, .iov_len = n - 1};
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(64)];
    } ctl;
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl)};
    ssize_t r = recvmsg(l->fd, &mh, 0);
    assert_true(r >= 0);
    buf[r] = '\0';
#ifdef SCM_CREDENTIALS
    bool saw_creds = false;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
            struct ucred uc;
            memcpy(&uc, CMSG_DATA(c), sizeof(uc));
            assert_int_equal(uc.pid, getpid());
            saw_creds = true;
        }
    }
    assert_true(saw_creds);
#endif
}

/* True if nothing more is waiting on the socket. */
static bool nothing_pending(struct listener *l)
{
    struct pollfd p = {.fd = l->fd, .events = POLLIN};
    return poll(&p, 1, 50) == 0;
}

static void lifecycle(bool abstract)
{
    struct listener l;
    char buf[1024];
    listener_open(&l, abstract);
    assert_true(ebb_notify_enabled());

    assert_int_equal(ebb_notify_status("loading %s: %d%%", "model.gguf", 42), EBB_OK);
    recv_msg(&l, buf, sizeof(buf));
    assert_string_equal(buf, "STATUS=loading model.gguf: 42%");

    assert_int_equal(ebb_notify_ready("serving on 127.0.0.1:8077"), EBB_OK);
    recv_msg(&l, buf, sizeof(buf));
    assert_string_equal(buf, "READY=1\nSTATUS=serving on 127.0.0.1:8077");

    assert_int_equal(ebb_notify_watchdog(), EBB_OK);
    recv_msg(&l, buf, sizeof(buf));
    assert_string_equal(buf, "WATCHDOG=1");

    assert_int_equal(ebb_notify_reloading(), EBB_OK);
    recv_msg(&l, buf, sizeof(buf));
    unsigned long long usec = 0;
    assert_int_equal(sscanf(buf, "RELOADING=1\nMONOTONIC_USEC=%llu\n", &usec), 1);
    assert_true(usec > 0);

    /* A status text cannot smuggle in extra fields. */
    assert_int_equal(ebb_notify_status("a\nREADY=1"), EBB_OK);
    recv_msg(&l, buf, sizeof(buf));
    assert_string_equal(buf, "STATUS=a READY=1");

    assert_int_equal(ebb_notify_stopping(), EBB_OK);
    recv_msg(&l, buf, sizeof(buf));
    assert_string_equal(buf, "STOPPING=1\nSTATUS=shutting down");
    assert_true(nothing_pending(&l));
    listener_close(&l);
}

static void test_path_socket(void **state)
{
    (void)state;
    lifecycle(false);
}

static void test_abstract_socket(void **state)
{
    (void)state;
#ifdef __linux__
    lifecycle(true);
#else
    skip();
#endif
}

static void test_disabled_and_bad(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    assert_false(ebb_notify_enabled());
    assert_int_equal(ebb_notify_ready(NULL), EBB_OK);
    assert_int_equal(ebb_notify_status("x"), EBB_OK);
    assert_int_equal(ebb_notify_watchdog(), EBB_OK);
    assert_int_equal(ebb_notify_stopping(), EBB_OK);

    setenv("NOTIFY_SOCKET", "relative/path", 1);
    assert_int_equal(ebb_notify_send("READY=1"), EBB_EINVAL);
    /* Nobody listening at that path: the send fails, and says so. */
    setenv("NOTIFY_SOCKET", "/tmp/ebb-test-notify-nobody-here.sock", 1);
    assert_int_equal(ebb_notify_send("READY=1"), EBB_EIO);
    unsetenv("NOTIFY_SOCKET");
}

static void test_watchdog_interval(void **state)
{
    (void)state;
    char pid[32];
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    assert_int_equal(ebb_notify_watchdog_usec(), 0);
    setenv("WATCHDOG_USEC", "30000000", 1);
    assert_int_equal(ebb_notify_watchdog_usec(), 30000000);
    snprintf(pid, sizeof(pid), "%ld", (long)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    assert_int_equal(ebb_notify_watchdog_usec(), 30000000);
    snprintf(pid, sizeof(pid), "%ld", (long)getpid() + 1);
    setenv("WATCHDOG_PID", pid, 1);
    assert_int_equal(ebb_notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_PID");
    setenv("WATCHDOG_USEC", "soon", 1);
    assert_int_equal(ebb_notify_watchdog_usec(), 0);
    setenv("WATCHDOG_USEC", "0", 1);
    assert_int_equal(ebb_notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_USEC");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_socket),
        cmocka_unit_test(test_abstract_socket),
        cmocka_unit_test(test_disabled_and_bad),
        cmocka_unit_test(test_watchdog_interval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
