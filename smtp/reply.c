/*
 * reply.c - the pure parts of the outbound SMTP client: the reply
 * parser, the EHLO capability parser, enhanced status codes and one-pass
 * dot-stuffing.  No I/O, no allocation.
 *
 * CONTRACT  See smtp.h.  Every function works on caller bytes only, so the
 *           unit tests feed them whole inputs, split inputs and bad inputs.
 * FAILURE   smtp_reply_parse() returns -1 on a malformed reply; the caller
 *           treats that as a protocol error (the connection is dropped and
 *           the recipients are deferred).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "smtp/smtp.h"

/* smtp_text_append - append n bytes to the flattened text, escaped
 * (a hostile next hop's ESC or bare CR must not reach a log, a DSN or a
 * terminal), truncating. */
static void
smtp_text_append(struct smtp_reply *r, size_t *tl, const char *p, size_t n)
{
    *tl += util_escape(r->text + *tl, sizeof(r->text) - *tl, p, n, 0, NULL);
}


int
smtp_reply_parse(const char *p, size_t n, size_t max, struct smtp_reply *r)
{
    size_t pos = 0, tl = 0;
    int    code = -1;

    r->text[0] = '\0';
    for (;;) {
        const char *nl = memchr(p + pos, '\n', n - pos);
        size_t      end, ll;
        int         c, last;

        if (nl == NULL)
            return (n - pos > max || pos > max) ? -1 : 0;
        end = (size_t)(nl - p);
        ll = end - pos;
        if (ll > 0 && p[end - 1] == '\r')
            ll--;
        /* "ddd" then ' ', '-' or the end of the line */
        if (ll < 3 || !isdigit((unsigned char)p[pos]) ||
            !isdigit((unsigned char)p[pos + 1]) ||
            !isdigit((unsigned char)p[pos + 2]) ||
            (ll > 3 && p[pos + 3] != ' ' && p[pos + 3] != '-'))
            return -1;
        c = (p[pos] - '0') * 100 + (p[pos + 1] - '0') * 10 + (p[pos + 2] - '0');
        if (c < 100 || (code >= 0 && c != code))
            return -1;
        last = (ll == 3 || p[pos + 3] == ' ');
        if (code < 0) {
            smtp_text_append(r, &tl, p + pos, ll);
        } else if (ll > 4) {
            smtp_text_append(r, &tl, " ", 1);
            smtp_text_append(r, &tl, p + pos + 4, ll - 4);
        }
        code = c;
        pos = end + 1;
        if (last)
            break;
        if (pos > max)
            return -1;
    }
    if (pos > max)
        return -1;
    r->code = code;
    r->len = pos;
    return 1;
}


/* smtp_word_is - does the keyword p[0..n) equal w, ignoring case? */
static int
smtp_word_is(const char *p, size_t n, const char *w)
{
    return strlen(w) == n && strncasecmp(p, w, n) == 0;
}


/* smtp_number - the decimal digits at p[0..n), saturated at max; -1 when
 * there are none or anything else is there. */
static int
smtp_number(const char *p, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    size_t   i;

    if (n == 0)
        return -1;
    for (i = 0; i < n; i++) {
        if (!isdigit((unsigned char)p[i]))
            return -1;
        v = v > (max - 9) / 10 ? max : v * 10 + (uint64_t)(p[i] - '0');
    }
    *out = v;
    return 0;
}


/* smtp_limits - the "name=value" pairs after LIMITS (RFC 9422 3): the
 * known ones into e, anything else skipped. */
static void
smtp_limits(const char *p, size_t n, struct smtp_ehlo *e)
{
    size_t pos = 0;

    while (pos < n) {
        size_t      end, eq;
        uint64_t    v;
        uint32_t   *dst = NULL;

        while (pos < n && p[pos] == ' ')
            pos++;
        for (end = pos; end < n && p[end] != ' '; end++)
            ;
        for (eq = pos; eq < end && p[eq] != '='; eq++)
            ;
        if (eq < end) {
            if (smtp_word_is(p + pos, eq - pos, "RCPTMAX"))
                dst = &e->rcptmax;
            else if (smtp_word_is(p + pos, eq - pos, "MAILMAX"))
                dst = &e->mailmax;
            else if (smtp_word_is(p + pos, eq - pos, "RCPTDOMAINMAX"))
                dst = &e->rcptdomainmax;
        }
        if (dst != NULL &&
            smtp_number(p + eq + 1, end - eq - 1, UINT32_MAX, &v) == 0)
            *dst = (uint32_t)v;
        pos = end;
    }
}


