/* `ebb serve`: configuration, the libuv loop, the HTTP API and the engine thread, signals. */
#include "cmds.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "api/api.h"
#include "api/chat-template.h"
#include "daemon/config.h"
#include "daemon/listenfd.h"
#include "base/log.h"
#include "daemon/notify.h"
#include "daemon/serve-int.h"
#include "sched/scheduler.h"

struct serve {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm, sighup;
    uv_timer_t grace, watchdog, probe;
    struct ebb_config *cfg;
    const char *config_path;
    const struct ebb_config_arg *args;
    size_t n_args;
    unsigned keepalive_ms;
    struct ebb_api *api;
    struct ebb_sched *sched;
    bool stopping;
    bool cancelled;
    bool failed;
    double deadline;
    uint32_t grace_ms;
    /* model swap on SIGHUP: loaded on s->loader's thread, swapped in once nothing is in flight */
    struct ebb__loader loader;
    uv_timer_t swap_timer;
    struct ebb_model *swap_model; /* loaded, waiting for in-flight requests to finish */
    double swap_t0;
    bool model_failed; /* the last reload could not load its model: the next SIGHUP retries */
    char cur_id[256];  /* the model served */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ebb serve [-m MODEL] [flags]\n\n"
            "Serves an OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models,\n"
            "/health, /metrics, /tokenize, /detokenize) for one GGUF model.\n\n"
            "flags (each also settable as EBB_<NAME> or in the config file):\n"
            "  -m, --model FILE           same as --model\n");
    ebb_config_usage(f);
    fprintf(f, "  --api-key and --cors-origin may be repeated; their values add up.\n\n"
               "serve-only flags:\n"
               "  --config FILE              read this config file\n"
               "  --check-config             print the effective configuration and exit\n"
               "  --http-poll MODE           epoll (Linux) or fdset (portable) (default epoll)\n"
               "  --keepalive-ms N           SSE keep-alive comment interval (default 2000)\n"
               "  --prefill-chunk N          prompt tokens per engine step (default 128)\n"
               "  -h, --help                 this help\n\n"
               "Once listening it prints 'ebb: listening on http://HOST:PORT' on stdout.\n");
}

/* The id /v1/models reports: the file name without ".gguf". */
static void model_id_of(const char *path, char *id, size_t n)
{
    const char *base = strrchr(path, '/');
    if (snprintf(id, n, "%s", base ? base + 1 : path) >= (int)n)
        id[n - 1] = 0; /* a very long name is cut (snprintf did); said for -Wformat-truncation */
    size_t l = strlen(id);
    if (l > 5 && !strcmp(id + l - 5, ".gguf"))
        id[l - 5] = 0;
}

static const char *template_of(const struct ebb_config *c)
{
    return c->chat_template && strcmp(c->chat_template, "auto") ? c->chat_template : NULL;
}

/* The model settings of a configuration (the strings stay c's). */
static struct ebb_model_params model_params_of(const struct ebb_config *c, const char *path)
{
    struct ebb_model_params mp = {
        .path = path, .device = c->device, .n_ctx = c->ctx, .n_seq = c->parallel};
    mp.prefetch = c->prefetch;
    if (c->memory_budget == EBB_CONFIG_BUDGET_AUTO)
        mp.memory_budget_auto = true;
    else
        mp.memory_budget = c->memory_budget;
    return mp;
}

static double now_ms(uv_loop_t *l)
{
    return (double)uv_now(l);
}

