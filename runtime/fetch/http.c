/* A small HTTP/1.1 client for downloads: one request per connection, redirects, Range, chunked
 * and length-framed bodies, timeouts on connect and on every read, and TLS through GnuTLS with
 * the system's trust store. It does what pulling a model needs and no more: no keep-alive, no
 * compression (the request asks for none), no proxies. */
#include "fetch-int.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gnutls/gnutls.h>

#define MAX_REDIRECTS 10
#define MAX_HEAD 65536

ebb_err ebb__url_parse(const char *url, struct ebb__url *u, struct ebb_diag *diag)
{
    const char *p;
    if (!strncmp(url, "http://", 7)) {
        u->tls = false;
        u->port = 80;
        p = url + 7;
    } else if (!strncmp(url, "https://", 8)) {
        u->tls = true;
        u->port = 443;
        p = url + 8;
    } else {
        return ebb_diag_set(diag, EBB_EINVAL, "'%s' is not an http:// or https:// URL", url);
    }
    size_t hl = strcspn(p, "/?#");
    const char *rest = p + hl;
    const char *colon = NULL;
    if (*p == '[') { /* [v6]:port */
        const char *close = memchr(p, ']', hl);
        if (!close)
            return ebb_diag_set(diag, EBB_EINVAL, "bad host in URL '%s'", url);
        if (close + 1 < rest && close[1] == ':')
            colon = close + 1;
        size_t n = (size_t)(close - p - 1);
        if (n == 0 || n >= sizeof(u->host))
            return ebb_diag_set(diag, EBB_EINVAL, "bad host in URL '%s'", url);
        memcpy(u->host, p + 1, n);
        u->host[n] = '\0';
    } else {
        colon = memchr(p, ':', hl);
        size_t n = colon ? (size_t)(colon - p) : hl;
        if (n == 0 || n >= sizeof(u->host) || memchr(p, '@', hl))
            return ebb_diag_set(diag, EBB_EINVAL, "bad host in URL '%s'", url);
        memcpy(u->host, p, n);
        u->host[n] = '\0';
    }
    if (colon) {
        char *end;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (end != rest || port == 0 || port > 65535)
            return ebb_diag_set(diag, EBB_EINVAL, "bad port in URL '%s'", url);
        u->port = (unsigned)port;
    }
    size_t pl = strcspn(rest, "#");
    if (pl + 2 > sizeof(u->path))
        return ebb_diag_set(diag, EBB_EINVAL, "URL too long: '%.80s...'", url);
    if (*rest != '/')
        u->path[0] = '/', memcpy(u->path + 1, rest, pl), u->path[pl + 1] = '\0';
    else
        memcpy(u->path, rest, pl), u->path[pl] = '\0';
    for (const char *c = u->path; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f)
            return ebb_diag_set(diag, EBB_EINVAL, "URL has a control character or space: '%s'",
                                url);
    return EBB_OK;
}

/* ---- the connection -------------------------------------------------------------------------- */

static ebb_err dial(const struct ebb__url *u, int timeout_s, int *out, struct ebb_diag *diag)
{
    char port[16];
    snprintf(port, sizeof(port), "%u", u->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int e = getaddrinfo(u->host, port, &hints, &ai);
    if (e)
        return ebb_diag_set(diag, EBB_EIO, "cannot resolve %s: %s", u->host, gai_strerror(e));
    int fd = -1, err = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        fcntl(fd, F_SETFD, FD_CLOEXEC); /* not SOCK_CLOEXEC: macOS has none */
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        if (r && errno == EINPROGRESS) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            r = poll(&pf, 1, timeout_s * 1000);
            if (r == 0) {
                err = ETIMEDOUT;
                r = -1;
            } else if (r > 0) {
                socklen_t sl = sizeof(err);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl);
                r = err ? -1 : 0;
            } else {
                err = errno;
            }
        } else if (r) {
            err = errno;
        }
        if (r) {
            close(fd);
            fd = -1;
            continue;
        }
        fcntl(fd, F_SETFL, fl);
        struct timeval tv = {.tv_sec = timeout_s};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return ebb_diag_set(diag, EBB_EIO, "cannot connect to %s:%u: %s", u->host, u->port,
                            strerror(err ? err : ECONNREFUSED));
    *out = fd;
    return EBB_OK;
}

