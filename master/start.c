/*
 * start.c - the master's start-up: detach, first generation, status page,
 *           ticket keys, control socket, pid file, log file and socket,
 *           signals, metrics listener, then the log process and workers.
 *
 * CONTRACT  master_start() returns EX_OK or the sysexits code of the step
 *           that failed, having printed "mtad: <what>: <why>" on stderr.
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
#include "spool/spool.h"
#include "master/master.h"
#include "shape/shape.h"
#include "master/master_int.h"
#include "master/ops.h"

#define LOG_SOCKBUF   (4 << 20)

/* Creates the parent directory of path when it is missing (/run/mtad). */
void
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

/* master_write_runfile - path (the pid file, the submission hint)
 * opened without following a link and checked to be a plain file of ours
 * (O_TRUNC through a symlink truncated any file), in a directory only
 * root can change; its content replaced by text.  replace: written
 * beside it and renamed over it, so a reader sees the old text or the
 * new, never a part (rename follows no link either).  key names it in
 * err. */
static int
master_write_runfile(const char *path, const char *key, const char *text,
    int replace, char *err, size_t errsz)
{
    char        what[MASTER_ERR_MAX / 2], tmp[NAME_MAX + 1];
    const char *name, *file;
    int         dfd, fd = -1, rc = -1;

    master_mkparent(path);
    if ((dfd = safefs_open_parent(path, &name, what, sizeof(what))) < 0) {
        snprintf(err, errsz, "%s: %s", key, what);
        return -1;
    }
    file = name;
    if (safefs_dir_trusted(dfd, path, what, sizeof(what)) < 0)
        goto fail;
    if (replace) {
        if ((size_t)snprintf(tmp, sizeof(tmp), ".%s.tmp", name) >=
            sizeof(tmp)) {
            snprintf(what, sizeof(what), "%s: name too long", path);
            goto fail;
        }
        (void)unlinkat(dfd, tmp, 0);
        file = tmp;
    }
    if ((fd = safefs_open_file(dfd, file, O_WRONLY | O_CREAT |
        (replace ? O_EXCL : 0), 0644, path, what, sizeof(what))) < 0)
        goto fail;
    if (ftruncate(fd, 0) < 0 || fchmod(fd, 0644) < 0 ||
        util_write_all(fd, text, strlen(text)) < 0 ||
        (replace && renameat(dfd, tmp, dfd, name) < 0)) {
        snprintf(what, sizeof(what), "%s: %s", path, strerror(errno));
        if (replace)
            (void)unlinkat(dfd, tmp, 0);
        goto fail;
    }
    rc = 0;
    goto out;
fail:
    snprintf(err, errsz, "%s: %s", key, what);
out:
    if (fd >= 0 && close(fd) < 0 && rc == 0) {
        snprintf(err, errsz, "%s: %s: %s", key, path, strerror(errno));
        rc = -1;
    }
    close(dfd);
    return rc;
}


static int
master_write_pidfile(const char *path, char *err, size_t errsz)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
    return master_write_runfile(path, "server.pid_file", buf, 0, err,
        errsz);
}


/* master_submit_path - CONFIG_SUBMIT_NAME next to the control socket. */
static void
master_submit_path(const char *ctl, char *path, size_t pathsz)
{
    const char *slash = strrchr(ctl, '/');
    int         dn = slash == NULL ? 0 : (int)(slash - ctl + 1);

    snprintf(path, pathsz, "%.*s%s", dn, ctl, CONFIG_SUBMIT_NAME);
}


/*
 * master_publish_submit - the submission hint for mtad-sendmail (see
 * config.h): written at start and by each reload, removed at stop.  Not
 * fatal: without it only users who cannot read relay.yaml miss it, and
 * they are told.  A config without such a listener removes it.
 */
void
master_publish_submit(const struct config *cfg)
{
    const struct config_listen *l = config_submit_listen(cfg);
    char path[4096], text[1024], err[MASTER_ERR_MAX];

    master_submit_path(cfg->control_socket, path, sizeof(path));
    if (l == NULL) {
        (void)unlink(path);
        return;
    }
    snprintf(text, sizeof(text), "# mtad's submission listener, for "
        "mtad-sendmail\nlisten %s\nhostname %s\nmax_message_size %llu\n",
        l->spec, cfg->hostname, (unsigned long long)cfg->max_message_size);
    if (master_write_runfile(path, "submission hint", text, 1, err,
        sizeof(err)) < 0)
        log_warn("%s (mtad-sendmail for users who cannot read %s)", err,
            cfg->path);
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
    child_register_master_fd(m, m->sigfd);
    return 0;
}

/* master_log_pair - a non-blocking datagram socketpair for records, its
 * receiving end (sv[1]) with SO_PASSCRED.  0, or -1 (nothing left open). */
static int
master_log_pair(int sv[2])
{
    int sz = LOG_SOCKBUF, on = 1;

    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    /* FORCE passes wmem_max/rmem_max when we are root; else best effort. */
    if (setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) < 0)
        (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    if (setsockopt(sv[1], SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) < 0)
        (void)setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    (void)fcntl(sv[0], F_SETFL, O_NONBLOCK);
    (void)fcntl(sv[1], F_SETFL, O_NONBLOCK);
    /* the log process learns each datagram's sender from the kernel
     * (logd.c SENDERS): set before anyone can send */
    if (setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) < 0) {
        (void)close(sv[0]);
        (void)close(sv[1]);
        return -1;
    }
    return 0;
}

