/* Request bodies of /v1/chat/completions and /v1/completions: JSON parsing and validation. Every
 * rejection names the offending parameter, as OpenAI's API does. */
#include "openai.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/spec.h"

/* A number in [lo, hi]; absent or null leaves *out alone. */
static ebb_err get_num(json_t *o, const char *key, double lo, double hi, float *out, bool *set,
                       struct ebb__perr *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return EBB_OK;
    if (!json_is_number(v))
        return ebb__perr_fail(e, key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return ebb__perr_fail(e, key, "'%s' must be between %g and %g, got %g", key, lo, hi, d);
    *out = (float)d;
    if (set)
        *set = true;
    return EBB_OK;
}

static ebb_err get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                       bool *set, struct ebb__perr *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return EBB_OK;
    if (!json_is_integer(v))
        return ebb__perr_fail(e, key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return ebb__perr_fail(e, key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi,
                              x);
    *out = x;
    if (set)
        *set = true;
    return EBB_OK;
}

static ebb_err get_bool(json_t *o, const char *key, bool *out, struct ebb__perr *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return EBB_OK;
    if (!json_is_boolean(v))
        return ebb__perr_fail(e, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return EBB_OK;
}

static ebb_err parse_stop(json_t *o, struct ebb__gen_req *r, struct ebb__perr *e)
{
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v))
        return EBB_OK;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    json_t *arr = NULL;
    if (json_is_array(v)) {
        arr = v;
        n = json_array_size(v);
    } else if (!json_is_string(v)) {
        return ebb__perr_fail(e, "stop", "'stop' must be a string or an array of strings");
    }
    if (n > EBB_SCHED_MAX_STOP)
        return ebb__perr_fail(e, "stop", "'stop' allows at most %d sequences", EBB_SCHED_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *s = arr ? json_array_get(arr, i) : items[i];
        if (!json_is_string(s))
            return ebb__perr_fail(e, "stop", "'stop' must be a string or an array of strings");
        size_t len = json_string_length(s);
        if (len >= EBB_SCHED_MAX_STOP_LEN)
            return ebb__perr_fail(e, "stop", "each 'stop' sequence must be shorter than %d bytes",
                                  EBB_SCHED_MAX_STOP_LEN);
        if (len == 0 || memchr(json_string_value(s), 0, len))
            continue;
        r->gp.stop[r->gp.n_stop++] = json_string_value(s);
    }
    return EBB_OK;
}

static ebb_err parse_logit_bias(json_t *o, struct ebb__gen_req *r, struct ebb__perr *e)
{
    json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v))
        return EBB_OK;
    if (!json_is_object(v))
        return ebb__perr_fail(e, "logit_bias",
                              "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(v);
    if (n > 1024)
        return ebb__perr_fail(e, "logit_bias", "'logit_bias' allows at most 1024 entries");
    if (n == 0)
        return EBB_OK;
    r->bias = calloc(n, sizeof(*r->bias));
    if (!r->bias)
        return EBB_ENOMEM;
    const char *key;
    json_t *val;
    size_t i = 0;
    json_object_foreach(v, key, val)
    {
        char *end = NULL;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id > INT32_MAX)
            return ebb__perr_fail(e, "logit_bias",
                                  "'logit_bias' keys must be token ids, got '%.64s'", key);
        if (!json_is_number(val))
            return ebb__perr_fail(e, "logit_bias", "'logit_bias' values must be numbers");
        double b = json_number_value(val);
        if (b < -100 || b > 100)
            return ebb__perr_fail(e, "logit_bias",
                                  "'logit_bias' values must be between -100 and 100");
        r->bias[i].token = (int32_t)id;
        /* OpenAI documents -100 as a ban. */
        r->bias[i].bias = b <= -100 ? -INFINITY : (float)b;
        i++;
    }
    r->gp.sampling.logit_bias = r->bias;
    r->gp.sampling.n_logit_bias = i;
    return EBB_OK;
}

