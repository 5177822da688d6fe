/* Generation defaults: one table of the sampling fields (names, GGUF keys, ranges, built-in
 * values) and the resolution model > configuration > built-in. See defaults.h. */
#include "defaults.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct field {
    const char *name;
    const char *gguf; /* the key llama.cpp reads, or NULL */
    double lo, hi;    /* what a request may send */
    bool integer;
    double builtin; /* llama-server's default */
} fields[EBB_DEF_N_FIELDS] = {
    [EBB_DEF_TEMPERATURE] = {"temperature", "general.sampling.temp", 0, 2, false, 0.8},
    [EBB_DEF_TOP_K] = {"top_k", "general.sampling.top_k", 0, 1 << 30, true, 40},
    [EBB_DEF_TOP_P] = {"top_p", "general.sampling.top_p", 0, 1, false, 0.95},
    [EBB_DEF_MIN_P] = {"min_p", "general.sampling.min_p", 0, 1, false, 0.05},
    [EBB_DEF_REPEAT_PENALTY] = {"repeat_penalty", "general.sampling.penalty_repeat", 0.01, 10,
                                false, 1},
    [EBB_DEF_REPEAT_LAST_N] = {"repeat_last_n", "general.sampling.penalty_last_n", -1, 1 << 20,
                               true, 64},
    [EBB_DEF_PRESENCE_PENALTY] = {"presence_penalty", NULL, -2, 2, false, 0},
    [EBB_DEF_FREQUENCY_PENALTY] = {"frequency_penalty", NULL, -2, 2, false, 0},
};

const char *ebb_defaults_field_name(enum ebb_defaults_field f)
{
    return (unsigned)f < EBB_DEF_N_FIELDS ? fields[f].name : NULL;
}

const char *ebb_defaults_gguf_key(enum ebb_defaults_field f)
{
    return (unsigned)f < EBB_DEF_N_FIELDS ? fields[f].gguf : NULL;
}

const char *ebb_defaults_source_name(enum ebb_defaults_source s)
{
    switch (s) {
    case EBB_DEF_SRC_CONFIG:
        return "config";
    case EBB_DEF_SRC_GGUF:
        return "gguf";
    case EBB_DEF_SRC_BUILTIN:
        break;
    }
    return "builtin";
}

int ebb_defaults_field_find(const char *name)
{
    char canon[32];
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len >= sizeof(canon))
        return -1;
    for (size_t i = 0; i <= len; i++)
        canon[i] = name[i] == '-' ? '_' : name[i];
    for (int f = 0; f < EBB_DEF_N_FIELDS; f++)
        if (!strcmp(fields[f].name, canon))
            return f;
    return -1;
}

void ebb_defaults_range(enum ebb_defaults_field f, double *lo, double *hi, bool *integer)
{
    *lo = fields[f].lo;
    *hi = fields[f].hi;
    *integer = fields[f].integer;
}

double ebb_defaults_get(const struct ebb_sampling *s, enum ebb_defaults_field f)
{
    switch (f) {
    case EBB_DEF_TEMPERATURE:
        return s->temperature;
    case EBB_DEF_TOP_K:
        return s->top_k;
    case EBB_DEF_TOP_P:
        return s->top_p;
    case EBB_DEF_MIN_P:
        return s->min_p;
    case EBB_DEF_REPEAT_PENALTY:
        return s->repeat_penalty;
    case EBB_DEF_REPEAT_LAST_N:
        return s->repeat_last_n;
    case EBB_DEF_PRESENCE_PENALTY:
        return s->presence_penalty;
    case EBB_DEF_FREQUENCY_PENALTY:
        return s->frequency_penalty;
    case EBB_DEF_N_FIELDS:
        break;
    }
    return 0;
}

void ebb_defaults_set(struct ebb_sampling *s, enum ebb_defaults_field f, double v)
{
    switch (f) {
    case EBB_DEF_TEMPERATURE:
        s->temperature = (float)v;
        break;
    case EBB_DEF_TOP_K:
        s->top_k = (int32_t)v;
        break;
    case EBB_DEF_TOP_P:
        s->top_p = (float)v;
        break;
    case EBB_DEF_MIN_P:
        s->min_p = (float)v;
        break;
    case EBB_DEF_REPEAT_PENALTY:
        s->repeat_penalty = (float)v;
        break;
    case EBB_DEF_REPEAT_LAST_N:
        s->repeat_last_n = (int32_t)v;
        break;
    case EBB_DEF_PRESENCE_PENALTY:
        s->presence_penalty = (float)v;
        break;
    case EBB_DEF_FREQUENCY_PENALTY:
        s->frequency_penalty = (float)v;
        break;
    case EBB_DEF_N_FIELDS:
        break;
    }
}

