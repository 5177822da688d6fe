/* Reading the weights with progress, loading a replacement model on its own thread, and the
 * models a directory holds for errors about one that does not exist. */
#include "daemon/serve-int.h"

#include <dirent.h>
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

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void ebb__serve_models_in(const char *dir, char *buf, size_t n)
{
    enum { MAX_NAMES = 64 };
    char *names[MAX_NAMES];
    size_t k = 0, more = 0, w = 0;
    if (!n)
        return;
    buf[0] = 0;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(buf, n, "cannot list %s: %s", dir, strerror(errno));
        return;
    }
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".gguf"))
            continue;
        if (k == MAX_NAMES || !(names[k] = strdup(e->d_name)))
            more++;
        else
            k++;
    }
    closedir(d);
    if (!k && !more) {
        snprintf(buf, n,
                 "no .gguf files in %s (scripts/fetch-models.sh fetches SmolLM2 and "
                 "Gemma 3 there)",
                 dir);
        return;
    }
    qsort(names, k, sizeof(names[0]), cmp_str);
    int r = snprintf(buf, n, "models in %s: ", dir);
    w = r < 0 ? 0 : (size_t)r;
    for (size_t i = 0; i < k; i++) {
        if (w < n) {
            r = snprintf(buf + w, n - w, "%s%s", i ? ", " : "", names[i]);
            w += r < 0 ? 0 : (size_t)r;
        }
        free(names[i]);
    }
    if (more && w < n)
        snprintf(buf + w, n - w, " and %zu more", more);
}
