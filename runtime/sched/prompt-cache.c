/* The prompt-cache index (prompt-cache.h): first fit among the gaps between entries kept in
 * offset order, least-recently-used eviction. */
#include "prompt-cache.h"

#include <stdlib.h>
#include <string.h>

ebb_err ebb__pcache_init(struct ebb__pcache *pc, uint32_t cap)
{
    memset(pc, 0, sizeof(*pc));
    if (!cap)
        return EBB_OK;
    pc->tok = malloc(sizeof(int32_t) * cap);
    if (!pc->tok)
        return EBB_ENOMEM;
    pc->cap = cap;
    return EBB_OK;
}

void ebb__pcache_fini(struct ebb__pcache *pc)
{
    free(pc->tok);
    memset(pc, 0, sizeof(*pc));
}

static uint32_t common(const int32_t *a, const int32_t *b, uint32_t n)
{
    uint32_t i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

int ebb__pcache_match(const struct ebb__pcache *pc, const int32_t *toks, uint32_t n, uint32_t max,
                      uint32_t *len)
{
    int best = -1;
    uint32_t best_len = 0;
    if (max < n)
        n = max;
    for (uint32_t i = 0; i < pc->n_e; i++) {
        const struct ebb__pcache_entry *e = &pc->e[i];
        uint32_t k = common(pc->tok + e->off, toks, e->n < n ? e->n : n);
        if (k > best_len) {
            best = (int)i;
            best_len = k;
        }
    }
    *len = best_len;
    return best;
}

void ebb__pcache_hit(struct ebb__pcache *pc, int i, uint32_t len)
{
    pc->e[i].used = ++pc->tick;
    pc->hits++;
    pc->hit_tokens += len;
}

static void remove_at(struct ebb__pcache *pc, uint32_t i)
{
    memmove(&pc->e[i], &pc->e[i + 1], sizeof(pc->e[0]) * (pc->n_e - i - 1));
    pc->n_e--;
}

/* The first gap of n positions: the index the entry goes in at, its offset in *at. */
static bool find_gap(const struct ebb__pcache *pc, uint32_t n, uint32_t *idx, uint32_t *at)
{
    uint32_t prev_end = 0;
    for (uint32_t i = 0; i <= pc->n_e; i++) {
        uint32_t next = i < pc->n_e ? pc->e[i].off : pc->cap;
        if (next - prev_end >= n) {
            *idx = i;
            *at = prev_end;
            return true;
        }
        if (i < pc->n_e)
            prev_end = pc->e[i].off + pc->e[i].n;
    }
    return false;
}

bool ebb__pcache_put(struct ebb__pcache *pc, const int32_t *toks, uint32_t n, uint32_t *at)
{
    if (n < EBB__PCACHE_MIN || n > pc->cap)
        return false;
    for (uint32_t i = 0; i < pc->n_e;) {
        struct ebb__pcache_entry *e = &pc->e[i];
        uint32_t k = e->n < n ? e->n : n;
        if (common(pc->tok + e->off, toks, k) == k) {
            if (e->n >= n) {
                e->used = ++pc->tick;
                return false;
            }
            remove_at(pc, i);
            continue;
        }
        i++;
    }
    uint32_t idx = 0, off = 0;
    while (pc->n_e == EBB__PCACHE_MAX || !find_gap(pc, n, &idx, &off)) {
        uint32_t lru = 0;
        for (uint32_t i = 1; i < pc->n_e; i++)
            if (pc->e[i].used < pc->e[lru].used)
                lru = i;
        remove_at(pc, lru);
        pc->evictions++;
    }
    memmove(&pc->e[idx + 1], &pc->e[idx], sizeof(pc->e[0]) * (pc->n_e - idx));
    pc->e[idx] = (struct ebb__pcache_entry){.off = off, .n = n, .used = ++pc->tick};
    pc->n_e++;
    memcpy(pc->tok + off, toks, sizeof(int32_t) * n);
    pc->saves++;
    *at = off;
    return true;
}

void ebb__pcache_drop(struct ebb__pcache *pc, uint32_t at)
{
    for (uint32_t i = 0; i < pc->n_e; i++)
        if (pc->e[i].off == at) {
            remove_at(pc, i);
            return;
        }
}

uint64_t ebb__pcache_used(const struct ebb__pcache *pc)
{
    uint64_t u = 0;
    for (uint32_t i = 0; i < pc->n_e; i++)
        u += pc->e[i].n;
    return u;
}
