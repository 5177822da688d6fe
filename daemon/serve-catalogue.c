/* `ebb serve` with several models: the catalogue the API serves by name, built from the GGUF
 * files under models_dir (no -m), the files and directories of several -m flags, and the
 * [model.NAME] sections of the configuration, each with its scheduler settings. */
#include "daemon/serve-int.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

struct ebb_model_params ebb__serve_model_params(const struct ebb_config *c, const char *path)
{
    struct ebb_model_params mp = {
        .path = path, .device = c->device, .n_ctx = c->ctx, .n_seq = c->parallel};
    mp.ctx_cap_trained = !c->ctx_over_trained;
    mp.kv_type = c->kv_type;
    mp.split = c->split;
    mp.tensor_split = c->tensor_split;
    mp.prefetch = c->prefetch;
    mp.host_layers = c->host_layers;
    mp.host_threads = c->host_threads;
    mp.host_q8 = c->host_q8;
    mp.expert_cache =
        c->expert_cache == EBB_CONFIG_EXPERT_CACHE_AUTO ? EBB_EXPERT_CACHE_AUTO : c->expert_cache;
    mp.prompt_cache = c->prompt_cache;
    if (c->memory_budget == EBB_CONFIG_BUDGET_AUTO)
        mp.memory_budget_auto = true;
    else
        mp.memory_budget = c->memory_budget;
    return mp;
}

void ebb__serve_model_id(const char *path, char *id, size_t n)
{
    const char *base = strrchr(path, '/');
    if (snprintf(id, n, "%s", base ? base + 1 : path) >= (int)n)
        id[n - 1] = 0; /* a very long name is cut (snprintf did); said for -Wformat-truncation */
    size_t l = strlen(id);
    if (l > 5 && !strcmp(id + l - 5, ".gguf"))
        id[l - 5] = 0;
}

/* The entry for path, added if new. NULL when out of memory or over the cap. */
static struct ebb__serve_entry *entry_for(struct ebb__serve_catalogue *cat, const char *path)
{
    for (size_t i = 0; i < cat->n; i++)
        if (!strcmp(cat->e[i].path, path))
            return &cat->e[i];
    if (cat->n == EBB__SERVE_MAX_MODELS)
        return NULL;
    struct ebb__serve_entry *e = &cat->e[cat->n];
    memset(e, 0, sizeof(*e));
    snprintf(e->path, sizeof(e->path), "%s", path);
    ebb__serve_model_id(path, e->id, sizeof(e->id));
    cat->n++;
    return e;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds the .gguf files of dir (one level; a split model's later parts are left out, and so is
 * a name that does not lead to a file, such as a link whose target was removed). */
static ebb_err add_dir(struct ebb__serve_catalogue *cat, const char *dir, struct ebb_diag *diag)
{
    DIR *d = opendir(dir);
    if (!d)
        return ebb_diag_set(diag, EBB_ENOENT, "cannot list %s: %s", dir, strerror(errno));
    char *names[EBB__SERVE_MAX_MODELS];
    size_t k = 0;
    for (struct dirent *de; (de = readdir(d)) && k < EBB__SERVE_MAX_MODELS;) {
        size_t len = strlen(de->d_name);
        if (len <= 5 || strcmp(de->d_name + len - 5, ".gguf") || de->d_name[0] == '.')
            continue;
        const char *of = strstr(de->d_name, "-of-");
        if (of && of - de->d_name >= 6 && strncmp(of - 6, "-00001", 6))
            continue;
        if ((names[k] = strdup(de->d_name)))
            k++;
    }
    closedir(d);
    qsort(names, k, sizeof(names[0]), cmp_name);
    for (size_t i = 0; i < k; i++) {
        char path[PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof(path), "%s/%s", dir, names[i]) < (int)sizeof(path) &&
            stat(path, &st) == 0 && !S_ISDIR(st.st_mode))
            entry_for(cat, path);
        free(names[i]);
    }
    return EBB_OK;
}

/* A -m value or a section's path: as is with a '/', else under models_dir (".gguf" added when
 * that exists and the bare name does not). */
void ebb__serve_resolve(const struct ebb_config *c, const char *v, char *out, size_t n)
{
    struct stat st;
    if (strchr(v, '/') || stat(v, &st) == 0) {
        snprintf(out, n, "%s", v);
        return;
    }
    snprintf(out, n, "%s/%s", c->models_dir, v);
    if (stat(out, &st) != 0) {
        char with[PATH_MAX];
        if (snprintf(with, sizeof(with), "%s/%s.gguf", c->models_dir, v) < (int)sizeof(with) &&
            stat(with, &st) == 0)
            snprintf(out, n, "%s", with);
    }
}

