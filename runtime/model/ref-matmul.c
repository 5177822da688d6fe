/* The reference's matrix products: quantized row dot products for one token, dequantized rows
 * reused over the tokens of a batch, or (ref-q8, cpu, host layers) 8-bit activations times each
 * weight row in place, or, for four tokens or more on device "cpu", times the rows repacked in
 * groups of eight (ebb_quant_get_rp8); output rows (or groups) split between the caller and its
 * helper threads, the pool that also runs the attention's heads (ebb__ref_run). */
#include "ref-int.h"

#include <stdlib.h>
#include <string.h>

/* y[t][o] = W[o] . x[t] for rows o in [o0, o1). One token: the quantized dot directly. More:
 * dequantize each row once and reuse it for every token. */
static void matmul_rows(const struct job *j, float *rowbuf, uint32_t o0, uint32_t o1)
{
    const struct wmat *w = j->w;
    for (uint32_t o = o0; o < o1; o++) {
        const uint8_t *row = w->data + (uint64_t)o * w->row_bytes;
        if (j->r4 && o + 4 <= o1) {
            j->r4(row, w->row_bytes, j->xa, w->n_in, j->y + o);
            o += 3;
            continue;
        }
        if (j->xa) {
            const uint8_t *xa = j->xa;
            uint32_t t = 0;
            float y8[8];
            for (; j->dot8 && t + 8 <= j->n; t += 8, xa += 8 * j->xa_stride) {
                j->dot8(row, xa, j->xa_stride, w->n_in, y8);
                for (uint32_t k = 0; k < 8; k++)
                    j->y[(uint64_t)(t + k) * w->n_out + o] = y8[k];
            }
            for (; j->dot4 && t + 4 <= j->n; t += 4, xa += 4 * j->xa_stride) {
                j->dot4(row, xa, j->xa_stride, w->n_in, y8);
                for (uint32_t k = 0; k < 4; k++)
                    j->y[(uint64_t)(t + k) * w->n_out + o] = y8[k];
            }
            for (; t < j->n; t++, xa += j->xa_stride)
                j->y[(uint64_t)t * w->n_out + o] = j->dot(row, xa, w->n_in);
            continue;
        }
        if (j->n == 1 && !j->deq) {
            j->y[o] = w->dot(row, j->x, w->n_in);
            continue;
        }
        ebb_quant_dequantize_row(w->type, row, rowbuf, w->n_in);
        for (uint32_t t = 0; t < j->n; t++)
            j->y[(uint64_t)t * w->n_out + o] =
                ebb__ref_dot_f32(rowbuf, j->x + (uint64_t)t * w->n_in, w->n_in);
    }
}

/* Output rows of part i of n parts. */
static void part_rows(uint32_t n_out, int i, int n, uint32_t *o0, uint32_t *o1)
{
    *o0 = (uint32_t)((uint64_t)n_out * (uint32_t)i / (uint32_t)n);
    *o1 = (uint32_t)((uint64_t)n_out * (uint32_t)(i + 1) / (uint32_t)n);
}

/* Row groups [g0, g1) of a repacked matrix, two groups and four tokens at a time (the product
 * takes the rest one by one). */
static void matmul_groups(const struct job *j, uint32_t g0, uint32_t g1)
{
    const struct wmat *w = j->w;
    const uint64_t as = w->n_in / 32;
    for (uint32_t g = g0; g < g1; g += 2) {
        int ng = g1 - g < 2 ? 1 : 2;
        const uint8_t *grp = w->rp + (uint64_t)g * w->rp_bytes;
        for (uint32_t t = 0; t < j->n; t += 4) {
            int nt = j->n - t < 4 ? (int)(j->n - t) : 4;
            float out[64];
            j->rp8(grp, (const uint8_t *)j->xa + (uint64_t)t * j->xa_stride, j->xa_stride,
                   j->xsum ? j->xsum + (uint64_t)t * as : NULL, w->n_in, ng, nt, out);
            for (int i = 0; i < ng; i++)
                for (int k = 0; k < nt; k++)
                    memcpy(j->y + (uint64_t)(t + (uint32_t)k) * w->n_out + 8 * (g + (uint32_t)i),
                           out + 8 * (i * nt + k), 8 * sizeof(float));
        }
    }
}

