/* A served model on the edge: the configured generation defaults and their resolution against
 * the model's own, the chat template and fill-in-the-middle tokens picked when an engine has
 * loaded a model (ebb_api_on_loaded, then server.c's async callback) or when the daemon swaps
 * one in (ebb_api_set_model). Loop thread, except ebb_api_on_loaded. */
#include "http.h"
#include "http-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "tokenizer/tokenizer.h"

void ebb__setup_generation(struct ebb_api *a, const struct ebb_api_config *cfg)
{
    if (cfg->generation) {
        a->cfg_defaults = *cfg->generation;
    } else {
        a->cfg_defaults.mask = 0;
        ebb_defaults_builtin(&a->cfg_defaults.v);
    }
    a->ignore_model_sampling = cfg->ignore_model_sampling;
}

void ebb__setup_defaults(struct ebb__served *sv)
{
    struct ebb_api *a = sv->api;
    const struct ebb_gguf *g = a->ignore_model_sampling ? NULL : ebb_model_gguf(sv->model);
    ebb_defaults_resolve(g, &a->cfg_defaults, &sv->gen_defaults);
    for (size_t i = 0; i < sv->gen_defaults.n_notes; i++)
        ebb_log(EBB_LOG_WARN, "http", "model %s: %s", sv->id, sv->gen_defaults.notes[i]);
    char line[512];
    size_t w = 0;
    for (int f = 0; f < EBB_DEF_N_FIELDS && w < sizeof(line); f++) {
        char v[32];
        ebb_defaults_format(&sv->gen_defaults.v, (enum ebb_defaults_field)f, v, sizeof(v));
        int k = snprintf(line + w, sizeof(line) - w, "%s%s %s (%s)", f ? ", " : "",
                         ebb_defaults_field_name((enum ebb_defaults_field)f), v,
                         ebb_defaults_source_name(sv->gen_defaults.src[f]));
        w += k > 0 ? (size_t)k : 0;
    }
    ebb_log(EBB_LOG_INFO, "http", "generation defaults of %s: %s", sv->id, line);
}

/* Picks m's chat template (a family name, or NULL to detect it) and fill-in-the-middle tokens
 * into sv's fields; on error nothing changes and diag says why. */
static ebb_err use_model(struct ebb__served *a, struct ebb_model *m, const char *chat_template,
                         struct ebb_diag *diag)
{
    const struct ebb_tokenizer *tok = ebb_model_tokenizer(m);
    struct ebb_chat_template tmpl;
    ebb_err rc = ebb_chat_template_for_model(m, chat_template, &tmpl, diag);
    if (rc)
        return rc;
    static const char *const pre[] = {"<|fim_prefix|>", "<fim_prefix>", "<|fim▁begin|>"};
    static const char *const suf[] = {"<|fim_suffix|>", "<fim_suffix>", "<|fim▁hole|>"};
    static const char *const mid[] = {"<|fim_middle|>", "<fim_middle>", "<|fim▁end|>"};
    a->fim_pre = a->fim_suf = a->fim_mid = -1;
    for (size_t i = 0; i < 3; i++) {
        int32_t p = ebb_tokenizer_find(tok, pre[i], strlen(pre[i]));
        int32_t s = ebb_tokenizer_find(tok, suf[i], strlen(suf[i]));
        int32_t mi = ebb_tokenizer_find(tok, mid[i], strlen(mid[i]));
        if (p >= 0 && s >= 0 && mi >= 0) {
            a->fim_pre = p;
            a->fim_suf = s;
            a->fim_mid = mi;
            break;
        }
    }
    /* Requests render their prompt on this (the loop) thread before they are submitted, so no
     * render can be using the template replaced here. */
    ebb_chat_template_fini(&a->tmpl);
    a->tmpl = tmpl;
    a->model = m;
    return EBB_OK;
}

static void log_ready(struct ebb__served *a)
{
    char reps[64] = "";
    if (a->n_rep > 1)
        snprintf(reps, sizeof(reps), " and %zu more device%s, a copy on each", a->n_rep - 1,
                 a->n_rep > 2 ? "s" : "");
    ebb_log(EBB_LOG_INFO, "http",
            "model %s ready on %s%s (arch %s, n_ctx %u, %u slots%s, chat template %s)", a->id,
            ebb_model_device_name(a->model), reps, ebb_model_arch(a->model),
            ebb_model_n_ctx(a->model), ebb_model_n_seq(a->model), a->n_rep > 1 ? " each" : "",
            ebb_chat_family_name(a->tmpl.family));
}

