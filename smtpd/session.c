/*
 * session.c - the inbound ESMTP session: a per-connection state machine
 * driven by the worker's event loop.
 *
 * PURPOSE   RFC 5321 with PIPELINING, SIZE, 8BITMIME, SMTPUTF8, CHUNKING
 *           (BDAT), ENHANCEDSTATUSCODES, DSN and LIMITS (RFC 9422).  Every complete command in
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
 * FILES     This file: the life cycle, I/O, reply buffers, timers and
 *           stop handling.  session_cmd.c: the command table and the
 *           commands outside a transaction; session_msg.c: MAIL, RCPT,
 *           DATA, BDAT and the spool writer; session_commit.c: the
 *           commit and the 250 (COMMIT there);
 *           session_tls.c: STARTTLS; session_dkim.c: signing.  State
 *           changes go through sess_enter() (smtpd_int.h).
 * STOP      Graceful stop (smtpd.h STOP): sessions go on as usual,
 *           transactions included; only one between transactions (no
 *           MAIL, no unparsed input) on which nothing was read or written
 *           for SMTPD_STOP_GRACE_MS is told "421 4.3.2" and closed.  Each
 *           session checks itself (sess_process, its timer), so a stop costs
 *           nothing per turn.
 * LIMITS    A session ends at limits.session_lifetime however
 *           busy the client keeps it (its own timer, from accept); more
 *           than limits.max_junk_commands NOOP/RSET/VRFY/HELP since the
 *           last accepted message end it too (421; session_cmd.c); the
 *           transaction's limits are in session_msg.c.
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

#define SESS_OUT_CAP    4096        /* recycled reply buffer size */
#define SESS_OUT_SPARE  256         /* recycled reply buffers kept */

static void sess_on_io(struct ev_loop *loop, int fd, unsigned events,
            void *arg);


/* --- lists and buffers ------------------------------------------------ */

void
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


/* sess_out_take - give the session a reply buffer, recycled if possible. */
void
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


void
sess_watch(struct sess *s, unsigned events)
{
    if (s->watched == events)
        return;
    if (ev_watch(s->d->loop, s->tp.fd, events, sess_on_io, s) == 0)
        s->watched = events;
}


/* sess_enter - the one place a session changes state.  Command mode
 * starts the command timeout, except when the group commit is done (the
 * end of data started it already); a message's content starts the data
 * timeout; the other states keep the timer they have (their callers arm
 * what they need). */
void
sess_enter(struct sess *s, enum sess_state st)
{
    const struct config *cfg = s->d->cfg;
    enum sess_state      from = (enum sess_state)s->state;

    s->state = (uint8_t)st;
    switch (st) {
    case SS_CMD:
        if (from != SS_COMMIT)
            ev_timer_start(s->d->loop, &s->timer, cfg->command_timeout_ms);
        break;
    case SS_DATA:
    case SS_BDAT:
        ev_timer_start(s->d->loop, &s->timer, cfg->data_timeout_ms);
        break;
    default:
        break;
    }
}


/* --- replies ---------------------------------------------------------- */

/* sess_error - count a 4xx/5xx reply (cls: its first digit); at
 * max_errors the session ends. */
static void
sess_error(struct sess *s, char cls)
{
    const struct config *cfg = s->d->cfg;

    STATUS_ADD(s->d->st->errors, 1);
    if (cls == '5' && cfg->ban_errors > 0)
        sess_ban_note(s);           /* limits.ban (session_ban.c) */
    if (s->nerrors < UINT16_MAX)
        s->nerrors++;
    if ((int)s->nerrors < cfg->max_errors || s->state == SS_CLOSING)
        return;
    buf_printf(&s->out, "421 4.7.0 %s Error: too many errors\r\n",
        cfg->hostname);
    SESS_REJECT(s, STATUS_REJ_TOO_MANY_ERRORS);
    log_ev(LOGL_INFO, "reject", LOG_KVS(SESS_CLIENT(s),
        LKV_S("reason", "too_many_errors"), LKV_S("dsn", "4.7.0")),
        "too many errors from [%s]:%u after %u errors; session=%s", s->ip,
        (unsigned)s->port, (unsigned)s->nerrors, s->sid);
    sess_enter(s, SS_CLOSING);
}


/* sess_reply - queue one reply line (text without CRLF). */
void
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
        sess_error(s, text[0]);
}


/* sess_reply_flow - a 4xx that is flow control, not a client error: not
 * counted toward max_errors. */
