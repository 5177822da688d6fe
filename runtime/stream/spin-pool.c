/* The polling pool: see spin-pool.h. A job is published by writing fn, ctx and n and then
 * bumping gen (sequentially consistent, as every atomic here); a worker that sees gen move
 * takes tasks from `next` until it passes n, then adds itself to `idle`. The owner posts the
 * next job only once idle counts every worker, so no worker still reads the last job's fields
 * or counter when they change.
 *
 * Sleeping without a lost wake-up: a worker about to sleep counts itself in `sleepers` and then
 * reads gen again under the mutex; the owner bumps gen and then reads `sleepers`, and when any
 * sleep it broadcasts under the mutex. Of the two orders, either the worker sees the new gen or
 * the owner sees the sleeper. The owner's own sleep on done_cv works the same way with
 * `waiting` against the last worker's addition to `idle`. */
#include "spin-pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

struct ebb_spin_pool {
    pthread_t *th;
    uint32_t n_workers, n_started;
    uint64_t spin_ns;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    _Atomic uint32_t gen, next, idle, sleepers, waiting, wake;
    _Atomic bool stop;
    ebb_spin_task_fn fn;
    void *ctx;
    uint32_t n;
    bool started; /* a job of ebb_spin_pool_start not waited for yet */
    uint64_t jobs, slept;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Polls until *a != v (ne) or *a == v (!ne), for at most spin_ns; whether that came. After the
 * first polls each one yields the core as well: where there are more threads than cores (the
 * engine thread, the driver's, the copy threads beside the workers) the thread that would end
 * the wait gets to run. */
static bool poll_for(_Atomic uint32_t *a, uint32_t v, bool ne, uint64_t spin_ns)
{
    if (!spin_ns)
        return (atomic_load(a) != v) == ne;
    uint64_t t0 = 0;
    for (uint32_t i = 0;; i++) {
        if ((atomic_load(a) != v) == ne)
            return true;
        if (i < 256)
            relax();
        else
            sched_yield();
        if ((i & 63) == 63) {
            uint64_t t = now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 >= spin_ns)
                return false;
        }
    }
}

static void take_tasks(struct ebb_spin_pool *p)
{
    for (uint32_t i; (i = atomic_fetch_add(&p->next, 1)) < p->n;)
        p->fn(p->ctx, i);
}

static void *worker_main(void *arg)
{
    struct ebb_spin_pool *p = arg;
    uint32_t seen = 0;
    for (;;) {
        if (!poll_for(&p->gen, seen, true, p->spin_ns)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            uint32_t woke = atomic_load(&p->wake);
            while (atomic_load(&p->gen) == seen && atomic_load(&p->wake) == woke &&
                   !atomic_load(&p->stop))
                pthread_cond_wait(&p->work_cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            if (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                continue; /* ebb_spin_pool_wake: poll again */
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = atomic_load(&p->gen);
        take_tasks(p);
        if (atomic_fetch_add(&p->idle, 1) + 1 == p->n_workers && atomic_load(&p->waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_broadcast(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

ebb_err ebb_spin_pool_new(uint32_t n_threads, uint64_t spin_ns, struct ebb_spin_pool **out,
                          struct ebb_diag *diag)
{
    struct ebb_spin_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return EBB_ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->spin_ns = spin_ns;
    p->n_workers = n_threads > 1 ? n_threads - 1 : 0;
    atomic_store(&p->idle, p->n_workers);
    if (p->n_workers && !(p->th = calloc(p->n_workers, sizeof(*p->th)))) {
        ebb_spin_pool_free(p);
        return EBB_ENOMEM;
    }
    for (; p->n_started < p->n_workers; p->n_started++)
        if (pthread_create(&p->th[p->n_started], NULL, worker_main, p)) {
            /* the workers that did start must not wait for the others at their first job */
            p->n_workers = p->n_started;
            ebb_spin_pool_free(p);
            return ebb_diag_set(diag, EBB_ENOMEM, "cannot start a host thread (%u of %u)",
                                p->n_started + 1, n_threads - 1);
        }
    *out = p;
    return EBB_OK;
}

void ebb_spin_pool_free(struct ebb_spin_pool *p)
{
    if (!p)
        return;
    ebb_spin_pool_wait(p);
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->gen, 1);
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

uint32_t ebb_spin_pool_threads(const struct ebb_spin_pool *p)
{
    return p->n_workers + 1;
}

void ebb_spin_pool_wait(struct ebb_spin_pool *p)
{
    if (!p->started)
        return;
    p->started = false;
    if (poll_for(&p->idle, p->n_workers, false, p->spin_ns))
        return;
    p->slept++;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->waiting, 1);
    while (atomic_load(&p->idle) != p->n_workers)
        pthread_cond_wait(&p->done_cv, &p->mu);
    atomic_store(&p->waiting, 0);
    pthread_mutex_unlock(&p->mu);
}

/* Publishes a job for the workers (after the last one is over). */
static void post(struct ebb_spin_pool *p, uint32_t n, ebb_spin_task_fn fn, void *ctx)
{
    ebb_spin_pool_wait(p);
    p->jobs++;
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    atomic_store(&p->next, 0);
    atomic_store(&p->idle, 0);
    p->started = true;
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

void ebb_spin_pool_run(struct ebb_spin_pool *p, uint32_t n, ebb_spin_task_fn fn, void *ctx)
{
    if (!p->n_workers) {
        for (uint32_t i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    post(p, n, fn, ctx);
    take_tasks(p);
    ebb_spin_pool_wait(p);
}

void ebb_spin_pool_start(struct ebb_spin_pool *p, uint32_t n, ebb_spin_task_fn fn, void *ctx)
{
    if (!p->n_workers) {
        for (uint32_t i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    post(p, n, fn, ctx);
}

void ebb_spin_pool_wake(struct ebb_spin_pool *p)
{
    if (!atomic_load(&p->sleepers))
        return;
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->wake, 1);
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
}

uint32_t ebb_spin_pool_sleeping(const struct ebb_spin_pool *p)
{
    return atomic_load(&((struct ebb_spin_pool *)p)->sleepers);
}

void ebb_spin_pool_counts(const struct ebb_spin_pool *p, uint64_t *jobs, uint64_t *slept)
{
    *jobs = p->jobs;
    *slept = p->slept;
}
