/*
 * test_proxy.c - the PROXY protocol parser (proxy/proxy.c): table-driven
 * v1 and v2 cases, every header fed whole and by every prefix (a prefix
 * is PROXY_AGAIN, never a wrong verdict), the version mask, and the
 * bytes after a header left alone.
 */
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <criterion/criterion.h>

#include "proxy/proxy.h"

/* "ip:port" of a parsed address, for comparisons. */
static void
addr_str(const struct sockaddr_storage *ss, char *out, size_t outsz)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)ss;

        inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
        port = ntohs(s->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;

        inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
        port = ntohs(s->sin6_port);
    }
    snprintf(out, outsz, "%s:%u", ip, port);
}

/* --- v1 ---------------------------------------------------------------- */

static const struct {
    const char *in;
    int         rc;
    const char *src, *dst;      /* NULL: local */
} v1_cases[] = {
    { "PROXY TCP4 127.0.0.2 127.0.0.1 40000 25\r\n", PROXY_OK,
      "127.0.0.2:40000", "127.0.0.1:25" },
    { "PROXY TCP6 2001:db8::1 ::1 65535 0\r\n", PROXY_OK,
      "2001:db8::1:65535", "::1:0" },
    { "PROXY UNKNOWN\r\n", PROXY_OK, NULL, NULL },
    { "PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n",
      PROXY_OK, NULL, NULL },
    { "PROXY TCP4 127.0.0.2 127.0.0.1 40000\r\n", PROXY_EBAD, NULL, NULL },
    { "PROXY TCP4 127.0.0.2 127.0.0.1 40000 25 9\r\n", PROXY_EBAD, NULL,
      NULL },
    { "PROXY TCP4 127.0.0.2  127.0.0.1 40000 25\r\n", PROXY_EBAD, NULL,
      NULL },
    { "PROXY TCP4 ::1 127.0.0.1 40000 25\r\n", PROXY_EBAD, NULL, NULL },
    { "PROXY TCP6 127.0.0.2 ::1 40000 25\r\n", PROXY_EBAD, NULL, NULL },
    { "PROXY TCP4 127.0.0.2 127.0.0.1 65536 25\r\n", PROXY_EBAD, NULL,
      NULL },
    { "PROXY TCP4 127.0.0.2 127.0.0.1 0400 25\r\n", PROXY_EBAD, NULL, NULL },
    { "PROXY TCP4 127.0.0.2 127.0.0.1 -1 25\r\n", PROXY_EBAD, NULL, NULL },
    { "PROXY TCP4 256.0.0.2 127.0.0.1 1 25\r\n", PROXY_EBAD, NULL, NULL },
    { "PROXY TCP5 127.0.0.2 127.0.0.1 1 25\r\n", PROXY_EBAD, NULL, NULL },
    { "PROXY tcp4 127.0.0.2 127.0.0.1 1 25\r\n", PROXY_EBAD, NULL, NULL },
    { "PROXY TCP4 127.0.0.2 127.0.0.1 1 25\n", PROXY_EBAD, NULL, NULL },
    { "PROXY TCP4 127.0.0.2 127.0.0.1 1 25\rX", PROXY_EBAD, NULL, NULL },
    { "PROXY TCP4 127.0.0.2\t127.0.0.1 1 25\r\n", PROXY_EBAD, NULL, NULL },
    { "PROXY \r\n", PROXY_EBAD, NULL, NULL },
    { "EHLO client.example\r\n", PROXY_EBAD, NULL, NULL },
    { "PROXZ TCP4 127.0.0.2 127.0.0.1 1 25\r\n", PROXY_EBAD, NULL, NULL },
};

Test(proxy, v1_table)
{
    struct proxy_hdr h;
    const char      *why;
    char             got[80];
    size_t           i;
    int              rc;

    for (i = 0; i < sizeof(v1_cases) / sizeof(v1_cases[0]); i++) {
        const char *in = v1_cases[i].in;

        rc = proxy_parse(in, strlen(in), PROXY_V1, &h, &why);
        cr_assert_eq(rc, v1_cases[i].rc, "case %zu '%s': got %d, want %d",
            i, in, rc, v1_cases[i].rc);
        if (rc == PROXY_EBAD) {
            cr_assert(why != NULL && why[0] != '\0', "case %zu: no reason",
                i);
            continue;
        }
        cr_assert_eq(h.version, 1);
        cr_assert_eq(h.len, strlen(in), "case %zu: len %zu", i, h.len);
        cr_assert_eq(h.local, v1_cases[i].src == NULL, "case %zu", i);
        if (v1_cases[i].src == NULL)
            continue;
        addr_str(&h.src, got, sizeof(got));
        cr_assert_str_eq(got, v1_cases[i].src, "case %zu", i);
        addr_str(&h.dst, got, sizeof(got));
        cr_assert_str_eq(got, v1_cases[i].dst, "case %zu", i);
    }
}

