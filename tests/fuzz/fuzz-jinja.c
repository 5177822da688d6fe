/* libFuzzer target for the Jinja interpreter that renders chat templates: the input is a
 * template source, a NUL byte, then the render context as JSON (a messages array alone is
 * wrapped as {"messages": ...}). Rendering runs under small limits so that a slow input is a
 * limit error, not a fuzzer timeout. Any crash, sanitizer report or leak is a finding; so is a
 * failure without a message. */
#include <stdlib.h>
#include <string.h>

#include "api/jinja/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    const char *nul = memchr(data, 0, size);
    size_t n = nul ? (size_t)(nul - src) : size;
    struct ebb_jinja *t = NULL;
    struct ebb_diag d = {{0}};
    if (ebb_jinja_parse(src, n, &t, &d) != EBB_OK) {
        if (!d.msg[0])
            __builtin_trap();
        return 0;
    }
    json_t *vars = NULL;
    if (nul) {
        json_t *v = json_loadb(nul + 1, size - n - 1, JSON_DECODE_ANY, NULL);
        if (json_is_object(v)) {
            vars = v;
        } else {
            vars = json_object();
            json_object_set_new(vars, "messages", v ? v : json_array());
        }
    } else {
        vars = json_pack("{s:[{s:s,s:s},{s:s,s:s}],s:b,s:s,s:s}", "messages", "role", "system",
                         "content", "Be brief.", "role", "user", "content", "Hi",
                         "add_generation_prompt", 1, "bos_token", "<s>", "eos_token", "</s>");
    }
    struct ebb_jinja_limits lim = {
        .max_output = 1u << 20, .max_memory = 64u << 20, .max_steps = 200000, .max_depth = 32};
    struct tm now = {.tm_year = 126, .tm_mon = 10, .tm_mday = 25};
    char *out = NULL;
    size_t len = 0;
    memset(&d, 0, sizeof(d));
    ebb_err rc = ebb_jinja_render(t, vars, &now, &lim, &out, &len, &d);
    if (rc == EBB_OK && (!out || strlen(out) > len || len > lim.max_output))
        __builtin_trap();
    if (rc != EBB_OK && !d.msg[0])
        __builtin_trap();
    free(out);
    json_decref(vars);
    ebb_jinja_free(t);
    return 0;
}
