/*
 * session_msg.c - the mail transaction of an inbound session: MAIL, RCPT,
 * DATA and BDAT, the envelope, the spool writer, the commit and the
 * hand-off to delivery (split from session.c; DKIM is session_dkim.c).
 *
 * PURPOSE   DATA content streams from the read buffer through
 *           smtp_data_feed() straight into spool_write(): no line
 *           splitting, no allocation per line.  The transaction (struct
 *           sess_txn) exists from MAIL to the end of the message.
 * COMMIT    250 after the final dot only once spool_commit() (or the group
 *           commit in sess_commit_hook(), with spool.fsync) returned OK.
 *           A session waiting for the group commit parses no more input;
 *           the hook resumes it after queueing its reply.
 * LIMITS    A transaction's envelope memory stops at
 *           limits.max_envelope_size and its recipients at max_recipients,
 *           both answered 452 4.5.3 as flow control, not counted toward
 *           max_errors.  No RCPT after the first BDAT chunk (503, from the
 *           command table).  limits.bare_newline holds for BDAT content
 *           too, except BODY=BINARYMIME.  More than SESS_MAX_HOPS
 *           Received: fields (smtp_hops) is a mail loop: 554 5.4.6.
 * FAILURE   Spool failures are 452 4.3.1 (the message is aborted, the
 *           session goes on).
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

/* Like Postfix's hopcount_limit: a message that already passed this many
 * MTAs is looping, and is refused instead of being relayed once more. */
#define SESS_MAX_HOPS  50

static void sess_commit_del(struct sess *s);


static void sess_txn_release(struct sess_txn *t);
static int  sess_sync_detach(struct sess *s);
static void sess_sync_settle(struct smtpd *d, int sync_rc);
static void sess_commit_async(struct smtpd *d);


void
sess_txn_free(struct sess *s)
{
    struct sess_txn *t = s->txn;

    if (t == NULL)
        return;
    sess_commit_del(s);
    if (sess_sync_detach(s))
        return;                     /* the group commit ends it */
    sess_txn_release(t);
    s->txn = NULL;
}


/* sess_txn_release - free a transaction and abort its message (a renamed
 * one stays in queue/: spool_abort removes only tmp/<id>). */
static void
sess_txn_release(struct sess_txn *t)
{
    size_t i;

    spool_abort(t->msg);            /* closes a kept fd not handed on */
    spool_env_free(t->kenv);
    smtpd_dkim_free(t->dkim);
    free(t->env.sender);
    free(t->env.envid);
    for (i = 0; i < t->env.nrcpt; i++) {
        free(t->env.rcpt[i].addr);
        free(t->env.rcpt[i].orcpt);
    }
    free(t->env.rcpt);
    free(t);
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
    struct smtpd *d = s->d;

    /* a full spool refuses every message alike: one warning per
     * episode (sess_queued() ends it), not one per message */
    if (rc == SPOOL_ENOSPC) {
        if (d->nospace++ == 0)
            log_warn("%s: %s failed for client [%s]:%u: no space (%s); new "
                "mail gets 452 until there is room again",
                s->txn && s->txn->id[0] ? s->txn->id : "-", what, s->ip,
                (unsigned)s->port, spool_errstr(d->spool));
        return;
    }
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
    /* Hand the file to delivery at the commit instead of having it
     * reopened, relocked and re-read (issue 16); where the spool cannot,
     * kenv stays NULL and delivery opens queue/<id> as before. */
    spool_env_free(t->kenv);
    t->kenv = NULL;
    if (spool_keep(t->msg, &t->kenv, &t->kfd, &t->koff) != SPOOL_OK)
        t->kenv = NULL;
    if ((s->flags & SF_SIGN) && s->d->dkim != NULL)
        t->dkim = smtpd_dkim_begin(s->d->dkim);
    rc = sess_received(s, t);
    if (rc != SPOOL_OK) {
        sess_spool_fail(s, "spool_write", rc);
        t->spool_rc = rc;
    }
    return SPOOL_OK;
}


