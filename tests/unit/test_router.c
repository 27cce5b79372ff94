/*
 * test_router.c - route values, route keys, and the LMDB router: lookup
 * order, case, visibility of another process's writes, refused writes.
 *
 * Each test that needs a db makes its own temp directory (removed in the
 * fini) and opens routes.mdb in it.
 */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "router/router.h"

/*
 * Allocation counter: the executable's malloc/calloc/realloc shadow libc's
 * and count, so a test can check that lookups never allocate.  Not under
 * ASan, which brings its own allocator.
 */
static volatile unsigned long test_allocs;

#if !defined(__SANITIZE_ADDRESS__)
#define TEST_COUNTS_ALLOCS 1
void   *__libc_malloc(size_t);
void   *__libc_calloc(size_t, size_t);
void   *__libc_realloc(void *, size_t);

void *
malloc(size_t n)
{
    test_allocs++;
    return __libc_malloc(n);
}

void *
calloc(size_t n, size_t sz)
{
    test_allocs++;
    return __libc_calloc(n, sz);
}

void *
realloc(void *p, size_t n)
{
    test_allocs++;
    return __libc_realloc(p, n);
}
#endif

/* ---- route_parse: table of good values ------------------------------- */

struct good_case {
    const char     *in;
    enum route_kind kind;
    size_t          nhosts;
    const char     *host0;          /* hosts[0].name */
    unsigned        port0;
    int             literal0;
    const char     *host1;          /* hosts[1].name, or NULL */
    unsigned        port1;
    const char     *path;           /* maildir */
    int             code;           /* reject/defer */
    const char     *text;
};

static const struct good_case good_cases[] = {
    { "smtp:[10.0.0.1]:25", ROUTE_SMTP, 1, "10.0.0.1", 25, 1, NULL, 0, NULL, 0, NULL },
    { "smtp:[10.0.0.1]", ROUTE_SMTP, 1, "10.0.0.1", 25, 1, NULL, 0, NULL, 0, NULL },
    { "smtp:mx.example.org:2525", ROUTE_SMTP, 1, "mx.example.org", 2525, 0, NULL, 0, NULL, 0, NULL },
    { "smtp:mx.example.org", ROUTE_SMTP, 1, "mx.example.org", 25, 0, NULL, 0, NULL, 0, NULL },
    { "smtp:[mx.example.org]:587", ROUTE_SMTP, 1, "mx.example.org", 587, 1, NULL, 0, NULL, 0, NULL },
    { "smtp:127.0.0.1:65535", ROUTE_SMTP, 1, "127.0.0.1", 65535, 0, NULL, 0, NULL, 0, NULL },
    { "smtp:[::1]:2525", ROUTE_SMTP, 1, "::1", 2525, 1, NULL, 0, NULL, 0, NULL },
    { "smtp:[IPv6:::1]:25", ROUTE_SMTP, 1, "::1", 25, 1, NULL, 0, NULL, 0, NULL },
    { "smtp:[ipv6:2001:db8::5]", ROUTE_SMTP, 1, "2001:db8::5", 25, 1, NULL, 0, NULL, 0, NULL },
    { "SMTP:localhost:1", ROUTE_SMTP, 1, "localhost", 1, 0, NULL, 0, NULL, 0, NULL },
    { "smtp:a.example:25,smtp:[b.example]:2525", ROUTE_SMTP, 2, "a.example", 25, 0, "b.example", 2525, NULL, 0, NULL },
    { "smtp:a.example, smtp:[10.1.1.1]:26", ROUTE_SMTP, 2, "a.example", 25, 0, "10.1.1.1", 26, NULL, 0, NULL },
    { "smtp:h1,smtp:h2,smtp:h3,smtp:h4,smtp:h5,smtp:h6,smtp:h7,smtp:h8", ROUTE_SMTP, 8, "h1", 25, 0, "h2", 25, NULL, 0, NULL },
    { "maildir:/var/mail/x", ROUTE_MAILDIR, 0, NULL, 0, 0, NULL, 0, "/var/mail/x", 0, NULL },
    { "maildir:rel/dir", ROUTE_MAILDIR, 0, NULL, 0, 0, NULL, 0, "rel/dir", 0, NULL },
    { "discard", ROUTE_DISCARD, 0, NULL, 0, 0, NULL, 0, NULL, 0, NULL },
    { "mx", ROUTE_MX, 0, NULL, 0, 0, NULL, 0, NULL, 0, NULL },
    { "MX", ROUTE_MX, 0, NULL, 0, 0, NULL, 0, NULL, 0, NULL },
    { "Discard", ROUTE_DISCARD, 0, NULL, 0, 0, NULL, 0, NULL, 0, NULL },
    { "reject:550 5.7.1 no such user", ROUTE_REJECT, 0, NULL, 0, 0, NULL, 0, NULL, 550, "5.7.1 no such user" },
    { "reject:554 5.1.10", ROUTE_REJECT, 0, NULL, 0, 0, NULL, 0, NULL, 554, "5.1.10" },
    { "reject: 550 5.7.1 x", ROUTE_REJECT, 0, NULL, 0, 0, NULL, 0, NULL, 550, "5.7.1 x" },
    { "defer:451 4.3.0 try later", ROUTE_DEFER, 0, NULL, 0, 0, NULL, 0, NULL, 451, "4.3.0 try later" },
    { "defer:421 4.7.0", ROUTE_DEFER, 0, NULL, 0, 0, NULL, 0, NULL, 421, "4.7.0" },
};

