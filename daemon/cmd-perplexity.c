/* `ebb perplexity`: perplexity of a model over a text file, computed the way llama.cpp's
 * perplexity tool does so the numbers can be compared: the text is tokenized once (BOS only if
 * the model's metadata asks for it), cut into floor(n_tokens / ctx) windows of ctx tokens,
 * each evaluated from an empty cache with its first token replaced by BOS when the model adds
 * BOS, and only the second half of each window is scored: the logits at positions
 * ctx/2 .. ctx-2 predict the tokens after them. PPL = exp(mean negative log-likelihood). */
#include "cmds.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

static void ppl_usage(FILE *f)
{
    fprintf(f, "usage: ebb perplexity -m MODEL -f FILE [--ctx N] [--chunks N] [--json] "
               "[--device D] [--kv-type T]\n"
               "\n"
               "Perplexity of MODEL over the text in FILE, as llama.cpp's perplexity tool\n"
               "computes it: windows of N tokens, each scored on its second half. Prints the\n"
               "running value after each window ([1]12.3456,[2]...) and the final estimate.\n"
               "\n"
               "options:\n"
               "  -m, --model MODEL  GGUF file (required)\n"
               "  -f, --file FILE    UTF-8 text file (required); it must hold at least 2 x N\n"
               "                     tokens\n"
               "      --ctx N        window length in tokens (default 512)\n"
               "      --chunks N     score only the first N windows (default: all)\n"
               "      --json         print one JSON object (ppl, windows, tokens) instead\n"
               "      --device D     compute device: auto, cpu, cl, cl:P:D, a name substring,\n"
               "                     ref or ref-q8 (see ebb run --help) (default auto)\n"
               "      --kv-type T    KV cache element type: f16 or q8_0 (default f16)\n"
               "  -h, --help         show this help\n"
               "\n"
               "exit status: 0 success, 1 model, file or device error, 2 usage error\n");
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap)
            break;
        char *nb = cap < (SIZE_MAX / 2) ? realloc(buf, cap * 2) : NULL;
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    if (ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n = len;
    return buf;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int ebb_cmd_perplexity(int argc, char **argv)
{
    enum { O_CTX = 256, O_CHUNKS, O_JSON, O_DEV, O_KV };
    static const struct option longs[] = {
        {"model", required_argument, NULL, 'm'},
        {"file", required_argument, NULL, 'f'},
        {"ctx", required_argument, NULL, O_CTX},
        {"chunks", required_argument, NULL, O_CHUNKS},
        {"json", no_argument, NULL, O_JSON},
        {"device", required_argument, NULL, O_DEV},
        {"kv-type", required_argument, NULL, O_KV},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *model_path = NULL, *file = NULL, *device = "auto";
    long ctx = 512, max_chunks = -1;
    bool json = false;
    enum ebb_kv_type kv_type = EBB_KV_F16;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":m:f:h", longs, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'm':
            model_path = optarg;
            break;
        case 'f':
            file = optarg;
            break;
        case O_CTX:
            ctx = strtol(optarg, &end, 10);
            if (*end || ctx < 4 || ctx > (1 << 20)) {
                fprintf(stderr, "ebb perplexity: bad --ctx '%s' (4 or more)\n", optarg);
                return 2;
            }
            break;
        case O_CHUNKS:
            max_chunks = strtol(optarg, &end, 10);
            if (*end || max_chunks < 1) {
                fprintf(stderr, "ebb perplexity: bad --chunks '%s'\n", optarg);
                return 2;
            }
            break;
        case O_JSON:
            json = true;
            break;
        case O_DEV:
            device = optarg;
            break;
        case O_KV:
            if (!ebb_kv_type_parse(optarg, &kv_type)) {
                fprintf(stderr, "ebb perplexity: bad --kv-type '%s' (f16 or q8_0)\n", optarg);
                return 2;
            }
            break;
        case 'h':
            ppl_usage(stdout);
            return 0;
        case ':':
            fprintf(stderr, "ebb perplexity: option '%s' needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "ebb perplexity: unknown option '%s'\n", argv[optind - 1]);
            ppl_usage(stderr);
            return 2;
        }
    }
    if (optind < argc || !model_path || !file) {
        fprintf(stderr, "ebb perplexity: -m MODEL and -f FILE are required (see --help)\n");
        return 2;
    }

    int status = 1;
    struct ebb_model *m = NULL;
    int32_t *toks = NULL;
    float *logits = NULL;
    size_t text_len = 0;
    char *text = read_file(file, &text_len);
    struct ebb_diag d = {{0}};
    ebb_err rc;
    if (!text) {
        fprintf(stderr, "ebb perplexity: cannot read '%s'\n", file);
        goto out;
    }
    struct ebb_model_params mp = {
        .path = model_path, .device = device, .n_ctx = (uint32_t)ctx, .n_seq = 1};
    mp.kv_type = kv_type;
    if ((rc = ebb_model_open(&mp, &m, &d))) {
        fprintf(stderr, "ebb perplexity: cannot load '%s': %s\n", model_path,
                d.msg[0] ? d.msg : ebb_err_str(rc));
        goto out;
    }
    const struct ebb_tokenizer *tok = ebb_model_tokenizer(m);
    const uint32_t V = ebb_model_n_vocab(m);
    size_t n_tok = 0, cap = text_len + 8;
    if (!(toks = malloc(cap * sizeof(int32_t))))
        goto oom;
    rc = ebb_tokenizer_encode(tok, text, text_len, EBB_TOK_ADD_SPECIAL, toks, cap, &n_tok);
    if (rc) {
        fprintf(stderr, "ebb perplexity: cannot tokenize '%s': %s\n", file, ebb_err_str(rc));
        goto out;
    }
    if (n_tok < 2 * (size_t)ctx) {
        fprintf(stderr, "ebb perplexity: '%s' is %zu tokens; at least 2 x ctx = %ld are needed\n",
                file, n_tok, 2 * ctx);
        goto out;
    }
    size_t n_chunk = n_tok / (size_t)ctx;
    if (max_chunks > 0 && (size_t)max_chunks < n_chunk)
        n_chunk = (size_t)max_chunks;
    const uint32_t first = (uint32_t)ctx / 2, n_score = (uint32_t)ctx - first;
    bool add_bos = ebb_tokenizer_add_bos(tok) && ebb_tokenizer_bos(tok) >= 0;
    if (!(logits = malloc((size_t)n_score * V * sizeof(float))))
        goto oom;
    if (!json)
        fprintf(stderr, "ebb perplexity: %zu tokens, %zu windows of %ld on %s\n", n_tok, n_chunk,
                ctx, ebb_model_device_name(m));

    double nll = 0, t0 = now_ms();
    size_t count = 0;
    for (size_t ch = 0; ch < n_chunk; ch++) {
        int32_t *w = toks + ch * (size_t)ctx;
        int32_t saved = w[0];
        if (add_bos)
            w[0] = ebb_tokenizer_bos(tok);
        /* The first half only fills the cache; the second half returns logits per token. */
        struct ebb_model_out none = {0}, all = {.logits_all = logits};
        rc = ebb_model_eval(m, 0, w, first, 0, &none, &d);
        if (!rc)
            rc = ebb_model_eval(m, 0, w + first, n_score, first, &all, &d);
        w[0] = saved;
        if (rc) {
            fprintf(stderr, "ebb perplexity: evaluation failed: %s\n", d.msg);
            goto out;
        }
        /* Row j (position first + j) predicts the token at first + j + 1. */
        for (uint32_t j = 0; j + 1 < n_score; j++) {
            const float *row = logits + (size_t)j * V;
            float mx = row[0];
            for (uint32_t i = 1; i < V; i++)
                mx = row[i] > mx ? row[i] : mx;
            double z = 0;
            for (uint32_t i = 0; i < V; i++)
                z += exp((double)row[i] - mx);
            nll += (double)mx + log(z) - row[w[first + j + 1]];
            count++;
        }
        if (!json) {
            printf("[%zu]%.4f,", ch + 1, exp(nll / (double)count));
            fflush(stdout);
        }
    }
    double ppl = exp(nll / (double)count), ms = now_ms() - t0;
    if (json) {
        json_t *j = json_pack("{s:f, s:f, s:I, s:I, s:I, s:I, s:b, s:f, s:s}", "ppl", ppl, "nll",
                              nll / (double)count, "n_ctx", (json_int_t)ctx, "n_chunks",
                              (json_int_t)n_chunk, "n_tokens", (json_int_t)n_tok, "n_scored",
                              (json_int_t)count, "add_bos", add_bos, "ms", ms, "kv_type",
                              ebb_kv_type_name(kv_type));
        if (!j)
            goto oom;
        json_dumpf(j, stdout, JSON_COMPACT);
        printf("\n");
        json_decref(j);
    } else {
        printf("\nFinal estimate: PPL = %.4f (%zu windows, %zu tokens scored, %.1f s)\n", ppl,
               n_chunk, count, ms / 1e3);
    }
    status = 0;
    goto out;
oom:
    fprintf(stderr, "ebb perplexity: out of memory\n");
out:
    free(text);
    free(toks);
    free(logits);
    ebb_model_close(m);
    return status;
}
