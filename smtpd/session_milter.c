/*
 * session_milter.c - a session's milters (milter/): the stages asked at
 * connect, HELO, MAIL, RCPT and the end of the message, the session
 * waiting on the loop for each verdict, and the milters' edits made what
 * the spool holds before the commit.
 *
 * STAGES    The chain connects at the first HELO/EHLO and is sent the
 *           connect stage, then HELO (a client refused before the
 *           greeting, or that never says HELO, costs the milters
 *           nothing); a refusal at connect is that command's answer, and
 *           the session closes.  HELO, MAIL and RCPT wait for their verdict
 *           before the 250 (a refused RCPT is not added; a refused MAIL
 *           ends the transaction); so does DATA, before its 354 (BDAT
 *           has no such point: its milters get DATA with the message).
 *           The message is sent from its spool
 *           file once spool_finish() wrote it, before the commit: the
 *           250 after DATA (or the last BDAT) comes only after the
 *           milters' end-of-message verdict.
 * EDITS     Without edits the spooled file is committed as it is.  With
 *           any header, body or envelope edit the file is streamed once
 *           through the edits into a new spool file (a new queue id,
 *           logged with the old) and the old one aborted: what is
 *           committed is what the milters made it.  Quarantine commits
 *           the message on hold (mtactl release delivers it); discard
 *           answers 250 and drops it, as does deleting every recipient.
 *           Edits after mtad's own DKIM signature may break it.
 * FAILURE   A spool failure while rewriting is 452 4.3.1; a milter that
 *           fails holds its default action (milter/milter.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/logfmt.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "delivery/delivery.h"
#include "milter/milter.h"
#include "smtp/smtp.h"
#include "spool/spool.h"
#include "smtpd/smtpd.h"
#include "smtpd/smtpd_int.h"

#define SM_HDR_MAX  (1024 * 1024)   /* a header section rewritten whole */
#define SM_MAX      8               /* milters a listener may have */

/* what the session waits for */
enum { SM_NONE = 0, SM_HELO_CONNECT, SM_HELO, SM_MAIL, SM_RCPT, SM_DATA,
    SM_EOM };

struct sess_milter {
    struct sess         *s;
    struct milter_spec   spec[SM_MAX];
    size_t               n;
    struct milter_chain *c;
    int                  wait;          /* SM_* */
    int                  connect_busy;  /* the connect stage runs */
    int                  denied;        /* the connect stage refused */
    struct milter_result deny;
    int                  esmtp;         /* the HELO waiting */
    struct smtp_rcpt     rcpt;          /* the RCPT waiting */
    char                 daddr[INET6_ADDRSTRLEN];   /* the listener's */
};

static void sm_done(void *arg);
static void sm_verdict(struct sess_milter *sm, int resume);


void
sess_milter_begin(struct sess *s, const struct config_listen *l)
{
    struct sess_milter *sm;
    size_t              i;

    if (l == NULL || l->nmilters == 0)
        return;
    sm = xcalloc(1, sizeof(*sm));
    sm->s = s;
    sm->n = l->nmilters < SM_MAX ? l->nmilters : SM_MAX;
    for (i = 0; i < sm->n; i++) {
        const struct config_milter *cm = &l->milters[i];

        sm->spec[i] = (struct milter_spec){ cm->name, cm->socket,
            cm->connect_ms, cm->command_ms, cm->eom_ms, cm->default_accept,
            cm->proto_off };
    }
    util_sockaddr_ip((const struct sockaddr *)&l->addr, sm->daddr,
        sizeof(sm->daddr));
    s->milter = sm;
}


/* sm_start - the chain and its connect stage, at the first HELO: a
 * client the screen refuses, or that never says HELO, costs the milters
 * nothing (Postfix's postscreen keeps them from its smtpd alike). */
