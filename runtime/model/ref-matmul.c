/* The reference's matrix products: quantized row dot products for one token, dequantized rows
 * reused over the tokens of a batch, output rows split between the caller and one helper
 * thread. */
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

static void *helper_main(void *arg)
{
    struct ref *r = arg;
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
        uint32_t mid = j.w->n_out / 2;
        matmul_rows(&j, r->rowbuf[1], mid, j.w->n_out);
        pthread_mutex_lock(&r->mu);
        r->done = seen;
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
    r->gen++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    matmul_rows(&j, r->rowbuf[0], 0, w->n_out / 2);
    pthread_mutex_lock(&r->mu);
    while (r->done != r->gen)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

void ebb__ref_start_helper(struct ref *r)
{
    r->n_threads = 2;
    const char *env = getenv("EBB_REF_THREADS");
    if (env && atoi(env) == 1)
        r->n_threads = 1;
    if (r->n_threads > 1) {
        pthread_mutex_init(&r->mu, NULL);
        pthread_cond_init(&r->cv, NULL);
        if (pthread_create(&r->th, NULL, helper_main, r)) {
            pthread_mutex_destroy(&r->mu);
            pthread_cond_destroy(&r->cv);
            r->n_threads = 1;
        }
    }
}

void ebb__ref_stop_helper(struct ref *r)
{
    if (r->n_threads > 1) {
        pthread_mutex_lock(&r->mu);
        r->quit = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
}
