/* Private to runtime/model: the architecture interface. A model family is one file
 * (arch-<family>.c) of plain data in three parts, always in this order:
 *   1. its hyper-parameters: which `<arch>.<key>` GGUF metadata keys fill which field of
 *      struct ebb__hparams, with defaults, plus the constants its architecture fixes;
 *   2. its tensors: GGUF name, shape in hyper-parameter terms, per layer or global, optional;
 *   3. its forward pass as short programs of engine ops over named activation buffers: the
 *      input (token rows into X), one decoder layer (run for every layer), the output (X into
 *      LOGITS).
 * Both backends run the same description: the plain-C reference (ref-llama.c) interprets the
 * ops one by one; the OpenCL engine (model-cl-plan.c) compiles them at load into its fused
 * kernel sequence and refuses, naming the op, a description it has no kernels for. Adding a
 * family adds a file and a line in arch.c's list; adding an op touches both backends.
 * docs/ENGINE.md, "What a new family must provide", says the same for a reader. */
#ifndef EBB_RUNTIME_MODEL_ARCH_INT_H
#define EBB_RUNTIME_MODEL_ARCH_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

/* Hyper-parameters: filled from the family's key table (then the derived defaults below), and
 * checked for plausibility by ebb__arch_read_hparams. */
struct ebb__hparams {
    char arch[32]; /* general.architecture */
    uint32_t n_layer;
    uint32_t n_embd; /* model width */
    uint32_t n_head;
    uint32_t n_head_kv;  /* derived default: n_head */
    uint32_t head_dim;   /* key length per head; derived default: n_embd / n_head */
    uint32_t head_dim_v; /* value length per head (must equal head_dim); derived: head_dim */
    uint32_t n_ff;
    uint32_t n_vocab; /* rows of the input program's GET_ROWS tensor */
    uint32_t n_ctx_train;
    uint32_t n_rot; /* rotary dims per head; derived default: head_dim */
    float rope_base;
    float rope_scale; /* linear scaling factor (1 = none; rope.scaling.*, read by the engine) */
    /* Llama 3.1's rope scaling (rope.scaling.type = llama3, read by the engine): each rotary
     * pair's frequency is divided by a factor between 1 and rope_factor, by its wavelength
     * against the original context (ebb__arch_rope_freqs). A file's rope_freqs.weight, where
     * its family declares one, gives the divisors directly and wins over these keys. */
    /* Phi-3.5's longrope: rope_factors_long.weight / rope_factors_short.weight are divisors as
     * rope_freqs.weight is, the long ones when the backend's context n_ctx_run exceeds
     * rope_orig_ctx (rope.scaling.original_context_length), as llama.cpp chooses; attn_factor
     * (rope.scaling.attn_factor, else sqrt(1 + ln(s) / ln(rope_orig_ctx)) with s =
     * n_ctx_train / rope_orig_ctx, 1 for s <= 1) scales the rotated q and k, so the attention
     * logits by attn_factor^2 (the backends fold it into the softmax scale). */
    uint32_t rope_longrope; /* 1: the file has the factors */
    float attn_factor;      /* 1 unless longrope */
    uint32_t n_ctx_run;     /* the backend's context (0: the short factors) */
    uint32_t rope_llama3;   /* 1: the keys below were read */
    float rope_factor;      /* rope.scaling.factor (8 in Llama 3.1) */
    float rope_low_freq;    /* rope.scaling.low_freq_factor (1) */
    float rope_high_freq;   /* rope.scaling.high_freq_factor (4) */
    uint32_t rope_orig_ctx; /* rope.scaling.original_context_length (8192) */
    uint32_t rope_freqs;    /* 1: some pair's divisor differs from 1 (keys or tensor) */
    float rms_eps;
    /* Sliding-window attention: with swa set, layer l attends to the last `swa` positions only
     * (ebb__arch_window): every layer when swa_pattern is 0 (Mistral), else the layers with
     * (l + 1) % swa_pattern != 0 (Gemma 3's five local layers to one global). Windowed layers
     * rotate with rope_base_swa and no linear scaling when rope_base_swa is set, else with the
     * model's own rope. */
    uint32_t swa;
    uint32_t swa_pattern;
    float rope_base_swa;
    /* Mixture of experts (the MOE op): a router picks n_expert_used of n_expert feed-forward
     * blocks of width n_ff_exp per token. */
    uint32_t n_expert;      /* expert_count */
    uint32_t n_expert_used; /* expert_used_count: k, at most EBB__MAX_EXPERT_USED */
    uint32_t n_ff_exp;      /* expert_feed_forward_length; derived default: n_ff / k */
    uint32_t expert_norm;   /* expert_weights_norm: the k weights renormalised to sum 1 */
    float expert_scale;     /* expert_weights_scale: the k weights multiplied by it (0: 1) */
};

