/*
 * mta_session.c - the per-connection SMTP protocol machine of the
 * outbound client (mta.c holds destinations, pools, fail-over over
 * addresses and the public calls): buffered writes and the per-phase
 * timer, MAIL/RCPT/DATA or BDAT with pipelining, the body streamed from
 * the queue file, reply parsing and dispatch (greeting, EHLO/HELO, RSET,
 * the transaction), reads and timeouts.  The design notes are at the top
 * of mta.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/tcp.h>
#include <sys/sendfile.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "delivery/mta.h"
#include "tlspol/tlspol.h"

#include <openssl/ssl.h>

static const char *const mta_phase[] = {
    "connecting", "receiving the initial server greeting",
    "sending EHLO", "sending HELO", "sending RSET",
    "sending MAIL/RCPT/DATA", "sending message content",
    "waiting for the end of data reply", "idle", "sending QUIT",
    "sending STARTTLS", "in the TLS handshake"
};


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
static int
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
                mta_phase[c->state], strerror(errno));
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
static int
mta_flush(struct mta_conn *c)
{
    if (mta_send(c) < 0)
        return -1;
    mta_watch(c, EV_READ | (buf_avail(&c->out) > 0 ||
        c->state == C_BODY ? EV_WRITE : 0));
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

/* ---- the transaction ---- */

static void mta_body_start(struct mta_conn *c);
static int  mta_body_write(struct mta_conn *c);

/* mta_need_utf8 - does the envelope need SMTPUTF8 at the next hop? */
static int
mta_need_utf8(const struct mta_txn *t)
{
    return t->env->smtputf8 != 0;
}


/* mta_reject_all - a verdict for the whole txn before any command. */
static void
mta_reject_all(struct mta_conn *c, struct mta_txn *t, const char *why)
{
    size_t i;

    for (i = 0; i < t->nrcpt; i++)
        mta_set(t, i, MTA_BOUNCE, why, c->name);
    mta_post(c->r, t);
}


/* mta_rcpt_cmd - queue "RCPT TO:<a>" with DSN parameters when offered. */
static void
mta_rcpt_cmd(struct mta_conn *c, size_t k)
{
    const struct spool_rcpt *rc = &c->txn->env->rcpt[c->txn->rcpt[k]];
    char                     notify[64] = "";
    char                     orcpt[8 + 3 * SMTP_ORCPT_MAX] = "";

    if (c->caps & SMTP_CAP_DSN) {
        if (rc->notify & SMTP_NOTIFY_NEVER) {
            util_strlcpy(notify, " NOTIFY=NEVER", sizeof(notify));
        } else if (rc->notify) {
            snprintf(notify, sizeof(notify), " NOTIFY=%s%s%s%s%s",
                rc->notify & SMTP_NOTIFY_SUCCESS ? "SUCCESS" : "",
                (rc->notify & SMTP_NOTIFY_SUCCESS) &&
                (rc->notify & (SMTP_NOTIFY_FAILURE | SMTP_NOTIFY_DELAY)) ?
                "," : "",
                rc->notify & SMTP_NOTIFY_FAILURE ? "FAILURE" : "",
                (rc->notify & SMTP_NOTIFY_FAILURE) &&
                (rc->notify & SMTP_NOTIFY_DELAY) ? "," : "",
                rc->notify & SMTP_NOTIFY_DELAY ? "DELAY" : "");
        }
        if (rc->orcpt != NULL) {
            memcpy(orcpt, " ORCPT=", 7);
            if (smtp_xtext_encode(rc->orcpt, orcpt + 7,
                sizeof(orcpt) - 7) < 0)
                orcpt[0] = '\0';   /* cannot be: ORCPT is capped at parse */
        }
    }
    mta_cmd(c, "RCPT TO:<%s>%s%s", rc->addr, notify, orcpt);
}


/* mta_has_ctl - a control byte in s?  The SMTP parser never lets one into
 * an address, but the spool keeps any byte, and a damaged or edited queue
 * file must not turn an address into a second command line. */
static int
mta_has_ctl(const char *s)
{
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}


/* mta_envelope_clean - no control byte in the sender or t's recipients,
 * which MAIL FROM:<> and RCPT TO:<> carry as they are. */
static int
mta_envelope_clean(const struct mta_txn *t)
{
    size_t i;

    if (mta_has_ctl(t->env->sender))
        return 0;
    for (i = 0; i < t->nrcpt; i++)
        if (mta_has_ctl(t->env->rcpt[t->rcpt[i]].addr))
            return 0;
    return 1;
}


/* mta_precheck - can t go to this peer at all?  Returns 0, or -1 when t
 * was finished (bounced) without a command; c stays usable. */
