/*
 * request.c - dns/'s requests: MX (chase MX, then A/AAAA for each host,
 * assemble the destination), host and raw queries; the result is handed
 * to the caller from a zero-delay ev timer.  See the CONTRACT in dns.c.
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

/* ---------------- requests ---------------- */

void
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


struct dns_req *
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


void
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
        snprintf(h->target, sizeof(h->target), "%s",
            w->target[0] != '\0' ? w->target : h->name);
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


void
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
        snprintf(w->target, sizeof(w->target), "%s", c->name);
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
void
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
void
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
void
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
