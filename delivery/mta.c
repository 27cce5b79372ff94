/*
 * relay.c - the outbound SMTP client: one state machine per connection on
 * the worker's event loop, toward the hosts of an "smtp:" route.
 *
 * PURPOSE   Run the transactions deliver.c hands over: connect (fail-over
 *           through the route's hosts in order), greeting, EHLO (HELO on a
 *           5xx), MAIL/RCPT/DATA pipelined when offered, the body streamed
 *           from the queue file (dot-stuffed in one pass for DATA, sent
 *           as is with sendfile for BDAT), then the per-recipient results.
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
 *           on when the peer offers DSN; BDAT (sendfile, no stuffing) when
 *           it offers CHUNKING.  Sockets use TCP_NODELAY: every write is a
 *           whole batch of commands or body, so Nagle only adds delay.
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

/*
 * Per-phase timeouts: delivery.timeouts in relay.yaml (struct
 * config_mta_timeouts, set with mta_set_timeouts()); the defaults are RFC
 * 5321 4.5.3.2's minimums.  A stalled greeting or EHLO moves on to the
 * next host (mta_lost); a stall later defers the open recipients.
 */
#define MTA_IDLE_MS      (10 * 1000)       /* reuse window */
#define MTA_CHUNK        (128 * 1024)      /* body read size */
#define MTA_MAX_ADDRS    16
#define MTA_REPLY_LIMIT  (64 * 1024)       /* longest reply we accept */
#define MTA_WRITE_TURNS  8                 /* body refills per callback */

enum mta_state {
    C_CONNECT = 0, C_GREETING, C_EHLO, C_HELO, C_RSET, C_TXN, C_BODY,
    C_DOT, C_IDLE, C_QUIT
};

static const char *const mta_phase[] = {
    "connecting", "receiving the initial server greeting",
    "sending EHLO", "sending HELO", "sending RSET",
    "sending MAIL/RCPT/DATA", "sending message content",
    "waiting for the end of data reply", "idle", "sending QUIT"
};

/* per-recipient progress within a transaction */
enum { R_PENDING = 0, R_ACCEPTED, R_FINAL };

struct mta_dest;

struct mta_conn {
    struct relay      *r;
    struct mta_dest *dest;
    struct mta_conn *next;        /* dest->conns */
    int                fd;
    unsigned           watched;     /* EV_* mask given to the loop */
    int                state;
    int                reused;      /* has carried a transaction before */
    struct ev_timer    timer;
    struct buf         in, out;
    struct mta_hop     addr[MTA_MAX_ADDRS];
    size_t             naddr, cur;
    int                perm;        /* last greeting failure was 5xx */
    char               name[320];   /* "host[ip]:port" */
    char               lasterr[SMTP_REPLY_MAX];
    unsigned           caps;
    uint64_t           peer_size;
    /* the transaction in progress */
    struct mta_txn  *txn;
    unsigned char     *rst;         /* R_* per recipient */
    size_t             rst_cap;
    size_t             nreply;      /* replies received in this txn */
    size_t             expect;      /* commands sent, replies due */
    size_t             nsent;       /* commands of the txn sent */
    int                pipelining, bdat, mail_failed, empty_data;
    int                rset_pending; /* RSET pipelined ahead of MAIL */
    uint64_t           body_left;
    off_t              body_pos;
    struct smtp_stuff stuff;
};

struct mta_dest {
    struct mta_dest *next;
    char               key[ROUTE_TEXT_MAX];
    struct route       route;
    size_t             nconns;
    struct mta_conn *conns;
    struct mta_txn  *wait_head, *wait_tail;
    int                running;     /* inside mta_dest_run() */
};

struct relay {
    struct ev_loop    *loop;
    char              *helo;
    uint64_t           connect_timeout_ms;
    struct config_mta_timeouts t;   /* per-phase limits */
    unsigned           cap;
    int                draining;
    int                freeing;
    struct mta_dest *dests;
    size_t             nconns;
    char              *chunk;       /* MTA_CHUNK read buffer, shared */
    struct mta_txn  *posted;      /* finished, done() not yet called */
    struct ev_timer    post_timer;
};

static void mta_io(struct ev_loop *loop, int fd, unsigned ev, void *arg);
static int  mta_conn_next(struct mta_conn *c);
static void mta_dest_run(struct relay *r, struct mta_dest *d);
static void mta_connect_next(struct mta_conn *c);


/* ---- completion ---- */

