/*
 * mta.c - the outbound SMTP client: one state machine per connection on
 * the worker's event loop, toward the hosts of an "smtp:" route.
 *
 * PURPOSE   Run the transactions deliver.c hands over: connect (fail-over
 *           through the route's hosts in order), greeting, EHLO (HELO on a
 *           5xx), MAIL/RCPT/DATA pipelined when offered, the body streamed
 *           from the queue file (dot-stuffed in one pass for DATA, sent
 *           as is for BDAT: read into memory and sent in blocks of up to
 *           1 MiB, or with sendfile when the worker's blocks are all in
 *           use), then the per-recipient results.
 * CONTRACT  A destination is txn->dest (a route text, or "mx:<domain>":
 *           concurrency is per destination domain, as Postfix's
 *           destination concurrency).  Its connections (connecting,
 *           busy or idle) never exceed conns_per_dest; transactions beyond
 *           that wait in the destination's FIFO.  After a transaction the
 *           connection stays idle for MTA_IDLE_MS and the next
 *           transaction to the same destination reuses it after an RSET
 *           (sent in the same write as MAIL/RCPT/DATA when the peer offers
 *           PIPELINING); a reused connection that turns out dead (no 2xx
 *           to the RSET) is dropped and the transaction starts again on a
 *           fresh one, once.
 *           Extensions: SIZE= when offered; BODY=8BITMIME when the message
 *           is 8-bit and the peer offers it (a peer without 8BITMIME gets
 *           the bytes as they are, as Postfix does); a message that needs
 *           SMTPUTF8 fails 5.6.7 at a peer without it, BINARYMIME 5.6.3
 *           without BINARYMIME+CHUNKING; NOTIFY/ORCPT/RET/ENVID are passed
 *           on when the peer offers DSN; BDAT (no stuffing) when
 *           it offers CHUNKING.  LIMITS (RFC 9422): past the peer's
 *           RCPTMAX or RCPTDOMAINMAX a txn's recipients go in several
 *           transactions (mta_slice), on the same connection, or past
 *           its MAILMAX on a fresh one; done() still comes once.
 *           Sockets use TCP_NODELAY: every write is a whole batch of
 *           commands or body, so Nagle only adds delay.
 *           done() is called exactly once per transaction, from a loop
 *           callback, never from inside mta_submit().
 * FAILURE   Every problem becomes a per-recipient result: a failed
 *           connect, a 4xx greeting or EHLO moves on to the next host;
 *           when none is left, or the connection drops or times out later,
 *           the recipients without a final answer are deferred; 5xx
 *           answers bounce (a 5xx greeting moves on too; from the last
 *           address it bounces).  Addresses come resolved (resolve.c, in
 *           the loop); the relay itself never resolves a name.
 * REUSE     Idle connections are pooled per host, not per route: a
 *           destination without an idle connection of its own takes one
 *           whose peer address and port are among its hops (mta_adopt), so
 *           domains that share MX hosts share the connections to them.
 * FILES     This file: destinations, connection pools and reuse, fail-over
 *           over addresses, submit/abort/drain, and where a destination
 *           asks to connect (mta_may_connect).  The SMTP conversation on
 *           one connection: its phases and replies in mta_session.c, the
 *           transaction in mta_txn.c, the content in mta_body.c, STARTTLS
 *           in mta_tls.c; shared types in mta.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/tcp.h>
#include <sys/sendfile.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "delivery/mta.h"
#include "tlspol/tlspol.h"

#include <openssl/ssl.h>

static void mta_connect_next(struct mta_conn *c);

/* ---- completion ---- */

/* mta_post_fire - call done() for the transactions finished this turn. */
static void
mta_post_fire(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct mta     *r = arg;
    struct mta_txn *list = r->posted, *next;

    (void)loop;
    (void)t;
    r->posted = NULL;
    /* posted is LIFO; reverse so done() runs in completion order */
    {
        struct mta_txn *rev = NULL;

        while (list) {
            next = list->next;
            list->next = rev;
            rev = list;
            list = next;
        }
        list = rev;
    }
    for (; list; list = next) {
        next = list->next;
        list->next = NULL;
        list->done(list);
    }
}


/* mta_post - hand a finished transaction back on the next loop turn. */
void
mta_post(struct mta *r, struct mta_txn *t)
{
    t->next = r->posted;
    r->posted = t;
    if (!ev_timer_active(&r->post_timer))
        ev_timer_start(r->loop, &r->post_timer, 0);
}


