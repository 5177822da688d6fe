/* A loaded model: GGUF weights placed on a compute device, the tokenizer, and a KV cache for
 * n_seq sequence slots allocated once at open. The forward pass runs on the OpenCL engine
 * (runtime/cl) or, with device "ref", on the plain-C reference used to check it. */
#ifndef EBB_RUNTIME_MODEL_H
#define EBB_RUNTIME_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "model-types.h"
#include "tokenizer/tokenizer.h"

/* The choice ebb_model_open makes for a context of asked tokens (0: the default) and n_seq
 * slots, from g's metadata and the memory probes, without opening the model (`ebb info`).
 * Fails as loading would for a file no family runs. */
ebb_err ebb_model_ctx_choose(const struct ebb_gguf *g, uint32_t asked, uint32_t n_seq,
                             bool cap_trained, struct ebb_model_ctx *out, struct ebb_diag *diag);
/* The reason in words ("asked 16384, capped at the trained 8192 (ctx_over_trained allows
 * more)"), for logs and `ebb info`. Returns the length, as snprintf. */
size_t ebb_model_ctx_describe(const struct ebb_model_ctx *c, char *buf, size_t n);

struct ebb_model;

/* `--split auto` with several devices (spec "all" or a list): whether the file at path needs
 * the layer split, being larger than nine tenths of the memory the smallest of the devices may
 * still take as the memory probes read it (the tenth left for the KV cache and the buffers).
 * False when spec names one device or does not resolve, or path cannot be read. Opens and
 * closes each device. */
bool ebb_model_split_needed(const char *path, const char *spec);

/* Opens the model. Errors name the problem (bad file, unsupported architecture or tensor type,
 * device not found, not enough memory for n_ctx). */
ebb_err ebb_model_open(const struct ebb_model_params *p, struct ebb_model **out,
                       struct ebb_diag *diag);
/* Frees everything; accepts NULL. */
void ebb_model_close(struct ebb_model *m);

/* A GGUF's family in words for `ebb info` (the description's features: "q|k|v bias, rope neox
 * over 64 dims, SiLU gate, tied output head") and the backends that can run it ("ref, opencl",
 * or why the OpenCL engine refuses it). Fails as loading would for a file no family runs. */
ebb_err ebb_model_describe(const struct ebb_gguf *g, char *family, size_t fcap, char *engines,
                           size_t ecap, struct ebb_diag *diag);

/* A family's facts for `ebb info` as values: its layer types (local = sliding window), experts
 * and rope scaling, as the engine reads them from the file. */
struct ebb_model_facts {
    uint32_t n_layer;
    uint32_t window;        /* attention window of the local layers (0: none) */
    uint32_t n_local;       /* layers with the window; the others attend to the whole context */
    float rope_base;        /* the global layers' rope base */
    float rope_base_local;  /* the local layers' (== rope_base when they keep the model's) */
    uint32_t n_expert;      /* 0: dense */
    uint32_t n_expert_used; /* experts per token */
    uint32_t n_ff_exp;      /* an expert's width */
    /* "none", "linear", "llama3" (keys), "freqs" (rope_freqs.weight) or "longrope" (Phi-3.5's
     * rope_factors_short/long.weight: the long ones above rope_orig_ctx) */
    const char *rope_scaling;
    float rope_factor;      /* linear or llama3 factor (1 otherwise) */
    uint32_t rope_orig_ctx; /* llama3, longrope: original context (0 otherwise) */
    float attn_factor;      /* longrope's attention factor (1 otherwise) */
};

/* Fills f for g; fails as loading would for a file no family runs. ebb_model_layer_is_local
 * tells whether layer l of g is windowed (false for a file no family runs). */
ebb_err ebb_model_facts(const struct ebb_gguf *g, struct ebb_model_facts *f, struct ebb_diag *diag);
bool ebb_model_layer_is_local(const struct ebb_gguf *g, uint32_t l);

const struct ebb_gguf *ebb_model_gguf(const struct ebb_model *m);
const struct ebb_tokenizer *ebb_model_tokenizer(const struct ebb_model *m);
const char *ebb_model_arch(const struct ebb_model *m);        /* "llama" */
const char *ebb_model_device_name(const struct ebb_model *m); /* for logs */
uint32_t ebb_model_n_ctx(const struct ebb_model *m);
/* How an open model's context was chosen (n_ctx == ebb_model_n_ctx). */
void ebb_model_ctx(const struct ebb_model *m, struct ebb_model_ctx *out);
uint32_t ebb_model_n_seq(const struct ebb_model *m);
uint32_t ebb_model_n_vocab(const struct ebb_model *m);
uint32_t ebb_model_n_embd(const struct ebb_model *m); /* width of the hidden state */

