/* Unicode helpers for the tokenizers: general-category flags of code points (from the generated
 * tables in unicode-data.c), simple lowercase mapping, and UTF-8 decoding/encoding. Everything
 * here is pure and thread-safe. */
#ifndef EBB_RUNTIME_UNICODE_H
#define EBB_RUNTIME_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Flags of a code point: one general-category bit plus EBB_UC_WHITESPACE. */
enum {
    EBB_UC_UNDEFINED = 0x01, /* Cn, and anything past U+10FFFF */
    EBB_UC_NUMBER = 0x02,    /* \p{N} */
    EBB_UC_LETTER = 0x04,    /* \p{L} */
    EBB_UC_SEPARATOR = 0x08, /* \p{Z} */
    EBB_UC_MARK = 0x10,      /* \p{M} */
    EBB_UC_PUNCT = 0x20,     /* \p{P} */
    EBB_UC_SYMBOL = 0x40,    /* \p{S} */
    EBB_UC_CONTROL = 0x80,   /* \p{C} except Cn */
    EBB_UC_WHITESPACE = 0x100,
};

/* Returns the flags of code point cp (any value; past U+10FFFF gives EBB_UC_UNDEFINED). */
unsigned ebb_unicode_flags(uint32_t cp);

/* Simple lowercase mapping; cp itself when it has none. */
uint32_t ebb_unicode_tolower(uint32_t cp);

/* Decodes one code point from s[0..n) (n >= 1) the lenient way llama.cpp does: the lead byte
 * gives the length and continuation bytes only need the 10xxxxxx pattern (so overlong forms and
 * surrogates decode, and F5..F7 leads give values past U+10FFFF). A stray continuation byte, a
 * lead of F8..FF or a truncated sequence yields U+FFFD and consumes one byte. Stores the number
 * of bytes consumed in *adv. */
uint32_t ebb_utf8_decode_lax(const uint8_t *s, size_t n, size_t *adv);

/* Length of the UTF-8 sequence that lead byte c announces (1 for continuation bytes too). */
size_t ebb_utf8_len(uint8_t c);

/* Writes cp as UTF-8 into out (4 bytes room) and returns the length; values past U+10FFFF are
 * written as U+FFFD. */
size_t ebb_utf8_encode(uint32_t cp, uint8_t out[4]);

/* Generated tables (unicode-data.c). */
struct ebb__uc_range {
    uint32_t start; /* first code point; the range runs up to the next entry's start */
    uint8_t flags;
};
struct ebb__uc_pair {
    uint32_t from;
    uint32_t to;
};
extern const struct ebb__uc_range ebb__uc_ranges[];
extern const size_t ebb__uc_n_ranges;
extern const uint32_t ebb__uc_whitespace[];
extern const size_t ebb__uc_n_whitespace;
extern const struct ebb__uc_pair ebb__uc_lower[];
extern const size_t ebb__uc_n_lower;

#endif
