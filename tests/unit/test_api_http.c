/*
 * test_api_http.c - the API's HTTP/1.1 head parser and percent-decoding
 * (api/api_http.c), and the tokens file (api/api_tokens.c): what each
 * accepts, the status each refusal maps to, and file:line:col errors.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "api/api_int.h"

static int
parse(const char *s, uint64_t max, struct api_http_head *h)
{
    const char *why;

    return api_http_parse(s, strlen(s), max, h, &why);
}

Test(api_http, complete_heads)
{
    struct api_http_head h;

    cr_assert_eq(parse("GET /v1/status?x=1 HTTP/1.1\r\nHost: a\r\n"
        "Authorization: Bearer  tok\r\n\r\n", 10, &h), 0);
    cr_assert_eq(h.method, API_GET);
    cr_assert_str_eq(h.target, "/v1/status?x=1");
    cr_assert_str_eq(h.auth, "Bearer  tok");
    cr_assert_eq(h.keep_alive, 1);
    cr_assert_eq(h.has_length, 0);
    cr_assert_eq(parse("\r\nPOST / HTTP/1.0\r\nContent-Length: 3\r\n"
        "Connection: keep-alive\r\nContent-Type: application/json; x\r\n"
        "\r\nabc", 10, &h), 0);
    cr_assert_eq(h.keep_alive, 1);
    cr_assert_eq(h.content_length, 3);
    cr_assert_eq(h.head_len, strlen("\r\nPOST / HTTP/1.0\r\nContent-Length:"
        " 3\r\nConnection: keep-alive\r\nContent-Type: application/json; "
        "x\r\n\r\n"));
    cr_assert_eq(parse("DELETE /a HTTP/1.1\r\nHost: a\r\nConnection: "
        "Upgrade, close\r\n\r\n", 0, &h), 0);
    cr_assert_eq(h.keep_alive, 0);
    cr_assert_eq(parse("GET / HTTP/1.0\r\n\r\n", 0, &h), 0);
    cr_assert_eq(h.keep_alive, 0);
}

Test(api_http, incomplete)
{
    struct api_http_head h;

    cr_assert_eq(parse("", 0, &h), -2);
    cr_assert_eq(parse("GET / HTTP/1.1\r\nHost: a\r\n", 0, &h), -2);
    cr_assert_eq(parse("GET / HTTP/1.1\r\nHost: a\r\n\r", 0, &h), -2);
}

Test(api_http, refusals)
{
    static const struct { const char *in; int st; } t[] = {
        { "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n", 413 },
        { "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n"
          "Content-Length: 2\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: "
          "99999999999999999999999\r\n\r\n", 413 },
        { "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
          411 },
        { "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
          501 },
        { "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
          "Content-Length: 1\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400 },
        { "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505 },
        { "GET / HTTPS/1.1\r\nHost: a\r\n\r\n", 400 },
        { "GET http://x/ HTTP/1.1\r\nHost: a\r\n\r\n", 400 },
        { "PATCH / HTTP/1.1\r\nHost: a\r\n\r\n", 501 },
        { "GET / HTTP/1.1\nHost: a\n\n", 400 },
        { "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400 },
        { "GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", 400 },
        { "GET /a\x7f HTTP/1.1\r\nHost: a\r\n\r\n", 400 },
    };
    struct api_http_head h;
    const char          *why;

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        int rc = api_http_parse(t[i].in, strlen(t[i].in), 10, &h, &why);

        cr_assert_eq(rc, t[i].st, "case %zu: %d (%s)", i, rc, why);
        cr_assert(why[0] != '\0');
    }
}

Test(api_http, sizes)
{
    static char          s[API_MAX_HEAD + 64];
    struct api_http_head h;
    const char          *why;
    size_t               n;

    n = (size_t)snprintf(s, sizeof(s), "GET /");
    memset(s + n, 'a', API_MAX_TARGET + 1);
    n += API_MAX_TARGET + 1;
    n += (size_t)snprintf(s + n, sizeof(s) - n, " HTTP/1.1\r\n\r\n");
    cr_assert_eq(api_http_parse(s, n, 0, &h, &why), 414);
    /* a head that never ends: 431 at the limit, not before */
    n = (size_t)snprintf(s, sizeof(s), "GET / HTTP/1.1\r\n");
    while (n + 8 < API_MAX_HEAD)
        n += (size_t)snprintf(s + n, sizeof(s) - n, "X: yy\r\n");
    cr_assert_eq(api_http_parse(s, n, 0, &h, &why), -2);
    memset(s + n, 'z', sizeof(s) - n);
    cr_assert_eq(api_http_parse(s, sizeof(s), 0, &h, &why), 431);
}

