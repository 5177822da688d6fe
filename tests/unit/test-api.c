/* Pure-C parts of the API: chat templates against jinja2's output, request validation, stop
 * strings, OpenAI error objects, SSE framing, UTF-8 safety and the metrics text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/openai/openai.h"
#include "api/chat/chat-template.h"
#include "sched/scheduler.h"

/* ---- chat templates ------------------------------------------------------------------------ */

static json_t *load_cases(void)
{
    json_error_t je;
    json_t *doc = json_load_file(EBB_TEST_DATA "/chat-templates/cases.json", 0, &je);
    if (!doc)
        fail_msg("cannot read cases.json: %s", je.text);
    return doc;
}

static void test_template_detect(void **state)
{
    (void)state;
    json_t *doc = load_cases();
    const char *name;
    json_t *t;
    json_object_foreach(json_object_get(doc, "templates"), name, t)
    {
        const char *src = json_string_value(json_object_get(t, "source"));
        struct ebb_chat_template ct;
        struct ebb_diag d;
        assert_int_equal(ebb_chat_template_detect(src, strlen(src), NULL, NULL, &ct, &d), EBB_OK);
        assert_string_equal(ebb_chat_family_name(ct.family),
                            json_string_value(json_object_get(t, "family")));
        if (!strcmp(name, "smollm2.jinja"))
            assert_string_equal(ct.default_system,
                                "You are a helpful AI assistant named SmolLM, trained by Hugging "
                                "Face");
        if (!strcmp(name, "qwen2.5.jinja"))
            assert_string_equal(ct.default_system,
                                "You are Qwen, created by Alibaba Cloud. You are a helpful "
                                "assistant.");
    }
    json_decref(doc);

    struct ebb_chat_template ct;
    struct ebb_diag d;
    const char *odd = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}";
    assert_int_equal(ebb_chat_template_detect(odd, strlen(odd), NULL, NULL, &ct, &d),
                     EBB_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "chatml, gemma, llama3, mistral"));
    assert_int_equal(ebb_chat_template_by_name("gemma", &ct), EBB_OK);
    assert_int_equal(ct.family, EBB_CHAT_GEMMA);
    assert_int_equal(ebb_chat_template_by_name("jinja", &ct), EBB_ENOTFOUND);
}

static bool has_start_of_turn(void *ud, const char *text)
{
    (void)ud;
    return !strcmp(text, "<start_of_turn>");
}

static void test_template_from_tokens(void **state)
{
    (void)state;
    struct ebb_chat_template ct;
    struct ebb_diag d;
    assert_int_equal(ebb_chat_template_detect(NULL, 0, has_start_of_turn, NULL, &ct, &d), EBB_OK);
    assert_int_equal(ct.family, EBB_CHAT_GEMMA);
    assert_int_equal(ebb_chat_template_detect(NULL, 0, NULL, NULL, &ct, &d), EBB_EUNSUPPORTED);
}

static void test_template_render(void **state)
{
    (void)state;
    json_t *doc = load_cases();
    json_t *cases = json_object_get(doc, "cases");
    size_t i, checked = 0;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        const char *name = json_string_value(json_object_get(c, "template"));
        json_t *tsrc =
            json_object_get(json_object_get(json_object_get(doc, "templates"), name), "source");
        struct ebb_chat_template ct;
        assert_int_equal(ebb_chat_template_detect(json_string_value(tsrc), json_string_length(tsrc),
                                                  NULL, NULL, &ct, NULL),
                         EBB_OK);
        json_t *msgs = json_object_get(c, "messages");
        struct ebb_chat_msg m[8];
        size_t n = json_array_size(msgs);
        assert_true(n <= 8);
        for (size_t k = 0; k < n; k++) {
            json_t *mm = json_array_get(msgs, k);
            m[k].role = json_string_value(json_object_get(mm, "role"));
            m[k].content = json_string_value(json_object_get(mm, "content"));
            m[k].len = strlen(m[k].content);
            m[k].msg = mm;
        }
        char *out = NULL;
        size_t len = 0;
        struct ebb_diag d;
        bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
        assert_int_equal(ebb_chat_template_render(&ct, m, n, agp, &out, &len, &d), EBB_OK);
        const char *exp = json_string_value(json_object_get(c, "expected"));
        if (strcmp(out, exp))
            fail_msg("%s case %zu:\n got: %s\nwant: %s", name, i, out, exp);
        assert_int_equal(len, strlen(exp));
        free(out);
        /* The same template through the Jinja interpreter gives the same text. */
        struct ebb_chat_template jt;
        assert_int_equal(ebb_chat_template_from_source(json_string_value(tsrc),
                                                       json_string_length(tsrc), "", "</s>", false,
                                                       &jt, &d),
                         EBB_OK);
        assert_int_equal(jt.family, EBB_CHAT_JINJA);
        assert_int_equal(ebb_chat_template_render(&jt, m, n, agp, &out, &len, &d), EBB_OK);
        if (strcmp(out, exp))
            fail_msg("%s case %zu (jinja):\n got: %s\nwant: %s", name, i, out, exp);
        free(out);
        ebb_chat_template_fini(&jt);
        checked++;
    }
    assert_true(checked >= 30);
    json_decref(doc);
}

static void test_template_rejects(void **state)
{
    (void)state;
    struct ebb_chat_template ct;
    ebb_chat_template_by_name("gemma", &ct);
    char *out = NULL;
    size_t len;
    struct ebb_diag d;
    struct ebb_chat_msg bad[1] = {{"tool", "x", 1, NULL}};
    ebb_chat_template_by_name("chatml", &ct);
    assert_int_equal(ebb_chat_template_render(&ct, bad, 1, true, &out, &len, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "tool"));
    /* A built-in family cannot render tool calls or tools. */
    json_t *call = json_loads("{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\","
                              "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}",
                              0, NULL);
    struct ebb_chat_msg tc[1] = {{"assistant", "", 0, call}};
    assert_int_equal(ebb_chat_template_render(&ct, tc, 1, true, &out, &len, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "tool calls"));
    json_decref(call);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    return strdup(buf);
}

