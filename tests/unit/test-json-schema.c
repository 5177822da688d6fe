/* JSON schema -> GBNF: every supported keyword, checked by compiling the output with the grammar
 * engine and running JSON texts through it (valid ones accepted, invalid ones rejected); every
 * unsupported keyword refused with its name and JSON path; composition of several schemas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/schema/json-schema.h"
#include "grammar/grammar.h"

static struct ebb_grammar *convert(const char *schema_text)
{
    json_error_t je;
    json_t *s = json_loads(schema_text, 0, &je);
    if (!s)
        fail_msg("bad test schema %s: %s", schema_text, je.text);
    struct ebb_gbnf_builder b;
    ebb_gbnf_builder_init(&b);
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_json_schema_to_gbnf(s, "root", &b, &d);
    if (rc)
        fail_msg("conversion of %s failed: %s", schema_text, d.msg);
    struct ebb_grammar *g = NULL;
    rc = ebb_grammar_compile(b.text, b.len, "root", &g, &d);
    if (rc)
        fail_msg("the GBNF of %s does not compile: %s\n%s", schema_text, d.msg, b.text);
    ebb_gbnf_builder_fini(&b);
    json_decref(s);
    return g;
}

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

static void check(const char *schema, const char *const *yes, const char *const *no)
{
    struct ebb_grammar *g = convert(schema);
    for (; yes && *yes; yes++) {
        if (!accepts(g, *yes))
            fail_msg("%s should accept %s", schema, *yes);
        json_t *parsed = json_loads(*yes, JSON_DECODE_ANY, NULL);
        if (!parsed)
            fail_msg("test bug: %s is not JSON", *yes);
        json_decref(parsed);
    }
    for (; no && *no; no++) {
        if (accepts(g, *no))
            fail_msg("%s should reject %s", schema, *no);
    }
    ebb_grammar_free(g);
}

#define YES(...) ((const char *[]){__VA_ARGS__, NULL})
#define NO(...) ((const char *[]){__VA_ARGS__, NULL})

static void test_scalars(void **state)
{
    (void)state;
    check("{\"type\":\"string\"}", YES("\"\"", "\"a b\"", "\"q\\\"\\n\\u00e9\"", "\"é\""),
          NO("a", "\"a", "\"\\q\"", "\"a\nb\"", "1"));
    check("{\"type\":\"integer\"}", YES("0", "-12", "123456"), NO("01", "1.5", "\"1\"", "-"));
    check("{\"type\":\"number\"}", YES("0", "-1.25", "3e10", "2.5E-3"), NO("1.", ".5", "+1"));
    check("{\"type\":\"boolean\"}", YES("true", "false"), NO("True", "1"));
    check("{\"type\":\"null\"}", YES("null"), NO("nil", "\"null\""));
    check("{\"type\":[\"string\",\"null\"]}", YES("\"x\"", "null"), NO("1"));
    /* bounds on numbers are documented as ignored */
    check("{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}", YES("5", "50"), NO("x"));
}

static void test_enum_const(void **state)
{
    (void)state;
    check("{\"enum\":[\"red\",\"green\",1,null,{\"a\":[1]}]}",
          YES("\"red\"", "\"green\"", "1", "null", "{\"a\":[1]}"), NO("\"blue\"", "2", "\"Red\""));
    check("{\"const\":\"fixed \\\"q\\\"\"}", YES("\"fixed \\\"q\\\"\""), NO("\"fixed\""));
}

