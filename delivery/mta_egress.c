/*
 * mta_egress.c - where mail leaves from: the egress sources (a local
 * address to bind, its own EHLO name) and the weighted pools of them
 * (relay.yaml egress:, config_egress.c).
 *
 * PURPOSE   Pick the source of each new connection of a destination
 *           (whose key includes its pool), bind it before connect(), say
 *           its EHLO name, and keep each pool's split of messages at its
 *           weights.
 * SPLIT     Per message, not per connection: a connection carries many
 *           messages, so picking well at connect time alone would split
 *           by connections.  Each pool member holds a credit: when a
 *           connection of source s takes a message of the pool, every
 *           usable member gains its weight and s loses the sum (smooth
 *           weighted round robin, as nginx's upstreams, counted on what
 *           was taken).  A new connection comes from the usable source
 *           owed most; a connection whose source is over its share by
 *           more than MTA_EGRESS_SLACK messages while another is owed
 *           one closes instead of taking the next message, so the slot
 *           goes to the one owed (mta_egress_fair).  The error stays
 *           within the slack: a few messages in thousands.
 * GONE      bind() failing with EADDRNOTAVAIL means the address is no
 *           longer on this host: the source is taken out of every pool
 *           with one log line (per worker), not tried per message; a
 *           timer (egress.recheck_interval) binds a test socket and puts
 *           it back with one line.  A reload starts with every source in.
 *           A pool with no usable source defers its mail with "451 4.4.0
 *           no usable egress source in pool X".
 * BIND      IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect(), by
 *           the full 4-tuple, so thousands of connections from one
 *           source do not exhaust its ephemeral ports on bind().  No
 *           IP_FREEBIND: binding an address that is not there must fail,
 *           that is how a gone source is seen.  The family must be the
 *           hop's: an IPv4 source skips IPv6 hops and the other way.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "delivery/mta.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define MTA_EGRESS_CLAMP 64         /* credits stay within this many
                                       rounds: a source held back for long
                                       (shaping) does not take every
                                       message afterwards */

static void mta_egress_recheck(struct ev_loop *loop, struct ev_timer *tm,
            void *arg);


/* mta_egress_implicit - one source "default" binding nothing, in one pool
 * "default": today's behaviour. */
static void
mta_egress_implicit(struct mta *r)
{
    r->src = xcalloc(1, sizeof(*r->src));
    util_strlcpy(r->src[0].name, "default", sizeof(r->src[0].name));
    r->nsrc = 1;
    r->pools = xcalloc(1, sizeof(*r->pools));
    util_strlcpy(r->pools[0].name, "default", sizeof(r->pools[0].name));
    r->pools[0].m = xcalloc(1, sizeof(*r->pools[0].m));
    r->pools[0].m[0].weight = 1;
    r->pools[0].nm = 1;
    r->npools = 1;
    r->recheck_ms = 60000;
    ev_timer_init(&r->recheck_timer, mta_egress_recheck, r);
}


void
mta_egress_free(struct mta *r)
{
    size_t i;

    if (r->src == NULL)
        return;
    ev_timer_stop(r->loop, &r->recheck_timer);
    for (i = 0; i < r->nsrc; i++)
        free(r->src[i].ehlo);
    free(r->src);
    for (i = 0; i < r->npools; i++)
        free(r->pools[i].m);
    free(r->pools);
    r->src = NULL;
    r->pools = NULL;
    r->nsrc = r->npools = 0;
}


/*
 * mta_set_egress - the sources and pools of cfg, the default pool first
 * (index 0), so a txn whose pool was never set goes through it.
 */
void
mta_set_egress(struct mta *r, const struct config *cfg)
{
    size_t i, j, k;

    mta_egress_free(r);
    if (cfg == NULL || cfg->negress_sources == 0) {
        mta_egress_implicit(r);
        if (cfg != NULL)
            r->recheck_ms = cfg->egress_recheck_ms;
        return;
    }
    r->nsrc = cfg->negress_sources;
    r->src = xcalloc(r->nsrc, sizeof(*r->src));
    for (i = 0; i < r->nsrc; i++) {
        const struct config_egress_source *s = &cfg->egress_sources[i];

        util_strlcpy(r->src[i].name, s->name, sizeof(r->src[i].name));
        r->src[i].ehlo = xstrdup(s->ehlo);
        memcpy(&r->src[i].ss, &s->addr, sizeof(s->addr));
        r->src[i].len = s->addrlen;
    }
    r->npools = cfg->negress_pools;
    r->pools = xcalloc(r->npools, sizeof(*r->pools));
    for (i = 0; i < r->npools; i++) {
        /* the default pool at 0, the others in their order after it */
        k = i == 0 ? cfg->egress_default : i <= cfg->egress_default ? i - 1
            : i;
        util_strlcpy(r->pools[i].name, cfg->egress_pools[k].name,
            sizeof(r->pools[i].name));
        r->pools[i].nm = cfg->egress_pools[k].nm;
        r->pools[i].m = xcalloc(r->pools[i].nm, sizeof(*r->pools[i].m));
        for (j = 0; j < r->pools[i].nm; j++) {
            r->pools[i].m[j].src = (int)cfg->egress_pools[k].m[j].source;
            r->pools[i].m[j].weight = (int)cfg->egress_pools[k].m[j].weight;
        }
    }
    r->recheck_ms = cfg->egress_recheck_ms ? cfg->egress_recheck_ms : 60000;
    ev_timer_init(&r->recheck_timer, mta_egress_recheck, r);
}


