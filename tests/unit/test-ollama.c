/* Ollama's request translation (api/ollama/request.c, names.c): model names, keep_alive,
 * messages, options, format and think into the chat-completions body, then through the chat
 * parser (api/openai/params.c) as the daemon runs it; refusals naming the Ollama field. No HTTP,
 * no model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "api/ollama/ollama-int.h"

static struct ebb__served api = {.id = "SmolLM2-135M-Instruct.Q4_1"};

/* Translates body; returns b (the caller frees it) and the flags. */
static json_t *map_ok(const char *body, bool generate, bool * compl, bool *load)
{
    json_t *o = json_loads(body, 0, NULL), *b = json_object();
    assert_non_null(o);
    struct ebb__perr e = {{0}, NULL, {0}};
    bool c = false, l = false;
    ebb_err rc = ebb__ollama_request(&api, o, generate, b, &c, &l, &e);
    if (rc)
        fail_msg("%s: %s", body, e.msg);
    if (compl )
        *compl = c;
    if (load)
        *load = l;
    json_decref(o);
    return b;
}

static void map_fails(const char *body, bool generate, const char *param, const char *words)
{
    json_t *o = json_loads(body, 0, NULL), *b = json_object();
    assert_non_null(o);
    struct ebb__perr e = {{0}, NULL, {0}};
    bool c, l;
    assert_int_equal(ebb__ollama_request(&api, o, generate, b, &c, &l, &e), EBB_EINVAL);
    assert_non_null(e.param);
    assert_string_equal(e.param, param);
    if (!strstr(e.msg, words))
        fail_msg("'%s' not in '%s'", words, e.msg);
    json_decref(o);
    json_decref(b);
}

