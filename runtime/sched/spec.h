/* Speculative decoding with n-gram drafts (prompt lookup): no second model. The drafter finds
 * the most recent earlier occurrence of the sequence's last tokens in its own history (prompt
 * and generated text) and proposes the tokens that followed it; the model evaluates the last
 * token and the drafts in one pass (one logits row each), and verification keeps the longest
 * prefix of drafts that the sampler, run row by row, picks itself, plus the sampler's own next
 * token. A streamed layer costs about the same for one row as for nine, so every accepted
 * draft is a token that moved no weights (docs/STREAMER.md, "Speculative decoding").
 *
 * Verification draws exactly what plain decoding would: row j is sampled with
 * ebb_sampler_sample as if it were a single-token step, and draft j is accepted iff the draw
 * equals it. For a draft that is one fixed token x this is the standard speculative rejection
 * rule (accept x with probability p(x), else draw from p with x removed and renormalised), so
 * the output distribution is the sampler's own; each emitted token consumes one draw of the
 * sampler's PRNG, as in plain decoding, so a seeded run gives the same tokens with or without
 * speculation wherever the logits rows are the same. Greedy output is the argmax of each row.
 *
 * The number of drafts per pass (k) adapts: an exponential moving average of the per-draft
 * acceptance and a measured cost model of a pass with n rows pick the k that maximises the
 * expected tokens per unit of time; k falls to 0 (plain decoding, with an occasional probe)
 * when drafts keep failing. A drafter belongs to one sequence; not thread-safe. Everything is
 * allocated in ebb_spec_new; drafting, verifying and decoding allocate nothing. */
#ifndef EBB_RUNTIME_SPEC_H
#define EBB_RUNTIME_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "model/model.h"
#include "sampler.h"

/* The most drafts per pass any setting may ask for. */
#define EBB_SPEC_DRAFT_CAP 64

struct ebb_spec_params {
    uint32_t ngram_min; /* shortest suffix worth matching, >= 1 (default 2) */
    uint32_t ngram_max; /* longest suffix matched, >= ngram_min (default 8) */
    uint32_t draft_max; /* most drafts per pass, 1..EBB_SPEC_DRAFT_CAP (default 8) */
    uint32_t draft_min; /* fewer drafts than this are not verified (default 1) */
    bool fixed_k;       /* always propose draft_max (no adaptation): tests and measurements */
};

/* Fills p with the defaults above. */
void ebb_spec_params_defaults(struct ebb_spec_params *p);

/* Counters since ebb_spec_new (ebb_spec_reset keeps them). */
struct ebb_spec_stats {
    uint64_t passes;   /* verification passes (a pass with at least one draft) */
    uint64_t plain;    /* single-token passes (no draft proposed, or k was 0) */
    uint64_t drafted;  /* drafts evaluated */
    uint64_t accepted; /* drafts accepted */
    uint32_t k;        /* the current number of drafts per pass */
    double accept_ema; /* the moving per-draft acceptance */
    double row_cost;   /* the measured cost of one more row, relative to a one-row pass */
};

struct ebb_spec;

/* Creates a drafter for a vocabulary of n_vocab tokens whose history holds up to hist_cap
 * tokens (the context length; older tokens are forgotten beyond it). EBB_EINVAL names a bad
 * setting. */
ebb_err ebb_spec_new(const struct ebb_spec_params *p, uint32_t n_vocab, uint32_t hist_cap,
                     struct ebb_spec **out, struct ebb_diag *diag);
/* Accepts NULL. */
void ebb_spec_free(struct ebb_spec *s);

/* Forgets the history and the adaptation (a new sequence); keeps the counters. */
void ebb_spec_reset(struct ebb_spec *s);

/* Appends tokens to the history the drafts come from: the prompt, then each emitted token. */
void ebb_spec_push(struct ebb_spec *s, const int32_t *tokens, uint32_t n);