Test(route_parse, accepts_every_documented_form)
{
    size_t i;

    for (i = 0; i < sizeof(good_cases) / sizeof(good_cases[0]); i++) {
        const struct good_case *c = &good_cases[i];
        struct route r;
        char why[256] = "";

        cr_expect_eq(route_parse(c->in, &r, why, sizeof(why)), 0,
            "'%s': got -1 (%s), want 0", c->in, why);
        cr_expect_eq(r.kind, c->kind, "'%s': kind %d, want %d", c->in,
            r.kind, c->kind);
        cr_expect_eq(r.nhosts, c->nhosts, "'%s': nhosts %zu, want %zu",
            c->in, r.nhosts, c->nhosts);
        if (c->host0 != NULL) {
            cr_expect_str_eq(r.hosts[0].name, c->host0, "'%s': host0", c->in);
            cr_expect_eq(r.hosts[0].port, c->port0, "'%s': port0 %u", c->in,
                r.hosts[0].port);
            cr_expect_eq(r.hosts[0].literal, c->literal0, "'%s': literal0",
                c->in);
        }
        if (c->host1 != NULL) {
            cr_expect_str_eq(r.hosts[1].name, c->host1, "'%s': host1", c->in);
            cr_expect_eq(r.hosts[1].port, c->port1, "'%s': port1", c->in);
        }
        if (c->path != NULL)
            cr_expect_str_eq(r.path, c->path, "'%s': path", c->in);
        if (c->text != NULL) {
            cr_expect_eq(r.code, c->code, "'%s': code %d", c->in, r.code);
            cr_expect_str_eq(r.text, c->text, "'%s': text", c->in);
        }
    }
}

/* smtp:host (no brackets) is an MX lookup of host, as in Postfix; a
 * bracketed host or an unbracketed IPv4 address is the host itself. */
Test(route_parse, which_hosts_are_mx_lookups)
{
    static const struct { const char *in; int mx; } cases[] = {
        { "smtp:example.org", 1 },
        { "smtp:example.org:2525", 1 },
        { "smtp:localhost", 1 },
        { "smtp:[example.org]", 0 },
        { "smtp:[example.org]:25", 0 },
        { "smtp:192.0.2.1:25", 0 },
        { "smtp:[192.0.2.1]", 0 },
        { "smtp:[::1]:25", 0 },
    };
    struct route r;
    char why[256];
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cr_assert_eq(route_parse(cases[i].in, &r, why, sizeof(why)), 0,
            "'%s': %s", cases[i].in, why);
        cr_expect_eq(route_host_mx(&r.hosts[0]), cases[i].mx,
            "'%s': route_host_mx %d, want %d", cases[i].in,
            route_host_mx(&r.hosts[0]), cases[i].mx);
    }
    cr_expect_eq(route_parse("mx:example.org", &r, why, sizeof(why)), -1);
    cr_expect_str_eq(why, "mx takes no argument (smtp:DOMAIN delivers to "
        "the MX hosts of one domain)");
}

/* ---- route_parse: table of bad values with their exact reasons ------- */

struct bad_case {
    const char *in;
    const char *why;
};

static const struct bad_case bad_cases[] = {
    { "", "empty route" },
    { "smtpx:[10.0.0.1]:25", "unknown route type 'smtpx' (expected smtp:, mx, maildir:, discard, reject:, defer:)" },
    { "relay", "unknown route type 'relay' (expected smtp:, mx, maildir:, discard, reject:, defer:)" },
    { "smtp", "'smtp' needs an argument after ':' (e.g. smtp:[10.0.0.1]:25, maildir:/PATH, reject:550 5.7.1 text, defer:451 4.3.0 text)" },
    { "smtp:", "empty host after 'smtp:'" },
    { "smtp::25", "empty host in 'smtp::25'" },
    { "smtp:[]:25", "empty host in 'smtp:[]:25'" },
    { "smtp:[10.0.0.1:25", "missing ']' in 'smtp:[10.0.0.1:25'" },
    { "smtp:[10.0.0.1]25", "expected ':PORT' after the host in 'smtp:[10.0.0.1]25'" },
    { "smtp:host:0", "bad port '0' (expected 1-65535)" },
    { "smtp:host:65536", "bad port '65536' (expected 1-65535)" },
    { "smtp:host:", "bad port '' (expected 1-65535)" },
    { "smtp:host:2x", "bad port '2x' (expected 1-65535)" },
    { "smtp:10.0.0.256:25", "bad IPv4 address '10.0.0.256'" },
    { "smtp:::1:25", "IPv6 address '::1:25' must be written in brackets, e.g. smtp:[::1]:25" },
    { "smtp:[::g]:25", "bad IPv6 address '::g'" },
    { "smtp:[IPv6:10.0.0.1]", "bad IPv6 address '10.0.0.1'" },
    { "smtp:bad_host:25", "bad host name 'bad_host' (character '_')" },
    { "smtp:-a.example", "bad host name '-a.example' (label starts or ends with '-')" },
    { "smtp:a..example", "bad host name 'a..example' (empty label)" },
    { "smtp:a,,smtp:b", "empty fail-over entry 2" },
    { "smtp:a,", "empty fail-over entry 2" },
    { "smtp:a:25,maildir:/x", "fail-over entry 2: expected 'smtp:HOST:PORT', got 'maildir:/x'" },
    { "smtp:h1,smtp:h2,smtp:h3,smtp:h4,smtp:h5,smtp:h6,smtp:h7,smtp:h8,smtp:h9", "too many fail-over hosts (max 8)" },
    { "maildir:", "maildir needs a path: maildir:/PATH" },
    { "discard:now", "discard takes no argument" },
    { "reject:450 4.7.1 no", "reject needs a 5xx reply code, got '450'" },
    { "reject:5xx 5.7.1 no", "reject needs a 5xx reply code, got '5xx'" },
    { "reject:560 5.7.1 no", "reject needs a 5xx reply code, got '560'" },
    { "reject:5500 5.7.1", "reject needs a 5xx reply code, got '5500'" },
    { "reject:550", "reject: expected an enhanced status code 5.x.x after 550" },
    { "reject:550 4.7.1 no", "reject: enhanced status code must be 5.x.x, got '4.7.1'" },
    { "reject:550 5.7 no", "reject: enhanced status code must be 5.x.x, got '5.7'" },
    { "reject:550 5.7.1000 no", "reject: enhanced status code must be 5.x.x, got '5.7.1000'" },
    { "reject:550 no such user", "reject: enhanced status code must be 5.x.x, got 'no'" },
    { "defer:550 5.7.1 no", "defer needs a 4xx reply code, got '550'" },
    { "defer:451 5.3.0 later", "defer: enhanced status code must be 4.x.x, got '5.3.0'" },
    { "reject:550 5.7.1 caf\xc3\xa9", "reject: reply text must be ASCII" },
    { "reject:550 5.7.1 a\r\nRSET", "control character in route" },
    { " discard", "leading or trailing blank in route" },
    { "discard ", "leading or trailing blank in route" },
};