static void test_names(void **state)
{
    (void)state;
    const char *id = "SmolLM2-135M-Instruct.Q4_1";
    static const char *const yes[] = {
        "SmolLM2-135M-Instruct.Q4_1",        "smollm2-135m-instruct.q4_1",
        "SmolLM2-135M-Instruct.Q4_1:latest", "SmolLM2-135M-Instruct.Q4_1:LATEST",
        "SmolLM2-135M-Instruct:Q4_1",        "smollm2-135m-instruct:q4_1",
        "SmolLM2-135M:Instruct.Q4_1"};
    static const char *const no[] = {"SmolLM2-135M-Instruct",
                                     "SmolLM2-135M-Instruct:latest",
                                     "SmolLM2-135M-Instruct:Q4",
                                     "SmolLM2-135M-Instruct:Q4_1:latest",
                                     "SmolLM2-135M-InstructXQ4_1",
                                     "SmolLM2-135M-Instruct.Q4_1:q8_0",
                                     "",
                                     ":latest",
                                     "llama3.2"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (!ebb__ollama_name_matches(id, yes[i]))
            fail_msg("'%s' should match", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        if (ebb__ollama_name_matches(id, no[i]))
            fail_msg("'%s' should not match", no[i]);
}

static void test_keep_alive(void **state)
{
    (void)state;
    static const char *const ok[] = {"null",      "0",       "-1",        "300",
                                     "1.5",       "\"5m\"",  "\"-1\"",    "\"0\"",
                                     "\"1h30m\"", "\"10s\"", "\"250ms\"", "\"-1m\""};
    static const char *const bad[] = {"\"soon\"", "\"5 m\"", "\"m\"", "\"5x\"",
                                      "\"\"",     "true",    "[]"};
    char msg[200];
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        json_t *v = json_loads(ok[i], JSON_DECODE_ANY, NULL);
        if (!ebb__ollama_keep_alive_ok(v, msg, sizeof(msg)))
            fail_msg("%s refused", ok[i]);
        json_decref(v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *v = json_loads(bad[i], JSON_DECODE_ANY, NULL);
        if (ebb__ollama_keep_alive_ok(v, msg, sizeof(msg)))
            fail_msg("%s accepted", bad[i]);
        json_decref(v);
    }
}

/* options map onto the chat fields and reach the sampler's parameters through params.c. */
static void test_options(void **state)
{
    (void)state;
    json_t *b = map_ok("{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
                       "\"hi\"}], \"stream\": false, \"options\": {\"temperature\": 0.5, "
                       "\"top_k\": 7, \"top_p\": 0.9, \"min_p\": 0.2, \"seed\": 42, \"stop\": "
                       "[\"x\"], \"repeat_penalty\": 1.2, \"repeat_last_n\": 32, "
                       "\"num_predict\": 12, \"num_ctx\": 2048, \"num_gpu\": 99, "
                       "\"mirostat\": 0, \"typical_p\": 1, \"tfs_z\": 1.0}}",
                       false, NULL, NULL);
    assert_int_equal(json_integer_value(json_object_get(b, "max_tokens")), 12);
    assert_null(json_object_get(b, "num_ctx"));
    assert_null(json_object_get(b, "num_gpu"));
    assert_true(json_is_false(json_object_get(b, "stream")));
    assert_string_equal(json_string_value(json_object_get(b, "model")), api.id);
    char *s = json_dumps(b, JSON_COMPACT);
    struct ebb__gen_req q;
    struct ebb__perr e;
    ebb_err rc = ebb__gen_req_parse(s, strlen(s), true, &q, &e);
    if (rc)
        fail_msg("%s: %s", s, e.msg);
    assert_int_equal(q.gp.max_tokens, 12);
    assert_true(q.gp.sampling.temperature == 0.5f);
    assert_int_equal(q.gp.sampling.top_k, 7);
    assert_true(q.gp.sampling.top_p == 0.9f);
    assert_true(q.gp.sampling.min_p == 0.2f);
    assert_true(q.gp.sampling.repeat_penalty == 1.2f);
    assert_int_equal(q.gp.sampling.repeat_last_n, 32);
    assert_int_equal(q.gp.sampling.seed, 42);
    assert_false(q.stream);
    ebb__gen_req_fini(&q);
    free(s);
    json_decref(b);
    /* num_predict -1 and -2: no limit given; stream defaults to true. */
    b = map_ok("{\"messages\": [], \"options\": {\"num_predict\": -1}}", false, NULL, NULL);
    assert_null(json_object_get(b, "max_tokens"));
    assert_true(json_is_true(json_object_get(b, "stream")));
    json_decref(b);
    map_fails("{\"options\": {\"mirostat\": 2}}", false, "options", "'mirostat'");
    map_fails("{\"options\": {\"typical_p\": 0.5}}", false, "options", "'typical_p'");
    map_fails("{\"options\": {\"tfs_z\": 0.9}}", false, "options", "'tfs_z'");
    map_fails("{\"options\": {\"shiny\": 1}}", false, "options", "'shiny'");
    map_fails("{\"options\": [1]}", false, "options", "object");
    map_fails("{\"stream\": \"yes\"}", false, "stream", "boolean");
    map_fails("{\"keep_alive\": \"soon\"}", false, "keep_alive", "duration");
}

/* A chat parse error names the Ollama field. */
static void test_rename(void **state)
{
    (void)state;
    struct ebb__perr e = {"'max_tokens' must be an integer of at least 1", "max_tokens", {0}};
    ebb__ollama_rename_param(&e);
    assert_string_equal(e.param, "options.num_predict");
    assert_string_equal(e.msg,
                        "options.num_predict: 'max_tokens' must be an integer of at least 1");
    struct ebb__perr f = {"bad", "messages", {0}};
    ebb__ollama_rename_param(&f);
    assert_string_equal(f.param, "messages");
    assert_string_equal(f.msg, "bad");
}

static void test_format_and_think(void **state)
{
    (void)state;
    json_t *b = map_ok("{\"messages\": [], \"format\": \"json\"}", false, NULL, NULL);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(b, "response_format"), "type")),
        "json_object");
    json_decref(b);
    b = map_ok("{\"messages\": [], \"format\": {\"type\": \"object\", \"required\": [\"a\"]}}",
               false, NULL, NULL);
    json_t *js = json_object_get(json_object_get(b, "response_format"), "json_schema");
    assert_string_equal(json_string_value(json_object_get(json_object_get(js, "schema"), "type")),
                        "object");
    json_decref(b);
    b = map_ok("{\"messages\": [], \"format\": \"\"}", false, NULL, NULL);
    assert_null(json_object_get(b, "response_format"));
    json_decref(b);
    map_fails("{\"format\": \"yaml\"}", false, "format", "JSON schema");
    /* think: on asks for thinking; off only where the template has the switch. */
    b = map_ok("{\"messages\": [], \"think\": true}", false, NULL, NULL);
    assert_string_equal(json_string_value(json_object_get(b, "reasoning_effort")), "medium");
    json_decref(b);
    b = map_ok("{\"messages\": [], \"think\": false}", false, NULL, NULL);
    assert_null(json_object_get(b, "reasoning_effort"));
    json_decref(b);
    api.tmpl.has_thinking = true;
    b = map_ok("{\"messages\": [], \"think\": false}", false, NULL, NULL);
    assert_string_equal(json_string_value(json_object_get(b, "reasoning_effort")), "none");
    json_decref(b);
    b = map_ok("{\"messages\": [], \"think\": \"high\"}", false, NULL, NULL);
    assert_string_equal(json_string_value(json_object_get(b, "reasoning_effort")), "high");
    json_decref(b);
    api.tmpl.has_thinking = false;
    map_fails("{\"think\": \"max\"}", false, "think", "low");
}

