/*
 * dsn.h - delivery status notifications (RFC 3464): which recipients get
 * one, and the text of the report: a failure (Action: failed), a success
 * (delivered, relayed: RFC 3461 5.2) or a delay warning (delayed).  Pure: no I/O; deliver.c reads the
 * original message, calls dsn_build() and queues the result.
 *
 * CONTRACT  dsn_build() appends one complete message (headers and body,
 *           CRLF line ends) to out: multipart/report with a human-readable
 *           part, a message/delivery-status part with one block per
 *           recipient that dsn_wanted() selects, and the original message
 *           (message/rfc822 when orig is the whole message, else
 *           text/rfc822-headers).  One report is of one kind.  The bytes of orig are copied unchanged.
 * FAILURE   Cannot fail (buffers grow with xmalloc).
 */
#ifndef MTAD_DSN_H
#define MTAD_DSN_H

#include <stddef.h>
#include <stdint.h>

struct buf;
struct spool_env;
struct spool_rcpt;

enum dsn_kind {
    DSN_FAILURE = 0,                /* BOUNCED: Action failed, 5.x.x */
    DSN_SUCCESS,                    /* SENT: delivered or relayed, 2.x.x */
    DSN_DELAY                       /* still PENDING: delayed, 4.x.x */
};

struct dsn_info {
    const struct spool_env *env;    /* original envelope with its results */
    const char *hostname;           /* Reporting-MTA */
    uint64_t    now_ms;             /* wall clock, for Date: */
    const char *orig;               /* original message, or its headers */
    size_t      orig_len;
    int         full;               /* orig is the whole message */
    enum dsn_kind kind;
    uint64_t    retry_until_ms;     /* DSN_DELAY: Will-Retry-Until; 0 none */
};

/* A failure DSN is due for this recipient: BOUNCED, not yet notified (an
 * earlier DSN covered it), and NOTIFY is absent or has FAILURE (NEVER or
 * SUCCESS/DELAY alone: none). */
int     dsn_wanted(const struct spool_rcpt *rc);
/* A DSN of this kind is due for rc (never with NOTIFY=NEVER): FAILURE as
 * dsn_wanted(); SUCCESS: SENT with rc->success set and NOTIFY has
 * SUCCESS; DELAY: PENDING, rc->delay_due, not delay_warned, and NOTIFY
 * has DELAY.  An absent NOTIFY means FAILURE only (RFC 3461 4.1). */
int     dsn_wanted_kind(const struct spool_rcpt *rc, enum dsn_kind kind);
/* Recipients of env for which dsn_wanted() holds. */
size_t  dsn_count(const struct spool_env *env);
size_t  dsn_count_kind(const struct spool_env *env, enum dsn_kind kind);
/* Length of the header section of p[0..n): up to and including the line
 * end of the last header, without the empty line; n when there is no
 * empty line. */
size_t  dsn_headers_len(const char *p, size_t n);
/* RFC 5322 date of a wall-clock time in ms ("Mon, 30 Nov 2026 06:37:01
 * +0000"); out holds 40 bytes.  Returns out. */
const char *dsn_date(uint64_t ms, char *out, size_t outsz);
void    dsn_build(const struct dsn_info *in, struct buf *out);
/* The same in two pieces, so a big original can be streamed in between:
 * head (ignores orig), then the original's bytes, then tail (ended_nl:
 * the original ended with a line end, or was empty).  head + orig + tail
 * is exactly what dsn_build() makes. */
void    dsn_build_head(const struct dsn_info *in, struct buf *out);
void    dsn_build_tail(const struct dsn_info *in, int ended_nl,
            struct buf *out);

#endif /* MTAD_DSN_H */
