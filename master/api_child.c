/*
 * api_child.c - the master's side of the HTTP API process (api/api.h):
 * the api.listen socket, the process's start, stop, restart with
 * back-off, its channel (CHAN_API) and what the master answers on it.
 *
 * PURPOSE   The master binds api.listen itself (as it binds metrics and
 *           the SMTP listeners) and hands the fd to the API process it
 *           forks (child_spawn_api, child.c); the process drops to
 *           server.user at once.  A reload starts a new API process with
 *           the new configuration (so the tokens file is read again) and
 *           tells the old one to stop; an unchanged api.listen keeps its
 *           socket, so no connection attempt is refused across a reload.
 *           An API process that exits unasked is forked again, after a
 *           doubling back-off (0.1 s .. 10 s) when it lived under 1 s.
 * CONTRACT  Runs on the master's loop only.  api.listen unset: no socket
 *           and no process.
 * FAILURE   A bind failure at the start is fatal (the caller exits with
 *           EX_UNAVAILABLE); at a reload it is logged and the old socket
 *           and process stay.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "common/chan.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "master/master.h"
#include "master/master_int.h"
#include "master/ops.h"

#define API_CHILD_STOP_MS 15000u        /* then SIGKILL */
#define API_CHILD_PING_MS 10000u        /* a ping; no pong by the next: kill */

static void master_api_io(struct ev_loop *loop, int fd, unsigned ev,
    void *arg);

void
api_child_init(struct master *m)
{
    master_slot_free(&m->api.cur);
    master_slot_free(&m->api.old);
    m->api.lfd = -1;
    m->api.log_send = m->api.log_recv = -1;
}

/* Whether line[0..n) is a record the API process with pid wrote (text:
 * "<ts> mtad[PID]: api: ", JSON: {"ts":...,"proc":"api","pid":PID,...),
 * with no control byte; the log process writes the master's relayed
 * lines unchecked, so the API must not pass as another process. */
static int
api_child_own_line(const char *line, size_t n, pid_t pid)
{
    char        want[64];
    const char *sp, *at;
    size_t      k;

    for (size_t i = 0; i < n; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
            return 0;
    if (n > 6 && memcmp(line, "{\"ts\":", 6) == 0) {
        k = (size_t)snprintf(want, sizeof(want),
            "\"proc\":\"api\",\"pid\":%d,", (int)pid);
        at = memmem(line, n, "\"proc\":", 7);
        return at != NULL && (size_t)(line + n - at) >= k &&
            memcmp(at, want, k) == 0;
    }
    if ((sp = memchr(line, ' ', n < 40 ? n : 40)) == NULL)
        return 0;
    k = (size_t)snprintf(want, sizeof(want), " mtad[%d]: api: ", (int)pid);
    return (size_t)(line + n - sp) >= k && memcmp(sp, want, k) == 0;
}

static void
api_child_log_io(struct ev_loop *loop, int fd, unsigned ev, void *arg)
{
    struct master *m = arg;
    char           rec[LOG_RECORD_MAX + 2];

    (void)loop;
    (void)ev;
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(fd, rec, sizeof(rec), MSG_DONTWAIT);
        size_t  len;

        if (n <= 0)
            return;
        len = (size_t)n;
        while (len > 0 && rec[len - 1] == '\n')
            len--;
        if ((m->api.cur.pid > 0 &&
            api_child_own_line(rec, len, m->api.cur.pid)) ||
            (m->api.old.pid > 0 &&
            api_child_own_line(rec, len, m->api.old.pid))) {
            rec[len++] = '\n';
            (void)send(m->log_own_send, rec, len, MSG_DONTWAIT);
        } else {
            log_warn("API process: refused a log record not its own");
        }
    }
}

static int
api_child_log_pair(struct master *m)
{
    int sv[2];

    if (m->api.log_send >= 0)
        return 0;
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
        sv) < 0)
        return -1;
    m->api.log_send = sv[0];
    m->api.log_recv = sv[1];
    child_register_master_fd(m, sv[0]);
    child_register_master_fd(m, sv[1]);
    master_watch(m, sv[1], EV_READ, api_child_log_io);
    return 0;
}

static void
api_child_close_listener(struct master *m)
{
    if (m->api.lfd >= 0) {
        child_unregister_master_fd(m, m->api.lfd);
        close(m->api.lfd);
    }
    m->api.lfd = -1;
    free(m->api.spec);
    m->api.spec = NULL;
}