static void test_messages(void **state)
{
    (void)state;
    bool load = true;
    json_t *b =
        map_ok("{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}, {\"role\": "
               "\"assistant\", \"thinking\": \"look it up\", \"tool_calls\": [{\"function\": "
               "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]}, {\"role\": "
               "\"tool\", \"tool_name\": \"get_weather\", \"content\": \"sunny\"}], \"tools\": "
               "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}]}",
               false, NULL, &load);
    assert_false(load);
    json_t *ms = json_object_get(b, "messages");
    assert_int_equal(json_array_size(ms), 3);
    json_t *as = json_array_get(ms, 1),
           *call = json_array_get(json_object_get(as, "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(as, "content")), "");
    assert_string_equal(json_string_value(json_object_get(as, "reasoning_content")), "look it up");
    assert_string_equal(json_string_value(json_object_get(call, "type")), "function");
    assert_string_equal(json_string_value(json_object_get(call, "id")), "call_1_0");
    json_t *args = json_object_get(json_object_get(call, "function"), "arguments");
    assert_string_equal(json_string_value(json_object_get(args, "city")), "Paris");
    assert_string_equal(json_string_value(json_object_get(json_array_get(ms, 2), "name")),
                        "get_weather");
    assert_int_equal(json_array_size(json_object_get(b, "tools")), 1);
    json_decref(b);
    b = map_ok("{\"messages\": []}", false, NULL, &load);
    assert_true(load);
    json_decref(b);
    map_fails("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"images\": [\"aGk=\"]}]}",
              false, "messages", "images are not supported");
    map_fails("{\"messages\": [{\"role\": \"user\", \"content\": [\"hi\"]}]}", false, "messages",
              "string");
    map_fails("{\"messages\": {}}", false, "messages", "array");
}

static void test_generate(void **state)
{
    (void)state;
    bool compl = true, load = true;
    json_t *b = map_ok("{\"prompt\": \"hi\", \"system\": \"be brief\"}", true, &compl, &load);
    assert_false(compl );
    assert_false(load);
    json_t *ms = json_object_get(b, "messages");
    assert_int_equal(json_array_size(ms), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ms, 0), "role")),
                        "system");
    assert_string_equal(json_string_value(json_object_get(json_array_get(ms, 1), "content")), "hi");
    json_decref(b);
    b = map_ok("{\"prompt\": \"The sky\", \"raw\": true}", true, &compl, &load);
    assert_true(compl );
    assert_string_equal(json_string_value(json_object_get(b, "prompt")), "The sky");
    assert_null(json_object_get(b, "messages"));
    json_decref(b);
    b = map_ok("{\"prompt\": \"def f(\", \"suffix\": \"return x\"}", true, &compl, &load);
    assert_true(compl );
    assert_string_equal(json_string_value(json_object_get(b, "suffix")), "return x");
    json_decref(b);
    b = map_ok("{\"model\": \"m\", \"template\": \"\", \"context\": []}", true, &compl, &load);
    assert_true(load);
    json_decref(b);
    map_fails("{\"prompt\": \"hi\", \"raw\": true, \"system\": \"s\"}", true, "system", "raw");
    map_fails("{\"prompt\": \"hi\", \"raw\": true, \"think\": true}", true, "think", "raw");
    map_fails("{\"prompt\": \"hi\", \"template\": \"{{ .Prompt }}\"}", true, "template",
              "not supported");
    map_fails("{\"prompt\": \"hi\", \"context\": [1, 2]}", true, "context", "not supported");
    map_fails("{\"prompt\": \"hi\", \"images\": [\"aGk=\"]}", true, "images", "not supported");
    map_fails("{\"prompt\": 5}", true, "prompt", "strings");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_rename),
        cmocka_unit_test(test_format_and_think),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_generate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
