/*
 * child.c - fork the master's children (workers, the log process) and set
 * each one up without exec, and the privilege drop they share.
 *
 * PURPOSE   In the child, in this order: PR_SET_PDEATHSIG and a check that
 *           the master did not die meanwhile; default signal handling and
 *           an empty mask; close every fd the child must not hold (control
 *           socket, signalfd, epoll, other children's channels, listeners
 *           of other generations); log_open(); worker_init() while still
 *           privileged; the privilege drop (setgroups, setresgid,
 *           setresuid, then proof that root is gone); PR_SET_NO_NEW_PRIVS;
 *           then the role's loop.
 * CONTRACT  child_spawn_*() return the child's pid in the master.  The
 *           child never returns from them.
 * FAILURE   In the master: -1 with errno (socketpair or fork failed).  In
 *           the child: a set-up failure ends it with status 1 after a log
 *           record; the master's back-off handles a crash loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>

#include "common/util.h"
#include "common/log.h"
#include "common/safefs.h"
#include "common/sandbox.h"
#include "router/router.h"
#include "common/status.h"
#include "common/tlskey.h"
#include "cluster/cluster.h"
#include "config/config.h"
#include "worker/worker.h"
#include "master/master.h"
#include "master/master_int.h"

void
child_register_master_fd(struct master *m, int fd)
{
    struct master_fds *f = &m->master_fds;

    if (fd >= 0 && f->n < ARRAY_LEN(f->fd))
        f->fd[f->n++] = fd;
}

void
child_unregister_master_fd(struct master *m, int fd)
{
    struct master_fds *f = &m->master_fds;
    size_t             i;

    for (i = 0; i < f->n; i++) {
        if (f->fd[i] == fd) {
            f->fd[i] = f->fd[--f->n];
            return;
        }
    }
}

static int
child_kept(int fd, const int *keep, size_t nkeep)
{
    for (size_t i = 0; i < nkeep; i++)
        if (keep[i] == fd)
            return 1;
    return 0;
}

/* A sanitizer's report is written to stderr: a sanitizer build's workers
 * keep a terminal there, a production build's do not. */
#if defined(__SANITIZE_ADDRESS__)
#define CHILD_SANITIZED 1
#else
#define CHILD_SANITIZED 0
#endif

/* child_null_stdio - stdin and stdout on /dev/null, and stderr too when
 * it is a terminal the child has no use for. */
static void
child_null_stdio(int tty_stderr)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);

    if (null < 0)
        return;
    (void)dup2(null, STDIN_FILENO);
    (void)dup2(null, STDOUT_FILENO);
    if (!tty_stderr && isatty(STDERR_FILENO))
        (void)dup2(null, STDERR_FILENO);
    close(null);
}


/* First steps of every child: die with the master, plain signals, only
 * the fds it needs; tty_stderr: it may keep a terminal as stderr. */
static void
child_common(struct master *m, const int *keep, size_t nkeep,
    int tty_stderr)
{
    struct master_fds *f = &m->master_fds;
    struct sigaction   sa;
    sigset_t           none;
    int                sig;

    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != m->pid)
        _exit(1);                   /* the master is already gone */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaction(sig, &sa, NULL);
    /* A peer closing its socket must be an EPIPE, not a dead worker.  The
     * terminal's SIGINT/SIGHUP (Ctrl-C reaches the whole process group)
     * and a stray USR1/USR2 are the master's business: it stops or
     * reloads the children over their channels. */
    sa.sa_handler = SIG_IGN;
    (void)sigaction(SIGPIPE, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGHUP, &sa, NULL);
    (void)sigaction(SIGUSR1, &sa, NULL);
    (void)sigaction(SIGUSR2, &sa, NULL);
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    for (size_t i = 0; i < f->n; i++)
        if (!child_kept(f->fd[i], keep, nkeep))
            (void)close(f->fd[i]);
    f->n = 0;
    /* No child reads stdin or writes stdout; under -f they are root's
     * terminal, which a compromised worker could read (keystrokes) or
     * write (escape sequences).  stderr goes the same way when it is a
     * terminal, unless the child needs it there (tty_stderr); a journal
     * stream or a file stays: records go to the log process anyway, and
     * what else lands on stderr (a library's abort message) is kept. */
    child_null_stdio(tty_stderr);
}

/*
 * child_fork - fork with a SOCK_SEQPACKET channel: in the master, s->chan
 * is its end and the child's pid is returned; in the child, 0 is returned,
 * sv[1] is the child's end and sv[0] (the master's) is still to be closed
 * after child_common().  -1 (errno kept) when either call fails.
 */