Test(api_http, unescape)
{
    char out[16];

    cr_assert_eq(api_http_unescape("a%2Fb+c", 7, out, sizeof(out), 0), 0);
    cr_assert_str_eq(out, "a/b+c");
    cr_assert_eq(api_http_unescape("a%2fb+c", 7, out, sizeof(out), 1), 0);
    cr_assert_str_eq(out, "a/b c");
    cr_assert_eq(api_http_unescape("%00", 3, out, sizeof(out), 0), -1);
    cr_assert_eq(api_http_unescape("%4", 2, out, sizeof(out), 0), -1);
    cr_assert_eq(api_http_unescape("%zz", 3, out, sizeof(out), 0), -1);
    cr_assert_eq(api_http_unescape("0123456789abcdef", 16, out, sizeof(out),
        0), -1);
}

static const char *
write_file(const char *text, mode_t mode)
{
    static char path[] = "/tmp/test_api_tokens.XXXXXX";
    int         fd;

    strcpy(path, "/tmp/test_api_tokens.XXXXXX");
    fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    fchmod(fd, mode);
    close(fd);
    return path;
}

/* sha256("secret") */
#define H_SECRET "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"

Test(api_tokens, load_and_check)
{
    const char        *p = write_file("# comment\n\n  ops operate " H_SECRET
                            "\nshop inject,read sha256:" H_SECRET "0\n", 0600);
    char               err[256];
    struct api_tokens *t = api_tokens_load(p, err, sizeof(err));

    cr_assert_null(t);              /* 65 hex digits on line 4 */
    cr_assert(strstr(err, ":4:") != NULL, "%s", err);
    unlink(p);
    p = write_file("ops operate " H_SECRET "\r\nshop inject,read sha256:"
        "0000000000000000000000000000000000000000000000000000000000000000\n",
        0644);
    t = api_tokens_load(p, err, sizeof(err));
    cr_assert_not_null(t, "%s", err);
    cr_assert_eq(api_tokens_count(t), 2);
    {
        const char *name;
        unsigned    roles;

        cr_assert_eq(api_tokens_check(t, "secret", 6, &name, &roles), 0);
        cr_assert_str_eq(name, "ops");
        cr_assert_eq(roles, API_ROLE_OPERATE | API_ROLE_READ);
        cr_assert_eq(api_tokens_check(t, "secreT", 6, &name, &roles), -1);
        cr_assert_eq(api_tokens_check(t, "", 0, &name, &roles), -1);
    }
    api_tokens_free(t);
    unlink(p);
}

Test(api_tokens, refusals)
{
    static const struct { const char *text; const char *want; } t[] = {
        { "a read\n", ":1:7: expected NAME" },
        { "a write " H_SECRET "\n", ":1:3: roles" },
        { "a read, " H_SECRET "\n", ":1:3: roles" },
        { "a read " H_SECRET " x\n", ":1:73: unexpected" },
        { "a read " H_SECRET "\na read " H_SECRET "\n", ":2:1: duplicate" },
        { "a/b read " H_SECRET "\n", ":1:1: token name" },
    };
    char err[256];

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        const char *p = write_file(t[i].text, 0600);

        cr_assert_null(api_tokens_load(p, err, sizeof(err)));
        cr_assert(strstr(err, t[i].want) != NULL, "case %zu: %s", i, err);
        unlink(p);
    }
    {
        const char *p = write_file("a read " H_SECRET "\n", 0620);

        cr_assert_null(api_tokens_load(p, err, sizeof(err)));
        cr_assert(strstr(err, "writable") != NULL, "%s", err);
        unlink(p);
    }
}
