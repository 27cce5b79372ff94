/*
 * mta_session.c - the per-connection SMTP protocol machine of the
 * outbound client (mta.c holds destinations, pools, fail-over over
 * addresses and the public calls): the phases and mta_enter(), buffered
 * writes, MAIL/RCPT/DATA or BDAT with pipelining, reply parsing and one
 * handler per phase (greeting, EHLO/HELO, RSET, the transaction, the end
 * of data, QUIT, STARTTLS), reads and timeouts.  The body goes out in
 * mta_body.c, STARTTLS is mta_tls.c.  The design notes are at the top of
 * mta.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "delivery/mta.h"
#include "tlspol/tlspol.h"

/* A reply in a phase; 1 when c was closed or moved on (stop parsing). */
typedef int mta_reply_fn(struct mta_conn *c, const struct smtp_reply *rp,
            const char *raw);

static mta_reply_fn mta_on_greeting, mta_on_ehlo, mta_on_helo, mta_on_rset,
    mta_on_txn, mta_on_dot, mta_on_quit, mta_on_starttls, mta_on_stray;

#define MTA_LIMIT(f)    offsetof(struct mta, f)

/*
 * The phases (Postfix's xfer_states[] in smtp_proto.c): the name traced
 * at each move (OpenSMTPD's mta_enter_state), the words of a reason
 * ("... while sending EHLO"), where the phase's time limit sits in struct
 * mta (delivery.timeouts, RFC 5321 4.5.3.2), and what a reply means in
 * it.  Within a phase the timer is pushed on per reply or chunk
 * (mta_arm()); the phase itself changes only through mta_enter().
 */
static const struct mta_state_info {
    const char   *name;
    const char   *phase;
    size_t        limit;            /* offsetof(struct mta, uint64_t ms) */
    mta_reply_fn *reply;
} mta_states[C_NSTATES] = {
    [C_CONNECT]  = { "connect", "connecting",
                     MTA_LIMIT(connect_timeout_ms), mta_on_stray },
    [C_GREETING] = { "greeting", "receiving the initial server greeting",
                     MTA_LIMIT(t.greeting_ms), mta_on_greeting },
    [C_EHLO]     = { "ehlo", "sending EHLO",
                     MTA_LIMIT(t.helo_ms), mta_on_ehlo },
    [C_HELO]     = { "helo", "sending HELO",
                     MTA_LIMIT(t.helo_ms), mta_on_helo },
    [C_RSET]     = { "rset", "sending RSET",
                     MTA_LIMIT(t.helo_ms), mta_on_rset },
    [C_TXN]      = { "txn", "sending MAIL/RCPT/DATA",
                     MTA_LIMIT(t.mail_ms), mta_on_txn },
    [C_BODY]     = { "body", "sending message content",
                     MTA_LIMIT(t.data_xfer_ms), mta_on_stray },
    [C_DOT]      = { "dot", "waiting for the end of data reply",
                     MTA_LIMIT(t.data_done_ms), mta_on_dot },
    [C_IDLE]     = { "idle", "idle",
                     MTA_LIMIT(idle_ms), mta_on_stray },
    [C_QUIT]     = { "quit", "sending QUIT",
                     MTA_LIMIT(t.quit_ms), mta_on_quit },
    [C_STARTTLS] = { "starttls", "sending STARTTLS",
                     MTA_LIMIT(t.helo_ms), mta_on_starttls },
    [C_TLS]      = { "tls", "in the TLS handshake",
                     MTA_LIMIT(t.helo_ms), mta_on_stray },
};


/* mta_enter_for - the one writer of c->state: move to s, its timer
 * armed for ms, the move traced. */
void
mta_enter_for(struct mta_conn *c, enum mta_state s, uint64_t ms)
{
    log_debug("mta %s: %s -> %s", c->name, mta_states[c->state].name,
        mta_states[s].name);
    c->state = s;
    ev_timer_start(c->r->loop, &c->timer, ms);
}


