/*
 * dns.c - c-ares in the ev loop, the rrset cache, MX/host/raw lookups.
 *
 * PURPOSE   See dns.h.  Three layers:
 *           1. the channel: c-ares sockets watched with ev (sock state
 *              callback), ares_process_fd() on readiness, one ev timer
 *              from ares_timeout();
 *           2. the cache: one entry per (name, type), pending while its
 *              query is in flight (later askers wait on it: joining),
 *              then holding the parsed answer until it expires;
 *           3. requests: a "chase" fetches one (name, type) and follows
 *              CNAMEs; an MX request chases MX, then A/AAAA for each host,
 *              and assembles the destination.
 * CONTRACT  Internal steps may complete synchronously (cache hits); the
 *           caller's callback always runs from a zero-delay ev timer, so
 *           never inside dns_mx() and friends.  An entry being fanned out
 *           is "busy" and cannot be evicted by lookups its waiters start.
 * FAILURE   Never logs; a lookup's failure is its result's status/why.
 * SEE ALSO  dns.h, msg.c (parsing), RFC 1035, 2181, 2308, 5321 5.1, 7505.
 */
#include <arpa/inet.h>
#include <ares.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "common/ev.h"
#include "common/util.h"
#include "dns/dns.h"

#define DNS_MAX_HOPS   8            /* CNAMEs followed per lookup */
#define DNS_MAX_MX     32           /* MX hosts considered */
#define DNS_MAX_ADDR   64           /* addresses kept per host */

struct dns_chase;

struct dns_waiter {
    struct dns_waiter  *next;
    struct dns_chase   *c;
};

struct dns_entry {
    struct dns_entry   *hnext;      /* hash chain */
    struct dns_entry   *prev, *next; /* LRU list, oldest first (done only) */
    struct dns         *d;
    char                name[DNS_NAME_MAX];
    uint16_t            type;
    int                 pending, busy, linked;
    enum dns_status     status;
    char                why[160];
    uint64_t            expires;    /* ms on d's clock */
    struct dns_msg      msg;
    struct dns_waiter  *waiters, **wtail;
};

enum dns_kind { DNS_REQ_MX, DNS_REQ_HOST, DNS_REQ_QUERY };

/* What a chase found: status, the final name and its entry (valid only
 * during the done callback). */
typedef void dns_chase_fn(struct dns_chase *c, enum dns_status st,
    const struct dns_entry *e, const char *why);

struct dns_chase {
    struct dns_chase   *next;       /* in its request */
    struct dns_req     *req;
    char                name[DNS_NAME_MAX]; /* current, after CNAMEs */
    uint16_t            type;
    int                 hops, secure;
    uint32_t            ttl;        /* min seconds left over the chain */
    size_t              slot;       /* host index */
    dns_chase_fn       *done;
};

struct dns_hostwork {
    struct dns_addr     v4[DNS_MAX_ADDR], v6[DNS_MAX_ADDR];
    size_t              n4, n6;
    int                 temp, nx, secure, answered;
    uint32_t            ttl;
    char                why[160];
};

struct dns_req {
    struct dns_req     *prev, *next; /* d->reqs */
    struct dns         *d;
    enum dns_kind       kind;
    int                 cancelled, finished;
    unsigned            outstanding;
    struct ev_timer     timer;      /* delivers the result */
    dns_dest_fn        *dfn;
    dns_rrset_fn       *rfn;
    void               *arg;
    struct dns_chase   *chases;
    struct dns_dest    *dest;
    struct dns_rrset   *set;
    struct dns_hostwork *work;      /* one per dest->host */
};

struct dns {
    struct ev_loop     *loop;
    ares_channel        ch;
    struct dns_options  o;
    struct ev_timer     timer;      /* c-ares timeouts */
    struct dns_entry  **tab;
    size_t              tabmask, count;
    struct dns_entry   *lru_head, *lru_tail;
    struct dns_req     *reqs;
    uint64_t          (*now_fn)(void *);
    void               *now_arg;
    int                 closing;
    struct dns_stats    st;
};

static void dns_chase_start(struct dns_chase *c);
static void dns_chase_step(struct dns_chase *c, const struct dns_entry *e);

/* ---------------- channel ---------------- */

static void
dns_rearm(struct dns *d)
{
    struct timeval tv, *t;

    if (d->closing)
        return;
    t = ares_timeout(d->ch, NULL, &tv);
    if (t == NULL) {
        ev_timer_stop(d->loop, &d->timer);
        return;
    }
    ev_timer_start(d->loop, &d->timer, (uint64_t)t->tv_sec * 1000 +
        ((uint64_t)t->tv_usec + 999) / 1000);
}


static void
dns_on_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct dns *d = arg;

    (void)loop;
    ares_process_fd(d->ch,
        (events & (EV_READ | EV_ERROR)) ? fd : ARES_SOCKET_BAD,
        (events & EV_WRITE) ? fd : ARES_SOCKET_BAD);
    dns_rearm(d);
}


static void
dns_on_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct dns *d = arg;

    (void)loop;
    (void)t;
    ares_process_fd(d->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    dns_rearm(d);
}


