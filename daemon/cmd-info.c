/* `ebb info MODEL [--json]`: the facts of a GGUF model, read generically from its metadata
 * (`<arch>.`-prefixed keys) and its tensor table. */
#include "cmds.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/defaults/defaults.h"
#include "cl/cl-knobs.h"
#include "cl/cl.h"
#include "daemon/config.h"
#include "gguf/gguf.h"
#include "model/model.h"

#define MAX_LAYERS (1u << 20) /* "blk.N." with a larger N is not counted as a layer */
#define N_TYPES 64            /* histogram slots; ggml type ids are below this */

/* An integer fact that may be absent, or stored per layer as an array (min and max then). */
struct ufact {
    bool present;
    uint64_t min, max;
};

struct facts {
    char arch[64];
    char name[256];
    char tok_model[64];
    char tok_pre[64];
    bool has_name, has_tok_model, has_tok_pre, chat_template;
    uint64_t n_params;
    struct ufact n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx, n_vocab;
    bool has_rope_base;
    float rope_base;
    uint64_t non_layer_bytes, layer_min, layer_max, total_bytes;
    uint64_t n_layers_seen; /* distinct blk.N with tensors */
    uint64_t type_count[N_TYPES], type_bytes[N_TYPES];
    uint64_t other_type_count; /* ids >= N_TYPES (cannot happen for files the reader accepts) */
    /* The context ebb serve would give each slot under the configuration (ctx, parallel,
     * ctx_over_trained) on this host; has_ctx is false for a file no family runs. */
    bool has_ctx;
    struct ebb_model_ctx ctx;
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ebb info [--json] [--config FILE] MODEL\n"
        "       ebb info --devices [--json]   (OpenCL platforms and devices)\n"
        "       ebb info --knobs [--device SPEC] [--markdown]   (the EBB_CL_* tuning knobs)\n"
        "       ebb info --memory [--device SPEC] [--json]   (probes, notifications)\n"
        "\n"
        "Describe a GGUF model: architecture, parameter count, layers, embedding size,\n"
        "heads and KV heads, head dimension, FFN size, context length, rope base, vocabulary\n"
        "and tokenizer, chat template, bytes outside and inside the layers, a histogram of\n"
        "tensor types, file size and GGUF version. The whole file is validated first; a\n"
        "malformed file gives exit status 1 and a message naming the problem.\n"
        "\n"
        "Also the context per slot ebb serve would choose on this host under the\n"
        "configuration's ctx, parallel and ctx_over_trained, and why (\"context chosen\"),\n"
        "and the generation defaults ebb serve and ebb run use with this model for the\n"
        "sampling fields a request does not send, and where each comes from: gguf (the\n"
        "model's general.sampling.* keys), config (the [generation] section of the config\n"
        "file, or EBB_TEMPERATURE, ...) or builtin.\n"
        "\n"
        "options:\n"
        "  --json      print one JSON object instead of text\n"
        "  --config FILE  the config file for the context and the generation defaults\n"
        "              (default as for ebb serve: $EBB_CONFIG, ~/.config/ebb/ebb.conf,\n"
        "              /etc/ebb/ebb.conf)\n"
        "  --devices   list the OpenCL platforms and devices instead of describing a model\n"
        "  --knobs     list the EBB_CL_* tuning knobs with their values for the device (--device\n"
        "              SPEC as for ebb serve, default auto) and where each came from; with\n"
        "              --markdown, docs/TUNING.md (the table, no device)\n"
        "  --memory    what the layer streamer's memory probes see: host total and available,\n"
        "              the memory cgroup (v1 or v2, its path, the limit that binds, usage,\n"
        "              inactive file), PSI memory pressure, the device's memory (--device SPEC,\n"
        "              default auto; none for no OpenCL) and what a plan would take as available\n"
        "  -h, --help  show this help\n"
        "\n"
        "exit status: 0 success, 1 unreadable or malformed model or config, 2 usage error\n");
}

/* Copies s into buf as valid, printable UTF-8: control bytes and bytes that do not start a valid
 * UTF-8 sequence become '?'. Truncates (at a character boundary) to fit. */
