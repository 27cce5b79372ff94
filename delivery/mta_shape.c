/*
 * mta_shape.c - traffic shaping at the outbound client's two seams
 * (shape.h): mta_may_connect() in mta.c for connections, the top of
 * mta_conn_next() in mta_session.c for messages.
 *
 * PURPOSE   A destination gets its site, limits and shared entry from its
 *           first transaction (mta_shape_dest_init: once per destination,
 *           not per message).  A connection takes a node-wide slot before
 *           it connects (or adopts an idle one) and gives it back when it
 *           closes; a message takes its events from the site's rates when
 *           it meets its connection.  A "not yet" arms the destination's
 *           timer (shape_timer) for mta_dest_run().
 * HELD      Mail that cannot go soon is handed back, not kept: beyond a
 *           few per connection (MTA_SHAPE_KEEP) the waiting transactions
 *           go back to deliver.c with t->held (their recipients untried,
 *           no result), which releases the attempt, its queue file and
 *           envelope, and keeps the id in the site's wait list
 *           (shape_wait.c) until the site may go.  A transaction already
 *           partly sent (a LIMITS slice) is never held.
 * OFF       With no rules (r->shape NULL) every destination is unshaped
 *           (shape_e -1) and none of this runs: the seams test one int.
 * SOURCE    Limits hold per (site x egress source): a destination has
 *           one entry and limit set per source of its pool, made at the
 *           first use (mta_shape_src()).  The connection check is
 *           mta_shape_allow(), the egress pick's callback: the pick asks
 *           it per source and splits the messages among those it allows
 *           (mta_egress.c); a connection holds the slot of its source's
 *           entry, and a message takes its rate event from the entry of
 *           the connection that carries it (mta_shape_next()).  The gate
 *           before a connection is chosen only looks (any source with its
 *           rate not spent lets the head go on).  Without an egress
 *           section the one source is "default".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "shape/shape.h"
#include "delivery/mta.h"

#define MTA_SHAPE_SOURCE   "default"   /* the implicit source's name */
#define MTA_SHAPE_KEEP     4        /* queued per open connection */
#define MTA_SHAPE_SHORT_US 1000000  /* a wait this short keeps the queue */
#define MTA_SHAPE_POLL_MS  200      /* connection-bound: look again */
#define MTA_SHAPE_SRC_MAX  64       /* sources of a pool the gate asks */
#define MTA_SHAPE_IDLE_MS  2000     /* reuse window under a connection
                                       limit: an idle one is a slot
                                       another worker may need */

static uint64_t
mta_shape_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}


/* The domain of t's destination: an mx route's (a destination per
 * domain); none for a route to named hosts, which carries every domain
 * routed there (its site is the hosts'). */
static const char *
mta_shape_domain(const struct mta_txn *t)
{
    return t->route != NULL && t->route->kind == ROUTE_MX ?
        t->tls.policy_domain : NULL;
}


void
mta_set_shaping(struct mta *r, const struct shape_rules *rules,
    struct shape_table *tab, unsigned slot)
{
    if (rules != NULL && tab == NULL)
        tab = shape_table_create();     /* no master (tests): our own */
    r->shape = tab != NULL ? rules : NULL;
    r->shape_tab = tab;
    r->shape_ws = slot;
}


const char *
mta_site_name(const struct mta *r, const struct mta_txn *t, char *buf)
{
    const char *mx[MTA_MAX_ADDRS];
    size_t      k, n = 0;

    if (t->site[0] != '\0') {
        util_strlcpy(buf, t->site, SHAPE_NAME_MAX);
        return buf;
    }
    for (k = 0; k < t->nhops && n < MTA_MAX_ADDRS; k++)
        if (n == 0 || strcmp(mx[n - 1], t->hops[k].name) != 0)
            mx[n++] = t->hops[k].name;
    for (k = 0; n == 0 && t->route != NULL && k < t->route->nhosts &&
        k < MTA_MAX_ADDRS; k++)
        mx[n++] = t->route->hosts[k].name;
    (void)shape_site(r->shape, mta_shape_domain(t), mx, n, buf);
    return buf;
}


/* mta_shape_src_name - src's name in the rules and the table: the egress
 * source's, or "default" for the implicit one. */
