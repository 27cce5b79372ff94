/*
 * qindex.c - the worker's index of the messages it owns, and the listing
 * streams it answers `mtactl queue` with (a summary and a listing of a
 * very large queue without reading a file per message).
 *
 * PURPOSE   For each message of this worker's shard: its id, state flags
 *           (held, tried, being delivered) and its listing record
 *           (spool_wire_body(): what `mtactl queue` prints of it), in one
 *           array sorted by id.  The record is built from the envelope the
 *           worker has in memory anyway (accepted, after an attempt);
 *           a clean stop saves the records (state/index-<shard>,
 *           spool_index_save) and the next start takes each one whose
 *           queue file's inode still says the same (next retry, held);
 *           the others (all of them after a crash) are read from the files
 *           by a warm-up that loads QX_WARM_BATCH messages per loop
 *           iteration (recovery itself stays one fstatat() per message),
 *           and a listing loads any it meets still unread.
 * STREAMS   The master hands the worker one end of a socketpair (mtactl
 *           holds the other: no bytes pass through the master) and
 *           deliver_qstream() writes every record, by id, then an empty
 *           one (u32 0) and closes.  Each writable event sends at most
 *           QX_CHUNK bytes and reads at most QX_LOAD_BATCH files, so
 *           sessions and deliveries go on during a listing; the position
 *           is the last id sent, so the index may change under a stream
 *           (a message removed after it was listed is simply not in the
 *           rest).  At most QX_MAX_STREAMS at once; a new one ends the
 *           oldest.
 * TRUTH     The files stay the truth: a kick (mtactl hold, delete,
 *           release, bounce) reads that id's file again; a rebuild
 *           (recovery, "kick *") keeps a record, or takes one from the
 *           saved index, only when the inode's next retry and held bit
 *           still match it.
 * GAUGES    The queue's body bytes (of the records read) and held messages
 *           are kept as every entry changes (qx_count() out before, in
 *           after), and the oldest id is the first live entry (a hint that
 *           only moves forward between inserts): deliver_index_gauges()
 *           costs no pass over the index, whatever its size.
 * FAILURE   A file that cannot be read is left out of listings (the file
 *           reader, mtactl --files, names it); a stream whose reader went
 *           away is closed.  Never logs per message.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "spool/spool.h"
#include "delivery/delivery.h"
#include "delivery/delivery_int.h"

#define QX_CHUNK        (64 * 1024)     /* bytes per writable event */
#define QX_LOAD_BATCH   32              /* files read per writable event */
#define QX_WARM_BATCH   64              /* files read per warm-up step */
#define QX_MAX_STREAMS  8
#define QX_COMPACT_MIN  1024            /* dead entries before a compaction */

enum {
    QX_DEAD = 1, QX_HELD = 2, QX_TRIED = 4, QX_ACTIVE = 8, QX_BAD = 16
};

struct qx_ent {
    char      id[SPOOL_ID_LEN];         /* not NUL-terminated */
    uint8_t   flags;
    uint32_t  len;                      /* of blob */
    uint64_t  next_retry;               /* what the record was built from */
    uint64_t  size;                     /* body bytes, while blob is set */
    char     *blob;                     /* spool_wire_body(); NULL: unread */
    struct dq_rows *qr;                 /* its quotas' share (quota.c),
                                           from the first envelope seen */
};

struct qx_stream {
    struct qx_stream *next;
    struct deliver   *d;
    int               fd;
    int               done;             /* end marker queued */
    char              after[SPOOL_ID_LEN];   /* last id sent */
    int               started;
    struct buf        out;
};

/* A record of the snapshot file: its id and body, in place. */
struct qx_snaprec {
    const char *id;
    const char *body;
    uint32_t    len;
};

