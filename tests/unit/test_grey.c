/*
 * test_grey.c - grey/: the triplet's key (networks, case, null sender,
 * long addresses), the decision (defer, pass after the delay, lazy
 * rewrites, expiry and pass lifetime), domain allow lists, and the LMDB
 * store (check, list by prefix, del, prune) in a temporary file.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "grey/grey.h"

static struct sockaddr_storage
addr(const char *ip)
{
    struct sockaddr_storage ss;

    memset(&ss, 0, sizeof(ss));
    if (strchr(ip, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

        s6->sin6_family = AF_INET6;
        cr_assert_eq(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

        s4->sin_family = AF_INET;
        cr_assert_eq(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
    }
    return ss;
}

#define SA(ss) ((const struct sockaddr *)&(ss))

static const struct grey_params P = { 300000, 86400000, 3110400000ULL };

Test(grey, key_networks_and_case)
{
    struct sockaddr_storage a = addr("192.0.2.77"),
        b = addr("2001:db8:1:2:3:4:5:6"), c = addr("::ffff:192.0.2.9");
    char k[GREY_KEY_MAX + 1];

    cr_assert_gt(grey_key(SA(a), 24, 64, "Joe@Example.ORG",
        "u@Dest.test", k), 0);
    cr_assert_str_eq(k, "192.0.2.0/24 joe@example.org u@dest.test");
    grey_key(SA(a), 32, 64, "", "u@d.test", k);
    cr_assert_str_eq(k, "192.0.2.77 <> u@d.test");
    grey_key(SA(b), 24, 64, "a b@x", "u@d.test", k);
    cr_assert_str_eq(k, "2001:db8:1:2::/64 a?b@x u@d.test");
    grey_key(SA(c), 24, 64, "s@x", "r@y", k);
    cr_assert_str_eq(k, "192.0.2.0/24 s@x r@y", "v4-mapped as IPv4");
}

Test(grey, key_long_addresses_are_hashed)
{
    struct sockaddr_storage a = addr("192.0.2.1");
    char k1[GREY_KEY_MAX + 1], k2[GREY_KEY_MAX + 1], s[600];
    size_t n;

    memset(s, 'a', sizeof(s) - 1);
    s[sizeof(s) - 1] = '\0';
    n = grey_key(SA(a), 24, 64, s, "r1@y", k1);
    cr_assert_eq(n, GREY_KEY_MAX);
    cr_assert_eq(strlen(k1), GREY_KEY_MAX);
    grey_key(SA(a), 24, 64, s, "r2@y", k2);
    cr_assert_str_neq(k1, k2, "the hash keeps the tails apart");
}

Test(grey, decide_defer_then_pass_then_lazy)
{
    struct grey_rec r, o;
    int w;

    cr_assert_eq(grey_decide(NULL, 1000, &P, &r, &w), GREY_DEFER);
    cr_assert(w);
    cr_assert_eq(r.first_ms, 1000);
    cr_assert_eq(grey_decide(&r, 1000 + 299999, &P, &o, &w), GREY_DEFER);
    cr_assert(!w, "a retry within the delay writes nothing");
    cr_assert_eq(grey_decide(&r, 1000 + 300000, &P, &o, &w), GREY_PASS);
    cr_assert(w);
    cr_assert_eq(o.pass_ms, 301000);
    r = o;
    cr_assert_eq(grey_decide(&r, 301000 + GREY_LAZY_MS - 1, &P, &o, &w),
        GREY_PASS);
    cr_assert(!w, "a passed triplet is not rewritten within the hour");
    cr_assert_eq(grey_decide(&r, 301000 + GREY_LAZY_MS, &P, &o, &w),
        GREY_PASS);
    cr_assert(w);
}

Test(grey, decide_expiry_and_lifetime)
{
    struct grey_rec r = { 1000, 0, 1000, 1 }, o;
    int w;

    cr_assert_eq(grey_decide(&r, 1000 + 86400001, &P, &o, &w), GREY_DEFER);
    cr_assert(w);
    cr_assert_eq(o.first_ms, 1000 + 86400001, "an unconfirmed one restarts");
    r.pass_ms = 2000;
    cr_assert_eq(grey_decide(&r, 2000 + 3110400000ULL, &P, &o, &w),
        GREY_PASS);
    cr_assert_eq(grey_decide(&r, 2000 + 3110400001ULL, &P, &o, &w),
        GREY_DEFER, "past the pass lifetime: greylisted again");
}

Test(grey, domain_match)
{
    char *l[] = { "example.org", "b.test" };

    cr_assert(grey_domain_match("example.org", l, 2));
    cr_assert(grey_domain_match("MX.Example.org", l, 2));
    cr_assert(!grey_domain_match("badexample.org", l, 2));
    cr_assert(!grey_domain_match("", l, 2));
    cr_assert(grey_domain_match("b.test", l, 2));
}

static int
count(const char *key, size_t klen, const struct grey_rec *rec, void *arg)
{
    (void)key; (void)klen; (void)rec;
    (*(int *)arg)++;
    return 0;
}

Test(grey, store_check_list_del_prune)
{
    char path[] = "/tmp/test_grey_XXXXXX", lock[64];
    struct grey *g;
    enum grey_verdict v;
    int fd = mkstemp(path), n = 0;

    cr_assert_geq(fd, 0);
    close(fd);
    unlink(path);
    cr_assert_eq(grey_open(&g, path), 0, "%s", grey_errstr(g));
    cr_assert_eq(grey_check(g, "10.0.0.0/24 a b", 15, 1000, &P, &v), 0);
    cr_assert_eq(v, GREY_DEFER);
    cr_assert_eq(grey_check(g, "10.0.0.0/24 a b", 15, 2000, &P, &v), 0);
    cr_assert_eq(v, GREY_DEFER);
    cr_assert_eq(grey_check(g, "10.0.0.0/24 a b", 15, 301000, &P, &v), 0);
    cr_assert_eq(v, GREY_PASS);
    cr_assert_eq(grey_check(g, "10.0.0.0/240 a b", 16, 1000, &P, &v), 0);
    cr_assert_eq(grey_check(g, "10.0.1.0/24 a b", 15, 1000, &P, &v), 0);
    cr_assert_eq(grey_each(g, "", count, &n), 3);
    n = 0;
    cr_assert_eq(grey_each(g, "10.0.0.0/24", count, &n), 1,
        "a prefix is whole words");
    cr_assert_eq(grey_del(g, "10.0.0.0/24 a"), 1);
    cr_assert_eq(grey_each(g, "", count, &n), 2);
    /* both left are unconfirmed since 1000: expired a day later */
    cr_assert_eq(grey_prune(g, 1000 + 86400001, &P), 2);
    cr_assert_eq(grey_each(g, "", count, &n), 0);
    grey_close(g);
    unlink(path);
    snprintf(lock, sizeof(lock), "%s-lock", path);
    unlink(lock);
}
