/*
 * proxy.c - parse a PROXY protocol v1 or v2 header (see proxy.h; the
 * format is HAProxy's doc/proxy-protocol.txt).
 *
 * PURPOSE   Turn the first bytes of a connection from a load balancer into
 *           the client's address, or a verdict that they are not a header.
 * CONTRACT  Stateless: the caller passes every byte received so far each
 *           time.  A prefix that can no longer become a header of an
 *           allowed version is refused at once, so a client that talks
 *           SMTP to a proxy listener is told so without waiting.
 * FAILURE   PROXY_EBAD with a static reason; never reads past buf + n.
 */
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "proxy/proxy.h"

static const unsigned char proxy_v2_sig[12] = {
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A
};
static const char proxy_v1_sig[] = "PROXY ";     /* 6 bytes */


/* proxy_prefix - do the first n bytes of buf match the first n of sig? */
static int
proxy_prefix(const unsigned char *buf, size_t n, const void *sig,
    size_t siglen)
{
    return memcmp(buf, sig, n < siglen ? n : siglen) == 0;
}


/* proxy_v1_port - "0".."65535", digits only, no leading zero. */
static int
proxy_v1_port(const char *s, size_t n, uint16_t *port)
{
    unsigned long v = 0;
    size_t        i;

    if (n == 0 || n > 5 || (n > 1 && s[0] == '0'))
        return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (unsigned long)(s[i] - '0');
    }
    if (v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}


/* proxy_v1_addr - one address of the given family, into ss. */
static int
proxy_v1_addr(int family, const char *s, size_t n,
    struct sockaddr_storage *ss, socklen_t *len)
{
    char text[INET6_ADDRSTRLEN];

    if (n == 0 || n >= sizeof(text))
        return -1;
    memcpy(text, s, n);
    text[n] = '\0';
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;

        if (inet_pton(AF_INET, text, &sin->sin_addr) != 1)
            return -1;
        sin->sin_family = AF_INET;
        *len = sizeof(*sin);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

        if (inet_pton(AF_INET6, text, &sin6->sin6_addr) != 1)
            return -1;
        sin6->sin6_family = AF_INET6;
        *len = sizeof(*sin6);
    }
    return 0;
}


static void
proxy_set_port(struct sockaddr_storage *ss, uint16_t port)
{
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}


/* proxy_v1_fields - split "A B C D" (the part after "TCP4 ") at single
 * spaces into exactly four non-empty fields. */
static int
proxy_v1_fields(const char *p, size_t n, const char *f[4], size_t fl[4])
{
    size_t i, k = 0, start = 0;

    for (i = 0; i <= n; i++) {
        if (i < n && p[i] != ' ')
            continue;
        if (k == 4 || i == start)
            return -1;              /* a fifth field, or an empty one */
        f[k] = p + start;
        fl[k++] = i - start;
        start = i + 1;
    }
    return k == 4 ? 0 : -1;
}


/* proxy_v1 - "PROXY TCP4|TCP6 src dst sport dport\r\n" or
 * "PROXY UNKNOWN ...\r\n". */
static int
proxy_v1(const unsigned char *buf, size_t n, struct proxy_hdr *h,
    const char **why)
{
    const char *p = (const char *)buf, *f[4];
    size_t      i, end, fl[4];
    uint16_t    sport, dport;
    int         family;

    for (i = 0; i < n && i < PROXY_V1_MAX; i++) {
        if (buf[i] == '\n')
            break;
        if (buf[i] == '\r' && i + 1 < n && buf[i + 1] != '\n') {
            *why = "PROXY v1: CR not followed by LF";
            return PROXY_EBAD;
        }
        if (buf[i] != '\r' && (buf[i] < 0x20 || buf[i] > 0x7e)) {
            *why = "PROXY v1: a byte that is not printable ASCII";
            return PROXY_EBAD;
        }
    }
    if (i == n && n < PROXY_V1_MAX)
        return PROXY_AGAIN;
    if (i >= PROXY_V1_MAX) {
        *why = "PROXY v1: no CRLF within 107 bytes";
        return PROXY_EBAD;
    }
    if (i == 0 || buf[i - 1] != '\r') {
        *why = "PROXY v1: LF without CR";
        return PROXY_EBAD;
    }
    end = i - 1;                    /* the CR */
    memset(h, 0, sizeof(*h));
    h->version = 1;
    h->len = i + 1;
    p += 6;
    end -= 6;
    if (end >= 7 && memcmp(p, "UNKNOWN", 7) == 0 &&
        (end == 7 || p[7] == ' ')) {
        h->local = 1;               /* the rest of the line is ignored */
        return PROXY_OK;
    }
    if (end < 5 || (memcmp(p, "TCP4 ", 5) != 0 &&
        memcmp(p, "TCP6 ", 5) != 0)) {
        *why = "PROXY v1: expected TCP4, TCP6 or UNKNOWN";
        return PROXY_EBAD;
    }
    family = p[3] == '4' ? AF_INET : AF_INET6;
    if (proxy_v1_fields(p + 5, end - 5, f, fl) < 0) {
        *why = "PROXY v1: expected source, destination, source port and "
            "destination port separated by single spaces";
        return PROXY_EBAD;
    }
    if (proxy_v1_addr(family, f[0], fl[0], &h->src, &h->srclen) < 0 ||
        proxy_v1_addr(family, f[1], fl[1], &h->dst, &h->dstlen) < 0) {
        *why = family == AF_INET ? "PROXY v1: bad IPv4 address" :
            "PROXY v1: bad IPv6 address";
        return PROXY_EBAD;
    }
    if (proxy_v1_port(f[2], fl[2], &sport) < 0 ||
        proxy_v1_port(f[3], fl[3], &dport) < 0) {
        *why = "PROXY v1: bad port";
        return PROXY_EBAD;
    }
    proxy_set_port(&h->src, sport);
    proxy_set_port(&h->dst, dport);
    return PROXY_OK;
}


