/*
 * test_smtp_reply.c - smtp/reply.c: the reply
 * parser, EHLO capabilities, enhanced status codes, dot-stuffing.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "smtp/smtp.h"

#define MAX 65536

static int
parse(const char *s, struct smtp_reply *r)
{
    return smtp_reply_parse(s, strlen(s), MAX, r);
}


Test(smtp_reply, single_line_crlf)
{
    struct smtp_reply r;

    cr_assert_eq(parse("250 2.0.0 Ok: queued as X\r\n", &r), 1);
    cr_assert_eq(r.code, 250);
    cr_assert_str_eq(r.text, "250 2.0.0 Ok: queued as X");
    cr_assert_eq(r.len, strlen("250 2.0.0 Ok: queued as X\r\n"));
}


Test(smtp_reply, bare_code_and_bare_lf)
{
    struct smtp_reply r;

    cr_assert_eq(parse("354\n", &r), 1);
    cr_assert_eq(r.code, 354);
    cr_assert_str_eq(r.text, "354");
    cr_assert_eq(r.len, 4);
}


Test(smtp_reply, multi_line_joined_and_length_exact)
{
    const char        *s = "250-mx.example.org hello\r\n250-PIPELINING\r\n"
        "250 8BITMIME\r\n220 next\r\n";
    struct smtp_reply r;

    cr_assert_eq(parse(s, &r), 1);
    cr_assert_eq(r.code, 250);
    cr_assert_str_eq(r.text, "250-mx.example.org hello PIPELINING 8BITMIME");
    cr_assert_eq(r.len, strlen(s) - strlen("220 next\r\n"));
}


Test(smtp_reply, incomplete_needs_more_at_every_cut)
{
    const char        *s = "550-5.1.1 no\r\n550-such\r\n550 5.1.1 user\r\n";
    size_t             n = strlen(s), cut;
    struct smtp_reply r;

    for (cut = 0; cut < n; cut++)
        cr_assert_eq(smtp_reply_parse(s, cut, MAX, &r), 0, "cut %zu", cut);
    cr_assert_eq(smtp_reply_parse(s, n, MAX, &r), 1);
    cr_assert_eq(r.code, 550);
}


Test(smtp_reply, bad_lines_are_errors)
{
    static const char *bad[] = {
        "25 short\r\n", "abc text\r\n", "250x text\r\n",
        "250-a\r\n251 b\r\n", "\r\n", "099 too low\r\n", "2500 long\r\n",
    };
    struct smtp_reply r;
    size_t             i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(parse(bad[i], &r), -1, "input %zu", i);
}


Test(smtp_reply, endless_reply_is_an_error)
{
    char              *s = malloc(MAX + 100);
    struct smtp_reply r;
    size_t             n = 0;

    while (n + 10 < MAX + 50) {
        memcpy(s + n, "250-xxxx\r\n", 10);
        n += 10;
    }
    cr_assert_eq(smtp_reply_parse(s, n, MAX, &r), -1);
    /* a long line without LF too */
    memset(s, 'a', MAX + 10);
    memcpy(s, "250 ", 4);
    cr_assert_eq(smtp_reply_parse(s, MAX + 10, MAX, &r), -1);
    free(s);
}


Test(smtp_reply, long_text_is_truncated_not_overflowed)
{
    char               s[3000];
    struct smtp_reply r;

    memset(s, 'x', sizeof(s));
    memcpy(s, "451 ", 4);
    memcpy(s + sizeof(s) - 3, "\r\n", 3);
    cr_assert_eq(smtp_reply_parse(s, strlen(s), MAX, &r), 1);
    cr_assert_eq(r.code, 451);
    cr_assert_eq(strlen(r.text), SMTP_REPLY_MAX - 1);
}


Test(smtp_ehlo, capabilities)
{
    const char *s = "250-mx.example.org greets you\r\n"
        "250-PIPELINING\r\n250-SIZE 10240000\r\n250-8bitmime\r\n"
        "250-SMTPUTF8\r\n250-CHUNKING\r\n250-DSN\r\n250-BINARYMIME\r\n"
        "250 ENHANCEDSTATUSCODES\r\n";
    struct smtp_ehlo e;
    unsigned    caps = smtp_ehlo_caps(s, strlen(s), &e);

    cr_assert_eq(caps, SMTP_CAP_PIPELINING | SMTP_CAP_SIZE |
        SMTP_CAP_8BITMIME | SMTP_CAP_SMTPUTF8 | SMTP_CAP_CHUNKING |
        SMTP_CAP_DSN | SMTP_CAP_BINARYMIME);
    cr_assert_eq(e.size, 10240000);
}