/* Concatenates the text parts of an array content; other part types are rejected. */
static ebb_err parse_parts(json_t *c, size_t idx, char **out, size_t *len, struct ebb__perr *e)
{
    size_t total = 0, n = json_array_size(c);
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(c, i);
        json_t *t = json_object_get(p, "type");
        json_t *txt = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(t) || strcmp(json_string_value(t), "text") ||
            !json_is_string(txt))
            return ebb__perr_fail(
                e, "messages",
                "messages[%zu].content parts must be {\"type\":\"text\",\"text\":...}", idx);
        total += json_string_length(txt);
    }
    char *b = malloc(total + 1);
    if (!b)
        return EBB_ENOMEM;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *txt = json_object_get(json_array_get(c, i), "text");
        memcpy(b + w, json_string_value(txt), json_string_length(txt));
        w += json_string_length(txt);
    }
    b[w] = 0;
    *out = b;
    *len = w;
    return EBB_OK;
}

/* The tool fields of a message the chat template receives: tool_calls (an array of
 * {id, type, function: {name, arguments}}), tool_call_id and name. */
static ebb_err check_tool_fields(json_t *msg, size_t i, struct ebb__perr *e)
{
    json_t *calls = json_object_get(msg, "tool_calls");
    if (calls && !json_is_null(calls)) {
        if (!json_is_array(calls))
            return ebb__perr_fail(e, "messages", "messages[%zu].tool_calls must be an array", i);
        for (size_t k = 0; k < json_array_size(calls); k++) {
            json_t *fn = json_object_get(json_array_get(calls, k), "function");
            json_t *name = json_object_get(fn, "name");
            json_t *args = json_object_get(fn, "arguments");
            if (!json_is_object(fn) || !json_is_string(name) || !json_string_length(name))
                return ebb__perr_fail(
                    e, "messages",
                    "messages[%zu].tool_calls[%zu].function.name must be a non-empty "
                    "string",
                    i, k);
            if (args && !json_is_string(args) && !json_is_object(args))
                return ebb__perr_fail(
                    e, "messages",
                    "messages[%zu].tool_calls[%zu].function.arguments must be a JSON "
                    "string or an object",
                    i, k);
        }
    }
    static const char *const strs[] = {"tool_call_id", "name"};
    for (size_t k = 0; k < 2; k++) {
        json_t *v = json_object_get(msg, strs[k]);
        if (v && !json_is_null(v) && !json_is_string(v))
            return ebb__perr_fail(e, "messages", "messages[%zu].%s must be a string", i, strs[k]);
    }
    return EBB_OK;
}

static ebb_err parse_messages(json_t *o, struct ebb__gen_req *r, struct ebb__perr *e)
{
    json_t *m = json_object_get(o, "messages");
    if (!m)
        return ebb__perr_fail(e, "messages", "'messages' is required");
    if (!json_is_array(m) || json_array_size(m) == 0)
        return ebb__perr_fail(e, "messages", "'messages' must be a non-empty array");
    size_t n = json_array_size(m);
    r->msgs = calloc(n, sizeof(*r->msgs));
    r->parts_buf = calloc(n, sizeof(*r->parts_buf));
    if (!r->msgs || !r->parts_buf)
        return EBB_ENOMEM;
    r->n_msgs = n;
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(m, i);
        if (!json_is_object(msg))
            return ebb__perr_fail(e, "messages", "messages[%zu] must be an object", i);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role))
            return ebb__perr_fail(e, "messages", "messages[%zu].role must be a string", i);
        const char *rs = json_string_value(role);
        if (!strcmp(rs, "developer"))
            rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") &&
            strcmp(rs, "tool"))
            return ebb__perr_fail(
                e, "messages",
                "messages[%zu].role must be 'system', 'user', 'assistant' or 'tool', "
                "got '%.32s'",
                i, rs);
        r->msgs[i].role = rs;
        r->msgs[i].msg = msg;
        ebb_err rc = check_tool_fields(msg, i, e);
        if (rc)
            return rc;
        json_t *c = json_object_get(msg, "content");
        if (json_is_string(c)) {
            r->msgs[i].content = json_string_value(c);
            r->msgs[i].len = json_string_length(c);
        } else if (json_is_array(c)) {
            rc = parse_parts(c, i, &r->parts_buf[i], &r->msgs[i].len, e);
            if (rc)
                return rc;
            r->msgs[i].content = r->parts_buf[i];
        } else if ((!c || json_is_null(c)) && !strcmp(rs, "assistant")) {
            r->msgs[i].content = "";
            r->msgs[i].len = 0;
        } else {
            return ebb__perr_fail(
                e, "messages", "messages[%zu].content must be a string or an array of text parts",
                i);
        }
    }
    return EBB_OK;
}