int
mta_egress_pool(const struct mta *r, const char *name)
{
    size_t i;

    if (name == NULL || name[0] == '\0')
        return 0;
    for (i = 0; i < r->npools; i++)
        if (strcmp(r->pools[i].name, name) == 0)
            return (int)i;
    return -1;
}


const char *
mta_egress_pool_name(const struct mta *r, int pool)
{
    return pool >= 0 && (size_t)pool < r->npools ? r->pools[pool].name : "?";
}


const char *
mta_source_name(const struct mta *r, int src)
{
    return src >= 0 && (size_t)src < r->nsrc ? r->src[src].name : "?";
}


const char *
mta_egress_helo(const struct mta_conn *c)
{
    const struct mta_src *s = &c->r->src[c->src];

    return s->ehlo != NULL ? s->ehlo : c->r->helo;
}


/* mta_egress_of - d's pool (the default one when out of range). */
static struct mta_pool *
mta_egress_of(const struct mta *r, const struct mta_dest *d)
{
    return &r->pools[d->pool >= 0 && (size_t)d->pool < r->npools ?
        d->pool : 0];
}


size_t
mta_egress_nsrc(const struct mta *r)
{
    return r->nsrc;
}


int
mta_egress_first(const struct mta *r, const struct mta_dest *d)
{
    const struct mta_pool *pl = mta_egress_of(r, d);

    return pl->nm > 0 ? pl->m[0].src : 0;
}


size_t
mta_egress_sources(const struct mta *r, const struct mta_dest *d, int *out,
    size_t max)
{
    const struct mta_pool *pl = mta_egress_of(r, d);
    size_t                 i, n = 0;

    for (i = 0; i < pl->nm && n < max; i++)
        if (!r->src[pl->m[i].src].down)
            out[n++] = pl->m[i].src;
    return n;
}


int
mta_egress_pick(struct mta *r, struct mta_dest *d, mta_src_allow_fn *allow,
    void *arg, uint64_t *not_before)
{
    struct mta_pool *pl = mta_egress_of(r, d);
    int64_t          best_credit = 0;
    uint64_t         nb;
    size_t           i;
    int              best = -1, bestw = 0;

    *not_before = 0;
    for (i = 0; i < pl->nm; i++) {
        struct mta_member *m = &pl->m[i];

        m->held = 0;
        if (r->src[m->src].down)
            continue;
        nb = 0;
        if (allow != NULL && !allow(arg, d, m->src, &nb)) {
            /* held back (shaping): no share owed while it is */
            m->held = 1;
            if (nb != 0 && (*not_before == 0 || nb < *not_before))
                *not_before = nb;
            continue;
        }
        if (best < 0 || m->credit > best_credit ||
            (m->credit == best_credit && m->weight > bestw)) {
            best = m->src;
            best_credit = m->credit;
            bestw = m->weight;
        }
    }
    return best;
}


/* mta_egress_live - may member m take a share now (not gone, not held
 * back by the last pick's allow())? */
static int
mta_egress_live(const struct mta *r, const struct mta_member *m)
{
    return !r->src[m->src].down && !m->held;
}


/* mta_egress_total - the weight of pool pl's live members. */
static int64_t
mta_egress_total(const struct mta *r, const struct mta_pool *pl)
{
    int64_t total = 0;
    size_t  i;

    for (i = 0; i < pl->nm; i++)
        if (mta_egress_live(r, &pl->m[i]))
            total += pl->m[i].weight;
    return total;
}


void
mta_egress_take(struct mta_conn *c, struct mta_txn *t)
{
    struct mta      *r = c->r;
    struct mta_pool *pl = mta_egress_of(r, c->dest);
    int64_t          total = mta_egress_total(r, pl), lim;
    size_t           i;

    /* the implicit source is not named: logs stay as without egress */
    t->src_name = r->src[c->src].len > 0 ? r->src[c->src].name : NULL;
    if (r->src[c->src].down || pl->nm < 2)
        return;
    lim = total * MTA_EGRESS_CLAMP;
    for (i = 0; i < pl->nm; i++)
        if (pl->m[i].src == c->src)
            break;
    if (i == pl->nm)
        return;                     /* not a member: nothing owed */
    for (i = 0; i < pl->nm; i++) {
        struct mta_member *m = &pl->m[i];

        if (!mta_egress_live(r, m) && m->src != c->src)
            continue;
        m->credit += m->weight;
        if (m->src == c->src)
            m->credit -= total;
        if (m->credit > lim)
            m->credit = lim;
        if (m->credit < -lim)
            m->credit = -lim;
    }
}


