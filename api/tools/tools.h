/* Tool calls in model output: the call formats of the model families, found in the text a model
 * generates and turned into (name, arguments) pairs, either from the whole text at once or
 * incrementally from streamed pieces. The API (OpenAI tool_calls) and the Anthropic Messages
 * endpoint (tool_use blocks) share it; neither the parser nor its events know about HTTP.
 *
 * Formats (chosen from the chat template's text, ebb_tool_format_detect):
 *   hermes   <tool_call>{"name": ..., "arguments": {...}}</tool_call>, several in a row (Hermes,
 *            Qwen 2.5/3, SmolLM3, GLM, Granite 4, ...); also the default.
 *   llama3   {"name": ..., "parameters": {...}} as the whole answer, optionally after
 *            <|python_tag|>, several separated by ';' (Llama 3.1/3.2/3.3).
 *   mistral  [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...] or the newer
 *            [TOOL_CALLS]name[ARGS]{...} (Mistral Nemo, Small, Devstral).
 * In every format an answer that is nothing but a JSON call (an object with "name" and
 * "arguments" or "parameters", an array of them, or {"tool_calls": [...]}) is a call too: the
 * generic fallback for models that drop the markup.
 *
 * Every format checks names: a call counts only when it names one of the offered tools. Markup
 * whose JSON does not parse, or any of whose calls names a tool that was not offered, is
 * returned as plain content, byte for byte (the whole block: one <tool_call> element, or a
 * Llama 3 / Mistral answer's calls together).
 *
 * The reasoning splitter (think.c, at the end) separates a thinking model's <think> block from
 * its answer, before the answer reaches the tool-call parser. */
#ifndef EBB_API_TOOLS_H
#define EBB_API_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

enum ebb_tool_format {
    EBB_TOOL_HERMES = 0,
    EBB_TOOL_LLAMA3,
    EBB_TOOL_MISTRAL,
};

/* The format a chat template's source (n bytes) asks for, from the markers it contains;
 * EBB_TOOL_HERMES when it shows none. */
enum ebb_tool_format ebb_tool_format_detect(const char *src, size_t n);
const char *ebb_tool_format_name(enum ebb_tool_format f);
/* The control tokens of f's markup as a NULL-terminated list of their texts ("<|python_tag|>";
 * "[TOOL_CALLS]", "[ARGS]"); empty for hermes, whose markers are plain text. Detokenizers drop
 * control tokens: a caller that sees one of these tokens' ids puts its text into the parser's
 * input in its place. */
const char *const *ebb_tool_format_marker_tokens(enum ebb_tool_format f);

struct ebb_tool_parser_opts {
    enum ebb_tool_format format;
    /* The offered tools (an OpenAI tools array, not stolen, must outlive the parser): a call
     * in any format counts only when it names one of them. NULL: any name is a call. */
    const json_t *tools;
    size_t max_calls;      /* 0: no limit; further calls are dropped (parallel_tool_calls) */
    const char *id_prefix; /* of the generated call ids; NULL: "call_" */
};

enum ebb_tool_ev_kind {
    EBB_TOOL_EV_CONTENT,    /* text: plain content, markup never included */
    EBB_TOOL_EV_CALL_BEGIN, /* index, id, name: a new call */
    EBB_TOOL_EV_CALL_ARGS,  /* index, text: the next piece of the call's arguments (JSON) */
};

struct ebb_tool_ev {
    enum ebb_tool_ev_kind kind;
    size_t index;     /* of the call, from 0 */
    const char *id;   /* CALL_BEGIN */
    const char *name; /* CALL_BEGIN */
    const char *text; /* CONTENT and CALL_ARGS; not NUL-terminated */
    size_t len;
};

/* Receives parser events; the pointers are valid during the call only. A non-zero return stops
 * the parser with that error. */
typedef ebb_err (*ebb_tool_ev_cb)(void *ud, const struct ebb_tool_ev *ev);

/* An incremental parser: fed the generated text in pieces, it reports content and calls as soon
 * as they are decided, holding back text that may still turn out to be markup (a partial
 * "<tool_call" at the end of a piece). Each call is reported when its markup is complete (a
 * CALL_BEGIN, then its arguments), so a malformed call can still become content. */
struct ebb_tool_stream;

ebb_err ebb_tool_stream_new(const struct ebb_tool_parser_opts *o, struct ebb_tool_stream **out);
void ebb_tool_stream_free(struct ebb_tool_stream *s);
/* Feeds text[0..n); events go to cb during the call. */
ebb_err ebb_tool_stream_feed(struct ebb_tool_stream *s, const char *text, size_t n,
                             ebb_tool_ev_cb cb, void *ud);
/* The end of the output: decides everything held back. */
ebb_err ebb_tool_stream_finish(struct ebb_tool_stream *s, ebb_tool_ev_cb cb, void *ud);
/* Calls reported so far. */
size_t ebb_tool_stream_n_calls(const struct ebb_tool_stream *s);

struct ebb_tool_call {
    char id[48];
    char *name;      /* NUL-terminated */
    char *arguments; /* a JSON object as compact text, NUL-terminated */
};

/* The whole output parsed at once. */
struct ebb_tool_result {
    char *content; /* text outside the calls, surrounding whitespace trimmed when there are
                      calls; NULL when that leaves nothing */
    size_t content_len;
    struct ebb_tool_call *calls; /* (n_calls) */
    size_t n_calls;
};

/* Parses text[0..n) (the complete output) into out (release with ebb_tool_result_fini). */
ebb_err ebb_tools_parse(const struct ebb_tool_parser_opts *o, const char *text, size_t n,
                        struct ebb_tool_result *out);
void ebb_tool_result_fini(struct ebb_tool_result *r);

/* ---- reasoning (think.c) ------------------------------------------------------------------ */

/* Reasoning in model output: models that think (Qwen3, QwQ, DeepSeek R1, ...) write
 * <think>reasoning</think> before their answer, or, when the chat template's generation prompt
 * already opened the block, the reasoning and </think> alone. The splitter separates the two:
 * an answer counts as reasoning only when it starts with <think> (after whitespace) or when the
 * prompt opened the block (open); text after </think> is content (the whitespace right after
 * the tag dropped), and an unclosed block is all reasoning. The reasoning is reported without
 * its leading and trailing whitespace. */
struct ebb_think_stream;

/* Receives splitter output; text is valid during the call only. A non-zero return stops the
 * splitter with that error. */
typedef ebb_err (*ebb_think_cb)(void *ud, bool reasoning, const char *text, size_t n);

ebb_err ebb_think_stream_new(bool open, struct ebb_think_stream **out);
void ebb_think_stream_free(struct ebb_think_stream *s);
/* Feeds text[0..n); output goes to cb during the call, holding back only what may still be a
 * tag (or whitespace that may end the reasoning). */
ebb_err ebb_think_stream_feed(struct ebb_think_stream *s, const char *text, size_t n,
                              ebb_think_cb cb, void *ud);
/* The end of the output: decides what was held back. */
ebb_err ebb_think_stream_finish(struct ebb_think_stream *s, ebb_think_cb cb, void *ud);
/* True once the output was found to start with reasoning. */
bool ebb_think_stream_seen(const struct ebb_think_stream *s);

/* The whole output at once: *reasoning (NULL when the output has no reasoning) and *content,
 * both malloc'd and NUL-terminated (release with free). */
ebb_err ebb_think_split(const char *text, size_t n, bool open, char **reasoning,
                        size_t *reasoning_len, char **content, size_t *content_len);

#endif