static void
sm_start(struct sess *s)
{
    struct sess_milter *sm = s->milter;
    struct milter_macro mm[8];
    char                port[8], who[INET6_ADDRSTRLEN + 12];

    sm->c = milter_chain_new(s->d->loop, sm->spec, sm->n, s->sid, sm_done,
        sm);
    snprintf(port, sizeof(port), "%u", (unsigned)s->port);
    mm[0] = (struct milter_macro){ "j", s->d->cfg->hostname };
    mm[1] = (struct milter_macro){ "{daemon_name}", "mtad" };
    mm[2] = (struct milter_macro){ "v", "mtad" };
    mm[3] = (struct milter_macro){ "{client_addr}", s->ip };
    mm[4] = (struct milter_macro){ "{client_port}", port };
    mm[5] = (struct milter_macro){ "{client_name}", "unknown" };
    /* Sendmail's "_": the client as "name [address]" (no name lookups) */
    snprintf(who, sizeof(who), "unknown [%s]", s->ip);
    mm[6] = (struct milter_macro){ "_", who };
    mm[7] = (struct milter_macro){ "{daemon_addr}", sm->daddr };
    if (milter_connect(sm->c, mm, 8, "unknown", s->peer.sa.sa_family,
        s->port, s->ip) == MILTER_PENDING)
        sm->connect_busy = 1;
    else
        sm_verdict(sm, 0);
}


void
sess_milter_free(struct sess *s)
{
    if (s->milter == NULL)
        return;
    milter_chain_free(s->milter->c);
    free(s->milter);
    s->milter = NULL;
}


void
sess_milter_abort(struct sess *s)
{
    if (s->milter != NULL && s->milter->c != NULL &&
        s->milter->wait == SM_NONE)
        milter_chain_abort(s->milter->c);
}


/* sm_wait - the session waits for the milters: nothing is read. */
static int
sm_wait(struct sess *s, int what)
{
    s->milter->wait = what;
    sess_enter(s, SS_MILTER);
    if (!(s->flags & SF_WBLOCK))
        sess_watch(s, 0);
    return 1;
}


/* sm_log - one record of a milter's verdict on stage. */
static void
sm_log(struct sess *s, const struct milter_result *r, const char *stage,
    const char *what)
{
    char dsn[16];

    log_ev(LOGL_INFO, "reject", LOG_KVS(LKV_S("queue_id", s->txn != NULL &&
        s->txn->id[0] ? s->txn->id : NULL), SESS_CLIENT(s),
        LKV_S("reason", "milter"), LKV_S("milter", r->who),
        LKV_S("stage", stage), LKV_S("dsn", logfmt_dsn(r->reply, dsn,
        sizeof(dsn)))),
        "%s: milter-%s: %s from [%s]:%u: %s; milter=%s session=%s",
        s->txn != NULL && s->txn->id[0] ? s->txn->id : "NOQUEUE", what,
        stage, s->ip, (unsigned)s->port, r->reply, r->who, s->sid);
}


/* sm_refused - a refusing verdict r answered (and logged): 1; 0 when the
 * command goes on (continue or discard). */
static int
sm_refused(struct sess *s, const struct milter_result *r, const char *stage)
{
    if (r->act == MILTER_CONTINUE || r->act == MILTER_DISCARD)
        return 0;
    SESS_REJECT(s, STATUS_REJ_MILTER);
    sm_log(s, r, stage, "reject");
    if (r->act == MILTER_SHUTDOWN)
        sess_close_after(s, r->reply);
    else
        sess_reply(s, r->reply);
    return 1;
}


/* sm_helo_start - the HELO stage: 1 when the session waits for it. */
static int
sm_helo_start(struct sess *s)
{
    struct sess_milter *sm = s->milter;
    struct milter_macro mm[3];
    char                bits[16];
    int                 b = 0, ab = 0;
    const char         *cipher = NULL;

    if (s->tp.ssl != NULL) {
        cipher = net_tls_cipher(&s->tp, &b, &ab);
        snprintf(bits, sizeof(bits), "%d", b);
    }
    mm[0] = (struct milter_macro){ "{tls_version}",
        s->tp.ssl != NULL ? net_tls_version(&s->tp) : NULL };
    mm[1] = (struct milter_macro){ "{cipher}", cipher };
    mm[2] = (struct milter_macro){ "{cipher_bits}",
        s->tp.ssl != NULL ? bits : NULL };
    if (milter_helo(sm->c, mm, 3, s->helo) == MILTER_PENDING)
        return sm_wait(s, SM_HELO);
    return 0;
}


/* sm_helo_verdict - answer the HELO after the milters' verdict. */
static void
sm_helo_verdict(struct sess *s, const struct milter_result *r)
{
    if (sm_refused(s, r, "HELO")) {
        free(s->helo);              /* no HELO was accepted */
        s->helo = NULL;
        return;
    }
    sess_ehlo_reply(s, s->milter->esmtp);
}


/* sm_deny - the connect stage's refusal, at the first HELO: its answer,
 * then the session closes. */