static ebb_err parse_prompt(json_t *o, struct ebb__gen_req *r, struct ebb__perr *e)
{
    json_t *p = json_object_get(o, "prompt");
    if (!p || json_is_null(p))
        return ebb__perr_fail(e, "prompt", "'prompt' is required");
    /* A batch of one prompt is the same as the prompt itself. */
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        r->prompt = json_string_value(p);
        r->prompt_len = json_string_length(p);
        return EBB_OK;
    }
    if (!json_is_array(p))
        return ebb__perr_fail(e, "prompt", "'prompt' must be a string or an array of token ids");
    size_t n = json_array_size(p);
    if (n == 0)
        return ebb__perr_fail(e, "prompt", "'prompt' must not be empty");
    r->prompt_ids = malloc(sizeof(int32_t) * n);
    if (!r->prompt_ids)
        return EBB_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(p, i);
        if (json_is_string(t) || json_is_array(t))
            return ebb__perr_fail(e, "prompt", "only one prompt per request is supported");
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return ebb__perr_fail(e, "prompt", "'prompt' token ids must be non-negative integers");
        r->prompt_ids[i] = (int32_t)json_integer_value(t);
    }
    r->n_prompt_ids = n;
    return EBB_OK;
}

/* What a field ebb does not implement may hold without changing the answer. */
enum neutral {
    NEU_NONE,        /* only null or absent */
    NEU_EMPTY_ARRAY, /* [] */
    NEU_EMPTY_STR,   /* "" */
    NEU_TOOL_CHOICE, /* "none" or "auto" (no functions are offered, so no call can be made) */
    NEU_TEXT_FORMAT, /* {"type": "text"} */
    NEU_TEXT_ONLY,   /* ["text"] */
    NEU_ZERO,        /* the number 0 */
    NEU_ONE,         /* the number 1 */
};

/* Request fields ebb does not implement and that would change the answer if honoured: any
 * value other than the neutral one is a 400 naming the field, rather than silently giving a
 * different answer than the client asked for. Fields that cannot change the answer (user,
 * metadata, store, ...) are ignored; docs/API.md lists both. */
static const struct {
    const char *key;
    enum neutral neutral;
    unsigned char where; /* 1 chat, 2 completions, 3 both */
    const char *why;
} unsupported[] = {
    {"functions", NEU_EMPTY_ARRAY, 1, "the legacy 'functions' are not supported; use 'tools'"},
    {"function_call", NEU_TOOL_CHOICE, 1,
     "the legacy 'function_call' is not supported; use 'tool_choice'"},
    {"audio", NEU_NONE, 1, "audio output is not supported"},
    {"modalities", NEU_TEXT_ONLY, 1, "only [\"text\"] is supported"},
    {"web_search_options", NEU_NONE, 1, "web search is not supported"},
    {"verbosity", NEU_NONE, 1, "verbosity is not supported"},
    {"best_of", NEU_ONE, 2, "only one candidate per prompt is supported"},
    /* llama.cpp server extensions some clients send. */
    {"mirostat", NEU_ZERO, 3, "mirostat sampling is not supported"},
    {"typical_p", NEU_ONE, 3, "typical sampling is not supported"},
    {"tfs_z", NEU_ONE, 3, "tail-free sampling is not supported"},
    {"xtc_probability", NEU_ZERO, 3, "XTC sampling is not supported"},
    {"dry_multiplier", NEU_ZERO, 3, "DRY sampling is not supported"},
    {"dynatemp_range", NEU_ZERO, 3, "dynamic temperature is not supported"},
    {"n_probs", NEU_ZERO, 3, "use 'logprobs' and 'top_logprobs'"},
    {"n_predict", NEU_NONE, 3, "use 'max_tokens'"},
};

