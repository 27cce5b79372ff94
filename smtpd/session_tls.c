/*
 * session_tls.c - STARTTLS on an inbound session (RFC 3207; split from
 * session.c).
 *
 * PURPOSE   "220 2.0.0 Ready to start TLS", then whatever the client
 *           pipelined behind the command is thrown away unread (plaintext
 *           injected before the handshake, CVE-2011-0411), the 220 is
 *           written in clear, and SSL_accept() runs on the loop (SS_TLS,
 *           then SS_HANDSHAKE).  After it the session starts over as if
 *           just connected, without a greeting: no HELO name, no
 *           transaction.  TLS reads can leave decrypted bytes in the SSL
 *           object with nothing on the socket: sess_tls_kick() puts such a
 *           session on d->tls_ready, read again on the next turn.  Plain
 *           sessions pay one pointer test for all this.
 * FAILURE   A failed handshake closes the connection.
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

/* sess_starttls - RFC 3207.  The input behind the command is dropped
 * here: bytes a client pipelined after STARTTLS were sent in clear and
 * must never be read as commands of the TLS session (CVE-2011-0411).  The
 * handshake starts once the 220 is written (sess_write). */
void
sess_starttls(struct sess *s, struct str arg)
{
    (void)arg;                      /* none: the table said 501 */
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
    sess_enter(s, SS_TLS);
}


/* sess_tls_readable - the session would read now if bytes were there. */
static int
sess_tls_readable(const struct sess *s)
{
    return !(s->flags & SF_WBLOCK) && s->state <= SS_BDAT &&
        buf_avail(&s->out) < SESS_OUT_HIGH;
}


/* sess_tls_kick - decrypted bytes wait in the SSL object and epoll will
 * not tell: read them on the next turn (d->tls_timer, 0 ms). */
void
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


void
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
void
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
        "STARTTLS from [%s]:%u: %s %s (%d bits)%s; session=%s", s->ip,
        (unsigned)s->port, net_tls_version(&s->tp), cipher, bits,
        net_tls_resumed(&s->tp) ? ", session resumed" : "", s->sid);
    sess_txn_free(s);
    free(s->helo);
    s->helo = NULL;
    /* an AUTH in clear too (auth.allow_plaintext_loopback): it may have
     * been injected ahead of the client's STARTTLS; what it allowed falls
     * back to what the address allows */
    smtpd_auth_sess_free(s->auth);
    s->auth = NULL;
    s->flags &= ~(SF_ESMTP | SF_DISCARD | SF_RELAY | SF_SIGN);
    s->flags |= sess_net_flags(s);
    sess_enter(s, SS_CMD);
    s->active_ms = ev_now(d->loop);
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
int
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
            "STARTTLS from [%s]:%u failed: %s; session=%s", s->ip,
            (unsigned)s->port, err, s->sid);
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
int
sess_tls_begin(struct sess *s)
{
    char err[256];

    s->in.off = s->in.len = 0;
    buf_pool_give(&s->in);
    if (net_tls_start(&s->tp, s->d->tls_ctx, err, sizeof(err)) < 0) {
        log_warn("STARTTLS from [%s]:%u: %s; session=%s", s->ip,
            (unsigned)s->port, err, s->sid);
        sess_free(s, "TLS setup failed");
        return -1;
    }
    sess_enter(s, SS_HANDSHAKE);
    if (!s->greet_tls) {
        /* STARTTLS: the client sends its ClientHello only once it has
         * the 220 just written; wait for it rather than try a read now
         * that would find the socket empty. */
        sess_watch(s, EV_READ);
        return 0;
    }
    return sess_tls_step(s);
}
