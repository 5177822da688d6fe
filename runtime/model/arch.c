/* The architecture interface's shared half: the list of families, hyper-parameters from a
 * family's key table, tensor lookup by declaration, and the load-time check of a description
 * against a file. */
#include "arch-int.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "quant/quant.h"

static const struct ebb__arch *const families[] = {&ebb__arch_llama, &ebb__arch_gemma3,
                                                   &ebb__arch_qwen2, &ebb__arch_qwen3,
                                                   &ebb__arch_phi3,  &ebb__arch_qwen3moe};
#define N_FAMILIES (sizeof(families) / sizeof(families[0]))

const struct ebb__arch *ebb__arch_find(const char *name)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (!strcmp(families[i]->name, name))
            return families[i];
    return NULL;
}

const char *ebb__arch_names(void)
{
    static char names[256];
    if (!names[0]) {
        size_t n = 0;
        for (size_t i = 0; i < N_FAMILIES && n < sizeof(names); i++)
            n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s", i ? ", " : "",
                                  families[i]->name);
    }
    return names;
}

const char *ebb__arch_op_name(enum ebb__op_kind k)
{
    static const char *const names[EBB__N_OP] = {
        [EBB__OP_GET_ROWS] = "get_rows",
        [EBB__OP_SCALE] = "scale",
        [EBB__OP_RMS_NORM] = "rms_norm",
        [EBB__OP_HEAD_NORM] = "head_norm",
        [EBB__OP_MATMUL] = "matmul",
        [EBB__OP_ROPE] = "rope",
        [EBB__OP_ATTENTION] = "attention",
        [EBB__OP_GLU] = "glu",
        [EBB__OP_ADD] = "add",
        [EBB__OP_ADD_BIAS] = "add_bias",
        [EBB__OP_SPLIT] = "split",
        [EBB__OP_MOE] = "moe",
    };
    return (unsigned)k < EBB__N_OP ? names[k] : "?";
}

uint64_t ebb__arch_dim(const struct ebb__hparams *hp, enum ebb__dim d)
{
    switch (d) {
    case EBB__DIM_1:
        return 1;
    case EBB__DIM_EMBD:
        return hp->n_embd;
    case EBB__DIM_VOCAB:
        return hp->n_vocab;
    case EBB__DIM_Q:
        return (uint64_t)hp->n_head * hp->head_dim;
    case EBB__DIM_KV:
        return (uint64_t)hp->n_head_kv * hp->head_dim;
    case EBB__DIM_FF:
        return hp->n_ff;
    case EBB__DIM_HEAD:
        return hp->head_dim;
    case EBB__DIM_QKV:
        return ((uint64_t)hp->n_head + 2ull * hp->n_head_kv) * hp->head_dim;
    case EBB__DIM_FF2:
        return 2ull * hp->n_ff;
    case EBB__DIM_ROT2:
        return hp->n_rot / 2;
    case EBB__DIM_EXPERT:
        return hp->n_expert;
    case EBB__DIM_FF_EXP:
        return hp->n_ff_exp;
    default:
        return 0;
    }
}

uint32_t ebb__arch_buf_width(const struct ebb__hparams *hp, enum ebb__buf b)
{
    static const uint8_t dims[EBB__N_BUF] = {
        [EBB__BUF_X] = EBB__DIM_EMBD,   [EBB__BUF_CUR] = EBB__DIM_EMBD,
        [EBB__BUF_Q] = EBB__DIM_Q,      [EBB__BUF_K] = EBB__DIM_KV,
        [EBB__BUF_V] = EBB__DIM_KV,     [EBB__BUF_ATT] = EBB__DIM_Q,
        [EBB__BUF_GATE] = EBB__DIM_FF,  [EBB__BUF_UP] = EBB__DIM_FF,
        [EBB__BUF_OUT] = EBB__DIM_EMBD, [EBB__BUF_LOGITS] = EBB__DIM_VOCAB,
        [EBB__BUF_QKV] = EBB__DIM_QKV,  [EBB__BUF_GU] = EBB__DIM_FF2,
    };
    return (unsigned)b < EBB__N_BUF ? (uint32_t)ebb__arch_dim(hp, dims[b]) : 0;
}