/* Drops entry i of cat. */
static void drop(struct ebb__serve_catalogue *cat, size_t i)
{
    memmove(&cat->e[i], &cat->e[i + 1], (cat->n - i - 1) * sizeof(cat->e[0]));
    cat->n--;
}

/* Lenient: of two entries with one id, the one a section names stays (else the first). */
static ebb_err check_ids(struct ebb__serve_catalogue *cat, bool lenient, struct ebb_diag *diag)
{
    for (size_t i = 0; i < cat->n; i++) {
        for (size_t j = 0; j < i; j++) {
            if (strcmp(cat->e[i].id, cat->e[j].id))
                continue;
            if (!lenient)
                return ebb_diag_set(diag, EBB_EINVAL,
                                    "two models are named '%s' (%s and %s): name one with a "
                                    "[model.NAME] section",
                                    cat->e[i].id, cat->e[j].path, cat->e[i].path);
            drop(cat, cat->e[i].named && !cat->e[j].named ? j : i);
            i--;
            break;
        }
    }
    return EBB_OK;
}

ebb_err ebb__serve_catalogue_build(const struct ebb_config *c, const struct ebb__serve_sources *src,
                                   unsigned flags, struct ebb__serve_catalogue *cat,
                                   struct ebb_diag *diag)
{
    ebb_err rc = EBB_OK;
    bool lenient = flags & EBB__CAT_RESCAN, wait = flags & (EBB__CAT_WAIT | EBB__CAT_RESCAN);
    memset(cat, 0, sizeof(*cat));
    double ka = -1;
    ebb_config_keep_alive(c->keep_alive, &ka);
    for (size_t i = 0; i < src->n_paths + src->n_extra; i++) {
        const char *v = i < src->n_paths ? src->paths[i] : src->extra[i - src->n_paths];
        char p[PATH_MAX];
        struct stat st;
        ebb__serve_resolve(c, v, p, sizeof(p));
        if (stat(p, &st) != 0) {
            if (lenient)
                continue;
            return ebb_diag_set(diag, EBB_ENOENT, "cannot open model '%s': %s", p, strerror(errno));
        }
        if (S_ISDIR(st.st_mode))
            rc = add_dir(cat, p, diag);
        else if (!entry_for(cat, p))
            rc = ebb_diag_set(diag, EBB_ERANGE, "more than %d models", EBB__SERVE_MAX_MODELS);
        if (rc && lenient && rc != EBB_ERANGE)
            rc = EBB_OK;
        if (rc)
            return rc;
    }
    if (!src->n_paths) {
        struct stat st;
        if (stat(c->models_dir, &st) == 0 && (rc = add_dir(cat, c->models_dir, diag)) && !lenient)
            return rc;
    }
    for (size_t i = 0; i < cat->n; i++) {
        cat->e[i].keep_alive = ka;
        cat->e[i].ctx = c->ctx;
        cat->e[i].parallel = c->parallel;
    }
    /* [model.NAME]: a section whose path is already listed renames and configures that entry;
     * another adds one. Lenient, a section whose file is not there (yet) waits for it. */
    for (size_t i = 0; i < c->n_models; i++) {
        const struct ebb_config_model *m = &c->models[i];
        char p[PATH_MAX];
        struct stat st;
        ebb__serve_resolve(c, m->path ? m->path : m->name, p, sizeof(p));
        int e = stat(p, &st) != 0 ? errno : 0;
        if (wait && (e || S_ISDIR(st.st_mode)))
            continue;
        if (e || S_ISDIR(st.st_mode))
            return ebb_diag_set(diag, EBB_ENOENT,
                                "[model.%s] (line %d): cannot open model file '%s'%s%s", m->name,
                                m->line, p, e ? ": " : "", e ? strerror(e) : " (a directory)");
        struct ebb__serve_entry *en = entry_for(cat, p);
        if (!en)
            return ebb_diag_set(diag, EBB_ERANGE, "more than %d models", EBB__SERVE_MAX_MODELS);
        snprintf(en->id, sizeof(en->id), "%s", m->name);
        en->named = true;
        en->pin = m->pin;
        en->priority = m->priority;
        en->chat_template = m->chat_template;
        en->keep_alive = ka;
        if (m->keep_alive)
            ebb_config_keep_alive(m->keep_alive, &en->keep_alive);
        en->ctx = m->ctx ? m->ctx : c->ctx;
        en->parallel = m->parallel ? m->parallel : c->parallel;
    }
    if ((rc = check_ids(cat, lenient, diag)))
        return rc;
    if (!cat->n && !lenient) {
        char have[1024];
        ebb__serve_models_in(c->models_dir, have, sizeof(have));
        return ebb_diag_set(diag, EBB_ENOENT,
                            "no model to serve: pass -m FILE, or put GGUF files "
                            "in models_dir (%s)",
                            have);
    }
    return EBB_OK;
}

