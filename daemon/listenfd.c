/* LISTEN_FDS protocol; see listenfd.h. */
#include "listenfd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static void unset_all(void)
{
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
}

/* Parses a whole decimal number without sign; false on anything else or overflow. */
static bool parse_long(const char *s, long *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

/* Checks that fd is a listening stream socket and records its family. */
static ebb_err check_fd(int fd, struct ebb_listenfd *l, struct ebb_diag *diag)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ebb_diag_set(diag, EBB_EINVAL, "LISTEN_FDS: fd %d is not open", fd);
    if (!S_ISSOCK(st.st_mode))
        return ebb_diag_set(diag, EBB_EINVAL, "LISTEN_FDS: fd %d is not a socket", fd);
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
        return ebb_diag_set(diag, EBB_EINVAL,
                            "LISTEN_FDS: fd %d is not a stream socket (ListenStream= in the "
                            ".socket unit)",
                            fd);
#ifdef SO_ACCEPTCONN
    int acc = 0;
    len = sizeof(acc);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) != 0 || !acc)
        return ebb_diag_set(diag, EBB_EINVAL, "LISTEN_FDS: fd %d is not listening", fd);
#endif
    struct sockaddr_storage ss;
    len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return ebb_diag_set(diag, EBB_EINVAL, "LISTEN_FDS: fd %d: getsockname: %s", fd,
                            strerror(errno));
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0)
        fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    l->fd = fd;
    l->family = ss.ss_family;
    l->name[0] = '\0';
    return EBB_OK;
}

ebb_err ebb_listenfd_take(struct ebb_listenfd *out, size_t cap, size_t *n, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    long pid, count;
    size_t got = 0;
    const char *spid = getenv("LISTEN_PID");
    const char *sfds = getenv("LISTEN_FDS");
    const char *names = getenv("LISTEN_FDNAMES");

    if (!spid || !sfds)
        goto out;
    if (!parse_long(spid, &pid) || pid != (long)getpid())
        goto out; /* meant for another process: not ours to use */
    if (!parse_long(sfds, &count) || count > 4096) {
        rc = ebb_diag_set(diag, EBB_EINVAL, "LISTEN_FDS: '%s' is not a count of sockets", sfds);
        goto out;
    }
    if ((size_t)count > cap) {
        rc = ebb_diag_set(diag, EBB_ERANGE, "LISTEN_FDS: %ld sockets passed, at most %zu used",
                          count, cap);
        goto out;
    }
    for (long i = 0; i < count; i++) {
        rc = check_fd(EBB_LISTENFD_START + (int)i, &out[i], diag);
        if (rc)
            goto out;
    }
    /* FileDescriptorName= values, colon-separated in fd order; a list of the wrong length is
     * ignored rather than mis-assigned. */
    if (names) {
        size_t parts = 1;
        for (const char *p = names; *p; p++)
            parts += *p == ':';
        if (parts == (size_t)count) {
            const char *p = names;
            for (long i = 0; i < count; i++) {
                size_t len = strcspn(p, ":");
                snprintf(out[i].name, sizeof(out[i].name), "%.*s", (int)len, p);
                p += len + (p[len] == ':');
            }
        }
    }
    got = (size_t)count;
out:
    unset_all();
    if (!rc)
        *n = got;
    return rc;
}

ebb_err ebb_listenfd_describe(int fd, char *buf, size_t n, bool *loopback)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return EBB_EINVAL;
    char host[INET6_ADDRSTRLEN];
    bool lo = false;
    int k;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        lo = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
        k = snprintf(buf, n, "%s:%u", host, (unsigned)ntohs(a->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        lo = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr);
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
            lo = a->sin6_addr.s6_addr[12] == 127;
        k = snprintf(buf, n, "[%s]:%u", host, (unsigned)ntohs(a->sin6_port));
    } else if (ss.ss_family == AF_UNIX) {
        const struct sockaddr_un *a = (const struct sockaddr_un *)&ss;
        lo = true;
        size_t plen = len > offsetof(struct sockaddr_un, sun_path)
                          ? len - offsetof(struct sockaddr_un, sun_path)
                          : 0;
        if (plen > 0 && a->sun_path[0] == '\0') /* abstract */
            k = snprintf(buf, n, "unix:@%.*s", (int)(plen - 1), a->sun_path + 1);
        else
            k = snprintf(buf, n, "unix:%.*s", (int)strnlen(a->sun_path, plen), a->sun_path);
    } else {
        k = snprintf(buf, n, "family %d", (int)ss.ss_family);
    }
    if (loopback)
        *loopback = lo;
    return k < 0 || (size_t)k >= n ? EBB_ERANGE : EBB_OK;
}
