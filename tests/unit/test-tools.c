/* Tool calls: the output parsers of each family's format (whole text and streamed in pieces),
 * the validation of the request's tool fields, and the prompt fallback for templates without
 * tools. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/openai/openai.h"
#include "api/tools/tools.h"
#include "grammar/grammar.h"

static json_t *weather_tools(void)
{
    json_t *t = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                           "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{"
                           "\"type\":\"string\"}}}}},{\"type\":\"function\",\"function\":{"
                           "\"name\":\"get_time\"}}]",
                           0, NULL);
    assert_non_null(t);
    return t;
}

/* Parses text whole in format f (tools: the weather tools) and checks the content and the
 * calls, given as "name args" strings. */
static void expect_parse(enum ebb_tool_format f, const char *text, const char *content,
                         const char *const *calls, size_t n_calls)
{
    json_t *tools = weather_tools();
    struct ebb_tool_parser_opts o = {.format = f, .tools = tools};
    struct ebb_tool_result r;
    assert_int_equal(ebb_tools_parse(&o, text, strlen(text), &r), EBB_OK);
    if (content) {
        assert_non_null(r.content);
        assert_string_equal(r.content, content);
        assert_int_equal(r.content_len, strlen(content));
    } else {
        assert_null(r.content);
    }
    assert_int_equal(r.n_calls, n_calls);
    for (size_t i = 0; i < n_calls; i++) {
        char got[512];
        snprintf(got, sizeof(got), "%s %s", r.calls[i].name, r.calls[i].arguments);
        assert_string_equal(got, calls[i]);
        assert_memory_equal(r.calls[i].id, "call_", 5);
        assert_int_equal(strlen(r.calls[i].id), 5 + 24);
        for (size_t k = 0; k < i; k++)
            assert_string_not_equal(r.calls[i].id, r.calls[k].id);
    }
    ebb_tool_result_fini(&r);
    json_decref(tools);
}

