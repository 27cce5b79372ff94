/*
 * sts.c - MTA-STS policies for delivery (RFC 8461): the `_mta-sts` TXT
 * lookup, the HTTPS fetch with libcurl's multi-socket API on this
 * worker's ev loop, the per-domain cache.  See sts.h for the rules.
 *
 * PURPOSE   resolve.c asks for the policy of a recipient domain in parallel
 *           with its MX lookup; the answer filters the MX hosts and sets
 *           what the TLS connection must verify.  Nothing here blocks: the
 *           DNS goes through dns/ (c-ares in the loop), the HTTPS through
 *           curl_multi_socket_action() called from our epoll callbacks and
 *           one ev timer, so the worker's other sessions never wait.
 * SANDBOX   stsd_new() runs in worker_init(), before Landlock and seccomp:
 *           it reads the CA bundle into memory (CURLOPT_CAINFO_BLOB; no
 *           CA file or directory is opened later) and makes the multi
 *           handle (its wake-up socketpair).  A fetch then needs only what
 *           the worker's filter allows already (socket, connect, poll,
 *           getsockopt, setsockopt, send/recv); libcurl's resolver is never
 *           used (CURLOPT_RESOLVE fills its DNS cache), so it starts no
 *           thread and reads no resolv.conf.
 * FAILURE   See sts.h: every failure ends in "the cached policy while
 *           unexpired, else none"; each failed fetch is logged once.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "dns/dns.h"
#include "delivery/mta.h"
#include "delivery/sts.h"
#include "delivery/tls_policy.h"

#define STSD_BUCKETS   1024
#define STSD_CA_MAX    (8 * 1024 * 1024)  /* a CA bundle larger is a mistake */
#define STSD_TXT_MAX   8                  /* TXT records looked at */
#define STSD_SYSTEM_CA "/etc/ssl/certs/ca-certificates.crt"
#define STSD_RETRY_MS  (5 * 60 * 1000)    /* after a failed fetch, per id */

enum { E_IDLE = 0, E_TXT, E_ADDR, E_FETCH, E_POST };

struct stsd_entry;

struct stsd_req {
    struct stsd_entry *e;
    struct stsd_req   *next, *prev;
    stsd_fn           *fn;
    void              *arg;
};

struct stsd_fetch {
    struct stsd_entry *e;
    CURL              *easy;
    struct curl_slist *resolve;
    char              *body;
    size_t             len;
    int                too_big;
    char               err[CURL_ERROR_SIZE];
};

struct stsd_entry {
    struct stsd       *s;
    struct stsd_entry *hnext;               /* hash chain */
    struct stsd_entry *older, *newer;       /* LRU list */
    char               domain[DNS_NAME_MAX];
    /* the cached policy */
    int                have;
    enum sts_mode      mode;
    uint32_t           max_age;
    size_t             nmx;
    char              *mx;                  /* nmx NUL-ended patterns */
    char               id[STS_ID_MAX];
    uint64_t           expires_ms;          /* ev_now() scale */
    /* the refresh in flight */
    int                state;
    struct dns_req    *dreq;
    struct stsd_fetch *f;
    char               txt_id[STS_ID_MAX];
    char               fail_id[STS_ID_MAX]; /* the id whose fetch failed */
    uint64_t           retry_ms;            /* not fetched again before */
    struct stsd_req   *wait;                /* waiting callers */
    int                use;                 /* the outcome: cached or not */
    char               why[320];
    struct ev_timer    post;                /* E_POST: complete from loop */
};

struct stsd {
    struct ev_loop     *loop;
    struct dns         *dns;
    CURLM              *multi;
    struct ev_timer     ctimer;             /* libcurl's timeout */
    char               *ca;
    size_t              calen;
    unsigned            port;
    uint64_t            timeout_ms;
    struct stsd_entry  *bucket[STSD_BUCKETS];
    struct stsd_entry  *newest, *oldest;
    size_t              nentries;
    struct sts_policy   scratch;            /* the policy handed out */
};

