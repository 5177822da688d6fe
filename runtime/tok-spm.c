/* SentencePiece-style tokenization ("llama" tokenizers such as Gemma 3's): spaces become U+2581,
 * the text is split into UTF-8 characters, and adjacent symbols are merged greedily, the pair
 * whose merged text is the highest-scoring vocabulary entry first (ties: leftmost). Characters
 * that never form a token fall back to <0xNN> byte tokens. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer-int.h"
#include "unicode.h"

struct sym {
    int32_t prev, next;
    uint32_t start, n; /* bytes of the escaped text */
};

struct bigram {
    float score;
    int32_t left, right;
    uint32_t size;
};

/* Higher score first; for equal scores the leftmost pair. */
static bool bg_before(const struct bigram *a, const struct bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(struct bigram *h, size_t *n, struct bigram x)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_before(&x, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static struct bigram heap_pop(struct bigram *h, size_t *n)
{
    struct bigram top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct bigram *best = &x;
        if (l < *n && bg_before(&h[l], best))
            m = l, best = &h[l];
        if (r < *n && bg_before(&h[r], best))
            m = r;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = x;
    return top;
}

static void add_bigram(const struct ebb_tokenizer *t, const char *text, const struct sym *s,
                       int32_t l, int32_t r, struct bigram *h, size_t *hn)
{
    if (l < 0 || r < 0)
        return;
    uint32_t size = s[l].n + s[r].n;
    int32_t id = ebb__tok_lookup(t, text + s[l].start, size);
    if (id < 0)
        return;
    heap_push(h, hn, (struct bigram){t->scores[id], l, r, size});
}

ebb_err ebb__spm_encode(const struct ebb_tokenizer *t, const char *text, size_t len,
                        bool space_prefix, struct ebb__tok_out *out)
{
    ebb_err rc = EBB_OK;
    /* Escaped text: every space (and the optional prefix) becomes the 3-byte U+2581. */
    size_t cap = 3 * (len + 1);
    char *esc = malloc(cap);
    struct sym *s = malloc(sizeof(struct sym) * cap);
    struct bigram *h = malloc(sizeof(struct bigram) * 3 * cap);
    if (!esc || !s || !h) {
        rc = EBB_ENOMEM;
        goto out;
    }
    size_t n = 0;
    if (space_prefix) {
        memcpy(esc, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            esc[n++] = text[i];
        }
    }
    if (n == 0)
        goto out;

    /* One symbol per UTF-8 character as its lead byte announces it (truncated at the end). */
    size_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = ebb_utf8_len((uint8_t)esc[off]);
        if (cl > n - off)
            cl = n - off;
        s[ns] = (struct sym){(int32_t)ns - 1, off + cl < n ? (int32_t)ns + 1 : -1, (uint32_t)off,
                             (uint32_t)cl};
        ns++;
        off += cl;
    }
    size_t hn = 0;
    for (size_t i = 1; i < ns; i++)
        add_bigram(t, esc, s, (int32_t)i - 1, (int32_t)i, h, &hn);
    while (hn) {
        struct bigram b = heap_pop(h, &hn);
        struct sym *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = b.left;
        add_bigram(t, esc, s, l->prev, b.left, h, &hn);
        add_bigram(t, esc, s, b.left, l->next, h, &hn);
    }
    for (int32_t i = 0; i >= 0; i = s[i].next) {
        int32_t id = ebb__tok_lookup(t, esc + s[i].start, s[i].n);
        if (id >= 0) {
            ebb__tok_push(out, id);
            continue;
        }
        for (uint32_t k = 0; k < s[i].n; k++) {
            int32_t bid = t->byte_tok[(uint8_t)esc[s[i].start + k]];
            if (bid >= 0)
                ebb__tok_push(out, bid);
        }
    }
out:
    free(esc);
    free(s);
    free(h);
    return rc;
}