Test(smtp_ehlo, first_line_and_lookalikes_are_not_caps)
{
    const char *s = "250-PIPELINING is my name\r\n250-PIPELININGX\r\n"
        "250-XDSN\r\n250 SIZE\r\n";
    struct smtp_ehlo e = { .size = 7 };
    unsigned    caps = smtp_ehlo_caps(s, strlen(s), &e);

    cr_assert_eq(caps, SMTP_CAP_SIZE);
    cr_assert_eq(e.size, 0);
}


Test(smtp_ehlo, single_line_reply_has_none)
{
    struct smtp_ehlo e;

    cr_assert_eq(smtp_ehlo_caps("250 hi\r\n", 8, &e), 0);
}


Test(smtp_enhanced, forms)
{
    char out[16];

    cr_assert_str_eq(smtp_enhanced("550 5.1.1 no such user", "x", out,
        sizeof(out)), "5.1.1");
    cr_assert_str_eq(smtp_enhanced("451 4.7.1 try later", "x", out,
        sizeof(out)), "4.7.1");
    cr_assert_str_eq(smtp_enhanced("550 no such user", "x", out,
        sizeof(out)), "5.0.0");
    cr_assert_str_eq(smtp_enhanced("4.4.7 expired", "5.0.0", out,
        sizeof(out)), "4.4.7");
    cr_assert_str_eq(smtp_enhanced("connect to x: refused", "4.4.1", out,
        sizeof(out)), "4.4.1");
    /* class must agree with the basic code */
    cr_assert_str_eq(smtp_enhanced("550 4.1.1 odd", "x", out,
        sizeof(out)), "5.0.0");
    cr_assert_str_eq(smtp_enhanced("554 5.1234.1 bad", "x", out,
        sizeof(out)), "5.0.0");
    cr_assert_str_eq(smtp_enhanced("250 2.0.0", "x", out, sizeof(out)),
        "2.0.0");
}


/* stuff_whole - stuff in with the input split at the given cuts. */
static size_t
stuff_split(const char *in, size_t n, const size_t *cuts, size_t ncuts,
    char *out)
{
    struct smtp_stuff st;
    size_t             o = 0, prev = 0, i;

    smtp_stuff_init(&st);
    for (i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : n;

        o += smtp_stuff(&st, in + prev, end - prev, out + o);
        prev = end;
    }
    o += smtp_stuff_end(&st, out + o);
    return o;
}


static void
check_stuff(const char *in, const char *want)
{
    size_t n = strlen(in), wn = strlen(want), cut, c2;
    char  *out = malloc(SMTP_STUFF_ROOM(n) + 8);
    size_t o;

    o = stuff_split(in, n, NULL, 0, out);
    cr_assert_eq(o, wn, "whole: got %zu bytes, want %zu", o, wn);
    cr_assert(memcmp(out, want, wn) == 0, "whole: got '%.*s'", (int)o, out);
    for (cut = 0; cut <= n; cut++) {
        o = stuff_split(in, n, &cut, 1, out);
        cr_assert_eq(o, wn, "cut %zu", cut);
        cr_assert(memcmp(out, want, wn) == 0, "cut %zu: '%.*s'", cut,
            (int)o, out);
        for (c2 = cut; c2 <= n; c2++) {
            size_t cuts[2] = { cut, c2 };

            o = stuff_split(in, n, cuts, 2, out);
            cr_assert_eq(o, wn, "cuts %zu,%zu", cut, c2);
            cr_assert(memcmp(out, want, wn) == 0, "cuts %zu,%zu", cut, c2);
        }
    }
    free(out);
}


Test(smtp_stuff, leading_dots_at_every_split)
{
    check_stuff(".a\r\n..b\r\nc.d\r\n.\r\n", "..a\r\n...b\r\nc.d\r\n..\r\n"
        ".\r\n");
}


