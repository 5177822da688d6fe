/* Private to api/routes/: the router that api.c hands to the edge (struct ebb__handlers). */
#ifndef EBB_API_ROUTES_INT_H
#define EBB_API_ROUTES_INT_H

#include <microhttpd.h>

#include "api/http/http.h"

/* MHD's access handler: authentication, CORS, and the route of each path to its room. */
enum MHD_Result ebb__on_access(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls);

/* POST /models/load, POST /models/unload, GET /models/status (admin.c). */
void ebb__admin_handle(struct ebb__req *r);

#endif