/* ---- hyper-parameters ---- */

static void set_default(const struct ebb__key *k, void *field)
{
    if (k->type == EBB__KEY_F32)
        *(float *)field = k->def;
    else
        *(uint32_t *)field = (uint32_t)k->def;
}

/* Reads one entry of a key table into hp; *missing says the key was absent. */
static ebb_err read_key(const struct ebb_gguf *g, const char *arch, const struct ebb__key *k,
                        struct ebb__hparams *hp, bool *missing, struct ebb_diag *diag)
{
    void *field = (char *)hp + k->off;
    *missing = false;
    if (!k->key) {
        set_default(k, field);
        return EBB_OK;
    }
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", arch, k->key);
    ebb_err rc;
    bool b = false;
    if (k->type == EBB__KEY_U32)
        rc = ebb_gguf_get_u32(g, key, (uint32_t *)field);
    else if (k->type == EBB__KEY_F32)
        rc = ebb_gguf_get_f32(g, key, (float *)field);
    else if (!(rc = ebb_gguf_get_bool(g, key, &b)))
        *(uint32_t *)field = b;
    if (rc == EBB_ENOTFOUND) {
        if (k->flags & EBB__KEY_REQUIRED)
            return ebb_diag_set(diag, EBB_EFORMAT, "metadata key %s: %s", key, ebb_err_str(rc));
        *missing = true;
        set_default(k, field);
        return EBB_OK;
    }
    if (rc)
        return ebb_diag_set(diag, rc, "metadata key %s: %s", key, ebb_err_str(rc));
    return EBB_OK;
}

/* The engine's defaults for keys a family marks derived, in dependency order. */
static void derive(struct ebb__hparams *hp, size_t off)
{
    if (off == offsetof(struct ebb__hparams, n_head_kv))
        hp->n_head_kv = hp->n_head;
    else if (off == offsetof(struct ebb__hparams, head_dim))
        hp->head_dim = hp->n_embd / hp->n_head;
    else if (off == offsetof(struct ebb__hparams, head_dim_v))
        hp->head_dim_v = hp->head_dim;
    else if (off == offsetof(struct ebb__hparams, n_rot))
        hp->n_rot = hp->head_dim;
    else if (off == offsetof(struct ebb__hparams, n_ff_exp))
        hp->n_ff_exp = hp->n_expert_used ? hp->n_ff / hp->n_expert_used : 0;
}

/* An optional f32 key into *v (left alone when missing). */
static ebb_err get_f32_opt(const struct ebb_gguf *g, const struct ebb__hparams *hp,
                           const char *suffix, float *v, struct ebb_diag *diag)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", hp->arch, suffix);
    ebb_err rc = ebb_gguf_get_f32(g, key, v);
    if (rc && rc != EBB_ENOTFOUND)
        return ebb_diag_set(diag, rc, "metadata key %s: %s", key, ebb_err_str(rc));
    return EBB_OK;
}