/* dns_sock_state - c-ares opens, closes or changes interest in a socket. */
static void
dns_sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
    struct dns *d = data;

    /* An ev_watch() failure (ENOMEM) leaves the socket unwatched: its
     * query then ends by timeout, as a lost packet would. */
    if (!readable && !writable)
        ev_unwatch(d->loop, fd);
    else
        (void)ev_watch(d->loop, fd, (readable ? EV_READ : 0) |
            (writable ? EV_WRITE : 0), dns_on_io, d);
}


static uint64_t
dns_now(const struct dns *d)
{
    return d->now_fn != NULL ? d->now_fn(d->now_arg) : util_now_ms();
}


/* dns_left - whole seconds until e expires (0 when past). */
static uint32_t
dns_left(const struct dns *d, const struct dns_entry *e)
{
    uint64_t now = dns_now(d);

    return e->expires > now ? (uint32_t)((e->expires - now + 999) / 1000) : 0;
}


/* ---------------- cache ---------------- */

static size_t
dns_hash(const struct dns *d, const char *name, uint16_t type)
{
    uint32_t h = 2166136261u ^ type;

    for (; *name != '\0'; name++) {
        h ^= (unsigned char)*name;
        h *= 16777619u;
    }
    return h & d->tabmask;
}


static void
dns_lru_unlink(struct dns *d, struct dns_entry *e)
{
    if (!e->linked)
        return;
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        d->lru_head = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    else
        d->lru_tail = e->prev;
    e->prev = e->next = NULL;
    e->linked = 0;
}


static void
dns_lru_append(struct dns *d, struct dns_entry *e)
{
    e->prev = d->lru_tail;
    e->next = NULL;
    if (d->lru_tail != NULL)
        d->lru_tail->next = e;
    else
        d->lru_head = e;
    d->lru_tail = e;
    e->linked = 1;
}


static struct dns_entry *
dns_find(struct dns *d, const char *name, uint16_t type)
{
    struct dns_entry *e;

    for (e = d->tab[dns_hash(d, name, type)]; e != NULL; e = e->hnext)
        if (e->type == type && strcmp(e->name, name) == 0)
            return e;
    return NULL;
}


/* dns_unhash - take e out of the table and the LRU (not freed). */
static void
dns_unhash(struct dns *d, struct dns_entry *e)
{
    struct dns_entry **pp;

    for (pp = &d->tab[dns_hash(d, e->name, e->type)]; *pp != NULL;
        pp = &(*pp)->hnext)
        if (*pp == e) {
            *pp = e->hnext;
            d->count--;
            break;
        }
    e->hnext = NULL;
    dns_lru_unlink(d, e);
}


static void
dns_entry_free(struct dns_entry *e)
{
    struct dns_waiter *w, *wn;

    for (w = e->waiters; w != NULL; w = wn) {
        wn = w->next;
        free(w);
    }
    dns_msg_clear(&e->msg);
    free(e);
}


/* dns_evict - drop least recently used idle entries until there is room. */
static void
dns_evict(struct dns *d)
{
    struct dns_entry *e, *next;

    for (e = d->lru_head; e != NULL && d->count >= d->o.cache_max; e = next) {
        next = e->next;
        if (e->busy)
            continue;
        dns_unhash(d, e);
        dns_entry_free(e);
        d->st.evictions++;
    }
}


static uint32_t
dns_clamp(const struct dns *d, uint32_t ttl)
{
    if (ttl < d->o.min_ttl)
        ttl = d->o.min_ttl;
    if (ttl > d->o.max_ttl)
        ttl = d->o.max_ttl;
    return ttl;
}


/*
 * dns_follow - the name qname leads to through the CNAMEs in m (at most
 * DNS_MAX_HOPS - *hops more), into out; the smallest TTL on the way goes
 * into *ttl.  The answer's own records of type at that name count too.
 */
static void
dns_follow(const struct dns_msg *m, const char *qname, uint16_t type,
    char *out, int *hops, uint32_t *ttl, size_t *nfound)
{
    size_t  i;
    int     moved;

    snprintf(out, DNS_NAME_MAX, "%s", qname);
    do {
        moved = 0;
        for (i = 0; i < m->nan; i++)
            if (m->an[i].type == DNS_T_CNAME && type != DNS_T_CNAME &&
                strcmp(m->an[i].owner, out) == 0 && *hops < DNS_MAX_HOPS) {
                snprintf(out, DNS_NAME_MAX, "%s", m->an[i].target);
                if (m->an[i].ttl < *ttl)
                    *ttl = m->an[i].ttl;
                (*hops)++;
                moved = 1;
                break;
            }
    } while (moved);
    *nfound = 0;
    for (i = 0; i < m->nan; i++)
        if (m->an[i].type == type && strcmp(m->an[i].owner, out) == 0) {
            if (m->an[i].ttl < *ttl)
                *ttl = m->an[i].ttl;
            (*nfound)++;
        }
}


