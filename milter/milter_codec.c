/*
 * milter_codec.c - the milter wire format, pure: framing, the replies a
 * milter sends, the commands we send.  No I/O, no state: fuzzed by
 * tests/fuzz/fuzz_milter.c.
 *
 * FORMAT    A packet is a 32-bit length in network order (of what
 *           follows), a command byte, then its data: numbers 32-bit in
 *           network order, strings NUL-ended.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/util.h"
#include "milter/milter.h"


int
milter_frame(const uint8_t *p, size_t n, struct milter_pkt *pkt,
    size_t *used)
{
    uint32_t len;

    if (n < 4)
        return 0;
    len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
        (uint32_t)p[2] << 8 | p[3];
    if (len == 0 || len > MILTER_PKT_MAX)
        return -1;
    if (n - 4 < len)
        return 0;
    pkt->cmd = (char)p[4];
    pkt->data = p + 5;
    pkt->len = len - 1;
    *used = 4 + (size_t)len;
    return 1;
}


static uint32_t
milter_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
        (uint32_t)p[2] << 8 | p[3];
}


/* milter_str - the NUL-ended string at *off in d[0..n): it, and *off past
 * it; NULL when there is no NUL. */
static const char *
milter_str(const uint8_t *d, size_t n, size_t *off)
{
    const uint8_t *z;

    if (*off >= n)
        return NULL;
    z = memchr(d + *off, '\0', n - *off);
    if (z == NULL)
        return NULL;
    {
        const char *s = (const char *)d + *off;

        *off = (size_t)(z - d) + 1;
        return s;
    }
}


int
milter_reply_parse(const struct milter_pkt *pkt, struct milter_reply *r)
{
    const uint8_t *d = pkt->data;
    size_t         n = pkt->len, off = 0;

    memset(r, 0, sizeof(*r));
    r->cmd = pkt->cmd;
    switch (pkt->cmd) {
    case SMFIR_ACCEPT: case SMFIR_CONTINUE: case SMFIR_DISCARD:
    case SMFIR_REJECT: case SMFIR_TEMPFAIL: case SMFIR_SKIP:
    case SMFIR_PROGRESS: case SMFIR_CONN_FAIL: case SMFIR_SHUTDOWN:
    case SMFIR_SETSYMLIST:
        return 0;                   /* data, if any, is ignored */
    case SMFIR_OPTNEG:
        if (n < 12)
            return -1;
        r->ver = milter_u32(d);
        r->actions = milter_u32(d + 4);
        r->proto = milter_u32(d + 8);
        return 0;
    case SMFIR_REPLBODY:
        r->data = d;
        r->len = n;
        return 0;
    case SMFIR_CHGHEADER: case SMFIR_INSHEADER:
        if (n < 4)
            return -1;
        r->index = milter_u32(d);
        off = 4;
        r->s1 = milter_str(d, n, &off);
        r->s2 = milter_str(d, n, &off);
        return r->s1 != NULL && r->s2 != NULL ? 0 : -1;
    case SMFIR_ADDHEADER:
        r->s1 = milter_str(d, n, &off);
        r->s2 = milter_str(d, n, &off);
        return r->s1 != NULL && r->s2 != NULL ? 0 : -1;
    case SMFIR_ADDRCPT: case SMFIR_DELRCPT: case SMFIR_QUARANTINE:
    case SMFIR_REPLYCODE:
        r->s1 = milter_str(d, n, &off);
        return r->s1 != NULL ? 0 : -1;
    case SMFIR_CHGFROM: case SMFIR_ADDRCPT_PAR:
        r->s1 = milter_str(d, n, &off);
        if (r->s1 == NULL)
            return -1;
        r->s2 = milter_str(d, n, &off);     /* optional ESMTP args */
        return 0;
    default:
        return -1;
    }
}


/* milter_code_ok - "ddd" of class want at p, then ' ', '-' or the end. */
static int
milter_code_ok(const char *p, char want)
{
    if (p[0] < '4' || p[0] > '5' || (want && p[0] != want))
        return 0;
    if (p[1] < '0' || p[1] > '9' || p[2] < '0' || p[2] > '9')
        return 0;
    return p[3] == ' ' || p[3] == '-' || p[3] == '\0';
}


/* milter_enhanced - the length of an enhanced status code "c.s.d" at p
 * (RFC 3463: class 2/4/5, up to 3 digits each) followed by a space; 0
 * when there is none. */
