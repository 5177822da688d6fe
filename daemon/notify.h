/* The systemd service notification protocol (sd_notify), implemented directly: each call sends
 * one datagram to the AF_UNIX socket named by $NOTIFY_SOCKET (a path, or "@name" for an abstract
 * socket). Without NOTIFY_SOCKET every call is a no-op that returns EBB_OK, so the daemon calls
 * these unconditionally; it behaves the same under launchd, a terminal or Type=simple.
 *
 * All functions are thread-safe (no shared state: each call opens, sends and closes its own
 * socket) and never block for long (datagram send to a local socket). */
#ifndef EBB_DAEMON_NOTIFY_H
#define EBB_DAEMON_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

/* True when NOTIFY_SOCKET is set, i.e. systemd (or a test) is listening. */
bool ebb_notify_enabled(void);

/* Sends state as is ("READY=1\nSTATUS=serving"). EBB_OK also when disabled; EBB_EINVAL when
 * NOTIFY_SOCKET is neither an absolute path nor "@name" or too long; EBB_EIO when the send
 * fails (systemd gone); callers log that at debug level and carry on. */
ebb_err ebb_notify_send(const char *state);

/* "READY=1" plus a STATUS line (status NULL: "serving"). Send it once the model is loaded and the
 * listening socket accepts (/health would answer 200), and again after a reload. */
ebb_err ebb_notify_ready(const char *status);

/* "STATUS=<text>" shown by `systemctl status`; printf-style. Newlines are replaced by blanks. */
ebb_err ebb_notify_status(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* "RELOADING=1" with MONOTONIC_USEC, at the start of a SIGHUP reload; follow it with
 * ebb_notify_ready when the reload is done (also when it failed and the old config stays). */
ebb_err ebb_notify_reloading(void);

/* "STOPPING=1" once shutdown begins (first SIGTERM/SIGINT). */
ebb_err ebb_notify_stopping(void);

/* "WATCHDOG=1": a keep-alive ping. */
ebb_err ebb_notify_watchdog(void);

/* The watchdog interval systemd expects pings within (WatchdogSec=), in microseconds, or 0 when
 * no watchdog applies to this process (WATCHDOG_USEC unset or bad, or WATCHDOG_PID names
 * another process). Ping at half this interval. */
uint64_t ebb_notify_watchdog_usec(void);

#endif
