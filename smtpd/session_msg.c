/*
 * session_msg.c - the mail transaction of an inbound session: MAIL, RCPT,
 * DATA and BDAT, the envelope, the spool writer and the verdict on the
 * content (split from session.c; the commit is session_commit.c, DKIM
 * session_dkim.c).
 *
 * PURPOSE   DATA content streams from the read buffer through
 *           smtp_data_feed() straight into spool_write(): no line
 *           splitting, no allocation per line.  The transaction (struct
 *           sess_txn) exists from MAIL to the end of the message.
 * VERDICT   DATA's final dot and each BDAT chunk end in one function,
 *           sess_msg_verdict(): bare newlines, size and hops are refused
 *           (and logged) alike for both.
 * COMMIT    250 after the final dot only once spool_commit() returned OK;
 *           with spool.fsync the message joins the group commit instead
 *           (session_commit.c) and its session parses no more input
 *           until it is answered.
 * LIMITS    A transaction's envelope memory stops at
 *           limits.max_envelope_size and its recipients at max_recipients,
 *           both answered 452 4.5.3 as flow control, not counted toward
 *           max_errors; a session's transactions at
 *           limits.max_transactions, when set (421 4.7.0).  EHLO
 *           announces both counts (LIMITS RCPTMAX, MAILMAX).  No RCPT after the first BDAT chunk (503, from the
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
#include "events/events.h"
#include "smtpd/smtpd.h"
#include "smtpd/smtpd_int.h"

/* Like Postfix's hopcount_limit: a message that already passed this many
 * MTAs is looping, and is refused instead of being relayed once more. */
#define SESS_MAX_HOPS  50


void
sess_txn_free(struct sess *s)
{
    struct sess_txn *t = s->txn;

    if (t == NULL)
        return;
    sess_milter_abort(s);           /* the milters end it too */
    if (sess_commit_leave(s))
        return;                     /* the group commit ends it */
    sess_txn_release(t);
    s->txn = NULL;
}


/* sess_txn_release - free a transaction and abort its message (a renamed
 * one stays in queue/: spool_abort removes only tmp/<id>). */
void
sess_txn_release(struct sess_txn *t)
{
    size_t i;

    spool_abort(t->msg);            /* closes a kept fd not handed on */
    spool_env_free(t->kenv);
    smtpd_dkim_free(t->dkim);
    free(t->env.sender);
    free(t->env.envid);
    free(t->env.auth_user);
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
void
sess_spool_fail(struct sess *s, const char *what, int rc)
{
    struct smtpd *d = s->d;

    /* a full spool refuses every message alike: one warning per
     * episode (sess_queued() ends it), not one per message */
    if (rc == SPOOL_ENOSPC) {
        if (d->nospace++ == 0)
            log_warn("%s: %s failed for client [%s]:%u session=%s: no "
                "space (%s); new mail gets 452 until there is room again",
                s->txn && s->txn->id[0] ? s->txn->id : "-", what, s->ip,
                (unsigned)s->port, s->sid, spool_errstr(d->spool));
        return;
    }
    log_warn("%s: %s failed for client [%s]:%u session=%s: error (%s)",
        s->txn && s->txn->id[0] ? s->txn->id : "-", what, s->ip,
        (unsigned)s->port, s->sid, spool_errstr(d->spool));
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
     * reopened, relocked and re-read; where the spool cannot,
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
            "than the spool's write buffer; session=%s", t->id, s->sid);
    } else {
        t->spool_rc = rc;
        sess_spool_fail(s, "spool_mark", rc);
    }
}


void
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
    if (s->milter != NULL && sess_milter_eom(s))
        return;                     /* committed once the milters say */
    sess_finish_commit(s, size);
}


/* sess_finish_commit - a finished message of size bytes: commit it now
 * (no fsync) or join this turn's group commit. */