/* Evaluates tokens[0..n) of slot seq at positions pos..pos+n-1, overwriting that slot's KV
 * entries from pos on, and fills the requested outputs. pos + n > n_ctx is EBB_ECTX. Not
 * thread-safe: one caller (the engine thread) at a time. Allocates nothing per call. */
/* Layer streamer state. True when the model was opened with a memory budget (or a forced
 * residency) and a streamer runs; false on the plain path. */
bool ebb_model_streaming(const struct ebb_model *m);
/* The prompt tokens of one slot that one evaluation (ebb_model_eval, or ebb_model_eval_batch
 * with a single part) runs layer-major, so that each streamed layer crosses the link once for
 * all of them (docs/STREAMER.md, "Long prompts"); 0 when the model streams no layer that way.
 * A caller that chunks prompts itself passes up to this many at once when nothing else waits. */
uint32_t ebb_model_long_rows(const struct ebb_model *m);
/* The rows the backend evaluates in one pass (its prefill chunk: 512 on OpenCL GPUs, 128 on
 * CPU devices); 0 when any number goes (the reference backend). A caller that chunks prompts
 * itself passes up to this many of one prompt at once when no decoding row waits. */
uint32_t ebb_model_batch_rows(const struct ebb_model *m);
/* Any thread: the streamer report as the JSON object of docs/STREAMER.md / as Prometheus text
 * (the ebb_stream_* metrics), from a snapshot the engine refreshes after each evaluation.
 * Return the length needed (like snprintf); 0 (and buf "" when cap > 0) when not streaming. */
size_t ebb_model_stream_json(const struct ebb_model *m, char *buf, size_t cap);
size_t ebb_model_stream_prometheus(const struct ebb_model *m, char *buf, size_t cap);
/* Any thread (the daemon's 2 s timer): reads the memory probes; the engine re-plans before its
 * next evaluation. Returns true on memory pressure (wake the engine). False when not
 * streaming. */
bool ebb_model_stream_probe(struct ebb_model *m);
/* Any thread: a new byte budget for the streamer (0 = auto, the probes alone), applied by the
 * engine before its next evaluation or at ebb_model_stream_settle: a lower one streams layers
 * from the top down to it, a higher one makes them resident again up to it. The daemon lends
 * an idle model's memory to another model this way. False when not streaming. */
bool ebb_model_stream_budget(struct ebb_model *m, uint64_t budget);
/* Any thread: fn(u) is called (from the streamer's notification thread) when a memory
 * pressure notification posted a fresh probe reading, so that an idle engine runs
 * ebb_model_stream_settle at once; NULL for none. Nothing happens when not streaming or when
 * no notification could be armed (docs/STREAMER.md, "Pressure notifications"). */
void ebb_model_stream_set_wake(struct ebb_model *m, void (*fn)(void *u), void *u);
/* Engine thread, between evaluations (an idle engine): applies a posted budget or probe
 * reading now instead of at the next evaluation, and refreshes the report. EBB_OK when there
 * is nothing to do or the model does not stream. */
ebb_err ebb_model_stream_settle(struct ebb_model *m, struct ebb_diag *diag);
/* The streamer's resident and streamed decoder layers and plan bytes (now, none resident, all
 * resident) from the report snapshot; false (nothing written) when not streaming. */
struct ebb_model_residency {
    uint32_t n_layer, n_resident, n_streamed;
    uint64_t bytes, bytes_min, bytes_full;
};
bool ebb_model_residency(const struct ebb_model *m, struct ebb_model_residency *out);

ebb_err ebb_model_eval(struct ebb_model *m, uint32_t seq, const int32_t *tokens, uint32_t n,
                       uint32_t pos, struct ebb_model_out *out, struct ebb_diag *diag);

/* The backend's launch and synchronisation counters (struct ebb_model_counters, model-types.h);
 * false and *out zeroed for a backend that counts nothing. Engine thread. */
bool ebb_model_counters(const struct ebb_model *m, struct ebb_model_counters *out);

/* Any thread: a snapshot of the expert cache's figures (struct ebb_model_expert_cache,
 * model-types.h); false when the model has no expert cache. */
bool ebb_model_expert_cache(const struct ebb_model *m, struct ebb_model_expert_cache *out);
/* Those figures as one JSON object (`ebb run --json`, `ebb bench --json`: key "expert_cache")
 * or as Prometheus text (ebb_expert_cache_* lines of /metrics); the length needed, like
 * snprintf; 0 (and buf "") when the model has no expert cache. */
