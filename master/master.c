/*
 * master.c - the master process: start-up, supervision, reload, shutdown.
 *
 * PURPOSE   Load relay.yaml, bind the listeners (before any privilege
 *           change), make the status page, the spool tree and the routes
 *           db, start the log process and cfg->workers workers, then run
 *           one epoll loop over a signalfd, the control socket, each
 *           child's channel and a 1 s tick.  The master never parses SMTP
 *           and never drops root (it must bind new addresses on reload).
 * CONTRACT  Supervision: a worker that dies unexpectedly is forked again
 *           into the same slot and shard at once, or after a doubling
 *           back-off (0.1 s .. 10 s) when it died within 1 s of its start.
 *           Reload (SIGHUP, "mtactl reload"): a valid new config starts a
 *           new generation; when all its workers said "ready" (or after
 *           10 s) the old generation gets "stop"; each worker gives back
 *           what it holds at its deadline (shutdown_timeout less a margin)
 *           and exits by itself.  Past shutdown_timeout the master sends
 *           "ping" and kills (SIGKILL, logged) only a worker that does not
 *           answer within MASTER_PING_MS.  When its last worker is gone the
 *           current workers get "kick *": they rebuild their schedules from
 *           the spool, taking over what the old one left queued (the shard
 *           count may have changed).  The listening sockets stay open in
 *           the master throughout, so no connection is refused.  An invalid
 *           config is logged and the old generation keeps serving.
 *           SIGTERM/SIGINT/"mtactl stop": "stop" to every worker (the
 *           same deadline and ping), then the log process (it writes what it
 *           holds), then the pid file and control socket are removed.
 *           The tick samples getloadavg() into the status page every 2 s:
 *           the only place the load is read.
 * FAILURE   Start-up failures print "mtad: ..." and return a sysexits code.
 *           Later failures are logged; the master keeps serving.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/util.h"
#include "common/log.h"
#include "common/safefs.h"
#include "common/sandbox.h"
#include "common/status.h"
#include "common/tlskey.h"
#include "config/config.h"
#include "router/router.h"
#include "spool/spool.h"
#include "master/master.h"
#include "master/master_int.h"
#include "master/ops.h"

#define LOG_SOCKBUF   (4 << 20)
#define ERR_MAX       8192
#define MASTER_PING_MS 5000    /* a stopping worker past its deadline must
                                   answer "ping" within this, or is killed */

static struct master master_self;
static unsigned      master_gen_seq;

static void master_spawn(struct master *m, struct slot *s);
static void master_mkparent(const char *path);
static void master_finish_reload(struct master *m, int timed_out);
static void master_reload_begin(struct master *m);

/* ---- small helpers ---------------------------------------------------- */

