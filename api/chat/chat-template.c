/* Chat templates: the model's own Jinja template through the interpreter, or a built-in family
 * that mirrors its Jinja template exactly, including its whitespace trimming (Gemma and Llama 3
 * trim message content). */
#include "chat-template.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/jinja/jinja.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_puts(struct sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static const struct {
    const char *name;
    enum ebb_chat_family family;
} families[] = {
    {"chatml", EBB_CHAT_CHATML},
    {"gemma", EBB_CHAT_GEMMA},
    {"llama3", EBB_CHAT_LLAMA3},
    {"mistral", EBB_CHAT_MISTRAL},
};

const char *ebb_chat_template_names(void)
{
    return "chatml, gemma, llama3, mistral";
}

const char *ebb_chat_family_name(enum ebb_chat_family f)
{
    if (f == EBB_CHAT_JINJA)
        return "the model's own (Jinja)";
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        if (families[i].family == f)
            return families[i].name;
    }
    return "?";
}

ebb_err ebb_chat_template_by_name(const char *name, struct ebb_chat_template *t)
{
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        if (!strcmp(families[i].name, name)) {
            memset(t, 0, sizeof(*t));
            t->family = families[i].family;
            return EBB_OK;
        }
    }
    return EBB_ENOTFOUND;
}

static const char *find(const char *s, size_t n, const char *needle)
{
    return memmem(s, n, needle, strlen(needle));
}

/* Finds a hardcoded "<|im_start|>system\n...<|im_end|>" string literal in a ChatML template and
 * copies its text (Jinja escapes \n, \' and \" undone) as the default system message. */
static void chatml_default_system(const char *src, size_t n, struct ebb_chat_template *t)
{
    static const char *const heads[] = {"<|im_start|>system\n", "<|im_start|>system\\n"};
    for (size_t h = 0; h < 2; h++) {
        size_t hl = strlen(heads[h]);
        for (const char *p = find(src, n, heads[h]); p;
             p = find(p + hl, n - (size_t)(p + hl - src), heads[h])) {
            const char *b = p + hl;
            const char *e = find(b, n - (size_t)(b - src), "<|im_end|>");
            if (!e || e == b)
                continue;
            /* A system message written from a variable has Jinja syntax in between. */
            if (find(b, (size_t)(e - b), "{{") || find(b, (size_t)(e - b), "'") ||
                find(b, (size_t)(e - b), "+"))
                continue;
            size_t w = 0;
            for (const char *q = b; q < e && w + 1 < sizeof(t->default_system); q++) {
                char c = *q;
                if (c == '\\' && q + 1 < e) {
                    q++;
                    c = *q == 'n' ? '\n' : *q == 't' ? '\t' : *q;
                }
                t->default_system[w++] = c;
            }
            t->default_system[w] = 0;
            return;
        }
    }
}

ebb_err ebb_chat_template_detect(const char *src, size_t n,
                                 bool (*has_token)(void *ud, const char *text), void *ud,
                                 struct ebb_chat_template *t, struct ebb_diag *diag)
{
    memset(t, 0, sizeof(*t));
    if (src) {
        if (find(src, n, "<|im_start|>")) {
            t->family = EBB_CHAT_CHATML;
            chatml_default_system(src, n, t);
        } else if (find(src, n, "<start_of_turn>")) {
            t->family = EBB_CHAT_GEMMA;
        } else if (find(src, n, "<|start_header_id|>")) {
            t->family = EBB_CHAT_LLAMA3;
        } else if (find(src, n, "[INST]")) {
            t->family = EBB_CHAT_MISTRAL;
        }
        if (t->family)
            return EBB_OK;
        return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                            "the model's chat template is not one ebb recognises; pass "
                            "--chat-template with one of: %s",
                            ebb_chat_template_names());
    }
    if (has_token) {
        if (has_token(ud, "<|im_start|>"))
            t->family = EBB_CHAT_CHATML;
        else if (has_token(ud, "<start_of_turn>"))
            t->family = EBB_CHAT_GEMMA;
        else if (has_token(ud, "<|start_header_id|>"))
            t->family = EBB_CHAT_LLAMA3;
        else if (has_token(ud, "[INST]"))
            t->family = EBB_CHAT_MISTRAL;
        if (t->family)
            return EBB_OK;
    }
    return ebb_diag_set(diag, EBB_EUNSUPPORTED,
                        "the model has no chat template and its special tokens match none "
                        "ebb knows; pass --chat-template with one of: %s",
                        ebb_chat_template_names());
}

