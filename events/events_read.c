/*
 * events_read.c - the reader: one process of the node (flock on
 * events/reader.lock) offers the unsent lines of every segment to the
 * target, in name order, and keeps its place in events/cursor.
 *
 * CURSOR    "<segment> <offset>\n" per segment not yet sent to its end,
 *           written to cursor.tmp and renamed over cursor after every
 *           acknowledged batch: a reader killed before the rename offers
 *           that batch again (a duplicate, never a loss).
 * COMPLETE  A segment whose writer is gone (its LOCK_SH released: the
 *           writer rotated, exited or was killed) and that was sent to its
 *           end is unlinked.  A last line without its newline in such a
 *           segment (a writer killed mid-write) is skipped and logged.
 * BACKLOG   Unsent bytes over all segments, published on the status page
 *           each tick with the time of the oldest unsent record; over
 *           events.max_backlog, drop_oldest moves the cursor past the oldest
 *           records (counted), backpressure sets the page's full flag until
 *           the backlog is under 90% of the limit.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "events/events.h"
#include "events/events_int.h"

static void ev_tick(struct ev_loop *loop, struct ev_timer *t, void *arg);


static int
ev_seg_cmp(const void *a, const void *b)
{
    return strcmp(((const struct events_seg *)a)->name,
        ((const struct events_seg *)b)->name);
}


static struct events_seg *
ev_seg_find(struct events *e, const char *name)
{
    for (size_t i = 0; i < e->nsegs; i++)
        if (strcmp(e->segs[i].name, name) == 0)
            return &e->segs[i];
    return NULL;
}


static struct events_seg *
ev_seg_add(struct events *e, const char *name, uint64_t off)
{
    struct events_seg *s;

    if (e->nsegs >= EVENTS_SEGS_MAX)
        return NULL;
    e->segs = xrealloc(e->segs, (e->nsegs + 1) * sizeof(*e->segs));
    s = &e->segs[e->nsegs++];
    memset(s, 0, sizeof(*s));
    util_strlcpy(s->name, name, sizeof(s->name));
    s->off = s->plan = off;
    s->fd = -1;
    return s;
}


static void
ev_seg_remove(struct events *e, size_t i)
{
    if (e->segs[i].fd >= 0)
        close(e->segs[i].fd);
    memmove(&e->segs[i], &e->segs[i + 1], (e->nsegs - i - 1) *
        sizeof(*e->segs));
    e->nsegs--;
}


static int
ev_seg_name_ok(const char *n)
{
    size_t len = strlen(n);

    return len > 3 && len < 64 && strcmp(n + len - 3, ".ev") == 0 &&
        n[0] != '.';
}


/* ---- the cursor ---- */

