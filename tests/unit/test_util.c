/*
 * test_util.c - the value parsers of common/util.c (sizes, durations,
 * host:port, CIDR), CIDR matching (v4, v6, v4-mapped v6), the address
 * formatters and the small string helpers.  Table-driven.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "common/util.h"

#define BAD 1                   /* the parse must fail */

Test(util, parse_size)
{
    static const struct { const char *s; int bad; uint64_t v; } t[] = {
        { "0", 0, 0 },
        { "1234", 0, 1234 },
        { "512K", 0, 512 * 1024 },
        { "512k", 0, 512 * 1024 },
        { "50M", 0, 50ull * 1024 * 1024 },
        { "50m", 0, 50ull * 1024 * 1024 },
        { "1G", 0, 1024ull * 1024 * 1024 },
        { "3g", 0, 3ull * 1024 * 1024 * 1024 },
        { "18446744073709551615", 0, UINT64_MAX },
        { "18446744073709551616", BAD, 0 },     /* overflows */
        { "17179869184G", BAD, 0 },             /* 2^34 G overflows */
        { "", BAD, 0 },
        { "M", BAD, 0 },
        { "5X", BAD, 0 },
        { "5MB", BAD, 0 },
        { "5 M", BAD, 0 },
        { " 5M", BAD, 0 },
        { "-5M", BAD, 0 },
        { "+5", BAD, 0 },
        { "1.5M", BAD, 0 },
        { "5T", BAD, 0 },
    };
    size_t i;

    for (i = 0; i < ARRAY_LEN(t); i++) {
        uint64_t v = 4242;
        int rc = util_parse_size(t[i].s, &v);

        if (t[i].bad) {
            cr_expect_eq(rc, -1, "'%s' accepted", t[i].s);
            cr_expect_eq(v, 4242, "'%s' changed the value", t[i].s);
        } else {
            cr_expect_eq(rc, 0, "'%s' refused", t[i].s);
            cr_expect_eq(v, t[i].v, "'%s' -> %llu", t[i].s,
                (unsigned long long)v);
        }
    }
}

Test(util, parse_duration)
{
    static const struct { const char *s; int bad; uint64_t v; } t[] = {
        { "0", 0, 0 },
        { "30", 0, 30000 },             /* bare number: seconds */
        { "100ms", 0, 100 },
        { "30s", 0, 30000 },
        { "5m", 0, 300000 },
        { "1h", 0, 3600000 },
        { "4h", 0, 14400000 },
        { "5d", 0, 432000000 },
        { "0s", 0, 0 },
        { "", BAD, 0 },
        { "s", BAD, 0 },
        { "ms", BAD, 0 },
        { "5x", BAD, 0 },
        { "5 s", BAD, 0 },
        { "5S", BAD, 0 },
        { "5M", BAD, 0 },
        { "5mss", BAD, 0 },
        { "5sm", BAD, 0 },
        { "1.5h", BAD, 0 },
        { "-1s", BAD, 0 },
        { "5w", BAD, 0 },
        { "18446744073709551615d", BAD, 0 },    /* overflows */
        { "18446744073709551615ms", 0, UINT64_MAX },
    };
    size_t i;

    for (i = 0; i < ARRAY_LEN(t); i++) {
        uint64_t v = 4242;
        int rc = util_parse_duration(t[i].s, &v);

        if (t[i].bad) {
            cr_expect_eq(rc, -1, "'%s' accepted", t[i].s);
            cr_expect_eq(v, 4242, "'%s' changed the value", t[i].s);
        } else {
            cr_expect_eq(rc, 0, "'%s' refused", t[i].s);
            cr_expect_eq(v, t[i].v, "'%s' -> %llu", t[i].s,
                (unsigned long long)v);
        }
    }
}

