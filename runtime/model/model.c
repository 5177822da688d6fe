/* Model loading: GGUF file, hyper-parameters from the `<arch>.` metadata keys, tokenizer,
 * context length, and the choice of forward-pass backend. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream/memprobe.h"
#include "model-int.h"

/* The default context when none is asked for is the model's training context capped here, so
 * that a model with a huge context does not claim gigabytes of KV cache by default, and capped
 * by memory (default_ctx). */
#define DEFAULT_CTX_CAP 4096

/* The default context: the model's training context, capped at DEFAULT_CTX_CAP and so that the
 * KV cache of all slots (fp16 on the OpenCL engine, fp32 on the reference: counted as 4 bytes)
 * takes at most half of the memory the host can give without swapping (MemAvailable, or the
 * cgroup's limit when lower). Where no probe answers, only the fixed cap applies. Never below
 * 256 tokens: a smaller context is a configuration error better reported by the allocation. */
static uint32_t default_ctx(const struct ebb__hparams *hp, uint32_t n_seq)
{
    uint32_t n = hp->n_ctx_train < DEFAULT_CTX_CAP ? hp->n_ctx_train : DEFAULT_CTX_CAP;
    struct ebb_memprobe *mp = NULL;
    struct ebb_memprobe_reading r;
    if (ebb_memprobe_new(&(struct ebb_memprobe_params){0}, &mp, NULL))
        return n;
    if (!ebb_memprobe_read(mp, &r) && r.available_ok) {
        uint64_t per_tok = (uint64_t)hp->n_layer * 2 * hp->n_head_kv * hp->head_dim * 4 * n_seq;
        uint64_t fit = per_tok ? r.available / 2 / per_tok : n;
        if (fit < n)
            n = fit < 256 ? 256 : (uint32_t)(fit - fit % 256);
    }
    ebb_memprobe_free(mp);
    return n;
}

struct ebb_model {
    struct ebb_gguf *g;
    struct ebb_tokenizer *tok;
    struct ebb__hparams hp;
    uint32_t n_ctx;
    uint32_t n_seq;
    const struct ebb__backend_i *iface;
    void *ctx;
    char device[128];
};

/* Reads `<arch>.<suffix>` as u32; missing keys keep *out (a default) unless required. */
static ebb_err get_u32(const struct ebb_gguf *g, const char *arch, const char *suffix,
                       bool required, uint32_t *out, struct ebb_diag *diag)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    ebb_err rc = ebb_gguf_get_u32(g, key, out);
    if (rc == EBB_ENOTFOUND && !required)
        return EBB_OK;
    if (rc)
        return ebb_diag_set(diag, rc == EBB_ENOTFOUND ? EBB_EFORMAT : rc, "metadata key %s: %s",
                            key, ebb_err_str(rc));
    return EBB_OK;
}

static ebb_err get_f32(const struct ebb_gguf *g, const char *arch, const char *suffix, float *out,
                       struct ebb_diag *diag)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    ebb_err rc = ebb_gguf_get_f32(g, key, out);
    if (rc == EBB_ENOTFOUND)
        return EBB_OK;
    if (rc)
        return ebb_diag_set(diag, rc, "metadata key %s: %s", key, ebb_err_str(rc));
    return EBB_OK;
}

/* Fills hp from g's metadata and the token embedding's shape, with llama.cpp's defaults for
 * optional keys. */
static ebb_err read_hparams(const struct ebb_gguf *g, const struct ebb_tokenizer *tok,
                            struct ebb__hparams *hp, struct ebb_diag *diag)
{
    ebb_err rc;
    struct ebb_str arch;
    memset(hp, 0, sizeof(*hp));
    rc = ebb_gguf_get_str(g, "general.architecture", &arch);
    if (rc)
        return ebb_diag_set(diag, EBB_EFORMAT, "missing general.architecture");
    if (arch.n == 0 || arch.n >= sizeof(hp->arch))
        return ebb_diag_set(diag, EBB_EFORMAT, "bad general.architecture");
    memcpy(hp->arch, arch.p, arch.n);
    hp->arch[arch.n] = 0;
    const char *a = hp->arch;