static void test_detect(void **state)
{
    (void)state;
    static const struct {
        const char *src;
        enum ebb_tool_format f;
    } cases[] = {
        {"{% for t in tools %}<tool_call>{{ t | tojson }}</tool_call>{% endfor %}",
         EBB_TOOL_HERMES},
        {"{{ '[TOOL_CALLS]' + tool_calls | tojson }}", EBB_TOOL_MISTRAL},
        {"<|start_header_id|>ipython<|end_header_id|>{{ tools }}", EBB_TOOL_LLAMA3},
        {"{{ '<|python_tag|>' }}", EBB_TOOL_LLAMA3},
        {"<|im_start|>{{ tools }}", EBB_TOOL_HERMES},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(ebb_tool_format_detect(cases[i].src, strlen(cases[i].src)), cases[i].f);
    assert_string_equal(ebb_tool_format_name(EBB_TOOL_MISTRAL), "mistral");
    assert_string_equal(ebb_tool_format_marker_tokens(EBB_TOOL_LLAMA3)[0], "<|python_tag|>");
    assert_null(ebb_tool_format_marker_tokens(EBB_TOOL_HERMES)[0]);
}

static void test_hermes(void **state)
{
    (void)state;
    const char *one[] = {"get_weather {\"city\":\"Paris\"}"};
    expect_parse(EBB_TOOL_HERMES,
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                 "\"Paris\"}}\n</tool_call>",
                 NULL, one, 1);
    /* Text before the call stays as content; arguments sent as a JSON string are decoded. */
    expect_parse(EBB_TOOL_HERMES,
                 "Let me look.\n<tool_call>{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":"
                 "\\\"Paris\\\"}\"}</tool_call>\n",
                 "Let me look.", one, 1);
    const char *two[] = {"get_weather {\"city\":\"Paris\"}", "get_time {}"};
    expect_parse(EBB_TOOL_HERMES,
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                 "</tool_call>\n<tool_call>\n{\"name\": \"get_time\"}\n</tool_call>",
                 NULL, two, 2);
    /* The markup is not closed before the end, but its JSON is complete. */
    expect_parse(EBB_TOOL_HERMES, "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}", NULL,
                 two + 1, 1);
}

static void test_malformed(void **state)
{
    (void)state;
    /* JSON that does not decode, or is not a call, is content byte for byte. */
    static const char *const texts[] = {
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": }</tool_call> after",
        "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"get_time\", \"arguments\": [1]}</tool_call>",
        "<tool_call>{\"name\": \"get_time\"",
        "plain text with a < sign and <tool_ in the middle",
        "{\"name\": \"unknown_tool\", \"arguments\": {}}",
        "{\"answer\": 42}",
        "[1, 2]",
        "",
        "  \n",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        expect_parse(EBB_TOOL_HERMES, texts[i], texts[i], NULL, 0);
    /* A good call next to a bad one: the bad one is content, the good one a call. */
    const char *one[] = {"get_time {}"};
    expect_parse(EBB_TOOL_HERMES,
                 "<tool_call>{\"name\":\"get_time\"}</tool_call><tool_call>{oops}</tool_call>",
                 "<tool_call>{oops}</tool_call>", one, 1);
}

static void test_generic_json(void **state)
{
    (void)state;
    const char *one[] = {"get_weather {\"city\":\"Oslo\"}"};
    expect_parse(EBB_TOOL_HERMES,
                 " {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}", NULL, one, 1);
    expect_parse(EBB_TOOL_HERMES,
                 "{\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": "
                 "\"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}}]}",
                 NULL, one, 1);
    const char *two[] = {"get_weather {\"city\":\"Oslo\"}", "get_time {}"};
    expect_parse(EBB_TOOL_MISTRAL,
                 "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, {\"name\": "
                 "\"get_time\", \"arguments\": {}}]",
                 NULL, two, 2);
}

static void test_llama3(void **state)
{
    (void)state;
    const char *one[] = {"get_weather {\"city\":\"Rome\"}"};
    expect_parse(EBB_TOOL_LLAMA3,
                 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", NULL, one, 1);
    expect_parse(EBB_TOOL_LLAMA3,
                 "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}",
                 NULL, one, 1);
    const char *two[] = {"get_weather {\"city\":\"Rome\"}", "get_time {}"};
    expect_parse(EBB_TOOL_LLAMA3,
                 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}; {\"name\": "
                 "\"get_time\", \"parameters\": {}}",
                 NULL, two, 2);
    /* Python code after the tag (a built-in tool) is not a JSON call. */
    expect_parse(EBB_TOOL_LLAMA3, "<|python_tag|>print(1)", "<|python_tag|>print(1)", NULL, 0);
    expect_parse(EBB_TOOL_LLAMA3, "The answer is 4.", "The answer is 4.", NULL, 0);
}

static void test_mistral(void **state)
{
    (void)state;
    const char *two[] = {"get_weather {\"city\":\"Lyon\"}", "get_time {}"};
    expect_parse(EBB_TOOL_MISTRAL,
                 "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}, "
                 "\"id\": \"abcdefghi\"}, {\"name\": \"get_time\", \"arguments\": {}}]",
                 NULL, two, 2);
    expect_parse(EBB_TOOL_MISTRAL,
                 "Sure. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Lyon\"}[TOOL_CALLS]get_time"
                 "[ARGS]{}",
                 "Sure.", two, 2);
    expect_parse(EBB_TOOL_MISTRAL, "[TOOL_CALLS] not json", "[TOOL_CALLS] not json", NULL, 0);
}

/* ---- streaming ------------------------------------------------------------------------------ */

struct acc {
    char content[2048];
    size_t n_content;
    char names[4][64], ids[4][48], args[4][512];
    size_t n_calls;
    int bad_order; /* arguments before the call began, or an index out of order */
};

static ebb_err acc_ev(void *ud, const struct ebb_tool_ev *ev)
{
    struct acc *a = ud;
    if (ev->kind == EBB_TOOL_EV_CONTENT) {
        assert_true(ev->len > 0);
        assert_true(a->n_content + ev->len < sizeof(a->content));
        memcpy(a->content + a->n_content, ev->text, ev->len);
        a->n_content += ev->len;
        a->content[a->n_content] = 0;
    } else if (ev->kind == EBB_TOOL_EV_CALL_BEGIN) {
        if (ev->index != a->n_calls)
            a->bad_order++;
        assert_true(a->n_calls < 4);
        snprintf(a->names[a->n_calls], 64, "%s", ev->name);
        snprintf(a->ids[a->n_calls], 48, "%s", ev->id);
        a->n_calls++;
    } else {
        if (ev->index + 1 != a->n_calls)
            a->bad_order++;
        size_t l = strlen(a->args[ev->index]);
        assert_true(l + ev->len < 512);
        memcpy(a->args[ev->index] + l, ev->text, ev->len);
        a->args[ev->index][l + ev->len] = 0;
    }
    return EBB_OK;
}

/* Feeds text in pieces of `step` bytes and returns what the events add up to. */
static void stream(enum ebb_tool_format f, const char *text, size_t step, struct acc *a)
{
    json_t *tools = weather_tools();
    struct ebb_tool_parser_opts o = {.format = f, .tools = tools};
    struct ebb_tool_stream *s;
    memset(a, 0, sizeof(*a));
    assert_int_equal(ebb_tool_stream_new(&o, &s), EBB_OK);
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step)
        assert_int_equal(ebb_tool_stream_feed(s, text + i, i + step > n ? n - i : step, acc_ev, a),
                         EBB_OK);
    assert_int_equal(ebb_tool_stream_finish(s, acc_ev, a), EBB_OK);
    assert_int_equal(ebb_tool_stream_n_calls(s), a->n_calls);
    ebb_tool_stream_free(s);
    json_decref(tools);
}

static void test_stream_pieces(void **state)
{
    (void)state;
    static const struct {
        enum ebb_tool_format f;
        const char *text;
    } cases[] = {
        {EBB_TOOL_HERMES, "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                          "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": "
                          "\"get_time\"}</tool_call>\n"},
        {EBB_TOOL_HERMES, "no call at all, just < and <tool and </tool_call>"},
        {EBB_TOOL_HERMES, "<tool_call>{broken</tool_call> text"},
        {EBB_TOOL_HERMES, "{\"name\": \"get_time\", \"arguments\": {}}"},
        {EBB_TOOL_LLAMA3, "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}"},
        {EBB_TOOL_MISTRAL, "ok [TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}]"},
        {EBB_TOOL_MISTRAL, "[TOOL_CA"},
    };
    /* Whatever the piece size, the stream adds up to what the whole-text parser finds (content
     * up to the whitespace the whole-text result trims), and markup never reaches content. */
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        json_t *tools = weather_tools();
        struct ebb_tool_parser_opts o = {.format = cases[c].f, .tools = tools};
        struct ebb_tool_result whole;
        assert_int_equal(ebb_tools_parse(&o, cases[c].text, strlen(cases[c].text), &whole), EBB_OK);
        for (size_t step = 1; step <= strlen(cases[c].text); step++) {
            struct acc a;
            stream(cases[c].f, cases[c].text, step, &a);
            assert_int_equal(a.bad_order, 0);
            assert_int_equal(a.n_calls, whole.n_calls);
            for (size_t i = 0; i < a.n_calls; i++) {
                assert_string_equal(a.names[i], whole.calls[i].name);
                assert_string_equal(a.args[i], whole.calls[i].arguments);
                assert_memory_equal(a.ids[i], "call_", 5);
            }
            if (whole.n_calls) {
                assert_null(strstr(a.content, "<tool_call>"));
                assert_null(strstr(a.content, "[TOOL_CALLS]"));
                if (whole.content)
                    assert_non_null(strstr(a.content, whole.content));
            } else {
                assert_string_equal(a.content, whole.content);
            }
        }
        ebb_tool_result_fini(&whole);
        json_decref(tools);
    }
}

static void test_stream_holds_marker(void **state)
{
    (void)state;
    json_t *tools = weather_tools();
    struct ebb_tool_parser_opts o = {.format = EBB_TOOL_HERMES, .tools = tools};
    struct ebb_tool_stream *s;
    struct acc a = {0};
    assert_int_equal(ebb_tool_stream_new(&o, &s), EBB_OK);
    /* "Hi <tool_c" may begin a call: only "Hi " goes out. */
    assert_int_equal(ebb_tool_stream_feed(s, "Hi <tool_c", 10, acc_ev, &a), EBB_OK);
    assert_string_equal(a.content, "Hi ");
    /* "<tool_cat" cannot: it is released. */
    assert_int_equal(ebb_tool_stream_feed(s, "at> ", 4, acc_ev, &a), EBB_OK);
    assert_string_equal(a.content, "Hi <tool_cat> ");
    assert_int_equal(ebb_tool_stream_feed(s, "<tool_call>{\"name\":\"get_time\"}", 30, acc_ev, &a),
                     EBB_OK);
    assert_int_equal(a.n_calls, 0); /* not closed yet */
    assert_int_equal(ebb_tool_stream_feed(s, "</tool_call>", 12, acc_ev, &a), EBB_OK);
    assert_int_equal(a.n_calls, 1);
    assert_string_equal(a.names[0], "get_time");
    assert_string_equal(a.args[0], "{}");
    /* A partial marker left at the end is content after all. */
    assert_int_equal(ebb_tool_stream_feed(s, " <tool", 6, acc_ev, &a), EBB_OK);
    assert_int_equal(ebb_tool_stream_finish(s, acc_ev, &a), EBB_OK);
    assert_string_equal(a.content, "Hi <tool_cat> <tool");
    ebb_tool_stream_free(s);
    json_decref(tools);
}

static void test_max_calls(void **state)
{
    (void)state;
    json_t *tools = weather_tools();
    struct ebb_tool_parser_opts o = {.format = EBB_TOOL_HERMES, .tools = tools, .max_calls = 1};
    const char *text = "<tool_call>{\"name\":\"get_time\"}</tool_call><tool_call>{\"name\":"
                       "\"get_weather\"}</tool_call>";
    struct ebb_tool_result r;
    assert_int_equal(ebb_tools_parse(&o, text, strlen(text), &r), EBB_OK);
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.calls[0].name, "get_time");
    assert_null(r.content);
    ebb_tool_result_fini(&r);
    json_decref(tools);
}

