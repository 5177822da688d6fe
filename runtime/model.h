/* A loaded model: GGUF weights placed on a compute device, the tokenizer, and a KV cache for
 * n_seq sequence slots allocated once at open. The forward pass runs on the OpenCL engine
 * (runtime/cl) or, with device "ref", on the plain-C reference used to check it. */
#ifndef EBB_RUNTIME_MODEL_H
#define EBB_RUNTIME_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gguf.h"
#include "tokenizer.h"

struct ebb_model_params {
    const char *path;   /* GGUF file */
    const char *device; /* "auto" (NULL too), "cl:P:D", a device-name substring, or "ref" */
    uint32_t n_ctx;     /* KV length per slot; 0 = the model's context length capped by memory */
    uint32_t n_seq;     /* sequence slots, >= 1 (0 means 1) */
};

struct ebb_model;

/* Opens the model. Errors name the problem (bad file, unsupported architecture or tensor type,
 * device not found, not enough memory for n_ctx). */
ebb_err ebb_model_open(const struct ebb_model_params *p, struct ebb_model **out,
                       struct ebb_diag *diag);
/* Frees everything; accepts NULL. */
void ebb_model_close(struct ebb_model *m);

const struct ebb_gguf *ebb_model_gguf(const struct ebb_model *m);
const struct ebb_tokenizer *ebb_model_tokenizer(const struct ebb_model *m);
const char *ebb_model_arch(const struct ebb_model *m);        /* "llama" */
const char *ebb_model_device_name(const struct ebb_model *m); /* for logs */
uint32_t ebb_model_n_ctx(const struct ebb_model *m);
uint32_t ebb_model_n_seq(const struct ebb_model *m);
uint32_t ebb_model_n_vocab(const struct ebb_model *m);

/* What ebb_model_eval returns for the last evaluated token (and optionally all of them). */
struct ebb_model_out {
    float *logits;      /* if non-NULL: n_vocab logits of the last token */
    float *logits_all;  /* if non-NULL: n * n_vocab logits, one row per evaluated token */
    uint32_t top_k;     /* if > 0: the top_k largest logits of the last token, computed on the
                           device, written to top_ids/top_logits in descending order */
    int32_t *top_ids;
    float *top_logits;
};

/* Evaluates tokens[0..n) of slot seq at positions pos..pos+n-1, overwriting that slot's KV
 * entries from pos on, and fills the requested outputs. pos + n > n_ctx is EBB_ECTX. Not
 * thread-safe: one caller (the engine thread) at a time. Allocates nothing per call. */
ebb_err ebb_model_eval(struct ebb_model *m, uint32_t seq, const int32_t *tokens, uint32_t n,
                       uint32_t pos, struct ebb_model_out *out, struct ebb_diag *diag);

#endif