    if ((rc = get_u32(g, a, "block_count", true, &hp->n_layer, diag)) ||
        (rc = get_u32(g, a, "embedding_length", true, &hp->n_embd, diag)) ||
        (rc = get_u32(g, a, "attention.head_count", true, &hp->n_head, diag)) ||
        (rc = get_u32(g, a, "feed_forward_length", true, &hp->n_ff, diag)))
        return rc;
    if (!hp->n_layer || !hp->n_embd || !hp->n_head || !hp->n_ff || hp->n_layer > 1024 ||
        hp->n_head > 1024 || hp->n_embd > (1u << 20) || hp->n_ff > (1u << 22))
        return ebb_diag_set(diag, EBB_EFORMAT, "implausible model dimensions");
    hp->n_head_kv = hp->n_head;
    hp->head_dim = hp->n_embd / hp->n_head;
    hp->n_ctx_train = 2048;
    if ((rc = get_u32(g, a, "attention.head_count_kv", false, &hp->n_head_kv, diag)) ||
        (rc = get_u32(g, a, "attention.key_length", false, &hp->head_dim, diag)) ||
        (rc = get_u32(g, a, "context_length", false, &hp->n_ctx_train, diag)))
        return rc;
    uint32_t v_len = hp->head_dim;
    if ((rc = get_u32(g, a, "attention.value_length", false, &v_len, diag)))
        return rc;
    if (!hp->n_head_kv || hp->n_head % hp->n_head_kv || !hp->head_dim || hp->head_dim > 1024 ||
        v_len != hp->head_dim)
        return ebb_diag_set(diag, EBB_EFORMAT,
                            "unsupported attention shape: %u heads, %u kv "
                            "heads, key length %u, value length %u",
                            hp->n_head, hp->n_head_kv, hp->head_dim, v_len);
    hp->n_rot = hp->head_dim;
    if ((rc = get_u32(g, a, "rope.dimension_count", false, &hp->n_rot, diag)))
        return rc;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return ebb_diag_set(diag, EBB_EFORMAT, "bad rope.dimension_count %u", hp->n_rot);
    hp->rope_base = 10000.0f;
    hp->rope_scale = 1.0f;
    hp->rms_eps = 1e-5f;
    if ((rc = get_f32(g, a, "rope.freq_base", &hp->rope_base, diag)) ||
        (rc = get_f32(g, a, "attention.layer_norm_rms_epsilon", &hp->rms_eps, diag)))
        return rc;
    /* Linear rope scaling: positions are divided by the factor. Other scaling types change
     * the frequencies in ways the backends do not implement yet. */
    struct ebb_str stype = {0};
    char key[128];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", a);
    if (ebb_gguf_get_str(g, key, &stype) == EBB_OK &&
        !(stype.n == 4 && !memcmp(stype.p, "none", 4))) {
        if (!(stype.n == 6 && !memcmp(stype.p, "linear", 6)))
            return ebb_diag_set(diag, EBB_EUNSUPPORTED, "rope scaling type '%.*s'", (int)stype.n,
                                stype.p);
        if ((rc = get_f32(g, a, "rope.scaling.factor", &hp->rope_scale, diag)))
            return rc;
        if (!(hp->rope_scale > 0))
            return ebb_diag_set(diag, EBB_EFORMAT, "bad rope.scaling.factor");
    }
    hp->rope_kind = !strcmp(a, "llama") ? EBB__ROPE_NORMAL : EBB__ROPE_NEOX;
    if (!strcmp(a, "gemma3")) {
        /* Five local layers to one global, local rope base 10000: fixed by the architecture
         * (as llama.cpp has them), not stored in the file. */
        hp->gemma3 = true;
        hp->swa_pattern = 6;
        hp->rope_base_swa = 10000.0f;
        if ((rc = get_u32(g, a, "attention.sliding_window", false, &hp->swa, diag)))
            return rc;
    }

    const struct ebb_gguf_tensor *emb = ebb_gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->ne[0] != hp->n_embd)
        return ebb_diag_set(diag, EBB_EFORMAT, "token_embd.weight missing or not (%u, vocab)",
                            hp->n_embd);
    hp->n_vocab = (uint32_t)emb->ne[1];
    if (hp->n_vocab != ebb_tokenizer_n_vocab(tok))
        return ebb_diag_set(diag, EBB_EFORMAT, "token_embd has %u rows, tokenizer %u tokens",
                            hp->n_vocab, ebb_tokenizer_n_vocab(tok));
    hp->tied_output = ebb_gguf_find_tensor(g, "output.weight") == NULL;
    return EBB_OK;
}

