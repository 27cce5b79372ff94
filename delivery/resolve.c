/*
 * resolve.c - the DNS side of delivery: route + recipient domain -> the
 * addresses the relay tries, or a verdict (RFC 5321 5.1, RFC 7505).
 *
 * PURPOSE   deliver.c groups recipients by destination (the route text,
 *           or "mx:<domain>" for an mx route) and hands each group here.
 *           One lookup per route host (MX for `mx` and `smtp:domain`,
 *           A/AAAA for `smtp:[host]`, none for literals) through the
 *           worker's struct dns (c-ares in this loop: cache, joined
 *           lookups, MX order); when all are back, the hosts are flattened
 *           into one address list (resolve_flatten) and the group goes to
 *           the relay, or every recipient gets the verdict.
 * CONTRACT  See resolve.h.  A job lives from resolve_submit() until the
 *           group's done() ran: it wraps t->done so that t->hops (which
 *           point into the job) outlive the relay's use of them.
 * FAILURE   Never fails to the caller; a resolver that could not be built
 *           makes lookups defer (4.4.3) and is logged once.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "router/route.h"
#include "tlspol/tlspol.h"
#include "delivery/resolve.h"

#define RESOLVE_MAX_HOPS 16         /* as the relay's MTA_MAX_ADDRS */

struct rs_job;

struct rs_part {
    struct rs_job   *job;
    struct dns_req  *req;           /* while the lookup runs */
    struct dns_dest *dest;          /* when it is back */
    unsigned         port;
    int              rcpt_domain;   /* the recipients' own domain */
    int              mx;            /* an MX lookup (else a host's) */
};

struct rs_job {
    struct resolve  *rs;
    struct mta    *relay;
    struct mta_txn  *t;
    struct rs_job   *next, *prev;
    mta_done_fn     *done;          /* the caller's, restored before use */
    void            *arg;
    size_t           nparts, left;
    struct rs_part   part[ROUTE_MAX_HOSTS];
    struct mta_hop   hop[RESOLVE_MAX_HOPS];
    unsigned char    hop_part[RESOLVE_MAX_HOPS]; /* part of each hop */
    size_t           nhop;
    struct tls_dane_lookup *dane;       /* TLSA of the hosts (owns tlsa) */
    int              dane_wait;     /* its lookups are in flight */
    struct rs_job   *post_next;     /* on rs->posted */
    /* MTA-STS of an mx route's domain (tlspol/sts.c), in parallel */
    struct tls_sts_req *sts_req;       /* while it runs */
    struct sts_policy *sts;         /* the policy in force, or NULL */
};

struct resolve {
    struct ev_loop      *loop;
    struct dns          *dns;       /* NULL: could not be built */
    char                 dnswhy[256];
    struct tls_sts         *sts;       /* NULL: MTA-STS off or unusable */
    struct resolve_self  self;
    char                *hostname;
    struct rs_job       *jobs;      /* every job not yet done */
    struct rs_job       *posted;    /* verdicts waiting for the loop */
    struct ev_timer      post_timer;
};

static void rs_part_done(struct dns_dest *dest, void *arg);
static void rs_dane_done(void *arg);
static int  rs_reqtls(struct rs_job *j, size_t *n);


/* ---- pure parts ---- */

static int
rs_addr_eq(const struct dns_addr *a, const struct dns_addr *b)
{
    if (a->family != b->family)
        return 0;
    if (a->family == AF_INET)
        return a->a.v4.s_addr == b->a.v4.s_addr;
    return memcmp(&a->a.v6, &b->a.v6, sizeof(a->a.v6)) == 0;
}


/* rs_is_loopback - 127.0.0.0/8 or ::1. */
static int
rs_is_loopback(const struct dns_addr *a)
{
    if (a->family == AF_INET)
        return (ntohl(a->a.v4.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&a->a.v6);
}


/* rs_name_eq - host names equal, case and a final dot ignored. */
static int
rs_name_eq(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);

    if (na > 0 && a[na - 1] == '.')
        na--;
    if (nb > 0 && b[nb - 1] == '.')
        nb--;
    return na == nb && na > 0 && strncasecmp(a, b, na) == 0;
}