Test(route_parse, refuses_malformed_values_with_the_reason)
{
    size_t i;

    for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        struct route r;
        char why[256] = "";

        cr_expect_eq(route_parse(bad_cases[i].in, &r, why, sizeof(why)), -1,
            "'%s': got 0, want -1", bad_cases[i].in);
        cr_expect_str_eq(why, bad_cases[i].why, "'%s': got '%s', want '%s'",
            bad_cases[i].in, why, bad_cases[i].why);
    }
}

Test(route_parse, refuses_overlong_values)
{
    char big[ROUTE_VALUE_MAX + 2], why[256];
    struct route r;

    memset(big, 'a', sizeof(big) - 1);
    memcpy(big, "maildir:/", 9);
    big[sizeof(big) - 1] = '\0';
    cr_assert_eq(route_parse(big, &r, why, sizeof(why)), -1);
    cr_assert_str_eq(why, "route too long (1024 bytes, max 1023)");
    big[ROUTE_TEXT_MAX + 8] = '\0';             /* path of 512 bytes */
    cr_assert_eq(route_parse(big, &r, why, sizeof(why)), -1);
    cr_assert_str_eq(why, "maildir path too long (max 511)");
    big[ROUTE_TEXT_MAX + 7] = '\0';             /* 511: fits */
    cr_assert_eq(route_parse(big, &r, why, sizeof(why)), 0, "%s", why);
}

/* ---- route_parse: " pool=NAME" on smtp: and mx ------------------------- */

Test(route_parse, a_trailing_pool_names_the_egress_pool)
{
    static const struct {
        const char *in, *pool;
        enum route_kind kind;
        size_t nhosts;
    } cases[] = {
        { "smtp:[10.0.0.1]:25 pool=bulk", "bulk", ROUTE_SMTP, 1 },
        { "smtp:a:25,smtp:[b]:2525 pool=b-2.x_y", "b-2.x_y", ROUTE_SMTP, 2 },
        { "mx pool=transactional", "transactional", ROUTE_MX, 0 },
        { "MX POOL=p", "p", ROUTE_MX, 0 },
        { "smtp:[10.0.0.1]:25", "", ROUTE_SMTP, 1 },
        { "mx", "", ROUTE_MX, 0 },
        /* other kinds take it as their own text */
        { "reject:550 5.7.1 pool=x", "", ROUTE_REJECT, 0 },
    };
    struct route r;
    char why[256];
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cr_assert_eq(route_parse(cases[i].in, &r, why, sizeof(why)), 0,
            "'%s': %s", cases[i].in, why);
        cr_expect_str_eq(r.pool, cases[i].pool, "'%s': got pool '%s', want "
            "'%s'", cases[i].in, r.pool, cases[i].pool);
        cr_expect_eq(r.kind, cases[i].kind, "'%s'", cases[i].in);
        cr_expect_eq(r.nhosts, cases[i].nhosts, "'%s'", cases[i].in);
    }
    cr_assert_eq(route_parse("smtp:[10.0.0.1]:25 pool=a/b", &r, why,
        sizeof(why)), -1);
    cr_expect_str_eq(why, "bad pool name 'a/b' (1-63 letters, digits, '.', "
        "'_', '-')");
    cr_assert_eq(route_parse("mx pool=", &r, why, sizeof(why)), -1);
    cr_assert_eq(route_parse("smtp:a:25 pool=x pool=y", &r, why,
        sizeof(why)), -1);
    cr_assert_eq(route_parse("maildir:/x pool=y", &r, why, sizeof(why)), 0);
    cr_expect_str_eq(r.path, "/x pool=y");
    cr_expect(route_pool_name_ok("a.b_c-9"));
    cr_expect(!route_pool_name_ok(""));
    cr_expect(!route_pool_name_ok("a b"));
}

/* ---- keys --------------------------------------------------------------- */

Test(route_key, accepts_address_domain_and_wildcard_keys)
{
    static const char *ok[] = {
        "user@example.org", "Postmaster@Example.ORG", "example.org", "org",
        ".example.org", ".org", "a-b.example", "user@[10.0.0.1]",
        "user@[IPv6:::1]", "[10.0.0.1]", "x@b\xc3\xbc" "cher.example",
        "first.last+tag@sub.example.org",
    };
    size_t i;
    char why[256];

    for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        cr_expect_eq(route_key_check(ok[i], why, sizeof(why)), 0,
            "'%s': refused (%s)", ok[i], why);
}

Test(route_key, refuses_malformed_keys_with_the_reason)
{
    static const struct bad_case bad[] = {
        { "", "empty key" },
        { "a b.org", "space or control character in key" },
        { "a\tb.org", "space or control character in key" },
        { "a@b@c.org", "more than one '@' in key 'a@b@c.org'" },
        { "@example.org", "empty local part in key '@example.org'" },
        { "user@", "empty domain in key 'user@'" },
        { ".", "wildcard key '.' needs a domain after the dot (e.g. '.example.org')" },
        { "..example.org", "empty label in domain of key '..example.org'" },
        { "example.org.", "empty label in domain of key 'example.org.'" },
        { "a..b", "empty label in domain of key 'a..b'" },
        { "*.example.org", "bad character '*' in domain of key '*.example.org'" },
        { "-x.example.org", "label starts or ends with '-' in key '-x.example.org'" },
        { ".[10.0.0.1]", "bad address literal in key '.[10.0.0.1]'" },
        { "u@[10.0.0.300]", "bad address literal in key 'u@[10.0.0.300]' (expected [1.2.3.4] or [IPv6:::1])" },
    };
    size_t i;
    char why[256] = "";

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_expect_eq(route_key_check(bad[i].in, why, sizeof(why)), -1,
            "'%s': accepted", bad[i].in);
        cr_expect_str_eq(why, bad[i].why, "'%s': got '%s', want '%s'",
            bad[i].in, why, bad[i].why);
    }
}