struct qx {
    struct qx_ent    *v;
    size_t            n, cap, ndead;
    struct qx_ent    *sync;             /* a rebuild in progress */
    size_t            nsync, capsync;
    char              warm_after[SPOOL_ID_LEN];
    int               warm_started;
    int               warm_log;         /* say when a rebuild's reads end */
    uint64_t          warm_t0;          /* ... and how long they took */
    size_t            warm_loads;
    struct ev_timer   warm;
    char             *snap;             /* the last stop's index file */
    size_t            snaplen;
    struct qx_snaprec *snapv;           /* its records, by id */
    size_t            nsnap, snapi, snapused;
    struct qx_stream *streams;          /* newest first */
    size_t            nstreams;
    struct buf        tmp;
    /* the gauges (qx_count), over v's live entries */
    uint64_t          bytes;            /* body bytes of the read records */
    uint64_t          nheld;
    size_t            first;            /* no live entry below it */
};

static void qx_warm_fire(struct ev_loop *loop, struct ev_timer *t, void *arg);
static unsigned qx_state(const struct qx_ent *e);
static void qx_snap_free(struct qx *q);
static int qx_load(struct deliver *d, size_t i);

struct qx *
qx_new(struct deliver *d)
{
    struct qx *q = xcalloc(1, sizeof(*q));

    ev_timer_init(&q->warm, qx_warm_fire, d);
    buf_init(&q->tmp);
    return q;
}


static void qx_stream_close(struct deliver *d, struct qx_stream *s);

void
qx_free(struct deliver *d)
{
    struct qx *q = d->qx;

    if (q == NULL)
        return;
    while (q->streams != NULL)
        qx_stream_close(d, q->streams);
    ev_timer_stop(d->loop, &q->warm);
    qx_snap_free(q);
    for (size_t i = 0; i < q->n; i++) {
        free(q->v[i].blob);
        dq_forget(q->v[i].qr);          /* the master clears our column */
    }
    free(q->v);
    free(q->sync);
    buf_free(&q->tmp);
    free(q);
    d->qx = NULL;
}


/* ---- the sorted array --------------------------------------------------- */

/* qx_count - take e's share of the gauges out (sign < 0, before e
 * changes) or put it in (after); every change of an entry of v is
 * bracketed so, entries of a rebuild's array are not (qx_sync_end
 * counts them). */
static void
qx_count(struct qx *q, const struct qx_ent *e, int sign)
{
    uint64_t bytes, held;

    if (e->flags & QX_DEAD)
        return;
    bytes = e->blob != NULL ? e->size : 0;
    held = (e->flags & QX_HELD) != 0;
    if (sign < 0) {
        q->bytes -= bytes;
        q->nheld -= held;
    } else {
        q->bytes += bytes;
        q->nheld += held;
    }
}


