/* `ebb serve`'s command line: the serve-only flags, every config key as --key VALUE or
 * --key=VALUE (checked and applied later by ebb_config_build, with the file and the
 * environment), and the help text. */
#include "daemon/serve-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ebb serve [-m MODEL] [flags]\n\n"
            "Serves an OpenAI-compatible API (/v1/chat/completions, /v1/completions,\n"
            "/v1/responses, /v1/embeddings, /v1/models), Anthropic's /v1/messages, and /health,\n"
            "/metrics, /tokenize, /detokenize for one GGUF model, or for several by name. The\n"
            "context per slot it chose, and why, is logged at start-up; ebb info MODEL shows\n"
            "the same choice.\n\n"
            "Without -m (and no model in the config), every .gguf under models_dir is served:\n"
            "a request's \"model\" picks one (its id or a unique prefix), which loads on its\n"
            "first request and unloads after keep_alive idle; [model.NAME] config sections\n"
            "name and pin models. -m repeated, or -m DIR, serves those models the same way.\n\n"
            "flags (each also settable as EBB_<NAME> or in the config file):\n"
            "  -m FILE|DIR                the model, as --model: a path, or a file name under\n"
            "                             models_dir (.gguf may be left off); repeatable\n");
    ebb_config_usage(f);
    fprintf(f, "  --api-key, --cors-origin, --allowed-hosts may be repeated; their values add up.\n"
               "  --temp T is --temperature T, as in ebb run.\n\n"
               "serve-only flags:\n"
               "  --config FILE              read this config file\n"
               "  --check-config             print the effective configuration and exit\n"
               "  --http-poll MODE           epoll (Linux) or fdset (portable) (default epoll)\n"
               "  --keepalive-ms N           SSE keep-alive comment interval (default 2000)\n"
               "  --prefill-chunk N          prompt tokens per engine step (default 128)\n"
               "  --spec ngram|off           speculative decoding with n-gram drafts for requests\n"
               "                             that do not set \"speculative\" (default off)\n"
               "  --draft-max K              drafts per pass at most, 1..64 (default 8)\n"
               "  -h, --help                 this help\n\n"
               "Once listening it prints 'ebb: listening on http://HOST:PORT' on stdout.\n");
}

/* Appends value to a comma-separated accumulator (repeatable list flags). */
static char *join(char *acc, const char *v)
{
    size_t n = acc ? strlen(acc) : 0, m = strlen(v);
    char *p = realloc(acc, n + m + 2);
    if (!p)
        return acc;
    if (n)
        p[n++] = ',';
    memcpy(p + n, v, m + 1);
    return p;
}

/* Splits argv[*i] into a flag name and its value (the rest after '=', or the next argument).
 * Returns 0, or 2 with the reason printed. */
static int flag_of(int argc, char **argv, int *i, char *name, size_t cap, const char **val)
{
    const char *a = argv[*i];
    *val = NULL;
    if (!strcmp(a, "-m")) {
        snprintf(name, cap, "model");
    } else if (!strcmp(a, "--temp") || !strncmp(a, "--temp=", 7)) {
        /* ebb run's spelling of --temperature (llama.cpp's too) */
        snprintf(name, cap, "temperature");
        if (a[6] == '=')
            *val = a + 7;
    } else if (!strncmp(a, "--", 2)) {
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (len >= cap) {
            fprintf(stderr, "ebb serve: unknown flag '%s' (see --help)\n", a);
            return 2;
        }
        memcpy(name, a + 2, len);
        name[len] = 0;
        if (eq)
            *val = eq + 1;
    } else {
        fprintf(stderr, "ebb serve: unexpected argument '%s' (see --help)\n", a);
        return 2;
    }
    if (!*val) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "ebb serve: %s needs a value\n", a);
            return 2;
        }
        *val = argv[++*i];
    }
    return 0;
}