/* proxy_v2_inet - the address block of AF_INET (fam 1) or AF_INET6 (2). */
static void
proxy_v2_inet(const unsigned char *a, int v6, struct proxy_hdr *h)
{
    size_t   alen = v6 ? 16 : 4;
    uint16_t sport, dport;

    memset(&h->src, 0, sizeof(h->src));
    memset(&h->dst, 0, sizeof(h->dst));
    memcpy(&sport, a + 2 * alen, 2);
    memcpy(&dport, a + 2 * alen + 2, 2);
    if (!v6) {
        struct sockaddr_in *s = (struct sockaddr_in *)&h->src;
        struct sockaddr_in *d = (struct sockaddr_in *)&h->dst;

        s->sin_family = d->sin_family = AF_INET;
        memcpy(&s->sin_addr, a, 4);
        memcpy(&d->sin_addr, a + 4, 4);
        s->sin_port = sport;        /* both in network order already */
        d->sin_port = dport;
        h->srclen = h->dstlen = sizeof(*s);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&h->src;
        struct sockaddr_in6 *d = (struct sockaddr_in6 *)&h->dst;

        s->sin6_family = d->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, a, 16);
        memcpy(&d->sin6_addr, a + 16, 16);
        s->sin6_port = sport;
        d->sin6_port = dport;
        h->srclen = h->dstlen = sizeof(*s);
    }
}


/* proxy_v2 - the binary header: 12-byte signature, ver/cmd, family and
 * transport, 16-bit length, the address block, then TLVs. */
static int
proxy_v2(const unsigned char *buf, size_t n, struct proxy_hdr *h,
    const char **why)
{
    unsigned ver, cmd, fam, proto;
    size_t   len, need;

    if (n < PROXY_V2_HEAD)
        return PROXY_AGAIN;
    ver = buf[12] >> 4;
    cmd = buf[12] & 0x0f;
    fam = buf[13] >> 4;
    proto = buf[13] & 0x0f;
    len = ((size_t)buf[14] << 8) | buf[15];
    if (ver != 2) {
        *why = "PROXY v2: version is not 2";
        return PROXY_EBAD;
    }
    if (cmd > 1) {
        *why = "PROXY v2: command is neither LOCAL nor PROXY";
        return PROXY_EBAD;
    }
    if (fam > 3 || proto > 2) {
        *why = "PROXY v2: unknown address family or transport";
        return PROXY_EBAD;
    }
    memset(h, 0, sizeof(*h));
    h->version = 2;
    h->len = PROXY_V2_HEAD + len;
    /* LOCAL (a health check of the balancer itself) and UNSPEC carry no
     * client: the block, if any, is skipped unread, as the spec says. */
    if (cmd == 0 || fam == 0) {
        h->local = 1;
        return PROXY_OK;
    }
    if (fam == 3) {
        *why = "PROXY v2: AF_UNIX addresses are not accepted";
        return PROXY_EBAD;
    }
    if (proto != 1) {
        *why = "PROXY v2: transport is not STREAM";
        return PROXY_EBAD;
    }
    need = fam == 1 ? 12 : 36;
    if (len < need) {
        *why = "PROXY v2: address block shorter than its family needs";
        return PROXY_EBAD;
    }
    if (n < PROXY_V2_HEAD + need)
        return PROXY_AGAIN;
    proxy_v2_inet(buf + PROXY_V2_HEAD, fam == 2, h);
    return PROXY_OK;
}


int
proxy_parse(const void *bufv, size_t n, unsigned versions,
    struct proxy_hdr *h, const char **why)
{
    const unsigned char *buf = bufv;
    int                  v1, v2;

    *why = "";
    if (n == 0)
        return PROXY_AGAIN;
    v1 = (versions & PROXY_V1) && proxy_prefix(buf, n, proxy_v1_sig, 6);
    v2 = (versions & PROXY_V2) && proxy_prefix(buf, n, proxy_v2_sig, 12);
    if (!v1 && !v2) {
        *why = versions == PROXY_V1 ? "not a PROXY v1 header" :
            versions == PROXY_V2 ? "not a PROXY v2 header" :
            "not a PROXY protocol header";
        return PROXY_EBAD;
    }
    if (v1 && n < 6)
        return PROXY_AGAIN;
    if (v2 && n < 12)
        return PROXY_AGAIN;
    return v1 ? proxy_v1(buf, n, h, why) : proxy_v2(buf, n, h, why);
}


unsigned
proxy_mode_parse(const char *s)
{
    if (strcmp(s, "v1") == 0)
        return PROXY_V1;
    if (strcmp(s, "v2") == 0)
        return PROXY_V2;
    if (strcmp(s, "auto") == 0)
        return PROXY_AUTO;
    return 0;
}


const char *
proxy_mode_name(unsigned versions)
{
    switch (versions) {
    case PROXY_V1:
        return "v1";
    case PROXY_V2:
        return "v2";
    case PROXY_AUTO:
        return "auto";
    default:
        return "off";
    }
}
