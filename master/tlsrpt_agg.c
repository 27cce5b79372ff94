/*
 * tlsrpt_agg.c - the master's side of TLS-RPT (RFC 8460): the day's
 * totals of every worker, kept in a file, shown by mtactl, and handed to
 * a worker for the daily report.
 *
 * PURPOSE   Workers count TLS outcomes per policy (delivery/tlsrpt.h) and
 *           send their counts once a second over their channel
 *           (CHAN_TLSRPT_ADD); the master adds them to one table, so a
 *           worker that dies loses at most its last second.
 * CONTRACT  The table is saved to <dir of routes.db>/tlsrpt.state (the
 *           state directory, root's): written as tlsrpt.state.tmp with
 *           fsync and renamed, all by descriptor in a directory checked
 *           with safefs (never a path in a worker-writable directory); at
 *           most every TLSAGG_SAVE_MS while it changes, after a report
 *           run, and at stop.  It is read back at start.
 *           Once a UTC day has ended (TLSAGG_GRACE_S later, for the
 *           workers' last counts) every (day, domain) of it goes to a
 *           running worker of the current generation as
 *           CHAN_TLSRPT_SEND ("<start> <end>\n" and its policy blocks); the worker looks up the
 *           rua= and queues the mail (delivery/tlsrpt_send.c).  "mtactl
 *           tls report --send" does the same now, for today as well (the
 *           range then ends now).  What a worker took is forgotten here.
 * FAILURE   A bad message from a worker is logged and ignored; a state
 *           file that cannot be read or written is logged and the counts
 *           kept in memory.  With no worker running the reports wait for
 *           the next tick.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/safefs.h"
#include "common/util.h"
#include "config/config.h"
#include "delivery/tlsrpt.h"
#include "master/master_int.h"
#include "master/ops.h"

#define TLSAGG_FILE      "tlsrpt.state"
#define TLSAGG_TMP       "tlsrpt.state.tmp"
#define TLSAGG_MAGIC     "mtad-tlsrpt 1\n"
#define TLSAGG_SAVE_MS   5000u
#define TLSAGG_GRACE_S   5u
#define TLSAGG_FILE_MAX  ((size_t)64 << 20)

static struct tlsrpt_tab *tlsagg_tab;
static int                tlsagg_dirty;
static uint64_t           tlsagg_saved_ms;
static uint32_t           tlsagg_sent_day;   /* the daily run was done */

static struct tlsrpt_tab *
tlsagg_table(void)
{
    if (tlsagg_tab == NULL)
        tlsagg_tab = tlsrpt_tab_new();
    return tlsagg_tab;
}


/* tlsagg_dir - the state directory (that of routes.db), opened and
 * checked: only root (or our uid) may change it. */
static int
tlsagg_dir(const struct config *cfg, char *err, size_t errsz)
{
    const char *name;
    int         dfd;

    if ((dfd = safefs_open_parent(cfg->routes_db, &name, err, errsz)) < 0)
        return -1;
    if (safefs_dir_trusted(dfd, cfg->routes_db, err, errsz) < 0) {
        close(dfd);
        return -1;
    }
    return dfd;
}