void
sess_finish_commit(struct sess *s, uint64_t size)
{
    struct sess_txn *t = s->txn;
    struct smtpd    *d = s->d;
    int              rc;

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
    sess_commit_add(s);
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


/* sess_msg_reject - refuse the message for a policy verdict: count it,
 * log it (what: the reason in words), answer reply, end the txn. */
static void
sess_msg_reject(struct sess *s, enum status_reject why, const char *reason,
    const char *what, const char *reply)
{
    struct sess_txn *t = s->txn;
    char             dsn[16];

    SESS_REJECT(s, why);
    log_ev(LOGL_INFO, "reject", LOG_KVS(LKV_S("queue_id", t->id),
        SESS_CLIENT(s), LKV_S("reason", reason),
        LKV_S("dsn", logfmt_dsn(reply, dsn, sizeof(dsn)))),
        "%s: reject: %s from %s:%u session=%s", t->id, what, s->ip,
        (unsigned)s->port, s->sid);
    sess_reply(s, reply);
    sess_txn_free(s);
}


/* sess_msg_verdict - the one answer to the end of DATA content (last) or
 * of a BDAT chunk: a refusal, a storage failure, the commit of the
 * message (last), or the count of a chunk.  bare: a bare CR or LF the
 * policy refuses was seen.  The hop count is whole only at the end. */
static void
sess_msg_verdict(struct sess *s, int bare, int last)
{
    struct sess_txn *t = s->txn;
    char             what[64];

    sess_enter(s, SS_CMD);
    if (bare) {
        sess_msg_reject(s, STATUS_REJ_BARE_NEWLINE, "bare_newline",
            "bare <CR> or <LF> in message",
            "550 5.5.2 Error: bare <CR> or <LF> received");
    } else if (t->too_big) {
        sess_msg_reject(s, STATUS_REJ_TOO_LARGE, "too_large",
            "message too large", "552 5.3.4 Message size exceeds fixed "
            "limit");
    } else if (last && t->hops.hops > SESS_MAX_HOPS) {
        snprintf(what, sizeof(what), "too many hops (%u Received: headers)",
            t->hops.hops);
        sess_msg_reject(s, STATUS_REJ_LOOP, "mail_loop", what,
            "554 5.4.6 Error: too many hops (mail loop?)");
    } else if (t->spool_rc != 0) {
        sess_storage_fail(s);
    } else if (last) {
        sess_finish_msg(s);
    } else {
        sess_replyf(s, "250 2.0.0 Ok: %llu octets received",
            (unsigned long long)t->bytes);
    }
}


/* sess_data_end - the final dot was read. */
static void
sess_data_end(struct sess *s)
{
    sess_msg_verdict(s, s->txn->dp.bad_newline &&
        !s->d->cfg->bare_newline_accept, 1);
}


/* sess_bdat_end - a whole chunk was read: the 503 or 452 decided at the
 * BDAT command (the chunk was dropped), else the verdict.  A CR that
 * ends the last chunk is bare too. */
static void
sess_bdat_end(struct sess *s)
{
    struct sess_txn *t = s->txn;

    if (s->bdat_err != NULL) {
        sess_enter(s, SS_CMD);
        sess_reply(s, s->bdat_err);
        s->bdat_err = NULL;
        return;
    }
    sess_msg_verdict(s, t->bdat_bare || (s->bdat_last && t->bdat_cr),
        s->bdat_last);
}


/* sess_mail_spent - limits.max_transactions (EHLO LIMITS MAILMAX): one
 * MAIL past it is answered 421 4.7.0 and the session closed, so a
 * client that ignored the limit reconnects for the rest instead of
 * deferring it.  Returns 1 when it was, else 0. */
static int
sess_mail_spent(struct sess *s)
{
    const struct config *cfg = s->d->cfg;
    char                 text[400];

    if (cfg->max_transactions == 0 ||
        s->nmail < (uint32_t)cfg->max_transactions)
        return 0;
    SESS_LOG_INFO(s, "too many transactions from [%s]:%u; session=%s",
        s->ip, (unsigned)s->port, s->sid);
    snprintf(text, sizeof(text), "421 4.7.0 %s Error: too many "
        "transactions in one session (MAILMAX=%d)", cfg->hostname,
        cfg->max_transactions);
    sess_close_after(s, text);
    return 1;
}


void
sess_mail(struct sess *s, struct str arg)
{
    struct smtp_mail m;
    struct sess_txn *t;
    const char      *reply;

    if (sess_mail_spent(s))
        return;
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
    t->size_decl = m.size;
    if (smtpd_auth_user(s->auth) != NULL)
        t->env.auth_user = xstrdup(smtpd_auth_user(s->auth));
    memcpy(t->sid, s->sid, sizeof(t->sid));
    s->txn = t;
    s->nmail++;
    if (s->milter != NULL && sess_milter_mail(s, arg))
        return;                     /* answered once the milters say */
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
        log_warn("route lookup for <%s> failed: %s; session=%s", addr,
            router_errstr(d->router), s->sid);
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
            "denied; from=<%s> to=<%s> helo=<%s> session=%s", s->ip,
            (unsigned)s->port, addr, s->txn->env.sender, addr,
            s->helo ? s->helo : "", s->sid);
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
            "reject: RCPT from [%s]:%u: %d %s; to=<%s> session=%s", s->ip,
            (unsigned)s->port, res->route.code, res->route.text, addr,
            s->sid);
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
    if (sess_rcpt_route(s, r.addr) < 0 || sess_grey_rcpt(s, r.addr) < 0 ||
        sess_quota_rcpt(s, r.addr) < 0)
        return;
    if (s->milter != NULL && sess_milter_rcpt(s, &r, arg))
        return;                     /* added once the milters say */
    sess_rcpt_add(s, &r);
}


