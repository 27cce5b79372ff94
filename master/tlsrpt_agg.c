/*
 * tlsrpt_agg.c - the master's side of TLS-RPT (RFC 8460): the day's
 * totals of every worker, kept in a file, shown by mtactl, and handed to
 * a worker for the daily report.
 *
 * PURPOSE   Workers count TLS outcomes per policy (tlspol/tlspol.h) and
 *           send their counts once a second over their channel
 *           (CHAN_TLSRPT_ADD); the master adds them to one table, so a
 *           worker that dies loses at most its last second.
 * CONTRACT  A worker is less trusted than the master: its counts are taken
 *           only for today and yesterday (UTC), and only up to its quota
 *           of new policies and bytes a day (an equal share of the
 *           table's limits for each worker over two days, so that no
 *           worker can push the others' counts out); past it, what it
 *           sends is dropped until the day ends, with one log line.  A bad
 *           message is logged once a day per worker, then only counted.
 *           The table is saved to <dir of routes.db>/tlsrpt.state (the
 *           state directory, root's): written as tlsrpt.state.tmp with
 *           fsync and renamed, all by descriptor in a directory checked
 *           with safefs (never a path in a worker-writable directory).
 *           While counts arrive a forked child writes its copy of the
 *           table (copy-on-write: a consistent snapshot), at most every
 *           TLSAGG_SAVE_MS and one at a time, so no dump, write or fsync
 *           runs on the master's loop; after a report run the next tick
 *           starts one; at stop the master writes it itself.  It is read
 *           back at start: policies of days other than today and
 *           yesterday are dropped.
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/safefs.h"
#include "common/util.h"
#include "config/config.h"
#include "tlspol/tlspol.h"
#include "master/master.h"
#include "master/master_int.h"
#include "master/ops.h"

#define TLSAGG_FILE      "tlsrpt.state"
#define TLSAGG_TMP       "tlsrpt.state.tmp"
#define TLSAGG_MAGIC     "mtad-tlsrpt 1\n"
#define TLSAGG_SAVE_MS   5000u
#define TLSAGG_GRACE_S   5u
#define TLSAGG_FILE_MAX  ((size_t)64 << 20)

/* What one worker (by shard) added on one UTC day. */
struct tlsagg_quota {
    uint32_t day;
    size_t   policies, bytes;
    uint64_t bad;                   /* malformed messages */
    int      over;                  /* the episode was logged */
};

struct tlsagg {
    struct tls_rpt_tab  *tab;
    int                 dirty;
    uint64_t            saved_ms;
    uint32_t            sent_day;   /* the daily run was done */
    pid_t               saver;      /* the child writing the file, or 0 */
    struct tlsagg_quota quota[MASTER_MAX_SLOTS];
};


static struct tlsagg *
tlsagg_of(struct master *m)
{
    if (m->tlsagg == NULL) {
        m->tlsagg = xcalloc(1, sizeof(*m->tlsagg));
        m->tlsagg->tab = tls_rpt_tab_new();
    }
    return m->tlsagg;
}


static struct tls_rpt_tab *
tlsagg_table(struct master *m)
{
    return tlsagg_of(m)->tab;
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
    size_t      skipped = 0;
    uint32_t    today = tls_rpt_day(util_wall_ms() / 1000);
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
    if (tls_rpt_tab_merge_days(tlsagg_table(m),
        b.data + sizeof(TLSAGG_MAGIC) - 1,
        buf_avail(&b) - (sizeof(TLSAGG_MAGIC) - 1), today - 1, today,
        &skipped, err, sizeof(err)) < 0) {
        log_warn("tlsrpt: %s: %s; the day's counts start from zero",
            TLSAGG_FILE, err);
        goto out;
    }
    log_info("tlsrpt: %zu policies read back from %s", tls_rpt_tab_count(
        tlsagg_table(m)), TLSAGG_FILE);
    if (skipped > 0) {
        log_notice("tlsrpt: %s: %zu policies of days other than today and "
            "yesterday dropped", TLSAGG_FILE, skipped);
        tlsagg_of(m)->dirty = 1;    /* the next save leaves them out */
    }
out:
    buf_free(&b);
    close(fd);
}


/* tlsagg_write - the table to the state file (temp file, fsync, rename);
 * 0, or -1 (logged). */
static int
tlsagg_write(struct master *m)
{
    char       err[512];
    struct buf b;
    int        dfd, fd = -1, ok = 0;

    buf_init(&b);
    buf_append(&b, TLSAGG_MAGIC, sizeof(TLSAGG_MAGIC) - 1);
    tls_rpt_tab_dump(tlsagg_table(m), &b);
    if ((dfd = tlsagg_dir(m->cur->cfg, err, sizeof(err))) < 0) {
        log_warn("tlsrpt: state directory: %s; counts kept in memory", err);
        buf_free(&b);
        return -1;
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
    }
    close(dfd);
    buf_free(&b);
    return ok ? 0 : -1;
}


void
tlsagg_save(struct master *m)
{
    struct tlsagg *ag = tlsagg_of(m);
    pid_t          r;
    int            st = 0;

    /* a saving child only writes a file: let it finish, as two writers
     * of the one temp file must not overlap */
    while (ag->saver > 0 && (r = waitpid(ag->saver, &st, 0)) != ag->saver)
        if (r < 0 && errno != EINTR)
            ag->saver = 0;          /* reaped elsewhere */
    if (ag->saver > 0)
        (void)tlsagg_reaped(m, ag->saver, st);
    if (!ag->dirty)
        return;
    if (tlsagg_write(m) == 0)
        ag->dirty = 0;
}


