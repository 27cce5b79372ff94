/*
 * cluster_shape.c - the shaping pairs across the fleet: connection leases,
 * delivery and new-connection tokens, back-off episodes (cluster_int.h).
 *
 * PURPOSE   Connections: each node's field in the pair's lease hash holds
 *           what it has open (or was granted) and expires three sync
 *           intervals after its last write, so a dead node's connections
 *           stop counting by themselves; the grant never lets the sum
 *           pass the limit.  A node asks one more than it has open only
 *           after a worker was refused for want of a grant (the demand
 *           counter: one per refusal, CL_RAMP at most a cycle), and keeps
 *           a granted head-room for a second.
 *           Rates: one GCRA per rate lives in Redis (its theoretical
 *           arrival time, the pair's burst as its tolerance, the
 *           slow-down factor applied); a node with demand reserves the
 *           next slots, at most two sync intervals ahead for the whole
 *           fleet, and gets each token with its time: the workers spend a
 *           token no sooner than it (shape.h), so the fleet's deliveries
 *           follow one schedule and never pass the rate.  A stock whose
 *           times passed unspent lapses (nothing piles up on an idle
 *           node; a lapsed slot is lost, never used twice).
 *           Back-off: a local episode (a 421 that matched a rule) is
 *           published with the time it has left; the other nodes start
 *           the same episode for what is left of it.
 */
#include <inttypes.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "cluster/cluster_int.h"

#define CL_HEADROOM_MS 1000         /* a granted head-room is kept so long */
#define CL_RAMP        2            /* connections more per cycle, at most */
#define CL_IDLE_MS     10000        /* a pair unused so long is not synced */

static const char *const cl_rate_name[SHAPE_NRATES] = {
    "sec", "min", "hour", "conn"
};

/* cl_rates - the rates of kind (0: deliveries, 1: new connections) of
 * lim at factor (per mille): their indexes into r[], their number; the
 * most restrictive one's index into *tight. */
static int
cl_rates(const struct shape_limits *lim, int kind, int *r, int *tight)
{
    int i, n = 0, lo = kind ? SHAPE_R_CONN : SHAPE_R_SEC;
    int hi = kind ? SHAPE_R_CONN : SHAPE_R_HOUR;

    *tight = -1;
    for (i = lo; i <= hi; i++) {
        const struct shape_rate *x = &lim->rate[i];

        if (x->n == 0 || x->per_ms == 0)
            continue;
        r[n++] = i;
        if (*tight < 0 || (uint64_t)x->n * lim->rate[*tight].per_ms <
            (uint64_t)lim->rate[*tight].n * x->per_ms)
            *tight = i;
    }
    return n;
}

static uint32_t
cl_scaled(uint32_t n, uint32_t factor)
{
    uint64_t v = (uint64_t)n * (factor ? factor : 1000) / 1000;

    return v > 0 ? (uint32_t)v : 1;
}

/* cl_conns - the lease of a pair with a connection limit */
static void
cl_conns(struct cl_agent *g, const struct shape_view *v,
    const struct shape_fleet *f, struct cl_pair *p, uint64_t now)
{
    struct cl_pend pd = { CL_W_LEASE, v->e, 0, 0, NULL };
    char           key[300];
    uint32_t       want = f->conns;

    if (f->conn_want != p->conn_want) {
        /* workers were refused: one more per refusal, CL_RAMP at most a
         * cycle (the grant never passes what the others leave) */
        uint32_t d = f->conn_want - p->conn_want;

        want = f->conns + (d < CL_RAMP ? d : CL_RAMP);
        p->conn_want = f->conn_want;
        p->demand_ms = now;
    } else if (now - p->demand_ms < CL_HEADROOM_MS && f->grant > want)
        want = f->grant;                /* keep the head-room a while */
    if (cluster_key(key, sizeof(key), g->prefix, "conn", v->site, v->source,
        NULL) < 0)
        return;
    cl_eval(g, CL_S_LEASE, 1);
    cl_arg(g, "%s", key);
    cl_arg(g, "%s", g->node);
    cl_arg(g, "%" PRIu32, want);
    cl_arg(g, "%" PRIu32, f->conns);
    cl_arg(g, "0");
    cl_arg(g, "%" PRIu32, v->lim.connections);
    cl_arg(g, "%" PRIu64, cluster_lease_ms(g->sync_ms));
    cl_send(g, &pd);
}