int
resolve_is_self(const struct resolve_self *self, const struct dns_host *h,
    unsigned port)
{
    size_t i, k;

    if (self->hostname != NULL && rs_name_eq(self->hostname, h->name))
        return 1;
    for (k = 0; k < h->naddr; k++) {
        for (i = 0; i < self->naddr; i++)
            if (self->addr[i].port == port &&
                rs_addr_eq(&self->addr[i].a, &h->addr[k]))
                return 1;
        if (rs_is_loopback(&h->addr[k]))
            for (i = 0; i < self->nlo; i++)
                if (self->lo_ports[i] == port)
                    return 1;
    }
    return 0;
}


static void
rs_hop_set(struct mta_hop *hp, const char *name, unsigned port,
    const struct dns_addr *a)
{
    struct sockaddr_in  *s4 = (struct sockaddr_in *)&hp->ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&hp->ss;

    memset(hp, 0, sizeof(*hp));
    util_strlcpy(hp->name, name, sizeof(hp->name));
    hp->port = port;
    if (a->family == AF_INET) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        s4->sin_addr = a->a.v4;
        hp->len = sizeof(*s4);
    } else {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        s6->sin6_addr = a->a.v6;
        hp->len = sizeof(*s6);
    }
}


int
resolve_flatten(const struct dns_dest *dest, unsigned port,
    const struct resolve_self *self, struct mta_hop *out, size_t max,
    size_t *n)
{
    size_t i, k, cut = dest->nhost, added = 0;

    for (i = 0; i < dest->nhost; i++) {
        if (self != NULL && resolve_is_self(self, &dest->host[i], port)) {
            /* RFC 5321 5.1: only hosts preferred over ourselves */
            cut = 0;
            while (cut < i && dest->host[cut].pref < dest->host[i].pref)
                cut++;
            break;
        }
    }
    if (cut == 0 && dest->nhost > 0)
        return RESOLVE_LOOP;
    for (i = 0; i < cut; i++)
        for (k = 0; k < dest->host[i].naddr && *n < max; k++) {
            rs_hop_set(&out[(*n)++], dest->host[i].name, port,
                &dest->host[i].addr[k]);
            added++;
        }
    return added > 0 ? RESOLVE_OK : RESOLVE_NONE;
}


enum mta_status
resolve_verdict(const struct dns_dest *dest, int rcpt_domain, char *reply,
    size_t replysz)
{
    switch (dest->status) {
    case DNS_NULLMX:
        snprintf(reply, replysz, "550 5.1.10 Domain %.200s does not accept "
            "mail (null MX)", dest->domain);
        return MTA_BOUNCE;
    case DNS_NXDOMAIN:
        snprintf(reply, replysz, "550 %s Host or domain name not found: "
            "%.250s", rcpt_domain ? "5.1.2" : "5.4.4", dest->why);
        return MTA_BOUNCE;
    case DNS_TEMPFAIL:
        snprintf(reply, replysz, "451 4.4.3 Host or domain name lookup "
            "failed: %.250s", dest->why);
        return MTA_DEFER;
    case DNS_NODATA:
        snprintf(reply, replysz, "451 4.4.3 %.250s", dest->why);
        return MTA_DEFER;
    case DNS_OK:
    default:
        snprintf(reply, replysz, "451 4.4.3 no address for %.200s",
            dest->domain);
        return MTA_DEFER;
    }
}


/* ---- jobs ---- */

/* rs_fake - a destination that needed no lookup (an address literal), or
 * a lookup that could not start (status and why). */
