/*
 * sts.c - MTA-STS policies for delivery (RFC 8461): the `_mta-sts` TXT
 * lookup, the per-domain cache and its waiters; the HTTPS fetch is
 * sts_fetch.c (libcurl on this worker's ev loop), the pure decisions
 * sts_policy.c.  See tlspol.h (MTA-STS) for the rules.
 *
 * PURPOSE   resolve.c asks for the policy of a recipient domain in parallel
 *           with its MX lookup; the answer filters the MX hosts and sets
 *           what the TLS connection must verify.  Nothing here blocks: the
 *           DNS goes through dns/ (c-ares in the loop), the HTTPS through
 *           curl_multi_socket_action() called from our epoll callbacks and
 *           one ev timer, so the worker's other sessions never wait.
 * FAILURE   See sts.h: every failure ends in "the cached policy while
 *           unexpired, else none"; each failed fetch is logged once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "tlspol/tlspol_int.h"

static void tls_sts_post_fire(struct ev_loop *loop, struct ev_timer *t,
    void *arg);

/* ---- the cache ---- */

static unsigned
tls_sts_hash(const char *d)
{
    uint32_t h = 2166136261u;

    for (; *d; d++)
        h = (h ^ (uint8_t)*d) * 16777619u;
    return h % TLS_STS_BUCKETS;
}


static void
tls_sts_lru_unlink(struct tls_sts *s, struct tls_sts_entry *e)
{
    if (e->older)
        e->older->newer = e->newer;
    else
        s->oldest = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else
        s->newest = e->older;
    e->older = e->newer = NULL;
}


static void
tls_sts_lru_front(struct tls_sts *s, struct tls_sts_entry *e)
{
    e->older = s->newest;
    e->newer = NULL;
    if (s->newest)
        s->newest->newer = e;
    s->newest = e;
    if (s->oldest == NULL)
        s->oldest = e;
}


static void
tls_sts_entry_free(struct tls_sts *s, struct tls_sts_entry *e)
{
    struct tls_sts_entry **pp = &s->bucket[tls_sts_hash(e->domain)];

    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    tls_sts_lru_unlink(s, e);
    ev_timer_stop(s->loop, &e->post);
    free(e->mx);
    free(e);
    s->nentries--;
}


/* tls_sts_evict - the least recently used idle entry, when the cache is
 * full; an entry with a lookup or waiters in flight is never dropped. */
static void
tls_sts_evict(struct tls_sts *s)
{
    struct tls_sts_entry *e;

    if (s->nentries < TLS_STS_CACHE_MAX)
        return;
    for (e = s->oldest; e != NULL; e = e->newer)
        if (e->state == E_IDLE && e->wait == NULL) {
            tls_sts_entry_free(s, e);
            return;
        }
}


static struct tls_sts_entry *
tls_sts_entry_get(struct tls_sts *s, const char *domain)
{
    unsigned           h = tls_sts_hash(domain);
    struct tls_sts_entry *e;

    for (e = s->bucket[h]; e != NULL; e = e->hnext)
        if (strcmp(e->domain, domain) == 0) {
            tls_sts_lru_unlink(s, e);
            tls_sts_lru_front(s, e);
            return e;
        }
    tls_sts_evict(s);
    e = xcalloc(1, sizeof(*e));
    e->s = s;
    ev_timer_init(&e->post, tls_sts_post_fire, e);
    util_strlcpy(e->domain, domain, sizeof(e->domain));
    e->hnext = s->bucket[h];
    s->bucket[h] = e;
    tls_sts_lru_front(s, e);
    s->nentries++;
    return e;
}


/* tls_sts_store - a freshly fetched policy into the entry (packed). */
void
tls_sts_store(struct tls_sts_entry *e, const struct sts_policy *p, uint64_t now)
{
    size_t i, n = 0, o = 0;

    for (i = 0; i < p->nmx; i++)
        n += strlen(p->mx[i]) + 1;
    free(e->mx);
    e->mx = xmalloc(n ? n : 1);
    for (i = 0; i < p->nmx; i++) {
        size_t l = strlen(p->mx[i]) + 1;

        memcpy(e->mx + o, p->mx[i], l);
        o += l;
    }
    e->have = 1;
    e->mode = p->mode;
    e->max_age = p->max_age;
    e->nmx = p->nmx;
    util_strlcpy(e->id, e->txt_id, sizeof(e->id));
    e->expires_ms = now + (uint64_t)p->max_age * 1000;
}