static void sanitize(const char *s, uint64_t n, char *buf, size_t cap)
{
    size_t o = 0;
    uint64_t i = 0;
    while (i < n && o + 1 < cap) {
        unsigned char c = (unsigned char)s[i];
        size_t len = 0;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c >= 0x20 && c < 0x7f)
            len = 1;
        else if (c >= 0xc2 && c <= 0xdf)
            len = 2;
        else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            lo = c == 0xe0 ? 0xa0 : 0x80;
            hi = c == 0xed ? 0x9f : 0xbf;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            lo = c == 0xf0 ? 0x90 : 0x80;
            hi = c == 0xf4 ? 0x8f : 0xbf;
        }
        bool ok = len > 0 && len <= n - i;
        for (size_t k = 1; ok && k < len; k++) {
            unsigned char cc = (unsigned char)s[i + k];
            ok = k == 1 ? (cc >= lo && cc <= hi) : (cc >= 0x80 && cc <= 0xbf);
        }
        if (!ok) {
            buf[o++] = '?';
            i++;
            continue;
        }
        if (o + len + 1 > cap)
            break;
        memcpy(buf + o, s + i, len);
        o += len;
        i += len;
    }
    buf[o] = '\0';
}

static bool get_text(const struct ebb_gguf *g, const char *key, char *buf, size_t cap)
{
    struct ebb_str s;
    if (ebb_gguf_get_str(g, key, &s))
        return false;
    sanitize(s.p, s.n, buf, cap);
    return true;
}

/* Reads `<arch>.<suffix>` as a non-negative integer or an array of them. */
static struct ufact get_ufact(const struct ebb_gguf *g, const char *arch, const char *suffix)
{
    struct ufact f = {0};
    char key[160];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    int64_t i = ebb_gguf_find_kv(g, key);
    uint64_t v;
    struct ebb_gguf_arr a;
    if (i < 0)
        return f;
    if (!ebb_gguf_kv_u64(g, (uint64_t)i, &v)) {
        f = (struct ufact){true, v, v};
        return f;
    }
    if (ebb_gguf_kv_arr(g, (uint64_t)i, &a) || a.n == 0)
        return f;
    for (uint64_t k = 0; k < a.n; k++) {
        int64_t e;
        if (ebb_gguf_arr_i64(&a, k, &e) || e < 0)
            return (struct ufact){0};
        if (!f.present || (uint64_t)e < f.min)
            f.min = (uint64_t)e;
        if (!f.present || (uint64_t)e > f.max)
            f.max = (uint64_t)e;
        f.present = true;
    }
    return f;
}

/* Layer index of a tensor named "blk.N.<rest>", or -1. */
static int64_t layer_of(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    const char *p = name + 4;
    uint64_t n = 0;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9') {
        n = n * 10 + (uint64_t)(*p++ - '0');
        if (n >= MAX_LAYERS)
            return -1;
    }
    return *p == '.' ? (int64_t)n : -1;
}