/* qx_lower - the first entry whose id is not below id. */
static size_t
qx_lower(const struct qx *q, const char *id)
{
    size_t lo = 0, hi = q->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (memcmp(q->v[mid].id, id, SPOOL_ID_LEN) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}


static struct qx_ent *
qx_find(const struct qx *q, const char *id)
{
    size_t i = qx_lower(q, id);

    if (i < q->n && memcmp(q->v[i].id, id, SPOOL_ID_LEN) == 0 &&
        !(q->v[i].flags & QX_DEAD))
        return &q->v[i];
    return NULL;
}


/* qx_compact - drop the dead entries once they are many (amortised: only
 * at points where no caller holds an index into the array). */
static void
qx_compact(struct qx *q)
{
    size_t i, j = 0;

    if (q->ndead < QX_COMPACT_MIN || q->ndead < q->n / 2)
        return;
    for (i = 0; i < q->n; i++)
        if (!(q->v[i].flags & QX_DEAD))
            q->v[j++] = q->v[i];
    q->n = j;
    q->ndead = 0;
    q->first = 0;
}


/* qx_get - the entry for id, made (unread) when new; new ids almost
 * always sort last (ids grow with time), so this is an append. */
static struct qx_ent *
qx_get(struct qx *q, const char *id)
{
    size_t i;

    qx_compact(q);
    i = q->n > 0 && memcmp(q->v[q->n - 1].id, id, SPOOL_ID_LEN) < 0 ? q->n :
        qx_lower(q, id);
    if (i < q->first)
        q->first = i;               /* a live entry below the hint */
    if (i < q->n && memcmp(q->v[i].id, id, SPOOL_ID_LEN) == 0) {
        if (q->v[i].flags & QX_DEAD) {
            q->v[i].flags = 0;
            q->ndead--;
        }
        return &q->v[i];
    }
    if (q->n == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 256;
        q->v = xrealloc(q->v, q->cap * sizeof(*q->v));
    }
    memmove(&q->v[i + 1], &q->v[i], (q->n - i) * sizeof(*q->v));
    memset(&q->v[i], 0, sizeof(q->v[i]));
    memcpy(q->v[i].id, id, SPOOL_ID_LEN);
    q->n++;
    return &q->v[i];
}


static void
qx_unread(struct qx_ent *e)
{
    free(e->blob);
    e->blob = NULL;
    e->len = 0;
}


static void
qx_kill(struct qx *q, struct qx_ent *e)
{
    dq_release(e->qr);                  /* it left the queue */
    e->qr = NULL;
    qx_unread(e);
    e->flags = QX_DEAD;
    q->ndead++;
}


/* qx_fill - e's record from env; its quotas' share when it has none. */
static void
qx_fill(struct deliver *d, struct qx_ent *e, const struct spool_env *env)
{
    struct qx *q = d->qx;

    if (e->qr == NULL && !(e->flags & QX_DEAD))
        e->qr = dq_take(d, env);
    q->tmp.off = q->tmp.len = 0;
    spool_wire_body(&q->tmp, env);
    qx_unread(e);
    e->blob = xmalloc(buf_avail(&q->tmp));
    memcpy(e->blob, buf_head(&q->tmp), buf_avail(&q->tmp));
    e->len = (uint32_t)buf_avail(&q->tmp);
    e->size = env->body_size;
    e->next_retry = env->next_retry_ms;
    e->flags = (uint8_t)((e->flags & QX_ACTIVE) | (env->held ? QX_HELD : 0) |
        (env->attempts > 0 ? QX_TRIED : 0));
}


/* ---- what deliver.c and attempt.c tell the index ------------------------ */

void
qx_put(struct deliver *d, const struct spool_env *env, int active)
{
    struct qx_ent *e = qx_get(d->qx, env->id);

    qx_count(d->qx, e, -1);
    qx_fill(d, e, env);
    if (active)
        e->flags |= QX_ACTIVE;
    else
        e->flags &= (uint8_t)~QX_ACTIVE;
    qx_count(d->qx, e, 1);
}


void
qx_done(struct deliver *d, const struct spool_env *env)
{
    struct qx_ent *e = qx_find(d->qx, env->id);

    if (e == NULL)
        return;                         /* removed */
    qx_count(d->qx, e, -1);
    qx_fill(d, e, env);
    e->flags &= (uint8_t)~QX_ACTIVE;
    qx_count(d->qx, e, 1);
}


void
qx_add_id(struct deliver *d, const char *id)
{
    (void)qx_get(d->qx, id);
}


void
qx_drop(struct deliver *d, const char *id)
{
    struct qx_ent *e = qx_find(d->qx, id);

    if (e != NULL) {
        qx_count(d->qx, e, -1);
        qx_kill(d->qx, e);
    }
}


/* qx_refresh - someone else changed id (a kick): forget its record, look
 * at its inode again.  QX_GONE, QX_ISHELD, or 0. */
int
qx_refresh(struct deliver *d, const char *id)
{
    struct qx_ent *e;
    uint64_t       when = 0;
    int            held = 0, rc;

    rc = spool_sched_peek(d->sp, id, &when, &held, NULL);
    if (rc == SPOOL_ENOENT) {
        qx_drop(d, id);
        return QX_GONE;
    }
    e = qx_get(d->qx, id);
    qx_count(d->qx, e, -1);
    qx_unread(e);
    e->flags &= (uint8_t)~(QX_BAD | QX_HELD);
    if (rc == SPOOL_OK && held)
        e->flags |= QX_HELD;
    qx_count(d->qx, e, 1);
    /* read again now: one file per kick (a warm-up pass would rescan the
     * whole index for each id of a `hold --all`) */
    if (qx_load(d, (size_t)(e - d->qx->v)) < 0 && (e->flags & QX_DEAD))
        return QX_GONE;
    return rc == SPOOL_OK && held ? QX_ISHELD : 0;
}


int
qx_is_out(const struct deliver *d, const char *id)
{
    const struct qx_ent *e = qx_find(d->qx, id);

    return e == NULL || (e->flags & QX_HELD) != 0;
}


/* ---- rebuilding from the spool (deliver_load) ---------------------------- */

static uint64_t
qx_le(const char *p, size_t n)
{
    uint64_t v = 0;

    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)(unsigned char)p[i] << (8 * i);
    return v;
}


