/* Strict request framing (RFC 9112 sections 3.2, 6.1 and 6.3), checked on the complete request
 * head before a byte of the body is read.
 *
 * libmicrohttpd 0.9.75 (the packaged one) is lenient: it reads a body with both Content-Length
 * and Transfer-Encoding: chunked as chunked and keeps the connection, so whatever follows the
 * chunks is served as a second request (request smuggling behind a proxy that framed by the
 * length); it takes the first of two Host or Content-Length headers; it waits for a body it
 * cannot frame when the transfer coding is not chunked. Its one strict switch
 * (MHD_OPTION_STRICT_FOR_CLIENT) only adds the missing-Host check, and MHD_OPTION_CLIENT_
 * DISCIPLINE_LVL arrived in 0.9.77. So every case is checked here, from the header list MHD
 * keeps (a repeated header is a separate entry), and the caller answers with the connection
 * closed. */
#include "http-int.h"

#include <string.h>
#include <strings.h>

struct head_count {
    unsigned host, content_length, transfer_encoding;
    bool bad_length;    /* a Content-Length that is not 1*DIGIT */
    bool other_coding;  /* a transfer coding other than a single chunked */
    bool chunked_twice; /* chunked named twice */
};

/* True if s (trimmed of spaces and tabs) is exactly "chunked", any case. */
static bool is_chunked(const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    return n == 7 && !strncasecmp(s, "chunked", 7);
}

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    (void)kind;
    struct head_count *h = cls;
    if (!key)
        return MHD_YES;
    if (!strcasecmp(key, "Host")) {
        h->host++;
    } else if (!strcasecmp(key, "Content-Length")) {
        h->content_length++;
        const char *v = value ? value : "";
        h->bad_length |= !*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 18;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        /* Each comma-separated coding; only one chunked, alone, is one this server decodes. */
        const char *v = value ? value : "";
        do {
            const char *comma = strchr(v, ',');
            size_t n = comma ? (size_t)(comma - v) : strlen(v);
            if (!is_chunked(v, n))
                h->other_coding = true;
            else if (h->transfer_encoding++)
                h->chunked_twice = true;
            v = comma ? comma + 1 : NULL;
        } while (v);
    }
    return MHD_YES;
}

unsigned ebb__framing_check(struct MHD_Connection *mc, const char *version, const char **why)
{
    struct head_count h = {0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, count_header, &h);
    bool http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
    bool te = h.transfer_encoding || h.other_coding;
    if (h.host > 1)
        *why = "more than one Host header";
    else if (!h.host && http11)
        *why = "an HTTP/1.1 request without a Host header";
    else if (h.content_length > 1)
        *why = "more than one Content-Length header";
    else if (h.bad_length)
        *why = "a Content-Length that is not a decimal number";
    else if (te && h.content_length)
        *why = "both Content-Length and Transfer-Encoding";
    else if (te && !http11)
        *why = "Transfer-Encoding on a request older than HTTP/1.1";
    else if (h.chunked_twice)
        *why = "chunked applied twice";
    else if (h.other_coding) {
        *why = "a transfer coding other than chunked (only chunked is implemented)";
        return 501;
    } else
        return 0;
    return 400;
}