void
mta_enter(struct mta_conn *c, enum mta_state s)
{
    mta_enter_for(c, s, *(const uint64_t *)(const void *)
        ((const char *)c->r + mta_states[s].limit));
}


const char *
mta_phase(const struct mta_conn *c)
{
    return mta_states[c->state].phase;
}

/* mta_watch - tell the loop what to wait for, only when it changes (each
 * change is an epoll_ctl). */
int
mta_watch(struct mta_conn *c, unsigned mask)
{
    if (c->watched == mask)
        return 0;
    c->watched = mask;
    return ev_watch(c->r->loop, c->fd, mask, mta_io, c);
}


/* mta_send_more - mta_send(); more: body bytes follow at once (plaintext
 * only), so what is sent waits for them in the kernel (MSG_MORE) and
 * leaves in the same segment: the peer then reads and answers it all
 * together. */
int
mta_send_more(struct mta_conn *c, int more)
{
    while (buf_avail(&c->out) > 0) {
        ssize_t w;

        if (more && c->net.ssl == NULL) {
            do
                w = send(c->fd, buf_head(&c->out), buf_avail(&c->out),
                    MSG_NOSIGNAL | MSG_MORE);
            while (w < 0 && errno == EINTR);
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                w = MTA_AGAIN;
        } else {
            w = net_write(&c->net, buf_head(&c->out), buf_avail(&c->out));
        }

        if (w == MTA_AGAIN)
            break;
        if (w < 0) {
            snprintf(c->lasterr, sizeof(c->lasterr),
                "lost connection with %s while %s: %s", c->name,
                mta_phase(c), strerror(errno));
            return -1;
        }
        buf_consume(&c->out, (size_t)w);
    }
    if (buf_avail(&c->out) == 0) {
        c->out.off = c->out.len = 0;
        mta_block_give(c);          /* sent: the next chunk takes one again */
    }
    return 0;
}


/* mta_send - write what is buffered, as far as the socket takes it,
 * without touching what the loop watches.  Returns 0, or -1 with lasterr
 * set when the socket failed. */
static int
mta_send(struct mta_conn *c)
{
    return mta_send_more(c, 0);
}


/* mta_flush - mta_send(), then watch for writability if some is left
 * (or the body is still being sent). */
int
mta_flush(struct mta_conn *c)
{
    if (mta_send(c) < 0)
        return -1;
    mta_watch(c, EV_READ | (buf_avail(&c->out) > 0 ||
        c->state == C_BODY ? EV_WRITE : 0));
    return 0;
}


int
mta_push(struct mta_conn *c)
{
    if (mta_flush(c) < 0) {
        mta_lost(c, c->lasterr);
        return 1;
    }
    return 0;
}


/* mta_cmd - queue one command line (no CRLF in fmt). */
void
mta_cmd(struct mta_conn *c, const char *fmt, ...)
{
    va_list ap;

    /* buf_printf grows the buffer: a command is never cut (an ORCPT
     * and an ENVID encoded may pass 512 bytes, RFC 3461 5). */
    va_start(ap, fmt);
    buf_vprintf(&c->out, fmt, ap);
    va_end(ap);
    buf_append(&c->out, "\r\n", 2);
    c->expect++;
}


void
mta_arm(struct mta_conn *c, uint64_t ms)
{
    ev_timer_start(c->r->loop, &c->timer, ms);
}

/* ---- a transaction meets its connection ---- */

/*
 * mta_reqtls_unfit - RFC 8689 (tlspol.h, step 2): may c carry t?  0 when
 * it may (or t is no REQUIRETLS message).  Else, for the txn c was opened
 * for, this host fails permanently with the 5.7.10 / 5.7.30 reason (the
 * next host is tried; the last one's failure bounces); any other txn goes
 * back to its queue and c is closed (mta_conn_unfit), so it gets a
 * connection of its own.  Returns 1 then: c is gone or moved on.
 */