/* Renders msgs[0..n) with t (EBB_OK expected) into a malloc'd string. */
static char *render_ok(const struct ebb_chat_template *t, const struct ebb_chat_msg *msgs, size_t n)
{
    char *out = NULL;
    size_t len = 0;
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_chat_template_render(t, msgs, n, true, &out, &len, &d);
    if (rc)
        fail_msg("render failed: %s", d.msg);
    assert_int_equal(len, strlen(out));
    return out;
}

/* Conversations the OpenAI API accepts reach templates that demand alternating roles (Gemma's
 * and Mistral's, as Jinja and as the built-in families) normalized: consecutive messages of one
 * role merged (tool calls kept), a late system message as a user one, an empty user turn before
 * a leading assistant one; each renders as the normalized conversation sent as such would. A
 * template that accepts the conversation as it is (ChatML) sees it unchanged. */
static void test_template_alternation(void **state)
{
    (void)state;
    struct ebb_chat_template gemma_c, gemma_j, mistral_c, mistral_j, chatml_j;
    struct ebb_diag d;
    char *gsrc = read_text(EBB_TEST_DATA "/chat-templates/gemma3.jinja");
    char *msrc = read_text(EBB_TEST_DATA "/chat-templates/mistral.jinja");
    char *csrc = read_text(EBB_TEST_DATA "/chat-templates/smollm2.jinja");
    ebb_chat_template_by_name("gemma", &gemma_c);
    ebb_chat_template_by_name("mistral", &mistral_c);
    assert_int_equal(
        ebb_chat_template_from_source(gsrc, strlen(gsrc), "<bos>", "<eos>", true, &gemma_j, &d),
        EBB_OK);
    assert_int_equal(
        ebb_chat_template_from_source(msrc, strlen(msrc), "<s>", "</s>", true, &mistral_j, &d),
        EBB_OK);
    assert_int_equal(
        ebb_chat_template_from_source(csrc, strlen(csrc), "", "<|im_end|>", false, &chatml_j, &d),
        EBB_OK);
    static const struct {
        struct ebb_chat_msg sent[6], same[6];
        size_t n_sent, n_same;
        bool gemma_only; /* system text the Mistral templates place differently */
    } cases[] = {
        /* two assistant messages in a row (openai-agents: text, then the tool call turn) */
        {{{"user", "q", 1, NULL},
          {"assistant", "Let me see.", 11, NULL},
          {"assistant", "It is 4.", 8, NULL},
          {"user", "thanks", 6, NULL}},
         {{"user", "q", 1, NULL},
          {"assistant", "Let me see.\n\nIt is 4.", 21, NULL},
          {"user", "thanks", 6, NULL}},
         4,
         3,
         false},
        /* two user messages, and an empty assistant message in a run */
        {{{"user", "a", 1, NULL},
          {"user", "b", 1, NULL},
          {"assistant", "", 0, NULL},
          {"assistant", "c", 1, NULL}},
         {{"user", "a\n\nb", 4, NULL}, {"assistant", "c", 1, NULL}},
         4,
         2,
         false},
        /* two system messages first, a late system message, a leading assistant message */
        {{{"system", "S1", 2, NULL},
          {"system", "S2", 2, NULL},
          {"assistant", "Hi, how can I help?", 19, NULL},
          {"user", "x", 1, NULL},
          {"system", "Be brief.", 9, NULL},
          {"user", "y", 1, NULL}},
         {{"system", "S1\n\nS2", 6, NULL},
          {"user", "", 0, NULL},
          {"assistant", "Hi, how can I help?", 19, NULL},
          {"user", "x\n\nBe brief.\n\ny", 15, NULL}},
         6,
         4,
         true},
    };
    const struct ebb_chat_template *strict[] = {&gemma_c, &gemma_j, &mistral_c, &mistral_j};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (size_t k = 0; k < 4; k++) {
            if (cases[i].gemma_only && k >= 2)
                continue;
            /* The normalized conversation is what these templates take as it is. */
            char *want = render_ok(strict[k], cases[i].same, cases[i].n_same);
            char *got = render_ok(strict[k], cases[i].sent, cases[i].n_sent);
            if (strcmp(got, want))
                fail_msg("case %zu template %zu:\n got: %s\nwant: %s", i, k, got, want);
            free(got);
            free(want);
        }
    }
    /* Mistral's first template has no system role at all: the system text goes in front of the
     * first user message, as the built-in family puts it. */
    struct ebb_chat_msg sys[2] = {{"system", "S", 1, NULL}, {"user", "u", 1, NULL}};
    char *a = render_ok(&mistral_j, sys, 2), *b = render_ok(&mistral_c, sys, 2);
    assert_string_equal(a, "[INST] S\n\nu [/INST]");
    assert_string_equal(a, b);
    free(a);
    free(b);
    /* ChatML takes runs of one role as they are. */
    char *c = render_ok(&chatml_j, cases[0].sent, 4);
    assert_non_null(strstr(c, "<|im_start|>assistant\nLet me see.<|im_end|>\n<|im_start|>"
                              "assistant\nIt is 4.<|im_end|>"));
    free(c);
    /* Tool calls of merged assistant messages are kept, in order; tool results are not merged. */
    const char *src = "{% for m in messages %}{% if m.role != 'tool' and (m.role == 'user') != "
                      "(loop.index0 % 2 == 0) %}{{ raise_exception('roles must alternate') }}"
                      "{% endif %}{{ m.role }}:{{ m.content }}{% for c in m.tool_calls or [] %}"
                      "[{{ c.function.name }}]{% endfor %};{% endfor %}";
    struct ebb_chat_template t;
    assert_int_equal(ebb_chat_template_from_source(src, strlen(src), "", "", false, &t, &d),
                     EBB_OK);
    json_t *m = json_loads(
        "[{\"role\":\"assistant\",\"content\":\"Let me check.\",\"tool_calls\":[{\"type\":"
        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"g\",\"arguments\":{}}}]}]",
        0, NULL);
    assert_non_null(m);
    struct ebb_chat_msg tc[6] = {{"user", "q", 1, NULL},
                                 {"assistant", "Let me check.", 13, json_array_get(m, 0)},
                                 {"assistant", "", 0, json_array_get(m, 1)},
                                 {"tool", "1", 1, NULL},
                                 {"tool", "2", 1, NULL},
                                 {"user", "ok", 2, NULL}};
    char *o = render_ok(&t, tc, 6);
    assert_string_equal(o, "user:q;assistant:Let me check.[f][g];tool:1;tool:2;user:ok;");
    free(o);
    /* What normalizing cannot fix is reported as the template said it of the conversation sent. */
    struct ebb_chat_msg bad[2] = {{"robot", "x", 1, NULL}, {"user", "q", 1, NULL}};
    char *out = NULL;
    size_t len;
    assert_int_equal(ebb_chat_template_render(&t, bad, 2, true, &out, &len, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "roles must alternate"));
    ebb_chat_template_fini(&t);
    json_decref(m);
    ebb_chat_template_fini(&gemma_j);
    ebb_chat_template_fini(&mistral_j);
    ebb_chat_template_fini(&chatml_j);
    free(gsrc);
    free(msrc);
    free(csrc);
}

