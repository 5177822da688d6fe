/* The copy threads: see stream-pool.h. One mutex guards the job; a task's work runs without it.
 * `next` is the next task to hand out and `done` counts the finished ones, so the job is over
 * when done == n, and a worker sleeps while next == n. */
#include "stream-pool.h"

#include <pthread.h>
#include <stdlib.h>

struct ebb_stream_pool {
    pthread_t *th;
    uint32_t n_workers, n_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    bool stop;
    ebb_stream_task_fn fn;
    void *ctx;
    uint32_t n, next, done;
};

/* Takes tasks until none is left to hand out; called and returns with the lock held. */
static void take_tasks(struct ebb_stream_pool *p)
{
    while (p->next < p->n) {
        uint32_t i = p->next++;
        ebb_stream_task_fn fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, i);
        pthread_mutex_lock(&p->mu);
        if (++p->done == p->n)
            pthread_cond_broadcast(&p->done_cv);
    }
}

static void *worker_main(void *arg)
{
    struct ebb_stream_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        if (p->next < p->n)
            take_tasks(p);
        else
            pthread_cond_wait(&p->work_cv, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

ebb_err ebb_stream_pool_new(uint32_t n_threads, struct ebb_stream_pool **out, struct ebb_diag *diag)
{
    struct ebb_stream_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return EBB_ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->n_workers = n_threads > 1 ? n_threads - 1 : 0;
    if (p->n_workers && !(p->th = calloc(p->n_workers, sizeof(*p->th)))) {
        ebb_stream_pool_free(p);
        return EBB_ENOMEM;
    }
    for (; p->n_started < p->n_workers; p->n_started++)
        if (pthread_create(&p->th[p->n_started], NULL, worker_main, p)) {
            ebb_stream_pool_free(p);
            return ebb_diag_set(diag, EBB_ENOMEM, "cannot start a copy thread (%u of %u)",
                                p->n_started + 1, p->n_workers);
        }
    *out = p;
    return EBB_OK;
}

void ebb_stream_pool_free(struct ebb_stream_pool *p)
{
    if (!p)
        return;
    ebb_stream_pool_wait(p);
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; i < p->n_started; i++)
        pthread_join(p->th[i], NULL);
    free(p->th);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

uint32_t ebb_stream_pool_threads(const struct ebb_stream_pool *p)
{
    return p->n_workers + 1;
}

/* Sets the job up and wakes the workers; called with the lock held, after the last job. */
static void post(struct ebb_stream_pool *p, uint32_t n, ebb_stream_task_fn fn, void *ctx)
{
    while (p->done < p->n)
        pthread_cond_wait(&p->done_cv, &p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->next = p->done = 0;
    if (p->n_workers)
        pthread_cond_broadcast(&p->work_cv);
}

void ebb_stream_pool_run(struct ebb_stream_pool *p, uint32_t n, ebb_stream_task_fn fn, void *ctx)
{
    pthread_mutex_lock(&p->mu);
    post(p, n, fn, ctx);
    take_tasks(p);
    while (p->done < p->n)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void ebb_stream_pool_start(struct ebb_stream_pool *p, uint32_t n, ebb_stream_task_fn fn, void *ctx)
{
    pthread_mutex_lock(&p->mu);
    post(p, n, fn, ctx);
    if (!p->n_workers)
        take_tasks(p);
    pthread_mutex_unlock(&p->mu);
}

void ebb_stream_pool_wait(struct ebb_stream_pool *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->done < p->n)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

bool ebb_stream_pool_busy(struct ebb_stream_pool *p)
{
    pthread_mutex_lock(&p->mu);
    bool busy = p->done < p->n;
    pthread_mutex_unlock(&p->mu);
    return busy;
}