/* Python's str.strip() (Unicode's whitespace), as Jinja's trim filter does. */
static void trimmed(const char *s, size_t n, const char **b, size_t *len)
{
    size_t off;
    ebb_jinja_trim(s, n, &off, len);
    *b = s + off;
}

static bool is_role(const struct ebb_chat_msg *m, const char *r)
{
    return !strcmp(m->role, r);
}

static ebb_err render_chatml(const struct ebb_chat_template *t, const struct ebb_chat_msg *m,
                             size_t n, struct sbuf *b)
{
    if (t->default_system[0] && (n == 0 || !is_role(&m[0], "system"))) {
        sb_puts(b, "<|im_start|>system\n");
        sb_puts(b, t->default_system);
        sb_puts(b, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        sb_puts(b, "<|im_start|>");
        sb_puts(b, m[i].role);
        sb_puts(b, "\n");
        sb_put(b, m[i].content, m[i].len);
        sb_puts(b, "<|im_end|>\n");
    }
    return EBB_OK;
}

/* Templates without a system role (Gemma, Mistral) take a leading system message apart and
 * put it in front of the first user message. */
static const struct ebb_chat_msg *take_system(const struct ebb_chat_msg **m, size_t *n)
{
    if (!*n || !is_role(&(*m)[0], "system"))
        return NULL;
    const struct ebb_chat_msg *sys = &(*m)[0];
    (*m)++;
    (*n)--;
    return sys;
}

/* The same templates require user/assistant turns to alternate, starting with the user. */
static ebb_err check_alternating(const struct ebb_chat_msg *m, size_t n, struct ebb_diag *diag)
{
    for (size_t i = 0; i < n; i++)
        if (is_role(&m[i], "user") != (i % 2 == 0))
            return ebb_diag_set(diag, EBB_EINVAL,
                                "conversation roles must alternate user/assistant/user/...");
    return EBB_OK;
}

static ebb_err render_gemma(const struct ebb_chat_msg *m, size_t n, struct sbuf *b,
                            struct ebb_diag *diag)
{
    const struct ebb_chat_msg *sys = take_system(&m, &n);
    ebb_err rc = check_alternating(m, n, diag);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        sb_puts(b, "<start_of_turn>");
        sb_puts(b, is_role(&m[i], "assistant") ? "model" : m[i].role);
        sb_puts(b, "\n");
        if (i == 0 && sys) {
            sb_put(b, sys->content, sys->len);
            sb_puts(b, "\n\n");
        }
        const char *c;
        size_t cn;
        trimmed(m[i].content, m[i].len, &c, &cn);
        sb_put(b, c, cn);
        sb_puts(b, "<end_of_turn>\n");
    }
    return EBB_OK;
}

static ebb_err render_llama3(const struct ebb_chat_msg *m, size_t n, struct sbuf *b)
{
    for (size_t i = 0; i < n; i++) {
        sb_puts(b, "<|start_header_id|>");
        sb_puts(b, m[i].role);
        sb_puts(b, "<|end_header_id|>\n\n");
        const char *c;
        size_t cn;
        trimmed(m[i].content, m[i].len, &c, &cn);
        sb_put(b, c, cn);
        sb_puts(b, "<|eot_id|>");
    }
    return EBB_OK;
}

/* Mistral's template has no system role; like its later versions, the system message is put in
 * front of the first user message. */
