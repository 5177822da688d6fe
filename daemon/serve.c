/* `ebb serve`: configuration, the libuv loop, the HTTP API and the engine thread, signals. */
#include "cmds.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <uv.h>

#include "api/api.h"
#include "api/chat/chat-template.h"
#include "cl/cl.h"
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
    struct ebb_sched *sched; /* replica 0's: the one model swaps and its on_ready use */
    /* data parallel (--device all or a list): one scheduler per device, scheds[0] == sched;
     * n_dev 0 without a device list */
    char devs[EBB__SERVE_MAX_DEVICES][EBB_CL_ID_MAX];
    const char *dev_ptr[EBB__SERVE_MAX_DEVICES];
    size_t n_dev;
    struct ebb_sched *scheds[EBB__SERVE_MAX_DEVICES];
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
    bool loop_ok;      /* loop initialised (closed by serve_free) */
    /* several models: the API loads and unloads them (no engine of the daemon's own) */
    bool catalogue;
    struct ebb__serve_catalogue *cat;
    /* its sources, read again as they change; cat_cfg: the configuration it was built from
     * once a reload replaced cfg (the models' settings change with a restart) */
    struct ebb__serve_follow *follow;
    struct ebb_config *cat_cfg;
    struct ebb_sched_gate *gate; /* shared by the models' engines (priority = high) */
};

static const char *template_of(const struct ebb_config *c)
{
    return c->chat_template && strcmp(c->chat_template, "auto") ? c->chat_template : NULL;
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
        ebb_api_cancel_all(s->api); /* every model's every replica */
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
    ac->silent_timeout_ms = c->silent_timeout_ms;
    ac->accept_rate = c->accept_rate;
    ac->accept_rate_total = c->accept_rate_total;
    ac->api_keys = c->api_keys.items;
    ac->n_api_keys = c->api_keys.n;
    ac->cors_origins = c->cors_origins.items;
    ac->n_cors_origins = c->cors_origins.n;
    ac->allowed_hosts = c->allowed_hosts.items;
    ac->n_allowed_hosts = c->allowed_hosts.n;
    ac->keepalive_ms = s->keepalive_ms;
    ac->responses_store = c->responses_store;
    ac->generation = &c->generation;
    ac->ignore_model_sampling = !c->model_sampling;
    ac->models_dir = c->models_dir;
}

/* The context each slot got and why (capped by default, by memory or at the trained length). */
static void log_ctx(struct ebb_model *m)
{
    struct ebb_model_ctx c;
    char why[256];
    if (!m)
        return;
    ebb_model_ctx(m, &c);
    ebb_model_ctx_describe(&c, why, sizeof(why));
    ebb_log_info("serve", "context %u tokens per slot, %u slots (%s)", c.n_ctx, ebb_model_n_seq(m),
                 why);
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
    log_ctx(nm);
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
        char have[1024] = "";
        if (l->rc == EBB_ENOENT)
            ebb__serve_models_in(s->cfg->models_dir, have, sizeof(have));
        ebb_log_error("serve", "reload: cannot load %s: %s%s%s; still serving %s", l->path, l->msg,
                      have[0] ? "; " : "", have, s->cur_id);
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
    ebb__serve_model_id(path, id, sizeof(id));
    struct ebb_model_params mp = ebb__serve_model_params(c, path);
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
    for (size_t i = 0; i < EBB__SERVE_MAX_DEVICES; i++)
        if (s->scheds[i])
            ebb_sched_set_queue_cap(s->scheds[i], next->queue);
    s->grace_ms = next->shutdown_grace_ms;
    if (diff & EBB_CONFIG_CHANGE_LISTEN)
        ebb_log_warn("serve", "reload: host/port changed; they apply after a restart");
    bool load = !s->catalogue && ((diff & EBB_CONFIG_CHANGE_MODEL) || s->model_failed);
    if (load && s->n_dev > 1) {
        ebb_log_warn("serve", "reload: the model and its settings apply after a restart when it "
                              "runs on several devices");
        load = false;
    }
    if (s->catalogue && (diff & EBB_CONFIG_CHANGE_MODEL))
        ebb_log_warn("serve", "reload: the models and their settings apply after a restart");
    ebb_log_info("serve", "configuration reloaded");
    if (s->follow && ebb__serve_follow_config(s->follow) == s->cfg) {
        s->cat_cfg = s->cfg;
    } else {
        ebb_config_fini(s->cfg);
        free(s->cfg);
    }
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

/* Every probe period (2 s; EBB_STREAM_PROBE_MS for tests and benchmarks): the layer streamer
 * re-reads the memory probes (free memory, cgroup limit). Pressure notifications
 * (docs/STREAMER.md) post a reading at once between periods. */
static void on_probe(uv_timer_t *t)
{
    struct serve *s = t->data;
    if (s->catalogue) {
        ebb_api_stream_probe(s->api);
        return;
    }
    for (size_t i = 0; i < EBB__SERVE_MAX_DEVICES; i++) {
        struct ebb_model *m = s->scheds[i] ? ebb_sched_model(s->scheds[i]) : NULL;
        if (m && ebb_model_streaming(m)) {
            ebb_model_stream_probe(m);
            ebb_sched_stream_poke(s->scheds[i]); /* an idle engine re-plans now */
        }
    }
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
        log_ctx(ebb_sched_model(s->sched));
        ebb_notify_ready("model loaded");
        return;
    }
    ebb_log_error("serve", "%s", msg ? msg : "the model failed to load");
    s->failed = true;
    uv_stop(&s->loop);
}

