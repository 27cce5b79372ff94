/*
 * worker.c - a worker process: the event loop, the listeners, the channel
 * to the master, admission control; the sessions live in smtpd/ and the
 * outbound side in delivery/
 *
 * PURPOSE   worker_init() (still privileged) opens the loop, the spool, the
 *           router, the delivery schedule and the STARTTLS context (the
 *           key file may be root-only); worker_run() watches the
 *           shared listeners with EPOLLEXCLUSIVE, accepts in batches, and
 *           runs the loop until "stop" has drained everything or the master
 *           is gone.
 * ADMISSION limits.max_connections and limits.max_connections_per_ip are
 *           daemon-wide: every worker of every generation counts in the
 *           shared status page (status_conn_acquire(), lock-free), so they
 *           hold however unevenly the kernel spreads connections over the
 *           workers.  Over a limit the client gets 421 4.7.0 and the
 *           connection is closed.
 *           While the master sets STATUS_THROTTLE_REFUSE (its load
 *           policy, limits.load.refuse) every new connection gets 421
 *           4.3.2 and is closed; STATUS_THROTTLE_HOLD (queue_only) is
 *           read by deliver.c.  Once a second the tick publishes the
 *           delivery gauges (queue by state) in the worker's slot.
 * STOP      "stop" (reload, daemon stop): unwatch the listeners first, so
 *           the kernel wakes the other generation's workers for new
 *           connections, then accept until EAGAIN what is already queued
 *           (a wakeup this worker took must not leave a connection waiting
 *           for the next arrival), then close them.  Sessions go on (see
 *           smtpd.h STOP); at the stop deadline, shutdown_timeout
 *           less min(1 s, a quarter of it), every session not in DATA is
 *           told 421 and closed, and deliver_giveback() closes every
 *           outbound session without marking its recipients (one whose
 *           final dot is out gets a second for its reply), so the next
 *           generation delivers those messages.  The worker exits when it
 *           has no session and deliver_drain() reports nothing running;
 *           a session still in DATA (bounded by its data timeout) or a
 *           state write that fails keeps it a little longer, answering
 *           the master's "ping" with "pong" so it is not killed.
 * LOGGING   Records are staged (log_set_batching) and handed to the log
 *           process in one datagram: by the last before-sleep hook once
 *           WORKER_LOG_BATCH are staged, else by a timer at most
 *           WORKER_LOG_DELAY_MS after the turn that staged them.  Each
 *           hand-over wakes the log process (a context switch on both
 *           sides); with one message per connection a turn stages about
 *           one record, so flushing every turn cost a wakeup per record
 *           (a large share of mtad's CPU in a profile).  Records
 *           keep the time they were formatted at; the stage also goes out
 *           when full and at exit.
 * FAILURE   worker_init() logs and returns NULL; worker_run() returns the
 *           process exit status.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "common/chan.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/safefs.h"
#include "common/status.h"
#include "common/tlskey.h"
#include "common/util.h"
#include "config/config.h"
#include "router/router.h"
#include "spool/spool.h"
#include "delivery/delivery.h"
#include "tlspol/tlspol.h"
#include "common/net.h"
#include "common/sandbox.h"
#include "grey/grey.h"
#include "events/events.h"
#include "worker/worker.h"
#include "smtpd/smtpd.h"
#include "dkim/dkim.h"
#include "worker/worker_int.h"

#define WORKER_ACCEPT_BUDGET  64    /* accepts per wakeup, for fairness */
#define WORKER_DRAIN_MAX      4096  /* accepts per listener when stopping */
#define WORKER_TICK_MS        1000
#define WORKER_STOP_MARGIN_MS 1000  /* stop deadline before the SIGKILL */
#define WORKER_LOG_DELAY_MS   10    /* staged records wait at most this */
#define WORKER_LOG_BATCH      32    /* ...or go at once when this many */
#define WORKER_CHAN_BATCH     64    /* channel messages per wakeup */


/* --- admission counts ------------------------------------------------ */


/* worker_ip_acquire - count one more session, daemon-wide and per address
 * (common/status.c), IPv6 clients per limits.ipv6_prefix network (one
 * client's /64 would otherwise be 2^64 "addresses"); STATUS_EFULL or
 * STATUS_EPERIP when over a limit.  A worker keeps its config for life, so
 * release groups the same way. */
