/*
 * xtext.c - RFC 3461 xtext, the one encoder and decoder of mtad: ENVID and
 * ORCPT on the wire (smtpd, delivery) and every field of the spool's
 * envelope and state files (spool).
 *
 * CONTRACT  See smtp.h.  Encoding is canonical: upper-case hex, and only
 *           the bytes smtp_xtext_needs() names are encoded, so a decoder
 *           that insists on the canonical form (the spool's) accepts what
 *           this writes.
 * FAILURE   The decoder refuses bad hex, a raw byte that needs encoding,
 *           control bytes and a short output buffer with -1.
 */
#include <stddef.h>
#include <string.h>

#include "smtp/smtp.h"

static const char smtp_hex[] = "0123456789ABCDEF";

/* Value of an upper-case hex digit (RFC 3461 hexchar), or -1. */
static int
smtp_hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int
smtp_xtext_decode(const char *p, size_t n, char *out, size_t outsz)
{
    size_t          i, o = 0;
    unsigned char   c;
    int             h1, h2;

    if (outsz == 0)
        return -1;
    for (i = 0; i < n; i++) {
        c = (unsigned char)p[i];
        if (c == '+') {
            if (n - i < 3)
                return -1;
            h1 = smtp_hexval((unsigned char)p[i + 1]);
            h2 = smtp_hexval((unsigned char)p[i + 2]);
            if (h1 < 0 || h2 < 0)
                return -1;
            c = (unsigned char)(h1 << 4 | h2);
            /* Control bytes would corrupt the envelope. */
            if (c < 0x20 || c == 0x7f)
                return -1;
            i += 2;
        } else if (c < 33 || c > 126 || c == '=')
            return -1;
        if (o + 1 >= outsz)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 0;
}


int
smtp_xtext_needs(unsigned char c)
{
    return c < 0x21 || c > 0x7e || c == '+' || c == '=';
}


size_t
smtp_xtext_len(const char *s)
{
    const unsigned char *u;
    size_t               n = 0;

    for (u = (const unsigned char *)s; *u != '\0'; u++)
        n += smtp_xtext_needs(*u) ? 3 : 1;
    return n;
}


int
smtp_xtext_encode(const char *s, char *out, size_t outsz)
{
    const unsigned char *u;
    size_t               o = 0;

    if (outsz == 0)
        return -1;
    for (u = (const unsigned char *)s; *u != '\0'; u++) {
        size_t need = smtp_xtext_needs(*u) ? 3 : 1;

        if (o + need >= outsz) {
            out[0] = '\0';
            return -1;
        }
        if (need == 1) {
            out[o++] = (char)*u;
            continue;
        }
        out[o++] = '+';
        out[o++] = smtp_hex[*u >> 4];
        out[o++] = smtp_hex[*u & 0xf];
    }
    out[o] = '\0';
    return (int)o;
}
