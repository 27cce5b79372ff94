/*
 * session_commit.c - the commit of a finished message: the group commit
 * of spool.fsync, and the 250 and hand-off to delivery once a message is
 * in queue/ (split from session_msg.c).
 *
 * COMMIT    A 250 only after the message is in queue/ and, with
 *           spool.fsync, after a sync that began after its rename.
 *           Messages finished in one loop turn (cq_commit) are committed
 *           together by sess_commit_hook(), as one round (cq_run):
 *             inline: spool_commit_batch() renames them and syncs once;
 *             off the loop (the spool's sync thread): spool_commit_rename()
 *               now, and the renamed ones wait (cq_wait) for the next
 *               spool_sync_start() (cq_sync while it runs); the sync's
 *               eventfd ends it, and spool_commit_settle() its round.
 *           Either way sess_commit_done() answers the round: every reply
 *           first, then the input the sessions pipelined behind their
 *           dot.  A session waiting for the commit parses no more input.
 * MEMORY    The four queues and the spool's argument arrays are struct
 *           smtpd's, grown to the largest round and kept: nothing is
 *           allocated per turn.
 * FAILURE   A failed rename or sync is 452 4.3.1 for the messages it
 *           concerns (their files are removed); the sessions go on.  A
 *           client that leaves while its renamed message waits for the
 *           sync does not take the message with it: it is delivered when
 *           the sync succeeds (the client may send it again: a duplicate,
 *           never a loss).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "delivery/delivery.h"
#include "events/events.h"
#include "smtpd/smtpd.h"
#include "smtpd/smtpd_int.h"

static void sess_sync_settle(struct smtpd *d, int sync_rc);


/* sess_cq_cap - a capacity of at least need: doubled from cap. */
static size_t
sess_cq_cap(size_t cap, size_t need)
{
    if (cap == 0)
        cap = 16;
    while (cap < need)
        cap *= 2;
    return cap;
}


static void
sess_cq_push(struct sess_cqueue *q, struct sess *s, struct sess_txn *t,
    uint64_t size)
{
    if (q->n == q->cap) {
        q->cap = sess_cq_cap(q->cap, q->n + 1);
        q->q = xrealloc(q->q, q->cap * sizeof(*q->q));
    }
    q->q[q->n++] = (struct sess_cq){ s, t, size, SPOOL_OK };
}


/* sess_cq_take - every entry of from moves to the empty to: the two
 * swap their arrays, so nothing is copied or allocated. */
static void
sess_cq_take(struct sess_cqueue *to, struct sess_cqueue *from)
{
    struct sess_cqueue empty = *to;

    *to = *from;
    *from = empty;
    from->n = 0;
}


/* sess_gone_queued - the message of a client that left before its 250 is
 * durable in queue/: deliver it (the client may send it again: a
 * duplicate, never a loss). */
static void
sess_gone_queued(struct smtpd *d, struct sess_txn *t, uint64_t size)
{
    log_ev(LOGL_INFO, "log", LOG_KVS(LKV_S("queue_id", t->id),
        LKV_S("session", t->sid)),
        "%s: from=<%s>, size=%llu, nrcpt=%zu, session=%s: queued after "
        "its client left (no 250 was seen)", t->id, t->env.sender,
        (unsigned long long)size, t->env.nrcpt, t->sid);
    STATUS_ADD(d->st->msgs_in, 1);
    if (sess_milter_hold(d, t, size))
        return;                     /* quarantined: on hold */
    if (t->kenv != NULL) {
        t->kenv->body_size = size;
        deliver_submit_kept(d->deliver, t->kenv, t->kfd, t->koff);
        t->kenv = NULL;
    } else {
        deliver_submit(d->deliver, t->id);
    }
}


