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
 *           This file holds layer 1 and the public calls; cache.c layer
 *           2 and the chase, request.c layer 3.
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
#include "dns/dns_int.h"

/* ---------------- channel ---------------- */

void
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


uint64_t
dns_now(const struct dns *d)
{
    return d->now_fn != NULL ? d->now_fn(d->now_arg) : util_now_ms();
}


/* dns_left - whole seconds until e expires (0 when past). */
uint32_t
dns_left(const struct dns *d, const struct dns_entry *e)
{
    uint64_t now = dns_now(d);

    return e->expires > now ? (uint32_t)((e->expires - now + 999) / 1000) : 0;
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
