/* Pieces every room of api/ works with: clocks, capped buffers, UTF-8 and JSON text, SSE
 * framing, and the error objects of both protocols (the edge answers in the shape of the
 * endpoint asked). */
#include "http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double ebb__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double ebb__unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ebb__abuf_put(struct ebb__abuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        if (b->limit && cap > b->limit + 1) {
            if (b->n + n + 1 > b->limit + 1) {
                b->oom = true;
                return;
            }
            cap = b->limit + 1;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void ebb__abuf_puts(struct ebb__abuf *b, const char *s)
{
    ebb__abuf_put(b, s, strlen(s));
}

void ebb__abuf_printf(struct ebb__abuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(tmp)) {
        ebb__abuf_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    ebb__abuf_put(b, big, (size_t)n);
    free(big);
}

void ebb__abuf_fini(struct ebb__abuf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
    b->oom = false;
}

const char *ebb__error_type(unsigned status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 500:
    case 503:
        return "server_error";
    default:
        return "invalid_request_error";
    }
}

char *ebb__error_json(const char *message, const char *type, const char *param, const char *code)
{
    json_t *e = json_object();
    json_object_set_new(e, "message", json_string(message ? message : ""));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param ? json_string(param) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    if (!json_object_get(e, "message")) /* the message was not valid UTF-8 */
        json_object_set_new(e, "message", json_string("error"));
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *ebb__anthropic_error_json(unsigned status, const char *message)
{
    const char *type;
    switch (status) {
    case 401:
        type = "authentication_error";
        break;
    case 403:
        type = "permission_error";
        break;
    case 404:
        type = "not_found_error";
        break;
    case 413:
        type = "request_too_large";
        break;
    case 429:
        type = "rate_limit_error";
        break;
    case 503:
    case 529:
        type = "overloaded_error";
        break;
    default:
        type = status >= 500 ? "api_error" : "invalid_request_error";
    }
    json_t *e = json_object();
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "message", json_string(message ? message : ""));
    if (!json_object_get(e, "message")) /* the message was not valid UTF-8 */
        json_object_set_new(e, "message", json_string("error"));
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("error"));
    json_object_set_new(o, "error", e);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

bool ebb__anthropic_path(const char *path)
{
    static const char pre[] = "/v1/messages";
    size_t n = sizeof(pre) - 1;
    return !strncmp(path, pre, n) && (path[n] == 0 || path[n] == '/');
}

bool ebb__ollama_path(const char *path)
{
    return !strncmp(path, "/api/", 5);
}

/* Ollama's error object: {"error": message}. */
static char *ollama_error_json(const char *message)
{
    json_t *o = json_object();
    json_object_set_new(o, "error", json_string(message ? message : ""));
    if (!json_object_get(o, "error")) /* the message was not valid UTF-8 */
        json_object_set_new(o, "error", json_string("error"));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *ebb__error_body(const char *path, unsigned status, const char *message, const char *param,
                      const char *code)
{
    if (ebb__anthropic_path(path))
        return ebb__anthropic_error_json(status, message);
    if (ebb__ollama_path(path))
        return ollama_error_json(message);
    return ebb__error_json(message, ebb__error_type(status), param, code);
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if the bytes there are not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (len > n)
        return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

bool ebb__utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = utf8_seq(u + i, n - i);
        if (!l)
            return false;
        i += l;
    }
    return true;
}

void ebb__json_escape(struct ebb__abuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    ebb__abuf_put(b, "\"", 1);
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        ebb__abuf_put(b, s + start, i - start);
        char e[6] = {'\\', 0};
        size_t el = 2;
        switch (c) {
        case '"':
            e[1] = '"';
            break;
        case '\\':
            e[1] = '\\';
            break;
        case '\n':
            e[1] = 'n';
            break;
        case '\r':
            e[1] = 'r';
            break;
        case '\t':
            e[1] = 't';
            break;
        case '\b':
            e[1] = 'b';
            break;
        case '\f':
            e[1] = 'f';
            break;
        default:
            memcpy(e + 1, "u00", 3);
            e[4] = hex[c >> 4];
            e[5] = hex[c & 15];
            el = 6;
        }
        ebb__abuf_put(b, e, el);
        start = i + 1;
    }
    ebb__abuf_put(b, s + start, n - start);
    ebb__abuf_put(b, "\"", 1);
}

json_t *ebb__json_text(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j)
        return j;
    struct ebb__abuf b = {0};
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (l == 0) {
            /* One U+FFFD per maximal invalid subpart: a lead byte and the continuation
             * bytes that followed it before the sequence broke off. */
            size_t want = u[i] >= 0xF0 ? 4 : u[i] >= 0xE0 ? 3 : u[i] >= 0xC2 ? 2 : 1;
            size_t k = 1;
            while (want <= 4 && k < want && i + k < n && (u[i + k] & 0xC0) == 0x80)
                k++;
            if (u[i] > 0xF4)
                k = 1;
            ebb__abuf_put(&b, "\xEF\xBF\xBD", 3);
            i += k;
        } else {
            ebb__abuf_put(&b, s + i, l);
            i += l;
        }
    }
    j = json_stringn(b.p ? b.p : "", b.n);
    ebb__abuf_fini(&b);
    return j;
}

void ebb__sse_event(struct ebb__abuf *b, json_t *obj)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    /* A failed jansson allocation may have left a key out or cut a string (api/http/jsonmem.c). */
    if (!s || ebb__json_alloc_failed(false)) {
        free(s);
        b->oom = true;
        return;
    }
    ebb__abuf_puts(b, "data: ");
    ebb__abuf_puts(b, s);
    ebb__abuf_puts(b, "\n\n");
    free(s);
}