unsigned
smtp_ehlo_caps(const char *p, size_t n, struct smtp_ehlo *e)
{
    unsigned caps = 0;
    size_t   pos = 0;
    int      first = 1;

    memset(e, 0, sizeof(*e));
    while (pos < n) {
        const char *nl = memchr(p + pos, '\n', n - pos);
        size_t      end = nl ? (size_t)(nl - p) : n, ll = end - pos, kw;
        const char *l = p + pos;

        if (ll > 0 && l[ll - 1] == '\r')
            ll--;
        pos = end + 1;
        if (first || ll < 4) {              /* line 1: our peer's name */
            first = 0;
            continue;
        }
        l += 4;                             /* "250-" / "250 " */
        ll -= 4;
        for (kw = 0; kw < ll && l[kw] != ' '; kw++)
            ;
        if (smtp_word_is(l, kw, "PIPELINING"))
            caps |= SMTP_CAP_PIPELINING;
        else if (smtp_word_is(l, kw, "8BITMIME"))
            caps |= SMTP_CAP_8BITMIME;
        else if (smtp_word_is(l, kw, "SMTPUTF8"))
            caps |= SMTP_CAP_SMTPUTF8;
        else if (smtp_word_is(l, kw, "CHUNKING"))
            caps |= SMTP_CAP_CHUNKING;
        else if (smtp_word_is(l, kw, "DSN"))
            caps |= SMTP_CAP_DSN;
        else if (smtp_word_is(l, kw, "BINARYMIME"))
            caps |= SMTP_CAP_BINARYMIME;
        else if (smtp_word_is(l, kw, "STARTTLS"))
            caps |= SMTP_CAP_STARTTLS;
        else if (smtp_word_is(l, kw, "REQUIRETLS"))
            caps |= SMTP_CAP_REQUIRETLS;
        else if (smtp_word_is(l, kw, "LIMITS")) {
            caps |= SMTP_CAP_LIMITS;
            smtp_limits(l + kw, ll - kw, e);
        } else if (smtp_word_is(l, kw, "SIZE")) {
            uint64_t v = 0;
            size_t   i;

            caps |= SMTP_CAP_SIZE;
            for (i = kw + 1; i < ll && isdigit((unsigned char)l[i]); i++) {
                if (v > (UINT64_MAX - 9) / 10)
                    break;
                v = v * 10 + (uint64_t)(l[i] - '0');
            }
            e->size = v;
        }
    }
    return caps;
}


const char *
smtp_enhanced(const char *reply, const char *dflt, char *out, size_t outsz)
{
    const char *p = reply;
    size_t      i, dots = 0;
    int         basic = 0;

    if (isdigit((unsigned char)p[0]) && isdigit((unsigned char)p[1]) &&
        isdigit((unsigned char)p[2]) && (p[3] == ' ' || p[3] == '-' ||
        p[3] == '\0')) {
        basic = p[0];
        p += p[3] ? 4 : 3;
    }
    /* class "." subject "." detail: 2/4/5, 1-3 digits, 1-3 digits */
    if ((p[0] == '2' || p[0] == '4' || p[0] == '5') && p[1] == '.' &&
        (basic == 0 || basic == p[0])) {
        size_t digits = 0;

        for (i = 2; p[i] != '\0' && p[i] != ' '; i++) {
            if (p[i] == '.') {
                if (digits == 0 || digits > 3)
                    break;
                dots++;
                digits = 0;
            } else if (isdigit((unsigned char)p[i])) {
                digits++;
            } else {
                break;
            }
        }
        if ((p[i] == '\0' || p[i] == ' ') && dots == 1 && digits >= 1 &&
            digits <= 3 && i < outsz) {
            memcpy(out, p, i);
            out[i] = '\0';
            return out;
        }
    }
    if (basic == '2' || basic == '4' || basic == '5')
        snprintf(out, outsz, "%c.0.0", basic);
    else
        snprintf(out, outsz, "%s", dflt);
    return out;
}


/* Where the last byte left us: at the start of a line after CRLF (or of
 * the body), after a bare LF, after a bare CR, or inside a line.  Every
 * kind of line start gets a leading dot doubled: a lenient next hop may
 * take a bare LF or a bare CR as a line end, and "\n.\r\n" or "\r.\r\n"
 * left unstuffed would end the data there for it (SMTP smuggling).  Only
 * the end mark needs the difference: after a bare CR or LF the body still
 * lacks its CRLF. */
enum { STUFF_LINE = 0, STUFF_MID, STUFF_CR, STUFF_LF };

void
smtp_stuff_init(struct smtp_stuff *s)
{
    s->state = STUFF_LINE;
}


size_t
smtp_stuff(struct smtp_stuff *s, const char *in, size_t n, char *out)
{
    size_t i = 0, o = 0;

    while (i < n) {
        const char *lf, *cr;
        size_t      span;

        if (s->state != STUFF_MID && in[i] == '.')
            out[o++] = '.';
        if (s->state == STUFF_CR && in[i] == '\n') {
            out[o++] = '\n';
            i++;
            s->state = STUFF_LINE;
            continue;
        }
        /* Copy up to and including the next LF in one memcpy, or only up
         * to a CR that is not right before that LF (a bare CR, or one
         * that ends the input): two memchr calls, no per-byte loop. */
        lf = memchr(in + i, '\n', n - i);
        span = lf ? (size_t)(lf - (in + i)) + 1 : n - i;
        cr = memchr(in + i, '\r', span);
        if (cr != NULL && (lf == NULL || cr + 1 != lf)) {
            span = (size_t)(cr - (in + i)) + 1;
            lf = NULL;
        }
        memcpy(out + o, in + i, span);
        o += span;
        i += span;
        if (cr != NULL && lf == NULL)
            s->state = STUFF_CR;
        else if (lf == NULL)
            s->state = STUFF_MID;
        else if (span >= 2 && lf[-1] == '\r')
            s->state = STUFF_LINE;
        else
            s->state = STUFF_LF;            /* bare LF: a line start too */
    }
    return o;
}


size_t
smtp_stuff_end(struct smtp_stuff *s, char *out)
{
    if (s->state == STUFF_LINE) {
        memcpy(out, ".\r\n", 3);
        return 3;
    }
    memcpy(out, "\r\n.\r\n", 5);
    s->state = STUFF_LINE;
    return 5;
}