/* Llama 3.1's keys, with its values as defaults. */
static ebb_err read_llama3_scaling(const struct ebb_gguf *g, struct ebb__hparams *hp,
                                   struct ebb_diag *diag)
{
    char key[128];
    hp->rope_llama3 = 1;
    hp->rope_factor = 8.0f;
    hp->rope_low_freq = 1.0f;
    hp->rope_high_freq = 4.0f;
    hp->rope_orig_ctx = 8192;
    ebb_err rc;
    if ((rc = get_f32_opt(g, hp, "rope.scaling.factor", &hp->rope_factor, diag)) ||
        (rc = get_f32_opt(g, hp, "rope.scaling.low_freq_factor", &hp->rope_low_freq, diag)) ||
        (rc = get_f32_opt(g, hp, "rope.scaling.high_freq_factor", &hp->rope_high_freq, diag)))
        return rc;
    snprintf(key, sizeof(key), "%s.rope.scaling.original_context_length", hp->arch);
    rc = ebb_gguf_get_u32(g, key, &hp->rope_orig_ctx);
    if (rc && rc != EBB_ENOTFOUND)
        return ebb_diag_set(diag, rc, "metadata key %s: %s", key, ebb_err_str(rc));
    if (!(hp->rope_factor >= 1.0f && hp->rope_factor < 1e6f && hp->rope_low_freq > 0 &&
          hp->rope_high_freq > hp->rope_low_freq && hp->rope_high_freq < 1e6f &&
          hp->rope_orig_ctx > 0))
        return ebb_diag_set(diag, EBB_EFORMAT,
                            "bad llama3 rope scaling (factor %g, low %g, high %g, context %u)",
                            (double)hp->rope_factor, (double)hp->rope_low_freq,
                            (double)hp->rope_high_freq, hp->rope_orig_ctx);
    return EBB_OK;
}

/* Phi-3.5's longrope, for a family that declares rope_factors_long.weight and whose file has it
 * (with rope_factors_short.weight): the original context and the attention factor. */
static ebb_err read_longrope(const struct ebb__arch *a, const struct ebb_gguf *g,
                             struct ebb__hparams *hp, struct ebb_diag *diag)
{
    hp->attn_factor = 1.0f;
    hp->n_ctx_run = 0;
    bool declared = false;
    for (uint32_t t = 0; t < a->n_tensors; t++)
        declared |= !strcmp(a->tensors[t].name, "rope_factors_long.weight");
    const bool has_long = ebb_gguf_find_tensor(g, "rope_factors_long.weight") != NULL;
    const bool has_short = ebb_gguf_find_tensor(g, "rope_factors_short.weight") != NULL;
    if (!declared || (!has_long && !has_short)) {
        if (hp->rope_longrope)
            return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                                "rope scaling type longrope without rope_factors tensors%s",
                                declared ? "" : " (not for this family)");
        return EBB_OK;
    }
    if (!has_long || !has_short)
        return ebb_diag_set(diag, EBB_EFORMAT,
                            "longrope: rope_factors_long.weight and rope_factors_short.weight "
                            "come together");
    char key[128];
    snprintf(key, sizeof(key), "%s.rope.scaling.original_context_length", hp->arch);
    if (ebb_gguf_get_u32(g, key, &hp->rope_orig_ctx) || hp->rope_orig_ctx < 2)
        return ebb_diag_set(diag, EBB_EFORMAT, "longrope: %s missing or below 2", key);
    hp->rope_longrope = 1;
    snprintf(key, sizeof(key), "%s.rope.scaling.attn_factor", hp->arch);
    float af = 0.0f;
    if (!ebb_gguf_get_f32(g, key, &af)) {
        if (!(af > 0 && isfinite(af)))
            return ebb_diag_set(diag, EBB_EFORMAT, "longrope: %s is %g", key, (double)af);
        hp->attn_factor = af;
    } else if (hp->n_ctx_train > hp->rope_orig_ctx) {
        double s = (double)hp->n_ctx_train / hp->rope_orig_ctx;
        hp->attn_factor = (float)sqrt(1.0 + log(s) / log((double)hp->rope_orig_ctx));
    }
    return EBB_OK;
}

/* Rope scaling, an engine feature every family gets: linear (positions divided by the factor)
 * and Llama 3.1's per-frequency factors (ebb__arch_rope_freqs); longrope (or "su") is accepted
 * here and read from its tensors (read_longrope). Other types (YaRN) change the rotation in
 * ways the backends do not implement yet. */