Test(route_key, refuses_overlong_parts)
{
    char k[600], why[256];

    memset(k, 'a', 65);
    strcpy(k + 65, "@example.org");
    cr_expect_eq(route_key_check(k, why, sizeof(why)), -1);
    cr_expect_str_eq(why, "local part longer than 64 in key");
    memset(k, 'a', 64);
    strcpy(k + 64, ".example.org");
    cr_expect_eq(route_key_check(k, why, sizeof(why)), -1);
    cr_expect_not_null(strstr(why, "label longer than 63 in key"), "%s", why);
    memset(k, 'a', 400);
    k[400] = '\0';
    cr_expect_eq(route_key_check(k, why, sizeof(why)), -1);
    cr_expect_str_eq(why, "key too long (400 bytes, max 319)");
}

/* route_line_parse - one line of mtactl route import (what export prints);
 * LP(text): the text and its length (a NUL inside counts). */
#define LP(t) line_parse(t, sizeof(t) - 1, &k, &v, why, sizeof(why))
static int
line_parse(const char *text, size_t n, char **k, char **v, char *why,
    size_t whysz)
{
    static char line[256];

    memcpy(line, text, n);
    line[n] = '\0';
    return route_line_parse(line, n, k, v, why, whysz);
}

Test(route_line, entries_blanks_comments_and_reasons)
{
    char *k = NULL, *v = NULL, why[256];

    cr_expect_eq(LP("  one.example\tsmtp:[10.0.0.1]:25, smtp:b  \r\n"), 1);
    cr_expect_str_eq(k, "one.example");
    cr_expect_str_eq(v, "smtp:[10.0.0.1]:25, smtp:b");
    cr_expect_eq(LP(" \t\n"), 0);
    cr_expect_eq(LP("  # a comment\n"), 0);
    cr_expect_eq(LP("three.example\n"), -1);
    cr_expect_str_eq(why, "missing route after key 'three.example'");
    /* a key is checked before a reason names it */
    cr_expect_eq(LP("\x1b[2J.example\n"), -1);
    cr_expect_str_eq(why, "bad key: space or control character in key");
    /* a NUL does not end the line: the rest would go unchecked */
    cr_expect_eq(LP("a.example discard\0 smtp:x\n"), -1);
    cr_expect_str_eq(why, "NUL byte in line");
}
#undef LP

Test(route_key, normalize_lower_cases_ascii_only)
{
    char k[] = "User@Example.ORG\xc3\x9c";

    route_key_normalize(k);
    cr_assert_str_eq(k, "user@example.org\xc3\x9c");
}

/* ---- the LMDB router ------------------------------------------------ */

static char tdir[256];
static char tdb[300];

static int
rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(p);
}

static void
db_setup(void)
{
    snprintf(tdir, sizeof(tdir), "/tmp/test_router.XXXXXX");
    cr_assert_not_null(mkdtemp(tdir));
    snprintf(tdb, sizeof(tdb), "%s/routes.mdb", tdir);
}

