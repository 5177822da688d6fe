/* libFuzzer target for the request path of /v1/chat/completions and /v1/completions: the first
 * byte picks the endpoint, the rest is the body. A body that validates is taken on as the server
 * takes it: a chat conversation is rendered through the chat template (the built-in ChatML
 * family and, when EBB_FUZZ_TEMPLATE names a Jinja file, that template too). Any crash,
 * sanitizer report or leak is a finding; so is a rejection without a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/openai/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static struct ebb_chat_template chatml, jinja;
static bool have_jinja;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (ebb_chat_template_by_name("chatml", &chatml))
        abort();
    const char *path = getenv("EBB_FUZZ_TEMPLATE");
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (f) {
        static char src[65536];
        size_t n = fread(src, 1, sizeof(src) - 1, f);
        fclose(f);
        struct ebb_diag d;
        have_jinja = ebb_chat_template_from_source(src, n, "<s>", "</s>", true, &jinja, &d) == 0;
        if (!have_jinja)
            fprintf(stderr, "EBB_FUZZ_TEMPLATE: %s\n", d.msg);
    }
    return 0;
}

static void render(const struct ebb_chat_template *t, const struct ebb__gen_req *q)
{
    char *text = NULL;
    size_t len = 0;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_chat_template_render(t, q->msgs, q->n_msgs, true, &text, &len, &d);
    if (rc == EBB_OK && (!text || strlen(text) != len))
        __builtin_trap();
    if (rc != EBB_OK && !d.msg[0])
        __builtin_trap(); /* a rejected conversation says why */
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool chat = !(data[0] & 1);
    struct ebb__gen_req q;
    struct ebb__perr e;
    memset(&e, 0, sizeof(e));
    ebb_err rc = ebb__gen_req_parse((const char *)data + 1, size - 1, chat, &q, &e);
    if (rc == EBB_EINVAL && (!memchr(e.msg, 0, sizeof(e.msg)) || !e.msg[0]))
        __builtin_trap();
    if (rc == EBB_OK) {
        if (chat) {
            render(&chatml, &q);
            if (have_jinja)
                render(&jinja, &q);
        } else if (!q.prompt && !q.prompt_ids) {
            __builtin_trap();
        }
    }
    ebb__gen_req_fini(&q); /* the server finishes the request whether it parsed or not */
    return 0;
}
