/* Private to api/responses/: the store (store.c), the request translation (request.c), the
 * answer and its events (output.c); responses.c ties them to the edge. Calls go one way:
 * responses.c -> request.c, output.c -> store.c. */
#ifndef EBB_API_RESPONSES_INT_H
#define EBB_API_RESPONSES_INT_H

#include "api/openai/openai.h"

/* ---- the store (store.c) ------------------------------------------------------------------ */

/* The stored responses of one server: at most api->resp_store_cap, the least recently used
 * dropped first. Each entry holds the response object (for GET) and the conversation it ended
 * (its input and output as chat messages, without instructions, for previous_response_id);
 * entries share message objects, so a chain of turns costs one conversation, not one per turn. */
struct ebb__resp_store;

/* r->api's store, created on first use (NULL when out of memory). */
struct ebb__resp_store *ebb__resp_store_of(struct ebb_api *a);
/* Keeps response (with id) and history (both referenced, not stolen); evicts down to cap. */
void ebb__resp_store_put(struct ebb__resp_store *s, unsigned cap, const char *id, json_t *response,
                         json_t *history);
/* The entry id (borrowed; marks it recently used), or false. */
bool ebb__resp_store_get(struct ebb__resp_store *s, const char *id, json_t **response,
                         json_t **history);
/* Drops the entry id; false if there was none. */
bool ebb__resp_store_delete(struct ebb__resp_store *s, const char *id);

/* ---- the request (request.c) -------------------------------------------------------------- */

/* A Responses request as the chat generation takes it. */
struct ebb__resp_req {
    json_t *req;     /* the request body (owned) */
    json_t *chat;    /* the equivalent chat-completions body (owned) */
    json_t *history; /* the conversation without instructions: the previous response's, then
                        this input's messages (owned) */
    bool stream, store;
};

/* Parses body into q. EBB_EINVAL (400) or EBB_ENOTFOUND (404: previous_response_id) with e
 * naming the field; EBB_ENOMEM. Release q with ebb__resp_req_fini (also after a failure). */
ebb_err ebb__resp_req_parse(struct ebb_api *a, const char *body, size_t n, struct ebb__resp_req *q,
                            struct ebb__perr *e);
void ebb__resp_req_fini(struct ebb__resp_req *q);

/* ---- the answer (output.c) ---------------------------------------------------------------- */

/* Per-request state beside struct ebb__gen (ext); created by ebb__resp_new, which takes the
 * request and history of q (q keeps nothing). */
struct ebb__resp;
struct ebb__resp *ebb__resp_new(struct ebb__resp_req *q);
/* The output hooks: the response object or the typed events. */
extern const struct ebb__gen_fmt ebb__resp_fmt;
/* "<prefix>_" and 32 hex digits into out. */
void ebb__resp_id(char *out, size_t cap, const char *prefix);

#endif
