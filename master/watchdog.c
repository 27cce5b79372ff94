/*
 * watchdog.c - systemd's watchdog (WatchdogSec=) and STATUS= for mtad.
 *
 * PURPOSE   systemd restarts a service whose main process stops sending
 *           WATCHDOG=1 within WatchdogSec.  A master that loops but whose
 *           workers or log process hang is no better than a hung master,
 *           so the master sends WATCHDOG=1 only while every worker of the
 *           serving generation and the log process answered a "ping" on
 *           their channel within WatchdogSec (a "pong" from their own
 *           event loop).
 * CONTRACT  Driven by the master's 1 s tick: each tick pings every
 *           running worker and the log process, then notifies when all
 *           are fresh; so WatchdogSec must be at least 3 s (the unit ships
 *           30 s).  A process just (re)started has WatchdogSec to answer;
 *           a worker slot waiting in its crash-loop back-off, or a log
 *           process that does not come back, stops the notifications once
 *           its last answer is older than WatchdogSec.  The first missed
 *           and the first regained state are logged.
 *           STATUS= (every tick, only when the text changed): generation,
 *           workers ready, sessions, queue files, load and the load
 *           policy in force.
 * FAILURE   Without WATCHDOG_USEC (or with a WATCHDOG_PID that is not
 *           ours) nothing is sent but STATUS=.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "master/master_int.h"
#include "master/ops.h"

void
watchdog_init(struct master *m)
{
    struct master_watchdog *wd = &m->wd;
    const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    char       *end;
    unsigned long long v;

    if (us == NULL)
        return;
    if (pid != NULL && strtol(pid, NULL, 10) != (long)getpid())
        return;                     /* meant for another process */
    v = strtoull(us, &end, 10);
    if (end != us && *end == '\0' && v > 0)
        wd->ms = v / 1000;
    unsetenv("WATCHDOG_USEC");      /* not for the children */
    unsetenv("WATCHDOG_PID");
}

void
watchdog_pong(struct master *m, unsigned sidx)
{
    struct master_watchdog *wd = &m->wd;

    if (sidx < MASTER_MAX_SLOTS && m->slots[sidx].pid == wd->pid[sidx])
        wd->answer[sidx] = util_now_ms();
}

void
watchdog_logd_pong(struct master *m)
{
    struct master_watchdog *wd = &m->wd;

    if (m->logd.pid == wd->logd_pid)
        wd->logd_answer = util_now_ms();
}

/* watchdog_fresh - 1 when every process answered within wd->ms; else 0
 * with *who naming the first that did not. */
static int
watchdog_fresh(struct master *m, uint64_t now, char *who, size_t whosz)
{
    struct master_watchdog *wd = &m->wd;

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->role != ROLE_WORKER || s->generation != m->cur->id ||
            (s->state != SLOT_RUNNING && s->state != SLOT_BACKOFF))
            continue;
        if (s->pid > 0 && s->pid != wd->pid[i]) {
            wd->pid[i] = s->pid;     /* a new process: its grace starts */
            wd->answer[i] = now;
        }
        if (now - wd->answer[i] > wd->ms) {
            snprintf(who, whosz, "worker %u (pid %d)", s->shard,
                (int)s->pid);
            return 0;
        }
    }
    if (m->logd.pid > 0 && m->logd.pid != wd->logd_pid) {
        wd->logd_pid = m->logd.pid;
        wd->logd_answer = now;
    }
    if (!m->stopping && now - wd->logd_answer > wd->ms) {
        snprintf(who, whosz, "the log process (pid %d)", (int)m->logd.pid);
        return 0;
    }
    return 1;
}

static void
watchdog_ping(struct master *m)
{
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->role == ROLE_WORKER && s->state == SLOT_RUNNING &&
            s->chan >= 0)
            (void)chan_send(s->chan, CHAN_PING, NULL, 0, -1);
    }
    if (m->logd.state == SLOT_RUNNING && m->logd.chan >= 0)
        (void)chan_send(m->logd.chan, CHAN_PING, NULL, 0, -1);
}

/* watchdog_status_text - STATUS=: what an operator sees in systemctl. */
static void
watchdog_status_text(struct master *m, char *out, size_t outsz)
{
    struct status_worker t;
    uint32_t load = __atomic_load_n(&m->status->load_x100, __ATOMIC_RELAXED);
    uint32_t thr = __atomic_load_n(&m->status->throttle, __ATOMIC_RELAXED);
    unsigned ready = 0;

    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++)
        ready += m->slots[i].role == ROLE_WORKER &&
            m->slots[i].generation == m->cur->id &&
            m->slots[i].state == SLOT_RUNNING && m->slots[i].ready;
    master_totals(m, &t);
    snprintf(out, outsz, "%s: generation %u, %u/%d workers ready, %" PRIu64
        " sessions, %" PRIu64 " received, load %u.%02u%s%s",
        m->stopping ? "stopping" : m->next != NULL ? "reloading" : "serving",
        m->cur->id, ready, m->cur->cfg->workers, t.conns_cur, t.msgs_in,
        load / 100, load % 100,
        (thr & STATUS_THROTTLE_HOLD) ? ", holding deliveries (load)" : "",
        (thr & STATUS_THROTTLE_REFUSE) ? ", refusing connections (load)" :
        "");
}

void
watchdog_tick(struct master *m, uint64_t now)
{
    struct master_watchdog *wd = &m->wd;
    char                    who[96], text[sizeof(wd->status)];

    watchdog_status_text(m, text, sizeof(text));
    if (strcmp(text, wd->status) != 0) {
        memcpy(wd->status, text, sizeof(text));
        notify_send(m, "STATUS=%s", text);
    }
    if (wd->ms == 0)
        return;
    if (watchdog_fresh(m, now, who, sizeof(who))) {
        notify_send(m, "WATCHDOG=1");
        if (wd->failing)
            log_notice("watchdog: every process answers again; notifying "
                "systemd");
        wd->failing = 0;
    } else if (!wd->failing) {
        log_err("watchdog: %s has not answered for more than %" PRIu64
            "ms; no WATCHDOG=1 to systemd until it does", who, wd->ms);
        wd->failing = 1;
    }
    watchdog_ping(m);
}