static struct dns_dest *
rs_fake(const char *name, enum dns_status st, const char *why)
{
    struct dns_dest *dest = xcalloc(1, sizeof(*dest));

    dest->status = st;
    util_strlcpy(dest->domain, name, sizeof(dest->domain));
    util_strlcpy(dest->name, name, sizeof(dest->name));
    util_strlcpy(dest->why, why, sizeof(dest->why));
    if (st == DNS_OK) {
        struct dns_host *h;

        dest->host = h = xcalloc(1, sizeof(*h));
        dest->nhost = 1;
        util_strlcpy(h->name, name, sizeof(h->name));
        h->addr = xcalloc(1, sizeof(*h->addr));
        if (inet_pton(AF_INET, name, &h->addr[0].a.v4) == 1)
            h->addr[0].family = AF_INET;
        else if (inet_pton(AF_INET6, name, &h->addr[0].a.v6) == 1)
            h->addr[0].family = AF_INET6;
        h->naddr = h->addr[0].family != 0;
        if (h->naddr == 0)
            dest->status = DNS_NODATA;
    }
    return dest;
}


/* rs_literal - an address literal as a name: "1.2.3.4", "::1", or a
 * domain literal "[1.2.3.4]" / "[IPv6:::1]" (RFC 5321 4.1.3); the bare
 * address in out, or -1. */
static int
rs_literal(const char *name, char *out, size_t outsz)
{
    struct in6_addr a6;
    size_t          n = strlen(name);

    if (n >= 2 && name[0] == '[' && name[n - 1] == ']') {
        name++;
        n -= 2;
        if (n > 5 && strncasecmp(name, "IPv6:", 5) == 0) {
            name += 5;
            n -= 5;
        }
    }
    if (n + 1 > outsz)
        return -1;
    memcpy(out, name, n);
    out[n] = '\0';
    if (inet_pton(AF_INET, out, &a6) == 1 ||
        inet_pton(AF_INET6, out, &a6) == 1)
        return 0;
    return -1;
}


static void
rs_job_unlink(struct rs_job *j)
{
    struct resolve *rs = j->rs;

    if (j->prev)
        j->prev->next = j->next;
    else
        rs->jobs = j->next;
    if (j->next)
        j->next->prev = j->prev;
}


static void
rs_job_free(struct rs_job *j)
{
    size_t i;

    for (i = 0; i < j->nparts; i++) {
        if (j->part[i].req != NULL)
            dns_cancel(j->part[i].req);
        dns_dest_free(j->part[i].dest);
    }
    tls_sts_cancel(j->sts_req);
    free(j->sts);
    tls_dane_lookup_free(j->dane);
    free(j);
}


/* rs_txn_done - the group is finished (relay or verdict): give t back
 * its own callback, drop the job, then call it. */
static void
rs_txn_done(struct mta_txn *t)
{
    struct rs_job *j = t->arg;

    t->done = j->done;
    t->arg = j->arg;
    t->hops = NULL;
    t->nhops = 0;
    rs_job_unlink(j);
    rs_job_free(j);
    t->done(t);
}


static void
rs_post_fire(struct ev_loop *loop, struct ev_timer *tm, void *arg)
{
    struct resolve *rs = arg;
    struct rs_job  *list = rs->posted;

    (void)loop;
    (void)tm;
    rs->posted = NULL;
    while (list != NULL) {
        struct rs_job *j = list;

        list = j->post_next;
        rs_txn_done(j->t);
    }
}


/* rs_verdict_all - every recipient of the group gets one verdict,
 * reported from the loop. */
static void
rs_verdict_all(struct rs_job *j, int status, const char *reply)
{
    struct mta_txn *t = j->t;
    size_t          i;

    for (i = 0; i < t->nrcpt; i++) {
        t->res[i].status = status;
        util_strlcpy(t->res[i].reply, reply, sizeof(t->res[i].reply));
        util_strlcpy(t->res[i].relay, "none", sizeof(t->res[i].relay));
    }
    j->post_next = j->rs->posted;
    j->rs->posted = j;
    if (!ev_timer_active(&j->rs->post_timer))
        ev_timer_start(j->rs->loop, &j->rs->post_timer, 0);
}


/* rs_dest_host - the host of dest named name, or NULL. */
static const struct dns_host *
rs_dest_host(const struct dns_dest *dest, const char *name)
{
    size_t i;

    for (i = 0; i < dest->nhost; i++)
        if (strcmp(dest->host[i].name, name) == 0)
            return &dest->host[i];
    return NULL;
}


