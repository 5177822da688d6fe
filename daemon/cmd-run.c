/* `ebb run`: generate text from a prompt on the command line. Streams the text to stdout as it
 * is produced and speed figures to stderr; with --json prints one JSON object at the end
 * instead. Everything is allocated before the decode loop. */
#include "cmds.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/chat-template.h"
#include "api/defaults.h"
#include "daemon/config.h"
#include "daemon/warm.h"
#include "model/model.h"
#include "sched/sampler.h"
#include "stream-opts.h"
#include "tokenizer/tokenizer.h"

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: ebb run -m MODEL -p PROMPT [options]\n"
            "\n"
            "Generate a continuation of PROMPT. The prompt is raw text: it is tokenized as is,\n"
            "with a BOS token only if the model's metadata asks for one (no chat template\n"
            "unless --chat). The text streams to stdout, speed to stderr. Generation stops\n"
            "after N tokens, at an end-of-generation token, or when the context is full.\n"
            "\n"
            "options:\n"
            "  -m, --model MODEL       GGUF file (required)\n"
            "  -p, --prompt PROMPT     prompt text (required)\n"
            "  -n, --n-predict N       tokens to generate (default 128)\n"
            "      --temp T            temperature, 0..2; 0 = greedy (default 0.8)\n"
            "      --top-k K           keep the K most likely tokens; 0 = off (default 40)\n"
            "      --top-p P           nucleus sampling; 1 = off (default 0.95)\n"
            "      --min-p P           drop tokens below P x the best one's probability;\n"
            "                          0 = off (default 0.05)\n"
            "      --repeat-penalty R  penalise tokens of the last --repeat-last-n (prompt\n"
            "                          included); 1 = off (default 1.0)\n"
            "      --repeat-last-n N   window of the penalties; -1 = all (default 64)\n"
            "      --presence-penalty X, --frequency-penalty X\n"
            "                          OpenAI's penalties, -2..2 (default 0)\n"
            "      --seed S            sampling seed for reproducible output (default random)\n"
            "      --config FILE       read the [generation] defaults from this file\n"
            "      --chat              render the prompt as a user turn with the model's chat\n"
            "                          template (its tokenizer.chat_template, interpreted as\n"
            "                          the server does) and open the assistant's turn\n"
            "      --chat-template NAME  with --chat: use this built-in family instead (chatml,\n"
            "                          gemma, llama3, mistral)\n"
            "      --system TEXT       with --chat: a system message first\n"
            "      --json              print one JSON object at the end (tokens, text,\n"
            "                          prompt_tokens, timings) instead of streaming\n"
            "      --device D          compute device: auto, cl:P:D, a name substring, ref (the\n"
            "                          plain-C reference, fp32) or ref-q8 (the reference with\n"
            "                          llama.cpp's CPU rounding: Q8 activations, fp16 KV)\n"
            "                          (default auto)\n"
            "      --ctx N             context length in tokens (default: the model's, capped\n"
            "                          at 4096)\n"
            "%s"
            "  -h, --help              show this help\n"
            "\n"
            "Sampling applies, in llama.cpp's order: repeat penalty, top-k, top-p, min-p,\n"
            "temperature. A sampling flag not given takes the same default as a request to\n"
            "ebb serve that leaves the field out: the model's own general.sampling.* value,\n"
            "else the config file's [generation] value (or EBB_TEMPERATURE, ...), else the\n"
            "default shown above. The config file is --config FILE, else $EBB_CONFIG, else\n"
            "~/.config/ebb/ebb.conf or /etc/ebb/ebb.conf, as for ebb serve; ebb info MODEL\n"
            "shows the resolved defaults.\n"
            "\n"
            "exit status: 0 success, 1 model, prompt, config or device error (e.g. the prompt\n"
            "does not fit in the context), 2 usage error\n",
            ebb_stream_opts_usage);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool parse_long(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* The sampling settings used and where each came from ("flag", or the defaults' source), as
 * JSON for --json; also printed on stderr. NULL when out of memory. */
static json_t *sampling_summary(const struct ebb_sampling *s, unsigned sent,
                                const struct ebb_gen_defaults *gd)
{
    json_t *j = json_object();
    char line[512];
    size_t w = 0;
    for (int i = 0; j && i < EBB_DEF_N_FIELDS; i++) {
        enum ebb_defaults_field f = (enum ebb_defaults_field)i;
        const char *src = sent & EBB_DEF_BIT(f) ? "flag" : ebb_defaults_source_name(gd->src[f]);
        char v[32];
        ebb_defaults_format(s, f, v, sizeof(v));
        json_t *val = f == EBB_DEF_TOP_K || f == EBB_DEF_REPEAT_LAST_N
                          ? json_integer((json_int_t)ebb_defaults_get(s, f))
                          : json_real(strtod(v, NULL));
        if (json_object_set_new(j, ebb_defaults_field_name(f),
                                json_pack("{s:o, s:s}", "value", val, "source", src))) {
            json_decref(j);
            return NULL;
        }
        if (w < sizeof(line)) {
            int k = snprintf(line + w, sizeof(line) - w, "%s%s %s (%s)", i ? ", " : "",
                             ebb_defaults_field_name(f), v, src);
            w += k > 0 ? (size_t)k : 0;
        }
    }
    if (j)
        fprintf(stderr, "ebb run: sampling: %s\n", line);
    return j;
}

/* --chat: the prompt (after an optional system message) as a user turn in the model's chat
 * template, or the named family's, with the assistant's turn opened. Returns a malloc'd string,
 * or NULL with the reason printed. */
static char *chat_prompt(struct ebb_model *m, const char *family, const char *system,
                         const char *prompt)
{
    struct ebb_chat_template t;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_chat_template_for_model(m, family, &t, &d);
    struct ebb_chat_msg msgs[2];
    size_t n = 0;
    if (system)
        msgs[n++] = (struct ebb_chat_msg){"system", system, strlen(system), NULL};
    msgs[n++] = (struct ebb_chat_msg){"user", prompt, strlen(prompt), NULL};
    char *out = NULL;
    size_t len = 0;
    if (!rc)
        rc = ebb_chat_template_render(&t, msgs, n, true, &out, &len, &d);
    ebb_chat_template_fini(&t);
    if (rc) {
        fprintf(stderr, "ebb run: --chat: %s\n", d.msg[0] ? d.msg : ebb_err_str(rc));
        return NULL;
    }
    return out;
}

struct run_opts {
    const char *model, *prompt, *device, *chat_template, *system, *config;
    long long n_predict, ctx;
    bool chat, json;
    struct ebb_sampling sp;
    unsigned sent; /* EBB_DEF_BIT of each sampling flag given; the others take the defaults */
    struct ebb_model_params stream; /* the streamer fields only */
};

/* A sampling flag: the same field names, ranges and parser as the config file and requests. */
static bool sampling_flag(struct run_opts *o, enum ebb_defaults_field f, const char *text)
{
    struct ebb_sampling_set set = {.v = o->sp, .mask = 0};
    char why[128];
    if (ebb_defaults_parse(&set, f, text, why, sizeof(why)))
        return false;
    o->sp = set.v;
    o->sent |= EBB_DEF_BIT(f);
    return true;
}

static int parse_args(int argc, char **argv, struct run_opts *o)
{
    enum {
        O_TEMP = 256,
        O_TOPK,
        O_TOPP,
        O_MINP,
        O_SEED,
        O_REP,
        O_CHAT,
        O_JSON,
        O_DEV,
        O_CTX,
        O_TMPL,
        O_SYS,
        O_LASTN,
        O_PRES,
        O_FREQ,
        O_CONFIG
    };
    static const struct option longs[] = {
        {"model", required_argument, NULL, 'm'},
        {"prompt", required_argument, NULL, 'p'},
        {"n-predict", required_argument, NULL, 'n'},
        {"temp", required_argument, NULL, O_TEMP},
        {"top-k", required_argument, NULL, O_TOPK},
        {"top-p", required_argument, NULL, O_TOPP},
        {"min-p", required_argument, NULL, O_MINP},
        {"seed", required_argument, NULL, O_SEED},
        {"repeat-penalty", required_argument, NULL, O_REP},
        {"repeat-last-n", required_argument, NULL, O_LASTN},
        {"presence-penalty", required_argument, NULL, O_PRES},
        {"frequency-penalty", required_argument, NULL, O_FREQ},
        {"config", required_argument, NULL, O_CONFIG},
        {"chat", no_argument, NULL, O_CHAT},
        {"chat-template", required_argument, NULL, O_TMPL},
        {"system", required_argument, NULL, O_SYS},
        {"json", no_argument, NULL, O_JSON},
        {"device", required_argument, NULL, O_DEV},
        {"ctx", required_argument, NULL, O_CTX},
        {"help", no_argument, NULL, 'h'},
        EBB_STREAM_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof(*o));
    o->n_predict = 128;
    o->device = "auto";
    ebb_sampling_defaults(&o->sp); /* fields no flag sets are resolved once the model is open */
    optind = 1;
    opterr = 0;
    int c;
    long long v = 0;
    while ((c = getopt_long(argc, argv, ":m:p:n:h", longs, NULL)) != -1) {
        bool ok = true;
        switch (c) {
        case 'm':
            o->model = optarg;
            break;
        case 'p':
            o->prompt = optarg;
            break;
        case 'n':
            ok = parse_long(optarg, 0, 1 << 20, &o->n_predict);
            break;
        case O_TEMP:
            ok = sampling_flag(o, EBB_DEF_TEMPERATURE, optarg);
            break;
        case O_TOPK:
            ok = sampling_flag(o, EBB_DEF_TOP_K, optarg);
            break;
        case O_TOPP:
            ok = sampling_flag(o, EBB_DEF_TOP_P, optarg);
            break;
        case O_MINP:
            ok = sampling_flag(o, EBB_DEF_MIN_P, optarg);
            break;
        case O_LASTN:
            ok = sampling_flag(o, EBB_DEF_REPEAT_LAST_N, optarg);
            break;
        case O_PRES:
            ok = sampling_flag(o, EBB_DEF_PRESENCE_PENALTY, optarg);
            break;
        case O_FREQ:
            ok = sampling_flag(o, EBB_DEF_FREQUENCY_PENALTY, optarg);
            break;
        case O_CONFIG:
            o->config = optarg;
            break;
        case O_SEED:
            ok = parse_long(optarg, 0, INT64_MAX, &v);
            o->sp.seed = (uint64_t)v;
            break;
        case O_REP:
            ok = sampling_flag(o, EBB_DEF_REPEAT_PENALTY, optarg);
            break;
        case O_CHAT:
            o->chat = true;
            break;
        case O_TMPL:
            o->chat_template = optarg;
            break;
        case O_SYS:
            o->system = optarg;
            break;
        case O_JSON:
            o->json = true;
            break;
        case O_DEV:
            o->device = optarg;
            break;
        case O_CTX:
            ok = parse_long(optarg, 1, 1 << 20, &o->ctx);
            break;
        case 'h':
            run_usage(stdout);
            return 0;
        case EBB_SOPT_BUDGET:
        case EBB_SOPT_PREFETCH:
        case EBB_SOPT_MODE:
        case EBB_SOPT_PACK:
        case EBB_SOPT_RESIDENCY:
        case EBB_SOPT_IO:
        case EBB_SOPT_THREADS:
            ok = ebb_stream_opt_apply(c, optarg, &o->stream);
            break;
        case ':':
            fprintf(stderr, "ebb run: option '%s' needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "ebb run: unknown option '%s'\n", argv[optind - 1]);
            run_usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "ebb run: bad value '%s' for %s\n", optarg, argv[optind - 2]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ebb run: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->model || !o->prompt) {
        fprintf(stderr, "ebb run: -m MODEL and -p PROMPT are required (see ebb run --help)\n");
        return 2;
    }
    if (!o->chat && (o->chat_template || o->system)) {
        fprintf(stderr, "ebb run: --chat-template and --system need --chat\n");
        return 2;
    }
    return -1; /* go on */
}

int ebb_cmd_run(int argc, char **argv)
{
    struct run_opts o;
    int status = parse_args(argc, argv, &o);
    if (status >= 0)
        return status;
    status = 1;

    struct ebb_model *m = NULL;
    struct ebb_sampler *smp = NULL;
    int32_t *prompt_ids = NULL, *gen = NULL, *cand_ids = NULL;
    float *logits = NULL, *cand_logits = NULL;
    char *text = NULL, *wrapped = NULL;
    struct ebb_diag d = {{0}};
    ebb_err rc;
    struct ebb_gen_defaults gd;
    json_t *jsampling = NULL;

    /* The configuration as ebb serve would read it (file and EBB_* variables; ebb run's own
     * flags are the request's fields), for its generation defaults. */
    struct ebb_config cfg;
    if ((rc = ebb_config_init(&cfg)) || (rc = ebb_config_build(&cfg, o.config, NULL, 0, &d))) {
        fprintf(stderr, "ebb run: %s\n", d.msg[0] ? d.msg : ebb_err_str(rc));
        ebb_config_fini(&cfg);
        return 1;
    }

    struct ebb_model_params mp = o.stream;
    mp.path = o.model;
    mp.device = o.device;
    mp.n_ctx = (uint32_t)o.ctx;
    mp.n_seq = 1;
    if (isatty(STDERR_FILENO)) { /* a live "loading NAME: 40% (..., MB/s)" line */
        char what[128];
        ebb_warm_what(o.model, what, sizeof(what));
        ebb_warm_file(o.model, what);
    }
    if ((rc = ebb_model_open(&mp, &m, &d))) {
        fprintf(stderr, "ebb run: cannot load '%s': %s\n", o.model,
                d.msg[0] ? d.msg : ebb_err_str(rc));
        goto out;
    }
    const struct ebb_tokenizer *tok = ebb_model_tokenizer(m);
    const uint32_t V = ebb_model_n_vocab(m), n_ctx = ebb_model_n_ctx(m);

    /* Sampling fields no flag set: the same resolution as the server's (api/defaults.h). */
    ebb_defaults_resolve(cfg.model_sampling ? ebb_model_gguf(m) : NULL, &cfg.generation, &gd);
    ebb_defaults_apply(&gd, o.sent, &o.sp);
    for (size_t i = 0; i < gd.n_notes; i++)
        fprintf(stderr, "ebb run: note: %s\n", gd.notes[i]);
    if (!(jsampling = sampling_summary(&o.sp, o.sent, &gd)))
        goto oom;

    /* Prompt tokens: raw text with BOS per the metadata; --chat also parses the template's
     * special tokens. */
    const char *text_in = o.prompt;
    unsigned flags = EBB_TOK_ADD_SPECIAL;
    if (o.chat) {
        if (!(wrapped = chat_prompt(m, o.chat_template, o.system, o.prompt)))
            goto out;
        text_in = wrapped;
        flags |= EBB_TOK_PARSE_SPECIAL;
    }
    size_t n_prompt = 0, cap = strlen(text_in) + 8;
    if (!(prompt_ids = malloc(cap * sizeof(int32_t))))
        goto oom;
    rc = ebb_tokenizer_encode(tok, text_in, strlen(text_in), flags, prompt_ids, cap, &n_prompt);
    if (rc == EBB_ERANGE) {
        cap = n_prompt;
        free(prompt_ids);
        if (!(prompt_ids = malloc(cap * sizeof(int32_t))))
            goto oom;
        rc = ebb_tokenizer_encode(tok, text_in, strlen(text_in), flags, prompt_ids, cap, &n_prompt);
    }
    if (rc) {
        fprintf(stderr, "ebb run: cannot tokenize the prompt: %s\n", ebb_err_str(rc));
        goto out;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "ebb run: the prompt is empty and the model adds no BOS token\n");
        goto out;
    }
    if (n_prompt >= n_ctx) {
        fprintf(stderr,
                "ebb run: the prompt is %zu tokens but the context holds %u (it must leave room "
                "for at least one generated token); use --ctx or a shorter prompt\n",
                n_prompt, n_ctx);
        goto out;
    }

    if ((rc = ebb_sampler_new(&o.sp, V, &smp, &d))) {
        fprintf(stderr, "ebb run: %s\n", d.msg);
        goto out;
    }
    for (size_t i = 0; i < n_prompt; i++)
        ebb_sampler_accept(smp, prompt_ids[i]);

    /* Everything the loop needs: logits (or device top-k candidates), generated ids, and the
     * text (bounded by the longest piece in the vocabulary). */
    size_t max_piece = 0;
    for (uint32_t i = 0; i < V; i++) {
        struct ebb_str piece;
        if (ebb_tokenizer_piece(tok, (int32_t)i, false, &piece) == EBB_OK && piece.n > max_piece)
            max_piece = piece.n;
    }
    size_t n_gen_max = (size_t)o.n_predict;
    if (n_gen_max > n_ctx - n_prompt)
        n_gen_max = n_ctx - n_prompt;
    uint32_t n_cand = ebb_sampler_n_candidates(smp);
    size_t text_cap = (n_gen_max + 1) * (max_piece + 4) + 8, text_len = 0;
    logits = malloc(sizeof(float) * V);
    gen = malloc(sizeof(int32_t) * (n_gen_max + 1));
    text = malloc(text_cap);
    cand_ids = malloc(sizeof(int32_t) * (n_cand ? n_cand : 1));
    cand_logits = malloc(sizeof(float) * (n_cand ? n_cand : 1));
    if (!logits || !gen || !text || !cand_ids || !cand_logits)
        goto oom;
    struct ebb_model_out out = {0};
    if (n_cand) {
        out.top_k = n_cand;
        out.top_ids = cand_ids;
        out.top_logits = cand_logits;
    } else {
        out.logits = logits;
    }

    double t0 = now_ms();
    if ((rc = ebb_model_eval(m, 0, prompt_ids, (uint32_t)n_prompt, 0, &out, &d))) {
        fprintf(stderr, "ebb run: evaluating the prompt failed: %s\n", d.msg);
        goto out;
    }
    double t_prefill = now_ms() - t0, t1 = now_ms();

    struct ebb_detok dt;
    ebb_detok_init(&dt);
    const char *stop = "length";
    size_t n_gen = 0;
    uint32_t pos = (uint32_t)n_prompt;
    while (n_gen < n_gen_max) {
        int32_t t;
        rc = n_cand ? ebb_sampler_sample_candidates(smp, cand_ids, cand_logits, n_cand, &t, NULL)
                    : ebb_sampler_sample(smp, logits, &t, NULL);
        if (rc) {
            fprintf(stderr, "ebb run: no token can be sampled (all banned)\n");
            goto out;
        }
        if (ebb_tokenizer_is_eog(tok, t)) {
            stop = "eog";
            break;
        }
        ebb_sampler_accept(smp, t);
        gen[n_gen++] = t;
        struct ebb_str piece = {0};
        ebb_tokenizer_piece(tok, t, false, &piece);
        size_t w = ebb_detok_push(&dt, piece.p, piece.n, text + text_len, text_cap - text_len);
        if (!o.json && w) {
            fwrite(text + text_len, 1, w, stdout);
            fflush(stdout);
        }
        text_len += w;
        if (n_gen == n_gen_max)
            break; /* no forward pass for a token nobody will read */
        if ((rc = ebb_model_eval(m, 0, &t, 1, pos++, &out, &d))) {
            fprintf(stderr, "\nebb run: decode failed: %s\n", d.msg);
            goto out;
        }
    }
    if (strcmp(stop, "eog") && n_gen < (size_t)o.n_predict)
        stop = "context";
    size_t w = ebb_detok_finish(&dt, text + text_len, text_cap - text_len);
    if (!o.json && w)
        fwrite(text + text_len, 1, w, stdout);
    text_len += w;
    double t_decode = now_ms() - t1;
    /* Decode speed counts the forward passes after the prefill: one per token but the last. */
    size_t n_dec = n_gen > 1 ? n_gen - 1 : 0;
    double pf_tps = t_prefill > 0 ? 1e3 * (double)n_prompt / t_prefill : 0;
    double dec_tps = t_decode > 0 ? 1e3 * (double)n_dec / t_decode : 0;
    if (!o.json)
        printf("\n");
    fprintf(stderr,
            "ebb run: %s on %s; prompt %zu tokens in %.1f ms (%.1f tok/s); generated %zu "
            "tokens, %.1f ms decode (%.2f tok/s); stop: %s\n",
            ebb_model_arch(m), ebb_model_device_name(m), n_prompt, t_prefill, pf_tps, n_gen,
            t_decode, dec_tps, stop);

    uint64_t peak = ebb_peak_rss();
    char sj[8192];
    bool streaming = ebb_model_stream_json(m, sj, sizeof(sj)) > 0;
    if (streaming)
        fprintf(stderr, "ebb run: stream %s\n", sj);
    fprintf(stderr, "ebb run: peak RSS %.1f MiB\n", (double)peak / (1 << 20));
    if (o.json) {
        json_t *ids = json_array(), *pids = json_array();
        for (size_t i = 0; i < n_gen; i++)
            json_array_append_new(ids, json_integer(gen[i]));
        for (size_t i = 0; i < n_prompt; i++)
            json_array_append_new(pids, json_integer(prompt_ids[i]));
        uint64_t seed = ebb_sampler_seed(smp);
        json_t *jseed = seed <= INT64_MAX ? json_integer((json_int_t)seed)
                                          : json_sprintf("%llu", (unsigned long long)seed);
        json_t *j = json_pack(
            "{s:o, s:s%, s:I, s:o, s:s, s:o, s:s, s:{s:f, s:f, s:f, s:f}}", "tokens", ids, "text",
            text, text_len, "prompt_tokens", (json_int_t)n_prompt, "prompt_ids", pids, "stop", stop,
            "seed", jseed, "device", ebb_model_device_name(m), "timings", "prefill_ms", t_prefill,
            "prefill_tok_s", pf_tps, "decode_ms", t_decode, "decode_tok_s", dec_tps);
        if (!j)
            goto oom;
        json_object_set_new(j, "peak_rss_bytes", json_integer((json_int_t)peak));
        if (streaming)
            json_object_set_new(j, "stream", json_loads(sj, 0, NULL));
        json_object_set_new(j, "sampling", jsampling);
        jsampling = NULL;
        json_dumpf(j, stdout, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(15));
        printf("\n");
        json_decref(j);
    }
    status = 0;
    goto out;
oom:
    fprintf(stderr, "ebb run: out of memory\n");
out:
    free(prompt_ids);
    free(gen);
    free(cand_ids);
    free(cand_logits);
    free(logits);
    free(text);
    free(wrapped);
    ebb_sampler_free(smp);
    ebb_model_close(m);
    json_decref(jsampling);
    ebb_config_fini(&cfg);
    return status;
}