int
mta_egress_fair(const struct mta_conn *c, mta_src_allow_fn *allow, void *arg)
{
    const struct mta      *r = c->r;
    const struct mta_pool *pl = mta_egress_of(r, c->dest);
    int64_t                total;
    uint64_t               nb;
    size_t                 i;

    if (pl->nm < 2)
        return 1;
    total = mta_egress_total(r, pl);
    for (i = 0; i < pl->nm; i++)
        if (pl->m[i].src == c->src)
            break;
    if (i == pl->nm || pl->m[i].credit >= -total * MTA_EGRESS_SLACK)
        return 1;                   /* within its share (or no member) */
    /* over it: unfair only when another source could take the slot */
    for (i = 0; i < pl->nm; i++) {
        const struct mta_member *m = &pl->m[i];

        if (m->src != c->src && mta_egress_live(r, m) && m->credit > 0 &&
            (allow == NULL || allow(arg, c->dest, m->src, &nb)))
            return 0;
    }
    return 1;
}


int
mta_egress_member(const struct mta *r, int pool, int src)
{
    const struct mta_pool *pl;
    size_t                 i;

    if (pool < 0 || (size_t)pool >= r->npools)
        pool = 0;
    pl = &r->pools[pool];
    for (i = 0; i < pl->nm; i++)
        if (pl->m[i].src == src)
            return 1;
    return 0;
}


int
mta_egress_fits(const struct mta_conn *c, const struct mta_dest *d)
{
    return !c->r->src[c->src].down && mta_egress_member(c->r, d->pool,
        c->src);
}


/* mta_egress_try - bind a socket of s's family to s (port 0, chosen at
 * connect): 0, or -1 with errno. */
static int
mta_egress_try(int fd, const struct mta_src *s)
{
    int one = 1;

    /* IPv6 sockets take the IPPROTO_IP option too; an old kernel
     * without it just binds a port now */
    (void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
        sizeof(one));
    return bind(fd, (const struct sockaddr *)&s->ss, s->len);
}


/* mta_egress_down - s cannot bind (its address is gone): out of its
 * pools, one line, the recheck timer on. */
static void
mta_egress_down(struct mta *r, int src, int err)
{
    struct mta_src *s = &r->src[src];
    char            ip[INET6_ADDRSTRLEN];

    if (s->down)
        return;
    s->down = 1;
    log_event(LOGL_WARN, "egress", LOG_KVS(LKV_S("source", s->name),
        LKV_S("address", util_sockaddr_ip((struct sockaddr *)&s->ss, ip,
        sizeof(ip))), LKV_S("state", "down"), LKV_S("error", strerror(err))),
        "egress source %s (%s) cannot bind: %s; taken out of its pools, "
        "checked again every %llus", s->name, ip, strerror(err),
        (unsigned long long)(r->recheck_ms / 1000));
    if (!ev_timer_active(&r->recheck_timer))
        ev_timer_start(r->loop, &r->recheck_timer, r->recheck_ms);
}


/* mta_egress_up - s binds again: back in its pools, owed nothing from
 * the time it was out. */
static void
mta_egress_up(struct mta *r, int src)
{
    struct mta_src *s = &r->src[src];
    size_t          i, j;
    char            ip[INET6_ADDRSTRLEN];

    s->down = 0;
    for (i = 0; i < r->npools; i++)
        for (j = 0; j < r->pools[i].nm; j++)
            if (r->pools[i].m[j].src == src)
                r->pools[i].m[j].credit = 0;
    log_event(LOGL_INFO, "egress", LOG_KVS(LKV_S("source", s->name),
        LKV_S("address", util_sockaddr_ip((struct sockaddr *)&s->ss, ip,
        sizeof(ip))), LKV_S("state", "up")),
        "egress source %s (%s) binds again; back in its pools", s->name, ip);
}


/* mta_egress_recheck - the timer: try every source that is out; run the
 * destinations again when one came back (mail deferred meanwhile waits
 * for its retry; mail queued in the relay goes now). */
