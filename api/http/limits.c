/* Hostile clients at the edge: a deadline on each phase of a request before the daemon works on
 * it (headers, then body), a cap on the connections of one client address and on all of them,
 * and /health kept reachable under every cap.
 *
 * libmicrohttpd's own connection timeout counts inactivity, so a client that sends one byte a
 * second never trips it; its per-address limit refuses at accept, before the request line says
 * whether it is a health check. So each connection is tracked here (MHD's connection
 * notifications) with the phase it is in and when that phase began, the tick sweep shuts down
 * the socket of one past its deadline (MHD then sees the end of the stream and frees it), and
 * the caps are applied in two steps:
 *   - up to the cap, connections are served normally;
 *   - past it, a small headroom is still accepted (EBB__LIMITS_RESERVE more in all,
 *     EBB__LIMITS_CLIENT_RESERVE more per address) whose connections must send their headers
 *     within EBB__LIMITS_RESERVE_HEADER_S, are answered only on /health (anything else: 429 for
 *     the per-address cap, 503 for the global one) and are closed after that one answer;
 *   - past the headroom, connections are closed at accept.
 * A slow or idle client can thus hold a headroom slot for two seconds at most, and a health
 * probe that comes while a client sits at its cap, or the server at its cap, is still answered.
 * An idle keep-alive connection waiting for its next request may wait request_timeout (counted
 * from its last answer, so dribbling bytes does not extend it); once MHD has its next request
 * line, the head has header_timeout.
 *
 * A flood from many addresses that reconnects as soon as it is closed would refill that
 * headroom before a probe gets it, so admission at accept adds (docs/SERVICE.md, "Floods from
 * many addresses"): an accept rate per address and in all (past the total only addresses with
 * no open connection get in); past max_connections, an address holding more than its share is
 * closed at accept, and a newcomer finding the headroom full takes a connection whose head is
 * not complete from the address holding the most; a connection silent for silent_timeout is
 * closed; and one whose client closed with its request unfinished is freed at the next sweep. */
#include "http-int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "base/log.h"

#define EBB__LIMITS_RESERVE 16
#define EBB__LIMITS_CLIENT_RESERVE 4
#define EBB__LIMITS_RESERVE_HEADER_S 2.0
#define EBB__LIMITS_LOG_EVERY_S 10.0

#ifndef POLLRDHUP /* Linux's; elsewhere only a full hang-up is seen */
#define POLLRDHUP 0
#endif

/* A request the limits answered themselves: MHD's later calls for it are swallowed. */
static char refused_req;
void *const ebb__limits_refused = &refused_req;

/* The socket context of a connection whose tracking could not be allocated: its request is
 * answered 503 and the connection closed. */
static struct ebb__conn untracked = {.fd = -1};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ebb__limits_set(struct ebb__limits *l, const struct ebb_api_config *cfg)
{
    l->header_s = (double)cfg->header_timeout_ms / 1e3;
    l->body_s = (double)cfg->body_timeout_ms / 1e3;
    l->idle_s = (double)cfg->timeout_s;
    l->max_conns = cfg->max_connections;
    l->max_per_client = cfg->max_connections_per_client;
    l->silent_s = (double)cfg->silent_timeout_ms / 1e3;
    l->rate = cfg->accept_rate;
    l->rate_total = cfg->accept_rate_total;
}

void ebb__limits_fini(struct ebb__limits *l)
{
    while (l->conns) {
        struct ebb__conn *c = l->conns;
        l->conns = c->next;
        free(c);
    }
    free(l->addrs);
    l->addrs = NULL;
    l->n_addrs = l->cap_addrs = 0;
}

/* ---- client addresses ---------------------------------------------------------------------- */

/* The address bytes of sa (4 or 16; a v4-mapped IPv6 address counts as its IPv4 one), 0 for
 * families without one (the connection is then not counted per address). */