Test(util, parse_hostport)
{
    static const struct {
        const char *s;
        int bad;
        int family;
        const char *ip;
        unsigned port;
    } t[] = {
        { "127.0.0.1:2525", 0, AF_INET, "127.0.0.1", 2525 },
        { "0.0.0.0:25", 0, AF_INET, "0.0.0.0", 25 },
        { "*:25", 0, AF_INET, "0.0.0.0", 25 },
        { "10.1.2.3:65535", 0, AF_INET, "10.1.2.3", 65535 },
        { "[::1]:25", 0, AF_INET6, "::1", 25 },
        { "[::]:587", 0, AF_INET6, "::", 587 },
        { "[2001:db8::7]:2525", 0, AF_INET6, "2001:db8::7", 2525 },
        { "[::ffff:127.0.0.1]:25", 0, AF_INET6, "::ffff:127.0.0.1", 25 },
        { "127.0.0.1", BAD, 0, NULL, 0 },
        { "127.0.0.1:", BAD, 0, NULL, 0 },
        { "127.0.0.1:0", BAD, 0, NULL, 0 },
        { "127.0.0.1:65536", BAD, 0, NULL, 0 },
        { "127.0.0.1:25x", BAD, 0, NULL, 0 },
        { "127.0.0.1:-25", BAD, 0, NULL, 0 },
        { "127.0.0.1:000025", BAD, 0, NULL, 0 },
        { ":25", BAD, 0, NULL, 0 },
        { "localhost:25", BAD, 0, NULL, 0 },
        { "127.1:25", BAD, 0, NULL, 0 },
        { "256.0.0.1:25", BAD, 0, NULL, 0 },
        { "::1:25", BAD, 0, NULL, 0 },
        { "[::1]", BAD, 0, NULL, 0 },
        { "[::1]25", BAD, 0, NULL, 0 },
        { "[::1:25", BAD, 0, NULL, 0 },
        { "[]:25", BAD, 0, NULL, 0 },
        { "[127.0.0.1]:25", BAD, 0, NULL, 0 },
        { "", BAD, 0, NULL, 0 },
    };
    size_t i;

    for (i = 0; i < ARRAY_LEN(t); i++) {
        struct sockaddr_storage ss;
        socklen_t len = 77;
        char ip[INET6_ADDRSTRLEN], str[80], want[80];
        int rc;

        memset(&ss, 0xaa, sizeof(ss));
        rc = util_parse_hostport(t[i].s, &ss, &len);
        if (t[i].bad) {
            cr_expect_eq(rc, -1, "'%s' accepted", t[i].s);
            cr_expect_eq(len, 77, "'%s' changed len", t[i].s);
            continue;
        }
        cr_expect_eq(rc, 0, "'%s' refused", t[i].s);
        if (rc != 0)
            continue;
        cr_expect_eq(ss.ss_family, t[i].family, "'%s' family", t[i].s);
        cr_expect_eq(len, t[i].family == AF_INET ?
            sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
        cr_expect_str_eq(util_sockaddr_ip((struct sockaddr *)&ss, ip,
            sizeof(ip)), t[i].ip, "'%s'", t[i].s);
        snprintf(want, sizeof(want), "[%s]:%u", t[i].ip, t[i].port);
        cr_expect_str_eq(util_sockaddr_str((struct sockaddr *)&ss, str,
            sizeof(str)), want, "'%s'", t[i].s);
    }
}

Test(util, parse_cidr)
{
    static const struct {
        const char *s;
        int bad;
        int family;
        unsigned prefix;
        const char *net;        /* the stored (masked) address */
    } t[] = {
        { "127.0.0.0/8", 0, AF_INET, 8, "127.0.0.0" },
        { "10.1.2.3", 0, AF_INET, 32, "10.1.2.3" },
        { "10.1.2.3/8", 0, AF_INET, 8, "10.0.0.0" },  /* host bits cleared */
        { "192.168.77.1/20", 0, AF_INET, 20, "192.168.64.0" },
        { "0.0.0.0/0", 0, AF_INET, 0, "0.0.0.0" },
        { "1.2.3.4/32", 0, AF_INET, 32, "1.2.3.4" },
        { "::1/128", 0, AF_INET6, 128, "::1" },
        { "::1", 0, AF_INET6, 128, "::1" },
        { "2001:db8::/32", 0, AF_INET6, 32, "2001:db8::" },
        { "2001:db8:ffff::1/33", 0, AF_INET6, 33, "2001:db8:8000::" },
        { "::/0", 0, AF_INET6, 0, "::" },
        { "::ffff:0:0/96", 0, AF_INET6, 96, "::ffff:0.0.0.0" },
        { "10.0.0.0/33", BAD, 0, 0, NULL },
        { "::1/129", BAD, 0, 0, NULL },
        { "10.0.0.0/", BAD, 0, 0, NULL },
        { "10.0.0.0/8x", BAD, 0, 0, NULL },
        { "10.0.0.0/-1", BAD, 0, 0, NULL },
        { "10.0.0.0/0008", BAD, 0, 0, NULL },
        { "10.0.0/8", BAD, 0, 0, NULL },
        { "10.0.0.256", BAD, 0, 0, NULL },
        { "2001:db8:::/32", BAD, 0, 0, NULL },
        { "2001:db8::g/32", BAD, 0, 0, NULL },
        { "/8", BAD, 0, 0, NULL },
        { "", BAD, 0, 0, NULL },
        { "example.org/24", BAD, 0, 0, NULL },
    };
    size_t i;

    for (i = 0; i < ARRAY_LEN(t); i++) {
        struct cidr c, want;
        int rc;

        memset(&c, 0x55, sizeof(c));
        rc = util_parse_cidr(t[i].s, &c);
        if (t[i].bad) {
            cr_expect_eq(rc, -1, "'%s' accepted", t[i].s);
            cr_expect_eq(c.family, 0x55555555, "'%s' changed", t[i].s);
            continue;
        }
        cr_expect_eq(rc, 0, "'%s' refused", t[i].s);
        memset(&want, 0, sizeof(want));
        cr_assert_eq(inet_pton(t[i].family, t[i].net, want.addr), 1);
        cr_expect_eq(c.family, t[i].family, "'%s' family", t[i].s);
        cr_expect_eq(c.prefix, t[i].prefix, "'%s' prefix", t[i].s);
        cr_expect_eq(memcmp(c.addr, want.addr,
            t[i].family == AF_INET ? 4 : 16), 0, "'%s' address", t[i].s);
    }
}

/* A sockaddr for a v4 or v6 text address. */
static struct sockaddr_storage
tu_addr(const char *ip)
{
    struct sockaddr_storage ss;
    struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, ip, &sin->sin_addr) == 1)
        sin->sin_family = AF_INET;
    else {
        cr_assert_eq(inet_pton(AF_INET6, ip, &sin6->sin6_addr), 1, "%s", ip);
        sin6->sin6_family = AF_INET6;
    }
    return ss;
}

