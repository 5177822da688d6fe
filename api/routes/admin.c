/* The model admin endpoints: POST /models/load and POST /models/unload ({"model": NAME}) and
 * GET /models/status (every model of the catalogue and its state). They sit behind the same API
 * key check as every other route (routes.c). */
#include "routes-int.h"

#include <stdio.h>
#include <string.h>

/* The model o's "model" field names, or NULL after answering r (400 or 404). gone_too: also
 * one whose file is gone while it is still loaded (`ebb rm` tells the daemon so). */
static struct ebb__served *named(struct ebb__req *r, json_t *o, bool gone_too)
{
    json_t *m = json_object_get(o, "model");
    if (!json_is_string(m) || !json_string_length(m)) {
        ebb__reply_error(r, 400, "'model' is required: the name of a model (GET /v1/models)",
                         "model", NULL);
        return NULL;
    }
    bool amb;
    struct ebb__served *sv = ebb__served_find(r->api, json_string_value(m), &amb);
    if (!sv && gone_too)
        sv = ebb__served_find_gone(r->api, json_string_value(m));
    if (!sv)
        ebb__served_unknown(r, json_string_value(m), amb);
    return sv;
}

void ebb__admin_handle(struct ebb__req *r)
{
    struct ebb_api *a = r->api;
    if (!strcmp(r->path, "/models/status")) {
        json_t *o = json_object(), *d = json_array();
        for (size_t i = 0; i < a->n_models; i++)
            if (ebb__served_listed(a->models[i]))
                json_array_append_new(d, ebb__served_json(a->models[i]));
        json_object_set_new(o, "object", json_string("list"));
        json_object_set_new(o, "catalogue", json_boolean(a->catalogue));
        if (a->budget)
            json_object_set_new(o, "budget", json_integer((json_int_t)a->budget));
        json_object_set_new(o, "data", d);
        ebb__reply_json(r, 200, o);
        return;
    }
    bool load = !strcmp(r->path, "/models/load");
    json_t *o = json_loadb(r->body.p ? r->body.p : "", r->body.n, 0, NULL);
    struct ebb__served *sv = NULL;
    if (!json_is_object(o)) {
        ebb__reply_error(r, 400, "the body must be a JSON object {\"model\": NAME}", NULL, NULL);
        goto out;
    }
    if (!(sv = named(r, o, !load)))
        goto out;
    ebb__served_take(r, sv);
    if (load) {
        double ka = ebb__keep_alive_secs(json_object_get(o, "keep_alive"));
        if (!ebb__served_ready(r))
            goto out; /* parked until the load ends (this runs again), or answered 503 */
        if (ka == ka) /* not NAN */
            sv->keep_alive = ka;
        sv->last_used = ebb__now();
        ebb__reply_json(r, 200, ebb__served_json(sv));
        goto out;
    }
    if (!sv->owned) {
        ebb__reply_error(r, 409,
                         "this model is the one the server was started with (-m); it is not "
                         "unloaded while the server runs",
                         "model", "model_pinned");
        goto out;
    }
    if (sv->pin && !sv->gone) {
        ebb__reply_error(r, 409, "this model is pinned (pin = true); it is never unloaded", "model",
                         "model_pinned");
        goto out;
    }
    bool now = ebb__served_unload(sv, "asked to");
    json_t *res = ebb__served_json(sv);
    /* Busy: it unloads once its requests are done (202); idle: unloaded already (200). */
    json_object_set_new(res, "unloading", json_boolean(!now && sv->unload_asked));
    if (sv->gone)
        json_object_set_new(res, "removed", json_true()); /* its file is gone: no longer listed */
    ebb__reply_json(r, now || !sv->unload_asked ? 200 : 202, res);
out:
    json_decref(o);
}
