#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/err.h"

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(ebb_err_name(EBB_OK), "EBB_OK");
    assert_string_equal(ebb_err_name(EBB_EFORMAT), "EBB_EFORMAT");
    assert_string_equal(ebb_err_name((ebb_err)-999), "EBB_E?");
    assert_string_equal(ebb_err_str(EBB_ENOMEM), "out of memory");
}

static void test_diag(void **state)
{
    (void)state;
    struct ebb_diag d;
    assert_int_equal(ebb_diag_set(&d, EBB_EINVAL, "bad %s %d", "thing", 7), EBB_EINVAL);
    assert_string_equal(d.msg, "bad thing 7");
    assert_int_equal(ebb_diag_set(NULL, EBB_EIO, "x"), EBB_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_diag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