static ebb_err tls_start(struct ebb__http *h, const struct ebb__url *u, struct ebb_diag *diag)
{
    gnutls_certificate_credentials_t cred = NULL;
    gnutls_session_t s = NULL;
    int r = gnutls_certificate_allocate_credentials(&cred);
    if (r < 0)
        return ebb_diag_set(diag, EBB_ENOMEM, "TLS: %s", gnutls_strerror(r));
    h->cred = cred;
    /* SSL_CERT_FILE, as OpenSSL-based tools read it, replaces the system store (a private CA,
     * or the tests' own). */
    const char *ca = getenv("SSL_CERT_FILE");
    if (ca && *ca)
        r = gnutls_certificate_set_x509_trust_file(cred, ca, GNUTLS_X509_FMT_PEM);
    else
        r = gnutls_certificate_set_x509_system_trust(cred);
    if (r <= 0)
        return ebb_diag_set(diag, EBB_EIO, "TLS: no trusted certificates in %s%s",
                            ca && *ca ? ca : "the system store", r < 0 ? gnutls_strerror(r) : "");
    if ((r = gnutls_init(&s, GNUTLS_CLIENT)) < 0)
        return ebb_diag_set(diag, EBB_ENOMEM, "TLS: %s", gnutls_strerror(r));
    h->tls = s;
    gnutls_server_name_set(s, GNUTLS_NAME_DNS, u->host, strlen(u->host));
    gnutls_set_default_priority(s);
    gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred);
    gnutls_session_set_verify_cert(s, u->host, 0);
    gnutls_transport_set_int(s, h->fd);
    gnutls_handshake_set_timeout(s, (unsigned)h->timeout_s * 1000);
    do {
        r = gnutls_handshake(s);
    } while (r < 0 && !gnutls_error_is_fatal(r) && r != GNUTLS_E_AGAIN);
    if (r < 0) {
        if (r == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR) {
            gnutls_datum_t why = {0};
            unsigned st = gnutls_session_get_verify_cert_status(s);
            gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &why, 0);
            ebb_diag_set(diag, EBB_EINVAL, "TLS: the certificate of %s is not trusted: %s", u->host,
                         why.data ? (char *)why.data : "?");
            gnutls_free(why.data);
            return EBB_EINVAL; /* no retry: it will not change */
        }
        return ebb_diag_set(diag, EBB_EIO, "TLS handshake with %s failed: %s", u->host,
                            gnutls_strerror(r));
    }
    return EBB_OK;
}

void ebb__http_close(struct ebb__http *h)
{
    if (h->tls) {
        gnutls_deinit(h->tls);
        h->tls = NULL;
    }
    if (h->cred) {
        gnutls_certificate_free_credentials(h->cred);
        h->cred = NULL;
    }
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
}

/* Waits until fd is readable: 1 readable, 0 timed out, -2 canceled, -1 error. The wait is cut
 * in quarter seconds so that a cancel (the daemon stopping) is seen soon, not after timeout_s. */
static int wait_readable(struct ebb__http *h)
{
    int left_ms = h->timeout_s * 1000;
    for (;;) {
        if (h->cancel && *h->cancel)
            return -2;
        struct pollfd pf = {.fd = h->fd, .events = POLLIN};
        int slice = left_ms < 250 ? left_ms : 250;
        int pr = poll(&pf, 1, slice);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr != 0)
            return pr > 0 ? 1 : -1;
        if ((left_ms -= slice) <= 0)
            return 0;
    }
}

/* Raw bytes from the connection: > 0 read, 0 closed, -1 error or timeout, -2 canceled. */
static ssize_t raw_read(struct ebb__http *h, void *buf, size_t n)
{
    for (;;) {
        /* GnuTLS answers GNUTLS_E_AGAIN after a post-handshake message (a TLS 1.3 session
         * ticket) too, not only on a timeout: wait on the socket here and call again. */
        if (!h->tls || !gnutls_record_check_pending(h->tls)) {
            int w = wait_readable(h);
            if (w <= 0)
                return w == -2 ? -2 : -1;
        }
        ssize_t r;
        if (h->tls) {
            r = gnutls_record_recv(h->tls, buf, n);
            if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED)
                continue;
            if (r == GNUTLS_E_PREMATURE_TERMINATION)
                return 0;
            return r < 0 ? -1 : r;
        }
        r = read(h->fd, buf, n);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        return r;
    }
}

