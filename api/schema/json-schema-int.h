/* Private to api/: the regular-expression part of the JSON schema converter. */
#ifndef EBB_API_JSON_SCHEMA_INT_H
#define EBB_API_JSON_SCHEMA_INT_H

#include <stdbool.h>
#include <stddef.h>

/* Translates a JSON Schema `pattern` (an ECMA-262 regular expression, the subset: literals and
 * escapes, \d \w \s \D \W \S, classes with ranges and negation, `.`, groups (also (?:...)),
 * alternation, * + ? {m} {m,} {m,n}, ^ and $ at the ends) into one GBNF expression over the
 * *content* of a JSON string: characters that JSON must escape appear in their escaped form, and
 * `char_rule` names the rule for one arbitrary string character (used for `.`, negated classes
 * and the unanchored ends, since a pattern matches anywhere unless anchored). Writes a
 * NUL-terminated expression to out; on failure writes a sentence to err and returns false
 * (unsupported constructs: backreferences, lookaround, lazy or possessive quantifiers, \b, a
 * class or literal with a control character or a quote/backslash inside a class). */
bool ebb__regex_to_gbnf(const char *re, const char *char_rule, char *out, size_t cap, char *err,
                        size_t err_cap);

#endif
