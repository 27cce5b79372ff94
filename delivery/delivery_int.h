/*
 * deliver_int.h - the delivery schedule shared by deliver.c, schedule.c
 * (the heap and the pure arithmetic) and its unit test.  Nothing outside
 * delivery/ includes this.
 *
 * CONTRACT  Times are wall-clock milliseconds.  retry_ms[0..nretry) is
 *           delivery.retry; after attempt n (1-based) the wait is
 *           retry_ms[min(n, nretry) - 1]: the last step repeats.
 */
#ifndef MTAD_DELIVER_INT_H
#define MTAD_DELIVER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common/ev.h"
#include "spool/spool.h"

/* The wait after `attempts` failed attempts (0 is treated as 1). */
uint64_t deliver_retry_delay(const uint64_t *retry_ms, size_t nretry,
            unsigned attempts);
/* When to try next: now + the wait, but never later than the expiry
 * (arrival + max_queue; max_queue 0 = none) so that the last attempt
 * happens at expiry; and never before now. */
uint64_t deliver_next_retry(const uint64_t *retry_ms, size_t nretry,
            unsigned attempts, uint64_t now, uint64_t arrival,
            uint64_t max_queue);

struct dl_attempt;
struct config;
struct router;
struct status_worker;
struct status_page;
struct mta;
struct resolve;

struct dl_entry {
    uint64_t when;                      /* wall-clock ms */
    char     id[SPOOL_ID_SIZE];
};

struct deliver {
    struct status_page   *qpage;    /* quotas' rows (quota.c); NULL none */
    unsigned              qslot;    /* our column: the worker's slot */
    struct ev_loop       *loop;
    const struct config  *cfg;
    struct spool         *sp;
    struct router        *router;
    struct status_worker *st;
    unsigned              shard, nshards;
    struct mta         *relay;
    struct resolve       *resolve;  /* DNS for the relay's next hops */
    struct dl_entry      *heap;
    size_t                nheap, capheap;
    struct ev_timer       timer;
    struct dl_attempt    *active;
    size_t                nactive;
    size_t                max_active;   /* see LIMITS in deliver.c */
    int                   draining;
    const uint32_t       *throttle; /* status page: STATUS_THROTTLE_HOLD */
    struct status_page   *page;     /* the status page (class x site
                                       counts); NULL: none */
    /* attempts whose state could not be written: held with their lock,
     * not retried, until a save succeeds (see STATE in deliver.c) */
    struct dl_attempt    *unsaved;
    size_t                nunsaved;
    struct ev_timer       save_timer;
    int                   save_failing; /* warned in this episode */
    int                   gaveback;     /* stop deadline passed */
    size_t                ngiven;       /* attempts given back then */
    struct qx            *qx;           /* qindex.c: for mtactl queue */
    /* ids a kick found deleted or held while they may still sit in the
     * heap: taken out at the next tick (dl_heap_tidy), not per kick (a
     * heap scan each would make `hold --all` quadratic) */
    char                (*stale)[SPOOL_ID_SIZE];
    size_t                nstale, capstale;
    /* ids held by traffic shaping, per shaping entry (shape_wait.c) */
    struct dl_wait      **waits;        /* [SHAPE_SLOTS], or NULL: off */
    size_t                nwaiting;
    struct ev_timer       wait_timer;
    uint64_t              wait_at;      /* wall: when it fires */
    struct events        *events;       /* delivery events; NULL: off */
};

/* qindex.c: the index of this worker's messages for `mtactl queue`
 * (see its header).  qx_put: env is current (active: an attempt holds
 * it); qx_done: an attempt ended, env saved (ignored once dropped);
 * qx_add_id: queued, envelope not at hand; qx_drop: removed; qx_refresh:
 * changed by someone else (a kick); qx_sync_*: a rebuild from the spool,
 * ids in order (see deliver_load). */
struct qx;
struct qx *qx_new(struct deliver *d);
void qx_free(struct deliver *d);
void qx_put(struct deliver *d, const struct spool_env *env, int active);
void qx_done(struct deliver *d, const struct spool_env *env);
void qx_add_id(struct deliver *d, const char *id);
void qx_drop(struct deliver *d, const char *id);
#define QX_GONE   1
#define QX_ISHELD 2
int  qx_refresh(struct deliver *d, const char *id);
/* 1 when the index has no live record of id, or has it held. */
int  qx_is_out(const struct deliver *d, const char *id);
void qx_sync_begin(struct deliver *d, int recover);
void qx_sync_add(struct deliver *d, const char *id,
        const struct spool_env *env, int peeked, uint64_t when, int held,
        int active);
void qx_sync_end(struct deliver *d);
void qx_warm_start(struct deliver *d);

/* schedule.c: the min-heap on when in d->heap (dl_heap_up after
 * lowering an entry's when; pop only when nheap > 0). */
void dl_heap_up(struct deliver *d, size_t i);
void dl_heap_push(struct deliver *d, uint64_t when, const char *id);
void dl_heap_pop(struct deliver *d, struct dl_entry *out);
/* Remove the entries of d->stale that the index still says are deleted
 * or held (one pass, then a rebuild of the heap); empties d->stale. */
