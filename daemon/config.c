/* Configuration: one table of options drives the file, the environment, flags, printing and
 * the reload diff. See config.h for the contract. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "model/model-types.h"

#ifndef EBB_SYSCONFDIR
#define EBB_SYSCONFDIR "/etc"
#endif

enum opt_type {
    T_STR,    /* char *, non-empty */
    T_OPTSTR, /* char *, empty = NULL */
    T_PATH,   /* char *, non-empty, leading ~/ expanded */
    T_OPTPATH,
    T_PORT,   /* uint16_t */
    T_U32,    /* uint32_t in [min, max] */
    T_SIZE,   /* uint64_t bytes, with K/M/G/T suffixes (powers of 1024) */
    T_MS,     /* uint32_t milliseconds, written 10s, 500ms, 2m; a bare number is seconds */
    T_LIST,   /* struct ebb_strlist */
    T_LEVEL,  /* enum ebb_log_level */
    T_FORMAT, /* enum ebb_log_format */
    T_GEN,    /* a generation default: field `min` of a struct ebb_sampling_set */
    T_BOOL,   /* bool: true/false, yes/no, on/off, 1/0 */
    T_KVTYPE, /* enum ebb_kv_type: f16 or q8_0 */
    T_SPLIT,  /* enum ebb_split: auto, none (replica) or layer */
};

struct opt {
    const char *name;
    enum opt_type type;
    size_t off;
    uint32_t min, max;
    unsigned change;
    bool secret;
    const char *arg;
    const char *help;
    const char *section; /* NULL: the top of the file or [serve] */
};