void ebb_defaults_builtin(struct ebb_sampling *s)
{
    ebb_sampling_defaults(s);
    for (int f = 0; f < EBB_DEF_N_FIELDS; f++)
        ebb_defaults_set(s, (enum ebb_defaults_field)f, fields[f].builtin);
}

static bool in_range(enum ebb_defaults_field f, double v)
{
    return isfinite(v) && v >= fields[f].lo && v <= fields[f].hi &&
           (!fields[f].integer || v == floor(v));
}

/* "a number between 0 and 2" / "a whole number between -1 and 1048576". */
static void range_text(enum ebb_defaults_field f, char *buf, size_t n)
{
    if (fields[f].integer)
        snprintf(buf, n, "a whole number between %.0f and %.0f", fields[f].lo, fields[f].hi);
    else
        snprintf(buf, n, "a number between %g and %g", fields[f].lo, fields[f].hi);
}

ebb_err ebb_defaults_parse(struct ebb_sampling_set *set, enum ebb_defaults_field f,
                           const char *text, char *why, size_t n)
{
    char range[80];
    range_text(f, range, sizeof(range));
    char *end = NULL;
    errno = 0;
    double v = text && *text && !isspace((unsigned char)*text) ? strtod(text, &end) : NAN;
    if (!end || end == text || *end || errno == ERANGE || !in_range(f, v)) {
        snprintf(why, n, "'%s' is not %s", text ? text : "", range);
        return EBB_EINVAL;
    }
    ebb_defaults_set(&set->v, f, v);
    set->mask |= EBB_DEF_BIT(f);
    return EBB_OK;
}

void ebb_defaults_format(const struct ebb_sampling *s, enum ebb_defaults_field f, char *buf,
                         size_t n)
{
    double v = ebb_defaults_get(s, f);
    if (fields[f].integer) {
        snprintf(buf, n, "%.0f", v);
        return;
    }
    /* The fields are floats: the fewest digits that read back as the same float. */
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if ((float)strtod(buf, NULL) == (float)v)
            return;
    }
}

/* ---- the model's recommendation ----------------------------------------------------------- */

