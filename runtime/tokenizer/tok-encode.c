/* Encoding entry point: the text is first cut around special tokens (as llama.cpp's
 * tokenizer_st_partition does), then each run of plain text goes to the BPE or SentencePiece
 * encoder. */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer-int.h"

/* A run of input text, or a special token found in it. */
struct frag {
    size_t off, len;
    int32_t id; /* -1 for raw text */
};

static ebb_err frag_add(struct frag **f, size_t *n, size_t *cap, struct frag x)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        struct frag *nf = realloc(*f, ncap * sizeof *nf);
        if (!nf)
            return EBB_ENOMEM;
        *f = nf;
        *cap = ncap;
    }
    (*f)[(*n)++] = x;
    return EBB_OK;
}

/* Splits the raw fragments around every occurrence of each special token, longest tokens
 * first, the way llama.cpp's tokenizer_st_partition does (control and unknown tokens only with
 * parse_special; user-defined tokens always). */
static ebb_err partition(const struct ebb_tokenizer *t, const char *text, size_t len,
                         bool parse_special, struct frag **frags, size_t *n_frags)
{
    ebb_err rc = EBB_OK;
    struct frag *f = NULL, *g = NULL;
    size_t n = 0, cap = 0, gn = 0, gcap = 0;
    /* Which byte pairs occur in the text lets most special tokens be skipped at once. */
    uint8_t *pairs = calloc(8192, 1);
    uint8_t first[32] = {0};
    if (!pairs)
        return EBB_ENOMEM;
    rc = frag_add(&f, &n, &cap, (struct frag){0, len, -1});
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)text[i];
        first[c >> 3] |= (uint8_t)(1u << (c & 7));
        if (i + 1 < len) {
            unsigned p = (unsigned)c << 8 | (uint8_t)text[i + 1];
            pairs[p >> 3] |= (uint8_t)(1u << (p & 7));
        }
    }
    for (uint32_t k = 0; k < t->n_specials && !rc; k++) {
        int32_t id = t->specials[k];
        if (!parse_special && (t->attr[id] & (EBB__TA_CONTROL | EBB__TA_UNKNOWN)))
            continue;
        size_t sn;
        const char *s = ebb__tok_text(t, id, &sn);
        if (sn == 0 || sn > len)
            continue;
        uint8_t c0 = (uint8_t)s[0];
        if (!(first[c0 >> 3] & (1u << (c0 & 7))))
            continue;
        if (sn >= 2) {
            unsigned p = (unsigned)c0 << 8 | (uint8_t)s[1];
            if (!(pairs[p >> 3] & (1u << (p & 7))))
                continue;
        }
        gn = 0;
        bool changed = false;
        for (size_t i = 0; i < n && !rc; i++) {
            size_t cur = f[i].off, end = f[i].off + f[i].len;
            const char *m = f[i].id < 0 ? memmem(text + cur, end - cur, s, sn) : NULL;
            if (!m) {
                rc = frag_add(&g, &gn, &gcap, f[i]);
                continue;
            }
            changed = true;
            while (m && !rc) {
                size_t pos = (size_t)(m - text);
                if (pos > cur)
                    rc = frag_add(&g, &gn, &gcap, (struct frag){cur, pos - cur, -1});
                if (!rc)
                    rc = frag_add(&g, &gn, &gcap, (struct frag){pos, sn, id});
                cur = pos + sn;
                if (t->attr[id] & EBB__TA_RSTRIP) /* C isspace, as llama.cpp */
                    while (cur < end &&
                           (text[cur] == ' ' || (text[cur] >= '\t' && text[cur] <= '\r')))
                        cur++;
                m = cur < end ? memmem(text + cur, end - cur, s, sn) : NULL;
            }
            if (!rc && cur < end)
                rc = frag_add(&g, &gn, &gcap, (struct frag){cur, end - cur, -1});
        }
        if (changed && !rc) {
            struct frag *tf = f;
            size_t tcap = cap;
            f = g;
            n = gn;
            cap = gcap;
            g = tf;
            gcap = tcap;
        }
    }
    free(pairs);
    free(g);
    if (rc) {
        free(f);
        return rc;
    }
    *frags = f;
    *n_frags = n;
    return EBB_OK;
}

ebb_err ebb_tokenizer_encode(const struct ebb_tokenizer *t, const char *text, size_t len,
                             unsigned flags, int32_t *ids, size_t cap, size_t *n_out)
{
    struct ebb__tok_out o = {ids, cap, 0};
    struct frag *f = NULL;
    size_t nf = 0;
    bool add_special = flags & EBB_TOK_ADD_SPECIAL;
    ebb_err rc = EBB_OK;
    if (len) {
        rc = partition(t, text, len, flags & EBB_TOK_PARSE_SPECIAL, &f, &nf);
        if (rc)
            return rc;
    }
    if (add_special && t->add_bos)
        ebb__tok_push(&o, t->bos);
    bool prev_special = true;
    for (size_t i = 0; i < nf && !rc; i++) {
        if (f[i].id >= 0) {
            ebb__tok_push(&o, f[i].id);
            prev_special = true;
            continue;
        }
        if (t->kind == EBB_TOK_SPM)
            rc = ebb__spm_encode(t, text + f[i].off, f[i].len, t->add_space_prefix && prev_special,
                                 &o);
        else
            rc = ebb__bpe_encode(t, text + f[i].off, f[i].len, &o);
        prev_special = false;
    }
    free(f);
    if (rc)
        return rc;
    if (add_special && t->add_eos)
        ebb__tok_push(&o, t->eos);
    *n_out = o.n;
    return o.n > cap ? EBB_ERANGE : EBB_OK;
}
