/* JSON Schema -> GBNF. Turns the subset of JSON Schema that OpenAI's structured outputs and
 * llama.cpp accept into GBNF rules (runtime/grammar) that admit exactly the JSON texts the
 * schema describes, with bounded whitespace between tokens.
 *
 * Several schemas can be composed into one grammar: each call appends the rules for one schema
 * under a named root rule to the same builder, and helper rules shared by every schema (JSON
 * strings, numbers, whitespace) are written only once. The caller writes the grammar's own
 * `root` rule (or passes "root" as the rule name). This is how tool-call grammars are built:
 *
 *     struct ebb_gbnf_builder b;
 *     ebb_gbnf_builder_init(&b);
 *     ebb_json_schema_to_gbnf(params_a, "tool-a-args", &b, &diag);
 *     ebb_json_schema_to_gbnf(params_b, "tool-b-args", &b, &diag);
 *     ebb_gbnf_printf(&b, "root ::= \"<tool_call>\" ( tool-a-args | tool-b-args ) ...\n");
 *     ... use b.text ...
 *     ebb_gbnf_builder_fini(&b);
 *
 * Not thread-safe per builder; different builders are independent. */
#ifndef EBB_API_JSON_SCHEMA_H
#define EBB_API_JSON_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Growable GBNF text, NUL-terminated. text is NULL until something is written. */
struct ebb_gbnf_builder {
    char *text;
    size_t len, cap;
    uint32_t shared;  /* internal: which shared helper rules are already written */
    uint32_t n_rules; /* internal: counter for generated rule names */
    bool oom;         /* an append failed; the converter then returns EBB_ENOMEM */
    /* After a failed conversion: where, as the path from the schema's root in the client's
     * terms, dotted (".properties.x.minItems", ".anyOf[1]"; "" for the root itself). */
    char err_path[256];
};

void ebb_gbnf_builder_init(struct ebb_gbnf_builder *b);
/* Frees the text; accepts a builder that was only initialised. */
void ebb_gbnf_builder_fini(struct ebb_gbnf_builder *b);
/* Appends formatted text (for the caller's own rules). Sets b->oom on failure. */
void ebb_gbnf_printf(struct ebb_gbnf_builder *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Appends the rules for schema under the rule name root_rule_name (letters, digits and '-';
 * the caller keeps names unique across calls; helper rules are named after it, so a prefix such
 * as "tool-3-" keeps them apart). schema = NULL or {} admits any JSON value; {"type":"object"}
 * any JSON object. Errors, with nothing guaranteed in b:
 *   EBB_EUNSUPPORTED: a keyword ebb cannot enforce; diag names the keyword and its JSON path
 *                     ("'patternProperties' at $.properties.a is not supported").
 *   EBB_EINVAL:       a malformed schema (wrong type for a keyword, unresolvable $ref, ...),
 *                     diag names the path.
 *   EBB_ENOMEM.
 * Both of the first two are the client's fault (HTTP 400). */
ebb_err ebb_json_schema_to_gbnf(const json_t *schema, const char *root_rule_name,
                                struct ebb_gbnf_builder *b, struct ebb_diag *diag);

#endif
