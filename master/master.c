/*
 * master.c - the master process: its loop, the children's channels,
 * signals, the 1 s tick and shutdown.  Start-up is in start.c, the
 * children in supervise.c, generations and reload in reload.c.
 *
 * PURPOSE   Run one loop over a signalfd, the control socket, each
 *           child's channel and a 1 s tick.  The master never parses SMTP
 *           and never drops root (it must bind new addresses on reload).
 * CONTRACT  Reload (SIGHUP, "mtactl reload"): see reload.c.  The listening
 *           sockets stay open in the master throughout, so no connection
 *           is refused.  An invalid config is logged and the old
 *           generation keeps serving.
 *           SIGTERM/SIGINT/"mtactl stop": "stop" to every worker, SIGKILL
 *           after shutdown_timeout, then the log process (it writes what it
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
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/chan.h"
#include "common/util.h"
#include "common/log.h"
#include "common/safefs.h"
#include "common/sandbox.h"
#include "common/status.h"
#include "common/tlskey.h"
#include "config/config.h"
#include "router/router.h"
#include "spool/spool.h"
#include "tlspol/tlspol.h"
#include "master/master.h"
#include "shape/shape.h"
#include "master/master_int.h"
#include "master/ops.h"

void
master_watch(struct master *m, int fd, unsigned events, ev_io_fn *fn)
{
    if (ev_watch(m->loop, fd, events, fn, m) < 0)
        log_err("watch fd %d: %s", fd, strerror(errno));
}

void
master_unwatch(struct master *m, int fd)
{
    ev_unwatch(m->loop, fd);
}

void
master_close_chan(struct master *m, struct slot *s)
{
    if (s->chan < 0)
        return;
    master_unwatch(m, s->chan);
    child_unregister_master_fd(m, s->chan);
    close(s->chan);
    s->chan = -1;
}

/* Logs each line of a multi-line error text. */
void
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

/* --- the children's channels (common/chan.h) -------------------------- */

/* What a worker's message handler gets: the master and the sender. */
struct master_from {
    struct master *m;
    struct slot   *s;
    unsigned       idx;
};


static void
master_chan_ready(const struct chan_msg *msg, void *arg)
{
    struct master_from *f = arg;

    (void)msg;
    f->s->ready = 1;
}


static void
master_chan_pong(const struct chan_msg *msg, void *arg)
{
    struct master_from *f = arg;

    (void)msg;
    watchdog_pong(f->m, f->idx);
    /* alive past its deadline (a message in DATA, a state write): ask
     * again later, never kill a worker that answers */
    f->s->pinged = 0;
    if (f->s->state == SLOT_STOPPING)
        f->s->stop_deadline = util_now_ms() + MASTER_PING_MS;
}


static void
master_chan_tlsrpt(const struct chan_msg *msg, void *arg)
{
    struct master_from *f = arg;

    tlsagg_add(f->m, f->s->shard, msg->data, msg->len);
}


static void
master_chan_auth(const struct chan_msg *msg, void *arg)
{
    struct master_from *f = arg;

    (void)msg;
    master_auth_connect(f->m, f->s, f->idx);
}


/* master_chan_bad - the 1st, 2nd, 4th, 8th... refused message of a slot
 * is logged: a worker sending nothing but bad messages must not make the
 * master write a line for each (the master's log is root's word). */
static void
master_chan_bad(const char *why, void *arg)
{
    struct master_from *f = arg;
    uint64_t            n = ++f->s->chan_bad;

    if ((n & (n - 1)) == 0)
        log_warn("worker %u: message on the channel dropped: %s (%llu so "
            "far)", f->s->shard, why, (unsigned long long)n);
}


static const struct chan_side master_worker_chan = {
    CHAN_MASTER,
    {
        [CHAN_READY] = master_chan_ready,
        [CHAN_PONG] = master_chan_pong,
        [CHAN_TLSRPT_ADD] = master_chan_tlsrpt,
        [CHAN_AUTH_CONNECT] = master_chan_auth,
    },
    master_chan_bad
};


/* A worker's channel is readable; its slot is found by the fd.  At most
 * MASTER_CHAN_BATCH messages per wakeup: the loop is level-triggered, so
 * the rest waits for the next turn, after the control socket, the other
 * channels and the timers had theirs; a worker flooding its channel
 * cannot hold the master. */
