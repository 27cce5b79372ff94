/*
 * test_mta_sts.c - the decisions of tlspol/sts.c that need no network:
 * which TXT record counts (RFC 8461 3.1), when the cached policy is used,
 * refetched or dropped (3.3, 5.1), the Content-Type check, and what a
 * policy does to the hops (enforce, testing, none, DANE hosts).  The fetch
 * itself runs against a real HTTPS server in
 * tests/integration/test_mta_sts.py.
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "dns/dns.h"
#include "delivery/mta.h"
#include "delivery/resolve.h"
#include "tlspol/tlspol.h"

static enum tls_sts_txt
pick(const char *a, const char *b, char *id)
{
    const char *t[2] = { a, b };
    size_t      l[2] = { strlen(a), b ? strlen(b) : 0 };
    char        why[256];

    return tls_sts_txt_pick(t, l, b ? 2 : 1, id, why, sizeof(why));
}


Test(mta_sts, txt_pick_exactly_one_sts_record)
{
    char id[STS_ID_MAX];

    cr_assert_eq(pick("v=STSv1; id=abc", NULL, id), TLS_STS_TXT_ID);
    cr_assert_str_eq(id, "abc");
    /* other records are discarded */
    cr_assert_eq(pick("v=spf1 -all", "v=STSv1; id=x2", id), TLS_STS_TXT_ID);
    cr_assert_str_eq(id, "x2");
    /* two STS records, or one invalid: no policy */
    cr_assert_eq(pick("v=STSv1; id=a", "v=STSv1; id=b", id), TLS_STS_TXT_NONE);
    cr_assert_eq(pick("v=STSv1; id=a", "v=STSv1; nope", id), TLS_STS_TXT_NONE);
    cr_assert_eq(pick("v=STSv1; id=", NULL, id), TLS_STS_TXT_NONE);
    cr_assert_eq(pick("v=spf1 -all", NULL, id), TLS_STS_TXT_NONE);
}


Test(mta_sts, decide)
{
    /* nothing cached: a record means fetch, none means no policy */
    cr_assert_eq(tls_sts_decide(0, "", 0, 100, TLS_STS_TXT_ID, "a"),
        TLS_STS_FETCH);
    cr_assert_eq(tls_sts_decide(0, "", 0, 100, TLS_STS_TXT_NONE, ""),
        TLS_STS_NO_POLICY);
    cr_assert_eq(tls_sts_decide(0, "", 0, 100, TLS_STS_TXT_TEMPFAIL, ""),
        TLS_STS_NO_POLICY);
    /* cached and fresh: same id -> cached; new id -> refetch */
    cr_assert_eq(tls_sts_decide(1, "a", 1000, 100, TLS_STS_TXT_ID, "a"),
        TLS_STS_USE_CACHED);
    cr_assert_eq(tls_sts_decide(1, "a", 1000, 100, TLS_STS_TXT_ID, "b"),
        TLS_STS_FETCH);
    /* the TXT record gone or failing: the unexpired policy still holds */
    cr_assert_eq(tls_sts_decide(1, "a", 1000, 100, TLS_STS_TXT_NONE, ""),
        TLS_STS_USE_CACHED);
    cr_assert_eq(tls_sts_decide(1, "a", 1000, 100, TLS_STS_TXT_TEMPFAIL, ""),
        TLS_STS_USE_CACHED);
    /* expired: refetch with a record, nothing without */
    cr_assert_eq(tls_sts_decide(1, "a", 1000, 1000, TLS_STS_TXT_ID, "a"),
        TLS_STS_FETCH);
    cr_assert_eq(tls_sts_decide(1, "a", 1000, 1000, TLS_STS_TXT_NONE, ""),
        TLS_STS_NO_POLICY);
}


Test(mta_sts, content_type)
{
    cr_assert(tls_sts_content_type_ok("text/plain"));
    cr_assert(tls_sts_content_type_ok("Text/Plain; charset=utf-8"));
    cr_assert(tls_sts_content_type_ok("text/plain;charset=us-ascii"));
    cr_assert(!tls_sts_content_type_ok("text/plainx"));
    cr_assert(!tls_sts_content_type_ok("text/html"));
    cr_assert(!tls_sts_content_type_ok(""));
    cr_assert(!tls_sts_content_type_ok(NULL));
}