static ebb_err render_mistral(const struct ebb_chat_msg *m, size_t n, struct sbuf *b,
                              struct ebb_diag *diag)
{
    const struct ebb_chat_msg *sys = take_system(&m, &n);
    ebb_err rc = check_alternating(m, n, diag);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (i % 2 == 0) { /* a user turn: the roles alternate */
            sb_puts(b, "[INST] ");
            if (i == 0 && sys) {
                sb_put(b, sys->content, sys->len);
                sb_puts(b, "\n\n");
            }
            sb_put(b, m[i].content, m[i].len);
            sb_puts(b, " [/INST]");
        } else if (is_role(&m[i], "assistant")) {
            sb_put(b, m[i].content, m[i].len);
            sb_puts(b, "</s>");
        }
    }
    return EBB_OK;
}

ebb_err ebb_chat_template_from_source(const char *src, size_t n, const char *bos, const char *eos,
                                      bool strip_bos, struct ebb_chat_template *t,
                                      struct ebb_diag *diag)
{
    memset(t, 0, sizeof(*t));
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_jinja_parse(src, n, &t->jinja, &d);
    if (rc)
        return ebb_diag_set(diag, rc,
                            "the model's chat template cannot be used: %s; pass --chat-template "
                            "with one of: %s",
                            d.msg, ebb_chat_template_names());
    t->family = EBB_CHAT_JINJA;
    for (size_t i = 0; i + 5 <= n && !t->tools_native; i++)
        t->tools_native = !memcmp(src + i, "tools", 5);
    if (t->tools_native)
        t->tool_format = ebb_tool_format_detect(src, n);
    for (size_t i = 0; i + 15 <= n && !t->has_thinking; i++)
        t->has_thinking = !memcmp(src + i, "enable_thinking", 15);
    snprintf(t->bos_token, sizeof(t->bos_token), "%s", bos ? bos : "");
    snprintf(t->eos_token, sizeof(t->eos_token), "%s", eos ? eos : "");
    t->strip_bos = strip_bos;
    return EBB_OK;
}

void ebb_chat_template_fini(struct ebb_chat_template *t)
{
    if (!t)
        return;
    ebb_jinja_free(t->jinja);
    memset(t, 0, sizeof(*t));
}

/* A copy of tool_calls with each function.arguments that is a JSON string holding an object
 * replaced by that object, as chat templates expect (they apply tojson or iterate items). */
static json_t *tool_calls_for_template(const json_t *calls)
{
    json_t *out = json_deep_copy(calls);
    if (!out || !json_is_array(out))
        return out;
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *fn = json_object_get(json_array_get(out, i), "function");
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(args))
            continue;
        json_t *parsed = json_loadb(json_string_value(args), json_string_length(args),
                                    JSON_REJECT_DUPLICATES, NULL);
        if (json_is_object(parsed))
            json_object_set_new(fn, "arguments", parsed);
        else
            json_decref(parsed);
    }
    return out;
}

/* The messages as the template sees them: role and content first as the request has them, then
 * the message's other fields in their order. */
static json_t *messages_json(const struct ebb_chat_msg *msgs, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *m = json_object();
        if (!m || json_array_append_new(arr, m)) {
            json_decref(arr);
            return NULL;
        }
        json_object_set_new(m, "role", json_string(msgs[i].role));
        json_object_set_new(m, "content", json_stringn(msgs[i].content, msgs[i].len));
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)msgs[i].msg, key, val)
        {
            if (!strcmp(key, "role") || !strcmp(key, "content"))
                continue;
            json_object_set_new(m, key,
                                !strcmp(key, "tool_calls") ? tool_calls_for_template(val)
                                                           : json_deep_copy(val));
        }
    }
    return arr;
}