static void test_strings(void **state)
{
    (void)state;
    check("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
          YES("\"ab\"", "\"abc\"", "\"\\n\\t\""), NO("\"a\"", "\"abcd\""));
    check("{\"type\":\"string\",\"format\":\"date\"}", YES("\"2024-02-29\""),
          NO("\"2024-13-01\"", "\"24-01-01\""));
    check("{\"type\":\"string\",\"format\":\"time\"}",
          YES("\"12:30:05Z\"", "\"23:59:59.123+02:00\""), NO("\"24:00:00Z\"", "\"12:30\""));
    check("{\"type\":\"string\",\"format\":\"date-time\"}", YES("\"2024-01-02T03:04:05Z\""),
          NO("\"2024-01-02 03:04:05Z\""));
    check("{\"type\":\"string\",\"format\":\"uuid\"}",
          YES("\"123e4567-e89b-12d3-a456-426614174000\""), NO("\"123e4567\""));
    check("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3,4}$\"}",
          YES("\"AB-123\"", "\"XY-1234\""),
          NO("\"ab-123\"", "\"AB-12\"", "\"AB-12345\"", "\" AB-123\""));
    check("{\"type\":\"string\",\"pattern\":\"^(foo|ba+r)?x\\\\.y$\"}",
          YES("\"x.y\"", "\"foox.y\"", "\"baaarx.y\""), NO("\"fox.y\"", "\"xzy\""));
    /* unanchored: the match may sit anywhere */
    check("{\"type\":\"string\",\"pattern\":\"ab\"}", YES("\"ab\"", "\"xxabyy\""), NO("\"a b\""));
    check("{\"type\":\"string\",\"pattern\":\"^a\\\"b[^c]$\"}", YES("\"a\\\"bd\""),
          NO("\"a\\\"bc\"", "\"a\\\"b\\\"\""));
}

static void test_objects(void **state)
{
    (void)state;
    const char *s = "{\"type\":\"object\",\"properties\":{"
                    "\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
                    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
                    "\"required\":[\"name\",\"tags\"],\"additionalProperties\":false}";
    check(s,
          YES("{\"name\":\"a\",\"tags\":[]}", "{\"name\":\"a\",\"age\":3,\"tags\":[\"x\"]}",
              "{ \"name\" : \"a\" ,\n  \"tags\" : [ \"x\" , \"y\" ] }"),
          NO("{}", "{\"name\":\"a\"}", "{\"tags\":[],\"name\":\"a\"}",
             "{\"name\":\"a\",\"tags\":[],\"x\":1}", "{\"name\":\"a\",,\"tags\":[]}",
             "{\"name\":\"a\",\"tags\":[]"));
    /* all optional */
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
          "\"integer\"}}}",
          YES("{}", "{\"a\":1}", "{\"b\":2}", "{\"a\":1,\"b\":2}"),
          NO("{,}", "{\"a\":1,}", "{\"c\":1}"));
    /* extra properties allowed, typed */
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
          "\"additionalProperties\":{\"type\":\"boolean\"}}",
          YES("{\"a\":1}", "{\"a\":1,\"zz\":true,\"y\":false}"), NO("{\"a\":1,\"zz\":1}"));
    /* json_object: any object */
    check("{\"type\":\"object\"}", YES("{}", "{\"x\":[1,{\"y\":null}],\"z\":\"w\"}"),
          NO("[]", "1", "{\"x\"}"));
    /* whitespace is bounded */
    check("{\"type\":\"object\"}", YES("{                }"),
          NO("{                                  }"));
}

static void test_arrays(void **state)
{
    (void)state;
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
          YES("[1]", "[1,2,3]", "[ 1 , 2 ]"), NO("[]", "[1,2,3,4]", "[1,]", "[\"a\"]"));
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2}",
          YES("[1,2]", "[1,2,3,4,5,6]"), NO("[1]"));
    check("{\"type\":\"array\",\"maxItems\":0}", YES("[]"), NO("[1]"));
    check("{\"type\":\"array\"}", YES("[]", "[1,\"a\",null,[{}]]"), NO("[1 2]"));
}