static size_t addr_key(const struct sockaddr *sa, uint8_t key[16])
{
    if (!sa)
        return 0;
    if (sa->sa_family == AF_INET) {
        memcpy(key, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        return 4;
    }
    if (sa->sa_family == AF_INET6) {
        const uint8_t *b = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(b, mapped, 12)) {
            memcpy(key, b + 12, 4);
            return 4;
        }
        memcpy(key, b, 16);
        return 16;
    }
    return 0;
}

static void addr_text(const uint8_t *key, size_t len, char *out, size_t cap)
{
    if (!inet_ntop(len == 4 ? AF_INET : AF_INET6, key, out, (socklen_t)cap))
        snprintf(out, cap, "?");
}

/* The entry of key, or NULL. The table holds one entry per address with open connections; a
 * linear scan is enough for the few hundred a cap allows. */
static struct ebb__addr *addr_find(struct ebb__limits *l, const uint8_t *key, size_t len)
{
    for (size_t i = 0; i < l->n_addrs; i++)
        if (l->addrs[i].len == len && !memcmp(l->addrs[i].key, key, len))
            return &l->addrs[i];
    return NULL;
}

static struct ebb__addr *addr_add(struct ebb__limits *l, const uint8_t *key, size_t len)
{
    struct ebb__addr *e = addr_find(l, key, len);
    if (e)
        return e;
    if (l->n_addrs == l->cap_addrs) {
        size_t cap = l->cap_addrs ? l->cap_addrs * 2 : 16;
        struct ebb__addr *p = realloc(l->addrs, cap * sizeof(*p));
        if (!p)
            return NULL;
        l->addrs = p;
        l->cap_addrs = cap;
    }
    e = &l->addrs[l->n_addrs++];
    memset(e, 0, sizeof(*e));
    memcpy(e->key, key, len);
    e->len = (uint8_t)len;
    e->tokens = l->rate;
    e->t_fill = mono_now();
    return e;
}

static void addr_release(struct ebb__limits *l, const uint8_t *key, size_t len)
{
    struct ebb__addr *e = addr_find(l, key, len);
    if (!e)
        return;
    if (e->n > 0 && --e->n == 0) {
        l->n_active--;
        if (!l->rate) /* else kept for its bucket until it is full again (the sweep) */
            *e = l->addrs[--l->n_addrs];
    }
}

/* Refills a token bucket of rate per second and as many at most; true if one token was left to
 * take (then taken when take). */
static bool bucket_take(double *tokens, double *t_fill, unsigned rate, double now, bool take)
{
    *tokens += (now - *t_fill) * rate;
    if (*tokens > rate)
        *tokens = rate;
    *t_fill = now;
    if (*tokens < 1.0)
        return false;
    if (take)
        *tokens -= 1.0;
    return true;
}

/* Makes room at the global cap for a client address with no open connection: shuts down a
 * connection of the address holding the most whose request head is not complete (nothing is
 * being worked on for it: it is silent, slow, or idle between requests). False if there is none. */
static bool evict_for_newcomer(struct ebb__limits *l)
{
    struct ebb__addr *top = NULL;
    for (size_t i = 0; i < l->n_addrs; i++)
        if (!top || l->addrs[i].n > top->n)
            top = &l->addrs[i];
    if (!top || top->n < 2)
        return false;
    for (struct ebb__conn *c = l->conns; c; c = c->next) {
        if (c->shut || c->fd < 0 || c->phase != EBB__PHASE_HEADER || c->started)
            continue;
        if (c->key_len != top->len || memcmp(c->key, top->key, top->len))
            continue;
        shutdown(c->fd, SHUT_RDWR);
        c->shut = true;
        return true;
    }
    return false;
}

/* ---- the log line of each cap and timeout, at most one per kind every 10 s ----------------- */