Test(util, cidr_match)
{
    static const struct { const char *net, *ip; int match; } t[] = {
        { "127.0.0.0/8", "127.0.0.1", 1 },
        { "127.0.0.0/8", "127.255.255.254", 1 },
        { "127.0.0.0/8", "128.0.0.1", 0 },
        { "127.0.0.0/8", "::ffff:127.0.0.1", 1 },     /* v4-mapped */
        { "127.0.0.0/8", "::ffff:10.0.0.1", 0 },
        { "127.0.0.0/8", "::1", 0 },
        { "127.0.0.0/8", "::127.0.0.1", 0 },          /* not mapped */
        { "192.168.64.0/20", "192.168.79.255", 1 },
        { "192.168.64.0/20", "192.168.80.0", 0 },
        { "192.168.64.0/20", "192.168.63.255", 0 },
        { "10.1.2.3", "10.1.2.3", 1 },
        { "10.1.2.3", "10.1.2.4", 0 },
        { "0.0.0.0/0", "203.0.113.9", 1 },
        { "0.0.0.0/0", "::ffff:203.0.113.9", 1 },
        { "0.0.0.0/0", "2001:db8::1", 0 },
        { "::1/128", "::1", 1 },
        { "::1/128", "::2", 0 },
        { "::1/128", "127.0.0.1", 0 },
        { "2001:db8::/32", "2001:db8:ffff::1", 1 },
        { "2001:db8::/32", "2001:db9::1", 0 },
        { "2001:db8:8000::/33", "2001:db8:8000::1", 1 },
        { "2001:db8:8000::/33", "2001:db8:7fff::1", 0 },
        { "::/0", "2001:db8::1", 1 },
        { "::ffff:0:0/96", "10.0.0.1", 1 },     /* v4 client, mapped net */
        { "::ffff:10.0.0.0/104", "10.9.9.9", 1 },
        { "::ffff:10.0.0.0/104", "11.9.9.9", 0 },
    };
    size_t i;

    for (i = 0; i < ARRAY_LEN(t); i++) {
        struct sockaddr_storage ss = tu_addr(t[i].ip);
        struct cidr c;

        cr_assert_eq(util_parse_cidr(t[i].net, &c), 0, "%s", t[i].net);
        cr_expect_eq(util_cidr_match(&c, (struct sockaddr *)&ss),
            t[i].match, "%s in %s", t[i].ip, t[i].net);
    }
}

Test(util, sockaddr_format_truncates)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char small[8];

    cr_assert_eq(util_parse_hostport("[2001:db8::1]:2525", &ss, &len), 0);
    util_sockaddr_str((struct sockaddr *)&ss, small, sizeof(small));
    cr_expect_eq(strlen(small), sizeof(small) - 1);
    cr_expect_str_eq(small, "[2001:d");
}

Test(util, strlcpy)
{
    char buf[6];

    cr_expect_eq(util_strlcpy(buf, "abc", sizeof(buf)), 3);
    cr_expect_str_eq(buf, "abc");
    cr_expect_eq(util_strlcpy(buf, "abcdefgh", sizeof(buf)), 8);
    cr_expect_str_eq(buf, "abcde");
    cr_expect_eq(util_strlcpy(buf, "", sizeof(buf)), 0);
    cr_expect_str_eq(buf, "");
    buf[0] = 'Q';
    cr_expect_eq(util_strlcpy(buf, "xyz", 0), 3);
    cr_expect_eq(buf[0], 'Q');
}

