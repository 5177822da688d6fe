/* The daemon's configuration: built-in defaults, an INI file (inih), EBB_* environment variables
 * and command-line flags, with the precedence flags > environment > file > defaults.
 *
 * Every option has one name used everywhere: the INI key and the flag are the same words
 * (`max_body` in the file, `--max-body` on the command line, `EBB_MAX_BODY` in the environment).
 * The table of options lives in config.c; config/ebb.conf documents each one.
 *
 * Not thread-safe: build and read a config on one thread (the loop thread); a reload builds a
 * new one and swaps it in (see ebb_config_diff). */
#ifndef EBB_DAEMON_CONFIG_H
#define EBB_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "api/defaults/defaults.h"
#include "base/log.h"
#include "base/err.h"
#include "model/model-types.h"

/* A list option (api_key, cors_origin, allowed_hosts): comma-separated in the file, the
 * environment and flags; blanks around items are trimmed and empty items dropped. */
struct ebb_strlist {
    char **items;
    size_t n;
};

/* Where an option's value came from, for --check-config. */
enum ebb_config_source {
    EBB_CONFIG_SRC_DEFAULT = 0,
    EBB_CONFIG_SRC_FILE,
    EBB_CONFIG_SRC_ENV,
    EBB_CONFIG_SRC_FLAG,
};

/* Option indices, in the order of the table in config.c (and of --check-config output). */
enum ebb_config_key {
    EBB_CFG_HOST,
    EBB_CFG_PORT,
    EBB_CFG_MODEL,
    EBB_CFG_MODELS_DIR,
    EBB_CFG_CACHE_DIR,
    EBB_CFG_CTX,
    EBB_CFG_CTX_OVER_TRAINED,
    EBB_CFG_KV_TYPE,
    EBB_CFG_PARALLEL,
    EBB_CFG_QUEUE,
    EBB_CFG_MAX_BODY,
    EBB_CFG_REQUEST_TIMEOUT,
    EBB_CFG_HEADER_TIMEOUT,
    EBB_CFG_BODY_TIMEOUT,
    EBB_CFG_MAX_CONNECTIONS,
    EBB_CFG_MAX_CONNECTIONS_PER_CLIENT,
    EBB_CFG_SILENT_TIMEOUT,
    EBB_CFG_ACCEPT_RATE,
    EBB_CFG_ACCEPT_RATE_TOTAL,
    EBB_CFG_API_KEY,
    EBB_CFG_CORS_ORIGIN,
    EBB_CFG_ALLOWED_HOSTS,
    EBB_CFG_DEVICE,
    EBB_CFG_SPLIT,
    EBB_CFG_TENSOR_SPLIT,
    EBB_CFG_CHAT_TEMPLATE,
    EBB_CFG_LOG_LEVEL,
    EBB_CFG_LOG_FORMAT,
    EBB_CFG_SHUTDOWN_GRACE,
    EBB_CFG_MEMORY_BUDGET,
    EBB_CFG_PREFETCH,
    EBB_CFG_HOST_LAYERS,
    EBB_CFG_HOST_THREADS,
    EBB_CFG_HOST_Q8,
    EBB_CFG_EXPERT_CACHE,
    EBB_CFG_PROMPT_CACHE,
    EBB_CFG_RESPONSES_STORE,
    EBB_CFG_KEEP_ALIVE,
    EBB_CFG_MODELS_BUDGET,
    /* [generation]: defaults for the sampling fields a request does not send
       (api/defaults/defaults.h) */
    EBB_CFG_TEMPERATURE,
    EBB_CFG_TOP_K,
    EBB_CFG_TOP_P,
    EBB_CFG_MIN_P,
    EBB_CFG_REPEAT_PENALTY,
    EBB_CFG_REPEAT_LAST_N,
    EBB_CFG_PRESENCE_PENALTY,
    EBB_CFG_FREQUENCY_PENALTY,
    EBB_CFG_MODEL_SAMPLING,
    EBB_CFG_N_KEYS
};