static int
worker_ip_acquire(struct worker *w, const struct sockaddr *sa)
{
    struct sockaddr_storage g;

    return status_conn_acquire(w->admit, w->admit_slot,
        status_addr_group(sa, (unsigned)w->cfg->ipv6_prefix, &g),
        (uint32_t)w->cfg->max_connections,
        (uint32_t)w->cfg->max_connections_per_ip);
}


static void
worker_ip_release(struct worker *w, const struct sockaddr *sa)
{
    struct sockaddr_storage g;

    status_conn_release(w->admit, w->admit_slot,
        status_addr_group(sa, (unsigned)w->cfg->ipv6_prefix, &g));
}


/* --- listeners and admission ------------------------------------------ */

static void worker_on_accept(struct ev_loop *loop, int fd, unsigned events,
            void *arg);


/* worker_listen - watch (on) or unwatch (off) every open listener. */
static void
worker_listen(struct worker *w, int on)
{
    size_t i;

    if (w->listening == on)
        return;
    for (i = 0; i < w->nlisten; i++) {
        if (w->lfds[i] < 0)
            continue;
        if (on) {
            if (ev_watch(w->loop, w->lfds[i], EV_READ | EV_EXCLUSIVE,
                worker_on_accept, w) < 0)
                log_err("epoll_ctl listener %d: %s", w->lfds[i],
                    strerror(errno));
        } else {
            ev_unwatch(w->loop, w->lfds[i]);
        }
    }
    w->listening = on;
}


/* worker_port - the port of sa, for the client_port log field. */
static unsigned
worker_port(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)sa)->sin_port);
    if (sa->sa_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    return 0;
}


/* worker_refuse - one best-effort 421 on a fresh socket, then close. */
static void
worker_refuse(int fd, const char *text)
{
    (void)send(fd, text, strlen(text), MSG_DONTWAIT | MSG_NOSIGNAL);
    close(fd);
}


void
worker_admit(struct worker *w, int fd, struct sockaddr_storage *ss,
    socklen_t len, const struct config_listen *l)
{
    char text[400], who[INET6_ADDRSTRLEN + 16], ip[INET6_ADDRSTRLEN];
    const struct sockaddr *sa = (const struct sockaddr *)ss;
    int  rc;

    if (w->draining) {
        /* taken from the backlog while draining (see worker_drain) */
        util_sockaddr_str(sa, who, sizeof(who));
        snprintf(text, sizeof(text), "421 4.3.2 %s Service shutting down "
            "(draining)\r\n", w->cfg->hostname);
        log_info("refused %s: draining", who);
        worker_refuse(fd, text);
        return;
    }

    if (w->a.status != NULL && (__atomic_load_n(&w->a.status->throttle,
        __ATOMIC_RELAXED) & STATUS_THROTTLE_REFUSE) && !w->stopping) {
        /* limits.load.refuse: one relaxed load per connection */
        util_sockaddr_str(sa, who, sizeof(who));
        util_sockaddr_ip(sa, ip, sizeof(ip));
        snprintf(text, sizeof(text), "421 4.3.2 %s Error: system overloaded,"
            " try again later\r\n", w->cfg->hostname);
        STATUS_ADD(w->st->ops.rejects[STATUS_REJ_OVERLOAD], 1);
        log_ev(LOGL_INFO, "reject", LOG_KVS(LKV_S("client", ip),
            LKV_I("client_port", worker_port(sa)),
            LKV_S("reason", "overload"), LKV_S("dsn", "4.3.2")),
            "refused %s: system overloaded (limits.load.refuse)", who);
        worker_refuse(fd, text);
        return;
    }
    if (smtpd_banned(w->smtpd, sa, text, sizeof(text))) {
        worker_refuse(fd, text);    /* limits.ban, mtactl ban */
        return;
    }
    rc = worker_ip_acquire(w, sa);
    if (rc == STATUS_EFULL) {
        util_sockaddr_str(sa, who, sizeof(who));
        util_sockaddr_ip(sa, ip, sizeof(ip));
        snprintf(text, sizeof(text),
            "421 4.7.0 %s Error: too many connections\r\n",
            w->cfg->hostname);
        STATUS_ADD(w->st->ops.rejects[STATUS_REJ_CONN_LIMIT], 1);
        log_event(LOGL_WARN, "reject", LOG_KVS(LKV_S("client", ip),
            LKV_I("client_port", worker_port(sa)),
            LKV_S("reason", "connection_limit"), LKV_S("dsn", "4.7.0")),
            "refused %s: too many connections (%d)", who,
            w->cfg->max_connections);
        worker_refuse(fd, text);
        return;
    }
    if (rc == STATUS_EPERIP) {
        util_sockaddr_str(sa, who, sizeof(who));
        util_sockaddr_ip(sa, ip, sizeof(ip));
        snprintf(text, sizeof(text),
            "421 4.7.0 %s Error: too many connections from %s\r\n",
            w->cfg->hostname, ip);
        STATUS_ADD(w->st->ops.rejects[STATUS_REJ_CONN_LIMIT_IP], 1);
        log_event(LOGL_WARN, "reject", LOG_KVS(LKV_S("client", ip),
            LKV_I("client_port", worker_port(sa)),
            LKV_S("reason", "connection_limit_per_ip"),
            LKV_S("dsn", "4.7.0")),
            "refused %s: too many connections from %s (%d)", who, ip,
            w->cfg->max_connections_per_ip);
        worker_refuse(fd, text);
        return;
    }
    w->nsess++;
    smtpd_accept(w->smtpd, fd, sa, len, l);
}


