/*
 * test_dns.c - the resolver module: answer parsing (table-driven, hostile
 * packets included), MX ordering with random order among equal
 * preferences, null MX, NXDOMAIN, implicit MX, CNAMEs, the cache (TTL
 * clamp and expiry on a fake clock, negative caching from the SOA,
 * eviction), joined lookups, SERVFAIL and timeouts as temporary, cancel.
 *
 * The resolver talks to a fake authoritative server inside the test: a UDP
 * socket on 127.0.0.1 in the same ev loop, answering from a table, counting
 * the queries it sees.  Loops run until the expected callbacks came, with a
 * guard timer that fails the test instead of hanging.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <criterion/criterion.h>

#include "common/ev.h"
#include "dns/dns.h"

/* ---------------- a packet builder ---------------- */

struct pkt {
    unsigned char b[4096];
    size_t        n;
};

static void
put8(struct pkt *p, unsigned v)
{
    cr_assert_lt(p->n, sizeof(p->b));
    p->b[p->n++] = (unsigned char)v;
}

static void
put16(struct pkt *p, unsigned v)
{
    put8(p, (v >> 8) & 0xff);
    put8(p, v & 0xff);
}

static void
put32(struct pkt *p, uint32_t v)
{
    put16(p, v >> 16);
    put16(p, v & 0xffff);
}

static void
putname(struct pkt *p, const char *name)
{
    const char *s = name, *dot;

    while (*s != '\0') {
        dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);

        put8(p, (unsigned)n);
        cr_assert_lt(p->n + n, sizeof(p->b));
        memcpy(p->b + p->n, s, n);
        p->n += n;
        s += n;
        if (*s == '.')
            s++;
    }
    put8(p, 0);
}

static void
header(struct pkt *p, unsigned id, unsigned flags, unsigned qd, unsigned an,
    unsigned ns)
{
    p->n = 0;
    put16(p, id);
    put16(p, flags);
    put16(p, qd);
    put16(p, an);
    put16(p, ns);
    put16(p, 0);
}

/* rr header; returns the offset of rdlength for patching. */
static size_t
rrhead(struct pkt *p, const char *owner, unsigned type, uint32_t ttl)
{
    size_t at;

    putname(p, owner);
    put16(p, type);
    put16(p, 1);
    put32(p, ttl);
    at = p->n;
    put16(p, 0);
    return at;
}

static void
rrend(struct pkt *p, size_t at)
{
    size_t len = p->n - at - 2;

    p->b[at] = (unsigned char)(len >> 8);
    p->b[at + 1] = (unsigned char)len;
}

/* ---------------- parsing ---------------- */

Test(dns_msg, parses_mx_answer_with_compression_and_soa)
{
    struct dns_msg m;
    struct pkt p;
    size_t at;

    header(&p, 7, 0x81a0, 1, 2, 1);             /* QR RD RA AD */
    putname(&p, "Example.ORG");
    put16(&p, DNS_T_MX);
    put16(&p, 1);
    /* owner as a pointer to the question name at offset 12 */
    put16(&p, 0xc00c);
    put16(&p, DNS_T_MX);
    put16(&p, 1);
    put32(&p, 300);
    at = p.n;
    put16(&p, 0);
    put16(&p, 10);
    put8(&p, 3);
    memcpy(p.b + p.n, "mx1", 3);
    p.n += 3;
    put16(&p, 0xc00c);                          /* mx1.example.org */
    rrend(&p, at);
    at = rrhead(&p, "example.org", DNS_T_MX, 0x80000001u); /* top bit: 0 */
    put16(&p, 20);
    putname(&p, "MX2.example.org");
    rrend(&p, at);
    at = rrhead(&p, "example.org", DNS_T_SOA, 600);
    putname(&p, "ns.example.org");
    putname(&p, "host.example.org");
    put32(&p, 1);
    put32(&p, 2);
    put32(&p, 3);
    put32(&p, 4);
    put32(&p, 120);                             /* minimum */
    rrend(&p, at);

    cr_assert_eq(dns_msg_parse(p.b, p.n, &m), 0);
    cr_expect_eq(m.id, 7);
    cr_expect_eq(m.ad, 1);
    cr_expect_eq(m.rcode, 0);
    cr_expect_str_eq(m.qname, "example.org");
    cr_assert_eq(m.nan, 2);
    cr_expect_str_eq(m.an[0].owner, "example.org");
    cr_expect_eq(m.an[0].pref, 10);
    cr_expect_str_eq(m.an[0].target, "mx1.example.org");
    cr_expect_eq(m.an[0].ttl, 300);
    cr_expect_str_eq(m.an[1].target, "mx2.example.org");
    cr_expect_eq(m.an[1].ttl, 0, "RFC 2181: TTL with the top bit set is 0");
    cr_expect_eq(m.have_soa, 1);
    cr_expect_eq(m.neg_ttl, 120, "min(SOA ttl 600, minimum 120)");
    dns_msg_clear(&m);
}