/* sess_rcpt_add - r joins the envelope: 250. */
void
sess_rcpt_add(struct sess *s, const struct smtp_rcpt *r)
{
    struct sess_txn   *t = s->txn;
    struct spool_rcpt *sr;
    size_t             need;

    need = strlen(r->addr) + 1 + (r->orcpt[0] ? strlen(r->orcpt) + 1 : 0) +
        2 * sizeof(*sr);
    t->env_bytes += need;
    if (t->env.nrcpt == t->rcap) {
        t->rcap = t->rcap ? t->rcap * 2 : 4;
        t->env.rcpt = xrealloc(t->env.rcpt, t->rcap * sizeof(*t->env.rcpt));
    }
    sr = &t->env.rcpt[t->env.nrcpt++];
    memset(sr, 0, sizeof(*sr));
    sr->addr = xstrdup(r->addr);
    sr->orcpt = r->orcpt[0] ? xstrdup(r->orcpt) : NULL;
    sr->notify = r->notify;
    sess_reply(s, "250 2.1.5 Ok");
}


void
sess_data(struct sess *s, struct str arg)
{
    struct sess_txn *t = s->txn;
    const char      *reply;

    (void)arg;                      /* none: the table said 501 */
    if (t->env.body == SMTP_BODY_BINARYMIME) {
        sess_reply(s, "503 5.5.1 Error: BODY=BINARYMIME requires BDAT");
        return;
    }
    if ((reply = sess_quota_data(s)) != NULL) {
        sess_reply_flow(s, reply);
        return;
    }
    if (events_full(s->d->events)) {
        sess_reply(s, SESS_EVENTS_FULL);
        return;
    }
    if (sess_msg_open(s) != SPOOL_OK) {
        sess_storage_fail(s);
        return;
    }
    smtp_data_init(&t->dp, s->d->cfg->bare_newline_accept);
    if (s->milter != NULL && sess_milter_data(s))
        return;                     /* the 354 once the milters say */
    sess_data_go(s);
}


/* sess_data_go - the 354: the content follows. */
void
sess_data_go(struct sess *s)
{
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
        (s->bdat_err = sess_quota_data(s)) != NULL) {
        sess_txn_free(s);           /* as for a full spool: RSET-like */
        t = NULL;
    } else if (s->bdat_err == NULL && t->msg == NULL &&
        events_full(s->d->events)) {
        s->bdat_err = SESS_EVENTS_FULL;
        sess_txn_free(s);           /* the transaction failed */
        t = NULL;
    }
    if (s->bdat_err == NULL && t != NULL && t->msg == NULL &&
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
        return MTA_AGAIN;
    r = smtp_data_feed(&s->txn->dp, buf_head(&s->in), buf_avail(&s->in),
        &used, sess_emit, s);
    buf_consume(&s->in, r == 1 ? used : buf_avail(&s->in));
    if (r == 1)
        sess_data_end(s);
    return 0;
}


/* sess_bdat_step - copy (or drop) up to the rest of the chunk. */
int
sess_bdat_step(struct sess *s)
{
    size_t n = buf_avail(&s->in);

    if (n == 0)
        return MTA_AGAIN;
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
    return 0;
}