/* worker_listener - the configuration of listener fd (lfds[i] is
 * cfg->listen[i]). */
static const struct config_listen *
worker_listener(const struct worker *w, int fd)
{
    size_t i;

    for (i = 0; i < w->nlisten && i < w->cfg->nlisten; i++)
        if (w->lfds[i] == fd)
            return &w->cfg->listen[i];
    return NULL;
}


/* worker_listener_nodelay - does listener fd pass TCP_NODELAY on to the
 * sockets it accepts?  Asked of the socket once, at start. */
static int
worker_listener_nodelay(const struct worker *w, int fd)
{
    size_t i;

    for (i = 0; i < w->nlisten; i++)
        if (w->lfds[i] == fd)
            return w->lnodelay[i];
    return 0;
}


/* worker_accept_one - accept and admit one connection: 1 when one was
 * taken (or lost to the client's reset), 0 when there is none or accepting
 * must pause. */
static int
worker_accept_one(struct worker *w, int fd)
{
    struct sockaddr_storage ss;
    socklen_t               len = sizeof(ss);
    int                     c, one = 1;

    c = accept4(fd, (struct sockaddr *)&ss, &len,
        SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c >= 0) {
        const struct config_listen *l = worker_listener(w, fd);

        /* No Nagle: a reply written behind a small unacknowledged segment
         * (a TLS session ticket, a 220) would wait for the client's
         * delayed ACK, 40 ms a session.  Replies already leave
         * in one write per loop turn, so this adds no segments.  Already
         * so when the listener has it (listen.c): accepted sockets
         * inherit it, and this system call per connection is saved. */
        if (!worker_listener_nodelay(w, fd))
            (void)setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (l != NULL && l->proxy != 0)
            wproxy_accept(w, c, &ss, len, l);   /* header first */
        else
            worker_admit(w, c, &ss, len, l);
        return 1;
    }
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
        return 1;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
        errno == ENOMEM) {
        /* Level-triggered: without a pause this would spin. */
        log_warn("accept: %s; pausing for a second", strerror(errno));
        if (!w->stopping && !w->draining) {
            w->accept_pause = 1;
            worker_listen(w, 0);
        }
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        log_warn("accept: %s", strerror(errno));
    }
    return 0;
}


/*
 * worker_on_accept - a listener is readable: accept a batch.  A batch
 * that ends on an empty queue costs an accept4() that fails (EAGAIN);
 * one connection at a time costs a loop turn each in a burst.  So the
 * batch starts at one (as nginx's default, multi_accept off) and doubles,
 * up to WORKER_ACCEPT_BUDGET, while the listener is readable again in the
 * very next turn after a batch that found no end: a backlog.  Else it
 * falls back to one.  With a connection per message arriving one at a
 * time, that is one accept4() a connection, not two.
 */
