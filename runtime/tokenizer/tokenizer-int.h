/* Tokenizer internals shared by tokenizer.c (vocabulary, specials, pieces), tok-bpe.c (byte-level
 * BPE with pre-tokenizers) and tok-spm.c (SentencePiece-style merges). */
#ifndef EBB_RUNTIME_TOKENIZER_INT_H
#define EBB_RUNTIME_TOKENIZER_INT_H

#include "tokenizer.h"

/* Token attributes, as llama.cpp derives them from tokenizer.ggml.token_type plus its
 * name-based fix-ups (a flag set, so fix-ups can add CONTROL or UNUSED). */
enum {
    EBB__TA_NORMAL = 1u << 0,
    EBB__TA_UNKNOWN = 1u << 1,
    EBB__TA_CONTROL = 1u << 2,
    EBB__TA_USER_DEFINED = 1u << 3,
    EBB__TA_BYTE = 1u << 4,
    EBB__TA_UNUSED = 1u << 5,
    EBB__TA_UNDEFINED = 1u << 6,
    EBB__TA_RSTRIP = 1u << 7, /* whitespace after the special token is dropped (Phi-3) */
};

/* Byte-level BPE pre-tokenizers (tokenizer.ggml.pre). */
enum ebb__bpe_pre {
    EBB__PRE_DEFAULT = 0, /* "default" or missing */
    EBB__PRE_GPT2,        /* "gpt-2" and friends */
    EBB__PRE_SMOLLM,      /* "smollm" (also starcoder-style vocabularies) */
    EBB__PRE_LLAMA3,      /* "llama3", "llama-bpe", "llama-v3" */
    EBB__PRE_QWEN2,       /* "qwen2" */
    EBB__PRE_QWEN35,      /* "qwen35" */
    EBB__PRE_FALCON,      /* "falcon" */
    EBB__PRE_DEEPSEEK_LLM,
    EBB__PRE_DEEPSEEK_CODER,
    EBB__PRE_TEKKEN,    /* "tekken" (Mistral Nemo, Small 3) */
    EBB__PRE_GPT4O,     /* "gpt-4o", "llama4" */
    EBB__PRE_DEEPSEEK3, /* "deepseek-v3" */
    EBB__PRE_GEMMA4,    /* tokenizer.ggml.model "gemma4": spaces as U+2581, newline runs apart */
};

/* Where encoded ids go: ids beyond cap are only counted. */
struct ebb__tok_out {
    int32_t *ids;
    size_t cap;
    size_t n;
};

static inline void ebb__tok_push(struct ebb__tok_out *o, int32_t id)
{
    if (o->n < o->cap)
        o->ids[o->n] = id;
    o->n++;
}

struct ebb_tokenizer {
    enum ebb_tok_kind kind;
    enum ebb__bpe_pre pre;
    char kind_name[64];
    uint32_t n_vocab;

    char *text;          /* all token texts back to back */
    uint32_t *text_off;  /* (n_vocab + 1) offsets into text */
    float *scores;       /* (n_vocab) SentencePiece scores, 0 when absent */
    uint8_t *attr;       /* (n_vocab) EBB__TA_* */
    uint8_t *eog;        /* (n_vocab) 1 for end-of-generation tokens */
    char *piece;         /* detokenized pieces (special tokens rendered) back to back */
    uint32_t *piece_off; /* (n_vocab + 1) */

    int32_t *hash; /* (hash_mask + 1) open-addressing table text -> id, -1 empty */
    uint32_t hash_mask;

    int32_t *specials; /* control, user-defined and unknown tokens, longest text first */
    uint32_t n_specials;

    int32_t bos, eos, eot, eom, unk;
    bool add_bos, add_eos, add_space_prefix;

    /* SentencePiece: tokens with U+2581 after their first byte (they limit where long texts
     * may be cut into independently merged segments); n_inner_ws = -1 when there are too many
     * to check and texts are merged whole. */
    int32_t inner_ws[64];
    int32_t n_inner_ws;

    /* Byte-level BPE. */
    bool ignore_merges;    /* a pre-token found whole in the vocab skips merging */
    bool raw_bpe;          /* merges over raw UTF-8 characters, <0xNN> byte tokens (gemma4) */
    int32_t byte_tok[256]; /* BPE: id of the byte's GPT-2 character; SPM: <0xNN> (or -1) */
    uint16_t byte_cp[256]; /* GPT-2 byte -> code point mapping */
    int16_t cp_byte[512];  /* inverse for code points < 512, -1 otherwise */
    uint64_t *merge_key;   /* (merge_mask + 1) (left id << 32 | right id), UINT64_MAX empty */
    uint32_t *merge_rank;
    int32_t *merge_result; /* id of the merged text, -1 if it is not in the vocab */
    uint32_t merge_mask;
    uint32_t n_merges;
};

/* A growable byte buffer. */
struct ebb__buf {
    char *p;
    size_t n, cap;
};

