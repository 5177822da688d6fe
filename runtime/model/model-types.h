/* The values a model's callers and its forward-pass backends exchange: the open parameters,
 * an evaluation's outputs, a batched pass's parts, and the figures a backend reports (launch
 * counters, the expert cache, a decoded token's bytes). model.h declares the calls that take
 * them; the backend interface (model-int.h) includes only this header, so the backends sit
 * below the public model API rather than including it. */
#ifndef EBB_RUNTIME_MODEL_TYPES_H
#define EBB_RUNTIME_MODEL_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The KV cache's element type (--kv-type): halves, or GGUF's Q8_0 blocks (32 values in 34
 * bytes: a half scale and 32 int8, so 34/32 bytes a value instead of 2), which need a head
 * dimension that is a multiple of 32. The reference backend keeps floats and, for q8_0, rounds
 * them through the same blocks. */
enum ebb_kv_type { EBB_KV_F16 = 0, EBB_KV_Q8_0 = 1 };

/* --kv-type's names: "f16" and "q8_0" (header-only, for the config's table too).
 * ebb_kv_type_parse fails (false, *out untouched) on any other string; ebb_kv_type_name never
 * returns NULL. ebb_kv_type_bytes: the cache bytes of n values of that type (n a multiple of 32
 * for q8_0: whole heads of a head dimension that is). */
static inline bool ebb_kv_type_parse(const char *s, enum ebb_kv_type *out)
{
    if (s && !strcmp(s, "f16"))
        *out = EBB_KV_F16;
    else if (s && !strcmp(s, "q8_0"))
        *out = EBB_KV_Q8_0;
    else
        return false;
    return true;
}

static inline const char *ebb_kv_type_name(enum ebb_kv_type t)
{
    return t == EBB_KV_Q8_0 ? "q8_0" : "f16";
}

static inline uint64_t ebb_kv_type_bytes(enum ebb_kv_type t, uint64_t n)
{
    return t == EBB_KV_Q8_0 ? n / 32 * 34 : n * 2;
}

/* --split's values: "auto" (0: layer split where several devices are named and the model does
 * not fit the smallest; the daemon's data parallel otherwise), "none" or "replica" (data
 * parallel: every device a whole copy), "layer". */
enum ebb_split { EBB_SPLIT_AUTO = 0, EBB_SPLIT_NONE = 1, EBB_SPLIT_LAYER = 2 };

/* Fails (false, *out untouched) on any other string; ebb_split_name never returns NULL. */
static inline bool ebb_split_parse(const char *s, enum ebb_split *out)
{
    if (s && !strcmp(s, "auto"))
        *out = EBB_SPLIT_AUTO;
    else if (s && (!strcmp(s, "none") || !strcmp(s, "replica")))
        *out = EBB_SPLIT_NONE;
    else if (s && !strcmp(s, "layer"))
        *out = EBB_SPLIT_LAYER;
    else
        return false;
    return true;
}

static inline const char *ebb_split_name(enum ebb_split s)
{
    return s == EBB_SPLIT_LAYER ? "layer" : s == EBB_SPLIT_NONE ? "none" : "auto";
}