/* qx_snap_load - the index the last clean stop saved, checked record by
 * record (spool_wire_decode; ids rising); the first bad one ends it. */
static void
qx_snap_load(struct deliver *d)
{
    struct qx         *q = d->qx;
    struct spool_rcpt *rc = NULL;
    struct spool_env   env;
    size_t             caprc = 0, off, cap = 0;
    unsigned           st;
    int                rcode;

    rcode = spool_index_take(d->sp, d->shard, &q->snap, &q->snaplen);
    if (rcode == SPOOL_ENOENT)
        return;
    if (rcode != SPOOL_OK) {
        log_warn("recover: queue index of the last stop: %s (ignored)",
            spool_errstr(d->sp));
        return;
    }
    off = strlen(SPOOL_INDEX_MAGIC);
    while (q->snaplen - off >= 4) {
        size_t len = (size_t)qx_le(q->snap + off, 4);
        const char *rec = q->snap + off + 4;

        if (len == 0 || len > q->snaplen - off - 4 ||
            spool_wire_decode(rec, len, &env, &st, &rc, &caprc) !=
            SPOOL_OK || (q->nsnap > 0 &&
            memcmp(q->snapv[q->nsnap - 1].id, rec, SPOOL_ID_LEN) >= 0))
            break;
        if (q->nsnap == cap) {
            cap = cap ? cap * 2 : 1024;
            q->snapv = xrealloc(q->snapv, cap * sizeof(*q->snapv));
        }
        q->snapv[q->nsnap].id = rec;
        q->snapv[q->nsnap].body = rec + SPOOL_ID_LEN + 1;
        q->snapv[q->nsnap].len = (uint32_t)(len - SPOOL_ID_LEN - 1);
        q->nsnap++;
        off += 4 + len;
    }
    free(rc);
    q->snapi = q->snapused = 0;
}


/* qx_snap_use - e's record from the snapshot, when it has one that the
 * inode confirms (same next retry, same held bit: any attempt or mtactl
 * change since the save moved one of them).  Ids come in order. */
static void
qx_snap_use(struct qx *q, struct qx_ent *e, uint64_t when, int held)
{
    const struct qx_snaprec *r;

    while (q->snapi < q->nsnap &&
        memcmp(q->snapv[q->snapi].id, e->id, SPOOL_ID_LEN) < 0)
        q->snapi++;
    if (q->snapi == q->nsnap ||
        memcmp(q->snapv[q->snapi].id, e->id, SPOOL_ID_LEN) != 0)
        return;
    r = &q->snapv[q->snapi];
    /* body: u8 held, u32 attempts, u64 arrival, u64 next_retry, ... */
    if ((unsigned char)r->body[0] != (held ? 1 : 0) ||
        qx_le(r->body + 13, 8) != when)
        return;
    e->blob = xmalloc(r->len);
    memcpy(e->blob, r->body, r->len);
    e->len = r->len;
    e->size = qx_le(r->body + 21, 8);   /* ... u64 body_size */
    e->next_retry = when;
    if (qx_le(r->body + 1, 4) > 0)
        e->flags |= QX_TRIED;
    q->snapused++;
}


static void
qx_snap_free(struct qx *q)
{
    free(q->snap);
    free(q->snapv);
    q->snap = NULL;
    q->snapv = NULL;
    q->snaplen = q->nsnap = q->snapi = 0;
}


void
qx_sync_begin(struct deliver *d, int recover)
{
    d->qx->nsync = 0;
    if (recover)
        qx_snap_load(d);
}


