/* jansson's allocator for the daemon: plain malloc and free, plus a per-thread record of any
 * allocation that failed. jansson does not report every failure: its lexer drops the bytes it
 * cannot store (a string may come back shorter) and json_object_set_new leaves a key out, so
 * code that must not act on such a value asks ebb__json_alloc_failed() afterwards. */
#include "http.h"

#include <stdlib.h>

static _Thread_local bool failed;

static void *json_malloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        failed = true;
    return p;
}

void ebb__json_alloc_init(void)
{
    json_set_alloc_funcs(json_malloc, free);
}

bool ebb__json_alloc_failed(bool clear)
{
    bool f = failed;
    if (clear)
        failed = false;
    return f;
}