Test(dns_msg, null_mx_target_is_the_empty_root)
{
    struct dns_msg m;
    struct pkt p;
    size_t at;

    header(&p, 1, 0x8180, 1, 1, 0);
    putname(&p, "x.org");
    put16(&p, DNS_T_MX);
    put16(&p, 1);
    at = rrhead(&p, "x.org", DNS_T_MX, 60);
    put16(&p, 0);
    put8(&p, 0);
    rrend(&p, at);
    cr_assert_eq(dns_msg_parse(p.b, p.n, &m), 0);
    cr_assert_eq(m.nan, 1);
    cr_expect_str_eq(m.an[0].target, "");
    cr_expect_eq(m.an[0].pref, 0);
    dns_msg_clear(&m);
}

Test(dns_msg, odd_bytes_in_labels_come_out_escaped)
{
    struct dns_msg m;
    struct pkt p;
    size_t at;

    header(&p, 1, 0x8180, 1, 1, 0);
    putname(&p, "x.org");
    put16(&p, DNS_T_CNAME);
    put16(&p, 1);
    at = rrhead(&p, "x.org", DNS_T_CNAME, 60);
    put8(&p, 4);
    put8(&p, 'a');
    put8(&p, '.');
    put8(&p, 0x1b);                             /* ESC */
    put8(&p, 0xff);
    put8(&p, 0);
    rrend(&p, at);
    cr_assert_eq(dns_msg_parse(p.b, p.n, &m), 0);
    cr_expect_str_eq(m.an[0].target, "a\\046\\027\\255");
    dns_msg_clear(&m);
}

/* Hostile or broken packets: each must be refused, never read past. */
struct bad_case {
    const char *name;
    void      (*build)(struct pkt *);
};

static void
bad_short(struct pkt *p)
{
    header(p, 1, 0x8180, 1, 0, 0);
    p->n = 11;
}

static void
bad_query_not_response(struct pkt *p)
{
    header(p, 1, 0x0100, 1, 0, 0);
    putname(p, "x.org");
    put16(p, 1);
    put16(p, 1);
}

static void
bad_two_questions(struct pkt *p)
{
    header(p, 1, 0x8180, 2, 0, 0);
    putname(p, "x.org");
    put16(p, 1);
    put16(p, 1);
}

static void
bad_self_pointer(struct pkt *p)
{
    header(p, 1, 0x8180, 1, 0, 0);
    put16(p, 0xc00c);                           /* points at itself */
    put16(p, 1);
    put16(p, 1);
}

static void
bad_forward_pointer(struct pkt *p)
{
    header(p, 1, 0x8180, 1, 0, 0);
    put16(p, 0xc00e);                           /* to the next byte */
    put8(p, 0);
    put16(p, 1);
    put16(p, 1);
}

static void
bad_pointer_loop_in_rdata(struct pkt *p)
{
    size_t at;

    header(p, 1, 0x8180, 1, 1, 0);
    putname(p, "x.org");
    put16(p, DNS_T_CNAME);
    put16(p, 1);
    at = rrhead(p, "x.org", DNS_T_CNAME, 60);
    put8(p, 1);
    put8(p, 'a');
    put16(p, (unsigned)(0xc000 | (p->n - 2)));  /* back to "a": a loop */
    rrend(p, at);
}

static void
bad_label_past_end(struct pkt *p)
{
    header(p, 1, 0x8180, 1, 0, 0);
    put8(p, 60);
    put8(p, 'x');
}

static void
bad_name_too_long(struct pkt *p)
{
    int i;

    header(p, 1, 0x8180, 1, 0, 0);
    for (i = 0; i < 5; i++) {                   /* 5 * 64 > 255 */
        put8(p, 63);
        memset(p->b + p->n, 'a', 63);
        p->n += 63;
    }
    put8(p, 0);
    put16(p, 1);
    put16(p, 1);
}

static void
bad_rdlength_past_end(struct pkt *p)
{
    header(p, 1, 0x8180, 1, 1, 0);
    putname(p, "x.org");
    put16(p, 1);
    put16(p, 1);
    rrhead(p, "x.org", DNS_T_A, 60);
    p->b[p->n - 1] = 200;                       /* rdlength 200, no data */
}

static void
bad_a_wrong_length(struct pkt *p)
{
    size_t at;

    header(p, 1, 0x8180, 1, 1, 0);
    putname(p, "x.org");
    put16(p, 1);
    put16(p, 1);
    at = rrhead(p, "x.org", DNS_T_A, 60);
    put8(p, 127);
    put8(p, 0);
    put8(p, 0);
    rrend(p, at);
}

static void
bad_mx_name_overruns_rdata(struct pkt *p)
{
    size_t at;

    header(p, 1, 0x8180, 1, 1, 0);
    putname(p, "x.org");
    put16(p, DNS_T_MX);
    put16(p, 1);
    at = rrhead(p, "x.org", DNS_T_MX, 60);
    put16(p, 10);
    put8(p, 2);
    put8(p, 'm');
    put8(p, 'x');
    rrend(p, at);                               /* rdata ends, no root */
    put8(p, 0);                                 /* the root after it */
}