void ebb__serve_catalogue_api(const struct ebb_config *c, struct ebb__serve_catalogue *cat,
                              const struct ebb_sched_params *tmpl)
{
    const char *ct = c->chat_template && strcmp(c->chat_template, "auto") ? c->chat_template : NULL;
    for (size_t i = 0; i < cat->n; i++) {
        struct ebb__serve_entry *e = &cat->e[i];
        struct ebb_api_model *m = &cat->api[i];
        m->id = e->id;
        m->chat_template =
            e->chat_template && strcmp(e->chat_template, "auto") ? e->chat_template : ct;
        m->sp = *tmpl;
        m->sp.model = ebb__serve_model_params(c, e->path);
        m->sp.model.n_ctx = e->ctx;
        m->sp.model.n_seq = e->parallel;
        /* Under models_budget each model runs the layer streamer (every layer resident while
         * memory allows), so that an idle one can give layers to another instead of going
         * whole (api/http/catalogue.c). */
        if (c->models_budget && !m->sp.model.memory_budget)
            m->sp.model.memory_budget_auto = true;
        m->pin = e->pin;
        m->sp.priority = e->priority;
        m->keep_alive = e->keep_alive;
    }
}

ebb_err ebb__serve_catalogue_find(const struct ebb_config *c, const char *name, char *path,
                                  size_t n, struct ebb_diag *diag)
{
    struct ebb__serve_catalogue *cat = calloc(1, sizeof(*cat));
    if (!cat)
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    struct ebb__serve_sources none = {0};
    ebb_err rc = ebb__serve_catalogue_build(c, &none, EBB__CAT_RESCAN, cat, diag);
    const struct ebb__serve_entry *hit = NULL;
    size_t len = strlen(name), n_hits = 0;
    for (size_t i = 0; !rc && i < cat->n && !hit; i++)
        if (!strcmp(cat->e[i].id, name))
            hit = &cat->e[i];
    for (size_t i = 0; !rc && i < cat->n && !hit; i++)
        if (!strcasecmp(cat->e[i].id, name))
            hit = &cat->e[i];
    for (size_t i = 0; !rc && !hit && len && i < cat->n; i++) {
        if (strncasecmp(cat->e[i].id, name, len))
            continue;
        n_hits++;
        if (n_hits == 1)
            snprintf(path, n, "%s", cat->e[i].path);
    }
    if (!rc && hit) {
        snprintf(path, n, "%s", hit->path);
    } else if (!rc && n_hits != 1) {
        char list[1024] = "";
        size_t w = 0;
        for (size_t i = 0; i < cat->n && w < sizeof(list); i++) {
            int k = snprintf(list + w, sizeof(list) - w, "%s%s", i ? ", " : "", cat->e[i].id);
            w += k > 0 ? (size_t)k : 0;
        }
        rc = ebb_diag_set(diag, n_hits ? EBB_EINVAL : EBB_ENOENT,
                          "%s model '%s' in the catalogue (models_dir %s): %s",
                          n_hits ? "more than one" : "no", name, c->models_dir, list);
    }
    free(cat);
    return rc;
}

/* ---- following the sources while serving --------------------------------------------------- */

struct ebb__serve_follow {
    const struct ebb_config *cfg; /* the one the catalogue was built from (settings: a restart) */
    char **paths;                 /* (n_paths) copies of the -m values; none: models_dir */
    size_t n_paths;
    char **extra; /* (n_extra) files added while serving (/api/pull) */
    size_t n_extra;
    bool dirs;      /* a directory is among the sources: its files are followed */
    uint64_t stamp; /* of the sources when last scanned */
    struct ebb_sched_params tmpl;
    struct ebb__serve_catalogue cat; /* the last scan's, which the API copies */
};

