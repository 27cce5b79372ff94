/*
 * test_api_json.c - the API's JSON (api/api_json.c): what the strict
 * parser accepts and refuses, the values it gives back, and the writer's
 * escaping and commas (its output parses again).
 */
#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "api/api_json.h"
#include "common/buf.h"

static struct api_json *
parse(const char *s)
{
    char err[128];

    return api_json_parse(s, strlen(s), err, sizeof(err));
}

static const char *const good[] = {
    "{}", "[]", "0", "-0", "1.5e10", "-1E-3", "\"\"", "true", "false",
    "null", " \t\r\n{ \"a\" : [ 1 , 2 ] } \n", "\"\\u00e9\\ud83d\\ude00\"",
    "\"caf\xc3\xa9\"", "[[[[[[[[[[1]]]]]]]]]]", "{\"a\":{\"b\":{}}}",
    "9223372036854775807", "-9223372036854775808", "1e308",
};

static const char *const bad[] = {
    "", " ", "{", "[1,]", "{\"a\":1,}", "{'a':1}", "01", "+1", ".5", "1.",
    "1e", "NaN", "Infinity", "-", "[1 2]", "{\"a\" 1}", "{1:2}", "tru",
    "nul", "\"\\x41\"", "\"a\tb\"", "\"\\ud800\"", "\"\\udc00\"",
    "\"\\ud800\\u0041\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xff\"",
    "\"\xe2\x82\"", "{\"a\":1,\"a\":2}", "1 2", "[] x", "/* c */ 1",
    "\"abc", "1e999", "[\"\\u12\"]", "{\"a\\u0000b\":1}",
};

Test(api_json, accepts_rfc8259)
{
    size_t i;

    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct api_json *v = parse(good[i]);

        cr_assert_not_null(v, "refused %s", good[i]);
        api_json_free(v);
    }
}

Test(api_json, refuses_the_rest)
{
    char   err[128];
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct api_json *v = api_json_parse(bad[i], strlen(bad[i]), err,
                                 sizeof(err));

        cr_assert_null(v, "accepted %s", bad[i]);
        cr_assert(strncmp(err, "line ", 5) == 0, "err %s", err);
    }
}

Test(api_json, depth_limit)
{
    char   s[2 * API_JSON_MAX_DEPTH + 8];
    size_t d, i;

    for (d = API_JSON_MAX_DEPTH; d <= API_JSON_MAX_DEPTH + 1; d++) {
        struct api_json *v;
        size_t           n = 0;

        for (i = 0; i < d; i++)
            s[n++] = '[';
        for (i = 0; i < d; i++)
            s[n++] = ']';
        v = api_json_parse(s, n, NULL, 0);
        if (d <= API_JSON_MAX_DEPTH)
            cr_assert_not_null(v);
        else
            cr_assert_null(v);
        api_json_free(v);
    }
}

Test(api_json, values)
{
    struct api_json       *v = parse("{\"from\":\"a@x\",\"to\":[\"b@y\","
                                 "{\"address\":\"c@z\"}],\"n\":42,"
                                 "\"f\":1.25,\"t\":true,\"z\":null,"
                                 "\"nul\":\"a\\u0000b\",\"big\":1e3}");
    const struct api_json *to;
    size_t                 n;
    int64_t                i;

    cr_assert_not_null(v);
    cr_assert_eq(api_json_type(v), API_JSON_OBJ);
    cr_assert_eq(api_json_len(v), 8);
    cr_assert_str_eq(api_json_key(v, 0), "from");
    cr_assert_str_eq(api_json_str(api_json_get(v, "from"), &n), "a@x");
    cr_assert_eq(n, 3);
    to = api_json_get(v, "to");
    cr_assert_eq(api_json_type(to), API_JSON_ARR);
    cr_assert_eq(api_json_len(to), 2);
    cr_assert_str_eq(api_json_str(api_json_at(to, 0), NULL), "b@y");
    cr_assert_str_eq(api_json_str(api_json_get(api_json_at(to, 1),
                         "address"), NULL), "c@z");
    cr_assert_null(api_json_at(to, 2));
    cr_assert_eq(api_json_int(api_json_get(v, "n"), &i), 0);
    cr_assert_eq(i, 42);
    cr_assert_eq(api_json_int(api_json_get(v, "f"), &i), -1);
    cr_assert_eq(api_json_int(api_json_get(v, "big"), &i), -1);
    cr_assert_float_eq(api_json_num(api_json_get(v, "f")), 1.25, 1e-12);
    cr_assert_eq(api_json_bool(api_json_get(v, "t")), 1);
    cr_assert_eq(api_json_bool(api_json_get(v, "z")), -1);
    cr_assert_eq(api_json_type(api_json_get(v, "z")), API_JSON_NULL);
    cr_assert_eq(api_json_type(api_json_get(v, "absent")), API_JSON_NONE);
    api_json_str(api_json_get(v, "nul"), &n);
    cr_assert_eq(n, 3);
    /* NULL-safe getters on a missing or wrong-typed value */
    cr_assert_null(api_json_str(api_json_get(v, "n"), &n));
    cr_assert_eq(n, 0);
    cr_assert_null(api_json_get(api_json_get(v, "absent"), "x"));
    api_json_free(v);
}