/* memory_budget = auto */
#define EBB_CONFIG_BUDGET_AUTO UINT64_MAX
/* expert_cache = auto: the slots memory_budget leaves (EBB_EXPERT_CACHE_AUTO) */
#define EBB_CONFIG_EXPERT_CACHE_AUTO UINT32_MAX

struct ebb_config {
    char *host;                      /* listen address; "127.0.0.1" */
    uint16_t port;                   /* 8077; 0 picks a free port */
    char *model;                     /* GGUF path, or a file name under models_dir; NULL = none */
    char *models_dir;                /* see ebb_config_init for the default */
    char *cache_dir;                 /* compiled-kernel cache */
    uint32_t ctx;                    /* KV length per slot; 0 = the model's trained context,
                                        capped at 4096 and by memory; past the trained
                                        context capped at it unless ctx_over_trained */
    bool ctx_over_trained;           /* keep a ctx past the trained context; false */
    enum ebb_kv_type kv_type;        /* the KV cache's element type; f16 */
    uint32_t parallel;               /* sequence slots served at once; 4 */
    uint32_t queue;                  /* waiting requests before 503; 64 */
    uint64_t max_body;               /* bytes of a request body before 413; 4 MiB */
    uint32_t request_timeout_ms;     /* idle connection timeout; 300 s */
    struct ebb_strlist api_keys;     /* accepted keys; empty = no auth */
    struct ebb_strlist cors_origins; /* allowed origins ("*" allowed); empty = no CORS headers */
    char *device;                    /* "auto", "cl:P:D", a device-name substring, or "ref" */
    enum ebb_split split;            /* several devices: layer split or data parallel; auto */
    char *tensor_split;              /* layer split: each device's share ("3,1"); NULL = by
                                        free memory */
    char *chat_template;             /* "auto" (from the GGUF) or a family name */
    enum ebb_log_level log_level;    /* info */
    enum ebb_log_format log_format;  /* text */
    uint32_t shutdown_grace_ms;      /* in-flight requests may finish for this long; 10 s */
    uint64_t memory_budget;          /* layer streaming budget in bytes; 0 = no streaming,
                                        EBB_CONFIG_BUDGET_AUTO = from the memory probes */
    uint32_t prefetch;               /* streamed layers read ahead; 2 */
    uint32_t host_layers;            /* the last N non-resident layers on the host's cores; 0 */
    uint32_t host_threads;           /* their threads; 0 = the physical cores minus one */
    bool host_q8;                    /* host layers with 8-bit activations; false */
    uint32_t expert_cache;           /* MoE: expert slots per layer on the device; 0 = off,
                                        EBB_CONFIG_EXPERT_CACHE_AUTO = from memory_budget */
    uint64_t prompt_cache;           /* bytes of the prompt-cache store; 256 MiB, 0 = none */
    uint32_t responses_store; /* /v1/responses kept for previous_response_id; 256, 0 = none */
    /* Several models (catalogue mode): how long a model stays loaded after its last request
     * ("5m"; a duration or seconds, -1 forever, 0 unload at once), and the bytes all loaded
     * models may take together (0 = no limit). */
    char *keep_alive;
    uint64_t models_budget;
    /* [model.NAME] sections (config-models.c), in file order. */
    struct ebb_config_model *models;
    size_t n_models;
    /* Edge limits (api/http/limits.c): the time to send a request head (15 s), then the body
     * (30 s); the open connections served in all (512) and per client
     * address (256), past which only /health is answered. */
    uint32_t header_timeout_ms, body_timeout_ms;
    uint32_t max_connections, max_connections_per_client;
    /* Admission under a flood: the time a new connection has to send its first request line
     * (5 s), and the connections accepted per second per client address (256) and in all
     * (4096). */
    uint32_t silent_timeout_ms, accept_rate, accept_rate_total;
    /* [generation]: the configured defaults (a bit in generation.mask for each one set by the
     * file, the environment or a flag; v holds the built-in values of the others), and whether
     * a model's own general.sampling.* recommendations come first (true). */
    struct ebb_sampling_set generation;
    bool model_sampling;
    /* Host header names accepted besides the loopback ones while listening on loopback
     * ("*": any); empty = loopback names only. */
    struct ebb_strlist allowed_hosts;

