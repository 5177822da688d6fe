/* The fuzz targets link api/chat/chat-template.c (and api/openai/tools-req.c) without the model
 * module: the one function that takes a loaded model (ebb_chat_template_for_model) is never called,
 * so its model accessors only have to exist. */
#include <stdlib.h>

#include "model/model.h"

const struct ebb_tokenizer *ebb_model_tokenizer(const struct ebb_model *m)
{
    (void)m;
    abort();
}

const struct ebb_gguf *ebb_model_gguf(const struct ebb_model *m)
{
    (void)m;
    abort();
}

/* api/openai/tools-req.c's per-request steps answer through the server, which the request target
 * does not link; it only calls the parsers. */
#include "api/openai/openai.h"

void ebb__reply_error(struct ebb__req *r, unsigned status, const char *message, const char *param,
                      const char *type)
{
    (void)r, (void)status, (void)message, (void)param, (void)type;
    abort();
}