static int
rs_dane_level(const struct mta_hop *h)
{
    return h->tls.level == TLS_DANE || h->tls.level == TLS_DANE_ONLY;
}


/*
 * rs_dane_begin - the TLSA lookups of the hops at a DANE level whose MX
 * answer (RFC 7672 2.2.1; none for a host route) and host addresses
 * (2.2.2) were DNSSEC-secure.  1 when they started (rs_dane_done follows),
 * 0 when none is needed.
 */
static int
rs_dane_begin(struct rs_job *j)
{
    size_t k;

    for (k = 0; k < j->nhop; k++) {
        const struct rs_part  *p = &j->part[j->hop_part[k]];
        const struct dns_host *h;

        if (!rs_dane_level(&j->hop[k]) || j->rs->dns == NULL ||
            (p->mx && !p->dest->secure))
            continue;
        h = rs_dest_host(p->dest, j->hop[k].name);
        if (h == NULL || !h->secure)
            continue;
        if (j->dane == NULL)
            j->dane = tls_dane_lookup_new(j->rs->dns, rs_dane_done, j);
        tls_dane_lookup_add(j->dane, h, j->hop[k].port);
    }
    return j->dane != NULL && tls_dane_lookup_start(j->dane);
}


/*
 * rs_submit - the hops' TLS requirements refined by DANE (tlspol.h:
 * usable TLSA -> authenticate; secure but unusable -> encrypt under dane;
 * none -> may under dane; TLSA lookup failed -> the host is not tried;
 * dane-only without usable TLSA -> not tried either), then MTA-STS
 * (resolve_sts_hops), then REQUIRETLS (rs_reqtls), then to the relay; when DANE
 * leaves no hop, every recipient defers with the first reason.
 */
static void
rs_submit(struct rs_job *j)
{
    struct mta_txn *t = j->t;
    char            reply[SMTP_REPLY_MAX] = "", why_sts[SMTP_REPLY_MAX];
    const char     *failure = "";
    size_t          k, o = 0, i;

    for (k = 0; k < j->nhop; k++) {
        struct mta_hop *hp = &j->hop[k];
        char            why[SMTP_REPLY_MAX];
        const char     *fail;

        if (tls_dane_refine(&hp->tls, hp->name, tls_dane_lookup_find(j->dane,
            hp->name, hp->port), why, sizeof(why), &fail) != 0) {
            if (reply[0] == '\0') {    /* the first reason */
                util_strlcpy(reply, why, sizeof(reply));
                failure = fail;
            }
            continue;
        }
        if (o != k)
            j->hop[o] = *hp;
        o++;
    }
    j->nhop = o;
    /* MTA-STS (sts.c): enforce keeps the matching hosts and makes them
     * need a CA-verified name; the hosts DANE took (usable TLSA) are left
     * to DANE (RFC 8461 2).  A message with TLS-Required: No ignores the
     * policy (RFC 8689 5) */
    if (o > 0 && j->sts != NULL &&
        tls_reqtls_mode(t->env) != TLS_REQTLS_OPTIONAL &&
        resolve_sts_hops(j->sts, j->part[0].dest->domain, j->hop, &o, why_sts,
        sizeof(why_sts)) < 0) {
        rs_verdict_all(j, MTA_DEFER, why_sts);
        return;
    }
    j->nhop = o;
    if (o > 0) {
        if (rs_reqtls(j, &o) < 0)   /* last: after every refinement */
            return;
        t->hops = j->hop;
        t->nhops = o;
        mta_submit(j->relay, t);
        return;
    }
    rs_verdict_all(j, MTA_DEFER, reply);
    for (i = 0; i < t->nrcpt; i++)
        util_strlcpy(t->res[i].tls.failure, failure,
            sizeof(t->res[i].tls.failure));
}


static void
rs_dane_done(void *arg)
{
    struct rs_job *j = arg;

    j->dane_wait = 0;
    rs_submit(j);
}


/*
 * rs_hop_mx - whether hop h came through an MX answer (RFC 8689 4.2.1
 * step 2), and *secure whether every MX answer that named it was
 * DNSSEC-secure.  A route's own host (smtp:[host], a literal) is no MX.
 */