/* dns_settle - status and lifetime of an entry from its answer. */
static void
dns_settle(struct dns *d, struct dns_entry *e, int status,
    const unsigned char *abuf, int alen)
{
    char        final[DNS_NAME_MAX];
    uint32_t    ttl = UINT32_MAX;
    size_t      nfound;
    int         hops = 0;

    e->status = DNS_TEMPFAIL;
    e->expires = 0;
    if (status != ARES_SUCCESS || abuf == NULL) {
        /* c-ares skips a server that answers SERVFAIL or REFUSED and, when
         * none is left, reports ECONNREFUSED: say all three. */
        snprintf(e->why, sizeof(e->why), "%s", status == ARES_ESERVFAIL ?
            "server failure (SERVFAIL)" : status == ARES_ETIMEOUT ?
            "timed out" : status == ARES_ECONNREFUSED ? "no usable answer "
            "(SERVFAIL, REFUSED or connection refused)" :
            ares_strerror(status));
        return;
    }
    if (dns_msg_parse(abuf, (size_t)alen, &e->msg) != 0) {
        snprintf(e->why, sizeof(e->why), "malformed answer");
        return;
    }
    if (e->msg.rcode != 0 && e->msg.rcode != 3) {
        snprintf(e->why, sizeof(e->why), "server answered rcode %d%s",
            e->msg.rcode, e->msg.rcode == 2 ? " (SERVFAIL)" :
            e->msg.rcode == 5 ? " (REFUSED)" : "");
        return;
    }
    dns_follow(&e->msg, e->name, e->type, final, &hops, &ttl, &nfound);
    if (e->msg.rcode == 3)
        e->status = DNS_NXDOMAIN;
    else
        e->status = nfound > 0 ? DNS_OK : DNS_NODATA;
    if (nfound == 0) {
        /* RFC 2308 5: negative answers live min(SOA TTL, MINIMUM); with
         * no SOA they are not cached beyond min_ttl. */
        uint32_t neg = e->msg.have_soa ? e->msg.neg_ttl : 0;

        ttl = neg < ttl ? neg : ttl;
    }
    e->expires = dns_now(d) + (uint64_t)dns_clamp(d, ttl) * 1000;
}


/* dns_fan_out - hand a settled entry to every waiter. */
static void
dns_fan_out(struct dns_entry *e)
{
    struct dns_waiter *w;
    struct dns_chase  *c;

    e->busy++;
    while ((w = e->waiters) != NULL) {
        e->waiters = w->next;
        if (e->waiters == NULL)
            e->wtail = &e->waiters;
        c = w->c;
        free(w);
        dns_chase_step(c, e);
    }
    e->busy--;
}


/* dns_on_answer - c-ares is done with an entry's query. */
static void
dns_on_answer(void *arg, int status, int timeouts, unsigned char *abuf,
    int alen)
{
    struct dns_entry *e = arg;
    struct dns       *d = e->d;

    (void)timeouts;
    if (d->closing)                 /* ares_destroy(): dns_free() frees */
        return;
    dns_settle(d, e, status, abuf, alen);
    e->pending = 0;
    if (e->status == DNS_TEMPFAIL) {
        dns_unhash(d, e);           /* temporary failures are not cached */
        dns_fan_out(e);
        dns_entry_free(e);
        return;
    }
    dns_lru_append(d, e);
    dns_fan_out(e);
}


/* dns_fetch - the entry for (c->name, c->type): cached, joined or asked. */
static void
dns_fetch(struct dns *d, struct dns_chase *c)
{
    struct dns_entry  *e;
    struct dns_waiter *w;
    unsigned char     *q = NULL;
    int                qlen = 0, rc;

    e = dns_find(d, c->name, c->type);
    if (e != NULL && !e->pending && !e->busy && dns_now(d) >= e->expires) {
        dns_unhash(d, e);           /* expired */
        dns_entry_free(e);
        e = NULL;
    }
    if (e != NULL && !e->pending) {
        d->st.cache_hits++;
        if (e->linked) {            /* most recently used */
            dns_lru_unlink(d, e);
            dns_lru_append(d, e);
        }
        e->busy++;
        dns_chase_step(c, e);
        e->busy--;
        return;
    }
    w = xcalloc(1, sizeof(*w));
    w->c = c;
    if (e != NULL) {                /* in flight: wait for the same answer */
        d->st.joined++;
        *e->wtail = w;
        e->wtail = &w->next;
        return;
    }
    if (d->count >= d->o.cache_max)
        dns_evict(d);
    e = xcalloc(1, sizeof(*e));
    e->d = d;
    snprintf(e->name, sizeof(e->name), "%s", c->name);
    e->type = c->type;
    e->pending = 1;
    e->waiters = w;
    e->wtail = &w->next;
    e->hnext = d->tab[dns_hash(d, e->name, e->type)];
    d->tab[dns_hash(d, e->name, e->type)] = e;
    d->count++;
    d->st.queries++;
    rc = ares_create_query(e->name, 1 /* IN */, e->type, 0, 1, &q, &qlen, 0);
    if (rc != ARES_SUCCESS || qlen < 12) {
        if (q != NULL)
            ares_free_string(q);
        dns_on_answer(e, rc != ARES_SUCCESS ? rc : ARES_EBADQUERY, 0, NULL,
            0);
        return;
    }
    /* RFC 6840 5.7: AD=1 in the query asks a validating resolver to say
     * whether the answer validated, without the DO bit's RRSIG bulk. */
    q[3] |= 0x20;
    ares_send(d->ch, q, qlen, dns_on_answer, e);
    ares_free_string(q);
    dns_rearm(d);
}


