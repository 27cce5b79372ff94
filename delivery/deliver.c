/*
 * deliver.c - the per-worker delivery schedule: which queued message is
 * tried when, by whom, and what happens with the results.
 *
 * PURPOSE   A worker delivers the messages of its shard from the same event
 *           loop that accepts them: deliver_submit() right after the
 *           commit (the message is still in the page cache), and retries
 *           from an in-memory min-heap of (next attempt, id) driven by one
 *           ev_timer.  deliver_recover() rebuilds the heap from the spool
 *           at start; nothing scans the spool on a timer.
 * OWNERSHIP A queue id carries the accepting worker's shard in id[11..12];
 *           worker <shard> schedules the ids with deliver_shard_of(id) ==
 *           shard.  The shard index survives a respawn, so the worker that
 *           replaces a dead one (same shard) recovers its messages.  The
 *           real exclusion is flock on queue/<id> for the whole attempt
 *           (spool_msg_open(lock=1)): a busy lock (mtactl, an old
 *           generation still draining) retries in DELIVER_LOCKED_MS, and a
 *           vanished file means someone else finished it.
 * ATTEMPT   Open + lock, then group the PENDING recipients by route text
 *           (router_lookup per recipient; an mx route groups by the
 *           recipient's own domain): smtp and mx groups become one relay
 *           transaction each, after their next hops are looked up in DNS
 *           (resolve.c, then mta.c); maildir, discard, reject: and
 *           defer: are settled on the spot.  When every group is back:
 *           one DSN (dsn.c) for the recipients that bounced and were not
 *           reported yet, which are then marked notified (at once, as
 *           Postfix does, not when the last deferred one is final); then
 *           all final -> spool_remove(); else attempts++, next retry from
 *           delivery.retry (the last step repeats), state saved, lock
 *           released, rescheduled; past max_queue_time the open
 *           recipients bounce (4.4.7).
 * LIMITS    At most DELIVER_MAX_ACTIVE attempts are open or held unsaved
 *           at once (each holds the queue fd and its lock); the rest wait
 *           in the heap.
 *           Connections per destination: this worker's share of
 *           delivery.connections_per_destination, ceil(limit / nshards), so
 *           all workers together stay within the configured limit.
 * STOP      deliver_drain(): idle connections close, running attempts
 *           finish, and messages the last sessions still accept get their
 *           first attempt; deferred ones are left to the next generation.
 *           That one recovered at its start, before the old one finished;
 *           when the old generation's last worker is gone the master sends
 *           "kick *" to the new workers, and deliver_kick() rebuilds the
 *           schedule from the spool for this shard: ids not yet known are
 *           added, and every one is due at once (a kick means "now").
 * HOLD      While the master sets STATUS_THROTTLE_HOLD on the status page
 *           (limits.load.queue_only), no attempt starts: the timer looks
 *           again every second; attempts already running finish.  New
 *           messages are still accepted and wait in the heap.
 * STATE     Memory is the truth, the file its copy: when the state
 *           cannot be written (a full spool) the attempt is held on
 *           d->unsaved with its lock, not retried, and only the save is
 *           tried again every DELIVER_SAVE_RETRY_MS; so a recipient that
 *           got 250, or one already bounced (its DSN queued and marked
 *           notified in memory), is never offered or bounced again by this
 *           worker.  After a crash the file decides: a second delivery or
 *           DSN is possible only for what happened between the next hop's
 *           250 (or the DSN's commit) and the state write.
 * GIVEBACK  deliver_giveback() at the stop deadline: mta_abort() cuts
 *           every outbound session; results already in are saved, the rest
 *           stay pending, and every message is unlocked for the next
 *           generation's "kick *".
 * FAILURE   Logs each recipient's result Postfix-style and counts it on
 *           the status page; a failed state save is logged once per
 *           episode (dl_save), and its end once.
 * SEE ALSO  schedule.c: the heap and the retry arithmetic.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
#include "delivery/delivery_int.h"
#include "delivery/dsn.h"
#include "delivery/maildir.h"
#include "delivery/mta.h"
#include "delivery/resolve.h"

#define DELIVER_LOCKED_MS    5000        /* queue file locked elsewhere */
#define DELIVER_ERROR_MS     60000       /* at least, for a damaged file */
#define DELIVER_MAX_ACTIVE   256         /* attempts open at once */
#define DELIVER_BATCH        64          /* attempts started per timer run */
#define DELIVER_HDRS_MAX     (1024 * 1024) /* headers kept for RET=HDRS */
#define DELIVER_CHUNK        (128 * 1024) /* RET=FULL copy size */
#define DELIVER_SAVE_RETRY_MS 1000       /* an unsaved state is tried again */
#define DELIVER_DOT_GRACE_MS 1000        /* at the stop deadline, for a reply
                                          * due after the final dot */

