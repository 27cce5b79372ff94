/*
 * events.h - delivery events for senders: one JSON line per reception,
 * delivery, deferral, bounce, expiry and DSN sent (docs/EVENTS.md is the
 * schema), kept on the spool until a target (an HTTP endpoint, a Redis
 * stream) acknowledged them.
 *
 * CONTRACT  Writer (every worker): events_emit() formats a record into the
 *           process's buffer; events_flush() appends the buffer to the
 *           process's own segment file <spool>/events/<ms>-<pid>-<n>.ev
 *           with one write().  Callers flush before the act that makes an
 *           event final: smtpd before its 250s, delivery before it saves a
 *           state; a before-sleep hook flushes the rest each loop turn.
 *           A writer holds flock(LOCK_SH) on its open segment, so a reader
 *           knows a segment whose writer died (kill -9) is complete.
 *           Reader (one process of the node: whoever holds flock on
 *           events/reader.lock; the others retry each second): offers the
 *           unsent lines of every segment in name order to the target in
 *           batches, and moves its cursor (events/cursor, replaced with a
 *           rename) only after the target acknowledged a batch (HTTP 2xx,
 *           XADD ids).  A complete segment read to its end is unlinked.
 *           So an event is offered at least once; it is offered twice only
 *           when a reader died between the acknowledgement and the cursor.
 *           With spool.fsync the reader fdatasync()s a segment before it
 *           offers lines from it.
 *           Backlog (unsent bytes) above events.max_backlog: drop_oldest
 *           skips the oldest segments (counted, one log line per episode);
 *           backpressure makes events_full() true (smtpd answers 452 at
 *           DATA) until the backlog is under 90% of the limit.
 * FAILURE   A failed write of a segment is logged once per episode and the
 *           buffer kept (bounded: past 4 MiB the oldest is dropped and
 *           counted); a target that fails is retried with back-off (1 s,
 *           doubling to 60 s), the lines staying where they are.
 */
#ifndef MTAD_EVENTS_H
#define MTAD_EVENTS_H

#include <stddef.h>
#include <stdint.h>

enum events_type {
    EVENTS_RECEPTION = 0, EVENTS_DELIVERY, EVENTS_DEFERRAL, EVENTS_BOUNCE,
    EVENTS_EXPIRY, EVENTS_DSN, EVENTS_SUSPENSION, EVENTS_RESUMPTION,
    EVENTS_NTYPES
};

#define EVENTS_SCHEMA_VERSION 1
#define EVENTS_ALL_TYPES ((1u << EVENTS_NTYPES) - 1)

/* One event.  Every string may be NULL (left out of the record); each is
 * escaped as JSON where it is written. */
struct events_rec {
    enum events_type type;
    const char *queue_id;
    const char *sender;
    const char *recipient;
    /* receptions: every recipient (spool_rcpt addresses) */
    const struct spool_rcpt *rcpt;
    size_t      nrcpt;
    uint64_t    size;               /* message bytes */
    unsigned    attempt;            /* 1-based; 0: not an attempt */
    const char *relay;              /* "host[ip]:port" of the next hop */
    const char *reply;              /* SMTP form: "250 2.0.0 Ok" */
    const char *tls_version;        /* "TLSv1.3"; NULL or "": none */
    const char *tls_cipher;
    const char *tls_verify;         /* "none", "ca", "dane", "sts" */
    const char *cls;                /* bounce class, when known */
    const char *site;               /* shaping site, when known */
    const char *source;             /* egress source, when known */
    const char *client_ip;          /* receptions */
    unsigned    client_port;
    const char *helo;
    const char *auth_user;
    const char *dsn_id;             /* EVENTS_DSN: the DSN's queue id */
    const char *dsn_kind;           /* "failure", "delay", "success" */
    /* EVENTS_SUSPENSION: "suspend" or "slow", and when it ends (wall ms;
     * a slow-down: the end of its ramp); reply: what began it */
    const char *mode;
    uint64_t    until_ms;
    /* the message's header section, for events.headers (correlation
     * fields): hdr[0..hdrlen) */
    const char *hdr;
    size_t      hdrlen;
};

/* events.types names: "reception", "delivery", ... ; -1 for another. */
int         events_type_parse(const char *name);
const char *events_type_name(enum events_type t);

struct spool_rcpt;
struct ev_loop;
struct config;
struct status_page;
struct status_worker;
struct events;

/* NULL when cfg has no events target (events off: *why ""), or on an
 * error (why set).  Called in the worker before its sandbox: it opens the
 * events directory, reads the HTTP secret and the CA bundle, resolves the
 * target's host.  sp: the node's status page (the backlog gauges and the
 * backpressure flag, shared); st: this worker's counters.  Either may be
 * NULL (then nothing is shared or counted). */
struct events *events_new(struct ev_loop *loop, const struct config *cfg,
            struct status_page *sp, struct status_worker *st, char *why,
            size_t whysz);
void    events_free(struct events *e);                   /* NULL ok */
/* 1 when events of type t are wanted (events.types): callers skip the
 * work of filling a record otherwise.  NULL e: 0. */
int     events_wants(const struct events *e, enum events_type t);
/* 1 when events.headers names header fields (the caller then passes the
 * message's header section). */
int     events_want_headers(const struct events *e);
void    events_emit(struct events *e, const struct events_rec *r);
/* A shaping episode (EVENTS_SUSPENSION or EVENTS_RESUMPTION) of site x
 * source: mode, until_ms as in events_rec (a resumption: NULL, 0);
 * reason: the reply that began it, or mtad's own words. */
void    events_emit_shape(struct events *e, enum events_type t,
            const char *site, const char *source, const char *mode,
            uint64_t until_ms, const char *reason);
void    events_flush(struct events *e);
/* The CHAN_SHAPE_EVENT line of an episode the master began or ended
 * (events_shape.c): its length, 0 when it does not fit outsz.  A worker
 * gives the line to events_shape_take(), which emits the event: 0, or -1
 * for a line that is not one (nothing emitted). */
size_t  events_shape_encode(char *out, size_t outsz, enum events_type t,
            const char *site, const char *source, const char *mode,
            uint64_t until_ms, const char *reason);
int     events_shape_take(struct events *e, const char *payload,
            size_t len);
/* 1 while the backlog is full and events.when_full is backpressure. */
int     events_full(const struct events *e);

#endif /* MTAD_EVENTS_H */