/* The configuration from the file, the environment and the flags, checked; --check-config
 * prints it. Writes the model's path. Returns -1 to go on, else the exit status. */
static int configure(struct serve *s, const struct ebb__serve_opts *o, struct ebb_config *cfg,
                     char *path, size_t cap)
{
    struct ebb_diag d = {{0}};
    if (ebb_config_build(cfg, o->config_path, o->args, o->n_args, &d)) {
        fprintf(stderr, "ebb serve: %s\n", d.msg);
        return o->check ? 1 : 2;
    }
    if (o->check) {
        ebb_config_print(cfg, stdout);
        return 0;
    }
    struct ebb_chat_template tmpl;
    if (cfg->chat_template && strcmp(cfg->chat_template, "auto") &&
        ebb_chat_template_by_name(cfg->chat_template, &tmpl)) {
        fprintf(stderr, "ebb serve: unknown --chat-template '%s'; known: auto, %s\n",
                cfg->chat_template, ebb_chat_template_names());
        return 2;
    }
    ebb_log_configure(cfg->log_level, cfg->log_format);
    /* Data parallel: "all" or a list names the devices, each checked now (a missing one is a
     * usage error naming it), one engine on each. */
    if (ebb_cl_spec_is_list(cfg->device)) {
        if (ebb_cl_devices(cfg->device, s->devs, EBB__SERVE_MAX_DEVICES, &s->n_dev, &d)) {
            fprintf(stderr, "ebb serve: %s\n", d.msg);
            return 2;
        }
        for (size_t i = 0; i < s->n_dev; i++)
            s->dev_ptr[i] = s->devs[i];
        /* Layer split (docs/SCALING.md): one engine over every device, asked for, or chosen for
         * one model that does not fit the smallest of them. */
        bool one = o->n_models <= 1 && ebb_config_model_path(cfg, path, cap) == EBB_OK;
        if (cfg->split == EBB_SPLIT_LAYER ||
            (cfg->split == EBB_SPLIT_AUTO && one && ebb_model_split_needed(path, cfg->device))) {
            if (cfg->split == EBB_SPLIT_AUTO)
                ebb_log(EBB_LOG_INFO, "serve",
                        "%s does not fit the smallest device of '%s': layer split", path,
                        cfg->device);
            cfg->split = EBB_SPLIT_LAYER;
            s->n_dev = 0; /* one engine, whose model spans the devices */
        } else {
            cfg->split = EBB_SPLIT_NONE;
        }
    }
    /* Several models when -m is repeated or names a directory, or when no model is configured
     * (then every .gguf under models_dir and the [model.NAME] sections). */
    struct stat st;
    bool none = ebb_config_model_path(cfg, path, cap) != EBB_OK;
    bool dir = !none && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (none || dir || o->n_models > 1) {
        const char *one[1] = {path};
        struct ebb__serve_sources src = {
            .paths = o->n_models > 1 ? o->models
                     : dir           ? one
                                     : NULL,
            .n_paths = o->n_models > 1 ? o->n_models
                       : dir           ? 1
                                       : 0,
        };
        if (!(s->cat = calloc(1, sizeof(*s->cat))) ||
            !(s->follow = ebb__serve_follow_new(cfg, &src)))
            return 1;
        /* A catalogue that follows a directory serves a section's file once it appears. */
        unsigned flags = ebb__serve_follow_dirs(s->follow) ? EBB__CAT_WAIT : 0;
        if (ebb__serve_catalogue_build(cfg, &src, flags, s->cat, &d)) {
            fprintf(stderr, "ebb serve: %s\n", d.msg);
            return none ? 2 : 1;
        }
        s->catalogue = true;
        return -1;
    }
    /* A model that is not there fails now, naming the path and what models_dir holds, rather
     * than after the socket listens with the reader's bare "cannot open". */
    if (stat(path, &st) != 0) {
        char have[1024];
        int e = errno;
        ebb__serve_models_in(cfg->models_dir, have, sizeof(have));
        fprintf(stderr, "ebb serve: cannot open model '%s': %s\nebb serve: %s\n", path, strerror(e),
                have);
        return 1;
    }
    return -1;
}

