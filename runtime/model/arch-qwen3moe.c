/* The qwen3moe family (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention block (per-head q/k
 * RMS norms before NeoX rope, no biases) with a mixture-of-experts feed-forward block in every
 * layer: a router scores expert_count experts per token, softmax, the expert_used_count best
 * are run and their outputs summed, weighted by their probabilities renormalised to sum 1
 * (llama.cpp always renormalises for this family; a file's expert_weights_norm = false is
 * honoured here). Each expert is a SwiGLU block of expert_feed_forward_length, stored as one
 * matrix of a 3-D stack per projection (ffn_gate_exps, ffn_up_exps, ffn_down_exps). */
#include "arch-int.h"

/* 1. Hyper-parameters: `qwen3moe.<key>`. */
static const struct ebb__key keys[] = {
    EBB__U32_REQUIRED("block_count", n_layer),
    EBB__U32_REQUIRED("embedding_length", n_embd),
    EBB__U32_REQUIRED("attention.head_count", n_head),
    EBB__U32_REQUIRED("feed_forward_length", n_ff),
    EBB__U32_DERIVED("attention.head_count_kv", n_head_kv),
    EBB__U32_DERIVED("attention.key_length", head_dim),
    EBB__U32_DERIVED("attention.value_length", head_dim_v),
    EBB__U32("context_length", n_ctx_train, 40960),
    EBB__U32_DERIVED("rope.dimension_count", n_rot),
    EBB__F32("rope.freq_base", rope_base, 1000000.0f),
    EBB__F32("attention.layer_norm_rms_epsilon", rms_eps, 1e-6f),
    EBB__U32_REQUIRED("expert_count", n_expert),
    EBB__U32_REQUIRED("expert_used_count", n_expert_used),
    EBB__U32_DERIVED("expert_feed_forward_length", n_ff_exp),
    EBB__BOOL("expert_weights_norm", expert_norm, 1),
    EBB__F32("expert_weights_scale", expert_scale, 0.0f),
};

/* 2. Tensors. */
enum {
    TOKEN_EMBD,
    OUTPUT_NORM,
    OUTPUT,
    ATTN_NORM,
    ATTN_Q,
    ATTN_K,
    ATTN_V,
    ATTN_Q_NORM,
    ATTN_K_NORM,
    ATTN_OUTPUT,
    FFN_NORM,
    FFN_GATE_INP, /* the router; the three expert stacks follow it (EBB__MOE) */
    FFN_GATE_EXPS,
    FFN_UP_EXPS,
    FFN_DOWN_EXPS,
};

static const struct ebb__tensor tensors[] = {
    [TOKEN_EMBD] = EBB__TENSOR("token_embd.weight", EMBD, VOCAB),
    [OUTPUT_NORM] = EBB__TENSOR("output_norm.weight", EMBD, 1),
    [OUTPUT] = EBB__TENSOR_OR("output.weight", EMBD, VOCAB, TOKEN_EMBD), /* tied when missing */
    [ATTN_NORM] = EBB__LAYER_TENSOR("attn_norm.weight", EMBD, 1),
    [ATTN_Q] = EBB__LAYER_TENSOR("attn_q.weight", EMBD, Q),
    [ATTN_K] = EBB__LAYER_TENSOR("attn_k.weight", EMBD, KV),
    [ATTN_V] = EBB__LAYER_TENSOR("attn_v.weight", EMBD, KV),
    [ATTN_Q_NORM] = EBB__LAYER_TENSOR("attn_q_norm.weight", HEAD, 1),
    [ATTN_K_NORM] = EBB__LAYER_TENSOR("attn_k_norm.weight", HEAD, 1),
    [ATTN_OUTPUT] = EBB__LAYER_TENSOR("attn_output.weight", Q, EMBD),
    [FFN_NORM] = EBB__LAYER_TENSOR("ffn_norm.weight", EMBD, 1),
    [FFN_GATE_INP] = EBB__LAYER_TENSOR("ffn_gate_inp.weight", EMBD, EXPERT),
    [FFN_GATE_EXPS] = EBB__LAYER_TENSOR3("ffn_gate_exps.weight", EMBD, FF_EXP, EXPERT),
    [FFN_UP_EXPS] = EBB__LAYER_TENSOR3("ffn_up_exps.weight", EMBD, FF_EXP, EXPERT),
    [FFN_DOWN_EXPS] = EBB__LAYER_TENSOR3("ffn_down_exps.weight", FF_EXP, EMBD, EXPERT),
};

/* 3. The forward pass. */
static const struct ebb__op input[] = {
    EBB__GET_ROWS(X, TOKEN_EMBD),
};

static const struct ebb__op layer[] = {
    /* attention block: x += Wo attention(rope(norm(Wq n)), rope(norm(Wk n)), Wv n) */
    EBB__RMS_NORM(CUR, X, ATTN_NORM),
    EBB__MATMUL(Q, CUR, ATTN_Q),
    EBB__MATMUL(K, CUR, ATTN_K),
    EBB__MATMUL(V, CUR, ATTN_V),
    EBB__HEAD_NORM(Q, Q, ATTN_Q_NORM),
    EBB__HEAD_NORM(K, K, ATTN_K_NORM),
    EBB__ROPE(Q, Q, NEOX),
    EBB__ROPE(K, K, NEOX),
    EBB__ATTENTION(ATT, Q, K, V),
    EBB__MATMUL(OUT, ATT, ATTN_OUTPUT),
    EBB__ADD(X, OUT),
    /* expert block: x += sum over the router's top k of w_e Wdown_e (silu(Wgate_e n) * Wup_e n) */
    EBB__RMS_NORM(CUR, X, FFN_NORM),
    EBB__MOE(OUT, CUR, FFN_GATE_INP, SILU),
    EBB__ADD(X, OUT),
};

static const struct ebb__op output[] = {
    EBB__RMS_NORM(CUR, X, OUTPUT_NORM),
    EBB__MATMUL(LOGITS, CUR, OUTPUT),
};

const struct ebb__arch ebb__arch_qwen3moe = {
    .name = "qwen3moe",
    .keys = EBB__LIST(keys),
    .tensors = EBB__LIST(tensors),
    .input = EBB__LIST(input),
    .layer = EBB__LIST(layer),
    .output = EBB__LIST(output),
};