/* tls_sts_unpack - the entry's policy as a struct sts_policy (scratch). */
static const struct sts_policy *
tls_sts_unpack(struct tls_sts_entry *e)
{
    struct sts_policy *p = &e->s->scratch;
    const char        *m = e->mx;
    size_t             i;

    p->mode = e->mode;
    p->max_age = e->max_age;
    p->nmx = e->nmx;
    for (i = 0; i < e->nmx; i++) {
        util_strlcpy(p->mx[i], m, sizeof(p->mx[i]));
        m += strlen(m) + 1;
    }
    return p;
}


/* tls_sts_complete - every waiter gets the outcome in e->use / e->why.  A
 * callback may start another tls_sts_get() (it waits for the next lookup)
 * or cancel a waiter still on the list. */
void
tls_sts_complete(struct tls_sts_entry *e)
{
    struct tls_sts_req *r;

    e->state = E_IDLE;
    while ((r = e->wait) != NULL) {
        const struct sts_policy *p = e->use && e->have ? tls_sts_unpack(e) :
            NULL;

        e->wait = r->next;
        if (e->wait)
            e->wait->prev = NULL;
        r->fn(p, e->why, r->arg);
        free(r);
    }
}


static void
tls_sts_post_fire(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop;
    (void)t;
    tls_sts_complete(arg);
}


/* tls_sts_fallback - no live policy (why): the cached one while unexpired. */
void
tls_sts_fallback(struct tls_sts_entry *e, const char *why)
{
    uint64_t now = ev_now(e->s->loop);

    if (e->have && now < e->expires_ms) {
        e->use = 1;
        snprintf(e->why, sizeof(e->why), "%.200s; cached policy id=%s "
            "(%llu s left)", why, e->id,
            (unsigned long long)((e->expires_ms - now) / 1000));
    } else {
        e->use = 0;
        snprintf(e->why, sizeof(e->why), "%.250s; no policy", why);
    }
}


/* tls_sts_failed - a fetch of txt_id failed: not again for that id before
 * TLS_STS_RETRY_MS (every message would wait for it: RFC 8461 3.3 lets
 * senders limit refetches), the cached policy or none meanwhile. */
void
tls_sts_failed(struct tls_sts_entry *e, const char *why)
{
    util_strlcpy(e->fail_id, e->txt_id, sizeof(e->fail_id));
    e->retry_ms = ev_now(e->s->loop) + TLS_STS_RETRY_MS;
    tls_sts_fallback(e, why);
    log_warn("mta-sts: %s: %s", e->domain, e->why);
}


static void
tls_sts_addr_done(struct dns_dest *dest, void *arg)
{
    struct tls_sts_entry *e = arg;
    char               why[400];

    e->dreq = NULL;
    if (dest->status != DNS_OK || dest->nhost == 0 ||
        dest->host[0].naddr == 0) {
        snprintf(why, sizeof(why), "mta-sts.%.200s: %s %.150s", e->domain,
            dns_status_name(dest->status), dest->why);
        tls_sts_failed(e, why);
        dns_dest_free(dest);
        tls_sts_complete(e);
        return;
    }
    if (tls_sts_fetch_start(e, &dest->host[0]) < 0) {
        tls_sts_fallback(e, "fetch could not start");
        dns_dest_free(dest);
        tls_sts_complete(e);
        return;
    }
    dns_dest_free(dest);
    /* libcurl asks for its timer and sockets through the callbacks;
     * nothing runs inside curl_multi_add_handle() beyond that */
}


/* ---- the TXT lookup ---- */