static int
mta_reqtls_unfit(struct mta_conn *c, struct mta_txn *t, int opened_for)
{
    char why[SMTP_REPLY_MAX];

    if (!t->env->requiretls || tls_reqtls_session(&c->tlso, c->caps,
        t->env->sender[0] == '\0', c->name, why, sizeof(why)) == 0)
        return 0;
    if (!opened_for)
        return mta_conn_unfit(c, t);
    c->txn = t;
    c->perm = 1;
    mta_lost(c, why);
    return 1;
}


/*
 * mta_stray - c is about to carry a transaction: has the peer sent
 * anything that no command of ours asked for (bytes read or waiting on
 * the connection, or its close)?  Every reply is in by now, so such bytes
 * are a surplus reply: taken in order, they would answer the new
 * commands, and a late reply to RCPT would pass for the verdict on the
 * content.  One read that finds nothing (EAGAIN) a transaction, right
 * after the reply that ended the last one (a surplus sent just behind it
 * is in by then).  On plaintext the read that brought that reply already
 * says so when it came back short: TCP returns less than asked only with
 * its receive queue empty, a few microseconds before the read here would
 * look (c->drained: that read would be a system call per message).  Over
 * TLS a short read says nothing of the socket.  A connection parked idle
 * is not read again when it is taken up: it was watched for reading all
 * the while, and whatever came went through mta_read(), which closes an
 * idle connection on any byte or on EOF (a read there would be another
 * system call per message).  Returns 0 when quiet, else -1
 * with why set.
 */
static int
mta_stray(struct mta_conn *c, char *why, size_t len)
{
    ssize_t n = 0;

    if (buf_avail(&c->in) == 0 && c->state != C_IDLE && !c->drained) {
        (void)buf_reserve(&c->in, 512);
        n = net_read(&c->net, buf_tail(&c->in), buf_room(&c->in));
        if (n == MTA_AGAIN)
            return 0;
        if (n <= 0) {
            snprintf(why, len, "lost connection with %s before a "
                "transaction", c->name);
            return -1;
        }
        buf_produce(&c->in, (size_t)n);
    }
    if (buf_avail(&c->in) == 0)
        return 0;
    snprintf(why, len, "protocol error: host %s sent a reply to no command "
        "(out of step) while %s", c->name, mta_phase(c));
    return -1;
}


/*
 * mta_conn_next - c is ready for a transaction: the one it was opened
 * for, else the next waiting one (after an RSET on a used connection).
 * With none, park c idle, or close it when draining.  Returns 1 when c was
 * closed.  SHAPING: this is where a transaction meets its connection, so
 * the traffic-shaping module's per-message question (may c send one more
 * now) goes before mta_dest_pop(): a "not before T" parks c idle with
 * its timer at T instead of taking a transaction (see mta_may_connect()
 * in mta.c for the connection side).
 */
