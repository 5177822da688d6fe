/* Private to api/ollama/: model names, timestamps and keep_alive (names.c), /api/chat and
 * /api/generate (chat.c), /api/embed (embed.c). ollama.c dispatches to chat.c and embed.c; all
 * three use names.c, which calls none of them. */
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

/* /api/chat (generate false) and /api/generate (true): a new request. */
void ebb__ollama_chat_start(struct ebb__req *r, bool generate);
/* /api/embed (legacy false) and /api/embeddings (true): a new request. */
void ebb__ollama_embed_start(struct ebb__req *r, bool legacy);

#endif