static int
mta_precheck(struct mta_conn *c, struct mta_txn *t)
{
    const struct spool_env *env = t->env;
    char                    why[SMTP_REPLY_MAX];

    if (!mta_envelope_clean(t)) {
        mta_reject_all(c, t, "554 5.1.3 a control character in the "
            "envelope's addresses (a damaged queue file); not sent");
        return -1;
    }
    if (mta_need_utf8(t) && !(c->caps & SMTP_CAP_SMTPUTF8)) {
        snprintf(why, sizeof(why), "553 5.6.7 SMTPUTF8 is required, but "
            "was not offered by host %s", c->name);
        mta_reject_all(c, t, why);
        return -1;
    }
    if (env->body == SMTP_BODY_BINARYMIME &&
        (c->caps & (SMTP_CAP_CHUNKING | SMTP_CAP_BINARYMIME)) !=
        (SMTP_CAP_CHUNKING | SMTP_CAP_BINARYMIME)) {
        snprintf(why, sizeof(why), "554 5.6.3 binary content requires "
            "BINARYMIME, but it was not offered by host %s", c->name);
        mta_reject_all(c, t, why);
        return -1;
    }
    return 0;
}


/* mta_begin - queue the commands of t on c (session ready, prechecked),
 * behind an RSET when rset is set (a reused connection with PIPELINING). */
void
mta_begin(struct mta_conn *c, struct mta_txn *t, int rset)
{
    const struct spool_env *env = t->env;
    char                    size[40] = "", body[24] = "";
    size_t                  k;

    c->rset_pending = rset;
    if (rset)
        mta_cmd(c, "RSET");
    if (t->nrcpt > c->rst_cap) {
        free(c->rst);
        c->rst = xcalloc(t->nrcpt, 1);
        c->rst_cap = t->nrcpt;
    }
    memset(c->rst, R_PENDING, t->nrcpt);
    c->txn = t;
    t->accepted = 0;
    c->nreply = 0;
    c->nsent = 0;
    c->mail_failed = 0;
    c->empty_data = 0;
    c->pipelining = (c->caps & SMTP_CAP_PIPELINING) != 0;
    c->bdat = (c->caps & SMTP_CAP_CHUNKING) != 0;
    if (c->caps & SMTP_CAP_SIZE)
        snprintf(size, sizeof(size), " SIZE=%llu",
            (unsigned long long)env->body_size);
    if (env->body == SMTP_BODY_BINARYMIME)
        util_strlcpy(body, " BODY=BINARYMIME", sizeof(body));
    else if (env->body == SMTP_BODY_8BITMIME &&
        (c->caps & SMTP_CAP_8BITMIME))
        util_strlcpy(body, " BODY=8BITMIME", sizeof(body));
    {
        char extra[16 + 3 * SMTP_ENVID_MAX] = "";

        if (c->caps & SMTP_CAP_DSN) {
            if (env->ret != SMTP_RET_NONE)
                snprintf(extra, sizeof(extra), " RET=%s",
                    env->ret == SMTP_RET_FULL ? "FULL" : "HDRS");
            if (env->envid != NULL) {
                size_t o = strlen(extra);

                o += (size_t)snprintf(extra + o, sizeof(extra) - o,
                    " ENVID=");
                if (smtp_xtext_encode(env->envid, extra + o,
                    sizeof(extra) - o) < 0)
                    extra[o - 7] = '\0';   /* ENVID is capped at parse */
            }
        }
        mta_cmd(c, "MAIL FROM:<%s>%s%s%s%s%s", env->sender, size, body,
            mta_need_utf8(t) ? " SMTPUTF8" : "", extra,
            reqtls_mail_param(env, c->caps));
    }
    c->nsent = 1;
    c->piped = 0;
    if (c->pipelining) {
        for (k = 0; k < t->nrcpt; k++)
            mta_rcpt_cmd(c, k);
        c->nsent += t->nrcpt;
        if (!c->bdat) {
            mta_cmd(c, "DATA");
            c->nsent++;
        } else if (env->body_size <= MTA_PIPE_BODY_MAX) {
            /* RFC 3030 4.2 (BDAT may be pipelined): the body follows at
             * once; the replies come in order (mta_piped_reply), a
             * refused RCPT or MAIL makes the peer refuse the BDAT and
             * drop its bytes, and the BDAT reply counts only for the
             * recipients it accepted */
            c->piped = 1;
            c->nsent++;
        }
    }
    c->state = C_TXN;
    mta_arm(c, rset ? c->r->t.helo_ms : c->r->t.mail_ms);
    if (c->piped)
        mta_body_start(c);
}


/* mta_idle - the transaction is over and every reply is in: hand the
 * txn back and reuse c.  Returns 1 when c was closed. */