static const char *const refusal_what[EBB__REFUSE_N] = {
    [EBB__REFUSE_CLIENT] = "connections from one client address over max_connections_per_client",
    [EBB__REFUSE_GLOBAL] = "connections over max_connections",
    [EBB__REFUSE_HEADER_TIMEOUT] = "connections closed after header_timeout without a complete "
                                   "request head",
    [EBB__REFUSE_BODY_TIMEOUT] = "connections closed after body_timeout without a complete "
                                 "request body",
    [EBB__REFUSE_FRAMING] = "requests refused for their framing (answered 400 or 501, "
                            "connection closed)",
    [EBB__REFUSE_PEER_CLOSED] = "connections whose client closed before its request was complete",
    [EBB__REFUSE_RATE] = "connections over an accept rate",
    [EBB__REFUSE_SILENT] = "connections closed after silent_timeout without a request line",
};

static void note(struct ebb_api *a, enum ebb__refusal k, const char *detail)
{
    struct ebb__limits *l = &a->limits;
    a->metrics.refused[k]++;
    l->pending_log[k]++;
    double now = mono_now();
    if (l->last_log[k] && now - l->last_log[k] < EBB__LIMITS_LOG_EVERY_S)
        return;
    ebb_log(EBB_LOG_WARN, "http", "%llu %s in the last %.0f s (%s; /health is still answered)",
            (unsigned long long)l->pending_log[k], refusal_what[k],
            l->last_log[k] ? now - l->last_log[k] : 0.0, detail);
    l->last_log[k] = now;
    l->pending_log[k] = 0;
}

/* ---- MHD callbacks -------------------------------------------------------------------------- */

enum MHD_Result ebb__limits_accept(void *cls, const struct sockaddr *sa, socklen_t len)
{
    (void)len;
    struct ebb_api *a = cls;
    struct ebb__limits *l = &a->limits;
    char detail[160], who[64] = "?";
    double now = mono_now();
    uint8_t key[16];
    size_t klen = addr_key(sa, key);
    struct ebb__addr *e = klen ? addr_find(l, key, klen) : NULL;
    bool fresh = !e || e->n == 0;
    if (klen)
        addr_text(key, klen, who, sizeof(who));
    /* Accept rates: an address over its own rate is refused; over the total rate only addresses
     * without an open connection are still let in (a probe is one of them). */
    if (l->rate && klen) {
        if (!e && !(e = addr_add(l, key, klen)))
            return MHD_NO;
        if (!bucket_take(&e->tokens, &e->t_fill, l->rate, now, false)) {
            snprintf(detail, sizeof(detail), "%s over accept_rate %u/s: closed at accept", who,
                     l->rate);
            note(a, EBB__REFUSE_RATE, detail);
            return MHD_NO;
        }
    }
    if (l->rate_total &&
        !bucket_take(&l->tokens_total, &l->t_fill_total, l->rate_total, now, false) && !fresh) {
        snprintf(detail, sizeof(detail), "%s over accept_rate_total %u/s: closed at accept", who,
                 l->rate_total);
        note(a, EBB__REFUSE_RATE, detail);
        return MHD_NO;
    }
    /* The global cap, fairly: past it, an address holding more than its share of max_connections
     * is refused at once, so the headroom (/health) stays for the others; with the headroom full
     * too, an address with no connection takes one from the address holding the most. */
    if (l->max_conns && l->n_conns >= l->max_conns) {
        size_t active = l->n_active + (fresh ? 1 : 0);
        unsigned fair = active ? (unsigned)(l->max_conns / active) : l->max_conns;
        if (fair < 1)
            fair = 1;
        bool full = l->n_conns >= (size_t)l->max_conns + EBB__LIMITS_RESERVE;
        if ((!fresh && active > 1 && e->n > fair) || (full && !(fresh && evict_for_newcomer(l)))) {
            snprintf(detail, sizeof(detail),
                     "%zu open, max_connections %u; %s has %u, its share %u: closed at accept",
                     l->n_conns, l->max_conns, who, e ? e->n : 0, fair);
            note(a, EBB__REFUSE_GLOBAL, detail);
            return MHD_NO;
        }
    }
    if (e && l->max_per_client && e->n >= l->max_per_client + EBB__LIMITS_CLIENT_RESERVE) {
        snprintf(detail, sizeof(detail),
                 "%s has %u open, max_connections_per_client %u: closed "
                 "at accept",
                 who, e->n, l->max_per_client);
        note(a, EBB__REFUSE_CLIENT, detail);
        return MHD_NO;
    }
    if (e && l->rate)
        bucket_take(&e->tokens, &e->t_fill, l->rate, now, true);
    if (l->rate_total)
        bucket_take(&l->tokens_total, &l->t_fill_total, l->rate_total, now, true);
    return MHD_YES;
}