Test(smtp_stuff, no_final_crlf_gets_one)
{
    check_stuff("abc", "abc\r\n.\r\n");
    check_stuff("abc\r", "abc\r\r\n.\r\n");
    check_stuff("", ".\r\n");
}


Test(smtp_stuff, bare_lf_is_a_line_start)
{
    check_stuff("a\n.b\r\n", "a\n..b\r\n.\r\n");
    check_stuff("a\r\r\n.b\r\n", "a\r\r\n..b\r\n.\r\n");
    /* a body ending in a bare LF still needs its CRLF before the dot */
    check_stuff("a\n", "a\n\r\n.\r\n");
}


/* lenient_end - where an LF-lenient receiver (a line ends at LF, CR
 * before it optional) sees the end of data: the offset just past the
 * first line that is exactly "." or ".\r", or n when none. */
static size_t
lenient_end(const char *p, size_t n)
{
    size_t start = 0, i;

    for (i = 0; i < n; i++) {
        if (p[i] != '\n')
            continue;
        if ((i - start == 1 && p[start] == '.') ||
            (i - start == 2 && p[start] == '.' && p[start + 1] == '\r'))
            return i + 1;
        start = i + 1;
    }
    return n;
}


/* strict_end - the same for a strict receiver: the first "\r\n.\r\n"
 * (or ".\r\n" at the very start). */
static size_t
strict_end(const char *p, size_t n)
{
    const char *e;

    if (n >= 3 && memcmp(p, ".\r\n", 3) == 0)
        return 3;
    e = memmem(p, n, "\r\n.\r\n", 5);
    return e != NULL ? (size_t)(e - p) + 5 : n;
}


Test(smtp_stuff, smuggling_variants_end_only_at_the_real_end)
{
    /* what a client may get stored with bare_newline: accept, each
     * followed by a smuggled second transaction */
    static const char *const bodies[] = {
        "a\r\n\n.\r\nMAIL FROM:<x@evil>\r\n",
        "a\r\n\n.\nMAIL FROM:<x@evil>\r\n",
        "a\r\n.\nMAIL FROM:<x@evil>\r\n",
        "a\n.\r\nMAIL FROM:<x@evil>\r\n",
        "a\n.\nMAIL FROM:<x@evil>\r\n",
        "\n.\r\nMAIL FROM:<x@evil>\r\n",
        ".\nMAIL FROM:<x@evil>\r\n",
        "a\r\n.\r\r\nMAIL FROM:<x@evil>\r\n",
        "a\n.\r\n",
        "a\n.\n",
    };
    size_t k;

    for (k = 0; k < sizeof(bodies) / sizeof(bodies[0]); k++) {
        const char *in = bodies[k];
        size_t      n = strlen(in), cut, o;
        char       *out = malloc(SMTP_STUFF_ROOM(n) + 8);

        for (cut = 0; cut <= n; cut++) {
            o = stuff_split(in, n, &cut, 1, out);
            cr_assert_eq(lenient_end(out, o), o, "body %zu cut %zu: a "
                "lenient parser ends early in '%.*s'", k, cut, (int)o, out);
            cr_assert_eq(strict_end(out, o), o, "body %zu cut %zu: a "
                "strict parser ends early in '%.*s'", k, cut, (int)o, out);
            cr_assert(o >= 5 && memcmp(out + o - 5, "\r\n.\r\n", 5) == 0,
                "body %zu: no proper end", k);
        }
        free(out);
    }
}


Test(smtp_stuff, only_dots)
{
    check_stuff(".\r\n.\r\n..\r\n", "..\r\n..\r\n...\r\n.\r\n");
    check_stuff("...", "....\r\n.\r\n");
}


Test(smtp_stuff, worst_case_fits_the_room)
{
    static const char *const units[] = { ".\r\n", ".\n" };
    size_t k;

    for (k = 0; k < 2; k++) {
        size_t u = strlen(units[k]), n = u * 1000, o, i;
        char  *in = malloc(n), *out = malloc(SMTP_STUFF_ROOM(n) + 8);
        struct smtp_stuff st;

        for (i = 0; i < n; i += u)
            memcpy(in + i, units[k], u);
        smtp_stuff_init(&st);
        o = smtp_stuff(&st, in, n, out);
        cr_assert_eq(o, n + n / u);
        cr_assert(o <= SMTP_STUFF_ROOM(n));
        free(in);
        free(out);
    }
}


