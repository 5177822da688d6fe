/* Private to runtime/sched: the index of the prompt-cache store (model.h, ebb_model_kv_save), the
 * token ids of the prompt prefixes whose KV entries the store holds and which of its positions
 * each occupies. Pure bookkeeping: the scheduler copies the KV entries. Allocated once when the
 * model opens; nothing is allocated per request.
 *
 * An entry is a run of positions [off, off + n) of the store holding one sequence's positions
 * 0..n-1. Room for a new entry is the first gap between entries that fits it; while none does,
 * the least recently used entry is evicted (so an entry larger than the store is never kept,
 * and a store of length 0 keeps nothing). */
#ifndef EBB_RUNTIME_SCHED_PROMPT_CACHE_H
#define EBB_RUNTIME_SCHED_PROMPT_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

#define EBB__PCACHE_MAX 64 /* entries at most */
#define EBB__PCACHE_MIN 16 /* shorter sequences are not worth keeping */

struct ebb__pcache_entry {
    uint32_t off, n; /* store positions [off, off + n) */
    uint64_t used;   /* LRU tick of its last save or hit */
};

struct ebb__pcache {
    int32_t *tok;                                /* (cap) the token id at each store position */
    uint32_t cap;                                /* the store's positions */
    struct ebb__pcache_entry e[EBB__PCACHE_MAX]; /* (n_e) by offset */
    uint32_t n_e;
    uint64_t tick;
    /* since start: hits, tokens reused through them, sequences saved, entries evicted */
    uint64_t hits, hit_tokens, saves, evictions;
};

/* Sizes the index for a store of cap positions (0: disabled). EBB_ENOMEM. */
ebb_err ebb__pcache_init(struct ebb__pcache *pc, uint32_t cap);
void ebb__pcache_fini(struct ebb__pcache *pc);

/* The entry sharing the longest prefix with toks[0..n), at most max tokens of it: its index,
 * the prefix length in *len; -1 when none shares a token. Does not count a hit. */
int ebb__pcache_match(const struct ebb__pcache *pc, const int32_t *toks, uint32_t n, uint32_t max,
                      uint32_t *len);

/* A hit on entry i of len tokens: counts it and makes it the most recently used. */
void ebb__pcache_hit(struct ebb__pcache *pc, int i, uint32_t len);

/* Makes room for sequence toks[0..n) and records it; true with the store offset *at where its
 * KV entries must be copied. False when it is not kept: shorter than EBB__PCACHE_MIN, longer
 * than the store, or already held (an entry starting with the whole of it, which becomes the
 * most recently used). Entries that are prefixes of toks are dropped (it covers them); others
 * are evicted, least recently used first, until a gap fits it. */
bool ebb__pcache_put(struct ebb__pcache *pc, const int32_t *toks, uint32_t n, uint32_t *at);

/* Forgets the entry at offset at (its copy failed). */
void ebb__pcache_drop(struct ebb__pcache *pc, uint32_t at);

/* Positions held by entries. */
uint64_t ebb__pcache_used(const struct ebb__pcache *pc);

#endif