static void
dns_chase_start(struct dns_chase *c)
{
    dns_fetch(c->req->d, c);
}


/* dns_has_cname - does m hold a CNAME owned by name? */
static int
dns_has_cname(const struct dns_msg *m, const char *name)
{
    size_t i;

    for (i = 0; i < m->nan; i++)
        if (m->an[i].type == DNS_T_CNAME && strcmp(m->an[i].owner, name) == 0)
            return 1;
    return 0;
}


/*
 * dns_chase_step - one answer for a chase: done, or ask again for the
 * target of a CNAME the server did not follow (an out-of-zone target at
 * an authoritative server).
 */
static void
dns_chase_step(struct dns_chase *c, const struct dns_entry *e)
{
    char        final[DNS_NAME_MAX], why[DNS_NAME_MAX + 64];
    uint32_t    ttl = UINT32_MAX, left;
    size_t      nfound;
    int         hops = c->hops;

    if (e->status == DNS_TEMPFAIL) {
        c->done(c, DNS_TEMPFAIL, e, e->why);
        return;
    }
    c->secure = c->secure && e->msg.ad;
    left = dns_left(c->req->d, e);
    if (left < c->ttl)
        c->ttl = left;
    dns_follow(&e->msg, c->name, c->type, final, &hops, &ttl, &nfound);
    if (nfound == 0 && c->type != DNS_T_CNAME && hops >= DNS_MAX_HOPS &&
        dns_has_cname(&e->msg, final)) {
        snprintf(why, sizeof(why), "CNAME chain longer than %d at %s",
            DNS_MAX_HOPS, final);
        c->done(c, DNS_TEMPFAIL, e, why);
        return;
    }
    if (e->status == DNS_NXDOMAIN) {
        snprintf(c->name, sizeof(c->name), "%s", final);
        c->done(c, DNS_NXDOMAIN, e, "no such domain (NXDOMAIN)");
        return;
    }
    if (nfound == 0 && strcmp(final, c->name) != 0 && !e->msg.have_soa) {
        snprintf(c->name, sizeof(c->name), "%s", final);
        c->hops = hops;
        dns_chase_start(c);
        return;
    }
    snprintf(c->name, sizeof(c->name), "%s", final);
    c->hops = hops;
    c->done(c, nfound > 0 ? DNS_OK : DNS_NODATA, e,
        nfound > 0 ? "" : "no record of that type (NODATA)");
}


/* ---------------- requests ---------------- */

static void
dns_req_free(struct dns_req *r)
{
    struct dns_chase *c, *cn;

    if (r->prev != NULL)
        r->prev->next = r->next;
    else if (r->d->reqs == r)
        r->d->reqs = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    for (c = r->chases; c != NULL; c = cn) {
        cn = c->next;
        free(c);
    }
    free(r->work);
    dns_dest_free(r->dest);
    dns_rrset_free(r->set);
    free(r);
}


static void
dns_req_deliver(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct dns_req   *r = arg;
    struct dns_dest  *dest = r->dest;
    struct dns_rrset *set = r->set;
    dns_dest_fn      *dfn = r->dfn;
    dns_rrset_fn     *rfn = r->rfn;
    void             *a = r->arg;

    (void)loop;
    (void)t;
    r->dest = NULL;
    r->set = NULL;
    dns_req_free(r);                /* before the callback: it may dns_free */
    if (dfn != NULL)
        dfn(dest, a);
    else
        rfn(set, a);
}


static void
dns_req_finish(struct dns_req *r)
{
    r->finished = 1;
    if (r->cancelled) {
        dns_req_free(r);
        return;
    }
    ev_timer_start(r->d->loop, &r->timer, 0);
}


static struct dns_req *
dns_req_new(struct dns *d, enum dns_kind kind, void *arg)
{
    struct dns_req *r = xcalloc(1, sizeof(*r));

    r->d = d;
    r->kind = kind;
    r->arg = arg;
    ev_timer_init(&r->timer, dns_req_deliver, r);
    r->next = d->reqs;
    if (d->reqs != NULL)
        d->reqs->prev = r;
    d->reqs = r;
    r->outstanding = 1;             /* held until every step is started */
    return r;
}


static void
dns_req_chase(struct dns_req *r, const char *name, uint16_t type,
    size_t slot, dns_chase_fn *fn)
{
    struct dns_chase *c = xcalloc(1, sizeof(*c));

    c->req = r;
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->type = type;
    c->secure = 1;
    c->ttl = UINT32_MAX;
    c->slot = slot;
    c->done = fn;
    c->next = r->chases;
    r->chases = c;
    r->outstanding++;
    dns_chase_start(c);
}


/* dns_append - copy up to lim of n addresses into h, counting *total. */
static void
dns_append(struct dns_host *h, const struct dns_addr *a, size_t n,
    size_t lim, size_t *total)
{
    size_t i;

    for (i = 0; i < n && *total < lim; i++) {
        h->addr[h->naddr++] = a[i];
        (*total)++;
    }
}