#define EBB__MAX_EXPERT 1024
#define EBB__MAX_EXPERT_USED 64

/* ---- 1. hyper-parameters ---- */

enum ebb__key_type { EBB__KEY_U32, EBB__KEY_F32, EBB__KEY_BOOL /* into a uint32_t, 0 or 1 */ };

enum ebb__key_flags {
    EBB__KEY_REQUIRED = 1, /* missing key: the model does not load */
    EBB__KEY_DERIVED = 2,  /* missing key: the engine derives the field (see the struct) */
};

struct ebb__key {
    const char *key; /* after "<arch>."; NULL: a constant the architecture fixes */
    uint8_t type;    /* enum ebb__key_type */
    uint8_t flags;   /* enum ebb__key_flags */
    uint16_t off;    /* offsetof(struct ebb__hparams, field) */
    float def;       /* the field when the key is missing (neither flag), or the constant */
};

#define EBB__KEY_U32_(k, field, fl, d)                                                             \
    {                                                                                              \
        (k), EBB__KEY_U32, (fl), (uint16_t)offsetof(struct ebb__hparams, field), (d)               \
    }
#define EBB__KEY_F32_(k, field, fl, d)                                                             \
    {                                                                                              \
        (k), EBB__KEY_F32, (fl), (uint16_t)offsetof(struct ebb__hparams, field), (d)               \
    }
/* A key that must be there / one that falls back to def / one the engine derives / a constant. */
#define EBB__U32_REQUIRED(k, field) EBB__KEY_U32_(k, field, EBB__KEY_REQUIRED, 0)
#define EBB__U32(k, field, d) EBB__KEY_U32_(k, field, 0, d)
#define EBB__U32_DERIVED(k, field) EBB__KEY_U32_(k, field, EBB__KEY_DERIVED, 0)
#define EBB__F32(k, field, d) EBB__KEY_F32_(k, field, 0, d)
#define EBB__BOOL(k, field, d)                                                                     \
    {                                                                                              \
        (k), EBB__KEY_BOOL, 0, (uint16_t)offsetof(struct ebb__hparams, field), (d)                 \
    }
#define EBB__U32_CONST(field, v) EBB__KEY_U32_(NULL, field, 0, v)
#define EBB__F32_CONST(field, v) EBB__KEY_F32_(NULL, field, 0, v)

/* ---- 2. tensors ---- */

/* A tensor dimension in hyper-parameter terms. */
enum ebb__dim {
    EBB__DIM_1,      /* 1: the second dimension of a vector */
    EBB__DIM_EMBD,   /* n_embd */
    EBB__DIM_VOCAB,  /* n_vocab */
    EBB__DIM_Q,      /* n_head * head_dim */
    EBB__DIM_KV,     /* n_head_kv * head_dim */
    EBB__DIM_FF,     /* n_ff */
    EBB__DIM_HEAD,   /* head_dim */
    EBB__DIM_QKV,    /* (n_head + 2 n_head_kv) * head_dim: a fused q|k|v projection */
    EBB__DIM_FF2,    /* 2 n_ff: a fused gate|up projection */
    EBB__DIM_ROT2,   /* n_rot / 2: one per rotary pair (rope_freqs) */
    EBB__DIM_EXPERT, /* n_expert */
    EBB__DIM_FF_EXP, /* n_ff_exp: one expert's feed-forward width */
    EBB__N_DIM
};

enum ebb__tensor_flags {
    EBB__T_LAYER = 1,    /* one per layer: GGUF's "blk.<layer>.<name>" */
    EBB__T_OPTIONAL = 2, /* may be missing: then `fallback` is used, or ops using it are skipped */
    EBB__T_REFUSED = 4,  /* must be missing: the file asks for something no backend implements
                            (its presence is a load error naming the tensor) */
};

struct ebb__tensor {
    const char *name; /* GGUF name ("output_norm.weight"; per layer "attn_q.weight") */
    uint8_t ne0, ne1; /* enum ebb__dim: ne0 is the row length (a matrix's input) */
    uint8_t flags;    /* enum ebb__tensor_flags */
    int8_t fallback;  /* an optional tensor's stand-in (index in the same table), or -1 */
    uint8_t ne2;      /* enum ebb__dim: EBB__DIM_1 (2-D), or a stack of ne2 matrices (experts) */
};