struct ebb_model_params {
    const char *path;   /* GGUF file */
    const char *device; /* "auto" (NULL too), "cl:P:D", a device-name substring, or "ref" */
    uint32_t n_ctx;     /* KV length per slot; 0 = the model's trained context capped at
                           EBB_MODEL_DEFAULT_CTX_CAP and by memory (struct ebb_model_ctx) */
    uint32_t n_seq;     /* sequence slots, >= 1 (0 means 1) */
    /* Layer streamer (docs/STREAMER.md). Fields added at the end; zero = off. */
    uint64_t memory_budget;     /* bytes for weights + KV + runtime; 0 = no streaming (plain path)
                                   unless memory_budget_auto */
    bool memory_budget_auto;    /* budget from the memory probes alone (--memory-budget auto) */
    uint32_t prefetch;          /* layers read ahead (0 = 2) */
    const char *residency_mode; /* "speed", "balanced" (NULL), "context" */
    const char *pack_path;      /* stream from this pack (ebb pack) instead of the GGUF */
    const char *stream_cache;   /* "cached" (NULL), "direct", "dontneed" */
    uint32_t stream_threads;    /* reader threads per layer (0 = 1) */
    double residency;           /* tests: > 0 forces round(residency * n_layer) resident
                                   layers (use residency_forced for 0); the env variable
                                   EBB_TEST_RESIDENCY does the same */
    bool residency_forced;
    /* Hybrid placement (docs/STREAMER.md, "Host layers"): with the streamer on, the last
     * host_layers layers not resident at load are computed on the host's cores from the mapped
     * file instead of streamed; host_threads threads (0 = the physical cores minus one). */
    uint32_t host_layers;
    uint32_t host_threads;
    bool host_q8; /* host layers with llama.cpp's CPU numerics (device "ref-q8"): 8-bit
                     activations (AVX2 Q4_0 dots), fp16 KV; default the reference's fp32 */
    /* Prompt-cache store (ebb_model_kv_save): at most this many bytes of KV positions, kept in
     * device memory (host memory on the reference), allocated once at open; 0 = none. */
    uint64_t prompt_cache;
    /* Expert cache (docs/STREAMER.md, "Experts on demand"): a mixture-of-experts model keeps
     * this many expert slots per layer on the device and copies the experts the router picks
     * into them from the mapped file (LRU); 0 = off (every expert placed);
     * EBB_EXPERT_CACHE_AUTO: as many as memory_budget leaves after the other weights, the KV
     * cache and the buffers (the layer streamer then stays off). The environment variable
     * EBB_EXPERT_CACHE (a count or "auto"), when set, overrides it. */
    uint32_t expert_cache;
    /* An n_ctx past the model's trained context (struct ebb_model_ctx's limit) is capped at it
     * with a warning when set (ebb serve and ebb run, unless ctx_over_trained asks for more);
     * when clear it is kept with a warning, as llama.cpp's library does (ebb bench, tests). */
    bool ctx_cap_trained;
    enum ebb_kv_type kv_type; /* the KV cache's element type (EBB_KV_F16 when zeroed) */
    /* Layer split (docs/SCALING.md, "Layer split"): where device names several OpenCL devices
     * ("all" or a comma list), EBB_SPLIT_LAYER (and EBB_SPLIT_AUTO, the only way a model alone
     * can use several) runs this one model's layers across them, each device a range of
     * consecutive layers; EBB_SPLIT_NONE refuses a list (data parallel is the daemon's, one
     * model per device). With one device, EBB_SPLIT_LAYER changes nothing. */
    enum ebb_split split;
    /* The share of the layers each listed device takes, "3,1" (as many numbers as devices, in
     * their order); NULL: in proportion to each device's free memory as the probes read it. */
    const char *tensor_split;
};
#define EBB_EXPERT_CACHE_AUTO UINT32_MAX

/* The context per slot when n_ctx is 0 is the trained one capped here (and by memory), so that a
 * model trained on 128k tokens does not claim gigabytes of KV cache by default. */
#define EBB_MODEL_DEFAULT_CTX_CAP 4096u

/* How the context per slot was chosen. limit is the longest context the file says its rope
 * covers: <arch>.context_length, or with linear rope scaling and
 * rope.scaling.original_context_length, factor x that original where longer (Llama 3.1's and
 * longrope's scaling are already inside context_length). */
struct ebb_model_ctx {
    uint32_t trained;    /* <arch>.context_length */
    uint32_t limit;      /* >= trained */
    uint32_t asked;      /* the n_ctx asked for; 0: the default */
    uint32_t n_ctx;      /* chosen */
    bool capped_default; /* asked 0: the trained context was above EBB_MODEL_DEFAULT_CTX_CAP */
    bool capped_memory;  /* asked 0: lowered so that the KV cache fits half the free memory */
    bool capped_trained; /* asked > limit, lowered to limit (ctx_cap_trained) */
    bool over_trained;   /* asked > limit and kept (no ctx_cap_trained) */
    bool planned;        /* an open model: the layer streamer's memory plan changed n_ctx */
};

/* What ebb_model_eval returns for the last evaluated token (and optionally all of them). */
struct ebb_model_out {
    float *logits;     /* if non-NULL: n_vocab logits of the last token */
    float *logits_all; /* if non-NULL: n * n_vocab logits, one row per evaluated token */
    uint32_t top_k;    /* if > 0: the top_k largest logits of the last token, computed on the
                          device, written to top_ids/top_logits in descending order */
    int32_t *top_ids;
    float *top_logits;
    /* Embedding output mode: if non-NULL, n_embd floats (ebb_model_n_embd) to which the hidden
     * state of every evaluated token after the final norm is added. The caller zeroes it and
     * divides by the token count (mean pooling), so one sequence may be evaluated in several
     * calls. With no logit output requested as well, the output head is not run at all. */
    float *hidden_sum;
};

/* One sequence's part of a batched evaluation: tokens[0..n) of slot seq at positions
 * pos..pos+n-1, with the outputs ebb_model_eval would give it (out NULL: none, a prefill
 * chunk). */
struct ebb_model_seq {
    uint32_t seq;
    const int32_t *tokens;
    uint32_t n;
    uint32_t pos;
    struct ebb_model_out *out;
};

/* What the backend counted since open, for `ebb bench`: kernels launched and host
 * synchronisations (queue drains, blocking reads, waits for streamed layers). Cheap counters
 * kept by the OpenCL engine; false (and *out zeroed) for a backend that counts nothing (the
 * reference). Engine thread. */