void
master_chan_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct master     *m = arg;
    struct master_from f = { m, NULL, 0 };
    char               buf[CHAN_MSG_MAX + 1];
    int                rc;

    (void)loop; (void)events;
    for (f.idx = 0; f.idx < MASTER_MAX_SLOTS; f.idx++)
        if (m->slots[f.idx].chan == fd &&
            m->slots[f.idx].role == ROLE_WORKER) {
            f.s = &m->slots[f.idx];
            break;
        }
    if (f.s == NULL)
        return;
    rc = chan_serve(fd, &master_worker_chan, MASTER_CHAN_BATCH, buf,
        sizeof(buf), &f);
    if (rc == CHAN_EOF || rc == CHAN_ESYS)
        master_close_chan(m, f.s);     /* exiting; SIGCHLD follows */
    master_check_ready(m);
}


static void
master_logd_pong(const struct chan_msg *msg, void *arg)
{
    (void)msg;
    watchdog_logd_pong(arg);
}


static void
master_logd_bad(const char *why, void *arg)
{
    (void)arg;
    log_warn("log process: message on the channel dropped: %s", why);
}


static const struct chan_side master_logd_chan = {
    CHAN_MASTER, { [CHAN_PONG] = master_logd_pong }, master_logd_bad
};


/* The log process's channel: "pong" for the watchdog, or EOF. */
void
master_logd_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct master *m = arg;
    char           buf[CHAN_MSG_MAX + 1];
    int            rc;

    (void)loop; (void)events;
    if (fd != m->logd.chan)
        return;
    rc = chan_serve(fd, &master_logd_chan, MASTER_CHAN_BATCH, buf,
        sizeof(buf), m);
    if (rc == CHAN_EOF || rc == CHAN_ESYS)
        master_close_chan(m, &m->logd);
}

static void
master_signals(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct master          *m = arg;
    struct signalfd_siginfo si;

    (void)loop; (void)fd; (void)events;
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
    tlsagg_tick(m, now);
    master_cluster_tick(m, now);
    master_shaping_tick(m, now);
    greylist_tick(m, now);
    quota_tick(m, now);
    metrics_expire(m, now);
    watchdog_tick(m, now);
}

/* The tick timer: counters ring, load, ticket keys, expiries, watchdog,
 * drain; re-armed every MASTER_TICK_MS. */
static void
master_tick_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct master *m = arg;
    uint64_t       now = util_now_ms();

    master_tick(m, now);
    master_drain_tick(m, now);
    ev_timer_start(loop, t, MASTER_TICK_MS);
}

/* The earliest slot or reload deadline, UINT64_MAX when none. */
static uint64_t
master_next_deadline(const struct master *m)
{
    uint64_t next = UINT64_MAX;

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
    return next;
}

static void
master_deadline_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop; (void)t;
    master_deadlines(arg, util_now_ms());
}

/* Before each sleep: end the loop when a shutdown is complete, else arm
 * the deadline timer for what the turn's events changed (a stop, a
 * back-off, a reload). */
static void
master_before_sleep(struct ev_loop *loop, void *arg)
{
    struct master *m = arg;
    uint64_t       next, now;

    if (m->stopping && master_shutdown_step(m)) {
        ev_stop(loop);
        return;
    }
    next = master_next_deadline(m);
    if (next == UINT64_MAX) {
        ev_timer_stop(loop, &m->deadline);
        return;
    }
    now = util_now_ms();
    ev_timer_start(loop, &m->deadline, next <= now ? 0 : next - now);
}

/* Watches the signalfd and the control socket and runs the loop until the
 * shutdown is complete. */
static void
master_loop(struct master *m)
{
    master_watch(m, m->sigfd, EV_READ, master_signals);
    master_watch(m, m->ctlfd, EV_READ, ctl_accept_event);
    ev_timer_init(&m->tick, master_tick_timer, m);
    ev_timer_init(&m->deadline, master_deadline_timer, m);
    ev_timer_start(m->loop, &m->tick, 0);
    if (ev_before_sleep(m->loop, master_before_sleep, m) < 0 ||
        ev_run(m->loop) < 0)
        fatal("master loop");       /* fatal */
}

int
master_run(const struct master_opts *o)
{
    struct master *m = xcalloc(1, sizeof(*m));   /* lives until exit */
    struct config *cfg;
    char           err[MASTER_ERR_MAX] = "";
    int            rc;

    m->ctlfd = m->sigfd = -1;
    m->log_send = m->log_recv = m->log_file = -1;
    m->log_own_send = m->log_own_recv = -1;
    m->logd.chan = -1;
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++)
        master_slot_free(&m->slots[i]);
    for (size_t i = 0; i < MASTER_MAX_CLIENTS; i++)
        m->clients[i].fd = -1;
    m->config_path = o->config_path;
    m->title = o->title;
    m->notify.fd = -1;
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
    tlsagg_save(m);                 /* the workers are gone: their last */
    log_open("master", -1, m->cur->cfg->log_level);
    master_cleanup(m);
    return EX_OK;
}
