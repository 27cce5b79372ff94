/*
 * relay.h - the outbound SMTP client inside a worker's event loop: one
 * state machine per connection toward a next hop, connection reuse per
 * destination, and the pure pieces it is built from (reply parser, EHLO
 * capability parser, one-pass dot-stuffing), which are unit-tested.
 *
 * CONTRACT  deliver.c hands relay_submit() one transaction: a message (its
 *           envelope and the open queue file), a subset of its recipients
 *           that share one SMTP route, and a completion callback.  The relay
 *           fills one struct relay_result per recipient and calls done()
 *           exactly once, from the loop (never from inside relay_submit()).
 *           A "destination" is the route text: transactions to the same
 *           route share its connections and its concurrency cap.
 *           The txn, env and fd belong to the caller and must stay valid
 *           until done() ran.
 * FAILURE   Never fails to the caller: every problem becomes a deferred or
 *           bounced result with a reason in SMTP form ("451 4.4.1 ...").
 */
#ifndef MTAD_RELAY_H
#define MTAD_RELAY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "router/route.h"

struct ev_loop;
struct spool_env;

/* ---- pure parts ---- */

#define RELAY_REPLY_MAX   512       /* flattened reply text kept per result */

/* One complete SMTP reply, possibly multi-line ("250-a" ... "250 z"). */
struct relay_reply {
    int     code;                   /* 100..599 */
    size_t  len;                    /* bytes of the raw reply, with CRLFs */
    char    text[RELAY_REPLY_MAX];  /* "250 2.0.0 Ok" lines joined by ' ',
                                       escaped by util_escape() */
};

/* Parse the first complete reply in p[0..n).  Returns 1 (complete; r
 * filled; r->len bytes used), 0 (need more bytes) or -1 (malformed: a line
 * without a 3-digit code, a code that changes between lines, or more than
 * max bytes without an end).  Lines end in CRLF or a bare LF. */
int     relay_reply_parse(const char *p, size_t n, size_t max,
            struct relay_reply *r);

#define RELAY_CAP_PIPELINING  0x01u
#define RELAY_CAP_SIZE        0x02u
#define RELAY_CAP_8BITMIME    0x04u
#define RELAY_CAP_SMTPUTF8    0x08u
#define RELAY_CAP_CHUNKING    0x10u
#define RELAY_CAP_DSN         0x20u
#define RELAY_CAP_BINARYMIME  0x40u

/* Capabilities from a raw 250 EHLO reply (every line after the first);
 * *size is SIZE's argument (0: none or unlimited). */
unsigned relay_ehlo_caps(const char *p, size_t n, uint64_t *size);

/* The enhanced status code of a reply: "550 5.1.1 x" or "5.1.1 x" ->
 * "5.1.1"; "550 x" -> "5.0.0" (from the basic code); no code at all ->
 * dflt.  Returns out (outsz >= 16). */
const char *relay_enhanced(const char *reply, const char *dflt, char *out,
            size_t outsz);

/* Dot-stuffing in one pass (RFC 5321 4.5.2): a '.' at the start of a line
 * (after CRLF, a bare LF, a bare CR, or at the very start) is doubled, so no
 * parser, strict or LF-lenient, finds an end of data inside the body.
 * State carries across calls, so any split of the body gives the same
 * output.  out must have room for RELAY_STUFF_ROOM(n) bytes (worst case
 * ".\n" repeated: 3 bytes out per 2 in); returns the bytes written. */
struct relay_stuff {
    int     state;                  /* private */
};
#define RELAY_STUFF_ROOM(n)  ((n) + (n) / 2 + 2)
void    relay_stuff_init(struct relay_stuff *s);
size_t  relay_stuff(struct relay_stuff *s, const char *in, size_t n,
            char *out);
/* The end of data: "\r\n.\r\n" when the body did not end in CRLF, else
 * ".\r\n".  out has room for 5 bytes; returns the bytes written. */
size_t  relay_stuff_end(struct relay_stuff *s, char *out);

/* ---- the client ---- */

enum relay_status { RELAY_DEFER = 0, RELAY_SENT, RELAY_BOUNCE };

struct relay_result {
    int     status;                 /* enum relay_status */
    char    reply[RELAY_REPLY_MAX]; /* peer's reply or our reason */
    char    relay[320];             /* "host[ip]:port", or "none" */
};

struct relay_txn;
typedef void relay_done_fn(struct relay_txn *t);

struct relay_txn {
    /* set by the caller */
    const struct spool_env *env;
    int         fd;                 /* queue file (locked by the caller) */
    off_t       body_off;
    const char *dest;               /* route text: the destination key */
    const struct route *route;      /* parsed, ROUTE_SMTP */
    size_t     *rcpt;               /* indexes into env->rcpt */
    size_t      nrcpt;
    struct relay_result *res;       /* nrcpt entries, filled by the relay */
    relay_done_fn *done;
    void       *arg;
    /* private to relay.c */
    struct relay_txn *next;
    int         accepted;           /* RCPTs the peer accepted */
    int         restarts;           /* fresh connections after a stale one */
};

struct relay;

/* conns_per_dest: this worker's cap of connections per destination. */
struct relay *relay_new(struct ev_loop *loop, const char *helo_name,
            uint64_t connect_timeout_ms, unsigned conns_per_dest);
void    relay_free(struct relay *r);            /* closes every connection */
void    relay_submit(struct relay *r, struct relay_txn *t);
/* Close idle connections now and keep none idle from here on. */
void    relay_drain(struct relay *r);
/* Connections open (busy or idle), for tests and drain. */
size_t  relay_nconns(const struct relay *r);

#endif /* MTAD_RELAY_H */
