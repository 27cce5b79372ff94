/*
 * attempt.c - the end of a delivery attempt, split out of deliver.c:
 * recording per-recipient results, queueing bounces and delay notices
 * (dsn.c builds them), writing the envelope state back, and the
 * "unsaved" hold with its save retry timer and the stop-deadline
 * giveback of an attempt.  The scheduling, routing and starting of
 * attempts stay in deliver.c; the rules (STATE, BOUNCES) are described
 * at the top of deliver.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bclass/bclass.h"
#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/logfmt.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "events/events.h"
#include "delivery/delivery.h"
#include "delivery/delivery_int.h"
#include "delivery/dsn.h"
#include "delivery/mta.h"
#include "tlspol/tlspol.h"

#define DELIVER_HDRS_MAX     (1024 * 1024) /* headers kept for RET=HDRS */
#define DELIVER_CHUNK        (128 * 1024) /* RET=FULL copy size */


/* ---- results ---- */

/* by enum mta_status; 0 (a result never set) reads as deferred, as the
 * spool state it maps to (SPOOL_RCPT_PENDING) */
static const char *const dl_status_word[] = {
    [0] = "deferred", [MTA_DEFER] = "deferred", [MTA_SENT] = "sent",
    [MTA_BOUNCE] = "bounced"
};

/*
 * dl_note_failure - one failed recipient result of class cls for site
 * (the destination's site name; until shaping names sites, the
 * recipient's domain): counted by class x site on the status page
 * (/metrics: mtad_delivery_attempts_total).  Called once per failed
 * result that an attempt produced, so it is also the place where
 * shaping's back-off hears of replies (reply as stored, the class name).
 */
void
dl_note_failure(struct deliver *d, const char *site, const char *reply,
    int cls)
{
    (void)reply;
    status_bclass_add(d->page, site, (unsigned)cls);
}


/* dl_rcpt_site - the site a recipient's result counts for: the shaping
 * site of the transaction it came from (a->site, set by dl_txn_done), else
 * its domain. */
static const char *
dl_rcpt_site(const struct dl_attempt *a, const struct spool_rcpt *rc)
{
    const char *at = rc->addr != NULL ? strrchr(rc->addr, '@') : NULL;

    if (a->site != NULL && a->site[0] != '\0')
        return a->site;
    return at != NULL ? at + 1 : "";
}


/*
 * dl_fail_class - the bounce class of recipient i's new result (its
 * last_reply): a failure (deferred or bounced) gets one (bclass.h) kept in
 * the state (mtactl show) and noted (dl_note_failure); a success has none.
 * An expiry (a->keep_cls) is no attempt: it keeps the class of the last
 * one and counts nothing.  The class name, or NULL.
 */
static const char *
dl_fail_class(struct dl_attempt *a, size_t i, int status)
{
    struct spool_rcpt *rc = &a->env->rcpt[i];
    int                cls;

    if (status == MTA_SENT) {
        free(rc->cls);
        rc->cls = NULL;
        return NULL;
    }
    if (a->keep_cls && rc->cls != NULL)
        return rc->cls;
    cls = bclass_of(a->d->cfg->bclass, rc->last_reply);
    free(rc->cls);
    rc->cls = xstrdup(bclass_name(cls));
    if (!a->keep_cls)
        dl_note_failure(a->d, dl_rcpt_site(a, rc), rc->last_reply, cls);
    return rc->cls;
}


/*
 * dl_result - record one recipient's result in the envelope, log it and
 * count it.  status is enum mta_status; word overrides the logged
 * status word ("discarded").
 */
void
dl_result(struct dl_attempt *a, size_t i, int status, const char *reply,
    const char *relay, const char *word)
{
    dl_result_tls(a, i, status, reply, relay, word, NULL, NULL);
}


/* dl_result_tls - dl_result() for an SMTP result: the log line also says
 * what TLS the delivery had (tls=... cipher=... verify=..., tls=none),
 * and the egress source it left from (source=NAME; source NULL or "":
 * none configured, nothing said). */