/* sess_tls_required - RFC 8689 3: a "TLS-Required: No" field in the
 * header section (noted by the hop counter's pass, smtp_hops_tls_no())
 * goes into the envelope, unless MAIL had REQUIRETLS, which wins.  Once
 * per message: when the header section ends, or at the end of a message
 * that has no body.  Past the spool's write buffer the field is ignored:
 * the message keeps the normal TLS policy, the safe side. */
static void
sess_tls_required(struct sess *s)
{
    struct sess_txn *t = s->txn;
    int              rc;

    if (t->tlsreq_done)
        return;
    t->tlsreq_done = 1;
    if (t->env.requiretls || !smtp_hops_tls_no(&t->hops))
        return;
    rc = spool_mark_tls_optional(t->msg);
    if (rc == SPOOL_OK) {
        t->env.tls_optional = 1;
    } else if (rc == SPOOL_ELATE) {
        log_info("%s: TLS-Required: No ignored: header section larger "
            "than the spool's write buffer", t->id);
    } else {
        t->spool_rc = rc;
        sess_spool_fail(s, "spool_mark", rc);
    }
}


/* sess_queued - the message is committed: 250, log, hand to delivery. */
static void
sess_queued(struct sess *s, uint64_t size)
{
    struct sess_txn *t = s->txn;
    struct smtpd   *d = s->d;

    t->msg = NULL;                  /* spool_commit freed it */
    if (d->nospace > 0) {
        log_notice("spool has room again: %llu spool writes refused for "
            "lack of space meanwhile", (unsigned long long)d->nospace);
        d->nospace = 0;
    }
    sess_replyf(s, "250 2.0.0 Ok: queued as %s", t->id);
    log_ev(LOGL_INFO, "received", LOG_KVS(LKV_S("queue_id", t->id),
        LKV_S("from", t->env.sender), LKV_I("size", size),
        LKV_I("nrcpt", t->env.nrcpt), SESS_CLIENT(s),
        LKV_S("dkim", t->dkim_domain), LKV_S("tls_required",
        t->env.requiretls ? "requiretls" : t->env.tls_optional ? "no" :
        NULL)),
        "%s: from=<%s>, size=%llu, nrcpt=%zu, client=[%s]:%u%s%s%s",
        t->id, t->env.sender, (unsigned long long)size, t->env.nrcpt, s->ip,
        (unsigned)s->port, t->dkim_domain ? ", dkim=" : "",
        t->dkim_domain ? t->dkim_domain : "", t->env.requiretls ?
        ", tls_required=requiretls" : t->env.tls_optional ?
        ", tls_required=no" : "");
    STATUS_ADD(d->st->msgs_in, 1);
    s->njunk = 0;                   /* a client that sends mail is no idler */
    sess_push(s);                   /* the 250 first, then the delivery */
    if (t->kenv != NULL) {
        t->kenv->body_size = size;
        deliver_submit_kept(d->deliver, t->kenv, t->kfd, t->koff);
        t->kenv = NULL;             /* delivery's now, and the fd too */
    } else {
        deliver_submit(d->deliver, t->id);
    }
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

    sess_tls_required(s);           /* a message without a body */
    if (t->spool_rc != 0) {
        sess_storage_fail(s);
        return;
    }
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
    sess_enter(s, SS_COMMIT);
}


/* sess_emit - smtp_data span sink: count, enforce the size, spool. */
static int
sess_emit(void *arg, const char *p, size_t n)
{
    struct sess     *s = arg;
    struct sess_txn *t = s->txn;
    int              rc;

    t->bytes += n;
    smtp_hops_feed(&t->hops, p, n);
    if (t->too_big || t->spool_rc != 0)
        return 0;                   /* keep consuming, stop writing */
    if (t->bytes > s->d->cfg->max_message_size) {
        t->too_big = 1;
        return 0;
    }
    if (!t->tlsreq_done && smtp_hops_done(&t->hops)) {
        sess_tls_required(s);       /* before DKIM's room moves the body */
        if (t->spool_rc != 0)
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
        s->txn->id, s->txn->hops.hops, s->ip, (unsigned)s->port);
    sess_reply(s, "554 5.4.6 Error: too many hops (mail loop?)");
    sess_txn_free(s);
}


