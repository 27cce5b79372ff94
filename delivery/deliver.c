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
 *           Postfix does, not when the last deferred one is final), and
 *           the NOTIFY=SUCCESS and NOTIFY=DELAY reports due (attempt.c);
 *           then
 *           all final -> spool_remove(); else attempts++, next retry from
 *           delivery.retry (the last step repeats), state saved, lock
 *           released, rescheduled; past max_queue_time the open
 *           recipients bounce (4.4.7).
 * LIMITS    At most d->max_active attempts are open or held unsaved at
 *           once (each holds the queue fd and its lock); the rest wait in
 *           the heap.  DELIVER_MAX_ACTIVE, or up to DELIVER_MAX_ACTIVE_HI
 *           when the open-file limit leaves room (an eighth of it): with
 *           many inbound sessions the accepted mail outruns the outbound
 *           connections for a while, and every message past the limit
 *           was closed, and later reopened, locked and re-read instead
 *           of being handed over from the session.
 *           Connections per destination: this worker's share of
 *           delivery.connections_per_destination, ceil(limit / nshards), so
 *           all workers together stay within the configured limit.
 * STOP      deliver_drain(): idle connections close, attempts still
 *           waiting for DNS are given back (nothing was sent), running
 *           ones finish, and messages the last sessions still accept get their
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
 *           attempt.c: results, bounces, saving the state, the unsaved
 *           hold and the giveback.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/resource.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/logfmt.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "router/router.h"
#include "spool/spool.h"
#include "bclass/bclass.h"
#include "delivery/delivery.h"
#include "delivery/delivery_int.h"
#include "delivery/dsn.h"
#include "delivery/maildir.h"
#include "delivery/mta.h"
#include "tlspol/tlspol.h"
#include "delivery/resolve.h"

#define DELIVER_LOCKED_MS    5000        /* queue file locked elsewhere */
#define DELIVER_ERROR_MS     60000       /* at least, for a damaged file */
#define DELIVER_MAX_ACTIVE   256         /* attempts open at once, at least */
#define DELIVER_MAX_ACTIVE_HI 2048       /* ... at most (see LIMITS) */
#define DELIVER_BATCH        64          /* attempts started per timer run */
#define DELIVER_DOT_GRACE_MS 1000        /* at the stop deadline, for a reply
                                          * due after the final dot */


#define DELIVER_HOLD_POLL_MS 1000        /* while limits.load holds us */


/* dl_schedule - (re)schedule id at wall-clock time when. */
void
dl_schedule(struct deliver *d, const char *id, uint64_t when)
{
    dl_heap_push(d, when, id);
    deliver_arm(d);
}


/* dl_txn_class - the bounce class of rt's first failure (shaping's
 * back-off rules may match it), or NULL when every recipient went. */
static const char *
dl_txn_class(const struct deliver *d, const struct mta_txn *rt)
{
    size_t i;

    for (i = 0; i < rt->nrcpt; i++)
        if (rt->res[i].status != MTA_SENT)
            return bclass_name(bclass_of(d->cfg->bclass, rt->res[i].reply));
    return NULL;
}


/* dl_txn_done - a relay transaction is back with its results. */
static void
dl_txn_done(struct mta_txn *rt)
{
    struct dl_txn     *t = rt->arg;
    struct dl_attempt *a = t->a;
    struct dl_txn     *fb = NULL;
    struct deliver    *d = a->d;
    size_t             i;

    if (d->waits != NULL && !rt->cut)
        mta_shape_done(d->relay, rt, dl_txn_class(d, rt));  /* back-off */
    if (rt->cut) {
        a->cut = 1;                     /* its recipients stay as they were */
    } else if (rt->held) {
        /* shaping: untried, no result, no retry: the id waits (HELD) */
        a->held = 1;
        dl_wait_add(d, rt->shape_e, a->env->id, a->env->arrival_ms,
            rt->not_before_ms);
    } else {
        if (rt->shape_e >= 0 && d->waits != NULL)
            dl_wait_release(d, rt->shape_e, 1);   /* the next may go */
        fb = dl_fallback(a, t);
        a->site = rt->site;             /* the class counts by site */
        for (i = 0; i < rt->nrcpt; i++) {
            /* deferred by the direct hosts: the fallback relay's now */
            if (fb != NULL && rt->res[i].status == MTA_DEFER)
                continue;
            dl_result_tls(a, rt->rcpt[i], rt->res[i].status,
                rt->res[i].reply, rt->res[i].relay, NULL, &rt->res[i].tls,
                rt->res[i].source);
            /* a next hop with DSN got NOTIFY and reports the success */
            if (rt->res[i].status == MTA_SENT && !rt->res[i].peer_dsn)
                a->env->rcpt[rt->rcpt[i]].success = SPOOL_SUCCESS_RELAYED;
        }
    }
    a->site = NULL;
    if (fb != NULL)
        dl_fallback_start(a, fb, dl_txn_done);  /* done() from the loop */
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
    const char *rcpt, int tls_level, int pool)
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
        if (strcmp(t->text, key) == 0 && (int)t->rt.tls.level == tls_level
            && t->rt.pool == pool)
            return t;
    t = xcalloc(1, sizeof(*t));
    t->a = a;
    t->rt.pool = pool;
    util_strlcpy(t->text, key, sizeof(t->text));
    t->rt.tls.level = (enum tls_level)tls_level;
    util_strlcpy(t->rt.tls.policy_domain, at != NULL ? at + 1 : "",
        sizeof(t->rt.tls.policy_domain));
    if (res->route.kind == ROUTE_MX)
        util_strlcpy(t->domain, key + 3, sizeof(t->domain));
    t->route = res->route;
    t->next = a->txns;
    a->txns = t;
    return t;
}