Test(api_json, int64_edges)
{
    struct api_json *v = parse("[9223372036854775807,-9223372036854775808,"
                             "9223372036854775808]");
    int64_t          i;

    cr_assert_eq(api_json_int(api_json_at(v, 0), &i), 0);
    cr_assert_eq(i, INT64_MAX);
    cr_assert_eq(api_json_int(api_json_at(v, 1), &i), 0);
    cr_assert_eq(i, INT64_MIN);
    cr_assert_eq(api_json_int(api_json_at(v, 2), &i), -1);
    api_json_free(v);
}

Test(api_json, writer_escapes_and_commas)
{
    struct buf       b;
    struct api_jw    w;
    struct api_json *v;
    const char       raw[] = "q\"b\\c\n\x01\xff\xc3\xa9";
    size_t           n;
    const char      *s;

    buf_init(&b);
    api_jw_init(&w, &b);
    api_jw_obj(&w);
    api_jw_kstr(&w, "s", raw);
    api_jw_kint(&w, "i", -7);
    api_jw_kbool(&w, "b", 0);
    api_jw_key(&w, "a");
    api_jw_arr(&w);
    api_jw_int(&w, 1);
    api_jw_str(&w, NULL);
    api_jw_obj(&w);
    api_jw_obj_end(&w);
    api_jw_num(&w, 0.5);
    api_jw_arr_end(&w);
    api_jw_key(&w, "r");
    api_jw_raw(&w, "{\"x\":1}", 7);
    api_jw_obj_end(&w);
    cr_assert_eq(w.bad, 0);
    cr_assert_eq(w.depth, 0);
    buf_append(&b, "", 1);
    cr_assert_str_eq(buf_head(&b), "{\"s\":\"q\\\"b\\\\c\\n\\u0001\\u00ff"
        "\xc3\xa9\",\"i\":-7,\"b\":false,\"a\":[1,null,{},0.5],"
        "\"r\":{\"x\":1}}");
    v = api_json_parse(buf_head(&b), buf_avail(&b) - 1, NULL, 0);
    cr_assert_not_null(v);
    s = api_json_str(api_json_get(v, "s"), &n);
    cr_assert_eq(n, strlen("q\"b\\c\n\x01\xc3\xbf\xc3\xa9"));
    cr_assert(memcmp(s, "q\"b\\c\n\x01\xc3\xbf\xc3\xa9", n) == 0);
    api_json_free(v);
    buf_free(&b);
}

Test(api_json, writer_depth_overflow_is_flagged)
{
    struct buf    b;
    struct api_jw w;
    int           i;

    buf_init(&b);
    api_jw_init(&w, &b);
    for (i = 0; i < API_JSON_MAX_DEPTH + 2; i++)
        api_jw_arr(&w);
    cr_assert_eq(w.bad, 1);
    api_jw_init(&w, &b);
    api_jw_obj_end(&w);
    cr_assert_eq(w.bad, 1);
    buf_free(&b);
}