void
sess_queued(struct sess *s, uint64_t size)
{
    struct sess_txn *t = s->txn;
    struct smtpd   *d = s->d;

    t->msg = NULL;                  /* the commit freed it */
    if (d->nospace > 0) {
        log_notice("spool has room again: %llu spool writes refused for "
            "lack of space meanwhile", (unsigned long long)d->nospace);
        d->nospace = 0;
    }
    if (d->events != NULL && !(s->flags & SF_EVENTED)) {
        /* committed inline: its event on the spool before the 250 */
        sess_event_reception(d, s, t, size);
        events_flush(d->events);
    }
    s->flags &= ~SF_EVENTED;
    sess_replyf(s, "250 2.0.0 Ok: queued as %s", t->id);
    log_ev(LOGL_INFO, "received", LOG_KVS(LKV_S("queue_id", t->id),
        LKV_S("from", t->env.sender), LKV_I("size", size),
        LKV_I("nrcpt", t->env.nrcpt), SESS_CLIENT(s),
        LKV_S("dkim", t->dkim_domain), LKV_S("tls_required",
        t->env.requiretls ? "requiretls" : t->env.tls_optional ? "no" :
        NULL)),
        "%s: from=<%s>, size=%llu, nrcpt=%zu, client=[%s]:%u, "
        "session=%s%s%s%s", t->id, t->env.sender, (unsigned long long)size,
        t->env.nrcpt, s->ip, (unsigned)s->port, s->sid,
        t->dkim_domain ? ", dkim=" : "",
        t->dkim_domain ? t->dkim_domain : "", t->env.requiretls ?
        ", tls_required=requiretls" : t->env.tls_optional ?
        ", tls_required=no" : "");
    STATUS_ADD(d->st->msgs_in, 1);
    s->njunk = 0;                   /* a client that sends mail is no idler */
    sess_push(s);                   /* the 250 first, then the delivery */
    if (sess_milter_hold(d, t, size)) {
        /* quarantined: on hold */
    } else if (t->kenv != NULL) {
        t->kenv->body_size = size;
        deliver_submit_kept(d->deliver, t->kenv, t->kfd, t->koff);
        t->kenv = NULL;             /* delivery's now, and the fd too */
    } else {
        deliver_submit(d->deliver, t->id);
    }
    sess_txn_free(s);
}


void
sess_commit_add(struct sess *s)
{
    sess_cq_push(&s->d->cq_commit, s, s->txn, 0);
    s->flags |= SF_COMMITQ;
    sess_enter(s, SS_COMMIT);
}


int
sess_commit_leave(struct sess *s)
{
    struct smtpd *d = s->d;
    size_t         i;

    if (s->flags & SF_COMMITQ) {
        for (i = 0; i < d->cq_commit.n; i++)
            if (d->cq_commit.q[i].s == s) {
                d->cq_commit.q[i] = d->cq_commit.q[--d->cq_commit.n];
                break;
            }
        s->flags &= ~SF_COMMITQ;
    }
    if (!(s->flags & SF_SYNCQ))
        return 0;
    /* renamed, waiting for the sync: the entry keeps the transaction
     * and ends it when the sync is done */
    s->flags &= ~SF_SYNCQ;
    for (i = 0; i < d->cq_wait.n; i++)
        if (d->cq_wait.q[i].s == s)
            d->cq_wait.q[i].s = NULL;
    for (i = 0; i < d->cq_sync.n; i++)
        if (d->cq_sync.q[i].s == s)
            d->cq_sync.q[i].s = NULL;
    s->txn = NULL;
    return 1;
}


/* sess_commit_args - the round (cq_run) as the spool's calls take it:
 * its messages and their results so far, in arrays d keeps. */
static void
sess_commit_args(struct smtpd *d)
{
    const struct sess_cqueue *r = &d->cq_run;
    size_t                    i;

    if (r->n > d->cq_argcap) {
        d->cq_argcap = sess_cq_cap(d->cq_argcap, r->n);
        d->cq_ms = xrealloc(d->cq_ms, d->cq_argcap * sizeof(*d->cq_ms));
        d->cq_rc = xrealloc(d->cq_rc, d->cq_argcap * sizeof(*d->cq_rc));
    }
    for (i = 0; i < r->n; i++) {
        d->cq_ms[i] = r->q[i].t->msg;
        d->cq_rc[i] = r->q[i].rc;
    }
}


/* sess_commit_end - answer one message of a round by its result; one
 * whose client left (s NULL) is delivered if it was committed. */
static void
sess_commit_end(struct smtpd *d, const struct sess_cq *e)
{
    struct sess *s = e->s;

    if (s == NULL) {
        if (e->rc == SPOOL_OK)
            sess_gone_queued(d, e->t, e->size);
        sess_txn_release(e->t);     /* aborts a message not committed */
        return;
    }
    s->flags &= ~SF_SYNCQ;
    sess_enter(s, SS_CMD);
    if (e->rc == SPOOL_OK) {
        sess_queued(s, e->size);
    } else {
        sess_spool_fail(s, "spool_commit", e->rc);
        sess_storage_fail(s);
    }
}


/* sess_commit_done - the one completion of a round: the spool's results
 * (cq_ms, cq_rc) go back into the entries, each message is answered,
 * then the sessions run the input they pipelined behind the dot.
 * renamed: the round was only renamed (the sync off the loop): a renamed
 * message joins cq_wait for the next sync instead, its session parsing
 * nothing until its 250; only failures are answered now. */
