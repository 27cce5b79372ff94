/*
 * canon.c - the relaxed canonicalisations of RFC 6376 (3.4.2 header,
 * 3.4.4 body).  Pure: no OpenSSL, no allocation.
 *
 * CONTRACT  See dkim.h.  The body machine keeps four bits of state across
 *           calls (a pending CR, pending whitespace, pending line ends,
 *           whether anything was written), so any split of the input gives
 *           the same output; bytes go to the caller's out() in pieces of up
 *           to sizeof(buf).
 */
#include <string.h>

#include "dkim/dkim.h"

/* Bytes the body machine must look at; everything else is copied. */
static const unsigned char canon_special[256] = {
    ['\t'] = 1, ['\n'] = 1, ['\r'] = 1, [' '] = 1
};


static void
canon_flush(struct dkim_body *b)
{
    if (b->blen > 0)
        b->out(b->arg, b->buf, b->blen);
    b->blen = 0;
}


static void
canon_put(struct dkim_body *b, const char *p, size_t n)
{
    size_t c;

    while (n > 0) {
        if (b->blen == sizeof(b->buf))
            canon_flush(b);
        c = sizeof(b->buf) - b->blen;
        if (c > n)
            c = n;
        memcpy(b->buf + b->blen, p, c);
        b->blen += c;
        p += c;
        n -= c;
    }
}


/* canon_content - a run of bytes that are content: the line ends held
 * back (they were not trailing after all) and one space for the
 * whitespace before the run go first. */
static void
canon_content(struct dkim_body *b, const char *p, size_t n)
{
    for (; b->crlf > 0; b->crlf--)
        canon_put(b, "\r\n", 2);
    if (b->wsp) {
        canon_put(b, " ", 1);
        b->wsp = 0;
    }
    canon_put(b, p, n);
    b->any = 1;
}


void
dkim_body_init(struct dkim_body *b, dkim_out_fn *out, void *arg)
{
    memset(b, 0, sizeof(*b) - sizeof(b->buf));
    b->out = out;
    b->arg = arg;
}


void
dkim_body_feed(struct dkim_body *b, const char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p, *e = s + n, *run;

    while (s < e) {
        if (b->cr) {
            b->cr = 0;
            if (*s != '\n') {
                canon_content(b, "\r", 1);  /* a bare CR is content */
                continue;
            }
        }
        switch (*s) {
        case '\r':
            b->cr = 1;
            s++;
            break;
        case '\n':                          /* CRLF, or a bare LF */
            b->wsp = 0;                     /* trailing whitespace goes */
            b->crlf++;
            s++;
            break;
        case ' ':
        case '\t':
            b->wsp = 1;
            s++;
            break;
        default:
            run = s;
            while (s < e && !canon_special[*s])
                s++;
            canon_content(b, (const char *)run, (size_t)(s - run));
            break;
        }
    }
}


void
dkim_body_end(struct dkim_body *b)
{
    if (b->cr) {
        b->cr = 0;
        canon_content(b, "\r", 1);
    }
    /* Trailing empty lines are dropped; a non-empty body ends in one CRLF
     * (added when its last line had none).  An empty body stays empty. */
    if (b->any)
        canon_put(b, "\r\n", 2);
    b->crlf = 0;
    b->wsp = 0;
    canon_flush(b);
}


static int
canon_is_wsp(char c)
{
    return c == ' ' || c == '\t';
}


size_t
dkim_header_relaxed(const char *p, size_t n, int crlf, char *out)
{
    const char *colon = memchr(p, ':', n), *v, *e = p + n;
    size_t      o = 0, nlen;
    int         wsp = 0;

    if (colon == NULL)
        return 0;
    nlen = (size_t)(colon - p);
    while (nlen > 0 && canon_is_wsp(p[nlen - 1]))
        nlen--;
    for (o = 0; o < nlen; o++)
        out[o] = (p[o] >= 'A' && p[o] <= 'Z') ? (char)(p[o] | 0x20) : p[o];
    out[o++] = ':';
    /* Unfold (a line end inside the field is dropped), whitespace runs
     * become one space, none at either end of the value. */
    for (v = colon + 1; v < e; v++) {
        if (*v == '\n' || (*v == '\r' && v + 1 < e && v[1] == '\n') ||
            (*v == '\r' && v + 1 == e))
            continue;
        if (canon_is_wsp(*v)) {
            wsp = 1;
            continue;
        }
        if (wsp && o != nlen + 1)           /* not at the value's start */
            out[o++] = ' ';
        wsp = 0;
        out[o++] = *v;
    }
    if (crlf) {
        out[o++] = '\r';
        out[o++] = '\n';
    }
    return o;
}