static void note(struct ebb_gen_defaults *d, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void note(struct ebb_gen_defaults *d, const char *fmt, ...)
{
    if (d->n_notes >= EBB_DEF_MAX_NOTES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->notes[d->n_notes++], sizeof(d->notes[0]), fmt, ap);
    va_end(ap);
}

/* A metadata value as a number: floats and integers as they are, a string that holds a number
 * as that number (llama.cpp reads these keys through their text). False for anything else. */
static bool gguf_number(const struct ebb_gguf *g, const char *key, double *out)
{
    float fv;
    int64_t iv;
    struct ebb_str sv;
    if (ebb_gguf_get_f32(g, key, &fv) == EBB_OK) {
        *out = fv;
        return true;
    }
    if (ebb_gguf_get_i64(g, key, &iv) == EBB_OK) {
        *out = (double)iv;
        return true;
    }
    if (ebb_gguf_get_str(g, key, &sv) == EBB_OK && sv.n > 0 && sv.n < 32) {
        char buf[32], *end;
        memcpy(buf, sv.p, sv.n);
        buf[sv.n] = 0;
        double v = strtod(buf, &end);
        if (end != buf && !*end && isfinite(v)) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* Copies s[0..n) into buf for a note: printable ASCII, others as '?', cut at 40 bytes. */
static void printable(const char *s, size_t n, char *buf, size_t cap)
{
    size_t w = 0;
    for (size_t i = 0; i < n && w + 4 < cap && i < 40; i++)
        buf[w++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    if (n > 40 && w + 4 < cap) {
        memcpy(buf + w, "...", 3);
        w += 3;
    }
    buf[w] = 0;
}

/* Reads the general.sampling.* keys of g that ebb can honour into set, and notes the others. */
static void from_gguf(const struct ebb_gguf *g, struct ebb_sampling_set *set,
                      struct ebb_gen_defaults *d)
{
    for (int i = 0; i < EBB_DEF_N_FIELDS; i++) {
        enum ebb_defaults_field f = (enum ebb_defaults_field)i;
        const char *key = fields[f].gguf;
        if (!key || ebb_gguf_find_kv(g, key) < 0)
            continue;
        double v;
        if (!gguf_number(g, key, &v)) {
            note(d, "%s is not a number; not used", key);
            continue;
        }
        /* llama.cpp reads top_k <= 0 as "off", which ebb writes as 0. */
        if (f == EBB_DEF_TOP_K && v < 0)
            v = 0;
        if (!in_range(f, v)) {
            char range[80];
            range_text(f, range, sizeof(range));
            note(d, "%s = %g is not %s; not used", key, v, range);
            continue;
        }
        ebb_defaults_set(&set->v, f, v);
        set->mask |= EBB_DEF_BIT(f);
    }
    /* Samplers ebb does not have: a recommendation that switches one on cannot be followed. */
    double v;
    if (gguf_number(g, "general.sampling.mirostat", &v) && v != 0)
        note(d, "general.sampling.mirostat = %g: ebb has no mirostat sampler; not used", v);
    if (gguf_number(g, "general.sampling.xtc_probability", &v) && v > 0)
        note(d, "general.sampling.xtc_probability = %g: ebb has no XTC sampler; not used", v);
    struct ebb_str seq;
    if (ebb_gguf_get_str(g, "general.sampling.sequence", &seq) == EBB_OK) {
        char buf[48];
        printable(seq.p, seq.n, buf, sizeof(buf));
        note(d,
             "general.sampling.sequence = '%s': ebb samples in a fixed order (penalties, top_k, "
             "top_p, min_p, temperature); not used",
             buf);
    }
}

void ebb_defaults_resolve(const struct ebb_gguf *g, const struct ebb_sampling_set *config,
                          struct ebb_gen_defaults *out)
{
    memset(out, 0, sizeof(*out));
    ebb_defaults_builtin(&out->v);
    struct ebb_sampling_set model = {.mask = 0};
    ebb_sampling_defaults(&model.v);
    out->model_sampling = g != NULL;
    if (g)
        from_gguf(g, &model, out);
    for (int i = 0; i < EBB_DEF_N_FIELDS; i++) {
        enum ebb_defaults_field f = (enum ebb_defaults_field)i;
        if (model.mask & EBB_DEF_BIT(f)) {
            ebb_defaults_set(&out->v, f, ebb_defaults_get(&model.v, f));
            out->src[f] = EBB_DEF_SRC_GGUF;
        } else if (config && (config->mask & EBB_DEF_BIT(f))) {
            ebb_defaults_set(&out->v, f, ebb_defaults_get(&config->v, f));
            out->src[f] = EBB_DEF_SRC_CONFIG;
        } else {
            out->src[f] = EBB_DEF_SRC_BUILTIN;
        }
    }
}

void ebb_defaults_apply(const struct ebb_gen_defaults *d, unsigned sent, struct ebb_sampling *s)
{
    for (int i = 0; i < EBB_DEF_N_FIELDS; i++) {
        enum ebb_defaults_field f = (enum ebb_defaults_field)i;
        if (!(sent & EBB_DEF_BIT(f)))
            ebb_defaults_set(s, f, ebb_defaults_get(&d->v, f));
    }
}

json_t *ebb_defaults_json(const struct ebb_gen_defaults *d)
{
    json_t *root = json_object(), *fj = json_object(), *notes = json_array();
    if (!root || !fj || !notes)
        goto oom;
    for (int i = 0; i < EBB_DEF_N_FIELDS; i++) {
        enum ebb_defaults_field f = (enum ebb_defaults_field)i;
        char text[32];
        ebb_defaults_format(&d->v, f, text, sizeof(text));
        json_t *v = fields[f].integer ? json_integer((json_int_t)ebb_defaults_get(&d->v, f))
                                      : json_real(strtod(text, NULL));
        json_t *e =
            json_pack("{s:o, s:s}", "value", v, "source", ebb_defaults_source_name(d->src[f]));
        if (!e || json_object_set_new(fj, fields[f].name, e))
            goto oom;
    }
    for (size_t i = 0; i < d->n_notes; i++)
        if (json_array_append_new(notes, json_string(d->notes[i])))
            goto oom;
    if (json_object_set_new(root, "generation_defaults", fj)) {
        fj = NULL;
        goto oom;
    }
    fj = NULL;
    if (json_object_set_new(root, "model_sampling", json_boolean(d->model_sampling)))
        goto oom;
    /* json_object_set_new takes the reference even when it fails. */
    int bad = json_object_set_new(root, "model_sampling_notes", notes);
    notes = NULL;
    if (bad)
        goto oom;
    return root;
oom:
    json_decref(fj);
    json_decref(notes);
    json_decref(root);
    return NULL;
}