static ebb_err render_jinja(const struct ebb_chat_template *t, const struct ebb_chat_msg *msgs,
                            size_t n, const json_t *tools, const json_t *extra, bool add_generation,
                            char **out, size_t *out_len, struct ebb_diag *diag)
{
    /* What transformers passes: tools and documents are always there, None when not given. */
    json_t *vars = json_is_object(extra) ? json_deep_copy(extra) : json_object();
    json_t *m = messages_json(msgs, n);
    if (!vars || !m) {
        json_decref(vars);
        json_decref(m);
        return ebb_diag_set(diag, EBB_ENOMEM, "out of memory rendering the chat template");
    }
    json_object_set_new(vars, "messages", m);
    json_object_set_new(vars, "tools", tools ? json_deep_copy(tools) : json_null());
    json_object_set_new(vars, "documents", json_null());
    json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation));
    json_object_set_new(vars, "bos_token", json_string(t->bos_token));
    json_object_set_new(vars, "eos_token", json_string(t->eos_token));
    struct ebb_jinja_limits lim = {.max_output = 8u << 20, .max_memory = 128u << 20};
    char *text = NULL;
    size_t len = 0;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_jinja_render(t->jinja, vars, NULL, &lim, &text, &len, &d);
    json_decref(vars);
    if (rc)
        return ebb_diag_set(diag, rc == EBB_ENOMEM ? rc : EBB_EINVAL,
                            "the model's chat template failed on this conversation: %s", d.msg);
    size_t bl = strlen(t->bos_token);
    if (t->strip_bos && bl && len >= bl && !memcmp(text, t->bos_token, bl)) {
        memmove(text, text + bl, len - bl + 1);
        len -= bl;
    }
    *out = text;
    *out_len = len;
    return EBB_OK;
}

ebb_err ebb_chat_template_render(const struct ebb_chat_template *t, const struct ebb_chat_msg *msgs,
                                 size_t n, bool add_generation, char **out, size_t *out_len,
                                 struct ebb_diag *diag)
{
    return ebb_chat_template_render_tools(t, msgs, n, NULL, add_generation, out, out_len, diag);
}