static void
bad_soa_short(struct pkt *p)
{
    size_t at;

    header(p, 1, 0x8183, 1, 0, 1);
    putname(p, "x.org");
    put16(p, 1);
    put16(p, 1);
    at = rrhead(p, "x.org", DNS_T_SOA, 60);
    putname(p, "a");
    putname(p, "b");
    put32(p, 1);
    rrend(p, at);
}

static void
bad_extended_label(struct pkt *p)
{
    header(p, 1, 0x8180, 1, 0, 0);
    put8(p, 0x41);
    put8(p, 0);
    put16(p, 1);
    put16(p, 1);
}

Test(dns_msg, refuses_malformed_packets)
{
    static const struct bad_case cases[] = {
        { "shorter than a header", bad_short },
        { "a query, not a response", bad_query_not_response },
        { "two questions", bad_two_questions },
        { "pointer to itself", bad_self_pointer },
        { "pointer forwards", bad_forward_pointer },
        { "pointer loop in rdata", bad_pointer_loop_in_rdata },
        { "label past the end", bad_label_past_end },
        { "name over 255 octets", bad_name_too_long },
        { "rdlength past the end", bad_rdlength_past_end },
        { "A record of 3 bytes", bad_a_wrong_length },
        { "MX name past its rdata", bad_mx_name_overruns_rdata },
        { "SOA rdata too short", bad_soa_short },
        { "extended label type", bad_extended_label },
    };
    struct dns_msg m;
    struct pkt p;
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&p, 0, sizeof(p));
        cases[i].build(&p);
        cr_expect_eq(dns_msg_parse(p.b, p.n, &m), DNS_EINVAL,
            "%s: got accepted, want DNS_EINVAL", cases[i].name);
        cr_expect_eq(m.an, NULL, "%s: left records behind", cases[i].name);
    }
    cr_expect_eq(dns_msg_parse(NULL, 0, &m), DNS_EINVAL);
}

Test(dns_msg, tlsa_and_txt_rdata)
{
    unsigned char tl[] = { 3, 1, 1, 0xde, 0xad };
    unsigned char tx[] = { 3, 'v', '=', 'S', 4, 'T', 'S', 'v', '1' };
    unsigned char txbad[] = { 9, 'x' };
    struct dns_rr rr = { DNS_T_TLSA, 60, sizeof(tl), tl };
    struct dns_tlsa t;
    char out[64];

    cr_assert_eq(dns_tlsa_parse(&rr, &t), 0);
    cr_expect_eq(t.usage, 3);
    cr_expect_eq(t.selector, 1);
    cr_expect_eq(t.mtype, 1);
    cr_expect_eq(t.len, 2);
    cr_expect_eq(t.data[0], 0xde);
    rr.len = 3;
    cr_expect_eq(dns_tlsa_parse(&rr, &t), DNS_EINVAL, "no data: refused");
    rr = (struct dns_rr){ DNS_T_TXT, 60, sizeof(tx), tx };
    cr_assert_eq(dns_txt_join(&rr, out, sizeof(out)), 0);
    cr_expect_str_eq(out, "v=STSv1");
    rr = (struct dns_rr){ DNS_T_TXT, 60, sizeof(txbad), txbad };
    cr_expect_eq(dns_txt_join(&rr, out, sizeof(out)), DNS_EINVAL);
    rr = (struct dns_rr){ DNS_T_TXT, 60, sizeof(tx), tx };
    cr_expect_eq(dns_txt_join(&rr, out, 5), DNS_EINVAL, "no room: refused");
}

/* ---------------- MX ordering ---------------- */

static uint32_t
rnd_real(void *arg)
{
    (void)arg;
    return arc4random();
}

static uint32_t
rnd_zero(void *arg)
{
    (void)arg;
    return 0;
}

Test(dns_mx_order, sorts_by_preference)
{
    struct dns_mx mx[] = {
        { 30, "c" }, { 10, "a" }, { 20, "b" }, { 5, "z" }, { 65535, "last" },
    };
    size_t i;

    dns_mx_order(mx, 5, rnd_zero, NULL);
    for (i = 1; i < 5; i++)
        cr_expect_leq(mx[i - 1].pref, mx[i].pref, "got %u before %u",
            mx[i - 1].pref, mx[i].pref);
    cr_expect_str_eq(mx[0].name, "z");
    cr_expect_str_eq(mx[4].name, "last");
}

/* Every order of three equal preferences shows up, while the unequal
 * ones keep their places.  With a uniform shuffle the chance that one of
 * the 6 orders is missing from 600 runs is about 6 * (5/6)^600 < 1e-45. */
Test(dns_mx_order, equal_preferences_come_in_every_order)
{
    int seen[6] = { 0 };
    int run, i;

    for (run = 0; run < 600; run++) {
        struct dns_mx mx[] = {
            { 20, "late" }, { 10, "a" }, { 10, "b" }, { 10, "c" }, { 5, "first" },
        };
        int code;

        dns_mx_order(mx, 5, rnd_real, NULL);
        cr_assert_str_eq(mx[0].name, "first");
        cr_assert_str_eq(mx[4].name, "late");
        for (i = 1; i < 4; i++)
            cr_assert_eq(mx[i].pref, 10);
        /* order of a, b, c as a number 0..5 */
        code = (mx[1].name[0] - 'a') * 2 + (mx[2].name[0] > mx[3].name[0]);
        cr_assert(code >= 0 && code < 6);
        seen[code]++;
    }
    for (i = 0; i < 6; i++)
        cr_expect_gt(seen[i], 0, "order %d never seen in 600 runs", i);
}