static void matmul_part(struct ref *r, const struct job *j, int part)
{
    uint32_t o0, o1;
    if (j->rp8) {
        /* Groups of eight rows split between the parts; the last part takes the rows left. */
        uint32_t g0, g1, ng = j->w->n_out / 8;
        part_rows(ng, part, r->n_threads, &g0, &g1);
        matmul_groups(j, g0, g1);
        if (part == r->n_threads - 1 && ng * 8 < j->w->n_out)
            matmul_rows(j, r->rowbuf[part], ng * 8, j->w->n_out);
        return;
    }
    part_rows(j->w->n_out, part, r->n_threads, &o0, &o1);
    matmul_rows(j, r->rowbuf[part], o0, o1);
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* A waiter's polls with r->spin_adapt: windows of SPIN_WIN waits; where more than half of a
 * window's polls ran out (the awaited thread was not running: a loaded machine, where polling
 * takes the core it needs), the next SPIN_OFF waits sleep at once, then polling is tried again.
 * On a quiet machine the polls mostly succeed and stay on. */
enum { SPIN_WIN = 32, SPIN_OFF = 512 };

/* The polls for this wait. */
static int spin_budget(const struct ref *r, const struct ref_spin *s)
{
    return r->spin_adapt && s->off ? 0 : r->spins;
}

/* After a wait whose polls were budget: whether they saw the event (ok). */
static void spin_note(const struct ref *r, struct ref_spin *s, int budget, bool ok)
{
    if (!r->spin_adapt)
        return;
    if (!budget) {
        s->off -= s->off > 0;
        return;
    }
    ok ? s->ok++ : s->fail++;
    if (s->ok + s->fail < SPIN_WIN)
        return;
    s->off = 2 * s->fail > SPIN_WIN ? SPIN_OFF : 0;
    s->ok = s->fail = 0;
}

/* Helpers poll gen r->spins times, then sleep on cv (counted in sleepers, so that the caller
 * knows to wake them); the last helper done wakes the caller if it sleeps. Every flag is
 * sequentially consistent, so a sleeper either sees the new gen before waiting or is woken. */
static void *helper_main(void *arg)
{
    const struct ref_helper *h = arg;
    struct ref *r = h->r;
    uint64_t seen = 0, g;
    struct ref_spin ss = {0};
    for (;;) {
        int k = 0, budget = spin_budget(r, &ss);
        while ((g = atomic_load(&r->gen)) == seen && k++ < budget)
            relax();
        spin_note(r, &ss, budget, g != seen);
        if (g == seen) {
            pthread_mutex_lock(&r->mu);
            atomic_fetch_add(&r->sleepers, 1);
            while ((g = atomic_load(&r->gen)) == seen)
                pthread_cond_wait(&r->cv, &r->mu);
            atomic_fetch_sub(&r->sleepers, 1);
            pthread_mutex_unlock(&r->mu);
        }
        if (atomic_load(&r->quit))
            break;
        seen = g;
        struct job j = r->job;
        j.run(r, &j, h->i);
        if (atomic_fetch_add(&r->n_done, 1) + 1 == r->n_threads - 1 &&
            atomic_load(&r->main_sleeps)) {
            pthread_mutex_lock(&r->mu);
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
        }
    }
    return NULL;
}