struct ebb_model_counters {
    uint64_t launches;
    uint64_t syncs;
    uint64_t wait_ns; /* wall time blocked in the queues' syncs (the streamer's waits apart) */
};

/* The expert cache's figures (ebb_model_params.expert_cache). Every MoE layer's pass looks up
 * each distinct expert its rows chose once: lookups = hits + misses; each miss copies one
 * expert (its gate, up and down rows, of its layer's types: between expert_bytes_min and
 * expert_bytes) into a slot, evicting the least recently
 * used one when none is free. A prefill chunk whose experts do not fit the slots runs in
 * several passes. */
struct ebb_model_expert_cache {
    bool on;
    uint32_t slots;            /* per layer */
    uint32_t n_layer;          /* layers whose experts are cached */
    uint64_t pool_bytes;       /* device memory of the slots, all layers */
    uint64_t expert_bytes;     /* one expert's gate, up and down rows (the largest layer's) */
    uint64_t expert_bytes_min; /* the smallest layer's: the same unless the stacks' types differ
                                  between layers (Q4_K_M's down stacks: Q6_K in some, Q4_K) */
    uint64_t lookups, hits, misses, evictions;
    uint64_t bytes_copied;
    uint64_t passes;      /* expert passes run (a layer step is one or more) */
    uint64_t layer_steps; /* MoE layer evaluations */
    uint32_t threads;     /* host threads filling the staging */
    uint64_t host_bytes;  /* EBB_EXPERT_PINNED: pinned host memory holding every expert, or 0 */
    uint64_t fill_ns;     /* engine thread time copying misses: staging waits, fills, enqueues */
    uint64_t ids_ns;      /* engine thread time in the read-back of the chosen ids */
    /* Prefetch (EBB_EXPERT_PREFETCH): experts copied ahead into the next layer's slots (their
     * bytes are in bytes_copied, their slots' previous experts in evictions), and of those
     * the ones that layer's step then used (also counted as hits) or did not. */
    uint64_t prefetched, prefetch_hits, prefetch_wasted;
    /* EBB_EXPERT_HOST: missed experts of one-token steps computed by the host instead of copied
     * (lookups = hits + misses + host_experts), and the engine thread's time waiting for them
     * after the layer's kernels were enqueued. */
    uint64_t host_experts, host_ns;
    /* EBB_EXPERT_HOST=auto: the averaged costs its choice weighs, in ns an expert: the host's
     * threads (gate/up and down jobs) and the link (the copy queue's device time); 0 while
     * unmeasured. */
    uint64_t host_cost_ns, link_cost_ns;
    /* Long prompts layer-major through the cache (docs/STREAMER.md, "Long prompts through the
     * expert cache"), counted apart from the lookups above: passes (evaluations run so), their
     * MoE layer steps, the groups of experts they copied (half the slots each) and the experts
     * and bytes copied (each expert a layer's rows chose and its slots did not hold, once per
     * pass); the copies' device
     * time (the copy queue's profiling; 0 where it has none), the engine thread's time filling
     * and enqueuing them, in the read-back of every row's ids, and over the experts' phase of
     * each layer (read-back to products done: copies and products overlapping). */
    uint64_t lm_passes, lm_layer_steps, lm_groups, lm_copied, lm_bytes;
    uint64_t lm_kept; /* used experts the slots held already at a pass's layer: not copied */
    uint64_t lm_copy_ns, lm_fill_ns, lm_ids_ns, lm_ns;
};

/* Bytes one decoded token (one slot, one row) reads, as the backend holds them: the weights
 * (every layer's tensors in the layout the backend reads, the experts a token uses of a
 * mixture, the final norm and the output head; the one embedding row) and the KV cache of
 * `depth` earlier positions plus its own, in every layer (windowed layers at most their
 * window). Decode bandwidth is their sum divided by a token's time. */
struct ebb_model_decode_bytes {
    uint64_t weights;
    uint64_t kv;
};

/* Memory a model holds besides its file's mapping, once open (ebb_model_memory) or as opening
 * it would make it (ebb_model_memory_estimate). The OpenCL engine's buffers are the layer
 * streamer's plan (ebb_model_residency), so host and repack are 0 there; the host engines
 * (devices "cpu", "ref", "ref-q8") have no plan and say here what they allocated. Each figure
 * is what the memory can grow to, not the pages touched so far. */
struct ebb_model_memory {
    uint64_t store;  /* the prompt-cache store (ebb_model_kv_store_bytes) */
    uint64_t repack; /* device "cpu": the weights' repacked copy (docs/ENGINE.md, "The CPU
                        device") */
    uint64_t host;   /* the host engines' other buffers: KV cache, dequantized vectors, scratch
                        rows (0 in an estimate: the caller guesses the KV cache) */
};

#endif