    char *config_file; /* the file that was loaded, or NULL */
    enum ebb_config_source source[EBB_CFG_N_KEYS];
    int source_line[EBB_CFG_N_KEYS]; /* line in config_file for EBB_CONFIG_SRC_FILE */
};

/* A [model.NAME] section: one model of the catalogue and its own settings. */
struct ebb_config_model {
    char *name;             /* NAME: the id requests use */
    char *path;             /* path = FILE (a path, or a file name under models_dir); NULL: NAME */
    char *chat_template;    /* NULL: the global chat_template */
    char *keep_alive;       /* NULL: the global keep_alive */
    bool pin;               /* never unloaded */
    bool priority;          /* priority = high: its jobs hold the other models' steps */
    uint32_t ctx, parallel; /* 0: the global ctx, parallel */
    int line;               /* of the section header, for messages */
};

/* A keep_alive text ("5m", "1h30m", "300", "-1", "0") in seconds (negative: forever). False if
 * it is none of those. */
bool ebb_config_keep_alive(const char *s, double *secs);

/* Sets key of the [model.NAME] section (config-file.c calls it for each key line under one),
 * creating the section's entry on its first key. EBB_EINVAL with diag "<key>: <why>" for an
 * unknown key or a bad value. */
ebb_err ebb_config_model_set(struct ebb_config *cfg, const char *name, const char *key,
                             const char *value, int line, struct ebb_diag *diag);

/* One command-line flag to apply on top of file and environment. key is an option name with
 * dashes or underscores ("max-body"), value its text. */
struct ebb_config_arg {
    const char *key;
    const char *value;
};

/* Fills cfg with the built-in defaults. Paths follow the platform conventions:
 *   models_dir: $STATE_DIRECTORY/models when systemd sets STATE_DIRECTORY (system service,
 *               /var/lib/ebb), else $XDG_DATA_HOME/ebb/models, else ~/.local/share/ebb/models;
 *   cache_dir:  $CACHE_DIRECTORY (systemd, /var/cache/ebb), else $XDG_CACHE_HOME/ebb, else
 *               ~/.cache/ebb.
 * Returns EBB_ENOMEM only; on failure cfg is still safe to pass to ebb_config_fini. */
ebb_err ebb_config_init(struct ebb_config *cfg);
/* Frees what cfg owns; cfg may then be initialised again. Accepts NULL. */
void ebb_config_fini(struct ebb_config *cfg);

/* Reads an INI file into cfg. Keys sit at the top of the file or under a [serve] section, except
 * the generation defaults, which go under [generation]. Unknown keys, unknown sections, a key
 * under the wrong section, syntax errors and bad values are errors; diag then reads
 * "<path>:<line>: <key>: <why>". EBB_ENOENT when the file cannot be opened, EBB_EINVAL for
 * its content. Options set before the error keep their new values. */
ebb_err ebb_config_load_file(struct ebb_config *cfg, const char *path, struct ebb_diag *diag);

/* Applies EBB_<KEY> environment variables (EBB_PORT, EBB_API_KEY, EBB_MODELS_DIR, ...).
 * Variables that are not options (EBB_CONFIG and any other EBB_*) are ignored; a bad value is
 * EBB_EINVAL with diag "EBB_PORT: <why>". Empty variables count as unset. */
ebb_err ebb_config_apply_env(struct ebb_config *cfg, struct ebb_diag *diag);

/* Sets one option from text, recording src (and line, for files). key may use dashes. Unknown
 * keys are EBB_ENOTFOUND, bad values EBB_EINVAL, diag "<key>: <why>". */
ebb_err ebb_config_set(struct ebb_config *cfg, const char *key, const char *value,
                       enum ebb_config_source src, int line, struct ebb_diag *diag);

/* $XDG_CONFIG_HOME/ebb/ebb.conf, else ~/.config/ebb/ebb.conf, else ""; malloc'd (NULL when out
 * of memory). */
