/* Data parallel placement: which replica of a model (one scheduler per device) takes a job.
 * A shared prefix is worth the most on a replica that can start the job now, so the rule
 * prefers it there; otherwise load decides, so that every device fills before any queues. */
#include "scheduler.h"

int ebb_sched_place(const struct ebb_sched_offer *offers, const bool *ready, size_t n)
{
    int best = -1;
    for (size_t i = 0; i < n; i++) {
        if (!ready[i])
            continue;
        if (best < 0) {
            best = (int)i;
            continue;
        }
        const struct ebb_sched_offer *o = &offers[i], *b = &offers[best];
        bool o_free = o->free_slots > 0, b_free = b->free_slots > 0;
        if (o_free != b_free) {
            if (o_free)
                best = (int)i;
            continue;
        }
        /* both free: the longer shared prefix; equal prefixes (none, mostly): the less busy */
        if (o_free && o->prefix != b->prefix) {
            if (o->prefix > b->prefix)
                best = (int)i;
            continue;
        }
        if (o->busy < b->busy)
            best = (int)i;
    }
    return best;
}
