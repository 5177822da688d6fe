/* The Responses API's request translation (api/responses/request.c): input items into the chat
 * conversation, tools and text.format into their chat shapes, refusals naming the field, and
 * previous_response_id through the store (store.c), including its LRU bound. No HTTP, no model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "api/responses/responses-int.h"

static json_t *parse_ok(struct ebb_api *a, const char *body, struct ebb__resp_req *q)
{
    struct ebb__perr e;
    ebb_err rc = ebb__resp_req_parse(a, body, strlen(body), q, &e);
    if (rc)
        fail_msg("%s: %s", body, e.msg);
    return json_object_get(q->chat, "messages");
}

static void parse_fails(struct ebb_api *a, const char *body, ebb_err want, const char *param,
                        const char *words)
{
    struct ebb__resp_req q;
    struct ebb__perr e;
    assert_int_equal(ebb__resp_req_parse(a, body, strlen(body), &q, &e), want);
    if (param)
        assert_string_equal(e.param, param);
    else
        assert_null(e.param);
    if (!strstr(e.msg, words))
        fail_msg("'%s' not in '%s'", words, e.msg);
    ebb__resp_req_fini(&q);
}

static const char *field(json_t *msgs, size_t i, const char *key)
{
    return json_string_value(json_object_get(json_array_get(msgs, i), key));
}

static void test_items(void **state)
{
    (void)state;
    struct ebb_api a = {0};
    struct ebb__resp_req q;
    /* A turn of text then calls is one assistant message; the reasoning before it is its
     * reasoning_content; outputs are tool messages; instructions come first. */
    json_t *m = parse_ok(
        &a,
        "{\"instructions\": \"Be brief.\", \"input\": ["
        "{\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"Hi \"},"
        " {\"type\": \"input_text\", \"text\": \"there\"}]},"
        "{\"type\": \"reasoning\", \"id\": \"rs_1\", \"summary\": [],"
        " \"content\": [{\"type\": \"reasoning_text\", \"text\": \"hmm\"}]},"
        "{\"type\": \"message\", \"role\": \"assistant\","
        " \"content\": [{\"type\": \"output_text\", \"text\": \"Let me look.\"}]},"
        "{\"type\": \"function_call\", \"call_id\": \"c1\", \"name\": \"f\", \"arguments\": "
        "\"{\\\"x\\\":1}\"},"
        "{\"type\": \"function_call\", \"call_id\": \"c2\", \"name\": \"g\", \"arguments\": "
        "\"{}\"},"
        "{\"type\": \"function_call_output\", \"call_id\": \"c1\", \"output\": \"one\"},"
        "{\"type\": \"function_call_output\", \"call_id\": \"c2\", \"output\": \"two\"},"
        "{\"role\": \"developer\", \"content\": \"Now answer.\"}],"
        "\"max_output_tokens\": 9, \"stream\": true, \"store\": false, \"temperature\": 0.5}",
        &q);
    assert_int_equal(json_array_size(m), 6);
    assert_string_equal(field(m, 0, "role"), "system");
    assert_string_equal(field(m, 0, "content"), "Be brief.");
    assert_string_equal(field(m, 1, "content"), "Hi there");
    assert_string_equal(field(m, 2, "role"), "assistant");
    assert_string_equal(field(m, 2, "content"), "Let me look.");
    assert_string_equal(field(m, 2, "reasoning_content"), "hmm");
    json_t *calls = json_object_get(json_array_get(m, 2), "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    json_t *c1 = json_array_get(calls, 0);
    assert_string_equal(json_string_value(json_object_get(c1, "id")), "c1");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(c1, "function"), "arguments")),
        "{\"x\":1}");
    assert_string_equal(field(m, 3, "role"), "tool");
    assert_string_equal(field(m, 3, "tool_call_id"), "c1");
    assert_string_equal(field(m, 4, "content"), "two");
    assert_string_equal(field(m, 5, "role"), "system");
    assert_true(q.stream);
    assert_false(q.store);
    assert_int_equal(json_integer_value(json_object_get(q.chat, "max_completion_tokens")), 9);
    assert_true(json_is_true(json_object_get(q.chat, "stream")));
    /* The history leaves the instructions out. */
    assert_int_equal(json_array_size(q.history), 5);
    ebb__resp_req_fini(&q);

    /* Tools, tool_choice and text.format in their chat shapes. */
    parse_ok(&a,
             "{\"input\": \"x\", \"tools\": [{\"type\": \"function\", \"name\": \"f\","
             " \"parameters\": {\"type\": \"object\"}, \"strict\": true}],"
             " \"tool_choice\": {\"type\": \"function\", \"name\": \"f\"},"
             " \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"s\","
             " \"schema\": {\"type\": \"object\"}}}, \"reasoning\": {\"effort\": \"low\"}}",
             &q);
    json_t *t = json_array_get(json_object_get(q.chat, "tools"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(t, "function"), "name")),
                        "f");
    assert_true(json_is_true(json_object_get(json_object_get(t, "function"), "strict")));
    json_t *tc = json_object_get(q.chat, "tool_choice");
    assert_string_equal(json_string_value(json_object_get(json_object_get(tc, "function"), "name")),
                        "f");
    json_t *rf = json_object_get(q.chat, "response_format");
    assert_string_equal(json_string_value(json_object_get(rf, "type")), "json_schema");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(rf, "json_schema"), "name")), "s");
    assert_string_equal(json_string_value(json_object_get(q.chat, "reasoning_effort")), "low");
    ebb__resp_req_fini(&q);
}

