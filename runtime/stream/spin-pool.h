/* A pool of worker threads for short host jobs that follow each other closely: the experts the
 * host computes beside the expert cache (model-cl-xhost.c), two jobs of a fraction of a
 * millisecond in every layer of a decode step. A pool that sleeps between jobs pays a wake-up
 * (a futex and, in a virtual machine, an interrupt between cores) per worker and per job (on
 * the H200 machine the engine thread's wait for two host experts was 0.111 ms a layer step on
 * such a pool, 0.068-0.079 on this one); here the workers poll for the next job for spin_ns after
 * each one and only then sleep, so that a decode keeps them awake and an idle daemon does not.
 *
 * One owner thread submits jobs, one at a time, as with stream-pool.h: ebb_spin_pool_run (the
 * owner takes tasks too and returns when all are done), or ebb_spin_pool_start then
 * ebb_spin_pool_wait (the workers alone). Tasks are handed out one at a time from a shared
 * counter; a job is over when every worker has found the counter past the last task, so that
 * the next job can reuse it. Nothing is allocated per job. */
#ifndef EBB_RUNTIME_SPIN_POOL_H
#define EBB_RUNTIME_SPIN_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

/* Task i of a job; runs on a worker or on the owner, concurrently with the job's other tasks. */
typedef void (*ebb_spin_task_fn)(void *ctx, uint32_t i);

struct ebb_spin_pool;

/* A pool of n_threads - 1 workers (the owner is the n-th thread of ebb_spin_pool_run; 0 or 1: no
 * workers, every job runs on the owner), each polling for spin_ns after a job before it sleeps
 * (0: sleeps at once). EBB_ENOMEM when a thread cannot be started. */
ebb_err ebb_spin_pool_new(uint32_t n_threads, uint64_t spin_ns, struct ebb_spin_pool **out,
                          struct ebb_diag *diag);

/* Waits for a started job, stops and joins the workers; accepts NULL. */
void ebb_spin_pool_free(struct ebb_spin_pool *p);

/* The workers and the owner (>= 1). */
uint32_t ebb_spin_pool_threads(const struct ebb_spin_pool *p);

/* Runs tasks 0..n-1 of fn on the workers and the calling thread; returns when all are done. A
 * job started before is waited for first. */
void ebb_spin_pool_run(struct ebb_spin_pool *p, uint32_t n, ebb_spin_task_fn fn, void *ctx);

/* Starts tasks 0..n-1 of fn on the workers and returns at once (without workers they run here
 * first); ctx stays valid until ebb_spin_pool_wait. A job started before is waited for first. */
void ebb_spin_pool_start(struct ebb_spin_pool *p, uint32_t n, ebb_spin_task_fn fn, void *ctx);

/* Waits until the job started last is done (at once when there is none); polls for spin_ns
 * before it sleeps. */
void ebb_spin_pool_wait(struct ebb_spin_pool *p);

/* Wakes the workers that sleep, without a job: they poll for the next one for spin_ns again. For
 * an owner that knows a job is coming shortly, so that its start does not pay their wake-up
 * (a hint: a worker that falls asleep just after it sleeps on). Does nothing when none sleep. */
void ebb_spin_pool_wake(struct ebb_spin_pool *p);

/* Workers asleep now (a snapshot, for tests and diagnostics). */
uint32_t ebb_spin_pool_sleeping(const struct ebb_spin_pool *p);

/* Waits the owner spent asleep after its polls ran out, and jobs so far (the figures behind the
 * choice of spin_ns). */
void ebb_spin_pool_counts(const struct ebb_spin_pool *p, uint64_t *jobs, uint64_t *slept);

#endif