#define OFF(f) offsetof(struct ebb_config, f)
static const struct opt opts[EBB_CFG_N_KEYS] = {
    [EBB_CFG_HOST] = {"host", T_STR, OFF(host), 0, 0, EBB_CONFIG_CHANGE_LISTEN, false, "ADDR",
                      "address to listen on (0.0.0.0 or :: for every interface)"},
    [EBB_CFG_PORT] = {"port", T_PORT, OFF(port), 0, 65535, EBB_CONFIG_CHANGE_LISTEN, false, "PORT",
                      "TCP port (0 picks a free one)"},
    [EBB_CFG_MODEL] = {"model", T_OPTPATH, OFF(model), 0, 0, EBB_CONFIG_CHANGE_MODEL, false, "FILE",
                       "GGUF model: a path, or a file name under models_dir"},
    [EBB_CFG_MODELS_DIR] = {"models_dir", T_PATH, OFF(models_dir), 0, 0, EBB_CONFIG_CHANGE_MODEL,
                            false, "DIR", "directory of GGUF models"},
    [EBB_CFG_CACHE_DIR] = {"cache_dir", T_PATH, OFF(cache_dir), 0, 0, EBB_CONFIG_CHANGE_MODEL,
                           false, "DIR", "cache of compiled kernels"},
    [EBB_CFG_CTX] = {"ctx", T_U32, OFF(ctx), 0, 1u << 24, EBB_CONFIG_CHANGE_MODEL, false, "N",
                     "context length per slot (0 = the model's trained context, capped at "
                     "4096 and by memory; past the trained context: capped at it)"},
    [EBB_CFG_CTX_OVER_TRAINED] = {"ctx_over_trained", T_BOOL, OFF(ctx_over_trained), 0, 0,
                                  EBB_CONFIG_CHANGE_MODEL, false, "BOOL",
                                  "keep a ctx past the model's trained context instead of "
                                  "capping it (output past it usually degrades)"},
    [EBB_CFG_KV_TYPE] = {"kv_type", T_KVTYPE, OFF(kv_type), 0, 0, EBB_CONFIG_CHANGE_MODEL, false,
                         "TYPE",
                         "KV cache element type: f16, or q8_0 (8-bit blocks: about half the "
                         "memory, so twice the context or slots fit)"},
    [EBB_CFG_PARALLEL] = {"parallel", T_U32, OFF(parallel), 1, 256, EBB_CONFIG_CHANGE_MODEL, false,
                          "N", "requests generated at the same time"},
    [EBB_CFG_QUEUE] = {"queue", T_U32, OFF(queue), 0, 1u << 20, EBB_CONFIG_CHANGE_LIMITS, false,
                       "N", "requests waiting for a slot before 503"},
    [EBB_CFG_MAX_BODY] = {"max_body", T_SIZE, OFF(max_body), 0, 0, EBB_CONFIG_CHANGE_LIMITS, false,
                          "SIZE", "largest request body before 413"},
    [EBB_CFG_REQUEST_TIMEOUT] = {"request_timeout", T_MS, OFF(request_timeout_ms), 0, 0,
                                 EBB_CONFIG_CHANGE_LIMITS, false, "TIME",
                                 "close a connection idle this long (0 = never)"},
    [EBB_CFG_HEADER_TIMEOUT] = {"header_timeout", T_MS, OFF(header_timeout_ms), 0, 0,
                                EBB_CONFIG_CHANGE_LIMITS, false, "TIME",
                                "close a connection that has not sent a whole request head "
                                "this long after connecting or after its request line "
                                "(0 = never)"},
    [EBB_CFG_BODY_TIMEOUT] = {"body_timeout", T_MS, OFF(body_timeout_ms), 0, 0,
                              EBB_CONFIG_CHANGE_LIMITS, false, "TIME",
                              "close a connection whose request body is not all in this long "
                              "after its head (0 = never)"},
    [EBB_CFG_MAX_CONNECTIONS] = {"max_connections", T_U32, OFF(max_connections), 0, 1u << 16,
                                 EBB_CONFIG_CHANGE_LIMITS, false, "N",
                                 "open connections served; past it only /health is answered "
                                 "(0 = no cap)"},
    [EBB_CFG_MAX_CONNECTIONS_PER_CLIENT] = {"max_connections_per_client", T_U32,
                                            OFF(max_connections_per_client), 0, 1u << 16,
                                            EBB_CONFIG_CHANGE_LIMITS, false, "N",
                                            "open connections served per client address; past "
                                            "it only /health is answered (0 = no cap)"},
    [EBB_CFG_SILENT_TIMEOUT] = {"silent_timeout", T_MS, OFF(silent_timeout_ms), 0, 0,
                                EBB_CONFIG_CHANGE_LIMITS, false, "TIME",
                                "close a new connection that has not sent a request line this "
                                "long (0 = never)"},
    [EBB_CFG_ACCEPT_RATE] = {"accept_rate", T_U32, OFF(accept_rate), 0, 1u << 20,
                             EBB_CONFIG_CHANGE_LIMITS, false, "N",
                             "new connections accepted per second from one client address, "
                             "bursts of as many (0 = no limit)"},
    [EBB_CFG_ACCEPT_RATE_TOTAL] = {"accept_rate_total", T_U32, OFF(accept_rate_total), 0, 1u << 24,
                                   EBB_CONFIG_CHANGE_LIMITS, false, "N",
                                   "new connections accepted per second in all, except from "
                                   "addresses with none open (0 = no limit)"},
    [EBB_CFG_API_KEY] = {"api_key", T_LIST, OFF(api_keys), 0, 0, EBB_CONFIG_CHANGE_AUTH, true,
                         "KEYS", "comma-separated accepted API keys (empty = no auth)"},
    [EBB_CFG_CORS_ORIGIN] = {"cors_origin", T_LIST, OFF(cors_origins), 0, 0, EBB_CONFIG_CHANGE_CORS,
                             false, "ORIGINS", "comma-separated origins allowed by CORS, or *"},
    [EBB_CFG_ALLOWED_HOSTS] = {"allowed_hosts", T_LIST, OFF(allowed_hosts), 0, 0,
                               EBB_CONFIG_CHANGE_CORS, false, "HOSTS",
                               "comma-separated Host header names (NAME or NAME:PORT) accepted "
                               "besides localhost while listening on loopback, or *"},
    [EBB_CFG_DEVICE] = {"device", T_STR, OFF(device), 0, 0, EBB_CONFIG_CHANGE_MODEL, false, "DEV",
                        "auto, cpu, cl:P:D, part of a device name, or ref; serve: all or "
                        "cl:P:D,cl:P:D (an engine per device)"},
    [EBB_CFG_SPLIT] = {"split", T_SPLIT, OFF(split), 0, 0, EBB_CONFIG_CHANGE_MODEL, false, "MODE",
                       "with several devices: layer (one model's layers spread across them), "
                       "none or replica (a whole copy on each), or auto (layer where the model "
                       "does not fit the smallest device, else replica)"},
    [EBB_CFG_TENSOR_SPLIT] = {"tensor_split", T_OPTSTR, OFF(tensor_split), 0, 0,
                              EBB_CONFIG_CHANGE_MODEL, false, "A,B",
                              "layer split: each device's share of the layers in the device "
                              "list's order (empty = in proportion to free memory)"},
    [EBB_CFG_CHAT_TEMPLATE] = {"chat_template", T_STR, OFF(chat_template), 0, 0,
                               EBB_CONFIG_CHANGE_MODEL, false, "NAME",
                               "auto (from the model) or a template family name"},
    [EBB_CFG_LOG_LEVEL] = {"log_level", T_LEVEL, OFF(log_level), 0, 0, EBB_CONFIG_CHANGE_LOG, false,
                           "LEVEL", "error, warn, info or debug"},
    [EBB_CFG_LOG_FORMAT] = {"log_format", T_FORMAT, OFF(log_format), 0, 0, EBB_CONFIG_CHANGE_LOG,
                            false, "FMT", "text or json"},
    [EBB_CFG_SHUTDOWN_GRACE] = {"shutdown_grace", T_MS, OFF(shutdown_grace_ms), 0, 0,
                                EBB_CONFIG_CHANGE_LIMITS, false, "TIME",
                                "time in-flight requests get to finish on SIGTERM"},
    [EBB_CFG_MEMORY_BUDGET] = {"memory_budget", T_SIZE, OFF(memory_budget), 0, 0,
                               EBB_CONFIG_CHANGE_MODEL, false, "SIZE",
                               "weights + KV + buffers for layer streaming: a size, auto (from "
                               "the memory probes and the cgroup limit) or 0 (no streaming)"},
    [EBB_CFG_PROMPT_CACHE] = {"prompt_cache", T_SIZE, OFF(prompt_cache), 0, 0,
                              EBB_CONFIG_CHANGE_MODEL, false, "SIZE",
                              "device memory for KV prefixes evicted from the slots, reused by "
                              "later prompts that start alike (0 = none)"},
    [EBB_CFG_PREFETCH] = {"prefetch", T_U32, OFF(prefetch), 0, 64, EBB_CONFIG_CHANGE_MODEL, false,
                          "N", "streamed layers read ahead of use (0 = the streamer's default)"},
    [EBB_CFG_HOST_LAYERS] = {"host_layers", T_U32, OFF(host_layers), 0, 4096,
                             EBB_CONFIG_CHANGE_MODEL, false, "N",
                             "with layer streaming: compute the last N non-resident layers on the "
                             "host's cores instead of streaming them (0 = none)"},
    [EBB_CFG_HOST_THREADS] = {"host_threads", T_U32, OFF(host_threads), 0, 64,
                              EBB_CONFIG_CHANGE_MODEL, false, "N",
                              "threads for host layers (0 = the physical cores minus one)"},
    [EBB_CFG_EXPERT_CACHE] = {"expert_cache", T_U32, OFF(expert_cache), 0, 65536,
                              EBB_CONFIG_CHANGE_MODEL, false, "N|auto",
                              "mixture-of-experts models: N expert slots per layer on the device, "
                              "the experts the router picks copied in on demand (0 = off; auto: "
                              "as many as memory_budget leaves)"},
    [EBB_CFG_HOST_Q8] = {"host_q8", T_BOOL, OFF(host_q8), 0, 0, EBB_CONFIG_CHANGE_MODEL, false,
                         "BOOL",
                         "host layers with 8-bit activations (llama.cpp's CPU numerics, AVX2 "
                         "Q4_0 products) instead of the reference's fp32"},
    [EBB_CFG_RESPONSES_STORE] = {"responses_store", T_U32, OFF(responses_store), 0, 1u << 20,
                                 EBB_CONFIG_CHANGE_LIMITS, false, "N",
                                 "responses of /v1/responses kept in memory for "
                                 "previous_response_id and GET, least recently used dropped "
                                 "first (0 = none)"},
    [EBB_CFG_KEEP_ALIVE] = {"keep_alive", T_STR, OFF(keep_alive), 0, 0, EBB_CONFIG_CHANGE_MODEL,
                            false, "TIME",
                            "several models: how long a model stays loaded after its last "
                            "request (5m, 300, -1 = forever, 0 = unload at once)"},
    [EBB_CFG_MODELS_BUDGET] = {"models_budget", T_SIZE, OFF(models_budget), 0, 0,
                               EBB_CONFIG_CHANGE_MODEL, false, "SIZE",
                               "several models: memory all loaded models may take together; "
                               "loading one past it makes idle ones stream layers, else unloads "
                               "the least recently used idle one (0 = no limit)"},
/* [generation]: what a request that does not send the field gets, unless the model's GGUF
 * recommends a value (api/defaults/defaults.h). The names are the request fields'. */
#define GEN(k, name, field, arg, help)                                                             \
    [k] = {name, T_GEN, OFF(generation), field, 0, EBB_CONFIG_CHANGE_GENERATION, false,            \
           arg,  help,  "generation"}
    GEN(EBB_CFG_TEMPERATURE, "temperature", EBB_DEF_TEMPERATURE, "T",
        "default sampling temperature (0 = greedy)"),
    GEN(EBB_CFG_TOP_K, "top_k", EBB_DEF_TOP_K, "K", "default top-k (0 = off)"),
    GEN(EBB_CFG_TOP_P, "top_p", EBB_DEF_TOP_P, "P", "default top-p (1 = off)"),
    GEN(EBB_CFG_MIN_P, "min_p", EBB_DEF_MIN_P, "P", "default min-p (0 = off)"),
    GEN(EBB_CFG_REPEAT_PENALTY, "repeat_penalty", EBB_DEF_REPEAT_PENALTY, "R",
        "default repeat penalty (1 = off)"),
    GEN(EBB_CFG_REPEAT_LAST_N, "repeat_last_n", EBB_DEF_REPEAT_LAST_N, "N",
        "default window of the penalties in tokens (-1 = all)"),
    GEN(EBB_CFG_PRESENCE_PENALTY, "presence_penalty", EBB_DEF_PRESENCE_PENALTY, "X",
        "default presence penalty"),
    GEN(EBB_CFG_FREQUENCY_PENALTY, "frequency_penalty", EBB_DEF_FREQUENCY_PENALTY, "X",
        "default frequency penalty"),
#undef GEN
    [EBB_CFG_MODEL_SAMPLING] = {"model_sampling", T_BOOL, OFF(model_sampling), 0, 0,
                                EBB_CONFIG_CHANGE_GENERATION, false, "BOOL",
                                "true: a model's general.sampling.* values come before the "
                                "defaults above; false: they are ignored",
                                "generation"},
};