static ebb_err raw_write(struct ebb__http *h, const char *p, size_t n, struct ebb_diag *diag)
{
    while (n) {
        ssize_t r;
        if (h->tls) {
            r = gnutls_record_send(h->tls, p, n);
            if (r == GNUTLS_E_INTERRUPTED || r == GNUTLS_E_AGAIN)
                continue;
        } else {
            r = write(h->fd, p, n);
            if (r < 0 && errno == EINTR)
                continue;
        }
        if (r <= 0)
            return ebb_diag_set(diag, EBB_EIO, "sending the request failed");
        p += r;
        n -= (size_t)r;
    }
    return EBB_OK;
}

/* Refills the buffer when empty: EBB_OK with h->len > h->pos, or h->eof set. */
static ebb_err fill(struct ebb__http *h, struct ebb_diag *diag)
{
    if (h->pos < h->len || h->eof)
        return EBB_OK;
    ssize_t r = raw_read(h, h->buf, sizeof(h->buf));
    if (r == -2)
        return ebb_diag_set(diag, EBB_ECANCELED, "the pull was stopped");
    if (r < 0)
        return ebb_diag_set(diag, EBB_EIO, "reading from the server failed or timed out (%d s)",
                            h->timeout_s);
    h->pos = 0;
    h->len = (size_t)r;
    if (r == 0)
        h->eof = true;
    return EBB_OK;
}

/* One CRLF- (or LF-) terminated line into line (NUL-terminated, without the ending). */
static ebb_err read_line(struct ebb__http *h, char *line, size_t cap, struct ebb_diag *diag)
{
    size_t n = 0;
    for (;;) {
        ebb_err rc = fill(h, diag);
        if (rc)
            return rc;
        if (h->eof)
            return ebb_diag_set(diag, EBB_EIO, "the server closed the connection mid-response");
        char c = h->buf[h->pos++];
        if (c == '\n')
            break;
        if (n + 1 >= cap)
            return ebb_diag_set(diag, EBB_EFORMAT, "response line too long");
        line[n++] = c;
    }
    if (n && line[n - 1] == '\r')
        n--;
    line[n] = '\0';
    return EBB_OK;
}

