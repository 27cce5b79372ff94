/*
 * data.c - the DATA byte machine (see smtp.h).
 *
 * PURPOSE   Find the end of DATA (CRLF "." CRLF, or "." CRLF at the very
 *           start), remove dot-stuffing and notice bare CR / bare LF, in
 *           one pass over each input buffer, emitting content as large
 *           spans that point into the input.
 * CONTRACT  Lines are separated by CRLF only.  A "." is special only at
 *           the start of the message or right after CRLF; a bare LF or a
 *           bare CR never starts a line, so none of the smuggling forms
 *           ("\n.\n", "\n.\r\n", "\r.\r\n", "\r\n.\r", "\r\n.\n") can end
 *           the data.  A line-leading dot is always dropped (RFC 5321
 *           4.5.2); the only byte ever held back across calls is the CR of
 *           a ".\r" that turns out not to be the end, re-emitted from
 *           static storage.
 * FAILURE   None of its own; a negative emit() result is passed back.
 *
 * Speed: the scanner jumps to the next CR or LF 16 bytes at a time (SSE2)
 * and stays in its inner loop across lines until a line starts with "." or
 * the buffer ends, so a clean buffer is one emit() and no per-line work
 * beyond a few compares.
 */
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "smtp/smtp.h"

enum {
    SMTP_DATA_BOL = 0,      /* at the start of a line (after CRLF) */
    SMTP_DATA_TEXT,         /* inside a line */
    SMTP_DATA_CR,           /* inside a line, the last byte was CR */
    SMTP_DATA_DOT,          /* line began with "."; the dot is dropped */
    SMTP_DATA_DOTCR,        /* line began with ".\r"; the CR is held */
    SMTP_DATA_DONE          /* end of data was found */
};

static const char smtp_data_cr = '\r';

void
smtp_data_init(struct smtp_data *d, int accept_bare)
{
    d->state = SMTP_DATA_BOL;
    d->accept_bare = accept_bare;
    d->bad_newline = 0;
    d->size = 0;
}

static int
smtp_data_out(struct smtp_data *d, const char *p, size_t n,
    smtp_data_emit_fn *emit, void *arg)
{
    if (n == 0)
        return 0;
    d->size += n;
    return emit(arg, p, n);
}

/*
 * The next CR or LF in [p, end), or end.  SSE2 (baseline on x86-64) tests
 * 16 bytes per step for both bytes at once; elsewhere a plain loop.
 */
static const char *
smtp_data_nl(const char *p, const char *end)
{
#ifdef __SSE2__
    const __m128i cr = _mm_set1_epi8('\r'), lf = _mm_set1_epi8('\n');
    __m128i v;
    int     m;

    while (end - p >= 16) {
        v = _mm_loadu_si128((const __m128i *)(const void *)p);
        m = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, cr),
            _mm_cmpeq_epi8(v, lf)));
        if (m != 0)
            return p + __builtin_ctz((unsigned)m);
        p += 16;
    }
#endif
    while (p < end && *p != '\r' && *p != '\n')
        p++;
    return p;
}

/*
 * Scan [*curp, end) in TEXT state, across as many lines as possible: stops
 * at the end of the buffer, or at a line that begins with "." (state BOL,
 * *curp on the dot).  The byte before *curp is never a pending CR here.
 */
static void
smtp_data_text(struct smtp_data *d, const char **curp, const char *end)
{
    const char *cur = *curp, *q;

    for (;;) {
        q = smtp_data_nl(cur, end);
        if (q == end) {
            d->state = SMTP_DATA_TEXT;
            break;
        }
        if (*q == '\n' || (q + 1 < end && q[1] != '\n')) {
            /* A bare LF, or a CR followed by something else: content,
             * flagged, and not a line start. */
            d->bad_newline = 1;
            cur = q + 1;
            continue;
        }
        if (q + 1 == end) {
            d->state = SMTP_DATA_CR;    /* CR is content; LF may follow */
            q = end;
            break;
        }
        cur = q + 2;                    /* past CRLF: a new line */
        if (cur == end || *cur == '.') {
            d->state = SMTP_DATA_BOL;
            q = cur;
            break;
        }
    }
    *curp = q;
}

int
smtp_data_feed(struct smtp_data *d, const char *in, size_t n, size_t *used,
    smtp_data_emit_fn *emit, void *arg)
{
    const char *cur = in, *end = in + n, *start = in;
    int         rc;

    *used = 0;
    if (d->state == SMTP_DATA_DONE)
        return 1;
    while (cur < end) {
        switch (d->state) {
        case SMTP_DATA_BOL:
            if (*cur == '.') {
                /* Flush what came before; the dot itself is dropped. */
                rc = smtp_data_out(d, start, (size_t)(cur - start), emit, arg);
                if (rc < 0)
                    goto stop;
                cur++;
                start = cur;
                d->state = SMTP_DATA_DOT;
                break;
            }
            d->state = SMTP_DATA_TEXT;
            break;
        case SMTP_DATA_TEXT:
            smtp_data_text(d, &cur, end);
            break;
        case SMTP_DATA_CR:
            /* The CR (already emitted) ended the previous buffer. */
            if (*cur == '\n') {
                cur++;
                d->state = SMTP_DATA_BOL;
            } else {
                d->bad_newline = 1;
                d->state = SMTP_DATA_TEXT;
            }
            break;
        case SMTP_DATA_DOT:
            if (*cur == '\r') {
                cur++;
                start = cur;        /* hold the CR */
                d->state = SMTP_DATA_DOTCR;
            } else {
                /* ".." keeps the second dot; ".x" and ".\n" keep the rest. */
                start = cur;
                d->state = SMTP_DATA_TEXT;
            }
            break;
        case SMTP_DATA_DOTCR:
            if (*cur == '\n') {
                cur++;
                *used = (size_t)(cur - in);
                d->state = SMTP_DATA_DONE;
                return 1;
            }
            /* ".\r" + other: a bare CR, which is content after all. */
            d->bad_newline = 1;
            if (cur > in) {
                start = cur - 1;
            } else {
                rc = smtp_data_out(d, &smtp_data_cr, 1, emit, arg);
                if (rc < 0)
                    goto stop;
                start = cur;
            }
            d->state = SMTP_DATA_TEXT;
            break;
        }
    }
    rc = smtp_data_out(d, start, (size_t)(end - start), emit, arg);
    if (rc < 0)
        goto stop;
    *used = n;
    return 0;
stop:
    *used = (size_t)(cur - in);
    return rc;
}


int
smtp_data_bare(int *cr, const char *p, size_t n)
{
    const char *end = p + n, *q;

    if (n == 0)
        return 0;
    if (*cr) {
        if (*p != '\n')
            return 1;                   /* CR, then not LF */
        p++;
    }
    *cr = 0;
    while ((q = smtp_data_nl(p, end)) < end) {
        if (*q == '\n')
            return 1;                   /* an LF with no CR before it */
        if (q + 1 == end) {
            *cr = 1;                    /* the LF may come in the next call */
            break;
        }
        if (q[1] != '\n')
            return 1;
        p = q + 2;
    }
    return 0;
}
