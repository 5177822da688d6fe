/* Chat templates. A GGUF's tokenizer.chat_template is a Jinja program, rendered by ebb's Jinja
 * interpreter (jinja.h) as Hugging Face renders it, with the vocabulary's BOS and EOS texts.
 * Four built-in families (chatml, gemma, llama3, mistral) render in C what those templates
 * produce (with bos_token empty: the tokenizer adds BOS as the model's metadata asks); they are
 * used when the user names one (--chat-template NAME), or when a model has no template and its
 * special tokens show the family. */
#ifndef EBB_API_CHAT_TEMPLATE_H
#define EBB_API_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "api/tools/tools.h"

struct ebb_jinja;

enum ebb_chat_family {
    EBB_CHAT_CHATML = 1, /* <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen) */
    EBB_CHAT_GEMMA,      /* <start_of_turn>user\n...<end_of_turn>\n, assistant is "model" */
    EBB_CHAT_LLAMA3,     /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    EBB_CHAT_MISTRAL,    /* [INST] ... [/INST] answer</s> */
    EBB_CHAT_JINJA,      /* the model's own tokenizer.chat_template, interpreted */
};

/* A recognised template: its family plus what the Jinja source hardcodes (ChatML templates such
 * as SmolLM2's and Qwen's insert a default system message when the conversation has none). */
struct ebb_chat_template {
    enum ebb_chat_family family;
    char default_system[512]; /* "" if none */
    /* EBB_CHAT_JINJA only (owned: release with ebb_chat_template_fini): */
    struct ebb_jinja *jinja;
    char bos_token[128], eos_token[128]; /* the template's bos_token and eos_token */
    bool strip_bos; /* the tokenizer adds BOS itself, so a leading bos_token text is dropped */
    /* Tools: whether the Jinja source renders `tools` itself (else api/openai/tools-render.c's
     * fallback describes them), and the call format the model answers in (api/tools/tools.h;
     * hermes, the fallback's, when the template has no tools). */
    bool tools_native;
    enum ebb_tool_format tool_format;
    /* The Jinja source reads `enable_thinking` (Qwen3 and its kin): a request's reasoning effort
     * can switch the model's thinking on and off through it. */
    bool has_thinking;
};

struct ebb_chat_msg {
    const char *role; /* "system", "user", "assistant" or "tool" (templates that have it) */
    const char *content;
    size_t len;
    /* The request's message object, or NULL: its other fields (tool_calls, tool_call_id, name)
     * reach a Jinja template; tool_calls[].function.arguments given as a JSON string is passed
     * parsed, as templates expect an object. */
    const json_t *msg;
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

/* The template for model m (release with ebb_chat_template_fini): the family `name` when given
 * (EBB_ENOTFOUND with a message naming the known ones), else the model's tokenizer.chat_template
 * compiled (ebb_chat_template_from_source, with the vocabulary's BOS and EOS texts), or, when
 * it has none, the family its special tokens show (ebb_chat_template_detect). */
ebb_err ebb_chat_template_for_model(const struct ebb_model *m, const char *name,
                                    struct ebb_chat_template *t, struct ebb_diag *diag);

/* Compiles a Jinja chat template source into t (family EBB_CHAT_JINJA) with the given token
 * texts (NULL: ""). A template outside the interpreter's subset is an error whose message names
 * the line and the construct and the --chat-template names to use instead. */
ebb_err ebb_chat_template_from_source(const char *src, size_t n, const char *bos, const char *eos,
                                      bool strip_bos, struct ebb_chat_template *t,
                                      struct ebb_diag *diag);

/* Releases what t owns (the compiled Jinja template); t may be zeroed or NULL. */
void ebb_chat_template_fini(struct ebb_chat_template *t);

/* Renders msgs into a newly malloc'd NUL-terminated string (*out, *out_len). add_generation
 * adds the assistant header at the end. A conversation the template rejects is rendered again
 * normalized as the OpenAI API would take it (consecutive messages of one role merged, then a
 * late system message as a user one and an empty user turn before a leading assistant one, then
 * every system message as a user one),
 * so a template that demands alternating roles accepts what clients send. EBB_EINVAL with a
 * message (about the conversation as sent) when even that is rejected (unknown role, tool calls
 * a built-in family cannot render, a Jinja template that raises or fails; the message names the
 * template line). */
ebb_err ebb_chat_template_render(const struct ebb_chat_template *t, const struct ebb_chat_msg *msgs,
                                 size_t n, bool add_generation, char **out, size_t *out_len,
                                 struct ebb_diag *diag);

/* The same with tools (a JSON array of OpenAI tool objects, or NULL) passed to a Jinja template
 * as `tools`; the built-in families cannot render tools (EBB_EINVAL when tools is non-empty). */
ebb_err ebb_chat_template_render_tools(const struct ebb_chat_template *t,
                                       const struct ebb_chat_msg *msgs, size_t n,
                                       const json_t *tools, bool add_generation, char **out,
                                       size_t *out_len, struct ebb_diag *diag);

/* The same with extra template variables: vars (a JSON object or NULL, not stolen) adds its keys
 * to what a Jinja template sees (enable_thinking, chat_template_kwargs); the variables ebb sets
 * itself (messages, tools, documents, add_generation_prompt, bos_token, eos_token) win. The
 * built-in families have no variables and ignore vars. */
ebb_err ebb_chat_template_render_vars(const struct ebb_chat_template *t,
                                      const struct ebb_chat_msg *msgs, size_t n,
                                      const json_t *tools, const json_t *vars, bool add_generation,
                                      char **out, size_t *out_len, struct ebb_diag *diag);

#endif