struct dl_attempt;

struct dl_txn {
    struct mta_txn   rt;
    struct dl_attempt *a;
    struct dl_txn     *next;
    char               text[ROUTE_TEXT_MAX + 512];
    struct route       route;
    size_t             cap;
    char               domain[256]; /* ROUTE_MX: the recipients' domain */
};

struct dl_attempt {
    struct deliver    *d;
    struct dl_attempt *next, *prev;
    struct spool_env  *env;
    int                fd;
    off_t              body_off;
    struct dl_txn     *txns;
    size_t             open;            /* relay txns not yet done */
    int                changed;         /* results recorded this attempt */
    int                cut;             /* a txn was cut by the giveback */
    int                unsaved;         /* on d->unsaved, not d->active */
};

#define DELIVER_HOLD_POLL_MS 1000        /* while limits.load holds us */

static void deliver_arm(struct deliver *d);


/* dl_schedule - (re)schedule id at wall-clock time when. */
static void
dl_schedule(struct deliver *d, const char *id, uint64_t when)
{
    dl_heap_push(d, when, id);
    deliver_arm(d);
}


/* ---- results ---- */

static const char *const dl_status_word[] = { "deferred", "sent", "bounced" };

/*
 * dl_result - record one recipient's result in the envelope, log it and
 * count it.  status is enum mta_status; word overrides the logged
 * status word ("discarded").
 */
static void
dl_result(struct dl_attempt *a, size_t i, int status, const char *reply,
    const char *relay, const char *word)
{
    struct spool_env  *env = a->env;
    struct spool_rcpt *rc = &env->rcpt[i];
    uint64_t           now = util_wall_ms();
    double             delay;

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
    a->changed = 1;
    rc->status = status == MTA_SENT ? SPOOL_RCPT_SENT :
        status == MTA_BOUNCE ? SPOOL_RCPT_BOUNCED : SPOOL_RCPT_PENDING;
    if (log_enabled(LOGL_INFO)) {
        const char *w = word ? word : dl_status_word[status];
        char        dsn[16];

        log_event(LOGL_INFO, "delivery", LOG_KVS(LKV_S("queue_id", env->id),
            LKV_S("from", env->sender), LKV_S("to", rc->addr),
            LKV_S("relay", rc->relay), LKV_D("delay", delay),
            LKV_S("status", w),
            LKV_S("dsn", logfmt_dsn(rc->last_reply, dsn, sizeof(dsn))),
            LKV_S("reply", rc->last_reply)),
            "%s: to=<%s>, relay=%s, delay=%.2f, status=%s (%s)", env->id,
            rc->addr, rc->relay, delay, w, rc->last_reply);
    }
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
static char *
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


/*
 * dl_bounce - queue a DSN for the failed recipients that asked for one:
 * the report (dsn.c), with the original streamed into the new spool file
 * between head and tail.  The DSN has the null sender and goes through
 * routing like any message.  Returns 0 (queued, or none due) or -1 (could
 * not queue: the caller keeps the message so the bounce is not lost).
 */
static int
dl_bounce(struct dl_attempt *a)
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

    if (dsn_count(env) == 0)
        return 0;
    if (env->sender[0] == '\0') {
        log_info("%s: bounce for null sender dropped", env->id);
        return 0;
    }
    memset(&in, 0, sizeof(in));
    in.env = env;
    in.hostname = d->cfg->hostname;
    in.now_ms = util_wall_ms();
    /* binary content cannot travel inside a message/rfc822 part */
    in.full = env->ret == SMTP_RET_FULL &&
        env->body != SMTP_BODY_BINARYMIME;

    memset(&denv, 0, sizeof(denv));
    memset(&rc, 0, sizeof(rc));
    rc.addr = env->sender;
    denv.sender = "";
    denv.arrival_ms = in.now_ms;
    denv.body = (env->body != SMTP_BODY_7BIT || env->smtputf8) ?
        SMTP_BODY_8BITMIME : SMTP_BODY_7BIT;
    denv.smtputf8 = env->smtputf8;
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
        log_warn("%s: cannot queue the bounce: %s", env->id,
            spool_errstr(d->sp));
        spool_abort(m);
        return -1;
    }
    log_ev(LOGL_INFO, "bounce", LOG_KVS(LKV_S("queue_id", env->id),
        LKV_S("bounce_id", newid)),
        "%s: sender non-delivery notification: %s", env->id, newid);
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
 * and never waits for the others to become final.  Returns dl_bounce()'s
 * result; on -1 nothing is marked and the next attempt tries again.
 */