static ebb_err read_rope_scaling(const struct ebb_gguf *g, struct ebb__hparams *hp,
                                 struct ebb_diag *diag)
{
    struct ebb_str stype = {0};
    char key[128];
    hp->rope_scale = 1.0f;
    snprintf(key, sizeof(key), "%s.rope.scaling.type", hp->arch);
    if (ebb_gguf_get_str(g, key, &stype) || (stype.n == 4 && !memcmp(stype.p, "none", 4)))
        return EBB_OK;
    if (stype.n == 6 && !memcmp(stype.p, "llama3", 6))
        return read_llama3_scaling(g, hp, diag);
    if ((stype.n == 8 && !memcmp(stype.p, "longrope", 8)) ||
        (stype.n == 2 && !memcmp(stype.p, "su", 2))) {
        hp->rope_longrope = 2; /* the factor tensors must follow (read_longrope) */
        return EBB_OK;
    }
    if (!(stype.n == 6 && !memcmp(stype.p, "linear", 6)))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "rope scaling type '%.*s'", (int)stype.n,
                            stype.p);
    ebb_err rc = get_f32_opt(g, hp, "rope.scaling.factor", &hp->rope_scale, diag);
    if (rc)
        return rc;
    if (!(hp->rope_scale > 0))
        return ebb_diag_set(diag, EBB_EFORMAT, "bad rope.scaling.factor");
    return EBB_OK;
}

/* The shapes every backend relies on. */
static ebb_err check_hparams(const struct ebb__hparams *hp, struct ebb_diag *diag)
{
    if (!hp->n_layer || !hp->n_embd || !hp->n_head || !hp->n_ff || hp->n_layer > 1024 ||
        hp->n_head > 1024 || hp->n_embd > (1u << 20) || hp->n_ff > (1u << 22))
        return ebb_diag_set(diag, EBB_EFORMAT, "implausible model dimensions");
    if (!hp->n_head_kv || hp->n_head % hp->n_head_kv || !hp->head_dim || hp->head_dim > 1024 ||
        hp->head_dim_v != hp->head_dim)
        return ebb_diag_set(diag, EBB_EFORMAT,
                            "unsupported attention shape: %u heads, %u kv "
                            "heads, key length %u, value length %u",
                            hp->n_head, hp->n_head_kv, hp->head_dim, hp->head_dim_v);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return ebb_diag_set(diag, EBB_EFORMAT, "bad rope.dimension_count %u", hp->n_rot);
    if (hp->n_expert &&
        (hp->n_expert > EBB__MAX_EXPERT || !hp->n_expert_used || hp->n_expert_used > hp->n_expert ||
         hp->n_expert_used > EBB__MAX_EXPERT_USED || !hp->n_ff_exp || hp->n_ff_exp > (1u << 22) ||
         !(hp->expert_scale >= 0) || !isfinite(hp->expert_scale)))
        return ebb_diag_set(
            diag, EBB_EFORMAT, "unsupported experts: %u of %u used (at most %u of %u), width %u",
            hp->n_expert_used, hp->n_expert, EBB__MAX_EXPERT_USED, EBB__MAX_EXPERT, hp->n_ff_exp);
    return EBB_OK;
}

