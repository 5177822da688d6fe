/* The vocabulary's text -> id hash table and the growable byte buffer, shared by the
 * tokenizer's construction (tokenizer.c) and the BPE tables (tok-bpe.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer-int.h"

/* 64-bit FNV-1a, finished with a multiply-xorshift so the low bits mix well. */
static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

int32_t ebb__tok_lookup(const struct ebb_tokenizer *t, const char *s, size_t n)
{
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->hash_mask;
    for (;;) {
        int32_t id = t->hash[i];
        if (id < 0)
            return -1;
        size_t tn;
        const char *tp = ebb__tok_text(t, id, &tn);
        if (tn == n && !memcmp(tp, s, n))
            return id;
        i = (i + 1) & t->hash_mask;
    }
}

/* Inserts id under its text; a later duplicate replaces an earlier one, as in llama.cpp. */
void ebb__tok_hash_insert(struct ebb_tokenizer *t, int32_t id)
{
    size_t n;
    const char *s = ebb__tok_text(t, id, &n);
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->hash_mask;
    for (;;) {
        int32_t cur = t->hash[i];
        if (cur < 0) {
            t->hash[i] = id;
            return;
        }
        size_t cn;
        const char *cs = ebb__tok_text(t, cur, &cn);
        if (cn == n && !memcmp(cs, s, n)) {
            t->hash[i] = id;
            return;
        }
        i = (i + 1) & t->hash_mask;
    }
}

ebb_err ebb__buf_put(struct ebb__buf *b, const void *p, size_t n)
{
    if (n > b->cap - b->n) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap - b->n < n) {
            if (ncap > SIZE_MAX / 2)
                return EBB_ENOMEM;
            ncap *= 2;
        }
        char *np = realloc(b->p, ncap);
        if (!np)
            return EBB_ENOMEM;
        b->p = np;
        b->cap = ncap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    return EBB_OK;
}