/* sess_data_end - the final dot was read: answer for the message. */
static void
sess_data_end(struct sess *s)
{
    struct sess_txn *t = s->txn;

    sess_enter(s, SS_CMD);
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
    } else if (t->hops.hops > SESS_MAX_HOPS) {
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

    sess_enter(s, SS_CMD);
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
    } else if (s->bdat_last && t->hops.hops > SESS_MAX_HOPS) {
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


void
sess_mail(struct sess *s, struct str arg)
{
    struct smtp_mail m;
    struct sess_txn *t;
    const char      *reply;

    if (smtp_parse_mail(arg, &m, &reply) < 0) {
        sess_reply(s, reply);
        return;
    }
    /* RFC 8689 2 and 4.1: a promise of TLS all the way cannot start on a
     * hop without it (the keyword is not offered there either) */
    if (m.requiretls && s->tp.ssl == NULL) {
        sess_reply(s, "530 5.7.10 REQUIRETLS needs a TLS session "
            "(STARTTLS first)");
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
    t->env.requiretls = m.requiretls;
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


void
sess_rcpt(struct sess *s, struct str arg)
{
    struct smtp_rcpt  r;
    struct sess_txn  *t = s->txn;
    struct spool_rcpt *sr;
    const char       *reply;
    size_t            need;

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


void
sess_data(struct sess *s, struct str arg)
{
    struct sess_txn *t = s->txn;

    (void)arg;                      /* none: the table said 501 */
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
    sess_enter(s, SS_DATA);
}


/* sess_bdat - a chunk follows the command whatever the verdict, so the
 * session always reads exactly its size; the verdict is sent after it. */
void
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
    /* the table's 503, sent once the chunk is read */
    s->bdat_err = sess_cmd_denied(s, SMTP_BDAT);
    if (s->bdat_err == NULL && t->msg == NULL &&
        sess_msg_open(s) != SPOOL_OK) {
        s->bdat_err = "452 4.3.1 Insufficient system storage";
        sess_txn_free(s);           /* the transaction failed */
        t = NULL;
    }
    if (t != NULL && s->bdat_err == NULL)
        t->used_bdat = 1;
    sess_enter(s, SS_BDAT);
    if (size == 0)
        sess_bdat_end(s);
}


/* sess_data_step - feed DATA content to the byte machine. */
int
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
int
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


/* --- the group commit ------------------------------------------------ */

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


/* --- the group commit off the loop (spool_sync_start) ----------------- */

static void
sess_cq_push(struct sess_cq **q, size_t *n, size_t *cap, struct sess_cq e)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *q = xrealloc(*q, *cap * sizeof(**q));
    }
    (*q)[(*n)++] = e;
}


/* sess_sync_detach - s is leaving while its message waits for the sync:
 * the entry keeps the transaction (the file is in queue/ already) and
 * ends it when the sync is done.  1 if s was waiting, else 0. */
static int
sess_sync_detach(struct sess *s)
{
    struct smtpd *d = s->d;
    size_t         i;

    if (!(s->flags & SF_SYNCQ))
        return 0;
    s->flags &= ~SF_SYNCQ;
    for (i = 0; i < d->nwait; i++)
        if (d->cq_wait[i].s == s)
            d->cq_wait[i].s = NULL;
    for (i = 0; i < d->nsync; i++)
        if (d->cq_sync[i].s == s)
            d->cq_sync[i].s = NULL;
    s->txn = NULL;
    return 1;
}


/* sess_sync_next - start a sync for the messages renamed so far, unless
 * one runs (they wait for the next). */
static void
sess_sync_next(struct smtpd *d)
{
    struct sess_cq *q;
    size_t          cap;
    int             rc;

    if (d->nwait == 0 || d->nsync > 0 || spool_sync_busy(d->spool))
        return;
    q = d->cq_sync;                 /* swap: cq_sync is empty */
    cap = d->synccap;
    d->cq_sync = d->cq_wait;
    d->synccap = d->waitcap;
    d->nsync = d->nwait;
    d->cq_wait = q;
    d->waitcap = cap;
    d->nwait = 0;
    if ((rc = spool_sync_start(d->spool)) != SPOOL_OK) {
        /* none of them is durable: each gets its 4xx from the settle */
        log_warn("group commit: %s", spool_errstr(d->spool));
        for (size_t i = 0; i < d->nsync; i++)
            d->cq_sync[i].rc = rc;
        sess_sync_settle(d, rc);
    }
}


/* sess_gone_queued - the message of a client that left before its 250 is
 * durable in queue/: deliver it (the client may send it again: a
 * duplicate, never a loss). */
static void
sess_gone_queued(struct smtpd *d, struct sess_txn *t, uint64_t size)
{
    t->msg = NULL;
    log_info("%s: from=<%s>, size=%llu, nrcpt=%zu: queued after its "
        "client left (no 250 was seen)", t->id, t->env.sender,
        (unsigned long long)size, t->env.nrcpt);
    STATUS_ADD(d->st->msgs_in, 1);
    if (t->kenv != NULL) {
        t->kenv->body_size = size;
        deliver_submit_kept(d->deliver, t->kenv, t->kfd, t->koff);
        t->kenv = NULL;
    } else {
        deliver_submit(d->deliver, t->id);
    }
}


/* sess_sync_settle - the running sync ended with sync_rc: answer (or
 * end) every message it covered, resume their sessions, start the next. */
static void
sess_sync_settle(struct smtpd *d, int sync_rc)
{
    struct sess_cq    *q = d->cq_sync;
    size_t             i, n = d->nsync;
    struct spool_msg **ms = xmalloc((n ? n : 1) * sizeof(*ms));
    int               *rcs = xmalloc((n ? n : 1) * sizeof(*rcs));
    struct sess      **ss = xmalloc((n ? n : 1) * sizeof(*ss));

    for (i = 0; i < n; i++) {
        ms[i] = q[i].t->msg;
        rcs[i] = q[i].rc;
    }
    (void)spool_commit_settle(d->spool, ms, n, rcs, sync_rc);
    d->nsync = 0;                   /* q stays valid until the next swap */
    for (i = 0; i < n; i++) {
        struct sess     *s = q[i].s;
        struct sess_txn *t = q[i].t;

        ss[i] = s;
        if (s == NULL) {
            if (rcs[i] == SPOOL_OK)
                sess_gone_queued(d, t, q[i].size);
            sess_txn_release(t);    /* aborts a message not committed */
            continue;
        }
        s->flags &= ~SF_SYNCQ;
        sess_enter(s, SS_CMD);
        if (rcs[i] == SPOOL_OK) {
            sess_queued(s, q[i].size);
        } else {
            sess_spool_fail(s, "spool_commit", rcs[i]);
            sess_storage_fail(s);
        }
    }
    /* Resume after every reply is queued (as sess_commit_hook does). */
    for (i = 0; i < n; i++)
        if (ss[i] != NULL && ss[i]->state == SS_CMD)
            sess_process(ss[i]);
    free(ms);
    free(rcs);
    free(ss);
    sess_sync_next(d);
}


/* sess_on_sync - the spool's eventfd: the sync thread is done. */
static void
sess_on_sync(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct smtpd *d = arg;
    int           rc;

    (void)loop;
    (void)fd;
    (void)events;
    if ((rc = spool_sync_reap(d->spool)) == MTA_AGAIN)
        return;
    if (rc != SPOOL_OK)
        log_warn("group commit: %s", spool_errstr(d->spool));
    sess_sync_settle(d, rc);
}


/* sess_commit_async - the hook's work with the sync off the loop: rename
 * what finished this turn into queue/ now (a rename failure is answered
 * at once), and start a sync unless one runs.  The sessions stay in
 * SS_COMMIT, parsing nothing, until sess_sync_settle answers them. */
static void
sess_commit_async(struct smtpd *d)
{
    struct sess      **ss;
    struct spool_msg **ms;
    int               *rcs;
    size_t             i, n;

    while (d->ncommit > 0) {
        n = d->ncommit;
        ss = xmalloc(n * sizeof(*ss));
        ms = xmalloc(n * sizeof(*ms));
        rcs = xcalloc(n, sizeof(*rcs));
        for (i = 0; i < n; i++) {
            ss[i] = d->commit[i];
            ss[i]->flags &= ~SF_COMMITQ;
            ms[i] = ss[i]->txn->msg;
        }
        d->ncommit = 0;
        (void)spool_commit_rename(d->spool, ms, n, rcs);
        for (i = 0; i < n; i++) {
            struct sess *s = ss[i];

            if (rcs[i] == SPOOL_OK) {
                sess_cq_push(&d->cq_wait, &d->nwait, &d->waitcap,
                    (struct sess_cq){ s, s->txn, spool_msg_size(ms[i]),
                    SPOOL_OK });
                /* parses nothing until its 250; input that arrives
                 * meanwhile is unwatched then (sess_on_io) */
                s->flags |= SF_SYNCQ;
                ss[i] = NULL;
                continue;
            }
            sess_enter(s, SS_CMD);
            sess_spool_fail(s, "spool_commit", rcs[i]);
            sess_storage_fail(s);
        }
        for (i = 0; i < n; i++)
            if (ss[i] != NULL && ss[i]->state == SS_CMD)
                sess_process(ss[i]);
        free(ss);
        free(ms);
        free(rcs);
    }
    sess_sync_next(d);
}


void
sess_sync_setup(struct smtpd *d)
{
    d->sync_fd = -1;
    if (!d->cfg->spool_fsync || spool_sync_fd(d->spool) < 0)
        return;
    if (ev_watch(d->loop, spool_sync_fd(d->spool), EV_READ, sess_on_sync,
        d) != 0) {
        log_warn("group commit: watching the sync eventfd: %s; syncing "
            "inline", strerror(errno));
        return;
    }
    d->sync_fd = spool_sync_fd(d->spool);
}


/* sess_sync_free - the worker's exit (sessions already freed): messages
 * still waiting stay in queue/ for the next start, unanswered. */
void
sess_sync_free(struct smtpd *d)
{
    size_t i;

    spool_sync_wait(d->spool);
    for (i = 0; i < d->nwait; i++)
        sess_txn_release(d->cq_wait[i].t);
    for (i = 0; i < d->nsync; i++)
        sess_txn_release(d->cq_sync[i].t);
    d->nwait = d->nsync = 0;
    if (d->sync_fd >= 0)
        ev_unwatch(d->loop, d->sync_fd);
    d->sync_fd = -1;
    free(d->cq_wait);
    free(d->cq_sync);
    d->cq_wait = d->cq_sync = NULL;
}


/* sess_commit_hook - the group commit (spool.fsync): one syncfs for every
 * message finished this turn, then their 250s, then the input they had
 * pipelined behind the dot.  Runs before sess_flush_hook. */
void
sess_commit_hook(struct ev_loop *loop, void *arg)
{
    struct smtpd     *d = arg;
    struct sess      **ss;
    struct spool_msg **ms;
    int               *rcs;
    uint64_t          *sizes;
    size_t             i, n;

    (void)loop;
    if (d->sync_fd >= 0) {
        sess_commit_async(d);
        return;
    }
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

            sess_enter(s, SS_CMD);
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
