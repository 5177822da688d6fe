/* SHA-256 (FIPS 180-4), streaming: the digest ebb pull checks a download against (the hub's LFS
 * object id is the sha256 of the whole file). */
#ifndef EBB_FETCH_SHA256_H
#define EBB_FETCH_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct ebb_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;  /* bytes hashed so far */
    uint8_t block[64]; /* a partial block */
    size_t n_block;    /* bytes in block */
};

/* Starts a digest in the caller's storage. */
void ebb_sha256_init(struct ebb_sha256 *s);

/* Adds n bytes of data (any length, any number of calls). */
void ebb_sha256_update(struct ebb_sha256 *s, const void *data, size_t n);

/* Finishes the digest into out (32 bytes); s must be initialised again before reuse. */
void ebb_sha256_final(struct ebb_sha256 *s, uint8_t out[32]);

/* Writes the 64 lower-case hex digits of digest and a NUL into hex (65 bytes). */
void ebb_sha256_hex(const uint8_t digest[32], char hex[65]);

#endif