static struct ebb__serve_sources sources_of(const struct ebb__serve_follow *f)
{
    return (struct ebb__serve_sources){.paths = (const char *const *)f->paths,
                                       .n_paths = f->n_paths,
                                       .extra = (const char *const *)f->extra,
                                       .n_extra = f->n_extra};
}

/* FNV-1a over n bytes, continuing from h. */
static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* path's identity and change time into h (a directory's changes when a file is added, removed
 * or renamed in it), or that it is not there. */
static uint64_t mix_stat(uint64_t h, const char *path)
{
    struct stat st;
    if (stat(path, &st))
        return mix(h, "-", 1);
    uint64_t v[4] = {(uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint64_t)st.st_mtim.tv_sec,
                     (uint64_t)st.st_mtim.tv_nsec};
    return mix(h, v, sizeof(v));
}

/* One stat per source directory or file and per section's file: what a scan would find differs
 * from the last one only if this does. */
static uint64_t stamp(const struct ebb__serve_follow *f)
{
    uint64_t h = 0xcbf29ce484222325ull;
    char p[PATH_MAX];
    for (size_t i = 0; i < f->n_paths + f->n_extra; i++) {
        ebb__serve_resolve(f->cfg, i < f->n_paths ? f->paths[i] : f->extra[i - f->n_paths], p,
                           sizeof(p));
        h = mix_stat(h, p);
    }
    if (!f->n_paths)
        h = mix_stat(h, f->cfg->models_dir);
    for (size_t i = 0; i < f->cfg->n_models; i++) {
        const struct ebb_config_model *m = &f->cfg->models[i];
        ebb__serve_resolve(f->cfg, m->path ? m->path : m->name, p, sizeof(p));
        h = mix(mix_stat(h, p), p, strlen(p));
    }
    return h;
}

static bool push(char ***v, size_t *n, const char *s)
{
    char **nv = realloc(*v, (*n + 1) * sizeof(*nv));
    if (!nv)
        return false;
    *v = nv;
    if (!(nv[*n] = strdup(s)))
        return false;
    (*n)++;
    return true;
}

struct ebb__serve_follow *ebb__serve_follow_new(const struct ebb_config *c,
                                                const struct ebb__serve_sources *src)
{
    struct ebb__serve_follow *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->cfg = c;
    f->dirs = !src->n_paths;
    for (size_t i = 0; i < src->n_paths; i++) {
        char p[PATH_MAX];
        struct stat st;
        if (!push(&f->paths, &f->n_paths, src->paths[i])) {
            ebb__serve_follow_free(f);
            return NULL;
        }
        ebb__serve_resolve(c, src->paths[i], p, sizeof(p));
        f->dirs |= stat(p, &st) == 0 && S_ISDIR(st.st_mode);
    }
    f->stamp = stamp(f);
    return f;
}

void ebb__serve_follow_free(struct ebb__serve_follow *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_paths; i++)
        free(f->paths[i]);
    for (size_t i = 0; i < f->n_extra; i++)
        free(f->extra[i]);
    free(f->paths);
    free(f->extra);
    free(f);
}

bool ebb__serve_follow_dirs(const struct ebb__serve_follow *f)
{
    return f->dirs;
}

const struct ebb_config *ebb__serve_follow_config(const struct ebb__serve_follow *f)
{
    return f->cfg;
}

void ebb__serve_follow_template(struct ebb__serve_follow *f, const struct ebb_sched_params *tmpl)
{
    f->tmpl = *tmpl;
}

int ebb__serve_follow_scan(struct ebb__serve_follow *f, const char *also,
                           const struct ebb_api_model **models, size_t *n)
{
    if (also) {
        bool have = false;
        for (size_t i = 0; i < f->n_extra; i++)
            have |= !strcmp(f->extra[i], also);
        if (!have && !push(&f->extra, &f->n_extra, also))
            return -1;
    } else if (!f->dirs) {
        return 0; /* a fixed list: only what /api/pull adds changes it */
    }
    uint64_t st = stamp(f);
    if (!also && st == f->stamp)
        return 0;
    f->stamp = st;
    struct ebb_diag d = {{0}};
    struct ebb__serve_sources src = sources_of(f);
    if (ebb__serve_catalogue_build(f->cfg, &src, EBB__CAT_RESCAN, &f->cat, &d))
        return -1;
    ebb__serve_catalogue_api(f->cfg, &f->cat, &f->tmpl);
    *models = f->cat.api;
    *n = f->cat.n;
    return 1;
}