size_t ebb_model_expert_cache_json(const struct ebb_model *m, char *buf, size_t cap);
size_t ebb_model_expert_cache_prometheus(const struct ebb_model *m, char *buf, size_t cap);

/* Engine thread, after evaluations: which kernels multiplied several rows (prefill chunks,
 * batched steps) of each dense weight type so far, as one line ("Q4_K/raw/buffer: matmul_mmql
 * 64,2,4,4 cp.async 2 stages, matvec_q8r; ..."); the length needed, like snprintf; 0 (and buf
 * "") for backends that do not say or when none ran. */
size_t ebb_model_kernels(const struct ebb_model *m, char *buf, size_t cap);

/* The bytes one decoded token reads after depth earlier positions (struct
 * ebb_model_decode_bytes, model-types.h). */
void ebb_model_decode_bytes(const struct ebb_model *m, uint32_t depth,
                            struct ebb_model_decode_bytes *out);

/* Continuous batching: evaluates several sequences in one forward pass, so that the weights
 * are read once for all their rows (decode tokens of many slots and prefill chunks together).
 * Each slot appears at most once. Results equal separate ebb_model_eval calls up to rounding
 * (the batched products round differently from the single-token ones). Checks every part as
 * ebb_model_eval does before evaluating anything; if the pass fails, the KV entries of every
 * part's slot from its pos on are undefined. Backends without a batched pass evaluate the
 * parts one after the other. */
ebb_err ebb_model_eval_batch(struct ebb_model *m, const struct ebb_model_seq *seqs, uint32_t n_seqs,
                             struct ebb_diag *diag);

/* Copies the KV entries of positions 0..n-1 of slot src into slot dst, on the device and
 * without evaluating anything, so that dst continues from position n exactly as src would (the
 * n choices of one request share their prompt this way). dst's entries from n on are left as
 * they were. src == dst or n == 0 does nothing; n > n_ctx is EBB_ECTX. Engine thread only, like
 * ebb_model_eval; the copy is ordered before every later evaluation. */
ebb_err ebb_model_kv_copy(struct ebb_model *m, uint32_t src, uint32_t dst, uint32_t n,
                          struct ebb_diag *diag);

/* The prompt-cache store: a pool of KV positions of every layer beside the slots' caches,
 * allocated once at open (ebb_model_params.prompt_cache bytes), in device memory with copies
 * on the device (host memory on the reference backend). Its positions are numbered
 * 0..ebb_model_kv_store_len-1; which ones hold what is the caller's business (the scheduler
 * keeps evicted prompt prefixes there). Not kept (length 0) where the backend cannot keep one:
 * the OpenCL engine with windowed layers whose caches are rings. */
uint32_t ebb_model_kv_store_len(const struct ebb_model *m);
/* Bytes the store took (0: none). */
uint64_t ebb_model_kv_store_bytes(const struct ebb_model *m);

/* Any thread: what m allocated at open besides its file's mapping and its streamer's plan
 * (struct ebb_model_memory, model-types.h): its store, and on the host engines their repacked
 * weights and other buffers. Fixed once open. */
void ebb_model_memory(const struct ebb_model *m, struct ebb_model_memory *out);
/* The same as opening g with p would make it, from g's header without opening the model, for
 * a caller that must count a model before loading it (the daemon's models_budget): the store
 * p->prompt_cache asks for where the engine p's device resolves to keeps one (not the OpenCL
 * engine's windowed families whose window is shorter than the context: their layers keep
 * rings), and on device "cpu" the repacked copy as its rules would make it (EBB_CPU_REPACK,
 * half of the available memory, EBB_CPU_REPACK_HEAD); host stays 0. Device "auto" resolves as
 * ebb_model_open resolves it (which may look for a GPU when no option needs the OpenCL
 * engine). Fails as loading would for a file no family runs. */
ebb_err ebb_model_memory_estimate(const struct ebb_gguf *g, const struct ebb_model_params *p,
                                  struct ebb_model_memory *out, struct ebb_diag *diag);
/* Copies slot seq's KV entries of positions 0..n-1 to store positions at..at+n-1 (save), or
 * store positions at..at+n-1 into slot seq's positions 0..n-1 (load), after which the slot
 * continues from position n as if it had evaluated the saved tokens. at + n past the store or
 * n past the context is EBB_ECTX; n == 0 does nothing. Engine thread only, ordered like
 * ebb_model_kv_copy. */
ebb_err ebb_model_kv_save(struct ebb_model *m, uint32_t seq, uint32_t n, uint32_t at,
                          struct ebb_diag *diag);
ebb_err ebb_model_kv_load(struct ebb_model *m, uint32_t at, uint32_t n, uint32_t seq,
                          struct ebb_diag *diag);

#endif