static bool is_neutral(json_t *v, enum neutral k)
{
    if (json_is_null(v))
        return true;
    switch (k) {
    case NEU_NONE:
        return false;
    case NEU_EMPTY_ARRAY:
        return json_is_array(v) && json_array_size(v) == 0;
    case NEU_EMPTY_STR:
        return json_is_string(v) && json_string_length(v) == 0;
    case NEU_TOOL_CHOICE:
        return json_is_string(v) &&
               (!strcmp(json_string_value(v), "none") || !strcmp(json_string_value(v), "auto"));
    case NEU_TEXT_FORMAT: {
        json_t *t = json_object_get(v, "type");
        return json_is_object(v) && json_object_size(v) == 1 && json_is_string(t) &&
               !strcmp(json_string_value(t), "text");
    }
    case NEU_TEXT_ONLY: {
        json_t *t = json_array_get(v, 0);
        return json_is_array(v) && json_array_size(v) == 1 && json_is_string(t) &&
               !strcmp(json_string_value(t), "text");
    }
    case NEU_ZERO:
        return json_is_number(v) && json_number_value(v) == 0;
    case NEU_ONE:
        return json_is_number(v) && json_number_value(v) == 1;
    }
    return false;
}

static ebb_err check_unsupported(json_t *o, bool chat, struct ebb__perr *e)
{
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
        if (!(unsupported[i].where & (chat ? 1 : 2)))
            continue;
        json_t *v = json_object_get(o, unsupported[i].key);
        if (v && !is_neutral(v, unsupported[i].neutral))
            return ebb__perr_fail(e, unsupported[i].key, "'%s' is not supported: %s",
                                  unsupported[i].key, unsupported[i].why);
    }
    return EBB_OK;
}

/* ebb's extension "speculative": {"type": "ngram", "max": K} (drafts per pass at most, default
 * 8), {"type": "none"} or false (off), null or absent (the server's --spec). */
static ebb_err parse_speculative(json_t *o, struct ebb__gen_req *r, struct ebb__perr *e)
{
    json_t *sp = json_object_get(o, "speculative");
    if (!sp || json_is_null(sp))
        return EBB_OK;
    if (json_is_false(sp)) {
        r->gp.spec_max = 0;
        return EBB_OK;
    }
    if (!json_is_object(sp))
        return ebb__perr_fail(e, "speculative",
                              "'speculative' must be an object such as {\"type\": \"ngram\"}");
    const char *key;
    json_t *v;
    json_object_foreach(sp, key, v)
    {
        if (strcmp(key, "type") && strcmp(key, "max"))
            return ebb__perr_fail(e, "speculative",
                                  "'speculative.%s' is not a known field (type, max)", key);
    }
    json_t *type = json_object_get(sp, "type");
    if (!json_is_string(type))
        return ebb__perr_fail(e, "speculative", "'speculative.type' must be \"ngram\" or \"none\"");
    if (!strcmp(json_string_value(type), "none")) {
        r->gp.spec_max = 0;
        return EBB_OK;
    }
    if (strcmp(json_string_value(type), "ngram"))
        return ebb__perr_fail(
            e, "speculative",
            "'speculative.type' '%s' is not supported (ngram or none; draft models are "
            "an ebb run option)",
            json_string_value(type));
    json_t *mx = json_object_get(sp, "max");
    long long k = 8;
    if (mx && !json_is_null(mx)) {
        k = json_is_integer(mx) ? json_integer_value(mx) : -1;
        if (k < 1 || k > EBB_SPEC_DRAFT_CAP)
            return ebb__perr_fail(e, "speculative", "'speculative.max' must be an integer in 1..%d",
                                  EBB_SPEC_DRAFT_CAP);
    }
    r->gp.spec_max = (int32_t)k;
    return EBB_OK;
}

/* The variables ebb passes to every chat template itself: chat_template_kwargs may not set them. */
static const char *const reserved_vars[] = {
    "messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"};