static void test_refusals(void **state)
{
    (void)state;
    struct ebb_api a = {0};
    parse_fails(&a, "{\"input\": \"x\", \"tools\": [{\"type\": \"web_search_preview\"}]}",
                EBB_EINVAL, "tools", "web_search_preview");
    parse_fails(&a, "{\"input\": []}", EBB_EINVAL, "input", "empty");
    parse_fails(&a, "{\"input\": 3}", EBB_EINVAL, "input", "string or an array");
    parse_fails(&a, "{\"input\": [{\"type\": \"function_call\", \"name\": \"f\"}]}", EBB_EINVAL,
                "input", "call_id");
    parse_fails(&a, "{\"input\": [{\"type\": \"computer_call\"}]}", EBB_EINVAL, "input",
                "computer_call");
    parse_fails(&a, "{\"input\": [{\"role\": \"tool\", \"content\": \"x\"}]}", EBB_EINVAL, "input",
                "role");
    parse_fails(&a, "{\"input\": \"x\", \"background\": true}", EBB_EINVAL, "background", "not");
    parse_fails(&a, "{\"input\": \"x\", \"prompt\": {\"id\": \"p\"}}", EBB_EINVAL, "prompt", "not");
    parse_fails(&a, "{\"input\": \"x\", \"text\": {\"verbosity\": \"low\"}}", EBB_EINVAL,
                "text.verbosity", "verbosity");
    parse_fails(&a, "{\"input\": \"x\", \"reasoning\": {\"effort\": \"max\"}}", EBB_EINVAL,
                "reasoning.effort", "effort");
    parse_fails(&a, "{\"input\": \"x\", \"previous_response_id\": \"resp_x\"}", EBB_ENOTFOUND,
                "previous_response_id", "resp_x");
    parse_fails(&a, "[1]", EBB_EINVAL, NULL, "object");
    parse_fails(&a, "{\"input\": ", EBB_EINVAL, NULL, "JSON");
    if (a.resp_store_free)
        a.resp_store_free(a.resp_store);
}

/* Stores the conversation of q answered by text under id, as output.c does. */
static void store_turn(struct ebb_api *a, struct ebb__resp_req *q, const char *id, const char *text)
{
    json_t *hist = json_deep_copy(q->history);
    json_array_append_new(hist, json_pack("{ssss}", "role", "assistant", "content", text));
    json_t *resp = json_pack("{ss}", "id", id);
    ebb__resp_store_put(ebb__resp_store_of(a), a->resp_store_cap, id, resp, hist);
    json_decref(resp);
    json_decref(hist);
}

static void test_previous_and_store(void **state)
{
    (void)state;
    struct ebb_api a = {.resp_store_cap = 2};
    struct ebb__resp_req q;
    parse_ok(&a, "{\"input\": \"one\"}", &q);
    store_turn(&a, &q, "r1", "ONE");
    ebb__resp_req_fini(&q);
    /* The next turn starts with the stored conversation; instructions are not carried. */
    json_t *m = parse_ok(&a,
                         "{\"previous_response_id\": \"r1\", \"instructions\": \"I\","
                         " \"input\": [{\"type\": \"function_call\", \"call_id\": \"c\","
                         " \"name\": \"f\", \"arguments\": \"{}\"}]}",
                         &q);
    assert_int_equal(json_array_size(m), 4);
    assert_string_equal(field(m, 0, "content"), "I");
    assert_string_equal(field(m, 1, "content"), "one");
    assert_string_equal(field(m, 2, "content"), "ONE");
    /* A call after the stored answer opens a new assistant message: the stored one, shared with
     * the store, is never changed. */
    assert_null(json_object_get(json_array_get(m, 2), "tool_calls"));
    assert_non_null(json_object_get(json_array_get(m, 3), "tool_calls"));
    store_turn(&a, &q, "r2", "TWO");
    ebb__resp_req_fini(&q);
    json_t *resp, *hist;
    assert_true(ebb__resp_store_get(a.resp_store, "r1", &resp, &hist));
    assert_int_equal(json_array_size(hist), 2);
    assert_null(json_object_get(json_array_get(hist, 1), "tool_calls"));
    /* The LRU bound: r1 was read last, so a third entry drops r2. */
    parse_ok(&a, "{\"input\": \"three\"}", &q);
    store_turn(&a, &q, "r3", "THREE");
    ebb__resp_req_fini(&q);
    assert_true(ebb__resp_store_get(a.resp_store, "r1", &resp, &hist));
    assert_false(ebb__resp_store_get(a.resp_store, "r2", &resp, &hist));
    assert_true(ebb__resp_store_get(a.resp_store, "r3", &resp, &hist));
    assert_true(ebb__resp_store_delete(a.resp_store, "r3"));
    assert_false(ebb__resp_store_delete(a.resp_store, "r3"));
    a.resp_store_free(a.resp_store);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_items),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_previous_and_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