static void
db_teardown(void)
{
    nftw(tdir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

#define DEFAULT_ROUTE "smtp:[192.0.2.1]:25"

static struct router *
db_open(void)
{
    struct router *r = NULL;
    int rc = router_open(&r, tdb, DEFAULT_ROUTE, 1);

    cr_assert_eq(rc, ROUTER_OK, "router_open: %s", router_errstr(r));
    return r;
}

static void
put(struct router *r, const char *k, const char *v)
{
    cr_assert_eq(router_put(r, k, v), ROUTER_OK, "put %s: %s", k,
        router_errstr(r));
}

static void
expect_route(struct router *r, const char *addr, enum router_match m,
    const char *key, const char *value)
{
    struct router_result res;
    int rc = router_lookup(r, addr, &res);

    cr_expect_eq(rc, ROUTER_OK, "lookup %s: %s", addr, router_errstr(r));
    if (rc != ROUTER_OK)
        return;
    cr_expect_eq(res.match, m, "'%s': match %d, want %d (key %s)", addr,
        res.match, m, res.key);
    cr_expect_str_eq(res.key, key, "'%s': key '%s', want '%s'", addr,
        res.key, key);
    cr_expect_str_eq(res.value, value, "'%s': value '%s', want '%s'", addr,
        res.value, value);
}

TestSuite(router, .init = db_setup, .fini = db_teardown);

Test(router, open_without_create_needs_the_file)
{
    struct router *r = NULL;

    cr_assert_eq(router_open(&r, tdb, DEFAULT_ROUTE, 0), ROUTER_ESYS);
    cr_assert_not_null(strstr(router_errstr(r), "No such file"), "%s",
        router_errstr(r));
    router_close(r);
    r = db_open();
    router_close(r);
    cr_assert_eq(router_open(&r, tdb, DEFAULT_ROUTE, 0), ROUTER_OK, "%s",
        router_errstr(r));
    router_close(r);
    cr_assert_eq(access(tdb, F_OK), 0, "the db is one file");
}

Test(router, open_refuses_a_malformed_default)
{
    struct router *r = NULL;

    cr_assert_eq(router_open(&r, tdb, "smtp:[10.0.0.1]:99999", 1),
        ROUTER_EINVAL);
    cr_assert_str_eq(router_errstr(r), "routes.default "
        "'smtp:[10.0.0.1]:99999': bad port '99999' (expected 1-65535)");
    router_close(r);
}

Test(router, lookup_order_address_domain_nearest_wildcard_default)
{
    struct router *r = db_open();

    put(r, "alice@a.b.example.org", "smtp:[10.0.0.1]:25");
    put(r, "a.b.example.org", "smtp:[10.0.0.2]:25");
    put(r, ".b.example.org", "smtp:[10.0.0.3]:25");
    put(r, ".example.org", "smtp:[10.0.0.4]:25");
    put(r, ".org", "smtp:[10.0.0.5]:25");
    put(r, "example.org", "maildir:/tmp/x");

    /* address beats domain */
    expect_route(r, "alice@a.b.example.org", ROUTER_MATCH_ADDRESS,
        "alice@a.b.example.org", "smtp:[10.0.0.1]:25");
    /* domain beats the wildcards */
    expect_route(r, "bob@a.b.example.org", ROUTER_MATCH_DOMAIN,
        "a.b.example.org", "smtp:[10.0.0.2]:25");
    /* the nearest wildcard beats the farther ones */
    expect_route(r, "bob@c.b.example.org", ROUTER_MATCH_WILDCARD,
        ".b.example.org", "smtp:[10.0.0.3]:25");
    expect_route(r, "bob@x.y.c.b.example.org", ROUTER_MATCH_WILDCARD,
        ".b.example.org", "smtp:[10.0.0.3]:25");
    expect_route(r, "bob@c.example.org", ROUTER_MATCH_WILDCARD,
        ".example.org", "smtp:[10.0.0.4]:25");
    /* ".example.org" is for subdomains only: example.org has its own key */
    expect_route(r, "bob@example.org", ROUTER_MATCH_DOMAIN,
        "example.org", "maildir:/tmp/x");
    expect_route(r, "bob@other.org", ROUTER_MATCH_WILDCARD, ".org",
        "smtp:[10.0.0.5]:25");
    /* nothing matches */
    expect_route(r, "bob@example.net", ROUTER_MATCH_DEFAULT, "default",
        DEFAULT_ROUTE);
    expect_route(r, "", ROUTER_MATCH_DEFAULT, "default", DEFAULT_ROUTE);
    expect_route(r, "<>", ROUTER_MATCH_DEFAULT, "default", DEFAULT_ROUTE);
    router_close(r);
}

Test(router, wildcard_does_not_match_its_own_domain)
{
    struct router *r = db_open();

    put(r, ".example.org", "discard");
    expect_route(r, "u@example.org", ROUTER_MATCH_DEFAULT, "default",
        DEFAULT_ROUTE);
    expect_route(r, "u@sub.example.org", ROUTER_MATCH_WILDCARD,
        ".example.org", "discard");
    router_close(r);
}

Test(router, address_without_at_uses_the_address_key_only)
{
    struct router *r = db_open();

    put(r, "postmaster", "maildir:/tmp/pm");
    put(r, ".postmaster", "discard");
    expect_route(r, "postmaster", ROUTER_MATCH_ADDRESS, "postmaster",
        "maildir:/tmp/pm");
    expect_route(r, "abuse", ROUTER_MATCH_DEFAULT, "default", DEFAULT_ROUTE);
    router_close(r);
}

Test(router, lookups_and_keys_ignore_case)
{
    struct router *r = db_open();
    struct router_result res;

    put(r, "Alice@Example.ORG", "reject:550 5.1.1 gone");
    put(r, "EXAMPLE.net", "discard");
    put(r, ".Sub.Example.COM", "defer:451 4.3.0 later");
    expect_route(r, "ALICE@example.org", ROUTER_MATCH_ADDRESS,
        "alice@example.org", "reject:550 5.1.1 gone");
    expect_route(r, "<Bob@Example.Net>", ROUTER_MATCH_DOMAIN, "example.net",
        "discard");
    expect_route(r, "x@A.SUB.example.com", ROUTER_MATCH_WILDCARD,
        ".sub.example.com", "defer:451 4.3.0 later");
    cr_assert_eq(router_lookup(r, "alice@EXAMPLE.org", &res), ROUTER_OK);
    cr_expect_eq(res.route.kind, ROUTE_REJECT);
    cr_expect_eq(res.route.code, 550);
    cr_expect_str_eq(res.route.text, "5.1.1 gone");
    router_close(r);
}

Test(router, result_carries_the_parsed_route)
{
    struct router *r = db_open();
    struct router_result res;

    put(r, "example.org", "smtp:[10.0.0.1]:2525, smtp:mx2.example.org");
    cr_assert_eq(router_lookup(r, "u@example.org", &res), ROUTER_OK);
    cr_expect_eq(res.route.kind, ROUTE_SMTP);
    cr_expect_eq(res.route.nhosts, 2);
    cr_expect_str_eq(res.route.hosts[0].name, "10.0.0.1");
    cr_expect_eq(res.route.hosts[0].port, 2525);
    cr_expect_str_eq(res.route.hosts[1].name, "mx2.example.org");
    cr_expect_eq(res.route.hosts[1].port, 25);
    cr_assert_eq(router_lookup(r, "u@example.com", &res), ROUTER_OK);
    cr_expect_eq(res.match, ROUTER_MATCH_DEFAULT);
    cr_expect_str_eq(res.route.hosts[0].name, "192.0.2.1");
    router_close(r);
}

Test(router, no_default_means_not_found)
{
    struct router *r = NULL;
    struct router_result res;

    cr_assert_eq(router_open(&r, tdb, NULL, 1), ROUTER_OK, "%s",
        router_errstr(r));
    cr_expect_eq(router_lookup(r, "u@example.org", &res), ROUTER_ENOTFOUND);
    put(r, "example.org", "discard");
    cr_expect_eq(router_lookup(r, "u@example.org", &res), ROUTER_OK);
    router_close(r);
}

Test(router, overlong_address_still_matches_its_domain)
{
    struct router *r = db_open();
    char addr[800];

    put(r, "example.org", "discard");
    memset(addr, 'x', 700);
    strcpy(addr + 700, "@Example.org");
    expect_route(r, addr, ROUTER_MATCH_DOMAIN, "example.org", "discard");
    router_close(r);
}

Test(router, put_refuses_malformed_values_and_keys)
{
    struct router *r = db_open();
    struct router_result res;

    cr_expect_eq(router_put(r, "example.org", "smtpx:[10.0.0.1]:25"),
        ROUTER_EINVAL);
    cr_expect_str_eq(router_errstr(r), "bad route for 'example.org': unknown "
        "route type 'smtpx' (expected smtp:, mx, maildir:, discard, reject:, "
        "defer:)");
    cr_expect_eq(router_put(r, "example.org", "reject:450 4.1.1 no"),
        ROUTER_EINVAL);
    cr_expect_eq(router_put(r, "bad key", "discard"), ROUTER_EINVAL);
    cr_expect_str_eq(router_errstr(r), "bad key: space or control character "
        "in key");
    /* nothing was written */
    expect_route(r, "u@example.org", ROUTER_MATCH_DEFAULT, "default",
        DEFAULT_ROUTE);
    cr_expect_eq(router_lookup(r, "u@example.org", &res), ROUTER_OK);
    router_close(r);
}

Test(router, del_removes_and_reports_missing_keys)
{
    struct router *r = db_open();

    put(r, "example.org", "discard");
    expect_route(r, "u@example.org", ROUTER_MATCH_DOMAIN, "example.org",
        "discard");
    cr_assert_eq(router_del(r, "EXAMPLE.org"), ROUTER_OK, "%s",
        router_errstr(r));
    expect_route(r, "u@example.org", ROUTER_MATCH_DEFAULT, "default",
        DEFAULT_ROUTE);
    cr_expect_eq(router_del(r, "example.org"), ROUTER_ENOTFOUND);
    cr_expect_str_eq(router_errstr(r), "no such key 'example.org'");
    router_close(r);
}

struct each_acc {
    char    text[4096];
    int     stop_after;
    int     n;
};

static int
each_cb(const char *k, const char *v, void *arg)
{
    struct each_acc *a = arg;
    size_t len = strlen(a->text);

    snprintf(a->text + len, sizeof(a->text) - len, "%s=%s;", k, v);
    return ++a->n == a->stop_after;
}

Test(router, each_walks_keys_in_order_and_can_stop)
{
    struct router *r = db_open();
    struct each_acc a;

    put(r, "b.example", "discard");
    put(r, "A.example", "maildir:/m");
    put(r, ".c.example", "defer:451 4.0.0 x");
    memset(&a, 0, sizeof(a));
    cr_assert_eq(router_each(r, each_cb, &a), ROUTER_OK);
    cr_expect_str_eq(a.text, ".c.example=defer:451 4.0.0 x;a.example="
        "maildir:/m;b.example=discard;");
    memset(&a, 0, sizeof(a));
    a.stop_after = 1;
    cr_assert_eq(router_each(r, each_cb, &a), ROUTER_OK);
    cr_expect_eq(a.n, 1);
    /* the read txn is usable again after each */
    expect_route(r, "u@b.example", ROUTER_MATCH_DOMAIN, "b.example",
        "discard");
    router_close(r);
}

Test(router, batch_is_all_or_nothing)
{
    struct router *r = db_open();

    put(r, "keep.example", "discard");
    cr_assert_eq(router_begin(r), ROUTER_OK);
    put(r, "one.example", "discard");
    cr_assert_eq(router_clear(r), ROUTER_OK);
    put(r, "two.example", "discard");
    /* not committed: lookups still see the old state */
    expect_route(r, "u@keep.example", ROUTER_MATCH_DOMAIN, "keep.example",
        "discard");
    expect_route(r, "u@two.example", ROUTER_MATCH_DEFAULT, "default",
        DEFAULT_ROUTE);
    router_abort(r);
    expect_route(r, "u@two.example", ROUTER_MATCH_DEFAULT, "default",
        DEFAULT_ROUTE);

    cr_assert_eq(router_begin(r), ROUTER_OK);
    cr_assert_eq(router_clear(r), ROUTER_OK);
    put(r, "two.example", "discard");
    cr_assert_eq(router_commit(r), ROUTER_OK, "%s", router_errstr(r));
    expect_route(r, "u@two.example", ROUTER_MATCH_DOMAIN, "two.example",
        "discard");
    expect_route(r, "u@keep.example", ROUTER_MATCH_DEFAULT, "default",
        DEFAULT_ROUTE);
    router_close(r);
}

Test(router, write_from_another_process_is_seen_without_reopen)
{
    struct router *r = db_open();
    int status;
    pid_t pid;

    put(r, "example.org", "smtp:[10.0.0.1]:25");
    expect_route(r, "u@example.org", ROUTER_MATCH_DOMAIN, "example.org",
        "smtp:[10.0.0.1]:25");
    pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        /* The child opens its own environment: LMDB handles must not
         * cross a fork.  The parent's handle is left alone. */
        struct router *c = NULL;
        int rc = router_open(&c, tdb, DEFAULT_ROUTE, 0);

        if (rc == ROUTER_OK)
            rc = router_put(c, "example.org", "smtp:[10.0.0.9]:2525");
        if (rc == ROUTER_OK)
            rc = router_put(c, "new.example", "discard");
        _exit(rc == ROUTER_OK ? 0 : 1);
    }
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    expect_route(r, "u@example.org", ROUTER_MATCH_DOMAIN, "example.org",
        "smtp:[10.0.0.9]:2525");
    expect_route(r, "u@new.example", ROUTER_MATCH_DOMAIN, "new.example",
        "discard");
    router_close(r);
}

#ifdef TEST_COUNTS_ALLOCS
Test(router, lookups_do_not_allocate)
{
    struct router *r = db_open();
    struct router_result res;
    unsigned long before;
    int i;

    put(r, "example.org", "smtp:[10.0.0.1]:25");
    put(r, ".example.net", "discard");
    cr_assert_eq(router_lookup(r, "u@example.org", &res), ROUTER_OK);
    before = test_allocs;
    for (i = 0; i < 1000; i++) {
        cr_assert_eq(router_lookup(r, "u@example.org", &res), ROUTER_OK);
        cr_assert_eq(router_lookup(r, "u@a.b.example.net", &res), ROUTER_OK);
        cr_assert_eq(router_lookup(r, "u@nowhere.invalid", &res), ROUTER_OK);
    }
    cr_expect_eq(test_allocs, before, "%lu allocations in 3000 lookups",
        test_allocs - before);
    router_close(r);
    /* the counter does count: opening a router allocates */
    before = test_allocs;
    r = db_open();
    cr_expect_gt(test_allocs, before);
    router_close(r);
}
#endif

Test(router, load_static_is_checked_whole_then_written)
{
    struct router *r = db_open();
    struct router_static bad[] = {
        { 10, 5, "one.example", "discard" },
        { 11, 5, "two.example", "smtp:[10.0.0.1]:0" },
    };
    struct router_static good[] = {
        { 10, 5, "one.example", "discard" },
        { 11, 5, "two.example", "smtp:[10.0.0.1]:2525" },
    };

    cr_assert_eq(router_load_static(r, bad, 2), ROUTER_EINVAL);
    cr_expect_str_eq(router_errstr(r), "routes.static line 11: bad port '0' "
        "(expected 1-65535)");
    expect_route(r, "u@one.example", ROUTER_MATCH_DEFAULT, "default",
        DEFAULT_ROUTE);
    put(r, "two.example", "discard");
    put(r, "kept.example", "discard");
    cr_assert_eq(router_load_static(r, good, 2), ROUTER_OK, "%s",
        router_errstr(r));
    expect_route(r, "u@one.example", ROUTER_MATCH_DOMAIN, "one.example",
        "discard");
    expect_route(r, "u@two.example", ROUTER_MATCH_DOMAIN, "two.example",
        "smtp:[10.0.0.1]:2525");
    expect_route(r, "u@kept.example", ROUTER_MATCH_DOMAIN, "kept.example",
        "discard");
    router_close(r);
}


/* ---- the TLS policy table (ROUTER_TLS_DB) ---- */

static void
expect_tls(struct router *r, const char *key, const char *want)
{
    char v[ROUTER_TLS_VALUE_MAX + 1];
    int  rc = router_tls_get(r, key, v, sizeof(v));

    if (want == NULL) {
        cr_expect_eq(rc, ROUTER_ENOTFOUND, "tls %s: rc %d (%s)", key, rc,
            router_errstr(r));
        return;
    }
    cr_expect_eq(rc, ROUTER_OK, "tls %s: %s", key, router_errstr(r));
    if (rc == ROUTER_OK)
        cr_expect_str_eq(v, want, "tls %s", key);
}

Test(router, tls_levels_are_the_six_words)
{
    static const char *const w[] = { "none", "may", "encrypt", "verify",
        "dane", "dane-only" };
    int i;

    for (i = 0; i < 6; i++) {
        cr_expect_eq(router_tls_level(w[i]), i, "%s", w[i]);
        cr_expect_str_eq(router_tls_level_name(i), w[i]);
    }
    cr_expect_eq(router_tls_level("Verify"), -1);
    cr_expect_eq(router_tls_level(NULL), -1);
    cr_expect_str_eq(router_tls_level_name(6), "?");
}

Test(router, tls_policy_put_get_del_each)
{
    struct router  *r = db_open();
    struct each_acc a;

    expect_tls(r, "example.org", NULL);
    cr_assert_eq(router_tls_put(r, "Example.ORG", "verify"), ROUTER_OK,
        "%s", router_errstr(r));
    cr_assert_eq(router_tls_put(r, ".example.net", "encrypt"), ROUTER_OK);
    expect_tls(r, "example.org", "verify");
    expect_tls(r, ".example.net", "encrypt");
    cr_assert_eq(router_tls_put(r, "example.org", "dane-only"), ROUTER_OK);
    expect_tls(r, "example.org", "dane-only");
    cr_expect_eq(router_tls_put(r, "example.org", "sometimes"),
        ROUTER_EINVAL);
    cr_expect_not_null(strstr(router_errstr(r), "bad TLS level"));
    cr_expect_eq(router_tls_put(r, "bad key", "may"), ROUTER_EINVAL);
    memset(&a, 0, sizeof(a));
    cr_assert_eq(router_tls_each(r, each_cb, &a), ROUTER_OK);
    cr_expect_str_eq(a.text, ".example.net=encrypt;example.org=dane-only;");
    cr_assert_eq(router_tls_del(r, "example.org"), ROUTER_OK);
    expect_tls(r, "example.org", NULL);
    cr_expect_eq(router_tls_del(r, "example.org"), ROUTER_ENOTFOUND);
    router_close(r);
}

Test(router, tls_table_is_apart_from_routes)
{
    struct router  *r = db_open();
    struct each_acc a;

    put(r, "b.example", "discard");
    cr_assert_eq(router_tls_put(r, "b.example", "verify"), ROUTER_OK);
    /* the routes walk does not see the table's record */
    memset(&a, 0, sizeof(a));
    cr_assert_eq(router_each(r, each_cb, &a), ROUTER_OK);
    cr_expect_str_eq(a.text, "b.example=discard;");
    /* clearing the routes (route import --replace) keeps the table */
    cr_assert_eq(router_clear(r), ROUTER_OK, "%s", router_errstr(r));
    memset(&a, 0, sizeof(a));
    cr_assert_eq(router_each(r, each_cb, &a), ROUTER_OK);
    cr_expect_str_eq(a.text, "");
    expect_tls(r, "b.example", "verify");
    router_close(r);
}

Test(router, tls_write_is_seen_by_a_read_only_reader)
{
    struct router *w = db_open(), *ro = NULL;

    cr_assert_eq(router_open(&ro, tdb, DEFAULT_ROUTE, ROUTER_OPEN_RDONLY),
        ROUTER_OK, "%s", router_errstr(ro));
    expect_tls(ro, "example.org", NULL);
    cr_assert_eq(router_tls_put(w, "example.org", "encrypt"), ROUTER_OK);
    expect_tls(ro, "example.org", "encrypt");
    cr_expect_eq(router_tls_put(ro, "example.org", "may"), ROUTER_ESYS);
    router_close(ro);
    router_close(w);
}


static void snap_write(struct router *w, const char *path);

/* expect_pool - the pool table's entry for key is want (NULL: none). */
static void
expect_pool(struct router *r, const char *key, const char *want)
{
    char v[ROUTER_POOL_VALUE_MAX + 1];
    int  rc = router_pool_get(r, key, v, sizeof(v));

    if (want == NULL) {
        cr_expect_eq(rc, ROUTER_ENOTFOUND, "%s: got %d", key, rc);
        return;
    }
    cr_assert_eq(rc, ROUTER_OK, "%s: %s", key, router_errstr(r));
    cr_expect_str_eq(v, want);
}

Test(router, sender_pool_table_beside_routes_and_tls)
{
    struct router  *r = db_open(), *s = NULL;
    struct each_acc a;
    char            snap[PATH_MAX + 8];

    expect_pool(r, "example.org", NULL);
    cr_assert_eq(router_pool_put(r, "Example.ORG", "bulk"), ROUTER_OK,
        "%s", router_errstr(r));
    cr_assert_eq(router_pool_put(r, ".example.net", "tx-1"), ROUTER_OK);
    expect_pool(r, "example.org", "bulk");
    expect_pool(r, ".example.net", "tx-1");
    cr_expect_eq(router_pool_put(r, "example.org", "a b"), ROUTER_EINVAL);
    cr_expect_not_null(strstr(router_errstr(r), "bad pool name"));
    cr_expect_eq(router_pool_put(r, "u@example.org", "bulk"), ROUTER_EINVAL);
    cr_expect_not_null(strstr(router_errstr(r), "sender domains"));
    cr_assert_eq(router_tls_put(r, "example.org", "verify"), ROUTER_OK);
    put(r, "example.org", "discard");
    /* each table walks its own entries only */
    memset(&a, 0, sizeof(a));
    cr_assert_eq(router_pool_each(r, each_cb, &a), ROUTER_OK);
    cr_expect_str_eq(a.text, ".example.net=tx-1;example.org=bulk;");
    memset(&a, 0, sizeof(a));
    cr_assert_eq(router_each(r, each_cb, &a), ROUTER_OK);
    cr_expect_str_eq(a.text, "example.org=discard;");
    /* in the snapshot the workers read */
    snprintf(snap, sizeof(snap), "%s/snap.mdb", tdir);
    snap_write(r, snap);
    cr_assert_eq(router_open(&s, snap, DEFAULT_ROUTE, ROUTER_OPEN_SNAPSHOT),
        ROUTER_OK, "%s", router_errstr(s));
    expect_pool(s, "example.org", "bulk");
    router_close(s);
    /* clearing the routes keeps it */
    cr_assert_eq(router_clear(r), ROUTER_OK, "%s", router_errstr(r));
    expect_pool(r, "example.org", "bulk");
    cr_assert_eq(router_pool_del(r, "example.org"), ROUTER_OK);
    expect_pool(r, "example.org", NULL);
    cr_expect_eq(router_pool_del(r, "example.org"), ROUTER_ENOTFOUND);
    router_close(r);
}


/* snap_write - the table of w as a snapshot file at path. */
static void
snap_write(struct router *w, const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0640);

    cr_assert_geq(fd, 0);
    cr_assert_eq(router_snapshot(w, fd), ROUTER_OK, "%s", router_errstr(w));
    close(fd);
}

