/* ebb bench: prefill and decode speed of a model on a synthetic prompt, with the layer
 * streamer's figures (resident layers, streamed bytes per token, read throughput, prefetch
 * hits/misses/stall) and the peak RSS. Greedy decoding, so the generated ids are reproducible
 * and printed with --json (tests compare them across residencies). With --batch N, N slots
 * then prefill and decode together through ebb_model_eval_batch (continuous batching's
 * aggregate speed, next to the single stream's). */
#include "cmds.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"
#include "stream-opts.h"

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: ebb bench -m MODEL [options]\n"
            "\n"
            "Evaluates a synthetic prompt, then decodes greedily, and prints prefill and decode\n"
            "tokens/s, the layer streamer's figures and the peak RSS.\n"
            "\n"
            "  -m, --model MODEL       GGUF file (required)\n"
            "      --prompt-tokens N   prompt length (default 128)\n"
            "      --gen-tokens N      tokens to decode (default 64)\n"
            "      --device D          compute device (default auto)\n"
            "      --ctx N             context length (default prompt + gen tokens)\n"
            "      --batch N           also decode N sequences together (N slots, one batched\n"
            "                          forward pass per step) and report the aggregate tok/s\n"
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
                           struct ebb_diag *d)
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

int ebb_cmd_bench(int argc, char **argv)
{
    enum { O_PT = 256, O_GT, O_DEV, O_CTX, O_JSON, O_BATCH };
    static const struct option longs[] = {
        {"model", required_argument, NULL, 'm'},
        {"prompt-tokens", required_argument, NULL, O_PT},
        {"gen-tokens", required_argument, NULL, O_GT},
        {"device", required_argument, NULL, O_DEV},
        {"ctx", required_argument, NULL, O_CTX},
        {"json", no_argument, NULL, O_JSON},
        {"batch", required_argument, NULL, O_BATCH},
        {"help", no_argument, NULL, 'h'},
        EBB_STREAM_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct ebb_model_params mp = {.device = "auto", .n_seq = 1};
    unsigned long n_prompt = 128, n_gen = 64, ctx = 0, n_batch = 1;
    bool json = false;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":m:h", longs, NULL)) != -1) {
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
        } else if (c == O_BATCH) {
            ok = parse_u(optarg, 1, 256, &n_batch);
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
    mp.n_ctx = (uint32_t)(ctx ? ctx : n_prompt + n_gen);
    mp.n_seq = (uint32_t)n_batch;

    int status = 1;
    struct ebb_model *m = NULL;
    int32_t *ids = NULL;
    float *lgs = NULL; /* top logit of each generated token (exact comparisons in tests) */
    struct ebb_diag d = {{0}};
    ebb_err rc;
    double t0 = now_ms();
    if ((rc = ebb_model_open(&mp, &m, &d))) {
        fprintf(stderr, "ebb bench: cannot load '%s': %s\n", mp.path,
                d.msg[0] ? d.msg : ebb_err_str(rc));
        goto out;
    }
    double t_load = now_ms() - t0;
    uint32_t V = ebb_model_n_vocab(m);
    if (n_prompt + n_gen > ebb_model_n_ctx(m)) {
        fprintf(stderr, "ebb bench: %lu + %lu tokens exceed the context of %u\n", n_prompt, n_gen,
                ebb_model_n_ctx(m));
        goto out;
    }
    ids = malloc(sizeof(int32_t) * (n_prompt + n_gen));
    lgs = malloc(sizeof(float) * n_gen);
    if (!ids || !lgs)
        goto out;
    for (unsigned long i = 0; i < n_prompt; i++) /* a fixed, varied synthetic prompt */
        ids[i] = (int32_t)((1000 + i * 7919u) % V);
    int32_t top;
    float top_logit;
    struct ebb_model_out out = {.top_k = 1, .top_ids = &top, .top_logits = &top_logit};
    double t1 = now_ms();
    if ((rc = ebb_model_eval(m, 0, ids, (uint32_t)n_prompt, 0, &out, &d)))
        goto fail;
    double t_prefill = now_ms() - t1;
    ids[n_prompt] = top;
    lgs[0] = top_logit;
    double t2 = now_ms();
    for (unsigned long i = 1; i < n_gen; i++) {
        uint32_t pos = (uint32_t)(n_prompt + i - 1);
        if ((rc = ebb_model_eval(m, 0, &ids[pos], 1, pos, &out, &d)))
            goto fail;
        ids[pos + 1] = top;
        lgs[i] = top_logit;
    }
    double t_decode = now_ms() - t2;
    double pf = 1e3 * (double)n_prompt / t_prefill;
    double dec = n_gen > 1 ? 1e3 * (double)(n_gen - 1) / t_decode : 0;
    struct batch_res br = {0};
    if (n_batch > 1 && (rc = bench_batch(m, (uint32_t)n_batch, n_prompt, n_gen, ids, &br, &d)))
        goto fail;
    double steps = n_gen > 1 ? (double)(n_gen - 1) : 1;
    double bpf = br.prefill_ms > 0 ? 1e3 * (double)(n_prompt * n_batch) / br.prefill_ms : 0;
    double bdec = br.decode_ms > 0 ? 1e3 * steps * (double)n_batch / br.decode_ms : 0;
    uint64_t peak = ebb_peak_rss();
    char sj[8192];
    json_t *st = ebb_model_stream_json(m, sj, sizeof(sj)) ? json_loads(sj, 0, NULL) : NULL;
    if (json) {
        json_t *jt = json_array(), *jl = json_array();
        for (unsigned long i = 0; i < n_gen; i++) {
            json_array_append_new(jt, json_integer(ids[n_prompt + i]));
            json_array_append_new(jl, json_real(lgs[i]));
        }
        json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:o}",
                              "model", mp.path, "device", ebb_model_device_name(m), "prompt_tokens",
                              (json_int_t)n_prompt, "gen_tokens", (json_int_t)n_gen, "n_ctx",
                              (json_int_t)ebb_model_n_ctx(m), "load_ms", t_load, "prefill_ms",
                              t_prefill, "prefill_tok_s", pf, "decode_ms", t_decode, "decode_tok_s",
                              dec, "peak_rss_bytes", (json_int_t)peak, "tokens", jt);
        json_object_set_new(j, "top_logits", jl);
        if (st)
            json_object_set(j, "stream", st);
        if (n_batch > 1)
            json_object_set_new(j, "batch",
                                json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:I}", "n",
                                          (json_int_t)n_batch, "prefill_ms", br.prefill_ms,
                                          "prefill_tok_s", bpf, "decode_ms", br.decode_ms,
                                          "decode_tok_s", bdec, "step_ms", br.decode_ms / steps,
                                          "slot0_same_tokens", (json_int_t)br.same));
        json_dumpf(j, stdout, JSON_COMPACT);
        printf("\n");
        json_decref(j);
    } else {
        printf("model      %s on %s (ctx %u)\n", mp.path, ebb_model_device_name(m),
               ebb_model_n_ctx(m));
        printf("prefill    %lu tokens in %.1f ms: %.2f tok/s\n", n_prompt, t_prefill, pf);
        printf("decode     %lu tokens in %.1f ms: %.2f tok/s\n", n_gen - 1, t_decode, dec);
        if (n_batch > 1) {
            printf("batch      %lu sequences together (one forward pass per step)\n", n_batch);
            printf("  prefill  %lu x %lu tokens in %.1f ms: %.2f tok/s\n", n_batch, n_prompt,
                   br.prefill_ms, bpf);
            printf("  decode   %lu steps of %lu tokens in %.1f ms: %.2f tok/s aggregate, %.2f "
                   "ms per step (%.2fx the single stream)\n",
                   n_gen - 1, n_batch, br.decode_ms, bdec, br.decode_ms / steps,
                   dec > 0 ? bdec / dec : 0);
            printf("  slot 0   %u of %lu tokens as the single stream's\n", br.same, n_gen);
        }
        if (st) {
            printf("resident   %lld of %lld layers\n",
                   (long long)json_integer_value(json_object_get(st, "layers_resident")),
                   (long long)json_integer_value(json_object_get(st, "layers_total")));
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
        printf("peak RSS   %.1f MiB\n", (double)peak / (1 << 20));
    }
    json_decref(st);
    status = 0;
    goto out;
fail:
    fprintf(stderr, "ebb bench: %s\n", d.msg[0] ? d.msg : ebb_err_str(rc));
out:
    free(ids);
    free(lgs);
    ebb_model_close(m);
    return status;
}
