/*
 * reload.c - generations: a config and what was made from it, and the
 *            hand-over from one generation to the next.
 *
 * PURPOSE   A generation is a loaded config with its privileges,
 *           listeners, spool tree and routes db written (routes.static, one
 *           transaction).  Reload (SIGHUP, "mtactl reload"): a valid new
 *           config starts a new generation; when all its workers said
 *           "ready" (or after 10 s with at least one ready) the old one
 *           gets "stop"; none ready: the new one is dropped and the old
 *           keeps serving.  When the last old worker is gone the current
 *           workers get "kick *" (the hand-over of its queue).
 * CONTRACT  Runs on the master's loop only.  Control clients waiting for a
 *           reload get its outcome through master_reload_done().
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
#include "shape/shape.h"
#include "spool/spool.h"
#include "master/master.h"
#include "master/master_int.h"
#include "master/ops.h"

static void master_reload_begin(struct master *m);

struct generation *
master_gen_by_id(struct master *m, unsigned id)
{
    if (m->cur != NULL && m->cur->id == id)
        return m->cur;
    if (m->next != NULL && m->next->id == id)
        return m->next;
    return NULL;
}

/*
 * master_routes_files - before LMDB opens routes.db by path (as root): the
 * directory must be one only root (or our uid) can change, and the data
 * and lock files are created here, without following a link, as plain
 * files of ours with one link, mode 0600: no worker opens the live table
 * (router.h, TRUST), and an older install's 0660 is narrowed.  Nothing is
 * chowned (a -lock symlinked to a root file was once chowned to mtad on
 * SIGHUP).
 */
static int
master_routes_files(const struct config *cfg, char *err, size_t errsz)
{
    char        lock[NAME_MAX + 8], what[MASTER_ERR_MAX / 2];
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
        (fd = safefs_open_file(dfd, name, O_RDWR | O_CREAT, 0600,
        cfg->routes_db, what, sizeof(what))) < 0) {
        snprintf(err, errsz, "routes.db: %s", what);
        goto out;
    }
    (void)fchmod(fd, 0600);
    close(fd);
    if ((fd = safefs_open_file(dfd, lock, O_RDWR | O_CREAT, 0600, lock, what,
        sizeof(what))) < 0) {
        snprintf(err, errsz, "routes.db: %s", what);
        goto out;
    }
    (void)fchmod(fd, 0600);
    close(fd);
    rc = 0;
out:
    close(dfd);
    return rc;
}

/* master_snap_dir - the snapshot directory of db, created when missing
 * (root's, 0755: the workers list nothing else there) and trusted.
 * Returns its fd. */
static int
master_snap_dir(const char *dir, char *err, size_t errsz)
{
    char        what[MASTER_ERR_MAX / 2];
    const char *name;
    int         dfd, sfd, created;

    if ((dfd = safefs_open_parent(dir, &name, what, sizeof(what))) < 0) {
        snprintf(err, errsz, "routes snapshot: %s", what);
        return -1;
    }
    sfd = safefs_mkdir_open(dfd, name, 0755, dir, &created, what,
        sizeof(what));
    close(dfd);
    if (sfd >= 0 && safefs_dir_trusted(sfd, dir, what, sizeof(what)) < 0) {
        close(sfd);
        sfd = -1;
    }
    if (sfd < 0)
        snprintf(err, errsz, "routes snapshot: %s", what);
    return sfd;
}

/*
 * master_routes_publish - the table the workers read (router.h, TRUST):
 * a compact copy of r's committed state in a new file, readable by the
 * workers' group, renamed over the one they open.  A worker that maps the
 * old file keeps it until it reopens; nothing writes a published file
 * again.  No fsync: after a crash the next start publishes anew.
 */