static void
sm_deny(struct sess *s)
{
    struct milter_result *r = &s->milter->deny;

    SESS_REJECT(s, STATUS_REJ_MILTER);
    sm_log(s, r, "CONNECT", "reject");
    free(s->helo);
    s->helo = NULL;
    sess_close_after(s, r->reply);
}


int
sess_milter_helo(struct sess *s, int esmtp)
{
    struct sess_milter *sm = s->milter;

    sm->esmtp = esmtp;
    if (sm->c == NULL)
        sm_start(s);
    if (sm->connect_busy)
        return sm_wait(s, SM_HELO_CONNECT);
    if (sm->denied) {
        sm_deny(s);
        return 1;
    }
    if (sm_helo_start(s))
        return 1;
    sm_helo_verdict(s, milter_chain_result(sm->c));
    return 1;
}


/* sm_args - the command's ESMTP parameters after its address: pointers
 * into buf (a copy of arg), at most max. */
static size_t
sm_args(struct str arg, char *buf, size_t bufsz, const char **v, size_t max)
{
    size_t n = 0, len = arg.n < bufsz - 1 ? arg.n : bufsz - 1;
    char  *p, *gt;

    memcpy(buf, arg.p, len);
    buf[len] = '\0';
    gt = strchr(buf, '>');
    p = gt != NULL ? gt + 1 : buf + len;
    while (*p != '\0' && n < max) {
        while (*p == ' ')
            *p++ = '\0';
        if (*p == '\0')
            break;
        v[n++] = p;
        while (*p != '\0' && *p != ' ')
            p++;
    }
    return n;
}


int
sess_milter_mail(struct sess *s, struct str arg)
{
    struct sess_milter *sm = s->milter;
    struct milter_macro mm[3];
    const char         *v[17];
    char                addr[SMTP_ADDR_MAX + 2], buf[SMTP_LINE_MAX + 1];
    size_t              n;
    const struct milter_result *r;

    snprintf(addr, sizeof(addr), "<%s>", s->txn->env.sender);
    v[0] = addr;
    n = 1 + sm_args(arg, buf, sizeof(buf), v + 1, 16);
    mm[0] = (struct milter_macro){ "{mail_addr}", s->txn->env.sender };
    mm[1] = (struct milter_macro){ "{mail_mailer}", "smtp" };
    mm[2] = (struct milter_macro){ "{auth_authen}",
        smtpd_auth_user(s->auth) };
    if (milter_mail(sm->c, mm, 3, v, n) == MILTER_PENDING)
        return sm_wait(s, SM_MAIL);
    r = milter_chain_result(sm->c);
    if (sm_refused(s, r, "MAIL")) {
        sess_txn_free(s);
        return 1;
    }
    s->txn->milter_discard |= r->act == MILTER_DISCARD;
    return 0;
}


int
sess_milter_rcpt(struct sess *s, const struct smtp_rcpt *rc, struct str arg)
{
    struct sess_milter *sm = s->milter;
    struct milter_macro mm[2];
    const char         *v[17];
    char                addr[SMTP_ADDR_MAX + 2], buf[SMTP_LINE_MAX + 1];
    size_t              n;
    const struct milter_result *r;

    snprintf(addr, sizeof(addr), "<%s>", rc->addr);
    v[0] = addr;
    n = 1 + sm_args(arg, buf, sizeof(buf), v + 1, 16);
    mm[0] = (struct milter_macro){ "{rcpt_addr}", rc->addr };
    mm[1] = (struct milter_macro){ "{rcpt_mailer}", "smtp" };
    sm->rcpt = *rc;
    if (milter_rcpt(sm->c, mm, 2, v, n) == MILTER_PENDING)
        return sm_wait(s, SM_RCPT);
    r = milter_chain_result(sm->c);
    if (sm_refused(s, r, "RCPT"))
        return 1;
    s->txn->milter_discard |= r->act == MILTER_DISCARD;
    return 0;
}


int
sess_milter_data(struct sess *s)
{
    struct milter_macro mm[1];
    const struct milter_result *r;

    mm[0] = (struct milter_macro){ "i", s->txn->id };
    if (milter_data(s->milter->c, mm, 1) == MILTER_PENDING)
        return sm_wait(s, SM_DATA);
    r = milter_chain_result(s->milter->c);
    if (sm_refused(s, r, "DATA")) {
        sess_txn_free(s);
        return 1;
    }
    s->txn->milter_discard |= r->act == MILTER_DISCARD;
    return 0;
}