static void stsd_check(struct stsd *s);
static void stsd_post_fire(struct ev_loop *loop, struct ev_timer *t,
    void *arg);


/* ---- pure parts ---- */

enum stsd_action
stsd_decide(int have, const char *cached_id, uint64_t expires_ms,
    uint64_t now_ms, enum stsd_txt txt, const char *txt_id)
{
    int fresh = have && now_ms < expires_ms;

    if (txt == STSD_TXT_ID) {
        if (fresh && strcmp(cached_id, txt_id) == 0)
            return STSD_USE_CACHED;
        return STSD_FETCH;          /* new id, expired, or never fetched */
    }
    /* RFC 8461 5.1: no live policy but an unexpired cached one: use it */
    return fresh ? STSD_USE_CACHED : STSD_NO_POLICY;
}


enum stsd_txt
stsd_txt_pick(const char *const *txt, const size_t *len, size_t n, char *id,
    char *why, size_t whysz)
{
    char   one[STS_ID_MAX], w[256] = "";
    size_t i, valid = 0, sts = 0;

    for (i = 0; i < n; i++) {
        int rc = sts_txt_parse(txt[i], len[i], one, w, sizeof(w));

        if (rc == STS_ENOTSTS)
            continue;
        sts++;
        if (rc == 0 && valid++ == 0)
            memcpy(id, one, sizeof(one));
        else if (rc != 0)
            snprintf(why, whysz, "invalid TXT record: %s", w);
    }
    if (sts == 1 && valid == 1)
        return STSD_TXT_ID;
    if (sts == 0)
        snprintf(why, whysz, "no v=STSv1 TXT record");
    else if (sts > 1)
        snprintf(why, whysz, "%zu v=STSv1 TXT records (RFC 8461 3.1: "
            "exactly one)", sts);
    return STSD_TXT_NONE;
}


int
stsd_content_type_ok(const char *ct)
{
    if (ct == NULL || strncasecmp(ct, "text/plain", 10) != 0)
        return 0;
    return ct[10] == '\0' || ct[10] == ';' || ct[10] == ' ' ||
        ct[10] == '\t';
}


int
stsd_hops(const struct sts_policy *p, const char *domain,
    struct mta_hop *hop, size_t *n, char *reply, size_t replysz)
{
    size_t i, kept = 0, miss = 0;
    char   first[256] = "";

    if (p == NULL || p->mode == STS_MODE_NONE)
        return 0;
    for (i = 0; i < *n; i++) {
        struct tls_req *r = &hop[i].tls;
        int             ok = sts_mx_match(p, hop[i].name);

        if (r->tlsa != NULL)        /* DANE wins (RFC 8461 2) */
            ok = 1;
        else if (p->mode == STS_MODE_ENFORCE)
            r->sts_enforce = 1;     /* STARTTLS, CA-verified MX name */
        else
            r->sts_testing = 1;     /* check and report, deliver anyway */
        if (!ok && miss++ == 0)
            util_strlcpy(first, hop[i].name, sizeof(first));
        if (p->mode == STS_MODE_TESTING || ok) {
            if (kept != i)
                hop[kept] = hop[i];
            kept++;
        }
    }
    if (miss > 0)
        log_info("mta-sts: %s: MX host %s%s does not match the policy "
            "(mode %s)%s", domain, first, miss > 1 ? " and others" : "",
            sts_mode_name(p->mode), p->mode == STS_MODE_ENFORCE ?
            ": not used" : ": delivering anyway");
    *n = kept;
    if (kept == 0) {
        snprintf(reply, replysz, "451 4.7.5 MTA-STS policy of %.200s "
            "(enforce): no MX host matches (%.200s)", domain, first);
        return -1;
    }
    return 0;
}


/* ---- the cache ---- */

static unsigned
stsd_hash(const char *d)
{
    uint32_t h = 2166136261u;

    for (; *d; d++)
        h = (h ^ (uint8_t)*d) * 16777619u;
    return h % STSD_BUCKETS;
}