/* The built-in families trim message text as their Jinja templates' |trim does: Python's
 * str.strip(), whose whitespace is Unicode's (NBSP, U+3000, U+2028), not ASCII's alone. */
static void test_template_unicode_trim(void **state)
{
    (void)state;
    struct ebb_chat_template builtin, jinja;
    struct ebb_diag d;
    char *src = read_text(EBB_TEST_DATA "/chat-templates/gemma3.jinja");
    ebb_chat_template_by_name("gemma", &builtin);
    assert_int_equal(
        ebb_chat_template_from_source(src, strlen(src), "", "<eos>", false, &jinja, &d), EBB_OK);
    static const char text[] = "\xc2\xa0\xe3\x80\x80 Hello\xe2\x80\x83there \xe2\x80\xa8\n";
    struct ebb_chat_msg m[1] = {{"user", text, sizeof(text) - 1, NULL}};
    char *a = render_ok(&builtin, m, 1), *b = render_ok(&jinja, m, 1);
    assert_string_equal(a, "<start_of_turn>user\nHello\xe2\x80\x83there<end_of_turn>\n"
                           "<start_of_turn>model\n");
    assert_string_equal(a, b);
    free(a);
    free(b);
    ebb_chat_template_fini(&jinja);
    free(src);
}

/* The model's own template: messages with tool calls and tool results pass through (arguments
 * given as a JSON string arrive as an object), tools are passed, a leading BOS text is dropped
 * when the tokenizer adds BOS itself, and failures name the template line. */
static void test_template_jinja(void **state)
{
    (void)state;
    const char *src = "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}"
                      "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}"
                      "{% endif %}{% if m.tool_call_id %}({{ m.tool_call_id }}){% endif %};"
                      "{% endfor %}{{ tools | map(attribute='function.name') | join(',') if tools "
                      "else 'no tools' }}{% if add_generation_prompt %}>{{ eos_token }}{% endif %}";
    struct ebb_chat_template t;
    struct ebb_diag d;
    assert_int_equal(ebb_chat_template_from_source(src, strlen(src), "<s>", "</s>", true, &t, &d),
                     EBB_OK);
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"hi\"},"
                              "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
                              "\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                              "\"arguments\":\"{\\\"a\\\": 1}\"}}]},"
                              "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}]",
                              0, NULL);
    assert_non_null(msgs);
    struct ebb_chat_msg m[3] = {{"user", "hi", 2, json_array_get(msgs, 0)},
                                {"assistant", "", 0, json_array_get(msgs, 1)},
                                {"tool", "42", 2, json_array_get(msgs, 2)}};
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", 0, NULL);
    char *out = NULL;
    size_t len;
    assert_int_equal(ebb_chat_template_render_tools(&t, m, 3, tools, true, &out, &len, &d), EBB_OK);
    assert_string_equal(out, "user:hi;assistant:{\"a\": 1};tool:42(c1);f></s>");
    free(out);
    t.strip_bos = false;
    assert_int_equal(ebb_chat_template_render(&t, m, 1, false, &out, &len, &d), EBB_OK);
    assert_string_equal(out, "<s>user:hi;no tools");
    free(out);
    ebb_chat_template_fini(&t);
    json_decref(tools);
    json_decref(msgs);

    const char *bad = "{% for m in messages %}\n{{ m.content | frobnicate }}{% endfor %}";
    assert_int_equal(ebb_chat_template_from_source(bad, strlen(bad), "", "", false, &t, &d),
                     EBB_EUNSUPPORTED);
    assert_non_null(strstr(d.msg, "line 2"));
    assert_non_null(strstr(d.msg, "frobnicate"));
    assert_non_null(strstr(d.msg, "--chat-template"));
    const char *raises = "{% if messages[-1].role != 'user' %}\n\n"
                         "{{ raise_exception('Conversations must end with a user') }}{% endif %}";
    assert_int_equal(ebb_chat_template_from_source(raises, strlen(raises), "", "", false, &t, &d),
                     EBB_OK);
    struct ebb_chat_msg sys[2] = {{"user", "u", 1, NULL}, {"assistant", "a", 1, NULL}};
    assert_int_equal(ebb_chat_template_render(&t, sys, 2, true, &out, &len, &d), EBB_EINVAL);
    assert_non_null(strstr(d.msg, "line 3"));
    assert_non_null(strstr(d.msg, "Conversations must end with a user"));
    ebb_chat_template_fini(&t);
}

