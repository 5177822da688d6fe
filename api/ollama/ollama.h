/* Ollama's API under /api/, for the tools that look for a local ollama: /api/chat and
 * /api/generate (NDJSON streams or one object) and /api/embed (with the legacy /api/embeddings)
 * mapped onto OpenAI's generation and embeddings (api/openai/, through their output hooks);
 * /api/tags, /api/show, /api/ps and /api/version describing the one model the daemon serves;
 * /api/pull, /api/push, /api/create, /api/copy and /api/delete refused, as ebb does not manage
 * models that way. Errors take Ollama's shape, {"error": "..."}. Loop thread only.
 * docs/API.md lists every field and how ollama's semantics differ. */
#ifndef EBB_API_OLLAMA_H
#define EBB_API_OLLAMA_H

#include <stdbool.h>

struct ebb__req;

/* True for Ollama's paths that take a POST body (chat, generate and embed have their own
 * endpoints; these are show and the model-management paths) / that answer a GET. */
bool ebb__ollama_post_path(const char *url);
bool ebb__ollama_get_path(const char *url);

/* Every path above and /api/chat, /api/generate, /api/embed, /api/embeddings. Called with the
 * full body, and again after a resume. */
void ebb__ollama_handle(struct ebb__req *r);

#endif