ebb_err ebb__arch_read_hparams(const struct ebb_gguf *g, const struct ebb__arch **arch,
                               struct ebb__hparams *hp, struct ebb_diag *diag)
{
    struct ebb_str name;
    memset(hp, 0, sizeof(*hp));
    if (ebb_gguf_get_str(g, "general.architecture", &name))
        return ebb_diag_set(diag, EBB_EFORMAT, "missing general.architecture");
    if (name.n == 0 || name.n >= sizeof(hp->arch))
        return ebb_diag_set(diag, EBB_EFORMAT, "bad general.architecture");
    memcpy(hp->arch, name.p, name.n);
    hp->arch[name.n] = 0;
    const struct ebb__arch *a = ebb__arch_find(hp->arch);
    if (!a)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "architecture '%s' is not supported (%s)",
                            hp->arch, ebb__arch_names());

    bool missing[64] = {false};
    if (a->n_keys > 64)
        return ebb_diag_set(diag, EBB_EINVAL, "family %s: too many keys", a->name);
    ebb_err rc;
    for (uint32_t i = 0; i < a->n_keys; i++)
        if ((rc = read_key(g, a->name, &a->keys[i], hp, &missing[i], diag)))
            return rc;
    if (!hp->n_head)
        return ebb_diag_set(diag, EBB_EFORMAT, "implausible model dimensions");
    const size_t order[] = {
        offsetof(struct ebb__hparams, n_head_kv), offsetof(struct ebb__hparams, head_dim),
        offsetof(struct ebb__hparams, head_dim_v), offsetof(struct ebb__hparams, n_rot),
        offsetof(struct ebb__hparams, n_ff_exp)};
    for (size_t o = 0; o < sizeof(order) / sizeof(order[0]); o++)
        for (uint32_t i = 0; i < a->n_keys; i++)
            if (a->keys[i].off == order[o] && missing[i] && (a->keys[i].flags & EBB__KEY_DERIVED))
                derive(hp, order[o]);
    if ((rc = check_hparams(hp, diag)) || (rc = read_rope_scaling(g, hp, diag)))
        return rc;

    /* The vocabulary is the row count of the tensor the input program reads tokens from. */
    if (!a->n_input || a->input[0].kind != EBB__OP_GET_ROWS || a->input[0].t < 0 ||
        (uint32_t)a->input[0].t >= a->n_tensors)
        return ebb_diag_set(diag, EBB_EINVAL, "family %s: the input does not start with get_rows",
                            a->name);
    const struct ebb__tensor *et = &a->tensors[a->input[0].t];
    const struct ebb_gguf_tensor *emb = ebb_gguf_find_tensor(g, et->name);
    if (!emb || emb->n_dims != 2 || emb->ne[0] != ebb__arch_dim(hp, et->ne0) ||
        emb->ne[1] > UINT32_MAX || !emb->ne[1])
        return ebb_diag_set(diag, EBB_EFORMAT, "%s missing or not (%llu, vocab)", et->name,
                            (unsigned long long)ebb__arch_dim(hp, et->ne0));
    hp->n_vocab = (uint32_t)emb->ne[1];
    float ff[512]; /* n_rot <= head_dim <= 1024 (check_hparams) */
    bool scaled;
    if ((rc = read_longrope(a, g, hp, diag)) ||
        (rc = ebb__arch_rope_freqs(a, hp, g, ff, &scaled, diag)))
        return rc;
    hp->rope_freqs = scaled;
    if (hp->rope_longrope) { /* both sets checked; either may be the one a backend runs */
        bool scaled_long;
        hp->n_ctx_run = UINT32_MAX;
        rc = ebb__arch_rope_freqs(a, hp, g, ff, &scaled_long, diag);
        hp->n_ctx_run = 0;
        if (rc)
            return rc;
        hp->rope_freqs |= scaled_long;
    }
    *arch = a;
    return EBB_OK;
}

/* ---- tensors ---- */

void ebb__arch_tensor_name(const struct ebb__arch *a, uint32_t t, uint32_t l, char *buf, size_t cap)
{
    const struct ebb__tensor *d = &a->tensors[t];
    if (d->flags & EBB__T_LAYER)
        snprintf(buf, cap, "blk.%u.%s", l, d->name);
    else
        snprintf(buf, cap, "%s", d->name);
}