int
mta_conn_next(struct mta_conn *c)
{
    struct mta_txn *t = c->txn;
    int             opened_for = t != NULL && !c->reused;
    char            why[SMTP_REPLY_MAX + 128];

    if (mta_stray(c, why, sizeof(why)) < 0) {
        /* a used connection holds no txn here; one it was opened for is
         * deferred (mta_lost), and tried again on a fresh connection */
        mta_lost(c, why);
        return 1;
    }
    c->txn = NULL;
    if (c->peer.mailmax > 0 && c->ntxn >= c->peer.mailmax) {
        /* the peer's LIMITS MAILMAX is reached: c carries no more; t (a
         * txn's next slice) and the queue go on a fresh connection */
        if (t != NULL)
            return mta_conn_unfit(c, t);
        mta_conn_quit(c);
        return 1;
    }
    if (c->dest->shape_e >= 0) {
        /* shaping: messages per connection, the rates, back-off */
        int rc = mta_shape_next(c, t);

        if (rc != 0)
            return rc == 1;
    }
    for (;;) {
        if (t == NULL && c->dest->wait_head != NULL &&
            !mta_egress_fair(c, NULL, NULL)) {
            /* c's source is over its share of the pool: the slot goes to
             * a connection from the source owed most (mta_egress.c) */
            mta_conn_quit(c);
            return 1;
        }
        if (t == NULL && (t = mta_dest_pop(c->dest)) != NULL)
            mta_egress_take(c, t);
        if (t != NULL && c->shape_e >= 0)
            t->shape_se = c->shape_e;   /* its back-off is c's source's */
        if (t == NULL)
            break;
        if (c->reused && !mta_conn_fits(c, t))
            return mta_conn_unfit(c, t);
        if (mta_reqtls_unfit(c, t, opened_for))
            return 1;
        opened_for = 0;
        t->tls_out = c->tlso;
        t->peer_dsn = (c->caps & SMTP_CAP_DSN) != 0;
        if (mta_precheck(c, t) < 0) {
            t = NULL;
            continue;
        }
        if (c->reused && !(c->caps & SMTP_CAP_PIPELINING)) {
            /* RSET alone first; MAIL follows its reply */
            c->txn = t;
            mta_cmd(c, "RSET");
            mta_enter(c, C_RSET);
        } else {
            mta_begin(c, t, c->reused);
        }
        if ((c->state == C_BODY ? mta_body_write(c) : mta_flush(c)) < 0) {
            mta_lost(c, c->lasterr);
            return 1;
        }
        return 0;
    }
    if (c->r->draining) {
        mta_conn_quit(c);
        return 1;
    }
    c->expect = 0;
    (void)mta_watch(c, EV_READ);
    if (c->dest->shape_e >= 0)
        mta_enter_for(c, C_IDLE, mta_shape_idle_ms(c));
    else
        mta_enter(c, C_IDLE);
    return 0;
}


/* mta_host_said - the peer refused cmd: "host H said: R (in reply to
 * cmd)" loses c (the next host, or the open recipients deferred, as
 * mta_lost() decides).  Returns 1. */
static int
mta_host_said(struct mta_conn *c, const struct smtp_reply *rp,
    const char *cmd)
{
    char why[1024];

    snprintf(why, sizeof(why), "host %s said: %s (in reply to %s)",
        c->name, rp->text, cmd);
    mta_lost(c, why);
    return 1;
}


static int
mta_on_greeting(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    char why[1024];

    (void)raw;
    mta_health_answered(c);         /* any greeting: the hop is up */
    if (rp->code / 100 != 2) {
        /* a 5xx greeting moves on like a 4xx one; only from the last
         * address does it bounce (Postfix), with the reply first so
         * that the DSN carries its status code */
        c->perm = rp->code / 100 == 5;
        if (c->perm)
            snprintf(why, sizeof(why), "%s (host %s refused to talk to "
                "me)", rp->text, c->name);
        else
            snprintf(why, sizeof(why), "host %s refused to talk to me: "
                "%s", c->name, rp->text);
        mta_lost(c, why);
        return 1;
    }
    mta_cmd(c, "EHLO %s", mta_egress_helo(c));
    mta_enter(c, C_EHLO);
    return mta_push(c);
}


static int
mta_on_ehlo(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    if (rp->code / 100 == 2) {
        c->caps = smtp_ehlo_caps(raw, rp->len, &c->peer);
        if (c->net.ssl != NULL)
            return mta_conn_next(c);    /* EHLO again after TLS */
        return mta_tls_ehlo(c);
    }
    if (rp->code / 100 != 5)
        return mta_host_said(c, rp, "EHLO");
    mta_cmd(c, "HELO %s", mta_egress_helo(c));
    mta_enter(c, C_HELO);
    return mta_push(c);
}