void
master_watch(struct master *m, int fd, int tag, unsigned idx)
{
    struct epoll_event ev = { .events = EPOLLIN };

    ev.data.u64 = (uint64_t)tag << 32 | idx;
    if (epoll_ctl(m->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        log_err("epoll_ctl add fd %d: %s", fd, strerror(errno));
}

void
master_unwatch(struct master *m, int fd)
{
    (void)epoll_ctl(m->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static void
master_close_chan(struct master *m, struct slot *s)
{
    if (s->chan < 0)
        return;
    master_unwatch(m, s->chan);
    child_unregister_master_fd(s->chan);
    close(s->chan);
    s->chan = -1;
}

/* Logs each line of a multi-line error text. */
static void
master_log_lines(int level, const char *prefix, const char *text)
{
    const char *p = text, *nl;

    while (*p != '\0') {
        nl = strchr(p, '\n');
        if (nl == NULL)
            nl = p + strlen(p);
        if (nl > p)
            log_msg(level, "%s%.*s", prefix, (int)(nl - p), p);
        p = *nl ? nl + 1 : nl;
    }
}

static const char *
master_exit_text(int st, char *buf, size_t n)
{
    if (WIFSIGNALED(st))
        snprintf(buf, n, "exited on signal %d%s%s", WTERMSIG(st),
            WCOREDUMP(st) ? " (core dumped)" : "",
            WTERMSIG(st) == SIGSYS ? " (SIGSYS: the sandbox killed it for "
            "a forbidden system call; server.sandbox: off to debug)" : "");
    else
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(st));
    return buf;
}

static struct generation *
master_gen_by_id(struct master *m, unsigned id)
{
    if (m->cur != NULL && m->cur->id == id)
        return m->cur;
    if (m->next != NULL && m->next->id == id)
        return m->next;
    return NULL;
}

static unsigned
master_free_slots(const struct master *m)
{
    unsigned n = 0;

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++)
        n += m->slots[i].state == SLOT_FREE;
    return n;
}

/* ---- generations: config + listeners + spool + routes ----------------- */

/*
 * master_routes_files - before LMDB opens routes.db by path (as root): the
 * directory must be one only root (or our uid) can change, and the data
 * and lock files are created here, without following a link, as plain
 * files of ours with one link.  Nothing is chowned: workers open the db
 * before they drop privileges, so it stays root's (finding 1 of issue 10:
 * a -lock symlinked to a root file was chowned to mtad on SIGHUP).
 */
static int
master_routes_files(const struct config *cfg, char *err, size_t errsz)
{
    char        lock[NAME_MAX + 8], what[ERR_MAX / 2];
    const char *name;
    int         dfd, fd, rc = -1;

    if ((dfd = safefs_open_parent(cfg->routes_db, &name, what,
        sizeof(what))) < 0) {
        snprintf(err, errsz, "routes.db: %s", what);
        return -1;
    }
    if (strlen(name) > NAME_MAX - 5) {
        snprintf(err, errsz, "routes.db: %s: name too long", cfg->routes_db);
        goto out;
    }
    snprintf(lock, sizeof(lock), "%s-lock", name);
    if (safefs_dir_trusted(dfd, cfg->routes_db, what, sizeof(what)) < 0 ||
        (fd = safefs_open_file(dfd, name, O_RDWR | O_CREAT, 0660,
        cfg->routes_db, what, sizeof(what))) < 0) {
        snprintf(err, errsz, "routes.db: %s", what);
        goto out;
    }
    close(fd);
    if ((fd = safefs_open_file(dfd, lock, O_RDWR | O_CREAT, 0660, lock, what,
        sizeof(what))) < 0) {
        snprintf(err, errsz, "routes.db: %s", what);
        goto out;
    }
    close(fd);
    rc = 0;
out:
    close(dfd);
    return rc;
}

/* Creates the routes db if missing and writes routes.static into it. */
static int
master_load_routes(const struct config *cfg, char *err, size_t errsz)
{
    struct router *r = NULL;
    size_t         i;
    int            rc;

    rc = router_open(&r, cfg->routes_db, cfg->routes_default, 1);
    if (rc != ROUTER_OK) {
        snprintf(err, errsz, "routes.db: %s", router_errstr(r));
        router_close(r);
        return -1;
    }
    for (i = 0; i < cfg->nstatic_routes; i++) {
        const struct router_static *cr = &cfg->static_routes[i];

        if (router_put(r, cr->key, cr->route) != ROUTER_OK) {
            snprintf(err, errsz, "%s:%d:%d: routes.static.%s: %s", cfg->path,
                cr->line, cr->col, cr->key, router_errstr(r));
            router_close(r);
            return -1;
        }
    }
    router_close(r);
    return 0;
}

static void
master_gen_free(struct generation *g)
{
    if (g == NULL)
        return;
    listen_release(g->lfds, g->nlisten);
    free(g->lfds);
    privs_free(&g->privs);
    config_free(g->cfg);
    free(g);
}

/*
 * master_spool_prepare - create the spool tree and purge its tmp/, once per
 * spool directory in the master's life.  A reload must not purge: the old
 * generation may still be receiving into tmp/ while it retires.
 */
static int
master_spool_prepare(const struct config *cfg, const struct privs *p)
{
    static char **done;
    static size_t ndone;
    size_t        i;
    int           rc;

    for (i = 0; i < ndone; i++)
        if (strcmp(done[i], cfg->spool_dir) == 0)
            return SPOOL_OK;
    rc = spool_prepare(cfg->spool_dir, p->drop ? p->uid : (uid_t)-1,
        p->drop ? p->gid : (gid_t)-1);
    if (rc == SPOOL_OK) {
        done = xrealloc(done, (ndone + 1) * sizeof(*done));
        done[ndone++] = xstrdup(cfg->spool_dir);
    }
    return rc;
}

/* Everything a generation needs before its workers fork.  Takes cfg. */
static struct generation *
master_gen_prepare(struct config *cfg, char *err, size_t errsz)
{
    struct generation *g = xcalloc(1, sizeof(*g));
    int                rc;

    g->cfg = cfg;
    if (privs_resolve(cfg, &g->privs, err, errsz) < 0)
        goto fail;
    if (listen_acquire(cfg, &g->lfds, err, errsz) < 0)
        goto fail;
    g->nlisten = cfg->nlisten;
    rc = master_spool_prepare(cfg, &g->privs);
    if (rc != SPOOL_OK) {
        snprintf(err, errsz, "spool.dir: %s", spool_errstr(NULL));
        goto fail;
    }
    master_mkparent(cfg->routes_db);
    if (master_routes_files(cfg, err, errsz) < 0 ||
        master_load_routes(cfg, err, errsz) < 0)
        goto fail;
    g->id = ++master_gen_seq;
    return g;
fail:
    g->cfg = NULL;                  /* the caller still owns it */
    master_gen_free(g);
    return NULL;
}

/* ---- the status page -------------------------------------------------- */

static void
master_add_counters(struct status_worker *t, const struct status_worker *w)
{
#define ADD(f) t->f += __atomic_load_n(&w->f, __ATOMIC_RELAXED)
    ADD(conns_total); ADD(msgs_in); ADD(msgs_out); ADD(msgs_deferred);
    ADD(msgs_bounced); ADD(bytes_in); ADD(errors); ADD(log_dropped);
    ADD(proxy_refused); ADD(proxy_bad);
#undef ADD
    status_ops_add(&t->ops, &w->ops);
}

void
master_totals(struct master *m, struct status_worker *t)
{
    *t = m->retired;
    t->conns_cur = 0;
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        const struct status_worker *w = &m->status->w[i];

        if (m->slots[i].role != ROLE_WORKER)
            continue;
        master_add_counters(t, w);
        t->conns_cur += __atomic_load_n(&w->conns_cur, __ATOMIC_RELAXED);
    }
}

void
master_rates(struct master *m, double *in_ps, double *out_ps)
{
    unsigned newest, oldest;
    double   dt;

    *in_ps = *out_ps = 0;
    if (m->ring_n < 2)
        return;
    newest = (m->ring_head + MASTER_RATE_RING - 1) % MASTER_RATE_RING;
    oldest = (m->ring_head + MASTER_RATE_RING - m->ring_n) % MASTER_RATE_RING;
    dt = (double)(m->ring_ms[newest] - m->ring_ms[oldest]) / 1000.0;
    if (dt <= 0)
        return;
    *in_ps = (double)(m->ring_in[newest] - m->ring_in[oldest]) / dt;
    *out_ps = (double)(m->ring_out[newest] - m->ring_out[oldest]) / dt;
}

/* A worker left its slot: keep its counters in the totals, clear it. */
static void
master_retire_counters(struct master *m, struct slot *s)
{
    struct status_worker *w = &m->status->w[s->sidx];

    master_add_counters(&m->retired, w);
    memset(w, 0, sizeof(*w));
    status_slot_clear(m->status, s->sidx);   /* its sessions are gone */
}

/* ---- children --------------------------------------------------------- */

static void
master_slot_free(struct slot *s)
{
    memset(s, 0, sizeof(*s));
    s->chan = -1;
}

static void
master_spawn_logd(struct master *m)
{
    struct slot *s = &m->logd;
    pid_t        pid;

    s->role = ROLE_LOGD;
    pid = child_spawn_logd(s, &m->cur->privs, m->log_recv, m->log_file,
        m->cur->cfg->log_flush_interval_ms, m->cur->cfg->sandbox);
    if (pid < 0) {
        log_err("cannot start the log process: %s", strerror(errno));
        s->state = SLOT_BACKOFF;
        s->restart_at = util_now_ms() + MASTER_BACKOFF_MAX;
        return;
    }
    s->pid = pid;
    s->state = SLOT_RUNNING;
    s->started_ms = util_now_ms();
    child_register_master_fd(s->chan);
    master_watch(m, s->chan, MASTER_TAG_LOGD, 0);
}

/* Forks the worker of slot s with its generation's config. */
static void
master_spawn(struct master *m, struct slot *s)
{
    struct generation    *g = master_gen_by_id(m, s->generation);
    struct status_worker *w = &m->status->w[s->sidx];
    pid_t                 pid;

    if (g == NULL) {
        master_slot_free(s);
        return;
    }
    memset(w, 0, sizeof(*w));
    status_slot_clear(m->status, s->sidx);
    w->generation = g->id;
    w->started_ms = util_wall_ms();
    pid = child_spawn_worker(s, g, m->status, m->log_send);
    if (pid < 0) {
        log_err("worker %u: fork: %s; retrying in %ums", s->shard,
            strerror(errno), MASTER_BACKOFF_MAX);
        s->state = SLOT_BACKOFF;
        s->restart_at = util_now_ms() + MASTER_BACKOFF_MAX;
        return;
    }
    __atomic_store_n(&w->pid, (int32_t)pid, __ATOMIC_RELAXED);
    s->pid = pid;
    s->state = SLOT_RUNNING;
    s->ready = 0;
    s->started_ms = util_now_ms();
    child_register_master_fd(s->chan);
    master_watch(m, s->chan, MASTER_TAG_CHAN, s->sidx);
    log_debug("worker %u (pid %d, generation %u) started", s->shard,
        (int)pid, g->id);
}

static int
master_start_generation(struct master *m, struct generation *g)
{
    unsigned shard = 0;

    if (master_free_slots(m) < (unsigned)g->cfg->workers)
        return -1;
    for (size_t i = 0; i < MASTER_MAX_SLOTS &&
        shard < (unsigned)g->cfg->workers; i++) {
        struct slot *s = &m->slots[i];

        if (s->state != SLOT_FREE)
            continue;
        master_slot_free(s);
        s->role = ROLE_WORKER;
        s->shard = shard++;
        s->generation = g->id;
        s->sidx = (unsigned)i;
        master_spawn(m, s);
    }
    return 0;
}

void
master_send(struct slot *s, const char *cmd)
{
    if (s->chan < 0 || send(s->chan, cmd, strlen(cmd),
        MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        if (s->pid > 0)
            (void)kill(s->pid, SIGTERM);    /* the fallback to the channel */
    }
}

/* Graceful stop of one worker; SIGKILL after timeout_ms. */
static void
master_stop_worker(struct slot *s, uint64_t timeout_ms)
{
    if (s->state == SLOT_BACKOFF) {
        master_slot_free(s);
        return;
    }
    if (s->state != SLOT_RUNNING)
        return;
    master_send(s, "stop");
    s->state = SLOT_STOPPING;
    s->pinged = 0;
    s->stop_deadline = util_now_ms() + timeout_ms;
}

int
master_kick(struct master *m, const char *arg)
{
    char cmd[128];
    int  n = 0;

    snprintf(cmd, sizeof(cmd), "kick %s", arg);
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->state == SLOT_RUNNING && s->generation == m->cur->id &&
            s->chan >= 0 && send(s->chan, cmd, strlen(cmd),
            MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)strlen(cmd))
            n++;
    }
    return n;
}