/* "cl:0:0, cl:0:1 (all)" for a device list, else the configured device. */
static void describe_devices(const struct serve *s, char *buf, size_t n)
{
    const char *cfg = s->cfg->device ? s->cfg->device : "auto";
    size_t w = 0;
    buf[0] = 0;
    for (size_t i = 0; i < s->n_dev && w < n; i++) {
        int k = snprintf(buf + w, n - w, "%s%s", i ? ", " : "", s->devs[i]);
        w += k > 0 ? (size_t)k : 0;
    }
    if (!s->n_dev)
        snprintf(buf, n, "%s", cfg);
    else if (w < n && strcmp(cfg, buf))
        snprintf(buf + w, n - w, " (%s)", cfg);
}

/* The API's catalogue_scan: the catalogue as its sources hold it now. */
static int scan_catalogue(void *ud, const char *also, const struct ebb_api_model **models,
                          size_t *n)
{
    struct serve *s = ud;
    return ebb__serve_follow_scan(s->follow, also, models, n);
}

/* The catalogue at start, and the sections whose file is not there yet. */
static void log_catalogue(const struct serve *s)
{
    const struct ebb_config *cfg = s->cfg;
    for (size_t i = 0; i < s->cat->n; i++)
        ebb_log_info("serve", "model %s: %s%s%s", s->cat->e[i].id, s->cat->e[i].path,
                     s->cat->e[i].pin ? " (pinned)" : "",
                     s->cat->e[i].priority ? " (priority)" : "");
    for (size_t i = 0; i < cfg->n_models; i++) {
        const struct ebb_config_model *m = &cfg->models[i];
        bool have = false;
        for (size_t k = 0; k < s->cat->n && !have; k++)
            have = !strcmp(s->cat->e[k].id, m->name);
        char p[PATH_MAX];
        ebb__serve_resolve(cfg, m->path ? m->path : m->name, p, sizeof(p));
        if (!have)
            ebb_log_warn("serve", "[model.%s]: %s is not there yet; served once it appears",
                         m->name, p);
    }
    if (ebb__serve_follow_dirs(s->follow))
        ebb_log_info("serve", "the catalogue follows its directory: files added or removed "
                              "there are served or dropped as they come and go");
}

/* The loop and the HTTP API on the inherited socket (socket activation) or a bound one, then
 * "listening on" on stdout. model_id must live as long as the API. */