static void on_grace(uv_timer_t *t)
{
    struct serve *s = t->data;
    size_t n = ebb_api_in_flight(s->api);
    if (n == 0) {
        uv_stop(&s->loop);
        return;
    }
    if (now_ms(&s->loop) < s->deadline)
        return;
    if (!s->cancelled) {
        ebb_log_warn("serve", "grace period over: cancelling %zu request(s)", n);
        s->cancelled = true;
        ebb_sched_cancel_all(s->sched);
        s->deadline = now_ms(&s->loop) + 2000;
        return;
    }
    uv_stop(&s->loop);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct serve *s = h->data;
    if (s->stopping) {
        ebb_log_warn("serve", "second signal: exiting now");
        uv_stop(&s->loop);
        return;
    }
    s->stopping = true;
    ebb_log_info("serve", "%s: no new connections; waiting up to %u ms for %zu request(s)",
                 signum == SIGINT ? "SIGINT" : "SIGTERM", s->grace_ms, ebb_api_in_flight(s->api));
    ebb_notify_stopping();
    if (s->swap_model) {
        ebb_log_warn("serve", "shutting down: the model loaded for the reload is dropped");
        uv_timer_stop(&s->swap_timer);
        ebb_model_close(s->swap_model);
        s->swap_model = NULL;
        ebb_api_hold(s->api, false);
    }
    ebb_api_quiesce(s->api);
    s->deadline = now_ms(&s->loop) + s->grace_ms;
    uv_timer_start(&s->grace, on_grace, 0, 50);
}

/* Fills the API settings that come from the configuration. */
static void api_config_from(const struct serve *s, const struct ebb_config *c,
                            struct ebb_api_config *ac)
{
    ac->max_body = (size_t)c->max_body;
    ac->header_timeout_ms = c->header_timeout_ms;
    ac->body_timeout_ms = c->body_timeout_ms;
    ac->max_connections = c->max_connections;
    ac->max_connections_per_client = c->max_connections_per_client;
    ac->api_keys = c->api_keys.items;
    ac->n_api_keys = c->api_keys.n;
    ac->cors_origins = c->cors_origins.items;
    ac->n_cors_origins = c->cors_origins.n;
    ac->keepalive_ms = s->keepalive_ms;
    ac->generation = &c->generation;
    ac->ignore_model_sampling = !c->model_sampling;
}

/* Swap, step 3 (timer, loop thread): once no request is in flight, point the API and then the
 * engine at the new model and close the old one. */
static void on_swap_timer(uv_timer_t *t)
{
    struct serve *s = t->data;
    struct ebb_sched_stats st = {0};
    ebb_sched_stats(s->sched, &st);
    if (ebb_api_in_flight(s->api) || st.queued || st.active)
        return;
    uv_timer_stop(t);
    struct ebb_model *nm = s->swap_model, *old = ebb_sched_model(s->sched);
    struct ebb_diag d = {{0}};
    s->swap_model = NULL;
    const char *id = s->loader.model_id;
    ebb_err rc = ebb_api_set_model(s->api, nm, id, template_of(s->cfg), &d);
    if (!rc) {
        rc = ebb_sched_swap_model(s->sched, nm, &old, &d);
        if (rc && old) {
            struct ebb_diag d2 = {{0}};
            ebb_api_set_model(s->api, old, s->cur_id, template_of(s->cfg), &d2);
        }
    }
    if (rc) {
        ebb_log_error("serve", "reload: cannot serve %s (%s); still serving %s", id, d.msg,
                      s->cur_id);
        ebb_model_close(nm);
        s->model_failed = true;
        ebb_api_hold(s->api, false);
        ebb_notify_ready("reload failed: still serving the previous model");
        return;
    }
    ebb_model_close(old);
    ebb_log_info("serve", "now serving %s (was %s); swapped after %.0f ms of draining", id,
                 s->cur_id, now_ms(&s->loop) - s->swap_t0);
    snprintf(s->cur_id, sizeof(s->cur_id), "%s", id);
    s->model_failed = false;
    ebb_api_hold(s->api, false);
    ebb_notify_ready("model loaded");
}

/* Swap, step 2 (loop thread): the loader thread finished. On success new generations wait
 * while those in flight finish on the old model. */