/* ---- request fields -------------------------------------------------------------------------- */

static void expect_bad(const char *fields, const char *param, const char *msg_part)
{
    char body[2048];
    snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],%s}",
             fields);
    struct ebb__gen_req r;
    struct ebb__perr e;
    ebb_err rc = ebb__gen_req_parse(body, strlen(body), true, &r, &e);
    if (rc != EBB_EINVAL)
        fail_msg("accepted: %s", body);
    assert_non_null(e.param);
    assert_string_equal(e.param, param);
    if (!strstr(e.msg, msg_part))
        fail_msg("message '%s' lacks '%s'", e.msg, msg_part);
    ebb__gen_req_fini(&r);
}

#define TOOL(fn) "{\"type\":\"function\",\"function\":" fn "}"

static void test_request_fields(void **state)
{
    (void)state;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[" TOOL(
        "{\"name\":\"get_time\",\"description\":\"d\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"tz\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"tz\"]},"
        "\"strict\":true}") "],\"tool_choice\":\"auto\",\"parallel_tool_calls\":false}";
    struct ebb__gen_req r;
    struct ebb__perr e;
    assert_int_equal(ebb__gen_req_parse(body, strlen(body), true, &r, &e), EBB_OK);
    assert_int_equal(json_array_size(r.tools.tools), 1);
    assert_int_equal(r.tools.choice, EBB__TC_AUTO);
    assert_false(r.tools.parallel);
    ebb__gen_req_fini(&r);
    /* "none" turns the tools off; no tools means no parsing. */
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[" TOOL(
        "{\"name\":\"f\"}") "],\"tool_choice\":\"none\"}";
    assert_int_equal(ebb__gen_req_parse(body, strlen(body), true, &r, &e), EBB_OK);
    assert_int_equal(r.tools.choice, EBB__TC_NONE);
    ebb__gen_req_fini(&r);

    expect_bad("\"tools\":{}", "tools", "must be an array");
    expect_bad("\"tools\":[" TOOL("{\"description\":\"no name\"}") "]", "tools",
               "tools[0].function.name is required");
    expect_bad("\"tools\":[" TOOL("{\"name\":\"has space\"}") "]", "tools", "1 to 64 letters");
    expect_bad("\"tools\":[{\"type\":\"retrieval\"}]", "tools", "must be 'function'");
    expect_bad("\"tools\":[" TOOL("{\"name\":\"f\",\"parameters\":{\"type\":\"dict\"}}") "]",
               "tools", "tools[0].function.parameters.type");
    expect_bad("\"tools\":[" TOOL("{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                                  "\"properties\":{\"a\":{\"type\":\"str\"}}}}") "]",
               "tools", "parameters.properties.a.type");
    expect_bad("\"tools\":[" TOOL("{\"name\":\"f\",\"parameters\":[]}") "]", "tools",
               "JSON schema object");
    expect_bad("\"tools\":[" TOOL("{\"name\":\"f\",\"parameters\":{\"required\":\"a\"}}") "]",
               "tools", "required");
    expect_bad("\"tools\":[" TOOL("{\"name\":\"f\"}") "," TOOL("{\"name\":\"f\"}") "]", "tools",
               "used twice");
    expect_bad("\"tools\":[" TOOL("{\"name\":\"f\",\"description\":3}") "]", "tools",
               "description");
    expect_bad("\"tools\":[" TOOL("{\"name\":\"f\"}") "],\"tool_choice\":\"sometimes\"",
               "tool_choice", "sometimes");
    expect_bad("\"tools\":[" TOOL("{\"name\":\"f\"}") "],\"tool_choice\":{\"type\":\"function\","
                                                      "\"function\":{\"name\":\"g\"}}",
               "tool_choice", "'g', which is not among 'tools'");
    expect_bad("\"tool_choice\":\"required\"", "tool_choice", "no 'tools'");
    expect_bad("\"tools\":[" TOOL("{\"name\":\"f\"}") "],\"parallel_tool_calls\":1",
               "parallel_tool_calls", "boolean");
    expect_bad("\"functions\":[{\"name\":\"f\"}]", "functions", "use 'tools'");
}

