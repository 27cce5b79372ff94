/*
 * session.c - the inbound ESMTP session: a per-connection state machine
 * driven by the worker's event loop.
 *
 * PURPOSE   RFC 5321 with PIPELINING, SIZE, 8BITMIME, SMTPUTF8, CHUNKING
 *           (BDAT), ENHANCEDSTATUSCODES and DSN.  Every complete command in
 *           the input buffer is run in one go; replies are gathered in the
 *           session's out buffer and written once per turn by
 *           sess_flush_hook().  DATA content streams from the read buffer
 *           through smtp_data_feed() straight into spool_write(): no line
 *           splitting, no allocation per line.
 * MEMORY    An idle session holds only struct sess (a few hundred bytes),
 *           its kernel socket and an epoll entry: the 128 KiB input buffer
 *           comes from the pool when bytes arrive and goes back when none
 *           are left unparsed; the reply buffer is recycled after each
 *           flush; the transaction (struct sess_txn) exists from MAIL to
 *           the end of the message.
 * COMMIT    250 after the final dot only once spool_commit() (or the group
 *           commit in sess_commit_hook(), with spool.fsync) returned OK.
 *           A session waiting for the group commit parses no more input;
 *           the hook resumes it after queueing its reply.
 * STOP      Graceful stop (smtpd.h STOP): sessions go on as usual,
 *           transactions included; only one between transactions (no
 *           MAIL, no unparsed input) on which nothing was read or written
 *           for SMTPD_STOP_GRACE_MS is told "421 4.3.2" and closed.  Each
 *           session checks itself (sess_process, its timer), so a stop costs
 *           nothing per turn.
 * STARTTLS  (RFC 3207) "220 2.0.0 Ready to start TLS", then whatever the
 *           client pipelined behind the command is thrown away unread
 *           (plaintext injected before the handshake, CVE-2011-0411), the
 *           220 is written in clear, and SSL_accept() runs on the loop
 *           (SS_TLS, then SS_HANDSHAKE).  After it the session starts over
 *           as if just connected, without a greeting: no HELO name, no
 *           transaction.  A failed handshake closes the connection.  TLS
 *           reads can leave decrypted bytes in the SSL object with nothing
 *           on the socket: sess_tls_kick() puts such a session on
 *           d->tls_ready, read again on the next turn.  Plain sessions pay
 *           one pointer test for all this.
 * LIMITS    (issue 10) A session ends at limits.session_lifetime however
 *           busy the client keeps it (its own timer, from accept); more
 *           than limits.max_junk_commands NOOP/RSET/VRFY/HELP since the
 *           last accepted message end it too (421); a transaction's
 *           envelope memory stops at limits.max_envelope_size and its
 *           recipients at max_recipients, both answered 452 4.5.3 as flow
 *           control, not counted toward max_errors.  No RCPT after the
 *           first BDAT chunk (503).  limits.bare_newline holds for BDAT
 *           content too, except BODY=BINARYMIME.
 * FAILURE   Never crashes on input and never blocks.  Spool failures are
 *           452 4.3.1 (the message is aborted, the session goes on); I/O
 *           errors end the session, aborting any message in progress.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/logfmt.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "router/router.h"
#include "spool/spool.h"
#include "delivery/delivery.h"
#include "smtp/smtp.h"
#include "common/net.h"
#include "smtpd/smtpd.h"
#include "smtpd/smtpd_int.h"

/* Structured log fields of the session's client (log.format: json). */
#define SESS_CLIENT(s) LKV_S("client", (s)->ip), LKV_I("client_port", (s)->port)
#define SESS_REJECT(s, why) STATUS_ADD((s)->d->st->ops.rejects[why], 1)

#define SESS_OUT_CAP    4096        /* recycled reply buffer size */
#define SESS_OUT_SPARE  256         /* recycled reply buffers kept */
#define SESS_OUT_HIGH   (64 * 1024) /* stop running commands above this */

enum sess_state {
    SS_CMD = 0,                     /* reading command lines */
    SS_DATA,                        /* DATA content, up to CRLF.CRLF */
    SS_BDAT,                        /* a BDAT chunk of exact length */
    SS_COMMIT,                      /* message finished, waiting for commit */
    SS_CLOSING,                     /* last reply queued; close once sent */
    SS_TLS,                         /* STARTTLS: writing the 220 in clear */
    SS_HANDSHAKE                    /* SSL_accept() in progress */
};

#define SF_ESMTP     0x01u          /* EHLO (not HELO) was used */
#define SF_PENDING   0x02u          /* on d->pending */
#define SF_WBLOCK    0x04u          /* a write left bytes behind: EPOLLOUT */
#define SF_DISCARD   0x08u          /* dropping an over-long line to its LF */
#define SF_RELAY     0x10u          /* client in relay.allow_networks */
#define SF_COMMITQ   0x20u          /* on d->commit */
#define SF_TLSREADY  0x40u          /* on d->tls_ready */
/* Mail from this session is DKIM-signed (when its From: domain has keys):
 * set at connect for a client in dkim.sign_networks; AUTH sets it for an
 * authenticated user. */
#define SF_SIGN      0x80u

/* The mail transaction: from MAIL to the end of the message. */
struct sess_txn {
    struct spool_env  env;          /* client_ip/helo point into the session */
    size_t            rcap;
    struct spool_msg *msg;          /* created at DATA / first BDAT */
    char              id[SPOOL_ID_SIZE];
    struct smtp_data  dp;
    uint64_t          bytes;        /* content bytes from the client */
    int               used_bdat;
    size_t            env_bytes;    /* envelope memory, for
                                       limits.max_envelope_size */
    int               bdat_cr;      /* BDAT: the last byte was a CR */
    int               bdat_bare;    /* BDAT: a bare CR or LF was seen */
    int               too_big;
    int               spool_rc;     /* first failed spool call, 0 = none */
    /* mail-loop guard: Received: headers counted in the header section */
    unsigned          hops;
    int               hdr_state;    /* SESS_HDR_* */
    unsigned          hdr_match;    /* bytes of "received:" matched */
    struct smtpd_dkim *dkim;        /* signing this message, or NULL */
    const char       *dkim_domain;  /* d= once signed (for the log) */
};

/* Like Postfix's hopcount_limit: a message that already passed this many
 * MTAs is looping, and is refused instead of being relayed once more. */
#define SESS_MAX_HOPS  50

enum { SESS_HDR_LINE = 0, SESS_HDR_MATCH, SESS_HDR_MID, SESS_HDR_CR,
       SESS_HDR_BODY };

struct sess {
    struct smtpd    *d;
    struct sess      *prev, *next;   /* d->sessions */
    struct sess      *pprev, *pnext; /* d->pending */
    struct net_conn  tp;
    unsigned          watched;       /* EV_* mask given to the loop */
    struct ev_timer   timer;
    struct ev_timer   life;          /* limits.session_lifetime */
    struct buf        in;
    struct buf        out;
    struct sess_txn  *txn;
    char             *helo;
    uint64_t          bdat_left;     /* bytes of the current chunk to read */
    const char       *bdat_err;      /* reply for a chunk being discarded */
    uint64_t          active_ms;     /* ev_now() at the last read or flush */
    union sess_peer {
        struct sockaddr     sa;
        struct sockaddr_in  sin;
        struct sockaddr_in6 sin6;
    } peer;
    char              ip[INET6_ADDRSTRLEN];
    uint16_t          port;
    uint8_t           state;
    uint8_t           bdat_last;
    uint16_t          flags;
    uint16_t          nerrors;
    uint32_t          njunk;         /* NOOP/RSET/VRFY/HELP since a message */
    uint16_t          ncmd[SMTP_AUTH + 1];
    struct smtpd_sauth *auth;        /* AUTH state (session_auth.c) */
    uint8_t           role;          /* the listener's CONFIG_ROLE_* */
    uint8_t           greet_tls;     /* implicit TLS: 220 after handshake */
};

static void sess_process(struct sess *s);
static void sess_stop_check(struct sess *s);
static void sess_free(struct sess *s, const char *why);
static void sess_on_io(struct ev_loop *loop, int fd, unsigned events,
            void *arg);
static void sess_tls_kick(struct sess *s);
static void sess_read(struct sess *s);

static const char *const sess_verb_name[SMTP_AUTH + 1] = {
    "unknown", "ehlo", "helo", "mail", "rcpt", "data", "bdat", "rset",
    "noop", "quit", "vrfy", "help", "starttls", "auth"
};


/* --- lists and buffers ------------------------------------------------ */

static void
sess_pending_add(struct sess *s)
{
    struct smtpd *d = s->d;

    if (s->flags & (SF_PENDING | SF_WBLOCK))
        return;                     /* queued, or EPOLLOUT will flush */
    s->flags |= SF_PENDING;
    s->pprev = NULL;
    s->pnext = d->pending;
    if (d->pending != NULL)
        d->pending->pprev = s;
    d->pending = s;
}