static void on_model_loaded(struct ebb__loader *l)
{
    struct serve *s = l->ud;
    if (l->rc || !l->model) {
        ebb_log_error("serve", "reload: cannot load %s: %s; still serving %s", l->path, l->msg,
                      s->cur_id);
        s->model_failed = true;
        ebb_notify_ready("reload failed: still serving the previous model");
        return;
    }
    if (s->stopping) {
        ebb_model_close(l->model);
        l->model = NULL;
        return;
    }
    s->swap_model = l->model;
    l->model = NULL;
    s->swap_t0 = now_ms(&s->loop);
    ebb_log_info("serve", "loaded %s in %.1f s; swapping it in once %zu request(s) finish",
                 l->model_id, l->secs, ebb_api_in_flight(s->api));
    ebb_notify_status("swapping in %s", l->model_id);
    ebb_api_hold(s->api, true);
    uv_timer_start(&s->swap_timer, on_swap_timer, 0, 10);
}

/* Swap, step 1: starts loading the configured model on the loader thread while the current one
 * keeps serving. Returns true when a load started. */
static bool reload_model(struct serve *s)
{
    char path[PATH_MAX], id[256];
    const struct ebb_config *c = s->cfg;
    if (ebb_config_model_path(c, path, sizeof(path))) {
        ebb_log_error("serve", "reload: no model configured; still serving %s", s->cur_id);
        return false;
    }
    if (!ebb_sched_model(s->sched)) {
        ebb_log_warn("serve", "reload: the first model is still loading; send SIGHUP again once "
                              "it serves to change the model");
        return false;
    }
    if (s->loader.busy || s->swap_model) {
        ebb_log_warn("serve", "reload: a model load is already in progress; send SIGHUP again "
                              "once it is done");
        return false;
    }
    model_id_of(path, id, sizeof(id));
    struct ebb_model_params mp = model_params_of(c, path);
    if (ebb__loader_start(&s->loader, &mp, id)) {
        ebb_log_error("serve", "reload: cannot start loading %s", path);
        return false;
    }
    ebb_log_info("serve", "reload: loading %s on device %s while %s keeps serving", path,
                 c->device ? c->device : "auto", s->cur_id);
    ebb_notify_status("loading %s", id);
    return true;
}

/* SIGHUP: build the configuration again (same flags, file re-read) and apply what can change
 * while serving: log settings, limits, API keys, CORS, generation defaults at once; a changed
 * model (path, device, ctx, parallel, ...) is loaded next to the running one and swapped in.
 * Listen address changes need a restart and are reported. */
static void on_sighup(uv_signal_t *h, int signum)
{
    (void)signum;
    struct serve *s = h->data;
    struct ebb_config *next = calloc(1, sizeof(*next));
    struct ebb_diag d = {{0}};
    if (!next)
        return;
    ebb_notify_reloading();
    ebb_config_init(next);
    if (ebb_config_build(next, s->config_path, s->args, s->n_args, &d)) {
        ebb_log_error("serve", "reload failed, keeping the running configuration: %s", d.msg);
        ebb_config_fini(next);
        free(next);
        ebb_notify_ready("reload failed");
        return;
    }
    unsigned diff = ebb_config_diff(s->cfg, next);
    if (diff & EBB_CONFIG_CHANGE_LOG)
        ebb_log_configure(next->log_level, next->log_format);
    struct ebb_api_config ac = {0};
    api_config_from(s, next, &ac);
    if (ebb_api_reconfigure(s->api, &ac)) {
        ebb_log_error("serve", "reload failed: out of memory");
        ebb_config_fini(next);
        free(next);
        ebb_notify_ready("reload failed");
        return;
    }
    ebb_sched_set_queue_cap(s->sched, next->queue);
    s->grace_ms = next->shutdown_grace_ms;
    if (diff & EBB_CONFIG_CHANGE_LISTEN)
        ebb_log_warn("serve", "reload: host/port changed; they apply after a restart");
    bool load = (diff & EBB_CONFIG_CHANGE_MODEL) || s->model_failed;
    ebb_log_info("serve", "configuration reloaded");
    ebb_config_fini(s->cfg);
    free(s->cfg);
    s->cfg = next;
    if (load && !s->stopping && reload_model(s))
        return; /* READY=1 comes once the new model serves, or the load failed */
    ebb_notify_ready("configuration reloaded");
}