static void test_refs_and_combinators(void **state)
{
    (void)state;
    const char *tree = "{\"$ref\":\"#/$defs/node\",\"$defs\":{\"node\":{\"type\":\"object\","
                       "\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
                       "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}}}";
    check(tree, YES("{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}"),
          NO("{\"v\":1,\"kids\":[{}]}"));
    check("{\"definitions\":{\"a\":{\"const\":1}},\"type\":\"object\",\"properties\":{\"x\":{"
          "\"$ref\":\"#/definitions/a\"}},\"required\":[\"x\"]}",
          YES("{\"x\":1}"), NO("{\"x\":2}"));
    check("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}",
          YES("1", "\"a\""), NO("\"ab\"", "null"));
    check("{\"oneOf\":[{\"type\":\"boolean\"},{\"type\":\"null\"}]}", YES("true", "null"), NO("1"));
    check("{\"allOf\":[{\"type\":\"integer\"}]}", YES("1"), NO("\"1\""));
    check("{}", YES("1", "{\"a\":[]}", "\"s\""), NO("{a}"));
    check("{\"description\":\"anything\",\"title\":\"t\",\"$schema\":\"x\"}", YES("1"), NO("x"));
    /* OpenAPI's nullable, pydantic's discriminator hint */
    check("{\"type\":\"integer\",\"nullable\":true}", YES("1", "null"), NO("\"1\""));
    check("{\"type\":\"integer\",\"nullable\":false}", YES("1"), NO("null"));
    check("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"}},"
          "\"required\":[\"k\"]},{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"b\"},"
          "\"n\":{\"type\":\"integer\"}},\"required\":[\"k\",\"n\"]}],"
          "\"discriminator\":{\"propertyName\":\"k\"}}",
          YES("{\"k\":\"a\"}", "{\"k\":\"b\",\"n\":1}"), NO("{\"k\":\"b\"}", "{\"k\":\"c\"}"));
}

static void expect_fail_at(const char *schema_text, ebb_err want, const char *needle,
                           const char *where)
{
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, NULL);
    assert_non_null(s);
    struct ebb_gbnf_builder b;
    ebb_gbnf_builder_init(&b);
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_json_schema_to_gbnf(s, "root", &b, &d);
    if (rc != want || !strstr(d.msg, needle) || strcmp(b.err_path, where))
        fail_msg("%s: expected %d with '%s' at '%s', got %d: %s at '%s'", schema_text, want, needle,
                 where, rc, d.msg, b.err_path);
    ebb_gbnf_builder_fini(&b);
    json_decref(s);
}

static void expect_fail(const char *schema_text, ebb_err want, const char *needle)
{
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, NULL);
    assert_non_null(s);
    struct ebb_gbnf_builder b;
    ebb_gbnf_builder_init(&b);
    struct ebb_diag d = {{0}};
    ebb_err rc = ebb_json_schema_to_gbnf(s, "root", &b, &d);
    if (rc != want || !strstr(d.msg, needle))
        fail_msg("%s: expected %d with '%s', got %d: %s", schema_text, want, needle, rc, d.msg);
    ebb_gbnf_builder_fini(&b);
    json_decref(s);
}

static void test_unsupported(void **state)
{
    (void)state;
    expect_fail("{\"type\":\"array\",\"uniqueItems\":true}", EBB_EUNSUPPORTED,
                "'uniqueItems' is not supported at $");
    expect_fail("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\","
                "\"patternProperties\":{}}}}",
                EBB_EUNSUPPORTED, "'patternProperties' is not supported at $.properties.a");
    expect_fail("{\"anyOf\":[{\"type\":\"string\"},{\"not\":{}}]}", EBB_EUNSUPPORTED,
                "'not' is not supported at $.anyOf[1]");
    expect_fail("{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"email\"}}",
                EBB_EUNSUPPORTED, "'format': 'email' is not supported at $.items");
    expect_fail("{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", EBB_EUNSUPPORTED,
                "'pattern': lookaround");
    expect_fail("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", EBB_EUNSUPPORTED,
                "backreferences");
    expect_fail("{\"allOf\":[{},{}]}", EBB_EUNSUPPORTED, "'allOf'");
    expect_fail("{\"type\":\"string\",\"minLength\":100000}", EBB_EUNSUPPORTED, "'minLength'");
    expect_fail("{\"$ref\":\"http://example.com/s.json\"}", EBB_EUNSUPPORTED, "'$ref'");
    /* malformed */
    expect_fail("{\"type\":\"strin\"}", EBB_EINVAL, "unknown type 'strin' at $");
    expect_fail("{\"$ref\":\"#/$defs/missing\"}", EBB_EINVAL, "does not resolve");
    expect_fail("{\"type\":\"array\",\"minItems\":-1}", EBB_EINVAL, "'minItems'");
    expect_fail("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", EBB_EINVAL, "below");
    expect_fail("{\"enum\":[]}", EBB_EINVAL, "'enum'");
    expect_fail("[1]", EBB_EINVAL, "a schema must be an object");
    expect_fail("{\"type\":\"object\",\"required\":\"a\",\"properties\":{}}", EBB_EINVAL,
                "malformed");
}