static uint64_t
cl_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* cl_tol - the burst the pair's own rate of kind allows, in events */
static uint32_t
cl_tol(const struct shape_limits *lim, int kind)
{
    if (kind)
        return lim->rate[SHAPE_R_CONN].n > 0 ?
            lim->rate[SHAPE_R_CONN].n - 1 : 0;
    return lim->burst;
}

/* cl_horizon - how far ahead this request reserves: one to two sync
 * intervals, drawn anew each time.  A fixed horizon with a rate whose
 * spacing is a multiple of the interval phase-locks the fleet: the slot
 * always enters the horizon just before the same node's cycle, and the
 * others never get one.  At least one interval, so no slot lapses while
 * some node has demand. */
static uint64_t
cl_horizon(struct cl_agent *g)
{
    uint64_t x = g->jitter != 0 ? g->jitter :
        ((uint64_t)getpid() << 32) ^ cl_mono_us() ^ 0x9e3779b97f4a7c15ULL;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    g->jitter = x;
    return g->sync_ms + x % (g->sync_ms + 1);
}

/* cl_tokens - the stock of kind of a pair with rates of that kind: with
 * demand, reserve up to two sync intervals of the tightest rate (the
 * fleet's horizon is as long: whoever asks first gets the next slots);
 * a stock left unspent after its times passed lapses. */
static void
cl_tokens(struct cl_agent *g, const struct shape_view *v,
    const struct shape_fleet *f, struct cl_pair *p, int kind)
{
    struct cl_pend pd = { CL_W_BUCKET, v->e, kind, 0, NULL };
    int            r[SHAPE_NRATES], n, i, tight;
    uint32_t       stock;
    char           key[300];
    int            spent = f->used[kind] != p->used[kind];
    int            demand = spent || f->want[kind] != p->want[kind];

    p->used[kind] = f->used[kind];
    p->want[kind] = f->want[kind];
    if ((n = cl_rates(&v->lim, kind, r, &tight)) == 0)
        return;
    if (!spent && f->tokens[kind] > 0 &&
        f->next_us[kind] + g->sync_ms * 1000 < cl_mono_us()) {
        (void)shape_fleet_drain(g->shape, v->e, kind);  /* lapsed */
        return;
    }
    stock = cluster_stock(cl_scaled(v->lim.rate[tight].n, v->factor),
        v->lim.rate[tight].per_ms, g->sync_ms, 1, 0);
    if (!demand || f->tokens[kind] >= (int32_t)stock)
        return;
    pd.n = (int32_t)stock - f->tokens[kind];
    cl_eval(g, CL_S_RESERVE, n);
    for (i = 0; i < n; i++) {
        if (cluster_key(key, sizeof(key), g->prefix, "rate", v->site,
            v->source, cl_rate_name[r[i]]) < 0)
            return;
        cl_arg(g, "%s", key);
    }
    cl_arg(g, "%" PRId32, pd.n);
    cl_arg(g, "%" PRIu64, cl_horizon(g));
    for (i = 0; i < n; i++) {
        cl_arg(g, "%" PRIu32, cl_scaled(v->lim.rate[r[i]].n, v->factor));
        cl_arg(g, "%" PRIu64, v->lim.rate[r[i]].per_ms);
        cl_arg(g, "%" PRIu32, cl_tol(&v->lim, kind));
    }
    cl_send(g, &pd);
}

/* cl_backoff - publish a new local episode; read the fleet's */
static void
cl_backoff(struct cl_agent *g, const struct shape_view *v,
    struct cl_pair *p, uint64_t now)
{
    struct cl_pend      pd = { CL_W_BACKOFF, v->e, 0, 0, NULL };
    struct shape_action a;
    uint64_t            since, end;
    char                key[300], reply[SHAPE_REPLY_MAX];

    if (cluster_key(key, sizeof(key), g->prefix, "backoff", v->site,
        v->source, NULL) < 0)
        return;
    if (shape_backoff_get(g->shape, v->e, now, &a, &since, reply) &&
        since != p->bo_since) {
        end = since + a.for_ms + (a.act == SHAPE_ACT_SLOW ?
            (uint64_t)a.steps * a.step_ms : 0);
        p->bo_since = since;
        if (end > now) {
            cl_args(g);
            cl_arg(g, "SET");
            cl_arg(g, "%s", key);
            cl_arg(g, "%s|%" PRIu64 "|%d|%" PRIu64 "|%" PRIu32 "|%" PRIu32
                "|%" PRIu64 "|%" PRIu32 "|%" PRIu64 "|%s", g->node, since,
                (int)a.act, a.for_ms, a.factor, a.steps, a.step_ms,
                a.base.n, a.base.per_ms, reply);
            cl_arg(g, "PX");
            cl_arg(g, "%" PRIu64, end - now);
            cl_send(g, &(struct cl_pend){ CL_W_IGNORE, 0, 0, 0, NULL });
        }
    }
    cl_args(g);
    cl_arg(g, "GET");
    cl_arg(g, "%s", key);
    cl_send(g, &pd);
}