/* The sandbox test (MTAD_SANDBOX_TEST=1 in the master's environment at
 * start, never otherwise): one running worker is told to make a forbidden
 * call.  Returns its pid, or -1 when none runs. */
pid_t
master_sandbox_test(struct master *m)
{
    static const char cmd[] = "sandbox-test";

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->state == SLOT_RUNNING && s->ready &&
            s->generation == m->cur->id && s->chan >= 0 &&
            send(s->chan, cmd, sizeof(cmd) - 1,
            MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(cmd) - 1)
            return s->pid;
    }
    return -1;
}

/* Reclaims LMDB reader slots that a dead worker left behind.  The master
 * holds no environment of its own across forks: it opens one briefly. */
static void
master_reader_check(struct master *m)
{
    struct router *r = NULL;

    if (router_open(&r, m->cur->cfg->routes_db, m->cur->cfg->routes_default,
        ROUTER_OPEN_RDONLY) == ROUTER_OK)
        router_reader_check(r);
    router_close(r);
}

/* Does any worker of generation gen still run (or stop)? */
static int
master_gen_alive(const struct master *m, unsigned gen)
{
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++)
        if (m->slots[i].role == ROLE_WORKER && m->slots[i].pid > 0 &&
            m->slots[i].generation == gen)
            return 1;
    return 0;
}

/* The last worker of a retired generation is gone: its locks are free,
 * and what it deferred or accepted after the current workers recovered is
 * in the spool but in no schedule.  "kick *" makes every current worker
 * rebuild its schedule from the spool for its shard. */
static void
master_handover(struct master *m, unsigned gen)
{
    int n;

    if (m->stopping || gen == m->cur->id ||
        (m->next != NULL && gen == m->next->id) || master_gen_alive(m, gen))
        return;
    n = master_kick(m, "*");
    log_info("generation %u gone; %d workers told to rescan the queue",
        gen, n);
}