Test(router, snapshot_has_routes_and_tls_and_needs_no_lock_file)
{
    struct router *w = db_open(), *s = NULL;
    char           snap[PATH_MAX + 8], lock[PATH_MAX + 16];
    struct stat    st;

    put(w, "example.org", "smtp:[10.0.0.1]:25");
    cr_assert_eq(router_tls_put(w, "example.org", "verify"), ROUTER_OK);
    snprintf(snap, sizeof(snap), "%s/snap.mdb", tdir);
    snap_write(w, snap);
    chmod(snap, 0440);              /* what a reader gets: nothing to write */
    cr_assert_eq(router_open(&s, snap, DEFAULT_ROUTE, ROUTER_OPEN_SNAPSHOT),
        ROUTER_OK, "%s", router_errstr(s));
    expect_route(s, "u@example.org", ROUTER_MATCH_DOMAIN, "example.org",
        "smtp:[10.0.0.1]:25");
    expect_route(s, "u@other.example", ROUTER_MATCH_DEFAULT, "default",
        DEFAULT_ROUTE);
    expect_tls(s, "example.org", "verify");
    cr_expect_neq(router_put(s, "a.example", "discard"), ROUTER_OK);
    snprintf(lock, sizeof(lock), "%s-lock", snap);
    cr_expect_eq(stat(lock, &st), -1, "no lock file next to a snapshot");
    /* a later write to the live table is not in the snapshot */
    put(w, "later.example", "discard");
    expect_route(s, "u@later.example", ROUTER_MATCH_DEFAULT, "default",
        DEFAULT_ROUTE);
    router_close(s);
    router_close(w);
}