static void
stsd_lru_unlink(struct stsd *s, struct stsd_entry *e)
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
stsd_lru_front(struct stsd *s, struct stsd_entry *e)
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
stsd_entry_free(struct stsd *s, struct stsd_entry *e)
{
    struct stsd_entry **pp = &s->bucket[stsd_hash(e->domain)];

    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    stsd_lru_unlink(s, e);
    ev_timer_stop(s->loop, &e->post);
    free(e->mx);
    free(e);
    s->nentries--;
}


/* stsd_evict - the least recently used idle entry, when the cache is
 * full; an entry with a lookup or waiters in flight is never dropped. */
static void
stsd_evict(struct stsd *s)
{
    struct stsd_entry *e;

    if (s->nentries < STSD_CACHE_MAX)
        return;
    for (e = s->oldest; e != NULL; e = e->newer)
        if (e->state == E_IDLE && e->wait == NULL) {
            stsd_entry_free(s, e);
            return;
        }
}


static struct stsd_entry *
stsd_entry_get(struct stsd *s, const char *domain)
{
    unsigned           h = stsd_hash(domain);
    struct stsd_entry *e;

    for (e = s->bucket[h]; e != NULL; e = e->hnext)
        if (strcmp(e->domain, domain) == 0) {
            stsd_lru_unlink(s, e);
            stsd_lru_front(s, e);
            return e;
        }
    stsd_evict(s);
    e = xcalloc(1, sizeof(*e));
    e->s = s;
    ev_timer_init(&e->post, stsd_post_fire, e);
    util_strlcpy(e->domain, domain, sizeof(e->domain));
    e->hnext = s->bucket[h];
    s->bucket[h] = e;
    stsd_lru_front(s, e);
    s->nentries++;
    return e;
}


/* stsd_store - a freshly fetched policy into the entry (packed). */
static void
stsd_store(struct stsd_entry *e, const struct sts_policy *p, uint64_t now)
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


/* stsd_unpack - the entry's policy as a struct sts_policy (scratch). */
static const struct sts_policy *
stsd_unpack(struct stsd_entry *e)
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


/* stsd_complete - every waiter gets the outcome in e->use / e->why.  A
 * callback may start another stsd_get() (it waits for the next lookup)
 * or cancel a waiter still on the list. */
static void
stsd_complete(struct stsd_entry *e)
{
    struct stsd_req *r;

    e->state = E_IDLE;
    while ((r = e->wait) != NULL) {
        const struct sts_policy *p = e->use && e->have ? stsd_unpack(e) :
            NULL;

        e->wait = r->next;
        if (e->wait)
            e->wait->prev = NULL;
        r->fn(p, e->why, r->arg);
        free(r);
    }
}


static void
stsd_post_fire(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop;
    (void)t;
    stsd_complete(arg);
}


/* stsd_fallback - no live policy (why): the cached one while unexpired. */
static void
stsd_fallback(struct stsd_entry *e, const char *why)
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


/* stsd_failed - a fetch of txt_id failed: not again for that id before
 * STSD_RETRY_MS (every message would wait for it: RFC 8461 3.3 lets
 * senders limit refetches), the cached policy or none meanwhile. */
static void
stsd_failed(struct stsd_entry *e, const char *why)
{
    util_strlcpy(e->fail_id, e->txt_id, sizeof(e->fail_id));
    e->retry_ms = ev_now(e->s->loop) + STSD_RETRY_MS;
    stsd_fallback(e, why);
    log_warn("mta-sts: %s: %s", e->domain, e->why);
}


/* ---- the HTTPS fetch ---- */

static size_t
stsd_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct stsd_fetch *f = arg;
    size_t             n = size * nmemb;

    if (f->len + n > STS_POLICY_MAX) {
        f->too_big = 1;
        return 0;                   /* libcurl stops: CURLE_WRITE_ERROR */
    }
    f->body = xrealloc(f->body, f->len + n + 1);
    memcpy(f->body + f->len, ptr, n);
    f->len += n;
    return n;
}


