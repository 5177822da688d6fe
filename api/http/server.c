/* libmicrohttpd inside the libuv loop (an epoll driver and a portable fdset driver), request
 * life (suspend/resume, hang-up detection, freeing), responses, engine notifications, start and
 * stop; the served model's set-up is model-setup.c's. The routes and the generator sit in the
 * rooms above: this file reaches them only through the handler table routes/api.c passes in
 * (struct ebb__handlers), never by name. */
#include "http.h"
#include "http-int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

/* ---- driving MHD from libuv -------------------------------------------------------------- */

struct ebb__fdpoll {
    uv_poll_t h;
    struct ebb_api *api;
    struct ebb__fdpoll *next;
};

static void mhd_run(struct ebb_api *a);

static void on_fdpoll_closed(uv_handle_t *h)
{
    free(h->data);
}

static void on_fdpoll(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    struct ebb__fdpoll *p = h->data;
    mhd_run(p->api);
}

/* fdset mode: stops and closes every poll. A started poll's descriptor is only added to libuv's
 * epoll set at the loop's next poll, and libuv aborts if it is closed by then: a descriptor is
 * closed outside MHD_run only after this (ebb_api_quiesce). */
static void fdpolls_close(struct ebb_api *a)
{
    while (a->fdpolls) {
        struct ebb__fdpoll *p = a->fdpolls;
        a->fdpolls = p->next;
        uv_close((uv_handle_t *)&p->h, on_fdpoll_closed);
    }
}

/* fdset mode: replace the polls by one per socket MHD wants watched now. Handles are recreated
 * each time because MHD may have closed and reused a descriptor number since the last run. */
static void fdset_update(struct ebb_api *a)
{
    fdpolls_close(a);
    if (a->closing)
        return;
    fd_set rs, ws, es;
    FD_ZERO(&rs);
    FD_ZERO(&ws);
    FD_ZERO(&es);
    MHD_socket max = 0;
    if (MHD_get_fdset2(a->mhd, &rs, &ws, &es, &max, FD_SETSIZE) != MHD_YES)
        return;
    for (MHD_socket fd = 0; fd <= max; fd++) {
        int ev = 0;
        if (FD_ISSET(fd, &rs))
            ev |= UV_READABLE;
        if (FD_ISSET(fd, &ws))
            ev |= UV_WRITABLE;
        if (!ev)
            continue;
        struct ebb__fdpoll *p = calloc(1, sizeof(*p));
        if (!p)
            continue;
        p->api = a;
        p->h.data = p;
        if (uv_poll_init_socket(a->loop, &p->h, fd)) {
            free(p);
            continue;
        }
        uv_poll_start(&p->h, ev, on_fdpoll);
        p->next = a->fdpolls;
        a->fdpolls = p;
    }
}

static void on_mhd_timer(uv_timer_t *t)
{
    mhd_run(t->data);
}

static void reschedule(struct ebb_api *a)
{
    if (a->closing)
        return;
    if (!a->use_epoll)
        fdset_update(a);
    MHD_UNSIGNED_LONG_LONG to = 0;
    if (MHD_get_timeout(a->mhd, &to) == MHD_YES)
        uv_timer_start(&a->mhd_timer, on_mhd_timer, to, 0);
    else
        uv_timer_stop(&a->mhd_timer);
}

static void mhd_run(struct ebb_api *a)
{
    if (a->in_mhd || a->closing)
        return;
    a->in_mhd = true;
    MHD_run(a->mhd);
    a->in_mhd = false;
    reschedule(a);
}

static void on_epoll(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    mhd_run(h->data);
}

void ebb__kick(struct ebb_api *a)
{
    if (!a->closing)
        uv_timer_start(&a->mhd_timer, on_mhd_timer, 0, 0);
}

/* ---- suspension and hang-up detection ---------------------------------------------------- */

static void req_maybe_free(struct ebb__req *r);

static void on_watch_closed(uv_handle_t *h)
{
    struct ebb__req *r = h->data;
    r->watch_state = EBB__WATCH_IDLE;
    req_maybe_free(r);
}