static pid_t
child_fork(struct slot *s, int sv[2])
{
    pid_t pid;

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    pid = fork();
    if (pid < 0) {
        int e = errno;

        close(sv[0]);
        close(sv[1]);
        errno = e;
        return -1;
    }
    if (pid > 0) {
        close(sv[1]);
        s->chan = sv[0];
    }
    return pid;
}

/* The Maildirs a worker may deliver into: the directory of each maildir
 * route known at its start (routes.default and the db, routes.static
 * included), or its parent when the Maildir does not exist yet, so the
 * worker can create it.  A maildir route added later outside these is
 * deferred (EACCES) until a reload forks workers that know it.  Root opens
 * them without following a link, through directories only root or the
 * workers' user can change (safefs_open_dir_nolinks): a route whose path
 * fails that gets no rule (its deliveries defer), with a warning. */
struct child_fs {
    const char **rw;
    size_t       n, cap;
    int         *fd;
    size_t       nfd, capfd;
    uid_t        uid;               /* the workers' user and group */
    gid_t        gid;
};

static void
child_fs_add(struct child_fs *f, const char *path)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 16;
        f->rw = xrealloc(f->rw, f->cap * sizeof(*f->rw));
    }
    f->rw[f->n++] = xstrdup(path);
}

static void
child_fs_add_fd(struct child_fs *f, int fd)
{
    if (f->nfd == f->capfd) {
        f->capfd = f->capfd ? f->capfd * 2 : 16;
        f->fd = xrealloc(f->fd, f->capfd * sizeof(*f->fd));
    }
    f->fd[f->nfd++] = fd;
}

static void
child_fs_maildir(struct child_fs *f, const char *key, const char *value)
{
    char  dir[4096], shown[4200], err[4600];
    char *slash;
    int   fd;

    if (value == NULL || strncmp(value, "maildir:", 8) != 0)
        return;
    util_strlcpy(dir, value + 8, sizeof(dir));
    snprintf(shown, sizeof(shown), "maildir route %s '%s'", key, dir);
    fd = safefs_open_dir_nolinks(dir, f->uid, f->gid, shown, err,
        sizeof(err));
    if (fd < 0 && errno == ENOENT && (slash = strrchr(dir, '/')) != NULL) {
        if (slash == dir)
            slash[1] = '\0';
        else
            *slash = '\0';
        fd = safefs_open_dir_nolinks(dir, f->uid, f->gid, shown, err,
            sizeof(err));
    }
    if (fd >= 0)
        child_fs_add_fd(f, fd);
    else if (errno != ENOENT)       /* not there: nothing to allow */
        log_warn("sandbox: %s; no Landlock rule for it (its deliveries "
            "defer)", err);
}

static int
child_fs_route(const char *key, const char *value, void *arg)
{
    child_fs_maildir(arg, key, value);
    return 0;
}

/* Landlock, still as root: the rules are made from paths the workers'
 * user may not be able to traverse (/run/mtad 0750 root).  Returns 0 on,
 * 1 off (logged).  The seccomp filter follows the privilege drop. */
static int
child_sandbox_worker(const struct config *cfg, const struct privs *p,
    struct worker *w)
{
    /* read-only: the routes db (already open), what name resolution
     * (getaddrinfo, NSS modules) and certificate checks read lazily,
     * libraries OpenSSL or NSS may load later, and the time zone */
    static const char *ro_fixed[] = {
        "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf",
        "/etc/gai.conf", "/etc/host.conf", "/etc/ssl", "/lib", "/usr/lib",
        "/etc/localtime", "/usr/share/zoneinfo",
#if defined(__SANITIZE_ADDRESS__)
        "/proc/self",               /* the sanitizer reads its maps */
#endif
    };
    const char       *ro[ARRAY_LEN(ro_fixed) + 1];
    struct child_fs   f = { .uid = p->drop ? p->uid : geteuid(),
                            .gid = p->drop ? p->gid : getegid() };
    struct sandbox_fs fs;
    char              err[512], snapdir[PATH_MAX], snapfile[PATH_MAX];
    size_t            nro = 0;
    int               rc;