static int
mta_on_helo(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    (void)raw;
    if (rp->code / 100 != 2)
        return mta_host_said(c, rp, "HELO");
    c->caps = 0;
    memset(&c->peer, 0, sizeof(c->peer));
    if (c->net.ssl == NULL && tls_req_mandatory(&c->tls))
        return mta_tls_ehlo(c);         /* defers: no STARTTLS */
    return mta_conn_next(c);
}


/* mta_on_rset - the reply to an RSET sent alone (a reused connection
 * without PIPELINING): then the transaction. */
static int
mta_on_rset(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    (void)raw;
    if (rp->code / 100 != 2)
        return mta_host_said(c, rp, "RSET");
    mta_begin(c, c->txn, 0);
    return mta_push(c);
}


static int
mta_on_txn(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    (void)raw;
    return mta_txn_reply(c, rp);
}


static int
mta_on_dot(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    (void)raw;
    if (!c->tx.empty_data)
        mta_final(c, rp);
    return mta_idle(c);
}


static int
mta_on_quit(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    (void)rp;
    (void)raw;
    mta_conn_close(c);
    return 1;
}


static int
mta_on_starttls(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    char why[1024];

    (void)raw;
    if (rp->code != 220) {
        /* refused: as if it were not offered */
        snprintf(why, sizeof(why), "host %s said: %s (in reply to "
            "STARTTLS)", c->name, rp->text);
        return mta_tls_refused(c, why);
    }
    if (buf_avail(&c->in) > 0)
        /* bytes after the 220 would be read as TLS records that an
         * attacker injected in plaintext (CVE-2011-0411 class): the
         * handshake has failed before it began */
        return mta_tls_failed(c, "the server sent data after its "
            "STARTTLS reply");
    return mta_tls_begin(c);
}


/* mta_on_stray - a reply in a phase that waits for none (connecting,
 * the body of a DATA, idle, the handshake). */
static int
mta_on_stray(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    char why[1024];

    (void)raw;
    snprintf(why, sizeof(why), "unexpected reply from %s: %s", c->name,
        rp->text);
    mta_lost(c, why);
    return 1;
}


/* mta_reply - one complete reply (raw: its bytes, for EHLO): checked
 * against what was sent, then to the handler of the phase.  Returns 1
 * when c was closed or restarted (stop parsing). */
static int
mta_reply(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    char why[1024];

    if (c->expect == 0 && c->state != C_GREETING) {
        /* unsolicited (e.g. 421 on an idle connection) */
        snprintf(why, sizeof(why), "host %s said: %s", c->name, rp->text);
        mta_lost(c, why);
        return 1;
    }
    if (c->expect > 0)
        c->expect--;
    if (c->expect == 0 && buf_avail(&c->in) > 0 && c->state != C_STARTTLS &&
        c->state != C_QUIT) {
        /* this reply answers the last command sent, yet more follows: the
         * peer is out of step (a surplus reply here or earlier), and no
         * reply of this group can be trusted as the answer it seems */
        snprintf(why, sizeof(why), "protocol error: host %s sent a reply "
            "to no command (out of step) while %s", c->name,
            mta_phase(c));
        mta_lost(c, why);
        return 1;
    }
    if (c->tx.piped && (c->state == C_BODY || c->state == C_DOT) &&
        (c->tx.rset_pending || c->tx.nreply <= c->txn->count))
        return mta_piped_reply(c, rp);
    return mta_states[c->state].reply(c, rp, raw);
}


static int mta_read1(struct mta_conn *c);

/* mta_read - read, then handle every complete reply in the buffer;
 * again while TLS holds decrypted bytes (the loop is level-triggered on
 * the socket, which may be empty by then). */
static void
mta_read(struct mta_conn *c)
{
    while (mta_read1(c) == 0 && net_pending(&c->net))
        ;
}


/* mta_read1 - one read and its replies; 1 when c is gone or has nothing
 * more now. */