static void
worker_on_accept(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct worker *w = arg;
    uint64_t       turn = ev_turn(loop);
    unsigned       i;

    (void)events;
    if (w->accept_full && turn == w->accept_turn + 1)
        w->accept_batch = w->accept_batch >= WORKER_ACCEPT_BUDGET / 2 ?
            WORKER_ACCEPT_BUDGET : w->accept_batch * 2;
    else
        w->accept_batch = 1;
    w->accept_full = 0;
    for (i = 0; i < w->accept_batch && !w->stopping; i++)
        if (!worker_accept_one(w, fd))
            return;
    w->accept_full = 1;
    w->accept_turn = turn;
}


/* --- stop, channel, tick ---------------------------------------------- */

/* worker_check_done - after "stop": exit once sessions and deliveries are
 * gone. */
void
worker_check_done(struct worker *w)
{
    if (!w->stopping || w->nsess > 0 || w->nproxy > 0)
        return;
    if (deliver_drain(w->deliver) > 0)
        return;
    log_info("stopped: sessions and deliveries finished");
    w->exit_code = 0;
    ev_stop(w->loop);
}


/* worker_session_gone - smtpd's gone(): a session ended. */
static void
worker_session_gone(void *arg, const struct sockaddr *peer)
{
    struct worker *w = arg;

    worker_ip_release(w, peer);
    if (w->nsess > 0)
        w->nsess--;
    worker_check_done(w);
}


/* worker_on_stop_deadline - the grace is over: every session not in a
 * message is told 421 and closed, and every delivery is given back to the
 * next generation (see STOP). */
static void
worker_on_stop_deadline(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct worker *w = arg;

    (void)loop;
    (void)t;
    if (w->nsess > 0)
        log_notice("stop deadline: closing %zu sessions", w->nsess);
    smtpd_stop_all(w->smtpd, WORKER_STOP_MARGIN_MS / 2);
    deliver_giveback(w->deliver);
    worker_check_done(w);
}


/* worker_stop_deadline_ms - when the stop deadline falls after "stop":
 * shutdown_timeout less a margin (a quarter of it when it is short). */
static uint64_t
worker_stop_deadline_ms(const struct config *cfg)
{
    uint64_t margin = cfg->shutdown_timeout_ms / 4;

    if (margin > WORKER_STOP_MARGIN_MS)
        margin = WORKER_STOP_MARGIN_MS;
    return cfg->shutdown_timeout_ms - margin;
}


static void
worker_stop(struct worker *w)
{
    size_t i, n = 0;
    int    k;

    if (w->stopping)
        return;
    /* Unwatch first: from here the kernel wakes other workers for new
     * connections; then take what is already queued; then close. */
    worker_listen(w, 0);
    w->stopping = 1;
    for (i = 0; i < w->nlisten; i++) {
        if (w->lfds[i] < 0)
            continue;
        for (k = 0; k < WORKER_DRAIN_MAX && worker_accept_one(w,
            w->lfds[i]); k++)
            n++;
        close(w->lfds[i]);
        w->lfds[i] = -1;
    }
    log_info("stopping: listeners closed (%zu taken from the backlog), "
        "finishing %zu sessions", n, w->nsess);
    (void)deliver_drain(w->deliver);
    ev_timer_init(&w->stop_timer, worker_on_stop_deadline, w);
    ev_timer_start(w->loop, &w->stop_timer, worker_stop_deadline_ms(w->cfg));
    smtpd_stop_begin(w->smtpd);
    worker_check_done(w);
}


/* worker_drain - "drain" (mtactl drain): close the listeners for good,
 * with a 421 to what is already in their backlog; sessions go on, and
 * every queued message is delivered now.  The master stops the worker
 * once the queue is empty (master/drain.c). */
static void
worker_drain(struct worker *w)
{
    size_t i, n = 0;
    int    k;

    if (w->draining || w->stopping)
        return;
    worker_listen(w, 0);
    w->draining = 1;
    for (i = 0; i < w->nlisten; i++) {
        if (w->lfds[i] < 0)
            continue;
        for (k = 0; k < WORKER_DRAIN_MAX && worker_accept_one(w,
            w->lfds[i]); k++)
            n++;
        close(w->lfds[i]);
        w->lfds[i] = -1;
    }
    log_info("draining: listeners closed (%zu refused from the backlog), "
        "%zu sessions go on, delivering the queue now", n, w->nsess);
    deliver_kick(w->deliver, NULL);
}


