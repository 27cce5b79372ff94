/*
 * msg.c - DNS message parsing and MX ordering: pure code, no I/O.
 *
 * PURPOSE   Turn an answer from the wire into a struct dns_msg (the
 *           answer section, the AD bit, the RFC 2308 negative TTL from an
 *           authority SOA), and order MX records as RFC 5321 5.1 says.
 * CONTRACT  dns_msg_parse() takes any byte string: every length is checked
 *           against the packet, compression pointers are bounded (they
 *           must point backwards and a name is at most 255 octets on the
 *           wire), and names come out lower-cased in presentation form
 *           with odd bytes escaped as \DDD, so they are safe to compare and
 *           to print.  tests/fuzz/fuzz_dns.c runs it under libFuzzer.
 * FAILURE   DNS_EINVAL for a malformed message; m is then empty.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dns/dns.h"

#define MSG_MAX_RR     512          /* answer records kept; more = bogus */
#define MSG_WIRE_NAME  255          /* RFC 1035 3.1 */

static uint16_t
msg_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}


static uint32_t
msg_u32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
        (uint32_t)p[2] << 8 | (uint32_t)p[3];
}


/* msg_put - append one presentation byte of a label; -1 when full. */
static int
msg_put(char *out, size_t *o, unsigned char c)
{
    char   tmp[5];
    size_t n;

    if (c >= 'A' && c <= 'Z')
        c = (unsigned char)(c - 'A' + 'a');
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '*') {
        tmp[0] = (char)c;
        n = 1;
    } else
        n = (size_t)snprintf(tmp, sizeof(tmp), "\\%03u", c);
    if (*o + n >= DNS_NAME_MAX)
        return -1;
    memcpy(out + *o, tmp, n);
    *o += n;
    out[*o] = '\0';
    return 0;
}


/*
 * msg_name - the name at *off into out; *off moves past it (past the
 * first pointer when compressed).  Root is "".
 */
static int
msg_name(const unsigned char *pkt, size_t len, size_t *off, char *out)
{
    size_t  pos = *off, o = 0, wire = 0, end = 0, lim = *off;
    int     jumped = 0, i, n;

    out[0] = '\0';
    for (;;) {
        if (pos >= len)
            return DNS_EINVAL;
        n = pkt[pos];
        if ((n & 0xc0) == 0xc0) {
            size_t to;

            if (pos + 1 >= len)
                return DNS_EINVAL;
            to = (size_t)(n & 0x3f) << 8 | pkt[pos + 1];
            /* Only backwards, so every jump makes progress towards the
             * start of the packet and loops are impossible. */
            if (to >= lim)
                return DNS_EINVAL;
            if (!jumped)
                end = pos + 2;
            jumped = 1;
            lim = to;
            pos = to;
            continue;
        }
        if ((n & 0xc0) != 0)
            return DNS_EINVAL;          /* 0x40/0x80: extended labels */
        wire += (size_t)n + 1;
        if (wire > MSG_WIRE_NAME)
            return DNS_EINVAL;
        if (n == 0) {
            *off = jumped ? end : pos + 1;
            return 0;
        }
        if (pos + 1 + (size_t)n > len)
            return DNS_EINVAL;
        if (o > 0) {
            if (o + 1 >= DNS_NAME_MAX)
                return DNS_EINVAL;
            out[o++] = '.';
            out[o] = '\0';
        }
        for (i = 1; i <= n; i++)
            if (msg_put(out, &o, pkt[pos + (size_t)i]) == -1)
                return DNS_EINVAL;
        pos += (size_t)n + 1;
    }
}


static void
msg_rr_free(struct dns_msg_rr *rr)
{
    free(rr->owner);
    free(rr->target);
    free(rr->rdata);
    rr->owner = rr->target = NULL;
    rr->rdata = NULL;
}