/* ---- request validation ---------------------------------------------------------------------- */

static ebb_err parse(const char *body, bool chat, struct ebb__gen_req *r, struct ebb__perr *e)
{
    return ebb__gen_req_parse(body, strlen(body), chat, r, e);
}

/* Expects a 400 naming param (NULL: none) for body, whose message names field. */
static void expect_bad_in(const char *body, bool chat, const char *param, const char *field)
{
    struct ebb__gen_req r;
    struct ebb__perr e;
    ebb_err rc = parse(body, chat, &r, &e);
    if (rc != EBB_EINVAL)
        fail_msg("accepted: %s", body);
    if (param) {
        if (!e.param || strcmp(e.param, param))
            fail_msg("%s: param %s, want %s (%s)", body, e.param ? e.param : "null", param, e.msg);
        assert_non_null(strstr(e.msg, field));
    } else {
        assert_null(e.param);
    }
    ebb__gen_req_fini(&r);
}

/* Expects a 400 naming param (NULL: none) for body, whose message names param too. */
static void expect_bad(const char *body, bool chat, const char *param)
{
    expect_bad_in(body, chat, param, param);
}

/* Extra template variables (enable_thinking from reasoning_effort, chat_template_kwargs): they
 * reach a Jinja template, the variables ebb sets win, and the built-in families ignore them. */
static void test_template_vars(void **state)
{
    (void)state;
    const char *src = "{% if enable_thinking is defined and not enable_thinking %}off{% endif %}"
                      "{{ messages | length }}{{ x | default('-') }}";
    struct ebb_chat_template t, plain, chatml;
    struct ebb_diag d;
    assert_int_equal(ebb_chat_template_from_source(src, strlen(src), "", "", false, &t, &d),
                     EBB_OK);
    assert_true(t.has_thinking);
    assert_int_equal(ebb_chat_template_from_source("{{ x }}", 7, "", "", false, &plain, &d),
                     EBB_OK);
    assert_false(plain.has_thinking);
    struct ebb_chat_msg m[1] = {{"user", "hi", 2, NULL}};
    json_t *vars = json_pack("{sbsiss}", "enable_thinking", 0, "x", 7, "messages", "spoof");
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(ebb_chat_template_render_vars(&t, m, 1, NULL, vars, true, &out, &len, &d),
                     EBB_OK);
    assert_string_equal(out, "off17");
    free(out);
    assert_int_equal(ebb_chat_template_render_vars(&t, m, 1, NULL, NULL, true, &out, &len, &d),
                     EBB_OK);
    assert_string_equal(out, "1-");
    free(out);
    assert_int_equal(ebb_chat_template_by_name("chatml", &chatml), EBB_OK);
    assert_int_equal(
        ebb_chat_template_render_vars(&chatml, m, 1, NULL, vars, false, &out, &len, &d), EBB_OK);
    assert_string_equal(out, "<|im_start|>user\nhi<|im_end|>\n");
    free(out);
    json_decref(vars);
    ebb_chat_template_fini(&t);
    ebb_chat_template_fini(&plain);
}