/* A receiver that takes a bare CR as a line end must
 * not find an end of data in "line1\r.\r\n": the dot after a bare CR is
 * doubled too, so no stored byte sequence ends the data early anywhere. */
Test(smtp_stuff, bare_cr_is_a_line_start_too)
{
    check_stuff("a\r.b\r\n", "a\r..b\r\n.\r\n");
    check_stuff("line1\r.\r\nMAIL FROM:<e@x>\r\n",
        "line1\r..\r\nMAIL FROM:<e@x>\r\n.\r\n");
    check_stuff("x\r.\r.\n.\r\n.y", "x\r..\r..\n..\r\n..y\r\n.\r\n");
    check_stuff("\r\r.", "\r\r..\r\n.\r\n");
}


/* A hostile next hop's reply keeps no control byte:
 * ESC, a bare CR, NUL, DEL and C1 controls are escaped as \xHH. */
Test(smtp_reply, control_bytes_are_escaped)
{
    static const char in[] = "550 5.1.1 \x1b[2J\x1b]0;pwned\x07 x\rFAKE\x7f"
        "\xc2\x9b" "1m \xff ok\xc3\xa9\r\n";
    struct smtp_reply r;
    size_t             i;

    cr_assert_eq(smtp_reply_parse(in, sizeof(in) - 1, 4096, &r), 1);
    cr_assert_eq(r.code, 550);
    for (i = 0; r.text[i] != '\0'; i++)
        cr_assert((unsigned char)r.text[i] >= 0x20 &&
            (unsigned char)r.text[i] != 0x7f, "byte %zu: %02x", i,
            (unsigned char)r.text[i]);
    cr_assert_str_eq(r.text, "550 5.1.1 \\x1b[2J\\x1b]0;pwned\\x07 x\\x0dFAKE"
        "\\x7f\\xc2\\x9b1m \\xff ok\xc3\xa9");
}


Test(smtp_ehlo, limits_rfc9422)
{
    const char *s = "250-mx.example.org\r\n250-PIPELINING\r\n"
        "250-LIMITS RCPTMAX=20 mailmax=5 RCPTDOMAINMAX=2 FUTURE=7\r\n"
        "250 DSN\r\n";
    struct smtp_ehlo e;
    unsigned    caps = smtp_ehlo_caps(s, strlen(s), &e);

    cr_assert_eq(caps, SMTP_CAP_PIPELINING | SMTP_CAP_LIMITS | SMTP_CAP_DSN);
    cr_assert_eq(e.rcptmax, 20);
    cr_assert_eq(e.mailmax, 5);
    cr_assert_eq(e.rcptdomainmax, 2);
}


Test(smtp_ehlo, limits_malformed_values_are_absent)
{
    const char *s = "250-mx\r\n250-LIMITS RCPTMAX= MAILMAX=3x "
        "RCPTDOMAINMAX=-1 =4 RCPTMAX\r\n250 8BITMIME\r\n";
    const char *big = "250-mx\r\n250 LIMITS RCPTMAX=99999999999999999999\r\n";
    const char *none = "250-mx\r\n250-XLIMITS RCPTMAX=2\r\n"
        "250 RCPTMAX=2\r\n";
    struct smtp_ehlo e;

    cr_assert_eq(smtp_ehlo_caps(s, strlen(s), &e),
        SMTP_CAP_LIMITS | SMTP_CAP_8BITMIME);
    cr_assert_eq(e.rcptmax, 0);
    cr_assert_eq(e.mailmax, 0);
    cr_assert_eq(e.rcptdomainmax, 0);
    cr_assert_eq(smtp_ehlo_caps(big, strlen(big), &e), SMTP_CAP_LIMITS);
    cr_assert_eq(e.rcptmax, UINT32_MAX);
    cr_assert_eq(smtp_ehlo_caps(none, strlen(none), &e), 0);
    cr_assert_eq(e.rcptmax, 0);
}