static bool start_api(struct serve *s, const struct ebb__serve_opts *o, const char *path,
                      const char *model_id)
{
    const struct ebb_config *cfg = s->cfg;
    struct ebb_diag d = {{0}};
    struct ebb_listenfd lfd[4];
    size_t n_lfd = 0;
    if (ebb_listenfd_take(lfd, 4, &n_lfd, &d)) {
        fprintf(stderr, "ebb serve: %s\n", d.msg);
        return false;
    }
    if (uv_loop_init(&s->loop))
        return false;
    s->loop_ok = true;
    struct ebb_api_config ac = {
        .host = cfg->host,
        .port = cfg->port,
        .listen_fd = n_lfd ? lfd[0].fd : -1,
        .model_id = model_id,
        .chat_template = template_of(cfg),
        .timeout_s = cfg->request_timeout_ms ? (cfg->request_timeout_ms + 999) / 1000 : 0,
        .poll = o->poll,
        .on_ready = on_ready,
        .ud = s,
    };
    s->keepalive_ms = o->keepalive_ms;
    api_config_from(s, cfg, &ac);
    /* One device: its spec as configured ("auto", "cpu", "cl:0:1"...) labels /metrics and
     * /health. */
    const char *one_dev[1] = {cfg->device && *cfg->device ? cfg->device : "auto"};
    ac.devices = s->n_dev ? s->dev_ptr : one_dev;
    ac.n_devices = s->n_dev ? s->n_dev : 1;
    if (s->catalogue) {
        if (!(s->gate = ebb_sched_gate_new())) {
            fprintf(stderr, "ebb serve: out of memory\n");
            return false;
        }
        struct ebb_sched_params sp = {
            .queue_cap = cfg->queue,
            .prefill_chunk = o->prefill_chunk,
            .spec_max = o->spec ? (o->draft_max ? o->draft_max : 8) : 0,
            .before_open = warm_before_open,
            .gate = s->gate,
        };
        ebb__serve_catalogue_api(cfg, s->cat, &sp);
        ebb__serve_follow_template(s->follow, &sp);
        ac.catalogue_scan = scan_catalogue;
        ac.models = s->cat->api;
        ac.n_models = s->cat->n;
        ac.models_budget = cfg->models_budget;
    }
    char where[160];
    if (n_lfd)
        ebb_listenfd_describe(lfd[0].fd, where, sizeof(where), &ac.listen_fd_loopback);
    if (ebb_api_new(&s->loop, &ac, &s->api, &d)) {
        fprintf(stderr, "ebb serve: %s\n", d.msg);
        return false;
    }
    if (!n_lfd) {
        bool v6 = strchr(cfg->host, ':') != NULL;
        snprintf(where, sizeof(where), "%s%s%s:%u", v6 ? "[" : "", cfg->host, v6 ? "]" : "",
                 ebb_api_port(s->api));
    }
    printf("ebb: listening on http://%s\n", where);
    fflush(stdout);
    char devices[512];
    describe_devices(s, devices, sizeof(devices));
    if (s->catalogue) {
        ebb_log_info("serve",
                     "listening on http://%s; %zu models (loaded on request, keep_alive %s, "
                     "budget %llu MiB%s) on device %s",
                     where, s->cat->n, cfg->keep_alive,
                     (unsigned long long)(cfg->models_budget >> 20), s->n_dev ? " per device" : "",
                     devices);
        log_catalogue(s);
        ebb_notify_ready("serving several models");
        return true;
    }
    ebb_log_info("serve", "listening on http://%s; loading %s on device %s", where, path, devices);
    ebb_notify_status("loading %s", model_id);
    return true;
}

/* The engine thread, which loads the model (after the socket listens) and then runs steps. */
static bool start_engine(struct serve *s, const struct ebb__serve_opts *o, const char *path)
{
    if (s->catalogue)
        return true; /* the API starts each model's engine on its first request */
    struct ebb_diag d = {{0}};
    struct ebb_sched_params sp = {
        .model = ebb__serve_model_params(s->cfg, path),
        .queue_cap = s->cfg->queue,
        .prefill_chunk = o->prefill_chunk,
        .spec_max = o->spec ? (o->draft_max ? o->draft_max : 8) : 0,
        .on_loaded = ebb_api_on_loaded,
        .before_open = warm_before_open,
    };
    /* One engine per device, each opening the model with slots and a KV pool of its own. */
    for (size_t i = 0; i < (s->n_dev ? s->n_dev : 1); i++) {
        if (s->n_dev)
            sp.model.device = s->devs[i];
        sp.ud = ebb_api_replica(s->api, i);
        if (ebb_sched_new(&sp, &s->scheds[i], &d)) {
            fprintf(stderr, "ebb serve: %s%s: %s\n", s->n_dev ? "on " : "",
                    s->n_dev ? s->devs[i] : "", d.msg);
            return false;
        }
        ebb_api_set_sched(s->api, i, s->scheds[i]);
    }
    s->sched = s->scheds[0];
    return true;
}

