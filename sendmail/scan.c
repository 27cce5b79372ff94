/*
 * scan.c - mtad-sendmail -t: recipients from To:, Cc:, Bcc:, and Bcc:
 * removed (see scan.h).  The message comes from a local user who may be
 * less trusted than the relay: every length is checked against the
 * message's own (it is not NUL-terminated), and an address that could
 * change the RCPT command is refused, not cut or sent.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "sendmail/scan.h"

int
sm_rcpt_ok(const char *a)
{
    size_t n = strlen(a), i;

    if (n == 0 || n > SM_ADDR_MAX)
        return 0;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)a[i];

        if (c <= ' ' || c == 0x7f || c == '<' || c == '>')
            return 0;
    }
    return 1;
}


/* sm_trim - a[0..*n) without its leading and trailing blanks. */
static const char *
sm_trim(const char *a, size_t *n)
{
    while (*n > 0 && (*a == ' ' || *a == '\t')) {
        a++;
        (*n)--;
    }
    while (*n > 0 && (a[*n - 1] == ' ' || a[*n - 1] == '\t'))
        (*n)--;
    return a;
}


void
sm_rcpt_add(struct sm_rcpts *r, const char *a, size_t n)
{
    a = sm_trim(a, &n);
    if (n == 0)
        return;
    r->v = xrealloc(r->v, (r->n + 1) * sizeof(*r->v));
    r->v[r->n] = xmalloc(n + 1);
    memcpy(r->v[r->n], a, n);
    r->v[r->n][n] = '\0';
    r->n++;
}


void
sm_rcpt_free(struct sm_rcpts *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->v[i]);
    free(r->v);
    r->v = NULL;
    r->n = 0;
}


/* sm_add_checked - add a[0..n) when it is a fit address (a NUL in it
 * would cut it short: refused too); 1 when refused. */
static int
sm_add_checked(struct sm_rcpts *r, const char *a, size_t n)
{
    size_t before = r->n;

    a = sm_trim(a, &n);
    if (n == 0)
        return 0;
    if (memchr(a, '\0', n) != NULL)
        return 1;
    sm_rcpt_add(r, a, n);
    if (sm_rcpt_ok(r->v[before]))
        return 0;
    free(r->v[before]);
    r->n = before;
    return 1;
}


/* sm_header_addrs - the addresses of one unfolded To:/Cc:/Bcc: value (v,
 * vn bytes): "a@x, Name <b@y>, c@z (comment)".  Quoted strings and
 * comments may hold commas; an address in <> wins over the words around
 * it.  Returns the number refused. */
static int
sm_header_addrs(struct sm_rcpts *r, const char *v, size_t vn)
{
    const char *p, *lt = NULL, *gt = NULL, *end = v + vn;
    int         quote = 0, depth = 0, bad = 0;
    char       *word = xmalloc(vn + 1);
    size_t      wn = 0;

    for (p = v;; p++) {
        if (p == end || (*p == ',' && !quote && depth == 0)) {
            if (lt != NULL && gt != NULL && gt > lt)
                bad += sm_add_checked(r, lt + 1, (size_t)(gt - lt - 1));
            else
                bad += sm_add_checked(r, word, wn);
            if (p == end)
                break;
            lt = gt = NULL;
            wn = 0;
            continue;
        }
        if (*p == '"' && depth == 0) {
            quote = !quote;
            word[wn++] = *p;        /* "a b"@x: kept whole, then refused
                                     * for its blank, never cut to @x */
        } else if (quote)
            word[wn++] = *p;
        else if (*p == '(')
            depth++;
        else if (*p == ')' && depth > 0)
            depth--;
        else if (*p == '<' && depth == 0)
            lt = p;
        else if (*p == '>' && depth == 0)
            gt = p;
        else if (depth == 0)
            word[wn++] = *p;
    }
    free(word);
    return bad;
}


/* sm_field_is - the line at msg[start..len) is field name: the name, any
 * case, then blanks (RFC 5322's obsolete "Bcc :"), then the colon.  The
 * offset just past the colon, or 0 (never reads past len). */
static size_t
sm_field_is(const char *msg, size_t start, size_t len, const char *name)
{
    size_t n = strlen(name), i;

    if (len - start < n || strncasecmp(msg + start, name, n) != 0)
        return 0;
    for (i = start + n; i < len && (msg[i] == ' ' || msg[i] == '\t'); i++)
        ;
    return i < len && msg[i] == ':' ? i + 1 : 0;
}


/* sm_line_is_field - the line at msg[i..len) starts a header field: one
 * or more printable characters other than ':', blanks (the obsolete
 * "Bcc :"), then the colon. */
static int
sm_line_is_field(const char *msg, size_t i, size_t len)
{
    size_t start = i;

    while (i < len && (unsigned char)msg[i] > ' ' &&
        (unsigned char)msg[i] < 0x7f && msg[i] != ':')
        i++;
    if (i == start)
        return 0;
    while (i < len && (msg[i] == ' ' || msg[i] == '\t'))
        i++;
    return i < len && msg[i] == ':';
}


size_t
sm_header_end(const char *msg, size_t len)
{
    size_t i = 0;
    int    first = 1;

    while (i < len) {
        /* a blank first is the folded rest of the field above; on the
         * first line there is none: the body starts there */
        if (msg[i] == ' ' || msg[i] == '\t' ? first :
            !sm_line_is_field(msg, i, len))
            return i;
        first = 0;
        while (i < len && msg[i] != '\n')
            i++;
        if (i < len)
            i++;
    }
    return len;
}


int
sm_scan_headers(struct sm_rcpts *r, char *msg, size_t *lenp, int want_rcpt)
{
    size_t i = 0, o = 0, len = *lenp, hend = sm_header_end(msg, *lenp);
    int    bad = 0;

    while (i < hend) {
        size_t start = i, end, val;
        int    bcc;

        end = i;
        do {
            while (end < len && msg[end] != '\n')
                end++;
            if (end < len)
                end++;
        } while (end < len && (msg[end] == ' ' || msg[end] == '\t'));
        bcc = sm_field_is(msg, start, end, "bcc") != 0;
        val = bcc ? sm_field_is(msg, start, end, "bcc") :
            sm_field_is(msg, start, end, "to");
        if (val == 0)
            val = sm_field_is(msg, start, end, "cc");
        if (val != 0 && want_rcpt) {
            char  *v = xmalloc(end - start + 1);
            size_t k, vn = 0;

            /* unfolded: the line ends go, the blanks after them stay */
            for (k = val; k < end; k++)
                if (msg[k] != '\r' && msg[k] != '\n')
                    v[vn++] = msg[k];
            bad += sm_header_addrs(r, v, vn);
            free(v);
        }
        if (!bcc) {
            memmove(msg + o, msg + start, end - start);
            o += end - start;
        }
        i = end;
    }
    memmove(msg + o, msg + i, len - i);
    *lenp = o + len - i;
    return bad;
}