/* The log socketpairs: the workers share one non-blocking end; the master
 * writes on a pair of its own (no child but the log process keeps it),
 * so a worker that fills the shared queue cannot make the master's
 * records (its "admin:" audit lines) drop.  The master keeps the
 * receiving ends, so a restarted log process finds them. */
static int
master_log_socket(struct master *m)
{
    int sv[2], own[2];

    if (master_log_pair(sv) < 0)
        return -1;
    if (master_log_pair(own) < 0) {
        (void)close(sv[0]);
        (void)close(sv[1]);
        return -1;
    }
    m->log_send = sv[0];
    m->log_recv = sv[1];
    m->log_own_send = own[0];
    m->log_own_recv = own[1];
    child_register_master_fd(m, m->log_recv);
    child_register_master_fd(m, m->log_own_send);
    child_register_master_fd(m, m->log_own_recv);
    return 0;
}

void
master_cleanup(struct master *m)
{
    if (m->pid_path != NULL)
        (void)unlink(m->pid_path);
    if (m->ctl_path != NULL && m->ctlfd >= 0) {
        char submit[4096];

        master_submit_path(m->ctl_path, submit, sizeof(submit));
        (void)unlink(submit);
        (void)unlink(m->ctl_path);
    }
}

/* Start-up until the first generation is forked. */
int
master_start(struct master *m, struct config *cfg, int foreground)
{
    char err[MASTER_ERR_MAX] = "";
    int  ok_fd = -1, code;

    /* whatever the caller left open (a file of root's, a terminal's fd)
     * would pass to every child, the workers included: nothing above 2
     * is ours yet */
    (void)close_range(3, ~0U, 0);
    if (!foreground)
        ok_fd = master_daemonize();
    m->started_ms = util_now_ms();
    m->pid = getpid();
    proctitle_set(&m->title, "mtad: master", "mtad: master -c %s", m->config_path);
    watchdog_init(m);               /* before notify_init() */
    notify_init(m);
    /* what "mtad -t" checks, refused before anything is made */
    if ((code = master_check(cfg, err, sizeof(err))) != EX_OK) {
        fprintf(stderr, "mtad: %s\n", err);
        config_free(cfg);
        return code;
    }
    m->cur = master_gen_prepare(m, cfg, &code, err, sizeof(err));
    if (m->cur == NULL) {
        fprintf(stderr, "mtad: %s\n", err);
        config_free(cfg);
        return code;
    }
    if (cfg->sandbox && sandbox_seccomp(SANDBOX_MASTER, err,
        sizeof(err)) < 0) {
        fprintf(stderr, "mtad: server.sandbox: %s\n", err);
        return EX_OSERR;
    }
    m->sandbox_test = getenv("MTAD_SANDBOX_TEST") != NULL &&
        strcmp(getenv("MTAD_SANDBOX_TEST"), "1") == 0;
    m->status = status_create();
    /* the shaping counters of the node, kept across reloads (shape.h) */
    m->shape_tab = shape_table_create();
    if (m->shape_tab == NULL)
        log_warn("shaping: no shared table (%s): limits hold per worker "
            "only", strerror(errno));
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
    master_mkparent(cfg->control_socket);
    m->ctlfd = ctl_listen(cfg->control_socket, &m->cur->privs, err,
        sizeof(err));
    if (m->ctlfd < 0) {
        fprintf(stderr, "mtad: %s\n", err);
        return EX_UNAVAILABLE;
    }
    m->ctl_path = xstrdup(cfg->control_socket);
    child_register_master_fd(m, m->ctlfd);
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
        child_register_master_fd(m, m->log_file);
    m->log_path = xstrdup(cfg->log_file);
    m->loop = ev_new();
    if (m->loop == NULL || master_setup_signals(m) < 0 ||
        master_log_socket(m) < 0) {
        fprintf(stderr, "mtad: start-up: %s\n", strerror(errno));
        master_cleanup(m);
        return EX_OSERR;
    }
    child_register_master_fd(m, ev_fd(m->loop));
    if (metrics_apply(m, cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "mtad: %s\n", err);
        master_cleanup(m);
        return EX_UNAVAILABLE;
    }
    if (master_cluster_start(m, err, sizeof(err)) < 0) {
        fprintf(stderr, "mtad: %s\n", err);
        master_cleanup(m);
        return EX_CONFIG;
    }
    /* Detach before the children fork: they must not hold the caller's
     * stdout/stderr (a pipe would never see EOF). */
    if (ok_fd >= 0)
        master_detach_stdio(ok_fd);
    master_spawn_logd(m);
    log_open("master", m->log_own_send, cfg->log_level);
    log_notice("starting: generation %u, %d workers, %zu listeners%s",
        m->cur->id, cfg->workers, cfg->nlisten,
        m->cur->privs.drop ? "" : " (not root: no privilege drop)");
    master_publish_submit(cfg);
    tlsagg_load(m);                 /* the day's TLS-RPT counts so far */
    master_cluster_spawn(m);        /* before the workers need grants */
    (void)master_start_generation(m, m->cur);
    return EX_OK;
}