/* dns_assemble - the destination from every host's address answers. */
static void
dns_assemble(struct dns_req *r)
{
    struct dns_dest *dest = r->dest;
    struct dns_hostwork *w;
    struct dns_host *h;
    size_t  i, o = 0, total = 0, lim = r->d->o.address_limit;
    int     temp = 0, v6first = r->d->o.prefer == DNS_IPV6;
    const char *tempwhy = "", *tempname = "";

    for (i = 0; i < dest->nhost; i++) {
        h = &dest->host[i];
        w = &r->work[i];
        h->addr = xcalloc(w->n4 + w->n6 + 1, sizeof(*h->addr));
        dns_append(h, v6first ? w->v6 : w->v4, v6first ? w->n6 : w->n4, lim,
            &total);
        dns_append(h, v6first ? w->v4 : w->v6, v6first ? w->n4 : w->n6, lim,
            &total);
        h->secure = w->secure;
        h->ttl = w->ttl == UINT32_MAX ? 0 : w->ttl;
        h->status = w->n4 + w->n6 > 0 ? DNS_OK : w->temp ? DNS_TEMPFAIL :
            w->nx ? DNS_NXDOMAIN : DNS_NODATA;
        if (h->status == DNS_TEMPFAIL && !temp) {
            temp = 1;
            tempwhy = w->why;
            tempname = h->name;
        }
        if (h->status == DNS_OK && h->naddr == 0) {  /* past the limit */
            free(h->addr);
            continue;
        }
        if (o != i)
            dest->host[o] = *h;
        o++;
    }
    dest->nhost = o;
    if (total > 0)
        return;
    if (temp) {
        dest->status = DNS_TEMPFAIL;
        snprintf(dest->why, sizeof(dest->why), "address lookup for %.160s: "
            "%.60s", tempname, tempwhy);
    } else {
        dest->status = DNS_NODATA;
        snprintf(dest->why, sizeof(dest->why), dest->implicit ?
            "no MX and no address for %.200s" : "no MX host of %.200s has "
            "an address", dest->name);
    }
}


static void
dns_req_check(struct dns_req *r)
{
    if (--r->outstanding > 0)
        return;
    if (r->work != NULL && !r->cancelled)
        dns_assemble(r);
    dns_req_finish(r);
}


/* dns_addr_done - one A or AAAA chase of host c->slot is complete. */
static void
dns_addr_done(struct dns_chase *c, enum dns_status st,
    const struct dns_entry *e, const char *why)
{
    struct dns_req      *r = c->req;
    struct dns_hostwork *w = &r->work[c->slot];
    const struct dns_msg_rr *rr;
    size_t  i;

    w->secure = w->secure && c->secure;
    if (st == DNS_OK) {
        if (c->ttl < w->ttl)
            w->ttl = c->ttl;
        for (i = 0; i < e->msg.nan; i++) {
            rr = &e->msg.an[i];
            if (rr->type != c->type || strcmp(rr->owner, c->name) != 0)
                continue;
            if (rr->type == DNS_T_A && w->n4 < DNS_MAX_ADDR) {
                w->v4[w->n4].family = AF_INET;
                memcpy(&w->v4[w->n4++].a.v4, rr->rdata, 4);
            } else if (rr->type == DNS_T_AAAA && w->n6 < DNS_MAX_ADDR) {
                w->v6[w->n6].family = AF_INET6;
                memcpy(&w->v6[w->n6++].a.v6, rr->rdata, 16);
            }
        }
    } else if (st == DNS_TEMPFAIL) {
        w->temp = 1;
        snprintf(w->why, sizeof(w->why), "%s", why);
    } else if (st == DNS_NXDOMAIN)
        w->nx = 1;
    dns_req_check(r);
}


/* dns_req_hosts - start the address lookups of every host of r->dest. */
static void
dns_req_hosts(struct dns_req *r)
{
    enum dns_family fam = r->d->o.family;
    size_t  i;

    r->work = xcalloc(r->dest->nhost ? r->dest->nhost : 1, sizeof(*r->work));
    for (i = 0; i < r->dest->nhost; i++) {
        r->work[i].secure = 1;
        r->work[i].ttl = UINT32_MAX;
    }
    for (i = 0; i < r->dest->nhost; i++) {
        if (fam != DNS_IPV6)
            dns_req_chase(r, r->dest->host[i].name, DNS_T_A, i,
                dns_addr_done);
        if (fam != DNS_IPV4)
            dns_req_chase(r, r->dest->host[i].name, DNS_T_AAAA, i,
                dns_addr_done);
    }
}


static uint32_t
dns_rand(void *arg)
{
    (void)arg;
    return arc4random();
}


/* dns_mx_hosts - MX records of c->name in e into dest; 0, or -1 for a
 * null MX. */