#define FIELD(cfg, o, T) ((T *)(void *)((char *)(cfg) + (o)->off))
#define CFIELD(cfg, o, T) ((const T *)(const void *)((const char *)(cfg) + (o)->off))

/* ---- small helpers ---- */

static void strlist_clear(struct ebb_strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

/* The home directory from $HOME, else the password database; NULL if neither knows. */
static const char *home_dir(void)
{
    const char *h = getenv("HOME");
    if (h && h[0] == '/')
        return h;
    struct passwd *pw = getpwuid(getuid());
    return pw && pw->pw_dir && pw->pw_dir[0] == '/' ? pw->pw_dir : NULL;
}

/* "<base>/<tail>" in a new string, where base is $env when it is an absolute path (the first
 * entry of a colon-separated list, as systemd's *_DIRECTORY variables may be), else
 * <home>/<home_rel>, else fallback. */
static char *dir_from(const char *env, const char *home_rel, const char *tail, const char *fallback)
{
    char buf[PATH_MAX];
    const char *e = env ? getenv(env) : NULL;
    if (e && e[0] == '/') {
        size_t len = strcspn(e, ":");
        snprintf(buf, sizeof(buf), "%.*s%s%s", (int)len, e, tail[0] ? "/" : "", tail);
    } else if (home_rel && home_dir()) {
        snprintf(buf, sizeof(buf), "%s/%s%s%s", home_dir(), home_rel, tail[0] ? "/" : "", tail);
    } else {
        return strdup(fallback);
    }
    return strdup(buf);
}

static bool parse_u64(const char *s, uint64_t *out, const char **end)
{
    if (!isdigit((unsigned char)*s))
        return false;
    uint64_t v = 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    *end = s;
    return true;
}

static bool parse_size(const char *s, uint64_t *out)
{
    uint64_t v;
    const char *e;
    if (!parse_u64(s, &v, &e))
        return false;
    unsigned shift = 0;
    switch (tolower((unsigned char)*e)) {
    case 'k':
        shift = 10;
        break;
    case 'm':
        shift = 20;
        break;
    case 'g':
        shift = 30;
        break;
    case 't':
        shift = 40;
        break;
    case 'b':
    case '\0':
        break;
    default:
        return false;
    }
    if (shift) {
        e++;
        if (!strcasecmp(e, "ib") || !strcasecmp(e, "b") || !*e)
            e += strlen(e);
    } else if (*e == 'b' || *e == 'B') {
        e++;
    }
    if (*e || (shift && v > (UINT64_MAX >> shift)))
        return false;
    *out = v << shift;
    return true;
}

static bool parse_ms(const char *s, uint32_t *out)
{
    uint64_t v;
    const char *e;
    if (!parse_u64(s, &v, &e))
        return false;
    uint64_t mul;
    if (!*e || !strcmp(e, "s"))
        mul = 1000;
    else if (!strcmp(e, "ms"))
        mul = 1;
    else if (!strcmp(e, "m") || !strcmp(e, "min"))
        mul = 60000;
    else if (!strcmp(e, "h"))
        mul = 3600000;
    else
        return false;
    if (v > UINT32_MAX / mul)
        return false;
    *out = (uint32_t)(v * mul);
    return true;
}

static ebb_err parse_list(const char *s, struct ebb_strlist *out)
{
    struct ebb_strlist l = {0};
    while (*s) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        const char *a = s, *b = s + len;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (b > a) {
            char **grown = realloc(l.items, (l.n + 1) * sizeof(*grown));
            if (!grown)
                goto nomem;
            l.items = grown;
            if (!(l.items[l.n] = strndup(a, (size_t)(b - a))))
                goto nomem;
            l.n++;
        }
        s += len + (comma ? 1 : 0);
    }
    *out = l;
    return EBB_OK;
nomem:
    strlist_clear(&l);
    return EBB_ENOMEM;
}