static int
master_routes_publish(struct router *r, const struct config *cfg,
    const struct privs *p, char *err, size_t errsz)
{
    char dir[PATH_MAX], file[PATH_MAX], tmp[32];
    int  sfd, fd, rc = -1;

    if (router_snapshot_path(cfg->routes_db, dir, sizeof(dir), file,
        sizeof(file)) != ROUTER_OK) {
        snprintf(err, errsz, "routes.db: %s: name too long", cfg->routes_db);
        return -1;
    }
    if ((sfd = master_snap_dir(dir, err, errsz)) < 0)
        return -1;
    snprintf(tmp, sizeof(tmp), ".new.%d", (int)getpid());
    (void)unlinkat(sfd, tmp, 0);    /* a publish that failed half-way */
    fd = openat(sfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
        O_CLOEXEC, 0640);
    if (fd < 0 || (p->drop && fchown(fd, (uid_t)-1, p->gid) < 0) ||
        fchmod(fd, 0640) < 0) {
        snprintf(err, errsz, "routes snapshot %s/%s: %s", dir, tmp,
            strerror(errno));
        goto out;
    }
    if (router_snapshot(r, fd) != ROUTER_OK) {
        snprintf(err, errsz, "routes snapshot %s: %s", file,
            router_errstr(r));
        goto out;
    }
    if (renameat(sfd, tmp, sfd, ROUTER_SNAP_FILE) < 0) {
        snprintf(err, errsz, "routes snapshot %s: rename: %s", file,
            strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (rc < 0)
        (void)unlinkat(sfd, tmp, 0);
    close(sfd);
    return rc;
}

/* Creates the routes db if missing, writes routes.static into it
 * (router_load_static() checks every route before it writes any, and
 * writes them all in one transaction) and publishes the snapshot. */
static int
master_load_routes(const struct config *cfg, const struct privs *p,
    char *err, size_t errsz)
{
    struct router *r = NULL;
    int            rc;

    rc = router_open(&r, cfg->routes_db, cfg->routes_default, 1);
    if (rc == ROUTER_OK && (rc = router_load_static(r, cfg->static_routes,
        cfg->nstatic_routes)) != ROUTER_OK)
        snprintf(err, errsz, "%s: %s", cfg->path, router_errstr(r));
    else if (rc != ROUTER_OK)
        snprintf(err, errsz, "routes.db: %s", router_errstr(r));
    else if (master_routes_publish(r, cfg, p, err, errsz) < 0)
        rc = ROUTER_ESYS;
    router_close(r);
    return rc == ROUTER_OK ? 0 : -1;
}

/* master_routes_tell - CHAN_ROUTES to every worker with a channel: each one
 * reopens the snapshot before its next lookup.  Returns how many running
 * workers could not be told: a full channel.  A worker whose channel is
 * gone has exited (its replacement opens the new snapshot), and one that
 * is stopping is told if it still listens, never counted. */
static int
master_routes_tell(struct master *m)
{
    int failed = 0;

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->role != ROLE_WORKER || s->chan < 0 ||
            (s->state != SLOT_RUNNING && s->state != SLOT_STOPPING))
            continue;
        if (chan_send(s->chan, CHAN_ROUTES, NULL, 0, -1) < 0 &&
            s->state == SLOT_RUNNING && (errno == EAGAIN ||
            errno == EWOULDBLOCK || errno == ENOBUFS))
            failed++;
    }
    return failed;
}

/* master_routes_republish - g's snapshot made again from its table. */
static int
master_routes_republish(const struct generation *g, char *err, size_t errsz)
{
    const struct config *cfg = g->cfg;
    struct router       *r = NULL;
    int                  rc = -1;

    if (router_open(&r, cfg->routes_db, cfg->routes_default,
        ROUTER_OPEN_RDONLY) != ROUTER_OK)
        snprintf(err, errsz, "routes.db: %s", router_errstr(r));
    else
        rc = master_routes_publish(r, cfg, &g->privs, err, errsz);
    router_close(r);
    return rc;
}

int
master_routes_changed(struct master *m, char *err, size_t errsz)
{
    if (master_routes_republish(m->cur, err, errsz) < 0)
        return -1;
    /* during a reload the new generation may read another routes.db */
    if (m->next != NULL && strcmp(m->next->cfg->routes_db,
        m->cur->cfg->routes_db) != 0 &&
        master_routes_republish(m->next, err, errsz) < 0)
        return -1;
    return master_routes_tell(m);
}

static void
master_gen_free(struct master *m, struct generation *g)
{
    if (g == NULL)
        return;
    listen_release(m, g->lfds, g->nlisten);
    free(g->lfds);
    privs_free(&g->privs);
    shape_rules_free(g->shape);
    config_free(g->cfg);
    free(g);
}

/*
 * master_spool_prepare - create the spool tree and purge its tmp/, once per
 * spool directory in the master's life.  A reload must not purge: the old
 * generation may still be receiving into tmp/ while it retires.
 */
static int
master_spool_prepare(struct master *m, const struct config *cfg,
    const struct privs *p)
{
    size_t i;
    int    rc;

    for (i = 0; i < m->nspool_done; i++)
        if (strcmp(m->spool_done[i], cfg->spool_dir) == 0)
            return SPOOL_OK;
    /* state/ is the workers' to clean, shard by shard (deliver_load) */
    rc = spool_prepare_tree(cfg->spool_dir, p->drop ? p->uid : (uid_t)-1,
        p->drop ? p->gid : (gid_t)-1);
    if (rc == SPOOL_OK) {
        m->spool_done = xrealloc(m->spool_done, (m->nspool_done + 1) *
            sizeof(*m->spool_done));
        m->spool_done[m->nspool_done++] = xstrdup(cfg->spool_dir);
    }
    return rc;
}