    child_fs_add(&f, cfg->spool_dir);
    child_fs_maildir(&f, "routes.default", cfg->routes_default);
    (void)router_each(worker_router(w), child_fs_route, &f);
    /* the routes snapshots (renamed in anew: the directory, not a file);
     * never the live table or its lock file (router.h, TRUST) */
    if (router_snapshot_path(cfg->routes_db, snapdir, sizeof(snapdir),
        snapfile, sizeof(snapfile)) != ROUTER_OK)
        fatalx("sandbox: routes.db %s: name too long", cfg->routes_db);
    ro[nro++] = snapdir;
    for (size_t i = 0; i < ARRAY_LEN(ro_fixed); i++)
        ro[nro++] = ro_fixed[i];
    fs = (struct sandbox_fs){ f.rw, f.n, ro, nro, f.fd, f.nfd, 0 };
    fs.bind_port0 = cfg->negress_sources > 0;   /* egress: bind, port 0 */
    rc = sandbox_landlock(&fs, err, sizeof(err));
    if (rc < 0)
        fatalx("sandbox: %s", err);
    if (rc > 0)
        log_warn("sandbox: %s", err);
    else
        log_debug("sandbox: Landlock on, %zu writable directories",
            f.n + f.nfd);
    for (size_t i = 0; i < f.n; i++)
        free((void *)f.rw[i]);
    free(f.rw);
    for (size_t i = 0; i < f.nfd; i++)
        (void)close(f.fd[i]);
    free(f.fd);
    return rc;
}

pid_t
child_spawn_worker(struct master *m, struct slot *s, struct generation *g)
{
    struct status_page *st = m->status;
    struct worker_args a;
    struct worker     *w;
    char               ident[32], err[256];
    int                ll = 1;
    pid_t              pid;
    int                sv[2];

    if ((pid = child_fork(s, sv)) != 0)
        return pid;                 /* the master, or -1 */
    child_common(m, g->lfds, g->nlisten, CHILD_SANITIZED);
    (void)close(sv[0]);
    snprintf(ident, sizeof(ident), "worker %u", s->shard);
    proctitle_set(&m->title, "mtad: worker", "mtad: worker %u (generation %u)",
        s->shard, g->id);
    log_open(ident, m->log_send, g->cfg->log_level);
    log_set_format(g->cfg->log_format);
    log_set_dropped_counter(&st->w[s->sidx].log_dropped);
    memset(&a, 0, sizeof(a));
    a.cfg = g->cfg;
    a.shard = s->shard;
    a.nshards = (unsigned)g->cfg->workers;
    a.slot = s->sidx;
    a.generation = g->id;
    a.chan_fd = sv[1];
    a.listen_fds = g->lfds;
    a.nlisten = g->nlisten;
    a.status = st;
    a.tickets = m->tickets;
    a.shape_rules = g->shape;
    a.shape_tab = m->shape_tab;
    a.gid = g->privs.drop ? g->privs.gid : getegid();
    a.admin_gid = g->privs.has_admin ? g->privs.admin_gid : a.gid;
    w = worker_init(&a);            /* still privileged: LMDB, spool */
    if (w == NULL)
        _exit(1);                   /* worker_init logged why */
    if (g->cfg->sandbox)
        ll = child_sandbox_worker(g->cfg, &g->privs, w);
    privs_drop(&g->privs);
    if (g->cfg->sandbox) {
        if (sandbox_seccomp(SANDBOX_WORKER, err, sizeof(err)) < 0)
            fatalx("sandbox: %s", err);
        if (s->shard == 0)
            log_info("sandbox: seccomp filter on; Landlock %s",
                ll == 0 ? "on" : "off");
    }
    exit(worker_run(w));
}

pid_t
child_spawn_logd(struct master *m, struct slot *s)
{
    /* logd writes only to the fd it is given; it reads the time zone */
    static const char *ro[] = { "/etc/localtime", "/usr/share/zoneinfo" };
    static const struct sandbox_fs logd_fs = { NULL, 0, ro, ARRAY_LEN(ro),
        NULL, 0, 0 };
    const struct privs *p = &m->cur->privs;
    int   sandbox = m->cur->cfg->sandbox;
    int   keep[3] = { m->log_recv, m->log_own_recv, m->log_file };
    char  err[256];
    pid_t pid;
    int   sv[2];

    if ((pid = child_fork(s, sv)) != 0)
        return pid;                 /* the master, or -1 */
    /* the terminal only when the log goes there (log.file "-") */
    child_common(m, keep, ARRAY_LEN(keep), m->log_file == STDERR_FILENO);
    (void)close(sv[0]);
    if (m->tickets != NULL)
        tlskey_forget(m->tickets);      /* no TLS here: no ticket keys */
    log_open("logd", -1, LOGL_INFO);    /* its own troubles: stderr */
    if (sandbox && sandbox_landlock(&logd_fs, err, sizeof(err)) < 0)
        fatalx("logd: sandbox: %s", err);   /* > 0: no Landlock, go on */
    privs_drop(p);
    proctitle_set(&m->title, "mtad: logd", "mtad: log process"); /* dropped */
    if (sandbox && sandbox_seccomp(SANDBOX_LOGD, err, sizeof(err)) < 0)
        fatalx("logd: sandbox: %s", err);
    logd_main(m->log_recv, m->log_own_recv, sv[1], m->log_file,
        m->cur->cfg->log_flush_interval_ms, m->pid);
}