/* ---- constrained calls ---------------------------------------------------------------------- */

static bool accepts(struct ebb_grammar *g, const char *text)
{
    struct ebb_grammar_state *st = NULL;
    assert_int_equal(ebb_grammar_state_new(&st), EBB_OK);
    assert_int_equal(ebb_grammar_state_reset(st, g, NULL), EBB_OK);
    bool ok = ebb_grammar_state_advance(st, (const uint8_t *)text, strlen(text), NULL) == EBB_OK &&
              ebb_grammar_state_can_end(st);
    ebb_grammar_state_free(st);
    return ok;
}

/* The grammar for tool_choice (a JSON value) in format f, compiled. */
static struct ebb_grammar *call_grammar(const char *tool_choice, bool parallel,
                                        enum ebb_tool_format f, struct ebb__gen_req *r)
{
    char body[1024];
    snprintf(
        body, sizeof(body),
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[" TOOL(
            "{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
            "\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}") "," TOOL("{\"name\":\"get_"
                                                                                  "time\"}") "],"
                                                                                             "\"too"
                                                                                             "l_"
                                                                                             "choic"
                                                                                             "e\":%"
                                                                                             "s,"
                                                                                             "\"par"
                                                                                             "allel"
                                                                                             "_tool"
                                                                                             "_call"
                                                                                             "s\":%"
                                                                                             "s}",
        tool_choice, parallel ? "true" : "false");
    struct ebb__perr e;
    assert_int_equal(ebb__gen_req_parse(body, strlen(body), true, r, &e), EBB_OK);
    char *gbnf = NULL;
    assert_int_equal(ebb__tool_grammar(&r->tools, f, &gbnf, &e), EBB_OK);
    struct ebb_grammar *g = NULL;
    struct ebb_diag d = {{0}};
    if (ebb_grammar_compile(gbnf, strlen(gbnf), "root", &g, &d))
        fail_msg("the tool grammar does not compile: %s\n%s", d.msg, gbnf);
    free(gbnf);
    return g;
}

