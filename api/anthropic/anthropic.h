/* Anthropic's Messages API, /v1/messages: requests mapped onto OpenAI's generation (api/openai/,
 * through its output hooks, struct ebb__gen_fmt), answers and events in Anthropic's shapes. */
#ifndef EBB_API_ANTHROPIC_H
#define EBB_API_ANTHROPIC_H

struct ebb__req;

/* /v1/messages. Called with the full body, and again after a resume. */
void ebb__messages_handle(struct ebb__req *r);
/* /v1/messages/count_tokens: the prompt a /v1/messages request with this body would evaluate,
 * rendered and tokenized, answered as {"input_tokens": n}; nothing is generated. Called with the
 * full body (again after a model swap's hold ends). */
void ebb__messages_count_handle(struct ebb__req *r);

#endif
