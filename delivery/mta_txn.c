/*
 * mta_txn.c - one transaction on a ready connection of the outbound
 * client: the checks before any command (the envelope's bytes, SMTPUTF8,
 * BINARYMIME), MAIL/RCPT with their ESMTP parameters, pipelined with
 * DATA or BDAT when offered, and the replies to them: each recipient's
 * verdict, the next command, the hand-back.  The phases and their
 * dispatch are mta_session.c; the content goes out in mta_body.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/util.h"
#include "smtp/smtp.h"
#include "spool/spool.h"
#include "delivery/mta.h"
#include "tlspol/tlspol.h"

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

    for (i = t->first; i < t->nrcpt; i++)
        mta_set(t, i, MTA_BOUNCE, why, c->name);
    mta_post(c->r, t);
}


/* mta_rcpt_cmd - queue "RCPT TO:<a>" for recipient k of the current
 * slice, with DSN parameters when offered. */
static void
mta_rcpt_cmd(struct mta_conn *c, size_t k)
{
    const struct mta_txn    *t = c->txn;
    const struct spool_rcpt *rc = &t->env->rcpt[t->rcpt[t->first + k]];
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
int
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


/* mta_domain - the domain of address a (after its last '@'; "" for
 * none). */
static const char *
mta_domain(const char *a)
{
    const char *at = strrchr(a, '@');

    return at != NULL ? at + 1 : "";
}


/* mta_slice - how many of t's recipients from t->first go in the next
 * transaction on c: all that are left, or fewer to stay within the
 * peer's LIMITS RCPTMAX and RCPTDOMAINMAX (RFC 9422 4.2, 4.3) and the
 * site's shaping recipients_per_message; at least
 * one.  Only a route to a smarthost gives one transaction several
 * domains (an mx route's recipients share theirs). */
static size_t
mta_slice(const struct mta_conn *c, const struct mta_txn *t)
{
    size_t       n = t->nrcpt - t->first, k, j, ndom = 0;
    const char **dom;

    if (c->peer.rcptmax > 0 && n > c->peer.rcptmax)
        n = c->peer.rcptmax;
    if (c->dest->shape_e >= 0 &&
        mta_shape_lim(c)->recipients_per_message > 0 &&
        n > mta_shape_lim(c)->recipients_per_message)
        n = mta_shape_lim(c)->recipients_per_message;   /* shaping */
    if (c->peer.rcptdomainmax == 0 || n <= c->peer.rcptdomainmax)
        return n;                   /* cannot hold more domains than that */
    dom = xcalloc(c->peer.rcptdomainmax, sizeof(*dom));
    for (k = 0; k < n; k++) {
        const char *d = mta_domain(t->env->rcpt[t->rcpt[t->first + k]].addr);

        for (j = 0; j < ndom && strcasecmp(dom[j], d) != 0; j++)
            ;
        if (j < ndom)
            continue;
        if (ndom == c->peer.rcptdomainmax)
            break;                  /* a domain too many: it waits */
        dom[ndom++] = d;
    }
    free(dom);
    return k > 0 ? k : 1;
}


/* mta_begin - queue the commands of t on c (session ready, prechecked),
 * behind an RSET when rset is set (a reused connection with PIPELINING). */
void
mta_begin(struct mta_conn *c, struct mta_txn *t, int rset)
{
    const struct spool_env *env = t->env;
    char                    size[40] = "", body[24] = "";
    size_t                  k;

    c->tx.rset_pending = rset;
    if (rset)
        mta_cmd(c, "RSET");
    t->count = mta_slice(c, t);
    if (t->count > c->rst_cap) {
        free(c->rst);
        c->rst = xcalloc(t->count, 1);
        c->rst_cap = t->count;
    }
    memset(c->rst, R_PENDING, t->count);
    c->ntxn++;
    c->txn = t;
    t->accepted = 0;
    c->tx.nreply = 0;
    c->tx.nsent = 0;
    c->tx.mail_failed = 0;
    c->tx.empty_data = 0;
    c->tx.pipelining = (c->caps & SMTP_CAP_PIPELINING) != 0;
    c->tx.bdat = (c->caps & SMTP_CAP_CHUNKING) != 0;
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
            tls_reqtls_mail_param(env, c->caps));
    }
    c->tx.nsent = 1;
    c->tx.piped = 0;
    if (c->tx.pipelining) {
        for (k = 0; k < t->count; k++)
            mta_rcpt_cmd(c, k);
        c->tx.nsent += t->count;
        if (!c->tx.bdat) {
            mta_cmd(c, "DATA");
            c->tx.nsent++;
        } else if (env->body_size <= MTA_PIPE_BODY_MAX) {
            /* RFC 3030 4.2 (BDAT may be pipelined): the body follows at
             * once; the replies come in order (mta_piped_reply), a
             * refused RCPT or MAIL makes the peer refuse the BDAT and
             * drop its bytes, and the BDAT reply counts only for the
             * recipients it accepted */
            c->tx.piped = 1;
            c->tx.nsent++;
        }
    }
    if (rset)                   /* the first reply due is the RSET's */
        mta_enter_for(c, C_TXN, c->r->t.helo_ms);
    else
        mta_enter(c, C_TXN);
    if (c->tx.piped)
        mta_body_start(c);
}