/* Text the grammar admits must parse back into the calls it spells. */
static void admitted_parses(struct ebb_grammar *g, struct ebb__gen_req *r, enum ebb_tool_format f,
                            const char *text, size_t n_calls)
{
    if (!accepts(g, text))
        fail_msg("the grammar rejects %s", text);
    struct ebb_tool_parser_opts o = {.format = f, .tools = r->tools.tools};
    struct ebb_tool_result res;
    assert_int_equal(ebb_tools_parse(&o, text, strlen(text), &res), EBB_OK);
    assert_int_equal(res.n_calls, n_calls);
    assert_null(res.content);
    ebb_tool_result_fini(&res);
}

static void test_call_grammar(void **state)
{
    (void)state;
    struct ebb__gen_req r;
    struct ebb_grammar *g = call_grammar("\"required\"", true, EBB_TOOL_HERMES, &r);
    const char *w = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                    "\"Paris\"}}\n</tool_call>";
    admitted_parses(g, &r, EBB_TOOL_HERMES, w, 1);
    char two[512];
    snprintf(two, sizeof(two),
             "%s\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", w);
    admitted_parses(g, &r, EBB_TOOL_HERMES, two, 2);
    assert_false(accepts(g, "Sure!"));
    assert_false(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n"
                            "</tool_call>")); /* city is required */
    assert_false(accepts(g, "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n"
                            "</tool_call>"));
    ebb_grammar_free(g);
    ebb__gen_req_fini(&r);

    /* A named function: only its calls, and one at most. */
    g = call_grammar("{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}", true,
                     EBB_TOOL_HERMES, &r);
    admitted_parses(g, &r, EBB_TOOL_HERMES,
                    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": 1}}\n"
                    "</tool_call>",
                    1);
    assert_false(accepts(g, w));
    assert_false(accepts(g, two));
    ebb_grammar_free(g);
    ebb__gen_req_fini(&r);

    /* Llama 3 and Mistral calls are bare JSON the generic rule reads. */
    g = call_grammar("\"required\"", false, EBB_TOOL_LLAMA3, &r);
    admitted_parses(g, &r, EBB_TOOL_LLAMA3,
                    "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", 1);
    assert_false(accepts(g, "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": "
                            "\"get_time\", \"parameters\": {}}"));
    ebb_grammar_free(g);
    ebb__gen_req_fini(&r);
    g = call_grammar("\"required\"", true, EBB_TOOL_MISTRAL, &r);
    admitted_parses(g, &r, EBB_TOOL_MISTRAL,
                    "[{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_weather\", "
                    "\"arguments\": {\"city\": \"Lyon\"}}]",
                    2);
    ebb_grammar_free(g);
    ebb__gen_req_fini(&r);
}

