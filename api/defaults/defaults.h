/* Generation defaults: the value each sampling field takes when a request (or `ebb run`) does not
 * set it. One resolution serves the HTTP API, `ebb run` and `ebb info`, so the CLI and the server
 * answer alike. For each field, the first of these that provides it wins:
 *
 *   1. the field the client sent (a request field, an `ebb run` flag);
 *   2. the model's own recommendation: the GGUF's general.sampling.* keys, the ones llama.cpp
 *      reads (temp, top_k, top_p, min_p, penalty_repeat, penalty_last_n), unless the
 *      configuration turns them off (model_sampling = false);
 *   3. the daemon's configured defaults (the [generation] section, EBB_* variables, flags);
 *   4. the built-in defaults, llama-server's: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05,
 *      repeat_penalty 1 (off), repeat_last_n 64, presence and frequency penalty 0.
 *
 * Values are checked against the same ranges as the request fields. A GGUF key with a value
 * outside them, or one that asks for a sampler ebb does not have (mirostat, XTC, a different
 * sampler order), is not used, and a note says so. Everything here is plain data: no locks, no
 * allocation except ebb_defaults_json's result. */
#ifndef EBB_API_DEFAULTS_H
#define EBB_API_DEFAULTS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "sched/sampler.h"

/* The sampling fields that have defaults, in the order they are listed everywhere. */
enum ebb_defaults_field {
    EBB_DEF_TEMPERATURE = 0,
    EBB_DEF_TOP_K,
    EBB_DEF_TOP_P,
    EBB_DEF_MIN_P,
    EBB_DEF_REPEAT_PENALTY,
    EBB_DEF_REPEAT_LAST_N,
    EBB_DEF_PRESENCE_PENALTY,
    EBB_DEF_FREQUENCY_PENALTY,
    EBB_DEF_N_FIELDS
};

#define EBB_DEF_BIT(f) (1u << (f))
#define EBB_DEF_ALL ((1u << EBB_DEF_N_FIELDS) - 1)

/* Where an effective default came from. */
enum ebb_defaults_source {
    EBB_DEF_SRC_BUILTIN = 0,
    EBB_DEF_SRC_CONFIG,
    EBB_DEF_SRC_GGUF,
};

/* Some of the fields: v holds a value for each field whose bit is set in mask. */
struct ebb_sampling_set {
    struct ebb_sampling v;
    unsigned mask;
};

#define EBB_DEF_MAX_NOTES 8

/* The resolved defaults of one model under one configuration. */
struct ebb_gen_defaults {
    struct ebb_sampling v; /* every field of enum ebb_defaults_field set; seed random, no bias */
    enum ebb_defaults_source src[EBB_DEF_N_FIELDS];
    bool model_sampling; /* the GGUF's keys were consulted */
    /* GGUF keys present but not used, one sentence each ("general.sampling.mirostat = 2: ebb
     * has no mirostat sampler; not used"). */
    size_t n_notes;
    char notes[EBB_DEF_MAX_NOTES][200];
};

/* The field's name in requests, the config file, flags (with dashes) and EBB_* variables
 * ("temperature", "top_k"); NULL past the end. */
const char *ebb_defaults_field_name(enum ebb_defaults_field f);

/* The GGUF key llama.cpp reads for the field ("general.sampling.temp"), or NULL when there is
 * none (presence_penalty, frequency_penalty). */
const char *ebb_defaults_gguf_key(enum ebb_defaults_field f);

/* "builtin", "config" or "gguf". */
const char *ebb_defaults_source_name(enum ebb_defaults_source s);

/* The field called name (underscores or dashes), or -1. */
int ebb_defaults_field_find(const char *name);

/* Fills s with ebb_sampling_defaults() and the built-in generation defaults on top. */
void ebb_defaults_builtin(struct ebb_sampling *s);

/* The range a request may send for field f, and whether it takes whole numbers only. */
void ebb_defaults_range(enum ebb_defaults_field f, double *lo, double *hi, bool *integer);

/* Field f of s as a double, and set from one (the caller checked the range). */
double ebb_defaults_get(const struct ebb_sampling *s, enum ebb_defaults_field f);
void ebb_defaults_set(struct ebb_sampling *s, enum ebb_defaults_field f, double v);

/* Parses text as a value of field f (a number; top_k and repeat_last_n whole numbers) into
 * set->v and sets its bit in set->mask. EBB_EINVAL with a reason in why ("'3' is not a number
 * between 0 and 2") for anything else; set is then unchanged. */
ebb_err ebb_defaults_parse(struct ebb_sampling_set *set, enum ebb_defaults_field f,
                           const char *text, char *why, size_t n);

/* Field f of s as the shortest text that reads back to the same value ("0.8", "40"). */
void ebb_defaults_format(const struct ebb_sampling *s, enum ebb_defaults_field f, char *buf,
                         size_t n);

/* Resolves the defaults of a model (g; NULL for none, or to skip its general.sampling.* keys)
 * under a configuration (config; NULL: nothing configured). */
void ebb_defaults_resolve(const struct ebb_gguf *g, const struct ebb_sampling_set *config,
                          struct ebb_gen_defaults *out);

/* Writes d's value into s for every field whose bit is not set in sent (the fields the client
 * gave); the other members of s are left alone. */
void ebb_defaults_apply(const struct ebb_gen_defaults *d, unsigned sent, struct ebb_sampling *s);

/* {"generation_defaults": {"temperature": {"value": 0.8, "source": "builtin"}, ...},
 *  "model_sampling": true, "model_sampling_notes": [...]}: the content of the `ebb` object of
 * /v1/models and of `ebb info --json`'s. Values are doubles that print as their short text
 * ("0.8") when dumped with JSON_REAL_PRECISION(15) or less. NULL when out of memory. */
json_t *ebb_defaults_json(const struct ebb_gen_defaults *d);

#endif