/* Parses value for option o into cfg; on a bad value writes the reason to why. */
static ebb_err opt_parse(struct ebb_config *cfg, const struct opt *o, const char *value, char *why,
                         size_t n)
{
    uint64_t u;
    const char *e;
    switch (o->type) {
    case T_STR:
    case T_PATH:
    case T_OPTSTR:
    case T_OPTPATH: {
        char **dst = FIELD(cfg, o, char *);
        char *v = NULL;
        if (!*value && (o->type == T_STR || o->type == T_PATH)) {
            snprintf(why, n, "must not be empty");
            return EBB_EINVAL;
        }
        bool is_path = o->type == T_PATH || o->type == T_OPTPATH;
        if (is_path && value[0] == '~' && (value[1] == '/' || !value[1])) {
            const char *h = home_dir();
            if (!h) {
                snprintf(why, n, "'%s': no home directory to expand ~", value);
                return EBB_EINVAL;
            }
            size_t len = strlen(h) + strlen(value);
            if (!(v = malloc(len)))
                return EBB_ENOMEM;
            snprintf(v, len, "%s%s", h, value + 1);
        } else if (*value && !(v = strdup(value))) {
            return EBB_ENOMEM;
        }
        free(*dst);
        *dst = v;
        return EBB_OK;
    }
    case T_PORT:
    case T_U32:
        if (o->off == offsetof(struct ebb_config, expert_cache) && !strcmp(value, "auto")) {
            *FIELD(cfg, o, uint32_t) = EBB_CONFIG_EXPERT_CACHE_AUTO;
            return EBB_OK;
        }
        if (!parse_u64(value, &u, &e) || *e || u < o->min || u > o->max) {
            snprintf(why, n, "'%s' is not a whole number in %u..%u%s", value, o->min, o->max,
                     o->off == offsetof(struct ebb_config, expert_cache) ? ", or auto" : "");
            return EBB_EINVAL;
        }
        if (o->type == T_PORT)
            *FIELD(cfg, o, uint16_t) = (uint16_t)u;
        else
            *FIELD(cfg, o, uint32_t) = (uint32_t)u;
        return EBB_OK;
    case T_SIZE:
        if (o->off == offsetof(struct ebb_config, memory_budget) && !strcmp(value, "auto")) {
            *FIELD(cfg, o, uint64_t) = EBB_CONFIG_BUDGET_AUTO;
            return EBB_OK;
        }
        if (!parse_size(value, FIELD(cfg, o, uint64_t))) {
            bool budget = o->off == offsetof(struct ebb_config, memory_budget);
            snprintf(why, n, "'%s' is not a size (bytes, or a number with K, M, G or T%s)", value,
                     budget ? "; or auto" : "");
            return EBB_EINVAL;
        }
        return EBB_OK;
    case T_MS:
        if (!parse_ms(value, FIELD(cfg, o, uint32_t))) {
            snprintf(why, n, "'%s' is not a duration (seconds, or a number with ms, s, m or h)",
                     value);
            return EBB_EINVAL;
        }
        return EBB_OK;
    case T_LIST: {
        struct ebb_strlist l;
        if (parse_list(value, &l))
            return EBB_ENOMEM;
        strlist_clear(FIELD(cfg, o, struct ebb_strlist));
        *FIELD(cfg, o, struct ebb_strlist) = l;
        return EBB_OK;
    }
    case T_LEVEL:
        if (!ebb_log_level_parse(value, FIELD(cfg, o, enum ebb_log_level))) {
            snprintf(why, n, "'%s' is not one of error, warn, info, debug", value);
            return EBB_EINVAL;
        }
        return EBB_OK;
    case T_FORMAT:
        if (!ebb_log_format_parse(value, FIELD(cfg, o, enum ebb_log_format))) {
            snprintf(why, n, "'%s' is not one of text, json", value);
            return EBB_EINVAL;
        }
        return EBB_OK;
    case T_GEN:
        return ebb_defaults_parse(FIELD(cfg, o, struct ebb_sampling_set),
                                  (enum ebb_defaults_field)o->min, value, why, n);
    case T_BOOL: {
        static const char *const yes[] = {"true", "yes", "on", "1"};
        static const char *const no[] = {"false", "no", "off", "0"};
        for (size_t i = 0; i < 4; i++) {
            if (!strcasecmp(value, yes[i]) || !strcasecmp(value, no[i])) {
                *FIELD(cfg, o, bool) = !strcasecmp(value, yes[i]);
                return EBB_OK;
            }
        }
        snprintf(why, n, "'%s' is not one of true, false (or yes, no, on, off, 1, 0)", value);
        return EBB_EINVAL;
    }
    case T_KVTYPE: {
        if (!ebb_kv_type_parse(value, FIELD(cfg, o, enum ebb_kv_type))) {
            snprintf(why, n, "'%s' is not one of f16, q8_0", value);
            return EBB_EINVAL;
        }
        return EBB_OK;
    }
    case T_SPLIT:
        if (!ebb_split_parse(value, FIELD(cfg, o, enum ebb_split))) {
            snprintf(why, n, "'%s' is not one of auto, layer, none, replica", value);
            return EBB_EINVAL;
        }
        return EBB_OK;
    }
    return EBB_EINVAL;
}

