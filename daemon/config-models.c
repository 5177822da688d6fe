/* Several models in one configuration: keep_alive durations and the [model.NAME] sections, each
 * one model of the catalogue with its own path, pin, priority, keep_alive, ctx, parallel and chat
 * template ("chat + FIM + embeddings" in one file). */
#include "config.h"

#include "base/duration.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool ebb_config_keep_alive(const char *s, double *secs)
{
    return ebb_duration_parse(s, EBB_DURATION_CONFIG, secs);
}

static struct ebb_config_model *section(struct ebb_config *cfg, const char *name, int line)
{
    for (size_t i = 0; i < cfg->n_models; i++)
        if (!strcmp(cfg->models[i].name, name))
            return &cfg->models[i];
    struct ebb_config_model *v = realloc(cfg->models, (cfg->n_models + 1) * sizeof(*v));
    if (!v)
        return NULL;
    cfg->models = v;
    struct ebb_config_model *m = &v[cfg->n_models];
    memset(m, 0, sizeof(*m));
    if (!(m->name = strdup(name)))
        return NULL;
    m->line = line;
    cfg->n_models++;
    return m;
}

static bool parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no",
                                                                                "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i]))
            return *out = true, true;
        if (!strcasecmp(v, no[i]))
            return *out = false, true;
    }
    return false;
}

static bool parse_u32(const char *v, uint32_t max, uint32_t *out)
{
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (!*v || *end || x > max || *v == '-')
        return false;
    *out = (uint32_t)x;
    return true;
}

/* Replaces *slot by a copy of v. */
static bool set_str(char **slot, const char *v)
{
    char *c = strdup(v);
    if (!c)
        return false;
    free(*slot);
    *slot = c;
    return true;
}

ebb_err ebb_config_model_set(struct ebb_config *cfg, const char *name, const char *key,
                             const char *value, int line, struct ebb_diag *diag)
{
    if (!*name || strchr(name, '/'))
        return ebb_diag_set(diag, EBB_EINVAL,
                            "[model.%s]: a model section needs a name "
                            "without '/' ([model.chat])",
                            name);
    struct ebb_config_model *m = section(cfg, name, line);
    double ka;
    bool ok = true;
    if (!m)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    if (!strcmp(key, "path"))
        ok = *value && set_str(&m->path, value);
    else if (!strcmp(key, "chat_template"))
        ok = *value && set_str(&m->chat_template, value);
    else if (!strcmp(key, "keep_alive"))
        ok = ebb_config_keep_alive(value, &ka) && set_str(&m->keep_alive, value);
    else if (!strcmp(key, "pin"))
        ok = parse_bool(value, &m->pin);
    else if (!strcmp(key, "priority"))
        ok = (m->priority = !strcmp(value, "high")) || !strcmp(value, "normal");
    else if (!strcmp(key, "ctx"))
        ok = parse_u32(value, 1u << 24, &m->ctx);
    else if (!strcmp(key, "parallel"))
        ok = parse_u32(value, 256, &m->parallel) && m->parallel >= 1;
    else
        return ebb_diag_set(diag, EBB_EINVAL,
                            "%s: not a key of a [model.NAME] section (path, pin, priority, "
                            "keep_alive, ctx, parallel, chat_template)",
                            key);
    if (!ok)
        return ebb_diag_set(diag, EBB_EINVAL, "%s: bad value '%.100s'", key, value);
    return EBB_OK;
}
