/* Grammar-constrained sampling for one slot: the lazy mask and the per-slot buffers. */
#include "scheduler-int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ebb_err ebb__sgram_begin(struct ebb__sgram *sg, const struct ebb_grammar *g,
                         const struct ebb_token_trie *trie, uint32_t n_vocab, struct ebb_diag *diag)
{
    sg->active = false;
    sg->n_sampled = sg->n_masked = 0;
    sg->t_grammar = 0;
    if (!g)
        return EBB_OK;
    /* The model's output may have more rows than the tokenizer has tokens (padding) or fewer;
     * the mask covers both, and rows without a token stay banned. */
    uint32_t n_bits =
        n_vocab > ebb_token_trie_n_vocab(trie) ? n_vocab : ebb_token_trie_n_vocab(trie);
    if (sg->n_vocab != n_vocab || sg->n_bits != n_bits) {
        free(sg->raw);
        free(sg->allowed);
        sg->raw = malloc(sizeof(float) * n_vocab);
        sg->allowed = malloc((n_bits + 7) / 8);
        sg->n_vocab = sg->raw && sg->allowed ? n_vocab : 0;
        sg->n_bits = n_bits;
        if (!sg->n_vocab)
            return ebb_diag_set(diag, EBB_ENOMEM, "out of memory for the grammar's mask");
    }
    if (!sg->st && ebb_grammar_state_new(&sg->st))
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory for the grammar's parse state");
    ebb_err rc = ebb_grammar_state_reset(sg->st, g, diag);
    if (rc)
        return rc;
    sg->active = true;
    return EBB_OK;
}

ebb_err ebb__sgram_sample(struct ebb__sgram *sg, const struct ebb_token_trie *trie,
                          struct ebb_sampler *smp, float *logits, int32_t *token,
                          struct ebb_sample_info *info, struct ebb_diag *diag)
{
    double t0 = now_s(), t_draw = 0;
    memcpy(sg->raw, logits, sizeof(float) * sg->n_vocab);
    int32_t id;
    ebb_err rc = ebb_sampler_sample(smp, logits, &id, info);
    t_draw = now_s() - t0;
    sg->n_sampled++;
    if (rc || !ebb_grammar_token_allowed(sg->st, trie, id)) {
        sg->n_masked++;
        memset(sg->allowed, 0, (sg->n_bits + 7) / 8);
        rc = ebb_grammar_mask(sg->st, trie, sg->allowed, diag);
        if (rc)
            return rc;
        for (uint32_t i = 0; i < sg->n_vocab; i++) {
            if (!(sg->allowed[i >> 3] >> (i & 7) & 1))
                sg->raw[i] = -INFINITY;
        }
        rc = ebb_sampler_sample(smp, sg->raw, &id, info);
        if (rc)
            return ebb_diag_set(diag, EBB_EINVAL, "the grammar allows no token here");
    }
    rc = ebb_grammar_accept_token(sg->st, trie, id, diag);
    if (rc)
        return rc;
    /* everything but the first draw, which an unconstrained job pays too */
    sg->t_grammar += now_s() - t0 - t_draw;
    *token = id;
    return EBB_OK;
}

bool ebb__sgram_done(const struct ebb__sgram *sg)
{
    return sg->active && ebb_grammar_state_done(sg->st);
}

void ebb__sgram_fini(struct ebb__sgram *sg)
{
    ebb_grammar_state_free(sg->st);
    free(sg->raw);
    free(sg->allowed);
    memset(sg, 0, sizeof(*sg));
}
