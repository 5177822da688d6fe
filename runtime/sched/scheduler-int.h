/* Private to runtime/sched: grammar-constrained sampling for one slot (scheduler-grammar.c). */
#ifndef EBB_RUNTIME_SCHEDULER_INT_H
#define EBB_RUNTIME_SCHEDULER_INT_H

#include "grammar/grammar.h"
#include "sampler.h"

/* A slot's grammar buffers, allocated on its first grammar job and reused for the next ones
 * (reallocated only when the vocabulary size changes), so sampling allocates nothing. */
struct ebb__sgram {
    struct ebb_grammar_state *st;
    float *raw;       /* (n_vocab) the logits as the model gave them, for a masked second draw */
    uint8_t *allowed; /* ((n_bits + 7) / 8) the next-token mask */
    uint32_t n_vocab; /* the model's logits */
    uint32_t n_bits;  /* the larger of n_vocab and the trie's vocabulary */
    bool active;      /* the slot's current job has a grammar */
    /* this job: tokens sampled, how many needed the full mask, seconds in grammar work */
    uint64_t n_sampled, n_masked;
    double t_grammar;
};

/* Starts grammar g for a job whose model has n_vocab logits, with the tokenizer's trie (g NULL:
 * no grammar, trie unused). */
ebb_err ebb__sgram_begin(struct ebb__sgram *sg, const struct ebb_grammar *g,
                         const struct ebb_token_trie *trie, uint32_t n_vocab,
                         struct ebb_diag *diag);

/* Samples the next token under the grammar and advances it over the token. The sampled token is
 * checked first; only if the grammar rejects it is the full mask computed and the draw repeated
 * over the masked logits (llama.cpp's lazy scheme: most tokens cost one short check).
 * logits is the sampler's scratch as for ebb_sampler_sample. EBB_EINVAL when the grammar allows
 * no token at all. */
ebb_err ebb__sgram_sample(struct ebb__sgram *sg, const struct ebb_token_trie *trie,
                          struct ebb_sampler *smp, float *logits, int32_t *token,
                          struct ebb_sample_info *info, struct ebb_diag *diag);

/* True once the grammar is complete and allows nothing more. */
bool ebb__sgram_done(const struct ebb__sgram *sg);

/* Frees the buffers; the struct may be reused after. */
void ebb__sgram_fini(struct ebb__sgram *sg);

#endif