/* ---------------- a fake authoritative server ---------------- */

struct zrr {
    const char *name;
    uint16_t    type;
    uint32_t    ttl;
    const char *data;       /* A/AAAA text, MX "pref host", CNAME target */
};

/* The zone.  "ooz.t" is a CNAME whose target the server does not follow
 * (as for an out-of-zone target); "fail.t" answers SERVFAIL; "mute.t"
 * never answers. */
static const struct zrr zone[] = {
    { "t", DNS_T_SOA, 3600, NULL },
    { "multi.t", DNS_T_MX, 300, "10 mx1.t" },
    { "multi.t", DNS_T_MX, 300, "10 mx2.t" },
    { "multi.t", DNS_T_MX, 300, "20 mx3.t" },
    { "mx1.t", DNS_T_A, 300, "127.0.0.11" },
    { "mx2.t", DNS_T_A, 300, "127.0.0.12" },
    { "mx3.t", DNS_T_A, 300, "127.0.0.13" },
    { "mx3.t", DNS_T_AAAA, 300, "::1" },
    { "null.t", DNS_T_MX, 300, "0 ." },
    { "aonly.t", DNS_T_A, 300, "127.0.0.41" },
    { "short.t", DNS_T_MX, 5, "10 mx1.t" },
    { "long.t", DNS_T_MX, 3000, "10 mx1.t" },
    { "alias.t", DNS_T_CNAME, 300, "multi.t" },
    { "ooz.t", DNS_T_CNAME, 300, "aonly.t" },
    { "v6.t", DNS_T_MX, 300, "10 mx3.t" },
    { "badhost.t", DNS_T_MX, 300, "10 nohost.t" },
    { "txt.t", DNS_T_TXT, 300, "v=STSv1" },
    { "a.t", DNS_T_MX, 300, "10 mx1.t" },
    { "b.t", DNS_T_MX, 300, "10 mx1.t" },
    { "c.t", DNS_T_MX, 300, "10 mx1.t" },
};
#define ZONE_NEG_TTL 30             /* SOA minimum */

struct fake {
    int             fd;
    unsigned        port;
    int             ad;             /* set AD=1 in answers */
    int             queries;        /* all */
    int             mx_queries;
    int             saw_ad_bit;     /* every query had AD=1 */
};

static int
zone_has(const char *name)
{
    size_t i;

    for (i = 0; i < sizeof(zone) / sizeof(zone[0]); i++)
        if (strcmp(zone[i].name, name) == 0)
            return 1;
    return 0;
}

static unsigned
zone_add(struct pkt *p, const char *name, uint16_t type)
{
    unsigned n = 0;
    size_t   i, at;

    for (i = 0; i < sizeof(zone) / sizeof(zone[0]); i++) {
        const struct zrr *z = &zone[i];
        unsigned char a[16];

        if (z->type != type || strcmp(z->name, name) != 0)
            continue;
        at = rrhead(p, z->name, z->type, z->ttl);
        if (type == DNS_T_A) {
            inet_pton(AF_INET, z->data, a);
            memcpy(p->b + p->n, a, 4);
            p->n += 4;
        } else if (type == DNS_T_AAAA) {
            inet_pton(AF_INET6, z->data, a);
            memcpy(p->b + p->n, a, 16);
            p->n += 16;
        } else if (type == DNS_T_MX) {
            char host[128];
            unsigned pref;

            sscanf(z->data, "%u %127s", &pref, host);
            put16(p, pref);
            putname(p, strcmp(host, ".") == 0 ? "" : host);
        } else if (type == DNS_T_CNAME)
            putname(p, z->data);
        else if (type == DNS_T_TXT) {
            put8(p, (unsigned)strlen(z->data));
            memcpy(p->b + p->n, z->data, strlen(z->data));
            p->n += strlen(z->data);
        }
        rrend(p, at);
        n++;
    }
    return n;
}

static const char *
zone_cname(const char *name)
{
    size_t i;

    for (i = 0; i < sizeof(zone) / sizeof(zone[0]); i++)
        if (zone[i].type == DNS_T_CNAME && strcmp(zone[i].name, name) == 0)
            return zone[i].data;
    return NULL;
}