static void conn_started(struct ebb_api *a, struct MHD_Connection *mc, void **socket_context)
{
    struct ebb__limits *l = &a->limits;
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    struct ebb__conn *c = calloc(1, sizeof(*c));
    if (!c) {
        /* Untracked, it would escape every deadline: its request is refused. */
        *socket_context = &untracked;
        return;
    }
    c->fd = fi ? fi->connect_fd : -1;
    c->t_phase = mono_now();
    c->key_len = (uint8_t)addr_key(ai ? ai->client_addr : NULL, c->key);
    if (c->key_len) {
        struct ebb__addr *e = addr_add(l, c->key, c->key_len);
        if (!e) {
            free(c);
            *socket_context = &untracked;
            return;
        }
        if (e->n++ == 0)
            l->n_active++;
        if (l->max_per_client && e->n > l->max_per_client)
            c->excess = EBB__REFUSE_CLIENT + 1;
    }
    l->n_conns++;
    a->metrics.open_connections = l->n_conns;
    if (!c->excess && l->max_conns && l->n_conns > l->max_conns)
        c->excess = EBB__REFUSE_GLOBAL + 1;
    c->next = l->conns;
    if (l->conns)
        l->conns->prev = c;
    l->conns = c;
    *socket_context = c;
}

static void conn_closed(struct ebb_api *a, void **socket_context)
{
    struct ebb__limits *l = &a->limits;
    struct ebb__conn *c = *socket_context;
    *socket_context = NULL;
    if (!c || c == &untracked)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        l->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->key_len)
        addr_release(l, c->key, c->key_len);
    l->n_conns--;
    a->metrics.open_connections = l->n_conns;
    free(c);
}

void ebb__limits_notify(void *cls, struct MHD_Connection *mc, void **socket_context,
                        enum MHD_ConnectionNotificationCode code)
{
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        conn_started(cls, mc, socket_context);
    else
        conn_closed(cls, socket_context);
}

static struct ebb__conn *conn_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Queues an error answer to the request of mc and closes the connection after it (MHD reads no
 * more of the request: a body not yet read is never taken for a next request). */
