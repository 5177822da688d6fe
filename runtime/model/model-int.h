/* Private to runtime/: hyper-parameters read from GGUF metadata and the backend interface that
 * the reference and OpenCL forward passes implement. */
#ifndef EBB_RUNTIME_MODEL_INT_H
#define EBB_RUNTIME_MODEL_INT_H

#include "model.h"
#include "stream/stream.h"

enum ebb__rope_kind {
    EBB__ROPE_NORMAL = 0, /* pairs (2i, 2i+1): llama */
    EBB__ROPE_NEOX = 1,   /* pairs (i, i + d/2): gemma, qwen */
};

struct ebb__hparams {
    char arch[32];
    uint32_t n_layer;
    uint32_t n_embd; /* model width */
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim; /* key/value length per head */
    uint32_t n_ff;
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint32_t n_rot; /* rotary dims per head */
    float rope_base;
    float rope_scale; /* linear scaling factor (1 = none) */
    enum ebb__rope_kind rope_kind;
    float rms_eps;
    bool tied_output; /* output head reuses token_embd */
    /* Gemma 3 (arch "gemma3"; false/0 elsewhere): embeddings scaled by sqrt(n_embd), RMS norms
     * of each head's q and k, norms after the attention and feed-forward blocks, GELU (tanh)
     * gating, and local layers with a sliding window and their own rope base. */
    bool gemma3;
    uint32_t swa;         /* window of the local layers, in positions (0 = every layer global) */
    uint32_t swa_pattern; /* layer l is global when (l + 1) % swa_pattern == 0 */
    float rope_base_swa;  /* rope base of the local layers (the global ones use rope_base) */
};

/* True when layer l of a Gemma 3 model attends through the sliding window. */
static inline bool ebb__layer_is_swa(const struct ebb__hparams *hp, uint32_t l)
{
    return hp->gemma3 && hp->swa && hp->swa_pattern && (l + 1) % hp->swa_pattern != 0;
}

/* A forward-pass backend (ggml style: an interface of function pointers plus its context). */
struct ebb__backend_i {
    const char *name;
    ebb_err (*eval)(void *ctx, uint32_t seq, const int32_t *tokens, uint32_t n, uint32_t pos,
                    struct ebb_model_out *out, struct ebb_diag *diag);
    void (*free)(void *ctx);
    /* Optional (NULL/0 in backends without a layer streamer). */
    uint32_t n_ctx; /* if nonzero: the context the backend allocated (the streamer's plan) */
    /* Copies the streamer's latest report (thread-safe snapshot); false when not streaming. */
    bool (*stream_report)(void *ctx, struct ebb_stream_report *out);
    /* Any thread: reads the memory probes for the next re-plan; true on pressure. */
    bool (*stream_probe)(void *ctx);
};

/* Backend constructors. Each looks up the standard GGUF tensor names itself (token_embd.weight,
 * blk.N.attn_q.weight, ...), allocates its KV cache for n_ctx x n_seq once, and on success
 * writes its interface and context. g outlives the backend. */
ebb_err ebb__ref_backend_new(const struct ebb__hparams *hp, const struct ebb_gguf *g,
                             const struct ebb_model_params *p, uint32_t n_ctx,
                             const struct ebb__backend_i **iface, void **ctx,
                             struct ebb_diag *diag);
ebb_err ebb__cl_backend_new(const struct ebb__hparams *hp, const struct ebb_gguf *g,
                            const struct ebb_model_params *p, uint32_t n_ctx,
                            const struct ebb__backend_i **iface, void **ctx, struct ebb_diag *diag);

#endif