/* qx_sync_add - id is in the spool (ids come in order).  env: its
 * envelope when the rebuild read it; else when/held from its inode
 * (peeked: 1) or nothing known (peeked: 0).  An open attempt keeps its
 * entry as it is. */
void
qx_sync_add(struct deliver *d, const char *id, const struct spool_env *env,
    int peeked, uint64_t when, int held, int active)
{
    struct qx     *q = d->qx;
    struct qx_ent *old = qx_find(q, id), *e;

    if (q->nsync == q->capsync) {
        q->capsync = q->capsync ? q->capsync * 2 : 256;
        q->sync = xrealloc(q->sync, q->capsync * sizeof(*q->sync));
    }
    e = &q->sync[q->nsync++];
    memset(e, 0, sizeof(*e));
    memcpy(e->id, id, SPOOL_ID_LEN);
    if (old != NULL && (active || (peeked && old->blob != NULL &&
        old->next_retry == when && !!(old->flags & QX_HELD) == !!held))) {
        *e = *old;                      /* unchanged: keep the record */
        qx_count(q, old, -1);
        old->blob = NULL;
        old->qr = NULL;                 /* moved with it */
        qx_count(q, old, 1);
        return;
    }
    if (old != NULL) {                  /* the same message, the same keys:
                                           its quotas' share stays */
        e->qr = old->qr;
        old->qr = NULL;
    }
    if (env != NULL) {
        qx_fill(d, e, env);
        return;
    }
    e->flags = peeked && held ? QX_HELD : 0;
    if (peeked)
        qx_snap_use(q, e, when, held);
}


void
qx_sync_end(struct deliver *d)
{
    struct qx     *q = d->qx;
    struct qx_ent *t;
    size_t         c;

    for (size_t i = 0; i < q->n; i++) {
        free(q->v[i].blob);
        dq_release(q->v[i].qr);         /* not in the spool any more */
    }
    t = q->v;
    q->v = q->sync;
    q->sync = t;
    c = q->cap;
    q->cap = q->capsync;
    q->capsync = c;
    q->n = q->nsync;
    q->nsync = 0;
    q->ndead = 0;
    q->bytes = q->nheld = 0;
    q->first = 0;
    for (size_t i = 0; i < q->n; i++)   /* once per rebuild */
        qx_count(q, &q->v[i], 1);
    if (q->snap != NULL)
        log_info("recover: %zu of %zu records from the queue index the last "
            "stop saved", q->snapused, q->nsnap);
    qx_snap_free(q);
    q->warm_log = 1;
    q->warm_t0 = util_now_ms();
    q->warm_loads = 0;
    /* an open attempt not seen in the listing (cannot happen: it holds
     * the file) would be forgotten here; its end finds no entry */
    qx_warm_start(d);
}


/* qx_quota_rebuild - after a rebuild (start, kick): the entries without
 * their quotas' share read their envelope for it (only with quotas on:
 * a file read per such message, which a start with a saved index or
 * without quotas does not pay). */
void
qx_quota_rebuild(struct deliver *d)
{
    struct qx        *q = d->qx;
    struct spool_env *env;
    char              id[SPOOL_ID_SIZE];
    size_t            i;

    if (d->qpage == NULL)
        return;
    for (i = 0; i < q->n; i++) {
        struct qx_ent *e = &q->v[i];

        if (e->qr != NULL || (e->flags & QX_DEAD))
            continue;
        memcpy(id, e->id, SPOOL_ID_LEN);
        id[SPOOL_ID_LEN] = '\0';
        env = NULL;
        if (spool_msg_open(d->sp, id, 0, &env, NULL, NULL) == SPOOL_OK)
            e->qr = dq_take(d, env);
        spool_env_free(env);
    }
}


/* ---- reading records ------------------------------------------------------ */

/* qx_load - read v[i]'s record from its file.  0 read, -1 gone or
 * unreadable (then skipped). */