/* Engine thread, before the first model open: read the weights with progress. */
static void warm_before_open(void *ud, const struct ebb_model_params *mp)
{
    (void)ud;
    char what[300];
    ebb_warm_what(mp->path, what, sizeof(what));
    ebb_warm_file(mp->path, what);
    ebb_notify_status("%s: opening on the device", what);
}

/* Every 2 s: the layer streamer re-reads the memory probes (free memory, cgroup limit). */
static void on_probe(uv_timer_t *t)
{
    struct serve *s = t->data;
    struct ebb_model *m = ebb_sched_model(s->sched);
    if (m && ebb_model_streaming(m))
        ebb_model_stream_probe(m);
}

static void on_watchdog(uv_timer_t *t)
{
    (void)t;
    ebb_notify_watchdog();
}

static void on_ready(void *ud, bool ok, const char *msg)
{
    struct serve *s = ud;
    if (ok) {
        ebb_notify_ready("model loaded");
        return;
    }
    ebb_log_error("serve", "%s", msg ? msg : "the model failed to load");
    s->failed = true;
    uv_stop(&s->loop);
}

/* Appends value to a comma-separated accumulator (repeatable list flags). */
static char *join(char *acc, const char *v)
{
    size_t n = acc ? strlen(acc) : 0, m = strlen(v);
    char *p = realloc(acc, n + m + 2);
    if (!p)
        return acc;
    if (n)
        p[n++] = ',';
    memcpy(p + n, v, m + 1);
    return p;
}