int
sess_milter_eom(struct sess *s)
{
    struct sess_milter *sm = s->milter;
    struct sess_txn    *t = s->txn;
    struct milter_macro mm[2];
    char                size[24];
    off_t               boff;
    int                 fd = spool_msg_fd(t->msg, &boff);

    snprintf(size, sizeof(size), "%llu",
        (unsigned long long)spool_msg_size(t->msg));
    mm[0] = (struct milter_macro){ "i", t->id };
    mm[1] = (struct milter_macro){ "{msg_size}", size };
    if (fd < 0) {
        sess_storage_fail(s);
        return 1;
    }
    if (milter_message(sm->c, mm, 2, fd, boff, spool_msg_size(t->msg),
        s->d->cfg->max_message_size) == MILTER_PENDING)
        return sm_wait(s, SM_EOM);
    sm->wait = SM_EOM;              /* the verdict now, as if waited */
    sess_enter(s, SS_MILTER);
    sm_verdict(sm, 0);
    return 1;
}


/* --- the edits ------------------------------------------------------- */

/* sm_addr - a milter's address "<a@b>" or "a@b" into out; -1 when it is
 * no address a spool envelope may carry. */
static int
sm_addr(const char *in, char *out, size_t outsz)
{
    size_t n;
    const char *p;

    while (*in == ' ')
        in++;
    n = strlen(in);
    while (n > 0 && in[n - 1] == ' ')
        n--;
    if (n >= 2 && in[0] == '<' && in[n - 1] == '>') {
        in++;
        n -= 2;
    }
    if (n >= outsz || n >= SMTP_ADDR_MAX)
        return -1;
    for (p = in; p < in + n; p++)
        if ((unsigned char)*p <= ' ' || *p == '<' || *p == '>' ||
            *p == 0x7f)
            return -1;
    memcpy(out, in, n);
    out[n] = '\0';
    return 0;
}


/* sm_envelope - the envelope edits on t; 1 when any was made. */
static int
sm_envelope(struct sess *s, const struct milter_edits *e)
{
    struct sess_txn *t = s->txn;
    char             a[SMTP_ADDR_MAX];
    size_t           i, j;
    int              changed = 0;

    for (i = 0; i < e->n; i++) {
        const struct milter_edit *x = &e->v[i];

        if (x->kind < MILTER_CHGFROM)
            continue;
        if (sm_addr(x->name, a, sizeof(a)) != 0 ||
            (a[0] == '\0' && x->kind != MILTER_CHGFROM)) {
            log_warn("%s: milter edit with a bad address ignored; "
                "session=%s", t->id, s->sid);
            continue;
        }
        changed = 1;
        if (x->kind == MILTER_CHGFROM) {
            free(t->env.sender);
            t->env.sender = xstrdup(a);
        } else if (x->kind == MILTER_ADDRCPT) {
            if (t->env.nrcpt == t->rcap) {
                t->rcap = t->rcap ? t->rcap * 2 : 4;
                t->env.rcpt = xrealloc(t->env.rcpt,
                    t->rcap * sizeof(*t->env.rcpt));
            }
            memset(&t->env.rcpt[t->env.nrcpt], 0, sizeof(*t->env.rcpt));
            t->env.rcpt[t->env.nrcpt++].addr = xstrdup(a);
        } else {
            for (j = 0; j < t->env.nrcpt;) {
                if (strcasecmp(t->env.rcpt[j].addr, a) != 0) {
                    j++;
                    continue;
                }
                free(t->env.rcpt[j].addr);
                free(t->env.rcpt[j].orcpt);
                t->env.rcpt[j] = t->env.rcpt[--t->env.nrcpt];
            }
        }
    }
    return changed;
}


