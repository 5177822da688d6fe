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

EBB__HEAP_DEFINE(heap, struct bigram, bg_before)

/* A growable binary heap; a failed growth sets oom and drops the pair. */
struct heap {
    struct bigram *h;
    size_t n, cap;
    bool oom;
};

static void heap_push(struct heap *hp, struct bigram x)
{
    if (hp->n == hp->cap) {
        size_t ncap = hp->cap ? hp->cap * 2 : 64;
        struct bigram *nh = realloc(hp->h, ncap * sizeof *nh);
        if (!nh) {
            hp->oom = true;
            return;
        }
        hp->h = nh;
        hp->cap = ncap;
    }
    heap_insert(hp->h, &hp->n, x);
}

static void add_bigram(const struct ebb_tokenizer *t, const char *text, const struct sym *s,
                       int32_t l, int32_t r, struct heap *h)
{
    if (l < 0 || r < 0)
        return;
    uint32_t size = s[l].n + s[r].n;
    int32_t id = ebb__tok_lookup(t, text + s[l].start, size);
    if (id < 0)
        return;
    heap_push(h, (struct bigram){t->scores[id], l, r, size});
}

/* True when no token with an inner U+2581 matches the text across the U+2581 at byte pos, so
 * no merged symbol can ever span a cut there. */
static bool spm_can_cut(const struct ebb_tokenizer *t, const char *esc, size_t n, size_t pos)
{
    if (t->n_inner_ws < 0)
        return false;
    for (int32_t k = 0; k < t->n_inner_ws; k++) {
        size_t tn;
        const char *tp = ebb__tok_text(t, t->inner_ws[k], &tn);
        for (size_t j = 1; j + 3 <= tn; j++) {
            if (memcmp(tp + j, "\xe2\x96\x81", 3) || j > pos || pos - j + tn > n)
                continue;
            if (!memcmp(esc + pos - j, tp, tn))
                return false;
        }
    }
    return true;
}

/* Greedy merging of symbols [a, b) and emission of their ids. */
static ebb_err merge_segment(const struct ebb_tokenizer *t, const char *esc, struct sym *s,
                             size_t a, size_t b, struct heap *h, struct ebb__tok_out *out)
{
    s[a].prev = -1;
    s[b - 1].next = -1;
    h->n = 0;
    for (size_t i = a + 1; i < b; i++)
        add_bigram(t, esc, s, (int32_t)i - 1, (int32_t)i, h);
    while (h->n && !h->oom) {
        struct bigram bg = heap_pop(h->h, &h->n);
        struct sym *l = &s[bg.left], *r = &s[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size)
            continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = bg.left;
        add_bigram(t, esc, s, l->prev, bg.left, h);
        add_bigram(t, esc, s, bg.left, l->next, h);
    }
    if (h->oom)
        return EBB_ENOMEM;
    for (int32_t i = (int32_t)a; i >= 0; i = s[i].next) {
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
    return EBB_OK;
}

ebb_err ebb__spm_encode(const struct ebb_tokenizer *t, const char *text, size_t len,
                        bool space_prefix, struct ebb__tok_out *out)
{
    ebb_err rc = EBB_OK;
    /* Escaped text: every space (and the optional prefix) becomes the 3-byte U+2581. */
    size_t cap = 3 * (len + 1);
    char *esc = malloc(cap);
    struct sym *s = malloc(sizeof(struct sym) * cap);
    struct heap h = {0};
    if (!esc || !s) {
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
        s[ns] = (struct sym){(int32_t)ns - 1, (int32_t)ns + 1, (uint32_t)off, (uint32_t)cl};
        ns++;
        off += cl;
    }
    /* Merge segment by segment: a cut before a U+2581 symbol that no token can span gives the
     * same result as merging the whole text, with a much smaller heap. */
    size_t seg = 0;
    for (size_t i = 1; i <= ns && !rc; i++) {
        if (i < ns && !(s[i].n == 3 && !memcmp(esc + s[i].start, "\xe2\x96\x81", 3) &&
                        spm_can_cut(t, esc, n, s[i].start)))
            continue;
        rc = merge_segment(t, esc, s, seg, i, &h, out);
        seg = i;
    }
out:
    free(esc);
    free(s);
    free(h.h);
    return rc;
}
