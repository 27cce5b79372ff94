/*
 * shape_table.c - the node-wide shaping counters (shape.h): one anonymous
 * MAP_SHARED mapping the master makes before the first fork, written by
 * every worker of every generation.
 *
 * PURPOSE   An entry per (site, source): the connections open (a total
 *           changed with a compare-and-swap against the limit, and each
 *           worker slot's share so that the master can take a dead
 *           worker's connections back), the GCRA theoretical arrival time
 *           of each rate (a compare-and-swap per event), the back-off
 *           episode and counters for the view.
 * CONTRACT  key: 0 for a free entry, else a hash of the names with its low
 *           two bits the state: CLAIMING while the claimer writes the
 *           names, READY after (release); entries are never freed (the
 *           table is sized for the sites of a node).  The back-off fields
 *           change under the entry's lock (a spin on a word; held for a
 *           few stores, never across a call); mode is read without it.
 *           A worker killed between its share's increment and the total's
 *           leaves the total one low until that connection would have
 *           closed: the only loss, and on the permissive side by one.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>

#include "common/util.h"
#include "shape/shape.h"

#define ST_CLAIMING 1u
#define ST_READY    2u
#define ST_STATE    3u

struct shape_ent {
    uint64_t key;
    char     site[SHAPE_NAME_MAX], source[SHAPE_NAME_MAX];
    char     domain[SHAPE_NAME_MAX];
    struct shape_limits lim;
    uint32_t conns;
    uint16_t wconns[SHAPE_MAX_WORKERS];
    uint64_t tat[SHAPE_NRATES];
    /* back-off, under lock */
    uint32_t lock;
    uint32_t mode;                  /* enum shape_mode, read lock-free */
    uint32_t manual;
    uint32_t step;                  /* the slow step last reported */
    uint64_t since_ms, until_ms;
    struct shape_action act;
    char     reply[SHAPE_REPLY_MAX];
    uint64_t sent, held, backoffs;
    /* the fleet's grants (cluster mode): written by the agent */
    uint32_t fl_grant, fl_conn_want;
    int32_t  fl_tok[2];
    uint32_t fl_want[2];
    uint64_t fl_used[2];
    uint64_t fl_next_us[2];         /* the next token's time (monotonic) */
    uint64_t fl_iv_us[2];           /* and the spacing of the rest */
};

struct shape_table {
    uint32_t         fleet;             /* cluster mode */
    uint32_t         fleet_wait_us;
    struct shape_ent e[SHAPE_SLOTS];
};

