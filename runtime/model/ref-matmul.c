/* The reference's matrix products: quantized row dot products for one token, dequantized rows
 * reused over the tokens of a batch, output rows split between the caller and its helper
 * threads. */
#include "ref-int.h"

#include <stdlib.h>

/* y[t][o] = W[o] . x[t] for rows o in [o0, o1). One token: the quantized dot directly. More:
 * dequantize each row once and reuse it for every token. */
static void matmul_rows(const struct job *j, float *rowbuf, uint32_t o0, uint32_t o1)
{
    const struct wmat *w = j->w;
    for (uint32_t o = o0; o < o1; o++) {
        const uint8_t *row = w->data + (uint64_t)o * w->row_bytes;
        if (j->xact) {
            for (uint32_t t = 0; t < j->n; t++)
                j->y[(uint64_t)t * w->n_out + o] = ebb_quant_dot_q8_act(
                    w->type, row, j->xact + (uint64_t)t * (w->n_in / 32), w->n_in);
            continue;
        }
        if (j->n == 1) {
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

static void *helper_main(void *arg)
{
    const struct ref_helper *h = arg;
    struct ref *r = h->r;
    uint64_t seen = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->gen == seen && !r->quit)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->quit)
            break;
        seen = r->gen;
        struct job j = r->job;
        pthread_mutex_unlock(&r->mu);
        uint32_t o0, o1;
        part_rows(j.w->n_out, h->i, r->n_threads, &o0, &o1);
        matmul_rows(&j, r->rowbuf[h->i], o0, o1);
        pthread_mutex_lock(&r->mu);
        if (++r->n_done == r->n_threads - 1)
            pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

void ebb__ref_matmul(struct ref *r, const struct wmat *w, const float *x, float *y, uint32_t n)
{
    struct job j = {w, x, NULL, y, n};
    if (r->q8 && ebb_quant_q8_act_supported(w->type)) {
        for (uint32_t t = 0; t < n; t++)
            ebb_quant_q8_act_row(x + (uint64_t)t * w->n_in, w->n_in,
                                 r->xact + (uint64_t)t * (w->n_in / 32));
        j.xact = r->xact;
    }
    if (r->n_threads < 2 || w->n_out < 64) {
        matmul_rows(&j, r->rowbuf[0], 0, w->n_out);
        return;
    }
    pthread_mutex_lock(&r->mu);
    r->job = j;
    r->n_done = 0;
    r->gen++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    uint32_t o0, o1;
    part_rows(w->n_out, 0, r->n_threads, &o0, &o1);
    matmul_rows(&j, r->rowbuf[0], o0, o1);
    pthread_mutex_lock(&r->mu);
    while (r->n_done != r->n_threads - 1)
        pthread_cond_wait(&r->cv, &r->mu);
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
        pthread_mutex_lock(&r->mu);
        r->quit = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        for (int i = 1; i < r->n_threads; i++)
            pthread_join(r->th[i], NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
}