static void test_params_chat(void **state)
{
    (void)state;
    struct ebb__gen_req r;
    struct ebb__perr e;
    const char *ok =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
        "\"text\":\"b\"}]}],\"max_tokens\":5,\"max_completion_tokens\":7,\"temperature\":0,"
        "\"top_p\":0.5,\"top_k\":40,\"min_p\":0.1,\"seed\":42,\"stop\":[\"x\",\"yy\"],"
        "\"presence_penalty\":1,\"frequency_penalty\":-1,\"repeat_penalty\":1.1,"
        "\"logit_bias\":{\"15\":-100,\"7\":2.5},\"logprobs\":true,\"top_logprobs\":3,\"n\":1,"
        "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"unknown_field\":[1,2]}";
    assert_int_equal(parse(ok, true, &r, &e), EBB_OK);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.n_msgs, 2);
    assert_string_equal(r.msgs[1].content, "ab");
    assert_int_equal(r.gp.max_tokens, 7);
    assert_true(r.gp.sampling.temperature == 0);
    assert_true(fabsf(r.gp.sampling.top_p - 0.5f) < 1e-6f);
    assert_int_equal(r.gp.sampling.top_k, 40);
    assert_int_equal(r.gp.sampling.seed, 42);
    assert_int_equal(r.gp.n_stop, 2);
    assert_string_equal(r.gp.stop[1], "yy");
    assert_int_equal(r.gp.sampling.n_logit_bias, 2);
    assert_true(isinf(r.bias[0].bias) || isinf(r.bias[1].bias));
    assert_true(r.logprobs && r.top_logprobs == 3 && r.gp.n_top_logprobs == 3);
    assert_true(r.stream && r.include_usage);
    /* Every sampling field with a default was sent except repeat_last_n: the generation
     * defaults (api/defaults/defaults.h) fill only that one. */
    assert_int_equal(r.sent, EBB_DEF_ALL & ~EBB_DEF_BIT(EBB_DEF_REPEAT_LAST_N));
    assert_true(fabsf(r.gp.sampling.repeat_penalty - 1.1f) < 1e-6f);
    assert_true(r.gp.sampling.frequency_penalty == -1);
    ebb__gen_req_fini(&r);

    /* Defaults: chat has no token limit, seed random, model optional, no sampling field sent. */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", true, &r, &e),
                     EBB_OK);
    assert_null(r.model);
    assert_int_equal(r.gp.max_tokens, 0);
    assert_true(r.gp.sampling.seed == EBB_SEED_RANDOM);
    assert_false(r.stream);
    assert_int_equal(r.sent, 0);
    ebb__gen_req_fini(&r);

    /* A field sent with the value a default would give is still sent (temperature 1 means 1);
     * null counts as absent. */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                           "\"temperature\":1,\"top_k\":0,\"top_p\":null}",
                           true, &r, &e),
                     EBB_OK);
    assert_int_equal(r.sent, EBB_DEF_BIT(EBB_DEF_TEMPERATURE) | EBB_DEF_BIT(EBB_DEF_TOP_K));
    assert_true(r.gp.sampling.temperature == 1 && r.gp.sampling.top_k == 0);
    ebb__gen_req_fini(&r);

    /* n: 1..EBB_SCHED_MAX_CHOICES here (the server's slots are checked at submission). */
    assert_int_equal(
        parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":3}", true, &r, &e),
        EBB_OK);
    assert_int_equal(r.n_choices, 3);
    assert_int_equal(r.gp.n_choices, 3);
    ebb__gen_req_fini(&r);
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":17}", true, "n");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":0}", true, "n");
    expect_bad("{\"prompt\":\"hi\",\"n\":1.5}", false, "n");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":\"hot\"}",
               true, "temperature");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":3}", true,
               "temperature");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"top_p\":1.5}", true,
               "top_p");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":0}", true,
               "max_tokens");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1.5}", true,
               "max_tokens");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":[1]}", true,
               "stop");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
               "\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
               true, "stop");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logit_bias\":{\"x\":1}}",
               true, "logit_bias");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"top_logprobs\":2}", true,
               "top_logprobs");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,"
               "\"top_logprobs\":21}",
               true, "top_logprobs");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":1}", true,
               "stream");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"seed\":\"1\"}", true,
               "seed");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"model\":5}", true,
               "model");
    expect_bad("{\"messages\":[]}", true, "messages");
    expect_bad("{}", true, "messages");
    expect_bad("{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", true, "messages");
    expect_bad("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", true, "messages");
    expect_bad("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}", true,
               "messages");
    expect_bad("{\"messages\":[{\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":5}]}", true,
               "messages");
    assert_int_equal(parse("{\"messages\":[{\"role\":\"assistant\",\"content\":null,"
                           "\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{"
                           "\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                           "\"tool_call_id\":\"c\",\"content\":\"r\"}]}",
                           true, &r, &e),
                     EBB_OK);
    assert_string_equal(r.msgs[1].role, "tool");
    assert_non_null(r.msgs[0].msg);
    ebb__gen_req_fini(&r);
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":5}]}", true, "messages");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", true,
               "messages");
    /* Fields ebb does not implement: rejected unless they cannot change the answer. */
    /* field, value, and the param of the answer where it is a path under field */
    static const char *const unsupported[][3] = {
        {"tool_choice", "\"required\""},
        {"tool_choice", "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"},
        {"functions", "[{\"name\":\"f\"}]"},
        {"function_call", "{\"name\":\"f\"}"},
        /* structured output: implemented, but malformed or unsupported values are refused */
        {"response_format", "{\"type\":\"xml\"}"},
        {"response_format",
         "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{"
         "\"type\":\"array\",\"uniqueItems\":true}}}",
         "response_format.json_schema.schema.uniqueItems"},
        {"grammar", "\"root ::= [a\""},
        {"json_schema", "{\"type\":\"strng\"}", "json_schema.type"},
        {"audio", "{\"voice\":\"x\"}"},
        {"modalities", "[\"text\",\"audio\"]"},
        {"web_search_options", "{}"},
        /* reasoning: implemented (enable_thinking), malformed values refused */
        {"reasoning_effort", "\"max\""},
        {"reasoning_format", "\"tags\""},
        {"chat_template_kwargs", "[1]"},
        {"chat_template_kwargs", "{\"add_generation_prompt\":false}"},
        {"mirostat", "2"},
        {"typical_p", "0.5"},
        {"n_predict", "5"},
    };
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
        char body[512];
        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"%s\":%s}",
                 unsupported[i][0], unsupported[i][1]);
        expect_bad_in(body, true, unsupported[i][2] ? unsupported[i][2] : unsupported[i][0],
                      unsupported[i][0]);
    }
    /* Their neutral values, and fields that cannot change the answer, are accepted. */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                           "\"tools\":[],\"tool_choice\":\"none\",\"response_format\":{\"type\":"
                           "\"text\"},\"grammar\":\"\",\"modalities\":[\"text\"],\"mirostat\":0,"
                           "\"typical_p\":1,\"json_schema\":null,\"user\":\"u\",\"store\":false,"
                           "\"metadata\":{\"a\":\"b\"},\"parallel_tool_calls\":true,"
                           "\"service_tier\":\"auto\",\"prompt_cache_key\":\"k\"}",
                           true, &r, &e),
                     EBB_OK);
    ebb__gen_req_fini(&r);
    /* reasoning_effort sets enable_thinking (gen.c refuses it for a template without it);
     * chat_template_kwargs' own enable_thinking wins; reasoning_format none keeps <think>. */
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                           "\"reasoning_effort\":\"minimal\",\"reasoning_format\":\"none\"}",
                           true, &r, &e),
                     EBB_OK);
    assert_true(json_is_false(json_object_get(r.tmpl_vars, "enable_thinking")));
    assert_string_equal(r.effort_param, "reasoning_effort");
    assert_false(r.reasoning);
    ebb__gen_req_fini(&r);
    assert_int_equal(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                           "\"reasoning_effort\":\"high\",\"chat_template_kwargs\":"
                           "{\"enable_thinking\":false,\"x\":1}}",
                           true, &r, &e),
                     EBB_OK);
    assert_true(json_is_false(json_object_get(r.tmpl_vars, "enable_thinking")));
    assert_int_equal(json_integer_value(json_object_get(r.tmpl_vars, "x")), 1);
    assert_null(r.effort_param);
    assert_true(r.reasoning);
    ebb__gen_req_fini(&r);
    expect_bad("{\"messages\":", true, NULL);
    expect_bad("[1,2]", true, NULL);
}

