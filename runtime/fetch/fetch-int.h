/* runtime/fetch's private parts: the HTTP/1.1 client pull.c and hub.c speak through. One
 * request per connection (Connection: close), redirects followed, bodies framed by
 * Content-Length, chunked encoding or the end of the connection, TLS through GnuTLS. */
#ifndef EBB_FETCH_FETCH_INT_H
#define EBB_FETCH_FETCH_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* A parsed http:// or https:// URL. */
struct ebb__url {
    bool tls;
    char host[256];
    unsigned port;
    char path[4096]; /* starts with '/', query included */
};

/* Parses url into u. EBB_EINVAL (with a message naming the URL) for anything else. */
ebb_err ebb__url_parse(const char *url, struct ebb__url *u, struct ebb_diag *diag);

/* What a request sends besides the method and URL. */
struct ebb__http_req {
    const char *method;   /* "GET" or "HEAD" */
    const char *token;    /* Authorization: Bearer token, NULL = none; dropped off-host */
    uint64_t range_from;  /* > 0: Range: bytes=range_from- */
    int timeout_s;        /* connect and per-read timeout, seconds */
    volatile int *cancel; /* non-NULL and set: reads end with EBB_ECANCELED within 250 ms */
};

/* The response an open request reached after its redirects, and what the hub said on the way. */
struct ebb__http {
    int status;
    int64_t content_length; /* -1: not sent */
    bool chunked;
    bool head;
    char url[4096];          /* the final URL */
    char content_range[128]; /* the final response's Content-Range, "" if none */
    char linked_etag[160];   /* X-Linked-Etag of the first response that had one, unquoted */
    char etag[160];          /* ETag of the first response that had one, unquoted */
    int64_t linked_size;     /* X-Linked-Size of the first response that had one, -1 none */
    /* private */
    int fd;
    void *tls; /* gnutls_session_t */
    void *cred;
    int timeout_s;
    volatile int *cancel;
    char buf[16384];
    size_t pos, len;
    uint64_t chunk_left;
    bool chunk_seen;
    bool eof;
};

/* Sends req to url, follows up to 10 redirects (301, 302, 303, 307, 308; a relative Location is
 * resolved against the URL it came from; the token is not sent to another host) and reads the
 * final response's head into h. Any status is returned through h->status (not an error); the
 * failures are connecting, TLS (EBB_EINVAL for a certificate not trusted: the system trust
 * store, or the file SSL_CERT_FILE names, and the host name are checked), malformed responses
 * and too many redirects.
 * On success the body is read with ebb__http_read and h closed with ebb__http_close. */
ebb_err ebb__http_open(struct ebb__http *h, const char *url, const struct ebb__http_req *req,
                       struct ebb_diag *diag);

/* Reads up to cap body bytes into buf; *got = 0 at the body's end. EBB_EIO when the connection
 * ends or times out before the body does. */
ebb_err ebb__http_read(struct ebb__http *h, void *buf, size_t cap, size_t *got,
                       struct ebb_diag *diag);

/* Reads the whole body (at most max bytes) into a malloc'd NUL-terminated string. */
ebb_err ebb__http_read_all(struct ebb__http *h, size_t max, char **body, size_t *len,
                           struct ebb_diag *diag);

/* Closes the connection; accepts a never-opened or already closed h (fd < 0). */
void ebb__http_close(struct ebb__http *h);

#include "fetch.h"

/* Downloads url into dir/name through dir/name.part (resumed when there), verified against the
 * sha256 the hub reports, renamed into place at the end (download.c). */
ebb_err ebb__pull_file(const char *url, const char *dir, const char *name, int part, int n_parts,
                       const struct ebb_pull_opts *o, struct ebb_diag *diag);
#endif