/* dl_tls_attempt - every TLS attempt (mta_set_tls_report()): a debug
 * record per MX host tried, the hook TLS-RPT counts from. */
static void
dl_tls_attempt(void *arg, const struct tls_req *req, const char *host,
    const struct tls_outcome *o)
{
    char tf[160];

    (void)arg;
    if (!log_enabled(LOGL_DEBUG))
        return;
    (void)tls_outcome_format(o, tf, sizeof(tf));
    log_debug("tls attempt: host=%s policy_domain=%s level=%s %s%s", host,
        req->policy_domain[0] ? req->policy_domain : "-",
        tls_level_name(req->level), tf, o->resumed ? " resumed" : "");
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
            a->env->rcpt[i].success = SPOOL_SUCCESS_DELIVERED;
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
    int                  lvl, pool, sp = 0;
    char                 why[600], sender_pool[ROUTE_POOL_MAX + 1];
    const char          *pname;

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
        if ((lvl = dl_tls_level(d, env->rcpt[i].addr, &res)) < 0) {
            snprintf(why, sizeof(why), "451 4.3.0 TLS policy lookup "
                "failed: %s", router_errstr(d->router));
            dl_result(a, i, MTA_DEFER, why, "none", NULL);
            continue;
        }
        /* egress pool: the route's, else the sender domain's, else the
         * default (looked up once per attempt, when a route needs it;
         * without egress pools there is only the default to find) */
        if (res.route.pool[0] == '\0' && sp == 0)
            sp = d->cfg->negress_pools == 0 ? (sender_pool[0] = '\0', 1) :
                dl_sender_pool(d, env->sender, sender_pool,
                sizeof(sender_pool)) < 0 ? -1 : 1;
        if (res.route.pool[0] == '\0' && sp < 0) {
            snprintf(why, sizeof(why), "451 4.3.0 egress pool lookup "
                "failed: %s", router_errstr(d->router));
            dl_result(a, i, MTA_DEFER, why, "none", NULL);
            continue;
        }
        pname = res.route.pool[0] != '\0' ? res.route.pool : sender_pool;
        if ((pool = mta_egress_pool(d->relay, pname)) < 0) {
            snprintf(why, sizeof(why), "451 4.3.5 egress pool %s is not "
                "configured (egress.pools)", pname);
            dl_result(a, i, MTA_DEFER, why, "none", NULL);
            continue;
        }
        t = dl_group(a, &res, env->rcpt[i].addr, lvl, pool);
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


static void dl_begin(struct deliver *d, struct spool_env *env, int fd,
            off_t off);

/* dl_start - open, lock and run one attempt for id. */
static void
dl_start(struct deliver *d, const char *id)
{
    struct spool_env  *env = NULL;
    int                fd = -1, rc;
    off_t              off = 0;

    if (dl_is_active(d, id))
        return;                         /* already running, or held */
    rc = spool_msg_open(d->sp, id, 1, &env, &fd, &off);
    if (rc == SPOOL_ENOENT) {
        qx_drop(d, id);
        return;                         /* delivered or deleted meanwhile */
    }
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
        qx_put(d, env, 0);
        close(fd);
        spool_env_free(env);
        return;
    }
    dl_begin(d, env, fd, off);
}


