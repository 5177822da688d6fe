/* The reasoning splitter (tools.h): <think>...</think> at the start of a model's output as
 * reasoning, the rest as content, decided incrementally. Only a few bytes are ever held back:
 * a partial tag, or the whitespace that may turn out to end the reasoning. */
#include "tools.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char open_tag[] = "<think>";
static const char close_tag[] = "</think>";
#define OPEN_LEN (sizeof(open_tag) - 1)
#define CLOSE_LEN (sizeof(close_tag) - 1)
/* Whitespace held before the answer's first other byte, at most: an output that starts with
 * more is content. */
#define MAX_LEAD 256

enum state {
    ST_START,   /* nothing but whitespace yet: reasoning or content undecided */
    ST_THINK,   /* inside the block */
    ST_AFTER,   /* after </think>: dropping whitespace */
    ST_CONTENT, /* the rest passes through */
};

struct ebb_think_stream {
    enum state st;
    bool seen;    /* the output started with reasoning */
    bool started; /* ST_THINK: some reasoning was reported (leading whitespace is dropped) */
    char *hold;   /* bytes not decided yet */
    size_t n, cap;
};

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

ebb_err ebb_think_stream_new(bool open, struct ebb_think_stream **out)
{
    struct ebb_think_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return EBB_ENOMEM;
    s->st = open ? ST_THINK : ST_START;
    s->seen = open;
    *out = s;
    return EBB_OK;
}

void ebb_think_stream_free(struct ebb_think_stream *s)
{
    if (!s)
        return;
    free(s->hold);
    free(s);
}

bool ebb_think_stream_seen(const struct ebb_think_stream *s)
{
    return s->seen;
}

static ebb_err hold_put(struct ebb_think_stream *s, const char *p, size_t n)
{
    if (n > SIZE_MAX / 2 - s->n)
        return EBB_ENOMEM;
    if (s->n + n > s->cap) {
        size_t c = s->cap ? s->cap : 64;
        while (c < s->n + n)
            c *= 2;
        char *q = realloc(s->hold, c);
        if (!q)
            return EBB_ENOMEM;
        s->hold = q;
        s->cap = c;
    }
    memcpy(s->hold + s->n, p, n);
    s->n += n;
    return EBB_OK;
}

static void hold_drop(struct ebb_think_stream *s, size_t k)
{
    if (!k)
        return; /* also: nothing was ever held, hold is NULL */
    memmove(s->hold, s->hold + k, s->n - k);
    s->n -= k;
}

/* The longest suffix of h[0..n) that is a proper prefix of tag. */
static size_t partial_suffix(const char *h, size_t n, const char *tag, size_t tag_len)
{
    size_t k = n < tag_len - 1 ? n : tag_len - 1;
    for (; k > 0; k--)
        if (!memcmp(h + n - k, tag, k))
            return k;
    return 0;
}

static const char *find(const char *h, size_t n, const char *tag, size_t tag_len)
{
    for (size_t i = 0; i + tag_len <= n; i++)
        if (h[i] == tag[0] && !memcmp(h + i, tag, tag_len))
            return h + i;
    return NULL;
}

/* Reports the reasoning h[0..n) without leading whitespace at its start. */
static ebb_err reason(struct ebb_think_stream *s, const char *h, size_t n, ebb_think_cb cb,
                      void *ud)
{
    if (!s->started)
        while (n && is_ws(*h))
            h++, n--;
    if (!n)
        return EBB_OK;
    s->started = true;
    return cb(ud, true, h, n);
}

