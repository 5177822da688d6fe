/* Ollama's API under /api/, for the tools that look for a local ollama: /api/chat and
 * /api/generate (NDJSON streams or one object) and /api/embed (with the legacy /api/embeddings)
 * mapped onto OpenAI's generation and embeddings (api/openai/, through their output hooks);
 * /api/tags, /api/show, /api/ps and /api/version describing the one model the daemon serves;
 * /api/pull fetching a model from Hugging Face into models_dir (pull.c, on a thread of its own,
 * its progress streamed as NDJSON); /api/push, /api/create, /api/copy and /api/delete refused.
 * Errors take Ollama's shape, {"error": "..."}. Loop thread only. docs/API.md lists every field and
 * how ollama's semantics differ. */
#ifndef EBB_API_OLLAMA_H
#define EBB_API_OLLAMA_H

#include <stdbool.h>

struct ebb__req;
struct ebb_api;

/* True for Ollama's paths that take a POST body (chat, generate and embed have their own
 * endpoints; these are show and the model-management paths) / that answer a GET. */
bool ebb__ollama_post_path(const char *url);
bool ebb__ollama_get_path(const char *url);

/* Every path above and /api/chat, /api/generate, /api/embed, /api/embeddings. Called with the
 * full body, and again after a resume. */
void ebb__ollama_handle(struct ebb__req *r);

/* /api/pull (pull.c): starts the pull of r's body's model on a thread of its own. */
void ebb__ollama_pull_start(struct ebb__req *r);
/* /api/pull again after a resume: the answer of a pull that was not streamed. */
void ebb__ollama_pull_resumed(struct ebb__req *r);
/* The server's tick: hands each pull's progress to its request, wakes the request, and frees
 * the pulls that ended (a several-model daemon adds what they fetched to its catalogue). */
void ebb__ollama_pull_tick(struct ebb_api *a);
/* ebb_api_free: stops every pull (its .part stays for the next), joins its thread and ends its
 * answer. */
void ebb__ollama_pull_stop(struct ebb_api *a);

#endif