static void
mta_egress_recheck(struct ev_loop *loop, struct ev_timer *tm, void *arg)
{
    struct mta      *r = arg;
    struct mta_dest *d, **list;
    size_t           i, n;
    int              still = 0, back = 0;

    (void)loop;
    (void)tm;
    for (i = 0; i < r->nsrc; i++) {
        struct mta_src *s = &r->src[i];
        int             fd;

        if (!s->down)
            continue;
        fd = socket(s->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && mta_egress_try(fd, s) == 0) {
            mta_egress_up(r, (int)i);
            back = 1;
        } else {
            still = 1;
        }
        if (fd >= 0)
            close(fd);
    }
    if (still)
        ev_timer_start(r->loop, &r->recheck_timer, r->recheck_ms);
    if (!back)
        return;
    /* the destinations with mail waiting, collected first: a run may
     * free others (mta_adopt collects the ones it empties), never one
     * whose queue is not empty, and it empties no queue but its own */
    for (d = r->dests, n = 0; d; d = d->next)
        n += d->wait_head != NULL;
    if (n == 0)
        return;
    list = xcalloc(n, sizeof(*list));
    for (d = r->dests, i = 0; d && i < n; d = d->next)
        if (d->wait_head != NULL)
            list[i++] = d;
    for (i = 0; i < n; i++)
        mta_dest_kick(r, list[i]);
    free(list);
}


/* mta_egress_move - c goes out from src instead (before connect()): the
 * txn riding along names it.  Its share was counted for the first one:
 * one message, which the split evens out. */
static void
mta_egress_move(struct mta_conn *c, int src)
{
    c->src = src;
    if (c->txn != NULL && c->txn->src_name != NULL)
        c->txn->src_name = c->r->src[src].name;
}


struct mta_egress_fam {
    const struct mta *r;
    sa_family_t       family;
};

/* mta_egress_family - allow() for a pick: sources of one family. */
static int
mta_egress_family(void *arg, struct mta_dest *d, int src,
    uint64_t *not_before)
{
    const struct mta_egress_fam *f = arg;

    (void)d;
    (void)not_before;
    return f->r->src[src].ss.ss_family == f->family;
}


/* mta_egress_unhold - forget what a pick's allow() held back in d's pool
 * (a filter of our own, not shaping's verdict). */
static void
mta_egress_unhold(struct mta *r, struct mta_dest *d)
{
    struct mta_pool *pl = mta_egress_of(r, d);
    size_t           i;

    for (i = 0; i < pl->nm; i++)
        pl->m[i].held = 0;
}


int
mta_egress_bind(struct mta_conn *c, int fd, const struct mta_hop *a)
{
    struct mta     *r = c->r;
    struct mta_src *s = &r->src[c->src];
    uint64_t        nb;
    int             next, err;

    if (s->len == 0)
        return 0;                   /* the implicit source: bind nothing */
    if (s->ss.ss_family != a->ss.ss_family) {
        /* a pool may mix IPv4 and IPv6 sources: one of the hop's family
         * (not counted as a pick: the split settles it later) */
        struct mta_egress_fam f = { r, a->ss.ss_family };

        next = mta_egress_pick(r, c->dest, mta_egress_family, &f, &nb);
        mta_egress_unhold(r, c->dest);
        if (next >= 0) {
            mta_egress_move(c, next);
            return 1;
        }
        snprintf(c->lasterr, sizeof(c->lasterr), "451 4.4.0 egress source "
            "%s is %s, host %s is not (no source of its family in pool %s)",
            s->name, s->ss.ss_family == AF_INET ? "IPv4" : "IPv6", a->name,
            mta_egress_of(r, c->dest)->name);
        return -1;
    }
    if (!s->down) {
        if (mta_egress_try(fd, s) == 0)
            return 0;
        err = errno;
        if (err != EADDRNOTAVAIL) {
            snprintf(c->lasterr, sizeof(c->lasterr), "451 4.4.0 bind to "
                "egress source %s: %s", s->name, strerror(err));
            return -1;
        }
        mta_egress_down(r, c->src, err);
    }
    /* gone: the same host from another source of the pool */
    next = mta_egress_pick(r, c->dest, NULL, NULL, &nb);
    if (next < 0 || next == c->src) {
        snprintf(c->lasterr, sizeof(c->lasterr), "451 4.4.0 no usable "
            "egress source in pool %s", mta_egress_of(r, c->dest)->name);
        return -1;
    }
    mta_egress_move(c, next);
    return 1;
}


void
mta_egress_none(struct mta *r, struct mta_dest *d)
{
    struct mta_txn *t;
    char            why[SMTP_REPLY_MAX];
    size_t          i;

    snprintf(why, sizeof(why), "451 4.4.0 no usable egress source in pool "
        "%s", mta_egress_of(r, d)->name);
    while ((t = mta_dest_pop(d)) != NULL) {
        for (i = t->first; i < t->nrcpt; i++)
            mta_set(t, i, MTA_DEFER, why, "none");
        mta_post(r, t);
    }
}