static void
sess_pending_del(struct sess *s)
{
    if (!(s->flags & SF_PENDING))
        return;
    if (s->pprev != NULL)
        s->pprev->pnext = s->pnext;
    else
        s->d->pending = s->pnext;
    if (s->pnext != NULL)
        s->pnext->pprev = s->pprev;
    s->pprev = s->pnext = NULL;
    s->flags &= ~SF_PENDING;
}


static void
sess_commit_del(struct sess *s)
{
    struct smtpd *d = s->d;
    size_t         i;

    if (!(s->flags & SF_COMMITQ))
        return;
    for (i = 0; i < d->ncommit; i++)
        if (d->commit[i] == s) {
            d->commit[i] = d->commit[--d->ncommit];
            break;
        }
    s->flags &= ~SF_COMMITQ;
}


/* sess_out_take - give the session a reply buffer, recycled if possible. */
static void
sess_out_take(struct sess *s)
{
    struct smtpd *d = s->d;

    if (s->out.data != NULL)
        return;
    s->out.data = d->nout_spare > 0 ? d->out_spare[--d->nout_spare]
                                    : xmalloc(SESS_OUT_CAP);
    s->out.cap = SESS_OUT_CAP;
    s->out.off = s->out.len = 0;
}


static void
sess_out_give(struct sess *s)
{
    struct smtpd *d = s->d;

    if (s->out.data == NULL)
        return;
    if (s->out.cap == SESS_OUT_CAP && d->nout_spare < SESS_OUT_SPARE) {
        if (d->out_spare == NULL)
            d->out_spare = xmalloc(SESS_OUT_SPARE * sizeof(char *));
        d->out_spare[d->nout_spare++] = s->out.data;
    } else {
        free(s->out.data);
    }
    buf_init(&s->out);
}


/* sess_in_release - return the input buffer to the pool once it is empty,
 * otherwise move the partial line to the front (one short memmove). */
static void
sess_in_release(struct sess *s)
{
    if (s->in.data == NULL)
        return;
    if (buf_avail(&s->in) == 0) {
        s->in.off = s->in.len = 0;
        buf_pool_give(&s->in);
    } else if (s->in.off > 0 && s->state == SS_CMD) {
        buf_compact(&s->in);
    }
}


static void
sess_watch(struct sess *s, unsigned events)
{
    if (s->watched == events)
        return;
    if (ev_watch(s->d->loop, s->tp.fd, events, sess_on_io, s) == 0)
        s->watched = events;
}


/* --- replies ---------------------------------------------------------- */

/* sess_error - count a 4xx/5xx reply; at max_errors the session ends. */
static void
sess_error(struct sess *s)
{
    const struct config *cfg = s->d->cfg;

    STATUS_ADD(s->d->st->errors, 1);
    if (s->nerrors < UINT16_MAX)
        s->nerrors++;
    if ((int)s->nerrors < cfg->max_errors || s->state == SS_CLOSING)
        return;
    buf_printf(&s->out, "421 4.7.0 %s Error: too many errors\r\n",
        cfg->hostname);
    SESS_REJECT(s, STATUS_REJ_TOO_MANY_ERRORS);
    log_ev(LOGL_INFO, "reject", LOG_KVS(SESS_CLIENT(s),
        LKV_S("reason", "too_many_errors"), LKV_S("dsn", "4.7.0")),
        "too many errors from [%s]:%u after %u errors", s->ip,
        (unsigned)s->port, (unsigned)s->nerrors);
    s->state = SS_CLOSING;
}


/* sess_reply - queue one reply line (text without CRLF). */
static void
sess_reply(struct sess *s, const char *text)
{
    size_t n = strlen(text);

    sess_out_take(s);
    buf_reserve(&s->out, n + 2);
    memcpy(buf_tail(&s->out), text, n);
    memcpy(buf_tail(&s->out) + n, "\r\n", 2);
    buf_produce(&s->out, n + 2);
    sess_pending_add(s);
    if (text[0] == '4' || text[0] == '5')
        sess_error(s);
}


/* sess_reply_flow - a 4xx that is flow control, not a client error: not
 * counted toward max_errors. */
static void
sess_reply_flow(struct sess *s, const char *text)
{
    sess_out_take(s);
    buf_printf(&s->out, "%s\r\n", text);
    sess_pending_add(s);
}


static void sess_replyf(struct sess *s, const char *fmt, ...)
            __attribute__((format(printf, 2, 3)));