#define EBB__TENSOR(name, ne0, ne1)                                                                \
    {                                                                                              \
        (name), EBB__DIM_##ne0, EBB__DIM_##ne1, 0, -1, EBB__DIM_1                                  \
    }
#define EBB__LAYER_TENSOR(name, ne0, ne1)                                                          \
    {                                                                                              \
        (name), EBB__DIM_##ne0, EBB__DIM_##ne1, EBB__T_LAYER, -1, EBB__DIM_1                       \
    }
#define EBB__TENSOR_OR(name, ne0, ne1, fb)                                                         \
    {                                                                                              \
        (name), EBB__DIM_##ne0, EBB__DIM_##ne1, EBB__T_OPTIONAL, (int8_t)(fb), EBB__DIM_1          \
    }

/* Per layer, a stack of ne2 matrices of (ne0, ne1), each addressable on its own (experts). */
#define EBB__LAYER_TENSOR3(name, ne0, ne1, ne2)                                                    \
    {                                                                                              \
        (name), EBB__DIM_##ne0, EBB__DIM_##ne1, EBB__T_LAYER, -1, EBB__DIM_##ne2                   \
    }

/* A tensor whose presence makes the load fail (e.g. Phi-3.5's longrope frequency factors). */
#define EBB__TENSOR_REFUSED(name)                                                                  \
    {                                                                                              \
        (name), EBB__DIM_1, EBB__DIM_1, EBB__T_REFUSED | EBB__T_OPTIONAL, -1, EBB__DIM_1           \
    }

/* ---- 3. the forward pass ---- */

/* Activation buffers: rows of one token each, width in hyper-parameter terms. */
enum ebb__buf {
    EBB__BUF_X,      /* (n_embd) the residual stream */
    EBB__BUF_CUR,    /* (n_embd) a normed copy of X, a block's input */
    EBB__BUF_Q,      /* (n_head * head_dim) */
    EBB__BUF_K,      /* (n_head_kv * head_dim) */
    EBB__BUF_V,      /* (n_head_kv * head_dim) */
    EBB__BUF_ATT,    /* (n_head * head_dim) attention output */
    EBB__BUF_GATE,   /* (n_ff) */
    EBB__BUF_UP,     /* (n_ff) */
    EBB__BUF_OUT,    /* (n_embd) a block's output before its residual add */
    EBB__BUF_LOGITS, /* (n_vocab) */
    EBB__BUF_QKV,    /* (n_q + 2 n_kv) a fused projection's output, before SPLIT */
    EBB__BUF_GU,     /* (2 n_ff) a fused gate|up projection's output, before SPLIT */
    EBB__N_BUF
};

enum ebb__op_kind {
    EBB__OP_GET_ROWS,  /* dst = rows of tensor t for the tokens' ids (input program) */
    EBB__OP_SCALE,     /* dst *= the factor named by arg (enum ebb__scale) */
    EBB__OP_RMS_NORM,  /* dst = rmsnorm(a) * t, per row (eps: rms_eps); dst may be a */
    EBB__OP_HEAD_NORM, /* dst = rmsnorm of each head_dim slice of a, times t (q/k norm) */
    EBB__OP_MATMUL,    /* dst = a @ t^T (t: (ne0 = width of a, ne1 = width of dst)) */
    EBB__OP_ROPE,      /* dst = a rotated per head by position (arg: enum ebb__rope) */
    EBB__OP_ATTENTION, /* dst = causal attention of queries a over the KV cache, after
                          storing keys b and values c at the tokens' positions; grouped
                          heads, scale 1/sqrt(head_dim), the layer's window (ebb__arch_window) */
    EBB__OP_GLU,       /* dst = act(a) * b (arg: enum ebb__act) */
    EBB__OP_ADD,       /* dst += a */
    EBB__OP_ADD_BIAS,  /* dst = a + t, t a vector as wide as dst added to every row (qwen2) */
    EBB__OP_SPLIT,     /* dst, b (and c when arg is 3) = consecutive column ranges of a, each
                          as wide as its buffer (phi3's fused q|k|v and gate|up) */
    EBB__OP_MOE,       /* dst = a mixture-of-experts feed-forward block of a, per row: the
                          router t (n_embd -> n_expert) scores the experts, softmax, the top
                          n_expert_used are kept (ties: lower id), their probabilities
                          renormalised (expert_norm) and scaled (expert_scale); dst = sum of
                          weight_e * down_e(act(gate_e a) * up_e a) over them (arg: enum
                          ebb__act). The experts are the three tensors declared right after t,
                          in the order gate, up, down: stacks (n_embd, n_ff_exp, n_expert) and
                          (n_ff_exp, n_embd, n_expert) of which only the chosen matrices are
                          read. */
    EBB__N_OP
};