ebb_err ebb__arch_tensor(const struct ebb__arch *a, const struct ebb__hparams *hp,
                         const struct ebb_gguf *g, uint32_t t, uint32_t l,
                         const struct ebb_gguf_tensor **out, struct ebb_diag *diag)
{
    char name[96];
    const struct ebb__tensor *d = &a->tensors[t];
    ebb__arch_tensor_name(a, t, l, name, sizeof(name));
    const struct ebb_gguf_tensor *gt = ebb_gguf_find_tensor(g, name);
    if (gt && (d->flags & EBB__T_REFUSED))
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "tensor %s: the %s family's file asks for what ebb does not "
                            "implement yet",
                            name, a->name);
    if (!gt) {
        if (!(d->flags & EBB__T_OPTIONAL))
            return ebb_diag_set(diag, EBB_EFORMAT, "tensor %s missing", name);
        if (d->fallback < 0 || (uint32_t)d->fallback == t) {
            *out = NULL;
            return EBB_OK;
        }
        return ebb__arch_tensor(a, hp, g, (uint32_t)d->fallback, l, out, diag);
    }
    uint64_t ne0 = ebb__arch_dim(hp, d->ne0), ne1 = ebb__arch_dim(hp, d->ne1);
    uint64_t ne2 = ebb__arch_dim(hp, d->ne2);
    bool vec = d->ne1 == EBB__DIM_1, stack = d->ne2 != EBB__DIM_1;
    bool ok = vec     ? gt->n_elements == ne0
              : stack ? gt->n_dims == 3 && gt->ne[0] == ne0 && gt->ne[1] == ne1 && gt->ne[2] == ne2
                      : gt->n_dims == 2 && gt->ne[0] == ne0 && gt->ne[1] == ne1;
    if (!ok && stack)
        return ebb_diag_set(
            diag, EBB_EFORMAT, "tensor %s has shape (%llu, %llu, %llu), want (%llu, %llu, %llu)",
            name, (unsigned long long)gt->ne[0], (unsigned long long)gt->ne[1],
            (unsigned long long)(gt->n_dims > 2 ? gt->ne[2] : 1), (unsigned long long)ne0,
            (unsigned long long)ne1, (unsigned long long)ne2);
    if (!ok)
        return ebb_diag_set(diag, EBB_EFORMAT,
                            "tensor %s has shape (%llu, %llu), want (%llu, %llu)", name,
                            (unsigned long long)gt->ne[0], (unsigned long long)gt->ne[1],
                            (unsigned long long)ne0, (unsigned long long)ne1);
    *out = gt;
    return EBB_OK;
}

/* ---- rope frequency factors ---- */

/* Llama 3.1's divisors: pairs whose wavelength is shorter than original context / high keep
 * their frequency, those longer than original context / low are slowed by the whole factor,
 * and the ones between blend the two by where the wavelength falls. */
static void llama3_freqs(const struct ebb__hparams *hp, float *ff)
{
    const double lo_wave = hp->rope_orig_ctx / (double)hp->rope_low_freq;
    const double hi_wave = hp->rope_orig_ctx / (double)hp->rope_high_freq;
    for (uint32_t i = 0; i < hp->n_rot / 2; i++) {
        double freq = pow((double)hp->rope_base, -2.0 * i / (double)hp->n_rot);
        double wave = 2.0 * M_PI / freq;
        double div = 1.0;
        if (wave > lo_wave) {
            div = hp->rope_factor;
        } else if (wave >= hi_wave) {
            double smooth = (hp->rope_orig_ctx / wave - hp->rope_low_freq) /
                            (hp->rope_high_freq - hp->rope_low_freq);
            div = 1.0 / ((1.0 - smooth) / hp->rope_factor + smooth);
        }
        ff[i] = (float)div;
    }
}

