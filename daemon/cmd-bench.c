/* ebb bench: prefill and decode speed of a model on a synthetic prompt, with the layer
 * streamer's figures (resident layers, streamed bytes per token, read throughput, prefetch
 * hits/misses/stall) and the peak RSS. Greedy decoding, so the generated ids are reproducible
 * and printed with --json (tests compare them across residencies). With -r N, a warm-up run and
 * N measured ones (median and spread); with -d N, N tokens of context first, then prefill and
 * decode both measured at that depth (llama-bench's pp/tg "@ dN"). Decode's bytes per token
 * (weights as the engine reads them, KV at that depth) give its achieved bandwidth; the OpenCL
 * engine's counters give kernels and host synchronisations per decoded token. With --batch N,
 * N slots then prefill and decode together through ebb_model_eval_batch (continuous batching's
 * aggregate speed, next to the single stream's). With --stages, the OpenCL engine's device time
 * of the measured runs by kernel and by stage (bench-stages.c). */
#include "cmds.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-stages.h"
#include "cl/cl.h"
#include "model/model.h"
#include "sched/sampler.h"
#include "sched/spec.h"
#include "stream-opts.h"

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: ebb bench -m MODEL [options]\n"
            "\n"
            "Evaluates a synthetic prompt, then decodes greedily, and prints prefill and decode\n"
            "tokens/s, decode's bytes per token and bandwidth, kernels and host syncs per\n"
            "decoded token (OpenCL), the layer streamer's figures and the peak RSS.\n"
            "\n"
            "  -m, --model MODEL       GGUF file (required)\n"
            "      --prompt-tokens N   prompt length (default 128)\n"
            "      --gen-tokens N      tokens to decode (default 64)\n"
            "      --device D          compute device: auto, cpu, cl, ... as ebb run\n"
            "                          --help says (default auto)\n"
            "      --ctx N             context length (default prompt + gen tokens; with\n"
            "                          --depth, depth + the larger of the two); one past the\n"
            "                          model's trained context is kept, with a warning (speed\n"
            "                          does not depend on it; ebb run and serve cap it)\n"
            "      --kv-type T         KV cache element type: f16 or q8_0 (default f16)\n"
            "      --prompt-file FILE  use this text (tokenized, BOS per the metadata) as the\n"
            "                          prompt instead of the synthetic one\n"
            "      --spec ngram        speculative decoding with n-gram drafts (greedy output\n"
            "                          unchanged); prints drafted/accepted\n"
            "      --draft-max K       with --spec: at most K drafts per pass (default 8)\n"
            "      --draft-fixed       with --spec: always K drafts (no adaptation)\n"
            "      --draft MODEL       with --spec: drafts from this model of the same tokenizer\n"
            "                          (greedy, resident on the same device)\n"
            "      --batch N           also decode N sequences together (N slots, one batched\n"
            "                          forward pass per step) and report the aggregate tok/s\n"
            "  -r, --repetitions N     a warm-up run, then N measured runs: median and spread\n"
            "                          (default: one run, no warm-up)\n"
            "  -d, --depth N           evaluate N tokens of context first, then measure prefill\n"
            "                          and decode each from position N (default: none; decode\n"
            "                          follows the prompt)\n"
            "      --stages            device time of the measured prefill and decode runs by\n"
            "                          stage: attention (attn_*, rope*), products (matvec*,\n"
            "                          matmul*, moe_*, quantize*), norms and activations,\n"
            "                          other, and the time outside kernels, each in ms and as\n"
            "                          a share of the run's wall time, with the costliest\n"
            "                          kernels (OpenCL queue timestamps; not with --device\n"
            "                          ref; the depth and warm-up runs are not counted;\n"
            "                          with --batch also the batch's decode steps, \"batch\")\n"
            "      --json              one JSON object on stdout\n"
            "%s"
            "  -h, --help              show this help\n",
            ebb_stream_opts_usage);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool parse_u(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
    char *end = NULL;
    unsigned long v = strtoul(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* --prompt-file: the file's text tokenized as `ebb run` does a raw prompt, into a malloc'd
 * array with room for extra more tokens. */
static ebb_err file_prompt(const struct ebb_model *m, const char *path, unsigned long extra,
                           int32_t **ids, unsigned long *n, struct ebb_diag *d)
{
    ebb_err rc = EBB_OK;
    char *text = NULL;
    size_t len = 0, cap = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ebb_diag_set(d, EBB_ENOENT, "cannot open --prompt-file '%s'", path);
    for (;;) {
        if (len == cap) {
            char *t = cap < (1 << 20) ? realloc(text, cap = cap ? 2 * cap : 4096) : NULL;
            if (!t) {
                rc = ebb_diag_set(d, EBB_ERANGE, "--prompt-file '%s' is over 1 MiB", path);
                goto out;
            }
            text = t;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (!got)
            break;
    }
    size_t n_tok = 0, tcap = len + 8;
    if (!(*ids = malloc(sizeof(int32_t) * (tcap + extra)))) {
        rc = EBB_ENOMEM;
        goto out;
    }
    rc = ebb_tokenizer_encode(ebb_model_tokenizer(m), text, len, EBB_TOK_ADD_SPECIAL, *ids, tcap,
                              &n_tok);
    if (!rc && !n_tok)
        rc = ebb_diag_set(d, EBB_EINVAL, "--prompt-file '%s' gives no tokens", path);
    *n = n_tok;
out:
    free(text);
    fclose(f);
    return rc;
}

/* --spec ngram: greedy decoding through ebb_spec_decode; ids[0..n_prompt] hold the prompt and
 * the first generated token, the others follow. */
static ebb_err decode_spec(struct ebb_model *m, struct ebb_model *dm,
                           const struct ebb_spec_params *sp, int32_t *ids, unsigned long n_prompt,
                           unsigned long n_gen, struct ebb_spec_stats *st, struct ebb_diag *d)
{
    struct ebb_sampling gp;
    ebb_sampling_defaults(&gp);
    gp.temperature = 0;
    gp.seed = 1;
    struct ebb_sampler *smp = NULL;
    struct ebb_spec *s = NULL;
    ebb_err rc = ebb_sampler_new(&gp, ebb_model_n_vocab(m), &smp, d);
    if (!rc)
        rc = ebb_spec_new(sp, ebb_model_n_vocab(m), ebb_model_n_ctx(m), &s, d);
    if (!rc && dm)
        rc = ebb_spec_attach_model(s, dm, 0, d);
    if (rc)
        goto out;
    ebb_spec_push(s, ids, (uint32_t)n_prompt + 1);
    uint32_t pos = (uint32_t)n_prompt;
    for (unsigned long i = 1; i < n_gen;) {
        uint32_t n = 0;
        if ((rc = ebb_spec_decode(s, m, 0, smp, ids[n_prompt + i - 1], pos, (uint32_t)(n_gen - i),
                                  ids + n_prompt + i, &n, d)))
            goto out;
        i += n;
        pos += n;
    }
    ebb_spec_stats(s, st);
out:
    ebb_spec_free(s);
    ebb_sampler_free(smp);
    return rc;
}

static json_t *spec_json(const struct ebb_spec_stats *st, bool draft)
{
    double rate = st->drafted ? (double)st->accepted / (double)st->drafted : 0;
    return json_pack("{s:s, s:I, s:I, s:f, s:I, s:I, s:i, s:f}", "type", draft ? "draft" : "ngram",
                     "drafted", (json_int_t)st->drafted, "accepted", (json_int_t)st->accepted,
                     "acceptance", rate, "passes", (json_int_t)st->passes, "plain_passes",
                     (json_int_t)st->plain, "k", (int)st->k, "row_cost", st->row_cost);
}

/* The model and the buffers of the single-stream runs. */
struct bench {
    struct ebb_model *m, *dm;
    int32_t *ids; /* (n_prompt + n_gen) the prompt, then the generated tokens */
    float *lgs;   /* (n_gen) top logit of each generated token (exact comparisons in tests) */
    unsigned long n_prompt, n_gen;
    uint32_t depth;           /* -d: positions of context before the prompt (0: none) */
    uint32_t dpos;            /* position of the first decoded token */
    enum ebb_kv_type kv_type; /* --kv-type */
    bool spec;
    struct ebb_spec_params sp;
    struct ebb_spec_stats sst;
    struct ebb_model_counters dec;                 /* summed over the measured runs' decodes */
    uint64_t dec_ns;                               /* their wall time, summed */
    bool stages;                                   /* --stages: profile the measured runs */
    struct ebb_bench_stages st_pf, st_dec, st_bat; /* st_bat: --batch's decode steps */
};

/* One run: the prompt at position depth (timed), then n_gen - 1 greedy steps from position
 * dpos (timed), each fed the previous step's token. With counted, the decode's launches and
 * synchronisations are added to b->dec. */
static ebb_err run_once(struct bench *b, bool counted, double *prefill_ms, double *decode_ms,
                        struct ebb_diag *d)
{
    int32_t top;
    float top_logit;
    struct ebb_model_out out = {.top_k = 1, .top_ids = &top, .top_logits = &top_logit};
    bool prof = counted && b->stages;
    if (prof)
        ebb_cl_profile_begin();
    double t0 = now_ms();
    ebb_err rc = ebb_model_eval(b->m, 0, b->ids, (uint32_t)b->n_prompt, b->depth, &out, d);
    if (rc)
        return rc;
    *prefill_ms = now_ms() - t0;
    if (prof && ((rc = ebb_bench_stages_take(&b->st_pf, *prefill_ms, d))))
        return rc;
    b->ids[b->n_prompt] = top;
    b->lgs[0] = top_logit;
    struct ebb_model_counters c0, c1;
    ebb_model_counters(b->m, &c0);
    if (prof)
        ebb_cl_profile_begin();
    t0 = now_ms();
    if (b->spec &&
        (rc = decode_spec(b->m, b->dm, &b->sp, b->ids, b->n_prompt, b->n_gen, &b->sst, d)))
        return rc;
    for (unsigned long i = 1; i < b->n_gen && !b->spec; i++) {
        unsigned long at = b->n_prompt + i - 1;
        if ((rc = ebb_model_eval(b->m, 0, &b->ids[at], 1, b->dpos + (uint32_t)i - 1, &out, d)))
            return rc;
        b->ids[at + 1] = top;
        b->lgs[i] = top_logit;
    }
    *decode_ms = now_ms() - t0;
    if (prof && ((rc = ebb_bench_stages_take(&b->st_dec, *decode_ms, d))))
        return rc;
    ebb_model_counters(b->m, &c1);
    if (counted) {
        b->dec.launches += c1.launches - c0.launches;
        b->dec.syncs += c1.syncs - c0.syncs;
        b->dec.wait_ns += c1.wait_ns - c0.wait_ns;
        b->dec_ns += (uint64_t)(*decode_ms * 1e6);
    }
    return EBB_OK;
}

/* Median, extremes and sample standard deviation of n values (v is reordered). */
struct spread {
    double median, min, max, sd;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static struct spread spread_of(double *v, unsigned long n)
{
    struct spread s = {0};
    if (!n)
        return s;
    qsort(v, n, sizeof(*v), cmp_double);
    s.min = v[0];
    s.max = v[n - 1];
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    double mean = 0, ss = 0;
    for (unsigned long i = 0; i < n; i++)
        mean += v[i] / (double)n;
    for (unsigned long i = 0; i < n; i++)
        ss += (v[i] - mean) * (v[i] - mean);
    s.sd = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
    return s;
}

static json_t *spread_json(const struct spread *s)
{
    return json_pack("{s:f, s:f, s:f, s:f}", "median", s->median, "min", s->min, "max", s->max,
                     "stddev", s->sd);
}

/* The batched run's figures. */
struct batch_res {
    double prefill_ms, decode_ms;
    uint32_t same; /* of slot 0's tokens, equal to the single stream's */
};

/* --batch: n slots, each with the synthetic prompt shifted by its slot (slot 0's is the single
 * stream's), prefilled in one batch, then n_gen - 1 greedy steps of n rows each. single holds
 * the single stream's prompt and generated ids. */
static ebb_err bench_batch(struct ebb_model *m, uint32_t n, unsigned long n_prompt,
                           unsigned long n_gen, const int32_t *single, struct batch_res *res,
                           struct ebb_bench_stages *prof, struct ebb_diag *d)
{
    uint32_t V = ebb_model_n_vocab(m);
    ebb_err rc = EBB_ENOMEM;
    struct ebb_model_seq *parts = calloc(n, sizeof(*parts));
    struct ebb_model_out *outs = calloc(n, sizeof(*outs));
    int32_t *ids = malloc(sizeof(int32_t) * n * (n_prompt + n_gen));
    float *tl = malloc(sizeof(float) * n);
    if (!parts || !outs || !ids || !tl)
        goto out;
    for (uint32_t s = 0; s < n; s++) {
        int32_t *row = ids + (size_t)s * (n_prompt + n_gen);
        for (unsigned long i = 0; i < n_prompt; i++)
            row[i] = (int32_t)((1000 + i * 7919u + s * 104729u) % V);
        outs[s] =
            (struct ebb_model_out){.top_k = 1, .top_ids = &row[n_prompt], .top_logits = &tl[s]};
        parts[s] = (struct ebb_model_seq){
            .seq = s, .tokens = row, .n = (uint32_t)n_prompt, .pos = 0, .out = &outs[s]};
    }
    double t0 = now_ms();
    if ((rc = ebb_model_eval_batch(m, parts, n, d)))
        goto out;
    res->prefill_ms = now_ms() - t0;
    if (prof)
        ebb_cl_profile_begin();
    t0 = now_ms();
    for (unsigned long i = 1; i < n_gen; i++) {
        for (uint32_t s = 0; s < n; s++) {
            int32_t *row = ids + (size_t)s * (n_prompt + n_gen);
            uint32_t pos = (uint32_t)(n_prompt + i - 1);
            parts[s].tokens = &row[pos];
            parts[s].n = 1;
            parts[s].pos = pos;
            outs[s].top_ids = &row[pos + 1];
        }
        if ((rc = ebb_model_eval_batch(m, parts, n, d)))
            goto out;
    }
    res->decode_ms = now_ms() - t0;
    if (prof && (rc = ebb_bench_stages_take(prof, res->decode_ms, d)))
        goto out;
    res->same = 0;
    while (res->same < n_gen && ids[n_prompt + res->same] == single[n_prompt + res->same])
        res->same++;
out:
    free(parts);
    free(outs);
    free(ids);
    free(tl);
    return rc;
}

/* The measured figures, for the two reports. */
struct report {
    const char *path;
    double t_load;
    unsigned long reps;
    bool warm;             /* -r given: a warm-up run first (with -r 1 too) */
    struct spread pf, dec; /* tok/s over the runs */
    struct spread pf_ms, dec_ms;
    double *pf_runs, *dec_runs; /* (reps) tok/s of each run, in run order */
    uint64_t bytes_w, bytes_kv; /* per decoded token, averaged over the decode's positions */
    double gbps;                /* (bytes_w + bytes_kv) per token over the median token time */
    bool counted;               /* the backend counts launches and syncs */
    double launches, syncs;     /* per decoded token */
    double wait_us, host_us;    /* per decoded token: blocked in the syncs, the rest of the wall */
    unsigned long n_batch;
    struct batch_res br;
};

/* Decode's bytes per token, averaged over the positions it decoded at, and the bandwidth at
 * the median decode speed (not with --spec, whose passes verify several rows). */
static void decode_traffic(const struct bench *b, struct report *r)
{
    unsigned long steps = b->n_gen - 1;
    if (!steps || b->spec)
        return;
    uint64_t w = 0, kv = 0;
    for (unsigned long i = 0; i < steps; i++) {
        struct ebb_model_decode_bytes db;
        ebb_model_decode_bytes(b->m, b->dpos + (uint32_t)i, &db);
        w += db.weights;
        kv += db.kv;
    }
    r->bytes_w = w / steps;
    r->bytes_kv = kv / steps;
    r->gbps = (double)(r->bytes_w + r->bytes_kv) * r->dec.median / 1e9;
}

static void report_json(const struct bench *b, const struct report *r, json_t *st)
{
    const unsigned long n_gen = b->n_gen, n_prompt = b->n_prompt, n_batch = r->n_batch;
    double steps = n_gen > 1 ? (double)(n_gen - 1) : 1;
    json_t *jt = json_array(), *jl = json_array(), *jp = json_array(), *jd = json_array();
    for (unsigned long i = 0; i < n_gen; i++) {
        json_array_append_new(jt, json_integer(b->ids[n_prompt + i]));
        json_array_append_new(jl, json_real(b->lgs[i]));
    }
    for (unsigned long i = 0; i < r->reps; i++) {
        json_array_append_new(jp, json_real(r->pf_runs[i]));
        json_array_append_new(jd, json_real(r->dec_runs[i]));
    }
    json_t *j = json_pack(
        "{s:s, s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:o, s:I, s:b, s:I, s:I, s:o, "
        "s:o, s:o, s:o}",
        "model", r->path, "device", ebb_model_device_name(b->m), "prompt_tokens",
        (json_int_t)n_prompt, "gen_tokens", (json_int_t)n_gen, "n_ctx",
        (json_int_t)ebb_model_n_ctx(b->m), "load_ms", r->t_load, "prefill_ms", r->pf_ms.median,
        "prefill_tok_s", r->pf.median, "decode_ms", r->dec_ms.median, "decode_tok_s", r->dec.median,
        "peak_rss_bytes", (json_int_t)ebb_peak_rss(), "tokens", jt, "repetitions",
        (json_int_t)r->reps, "warmup", r->warm || b->depth, "depth", (json_int_t)b->depth,
        "decode_depth", (json_int_t)b->dpos, "prefill_tok_s_runs", jp, "decode_tok_s_runs", jd,
        "prefill_stats", spread_json(&r->pf), "decode_stats", spread_json(&r->dec));
    json_object_set_new(j, "kv_type", json_string(ebb_kv_type_name(b->kv_type)));
    if (n_gen > 1 && !b->spec)
        json_object_set_new(j, "decode_bytes",
                            json_pack("{s:I, s:I, s:I, s:f}", "weights", (json_int_t)r->bytes_w,
                                      "kv", (json_int_t)r->bytes_kv, "per_token",
                                      (json_int_t)(r->bytes_w + r->bytes_kv), "gb_s", r->gbps));
    if (r->counted && n_gen > 1)
        json_object_set_new(j, "decode_counters",
                            json_pack("{s:f, s:f, s:f, s:f}", "launches_per_token", r->launches,
                                      "syncs_per_token", r->syncs, "sync_wait_us_per_token",
                                      r->wait_us, "host_us_per_token", r->host_us));
    if (b->spec) { /* the verification rows give no top logit per token */
        json_decref(jl);
        json_object_set_new(j, "spec", spec_json(&b->sst, b->dm != NULL));
    } else {
        json_object_set_new(j, "top_logits", jl);
    }
    if (st)
        json_object_set(j, "stream", st);
    if (b->stages) {
        json_t *sj = ebb_bench_stages_json(&b->st_pf, &b->st_dec);
        if (b->st_bat.runs)
            json_object_set_new(sj, "batch", ebb_bench_stages_phase_json(&b->st_bat));
        json_object_set_new(j, "stages", sj);
    }
    char xj[2048];
    if (ebb_model_expert_cache_json(b->m, xj, sizeof(xj)))
        json_object_set_new(j, "expert_cache", json_loads(xj, 0, NULL));
    char kl[1024];
    if (ebb_model_kernels(b->m, kl, sizeof(kl)))
        json_object_set_new(j, "kernels", json_string(kl));
    const struct batch_res *br = &r->br;
    double bpf = br->prefill_ms > 0 ? 1e3 * (double)(n_prompt * n_batch) / br->prefill_ms : 0;
    double bdec = br->decode_ms > 0 ? 1e3 * steps * (double)n_batch / br->decode_ms : 0;
    if (n_batch > 1)
        json_object_set_new(j, "batch",
                            json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:I}", "n",
                                      (json_int_t)n_batch, "prefill_ms", br->prefill_ms,
                                      "prefill_tok_s", bpf, "decode_ms", br->decode_ms,
                                      "decode_tok_s", bdec, "step_ms", br->decode_ms / steps,
                                      "slot0_same_tokens", (json_int_t)br->same));
    json_dumpf(j, stdout, JSON_COMPACT);
    printf("\n");
    json_decref(j);
}

/* " (median of 3: 10.20-10.90, sd 0.31)" after a figure measured more than once. */
static void print_spread(const struct spread *s, unsigned long reps)
{
    if (reps > 1)
        printf(" (median of %lu: %.2f-%.2f, sd %.2f)", reps, s->min, s->max, s->sd);
    printf("\n");
}

static void report_text(const struct bench *b, const struct report *r, json_t *st)
{
    const unsigned long n_gen = b->n_gen, n_prompt = b->n_prompt, n_batch = r->n_batch;
    double steps = n_gen > 1 ? (double)(n_gen - 1) : 1;
    printf("model      %s on %s (ctx %u, kv %s)\n", r->path, ebb_model_device_name(b->m),
           ebb_model_n_ctx(b->m), ebb_kv_type_name(b->kv_type));
    if (b->depth)
        printf("depth      %u tokens of context before the prompt and the decode\n", b->depth);
    printf("prefill    %lu tokens in %.1f ms: %.2f tok/s", n_prompt, r->pf_ms.median, r->pf.median);
    print_spread(&r->pf, r->reps);
    printf("decode     %lu tokens in %.1f ms: %.2f tok/s", n_gen - 1, r->dec_ms.median,
           r->dec.median);
    print_spread(&r->dec, r->reps);
    if (n_gen > 1 && !b->spec)
        printf("traffic    %.2f MiB per decoded token (weights %.2f, KV %.2f): %.2f GB/s\n",
               (double)(r->bytes_w + r->bytes_kv) / (1 << 20), (double)r->bytes_w / (1 << 20),
               (double)r->bytes_kv / (1 << 20), r->gbps);
    if (r->counted && n_gen > 1)
        printf("launches   %.1f kernels and %.2f host syncs per decoded token; a token %.1f us "
               "blocked in them, %.1f us outside them (enqueueing, sampling)\n",
               r->launches, r->syncs, r->wait_us, r->host_us);
    char kl[1024];
    if (ebb_model_kernels(b->m, kl, sizeof(kl)))
        printf("kernels    %s\n", kl);
    const struct ebb_spec_stats *sst = &b->sst;
    if (b->spec)
        printf("spec       %s: %llu drafted, %llu accepted (%.1f%%) in %llu passes + %llu "
               "plain; k now %u, row cost %.2f\n",
               b->dm ? "draft" : "ngram", (unsigned long long)sst->drafted,
               (unsigned long long)sst->accepted,
               sst->drafted ? 100.0 * (double)sst->accepted / (double)sst->drafted : 0.0,
               (unsigned long long)sst->passes, (unsigned long long)sst->plain, sst->k,
               sst->row_cost);
    if (n_batch > 1) {
        const struct batch_res *br = &r->br;
        double bpf = br->prefill_ms > 0 ? 1e3 * (double)(n_prompt * n_batch) / br->prefill_ms : 0;
        double bdec = br->decode_ms > 0 ? 1e3 * steps * (double)n_batch / br->decode_ms : 0;
        printf("batch      %lu sequences together (one forward pass per step)\n", n_batch);
        printf("  prefill  %lu x %lu tokens in %.1f ms: %.2f tok/s\n", n_batch, n_prompt,
               br->prefill_ms, bpf);
        printf("  decode   %lu steps of %lu tokens in %.1f ms: %.2f tok/s aggregate, %.2f "
               "ms per step (%.2fx the single stream)\n",
               n_gen - 1, n_batch, br->decode_ms, bdec, br->decode_ms / steps,
               r->dec.median > 0 ? bdec / r->dec.median : 0);
        printf("  slot 0   %u of %lu tokens as the single stream's\n", br->same, n_gen);
    }
    if (st) {
        long long nr = json_integer_value(json_object_get(st, "layers_resident"));
        long long nl = json_integer_value(json_object_get(st, "layers_total"));
        long long nh = json_integer_value(json_object_get(st, "layers_host"));
        printf("resident   %lld of %lld layers\n", nr, nl);
        printf("placement  %lld resident, %lld streamed, %lld host\n", nr, nl - nr - nh, nh);
        if (nh)
            printf("host       %lld layers on %lld threads: %.3f s in %lld steps (%.2f ms a "
                   "step, rows over the link included)\n",
                   nh, (long long)json_integer_value(json_object_get(st, "host_threads")),
                   json_number_value(json_object_get(st, "host_seconds")),
                   (long long)json_integer_value(json_object_get(st, "host_steps")),
                   json_integer_value(json_object_get(st, "host_steps"))
                       ? 1e3 * json_number_value(json_object_get(st, "host_seconds")) /
                             (double)json_integer_value(json_object_get(st, "host_steps"))
                       : 0.0);
        printf("streamed   %.1f MiB per token, read %.2f GB/s (%.1f MiB total)\n",
               (double)json_integer_value(json_object_get(st, "bytes_per_token")) / (1 << 20),
               json_number_value(json_object_get(st, "read_gbps")),
               (double)json_integer_value(json_object_get(st, "read_bytes")) / (1 << 20));
        printf("prefetch   %lld hits, %lld misses, %.3f s stalled\n",
               (long long)json_integer_value(json_object_get(st, "prefetch_hits")),
               (long long)json_integer_value(json_object_get(st, "prefetch_misses")),
               json_number_value(json_object_get(st, "stall_seconds")));
    } else {
        printf("resident   all layers (no memory budget: plain path)\n");
    }
    struct ebb_model_expert_cache xc;
    if (ebb_model_expert_cache(b->m, &xc))
        printf("experts    cache of %u slots a layer (%.1f MiB): %llu lookups, %llu hits "
               "(%.1f%%), %llu misses, %llu evictions, %.1f MiB copied, %llu passes in %llu "
               "layer steps\n",
               xc.slots, (double)xc.pool_bytes / (1 << 20), (unsigned long long)xc.lookups,
               (unsigned long long)xc.hits,
               xc.lookups ? 100.0 * (double)xc.hits / (double)xc.lookups : 0.0,
               (unsigned long long)xc.misses, (unsigned long long)xc.evictions,
               (double)xc.bytes_copied / (1 << 20), (unsigned long long)xc.passes,
               (unsigned long long)xc.layer_steps);
    if (xc.on) {
        double n_ls = xc.layer_steps ? (double)xc.layer_steps : 1.0;
        printf("experts    host: %.1f ms copying misses (%.3f ms a layer step, %u threads), "
               "%.1f ms waiting for ids (%.3f ms a layer step); prefetch %llu, %llu hits, "
               "%llu wasted\n",
               (double)xc.fill_ns / 1e6, (double)xc.fill_ns / 1e6 / n_ls, xc.threads,
               (double)xc.ids_ns / 1e6, (double)xc.ids_ns / 1e6 / n_ls,
               (unsigned long long)xc.prefetched, (unsigned long long)xc.prefetch_hits,
               (unsigned long long)xc.prefetch_wasted);
    }
    if (xc.on && xc.host_experts) {
        double n_ls = xc.layer_steps ? (double)xc.layer_steps : 1.0;
        printf("experts    on the host (EBB_EXPERT_HOST): %llu missed experts computed there "
               "(%.2f a layer step), %.1f ms waiting for them (%.3f ms a layer step)\n",
               (unsigned long long)xc.host_experts, (double)xc.host_experts / n_ls,
               (double)xc.host_ns / 1e6, (double)xc.host_ns / 1e6 / n_ls);
        if (xc.host_cost_ns || xc.link_cost_ns)
            printf("experts    auto share, costs of an expert lately: %.3f ms on the host, "
                   "%.3f ms over the link\n",
                   (double)xc.host_cost_ns / 1e6, (double)xc.link_cost_ns / 1e6);
    }
    if (xc.on && xc.lm_layer_steps) {
        double n_ls = (double)xc.lm_layer_steps;
        printf("experts    long prompts: %llu layer-major passes, %llu layer steps, %llu experts "
               "copied in %llu groups (%.1f a layer step; %llu kept from the slots), %.1f MiB; a "
               "layer step: %.3f ms "
               "copying on the device, %.3f ms experts' phase (copies and products), %.3f ms "
               "host filling, %.3f ms waiting for ids\n",
               (unsigned long long)xc.lm_passes, (unsigned long long)xc.lm_layer_steps,
               (unsigned long long)xc.lm_copied, (unsigned long long)xc.lm_groups,
               (double)xc.lm_copied / n_ls, (unsigned long long)xc.lm_kept,
               (double)xc.lm_bytes / (1 << 20), (double)xc.lm_copy_ns / 1e6 / n_ls,
               (double)xc.lm_ns / 1e6 / n_ls, (double)xc.lm_fill_ns / 1e6 / n_ls,
               (double)xc.lm_ids_ns / 1e6 / n_ls);
    }
    if (b->stages) {
        ebb_bench_stages_print(stdout, &b->st_pf, &b->st_dec);
        ebb_bench_stages_print_phase(stdout, "batch", &b->st_bat);
    }
    printf("peak RSS   %.1f MiB\n", (double)ebb_peak_rss() / (1 << 20));
}

/* -d: depth tokens of a second synthetic sequence at positions 0.., evaluated once (the runs
 * write their KV entries from position depth on only). */
static ebb_err eval_depth(struct bench *b, struct ebb_diag *d)
{
    uint32_t V = ebb_model_n_vocab(b->m);
    int32_t *ctx = malloc(sizeof(int32_t) * b->depth);
    if (!ctx)
        return EBB_ENOMEM;
    for (uint32_t i = 0; i < b->depth; i++)
        ctx[i] = (int32_t)((3000 + i * 104723u) % V);
    ebb_err rc = ebb_model_eval(b->m, 0, ctx, b->depth, 0, NULL, d);
    free(ctx);
    return rc;
}

/* The warm-up (with -r or -d) and the measured runs, their spread, traffic and counters. */
static ebb_err measure(struct bench *b, struct report *r, struct ebb_diag *d)
{
    double pms, dms;
    ebb_err rc;
    if (b->depth && (rc = eval_depth(b, d)))
        return rc;
    if ((r->warm || b->depth) && (rc = run_once(b, false, &pms, &dms, d)))
        return rc;
    double *v = calloc(4 * r->reps, sizeof(double));
    if (!v)
        return EBB_ENOMEM;
    double *pf_ms = v + 2 * r->reps, *dec_ms = v + 3 * r->reps;
    r->pf_runs = v;
    r->dec_runs = v + r->reps;
    for (unsigned long i = 0; i < r->reps; i++) {
        if ((rc = run_once(b, true, &pf_ms[i], &dec_ms[i], d)))
            return rc;
        r->pf_runs[i] = 1e3 * (double)b->n_prompt / pf_ms[i];
        r->dec_runs[i] = b->n_gen > 1 ? 1e3 * (double)(b->n_gen - 1) / dec_ms[i] : 0;
    }
    double *tmp = malloc(sizeof(double) * 2 * r->reps);
    if (!tmp)
        return EBB_ENOMEM;
    memcpy(tmp, r->pf_runs, sizeof(double) * 2 * r->reps); /* spread_of sorts its copy */
    r->pf = spread_of(tmp, r->reps);
    r->dec = spread_of(tmp + r->reps, r->reps);
    free(tmp);
    r->pf_ms = spread_of(pf_ms, r->reps);
    r->dec_ms = spread_of(dec_ms, r->reps);
    decode_traffic(b, r);
    struct ebb_model_counters c;
    r->counted = ebb_model_counters(b->m, &c);
    double tokens = (double)(b->n_gen - 1) * (double)r->reps;
    if (r->counted && tokens > 0) {
        r->launches = (double)b->dec.launches / tokens;
        r->syncs = (double)b->dec.syncs / tokens;
        r->wait_us = (double)b->dec.wait_ns / tokens / 1e3;
        r->host_us = (double)(b->dec_ns - b->dec.wait_ns) / tokens / 1e3;
    }
    return EBB_OK;
}

int ebb_cmd_bench(int argc, char **argv)
{
    enum {
        O_PT = 256,
        O_GT,
        O_DEV,
        O_CTX,
        O_JSON,
        O_BATCH,
        O_PF,
        O_SPEC,
        O_DMAX,
        O_DFIXED,
        O_DRAFT,
        O_STAGES,
        O_KV
    };
    static const struct option longs[] = {
        {"model", required_argument, NULL, 'm'},
        {"prompt-tokens", required_argument, NULL, O_PT},
        {"gen-tokens", required_argument, NULL, O_GT},
        {"device", required_argument, NULL, O_DEV},
        {"ctx", required_argument, NULL, O_CTX},
        {"json", no_argument, NULL, O_JSON},
        {"prompt-file", required_argument, NULL, O_PF},
        {"spec", required_argument, NULL, O_SPEC},
        {"draft-max", required_argument, NULL, O_DMAX},
        {"draft-fixed", no_argument, NULL, O_DFIXED},
        {"draft", required_argument, NULL, O_DRAFT},
        {"batch", required_argument, NULL, O_BATCH},
        {"stages", no_argument, NULL, O_STAGES},
        {"kv-type", required_argument, NULL, O_KV},
        {"repetitions", required_argument, NULL, 'r'},
        {"depth", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        EBB_STREAM_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct ebb_model_params mp = {.device = "auto", .n_seq = 1};
    unsigned long n_prompt = 128, n_gen = 64, ctx = 0, n_batch = 1, reps = 1, depth = 0;
    bool warm = false;
    bool json = false, spec = false;
    const char *prompt_file = NULL, *draft = NULL;
    struct bench b = {0};
    ebb_spec_params_defaults(&b.sp);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":m:r:d:h", longs, NULL)) != -1) {
        bool ok = true;
        if (ebb_stream_opt_is(c)) {
            ok = ebb_stream_opt_apply(c, optarg, &mp);
        } else if (c == 'm') {
            mp.path = optarg;
        } else if (c == O_PT) {
            ok = parse_u(optarg, 1, 1 << 20, &n_prompt);
        } else if (c == O_GT) {
            ok = parse_u(optarg, 1, 1 << 20, &n_gen);
        } else if (c == O_DEV) {
            mp.device = optarg;
        } else if (c == O_CTX) {
            ok = parse_u(optarg, 1, 1 << 20, &ctx);
        } else if (c == O_JSON) {
            json = true;
        } else if (c == O_PF) {
            prompt_file = optarg;
        } else if (c == O_SPEC) {
            ok = !strcmp(optarg, "ngram") || !strcmp(optarg, "off");
            spec = !strcmp(optarg, "ngram");
        } else if (c == O_DMAX) {
            unsigned long v = 0;
            ok = parse_u(optarg, 1, EBB_SPEC_DRAFT_CAP, &v);
            b.sp.draft_max = (uint32_t)v;
        } else if (c == O_DFIXED) {
            b.sp.fixed_k = true;
        } else if (c == O_DRAFT) {
            draft = optarg;
            spec = true;
        } else if (c == O_BATCH) {
            ok = parse_u(optarg, 1, 256, &n_batch);
        } else if (c == O_STAGES) {
            b.stages = true;
        } else if (c == O_KV) {
            ok = ebb_kv_type_parse(optarg, &mp.kv_type);
        } else if (c == 'r') {
            ok = parse_u(optarg, 1, 1000, &reps);
            warm = true;
        } else if (c == 'd') {
            ok = parse_u(optarg, 1, 1 << 20, &depth);
        } else if (c == 'h') {
            bench_usage(stdout);
            return 0;
        } else if (c == ':') {
            fprintf(stderr, "ebb bench: option '%s' needs a value\n", argv[optind - 1]);
            return 2;
        } else {
            fprintf(stderr, "ebb bench: unknown option '%s'\n", argv[optind - 1]);
            bench_usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "ebb bench: bad value '%s' for %s\n", optarg, argv[optind - 2]);
            return 2;
        }
    }
    if (optind < argc || !mp.path) {
        fprintf(stderr, "ebb bench: -m MODEL is required (see ebb bench --help)\n");
        return 2;
    }
    if (n_batch > 1 && (spec || prompt_file)) {
        fprintf(stderr, "ebb bench: --batch runs the synthetic prompt without --spec\n");
        return 2;
    }
    if (depth && (spec || prompt_file || n_batch > 1)) {
        fprintf(stderr, "ebb bench: --depth runs the synthetic prompt without --spec or --batch\n");
        return 2;
    }
    if (b.stages && (!strncmp(mp.device, "ref", 3) || !strcmp(mp.device, "cpu"))) {
        fprintf(stderr,
                "ebb bench: --stages profiles the OpenCL engine's kernels, not --device "
                "%s\n",
                mp.device);
        return 2;
    }
    if (b.stages && !strcmp(mp.device, "auto"))
        mp.device = "cl"; /* the profiled engine, GPU or not */
    if (prompt_file) {    /* room for the file's tokens: at most one per byte, plus BOS/EOS */
        FILE *f = fopen(prompt_file, "rb");
        long sz = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
        if (f)
            fclose(f);
        if (sz < 0 || sz > (1 << 20)) {
            fprintf(stderr, "ebb bench: cannot read --prompt-file '%s' (or over 1 MiB)\n",
                    prompt_file);
            return 1;
        }
        n_prompt = (unsigned long)sz + 8;
    }
    /* With a depth, prefill and decode each start at position depth. */
    unsigned long need = depth ? depth + (n_prompt > n_gen ? n_prompt : n_gen) : n_prompt + n_gen;
    mp.n_ctx = (uint32_t)(ctx ? ctx : need);
    b.kv_type = mp.kv_type;
    mp.n_seq = (uint32_t)n_batch;

    int status = 1;
    struct report r = {.path = mp.path, .reps = reps, .warm = warm, .n_batch = n_batch};
    struct ebb_diag d = {{0}};
    ebb_err rc;
    if (b.stages) /* the queue must keep timestamps from its creation */
        ebb_cl_profile_queues(true);
    double t0 = now_ms();
    if ((rc = ebb_model_open(&mp, &b.m, &d))) {
        fprintf(stderr, "ebb bench: cannot load '%s': %s\n", mp.path,
                d.msg[0] ? d.msg : ebb_err_str(rc));
        goto out;
    }
    r.t_load = now_ms() - t0;
    if (draft) {
        struct ebb_model_params dp = {
            .path = draft, .device = mp.device, .n_ctx = ebb_model_n_ctx(b.m), .n_seq = 1};
        if ((rc = ebb_model_open(&dp, &b.dm, &d))) {
            fprintf(stderr, "ebb bench: cannot load --draft '%s': %s\n", draft,
                    d.msg[0] ? d.msg : ebb_err_str(rc));
            goto out;
        }
    }
    uint32_t V = ebb_model_n_vocab(b.m);
    if (need > ebb_model_n_ctx(b.m)) {
        fprintf(stderr,
                "ebb bench: %lu tokens (depth %lu, prompt %lu, decode %lu) exceed the "
                "context of %u\n",
                need, depth, n_prompt, n_gen, ebb_model_n_ctx(b.m));
        goto out;
    }
    if (prompt_file) {
        if ((rc = file_prompt(b.m, prompt_file, n_gen, &b.ids, &n_prompt, &d)))
            goto fail;
    } else {
        b.ids = malloc(sizeof(int32_t) * (n_prompt + n_gen));
        if (!b.ids)
            goto out;
        for (unsigned long i = 0; i < n_prompt; i++) /* a fixed, varied synthetic prompt */
            b.ids[i] = (int32_t)((1000 + i * 7919u) % V);
    }
    b.lgs = malloc(sizeof(float) * n_gen);
    if (!b.lgs)
        goto out;
    b.n_prompt = n_prompt;
    b.n_gen = n_gen;
    b.depth = (uint32_t)depth;
    b.dpos = depth ? (uint32_t)depth : (uint32_t)n_prompt;
    b.spec = spec;
    if ((rc = measure(&b, &r, &d)))
        goto fail;
    if (n_batch > 1 && (rc = bench_batch(b.m, (uint32_t)n_batch, n_prompt, n_gen, b.ids, &r.br,
                                         b.stages ? &b.st_bat : NULL, &d)))
        goto fail;
    char sj[8192];
    json_t *st = ebb_model_stream_json(b.m, sj, sizeof(sj)) ? json_loads(sj, 0, NULL) : NULL;
    if (json)
        report_json(&b, &r, st);
    else
        report_text(&b, &r, st);
    json_decref(st);
    status = 0;
    goto out;
fail:
    fprintf(stderr, "ebb bench: %s\n", d.msg[0] ? d.msg : ebb_err_str(rc));
out:
    free(r.pf_runs);
    free(b.ids);
    free(b.lgs);
    ebb_model_close(b.dm);
    ebb_model_close(b.m);
    return status;
}