static int
rs_hop_mx(const struct rs_job *j, const struct mta_hop *h, int *secure)
{
    size_t i, k;
    int    mx = 0;

    *secure = 1;
    for (i = 0; i < j->nparts; i++) {
        const struct rs_part *p = &j->part[i];

        if (!p->mx || p->dest == NULL || p->dest->status != DNS_OK ||
            p->port != h->port)
            continue;
        for (k = 0; k < p->dest->nhost; k++)
            if (strcmp(p->dest->host[k].name, h->name) == 0) {
                mx = 1;
                if (!p->dest->secure)
                    *secure = 0;
            }
    }
    return mx;
}


/*
 * rs_reqtls - RFC 8689 on the final hops of j (tlspol.h, step 1): for a
 * REQUIRETLS message each hop must authenticate its server and came from a
 * secure MX answer (or MTA-STS); the others are dropped, and with none
 * left every recipient bounces with the first reason (returns -1).  For
 * TLS-Required: No, the recipient domain's policies leave each hop.  The
 * txn's own requirement (its destination key) follows.
 */
static int
rs_reqtls(struct rs_job *j, size_t *n)
{
    struct mta_txn *t = j->t;
    char            why[SMTP_REPLY_MAX], first[SMTP_REPLY_MAX] = "";
    size_t          k, o = 0;
    int             secure;

    switch (tls_reqtls_mode(t->env)) {
    case TLS_REQTLS_OPTIONAL:
        tls_reqtls_optional(&t->tls);
        for (k = 0; k < *n; k++)
            tls_reqtls_optional(&j->hop[k].tls);
        return 0;
    case TLS_REQTLS_REQUIRE:
        break;
    default:
        return 0;
    }
    tls_reqtls_raise(&t->tls);
    for (k = 0; k < *n; k++) {
        struct mta_hop *hp = &j->hop[k];
        int             mx = rs_hop_mx(j, hp, &secure);

        if (tls_reqtls_hop(&hp->tls, mx, secure, hp->name, why,
            sizeof(why)) < 0) {
            if (first[0] == '\0')
                util_strlcpy(first, why, sizeof(first));
            continue;
        }
        if (o != k)
            j->hop[o] = *hp;
        o++;
    }
    *n = o;
    if (o > 0)
        return 0;
    rs_verdict_all(j, MTA_BOUNCE, first);
    return -1;
}


/*
 * rs_finish - every lookup of j is back: the addresses of all its parts
 * in route order, to the relay; with none, the verdict of the first part
 * that defers (a temporary failure anywhere must not turn into a bounce),
 * else of the first part.
 */
static void
rs_finish(struct rs_job *j)
{
    struct mta_txn *t = j->t;
    char            reply[SMTP_REPLY_MAX], first[SMTP_REPLY_MAX] = "";
    size_t          i, n = 0;
    int             st, fst = -1, deferred = 0;

    for (i = 0; i < j->nparts; i++) {
        struct rs_part  *p = &j->part[i];
        struct dns_dest *dest = p->dest;
        int              rc = RESOLVE_NONE;

        size_t           n0 = n;

        if (dest->status == DNS_OK)
            rc = resolve_flatten(dest, p->port, &j->rs->self, j->hop,
                RESOLVE_MAX_HOPS, &n);
        while (n0 < n)
            j->hop_part[n0++] = (unsigned char)i;
        if (rc == RESOLVE_OK)
            continue;
        if (rc == RESOLVE_LOOP) {
            snprintf(reply, sizeof(reply), "550 5.4.6 mail for %.200s "
                "loops back to myself", dest->domain);
            st = MTA_BOUNCE;
        } else if (dest->status == DNS_OK) {
            snprintf(reply, sizeof(reply), "451 4.4.3 no MX host of %.200s "
                "preferred over this server has an address", dest->domain);
            st = MTA_DEFER;
        } else {
            st = resolve_verdict(dest, p->rcpt_domain, reply, sizeof(reply));
        }
        if (fst == -1 || (st == MTA_DEFER && !deferred)) {
            fst = st;
            util_strlcpy(first, reply, sizeof(first));
            deferred = st == MTA_DEFER;
        }
    }
    if (n > 0) {
        /* the TLS requirement per host (tlspol.h, step 1): the txn's
         * level, checked against the host's own name */
        for (i = 0; i < n; i++) {
            j->hop[i].tls = t->tls;
            util_strlcpy(j->hop[i].tls.verify_name, j->hop[i].name,
                sizeof(j->hop[i].tls.verify_name));
        }
        /* then DANE refines it (tlspol.h), after the TLSA lookups if any,
         * and REQUIRETLS last (rs_submit) */
        j->nhop = n;
        if (rs_dane_begin(j))
            j->dane_wait = 1;       /* rs_dane_done follows */
        else
            rs_submit(j);
        return;
    }
    if (fst == -1) {
        fst = MTA_DEFER;
        util_strlcpy(first, "451 4.4.3 no address for the route",
            sizeof(first));
    }
    rs_verdict_all(j, fst, first);
}