/* Drafts from a small model instead of n-grams (`--draft MODEL`): dm's slot seq is the draft
 * model's own KV for this sequence. Its greedy choices are the drafts, a point-mass draft as
 * the n-gram's, so verification is unchanged. The vocabularies must have the same size (the
 * same tokenizer: a draft token means the same text to both). Allocates the draft's logits
 * scratch here; drafting allocates nothing. dm must outlive s (or be detached with NULL). Each
 * ebb_spec_draft first catches the draft model up on the tokens it has not seen (those of the
 * history past the last draft it made that was accepted), then runs k - 1 single-token passes. */
ebb_err ebb_spec_attach_model(struct ebb_spec *s, struct ebb_model *dm, uint32_t seq,
                              struct ebb_diag *diag);

/* Proposes up to min(cap, k) tokens to follow the history into draft[0..), returning how many
 * (0: decode this step plainly). The suffix of the history is matched against every earlier
 * position; the longest match (at most ngram_max tokens, at least ngram_min) wins, the most
 * recent among equals, and the tokens that followed it are proposed (where they run into the
 * suffix itself, the match's period repeats). O(history) per call. With a draft model, its
 * greedy continuation instead (0 when its pass fails or the history outgrew the contexts). */
uint32_t ebb_spec_draft(struct ebb_spec *s, int32_t *draft, uint32_t cap);

/* Verifies drafts against the rows of logits the model gave for [last, draft[0..n_draft))
 * (rows: (n_draft + 1) x n_vocab, used as scratch). Samples row j with smp; while the token
 * equals draft[j] it is accepted (ebb_sampler_accept) and row j + 1 is sampled. Writes the
 * accepted drafts and then the sampler's next token to out[0..*n_out) (n_out = accepted + 1
 * <= n_draft + 1); every token written is accepted into smp, the last included. info, if
 * non-NULL, has n_draft + 1 entries (n_top set by the caller) and gets each written token's
 * statistics. Fails as ebb_sampler_sample does (out written up to the failing row). */
ebb_err ebb_spec_verify(struct ebb_sampler *smp, float *rows, uint32_t n_vocab,
                        const int32_t *draft, uint32_t n_draft, int32_t *out, uint32_t *n_out,
                        struct ebb_sample_info *info);

/* Tells the adaptation what a pass gave: drafted drafts, accepted of them, and (if > 0) the
 * seconds a pass of drafted + 1 rows took (the first pass of each size is not timed: it may
 * include building kernels or buffers). Counts only passes with drafted > 0 as passes; a
 * pass with none counts as plain (its time still feeds the cost model). */
void ebb_spec_feedback(struct ebb_spec *s, uint32_t drafted, uint32_t accepted, double seconds);

void ebb_spec_stats(const struct ebb_spec *s, struct ebb_spec_stats *st);

/* The drafter's scratch for a verification pass's logits rows: (draft_max + 1) x n_vocab floats,
 * for callers that evaluate the pass themselves (the scheduler's batched step). */
float *ebb_spec_rows(struct ebb_spec *s);
/* The draft_max it was made with. */
uint32_t ebb_spec_draft_max(const struct ebb_spec *s);

/* One decode step of slot seq on its own: `last` (emitted, not yet evaluated) at position pos.
 * Drafts up to max_new - 1 tokens (fewer where the context ends), evaluates [last, drafts] in
 * one pass with a logits row each (or last alone when there are none), verifies them with smp,
 * pushes the result into the history and feeds the adaptation. Writes 1..max_new tokens to
 * out, all accepted into smp; the next step's last is out[*n_out - 1] at pos + *n_out. The
 * caller stops at an end-of-generation token or a stop string inside out (the KV entries past
 * the kept tokens are overwritten by the next evaluation). max_new >= 1. */
ebb_err ebb_spec_decode(struct ebb_spec *s, struct ebb_model *m, uint32_t seq,
                        struct ebb_sampler *smp, int32_t last, uint32_t pos, uint32_t max_new,
                        int32_t *out, uint32_t *n_out, struct ebb_diag *diag);

#endif