static int
parse_policy(const char *text, struct sts_policy *p)
{
    return sts_policy_parse(text, strlen(text), p, NULL, 0);
}


static void
hops_of(struct mta_hop *h, const char *const *names, size_t n)
{
    size_t i;

    memset(h, 0, n * sizeof(*h));
    for (i = 0; i < n; i++) {
        snprintf(h[i].name, sizeof(h[i].name), "%s", names[i]);
        h[i].tls.level = TLS_MAY;
    }
}


static const char *const NAMES[] = { "mx1.a.org", "evil.b.org", "mx2.a.org" };

Test(mta_sts, enforce_keeps_matching_hosts_and_requires_sts)
{
    struct sts_policy p;
    struct mta_hop    h[3];
    size_t            n = 3;
    char              reply[512] = "";

    cr_assert_eq(parse_policy("version: STSv1\nmode: enforce\n"
        "mx: *.a.org\nmax_age: 60\n", &p), 0);
    hops_of(h, NAMES, 3);
    cr_assert_eq(resolve_sts_hops(&p, "a.org", h, &n, reply, sizeof(reply)), 0);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(h[0].name, "mx1.a.org");
    cr_assert_str_eq(h[1].name, "mx2.a.org");
    cr_assert(h[0].tls.sts_enforce && h[1].tls.sts_enforce);
    cr_assert(tls_req_mandatory(&h[0].tls));
    cr_assert(tls_req_authenticated(&h[0].tls));
    /* no host matches: deferred 4.7.5 */
    n = 1;
    hops_of(h, NAMES + 1, 1);
    cr_assert_eq(resolve_sts_hops(&p, "a.org", h, &n, reply, sizeof(reply)), -1);
    cr_assert_eq(n, 0);
    cr_assert(strncmp(reply, "451 4.7.5 MTA-STS policy of a.org", 33) == 0,
        "%s", reply);
}


Test(mta_sts, dane_hosts_are_left_to_dane)
{
    struct sts_policy p;
    struct dns_rrset  tlsa;
    struct mta_hop    h[3];
    size_t            n = 3;
    char              reply[512];

    memset(&tlsa, 0, sizeof(tlsa));
    cr_assert_eq(parse_policy("version: STSv1\nmode: enforce\n"
        "mx: *.a.org\nmax_age: 60\n", &p), 0);
    hops_of(h, NAMES, 3);
    h[1].tls.level = TLS_DANE;
    h[1].tls.tlsa = &tlsa;          /* usable TLSA on evil.b.org */
    cr_assert_eq(resolve_sts_hops(&p, "a.org", h, &n, reply, sizeof(reply)), 0);
    cr_assert_eq(n, 3);
    cr_assert_eq(h[1].tls.sts_enforce, 0);
    cr_assert_eq(h[1].tls.sts_testing, 0);
}


Test(mta_sts, testing_and_none_keep_every_host)
{
    struct sts_policy p;
    struct mta_hop    h[3];
    size_t            n = 3;
    char              reply[512];

    cr_assert_eq(parse_policy("version: STSv1\nmode: testing\n"
        "mx: *.a.org\nmax_age: 60\n", &p), 0);
    hops_of(h, NAMES, 3);
    cr_assert_eq(resolve_sts_hops(&p, "a.org", h, &n, reply, sizeof(reply)), 0);
    cr_assert_eq(n, 3);
    cr_assert(h[1].tls.sts_testing && !h[1].tls.sts_enforce);
    cr_assert(!tls_req_mandatory(&h[1].tls));
    cr_assert_eq(parse_policy("version: STSv1\nmode: none\n"
        "max_age: 60\n", &p), 0);
    hops_of(h, NAMES, 3);
    cr_assert_eq(resolve_sts_hops(&p, "a.org", h, &n, reply, sizeof(reply)), 0);
    cr_assert_eq(n, 3);
    cr_assert(!h[0].tls.sts_testing && !h[0].tls.sts_enforce);
}