static void
sess_commit_done(struct smtpd *d, int renamed)
{
    struct sess_cqueue *r = &d->cq_run;
    struct sess_cq     *e;
    size_t              i;

    for (i = 0; i < r->n; i++) {
        e = &r->q[i];
        e->t->msg = d->cq_ms[i];    /* NULL once committed (freed) */
        e->rc = d->cq_rc[i];
        if (d->events != NULL && !renamed && e->rc == SPOOL_OK) {
            sess_event_reception(d, e->s, e->t, e->size);
            if (e->s != NULL)
                e->s->flags |= SF_EVENTED;
        }
    }
    /* the round's reception events are on the spool before any 250 */
    events_flush(d->events);
    for (i = 0; i < r->n; i++) {
        e = &r->q[i];
        if (renamed && e->rc == SPOOL_OK) {
            sess_cq_push(&d->cq_wait, e->s, e->t, e->size);
            /* its input is unwatched meanwhile (sess_on_io) */
            e->s->flags |= SF_SYNCQ;
            e->s = NULL;            /* not resumed below */
            continue;
        }
        sess_commit_end(d, e);
    }
    /* Resume after every reply is queued: a resumed session may finish
     * another message, which joins cq_commit for the next round. */
    for (i = 0; i < r->n; i++)
        if (r->q[i].s != NULL && r->q[i].s->state == SS_CMD)
            sess_process(r->q[i].s);
    r->n = 0;
}


/* sess_sync_next - start a sync for the messages renamed so far, unless
 * one runs (they wait for the next). */
static void
sess_sync_next(struct smtpd *d)
{
    size_t i;
    int    rc;

    if (d->cq_wait.n == 0 || d->cq_sync.n > 0 || spool_sync_busy(d->spool))
        return;
    sess_cq_take(&d->cq_sync, &d->cq_wait);
    if ((rc = spool_sync_start(d->spool)) != SPOOL_OK) {
        /* none of them is durable: each gets its 4xx from the settle */
        log_warn("group commit: %s", spool_errstr(d->spool));
        for (i = 0; i < d->cq_sync.n; i++)
            d->cq_sync.q[i].rc = rc;
        sess_sync_settle(d, rc);
    }
}


/* sess_sync_settle - the running sync ended with sync_rc: answer (or
 * end) every message it covered, then start the next. */
static void
sess_sync_settle(struct smtpd *d, int sync_rc)
{
    sess_cq_take(&d->cq_run, &d->cq_sync);
    sess_commit_args(d);
    (void)spool_commit_settle(d->spool, d->cq_ms, d->cq_run.n, d->cq_rc,
        sync_rc);
    sess_commit_done(d, 0);
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


/* sess_commit_hook - the group commit (spool.fsync): every message
 * finished this turn in one round, committed inline (one syncfs) or
 * renamed for the sync off the loop.  Runs before sess_flush_hook. */
void
sess_commit_hook(struct ev_loop *loop, void *arg)
{
    struct smtpd   *d = arg;
    struct sess_cq *e;
    size_t          i;

    (void)loop;
    while (d->cq_commit.n > 0) {
        sess_cq_take(&d->cq_run, &d->cq_commit);
        for (i = 0; i < d->cq_run.n; i++) {
            e = &d->cq_run.q[i];
            e->s->flags &= ~SF_COMMITQ;
            e->size = spool_msg_size(e->t->msg);
        }
        sess_commit_args(d);
        if (d->sync_fd >= 0)
            (void)spool_commit_rename(d->spool, d->cq_ms, d->cq_run.n,
                d->cq_rc);
        else
            (void)spool_commit_batch(d->spool, d->cq_ms, d->cq_run.n,
                d->cq_rc);
        sess_commit_done(d, d->sync_fd >= 0);
    }
    if (d->sync_fd >= 0)
        sess_sync_next(d);
}


void
sess_commit_setup(struct smtpd *d)
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


/* sess_commit_free - the worker's exit (sessions already freed, so none
 * is left in cq_commit): messages still waiting for a sync stay in
 * queue/ for the next start, unanswered. */
void
sess_commit_free(struct smtpd *d)
{
    size_t i;

    spool_sync_wait(d->spool);
    for (i = 0; i < d->cq_wait.n; i++)
        sess_txn_release(d->cq_wait.q[i].t);
    for (i = 0; i < d->cq_sync.n; i++)
        sess_txn_release(d->cq_sync.q[i].t);
    d->cq_wait.n = d->cq_sync.n = 0;
    if (d->sync_fd >= 0)
        ev_unwatch(d->loop, d->sync_fd);
    d->sync_fd = -1;
    free(d->cq_commit.q);
    free(d->cq_run.q);
    free(d->cq_wait.q);
    free(d->cq_sync.q);
    free(d->cq_ms);
    free(d->cq_rc);
    memset(&d->cq_commit, 0, sizeof(d->cq_commit));
    memset(&d->cq_run, 0, sizeof(d->cq_run));
    memset(&d->cq_wait, 0, sizeof(d->cq_wait));
    memset(&d->cq_sync, 0, sizeof(d->cq_sync));
    d->cq_ms = NULL;
    d->cq_rc = NULL;
    d->cq_argcap = 0;
}
