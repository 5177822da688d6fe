/* Private to api/ollama/: model names, timestamps and keep_alive (names.c), the request
 * translation (request.c), /api/chat and /api/generate (chat.c), /api/embed (embed.c), /api/pull
 * (pull.c, declared in ollama.h for the server's tick). Calls go one way: ollama.c -> chat.c,
 * embed.c, pull.c; chat.c -> request.c; all of them -> names.c. */
#ifndef EBB_API_OLLAMA_INT_H
#define EBB_API_OLLAMA_INT_H

#include "api/openai/openai.h"

/* The model field of an Ollama request o against the loaded model (the rule is in names.c).
 * Returns true when it names the loaded model; otherwise r was answered: 400 when the field is
 * missing or not a string, 404 {"error": "model 'x' not found"} for another name. */
bool ebb__ollama_model_ok(struct ebb__req *r, json_t *o);
/* Now as RFC 3339 in UTC with nanoseconds, as ollama writes created_at. */
void ebb__ollama_time(char *out, size_t cap);
/* keep_alive: a duration string ("5m", "1h30m", "-1"), a number of seconds, or null. Returns
 * false (and fills msg) for anything else. */
bool ebb__ollama_keep_alive_ok(json_t *v, char *msg, size_t cap);

/* request.c: the chat-completions body b (completions when *compl is set: /api/generate with
 * raw or suffix) for the Ollama request o of /api/chat (generate false) or /api/generate
 * (true), for the model a (its id and template) (its id and template). *load: nothing to generate
 * (no messages, no prompt), which ollama answers at once. EBB_EINVAL with e naming the Ollama
 * field. */
ebb_err ebb__ollama_request(const struct ebb__served *a, json_t *o, bool generate, json_t *b,
                            bool * compl, bool *load, struct ebb__perr *e);
/* A chat-completions parse error names the chat field (max_tokens): the Ollama field
 * (options.num_predict) is put in its place and before the message. */
void ebb__ollama_rename_param(struct ebb__perr *e);
/* names.c: whether the requested name matches the model id (the rule is in names.c). */
bool ebb__ollama_name_matches(const char *id, const char *name);

/* /api/chat (generate false) and /api/generate (true): a new request. */
void ebb__ollama_chat_start(struct ebb__req *r, bool generate);
/* /api/embed (legacy false) and /api/embeddings (true): a new request. */
void ebb__ollama_embed_start(struct ebb__req *r, bool legacy);

#endif
