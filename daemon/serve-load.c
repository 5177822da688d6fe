/* Reading the weights with progress, and loading a replacement model on its own thread. */
#include "daemon/serve-int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "daemon/notify.h"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *loader_main(void *arg)
{
    struct ebb__loader *l = arg;
    struct ebb_diag d = {{0}};
    char what[300];
    double t0 = mono();
    ebb_warm_what(l->path, what, sizeof(what));
    ebb_warm_file(l->path, what);
    ebb_notify_status("%s: opening on the device", what);
    l->model = NULL;
    l->rc = ebb_model_open(&l->mp, &l->model, &d);
    size_t ml = l->rc ? strnlen(d.msg, sizeof(l->msg) - 1) : 0;
    memcpy(l->msg, d.msg, ml);
    l->msg[ml] = 0;
    l->secs = mono() - t0;
    uv_async_send(&l->async);
    return NULL;
}

static void on_loader_async(uv_async_t *h)
{
    struct ebb__loader *l = h->data;
    if (!l->busy)
        return;
    pthread_join(l->thread, NULL);
    l->busy = false;
    if (l->done)
        l->done(l);
}

ebb_err ebb__loader_init(struct ebb__loader *l, uv_loop_t *loop)
{
    l->async.data = l;
    if (uv_async_init(loop, &l->async, on_loader_async))
        return EBB_ENOMEM;
    l->inited = true;
    return EBB_OK;
}

ebb_err ebb__loader_start(struct ebb__loader *l, const struct ebb_model_params *mp,
                          const char *model_id)
{
    if (l->busy)
        return EBB_EBUSY;
    if (snprintf(l->path, sizeof(l->path), "%s", mp->path) >= (int)sizeof(l->path))
        return EBB_EINVAL;
    snprintf(l->device, sizeof(l->device), "%s", mp->device ? mp->device : "auto");
    snprintf(l->model_id, sizeof(l->model_id), "%s", model_id);
    l->mp = *mp;
    l->mp.path = l->path;
    l->mp.device = l->device;
    l->model = NULL;
    l->rc = EBB_OK;
    l->msg[0] = 0;
    l->busy = true;
    if (pthread_create(&l->thread, NULL, loader_main, l)) {
        l->busy = false;
        return EBB_ENOMEM;
    }
    return EBB_OK;
}

void ebb__loader_fini(struct ebb__loader *l)
{
    if (l->busy) {
        pthread_join(l->thread, NULL);
        l->busy = false;
        ebb_model_close(l->model);
        l->model = NULL;
    }
    if (l->inited) {
        uv_close((uv_handle_t *)&l->async, NULL);
        l->inited = false;
    }
}