static const char *
mta_shape_src_name(const struct mta *r, int src)
{
    const char *n = src >= 0 ? mta_source_name(r, src) : NULL;

    return n != NULL && n[0] != '\0' ? n : MTA_SHAPE_SOURCE;
}


/* mta_shape_src - d's entry for (site, source src), made at the first
 * use with that source's limits; -1 when the table is full (that source
 * goes unshaped to this site) or src is out of range. */
static int
mta_shape_src(struct mta *r, struct mta_dest *d, int src)
{
    static int  warned;
    const char *name;
    int         e;

    if (src < 0 || (size_t)src >= d->nsrc)
        return d->shape_e;
    if (d->src_e[src] >= 0)
        return d->src_e[src];
    name = mta_shape_src_name(r, src);
    shape_limits_of(r->shape, d->shape_block, name, &d->src_lim[src]);
    e = shape_entry(r->shape_tab, d->site, name);
    if (e < 0) {
        if (!warned++)
            log_warn("shaping: the table of sites is full (%d); site %s "
                "source %s and later new ones go unshaped", SHAPE_SLOTS,
                d->site, name);
        return -1;
    }
    shape_entry_set(r->shape_tab, e, &d->src_lim[src],
        d->shape_dom[0] ? d->shape_dom : NULL);
    d->src_e[src] = e;
    return e;
}


/* mta_shape_lim - the limits of c's source toward c's site. */
const struct shape_limits *
mta_shape_lim(const struct mta_conn *c)
{
    const struct mta_dest *d = c->dest;

    if (c->src >= 0 && (size_t)c->src < d->nsrc && d->src_e[c->src] >= 0)
        return &d->src_lim[c->src];
    return &d->shape_lim;
}


static void
mta_shape_fire(struct ev_loop *loop, struct ev_timer *tm, void *arg)
{
    struct mta_dest *d = arg;

    (void)loop;
    (void)tm;
    mta_dest_run(d->owner, d);
}


void
mta_shape_dest_init(struct mta *r, struct mta_dest *d,
    const struct mta_txn *t)
{
    char        site[SHAPE_NAME_MAX];
    const char *mx[MTA_MAX_ADDRS];
    size_t      k, n = 0;
    int         first;

    d->shape_e = -1;
    for (k = 0; k < t->nhops && n < MTA_MAX_ADDRS; k++)
        if (n == 0 || strcmp(mx[n - 1], t->hops[k].name) != 0)
            mx[n++] = t->hops[k].name;
    for (k = 0; n == 0 && t->route != NULL && k < t->route->nhosts &&
        k < MTA_MAX_ADDRS; k++)
        mx[n++] = t->route->hosts[k].name;
    d->shape_block = shape_site(r->shape, mta_shape_domain(t), mx, n, site);
    util_strlcpy(d->site, site, sizeof(d->site));
    util_strlcpy(d->shape_dom, mta_shape_domain(t) ? mta_shape_domain(t) :
        "", sizeof(d->shape_dom));
    d->nsrc = mta_egress_nsrc(r);
    d->src_e = xmalloc(d->nsrc * sizeof(*d->src_e));
    d->src_lim = xcalloc(d->nsrc, sizeof(*d->src_lim));
    for (k = 0; k < d->nsrc; k++)
        d->src_e[k] = -1;
    first = mta_egress_first(r, d);
    d->shape_e = mta_shape_src(r, d, first);
    if (d->shape_e < 0)
        return;                     /* full: logged by mta_shape_src() */
    d->shape_lim = d->src_lim[first];
    d->owner = r;
    d->gate_us = 0;
    d->conn_token = 0;
    d->token_src = -1;
    ev_timer_init(&d->shape_timer, mta_shape_fire, d);
}


void
mta_shape_dest_free(struct mta *r, struct mta_dest *d)
{
    if (d->shape_e >= 0) {
        ev_timer_stop(r->loop, &d->shape_timer);
        if (d->conn_token) {
            shape_conn_give(r->shape_tab, mta_shape_src(r, d, d->token_src),
                r->shape_ws);
            d->conn_token = 0;
        }
    }
    free(d->src_e);
    free(d->src_lim);
    d->src_e = NULL;
    d->src_lim = NULL;
    d->nsrc = 0;
}