static int
qx_load(struct deliver *d, size_t i)
{
    struct qx_ent    *e = &d->qx->v[i];
    struct spool_env *env = NULL;
    char              id[SPOOL_ID_SIZE];
    int               rc;

    memcpy(id, e->id, SPOOL_ID_LEN);
    id[SPOOL_ID_LEN] = '\0';
    rc = spool_msg_open(d->sp, id, 0, &env, NULL, NULL);
    qx_count(d->qx, e, -1);
    if (rc == SPOOL_ENOENT) {
        qx_kill(d->qx, e);
        return -1;
    }
    if (rc != SPOOL_OK) {
        spool_env_free(env);
        e->flags |= QX_BAD;
        qx_count(d->qx, e, 1);
        return -1;
    }
    qx_fill(d, e, env);
    qx_count(d->qx, e, 1);
    spool_env_free(env);
    return 0;
}


/* qx_next - the first entry after id (after_set: else the first). */
static size_t
qx_next(const struct qx *q, const char *after, int after_set)
{
    size_t i;

    if (!after_set)
        return 0;
    i = qx_lower(q, after);
    if (i < q->n && memcmp(q->v[i].id, after, SPOOL_ID_LEN) == 0)
        i++;
    return i;
}


void
qx_warm_start(struct deliver *d)
{
    d->qx->warm_started = 0;
    ev_timer_start(d->loop, &d->qx->warm, 0);
}


/* qx_warm_fire - read the next QX_WARM_BATCH unread records, one batch
 * per loop iteration, until none is left. */
static void
qx_warm_fire(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct deliver *d = arg;
    struct qx      *q = d->qx;
    size_t          i, loads = 0;

    qx_compact(q);
    for (i = qx_next(q, q->warm_after, q->warm_started); i < q->n; i++) {
        struct qx_ent *e = &q->v[i];

        if (e->flags & (QX_DEAD | QX_BAD) || e->blob != NULL)
            continue;
        if (loads == QX_WARM_BATCH)
            break;
        memcpy(q->warm_after, e->id, SPOOL_ID_LEN);
        q->warm_started = 1;
        (void)qx_load(d, i);
        loads++;
    }
    q->warm_loads += loads;
    if (i < q->n) {
        ev_timer_start(loop, t, 0);
        return;
    }
    if (q->warm_log) {
        /* once per rebuild: when `mtactl queue` is fast again */
        q->warm_log = 0;
        log_info("queue index: %zu messages, %zu records read from the "
            "spool in %llu ms", q->n - q->ndead, q->warm_loads,
            (unsigned long long)(util_now_ms() - q->warm_t0));
    }
}


/* ---- the snapshot at a clean stop ------------------------------------------ */

struct qx_saver {
    struct qx *q;
    size_t     i;
    int        ended;
    size_t     n;
};


/* qx_save_next - the next chunk of records for spool_index_save(). */
static int
qx_save_next(void *arg, const void **p, size_t *n)
{
    struct qx_saver *sv = arg;
    struct qx       *q = sv->q;

    if (sv->ended)
        return 0;
    q->tmp.off = q->tmp.len = 0;
    for (; sv->i < q->n && buf_avail(&q->tmp) < QX_CHUNK; sv->i++) {
        struct qx_ent *e = &q->v[sv->i];

        if (e->flags & (QX_DEAD | QX_BAD) || e->blob == NULL)
            continue;
        spool_wire_head(&q->tmp, e->id, qx_state(e), e->len);
        buf_append(&q->tmp, e->blob, e->len);
        sv->n++;
    }
    if (sv->i == q->n) {
        static const char end[4] = { 0, 0, 0, 0 };

        buf_append(&q->tmp, end, sizeof(end));
        sv->ended = 1;
    }
    *p = buf_head(&q->tmp);
    *n = buf_avail(&q->tmp);
    return 1;
}


void
deliver_save_index(struct deliver *d)
{
    struct qx_saver sv = { d->qx, 0, 0, 0 };
    uint64_t        t0 = util_now_ms();

    if (d->qx == NULL || d->qx->n == d->qx->ndead)
        return;
    if (spool_index_save(d->sp, d->shard, qx_save_next, &sv) != SPOOL_OK) {
        log_warn("queue index: not saved: %s (the next start reads the "
            "files)", spool_errstr(d->sp));
        return;
    }
    log_info("queue index: %zu records saved in %llu ms", sv.n,
        (unsigned long long)(util_now_ms() - t0));
}