static void
fake_on_read(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct fake *f = arg;
    struct sockaddr_storage from;
    socklen_t fl = sizeof(from);
    unsigned char q[512];
    char name[256] = "", cur[256];
    struct pkt p;
    ssize_t n;
    size_t off = 12, o = 0;
    unsigned qtype, an = 0, rcode = 0, ns = 0, found;
    const char *t;

    (void)loop;
    (void)events;
    n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);
    if (n < 17)
        return;
    while (off < (size_t)n && q[off] != 0) {
        if (o)
            name[o++] = '.';
        memcpy(name + o, q + off + 1, q[off]);
        o += q[off];
        off += q[off] + 1U;
    }
    name[o] = '\0';
    qtype = (unsigned)(q[off + 1] << 8 | q[off + 2]);
    f->queries++;
    if (qtype == DNS_T_MX)
        f->mx_queries++;
    if (!(q[3] & 0x20))
        f->saw_ad_bit = 0;
    if (strcmp(name, "mute.t") == 0)
        return;
    header(&p, (unsigned)(q[0] << 8 | q[1]), 0, 1, 0, 0);
    memcpy(p.b + 12, q + 12, off + 5 - 12);
    p.n = off + 5;
    snprintf(cur, sizeof(cur), "%s", name);
    if (strcmp(name, "fail.t") == 0)
        rcode = 2;
    else {
        /* Follow in-zone CNAMEs as an authoritative server does, except
         * from ooz.t (its target is taken as out of zone). */
        while (qtype != DNS_T_CNAME && (t = zone_cname(cur)) != NULL) {
            an += zone_add(&p, cur, DNS_T_CNAME);
            if (strcmp(cur, "ooz.t") == 0) {
                snprintf(cur, sizeof(cur), "%s", t);
                goto send;
            }
            snprintf(cur, sizeof(cur), "%s", t);
        }
        found = zone_add(&p, cur, (uint16_t)qtype);
        an += found;
        if (found == 0) {                       /* NODATA or NXDOMAIN */
            size_t at = rrhead(&p, "t", DNS_T_SOA, 3600);

            putname(&p, "ns.t");
            putname(&p, "host.t");
            put32(&p, 1);
            put32(&p, 3600);
            put32(&p, 600);
            put32(&p, 86400);
            put32(&p, ZONE_NEG_TTL);
            rrend(&p, at);
            ns = 1;
            if (!zone_has(cur))
                rcode = 3;
        }
    }
send:
    p.b[2] = 0x81;                              /* QR, RD */
    p.b[3] = (unsigned char)(0x80 | (f->ad ? 0x20 : 0) | rcode);
    p.b[6] = (unsigned char)(an >> 8);
    p.b[7] = (unsigned char)an;
    p.b[8] = (unsigned char)(ns >> 8);
    p.b[9] = (unsigned char)ns;
    (void)sendto(fd, p.b, p.n, 0, (struct sockaddr *)&from, fl);
}

