/* Private to api/http/: the edge limits' entry points, which only server.c calls, and the served
 * model's set-up (model-setup.c), which server.c calls on start, reload and load. */
#ifndef EBB_API_HTTP_INT_H
#define EBB_API_HTTP_INT_H

#include "http.h"

/* The con_cls of a request the limits answered (never an ebb__req). */
extern void *const ebb__limits_refused;
/* Takes the deadlines and caps of cfg (at start and on reload). */
void ebb__limits_set(struct ebb__limits *l, const struct ebb_api_config *cfg);
void ebb__limits_fini(struct ebb__limits *l);
/* MHD's accept policy (cls: the api): closes connections past the caps' headroom. */
enum MHD_Result ebb__limits_accept(void *cls, const struct sockaddr *sa, socklen_t len);
/* MHD's connection notification (cls: the api): tracks each connection. */
void ebb__limits_notify(void *cls, struct MHD_Connection *mc, void **socket_context,
                        enum MHD_ConnectionNotificationCode code);
/* MHD's access handler (cls: the api): moves the connection through its phases, answers the
 * requests of connections over a cap (except /health), then calls api->h->on_access. */
enum MHD_Result ebb__limits_access(void *cls, struct MHD_Connection *mc, const char *url,
                                   const char *method, const char *version, const char *upload,
                                   size_t *upload_size, void **con_cls);
/* MHD's URI log callback (cls: the api): the request line has arrived. Returns NULL. */
void *ebb__limits_uri(void *cls, const char *uri, struct MHD_Connection *mc);
/* A request of mc is complete: the connection waits for the next one (header phase). */
void ebb__limits_request_done(struct MHD_Connection *mc);
/* Shuts down the sockets past their deadline; true if it shut any (then run MHD). */
bool ebb__limits_sweep(struct ebb_api *a);

/* The framing of mc's complete request head (RFC 9112): 0 if sound; else 400 (ambiguous or
 * invalid: two Host or Content-Length headers, Content-Length with Transfer-Encoding, no Host on
 * HTTP/1.1...) or 501 (a transfer coding other than chunked), with *why a static sentence. The
 * caller answers before reading the body and closes the connection. */
unsigned ebb__framing_check(struct MHD_Connection *mc, const char *version, const char **why);

/* ---- the served models (model-setup.c) --------------------------------------------------- */

/* Takes the configured generation defaults of cfg (not yet resolved against a model). */
void ebb__setup_generation(struct ebb_api *a, const struct ebb_api_config *cfg);
/* Resolves the generation defaults of sv's model under the configured ones; the GGUF keys that
 * cannot be used are logged. */
void ebb__setup_defaults(struct ebb__served *sv);
/* sv's engine has loaded its model (the async callback saw load_state 1): picks its chat
 * template and fill-in-the-middle tokens. False (tmpl_err says why) if it cannot be served. */
bool ebb__setup_loaded(struct ebb__served *sv);
/* A scheduler's on_loaded with ud = the served model (any thread). */
void ebb__served_on_loaded(void *ud, ebb_err rc, const char *msg);

/* ---- the catalogue (catalogue.c) ----------------------------------------------------------- */

/* ebb__catalogue_init, _fini, _async and _tick: http.h (server.c calls them through struct
 * ebb__handlers). */
/* Requests parked for a load go on (their handlers run again). */
void ebb__catalogue_wake(struct ebb_api *a);

#endif