ebb_err ebb__arch_rope_freqs(const struct ebb__arch *a, const struct ebb__hparams *hp,
                             const struct ebb_gguf *g, float *ff, bool *scaled,
                             struct ebb_diag *diag)
{
    const uint32_t n = hp->n_rot / 2;
    const struct ebb_gguf_tensor *gt = NULL;
    const char *want = "rope_freqs.weight";
    if (hp->rope_longrope)
        want = hp->n_ctx_run > hp->rope_orig_ctx ? "rope_factors_long.weight"
                                                 : "rope_factors_short.weight";
    for (uint32_t t = 0; t < a->n_tensors && !gt; t++)
        if (!(a->tensors[t].flags & EBB__T_LAYER) && !strcmp(a->tensors[t].name, want))
            gt = ebb_gguf_find_tensor(g, a->tensors[t].name);
    for (uint32_t i = 0; i < n; i++)
        ff[i] = 1.0f;
    if (gt) {
        if (gt->n_elements != n || ebb_quant_dequantize_row(gt->type, gt->data, ff, n))
            return ebb_diag_set(diag, EBB_EFORMAT, "%s: want %u f32/f16 factors (n_rot / 2)", want,
                                n);
    } else if (hp->rope_llama3) {
        llama3_freqs(hp, ff);
    }
    *scaled = false;
    for (uint32_t i = 0; i < n; i++) {
        if (!(ff[i] > 0 && isfinite(ff[i])))
            return ebb_diag_set(diag, EBB_EFORMAT, "%s: factor %u is %g", want, i, (double)ff[i]);
        *scaled |= ff[i] != 1.0f;
    }
    return EBB_OK;
}

/* ---- the programs ---- */

/* A MOE op's router t and the gate, up, down stacks after it against a (wa wide) and dst. */
static bool check_moe(const struct ebb__arch *a, const struct ebb__hparams *hp,
                      const struct ebb__op *op, uint64_t wa, uint64_t wd)
{
    if ((uint32_t)op->t + 3 >= a->n_tensors || !hp->n_expert || op->arg > EBB__ACT_GELU_TANH)
        return false;
    const struct ebb__tensor *t = &a->tensors[op->t];
#define DIMS(i, d0, d1, d2)                                                                        \
    (ebb__arch_dim(hp, t[i].ne0) == (d0) && ebb__arch_dim(hp, t[i].ne1) == (d1) &&                 \
     ebb__arch_dim(hp, t[i].ne2) == (d2) && (t[i].flags & EBB__T_LAYER) &&                         \
     !(t[i].flags & EBB__T_OPTIONAL))
    bool ok = DIMS(0, wa, hp->n_expert, 1) && DIMS(1, wa, hp->n_ff_exp, hp->n_expert) &&
              DIMS(2, wa, hp->n_ff_exp, hp->n_expert) && DIMS(3, hp->n_ff_exp, wd, hp->n_expert);
#undef DIMS
    return ok;
}