static void test_params_completions(void **state)
{
    (void)state;
    struct ebb__gen_req r;
    struct ebb__perr e;
    assert_int_equal(parse("{\"prompt\":\"Once\",\"echo\":true,\"logprobs\":2}", false, &r, &e),
                     EBB_OK);
    assert_string_equal(r.prompt, "Once");
    assert_int_equal(r.gp.max_tokens, 16); /* OpenAI's default for completions */
    assert_true(r.echo && r.logprobs && r.top_logprobs == 2);
    ebb__gen_req_fini(&r);
    assert_int_equal(parse("{\"prompt\":[1,2,3],\"max_tokens\":3}", false, &r, &e), EBB_OK);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 3);
    ebb__gen_req_fini(&r);
    assert_int_equal(parse("{\"prompt\":[\"only one\"]}", false, &r, &e), EBB_OK);
    assert_string_equal(r.prompt, "only one");
    ebb__gen_req_fini(&r);
    expect_bad("{}", false, "prompt");
    expect_bad("{\"prompt\":[\"a\",\"b\"]}", false, "prompt");
    expect_bad("{\"prompt\":[1,-2]}", false, "prompt");
    expect_bad("{\"prompt\":{}}", false, "prompt");
    expect_bad("{\"prompt\":\"x\",\"logprobs\":6}", false, "logprobs");
    expect_bad("{\"prompt\":\"x\",\"suffix\":3}", false, "suffix");
    expect_bad("{\"prompt\":\"x\",\"echo\":\"yes\"}", false, "echo");
    expect_bad("{\"prompt\":\"x\",\"best_of\":3}", false, "best_of");
    expect_bad("{\"prompt\":\"x\",\"grammar\":\"root ::= [a\"}", false, "grammar");
    expect_bad("{\"prompt\":\"x\",\"grammar\":\"root ::= [a]\",\"json_schema\":{}}", false,
               "grammar");
    /* structured output becomes one GBNF grammar for the scheduler */
    assert_int_equal(parse("{\"prompt\":\"x\",\"grammar\":\"root ::= [a]\"}", false, &r, &e),
                     EBB_OK);
    assert_string_equal(r.gp.grammar, "root ::= [a]");
    ebb__gen_req_fini(&r);
    assert_int_equal(parse("{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\","
                           "\"json_schema\":{\"name\":\"n\",\"strict\":true,\"schema\":{\"type\":"
                           "\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}}}}",
                           false, &r, &e),
                     EBB_OK);
    assert_non_null(strstr(r.gp.grammar, "root ::= \"{\""));
    ebb__gen_req_fini(&r);
    assert_int_equal(
        parse("{\"prompt\":\"x\",\"response_format\":{\"type\":\"text\"}}", false, &r, &e), EBB_OK);
    assert_null(r.gp.grammar);
    ebb__gen_req_fini(&r);
    assert_int_equal(parse("{\"prompt\":\"x\",\"best_of\":1,\"tools\":[1]}", false, &r, &e),
                     EBB_OK);
    ebb__gen_req_fini(&r);
}

/* ---- stop strings -----------------------------------------------------------------------------
 */

/* Feeds pieces through a stopper and returns the released text. */
static void run_stop(const char *const *stop, uint32_t n_stop, const char *const *pieces, size_t n,
                     char *out, bool *matched)
{
    struct ebb_stopper st;
    ebb_stopper_init(&st, stop, n_stop);
    size_t w = 0;
    *matched = false;
    for (size_t i = 0; i < n && !*matched; i++)
        w += ebb_stopper_push(&st, pieces[i], strlen(pieces[i]), out + w, 1024, matched);
    if (!*matched)
        w += ebb_stopper_flush(&st, out + w, 1024);
    out[w] = 0;
}

static void test_stopper(void **state)
{
    (void)state;
    char out[4096];
    bool m;
    const char *stop1[] = {"\n\nUser:"};
    const char *p1[] = {"Hello", " there", "\n", "\nUs", "er:", " more"};
    run_stop(stop1, 1, p1, 6, out, &m);
    assert_true(m);
    assert_string_equal(out, "Hello there");

    /* A held prefix that turns out not to be a stop is released. */
    const char *p2[] = {"a\n", "\nUse", "d it"};
    run_stop(stop1, 1, p2, 3, out, &m);
    assert_false(m);
    assert_string_equal(out, "a\n\nUsed it");

    /* The earliest of several stops wins, inside one piece too. */
    const char *stop3[] = {"END", "ND"};
    const char *p3[] = {"xxEN", "Dyy"};
    run_stop(stop3, 2, p3, 2, out, &m);
    assert_true(m);
    assert_string_equal(out, "xx");

    /* Held text is never emitted before it is known: check incrementally. */
    struct ebb_stopper st;
    const char *stop4[] = {"abc"};
    ebb_stopper_init(&st, stop4, 1);
    assert_int_equal(ebb_stopper_push(&st, "xa", 2, out, sizeof(out), &m), 1);
    assert_int_equal(ebb_stopper_push(&st, "b", 1, out, sizeof(out), &m), 0);
    assert_int_equal(ebb_stopper_push(&st, "d", 1, out, sizeof(out), &m), 3);
    assert_memory_equal(out, "abd", 3);
    /* Multi-byte stop strings never split a character: held text starts at the stop's start. */
    const char *stop5[] = {"é!"};
    const char *p5[] = {"caf\xc3\xa9", "?"};
    run_stop(stop5, 1, p5, 2, out, &m);
    assert_false(m);
    assert_string_equal(out, "caf\xc3\xa9?");
}

