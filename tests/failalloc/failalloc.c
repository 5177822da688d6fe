/* ebb-failalloc: the ebb binary with an allocation-failure hook, for tests only. It is linked
 * from ebb's own objects with `-Wl,--wrap=` for malloc, calloc, realloc, strdup and strndup (the
 * calls in ebb's code, including api/http/jsonmem.c, the allocator ebb gives jansson), so the
 * allocations of ebb and of the JSON it builds can be made to fail; libc, libuv,
 * libmicrohttpd and the OpenCL driver allocate as usual.
 *
 * A request with the header `X-Ebb-Fail-Alloc: N` makes the Nth allocation counted from its
 * arrival fail (one failure, then allocations succeed again); a request without it disarms the
 * hook. EBB_TEST_FAIL_ALLOC=N in the environment arms it for the first request. Each failure is
 * written to stderr as "ebb-failalloc: failing allocation #N (SIZE bytes)", which is how a test
 * knows whether N was still inside the request's path.
 *
 * Why this and not an LD_PRELOAD shim: a preloaded malloc cannot be combined with AddressSanitizer
 * (its runtime must come first and owns malloc), and the walk must run under ASan; why a header
 * and not only the variable: one daemon serves the whole walk, instead of one model load per N. */
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
enum MHD_Result __real_ebb__on_access(void *cls, struct MHD_Connection *c, const char *url,
                                      const char *method, const char *version, const char *upload,
                                      size_t *upload_size, void **con_cls);
enum MHD_Result __wrap_ebb__on_access(void *cls, struct MHD_Connection *c, const char *url,
                                      const char *method, const char *version, const char *upload,
                                      size_t *upload_size, void **con_cls);

static atomic_long target; /* the allocation to fail, counted from the request; 0: off */
static atomic_long count;

static void say(long n, size_t size)
{
    char line[96];
    int k = snprintf(line, sizeof(line), "ebb-failalloc: failing allocation #%ld (%zu bytes)\n", n,
                     size);
    if (k > 0 && write(2, line, (size_t)k) < 0)
        return;
}

static int fail_now(size_t size)
{
    long t = atomic_load_explicit(&target, memory_order_relaxed);
    if (!t)
        return 0;
    long c = atomic_fetch_add(&count, 1) + 1;
    if (c != t || !atomic_compare_exchange_strong(&target, &t, 0))
        return 0;
    say(c, size);
    return 1;
}

void *__wrap_malloc(size_t n)
{
    return fail_now(n) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
    return fail_now(k * n) ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
    return fail_now(n) ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    return fail_now(strlen(s) + 1) ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return fail_now(n) ? NULL : __real_strndup(s, n);
}

static void arm(long n)
{
    atomic_store(&target, 0);
    atomic_store(&count, 0);
    atomic_store(&target, n > 0 ? n : 0);
}

static atomic_int env_used;

enum MHD_Result __wrap_ebb__on_access(void *cls, struct MHD_Connection *c, const char *url,
                                      const char *method, const char *version, const char *upload,
                                      size_t *upload_size, void **con_cls)
{
    if (!*con_cls) {
        const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Ebb-Fail-Alloc");
        const char *e = getenv("EBB_TEST_FAIL_ALLOC");
        if (!v && e && !atomic_exchange(&env_used, 1))
            v = e;
        arm(v ? atol(v) : 0);
    }
    return __real_ebb__on_access(cls, c, url, method, version, upload, upload_size, con_cls);
}
