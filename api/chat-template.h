/* Chat templates rendered in C. A GGUF's tokenizer.chat_template is a Jinja program; rather
 * than interpret Jinja, ebb recognises the families real models ship by their distinctive
 * markers and renders each with code that produces the same text as the Jinja template (with
 * bos_token rendered empty: the tokenizer adds BOS as the model's metadata asks). */
#ifndef EBB_API_CHAT_TEMPLATE_H
#define EBB_API_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

enum ebb_chat_family {
    EBB_CHAT_CHATML = 1, /* <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen) */
    EBB_CHAT_GEMMA,      /* <start_of_turn>user\n...<end_of_turn>\n, assistant is "model" */
    EBB_CHAT_LLAMA3,     /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    EBB_CHAT_MISTRAL,    /* [INST] ... [/INST] answer</s> */
};

/* A recognised template: its family plus what the Jinja source hardcodes (ChatML templates such
 * as SmolLM2's and Qwen's insert a default system message when the conversation has none). */
struct ebb_chat_template {
    enum ebb_chat_family family;
    char default_system[512]; /* "" if none */
};

struct ebb_chat_msg {
    const char *role; /* "system", "user" or "assistant" */
    const char *content;
    size_t len;
};

/* "chatml, gemma, llama3, mistral": the names --chat-template accepts, for messages. */
const char *ebb_chat_template_names(void);
const char *ebb_chat_family_name(enum ebb_chat_family f);

/* Sets t from a family name (see ebb_chat_template_names); EBB_ENOTFOUND otherwise. */
ebb_err ebb_chat_template_by_name(const char *name, struct ebb_chat_template *t);

/* Recognises a Jinja template source (n bytes). When src is NULL (the GGUF has none), the
 * special tokens the vocabulary has decide: pass has_token to look them up (may be NULL).
 * EBB_EUNSUPPORTED with a message listing the known names if nothing matches. */
ebb_err ebb_chat_template_detect(const char *src, size_t n,
                                 bool (*has_token)(void *ud, const char *text), void *ud,
                                 struct ebb_chat_template *t, struct ebb_diag *diag);

struct ebb_model;

/* The template for model m: the family `name` when given (EBB_ENOTFOUND with a message naming
 * the known ones), else recognised from its tokenizer.chat_template, or from its special tokens
 * when it has none (ebb_chat_template_detect). */
ebb_err ebb_chat_template_for_model(const struct ebb_model *m, const char *name,
                                    struct ebb_chat_template *t, struct ebb_diag *diag);

/* Renders msgs into a newly malloc'd NUL-terminated string (*out, *out_len). add_generation
 * adds the assistant header at the end. EBB_EINVAL with a message for conversations the
 * template rejects (unknown role, roles that do not alternate where the family requires it). */
ebb_err ebb_chat_template_render(const struct ebb_chat_template *t, const struct ebb_chat_msg *msgs,
                                 size_t n, bool add_generation, char **out, size_t *out_len,
                                 struct ebb_diag *diag);

#endif