void
sess_reply_flow(struct sess *s, const char *text)
{
    sess_out_take(s);
    buf_printf(&s->out, "%s\r\n", text);
    sess_pending_add(s);
}

void
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
void
sess_close_after(struct sess *s, const char *text)
{
    sess_out_take(s);
    buf_printf(&s->out, "%s\r\n", text);
    sess_pending_add(s);
    sess_enter(s, SS_CLOSING);
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
void
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


/* --- input ------------------------------------------------------------ */

/* sess_cmd_step - run one command line from the buffer: 0, or MTA_AGAIN
 * when more input is needed. */
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
            return MTA_AGAIN;
        }
        buf_consume(&s->in, (size_t)(lf - buf_head(&s->in)) + 1);
        s->flags &= ~SF_DISCARD;
        return 0;
    }
    if (buf_getline(&s->in, &line, &bare_lf) < 0) {
        /* +1: a line of exactly SMTP_LINE_MAX may wait for its LF. */
        if (buf_avail(&s->in) > SMTP_LINE_MAX + 1) {
            sess_reply(s, "500 5.5.2 Error: line too long");
            buf_consume(&s->in, buf_avail(&s->in));
            s->flags |= SF_DISCARD;
        }
        return MTA_AGAIN;
    }
    sess_command(s, line, bare_lf);
    return 0;
}


/* sess_process - run everything the buffer holds (PIPELINING), stopping
 * while a message waits for its commit or when the session is closing. */