void
dl_result_tls(struct dl_attempt *a, size_t i, int status, const char *reply,
    const char *relay, const char *word, const struct tls_outcome *tls,
    const char *source)
{
    struct spool_env  *env = a->env;
    struct spool_rcpt *rc = &env->rcpt[i];
    uint64_t           now = util_wall_ms();
    double             delay;
    const char        *cls;

    delay = now > env->arrival_ms ? (double)(now - env->arrival_ms) / 1000.0 :
        0.0;
    /* copy first: reply or relay may be the strings being replaced */
    {
        char *r2 = xstrdup(reply), *l2 = xstrdup(relay);

        free(rc->last_reply);
        free(rc->relay);
        rc->last_reply = r2;
        rc->relay = l2;
    }
    /* the TLS of an SMTP attempt goes into the state (mtactl show); a
     * local result keeps the last SMTP attempt's */
    if (source != NULL && source[0] == '\0')
        source = NULL;
    if (tls != NULL) {
        char tf[160 + ROUTE_POOL_MAX + 16];
        size_t n;

        /* the source goes into the state with the TLS (mtactl show) */
        (void)tls_outcome_format(tls, tf, 160);
        n = strlen(tf);
        if (source != NULL)
            snprintf(tf + n, sizeof(tf) - n, " source=%s", source);
        free(rc->tls);
        rc->tls = xstrdup(tf);
    }
    cls = dl_fail_class(a, i, status);
    a->changed = 1;
    if (status != MTA_SENT && status != MTA_BOUNCE)
        a->ndefer++;                    /* a real deferral (HELD) */
    rc->success = SPOOL_SUCCESS_NONE;   /* the caller says which is owed */
    rc->status = status == MTA_SENT ? SPOOL_RCPT_SENT :
        status == MTA_BOUNCE ? SPOOL_RCPT_BOUNCED : SPOOL_RCPT_PENDING;
    if (log_enabled(LOGL_INFO) && tls != NULL) {
        const char *w = word ? word : dl_status_word[status];
        char        dsn[16], tf[160];

        (void)tls_outcome_format(tls, tf, sizeof(tf));
        log_event(LOGL_INFO, "delivery", LOG_KVS(LKV_S("queue_id", env->id),
            LKV_S("from", env->sender), LKV_S("to", rc->addr),
            LKV_S("relay", rc->relay), LKV_S("source", source),
            LKV_S("tls", tls->used ? tls->version : "none"),
            LKV_S("cipher", tls->used ? tls->cipher : ""),
            LKV_S("verify", tls_auth_name(tls->auth)),
            LKV_S("tls_failure", tls->failure),
            LKV_D("delay", delay), LKV_S("status", w),
            LKV_S("dsn", logfmt_dsn(rc->last_reply, dsn, sizeof(dsn))),
            LKV_S("reply", rc->last_reply), LKV_S("class", cls)),
            "%s: to=<%s>, relay=%s, %s%s%s%s, delay=%.2f, status=%s (%s)%s%s",
            env->id, rc->addr, rc->relay, source ? "source=" : "",
            source ? source : "", source ? ", " : "", tf, delay, w,
            rc->last_reply, cls != NULL ? ", class=" : "",
            cls != NULL ? cls : "");
    } else if (log_enabled(LOGL_INFO)) {
        const char *w = word ? word : dl_status_word[status];
        char        dsn[16];

        log_event(LOGL_INFO, "delivery", LOG_KVS(LKV_S("queue_id", env->id),
            LKV_S("from", env->sender), LKV_S("to", rc->addr),
            LKV_S("relay", rc->relay), LKV_D("delay", delay),
            LKV_S("status", w),
            LKV_S("dsn", logfmt_dsn(rc->last_reply, dsn, sizeof(dsn))),
            LKV_S("reply", rc->last_reply), LKV_S("class", cls)),
            "%s: to=<%s>, relay=%s, delay=%.2f, status=%s (%s)%s%s",
            env->id, rc->addr, rc->relay, delay, w, rc->last_reply,
            cls != NULL ? ", class=" : "", cls != NULL ? cls : "");
    }
    if (a->d->events != NULL)
        dl_event_result(a, i, status, tls, source);
    if (a->d->st == NULL)
        return;
    if (status == MTA_SENT) {
        STATUS_ADD(a->d->st->msgs_out, 1);
        status_latency_add(&a->d->st->ops, now > env->arrival_ms ?
            now - env->arrival_ms : 0);
    } else if (status == MTA_BOUNCE)
        STATUS_ADD(a->d->st->msgs_bounced, 1);
    else
        STATUS_ADD(a->d->st->msgs_deferred, 1);
}


/* ---- bounces ---- */

