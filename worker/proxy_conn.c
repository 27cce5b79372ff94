/*
 * proxy_conn.c - connections on a listener with proxy_protocol: the peer
 * check and the PROXY header, before the session exists.
 *
 * PURPOSE   A load balancer (HAProxy) connects on the client's behalf and
 *           first sends a PROXY v1 or v2 header naming the client.  Here
 *           the worker checks that the peer is in the listener's
 *           proxy_from, reads the header (proxy/proxy.h) within
 *           WPROXY_TIMEOUT_MS, and then admits the connection with the
 *           client's address (worker_admit): from there on admission
 *           limits, relay control, logs and Received: see the client, as
 *           if it had connected directly.
 * CONTRACT  Never reads a byte past the header: bytes are peeked, and only
 *           those proxy_parse() says belong to the header are consumed, so
 *           whatever the client sent early stays for the session.  A peer
 *           outside proxy_from is closed at once; a bad header, EOF or a
 *           header not complete within the timeout closes the connection.
 *           Each is counted (status: proxy_refused, proxy_bad) and logged
 *           once.  The greeting is sent only after the header.
 *           Waiting connections are on w->proxy_wait and in w->nproxy; a
 *           stopping worker waits for them like for sessions.
 * FAILURE   Never crashes on input; logs at the decision.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "proxy/proxy.h"
#include "worker/worker_int.h"

/* The header comes with the connection from a balancer on a LAN; a peer
 * that takes longer is broken or not a balancer.  Shorter than
 * limits.command_timeout when that is set lower (tests do). */
#define WPROXY_TIMEOUT_MS  5000

struct wproxy {
    struct worker          *w;
    struct wproxy          *prev, *next;    /* w->proxy_wait */
    int                     fd;
    unsigned                mode;           /* PROXY_V1|PROXY_V2 */
    const struct config_listen *l;          /* the listener */
    struct sockaddr_storage peer;
    socklen_t               peerlen;
    struct ev_timer         timer;
    struct proxy_hdr        hdr;
    size_t                  have;           /* header bytes consumed */
    size_t                  skip;           /* v2 TLV bytes left to drop */
    int                     parsed;         /* hdr is valid */
    unsigned char           buf[PROXY_NEED_MAX];
};


static void
wproxy_free(struct wproxy *p, int close_fd)
{
    struct worker *w = p->w;

    ev_timer_stop(w->loop, &p->timer);
    ev_unwatch(w->loop, p->fd);
    if (close_fd)
        close(p->fd);
    if (p->prev != NULL)
        p->prev->next = p->next;
    else
        w->proxy_wait = p->next;
    if (p->next != NULL)
        p->next->prev = p->prev;
    w->nproxy--;
    free(p);
}


/* wproxy_fail - a bad, short or slow header: count, log once, close. */
static void
wproxy_fail(struct wproxy *p, const char *why)
{
    struct worker *w = p->w;
    char           who[INET6_ADDRSTRLEN + 16];

    util_sockaddr_str((const struct sockaddr *)&p->peer, who, sizeof(who));
    STATUS_ADD(w->st->proxy_bad, 1);
    log_warn("proxy %s: %s; connection closed", who, why);
    wproxy_free(p, 1);
    worker_check_done(w);
}


/* wproxy_done - the header is read: admit the client it names. */
static void
wproxy_done(struct wproxy *p)
{
    struct worker          *w = p->w;
    struct sockaddr_storage client;
    socklen_t               clen;
    char                    who[INET6_ADDRSTRLEN + 16];
    char                    cl[INET6_ADDRSTRLEN + 16];
    int                     fd = p->fd;
    const struct config_listen *l = p->l;

    if (p->hdr.local && l->inject) {
        /* the API always names its HTTP client: the limits, logs and
         * events are that client's, and a unix peer is nobody's */
        wproxy_fail(p, "PROXY UNKNOWN on the injection socket");
        return;
    }
    if (p->hdr.local) {
        client = p->peer;
        clen = p->peerlen;
    } else {
        client = p->hdr.src;
        clen = p->hdr.srclen;
    }
    util_sockaddr_str((const struct sockaddr *)&p->peer, who, sizeof(who));
    util_sockaddr_str((const struct sockaddr *)&client, cl, sizeof(cl));
    if (!l->inject)             /* the API's: one per pooled connection */
        log_info("proxy %s: PROXY v%u for %s%s", who, p->hdr.version, cl,
            p->hdr.local ? " (no client address: the proxy itself)" : "");
    wproxy_free(p, 0);
    worker_admit(w, fd, &client, clen, l);
}


/* wproxy_skip - drop the v2 TLV bytes (not interpreted). */
static int
wproxy_skip(struct wproxy *p)
{
    char    junk[1024];
    ssize_t r;

    while (p->skip > 0) {
        r = recv(p->fd, junk, p->skip < sizeof(junk) ? p->skip :
            sizeof(junk), 0);
        if (r == 0) {
            wproxy_fail(p, "connection closed inside the PROXY header");
            return -1;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return 0;
            wproxy_fail(p, strerror(errno));
            return -1;
        }
        p->skip -= (size_t)r;
    }
    wproxy_done(p);
    return 0;
}


