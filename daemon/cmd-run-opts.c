/* `ebb run`'s command line: the options, their values checked, and the help text. The
 * sampling flags use the same names, ranges and parser as the config file and requests
 * (api/defaults/defaults.h). */
#include "cmd-run-int.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream-opts.h"

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
            "  -m, --model MODEL       GGUF file, or a catalogue name (an id or unique prefix, as\n"
            "                          ebb serve lists; also ebb run NAME) (required)\n"
            "  -p, --prompt PROMPT     prompt text (required)\n"
            "  -n, --n-predict N       tokens to generate (default 128)\n"
            "      --temp T, --temperature T\n"
            "                          temperature, 0..2; 0 = greedy (default 0.8)\n"
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
            "      --config FILE       read the [generation] defaults from this file\n");
    fprintf(f,
            "      --chat              render the prompt as a user turn with the model's chat\n"
            "                          template (its tokenizer.chat_template, interpreted as\n"
            "                          the server does) and open the assistant's turn\n"
            "      --chat-template NAME  with --chat: use this built-in family instead (chatml,\n"
            "                          gemma, llama3, mistral)\n"
            "      --system TEXT       with --chat: a system message first\n"
            "      --json              print one JSON object at the end (tokens, text,\n"
            "                          prompt_tokens, timings) instead of streaming\n"
            "      --device D          compute device: auto (an OpenCL GPU, else cpu), cpu\n"
            "                          (every layer on this machine's cores, SIMD 8-bit\n"
            "                          products: the fast path without a GPU), cl (OpenCL even\n"
            "                          on a CPU), cl:P:D, a name substring, ref (the plain-C\n"
            "                          reference, fp32) or ref-q8 (the reference with\n"
            "                          llama.cpp's CPU rounding: Q8 activations, fp16 KV)\n"
            "                          (default auto)\n"
            "      --ctx N             context length in tokens (default: the model's trained\n"
            "                          context, capped at 4096 and by memory); a longer one\n"
            "                          than trained is capped at it, with a warning\n"
            "      --ctx-over-trained  keep a --ctx longer than the trained context (output\n"
            "                          past it usually degrades)\n"
            "      --kv-type T         KV cache element type: f16, or q8_0 (8-bit blocks,\n"
            "                          about half the memory) (default f16, or the config's\n"
            "                          kv_type)\n"
            "      --spec ngram        speculative decoding: draft tokens from the prompt and\n"
            "                          the text so far (n-gram lookup) and verify them in one\n"
            "                          pass; the output is the same as without (see\n"
            "                          docs/STREAMER.md) (default off)\n"
            "      --draft MODEL       speculative decoding with drafts from a small model of\n"
            "                          the same tokenizer (its greedy choices), kept resident\n"
            "                          on the same device (--spec draft)\n"
            "      --draft-max K       with --spec: at most K drafts per pass, 1..64 (default 8)\n"
            "      --draft-min N       with --spec: verify no fewer than N drafts (default 1)\n"
            "      --draft-fixed       with --spec: always K drafts (no adaptation to the\n"
            "                          measured acceptance and pass cost)\n"
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

static bool parse_long(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* A sampling flag: the same field names, ranges and parser as the config file and requests. */
static bool sampling_flag(struct ebb__run_opts *o, enum ebb_defaults_field f, const char *text)
{
    struct ebb_sampling_set set = {.v = o->sp, .mask = 0};
    char why[128];
    if (ebb_defaults_parse(&set, f, text, why, sizeof(why)))
        return false;
    o->sp = set.v;
    o->sent |= EBB_DEF_BIT(f);
    return true;
}

int ebb__run_parse(int argc, char **argv, struct ebb__run_opts *o)
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
        O_CONFIG,
        O_SPEC,
        O_DMAX,
        O_DMIN,
        O_DFIXED,
        O_DRAFT,
        O_OVER,
        O_KV
    };
    static const struct option longs[] = {
        {"model", required_argument, NULL, 'm'},
        {"prompt", required_argument, NULL, 'p'},
        {"n-predict", required_argument, NULL, 'n'},
        {"temp", required_argument, NULL, O_TEMP},
        {"temperature", required_argument, NULL, O_TEMP},
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
        {"ctx-over-trained", no_argument, NULL, O_OVER},
        {"kv-type", required_argument, NULL, O_KV},
        {"spec", required_argument, NULL, O_SPEC},
        {"draft-max", required_argument, NULL, O_DMAX},
        {"draft-min", required_argument, NULL, O_DMIN},
        {"draft-fixed", no_argument, NULL, O_DFIXED},
        {"draft", required_argument, NULL, O_DRAFT},
        {"help", no_argument, NULL, 'h'},
        EBB_STREAM_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof(*o));
    o->n_predict = 128;
    o->device = "auto";
    ebb_sampling_defaults(&o->sp); /* fields no flag sets are resolved once the model is open */
    ebb_spec_params_defaults(&o->specp);
    bool spec_flags = false, spec_draft = false;
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
        case O_OVER:
            o->ctx_over_trained = true;
            break;
        case O_KV:
            ok = ebb_kv_type_parse(optarg, &o->stream.kv_type);
            o->kv_type_set = ok;
            break;
        case O_SPEC:
            ok = !strcmp(optarg, "ngram") || !strcmp(optarg, "draft") || !strcmp(optarg, "off");
            o->spec = strcmp(optarg, "off") != 0;
            spec_draft = !strcmp(optarg, "draft");
            break;
        case O_DRAFT:
            o->draft = optarg;
            o->spec = true;
            break;
        case O_DMAX:
            ok = parse_long(optarg, 1, EBB_SPEC_DRAFT_CAP, &v);
            o->specp.draft_max = (uint32_t)v;
            spec_flags = true;
            break;
        case O_DMIN:
            ok = parse_long(optarg, 1, EBB_SPEC_DRAFT_CAP, &v);
            o->specp.draft_min = (uint32_t)v;
            spec_flags = true;
            break;
        case O_DFIXED:
            o->specp.fixed_k = true;
            spec_flags = true;
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
        case EBB_SOPT_HOST_LAYERS:
        case EBB_SOPT_HOST_THREADS:
        case EBB_SOPT_HOST_Q8:
        case EBB_SOPT_EXPERT_CACHE:
        case EBB_SOPT_SPLIT:
        case EBB_SOPT_TENSOR_SPLIT:
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
    if (optind < argc && !o->model)
        o->model = argv[optind++]; /* ebb run NAME -p ... */
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
    if (spec_flags && !o->spec) {
        fprintf(stderr, "ebb run: --draft-max, --draft-min and --draft-fixed need --spec\n");
        return 2;
    }
    if (spec_draft && !o->draft) {
        fprintf(stderr, "ebb run: --spec draft needs --draft MODEL\n");
        return 2;
    }
    if (o->specp.draft_min > o->specp.draft_max) {
        fprintf(stderr, "ebb run: --draft-min %u exceeds --draft-max %u\n", o->specp.draft_min,
                o->specp.draft_max);
        return 2;
    }
    return -1; /* go on */
}
