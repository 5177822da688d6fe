/* The Jinja interpreter construct by construct against jinja2's output (constructs.json, made
 * by tests/data/chat-templates/gen-conformance.py), its error messages (line and construct
 * named), its limits on output, work, recursion and memory, and truncated or hostile input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/jinja/jinja.h"

static struct tm fixed_now(void)
{
    struct tm now = {.tm_year = 125, .tm_mon = 0, .tm_mday = 15, .tm_hour = 10, .tm_min = 30};
    timegm(&now);
    return now;
}

/* Renders src with vars; returns the code, the text in *out (caller frees) or the message. */
static ebb_err render(const char *src, json_t *vars, const struct ebb_jinja_limits *lim, char **out,
                      struct ebb_diag *d)
{
    struct ebb_jinja *t = NULL;
    *out = NULL;
    ebb_err rc = ebb_jinja_parse(src, strlen(src), &t, d);
    if (rc)
        return rc;
    struct tm now = fixed_now();
    size_t n;
    rc = ebb_jinja_render(t, vars, &now, lim, out, &n, d);
    ebb_jinja_free(t);
    return rc;
}

static void test_constructs(void **state)
{
    (void)state;
    json_error_t je;
    json_t *doc = json_load_file(EBB_TEST_DATA "/chat-templates/constructs.json", 0, &je);
    if (!doc)
        fail_msg("cannot read constructs.json: %s", je.text);
    json_t *vars = json_deep_copy(json_object_get(doc, "vars"));
    json_object_set(vars, "bos_token", json_object_get(doc, "bos_token"));
    json_object_set(vars, "eos_token", json_object_get(doc, "eos_token"));
    json_t *cases = json_object_get(doc, "cases");
    size_t bad = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *src = json_string_value(json_object_get(c, "template"));
        json_t *want = json_object_get(c, "output");
        char *out;
        struct ebb_diag d = {{0}};
        ebb_err rc = render(src, vars, NULL, &out, &d);
        if (!want) {
            if (!rc) {
                printf("case %zu: renders '%s', but jinja2 raised %s\n  template: %s\n", i, out,
                       json_string_value(json_object_get(c, "error")), src);
                bad++;
            }
        } else if (rc) {
            printf("case %zu: %s\n  template: %s\n", i, d.msg, src);
            bad++;
        } else if (strcmp(out, json_string_value(want))) {
            printf("case %zu:\n  template: %s\n  want: %s\n  got:  %s\n", i, src,
                   json_string_value(want), out);
            bad++;
        }
        free(out);
    }
    json_decref(vars);
    json_decref(doc);
    assert_int_equal(bad, 0);
}

/* Expects src to fail (at load or render) with rc and a message containing each needle. */
static void expect_fail(const char *src, ebb_err rc_want, const struct ebb_jinja_limits *lim,
                        const char *n1, const char *n2)
{
    char *out;
    struct ebb_diag d = {{0}};
    json_t *vars = json_pack("{s:[{s:s}]}", "messages", "role", "user");
    ebb_err rc = render(src, vars, lim, &out, &d);
    json_decref(vars);
    if (rc != rc_want)
        fail_msg("%s: got %s (%s), want %s", src, ebb_err_name(rc), d.msg, ebb_err_name(rc_want));
    if ((n1 && !strstr(d.msg, n1)) || (n2 && !strstr(d.msg, n2)))
        fail_msg("%s: message '%s' lacks '%s' / '%s'", src, d.msg, n1 ? n1 : "", n2 ? n2 : "");
    free(out);
}

static void test_errors_name_line_and_construct(void **state)
{
    (void)state;
    expect_fail("a\n{% if x %}\n{% include 'x' %}{% endif %}", EBB_EUNSUPPORTED, NULL, "line 3",
                "'include'");
    expect_fail("{{ x | nosuchfilter }}", EBB_EUNSUPPORTED, NULL, "line 1",
                "unknown filter 'nosuchfilter'");
    expect_fail("\n\n{{ x is nosuchtest }}", EBB_EUNSUPPORTED, NULL, "line 3",
                "unknown test 'nosuchtest'");
    expect_fail("{% for m in messages %}\nx", EBB_EINVAL, NULL, "line 1", "'for' is never closed");
    expect_fail("{% if true %}{% endfor %}", EBB_EINVAL, NULL, "line 1", "'endfor'");
    expect_fail("{{ 'unterminated }}", EBB_EINVAL, NULL, "line 1", "unterminated string");
    expect_fail("{{ 1 + }}", EBB_EINVAL, NULL, "line 1", "unexpected");
    expect_fail("{% for x in y recursive %}{% endfor %}", EBB_EUNSUPPORTED, NULL, "line 1",
                "recursive");
    expect_fail("{{ x | from_json }}", EBB_EUNSUPPORTED, NULL, "line 1", "from_json");
    /* An unknown filter in an if branch fails only when it runs, as in jinja2. */
    expect_fail("{% if true %}\n{{ x | from_json }}{% endif %}", EBB_EUNSUPPORTED, NULL, "line 2",
                "from_json");
    expect_fail("line\n{{ raise_exception('Only user and assistant roles') }}", EBB_EINVAL, NULL,
                "line 2", "Only user and assistant roles");
    expect_fail("{{ messages[0].role.nope.deeper }}", EBB_EINVAL, NULL, "line 1", "nope");
    expect_fail("{{ messages.append(1) }}", EBB_EINVAL, NULL, "line 1", "sandbox");
}