/* ---- the prompt fallback ------------------------------------------------------------------- */

static void test_render_fallback(void **state)
{
    (void)state;
    struct ebb_chat_template t;
    assert_int_equal(ebb_chat_template_by_name("chatml", &t), EBB_OK);
    assert_false(t.tools_native);
    json_t *tools = weather_tools();
    json_t *call = json_loads("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
                              "\"call_1\",\"type\":\"function\",\"function\":{\"name\":"
                              "\"get_time\",\"arguments\":\"{}\"}}]}",
                              0, NULL);
    struct ebb_chat_msg m[] = {
        {.role = "user", .content = "time?", .len = 5},
        {.role = "assistant", .content = "", .len = 0, .msg = call},
        {.role = "tool", .content = "12:00", .len = 5},
        {.role = "tool", .content = "UTC", .len = 3},
    };
    char *out = NULL;
    size_t len = 0;
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb__tools_render(&t, m, 4, tools, NULL, &out, &len, &d), EBB_OK);
    /* The tools are described in a system message first, the call is markup in the assistant
     * turn, and the two results are one user turn. */
    assert_memory_equal(out, "<|im_start|>system\n# Tools\n", 27);
    assert_non_null(strstr(out, "\n{\"type\":\"function\",\"function\":{\"name\":\"get_weather\""));
    assert_non_null(strstr(out, "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_time\", "
                                "\"arguments\": {}}\n</tool_call><|im_end|>\n"));
    assert_non_null(strstr(out, "<|im_start|>user\n<tool_response>\n12:00\n</tool_response>\n"
                                "<tool_response>\nUTC\n</tool_response><|im_end|>\n"));
    assert_int_equal(len, strlen(out));
    free(out);
    /* A template that knows tools gets them as they are. */
    const char *src = "{{ tools | length }}{% for m in messages %}{{ m.role }}{% endfor %}";
    struct ebb_chat_template j;
    assert_int_equal(ebb_chat_template_from_source(src, strlen(src), "", "", false, &j, &d),
                     EBB_OK);
    assert_true(j.tools_native);
    assert_int_equal(ebb__tools_render(&j, m, 4, tools, NULL, &out, &len, &d), EBB_OK);
    assert_string_equal(out, "2userassistanttooltool");
    free(out);
    ebb_chat_template_fini(&j);
    json_decref(call);
    json_decref(tools);
}