static void
fake_start(struct ev_loop *loop, struct fake *f)
{
    struct sockaddr_in sin;
    socklen_t sl = sizeof(sin);

    memset(f, 0, sizeof(*f));
    f->saw_ad_bit = 1;
    f->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    cr_assert_geq(f->fd, 0);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(f->fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    cr_assert_eq(getsockname(f->fd, (struct sockaddr *)&sin, &sl), 0);
    f->port = ntohs(sin.sin_port);
    cr_assert_eq(ev_watch(loop, f->fd, EV_READ, fake_on_read, f), 0);
}

/* ---------------- the resolver against it ---------------- */

static uint64_t fake_ms = 1000000;

static uint64_t
fake_clock(void *arg)
{
    (void)arg;
    return fake_ms;
}

struct env {
    struct ev_loop *loop;
    struct dns     *d;
    struct fake     f;
    struct ev_timer guard;
    int             want, got, ndest;
    struct dns_dest *dest[8];
    struct dns_rrset *set;
};

static void
guard_fired(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop;
    (void)t;
    (void)arg;
    cr_assert_fail("lookups did not complete within 10 s");
}

static void
env_start(struct env *e, struct dns_options *o)
{
    struct dns_options def;
    char servers[64], why[256];

    memset(e, 0, sizeof(*e));
    e->loop = ev_new();
    cr_assert_not_null(e->loop);
    fake_start(e->loop, &e->f);
    if (o == NULL) {
        dns_options_default(&def);
        o = &def;
    }
    snprintf(servers, sizeof(servers), "127.0.0.1:%u", e->f.port);
    o->servers = servers;
    if (o->timeout_ms == 5000)
        o->timeout_ms = 2000;
    cr_assert_eq(dns_new(&e->d, e->loop, o, why, sizeof(why)), 0, "%s", why);
    dns_set_clock(e->d, fake_clock, NULL);
    ev_timer_init(&e->guard, guard_fired, NULL);
}

static void
env_stop(struct env *e)
{
    size_t i;

    for (i = 0; i < 8; i++)
        dns_dest_free(e->dest[i]);
    dns_rrset_free(e->set);
    dns_free(e->d);
    ev_unwatch(e->loop, e->f.fd);
    close(e->f.fd);
    ev_free(e->loop);
}

static void
got_dest(struct dns_dest *dest, void *arg)
{
    struct env *e = arg;

    cr_assert_lt(e->ndest, 8);
    e->dest[e->ndest++] = dest;
    e->got++;
    if (e->got == e->want)
        ev_stop(e->loop);
}

static void
got_set(struct dns_rrset *set, void *arg)
{
    struct env *e = arg;

    e->set = set;
    e->got++;
    if (e->got == e->want)
        ev_stop(e->loop);
}

/* env_wait - run the loop until `want` results in total have come. */
static void
env_wait(struct env *e, int want)
{
    e->want = want;
    if (e->got >= want)
        return;
    ev_timer_start(e->loop, &e->guard, 10000);
    ev_run(e->loop);
    ev_timer_stop(e->loop, &e->guard);
    cr_assert_eq(e->got, want);
}

/* mx - one MX lookup to completion; the result (owned by e). */
static struct dns_dest *
mx(struct env *e, const char *domain)
{
    int before = e->ndest;

    cr_assert_eq(dns_mx(e->d, domain, got_dest, e, NULL), 0);
    env_wait(e, e->got + 1);
    return e->dest[before];
}

static void
expect_host(const struct dns_host *h, const char *name, unsigned pref,
    const char *addr)
{
    char a[64];

    cr_expect_str_eq(h->name, name);
    cr_expect_eq(h->pref, pref, "%s: pref %u, want %u", name, h->pref, pref);
    cr_assert_geq(h->naddr, 1, "%s: no address", name);
    dns_addr_str(&h->addr[0], a, sizeof(a));
    cr_expect_str_eq(a, addr);
}

Test(dns, mx_hosts_sorted_with_addresses)
{
    struct env e;
    struct dns_dest *d;

    env_start(&e, NULL);
    d = mx(&e, "Multi.T.");
    cr_assert_eq(d->status, DNS_OK, "%s", d->why);
    cr_expect_str_eq(d->domain, "multi.t");
    cr_expect_eq(d->implicit, 0);
    cr_expect_eq(d->ttl, 300);
    cr_assert_eq(d->nhost, 3);
    cr_expect(strcmp(d->host[0].name, "mx1.t") == 0 ||
        strcmp(d->host[0].name, "mx2.t") == 0);
    cr_expect_eq(d->host[0].pref, 10);
    cr_expect_eq(d->host[1].pref, 10);
    expect_host(&d->host[2], "mx3.t", 20, "127.0.0.13");
    cr_expect_eq(d->host[2].naddr, 2, "A and AAAA");
    cr_expect_eq(d->host[2].addr[1].family, AF_INET6, "IPv4 preferred");
    cr_expect_eq(d->host[0].ttl, 300);
    cr_expect_eq(d->secure, 0, "no AD bit from this server");
    cr_expect_eq(e.f.saw_ad_bit, 1, "every query carries AD=1");
    env_stop(&e);
}

Test(dns, prefer_ipv6_and_family_limits)
{
    struct dns_options o;
    struct env e;
    struct dns_dest *d;

    dns_options_default(&o);
    o.prefer = DNS_IPV6;
    env_start(&e, &o);
    d = mx(&e, "v6.t");
    cr_assert_eq(d->status, DNS_OK, "%s", d->why);
    cr_assert_eq(d->host[0].naddr, 2);
    cr_expect_eq(d->host[0].addr[0].family, AF_INET6);
    env_stop(&e);

    dns_options_default(&o);
    o.family = DNS_IPV4;
    env_start(&e, &o);
    d = mx(&e, "v6.t");
    cr_assert_eq(d->host[0].naddr, 1);
    cr_expect_eq(d->host[0].addr[0].family, AF_INET);
    cr_expect_eq(e.f.queries, 2, "MX and A only, got %d", e.f.queries);
    env_stop(&e);
}

Test(dns, address_limit_caps_the_list)
{
    struct dns_options o;
    struct env e;
    struct dns_dest *d;
    size_t i, total = 0;

    dns_options_default(&o);
    o.address_limit = 2;
    env_start(&e, &o);
    d = mx(&e, "multi.t");
    cr_assert_eq(d->status, DNS_OK);
    for (i = 0; i < d->nhost; i++)
        total += d->host[i].naddr;
    cr_expect_eq(total, 2);
    cr_expect_eq(d->nhost, 2, "hosts past the limit are left out");
    env_stop(&e);
}

Test(dns, null_mx_nxdomain_implicit_and_no_address)
{
    struct env e;
    struct dns_dest *d;

    env_start(&e, NULL);
    d = mx(&e, "null.t");
    cr_expect_eq(d->status, DNS_NULLMX, "got %s", dns_status_name(d->status));
    cr_expect_eq(d->nhost, 0);
    d = mx(&e, "nosuch.t");
    cr_expect_eq(d->status, DNS_NXDOMAIN, "got %s", dns_status_name(d->status));
    d = mx(&e, "aonly.t");
    cr_assert_eq(d->status, DNS_OK, "%s", d->why);
    cr_expect_eq(d->implicit, 1);
    cr_assert_eq(d->nhost, 1);
    expect_host(&d->host[0], "aonly.t", 0, "127.0.0.41");
    d = mx(&e, "badhost.t");
    cr_expect_eq(d->status, DNS_NODATA, "got %s", dns_status_name(d->status));
    cr_assert_eq(d->nhost, 1);
    cr_expect_eq(d->host[0].status, DNS_NXDOMAIN);
    env_stop(&e);
}

Test(dns, cnames_followed_in_and_out_of_the_answer)
{
    struct env e;
    struct dns_dest *d;

    env_start(&e, NULL);
    d = mx(&e, "alias.t");
    cr_assert_eq(d->status, DNS_OK, "%s", d->why);
    cr_expect_str_eq(d->name, "multi.t");
    cr_expect_eq(d->nhost, 3);
    /* ooz.t: the server stops at the CNAME; we ask for the target. */
    d = mx(&e, "ooz.t");
    cr_assert_eq(d->status, DNS_OK, "%s", d->why);
    cr_expect_str_eq(d->name, "aonly.t");
    cr_expect_eq(d->implicit, 1);
    expect_host(&d->host[0], "aonly.t", 0, "127.0.0.41");
    env_stop(&e);
}

Test(dns, servfail_and_timeout_are_temporary_and_not_cached)
{
    struct dns_options o;
    struct env e;
    struct dns_dest *d;
    int q;

    dns_options_default(&o);
    o.timeout_ms = 150;
    o.attempts = 1;
    env_start(&e, &o);
    d = mx(&e, "fail.t");
    cr_expect_eq(d->status, DNS_TEMPFAIL);
    cr_expect_neq(strstr(d->why, "SERVFAIL"), NULL, "why: %s", d->why);
    q = e.f.queries;
    d = mx(&e, "fail.t");
    cr_expect_eq(d->status, DNS_TEMPFAIL);
    cr_expect_gt(e.f.queries, q, "a temporary failure was cached");
    d = mx(&e, "mute.t");
    cr_expect_eq(d->status, DNS_TEMPFAIL);
    cr_expect_neq(strstr(d->why, "timed out"), NULL, "why: %s", d->why);
    env_stop(&e);
}

Test(dns, answers_cached_with_ttl_clamped)
{
    struct dns_options o;
    struct env e;
    struct dns_dest *d;
    struct dns_stats st;
    int q;

    dns_options_default(&o);
    o.min_ttl = 60;
    o.max_ttl = 600;
    env_start(&e, &o);
    d = mx(&e, "short.t");                      /* TTL 5 -> 60 */
    cr_expect_eq(d->ttl, 60, "clamped up to min_ttl, got %u", d->ttl);
    q = e.f.mx_queries;
    fake_ms += 30 * 1000;
    d = mx(&e, "short.t");
    cr_expect_eq(e.f.mx_queries, q, "asked again within the clamped TTL");
    cr_expect_eq(d->ttl, 30, "30 s left, got %u", d->ttl);
    fake_ms += 31 * 1000;
    d = mx(&e, "short.t");
    cr_expect_gt(e.f.mx_queries, q, "not asked again after expiry");

    d = mx(&e, "long.t");                       /* TTL 3000 -> 600 */
    cr_expect_eq(d->ttl, 600, "clamped down to max_ttl, got %u", d->ttl);
    q = e.f.mx_queries;
    fake_ms += 599 * 1000;
    (void)mx(&e, "long.t");
    cr_expect_eq(e.f.mx_queries, q);
    fake_ms += 2 * 1000;
    (void)mx(&e, "long.t");
    cr_expect_gt(e.f.mx_queries, q, "max_ttl not applied");
    dns_stats(e.d, &st);
    cr_expect_gt(st.cache_hits, 0);
    env_stop(&e);
}

Test(dns, negative_answers_cached_for_the_soa_minimum)
{
    struct env e;
    struct dns_dest *d;
    int q;

    env_start(&e, NULL);
    d = mx(&e, "nosuch.t");
    cr_expect_eq(d->status, DNS_NXDOMAIN);
    q = e.f.queries;
    fake_ms += (ZONE_NEG_TTL - 1) * 1000;
    d = mx(&e, "nosuch.t");
    cr_expect_eq(d->status, DNS_NXDOMAIN);
    cr_expect_eq(e.f.queries, q, "NXDOMAIN not cached (RFC 2308)");
    fake_ms += 2 * 1000;
    (void)mx(&e, "nosuch.t");
    cr_expect_eq(e.f.queries, q + 1, "NXDOMAIN cached past the SOA minimum");
    env_stop(&e);
}

Test(dns, concurrent_lookups_of_one_name_share_a_query)
{
    struct env e;
    struct dns_stats st;
    int i;

    env_start(&e, NULL);
    for (i = 0; i < 5; i++)
        cr_assert_eq(dns_mx(e.d, "multi.t", got_dest, &e, NULL), 0);
    cr_expect_eq(e.got, 0, "a callback ran inside dns_mx()");
    env_wait(&e, 5);
    cr_expect_eq(e.f.mx_queries, 1, "%d MX queries for 5 joined lookups",
        e.f.mx_queries);
    cr_expect_eq(e.f.queries, 1 + 3 * 2, "MX + A/AAAA of 3 hosts, got %d",
        e.f.queries);
    for (i = 0; i < 5; i++) {
        cr_expect_eq(e.dest[i]->status, DNS_OK);
        cr_expect_eq(e.dest[i]->nhost, 3);
    }
    dns_stats(e.d, &st);
    cr_expect_geq(st.joined, 4);
    env_stop(&e);
}

Test(dns, cache_hit_still_calls_back_from_the_loop)
{
    struct env e;

    env_start(&e, NULL);
    (void)mx(&e, "multi.t");
    cr_assert_eq(dns_mx(e.d, "multi.t", got_dest, &e, NULL), 0);
    cr_expect_eq(e.got, 1, "callback ran inside dns_mx() on a cache hit");
    env_wait(&e, 2);
    cr_expect_eq(e.f.mx_queries, 1);
    env_stop(&e);
}

Test(dns, cache_is_bounded)
{
    struct dns_options o;
    struct env e;
    struct dns_stats st;

    dns_options_default(&o);
    o.cache_max = 3;
    env_start(&e, &o);
    (void)mx(&e, "a.t");
    (void)mx(&e, "b.t");
    (void)mx(&e, "c.t");
    dns_stats(e.d, &st);
    cr_expect_leq(st.cached, 3, "%zu rrsets cached, max 3", st.cached);
    cr_expect_gt(st.evictions, 0);
    env_stop(&e);
}

static void
never(struct dns_dest *dest, void *arg)
{
    (void)dest;
    (void)arg;
    cr_assert_fail("a cancelled lookup called back");
}

Test(dns, cancelled_lookup_never_calls_back)
{
    struct env e;
    struct dns_req *r;

    env_start(&e, NULL);
    cr_assert_eq(dns_mx(e.d, "multi.t", never, NULL, &r), 0);
    dns_cancel(r);
    /* A second lookup of the same name completes: the shared query and
     * the cache are not hurt by the cancel. */
    (void)mx(&e, "multi.t");
    cr_expect_eq(e.dest[0]->status, DNS_OK);
    /* Cancel after completion, before the callback's turn. */
    cr_assert_eq(dns_mx(e.d, "multi.t", never, NULL, &r), 0);
    dns_cancel(r);
    (void)mx(&e, "multi.t");
    env_stop(&e);
}

Test(dns, ad_bit_reported_as_secure)
{
    struct env e;
    struct dns_dest *d;

    env_start(&e, NULL);
    e.f.ad = 1;
    d = mx(&e, "multi.t");
    cr_expect_eq(d->secure, 1);
    cr_expect_eq(d->host[0].secure, 1);
    env_stop(&e);
}

Test(dns, raw_txt_and_host_lookups)
{
    struct env e;
    char out[64];

    env_start(&e, NULL);
    cr_assert_eq(dns_query(e.d, "txt.t", DNS_T_TXT, got_set, &e, NULL), 0);
    env_wait(&e, 1);
    cr_assert_eq(e.set->status, DNS_OK);
    cr_assert_eq(e.set->n, 1);
    cr_assert_eq(dns_txt_join(&e.set->rr[0], out, sizeof(out)), 0);
    cr_expect_str_eq(out, "v=STSv1");
    cr_assert_eq(dns_host(e.d, "mx3.t", got_dest, &e, NULL), 0);
    env_wait(&e, 2);
    cr_expect_eq(e.dest[0]->status, DNS_OK);
    cr_expect_eq(e.dest[0]->host[0].naddr, 2);
    cr_expect_str_eq(e.dest[0]->host[0].target, "mx3.t");
    cr_assert_eq(dns_host(e.d, "192.0.2.7", got_dest, &e, NULL), 0);
    env_wait(&e, 3);
    expect_host(&e.dest[1]->host[0], "192.0.2.7", 0, "192.0.2.7");
    env_stop(&e);
}

Test(dns, host_target_is_the_name_after_cnames)
{
    struct env e;

    env_start(&e, NULL);
    /* the TLSA base domain of RFC 7672 2.2.3 */
    cr_assert_eq(dns_host(e.d, "ooz.t", got_dest, &e, NULL), 0);
    env_wait(&e, 1);
    cr_assert_eq(e.dest[0]->status, DNS_OK, "%s", e.dest[0]->why);
    cr_expect_str_eq(e.dest[0]->host[0].name, "ooz.t");
    cr_expect_str_eq(e.dest[0]->host[0].target, "aonly.t");
    env_stop(&e);
}

Test(dns, bad_names_and_servers_refused)
{
    struct dns_options o;
    struct ev_loop *loop = ev_new();
    struct dns *d = NULL;
    char why[256];

    dns_options_default(&o);
    o.servers = "not-an-address";
    cr_expect_eq(dns_new(&d, loop, &o, why, sizeof(why)), DNS_ESERVERS);
    cr_expect_null(d);
    o.servers = "127.0.0.1:53";
    cr_assert_eq(dns_new(&d, loop, &o, why, sizeof(why)), 0);
    cr_expect_eq(dns_mx(d, "a b.org", got_dest, NULL, NULL), DNS_EINVAL);
    cr_expect_eq(dns_mx(d, "", got_dest, NULL, NULL), DNS_EINVAL);
    cr_expect_eq(dns_mx(d, "a..org", got_dest, NULL, NULL), DNS_EINVAL);
    cr_expect_eq(dns_mx(d, "\x1b[31m.org", got_dest, NULL, NULL), DNS_EINVAL);
    dns_free(d);
    ev_free(loop);
}
