/* `ebb serve` internals shared by serve.c and serve-load.c: reading the weights with progress
 * and loading a replacement model on a thread of its own (SIGHUP with a changed model). */
#ifndef EBB_DAEMON_SERVE_INT_H
#define EBB_DAEMON_SERVE_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

#include <uv.h>

#include "model/model.h"
#include "daemon/warm.h"

/* A model opened on a thread of its own while the running one keeps serving. */
struct ebb__loader {
    uv_async_t async; /* wakes the loop when the thread is done */
    pthread_t thread;
    bool busy; /* a thread runs or its result was not collected yet */
    bool inited;
    char path[PATH_MAX];
    char device[128];
    char model_id[256];
    struct ebb_model_params mp;
    /* written by the thread, read by the loop after async */
    struct ebb_model *model;
    ebb_err rc;
    char msg[256];
    double secs;
    /* loop thread: called once the thread is done; the callee owns l->model (if non-NULL) */
    void (*done)(struct ebb__loader *l);
    void *ud;
};

/* Prepares l on loop (once). */
ebb_err ebb__loader_init(struct ebb__loader *l, uv_loop_t *loop);
/* Starts warming and opening mp (strings copied) unless a load is already running (EBB_EBUSY). */
ebb_err ebb__loader_start(struct ebb__loader *l, const struct ebb_model_params *mp,
                          const char *model_id);
/* Waits for a running thread, closes a model nobody took and closes the async handle (run the
 * loop once more afterwards). */
void ebb__loader_fini(struct ebb__loader *l);

#endif