static void
ev_cursor_load(struct events *e)
{
    char    buf[8192], name[64];
    int     fd = openat(e->dfd, "cursor", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t n;
    char   *line, *save = NULL;
    uint64_t off;

    if (fd < 0)
        return;
    /* EVENTS_SEGS_MAX lines would not fit: the cursor keeps the oldest */
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    for (line = strtok_r(buf, "\n", &save); line != NULL;
        line = strtok_r(NULL, "\n", &save))
        if (sscanf(line, "%63s %" SCNu64, name, &off) == 2 &&
            ev_seg_name_ok(name) && ev_seg_find(e, name) == NULL)
            (void)ev_seg_add(e, name, off);
}


static void
ev_cursor_save(struct events *e)
{
    struct buf b;
    int        fd;

    buf_init(&b);
    for (size_t i = 0; i < e->nsegs; i++)
        if (e->segs[i].off > 0)
            buf_printf(&b, "%s %" PRIu64 "\n", e->segs[i].name,
                e->segs[i].off);
    fd = openat(e->dfd, "cursor.tmp", O_WRONLY | O_CREAT | O_TRUNC |
        O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || util_write_all(fd, b.data ? b.data : "", b.len) != 0 ||
        (e->cfg->spool_fsync && fdatasync(fd) != 0) ||
        renameat(e->dfd, "cursor.tmp", e->dfd, "cursor") != 0)
        log_err("events: cannot save %s/cursor: %s; records sent may be "
            "sent again", EVENTS_DIR, strerror(errno));
    if (fd >= 0)
        close(fd);
    buf_free(&b);
}


/* ---- scanning ---- */

/* ev_scan - follow every segment in the directory, with its size. */
static void
ev_scan(struct events *e)
{
    DIR           *dir;
    struct dirent *de;
    int            dfd = dup(e->dfd);
    struct stat    st;

    if (dfd < 0 || (dir = fdopendir(dfd)) == NULL) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    rewinddir(dir);
    while ((de = readdir(dir)) != NULL)
        if (ev_seg_name_ok(de->d_name) && ev_seg_find(e, de->d_name) == NULL)
            (void)ev_seg_add(e, de->d_name, 0);
    closedir(dir);
    for (size_t i = 0; i < e->nsegs; ) {
        if (fstatat(e->dfd, e->segs[i].name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode)) {
            ev_seg_remove(e, i);    /* gone (or a cursor line for none) */
            continue;
        }
        e->segs[i].size = (uint64_t)st.st_size;
        if (e->segs[i].off > e->segs[i].size)
            e->segs[i].off = e->segs[i].size;
        i++;
    }
    if (e->nsegs > 1)               /* segs is NULL while none */
        qsort(e->segs, e->nsegs, sizeof(*e->segs), ev_seg_cmp);
}


static int
ev_seg_fd(struct events *e, struct events_seg *s)
{
    if (s->fd < 0)
        s->fd = openat(e->dfd, s->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    return s->fd;
}


/* ev_seg_complete - no writer holds s any more (and it is not ours). */
static int
ev_seg_complete(struct events *e, struct events_seg *s)
{
    if (e->wfd >= 0 && strcmp(s->name, e->wname) == 0)
        return 0;
    if (ev_seg_fd(e, s) < 0 || flock(s->fd, LOCK_EX | LOCK_NB) != 0)
        return 0;
    (void)flock(s->fd, LOCK_UN);
    return 1;
}


/* ev_count_lines - newlines in s from off to end (drop_oldest's count). */
static uint64_t
ev_count_lines(struct events *e, struct events_seg *s, uint64_t end)
{
    char     buf[65536];
    uint64_t off = s->off, n = 0;
    ssize_t  got;

    if (ev_seg_fd(e, s) < 0)
        return 0;
    while (off < end && (got = pread(s->fd, buf, sizeof(buf) < end - off ?
        sizeof(buf) : (size_t)(end - off), (off_t)off)) > 0) {
        for (ssize_t i = 0; i < got; i++)
            n += buf[i] == '\n';
        off += (uint64_t)got;
    }
    return n;
}


/* ev_has_line - 1 when s holds a newline between its place and its end.
 * Stops at the first one: ev_cleanup asks this of every complete segment
 * each tick, and a backlog of many segments must not be read whole each
 * time (that made a drain quadratic in the backlog). */
static int
ev_has_line(struct events *e, struct events_seg *s)
{
    char     buf[4096];             /* a record is shorter, mostly */
    uint64_t off = s->off;
    ssize_t  got;

    if (ev_seg_fd(e, s) < 0)
        return 0;
    while (off < s->size && (got = pread(s->fd, buf, sizeof(buf) <
        s->size - off ? sizeof(buf) : (size_t)(s->size - off),
        (off_t)off)) > 0) {
        if (memchr(buf, '\n', (size_t)got) != NULL)
            return 1;
        off += (uint64_t)got;
    }
    return 0;
}


/* ev_oldest_ms - "unix_ms" of the first unsent record, or 0. */
static uint64_t
ev_oldest_ms(struct events *e)
{
    for (size_t i = 0; i < e->nsegs; i++) {
        struct events_seg *s = &e->segs[i];
        char     buf[2048];
        ssize_t  n;
        char    *p;

        if (s->off >= s->size || ev_seg_fd(e, s) < 0)
            continue;
        if ((n = pread(s->fd, buf, sizeof(buf) - 1, (off_t)s->off)) <= 0)
            continue;
        buf[n] = '\0';
        if ((p = strstr(buf, "\"unix_ms\":")) != NULL)
            return strtoull(p + 10, NULL, 10);
    }
    return 0;
}


static uint64_t
ev_backlog(const struct events *e)
{
    uint64_t b = 0;

    for (size_t i = 0; i < e->nsegs; i++)
        b += e->segs[i].size - e->segs[i].off;
    return b;
}


/* ev_line_after - the offset just past the first newline in s at or
 * after at (s->size when there is none). */
static uint64_t
ev_line_after(struct events *e, struct events_seg *s, uint64_t at)
{
    char    buf[4096];
    ssize_t got;

    while (at < s->size && ev_seg_fd(e, s) >= 0 &&
        (got = pread(s->fd, buf, sizeof(buf), (off_t)at)) > 0) {
        const char *nl = memchr(buf, '\n', (size_t)got);

        if (nl != NULL)
            return at + (uint64_t)(nl - buf) + 1;
        at += (uint64_t)got;
    }
    return s->size;
}


/* ev_drop_oldest - events.when_full: drop_oldest: the oldest whole records
 * go until the backlog is at 90% of the limit. */
static int
ev_drop_oldest(struct events *e, uint64_t backlog)
{
    uint64_t max = e->cfg->events_max_backlog, dropped = 0;
    int      changed = 0;

    for (size_t i = 0; i < e->nsegs && backlog > max / 10 * 9; i++) {
        struct events_seg *s = &e->segs[i];
        uint64_t left = s->size - s->off, need = backlog - max / 10 * 9;
        uint64_t to = need >= left ? s->size :
            ev_line_after(e, s, s->off + need - 1);

        if (left == 0)
            continue;
        dropped += ev_count_lines(e, s, to);
        backlog -= to - s->off;
        s->off = s->plan = to;
        changed = 1;
    }
    if (!changed)
        return 0;
    if (e->st != NULL)
        STATUS_ADD(e->st->ops.ev_dropped, dropped);
    if (!e->dropping)
        log_warn("events: backlog over events.max_backlog (%" PRIu64
            " bytes): dropping the oldest records (%" PRIu64 " at first; "
            "counted in mtad_events_dropped_total); the target is not "
            "keeping up", max, dropped);
    e->dropping = 1;
    return 1;
}


/* ev_publish - the gauges and the backpressure flag on the status page. */
static void
ev_publish(struct events *e, uint64_t backlog)
{
    uint64_t max = e->cfg->events_max_backlog;
    uint32_t full;

    if (e->sp == NULL)
        return;
    full = __atomic_load_n(&e->sp->events.full, __ATOMIC_RELAXED);
    if (e->cfg->events_when_full == CONFIG_EVENTS_BACKPRESSURE) {
        if (!full && backlog > max) {
            full = 1;
            log_warn("events: backlog over events.max_backlog (%" PRIu64
                " bytes): new mail gets 452 at DATA until it drains",
                max);
        } else if (full && backlog < max / 10 * 9) {
            full = 0;
            log_notice("events: backlog under 90%% of events.max_backlog: "
                "taking mail again");
        }
    } else if (e->dropping && backlog < max / 10 * 9) {
        log_notice("events: backlog back under events.max_backlog");
        e->dropping = 0;
    }
    __atomic_store_n(&e->sp->events.full, full, __ATOMIC_RELAXED);
    __atomic_store_n(&e->sp->events.backlog_bytes, backlog, __ATOMIC_RELAXED);
    __atomic_store_n(&e->sp->events.oldest_ms, ev_oldest_ms(e),
        __ATOMIC_RELAXED);
}


/* ev_cleanup - unlink complete segments sent to their end; skip a cut
 * last line of a complete one.  1 when the cursor changed. */
static int
ev_cleanup(struct events *e)
{
    int changed = 0;

    for (size_t i = 0; i < e->nsegs; ) {
        struct events_seg *s = &e->segs[i];

        if (!ev_seg_complete(e, s)) {
            i++;
            continue;
        }
        if (s->off < s->size && !ev_has_line(e, s)) {
            log_warn("events: %s/%s: a last record without its end (%"
                PRIu64 " bytes; its writer died writing it) skipped",
                EVENTS_DIR, s->name, s->size - s->off);
            s->off = s->plan = s->size;
        }
        if (s->off < s->size) {
            i++;
            continue;
        }
        (void)unlinkat(e->dfd, s->name, 0);
        ev_seg_remove(e, i);
        changed = 1;
    }
    return changed;
}


/* ---- offering ---- */

/* ev_fill - the next batch into e->batch from the segments in order:
 * whole lines only, at most events.batch records and EVENTS_BATCH_BYTES.
 * Returns the records. */
static size_t
ev_fill(struct events *e)
{
    size_t nrec = 0, max = (size_t)e->cfg->events_batch;

    e->batch.off = e->batch.len = 0;
    for (size_t i = 0; i < e->nsegs && nrec < max &&
        e->batch.len < EVENTS_BATCH_BYTES; i++) {
        struct events_seg *s = &e->segs[i];
        uint64_t want = s->size - s->off;
        size_t   start = e->batch.len, k, cut = 0, lines = 0;
        ssize_t  got;

        s->plan = s->off;
        if (want == 0 || ev_seg_fd(e, s) < 0)
            continue;
        if (want > EVENTS_BATCH_BYTES - e->batch.len)
            want = EVENTS_BATCH_BYTES - e->batch.len;
        if (e->cfg->spool_fsync)
            (void)fdatasync(s->fd);  /* on disk before it is offered */
        (void)buf_reserve(&e->batch, (size_t)want);
        got = pread(s->fd, buf_tail(&e->batch), (size_t)want, (off_t)s->off);
        if (got <= 0)
            continue;
        for (k = 0; k < (size_t)got && nrec + lines < max; k++)
            if (e->batch.data[start + k] == '\n') {
                cut = k + 1;
                lines++;
            }
        e->batch.len = start + cut;
        s->plan = s->off + cut;
        nrec += lines;
    }
    return nrec;
}


static void
ev_offer(struct events *e)
{
    char   why[256];
    size_t n = ev_fill(e);

    if (n == 0)
        return;
    e->inflight = 1;
    e->inflight_n = n;
    if (e->target->ops->offer(e->target, e->batch.data, e->batch.len, n, why,
        sizeof(why)) != 0)
        events_offered(e, 0, why);
}


void
events_offered(struct events *e, int ok, const char *why)
{
    uint64_t now = ev_now(e->loop);

    e->inflight = 0;
    if (!ok) {
        if (e->st != NULL)
            STATUS_ADD(e->st->ops.ev_failed, 1);
        if (e->backoff_ms == 0)
            log_warn("events: the target did not take %zu records: %s; "
                "retrying with back-off (they stay on the spool)",
                e->inflight_n, why);
        e->backoff_ms = e->backoff_ms == 0 ? EVENTS_BACKOFF_MIN_MS :
            e->backoff_ms * 2 > EVENTS_BACKOFF_MAX_MS ? EVENTS_BACKOFF_MAX_MS :
            e->backoff_ms * 2;
        e->retry_at = now + e->backoff_ms;
        for (size_t i = 0; i < e->nsegs; i++)
            e->segs[i].plan = e->segs[i].off;
        ev_timer_start(e->loop, &e->tick, EVENTS_TICK_MS);
        return;
    }
    if (e->backoff_ms != 0)
        log_notice("events: the target takes records again");
    e->backoff_ms = 0;
    e->retry_at = 0;
    for (size_t i = 0; i < e->nsegs; i++)
        e->segs[i].off = e->segs[i].plan;
    ev_cursor_save(e);
    if (e->st != NULL)
        STATUS_ADD(e->st->ops.ev_sent, e->inflight_n);
    ev_timer_start(e->loop, &e->tick, 0);   /* more may be waiting */
}


/* ev_take_lock - become the node's reader.  1 when this process is. */
static int
ev_take_lock(struct events *e)
{
    int fd;

    if (e->lockfd >= 0)
        return 1;
    fd = openat(e->dfd, "reader.lock", O_RDWR | O_CREAT | O_CLOEXEC |
        O_NOFOLLOW, 0600);
    if (fd < 0)
        return 0;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return 0;
    }
    e->lockfd = fd;
    ev_cursor_load(e);
    if (e->sp != NULL)
        __atomic_store_n(&e->sp->events.reader_pid, (int32_t)getpid(),
            __ATOMIC_RELAXED);
    log_info("events: this worker offers the node's events to the target");
    return 1;
}


static void
ev_tick(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct events *e = arg;
    uint64_t       backlog, now;
    int            changed;

    (void)loop;
    (void)t;
    if (!ev_take_lock(e)) {
        ev_timer_start(e->loop, &e->tick, EVENTS_LOCK_MS);
        return;
    }
    ev_timer_start(e->loop, &e->tick, EVENTS_TICK_MS);
    if (e->inflight)
        return;
    /* The directory scan, the clean-up and the gauges cost a few system
     * calls per segment: once a tick, not after every acknowledged batch
     * (a drain of a 10-minute backlog, 190 segments, made 20,000 of them),
     * unless what the last scan found is all sent. */
    now = ev_now(e->loop);
    if (ev_backlog(e) == 0 || now - e->scanned_at >= EVENTS_TICK_MS) {
        e->scanned_at = now;
        ev_scan(e);
        backlog = ev_backlog(e);
        changed = e->cfg->events_when_full == CONFIG_EVENTS_DROP_OLDEST &&
            backlog > e->cfg->events_max_backlog &&
            ev_drop_oldest(e, backlog);
        changed |= ev_cleanup(e);
        if (changed)
            ev_cursor_save(e);
        ev_publish(e, ev_backlog(e));
    }
    if (e->retry_at == 0 || now >= e->retry_at)
        ev_offer(e);
}


void
events_read_start(struct events *e)
{
    ev_timer_init(&e->tick, ev_tick, e);
    ev_timer_start(e->loop, &e->tick, 0);
}


void
events_read_stop(struct events *e)
{
    ev_timer_stop(e->loop, &e->tick);
    while (e->nsegs > 0)
        ev_seg_remove(e, e->nsegs - 1);
    free(e->segs);
    e->segs = NULL;
    if (e->lockfd >= 0)
        close(e->lockfd);
    e->lockfd = -1;
}