static void
stsd_fetch_free(struct stsd_fetch *f)
{
    if (f == NULL)
        return;
    if (f->easy != NULL) {
        curl_multi_remove_handle(f->e->s->multi, f->easy);
        curl_easy_cleanup(f->easy);
    }
    curl_slist_free_all(f->resolve);
    free(f->body);
    free(f);
}


/* stsd_fetched - the transfer ended with rc: check and parse, then
 * complete the entry's waiters. */
static void
stsd_fetched(struct stsd_fetch *f, CURLcode rc)
{
    struct stsd_entry *e = f->e;
    struct sts_policy *p = &e->s->scratch;
    char               why[300], esc[UTIL_ESC_ROOM(200)];
    long               code = 0;
    char              *ct = NULL;

    e->f = NULL;
    (void)curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &code);
    (void)curl_easy_getinfo(f->easy, CURLINFO_CONTENT_TYPE, &ct);
    if (rc != CURLE_OK) {
        const char *m = f->too_big ? "policy larger than 64 KiB" :
            f->err[0] ? f->err : curl_easy_strerror(rc);

        util_escape(esc, sizeof(esc), m, strnlen(m, 200), 0, NULL);
        snprintf(why, sizeof(why), "fetch failed: %.250s", esc);
    } else if (code != 200) {
        snprintf(why, sizeof(why), "fetch failed: HTTP status %ld", code);
    } else if (!stsd_content_type_ok(ct)) {
        util_escape(esc, sizeof(esc), ct ? ct : "none",
            strnlen(ct ? ct : "none", 100), 0, NULL);
        snprintf(why, sizeof(why), "fetch failed: Content-Type %.200s, not "
            "text/plain", esc);
    } else if (sts_policy_parse(f->body ? f->body : "", f->len, p, esc,
        sizeof(esc)) != 0) {
        snprintf(why, sizeof(why), "invalid policy: %.250s", esc);
    } else {
        stsd_store(e, p, ev_now(e->s->loop));
        e->use = 1;
        snprintf(e->why, sizeof(e->why), "fetched policy id=%s mode=%s "
            "max_age=%u", e->id, sts_mode_name(e->mode), e->max_age);
        log_info("mta-sts: %s: %s", e->domain, e->why);
        stsd_fetch_free(f);
        stsd_complete(e);
        return;
    }
    stsd_fetch_free(f);
    stsd_failed(e, why);
    stsd_complete(e);
}


/* stsd_resolve_list - "mta-sts.<domain>:port:addr,addr" for
 * CURLOPT_RESOLVE (IPv6 in brackets). */
static void
stsd_resolve_list(const struct stsd_entry *e, const struct dns_host *h,
    char *out, size_t outsz)
{
    size_t o, i;

    o = (size_t)snprintf(out, outsz, "mta-sts.%s:%u:", e->domain,
        e->s->port);
    for (i = 0; i < h->naddr && o + 50 < outsz; i++) {
        char a[64];

        dns_addr_str(&h->addr[i], a, sizeof(a));
        o += (size_t)snprintf(out + o, outsz - o, h->addr[i].family ==
            AF_INET6 ? "%s[%s]" : "%s%s", i ? "," : "", a);
    }
}