/* child_spawn_cluster - the sync agent (cluster/cluster.h): no channel
 * (its state is its page, stop is SIGTERM), the node's log socket, the
 * privileges of the workers. */
pid_t
child_spawn_cluster(struct master *m, const struct cluster_args *a)
{
    pid_t pid = fork();

    if (pid != 0)
        return pid;                 /* the master, or -1 */
    child_common(m, NULL, 0, CHILD_SANITIZED);
    if (m->tickets != NULL)
        tlskey_forget(m->tickets);      /* no TLS here: no ticket keys */
    log_open("cluster", m->log_send, m->cur->cfg->log_level);
    log_set_format(m->cur->cfg->log_format);
    privs_drop(&m->cur->privs);
    proctitle_set(&m->title, "mtad: cluster", "mtad: cluster sync agent");
    cluster_agent_main(a);
}

int
privs_resolve(const struct config *cfg, struct privs *p, char *err,
    size_t errsz)
{
    struct passwd *pw;
    struct group  *gr;
    int            n = 32;

    memset(p, 0, sizeof(*p));
    if (cfg->admin_group != NULL) {
        errno = 0;
        gr = getgrnam(cfg->admin_group);
        if (gr == NULL) {
            snprintf(err, errsz, "server.admin_group: no such group '%s'%s%s",
                cfg->admin_group, errno ? ": " : "",
                errno ? strerror(errno) : "");
            return -1;
        }
        p->has_admin = 1;
        p->admin_gid = gr->gr_gid;
    }
    if (geteuid() != 0)
        return 0;                   /* run as we are (systemd User=) */
    errno = 0;
    pw = getpwnam(cfg->user);
    if (pw == NULL) {
        snprintf(err, errsz, "server.user: no such user '%s'%s%s", cfg->user,
            errno ? ": " : "", errno ? strerror(errno) : "");
        return -1;
    }
    p->uid = pw->pw_uid;
    errno = 0;
    gr = getgrnam(cfg->group);
    if (gr == NULL) {
        snprintf(err, errsz, "server.group: no such group '%s'%s%s",
            cfg->group, errno ? ": " : "", errno ? strerror(errno) : "");
        return -1;
    }
    p->gid = gr->gr_gid;
    if (p->uid == 0) {
        snprintf(err, errsz, "server.user: '%s' is root; workers must run "
            "as an unprivileged user", cfg->user);
        return -1;
    }
    /* The supplementary groups are looked up here, in the master, so the
     * children do no NSS look-ups after fork. */
    p->groups = xcalloc((size_t)n, sizeof(gid_t));
    if (getgrouplist(cfg->user, p->gid, p->groups, &n) < 0) {
        p->groups = xrealloc(p->groups, (size_t)n * sizeof(gid_t));
        if (getgrouplist(cfg->user, p->gid, p->groups, &n) < 0)
            n = 0;
    }
    if (n == 0) {
        p->groups[0] = p->gid;
        n = 1;
    }
    p->ngroups = n;
    p->drop = 1;
    /* The workers parse what the internet sends: they must not be able to
     * pass the control socket's check. */
    for (int i = 0; p->has_admin && i < n; i++) {
        if (p->groups[i] == p->admin_gid) {
            snprintf(err, errsz, "server.admin_group: '%s' must not be a "
                "group of server.user '%s' (the workers)", cfg->admin_group,
                cfg->user);
            privs_free(p);
            return -1;
        }
    }
    return 0;
}

void
privs_free(struct privs *p)
{
    free(p->groups);
    memset(p, 0, sizeof(*p));
}

/* Called in a child.  Root is given up for good or the child dies. */
void
privs_drop(const struct privs *p)
{
    uid_t ru, eu, su;
    gid_t rg, eg, sg;

    if (p->drop) {
        if (setgroups((size_t)p->ngroups, p->groups) < 0)
            fatal("setgroups");     /* fatal */
        if (setresgid(p->gid, p->gid, p->gid) < 0)
            fatal("setresgid %u", (unsigned)p->gid);
        if (setresuid(p->uid, p->uid, p->uid) < 0)
            fatal("setresuid %u", (unsigned)p->uid);
        if (setuid(0) == 0 || seteuid(0) == 0)
            fatalx("privilege drop failed: root can be regained");
        if (getresuid(&ru, &eu, &su) < 0 || ru == 0 || eu == 0 || su == 0)
            fatalx("privilege drop failed: a uid is still 0");
        if (p->gid != 0 && (getresgid(&rg, &eg, &sg) < 0 ||
            rg == 0 || eg == 0 || sg == 0))
            fatalx("privilege drop failed: a gid is still 0");
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        fatal("prctl(PR_SET_NO_NEW_PRIVS)");
}