/* worker_tlsrpt_emit - one policy's TLS-RPT counts to the master (see
 * tlspol/tlspol.h); a full channel keeps them for the next tick. */
static int
worker_tlsrpt_emit(const char *msg, size_t n, void *arg)
{
    struct worker *w = arg;

    return chan_send(w->a.chan_fd, CHAN_TLSRPT_ADD, msg, n, -1);
}

/* --- the channel: one handler per command (common/chan.h) ------------- */

static void
worker_chan_ping(const struct chan_msg *m, void *arg)
{
    struct worker *w = arg;

    (void)m;
    (void)chan_send(w->a.chan_fd, CHAN_PONG, NULL, 0, -1);  /* watchdog */
}


/* The master's answer to CHAN_AUTH_CONNECT (smtpd/session_dovecot.c). */
static void
worker_chan_auth_socket(const struct chan_msg *m, void *arg)
{
    struct worker *w = arg;

    smtpd_auth_socket(w->smtpd, m->fd, NULL);
}


static void
worker_chan_auth_refused(const struct chan_msg *m, void *arg)
{
    struct worker *w = arg;
    char           why[256];

    util_strlcpy(why, m->data, sizeof(why));    /* NUL-terminated (chan.h) */
    smtpd_auth_socket(w->smtpd, -1, why);
}


/* worker_auth_connect - smtpd asks for a connection to Dovecot's unix
 * socket, which only the master may make (the sandbox). */
static int
worker_auth_connect(void *arg)
{
    struct worker *w = arg;

    return chan_send(w->a.chan_fd, CHAN_AUTH_CONNECT, NULL, 0, -1);
}


static void
worker_chan_stop(const struct chan_msg *m, void *arg)
{
    (void)m;
    worker_stop(arg);
}


static void
worker_chan_drain(const struct chan_msg *m, void *arg)
{
    (void)m;
    worker_drain(arg);
}


/* worker_chan_kick - a queue id, or every message we own (empty). */
static void
worker_chan_kick(const struct chan_msg *m, void *arg)
{
    struct worker *w = arg;

    if (m->len == 0)
        deliver_kick(w->deliver, NULL);
    else if (strlen(m->data) == m->len && spool_id_valid(m->data))
        deliver_kick(w->deliver, m->data);
    else
        log_warn("channel: kick with a malformed queue id ignored");
}


/* worker_chan_qstream - mtactl queue: the master passed one end of a
 * socketpair, on which deliver_qstream() writes the listing. */
static void
worker_chan_qstream(const struct chan_msg *m, void *arg)
{
    struct worker *w = arg;

    (void)deliver_qstream(w->deliver, m->fd);
}


static void
worker_chan_tlsrpt_send(const struct chan_msg *m, void *arg)
{
    struct worker *w = arg;

    deliver_tlsrpt_send(w->deliver, m->data, m->len);
}


/* a new routes snapshot is published: reopened between two lookups, so
 * no view of the old one is held (the old one stays mapped on failure) */
static void
worker_chan_routes(const struct chan_msg *m, void *arg)
{
    struct worker *w = arg;

    (void)m;
    if (router_reopen(w->router, w->snap, ROUTER_OPEN_SNAPSHOT) != ROUTER_OK)
        log_err("routes %s: %s; the previous table stays in use", w->snap,
            router_errstr(w->router));
}


static void
worker_chan_shape_event(const struct chan_msg *m, void *arg)
{
    struct worker *w = arg;

    if (events_shape_take(w->events, m->data, m->len) < 0)
        log_warn("channel: shape-event: malformed");
}


static void
worker_chan_sandbox_test(const struct chan_msg *m, void *arg)
{
    (void)m;
    (void)arg;
    log_notice("sandbox test: making a forbidden system call");
    log_flush();
    sandbox_selftest();             /* under the filter: SIGSYS, gone */
    log_warn("sandbox test: the forbidden call returned; no filter");
}


static void
worker_chan_bad(const char *why, void *arg)
{
    (void)arg;
    log_warn("channel: message from the master dropped: %s", why);
}