static void
sess_replyf(struct sess *s, const char *fmt, ...)
{
    char    line[1200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    sess_reply(s, line);
}


/* sess_close_after - queue a final reply; the session closes once it is
 * written (or when its timer fires first). */
static void
sess_close_after(struct sess *s, const char *text)
{
    sess_out_take(s);
    buf_printf(&s->out, "%s\r\n", text);
    sess_pending_add(s);
    s->state = SS_CLOSING;
}


/* --- graceful stop ---------------------------------------------------- */

/* sess_stop_idle - between transactions with nothing half-read: closing
 * now cannot cut a message or a command short. */
static int
sess_stop_idle(const struct sess *s)
{
    return s->state == SS_CMD && s->txn == NULL &&
        !(s->flags & SF_DISCARD) &&
        (s->in.data == NULL || buf_avail(&s->in) == 0);
}


/* sess_shutdown - the goodbye of a stopping worker; closed once written
 * (the timer bounds a client that does not read). */
static void
sess_shutdown(struct sess *s)
{
    char text[300];

    snprintf(text, sizeof(text), "421 4.3.2 %s Error: service shutting down",
        s->d->cfg->hostname);
    sess_close_after(s, text);
    ev_timer_start(s->d->loop, &s->timer, 5000);
}


/* sess_stop_check - during a stop: a session between transactions that has
 * been quiet for the grace (none after the deadline) is told 421; one that
 * has not is re-armed to look again when the grace runs out (or at the
 * command timeout, if that is shorter, which then ends it the same way).
 * A session in a transaction keeps its usual timers. */
static void
sess_stop_check(struct sess *s)
{
    struct smtpd *d = s->d;
    uint64_t       grace = d->stop_final ? 0 : SMTPD_STOP_GRACE_MS;
    uint64_t       now = ev_now(d->loop), due = s->active_ms + grace;

    if (!sess_stop_idle(s))
        return;
    if (now >= due) {
        sess_shutdown(s);
        return;
    }
    ev_timer_start(d->loop, &s->timer, due - now < d->cfg->command_timeout_ms
        ? due - now : d->cfg->command_timeout_ms);
}


/* --- transactions ----------------------------------------------------- */

static void
sess_txn_free(struct sess *s)
{
    struct sess_txn *t = s->txn;
    size_t           i;

    if (t == NULL)
        return;
    sess_commit_del(s);
    spool_abort(t->msg);
    smtpd_dkim_free(t->dkim);
    free(t->env.sender);
    free(t->env.envid);
    for (i = 0; i < t->env.nrcpt; i++) {
        free(t->env.rcpt[i].addr);
        free(t->env.rcpt[i].orcpt);
    }
    free(t->env.rcpt);
    free(t);
    s->txn = NULL;
}


/* sess_received - the Received: header, first bytes of the stored body. */
static int
sess_received(struct sess *s, struct sess_txn *t)
{
    const struct config *cfg = s->d->cfg;
    char                 date[64], forc[SMTP_ADDR_MAX + 16], *hdr;
    const char          *with, *cipher;
    char                 tls[600];
    struct tm            tm;
    int                  bits, alg_bits;
    time_t               now = time(NULL);
    int                  n, rc;

    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S +0000", &tm);
    if (t->env.smtputf8)
        with = "UTF8SMTP";
    else
        with = (s->flags & SF_ESMTP) ? "ESMTP" : "SMTP";
    tls[0] = '\0';
    if (s->tp.ssl != NULL) {
        /* RFC 3848 / 6531 names, and what was used, as Postfix writes it */
        with = t->env.smtputf8 ? "UTF8SMTPS" : "ESMTPS";
        cipher = net_tls_cipher(&s->tp, &bits, &alg_bits);
        snprintf(tls, sizeof(tls), "\t(using %s with cipher %s (%d/%d "
            "bits))\r\n", net_tls_version(&s->tp), cipher, bits,
            alg_bits);
    }
    if (cfg->auth_received_header && smtpd_auth_user(s->auth) != NULL)
        snprintf(tls + strlen(tls), sizeof(tls) - strlen(tls),
            "\t(Authenticated sender: %s)\r\n", smtpd_auth_user(s->auth));
    forc[0] = '\0';
    if (t->env.nrcpt == 1)
        snprintf(forc, sizeof(forc), "\r\n\tfor <%s>", t->env.rcpt[0].addr);
    /* Sized to fit: a header is never cut short. */
#define SESS_RECEIVED_FMT "Received: from %s ([%s])\r\n%s" \
        "\tby %s (mtad) with %s id %s%s;\r\n\t%s\r\n"
#define SESS_RECEIVED_ARGS s->helo ? s->helo : "unknown", s->ip, tls, \
        cfg->hostname, with, t->id, forc, date
    n = snprintf(NULL, 0, SESS_RECEIVED_FMT, SESS_RECEIVED_ARGS);
    if (n < 0)
        return SPOOL_ESYS;
    hdr = xmalloc((size_t)n + 1);
    (void)snprintf(hdr, (size_t)n + 1, SESS_RECEIVED_FMT, SESS_RECEIVED_ARGS);
#undef SESS_RECEIVED_FMT
#undef SESS_RECEIVED_ARGS
    rc = spool_write(t->msg, hdr, (size_t)n);
    free(hdr);
    return rc;
}


/* sess_spool_fail - log a spool failure once per message. */
static void
sess_spool_fail(struct sess *s, const char *what, int rc)
{
    log_warn("%s: %s failed for client [%s]:%u: %s (%s)",
        s->txn && s->txn->id[0] ? s->txn->id : "-", what, s->ip,
        (unsigned)s->port,
        rc == SPOOL_ENOSPC ? "no space" : "error",
        spool_errstr(s->d->spool));
}


/* sess_msg_open - create tmp/<id> with the envelope, then Received:. */
static int
sess_msg_open(struct sess *s)
{
    struct sess_txn *t = s->txn;
    int              rc;

    t->env.arrival_ms = util_wall_ms();
    rc = spool_create(s->d->spool, &t->env, &t->msg);
    if (rc != SPOOL_OK) {
        /* t->msg may hold a half-made file: sess_txn_free() aborts it. */
        sess_spool_fail(s, "spool_create", rc);
        return rc;
    }
    util_strlcpy(t->id, spool_msg_id(t->msg), sizeof(t->id));
    if ((s->flags & SF_SIGN) && s->d->dkim != NULL)
        t->dkim = smtpd_dkim_begin(s->d->dkim);
    rc = sess_received(s, t);
    if (rc != SPOOL_OK) {
        sess_spool_fail(s, "spool_write", rc);
        t->spool_rc = rc;
    }
    return SPOOL_OK;
}


/* sess_queued - the message is committed: 250, log, hand to delivery. */
static void
sess_queued(struct sess *s, uint64_t size)
{
    struct sess_txn *t = s->txn;
    struct smtpd   *d = s->d;

    t->msg = NULL;                  /* spool_commit freed it */
    sess_replyf(s, "250 2.0.0 Ok: queued as %s", t->id);
    log_ev(LOGL_INFO, "received", LOG_KVS(LKV_S("queue_id", t->id),
        LKV_S("from", t->env.sender), LKV_I("size", size),
        LKV_I("nrcpt", t->env.nrcpt), SESS_CLIENT(s),
        LKV_S("dkim", t->dkim_domain)),
        "%s: from=<%s>, size=%llu, nrcpt=%zu, client=[%s]:%u%s%s",
        t->id, t->env.sender, (unsigned long long)size, t->env.nrcpt, s->ip,
        (unsigned)s->port, t->dkim_domain ? ", dkim=" : "",
        t->dkim_domain ? t->dkim_domain : "");
    STATUS_ADD(d->st->msgs_in, 1);
    s->njunk = 0;                   /* a client that sends mail is no idler */
    deliver_submit(d->deliver, t->id);
    sess_txn_free(s);
}


static void
sess_storage_fail(struct sess *s)
{
    sess_reply(s, "452 4.3.1 Insufficient system storage");
    sess_txn_free(s);               /* spool_abort: nothing stays behind */
}


/* sess_finish_msg - content complete and valid: flush, then commit now
 * (no fsync) or join the group commit of this turn. */
static void
sess_finish_msg(struct sess *s)
{
    struct sess_txn *t = s->txn;
    struct smtpd   *d = s->d;
    uint64_t         size;
    int              rc;

    if (t->dkim != NULL &&
        (rc = smtpd_dkim_end(t->dkim, t->msg, t->id, &t->dkim_domain)) != 0) {
        if (rc == SMTPD_DKIM_EFAIL) {
            sess_reply(s, "451 4.3.0 Error: DKIM signing failed, try again");
            sess_txn_free(s);
        } else {
            sess_spool_fail(s, "spool_head", rc);
            sess_storage_fail(s);
        }
        return;
    }
    size = spool_msg_size(t->msg);
    rc = spool_finish(t->msg);
    if (rc != SPOOL_OK) {
        sess_spool_fail(s, "spool_finish", rc);
        sess_storage_fail(s);
        return;
    }
    if (!d->cfg->spool_fsync) {
        rc = spool_commit(t->msg);
        if (rc != SPOOL_OK) {
            sess_spool_fail(s, "spool_commit", rc);
            sess_storage_fail(s);
            return;
        }
        sess_queued(s, size);
        return;
    }
    if (d->ncommit == d->commitcap) {
        d->commitcap = d->commitcap ? d->commitcap * 2 : 16;
        d->commit = xrealloc(d->commit, d->commitcap * sizeof(*d->commit));
    }
    d->commit[d->ncommit++] = s;
    s->flags |= SF_COMMITQ;
    s->state = SS_COMMIT;
}


/* sess_count_hops - count "Received:" at line starts in the header
 * section of the content span p[0..n); state carries across spans.  Stops
 * at the empty line, so the body costs nothing. */
static void
sess_count_hops(struct sess_txn *t, const char *p, size_t n)
{
    static const char pat[] = "received:";
    const char       *end = p + n, *nl;

    while (p < end && t->hdr_state != SESS_HDR_BODY) {
        switch (t->hdr_state) {
        case SESS_HDR_LINE:
            if (*p == '\r') {
                t->hdr_state = SESS_HDR_CR;
                p++;
                break;
            }
            if (*p == '\n') {
                t->hdr_state = SESS_HDR_BODY;
                break;
            }
            t->hdr_match = 0;
            t->hdr_state = SESS_HDR_MATCH;
            break;
        case SESS_HDR_MATCH:
            if ((*p | 0x20) != pat[t->hdr_match]) {
                t->hdr_state = SESS_HDR_MID;
                break;
            }
            p++;
            if (++t->hdr_match == sizeof(pat) - 1) {
                t->hops++;
                t->hdr_state = SESS_HDR_MID;
            }
            break;
        case SESS_HDR_CR:
            t->hdr_state = *p == '\n' ? SESS_HDR_BODY : SESS_HDR_MID;
            break;
        case SESS_HDR_MID:
            if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
                return;
            p = nl + 1;
            t->hdr_state = SESS_HDR_LINE;
            break;
        }
    }
}


/* sess_emit - smtp_data span sink: count, enforce the size, spool. */
static int
sess_emit(void *arg, const char *p, size_t n)
{
    struct sess     *s = arg;
    struct sess_txn *t = s->txn;
    int              rc;

    t->bytes += n;
    if (t->hdr_state != SESS_HDR_BODY)
        sess_count_hops(t, p, n);
    if (t->too_big || t->spool_rc != 0)
        return 0;                   /* keep consuming, stop writing */
    if (t->bytes > s->d->cfg->max_message_size) {
        t->too_big = 1;
        return 0;
    }
    if (t->dkim != NULL &&
        (rc = smtpd_dkim_feed(t->dkim, t->msg, p, n, t->id)) != SPOOL_OK) {
        t->spool_rc = rc;
        sess_spool_fail(s, "spool_head", rc);
        return 0;
    }
    rc = spool_write(t->msg, p, n);
    if (rc != SPOOL_OK) {
        t->spool_rc = rc;
        sess_spool_fail(s, "spool_write", rc);
    }
    return 0;
}


/* sess_reject_loop - too many Received: headers: a mail loop. */
static void
sess_reject_loop(struct sess *s)
{
    SESS_REJECT(s, STATUS_REJ_LOOP);
    log_ev(LOGL_INFO, "reject", LOG_KVS(LKV_S("queue_id", s->txn->id),
        SESS_CLIENT(s), LKV_S("reason", "mail_loop"), LKV_S("dsn", "5.4.6")),
        "%s: reject: too many hops (%u Received: headers) from %s:%u",
        s->txn->id, s->txn->hops, s->ip, (unsigned)s->port);
    sess_reply(s, "554 5.4.6 Error: too many hops (mail loop?)");
    sess_txn_free(s);
}


/* sess_data_end - the final dot was read: answer for the message. */
static void
sess_data_end(struct sess *s)
{
    struct sess_txn *t = s->txn;

    s->state = SS_CMD;
    ev_timer_start(s->d->loop, &s->timer, s->d->cfg->command_timeout_ms);
    if (t->dp.bad_newline && !s->d->cfg->bare_newline_accept) {
        SESS_REJECT(s, STATUS_REJ_BARE_NEWLINE);
        log_ev(LOGL_INFO, "reject", LOG_KVS(LKV_S("queue_id", t->id),
            SESS_CLIENT(s), LKV_S("reason", "bare_newline"),
            LKV_S("dsn", "5.5.2")),
            "%s: reject: bare <CR> or <LF> in message from %s:%u",
            t->id, s->ip, (unsigned)s->port);
        sess_reply(s, "550 5.5.2 Error: bare <CR> or <LF> received");
        sess_txn_free(s);
    } else if (t->too_big) {
        SESS_REJECT(s, STATUS_REJ_TOO_LARGE);
        log_ev(LOGL_INFO, "reject", LOG_KVS(LKV_S("queue_id", t->id),
            SESS_CLIENT(s), LKV_S("reason", "too_large"),
            LKV_S("dsn", "5.3.4")),
            "%s: reject: message too large from %s:%u", t->id, s->ip,
            (unsigned)s->port);
        sess_reply(s, "552 5.3.4 Message size exceeds fixed limit");
        sess_txn_free(s);
    } else if (t->hops > SESS_MAX_HOPS) {
        sess_reject_loop(s);
    } else if (t->spool_rc != 0) {
        sess_storage_fail(s);
    } else {
        sess_finish_msg(s);
    }
}


/* sess_bdat_end - a whole chunk was read. */
static void
sess_bdat_end(struct sess *s)
{
    struct sess_txn *t = s->txn;

    s->state = SS_CMD;
    ev_timer_start(s->d->loop, &s->timer, s->d->cfg->command_timeout_ms);
    if (s->bdat_err != NULL) {
        sess_reply(s, s->bdat_err);
        s->bdat_err = NULL;
        return;
    }
    if (t->bdat_bare || (s->bdat_last && t->bdat_cr)) {
        SESS_REJECT(s, STATUS_REJ_BARE_NEWLINE);
        log_ev(LOGL_INFO, "reject", LOG_KVS(LKV_S("queue_id", t->id),
            SESS_CLIENT(s), LKV_S("reason", "bare_newline"),
            LKV_S("dsn", "5.5.2")),
            "%s: reject: bare <CR> or <LF> in message from %s:%u",
            t->id, s->ip, (unsigned)s->port);
        sess_reply(s, "550 5.5.2 Error: bare <CR> or <LF> received");
        sess_txn_free(s);
    } else if (t->too_big) {
        SESS_REJECT(s, STATUS_REJ_TOO_LARGE);
        sess_reply(s, "552 5.3.4 Message size exceeds fixed limit");
        sess_txn_free(s);
    } else if (s->bdat_last && t->hops > SESS_MAX_HOPS) {
        sess_reject_loop(s);
    } else if (t->spool_rc != 0) {
        sess_storage_fail(s);
    } else if (s->bdat_last) {
        sess_finish_msg(s);
    } else {
        sess_replyf(s, "250 2.0.0 Ok: %llu octets received",
            (unsigned long long)t->bytes);
    }
}


/* --- commands --------------------------------------------------------- */

/* SMTP AUTH and the submission role: session_auth.c decides; these
 * describe the session to it and act on its answer. */
static struct smtpd_auth_ctx *
sess_auth_ctx(struct sess *s, struct smtpd_auth_ctx *c)
{
    const struct sockaddr_in6 *s6 = &s->peer.sin6;

    c->ip = s->ip;
    c->port = s->port;
    c->tls = s->tp.ssl != NULL;
    c->loopback = (s->peer.sa.sa_family == AF_INET &&
        (ntohl(s->peer.sin.sin_addr.s_addr) >> 24) == 127) ||
        (s->peer.sa.sa_family == AF_INET6 &&
        IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr));
    c->esmtp = (s->flags & SF_ESMTP) != 0;
    c->in_txn = s->txn != NULL;
    c->role = s->role;
    c->sa = s->auth;
    return c;
}