/* mta_shape_arm - run d again at nb (monotonic us). */
static void
mta_shape_arm(struct mta *r, struct mta_dest *d, uint64_t nb, uint64_t now)
{
    uint64_t ms = nb > now ? (nb - now + 999) / 1000 : 1;

    if (d->wait_head == NULL)
        return;
    /* the earliest of the waits: a source whose rate is back runs d */
    if (ev_timer_active(&d->shape_timer) && d->shape_at_us > now &&
        d->shape_at_us <= nb)
        return;
    d->shape_at_us = nb;
    ev_timer_start(r->loop, &d->shape_timer, ms);
}


/* mta_shape_trim - keep the first keep transactions queued in d; hand
 * the others back held (see HELD), from nb_ms (wall) on. */
static void
mta_shape_trim(struct mta *r, struct mta_dest *d, size_t keep,
    uint64_t nb_ms)
{
    struct mta_txn **pp = &d->wait_head, *t;
    size_t           n = 0, held = 0;

    d->wait_tail = NULL;
    while ((t = *pp) != NULL) {
        if (n < keep || t->first > 0 || t->shape_paid) {
            n++;
            d->wait_tail = t;
            pp = &t->next;
            continue;
        }
        *pp = t->next;
        t->next = NULL;
        t->held = 1;
        t->not_before_ms = nb_ms;
        mta_post(r, t);
        held++;
    }
    if (held > 0)
        shape_count(r->shape_tab, d->shape_e, 0, held);
}


int
mta_shape_gate(struct mta *r, struct mta_dest *d)
{
    uint64_t now = mta_shape_now_us(), wall = util_wall_ms(), nb = 0, one;
    int      srcs[MTA_SHAPE_SRC_MAX], suspended = 1, e;
    size_t   keep, i, n;

    /* the head may go when one source's rate is not spent; the event is
     * taken by the connection that carries it (mta_shape_next), from its
     * source (else every new connection would be opened first and most
     * would then find the rate spent) */
    if (now >= d->gate_us) {
        n = mta_egress_sources(r, d, srcs, MTA_SHAPE_SRC_MAX);
        for (i = 0; i < n; i++) {
            if ((e = mta_shape_src(r, d, srcs[i])) < 0)
                return 0;           /* unshaped source: goes */
            one = 0;
            if (shape_may(r->shape_tab, e, &d->src_lim[srcs[i]],
                SHAPE_R_SEC, 0, now, wall, &one) == 0)
                return 0;
            if (!shape_suspended(r->shape_tab, e, wall))
                suspended = 0;
            if (nb == 0 || one < nb)
                nb = one;
        }
        if (n == 0)
            return 0;               /* no usable source: egress defers */
    } else {
        nb = d->gate_us;
        suspended = shape_suspended(r->shape_tab, d->shape_e, wall);
    }
    if (nb <= now)
        nb = now + 1000;
    d->gate_us = nb;
    keep = suspended || nb - now > MTA_SHAPE_SHORT_US ? 0 :
        (d->nconns + 1) * MTA_SHAPE_KEEP;
    mta_shape_trim(r, d, keep, wall + (nb - now) / 1000);
    mta_shape_arm(r, d, nb, now);
    return 1;
}


/* mta_shape_allow - the egress pick's question for source src: may d
 * open a connection from it now (its message rate not spent, its
 * new-connection rate and its node-wide connections below their limits)?
 * Only looks: the pick then splits by the pool's weights among the
 * sources allowed, and mta_shape_may_connect() takes the slot of the one
 * chosen. */
int
mta_shape_allow(void *arg, struct mta_dest *d, int src, uint64_t *nb)
{
    struct mta                *r = arg;
    uint64_t                   now = mta_shape_now_us(), wall = util_wall_ms();
    const struct shape_limits *lim;
    int                        e;

    if ((e = mta_shape_src(r, d, src)) < 0)
        return 1;                   /* the table is full: unshaped */
    lim = &d->src_lim[src];
    if (shape_may(r->shape_tab, e, lim, SHAPE_R_SEC, 0, now, wall, nb) < 0 ||
        shape_may(r->shape_tab, e, lim, SHAPE_R_CONN, 0, now, wall, nb) < 0)
        return 0;
    if (shape_conn_full(r->shape_tab, e, lim->connections)) {
        *nb = now + MTA_SHAPE_POLL_MS * 1000;
        return 0;
    }
    return 1;
}