static int
mta_idle(struct mta_conn *c)
{
    struct mta_txn *t = c->txn;

    c->txn = NULL;
    c->reused = 1;
    if (t != NULL)
        mta_post(c->r, t);
    return mta_conn_next(c);
}


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

    if (!t->env->requiretls || reqtls_session(&c->tlso, c->caps,
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
 * look (c->drained; issue 16: one system call per message less).  Over
 * TLS a short read says nothing of the socket.  A connection parked idle
 * is not read again when it is taken up: it was watched for reading all
 * the while, and whatever came went through mta_read(), which closes an
 * idle connection on any byte or on EOF (a read per message there cost
 * 0.9 system calls per message, issue 16).  Returns 0 when quiet, else -1
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
        "(out of step) while %s", c->name, mta_phase[c->state]);
    return -1;
}


/*
 * mta_conn_next - c is ready for a transaction: the one it was opened
 * for, else the next waiting one (after an RSET on a used connection).
 * With none, park c idle, or close it when draining.  Returns 1 when c was
 * closed.
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
    for (;;) {
        if (t == NULL)
            t = mta_dest_pop(c->dest);
        if (t == NULL)
            break;
        if (c->reused && !mta_conn_fits(c, t))
            return mta_conn_unfit(c, t);
        if (mta_reqtls_unfit(c, t, opened_for))
            return 1;
        opened_for = 0;
        t->tls_out = c->tlso;
        if (mta_precheck(c, t) < 0) {
            t = NULL;
            continue;
        }
        if (c->reused && !(c->caps & SMTP_CAP_PIPELINING)) {
            /* RSET alone first; MAIL follows its reply */
            c->txn = t;
            mta_cmd(c, "RSET");
            c->state = C_RSET;
            mta_arm(c, c->r->t.helo_ms);
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
        mta_cmd(c, "QUIT");
        (void)net_write(&c->net, buf_head(&c->out), buf_avail(&c->out));
        mta_conn_close(c);
        return 1;
    }
    c->state = C_IDLE;
    c->expect = 0;
    (void)mta_watch(c, EV_READ);
    mta_arm(c, MTA_IDLE_MS);
    return 0;
}


/* mta_body_start - 354 received (DATA) or RCPTs accepted (BDAT). */
static void
mta_body_start(struct mta_conn *c)
{
    c->state = C_BODY;
    c->body_left = c->txn->env->body_size;
    c->body_pos = c->txn->body_off;
    smtp_stuff_init(&c->stuff);
    if (c->bdat) {
        mta_cmd(c, "BDAT %llu LAST", (unsigned long long)c->body_left);
        c->expect--;                        /* counted when the body ends */
    }
    mta_arm(c, c->r->t.data_xfer_ms);
}


/* mta_body_pread - up to want body bytes at c->body_pos into p: from the
 * copy spool_keep() left in memory (a small message on its first
 * attempt: no system call), else from the queue file. */
static ssize_t
mta_body_pread(struct mta_conn *c, void *p, size_t want)
{
    const struct mta_txn *t = c->txn;
    uint64_t              at = (uint64_t)(c->body_pos - t->body_off);

    if (t->env->body_copy != NULL && at <= t->env->body_size) {
        if (want > t->env->body_size - at)
            want = (size_t)(t->env->body_size - at);
        memcpy(p, t->env->body_copy + at, want);
        return (ssize_t)want;
    }
    return pread(t->fd, p, want, c->body_pos);
}


/* mta_body_read - the next chunk of the body from the queue file into the
 * shared chunk buffer: its length, or -1 with lasterr set. */
static ssize_t
mta_body_read(struct mta_conn *c)
{
    size_t  want = c->body_left > MTA_CHUNK ? MTA_CHUNK :
        (size_t)c->body_left;
    ssize_t n = mta_body_pread(c, c->r->chunk, want);

    if (n <= 0) {
        snprintf(c->lasterr, sizeof(c->lasterr),
            "cannot read the queue file: %s",
            n < 0 ? strerror(errno) : "truncated");
        return -1;
    }
    c->body_pos += n;
    c->body_left -= (uint64_t)n;
    return n;
}


/* mta_body_in_memory - a plaintext BDAT body goes from the queue file
 * into the out buffer and leaves with send() (see MTA_BLOCK): a small
 * one in the buffer as it grows, a big one in a pooled block.  0 when
 * every block is out: then sendfile() sends it without memory. */
static int
mta_body_in_memory(struct mta_conn *c)
{
    if (c->out_block ||
        buf_avail(&c->out) + c->body_left <= MTA_BLOCK_SMALL)
        return 1;
    return mta_block_take(c);
}


