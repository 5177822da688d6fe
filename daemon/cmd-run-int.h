/* `ebb run`'s command line (cmd-run-opts.c), parsed into options before cmd-run.c does the work:
 * loading the model, tokenizing the prompt, generating and reporting. */
#ifndef EBB_DAEMON_CMD_RUN_INT_H
#define EBB_DAEMON_CMD_RUN_INT_H

#include <stdbool.h>

#include "api/defaults/defaults.h"
#include "model/model.h"
#include "sched/spec.h"

struct ebb__run_opts {
    const char *model, *prompt, *device, *chat_template, *system, *config;
    long long n_predict, ctx;
    bool chat, json;
    bool ctx_over_trained;  /* --ctx-over-trained: keep a --ctx past the trained context */
    bool kv_type_set;       /* --kv-type given (in stream.kv_type); else the config's */
    struct ebb_sampling sp; /* the flags' values over the built-in defaults */
    unsigned sent; /* EBB_DEF_BIT of each sampling flag given; the others take the defaults */
    struct ebb_model_params stream; /* the streamer fields only */
    bool spec;                      /* --spec ngram|draft: speculative decoding */
    const char *draft;              /* --draft MODEL: drafts from this model (--spec draft) */
    struct ebb_spec_params specp;   /* --draft-max, --draft-min, --draft-fixed */
};

/* Parses argv into o (pointing into argv). Returns -1 to go on, else the exit status: 0 after
 * --help (usage printed), 2 on a usage error (the reason printed on stderr). */
int ebb__run_parse(int argc, char **argv, struct ebb__run_opts *o);

#endif