static int
dl_notify(struct dl_attempt *a)
{
    struct spool_env *env = a->env;
    size_t            i;

    if (dl_bounce(a) < 0)
        return -1;
    for (i = 0; i < env->nrcpt; i++)
        if (env->rcpt[i].status == SPOOL_RCPT_BOUNCED)
            env->rcpt[i].notified = 1;
    return 0;
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


static void
dl_attempt_free(struct dl_attempt *a)
{
    struct dl_txn  *t, *tn;

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
    free(a);
}


/* dl_expire - past max_queue_time: the open recipients bounce. */
static void
dl_expire(struct dl_attempt *a)
{
    struct spool_env *env = a->env;
    char              why[SMTP_REPLY_MAX + 100];
    size_t            i;

    for (i = 0; i < env->nrcpt; i++) {
        struct spool_rcpt *rc = &env->rcpt[i];

        if (rc->status != SPOOL_RCPT_PENDING)
            continue;
        snprintf(why, sizeof(why), "4.4.7 message expired after %llu "
            "seconds in the queue; last error: %s",
            (unsigned long long)(a->d->cfg->max_queue_time_ms / 1000),
            rc->last_reply ? rc->last_reply : "none");
        dl_result(a, i, MTA_BOUNCE, why, rc->relay ? rc->relay : "none",
            NULL);
    }
}


/* dl_save - write a's state.  0, or -1 (logged once per episode: a full
 * spool fails every save alike). */
static int
dl_save(struct dl_attempt *a)
{
    struct deliver *d = a->d;

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
static void
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
static void
dl_finish(struct dl_attempt *a)
{
    struct deliver   *d = a->d;
    struct spool_env *env = a->env;
    uint64_t          now = util_wall_ms();
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
    /* the bounce for what failed now goes out now, whatever the others */
    notified = dl_notify(a) == 0;
    if (pending == 0 && notified) {
        if (spool_remove_env(d->sp, env) != SPOOL_OK)
            log_warn("%s: remove: %s", env->id, spool_errstr(d->sp));
        else
            log_ev(LOGL_INFO, "removed", LOG_KVS(LKV_S("queue_id", env->id)),
                "%s: removed", env->id);
        dl_attempt_free(a);
        deliver_arm(d);
        return;
    }
    if (pending == 0) {
        /* kept until its bounce is queued */
        env->next_retry_ms = now + deliver_retry_delay(d->cfg->retry_ms,
            d->cfg->nretry, 1);
    } else {
        env->attempts++;
        env->next_retry_ms = deliver_next_retry(d->cfg->retry_ms,
            d->cfg->nretry, env->attempts, now, env->arrival_ms,
            d->cfg->max_queue_time_ms);
    }
    if (dl_save(a) == 0) {
        dl_reschedule(a);
        return;
    }
    dl_hold(a);
}


/* dl_giveback_one - the stop deadline cut a transaction of a: results
 * that are in are saved (due at once, for the next generation), nothing
 * else is marked, and the message is unlocked. */
static void
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
    log_info("%s: stop deadline: attempt given back to the next "
        "generation", a->env->id);
    d->ngiven++;
    dl_attempt_free(a);
}


/* dl_txn_done - a relay transaction is back with its results. */
static void
dl_txn_done(struct mta_txn *rt)
{
    struct dl_txn     *t = rt->arg;
    struct dl_attempt *a = t->a;
    size_t             i;

    if (rt->cut)
        a->cut = 1;                     /* its recipients stay as they were */
    else
        for (i = 0; i < rt->nrcpt; i++)
            dl_result(a, rt->rcpt[i], rt->res[i].status, rt->res[i].reply,
                rt->res[i].relay, NULL);
    if (--a->open > 0)
        return;
    if (a->cut)
        dl_giveback_one(a);
    else
        dl_finish(a);
}


/* dl_group - the transaction of a for a destination, new if needed: the
 * route text, or for an mx route "mx:" and the recipient's own domain
 * (each recipient domain is a destination of its own). */
static struct dl_txn *
dl_group(struct dl_attempt *a, const struct router_result *res,
    const char *rcpt)
{
    struct dl_txn *t;
    char           key[sizeof(t->text)];
    const char    *at = strrchr(rcpt, '@');
    size_t         i;

    if (res->route.kind == ROUTE_MX) {
        snprintf(key, sizeof(key), "mx:%.300s", at != NULL ? at + 1 : "");
        for (i = 3; key[i] != '\0'; i++)
            if (key[i] >= 'A' && key[i] <= 'Z')
                key[i] = (char)(key[i] - 'A' + 'a');
    } else {
        util_strlcpy(key, res->value, sizeof(key));
    }
    for (t = a->txns; t; t = t->next)
        if (strcmp(t->text, key) == 0)
            return t;
    t = xcalloc(1, sizeof(*t));
    t->a = a;
    util_strlcpy(t->text, key, sizeof(t->text));
    if (res->route.kind == ROUTE_MX)
        util_strlcpy(t->domain, key + 3, sizeof(t->domain));
    t->route = res->route;
    t->next = a->txns;
    a->txns = t;
    return t;
}


/* dl_local - settle recipient i on a non-SMTP route now. */
static void
dl_local(struct dl_attempt *a, size_t i, const struct route *rt)
{
    struct deliver *d = a->d;
    char            why[1200];

    switch (rt->kind) {
    case ROUTE_MAILDIR:
        if (maildir_deliver(rt->path, a->env->sender, a->env->rcpt[i].addr,
            a->fd, a->body_off, a->env->body_size, d->cfg->spool_fsync,
            d->cfg->hostname, why, sizeof(why)) < 0) {
            dl_result(a, i, MTA_DEFER, why, "local", NULL);
        } else {
            snprintf(why, sizeof(why), "delivered to maildir %s", rt->path);
            dl_result(a, i, MTA_SENT, why, "local", NULL);
        }
        break;
    case ROUTE_DISCARD:
        dl_result(a, i, MTA_SENT, "discarded by route", "none",
            "discarded");
        break;
    case ROUTE_REJECT:
    case ROUTE_DEFER:
        snprintf(why, sizeof(why), "%d %s", rt->code, rt->text);
        dl_result(a, i, rt->kind == ROUTE_REJECT ? MTA_BOUNCE :
            MTA_DEFER, why, "none", NULL);
        break;
    default:
        dl_result(a, i, MTA_DEFER, "451 4.3.5 unknown route kind",
            "none", NULL);
        break;
    }
}


/*
 * dl_run - route the open recipients of a and start the groups.  SMTP
 * groups go to the relay, which calls back later; when there are none the
 * attempt finishes here.
 */
static void
dl_run(struct dl_attempt *a)
{
    struct deliver      *d = a->d;
    struct spool_env    *env = a->env;
    struct router_result res;
    struct dl_txn       *t;
    size_t               i;
    char                 why[600];

    for (i = 0; i < env->nrcpt; i++) {
        if (env->rcpt[i].status != SPOOL_RCPT_PENDING)
            continue;
        if (router_lookup(d->router, env->rcpt[i].addr, &res) != ROUTER_OK) {
            snprintf(why, sizeof(why), "451 4.3.0 route lookup failed: %s",
                router_errstr(d->router));
            dl_result(a, i, MTA_DEFER, why, "none", NULL);
            continue;
        }
        if (res.route.kind != ROUTE_SMTP && res.route.kind != ROUTE_MX) {
            dl_local(a, i, &res.route);
            continue;
        }
        t = dl_group(a, &res, env->rcpt[i].addr);
        if (t->rt.nrcpt == t->cap) {
            t->cap = t->cap ? t->cap * 2 : 4;
            t->rt.rcpt = xrealloc(t->rt.rcpt, t->cap * sizeof(size_t));
        }
        t->rt.rcpt[t->rt.nrcpt++] = i;
    }
    /* count first: a txn may complete only on a later loop turn, but the
     * counter must be whole before the first submit */
    for (t = a->txns; t; t = t->next)
        a->open++;
    if (a->open == 0) {
        dl_finish(a);
        return;
    }
    for (t = a->txns; t; t = t->next) {
        t->rt.env = env;
        t->rt.fd = a->fd;
        t->rt.body_off = a->body_off;
        t->rt.dest = t->text;
        t->rt.route = &t->route;
        t->rt.res = xcalloc(t->rt.nrcpt, sizeof(*t->rt.res));
        t->rt.done = dl_txn_done;
        t->rt.arg = t;
        resolve_submit(d->resolve, d->relay, &t->rt, t->domain);
    }
}


/* dl_is_active - is an attempt for id open, or held unsaved, right now? */
static int
dl_is_active(const struct deliver *d, const char *id)
{
    const struct dl_attempt *a;

    for (a = d->active; a; a = a->next)
        if (strcmp(a->env->id, id) == 0)
            return 1;
    for (a = d->unsaved; a; a = a->next)
        if (strcmp(a->env->id, id) == 0)
            return 1;
    return 0;
}


/* dl_start - open, lock and run one attempt for id. */
static void
dl_start(struct deliver *d, const char *id)
{
    struct spool_env  *env = NULL;
    struct dl_attempt *a;
    int                fd = -1, rc;
    off_t              off = 0;

    if (dl_is_active(d, id))
        return;                         /* already running, or held */
    rc = spool_msg_open(d->sp, id, 1, &env, &fd, &off);
    if (rc == SPOOL_ENOENT)
        return;                         /* delivered or deleted meanwhile */
    if (rc == SPOOL_OK && env->state_damaged)
        log_warn("%s: state file damaged; ignored: delivering to every "
            "recipient again", id);
    if (rc == SPOOL_ELOCKED) {
        log_debug("%s: locked by another process; retrying", id);
        dl_schedule(d, id, util_wall_ms() + DELIVER_LOCKED_MS);
        return;
    }
    if (rc != SPOOL_OK) {
        uint64_t wait = deliver_retry_delay(d->cfg->retry_ms, d->cfg->nretry,
            (unsigned)-1);

        /* a damaged file will not heal by itself: the longest step, so
         * the warning does not flood the log */
        if (wait < DELIVER_ERROR_MS)
            wait = DELIVER_ERROR_MS;
        log_warn("%s: cannot open for delivery: %s", id, spool_errstr(d->sp));
        if (fd >= 0)
            close(fd);
        spool_env_free(env);
        dl_schedule(d, id, util_wall_ms() + wait);
        return;
    }
    if (env->held) {
        log_info("%s: on hold; not delivering", id);
        close(fd);
        spool_env_free(env);
        return;
    }
    a = xcalloc(1, sizeof(*a));
    a->d = d;
    a->env = env;
    a->fd = fd;
    a->body_off = off;
    a->next = d->active;
    if (d->active)
        d->active->prev = a;
    d->active = a;
    d->nactive++;
    dl_run(a);
}


/* dl_held - does the master's load policy hold deliveries now? */
static int
dl_held(const struct deliver *d)
{
    return d->throttle != NULL && (__atomic_load_n(d->throttle,
        __ATOMIC_RELAXED) & STATUS_THROTTLE_HOLD) != 0;
}


/* deliver_fire - start the attempts that are due, within the limits. */
static void
deliver_fire(struct ev_loop *loop, struct ev_timer *tm, void *arg)
{
    struct deliver *d = arg;
    uint64_t        now = util_wall_ms();
    int             n = 0;

    (void)loop;
    (void)tm;
    if (dl_held(d)) {
        /* limits.load.queue_only: look again in a second (see HOLD) */
        if (d->nheap > 0)
            ev_timer_start(d->loop, &d->timer, DELIVER_HOLD_POLL_MS);
        return;
    }
    while (d->nheap > 0 && d->heap[0].when <= (d->draining ? 0 : now) &&
        d->nactive + d->nunsaved < DELIVER_MAX_ACTIVE && n < DELIVER_BATCH) {
        struct dl_entry e;

        dl_heap_pop(d, &e);
        dl_start(d, e.id);
        n++;
    }
    deliver_arm(d);
}


/* deliver_arm - point the timer at the earliest entry (or leave it off
 * while the active limit is reached: a finishing attempt re-arms).  While
 * draining only "now" entries run: messages the finishing sessions still
 * accept get their first attempt; retries wait for the next generation. */
static void
deliver_arm(struct deliver *d)
{
    uint64_t now, when;

    if (d->nheap == 0 || d->gaveback ||
        d->nactive + d->nunsaved >= DELIVER_MAX_ACTIVE ||
        (d->draining && d->heap[0].when != 0)) {
        ev_timer_stop(d->loop, &d->timer);
        return;
    }
    now = util_wall_ms();
    when = d->heap[0].when;
    ev_timer_start(d->loop, &d->timer, when > now ? when - now : 0);
}


/* ---- public ---- */

struct deliver *
deliver_new(struct ev_loop *loop, const struct config *cfg, struct spool *sp,
    struct router *r, struct status_worker *st, unsigned shard,
    unsigned nshards)
{
    struct deliver *d = xcalloc(1, sizeof(*d));
    unsigned        share;

    d->loop = loop;
    d->cfg = cfg;
    d->sp = sp;
    d->router = r;
    d->st = st;
    d->nshards = nshards ? nshards : 1;
    d->shard = shard % d->nshards;
    /* this worker's share of connections_per_destination (see LIMITS) */
    share = cfg->connections_per_destination > 0 ?
        ((unsigned)cfg->connections_per_destination + d->nshards - 1) /
        d->nshards : 1;
    d->relay = mta_new(loop, cfg->hostname, cfg->connect_timeout_ms, share);
    d->resolve = resolve_new(loop, cfg);
    mta_set_timeouts(d->relay, &cfg->mta_timeouts);
    ev_timer_init(&d->timer, deliver_fire, d);
    ev_timer_init(&d->save_timer, dl_save_fire, d);
    return d;
}


void
deliver_free(struct deliver *d)
{
    if (d == NULL)
        return;
    ev_timer_stop(d->loop, &d->timer);
    ev_timer_stop(d->loop, &d->save_timer);
    /* connections first: they point at the attempts' envelopes */
    mta_free(d->relay);
    resolve_free(d->resolve);           /* after the relay: see there */
    while (d->active != NULL)
        dl_attempt_free(d->active);
    while (d->unsaved != NULL) {
        if (dl_save(d->unsaved) < 0)
            log_warn("%s: exiting with its delivery state unsaved: the "
                "next attempt may repeat deliveries", d->unsaved->env->id);
        dl_attempt_free(d->unsaved);
    }
    free(d->heap);
    free(d);
}




/* deliver_load - rebuild the schedule from the spool: every id of our
 * shard, at once (now: a kick) or at its saved next retry.  Ids with an
 * attempt open are left to it; it reschedules itself. */
static int
deliver_load(struct deliver *d, int now, const char *why)
{
    char  (*ids)[SPOOL_ID_SIZE] = NULL;
    struct dl_entry *found = NULL;
    size_t n = 0, i, taken = 0, held = 0, nfound = 0, capfound = 0;
    int    rc;

    rc = spool_list(d->sp, &ids, &n);
    if (rc != SPOOL_OK) {
        log_warn("%s: listing the queue: %s", why, spool_errstr(d->sp));
        return -1;
    }
    for (i = 0; i < n; i++) {
        struct spool_env *env = NULL;
        int               fd = -1;
        off_t             off;
        uint64_t          when = 0;

        if (deliver_shard_of(ids[i], d->nshards) != d->shard ||
            dl_is_active(d, ids[i]))
            continue;
        rc = spool_msg_open(d->sp, ids[i], 0, &env, &fd, &off);
        if (rc == SPOOL_ENOENT)
            continue;
        if (rc == SPOOL_OK) {
            when = env->next_retry_ms;
            if (env->held)
                held++;
        }
        if (fd >= 0)
            close(fd);
        if (rc == SPOOL_OK && env->held) {
            spool_env_free(env);
            continue;
        }
        spool_env_free(env);
        /* an unreadable file is tried now: the attempt logs why */
        if (nfound == capfound) {
            capfound = capfound ? capfound * 2 : 64;
            found = xrealloc(found, capfound * sizeof(*found));
        }
        found[nfound].when = now ? 0 : when;
        util_strlcpy(found[nfound].id, ids[i], SPOOL_ID_SIZE);
        nfound++;
        taken++;
    }
    free(ids);
    d->nheap = 0;                       /* the spool is the truth */
    for (i = 0; i < nfound; i++)
        dl_heap_push(d, found[i].when, found[i].id);
    free(found);
    log_info("%s: %zu queued messages of shard %u scheduled, %zu on hold",
        why, taken, d->shard, held);
    deliver_arm(d);
    return 0;
}


int
deliver_recover(struct deliver *d)
{
    return deliver_load(d, 0, "recover");
}


void
deliver_submit(struct deliver *d, const char *id)
{
    dl_schedule(d, id, 0);
}


void
deliver_kick(struct deliver *d, const char *id)
{
    size_t i;

    if (d->draining)
        return;
    if (id == NULL || strcmp(id, "*") == 0) {
        /* rebuild from the spool: this also finds released messages */
        (void)deliver_load(d, 1, "kick");
        return;
    }
    if (!spool_id_valid(id) || deliver_shard_of(id, d->nshards) != d->shard)
        return;
    for (i = 0; i < d->nheap; i++) {
        if (strcmp(d->heap[i].id, id) == 0) {
            d->heap[i].when = 0;
            dl_heap_up(d, i);
            deliver_arm(d);
            return;
        }
    }
    dl_schedule(d, id, 0);
}


void
deliver_giveback(struct deliver *d)
{
    if (d->gaveback)
        return;
    d->draining = 1;
    d->gaveback = 1;                    /* nothing starts from here on */
    ev_timer_stop(d->loop, &d->timer);
    /* finished transactions report first (dl_finish); the others come
     * back cut (dl_txn_done -> dl_giveback_one), but for one waiting for
     * the reply to its final dot, which may still finish normally */
    mta_abort(d->relay, DELIVER_DOT_GRACE_MS);
    if (d->ngiven > 0)
        log_notice("stop deadline: %zu deliveries given back", d->ngiven);
}


size_t
deliver_drain(struct deliver *d)
{
    if (!d->draining) {
        d->draining = 1;
        mta_drain(d->relay);
        deliver_arm(d);
    }
    if (d->gaveback)
        return d->nactive + d->nunsaved;    /* replies after a dot */
    /* first attempts still due count as in flight (see deliver_arm),
     * unless the load policy holds them: the next generation takes them */
    return d->nactive + d->nunsaved + (d->nheap > 0 &&
        d->heap[0].when == 0 && !dl_held(d) ? 1 : 0);
}


void
deliver_set_throttle(struct deliver *d, const uint32_t *throttle)
{
    d->throttle = throttle;
}


void
deliver_gauges(const struct deliver *d, uint64_t *active, uint64_t *due,
    uint64_t *deferred)
{
    uint64_t now = util_wall_ms();
    size_t   i;

    *active = d->nactive;
    *due = *deferred = 0;
    for (i = 0; i < d->nheap; i++) {
        if (d->heap[i].when <= now)
            (*due)++;
        else
            (*deferred)++;
    }
}