/* The option called name (dashes or underscores), or NULL. */
static const struct opt *opt_find(const char *name)
{
    char canon[64];
    size_t len = strlen(name);
    if (len == 0 || len >= sizeof(canon))
        return NULL;
    for (size_t i = 0; i <= len; i++)
        canon[i] = name[i] == '-' ? '_' : name[i];
    for (size_t i = 0; i < EBB_CFG_N_KEYS; i++)
        if (!strcmp(opts[i].name, canon))
            return &opts[i];
    return NULL;
}

/* ---- public API ---- */

ebb_err ebb_config_init(struct ebb_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->port = 8077;
    cfg->parallel = 4;
    cfg->queue = 64;
    cfg->max_body = 4u << 20;
    cfg->request_timeout_ms = 300000;
    cfg->header_timeout_ms = 15000;
    cfg->body_timeout_ms = 30000;
    cfg->max_connections = 512;
    cfg->max_connections_per_client = 256;
    cfg->silent_timeout_ms = 5000;
    cfg->accept_rate = 256;
    cfg->accept_rate_total = 4096;
    cfg->log_level = EBB_LOG_INFO;
    cfg->log_format = EBB_LOG_TEXT;
    cfg->shutdown_grace_ms = 10000;
    cfg->prefetch = 2;
    cfg->prompt_cache = 256u << 20;
    cfg->responses_store = 256;
    ebb_defaults_builtin(&cfg->generation.v);
    cfg->generation.mask = 0;
    cfg->model_sampling = true;
    cfg->host = strdup("127.0.0.1");
    cfg->device = strdup("auto");
    cfg->chat_template = strdup("auto");
    cfg->keep_alive = strdup("5m");
    if (getenv("STATE_DIRECTORY") && getenv("STATE_DIRECTORY")[0] == '/')
        cfg->models_dir = dir_from("STATE_DIRECTORY", NULL, "models", "/var/lib/ebb/models");
    else
        cfg->models_dir =
            dir_from("XDG_DATA_HOME", ".local/share", "ebb/models", "/var/lib/ebb/models");
    if (getenv("CACHE_DIRECTORY") && getenv("CACHE_DIRECTORY")[0] == '/')
        cfg->cache_dir = dir_from("CACHE_DIRECTORY", NULL, "", "/var/cache/ebb");
    else
        cfg->cache_dir = dir_from("XDG_CACHE_HOME", ".cache", "ebb", "/var/cache/ebb");
    if (!cfg->host || !cfg->device || !cfg->chat_template || !cfg->models_dir || !cfg->cache_dir ||
        !cfg->keep_alive)
        return EBB_ENOMEM;
    return EBB_OK;
}