static void
master_worker_exited(struct master *m, struct slot *s, int st)
{
    char     why[192];
    uint64_t now = util_now_ms(), lived = now - s->started_ms;
    int      expected = s->state == SLOT_STOPPING || m->stopping ||
                        master_gen_by_id(m, s->generation) == NULL;
    pid_t    pid = s->pid;

    master_exit_text(st, why, sizeof(why));
    master_retire_counters(m, s);
    master_close_chan(m, s);
    s->pid = 0;
    if (expected) {
        unsigned gen = s->generation;

        log_info("worker %u (pid %d, generation %u) %s", s->shard, (int)pid,
            gen, why);
        master_slot_free(s);
        master_reader_check(m);
        master_handover(m, gen);
        return;
    }
    master_reader_check(m);
    if (lived < MASTER_QUICK_EXIT_MS) {
        s->backoff_ms = s->backoff_ms == 0 ? MASTER_BACKOFF_MIN :
            s->backoff_ms * 2;
        if (s->backoff_ms > MASTER_BACKOFF_MAX)
            s->backoff_ms = MASTER_BACKOFF_MAX;
        s->quick_exits++;
    } else {
        s->backoff_ms = 0;
        s->quick_exits = 0;
    }
    if (s->backoff_ms == 0) {
        log_warn("worker %u (pid %d) %s; restarting", s->shard, (int)pid, why);
        master_spawn(m, s);
        return;
    }
    log_warn("worker %u (pid %d) %s %" PRIu64 "ms after its start; "
        "restarting in %" PRIu64 ".%" PRIu64 "s (crash-loop back-off, %u "
        "quick exits)", s->shard, (int)pid, why, lived, s->backoff_ms / 1000, s->backoff_ms % 1000 / 100,
        s->quick_exits);
    s->state = SLOT_BACKOFF;
    s->restart_at = now + s->backoff_ms;
}

static void
master_logd_exited(struct master *m, int st)
{
    struct slot *s = &m->logd;
    char         why[192];

    master_close_chan(m, s);
    s->pid = 0;
    if (m->stopping) {
        s->state = SLOT_FREE;
        return;
    }
    master_exit_text(st, why, sizeof(why));
    if (util_now_ms() - s->started_ms < MASTER_QUICK_EXIT_MS) {
        s->backoff_ms = s->backoff_ms == 0 ? MASTER_BACKOFF_MIN :
            s->backoff_ms * 2;
        if (s->backoff_ms > MASTER_BACKOFF_MAX)
            s->backoff_ms = MASTER_BACKOFF_MAX;
    } else {
        s->backoff_ms = 0;
    }
    /* Records sent meanwhile wait in the socket the master keeps. */
    if (s->backoff_ms == 0) {
        master_spawn_logd(m);
        log_warn("log process %s; restarted", why);
    } else {
        s->state = SLOT_BACKOFF;
        s->restart_at = util_now_ms() + s->backoff_ms;
        log_warn("log process %s; restarting in %" PRIu64 "ms", why,
            s->backoff_ms);
    }
}

/* Slot index of the worker with this pid, or -1. */
static int
master_find_pid(struct master *m, pid_t pid)
{
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++)
        if (m->slots[i].pid == pid && m->slots[i].role == ROLE_WORKER)
            return (int)i;
    return -1;
}

static void
master_reap(struct master *m)
{
    pid_t pid;
    int   st, i;

    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        if (pid == m->logd.pid) {
            master_logd_exited(m, st);
            continue;
        }
        i = master_find_pid(m, pid);
        if (i >= 0)
            master_worker_exited(m, &m->slots[i], st);
    }
}

/* ---- readiness, reload ------------------------------------------------ */

static int
master_gen_ready(struct master *m, const struct generation *g)
{
    unsigned n = 0;

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        const struct slot *s = &m->slots[i];

        if (s->role == ROLE_WORKER && s->generation == g->id) {
            if (s->state != SLOT_RUNNING || !s->ready)
                return 0;
            n++;
        }
    }
    return n == (unsigned)g->cfg->workers;
}

static unsigned
master_gen_nready(struct master *m, const struct generation *g)
{
    unsigned n = 0;

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        const struct slot *s = &m->slots[i];

        n += s->role == ROLE_WORKER && s->generation == g->id &&
            s->state == SLOT_RUNNING && s->ready;
    }
    return n;
}

static void
master_notify_status(struct master *m)
{
    notify_send("STATUS=serving: generation %u, %d workers", m->cur->id,
        m->cur->cfg->workers);
}

static void
master_check_ready(struct master *m)
{
    if (m->next != NULL) {
        if (master_gen_ready(m, m->next))
            master_finish_reload(m, 0);
        return;
    }
    if (!m->cur->notified && master_gen_ready(m, m->cur)) {
        m->cur->notified = 1;
        notify_send("READY=1");
        master_notify_status(m);
        log_notice("ready: generation %u, %d workers", m->cur->id,
            m->cur->cfg->workers);
    }
}