/* One rendering of msgs as given (no normalizing: ebb_chat_template_render_vars retries). */
static ebb_err render_once(const struct ebb_chat_template *t, const struct ebb_chat_msg *msgs,
                           size_t n, const json_t *tools, const json_t *vars, bool add_generation,
                           char **out, size_t *out_len, struct ebb_diag *diag)
{
    if (t->family == EBB_CHAT_JINJA)
        return render_jinja(t, msgs, n, tools, vars, add_generation, out, out_len, diag);
    if (json_array_size(tools))
        return ebb_diag_set(diag, EBB_EINVAL, "the built-in %s chat template cannot render tools",
                            ebb_chat_family_name(t->family));
    struct sbuf b = {0};
    ebb_err rc = EBB_OK;
    for (size_t i = 0; i < n; i++) {
        if (json_array_size(json_object_get(msgs[i].msg, "tool_calls"))) {
            rc = ebb_diag_set(diag, EBB_EINVAL,
                              "the built-in %s chat template cannot render the tool calls in "
                              "messages[%zu]",
                              ebb_chat_family_name(t->family), i);
            goto out;
        }
        if (!is_role(&msgs[i], "system") && !is_role(&msgs[i], "user") &&
            !is_role(&msgs[i], "assistant")) {
            rc = ebb_diag_set(diag, EBB_EINVAL, "unknown role '%s' in messages[%zu]", msgs[i].role,
                              i);
            goto out;
        }
        if (i > 0 && is_role(&msgs[i], "system") && t->family != EBB_CHAT_CHATML &&
            t->family != EBB_CHAT_LLAMA3) {
            rc = ebb_diag_set(diag, EBB_EINVAL,
                              "the %s chat template accepts a system message only first",
                              ebb_chat_family_name(t->family));
            goto out;
        }
    }
    switch (t->family) {
    case EBB_CHAT_CHATML:
        rc = render_chatml(t, msgs, n, &b);
        if (add_generation)
            sb_puts(&b, "<|im_start|>assistant\n");
        break;
    case EBB_CHAT_GEMMA:
        rc = render_gemma(msgs, n, &b, diag);
        if (add_generation)
            sb_puts(&b, "<start_of_turn>model\n");
        break;
    case EBB_CHAT_LLAMA3:
        rc = render_llama3(msgs, n, &b);
        if (add_generation)
            sb_puts(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case EBB_CHAT_MISTRAL:
        rc = render_mistral(msgs, n, &b, diag);
        break;
    default:
        rc = ebb_diag_set(diag, EBB_EINVAL, "no chat template");
    }
    if (rc)
        goto out;
    if (!b.p)
        sb_put(&b, "", 0);
    if (b.oom) {
        rc = EBB_ENOMEM;
        goto out;
    }
    *out = b.p;
    *out_len = b.n;
    b.p = NULL;
out:
    free(b.p);
    return rc;
}

/* ---- conversations a template that demands alternation accepts -------------------------------
 *
 * The OpenAI and Anthropic APIs accept two messages of one role in a row (openai-agents sends an
 * assistant's text and its tool calls as two assistant messages), a system message later in the
 * conversation, and an assistant message first. Templates that demand strictly alternating
 * turns (Gemma's, Mistral's, Llama 2's, and the built-in gemma and mistral families) raise on
 * those. When a template rejects a conversation, it is rendered again normalized, in two steps:
 * first consecutive user, assistant or system messages are merged (their texts joined by a blank
 * line, the assistant's tool_calls kept in order; tool messages are never merged, a run of tool
 * results is what templates expect); if the template still rejects it, a system message after
 * the first turn also becomes a user message and a conversation whose first turn is the
 * assistant's gets an empty user turn before it; last, for templates without a system role
 * (Mistral's first ones), every system message becomes a user message, so its text goes in
 * front of the next user message's, as the built-in mistral family puts it. A conversation the
 * template accepts as it is renders unchanged, byte for byte what transformers renders. */

static bool mergeable(const char *role)
{
    return !strcmp(role, "user") || !strcmp(role, "assistant") || !strcmp(role, "system");
}

/* Merges b into a (same role): a new message object (a's fields, the tool_calls of both) and
 * the joined text, both owned by own. */
static ebb_err merge_into(struct ebb_chat_msg *a, const struct ebb_chat_msg *b, json_t *own)
{
    json_t *o = a->msg ? json_deep_copy(a->msg) : json_object();
    json_t *ca = json_object_get(a->msg, "tool_calls"), *cb = json_object_get(b->msg, "tool_calls");
    if (o && json_array_size(cb)) {
        json_t *calls = json_is_array(ca) ? json_deep_copy(ca) : json_array();
        if (!calls || json_array_extend(calls, cb) || json_object_set_new(o, "tool_calls", calls)) {
            json_decref(o);
            return EBB_ENOMEM;
        }
    }
    size_t sep = a->len && b->len ? 2 : 0, n = a->len + sep + b->len;
    char *buf = malloc(n + 1);
    json_t *text = NULL;
    if (buf) {
        memcpy(buf, a->content, a->len);
        memcpy(buf + a->len, "\n\n", sep);
        memcpy(buf + a->len + sep, b->content, b->len);
        text = json_stringn_nocheck(buf, n);
        free(buf);
    }
    if (!o || !text) {
        json_decref(o);
        json_decref(text);
        return EBB_ENOMEM;
    }
    /* Both references are stolen, also when appending fails. */
    if (json_array_append_new(own, o) | json_array_append_new(own, text))
        return EBB_ENOMEM;
    a->msg = o;
    a->content = json_string_value(text);
    a->len = n;
    return EBB_OK;
}

/* msgs[0..n) normalized as the section comment says (step 0, 1 or 2) into out (room for n + 1),
 * the new texts and objects owned by own. *changed: out differs from msgs. */
static ebb_err normalize(const struct ebb_chat_msg *msgs, size_t n, int step,
                         struct ebb_chat_msg *out, size_t *n_out, json_t *own, bool *changed)
{
    bool deep = step >= 1;
    size_t w = 0;
    bool turn = false; /* a user or assistant turn has been seen */
    *changed = false;
    for (size_t i = 0; i < n; i++) {
        struct ebb_chat_msg x = msgs[i];
        if (deep && (turn || step >= 2) && is_role(&x, "system")) {
            x.role = "user";
            *changed = true;
        }
        if (deep && !turn && is_role(&x, "assistant")) {
            out[w++] = (struct ebb_chat_msg){.role = "user", .content = ""};
            *changed = true;
        }
        turn |= !is_role(&x, "system");
        if (w && mergeable(x.role) && !strcmp(out[w - 1].role, x.role)) {
            ebb_err rc = merge_into(&out[w - 1], &x, own);
            if (rc)
                return rc;
            *changed = true;
        } else {
            out[w++] = x;
        }
    }
    *n_out = w;
    return EBB_OK;
}

ebb_err ebb_chat_template_render_tools(const struct ebb_chat_template *t,
                                       const struct ebb_chat_msg *msgs, size_t n,
                                       const json_t *tools, bool add_generation, char **out,
                                       size_t *out_len, struct ebb_diag *diag)
{
    return ebb_chat_template_render_vars(t, msgs, n, tools, NULL, add_generation, out, out_len,
                                         diag);
}

ebb_err ebb_chat_template_render_vars(const struct ebb_chat_template *t,
                                      const struct ebb_chat_msg *msgs, size_t n,
                                      const json_t *tools, const json_t *vars, bool add_generation,
                                      char **out, size_t *out_len, struct ebb_diag *diag)
{
    struct ebb_diag first = {{0}};
    ebb_err rc = render_once(t, msgs, n, tools, vars, add_generation, out, out_len, &first);
    if (rc != EBB_EINVAL)
        goto out;
    struct ebb_chat_msg *mm = calloc(n + 1, sizeof(*mm));
    json_t *own = json_array();
    for (int step = 0; mm && own && step < 3; step++) {
        size_t nn = 0;
        bool changed = false;
        struct ebb_diag d = {{0}};
        ebb_err r2 = normalize(msgs, n, step, mm, &nn, own, &changed);
        if (!r2 && !changed)
            continue;
        if (!r2)
            r2 = render_once(t, mm, nn, tools, vars, add_generation, out, out_len, &d);
        if (r2 != EBB_EINVAL) { /* rendered, or out of memory */
            rc = r2;
            if (rc)
                ebb_diag_set(&first, rc, "out of memory rendering the chat template");
            break;
        }
    }
    free(mm);
    json_decref(own);
out:
    /* What the template said about the conversation as it was sent: it names what to change. */
    if (rc && diag)
        *diag = first;
    return rc;
}

static bool has_token(void *ud, const char *text)
{
    return ebb_tokenizer_find(ud, text, strlen(text)) >= 0;
}

/* The text of a special token (its piece with specials rendered), "" if none. */
static void token_text(const struct ebb_tokenizer *tok, int32_t id, char *buf, size_t n)
{
    struct ebb_str s = {0};
    buf[0] = 0;
    if (id >= 0 && ebb_tokenizer_piece(tok, id, true, &s) == EBB_OK && (size_t)s.n < n) {
        memcpy(buf, s.p, (size_t)s.n);
        buf[s.n] = 0;
    }
}

ebb_err ebb_chat_template_for_model(const struct ebb_model *m, const char *name,
                                    struct ebb_chat_template *t, struct ebb_diag *diag)
{
    if (name) {
        ebb_err rc = ebb_chat_template_by_name(name, t);
        if (rc)
            ebb_diag_set(diag, rc, "unknown --chat-template '%s'; known: %s", name,
                         ebb_chat_template_names());
        return rc;
    }
    struct ebb_str src = {0};
    const struct ebb_tokenizer *tok = ebb_model_tokenizer(m);
    if (ebb_gguf_get_str(ebb_model_gguf(m), "tokenizer.chat_template", &src) == EBB_OK) {
        char bos[128] = "", eos[128] = "";
        token_text(tok, ebb_tokenizer_bos(tok), bos, sizeof(bos));
        token_text(tok, ebb_tokenizer_eos(tok), eos, sizeof(eos));
        return ebb_chat_template_from_source(src.p, (size_t)src.n, bos, eos,
                                             ebb_tokenizer_add_bos(tok), t, diag);
    }
    return ebb_chat_template_detect(NULL, 0, has_token, (void *)tok, t, diag);
}