char *ebb_config_user_file(void);

/* The whole precedence chain: defaults, then the config file, then the environment, then flags.
 * The file is config_path if non-NULL (it must exist), else $EBB_CONFIG if set (must exist),
 * else the first that exists of $XDG_CONFIG_HOME/ebb/ebb.conf (~/.config/ebb/ebb.conf) and
 * <sysconfdir>/ebb/ebb.conf; no file at all is fine. Diagnostics name the flag ("--port: ..."),
 * variable or file line. cfg must be initialised; on failure it holds a partial result and the
 * caller should fini it. Call it again with the same flags to reload on SIGHUP. */
ebb_err ebb_config_build(struct ebb_config *cfg, const char *config_path,
                         const struct ebb_config_arg *flags, size_t n_flags, struct ebb_diag *diag);

/* True if name (dashes or underscores) is an option. */
bool ebb_config_is_key(const char *name);

/* The file section option name belongs to: "generation" for the generation defaults, "serve"
 * (which also means the top of the file) for the others, NULL if name is no option. */
const char *ebb_config_key_section(const char *name);

/* Writes the effective configuration as INI text with the source of each value in a comment;
 * api keys are masked. This is what `ebb serve --check-config` prints. */
void ebb_config_print(const struct ebb_config *cfg, FILE *f);

/* Writes one "  --name VALUE   help (default ...)" line per option, for `ebb serve --help`. */
void ebb_config_usage(FILE *f);

/* Resolves cfg->model to a path: a value containing '/' is used as is, a bare name is looked
 * up under models_dir (with ".gguf" appended when the bare name does not exist but that does).
 * EBB_ENOENT when no model is configured, EBB_ERANGE when buf is too small. */
ebb_err ebb_config_model_path(const struct ebb_config *cfg, char *buf, size_t n);

/* What a reload must do, from the options that differ between two configs. */
enum {
    EBB_CONFIG_CHANGE_LOG = 1u << 0,        /* log_level, log_format: ebb_log_configure */
    EBB_CONFIG_CHANGE_LIMITS = 1u << 1,     /* queue, max_body, request_timeout, shutdown_grace,
                                               header_timeout, body_timeout, max_connections,
                                               max_connections_per_client, silent_timeout,
                                               accept_rate, accept_rate_total,
                                               responses_store */
    EBB_CONFIG_CHANGE_AUTH = 1u << 2,       /* api_key */
    EBB_CONFIG_CHANGE_CORS = 1u << 3,       /* cors_origin, allowed_hosts */
    EBB_CONFIG_CHANGE_MODEL = 1u << 4,      /* model, models_dir, ctx, ctx_over_trained,
                                               parallel, device,
                                               chat_template, memory_budget, prefetch, cache_dir:
                                               load the model again and swap it in */
    EBB_CONFIG_CHANGE_LISTEN = 1u << 5,     /* host, port: cannot apply without a restart */
    EBB_CONFIG_CHANGE_GENERATION = 1u << 6, /* [generation]: ebb_api_reconfigure */
};

/* Returns the EBB_CONFIG_CHANGE_* bits of the options whose values differ. */
unsigned ebb_config_diff(const struct ebb_config *a, const struct ebb_config *b);

/* SIGHUP: builds a fresh configuration from the same config_path and flags as at start (the
 * environment as it is now) and, only if that succeeds, replaces *cfg with it. host and port keep
 * their running values (the listening socket does not move); if the file asks for others,
 * EBB_CONFIG_CHANGE_LISTEN is set in *changed and a warning is logged. Also applies log_level
 * and log_format (ebb_log_configure). On failure *cfg and *changed are untouched and diag says
 * why: the daemon logs it and keeps running with the old configuration. Loop thread only. */
ebb_err ebb_config_reload(struct ebb_config *cfg, const char *config_path,
                          const struct ebb_config_arg *flags, size_t n_flags, unsigned *changed,
                          struct ebb_diag *diag);

/* Name of option k ("max_body"), or NULL past the end. */
const char *ebb_config_key_name(enum ebb_config_key k);

#endif