static void test_limits(void **state)
{
    (void)state;
    struct ebb_jinja_limits small = {.max_output = 1000};
    expect_fail("{% for i in range(100000) %}xxxxxxxx{% endfor %}", EBB_ERANGE, &small, "line 1",
                "exceeds 1000 bytes");
    struct ebb_jinja_limits steps = {.max_steps = 10000};
    expect_fail("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                EBB_ERANGE, &steps, "steps", NULL);
    expect_fail("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", EBB_ERANGE, NULL,
                "nested deeper than 64", NULL);
    struct ebb_jinja_limits mem = {.max_memory = 4 << 20};
    expect_fail("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
                EBB_ERANGE, &mem, "memory", NULL);
    expect_fail("{{ range(100000000) | length }}", EBB_ERANGE, NULL, "million", NULL);
    expect_fail("{{ 'ab' * 1000000000000 }}", EBB_ERANGE, NULL, "too large", NULL);
    /* Deep nesting is refused at load, not a stack overflow. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 16);
    assert_non_null(deep);
    strcpy(deep, "{{ ");
    size_t w = 3;
    for (size_t i = 0; i < depth; i++)
        deep[w++] = '(';
    deep[w++] = '1';
    for (size_t i = 0; i < depth; i++)
        deep[w++] = ')';
    strcpy(deep + w, " }}");
    expect_fail(deep, EBB_EUNSUPPORTED, NULL, "nested deeper", NULL);
    w = 0;
    for (size_t i = 0; i < depth / 10; i++)
        w += (size_t)sprintf(deep + w, "%s", "{% if x %}");
    expect_fail(deep, EBB_EUNSUPPORTED, NULL, "blocks nested deeper", NULL);
    free(deep);
    expect_fail("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}", EBB_EINVAL, NULL,
                "containing itself", NULL);
}

/* Every prefix of a template that uses most constructs either parses or fails cleanly. */
static void test_truncated_input(void **state)
{
    (void)state;
    const char *src =
        "{%- set ns = namespace(a=[], b='x') -%}\n"
        "{% macro m(x, y=2) %}{{ x ~ y }}{% endmacro %}\n"
        "{% for msg in messages if msg.role != 'tool' %}{{- '<|' + msg['role'] + '|>\\n' -}}"
        "{% if msg.content is string %}{{ msg.content | trim }}{% elif msg.content %}"
        "{{ msg.content | tojson(indent=2) }}{% else %}{{ m(1, y=[1,2][0:1]) }}{% endif %}"
        "{# c #}{% set ns.b = ns.b ~ loop.index %}{% endfor %}{{ ns.b | upper }}"
        "{% filter lower %}X{% endfilter %}{% call m(3) %}{% endcall %}";
    size_t n = strlen(src);
    json_t *vars = json_pack("{s:[{s:s,s:s},{s:s,s:[i]}]}", "messages", "role", "user", "content",
                             " hi ", "role", "assistant", "content", 1);
    for (size_t k = 0; k <= n; k++) {
        struct ebb_jinja *t = NULL;
        struct ebb_diag d = {{0}};
        if (ebb_jinja_parse(src, k, &t, &d) == EBB_OK) {
            char *out = NULL;
            size_t on;
            struct tm now = fixed_now();
            if (ebb_jinja_render(t, vars, &now, NULL, &out, &on, &d) == EBB_OK)
                assert_int_equal(strlen(out), on);
            free(out);
            ebb_jinja_free(t);
        } else {
            assert_non_null(strstr(d.msg, "line"));
        }
    }
    json_decref(vars);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constructs),
        cmocka_unit_test(test_errors_name_line_and_construct),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_truncated_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
