/* Private to runtime/model: the backend interface that the reference and OpenCL forward passes
 * implement (the hyper-parameters and family descriptions are in arch-int.h). It sits below
 * model.h: the values it passes are model-types.h's, and model.c implements model.h on top of
 * it. */
#ifndef EBB_RUNTIME_MODEL_INT_H
#define EBB_RUNTIME_MODEL_INT_H

#include "arch-int.h"
#include "model-types.h"
#include "stream/stream.h"

/* model-ctx.c: ebb_model_ctx_choose on hyper-parameters already read. */
void ebb__model_ctx_choose(const struct ebb_gguf *g, const struct ebb__hparams *hp, uint32_t asked,
                           uint32_t n_seq, bool cap_trained, struct ebb_model_ctx *c);

/* model-ctx.c: the physical cores of this machine (distinct package and core ids of the online
 * CPUs), or the online CPUs when sysfs does not say; at least 1. */
int ebb__model_physical_cores(void);

/* A forward-pass backend (ggml style: an interface of function pointers plus its context). */
struct ebb__backend_i {
    const char *name;
    ebb_err (*eval)(void *ctx, uint32_t seq, const int32_t *tokens, uint32_t n, uint32_t pos,
                    struct ebb_model_out *out, struct ebb_diag *diag);
    void (*free)(void *ctx);
    /* Optional: one forward pass over several slots' tokens (model.h, ebb_model_eval_batch);
     * the parts are checked. NULL: model.c evaluates them one by one. */
    ebb_err (*eval_batch)(void *ctx, const struct ebb_model_seq *seqs, uint32_t n_seqs,
                          struct ebb_diag *diag);
    /* Copies positions 0..n-1 of slot src's KV entries to slot dst (model.h,
     * ebb_model_kv_copy); the arguments are checked, src != dst, n >= 1. */
    ebb_err (*kv_copy)(void *ctx, uint32_t src, uint32_t dst, uint32_t n, struct ebb_diag *diag);
    /* Optional: the prompt-cache store (model.h, ebb_model_kv_save). kv_store_new allocates,
     * once, a store of at most bytes and writes the positions it holds (left as it is when none
     * fit); EBB_EUNSUPPORTED when the backend cannot keep one for this model. kv_store_xfer
     * copies slot seq's positions 0..n-1 to store positions at..at+n-1 (save) or back (load);
     * the arguments are checked. */
    ebb_err (*kv_store_new)(void *ctx, uint64_t bytes, uint32_t *n_pos, struct ebb_diag *diag);
    ebb_err (*kv_store_xfer)(void *ctx, bool save, uint32_t seq, uint32_t at, uint32_t n,
                             struct ebb_diag *diag);
    /* Optional: model.h's ebb_model_counters; NULL: the backend counts nothing. */
    bool (*counters)(void *ctx, struct ebb_model_counters *out);
    /* model.h's ebb_model_decode_bytes (required). */
    void (*decode_bytes)(void *ctx, uint32_t depth, struct ebb_model_decode_bytes *out);
    /* Optional (NULL/0 in backends without a layer streamer). */
    uint32_t n_ctx; /* if nonzero: the context the backend allocated (the streamer's plan) */
    /* model.h's ebb_model_long_rows: the prompt tokens one evaluation runs layer-major */
    uint32_t long_rows;
    /* model.h's ebb_model_batch_rows: the rows of one pass (0: any number) */
    uint32_t batch_rows;
    /* Copies the streamer's latest report (thread-safe snapshot); false when not streaming. */
    bool (*stream_report)(void *ctx, struct ebb_stream_report *out);
    /* Any thread: reads the memory probes for the next re-plan; true on pressure. */
    bool (*stream_probe)(void *ctx);
    /* Any thread: model.h's ebb_model_stream_budget; engine thread: ebb_model_stream_settle. */
    void (*stream_budget)(void *ctx, uint64_t budget);
    ebb_err (*stream_settle)(void *ctx, struct ebb_diag *diag);
    /* Any thread: model.h's ebb_model_stream_set_wake. */
    void (*stream_set_wake)(void *ctx, void (*fn)(void *u), void *u);
    /* Optional: model.h's ebb_model_expert_cache (thread-safe); false when there is none. */
    bool (*expert_cache)(void *ctx, struct ebb_model_expert_cache *out);
    /* Optional: model.h's ebb_model_kernels (engine thread). */
    size_t (*kernels)(void *ctx, char *buf, size_t cap);
    /* Optional: the host and repack bytes of model.h's ebb_model_memory (any thread); NULL:
     * none outside the streamer's plan. */
    void (*memory)(void *ctx, struct ebb_model_memory *out);
};

