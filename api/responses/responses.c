/* /v1/responses: a new response (POST) through the chat generation with this room's output
 * hooks, and the stored ones read (GET /v1/responses/{id}) or deleted (DELETE). */
#include "responses.h"
#include "responses-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A Responses error names Responses fields: the chat parser's names for the same fields are
 * translated back. */
static void rename_param(struct ebb__perr *e)
{
    static const struct {
        const char *chat, *resp;
    } names[] = {{"response_format", "text.format"},
                 {"max_completion_tokens", "max_output_tokens"},
                 {"messages", "input"},
                 {"reasoning_effort", "reasoning.effort"}};
    for (size_t i = 0; e->param && i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(e->param, names[i].chat))
            e->param = names[i].resp;
    /* A schema error's path (response_format.json_schema.schema.properties.x...): the same
     * schema is text.format.schema here. */
    static const char schema[] = "response_format.json_schema.schema";
    if (e->param == e->param_buf && !strncmp(e->param_buf, schema, sizeof(schema) - 1)) {
        char rest[sizeof(e->param_buf)];
        snprintf(rest, sizeof(rest), "%s", e->param_buf + sizeof(schema) - 1);
        snprintf(e->param_buf, sizeof(e->param_buf), "text.format.schema%.280s", rest);
    }
}

static void create(struct ebb__req *r)
{
    if (!ebb__gen_ready(r))
        return;
    struct ebb__resp_req q;
    struct ebb__gen_req gq;
    struct ebb__perr pe;
    struct ebb__resp *st = NULL;
    struct ebb__gen *g = NULL;
    bool gq_set = false;
    ebb_err rc = ebb__resp_req_parse(r->api, r->body.p ? r->body.p : "", r->body.n, &q, &pe);
    char *chat = NULL;
    if (!rc) {
        chat = json_dumps(q.chat, JSON_COMPACT);
        rc = chat ? EBB_OK : EBB_ENOMEM;
    }
    if (!rc) {
        rc = ebb__gen_req_parse(chat, strlen(chat), true, &gq, &pe);
        gq_set = true;
        rename_param(&pe);
    }
    if (!rc) {
        /* Errors name the Responses field for what the chat path checks later too. */
        if (gq.effort_param)
            gq.effort_param = "reasoning.effort";
        st = ebb__resp_new(&q);
        g = ebb__gen_new(1);
        rc = st && g ? EBB_OK : EBB_ENOMEM;
    }
    if (rc) {
        if (rc == EBB_EINVAL)
            ebb__reply_error(r, 400, pe.msg, pe.param, NULL);
        else if (rc == EBB_ENOTFOUND)
            ebb__reply_error(r, 404, pe.msg, pe.param, "not_found");
        else
            ebb__reply_error(r, 500, ebb_err_str(rc), NULL, "internal_error");
        ebb__gen_free(g);
        ebb__resp_fmt.free(st);
        goto out;
    }
    g->fmt = &ebb__resp_fmt;
    g->ext = st;
    ebb__resp_id(g->id, sizeof(g->id), "resp");
    ebb__gen_run(r, &gq, g);
out:
    if (gq_set)
        ebb__gen_req_fini(&gq);
    free(chat);
    ebb__resp_req_fini(&q);
}

/* GET or DELETE /v1/responses/{id}. */
static void stored(struct ebb__req *r)
{
    const char *id = strchr(r->path + 1, '/');
    id = id ? strchr(id + 1, '/') : NULL;
    if (!strncmp(r->path, "/responses/", 11))
        id = r->path + 10;
    id = id ? id + 1 : "";
    struct ebb__resp_store *s = ebb__resp_store_of(r->api);
    json_t *resp = NULL, *hist = NULL;
    char msg[200];
    snprintf(msg, sizeof(msg), "Response with id '%.100s' not found.", id);
    if (!strcmp(r->method, "DELETE")) {
        if (!ebb__resp_store_delete(s, id)) {
            ebb__reply_error(r, 404, msg, NULL, "not_found");
            return;
        }
        ebb__reply_json(r, 200,
                        json_pack("{sssssb}", "id", id, "object", "response", "deleted", 1));
        return;
    }
    if (!ebb__resp_store_get(s, id, &resp, &hist)) {
        ebb__reply_error(r, 404, msg, NULL, "not_found");
        return;
    }
    ebb__reply_json(r, 200, json_incref(resp));
}

void ebb__responses_handle(struct ebb__req *r)
{
    if (r->gen)
        ebb__gen_handle(r); /* resumed: the body once the engine is done */
    else if (!strcmp(r->method, "POST"))
        create(r);
    else
        stored(r);
}