static void
rs_part_done(struct dns_dest *dest, void *arg)
{
    struct rs_part *p = arg;
    struct rs_job  *j = p->job;

    p->req = NULL;
    p->dest = dest;
    if (--j->left == 0)
        rs_finish(j);
}


/* rs_sts_done - the MTA-STS policy of an mx route's domain is known. */
static void
rs_sts_done(const struct sts_policy *pol, const char *why, void *arg)
{
    struct rs_job *j = arg;

    (void)why;                      /* sts.c logged fetches and failures */
    j->sts_req = NULL;
    if (pol != NULL && pol->mode != STS_MODE_NONE) {
        j->sts = xmalloc(sizeof(*j->sts));
        *j->sts = *pol;
    }
    if (--j->left == 0)
        rs_finish(j);
}


/* rs_part_start - start the lookup of one part (or settle it now). */
static void
rs_part_start(struct rs_job *j, struct rs_part *p, const char *name,
    int mx)
{
    struct resolve *rs = j->rs;
    char            lit[DNS_NAME_MAX], why[300];
    int             rc;

    p->job = j;
    p->mx = mx;
    j->left++;
    if (rs_literal(name, lit, sizeof(lit)) == 0) {
        p->dest = rs_fake(lit, DNS_OK, "");
        j->left--;
        return;
    }
    if (rs->dns == NULL) {
        snprintf(why, sizeof(why), "no resolver: %.200s", rs->dnswhy);
        p->dest = rs_fake(name, DNS_TEMPFAIL, why);
        j->left--;
        return;
    }
    rc = mx ? dns_mx(rs->dns, name, rs_part_done, p, &p->req) :
        dns_host(rs->dns, name, rs_part_done, p, &p->req);
    if (rc != 0) {
        p->req = NULL;
        snprintf(why, sizeof(why), "%.200s is not a name that can be "
            "looked up (%s)", name, dns_strerror(rc));
        p->dest = rs_fake(name, p->rcpt_domain ? DNS_NXDOMAIN :
            DNS_TEMPFAIL, why);
        j->left--;
    }
}


