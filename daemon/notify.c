/* sd_notify without libsystemd; see notify.h. */
#include "notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

bool ebb_notify_enabled(void)
{
    const char *e = getenv("NOTIFY_SOCKET");
    return e && *e;
}

ebb_err ebb_notify_send(const char *state)
{
    const char *e = getenv("NOTIFY_SOCKET");
    if (!e || !*e)
        return EBB_OK;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    size_t n = strlen(e);
    if ((e[0] != '/' && e[0] != '@') || n < 2 || n >= sizeof(sa.sun_path))
        return EBB_EINVAL;
    memcpy(sa.sun_path, e, n);
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    if (e[0] == '@')
        sa.sun_path[0] = '\0'; /* Linux abstract namespace: the length delimits the name */
    else
        salen++; /* include the terminating NUL of a path */

#ifdef SOCK_CLOEXEC
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
#else
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
#endif
    if (fd < 0)
        return EBB_EIO;
    ssize_t w;
    do {
        w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&sa, salen);
    } while (w < 0 && errno == EINTR);
    close(fd);
    return w == (ssize_t)strlen(state) ? EBB_OK : EBB_EIO;
}

/* Appends "STATUS=<text>" to buf with newlines flattened, so the text cannot add fields. */
static void put_status(char *buf, size_t cap, const char *text)
{
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "STATUS=%s", text);
    for (char *p = buf + len; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

ebb_err ebb_notify_ready(const char *status)
{
    if (!ebb_notify_enabled())
        return EBB_OK;
    char buf[512];
    snprintf(buf, sizeof(buf), "READY=1\n");
    put_status(buf, sizeof(buf), status ? status : "serving");
    return ebb_notify_send(buf);
}

ebb_err ebb_notify_status(const char *fmt, ...)
{
    if (!ebb_notify_enabled())
        return EBB_OK;
    char text[400], buf[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    put_status(buf, sizeof(buf), text);
    return ebb_notify_send(buf);
}

ebb_err ebb_notify_reloading(void)
{
    if (!ebb_notify_enabled())
        return EBB_OK;
    /* systemd >= 253 (Type=notify-reload) wants the CLOCK_MONOTONIC time of the reload start;
     * older versions ignore the extra field. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char buf[128];
    snprintf(buf, sizeof(buf), "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading configuration",
             (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000u);
    return ebb_notify_send(buf);
}

ebb_err ebb_notify_stopping(void)
{
    return ebb_notify_send("STOPPING=1\nSTATUS=shutting down");
}

ebb_err ebb_notify_watchdog(void)
{
    return ebb_notify_send("WATCHDOG=1");
}

static bool parse_ull(const char *s, unsigned long long *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || s[0] == '-' || s[0] == '+')
        return false;
    *out = v;
    return true;
}

uint64_t ebb_notify_watchdog_usec(void)
{
    unsigned long long usec, pid;
    if (!parse_ull(getenv("WATCHDOG_USEC"), &usec) || usec == 0)
        return 0;
    const char *p = getenv("WATCHDOG_PID");
    if (p && *p && (!parse_ull(p, &pid) || pid != (unsigned long long)getpid()))
        return 0;
    return usec;
}
