/*
 * test_resolve.c - the pure parts of delivery/resolve.c: MX hosts ->
 * the address list the relay tries (order, limit), loop detection
 * (RFC 5321 5.1: hosts at or after our own preference are dropped), and
 * the outcome of a destination without addresses.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "delivery/resolve.h"

/* A destination built from "pref name ip ip ...;pref name ..." */
static struct dns_dest *
mkdest(const char *spec)
{
    struct dns_dest *d = xcalloc(1, sizeof(*d));
    char            *s = xstrdup(spec), *hs, *save = NULL;

    d->status = DNS_OK;
    snprintf(d->domain, sizeof(d->domain), "x.test");
    d->host = xcalloc(8, sizeof(*d->host));
    for (hs = strtok_r(s, ";", &save); hs; hs = strtok_r(NULL, ";", &save)) {
        struct dns_host *h = &d->host[d->nhost++];
        char            *save2 = NULL, *w;

        h->pref = (unsigned)atoi(strtok_r(hs, " ", &save2));
        snprintf(h->name, sizeof(h->name), "%s", strtok_r(NULL, " ", &save2));
        h->addr = xcalloc(8, sizeof(*h->addr));
        while ((w = strtok_r(NULL, " ", &save2)) != NULL) {
            struct dns_addr *a = &h->addr[h->naddr++];

            if (inet_pton(AF_INET, w, &a->a.v4) == 1)
                a->family = AF_INET;
            else if (inet_pton(AF_INET6, w, &a->a.v6) == 1)
                a->family = AF_INET6;
            else
                cr_assert_fail("bad address %s", w);
        }
    }
    free(s);
    return d;
}

/* "name[ip]:port,name[ip]:port" of the hops */
static void
hops_str(const struct mta_hop *h, size_t n, char *out, size_t outsz)
{
    size_t i, o = 0;

    out[0] = '\0';
    for (i = 0; i < n; i++) {
        char ip[64];

        util_sockaddr_ip((const struct sockaddr *)&h[i].ss, ip, sizeof(ip));
        o += (size_t)snprintf(out + o, outsz - o, "%s%s[%s]:%u",
            i ? "," : "", h[i].name, ip, h[i].port);
    }
}

static struct resolve_self_addr self_addr[4];
static unsigned                 self_lo[2];

static struct resolve_self
mkself(const char *hostname, const char *ip, unsigned port, unsigned lo_port)
{
    struct resolve_self s = { .hostname = hostname, .addr = self_addr,
                              .lo_ports = self_lo };

    if (ip != NULL) {
        memset(&self_addr[0], 0, sizeof(self_addr[0]));
        if (inet_pton(AF_INET, ip, &self_addr[0].a.a.v4) == 1)
            self_addr[0].a.family = AF_INET;
        else {
            cr_assert(inet_pton(AF_INET6, ip, &self_addr[0].a.a.v6) == 1);
            self_addr[0].a.family = AF_INET6;
        }
        self_addr[0].port = port;
        s.naddr = 1;
    }
    if (lo_port != 0) {
        self_lo[0] = lo_port;
        s.nlo = 1;
    }
    return s;
}

struct flat_case {
    const char *name;
    const char *dest;
    const char *self_ip;            /* a listener on it, port 25 */
    const char *hostname;
    unsigned    lo_port;            /* a wildcard listener's port */
    size_t      max;
    int         rc;
    const char *want;
};

static const struct flat_case flat_cases[] = {
    { "hosts then their addresses, in order",
      "10 a 192.0.2.1 192.0.2.2;20 b 192.0.2.3", NULL, NULL, 0, 16,
      RESOLVE_OK, "a[192.0.2.1]:25,a[192.0.2.2]:25,b[192.0.2.3]:25" },
    { "the limit cuts the list",
      "10 a 192.0.2.1 192.0.2.2;20 b 192.0.2.3", NULL, NULL, 0, 2,
      RESOLVE_OK, "a[192.0.2.1]:25,a[192.0.2.2]:25" },
    { "IPv6 addresses",
      "10 a ::1 192.0.2.1", NULL, NULL, 0, 16,
      RESOLVE_OK, "a[::1]:25,a[192.0.2.1]:25" },
    { "a host without address is skipped",
      "10 a;20 b 192.0.2.3", NULL, NULL, 0, 16, RESOLVE_OK, "b[192.0.2.3]:25" },
    { "we are the best MX: loops back",
      "10 a 192.0.2.9;20 b 192.0.2.3", "192.0.2.9", NULL, 0, 16,
      RESOLVE_LOOP, "" },
    { "we are a backup MX: only the hosts preferred over us",
      "10 a 192.0.2.1;20 me 192.0.2.9;30 c 192.0.2.3", "192.0.2.9", NULL,
      0, 16, RESOLVE_OK, "a[192.0.2.1]:25" },
    { "an equal preference to ours is dropped too",
      "10 a 192.0.2.1;20 b 192.0.2.2;20 me 192.0.2.9", "192.0.2.9", NULL,
      0, 16, RESOLVE_OK, "a[192.0.2.1]:25" },
    { "equal preference with us at the best: loops back",
      "10 a 192.0.2.1;10 me 192.0.2.9", "192.0.2.9", NULL, 0, 16,
      RESOLVE_LOOP, "" },
    { "our hostname as an MX host (case, final dot)",
      "10 MX.Example.ORG. 192.0.2.5", NULL, "mx.example.org", 0, 16,
      RESOLVE_LOOP, "" },
    { "an address of ours on another port is not us",
      "10 a 192.0.2.9", "192.0.2.9:2525", NULL, 0, 16,
      RESOLVE_OK, "a[192.0.2.9]:25" },
    { "a wildcard listener on 25: any loopback address is us",
      "10 a 127.0.0.77", NULL, NULL, 25, 16, RESOLVE_LOOP, "" },
    { "a wildcard listener on 2525: loopback on 25 is not us",
      "10 a 127.0.0.77", NULL, NULL, 2525, 16,
      RESOLVE_OK, "a[127.0.0.77]:25" },
    { "a wildcard listener: ::1 is us",
      "10 a ::1", NULL, NULL, 25, 16, RESOLVE_LOOP, "" },
    { "only hosts preferred over us, and none has an address",
      "10 a;20 me 192.0.2.9", "192.0.2.9", NULL, 0, 16, RESOLVE_NONE, "" },
};

