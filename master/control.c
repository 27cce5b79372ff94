/*
 * control.c - the server side of the control socket (protocol: common/ctl.h).
 *
 * PURPOSE   Accept mtactl connections, read one request line, answer with
 *           "ok" or "error: ..." and a body, then close.  "reload" is
 *           answered later, when the master knows the outcome.
 * CONTRACT  At most MASTER_MAX_CLIENTS clients at once; a client that sends
 *           no full line within 5 s is dropped.  The socket is mode 0660,
 *           group server.admin_group (0600 without one); every connection
 *           is checked with SO_PEERCRED/SO_PEERGROUPS before it is read.
 * FAILURE   A client that misbehaves is closed; the master carries on.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "common/buf.h"
#include "common/util.h"
#include "common/ctl.h"
#include "common/safefs.h"
#include "common/log.h"
#include "common/status.h"
#include "config/config.h"
#include "spool/spool.h"
#include "master/ctl_req.h"
#include "shape/shape.h"
#include "master/master_int.h"
#include "master/ops.h"

#define CTL_CLIENT_TIMEOUT_MS 5000

/*
 * ctl_listen - bind the control socket.  Its directory must be one only
 * root (or our uid) can change; what is at the path is looked at without
 * following a link, and only a socket that no longer answers is removed;
 * the socket is born with its final mode (umask around bind, no window)
 * and its group is set with fchownat(AT_SYMLINK_NOFOLLOW).  Mode 0660
 * with group server.admin_group, else 0600: the workers' group has no
 * way in.
 */
int
ctl_listen(const char *path, const struct privs *p, char *err, size_t errsz)
{
    struct sockaddr_un sun;
    struct stat        st;
    const char        *name;
    char               what[512];
    mode_t             old;
    int                fd = -1, dfd, probe, rc;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sun.sun_path)) {
        snprintf(err, errsz, "server.control_socket: path too long: %s", path);
        return -1;
    }
    memcpy(sun.sun_path, path, strlen(path));
    if ((dfd = safefs_open_parent(path, &name, what, sizeof(what))) < 0 ||
        safefs_dir_trusted(dfd, path, what, sizeof(what)) < 0) {
        snprintf(err, errsz, "server.control_socket: %s", what);
        goto fail;
    }
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errsz, "server.control_socket: %s exists and is "
                "not a socket; left alone", path);
            goto fail;
        }
        /* A socket file that answers belongs to a running mtad; one that
         * does not is left over from a crash and is replaced. */
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&sun,
            sizeof(sun)) == 0) {
            close(probe);
            snprintf(err, errsz, "server.control_socket: %s answers: is "
                "another mtad running?", path);
            goto fail;
        }
        if (probe >= 0)
            close(probe);
        if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT) {
            snprintf(err, errsz, "server.control_socket: %s: %s", path,
                strerror(errno));
            goto fail;
        }
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    old = umask(p->has_admin ? 0117 : 0177);
    rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sun, sizeof(sun));
    (void)umask(old);
    if (rc < 0 ||
        (p->has_admin && fchownat(dfd, name, p->drop ? 0 : (uid_t)-1,
        p->admin_gid, AT_SYMLINK_NOFOLLOW) < 0) ||
        listen(fd, 64) < 0) {
        snprintf(err, errsz, "server.control_socket: %s: %s", path,
            strerror(errno));
        goto fail;
    }
    close(dfd);
    return fd;
fail:
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    return -1;
}

/*
 * ctl_peer_allowed - who may give commands: root; members of
 * server.admin_group (primary or supplementary group, from SO_PEERCRED and
 * SO_PEERGROUPS, taken by the kernel at connect time); and, when the
 * master is not root, its own uid.  Never one of the master's children:
 * they parse untrusted input (and under seccomp cannot fork a helper).
 * 0 when allowed; else -1 with the peer described in who.
 */