/* mta_body_fill - the next body bytes from the queue file behind what
 * the out buffer holds, as many as fit (a small body: all of it).
 * 0, or -1 with lasterr set. */
static int
mta_body_fill(struct mta_conn *c)
{
    size_t  want;
    ssize_t n;

    buf_compact(&c->out);
    if (!c->out_block)
        (void)buf_reserve(&c->out, (size_t)c->body_left);
    want = buf_room(&c->out);
    if (want > c->body_left)
        want = (size_t)c->body_left;
    n = mta_body_pread(c, buf_tail(&c->out), want);
    if (n <= 0) {
        snprintf(c->lasterr, sizeof(c->lasterr),
            "cannot read the queue file: %s",
            n < 0 ? strerror(errno) : "truncated");
        return -1;
    }
    buf_produce(&c->out, (size_t)n);
    c->body_pos += n;
    c->body_left -= (uint64_t)n;
    return 0;
}


#define MTA_TOP_UP 4096         /* less than this waits for the next chunk */

/* mta_top_up - a BDAT line (or the tail of a write the socket refused) is
 * not sent alone while body bytes that go through the out buffer remain:
 * the next chunk joins it, so that the line and the chunk go out in one
 * send() (over TLS one record) instead of a segment and a wake-up of the
 * peer each.  Bytes appended behind a refused write keep it the same
 * write (net.h). */
static int
mta_top_up(struct mta_conn *c)
{
    return c->bdat && c->body_left > 0 &&
        buf_avail(&c->out) < MTA_TOP_UP &&
        (c->net.ssl != NULL || mta_body_in_memory(c));
}


/*
 * mta_body_write - move body bytes toward the socket.  DATA: pread a
 * 128 KiB chunk, stuff it into the out buffer, send; BDAT: pread behind
 * the command line into the out buffer (a pooled block for a big body)
 * and send both at once, or, when no block is free, send the line and
 * sendfile() straight from the queue file.  Stops at
 * EAGAIN or after MTA_WRITE_TURNS chunks so one big message does not
 * hold the loop.  Writability is watched only when it has to wait: a
 * body that goes out in one call costs no epoll_ctl() on and off.
 */
static int
mta_body_write(struct mta_conn *c)
{
    int turns;

    for (turns = 0; turns < MTA_WRITE_TURNS; turns++) {
        if (buf_avail(&c->out) > 0 && !mta_top_up(c)) {
            if (mta_send_more(c, c->bdat && c->body_left > 0) < 0)
                return -1;
            if (buf_avail(&c->out) > 0) {   /* EAGAIN */
                (void)mta_watch(c, EV_READ | EV_WRITE);
                return 0;
            }
        }
        if (c->body_left == 0) {
            if (!c->bdat) {
                char end[5];
                size_t n = smtp_stuff_end(&c->stuff, end);

                buf_append(&c->out, end, n);
            }
            c->expect++;
            c->state = C_DOT;
            mta_arm(c, c->r->t.data_done_ms);
            return mta_flush(c);
        }
        if (c->bdat && c->net.ssl != NULL) {
            /* TLS: the bytes go through OpenSSL, not sendfile() */
            ssize_t n = mta_body_read(c);

            if (n < 0)
                return -1;
            buf_compact(&c->out);
            buf_append(&c->out, c->r->chunk, (size_t)n);
        } else if (c->bdat && mta_body_in_memory(c)) {
            if (mta_body_fill(c) < 0)
                return -1;
        } else if (c->bdat) {
            ssize_t w = sendfile(c->fd, c->txn->fd, &c->body_pos,
                c->body_left > MTA_CHUNK * 4 ? MTA_CHUNK * 4 :
                c->body_left);

            if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
                (void)mta_watch(c, EV_READ | EV_WRITE);
                return 0;
            }
            if (w <= 0) {
                snprintf(c->lasterr, sizeof(c->lasterr),
                    "lost connection with %s while sending message "
                    "content: %s", c->name,
                    w < 0 ? strerror(errno) : "queue file truncated");
                return -1;
            }
            c->body_left -= (uint64_t)w;
        } else {
            ssize_t n = mta_body_read(c);

            if (n < 0)
                return -1;
            buf_compact(&c->out);
            (void)buf_reserve(&c->out, SMTP_STUFF_ROOM((size_t)n) + 5);
            buf_produce(&c->out, smtp_stuff(&c->stuff, c->r->chunk,
                (size_t)n, buf_tail(&c->out)));
            if (c->body_left == 0) {
                /* the end of data rides in the same write as the last
                 * chunk: a separate small segment would wait for the
                 * peer's delayed ACK */
                buf_produce(&c->out, smtp_stuff_end(&c->stuff,
                    buf_tail(&c->out)));
                c->expect++;
                c->state = C_DOT;
                mta_arm(c, c->r->t.data_done_ms);
                return mta_flush(c);
            }
        }
        mta_arm(c, c->r->t.data_xfer_ms);
    }
    /* turns used up with body left: go on when the socket takes more */
    if (mta_send(c) < 0)
        return -1;
    (void)mta_watch(c, EV_READ | EV_WRITE);
    return 0;
}