/* Checks one op's operands; prog names the program for messages. */
static ebb_err check_op(const struct ebb__arch *a, const struct ebb__hparams *hp,
                        const struct ebb__op *op, const char *prog, uint32_t i,
                        struct ebb_diag *diag)
{
    const char *on = ebb__arch_op_name(op->kind);
    if (op->kind >= EBB__N_OP || op->dst >= EBB__N_BUF || op->a >= EBB__N_BUF ||
        op->b >= EBB__N_BUF || op->c >= EBB__N_BUF ||
        (op->t >= 0 && (uint32_t)op->t >= a->n_tensors))
        return ebb_diag_set(diag, EBB_EINVAL, "family %s: %s op %u is malformed", a->name, prog, i);
    bool needs_t = op->kind == EBB__OP_GET_ROWS || op->kind == EBB__OP_RMS_NORM ||
                   op->kind == EBB__OP_HEAD_NORM || op->kind == EBB__OP_MATMUL ||
                   op->kind == EBB__OP_ADD_BIAS || op->kind == EBB__OP_MOE;
    if (needs_t != (op->t >= 0))
        return ebb_diag_set(diag, EBB_EINVAL, "family %s: %s op %u (%s) %s a tensor", a->name, prog,
                            i, on, needs_t ? "needs" : "takes no");
    uint64_t wd = ebb__arch_buf_width(hp, op->dst), wa = ebb__arch_buf_width(hp, op->a);
    uint64_t ne0 = 0, ne1 = 0;
    if (op->t >= 0) {
        ne0 = ebb__arch_dim(hp, a->tensors[op->t].ne0);
        ne1 = ebb__arch_dim(hp, a->tensors[op->t].ne1);
    }
    bool ok = true;
    switch (op->kind) {
    case EBB__OP_GET_ROWS:
        ok = ne0 == wd;
        break;
    case EBB__OP_RMS_NORM:
    case EBB__OP_ADD_BIAS:
        ok = wa == wd && ne0 == wd && ne1 == 1;
        break;
    case EBB__OP_HEAD_NORM:
        ok = wa == wd && ne0 == hp->head_dim && ne1 == 1 && wd % hp->head_dim == 0;
        break;
    case EBB__OP_MATMUL:
        ok = ne0 == wa && ne1 == wd;
        break;
    case EBB__OP_ROPE:
        ok = wa == wd && wd % hp->head_dim == 0;
        break;
    case EBB__OP_ATTENTION:
        ok = wa == wd && wa == ebb__arch_dim(hp, EBB__DIM_Q) &&
             ebb__arch_buf_width(hp, op->b) == ebb__arch_dim(hp, EBB__DIM_KV) &&
             ebb__arch_buf_width(hp, op->c) == ebb__arch_dim(hp, EBB__DIM_KV);
        break;
    case EBB__OP_GLU:
        ok = wa == wd && ebb__arch_buf_width(hp, op->b) == wd && op->arg <= EBB__ACT_GELU_TANH;
        break;
    case EBB__OP_ADD:
        ok = wa == wd;
        break;
    case EBB__OP_SCALE:
        ok = op->arg == EBB__SCALE_SQRT_EMBD;
        break;
    case EBB__OP_MOE:
        ok = check_moe(a, hp, op, wa, wd);
        break;
    case EBB__OP_SPLIT: {
        uint64_t sum = wd + ebb__arch_buf_width(hp, op->b);
        if (op->arg == 3)
            sum += ebb__arch_buf_width(hp, op->c);
        ok = (op->arg == 2 || op->arg == 3) && sum == wa;
        break;
    }
    }
    if (!ok)
        return ebb_diag_set(diag, EBB_EINVAL,
                            "family %s: %s op %u (%s) has operands of mismatched widths", a->name,
                            prog, i, on);
    return EBB_OK;
}

static ebb_err check_prog(const struct ebb__arch *a, const struct ebb__hparams *hp,
                          const struct ebb__op *ops, uint32_t n, const char *prog,
                          struct ebb_diag *diag)
{
    for (uint32_t i = 0; i < n; i++) {
        ebb_err rc = check_op(a, hp, &ops[i], prog, i, diag);
        if (rc)
            return rc;
    }
    return EBB_OK;
}

ebb_err ebb__arch_check(const struct ebb__arch *a, const struct ebb__hparams *hp,
                        const struct ebb_gguf *g, struct ebb_diag *diag)
{
    ebb_err rc;
    if (!a->n_input || a->input[0].kind != EBB__OP_GET_ROWS || a->input[0].dst != EBB__BUF_X ||
        !a->n_output || a->output[a->n_output - 1].dst != EBB__BUF_LOGITS || !a->n_layer_ops)
        return ebb_diag_set(diag, EBB_EINVAL,
                            "family %s: the input must start with get_rows into X and the output "
                            "end in LOGITS",
                            a->name);
    if ((rc = check_prog(a, hp, a->input, a->n_input, "input", diag)) ||
        (rc = check_prog(a, hp, a->layer, a->n_layer_ops, "layer", diag)) ||
        (rc = check_prog(a, hp, a->output, a->n_output, "output", diag)))
        return rc;
    for (uint32_t t = 0; t < a->n_tensors; t++) {
        uint32_t n = a->tensors[t].flags & EBB__T_LAYER ? hp->n_layer : 1;
        for (uint32_t l = 0; l < n; l++) {
            const struct ebb_gguf_tensor *gt;
            if ((rc = ebb__arch_tensor(a, hp, g, t, l, &gt, diag)))
                return rc;
        }
    }
    return EBB_OK;
}