static void watch_close(struct ebb__req *r)
{
    if (r->watch_state == EBB__WATCH_ACTIVE) {
        r->watch_state = EBB__WATCH_CLOSING;
        uv_close((uv_handle_t *)&r->watch, on_watch_closed);
    }
}

static void on_watch(uv_poll_t *h, int status, int events)
{
    struct ebb__req *r = h->data;
    bool gone = status < 0 || (events & UV_DISCONNECT);
    if (!gone && (events & UV_READABLE)) {
        uv_os_fd_t fd;
        char c;
        if (uv_fileno((uv_handle_t *)h, &fd) == 0) {
            ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                gone = true;
            else if (n > 0) /* a pipelined request: only a hang-up matters now */
                uv_poll_start(h, UV_DISCONNECT, on_watch);
        }
    }
    if (!gone)
        return;
    ebb_log(EBB_LOG_DEBUG, "http", "client of %s went away", r->path);
    r->disconnected = true;
    if (r->gen && r->engine_ref && r->gen->sched)
        ebb_sched_cancel(r->gen->sched, r->gen->job_id);
    ebb__resume(r);
}

size_t ebb__out_take(struct ebb__req *r, char *buf, size_t max)
{
    size_t avail = r->out.n - r->out_off, n = avail < max ? avail : max;
    if (n) {
        memcpy(buf, r->out.p + r->out_off, n);
        r->out_off += n;
        if (r->out_off == r->out.n)
            r->out.n = r->out_off = 0;
    }
    return n;
}

void ebb__suspend(struct ebb__req *r)
{
    if (r->suspended || !r->conn)
        return;
    MHD_suspend_connection(r->conn);
    r->suspended = true;
    if (r->watch_state != EBB__WATCH_IDLE)
        return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return;
    r->watch.data = r;
    if (uv_poll_init_socket(r->api->loop, &r->watch, ci->connect_fd))
        return;
    r->watch_state = EBB__WATCH_ACTIVE;
    uv_poll_start(&r->watch, UV_READABLE | UV_DISCONNECT, on_watch);
}

void ebb__resume(struct ebb__req *r)
{
    if (!r->suspended || !r->conn)
        return;
    watch_close(r);
    r->suspended = false;
    MHD_resume_connection(r->conn);
    ebb__kick(r->api);
}

/* ---- responses ---------------------------------------------------------------------------- */

void ebb__add_cors(struct ebb__req *r, struct MHD_Response *resp)
{
    if (!r->origin[0])
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->origin);
    MHD_add_response_header(resp, "Vary", "Origin");
}

void ebb__reply(struct ebb__req *r, unsigned status, const char *ctype, const char *body,
                size_t len)
{
    if (r->answered || !r->conn)
        return;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return;
    MHD_add_response_header(resp, "Content-Type", ctype);
    ebb__add_cors(r, resp);
    if (status == 503)
        MHD_add_response_header(resp, "Retry-After", "1");
    if (r->api->draining) /* the daemon is going away: no next request on this connection */
        MHD_add_response_header(resp, "Connection", "close");
    if (status == 401)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (status == 405)
        MHD_add_response_header(resp, "Allow",
                                r->ep == EBB__EP_RESPONSES ? "GET, POST, DELETE, OPTIONS"
                                : r->ep == EBB__EP_MODELS || r->ep == EBB__EP_HEALTH ||
                                        r->ep == EBB__EP_METRICS
                                    ? "GET, HEAD, OPTIONS"
                                    : "POST, OPTIONS");
    MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->answered = true;
    r->status = status;
}

void ebb__reply_error(struct ebb__req *r, unsigned status, const char *message, const char *param,
                      const char *code)
{
    char *s = ebb__error_body(r->path, status, message, param, code);
    ebb__reply(r, status, "application/json", s ? s : "{}", s ? strlen(s) : 2);
    free(s);
}

void ebb__reply_json(struct ebb__req *r, unsigned status, json_t *o)
{
    /* 15 digits: a default such as 0.8 prints as 0.8, not 0.80000000000000004. */
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(o);
    /* A failed jansson allocation since this call began may have left a key out of o. */
    if (!s || ebb__json_alloc_failed(true)) {
        free(s);
        ebb__reply_error(r, 503, "out of memory", NULL, "out_of_memory");
        return;
    }
    ebb__reply(r, status, "application/json", s, strlen(s));
    free(s);
}