/* mta_post_fire - call done() for the transactions finished this turn. */
static void
mta_post_fire(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct relay     *r = arg;
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
static void
mta_post(struct relay *r, struct mta_txn *t)
{
    t->next = r->posted;
    r->posted = t;
    if (!ev_timer_active(&r->post_timer))
        ev_timer_start(r->loop, &r->post_timer, 0);
}


/* mta_set - record a final result for recipient i of t. */
static void
mta_set(struct mta_txn *t, size_t i, int status, const char *reply,
    const char *relay)
{
    t->res[i].status = status;
    util_strlcpy(t->res[i].reply, reply, sizeof(t->res[i].reply));
    util_strlcpy(t->res[i].relay, relay, sizeof(t->res[i].relay));
}


/* mta_status_of - a reply code as a result: 2xx sent, 5xx bounced, else
 * deferred. */
static int
mta_status_of(int code)
{
    if (code >= 200 && code < 300)
        return MTA_SENT;
    if (code >= 500 && code < 600)
        return MTA_BOUNCE;
    return MTA_DEFER;
}


/* ---- destinations ---- */

static struct mta_dest *
mta_dest_get(struct relay *r, const char *key, const struct route *route)
{
    struct mta_dest *d;

    for (d = r->dests; d; d = d->next)
        if (strcmp(d->key, key) == 0)
            return d;
    d = xcalloc(1, sizeof(*d));
    util_strlcpy(d->key, key, sizeof(d->key));
    d->route = *route;
    d->next = r->dests;
    r->dests = d;
    return d;
}


/* mta_dest_gc - forget a destination with no connection and no queue. */
static void
mta_dest_gc(struct relay *r, struct mta_dest *d)
{
    struct mta_dest **pp;

    if (d->nconns > 0 || d->wait_head != NULL)
        return;
    for (pp = &r->dests; *pp; pp = &(*pp)->next) {
        if (*pp == d) {
            *pp = d->next;
            free(d);
            return;
        }
    }
}


static struct mta_txn *
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


static void
mta_dest_push_front(struct mta_dest *d, struct mta_txn *t)
{
    t->next = d->wait_head;
    d->wait_head = t;
    if (d->wait_tail == NULL)
        d->wait_tail = t;
}


/* ---- connections ---- */

/* mta_conn_close - close and free c; the caller has dealt with c->txn. */
static void
mta_conn_close(struct mta_conn *c)
{
    struct relay      *r = c->r;
    struct mta_dest *d = c->dest;
    struct mta_conn **pp;

    ev_timer_stop(r->loop, &c->timer);
    if (c->fd >= 0) {
        ev_unwatch(r->loop, c->fd);
        close(c->fd);
    }
    for (pp = &d->conns; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    d->nconns--;
    r->nconns--;
    buf_free(&c->in);
    buf_free(&c->out);
    free(c->rst);
    free(c);
    /* mta_dest_run() collects d when nothing is left; inside a run the
     * running loop does it */
    if (!r->freeing && !d->running)
        mta_dest_run(r, d);
}


/* mta_watch - tell the loop what to wait for, only when it changes (each
 * change is an epoll_ctl). */
static int
mta_watch(struct mta_conn *c, unsigned mask)
{
    if (c->watched == mask)
        return 0;
    c->watched = mask;
    return ev_watch(c->r->loop, c->fd, mask, mta_io, c);
}


/* mta_send - write what is buffered, as far as the socket takes it,
 * without touching what the loop watches.  Returns 0, or -1 with lasterr
 * set when the socket failed. */
static int
mta_send(struct mta_conn *c)
{
    while (buf_avail(&c->out) > 0) {
        ssize_t w = send(c->fd, buf_head(&c->out), buf_avail(&c->out),
            MSG_NOSIGNAL);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            snprintf(c->lasterr, sizeof(c->lasterr),
                "lost connection with %s while %s: %s", c->name,
                mta_phase[c->state], strerror(errno));
            return -1;
        }
        buf_consume(&c->out, (size_t)w);
    }
    if (buf_avail(&c->out) == 0)
        c->out.off = c->out.len = 0;
    return 0;
}


/* mta_flush - mta_send(), then watch for writability if some is left
 * (or the body is still being sent). */
static int
mta_flush(struct mta_conn *c)
{
    if (mta_send(c) < 0)
        return -1;
    mta_watch(c, EV_READ | (buf_avail(&c->out) > 0 ||
        c->state == C_BODY ? EV_WRITE : 0));
    return 0;
}


/* mta_cmd - queue one command line (no CRLF in fmt). */
static void __attribute__((format(printf, 2, 3)))
mta_cmd(struct mta_conn *c, const char *fmt, ...)
{
    va_list ap;

    /* buf_printf grows the buffer: a command is never cut (an ORCPT
     * and an ENVID encoded may pass 512 bytes, RFC 3461 5). */
    va_start(ap, fmt);
    buf_vprintf(&c->out, fmt, ap);
    va_end(ap);
    buf_append(&c->out, "\r\n", 2);
    c->expect++;
}


static void
mta_arm(struct mta_conn *c, uint64_t ms)
{
    ev_timer_start(c->r->loop, &c->timer, ms);
}


/* mta_fail_txn - the connection failed during a transaction: defer every
 * recipient without a final answer, close, and hand the txn back. */
static void
mta_fail_txn(struct mta_conn *c, const char *why)
{
    struct mta_txn *t = c->txn;
    size_t            i;
    /* c->rst describes t only once mta_begin() ran for it */
    int               begun = c->state == C_TXN || c->state == C_BODY ||
        c->state == C_DOT;

    if (t != NULL) {
        for (i = 0; i < t->nrcpt; i++)
            if (!begun || c->rst[i] != R_FINAL)
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
        for (i = 0; i < t->nrcpt; i++)
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
static void
mta_lost(struct mta_conn *c, const char *why)
{
    struct mta_txn *t = c->txn;

    switch (c->state) {
    case C_CONNECT:
    case C_GREETING:
    case C_EHLO:
    case C_HELO:
        util_strlcpy(c->lasterr, why, sizeof(c->lasterr));
        mta_connect_next(c);
        return;
    case C_TXN:
    case C_RSET:
        /* only a dead reused connection (no RSET reply) restarts */
        if (c->state == C_TXN && !c->rset_pending)
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
    struct relay *r = c->r;

    ev_timer_stop(r->loop, &c->timer);
    if (c->fd >= 0) {
        ev_unwatch(r->loop, c->fd);
        close(c->fd);
        c->fd = -1;
        c->watched = 0;
    }
    c->in.off = c->in.len = 0;
    c->out.off = c->out.len = 0;
    c->expect = 0;
    while (c->cur < c->naddr) {
        struct mta_hop  *a = &c->addr[c->cur++];
        int                one = 1;
        char               ip[INET6_ADDRSTRLEN + 8];

        if (c->cur > 1 && c->txn != NULL)
            log_info("%s: %s; trying the next host", c->txn->env->id,
                c->lasterr);
        snprintf(c->name, sizeof(c->name), "%s[%s]:%u", a->name,
            util_sockaddr_ip((struct sockaddr *)&a->ss, ip, sizeof(ip)),
            a->port);
        c->watched = 0;
        c->perm = 0;
        c->fd = socket(a->ss.ss_family,
            SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->fd < 0) {
            snprintf(c->lasterr, sizeof(c->lasterr), "connect to %s: %s",
                c->name, strerror(errno));
            continue;
        }
        if (connect(c->fd, (struct sockaddr *)&a->ss, a->len) < 0 &&
            errno != EINPROGRESS) {
            snprintf(c->lasterr, sizeof(c->lasterr), "connect to %s: %s",
                c->name, strerror(errno));
            close(c->fd);
            c->fd = -1;
            continue;
        }
        /* commands go out whole, in one write each: no Nagle delays */
        (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->state = C_CONNECT;
        if (mta_watch(c, EV_WRITE) < 0) {
            snprintf(c->lasterr, sizeof(c->lasterr), "connect to %s: %s",
                c->name, strerror(errno));
            close(c->fd);
            c->fd = -1;
            continue;
        }
        mta_arm(c, r->connect_timeout_ms);
        return;
    }
    c->state = C_CONNECT;
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
static void
mta_connected(struct mta_conn *c)
{
    int       err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err != 0) {
        snprintf(c->lasterr, sizeof(c->lasterr), "connect to %s: %s",
            c->name, strerror(err));
        mta_connect_next(c);
        return;
    }
    c->state = C_GREETING;
    (void)mta_watch(c, EV_READ);
    mta_arm(c, c->r->t.greeting_ms);
}


/* ---- the transaction ---- */

/* mta_need_utf8 - does the envelope need SMTPUTF8 at the next hop? */
static int
mta_need_utf8(const struct mta_txn *t)
{
    return t->env->smtputf8 != 0;
}


/* mta_reject_all - a verdict for the whole txn before any command. */
static void
mta_reject_all(struct mta_conn *c, struct mta_txn *t, const char *why)
{
    size_t i;

    for (i = 0; i < t->nrcpt; i++)
        mta_set(t, i, MTA_BOUNCE, why, c->name);
    mta_post(c->r, t);
}


/* mta_rcpt_cmd - queue "RCPT TO:<a>" with DSN parameters when offered. */
static void
mta_rcpt_cmd(struct mta_conn *c, size_t k)
{
    const struct spool_rcpt *rc = &c->txn->env->rcpt[c->txn->rcpt[k]];
    char                     notify[64] = "";
    char                     orcpt[8 + 3 * SMTP_ORCPT_MAX] = "";

    if (c->caps & SMTP_CAP_DSN) {
        if (rc->notify & SMTP_NOTIFY_NEVER) {
            util_strlcpy(notify, " NOTIFY=NEVER", sizeof(notify));
        } else if (rc->notify) {
            snprintf(notify, sizeof(notify), " NOTIFY=%s%s%s%s%s",
                rc->notify & SMTP_NOTIFY_SUCCESS ? "SUCCESS" : "",
                (rc->notify & SMTP_NOTIFY_SUCCESS) &&
                (rc->notify & (SMTP_NOTIFY_FAILURE | SMTP_NOTIFY_DELAY)) ?
                "," : "",
                rc->notify & SMTP_NOTIFY_FAILURE ? "FAILURE" : "",
                (rc->notify & SMTP_NOTIFY_FAILURE) &&
                (rc->notify & SMTP_NOTIFY_DELAY) ? "," : "",
                rc->notify & SMTP_NOTIFY_DELAY ? "DELAY" : "");
        }
        if (rc->orcpt != NULL) {
            memcpy(orcpt, " ORCPT=", 7);
            if (smtp_xtext_encode(rc->orcpt, orcpt + 7,
                sizeof(orcpt) - 7) < 0)
                orcpt[0] = '\0';   /* cannot be: ORCPT is capped at parse */
        }
    }
    mta_cmd(c, "RCPT TO:<%s>%s%s", rc->addr, notify, orcpt);
}


/* mta_precheck - can t go to this peer at all?  Returns 0, or -1 when t
 * was finished (bounced) without a command; c stays usable. */
static int
mta_precheck(struct mta_conn *c, struct mta_txn *t)
{
    const struct spool_env *env = t->env;
    char                    why[SMTP_REPLY_MAX];

    if (mta_need_utf8(t) && !(c->caps & SMTP_CAP_SMTPUTF8)) {
        snprintf(why, sizeof(why), "553 5.6.7 SMTPUTF8 is required, but "
            "was not offered by host %s", c->name);
        mta_reject_all(c, t, why);
        return -1;
    }
    if (env->body == SMTP_BODY_BINARYMIME &&
        (c->caps & (SMTP_CAP_CHUNKING | SMTP_CAP_BINARYMIME)) !=
        (SMTP_CAP_CHUNKING | SMTP_CAP_BINARYMIME)) {
        snprintf(why, sizeof(why), "554 5.6.3 binary content requires "
            "BINARYMIME, but it was not offered by host %s", c->name);
        mta_reject_all(c, t, why);
        return -1;
    }
    return 0;
}


/* mta_begin - queue the commands of t on c (session ready, prechecked),
 * behind an RSET when rset is set (a reused connection with PIPELINING). */
static void
mta_begin(struct mta_conn *c, struct mta_txn *t, int rset)
{
    const struct spool_env *env = t->env;
    char                    size[40] = "", body[24] = "";
    size_t                  k;

    c->rset_pending = rset;
    if (rset)
        mta_cmd(c, "RSET");
    if (t->nrcpt > c->rst_cap) {
        free(c->rst);
        c->rst = xcalloc(t->nrcpt, 1);
        c->rst_cap = t->nrcpt;
    }
    memset(c->rst, R_PENDING, t->nrcpt);
    c->txn = t;
    t->accepted = 0;
    c->nreply = 0;
    c->nsent = 0;
    c->mail_failed = 0;
    c->empty_data = 0;
    c->pipelining = (c->caps & SMTP_CAP_PIPELINING) != 0;
    c->bdat = (c->caps & SMTP_CAP_CHUNKING) != 0;
    if (c->caps & SMTP_CAP_SIZE)
        snprintf(size, sizeof(size), " SIZE=%llu",
            (unsigned long long)env->body_size);
    if (env->body == SMTP_BODY_BINARYMIME)
        util_strlcpy(body, " BODY=BINARYMIME", sizeof(body));
    else if (env->body == SMTP_BODY_8BITMIME &&
        (c->caps & SMTP_CAP_8BITMIME))
        util_strlcpy(body, " BODY=8BITMIME", sizeof(body));
    {
        char extra[16 + 3 * SMTP_ENVID_MAX] = "";

        if (c->caps & SMTP_CAP_DSN) {
            if (env->ret != SMTP_RET_NONE)
                snprintf(extra, sizeof(extra), " RET=%s",
                    env->ret == SMTP_RET_FULL ? "FULL" : "HDRS");
            if (env->envid != NULL) {
                size_t o = strlen(extra);

                o += (size_t)snprintf(extra + o, sizeof(extra) - o,
                    " ENVID=");
                if (smtp_xtext_encode(env->envid, extra + o,
                    sizeof(extra) - o) < 0)
                    extra[o - 7] = '\0';   /* ENVID is capped at parse */
            }
        }
        mta_cmd(c, "MAIL FROM:<%s>%s%s%s%s", env->sender, size, body,
            mta_need_utf8(t) ? " SMTPUTF8" : "", extra);
    }
    c->nsent = 1;
    if (c->pipelining) {
        for (k = 0; k < t->nrcpt; k++)
            mta_rcpt_cmd(c, k);
        c->nsent += t->nrcpt;
        if (!c->bdat) {
            mta_cmd(c, "DATA");
            c->nsent++;
        }
    }
    c->state = C_TXN;
    mta_arm(c, rset ? c->r->t.helo_ms : c->r->t.mail_ms);
}


/* mta_idle - the transaction is over and every reply is in: hand the
 * txn back and reuse c.  Returns 1 when c was closed. */
static int
mta_idle(struct mta_conn *c)
{
    struct mta_txn *t = c->txn;

    c->txn = NULL;
    c->reused = 1;
    if (t != NULL)
        mta_post(c->r, t);
    return mta_conn_next(c);
}


/*
 * mta_conn_next - c is ready for a transaction: the one it was opened
 * for, else the next waiting one (after an RSET on a used connection).
 * With none, park c idle, or close it when draining.  Returns 1 when c was
 * closed.
 */
static int
mta_conn_next(struct mta_conn *c)
{
    struct mta_txn *t = c->txn;

    c->txn = NULL;
    for (;;) {
        if (t == NULL)
            t = mta_dest_pop(c->dest);
        if (t == NULL)
            break;
        if (mta_precheck(c, t) < 0) {
            t = NULL;
            continue;
        }
        if (c->reused && !(c->caps & SMTP_CAP_PIPELINING)) {
            /* RSET alone first; MAIL follows its reply */
            c->txn = t;
            mta_cmd(c, "RSET");
            c->state = C_RSET;
            mta_arm(c, c->r->t.helo_ms);
        } else {
            mta_begin(c, t, c->reused);
        }
        if (mta_flush(c) < 0) {
            mta_lost(c, c->lasterr);
            return 1;
        }
        return 0;
    }
    if (c->r->draining) {
        mta_cmd(c, "QUIT");
        (void)send(c->fd, buf_head(&c->out), buf_avail(&c->out),
            MSG_NOSIGNAL | MSG_DONTWAIT);
        mta_conn_close(c);
        return 1;
    }
    c->state = C_IDLE;
    c->expect = 0;
    (void)mta_watch(c, EV_READ);
    mta_arm(c, MTA_IDLE_MS);
    return 0;
}


/* mta_body_start - 354 received (DATA) or RCPTs accepted (BDAT). */
static void
mta_body_start(struct mta_conn *c)
{
    c->state = C_BODY;
    c->body_left = c->txn->env->body_size;
    c->body_pos = c->txn->body_off;
    smtp_stuff_init(&c->stuff);
    if (c->bdat) {
        mta_cmd(c, "BDAT %llu LAST", (unsigned long long)c->body_left);
        c->expect--;                        /* counted when the body ends */
    }
    mta_arm(c, c->r->t.data_xfer_ms);
}


/*
 * mta_body_write - move body bytes toward the socket.  DATA: pread a
 * 128 KiB chunk, stuff it into the out buffer, send; BDAT: send the
 * command line, then sendfile() straight from the queue file.  Stops at
 * EAGAIN or after MTA_WRITE_TURNS chunks so one big message does not
 * hold the loop.  Writability is watched only when it has to wait: a
 * body that goes out in one call costs no epoll_ctl() on and off.
 */
static int
mta_body_write(struct mta_conn *c)
{
    int turns;

    for (turns = 0; turns < MTA_WRITE_TURNS; turns++) {
        if (buf_avail(&c->out) > 0) {
            if (mta_send(c) < 0)
                return -1;
            if (buf_avail(&c->out) > 0) {   /* EAGAIN */
                (void)mta_watch(c, EV_READ | EV_WRITE);
                return 0;
            }
        }
        if (c->body_left == 0) {
            if (!c->bdat) {
                char end[5];
                size_t n = smtp_stuff_end(&c->stuff, end);

                buf_append(&c->out, end, n);
            }
            c->expect++;
            c->state = C_DOT;
            mta_arm(c, c->r->t.data_done_ms);
            return mta_flush(c);
        }
        if (c->bdat) {
            ssize_t w = sendfile(c->fd, c->txn->fd, &c->body_pos,
                c->body_left > MTA_CHUNK * 4 ? MTA_CHUNK * 4 :
                c->body_left);

            if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
                (void)mta_watch(c, EV_READ | EV_WRITE);
                return 0;
            }
            if (w <= 0) {
                snprintf(c->lasterr, sizeof(c->lasterr),
                    "lost connection with %s while sending message "
                    "content: %s", c->name,
                    w < 0 ? strerror(errno) : "queue file truncated");
                return -1;
            }
            c->body_left -= (uint64_t)w;
        } else {
            size_t  want = c->body_left > MTA_CHUNK ? MTA_CHUNK :
                (size_t)c->body_left;
            ssize_t n = pread(c->txn->fd, c->r->chunk, want, c->body_pos);

            if (n <= 0) {
                snprintf(c->lasterr, sizeof(c->lasterr),
                    "cannot read the queue file: %s",
                    n < 0 ? strerror(errno) : "truncated");
                return -1;
            }
            c->body_pos += n;
            c->body_left -= (uint64_t)n;
            buf_compact(&c->out);
            (void)buf_reserve(&c->out, SMTP_STUFF_ROOM((size_t)n) + 5);
            buf_produce(&c->out, smtp_stuff(&c->stuff, c->r->chunk,
                (size_t)n, buf_tail(&c->out)));
            if (c->body_left == 0) {
                /* the end of data rides in the same write as the last
                 * chunk: a separate small segment would wait for the
                 * peer's delayed ACK */
                buf_produce(&c->out, smtp_stuff_end(&c->stuff,
                    buf_tail(&c->out)));
                c->expect++;
                c->state = C_DOT;
                mta_arm(c, c->r->t.data_done_ms);
                return mta_flush(c);
            }
        }
        mta_arm(c, c->r->t.data_xfer_ms);
    }
    /* turns used up with body left: go on when the socket takes more */
    if (mta_send(c) < 0)
        return -1;
    (void)mta_watch(c, EV_READ | EV_WRITE);
    return 0;
}


/* mta_final - apply a final reply to every accepted recipient. */
static void
mta_final(struct mta_conn *c, const struct smtp_reply *rp)
{
    struct mta_txn *t = c->txn;
    size_t            i;

    for (i = 0; i < t->nrcpt; i++) {
        if (c->rst[i] == R_ACCEPTED) {
            mta_set(t, i, mta_status_of(rp->code), rp->text, c->name);
            c->rst[i] = R_FINAL;
        }
    }
}


/* mta_t_reply - the limit for reply k of a transaction: 0 MAIL, 1..nrcpt
 * RCPT, then DATA. */
static uint64_t
mta_t_reply(const struct mta_conn *c, size_t k)
{
    if (k == 0)
        return c->r->t.mail_ms;
    return k <= c->txn->nrcpt ? c->r->t.rcpt_ms : c->r->t.data_ms;
}


/* mta_txn_reply - one reply within MAIL/RCPT/DATA.  Returns 1 when c
 * was closed. */
static int
mta_txn_reply(struct mta_conn *c, const struct smtp_reply *rp)
{
    struct mta_txn *t = c->txn;
    size_t            k = c->nreply++;
    size_t            i;

    if (k == 0) {                           /* MAIL */
        if (rp->code / 100 != 2) {
            c->mail_failed = 1;
            for (i = 0; i < t->nrcpt; i++) {
                mta_set(t, i, mta_status_of(rp->code), rp->text,
                    c->name);
                c->rst[i] = R_FINAL;
            }
        }
    } else if (k <= t->nrcpt) {             /* RCPT k-1 */
        i = k - 1;
        if (!c->mail_failed) {
            if (rp->code / 100 == 2) {
                c->rst[i] = R_ACCEPTED;
                t->accepted++;
            } else {
                mta_set(t, i, mta_status_of(rp->code), rp->text,
                    c->name);
                c->rst[i] = R_FINAL;
            }
        }
    } else {                                /* DATA */
        if (rp->code == 354) {
            if (t->accepted > 0) {
                mta_body_start(c);
                if (mta_body_write(c) < 0) {
                    mta_lost(c, c->lasterr);
                    return 1;
                }
                return 0;
            }
            /* nobody to send to, but the peer wants data: end it empty */
            buf_append(&c->out, ".\r\n", 3);
            c->expect++;
            c->empty_data = 1;
            c->state = C_DOT;
            mta_arm(c, c->r->t.data_done_ms);
            if (mta_flush(c) < 0) {
                mta_lost(c, c->lasterr);
                return 1;
            }
            return 0;
        }
        mta_final(c, rp);
    }
    if (c->expect > 0) {
        mta_arm(c, mta_t_reply(c, k + 1));
        return 0;
    }
    /* every reply to what was sent is in: send the next step */
    if (c->mail_failed)
        return mta_idle(c);
    if (c->nsent <= t->nrcpt) {             /* not pipelining: next RCPT */
        mta_rcpt_cmd(c, c->nsent - 1);
        c->nsent++;
    } else if (c->nsent == t->nrcpt + 1 && t->accepted > 0) {
        c->nsent++;
        if (c->bdat) {
            mta_body_start(c);
            if (mta_body_write(c) < 0) {
                mta_lost(c, c->lasterr);
                return 1;
            }
            return 0;
        }
        mta_cmd(c, "DATA");
    } else {
        return mta_idle(c);               /* done, or nobody accepted */
    }
    mta_arm(c, mta_t_reply(c, c->nreply));
    if (mta_flush(c) < 0) {
        mta_lost(c, c->lasterr);
        return 1;
    }
    return 0;
}


/* mta_reply - dispatch one complete reply (raw: its bytes, for EHLO) by
 * state.  Returns 1 when c was closed or restarted (stop parsing). */
static int
mta_reply(struct mta_conn *c, const struct smtp_reply *rp,
    const char *raw)
{
    char why[1024];

    if (c->expect == 0 && c->state != C_GREETING) {
        /* unsolicited (e.g. 421 on an idle connection) */
        snprintf(why, sizeof(why), "host %s said: %s", c->name, rp->text);
        mta_lost(c, why);
        return 1;
    }
    if (c->expect > 0)
        c->expect--;
    switch (c->state) {
    case C_GREETING:
        if (rp->code / 100 != 2) {
            /* a 5xx greeting moves on like a 4xx one; only from the last
             * address does it bounce (Postfix), with the reply first so
             * that the DSN carries its status code */
            c->perm = rp->code / 100 == 5;
            if (c->perm)
                snprintf(why, sizeof(why), "%s (host %s refused to talk to "
                    "me)", rp->text, c->name);
            else
                snprintf(why, sizeof(why), "host %s refused to talk to me: "
                    "%s", c->name, rp->text);
            mta_lost(c, why);
            return 1;
        }
        mta_cmd(c, "EHLO %s", c->r->helo);
        c->state = C_EHLO;
        break;
    case C_EHLO:
        if (rp->code / 100 == 2) {
            c->caps = smtp_ehlo_caps(raw, rp->len, &c->peer_size);
            return mta_conn_next(c);
        }
        if (rp->code / 100 == 5) {
            mta_cmd(c, "HELO %s", c->r->helo);
            c->state = C_HELO;
            break;
        }
        snprintf(why, sizeof(why), "host %s said: %s (in reply to EHLO)",
            c->name, rp->text);
        mta_lost(c, why);
        return 1;
    case C_HELO:
        if (rp->code / 100 == 2) {
            c->caps = 0;
            return mta_conn_next(c);
        }
        snprintf(why, sizeof(why), "host %s said: %s (in reply to HELO)",
            c->name, rp->text);
        mta_lost(c, why);
        return 1;
    case C_RSET:
        if (rp->code / 100 != 2) {
            snprintf(why, sizeof(why), "host %s said: %s (in reply to RSET)",
                c->name, rp->text);
            mta_lost(c, why);
            return 1;
        }
        mta_begin(c, c->txn, 0);
        break;
    case C_TXN:
        if (c->rset_pending) {
            c->rset_pending = 0;
            if (rp->code / 100 != 2) {
                snprintf(why, sizeof(why), "host %s said: %s (in reply to "
                    "RSET)", c->name, rp->text);
                c->rset_pending = 1;        /* restart like a dead conn */
                mta_lost(c, why);
                return 1;
            }
            return 0;
        }
        return mta_txn_reply(c, rp);
    case C_QUIT:
        mta_conn_close(c);
        return 1;
    case C_DOT:
        if (!c->empty_data)
            mta_final(c, rp);
        return mta_idle(c);
    default:
        snprintf(why, sizeof(why), "unexpected reply from %s: %s", c->name,
            rp->text);
        mta_lost(c, why);
        return 1;
    }
    mta_arm(c, c->state == C_TXN ? c->r->t.mail_ms : c->r->t.helo_ms);
    if (mta_flush(c) < 0) {
        mta_lost(c, c->lasterr);
        return 1;
    }
    return 0;
}


/* mta_read - read, then handle every complete reply in the buffer. */
static void
mta_read(struct mta_conn *c)
{
    char    why[SMTP_REPLY_MAX + 64];
    ssize_t n;

    (void)buf_reserve(&c->in, 8192);
    n = recv(c->fd, buf_tail(&c->in), buf_room(&c->in), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        snprintf(why, sizeof(why), "lost connection with %s while %s%s%s",
            c->name, mta_phase[c->state], n < 0 ? ": " : "",
            n < 0 ? strerror(errno) : "");
        mta_lost(c, why);
        return;
    }
    buf_produce(&c->in, (size_t)n);
    for (;;) {
        struct smtp_reply rp;
        const char        *raw = buf_head(&c->in);
        int                rc = smtp_reply_parse(raw, buf_avail(&c->in),
            MTA_REPLY_LIMIT, &rp);

        if (rc == 0)
            break;
        if (rc < 0) {
            snprintf(why, sizeof(why), "malformed reply from %s while %s",
                c->name, mta_phase[c->state]);
            mta_lost(c, why);
            return;
        }
        /* consume first: the bytes stay readable at raw until the next
         * change to c->in, and c may be freed by the handler */
        buf_consume(&c->in, rp.len);
        if (mta_reply(c, &rp, raw))
            return;
    }
    if (buf_avail(&c->in) == 0)
        c->in.off = c->in.len = 0;
}


static void
mta_io(struct ev_loop *loop, int fd, unsigned ev, void *arg)
{
    struct mta_conn *c = arg;

    (void)loop;
    (void)fd;
    if (c->state == C_CONNECT) {
        mta_connected(c);
        return;
    }
    if (ev & (EV_READ | EV_ERROR)) {
        mta_read(c);
        return;                 /* c may be gone; writes come next turn */
    }
    if (ev & EV_WRITE) {
        if (c->state == C_BODY) {
            if (mta_body_write(c) < 0)
                mta_lost(c, c->lasterr);
        } else if (mta_flush(c) < 0) {
            mta_lost(c, c->lasterr);
        }
    }
}


static void
mta_timeout(struct ev_loop *loop, struct ev_timer *tm, void *arg)
{
    struct mta_conn *c = arg;
    char               why[1024];

    (void)loop;
    (void)tm;
    if (c->state == C_IDLE) {
        /* the reuse window is over: QUIT, and wait for its reply at most
         * delivery.timeouts.quit (the slot stays counted until then) */
        mta_cmd(c, "QUIT");
        if (mta_send(c) < 0 || buf_avail(&c->out) > 0) {
            mta_conn_close(c);
            return;
        }
        c->state = C_QUIT;
        mta_arm(c, c->r->t.quit_ms);
        return;
    }
    if (c->state == C_QUIT) {
        mta_conn_close(c);
        return;
    }
    if (c->state == C_CONNECT)
        snprintf(why, sizeof(why), "connect to %s: Connection timed out",
            c->name);
    else
        snprintf(why, sizeof(why), "conversation with %s timed out while %s",
            c->name, mta_phase[c->state]);
    mta_lost(c, why);
}


/* mta_conn_new - open a connection to d for t (t rides along until the
 * session is set up, or fails with the connection). */
static void
mta_conn_new(struct relay *r, struct mta_dest *d, struct mta_txn *t)
{
    struct mta_conn *c = xcalloc(1, sizeof(*c));

    c->r = r;
    c->dest = d;
    c->fd = -1;
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
 * connections (the helo name is one per relay, and outbound TLS does not
 * exist yet, so address and port are the whole identity).  Among several,
 * the one earliest in t's order wins.
 */
static struct mta_conn *
mta_adopt(struct relay *r, struct mta_dest *d, const struct mta_txn *t)
{
    struct mta_dest *od;
    struct mta_conn *c, *best = NULL, **pp;
    size_t           k, bestk = SIZE_MAX;

    for (od = r->dests; od; od = od->next) {
        if (od == d || od->running)
            continue;
        for (c = od->conns; c; c = c->next) {
            if (c->state != C_IDLE || c->cur == 0)
                continue;
            for (k = 0; k < t->nhops && k < bestk; k++) {
                if (mta_same_addr(&c->addr[c->cur - 1].ss, &t->hops[k].ss)) {
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
    mta_dest_gc(r, od);
    return best;
}


/* mta_dest_run - start waiting transactions on idle connections, or on
 * new ones while under the cap. */
static void
mta_dest_run(struct relay *r, struct mta_dest *d)
{
    struct mta_conn *c;

    if (d->running)
        return;
    d->running = 1;
    while (d->wait_head != NULL) {
        for (c = d->conns; c; c = c->next)
            if (c->state == C_IDLE)
                break;
        if (c == NULL && d->nconns < r->cap)
            c = mta_adopt(r, d, d->wait_head);
        if (c != NULL) {
            (void)mta_conn_next(c);
            continue;
        }
        if (d->nconns >= r->cap)
            break;
        mta_conn_new(r, d, mta_dest_pop(d));
    }
    d->running = 0;
    mta_dest_gc(r, d);
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


struct relay *
mta_new(struct ev_loop *loop, const char *helo_name,
    uint64_t connect_timeout_ms, unsigned conns_per_dest)
{
    struct relay *r = xcalloc(1, sizeof(*r));

    r->loop = loop;
    r->helo = xstrdup(helo_name);
    r->connect_timeout_ms = connect_timeout_ms ? connect_timeout_ms : 30000;
    r->cap = conns_per_dest ? conns_per_dest : 1;
    r->t.greeting_ms = r->t.helo_ms = r->t.mail_ms = r->t.rcpt_ms =
        r->t.quit_ms = 5 * 60 * 1000;
    r->t.data_ms = 2 * 60 * 1000;
    r->t.data_xfer_ms = 3 * 60 * 1000;
    r->t.data_done_ms = 10 * 60 * 1000;
    r->chunk = xmalloc(MTA_CHUNK);
    ev_timer_init(&r->post_timer, mta_post_fire, r);
    return r;
}


void
mta_set_timeouts(struct relay *r, const struct config_mta_timeouts *t)
{
    r->t = *t;
}


void
mta_free(struct relay *r)
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
        free(d);
    }
    free(r->chunk);
    free(r->helo);
    free(r);
}


void
mta_submit(struct relay *r, struct mta_txn *t)
{
    struct mta_dest *d = mta_dest_get(r, t->dest, t->route);
    size_t             i;

    for (i = 0; i < t->nrcpt; i++)
        mta_set(t, i, MTA_DEFER, "not attempted", "none");
    t->next = NULL;
    t->restarts = 0;
    t->accepted = 0;
    t->cut = 0;
    if (d->wait_tail)
        d->wait_tail->next = t;
    else
        d->wait_head = t;
    d->wait_tail = t;
    mta_dest_run(r, d);
}


void
mta_abort(struct relay *r, uint64_t dot_grace_ms)
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
mta_drain(struct relay *r)
{
    struct mta_dest *d, *dn;
    struct mta_conn *c, *cn;

    r->draining = 1;
    for (d = r->dests; d; d = dn) {
        dn = d->next;
        d->running = 1;                     /* no re-entry while closing */
        for (c = d->conns; c; c = cn) {
            cn = c->next;
            if (c->state == C_IDLE) {
                mta_cmd(c, "QUIT");
                (void)send(c->fd, buf_head(&c->out), buf_avail(&c->out),
                    MSG_NOSIGNAL | MSG_DONTWAIT);
                mta_conn_close(c);
            }
        }
        d->running = 0;
        mta_dest_gc(r, d);
    }
}


size_t
mta_nconns(const struct relay *r)
{
    return r->nconns;
}
