/* The polling pool (stream/spin-pool.h): every task of a job runs exactly once, on several
 * threads when the pool has workers; run returns only after all of them; start returns while a
 * job is under way and wait ends it; thousands of short jobs back to back lose nothing, with
 * workers that poll and with workers that sleep between jobs (spin 0) or after a pause longer
 * than their polls; a wake makes sleeping workers poll again and loses no job; a pool of one
 * thread runs its jobs on the owner; NULL frees are harmless. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stream/spin-pool.h"

#define N_TASK 64

struct job {
    atomic_int runs[N_TASK];
    atomic_int done;
    pthread_t owner;
    atomic_int off_owner; /* tasks that ran on another thread */
    atomic_int gate;      /* tasks wait while 0 */
    long sleep_ns;        /* each task's length */
};

static void task(void *ctx, uint32_t i)
{
    struct job *j = ctx;
    while (!atomic_load(&j->gate)) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (!pthread_equal(pthread_self(), j->owner))
        atomic_fetch_add(&j->off_owner, 1);
    if (j->sleep_ns) {
        struct timespec ts = {0, j->sleep_ns};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(&j->runs[i], 1);
    atomic_fetch_add(&j->done, 1);
}

static void job_init(struct job *j, int gate, long sleep_ns)
{
    memset(j, 0, sizeof(*j));
    j->owner = pthread_self();
    atomic_store(&j->gate, gate);
    j->sleep_ns = sleep_ns;
}

static void each_once(struct job *j, uint32_t n)
{
    for (uint32_t i = 0; i < N_TASK; i++)
        assert_int_equal(atomic_load(&j->runs[i]), i < n ? 1 : 0);
}

static void run_jobs(void **state)
{
    (void)state;
    struct ebb_spin_pool *p = NULL;
    assert_int_equal(ebb_spin_pool_new(4, 200000, &p, NULL), EBB_OK);
    assert_int_equal(ebb_spin_pool_threads(p), 4);
    struct job j;
    for (uint32_t n = 0; n <= N_TASK; n += 13) {
        job_init(&j, 1, 200000);
        ebb_spin_pool_run(p, n, task, &j);
        assert_int_equal(atomic_load(&j.done), (int)n); /* all done on return */
        each_once(&j, n);
    }
    job_init(&j, 1, 200000);
    ebb_spin_pool_run(p, N_TASK, task, &j);
    assert_true(atomic_load(&j.off_owner) > 0); /* the workers took some */
    uint64_t jobs, slept;
    ebb_spin_pool_counts(p, &jobs, &slept);
    assert_int_equal(jobs, 6); /* n = 0, 13, 26, 39, 52 and the last */
    ebb_spin_pool_free(p);
    ebb_spin_pool_free(NULL);
}

static void start_wait(void **state)
{
    (void)state;
    struct ebb_spin_pool *p = NULL;
    assert_int_equal(ebb_spin_pool_new(3, 100000, &p, NULL), EBB_OK);
    struct job j, k;
    job_init(&j, 0, 0);
    ebb_spin_pool_start(p, N_TASK, task, &j);
    /* The tasks wait for the gate: start has returned with the job under way. */
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
    assert_int_equal(atomic_load(&j.done), 0);
    atomic_store(&j.gate, 1);
    ebb_spin_pool_wait(p);
    each_once(&j, N_TASK);
    assert_int_equal(atomic_load(&j.off_owner), N_TASK); /* the workers alone */
    /* A job started while another runs waits for it; a run after a start likewise. */
    job_init(&j, 1, 100000);
    job_init(&k, 1, 100000);
    ebb_spin_pool_start(p, 20, task, &j);
    ebb_spin_pool_start(p, 30, task, &k);
    each_once(&j, 20);
    ebb_spin_pool_run(p, 10, task, &j);
    each_once(&k, 30);
    ebb_spin_pool_wait(p);
    ebb_spin_pool_wait(p); /* nothing under way: returns */
    /* Free waits for a job under way. */
    job_init(&j, 1, 100000);
    ebb_spin_pool_start(p, N_TASK, task, &j);
    ebb_spin_pool_free(p);
    each_once(&j, N_TASK);
}

/* Many short jobs in a row, alternating start/wait and run, with pauses longer than the polls
 * now and then (the workers asleep when the next job comes). */
static void many_jobs(uint64_t spin_ns)
{
    struct ebb_spin_pool *p = NULL;
    assert_int_equal(ebb_spin_pool_new(3, spin_ns, &p, NULL), EBB_OK);
    struct job j;
    for (int r = 0; r < 3000; r++) {
        uint32_t n = (uint32_t)(r % N_TASK) + 1;
        job_init(&j, 1, 0);
        if (r & 1) {
            ebb_spin_pool_start(p, n, task, &j);
            ebb_spin_pool_wait(p);
        } else {
            ebb_spin_pool_run(p, n, task, &j);
        }
        assert_int_equal(atomic_load(&j.done), (int)n);
        each_once(&j, n);
        if (r % 500 == 499) {
            struct timespec ts = {0, 3000000};
            nanosleep(&ts, NULL);
        }
    }
    ebb_spin_pool_free(p);
}

static void many_polling(void **state)
{
    (void)state;
    many_jobs(1000000);
}

static void many_sleeping(void **state)
{
    (void)state;
    many_jobs(0);
}

/* Waits up to ms milliseconds for the pool's sleeping workers to number n; whether they did. */
static bool sleeping_becomes(struct ebb_spin_pool *p, uint32_t n, int ms)
{
    for (int i = 0; i < ms; i++) {
        if (ebb_spin_pool_sleeping(p) == n)
            return true;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return ebb_spin_pool_sleeping(p) == n;
}

/* ebb_spin_pool_wake: workers asleep after their polls poll again without a job, and jobs
 * after wakes (also wakes of workers that never poll, spin 0) run every task once. */
static void wake(void **state)
{
    (void)state;
    struct ebb_spin_pool *p = NULL;
    assert_int_equal(ebb_spin_pool_new(3, 1500000000ull, &p, NULL), EBB_OK);
    ebb_spin_pool_wake(p); /* none asleep: nothing happens */
    assert_true(sleeping_becomes(p, 2, 10000));
    ebb_spin_pool_wake(p);
    assert_true(sleeping_becomes(p, 0, 1400));
    struct job j;
    job_init(&j, 1, 0);
    ebb_spin_pool_run(p, N_TASK, task, &j);
    each_once(&j, N_TASK);
    ebb_spin_pool_free(p);
    assert_int_equal(ebb_spin_pool_new(3, 0, &p, NULL), EBB_OK);
    for (int r = 0; r < 1000; r++) {
        uint32_t n = (uint32_t)(r % N_TASK) + 1;
        job_init(&j, 1, 0);
        ebb_spin_pool_wake(p);
        if (r & 1) {
            ebb_spin_pool_start(p, n, task, &j);
            ebb_spin_pool_wake(p);
            ebb_spin_pool_wait(p);
        } else {
            ebb_spin_pool_run(p, n, task, &j);
        }
        assert_int_equal(atomic_load(&j.done), (int)n);
        each_once(&j, n);
    }
    ebb_spin_pool_free(p);
}

static void owner_only(void **state)
{
    (void)state;
    struct ebb_spin_pool *p = NULL;
    assert_int_equal(ebb_spin_pool_new(1, 100000, &p, NULL), EBB_OK);
    assert_int_equal(ebb_spin_pool_threads(p), 1);
    struct job j;
    job_init(&j, 1, 0);
    ebb_spin_pool_start(p, 10, task, &j); /* no workers: done before it returns */
    each_once(&j, 10);
    ebb_spin_pool_wait(p);
    job_init(&j, 1, 0);
    ebb_spin_pool_run(p, N_TASK, task, &j);
    each_once(&j, N_TASK);
    assert_int_equal(atomic_load(&j.off_owner), 0);
    ebb_spin_pool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(run_jobs),     cmocka_unit_test(start_wait),
        cmocka_unit_test(many_polling), cmocka_unit_test(many_sleeping),
        cmocka_unit_test(owner_only),   cmocka_unit_test(wake),
    };
    if (getenv("EBB_TEST_FILTER"))
        cmocka_set_test_filter(getenv("EBB_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