static void
tls_sts_txt_done(struct dns_rrset *set, void *arg)
{
    struct tls_sts_entry *e = arg;
    char               buf[TLS_STS_TXT_MAX][1024], why[300] = "", name[300];
    const char        *txt[TLS_STS_TXT_MAX];
    size_t             len[TLS_STS_TXT_MAX], n = 0, i;
    enum tls_sts_txt      t;
    enum tls_sts_action   a;

    e->dreq = NULL;
    if (set->status == DNS_TEMPFAIL) {
        t = TLS_STS_TXT_TEMPFAIL;
        snprintf(why, sizeof(why), "TXT lookup failed: %.200s", set->why);
    } else if (set->status != DNS_OK) {
        t = TLS_STS_TXT_NONE;
        snprintf(why, sizeof(why), "no TXT record (%s)",
            dns_status_name(set->status));
    } else {
        for (i = 0; i < set->n && n < TLS_STS_TXT_MAX; i++) {
            if (set->rr[i].type != DNS_T_TXT ||
                dns_txt_join(&set->rr[i], buf[n], sizeof(buf[n])) != 0)
                continue;
            txt[n] = buf[n];
            len[n] = strlen(buf[n]);
            n++;
        }
        t = tls_sts_txt_pick(txt, len, n, e->txt_id, why, sizeof(why));
    }
    dns_rrset_free(set);
    a = tls_sts_decide(e->have, e->id, e->expires_ms, ev_now(e->s->loop), t,
        e->txt_id);
    if (a == TLS_STS_FETCH && strcmp(e->fail_id, e->txt_id) == 0 &&
        ev_now(e->s->loop) < e->retry_ms) {
        snprintf(why, sizeof(why), "the fetch of id=%s failed less than "
            "%d minutes ago", e->txt_id, TLS_STS_RETRY_MS / 60000);
        tls_sts_fallback(e, why);
    } else if (a == TLS_STS_FETCH) {
        snprintf(name, sizeof(name), "mta-sts.%s", e->domain);
        e->state = E_ADDR;
        if (dns_host(e->s->dns, name, tls_sts_addr_done, e, &e->dreq) == 0)
            return;
        e->dreq = NULL;
        snprintf(why, sizeof(why), "%.200s cannot be looked up", name);
        tls_sts_fallback(e, why);
    } else if (a == TLS_STS_USE_CACHED && t == TLS_STS_TXT_ID) {
        e->use = 1;
        snprintf(e->why, sizeof(e->why), "cached policy id=%s", e->id);
    } else {
        tls_sts_fallback(e, why);
    }
    tls_sts_complete(e);
}


/* tls_sts_start - look the TXT record up (from the loop, always). */
static void
tls_sts_start(struct tls_sts_entry *e)
{
    char name[DNS_NAME_MAX + 16];

    snprintf(name, sizeof(name), "_mta-sts.%s", e->domain);
    e->state = E_TXT;
    if (dns_query(e->s->dns, name, DNS_T_TXT, tls_sts_txt_done, e,
        &e->dreq) == 0)
        return;
    e->dreq = NULL;
    tls_sts_fallback(e, "the TXT lookup could not start");
    e->state = E_POST;
    ev_timer_start(e->s->loop, &e->post, 0);
}


int
tls_sts_get(struct tls_sts *s, const char *domain, tls_sts_fn *fn, void *arg,
    struct tls_sts_req **reqp)
{
    char               d[DNS_NAME_MAX];
    size_t             n = strlen(domain), i;
    struct tls_sts_entry *e;
    struct tls_sts_req   *r;

    if (n > 0 && domain[n - 1] == '.')
        n--;
    if (n == 0 || n + 16 >= sizeof(d) || domain[0] == '[')
        return -1;
    for (i = 0; i < n; i++) {
        char c = domain[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '-' || c == '.'))
            return -1;
        d[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    d[n] = '\0';
    e = tls_sts_entry_get(s, d);
    r = xcalloc(1, sizeof(*r));
    r->e = e;
    r->fn = fn;
    r->arg = arg;
    r->next = e->wait;
    if (e->wait)
        e->wait->prev = r;
    e->wait = r;
    if (reqp != NULL)
        *reqp = r;
    if (e->state == E_IDLE)
        tls_sts_start(e);
    return 0;
}


void
tls_sts_cancel(struct tls_sts_req *r)
{
    struct tls_sts_entry *e;

    if (r == NULL)
        return;
    e = r->e;
    if (r->prev)
        r->prev->next = r->next;
    else
        e->wait = r->next;
    if (r->next)
        r->next->prev = r->prev;
    free(r);
    /* the lookup or fetch goes on: its result fills the cache */
}


/* ---- setup ---- */

struct tls_sts *
tls_sts_new(struct ev_loop *loop, struct dns *dns,
    const struct tls_sts_options *o, char *why, size_t whysz)
{
    struct tls_sts *s;

    if (dns == NULL) {
        snprintf(why, whysz, "no resolver");
        return NULL;
    }
    s = xcalloc(1, sizeof(*s));
    s->loop = loop;
    s->dns = dns;
    s->port = o->port ? o->port : 443;
    s->timeout_ms = o->fetch_timeout_ms ? o->fetch_timeout_ms : 10000;
    if (tls_sts_curl_init(s, o->ca_file, why, whysz) < 0) {
        free(s);
        return NULL;
    }
    return s;
}


void
tls_sts_free(struct tls_sts *s)
{
    if (s == NULL)
        return;
    while (s->oldest != NULL) {
        struct tls_sts_entry *e = s->oldest;

        while (e->wait != NULL)
            tls_sts_cancel(e->wait);
        if (e->dreq != NULL)
            dns_cancel(e->dreq);
        tls_sts_fetch_free(e->f);
        tls_sts_entry_free(s, e);
    }
    tls_sts_curl_free(s);
    free(s);
}