static int
stsd_fetch_start(struct stsd_entry *e, const struct dns_host *h)
{
    struct stsd       *s = e->s;
    struct stsd_fetch *f = xcalloc(1, sizeof(*f));
    struct curl_blob   ca = { s->ca, s->calen, CURL_BLOB_NOCOPY };
    char               url[DNS_NAME_MAX + 80], res[DNS_NAME_MAX + 600];
    CURL              *c;
    CURLcode           rc = CURLE_OK;

    f->e = e;
    if (s->port == 443)
        snprintf(url, sizeof(url), "https://mta-sts.%s/.well-known/"
            "mta-sts.txt", e->domain);
    else
        snprintf(url, sizeof(url), "https://mta-sts.%s:%u/.well-known/"
            "mta-sts.txt", e->domain, s->port);
    stsd_resolve_list(e, h, res, sizeof(res));
    if ((f->resolve = curl_slist_append(NULL, res)) == NULL ||
        (f->easy = c = curl_easy_init()) == NULL) {
        stsd_fetch_free(f);
        return -1;
    }
#define SET(o, v) do { if (rc == CURLE_OK) rc = curl_easy_setopt(c, o, v); } \
    while (0)
    SET(CURLOPT_URL, url);
    SET(CURLOPT_PRIVATE, f);
    SET(CURLOPT_ERRORBUFFER, f->err);
    SET(CURLOPT_RESOLVE, f->resolve);
    SET(CURLOPT_PROTOCOLS_STR, "https");
    SET(CURLOPT_REDIR_PROTOCOLS_STR, "https");
    SET(CURLOPT_FOLLOWLOCATION, 0L);        /* RFC 8461 3.3 */
    SET(CURLOPT_PROXY, "");                 /* never *_proxy from the env */
    SET(CURLOPT_NOSIGNAL, 1L);              /* no sigaction: seccomp */
    SET(CURLOPT_FORBID_REUSE, 1L);          /* no idle socket left open */
    SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    SET(CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
    SET(CURLOPT_SSL_VERIFYPEER, 1L);
    SET(CURLOPT_SSL_VERIFYHOST, 2L);
    SET(CURLOPT_CAINFO, NULL);              /* only the bundle below */
    SET(CURLOPT_CAPATH, NULL);
    SET(CURLOPT_CAINFO_BLOB, &ca);
    SET(CURLOPT_TIMEOUT_MS, (long)s->timeout_ms);
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)s->timeout_ms);
    SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)STS_POLICY_MAX);
    SET(CURLOPT_WRITEFUNCTION, stsd_body);
    SET(CURLOPT_WRITEDATA, f);
    SET(CURLOPT_USERAGENT, "mtad (MTA-STS)");
#undef SET
    if (rc != CURLE_OK ||
        curl_multi_add_handle(s->multi, c) != CURLM_OK) {
        log_warn("mta-sts: %s: cannot set up the fetch: %s", e->domain,
            curl_easy_strerror(rc));
        stsd_fetch_free(f);
        return -1;
    }
    e->f = f;
    e->state = E_FETCH;
    return 0;
}


static void
stsd_addr_done(struct dns_dest *dest, void *arg)
{
    struct stsd_entry *e = arg;
    char               why[400];

    e->dreq = NULL;
    if (dest->status != DNS_OK || dest->nhost == 0 ||
        dest->host[0].naddr == 0) {
        snprintf(why, sizeof(why), "mta-sts.%.200s: %s %.150s", e->domain,
            dns_status_name(dest->status), dest->why);
        stsd_failed(e, why);
        dns_dest_free(dest);
        stsd_complete(e);
        return;
    }
    if (stsd_fetch_start(e, &dest->host[0]) < 0) {
        stsd_fallback(e, "fetch could not start");
        dns_dest_free(dest);
        stsd_complete(e);
        return;
    }
    dns_dest_free(dest);
    /* libcurl asks for its timer and sockets through the callbacks;
     * nothing runs inside curl_multi_add_handle() beyond that */
}


/* ---- the TXT lookup ---- */