/* Backend constructors. Each runs family a's description (checked against g by the caller),
 * finds its tensors through it, allocates its KV cache for n_ctx x n_seq once, and on success
 * writes its interface and context. a is static; g outlives the backend. */
ebb_err ebb__ref_backend_new(const struct ebb__arch *a, const struct ebb__hparams *hp,
                             const struct ebb_gguf *g, const struct ebb_model_params *p,
                             uint32_t n_ctx, const struct ebb__backend_i **iface, void **ctx,
                             struct ebb_diag *diag);
ebb_err ebb__cl_backend_new(const struct ebb__arch *a, const struct ebb__hparams *hp,
                            const struct ebb_gguf *g, const struct ebb_model_params *p,
                            uint32_t n_ctx, const struct ebb__backend_i **iface, void **ctx,
                            struct ebb_diag *diag);

/* Host layers (the OpenCL engine's hybrid placement, docs/STREAMER.md "Host layers"): the
 * reference forward pass (ref-llama.c) run one decoder layer at a time on the host, its
 * weights read in place from the mmapped file, with a KV cache of its own (fp32, host memory,
 * allocated once) for layers l0..n_layer-1 only, and n_threads threads per matrix product. The
 * result of a layer is what the reference backend computes for it (the same code; the thread
 * count does not change it), or with q8 what device "ref-q8" computes (llama.cpp's CPU
 * numerics: 8-bit activations, fp16 KV; Q4_0 products through AVX2 where the CPU has it). One
 * thread calls these at a time. */
struct ebb__ref_host;
ebb_err ebb__ref_host_new(const struct ebb__arch *a, const struct ebb__hparams *hp,
                          const struct ebb_gguf *g, uint32_t n_ctx, uint32_t n_seq, uint32_t l0,
                          int n_threads, bool q8, struct ebb__ref_host **out,
                          struct ebb_diag *diag);
void ebb__ref_host_free(struct ebb__ref_host *h); /* accepts NULL */
int ebb__ref_host_threads(const struct ebb__ref_host *h);
/* Layer l (>= l0) over x, n rows of n_embd floats updated in place: tokens of slot seq at
 * positions pos..pos+n-1, whose keys and values it stores in its cache. */
ebb_err ebb__ref_host_layer(struct ebb__ref_host *h, uint32_t l, uint32_t seq, uint32_t pos,
                            float *x, uint32_t n, struct ebb_diag *diag);
/* Positions 0..n-1 of slot src's host KV rows to slot dst's (checked by the caller). */
ebb_err ebb__ref_host_kv_copy(struct ebb__ref_host *h, uint32_t src, uint32_t dst, uint32_t n);

/* The widest head whose keys and values the host engines (ref-llama.c) keep as fp16 in their
 * cache (wider heads keep floats). */
#define EBB__ATT_MAX_HD 1024
/* Whether a host engine of device ("cpu", "ref-q8", "ref") keeps its KV cache as fp16 (2 bytes an
 * element) rather than floats: where llama.cpp's numerics round K and V to fp16 anyway and no
 * Q8_0 round trip (kv_type EBB_KV_Q8_0) follows. */
bool ebb__ref_kv16(const char *device, int kv_type, uint32_t head_dim);

/* The bytes device "cpu" would repack of g's matrices (ref-llama.c's repack(): its rules and
 * environment variables, the memory probe read now), from the file's header; 0 where it would
 * repack none. */
uint64_t ebb__ref_repack_bytes(const struct ebb__arch *a, const struct ebb__hparams *hp,
                               const struct ebb_gguf *g);

#endif
