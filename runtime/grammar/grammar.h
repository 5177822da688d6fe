/* Grammar-constrained decoding. A GBNF grammar (the syntax llama.cpp accepts) is compiled once
 * per request into flat rules; a parse state holds the set of parse stacks the text so far
 * leaves open and advances byte by byte over UTF-8. A token trie, built once per vocabulary
 * from the tokenizer's token byte strings, lets the state compute which tokens may come next by
 * walking the trie with all stacks at once and pruning a subtree as soon as no stack survives.
 *
 * Memory and work are bounded: a state preallocates its stack nodes, and more than
 * EBB_GRAMMAR_MAX_STACKS parse stacks or stacks deeper than EBB_GRAMMAR_MAX_DEPTH are an error,
 * never unbounded growth; left recursion, which would make expansion loop, is rejected when the
 * grammar is compiled. Compiled grammars and tries are immutable and may be shared between
 * threads; a state belongs to one sequence. */
#ifndef EBB_RUNTIME_GRAMMAR_H
#define EBB_RUNTIME_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "tokenizer/tokenizer.h"

#define EBB_GRAMMAR_MAX_STACKS 1024 /* parse stacks alive at once */
#define EBB_GRAMMAR_MAX_DEPTH 512   /* nested rules on one stack */
#define EBB_GRAMMAR_MAX_SRC (1u << 20)

struct ebb_grammar;
struct ebb_grammar_state;
struct ebb_token_trie;

/* Compiles GBNF text src[0..len) with start rule root (usually "root"). Syntax: `name ::= alt |
 * alt`, sequences, ( groups ), `*` `+` `?` `{m}` `{m,}` `{m,n}`, "literals" with \n \r \t \\ \"
 * \xHH \uHHHH \UHHHHHHHH escapes, [classes] with ranges and ^ negation, `.` (any character),
 * and # comments. EBB_EINVAL names line and column of a syntax error, an undefined rule, a
 * missing root or left recursion ("rule 'expr' is left-recursive: expr -> expr"). */
ebb_err ebb_grammar_compile(const char *src, size_t len, const char *root, struct ebb_grammar **out,
                            struct ebb_diag *diag);
/* Accepts NULL. */
void ebb_grammar_free(struct ebb_grammar *g);

/* A parse state with room for its stacks; reusable across grammars (ebb_grammar_state_reset).
 * All memory is allocated here; advancing and masking allocate nothing. */
ebb_err ebb_grammar_state_new(struct ebb_grammar_state **out);
void ebb_grammar_state_free(struct ebb_grammar_state *st);

/* Starts g from its root (g must outlive the state's use of it). EBB_ERANGE if the initial
 * expansion exceeds the limits. */
ebb_err ebb_grammar_state_reset(struct ebb_grammar_state *st, const struct ebb_grammar *g,
                                struct ebb_diag *diag);

/* True if bytes[0..n) could come next (a trailing incomplete UTF-8 character counts if some
 * continuation of it could match). Does not change the state. */
bool ebb_grammar_state_allows(struct ebb_grammar_state *st, const uint8_t *bytes, size_t n);

/* Advances over bytes[0..n). EBB_EINVAL if the grammar does not allow them (the state is then
 * unchanged), EBB_ERANGE past the limits. */
ebb_err ebb_grammar_state_advance(struct ebb_grammar_state *st, const uint8_t *bytes, size_t n,
                                  struct ebb_diag *diag);

/* True if the text so far is a complete sentence of the grammar. */
bool ebb_grammar_state_can_end(const struct ebb_grammar_state *st);
/* True if it is complete and nothing may follow (generation should finish). */
bool ebb_grammar_state_done(const struct ebb_grammar_state *st);

/* The byte strings of a vocabulary's tokens in a trie. Tokens whose piece is empty (special and
 * control tokens) are never allowed by a grammar, except the end-of-generation tokens, which are
 * allowed exactly when the grammar can end. */
ebb_err ebb_token_trie_new(const struct ebb_tokenizer *tok, struct ebb_token_trie **out,
                           struct ebb_diag *diag);
void ebb_token_trie_free(struct ebb_token_trie *t);
uint32_t ebb_token_trie_n_vocab(const struct ebb_token_trie *t);

/* True if token id may come next in st. */
bool ebb_grammar_token_allowed(struct ebb_grammar_state *st, const struct ebb_token_trie *t,
                               int32_t id);
/* Advances st over token id (end-of-generation tokens only check that the grammar can end).
 * EBB_EINVAL if the token is not allowed. */
ebb_err ebb_grammar_accept_token(struct ebb_grammar_state *st, const struct ebb_token_trie *t,
                                 int32_t id, struct ebb_diag *diag);
/* Writes the set of tokens that may come next as a bitset: bit i of allowed[i / 8] (n_vocab bits,
 * (n_vocab + 7) / 8 bytes). EBB_ERANGE if the walk exceeds the limits. */
ebb_err ebb_grammar_mask(struct ebb_grammar_state *st, const struct ebb_token_trie *t,
                         uint8_t *allowed, struct ebb_diag *diag);

#endif
