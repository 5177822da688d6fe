/* The top of the API: ties the HTTP core (server.c) to the files above it (routes.c, gen.c), so
 * that the core calls them through a table and no two files of api/ call each other. */
#include "api/api.h"
#include "routes-int.h"
#include "api/ollama/ollama.h"
#include "api/openai/openai.h"

static const struct ebb__handlers handlers = {
    .on_access = ebb__on_access,
    .gen_pump = ebb__gen_pump,
    .gen_keepalive = ebb__gen_keepalive,
    .gen_conn_closed = ebb__gen_conn_closed,
    .gen_free = ebb__gen_free,
    .catalogue_init = ebb__catalogue_init,
    .catalogue_fini = ebb__catalogue_fini,
    .catalogue_async = ebb__catalogue_async,
    .catalogue_tick = ebb__catalogue_tick,
    .served_release = ebb__served_release,
    .pull_tick = ebb__ollama_pull_tick,
    .pull_stop = ebb__ollama_pull_stop,
};

ebb_err ebb_api_new(uv_loop_t *loop, const struct ebb_api_config *cfg, struct ebb_api **out,
                    struct ebb_diag *diag)
{
    return ebb__server_new(loop, cfg, &handlers, out, diag);
}