static int
dns_mx_hosts(struct dns_dest *dest, const struct dns_chase *c,
    const struct dns_entry *e)
{
    struct dns_mx mx[DNS_MAX_MX];
    size_t  i, j, n = 0, nnull = 0;

    for (i = 0; i < e->msg.nan; i++) {
        const struct dns_msg_rr *rr = &e->msg.an[i];

        if (rr->type != DNS_T_MX || strcmp(rr->owner, c->name) != 0)
            continue;
        if (rr->target[0] == '\0') {    /* "." */
            nnull++;
            continue;
        }
        for (j = 0; j < n; j++)         /* a host twice: keep the best */
            if (strcmp(mx[j].name, rr->target) == 0)
                break;
        if (j < n) {
            if (rr->pref < mx[j].pref)
                mx[j].pref = rr->pref;
            continue;
        }
        if (n == DNS_MAX_MX)
            continue;
        mx[n].pref = rr->pref;
        snprintf(mx[n].name, sizeof(mx[n].name), "%s", rr->target);
        n++;
    }
    /* RFC 7505 3: a null MX is the only MX of its domain.  One mixed in
     * with real ones is a mistake; the real ones are used. */
    if (nnull > 0 && n == 0)
        return -1;
    dns_mx_order(mx, n, dns_rand, NULL);
    dest->host = xcalloc(n ? n : 1, sizeof(*dest->host));
    for (i = 0; i < n; i++) {
        snprintf(dest->host[i].name, sizeof(dest->host[i].name), "%s",
            mx[i].name);
        dest->host[i].pref = mx[i].pref;
    }
    dest->nhost = n;
    return 0;
}


/* dns_mx_done - the MX chase of an MX request is complete. */
static void
dns_mx_done(struct dns_chase *c, enum dns_status st,
    const struct dns_entry *e, const char *why)
{
    struct dns_req  *r = c->req;
    struct dns_dest *dest = r->dest;

    snprintf(dest->name, sizeof(dest->name), "%s", c->name);
    dest->secure = c->secure;
    dest->ttl = c->ttl == UINT32_MAX ? 0 : c->ttl;
    switch (st) {
    case DNS_TEMPFAIL:
        dest->status = DNS_TEMPFAIL;
        dest->secure = 0;
        snprintf(dest->why, sizeof(dest->why), "MX lookup for %.160s: %.60s",
            dest->domain, why);
        break;
    case DNS_NXDOMAIN:
        dest->status = DNS_NXDOMAIN;
        snprintf(dest->why, sizeof(dest->why), "domain %.200s does not "
            "exist (NXDOMAIN)", dest->name);
        break;
    case DNS_NODATA:                /* RFC 5321 5.1: implicit MX */
        dest->implicit = 1;
        dest->host = xcalloc(1, sizeof(*dest->host));
        snprintf(dest->host[0].name, sizeof(dest->host[0].name), "%s",
            dest->name);
        dest->nhost = 1;
        dns_req_hosts(r);
        break;
    case DNS_OK:
    case DNS_NULLMX:
        if (dns_mx_hosts(dest, c, e) == -1) {
            dest->status = DNS_NULLMX;
            snprintf(dest->why, sizeof(dest->why), "domain %.200s accepts "
                "no mail (null MX)", dest->domain);
            break;
        }
        dns_req_hosts(r);
        break;
    }
    dns_req_check(r);
}


/* dns_query_done - the chase of a raw query is complete. */
static void
dns_query_done(struct dns_chase *c, enum dns_status st,
    const struct dns_entry *e, const char *why)
{
    struct dns_req   *r = c->req;
    struct dns_rrset *set = r->set;
    size_t  i;

    set->status = st;
    set->secure = st != DNS_TEMPFAIL && c->secure;
    set->ttl = c->ttl == UINT32_MAX ? 0 : c->ttl;
    if (st != DNS_OK)
        snprintf(set->why, sizeof(set->why), "%.200s: %.40s", set->name,
            why);
    if (st == DNS_OK) {
        set->rr = xcalloc(e->msg.nan, sizeof(*set->rr));
        for (i = 0; i < e->msg.nan; i++) {
            const struct dns_msg_rr *rr = &e->msg.an[i];

            if (rr->type != c->type || strcmp(rr->owner, c->name) != 0)
                continue;
            set->rr[set->n].type = rr->type;
            set->rr[set->n].ttl = rr->ttl;
            set->rr[set->n].len = rr->len;
            set->rr[set->n].rdata = xmalloc(rr->len ? rr->len : 1);
            memcpy(set->rr[set->n].rdata, rr->rdata, rr->len);
            set->n++;
        }
    }
    dns_req_check(r);
}


/* ---------------- public ---------------- */

/*
 * dns_norm - a name as we ask for it: lower case, no final dot, LDH plus
 * '_' (for _25._tcp), labels of 1-63, at most 253 bytes.  Anything else
 * (spaces, control bytes, UTF-8) is refused rather than sent.
 */
static int
dns_norm(const char *in, char *out)
{
    size_t  n, i, label = 0;

    if (in == NULL)
        return DNS_EINVAL;
    n = strlen(in);
    if (n > 0 && in[n - 1] == '.')
        n--;
    if (n == 0 || n > 253)
        return DNS_EINVAL;
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)in[i];

        if (ch == '.') {
            if (label == 0)
                return DNS_EINVAL;
            label = 0;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_')
            label++;
        else if (ch >= 'A' && ch <= 'Z') {
            ch = (unsigned char)(ch - 'A' + 'a');
            label++;
        } else
            return DNS_EINVAL;
        if (label > 63)
            return DNS_EINVAL;
        out[i] = (char)ch;
    }
    out[n] = '\0';
    return 0;
}