/* mta_set - record a final result for recipient i of t. */
void
mta_set(struct mta_txn *t, size_t i, enum mta_status status,
    const char *reply, const char *relay)
{
    t->res[i].status = status;
    util_strlcpy(t->res[i].reply, reply, sizeof(t->res[i].reply));
    util_strlcpy(t->res[i].relay, relay, sizeof(t->res[i].relay));
    t->res[i].tls = t->tls_out;
    t->res[i].peer_dsn = t->peer_dsn;
    util_strlcpy(t->res[i].source, t->src_name != NULL ? t->src_name : "",
        sizeof(t->res[i].source));
}


/* mta_status_of - a reply code as a result: 2xx sent, 5xx bounced, else
 * deferred. */
enum mta_status
mta_status_of(int code)
{
    if (code >= 200 && code < 300)
        return MTA_SENT;
    if (code >= 500 && code < 600)
        return MTA_BOUNCE;
    return MTA_DEFER;
}


/* ---- destinations ---- */

/* mta_dest_get - the destination (key, TLS level, egress pool):
 * transactions of one route under different TLS levels or pools never
 * share its connections. */
static struct mta_dest *
mta_dest_get(struct mta *r, const char *key, int tls_level, int pool,
    const struct route *route)
{
    struct mta_dest *d;

    for (d = r->dests; d; d = d->next)
        if (d->tls_level == tls_level && d->pool == pool &&
            strcmp(d->key, key) == 0)
            return d;
    d = xcalloc(1, sizeof(*d));
    util_strlcpy(d->key, key, sizeof(d->key));
    d->tls_level = tls_level;
    d->pool = pool;
    d->route = *route;
    d->shape_e = r->shape != NULL ? -2 : -1;    /* mta_shape_dest_init() */
    d->next = r->dests;
    r->dests = d;
    return d;
}


/* mta_dest_gc - forget a destination with no connection and no queue. */
static void
mta_dest_gc(struct mta *r, struct mta_dest *d)
{
    struct mta_dest **pp;

    if (d->nconns > 0 || d->wait_head != NULL)
        return;
    for (pp = &r->dests; *pp; pp = &(*pp)->next) {
        if (*pp == d) {
            *pp = d->next;
            mta_shape_dest_free(r, d);
            free(d);
            return;
        }
    }
}


struct mta_txn *
mta_dest_pop(struct mta_dest *d)
{
    struct mta_txn *t = d->wait_head;

    if (t) {
        d->wait_head = t->next;
        if (d->wait_head == NULL)
            d->wait_tail = NULL;
        t->next = NULL;
    }
    return t;
}


void
mta_dest_push_front(struct mta_dest *d, struct mta_txn *t)
{
    t->next = d->wait_head;
    d->wait_head = t;
    if (d->wait_tail == NULL)
        d->wait_tail = t;
}


/* ---- connections ---- */

