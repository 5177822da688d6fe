/* Ollama's /api/pull mapped onto ebb pull (runtime/fetch): the model is fetched from Hugging
 * Face into models_dir on a thread of its own, which writes ollama's progress lines into the
 * pull under its lock; the server's tick (every 250 ms, loop thread) moves them into the
 * request's output and wakes the suspended connection; a pull that ended is joined, its model
 * added to a several-model daemon's catalogue, and the request released. The request stays
 * alive while the thread runs (engine_ref), so a client that hangs up does not stop the
 * download: the next pull or `ebb pull` finds the file whole. */
#include "ollama.h"
#include "ollama-int.h"
#include "base/log.h"
#include "fetch/fetch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ebb__pull {
    struct ebb_api *a;
    struct ebb__req *r;
    struct ebb__pull *next;
    pthread_t th;
    bool stream;
    char spec[1024];
    volatile int cancel; /* ebb__ollama_pull_stop: the thread stops at its next read */
    pthread_mutex_t mu;
    /* (mu) written by the thread */
    struct ebb__abuf pend; /* NDJSON lines not yet moved to r->out */
    bool done;
    bool joined; /* loop thread */
    ebb_err rc;
    char msg[512];
    char path[4096];
    /* thread only: the last line's file and time, so lines come at most 4 times a second */
    char last_file[256];
    double last_t;
};

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One NDJSON line (obj stolen) into the pending output. */
static void put_line(struct ebb__pull *p, json_t *obj)
{
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    pthread_mutex_lock(&p->mu);
    if (s) {
        ebb__abuf_puts(&p->pend, s);
        ebb__abuf_puts(&p->pend, "\n");
    }
    pthread_mutex_unlock(&p->mu);
    free(s);
}

/* The pull thread's progress, as ollama reports a pull: "pulling manifest", then per file
 * "pulling sha256:..." with digest, total and completed. */
static void on_progress(const struct ebb_pull_progress *pp, void *ud)
{
    struct ebb__pull *p = ud;
    char status[400];
    if (pp->phase == EBB_PULL_RESOLVING) {
        put_line(p, json_pack("{ss}", "status", "pulling manifest"));
        return;
    }
    if (pp->phase == EBB_PULL_RETRYING) {
        snprintf(status, sizeof(status), "retrying: %s", pp->note ? pp->note : "");
        put_line(p, json_pack("{ss}", "status", status));
        return;
    }
    double t = mono();
    bool same = !strcmp(p->last_file, pp->file);
    if (same && pp->phase != EBB_PULL_DONE && t - p->last_t < 0.25)
        return;
    snprintf(p->last_file, sizeof(p->last_file), "%s", pp->file);
    p->last_t = t;
    char digest[80] = "";
    if (pp->sha256 && pp->sha256[0])
        snprintf(digest, sizeof(digest), "sha256:%s", pp->sha256);
    snprintf(status, sizeof(status), "pulling %s", digest[0] ? digest : pp->file);
    json_t *o = json_pack("{sssssIsI}", "status", status, "digest", digest, "total",
                          (json_int_t)pp->total, "completed", (json_int_t)pp->done);
    if (o && pp->n_parts > 1)
        json_object_set_new(o, "file", json_string(pp->file));
    put_line(p, o);
}

static void *pull_main(void *arg)
{
    struct ebb__pull *p = arg;
    struct ebb_diag d = {{0}};
    char path[4096] = "";
    struct ebb_pull_opts o = {
        .retries = -1, .progress = on_progress, .ud = p, .cancel = &p->cancel};
    ebb_err rc = ebb_pull(p->spec, p->a->models_dir, &o, path, sizeof(path), &d);
    if (rc == EBB_OK) {
        put_line(p, json_pack("{ss}", "status", "verifying sha256 digest"));
        put_line(p, json_pack("{ss}", "status", "writing manifest"));
        put_line(p, json_pack("{ss}", "status", "success"));
    } else if (p->stream) {
        put_line(p, json_pack("{ss}", "error", d.msg[0] ? d.msg : ebb_err_str(rc)));
    }
    pthread_mutex_lock(&p->mu);
    p->rc = rc;
    snprintf(p->msg, sizeof(p->msg), "%s", d.msg[0] ? d.msg : ebb_err_str(rc));
    snprintf(p->path, sizeof(p->path), "%s", path);
    p->done = true;
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static ssize_t pull_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct ebb__req *r = cls;
    if (r->disconnected || r->out.oom)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = ebb__out_take(r, buf, max);
    if (n)
        return (ssize_t)n;
    if (r->pull_done)
        return MHD_CONTENT_READER_END_OF_STREAM;
    ebb__suspend(r);
    return 0;
}