Test(proxy, v1_longest_line_is_107_bytes)
{
    char             line[200];
    struct proxy_hdr h;
    const char      *why;

    /* "PROXY UNKNOWN " + padding + CRLF = exactly 107, then 108 */
    memset(line, 'a', sizeof(line));
    memcpy(line, "PROXY UNKNOWN ", 14);
    memcpy(line + 105, "\r\n", 2);
    cr_assert_eq(proxy_parse(line, 107, PROXY_V1, &h, &why), PROXY_OK);
    cr_assert_eq(h.len, 107);
    memset(line, 'a', sizeof(line));
    memcpy(line, "PROXY UNKNOWN ", 14);
    memcpy(line + 106, "\r\n", 2);
    cr_assert_eq(proxy_parse(line, 108, PROXY_V1, &h, &why), PROXY_EBAD);
    cr_assert_eq(proxy_parse(line, 107, PROXY_V1, &h, &why), PROXY_EBAD);
    cr_assert_eq(proxy_parse(line, 106, PROXY_V1, &h, &why), PROXY_AGAIN);
}

Test(proxy, v1_leaves_the_clients_bytes)
{
    const char      *in = "PROXY TCP4 127.0.0.3 127.0.0.1 5 25\r\nEHLO x\r\n";
    struct proxy_hdr h;
    const char      *why;

    cr_assert_eq(proxy_parse(in, strlen(in), PROXY_AUTO, &h, &why),
        PROXY_OK);
    cr_assert_eq(h.len, strlen(in) - strlen("EHLO x\r\n"));
}

/* --- v2 ---------------------------------------------------------------- */

static const unsigned char SIG[12] = {
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A
};

/* v2 header: cmd, family byte, address block, tlv bytes; returns length. */
static size_t
v2(unsigned char *out, unsigned verc, unsigned fam, const void *addr,
    size_t alen, size_t tlv)
{
    size_t len = alen + tlv;

    memcpy(out, SIG, 12);
    out[12] = (unsigned char)verc;
    out[13] = (unsigned char)fam;
    out[14] = (unsigned char)(len >> 8);
    out[15] = (unsigned char)(len & 0xff);
    memcpy(out + 16, addr, alen);
    memset(out + 16 + alen, 0xEE, tlv);
    return 16 + len;
}

static const unsigned char A4[12] = {
    127, 0, 0, 2,  127, 0, 0, 1,  0x9c, 0x40,  0x00, 0x19
};

Test(proxy, v2_inet)
{
    unsigned char    b[256];
    struct proxy_hdr h;
    const char      *why;
    char             got[80];
    size_t           n = v2(b, 0x21, 0x11, A4, sizeof(A4), 0);

    cr_assert_eq(proxy_parse(b, n, PROXY_V2, &h, &why), PROXY_OK, "%s", why);
    cr_assert_eq(h.version, 2);
    cr_assert_eq(h.len, 28);
    cr_assert_eq(h.local, 0);
    addr_str(&h.src, got, sizeof(got));
    cr_assert_str_eq(got, "127.0.0.2:40000");
    addr_str(&h.dst, got, sizeof(got));
    cr_assert_str_eq(got, "127.0.0.1:25");
}

Test(proxy, v2_inet6)
{
    unsigned char    a[36] = { 0 }, b[256];
    struct proxy_hdr h;
    const char      *why;
    char             got[80];
    size_t           n;

    a[0] = 0x20; a[1] = 0x01; a[2] = 0x0d; a[3] = 0xb8; a[15] = 7;
    a[31] = 1;
    a[32] = 0x01; a[33] = 0x02; a[34] = 0x00; a[35] = 0x19;
    n = v2(b, 0x21, 0x21, a, sizeof(a), 0);
    cr_assert_eq(proxy_parse(b, n, PROXY_AUTO, &h, &why), PROXY_OK);
    addr_str(&h.src, got, sizeof(got));
    cr_assert_str_eq(got, "2001:db8::7:258");
    addr_str(&h.dst, got, sizeof(got));
    cr_assert_str_eq(got, "::1:25");
}

Test(proxy, v2_tlvs_are_counted_not_needed)
{
    unsigned char    b[4096];
    struct proxy_hdr h;
    const char      *why;
    size_t           n = v2(b, 0x21, 0x11, A4, sizeof(A4), 3000);

    /* the verdict comes from the head and the address block alone */
    cr_assert_eq(proxy_parse(b, 28, PROXY_V2, &h, &why), PROXY_OK);
    cr_assert_eq(h.len, n);
    cr_assert_eq(h.len, 16 + 12 + 3000);
}

Test(proxy, v2_local_and_unspec_have_no_client)
{
    unsigned char    b[256];
    struct proxy_hdr h;
    const char      *why;
    size_t           n;

    n = v2(b, 0x20, 0x00, A4, 0, 0);            /* LOCAL, health check */
    cr_assert_eq(proxy_parse(b, n, PROXY_V2, &h, &why), PROXY_OK);
    cr_assert(h.local);
    cr_assert_eq(h.len, 16);
    n = v2(b, 0x20, 0x11, A4, sizeof(A4), 0);   /* LOCAL with a block */
    cr_assert_eq(proxy_parse(b, n, PROXY_V2, &h, &why), PROXY_OK);
    cr_assert(h.local);
    cr_assert_eq(h.len, 28);
    n = v2(b, 0x21, 0x00, A4, 0, 5);            /* PROXY, UNSPEC */
    cr_assert_eq(proxy_parse(b, n, PROXY_V2, &h, &why), PROXY_OK);
    cr_assert(h.local);
    cr_assert_eq(h.len, 21);
}

