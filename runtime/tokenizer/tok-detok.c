/* Streaming UTF-8-safe detokenization: pieces go in, only whole characters come out. */
#include "tokenizer.h"

#include <string.h>

void ebb_detok_init(struct ebb_detok *d)
{
    memset(d, 0, sizeof *d);
}

/* Bytes allowed after lead byte c as the first continuation (UTF-8 forbids overlong forms,
 * surrogates and values past U+10FFFF); returns the sequence length, or 0 for an invalid lead. */
static size_t lead_info(uint8_t c, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0)
            *lo = 0xA0;
        else if (c == 0xED)
            *hi = 0x9F;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0)
            *lo = 0x90;
        else if (c == 0xF4)
            *hi = 0x8F;
        return 4;
    }
    return 0;
}

struct sink {
    char *out;
    size_t cap, n;
};

static void put(struct sink *k, const uint8_t *p, size_t n)
{
    if (n > k->cap - k->n)
        return; /* does not fit: dropped (see the contract in tokenizer.h) */
    memcpy(k->out + k->n, p, n);
    k->n += n;
}

static const uint8_t REPL[3] = {0xEF, 0xBF, 0xBD};

size_t ebb_detok_push(struct ebb_detok *d, const char *piece, size_t n, char *out, size_t cap)
{
    struct sink k = {out, cap, 0};
    /* Work over pending bytes followed by the new piece without copying the piece. */
    size_t np = d->n_pending > 3 ? 3 : d->n_pending;
    size_t total = np + n, i = 0;
    uint8_t pend[4];
    memcpy(pend, d->pending, np);
#define AT(j) ((j) < np ? pend[(j)] : (uint8_t)piece[(j)-np])
    d->n_pending = 0;
    while (i < total) {
        uint8_t c = AT(i);
        if (c < 0x80) {
            put(&k, &c, 1);
            i++;
            continue;
        }
        uint8_t lo, hi;
        size_t len = lead_info(c, &lo, &hi);
        if (!len) {
            put(&k, REPL, 3);
            i++;
            continue;
        }
        size_t j = 1;
        bool bad = false;
        while (j < len && i + j < total) {
            uint8_t b = AT(i + j);
            if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xBF)) {
                bad = true;
                break;
            }
            j++;
        }
        if (bad) {
            /* The maximal valid prefix becomes one U+FFFD; the offending byte starts over. */
            put(&k, REPL, 3);
            i += j;
            continue;
        }
        if (j < len) {
            /* Incomplete at the end: hold it for the next piece. */
            for (size_t q = 0; q < j; q++)
                d->pending[q] = AT(i + q);
            d->n_pending = (uint32_t)j;
            break;
        }
        uint8_t ch[4];
        for (size_t q = 0; q < len; q++)
            ch[q] = AT(i + q);
        put(&k, ch, len);
        i += len;
    }
#undef AT
    return k.n;
}

size_t ebb_detok_finish(struct ebb_detok *d, char *out, size_t cap)
{
    size_t w = 0;
    if (d->n_pending && cap >= 3) {
        memcpy(out, REPL, 3);
        w = 3;
    }
    d->n_pending = 0;
    return w;
}