/* mta_final - apply a final reply to every accepted recipient. */
static void
mta_final(struct mta_conn *c, const struct smtp_reply *rp)
{
    struct mta_txn *t = c->txn;
    size_t            i;

    for (i = 0; i < t->nrcpt; i++) {
        if (c->rst[i] == R_ACCEPTED) {
            mta_set(t, i, mta_status_of(rp->code), rp->text, c->name);
            c->rst[i] = R_FINAL;
        }
    }
}


/* mta_t_reply - the limit for reply k of a transaction: 0 MAIL, 1..nrcpt
 * RCPT, then DATA. */
static uint64_t
mta_t_reply(const struct mta_conn *c, size_t k)
{
    if (k == 0)
        return c->r->t.mail_ms;
    return k <= c->txn->nrcpt ? c->r->t.rcpt_ms : c->r->t.data_ms;
}


/* mta_env_reply - reply k of a transaction, to MAIL (k 0) or to RCPT
 * k-1: note its verdict. */
static void
mta_env_reply(struct mta_conn *c, const struct smtp_reply *rp, size_t k)
{
    struct mta_txn *t = c->txn;
    size_t            i;

    if (k == 0) {                           /* MAIL */
        if (rp->code / 100 != 2) {
            c->mail_failed = 1;
            for (i = 0; i < t->nrcpt; i++) {
                mta_set(t, i, mta_status_of(rp->code), rp->text,
                    c->name);
                c->rst[i] = R_FINAL;
            }
        }
    } else if (k <= t->nrcpt) {             /* RCPT k-1 */
        i = k - 1;
        if (!c->mail_failed) {
            if (rp->code / 100 == 2) {
                c->rst[i] = R_ACCEPTED;
                t->accepted++;
            } else {
                mta_set(t, i, mta_status_of(rp->code), rp->text,
                    c->name);
                c->rst[i] = R_FINAL;
            }
        }
    }
}


/* mta_rset_reply - the reply to an RSET pipelined ahead of MAIL (a
 * reused connection).  Returns 1 when c was closed: a refused RSET (or
 * none, mta_lost) starts the transaction over on a fresh connection. */
static int
mta_rset_reply(struct mta_conn *c, const struct smtp_reply *rp)
{
    char why[1024];

    c->rset_pending = 0;
    if (rp->code / 100 == 2)
        return 0;
    snprintf(why, sizeof(why), "host %s said: %s (in reply to RSET)",
        c->name, rp->text);
    c->rset_pending = 1;                /* restart like a dead conn */
    mta_lost(c, why);
    return 1;
}


/* mta_piped_reply - a reply to RSET, MAIL or RCPT of a transaction whose
 * BDAT went behind them (c->piped): it comes while the body is still
 * being written (C_BODY) or after (C_DOT).  Only the verdict is noted;
 * the timer and the writing go on.  The BDAT's own reply, last, is the
 * end-of-data reply (C_DOT in mta_reply).  Returns 1 when c was closed. */
static int
mta_piped_reply(struct mta_conn *c, const struct smtp_reply *rp)
{
    if (c->rset_pending)
        return mta_rset_reply(c, rp);
    mta_env_reply(c, rp, c->nreply++);
    return 0;
}


/* mta_txn_reply - one reply within MAIL/RCPT/DATA.  Returns 1 when c
 * was closed. */