void ebb_config_fini(struct ebb_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < EBB_CFG_N_KEYS; i++) {
        const struct opt *o = &opts[i];
        if (o->type == T_STR || o->type == T_OPTSTR || o->type == T_PATH || o->type == T_OPTPATH)
            free(*FIELD(cfg, o, char *));
        else if (o->type == T_LIST)
            strlist_clear(FIELD(cfg, o, struct ebb_strlist));
    }
    for (size_t i = 0; i < cfg->n_models; i++) {
        struct ebb_config_model *m = &cfg->models[i];
        free(m->name);
        free(m->path);
        free(m->chat_template);
        free(m->keep_alive);
    }
    free(cfg->models);
    free(cfg->config_file);
    memset(cfg, 0, sizeof(*cfg));
}

bool ebb_config_is_key(const char *name)
{
    return name && opt_find(name) != NULL;
}

const char *ebb_config_key_section(const char *name)
{
    const struct opt *o = name ? opt_find(name) : NULL;
    return !o ? NULL : o->section ? o->section : "serve";
}

const char *ebb_config_key_name(enum ebb_config_key k)
{
    return (unsigned)k < EBB_CFG_N_KEYS ? opts[k].name : NULL;
}

ebb_err ebb_config_set(struct ebb_config *cfg, const char *key, const char *value,
                       enum ebb_config_source src, int line, struct ebb_diag *diag)
{
    const struct opt *o = opt_find(key);
    char where[PATH_MAX + 32];
    if (src == EBB_CONFIG_SRC_FILE)
        snprintf(where, sizeof(where), "%s:%d: %s", cfg->config_file ? cfg->config_file : "config",
                 line, key);
    else if (src == EBB_CONFIG_SRC_FLAG)
        snprintf(where, sizeof(where), "--%s", key);
    else
        snprintf(where, sizeof(where), "%s", key);
    if (!o)
        return ebb_diag_set(diag, EBB_ENOTFOUND, "%s: unknown option", where);
    char why[256];
    ebb_err rc = opt_parse(cfg, o, value ? value : "", why, sizeof(why));
    if (rc == EBB_ENOMEM)
        return ebb_diag_set(diag, rc, "%s: out of memory", where);
    if (rc)
        return ebb_diag_set(diag, rc, "%s: %s", where, why);
    size_t k = (size_t)(o - opts);
    cfg->source[k] = src;
    cfg->source_line[k] = line;
    return EBB_OK;
}