enum ebb__rope {
    EBB__ROPE_NORMAL, /* pairs (2i, 2i+1): llama */
    EBB__ROPE_NEOX,   /* pairs (i, i + n_rot/2): gemma, qwen */
};

enum ebb__act {
    EBB__ACT_SILU,      /* SwiGLU */
    EBB__ACT_GELU_TANH, /* GeGLU with GELU's tanh approximation */
};

enum ebb__scale {
    EBB__SCALE_SQRT_EMBD, /* sqrt(n_embd) */
};

struct ebb__op {
    uint8_t kind;    /* enum ebb__op_kind */
    uint8_t dst;     /* enum ebb__buf */
    uint8_t a, b, c; /* enum ebb__buf: operands */
    uint8_t arg;     /* the op's enum argument */
    int16_t t;       /* tensor index in the family's table, or -1 */
};

/* The ops, as a family file writes them (buffers by their short name: X, CUR, Q, ...). */
#define EBB__B(name) EBB__BUF_##name
#define EBB__GET_ROWS(dst, t)                                                                      \
    {                                                                                              \
        EBB__OP_GET_ROWS, EBB__B(dst), 0, 0, 0, 0, (t)                                             \
    }
#define EBB__SCALE(dst, by)                                                                        \
    {                                                                                              \
        EBB__OP_SCALE, EBB__B(dst), EBB__B(dst), 0, 0, EBB__SCALE_##by, -1                         \
    }
#define EBB__RMS_NORM(dst, a, t)                                                                   \
    {                                                                                              \
        EBB__OP_RMS_NORM, EBB__B(dst), EBB__B(a), 0, 0, 0, (t)                                     \
    }
#define EBB__HEAD_NORM(dst, a, t)                                                                  \
    {                                                                                              \
        EBB__OP_HEAD_NORM, EBB__B(dst), EBB__B(a), 0, 0, 0, (t)                                    \
    }
#define EBB__MATMUL(dst, a, t)                                                                     \
    {                                                                                              \
        EBB__OP_MATMUL, EBB__B(dst), EBB__B(a), 0, 0, 0, (t)                                       \
    }
#define EBB__ROPE(dst, a, kind)                                                                    \
    {                                                                                              \
        EBB__OP_ROPE, EBB__B(dst), EBB__B(a), 0, 0, EBB__ROPE_##kind, -1                           \
    }
#define EBB__ATTENTION(dst, q, k, v)                                                               \
    {                                                                                              \
        EBB__OP_ATTENTION, EBB__B(dst), EBB__B(q), EBB__B(k), EBB__B(v), 0, -1                     \
    }
#define EBB__GLU(dst, gate, up, act)                                                               \
    {                                                                                              \
        EBB__OP_GLU, EBB__B(dst), EBB__B(gate), EBB__B(up), 0, EBB__ACT_##act, -1                  \
    }
#define EBB__ADD(dst, a)                                                                           \
    {                                                                                              \
        EBB__OP_ADD, EBB__B(dst), EBB__B(a), 0, 0, 0, -1                                           \
    }

#define EBB__ADD_BIAS(dst, t)                                                                      \
    {                                                                                              \
        EBB__OP_ADD_BIAS, EBB__B(dst), EBB__B(dst), 0, 0, 0, (t)                                   \
    }

/* router: the router tensor's index; gate, up and down experts follow it in the table. */
#define EBB__MOE(dst, a, router, act)                                                              \
    {                                                                                              \
        EBB__OP_MOE, EBB__B(dst), EBB__B(a), 0, 0, EBB__ACT_##act, (router)                        \
    }

#define EBB__SPLIT2(a, d0, d1)                                                                     \
    {                                                                                              \
        EBB__OP_SPLIT, EBB__B(d0), EBB__B(a), EBB__B(d1), 0, 2, -1                                 \
    }