void
resolve_submit(struct resolve *rs, struct mta *relay, struct mta_txn *t,
    const char *domain)
{
    const struct route *rt = t->route;
    struct rs_job      *j = xmalloc(sizeof(*j));
    size_t              i;

    /* Zeroed but for hop[] and hop_part[] (15 KB): a hop is cleared by
     * rs_hop_set() when it is filled and none is read past nhop.  Zeroing
     * them for every message is a large write into memory that is cold
     * when many jobs are alive. */
    memset(j, 0, offsetof(struct rs_job, hop));
    memset(&j->nhop, 0, sizeof(*j) - offsetof(struct rs_job, nhop));

    j->rs = rs;
    j->relay = relay;
    j->t = t;
    j->done = t->done;
    j->arg = t->arg;
    t->done = rs_txn_done;
    t->arg = j;
    t->hops = NULL;
    t->nhops = 0;
    j->next = rs->jobs;
    if (rs->jobs)
        rs->jobs->prev = j;
    rs->jobs = j;
    /* count every part first: a lookup answered from a literal must not
     * finish the job while later parts are still to start */
    j->left = 1;
    if (rt->kind == ROUTE_MX) {
        j->nparts = 1;
        j->part[0].port = 25;
        j->part[0].rcpt_domain = 1;
        rs_part_start(j, &j->part[0], domain != NULL ? domain : "", 1);
        /* the recipient domain's MTA-STS policy, alongside its MX */
        if (rs->sts != NULL && domain != NULL &&
            tls_sts_get(rs->sts, domain, rs_sts_done, j, &j->sts_req) == 0)
            j->left++;
    } else {
        j->nparts = rt->nhosts;
        for (i = 0; i < rt->nhosts; i++) {
            j->part[i].port = rt->hosts[i].port;
            rs_part_start(j, &j->part[i], rt->hosts[i].name,
                route_host_mx(&rt->hosts[i]));
        }
    }
    if (--j->left == 0)
        rs_finish(j);
}


/* ---- setup ---- */

static void
rs_self_add(struct resolve_self *s, const struct dns_addr *a, unsigned port)
{
    s->addr = xrealloc(s->addr, (s->naddr + 1) * sizeof(*s->addr));
    s->addr[s->naddr].a = *a;
    s->addr[s->naddr].port = port;
    s->naddr++;
}


/* rs_self_build - our listen addresses; a wildcard listener stands for
 * every address of every interface (getifaddrs, once, at worker start)
 * and for the loopback nets. */
static void
rs_self_build(struct resolve *rs, const struct config *cfg)
{
    struct resolve_self *s = &rs->self;
    struct ifaddrs      *ifa = NULL, *p;
    size_t               i;
    int                  have_ifa = 0;

    s->hostname = rs->hostname;
    for (i = 0; i < cfg->nlisten; i++) {
        const struct sockaddr_storage *ss = &cfg->listen[i].addr;
        struct dns_addr a;
        unsigned        port;
        int             wild = 0, wild_family = 0;

        memset(&a, 0, sizeof(a));
        if (ss->ss_family == AF_INET) {
            const struct sockaddr_in *s4 = (const void *)ss;

            a.family = AF_INET;
            a.a.v4 = s4->sin_addr;
            port = ntohs(s4->sin_port);
            wild = s4->sin_addr.s_addr == htonl(INADDR_ANY);
            wild_family = AF_INET;
        } else if (ss->ss_family == AF_INET6) {
            const struct sockaddr_in6 *s6 = (const void *)ss;

            a.family = AF_INET6;
            a.a.v6 = s6->sin6_addr;
            port = ntohs(s6->sin6_port);
            wild = IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr);
            wild_family = 0;        /* "::" takes IPv4 too (Linux) */
        } else {
            continue;
        }
        if (!wild) {
            rs_self_add(s, &a, port);
            continue;
        }
        s->lo_ports = xrealloc(s->lo_ports, (s->nlo + 1) *
            sizeof(*s->lo_ports));
        s->lo_ports[s->nlo++] = port;
        if (!have_ifa) {
            if (getifaddrs(&ifa) < 0)
                log_warn("getifaddrs: %s: loop detection knows only the "
                    "listen addresses", strerror(errno));
            have_ifa = 1;
        }
        for (p = ifa; p != NULL; p = p->ifa_next) {
            struct dns_addr ia;

            if (p->ifa_addr == NULL)
                continue;
            memset(&ia, 0, sizeof(ia));
            if (p->ifa_addr->sa_family == AF_INET &&
                wild_family != AF_INET6) {
                ia.family = AF_INET;
                ia.a.v4 = ((struct sockaddr_in *)p->ifa_addr)->sin_addr;
            } else if (p->ifa_addr->sa_family == AF_INET6 &&
                wild_family != AF_INET) {
                ia.family = AF_INET6;
                ia.a.v6 = ((struct sockaddr_in6 *)p->ifa_addr)->sin6_addr;
            } else {
                continue;
            }
            rs_self_add(s, &ia, port);
        }
    }
    if (ifa != NULL)
        freeifaddrs(ifa);
}