static void
stsd_txt_done(struct dns_rrset *set, void *arg)
{
    struct stsd_entry *e = arg;
    char               buf[STSD_TXT_MAX][1024], why[300] = "", name[300];
    const char        *txt[STSD_TXT_MAX];
    size_t             len[STSD_TXT_MAX], n = 0, i;
    enum stsd_txt      t;
    enum stsd_action   a;

    e->dreq = NULL;
    if (set->status == DNS_TEMPFAIL) {
        t = STSD_TXT_TEMPFAIL;
        snprintf(why, sizeof(why), "TXT lookup failed: %.200s", set->why);
    } else if (set->status != DNS_OK) {
        t = STSD_TXT_NONE;
        snprintf(why, sizeof(why), "no TXT record (%s)",
            dns_status_name(set->status));
    } else {
        for (i = 0; i < set->n && n < STSD_TXT_MAX; i++) {
            if (set->rr[i].type != DNS_T_TXT ||
                dns_txt_join(&set->rr[i], buf[n], sizeof(buf[n])) != 0)
                continue;
            txt[n] = buf[n];
            len[n] = strlen(buf[n]);
            n++;
        }
        t = stsd_txt_pick(txt, len, n, e->txt_id, why, sizeof(why));
    }
    dns_rrset_free(set);
    a = stsd_decide(e->have, e->id, e->expires_ms, ev_now(e->s->loop), t,
        e->txt_id);
    if (a == STSD_FETCH && strcmp(e->fail_id, e->txt_id) == 0 &&
        ev_now(e->s->loop) < e->retry_ms) {
        snprintf(why, sizeof(why), "the fetch of id=%s failed less than "
            "%d minutes ago", e->txt_id, STSD_RETRY_MS / 60000);
        stsd_fallback(e, why);
    } else if (a == STSD_FETCH) {
        snprintf(name, sizeof(name), "mta-sts.%s", e->domain);
        e->state = E_ADDR;
        if (dns_host(e->s->dns, name, stsd_addr_done, e, &e->dreq) == 0)
            return;
        e->dreq = NULL;
        snprintf(why, sizeof(why), "%.200s cannot be looked up", name);
        stsd_fallback(e, why);
    } else if (a == STSD_USE_CACHED && t == STSD_TXT_ID) {
        e->use = 1;
        snprintf(e->why, sizeof(e->why), "cached policy id=%s", e->id);
    } else {
        stsd_fallback(e, why);
    }
    stsd_complete(e);
}


/* stsd_start - look the TXT record up (from the loop, always). */
static void
stsd_start(struct stsd_entry *e)
{
    char name[DNS_NAME_MAX + 16];

    snprintf(name, sizeof(name), "_mta-sts.%s", e->domain);
    e->state = E_TXT;
    if (dns_query(e->s->dns, name, DNS_T_TXT, stsd_txt_done, e,
        &e->dreq) == 0)
        return;
    e->dreq = NULL;
    stsd_fallback(e, "the TXT lookup could not start");
    e->state = E_POST;
    ev_timer_start(e->s->loop, &e->post, 0);
}


int
stsd_get(struct stsd *s, const char *domain, stsd_fn *fn, void *arg,
    struct stsd_req **reqp)
{
    char               d[DNS_NAME_MAX];
    size_t             n = strlen(domain), i;
    struct stsd_entry *e;
    struct stsd_req   *r;

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
    e = stsd_entry_get(s, d);
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
        stsd_start(e);
    return 0;
}


void
stsd_cancel(struct stsd_req *r)
{
    struct stsd_entry *e;

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


/* ---- libcurl on the ev loop ---- */

static void
stsd_check(struct stsd *s)
{
    CURLMsg *m;
    int      left;

    while ((m = curl_multi_info_read(s->multi, &left)) != NULL) {
        struct stsd_fetch *f = NULL;

        if (m->msg != CURLMSG_DONE)
            continue;
        (void)curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &f);
        if (f != NULL)
            stsd_fetched(f, m->data.result);
    }
}


static void
stsd_io(struct ev_loop *loop, int fd, unsigned ev, void *arg)
{
    struct stsd *s = arg;
    int          flags = 0, running;

    (void)loop;
    if (ev & EV_READ)
        flags |= CURL_CSELECT_IN;
    if (ev & EV_WRITE)
        flags |= CURL_CSELECT_OUT;
    if (ev & EV_ERROR)
        flags |= CURL_CSELECT_ERR;
    (void)curl_multi_socket_action(s->multi, fd, flags, &running);
    stsd_check(s);
}


static void
stsd_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct stsd *s = arg;
    int          running;

    (void)loop;
    (void)t;
    (void)curl_multi_socket_action(s->multi, CURL_SOCKET_TIMEOUT, 0,
        &running);
    stsd_check(s);
}