void dl_heap_tidy(struct deliver *d);

/* ---- attempts: shared by deliver.c and attempt.c ---- */

#include "router/route.h"
#include "delivery/mta.h"

#define DELIVER_SAVE_RETRY_MS 1000       /* an unsaved state is tried again */

struct dl_attempt;

struct dl_txn {
    struct mta_txn   rt;
    struct dl_attempt *a;
    struct dl_txn     *next;
    char               text[ROUTE_TEXT_MAX + 512];
    struct route       route;
    size_t             cap;
    char               domain[256]; /* ROUTE_MX: the recipients' domain */
    int                fallback;    /* to the fallback relay (fallback.c) */
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
    int                keep_cls;        /* dl_expire(): results keep the
                                           class of the last attempt */
    const char        *site;            /* dl_txn_done: the shaping site
                                           of the results being recorded */
    int                held;            /* shaping held a txn (HELD) */
    size_t             ndefer;          /* recipients deferred for real */
    int                expiring;        /* dl_expire(): results are expiry */
    char              *ev_hdr;          /* header section for the events */
    size_t             ev_hdrlen;
};

/* shape_wait.c: mail held by traffic shaping waits here, one id and its
 * arrival (32 bytes) per message, oldest first per site, until the site
 * may go: add: the txn came back held (not_before: when the site may
 * go, wall ms); release: up to n of entry e's oldest into the schedule
 * (a delivery to the site finished: one more may go); clear: every id
 * is in the schedule again (a rebuild); free. */
void dl_wait_add(struct deliver *d, int e, const char *id, uint64_t arrival,
            uint64_t not_before);
void dl_wait_release(struct deliver *d, int e, size_t n);
void dl_wait_clear(struct deliver *d);
void dl_wait_fire(struct ev_loop *loop, struct ev_timer *tm, void *arg);
void dl_wait_free(struct deliver *d);

/* deliver.c */
void dl_schedule(struct deliver *d, const char *id, uint64_t when);
void deliver_arm(struct deliver *d);

/* attempt.c: results, bounces, saving the state, hold and giveback. */
void dl_result(struct dl_attempt *a, size_t i, int status, const char *reply,
            const char *relay, const char *word);
struct tls_outcome;
void dl_result_tls(struct dl_attempt *a, size_t i, int status,
            const char *reply, const char *relay, const char *word,
            const struct tls_outcome *tls, const char *source);
/* One failed recipient result of bounce class cls (bclass.h) for site:
 * counted for /metrics; where shaping's back-off hears of it. */
void dl_note_failure(struct deliver *d, const char *site, const char *reply,
            int cls);
void dl_attempt_free(struct dl_attempt *a);
int  dl_save(struct dl_attempt *a);
void dl_save_fire(struct ev_loop *loop, struct ev_timer *tm, void *arg);
void dl_finish(struct dl_attempt *a);
void dl_giveback_one(struct dl_attempt *a);
/* The original's header section (malloc'd), *len its length. */
char *dl_read_headers(struct dl_attempt *a, size_t *len);

/* dl_events.c: the events of a result and of a DSN queued. */
struct tls_outcome;
void dl_event_result(struct dl_attempt *a, size_t i, int status,
            const struct tls_outcome *tls, const char *source);
void dl_event_dsn(struct dl_attempt *a, const char *dsn_id,
            const char *kind);
void dl_event_shape(void *arg, const char *site, const char *source,
            const char *mode, uint64_t until_ms, const char *reply);

/* fallback.c: the fallback relay (delivery.fallback_relay, a route's
 * fallback=).  dl_fallback: t came back with deferred recipients from
 * the direct hosts: a new transaction for them to the fallback relay,
 * on a's list but not started, or NULL (no fallback, t is a fallback
 * already, or the attempt is before delivery.fallback_after_attempts).
 * dl_fallback_start: count it open and hand it to DNS and the relay. */
struct dl_txn *dl_fallback(struct dl_attempt *a, struct dl_txn *t);
void dl_fallback_start(struct dl_attempt *a, struct dl_txn *fb,
        mta_done_fn *done);
/* quota.c: a message's share of the queue quotas, taken once from its
 * envelope (NULL: none; no page, or draining), given back when its index
 * entry goes (NULL ok). */
struct dq_rows;
struct dq_rows *dq_take(struct deliver *d, const struct spool_env *env);
void    dq_release(struct dq_rows *r);
void    dq_forget(struct dq_rows *r);   /* freed, nothing given back (the
                                           worker ends: its column goes) */
/* qindex.c: the rebuilt index's entries take their shares */
void    qx_quota_rebuild(struct deliver *d);

/* deliver_route.c */
int dl_tls_level(struct deliver *d, const char *rcpt,
    const struct router_result *res);
int dl_sender_pool(struct deliver *d, const char *sender, char *pool,
    size_t poolsz);

#endif /* MTAD_DELIVER_INT_H */
