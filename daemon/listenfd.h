/* Socket activation: listening sockets handed over by systemd (ebb.socket) or launchd-style
 * wrappers through LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES. The sockets are fds 3, 4, ...;
 * libmicrohttpd serves one of them through MHD_OPTION_LISTEN_SOCKET instead of binding its own.
 *
 * Call once, early in start-up, on the main thread (it reads and unsets environment variables,
 * which is not thread-safe). */
#ifndef EBB_DAEMON_LISTENFD_H
#define EBB_DAEMON_LISTENFD_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

#define EBB_LISTENFD_START 3

struct ebb_listenfd {
    int fd;        /* 3, 4, ... */
    int family;    /* AF_INET, AF_INET6 or AF_UNIX */
    char name[64]; /* from LISTEN_FDNAMES (FileDescriptorName=), else "" */
};

/* Takes the passed sockets. With LISTEN_PID equal to our pid and LISTEN_FDS = N > 0, writes the
 * N sockets to out[0..N) and *n = N; otherwise (not socket-activated, or the variables were
 * meant for another process) *n = 0 and EBB_OK. Every passed fd must be a listening stream
 * socket: anything else is EBB_EINVAL with diag naming the fd. More than cap fds is EBB_ERANGE;
 * a malformed LISTEN_FDS is EBB_EINVAL. The fds get FD_CLOEXEC; the caller owns and closes
 * them. LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are always unset, so children do not inherit
 * them. */
ebb_err ebb_listenfd_take(struct ebb_listenfd *out, size_t cap, size_t *n, struct ebb_diag *diag);

/* Writes the local address of socket fd as "127.0.0.1:8077", "[::1]:8077" or "unix:/path" and
 * sets *loopback (may be NULL) when it is bound to a loopback address (127/8, ::1) or is a unix
 * socket: that decides whether the Host-header check for DNS rebinding applies. */
ebb_err ebb_listenfd_describe(int fd, char *buf, size_t n, bool *loopback);

#endif