ebb_err ebb__parse_reasoning(json_t *o, struct ebb__gen_req *r, struct ebb__perr *e)
{
    r->reasoning = true;
    json_t *rf = json_object_get(o, "reasoning_format");
    if (rf && !json_is_null(rf)) {
        const char *v = json_is_string(rf) ? json_string_value(rf) : "";
        if (strcmp(v, "auto") && strcmp(v, "deepseek") && strcmp(v, "none"))
            return ebb__perr_fail(e, "reasoning_format",
                                  "'reasoning_format' must be \"auto\", \"deepseek\" or \"none\"");
        r->reasoning = strcmp(v, "none") != 0;
    }
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return ebb__perr_fail(e, "chat_template_kwargs",
                                  "'chat_template_kwargs' must be an object");
        for (size_t i = 0; i < sizeof(reserved_vars) / sizeof(reserved_vars[0]); i++)
            if (json_object_get(kw, reserved_vars[i]))
                return ebb__perr_fail(e, "chat_template_kwargs",
                                      "'chat_template_kwargs' may not set '%s': ebb sets it itself",
                                      reserved_vars[i]);
        r->tmpl_vars = json_deep_copy(kw);
        if (!r->tmpl_vars)
            return EBB_ENOMEM;
    }
    json_t *ef = json_object_get(o, "reasoning_effort");
    if (ef && !json_is_null(ef)) {
        static const char *const on[] = {"low", "medium", "high", "xhigh"};
        const char *v = json_is_string(ef) ? json_string_value(ef) : "";
        bool think = false, known = !strcmp(v, "none") || !strcmp(v, "minimal");
        for (size_t i = 0; i < 4 && !known; i++)
            known = think = !strcmp(v, on[i]);
        if (!known)
            return ebb__perr_fail(
                e, "reasoning_effort",
                "'reasoning_effort' must be one of none, minimal, low, medium, high, "
                "xhigh");
        /* chat_template_kwargs.enable_thinking, when given, is the more specific. */
        if (!json_object_get(r->tmpl_vars, "enable_thinking")) {
            if (!r->tmpl_vars && !(r->tmpl_vars = json_object()))
                return EBB_ENOMEM;
            json_object_set_new(r->tmpl_vars, "enable_thinking", json_boolean(think));
            r->effort_param = "reasoning_effort";
        }
    }
    return EBB_OK;
}

