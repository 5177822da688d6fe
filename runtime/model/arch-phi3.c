/* The phi3 family (Phi-3 / Phi-3.5 mini with their original context): llama's pre-norm
 * skeleton with the query, key and value projections fused into one tensor and the gate and
 * up projections into another (gate first), rotary positions on split halves (NeoX), an untied
 * output head. The GGUF's sliding-window key is not read: llama.cpp runs Phi-3 with global
 * attention too. The long-context variants (Phi-3.5, Phi-3 128k) carry longrope's per-pair
 * frequency divisors as rope_factors_long/short.weight (the engine picks a set by context and
 * applies the attention factor: arch-int.h, rope_longrope). */
#include "arch-int.h"

/* 1. Hyper-parameters: `phi3.<key>`. */
static const struct ebb__key keys[] = {
    EBB__U32_REQUIRED("block_count", n_layer),
    EBB__U32_REQUIRED("embedding_length", n_embd),
    EBB__U32_REQUIRED("attention.head_count", n_head),
    EBB__U32_REQUIRED("feed_forward_length", n_ff),
    EBB__U32_DERIVED("attention.head_count_kv", n_head_kv),
    EBB__U32_DERIVED("attention.key_length", head_dim),
    EBB__U32_DERIVED("attention.value_length", head_dim_v),
    EBB__U32("context_length", n_ctx_train, 4096),
    EBB__U32_DERIVED("rope.dimension_count", n_rot),
    EBB__F32("rope.freq_base", rope_base, 10000.0f),
    EBB__F32("attention.layer_norm_rms_epsilon", rms_eps, 1e-5f),
};

/* 2. Tensors. */
enum {
    TOKEN_EMBD,
    OUTPUT_NORM,
    OUTPUT,
    ROPE_FACTORS_LONG,
    ROPE_FACTORS_SHORT,
    ATTN_NORM,
    ATTN_QKV,
    ATTN_OUTPUT,
    FFN_NORM,
    FFN_UP,
    FFN_DOWN,
};

static const struct ebb__tensor tensors[] = {
    [TOKEN_EMBD] = EBB__TENSOR("token_embd.weight", EMBD, VOCAB),
    [OUTPUT_NORM] = EBB__TENSOR("output_norm.weight", EMBD, 1),
    [OUTPUT] = EBB__TENSOR_OR("output.weight", EMBD, VOCAB, TOKEN_EMBD),
    [ROPE_FACTORS_LONG] = EBB__TENSOR_OR("rope_factors_long.weight", ROT2, 1, -1),
    [ROPE_FACTORS_SHORT] = EBB__TENSOR_OR("rope_factors_short.weight", ROT2, 1, -1),
    [ATTN_NORM] = EBB__LAYER_TENSOR("attn_norm.weight", EMBD, 1),
    [ATTN_QKV] = EBB__LAYER_TENSOR("attn_qkv.weight", EMBD, QKV),
    [ATTN_OUTPUT] = EBB__LAYER_TENSOR("attn_output.weight", Q, EMBD),
    [FFN_NORM] = EBB__LAYER_TENSOR("ffn_norm.weight", EMBD, 1),
    [FFN_UP] = EBB__LAYER_TENSOR("ffn_up.weight", EMBD, FF2), /* gate | up */
    [FFN_DOWN] = EBB__LAYER_TENSOR("ffn_down.weight", FF, EMBD),
};

/* 3. The forward pass. */
static const struct ebb__op input[] = {
    EBB__GET_ROWS(X, TOKEN_EMBD),
};

static const struct ebb__op layer[] = {
    /* attention block: q|k|v = Wqkv n, x += Wo attention(rope(q), rope(k), v), n = norm(x) */
    EBB__RMS_NORM(CUR, X, ATTN_NORM),
    EBB__MATMUL(QKV, CUR, ATTN_QKV),
    EBB__SPLIT3(QKV, Q, K, V),
    EBB__ROPE(Q, Q, NEOX),
    EBB__ROPE(K, K, NEOX),
    EBB__ATTENTION(ATT, Q, K, V),
    EBB__MATMUL(OUT, ATT, ATTN_OUTPUT),
    EBB__ADD(X, OUT),
    /* feed-forward block: gate|up = Wup n, x += Wdown (silu(gate) * up), n = norm(x) */
    EBB__RMS_NORM(CUR, X, FFN_NORM),
    EBB__MATMUL(GU, CUR, FFN_UP),
    EBB__SPLIT2(GU, GATE, UP),
    EBB__GLU(GATE, GATE, UP, SILU),
    EBB__MATMUL(OUT, GATE, FFN_DOWN),
    EBB__ADD(X, OUT),
};

static const struct ebb__op output[] = {
    EBB__RMS_NORM(CUR, X, OUTPUT_NORM),
    EBB__MATMUL(LOGITS, CUR, OUTPUT),
};

const struct ebb__arch ebb__arch_phi3 = {
    .name = "phi3",
    .keys = EBB__LIST(keys),
    .tensors = EBB__LIST(tensors),
    .input = EBB__LIST(input),
    .layer = EBB__LIST(layer),
    .output = EBB__LIST(output),
};