static int
mta_read1(struct mta_conn *c)
{
    char    why[SMTP_REPLY_MAX + 64];
    size_t  room;
    ssize_t n;

    (void)buf_reserve(&c->in, 8192);
    room = buf_room(&c->in);
    n = net_read(&c->net, buf_tail(&c->in), room);
    if (n == MTA_AGAIN) {
        if (c->net.ssl != NULL && c->net.want == NET_WANT_WRITE)
            (void)mta_watch(c, EV_READ | EV_WRITE);
        return 1;
    }
    if (n <= 0) {
        snprintf(why, sizeof(why), "lost connection with %s while %s%s%s",
            c->name, mta_phase(c), n < 0 ? ": " : "",
            n < 0 ? strerror(errno) : "");
        mta_lost(c, why);
        return 1;
    }
    buf_produce(&c->in, (size_t)n);
    c->drained = c->net.ssl == NULL && (size_t)n < room;
    for (;;) {
        struct smtp_reply rp;
        const char        *raw = buf_head(&c->in);
        int                rc = smtp_reply_parse(raw, buf_avail(&c->in),
            MTA_REPLY_LIMIT, &rp);

        if (rc == 0)
            break;
        if (rc < 0) {
            snprintf(why, sizeof(why), "malformed reply from %s while %s",
                c->name, mta_phase(c));
            mta_lost(c, why);
            return 1;
        }
        /* consume first: the bytes stay readable at raw until the next
         * change to c->in, and c may be freed by the handler */
        buf_consume(&c->in, rp.len);
        if (mta_reply(c, &rp, raw))
            return 1;
    }
    c->drained = 0;                 /* stale once this read is handled */
    if (buf_avail(&c->in) == 0)
        c->in.off = c->in.len = 0;
    return 0;
}


void
mta_io(struct ev_loop *loop, int fd, unsigned ev, void *arg)
{
    struct mta_conn *c = arg;

    (void)loop;
    (void)fd;
    if (c->state == C_CONNECT) {
        mta_connected(c);
        return;
    }
    if (c->state == C_TLS) {
        (void)mta_tls_step(c);
        return;
    }
    if (ev & (EV_READ | EV_ERROR)) {
        mta_read(c);
        return;                 /* c may be gone; writes come next turn */
    }
    if (ev & EV_WRITE) {
        if (c->state == C_BODY) {
            if (mta_body_write(c) < 0)
                mta_lost(c, c->lasterr);
        } else if (mta_flush(c) < 0) {
            mta_lost(c, c->lasterr);
        }
    }
}


void
mta_timeout(struct ev_loop *loop, struct ev_timer *tm, void *arg)
{
    struct mta_conn *c = arg;
    char               why[1024];

    (void)loop;
    (void)tm;
    if (c->state == C_IDLE) {
        /* the reuse window is over: QUIT, and wait for its reply at most
         * delivery.timeouts.quit (the slot stays counted until then) */
        mta_cmd(c, "QUIT");
        if (mta_send(c) < 0 || buf_avail(&c->out) > 0) {
            mta_conn_close(c);
            return;
        }
        mta_enter(c, C_QUIT);
        return;
    }
    if (c->state == C_QUIT) {
        mta_conn_close(c);
        return;
    }
    if (c->state == C_TLS)
        mta_tlsrpt(c, TLS_FAIL_VALIDATION, "the TLS handshake timed out");
    if (c->state == C_TLS && !tls_req_mandatory(&c->tls))
        c->tls_fallback = MTA_TLS_RETRY_PLAIN;  /* stalled: plaintext */
    if (c->state == C_CONNECT)
        snprintf(why, sizeof(why), "connect to %s: Connection timed out",
            c->name);
    else
        snprintf(why, sizeof(why), "conversation with %s timed out while %s",
            c->name, mta_phase(c));
    mta_lost(c, why);
}
