/* A Jinja2-subset template interpreter for the chat templates GGUF files carry
 * (tokenizer.chat_template). It renders them as Hugging Face transformers does: Jinja2 with
 * trim_blocks and lstrip_blocks, an immutable sandbox (lists and dicts cannot be changed in
 * place), the loop controls break/continue, a tojson that keeps key order and non-ASCII text,
 * and the globals raise_exception and strftime_now.
 *
 * Templates come from untrusted files: parsing bounds nesting depth, rendering bounds
 * recursion, work, memory and output size, and every failure is an error message naming the
 * template line and the construct, never a crash. */
#ifndef EBB_API_JINJA_H
#define EBB_API_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/err.h"

struct ebb_jinja;

/* Limits on one render; zero fields take the defaults below. */
struct ebb_jinja_limits {
    size_t max_output;  /* bytes of rendered text (default 16 MiB) */
    size_t max_memory;  /* bytes of values alive during a render (default 256 MiB) */
    uint64_t max_steps; /* evaluation steps, a bound on loops (default 50 million) */
    unsigned max_depth; /* nested macro calls and recursion (default 64) */
};

/* Parses src[0..n) into a template (*out, free with ebb_jinja_free). Syntax errors, unknown
 * statements, filters and tests are EBB_EUNSUPPORTED (constructs outside the subset) or
 * EBB_EINVAL (malformed), with a message naming the line and the construct. */
ebb_err ebb_jinja_parse(const char *src, size_t n, struct ebb_jinja **out, struct ebb_diag *diag);

void ebb_jinja_free(struct ebb_jinja *t);

/* Renders t with the variables of the JSON object vars (messages, tools, add_generation_prompt,
 * bos_token, ...; not stolen) into a malloc'd NUL-terminated string (*out, *out_len).
 * strftime_now formats now (NULL: the local time at the call). limits may be NULL. A template
 * that raises (raise_exception) or fails at run time is EBB_EINVAL with a message naming the
 * line; exceeding a limit is EBB_ERANGE. Thread-safe for distinct calls on one template. */
ebb_err ebb_jinja_render(const struct ebb_jinja *t, const json_t *vars, const struct tm *now,
                         const struct ebb_jinja_limits *limits, char **out, size_t *out_len,
                         struct ebb_diag *diag);

/* Python's str.strip() of s[0..n), as the trim filter does it (str.isspace: Unicode's whitespace,
 * U+00A0 and U+3000 included): the offset and length of what it keeps. For renderers that mirror
 * a template in C (api/chat's built-in families). */
void ebb_jinja_trim(const char *s, size_t n, size_t *off, size_t *len);

#endif
