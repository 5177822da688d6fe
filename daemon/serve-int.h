/* `ebb serve` internals shared by serve.c, serve-opts.c and serve-load.c: the command line
 * parsed into options, and loading a replacement model on a thread of its own (SIGHUP with a
 * changed model). */
#ifndef EBB_DAEMON_SERVE_INT_H
#define EBB_DAEMON_SERVE_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

#include <uv.h>

#include "api/api.h"
#include "daemon/config.h"
#include "daemon/warm.h"
#include "model/model.h"

/* The command line (serve-opts.c). Config keys given as flags go to args, applied by
 * ebb_config_build over the file and the environment (also again on SIGHUP). */
struct ebb__serve_opts {
    const char *config_path; /* --config */
    bool check;              /* --check-config */
    bool help;               /* --help (usage printed) */
    enum ebb_api_poll poll;  /* --http-poll */
    unsigned keepalive_ms, prefill_chunk;
    bool spec;                   /* --spec ngram: requests speculate unless they say otherwise */
    unsigned draft_max;          /* --draft-max K (0: 8) */
    struct ebb_config_arg *args; /* (n_args) keys strdup'ed, values pointing into argv, keys
                                    or origins */
    /* (n_models) the -m/--model values, pointing into argv; of several naming one model id,
     * only the last */
    const char **models;
    size_t n_models;
    size_t n_args;
    char *keys, *origins, *hosts; /* every --api-key / --cors-origin / --allowed-hosts, joined */
};

/* Parses argv into o. Returns 0 (o->help set when --help printed the usage), 1 when out of
 * memory, 2 on a usage error (the reason printed on stderr). Release o with
 * ebb__serve_opts_fini whatever the result. */
int ebb__serve_parse(int argc, char **argv, struct ebb__serve_opts *o);
void ebb__serve_opts_fini(struct ebb__serve_opts *o);

/* A model opened on a thread of its own while the running one keeps serving. */
struct ebb__loader {
    uv_async_t async; /* wakes the loop when the thread is done */
    pthread_t thread;
    bool busy; /* a thread runs or its result was not collected yet */
    bool inited;
    char path[PATH_MAX];
    char device[128];
    char model_id[256];
    struct ebb_model_params mp;
    /* written by the thread, read by the loop after async */
    struct ebb_model *model;
    ebb_err rc;
    char msg[256];
    double secs;
    /* loop thread: called once the thread is done; the callee owns l->model (if non-NULL) */
    void (*done)(struct ebb__loader *l);
    void *ud;
};

/* Prepares l on loop (once). */
ebb_err ebb__loader_init(struct ebb__loader *l, uv_loop_t *loop);
/* Starts warming and opening mp (strings copied) unless a load is already running (EBB_EBUSY). */
ebb_err ebb__loader_start(struct ebb__loader *l, const struct ebb_model_params *mp,
                          const char *model_id);
/* Waits for a running thread, closes a model nobody took and closes the async handle (run the
 * loop once more afterwards). */
void ebb__loader_fini(struct ebb__loader *l);

/* Writes into buf the .gguf files of dir, sorted and comma-separated ("a.gguf, b.gguf"), or a
 * sentence saying there are none or that dir cannot be read, for an error about a model that
 * does not exist (serve-load.c). Always NUL-terminates when n > 0. */
void ebb__serve_models_in(const char *dir, char *buf, size_t n);

/* ---- several models (serve-catalogue.c) ---------------------------------------------------- */

#define EBB__SERVE_MAX_MODELS 256
/* Devices one daemon serves on (data parallel: a model's replicas); the API's cap. */
#define EBB__SERVE_MAX_DEVICES 16

/* The scheduler's model settings from a configuration (the strings stay c's). */
struct ebb_model_params ebb__serve_model_params(const struct ebb_config *c, const char *path);
/* The id /v1/models reports for path: the file name without ".gguf". */
void ebb__serve_model_id(const char *path, char *id, size_t n);

/* One model of the catalogue and its settings. */
struct ebb__serve_entry {
    char id[256];
    char path[PATH_MAX];
    const char *chat_template; /* the config's, or NULL */
    bool named;                /* a [model.NAME] section names it */
    bool pin;
    bool priority; /* its jobs hold the other models' steps (ebb_sched_params.priority) */
    double keep_alive;
    uint32_t ctx, parallel;
};