/* mta_idle - the transaction is over and every reply is in: hand the
 * txn back, or, when the peer's LIMITS left some of its recipients for
 * another transaction, keep it for its next slice (on c again, or on a
 * fresh connection past MAILMAX: mta_conn_next); then reuse c.  A slice
 * is no failed attempt: t is handed back once, with every result.
 * Returns 1 when c was closed. */
int
mta_idle(struct mta_conn *c)
{
    struct mta_txn *t = c->txn;

    c->txn = NULL;
    c->reused = 1;
    /* RFC 5321 4.5.3.1.10: a peer without LIMITS (or under a tighter
     * limit than it announced) answers 452 past its recipient limit; the
     * refused tail goes in the next slice.  Only after an accepted
     * recipient: every slice takes one at least, so this ends */
    while (t != NULL && t->accepted > 0 && !c->tx.mail_failed &&
        t->count > 0 && c->rst[t->count - 1] == R_LATER)
        t->count--;
    if (t != NULL && !c->tx.mail_failed &&
        t->first + t->count < t->nrcpt) {
        t->first += t->count;
        t->count = 0;               /* nothing of the next slice sent */
        c->txn = t;
    } else if (t != NULL) {
        mta_post(c->r, t);
    }
    return mta_conn_next(c);
}


/* mta_final - apply a final reply to every accepted recipient. */
void
mta_final(struct mta_conn *c, const struct smtp_reply *rp)
{
    struct mta_txn *t = c->txn;
    size_t            i;

    for (i = 0; i < t->count; i++) {
        if (c->rst[i] == R_ACCEPTED) {
            mta_set(t, t->first + i, mta_status_of(rp->code), rp->text,
                c->name);
            c->rst[i] = R_FINAL;
        }
    }
}


/* mta_t_reply - the limit for reply k of a transaction: 0 MAIL, 1..count
 * RCPT, then DATA. */
static uint64_t
mta_t_reply(const struct mta_conn *c, size_t k)
{
    if (k == 0)
        return c->r->t.mail_ms;
    return k <= c->txn->count ? c->r->t.rcpt_ms : c->r->t.data_ms;
}


/* mta_too_many - is rp RFC 5321's "452 too many recipients" (4.5.3, or
 * no enhanced code), not a 452 for a full mailbox or system (4.2.x,
 * 4.3.x)? */
static int
mta_too_many(const struct smtp_reply *rp)
{
    char e[16];

    if (rp->code != 452)
        return 0;
    smtp_enhanced(rp->text, "4.0.0", e, sizeof(e));
    return strcmp(e, "4.5.3") == 0 || strcmp(e, "4.0.0") == 0;
}