/* ---- gauges -------------------------------------------------------------- */

void
deliver_index_gauges(struct deliver *d, uint64_t *bytes, uint64_t *held,
    uint64_t *oldest_ms)
{
    struct qx *q = d->qx;

    *bytes = *held = *oldest_ms = 0;
    if (q == NULL)
        return;
    /* ids sort by arrival: the first live entry is the oldest message
     * (dead ones are passed once: the hint goes back only for an entry
     * made below it) */
    while (q->first < q->n && (q->v[q->first].flags & QX_DEAD))
        q->first++;
    *bytes = q->bytes;
    *held = q->nheld;
    if (q->first < q->n)
        *oldest_ms = spool_id_ms(q->v[q->first].id);
}


/* ---- streams ----------------------------------------------------------- */

static unsigned
qx_state(const struct qx_ent *e)
{
    if (e->flags & QX_ACTIVE)
        return 1;
    if (e->flags & QX_HELD)
        return 3;
    return e->flags & QX_TRIED ? 2 : 0;
}


static void
qx_stream_close(struct deliver *d, struct qx_stream *s)
{
    struct qx         *q = d->qx;
    struct qx_stream **pp;

    for (pp = &q->streams; *pp != NULL; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    q->nstreams--;
    ev_forget(d->loop, s->fd);
    close(s->fd);
    buf_free(&s->out);
    free(s);
}


/* qx_stream_fill - the next chunk of records after s->after. */
static void
qx_stream_fill(struct deliver *d, struct qx_stream *s)
{
    struct qx *q = d->qx;
    size_t     i, loads = 0;

    qx_compact(q);
    for (i = qx_next(q, s->after, s->started);
        i < q->n && buf_avail(&s->out) < QX_CHUNK; i++) {
        struct qx_ent *e = &q->v[i];

        if (e->flags & (QX_DEAD | QX_BAD))
            continue;
        if (e->blob == NULL) {
            if (loads == QX_LOAD_BATCH)
                break;              /* the rest in the next event */
            loads++;
            if (qx_load(d, i) < 0)
                continue;
        }
        spool_wire_head(&s->out, e->id, qx_state(e), e->len);
        buf_append(&s->out, e->blob, e->len);
        memcpy(s->after, e->id, SPOOL_ID_LEN);
        s->started = 1;
    }
    if (i >= q->n) {
        static const char end[4] = { 0, 0, 0, 0 };

        buf_append(&s->out, end, sizeof(end));
        s->done = 1;
    }
}


static void
qx_stream_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct qx_stream *s = arg;
    struct deliver   *d = s->d;
    ssize_t           n;

    (void)loop;
    if (events & EV_ERROR) {
        qx_stream_close(d, s);
        return;
    }
    if (buf_avail(&s->out) == 0 && !s->done) {
        s->out.off = s->out.len = 0;
        qx_stream_fill(d, s);
    }
    if (buf_avail(&s->out) > 0) {
        n = send(fd, buf_head(&s->out), buf_avail(&s->out),
            MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            qx_stream_close(d, s);      /* the reader went away */
            return;
        }
        buf_consume(&s->out, (size_t)n);
    }
    if (s->done && buf_avail(&s->out) == 0)
        qx_stream_close(d, s);
}


int
deliver_qstream(struct deliver *d, int fd)
{
    struct qx        *q = d->qx;
    struct qx_stream *s, *old;

    if (q->nstreams >= QX_MAX_STREAMS) {
        for (old = q->streams; old->next != NULL; old = old->next)
            ;
        log_notice("queue listing: %d at once; the oldest ends",
            QX_MAX_STREAMS);
        qx_stream_close(d, old);
    }
    (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    s = xcalloc(1, sizeof(*s));
    s->d = d;
    s->fd = fd;
    buf_init(&s->out);
    if (ev_watch(d->loop, fd, EV_WRITE, qx_stream_io, s) < 0) {
        close(fd);
        free(s);
        return -1;
    }
    s->next = q->streams;
    q->streams = s;
    q->nstreams++;
    return 0;
}