/* mta_shape_slot - take src's connection slot and new-connection event
 * for d's next connect: 0 (d->conn_token set), or -1 with *nb (another
 * worker took the last slot meanwhile). */
static int
mta_shape_slot(struct mta *r, struct mta_dest *d, int src, uint64_t *nb)
{
    uint64_t                   now = mta_shape_now_us();
    const struct shape_limits *lim = &d->src_lim[src];
    int                        e = mta_shape_src(r, d, src);

    if (e < 0)
        return 0;                   /* unshaped: no slot */
    if (shape_conn_take(r->shape_tab, e, r->shape_ws, lim->connections) < 0) {
        *nb = now + MTA_SHAPE_POLL_MS * 1000;
        return -1;
    }
    if (shape_may(r->shape_tab, e, lim, SHAPE_R_CONN, 1, now, util_wall_ms(),
        nb) < 0) {
        shape_conn_give(r->shape_tab, e, r->shape_ws);
        return -1;
    }
    d->conn_token = 1;
    d->token_src = src;
    return 0;
}


int
mta_shape_may_connect(struct mta *r, struct mta_dest *d)
{
    uint64_t nb = 0, now;
    int      src;

    if (d->conn_token)
        return 1;
    /* the egress pick asks each source of the pool and splits by the
     * weights among those allowed; the chosen one's slot is taken for the
     * connect or adoption that follows (d->token_src) */
    src = mta_egress_pick(r, d, mta_shape_allow, r, &nb);
    if (src >= 0 && mta_shape_slot(r, d, src, &nb) == 0)
        return 1;
    if (src < 0 && nb == 0)
        return 1;                   /* every source gone: egress defers */
    /* the open connections carry what stays; the rest waits outside */
    now = mta_shape_now_us();
    mta_shape_trim(r, d, d->nconns * MTA_SHAPE_KEEP,
        util_wall_ms() + (nb > now ? (nb - now) / 1000 : 0));
    mta_shape_arm(r, d, nb, now);
    return 0;
}


int
mta_shape_token_src(const struct mta_dest *d)
{
    return d->shape_e >= 0 && d->conn_token ? d->token_src : -1;
}


void
mta_shape_take(struct mta_conn *c)
{
    struct mta_dest *d = c->dest;
    struct mta      *r = c->r;
    int              e;

    if (!d->conn_token)
        return;
    d->conn_token = 0;
    e = mta_shape_src(r, d, d->token_src);
    if (c->shape_e == e) {
        /* adopted from a destination of the same site and source: it has
         * a slot */
        shape_conn_give(r->shape_tab, e, r->shape_ws);
        return;
    }
    if (c->shape_e >= 0)
        shape_conn_give(r->shape_tab, c->shape_e, r->shape_ws);
    c->shape_e = e;
}


void
mta_shape_give(struct mta_conn *c)
{
    shape_conn_give(c->r->shape_tab, c->shape_e, c->r->shape_ws);
    c->shape_e = -1;
}


uint64_t
mta_shape_idle_ms(const struct mta_conn *c)
{
    uint64_t ms = c->r->idle_ms;

    if (mta_shape_lim(c)->connections > 0 && ms > MTA_SHAPE_IDLE_MS)
        ms = MTA_SHAPE_IDLE_MS;
    return ms;
}


int
mta_shape_ready(const struct mta_conn *c)
{
    return c->shape_nb_us == 0 || mta_shape_now_us() >= c->shape_nb_us;
}


int
mta_shape_next(struct mta_conn *c, struct mta_txn *t)
{
    struct mta_dest           *d = c->dest;
    struct mta                *r = c->r;
    const struct shape_limits *lim = mta_shape_lim(c);
    uint32_t                   mpc = lim->messages_per_connection;
    uint64_t                   now, nb = 0;

    if (mpc > 0 && c->ntxn >= mpc) {
        if (t != NULL)
            return mta_conn_unfit(c, t);    /* on a fresh connection */
        mta_conn_quit(c);
        return 1;
    }
    if (t == NULL && d->wait_head == NULL)
        return 0;                       /* nothing to send: idle */
    if (c->shape_e < 0)
        return 0;                       /* an unshaped source */
    /* every transaction counts, as receivers count them (a message's
     * LIMITS slices too), against the rate of c's source */
    now = mta_shape_now_us();
    if (now >= c->shape_nb_us && shape_may(r->shape_tab, c->shape_e, lim,
        SHAPE_R_SEC, 1, now, util_wall_ms(), &nb) == 0) {
        c->shape_nb_us = 0;
        return 0;
    }
    if (now < c->shape_nb_us)
        nb = c->shape_nb_us;
    if (t != NULL) {
        c->txn = NULL;
        mta_dest_push_front(d, t);
    }
    c->shape_nb_us = nb;
    c->expect = 0;
    (void)mta_watch(c, EV_READ);
    mta_enter_for(c, C_IDLE, mta_shape_idle_ms(c));
    mta_shape_arm(r, d, nb, now);
    return 2;
}


