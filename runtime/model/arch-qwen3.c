/* The qwen3 family (Qwen 3 dense models): llama's pre-norm skeleton without biases, with an
 * RMS norm of each query and key head before the rotation (NeoX, split halves); heads may be
 * wider than embedding_length / head_count (key_length), and the output head is tied to the
 * token embeddings in the small models, its own tensor in the large ones. */
#include "arch-int.h"

/* 1. Hyper-parameters: `qwen3.<key>`. */
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
    FFN_GATE,
    FFN_UP,
    FFN_DOWN,
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
    [FFN_GATE] = EBB__LAYER_TENSOR("ffn_gate.weight", EMBD, FF),
    [FFN_UP] = EBB__LAYER_TENSOR("ffn_up.weight", EMBD, FF),
    [FFN_DOWN] = EBB__LAYER_TENSOR("ffn_down.weight", FF, EMBD),
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
    /* feed-forward block: x += Wdown (silu(Wgate n) * Wup n), n = norm(x) */
    EBB__RMS_NORM(CUR, X, FFN_NORM),
    EBB__MATMUL(GATE, CUR, FFN_GATE),
    EBB__MATMUL(UP, CUR, FFN_UP),
    EBB__GLU(GATE, GATE, UP, SILU),
    EBB__MATMUL(OUT, GATE, FFN_DOWN),
    EBB__ADD(X, OUT),
};

static const struct ebb__op output[] = {
    EBB__RMS_NORM(CUR, X, OUTPUT_NORM),
    EBB__MATMUL(LOGITS, CUR, OUTPUT),
};

const struct ebb__arch ebb__arch_qwen3 = {
    .name = "qwen3",
    .keys = EBB__LIST(keys),
    .tensors = EBB__LIST(tensors),
    .input = EBB__LIST(input),
    .layer = EBB__LIST(layer),
    .output = EBB__LIST(output),
};