/* One flag with its value. Returns 0, 1 (out of memory) or 2 (usage, printed). */
static int apply_flag(struct ebb__serve_opts *o, const char *name, const char *val)
{
    if (!strcmp(name, "config")) {
        o->config_path = val;
    } else if (!strcmp(name, "http-poll")) {
        if (!strcmp(val, "epoll"))
            o->poll = EBB_API_POLL_EPOLL;
        else if (!strcmp(val, "fdset"))
            o->poll = EBB_API_POLL_FDSET;
        else {
            fprintf(stderr, "ebb serve: --http-poll must be epoll or fdset\n");
            return 2;
        }
    } else if (!strcmp(name, "keepalive-ms") || !strcmp(name, "prefill-chunk")) {
        char *end;
        unsigned long v = strtoul(val, &end, 10);
        if (*end || !*val || v == 0 || v > 3600000) {
            fprintf(stderr, "ebb serve: --%s needs a positive integer\n", name);
            return 2;
        }
        *(name[0] == 'k' ? &o->keepalive_ms : &o->prefill_chunk) = (unsigned)v;
    } else if (!strcmp(name, "spec")) {
        if (strcmp(val, "ngram") && strcmp(val, "off")) {
            fprintf(stderr, "ebb serve: --spec must be ngram or off\n");
            return 2;
        }
        o->spec = !strcmp(val, "ngram");
    } else if (!strcmp(name, "draft-max")) {
        char *end;
        unsigned long v = strtoul(val, &end, 10);
        if (*end || !*val || v == 0 || v > 64) {
            fprintf(stderr, "ebb serve: --draft-max needs an integer in 1..64\n");
            return 2;
        }
        o->draft_max = (unsigned)v;
    } else if (!strcmp(name, "api-key") || !strcmp(name, "api_key")) {
        o->keys = join(o->keys, val);
    } else if (!strcmp(name, "cors-origin") || !strcmp(name, "cors_origin")) {
        o->origins = join(o->origins, val);
    } else if (!strcmp(name, "allowed-hosts") || !strcmp(name, "allowed_hosts")) {
        o->hosts = join(o->hosts, val);
    } else if (ebb_config_is_key(name)) {
        if (!strcmp(name, "model"))
            o->models[o->n_models++] = val;
        char *k = strdup(name);
        if (!k)
            return 1;
        o->args[o->n_args].key = k;
        o->args[o->n_args++].value = val;
    } else {
        fprintf(stderr, "ebb serve: unknown flag '--%s' (see --help)\n", name);
        return 2;
    }
    return 0;
}

int ebb__serve_parse(int argc, char **argv, struct ebb__serve_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->poll = EBB_API_POLL_AUTO;
    if (!(o->args = calloc((size_t)argc + 2, sizeof(*o->args))) ||
        !(o->models = calloc((size_t)argc + 1, sizeof(*o->models))))
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            o->help = true;
            return 0;
        }
        if (!strcmp(a, "--check-config")) {
            o->check = true;
            continue;
        }
        char name[64];
        const char *val;
        int rc = flag_of(argc, argv, &i, name, sizeof(name), &val);
        if (!rc)
            rc = apply_flag(o, name, val);
        if (rc)
            return rc;
    }
    /* Several -m naming one model id: the last one wins, as for any repeated flag (the
     * configuration's model is the last -m); naming several: a catalogue (serve.c). */
    size_t n = 0;
    for (size_t i = 0; i < o->n_models; i++) {
        char id[256], other[256];
        ebb__serve_model_id(o->models[i], id, sizeof(id));
        size_t j = 0;
        for (; j < n; j++) {
            ebb__serve_model_id(o->models[j], other, sizeof(other));
            if (!strcmp(id, other))
                break;
        }
        o->models[j] = o->models[i];
        n += j == n;
    }
    o->n_models = n;
    /* The repeatable lists go to the configuration as one comma-separated value each. */
    if (o->keys) {
        o->args[o->n_args].key = strdup("api-key");
        o->args[o->n_args++].value = o->keys;
    }
    if (o->origins) {
        o->args[o->n_args].key = strdup("cors-origin");
        o->args[o->n_args++].value = o->origins;
    }
    if (o->hosts) {
        o->args[o->n_args].key = strdup("allowed-hosts");
        o->args[o->n_args++].value = o->hosts;
    }
    return 0;
}

void ebb__serve_opts_fini(struct ebb__serve_opts *o)
{
    for (size_t i = 0; o->args && i < o->n_args; i++)
        free((char *)o->args[i].key);
    free(o->args);
    free(o->models);
    free(o->keys);
    free(o->origins);
    free(o->hosts);
    memset(o, 0, sizeof(*o));
}