ebb_err ebb_config_apply_env(struct ebb_config *cfg, struct ebb_diag *diag)
{
    for (size_t i = 0; i < EBB_CFG_N_KEYS; i++) {
        char var[80] = "EBB_";
        for (size_t j = 0; opts[i].name[j] && j + 5 < sizeof(var); j++)
            var[4 + j] = (char)toupper((unsigned char)opts[i].name[j]);
        const char *v = getenv(var);
        if (!v || !*v)
            continue;
        char why[256];
        ebb_err rc = opt_parse(cfg, &opts[i], v, why, sizeof(why));
        if (rc == EBB_ENOMEM)
            return ebb_diag_set(diag, rc, "%s: out of memory", var);
        if (rc)
            return ebb_diag_set(diag, rc, "%s: %s", var, why);
        cfg->source[i] = EBB_CONFIG_SRC_ENV;
        cfg->source_line[i] = 0;
    }
    return EBB_OK;
}

char *ebb_config_user_file(void)
{
    return dir_from("XDG_CONFIG_HOME", ".config", "ebb/ebb.conf", "");
}

/* Formats option o of cfg as config-file text (secrets masked). */
static void opt_format(const struct ebb_config *cfg, const struct opt *o, bool mask, char *buf,
                       size_t n)
{
    static const char units[] = "KMGT";
    buf[0] = '\0';
    switch (o->type) {
    case T_STR:
    case T_OPTSTR:
    case T_PATH:
    case T_OPTPATH: {
        const char *s = *CFIELD(cfg, o, char *);
        snprintf(buf, n, "%s", s ? s : "");
        break;
    }
    case T_PORT:
        snprintf(buf, n, "%u", (unsigned)*CFIELD(cfg, o, uint16_t));
        break;
    case T_U32:
        if (o->off == offsetof(struct ebb_config, expert_cache) &&
            *CFIELD(cfg, o, uint32_t) == EBB_CONFIG_EXPERT_CACHE_AUTO)
            snprintf(buf, n, "auto");
        else
            snprintf(buf, n, "%u", (unsigned)*CFIELD(cfg, o, uint32_t));
        break;
    case T_SIZE: {
        uint64_t v = *CFIELD(cfg, o, uint64_t);
        if (v == EBB_CONFIG_BUDGET_AUTO) {
            snprintf(buf, n, "auto");
            break;
        }
        int u = -1;
        while (v && u < 3 && (v & 1023) == 0) {
            v >>= 10;
            u++;
        }
        if (u >= 0)
            snprintf(buf, n, "%llu%c", (unsigned long long)v, units[u]);
        else
            snprintf(buf, n, "%llu", (unsigned long long)v);
        break;
    }
    case T_MS: {
        uint32_t v = *CFIELD(cfg, o, uint32_t);
        if (v % 1000)
            snprintf(buf, n, "%ums", (unsigned)v);
        else
            snprintf(buf, n, "%us", (unsigned)(v / 1000));
        break;
    }
    case T_LIST: {
        const struct ebb_strlist *l = CFIELD(cfg, o, struct ebb_strlist);
        size_t len = 0;
        for (size_t i = 0; i < l->n && len + 1 < n; i++) {
            int k = snprintf(buf + len, n - len, "%s%s", i ? "," : "",
                             mask && o->secret ? "********" : l->items[i]);
            len += k > 0 ? (size_t)k : 0;
        }
        break;
    }
    case T_LEVEL:
        snprintf(buf, n, "%s", ebb_log_level_name(*CFIELD(cfg, o, enum ebb_log_level)));
        break;
    case T_FORMAT:
        snprintf(buf, n, "%s", ebb_log_format_name(*CFIELD(cfg, o, enum ebb_log_format)));
        break;
    case T_GEN:
        ebb_defaults_format(&CFIELD(cfg, o, struct ebb_sampling_set)->v,
                            (enum ebb_defaults_field)o->min, buf, n);
        break;
    case T_BOOL:
        snprintf(buf, n, "%s", *CFIELD(cfg, o, bool) ? "true" : "false");
        break;
    case T_KVTYPE:
        snprintf(buf, n, "%s", ebb_kv_type_name(*CFIELD(cfg, o, enum ebb_kv_type)));
        break;
    case T_SPLIT:
        snprintf(buf, n, "%s", ebb_split_name(*CFIELD(cfg, o, enum ebb_split)));
        break;
    }
}