/* cl_idle - a pair unused for CL_IDLE_MS costs Redis nothing: no lease
 * to hold (its field expires), no tokens, and its next use shows within
 * a cycle (the demand counters move), the fleet's back-off read then */
static int
cl_idle(struct cl_pair *p, const struct shape_view *v,
    const struct shape_fleet *f, uint64_t now)
{
    if (v->sent != p->sent || f->conns > 0 || f->tokens[0] > 0 ||
        f->tokens[1] > 0 || f->conn_want != p->seen_want[2] ||
        f->want[0] != p->seen_want[0] || f->want[1] != p->seen_want[1] ||
        v->mode != SHAPE_M_NONE || p->active_ms == 0)
        p->active_ms = now;
    p->sent = v->sent;
    p->seen_want[0] = f->want[0];
    p->seen_want[1] = f->want[1];
    p->seen_want[2] = f->conn_want;
    return now - p->active_ms > CL_IDLE_MS;
}

void
cl_shape_queue(struct cl_agent *g)
{
    uint64_t           now = util_wall_ms();
    struct shape_fleet f;
    size_t             i;

    g->nviews = shape_table_list(g->shape, now, g->views, SHAPE_SLOTS);
    for (i = 0; i < g->nviews; i++) {
        const struct shape_view *v = &g->views[i];
        struct cl_pair          *p = &g->pair[v->e];

        shape_fleet_get(g->shape, v->e, &f);
        if (cl_idle(p, v, &f, now))
            continue;
        if (v->lim.connections > 0)
            cl_conns(g, v, &f, p, now);
        cl_tokens(g, v, &f, p, SHAPE_FLEET_MSG);
        cl_tokens(g, v, &f, p, SHAPE_FLEET_CONN);
        cl_backoff(g, v, p, now);
    }
}

/* the names of entry e, from this cycle's views */
static const struct shape_view *
cl_view_of(struct cl_agent *g, int e)
{
    size_t i;

    for (i = 0; i < g->nviews; i++)
        if (g->views[i].e == e)
            return &g->views[i];
    return NULL;
}

static const char *
cl_site(struct cl_agent *g, int e)
{
    const struct shape_view *v = cl_view_of(g, e);

    return v != NULL ? v->site : "?";
}

static const char *
cl_source(struct cl_agent *g, int e)
{
    const struct shape_view *v = cl_view_of(g, e);

    return v != NULL ? v->source : "?";
}

/* cl_apply - a fleet episode another node published: "node|since|act|
 * for|factor|steps|step_ms|base_n|base_per|reply" */
static void
cl_apply(struct cl_agent *g, int e, const char *val)
{
    struct cl_pair     *p = &g->pair[e];
    struct shape_action a;
    unsigned long long  since, for_ms, step_ms, base_per;
    unsigned            factor, steps, base_n;
    int                 act, off = 0;
    uint64_t            now = util_wall_ms(), el, s2;
    char                node[CLUSTER_ID_MAX], reply[SHAPE_REPLY_MAX];
    char                esc[UTIL_ESC_ROOM(CLUSTER_ID_MAX)];
    const char         *bar;

    bar = strchr(val, '|');
    if (bar == NULL || (size_t)(bar - val) >= sizeof(node))
        return;
    memcpy(node, val, (size_t)(bar - val));
    node[bar - val] = '\0';
    if (strcmp(node, g->node) == 0 || strncmp(p->bo_seen, val,
        sizeof(p->bo_seen) - 1) == 0)
        return;
    if (sscanf(bar + 1, "%llu|%d|%llu|%u|%u|%llu|%u|%llu|%n", &since, &act,
        &for_ms, &factor, &steps, &step_ms, &base_n, &base_per, &off) < 8 ||
        off == 0)
        return;
    util_strlcpy(p->bo_seen, val, sizeof(p->bo_seen));
    memset(&a, 0, sizeof(a));
    a.act = (enum shape_act)act;
    el = now > since ? now - since : 0;
    a.for_ms = for_ms > el ? for_ms - el : 0;
    a.factor = factor;
    a.steps = steps;
    a.step_ms = step_ms;
    a.base.n = base_n;
    a.base.per_ms = base_per;
    if (a.act == SHAPE_ACT_SUSPEND && a.for_ms == 0)
        return;
    util_strlcpy(reply, bar + 1 + off, sizeof(reply));
    /* the reply was escaped where it was published */
    if (!shape_backoff(g->shape, e, &a, reply, now, 0))
        return;                         /* one as strict is on already */
    util_escape(esc, sizeof(esc), node, strlen(node), 0, NULL);
    if (a.act == SHAPE_ACT_SUSPEND)
        log_notice("cluster: site %s source %s suspended for %llus as node "
            "%s was told: %s", cl_site(g, e),
            cl_source(g, e), (unsigned long long)(a.for_ms / 1000), esc,
            reply);
    else
        log_notice("cluster: site %s source %s slowed to %.1f%% as node %s "
            "was told: %s", cl_site(g, e), cl_source(g, e),
            a.factor / 10.0, esc, reply);
    if (shape_backoff_get(g->shape, e, now, &a, &s2, reply))
        p->bo_since = s2;               /* not ours to publish again */
}