static int gather(const struct ebb_gguf *g, struct facts *f)
{
    memset(f, 0, sizeof(*f));
    if (!get_text(g, "general.architecture", f->arch, sizeof(f->arch)))
        snprintf(f->arch, sizeof(f->arch), "unknown");
    f->has_name = get_text(g, "general.name", f->name, sizeof(f->name));
    f->has_tok_model = get_text(g, "tokenizer.ggml.model", f->tok_model, sizeof(f->tok_model));
    f->has_tok_pre = get_text(g, "tokenizer.ggml.pre", f->tok_pre, sizeof(f->tok_pre));
    f->chat_template = ebb_gguf_find_kv(g, "tokenizer.chat_template") >= 0;

    f->n_layer = get_ufact(g, f->arch, "block_count");
    f->n_embd = get_ufact(g, f->arch, "embedding_length");
    f->n_head = get_ufact(g, f->arch, "attention.head_count");
    f->n_head_kv = get_ufact(g, f->arch, "attention.head_count_kv");
    f->head_dim = get_ufact(g, f->arch, "attention.key_length");
    if (!f->head_dim.present && f->n_embd.present && f->n_head.present &&
        f->n_head.min == f->n_head.max && f->n_head.min && f->n_embd.min % f->n_head.min == 0) {
        uint64_t d = f->n_embd.min / f->n_head.min;
        f->head_dim = (struct ufact){true, d, d};
    }
    f->n_ff = get_ufact(g, f->arch, "feed_forward_length");
    f->n_ctx = get_ufact(g, f->arch, "context_length");
    char key[160];
    snprintf(key, sizeof(key), "%s.rope.freq_base", f->arch);
    f->has_rope_base = ebb_gguf_get_f32(g, key, &f->rope_base) == EBB_OK;
    struct ebb_gguf_arr toks;
    if (!ebb_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks))
        f->n_vocab = (struct ufact){true, toks.n, toks.n};
    else
        f->n_vocab = get_ufact(g, f->arch, "vocab_size");

    uint64_t nt = ebb_gguf_n_tensors(g);
    int64_t max_layer = -1;
    for (uint64_t i = 0; i < nt; i++) {
        int64_t l = layer_of(ebb_gguf_tensor_at(g, i)->name);
        if (l > max_layer)
            max_layer = l;
    }
    uint64_t *per_layer = NULL;
    if (max_layer >= 0 && !(per_layer = calloc((size_t)max_layer + 1, sizeof(*per_layer))))
        return -1;
    for (uint64_t i = 0; i < nt; i++) {
        const struct ebb_gguf_tensor *t = ebb_gguf_tensor_at(g, i);
        int64_t l = layer_of(t->name);
        f->n_params += t->n_elements;
        f->total_bytes += t->size;
        if (l >= 0)
            per_layer[l] += t->size;
        else
            f->non_layer_bytes += t->size;
        if (t->type < N_TYPES) {
            f->type_count[t->type]++;
            f->type_bytes[t->type] += t->size;
        } else {
            f->other_type_count++;
        }
    }
    for (int64_t l = 0; l <= max_layer; l++) {
        if (!per_layer[l])
            continue;
        if (!f->n_layers_seen || per_layer[l] < f->layer_min)
            f->layer_min = per_layer[l];
        if (!f->n_layers_seen || per_layer[l] > f->layer_max)
            f->layer_max = per_layer[l];
        f->n_layers_seen++;
    }
    free(per_layer);
    return 0;
}

/* "134.5M" style. */
static void human(uint64_t n, char *buf, size_t cap)
{
    if (n >= 1000000000ull)
        snprintf(buf, cap, "%.2fB", (double)n / 1e9);
    else if (n >= 1000000ull)
        snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else if (n >= 1000ull)
        snprintf(buf, cap, "%.1fK", (double)n / 1e3);
    else
        snprintf(buf, cap, "%" PRIu64, n);
}

static void print_ufact(FILE *o, const char *label, struct ufact f)
{
    fprintf(o, "%-18s", label);
    if (!f.present)
        fprintf(o, "-\n");
    else if (f.min == f.max)
        fprintf(o, "%" PRIu64 "\n", f.min);
    else
        fprintf(o, "%" PRIu64 "..%" PRIu64 " (per layer)\n", f.min, f.max);
}

/* The global (unwindowed) layers' indices, "5, 11, 17", when some layers are local. */
static void global_layers(const struct ebb_gguf *g, const struct ebb_model_facts *mf, char *buf,
                          size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (uint32_t l = 0; l < mf->n_layer; l++)
        if (!ebb_model_layer_is_local(g, l)) {
            if (n + 20 >= cap) { /* room for ", ..." */
                snprintf(buf + n, cap - n, ", ...");
                return;
            }
            int w = snprintf(buf + n, cap - n, "%s%" PRIu32, n ? ", " : "", l);
            n += w > 0 ? (size_t)w : 0;
        }
}