static void
master_chan_event(struct master *m, unsigned idx)
{
    struct slot *s = &m->slots[idx];
    char         msg[256];
    ssize_t      r;

    while (s->chan >= 0) {
        r = recv(s->chan, msg, sizeof(msg) - 1, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            break;
        if (r <= 0) {
            master_close_chan(m, s);   /* exiting; SIGCHLD follows */
            break;
        }
        msg[r] = '\0';
        if (strcmp(msg, "ready") == 0) {
            s->ready = 1;
        } else if (strcmp(msg, "pong") == 0) {
            watchdog_pong(m, idx);
            /* alive past its deadline (a message in DATA, a state
             * write): ask again later, never kill a worker that answers */
            s->pinged = 0;
            if (s->state == SLOT_STOPPING)
                s->stop_deadline = util_now_ms() + MASTER_PING_MS;
        } else {
            log_warn("worker %u: unknown message on the channel: %.40s",
                s->shard, msg);
        }
    }
    master_check_ready(m);
}

/* Sets the log file the log process writes to, opened here (as root). */
static void
master_reopen_log(struct master *m, const char *newpath)
{
    char *path = xstrdup(newpath);  /* newpath may be m->log_path */
    char  err[512];
    int   fd;

    fd = logd_open_file(path, err, sizeof(err));
    if (fd < 0) {
        log_err("%s; still writing to %s", err, m->log_path);
        free(path);
        return;
    }
    if (m->logd.chan >= 0 && fd != STDERR_FILENO &&
        logd_send_fd(m->logd.chan, "reopen", fd) < 0)
        log_err("log reopen: cannot reach the log process: %s",
            strerror(errno));
    if (m->log_file != STDERR_FILENO) {
        child_unregister_master_fd(m->log_file);
        close(m->log_file);
    }
    m->log_file = fd;
    if (fd != STDERR_FILENO)
        child_register_master_fd(fd);
    free(m->log_path);
    m->log_path = path;
    log_notice("log file %s (re)opened", path);
}

/* Hands the reload outcome to the control clients waiting for it. */
static void
master_reload_done(struct master *m, const char *err)
{
    char *text;
    size_t n;

    if (err == NULL) {
        n = 128;
        text = xmalloc(n);
        snprintf(text, n, "ok\nreloaded: generation %u, %d workers\n",
            m->cur->id, m->cur->cfg->workers);
    } else {
        n = strlen(err) + 128;
        text = xmalloc(n);
        snprintf(text, n, "error: new configuration rejected; generation %u "
            "keeps serving\n%s%s", m->cur->id, err,
            err[0] != '\0' && err[strlen(err) - 1] != '\n' ? "\n" : "");
    }
    for (size_t i = 0; i < MASTER_MAX_CLIENTS; i++) {
        struct ctl_client *c = &m->clients[i];

        if (c->fd >= 0 && c->waiting_reload == 1) {
            master_unwatch(m, c->fd);
            child_unregister_master_fd(c->fd);
            ctl_reply_fd(c->fd, text);
            c->fd = -1;
            c->waiting_reload = 0;
        } else if (c->fd >= 0 && c->waiting_reload == 2) {
            c->waiting_reload = 1;
        }
    }
    free(text);
    if (m->reload_again && !m->stopping) {
        m->reload_again = 0;
        master_reload_begin(m);
    }
}

static void
master_reload_reject(struct master *m, const char *err)
{
    master_log_lines(LOGL_ERR, "reload rejected: ", err);
    log_err("reload rejected; generation %u keeps serving", m->cur->id);
    notify_send("READY=1");
    master_notify_status(m);
    master_reload_done(m, err);
}

static void
master_reload_begin(struct master *m)
{
    char              err[ERR_MAX] = "";
    struct config    *cfg;
    struct generation *g;

    notify_send("RELOADING=1");
    log_notice("reloading %s", m->config_path);
    cfg = config_load(m->config_path, err, sizeof(err));
    if (cfg == NULL) {
        master_reload_reject(m, err);
        return;
    }
    if ((unsigned)cfg->workers > master_free_slots(m)) {
        snprintf(err, sizeof(err), "server.workers: %d new workers do not "
            "fit beside the %u slots still in use (at most %d in all)",
            cfg->workers, MASTER_MAX_SLOTS - master_free_slots(m),
            MASTER_MAX_SLOTS);
        config_free(cfg);
        master_reload_reject(m, err);
        return;
    }
    g = master_gen_prepare(cfg, err, sizeof(err));
    if (g == NULL) {
        config_free(cfg);
        master_reload_reject(m, err);
        return;
    }
    if (strcmp(cfg->control_socket, m->ctl_path) != 0 ||
        strcmp(cfg->pid_file, m->pid_path != NULL ? m->pid_path : "") != 0)
        log_warn("reload: server.control_socket and server.pid_file "
            "changes take effect at the next start");
    m->next = g;
    m->reload_deadline = util_now_ms() + MASTER_READY_TIMEOUT;
    (void)master_start_generation(m, g);
}

static void
master_finish_reload(struct master *m, int timed_out)
{
    struct generation *old = m->cur, *g = m->next;
    int                nold = 0;

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->role == ROLE_WORKER && s->generation == old->id &&
            s->state != SLOT_FREE) {
            master_stop_worker(s, old->cfg->shutdown_timeout_ms);
            nold++;
        }
    }
    m->cur = g;
    m->next = NULL;
    log_level = g->cfg->log_level;
    log_set_format(g->cfg->log_format);
    {
        char merr[512];

        if (metrics_apply(m, g->cfg, merr, sizeof(merr)) < 0)
            log_err("reload: %s; the metrics listener stays where it was",
                merr);
    }
    if (strcmp(g->cfg->log_file, m->log_path) != 0)
        master_reopen_log(m, g->cfg->log_file);
    if (g->cfg->log_flush_interval_ms != old->cfg->log_flush_interval_ms &&
        m->logd.chan >= 0) {
        char cmd[48];

        snprintf(cmd, sizeof(cmd), "interval %" PRIu64,
            g->cfg->log_flush_interval_ms);
        (void)logd_send_fd(m->logd.chan, cmd, -1);
    }
    master_gen_free(old);           /* closes listeners no longer in use */
    m->status->generation = g->id;
    m->status->nworkers = (uint32_t)g->cfg->workers;
    g->notified = 1;
    notify_send("READY=1");
    master_notify_status(m);
    log_notice("reload done: generation %u serving with %d workers%s; "
        "%d old workers told to stop", g->id, g->cfg->workers,
        timed_out ? " (not all ready in time)" : "", nold);
    master_reload_done(m, NULL);
}

/* Not one new worker became ready in time (they crash or hang): keep the
 * old generation rather than swap to one that does not serve. */
static void
master_abort_reload(struct master *m)
{
    struct generation *g = m->next;
    char               err[256];

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->role == ROLE_WORKER && s->generation == g->id)
            master_stop_worker(s, MASTER_BACKOFF_MAX);
    }
    snprintf(err, sizeof(err), "no worker of generation %u became ready "
        "within %ums", g->id, MASTER_READY_TIMEOUT);
    m->next = NULL;
    master_gen_free(g);
    master_reload_reject(m, err);
}