/* mta_conn_close - close and free c; the caller has dealt with c->txn. */
void
mta_conn_close(struct mta_conn *c)
{
    struct mta      *r = c->r;
    struct mta_dest *d = c->dest;
    struct mta_conn **pp;

    ev_timer_stop(r->loop, &c->timer);
    if (c->fd >= 0)
        ev_unwatch(r->loop, c->fd);
    net_close(&c->net);             /* close_notify when TLS is up */
    if (c->shape_e >= 0)
        mta_shape_give(c);
    c->fd = -1;
    for (pp = &d->conns; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    d->nconns--;
    r->nconns--;
    buf_free(&c->in);
    mta_block_give(c);
    buf_free(&c->out);
    free(c->rst);
    free(c);
    /* mta_dest_run() collects d when nothing is left; inside a run the
     * running loop does it */
    if (!r->freeing && !d->running)
        mta_dest_run(r, d);
}


/* mta_fail_txn - the connection failed during a transaction: defer every
 * recipient without a final answer, close, and hand the txn back. */
static void
mta_fail_txn(struct mta_conn *c, const char *why)
{
    struct mta_txn *t = c->txn;
    size_t            i;
    /* c->rst describes t's current slice only once mta_begin() ran for
     * it; the slices before it have their results */
    int               begun = c->state == C_TXN || c->state == C_BODY ||
        c->state == C_DOT;

    if (t != NULL) {
        t->tls_out = c->tlso;
        for (i = t->first; i < t->nrcpt; i++)
            if (!begun || i >= t->first + t->count ||
                c->rst[i - t->first] != R_FINAL)
                mta_set(t, i, MTA_DEFER, why, c->name);
        c->txn = NULL;
        mta_post(c->r, t);
    }
    mta_conn_close(c);
}


/* mta_bounce_txn - the last address refused us with a 5xx greeting:
 * every recipient bounces with that reason. */
static void
mta_bounce_txn(struct mta_conn *c, const char *why)
{
    struct mta_txn *t = c->txn;
    size_t          i;

    if (t != NULL) {
        t->tls_out = c->tlso;
        for (i = t->first; i < t->nrcpt; i++)
            mta_set(t, i, MTA_BOUNCE, why, "none");
        c->txn = NULL;
        mta_post(c->r, t);
    }
    mta_conn_close(c);
}


/*
 * mta_lost - the connection broke (EOF, error, timeout, bad reply).
 * Where it happened decides what follows: before the session is set up,
 * the next host is tried; on a reused connection that fails its RSET,
 * the transaction starts over on a fresh connection (once); later, the
 * open recipients are deferred.
 */
void
mta_lost(struct mta_conn *c, const char *why)
{
    struct mta_txn *t = c->txn;

    switch (c->state) {
    case C_CONNECT:
    case C_GREETING:
        mta_health_failed(c, why);  /* it does not answer: mark it down */
        /* FALLTHROUGH */
    case C_EHLO:
    case C_HELO:
    case C_STARTTLS:
    case C_TLS:
        util_strlcpy(c->lasterr, why, sizeof(c->lasterr));
        mta_connect_next(c);
        return;
    case C_TXN:
    case C_RSET:
    case C_BODY:
    case C_DOT:
        /* only a dead reused connection (no RSET reply) restarts; with
         * the BDAT pipelined (mta_session.c) that may be while the body
         * goes out or after: nothing of it was answered yet */
        if (c->state != C_RSET && !c->tx.rset_pending)
            break;
        if (t != NULL && t->restarts == 0) {
            t->restarts++;
            c->txn = NULL;
            mta_dest_push_front(c->dest, t);
            mta_conn_close(c);            /* runs the dest queue */
            return;
        }
        break;
    case C_IDLE:
    case C_QUIT:
        mta_conn_close(c);
        return;
    default:
        break;
    }
    mta_fail_txn(c, why);
}


/* ---- connecting ---- */

/*
 * mta_addrs - the addresses c tries, in order: the hops resolve.c found
 * for t, or, without them (callers that did not resolve, the unit
 * tests), the address literals of the route.  Nothing here resolves a
 * name: the worker's loop never waits for DNS.
 */
static void
mta_addrs(struct mta_conn *c, const struct mta_txn *t)
{
    const struct route *rt = t->route;
    size_t h;

    c->naddr = 0;
    if (t->nhops > 0) {
        c->naddr = t->nhops < MTA_MAX_ADDRS ? t->nhops : MTA_MAX_ADDRS;
        memcpy(c->addr, t->hops, c->naddr * sizeof(*c->addr));
        return;
    }
    for (h = 0; rt != NULL && h < rt->nhosts && c->naddr < MTA_MAX_ADDRS;
        h++) {
        const struct route_host *rh = &rt->hosts[h];
        struct mta_hop *a = &c->addr[c->naddr];

        memset(a, 0, sizeof(*a));
        a->tls = t->tls;
        util_strlcpy(a->tls.verify_name, rh->name,
            sizeof(a->tls.verify_name));
        if (mta_hop_literal(rh->name, rh->port, a) < 0) {
            snprintf(c->lasterr, sizeof(c->lasterr), "451 4.4.3 host name "
                "%.200s was not resolved", rh->name);
            continue;
        }
        c->naddr++;
    }
}


/* mta_connect_next - try the next address; none left: defer the txn. */
static void
mta_connect_next(struct mta_conn *c)
{
    struct mta *r = c->r;
    int         plain = c->tls_fallback == MTA_TLS_RETRY_PLAIN;

    ev_timer_stop(r->loop, &c->timer);
    if (c->fd >= 0) {
        ev_unwatch(r->loop, c->fd);
        /* no close_notify: this connection failed */
        SSL_free(c->net.ssl);
        c->net.ssl = NULL;
        close(c->fd);
        c->fd = c->net.fd = -1;     /* never closed twice (mta_conn_close) */
        c->watched = 0;
    }
    c->in.off = c->in.len = 0;
    c->out.off = c->out.len = 0;
    c->drained = 0;
    mta_block_give(c);
    c->expect = 0;
    c->tls_fallback = MTA_TLS_POLICY;
    if (plain && c->cur > 0)
        c->cur--;                   /* the same host, without STARTTLS */
    else
        plain = 0;
    while (c->cur < c->naddr) {
        struct mta_hop  *a = &c->addr[c->cur++];
        int                one = 1, bound;
        char               ip[INET6_ADDRSTRLEN + 8];

        /* a hop marked down (mta_health.c) is skipped at once: no
         * message waits out its timeout again */
        if (!plain && mta_health_skip(c, a))
            continue;

        if (plain && c->txn != NULL)
            log_info("%s: %s; trying again without TLS", c->txn->env->id,
                c->lasterr);
        else if (c->cur > 1 && c->txn != NULL)
            log_info("%s: %s; trying the next host", c->txn->env->id,
                c->lasterr);
        c->tls_fallback = plain ? MTA_TLS_PLAIN : MTA_TLS_POLICY;
        plain = 0;
        c->tls = a->tls;            /* as the hop: tls_req_same() */
        c->tls_key[0] = '\0';
        memset(&c->tlso, 0, sizeof(c->tlso));
        c->caps = 0;
        memset(&c->peer, 0, sizeof(c->peer));
        c->ntxn = 0;
        snprintf(c->name, sizeof(c->name), "%s[%s]:%u", a->name,
            util_sockaddr_ip((struct sockaddr *)&a->ss, ip, sizeof(ip)),
            a->port);
        c->watched = 0;
        c->perm = 0;
        c->greeted = 0;
        c->fd = socket(a->ss.ss_family,
            SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        net_init(&c->net, c->fd);
        if (c->fd < 0) {
            snprintf(c->lasterr, sizeof(c->lasterr), "connect to %s: %s",
                c->name, strerror(errno));
            continue;
        }
        if ((bound = mta_egress_bind(c, c->fd, a)) != 0) {
            close(c->fd);
            c->fd = c->net.fd = -1;
            if (bound > 0)
                c->cur--;           /* the same host from another source */
            continue;
        }
        if (connect(c->fd, (struct sockaddr *)&a->ss, a->len) < 0 &&
            errno != EINPROGRESS) {
            snprintf(c->lasterr, sizeof(c->lasterr), "connect to %s: %s",
                c->name, strerror(errno));
            mta_health_failed(c, c->lasterr);
            close(c->fd);
            c->fd = c->net.fd = -1;
            continue;
        }
        /* commands go out whole, in one write each: no Nagle delays */
        (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (mta_watch(c, EV_WRITE) < 0) {
            snprintf(c->lasterr, sizeof(c->lasterr), "connect to %s: %s",
                c->name, strerror(errno));
            close(c->fd);
            c->fd = c->net.fd = -1;
            continue;
        }
        mta_enter(c, C_CONNECT);
        return;
    }
    /* no address left; c is in a phase before the session (CONNECT to
     * STARTTLS), so mta_fail_txn() takes no recipient as begun */
    {
        char why[SMTP_REPLY_MAX];

        util_strlcpy(why, c->lasterr, sizeof(why));
        if (c->naddr == 0 && why[0] == '\0')
            util_strlcpy(why, "no address for the route", sizeof(why));
        util_strlcpy(c->name, "none", sizeof(c->name));
        if (c->perm)
            mta_bounce_txn(c, why);
        else
            mta_fail_txn(c, why);
    }
}


/* mta_connected - the non-blocking connect finished (or failed). */
void
mta_connected(struct mta_conn *c)
{
    int       err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err != 0) {
        snprintf(c->lasterr, sizeof(c->lasterr), "connect to %s: %s",
            c->name, strerror(err));
        mta_health_failed(c, c->lasterr);
        mta_connect_next(c);
        return;
    }
    (void)mta_watch(c, EV_READ);
    mta_enter(c, C_GREETING);
}


/* mta_conn_new - open a connection to d from egress source src for t
 * (t rides along until the session is set up, or fails with the
 * connection). */
static void
mta_conn_new(struct mta *r, struct mta_dest *d, struct mta_txn *t, int src)
{
    struct mta_conn *c = xcalloc(1, sizeof(*c));

    c->r = r;
    c->dest = d;
    c->src = src;
    mta_egress_take(c, t);
    c->fd = -1;
    c->shape_e = -1;
    if (d->shape_e >= 0)
        mta_shape_take(c);          /* the slot mta_may_connect() took */
    net_init(&c->net, -1);
    c->txn = t;
    buf_init(&c->in);
    buf_init(&c->out);
    ev_timer_init(&c->timer, mta_timeout, c);
    c->next = d->conns;
    d->conns = c;
    d->nconns++;
    r->nconns++;
    mta_addrs(c, t);
    mta_connect_next(c);
}


/* mta_same_addr - same address and port? */
static int
mta_same_addr(const struct sockaddr_storage *a,
    const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

        return x->sin_port == y->sin_port &&
            x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

        return x->sin6_port == y->sin6_port &&
            memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return 0;
}


/*
 * mta_adopt - an idle connection of another destination whose peer is
 * one of t's hops, moved over to d; NULL when there is none.  This is
 * what makes the pool per host: domains that share an MX host share its
 * connections when its egress source is one of d's pool (the source
 * decides the EHLO name and the local address): address, port and the
 * TLS requirement the connection was set up under (tls_req_same(): a
 * connection verified for one policy never serves another).  Among
 * several, the one earliest in t's order wins.
 */
static struct mta_conn *
mta_adopt(struct mta *r, struct mta_dest *d, const struct mta_txn *t)
{
    struct mta_dest *od;
    struct mta_conn *c, *best = NULL, **pp;
    size_t           k, bestk = SIZE_MAX;

    for (od = r->dests; od; od = od->next) {
        if (od == d || od->running)
            continue;
        for (c = od->conns; c; c = c->next) {
            if (c->state != C_IDLE || c->cur == 0 || !mta_egress_fits(c, d))
                continue;
            /* shaped: only one from the source whose slot d holds */
            if (mta_shape_token_src(d) >= 0 && c->src != mta_shape_token_src(d))
                continue;
            for (k = 0; k < t->nhops && k < bestk; k++) {
                if (mta_same_addr(&c->addr[c->cur - 1].ss, &t->hops[k].ss) &&
                    tls_req_same(&c->tls, &t->hops[k].tls)) {
                    best = c;
                    bestk = k;
                    break;
                }
            }
        }
    }
    if (best == NULL)
        return NULL;
    od = best->dest;
    for (pp = &od->conns; *pp; pp = &(*pp)->next) {
        if (*pp == best) {
            *pp = best->next;
            break;
        }
    }
    od->nconns--;
    best->dest = d;
    best->next = d->conns;
    d->conns = best;
    d->nconns++;
    if (d->shape_e >= 0)
        mta_shape_take(best);
    mta_dest_gc(r, od);
    return best;
}


/*
 * mta_may_connect - may d open (or adopt) one more connection now?  The
 * one place a destination asks before connecting; today the answer is
 * its concurrency cap.  SHAPING: a traffic-shaping module (per
 * destination rates and back-off; pure: the destination's recent
 * history and the clock in, "go" or "not before T" out) is asked here,
 * and only here, for connections.  A "not before T" leaves the
 * transactions queued in d and arms a timer that runs mta_dest_run()
 * again at T; it never fails a recipient.  The per-transaction question
 * (may this connection send one more message now) sits at the top of
 * mta_conn_next() (mta_session.c), where every transaction meets its
 * connection.
 *           Shaping (mta_shape.c): the site's node-wide connection
 *           limit and new-connection rate, and its back-off; a yes takes
 *           the connection's slot (d->conn_token) for the connect or the
 *           adoption that follows.
 */
static int
mta_may_connect(struct mta *r, struct mta_dest *d)
{
    if (d->nconns >= r->cap)
        return 0;
    return d->shape_e < 0 || mta_shape_may_connect(r, d);
}


/* mta_dest_run - start waiting transactions on idle connections, or on
 * new ones while mta_may_connect() says so; a shaped destination whose
 * next message may not go yet waits for its gate (mta_shape_gate()). */
void
mta_dest_run(struct mta *r, struct mta_dest *d)
{
    struct mta_conn *c;
    uint64_t         nb;
    int              src;

    if (d->running)
        return;
    d->running = 1;
    while (d->wait_head != NULL) {
        if (d->shape_e >= 0 && !d->wait_head->shape_paid &&
            mta_shape_gate(r, d) != 0)
            break;
        for (c = d->conns; c; c = c->next)
            if (c->state == C_IDLE && (d->shape_e < 0 || mta_shape_ready(c)))
                break;
        if (c == NULL && mta_may_connect(r, d))
            c = mta_adopt(r, d, d->wait_head);
        if (c != NULL) {
            (void)mta_conn_next(c);
            continue;
        }
        if (!mta_may_connect(r, d))
            break;
        /* shaped: the source whose slot mta_may_connect() took */
        if ((src = mta_shape_token_src(d)) < 0 &&
            (src = mta_egress_pick(r, d, NULL, NULL, &nb)) < 0) {
            if (nb == 0)            /* every source of the pool is gone */
                mta_egress_none(r, d);
            break;
        }
        mta_conn_new(r, d, mta_dest_pop(d), src);
    }
    d->running = 0;
    mta_dest_gc(r, d);
}


void
mta_dest_kick(struct mta *r, struct mta_dest *d)
{
    mta_dest_run(r, d);
}


/* ---- public ---- */

int
mta_hop_literal(const char *name, unsigned port, struct mta_hop *out)
{
    struct sockaddr_in  *s4 = (struct sockaddr_in *)&out->ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&out->ss;

    memset(&out->ss, 0, sizeof(out->ss));
    if (inet_pton(AF_INET, name, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        out->len = sizeof(*s4);
    } else if (inet_pton(AF_INET6, name, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        out->len = sizeof(*s6);
    } else {
        return -1;
    }
    util_strlcpy(out->name, name, sizeof(out->name));
    out->port = port;
    return 0;
}


struct mta *
mta_new(struct ev_loop *loop, const char *helo_name,
    uint64_t connect_timeout_ms, unsigned conns_per_dest)
{
    struct mta *r = xcalloc(1, sizeof(*r));

    r->loop = loop;
    r->helo = xstrdup(helo_name);
    r->connect_timeout_ms = connect_timeout_ms ? connect_timeout_ms : 30000;
    r->idle_ms = MTA_IDLE_MS;
    r->cap = conns_per_dest ? conns_per_dest : 1;
    r->t.greeting_ms = r->t.helo_ms = r->t.mail_ms = r->t.rcpt_ms =
        r->t.quit_ms = 5 * 60 * 1000;
    r->t.data_ms = 2 * 60 * 1000;
    r->t.data_xfer_ms = 3 * 60 * 1000;
    r->t.data_done_ms = 10 * 60 * 1000;
    r->chunk = xmalloc(MTA_CHUNK);
    ev_timer_init(&r->post_timer, mta_post_fire, r);
    mta_set_egress(r, NULL);
    return r;
}


void
mta_set_timeouts(struct mta *r, const struct config_mta_timeouts *t)
{
    r->t = *t;
}


void
mta_free(struct mta *r)
{
    if (r == NULL)
        return;
    r->freeing = 1;
    ev_timer_stop(r->loop, &r->post_timer);
    while (r->dests != NULL) {
        struct mta_dest *d = r->dests;

        while (d->conns != NULL)
            mta_conn_close(d->conns);
        r->dests = d->next;
        mta_shape_dest_free(r, d);
        free(d);
    }
    net_tls_ctx_free(r->tls_ctx);
    tls_cache_free(r->tls_cache);
    mta_egress_free(r);
    while (r->nblock_spare > 0)
        free(r->block_spare[--r->nblock_spare]);
    free(r->chunk);
    free(r->helo);
    free(r);
}


void
mta_set_tls(struct mta *r, struct ssl_ctx_st *ctx)
{
    net_tls_ctx_free(r->tls_ctx);
    r->tls_ctx = ctx;
    if (ctx == NULL)
        return;
    /* Outbound resumption: OpenSSL hands every new session
     * (TLS 1.3 tickets come after the handshake) to the callback, which
     * files it per destination and host; nothing in OpenSSL's own store. */
    if (r->tls_cache == NULL)
        r->tls_cache = tls_cache_new(0, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
        SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, mta_tls_new_session);
}


void
mta_set_tls_report(struct mta *r, mta_tls_report_fn *fn, void *arg)
{
    r->tls_report = fn;
    r->tls_report_arg = arg;
}


int
mta_conn_fits(const struct mta_conn *c, const struct mta_txn *t)
{
    size_t k;

    if (c->cur == 0 || !mta_egress_member(c->r, t->pool, c->src))
        return 0;               /* never from a source outside t's pool */
    for (k = 0; k < t->nhops; k++)
        if (mta_same_addr(&c->addr[c->cur - 1].ss, &t->hops[k].ss))
            return tls_req_same(&c->tls, &t->hops[k].tls);
    /* not among its hops (literal routes, or DNS moved on): the same
     * destination, so the same level; the host's name is the one c
     * checked */
    {
        struct tls_req want = t->tls;

        util_strlcpy(want.verify_name, c->tls.verify_name,
            sizeof(want.verify_name));
        want.tlsa = c->tls.tlsa;
        return tls_req_same(&c->tls, &want);
    }
}


void
mta_conn_quit(struct mta_conn *c)
{
    mta_cmd(c, "QUIT");
    (void)net_write(&c->net, buf_head(&c->out), buf_avail(&c->out));
    mta_conn_close(c);
}


int
mta_conn_unfit(struct mta_conn *c, struct mta_txn *t)
{
    mta_dest_push_front(c->dest, t);
    mta_conn_quit(c);
    return 1;
}


void
mta_submit(struct mta *r, struct mta_txn *t)
{
    struct mta_dest *d;
    size_t             i;

    if (t->pool < 0 || (size_t)t->pool >= r->npools)
        t->pool = 0;
    d = mta_dest_get(r, t->dest, (int)t->tls.level, t->pool, t->route);
    memset(&t->tls_out, 0, sizeof(t->tls_out));
    t->peer_dsn = 0;
    t->src_name = NULL;
    for (i = 0; i < t->nrcpt; i++)
        mta_set(t, i, MTA_DEFER, "not attempted", "none");
    t->next = NULL;
    t->restarts = 0;
    t->accepted = 0;
    t->first = t->count = 0;
    t->cut = 0;
    t->held = 0;
    t->shape_e = -1;
    t->shape_se = -1;
    t->shape_paid = 0;
    t->site[0] = '\0';
    if (d->shape_e == -2)
        mta_shape_dest_init(r, d, t);
    if (d->shape_e >= 0) {
        t->shape_e = d->shape_e;
        t->shape_block = d->shape_block;
        memcpy(t->site, d->site, sizeof(t->site));
    }
    if (d->wait_tail)
        d->wait_tail->next = t;
    else
        d->wait_head = t;
    d->wait_tail = t;
    mta_dest_run(r, d);
}


void
mta_abort(struct mta *r, uint64_t dot_grace_ms)
{
    struct mta_dest *d, *dn;
    struct mta_conn *c, *cn;
    struct mta_txn  *t;

    /* finished transactions are reported, as they would be next turn */
    ev_timer_stop(r->loop, &r->post_timer);
    mta_post_fire(r->loop, &r->post_timer, r);
    r->draining = 1;
    r->freeing = 1;                         /* no queue runs while closing */
    for (d = r->dests; d; d = dn) {
        dn = d->next;
        while ((t = mta_dest_pop(d)) != NULL) {
            t->cut = 1;                     /* never started */
            t->done(t);
        }
        for (c = d->conns; c; c = cn) {
            cn = c->next;
            /* the dot is out: the next hop may be saying 250 right now;
             * cutting that reply would make the next generation deliver
             * the message again, so it gets a short grace */
            if (c->state == C_DOT && c->txn != NULL && dot_grace_ms > 0) {
                mta_arm(c, dot_grace_ms);
                continue;
            }
            t = c->txn;
            c->txn = NULL;
            mta_conn_close(c);
            if (t != NULL) {
                t->cut = 1;
                t->done(t);
            }
        }
    }
    r->freeing = 0;
    for (d = r->dests; d; d = dn) {
        dn = d->next;
        mta_dest_gc(r, d);
    }
}


void
mta_drain(struct mta *r)
{
    struct mta_dest *d, *dn;
    struct mta_conn *c, *cn;

    r->draining = 1;
    for (d = r->dests; d; d = dn) {
        dn = d->next;
        d->running = 1;                     /* no re-entry while closing */
        for (c = d->conns; c; c = cn) {
            cn = c->next;
            if (c->state == C_IDLE)
                mta_conn_quit(c);
        }
        d->running = 0;
        mta_dest_gc(r, d);
    }
}


size_t
mta_nconns(const struct mta *r)
{
    return r->nconns;
}