/* The facts of ebb_model_facts as text lines: layer types, experts, rope scaling. */
static void print_family_facts(FILE *o, const struct ebb_gguf *g)
{
    struct ebb_model_facts mf;
    struct ebb_diag d = {{0}};
    if (ebb_model_facts(g, &mf, &d))
        return;
    char loc[96] = "", glob[160] = "", gl[128];
    if (mf.n_local)
        snprintf(loc, sizeof(loc), "%" PRIu32 " local (window %" PRIu32 ", rope base %g)",
                 mf.n_local, mf.window, (double)mf.rope_base_local);
    if (mf.n_local && mf.n_local < mf.n_layer) {
        global_layers(g, &mf, gl, sizeof(gl));
        snprintf(glob, sizeof(glob), ", %" PRIu32 " global (layers %s)", mf.n_layer - mf.n_local,
                 gl);
    } else if (!mf.n_local) {
        snprintf(glob, sizeof(glob), "%" PRIu32 " global", mf.n_layer);
    }
    fprintf(o, "%-18s%s%s\n", "layer types:", loc, glob);
    if (mf.n_expert)
        fprintf(o, "%-18s%" PRIu32 " of %" PRIu32 " per token (width %" PRIu32 ")\n",
                "experts:", mf.n_expert_used, mf.n_expert, mf.n_ff_exp);
    if (!strcmp(mf.rope_scaling, "llama3"))
        fprintf(o, "%-18sllama3 x%g (original context %" PRIu32 ")\n",
                "rope scaling:", (double)mf.rope_factor, mf.rope_orig_ctx);
    else if (!strcmp(mf.rope_scaling, "linear"))
        fprintf(o, "%-18slinear x%g\n", "rope scaling:", (double)mf.rope_factor);
    else if (!strcmp(mf.rope_scaling, "longrope"))
        fprintf(o,
                "%-18slongrope (short factors up to context %" PRIu32
                ", long above; attention factor %.4g)\n",
                "rope scaling:", mf.rope_orig_ctx, (double)mf.attn_factor);
    else if (!strcmp(mf.rope_scaling, "freqs"))
        fprintf(o, "%-18sfrequency divisors (rope_freqs.weight)\n", "rope scaling:");
    else
        fprintf(o, "%-18snone\n", "rope scaling:");
}

/* The same as JSON: {"layer_types": {...}, "experts": {...} | null, "rope_scaling": {...}}
 * members added to the family object. */
static void j_family_facts(const struct ebb_gguf *g, json_t *fam)
{
    struct ebb_model_facts mf;
    struct ebb_diag d = {{0}};
    if (!fam || ebb_model_facts(g, &mf, &d))
        return;
    json_t *glob = json_array();
    for (uint32_t l = 0; l < mf.n_layer && glob; l++)
        if (!ebb_model_layer_is_local(g, l))
            json_array_append_new(glob, json_integer(l));
    json_object_set_new(fam, "layer_types",
                        json_pack("{s:I,s:I,s:I,s:f,s:f,s:o}", "local", (json_int_t)mf.n_local,
                                  "global", (json_int_t)(mf.n_layer - mf.n_local), "window",
                                  (json_int_t)mf.window, "rope_base", (double)mf.rope_base,
                                  "rope_base_local", (double)mf.rope_base_local, "global_layers",
                                  glob ? glob : json_null()));
    json_object_set_new(fam, "experts",
                        mf.n_expert ? json_pack("{s:I,s:I,s:I}", "count", (json_int_t)mf.n_expert,
                                                "used", (json_int_t)mf.n_expert_used, "width",
                                                (json_int_t)mf.n_ff_exp)
                                    : json_null());
    json_object_set_new(fam, "rope_scaling",
                        json_pack("{s:s,s:f,s:I,s:f}", "type", mf.rope_scaling, "factor",
                                  (double)mf.rope_factor, "original_context",
                                  (json_int_t)mf.rope_orig_ctx, "attn_factor",
                                  (double)mf.attn_factor));
}

/* {"features": "...", "engines": "...", "layer_types", "experts", "rope_scaling"}, or
 * {"error": "..."} for a file no family runs. */
static json_t *j_family(const struct ebb_gguf *g)
{
    char fam[512], eng[512];
    struct ebb_diag d = {{0}};
    if (ebb_model_describe(g, fam, sizeof(fam), eng, sizeof(eng), &d))
        return json_pack("{s:s}", "error", d.msg);
    json_t *j = json_pack("{s:s,s:s}", "features", fam, "engines", eng);
    j_family_facts(g, j);
    return j;
}