void
master_request_reload(struct master *m)
{
    if (m->stopping || m->draining) {
        master_reload_done(m, m->stopping ? "mtad is stopping" :
            "mtad is draining");
        return;
    }
    if (m->next != NULL) {
        m->reload_again = 1;        /* after the one in progress */
        return;
    }
    master_reload_begin(m);
}

void
master_request_stop(struct master *m)
{
    uint64_t timeout = m->cur->cfg->shutdown_timeout_ms;

    if (m->stopping)
        return;
    m->stopping = 1;
    notify_send("STOPPING=1");
    log_notice("stopping: telling the workers to finish (at most %" PRIu64
        "ms)", timeout);
    if (m->next != NULL)
        m->reload_again = 0;
    for (size_t i = 0; i < MASTER_MAX_CLIENTS; i++)
        if (m->clients[i].waiting_reload == 2)
            m->clients[i].waiting_reload = 1;
    master_reload_done(m, "mtad is stopping");
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++)
        if (m->slots[i].role == ROLE_WORKER)
            master_stop_worker(&m->slots[i], timeout);
    m->stop_deadline = util_now_ms() + timeout;
}

/* ---- signals, timers -------------------------------------------------- */

static void
master_signals(struct master *m)
{
    struct signalfd_siginfo si;

    while (read(m->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        switch (si.ssi_signo) {
        case SIGCHLD:
            master_reap(m);
            break;
        case SIGHUP:
            audit_log(si.ssi_uid, (pid_t)si.ssi_pid, "signal", "reload",
                "SIGHUP");
            log_notice("SIGHUP: reload requested");
            master_request_reload(m);
            break;
        case SIGTERM:
        case SIGINT:
            audit_log(si.ssi_uid, (pid_t)si.ssi_pid, "signal", "stop",
                si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
            log_notice("%s: stop requested",
                si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
            master_request_stop(m);
            break;
        case SIGUSR1:
            audit_log(si.ssi_uid, (pid_t)si.ssi_pid, "signal", "reopen",
                "SIGUSR1");
            master_reopen_log(m, m->log_path);
            break;
        default:
            break;
        }
    }
}

static void
master_tick(struct master *m, uint64_t now)
{
    struct status_worker t;
    uint64_t             dropped;

    master_totals(m, &t);
    m->ring_in[m->ring_head] = t.msgs_in;
    m->ring_out[m->ring_head] = t.msgs_out;
    m->ring_ms[m->ring_head] = now;
    m->ring_head = (m->ring_head + 1) % MASTER_RATE_RING;
    if (m->ring_n < MASTER_RATE_RING)
        m->ring_n++;
    if (m->ticks++ % MASTER_LOAD_EVERY == 0)
        load_sample(m);             /* and the load policy: load.c */
    switch (tlskey_rotate(m->tickets, now)) {
    case 1:
        log_info("TLS session-ticket key rotated (%" PRIu64 " made; the "
            "previous one opens tickets for one more period)",
            tlskey_made(m->tickets));
        break;
    case -1:
        log_warn("TLS session-ticket key: no random bytes; the current key "
            "stays in use");
        break;
    default:
        break;
    }
    dropped = t.log_dropped + log_dropped();
    if (dropped > m->dropped_reported) {
        log_warn("dropped %" PRIu64 " log records (%" PRIu64 " in all): the "
            "log process could not keep up", dropped - m->dropped_reported,
            dropped);
        m->dropped_reported = dropped;
    }
    ctl_expire(m, now);
    metrics_expire(m, now);
    watchdog_tick(m, now);
}

static void
master_deadlines(struct master *m, uint64_t now)
{
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->state == SLOT_BACKOFF && now >= s->restart_at && !m->stopping)
            master_spawn(m, s);
        else if (s->state == SLOT_STOPPING && now >= s->stop_deadline &&
            s->pid > 0 && !s->pinged) {
            /* a stopping worker gives its work back and exits by itself
             * at its own deadline; past ours it only has to answer */
            master_send(s, "ping");
            s->pinged = 1;
            s->stop_deadline = now + MASTER_PING_MS;
        } else if (s->state == SLOT_STOPPING && now >= s->stop_deadline &&
            s->pid > 0) {
            log_warn("worker %u (pid %d, generation %u) is past its stop "
                "deadline and did not answer the master for %d ms (hung or "
                "stopped); killing it", s->shard, (int)s->pid, s->generation,
                MASTER_PING_MS);
            (void)kill(s->pid, SIGKILL);
            s->stop_deadline = UINT64_MAX;
        }
    }
    if (m->logd.state == SLOT_BACKOFF && now >= m->logd.restart_at &&
        !m->stopping)
        master_spawn_logd(m);
    if (m->logd.state == SLOT_STOPPING && now >= m->logd.stop_deadline &&
        m->logd.pid > 0) {
        (void)kill(m->logd.pid, SIGKILL);
        m->logd.stop_deadline = UINT64_MAX;
    }
    if (m->next != NULL && now >= m->reload_deadline) {
        if (master_gen_nready(m, m->next) > 0)
            master_finish_reload(m, 1);
        else
            master_abort_reload(m);
    }
}

static int
master_workers_alive(const struct master *m)
{
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++)
        if (m->slots[i].role == ROLE_WORKER && m->slots[i].pid > 0)
            return 1;
    return 0;
}

/* During shutdown: once the workers are gone, stop the log process last,
 * so their final records are written.  Returns 1 when all is gone. */
static int
master_shutdown_step(struct master *m)
{
    if (master_workers_alive(m))
        return 0;
    if (m->logd.state == SLOT_RUNNING) {
        log_notice("workers stopped; mtad exits");
        m->logd.state = SLOT_STOPPING;
        m->logd.stop_deadline = util_now_ms() + LOGD_STOP_TIMEOUT;
        if (m->logd.chan < 0 ||
            logd_send_fd(m->logd.chan, "stop", -1) < 0)
            (void)kill(m->logd.pid, SIGTERM);
        return 0;
    }
    return m->logd.pid <= 0;
}