int
api_child_bind(struct master *m, const struct config *cfg, char *err,
    size_t errsz)
{
    int fd, on = 1;

    if (cfg->api_listen == NULL) {
        api_child_close_listener(m);
        return 0;
    }
    if (m->api.spec != NULL && strcmp(m->api.spec, cfg->api_listen) == 0)
        return 0;                   /* unchanged across a reload */
    fd = socket(cfg->api_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK |
        SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on,
        sizeof(on)) < 0 || bind(fd, (const struct sockaddr *)&cfg->api_addr,
        cfg->api_addrlen) < 0 || listen(fd, 128) < 0) {
        snprintf(err, errsz, "api.listen: %s: %s", cfg->api_listen,
            strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    api_child_close_listener(m);
    m->api.lfd = fd;
    m->api.spec = xstrdup(cfg->api_listen);
    child_register_master_fd(m, fd);
    return 0;
}

static void
api_child_spawn(struct master *m)
{
    struct slot *s = &m->api.cur;
    pid_t        pid;

    master_slot_free(s);
    s->role = ROLE_API;
    if (m->api.lfd < 0 || m->stopping)
        return;
    if (api_child_log_pair(m) < 0)
        pid = -1;
    else
        pid = child_spawn_api(m, s, m->cur, m->api.lfd);
    if (pid < 0) {
        log_err("cannot start the API process: %s", strerror(errno));
        s->state = SLOT_BACKOFF;
        s->restart_at = util_now_ms() + MASTER_BACKOFF_MAX;
        return;
    }
    s->pid = pid;
    s->state = SLOT_RUNNING;
    s->started_ms = util_now_ms();
    m->api.ping_at = s->started_ms + API_CHILD_PING_MS;
    child_register_master_fd(m, s->chan);
    master_watch(m, s->chan, EV_READ, master_api_io);
    log_info("API process (pid %d) serving http%s://%s", (int)pid,
        m->cur->cfg->api_tls_cert_file != NULL ? "s" : "", m->api.spec);
}

void
api_child_start(struct master *m)
{
    if (m->api.lfd >= 0)
        api_child_spawn(m);
}

static void
api_child_stop(struct master *m, struct slot *s)
{
    if (s->state == SLOT_BACKOFF) {
        master_slot_free(s);
        return;
    }
    if (s->state != SLOT_RUNNING)
        return;
    if (s->chan < 0 || chan_send(s->chan, CHAN_STOP, NULL, 0, -1) < 0)
        (void)kill(s->pid, SIGTERM);
    s->state = SLOT_STOPPING;
    s->stop_deadline = util_now_ms() + API_CHILD_STOP_MS;
    (void)m;
}

void
api_child_reload(struct master *m)
{
    const struct config *cfg = m->cur->cfg;
    char                 err[512];

    if (api_child_bind(m, cfg, err, sizeof(err)) < 0) {
        log_err("reload: %s; the API keeps its old socket and process", err);
        return;
    }
    if (m->api.old.state == SLOT_STOPPING && m->api.old.pid > 0)
        (void)kill(m->api.old.pid, SIGKILL);    /* a third generation */
    if (m->api.cur.state == SLOT_RUNNING ||
        m->api.cur.state == SLOT_STOPPING) {
        api_child_stop(m, &m->api.cur);
        m->api.old = m->api.cur;
    }
    master_slot_free(&m->api.cur);
    if (m->api.lfd >= 0)
        api_child_spawn(m);
}

void
api_child_stop_all(struct master *m)
{
    api_child_stop(m, &m->api.cur);
    api_child_stop(m, &m->api.old);
}

int
api_child_alive(const struct master *m)
{
    return m->api.cur.pid > 0 || m->api.old.pid > 0;
}

int
api_child_reaped(struct master *m, pid_t pid, int st)
{
    struct slot *s;
    uint64_t     now = util_now_ms();

    if (pid == m->api.old.pid && pid > 0) {
        master_close_chan(m, &m->api.old);
        master_slot_free(&m->api.old);
        return 1;
    }
    if (pid != m->api.cur.pid || pid <= 0)
        return 0;
    s = &m->api.cur;
    master_close_chan(m, s);
    s->pid = 0;
    if (m->stopping || s->state == SLOT_STOPPING) {
        master_slot_free(s);
        return 1;
    }
    if (now - s->started_ms < MASTER_QUICK_EXIT_MS) {
        s->backoff_ms = s->backoff_ms == 0 ? MASTER_BACKOFF_MIN :
            s->backoff_ms * 2;
        if (s->backoff_ms > MASTER_BACKOFF_MAX)
            s->backoff_ms = MASTER_BACKOFF_MAX;
    } else {
        s->backoff_ms = 0;
    }
    log_warn("API process (pid %d) %s %d; restarting in %" PRIu64 "ms",
        (int)pid, WIFSIGNALED(st) ? "exited on signal" :
        "exited with status", WIFSIGNALED(st) ? WTERMSIG(st) :
        WEXITSTATUS(st), s->backoff_ms);
    s->state = SLOT_BACKOFF;
    s->restart_at = now + s->backoff_ms;
    return 1;
}

uint64_t
api_child_next_deadline(const struct master *m)
{
    uint64_t next = UINT64_MAX;

    if (m->api.cur.state == SLOT_BACKOFF)
        next = m->api.cur.restart_at;
    if (m->api.cur.state == SLOT_STOPPING && m->api.cur.stop_deadline < next)
        next = m->api.cur.stop_deadline;
    if (m->api.old.state == SLOT_STOPPING && m->api.old.stop_deadline < next)
        next = m->api.old.stop_deadline;
    if (m->api.cur.state == SLOT_RUNNING && m->api.ping_at < next)
        next = m->api.ping_at;
    return next;
}

static void
api_child_deadline_one(struct slot *s, uint64_t now)
{
    if (s->state == SLOT_STOPPING && now >= s->stop_deadline && s->pid > 0) {
        log_warn("API process (pid %d) did not stop within %us; killing it",
            (int)s->pid, API_CHILD_STOP_MS / 1000);
        (void)kill(s->pid, SIGKILL);
        s->stop_deadline = UINT64_MAX;
    }
}

void
api_child_deadlines(struct master *m, uint64_t now)
{
    if (m->api.cur.state == SLOT_BACKOFF && now >= m->api.cur.restart_at &&
        !m->stopping) {
        uint64_t backoff = m->api.cur.backoff_ms;

        api_child_spawn(m);
        m->api.cur.backoff_ms = backoff;
    }
    api_child_deadline_one(&m->api.cur, now);
    api_child_deadline_one(&m->api.old, now);
    if (m->api.cur.state == SLOT_RUNNING && now >= m->api.ping_at &&
        m->api.cur.pid > 0) {
        struct slot *s = &m->api.cur;

        /* a hung API process is killed and forked again; the relay goes
         * on (it is no reason for systemd's watchdog to restart mtad) */
        if (s->pinged) {
            log_warn("API process (pid %d) did not answer a ping for %us; "
                "killing it", (int)s->pid, API_CHILD_PING_MS / 1000);
            (void)kill(s->pid, SIGKILL);
            s->pinged = 0;
        } else if (s->chan >= 0 &&
            chan_send(s->chan, CHAN_PING, NULL, 0, -1) == 0) {
            s->pinged = 1;
        }
        m->api.ping_at = now + API_CHILD_PING_MS;
    }
}

/* ---- the channel ------------------------------------------------------- */

static struct slot *
api_child_slot(struct master *m, int fd)
{
    if (fd == m->api.cur.chan)
        return &m->api.cur;
    if (fd == m->api.old.chan)
        return &m->api.old;
    return NULL;
}

struct api_chan_ctx {
    struct master *m;
    struct slot   *s;
};

static void
api_on_pong(const struct chan_msg *msg, void *arg)
{
    struct api_chan_ctx *x = arg;

    (void)msg;
    x->s->pinged = 0;
}

/* GET /v1/status: the report of "mtactl status --json" */
static void
api_on_status(const struct chan_msg *msg, void *arg)
{
    struct api_chan_ctx *x = arg;
    char                *out = NULL, *pkt;
    size_t               n;
    uint64_t             id;

    memcpy(&id, msg->data, sizeof(id));
    status_json_report(x->m, &out);
    n = out != NULL ? strlen(out) : 0;
    if (n + sizeof(id) > CHAN_PAYLOAD_MAX) {
        free(out);
        out = xstrdup("{\"error\":\"status report too large\"}");
        n = strlen(out);
    }
    pkt = xmalloc(sizeof(id) + n);
    memcpy(pkt, &id, sizeof(id));
    memcpy(pkt + sizeof(id), out, n);
    (void)chan_send(x->s->chan, CHAN_API_STATUS_REPLY, pkt, sizeof(id) + n,
        -1);
    free(pkt);
    free(out);
}

/* CHAN_API_RUN: run mtactl for a verb (api_run.c) */
static void
api_on_run(const struct chan_msg *msg, void *arg)
{
    struct api_chan_ctx *x = arg;

    master_api_run(x->m, x->s->chan, msg);
}

static void
api_on_bad(const char *why, void *arg)
{
    struct api_chan_ctx *x = arg;

    x->s->chan_bad++;
    log_warn("API process (pid %d): bad channel message: %s", (int)x->s->pid,
        why);
}

/* The master's handlers for the API's channel. */
static const struct chan_side master_api_chan = {
    .me = CHAN_MASTER,
    .on = {
        [CHAN_PONG] = api_on_pong,
        [CHAN_API_STATUS] = api_on_status,
        [CHAN_API_RUN] = api_on_run,
    },
    .bad = api_on_bad,
};

static void
master_api_io(struct ev_loop *loop, int fd, unsigned ev, void *arg)
{
    struct api_chan_ctx x = { arg, NULL };
    char                buf[CHAN_MSG_MAX + 1];
    int                 rc;

    (void)loop;
    (void)ev;
    if ((x.s = api_child_slot(x.m, fd)) == NULL)
        return;
    rc = chan_serve(fd, &master_api_chan, MASTER_CHAN_BATCH, buf,
        sizeof(buf), &x);
    if (rc == CHAN_EOF || rc == CHAN_ESYS)
        master_close_chan(x.m, x.s);
}