/* ---- objects ----------------------------------------------------------------------------------
 */

static void test_error_object(void **state)
{
    (void)state;
    char *s = ebb__error_json("bad \"thing\"", "invalid_request_error", "top_p", NULL);
    json_t *o = json_loads(s, 0, NULL);
    assert_non_null(o);
    json_t *e = json_object_get(o, "error");
    assert_string_equal(json_string_value(json_object_get(e, "message")), "bad \"thing\"");
    assert_string_equal(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    assert_string_equal(json_string_value(json_object_get(e, "param")), "top_p");
    assert_true(json_is_null(json_object_get(e, "code")));
    json_decref(o);
    free(s);
    assert_string_equal(ebb__error_type(401), "authentication_error");
    assert_string_equal(ebb__error_type(404), "invalid_request_error");
    assert_string_equal(ebb__error_type(503), "server_error");

    /* Anthropic's shape (/v1/messages): {"type":"error","error":{"type","message"}}. */
    static const struct {
        unsigned status;
        const char *type;
    } an[] = {{400, "invalid_request_error"},
              {401, "authentication_error"},
              {404, "not_found_error"},
              {413, "request_too_large"},
              {500, "api_error"},
              {503, "overloaded_error"}};
    for (size_t i = 0; i < sizeof(an) / sizeof(an[0]); i++) {
        s = ebb__anthropic_error_json(an[i].status, "why \xff");
        o = json_loads(s, 0, NULL);
        assert_non_null(o);
        assert_string_equal(json_string_value(json_object_get(o, "type")), "error");
        e = json_object_get(o, "error");
        assert_string_equal(json_string_value(json_object_get(e, "type")), an[i].type);
        assert_non_null(json_string_value(json_object_get(e, "message"))); /* valid UTF-8 */
        json_decref(o);
        free(s);
    }
}

static void test_sse_and_utf8(void **state)
{
    (void)state;
    struct ebb__abuf b = {0};
    json_t *o = json_object();
    json_object_set_new(o, "x",
                        ebb__json_text("a\xff"
                                       "b\xe2\x82",
                                       5));
    ebb__sse_event(&b, o);
    assert_string_equal(b.p, "data: {\"x\":\"a\xef\xbf\xbd"
                             "b\xef\xbf\xbd\"}\n\n");
    ebb__abuf_fini(&b);
    /* A capped buffer refuses growth past its limit. */
    struct ebb__abuf c = {.limit = 8};
    ebb__abuf_puts(&c, "12345678");
    assert_false(c.oom);
    ebb__abuf_puts(&c, "9");
    assert_true(c.oom);
    ebb__abuf_fini(&c);
}

static void test_json_escape(void **state)
{
    (void)state;
    const char *cases[] = {"plain",
                           "q\"uote\\back",
                           "nl\n\r\t\b\f",
                           "\x01\x1f ctl",
                           "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80",
                           ""};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct ebb__abuf b = {0};
        assert_true(ebb__utf8_valid(cases[i], strlen(cases[i])));
        ebb__json_escape(&b, cases[i], strlen(cases[i]));
        json_error_t je;
        json_t *v = json_loads(b.p, JSON_DECODE_ANY, &je);
        if (!v)
            fail_msg("%s: %s", b.p, je.text);
        assert_string_equal(json_string_value(v), cases[i]);
        json_decref(v);
        ebb__abuf_fini(&b);
    }
    assert_false(ebb__utf8_valid("a\xc3", 2));
    assert_false(ebb__utf8_valid("\xed\xa0\x80", 3)); /* a surrogate */
    assert_false(ebb__utf8_valid("\xc0\xaf", 2));     /* overlong */
}

/* ---- embeddings ------------------------------------------------------------------------------ */

static int b64v(char c)
{
    const char *tab = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = strchr(tab, c);
    return c && p ? (int)(p - tab) : -1;
}

/* Normalisation (unit length, direction kept, zero stays zero, truncation then renormalising)
 * and base64 of little-endian float32, decoded back to the same bits for every length mod 3. */
static void test_embeddings_math(void **state)
{
    (void)state;
    float v[5] = {3, 4, 0, 0, 12};
    ebb__embd_normalize(v, 5);
    assert_float_equal(v[0], 3.0f / 13, 1e-6);
    assert_float_equal(v[4], 12.0f / 13, 1e-6);
    float t[5] = {3, 4, 0, 0, 12};
    ebb__embd_normalize(t, 2); /* dimensions = 2: the first two, unit length again */
    assert_float_equal(t[0], 0.6f, 1e-6);
    assert_float_equal(t[1], 0.8f, 1e-6);
    float z[3] = {0, 0, 0};
    ebb__embd_normalize(z, 3);
    assert_true(z[0] == 0 && z[1] == 0 && z[2] == 0);

    /* "AACAPw==" is 1.0f as little-endian float32 (00 00 80 3f). */
    char out[64];
    float one = 1.0f;
    assert_int_equal(ebb__base64_f32(&one, 1, out), 8);
    assert_string_equal(out, "AACAPw==");
    float src[7] = {1.5f, -2.25f, 3.0e-8f, -0.0f, 1e30f, 0.1f, -7.0f};
    for (uint32_t n = 1; n <= 7; n++) {
        char b[64];
        size_t len = ebb__base64_f32(src, n, b);
        assert_int_equal(len, 4 * ((4 * n + 2) / 3));
        assert_int_equal(strlen(b), len);
        uint8_t bytes[32];
        size_t nb = 0;
        uint32_t acc = 0;
        int bits = 0;
        for (size_t i = 0; i < len && b[i] != '='; i++) {
            int x = b64v(b[i]);
            assert_true(x >= 0);
            acc = acc << 6 | (uint32_t)x;
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                bytes[nb++] = (uint8_t)(acc >> bits);
            }
        }
        assert_int_equal(nb, 4 * n);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t le = (uint32_t)bytes[4 * i] | (uint32_t)bytes[4 * i + 1] << 8 |
                          (uint32_t)bytes[4 * i + 2] << 16 | (uint32_t)bytes[4 * i + 3] << 24;
            uint32_t want;
            memcpy(&want, &src[i], 4);
            assert_int_equal(le, want);
        }
    }
}