static int
master_timeout(const struct master *m, uint64_t now)
{
    uint64_t next = m->next_tick;

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        const struct slot *s = &m->slots[i];

        if (s->state == SLOT_BACKOFF && s->restart_at < next)
            next = s->restart_at;
        if (s->state == SLOT_STOPPING && s->stop_deadline < next)
            next = s->stop_deadline;
    }
    if (m->logd.state == SLOT_BACKOFF && m->logd.restart_at < next)
        next = m->logd.restart_at;
    if (m->logd.state == SLOT_STOPPING && m->logd.stop_deadline < next)
        next = m->logd.stop_deadline;
    if (m->next != NULL && m->reload_deadline < next)
        next = m->reload_deadline;
    return next <= now ? 0 : (int)(next - now);
}

static void
master_loop(struct master *m)
{
    struct epoll_event ev[64];
    uint64_t           now;
    int                n;

    m->next_tick = util_now_ms();
    for (;;) {
        now = util_now_ms();
        n = epoll_wait(m->epfd, ev, (int)ARRAY_LEN(ev), master_timeout(m, now));
        if (n < 0 && errno != EINTR)
            fatal("epoll_wait");    /* fatal */
        for (int i = 0; i < n; i++) {
            unsigned tag = (unsigned)(ev[i].data.u64 >> 32);
            unsigned idx = (unsigned)ev[i].data.u64;

            switch (tag) {
            case MASTER_TAG_SIGNAL: master_signals(m); break;
            case MASTER_TAG_CTL:    ctl_accept(m); break;
            case MASTER_TAG_CLIENT: ctl_client_event(m, (int)idx); break;
            case MASTER_TAG_CHAN:   master_chan_event(m, idx); break;
            case MASTER_TAG_LOGD: {
                char    b[64];
                ssize_t r = m->logd.chan >= 0 ? recv(m->logd.chan, b,
                    sizeof(b), MSG_DONTWAIT) : -1;

                if (r == 0)
                    master_close_chan(m, &m->logd);
                else if (r == 4 && memcmp(b, "pong", 4) == 0)
                    watchdog_logd_pong(m);
                break;
            }
            case MASTER_TAG_METRICS:
            case MASTER_TAG_METRICS_CLIENT:
                metrics_event(m, tag, idx, ev[i].events);
                break;
            default: break;
            }
        }
        now = util_now_ms();
        if (now >= m->next_tick) {
            master_tick(m, now);
            master_drain_tick(m, now);
            m->next_tick = now + MASTER_TICK_MS;
        }
        master_deadlines(m, now);
        if (m->stopping && master_shutdown_step(m))
            return;
    }
}

/* ---- start-up --------------------------------------------------------- */

/* Creates the parent directory of path when it is missing (/run/mtad). */
static void
master_mkparent(const char *path)
{
    char  dir[4096];
    char *slash;

    util_strlcpy(dir, path, sizeof(dir));
    slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return;
    *slash = '\0';
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return;                     /* the open/bind that follows says why */
}

/* The pid file, opened without following a link and checked to be a
 * plain file of ours (O_TRUNC through a symlink truncated any file). */
