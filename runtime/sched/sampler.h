/* Token sampler: turns a logit vector into the next token id. Stages run in the order of
 * llama.cpp's default sampler chain, so the same settings mean the same thing in both:
 *
 *   logit bias -> penalties (repeat, frequency, presence over the last repeat_last_n accepted
 *   tokens) -> top-k -> top-p -> min-p -> temperature -> draw from the softmax
 *
 * temperature <= 0 is greedy: the argmax after bias and penalties, no random draw. Draws use the
 * sampler's own seeded PRNG, so the same seed, settings and logits give the same tokens on every
 * run and machine. A sampler belongs to one sequence and is not thread-safe; different samplers
 * are independent. All memory is allocated in ebb_sampler_new; sampling allocates nothing. */
#ifndef EBB_RUNTIME_SAMPLER_H
#define EBB_RUNTIME_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Adds bias to a token's logit before anything else; bias = -INFINITY bans the token. */
struct ebb_logit_bias {
    int32_t token;
    float bias;
};

/* A seed value that asks ebb_sampler_new to draw a seed from the OS (then reported by
 * ebb_sampler_seed). */
#define EBB_SEED_RANDOM UINT64_MAX

struct ebb_sampling {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* keep the k largest; <= 0: off */
    float top_p;             /* nucleus: smallest set with probability >= top_p; >= 1: off */
    float min_p;             /* drop tokens with p < min_p * p_max; <= 0: off */
    float repeat_penalty;    /* llama.cpp style: logit / r if > 0, logit * r otherwise; 1: off */
    int32_t repeat_last_n;   /* history window for all penalties; 0: off, -1: whole history
                                (capped at the history capacity, 4096 tokens) */
    float presence_penalty;  /* subtracted once from every token seen in the window; 0: off */
    float frequency_penalty; /* subtracted per occurrence in the window; 0: off */
    uint64_t seed;           /* PRNG seed, or EBB_SEED_RANDOM */
    const struct ebb_logit_bias *logit_bias; /* n_logit_bias entries, copied by _new */
    size_t n_logit_bias;
};

/* Fills s with neutral settings: temperature 1, every filter and penalty off, repeat_last_n 64,
 * seed EBB_SEED_RANDOM, no bias. */
void ebb_sampling_defaults(struct ebb_sampling *s);

/* Optional extra output of a sample: log-probabilities for the OpenAI `logprobs` field. They
 * are the log-softmax of the logits exactly as passed in (before bias, penalties, temperature
 * and truncation), as OpenAI reports model probabilities. */
#define EBB_SAMPLE_MAX_TOP 20
struct ebb_sample_info {
    uint32_t n_top;                      /* in: top alternatives wanted, <= MAX_TOP */
    float logprob;                       /* out: of the chosen token */
    int32_t top_ids[EBB_SAMPLE_MAX_TOP]; /* out: n_top ids, most probable first */
    float top_logprobs[EBB_SAMPLE_MAX_TOP];
};

struct ebb_sampler;

/* Creates a sampler for a vocabulary of n_vocab tokens. EBB_EINVAL names a bad setting
 * (n_vocab 0, NaN temperature, top_p/min_p outside [0, 1], repeat_penalty <= 0, bias token
 * outside the vocabulary, repeat_last_n < -1). */
ebb_err ebb_sampler_new(const struct ebb_sampling *params, uint32_t n_vocab,
                        struct ebb_sampler **out, struct ebb_diag *diag);
/* Accepts NULL. */
void ebb_sampler_free(struct ebb_sampler *s);

/* Forgets the token history and re-seeds the PRNG with the original seed. */
void ebb_sampler_reset(struct ebb_sampler *s);

/* Appends a token to the history the penalties look at. Call it for the prompt tokens (if they
 * should be penalised, as llama.cpp does) and for every sampled token. */
void ebb_sampler_accept(struct ebb_sampler *s, int32_t token);

/* Samples the next token from logits[0..n_vocab) and writes it to *token. The logits buffer is
 * used as scratch and is modified. info may be NULL. Does not call ebb_sampler_accept. Returns
 * EBB_EINVAL if every token is banned (all logits -inf or NaN). */
ebb_err ebb_sampler_sample(struct ebb_sampler *s, float *logits, int32_t *token,
                           struct ebb_sample_info *info);

/* Samples from a candidate list instead of the whole vocabulary: ids[0..n) with their logits,
 * as a device top-k returns them (any order). Valid only when ebb_sampler_needs_full_logits()
 * is false and n >= ebb_sampler_n_candidates(); the result then equals ebb_sampler_sample on
 * the full vector (info's logprobs are then relative to the candidates only). */
ebb_err ebb_sampler_sample_candidates(struct ebb_sampler *s, const int32_t *ids,
                                      const float *logits, uint32_t n, int32_t *token,
                                      struct ebb_sample_info *info);

/* True if temperature <= 0 (the result is the argmax after bias and penalties). */
bool ebb_sampler_is_greedy(const struct ebb_sampler *s);

/* True if sampling needs the whole logit vector: any penalty or bias is active (they can lift a
 * token from outside any top-k), or the settings keep an unbounded number of candidates (no
 * top_k and not greedy). Otherwise the top ebb_sampler_n_candidates() logits suffice (callers
 * that report logprobs over the whole vocabulary still need the full vector). */
bool ebb_sampler_needs_full_logits(const struct ebb_sampler *s);

/* Candidates enough for ebb_sampler_sample_candidates: 1 for greedy, top_k otherwise; 0 when
 * ebb_sampler_needs_full_logits() is true. */
uint32_t ebb_sampler_n_candidates(const struct ebb_sampler *s);

/* The seed actually used (useful with EBB_SEED_RANDOM). */
uint64_t ebb_sampler_seed(const struct ebb_sampler *s);

#endif