ebb_err ebb__gen_req_parse(const char *body, size_t n, bool chat, struct ebb__gen_req *r,
                           struct ebb__perr *e)
{
    memset(r, 0, sizeof(*r));
    memset(e, 0, sizeof(*e));
    r->chat = chat;
    ebb_gen_params_defaults(&r->gp);
    json_error_t je;
    ebb__json_alloc_failed(true);
    r->doc = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
    /* An allocation that failed during the parse may have cut a string short, or made a
     * valid body look malformed (jansson api/http/jsonmem.c). */
    if (ebb__json_alloc_failed(true)) {
        ebb__perr_fail(e, NULL, "out of memory while parsing the body");
        return EBB_ENOMEM;
    }
    if (!r->doc)
        return ebb__perr_fail(e, NULL, "the body is not valid JSON: %s (line %d, column %d)",
                              je.text, je.line, je.column);
    json_t *o = r->doc;
    if (!json_is_object(o))
        return ebb__perr_fail(e, NULL, "the body must be a JSON object");
    ebb_err rc = check_unsupported(o, chat, e);
    if (rc)
        return rc;
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            return ebb__perr_fail(e, "model", "'model' must be a string");
        if (json_string_length(model))
            r->model = json_string_value(model);
    }
    /* Choices: the cap here, the server's slots in gen.c (they depend on --parallel). */
    long long nn = 1;
    if ((rc = get_int(o, "n", 1, EBB_SCHED_MAX_CHOICES, &nn, NULL, e)))
        return rc;
    r->n_choices = (uint32_t)nn;
    r->gp.n_choices = r->n_choices;
    long long mt = 0;
    bool mt_set = false;
    if ((rc = get_int(o, "max_tokens", 1, 1 << 30, &mt, &mt_set, e)))
        return rc;
    if (chat && (rc = get_int(o, "max_completion_tokens", 1, 1 << 30, &mt, &mt_set, e)))
        return rc;
    r->max_tokens_set = mt_set;
    r->gp.max_tokens = mt_set ? (uint32_t)mt : chat ? 0 : 16;
    /* The sampling fields with defaults: their names and ranges come from the one table in
     * defaults.c; the fields sent are remembered, since the defaults fill only the others. */
    struct ebb_sampling *s = &r->gp.sampling;
    for (int i = 0; i < EBB_DEF_N_FIELDS; i++) {
        enum ebb_defaults_field f = (enum ebb_defaults_field)i;
        const char *key = ebb_defaults_field_name(f);
        double lo, hi;
        bool integer, set = false;
        ebb_defaults_range(f, &lo, &hi, &integer);
        if (integer) {
            long long x = 0;
            rc = get_int(o, key, (long long)lo, (long long)hi, &x, &set, e);
            if (set)
                ebb_defaults_set(s, f, (double)x);
        } else {
            float x = 0;
            rc = get_num(o, key, lo, hi, &x, &set, e);
            if (set)
                ebb_defaults_set(s, f, x);
        }
        if (rc)
            return rc;
        if (set)
            r->sent |= EBB_DEF_BIT(f);
    }
    long long seed = 0;
    bool seed_set = false;
    if ((rc = get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, &seed_set, e)))
        return rc;
    if (seed_set)
        s->seed = (uint64_t)seed == EBB_SEED_RANDOM ? 0 : (uint64_t)seed;
    if ((rc = parse_stop(o, r, e)) || (rc = parse_logit_bias(o, r, e)))
        return rc;
    if ((rc = get_bool(o, "stream", &r->stream, e)) ||
        (rc = get_bool(o, "ignore_eos", &r->gp.ignore_eos, e)))
        return rc;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return ebb__perr_fail(e, "stream_options", "'stream_options' must be an object");
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu))
            return ebb__perr_fail(e, "stream_options",
                                  "'stream_options.include_usage' must be a boolean");
        r->include_usage = json_is_true(iu);
    }
    if (chat) {
        long long tl = 0;
        bool tl_set = false;
        if ((rc = get_bool(o, "logprobs", &r->logprobs, e)) ||
            (rc = get_int(o, "top_logprobs", 0, EBB_SAMPLE_MAX_TOP, &tl, &tl_set, e)))
            return rc;
        if (tl_set && tl > 0 && !r->logprobs)
            return ebb__perr_fail(e, "top_logprobs", "'top_logprobs' requires 'logprobs': true");
        r->top_logprobs = (uint32_t)tl;
        if ((rc = parse_messages(o, r, e)) || (rc = ebb__tool_req_parse(o, &r->tools, e)) ||
            (rc = ebb__parse_reasoning(o, r, e)))
            return rc;
    } else {
        long long lp = 0;
        bool lp_set = false;
        if ((rc = get_int(o, "logprobs", 0, 5, &lp, &lp_set, e)))
            return rc;
        r->logprobs = lp_set;
        r->top_logprobs = (uint32_t)lp;
        if ((rc = get_bool(o, "echo", &r->echo, e)))
            return rc;
        json_t *sfx = json_object_get(o, "suffix");
        if (sfx && !json_is_null(sfx)) {
            if (!json_is_string(sfx))
                return ebb__perr_fail(e, "suffix", "'suffix' must be a string");
            if (json_string_length(sfx))
                r->suffix = json_string_value(sfx);
        }
        if ((rc = parse_prompt(o, r, e)))
            return rc;
    }
    if ((rc = ebb__parse_structured(o, r, e)) || (rc = parse_speculative(o, r, e)))
        return rc;
    r->gp.grammar = r->grammar;
    r->gp.logprobs = r->logprobs;
    r->gp.n_top_logprobs = r->top_logprobs;
    return EBB_OK;
}

void ebb__gen_req_fini(struct ebb__gen_req *r)
{
    if (r->parts_buf) {
        for (size_t i = 0; i < r->n_msgs; i++)
            free(r->parts_buf[i]);
    }
    free(r->parts_buf);
    free(r->msgs);
    free(r->prompt_ids);
    free(r->bias);
    free(r->grammar);
    json_decref(r->tmpl_vars);
    if (r->doc)
        json_decref(r->doc);
    memset(r, 0, sizeof(*r));
}