static void
sess_auth(struct sess *s, struct str arg, int cont)
{
    struct smtpd_auth_ctx c;
    char                  reply[512];
    int                   rc;

    sess_auth_ctx(s, &c);
    rc = cont ? smtpd_auth_line(s->d, &c, s->auth, arg, reply, sizeof(reply))
              : smtpd_auth_cmd(s->d, &c, &s->auth, arg, reply, sizeof(reply));
    if (rc == SMTPD_AUTH_OK)
        s->flags |= SF_RELAY | SF_SIGN;     /* from wherever it connects */
    if (rc == SMTPD_AUTH_CLOSE) {
        STATUS_ADD(s->d->st->errors, 1);
        sess_close_after(s, reply);
        return;
    }
    sess_reply(s, reply);
}

static int
sess_auth_mail(struct sess *s, const char *sender)
{
    struct smtpd_auth_ctx c;
    char                  reply[SMTP_ADDR_MAX + 300];

    if (smtpd_auth_mail(s->d, sess_auth_ctx(s, &c), sender, reply,
        sizeof(reply)) == 0)
        return 0;
    sess_reply(s, reply);
    return -1;
}

static void
sess_ehlo(struct sess *s, struct str arg, int esmtp)
{
    const struct config *cfg = s->d->cfg;
    const char          *reply;
    struct smtpd_auth_ctx actx;

    if (smtp_parse_helo(arg, &reply) < 0) {
        sess_reply(s, reply);
        return;
    }
    sess_txn_free(s);               /* EHLO implies RSET */
    while (arg.n > 0 && arg.p[arg.n - 1] == ' ')
        arg.n--;                    /* the name as validated, unpadded */
    free(s->helo);
    s->helo = xstrndup(arg.p, arg.n);
    if (!esmtp) {
        s->flags &= ~SF_ESMTP;
        sess_replyf(s, "250 %s", cfg->hostname);
        return;
    }
    s->flags |= SF_ESMTP;
    sess_out_take(s);
    buf_printf(&s->out,
        "250-%s\r\n"
        "%s"
        "250-PIPELINING\r\n"
        "250-SIZE %llu\r\n"
        "250-8BITMIME\r\n"
        "250-SMTPUTF8\r\n"
        "250-CHUNKING\r\n"
        "250-BINARYMIME\r\n"
        "250-ENHANCEDSTATUSCODES\r\n"
        "%s"
        "250 DSN\r\n",
        cfg->hostname,
        s->d->tls_ctx != NULL && s->tp.ssl == NULL ? "250-STARTTLS\r\n" : "",
        (unsigned long long)cfg->max_message_size,
        smtpd_auth_ehlo(s->d, sess_auth_ctx(s, &actx)));
    sess_pending_add(s);
}


static void
sess_mail(struct sess *s, struct str arg)
{
    struct smtp_mail m;
    struct sess_txn *t;
    const char      *reply;

    if (s->helo == NULL) {
        sess_reply(s, "503 5.5.1 Error: send HELO/EHLO first");
        return;
    }
    if (s->txn != NULL) {
        sess_reply(s, "503 5.5.1 Error: nested MAIL command");
        return;
    }
    if (smtp_parse_mail(arg, &m, &reply) < 0) {
        sess_reply(s, reply);
        return;
    }
    if (sess_auth_mail(s, m.addr) < 0)
        return;
    if (m.size > s->d->cfg->max_message_size) {
        SESS_REJECT(s, STATUS_REJ_TOO_LARGE);
        sess_reply(s, "552 5.3.4 Message size exceeds fixed limit");
        return;
    }
    t = xcalloc(1, sizeof(*t));
    t->env_bytes = sizeof(*t) + strlen(m.addr) + 1 + strlen(m.envid) + 1;
    t->env.sender = xstrdup(m.addr);
    t->env.body = m.body;
    t->env.smtputf8 = m.smtputf8;
    t->env.ret = m.ret;
    t->env.envid = m.envid[0] ? xstrdup(m.envid) : NULL;
    t->env.client_ip = s->ip;
    t->env.client_port = s->port;
    t->env.helo = s->helo;
    s->txn = t;
    sess_reply(s, "250 2.1.0 Ok");
}


/* sess_rcpt_route - 0 when the recipient may be accepted, else a reply was
 * queued: relay control, then reject:/defer: routes.  The bare
 * <Postmaster> (the parser lets no other address lack a domain) is routed
 * like any address but never relay-denied: RFC 5321 4.5.1 says it must be
 * accepted from anyone. */
static int
sess_rcpt_route(struct sess *s, const char *addr)
{
    struct smtpd        *d = s->d;
    struct router_result *res = &d->rres;
    int                   rc;

    rc = router_lookup(d->router, addr, res);
    if (rc != ROUTER_OK) {
        log_warn("route lookup for <%s> failed: %s", addr,
            router_errstr(d->router));
        sess_reply(s, "451 4.3.0 Error: route lookup failed");
        return -1;
    }
    if (!(s->flags & SF_RELAY) && res->match == ROUTER_MATCH_DEFAULT &&
        strchr(addr, '@') != NULL) {
        SESS_REJECT(s, STATUS_REJ_RELAY_DENIED);
        log_ev(LOGL_INFO, "reject", LOG_KVS(SESS_CLIENT(s),
            LKV_S("reason", "relay_denied"), LKV_S("dsn", "5.7.1"),
            LKV_S("from", s->txn->env.sender), LKV_S("to", addr),
            LKV_S("helo", s->helo)),
            "reject: RCPT from [%s]:%u: 554 5.7.1 <%s>: Relay access "
            "denied; from=<%s> to=<%s> helo=<%s>", s->ip, (unsigned)s->port,
            addr, s->txn->env.sender, addr, s->helo ? s->helo : "");
        sess_replyf(s, "554 5.7.1 <%s>: Relay access denied", addr);
        return -1;
    }
    if (res->route.kind == ROUTE_REJECT || res->route.kind == ROUTE_DEFER) {
        char dsn[16];

        SESS_REJECT(s, res->route.kind == ROUTE_REJECT ?
            STATUS_REJ_ROUTE_REJECT : STATUS_REJ_ROUTE_DEFER);
        log_ev(LOGL_INFO, "reject", LOG_KVS(SESS_CLIENT(s),
            LKV_S("reason", res->route.kind == ROUTE_REJECT ?
                "route_reject" : "route_defer"),
            LKV_S("dsn", logfmt_dsn(res->route.text, dsn, sizeof(dsn))),
            LKV_S("from", s->txn->env.sender), LKV_S("to", addr)),
            "reject: RCPT from [%s]:%u: %d %s; to=<%s>", s->ip,
            (unsigned)s->port, res->route.code, res->route.text, addr);
        sess_replyf(s, "%d %s", res->route.code, res->route.text);
        return -1;
    }
    return 0;
}