void ebb__ollama_pull_start(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    char msg[700];
    if (!a->models_dir) {
        ebb__reply_error(r, 501, "/api/pull needs a models directory (models_dir)", NULL, NULL);
        return;
    }
    json_error_t je;
    json_t *o = json_loadb(r->body.p ? r->body.p : "", r->body.n, 0, &je);
    json_t *m = json_object_get(o, "model");
    if (!m)
        m = json_object_get(o, "name");
    json_t *st = json_object_get(o, "stream");
    struct ebb_diag d = {{0}};
    if (!json_is_object(o) || !json_is_string(m) || (st && !json_is_boolean(st))) {
        ebb__reply_error(r, 400,
                         !json_is_object(o)   ? "the body is not a JSON object"
                         : !json_is_string(m) ? "model is required (a string)"
                                              : "stream must be true or false",
                         NULL, NULL);
        goto out;
    }
    const char *spec = json_string_value(m);
    if (ebb_pull_check_spec(spec, &d) || strlen(spec) >= sizeof(((struct ebb__pull *)0)->spec)) {
        snprintf(msg, sizeof(msg),
                 "%s (ebb pulls from Hugging Face: hf.co/OWNER/REPO:QUANT, not ollama's library "
                 "names)",
                 d.msg[0] ? d.msg : "model name too long");
        ebb__reply_error(r, 400, msg, NULL, NULL);
        goto out;
    }
    struct ebb__pull *p = calloc(1, sizeof(*p));
    if (!p) {
        ebb__reply_error(r, 500, "out of memory", NULL, NULL);
        goto out;
    }
    p->a = a;
    p->r = r;
    p->stream = !st || json_is_true(st);
    snprintf(p->spec, sizeof(p->spec), "%s", spec);
    pthread_mutex_init(&p->mu, NULL);
    if (pthread_create(&p->th, NULL, pull_main, p)) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        ebb__reply_error(r, 500, "cannot start the pull's thread", NULL, NULL);
        goto out;
    }
    p->next = a->pulls;
    a->pulls = p;
    r->pull = p;
    r->engine_ref = true;
    if (p->stream) {
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, pull_reader, r, NULL);
        MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        ebb__add_cors(r, resp);
        MHD_queue_response(r->conn, 200, resp);
        MHD_destroy_response(resp);
        r->answered = true;
        r->status = 200;
    } else {
        ebb__suspend(r);
    }
out:
    json_decref(o);
}

void ebb__ollama_pull_resumed(struct ebb__req *r)
{
    /* Not streamed: out holds the answer (the error message on failure), status its HTTP
     * status. */
    char msg[600];
    snprintf(msg, sizeof(msg), "%.*s", r->out.p ? (int)r->out.n : 0, r->out.p ? r->out.p : "");
    if (r->status == 200)
        ebb__reply(r, 200, "application/json", msg, strlen(msg));
    else
        ebb__reply_error(r, r->status ? r->status : 502, msg[0] ? msg : "the pull failed", NULL,
                         NULL);
}

/* Moves p's output to its request; when the thread has ended, joins it, answers, frees p. */
static bool pump(struct ebb__pull *p)
{
    struct ebb__req *r = p->r;
    pthread_mutex_lock(&p->mu);
    bool done = p->done;
    if (p->stream && p->pend.n)
        ebb__abuf_put(&r->out, p->pend.p, p->pend.n);
    p->pend.n = 0;
    pthread_mutex_unlock(&p->mu);
    if (done) {
        if (!p->joined)
            pthread_join(p->th, NULL);
        p->joined = true;
        bool added = false;
        if (p->rc == EBB_OK && ebb__catalogue_add(p->a, p->path, &added) == EBB_OK && added)
            ebb_log(EBB_LOG_INFO, "api", "pulled %s: now served", p->path);
        if (!p->stream) {
            r->out.n = r->out_off = 0;
            if (p->rc == EBB_OK) {
                ebb__abuf_puts(&r->out, "{\"status\":\"success\"}");
                r->status = 200;
            } else {
                ebb__abuf_puts(&r->out, p->msg);
                r->status = p->rc == EBB_ENOTFOUND ? 404 : p->rc == EBB_EINVAL ? 400 : 502;
            }
        }
        r->pull_done = true;
    }
    if (r->conn && r->suspended && (done || r->out.n))
        ebb__resume(r);
    if (!done)
        return false;
    r->pull = NULL;
    ebb__abuf_fini(&p->pend);
    pthread_mutex_destroy(&p->mu);
    free(p);
    ebb__req_engine_released(r);
    return true;
}

void ebb__ollama_pull_tick(struct ebb_api *a)
{
    for (struct ebb__pull **pp = &a->pulls; *pp;) {
        struct ebb__pull *p = *pp;
        struct ebb__pull *next = p->next;
        if (pump(p))
            *pp = next;
        else
            pp = &p->next;
    }
}

void ebb__ollama_pull_stop(struct ebb_api *a)
{
    for (struct ebb__pull *p = a->pulls; p; p = p->next)
        p->cancel = 1;
    while (a->pulls) {
        struct ebb__pull *p = a->pulls;
        a->pulls = p->next;
        pthread_join(p->th, NULL); /* done is set now: pump frees p */
        p->joined = true;
        pump(p);
    }
}
