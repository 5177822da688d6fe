/* The llama family (Llama 2/3/3.1, SmolLM2, TinyLlama, Mistral): pre-norm
 * decoder layers with grouped-query attention, rotary positions on adjacent pairs and a SwiGLU
 * feed-forward block; the output head may reuse the token embeddings. Llama 3.1's files carry
 * their rope frequency factors as rope_freqs.weight; Mistral's (when the file sets
 * attention.sliding_window) attend in every layer to that many last positions only. */
#include "arch-int.h"

/* 1. Hyper-parameters: `llama.<key>`. */
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
    EBB__U32("attention.sliding_window", swa, 0), /* 0: none; else on every layer */
};

/* 2. Tensors. */
enum {
    TOKEN_EMBD,
    OUTPUT_NORM,
    OUTPUT,
    ROPE_FREQS,
    ATTN_NORM,
    ATTN_Q,
    ATTN_K,
    ATTN_V,
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
    /* Llama 3.1: each rotary pair's frequency divisor (ebb__arch_rope_freqs applies it). */
    [ROPE_FREQS] = EBB__TENSOR_OR("rope_freqs.weight", ROT2, 1, -1),
    [ATTN_NORM] = EBB__LAYER_TENSOR("attn_norm.weight", EMBD, 1),
    [ATTN_Q] = EBB__LAYER_TENSOR("attn_q.weight", EMBD, Q),
    [ATTN_K] = EBB__LAYER_TENSOR("attn_k.weight", EMBD, KV),
    [ATTN_V] = EBB__LAYER_TENSOR("attn_v.weight", EMBD, KV),
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
    /* attention block: x += Wo attention(rope(Wq n), rope(Wk n), Wv n), n = norm(x) */
    EBB__RMS_NORM(CUR, X, ATTN_NORM),
    EBB__MATMUL(Q, CUR, ATTN_Q),
    EBB__MATMUL(K, CUR, ATTN_K),
    EBB__MATMUL(V, CUR, ATTN_V),
    EBB__ROPE(Q, Q, NORMAL),
    EBB__ROPE(K, K, NORMAL),
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

const struct ebb__arch ebb__arch_llama = {
    .name = "llama",
    .keys = EBB__LIST(keys),
    .tensors = EBB__LIST(tensors),
    .input = EBB__LIST(input),
    .layer = EBB__LIST(layer),
    .output = EBB__LIST(output),
};