/* ---- request life ------------------------------------------------------------------------- */

static void live_unlink(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    if (r->live_prev)
        r->live_prev->live_next = r->live_next;
    else if (a->live == r)
        a->live = r->live_next;
    if (r->live_next)
        r->live_next->live_prev = r->live_prev;
    r->live_prev = r->live_next = NULL;
}

static void req_maybe_free(struct ebb__req *r)
{
    if (r->conn || r->engine_ref || r->watch_state != EBB__WATCH_IDLE)
        return;
    live_unlink(r);
    r->api->h->served_release(r);
    if (r->gen)
        r->api->h->gen_free(r->gen);
    ebb__abuf_fini(&r->body);
    ebb__abuf_fini(&r->out);
    free(r);
}

void ebb__unpark(struct ebb__req *r)
{
    if (!r->parked)
        return;
    if (r->park_prev)
        r->park_prev->park_next = r->park_next;
    else
        r->api->parked = r->park_next;
    if (r->park_next)
        r->park_next->park_prev = r->park_prev;
    r->park_prev = r->park_next = NULL;
    r->parked = false;
}

void ebb__park(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    if (r->disconnected) {
        ebb__reply_error(r, 503, "the model is being replaced", NULL, "model_loading");
        return;
    }
    if (!r->parked) {
        r->parked = true;
        r->park_prev = NULL;
        r->park_next = a->parked;
        if (a->parked)
            a->parked->park_prev = r;
        a->parked = r;
    }
    ebb__suspend(r);
}

void ebb_api_hold(struct ebb_api *a, bool hold)
{
    a->hold = hold;
    if (hold)
        return;
    while (a->parked) {
        struct ebb__req *r = a->parked;
        ebb__unpark(r);
        ebb__resume(r); /* MHD calls the handler again, which starts the generation */
    }
}