struct shape_table *
shape_table_create(void)
{
    void *p = mmap(NULL, sizeof(struct shape_table), PROT_READ | PROT_WRITE,
        MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

/* FNV-1a over "site\0source", the state bits clear, never 0. */
static uint64_t
st_hash(const char *site, const char *source)
{
    uint64_t    h = 1469598103934665603ULL;
    const char *s;

    for (s = site; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;
    for (s = source; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    h &= ~(uint64_t)ST_STATE;
    return h ? h : 4;
}

static int
st_lookup(struct shape_table *t, const char *site, const char *source,
    int claim)
{
    uint64_t h = st_hash(site, source);
    size_t   i, k;

    for (i = 0; i < SHAPE_SLOTS; i++) {
        struct shape_ent *e = &t->e[(h + i) & (SHAPE_SLOTS - 1)];
        uint64_t          key = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);

        if (key == 0) {
            uint64_t want = h | ST_CLAIMING;

            if (!claim)
                return -1;
            if (!__atomic_compare_exchange_n(&e->key, &key, want, 0,
                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                i--;                    /* someone claimed it: look again */
                continue;
            }
            util_strlcpy(e->site, site, sizeof(e->site));
            util_strlcpy(e->source, source, sizeof(e->source));
            __atomic_store_n(&e->key, h | ST_READY, __ATOMIC_RELEASE);
            return (int)(e - t->e);
        }
        if ((key & ~(uint64_t)ST_STATE) != h)
            continue;
        /* the same hash: wait out a claimer writing the names */
        for (k = 0; (key & ST_STATE) == ST_CLAIMING && k < 100000; k++) {
            sched_yield();
            key = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
        }
        if (strcmp(e->site, site) == 0 && strcmp(e->source, source) == 0)
            return (int)(e - t->e);
    }
    return -1;
}

int
shape_entry(struct shape_table *t, const char *site, const char *source)
{
    return t != NULL ? st_lookup(t, site, source, 1) : -1;
}

int
shape_entry_find(struct shape_table *t, const char *site, const char *source)
{
    return t != NULL ? st_lookup(t, site, source, 0) : -1;
}

void
shape_entry_set(struct shape_table *t, int e, const struct shape_limits *lim,
    const char *domain)
{
    struct shape_ent *x = &t->e[e];

    /* for the view only: a torn read there shows a mix for a moment */
    memcpy(&x->lim, lim, sizeof(x->lim));
    if (domain != NULL)
        util_strlcpy(x->domain, domain, sizeof(x->domain));
}

/* ---- connections ---- */

/* st_fleet_full - cluster mode: c open here reach the grant (counted as
 * demand for the agent). */
static int
st_fleet_full(struct shape_table *t, struct shape_ent *x, uint32_t c,
    uint32_t max)
{
    if (!t->fleet || max == 0 ||
        c < __atomic_load_n(&x->fl_grant, __ATOMIC_RELAXED))
        return 0;
    __atomic_add_fetch(&x->fl_conn_want, 1, __ATOMIC_RELAXED);
    return 1;
}

int
shape_conn_full(struct shape_table *t, int e, uint32_t max)
{
    struct shape_ent *x = &t->e[e];
    uint32_t          c = __atomic_load_n(&x->conns, __ATOMIC_RELAXED);

    return (max > 0 && c >= max) || st_fleet_full(t, x, c, max);
}

int
shape_conn_take(struct shape_table *t, int e, unsigned ws, uint32_t max)
{
    struct shape_ent *x = &t->e[e];
    uint32_t          c;

    if (ws >= SHAPE_MAX_WORKERS)
        ws = 0;
    /* the share first: a dead worker's total is then never too high */
    __atomic_add_fetch(&x->wconns[ws], 1, __ATOMIC_RELAXED);
    c = __atomic_load_n(&x->conns, __ATOMIC_RELAXED);
    do {
        if ((max > 0 && c >= max) || st_fleet_full(t, x, c, max)) {
            __atomic_sub_fetch(&x->wconns[ws], 1, __ATOMIC_RELAXED);
            return -1;
        }
    } while (!__atomic_compare_exchange_n(&x->conns, &c, c + 1, 1,
        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    return 0;
}

/* st_sub - *w -= n, never below 0. */
static void
st_sub(uint32_t *w, uint32_t n)
{
    uint32_t c = __atomic_load_n(w, __ATOMIC_RELAXED);

    while (!__atomic_compare_exchange_n(w, &c, c > n ? c - n : 0, 1,
        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        ;
}

void
shape_conn_give(struct shape_table *t, int e, unsigned ws)
{
    struct shape_ent *x = &t->e[e];
    uint16_t          c;

    if (ws >= SHAPE_MAX_WORKERS)
        ws = 0;
    c = __atomic_load_n(&x->wconns[ws], __ATOMIC_RELAXED);
    if (c == 0)
        return;                         /* cleared by the master meanwhile */
    while (c > 0 && !__atomic_compare_exchange_n(&x->wconns[ws], &c,
        (uint16_t)(c - 1), 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        ;
    if (c > 0)
        st_sub(&x->conns, 1);
}

uint32_t
shape_conns(struct shape_table *t, int e)
{
    return __atomic_load_n(&t->e[e].conns, __ATOMIC_RELAXED);
}

void
shape_slot_clear(struct shape_table *t, unsigned ws)
{
    size_t i;

    if (t == NULL || ws >= SHAPE_MAX_WORKERS)
        return;
    for (i = 0; i < SHAPE_SLOTS; i++) {
        struct shape_ent *x = &t->e[i];
        uint16_t          n;

        if (__atomic_load_n(&x->key, __ATOMIC_ACQUIRE) == 0)
            continue;
        n = __atomic_exchange_n(&x->wconns[ws], 0, __ATOMIC_ACQ_REL);
        if (n > 0)
            st_sub(&x->conns, n);
    }
}

/* ---- rates ---- */

/* st_fleet_lapse - the slots of kind k that passed unspent (more than a
 * slot and the pair's burst ago) are lost: spent late they would meet
 * another node's slots, and the fleet would pass the rate. */
static void
st_fleet_lapse(struct shape_ent *x, int k, uint64_t now, uint64_t tol_us,
    uint64_t iv)
{
    uint64_t n = __atomic_load_n(&x->fl_next_us[k], __ATOMIC_RELAXED), miss;
    int32_t  c;

    if (iv == 0 || now < n + tol_us + iv)
        return;
    miss = (now - n - tol_us) / iv;
    if (!__atomic_compare_exchange_n(&x->fl_next_us[k], &n, n + miss * iv, 0,
        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return;                     /* another worker did */
    c = __atomic_load_n(&x->fl_tok[k], __ATOMIC_RELAXED);
    while (c > 0 && !__atomic_compare_exchange_n(&x->fl_tok[k], &c,
        (uint64_t)c > miss ? c - (int32_t)miss : 0, 1, __ATOMIC_ACQ_REL,
        __ATOMIC_RELAXED))
        ;
}

/* st_fleet_token - cluster mode: one token of kind k from the stock,
 * no sooner than its time (take), or only look; -1 with *nb when the
 * stock is empty (counted as demand: *nb is then 0) or the next token is
 * not due yet.  tol_us: the burst the pair's own rate allows; a slot
 * missed by more than it and a slot lapses (st_fleet_lapse). */
static int
st_fleet_token(struct shape_ent *x, int k, int take, uint64_t now,
    uint64_t tol_us, uint64_t *nb)
{
    int32_t  c = __atomic_load_n(&x->fl_tok[k], __ATOMIC_RELAXED);
    uint64_t n, iv = __atomic_load_n(&x->fl_iv_us[k], __ATOMIC_RELAXED);

    *nb = 0;
    st_fleet_lapse(x, k, now, tol_us, iv);
    c = __atomic_load_n(&x->fl_tok[k], __ATOMIC_RELAXED);
    do {
        if (c <= 0) {
            __atomic_add_fetch(&x->fl_want[k], 1, __ATOMIC_RELAXED);
            return -1;
        }
        n = __atomic_load_n(&x->fl_next_us[k], __ATOMIC_RELAXED);
        if (now < n) {
            /* mail waits: demand too, so the fleet's schedule stays
             * reserved without gaps (an unreserved slot is lost) */
            __atomic_add_fetch(&x->fl_want[k], 1, __ATOMIC_RELAXED);
            *nb = n;
            return -1;
        }
        if (!take)
            return 0;
    } while (!__atomic_compare_exchange_n(&x->fl_tok[k], &c, c - 1, 1,
        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    /* the token is ours; its time too, unless another worker took it */
    for (;;) {
        n = __atomic_load_n(&x->fl_next_us[k], __ATOMIC_RELAXED);
        if (now < n) {
            __atomic_add_fetch(&x->fl_tok[k], 1, __ATOMIC_RELAXED);
            *nb = n;
            return -1;
        }
        if (__atomic_compare_exchange_n(&x->fl_next_us[k], &n, n + iv, 0,
            __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            break;
    }
    __atomic_add_fetch(&x->fl_used[k], 1, __ATOMIC_RELAXED);
    return 0;
}

/* st_fleet_tol - the burst of the pair's rates of kind, in time */
static uint64_t
st_fleet_tol(const struct shape_limits *lim, int kind, const uint64_t *iv)
{
    if (kind == SHAPE_R_CONN)
        return lim->rate[SHAPE_R_CONN].n > 1 ?
            (uint64_t)(lim->rate[SHAPE_R_CONN].n - 1) * iv[SHAPE_R_CONN] : 0;
    return (uint64_t)lim->burst * (iv[SHAPE_R_SEC] > iv[SHAPE_R_MIN] ?
        iv[SHAPE_R_SEC] : iv[SHAPE_R_MIN]);
}

/* st_gcra - the shared form of shape_gcra(): a CAS on the word. */
static int
st_gcra(uint64_t *word, uint64_t now_us, uint64_t iv, uint32_t burst,
    int take, uint64_t *nb)
{
    uint64_t old = __atomic_load_n(word, __ATOMIC_RELAXED), tat;

    for (;;) {
        tat = old;
        if (shape_gcra(&tat, now_us, iv, burst, nb) < 0)
            return -1;
        if (!take)
            return 0;
        if (__atomic_compare_exchange_n(word, &old, tat, 1,
            __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return 0;
    }
}

int
shape_suspended(struct shape_table *t, int e, uint64_t now_wall_ms)
{
    struct shape_ent *x = &t->e[e];

    return __atomic_load_n(&x->mode, __ATOMIC_ACQUIRE) == SHAPE_M_SUSPEND &&
        now_wall_ms < __atomic_load_n(&x->until_ms, __ATOMIC_RELAXED);
}

int
shape_may(struct shape_table *t, int e, const struct shape_limits *lim,
    int kind, int take, uint64_t now_us, uint64_t now_wall_ms,
    uint64_t *not_before_us)
{
    struct shape_ent *x = &t->e[e];
    uint32_t          mode = __atomic_load_n(&x->mode, __ATOMIC_ACQUIRE);
    uint32_t          factor = 1000, step;
    struct shape_rate base = { 0, 0 };
    uint64_t          iv[SHAPE_NRATES], nb = 0, b;
    int               r, lo, hi, taken = -1, any = 0, fk;

    if (mode == SHAPE_M_SUSPEND) {
        uint64_t until = __atomic_load_n(&x->until_ms, __ATOMIC_RELAXED);

        if (now_wall_ms < until) {
            *not_before_us = now_us + (until - now_wall_ms) * 1000;
            return -1;
        }
    } else if (mode == SHAPE_M_SLOW) {
        struct shape_action a = x->act;     /* a torn copy is still sane */

        factor = shape_ramp(&a, x->since_ms, now_wall_ms, &step);
        base = a.base;
    }
    lo = kind == SHAPE_R_CONN ? SHAPE_R_CONN : SHAPE_R_SEC;
    hi = kind == SHAPE_R_CONN ? SHAPE_R_CONN : SHAPE_R_HOUR;
    for (r = lo; r <= hi; r++) {
        iv[r] = shape_interval_us(&lim->rate[r], factor);
        any |= iv[r] != 0;
    }
    fk = kind == SHAPE_R_CONN ? SHAPE_FLEET_CONN : SHAPE_FLEET_MSG;
    if (t->fleet && any && st_fleet_token(x, fk, take, now_us,
        st_fleet_tol(lim, kind, iv), &nb) < 0) {
        *not_before_us = nb ? nb : now_us + t->fleet_wait_us;
        return -1;
    }
    /* the fleet's token was the rate's check: its slot is the pair's
     * schedule for the whole fleet (a local one on top would only make
     * tokens late, and a late slot is lost) */
    if (t->fleet && any)
        return 0;
    /* slowing a site without a rate of its own: from the rule's base */
    if (!any && factor < 1000 && kind != SHAPE_R_CONN)
        iv[SHAPE_R_SEC] = shape_interval_us(&base, factor);
    for (r = lo; r <= hi; r++) {
        uint32_t burst = r == SHAPE_R_CONN ? (lim->rate[r].n > 0 ?
            lim->rate[r].n - 1 : 0) : lim->burst;

        if (iv[r] == 0)
            continue;
        if (st_gcra(&x->tat[r], now_us, iv[r], burst, take, &b) < 0) {
            if (b > nb)
                nb = b;
            break;
        }
        taken = r;
    }
    if (r <= hi) {
        /* a later rate said no: give the earlier ones their event back */
        for (; take && taken >= lo; taken--)
            if (iv[taken] != 0)
                __atomic_sub_fetch(&x->tat[taken], iv[taken],
                    __ATOMIC_RELAXED);
        *not_before_us = nb;
        return -1;
    }
    return 0;
}

/* ---- back-off ---- */

static void
st_lock(struct shape_ent *x)
{
    uint32_t z;
    unsigned n = 0;

    for (;;) {
        z = 0;
        if (__atomic_compare_exchange_n(&x->lock, &z, 1, 0,
            __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        if (++n > 64)
            sched_yield();
    }
}

static void
st_unlock(struct shape_ent *x)
{
    __atomic_store_n(&x->lock, 0, __ATOMIC_RELEASE);
}

/* st_push_tat - a slow-down starts: the next event of each rate no
 * sooner than one interval at the new factor from now (else the first
 * one would come at the old spacing, into the receiver's window again). */
static void
st_push_tat(struct shape_ent *x, const struct shape_action *a)
{
    struct timespec ts;
    uint64_t        now, iv, old, want;
    int             r, any = 0;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
    for (r = SHAPE_R_SEC; r <= SHAPE_R_HOUR; r++) {
        iv = shape_interval_us(&x->lim.rate[r], a->factor);
        any |= iv != 0;
        if (iv == 0)
            continue;
        old = __atomic_load_n(&x->tat[r], __ATOMIC_RELAXED);
        want = now + iv;
        while (old < want && !__atomic_compare_exchange_n(&x->tat[r], &old,
            want, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            ;
    }
    if (!any && (iv = shape_interval_us(&a->base, a->factor)) != 0)
        __atomic_store_n(&x->tat[SHAPE_R_SEC], now + iv, __ATOMIC_RELAXED);
}

int
shape_backoff(struct shape_table *t, int e, const struct shape_action *a,
    const char *reply, uint64_t now, int manual)
{
    struct shape_ent *x = &t->e[e];
    uint32_t          step, cur;
    int               changed = 0;

    if (a->act != SHAPE_ACT_SUSPEND && a->act != SHAPE_ACT_SLOW)
        return 0;
    st_lock(x);
    if (a->act == SHAPE_ACT_SUSPEND) {
        if (x->mode != SHAPE_M_SUSPEND || x->until_ms < now + a->for_ms ||
            manual) {
            x->until_ms = now + a->for_ms;
            if (x->mode != SHAPE_M_SUSPEND || x->until_ms <= now)
                x->since_ms = now;
            __atomic_store_n(&x->mode, SHAPE_M_SUSPEND, __ATOMIC_RELEASE);
            changed = 1;
        }
    } else if (x->mode != SHAPE_M_SUSPEND || x->until_ms <= now) {
        cur = x->mode == SHAPE_M_SLOW ? shape_ramp(&x->act, x->since_ms,
            now, &step) : 1000;
        if (a->factor < cur) {
            x->act = *a;
            st_push_tat(x, a);
            x->since_ms = now;
            x->until_ms = now + a->for_ms + (uint64_t)a->steps * a->step_ms;
            x->step = 0;
            __atomic_store_n(&x->mode, SHAPE_M_SLOW, __ATOMIC_RELEASE);
            changed = 1;
        }
    }
    if (changed) {
        x->manual = (uint32_t)manual;
        util_escape(x->reply, sizeof(x->reply), reply != NULL ? reply : "",
            reply != NULL ? strlen(reply) : 0, 0, NULL);
        x->backoffs++;
    }
    st_unlock(x);
    return changed;
}

int
shape_resume(struct shape_table *t, int e)
{
    struct shape_ent *x = &t->e[e];
    int               had;

    st_lock(x);
    had = x->mode != SHAPE_M_NONE;
    __atomic_store_n(&x->mode, SHAPE_M_NONE, __ATOMIC_RELEASE);
    x->manual = 0;
    st_unlock(x);
    return had;
}

uint64_t
shape_sent(struct shape_table *t, int e)
{
    return __atomic_load_n(&t->e[e].sent, __ATOMIC_RELAXED);
}


void
shape_count(struct shape_table *t, int e, uint64_t sent, uint64_t held)
{
    if (sent)
        __atomic_add_fetch(&t->e[e].sent, sent, __ATOMIC_RELAXED);
    if (held)
        __atomic_add_fetch(&t->e[e].held, held, __ATOMIC_RELAXED);
}

/* ---- the view ---- */

static void
st_view(struct shape_table *t, struct shape_ent *x, uint64_t now,
    struct shape_view *v)
{
    memset(v, 0, sizeof(*v));
    v->e = (int)(x - t->e);
    util_strlcpy(v->site, x->site, sizeof(v->site));
    util_strlcpy(v->source, x->source, sizeof(v->source));
    util_strlcpy(v->domain, x->domain, sizeof(v->domain));
    memcpy(&v->lim, &x->lim, sizeof(v->lim));
    v->conns = __atomic_load_n(&x->conns, __ATOMIC_RELAXED);
    v->mode = (enum shape_mode)__atomic_load_n(&x->mode, __ATOMIC_ACQUIRE);
    v->factor = 1000;
    if (v->mode == SHAPE_M_SUSPEND && now >= x->until_ms)
        v->mode = SHAPE_M_NONE;
    if (v->mode == SHAPE_M_SLOW) {
        v->factor = shape_ramp(&x->act, x->since_ms, now, &v->step);
        v->steps = x->act.steps;
        if (v->step > v->steps)
            v->mode = SHAPE_M_NONE;
    }
    if (v->mode != SHAPE_M_NONE) {
        v->manual = (int)x->manual;
        v->since_ms = x->since_ms;
        v->until_ms = x->until_ms;
    }
    util_strlcpy(v->reply, x->reply, sizeof(v->reply));
    v->sent = __atomic_load_n(&x->sent, __ATOMIC_RELAXED);
    v->held = __atomic_load_n(&x->held, __ATOMIC_RELAXED);
    v->backoffs = __atomic_load_n(&x->backoffs, __ATOMIC_RELAXED);
}

void
shape_tick(struct shape_table *t, uint64_t now, shape_event_fn *ev,
    void *arg)
{
    size_t            i;
    struct shape_view v;

    for (i = 0; t != NULL && i < SHAPE_SLOTS; i++) {
        struct shape_ent *x = &t->e[i];
        const char       *what = NULL;
        uint32_t          step, mode;

        if ((__atomic_load_n(&x->key, __ATOMIC_ACQUIRE) & ST_STATE) !=
            ST_READY)
            continue;
        mode = __atomic_load_n(&x->mode, __ATOMIC_ACQUIRE);
        if (mode == SHAPE_M_NONE)
            continue;
        st_lock(x);
        if (x->mode == SHAPE_M_SUSPEND && now >= x->until_ms) {
            x->mode = SHAPE_M_NONE;
            what = "end";
        } else if (x->mode == SHAPE_M_SLOW) {
            (void)shape_ramp(&x->act, x->since_ms, now, &step);
            if (step > x->act.steps) {
                x->mode = SHAPE_M_NONE;
                what = "end";
            } else if (step != x->step) {
                x->step = step;
                what = "step";
            }
        }
        st_unlock(x);
        if (what != NULL) {
            st_view(t, x, now, &v);
            ev(arg, &v, what);
        }
    }
}

size_t
shape_table_list(struct shape_table *t, uint64_t now, struct shape_view *out,
    size_t max)
{
    size_t i, n = 0;

    for (i = 0; t != NULL && i < SHAPE_SLOTS && n < max; i++) {
        struct shape_ent *x = &t->e[i];

        if ((__atomic_load_n(&x->key, __ATOMIC_ACQUIRE) & ST_STATE) !=
            ST_READY)
            continue;
        st_view(t, x, now, &out[n++]);
    }
    return n;
}

const char *
shape_site_seen(struct shape_table *t, const char *domain, char *site)
{
    size_t i;

    for (i = 0; t != NULL && i < SHAPE_SLOTS; i++) {
        struct shape_ent *x = &t->e[i];

        if ((__atomic_load_n(&x->key, __ATOMIC_ACQUIRE) & ST_STATE) ==
            ST_READY && strcasecmp(x->domain, domain) == 0) {
            util_strlcpy(site, x->site, SHAPE_NAME_MAX);
            return site;
        }
    }
    return NULL;
}


size_t
shape_table_each(struct shape_table *t, const char *site, const char *source,
    void (*fn)(struct shape_table *, int, void *), void *arg)
{
    size_t i, n = 0;

    for (i = 0; t != NULL && i < SHAPE_SLOTS; i++) {
        struct shape_ent *x = &t->e[i];

        if ((__atomic_load_n(&x->key, __ATOMIC_ACQUIRE) & ST_STATE) !=
            ST_READY || strcmp(x->site, site) != 0 ||
            (source != NULL && strcmp(x->source, source) != 0))
            continue;
        fn(t, (int)i, arg);
        n++;
    }
    return n;
}


/* ---- the fleet ---- */

void
shape_fleet_on(struct shape_table *t, uint32_t wait_us)
{
    t->fleet_wait_us = wait_us;
    __atomic_store_n(&t->fleet, 1, __ATOMIC_RELEASE);
}

void
shape_fleet_off(struct shape_table *t)
{
    __atomic_store_n(&t->fleet, 0, __ATOMIC_RELEASE);
}

int
shape_fleet_is(const struct shape_table *t)
{
    return t != NULL && __atomic_load_n(&t->fleet, __ATOMIC_ACQUIRE);
}

void
shape_fleet_get(struct shape_table *t, int e, struct shape_fleet *f)
{
    struct shape_ent *x = &t->e[e];
    int               k;

    f->conns = __atomic_load_n(&x->conns, __ATOMIC_RELAXED);
    f->grant = __atomic_load_n(&x->fl_grant, __ATOMIC_RELAXED);
    f->conn_want = __atomic_load_n(&x->fl_conn_want, __ATOMIC_RELAXED);
    for (k = 0; k < 2; k++) {
        f->tokens[k] = __atomic_load_n(&x->fl_tok[k], __ATOMIC_RELAXED);
        f->used[k] = __atomic_load_n(&x->fl_used[k], __ATOMIC_RELAXED);
        f->want[k] = __atomic_load_n(&x->fl_want[k], __ATOMIC_RELAXED);
        f->next_us[k] = __atomic_load_n(&x->fl_next_us[k], __ATOMIC_RELAXED);
    }
}

void
shape_fleet_grant(struct shape_table *t, int e, uint32_t grant)
{
    __atomic_store_n(&t->e[e].fl_grant, grant, __ATOMIC_RELEASE);
}

void
shape_fleet_add(struct shape_table *t, int e, int kind, int32_t n,
    uint64_t first_us, uint64_t iv_us)
{
    struct shape_ent *x = &t->e[e];
    int               k = kind & 1;
    int32_t           left = __atomic_load_n(&x->fl_tok[k], __ATOMIC_RELAXED);
    uint64_t          nx, want;

    /* the tokens left go first, ending where the new ones start */
    __atomic_store_n(&x->fl_iv_us[k], iv_us, __ATOMIC_RELAXED);
    want = left > 0 && first_us > (uint64_t)left * iv_us ?
        first_us - (uint64_t)left * iv_us : left > 0 ? 0 : first_us;
    nx = __atomic_load_n(&x->fl_next_us[k], __ATOMIC_RELAXED);
    while (nx < want && !__atomic_compare_exchange_n(&x->fl_next_us[k], &nx,
        want, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        ;
    __atomic_add_fetch(&x->fl_tok[k], n, __ATOMIC_ACQ_REL);
}

int32_t
shape_fleet_drain(struct shape_table *t, int e, int kind)
{
    int32_t n = __atomic_exchange_n(&t->e[e].fl_tok[kind & 1], 0,
        __ATOMIC_ACQ_REL);

    return n > 0 ? n : 0;
}

int
shape_backoff_get(struct shape_table *t, int e, uint64_t now,
    struct shape_action *a, uint64_t *since_ms, char reply[SHAPE_REPLY_MAX])
{
    struct shape_ent *x = &t->e[e];
    uint32_t          step;
    int               on = 0;

    st_lock(x);
    if (x->mode == SHAPE_M_SUSPEND && now < x->until_ms) {
        memset(a, 0, sizeof(*a));
        a->act = SHAPE_ACT_SUSPEND;
        a->for_ms = x->until_ms - x->since_ms;
        on = 1;
    } else if (x->mode == SHAPE_M_SLOW) {
        (void)shape_ramp(&x->act, x->since_ms, now, &step);
        if (step <= x->act.steps) {
            *a = x->act;
            on = 1;
        }
    }
    if (on) {
        *since_ms = x->since_ms;
        memcpy(reply, x->reply, SHAPE_REPLY_MAX);
    }
    st_unlock(x);
    return on;
}
