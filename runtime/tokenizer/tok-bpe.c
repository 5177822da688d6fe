/* Byte-level BPE ("gpt2" tokenizers): the text is cut into pre-tokens (tok-pre.c), then each
 * pre-token is merged in rank order with a binary heap over a hash map of merges keyed by
 * token-id pairs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer-int.h"
#include "unicode.h"

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

bool ebb__bpe_merge(const struct ebb_tokenizer *t, int32_t left, int32_t right, uint32_t *rank,
                    int32_t *result)
{
    if (!t->merge_key)
        return false;
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint32_t i = (uint32_t)mix64(key) & t->merge_mask;
    for (;;) {
        uint64_t k = t->merge_key[i];
        if (k == UINT64_MAX)
            return false;
        if (k == key) {
            *rank = t->merge_rank[i];
            *result = t->merge_result[i];
            return true;
        }
        i = (i + 1) & t->merge_mask;
    }
}

/* GPT-2's byte <-> code point table: printable Latin-1 bytes map to themselves, the others to
 * U+0100 onwards in byte order. */
static void byte_tables(struct ebb_tokenizer *t)
{
    uint32_t next = 256;
    for (int i = 0; i < 512; i++)
        t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        t->byte_cp[b] = (uint16_t)(self ? (uint32_t)b : next++);
        t->cp_byte[t->byte_cp[b]] = (int16_t)b;
        uint8_t u[4];
        size_t n = ebb_utf8_encode(t->byte_cp[b], u);
        t->byte_tok[b] = ebb__tok_lookup(t, (const char *)u, n);
        if (t->raw_bpe) { /* bytes without a token of their own fall back to <0xNN> */
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_tok[b] = ebb__tok_lookup(t, name, 6);
        }
    }
}

ebb_err ebb__bpe_load(struct ebb_tokenizer *t, const struct ebb_gguf *g, struct ebb_diag *diag)
{
    struct ebb_gguf_arr m;
    byte_tables(t);
    ebb_err rc = ebb_gguf_get_arr(g, "tokenizer.ggml.merges", &m);
    if (rc == EBB_ENOTFOUND)
        return ebb_diag_set(diag, EBB_EFORMAT, "tokenizer.ggml.merges is missing");
    if (rc || m.type != EBB_GGUF_STRING)
        return ebb_diag_set(diag, EBB_EFORMAT, "tokenizer.ggml.merges is not an array of strings");
    if (m.n > (1u << 24))
        return ebb_diag_set(diag, EBB_EFORMAT, "tokenizer.ggml.merges has %llu entries",
                            (unsigned long long)m.n);
    uint32_t size = 1;
    while (size < 2 * m.n + 2)
        size <<= 1;
    t->merge_key = malloc(sizeof(uint64_t) * size);
    t->merge_rank = malloc(sizeof(uint32_t) * size);
    t->merge_result = malloc(sizeof(int32_t) * size);
    char *cat = NULL;
    size_t cat_cap = 0;
    if (!t->merge_key || !t->merge_rank || !t->merge_result)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory for %llu merges",
                            (unsigned long long)m.n);
    memset(t->merge_key, 0xff, sizeof(uint64_t) * size);
    t->merge_mask = size - 1;
    for (uint32_t r = 0; r < m.n; r++) {
        struct ebb_str s;
        if (ebb_gguf_arr_str(&m, r, &s))
            return ebb_diag_set(diag, EBB_EFORMAT, "merge %u unreadable", r);
        /* "left right", split at the first space after the first byte. */
        const char *sp = s.n > 1 ? memchr(s.p + 1, ' ', s.n - 1) : NULL;
        if (!sp)
            continue;
        size_t ln = (size_t)(sp - s.p), rn = s.n - ln - 1;
        int32_t l = ebb__tok_lookup(t, s.p, ln), rr = ebb__tok_lookup(t, sp + 1, rn);
        if (l < 0 || rr < 0)
            continue; /* no symbol can ever carry that text */
        if (ln + rn > cat_cap) {
            char *nc = realloc(cat, ln + rn);
            if (!nc) {
                free(cat);
                return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
            }
            cat = nc;
            cat_cap = ln + rn;
        }
        memcpy(cat, s.p, ln);
        memcpy(cat + ln, sp + 1, rn);
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)rr;
        uint32_t i = (uint32_t)mix64(key) & t->merge_mask;
        while (t->merge_key[i] != UINT64_MAX && t->merge_key[i] != key)
            i = (i + 1) & t->merge_mask;
        if (t->merge_key[i] == key)
            continue; /* the first (lowest) rank of a repeated pair wins */
        t->merge_key[i] = key;
        t->merge_rank[i] = r;
        t->merge_result[i] = ebb__tok_lookup(t, cat, ln + rn);
        t->n_merges++;
    }
    free(cat);
    return EBB_OK;
}