void
dns_options_default(struct dns_options *o)
{
    memset(o, 0, sizeof(*o));
    o->timeout_ms = 5000;
    o->attempts = 2;
    o->max_ttl = 86400;
    o->cache_max = 10000;
    o->family = DNS_BOTH;
    o->prefer = DNS_IPV4;
    o->address_limit = 5;
}


/* dns_servers - "a, b:53, [::1]:53" without blanks for c-ares. */
static int
dns_servers(struct dns *d, const char *list, char *why, size_t whysz)
{
    char   *csv = xmalloc(strlen(list) + 1);
    size_t  i, o = 0;
    int     rc;

    for (i = 0; list[i] != '\0'; i++)
        if (list[i] != ' ' && list[i] != '\t')
            csv[o++] = list[i];
    csv[o] = '\0';
    rc = ares_set_servers_ports_csv(d->ch, csv);
    free(csv);
    if (rc != ARES_SUCCESS) {
        snprintf(why, whysz, "dns.servers '%.200s': %s (expected IP "
            "addresses, IP:PORT or [IPv6]:PORT, comma-separated)", list,
            ares_strerror(rc));
        return DNS_ESERVERS;
    }
    return 0;
}


int
dns_new(struct dns **dp, struct ev_loop *loop, const struct dns_options *o,
    char *why, size_t whysz)
{
    struct ares_options ao;
    struct dns *d;
    size_t      tab = 64;
    int         rc;

    *dp = NULL;
    if (ares_library_init(ARES_LIB_INIT_ALL) != ARES_SUCCESS) {
        snprintf(why, whysz, "c-ares library init failed");
        return DNS_ESYS;
    }
    d = xcalloc(1, sizeof(*d));
    d->loop = loop;
    dns_options_default(&d->o);
    if (o != NULL) {
        d->o = *o;
        if (d->o.timeout_ms == 0)
            d->o.timeout_ms = 5000;
        if (d->o.attempts == 0)
            d->o.attempts = 2;
        if (d->o.max_ttl == 0)
            d->o.max_ttl = 86400;
        if (d->o.cache_max == 0)
            d->o.cache_max = 10000;
        if (d->o.address_limit == 0)
            d->o.address_limit = 5;
    }
    if (d->o.min_ttl > d->o.max_ttl) {
        snprintf(why, whysz, "dns.min_ttl (%u) is above dns.max_ttl (%u)",
            d->o.min_ttl, d->o.max_ttl);
        free(d);
        return DNS_EINVAL;
    }
    while (tab < d->o.cache_max && tab < ((size_t)1 << 20))
        tab <<= 1;
    d->tab = xcalloc(tab, sizeof(*d->tab));
    d->tabmask = tab - 1;
    ev_timer_init(&d->timer, dns_on_timer, d);
    memset(&ao, 0, sizeof(ao));
    ao.timeout = (int)d->o.timeout_ms;
    ao.tries = (int)d->o.attempts;
    ao.sock_state_cb = dns_sock_state;
    ao.sock_state_cb_data = d;
    rc = ares_init_options(&d->ch, &ao, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES |
        ARES_OPT_SOCK_STATE_CB);
    if (rc != ARES_SUCCESS) {
        snprintf(why, whysz, "c-ares init: %s", ares_strerror(rc));
        free(d->tab);
        free(d);
        return DNS_ESYS;
    }
    if (d->o.servers != NULL && d->o.servers[0] != '\0' &&
        (rc = dns_servers(d, d->o.servers, why, whysz)) != 0) {
        d->o.servers = NULL;
        dns_free(d);
        return rc;
    }
    d->o.servers = NULL;            /* the caller's string is not kept */
    *dp = d;
    return 0;
}


void
dns_free(struct dns *d)
{
    struct dns_entry *e, *en;
    size_t  i;

    if (d == NULL)
        return;
    d->closing = 1;
    ares_destroy(d->ch);            /* callbacks see closing and return */
    ev_timer_stop(d->loop, &d->timer);
    while (d->reqs != NULL) {
        ev_timer_stop(d->loop, &d->reqs->timer);
        dns_req_free(d->reqs);
    }
    for (i = 0; i <= d->tabmask; i++)
        for (e = d->tab[i]; e != NULL; e = en) {
            en = e->hnext;
            dns_entry_free(e);
        }
    free(d->tab);
    free(d);
    ares_library_cleanup();
}


const char *
dns_strerror(int rc)
{
    switch (rc) {
    case 0:             return "ok";
    case DNS_EINVAL:    return "invalid name or argument";
    case DNS_ESYS:      return "resolver initialisation failed";
    case DNS_ESERVERS:  return "bad dns.servers";
    default:            return "unknown error";
    }
}


const char *
dns_status_name(enum dns_status s)
{
    switch (s) {
    case DNS_OK:        return "ok";
    case DNS_NULLMX:    return "nullmx";
    case DNS_NXDOMAIN:  return "nxdomain";
    case DNS_NODATA:    return "nodata";
    case DNS_TEMPFAIL:  return "tempfail";
    }
    return "unknown";
}


int
dns_mx(struct dns *d, const char *domain, dns_dest_fn *fn, void *arg,
    struct dns_req **reqp)
{
    struct dns_req *r;
    char    name[DNS_NAME_MAX];