/* wproxy_step - peek what arrived, consume what belongs to the header. */
static void
wproxy_step(struct wproxy *p)
{
    const char *why;
    ssize_t     k, r;
    size_t      take;
    int         rc;

    if (p->parsed) {
        (void)wproxy_skip(p);
        return;
    }
    k = recv(p->fd, p->buf + p->have, sizeof(p->buf) - p->have, MSG_PEEK);
    if (k == 0) {
        wproxy_fail(p, "connection closed before the PROXY header");
        return;
    }
    if (k < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            wproxy_fail(p, strerror(errno));
        return;
    }
    rc = proxy_parse(p->buf, p->have + (size_t)k, p->mode, &p->hdr, &why);
    if (rc == PROXY_EBAD) {
        wproxy_fail(p, why);
        return;
    }
    /* AGAIN: every peeked byte is header; OK: up to hdr.len. */
    take = (size_t)k;
    if (rc == PROXY_OK && p->hdr.len < p->have + (size_t)k)
        take = p->hdr.len - p->have;
    r = recv(p->fd, p->buf + p->have, take, 0);
    if (r != (ssize_t)take) {
        wproxy_fail(p, r < 0 ? strerror(errno) : "short read of peeked "
            "bytes");
        return;
    }
    p->have += take;
    if (rc == PROXY_AGAIN)
        return;
    p->parsed = 1;
    p->skip = p->hdr.len - p->have;
    (void)wproxy_skip(p);
}


static void
wproxy_on_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    (void)loop;
    (void)fd;
    (void)events;
    wproxy_step(arg);
}


static void
wproxy_on_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop;
    (void)t;
    wproxy_fail(arg, "no complete PROXY header in time");
}


/* wproxy_timeout_ms - WPROXY_TIMEOUT_MS, or limits.command_timeout when
 * that is shorter. */
static uint64_t
wproxy_timeout_ms(const struct config *cfg)
{
    return cfg->command_timeout_ms < WPROXY_TIMEOUT_MS ?
        cfg->command_timeout_ms : WPROXY_TIMEOUT_MS;
}


void
wproxy_accept(struct worker *w, int fd, const struct sockaddr_storage *ss,
    socklen_t len, const struct config_listen *l)
{
    struct wproxy *p;
    char           who[INET6_ADDRSTRLEN + 16];
    size_t         i;

    /* The injection socket has no peer address to check: its mode (0600,
     * server.user's) admits only the API process. */
    for (i = 0; i < l->nproxy_from && !l->inject; i++)
        if (util_cidr_match(&l->proxy_from[i], (const struct sockaddr *)ss))
            break;
    if ((i == l->nproxy_from && !l->inject) ||
        w->nproxy >= (size_t)w->cfg->max_connections) {
        util_sockaddr_str((const struct sockaddr *)ss, who, sizeof(who));
        STATUS_ADD(w->st->proxy_refused, 1);
        log_warn("proxy listener %s: refused %s: %s", l->spec, who,
            i == l->nproxy_from && !l->inject ? "not in proxy_from" :
            "too many connections waiting for their PROXY header");
        close(fd);
        return;
    }
    p = xcalloc(1, sizeof(*p));
    p->w = w;
    p->fd = fd;
    p->mode = l->proxy;
    p->l = l;
    p->peer = *ss;
    p->peerlen = len;
    if (ev_watch(w->loop, fd, EV_READ, wproxy_on_io, p) < 0) {
        log_warn("epoll_ctl for a proxy connection: %s", strerror(errno));
        close(fd);
        free(p);
        return;
    }
    ev_timer_init(&p->timer, wproxy_on_timer, p);
    ev_timer_start(w->loop, &p->timer, wproxy_timeout_ms(w->cfg));
    p->next = w->proxy_wait;
    if (w->proxy_wait != NULL)
        w->proxy_wait->prev = p;
    w->proxy_wait = p;
    w->nproxy++;
}


void
wproxy_close_all(struct worker *w)
{
    while (w->proxy_wait != NULL)
        wproxy_free(w->proxy_wait, 1);
}


/* --- the injection socket --------------------------------------------- */

struct wproxy_inject {
    struct config_listen l;
    char                 spec[sizeof(((struct sockaddr_un *)0)->sun_path)];
};


int
worker_inject_init(struct worker *w)
{
    struct wproxy_inject *in;
    size_t                i = w->cfg->nlisten;

    if (w->nlisten <= i)
        return 0;                   /* the API is off */
    in = xcalloc(1, sizeof(*in));
    if (config_inject_listen(w->cfg, &in->l, in->spec, sizeof(in->spec)) < 0) {
        log_err("injection socket: path too long");
        free(in);
        return -1;
    }
    w->inject_l = &in->l;
    /* not TCP: never a setsockopt(TCP_NODELAY) per connection */
    w->lnodelay[i] = 1;
    return 0;
}


void
worker_inject_free(struct worker *w)
{
    free(w->inject_l);              /* the first member of its wproxy_inject */
    w->inject_l = NULL;
}
