/* Unicode category lookup and UTF-8 coding for the tokenizers. */
#include "unicode.h"

static int is_whitespace(uint32_t cp)
{
    size_t lo = 0, hi = ebb__uc_n_whitespace;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ebb__uc_whitespace[mid] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ebb__uc_n_whitespace && ebb__uc_whitespace[lo] == cp;
}

unsigned ebb_unicode_flags(uint32_t cp)
{
    if (cp >= 0x110000)
        return EBB_UC_UNDEFINED;
    /* Last range whose start <= cp; ranges[0].start is 0. */
    size_t lo = 0, hi = ebb__uc_n_ranges;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (ebb__uc_ranges[mid].start <= cp)
            lo = mid;
        else
            hi = mid;
    }
    unsigned f = ebb__uc_ranges[lo].flags;
    if (is_whitespace(cp))
        f |= EBB_UC_WHITESPACE;
    return f;
}

uint32_t ebb_unicode_tolower(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    size_t lo = 0, hi = ebb__uc_n_lower;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ebb__uc_lower[mid].from < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo < ebb__uc_n_lower && ebb__uc_lower[lo].from == cp) ? ebb__uc_lower[lo].to : cp;
}

size_t ebb_utf8_len(uint8_t c)
{
    if (c < 0xC0)
        return 1;
    if (c < 0xE0)
        return 2;
    if (c < 0xF0)
        return 3;
    return 4;
}

static int cont(uint8_t c)
{
    return (c & 0xC0) == 0x80;
}

uint32_t ebb_utf8_decode_lax(const uint8_t *s, size_t n, size_t *adv)
{
    uint8_t c = s[0];
    *adv = 1;
    if (c < 0x80)
        return c;
    if (c < 0xC0)
        return 0xFFFD;
    if (c < 0xE0) {
        if (n < 2 || !cont(s[1]))
            return 0xFFFD;
        *adv = 2;
        return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (c < 0xF0) {
        if (n < 3 || !cont(s[1]) || !cont(s[2]))
            return 0xFFFD;
        *adv = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    if (c < 0xF8) {
        if (n < 4 || !cont(s[1]) || !cont(s[2]) || !cont(s[3]))
            return 0xFFFD;
        *adv = 4;
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
    return 0xFFFD;
}

size_t ebb_utf8_encode(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp >= 0x110000)
        cp = 0xFFFD;
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}