void
dns_msg_clear(struct dns_msg *m)
{
    size_t i;

    if (m->an != NULL)
        for (i = 0; i < m->nan; i++)
            msg_rr_free(&m->an[i]);
    free(m->an);
    memset(m, 0, sizeof(*m));
}


/* msg_ttl - RFC 2181 8: a TTL with the top bit set is taken as zero. */
static uint32_t
msg_ttl(const unsigned char *p)
{
    uint32_t t = msg_u32(p);

    return (t & 0x80000000u) ? 0 : t;
}


/* msg_rr - one answer record at *off into rr (names expanded); on
 * failure nothing is left allocated. */
static int
msg_rr(const unsigned char *pkt, size_t len, size_t *off,
    struct dns_msg_rr *rr, uint16_t *class)
{
    char    owner[DNS_NAME_MAX], target[DNS_NAME_MAX];
    size_t  rd, rdlen, o;

    if (msg_name(pkt, len, off, owner) != 0 || *off + 10 > len)
        return DNS_EINVAL;
    rr->type = msg_u16(pkt + *off);
    *class = msg_u16(pkt + *off + 2);
    rr->ttl = msg_ttl(pkt + *off + 4);
    rdlen = msg_u16(pkt + *off + 8);
    rd = *off + 10;
    if (rd + rdlen > len)
        return DNS_EINVAL;
    *off = rd + rdlen;
    target[0] = '\0';
    rr->pref = 0;
    if (rr->type == DNS_T_MX) {
        if (rdlen < 3)
            return DNS_EINVAL;
        rr->pref = msg_u16(pkt + rd);
        o = rd + 2;
        if (msg_name(pkt, rd + rdlen, &o, target) != 0 || o != rd + rdlen)
            return DNS_EINVAL;
    } else if (rr->type == DNS_T_CNAME) {
        o = rd;
        if (msg_name(pkt, rd + rdlen, &o, target) != 0 || o != rd + rdlen)
            return DNS_EINVAL;
    } else if ((rr->type == DNS_T_A && rdlen != 4) ||
        (rr->type == DNS_T_AAAA && rdlen != 16))
        return DNS_EINVAL;
    rr->owner = xstrdup(owner);
    rr->target = xstrdup(target);
    rr->len = rdlen;
    rr->rdata = xmalloc(rdlen ? rdlen : 1);
    memcpy(rr->rdata, pkt + rd, rdlen);
    return 0;
}


/* msg_skip_rr - step over one record (authority/additional). */
static int
msg_skip_rr(const unsigned char *pkt, size_t len, size_t *off, char *owner,
    uint16_t *type, uint32_t *ttl, size_t *rd, size_t *rdlen)
{
    if (msg_name(pkt, len, off, owner) != 0 || *off + 10 > len)
        return DNS_EINVAL;
    *type = msg_u16(pkt + *off);
    *ttl = msg_ttl(pkt + *off + 4);
    *rdlen = msg_u16(pkt + *off + 8);
    *rd = *off + 10;
    if (*rd + *rdlen > len)
        return DNS_EINVAL;
    *off = *rd + *rdlen;
    return 0;
}


/* msg_soa - RFC 2308 5: the negative TTL is min(SOA TTL, SOA MINIMUM). */
static int
msg_soa(const unsigned char *pkt, size_t rd, size_t rdlen, uint32_t ttl,
    struct dns_msg *m)
{
    char    tmp[DNS_NAME_MAX];
    size_t  o = rd;
    uint32_t min;

    if (msg_name(pkt, rd + rdlen, &o, tmp) != 0 ||
        msg_name(pkt, rd + rdlen, &o, tmp) != 0 || o + 20 != rd + rdlen)
        return DNS_EINVAL;
    min = msg_ttl(pkt + o + 16);
    m->neg_ttl = ttl < min ? ttl : min;
    m->have_soa = 1;
    return 0;
}


