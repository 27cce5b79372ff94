/*
 * mta_tls.c - STARTTLS (RFC 3207) on an outbound connection, under the
 * host's requirement (struct tls_req; tlspol.h decides, this file acts):
 * whether to send STARTTLS after EHLO, the handshake on the loop with a
 * cached session offered, the verdict, the fall-back to plaintext or the
 * deferral, and each attempt's outcome for the log and TLS-RPT.  The
 * conversation around it is mta_session.c; the types are in mta.h.
 */
#include <stdio.h>
#include <string.h>

#include <openssl/ssl.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/net.h"
#include "common/util.h"
#include "spool/spool.h"
#include "delivery/mta.h"
#include "tlspol/tlspol.h"

/* mta_tls_report - c's TLS attempt to the relay's observer (the log). */
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
void
mta_tlsrpt(struct mta_conn *c, const char *failure, const char *reason)
{
    char ip[64] = "";

    if (!tls_rpt_enabled() || c->r->tls_ctx == NULL)
        return;                     /* no client context: our own doing */
    if (c->cur > 0 && c->cur <= c->naddr)     /* cur: the next to try */
        (void)util_sockaddr_ip((const struct sockaddr *)
            &c->addr[c->cur - 1].ss, ip, sizeof(ip));
    tls_rpt_outcome(&c->tls, failure, ip, reason);
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
        tls_reqtls_tls_failed(c->name, why, reason, sizeof(reason));
        util_strlcpy(why, reason, sizeof(why));
        c->perm = 1;
    }
    mta_lost(c, why);
    return 1;
}


/* mta_tls_ehlo - after a 2xx EHLO in plaintext: STARTTLS or not, as
 * the level says.  Returns 1 when c was closed. */
int
mta_tls_ehlo(struct mta_conn *c)
{
    int offered = (c->caps & SMTP_CAP_STARTTLS) != 0 && c->r->tls_ctx != NULL;

    switch (tls_decide_ehlo(&c->tls, offered,
        c->tls_fallback == MTA_TLS_PLAIN)) {
    case TLS_GO_STARTTLS:
        mta_cmd(c, "STARTTLS");
        mta_enter(c, C_STARTTLS);
        return mta_push(c);
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
        if (c->tls.level != TLS_NONE &&
            c->tls_fallback != MTA_TLS_PLAIN && c->r->tls_ctx != NULL &&
            !(c->caps & SMTP_CAP_STARTTLS))
            mta_tlsrpt(c, TLS_FAIL_STARTTLS, NULL);
        return mta_conn_next(c);
    }
}


/* mta_tls_refused - STARTTLS got no 220: defer a mandatory level, else
 * go on in plaintext (the EHLO capabilities still hold). */
int
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
int
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
        c->tls_fallback = MTA_TLS_RETRY_PLAIN;  /* same host (Postfix) */
        mta_lost(c, why);
        return 1;
    }
    snprintf(why, sizeof(why), "the TLS handshake failed (%.200s)", err);
    return mta_tls_defer(c, why);
}


/* mta_tls_step - drive the handshake; when done, judge the peer and
 * send EHLO again (RFC 3207 4.2: forget what was learnt before).
 * Returns 1 when c was closed or moved on. */
int
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
    memset(&c->peer, 0, sizeof(c->peer));
    mta_cmd(c, "EHLO %s", mta_egress_helo(c));
    mta_enter(c, C_EHLO);
    return mta_push(c);
}


/* mta_tls_new_session - OpenSSL made a session on one of our
 * connections: keep it for the next connection to the same host. */
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
int
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
    c->in.off = c->in.len = 0;
    mta_enter(c, C_TLS);
    return mta_tls_step(c);
}