static const struct chan_side worker_chan = {
    CHAN_WORKER,
    {
        [CHAN_STOP] = worker_chan_stop,
        [CHAN_PING] = worker_chan_ping,
        [CHAN_DRAIN] = worker_chan_drain,
        [CHAN_KICK] = worker_chan_kick,
        [CHAN_QSTREAM] = worker_chan_qstream,
        [CHAN_TLSRPT_SEND] = worker_chan_tlsrpt_send,
        [CHAN_SANDBOX_TEST] = worker_chan_sandbox_test,
        [CHAN_ROUTES] = worker_chan_routes,
        [CHAN_AUTH_SOCKET] = worker_chan_auth_socket,
        [CHAN_AUTH_REFUSED] = worker_chan_auth_refused,
        [CHAN_SHAPE_EVENT] = worker_chan_shape_event,
    },
    worker_chan_bad
};


static void
worker_on_chan(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct worker *w = arg;
    char           buf[CHAN_MSG_MAX + 1];
    int            rc;

    (void)events;
    rc = chan_serve(fd, &worker_chan, WORKER_CHAN_BATCH, buf, sizeof(buf),
        w);
    if (rc == CHAN_EOF || rc == CHAN_ESYS) {
        /* The master is gone: end at once, the next one recovers. */
        log_notice("master channel closed; exiting");
        ev_unwatch(loop, fd);
        w->exit_code = 0;
        ev_stop(loop);
    }
}


static void
worker_on_tick(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct worker *w = arg;
    uint64_t       act, due, later, bytes, held, oldest;

    /* limits.load.refuse is applied per connection (worker_admit); the
     * listeners stay watched so that clients get a 421, not a hang */
    if (!w->stopping && !w->draining && !w->listening) {
        w->accept_pause = 0;
        worker_listen(w, 1);
    }
    (void)tls_rpt_export(worker_tlsrpt_emit, w);
    deliver_tidy(w->deliver);
    deliver_gauges(w->deliver, &act, &due, &later);
    __atomic_store_n(&w->st->ops.q_active, act, __ATOMIC_RELAXED);
    __atomic_store_n(&w->st->ops.q_due, due, __ATOMIC_RELAXED);
    __atomic_store_n(&w->st->ops.q_deferred, later, __ATOMIC_RELAXED);
    deliver_index_gauges(w->deliver, &bytes, &held, &oldest);
    __atomic_store_n(&w->st->ops.q_bytes, bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&w->st->ops.q_held, held, __ATOMIC_RELAXED);
    __atomic_store_n(&w->st->ops.q_oldest_ms, oldest, __ATOMIC_RELAXED);
    spool_pool_trim(w->spool);      /* delivered files lain unused */
    worker_check_done(w);
    ev_timer_start(loop, t, WORKER_TICK_MS);
}


/* --- entry points ----------------------------------------------------- */

/* worker_log_hook - the last before-sleep hook: a full batch of staged
 * records goes to the log process now, a smaller one when log_timer fires
 * (see LOGGING). */
static void
worker_log_hook(struct ev_loop *loop, void *arg)
{
    struct worker *w = arg;
    size_t         n = log_staged();

    if (n == 0)
        return;
    if (n >= WORKER_LOG_BATCH || w->stopping) {
        ev_timer_stop(loop, &w->log_timer);
        log_flush();
    } else if (!ev_timer_active(&w->log_timer)) {
        ev_timer_start(loop, &w->log_timer, WORKER_LOG_DELAY_MS);
    }
}


static void
worker_on_log_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop;
    (void)t;
    (void)arg;
    log_flush();
}


