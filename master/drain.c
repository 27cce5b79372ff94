/*
 * drain.c - "mtactl drain": take this node out of service without losing
 * or stranding mail.
 *
 * PURPOSE   Stop accepting, deliver what is queued, then stop: the way to
 *           retire one node behind a load balancer or an MX set.
 * CONTRACT  master_request_drain() sends "drain" to every worker (they
 *           close their listeners, answer 421 4.3.2 to connections already
 *           in the backlog, keep their sessions and deliver every queued
 *           message now) and closes the master's own copies of the
 *           listening sockets, so the port refuses new connections and a
 *           balancer's health check sees the node down.  Replacement
 *           workers forked while draining get no listener.  Every tick
 *           master_drain_tick() counts <spool>/queue and the sessions;
 *           when both are zero, or at the deadline (timeout_ms, 0 = none),
 *           it calls master_request_stop(): the usual graceful stop.  What
 *           is left at a deadline stays in the spool and is delivered at
 *           the next start.  A drain cannot be cancelled; reload is refused
 *           while draining.
 * FAILURE   Logs its decisions; a queue it cannot count is treated as
 *           not empty (so only the deadline ends such a drain).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/safefs.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "master/master_int.h"

/* master_drain_queued - files in <spool>/queue; -1 when unreadable. */
long
master_drain_queued(const char *spool_dir)
{
    /* the workers' directory: a link planted there is not followed */
    return safefs_count_entries(spool_dir, "queue");
}


/* master_request_drain - 0, or -1 with the reason in err. */
int
master_request_drain(struct master *m, uint64_t timeout_ms, char *err,
    size_t errsz)
{
    struct generation *g = m->cur;
    int                n = 0;

    if (m->stopping) {
        snprintf(err, errsz, "mtad is stopping");
        return -1;
    }
    if (m->next != NULL) {
        snprintf(err, errsz, "a reload is in progress; try again");
        return -1;
    }
    if (m->draining)
        return 0;                   /* a second drain waits like the first */
    m->draining = 1;
    m->drain_deadline = timeout_ms ? util_now_ms() + timeout_ms : 0;
    for (size_t i = 0; i < MASTER_MAX_SLOTS; i++) {
        struct slot *s = &m->slots[i];

        if (s->role == ROLE_WORKER && s->state == SLOT_RUNNING) {
            master_send(s, CHAN_DRAIN);
            n++;
        }
    }
    /* The master's references go last: the workers' copies are closed by
     * themselves, and with these the port refuses connections. */
    listen_release(m, g->lfds, g->nlisten);
    g->nlisten = 0;
    log_notice("draining: %d workers told to stop accepting and deliver "
        "what is queued (%ld messages)%s", n,
        master_drain_queued(g->cfg->spool_dir),
        timeout_ms ? "" : "; no deadline");
    return 0;
}


void
master_drain_tick(struct master *m, uint64_t now)
{
    struct status_worker t;
    long                 q;

    if (!m->draining || m->stopping)
        return;
    master_totals(m, &t);
    q = master_drain_queued(m->cur->cfg->spool_dir);
    if (q == 0 && t.conns_cur == 0) {
        log_notice("drained: queue empty, no sessions; stopping");
        master_request_stop(m);
    } else if (m->drain_deadline != 0 && now >= m->drain_deadline) {
        log_warn("drain deadline: stopping with %ld messages queued and %"
            PRIu64 " sessions; the queue is delivered at the next start",
            q, t.conns_cur);
        master_request_stop(m);
    }
}