/* sm_copy - len bytes at off of fd into m. */
static int
sm_copy(int fd, off_t off, uint64_t len, struct spool_msg *m)
{
    char    b[65536];
    ssize_t r;
    int     rc;

    while (len > 0) {
        r = pread(fd, b, len < sizeof(b) ? (size_t)len : sizeof(b), off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return SPOOL_ESYS;
        if ((rc = spool_write(m, b, (size_t)r)) != SPOOL_OK)
            return rc;
        off += r;
        len -= (uint64_t)r;
    }
    return SPOOL_OK;
}


/* sm_body - a replacement body into m, its bare LFs made CRLF. */
static int
sm_body(const struct buf *body, struct spool_msg *m)
{
    const char *p = buf_head(body), *end = p + buf_avail(body), *lf;
    int         rc;

    while (p < end) {
        lf = memchr(p, '\n', (size_t)(end - p));
        if (lf == NULL)
            return spool_write(m, p, (size_t)(end - p));
        if (lf > p && lf[-1] == '\r') {
            rc = spool_write(m, p, (size_t)(lf - p) + 1);
        } else {
            if ((rc = spool_write(m, p, (size_t)(lf - p))) == SPOOL_OK)
                rc = spool_write(m, "\r\n", 2);
        }
        if (rc != SPOOL_OK)
            return rc;
        p = lf + 1;
    }
    return SPOOL_OK;
}


/* sm_write - the new file m: the edited header section, the blank line,
 * the body (replaced, or the old one's). */
static int
sm_write(struct sess *s, const struct milter_edits *e, int fd, off_t off,
    uint64_t len, struct spool_msg *m)
{
    size_t  cap = len < SM_HDR_MAX ? (size_t)len : SM_HDR_MAX, got = 0;
    char   *h = xmalloc(cap + 1), *blank;
    size_t  hend, bstart;
    ssize_t r;
    struct buf out;
    int     rc;

    (void)s;
    while (got < cap) {
        r = pread(fd, h + got, cap - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(h);
            return SPOOL_ESYS;
        }
        got += (size_t)r;
    }
    blank = got >= 2 && h[0] == '\r' && h[1] == '\n' ? h :
        memmem(h, got, "\r\n\r\n", 4);
    hend = blank == h ? 0 : blank != NULL ? (size_t)(blank - h) + 2 : got;
    bstart = blank == h ? 2 : blank != NULL ? hend + 2 : got;
    buf_init(&out);
    milter_edit_headers(h, hend, e, &out);
    free(h);
    if (blank != NULL || e->body_set)
        buf_append(&out, "\r\n", 2);
    rc = spool_write(m, out.data, out.len);
    buf_free(&out);
    if (rc != SPOOL_OK)
        return rc;
    if (e->body_set)
        return sm_body(&e->body, m);
    return sm_copy(fd, off + (off_t)bstart, len - bstart, m);
}


/* sm_rewrite - the message as the milters made it, in a new spool file
 * that replaces t->msg. */
static int
sm_rewrite(struct sess *s, const struct milter_edits *e)
{
    struct sess_txn  *t = s->txn;
    struct spool_msg *m = NULL;
    char              old[SPOOL_ID_SIZE];
    off_t             off;
    int               fd = spool_msg_fd(t->msg, &off), rc;

    if (fd < 0)
        return SPOOL_ESYS;
    rc = spool_create(s->d->spool, &t->env, &m);
    if (rc != SPOOL_OK) {
        spool_abort(m);
        return rc;
    }
    rc = sm_write(s, e, fd, off, spool_msg_size(t->msg), m);
    if (rc == SPOOL_OK)
        rc = spool_finish(m);
    if (rc != SPOOL_OK) {
        spool_abort(m);
        return rc;
    }
    /* the old file goes, its kept fd with it (spool_abort closes it) */
    spool_env_free(t->kenv);
    t->kenv = NULL;
    spool_abort(t->msg);
    t->msg = m;
    util_strlcpy(old, t->id, sizeof(old));
    util_strlcpy(t->id, spool_msg_id(m), sizeof(t->id));
    log_info("%s: milter edits applied: now %s (%zu edits%s); session=%s",
        old, t->id, e->n, e->body_set ? ", body replaced" : "", s->sid);
    return SPOOL_OK;
}


/* sm_dropped - 250 for a message the milters discarded; it is gone. */
static void
sm_dropped(struct sess *s, const char *who, const char *why)
{
    struct sess_txn *t = s->txn;

    log_ev(LOGL_INFO, "log", LOG_KVS(LKV_S("queue_id", t->id),
        SESS_CLIENT(s), LKV_S("milter", who)),
        "%s: milter-discard: %s from [%s]:%u; milter=%s session=%s", t->id,
        why, s->ip, (unsigned)s->port, who[0] ? who : "-", s->sid);
    sess_replyf(s, "250 2.0.0 Ok: queued as %s", t->id);
    sess_txn_free(s);
}


/* sm_eom_verdict - the end of the message: refuse, drop, or apply the
 * edits and commit. */
static void
sm_eom_verdict(struct sess *s, const struct milter_result *r)
{
    struct sess_txn     *t = s->txn;
    struct milter_edits *e = milter_chain_edits(s->milter->c);
    size_t               i;
    int                  rewrite, rc;

    sess_enter(s, SS_CMD);
    if (sm_refused(s, r, "END-OF-MESSAGE")) {
        if (r->act != MILTER_SHUTDOWN)
            sess_txn_free(s);
        return;
    }
    if (r->act == MILTER_DISCARD || t->milter_discard) {
        sm_dropped(s, r->who, "discarded");
        return;
    }
    rewrite = sm_envelope(s, e) || e->body_set;
    for (i = 0; i < e->n; i++)
        rewrite |= e->v[i].kind <= MILTER_CHGHDR;
    if (t->env.nrcpt == 0) {
        sm_dropped(s, "", "every recipient deleted");
        return;
    }
    if (rewrite && (rc = sm_rewrite(s, e)) != SPOOL_OK) {
        sess_spool_fail(s, "milter rewrite", rc);
        sess_storage_fail(s);
        return;
    }
    if (e->quarantine) {
        t->milter_hold = 1;
        log_info("%s: milter-hold: quarantined: %s; session=%s", t->id,
            e->quarantine_why, s->sid);
    }
    sess_finish_commit(s, spool_msg_size(t->msg));
}


/* sm_done - a stage ended (on the loop); the session goes on where it
 * waited. */
static void
sm_done(void *arg)
{
    sm_verdict(arg, 1);
}


/* sm_verdict - apply the stage's verdict; resume: then run the input
 * the session holds (not when called from inside its own parsing). */
static void
sm_verdict(struct sess_milter *sm, int resume)
{
    struct sess               *s = sm->s;
    const struct milter_result *r = milter_chain_result(sm->c);
    int                        wait = sm->wait;

    if (sm->connect_busy || wait == SM_NONE) {
        /* the connect stage */
        sm->connect_busy = 0;
        if (r->act != MILTER_CONTINUE && r->act != MILTER_DISCARD) {
            sm->denied = 1;
            sm->deny = *r;
        }
        if (wait != SM_HELO_CONNECT)
            return;
        sm->wait = SM_NONE;
        if (s->state != SS_MILTER)
            return;
        sess_enter(s, SS_CMD);
        if (sm->denied)
            sm_deny(s);
        else if (!sm_helo_start(s))
            sm_helo_verdict(s, milter_chain_result(sm->c));
        if (resume && s->state == SS_CMD)
            sess_process(s);
        return;
    }
    sm->wait = SM_NONE;
    if (s->state != SS_MILTER)
        return;                     /* closing meanwhile: no answer */
    sess_enter(s, SS_CMD);
    switch (wait) {
    case SM_HELO:
        sm_helo_verdict(s, r);
        break;
    case SM_MAIL:
        if (sm_refused(s, r, "MAIL"))
            sess_txn_free(s);
        else {
            s->txn->milter_discard |= r->act == MILTER_DISCARD;
            sess_reply(s, "250 2.1.0 Ok");
        }
        break;
    case SM_RCPT:
        if (!sm_refused(s, r, "RCPT")) {
            s->txn->milter_discard |= r->act == MILTER_DISCARD;
            sess_rcpt_add(s, &sm->rcpt);
        }
        break;
    case SM_DATA:
        if (sm_refused(s, r, "DATA")) {
            sess_txn_free(s);
        } else {
            s->txn->milter_discard |= r->act == MILTER_DISCARD;
            sess_data_go(s);
        }
        break;
    case SM_EOM:
        sm_eom_verdict(s, r);
        break;
    }
    if (resume && s->state == SS_CMD)
        sess_process(s);
}


int
sess_milter_hold(struct smtpd *d, struct sess_txn *t, uint64_t size)
{
    struct spool_env *env = NULL;
    int               fd = -1, rc;

    if (!t->milter_hold)
        return 0;
    if (t->kenv != NULL) {
        env = t->kenv;
        fd = t->kfd;
        t->kenv = NULL;
        env->body_size = size;
        rc = SPOOL_OK;
    } else {
        rc = spool_msg_open(d->spool, t->id, 1, &env, &fd, NULL);
    }
    if (rc == SPOOL_OK) {
        env->held = 1;
        rc = spool_state_save(d->spool, env);
    }
    if (rc != SPOOL_OK)
        log_warn("%s: milter quarantine: could not put the message on "
            "hold: %s", t->id, spool_errstr(d->spool));
    spool_env_free(env);
    if (fd >= 0)
        close(fd);
    deliver_submit(d->deliver, t->id);  /* indexed as held */
    return 1;
}