struct ebb__serve_catalogue {
    struct ebb__serve_entry e[EBB__SERVE_MAX_MODELS];
    size_t n;
    struct ebb_api_model api[EBB__SERVE_MAX_MODELS]; /* ebb__serve_catalogue_api's */
};

/* What a catalogue is built from: the -m values (files or directories; a name without '/' is
 * looked up under models_dir), none meaning every .gguf under models_dir, and files added while
 * serving (/api/pull's). */
struct ebb__serve_sources {
    const char *const *paths;
    size_t n_paths;
    const char *const *extra;
    size_t n_extra;
};

/* ebb__serve_catalogue_build's flags. WAIT: a [model.NAME] section whose file is not there
 * (yet) is left out instead of failing (a catalogue that follows its directory). RESCAN: WAIT,
 * and a source that is gone is left out, of two models with one id the one a section names
 * stays (else the first), and an empty catalogue is no error. */
enum { EBB__CAT_WAIT = 1, EBB__CAT_RESCAN = 2 };

/* The models to serve: src's files and directories, then c's [model.NAME] sections.
 * EBB_ENOENT (diag says which) for a path that is not there or an empty catalogue, EBB_EINVAL
 * for two models with one id, each unless flags say otherwise. */
ebb_err ebb__serve_catalogue_build(const struct ebb_config *c, const struct ebb__serve_sources *src,
                                   unsigned flags, struct ebb__serve_catalogue *cat,
                                   struct ebb_diag *diag);
/* A -m value or a section's path as a file: as is with a '/', else under models_dir (".gguf"
 * added when that exists and the bare name does not). */
void ebb__serve_resolve(const struct ebb_config *c, const char *v, char *out, size_t n);
/* The file of the catalogue's model name (its id exactly, ignoring case, or a unique prefix) as
 * c describes the catalogue (models_dir and [model.NAME] sections), for `ebb run NAME`.
 * EBB_ENOENT (diag lists the names) when none matches, EBB_EINVAL when several start so. */
ebb_err ebb__serve_catalogue_find(const struct ebb_config *c, const char *name, char *path,
                                  size_t n, struct ebb_diag *diag);
/* Fills cat->api for the API from the entries, each scheduler's settings from tmpl and c
 * (the strings stay cat's and c's: c must outlive the API's start). */
void ebb__serve_catalogue_api(const struct ebb_config *c, struct ebb__serve_catalogue *cat,
                              const struct ebb_sched_params *tmpl);

/* ---- the catalogue following its sources while serving (serve-catalogue.c) ---------------- */

/* The sources of a catalogue, watched: a directory among them (models_dir when there are no -m
 * values) is read again when it changed, and so are the sections' files. Loop thread. */
struct ebb__serve_follow;

/* Copies src's paths; c must stay until ebb__serve_follow_free (a reload keeps the old one:
 * the models' settings change with a restart). NULL when out of memory. */
struct ebb__serve_follow *ebb__serve_follow_new(const struct ebb_config *c,
                                                const struct ebb__serve_sources *src);
void ebb__serve_follow_free(struct ebb__serve_follow *f);
/* True when a directory is among the sources (otherwise the list is fixed). */
bool ebb__serve_follow_dirs(const struct ebb__serve_follow *f);
/* The configuration f builds with. */
const struct ebb_config *ebb__serve_follow_config(const struct ebb__serve_follow *f);
/* The scheduler settings the catalogue's models start from (ebb__serve_catalogue_api's tmpl). */
void ebb__serve_follow_template(struct ebb__serve_follow *f, const struct ebb_sched_params *tmpl);
/* The API's catalogue_scan (api/api.h): 1 with *models (n) the catalogue as the sources hold
 * it now when they changed since the last scan (one stat per directory and section file tells)
 * or also (a file to serve from now on) is given; 0 when unchanged or the list is fixed; -1
 * when out of memory. *models stays valid until the next call. */
int ebb__serve_follow_scan(struct ebb__serve_follow *f, const char *also,
                           const struct ebb_api_model **models, size_t *n);

#endif