static int
master_write_pidfile(const char *path, char *err, size_t errsz)
{
    char        buf[32], what[ERR_MAX / 2];
    const char *name;
    int         dfd, fd = -1, n;

    master_mkparent(path);
    if ((dfd = safefs_open_parent(path, &name, what, sizeof(what))) >= 0) {
        if (safefs_dir_trusted(dfd, path, what, sizeof(what)) == 0)
            fd = safefs_open_file(dfd, name, O_WRONLY | O_CREAT, 0644, path,
                what, sizeof(what));
        close(dfd);
    }
    if (fd < 0) {
        snprintf(err, errsz, "server.pid_file: %s", what);
        return -1;
    }
    n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
    if (ftruncate(fd, 0) < 0 || util_write_all(fd, buf, (size_t)n) < 0) {
        snprintf(err, errsz, "server.pid_file: %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return close(fd);
}

/* Forks; the parent waits until the daemon says it started (1 byte on the
 * pipe) and exits 0, or exits with the daemon's status when it failed. */
static int
master_daemonize(void)
{
    int   p[2], st;
    char  c;
    pid_t pid;

    if (pipe2(p, O_CLOEXEC) < 0 || (pid = fork()) < 0) {
        fprintf(stderr, "mtad: cannot detach: %s\n", strerror(errno));
        exit(EX_OSERR);
    }
    if (pid > 0) {
        close(p[1]);
        if (read(p[0], &c, 1) == 1)
            _exit(EX_OK);
        if (waitpid(pid, &st, 0) == pid && WIFEXITED(st))
            _exit(WEXITSTATUS(st) ? WEXITSTATUS(st) : EX_SOFTWARE);
        _exit(EX_SOFTWARE);
    }
    close(p[0]);
    if (setsid() < 0) {
        fprintf(stderr, "mtad: setsid: %s\n", strerror(errno));
        exit(EX_OSERR);
    }
    return p[1];
}

static void
master_detach_stdio(int fd_ok)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    char c = 1;

    if (null >= 0) {
        dup2(null, STDIN_FILENO);
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        close(null);
    }
    (void)!write(fd_ok, &c, 1);
    close(fd_ok);
}

static int
master_setup_signals(struct master *m)
{
    sigset_t set;

    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        return -1;
    m->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (m->sigfd < 0)
        return -1;
    child_register_master_fd(m->sigfd);
    return 0;
}

/* The log socketpair: many senders share one non-blocking end; the master
 * keeps the receiving end, so a restarted log process finds it. */
static int
master_log_socket(struct master *m)
{
    int sv[2], sz = LOG_SOCKBUF;

    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    /* FORCE passes wmem_max/rmem_max when we are root; else best effort. */
    if (setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) < 0)
        (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    if (setsockopt(sv[1], SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) < 0)
        (void)setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    (void)fcntl(sv[0], F_SETFL, O_NONBLOCK);
    (void)fcntl(sv[1], F_SETFL, O_NONBLOCK);
    m->log_send = sv[0];
    m->log_recv = sv[1];
    child_register_master_fd(m->log_recv);
    return 0;
}

static void
master_cleanup(struct master *m)
{
    if (m->pid_path != NULL)
        (void)unlink(m->pid_path);
    if (m->ctl_path != NULL && m->ctlfd >= 0)
        (void)unlink(m->ctl_path);
}

/* Start-up until the first generation is forked. */
static int
master_start(struct master *m, struct config *cfg, int foreground)
{
    char err[ERR_MAX] = "";
    int  ok_fd = -1;

    if (!foreground)
        ok_fd = master_daemonize();
    m->started_ms = util_now_ms();
    child_set_master_pid(getpid());
    proctitle_set("mtad: master", "mtad: master -c %s", m->config_path);
    watchdog_init();                /* before notify_init() */
    notify_init();
    m->cur = master_gen_prepare(cfg, err, sizeof(err));
    if (m->cur == NULL) {
        fprintf(stderr, "mtad: %s\n", err);
        config_free(cfg);
        return strstr(err, "no such user") || strstr(err, "no such group") ?
            EX_NOUSER : strstr(err, "listen") ? EX_UNAVAILABLE : EX_CANTCREAT;
    }
    if (cfg->sandbox && sandbox_seccomp(SANDBOX_MASTER, err,
        sizeof(err)) < 0) {
        fprintf(stderr, "mtad: server.sandbox: %s\n", err);
        return EX_OSERR;
    }
    m->sandbox_test = getenv("MTAD_SANDBOX_TEST") != NULL &&
        strcmp(getenv("MTAD_SANDBOX_TEST"), "1") == 0;
    m->status = status_create();
    m->status->master_started_ms = util_wall_ms();
    m->status->generation = m->cur->id;
    m->status->nworkers = (uint32_t)cfg->workers;
    /* The TLS session-ticket keys of the whole daemon, before the first
     * fork: every worker of every generation shares them (a reload keeps
     * them), the tick rotates them. */
    m->tickets = tlskey_create(TLSKEY_PERIOD_MS, util_now_ms());
    if (m->tickets == NULL) {
        fprintf(stderr, "mtad: TLS ticket keys: %s\n", strerror(errno));
        return EX_OSERR;
    }
    child_set_tickets(m->tickets);
    master_mkparent(cfg->control_socket);
    m->ctlfd = ctl_listen(cfg->control_socket, &m->cur->privs, err,
        sizeof(err));
    if (m->ctlfd < 0) {
        fprintf(stderr, "mtad: %s\n", err);
        return EX_UNAVAILABLE;
    }
    m->ctl_path = xstrdup(cfg->control_socket);
    child_register_master_fd(m->ctlfd);
    if (master_write_pidfile(cfg->pid_file, err, sizeof(err)) < 0) {
        fprintf(stderr, "mtad: %s\n", err);
        master_cleanup(m);
        return EX_CANTCREAT;
    }
    m->pid_path = xstrdup(cfg->pid_file);
    m->log_file = logd_open_file(cfg->log_file, err, sizeof(err));
    if (m->log_file < 0) {
        fprintf(stderr, "mtad: %s\n", err);
        master_cleanup(m);
        return EX_CANTCREAT;
    }
    if (m->log_file != STDERR_FILENO)
        child_register_master_fd(m->log_file);
    m->log_path = xstrdup(cfg->log_file);
    m->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (m->epfd < 0 || master_setup_signals(m) < 0 ||
        master_log_socket(m) < 0) {
        fprintf(stderr, "mtad: start-up: %s\n", strerror(errno));
        master_cleanup(m);
        return EX_OSERR;
    }
    child_register_master_fd(m->epfd);
    master_watch(m, m->sigfd, MASTER_TAG_SIGNAL, 0);
    master_watch(m, m->ctlfd, MASTER_TAG_CTL, 0);
    if (metrics_apply(m, cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "mtad: %s\n", err);
        master_cleanup(m);
        return EX_UNAVAILABLE;
    }
    /* Detach before the children fork: they must not hold the caller's
     * stdout/stderr (a pipe would never see EOF). */
    if (ok_fd >= 0)
        master_detach_stdio(ok_fd);
    master_spawn_logd(m);
    log_open("master", m->log_send, cfg->log_level);
    log_notice("starting: generation %u, %d workers, %zu listeners%s",
        m->cur->id, cfg->workers, cfg->nlisten,
        m->cur->privs.drop ? "" : " (not root: no privilege drop)");
    (void)master_start_generation(m, m->cur);
    return EX_OK;
}

int
master_run(const struct master_opts *o)
{
    struct master *m = &master_self;
    struct config *cfg;
    char           err[ERR_MAX] = "";
    int            rc;

    memset(m, 0, sizeof(*m));
    m->ctlfd = m->sigfd = m->epfd = -1;
    m->log_send = m->log_recv = m->log_file = -1;
    m->logd.chan = -1;
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++)
        master_slot_free(&m->slots[i]);
    for (size_t i = 0; i < MASTER_MAX_CLIENTS; i++)
        m->clients[i].fd = -1;
    m->config_path = o->config_path;
    cfg = config_load(o->config_path, err, sizeof(err));
    if (cfg == NULL) {
        fprintf(stderr, "%s%s", err, err[0] && err[strlen(err) - 1] != '\n' ?
            "\n" : "");
        fprintf(stderr, "mtad: %s: configuration invalid\n", o->config_path);
        return EX_CONFIG;
    }
    log_open("master", -1, cfg->log_level);
    log_set_format(cfg->log_format);
    rc = master_start(m, cfg, o->foreground);
    if (rc != EX_OK)
        return rc;
    master_loop(m);
    log_open("master", -1, m->cur->cfg->log_level);
    master_cleanup(m);
    return EX_OK;
}