static int
mta_txn_reply(struct mta_conn *c, const struct smtp_reply *rp)
{
    struct mta_txn *t = c->txn;
    size_t            k = c->nreply++;

    if (k <= t->nrcpt) {                    /* MAIL, RCPT */
        mta_env_reply(c, rp, k);
    } else {                                /* DATA */
        if (rp->code == 354) {
            if (t->accepted > 0) {
                mta_body_start(c);
                if (mta_body_write(c) < 0) {
                    mta_lost(c, c->lasterr);
                    return 1;
                }
                return 0;
            }
            /* nobody to send to, but the peer wants data: end it empty */
            buf_append(&c->out, ".\r\n", 3);
            c->expect++;
            c->empty_data = 1;
            c->state = C_DOT;
            mta_arm(c, c->r->t.data_done_ms);
            if (mta_flush(c) < 0) {
                mta_lost(c, c->lasterr);
                return 1;
            }
            return 0;
        }
        if (rp->code / 100 == 2 || rp->code / 100 == 3) {
            /* a success that is not 354: no content went out, so it
             * cannot be a delivery; the replies are out of step with the
             * commands (a surplus reply earlier) or the hop is broken:
             * defer, and drop the connection */
            char why[1024];

            snprintf(why, sizeof(why), "protocol error: host %s said: %s "
                "(in reply to DATA)", c->name, rp->text);
            mta_lost(c, why);
            return 1;
        }
        mta_final(c, rp);
    }
    if (c->expect > 0) {
        mta_arm(c, mta_t_reply(c, k + 1));
        return 0;
    }
    /* every reply to what was sent is in: send the next step */
    if (c->mail_failed)
        return mta_idle(c);
    if (c->nsent <= t->nrcpt) {             /* not pipelining: next RCPT */
        mta_rcpt_cmd(c, c->nsent - 1);
        c->nsent++;
    } else if (c->nsent == t->nrcpt + 1 && t->accepted > 0) {
        c->nsent++;
        if (c->bdat) {
            mta_body_start(c);
            if (mta_body_write(c) < 0) {
                mta_lost(c, c->lasterr);
                return 1;
            }
            return 0;
        }
        mta_cmd(c, "DATA");
    } else {
        return mta_idle(c);               /* done, or nobody accepted */
    }
    mta_arm(c, mta_t_reply(c, c->nreply));
    if (mta_flush(c) < 0) {
        mta_lost(c, c->lasterr);
        return 1;
    }
    return 0;
}


/* ---- STARTTLS (RFC 3207) under the policy of tlspol.h ---- */

void
mta_tls_report(struct mta_conn *c)
{
    if (c->r->tls_report != NULL)
        c->r->tls_report(c->r->tls_report_arg, &c->tls, c->name, &c->tlso);
}


/* mta_tlsrpt - this connection attempt's TLS outcome for TLS-RPT (RFC
 * 8460): failure "" for success, else its result type.  Called once per
 * attempt that reached the TLS decision: never for level none, nor for
 * the plaintext retry after a failed handshake (already counted). */
static void
mta_tlsrpt(struct mta_conn *c, const char *failure, const char *reason)
{
    char ip[64] = "";

    if (!tlsrpt_enabled() || c->r->tls_ctx == NULL)
        return;                     /* no client context: our own doing */
    if (c->cur > 0 && c->cur <= c->naddr)     /* cur: the next to try */
        (void)util_sockaddr_ip((const struct sockaddr *)
            &c->addr[c->cur - 1].ss, ip, sizeof(ip));
    tlsrpt_outcome(&c->tls, failure, ip, reason);
}


/* mta_tls_defer - the host fails c->tls: 4.7.x reason, next host. */
static int
mta_tls_defer(struct mta_conn *c, const char *detail)
{
    char why[SMTP_REPLY_MAX], reason[SMTP_REPLY_MAX];

    mta_tls_report(c);
    mta_tlsrpt(c, c->tlso.failure[0] != '\0' ? c->tlso.failure :
        TLS_FAIL_VALIDATION, detail);
    tls_defer_reason(&c->tls, c->name, detail, why, sizeof(why));
    if (c->txn != NULL && c->txn->env->requiretls) {
        /* RFC 8689 4.2.1: a REQUIRETLS message is not retried later */
        reqtls_tls_failed(c->name, why, reason, sizeof(reason));
        util_strlcpy(why, reason, sizeof(why));
        c->perm = 1;
    }
    mta_lost(c, why);
    return 1;
}


/* mta_tls_ehlo - after a 2xx EHLO in plaintext: STARTTLS or not, as
 * the level says.  Returns 1 when c was closed. */
static int
mta_tls_ehlo(struct mta_conn *c)
{
    int offered = (c->caps & SMTP_CAP_STARTTLS) != 0 && c->r->tls_ctx != NULL;

    switch (tls_decide_ehlo(&c->tls, offered, c->tls_plain)) {
    case TLS_GO_STARTTLS:
        mta_cmd(c, "STARTTLS");
        c->state = C_STARTTLS;
        mta_arm(c, c->r->t.helo_ms);
        if (mta_flush(c) < 0) {
            mta_lost(c, c->lasterr);
            return 1;
        }
        return 0;
    case TLS_DEFER:
        if (c->tls.level == TLS_DANE_ONLY && c->tls.tlsa == NULL) {
            util_strlcpy(c->tlso.failure, TLS_FAIL_DANE_REQUIRED,
                sizeof(c->tlso.failure));
            return mta_tls_defer(c, "no usable TLSA record was found");
        }
        util_strlcpy(c->tlso.failure, TLS_FAIL_STARTTLS,
            sizeof(c->tlso.failure));
        return mta_tls_defer(c, (c->caps & SMTP_CAP_STARTTLS) ?
            "the client has no TLS context" : TLS_FAIL_STARTTLS);
    default:
        /* plaintext: not offered by the host (our own "none", a missing
         * client context and the retry after a failed handshake are not
         * the host's doing) */
        if (c->tls.level != TLS_NONE && !c->tls_plain &&
            c->r->tls_ctx != NULL && !(c->caps & SMTP_CAP_STARTTLS))
            mta_tlsrpt(c, TLS_FAIL_STARTTLS, NULL);
        return mta_conn_next(c);
    }
}