/* dl_begin - an attempt from an opened, locked message: env and fd are
 * the attempt's now. */
static void
dl_begin(struct deliver *d, struct spool_env *env, int fd, off_t off)
{
    struct dl_attempt *a;

    a = xcalloc(1, sizeof(*a));
    a->d = d;
    a->env = env;
    a->fd = fd;
    a->body_off = off;
    qx_put(d, env, 1);
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
        d->nactive + d->nunsaved < d->max_active && n < DELIVER_BATCH) {
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
void
deliver_arm(struct deliver *d)
{
    uint64_t now, when;

    if (d->nheap == 0 || d->gaveback ||
        d->nactive + d->nunsaved >= d->max_active ||
        (d->draining && d->heap[0].when != 0)) {
        ev_timer_stop(d->loop, &d->timer);
        return;
    }
    now = util_wall_ms();
    when = d->heap[0].when;
    ev_timer_start(d->loop, &d->timer, when > now ? when - now : 0);
}


/* ---- public ---- */

/* dl_max_active - the limit on open attempts (see LIMITS): an eighth of
 * the open-file limit, within [DELIVER_MAX_ACTIVE, DELIVER_MAX_ACTIVE_HI]. */
static size_t
dl_max_active(void)
{
    struct rlimit nofile;

    if (getrlimit(RLIMIT_NOFILE, &nofile) != 0)
        return DELIVER_MAX_ACTIVE;
    if (nofile.rlim_cur == RLIM_INFINITY ||
        nofile.rlim_cur / 8 >= DELIVER_MAX_ACTIVE_HI)
        return DELIVER_MAX_ACTIVE_HI;
    if (nofile.rlim_cur / 8 <= DELIVER_MAX_ACTIVE)
        return DELIVER_MAX_ACTIVE;
    return (size_t)(nofile.rlim_cur / 8);
}


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
    mta_set_egress(d->relay, cfg);
    {
        /* the CA bundle is read now, before the sandbox (tls_client.c) */
        struct tls_client_opts o = { cfg->tls_ca_file, 0, 0 };
        char                   err[512];
        struct ssl_ctx_st     *ctx = tls_client_ctx(&o, err, sizeof(err));

        if (ctx == NULL) {
            log_err("outbound TLS: %s", err);
            mta_free(d->relay);
            free(d);
            return NULL;
        }
        mta_set_tls(d->relay, ctx);
        mta_set_tls_report(d->relay, dl_tls_attempt, d);
    }
    d->resolve = resolve_new(loop, cfg);
    mta_set_timeouts(d->relay, &cfg->mta_timeouts);
    ev_timer_init(&d->timer, deliver_fire, d);
    ev_timer_init(&d->save_timer, dl_save_fire, d);
    d->max_active = dl_max_active();
    d->qx = qx_new(d);
    return d;
}


struct dns *
deliver_dns(struct deliver *d)
{
    return d != NULL && d->resolve != NULL ? resolve_dns(d->resolve) : NULL;
}


void
deliver_free(struct deliver *d)
{
    if (d == NULL)
        return;
    ev_timer_stop(d->loop, &d->timer);
    ev_timer_stop(d->loop, &d->save_timer);
    dl_wait_free(d);
    qx_free(d);
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
    free(d->stale);
    free(d);
}


static int
dl_id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, SPOOL_ID_SIZE);
}


/* dl_active_ids - the ids of the open and unsaved attempts, sorted: a
 * rebuild looks each queue file up there with a binary search, not with
 * dl_is_active()'s walk (up to max_active attempts per file). */
static char (*dl_active_ids(const struct deliver *d, size_t *np))[SPOOL_ID_SIZE]
{
    const struct dl_attempt *a;
    char                   (*v)[SPOOL_ID_SIZE];
    size_t                   n = 0;

    v = xcalloc(d->nactive + d->nunsaved + 1, SPOOL_ID_SIZE);
    for (a = d->active; a; a = a->next)
        memcpy(v[n++], a->env->id, SPOOL_ID_SIZE);
    for (a = d->unsaved; a; a = a->next)
        memcpy(v[n++], a->env->id, SPOOL_ID_SIZE);
    qsort(v, n, SPOOL_ID_SIZE, dl_id_cmp);
    *np = n;
    return v;
}


/* deliver_load - rebuild the schedule from the spool: every id of our
 * shard, at once (now: a kick) or at its saved next retry.  Ids with an
 * attempt open are left to it; it reschedules itself. */