static void
sess_rcpt(struct sess *s, struct str arg)
{
    struct smtp_rcpt  r;
    struct sess_txn  *t = s->txn;
    struct spool_rcpt *sr;
    const char       *reply;
    size_t            need;

    if (t == NULL) {
        sess_reply(s, "503 5.5.1 Error: need MAIL command");
        return;
    }
    if (t->used_bdat) {
        /* RFC 3030 2: no RCPT once a chunk has been received. */
        sess_reply(s, "503 5.5.1 Error: RCPT not allowed after BDAT");
        return;
    }
    if (smtp_parse_rcpt(arg, t->env.smtputf8, &r, &reply) < 0) {
        sess_reply(s, reply);
        return;
    }
    if (t->env.nrcpt >= (size_t)s->d->cfg->max_recipients) {
        /* Flow control (RFC 5321 4.5.3.1.10): the client sends the rest
         * in another transaction, so this does not count as an error. */
        SESS_REJECT(s, STATUS_REJ_TOO_MANY_RCPTS);
        sess_reply_flow(s, "452 4.5.3 Error: too many recipients");
        return;
    }
    /* limits.max_envelope_size: what this recipient costs in memory (the
     * array may double, hence twice the entry).  Flow control, like 452
     * for max_recipients: the rest can come in another transaction. */
    need = strlen(r.addr) + 1 + (r.orcpt[0] ? strlen(r.orcpt) + 1 : 0) +
        2 * sizeof(*sr);
    if (t->env_bytes + need > s->d->cfg->max_envelope_size) {
        SESS_REJECT(s, STATUS_REJ_TOO_MANY_RCPTS);
        sess_reply_flow(s, "452 4.5.3 Error: too much recipient data");
        return;
    }
    if (sess_rcpt_route(s, r.addr) < 0)
        return;
    t->env_bytes += need;
    if (t->env.nrcpt == t->rcap) {
        t->rcap = t->rcap ? t->rcap * 2 : 4;
        t->env.rcpt = xrealloc(t->env.rcpt, t->rcap * sizeof(*t->env.rcpt));
    }
    sr = &t->env.rcpt[t->env.nrcpt++];
    memset(sr, 0, sizeof(*sr));
    sr->addr = xstrdup(r.addr);
    sr->orcpt = r.orcpt[0] ? xstrdup(r.orcpt) : NULL;
    sr->notify = r.notify;
    sess_reply(s, "250 2.1.5 Ok");
}


static void
sess_data(struct sess *s, struct str arg)
{
    struct sess_txn *t = s->txn;

    if (arg.n > 0) {
        sess_reply(s, "501 5.5.4 Syntax: DATA");
        return;
    }
    if (t == NULL) {
        sess_reply(s, "503 5.5.1 Error: need MAIL command");
        return;
    }
    if (t->env.nrcpt == 0) {
        sess_reply(s, "503 5.5.1 Error: need RCPT command");
        return;
    }
    if (t->used_bdat) {
        sess_reply(s, "503 5.5.1 Error: DATA not allowed after BDAT");
        return;
    }
    if (t->env.body == SMTP_BODY_BINARYMIME) {
        sess_reply(s, "503 5.5.1 Error: BODY=BINARYMIME requires BDAT");
        return;
    }
    if (sess_msg_open(s) != SPOOL_OK) {
        sess_storage_fail(s);
        return;
    }
    smtp_data_init(&t->dp, s->d->cfg->bare_newline_accept);
    sess_reply(s, "354 End data with <CR><LF>.<CR><LF>");
    s->state = SS_DATA;
    ev_timer_start(s->d->loop, &s->timer, s->d->cfg->data_timeout_ms);
}


/* sess_bdat - a chunk follows the command whatever the verdict, so the
 * session always reads exactly its size; the verdict is sent after it. */
static void
sess_bdat(struct sess *s, struct str arg)
{
    struct sess_txn *t = s->txn;
    const char      *reply;
    uint64_t         size;
    int              last;

    if (smtp_parse_bdat(arg, &size, &last, &reply) < 0) {
        sess_reply(s, reply);
        return;
    }
    s->bdat_left = size;
    s->bdat_last = (uint8_t)last;
    s->bdat_err = NULL;
    if (t == NULL)
        s->bdat_err = "503 5.5.1 Error: need MAIL command";
    else if (t->env.nrcpt == 0)
        s->bdat_err = "503 5.5.1 Error: need RCPT command";
    else if (t->msg == NULL && sess_msg_open(s) != SPOOL_OK) {
        s->bdat_err = "452 4.3.1 Insufficient system storage";
        sess_txn_free(s);           /* the transaction failed */
        t = NULL;
    }
    if (t != NULL && s->bdat_err == NULL)
        t->used_bdat = 1;
    s->state = SS_BDAT;
    ev_timer_start(s->d->loop, &s->timer, s->d->cfg->data_timeout_ms);
    if (size == 0)
        sess_bdat_end(s);
}


/* sess_starttls - RFC 3207.  The input behind the command is dropped
 * here: bytes a client pipelined after STARTTLS were sent in clear and
 * must never be read as commands of the TLS session (CVE-2011-0411).  The
 * handshake starts once the 220 is written (sess_write). */
static void
sess_starttls(struct sess *s, struct str arg)
{
    if (arg.n > 0) {
        sess_reply(s, "501 5.5.4 Syntax: STARTTLS");
        return;
    }
    if (s->tp.ssl != NULL) {
        sess_reply(s, "503 5.5.1 Error: TLS already active");
        return;
    }
    if (s->d->tls_ctx == NULL) {
        sess_reply(s, "502 5.5.1 Error: STARTTLS not available");
        return;
    }
    sess_reply(s, "220 2.0.0 Ready to start TLS");
    buf_consume(&s->in, buf_avail(&s->in));
    s->flags &= ~SF_DISCARD;
    s->state = SS_TLS;
}


/* sess_junk - NOOP, RSET, VRFY and HELP cost nothing to send and keep a
 * session alive: past limits.max_junk_commands since the last message the
 * session is closed with 421.  Returns 1 when it was. */
static int
sess_junk(struct sess *s)
{
    char text[300];

    if (++s->njunk <= (uint32_t)s->d->cfg->max_junk_commands)
        return 0;
    log_info("too many junk commands from [%s]:%u", s->ip,
        (unsigned)s->port);
    STATUS_ADD(s->d->st->errors, 1);
    snprintf(text, sizeof(text), "421 4.7.0 %s Error: too many junk "
        "commands", s->d->cfg->hostname);
    sess_close_after(s, text);
    return 1;
}


static void
sess_command(struct sess *s, struct str line, int bare_lf)
{
    const struct config *cfg = s->d->cfg;
    enum smtp_verb       verb;
    struct str           arg;

    if (!cfg->bare_newline_accept &&
        (bare_lf || memchr(line.p, '\r', line.n) != NULL)) {
        sess_reply(s, "550 5.5.2 Error: bare <CR> or <LF> received");
        return;
    }
    if (line.n > SMTP_LINE_MAX) {
        sess_reply(s, "500 5.5.2 Error: line too long");
        return;
    }
    if (smtpd_auth_waiting(s->auth)) {
        sess_auth(s, line, 1);      /* an AUTH exchange's line */
        return;
    }
    verb = smtp_parse_verb(line, &arg);
    if ((unsigned)verb > SMTP_AUTH)
        verb = SMTP_UNKNOWN;
    if (s->ncmd[verb] < UINT16_MAX)
        s->ncmd[verb]++;
    if ((verb == SMTP_NOOP || verb == SMTP_RSET || verb == SMTP_VRFY ||
        verb == SMTP_HELP) && sess_junk(s))
        return;
    switch (verb) {
    case SMTP_EHLO:
        sess_ehlo(s, arg, 1);
        break;
    case SMTP_HELO:
        sess_ehlo(s, arg, 0);
        break;
    case SMTP_MAIL:
        sess_mail(s, arg);
        break;
    case SMTP_RCPT:
        sess_rcpt(s, arg);
        break;
    case SMTP_DATA:
        sess_data(s, arg);
        break;
    case SMTP_BDAT:
        sess_bdat(s, arg);
        break;
    case SMTP_RSET:
        if (arg.n > 0) {
            sess_reply(s, "501 5.5.4 Syntax: RSET");
            break;
        }
        sess_txn_free(s);
        sess_reply(s, "250 2.0.0 Ok");
        break;
    case SMTP_NOOP:
        sess_reply(s, "250 2.0.0 Ok");
        break;
    case SMTP_QUIT:
        sess_close_after(s, "221 2.0.0 Bye");
        break;
    case SMTP_VRFY:
        if (arg.n == 0)
            sess_reply(s, "501 5.5.4 Syntax: VRFY address");
        else
            sess_reply(s, "252 2.5.2 Cannot VRFY user, but will accept "
                "message and attempt delivery");
        break;
    case SMTP_HELP:
        sess_reply(s, "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA BDAT "
            "RSET NOOP QUIT VRFY HELP");
        break;
    case SMTP_STARTTLS:
        sess_starttls(s, arg);
        break;
    case SMTP_AUTH:
        sess_auth(s, arg, 0);
        break;
    default:
        sess_reply(s, "500 5.5.2 Error: command not recognized");
        break;
    }
}