static int
ctl_peer_allowed(struct master *m, int fd, char *who, size_t whosz)
{
    const struct privs *p = &m->cur->privs;
    struct ucred        cr;
    socklen_t           len = sizeof(cr);
    gid_t               groups[256];
    int                 i, n;

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
        snprintf(who, whosz, "unknown peer (%s)", strerror(errno));
        return -1;
    }
    snprintf(who, whosz, "uid=%u gid=%u pid=%d", (unsigned)cr.uid,
        (unsigned)cr.gid, (int)cr.pid);
    for (i = 0; i < MASTER_MAX_SLOTS; i++)
        if (m->slots[i].pid > 0 && m->slots[i].pid == cr.pid)
            return -1;
    if (m->logd.pid > 0 && m->logd.pid == cr.pid)
        return -1;
    if (cr.uid == 0 || (cr.uid == geteuid() && !p->drop))
        return 0;
    if (!p->has_admin)
        return -1;
    if (cr.gid == p->admin_gid)
        return 0;
    len = sizeof(groups);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
        return -1;                  /* more than 256 groups: not admitted */
    n = (int)(len / sizeof(gid_t));
    for (i = 0; i < n; i++)
        if (groups[i] == p->admin_gid)
            return 0;
    return -1;
}

void
ctl_reply_fd(int fd, const char *text)
{
    struct timeval tv = { 2, 0 };
    int            fl = fcntl(fd, F_GETFL);

    /* Replies are small and rare: a bounded blocking write is simplest. */
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    (void)util_write_all(fd, text, strlen(text));
    close(fd);
}

static void
ctl_client_close(struct master *m, struct ctl_client *c)
{
    if (c->fd < 0)
        return;
    master_unwatch(m, c->fd);
    child_unregister_master_fd(m, c->fd);
    close(c->fd);
    c->fd = -1;
    c->waiting_reload = 0;
}

static void
ctl_client_reply(struct master *m, struct ctl_client *c, const char *text)
{
    master_unwatch(m, c->fd);
    child_unregister_master_fd(m, c->fd);
    ctl_reply_fd(c->fd, text);
    c->fd = -1;
    c->waiting_reload = 0;
}

static ev_io_fn ctl_client_event;