/* Signals (SIGHUP reload, SIGINT/SIGTERM drain), the watchdog, grace, swap and probe timers,
 * and the model loader for swaps. */
static bool start_handles(struct serve *s)
{
    s->grace_ms = s->cfg->shutdown_grace_ms;
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
    const char *pe = getenv("EBB_STREAM_PROBE_MS");
    uint64_t period = pe && atoi(pe) > 0 ? (uint64_t)atoi(pe) : 2000;
    uv_timer_start(&s->probe, on_probe, period, period);
    s->loader.done = on_model_loaded;
    s->loader.ud = s;
    return ebb__loader_init(&s->loader, &s->loop) == EBB_OK;
}

static void close_handles(struct serve *s)
{
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->grace, NULL);
    uv_close((uv_handle_t *)&s->sighup, NULL);
    uv_close((uv_handle_t *)&s->watchdog, NULL);
    uv_close((uv_handle_t *)&s->swap_timer, NULL);
    uv_close((uv_handle_t *)&s->probe, NULL);
    ebb_model_close(s->swap_model);
    s->swap_model = NULL;
}

/* Configures, listens, starts the engine and runs the loop until a signal drains it or the
 * model fails to load. Returns the exit status. */
static int serve(struct serve *s, const struct ebb__serve_opts *o)
{
    char path[PATH_MAX];
    int ret = configure(s, o, s->cfg, path, sizeof(path));
    if (ret >= 0)
        return ret;
    char model_id[256];
    if (s->catalogue)
        snprintf(path, sizeof(path), "%s", s->cfg->models_dir);
    ebb__serve_model_id(path, model_id, sizeof(model_id));
    snprintf(s->cur_id, sizeof(s->cur_id), "%s", model_id);
    signal(SIGPIPE, SIG_IGN);
    if (!start_api(s, o, path, model_id) || !start_engine(s, o, path) || !start_handles(s))
        return 1;
    uv_run(&s->loop, UV_RUN_DEFAULT);
    ebb_log_info("serve", "stopping");
    close_handles(s);
    return s->failed ? 1 : 0;
}

/* Releases what serve() built, in reverse order, whatever point it reached. */
static void serve_free(struct serve *s)
{
    ebb__loader_fini(&s->loader);
    for (size_t i = 0; i < EBB__SERVE_MAX_DEVICES; i++)
        ebb_sched_free(s->scheds[i]);
    ebb_api_free(s->api);
    ebb_sched_gate_free(s->gate);
    if (s->loop_ok) {
        uv_run(&s->loop, UV_RUN_NOWAIT);
        if (uv_loop_close(&s->loop))
            ebb_log_warn("serve", "the event loop still had handles at exit");
    }
    ebb_config_fini(s->cfg);
    free(s->cfg);
    if (s->cat_cfg)
        ebb_config_fini(s->cat_cfg);
    free(s->cat_cfg);
    ebb__serve_follow_free(s->follow);
    free(s->cat);
    free(s);
}

int ebb_cmd_serve(int argc, char **argv)
{
    struct ebb__serve_opts o;
    int ret = ebb__serve_parse(argc, argv, &o);
    struct serve *s = NULL;
    if (ret || o.help)
        goto out;
    ret = 1;
    if (!(s = calloc(1, sizeof(*s))) || !(s->cfg = calloc(1, sizeof(*s->cfg))))
        goto out;
    ebb_config_init(s->cfg);
    s->config_path = o.config_path;
    s->args = o.args;
    s->n_args = o.n_args;
    ret = serve(s, &o);
out:
    if (s)
        serve_free(s);
    ebb__serve_opts_fini(&o);
    return ret;
}
