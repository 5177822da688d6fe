/* Asking a running `ebb serve` over plain HTTP/1.1, as `ebb ps` and `ebb rm` do: one request
 * on a fresh connection, the answer read whole. */
#ifndef EBB_DAEMON_ASK_H
#define EBB_DAEMON_ASK_H

#include "daemon/config.h"

/* Where the configured daemon answers: host (a wildcard bind address of 0.0.0.0 or :: is asked
 * on the loopback one), port and the first API key (NULL: none), each unless the caller set it
 * already (a non-NULL *host or *key, a non-zero *port). The strings stay cfg's. */
void ebb__ask_address(const struct ebb_config *cfg, const char **host, unsigned *port,
                      const char **key);

/* Sends method path (body: a JSON text, or NULL for none) with the bearer key (NULL: none) to
 * host:port and returns the answer's body (malloc'd, NUL-terminated) with *status its HTTP
 * status. NULL when nothing answered (nothing listens, a timeout of timeout_s seconds, or not
 * HTTP). */
char *ebb__ask(const char *host, unsigned port, const char *method, const char *path,
               const char *key, const char *body, unsigned timeout_s, int *status);

#endif
