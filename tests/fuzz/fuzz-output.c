/* libFuzzer target for the output builders the server writes untrusted text through: model
 * text (any bytes) made valid UTF-8 for JSON, the JSON string escaper the streaming chunks
 * use, SSE events, error objects and the logprobs objects with a real vocabulary
 * (fuzz-vocab.h). Each output is parsed back: an SSE event is one "data: <json>\n\n" line whose
 * JSON holds the text that went in; valid UTF-8 survives unchanged. */
#include <stdint.h>
#include <string.h>

#include "api/openai/openai.h"
#include "fuzz-vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static struct ebb_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = fuzz_vocab_load();
    return 0;
}

static void check_text(const char *s, size_t n)
{
    bool valid = ebb__utf8_valid(s, n);
    json_t *j = ebb__json_text(s, n);
    if (!j || !ebb__utf8_valid(json_string_value(j), json_string_length(j)))
        __builtin_trap();
    if (valid && (json_string_length(j) != n || memcmp(json_string_value(j), s, n)))
        __builtin_trap();

    /* An SSE event carrying the text: one line, and the JSON parses back to it. */
    struct ebb__abuf b = {0};
    json_t *o = json_object();
    json_object_set_new(o, "content", j);
    ebb__sse_event(&b, json_incref(o));
    if (b.oom || b.n < 8 || memcmp(b.p, "data: ", 6) || memcmp(b.p + b.n - 2, "\n\n", 2) ||
        memchr(b.p, '\n', b.n - 2))
        __builtin_trap();
    json_t *back = json_loadb(b.p + 6, b.n - 8, JSON_ALLOW_NUL, NULL);
    if (!back || !json_equal(back, o))
        __builtin_trap();
    json_decref(back);
    json_decref(o);
    ebb__abuf_fini(&b);

    /* The escaper the streaming path appends model text with. */
    if (valid) {
        struct ebb__abuf e = {0};
        ebb__json_escape(&e, s, n);
        json_t *v = json_loadb(e.p ? e.p : "", e.n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (!v || json_string_length(v) != n || memcmp(json_string_value(v), s, n))
            __builtin_trap();
        json_decref(v);
        ebb__abuf_fini(&e);
    }

    /* An error object whose message is the text (messages quote request input). */
    char *msg = strndup(s, n);
    char *err = ebb__error_json(valid ? msg : "x", "invalid_request_error", "p", NULL);
    json_t *ej = err ? json_loads(err, 0, NULL) : NULL;
    if (!ej || !json_is_string(json_object_get(json_object_get(ej, "error"), "message")))
        __builtin_trap();
    json_decref(ej);
    free(err);
    free(msg);
}

static void check_logprobs(const uint8_t *data, size_t size)
{
    uint32_t nv = ebb_tokenizer_n_vocab(tok);
    struct ebb__lp lps[8];
    size_t n = 0;
    for (size_t i = 0; i + 4 <= size && n < 8; i += 4, n++) {
        uint32_t v;
        memcpy(&v, data + i, 4);
        memset(&lps[n], 0, sizeof(lps[n]));
        lps[n].id = (int32_t)(v % nv);
        lps[n].logprob = -(float)(v % 1000) / 100.0f;
        lps[n].n_top = v % (EBB_SAMPLE_MAX_TOP + 1);
        for (uint32_t k = 0; k < lps[n].n_top; k++) {
            lps[n].top_ids[k] = (int32_t)((v >> k) % nv);
            lps[n].top_logprobs[k] = -(float)k;
        }
    }
    json_t *c = ebb__chat_logprobs(tok, lps, n);
    json_t *p = ebb__compl_logprobs(tok, lps, n, size);
    char *s1 = json_dumps(c, JSON_COMPACT), *s2 = json_dumps(p, JSON_COMPACT);
    if (!s1 || !s2 || json_array_size(c) != n)
        __builtin_trap();
    free(s1);
    free(s2);
    json_decref(c);
    json_decref(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_text((const char *)data, size);
    check_logprobs(data, size);
    return 0;
}
