/* A running daemon asked over HTTP (ask.h). */
#include "daemon/ask.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

void ebb__ask_address(const struct ebb_config *cfg, const char **host, unsigned *port,
                      const char **key)
{
    if (!*host)
        *host = !strcmp(cfg->host, "0.0.0.0") ? "127.0.0.1"
                : !strcmp(cfg->host, "::")    ? "::1"
                                              : cfg->host;
    if (!*port)
        *port = cfg->port;
    if (!*key && cfg->api_keys.n)
        *key = cfg->api_keys.items[0];
}

/* A connected socket to host:port, or -1. */
static int dial(const char *host, unsigned port, unsigned timeout_s)
{
    char ps[16];
    snprintf(ps, sizeof(ps), "%u", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, ps, &hints, &ai))
        return -1;
    int fd = -1;
    for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
        if (fd < 0)
            continue;
        struct timeval tv = {.tv_sec = timeout_s};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (connect(fd, p->ai_addr, p->ai_addrlen)) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

char *ebb__ask(const char *host, unsigned port, const char *method, const char *path,
               const char *key, const char *body, unsigned timeout_s, int *status)
{
    int fd = dial(host, port, timeout_s);
    if (fd < 0)
        return NULL;
    size_t blen = body ? strlen(body) : 0;
    char head[1024];
    int n = snprintf(head, sizeof(head),
                     "%s %s HTTP/1.1\r\nHost: localhost:%u\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n%s%s%s%s\r\n",
                     method, path, port, blen, body ? "Content-Type: application/json\r\n" : "",
                     key ? "Authorization: Bearer " : "", key ? key : "", key ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof(head) || write(fd, head, (size_t)n) != n ||
        (blen && write(fd, body, blen) != (ssize_t)blen)) {
        close(fd);
        return NULL;
    }
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap + 1);
    for (ssize_t k; buf && (k = read(fd, buf + len, cap - len)) > 0;) {
        len += (size_t)k;
        if (len == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    close(fd);
    if (!buf)
        return NULL;
    buf[len] = 0;
    char *at = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", status) != 1 || !at) {
        free(buf);
        return NULL;
    }
    memmove(buf, at + 4, strlen(at + 4) + 1);
    return buf;
}