struct worker *
worker_init(const struct worker_args *a)
{
    const struct config *cfg = a->cfg;
    struct worker       *w = xcalloc(1, sizeof(*w));
    struct smtpd_env     env;
    unsigned             nshards = a->nshards ? a->nshards : 1;
    size_t               i;
    int                  rc, fl, nd;
    socklen_t            ndlen;
    char                 snap_dir[PATH_MAX];

    w->a = *a;
    w->cfg = cfg;
    w->st = a->status != NULL && a->slot < STATUS_MAX_WORKERS ?
        &a->status->w[a->slot] : &w->st_local;
    if ((w->loop = ev_new()) == NULL) {
        log_err("epoll_create: %s", strerror(errno));
        goto fail;
    }
    rc = spool_open(&w->spool, cfg->spool_dir, cfg->spool_fsync, a->shard);
    if (rc != SPOOL_OK) {
        log_err("spool %s: %s", cfg->spool_dir, w->spool ?
            spool_errstr(w->spool) : strerror(errno));
        goto fail;
    }
    spool_set_reserve(w->spool, cfg->spool_reserve);
    /* The master's slot: no other live worker holds it, so ids need no
     * look into queue/ (spool.h; an old and a new generation of a shard
     * run at once during a reload) */
    if (a->status != NULL && a->slot < STATUS_MAX_WORKERS)
        spool_set_writer(w->spool, a->slot);
    /* the group commit syncs off the loop (its eventfd is made now,
     * before the sandbox; its thread at the first sync, inside it) */
    if (cfg->spool_fsync && spool_sync_init(w->spool) != SPOOL_OK)
        log_warn("spool %s: %s; the group commit syncs inline",
            cfg->spool_dir, spool_errstr(w->spool));
    /* delivered messages' files are closed off the loop on a disk */
    if (spool_reap_init(w->spool) != SPOOL_OK)
        log_warn("spool %s: %s; removed files are closed inline",
            cfg->spool_dir, spool_errstr(w->spool));
    /* the master's snapshot, never the live table (router.h, TRUST) */
    if (router_snapshot_path(cfg->routes_db, snap_dir, sizeof(snap_dir),
        w->snap, sizeof(w->snap)) != ROUTER_OK) {
        log_err("routes %s: %s", cfg->routes_db, strerror(errno));
        goto fail;
    }
    rc = router_open(&w->router, w->snap, cfg->routes_default,
        ROUTER_OPEN_SNAPSHOT);
    if (rc != ROUTER_OK) {
        log_err("routes %s: %s", w->snap, w->router ?
            router_errstr(w->router) : strerror(errno));
        goto fail;
    }
    w->deliver = deliver_new(w->loop, cfg, w->spool, w->router, w->st,
        a->shard, nshards);
    if (w->deliver == NULL) {
        log_err("delivery schedule: cannot start");
        goto fail;
    }
    if (a->status != NULL) {
        deliver_set_throttle(w->deliver, &a->status->throttle);
        deliver_set_page(w->deliver, a->status);
    }
    if (a->shape_rules != NULL)
        deliver_set_shaping(w->deliver, a->shape_rules, a->shape_tab,
            a->slot);
    if (a->status != NULL && a->slot < STATUS_MAX_WORKERS &&
        worker_quotas_on(cfg))
        deliver_set_quota(w->deliver, a->status, a->slot);
    /* Daemon-wide admission counters: see ADMISSION above. */
    if (a->status != NULL && a->slot < STATUS_MAX_WORKERS) {
        w->admit = a->status;
        w->admit_slot = a->slot;
    } else {
        w->admit = status_create();
        w->admit_slot = 0;
    }
    deliver_set_health(w->deliver, w->admit);
    w->nlisten = a->nlisten;
    w->lfds = xcalloc(a->nlisten ? a->nlisten : 1, sizeof(int));
    w->lnodelay = xcalloc(a->nlisten ? a->nlisten : 1, 1);
    for (i = 0; i < a->nlisten; i++) {
        w->lfds[i] = a->listen_fds[i];
        /* Shared listeners must not block: another worker may take the
         * connection between our wakeup and accept4(). */
        fl = fcntl(w->lfds[i], F_GETFL);
        if (fl >= 0)
            (void)fcntl(w->lfds[i], F_SETFL, fl | O_NONBLOCK);
        nd = 0;
        ndlen = sizeof(nd);
        w->lnodelay[i] = getsockopt(w->lfds[i], IPPROTO_TCP, TCP_NODELAY,
            &nd, &ndlen) == 0 && nd != 0;
    }
    ev_timer_init(&w->tick, worker_on_tick, w);
    ev_timer_init(&w->log_timer, worker_on_log_timer, w);
    if (worker_tls_init(w) < 0 || worker_dkim_init(w) < 0)
        goto fail;
    /* auth.password_file may be readable by root only: read it here,
     * before the privilege drop (a reload forks new workers, which read
     * it again). */
    if (cfg->auth_password_file != NULL &&
        (w->auth = smtpd_auth_load(cfg->auth_password_file,
        w->a.gid, w->a.admin_gid)) == NULL)
        goto fail;
    tls_rpt_enable(cfg->tlsrpt_enabled);
    env.grey = NULL;                /* worker_run() opens it */
    /* delivery events: the HTTP secret and the CA bundle are read now,
     * before the privilege drop and the sandbox */
    {
        char why[512];

        w->events = events_new(w->loop, cfg, a->status, w->st, why,
            sizeof(why));
        if (w->events == NULL && why[0] != '\0') {
            log_err("%s", why);
            goto fail;
        }
        deliver_set_events(w->deliver, w->events);
    }
    env.loop = w->loop;
    env.cfg = cfg;
    env.spool = w->spool;
    env.router = w->router;
    env.deliver = w->deliver;
    env.st = w->st;
    env.tls_ctx = w->tls_ctx;
    env.dkim = w->dkim;
    env.auth = w->auth;
    env.slot = w->a.slot;
    env.shared = w->admit;
    env.auth_connect = worker_auth_connect;
    env.events = w->events;
    env.gone = worker_session_gone;
    env.arg = w;
    w->smtpd = smtpd_new(&env);
    return w;
fail:
    grey_close(w->grey);
    events_free(w->events);
    smtpd_auth_free(w->auth);
    dkim_keys_free(w->dkim);
    net_tls_ctx_free(w->tls_ctx);
    deliver_free(w->deliver);
    router_close(w->router);
    spool_close(w->spool);
    ev_free(w->loop);
    free(w);
    return NULL;
}