/* Appends n bytes; EBB_ENOMEM leaves b as it was. */
ebb_err ebb__buf_put(struct ebb__buf *b, const void *p, size_t n);

static inline const char *ebb__tok_text(const struct ebb_tokenizer *t, int32_t id, size_t *n)
{
    *n = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

/* ebb_tokenizer_new with tokenizer.ggml.pre replaced by pre_override (when not NULL); tests use
 * it to run every pre-tokenizer over one real vocabulary. */
ebb_err ebb__tokenizer_new_pre(const struct ebb_gguf *g, const char *pre_override,
                               struct ebb_tokenizer **out, struct ebb_diag *diag);

/* Token id of exactly the bytes s[0..n), or -1. */
int32_t ebb__tok_lookup(const struct ebb_tokenizer *t, const char *s, size_t n);

/* Inserts id into t->hash under its text; a later duplicate replaces an earlier one. */
void ebb__tok_hash_insert(struct ebb_tokenizer *t, int32_t id);

/* Looks up the merge of two adjacent ids: rank and resulting id; false if none. */
bool ebb__bpe_merge(const struct ebb_tokenizer *t, int32_t left, int32_t right, uint32_t *rank,
                    int32_t *result);

/* Loads tokenizer.ggml.merges and the byte tables for a BPE vocabulary. */
ebb_err ebb__bpe_load(struct ebb_tokenizer *t, const struct ebb_gguf *g, struct ebb_diag *diag);

/* Encodes one run of raw text (no special tokens inside) with byte-level BPE. */
ebb_err ebb__bpe_encode(const struct ebb_tokenizer *t, const char *text, size_t len,
                        struct ebb__tok_out *out);

/* Piece boundaries as a list of lengths in code points. */
struct ebb__spans {
    uint32_t *len;
    size_t n, cap;
    size_t prev; /* end of the last emitted span (absolute code point index) */
    bool oom;
};

/* Runs t's pre-tokenizer over the code points cps[0..n) (fl: their ebb_unicode_flags); the
 * pieces come back in *out (out->len malloc'ed, caller frees). */
ebb_err ebb__pretokenize(const struct ebb_tokenizer *t, const uint32_t *cps, const uint16_t *fl,
                         size_t n, struct ebb__spans *out);

/* The pre-tokens of text under t's pre-tokenizer, as lengths in code points (malloc'ed, caller
 * frees); for tests. */
ebb_err ebb__bpe_split(const struct ebb_tokenizer *t, const char *text, size_t len, uint32_t **lens,
                       size_t *n);

#define EBB__PIECE_MAX 65536 /* bytes of one detokenized piece */

/* Decodes a byte-level BPE token text into the bytes it stands for, appending to b. Characters
 * outside the byte mapping are rendered as llama.cpp renders them ("[UNK_BYTE_0x..]"). */
ebb_err ebb__bpe_decode_text(const struct ebb_tokenizer *t, const char *s, size_t n,
                             struct ebb__buf *b);

/* Encodes one run of raw text with SentencePiece merges; space_prefix adds a leading space. */
ebb_err ebb__spm_encode(const struct ebb_tokenizer *t, const char *text, size_t len,
                        bool space_prefix, struct ebb__tok_out *out);

/* Binary heap helpers over an array of `type`, ordered by `before(const type *, const type *)`
 * (the element that must pop first is "before"). Both tokenizers keep their merge candidates
 * in one; each file instantiates it for its own pair type and ordering. `name##_insert` places
 * x into a heap that already has room for it at index *n and grows *n. */
#define EBB__HEAP_DEFINE(name, type, before)                                                       \
    static void name##_insert(type *h, size_t *n, type x)                                          \
    {                                                                                              \
        size_t i = (*n)++;                                                                         \
        while (i > 0) {                                                                            \
            size_t p = (i - 1) / 2;                                                                \
            if (!before(&x, &h[p]))                                                                \
                break;                                                                             \
            h[i] = h[p];                                                                           \
            i = p;                                                                                 \
        }                                                                                          \
        h[i] = x;                                                                                  \
    }                                                                                              \
    static type name##_pop(type *h, size_t *n)                                                     \
    {                                                                                              \
        type top = h[0], x = h[--(*n)];                                                            \
        size_t i = 0;                                                                              \
        for (;;) {                                                                                 \
            size_t l = 2 * i + 1, r = l + 1, m = i;                                                \
            const type *best = &x;                                                                 \
            if (l < *n && before(&h[l], best))                                                     \
                m = l, best = &h[l];                                                               \
            if (r < *n && before(&h[r], best))                                                     \
                m = r;                                                                             \
            if (m == i)                                                                            \
                break;                                                                             \
            h[i] = h[m];                                                                           \
            i = m;                                                                                 \
        }                                                                                          \
        if (*n)                                                                                    \
            h[i] = x;                                                                              \
        return top;                                                                                \
    }

#endif