/* --- STARTTLS --------------------------------------------------------- */

/* sess_tls_readable - the session would read now if bytes were there. */
static int
sess_tls_readable(const struct sess *s)
{
    return !(s->flags & SF_WBLOCK) && s->state <= SS_BDAT &&
        buf_avail(&s->out) < SESS_OUT_HIGH;
}


/* sess_tls_kick - decrypted bytes wait in the SSL object and epoll will
 * not tell: read them on the next turn (d->tls_timer, 0 ms). */
static void
sess_tls_kick(struct sess *s)
{
    struct smtpd *d = s->d;

    if ((s->flags & SF_TLSREADY) || !sess_tls_readable(s) ||
        !net_pending(&s->tp))
        return;
    if (d->ntls_ready == d->tls_readycap) {
        d->tls_readycap = d->tls_readycap ? d->tls_readycap * 2 : 16;
        d->tls_ready = xrealloc(d->tls_ready,
            d->tls_readycap * sizeof(*d->tls_ready));
    }
    d->tls_ready[d->ntls_ready++] = s;
    s->flags |= SF_TLSREADY;
    if (!ev_timer_active(&d->tls_timer))
        ev_timer_start(d->loop, &d->tls_timer, 0);
}


static void
sess_tls_ready_del(struct sess *s)
{
    struct smtpd *d = s->d;
    size_t         i;

    for (i = 0; i < d->ntls_ready; i++)
        if (d->tls_ready[i] == s)
            d->tls_ready[i] = NULL;
    s->flags &= ~SF_TLSREADY;
}


/* sess_tls_ready_run - one read for each session queued before this call;
 * those it queues again (still more pending) wait for the next turn, so
 * one busy TLS client cannot starve the others. */
static void
sess_tls_ready_run(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct smtpd *d = arg;
    struct sess   *s;
    size_t         i, n = d->ntls_ready;

    (void)t;
    for (i = 0; i < n; i++) {
        s = d->tls_ready[i];        /* re-read: the array may move */
        d->tls_ready[i] = NULL;
        if (s == NULL)
            continue;
        s->flags &= ~SF_TLSREADY;
        if (sess_tls_readable(s))
            sess_read(s);
    }
    memmove(d->tls_ready, d->tls_ready + n,
        (d->ntls_ready - n) * sizeof(*d->tls_ready));
    d->ntls_ready -= n;
    if (d->ntls_ready > 0)
        ev_timer_start(loop, &d->tls_timer, 0);
}


/* sess_tls_reset - the handshake is done: the session starts over (RFC
 * 3207 4.2: forget everything learnt in clear). */
static void
sess_tls_reset(struct sess *s)
{
    struct smtpd *d = s->d;
    int            bits, alg_bits;
    const char    *cipher = net_tls_cipher(&s->tp, &bits, &alg_bits);

    STATUS_ADD(d->st->ops.tls_ok, 1);
    log_ev(LOGL_INFO, "tls", LOG_KVS(SESS_CLIENT(s),
        LKV_S("tls_version", net_tls_version(&s->tp)),
        LKV_S("cipher", cipher), LKV_I("bits", bits),
        LKV_I("resumed", net_tls_resumed(&s->tp))),
        "STARTTLS from [%s]:%u: %s %s (%d bits)%s", s->ip,
        (unsigned)s->port, net_tls_version(&s->tp), cipher, bits,
        net_tls_resumed(&s->tp) ? ", session resumed" : "");
    sess_txn_free(s);
    free(s->helo);
    s->helo = NULL;
    s->flags &= ~(SF_ESMTP | SF_DISCARD);
    s->state = SS_CMD;
    s->active_ms = ev_now(d->loop);
    ev_timer_start(d->loop, &s->timer, d->cfg->command_timeout_ms);
    sess_watch(s, EV_READ);
    if (s->greet_tls) {
        s->greet_tls = 0;
        sess_replyf(s, "220 %s ESMTP mtad", d->cfg->hostname);
    }
    sess_tls_kick(s);
    if (d->stopping)
        sess_stop_check(s);
}


/* sess_tls_step - drive SSL_accept(); -1 when the session was freed. */
static int
sess_tls_step(struct sess *s)
{
    char err[256];
    int  rc;

    err[0] = '\0';
    rc = net_tls_handshake(&s->tp, err, sizeof(err));
    if (rc == MTA_AGAIN) {
        sess_watch(s, s->tp.want == NET_WANT_WRITE ? EV_WRITE
                                                         : EV_READ);
        return 0;
    }
    if (rc < 0) {
        STATUS_ADD(s->d->st->ops.tls_failed, 1);
        log_ev(LOGL_INFO, "tls_failed", LOG_KVS(SESS_CLIENT(s),
            LKV_S("error", err)),
            "STARTTLS from [%s]:%u failed: %s", s->ip,
            (unsigned)s->port, err);
        STATUS_ADD(s->d->st->errors, 1);
        sess_free(s, "TLS handshake failed");
        return -1;
    }
    sess_tls_reset(s);
    return 0;
}


/* sess_tls_begin - the 220 is written: put TLS on the socket.  Anything
 * that arrived in clear since is left on the socket for SSL_accept(),
 * which rejects what is not a ClientHello. */
static int
sess_tls_begin(struct sess *s)
{
    char err[256];

    s->in.off = s->in.len = 0;
    buf_pool_give(&s->in);
    if (net_tls_start(&s->tp, s->d->tls_ctx, err, sizeof(err)) < 0) {
        log_warn("STARTTLS from [%s]:%u: %s", s->ip, (unsigned)s->port,
            err);
        sess_free(s, "TLS setup failed");
        return -1;
    }
    s->state = SS_HANDSHAKE;
    return sess_tls_step(s);
}


/* --- input ------------------------------------------------------------ */

/* sess_cmd_step - run one command line from the buffer; 0 when more input
 * is needed. */
static int
sess_cmd_step(struct sess *s)
{
    struct str line;
    char      *lf;
    int        bare_lf;

    if (s->flags & SF_DISCARD) {
        /* The tail of an over-long line: drop it up to its LF. */
        lf = memchr(buf_head(&s->in), '\n', buf_avail(&s->in));
        if (lf == NULL) {
            buf_consume(&s->in, buf_avail(&s->in));
            return 0;
        }
        buf_consume(&s->in, (size_t)(lf - buf_head(&s->in)) + 1);
        s->flags &= ~SF_DISCARD;
        return 1;
    }
    if (buf_getline(&s->in, &line, &bare_lf) < 0) {
        /* +1: a line of exactly SMTP_LINE_MAX may wait for its LF. */
        if (buf_avail(&s->in) > SMTP_LINE_MAX + 1) {
            sess_reply(s, "500 5.5.2 Error: line too long");
            buf_consume(&s->in, buf_avail(&s->in));
            s->flags |= SF_DISCARD;
        }
        return 0;
    }
    sess_command(s, line, bare_lf);
    return 1;
}


/* sess_data_step - feed DATA content to the byte machine. */
static int
sess_data_step(struct sess *s)
{
    size_t used = 0;
    int    r;

    if (buf_avail(&s->in) == 0)
        return 0;
    r = smtp_data_feed(&s->txn->dp, buf_head(&s->in), buf_avail(&s->in),
        &used, sess_emit, s);
    buf_consume(&s->in, r == 1 ? used : buf_avail(&s->in));
    if (r == 1)
        sess_data_end(s);
    return 1;
}