ebb_err ebb_model_open(const struct ebb_model_params *p, struct ebb_model **out,
                       struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    struct ebb_model *m = calloc(1, sizeof(*m));
    if (!m)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    if (!p || !p->path) {
        rc = ebb_diag_set(diag, EBB_EINVAL, "no model path");
        goto out;
    }
    if ((rc = ebb_gguf_open(p->path, &m->g, diag)))
        goto out;
    if ((rc = ebb_tokenizer_new(m->g, &m->tok, diag)))
        goto out;
    if ((rc = read_hparams(m->g, m->tok, &m->hp, diag)))
        goto out;

    m->n_seq = p->n_seq ? p->n_seq : 1;
    if (m->n_seq > 256) {
        rc = ebb_diag_set(diag, EBB_ERANGE, "n_seq %u is more than 256", m->n_seq);
        goto out;
    }
    m->n_ctx = p->n_ctx;
    if (!m->n_ctx)
        m->n_ctx = default_ctx(&m->hp, m->n_seq);
    if (m->n_ctx > m->hp.n_ctx_train && m->hp.rope_scale == 1.0f) {
        /* Longer than trained is allowed (llama.cpp allows it too) but usually degrades. */
        fprintf(stderr, "ebb: warning: context %u exceeds the model's training context %u\n",
                m->n_ctx, m->hp.n_ctx_train);
    }
    if (m->n_ctx > (1u << 20)) {
        rc = ebb_diag_set(diag, EBB_ERANGE, "context %u too large", m->n_ctx);
        goto out;
    }

    const char *dev = p->device ? p->device : "auto";
    if (!strcmp(dev, "ref") || !strcmp(dev, "ref-q8")) {
        rc = ebb__ref_backend_new(&m->hp, m->g, p, m->n_ctx, &m->iface, &m->ctx, diag);
    } else {
        rc = ebb__cl_backend_new(&m->hp, m->g, p, m->n_ctx, &m->iface, &m->ctx, diag);
    }
    if (rc)
        goto out;
    snprintf(m->device, sizeof(m->device), "%s", m->iface->name ? m->iface->name : dev);
    if (m->iface->n_ctx)
        m->n_ctx = m->iface->n_ctx;
out:
    if (rc) {
        ebb_model_close(m);
        return rc;
    }
    *out = m;
    return EBB_OK;
}

void ebb_model_close(struct ebb_model *m)
{
    if (!m)
        return;
    if (m->iface && m->iface->free)
        m->iface->free(m->ctx);
    ebb_tokenizer_free(m->tok);
    ebb_gguf_close(m->g);
    free(m);
}

const struct ebb_gguf *ebb_model_gguf(const struct ebb_model *m)
{
    return m->g;
}

const struct ebb_tokenizer *ebb_model_tokenizer(const struct ebb_model *m)
{
    return m->tok;
}

const char *ebb_model_arch(const struct ebb_model *m)
{
    return m->hp.arch;
}

const char *ebb_model_device_name(const struct ebb_model *m)
{
    return m->device;
}

uint32_t ebb_model_n_ctx(const struct ebb_model *m)
{
    return m->n_ctx;
}

uint32_t ebb_model_n_seq(const struct ebb_model *m)
{
    return m->n_seq;
}

uint32_t ebb_model_n_vocab(const struct ebb_model *m)
{
    return m->hp.n_vocab;
}

uint32_t ebb_model_n_embd(const struct ebb_model *m)
{
    return m->hp.n_embd;
}

ebb_err ebb_model_eval(struct ebb_model *m, uint32_t seq, const int32_t *tokens, uint32_t n,
                       uint32_t pos, struct ebb_model_out *out, struct ebb_diag *diag)
{
    if (seq >= m->n_seq)
        return ebb_diag_set(diag, EBB_EINVAL, "sequence slot %u of %u", seq, m->n_seq);
    if (n == 0)
        return ebb_diag_set(diag, EBB_EINVAL, "no tokens to evaluate");
    if (pos > m->n_ctx || n > m->n_ctx - pos)
        return ebb_diag_set(diag, EBB_ECTX, "positions %u..%u exceed the context of %u", pos,
                            pos + n - 1, m->n_ctx);
    for (uint32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= m->hp.n_vocab)
            return ebb_diag_set(diag, EBB_EINVAL, "token id %d outside the vocabulary (%u)",
                                (int)tokens[i], m->hp.n_vocab);
    }
    if (out && out->top_k > m->hp.n_vocab)
        return ebb_diag_set(diag, EBB_EINVAL, "top_k %u > vocabulary", out->top_k);
    struct ebb_model_out none = {0};
    return m->iface->eval(m->ctx, seq, tokens, n, pos, out ? out : &none, diag);
}

bool ebb_model_streaming(const struct ebb_model *m)
{
    struct ebb_stream_report r;
    return m->iface->stream_report && m->iface->stream_report(m->ctx, &r);
}

size_t ebb_model_stream_json(const struct ebb_model *m, char *buf, size_t cap)
{
    struct ebb_stream_report r;
    if (cap)
        buf[0] = 0;
    if (!m->iface->stream_report || !m->iface->stream_report(m->ctx, &r))
        return 0;
    return ebb_stream_report_json(&r, buf, cap);
}

size_t ebb_model_stream_prometheus(const struct ebb_model *m, char *buf, size_t cap)
{
    struct ebb_stream_report r;
    if (cap)
        buf[0] = 0;
    if (!m->iface->stream_report || !m->iface->stream_report(m->ctx, &r))
        return 0;
    return ebb_stream_report_prometheus(&r, buf, cap);
}

bool ebb_model_stream_probe(struct ebb_model *m)
{
    return m->iface->stream_probe && m->iface->stream_probe(m->ctx);
}