static void copy_unquoted(char *dst, size_t cap, const char *v)
{
    if (!strncmp(v, "W/", 2))
        v += 2;
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"')
        v++, n -= 2;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* Reads the status line and headers of one response; location gets a redirect's target. */
static ebb_err read_head(struct ebb__http *h, char *location, size_t loc_cap, struct ebb_diag *diag)
{
    char line[8192];
    size_t total = 0;
    ebb_err rc = read_line(h, line, sizeof(line), diag);
    if (rc)
        return rc;
    int major, minor, status;
    if (sscanf(line, "HTTP/%d.%d %d", &major, &minor, &status) != 3 || status < 100 || status > 999)
        return ebb_diag_set(diag, EBB_EFORMAT, "not an HTTP response: '%.60s'", line);
    h->status = status;
    h->content_length = -1;
    h->chunked = false;
    h->content_range[0] = '\0';
    location[0] = '\0';
    for (;;) {
        if ((rc = read_line(h, line, sizeof(line), diag)))
            return rc;
        total += strlen(line) + 2;
        if (total > MAX_HEAD)
            return ebb_diag_set(diag, EBB_EFORMAT, "response headers over %d bytes", MAX_HEAD);
        if (!line[0])
            break;
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t vl = strlen(v);
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            v[--vl] = '\0';
        if (!strcasecmp(line, "Content-Length")) {
            char *end;
            errno = 0;
            long long n = strtoll(v, &end, 10);
            if (end == v || *end || n < 0 || errno)
                return ebb_diag_set(diag, EBB_EFORMAT, "bad Content-Length '%.40s'", v);
            h->content_length = n;
        } else if (!strcasecmp(line, "Transfer-Encoding")) {
            h->chunked = strcasestr(v, "chunked") != NULL;
        } else if (!strcasecmp(line, "Location")) {
            snprintf(location, loc_cap, "%s", v);
        } else if (!strcasecmp(line, "Content-Range")) {
            snprintf(h->content_range, sizeof(h->content_range), "%s", v);
        } else if (!strcasecmp(line, "X-Linked-Etag") && !h->linked_etag[0]) {
            copy_unquoted(h->linked_etag, sizeof(h->linked_etag), v);
        } else if (!strcasecmp(line, "ETag") && !h->etag[0]) {
            copy_unquoted(h->etag, sizeof(h->etag), v);
        } else if (!strcasecmp(line, "X-Linked-Size") && h->linked_size < 0) {
            char *end;
            long long n = strtoll(v, &end, 10);
            if (end != v && !*end && n >= 0)
                h->linked_size = n;
        }
    }
    if (h->chunked)
        h->content_length = -1;
    return EBB_OK;
}

/* Resolves a Location against the URL it answered into out. */
static ebb_err resolve(const char *base, const char *loc, char *out, size_t cap,
                       struct ebb_diag *diag)
{
    int n;
    if (!strncmp(loc, "http://", 7) || !strncmp(loc, "https://", 8)) {
        n = snprintf(out, cap, "%s", loc);
    } else {
        struct ebb__url b;
        ebb_err rc = ebb__url_parse(base, &b, diag);
        if (rc)
            return rc;
        const char *scheme = b.tls ? "https" : "http";
        bool v6 = strchr(b.host, ':') != NULL;
        if (!strncmp(loc, "//", 2)) {
            n = snprintf(out, cap, "%s:%s", scheme, loc);
        } else if (loc[0] == '/') {
            n = snprintf(out, cap, "%s://%s%s%s:%u%s", scheme, v6 ? "[" : "", b.host, v6 ? "]" : "",
                         b.port, loc);
        } else {
            char *q = strchr(b.path, '?');
            if (q)
                *q = '\0';
            char *slash = strrchr(b.path, '/');
            slash[1] = '\0';
            n = snprintf(out, cap, "%s://%s%s%s:%u%s%s", scheme, v6 ? "[" : "", b.host,
                         v6 ? "]" : "", b.port, b.path, loc);
        }
    }
    if (n < 0 || (size_t)n >= cap)
        return ebb_diag_set(diag, EBB_EFORMAT, "redirect target too long");
    return EBB_OK;
}

static ebb_err one_request(struct ebb__http *h, const struct ebb__url *u, const char *method,
                           const char *token, uint64_t range_from, struct ebb_diag *diag)
{
    ebb_err rc = dial(u, h->timeout_s, &h->fd, diag);
    if (rc)
        return rc;
    if (u->tls && (rc = tls_start(h, u, diag)))
        return rc;
    char range[64] = "";
    if (range_from)
        snprintf(range, sizeof(range), "Range: bytes=%llu-\r\n", (unsigned long long)range_from);
    bool v6 = strchr(u->host, ':') != NULL;
    char port[16] = "";
    if (u->port != (u->tls ? 443u : 80u))
        snprintf(port, sizeof(port), ":%u", u->port);
    size_t cap = strlen(u->path) + (token ? strlen(token) : 0) + 1024;
    char *req = malloc(cap);
    if (!req)
        return EBB_ENOMEM;
    int n =
        snprintf(req, cap,
                 "%s %s HTTP/1.1\r\nHost: %s%s%s%s\r\nUser-Agent: ebb-pull\r\n"
                 "Accept: */*\r\nAccept-Encoding: identity\r\nConnection: close\r\n"
                 "%s%s%s%s\r\n",
                 method, u->path, v6 ? "[" : "", u->host, v6 ? "]" : "", port, range,
                 token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "");
    rc = n > 0 && (size_t)n < cap ? raw_write(h, req, (size_t)n, diag) : EBB_EOVERFLOW;
    free(req);
    return rc;
}

ebb_err ebb__http_open(struct ebb__http *h, const char *url, const struct ebb__http_req *req,
                       struct ebb_diag *diag)
{
    memset(h, 0, sizeof(*h));
    h->fd = -1;
    h->linked_size = -1;
    h->timeout_s = req->timeout_s > 0 ? req->timeout_s : 30;
    h->cancel = req->cancel;
    h->head = !strcmp(req->method, "HEAD");
    ebb_err rc = EBB_OK;
    char first_host[256] = "", location[4096];
    unsigned first_port = 0;
    if (snprintf(h->url, sizeof(h->url), "%s", url) >= (int)sizeof(h->url))
        return ebb_diag_set(diag, EBB_EINVAL, "URL too long");
    for (int hop = 0;; hop++) {
        struct ebb__url u;
        if ((rc = ebb__url_parse(h->url, &u, diag)))
            goto out;
        if (hop == 0) {
            snprintf(first_host, sizeof(first_host), "%s", u.host);
            first_port = u.port;
        }
        /* A token is for the host it was given for, never for a CDN a redirect names. */
        bool same = !strcasecmp(u.host, first_host) && u.port == first_port;
        const char *method = req->method;
        if ((rc = one_request(h, &u, method, same ? req->token : NULL, req->range_from, diag)))
            goto out;
        if ((rc = read_head(h, location, sizeof(location), diag)))
            goto out;
        bool redirect = h->status == 301 || h->status == 302 || h->status == 303 ||
                        h->status == 307 || h->status == 308;
        if (!redirect || !location[0])
            break;
        if (hop == MAX_REDIRECTS) {
            /* EFORMAT, not EIO: a loop is not worth a retry. */
            rc = ebb_diag_set(diag, EBB_EFORMAT, "more than %d redirects from %s", MAX_REDIRECTS,
                              url);
            goto out;
        }
        char next[4096];
        if ((rc = resolve(h->url, location, next, sizeof(next), diag)))
            goto out;
        memcpy(h->url, next, sizeof(next));
        ebb__http_close(h);
        h->pos = h->len = 0;
        h->eof = false;
    }
    if (h->head || h->status == 204 || h->status == 304)
        h->content_length = 0, h->chunked = false;
out:
    if (rc)
        ebb__http_close(h);
    return rc;
}

/* The next chunk's size line (after the CRLF that ends the previous chunk's data). */
static ebb_err next_chunk(struct ebb__http *h, bool first, struct ebb_diag *diag)
{
    char line[256];
    ebb_err rc;
    if (!first && (rc = read_line(h, line, sizeof(line), diag)))
        return rc;
    if ((rc = read_line(h, line, sizeof(line), diag)))
        return rc;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(line, &end, 16);
    if (end == line || errno || (*end && *end != ';' && *end != ' '))
        return ebb_diag_set(diag, EBB_EFORMAT, "bad chunk size line '%.40s'", line);
    h->chunk_left = n;
    if (n == 0) { /* trailers up to an empty line */
        do {
            if ((rc = read_line(h, line, sizeof(line), diag)))
                return rc;
        } while (line[0]);
        h->content_length = 0;
        h->chunked = false;
    }
    return EBB_OK;
}

ebb_err ebb__http_read(struct ebb__http *h, void *buf, size_t cap, size_t *got,
                       struct ebb_diag *diag)
{
    ebb_err rc;
    *got = 0;
    if (h->chunked && h->chunk_left == 0) {
        if ((rc = next_chunk(h, !h->chunk_seen, diag)))
            return rc;
        h->chunk_seen = true;
        if (!h->chunked)
            return EBB_OK;
    }
    if (!h->chunked && h->content_length == 0)
        return EBB_OK;
    if ((rc = fill(h, diag)))
        return rc;
    if (h->eof) {
        if (!h->chunked && h->content_length < 0)
            return EBB_OK; /* framed by the end of the connection */
        return ebb_diag_set(diag, EBB_EIO,
                            "the server closed the connection before the end of "
                            "the body");
    }
    size_t n = h->len - h->pos;
    if (n > cap)
        n = cap;
    if (h->chunked && n > h->chunk_left)
        n = (size_t)h->chunk_left;
    if (!h->chunked && h->content_length > 0 && n > (uint64_t)h->content_length)
        n = (size_t)h->content_length;
    memcpy(buf, h->buf + h->pos, n);
    h->pos += n;
    if (h->chunked)
        h->chunk_left -= n;
    else if (h->content_length > 0)
        h->content_length -= (int64_t)n;
    *got = n;
    return EBB_OK;
}

ebb_err ebb__http_read_all(struct ebb__http *h, size_t max, char **body, size_t *len,
                           struct ebb_diag *diag)
{
    size_t n = 0, cap = 4096;
    char *b = malloc(cap + 1);
    if (!b)
        return EBB_ENOMEM;
    for (;;) {
        if (n == cap) {
            if (cap >= max) {
                free(b);
                return ebb_diag_set(diag, EBB_ERANGE, "response body over %zu bytes", max);
            }
            cap *= 2;
            char *nb = realloc(b, cap + 1);
            if (!nb) {
                free(b);
                return EBB_ENOMEM;
            }
            b = nb;
        }
        size_t got;
        ebb_err rc = ebb__http_read(h, b + n, cap - n, &got, diag);
        if (rc) {
            free(b);
            return rc;
        }
        if (!got)
            break;
        n += got;
    }
    b[n] = '\0';
    *body = b;
    *len = n;
    return EBB_OK;
}