ebb_err ebb__bpe_decode_text(const struct ebb_tokenizer *t, const char *s, size_t n,
                             struct ebb__buf *b)
{
    ebb_err rc = EBB_OK;
    size_t start = b->n;
    for (size_t i = 0; i < n && !rc;) {
        size_t adv;
        uint32_t cp = ebb_utf8_decode_lax((const uint8_t *)s + i, n - i, &adv);
        i += adv;
        if (cp < 512 && t->cp_byte[cp] >= 0) {
            char c = (char)t->cp_byte[cp];
            rc = ebb__buf_put(b, &c, 1);
            continue;
        }
        uint8_t u[4];
        size_t un = ebb_utf8_encode(cp, u);
        static const char hex[] = "0123456789abcdef";
        /* The marker repeats the whole token text for every such character, so a long hostile
         * token could grow quadratically: one piece stops at EBB__PIECE_MAX bytes (real tokens
         * are far shorter and unaffected). */
        if (b->n - start + 21 + n > EBB__PIECE_MAX)
            break;
        rc = ebb__buf_put(b, "[UNK_BYTE_0x", 12);
        for (size_t k = 0; k < un && !rc; k++) {
            char h[2] = {hex[u[k] >> 4], hex[u[k] & 15]};
            rc = ebb__buf_put(b, h, 2);
        }
        if (!rc)
            rc = ebb__buf_put(b, s, n);
        if (!rc)
            rc = ebb__buf_put(b, "]", 1);
    }
    return rc;
}

struct sym {
    int32_t prev, next;
    uint32_t start, n; /* bytes of the word */
    int32_t id;        /* token of the symbol's text, -1 if none */
};

struct bigram {
    uint32_t rank;
    int32_t left, right;
    uint32_t size;
};