int ebb_cmd_serve(int argc, char **argv)
{
    int ret = 1;
    struct ebb_config *cfgp = calloc(1, sizeof(*cfgp));
    struct ebb_diag d = {{0}};
    struct ebb_config_arg *args = calloc((size_t)argc + 2, sizeof(*args));
    size_t n_args = 0;
    char *keys = NULL, *origins = NULL;
    const char *config_path = NULL;
    bool check = false;
    enum ebb_api_poll poll = EBB_API_POLL_AUTO;
    unsigned keepalive_ms = 0, prefill_chunk = 0;
    struct serve *s = calloc(1, sizeof(*s));
    bool loop_ok = false;
    if (!args || !s || !cfgp) {
        free(cfgp);
        free(args);
        free(s);
        return 1;
    }
    ebb_config_init(cfgp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            ret = 0;
            goto out;
        }
        if (!strcmp(a, "--check-config")) {
            check = true;
            continue;
        }
        char name[64];
        const char *val = NULL;
        if (!strcmp(a, "-m")) {
            snprintf(name, sizeof(name), "model");
        } else if (!strncmp(a, "--", 2)) {
            const char *eq = strchr(a, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            if (len >= sizeof(name)) {
                fprintf(stderr, "ebb serve: unknown flag '%s' (see --help)\n", a);
                ret = 2;
                goto out;
            }
            memcpy(name, a + 2, len);
            name[len] = 0;
            if (eq)
                val = eq + 1;
        } else {
            fprintf(stderr, "ebb serve: unexpected argument '%s' (see --help)\n", a);
            ret = 2;
            goto out;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ebb serve: %s needs a value\n", a);
                ret = 2;
                goto out;
            }
            val = argv[++i];
        }
        if (!strcmp(name, "config")) {
            config_path = val;
        } else if (!strcmp(name, "http-poll")) {
            if (!strcmp(val, "epoll"))
                poll = EBB_API_POLL_EPOLL;
            else if (!strcmp(val, "fdset"))
                poll = EBB_API_POLL_FDSET;
            else {
                fprintf(stderr, "ebb serve: --http-poll must be epoll or fdset\n");
                ret = 2;
                goto out;
            }
        } else if (!strcmp(name, "keepalive-ms") || !strcmp(name, "prefill-chunk")) {
            char *end;
            unsigned long v = strtoul(val, &end, 10);
            if (*end || !*val || v == 0 || v > 3600000) {
                fprintf(stderr, "ebb serve: --%s needs a positive integer\n", name);
                ret = 2;
                goto out;
            }
            *(name[0] == 'k' ? &keepalive_ms : &prefill_chunk) = (unsigned)v;
        } else if (!strcmp(name, "api-key") || !strcmp(name, "api_key")) {
            keys = join(keys, val);
        } else if (!strcmp(name, "cors-origin") || !strcmp(name, "cors_origin")) {
            origins = join(origins, val);
        } else if (ebb_config_is_key(name)) {
            char *k = strdup(name);
            if (!k)
                goto out;
            args[n_args].key = k;
            args[n_args++].value = val;
        } else {
            fprintf(stderr, "ebb serve: unknown flag '--%s' (see --help)\n", name);
            ret = 2;
            goto out;
        }
    }
    if (keys) {
        args[n_args].key = strdup("api-key");
        args[n_args++].value = keys;
    }
    if (origins) {
        args[n_args].key = strdup("cors-origin");
        args[n_args++].value = origins;
    }
    if (ebb_config_build(cfgp, config_path, args, n_args, &d)) {
        fprintf(stderr, "ebb serve: %s\n", d.msg);
        ret = check ? 1 : 2;
        goto out;
    }
    if (check) {
        ebb_config_print(cfgp, stdout);
        ret = 0;
        goto out;
    }
    struct ebb_chat_template tmpl;
    if (cfgp->chat_template && strcmp(cfgp->chat_template, "auto") &&
        ebb_chat_template_by_name(cfgp->chat_template, &tmpl)) {
        fprintf(stderr, "ebb serve: unknown --chat-template '%s'; known: auto, %s\n",
                cfgp->chat_template, ebb_chat_template_names());
        ret = 2;
        goto out;
    }
    ebb_log_configure(cfgp->log_level, cfgp->log_format);
    char path[PATH_MAX];
    if (ebb_config_model_path(cfgp, path, sizeof(path))) {
        fprintf(stderr, "ebb serve: no model: pass -m FILE (a path or a name under %s)\n",
                cfgp->models_dir);
        ret = 2;
        goto out;
    }
    char model_id[256];
    model_id_of(path, model_id, sizeof(model_id));
    snprintf(s->cur_id, sizeof(s->cur_id), "%s", model_id);

    signal(SIGPIPE, SIG_IGN);
    struct ebb_listenfd lfd[4];
    size_t n_lfd = 0;
    if (ebb_listenfd_take(lfd, 4, &n_lfd, &d)) {
        fprintf(stderr, "ebb serve: %s\n", d.msg);
        goto out;
    }
    if (uv_loop_init(&s->loop))
        goto out;
    loop_ok = true;
    struct ebb_api_config ac = {
        .host = cfgp->host,
        .port = cfgp->port,
        .listen_fd = n_lfd ? lfd[0].fd : -1,
        .model_id = model_id,
        .chat_template =
            cfgp->chat_template && strcmp(cfgp->chat_template, "auto") ? cfgp->chat_template : NULL,
        .timeout_s = cfgp->request_timeout_ms ? (cfgp->request_timeout_ms + 999) / 1000 : 0,
        .poll = poll,
        .on_ready = on_ready,
        .ud = s,
    };
    s->keepalive_ms = keepalive_ms;
    api_config_from(s, cfgp, &ac);
    char where[160];
    if (n_lfd) {
        ebb_listenfd_describe(lfd[0].fd, where, sizeof(where), &ac.listen_fd_loopback);
    }
    if (ebb_api_new(&s->loop, &ac, &s->api, &d)) {
        fprintf(stderr, "ebb serve: %s\n", d.msg);
        goto out;
    }
    if (!n_lfd) {
        bool v6 = strchr(cfgp->host, ':') != NULL;
        snprintf(where, sizeof(where), "%s%s%s:%u", v6 ? "[" : "", cfgp->host, v6 ? "]" : "",
                 ebb_api_port(s->api));
    }
    printf("ebb: listening on http://%s\n", where);
    fflush(stdout);
    ebb_log_info("serve", "listening on http://%s; loading %s on device %s", where, path,
                 cfgp->device ? cfgp->device : "auto");
    ebb_notify_status("loading %s", model_id);

    struct ebb_sched_params sp = {
        .model = model_params_of(cfgp, path),
        .queue_cap = cfgp->queue,
        .prefill_chunk = prefill_chunk,
        .on_loaded = ebb_api_on_loaded,
        .ud = s->api,
        .before_open = warm_before_open,
    };
    if (ebb_sched_new(&sp, &s->sched, &d)) {
        fprintf(stderr, "ebb serve: %s\n", d.msg);
        goto out;
    }
    ebb_api_set_sched(s->api, s->sched);
    s->grace_ms = cfgp->shutdown_grace_ms;
    s->cfg = cfgp;
    s->config_path = config_path;
    s->args = args;
    s->n_args = n_args;
    uv_signal_init(&s->loop, &s->sighup);
    s->sighup.data = s;
    uv_signal_start(&s->sighup, on_sighup, SIGHUP);
    uv_timer_init(&s->loop, &s->watchdog);
    s->watchdog.data = s;
    uint64_t wd = ebb_notify_watchdog_usec();
    if (wd)
        uv_timer_start(&s->watchdog, on_watchdog, 0, wd / 2000 ? wd / 2000 : 1);
    uv_signal_init(&s->loop, &s->sigint);
    uv_signal_init(&s->loop, &s->sigterm);
    s->sigint.data = s->sigterm.data = s;
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_timer_init(&s->loop, &s->grace);
    s->grace.data = s;
    uv_timer_init(&s->loop, &s->swap_timer);
    s->swap_timer.data = s;
    uv_timer_init(&s->loop, &s->probe);
    s->probe.data = s;
    uv_timer_start(&s->probe, on_probe, 2000, 2000);
    s->loader.done = on_model_loaded;
    s->loader.ud = s;
    if (ebb__loader_init(&s->loader, &s->loop))
        goto out;

    uv_run(&s->loop, UV_RUN_DEFAULT);

    ret = s->failed ? 1 : 0;
    ebb_log_info("serve", "stopping");
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->grace, NULL);
    uv_close((uv_handle_t *)&s->sighup, NULL);
    uv_close((uv_handle_t *)&s->watchdog, NULL);
    uv_close((uv_handle_t *)&s->swap_timer, NULL);
    uv_close((uv_handle_t *)&s->probe, NULL);
    ebb_model_close(s->swap_model);
    s->swap_model = NULL;
out:
    if (s)
        ebb__loader_fini(&s->loader);
    ebb_sched_free(s ? s->sched : NULL);
    if (s)
        ebb_api_free(s->api);
    if (loop_ok) {
        uv_run(&s->loop, UV_RUN_NOWAIT);
        if (uv_loop_close(&s->loop))
            ebb_log_warn("serve", "the event loop still had handles at exit");
    }
    for (size_t i = 0; args && i < n_args; i++)
        free((char *)args[i].key);
    free(args);
    free(keys);
    free(origins);
    if (s && s->cfg)
        cfgp = s->cfg;
    ebb_config_fini(cfgp);
    free(cfgp);
    free(s);
    return ret;
}