void ebb__req_engine_released(struct ebb__req *r)
{
    r->engine_ref = false;
    live_unlink(r);
    req_maybe_free(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct ebb_api *a = cls;
    struct ebb__req *r = *con_cls;
    ebb__limits_request_done(c);
    if (r == ebb__limits_refused)
        *con_cls = r = NULL;
    if (!r)
        return;
    *con_cls = NULL;
    ebb__unpark(r);
    if (r->answered)
        ebb__metrics_request(&a->metrics, r->ep, r->status);
    struct ebb_log_request lr = {
        .method = r->method,
        .path = r->path,
        .status = (int)r->status,
        .prompt_tokens = -1,
        .completion_tokens = -1,
        .ms = (ebb__now() - r->t_start) * 1e3,
        .error = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? NULL : "connection cut",
        .remote = r->remote[0] ? r->remote : NULL,
    };
    if (r->gen) {
        lr.id = r->gen->id;
        if (!r->engine_ref) {
            lr.prompt_tokens = r->gen->res.n_prompt;
            lr.completion_tokens = r->gen->res.n_gen;
        }
    }
    if ((r->ep != EBB__EP_HEALTH && r->ep != EBB__EP_METRICS) || ebb_log_enabled(EBB_LOG_DEBUG))
        ebb_log_request(&lr);
    watch_close(r);
    r->suspended = false;
    r->conn = NULL;
    if (r->gen_counted) {
        r->gen_counted = false;
        a->n_gen_conns--;
    }
    if (r->gen)
        a->h->gen_conn_closed(r);
    req_maybe_free(r);
}

/* ---- engine notifications ------------------------------------------------------------------ */

static void on_async(uv_async_t *h)
{
    struct ebb_api *a = h->data;
    pthread_mutex_lock(&a->mu);
    /* The batch is walked through pump_next, a link only this thread uses: once in_ready is
     * false the engine thread may queue a request again, rewriting its ready_next while the
     * batch is still being pumped (a walk over ready_next then skipped requests, whose last
     * output was never sent, and pumped others without clearing in_ready). */
    struct ebb__req *list = a->ready_head;
    a->ready_head = NULL;
    for (struct ebb__req *r = list; r; r = r->ready_next) {
        r->in_ready = false;
        r->pump_next = r->ready_next;
    }
    pthread_mutex_unlock(&a->mu);
    a->h->catalogue_async(a);
    while (list) {
        struct ebb__req *r = list;
        list = r->pump_next;
        r->pump_next = NULL;
        ebb__json_alloc_failed(true);
        a->h->gen_pump(r);
    }
}

static void on_tick(uv_timer_t *t)
{
    struct ebb_api *a = t->data;
    double now = ebb__now();
    for (struct ebb__req *r = a->live, *n; r; r = n) {
        n = r->live_next;
        a->h->gen_keepalive(r, now);
    }
    if (ebb__limits_sweep(a))
        ebb__kick(a); /* MHD reads the end of the shut sockets and frees them */
    a->h->catalogue_tick(a, now);
    a->h->pull_tick(a);
}

/* ---- life ---------------------------------------------------------------------------------- */

static char **duplist(char **v, size_t n)
{
    char **o = calloc(n ? n : 1, sizeof(char *));
    for (size_t i = 0; o && i < n; i++)
        o[i] = strdup(v[i]);
    return o;
}

static void freelist(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = 0;
    ebb_log(EBB_LOG_DEBUG, "http", "http: %s", msg);
}

ebb_err ebb__server_new(uv_loop_t *loop, const struct ebb_api_config *cfg,
                        const struct ebb__handlers *h, struct ebb_api **out, struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    ebb__json_alloc_init();
    struct ebb_api *a = calloc(1, sizeof(*a));
    if (!a)
        return EBB_ENOMEM;
    a->loop = loop;
    a->h = h;
    pthread_mutex_init(&a->mu, NULL);
    a->max_body = cfg->max_body ? cfg->max_body : 4u << 20;
    a->models_dir = cfg->models_dir ? strdup(cfg->models_dir) : NULL;
    a->api_keys = duplist(cfg->api_keys, cfg->n_api_keys);
    a->n_api_keys = cfg->n_api_keys;
    a->cors_origins = duplist(cfg->cors_origins, cfg->n_cors_origins);
    a->n_cors_origins = cfg->n_cors_origins;
    a->allowed_hosts = duplist(cfg->allowed_hosts, cfg->n_allowed_hosts);
    a->n_allowed_hosts = cfg->n_allowed_hosts;
    if (!a->api_keys || !a->cors_origins || !a->allowed_hosts) {
        rc = EBB_ENOMEM;
        goto out;
    }
    a->timeout_s = cfg->timeout_s;
    ebb__limits_set(&a->limits, cfg);
    a->keepalive_ms = cfg->keepalive_ms ? cfg->keepalive_ms : 2000;
    a->max_stream_buffer = cfg->max_stream_buffer ? cfg->max_stream_buffer : 1u << 20;
    a->resp_store_cap = cfg->responses_store;
    ebb__setup_generation(a, cfg);
    a->metrics.started_at = ebb__unix_now();
    a->on_ready = cfg->on_ready;
    a->ud = cfg->ud;
    rc = a->h->catalogue_init(a, cfg);
    if (rc) {
        ebb_diag_set(diag, rc, "out of memory");
        goto out;
    }
    a->use_epoll = cfg->poll != EBB_API_POLL_FDSET;
#ifndef __linux__
    a->use_epoll = false;
#endif

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    const char *host = cfg->host ? cfg->host : "127.0.0.1";
    unsigned flags = MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(cfg->port);
        a->loopback = (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(cfg->port);
        flags |= MHD_USE_IPv6;
        a->loopback = !memcmp(&s6->sin6_addr, &in6addr_loopback, sizeof(struct in6_addr));
    } else if (!strcmp(host, "localhost")) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(cfg->port);
        s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a->loopback = true;
    } else {
        rc = ebb_diag_set(diag, EBB_EINVAL, "--host '%s' is not a numeric IPv4/IPv6 address", host);
        goto out;
    }
    if (cfg->listen_fd >= 0)
        a->loopback = cfg->listen_fd_loopback;
    if (a->use_epoll)
        flags |= MHD_USE_EPOLL;
    struct MHD_OptionItem opts[12];
    size_t no = 0;
    opts[no++] = (struct MHD_OptionItem){MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, NULL};
    opts[no++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, a};
    opts[no++] =
        (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)a->timeout_s, NULL};
    /* The caps are limits.c's (they keep /health answerable): MHD's own only bounds descriptors. */
    opts[no++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT,
                                         a->use_epoll ? 1 << 16 : FD_SETSIZE - 16, NULL};
    opts[no++] =
        (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)ebb__limits_notify, a};
    opts[no++] = (struct MHD_OptionItem){MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)ebb__limits_uri, a};
    if (cfg->listen_fd >= 0)
        opts[no++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, cfg->listen_fd, NULL};
    else
        opts[no++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &ss};
    opts[no++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    a->mhd = MHD_start_daemon(flags, cfg->port, ebb__limits_accept, a, ebb__limits_access, a,
                              MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (!a->mhd) {
        rc = ebb_diag_set(diag, EBB_EIO, "cannot listen on %s port %u: %s", host, cfg->port,
                          strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(a->mhd, MHD_DAEMON_INFO_BIND_PORT);
    a->port = di ? di->port : cfg->port;
    uv_async_init(loop, &a->async, on_async);
    a->async.data = a;
    uv_timer_init(loop, &a->mhd_timer);
    a->mhd_timer.data = a;
    uv_timer_init(loop, &a->tick);
    a->tick.data = a;
    uv_timer_start(&a->tick, on_tick, 250, 250);
    if (a->use_epoll) {
        const union MHD_DaemonInfo *ei = MHD_get_daemon_info(a->mhd, MHD_DAEMON_INFO_EPOLL_FD);
        if (!ei || uv_poll_init(loop, &a->epoll_watch, ei->epoll_fd)) {
            rc = ebb_diag_set(diag, EBB_EIO, "cannot watch the HTTP server's epoll descriptor");
            MHD_stop_daemon(a->mhd);
            a->mhd = NULL;
            uv_close((uv_handle_t *)&a->async, NULL);
            uv_close((uv_handle_t *)&a->mhd_timer, NULL);
            uv_close((uv_handle_t *)&a->tick, NULL);
            uv_run(loop, UV_RUN_NOWAIT);
            goto out;
        }
        a->epoll_watch.data = a;
        uv_poll_start(&a->epoll_watch, UV_READABLE, on_epoll);
        a->epoll_started = true;
    }
    reschedule(a);
    *out = a;
    return EBB_OK;
out:
    a->h->catalogue_fini(a);
    free(a->models_dir);
    freelist(a->api_keys, a->n_api_keys);
    freelist(a->cors_origins, a->n_cors_origins);
    freelist(a->allowed_hosts, a->n_allowed_hosts);
    pthread_mutex_destroy(&a->mu);
    free(a);
    return rc;
}

ebb_err ebb_api_reconfigure(struct ebb_api *a, const struct ebb_api_config *cfg)
{
    char **keys = duplist(cfg->api_keys, cfg->n_api_keys);
    char **origins = duplist(cfg->cors_origins, cfg->n_cors_origins);
    char **hosts = duplist(cfg->allowed_hosts, cfg->n_allowed_hosts);
    if (!keys || !origins || !hosts) {
        freelist(keys, cfg->n_api_keys);
        freelist(origins, cfg->n_cors_origins);
        freelist(hosts, cfg->n_allowed_hosts);
        return EBB_ENOMEM;
    }
    freelist(a->api_keys, a->n_api_keys);
    freelist(a->cors_origins, a->n_cors_origins);
    freelist(a->allowed_hosts, a->n_allowed_hosts);
    a->api_keys = keys;
    a->n_api_keys = cfg->n_api_keys;
    a->cors_origins = origins;
    a->n_cors_origins = cfg->n_cors_origins;
    a->allowed_hosts = hosts;
    a->n_allowed_hosts = cfg->n_allowed_hosts;
    a->max_body = cfg->max_body ? cfg->max_body : 4u << 20;
    a->keepalive_ms = cfg->keepalive_ms ? cfg->keepalive_ms : 2000;
    a->max_stream_buffer = cfg->max_stream_buffer ? cfg->max_stream_buffer : 1u << 20;
    a->resp_store_cap = cfg->responses_store;
    ebb__limits_set(&a->limits, cfg);
    ebb__setup_generation(a, cfg);
    for (size_t i = 0; i < a->n_models; i++)
        if (a->models[i]->model)
            ebb__setup_defaults(a->models[i]);
    return EBB_OK;
}

uint16_t ebb_api_port(const struct ebb_api *a)
{
    return a->port;
}

void ebb_api_quiesce(struct ebb_api *a)
{
    /* The listening socket is closed rather than kept for /health: a balancer's next connect is
     * then refused before anything is sent, which nginx and HAProxy retry on another daemon even
     * for a POST (docs/SCALING.md). Connections already open see the draining answers. */
    a->draining = true;
    a->stopping = true; /* no model loads any more (catalogue.c) */
    if (a->mhd) {
        MHD_socket fd = MHD_quiesce_daemon(a->mhd);
        /* fdset mode: a poll started on the listening socket since the loop last polled would
         * be added to the epoll set after the close below (SIGABRT in libuv, seen at SIGTERM
         * in test_edge_framing.py about one run in five); the next run starts new ones. */
        if (!a->use_epoll)
            fdpolls_close(a);
        if (fd != MHD_INVALID_SOCKET)
            close(fd);
    }
    /* Idle keep-alive connections are closed now rather than at the next tick, so that the
     * window in which a balancer may still send a new request here stays short. */
    if (ebb__limits_sweep(a) || !a->use_epoll)
        ebb__kick(a);
}

size_t ebb_api_in_flight(const struct ebb_api *a)
{
    size_t n = a->n_gen_conns;
    for (struct ebb__req *r = a->live; r; r = r->live_next)
        n += r->conn == NULL;
    return n;
}

void ebb_api_free(struct ebb_api *a)
{
    if (!a)
        return;
    /* The engine is gone: deliver what it posted last, then resume every suspended
     * connection, as MHD_stop_daemon requires. A load that finished after the loop stopped
     * (SIGTERM while loading) must not be prepared now: its model was freed with the engine. */
    a->stopping = a->freeing = true;
    a->h->pull_stop(a);
    for (size_t i = 0; i < a->n_models; i++) {
        struct ebb__served *sv = a->models[i];
        if (sv->owned) { /* catalogue mode: the engines stop first, as the daemon's does */
            for (size_t k = 0; k < sv->n_rep; k++) {
                ebb_sched_free(sv->rep[k].sched);
                sv->rep[k].sched = NULL;
            }
            sv->sched = NULL;
        }
        sv->load_seen = true;
    }
    on_async(&a->async);
    for (struct ebb__req *r = a->live; r; r = r->live_next)
        ebb__resume(r);
    /* Requests waiting for a load (or a swap) are answered 503 when MHD runs them again. */
    while (a->parked) {
        struct ebb__req *r = a->parked;
        ebb__unpark(r);
        ebb__resume(r);
    }
    if (a->mhd) {
        MHD_run(a->mhd);
        a->closing = true;
        MHD_stop_daemon(a->mhd);
    }
    a->closing = true;
    fdpolls_close(a);
    if (a->epoll_started)
        uv_close((uv_handle_t *)&a->epoll_watch, NULL);
    uv_close((uv_handle_t *)&a->async, NULL);
    uv_close((uv_handle_t *)&a->mhd_timer, NULL);
    uv_close((uv_handle_t *)&a->tick, NULL);
    uv_run(a->loop, UV_RUN_NOWAIT);
    a->h->catalogue_fini(a);
    free(a->models_dir);
    ebb__limits_fini(&a->limits);
    if (a->resp_store_free)
        a->resp_store_free(a->resp_store);
    freelist(a->api_keys, a->n_api_keys);
    freelist(a->cors_origins, a->n_cors_origins);
    freelist(a->allowed_hosts, a->n_allowed_hosts);
    pthread_mutex_destroy(&a->mu);
    free(a);
}
