/* Parts of the scheduler that need no model: request defaults and the stop-string matcher. */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

void ebb_gen_params_defaults(struct ebb_gen_params *p)
{
    memset(p, 0, sizeof(*p));
    ebb_sampling_defaults(&p->sampling);
    p->spec_max = -1;
}

/* ---- stop strings ------------------------------------------------------------------------ */

void ebb_stopper_init(struct ebb_stopper *st, const char *const *stop, uint32_t n_stop)
{
    memset(st, 0, sizeof(*st));
    for (uint32_t i = 0; i < n_stop && st->n_stop < EBB_SCHED_MAX_STOP; i++) {
        size_t n = strlen(stop[i]);
        if (n == 0 || n >= EBB_SCHED_MAX_STOP_LEN)
            continue;
        st->stop[st->n_stop] = stop[i];
        st->stop_len[st->n_stop] = n;
        st->n_stop++;
    }
}

/* Length of the longest suffix of held[0..n) that is a proper prefix of some stop string. */
static size_t stop_prefix_tail(const struct ebb_stopper *st, const char *h, size_t n)
{
    size_t best = 0;
    for (uint32_t i = 0; i < st->n_stop; i++) {
        size_t L = st->stop_len[i] - 1;
        if (L > n)
            L = n;
        for (size_t k = L; k > best; k--) {
            if (!memcmp(h + n - k, st->stop[i], k)) {
                best = k;
                break;
            }
        }
    }
    return best;
}

size_t ebb_stopper_push(struct ebb_stopper *st, const char *text, size_t n, char *out, size_t cap,
                        bool *matched)
{
    size_t w = 0;
    *matched = false;
    if (st->n_stop == 0) {
        if (n > cap)
            n = cap;
        memcpy(out, text, n);
        return n;
    }
    /* Work on held + text as one window; only the tail that may start a stop string stays. */
    size_t total = st->n_held + n;
    const char *src;
    char local[8192], *tmp = NULL;
    if (st->n_held == 0) {
        src = text;
    } else if (total <= sizeof(local)) {
        memcpy(local, st->held, st->n_held);
        memcpy(local + st->n_held, text, n);
        src = local;
    } else {
        tmp = malloc(total);
        if (!tmp) {
            *matched = true; /* out of memory: end the generation rather than leak a stop */
            return 0;
        }
        memcpy(tmp, st->held, st->n_held);
        memcpy(tmp + st->n_held, text, n);
        src = tmp;
    }
    /* Earliest complete match. */
    size_t first = SIZE_MAX;
    for (uint32_t i = 0; i < st->n_stop; i++) {
        size_t L = st->stop_len[i];
        if (L > total)
            continue;
        const char *p = memmem(src, total, st->stop[i], L);
        if (p && (size_t)(p - src) < first) {
            first = (size_t)(p - src);
            st->matched = st->stop[i];
        }
    }
    if (first != SIZE_MAX) {
        w = first < cap ? first : cap;
        memcpy(out, src, w);
        st->n_held = 0;
        *matched = true;
        free(tmp);
        return w;
    }
    size_t keep = stop_prefix_tail(st, src, total);
    w = total - keep;
    if (w > cap)
        w = cap;
    memcpy(out, src, w);
    memmove(st->held, src + total - keep, keep);
    st->n_held = keep;
    free(tmp);
    return w;
}

size_t ebb_stopper_flush(struct ebb_stopper *st, char *out, size_t cap)
{
    size_t w = st->n_held < cap ? st->n_held : cap;
    memcpy(out, st->held, w);
    st->n_held = 0;
    return w;
}