static void print_text(FILE *o, const char *path, const struct ebb_gguf *g, const struct facts *f)
{
    char h[32];
    char spath[512];
    sanitize(path, strlen(path), spath, sizeof(spath));
    fprintf(o, "%-18s%s\n", "file:", spath);
    fprintf(o,
            "%-18s%" PRIu64 " bytes, GGUF v%" PRIu32 ", alignment %" PRIu32 ", data at %" PRIu64
            "\n",
            "format:", ebb_gguf_file_size(g), ebb_gguf_version(g), ebb_gguf_alignment(g),
            ebb_gguf_data_offset(g));
    fprintf(o, "%-18s%s\n", "architecture:", f->arch);
    fprintf(o, "%-18s%s\n", "name:", f->has_name ? f->name : "-");
    /* The family's description (runtime/model/arch-*.c) and the backends that run it. */
    char fam[512], eng[512];
    struct ebb_diag d = {{0}};
    if (ebb_model_describe(g, fam, sizeof(fam), eng, sizeof(eng), &d)) {
        fprintf(o, "%-18s%s\n", "family:", d.msg);
    } else {
        fprintf(o, "%-18s%s\n", "family:", fam);
        fprintf(o, "%-18s%s\n", "engines:", eng);
        print_family_facts(o, g);
    }
    human(f->n_params, h, sizeof(h));
    fprintf(o, "%-18s%" PRIu64 " (%s)\n", "parameters:", f->n_params, h);
    print_ufact(o, "layers:", f->n_layer);
    print_ufact(o, "embedding:", f->n_embd);
    print_ufact(o, "heads:", f->n_head);
    print_ufact(o, "kv heads:", f->n_head_kv);
    print_ufact(o, "head dim:", f->head_dim);
    print_ufact(o, "ffn:", f->n_ff);
    print_ufact(o, "context:", f->n_ctx);
    if (f->has_ctx) {
        char why[256];
        ebb_model_ctx_describe(&f->ctx, why, sizeof(why));
        fprintf(o, "%-18s%u per slot (%s)\n", "context chosen:", f->ctx.n_ctx, why);
    }
    if (f->has_rope_base)
        fprintf(o, "%-18s%g\n", "rope base:", (double)f->rope_base);
    else
        fprintf(o, "%-18s-\n", "rope base:");
    print_ufact(o, "vocab:", f->n_vocab);
    fprintf(o, "%-18s%s (pre: %s)\n", "tokenizer:", f->has_tok_model ? f->tok_model : "-",
            f->has_tok_pre ? f->tok_pre : "-");
    fprintf(o, "%-18s%s\n", "chat template:", f->chat_template ? "yes" : "no");
    fprintf(o, "%-18s%" PRIu64 " (%" PRIu64 " metadata keys)\n", "tensors:", ebb_gguf_n_tensors(g),
            ebb_gguf_n_kv(g));
    fprintf(o, "%-18s%" PRIu64 "\n", "tensor bytes:", f->total_bytes);
    fprintf(o, "%-18s%" PRIu64 "\n", "non-layer bytes:", f->non_layer_bytes);
    if (!f->n_layers_seen)
        fprintf(o, "%-18s-\n", "layer bytes:");
    else if (f->layer_min == f->layer_max)
        fprintf(o, "%-18s%" PRIu64 " each (%" PRIu64 " layers)\n", "layer bytes:", f->layer_min,
                f->n_layers_seen);
    else
        fprintf(o, "%-18s%" PRIu64 "..%" PRIu64 " (%" PRIu64 " layers)\n",
                "layer bytes:", f->layer_min, f->layer_max, f->n_layers_seen);
    fprintf(o, "types:\n");
    for (uint32_t t = 0; t < N_TYPES; t++)
        if (f->type_count[t])
            fprintf(o, "  %-6s %6" PRIu64 " tensors %12" PRIu64 " bytes\n", ebb_ggml_type_name(t),
                    f->type_count[t], f->type_bytes[t]);
}

/* The generation defaults of the model under the configuration, with their sources. */
static void print_defaults(FILE *o, const struct ebb_gen_defaults *gd)
{
    fprintf(o, "generation defaults (for fields a request does not send)%s:\n",
            gd->model_sampling ? "" : ", model_sampling = false");
    for (int i = 0; i < EBB_DEF_N_FIELDS; i++) {
        enum ebb_defaults_field f = (enum ebb_defaults_field)i;
        char v[32];
        ebb_defaults_format(&gd->v, f, v, sizeof(v));
        fprintf(o, "  %-18s %-8s %s\n", ebb_defaults_field_name(f), v,
                ebb_defaults_source_name(gd->src[f]));
    }
    for (size_t i = 0; i < gd->n_notes; i++)
        fprintf(o, "  note: %s\n", gd->notes[i]);
}

static json_t *j_ufact(struct ufact f)
{
    if (!f.present)
        return json_null();
    if (f.min == f.max)
        return json_integer((json_int_t)f.min);
    return json_pack("{s:I,s:I}", "min", (json_int_t)f.min, "max", (json_int_t)f.max);
}

static json_t *j_text(bool has, const char *s)
{
    return has ? json_string(s) : json_null();
}

