/* The store of recent responses (responses-int.h): a JSON object from id to entry, each entry
 * stamped with the tick of its last use; a put past the cap drops the entries with the oldest
 * stamps. A scan per eviction is cheap next to a generation at any cap the config allows. */
#include "responses-int.h"

#include <stdlib.h>

struct ebb__resp_store {
    json_t *map; /* id -> {"r": response, "h": history, "t": tick} */
    json_int_t tick;
};

static void store_free(void *p)
{
    struct ebb__resp_store *s = p;
    if (!s)
        return;
    json_decref(s->map);
    free(s);
}

struct ebb__resp_store *ebb__resp_store_of(struct ebb_api *a)
{
    if (a->resp_store)
        return a->resp_store;
    struct ebb__resp_store *s = calloc(1, sizeof(*s));
    if (!s || !(s->map = json_object())) {
        free(s);
        return NULL;
    }
    a->resp_store = s;
    a->resp_store_free = store_free;
    return s;
}

static void evict_to(struct ebb__resp_store *s, size_t cap)
{
    while (json_object_size(s->map) > cap) {
        const char *key, *oldest = NULL;
        json_t *v;
        json_int_t t = 0;
        json_object_foreach(s->map, key, v)
        {
            json_int_t vt = json_integer_value(json_object_get(v, "t"));
            if (!oldest || vt < t) {
                oldest = key;
                t = vt;
            }
        }
        json_object_del(s->map, oldest);
    }
}

void ebb__resp_store_put(struct ebb__resp_store *s, unsigned cap, const char *id, json_t *response,
                         json_t *history)
{
    if (!s || !cap)
        return;
    evict_to(s, cap - 1);
    json_t *e = json_pack("{sOsOsI}", "r", response, "h", history, "t", (json_int_t)++s->tick);
    if (e)
        json_object_set_new(s->map, id, e);
}

bool ebb__resp_store_get(struct ebb__resp_store *s, const char *id, json_t **response,
                         json_t **history)
{
    json_t *e = s ? json_object_get(s->map, id) : NULL;
    if (!e)
        return false;
    json_object_set_new(e, "t", json_integer(++s->tick));
    *response = json_object_get(e, "r");
    *history = json_object_get(e, "h");
    return true;
}

bool ebb__resp_store_delete(struct ebb__resp_store *s, const char *id)
{
    return s && json_object_del(s->map, id) == 0;
}