Test(util, strndup)
{
    char *d;

    d = xstrndup("abcdef", 3);
    cr_expect_str_eq(d, "abc");
    free(d);
    d = xstrndup("ab", 10);
    cr_expect_str_eq(d, "ab");
    free(d);
    d = xstrdup("");
    cr_expect_str_eq(d, "");
    free(d);
}

Test(util, write_all)
{
    int fds[2];
    char out[5000], in[5000];
    size_t got = 0;

    memset(out, 'm', sizeof(out));
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(util_write_all(fds[1], out, sizeof(out)), 0);
    close(fds[1]);
    while (got < sizeof(in)) {
        ssize_t n = read(fds[0], in + got, sizeof(in) - got);

        cr_assert_gt(n, 0);
        got += (size_t)n;
    }
    cr_expect_eq(memcmp(in, out, sizeof(in)), 0);
    close(fds[0]);
    cr_expect_eq(util_write_all(fds[1], out, 1), -1);
    cr_expect_eq(errno, EBADF);
}

Test(util, clocks)
{
    uint64_t a = util_now_ms(), b = util_now_ms();

    cr_expect_geq(b, a);
    /* Wall clock: after 2020-01-01 and consistent with time(). */
    cr_expect_gt(util_wall_ms(), 1577836800000ull);
    cr_expect_leq(util_wall_ms() / 1000, (uint64_t)time(NULL) + 1);
}

/* Run fatal (with_errno) or fatalx in a child; return what it wrote to
 * stderr and check that it exited with status 1. */
static void
tu_fatal_child(int with_errno, char *buf, size_t bufsz)
{
    int fds[2], status;
    size_t got = 0;
    pid_t pid;

    cr_assert_eq(pipe(fds), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        errno = ENOENT;
        if (with_errno)
            fatal("open %s", "/nope");
        fatalx("config %s is bad", "x");
    }
    close(fds[1]);
    while (got < bufsz - 1) {
        ssize_t n = read(fds[0], buf + got, bufsz - 1 - got);

        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    /* Only our line: a sanitizer may add its own notes after it. */
    if (strchr(buf, '\n') != NULL)
        strchr(buf, '\n')[1] = '\0';
    close(fds[0]);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 1,
        "status %d", status);
}

Test(util, fatal_messages)
{
    char buf[256];

    tu_fatal_child(1, buf, sizeof(buf));
    cr_expect_str_eq(buf, "mtad: open /nope: No such file or directory\n");
    tu_fatal_child(0, buf, sizeof(buf));
    cr_expect_str_eq(buf, "mtad: config x is bad\n");
}


/* util_escape: what may reach a log, a DSN or a terminal. */
Test(util, escape)
{
    char   out[64];
    size_t used;

    cr_assert_eq(util_escape(out, sizeof(out), "ok \xc3\xa9 \\x", 8, 0, &used),
        8);
    cr_assert_str_eq(out, "ok \xc3\xa9 \\x");
    cr_assert_eq(used, 8);
    util_escape(out, sizeof(out), "a\x1b[m\r\n\t\x7f\x00z", 10, 0, NULL);
    cr_assert_str_eq(out, "a\\x1b[m\\x0d\\x0a\\x09\\x7f\\x00z");
    util_escape(out, sizeof(out), "a\r\n\tb\rc\n", 8, UTIL_ESC_LINES, NULL);
    cr_assert_str_eq(out, "a\r\n\tb\\x0dc\n");
    /* C1 controls, bad UTF-8, overlongs, surrogates, a cut sequence */
    util_escape(out, sizeof(out), "\xc2\x9b\xc2\xa0\xc0\xaf\xed\xa0\x80\xe2"
        "\x82", 11, 0, NULL);
    cr_assert_str_eq(out, "\\xc2\\x9b\xc2\xa0\\xc0\\xaf\\xed\\xa0\\x80\\xe2"
        "\\x82");
    /* truncation keeps whole escapes; *used says where it stopped */
    cr_assert_eq(util_escape(out, 6, "ab\x1b" "cd", 5, 0, &used), 2);
    cr_assert_eq(used, 2);
    cr_assert_eq(util_escape(out, 8, "ab\x1b" "cd", 5, 0, &used), 7);
    cr_assert_str_eq(out, "ab\\x1bc");
    cr_assert_eq(used, 4);
    /* idempotent */
    util_escape(out, sizeof(out), "a\\x1b\xc3\xa9", 7, 0, NULL);
    cr_assert_str_eq(out, "a\\x1b\xc3\xa9");
}