/* Reports what the held bytes decide; final: the output ended. */
static ebb_err drain(struct ebb_think_stream *s, bool final, ebb_think_cb cb, void *ud)
{
    ebb_err rc = EBB_OK;
    for (;;) {
        if (s->st == ST_START) {
            size_t p = 0;
            while (p < s->n && is_ws(s->hold[p]))
                p++;
            size_t rest = s->n - p;
            if (rest >= OPEN_LEN && !memcmp(s->hold + p, open_tag, OPEN_LEN)) {
                hold_drop(s, p + OPEN_LEN);
                s->st = ST_THINK;
                s->seen = true;
                continue;
            }
            bool maybe = rest < OPEN_LEN && (!rest || !memcmp(s->hold + p, open_tag, rest));
            if (maybe && !final && p <= MAX_LEAD)
                return EBB_OK;
            s->st = ST_CONTENT;
            continue;
        }
        if (s->st == ST_THINK) {
            const char *c = find(s->hold, s->n, close_tag, CLOSE_LEN);
            if (c) {
                size_t k = (size_t)(c - s->hold), e = k;
                while (e && is_ws(s->hold[e - 1]))
                    e--;
                if ((rc = reason(s, s->hold, e, cb, ud)))
                    return rc;
                hold_drop(s, k + CLOSE_LEN);
                s->st = ST_AFTER;
                continue;
            }
            size_t e = final ? s->n : s->n - partial_suffix(s->hold, s->n, close_tag, CLOSE_LEN);
            while (e && is_ws(s->hold[e - 1]))
                e--;
            /* Whitespace is held only while it may be the reasoning's end; a long run goes. */
            if (!final && s->n - e > MAX_LEAD + CLOSE_LEN)
                e = s->n - CLOSE_LEN;
            if ((rc = reason(s, s->hold, e, cb, ud)))
                return rc;
            hold_drop(s, final ? s->n : e);
            return EBB_OK;
        }
        if (s->st == ST_AFTER) {
            size_t p = 0;
            while (p < s->n && is_ws(s->hold[p]))
                p++;
            hold_drop(s, p);
            if (!s->n)
                return EBB_OK;
            s->st = ST_CONTENT;
            continue;
        }
        if (s->n && (rc = cb(ud, false, s->hold, s->n)))
            return rc;
        s->n = 0;
        return EBB_OK;
    }
}

ebb_err ebb_think_stream_feed(struct ebb_think_stream *s, const char *text, size_t n,
                              ebb_think_cb cb, void *ud)
{
    if (!n)
        return EBB_OK;
    if (s->st == ST_CONTENT && !s->n)
        return cb(ud, false, text, n); /* the common case: no copy */
    ebb_err rc = hold_put(s, text, n);
    return rc ? rc : drain(s, false, cb, ud);
}

ebb_err ebb_think_stream_finish(struct ebb_think_stream *s, ebb_think_cb cb, void *ud)
{
    return drain(s, true, cb, ud);
}

/* ---- the whole output at once ------------------------------------------------------------- */

struct split {
    char *p[2]; /* content, reasoning */
    size_t n[2];
};

static ebb_err collect(void *ud, bool reasoning, const char *text, size_t n)
{
    struct split *sp = ud;
    char *q = realloc(sp->p[reasoning], sp->n[reasoning] + n + 1);
    if (!q)
        return EBB_ENOMEM;
    memcpy(q + sp->n[reasoning], text, n);
    sp->n[reasoning] += n;
    q[sp->n[reasoning]] = 0;
    sp->p[reasoning] = q;
    return EBB_OK;
}

ebb_err ebb_think_split(const char *text, size_t n, bool open, char **reasoning,
                        size_t *reasoning_len, char **content, size_t *content_len)
{
    struct split sp = {{NULL, NULL}, {0, 0}};
    struct ebb_think_stream *s = NULL;
    ebb_err rc = ebb_think_stream_new(open, &s);
    if (!rc)
        rc = ebb_think_stream_feed(s, text, n, collect, &sp);
    if (!rc)
        rc = ebb_think_stream_finish(s, collect, &sp);
    if (!rc && !sp.p[0])
        sp.p[0] = calloc(1, 1);
    if (!rc && !sp.p[0])
        rc = EBB_ENOMEM;
    if (!rc && ebb_think_stream_seen(s) && !sp.p[1])
        sp.p[1] = calloc(1, 1);
    if (!rc && ebb_think_stream_seen(s) && !sp.p[1])
        rc = EBB_ENOMEM;
    ebb_think_stream_free(s);
    if (rc) {
        free(sp.p[0]);
        free(sp.p[1]);
        return rc;
    }
    *content = sp.p[0];
    *content_len = sp.n[0];
    *reasoning = sp.p[1];
    *reasoning_len = sp.n[1];
    return EBB_OK;
}