/* tlsagg_save_forked - the save in a child, off the master's loop; the
 * child's copy of the table is the snapshot it writes.  A failed fork
 * keeps it dirty for the next period. */
static void
tlsagg_save_forked(struct master *m, uint64_t now_ms)
{
    struct tlsagg *ag = tlsagg_of(m);
    pid_t          pid;

    ag->saved_ms = now_ms;
    if ((pid = fork()) < 0) {
        log_warn("tlsrpt: cannot fork to save the counts: %s; kept in "
            "memory", strerror(errno));
        return;
    }
    if (pid == 0) {
        /* it holds every descriptor of the master's (its listeners
         * too): a master killed meanwhile must not leave it behind,
         * keeping a restarted one from binding, or renaming that one's
         * temp file later (the one it wrote is left, and removed by the
         * next save) */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != m->pid)
            _exit(1);
        proctitle_set(&m->title, "mtad: tlsrpt", "mtad: master: saving %s",
            TLSAGG_FILE);
        _exit(tlsagg_write(m) == 0 ? 0 : 1);
    }
    ag->saver = pid;
    ag->dirty = 0;
}


int
tlsagg_reaped(struct master *m, pid_t pid, int status)
{
    struct tlsagg *ag = m->tlsagg;

    if (ag == NULL || ag->saver <= 0 || pid != ag->saver)
        return 0;
    ag->saver = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        ag->dirty = 1;              /* logged by the child; try again */
    return 1;
}


/* tlsagg_quota_of - shard's account for today (a new day starts it
 * afresh). */
static struct tlsagg_quota *
tlsagg_quota_of(struct master *m, unsigned shard, uint32_t today)
{
    struct tlsagg_quota *q = &tlsagg_of(m)->quota[shard % MASTER_MAX_SLOTS];

    if (q->day != today) {
        memset(q, 0, sizeof(*q));
        q->day = today;
    }
    return q;
}


void
tlsagg_add(struct master *m, unsigned shard, const char *msg, size_t n)
{
    struct tlsagg       *ag = tlsagg_of(m);
    uint32_t             today = tls_rpt_day(util_wall_ms() / 1000);
    struct tlsagg_quota *q = tlsagg_quota_of(m, shard, today);
    size_t               workers = m->cur->cfg->workers > 0 ?
                                   (size_t)m->cur->cfg->workers : 1;
    size_t               max_pol = TLS_RPT_MAX_POLICIES / (2 * workers),
                         max_bytes = TLS_RPT_TAB_BYTES / (2 * workers);
    size_t               pol0 = tls_rpt_tab_count(ag->tab),
                         bytes0 = tls_rpt_tab_bytes(ag->tab);
    char                 err[160];

    if (q->policies >= max_pol || q->bytes >= max_bytes) {
        if (!q->over)
            log_warn("tlsrpt: worker %u is over its quota for today (%zu "
                "new policies, %zu bytes); its counts are dropped until "
                "the UTC day ends", shard, max_pol, max_bytes);
        q->over = 1;
        return;
    }
    if (tls_rpt_tab_merge_days(ag->tab, msg, n, today > 0 ? today - 1 : 0,
        today, NULL, err, sizeof(err)) < 0) {
        if (q->bad++ == 0)
            log_warn("tlsrpt: worker %u: %s; ignored (further bad messages "
                "today are counted, not logged)", shard, err);
        return;
    }
    if (tls_rpt_tab_count(ag->tab) > pol0)
        q->policies += tls_rpt_tab_count(ag->tab) - pol0;
    if (tls_rpt_tab_bytes(ag->tab) > bytes0)
        q->bytes += tls_rpt_tab_bytes(ag->tab) - bytes0;
    ag->dirty = 1;
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
    if (buf_avail(&b) > TLS_RPT_WIRE_MAX) {
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
    n = tls_rpt_tab_take(tlsagg_table(m), max_day, tlsagg_emit, &x);
    if (n > 0) {
        /* saved at the next tick: what was handed over must not be
         * handed over again after a restart */
        tlsagg_of(m)->dirty = 1;
        tlsagg_of(m)->saved_ms = 0;
        log_info("tlsrpt: %zu reports handed to worker %u", n, x.s->shard);
    }
    return (long)n;
}


void
tlsagg_tick(struct master *m, uint64_t now_ms)
{
    struct tlsagg *ag = tlsagg_of(m);
    uint64_t       now_s = util_wall_ms() / 1000;
    uint32_t       today = tls_rpt_day(now_s);

    /* the days before today, once the workers' last counts are in;
     * once a day (counts of an ended day that come later wait for the
     * next day's run) */
    if (today != ag->sent_day && m->cur->cfg->tlsrpt_enabled &&
        now_s % 86400 >= TLSAGG_GRACE_S && today > 0 &&
        tlsagg_send_upto(m, today - 1, now_s) >= 0)
        ag->sent_day = today;
    if (ag->dirty && ag->saver <= 0 && now_ms - ag->saved_ms >= TLSAGG_SAVE_MS)
        tlsagg_save_forked(m, now_ms);
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
        } else if ((n = tlsagg_send_upto(m, tls_rpt_day(now_s), now_s)) < 0) {
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
    tls_rpt_day_str(tls_rpt_day(now_s), day, sizeof(day));
    buf_printf(&b, "ok\ntoday: %s (UTC)\nenabled: %s\n", day,
        m->cur->cfg->tlsrpt_enabled ? "yes" : "no");
    buf_printf(&b, "not detailed: %" PRIu64 "\n",
        tls_rpt_tab_dropped(tlsagg_table(m)));
    tls_rpt_tab_text(tlsagg_table(m), *arg != '\0' ? arg : NULL, &b);
    *out = b.data;
}