/* Everything a generation needs before its workers fork.  Takes cfg.
 * On failure *exit_code is the sysexits code of the step that failed:
 * EX_NOUSER (server.user, group, admin_group), EX_UNAVAILABLE (a listen
 * address), EX_CANTCREAT (spool tree, routes db). */
struct generation *
master_gen_prepare(struct master *m, struct config *cfg, int *exit_code,
    char *err, size_t errsz)
{
    struct generation *g = xcalloc(1, sizeof(*g));
    int                rc;

    g->cfg = cfg;
    /* the shaping rules: a bad file keeps the old generation's */
    *exit_code = EX_CONFIG;
    if (shape_rules_load(m->config_path, &g->shape, err, errsz) < 0)
        goto fail;
    *exit_code = EX_NOUSER;
    if (privs_resolve(cfg, &g->privs, err, errsz) < 0)
        goto fail;
    *exit_code = EX_UNAVAILABLE;
    if (listen_acquire(m, cfg, &g->lfds, err, errsz) < 0)
        goto fail;
    g->nlisten = cfg->nlisten;
    *exit_code = EX_CANTCREAT;
    rc = master_spool_prepare(m, cfg, &g->privs);
    if (rc != SPOOL_OK) {
        snprintf(err, errsz, "spool.dir: %s", spool_errstr(NULL));
        goto fail;
    }
    master_mkparent(cfg->routes_db);
    if (master_routes_files(cfg, err, errsz) < 0 ||
        master_load_routes(cfg, &g->privs, err, errsz) < 0)
        goto fail;
    g->id = ++m->gen_seq;
    *exit_code = EX_OK;
    return g;
fail:
    g->cfg = NULL;                  /* the caller still owns it */
    master_gen_free(m, g);
    return NULL;
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
void
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

unsigned
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
    notify_send(m, "STATUS=serving: generation %u, %d workers", m->cur->id,
        m->cur->cfg->workers);
}

void
master_check_ready(struct master *m)
{
    if (m->next != NULL) {
        if (master_gen_ready(m, m->next))
            master_finish_reload(m, 0);
        return;
    }
    if (!m->cur->notified && master_gen_ready(m, m->cur)) {
        m->cur->notified = 1;
        notify_send(m, "READY=1");
        master_notify_status(m);
        log_notice("ready: generation %u, %d workers", m->cur->id,
            m->cur->cfg->workers);
    }
}

/* Sets the log file the log process writes to, opened here (as root). */
void
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
    if (m->logd.chan >= 0 && fd != STDERR_FILENO) {
        if (chan_send(m->logd.chan, CHAN_LOG_REOPEN, NULL, 0, fd) < 0)
            log_err("log reopen: cannot reach the log process: %s",
                strerror(errno));
        else if (m->log_own_send >= 0)
            /* the mark among the records: the log process takes the
             * command before any record sent after this (logd.c) */
            (void)send(m->log_own_send, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    if (m->log_file != STDERR_FILENO) {
        child_unregister_master_fd(m, m->log_file);
        close(m->log_file);
    }
    m->log_file = fd;
    if (fd != STDERR_FILENO)
        child_register_master_fd(m, fd);
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
            child_unregister_master_fd(m, c->fd);
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
    notify_send(m, "READY=1");
    master_notify_status(m);
    master_reload_done(m, err);
}

static void
master_reload_begin(struct master *m)
{
    char              err[MASTER_ERR_MAX] = "";
    struct config    *cfg;
    struct generation *g;
    int                code;

    notify_send(m, "RELOADING=1");
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
    g = master_gen_prepare(m, cfg, &code, err, sizeof(err));
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
    /* routes.static went into the table: the running workers see it as
     * the new generation does */
    if (master_routes_tell(m) > 0)
        log_warn("reload: some workers could not be told of the routes");
    (void)master_start_generation(m, g);
}

void
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
    master_publish_submit(g->cfg);
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
        uint64_t ms = g->cfg->log_flush_interval_ms;

        (void)chan_send(m->logd.chan, CHAN_LOG_INTERVAL, &ms, sizeof(ms), -1);
    }
    master_cluster_reloaded(m, old->cfg);  /* before old's config goes */
    master_gen_free(m, old);           /* closes listeners no longer in use */
    m->status->generation = g->id;
    m->status->nworkers = (uint32_t)g->cfg->workers;
    g->notified = 1;
    notify_send(m, "READY=1");
    master_notify_status(m);
    log_notice("reload done: generation %u serving with %d workers%s; "
        "%d old workers told to stop", g->id, g->cfg->workers,
        timed_out ? " (not all ready in time)" : "", nold);
    master_reload_done(m, NULL);
}

/* Not one new worker became ready in time (they crash or hang): keep the
 * old generation rather than swap to one that does not serve. */
void
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
    master_gen_free(m, g);
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
    notify_send(m, "STOPPING=1");
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
