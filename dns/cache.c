/*
 * cache.c - dns/'s rrset cache (one entry per name and type: hash, LRU,
 * eviction, TTL clamp; pending while its query is in flight, later askers
 * join it) and the chase that fetches one (name, type) following CNAMEs.
 * See the CONTRACT in dns.c.
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
#include "dns/dns_int.h"

static void dns_chase_step(struct dns_chase *c, const struct dns_entry *e);
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


void
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


void
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