/* The context choice (ebb_model_ctx_choose) as {"trained", "limit", "asked", "chosen",
 * "capped", "why"}; null for a file no family runs. capped is "default", "memory", "trained" or
 * null; over_trained says a longer context than trained was kept. */
static json_t *j_ctx(const struct facts *f)
{
    if (!f->has_ctx)
        return json_null();
    const struct ebb_model_ctx *c = &f->ctx;
    char why[256];
    ebb_model_ctx_describe(c, why, sizeof(why));
    const char *capped = c->capped_trained   ? "trained"
                         : c->capped_memory  ? "memory"
                         : c->capped_default ? "default"
                                             : NULL;
    return json_pack("{s:I,s:I,s:I,s:I,s:o,s:b,s:s}", "trained", (json_int_t)c->trained, "limit",
                     (json_int_t)c->limit, "asked", (json_int_t)c->asked, "chosen",
                     (json_int_t)c->n_ctx, "capped", capped ? json_string(capped) : json_null(),
                     "over_trained", c->over_trained, "why", why);
}

static int print_json(FILE *o, const char *path, const struct ebb_gguf *g, const struct facts *f,
                      const struct ebb_gen_defaults *gd)
{
    char spath[1024];
    sanitize(path, strlen(path), spath, sizeof(spath));
    json_t *types = json_object();
    for (uint32_t t = 0; types && t < N_TYPES; t++)
        if (f->type_count[t])
            json_object_set_new(types, ebb_ggml_type_name(t),
                                json_pack("{s:I,s:I}", "count", (json_int_t)f->type_count[t],
                                          "bytes", (json_int_t)f->type_bytes[t]));
    json_t *layer = f->n_layers_seen
                        ? json_pack("{s:I,s:I,s:I}", "count", (json_int_t)f->n_layers_seen, "min",
                                    (json_int_t)f->layer_min, "max", (json_int_t)f->layer_max)
                        : json_null();
    json_t *root = json_object();
    if (!root)
        return -1;
    struct {
        const char *k;
        json_t *v;
    } fields[] = {
        {"file", json_string(spath)},
        {"file_size", json_integer((json_int_t)ebb_gguf_file_size(g))},
        {"gguf_version", json_integer(ebb_gguf_version(g))},
        {"alignment", json_integer(ebb_gguf_alignment(g))},
        {"data_offset", json_integer((json_int_t)ebb_gguf_data_offset(g))},
        {"n_kv", json_integer((json_int_t)ebb_gguf_n_kv(g))},
        {"n_tensors", json_integer((json_int_t)ebb_gguf_n_tensors(g))},
        {"architecture", json_string(f->arch)},
        {"name", j_text(f->has_name, f->name)},
        {"family", j_family(g)},
        {"n_params", json_integer((json_int_t)f->n_params)},
        {"n_layer", j_ufact(f->n_layer)},
        {"n_embd", j_ufact(f->n_embd)},
        {"n_head", j_ufact(f->n_head)},
        {"n_head_kv", j_ufact(f->n_head_kv)},
        {"head_dim", j_ufact(f->head_dim)},
        {"n_ff", j_ufact(f->n_ff)},
        {"n_ctx", j_ufact(f->n_ctx)},
        {"context", j_ctx(f)},
        {"rope_freq_base", f->has_rope_base ? json_real(f->rope_base) : json_null()},
        {"n_vocab", j_ufact(f->n_vocab)},
        {"tokenizer", json_pack("{s:o,s:o}", "model", j_text(f->has_tok_model, f->tok_model), "pre",
                                j_text(f->has_tok_pre, f->tok_pre))},
        {"chat_template", json_boolean(f->chat_template)},
        {"tensor_bytes", json_integer((json_int_t)f->total_bytes)},
        {"non_layer_bytes", json_integer((json_int_t)f->non_layer_bytes)},
        {"layer_bytes", layer},
        {"types", types},
    };
    bool ok = true;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (!fields[i].v || json_object_set_new(root, fields[i].k, fields[i].v) != 0)
            ok = false;
    /* generation_defaults, model_sampling, model_sampling_notes: as /v1/models's ebb object */
    json_t *defaults = ebb_defaults_json(gd);
    if (!defaults || json_object_update(root, defaults) != 0)
        ok = false;
    json_decref(defaults);
    if (!ok) {
        json_decref(root);
        return -1;
    }
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(root);
    if (!s)
        return -1;
    fprintf(o, "%s\n", s);
    free(s);
    return 0;
}

