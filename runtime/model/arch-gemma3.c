/* The gemma3 family (Gemma 3 text models): llama's skeleton with embeddings scaled by
 * sqrt(n_embd), an RMS norm of each query and key head, norms of the attention and
 * feed-forward outputs before their residual adds, GELU (tanh) gating, rotary positions on
 * split halves, and five local layers (a sliding window, their own rope base) to one global. */
#include "arch-int.h"

/* 1. Hyper-parameters: `gemma3.<key>`, and what the architecture fixes (as llama.cpp has it):
 * layer l is global when (l + 1) % 6 == 0, the local layers' rope base is 10000. */
static const struct ebb__key keys[] = {
    EBB__U32_REQUIRED("block_count", n_layer),
    EBB__U32_REQUIRED("embedding_length", n_embd),
    EBB__U32_REQUIRED("attention.head_count", n_head),
    EBB__U32_REQUIRED("feed_forward_length", n_ff),
    EBB__U32_DERIVED("attention.head_count_kv", n_head_kv),
    EBB__U32_DERIVED("attention.key_length", head_dim),
    EBB__U32_DERIVED("attention.value_length", head_dim_v),
    EBB__U32("context_length", n_ctx_train, 2048),
    EBB__U32_DERIVED("rope.dimension_count", n_rot),
    EBB__F32("rope.freq_base", rope_base, 10000.0f),
    EBB__F32("attention.layer_norm_rms_epsilon", rms_eps, 1e-5f),
    EBB__U32("attention.sliding_window", swa, 0),
    EBB__U32_CONST(swa_pattern, 6),
    EBB__F32_CONST(rope_base_swa, 10000.0f),
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
    POST_ATTN_NORM,
    FFN_NORM,
    FFN_GATE,
    FFN_UP,
    FFN_DOWN,
    POST_FFN_NORM,
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
    [POST_ATTN_NORM] = EBB__LAYER_TENSOR("post_attention_norm.weight", EMBD, 1),
    [FFN_NORM] = EBB__LAYER_TENSOR("ffn_norm.weight", EMBD, 1),
    [FFN_GATE] = EBB__LAYER_TENSOR("ffn_gate.weight", EMBD, FF),
    [FFN_UP] = EBB__LAYER_TENSOR("ffn_up.weight", EMBD, FF),
    [FFN_DOWN] = EBB__LAYER_TENSOR("ffn_down.weight", FF, EMBD),
    [POST_FFN_NORM] = EBB__LAYER_TENSOR("post_ffw_norm.weight", EMBD, 1),
};

/* 3. The forward pass. */
static const struct ebb__op input[] = {
    EBB__GET_ROWS(X, TOKEN_EMBD),
    EBB__SCALE(X, SQRT_EMBD),
};

static const struct ebb__op layer[] = {
    /* attention block: x += norm(Wo attention(rope(norm(Wq n)), rope(norm(Wk n)), Wv n)) */
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
    EBB__RMS_NORM(OUT, OUT, POST_ATTN_NORM),
    EBB__ADD(X, OUT),
    /* feed-forward block: x += norm(Wdown (gelu(Wgate n) * Wup n)), n = norm(x) */
    EBB__RMS_NORM(CUR, X, FFN_NORM),
    EBB__MATMUL(GATE, CUR, FFN_GATE),
    EBB__MATMUL(UP, CUR, FFN_UP),
    EBB__GLU(GATE, GATE, UP, GELU_TANH),
    EBB__MATMUL(OUT, GATE, FFN_DOWN),
    EBB__RMS_NORM(OUT, OUT, POST_FFN_NORM),
    EBB__ADD(X, OUT),
};

static const struct ebb__op output[] = {
    EBB__RMS_NORM(CUR, X, OUTPUT_NORM),
    EBB__MATMUL(LOGITS, CUR, OUTPUT),
};

const struct ebb__arch ebb__arch_gemma3 = {
    .name = "gemma3",
    .keys = EBB__LIST(keys),
    .tensors = EBB__LIST(tensors),
    .input = EBB__LIST(input),
    .layer = EBB__LIST(layer),
    .output = EBB__LIST(output),
};
