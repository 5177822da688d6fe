/* libFuzzer target for the input side of /tokenize and /detokenize with a real vocabulary
 * (fuzz-vocab.h): the first byte picks the endpoint and the flags, the rest is taken as the
 * request's text (tokenize: content, detokenize: little-endian 32-bit ids, reduced into the
 * vocabulary as the handler's range check requires). The steps are the handler's: encode with
 * a growing buffer, pieces, then the streaming detokenizer; the detokenized text must be valid
 * UTF-8 and every piece of every id must be readable. */
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

static void detok(const int32_t *ids, size_t n)
{
    struct ebb__abuf b = {0};
    struct ebb_detok dt;
    ebb_detok_init(&dt);
    char tmp[3100];
    for (size_t i = 0; i < n; i++) {
        struct ebb_str p = {0};
        if (ebb_tokenizer_piece(tok, ids[i], false, &p))
            __builtin_trap(); /* ids are inside the vocabulary */
        size_t pn = p.n > 1000 ? 1000 : (size_t)p.n;
        ebb__abuf_put(&b, tmp, ebb_detok_push(&dt, p.p, pn, tmp, sizeof(tmp)));
        if (ebb_tokenizer_piece(tok, ids[i], true, &p))
            __builtin_trap();
    }
    ebb__abuf_put(&b, tmp, ebb_detok_finish(&dt, tmp, sizeof(tmp)));
    if (!b.oom && !ebb__utf8_valid(b.p ? b.p : "", b.n))
        __builtin_trap();
    json_t *j = ebb__json_text(b.p ? b.p : "", b.n);
    if (!j)
        __builtin_trap();
    json_decref(j);
    ebb__abuf_fini(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    uint32_t nv = ebb_tokenizer_n_vocab(tok);
    if (data[0] & 1) {
        size_t k = n / 4;
        int32_t *ids = malloc((k ? k : 1) * sizeof(int32_t));
        for (size_t i = 0; i < k; i++) {
            uint32_t v;
            memcpy(&v, s + 4 * i, 4);
            ids[i] = (int32_t)(v % nv);
        }
        detok(ids, k);
        free(ids);
        return 0;
    }
    unsigned flags =
        ((data[0] & 2) ? EBB_TOK_ADD_SPECIAL : 0) | ((data[0] & 4) ? EBB_TOK_PARSE_SPECIAL : 0);
    size_t cap = 16, got = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    ebb_err rc = ebb_tokenizer_encode(tok, s, n, flags, ids, cap, &got);
    if (rc == EBB_ERANGE) {
        cap = got;
        ids = realloc(ids, (cap ? cap : 1) * sizeof(int32_t));
        rc = ebb_tokenizer_encode(tok, s, n, flags, ids, cap, &got);
    }
    if (rc || got > cap)
        __builtin_trap();
    for (size_t i = 0; i < got; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= nv)
            __builtin_trap();
    detok(ids, got);
    free(ids);
    return 0;
}