/* dl_state_ids - the ids in state/ of this shard, sorted (a start-up
 * recovery: see dl_orphans); NULL when none or unreadable (logged). */
static char (*dl_state_ids(struct deliver *d, size_t *np))[SPOOL_ID_SIZE]
{
    char  (*v)[SPOOL_ID_SIZE] = NULL;
    size_t n = 0, i, j = 0;

    *np = 0;
    if (spool_state_list(d->sp, &v, &n) != SPOOL_OK) {
        log_warn("recover: listing the states: %s", spool_errstr(d->sp));
        return NULL;
    }
    for (i = 0; i < n; i++)
        if (deliver_shard_of(v[i], d->nshards) == d->shard)
            memcpy(v[j++], v[i], SPOOL_ID_SIZE);
    *np = j;
    return v;
}


/* dl_orphans - the state files of this shard whose message is gone (a
 * removal cut between its two unlinks) go; the master's start leaves this
 * to the workers, shard by shard, in parallel (spool_prepare_tree). */
static void
dl_orphans(struct deliver *d, char (*st)[SPOOL_ID_SIZE], size_t nst,
    char (*ids)[SPOOL_ID_SIZE], size_t n)
{
    size_t i, gone = 0;

    for (i = 0; i < nst; i++)
        if (bsearch(st[i], ids, n, SPOOL_ID_SIZE, dl_id_cmp) == NULL &&
            spool_state_orphan(d->sp, st[i]) == SPOOL_ENOENT)
            gone++;
    if (gone > 0)
        log_info("recover: %zu state files without their message removed",
            gone);
}


/* dl_prune_indexes - shard 0 removes the indexes saved by shards that
 * the worker count no longer has: at the start, and at a kick (the one
 * after a reload's old workers are gone, which saved theirs on the way
 * out). */
static void
dl_prune_indexes(struct deliver *d, const char *why)
{
    unsigned n = spool_index_prune(d->sp, d->nshards);

    if (n > 0)
        log_info("%s: %u queue index files of shards %u and up removed "
            "(%u workers now)", why, n, d->nshards, d->nshards);
}


static int
deliver_load(struct deliver *d, int now, const char *why)
{
    char  (*ids)[SPOOL_ID_SIZE] = NULL, (*act)[SPOOL_ID_SIZE];
    char  (*st)[SPOOL_ID_SIZE] = NULL;
    struct dl_entry *found = NULL;
    size_t n = 0, i, taken = 0, held = 0, nfound = 0, capfound = 0, nact;
    size_t nst = 0;
    int    rc, recover = strcmp(why, "recover") == 0;

    /* before the queue listing: a state saved after it is then always
     * for a message in it, never mistaken for an orphan */
    if (recover)
        st = dl_state_ids(d, &nst);
    rc = spool_list(d->sp, &ids, &n);
    if (rc != SPOOL_OK) {
        log_warn("%s: listing the queue: %s", why, spool_errstr(d->sp));
        free(st);
        return -1;
    }
    act = dl_active_ids(d, &nact);
    qx_sync_begin(d, recover);
    for (i = 0; i < n; i++) {
        struct spool_env *env = NULL;
        int               fd = -1, pk, pheld, marked;
        off_t             off;
        uint64_t          when = 0;

        if (deliver_shard_of(ids[i], d->nshards) != d->shard)
            continue;
        if (nact > 0 && bsearch(ids[i], act, nact, SPOOL_ID_SIZE,
            dl_id_cmp) != NULL) {
            qx_sync_add(d, ids[i], NULL, 0, 0, 0, 1);
            continue;
        }
        /* Usually one fstatat(): the schedule is in the queue file's
         * inode (spool_sched_peek), so a million deferred messages are
         * scheduled without opening each of their files twice. */
        pk = spool_sched_peek(d->sp, ids[i], &when, &pheld, &marked);
        if (pk == SPOOL_ENOENT)
            continue;
        if (pk == SPOOL_OK && !marked && nst > 0 && bsearch(ids[i], st, nst,
            SPOOL_ID_SIZE, dl_id_cmp) != NULL) {
            /* a state saved before queue files carried the mark: mark it,
             * then read it (spool_prepare did this in the master) */
            (void)spool_state_adopt(d->sp, ids[i]);
            pk = SPOOL_EFORMAT;
        }
        if (pk == SPOOL_OK)
            qx_sync_add(d, ids[i], NULL, 1, when, pheld, 0);
        if (pk == SPOOL_OK) {
            if (pheld) {
                held++;
                continue;
            }
            goto found;
        }
        when = 0;
        rc = spool_msg_open(d->sp, ids[i], 0, &env, &fd, &off);
        if (rc == SPOOL_ENOENT)
            continue;
        if (rc == SPOOL_OK) {
            when = env->next_retry_ms;
            if (env->held)
                held++;
        }
        qx_sync_add(d, ids[i], rc == SPOOL_OK ? env : NULL, 0, 0, 0, 0);
        if (fd >= 0)
            close(fd);
        if (rc == SPOOL_OK && env->held) {
            spool_env_free(env);
            continue;
        }
        spool_env_free(env);
        /* an unreadable file is tried now: the attempt logs why */
found:
        if (nfound == capfound) {
            capfound = capfound ? capfound * 2 : 64;
            found = xrealloc(found, capfound * sizeof(*found));
        }
        found[nfound].when = now ? 0 : when;
        util_strlcpy(found[nfound].id, ids[i], SPOOL_ID_SIZE);
        nfound++;
        taken++;
    }
    if (st != NULL)
        dl_orphans(d, st, nst, ids, n);
    if (d->shard == 0)
        dl_prune_indexes(d, why);
    free(st);
    free(ids);
    free(act);
    qx_sync_end(d);
    qx_quota_rebuild(d);
    d->nheap = 0;                       /* the spool is the truth */
    for (i = 0; i < nfound; i++)
        dl_heap_push(d, found[i].when, found[i].id);
    free(found);
    dl_wait_clear(d);                   /* held ids are in the heap again */
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
    qx_add_id(d, id);
    dl_schedule(d, id, 0);
}


