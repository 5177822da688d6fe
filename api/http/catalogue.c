/* The models a server can serve. Outside catalogue mode there is one, the daemon's: it loads it
 * once and owns its scheduler. In catalogue mode every model is a name a request may pick (exact
 * id, or a unique prefix); the first request naming a model that is not loaded starts its
 * scheduler (which opens the model on its engine thread) and waits, suspended, with the other
 * requests for it until the load ends. A loaded model is unloaded (its scheduler freed) once it
 * has been idle longer than its keep_alive, when an admin asks, or when a load needs its memory
 * under the budget; a pinned model never is, and a model with requests in flight waits until they
 * are done. Loop thread only, except the load_state fields the engines write under api->mu. */
#include "http.h"
#include "http-int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/duration.h"
#include "base/log.h"
#include "gguf/gguf.h"

/* ---- building the catalogue -------------------------------------------------------------- */

static char *dupstr(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void served_free(struct ebb__served *sv)
{
    if (!sv)
        return;
    for (size_t i = 0; i < sv->n_rep; i++) {
        if (sv->owned)
            ebb_sched_free(sv->rep[i].sched);
        free(sv->rep[i].device);
    }
    ebb_chat_template_fini(&sv->tmpl);
    free(sv->id);
    free(sv->chat_template);
    free(sv->path);
    free(sv->device);
    free(sv);
}

/* Reads what /v1/models says of a model that is not loaded: its architecture and trained
 * context (the file's header only; a file that cannot be read is listed without them); under a
 * budget, what its load would add to the file (ebb__served_bytes). */
static void read_facts(struct ebb__served *sv)
{
    struct ebb_gguf *g = NULL;
    if (ebb_gguf_open(sv->path, &g, NULL))
        return;
    sv->file_size = ebb_gguf_file_size(g);
    if (sv->api->budget && ebb_model_memory_estimate(g, &sv->sp.model, &sv->est, NULL))
        memset(&sv->est, 0, sizeof(sv->est));
    struct ebb_str arch = {0};
    if (ebb_gguf_get_str(g, "general.architecture", &arch) == EBB_OK && arch.n > 0) {
        size_t n =
            (size_t)arch.n < sizeof(sv->family) - 1 ? (size_t)arch.n : sizeof(sv->family) - 1;
        memcpy(sv->family, arch.p, n);
        sv->family[n] = 0;
        char key[96];
        snprintf(key, sizeof(key), "%s.context_length", sv->family);
        ebb_gguf_get_u32(g, key, &sv->n_ctx_train);
    }
    ebb_gguf_close(g);
}

static int cmp_served(const void *x, const void *y)
{
    const struct ebb__served *a = *(const struct ebb__served *const *)x;
    const struct ebb__served *b = *(const struct ebb__served *const *)y;
    return strcmp(a->id, b->id);
}

static struct ebb__served *served_new(struct ebb_api *a, const char *id, const char *tmpl)
{
    struct ebb__served *sv = calloc(1, sizeof(*sv));
    if (!sv)
        return NULL;
    sv->api = a;
    sv->id = dupstr(id ? id : "model");
    sv->chat_template = dupstr(tmpl);
    sv->fim_pre = sv->fim_suf = sv->fim_mid = -1;
    sv->created = (long long)a->metrics.started_at;
    sv->keep_alive = -1;
    sv->pin = true;
    sv->n_rep = a->n_devices ? a->n_devices : 1;
    bool ok = true;
    for (size_t i = 0; i < sv->n_rep; i++) {
        sv->rep[i].sv = sv;
        if (a->n_devices)
            ok &= (sv->rep[i].device = strdup(a->devices[i])) != NULL;
    }
    if (!ok || !sv->id || (tmpl && !sv->chat_template)) {
        served_free(sv);
        return NULL;
    }
    return sv;
}

/* A catalogue model's scheduler settings: sp's (a configured model's, or the default model's as
 * a template for a model added later) with sv's own copies of path and device, loads reported
 * to ebb__served_on_loaded, and the file's facts read. EBB_ENOMEM when a copy fails. */
static ebb_err served_bind(struct ebb__served *sv, const struct ebb_sched_params *sp,
                           const char *path, const char *device)
{
    sv->sp = *sp;
    sv->path = dupstr(path);
    sv->device = dupstr(device);
    if (!sv->path || (device && !sv->device))
        return EBB_ENOMEM;
    sv->sp.model.path = sv->path;
    sv->sp.model.device = sv->device;
    sv->sp.on_loaded = ebb__served_on_loaded;
    sv->sp.ud = &sv->rep[0]; /* start_load points each replica's at itself */
    read_facts(sv);
    return EBB_OK;
}

/* A catalogue model from its settings (strings copied); NULL when out of memory. */
static struct ebb__served *served_from(struct ebb_api *a, const struct ebb_api_model *m)
{
    struct ebb__served *sv = served_new(a, m->id, m->chat_template);
    if (!sv)
        return NULL;
    sv->owned = true;
    sv->pin = m->pin;
    sv->keep_alive = sv->keep_alive_cfg = m->keep_alive;
    if (served_bind(sv, &m->sp, m->sp.model.path, m->sp.model.device)) {
        served_free(sv);
        return NULL;
    }
    return sv;
}

ebb_err ebb__catalogue_init(struct ebb_api *a, const struct ebb_api_config *cfg)
{
    if (cfg->n_devices > EBB__MAX_REPLICAS)
        return EBB_ERANGE;
    for (size_t i = 0; i < cfg->n_devices; i++) {
        if (!(a->devices[i] = strdup(cfg->devices[i])))
            return EBB_ENOMEM;
        a->n_devices = i + 1;
    }
    size_t n = cfg->n_models ? cfg->n_models : 1;
    a->models = calloc(n, sizeof(*a->models));
    if (!a->models)
        return EBB_ENOMEM;
    a->catalogue = cfg->n_models > 0;
    a->budget = cfg->models_budget;
    if (!a->catalogue) {
        a->models[0] = served_new(a, cfg->model_id, cfg->chat_template);
        if (!a->models[0])
            return EBB_ENOMEM;
        a->n_models = 1;
        a->def = a->models[0];
        return EBB_OK;
    }
    if (cfg->chat_template && !(a->added_template = dupstr(cfg->chat_template)))
        return EBB_ENOMEM;
    a->scan = cfg->catalogue_scan;
    a->scan_ud = cfg->ud;
    for (size_t i = 0; i < cfg->n_models; i++) {
        struct ebb__served *sv = served_from(a, &cfg->models[i]);
        if (!sv)
            return EBB_ENOMEM;
        a->models[a->n_models++] = sv;
    }
    qsort(a->models, a->n_models, sizeof(a->models[0]), cmp_served);
    a->def = a->models[0];
    return EBB_OK;
}

/* ---- following the source ------------------------------------------------------------------ */

/* Drops sv from the listings and names; a loaded one unloads once its requests are done. */
static void served_gone(struct ebb__served *sv)
{
    sv->gone = true;
    bool busy = sv->sched && (sv->n_live || !sv->load_seen);
    ebb_log(EBB_LOG_INFO, "http", "%s: %s is gone: no longer served%s", sv->id, sv->path,
            busy        ? "; unloaded once its requests in flight are done"
            : sv->sched ? "; unloading it"
                        : "");
    if (sv->sched)
        ebb__served_unload(sv, "its file is gone");
}

static struct ebb__served *live_with_path(struct ebb_api *a, const char *path)
{
    for (size_t i = 0; i < a->n_models; i++)
        if (!a->models[i]->gone && a->models[i]->path && !strcmp(a->models[i]->path, path))
            return a->models[i];
    return NULL;
}

/* Asks the source (also: a file to serve from now on, or NULL) and applies what changed. */
static void follow_sync(struct ebb_api *a, const char *also)
{
    const struct ebb_api_model *ms = NULL;
    size_t n = 0;
    if (!a->catalogue || !a->scan || a->stopping)
        return;
    int k = a->scan(a->scan_ud, also, &ms, &n);
    if (k < 0)
        ebb_log(EBB_LOG_WARN, "http", "cannot read the catalogue's source again (out of memory)");
    if (k <= 0)
        return;
    for (size_t i = 0; i < a->n_models; i++) {
        struct ebb__served *sv = a->models[i];
        bool have = false;
        for (size_t j = 0; j < n && !have && !sv->gone; j++)
            have = !strcmp(ms[j].sp.model.path, sv->path);
        if (!have && !sv->gone)
            served_gone(sv);
    }
    for (size_t j = 0; j < n; j++) {
        if (live_with_path(a, ms[j].sp.model.path))
            continue;
        bool taken = false;
        for (size_t i = 0; i < a->n_models && !taken; i++)
            taken = !a->models[i]->gone && !strcmp(a->models[i]->id, ms[j].id);
        if (taken) {
            ebb_log(EBB_LOG_WARN, "http", "%s: another model is named '%s'; not served",
                    ms[j].sp.model.path, ms[j].id);
            continue;
        }
        struct ebb__served **nm = realloc(a->models, (a->n_models + 1) * sizeof(*nm));
        if (!nm)
            return;
        a->models = nm;
        struct ebb__served *sv = served_from(a, &ms[j]);
        if (!sv)
            return;
        a->models[a->n_models++] = sv;
        ebb_log(EBB_LOG_INFO, "http", "%s: %s appeared: served from now on", sv->id, sv->path);
    }
    qsort(a->models, a->n_models, sizeof(a->models[0]), cmp_served);
    for (size_t i = 0; a->def->gone && i < a->n_models; i++)
        if (!a->models[i]->gone)
            a->def = a->models[i];
}

void ebb__catalogue_refresh(struct ebb_api *a)
{
    follow_sync(a, NULL);
}

/* The tick's share, once a second: the source asked, the facts of a file that was still being
 * copied read again once its size moved, and the models gone, unloaded and unused freed. */
static void follow_tick(struct ebb_api *a, double now)
{
    if (!a->scan || now - a->t_scan < 1.0)
        return;
    a->t_scan = now;
    follow_sync(a, NULL);
    for (size_t i = 0; i < a->n_models; i++) {
        struct ebb__served *sv = a->models[i];
        struct stat st;
        if (!sv->gone && !sv->file_size && !sv->sched && stat(sv->path, &st) == 0 &&
            (uint64_t)st.st_size != sv->facts_size) {
            read_facts(sv);
            sv->facts_size = sv->file_size ? 0 : (uint64_t)st.st_size;
        }
    }
    for (size_t i = 0; i < a->n_models;) {
        struct ebb__served *sv = a->models[i];
        if (!sv->gone || sv->sched || sv->n_live || sv->n_refs || sv == a->def) {
            i++;
            continue;
        }
        memmove(&a->models[i], &a->models[i + 1], (a->n_models - i - 1) * sizeof(a->models[0]));
        a->n_models--;
        served_free(sv);
    }
}

ebb_err ebb__catalogue_add(struct ebb_api *a, const char *path, bool *added)
{
    *added = false;
    if (!a->catalogue || a->stopping)
        return EBB_OK;
    const char *base = strrchr(path, '/');
    char id[256];
    snprintf(id, sizeof(id), "%s", base ? base + 1 : path);
    size_t l = strlen(id);
    if (l > 5 && !strcmp(id + l - 5, ".gguf"))
        id[l - 5] = 0;
    if (a->scan) {
        /* The source serves it from now on, with the [model.NAME] section naming it if any. */
        bool had = live_with_path(a, path) != NULL;
        follow_sync(a, path);
        *added = !had && live_with_path(a, path) != NULL;
        return EBB_OK;
    }
    for (size_t i = 0; i < a->n_models; i++)
        if (!a->models[i]->gone && !strcmp(a->models[i]->id, id))
            return EBB_OK;
    /* Without a source: the default model's settings (context, parallel slots, device...) as a
     * template: the context is capped at the new model's trained one when it loads. */
    const struct ebb__served *t = a->def;
    struct ebb__served **nm = realloc(a->models, (a->n_models + 1) * sizeof(*nm));
    if (!nm)
        return EBB_ENOMEM;
    a->models = nm;
    struct ebb__served *sv = served_new(a, id, a->added_template);
    if (!sv)
        return EBB_ENOMEM;
    sv->owned = true;
    sv->pin = false;
    sv->keep_alive = sv->keep_alive_cfg = t->keep_alive_cfg;
    if (served_bind(sv, &t->sp, path, t->device)) {
        served_free(sv);
        return EBB_ENOMEM;
    }
    a->models[a->n_models++] = sv;
    qsort(a->models, a->n_models, sizeof(a->models[0]), cmp_served);
    *added = true;
    return EBB_OK;
}

void ebb__catalogue_fini(struct ebb_api *a)
{
    for (size_t i = 0; i < a->n_models; i++)
        served_free(a->models[i]);
    free(a->models);
    free(a->added_template);
    a->added_template = NULL;
    for (size_t i = 0; i < a->n_devices; i++) {
        free(a->devices[i]);
        a->devices[i] = NULL;
    }
    a->n_devices = 0;
    a->models = NULL;
    a->n_models = 0;
    a->def = NULL;
}

/* ---- names --------------------------------------------------------------------------------- */

/* name without an Ollama tag of ":latest" (SmolLM2:latest names SmolLM2), into buf. */
static const char *untagged(const char *name, char *buf, size_t n)
{
    const char *c = strrchr(name, ':');
    if (!c || strcasecmp(c + 1, "latest") || (size_t)(c - name) >= n)
        return name;
    memcpy(buf, name, (size_t)(c - name));
    buf[c - name] = 0;
    return buf;
}

bool ebb__served_listed(const struct ebb__served *sv)
{
    return !sv->gone;
}

struct ebb__served *ebb__served_find_gone(struct ebb_api *a, const char *name)
{
    struct ebb__served *hit = NULL;
    for (size_t i = 0; name && i < a->n_models; i++)
        if (a->models[i]->gone && !strcmp(a->models[i]->id, name) && (!hit || !hit->sched))
            hit = a->models[i];
    return hit;
}

void ebb__served_take(struct ebb__req *r, struct ebb__served *sv)
{
    if (r->sv == sv)
        return;
    if (r->sv)
        r->sv->n_refs--;
    r->sv = sv;
    if (sv)
        sv->n_refs++;
}

struct ebb__served *ebb__served_find(struct ebb_api *a, const char *name, bool *ambiguous)
{
    char buf[512];
    *ambiguous = false;
    if (!name)
        return NULL;
    for (size_t i = 0; i < a->n_models; i++)
        if (!a->models[i]->gone && !strcmp(a->models[i]->id, name))
            return a->models[i];
    if (!a->catalogue)
        return NULL;
    const char *nm = untagged(name, buf, sizeof(buf));
    struct ebb__served *hit = NULL;
    for (size_t i = 0; i < a->n_models; i++)
        if (!a->models[i]->gone && !strcasecmp(a->models[i]->id, nm))
            return a->models[i];
    /* Ollama's "base:tag" for the id base.tag (or base-tag, base_tag). */
    const char *c = strrchr(name, ':');
    for (size_t i = 0; c && nm == name && i < a->n_models; i++) {
        const char *id = a->models[i]->id;
        size_t nb = (size_t)(c - name);
        if (!a->models[i]->gone && strlen(id) > nb && !strncasecmp(id, name, nb) &&
            strchr(".-_", id[nb]) && !strcasecmp(id + nb + 1, c + 1))
            return a->models[i];
    }
    size_t len = strlen(nm);
    for (size_t i = 0; len && i < a->n_models; i++) {
        if (a->models[i]->gone || strncasecmp(a->models[i]->id, nm, len))
            continue;
        if (hit) {
            *ambiguous = true;
            return NULL;
        }
        hit = a->models[i];
    }
    return hit;
}

static char tolower_ascii(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* How far apart two names are (edits, ignoring case), capped at 64 characters each. */
static size_t distance(const char *s, const char *t)
{
    size_t n = strlen(s), m = strlen(t), row[65];
    n = n > 64 ? 64 : n;
    m = m > 64 ? 64 : m;
    for (size_t j = 0; j <= m; j++)
        row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j];
            size_t sub = diag + (tolower_ascii(s[i - 1]) != tolower_ascii(t[j - 1]));
            size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return row[m];
}

void ebb__served_unknown(struct ebb__req *r, const char *name, bool ambiguous)
{
    struct ebb_api *a = r->api;
    char list[600] = "";
    size_t w = 0, k = 0;
    for (size_t i = 0; i < a->n_models && k < 5; i++) {
        const char *id = a->models[i]->id;
        if (a->models[i]->gone)
            continue;
        size_t d = distance(name, id), l = strlen(name);
        bool close = d <= (l / 3 > 2 ? l / 3 : 2) || strncasecmp(id, name, l ? l : 1) == 0 ||
                     (l >= 3 && strstr(id, name));
        if (!close && a->n_models > 5)
            continue;
        int c = snprintf(list + w, sizeof(list) - w, "%s'%s'", k ? ", " : "", id);
        if (c < 0 || (size_t)c >= sizeof(list) - w)
            break;
        w += (size_t)c;
        k++;
    }
    char msg[900];
    if (ambiguous)
        snprintf(msg, sizeof(msg), "The model '%.200s' is ambiguous: it starts %s", name, list);
    else if (!a->catalogue)
        snprintf(msg, sizeof(msg), "The model '%.200s' does not exist; this server has '%.80s'",
                 name, a->def->id);
    else if (k)
        snprintf(msg, sizeof(msg), "The model '%.200s' does not exist; close names: %s", name,
                 list);
    else
        snprintf(msg, sizeof(msg), "The model '%.200s' does not exist (GET /v1/models lists them)",
                 name);
    ebb__reply_error(r, 404, msg, "model", "model_not_found");
}

bool ebb__served_named(struct ebb__req *r, const char *name)
{
    bool amb;
    return !name || !*name || ebb__served_find(r->api, name, &amb) == r->sv;
}

/* keep_alive as ollama takes it: a number of seconds, or a duration ("5m", "1h30m", "-1"); a
 * negative value means forever. NAN for anything else. */
double ebb__keep_alive_secs(json_t *v)
{
    double secs;
    if (json_is_number(v))
        return json_number_value(v);
    if (!json_is_string(v) || !ebb_duration_parse(json_string_value(v), EBB_DURATION_GO, &secs))
        return NAN;
    return secs;
}

bool ebb__served_pick(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    r->sv_picked = true;
    r->keep_alive = NAN;
    json_t *o = json_loadb(r->body.p ? r->body.p : "", r->body.n, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return true; /* the handler answers the bad body */
    }
    r->keep_alive = ebb__keep_alive_secs(json_object_get(o, "keep_alive"));
    json_t *m = json_object_get(o, "model");
    if (!json_is_string(m) && !strcmp(r->path, "/api/show"))
        m = json_object_get(o, "name");
    const char *name = json_string_value(m);
    bool ok = true;
    if (a->catalogue && name && *name) {
        bool amb;
        struct ebb__served *sv = ebb__served_find(a, name, &amb);
        if (sv) {
            ebb__served_take(r, sv);
            r->sv_named = true;
        } else {
            ebb__served_unknown(r, name, amb);
            ok = false;
        }
    } else if (a->catalogue && r->sv->gone) {
        /* No name, and the default model's file is gone with every other one. */
        ebb__reply_error(r, 404,
                         "no model is served now: the models directory holds none (GET "
                         "/v1/models lists them)",
                         "model", "model_not_found");
        ok = false;
    }
    json_decref(o);
    return ok;
}

/* ---- loading and unloading ----------------------------------------------------------------- */

/* The KV cache at 16 KiB per token of context and slot: the family's real shapes are known only
 * once the model is open, and the budget must be checked before. */
static uint64_t kv_guess(const struct ebb__served *sv)
{
    uint64_t ctx =
        sv->sp.model.n_ctx ? sv->sp.model.n_ctx : (sv->n_ctx_train ? sv->n_ctx_train : 4096);
    uint64_t seq = sv->sp.model.n_seq ? sv->sp.model.n_seq : 1;
    if (ctx > 8192 && !sv->sp.model.n_ctx)
        ctx = 8192;
    return ctx * seq * 16384;
}

uint64_t ebb__served_bytes(const struct ebb__served *sv)
{
    return sv->file_size + kv_guess(sv) + sv->est.store + sv->est.repack;
}

static bool loaded(const struct ebb__served *sv)
{
    return sv->sched != NULL;
}

/* The streamer's figures of a loaded, ready model, each with its prompt-cache store added: a
 * model counts as its plan and its store, which the plan leaves out (the store is made after
 * the streamer plans; served_stream_budget takes it off again). False when it does not
 * stream. */
static bool residency(const struct ebb__served *sv, struct ebb_model_residency *r)
{
    if (!sv->ready || !sv->model || !ebb_model_residency(sv->model, r))
        return false;
    uint64_t store = ebb_model_kv_store_bytes(sv->model);
    r->bytes += store;
    r->bytes_min += store;
    r->bytes_full += store;
    return true;
}

uint64_t ebb__served_used(const struct ebb__served *sv)
{
    struct ebb_model_residency r;
    if (residency(sv, &r))
        /* A lent budget bounds the plan at once, before the engine has applied it. */
        return sv->lent && sv->lent < r.bytes ? sv->lent : r.bytes;
    if (!sv->ready || !sv->model)
        return ebb__served_bytes(sv);
    /* No streamer: the file (read whole at the load: the host engines repack it or read it in
     * place), what the engine allocated beside it (or, where it says nothing, the KV cache's
     * guess) and the store. */
    struct ebb_model_memory mm;
    ebb_model_memory(sv->model, &mm);
    uint64_t file = sv->file_size ? sv->file_size : ebb_gguf_file_size(ebb_model_gguf(sv->model));
    return file + (mm.host ? mm.host : kv_guess(sv)) + mm.repack + mm.store;
}

static bool idle(const struct ebb__served *sv)
{
    return sv->n_live == 0 && sv->load_seen;
}

/* Frees sv's scheduler (which closes its model). Only for an owned, idle model. */
static void unload(struct ebb__served *sv, const char *why)
{
    struct ebb_api *a = sv->api;
    ebb_log(EBB_LOG_INFO, "http", "unloading %s (%s)", sv->id, why);
    for (size_t i = 0; i < sv->n_rep; i++) {
        ebb_sched_free(sv->rep[i].sched);
        sv->rep[i].sched = NULL;
    }
    sv->sched = NULL;
    sv->model = NULL;
    ebb_chat_template_fini(&sv->tmpl);
    memset(&sv->tmpl, 0, sizeof(sv->tmpl));
    sv->ready = false;
    sv->load_seen = false;
    sv->unload_asked = false;
    sv->lent = 0;
    pthread_mutex_lock(&a->mu);
    sv->load_state = 0;
    for (size_t i = 0; i < sv->n_rep; i++)
        sv->rep[i].load_state = 0;
    pthread_mutex_unlock(&a->mu);
    sv->n_unloads++;
}

bool ebb__served_unload(struct ebb__served *sv, const char *why)
{
    if (!sv->owned || !loaded(sv))
        return false;
    if (!idle(sv)) {
        sv->unload_asked = true;
        return false;
    }
    unload(sv, why);
    return true;
}

/* Bytes the loaded models other than skip count against the budget. */
static uint64_t used_by_others(struct ebb_api *a, const struct ebb__served *skip)
{
    uint64_t used = 0;
    for (size_t i = 0; i < a->n_models; i++)
        if (a->models[i] != skip && loaded(a->models[i]))
            used += ebb__served_used(a->models[i]);
    return used;
}

/* A new streamer budget for every replica of sv (each on its own device): budget counts its
 * prompt-cache store too (as residency's figures do), the streamer's plan does not; 0 is every
 * layer. False when replica 0's model does not stream. */
static bool served_stream_budget(struct ebb__served *sv, uint64_t budget)
{
    uint64_t store = ebb_model_kv_store_bytes(sv->model);
    uint64_t plan = !budget ? 0 : budget > store ? budget - store : 1;
    bool ok = ebb_sched_stream_budget(sv->sched, plan);
    for (size_t i = 1; ok && i < sv->n_rep; i++)
        ebb_sched_stream_budget(sv->rep[i].sched, plan);
    return ok;
}

/* Shrinks idle models other than skip (least recently used first) by streaming their top
 * layers, until deficit bytes are freed or none can give more; a pinned model gives layers
 * too (it stays loaded, which is what pin promises). Returns the bytes freed. */
static uint64_t shrink_idle(struct ebb_api *a, const struct ebb__served *skip, uint64_t deficit)
{
    uint64_t freed = 0;
    for (size_t i = 0; i < a->n_models; i++)
        a->models[i]->shrink_tried = false;
    while (freed < deficit) {
        struct ebb__served *lru = NULL;
        struct ebb_model_residency r, rl = {0};
        for (size_t i = 0; i < a->n_models; i++) {
            struct ebb__served *sv = a->models[i];
            if (sv == skip || sv->shrink_tried || !idle(sv) || !residency(sv, &r) ||
                ebb__served_used(sv) <= r.bytes_min)
                continue;
            if (!lru || sv->last_used < lru->last_used)
                lru = sv, rl = r;
        }
        if (!lru)
            break;
        lru->shrink_tried = true;
        uint64_t now = ebb__served_used(lru), want = deficit - freed;
        uint64_t target = now - rl.bytes_min > want ? now - want : rl.bytes_min;
        if (!served_stream_budget(lru, target))
            continue;
        ebb_log(EBB_LOG_INFO, "http",
                "%s is idle: its streamer budget (its store included) goes %llu -> %llu MiB for "
                "another model",
                lru->id, (unsigned long long)(now >> 20), (unsigned long long)(target >> 20));
        lru->lent = target;
        lru->n_shrinks++;
        freed += now - target;
    }
    return freed;
}

/* Bytes idle streaming models other than skip could give by streaming every layer. */
static uint64_t shrinkable(struct ebb_api *a, const struct ebb__served *skip)
{
    uint64_t n = 0;
    struct ebb_model_residency r;
    for (size_t i = 0; i < a->n_models; i++) {
        const struct ebb__served *sv = a->models[i];
        if (sv != skip && idle(sv) && residency(sv, &r) && ebb__served_used(sv) > r.bytes_min)
            n += ebb__served_used(sv) - r.bytes_min;
    }
    return n;
}

/* Makes room under the budget for need bytes: idle models give layers (they stream them) when
 * that is enough, else idle unpinned models are unloaded, least recently used first, until it
 * is. False if that cannot make enough. */
static bool make_room(struct ebb_api *a, struct ebb__served *want, char *why, size_t n)
{
    if (!a->budget)
        return true;
    uint64_t need = ebb__served_bytes(want), used = used_by_others(a, want);
    while (used + need > a->budget) {
        if (used - shrinkable(a, want) + need <= a->budget) {
            shrink_idle(a, want, used + need - a->budget);
            return true;
        }
        struct ebb__served *lru = NULL;
        for (size_t i = 0; i < a->n_models; i++) {
            struct ebb__served *sv = a->models[i];
            if (sv == want || !loaded(sv) || sv->pin || !sv->owned || !idle(sv))
                continue;
            if (!lru || sv->last_used < lru->last_used)
                lru = sv;
        }
        if (!lru) {
            snprintf(why, n,
                     "cannot load '%s': it needs about %llu MiB and the models loaded now use "
                     "%llu MiB of the %llu MiB budget (models_budget), and none of them can give "
                     "way now (busy or pinned); try again shortly",
                     want->id, (unsigned long long)(need >> 20), (unsigned long long)(used >> 20),
                     (unsigned long long)(a->budget >> 20));
            return false;
        }
        used -= ebb__served_used(lru);
        unload(lru, "the memory budget needs room for another model");
    }
    return true;
}

/* A model that lent layers and is wanted again takes them back as the budget allows: from the
 * budget's free room, then from idle models' layers. */
static void regrow(struct ebb__served *sv)
{
    struct ebb_api *a = sv->api;
    struct ebb_model_residency r;
    if (!sv->lent || !residency(sv, &r))
        return;
    uint64_t used = used_by_others(a, sv), have = ebb__served_used(sv);
    if (a->budget && used + r.bytes_full > a->budget)
        used -= shrink_idle(a, sv, used + r.bytes_full - a->budget);
    uint64_t room = a->budget > used ? a->budget - used : 0;
    if (room <= have)
        return;
    uint64_t target = room >= r.bytes_full ? 0 : room; /* 0: every layer, the probes allowing */
    if (!served_stream_budget(sv, target))
        return;
    ebb_log(EBB_LOG_INFO, "http",
            "%s is wanted again: its streamer budget (its store included) goes %llu -> %s%llu MiB",
            sv->id, (unsigned long long)(have >> 20), target ? "" : "all layers, ",
            (unsigned long long)((target ? target : r.bytes_full) >> 20));
    sv->lent = target;
    sv->n_regrows++;
}

/* Starts loading sv. False (r answered with 503) if the budget has no room or the engine
 * thread cannot start. */
static bool start_load(struct ebb__req *r, struct ebb__served *sv)
{
    struct ebb_api *a = r->api;
    char why[600];
    if (sv->api->budget && ebb__served_bytes(sv) > a->budget) {
        snprintf(why, sizeof(why),
                 "cannot load '%s': it needs about %llu MiB, more than the whole %llu MiB "
                 "budget (models_budget)",
                 sv->id, (unsigned long long)(ebb__served_bytes(sv) >> 20),
                 (unsigned long long)(a->budget >> 20));
        ebb__reply_error(r, 503, why, "model", "model_unavailable");
        return false;
    }
    if (!make_room(a, sv, why, sizeof(why))) {
        ebb_log(EBB_LOG_WARN, "http", "%s", why);
        ebb__reply_error(r, 503, why, "model", "model_unavailable");
        return false;
    }
    struct ebb_diag d = {{0}};
    pthread_mutex_lock(&a->mu);
    sv->load_state = 0;
    sv->load_msg[0] = 0;
    for (size_t i = 0; i < sv->n_rep; i++) {
        sv->rep[i].load_state = 0;
        sv->rep[i].load_msg[0] = 0;
    }
    pthread_mutex_unlock(&a->mu);
    sv->load_seen = false;
    sv->t_load = ebb__now();
    ebb_log(EBB_LOG_INFO, "http", "loading %s (%s) for a request%s", sv->id, sv->path,
            sv->n_rep > 1 ? ", a replica on each device" : "");
    for (size_t i = 0; i < sv->n_rep; i++) {
        struct ebb__replica *rp = &sv->rep[i];
        struct ebb_sched_params sp = sv->sp;
        if (rp->device)
            sp.model.device = rp->device;
        sp.ud = rp;
        if (ebb_sched_new(&sp, &rp->sched, &d)) {
            rp->sched = NULL;
            for (size_t k = 0; k < i; k++) {
                ebb_sched_free(sv->rep[k].sched);
                sv->rep[k].sched = NULL;
            }
            snprintf(why, sizeof(why), "cannot load '%s' on %s: %s", sv->id,
                     ebb__replica_device(rp), d.msg);
            ebb__reply_error(r, 503, why, "model", "model_unavailable");
            return false;
        }
    }
    sv->sched = sv->rep[0].sched;
    sv->n_loads++;
    return true;
}

bool ebb__served_ready(struct ebb__req *r)
{
    struct ebb__served *sv = r->sv;
    if (sv->ready)
        return true;
    if (r->api->freeing || (r->api->stopping && r->api->catalogue)) {
        ebb__reply_error(r, 503, "the server is shutting down", "model", "model_unavailable");
        return false;
    }
    if (!r->api->catalogue) {
        if (sv->load_seen)
            ebb__reply_error(r, 503, sv->tmpl_err[0] ? sv->tmpl_err : "the model failed to load",
                             NULL, "model_unavailable");
        else
            ebb__reply_error(r, 503, "the model is still loading", NULL, "model_loading");
        return false;
    }
    if (sv->gone && !loaded(sv)) {
        char msg[400];
        snprintf(msg, sizeof(msg), "The model '%.200s' does not exist any more (its file is gone)",
                 sv->id);
        ebb__reply_error(r, 404, msg, "model", "model_not_found");
        return false;
    }
    if (!loaded(sv) && !start_load(r, sv))
        return false;
    /* Counted in flight from now on: once loaded, the model cannot be unloaded (keep_alive 0,
     * the budget) before this request, woken, reaches it. */
    ebb__served_count(r);
    ebb__park(r); /* catalogue_async wakes it once the load ends */
    return false;
}

void ebb__served_count(struct ebb__req *r)
{
    if (r->sv_counted)
        return;
    r->sv_counted = true;
    r->sv->n_live++;
    r->sv->last_used = ebb__now();
    regrow(r->sv);
}

void ebb__served_release(struct ebb__req *r)
{
    struct ebb__served *sv = r->sv;
    if (!sv)
        return;
    sv->n_refs--;
    /* Used: it reached the engine, or (Ollama's "load" requests, with nothing to generate) it
     * was answered from the loaded model. */
    bool used = r->sv_counted || (r->sv_named && r->status == 200 && sv->ready);
    if (r->sv_counted) {
        r->sv_counted = false;
        sv->n_live--;
    }
    if (!used)
        return;
    sv->last_used = ebb__now();
    /* As ollama: the request's keep_alive, or the configured one when it sent none, says how
     * long the model stays once idle. */
    if (r->sv_named)
        sv->keep_alive = isnan(r->keep_alive) ? sv->keep_alive_cfg : r->keep_alive;
}

void ebb__catalogue_async(struct ebb_api *a)
{
    bool wake = false;
    for (size_t i = 0; i < a->n_models; i++) {
        struct ebb__served *sv = a->models[i];
        pthread_mutex_lock(&a->mu);
        int st = sv->load_state;
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", sv->load_msg);
        pthread_mutex_unlock(&a->mu);
        if (st == 0 || sv->load_seen || !sv->sched)
            continue;
        double t_setup = ebb__now();
        bool ok = st == 1 && ebb__setup_loaded(sv);
        t_setup = ebb__now() - t_setup;
        sv->load_seen = true;
        sv->load_secs = ebb__now() - sv->t_load;
        sv->last_used = ebb__now();
        if (!ok && st != 1)
            ebb_log(EBB_LOG_ERROR, "http", "cannot load the model %s: %s", sv->id, msg);
        if (!a->catalogue) {
            if (a->on_ready)
                a->on_ready(a->ud, ok, ok ? NULL : st == 1 ? sv->tmpl_err : msg);
            continue;
        }
        ebb_log(EBB_LOG_INFO, "http", "%s %s in %.2f s (of which %.3f s its chat template)", sv->id,
                ok ? "loaded" : "failed to load", sv->load_secs, t_setup);
        /* Its plan is known now, and may exceed the estimate the room was made for: idle
         * models stream more layers to cover the difference. */
        uint64_t used = used_by_others(a, NULL);
        if (ok && a->budget && used > a->budget)
            shrink_idle(a, sv, used - a->budget);
        if (!ok) {
            /* Requests waiting for it get the reason; a later request tries again. */
            if (st == 1)
                snprintf(msg, sizeof(msg), "%s", sv->tmpl_err);
            for (struct ebb__req *r = a->parked, *n; r; r = n) {
                n = r->park_next;
                if (r->sv != sv)
                    continue;
                char why[700];
                snprintf(why, sizeof(why), "cannot load '%s': %s", sv->id, msg);
                ebb__unpark(r);
                ebb__reply_error(r, 503, why, "model", "model_unavailable");
                ebb__resume(r);
            }
            unload(sv, "its load failed");
            sv->n_unloads--;
        }
        wake = true;
    }
    if (wake && !a->hold)
        ebb__catalogue_wake(a);
}

void ebb__catalogue_wake(struct ebb_api *a)
{
    while (a->parked) {
        struct ebb__req *r = a->parked;
        ebb__unpark(r);
        ebb__resume(r); /* MHD calls the handler again, which parks it again if need be */
    }
}

void ebb__catalogue_tick(struct ebb_api *a, double now)
{
    if (a->catalogue && !a->stopping)
        follow_tick(a, now);
    for (size_t i = 0; a->catalogue && i < a->n_models; i++) {
        struct ebb__served *sv = a->models[i];
        if (sv->lent && sv->n_live)
            regrow(sv); /* busy: room freed since (an unload, a keep_alive) comes back to it */
        if (!sv->owned || !loaded(sv) || !idle(sv))
            continue;
        if (sv->unload_asked)
            unload(sv, sv->gone ? "its file is gone" : "asked to");
        else if (!sv->pin && sv->keep_alive >= 0 && now - sv->last_used >= sv->keep_alive)
            unload(sv, "idle past its keep_alive");
    }
}

void ebb_api_cancel_all(struct ebb_api *a)
{
    for (size_t i = 0; i < a->n_models; i++)
        for (size_t k = 0; k < a->models[i]->n_rep; k++)
            if (a->models[i]->rep[k].sched)
                ebb_sched_cancel_all(a->models[i]->rep[k].sched);
}

void ebb_api_stream_probe(struct ebb_api *a)
{
    for (size_t i = 0; a->catalogue && i < a->n_models; i++) {
        struct ebb__served *sv = a->models[i];
        for (size_t k = 0; sv->ready && k < sv->n_rep; k++) {
            struct ebb_model *m = sv->rep[k].sched ? ebb_sched_model(sv->rep[k].sched) : NULL;
            if (m && ebb_model_streaming(m)) {
                ebb_model_stream_probe(m);
                ebb_sched_stream_poke(sv->rep[k].sched);
            }
        }
    }
}

/* ---- data parallel --------------------------------------------------------------------------- */

struct ebb__replica *ebb__served_place(struct ebb__served *sv, const int32_t *prompt,
                                       uint32_t n_prompt)
{
    if (sv->n_rep == 1)
        return sv->rep[0].sched ? &sv->rep[0] : NULL;
    struct ebb_sched_offer offers[EBB__MAX_REPLICAS];
    bool ready[EBB__MAX_REPLICAS];
    for (size_t i = 0; i < sv->n_rep; i++) {
        ready[i] = sv->rep[i].sched != NULL;
        if (ready[i])
            ebb_sched_offer(sv->rep[i].sched, prompt, n_prompt, &offers[i]);
    }
    int k = ebb_sched_place(offers, ready, sv->n_rep);
    return k < 0 ? NULL : &sv->rep[k];
}

const char *ebb__replica_state(const struct ebb__replica *rp)
{
    struct ebb_api *a = rp->sv->api;
    pthread_mutex_lock(&a->mu);
    int st = rp->load_state;
    pthread_mutex_unlock(&a->mu);
    if (!rp->sched)
        return "unloaded";
    return st > 0 ? "loaded" : st < 0 ? "failed" : "loading";
}

/* ---- describing the models ----------------------------------------------------------------- */

const char *ebb__served_state(const struct ebb__served *sv)
{
    if (sv->ready)
        return "loaded";
    if (sv->sched && !sv->load_seen)
        return "loading";
    if (sv->load_seen)
        return "failed";
    return "unloaded";
}

json_t *ebb__served_json(const struct ebb__served *sv)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(sv->id));
    json_object_set_new(o, "state", json_string(ebb__served_state(sv)));
    json_object_set_new(o, "loaded", json_boolean(sv->ready));
    json_object_set_new(o, "pinned", json_boolean(sv->pin));
    uint64_t size = sv->file_size;
    if (!size && sv->model)
        size = ebb_gguf_file_size(ebb_model_gguf(sv->model));
    json_object_set_new(o, "size", json_integer((json_int_t)size));
    const char *fam = sv->model ? ebb_model_arch(sv->model) : sv->family;
    json_object_set_new(o, "family", json_string(fam ? fam : ""));
    json_object_set_new(o, "context",
                        json_integer(sv->model ? ebb_model_n_ctx(sv->model) : sv->n_ctx_train));
    if (sv->keep_alive < 0)
        json_object_set_new(o, "keep_alive", json_integer(-1));
    else
        json_object_set_new(o, "keep_alive", json_real(sv->keep_alive));
    json_object_set_new(o, "in_flight", json_integer((json_int_t)sv->n_live));
    json_object_set_new(o, "loads", json_integer((json_int_t)sv->n_loads));
    json_object_set_new(o, "unloads", json_integer((json_int_t)sv->n_unloads));
    if (sv->load_secs > 0)
        json_object_set_new(o, "load_seconds", json_real(sv->load_secs));
    struct ebb_model_residency rs;
    if (residency(sv, &rs)) {
        json_t *l = json_object();
        json_object_set_new(l, "total", json_integer(rs.n_layer));
        json_object_set_new(l, "resident", json_integer(rs.n_resident));
        json_object_set_new(l, "streamed", json_integer(rs.n_streamed));
        json_object_set_new(o, "layers", l);
    }
    if (sv->ready)
        json_object_set_new(o, "memory_bytes", json_integer((json_int_t)ebb__served_used(sv)));
    json_t *reps = json_array();
    for (size_t i = 0; i < sv->n_rep; i++) {
        const struct ebb__replica *rp = &sv->rep[i];
        json_t *x = json_object();
        json_object_set_new(x, "device", json_string(ebb__replica_device(rp)));
        json_object_set_new(x, "state", json_string(ebb__replica_state(rp)));
        json_object_set_new(x, "requests", json_integer((json_int_t)rp->n_placed));
        if (rp->sched) {
            struct ebb_sched_stats st;
            ebb_sched_stats(rp->sched, &st);
            json_object_set_new(x, "in_flight", json_integer((json_int_t)(st.queued + st.active)));
        }
        json_array_append_new(reps, x);
    }
    json_object_set_new(o, "replicas", reps);
    json_object_set_new(o, "shrinks", json_integer((json_int_t)sv->n_shrinks));
    json_object_set_new(o, "regrows", json_integer((json_int_t)sv->n_regrows));
    return o;
}