#define EBB__SPLIT3(a, d0, d1, d2)                                                                 \
    {                                                                                              \
        EBB__OP_SPLIT, EBB__B(d0), EBB__B(a), EBB__B(d1), EBB__B(d2), 3, -1                        \
    }

/* A whole family. */
struct ebb__arch {
    const char *name; /* general.architecture */
    const struct ebb__key *keys;
    uint32_t n_keys;
    const struct ebb__tensor *tensors;
    uint32_t n_tensors;
    const struct ebb__op *input; /* token ids -> X; starts with GET_ROWS */
    uint32_t n_input;
    const struct ebb__op *layer; /* X -> X, once per layer */
    uint32_t n_layer_ops;
    const struct ebb__op *output; /* X -> LOGITS */
    uint32_t n_output;
};

#define EBB__LIST(a) (a), (uint32_t)(sizeof(a) / sizeof((a)[0]))

/* The families (arch-<family>.c). */
extern const struct ebb__arch ebb__arch_llama;
extern const struct ebb__arch ebb__arch_gemma3;
extern const struct ebb__arch ebb__arch_qwen2;
extern const struct ebb__arch ebb__arch_qwen3;
extern const struct ebb__arch ebb__arch_phi3;
extern const struct ebb__arch ebb__arch_qwen3moe;

/* ---- arch.c: what the backends use to run a description ---- */

/* The family named `name` (general.architecture), or NULL. */
const struct ebb__arch *ebb__arch_find(const char *name);
/* The families' names, comma separated, for messages. */
const char *ebb__arch_names(void);

/* Reads general.architecture, finds the family and fills hp from its key table, the derived
 * defaults and the engine's own keys (rope.scaling.*); n_vocab from the input's GET_ROWS
 * tensor. Errors name the key or the unsupported value. */
ebb_err ebb__arch_read_hparams(const struct ebb_gguf *g, const struct ebb__arch **arch,
                               struct ebb__hparams *hp, struct ebb_diag *diag);

/* The value of a dimension / the width of a buffer for hp. */
uint64_t ebb__arch_dim(const struct ebb__hparams *hp, enum ebb__dim d);
uint32_t ebb__arch_buf_width(const struct ebb__hparams *hp, enum ebb__buf b);

/* The attention window of layer l in positions, 0 for a global layer. */
static inline uint32_t ebb__arch_window(const struct ebb__hparams *hp, uint32_t l)
{
    return hp->swa && (!hp->swa_pattern || (l + 1) % hp->swa_pattern != 0) ? hp->swa : 0;
}

/* The divisor of each rotary pair's frequency (n_rot / 2 floats into ff): the file's
 * rope_freqs.weight when the family declares it and the file has it (or, for longrope, its
 * rope_factors_long or _short.weight by hp->n_ctx_run), else computed from
 * Llama 3.1's rope.scaling keys, else all 1. *scaled says whether any differs from 1. Errors:
 * a rope_freqs tensor of the wrong size, or a factor that is not a positive finite number. */
ebb_err ebb__arch_rope_freqs(const struct ebb__arch *a, const struct ebb__hparams *hp,
                             const struct ebb_gguf *g, float *ff, bool *scaled,
                             struct ebb_diag *diag);

/* The GGUF name of tensor t (of layer l when per layer) into buf. */
void ebb__arch_tensor_name(const struct ebb__arch *a, uint32_t t, uint32_t l, char *buf,
                           size_t cap);

/* Finds tensor t of layer l in g and checks its shape: *out is the file's tensor, the
 * fallback's when an optional tensor is missing, or NULL when it is missing with none (the ops
 * that use it are skipped). */
ebb_err ebb__arch_tensor(const struct ebb__arch *a, const struct ebb__hparams *hp,
                         const struct ebb_gguf *g, uint32_t t, uint32_t l,
                         const struct ebb_gguf_tensor **out, struct ebb_diag *diag);

/* Checks a description against hp and g: every tensor of every layer present with its shape
 * (or optional), every op's operands of matching widths (a MATMUL's tensor maps the width of a
 * to the width of dst, a norm's tensor is as wide as what it scales), the programs' shape
 * (input starts with GET_ROWS into X, output ends in LOGITS). */
ebb_err ebb__arch_check(const struct ebb__arch *a, const struct ebb__hparams *hp,
                        const struct ebb_gguf *g, struct ebb_diag *diag);

/* The op kind's name ("rms_norm", "matmul", ...), for messages. */
const char *ebb__arch_op_name(enum ebb__op_kind k);

#endif