static bool bg_less(const struct bigram *a, const struct bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

EBB__HEAP_DEFINE(heap, struct bigram, bg_less)

static void add_bigram(const struct ebb_tokenizer *t, struct sym *s, int32_t l, int32_t r,
                       struct bigram *h, size_t *hn)
{
    uint32_t rank;
    int32_t res;
    if (l < 0 || r < 0 || s[l].id < 0 || s[r].id < 0)
        return;
    if (!ebb__bpe_merge(t, s[l].id, s[r].id, &rank, &res))
        return;
    heap_insert(h, hn, (struct bigram){rank, l, r, s[l].n + s[r].n});
}

/* Emits the ids of one symbol whose text is not a token: its bytes' single-character tokens. */
static void emit_bytes(const struct ebb_tokenizer *t, const uint8_t *w, const struct sym *s,
                       struct ebb__tok_out *out)
{
    for (uint32_t k = 0; k < s->n; k++) {
        uint8_t b = w[s->start + k];
        if (t->byte_tok[b] >= 0 || t->raw_bpe) {
            if (t->byte_tok[b] >= 0)
                ebb__tok_push(out, t->byte_tok[b]);
            continue;
        }
        uint8_t u[4];
        size_t un = ebb_utf8_encode(t->byte_cp[b], u);
        for (size_t j = 0; j < un; j++) {
            int32_t id = ebb__tok_lookup(t, (const char *)&u[j], 1);
            if (id >= 0)
                ebb__tok_push(out, id);
        }
    }
}

/* Merges one pre-token (bytes w[0..n)) and emits its ids. s and h have room for n entries. */
static void bpe_word(const struct ebb_tokenizer *t, const uint8_t *w, size_t n, struct sym *s,
                     struct bigram *h, char *enc, struct ebb__tok_out *out)
{
    if (t->ignore_merges) {
        size_t en = 0;
        for (size_t i = 0; i < n; i++)
            en += ebb_utf8_encode(t->byte_cp[w[i]], (uint8_t *)enc + en);
        int32_t id = ebb__tok_lookup(t, enc, en);
        if (id >= 0) {
            ebb__tok_push(out, id);
            return;
        }
    }
    size_t ns = 0;
    if (t->raw_bpe) {
        /* Gemma 4: a run of newlines that is a token stays whole; the symbols are UTF-8
         * characters as their lead bytes announce them. */
        size_t nl = 0;
        while (nl < n && w[nl] == '\n')
            nl++;
        int32_t id = nl == n ? ebb__tok_lookup(t, (const char *)w, n) : -1;
        if (id >= 0) {
            ebb__tok_push(out, id);
            return;
        }
        for (size_t i = 0; i < n; ns++) {
            size_t cl = ebb_utf8_len(w[i]);
            cl = cl < n - i ? cl : n - i;
            s[ns] = (struct sym){(int32_t)ns - 1, (int32_t)ns + 1, (uint32_t)i, (uint32_t)cl,
                                 ebb__tok_lookup(t, (const char *)w + i, cl)};
            i += cl;
        }
        s[ns - 1].next = -1;
    } else {
        for (ns = 0; ns < n; ns++)
            s[ns] = (struct sym){(int32_t)ns - 1, ns + 1 < n ? (int32_t)ns + 1 : -1, (uint32_t)ns,
                                 1, t->byte_tok[w[ns]]};
    }
    size_t hn = 0;
    for (size_t i = 1; i < ns; i++)
        add_bigram(t, s, (int32_t)i - 1, (int32_t)i, h, &hn);
    while (hn) {
        struct bigram b = heap_pop(h, &hn);
        struct sym *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* stale: one side has changed since the pair was queued */
        uint32_t rank;
        int32_t res;
        ebb__bpe_merge(t, l->id, r->id, &rank, &res);
        l->n += r->n;
        l->id = res;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = b.left;
        add_bigram(t, s, l->prev, b.left, h, &hn);
        add_bigram(t, s, b.left, l->next, h, &hn);
    }
    for (int32_t i = 0; i >= 0; i = s[i].next) {
        if (s[i].id >= 0)
            ebb__tok_push(out, s[i].id);
        else
            emit_bytes(t, w, &s[i], out);
    }
}

ebb_err ebb__bpe_encode(const struct ebb_tokenizer *t, const char *text, size_t len,
                        struct ebb__tok_out *out)
{
    ebb_err rc = EBB_OK;
    struct ebb__spans sp = {0};
    uint32_t *cps = malloc(sizeof(uint32_t) * (len + 1));
    uint16_t *fl = malloc(sizeof(uint16_t) * (len + 1));
    uint8_t *word = NULL;
    char *enc = NULL;
    struct sym *syms = NULL;
    struct bigram *heap = NULL;
    if (!cps || !fl) {
        rc = EBB_ENOMEM;
        goto out;
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t adv;
        cps[n] = ebb_utf8_decode_lax((const uint8_t *)text + i, len - i, &adv);
        if (t->raw_bpe && cps[n] == ' ')
            cps[n] = 0x2581; /* SentencePiece-style vocabularies spell a space U+2581 */
        fl[n] = (uint16_t)ebb_unicode_flags(cps[n]);
        n++;
        i += adv;
    }
    rc = ebb__pretokenize(t, cps, fl, n, &sp);
    if (rc)
        goto out;
    /* Scratch sized for the longest pre-token: up to 4 bytes per code point, 2 bytes of GPT-2
     * characters per byte, and fewer than 3 queued pairs per byte (each merge queues two). */
    size_t max_cp = 1;
    for (size_t p = 0; p < sp.n; p++)
        max_cp = sp.len[p] > max_cp ? sp.len[p] : max_cp;
    word = malloc(4 * max_cp);
    enc = malloc(8 * max_cp);
    syms = malloc(sizeof(struct sym) * 4 * max_cp);
    heap = malloc(sizeof(struct bigram) * 12 * max_cp);
    if (!word || !enc || !syms || !heap) {
        rc = EBB_ENOMEM;
        goto out;
    }
    size_t start = 0;
    for (size_t p = 0; p < sp.n; p++) {
        /* Pieces are re-encoded from code points, as llama.cpp does: a stray byte becomes
         * U+FFFD and an overlong form its shortest encoding. */
        size_t wn = 0;
        for (size_t i = start; i < start + sp.len[p]; i++)
            wn += ebb_utf8_encode(cps[i], word + wn);
        start += sp.len[p];
        bpe_word(t, word, wn, syms, heap, enc, out);
    }
out:
    free(sp.len);
    free(cps);
    free(fl);
    free(word);
    free(enc);
    free(syms);
    free(heap);
    return rc;
}