/* mta_env_reply - reply k of a transaction, to MAIL (k 0) or to RCPT
 * k-1 of the slice: note its verdict.  A refused MAIL is the verdict for
 * every recipient left, those of later slices too. */
static void
mta_env_reply(struct mta_conn *c, const struct smtp_reply *rp, size_t k)
{
    struct mta_txn *t = c->txn;
    size_t            i;

    if (k == 0) {                           /* MAIL */
        if (rp->code / 100 != 2) {
            c->tx.mail_failed = 1;
            for (i = t->first; i < t->nrcpt; i++)
                mta_set(t, i, mta_status_of(rp->code), rp->text,
                    c->name);
            memset(c->rst, R_FINAL, t->count);
        }
    } else if (k <= t->count) {             /* RCPT k-1 */
        i = k - 1;
        if (!c->tx.mail_failed) {
            if (rp->code / 100 == 2) {
                c->rst[i] = R_ACCEPTED;
                t->accepted++;
            } else {
                mta_set(t, t->first + i, mta_status_of(rp->code),
                    rp->text, c->name);
                c->rst[i] = mta_too_many(rp) ? R_LATER : R_FINAL;
            }
        }
    }
}


/* mta_piped_rset - the reply to an RSET pipelined ahead of MAIL (a
 * reused connection).  Returns 1 when c was closed: a refused RSET (or
 * none, mta_lost) starts the transaction over on a fresh connection. */
static int
mta_piped_rset(struct mta_conn *c, const struct smtp_reply *rp)
{
    char why[1024];

    c->tx.rset_pending = 0;
    if (rp->code / 100 == 2)
        return 0;
    snprintf(why, sizeof(why), "host %s said: %s (in reply to RSET)",
        c->name, rp->text);
    c->tx.rset_pending = 1;                /* restart like a dead conn */
    mta_lost(c, why);
    return 1;
}


/* mta_piped_reply - a reply to RSET, MAIL or RCPT of a transaction whose
 * BDAT went behind them (c->tx.piped): it comes while the body is still
 * being written (C_BODY) or after (C_DOT).  Only the verdict is noted;
 * the timer and the writing go on.  The BDAT's own reply, last, is the
 * end-of-data reply (C_DOT in mta_reply).  Returns 1 when c was closed. */
int
mta_piped_reply(struct mta_conn *c, const struct smtp_reply *rp)
{
    if (c->tx.rset_pending)
        return mta_piped_rset(c, rp);
    mta_env_reply(c, rp, c->tx.nreply++);
    return 0;
}


/* mta_txn_reply - one reply within RSET (pipelined ahead), MAIL, RCPT,
 * DATA.  Returns 1 when c was closed. */
int
mta_txn_reply(struct mta_conn *c, const struct smtp_reply *rp)
{
    struct mta_txn *t = c->txn;
    size_t            k;

    if (c->tx.rset_pending)
        return mta_piped_rset(c, rp);
    k = c->tx.nreply++;

    if (k <= t->count) {                    /* MAIL, RCPT */
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
            c->tx.empty_data = 1;
            mta_enter(c, C_DOT);
            return mta_push(c);
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
    if (c->tx.mail_failed)
        return mta_idle(c);
    if (c->tx.nsent <= t->count) {             /* not pipelining: next RCPT */
        mta_rcpt_cmd(c, c->tx.nsent - 1);
        c->tx.nsent++;
    } else if (c->tx.nsent == t->count + 1 && t->accepted > 0) {
        c->tx.nsent++;
        if (c->tx.bdat) {
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
    mta_arm(c, mta_t_reply(c, c->tx.nreply));
    if (mta_flush(c) < 0) {
        mta_lost(c, c->lasterr);
        return 1;
    }
    return 0;
}