static void test_metrics_text(void **state)
{
    (void)state;
    struct ebb__metrics m = {0};
    ebb__metrics_request(&m, EBB__EP_CHAT, 200);
    ebb__metrics_request(&m, EBB__EP_CHAT, 200);
    ebb__metrics_request(&m, EBB__EP_CHAT, 400);
    ebb__metrics_ttft(&m, 0.2);
    ebb__metrics_ttft(&m, 100);
    struct ebb_sched_stats st = {.queued = 3, .active = 1, .n_slots = 2};
    struct ebb__abuf b = {0};
    ebb__metrics_render(&m, &st, true, &b);
    assert_non_null(
        strstr(b.p, "ebb_requests_total{endpoint=\"chat_completions\",status=\"200\"} 2\n"));
    assert_non_null(
        strstr(b.p, "ebb_requests_total{endpoint=\"chat_completions\",status=\"400\"} 1\n"));
    assert_non_null(strstr(b.p, "ebb_time_to_first_token_seconds_bucket{le=\"0.25\"} 1\n"));
    assert_non_null(strstr(b.p, "ebb_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
    assert_non_null(strstr(b.p, "ebb_queue_depth 3\n"));
    assert_non_null(strstr(b.p, "ebb_active_slots 1\n"));
    /* Every line is a comment or "name{labels} value". */
    for (char *line = b.p; *line;) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        if (line[0] != '#') {
            char *sp = memchr(line, ' ', (size_t)(nl - line));
            assert_non_null(sp);
            char *end;
            strtod(sp + 1, &end);
            assert_ptr_equal(end, nl);
        }
        line = nl + 1;
    }
    ebb__abuf_fini(&b);
}

/* ---- several models: names and keep_alive (api/http/catalogue.c) --------------------------- */

static void test_catalogue_names(void **state)
{
    (void)state;
    struct ebb_api a = {0};
    struct ebb__served smol = {.id = "SmolLM2-135M-Instruct.Q4_1", .api = &a};
    struct ebb__served gemma = {.id = "gemma-3-270m-q4_k_m", .api = &a};
    struct ebb__served gemma4 = {.id = "gemma-3-4b-it-Q4_K_M", .api = &a};
    struct ebb__served *models[] = {&smol, &gemma, &gemma4};
    a.models = models;
    a.n_models = 3;
    bool amb;
    /* One model (-m): only the exact id. */
    a.catalogue = false;
    assert_ptr_equal(ebb__served_find(&a, "SmolLM2-135M-Instruct.Q4_1", &amb), &smol);
    assert_null(ebb__served_find(&a, "smollm2", &amb));
    assert_null(ebb__served_find(&a, "SmolLM2-135M-Instruct.Q4_1:latest", &amb));
    /* Several: case, Ollama's tags, unique prefixes. */
    a.catalogue = true;
    assert_ptr_equal(ebb__served_find(&a, "smollm2-135m-instruct.q4_1", &amb), &smol);
    assert_ptr_equal(ebb__served_find(&a, "SmolLM2-135M-Instruct.Q4_1:latest", &amb), &smol);
    assert_ptr_equal(ebb__served_find(&a, "smollm2-135m-instruct:q4_1", &amb), &smol);
    assert_ptr_equal(ebb__served_find(&a, "smol", &amb), &smol);
    assert_false(amb);
    assert_ptr_equal(ebb__served_find(&a, "gemma-3-270", &amb), &gemma);
    assert_null(ebb__served_find(&a, "gemma", &amb));
    assert_true(amb);
    assert_null(ebb__served_find(&a, "llama3", &amb));
    assert_false(amb);
    assert_null(ebb__served_find(&a, "", &amb));
    assert_null(ebb__served_find(&a, NULL, &amb));

    json_t *v = json_string("1h30m");
    assert_true(ebb__keep_alive_secs(v) == 5400);
    json_decref(v);
    v = json_string("-1");
    assert_true(ebb__keep_alive_secs(v) < 0);
    json_decref(v);
    v = json_integer(0);
    assert_true(ebb__keep_alive_secs(v) == 0);
    json_decref(v);
    v = json_string("soon");
    assert_true(isnan(ebb__keep_alive_secs(v)));
    json_decref(v);
    assert_true(isnan(ebb__keep_alive_secs(NULL)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_detect),      cmocka_unit_test(test_template_from_tokens),
        cmocka_unit_test(test_template_render),      cmocka_unit_test(test_template_rejects),
        cmocka_unit_test(test_template_alternation), cmocka_unit_test(test_template_unicode_trim),
        cmocka_unit_test(test_template_jinja),       cmocka_unit_test(test_params_chat),
        cmocka_unit_test(test_params_completions),   cmocka_unit_test(test_stopper),
        cmocka_unit_test(test_error_object),         cmocka_unit_test(test_sse_and_utf8),
        cmocka_unit_test(test_json_escape),          cmocka_unit_test(test_metrics_text),
        cmocka_unit_test(test_embeddings_math),      cmocka_unit_test(test_template_vars),
        cmocka_unit_test(test_catalogue_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