void ebb_config_print(const struct ebb_config *cfg, FILE *f)
{
    fprintf(f, "# ebb effective configuration (precedence: flags > EBB_* > file > defaults)\n");
    fprintf(f, "# config file: %s\n", cfg->config_file ? cfg->config_file : "(none)");
    for (size_t i = 0; i < EBB_CFG_N_KEYS; i++) {
        char val[1024], src[PATH_MAX + 32];
        /* A section header where the section changes, so the output reads back as a file. */
        if (opts[i].section && (i == 0 || opts[i - 1].section != opts[i].section)) {
            fprintf(f, "[%s]\n", opts[i].section);
            if (!strcmp(opts[i].section, "generation"))
                fprintf(f, "# a model's own general.sampling.* values come first unless "
                           "model_sampling = false\n");
        }
        opt_format(cfg, &opts[i], true, val, sizeof(val));
        switch (cfg->source[i]) {
        case EBB_CONFIG_SRC_DEFAULT:
            snprintf(src, sizeof(src), "default");
            break;
        case EBB_CONFIG_SRC_FILE:
            snprintf(src, sizeof(src), "file line %d", cfg->source_line[i]);
            break;
        case EBB_CONFIG_SRC_ENV:
            snprintf(src, sizeof(src), "environment");
            break;
        case EBB_CONFIG_SRC_FLAG:
            snprintf(src, sizeof(src), "flag");
            break;
        }
        fprintf(f, "%-15s = %-32s ; %s\n", opts[i].name, val, src);
    }
    for (size_t i = 0; i < cfg->n_models; i++) {
        const struct ebb_config_model *m = &cfg->models[i];
        fprintf(f, "[model.%s]\n", m->name);
        if (m->path)
            fprintf(f, "path = %s\n", m->path);
        fprintf(f, "pin = %s\n", m->pin ? "true" : "false");
        if (m->keep_alive)
            fprintf(f, "keep_alive = %s\n", m->keep_alive);
        if (m->ctx)
            fprintf(f, "ctx = %u\n", m->ctx);
        if (m->parallel)
            fprintf(f, "parallel = %u\n", m->parallel);
        if (m->chat_template)
            fprintf(f, "chat_template = %s\n", m->chat_template);
    }
}

void ebb_config_usage(FILE *f)
{
    struct ebb_config def;
    bool have_def = ebb_config_init(&def) == EBB_OK;
    for (size_t i = 0; i < EBB_CFG_N_KEYS; i++) {
        char flag[64], val[512];
        snprintf(flag, sizeof(flag), "--%s %s", opts[i].name, opts[i].arg);
        for (char *p = flag + 2; *p && *p != ' '; p++)
            if (*p == '_')
                *p = '-';
        val[0] = '\0';
        if (have_def)
            opt_format(&def, &opts[i], true, val, sizeof(val));
        fprintf(f, "  %-26s %s%s%s%s\n", flag, opts[i].help, val[0] ? " (default " : "", val,
                val[0] ? ")" : "");
    }
    ebb_config_fini(&def);
}

ebb_err ebb_config_model_path(const struct ebb_config *cfg, char *buf, size_t n)
{
    if (!cfg->model)
        return EBB_ENOENT;
    int k;
    if (strchr(cfg->model, '/')) {
        k = snprintf(buf, n, "%s", cfg->model);
    } else {
        k = snprintf(buf, n, "%s/%s", cfg->models_dir, cfg->model);
        size_t len = strlen(cfg->model);
        if (k >= 0 && (size_t)k < n && access(buf, F_OK) != 0 &&
            (len < 5 || strcmp(cfg->model + len - 5, ".gguf") != 0)) {
            char alt[PATH_MAX];
            int k2 = snprintf(alt, sizeof(alt), "%s.gguf", buf);
            if (k2 > 0 && (size_t)k2 < sizeof(alt) && (size_t)k2 < n && access(alt, F_OK) == 0)
                k = snprintf(buf, n, "%s", alt);
        }
    }
    return k < 0 || (size_t)k >= n ? EBB_ERANGE : EBB_OK;
}

unsigned ebb_config_diff(const struct ebb_config *a, const struct ebb_config *b)
{
    unsigned bits = 0;
    for (size_t i = 0; i < EBB_CFG_N_KEYS; i++) {
        const struct opt *o = &opts[i];
        bool differ;
        if (o->type == T_LIST) {
            const struct ebb_strlist *la = CFIELD(a, o, struct ebb_strlist);
            const struct ebb_strlist *lb = CFIELD(b, o, struct ebb_strlist);
            differ = la->n != lb->n;
            for (size_t j = 0; !differ && j < la->n; j++)
                differ = strcmp(la->items[j], lb->items[j]) != 0;
        } else {
            char va[1024], vb[1024];
            opt_format(a, o, false, va, sizeof(va));
            opt_format(b, o, false, vb, sizeof(vb));
            differ = strcmp(va, vb) != 0;
        }
        if (differ)
            bits |= o->change;
    }
    /* [model.NAME] sections: any difference is a change of the models. */
    bool models = a->n_models != b->n_models;
    for (size_t i = 0; !models && i < a->n_models; i++) {
        const struct ebb_config_model *x = &a->models[i], *y = &b->models[i];
        models = strcmp(x->name, y->name) || x->pin != y->pin || x->ctx != y->ctx ||
                 x->parallel != y->parallel || !x->path != !y->path ||
                 (x->path && strcmp(x->path, y->path)) || !x->keep_alive != !y->keep_alive ||
                 (x->keep_alive && strcmp(x->keep_alive, y->keep_alive)) ||
                 !x->chat_template != !y->chat_template ||
                 (x->chat_template && strcmp(x->chat_template, y->chat_template));
    }
    if (models)
        bits |= EBB_CONFIG_CHANGE_MODEL;
    return bits;
}
