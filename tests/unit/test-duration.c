/* runtime/base/duration.c: one parser, each caller's set of units. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/duration.h"

static double parse(const char *s, unsigned units)
{
    double v = -12345;
    return ebb_duration_parse(s, units, &v) ? v : -12345;
}

static void test_numbers(void **state)
{
    (void)state;
    assert_true(parse("0", EBB_DURATION_CONFIG) == 0);
    assert_true(parse("-1", EBB_DURATION_CONFIG) == -1);
    assert_true(parse("2.5", EBB_DURATION_GO) == 2.5);
    assert_true(parse("300", 0) == 300); /* a plain number needs no unit */
}

static void test_units(void **state)
{
    (void)state;
    assert_true(parse("5m", EBB_DURATION_CONFIG) == 300);
    assert_true(parse("1h30m", EBB_DURATION_CONFIG) == 5400);
    assert_true(parse("250ms", EBB_DURATION_CONFIG) == 0.25);
    assert_true(parse("1.5s", EBB_DURATION_CONFIG) == 1.5);
    assert_true(parse("-2m", EBB_DURATION_CONFIG) == -120);
    assert_true(parse("+1h", EBB_DURATION_CONFIG) == 3600);
    assert_true(parse("1m30s500ms", EBB_DURATION_GO) == 90.5);
    /* Go's small units only where the caller takes them. */
    assert_true(fabs(parse("1500us", EBB_DURATION_GO) - 1.5e-3) < 1e-15);
    assert_true(fabs(parse("2\xc2\xb5s", EBB_DURATION_GO) - 2e-6) < 1e-18);
    assert_true(fabs(parse("7ns", EBB_DURATION_GO) - 7e-9) < 1e-20);
    assert_true(parse("1500us", EBB_DURATION_CONFIG) == -12345);
    assert_true(parse("7ns", EBB_DURATION_CONFIG) == -12345);
    /* A unit left out of the set is not taken as a shorter one ("ms" is not "m" then "s"). */
    assert_true(parse("5ms", EBB_DURATION_M | EBB_DURATION_S) == -12345);
}

static void test_rejects(void **state)
{
    (void)state;
    double v = 42;
    assert_false(ebb_duration_parse(NULL, EBB_DURATION_GO, &v));
    assert_false(ebb_duration_parse("", EBB_DURATION_GO, &v));
    assert_false(ebb_duration_parse("m", EBB_DURATION_GO, &v));
    assert_false(ebb_duration_parse("-", EBB_DURATION_GO, &v));
    assert_false(ebb_duration_parse("5 minutes", EBB_DURATION_GO, &v));
    assert_false(ebb_duration_parse("5d", EBB_DURATION_GO, &v));
    assert_false(ebb_duration_parse("soon", EBB_DURATION_GO, &v));
    assert_false(ebb_duration_parse("1h-5m", EBB_DURATION_GO, &v));
    assert_false(ebb_duration_parse("5m ", EBB_DURATION_GO, &v));
    assert_true(v == 42); /* written only on success */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