static const struct {
    unsigned verc, fam;
    size_t   alen;
} v2_bad[] = {
    { 0x11, 0x11, 12 },         /* version 1 in a v2 header */
    { 0x31, 0x11, 12 },         /* version 3 */
    { 0x22, 0x11, 12 },         /* command 2 */
    { 0x2F, 0x11, 12 },         /* command 15 */
    { 0x21, 0x31, 12 },         /* AF_UNIX */
    { 0x21, 0x41, 12 },         /* family 4 */
    { 0x21, 0x12, 12 },         /* DGRAM */
    { 0x21, 0x10, 12 },         /* transport UNSPEC with an address */
    { 0x21, 0x13, 12 },         /* transport 3 */
    { 0x21, 0x11, 11 },         /* block too short for IPv4 */
    { 0x21, 0x21, 12 },         /* block too short for IPv6 */
};

Test(proxy, v2_bad_headers)
{
    unsigned char    b[256], a[64] = { 0 };
    struct proxy_hdr h;
    const char      *why;
    size_t           i, n;
    int              rc;

    for (i = 0; i < sizeof(v2_bad) / sizeof(v2_bad[0]); i++) {
        n = v2(b, v2_bad[i].verc, v2_bad[i].fam, a, v2_bad[i].alen, 0);
        rc = proxy_parse(b, n, PROXY_V2, &h, &why);
        cr_assert_eq(rc, PROXY_EBAD, "case %zu: got %d", i, rc);
        cr_assert(why[0] != '\0');
    }
}

/* --- the version mask and prefixes -------------------------------------- */

Test(proxy, mask_refuses_the_other_version)
{
    const char      *v1 = "PROXY TCP4 127.0.0.2 127.0.0.1 1 25\r\n";
    unsigned char    b[64];
    struct proxy_hdr h;
    const char      *why;
    size_t           n = v2(b, 0x21, 0x11, A4, sizeof(A4), 0);

    cr_assert_eq(proxy_parse(v1, strlen(v1), PROXY_V2, &h, &why),
        PROXY_EBAD);
    cr_assert_str_eq(why, "not a PROXY v2 header");
    cr_assert_eq(proxy_parse(b, n, PROXY_V1, &h, &why), PROXY_EBAD);
    cr_assert_str_eq(why, "not a PROXY v1 header");
    cr_assert_eq(proxy_parse(v1, strlen(v1), PROXY_AUTO, &h, &why),
        PROXY_OK);
    cr_assert_eq(h.version, 1);
    cr_assert_eq(proxy_parse(b, n, PROXY_AUTO, &h, &why), PROXY_OK);
    cr_assert_eq(h.version, 2);
    /* one wrong byte is enough for a verdict */
    cr_assert_eq(proxy_parse("E", 1, PROXY_AUTO, &h, &why), PROXY_EBAD);
    cr_assert_eq(proxy_parse("\r\n\r\n\0\r\nQUIX", 12, PROXY_AUTO, &h,
        &why), PROXY_EBAD);
}

/* Every proper prefix of a good header is PROXY_AGAIN (so the caller may
 * consume it), and the whole gives the same verdict as in one piece. */
static void
check_prefixes(const unsigned char *b, size_t n, unsigned mask,
    size_t verdict_at)
{
    struct proxy_hdr h;
    const char      *why;
    size_t           k;

    for (k = 0; k < verdict_at; k++)
        cr_assert_eq(proxy_parse(b, k, mask, &h, &why), PROXY_AGAIN,
            "prefix %zu of %zu", k, n);
    for (k = verdict_at; k <= n; k++)
        cr_assert_eq(proxy_parse(b, k, mask, &h, &why), PROXY_OK,
            "prefix %zu of %zu", k, n);
}

Test(proxy, prefixes_are_again_then_ok)
{
    const char   *v1 = "PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n";
    unsigned char b[256];
    size_t        n;

    check_prefixes((const unsigned char *)v1, strlen(v1), PROXY_AUTO,
        strlen(v1));
    check_prefixes((const unsigned char *)v1, strlen(v1), PROXY_V1,
        strlen(v1));
    n = v2(b, 0x21, 0x11, A4, sizeof(A4), 40);
    check_prefixes(b, n, PROXY_AUTO, 28);
    check_prefixes(b, n, PROXY_V2, 28);
}

Test(proxy, mode_names)
{
    cr_assert_eq(proxy_mode_parse("v1"), PROXY_V1);
    cr_assert_eq(proxy_mode_parse("v2"), PROXY_V2);
    cr_assert_eq(proxy_mode_parse("auto"), PROXY_AUTO);
    cr_assert_eq(proxy_mode_parse("V2"), 0);
    cr_assert_eq(proxy_mode_parse(""), 0);
    cr_assert_str_eq(proxy_mode_name(PROXY_AUTO), "auto");
    cr_assert_str_eq(proxy_mode_name(0), "off");
}