void
tlsagg_load(struct master *m)
{
    char        err[512];
    struct buf  b;
    struct stat st;
    ssize_t     r;
    int         dfd, fd;

    if ((dfd = tlsagg_dir(m->cur->cfg, err, sizeof(err))) < 0) {
        log_warn("tlsrpt: state directory: %s", err);
        return;
    }
    fd = safefs_open_file(dfd, TLSAGG_FILE, O_RDONLY, 0, TLSAGG_FILE, err,
        sizeof(err));
    close(dfd);
    if (fd < 0) {
        if (errno != ENOENT)
            log_warn("tlsrpt: %s; the day's counts start from zero", err);
        return;
    }
    buf_init(&b);
    if (fstat(fd, &st) < 0 || (size_t)st.st_size > TLSAGG_FILE_MAX) {
        log_warn("tlsrpt: %s: unreadable or too large; the day's counts "
            "start from zero", TLSAGG_FILE);
        goto out;
    }
    buf_reserve(&b, (size_t)st.st_size + 1);
    while ((r = read(fd, buf_tail(&b), buf_room(&b))) > 0)
        buf_produce(&b, (size_t)r);
    if (r < 0 || buf_avail(&b) < sizeof(TLSAGG_MAGIC) - 1 ||
        memcmp(b.data, TLSAGG_MAGIC, sizeof(TLSAGG_MAGIC) - 1) != 0) {
        log_warn("tlsrpt: %s: not a state file of ours; the day's counts "
            "start from zero", TLSAGG_FILE);
        goto out;
    }
    if (tlsrpt_tab_merge(tlsagg_table(), b.data + sizeof(TLSAGG_MAGIC) - 1,
        buf_avail(&b) - (sizeof(TLSAGG_MAGIC) - 1), err, sizeof(err)) < 0) {
        log_warn("tlsrpt: %s: %s; the day's counts start from zero",
            TLSAGG_FILE, err);
        goto out;
    }
    log_info("tlsrpt: %zu policies read back from %s",
        tlsrpt_tab_count(tlsagg_tab), TLSAGG_FILE);
out:
    buf_free(&b);
    close(fd);
}


void
tlsagg_save(struct master *m)
{
    char       err[512];
    struct buf b;
    int        dfd, fd = -1, ok = 0;

    if (!tlsagg_dirty)
        return;
    buf_init(&b);
    buf_append(&b, TLSAGG_MAGIC, sizeof(TLSAGG_MAGIC) - 1);
    tlsrpt_tab_dump(tlsagg_table(), &b);
    if ((dfd = tlsagg_dir(m->cur->cfg, err, sizeof(err))) < 0) {
        log_warn("tlsrpt: state directory: %s; counts kept in memory", err);
        buf_free(&b);
        return;
    }
    (void)unlinkat(dfd, TLSAGG_TMP, 0);     /* a left-over of a crash */
    fd = safefs_open_file(dfd, TLSAGG_TMP, O_WRONLY | O_CREAT | O_EXCL,
        0600, TLSAGG_TMP, err, sizeof(err));
    if (fd >= 0 && util_write_all(fd, buf_head(&b), buf_avail(&b)) == 0 &&
        fsync(fd) == 0 && renameat(dfd, TLSAGG_TMP, dfd, TLSAGG_FILE) == 0)
        ok = 1;
    else if (fd >= 0)
        snprintf(err, sizeof(err), "%s: %s", TLSAGG_FILE, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (!ok) {
        (void)unlinkat(dfd, TLSAGG_TMP, 0);
        log_warn("tlsrpt: cannot save the counts: %s", err);
    } else {
        tlsagg_dirty = 0;
    }
    close(dfd);
    buf_free(&b);
}


void
tlsagg_add(struct master *m, unsigned shard, const char *msg, size_t n)
{
    char err[160];

    (void)m;
    if (tlsrpt_tab_merge(tlsagg_table(), msg, n, err, sizeof(err)) < 0) {
        log_warn("tlsrpt: worker %u: %s; ignored", shard, err);
        return;
    }
    tlsagg_dirty = 1;
}

/* ---- sending ---------------------------------------------------------- */

struct tlsagg_send {
    struct master *m;
    struct slot   *s;
    uint64_t       now_s;
};


/* tlsagg_emit - one (day, domain) to the chosen worker. */
static int
tlsagg_emit(uint32_t day, const char *domain, const char *blocks, size_t n,
    void *arg)
{
    struct tlsagg_send *x = arg;
    struct buf          b;
    uint64_t            start = (uint64_t)day * 86400, end = start + 86399;
    int                 r;

    (void)domain;
    if (end > x->now_s)
        end = x->now_s;             /* today's, sent early */
    buf_init(&b);
    buf_printf(&b, "%" PRIu64 " %" PRIu64 "\n", start, end);
    buf_append(&b, blocks, n);
    if (buf_avail(&b) > TLSRPT_WIRE_MAX) {
        buf_free(&b);
        log_warn("tlsrpt: report for %s too large for the channel; dropped",
            domain);
        return 0;                   /* taken: it would never fit */
    }
    r = chan_send(x->s->chan, CHAN_TLSRPT_SEND, buf_head(&b), buf_avail(&b),
        -1);
    buf_free(&b);
    return r;
}


/* tlsagg_worker - a running worker of the current generation. */
static struct slot *
tlsagg_worker(struct master *m)
{
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->role == ROLE_WORKER && s->state == SLOT_RUNNING && s->ready &&
            s->chan >= 0 && s->generation == m->cur->id)
            return s;
    }
    return NULL;
}


