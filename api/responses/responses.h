/* OpenAI's Responses API, /v1/responses: requests (input items, instructions, function tools,
 * text.format, previous_response_id) mapped onto OpenAI's chat generation (api/openai/, through
 * its output hooks, struct ebb__gen_fmt), answered as a response object with typed output items
 * (reasoning, message, function_call) or as its typed SSE events; recent responses kept in a
 * bounded in-memory store for previous_response_id, GET and DELETE. Loop thread only, as all of
 * api/ (the store included: it needs no lock). docs/API.md lists every field. */
#ifndef EBB_API_RESPONSES_H
#define EBB_API_RESPONSES_H

struct ebb__req;

/* /v1/responses (POST) and /v1/responses/{id} (GET, DELETE). Called with the full body, and
 * again after a resume. */
void ebb__responses_handle(struct ebb__req *r);

#endif
