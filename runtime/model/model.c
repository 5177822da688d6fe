/* Model loading: GGUF file, the family's description and hyper-parameters (arch-int.h),
 * tokenizer, context length, and the choice of forward-pass backend. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "cl/cl.h"
#include "model-int.h"

struct ebb_model {
    struct ebb_gguf *g;
    struct ebb_tokenizer *tok;
    const struct ebb__arch *arch;
    struct ebb__hparams hp;
    uint32_t n_ctx;
    struct ebb_model_ctx ctx_why; /* how n_ctx was chosen */
    uint32_t n_seq;
    uint32_t pc_len; /* prompt-cache store positions */
    uint64_t pc_bytes;
    const struct ebb__backend_i *iface;
    void *ctx;
    char device[128];
};

/* Hyper-parameters through the family's description (arch-int.h), the description checked
 * against the file's tensors, and the vocabulary against the tokenizer's. */
static ebb_err read_hparams(const struct ebb_gguf *g, const struct ebb_tokenizer *tok,
                            const struct ebb__arch **arch, struct ebb__hparams *hp,
                            struct ebb_diag *diag)
{
    ebb_err rc;
    if ((rc = ebb__arch_read_hparams(g, arch, hp, diag)))
        return rc;
    if (hp->n_vocab != ebb_tokenizer_n_vocab(tok))
        return ebb_diag_set(diag, EBB_EFORMAT, "token_embd has %u rows, tokenizer %u tokens",
                            hp->n_vocab, ebb_tokenizer_n_vocab(tok));
    if ((rc = ebb__arch_check(*arch, hp, g, diag)))
        return rc;
    return EBB_OK;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Options only the OpenCL engine has: the layer streamer, packs, host layers, the expert
 * cache. */
static bool needs_cl(const struct ebb_model_params *p)
{
    return p->memory_budget || p->memory_budget_auto || p->pack_path || p->residency > 0 ||
           p->residency_forced || p->host_layers || p->expert_cache || getenv("EBB_EXPERT_CACHE") ||
           getenv("EBB_TEST_RESIDENCY");
}

/* The device "auto" stands for: EBB_AUTO_DEVICE when set (any --device value; tests that check
 * the OpenCL engine's own figures set "cl"), else the OpenCL engine on a GPU when one exists,
 * else "cpu", the native host device, which is faster than OpenCL on a CPU (PoCL) and needs no
 * OpenCL at all; the OpenCL engine too when an option needs it. */
static const char *auto_device(const struct ebb_model_params *p)
{
    const char *dev = p->device ? p->device : "auto";
    if (strcmp(dev, "auto"))
        return dev;
    const char *env = getenv("EBB_AUTO_DEVICE");
    if (env && *env)
        return env;
    return needs_cl(p) || ebb_cl_has_gpu() ? "auto" : "cpu";
}

static bool host_device(const char *dev)
{
    return !strcmp(dev, "ref") || !strcmp(dev, "ref-q8") || !strcmp(dev, "cpu");
}

/* The bytes of one position of the prompt-cache store, every layer's keys and values: the OpenCL
 * engine's halves or Q8_0 blocks, the host engines' floats or halves. */
static uint64_t store_pos_bytes(const struct ebb__hparams *hp, const char *dev,
                                enum ebb_kv_type kv_type)
{
    uint64_t row = !host_device(dev) ? ebb_kv_type_bytes(kv_type, hp->head_dim)
                                     : (uint64_t)hp->head_dim *
                                           (ebb__ref_kv16(dev, kv_type, hp->head_dim) ? 2 : 4);
    return 2 * (uint64_t)hp->n_layer * hp->n_head_kv * row;
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
    double t0 = now_s();
    if ((rc = ebb_gguf_open(p->path, &m->g, diag)))
        goto out;
    double t_gguf = now_s();
    if ((rc = ebb_tokenizer_new(m->g, &m->tok, diag)))
        goto out;
    ebb_log(EBB_LOG_INFO, "model", "%s: GGUF read in %.3f s, tokenizer built in %.3f s", p->path,
            t_gguf - t0, now_s() - t_gguf);
    if ((rc = read_hparams(m->g, m->tok, &m->arch, &m->hp, diag)))
        goto out;