bool ebb__setup_loaded(struct ebb__served *sv)
{
    sv->load_seen = true;
    struct ebb_model *m = ebb_sched_model(sv->sched);
    if (!m)
        return false;
    struct ebb_diag d = {{0}};
    if (use_model(sv, m, sv->chat_template, &d)) {
        snprintf(sv->tmpl_err, sizeof(sv->tmpl_err), "%s", d.msg);
        ebb_log(EBB_LOG_ERROR, "http", "%s", d.msg);
        return false;
    }
    sv->tmpl_err[0] = 0;
    sv->ready = true;
    ebb__setup_defaults(sv);
    log_ready(sv);
    return true;
}

ebb_err ebb_api_set_model(struct ebb_api *api, struct ebb_model *m, const char *model_id,
                          const char *chat_template, struct ebb_diag *diag)
{
    struct ebb__served *a = api->def;
    char *id = strdup(model_id ? model_id : "model");
    char *ct = chat_template ? strdup(chat_template) : NULL;
    if (!id || (chat_template && !ct)) {
        free(id);
        free(ct);
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory");
    }
    ebb_err rc = use_model(a, m, ct, diag);
    if (rc) {
        free(id);
        free(ct);
        return rc;
    }
    free(a->id);
    a->id = id;
    free(a->chat_template);
    a->chat_template = ct;
    a->created = (long long)ebb__unix_now();
    a->tmpl_err[0] = 0;
    a->ready = true;
    ebb__setup_defaults(a);
    log_ready(a);
    return EBB_OK;
}

void ebb_api_set_sched(struct ebb_api *a, size_t i, struct ebb_sched *s)
{
    struct ebb__served *sv = a->def;
    if (i >= sv->n_rep)
        return;
    sv->rep[i].sched = s;
    if (i == 0)
        sv->sched = s;
    sv->t_load = ebb__now();
}

void *ebb_api_replica(struct ebb_api *a, size_t i)
{
    return i < a->def->n_rep ? &a->def->rep[i] : NULL;
}

const char *ebb__replica_device(const struct ebb__replica *rp)
{
    if (rp->device)
        return rp->device;
    const char *d = rp->sv->device ? rp->sv->device : rp->sv->sp.model.device;
    return d && *d ? d : "auto";
}

void ebb__served_on_loaded(void *ud, ebb_err rc, const char *msg)
{
    struct ebb__replica *rp = ud;
    struct ebb__served *sv = rp->sv;
    struct ebb_api *a = sv->api;
    pthread_mutex_lock(&a->mu);
    rp->load_state = rc ? -1 : 1;
    if (rc)
        snprintf(rp->load_msg, sizeof(rp->load_msg), "%s", msg && *msg ? msg : ebb_err_str(rc));
    /* The model serves once every replica is open; one that fails fails the model. */
    int st = 1;
    for (size_t i = 0; i < sv->n_rep && st >= 0; i++) {
        const struct ebb__replica *x = &sv->rep[i];
        if (x->load_state < 0) {
            st = -1;
            if (sv->n_rep > 1)
                snprintf(sv->load_msg, sizeof(sv->load_msg), "on %s: %.400s",
                         ebb__replica_device(x), x->load_msg);
            else
                snprintf(sv->load_msg, sizeof(sv->load_msg), "%s", x->load_msg);
        } else if (x->load_state == 0) {
            st = 0;
        }
    }
    sv->load_state = st;
    pthread_mutex_unlock(&a->mu);
    uv_async_send(&a->async);
}

void ebb_api_on_loaded(void *replica, ebb_err rc, const char *msg)
{
    ebb__served_on_loaded(replica, rc, msg);
}

bool ebb_api_load_failed(const struct ebb_api *a)
{
    const struct ebb__served *sv = a->def;
    return !a->catalogue && sv->load_seen && (sv->load_state < 0 || !sv->ready);
}