int
dns_msg_parse(const unsigned char *pkt, size_t len, struct dns_msg *m)
{
    char        owner[DNS_NAME_MAX];
    size_t      off = 12, i, qd, an, ns, rd, rdlen;
    uint16_t    class, type;
    uint32_t    ttl;

    memset(m, 0, sizeof(*m));
    if (pkt == NULL || len < 12)
        return DNS_EINVAL;
    m->id = msg_u16(pkt);
    m->tc = (pkt[2] & 0x02) != 0;
    m->ad = (pkt[3] & 0x20) != 0;
    m->rcode = pkt[3] & 0x0f;
    qd = msg_u16(pkt + 4);
    an = msg_u16(pkt + 6);
    ns = msg_u16(pkt + 8);
    if ((pkt[2] & 0x80) == 0 || qd != 1 || an > MSG_MAX_RR)
        return DNS_EINVAL;              /* not a response to one question */
    if (msg_name(pkt, len, &off, m->qname) != 0 || off + 4 > len)
        return DNS_EINVAL;
    m->qtype = msg_u16(pkt + off);
    off += 4;
    m->an = xcalloc(an ? an : 1, sizeof(*m->an));
    for (i = 0; i < an; i++) {
        if (msg_rr(pkt, len, &off, &m->an[m->nan], &class) != 0)
            goto bad;
        if (class != 1) {               /* not IN: ignore the record */
            msg_rr_free(&m->an[m->nan]);
            continue;
        }
        m->nan++;
    }
    for (i = 0; i < ns; i++) {
        if (msg_skip_rr(pkt, len, &off, owner, &type, &ttl, &rd, &rdlen) != 0)
            goto bad;
        if (type == DNS_T_SOA && !m->have_soa &&
            msg_soa(pkt, rd, rdlen, ttl, m) != 0)
            goto bad;
    }
    return 0;                           /* additional section: not used */
bad:
    dns_msg_clear(m);
    return DNS_EINVAL;
}


static int
msg_mx_cmp(const void *a, const void *b)
{
    const struct dns_mx *x = a, *y = b;

    return (int)x->pref - (int)y->pref;
}


void
dns_mx_order(struct dns_mx *mx, size_t n, uint32_t (*rnd)(void *),
    void *rarg)
{
    struct dns_mx tmp;
    size_t  i, j, k;

    if (n < 2)
        return;
    qsort(mx, n, sizeof(*mx), msg_mx_cmp);
    /* RFC 5321 5.1: equal preferences are tried in random order, which
     * spreads load over them.  Fisher-Yates within each run. */
    for (i = 0; i < n; i = j) {
        for (j = i + 1; j < n && mx[j].pref == mx[i].pref; j++)
            ;
        for (k = j - 1; k > i; k--) {
            size_t r = i + (size_t)(rnd(rarg) % (uint32_t)(k - i + 1));

            tmp = mx[k];
            mx[k] = mx[r];
            mx[r] = tmp;
        }
    }
}


int
dns_tlsa_parse(const struct dns_rr *rr, struct dns_tlsa *out)
{
    if (rr == NULL || rr->type != DNS_T_TLSA || rr->len < 4)
        return DNS_EINVAL;
    out->usage = rr->rdata[0];
    out->selector = rr->rdata[1];
    out->mtype = rr->rdata[2];
    out->data = rr->rdata + 3;
    out->len = rr->len - 3;
    return 0;
}


int
dns_txt_join(const struct dns_rr *rr, char *out, size_t outsz)
{
    size_t  i = 0, o = 0, n;

    if (rr == NULL || rr->type != DNS_T_TXT || outsz == 0)
        return DNS_EINVAL;
    while (i < rr->len) {
        n = rr->rdata[i++];
        if (i + n > rr->len || o + n >= outsz) {
            out[0] = '\0';
            return DNS_EINVAL;
        }
        memcpy(out + o, rr->rdata + i, n);
        o += n;
        i += n;
    }
    out[o] = '\0';
    return 0;
}
