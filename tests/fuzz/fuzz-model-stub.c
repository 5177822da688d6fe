/* The fuzz targets link api/chat-template.c without the model module: the one function that
 * takes a loaded model (ebb_chat_template_for_model) is never called, so its model accessors
 * only have to exist. */
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