/* tlsagg_send_upto - hand every (day, domain) up to max_day to a worker;
 * the number handed over, or -1 when no worker can take them. */
static long
tlsagg_send_upto(struct master *m, uint32_t max_day, uint64_t now_s)
{
    struct tlsagg_send x = { m, tlsagg_worker(m), now_s };
    size_t             n;

    if (x.s == NULL)
        return -1;
    n = tlsrpt_tab_take(tlsagg_table(), max_day, tlsagg_emit, &x);
    if (n > 0) {
        tlsagg_dirty = 1;
        log_info("tlsrpt: %zu reports handed to worker %u", n, x.s->shard);
        tlsagg_save(m);
    }
    return (long)n;
}


void
tlsagg_tick(struct master *m, uint64_t now_ms)
{
    uint64_t now_s = util_wall_ms() / 1000;
    uint32_t today = tlsrpt_day(now_s);

    /* the days before today, once the workers' last counts are in;
     * once a day (counts of an ended day that come later wait for the
     * next day's run) */
    if (today != tlsagg_sent_day && tlsagg_tab != NULL &&
        m->cur->cfg->tlsrpt_enabled && now_s % 86400 >= TLSAGG_GRACE_S &&
        today > 0 && tlsagg_send_upto(m, today - 1, now_s) >= 0)
        tlsagg_sent_day = today;
    if (tlsagg_dirty && now_ms - tlsagg_saved_ms >= TLSAGG_SAVE_MS) {
        tlsagg_saved_ms = now_ms;
        tlsagg_save(m);
    }
}

/* ---- mtactl tls report ------------------------------------------------ */

/* "tls report", "tls report DOMAIN", "tls report-send". */
void
tlsagg_ctl(struct master *m, const char *arg, char **out)
{
    struct buf b;
    uint64_t   now_s = util_wall_ms() / 1000;
    char       day[16];
    long       n;

    buf_init(&b);
    if (strcmp(arg, "report-send") == 0) {
        if (!m->cur->cfg->tlsrpt_enabled) {
            buf_printf(&b, "error: tlsrpt.enabled is off\n");
        } else if ((n = tlsagg_send_upto(m, tlsrpt_day(now_s), now_s)) < 0) {
            buf_printf(&b, "error: no running worker to send the reports\n");
        } else {
            buf_printf(&b, "ok\n%ld reports handed to a worker for sending\n",
                n);
        }
        *out = b.data;
        return;
    }
    if (strcmp(arg, "report") != 0 && strncmp(arg, "report ", 7) != 0) {
        buf_printf(&b, "error: tls: expected report [DOMAIN] or "
            "report-send\n");
        *out = b.data;
        return;
    }
    arg += arg[6] == ' ' ? 7 : 6;
    tlsrpt_day_str(tlsrpt_day(now_s), day, sizeof(day));
    buf_printf(&b, "ok\ntoday: %s (UTC)\nenabled: %s\n", day,
        m->cur->cfg->tlsrpt_enabled ? "yes" : "no");
    buf_printf(&b, "not detailed: %" PRIu64 "\n",
        tlsrpt_tab_dropped(tlsagg_table()));
    tlsrpt_tab_text(tlsagg_table(), *arg != '\0' ? arg : NULL, &b);
    *out = b.data;
}