/* sess_bdat_step - copy (or drop) up to the rest of the chunk. */
static int
sess_bdat_step(struct sess *s)
{
    size_t n = buf_avail(&s->in);

    if (n == 0)
        return 0;
    if (n > s->bdat_left)
        n = (size_t)s->bdat_left;
    if (s->bdat_err == NULL) {
        struct sess_txn *t = s->txn;

        /* limits.bare_newline holds for BDAT too (binary bodies aside):
         * a stored bare CR or LF could end the data early at a lenient
         * next hop that gets the message by DATA. */
        if (!s->d->cfg->bare_newline_accept &&
            t->env.body != SMTP_BODY_BINARYMIME &&
            smtp_data_bare(&t->bdat_cr, buf_head(&s->in), n))
            t->bdat_bare = 1;
        (void)sess_emit(s, buf_head(&s->in), n);
    }
    buf_consume(&s->in, n);
    s->bdat_left -= n;
    if (s->bdat_left == 0)
        sess_bdat_end(s);
    return 1;
}


/* sess_process - run everything the buffer holds (PIPELINING), stopping
 * while a message waits for its commit or when the session is closing. */
static void
sess_process(struct sess *s)
{
    int more = 1;

    while (more && s->in.data != NULL) {
        switch (s->state) {
        case SS_CMD:
            /* A client that pipelines without reading its replies: pause
             * here; the flush resumes once the replies are written. */
            more = buf_avail(&s->out) < SESS_OUT_HIGH && sess_cmd_step(s);
            break;
        case SS_DATA:
            more = sess_data_step(s);
            break;
        case SS_BDAT:
            more = sess_bdat_step(s);
            break;
        default:
            more = 0;               /* SS_COMMIT, SS_CLOSING */
            break;
        }
    }
    sess_in_release(s);
    if (s->d->stopping)
        sess_stop_check(s);
    if (s->tp.ssl != NULL)
        sess_tls_kick(s);
}


/* sess_read - one recv into the pooled buffer, as large as its room. */
static void
sess_read(struct sess *s)
{
    struct smtpd *d = s->d;
    ssize_t        n;

    buf_pool_take(&s->in);
    if (buf_room(&s->in) == 0)
        buf_compact(&s->in);
    if (buf_room(&s->in) == 0) {
        /* Cannot happen (lines over SMTP_LINE_MAX are discarded), but never
         * spin on a full buffer. */
        sess_free(s, "input overflow");
        return;
    }
    n = net_read(&s->tp, buf_tail(&s->in), buf_room(&s->in));
    if (n == MTA_AGAIN) {
        sess_in_release(s);
        if (s->tp.ssl != NULL)      /* a TLS read may need to write first */
            sess_watch(s, s->tp.want == NET_WANT_WRITE ? EV_WRITE
                                                             : EV_READ);
        return;
    }
    if (n <= 0) {
        sess_free(s, n == 0 ? NULL : strerror(errno));
        return;
    }
    buf_produce(&s->in, (size_t)n);
    s->active_ms = ev_now(d->loop);
    STATUS_ADD(d->st->bytes_in, (uint64_t)n);
    ev_timer_start(d->loop, &s->timer,
        s->state == SS_DATA || s->state == SS_BDAT ?
        d->cfg->data_timeout_ms : d->cfg->command_timeout_ms);
    sess_process(s);
}


/* sess_write - send what the out buffer holds in one write.  Returns -1
 * when the session was freed. */
static int
sess_write(struct sess *s)
{
    ssize_t n = 0;

    if (buf_avail(&s->out) > 0) {
        n = net_write(&s->tp, buf_head(&s->out), buf_avail(&s->out));
        if (n < 0 && n != MTA_AGAIN) {
            sess_free(s, strerror(errno));
            return -1;
        }
        if (n > 0)
            buf_consume(&s->out, (size_t)n);
    }
    if (buf_avail(&s->out) > 0) {
        /* Backpressure: stop reading until the client takes its replies. */
        s->flags |= SF_WBLOCK;
        sess_watch(s, s->tp.ssl != NULL &&
            s->tp.want == NET_WANT_READ ? EV_READ : EV_WRITE);
        return 0;
    }
    s->flags &= ~SF_WBLOCK;
    if (n > 0)
        s->active_ms = ev_now(s->d->loop);
    sess_out_give(s);
    if (s->state == SS_CLOSING) {
        sess_free(s, NULL);
        return -1;
    }
    if (s->state == SS_TLS)
        return sess_tls_begin(s);   /* the 220 is out: handshake */
    sess_watch(s, EV_READ);
    if (s->state == SS_CMD && s->in.data != NULL && buf_avail(&s->in) > 0)
        sess_process(s);            /* commands paused at SESS_OUT_HIGH */
    else if (s->tp.ssl != NULL)
        sess_tls_kick(s);
    return 0;
}


static void
sess_on_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct sess *s = arg;

    (void)loop;
    (void)fd;
    /* EV_READ with SF_WBLOCK and EV_WRITE without it are only watched
     * for a TLS engine that waits for the other direction. */
    if (s->flags & SF_WBLOCK) {
        if (events & (EV_WRITE | EV_READ | EV_ERROR))
            (void)sess_write(s);
        return;
    }
    if (s->state >= SS_COMMIT) {
        if (s->state == SS_HANDSHAKE)
            (void)sess_tls_step(s);
        return;                     /* others are resumed by the hooks */
    }
    if (events & (EV_READ | EV_WRITE | EV_ERROR))
        sess_read(s);
}


static void
sess_on_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct sess *s = arg;
    char         text[300];

    (void)t;
    if (s->state == SS_CLOSING) {
        sess_free(s, "timeout while closing");
        return;
    }
    if (s->state == SS_TLS || s->state == SS_HANDSHAKE) {
        /* No clear-text 421 in the middle of a handshake. */
        log_info("STARTTLS from [%s]:%u: timeout", s->ip, (unsigned)s->port);
        sess_free(s, "timeout during TLS handshake");
        return;
    }
    if (s->state == SS_COMMIT)
        return;                     /* the commit hook answers this turn */
    if (s->d->stopping && sess_stop_idle(s)) {
        sess_stop_check(s);         /* closes, or re-arms for the rest */
        return;
    }
    log_info("timeout after %s from [%s]:%u",
        s->state == SS_DATA || s->state == SS_BDAT ? "DATA" : "command",
        s->ip, (unsigned)s->port);
    snprintf(text, sizeof(text), "421 4.4.2 %s Error: timeout exceeded",
        s->d->cfg->hostname);
    sess_close_after(s, text);
    /* Bound the time a client that does not read may hold us. */
    ev_timer_start(loop, &s->timer, 5000);
}


/* sess_on_life - limits.session_lifetime: however busy the client keeps
 * it (a byte at a time restarts the command timeout), a session ends at
 * this age; a message in progress is aborted, one being committed is
 * answered first. */
static void
sess_on_life(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct sess *s = arg;
    char         text[300];

    (void)t;
    if (s->state == SS_CLOSING)
        return;                     /* its own timer bounds the close */
    if (s->state == SS_COMMIT) {
        ev_timer_start(loop, &s->life, 0);  /* the hook answers this turn */
        return;
    }
    log_info("session lifetime exceeded from [%s]:%u", s->ip,
        (unsigned)s->port);
    if (s->state == SS_TLS || s->state == SS_HANDSHAKE) {
        sess_free(s, "session lifetime exceeded");
        return;
    }
    snprintf(text, sizeof(text), "421 4.4.2 %s Error: session lifetime "
        "exceeded", s->d->cfg->hostname);
    sess_close_after(s, text);
    ev_timer_start(loop, &s->timer, 5000);
}


/* --- life cycle ------------------------------------------------------- */

static void
sess_free(struct sess *s, const char *why)
{
    union sess_peer peer;
    struct smtpd *d = s->d;
    char           counts[256];
    size_t         off = 0, total = 0;
    unsigned       i;

    for (i = 1; i <= SMTP_AUTH; i++) {
        total += s->ncmd[i];
        if (s->ncmd[i] > 0 && off < sizeof(counts))
            off += (size_t)snprintf(counts + off, sizeof(counts) - off,
                "%s=%u ", sess_verb_name[i], (unsigned)s->ncmd[i]);
    }
    total += s->ncmd[0];
    if (s->ncmd[0] > 0 && off < sizeof(counts))
        off += (size_t)snprintf(counts + off, sizeof(counts) - off,
            "unknown=%u ", (unsigned)s->ncmd[0]);
    if (off >= sizeof(counts))
        off = sizeof(counts) - 1;
    counts[off] = '\0';
    log_ev(LOGL_INFO, "disconnect", LOG_KVS(SESS_CLIENT(s),
        LKV_I("commands", total), LKV_S("reason", why)),
        "disconnect from [%s]:%u %scommands=%zu%s%s", s->ip,
        (unsigned)s->port, counts, total, why ? " reason=" : "",
        why ? why : "");

    sess_pending_del(s);
    if (s->flags & SF_TLSREADY)
        sess_tls_ready_del(s);
    sess_txn_free(s);               /* aborts an unfinished message */
    ev_timer_stop(d->loop, &s->timer);
    ev_timer_stop(d->loop, &s->life);
    ev_unwatch(d->loop, s->tp.fd);
    net_close(&s->tp);
    s->in.off = s->in.len = 0;
    buf_pool_give(&s->in);
    sess_out_give(s);
    free(s->helo);
    smtpd_auth_sess_free(s->auth);
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        d->sessions = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    STATUS_SUB(d->st->conns_cur, 1);
    peer = s->peer;                 /* gone() is the last act */
    free(s);
    d->gone(d->arg, &peer.sa);
}