/* `ebb info --knobs`: the knob table for a device, or as docs/TUNING.md. */
static int knobs_info(const char *device, bool markdown)
{
    if (markdown) {
        ebb_cl_knobs_markdown(stdout);
        return 0;
    }
    struct ebb_cl *cl = NULL;
    struct ebb_diag d = {{0}};
    /* opening the device checks the knobs set in the environment: a bad one is the error */
    if (ebb_cl_open(device, &cl, &d)) {
        fprintf(stderr, "ebb info: %s\n", d.msg);
        return 1;
    }
    ebb_cl_knobs_print(stdout, &cl->info);
    ebb_cl_close(cl);
    return 0;
}

int ebb_cmd_info(int argc, char **argv)
{
    const char *path = NULL, *config = NULL;
    const char *device = NULL;
    bool json = false, devices = false, knobs = false, markdown = false, memory = false;
    /* `ebb info --devices`: the OpenCL device list, from runtime/cl. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--devices")) {
            devices = true;
        } else if (!strcmp(argv[i], "--knobs")) {
            knobs = true;
        } else if (!strcmp(argv[i], "--memory")) {
            memory = true;
        } else if (!strcmp(argv[i], "--markdown")) {
            markdown = true;
        } else if (!strcmp(argv[i], "--device")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ebb info: --device needs a device\n");
                return 2;
            }
            device = argv[++i];
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ebb info: --config needs a file\n");
                return 2;
            }
            config = argv[++i];
        } else if (!strcmp(argv[i], "--")) {
            if (i + 2 != argc || path) {
                usage(stderr);
                return 2;
            }
            path = argv[i + 1];
            break;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "ebb info: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "ebb info: more than one model given\n");
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (devices)
        return ebb_cl_print_devices(stdout, json) == EBB_OK ? 0 : 1;
    if (knobs)
        return knobs_info(device, markdown);
    if (memory && !markdown && !path)
        return ebb_cmd_info_memory(device, json);
    if (memory) {
        fprintf(stderr, "ebb info: --memory takes no model and no --markdown\n");
        return 2;
    }
    if (markdown || device) {
        fprintf(stderr, "ebb info: %s goes with --knobs%s\n", markdown ? "--markdown" : "--device",
                markdown ? "" : " or --memory");
        return 2;
    }
    if (!path) {
        fprintf(stderr, "ebb info: no model given\n");
        usage(stderr);
        return 2;
    }

    struct ebb_diag diag = {{0}};
    struct ebb_gguf *g = NULL;
    struct facts *f = NULL;
    int status = 1;
    struct ebb_gen_defaults gd;
    /* The configuration as ebb serve reads it (file, EBB_* variables), for its [generation]. */
    struct ebb_config cfg;
    ebb_err rc = ebb_config_init(&cfg);
    if (rc || (rc = ebb_config_build(&cfg, config, NULL, 0, &diag))) {
        fprintf(stderr, "ebb info: %s\n", diag.msg[0] ? diag.msg : ebb_err_str(rc));
        goto out;
    }
    rc = ebb_gguf_open(path, &g, &diag);
    if (rc) {
        fprintf(stderr, "ebb info: %s: %s\n", path, diag.msg[0] ? diag.msg : ebb_err_str(rc));
        goto out;
    }
    if (!(f = malloc(sizeof(*f))) || gather(g, f) != 0) {
        fprintf(stderr, "ebb info: %s: out of memory\n", path);
        goto out;
    }
    {
        struct ebb_diag d2 = {{0}};
        f->has_ctx = ebb_model_ctx_choose(g, cfg.ctx, cfg.parallel, !cfg.ctx_over_trained, &f->ctx,
                                          &d2) == EBB_OK;
    }
    ebb_defaults_resolve(cfg.model_sampling ? g : NULL, &cfg.generation, &gd);
    if (json ? print_json(stdout, path, g, f, &gd) != 0
             : (print_text(stdout, path, g, f), print_defaults(stdout, &gd), 0)) {
        fprintf(stderr, "ebb info: %s: cannot build JSON\n", path);
        goto out;
    }
    status = fflush(stdout) == 0 ? 0 : 1;
out:
    free(f);
    ebb_gguf_close(g);
    ebb_config_fini(&cfg);
    return status;
}