static int
stsd_sock_cb(CURL *easy, curl_socket_t fd, int what, void *userp,
    void *socketp)
{
    struct stsd *s = userp;
    unsigned     mask = 0;

    (void)easy;
    (void)socketp;
    if (what == CURL_POLL_REMOVE) {
        ev_unwatch(s->loop, fd);
        return 0;
    }
    if (what & CURL_POLL_IN)
        mask |= EV_READ;
    if (what & CURL_POLL_OUT)
        mask |= EV_WRITE;
    if (ev_watch(s->loop, fd, mask, stsd_io, s) < 0) {
        log_warn("mta-sts: epoll_ctl: %s", strerror(errno));
        return -1;                  /* libcurl fails the transfer */
    }
    return 0;
}


static int
stsd_timer_cb(CURLM *multi, long ms, void *userp)
{
    struct stsd *s = userp;

    (void)multi;
    if (ms < 0)
        ev_timer_stop(s->loop, &s->ctimer);
    else
        ev_timer_start(s->loop, &s->ctimer, (uint64_t)ms);
    return 0;
}


/* ---- setup ---- */

/* stsd_ca_read - the whole CA bundle into memory (before the sandbox). */
static int
stsd_ca_read(struct stsd *s, const char *path, char *why, size_t whysz)
{
    struct stat st;
    ssize_t     n;
    size_t      got = 0;
    int         fd;

    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        snprintf(why, whysz, "CA bundle %s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        st.st_size > STSD_CA_MAX) {
        snprintf(why, whysz, "CA bundle %s: not a regular file of 1 byte "
            "to 8 MiB", path);
        close(fd);
        return -1;
    }
    s->ca = xmalloc((size_t)st.st_size);
    while (got < (size_t)st.st_size &&
        (n = read(fd, s->ca + got, (size_t)st.st_size - got)) > 0)
        got += (size_t)n;
    close(fd);
    s->calen = got;
    return 0;
}


struct stsd *
stsd_new(struct ev_loop *loop, struct dns *dns, const struct stsd_options *o,
    char *why, size_t whysz)
{
    struct stsd *s;

    if (dns == NULL) {
        snprintf(why, whysz, "no resolver");
        return NULL;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(why, whysz, "curl_global_init failed");
        return NULL;
    }
    s = xcalloc(1, sizeof(*s));
    s->loop = loop;
    s->dns = dns;
    s->port = o->port ? o->port : 443;
    s->timeout_ms = o->fetch_timeout_ms ? o->fetch_timeout_ms : 10000;
    if (stsd_ca_read(s, o->ca_file ? o->ca_file : STSD_SYSTEM_CA, why, whysz) < 0 ||
        (s->multi = curl_multi_init()) == NULL) {
        if (s->multi == NULL && s->ca != NULL)
            snprintf(why, whysz, "curl_multi_init failed");
        free(s->ca);
        free(s);
        return NULL;
    }
    ev_timer_init(&s->ctimer, stsd_timer, s);
    (void)curl_multi_setopt(s->multi, CURLMOPT_SOCKETFUNCTION, stsd_sock_cb);
    (void)curl_multi_setopt(s->multi, CURLMOPT_SOCKETDATA, s);
    (void)curl_multi_setopt(s->multi, CURLMOPT_TIMERFUNCTION, stsd_timer_cb);
    (void)curl_multi_setopt(s->multi, CURLMOPT_TIMERDATA, s);
    return s;
}


void
stsd_free(struct stsd *s)
{
    if (s == NULL)
        return;
    while (s->oldest != NULL) {
        struct stsd_entry *e = s->oldest;

        while (e->wait != NULL)
            stsd_cancel(e->wait);
        if (e->dreq != NULL)
            dns_cancel(e->dreq);
        stsd_fetch_free(e->f);
        stsd_entry_free(s, e);
    }
    ev_timer_stop(s->loop, &s->ctimer);
    curl_multi_cleanup(s->multi);
    free(s->ca);
    free(s);
}