/* The control socket is readable: accept every waiting client. */
void
ctl_accept_event(struct ev_loop *loop, int lfd, unsigned events, void *arg)
{
    struct master     *m = arg;
    struct ctl_client *c;
    size_t             i;
    int                fd;

    (void)loop; (void)lfd; (void)events;
    while ((fd = accept4(m->ctlfd, NULL, NULL,
        SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        for (i = 0; i < MASTER_MAX_CLIENTS && m->clients[i].fd >= 0; i++)
            ;
        if (i == MASTER_MAX_CLIENTS) {
            ctl_reply_fd(fd, "error: busy, try again\n");
            continue;
        }
        c = &m->clients[i];
        memset(c, 0, sizeof(*c));
        /* Refused after its request is read: closing with the request
         * unread would reset the connection before the answer is seen. */
        c->refused = ctl_peer_allowed(m, fd, c->who, sizeof(c->who)) < 0;
        c->fd = fd;
        c->deadline = util_now_ms() + CTL_CLIENT_TIMEOUT_MS;
        child_register_master_fd(m, fd);
        master_watch(m, fd, EV_READ, ctl_client_event);
    }
}

void
ctl_expire(struct master *m, uint64_t now)
{
    for (size_t i = 0; i < MASTER_MAX_CLIENTS; i++) {
        struct ctl_client *c = &m->clients[i];

        if (c->fd >= 0 && !c->waiting_reload && now >= c->deadline)
            ctl_client_close(m, c);
    }
}

/* ---- the status report ------------------------------------------------ */

/* Files in <spool>/queue, counted here on request: never on a hot path. */
static long
ctl_queue_size(const char *spool_dir)
{
    /* the workers' directory: a link planted there is not followed */
    return safefs_count_entries(spool_dir, "queue");
}

static const char *
ctl_state_name(const struct slot *s)
{
    switch (s->state) {
    case SLOT_RUNNING:
        return s->ready || s->role == ROLE_LOGD ? "running" : "starting";
    case SLOT_STOPPING: return "stopping";
    case SLOT_BACKOFF:  return "restart-wait";
    default:            return "free";
    }
}

void
ctl_status_report(struct master *m, char **out)
{
    struct buf           t;
    struct status_worker tot;
    struct status_page  *st = m->status;
    uint64_t             now = util_now_ms(), wall = util_wall_ms();
    double               in_ps, out_ps;
    long                 q = ctl_queue_size(m->cur->cfg->spool_dir);
    unsigned             load = __atomic_load_n(&st->load_x100,
                             __ATOMIC_RELAXED);

    buf_init(&t);
    master_totals(m, &tot);
    master_rates(m, &in_ps, &out_ps);
    buf_printf(&t, "ok\n");
    buf_printf(&t, "version: %s\n", MTAD_VERSION);
    buf_printf(&t, "pid: %d\n", (int)getpid());
    buf_printf(&t, "uptime: %" PRIu64 "s\n", (now - m->started_ms) / 1000);
    buf_printf(&t, "generation: %u\n", m->cur->id);
    buf_printf(&t, "workers: %d\n", m->cur->cfg->workers);
    buf_printf(&t, "load: %u.%02u\n", load / 100, load % 100);
    buf_printf(&t, "logd: pid=%d state=%s\n", (int)m->logd.pid,
        ctl_state_name(&m->logd));
    buf_printf(&t, "reload: %s\n", m->next != NULL ? "in progress" : "idle");
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        const struct slot          *s = &m->slots[i];
        const struct status_worker *w = &st->w[i];

        if (s->role != ROLE_WORKER)
            continue;
#define LD(f) __atomic_load_n(&w->f, __ATOMIC_RELAXED)
        buf_printf(&t, "worker slot=%zu pid=%d gen=%u shard=%u state=%s "
            "uptime=%" PRIu64 "s conns=%" PRIu64 " conns_total=%" PRIu64
            " msgs_in=%" PRIu64 " msgs_out=%" PRIu64 " deferred=%" PRIu64
            " bounced=%" PRIu64 " bytes_in=%" PRIu64 " errors=%" PRIu64
            " log_dropped=%" PRIu64 "\n", i, (int)s->pid, s->generation,
            s->shard, ctl_state_name(s),
            s->pid > 0 && wall > LD(started_ms) ?
                (wall - LD(started_ms)) / 1000 : 0,
            LD(conns_cur), LD(conns_total), LD(msgs_in), LD(msgs_out),
            LD(msgs_deferred), LD(msgs_bounced), LD(bytes_in), LD(errors),
            LD(log_dropped));
#undef LD
    }
    buf_printf(&t, "total: conns=%" PRIu64 " conns_total=%" PRIu64
        " msgs_in=%" PRIu64 " msgs_out=%" PRIu64 " deferred=%" PRIu64
        " bounced=%" PRIu64 " bytes_in=%" PRIu64 " errors=%" PRIu64 "\n",
        tot.conns_cur, tot.conns_total, tot.msgs_in, tot.msgs_out,
        tot.msgs_deferred, tot.msgs_bounced, tot.bytes_in, tot.errors);
    buf_printf(&t, "rate: msgs_in=%.2f/s msgs_out=%.2f/s (last %us)\n",
        in_ps, out_ps, MASTER_RATE_WINDOW);
    if (q >= 0)
        buf_printf(&t, "queue: %ld\n", q);
    else
        buf_printf(&t, "queue: unknown (%s/queue: %s)\n",
            m->cur->cfg->spool_dir, strerror(errno));
    buf_printf(&t, "log dropped: %" PRIu64 "\n", tot.log_dropped +
        log_dropped());
    buf_printf(&t, "proxy: refused=%" PRIu64 " bad_header=%" PRIu64 "\n",
        tot.proxy_refused, tot.proxy_bad);
    if (m->draining)
        buf_printf(&t, "draining: yes\n");
    *out = t.data;
}

/* ---- requests --------------------------------------------------------- */

static void
ctl_check(struct master *m, struct ctl_client *c)
{
    char           err[8192] = "";
    struct config *cfg = config_load(m->config_path, err, sizeof(err));
    char          *text;
    size_t         n = strlen(err) + strlen(m->config_path) + 64;

    text = xmalloc(n);
    if (cfg != NULL) {
        struct shape_rules *rules = NULL;

        /* the shaping rules too, as a reload loads them */
        if (shape_rules_load(m->config_path, &rules, err, sizeof(err)) < 0) {
            config_free(cfg);
            cfg = NULL;
            n = strlen(err) + strlen(m->config_path) + 64;
            free(text);
            text = xmalloc(n);
        }
        shape_rules_free(rules);
    }
    if (cfg != NULL)
        snprintf(text, n, "ok\n%s: ok\n", m->config_path);
    else
        snprintf(text, n, "error: %s: configuration invalid\n%s%s",
            m->config_path, err, err[0] && err[strlen(err) - 1] != '\n' ?
            "\n" : "");
    config_free(cfg);
    ctl_client_reply(m, c, text);
    free(text);
}

static void
ctl_kick(struct master *m, struct ctl_client *c, const char *arg)
{
    char text[128];
    int  n;

    n = master_kick(m, arg);
    snprintf(text, sizeof(text), "ok\nkick %s: sent to %d workers\n", arg, n);
    ctl_client_reply(m, c, text);
}

/* "routes": mtactl wrote the table; the workers get a new snapshot before
 * the answer, so a lookup that follows it sees the change. */
static void
ctl_routes(struct master *m, struct ctl_client *c)
{
    char err[MASTER_ERR_MAX / 2], text[sizeof(err) + 64];
    int  n;

    if ((n = master_routes_changed(m, err, sizeof(err))) < 0) {
        log_err("%s", err);
        snprintf(text, sizeof(text), "error: %s\n", err);
    } else if (n > 0)
        snprintf(text, sizeof(text), "error: routes published, but %d "
            "worker%s could not be told\n", n, n == 1 ? "" : "s");
    else
        snprintf(text, sizeof(text), "ok\nroutes published\n");
    ctl_client_reply(m, c, text);
}

/* "drain" or "drain <timeout ms>": see drain.c. */
static void
ctl_drain(struct master *m, struct ctl_client *c, uint64_t ms)
{
    char err[200], text[300];

    if (master_request_drain(m, ms, err, sizeof(err)) < 0) {
        snprintf(text, sizeof(text), "error: drain: %s\n", err);
        ctl_client_reply(m, c, text);
        return;
    }
    snprintf(text, sizeof(text), "ok\ndraining: %ld messages queued\n",
        master_drain_queued(m->cur->cfg->spool_dir));
    ctl_client_reply(m, c, text);
}

/* ctl_handle - one request line (ctl_req.c says which). */
static void
ctl_handle(struct master *m, struct ctl_client *c, char *line)
{
    struct ctl_req r;
    char          *report;
    char           text[128];
    pid_t          pid;

    ctl_req_parse(line, m->sandbox_test, &r);  /* cuts line at CR/LF */
    if (c->refused) {
        log_warn("control: refused %s: not root%s; request '%.64s'", c->who,
            m->cur->privs.has_admin ? " nor in server.admin_group" : "",
            line);
        ctl_client_reply(m, c, "error: permission denied\n");
        return;
    }
    audit_request(c->fd, line);     /* who asked: SO_PEERCRED (audit.c) */
    switch (r.kind) {
    case CTL_REQ_STATUS_JSON:
        status_json_report(m, &report);
        ctl_client_reply(m, c, report);
        free(report);
        break;
    case CTL_REQ_AUDIT:
        ctl_client_reply(m, c, "ok\nlogged\n");  /* audit_request did */
        break;
    case CTL_REQ_STATUS:
        ctl_status_report(m, &report);
        ctl_client_reply(m, c, report);
        free(report);
        break;
    case CTL_REQ_RELOAD:
        if (m->stopping) {
            ctl_client_reply(m, c, "error: mtad is stopping\n");
            break;
        }
        c->waiting_reload = m->next != NULL ? 2 : 1;
        master_request_reload(m);   /* may answer c at once */
        break;
    case CTL_REQ_STOP:
        ctl_client_reply(m, c, "ok\nstopping\n");
        master_request_stop(m);
        break;
    case CTL_REQ_CHECK:
        ctl_check(m, c);
        break;
    case CTL_REQ_DRAIN:
        ctl_drain(m, c, r.drain_ms);
        break;
    case CTL_REQ_TLS:
        tlsagg_ctl(m, r.arg, &report);
        ctl_client_reply(m, c, report);
        free(report);
        break;
    case CTL_REQ_BAN:
        ctl_ban(m, r.arg, &report);
        ctl_client_reply(m, c, report);
        free(report);
        break;
    case CTL_REQ_HOSTS:
        ctl_hosts(m, &report);
        ctl_client_reply(m, c, report);
        free(report);
        break;
    case CTL_REQ_SHAPING:
        ctl_shaping(m, r.arg, &report);
        ctl_client_reply(m, c, report);
        free(report);
        break;
    case CTL_REQ_QUOTA:
        ctl_quota(m, r.arg, &report);
        ctl_client_reply(m, c, report);
        free(report);
        break;
    case CTL_REQ_CLUSTER:
        master_cluster_ctl(m, r.arg, &report);
        ctl_client_reply(m, c, report);
        free(report);
        break;
    case CTL_REQ_GREYLIST:
        ctl_greylist(m, r.arg, &report);
        ctl_client_reply(m, c, report);
        free(report);
        break;
    case CTL_REQ_KICK:
        ctl_kick(m, c, r.arg);
        break;
    case CTL_REQ_ROUTES:
        ctl_routes(m, c);
        break;
    case CTL_REQ_QUEUE_STREAM:
        /* mtactl queue: descriptors of the workers' streams (qstream.c) */
        master_unwatch(m, c->fd);
        child_unregister_master_fd(m, c->fd);
        master_qstream(m, c->fd);
        c->fd = -1;
        break;
    case CTL_REQ_SANDBOX_TEST:
        pid = master_sandbox_test(m);
        if (pid > 0)
            snprintf(text, sizeof(text), "ok\nsandbox-test sent to worker "
                "pid %d\n", (int)pid);
        else
            snprintf(text, sizeof(text), "error: no running worker\n");
        ctl_client_reply(m, c, text);
        break;
    default:
        ctl_client_reply(m, c, r.error);
        break;
    }
}

/* A control client's fd is readable (its slot is found by the fd). */
static void
ctl_client_event(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct master     *m = arg;
    struct ctl_client *c = NULL;
    ssize_t            r;
    char               junk[64];

    (void)loop; (void)events;
    for (size_t i = 0; i < MASTER_MAX_CLIENTS && c == NULL; i++)
        if (m->clients[i].fd == fd)
            c = &m->clients[i];
    if (c == NULL)
        return;
    if (c->waiting_reload) {
        /* Nothing more is expected; EOF means the client gave up. */
        r = recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            ctl_client_close(m, c);
        return;
    }
    r = recv(c->fd, c->req + c->len, sizeof(c->req) - 1 - c->len,
        MSG_DONTWAIT);
    if (r < 0) {
        if (errno != EAGAIN && errno != EINTR)
            ctl_client_close(m, c);
        return;
    }
    c->len += (size_t)r;
    c->req[c->len] = '\0';
    if (memchr(c->req, '\n', c->len) != NULL || (r == 0 && c->len > 0))
        ctl_handle(m, c, c->req);
    else if (r == 0)
        ctl_client_close(m, c);
    else if (c->len == sizeof(c->req) - 1)
        ctl_client_reply(m, c, "error: request too long\n");
}