void
cl_shape_reply(struct cl_agent *g, const struct cl_pend *p,
    const redisReply *r)
{
    struct cl_pair *x = &g->pair[p->e];

    switch (p->what) {
    case CL_W_LEASE:
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 2)
            return;
        x->fleet_grant = (uint32_t)r->element[0]->integer;
        x->others = (uint32_t)r->element[1]->integer;
        shape_fleet_grant(g->shape, p->e, x->fleet_grant);
        break;
    case CL_W_BUCKET:
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 3 &&
            r->element[0]->integer > 0) {
            /* the reply came after Redis's now: local times are later */
            long long off = r->element[1]->integer;
            uint64_t  now = cl_mono_us(), first = off < 0 &&
                (uint64_t)-off > now ? 0 : (uint64_t)((long long)now + off);

            shape_fleet_add(g->shape, p->e, p->kind,
                (int32_t)r->element[0]->integer, first,
                (uint64_t)r->element[2]->integer);
            if (p->kind == SHAPE_FLEET_MSG)
                __atomic_add_fetch(&g->page->tokens_taken,
                    (uint64_t)r->element[0]->integer, __ATOMIC_RELAXED);
        }
        break;
    case CL_W_BACKOFF:
        if (r->type == REDIS_REPLY_STRING)
            cl_apply(g, p->e, r->str);
        break;
    default:
        break;
    }
}

void
cl_shape_fallback(struct cl_agent *g, uint64_t dt_ms)
{
    uint64_t           now = util_wall_ms(), mono = cl_mono_us();
    struct shape_fleet f;
    size_t             i;
    int                kind, r[SHAPE_NRATES], tight;

    (void)dt_ms;
    g->nviews = shape_table_list(g->shape, now, g->views, SHAPE_SLOTS);
    for (i = 0; i < g->nviews; i++) {
        const struct shape_view *v = &g->views[i];

        shape_fleet_get(g->shape, v->e, &f);
        shape_fleet_grant(g->shape, v->e,
            cluster_share(v->lim.connections, g->nodes));
        /* this node's own GCRA at rate / nodes: its share */
        for (kind = 0; kind < 2; kind++) {
            uint32_t n, stock;
            uint64_t iv;

            if (cl_rates(&v->lim, kind, r, &tight) == 0)
                continue;
            n = cl_scaled(v->lim.rate[tight].n, v->factor);
            stock = cluster_stock(n, v->lim.rate[tight].per_ms, g->sync_ms,
                g->nodes, 0);
            iv = v->lim.rate[tight].per_ms * 1000 * g->nodes / n;
            if (f.tokens[kind] < (int32_t)stock)
                shape_fleet_add(g->shape, v->e, kind,
                    (int32_t)stock - f.tokens[kind], mono, iv);
        }
    }
}

void
cl_shape_rejoin(struct cl_agent *g)
{
    size_t i;

    /* the fallback's own tokens are not the fleet's: let Redis rule */
    for (i = 0; i < g->nviews; i++) {
        (void)shape_fleet_drain(g->shape, g->views[i].e, 0);
        (void)shape_fleet_drain(g->shape, g->views[i].e, 1);
    }
}