/* dl_read_headers - the original's header section (at most
 * DELIVER_HDRS_MAX bytes read), malloc'd; *len its length. */
char *
dl_read_headers(struct dl_attempt *a, size_t *len)
{
    uint64_t want = a->env->body_size;
    char    *p;
    size_t   got = 0;

    if (want > DELIVER_HDRS_MAX)
        want = DELIVER_HDRS_MAX;
    p = xmalloc((size_t)want + 1);
    while (got < want) {
        ssize_t n = pread(a->fd, p + got, (size_t)want - got,
            a->body_off + (off_t)got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    *len = dsn_headers_len(p, got);
    return p;
}


/* dl_copy_orig - append the original to the DSN being written: the whole
 * message in 128 KiB preads (RET=FULL), or its headers.  *last is the last
 * byte written ('\n' when none).  SPOOL_OK or a spool error. */
static int
dl_copy_orig(struct dl_attempt *a, struct spool_msg *m, int full, char *last)
{
    uint64_t left = a->env->body_size;
    off_t    off = a->body_off;
    char    *p;
    size_t   n;
    int      rc = SPOOL_OK;

    *last = '\n';
    if (!full) {
        p = dl_read_headers(a, &n);
        if (n > 0) {
            rc = spool_write(m, p, n);
            *last = p[n - 1];
        }
        free(p);
        return rc;
    }
    p = xmalloc(DELIVER_CHUNK);
    while (left > 0 && rc == SPOOL_OK) {
        ssize_t got = pread(a->fd, p, left > DELIVER_CHUNK ? DELIVER_CHUNK :
            (size_t)left, off);

        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;                      /* short file: send what there is */
        rc = spool_write(m, p, (size_t)got);
        *last = p[got - 1];
        off += got;
        left -= (uint64_t)got;
    }
    free(p);
    return rc;
}


static const char *const dl_dsn_word[] = {
    [DSN_FAILURE] = "non-delivery", [DSN_SUCCESS] = "success",
    [DSN_DELAY] = "delay"
};

/*
 * dl_dsn - queue a DSN of one kind for the recipients that asked for one:
 * the report (dsn.c), with the original streamed into the new spool file
 * between head and tail (the whole of it only in a failure with
 * RET=FULL: RFC 3461 4.3).  The DSN has the null sender and goes through
 * routing like any message; a null sender's message gets none (no bounce
 * of a bounce).  Returns 0 (queued, or none due) or -1 (could not queue).
 */
static int
dl_dsn(struct dl_attempt *a, enum dsn_kind kind)
{
    struct deliver    *d = a->d;
    struct spool_env  *env = a->env, denv;
    struct spool_rcpt  rc;
    struct spool_msg  *m = NULL;
    struct dsn_info    in;
    struct buf         out;
    char               newid[SPOOL_ID_SIZE], last;
    uint64_t           size = 0;
    int                rcode;

    if (dsn_count_kind(env, kind) == 0)
        return 0;
    if (env->sender[0] == '\0') {
        log_info("%s: %s for null sender dropped", env->id,
            kind == DSN_FAILURE ? "bounce" : dl_dsn_word[kind]);
        return 0;
    }
    memset(&in, 0, sizeof(in));
    in.env = env;
    in.kind = kind;
    if (kind == DSN_DELAY && d->cfg->max_queue_time_ms > 0)
        in.retry_until_ms = env->arrival_ms + d->cfg->max_queue_time_ms;
    in.hostname = d->cfg->hostname;
    in.now_ms = util_wall_ms();
    /* binary content cannot travel inside a message/rfc822 part; the
     * bounce of a REQUIRETLS message is RET=HDRS whatever was asked (RFC
     * 8689 5) */
    in.full = kind == DSN_FAILURE && env->ret == SMTP_RET_FULL &&
        env->body != SMTP_BODY_BINARYMIME && !env->requiretls;

    memset(&denv, 0, sizeof(denv));
    memset(&rc, 0, sizeof(rc));
    rc.addr = env->sender;
    denv.sender = "";
    denv.arrival_ms = in.now_ms;
    denv.body = (env->body != SMTP_BODY_7BIT || env->smtputf8) ?
        SMTP_BODY_8BITMIME : SMTP_BODY_7BIT;
    denv.smtputf8 = env->smtputf8;
    /* RFC 8689 5: it carries the original's header, so it is sent the
     * way the original had to be */
    denv.requiretls = env->requiretls;
    denv.client_ip = "127.0.0.1";
    denv.helo = d->cfg->hostname;
    denv.rcpt = &rc;
    denv.nrcpt = 1;
    denv.use_reserve = 1;               /* a bounce of accepted mail */

    buf_init(&out);
    dsn_build_head(&in, &out);
    rcode = spool_create(d->sp, &denv, &m);
    if (rcode == SPOOL_OK)
        rcode = spool_write(m, buf_head(&out), buf_avail(&out));
    if (rcode == SPOOL_OK)
        rcode = dl_copy_orig(a, m, in.full, &last);
    if (rcode == SPOOL_OK) {
        out.off = out.len = 0;
        dsn_build_tail(&in, last == '\n', &out);
        rcode = spool_write(m, buf_head(&out), buf_avail(&out));
    }
    if (rcode == SPOOL_OK)
        rcode = spool_finish(m);
    if (rcode == SPOOL_OK) {
        util_strlcpy(newid, spool_msg_id(m), sizeof(newid));
        size = spool_msg_size(m);
        /* spool_commit() frees m only on success; a failed commit
         * leaves it (and its tmp file) for spool_abort() below */
        if ((rcode = spool_commit(m)) == SPOOL_OK)
            m = NULL;
    }
    buf_free(&out);
    if (rcode != SPOOL_OK) {
        log_warn("%s: cannot queue the %s notification: %s", env->id,
            dl_dsn_word[kind], spool_errstr(d->sp));
        spool_abort(m);
        return -1;
    }
    log_ev(LOGL_INFO, kind == DSN_FAILURE ? "bounce" : "dsn",
        LOG_KVS(LKV_S("queue_id", env->id), LKV_S("bounce_id", newid),
        LKV_S("action", dl_dsn_word[kind])),
        "%s: sender %s notification: %s", env->id, dl_dsn_word[kind], newid);
    if (d->events != NULL)
        dl_event_dsn(a, newid, kind == DSN_FAILURE ? "failure" :
            dl_dsn_word[kind]);
    log_ev(LOGL_INFO, "received", LOG_KVS(LKV_S("queue_id", newid),
        LKV_S("from", ""), LKV_I("size", size), LKV_I("nrcpt", 1),
        LKV_S("bounce_of", env->id)),
        "%s: from=<>, size=%llu, nrcpt=1 (bounce of %s)", newid,
        (unsigned long long)size, env->id);
    deliver_submit(d, newid);
    return 0;
}


/*
 * dl_notify - at the end of every attempt: one DSN for the recipients that
 * bounced since the last one, then every bounced recipient is marked
 * notified, so a DSN (or a null sender's drop) happens once per recipient
 * and never waits for the others to become final.  Returns the failure
 * DSN's result; on -1 nothing is marked and the next attempt tries again.
 * Then the success DSN for what was delivered or relayed now (the
 * recipients are final, so one that cannot be queued is logged and not
 * tried again), and the delay warning for the recipients it fell due
 * for (marked delay_warned, kept in the state: never a second; one that
 * cannot be queued is tried at the next attempt).
 */
static int
dl_notify(struct dl_attempt *a)
{
    struct spool_env *env = a->env;
    size_t            i;
    int               failed, warned;

    failed = dl_dsn(a, DSN_FAILURE) < 0;
    for (i = 0; i < env->nrcpt && !failed; i++)
        if (env->rcpt[i].status == SPOOL_RCPT_BOUNCED)
            env->rcpt[i].notified = 1;
    (void)dl_dsn(a, DSN_SUCCESS);
    warned = dl_dsn(a, DSN_DELAY) == 0;
    for (i = 0; i < env->nrcpt; i++) {
        struct spool_rcpt *rc = &env->rcpt[i];

        if (warned && dsn_wanted_kind(rc, DSN_DELAY))
            rc->delay_warned = 1;
        rc->success = SPOOL_SUCCESS_NONE;
        rc->delay_due = 0;
    }
    return failed ? -1 : 0;
}


/* dl_warn_at - when the delay warning falls due for a recipient of env
 * still owed one, or 0 (none owed, or warnings off). */
static uint64_t
dl_warn_at(const struct deliver *d, const struct spool_env *env)
{
    size_t i;

    if (d->cfg->delay_warning_ms == 0)
        return 0;
    for (i = 0; i < env->nrcpt; i++) {
        struct spool_rcpt rc = env->rcpt[i];

        rc.delay_due = 1;
        if (dsn_wanted_kind(&rc, DSN_DELAY))
            return env->arrival_ms + d->cfg->delay_warning_ms;
    }
    return 0;
}


/* dl_delay_due - mark the recipients whose delay warning is due now. */
static void
dl_delay_due(struct dl_attempt *a, uint64_t now)
{
    uint64_t at = dl_warn_at(a->d, a->env);
    size_t   i;

    if (at == 0 || now < at)
        return;
    for (i = 0; i < a->env->nrcpt; i++)
        a->env->rcpt[i].delay_due = 1;  /* dsn_wanted_kind() picks */
}


/* ---- attempts ---- */

/* dl_unlink - take a off its list (active or unsaved). */
static void
dl_unlink(struct dl_attempt *a)
{
    struct deliver     *d = a->d;
    struct dl_attempt **head = a->unsaved ? &d->unsaved : &d->active;

    if (a->prev)
        a->prev->next = a->next;
    else
        *head = a->next;
    if (a->next)
        a->next->prev = a->prev;
    a->next = a->prev = NULL;
    if (a->unsaved)
        d->nunsaved--;
    else
        d->nactive--;
}


void
dl_attempt_free(struct dl_attempt *a)
{
    struct dl_txn  *t, *tn;

    qx_done(a->d, a->env);
    dl_unlink(a);
    for (t = a->txns; t; t = tn) {
        tn = t->next;
        free(t->rt.rcpt);
        free(t->rt.res);
        free(t);
    }
    if (a->fd >= 0)
        close(a->fd);                   /* releases the flock */
    spool_env_free(a->env);
    free(a->ev_hdr);
    free(a);
}


/* dl_expire - past max_queue_time: the open recipients bounce. */
static void
dl_expire(struct dl_attempt *a)
{
    struct spool_env *env = a->env;
    char              why[SMTP_REPLY_MAX + 100];
    size_t            i;

    a->expiring = 1;
    for (i = 0; i < env->nrcpt; i++) {
        struct spool_rcpt *rc = &env->rcpt[i];

        if (rc->status != SPOOL_RCPT_PENDING)
            continue;
        snprintf(why, sizeof(why), "4.4.7 message expired after %llu "
            "seconds in the queue; last error: %s",
            (unsigned long long)(a->d->cfg->max_queue_time_ms / 1000),
            rc->last_reply ? rc->last_reply : "none");
        a->keep_cls = 1;
        dl_result(a, i, MTA_BOUNCE, why, rc->relay ? rc->relay : "none",
            NULL);
        a->keep_cls = 0;
    }
    a->expiring = 0;
}


/* dl_save - write a's state.  0, or -1 (logged once per episode: a full
 * spool fails every save alike). */
int
dl_save(struct dl_attempt *a)
{
    struct deliver *d = a->d;

    /* the results' events are on the spool before the state is */
    events_flush(d->events);
    if (spool_state_save(d->sp, a->env) != SPOOL_OK) {
        if (!d->save_failing)
            log_warn("%s: saving the delivery state: %s; holding such "
                "messages in memory, not retried, until their state can be "
                "saved", a->env->id, spool_errstr(d->sp));
        d->save_failing = 1;
        return -1;
    }
    a->env->has_state = 1;
    return 0;
}


/* dl_reschedule - the state is saved: unlock and wait for the retry. */
static void
dl_reschedule(struct dl_attempt *a)
{
    struct deliver *d = a->d;
    char            id[SPOOL_ID_SIZE];
    uint64_t        when = a->env->next_retry_ms;

    util_strlcpy(id, a->env->id, sizeof(id));
    dl_attempt_free(a);                 /* unlock before rescheduling */
    dl_schedule(d, id, when);
}


/* dl_hold - the state could not be saved: the file says less than memory
 * (a recipient that got 250 would be offered again, a bounce sent twice),
 * so the attempt is kept, lock and all, and only its save is retried. */
static void
dl_hold(struct dl_attempt *a)
{
    struct deliver *d = a->d;

    dl_unlink(a);
    a->unsaved = 1;
    a->next = d->unsaved;
    if (d->unsaved)
        d->unsaved->prev = a;
    d->unsaved = a;
    d->nunsaved++;
    if (!ev_timer_active(&d->save_timer))
        ev_timer_start(d->loop, &d->save_timer, DELIVER_SAVE_RETRY_MS);
    deliver_arm(d);
}


/* dl_save_fire - try the held states again; the saved go back to the
 * schedule at their retry time. */
void
dl_save_fire(struct ev_loop *loop, struct ev_timer *tm, void *arg)
{
    struct deliver    *d = arg;
    struct dl_attempt *a, *next;
    size_t             saved = 0;

    (void)loop;
    (void)tm;
    for (a = d->unsaved; a; a = next) {
        next = a->next;
        if (dl_save(a) < 0)
            break;                      /* still no room: try again later */
        saved++;
        dl_reschedule(a);
    }
    if (d->nunsaved > 0) {
        ev_timer_start(d->loop, &d->save_timer, DELIVER_SAVE_RETRY_MS);
        return;
    }
    if (saved > 0)
        log_notice("delivery state saved again: %zu held messages back in "
            "the schedule", saved);
    d->save_failing = 0;
}


/* dl_finish - every group is back: the DSN for new failures, then
 * remove, or save and reschedule.  A crash between the DSN's commit and
 * the state save sends that DSN again at the next attempt (twice, never
 * lost). */
void
dl_finish(struct dl_attempt *a)
{
    struct deliver   *d = a->d;
    struct spool_env *env = a->env;
    uint64_t          now = util_wall_ms();
    uint64_t          warn_at;
    size_t            i, pending = 0;
    int               notified;

    a->open = 0;
    for (i = 0; i < env->nrcpt; i++)
        if (env->rcpt[i].status == SPOOL_RCPT_PENDING)
            pending++;
    if (pending > 0 && d->cfg->max_queue_time_ms > 0 &&
        now >= env->arrival_ms + d->cfg->max_queue_time_ms) {
        dl_expire(a);
        pending = 0;
    }
    if (pending > 0)
        dl_delay_due(a, now);
    /* the bounce for what failed now goes out now, whatever the others */
    notified = dl_notify(a) == 0;
    if (pending == 0 && notified) {
        /* the file goes, or carries the next message (spool.h) */
        if (spool_remove_fd(d->sp, env, a->fd) != SPOOL_OK) {
            log_warn("%s: remove: %s", env->id, spool_errstr(d->sp));
        } else {
            qx_drop(d, env->id);
            a->fd = -1;
            log_ev(LOGL_INFO, "removed", LOG_KVS(LKV_S("queue_id", env->id)),
                "%s: removed", env->id);
        }
        dl_attempt_free(a);
        deliver_arm(d);
        return;
    }
    if (pending == 0) {
        /* kept until its bounce is queued */
        env->next_retry_ms = now + deliver_retry_delay(d->cfg->retry_ms,
            d->cfg->nretry, 1);
    } else if (a->held && a->ndefer == 0) {
        /* only shaping kept the open ones: no attempt counted, due as it
         * was; the id waits in its site's list (shape_wait.c), and the
         * state is written only when something else changed */
        if (!a->changed) {
            dl_attempt_free(a);
            deliver_arm(d);
            return;
        }
        env->next_retry_ms = now;
        if (dl_save(a) == 0) {
            dl_attempt_free(a);
            deliver_arm(d);
            return;
        }
        dl_hold(a);
        return;
    } else {
        env->attempts++;
        env->next_retry_ms = deliver_next_retry(d->cfg->retry_ms,
            d->cfg->nretry, env->attempts, now, env->arrival_ms,
            d->cfg->max_queue_time_ms);
        /* an attempt when a delay warning falls due: it is sent at the
         * end of one */
        warn_at = dl_warn_at(d, env);
        if (warn_at > now && warn_at < env->next_retry_ms)
            env->next_retry_ms = warn_at;
    }
    if (dl_save(a) == 0) {
        dl_reschedule(a);
        return;
    }
    dl_hold(a);
}


/* dl_giveback_one - the stop cut a transaction of a: results
 * that are in are saved (due at once, for the next generation), nothing
 * else is marked, and the message is unlocked. */
void
dl_giveback_one(struct dl_attempt *a)
{
    struct deliver *d = a->d;

    if (a->changed) {
        a->env->next_retry_ms = util_wall_ms();
        if (dl_save(a) < 0) {
            dl_hold(a);                 /* tried again until the exit */
            return;
        }
    }
    log_info("%s: stop: attempt given back to the next generation",
        a->env->id);
    d->ngiven++;
    dl_attempt_free(a);
}