/* A call naming a tool that was not offered is never a call, in any format: the markup stays in
 * the content byte for byte (issue 30: a model wrote get_weather_args next to get_weather). */
static void test_unknown_tool_names(void **state)
{
    (void)state;
    static const struct {
        enum ebb_tool_format f;
        const char *text;
    } cases[] = {
        {EBB_TOOL_HERMES, "<tool_call>\n{\"name\": \"get_weather_args\", \"arguments\": {\"city\": "
                          "\"Paris\"}}\n</tool_call>"},
        {EBB_TOOL_HERMES, "I will search.<tool_call>{\"name\":\"search\",\"arguments\":{}}"
                          "</tool_call>"},
        {EBB_TOOL_HERMES, "{\"name\": \"get_weather_args\", \"arguments\": {}}"},
        {EBB_TOOL_HERMES, "{\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": "
                          "\"search\", \"arguments\": \"{}\"}}]}"},
        {EBB_TOOL_LLAMA3, "{\"name\": \"get_weather_args\", \"parameters\": {\"city\": \"Rome\"}}"},
        {EBB_TOOL_LLAMA3, "<|python_tag|>{\"name\": \"brave_search\", \"parameters\": {\"query\": "
                          "\"x\"}}"},
        /* One unknown name among the calls of a Llama 3 answer: all of it is content. */
        {EBB_TOOL_LLAMA3, "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"nope\", "
                          "\"parameters\": {}}"},
        {EBB_TOOL_MISTRAL, "[TOOL_CALLS] [{\"name\": \"get_weather_args\", \"arguments\": {}}]"},
        {EBB_TOOL_MISTRAL, "[TOOL_CALLS]search[ARGS]{\"q\": \"x\"}"},
        {EBB_TOOL_MISTRAL, "[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]search[ARGS]{}"},
        {EBB_TOOL_MISTRAL, "[{\"name\": \"search\", \"arguments\": {}}]"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        expect_parse(cases[i].f, cases[i].text, cases[i].text, NULL, 0);
    /* Next to an unknown one, a known call in its own Hermes block is still a call. */
    const char *one[] = {"get_time {}"};
    expect_parse(EBB_TOOL_HERMES,
                 "<tool_call>{\"name\":\"get_time\"}</tool_call><tool_call>{\"name\":\"get_weather_"
                 "args\"}</tool_call>",
                 "<tool_call>{\"name\":\"get_weather_args\"}</tool_call>", one, 1);
    /* Streamed in small pieces, the same: no call event, the markup as content. */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *tools = weather_tools();
        struct ebb_tool_parser_opts o = {.format = cases[i].f, .tools = tools};
        struct ebb_tool_stream *s = NULL;
        assert_int_equal(ebb_tool_stream_new(&o, &s), EBB_OK);
        struct acc a;
        memset(&a, 0, sizeof(a));
        const char *t = cases[i].text;
        for (size_t k = 0, len = strlen(t); k < len; k += 3) {
            size_t n = len - k < 3 ? len - k : 3;
            assert_int_equal(ebb_tool_stream_feed(s, t + k, n, acc_ev, &a), EBB_OK);
        }
        assert_int_equal(ebb_tool_stream_finish(s, acc_ev, &a), EBB_OK);
        assert_int_equal(a.n_calls, 0);
        assert_string_equal(a.content, t);
        ebb_tool_stream_free(s);
        json_decref(tools);
    }
}

/* ---- the reasoning splitter ---------------------------------------------------------------- */

struct think_out {
    char r[512], c[512];
    size_t nr, nc;
};

static ebb_err think_cb(void *ud, bool reasoning, const char *text, size_t n)
{
    struct think_out *o = ud;
    char *dst = reasoning ? o->r : o->c;
    size_t *k = reasoning ? &o->nr : &o->nc;
    assert_true(*k + n < sizeof(o->r));
    memcpy(dst + *k, text, n);
    *k += n;
    dst[*k] = 0;
    return EBB_OK;
}

/* Feeds text in pieces of `step` bytes and checks the two outputs. */
static void think_case(const char *text, bool open, size_t step, const char *want_r,
                       const char *want_c)
{
    struct ebb_think_stream *s = NULL;
    struct think_out o = {{0}, {0}, 0, 0};
    assert_int_equal(ebb_think_stream_new(open, &s), EBB_OK);
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step)
        assert_int_equal(
            ebb_think_stream_feed(s, text + i, i + step > n ? n - i : step, think_cb, &o), EBB_OK);
    assert_int_equal(ebb_think_stream_finish(s, think_cb, &o), EBB_OK);
    assert_string_equal(o.r, want_r);
    assert_string_equal(o.c, want_c);
    assert_int_equal(ebb_think_stream_seen(s), *want_r || open || !strncmp(text, "<think>", 7));
    ebb_think_stream_free(s);
}