/* ---- replies ---- */

void
mta_set_shape_report(struct mta *r, mta_shape_report_fn *fn, void *arg)
{
    r->shape_report = fn;
    r->shape_report_arg = arg;
}


/* mta_shape_reported - tell the owner an episode began (its event). */
static void
mta_shape_reported(struct mta *r, const struct mta_txn *t,
    const struct shape_action *a, const char *why, uint64_t now)
{
    uint64_t until = now + a->for_ms;

    if (r->shape_report == NULL)
        return;
    if (a->act == SHAPE_ACT_SLOW)
        until += (uint64_t)a->steps * a->step_ms;
    r->shape_report(r->shape_report_arg, t->site,
        t->src_name ? t->src_name : MTA_SHAPE_SOURCE,
        a->act == SHAPE_ACT_SUSPEND ? "suspend" : "slow", until, why);
}


void
mta_shape_done(struct mta *r, struct mta_txn *t, const char *cls)
{
    struct shape_action a;
    const char         *why = NULL;
    size_t              i, sent = 0, open = 0;
    enum shape_kind     kind;
    uint64_t            now;
    char                esc[UTIL_ESC_ROOM(SHAPE_REPLY_MAX)];
    int                 e;

    if (r->shape == NULL || t->shape_e < 0 || t->held || t->cut)
        return;
    e = t->shape_se >= 0 ? t->shape_se : t->shape_e;
    for (i = 0; i < t->nrcpt; i++) {
        if (t->res[i].status == MTA_SENT)
            sent++;
        else if (why == NULL)
            why = t->res[i].reply;
        if (t->res[i].status == MTA_DEFER)
            open++;
    }
    if (sent > 0)
        shape_count(r->shape_tab, e, 1, 0);
    if (why == NULL)
        return;
    kind = shape_kind_of(why);
    shape_backoff_match(r->shape, t->shape_block, why, kind, cls, &a);
    if (a.act == SHAPE_ACT_NONE)
        return;
    if (a.act == SHAPE_ACT_BOUNCE) {
        /* a permanent policy block: those it deferred bounce */
        for (i = 0; i < t->nrcpt; i++)
            if (t->res[i].status == MTA_DEFER &&
                strcmp(t->res[i].reply, why) == 0)
                t->res[i].status = MTA_BOUNCE;
        return;
    }
    now = util_wall_ms();
    if (shape_backoff(r->shape_tab, e, &a, why, now, 0)) {
        mta_shape_reported(r, t, &a, why, now);
        util_escape(esc, sizeof(esc), why, strlen(why), 0, NULL);
        if (a.act == SHAPE_ACT_SUSPEND)
            log_notice("shaping: site %s source %s suspended for %llus "
                "(rule %d, %s): %s", t->site,
                t->src_name ? t->src_name : MTA_SHAPE_SOURCE,
                (unsigned long long)(a.for_ms / 1000), a.rule,
                shape_kind_name(kind), esc);
        else
            log_notice("shaping: site %s source %s slowed to %u.%u%% for "
                "%llus, then %u steps of %llus (rule %d, %s): %s", t->site,
                t->src_name ? t->src_name : MTA_SHAPE_SOURCE, a.factor / 10,
                a.factor % 10,
                (unsigned long long)(a.for_ms / 1000), a.steps,
                (unsigned long long)(a.step_ms / 1000), a.rule,
                shape_kind_name(kind), esc);
    }
    /* refused for the rate or a suspension: not an attempt of its own
     * (HELD), when nothing of it was delivered or bounced */
    if (sent == 0 && open == t->nrcpt) {
        t->held = 1;
        t->not_before_ms = now + (a.act == SHAPE_ACT_SUSPEND ? a.for_ms :
            1000);
    }
}