/* sess_peer - copy the address, unmapping v4-mapped IPv6 so that relay
 * networks and per-IP counts see plain IPv4. */
static void
sess_peer(struct sess *s, const struct sockaddr *sa, socklen_t salen)
{
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

    memset(&s->peer, 0, sizeof(s->peer));
    if (sa->sa_family == AF_INET6 && salen >= sizeof(*s6) &&
        IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
        s->peer.sin.sin_family = AF_INET;
        s->peer.sin.sin_port = s6->sin6_port;
        memcpy(&s->peer.sin.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
    } else if (sa->sa_family == AF_INET6 && salen >= sizeof(*s6)) {
        s->peer.sin6 = *s6;
    } else if (sa->sa_family == AF_INET &&
        salen >= sizeof(struct sockaddr_in)) {
        s->peer.sin = *(const struct sockaddr_in *)sa;
    } else {
        s->peer.sa.sa_family = AF_UNSPEC;
    }
    if (s->peer.sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &s->peer.sin.sin_addr, s->ip, sizeof(s->ip));
        s->port = ntohs(s->peer.sin.sin_port);
    } else if (s->peer.sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &s->peer.sin6.sin6_addr, s->ip, sizeof(s->ip));
        s->port = ntohs(s->peer.sin6.sin6_port);
    } else {
        util_strlcpy(s->ip, "unknown", sizeof(s->ip));
    }
}


void
smtpd_accept(struct smtpd *d, int fd, const struct sockaddr *sa,
    socklen_t salen, const struct config_listen *l)
{
    const struct config *cfg = d->cfg;
    struct sess         *s = xcalloc(1, sizeof(*s));
    union sess_peer      peer;
    size_t               i;

    s->d = d;
    net_init(&s->tp, fd);
    sess_peer(s, sa, salen);
    s->role = l != NULL ? (uint8_t)l->role : CONFIG_ROLE_MX;
    for (i = 0; i < cfg->nallow_networks; i++)
        if (util_cidr_match(&cfg->allow_networks[i], &s->peer.sa)) {
            s->flags |= SF_RELAY;
            break;
        }
    for (i = 0; i < cfg->ndkim_sign_networks; i++)
        if (util_cidr_match(&cfg->dkim_sign_networks[i], &s->peer.sa)) {
            s->flags |= SF_SIGN;
            break;
        }
    if (ev_watch(d->loop, fd, EV_READ, sess_on_io, s) < 0) {
        log_warn("epoll_ctl for %s: %s", s->ip, strerror(errno));
        net_close(&s->tp);
        peer = s->peer;
        free(s);
        d->gone(d->arg, &peer.sa);
        return;
    }
    s->watched = EV_READ;
    s->next = d->sessions;
    if (d->sessions != NULL)
        d->sessions->prev = s;
    d->sessions = s;
    STATUS_ADD(d->st->conns_cur, 1);
    STATUS_ADD(d->st->conns_total, 1);
    ev_timer_init(&s->timer, sess_on_timer, s);
    ev_timer_start(d->loop, &s->timer, cfg->command_timeout_ms);
    ev_timer_init(&s->life, sess_on_life, s);
    ev_timer_start(d->loop, &s->life, cfg->session_lifetime_ms);
    s->active_ms = ev_now(d->loop);
    log_ev(LOGL_INFO, "connect", LOG_KVS(SESS_CLIENT(s)),
        "connect from [%s]:%u", s->ip, (unsigned)s->port);
    if (l != NULL && l->tls_implicit && d->tls_ctx != NULL) {
        /* RFC 8314: TLS from the first byte, the 220 inside it */
        s->greet_tls = 1;
        if (sess_tls_begin(s) < 0)
            return;
    } else {
        sess_out_take(s);
        buf_printf(&s->out, "220 %s ESMTP mtad\r\n", cfg->hostname);
        sess_pending_add(s);
    }
    if (d->stopping)
        sess_stop_check(s);         /* accepted while draining the backlog */
}


/* sess_commit_hook - the group commit (spool.fsync): one syncfs for every
 * message finished this turn, then their 250s, then the input they had
 * pipelined behind the dot.  Runs before sess_flush_hook. */
static void
sess_commit_hook(struct ev_loop *loop, void *arg)
{
    struct smtpd     *d = arg;
    struct sess      **ss;
    struct spool_msg **ms;
    int               *rcs;
    uint64_t          *sizes;
    size_t             i, n;

    (void)loop;
    while (d->ncommit > 0) {
        n = d->ncommit;
        ss = xmalloc(n * sizeof(*ss));
        ms = xmalloc(n * sizeof(*ms));
        rcs = xcalloc(n, sizeof(*rcs));
        sizes = xmalloc(n * sizeof(*sizes));
        for (i = 0; i < n; i++) {
            ss[i] = d->commit[i];
            ss[i]->flags &= ~SF_COMMITQ;
            ms[i] = ss[i]->txn->msg;
            sizes[i] = spool_msg_size(ms[i]);
        }
        d->ncommit = 0;
        (void)spool_commit_batch(d->spool, ms, n, rcs);
        for (i = 0; i < n; i++) {
            struct sess *s = ss[i];

            s->state = SS_CMD;
            if (rcs[i] == SPOOL_OK) {
                sess_queued(s, sizes[i]);
            } else {
                sess_spool_fail(s, "spool_commit", rcs[i]);
                sess_storage_fail(s);
            }
        }
        /* Resume after every reply is queued: a resumed session may finish
         * another message and land in d->commit for the next round. */
        for (i = 0; i < n; i++)
            if (ss[i]->state == SS_CMD)
                sess_process(ss[i]);
        free(ss);
        free(ms);
        free(rcs);
        free(sizes);
    }
}


/* sess_flush_hook - one write per session with replies queued this turn. */
static void
sess_flush_hook(struct ev_loop *loop, void *arg)
{
    struct smtpd *d = arg;
    struct sess   *s;

    do {
        /* A write can resume commands paused at SESS_OUT_HIGH; if they
         * finish a message, its group commit must not wait for a wakeup. */
        sess_commit_hook(loop, d);
        while ((s = d->pending) != NULL) {
            sess_pending_del(s);
            (void)sess_write(s);
        }
    } while (d->ncommit > 0);
}


/* smtpd_stop_begin - "stop" arrived: check every session once; from now
 * on each one is checked when it goes quiet (sess_process, its timer). */
void
smtpd_stop_begin(struct smtpd *d)
{
    struct sess *s, *next;

    d->stopping = 1;
    for (s = d->sessions; s != NULL; s = next) {
        next = s->next;
        sess_stop_check(s);
    }
}


/* smtpd_stop_all - the stop deadline: every session is told 421 now, also
 * one in the middle of a message (aborted when it is freed).  One waiting
 * for the group commit is answered by the hook this turn and told then. */
void
smtpd_stop_all(struct smtpd *d, uint64_t linger_ms)
{
    struct sess *s, *next;

    d->stopping = 1;
    d->stop_final = 1;
    for (s = d->sessions; s != NULL; s = next) {
        next = s->next;
        if (s->state == SS_COMMIT)
            continue;
        if (s->state == SS_TLS || s->state == SS_HANDSHAKE) {
            ev_timer_start(d->loop, &s->timer, 0);  /* closed, no 421 */
            continue;
        }
        if (s->state != SS_CLOSING)
            sess_shutdown(s);
        ev_timer_start(d->loop, &s->timer, linger_ms);
    }
}


struct smtpd *
smtpd_new(const struct smtpd_env *env)
{
    struct smtpd *d = xcalloc(1, sizeof(*d));

    d->loop = env->loop;
    d->cfg = env->cfg;
    d->spool = env->spool;
    d->router = env->router;
    d->deliver = env->deliver;
    d->st = env->st;
    d->tls_ctx = env->tls_ctx;
    d->dkim = env->dkim;
    d->auth = env->auth;
    d->gone = env->gone;
    d->arg = env->arg;
    ev_timer_init(&d->tls_timer, sess_tls_ready_run, d);
    /* Order matters: the group commit queues its 250s before the flush. */
    ev_before_sleep(d->loop, sess_commit_hook, d);
    ev_before_sleep(d->loop, sess_flush_hook, d);
    return d;
}


void
smtpd_free(struct smtpd *d)
{
    size_t i;

    if (d == NULL)
        return;
    while (d->sessions != NULL)
        sess_free(d->sessions, "worker exit");
    ev_timer_stop(d->loop, &d->tls_timer);
    free(d->tls_ready);
    for (i = 0; i < d->nout_spare; i++)
        free(d->out_spare[i]);
    free(d->out_spare);
    free(d->commit);
    free(d);
}