static void test_think_split(void **state)
{
    (void)state;
    for (size_t step = 1; step <= 64; step = step * 2 + 1) {
        /* Qwen3's shape: the block, a blank line, the answer. */
        think_case("<think>\nLet me add.\n2 + 2 = 4\n</think>\n\nIt is 4.", false, step,
                   "Let me add.\n2 + 2 = 4", "It is 4.");
        /* No block: all content, leading whitespace kept. */
        think_case("  Hello <think> is not a tag here", false, step, "",
                   "  Hello <think> is not a tag here");
        /* A prefix of the tag that turns out not to be it. */
        think_case("<thin", false, step, "", "<thin");
        think_case("<thing>x", false, step, "", "<thing>x");
        /* The prompt opened the block (DeepSeek R1, QwQ). */
        think_case("hmm </thi still\n</think>answer", true, step, "hmm </thi still", "answer");
        /* An unclosed block (the length limit): all reasoning. */
        think_case("<think>still thinking  \n", false, step, "still thinking", "");
        /* An empty block (enable_thinking false, or a model that skipped it). */
        think_case("<think>\n\n</think>\n\nDone", false, step, "", "Done");
        /* A second <think> later is content. */
        think_case("<think>a</think>b<think>c</think>", false, step, "a", "b<think>c</think>");
    }
    /* No output at all (an error before the first token): nothing was ever held. */
    think_case("", false, 1, "", "");
    think_case("", true, 1, "", "");
    char *r = NULL, *c = NULL;
    size_t nr = 0, nc = 0;
    const char *t = "<think>why</think>\nso";
    assert_int_equal(ebb_think_split(t, strlen(t), false, &r, &nr, &c, &nc), EBB_OK);
    assert_string_equal(r, "why");
    assert_string_equal(c, "so");
    assert_int_equal(nr, 3);
    assert_int_equal(nc, 2);
    free(r);
    free(c);
    assert_int_equal(ebb_think_split("plain", 5, false, &r, &nr, &c, &nc), EBB_OK);
    assert_null(r);
    assert_string_equal(c, "plain");
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_hermes),
        cmocka_unit_test(test_unknown_tool_names),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_generic_json),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_stream_pieces),
        cmocka_unit_test(test_stream_holds_marker),
        cmocka_unit_test(test_max_calls),
        cmocka_unit_test(test_request_fields),
        cmocka_unit_test(test_render_fallback),
        cmocka_unit_test(test_call_grammar),
        cmocka_unit_test(test_think_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
