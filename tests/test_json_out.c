/*
 * test_json_out.c - the live view's JSON writer (daemon/json_out.c):
 * commas, nesting, escapes, numbers JSON cannot hold, and its limits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json_out.h"
#include "testutil.h"
#include "tsdf_error.h"

static void test_nesting_and_commas(void **state)
{
    json_out j;
    json_init(&j, 1 << 16);
    json_begin_object(&j);
    json_key(&j, "maps");
    json_begin_array(&j);
    json_begin_object(&j);
    json_kv_string(&j, "name", "default");
    json_kv_u64(&j, "blocks", 18446744073709551615ull);
    json_key(&j, "t");
    json_i64(&j, -3);
    json_end_object(&j);
    json_begin_array(&j);
    json_end_array(&j);
    json_double(&j, 0.25);
    json_end_array(&j);
    json_key(&j, "ok");
    json_bool(&j, 1);
    json_kv_double(&j, "x", -1.5);
    json_kv_bool(&j, "no", 0);
    json_end_object(&j);
    assert_int_equal(json_error(&j), TSDF_OK);
    assert_string_equal(j.data, "{\"maps\":[{\"name\":\"default\",\"blocks\":18446744073709551615,"
                                "\"t\":-3},[],0.25],\"ok\":true,\"x\":-1.5,\"no\":false}");
    size_t len = 0;
    char *text = json_take(&j, &len);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    free(text);
}

static void test_escapes_and_numbers(void **state)
{
    json_out j;
    json_init(&j, 1 << 16);
    json_begin_array(&j);
    json_string(&j, "a\"b\\c\n\x01 caf\xc3\xa9");
    json_double(&j, NAN);
    json_double(&j, INFINITY);
    json_double(&j, 0.1f);
    json_bool(&j, 0);
    json_end_array(&j);
    assert_int_equal(json_error(&j), TSDF_OK);
    /* UTF-8 passes as it is; a float keeps its nine digits. */
    assert_string_equal(j.data,
                        "[\"a\\\"b\\\\c\\u000a\\u0001 caf\xc3\xa9\",null,null,0.100000001,false]");
    json_fini(&j);
}

static void test_limits_are_sticky(void **state)
{
    json_out j;
    json_init(&j, 16);
    json_begin_array(&j);
    json_string(&j, "this string is longer than sixteen bytes");
    json_u64(&j, 1);
    assert_int_equal(json_error(&j), TSDF_ETOO_LARGE);
    size_t len = 7;
    assert_null(json_take(&j, &len));
    assert_int_equal(len, 0);

    json_init(&j, 1 << 16);
    for (int i = 0; i < JSON_OUT_MAX_DEPTH + 1; i++)
        json_begin_array(&j);
    assert_int_equal(json_error(&j), TSDF_EINVAL);
    json_fini(&j);

    json_init(&j, 1 << 16);
    json_end_object(&j);
    assert_int_equal(json_error(&j), TSDF_EINVAL);
    json_fini(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nesting_and_commas),
        cmocka_unit_test(test_escapes_and_numbers),
        cmocka_unit_test(test_limits_are_sticky),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
