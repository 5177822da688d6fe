/* The served model on the edge: the configured generation defaults and their resolution against
 * the model's own, the chat template and fill-in-the-middle tokens picked when the engine has
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

void ebb__setup_defaults(struct ebb_api *a)
{
    const struct ebb_gguf *g = a->ignore_model_sampling ? NULL : ebb_model_gguf(a->model);
    ebb_defaults_resolve(g, &a->cfg_defaults, &a->gen_defaults);
    for (size_t i = 0; i < a->gen_defaults.n_notes; i++)
        ebb_log(EBB_LOG_WARN, "http", "model %s: %s", a->model_id, a->gen_defaults.notes[i]);
    char line[512];
    size_t w = 0;
    for (int f = 0; f < EBB_DEF_N_FIELDS && w < sizeof(line); f++) {
        char v[32];
        ebb_defaults_format(&a->gen_defaults.v, (enum ebb_defaults_field)f, v, sizeof(v));
        int k = snprintf(line + w, sizeof(line) - w, "%s%s %s (%s)", f ? ", " : "",
                         ebb_defaults_field_name((enum ebb_defaults_field)f), v,
                         ebb_defaults_source_name(a->gen_defaults.src[f]));
        w += k > 0 ? (size_t)k : 0;
    }
    ebb_log(EBB_LOG_INFO, "http", "generation defaults: %s", line);
}

/* Picks m's chat template (a family name, or NULL to detect it) and fill-in-the-middle tokens
 * into a's fields; on error nothing changes and diag says why. */
static ebb_err use_model(struct ebb_api *a, struct ebb_model *m, const char *chat_template,
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

static void log_ready(struct ebb_api *a)
{
    ebb_log(EBB_LOG_INFO, "http",
            "model %s ready on %s (arch %s, n_ctx %u, %u slots, chat template %s)", a->model_id,
            ebb_model_device_name(a->model), ebb_model_arch(a->model), ebb_model_n_ctx(a->model),
            ebb_model_n_seq(a->model), ebb_chat_family_name(a->tmpl.family));
}

void ebb__setup_loaded(struct ebb_api *a)
{
    a->load_seen = true;
    struct ebb_model *m = ebb_sched_model(a->sched);
    if (!m)
        return;
    struct ebb_diag d = {{0}};
    if (use_model(a, m, a->chat_template, &d)) {
        snprintf(a->tmpl_err, sizeof(a->tmpl_err), "%s", d.msg);
        ebb_log(EBB_LOG_ERROR, "http", "%s", d.msg);
        if (a->on_ready)
            a->on_ready(a->ud, false, a->tmpl_err);
        return;
    }
    a->ready = true;
    ebb__setup_defaults(a);
    log_ready(a);
    if (a->on_ready)
        a->on_ready(a->ud, true, NULL);
}

ebb_err ebb_api_set_model(struct ebb_api *a, struct ebb_model *m, const char *model_id,
                          const char *chat_template, struct ebb_diag *diag)
{
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
    free(a->model_id);
    a->model_id = id;
    free(a->chat_template);
    a->chat_template = ct;
    a->model_created = (long long)ebb__unix_now();
    a->tmpl_err[0] = 0;
    a->ready = true;
    ebb__setup_defaults(a);
    log_ready(a);
    return EBB_OK;
}

void ebb_api_set_sched(struct ebb_api *a, struct ebb_sched *s)
{
    a->sched = s;
}

void ebb_api_on_loaded(void *api, ebb_err rc, const char *msg)
{
    struct ebb_api *a = api;
    pthread_mutex_lock(&a->mu);
    a->load_state = rc ? -1 : 1;
    if (rc)
        snprintf(a->load_msg, sizeof(a->load_msg), "%s", msg && *msg ? msg : ebb_err_str(rc));
    pthread_mutex_unlock(&a->mu);
    uv_async_send(&a->async);
}

bool ebb_api_load_failed(const struct ebb_api *a)
{
    return a->load_seen && (a->load_state < 0 || !a->ready);
}