/* rs_options - dns.* of relay.yaml as dns.h options (as mtactl route
 * get does, so that it shows what delivery does). */
static void
rs_options(const struct config *cfg, struct dns_options *o)
{
    dns_options_default(o);
    o->servers = cfg->dns_servers;
    o->timeout_ms = (unsigned)cfg->dns_timeout_ms;
    o->attempts = (unsigned)cfg->dns_attempts;
    o->min_ttl = (uint32_t)(cfg->dns_min_ttl_ms / 1000);
    o->max_ttl = (uint32_t)(cfg->dns_max_ttl_ms / 1000);
    o->cache_max = (size_t)cfg->dns_cache_size;
    o->family = (enum dns_family)cfg->dns_address_family;
    o->prefer = (enum dns_family)cfg->dns_prefer;
    o->address_limit = (size_t)cfg->dns_address_limit;
}


struct resolve *
resolve_new(struct ev_loop *loop, const struct config *cfg)
{
    struct resolve    *rs = xcalloc(1, sizeof(*rs));
    struct dns_options o;

    rs->loop = loop;
    ev_timer_init(&rs->post_timer, rs_post_fire, rs);
    rs->hostname = cfg->hostname != NULL ? xstrdup(cfg->hostname) : NULL;
    rs_options(cfg, &o);
    if (dns_new(&rs->dns, loop, &o, rs->dnswhy, sizeof(rs->dnswhy)) != 0) {
        rs->dns = NULL;
        log_err("resolver: %s: MX and host name routes defer until it "
            "works", rs->dnswhy);
    }
    if (rs->dns != NULL && cfg->mta_sts.enabled) {
        struct tls_sts_options so;
        char                why[300];

        memset(&so, 0, sizeof(so));
        so.ca_file = cfg->tls_ca_file;  /* NULL: the system's bundle */
        so.port = (unsigned)cfg->mta_sts.port;
        so.fetch_timeout_ms = cfg->mta_sts.fetch_timeout_ms;
        if ((rs->sts = tls_sts_new(loop, rs->dns, &so, why, sizeof(why))) ==
            NULL)
            log_err("mta-sts: %s: delivering without MTA-STS", why);
    }
    rs_self_build(rs, cfg);
    return rs;
}


struct dns *
resolve_dns(struct resolve *rs)
{
    return rs->dns;
}


size_t
resolve_cut(struct resolve *rs)
{
    struct rs_job *j;
    size_t         n = 0, i;

    for (j = rs->jobs; j != NULL; j = j->next) {
        if (j->left == 0 && !j->dane_wait)
            continue;               /* with the relay, or its verdict due */
        if (j->dane_wait) {         /* TLSA lookups: cancelled */
            tls_dane_lookup_free(j->dane);
            j->dane = NULL;
            j->dane_wait = 0;
        }
        for (i = 0; i < j->nparts; i++) {
            if (j->part[i].req != NULL) {
                dns_cancel(j->part[i].req);
                j->part[i].req = NULL;
            }
        }
        tls_sts_cancel(j->sts_req);    /* its fetch goes on for the cache */
        j->sts_req = NULL;
        j->left = 0;
        j->t->cut = 1;
        j->post_next = rs->posted;
        rs->posted = j;
        n++;
    }
    if (n > 0 && !ev_timer_active(&rs->post_timer))
        ev_timer_start(rs->loop, &rs->post_timer, 0);
    return n;
}


void
resolve_free(struct resolve *rs)
{
    if (rs == NULL)
        return;
    ev_timer_stop(rs->loop, &rs->post_timer);
    while (rs->jobs != NULL) {
        struct rs_job *j = rs->jobs;

        /* the relay is gone (deliver_free frees it first): t->done is
         * never called; the job's lookups are cancelled */
        rs_job_unlink(j);
        rs_job_free(j);
    }
    tls_sts_free(rs->sts);             /* its lookups use rs->dns */
    dns_free(rs->dns);
    free(rs->self.addr);
    free(rs->self.lo_ports);
    free(rs->hostname);
    free(rs);
}
