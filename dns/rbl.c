/*
 * rbl.c - DNS lists (DNSBL / DNSWL, RFC 5782): the query name of a client
 * address under a list's zone, and the return-code filter that says which
 * answers count (postscreen's "zone=127.0.0.[2..11]" syntax).
 *
 * PURPOSE   See dns.h.  The lookups themselves are plain dns_query() A
 *           lookups: they share the cache, its TTLs and the joining of
 *           queries in flight with every other lookup of the process.
 * FAILURE   Never logs; DNS_EINVAL for what does not parse or fit.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "dns/dns.h"

int
dns_rbl_name(const struct sockaddr *sa, const char *zone, char *out,
    size_t outsz)
{
    static const char hex[] = "0123456789abcdef";
    char          rev[80];
    size_t        o = 0;
    int           i, n;

    if (sa == NULL || zone == NULL || zone[0] == '\0')
        return DNS_EINVAL;
    if (sa->sa_family == AF_INET) {
        const unsigned char *a = (const unsigned char *)
            &((const struct sockaddr_in *)(const void *)sa)->sin_addr;

        snprintf(rev, sizeof(rev), "%u.%u.%u.%u", a[3], a[2], a[1], a[0]);
    } else if (sa->sa_family == AF_INET6) {
        const unsigned char *a = ((const struct sockaddr_in6 *)
            (const void *)sa)->sin6_addr.s6_addr;

        /* RFC 5782 2.4: one label per nibble, least significant first */
        for (i = 15; i >= 0; i--) {
            rev[o++] = hex[a[i] & 15];
            rev[o++] = '.';
            rev[o++] = hex[a[i] >> 4];
            rev[o++] = i > 0 ? '.' : '\0';
        }
    } else {
        return DNS_EINVAL;
    }
    n = snprintf(out, outsz, "%s.%s", rev, zone);
    return n < 0 || (size_t)n >= outsz ? DNS_EINVAL : 0;
}


/* dns_rbl_num - a decimal octet at *pp (0..255); -1 if none. */
static int
dns_rbl_num(const char **pp)
{
    const char *p = *pp;
    int         v = 0, nd = 0;

    while (*p >= '0' && *p <= '9' && nd < 4) {
        v = v * 10 + (*p++ - '0');
        nd++;
    }
    if (nd == 0 || nd > 3 || v > 255)
        return -1;
    *pp = p;
    return v;
}


static void
dns_rbl_set(uint8_t *bits, int lo, int hi)
{
    int v;

    for (v = lo; v <= hi; v++)
        bits[v >> 3] |= (uint8_t)(1u << (v & 7));
}


/* dns_rbl_octet - one octet's pattern: N or [N;N..M;...]. */
static int
dns_rbl_octet(const char **pp, uint8_t *bits)
{
    const char *p = *pp;
    int         lo, hi;

    if (*p != '[') {
        if ((lo = dns_rbl_num(&p)) < 0)
            return DNS_EINVAL;
        dns_rbl_set(bits, lo, lo);
        *pp = p;
        return 0;
    }
    p++;
    for (;;) {
        if ((lo = dns_rbl_num(&p)) < 0)
            return DNS_EINVAL;
        hi = lo;
        if (p[0] == '.' && p[1] == '.') {
            p += 2;
            if ((hi = dns_rbl_num(&p)) < 0 || hi < lo)
                return DNS_EINVAL;
        }
        dns_rbl_set(bits, lo, hi);
        if (*p == ']')
            break;
        if (*p++ != ';')
            return DNS_EINVAL;
    }
    *pp = p + 1;
    return 0;
}


int
dns_rbl_filter_parse(const char *spec, struct dns_rbl_filter *f)
{
    const char *p = spec;
    int         i;

    memset(f, 0, sizeof(*f));
    if (p == NULL)
        return DNS_EINVAL;
    for (i = 0; i < 4; i++) {
        if (i > 0 && *p++ != '.')
            return DNS_EINVAL;
        if (dns_rbl_octet(&p, f->bits[i]) != 0)
            return DNS_EINVAL;
    }
    return *p == '\0' ? 0 : DNS_EINVAL;
}


int
dns_rbl_filter_match(const struct dns_rbl_filter *f, const unsigned char a[4])
{
    int i;

    if (f == NULL)
        return 1;
    for (i = 0; i < 4; i++)
        if (!(f->bits[i][a[i] >> 3] & (1u << (a[i] & 7))))
            return 0;
    return 1;
}


int
dns_rbl_listed(const struct dns_rrset *set, const struct dns_rbl_filter *f)
{
    size_t i;

    if (set == NULL || set->status != DNS_OK)
        return 0;
    for (i = 0; i < set->n; i++)
        if (set->rr[i].type == DNS_T_A && set->rr[i].len == 4 &&
            dns_rbl_filter_match(f, set->rr[i].rdata))
            return 1;
    return 0;
}