Test(resolve, flatten_table)
{
    size_t i;

    for (i = 0; i < sizeof(flat_cases) / sizeof(flat_cases[0]); i++) {
        const struct flat_case *c = &flat_cases[i];
        struct dns_dest        *d = mkdest(c->dest);
        struct mta_hop          hops[16];
        struct resolve_self     self;
        char                    got[1024], ip[64] = "";
        unsigned                port = 25;
        size_t                  n = 0;
        int                     rc;

        if (c->self_ip != NULL) {
            const char *colon = strrchr(c->self_ip, ':');

            /* "ip:port" for IPv4 only in this table */
            if (colon != NULL && strchr(c->self_ip, '.') != NULL) {
                snprintf(ip, sizeof(ip), "%.*s", (int)(colon - c->self_ip),
                    c->self_ip);
                port = (unsigned)atoi(colon + 1);
            } else {
                snprintf(ip, sizeof(ip), "%s", c->self_ip);
            }
        }
        self = mkself(c->hostname, c->self_ip ? ip : NULL, port, c->lo_port);
        rc = resolve_flatten(d, 25, &self, hops, c->max, &n);
        hops_str(hops, n, got, sizeof(got));
        cr_expect_eq(rc, c->rc, "%s: rc got %d, want %d", c->name, rc, c->rc);
        cr_expect_str_eq(got, c->want, "%s: got %s, want %s", c->name, got,
            c->want);
        dns_dest_free(d);
    }
}

Test(resolve, flatten_appends_after_what_is_there)
{
    struct dns_dest *a = mkdest("10 a 192.0.2.1"), *b = mkdest("5 b ::1");
    struct mta_hop   hops[3];
    char             got[256];
    size_t           n = 0;

    cr_assert_eq(resolve_flatten(a, 25, NULL, hops, 3, &n), RESOLVE_OK);
    cr_assert_eq(resolve_flatten(b, 2525, NULL, hops, 3, &n), RESOLVE_OK);
    hops_str(hops, n, got, sizeof(got));
    cr_assert_str_eq(got, "a[192.0.2.1]:25,b[::1]:2525");
    dns_dest_free(a);
    dns_dest_free(b);
}

Test(resolve, verdicts)
{
    struct dns_dest d;
    char            r[512];

    memset(&d, 0, sizeof(d));
    snprintf(d.domain, sizeof(d.domain), "x.test");
    snprintf(d.why, sizeof(d.why), "the reason");
    d.status = DNS_NULLMX;
    cr_assert_eq(resolve_verdict(&d, 1, r, sizeof(r)), MTA_BOUNCE);
    cr_assert_str_eq(r, "550 5.1.10 Domain x.test does not accept mail "
        "(null MX)");
    d.status = DNS_NXDOMAIN;
    cr_assert_eq(resolve_verdict(&d, 1, r, sizeof(r)), MTA_BOUNCE);
    cr_assert_str_eq(r, "550 5.1.2 Host or domain name not found: the reason");
    cr_assert_eq(resolve_verdict(&d, 0, r, sizeof(r)), MTA_BOUNCE);
    cr_assert(strncmp(r, "550 5.4.4 ", 10) == 0, "%s", r);
    d.status = DNS_TEMPFAIL;
    cr_assert_eq(resolve_verdict(&d, 1, r, sizeof(r)), MTA_DEFER);
    /* a deferral is told apart from a return code's success */
    cr_assert_neq(resolve_verdict(&d, 1, r, sizeof(r)), MTA_OK);
    cr_assert_str_eq(r, "451 4.4.3 Host or domain name lookup failed: "
        "the reason");
    d.status = DNS_NODATA;
    cr_assert_eq(resolve_verdict(&d, 1, r, sizeof(r)), MTA_DEFER);
    cr_assert_str_eq(r, "451 4.4.3 the reason");
}