/* The hand-off (spool_keep): what dl_start() would do after its
 * spool_msg_open(), minus the open.  Only when deliver_fire() would start
 * it at once too; otherwise the usual way, which reopens it later. */
void
deliver_submit_kept(struct deliver *d, struct spool_env *env, int fd,
    off_t body_off)
{
    if (d->draining || d->gaveback || dl_held(d) ||
        d->nactive + d->nunsaved >= d->max_active ||
        deliver_shard_of(env->id, d->nshards) != d->shard) {
        if (deliver_shard_of(env->id, d->nshards) == d->shard)
            qx_put(d, env, 0);          /* dl_begin() does it otherwise */
        dl_schedule(d, env->id, 0);
        close(fd);                      /* the lock goes with it */
        spool_env_free(env);
        return;
    }
    dl_begin(d, env, fd, body_off);
}


static void
dl_stale_add(struct deliver *d, const char *id)
{
    if (d->nstale == d->capstale) {
        d->capstale = d->capstale ? d->capstale * 2 : 16;
        d->stale = xrealloc(d->stale, d->capstale * sizeof(*d->stale));
    }
    util_strlcpy(d->stale[d->nstale++], id, SPOOL_ID_SIZE);
}


void
deliver_tidy(struct deliver *d)
{
    if (d->nstale == 0)
        return;
    dl_heap_tidy(d);
    deliver_arm(d);
}


void
deliver_kick(struct deliver *d, const char *id)
{
    size_t i;

    /* mtactl changed it (hold, delete, release, bounce): the listing
     * must say so at once, even while draining */
    if (id != NULL && spool_id_valid(id) &&
        deliver_shard_of(id, d->nshards) == d->shard &&
        qx_refresh(d, id) != 0) {
        /* deleted or held: nothing to deliver.  Its heap entry, if any,
         * goes at the next tick (deliver_tidy), so that the gauges stop
         * counting it; one still there when it comes up is dropped then */
        dl_stale_add(d, id);
        return;
    }
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
    resolve_cut(d->resolve);
    mta_abort(d->relay, DELIVER_DOT_GRACE_MS);
    if (d->ngiven > 0)
        log_notice("stop deadline: %zu deliveries given back", d->ngiven);
}


size_t
deliver_drain(struct deliver *d)
{
    if (!d->draining) {
        d->draining = 1;
        /* the next generation counts this shard's queue for the quotas:
         * ours goes (what we remove from here on takes from the sum) */
        if (d->qpage != NULL)
            status_quota_clear_slot(d->qpage, d->qslot);
        /* an attempt still waiting for DNS has sent nothing: the next
         * generation looks it up again rather than this one waiting out
         * a slow resolver's timeouts until the stop deadline */
        resolve_cut(d->resolve);
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