/* mta_tls_refused - STARTTLS got no 220: defer a mandatory level, else
 * go on in plaintext (the EHLO capabilities still hold). */
static int
mta_tls_refused(struct mta_conn *c, const char *why)
{
    if (tls_req_mandatory(&c->tls)) {
        char detail[SMTP_REPLY_MAX + 64];

        util_strlcpy(c->tlso.failure, TLS_FAIL_STARTTLS,
            sizeof(c->tlso.failure));
        snprintf(detail, sizeof(detail), "STARTTLS was refused (%.400s)",
            why);
        return mta_tls_defer(c, detail);
    }
    mta_tlsrpt(c, TLS_FAIL_STARTTLS, NULL);
    return mta_conn_next(c);
}


/* mta_tls_failed - the handshake failed (err says why): the same host
 * again in plaintext for an opportunistic level, else defer.  Returns 1
 * (c was closed or moved on). */
static int
mta_tls_failed(struct mta_conn *c, const char *err)
{
    char why[1024];

    if (c->r->tls_cache != NULL && c->tls_key[0] != '\0')
        tls_cache_del(c->r->tls_cache, c->tls_key);
    util_strlcpy(c->tlso.failure, TLS_FAIL_VALIDATION,
        sizeof(c->tlso.failure));
    c->tlso.used = 0;
    if (tls_decide_handshake(&c->tls, 0, &c->tlso) == TLS_RETRY_PLAIN) {
        mta_tls_report(c);
        mta_tlsrpt(c, TLS_FAIL_VALIDATION, err);
        snprintf(why, sizeof(why), "TLS handshake with %s failed: %.200s",
            c->name, err);
        c->tls_again = 1;           /* same host, plaintext (Postfix) */
        mta_lost(c, why);
        return 1;
    }
    snprintf(why, sizeof(why), "the TLS handshake failed (%.200s)", err);
    return mta_tls_defer(c, why);
}


/* mta_tls_step - drive the handshake; when done, judge the peer and
 * send EHLO again (RFC 3207 4.2: forget what was learnt before).
 * Returns 1 when c was closed or moved on. */
static int
mta_tls_step(struct mta_conn *c)
{
    char err[256];
    int  rc = net_tls_handshake(&c->net, err, sizeof(err));

    if (rc == MTA_AGAIN) {
        (void)mta_watch(c, c->net.want == NET_WANT_WRITE ? EV_WRITE :
            EV_READ);
        return 0;
    }
    if (rc < 0)
        return mta_tls_failed(c, err);
    (void)tls_client_verdict(c->net.ssl, &c->tls, &c->tlso);
    if (tls_decide_handshake(&c->tls, 1, &c->tlso) == TLS_DEFER) {
        tls_client_why(c->net.ssl, err, sizeof(err));
        return mta_tls_defer(c, err);      /* reports */
    }
    mta_tls_report(c);
    mta_tlsrpt(c, c->tlso.failure, NULL);
    c->caps = 0;
    c->peer_size = 0;
    mta_cmd(c, "EHLO %s", c->r->helo);
    c->state = C_EHLO;
    mta_arm(c, c->r->t.helo_ms);
    if (mta_flush(c) < 0) {
        mta_lost(c, c->lasterr);
        return 1;
    }
    return 0;
}


int
mta_tls_new_session(struct ssl_st *ssl, struct ssl_session_st *s)
{
    struct mta_conn *c = SSL_get_app_data(ssl);

    if (c != NULL && c->r->tls_cache != NULL && c->tls_key[0] != '\0')
        tls_cache_put(c->r->tls_cache, c->tls_key, s, util_now_ms());
    return 0;                       /* the cache took its own reference */
}


/* mta_tls_begin - 220 to STARTTLS: put TLS on the socket, offer the
 * cached session of this destination and host, and start. */
