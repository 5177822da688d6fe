/* A small pool of worker threads for host-side copies that one thread cannot keep up with: the
 * streamer's reads of one layer in chunks (stream-io.c) and the expert cache's fills of its
 * pinned staging from the mapped file (model-cl-experts.c). A job is n tasks of one function;
 * the threads take the next task until none is left.
 *
 * One owner thread submits jobs, one at a time: ebb_stream_pool_run (the owner works too and
 * returns when all tasks are done), or ebb_stream_pool_start then ebb_stream_pool_wait (the
 * workers alone, while the owner does something else). The workers are started at creation
 * and sleep between jobs; nothing is allocated per job. */
#ifndef EBB_RUNTIME_STREAM_POOL_H
#define EBB_RUNTIME_STREAM_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

/* Task i of a job; runs on a worker or on the owner, concurrently with the job's other tasks. */
typedef void (*ebb_stream_task_fn)(void *ctx, uint32_t i);

struct ebb_stream_pool;

/* A pool of n_threads - 1 workers (the owner is the n-th thread of ebb_stream_pool_run); 0 or 1
 * makes a pool without workers, whose jobs run on the owner alone. EBB_ENOMEM when a thread
 * cannot be started. */
ebb_err ebb_stream_pool_new(uint32_t n_threads, struct ebb_stream_pool **out,
                            struct ebb_diag *diag);

/* Waits for a started job, stops and joins the workers; accepts NULL. */
void ebb_stream_pool_free(struct ebb_stream_pool *p);

/* Threads that share a job of ebb_stream_pool_run: the workers and the owner (>= 1). */
uint32_t ebb_stream_pool_threads(const struct ebb_stream_pool *p);

/* Runs tasks 0..n-1 of fn on the workers and the calling thread; returns when all are done.
 * A job started before is waited for first. */
void ebb_stream_pool_run(struct ebb_stream_pool *p, uint32_t n, ebb_stream_task_fn fn, void *ctx);

/* Starts tasks 0..n-1 of fn on the workers and returns at once (a pool without workers runs
 * them here first); ctx must stay valid until ebb_stream_pool_wait. A job started before is
 * waited for first. */
void ebb_stream_pool_start(struct ebb_stream_pool *p, uint32_t n, ebb_stream_task_fn fn, void *ctx);

/* Waits until the job started last is done (at once when there is none). */
void ebb_stream_pool_wait(struct ebb_stream_pool *p);

/* Whether a started job is not finished yet (owner thread). */
bool ebb_stream_pool_busy(struct ebb_stream_pool *p);

#endif