void ebb__ref_matmul(struct ref *r, const struct wmat *w, const float *x, float *y, uint32_t n)
{
    /* The CPU device sums a float product as prefill does for any number of tokens, so that a
     * token's logits do not depend on how its prompt was split. */
    struct job j = {.run = matmul_part, .w = w, .x = x, .y = y, .n = n, .deq = r->cpu};
    if (r->q8 && ebb_quant_q8_act_supported(w->type)) {
        for (uint32_t t = 0; t < n; t++)
            (r->fast ? ebb_quant_q8_act_row_fast : ebb_quant_q8_act_row)(
                x + (uint64_t)t * w->n_in, w->n_in, r->xact + (uint64_t)t * (w->n_in / 32));
        j.xa = r->xact;
        j.xa_stride = sizeof(*r->xact) * (w->n_in / 32);
    } else if (r->kq8 && ebb_quant_q8k_act_supported(w->type)) {
        for (uint32_t t = 0; t < n; t++)
            (r->fast ? ebb_quant_q8k_act_row_fast : ebb_quant_q8k_act_row)(
                x + (uint64_t)t * w->n_in, w->n_in, r->xk + (uint64_t)t * (w->n_in / EBB_QK_K));
        j.xa = r->xk;
        j.xa_stride = sizeof(*r->xk) * (w->n_in / EBB_QK_K);
    }
    if (j.xa && w->rp8 && n >= r->rp8_min) {
        /* The products on the repacked rows (ref-llama.c: decode's too, by default). */
        j.rp8 = w->rp8;
        if (j.xa == r->xact) {
            for (uint32_t t = 0; t < n; t++)
                ebb_quant_q8_act_sums(r->xact + (uint64_t)t * (w->n_in / 32), w->n_in / 32,
                                      r->xsum + (uint64_t)t * (w->n_in / 32));
            j.xsum = r->xsum;
        }
    }
    if (j.xa) {
        j.dot = ebb_quant_get_dot_act(w->type, r->fast);
        j.dot4 = r->fast && n >= 4 ? ebb_quant_get_dot_act4(w->type) : NULL;
        j.dot8 = r->fast && n >= 8 ? ebb_quant_get_dot_act8(w->type) : NULL;
        j.r4 = r->fast && n == 1 ? ebb_quant_get_dot_rows4(w->type) : NULL;
    }
    if (r->n_threads < 2 || w->n_out < 64) {
        if (j.rp8) {
            matmul_groups(&j, 0, w->n_out / 8);
            matmul_rows(&j, r->rowbuf[0], w->n_out / 8 * 8, w->n_out);
        } else {
            matmul_rows(&j, r->rowbuf[0], 0, w->n_out);
        }
        return;
    }
    ebb__ref_run(r, &j);
}

void ebb__ref_run(struct ref *r, const struct job *jp)
{
    if (r->n_threads < 2) {
        jp->run(r, jp, 0);
        return;
    }
    r->job = *jp;
    const struct job *j = &r->job;
    atomic_store(&r->n_done, 0);
    atomic_fetch_add(&r->gen, 1);
    if (atomic_load(&r->sleepers)) {
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    j->run(r, j, 0);
    int budget = spin_budget(r, &r->main_spin);
    for (int k = 0; atomic_load(&r->n_done) != r->n_threads - 1 && k < budget; k++)
        relax();
    bool done = atomic_load(&r->n_done) == r->n_threads - 1;
    spin_note(r, &r->main_spin, budget, done);
    if (done)
        return;
    pthread_mutex_lock(&r->mu);
    atomic_store(&r->main_sleeps, true);
    while (atomic_load(&r->n_done) != r->n_threads - 1)
        pthread_cond_wait(&r->cv, &r->mu);
    atomic_store(&r->main_sleeps, false);
    pthread_mutex_unlock(&r->mu);
}

void ebb__ref_start_helper(struct ref *r, int n_threads)
{
    if (n_threads > EBB__REF_MAX_THREADS)
        n_threads = EBB__REF_MAX_THREADS;
    r->n_threads = 1;
    if (n_threads < 2)
        return;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int started = 0;
    for (int i = 1; i < n_threads; i++) {
        r->helper[i] = (struct ref_helper){r, i};
        if (pthread_create(&r->th[i], NULL, helper_main, &r->helper[i]))
            break;
        started = i;
    }
    /* Helpers read n_threads only after a job is posted, which happens after this store. */
    r->n_threads = started + 1;
    if (started)
        return;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

void ebb__ref_stop_helper(struct ref *r)
{
    if (r->n_threads > 1) {
        atomic_store(&r->quit, true);
        atomic_fetch_add(&r->gen, 1);
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        for (int i = 1; i < r->n_threads; i++)
            pthread_join(r->th[i], NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
}
