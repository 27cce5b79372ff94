/*
 * test_dns_rbl.c - DNS list names and return-code filters (dns/rbl.c):
 * the reversed IPv4 and nibble IPv6 names (RFC 5782 2.1, 2.4), the
 * postscreen filter syntax with its ranges and lists, what it refuses,
 * and which answers of a lookup count.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include <criterion/criterion.h>

#include "dns/dns.h"

static int
rbl_name(const char *ip, const char *zone, char *out, size_t outsz)
{
    struct sockaddr_in6 s6;
    struct sockaddr_in  s4;

    memset(&s4, 0, sizeof(s4));
    memset(&s6, 0, sizeof(s6));
    if (inet_pton(AF_INET, ip, &s4.sin_addr) == 1) {
        s4.sin_family = AF_INET;
        return dns_rbl_name((struct sockaddr *)&s4, zone, out, outsz);
    }
    cr_assert_eq(inet_pton(AF_INET6, ip, &s6.sin6_addr), 1, "%s", ip);
    s6.sin6_family = AF_INET6;
    return dns_rbl_name((struct sockaddr *)&s6, zone, out, outsz);
}

Test(dns_rbl, ipv4_reversed)
{
    char out[DNS_NAME_MAX];

    cr_assert_eq(rbl_name("127.0.0.2", "bl.test", out, sizeof(out)), 0);
    cr_assert_str_eq(out, "2.0.0.127.bl.test");
    cr_assert_eq(rbl_name("192.0.2.99", "zen.example.org", out,
        sizeof(out)), 0);
    cr_assert_str_eq(out, "99.2.0.192.zen.example.org");
}

Test(dns_rbl, ipv6_nibbles)
{
    char out[DNS_NAME_MAX];

    /* RFC 5782 2.4's own example */
    cr_assert_eq(rbl_name("2001:db8:1:2:3:4:567:89ab", "ugly.example.com",
        out, sizeof(out)), 0);
    cr_assert_str_eq(out, "b.a.9.8.7.6.5.0.4.0.0.0.3.0.0.0.2.0.0.0.1.0.0.0."
        "8.b.d.0.1.0.0.2.ugly.example.com");
}

Test(dns_rbl, refuses_what_does_not_fit)
{
    char            out[20];
    struct sockaddr sa;

    cr_assert_eq(rbl_name("127.0.0.2", "bl.test", out, 17), DNS_EINVAL);
    cr_assert_eq(rbl_name("127.0.0.2", "bl.test", out, 18), 0);
    cr_assert_eq(rbl_name("127.0.0.2", "", out, sizeof(out)), DNS_EINVAL);
    memset(&sa, 0, sizeof(sa));
    sa.sa_family = AF_UNIX;
    cr_assert_eq(dns_rbl_name(&sa, "bl.test", out, sizeof(out)), DNS_EINVAL);
}

static int
rbl_match(const char *spec, const char *ip)
{
    struct dns_rbl_filter f;
    struct in_addr        a;

    cr_assert_eq(dns_rbl_filter_parse(spec, &f), 0, "%s", spec);
    cr_assert_eq(inet_pton(AF_INET, ip, &a), 1);
    return dns_rbl_filter_match(&f, (const unsigned char *)&a);
}

Test(dns_rbl, filter_matches)
{
    cr_assert(rbl_match("127.0.0.2", "127.0.0.2"));
    cr_assert_not(rbl_match("127.0.0.2", "127.0.0.3"));
    cr_assert(rbl_match("127.0.0.[2..11]", "127.0.0.2"));
    cr_assert(rbl_match("127.0.0.[2..11]", "127.0.0.11"));
    cr_assert_not(rbl_match("127.0.0.[2..11]", "127.0.0.12"));
    cr_assert_not(rbl_match("127.0.0.[2..11]", "127.0.0.1"));
    cr_assert(rbl_match("127.0.[0..255].[1;3..4]", "127.0.9.3"));
    cr_assert_not(rbl_match("127.0.[0..255].[1;3..4]", "127.0.9.2"));
    cr_assert(rbl_match("127.0.[0..255].[1;3..4]", "127.0.255.1"));
    cr_assert_not(rbl_match("127.0.[0..255].[1;3..4]", "127.1.0.1"));
    cr_assert(rbl_match("[0..255].[0..255].[0..255].[0..255]", "1.2.3.4"));
    cr_assert(dns_rbl_filter_match(NULL, (const unsigned char *)"\1\2\3\4"));
}

Test(dns_rbl, filter_refuses_bad_syntax)
{
    static const char *const bad[] = {
        "", "127.0.0", "127.0.0.2.", "127.0.0.256", "127.0.0.x",
        "127.0.0.[2..11", "127.0.0.[11..2]", "127.0.0.[]", "127.0.0.[2;]",
        "127.0.0.[2..]", "127.0.0.2 ", "1270.0.0.2", "127..0.2",
        "127.0.0.[2,3]",
    };
    struct dns_rbl_filter f;
    size_t                i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(dns_rbl_filter_parse(bad[i], &f), DNS_EINVAL, "%s",
            bad[i]);
    cr_assert_eq(dns_rbl_filter_parse(NULL, &f), DNS_EINVAL);
}

Test(dns_rbl, listed_looks_at_a_records_only)
{
    unsigned char         a2[4] = { 127, 0, 0, 2 }, a1[4] = { 127, 0, 0, 1 };
    unsigned char         txt[5] = { 4, 't', 'e', 's', 't' };
    struct dns_rr         rr[2];
    struct dns_rrset      set;
    struct dns_rbl_filter f;

    cr_assert_eq(dns_rbl_filter_parse("127.0.0.[2..11]", &f), 0);
    memset(&set, 0, sizeof(set));
    memset(rr, 0, sizeof(rr));
    set.status = DNS_OK;
    set.rr = rr;
    set.n = 2;
    rr[0].type = DNS_T_TXT;
    rr[0].len = sizeof(txt);
    rr[0].rdata = txt;
    rr[1].type = DNS_T_A;
    rr[1].len = 4;
    rr[1].rdata = a1;
    cr_assert_not(dns_rbl_listed(&set, &f));
    cr_assert(dns_rbl_listed(&set, NULL));
    rr[1].rdata = a2;
    cr_assert(dns_rbl_listed(&set, &f));
    set.status = DNS_NXDOMAIN;
    cr_assert_not(dns_rbl_listed(&set, &f));
    cr_assert_not(dns_rbl_listed(NULL, &f));
}