static int
mta_tls_begin(struct mta_conn *c)
{
    char         err[256], why[1024];
    SSL_SESSION *sess;

    if (net_tls_start_client(&c->net, c->r->tls_ctx, err, sizeof(err)) < 0 ||
        tls_client_prepare(c->net.ssl, &c->tls, err, sizeof(err)) < 0) {
        snprintf(why, sizeof(why), "cannot start TLS with %s: %.200s",
            c->name, err);
        mta_lost(c, why);
        return 1;
    }
    snprintf(c->tls_key, sizeof(c->tls_key), "%s|%s|%s|%d", c->dest->key,
        c->name, tls_level_name(c->tls.level), c->tls.sts_enforce);
    if (c->tls.tlsa != NULL)        /* DANE: never resumed (tlspol.h) */
        c->tls_key[0] = '\0';
    SSL_set_app_data(c->net.ssl, c);
    if (c->r->tls_cache != NULL && (sess = tls_cache_get(c->r->tls_cache,
        c->tls_key, util_now_ms())) != NULL) {
        (void)SSL_set_session(c->net.ssl, sess);
        SSL_SESSION_free(sess);
    }
    c->state = C_TLS;
    c->in.off = c->in.len = 0;
    mta_arm(c, c->r->t.helo_ms);
    return mta_tls_step(c);
}


/* mta_reply - dispatch one complete reply (raw: its bytes, for EHLO) by
 * state.  Returns 1 when c was closed or restarted (stop parsing). */
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
            mta_phase[c->state]);
        mta_lost(c, why);
        return 1;
    }
    if (c->piped && (c->state == C_BODY || c->state == C_DOT) &&
        (c->rset_pending || c->nreply <= c->txn->nrcpt))
        return mta_piped_reply(c, rp);
    switch (c->state) {
    case C_GREETING:
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
        mta_cmd(c, "EHLO %s", c->r->helo);
        c->state = C_EHLO;
        break;
    case C_EHLO:
        if (rp->code / 100 == 2) {
            c->caps = smtp_ehlo_caps(raw, rp->len, &c->peer_size);
            if (c->net.ssl != NULL)
                return mta_conn_next(c);    /* EHLO again after TLS */
            return mta_tls_ehlo(c);
        }
        if (rp->code / 100 == 5) {
            mta_cmd(c, "HELO %s", c->r->helo);
            c->state = C_HELO;
            break;
        }
        snprintf(why, sizeof(why), "host %s said: %s (in reply to EHLO)",
            c->name, rp->text);
        mta_lost(c, why);
        return 1;
    case C_HELO:
        if (rp->code / 100 == 2) {
            c->caps = 0;
            if (c->net.ssl == NULL && tls_req_mandatory(&c->tls))
                return mta_tls_ehlo(c);     /* defers: no STARTTLS */
            return mta_conn_next(c);
        }
        snprintf(why, sizeof(why), "host %s said: %s (in reply to HELO)",
            c->name, rp->text);
        mta_lost(c, why);
        return 1;
    case C_RSET:
        if (rp->code / 100 != 2) {
            snprintf(why, sizeof(why), "host %s said: %s (in reply to RSET)",
                c->name, rp->text);
            mta_lost(c, why);
            return 1;
        }
        mta_begin(c, c->txn, 0);
        break;
    case C_TXN:
        if (c->rset_pending)
            return mta_rset_reply(c, rp);
        return mta_txn_reply(c, rp);
    case C_QUIT:
        mta_conn_close(c);
        return 1;
    case C_STARTTLS:
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
    case C_DOT:
        if (!c->empty_data)
            mta_final(c, rp);
        return mta_idle(c);
    default:
        snprintf(why, sizeof(why), "unexpected reply from %s: %s", c->name,
            rp->text);
        mta_lost(c, why);
        return 1;
    }
    mta_arm(c, c->state == C_TXN ? c->r->t.mail_ms : c->r->t.helo_ms);
    if (mta_flush(c) < 0) {
        mta_lost(c, c->lasterr);
        return 1;
    }
    return 0;
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
            c->name, mta_phase[c->state], n < 0 ? ": " : "",
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
                c->name, mta_phase[c->state]);
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
        c->state = C_QUIT;
        mta_arm(c, c->r->t.quit_ms);
        return;
    }
    if (c->state == C_QUIT) {
        mta_conn_close(c);
        return;
    }
    if (c->state == C_TLS)
        mta_tlsrpt(c, TLS_FAIL_VALIDATION, "the TLS handshake timed out");
    if (c->state == C_TLS && !tls_req_mandatory(&c->tls))
        c->tls_again = 1;           /* a stalled handshake: plaintext */
    if (c->state == C_CONNECT)
        snprintf(why, sizeof(why), "connect to %s: Connection timed out",
            c->name);
    else
        snprintf(why, sizeof(why), "conversation with %s timed out while %s",
            c->name, mta_phase[c->state]);
    mta_lost(c, why);
}
