/* The context length per slot: what is asked, the default when nothing is, and the model's
 * trained length, which a longer ask is capped at unless the caller allows more (model.h,
 * struct ebb_model_ctx). ebb_model_open and `ebb info` choose through the same function, so
 * what info prints is what serve and run get. The machine's physical cores are counted here too
 * (the threads of the CPU device and of host layers). */
#include "model.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model-int.h"
#include "stream/memprobe.h"

/* The longest context the file says its rope covers. Llama 3.1's and Phi-3.5's scaling are
 * already counted in context_length (their converters write the extended length there); linear
 * scaling reaches factor x rope.scaling.original_context_length when the file gives that
 * original, which is how converters describe a context stretched past the trained one. Without
 * the original length the stated context_length is all that can be trusted. */
static uint32_t rope_reach(const struct ebb_gguf *g, const struct ebb__hparams *hp)
{
    uint64_t n = hp->n_ctx_train;
    char key[128];
    uint32_t orig = 0;
    snprintf(key, sizeof(key), "%s.rope.scaling.original_context_length", hp->arch);
    if (hp->rope_scale > 1.0f && !hp->rope_llama3 && !hp->rope_longrope &&
        !ebb_gguf_get_u32(g, key, &orig) && orig) {
        double ext = (double)orig * (double)hp->rope_scale;
        if (ext > (double)n)
            n = ext > (double)UINT32_MAX ? UINT32_MAX : (uint64_t)ext;
    }
    return (uint32_t)n;
}

/* The default: the trained context capped at EBB_MODEL_DEFAULT_CTX_CAP and so that the KV
 * cache of all slots (fp16 on the OpenCL engine, fp32 on the reference: counted as 4 bytes)
 * takes at most half of the memory the host can give without swapping (MemAvailable, or the
 * cgroup's limit when lower). Where no probe answers, only the fixed cap applies. Never below
 * 256 tokens: a smaller context is a configuration error better reported by the allocation. */
static void default_ctx(const struct ebb__hparams *hp, uint32_t n_seq, struct ebb_model_ctx *c)
{
    uint32_t n = hp->n_ctx_train;
    if (n > EBB_MODEL_DEFAULT_CTX_CAP) {
        n = EBB_MODEL_DEFAULT_CTX_CAP;
        c->capped_default = true;
    }
    uint64_t avail;
    if (ebb_memprobe_host_available(&avail)) {
        uint64_t per_tok = (uint64_t)hp->n_layer * 2 * hp->n_head_kv * hp->head_dim * 4 * n_seq;
        uint64_t fit = per_tok ? avail / 2 / per_tok : n;
        if (fit < n) {
            n = fit < 256 ? 256 : (uint32_t)(fit - fit % 256);
            c->capped_memory = true;
        }
    }
    c->n_ctx = n;
}

void ebb__model_ctx_choose(const struct ebb_gguf *g, const struct ebb__hparams *hp, uint32_t asked,
                           uint32_t n_seq, bool cap_trained, struct ebb_model_ctx *c)
{
    memset(c, 0, sizeof(*c));
    c->trained = hp->n_ctx_train;
    c->limit = rope_reach(g, hp);
    c->asked = asked;
    if (!asked) {
        default_ctx(hp, n_seq ? n_seq : 1, c);
    } else if (asked <= c->limit) {
        c->n_ctx = asked;
    } else if (cap_trained) {
        c->n_ctx = c->limit;
        c->capped_trained = true;
    } else {
        c->n_ctx = asked;
        c->over_trained = true;
    }
}

ebb_err ebb_model_ctx_choose(const struct ebb_gguf *g, uint32_t asked, uint32_t n_seq,
                             bool cap_trained, struct ebb_model_ctx *out, struct ebb_diag *diag)
{
    const struct ebb__arch *a = NULL;
    struct ebb__hparams hp;
    ebb_err rc = ebb__arch_read_hparams(g, &a, &hp, diag);
    if (rc)
        return rc;
    ebb__model_ctx_choose(g, &hp, asked, n_seq, cap_trained, out);
    return EBB_OK;
}

size_t ebb_model_ctx_describe(const struct ebb_model_ctx *c, char *buf, size_t n)
{
    char trained[80];
    if (c->limit > c->trained)
        snprintf(trained, sizeof(trained), "the %u its rope scaling covers (trained %u)", c->limit,
                 c->trained);
    else
        snprintf(trained, sizeof(trained), "the trained %u", c->trained);
    int k;
    char cap[32] = "";
    if (c->capped_default)
        snprintf(cap, sizeof(cap), ", capped at %u", (unsigned)EBB_MODEL_DEFAULT_CTX_CAP);
    if (!c->asked)
        k = snprintf(buf, n, "ctx 0: %s%s%s", trained, cap,
                     c->capped_memory ? ", capped so that the KV cache takes at most half of "
                                        "the available memory"
                                      : "");
    else if (c->capped_trained)
        k = snprintf(buf, n, "asked %u, capped at %s; ctx_over_trained allows more", c->asked,
                     trained);
    else if (c->over_trained)
        k = snprintf(buf, n, "asked %u, past %s, allowed by ctx_over_trained", c->asked, trained);
    else
        k = snprintf(buf, n, "asked %u, within %s", c->asked, trained);
    size_t len = k < 0 ? 0 : (size_t)k;
    if (c->planned && len < n) {
        k = snprintf(buf + len, n - len, "; %u after the layer streamer's memory plan", c->n_ctx);
        len += k < 0 ? 0 : (size_t)k;
    }
    return len;
}

/* The physical cores of this machine (distinct package and core ids of the online CPUs), or
 * the online CPUs when sysfs does not say. */
int ebb__model_physical_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    enum { MAX_CPUS = 1024 };
    static uint32_t seen[MAX_CPUS];
    int n_seen = 0;
    for (long c = 0; c < n && c < MAX_CPUS; c++) {
        char path[128];
        unsigned pkg = 0, core = 0;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id",
                 c);
        FILE *f = fopen(path, "r");
        bool ok = f && fscanf(f, "%u", &pkg) == 1;
        if (f)
            fclose(f);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%ld/topology/core_id", c);
        f = fopen(path, "r");
        ok = ok && f && fscanf(f, "%u", &core) == 1;
        if (f)
            fclose(f);
        if (!ok)
            return n > 0 ? (int)n : 1;
        uint32_t id = pkg << 16 | (core & 0xffff);
        bool dup = false;
        for (int i = 0; i < n_seen && !dup; i++)
            dup = seen[i] == id;
        if (!dup)
            seen[n_seen++] = id;
    }
    return n_seen > 0 ? n_seen : 1;
}