static size_t
milter_enhanced(const char *p)
{
    size_t i = 0, part, digits;

    for (part = 0; part < 3; part++) {
        for (digits = 0; p[i] >= '0' && p[i] <= '9' && digits < 4; digits++)
            i++;
        if (digits == 0 || digits > 3)
            return 0;
        if (part < 2 && p[i++] != '.')
            return 0;
    }
    return p[i] == ' ' ? i : 0;
}


int
milter_reply_text(const char *in, char want, char *out, size_t outsz)
{
    char        tmp[1024];
    size_t      t = 0, len, elen;
    const char *p = in, *nl;

    if (outsz < 16 || !milter_code_ok(in, want))
        return -1;
    elen = in[3] != '\0' ? milter_enhanced(in + 4) : 0;
    /* Join the lines of a multi-line reply: each "ddd-" or "ddd " prefix
     * after the first is dropped, the texts separated by a space. */
    while (*p != '\0' && t < sizeof(tmp) - 1) {
        nl = strchr(p, '\n');
        len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        if (len > 0 && p[len - 1] == '\r')
            len--;
        if (p != in) {
            if (len >= 4 && milter_code_ok(p, want) &&
                memcmp(p, in, 3) == 0) {
                p += 4;
                len -= 4;
            }
            /* and the enhanced code the first line gave already */
            if (elen > 0 && len > elen && memcmp(p, in + 4, elen) == 0 &&
                p[elen] == ' ') {
                p += elen + 1;
                len -= elen + 1;
            }
            tmp[t++] = ' ';
        } else {
            memcpy(tmp, p, 3);
            tmp[3] = ' ';
            t = 4;
            p += len >= 4 ? 4 : len;
            len = len >= 4 ? len - 4 : 0;
        }
        if (len > sizeof(tmp) - 1 - t)
            len = sizeof(tmp) - 1 - t;
        memcpy(tmp + t, p, len);
        t += len;
        if (nl == NULL)
            break;
        p = nl + 1;
    }
    tmp[t] = '\0';
    util_escape(out, outsz, tmp, t, 0, NULL);
    return 0;
}


void
milter_put(struct buf *b, char cmd, const void *data, size_t len)
{
    uint32_t nl = htonl((uint32_t)len + 1);

    buf_append(b, &nl, 4);
    buf_append(b, &cmd, 1);
    if (len > 0)
        buf_append(b, data, len);
}


void
milter_put_optneg(struct buf *b, uint32_t actions, uint32_t proto)
{
    uint32_t v[3] = { htonl(MILTER_VERSION), htonl(actions), htonl(proto) };

    milter_put(b, SMFIC_OPTNEG, v, sizeof(v));
}


/* milter_put_begin - a packet whose length is filled in at the end. */
static size_t
milter_put_begin(struct buf *b, char cmd)
{
    size_t at = b->len;
    uint32_t zero = 0;

    buf_append(b, &zero, 4);
    buf_append(b, &cmd, 1);
    return at;
}


static void
milter_put_end(struct buf *b, size_t at)
{
    uint32_t nl = htonl((uint32_t)(b->len - at - 4));

    memcpy(b->data + at, &nl, 4);
}


static void
milter_put_str(struct buf *b, const char *s)
{
    buf_append(b, s, strlen(s) + 1);
}


void
milter_put_macros(struct buf *b, char cmd, const struct milter_macro *m,
    size_t n)
{
    size_t at, i;

    at = milter_put_begin(b, SMFIC_MACRO);
    buf_append(b, &cmd, 1);
    for (i = 0; i < n; i++) {
        if (m[i].value == NULL)
            continue;
        milter_put_str(b, m[i].name);
        milter_put_str(b, m[i].value);
    }
    milter_put_end(b, at);
}


void
milter_put_strs(struct buf *b, char cmd, const char *const *s, size_t n)
{
    size_t at, i;

    at = milter_put_begin(b, cmd);
    for (i = 0; i < n; i++)
        milter_put_str(b, s[i] != NULL ? s[i] : "");
    milter_put_end(b, at);
}


void
milter_put_connect(struct buf *b, const char *host, int family,
    unsigned port, const char *addr)
{
    size_t   at;
    uint16_t np = htons((uint16_t)port);
    char     fam = family == 6 ? '6' : family == 4 ? '4' : 'U';

    at = milter_put_begin(b, SMFIC_CONNECT);
    milter_put_str(b, host);
    buf_append(b, &fam, 1);
    if (fam != 'U') {
        buf_append(b, &np, 2);
        milter_put_str(b, addr);
    }
    milter_put_end(b, at);
}