Test(router, reopen_switches_to_the_new_snapshot_and_keeps_the_old_on_error)
{
    struct router *w = db_open(), *s = NULL;
    char           snap[PATH_MAX + 8], next[PATH_MAX + 8];

    snprintf(snap, sizeof(snap), "%s/snap.mdb", tdir);
    snprintf(next, sizeof(next), "%s/next.mdb", tdir);
    put(w, "a.example", "discard");
    snap_write(w, snap);
    cr_assert_eq(router_open(&s, snap, NULL, ROUTER_OPEN_SNAPSHOT),
        ROUTER_OK, "%s", router_errstr(s));
    expect_route(s, "u@a.example", ROUTER_MATCH_DOMAIN, "a.example",
        "discard");
    put(w, "b.example", "smtp:[10.0.0.2]:25");
    cr_assert_eq(router_tls_put(w, "b.example", "dane"), ROUTER_OK);
    snap_write(w, next);
    cr_assert_eq(rename(next, snap), 0);   /* as the master publishes */
    cr_assert_eq(router_reopen(s, snap, ROUTER_OPEN_SNAPSHOT), ROUTER_OK,
        "%s", router_errstr(s));
    expect_route(s, "u@b.example", ROUTER_MATCH_DOMAIN, "b.example",
        "smtp:[10.0.0.2]:25");
    expect_tls(s, "b.example", "dane");
    cr_expect_eq(router_reopen(s, "/nonexistent/snap.mdb",
        ROUTER_OPEN_SNAPSHOT), ROUTER_ESYS);
    cr_expect_neq(router_errstr(s)[0], '\0');
    expect_route(s, "u@b.example", ROUTER_MATCH_DOMAIN, "b.example",
        "smtp:[10.0.0.2]:25");
    router_close(s);
    router_close(w);
}

Test(router, snapshot_path_is_a_directory_beside_the_db)
{
    char dir[64], file[64], big[128];

    cr_assert_eq(router_snapshot_path("/var/lib/mtad/routes.mdb", dir,
        sizeof(dir), file, sizeof(file)), ROUTER_OK);
    cr_expect_str_eq(dir, "/var/lib/mtad/routes.mdb.snapshot");
    cr_expect_str_eq(file, "/var/lib/mtad/routes.mdb.snapshot/routes.mdb");
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_expect_eq(router_snapshot_path(big, dir, sizeof(dir), file,
        sizeof(file)), ROUTER_ESYS);
}