static enum MHD_Result answer_close(struct MHD_Connection *mc, const char *url, unsigned status,
                                    const char *msg, const char *code)
{
    char *body = ebb__error_body(url, status, msg, NULL, code);
    const char *s = body ? body : "{}";
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(s), (void *)s, MHD_RESPMEM_MUST_COPY);
    free(body);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (status == 429 || status == 503)
        MHD_add_response_header(resp, "Retry-After", "1");
    MHD_add_response_header(resp, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(mc, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Answers a request on a connection accepted over a cap, and closes the connection after it. */
static enum MHD_Result refuse(struct ebb_api *a, struct MHD_Connection *mc, struct ebb__conn *c,
                              const char *url)
{
    struct ebb__limits *l = &a->limits;
    enum ebb__refusal k = (enum ebb__refusal)(c->excess - 1);
    bool client = k == EBB__REFUSE_CLIENT;
    char msg[200], detail[160], who[64] = "?";
    if (c->key_len)
        addr_text(c->key, c->key_len, who, sizeof(who));
    if (client) {
        snprintf(msg, sizeof(msg),
                 "too many connections from this address (max_connections_per_client %u)",
                 l->max_per_client);
        snprintf(detail, sizeof(detail), "%s: %.60s answered 429", who, url);
    } else {
        snprintf(msg, sizeof(msg), "the server has too many connections (max_connections %u)",
                 l->max_conns);
        snprintf(detail, sizeof(detail), "%zu open; %s: %.60s answered 503", l->n_conns, who, url);
    }
    note(a, k, detail);
    return answer_close(mc, url, client ? 429 : 503, msg,
                        client ? "too_many_connections" : "server_busy");
}

enum MHD_Result ebb__limits_access(void *cls, struct MHD_Connection *mc, const char *url,
                                   const char *method, const char *version, const char *upload,
                                   size_t *upload_size, void **con_cls)
{
    struct ebb_api *a = cls;
    if (*con_cls == ebb__limits_refused) {
        *upload_size = 0;
        return MHD_YES;
    }
    ebb__json_alloc_failed(true); /* ebb__reply_json checks what this request's work left */
    struct ebb__conn *c = conn_of(mc);
    bool first = *con_cls == NULL;
    if (c == &untracked) {
        /* answered below, like a request that cannot be allocated */
    } else if (c && first) {
        c->phase = EBB__PHASE_BODY;
        c->t_phase = mono_now();
        const char *why = NULL;
        unsigned bad = ebb__framing_check(mc, version, &why);
        if (bad) {
            char msg[160], detail[160], who[64] = "?";
            if (c->key_len)
                addr_text(c->key, c->key_len, who, sizeof(who));
            snprintf(msg, sizeof(msg), "malformed request framing: %s", why);
            snprintf(detail, sizeof(detail), "%s: %.60s: %s", who, url, why);
            note(a, EBB__REFUSE_FRAMING, detail);
            *con_cls = ebb__limits_refused;
            return answer_close(mc, url, bad, msg,
                                bad == 501 ? "not_implemented" : "invalid_request");
        }
        if (c->excess && strcmp(url, "/health")) {
            *con_cls = ebb__limits_refused;
            return refuse(a, mc, c, url);
        }
    } else if (c && c != &untracked && *upload_size == 0) {
        c->phase = EBB__PHASE_BUSY; /* the whole body is in: no deadline while it is served */
    }
    enum MHD_Result ret = c == &untracked && first ? MHD_NO
                                                   : a->h->on_access(cls, mc, url, method, version,
                                                                     upload, upload_size, con_cls);
    if (ret == MHD_NO && first && !*con_cls) {
        /* The handler could not even allocate the request: answer 503 rather than drop the
         * connection without a word. */
        static const char body[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                   "\"server_error\",\"param\":null,\"code\":\"out_of_memory\"}}";
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(sizeof(body) - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
        if (!resp)
            return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", "application/json");
        MHD_add_response_header(resp, "Retry-After", "1");
        MHD_add_response_header(resp, "Connection", "close");
        ret = MHD_queue_response(mc, 503, resp);
        MHD_destroy_response(resp);
        *con_cls = ebb__limits_refused;
    }
    return ret;
}

void *ebb__limits_uri(void *cls, const char *uri, struct MHD_Connection *mc)
{
    (void)cls;
    (void)uri;
    struct ebb__conn *c = mc ? conn_of(mc) : NULL;
    if (c && c != &untracked)
        c->spoke = true;
    if (c && c != &untracked && c->n_requests) {
        /* A keep-alive connection's next request has begun: its head has header_timeout. */
        c->started = true;
        c->t_phase = mono_now();
    }
    return NULL;
}

void ebb__limits_request_done(struct MHD_Connection *mc)
{
    struct ebb__conn *c = mc ? conn_of(mc) : NULL;
    if (!c || c == &untracked)
        return;
    c->started = false;
    c->n_requests++;
    c->phase = EBB__PHASE_HEADER;
    c->t_phase = mono_now();
    if (c->excess) /* one answer per headroom connection */
        c->close_now = true;
}

/* True if the client of c has closed its side with nothing left unread: its request head or body
 * can never complete. libmicrohttpd's edge-triggered epoll mode misses a FIN that arrives with the
 * last bytes of a head (it read them all at once and waits for the body), which left such a
 * connection in CLOSE-WAIT, holding its slot, until the phase deadline. A client that sent a
 * whole request and then half-closed is not taken: its head is complete (phase BUSY, or the body
 * is still unread in the socket). */
static bool peer_gone(const struct ebb__conn *c)
{
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return false;
    int unread = 0;
    return ioctl(c->fd, FIONREAD, &unread) != 0 || unread == 0;
}

bool ebb__limits_sweep(struct ebb_api *a)
{
    struct ebb__limits *l = &a->limits;
    bool closed = false;
    double now = mono_now();
    for (struct ebb__conn *c = l->conns; c; c = c->next) {
        if (c->shut || c->fd < 0)
            continue;
        if (c->phase != EBB__PHASE_BUSY && peer_gone(c)) {
            if (c->phase == EBB__PHASE_BODY || c->started || !c->n_requests) {
                char who[64] = "?", detail[120];
                if (c->key_len)
                    addr_text(c->key, c->key_len, who, sizeof(who));
                snprintf(detail, sizeof(detail), "last from %s after %.1f s in its %s", who,
                         now - c->t_phase, c->phase == EBB__PHASE_BODY ? "body" : "head");
                note(a, EBB__REFUSE_PEER_CLOSED, detail);
            }
            shutdown(c->fd, SHUT_RDWR);
            c->shut = true;
            closed = true;
            continue;
        }
        double limit = 0;
        enum ebb__refusal k = EBB__REFUSE_HEADER_TIMEOUT;
        /* A keep-alive connection that has not begun its next request is idle, not slow: it
         * may wait request_timeout (then header_timeout more, for a request line begun just
         * before), counted from its last answer, not from its last byte. */
        bool idle = c->phase == EBB__PHASE_HEADER && c->n_requests && !c->started;
        if (idle) {
            limit = l->idle_s ? l->idle_s + l->header_s : 0;
        } else if (c->phase == EBB__PHASE_HEADER) {
            limit = c->excess ? EBB__LIMITS_RESERVE_HEADER_S : l->header_s;
            if (l->header_s && l->header_s < limit)
                limit = l->header_s;
            if (!c->spoke && l->silent_s && (!limit || l->silent_s < limit)) {
                limit = l->silent_s;
                k = EBB__REFUSE_SILENT;
            }
        } else if (c->phase == EBB__PHASE_BODY) {
            limit = l->body_s;
            k = EBB__REFUSE_BODY_TIMEOUT;
        }
        bool late = limit > 0 && now - c->t_phase > limit;
        /* Draining: a keep-alive connection between requests is closed now, so that a
         * balancer's next request goes to a connect that is refused (and retried elsewhere)
         * rather than to this daemon. */
        if (idle && a->draining)
            c->close_now = true;
        if (!late && !c->close_now)
            continue;
        if (late && idle)
            ebb_log(EBB_LOG_DEBUG, "http", "closing an idle keep-alive connection");
        if (late && !c->close_now && !idle) {
            char who[64] = "?", detail[120];
            if (c->key_len)
                addr_text(c->key, c->key_len, who, sizeof(who));
            snprintf(detail, sizeof(detail), "last from %s after %.1f s", who, now - c->t_phase);
            note(a, k, detail);
        }
        shutdown(c->fd, SHUT_RDWR);
        c->shut = true;
        closed = true;
    }
    /* Addresses without connections are kept only while their accept_rate bucket refills. */
    for (size_t i = 0; i < l->n_addrs;) {
        struct ebb__addr *e = &l->addrs[i];
        if (e->n == 0 && l->rate)
            bucket_take(&e->tokens, &e->t_fill, l->rate, now, false);
        if (e->n == 0 && (!l->rate || e->tokens >= l->rate))
            *e = l->addrs[--l->n_addrs];
        else
            i++;
    }
    return closed;
}