void
sess_process(struct sess *s)
{
    int more = 1;

    while (more && s->in.data != NULL) {
        switch (s->state) {
        case SS_CMD:
            /* A client that pipelines without reading its replies: pause
             * here; the flush resumes once the replies are written. */
            more = buf_avail(&s->out) < SESS_OUT_HIGH &&
                sess_cmd_step(s) == 0;
            break;
        case SS_DATA:
            more = sess_data_step(s) == 0;
            break;
        case SS_BDAT:
            more = sess_bdat_step(s) == 0;
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
void
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


/* sess_push - one write of what is queued, at once: a 250 after the
 * commit must not wait behind the rest of the turn (other sessions, the
 * delivery it hands the message to, log batches).
 * Nothing else: s stays pending, so the flush hook's sess_write() does
 * the bookkeeping, retries what the socket did not take, and frees s on
 * an error; s is never freed here (the caller is inside sess_process). */
void
sess_push(struct sess *s)
{
    ssize_t n;

    if (buf_avail(&s->out) == 0 || (s->flags & SF_WBLOCK))
        return;
    n = net_write(&s->tp, buf_head(&s->out), buf_avail(&s->out));
    if (n > 0) {
        buf_consume(&s->out, (size_t)n);
        s->active_ms = ev_now(s->d->loop);
    }
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
    /* held or waiting for the sync off the loop: nothing is read, and
     * the level-triggered loop must not report the input meanwhile */
    sess_watch(s, s->state == SS_AUTH_HOLD || s->state == SS_AUTH_WAIT ||
        s->state == SS_MILTER || (s->flags & SF_SYNCQ) ? 0 : EV_READ);
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
    if (s->state == SS_SCREEN) {
        sess_screen_io(s, events);
        return;
    }
    if (s->state >= SS_COMMIT) {
        if (s->state == SS_HANDSHAKE)
            (void)sess_tls_step(s);
        else if (s->state == SS_AUTH_HOLD && (events & EV_ERROR))
            sess_free(s, "connection lost during the AUTH delay");
        else if (s->state == SS_AUTH_WAIT && (events & EV_ERROR))
            sess_free(s, "connection lost during the AUTH check");
        else if (s->state == SS_MILTER && (events & EV_ERROR))
            sess_free(s, "connection lost waiting for the milters");
        else if (s->state == SS_MILTER)
            sess_watch(s, 0);       /* input waits for the verdict */
        else if ((s->flags & SF_SYNCQ) && (events & EV_ERROR))
            /* reset while its sync runs: epoll reports ERR/HUP even with
             * no events watched, every turn until the fd goes, so keep it
             * and the loop spins.  The commit goes on without it (the
             * message is in queue/; the log says its client left). */
            sess_free(s, "connection lost during the commit");
        else if (s->flags & SF_SYNCQ)
            sess_watch(s, 0);       /* input while its sync runs: the loop
                                     * is level-triggered, it would spin */
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
    if (s->state == SS_AUTH_HOLD) {
        sess_auth_release(s);       /* the delay, not a timeout */
        return;
    }
    if (s->state == SS_SCREEN) {
        sess_screen_timer(s);       /* the pause, not a timeout */
        return;
    }
    if (s->state == SS_TLS || s->state == SS_HANDSHAKE) {
        /* No clear-text 421 in the middle of a handshake. */
        SESS_LOG_INFO(s, "STARTTLS from [%s]:%u: timeout; session=%s",
            s->ip, (unsigned)s->port, s->sid);
        sess_free(s, "timeout during TLS handshake");
        return;
    }
    if (s->state == SS_COMMIT || s->state == SS_MILTER) {
        /* the commit hook answers this turn; a sync off the loop may take
         * longer, as the milters may (their own timeouts bound them):
         * the command timeout starts again for after the answer */
        if ((s->flags & SF_SYNCQ) || s->state == SS_MILTER)
            ev_timer_start(loop, &s->timer, s->d->cfg->command_timeout_ms);
        return;
    }
    if (s->d->stopping && sess_stop_idle(s)) {
        sess_stop_check(s);         /* closes, or re-arms for the rest */
        return;
    }
    SESS_LOG_INFO(s, "timeout after %s from [%s]:%u; session=%s",
        s->state == SS_DATA || s->state == SS_BDAT ? "DATA" : "command",
        s->ip, (unsigned)s->port, s->sid);
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
    if (s->state == SS_COMMIT || s->state == SS_MILTER) {
        /* the hook answers this turn; a sync off the loop, soon; the
         * milters within their timeouts */
        ev_timer_start(loop, &s->life, (s->flags & SF_SYNCQ) ? 10 :
            s->state == SS_MILTER ? 1000 : 0);
        return;
    }
    SESS_LOG_INFO(s, "session lifetime exceeded from [%s]:%u; session=%s",
        s->ip, (unsigned)s->port, s->sid);
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

/* sess_sid_next - a new session id into sid: 16 lower-case hex digits,
 * 11 of the wall-clock millisecond since the epoch, 2 of the worker's
 * slot, 3 of a count within that millisecond.  Unique without a shared
 * counter, and across days (mtactl trace joins records by it over a log
 * and its rotated predecessor): workers alive at once hold different
 * slots; within a worker (millisecond, count) only grows (the 4097th
 * session of a millisecond borrows the next one, a rate accept() cannot
 * reach, so ids never run ahead of the clock); a worker that takes the
 * slot of a dead one is forked after the master reaped it and starts
 * milliseconds later (spool, routes, TLS), so its ids are later than the
 * dead one's.  A wall clock set back can repeat ids, as it repeats log
 * times. */
static void
sess_sid_next(struct smtpd *d, char *sid)
{
    static const char hex[] = "0123456789abcdef";
    uint64_t          now = util_wall_ms(), v;
    int               i;

    if (now > d->sid_ms) {
        d->sid_ms = now;
        d->sid_count = 0;
    } else if (++d->sid_count > 0xfffu) {
        d->sid_ms++;
        d->sid_count = 0;
    }
    v = d->sid_ms << 20 |
        (uint64_t)(d->sid_slot & 0xffu) << 12 | d->sid_count;
    for (i = SESS_SID_SIZE - 2; i >= 0; i--, v >>= 4)
        sid[i] = hex[v & 15];
    sid[SESS_SID_SIZE - 1] = '\0';
}


void
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
                "%s=%u ", sess_cmd_name((enum smtp_verb)i),
                (unsigned)s->ncmd[i]);
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
        "disconnect from [%s]:%u session=%s %scommands=%zu%s%s", s->ip,
        (unsigned)s->port, s->sid, counts, total, why ? " reason=" : "",
        why ? why : "");

    sess_pending_del(s);
    if (s->flags & SF_TLSREADY)
        sess_tls_ready_del(s);
    sess_txn_free(s);               /* aborts an unfinished message */
    ev_timer_stop(d->loop, &s->timer);
    ev_timer_stop(d->loop, &s->life);
    /* closed at once, and a worker's session socket is in no other
     * process: close() leaves the epoll set by itself */
    ev_forget(d->loop, s->tp.fd);
    net_close(&s->tp);
    s->in.off = s->in.len = 0;
    buf_pool_give(&s->in);
    sess_out_give(s);
    free(s->helo);
    smtpd_auth_cancel(d, s->auth);  /* its hash's answer is dropped */
    smtpd_auth_sess_free(s->auth);
    sess_screen_free(s);
    sess_milter_free(s);
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


/* sess_net_flags - what the client's address alone allows: relay
 * (relay.allow_networks) and DKIM signing (dkim.sign_networks). */
unsigned
sess_net_flags(const struct sess *s)
{
    const struct config *cfg = s->d->cfg;
    unsigned             f = 0;
    size_t               i;

    for (i = 0; i < cfg->nallow_networks; i++)
        if (util_cidr_match(&cfg->allow_networks[i], &s->peer.sa)) {
            f |= SF_RELAY;
            break;
        }
    for (i = 0; i < cfg->ndkim_sign_networks; i++)
        if (util_cidr_match(&cfg->dkim_sign_networks[i], &s->peer.sa)) {
            f |= SF_SIGN;
            break;
        }
    return f;
}


void
smtpd_accept(struct smtpd *d, int fd, const struct sockaddr *sa,
    socklen_t salen, const struct config_listen *l)
{
    const struct config *cfg = d->cfg;
    struct sess         *s = xcalloc(1, sizeof(*s));
    union sess_peer      peer;

    s->d = d;
    net_init(&s->tp, fd);
    sess_sid_next(d, s->sid);
    sess_peer(s, sa, salen);
    s->role = l != NULL ? (uint8_t)l->role : CONFIG_ROLE_MX;
    s->flags |= sess_net_flags(s);
    if (l != NULL && l->inject) {
        /* the HTTP API's session: relays and signs as if authenticated */
        s->flags |= SF_RELAY | SF_SIGN;
        s->auth = smtpd_auth_trusted(SMTPD_INJECT_USER);
    }
    if (d->grey != NULL && s->role == CONFIG_ROLE_MX &&
        (l == NULL || !l->no_greylist))
        s->flags |= SF_GREY;
    if (ev_watch(d->loop, fd, EV_READ, sess_on_io, s) < 0) {
        log_warn("epoll_ctl for %s: %s; session=%s", s->ip,
            strerror(errno), s->sid);
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
        "connect from [%s]:%u session=%s", s->ip, (unsigned)s->port,
        s->sid);
    sess_milter_begin(s, l);
    if (l != NULL && l->tls_implicit && d->tls_ctx != NULL) {
        /* RFC 8314: TLS from the first byte, the 220 inside it */
        s->greet_tls = 1;
        if (sess_tls_begin(s) < 0)
            return;
    } else if (!sess_screen_begin(s, l)) {
        sess_greet(s, 0);
    }
    if (d->stopping)
        sess_stop_check(s);         /* accepted while draining the backlog */
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
    } while (d->cq_commit.n > 0);
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


/* smtpd_stop_all - the stop deadline: every session not in a message is
 * told 421 now.  One receiving DATA/BDAT finishes it under its data
 * timeout (cutting it would make the client send it again elsewhere) and
 * is told 421 right after its reply, as is one waiting for the group
 * commit (answered by the hook this turn).  The worker keeps answering
 * the master meanwhile, so it is not killed for it. */
void
smtpd_stop_all(struct smtpd *d, uint64_t linger_ms)
{
    struct sess *s, *next;

    d->stopping = 1;
    d->stop_final = 1;
    for (s = d->sessions; s != NULL; s = next) {
        next = s->next;
        if (s->state == SS_COMMIT || s->state == SS_DATA ||
            s->state == SS_BDAT || s->state == SS_MILTER)
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
    d->events = env->events;
    d->tls_ctx = env->tls_ctx;
    d->dkim = env->dkim;
    d->auth = env->auth;
    d->shared = env->shared;
    d->grey = env->grey;
    d->gone = env->gone;
    d->arg = env->arg;
    d->sid_slot = env->slot & 0xffu;
    ev_timer_init(&d->tls_timer, sess_tls_ready_run, d);
    /* Order matters: the group commit queues its 250s before the flush. */
    ev_before_sleep(d->loop, sess_commit_hook, d);
    ev_before_sleep(d->loop, sess_flush_hook, d);
    sess_commit_setup(d);
    sess_auth_setup(d, env->auth_connect);
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
    sess_auth_teardown(d);
    sess_commit_free(d);
    ev_timer_stop(d->loop, &d->tls_timer);
    free(d->tls_ready);
    for (i = 0; i < d->nout_spare; i++)
        free(d->out_spare[i]);
    free(d->out_spare);
    free(d);
}