int
worker_run(struct worker *w)
{
    int rc;

    /* A killed predecessor in this slot may have left files in tmp/.
     * Here, not in worker_init(): as the workers' user, not as root in a
     * directory that user can write. */
    worker_grey_init(w);
    smtpd_set_grey(w->smtpd, w->grey);
    if ((rc = spool_tmp_sweep(w->spool)) > 0)
        log_notice("spool %s: %d files left in tmp/ by an earlier worker "
            "of slot %u removed", w->cfg->spool_dir, rc, w->a.slot);
    else if (rc < 0)
        log_warn("spool %s: %s", w->cfg->spool_dir, spool_errstr(w->spool));
    /* The log records of the turn go last, after smtpd's hooks. */
    ev_before_sleep(w->loop, worker_log_hook, w);
    log_set_batching(1);
    worker_listen(w, 1);
    if (ev_watch(w->loop, w->a.chan_fd, EV_READ, worker_on_chan, w) < 0) {
        log_err("epoll_ctl channel: %s", strerror(errno));
        return 1;
    }
    ev_timer_start(w->loop, &w->tick, WORKER_TICK_MS);
    if (chan_send(w->a.chan_fd, CHAN_READY, NULL, 0, -1) < 0)
        log_warn("channel: ready: %s", strerror(errno));
    if (deliver_recover(w->deliver) < 0)
        log_warn("delivery recovery was incomplete");
    w->exit_code = 0;
    rc = ev_run(w->loop);
    log_set_batching(0);            /* flushes; from here records go at once */
    ev_timer_stop(w->loop, &w->log_timer);
    if (rc < 0) {
        log_err("epoll_wait: %s", strerror(errno));
        w->exit_code = 1;
    }
    (void)tls_rpt_export(worker_tlsrpt_emit, w);   /* the last counts */
    wproxy_close_all(w);
    smtpd_free(w->smtpd);
    grey_close(w->grey);
    smtpd_auth_free(w->auth);
    dkim_keys_free(w->dkim);
    net_tls_ctx_free(w->tls_ctx);
    if (w->exit_code == 0)
        deliver_save_index(w->deliver);
    deliver_free(w->deliver);
    events_free(w->events);         /* flushes what is still buffered */
    router_close(w->router);
    spool_close(w->spool);
    ev_free(w->loop);
    free(w->lfds);
    free(w->lnodelay);
    rc = w->exit_code;
    free(w);
    return rc;
}


struct router *
worker_router(struct worker *w)
{
    return w->router;
}