/* The path of a failure in the client's terms (issue 31): the keyword at fault under the path
 * of its schema, and the documented bounds (minItems above 256 refused, maxItems above 256
 * unbounded). */
static void test_error_paths_and_bounds(void **state)
{
    (void)state;
    expect_fail_at("{\"type\":\"array\",\"minItems\":257}", EBB_EUNSUPPORTED,
                   "'minItems' above 256", ".minItems");
    expect_fail_at("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"array\","
                   "\"minItems\":300}}}",
                   EBB_EUNSUPPORTED, "'minItems'", ".properties.x.minItems");
    expect_fail_at("{\"type\":\"string\",\"minLength\":257}", EBB_EUNSUPPORTED, "'minLength'",
                   ".minLength");
    expect_fail_at("{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"uniqueItems\":true}]}",
                   EBB_EUNSUPPORTED, "'uniqueItems'", ".anyOf[1].uniqueItems");
    expect_fail_at("{\"type\":\"string\",\"pattern\":\"[z-a]\"}", EBB_EUNSUPPORTED,
                   "the range z-a in a class is out of order", ".pattern");
    expect_fail_at("{\"type\":\"strin\"}", EBB_EINVAL, "unknown type", ".type");
    expect_fail_at("[1]", EBB_EINVAL, "a schema must be an object", "");
    ebb_grammar_free(convert("{\"type\":\"array\",\"maxItems\":257}"));
    ebb_grammar_free(convert("{\"type\":\"array\",\"minItems\":256}"));
}

/* Two schemas under their own names plus the caller's root: the shared rules are written once
 * and the result compiles. */
static void test_composition(void **state)
{
    (void)state;
    json_t *a = json_loads("{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}},"
                           "\"required\":[\"q\"]}",
                           0, NULL);
    json_t *c = json_loads("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
                           "\"required\":[\"n\"]}",
                           0, NULL);
    struct ebb_gbnf_builder b;
    ebb_gbnf_builder_init(&b);
    struct ebb_diag d = {{0}};
    assert_int_equal(ebb_json_schema_to_gbnf(a, "search-args", &b, &d), EBB_OK);
    assert_int_equal(ebb_json_schema_to_gbnf(c, "count-args", &b, &d), EBB_OK);
    ebb_gbnf_printf(&b, "root ::= \"<call>\" ( \"search \" search-args | \"count \" count-args ) "
                        "\"</call>\"\n");
    assert_false(b.oom);
    const char *first = strstr(b.text, "json-string ::=");
    assert_non_null(first);
    assert_null(strstr(first + 1, "json-string ::="));
    struct ebb_grammar *g = NULL;
    if (ebb_grammar_compile(b.text, b.len, "root", &g, &d))
        fail_msg("%s\n%s", d.msg, b.text);
    assert_true(accepts(g, "<call>search {\"q\":\"x\"}</call>"));
    assert_true(accepts(g, "<call>count {\"n\": 3}</call>"));
    assert_false(accepts(g, "<call>count {\"q\":\"x\"}</call>"));
    ebb_grammar_free(g);
    ebb_gbnf_builder_fini(&b);
    json_decref(a);
    json_decref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),     cmocka_unit_test(test_enum_const),
        cmocka_unit_test(test_strings),     cmocka_unit_test(test_objects),
        cmocka_unit_test(test_arrays),      cmocka_unit_test(test_refs_and_combinators),
        cmocka_unit_test(test_unsupported), cmocka_unit_test(test_error_paths_and_bounds),
        cmocka_unit_test(test_composition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
