/*
 * supervise.c - the master's children: spawn, stop, reap, respawn.
 *
 * PURPOSE   Forks the workers of a generation into status-page slots and
 *           the log process, tells them to stop, reaps them and forks an
 *           unexpected exit again: at once, or after a doubling back-off
 *           (0.1 s .. 10 s) when it died within 1 s of its start.  Its
 *           deadlines (back-off restarts; past a stop timeout a "ping",
 *           and SIGKILL only without a "pong") are run by master.c's
 *           deadline timer; the counters of a worker
 *           that is gone are kept in the totals.
 * CONTRACT  Runs on the master's loop only.
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
#include "spool/spool.h"
#include "master/master.h"
#include "shape/shape.h"
#include "master/master_int.h"
#include "master/ops.h"

static void master_spawn(struct master *m, struct slot *s);

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

unsigned
master_free_slots(const struct master *m)
{
    unsigned n = 0;

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++)
        n += m->slots[i].state == SLOT_FREE;
    return n;
}

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
    shape_slot_clear(m->shape_tab, s->sidx); /* and its connections */
}

void
master_slot_free(struct slot *s)
{
    memset(s, 0, sizeof(*s));
    s->chan = -1;
}

void
master_spawn_logd(struct master *m)
{
    struct slot *s = &m->logd;
    pid_t        pid;

    s->role = ROLE_LOGD;
    pid = child_spawn_logd(m, s);
    if (pid < 0) {
        log_err("cannot start the log process: %s", strerror(errno));
        s->state = SLOT_BACKOFF;
        s->restart_at = util_now_ms() + MASTER_BACKOFF_MAX;
        return;
    }
    s->pid = pid;
    s->state = SLOT_RUNNING;
    s->started_ms = util_now_ms();
    child_register_master_fd(m, s->chan);
    master_watch(m, s->chan, EV_READ, master_logd_io);
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
    shape_slot_clear(m->shape_tab, s->sidx);
    w->generation = g->id;
    w->started_ms = util_wall_ms();
    pid = child_spawn_worker(m, s, g);
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
    child_register_master_fd(m, s->chan);
    master_watch(m, s->chan, EV_READ, master_chan_io);
    log_debug("worker %u (pid %d, generation %u) started", s->shard,
        (int)pid, g->id);
}

int
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
master_send(struct slot *s, enum chan_cmd cmd)
{
    if (s->chan < 0 || chan_send(s->chan, cmd, NULL, 0, -1) < 0) {
        if (s->pid > 0)
            (void)kill(s->pid, SIGTERM);    /* the fallback to the channel */
    }
}

/* Graceful stop of one worker: it gives back what it holds at its own
 * deadline and exits; past timeout_ms the master pings it and kills it
 * only when it does not answer (master_deadlines). */
void
master_stop_worker(struct slot *s, uint64_t timeout_ms)
{
    if (s->state == SLOT_BACKOFF) {
        master_slot_free(s);
        return;
    }
    if (s->state != SLOT_RUNNING)
        return;
    master_send(s, CHAN_STOP);
    s->state = SLOT_STOPPING;
    s->pinged = 0;
    s->stop_deadline = util_now_ms() + timeout_ms;
}

int
master_kick(struct master *m, const char *arg)
{
    /* "*": every message, an empty payload (common/chan.h) */
    size_t len = strcmp(arg, "*") == 0 ? 0 : strlen(arg);
    int    n = 0;

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->state == SLOT_RUNNING && s->generation == m->cur->id &&
            s->chan >= 0 && chan_send(s->chan, CHAN_KICK, arg, len, -1) == 0)
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
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->state == SLOT_RUNNING && s->ready &&
            s->generation == m->cur->id && s->chan >= 0 &&
            chan_send(s->chan, CHAN_SANDBOX_TEST, NULL, 0, -1) == 0)
            return s->pid;
    }
    return -1;
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
        master_handover(m, gen);
        return;
    }
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

void
master_reap(struct master *m)
{
    pid_t pid;
    int   st, i;

    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        if (pid == m->logd.pid) {
            master_logd_exited(m, st);
            continue;
        }
        if (tlsagg_reaped(m, pid, st))
            continue;
        if (master_cluster_reaped(m, pid, st))
            continue;
        i = master_find_pid(m, pid);
        if (i >= 0)
            master_worker_exited(m, &m->slots[i], st);
    }
}

void
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
            master_send(s, CHAN_PING);
            s->pinged = 1;
            s->stop_deadline = now + MASTER_PING_MS;
        } else if (s->state == SLOT_STOPPING && now >= s->stop_deadline &&
            s->pid > 0) {
            log_warn("worker %u (pid %d, generation %u) is past its stop "
                "deadline and did not answer the master for %u ms (hung or "
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
int
master_shutdown_step(struct master *m)
{
    if (master_workers_alive(m))
        return 0;
    if (!master_cluster_stop(m))
        return 0;                   /* the sync agent goes before logd */
    if (m->logd.state == SLOT_RUNNING) {
        log_notice("workers stopped; mtad exits");
        m->logd.state = SLOT_STOPPING;
        m->logd.stop_deadline = util_now_ms() + LOGD_STOP_TIMEOUT;
        if (m->logd.chan < 0 ||
            chan_send(m->logd.chan, CHAN_STOP, NULL, 0, -1) < 0)
            (void)kill(m->logd.pid, SIGTERM);
        return 0;
    }
    return m->logd.pid <= 0;
}