    if (d == NULL || fn == NULL || dns_norm(domain, name) != 0)
        return DNS_EINVAL;
    r = dns_req_new(d, DNS_REQ_MX, arg);
    r->dfn = fn;
    r->dest = xcalloc(1, sizeof(*r->dest));
    snprintf(r->dest->domain, sizeof(r->dest->domain), "%s", name);
    snprintf(r->dest->name, sizeof(r->dest->name), "%s", name);
    if (reqp != NULL)
        *reqp = r;
    dns_req_chase(r, name, DNS_T_MX, 0, dns_mx_done);
    dns_req_check(r);
    return 0;
}


int
dns_host(struct dns *d, const char *host, dns_dest_fn *fn, void *arg,
    struct dns_req **reqp)
{
    struct dns_req *r;
    struct dns_addr a;
    char    name[DNS_NAME_MAX];

    if (d == NULL || fn == NULL || host == NULL)
        return DNS_EINVAL;
    memset(&a, 0, sizeof(a));
    if (inet_pton(AF_INET, host, &a.a.v4) == 1)
        a.family = AF_INET;
    else if (inet_pton(AF_INET6, host, &a.a.v6) == 1)
        a.family = AF_INET6;
    else if (dns_norm(host, name) != 0)
        return DNS_EINVAL;
    r = dns_req_new(d, DNS_REQ_HOST, arg);
    r->dfn = fn;
    r->dest = xcalloc(1, sizeof(*r->dest));
    r->dest->host = xcalloc(1, sizeof(*r->dest->host));
    r->dest->nhost = 1;
    if (reqp != NULL)
        *reqp = r;
    if (a.family != 0) {            /* an address: nothing to look up */
        snprintf(r->dest->domain, sizeof(r->dest->domain), "%s", host);
        snprintf(r->dest->name, sizeof(r->dest->name), "%s", host);
        snprintf(r->dest->host[0].name, DNS_NAME_MAX, "%s", host);
        r->dest->host[0].addr = xcalloc(1, sizeof(a));
        r->dest->host[0].addr[0] = a;
        r->dest->host[0].naddr = 1;
        dns_req_check(r);
        return 0;
    }
    snprintf(r->dest->domain, sizeof(r->dest->domain), "%s", name);
    snprintf(r->dest->name, sizeof(r->dest->name), "%s", name);
    snprintf(r->dest->host[0].name, DNS_NAME_MAX, "%s", name);
    r->dest->implicit = 1;
    dns_req_hosts(r);
    dns_req_check(r);
    return 0;
}


int
dns_query(struct dns *d, const char *name, uint16_t type, dns_rrset_fn *fn,
    void *arg, struct dns_req **reqp)
{
    struct dns_req *r;
    char    n[DNS_NAME_MAX];

    if (d == NULL || fn == NULL || type == 0 || dns_norm(name, n) != 0)
        return DNS_EINVAL;
    r = dns_req_new(d, DNS_REQ_QUERY, arg);
    r->rfn = fn;
    r->set = xcalloc(1, sizeof(*r->set));
    snprintf(r->set->name, sizeof(r->set->name), "%s", n);
    if (reqp != NULL)
        *reqp = r;
    dns_req_chase(r, n, type, 0, dns_query_done);
    dns_req_check(r);
    return 0;
}


int
dns_tlsa(struct dns *d, const char *host, unsigned port, dns_rrset_fn *fn,
    void *arg, struct dns_req **reqp)
{
    char    name[DNS_NAME_MAX + 16];

    if (host == NULL || port == 0 || port > 65535)
        return DNS_EINVAL;
    snprintf(name, sizeof(name), "_%u._tcp.%s", port, host);
    return dns_query(d, name, DNS_T_TLSA, fn, arg, reqp);
}


void
dns_cancel(struct dns_req *r)
{
    if (r == NULL)
        return;
    if (r->finished) {              /* result waiting in its timer */
        ev_timer_stop(r->d->loop, &r->timer);
        dns_req_free(r);
        return;
    }
    r->cancelled = 1;               /* freed when its lookups come back */
}


void
dns_dest_free(struct dns_dest *dest)
{
    size_t i;

    if (dest == NULL)
        return;
    if (dest->host != NULL)
        for (i = 0; i < dest->nhost; i++)
            free(dest->host[i].addr);
    free(dest->host);
    free(dest);
}


void
dns_rrset_free(struct dns_rrset *set)
{
    size_t i;

    if (set == NULL)
        return;
    for (i = 0; i < set->n; i++)
        free(set->rr[i].rdata);
    free(set->rr);
    free(set);
}


void
dns_addr_str(const struct dns_addr *a, char *out, size_t outsz)
{
    if (inet_ntop(a->family, a->family == AF_INET ? (const void *)&a->a.v4 :
        (const void *)&a->a.v6, out, (socklen_t)outsz) == NULL && outsz > 0)
        out[0] = '\0';
}


void
dns_set_clock(struct dns *d, uint64_t (*now_ms)(void *), void *arg)
{
    d->now_fn = now_ms;
    d->now_arg = arg;
}


void
dns_stats(const struct dns *d, struct dns_stats *st)
{
    *st = d->st;
    st->cached = d->count;
}