    m->n_seq = p->n_seq ? p->n_seq : 1;
    if (m->n_seq > 256) {
        rc = ebb_diag_set(diag, EBB_ERANGE, "n_seq %u is more than 256", m->n_seq);
        goto out;
    }
    ebb__model_ctx_choose(m->g, &m->hp, p->n_ctx, m->n_seq, p->ctx_cap_trained, &m->ctx_why);
    m->n_ctx = m->ctx_why.n_ctx;
    if (m->ctx_why.capped_trained)
        ebb_log_warn("model",
                     "context %u exceeds the model's trained context %u: capped at %u "
                     "(ctx_over_trained / --ctx-over-trained allows more)",
                     p->n_ctx, m->ctx_why.trained, m->n_ctx);
    else if (m->ctx_why.over_trained)
        /* Longer than trained is allowed when asked (llama.cpp allows it too) but degrades. */
        ebb_log_warn("model",
                     "context %u exceeds the model's trained context %u; output past %u tokens "
                     "usually degrades",
                     m->n_ctx, m->ctx_why.trained, m->ctx_why.limit);
    if (m->n_ctx > (1u << 20)) {
        rc = ebb_diag_set(diag, EBB_ERANGE, "context %u too large", m->n_ctx);
        goto out;
    }

    struct ebb_model_params pd = *p; /* with "auto" resolved */
    const char *dev = pd.device = auto_device(p);
    bool host = host_device(dev);
    if (host && p->expert_cache) {
        rc = ebb_diag_set(diag, EBB_EINVAL,
                          "--expert-cache needs the OpenCL engine (not device '%s')", dev);
        goto out;
    }
    if (host) {
        rc = ebb__ref_backend_new(m->arch, &m->hp, m->g, &pd, m->n_ctx, &m->iface, &m->ctx, diag);
    } else {
        rc = ebb__cl_backend_new(m->arch, &m->hp, m->g, &pd, m->n_ctx, &m->iface, &m->ctx, diag);
    }
    if (rc)
        goto out;
    snprintf(m->device, sizeof(m->device), "%s", m->iface->name ? m->iface->name : dev);
    if (m->iface->n_ctx && m->iface->n_ctx != m->n_ctx) {
        m->n_ctx = m->ctx_why.n_ctx = m->iface->n_ctx;
        m->ctx_why.planned = true;
    }
    if (p->prompt_cache && m->iface->kv_store_new) {
        struct ebb_diag d2 = {{0}};
        rc = m->iface->kv_store_new(m->ctx, p->prompt_cache, &m->pc_len, &d2);
        if (rc == EBB_EUNSUPPORTED) {
            ebb_log(EBB_LOG_INFO, "model", "no prompt cache: %s", d2.msg);
            rc = EBB_OK;
        } else if (rc) {
            rc = ebb_diag_set(diag, rc, "%s", d2.msg);
            goto out;
        }
        m->pc_bytes = (uint64_t)m->pc_len * store_pos_bytes(&m->hp, dev, p->kv_type);
    }
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

void ebb_model_ctx(const struct ebb_model *m, struct ebb_model_ctx *out)
{
    *out = m->ctx_why;
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

/* The checks every evaluated part passes before anything runs. */
static ebb_err check_part(const struct ebb_model *m, uint32_t seq, const int32_t *tokens,
                          uint32_t n, uint32_t pos, const struct ebb_model_out *out,
                          struct ebb_diag *diag)
{
    if (seq >= m->n_seq)
        return ebb_diag_set(diag, EBB_EINVAL, "sequence slot %u of %u", seq, m->n_seq);
    if (n == 0 || !tokens)
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
    return EBB_OK;
}

ebb_err ebb_model_eval(struct ebb_model *m, uint32_t seq, const int32_t *tokens, uint32_t n,
                       uint32_t pos, struct ebb_model_out *out, struct ebb_diag *diag)
{
    ebb_err rc = check_part(m, seq, tokens, n, pos, out, diag);
    if (rc)
        return rc;
    struct ebb_model_out none = {0};
    return m->iface->eval(m->ctx, seq, tokens, n, pos, out ? out : &none, diag);
}

ebb_err ebb_model_eval_batch(struct ebb_model *m, const struct ebb_model_seq *seqs, uint32_t n_seqs,
                             struct ebb_diag *diag)
{
    if (!n_seqs || !seqs)
        return ebb_diag_set(diag, EBB_EINVAL, "an empty batch");
    for (uint32_t i = 0; i < n_seqs; i++) {
        const struct ebb_model_seq *s = &seqs[i];
        ebb_err rc = check_part(m, s->seq, s->tokens, s->n, s->pos, s->out, diag);
        if (rc)
            return rc;
        for (uint32_t j = 0; j < i; j++)
            if (seqs[j].seq == s->seq)
                return ebb_diag_set(diag, EBB_EINVAL, "slot %u appears twice in a batch", s->seq);
    }
    if (n_seqs > 1 && m->iface->eval_batch)
        return m->iface->eval_batch(m->ctx, seqs, n_seqs, diag);
    struct ebb_model_out none = {0};
    for (uint32_t i = 0; i < n_seqs; i++) {
        const struct ebb_model_seq *s = &seqs[i];
        ebb_err rc =
            m->iface->eval(m->ctx, s->seq, s->tokens, s->n, s->pos, s->out ? s->out : &none, diag);
        if (rc)
            return rc;
    }
    return EBB_OK;
}

ebb_err ebb_model_kv_copy(struct ebb_model *m, uint32_t src, uint32_t dst, uint32_t n,
                          struct ebb_diag *diag)
{
    if (src >= m->n_seq || dst >= m->n_seq)
        return ebb_diag_set(diag, EBB_EINVAL, "KV copy between slots %u and %u of %u", src, dst,
                            m->n_seq);
    if (n > m->n_ctx)
        return ebb_diag_set(diag, EBB_ECTX, "KV copy of %u positions, the context holds %u", n,
                            m->n_ctx);
    if (src == dst || n == 0)
        return EBB_OK;
    if (!m->iface->kv_copy)
        return ebb_diag_set(diag, EBB_EUNSUPPORTED, "the %s backend cannot copy KV entries",
                            m->device);
    return m->iface->kv_copy(m->ctx, src, dst, n, diag);
}

bool ebb_model_counters(const struct ebb_model *m, struct ebb_model_counters *out)
{
    *out = (struct ebb_model_counters){0};
    return m->iface->counters && m->iface->counters(m->ctx, out);
}

size_t ebb_model_kernels(const struct ebb_model *m, char *buf, size_t cap)
{
    if (cap)
        buf[0] = 0;
    return m->iface->kernels ? m->iface->kernels(m->ctx, buf, cap) : 0;
}

void ebb_model_decode_bytes(const struct ebb_model *m, uint32_t depth,
                            struct ebb_model_decode_bytes *out)
{
    *out = (struct ebb_model_decode_bytes){0};
    if (m->iface->decode_bytes)
        m->iface->decode_bytes(m->ctx, depth, out);
}

bool ebb_model_streaming(const struct ebb_model *m)
{
    struct ebb_stream_report r;
    return m->iface->stream_report && m->iface->stream_report(m->ctx, &r);
}

uint32_t ebb_model_long_rows(const struct ebb_model *m)
{
    return m->iface->long_rows;
}

uint32_t ebb_model_batch_rows(const struct ebb_model *m)
{
    return m->iface->batch_rows;
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

bool ebb_model_expert_cache(const struct ebb_model *m, struct ebb_model_expert_cache *out)
{
    *out = (struct ebb_model_expert_cache){0};
    return m->iface->expert_cache && m->iface->expert_cache(m->ctx, out);
}

size_t ebb_model_expert_cache_json(const struct ebb_model *m, char *buf, size_t cap)
{
    struct ebb_model_expert_cache x;
    if (cap)
        buf[0] = 0;
    if (!ebb_model_expert_cache(m, &x))
        return 0;
    int n = snprintf(
        buf, cap,
        "{\"slots\":%u,\"layers\":%u,\"pool_bytes\":%llu,\"expert_bytes\":%llu,"
        "\"expert_bytes_min\":%llu,\"lookups\":%llu,\"hits\":%llu,\"misses\":%llu,"
        "\"evictions\":%llu,"
        "\"bytes_copied\":%llu,\"passes\":%llu,\"layer_steps\":%llu,"
        "\"threads\":%u,\"host_bytes\":%llu,\"fill_ns\":%llu,\"ids_ns\":%llu,\"prefetched\":%llu,"
        "\"prefetch_hits\":%llu,\"prefetch_wasted\":%llu,\"host_experts\":%llu,"
        "\"host_ns\":%llu,\"host_cost_ns\":%llu,\"link_cost_ns\":%llu,\"long_passes\":%llu,"
        "\"long_layer_steps\":%llu,\"long_groups\":%llu,\"long_copied\":%llu,"
        "\"long_kept\":%llu,\"long_bytes\":%llu,\"long_copy_ns\":%llu,\"long_fill_ns\":%llu,\"long_"
        "ids_ns\":%llu,"
        "\"long_ns\":%llu}",
        x.slots, x.n_layer, (unsigned long long)x.pool_bytes, (unsigned long long)x.expert_bytes,
        (unsigned long long)x.expert_bytes_min, (unsigned long long)x.lookups,
        (unsigned long long)x.hits, (unsigned long long)x.misses, (unsigned long long)x.evictions,
        (unsigned long long)x.bytes_copied, (unsigned long long)x.passes,
        (unsigned long long)x.layer_steps, x.threads, (unsigned long long)x.host_bytes,
        (unsigned long long)x.fill_ns, (unsigned long long)x.ids_ns,
        (unsigned long long)x.prefetched, (unsigned long long)x.prefetch_hits,
        (unsigned long long)x.prefetch_wasted, (unsigned long long)x.host_experts,
        (unsigned long long)x.host_ns, (unsigned long long)x.host_cost_ns,
        (unsigned long long)x.link_cost_ns, (unsigned long long)x.lm_passes,
        (unsigned long long)x.lm_layer_steps, (unsigned long long)x.lm_groups,
        (unsigned long long)x.lm_copied, (unsigned long long)x.lm_kept,
        (unsigned long long)x.lm_bytes, (unsigned long long)x.lm_copy_ns,
        (unsigned long long)x.lm_fill_ns, (unsigned long long)x.lm_ids_ns,
        (unsigned long long)x.lm_ns);
    return n > 0 ? (size_t)n : 0;
}

size_t ebb_model_expert_cache_prometheus(const struct ebb_model *m, char *buf, size_t cap)
{
    struct ebb_model_expert_cache x;
    if (cap)
        buf[0] = 0;
    if (!ebb_model_expert_cache(m, &x))
        return 0;
#define XG "# TYPE ebb_expert_cache_%s gauge\nebb_expert_cache_%s %llu\n"
#define XC "# TYPE ebb_expert_cache_%s_total counter\nebb_expert_cache_%s_total %llu\n"
    int n = snprintf(
        buf, cap,
        "# HELP ebb_expert_cache_slots Expert slots per layer on the device.\n" XG
        "# HELP ebb_expert_cache_pool_bytes Device memory of the expert slots.\n" XG
        "# HELP ebb_expert_cache_lookups_total Experts looked up (hits + misses).\n" XC
        "# HELP ebb_expert_cache_hits_total Experts found in their slots.\n" XC
        "# HELP ebb_expert_cache_misses_total Experts copied into a slot.\n" XC
        "# HELP ebb_expert_cache_evictions_total Experts that left a slot for another.\n" XC
        "# HELP ebb_expert_cache_bytes_copied_total Bytes copied into expert slots.\n" XC
        "# HELP ebb_expert_cache_prefetched_total Experts copied ahead for the next layer.\n" XC
        "# HELP ebb_expert_cache_prefetch_hits_total Prefetched experts the layer then used.\n" XC
        "# HELP ebb_expert_cache_prefetch_wasted_total Prefetched experts the layer did not "
        "use.\n" XC
        "# HELP ebb_expert_cache_host_experts_total Missed experts computed by the host "
        "(EBB_EXPERT_HOST).\n" XC
        "# HELP ebb_expert_cache_fill_seconds_total Engine thread time copying misses.\n"
        "# TYPE ebb_expert_cache_fill_seconds_total counter\n"
        "ebb_expert_cache_fill_seconds_total %.6f\n"
        "# HELP ebb_expert_cache_long_passes_total Prompts run layer-major through the cache.\n" XC
        "# HELP ebb_expert_cache_long_layer_steps_total MoE layers of those passes.\n" XC
        "# HELP ebb_expert_cache_long_copied_total Experts copied by those passes (each used "
        "expert once a layer a pass).\n" XC
        "# HELP ebb_expert_cache_long_bytes_copied_total Bytes those copies moved.\n" XC
        "# HELP ebb_expert_cache_long_copy_seconds_total Device time of those copies.\n"
        "# TYPE ebb_expert_cache_long_copy_seconds_total counter\n"
        "ebb_expert_cache_long_copy_seconds_total %.6f\n"
        "# HELP ebb_expert_cache_long_seconds_total Time of those layers' expert phases (copies "
        "and products).\n"
        "# TYPE ebb_expert_cache_long_seconds_total counter\n"
        "ebb_expert_cache_long_seconds_total %.6f\n",
        "slots", "slots", (unsigned long long)x.slots, "pool_bytes", "pool_bytes",
        (unsigned long long)x.pool_bytes, "lookups", "lookups", (unsigned long long)x.lookups,
        "hits", "hits", (unsigned long long)x.hits, "misses", "misses",
        (unsigned long long)x.misses, "evictions", "evictions", (unsigned long long)x.evictions,
        "bytes_copied", "bytes_copied", (unsigned long long)x.bytes_copied, "prefetched",
        "prefetched", (unsigned long long)x.prefetched, "prefetch_hits", "prefetch_hits",
        (unsigned long long)x.prefetch_hits, "prefetch_wasted", "prefetch_wasted",
        (unsigned long long)x.prefetch_wasted, "host_experts", "host_experts",
        (unsigned long long)x.host_experts, (double)x.fill_ns / 1e9, "long_passes", "long_passes",
        (unsigned long long)x.lm_passes, "long_layer_steps", "long_layer_steps",
        (unsigned long long)x.lm_layer_steps, "long_copied", "long_copied",
        (unsigned long long)x.lm_copied, "long_bytes_copied", "long_bytes_copied",
        (unsigned long long)x.lm_bytes, (double)x.lm_copy_ns / 1e9, (double)x.lm_ns / 1e9);
#undef XG
#undef XC
    return n > 0 ? (size_t)n : 0;
}

bool ebb_model_stream_probe(struct ebb_model *m)
{
    return m->iface->stream_probe && m->iface->stream_probe(m->ctx);
}

bool ebb_model_stream_budget(struct ebb_model *m, uint64_t budget)
{
    if (!m->iface->stream_budget || !ebb_model_streaming(m))
        return false;
    m->iface->stream_budget(m->ctx, budget);
    return true;
}

void ebb_model_stream_set_wake(struct ebb_model *m, void (*fn)(void *u), void *u)
{
    if (m->iface->stream_set_wake)
        m->iface->stream_set_wake(m->ctx, fn, u);
}

ebb_err ebb_model_stream_settle(struct ebb_model *m, struct ebb_diag *diag)
{
    return m->iface->stream_settle ? m->iface->stream_settle(m->ctx, diag) : EBB_OK;
}

bool ebb_model_residency(const struct ebb_model *m, struct ebb_model_residency *out)
{
    struct ebb_stream_report r;
    if (!m->iface->stream_report || !m->iface->stream_report(m->ctx, &r))
        return false;
    out->n_layer = r.n_layer;
    out->n_resident = r.n_resident;
    out->n_streamed = r.n_layer - r.n_resident - r.n_host;
    out->bytes = r.bytes;
    out->bytes_min = r.bytes_min;
    out->bytes_full = r.bytes_full;
    return true;
}

uint32_t ebb_model_kv_store_len(const struct ebb_model *m)
{
    return m->pc_len;
}

uint64_t ebb_model_kv_store_bytes(const struct ebb_model *m)
{
    return m->pc_bytes;
}

void ebb_model_memory(const struct ebb_model *m, struct ebb_model_memory *out)
{
    struct ebb_model_memory mm = {0};
    if (m->iface->memory)
        m->iface->memory(m->ctx, &mm);
    mm.store = m->pc_bytes;
    *out = mm;
}

ebb_err ebb_model_memory_estimate(const struct ebb_gguf *g, const struct ebb_model_params *p,
                                  struct ebb_model_memory *out, struct ebb_diag *diag)
{
    const struct ebb__arch *a;
    struct ebb__hparams hp;
    ebb_err rc = ebb__arch_read_hparams(g, &a, &hp, diag);
    if (rc)
        return rc;
    struct ebb_model_ctx c;
    ebb__model_ctx_choose(g, &hp, p->n_ctx, p->n_seq ? p->n_seq : 1, p->ctx_cap_trained, &c);
    const char *dev = auto_device(p);
    struct ebb_model_memory mm = {0};
    if (!strcmp(dev, "cpu"))
        mm.repack = ebb__ref_repack_bytes(a, &hp, g);
    /* The OpenCL engine keeps no store where a windowed layer's cache is a ring (model-cl.c,
     * clm_kv_store_new): where its window and one prefill chunk are shorter than the context.
     * The chunk is the device's, known once open (128 on CPUs, 512 on GPUs), so here a window
     * shorter than the context counts as a ring (as the tuning's default, kv_ring, has it:
     * with EBB_CL_KV_RING=0 the count after the load is the store made). */
    bool rings = false;
    for (uint32_t l = 0; !host_device(dev) && l < hp.n_layer; l++) {
        uint32_t w = ebb__arch_window(&hp, l);
        rings |= w && w < c.n_ctx;
    }
    uint64_t per = store_pos_bytes(&hp, dev, p->kv_type), n = per ? p->prompt_cache / per : 0;
    if (!rings)
        mm.store = (n < UINT32_MAX ? n : UINT32_MAX) * per;
    *out = mm;
    return EBB_OK;
}

static ebb_err kv_store_xfer(struct ebb_model *m, bool save, uint32_t seq, uint32_t at, uint32_t n,
                             struct ebb_diag *diag)
{
    if (seq >= m->n_seq)
        return ebb_diag_set(diag, EBB_EINVAL, "KV store copy with slot %u of %u", seq, m->n_seq);
    if (n > m->n_ctx || (uint64_t)at + n > m->pc_len)
        return ebb_diag_set(diag, EBB_ECTX,
                            "KV store copy of %u positions at %u; the store holds %u, the "
                            "context %u",
                            n, at, m->pc_len, m->n_ctx);
    if (!n)
        return EBB_OK;
    return m->iface->kv_store_xfer(m->ctx, save, seq, at, n, diag);
}

ebb_err ebb_model_kv_save(struct ebb_model *m, uint32_t seq, uint32_t n, uint32_t at,
                          struct ebb_diag *diag)
{
    return kv_store_xfer(m, true, seq, at, n, diag);
}

ebb_err ebb_model_kv_load(struct ebb_model *m, uint32_t at, uint32_t n, uint32_t seq,
                          struct ebb_diag *diag)
{
    return kv_store_xfer(m, false, seq, at, n, diag);
}
