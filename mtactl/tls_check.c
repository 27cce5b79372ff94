/*
 * tls_check.c - mtactl tls check DOMAIN: the outbound TLS that mail to
 * DOMAIN gets now, worked out by the delivery's own code, then a live
 * STARTTLS probe of each MX host (as Postfix's posttls-finger).
 *
 * CONTRACT  The steps are the workers' (delivery/resolve.c), run here in
 *           an ev loop of mtactl's own:
 *             1. the route of postmaster@DOMAIN (routes db), and the
 *                level: the policy table's entry for DOMAIN, else for the
 *                routes key that matched, else delivery.tls;
 *             2. the MX (or the route's host) through dns/ with the dns.*
 *                settings, and for an mx route the MTA-STS policy
 *                (delivery/sts.h: TXT record and HTTPS fetch);
 *             3. per host: the TLSA lookup and tls_dane_refine() (dane.h)
 *                when the level is dane or dane-only and the answers were
 *                secure; then stsd_hops(): enforce drops the hosts that
 *                do not match and needs a CA-verified name on the rest;
 *             4. per host (its first address): connect, EHLO, STARTTLS,
 *                the handshake with tls_client_prepare() of the host's
 *                requirement, and tls_client_verdict(): what mtad's
 *                delivery would make of this server now.  The certificate's
 *                subject and names are printed.  --no-probe skips it.
 *           Everything a server or DNS sent is escaped (util_escape).
 *           Loop detection is not repeated here (a host that is this
 *           server is probed like any other).
 * FAILURE   Exit 0 when every host mtad would try passes its probe (or
 *           with --no-probe, when there is a host to try); 1 when none
 *           would be tried, a lookup failed, or a probe failed; 2 usage.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "dns/dns.h"
#include "router/route.h"
#include "router/router.h"
#include "tlspol/tlspol.h"
#include "delivery/mta.h"
#include "delivery/resolve.h"
#include "mtactl/mtactl.h"
#include "mtactl/queue_int.h"
#include "mtactl/tls_check_int.h"

#define TC_MAX_HOPS  32

struct tc {
    const struct config *cfg;
    struct ev_loop      *loop;
    struct dns          *dns;
    struct tls_sts         *sts;
    struct tls_dane_lookup  *dane;
    int                  left;          /* lookups outstanding */
    struct dns_dest     *dest;
    int                  looked_sts;    /* asked (else sts_why: why not) */
    int                  have_sts;      /* a policy in force */
    struct sts_policy    pol;
    char                 sts_why[512];
    char                 domain[DNS_NAME_MAX];
    char                 policy_domain[DNS_NAME_MAX];
    char                 level_from[ROUTE_KEY_MAX + 64];
    enum tls_level       level;
    unsigned             port;
    int                  mx;            /* an MX lookup (not a host) */
    struct mta_hop       hop[TC_MAX_HOPS];
    size_t               nhop;
};


static void
tc_one_done(struct tc *t)
{
    if (--t->left == 0)
        ev_stop(t->loop);
}


static void
tc_dest_done(struct dns_dest *dest, void *arg)
{
    struct tc *t = arg;

    t->dest = dest;
    tc_one_done(t);
}


static void
tc_sts_done(const struct sts_policy *pol, const char *why, void *arg)
{
    struct tc *t = arg;

    util_strlcpy(t->sts_why, why != NULL ? why : "", sizeof(t->sts_why));
    if (pol != NULL) {
        t->pol = *pol;
        t->have_sts = 1;
    }
    tc_one_done(t);
}


static void
tc_dane_done(void *arg)
{
    tc_one_done(arg);
}


static void
tc_put(const char *label, const char *text)
{
    printf("%-12s ", label);
    queue_put_text(text);
    putchar('\n');
}


/*
 * tc_route - step 1: the route of postmaster@domain and the TLS level in
 * force, as the delivery picks it (deliver.c).  0, or -1 after saying why
 * (also for a route that does not go out by SMTP).
 */
static int
tc_route(struct tc *t)
{
    struct router       *r = NULL;
    struct router_result res;
    char                 addr[DNS_NAME_MAX + 16], v[ROUTER_TLS_VALUE_MAX + 1];

    if (router_open(&r, t->cfg->routes_db, t->cfg->routes_default, 0) !=
        ROUTER_OK) {
        fprintf(stderr, "mtactl: tls check: %s\n", router_errstr(r));
        router_close(r);
        return -1;
    }
    snprintf(addr, sizeof(addr), "postmaster@%s", t->domain);
    if (router_lookup(r, addr, &res) != ROUTER_OK) {
        fprintf(stderr, "mtactl: tls check: route of %s: %s\n", t->domain,
            router_errstr(r));
        router_close(r);
        return -1;
    }
    printf("%-12s %s (key %s)\n", "route:", res.value, res.key);
    t->level = (enum tls_level)t->cfg->delivery_tls;
    snprintf(t->level_from, sizeof(t->level_from), "delivery.tls");
    if (router_tls_get(r, t->domain, v, sizeof(v)) == ROUTER_OK) {
        t->level = (enum tls_level)router_tls_level(v);
        snprintf(t->level_from, sizeof(t->level_from), "policy table: %s",
            t->domain);
    } else if (res.match != ROUTER_MATCH_DEFAULT &&
        router_tls_get(r, res.key, v, sizeof(v)) == ROUTER_OK) {
        t->level = (enum tls_level)router_tls_level(v);
        snprintf(t->level_from, sizeof(t->level_from), "policy table: %s",
            res.key);
    }
    router_close(r);
    if (res.route.kind == ROUTE_MX) {
        t->mx = 1;
        t->port = 25;
        util_strlcpy(t->policy_domain, t->domain, sizeof(t->policy_domain));
    } else if (res.route.kind == ROUTE_SMTP && res.route.nhosts > 0) {
        /* the first host of a fail-over list: the one mail goes to */
        t->mx = route_host_mx(&res.route.hosts[0]);
        t->port = res.route.hosts[0].port;
        util_strlcpy(t->policy_domain, res.route.hosts[0].name,
            sizeof(t->policy_domain));
    } else {
        printf("%-12s none: the route does not deliver by SMTP\n", "level:");
        return -1;
    }
    printf("%-12s %s (%s)\n", "level:", tls_level_name(t->level),
        t->level_from);
    return 0;
}


/* tc_lookup - step 2: the destination, and the MTA-STS policy alongside
 * it (mx routes, when delivery.mta_sts is on). */
static int
tc_lookup(struct tc *t)
{
    struct dns_options o;
    char               why[300];
    int                rc;

    /* an address literal route: no lookup, one hop (as resolve.c) */
    if (!t->mx && mta_hop_literal(t->policy_domain, t->port, &t->hop[0]) ==
        0) {
        t->nhop = 1;
        snprintf(t->sts_why, sizeof(t->sts_why), "not applied (the route "
            "names its host)");
        return 0;
    }
    mtactl_route_dns_options(t->cfg, &o);
    if (dns_new(&t->dns, t->loop, &o, why, sizeof(why)) != 0) {
        fprintf(stderr, "mtactl: tls check: resolver: %s\n", why);
        return -1;
    }
    rc = t->mx ? dns_mx(t->dns, t->policy_domain, tc_dest_done, t, NULL) :
        dns_host(t->dns, t->policy_domain, tc_dest_done, t, NULL);
    if (rc != 0) {
        fprintf(stderr, "mtactl: tls check: %s: %s\n", t->policy_domain,
            dns_strerror(rc));
        return -1;
    }
    t->left = 1;
    if (t->mx && t->port == 25 && strcmp(t->policy_domain, t->domain) == 0 &&
        t->cfg->mta_sts.enabled) {
        struct tls_sts_options so;

        memset(&so, 0, sizeof(so));
        so.ca_file = t->cfg->tls_ca_file;
        so.port = (unsigned)t->cfg->mta_sts.port;
        so.fetch_timeout_ms = t->cfg->mta_sts.fetch_timeout_ms;
        t->sts = tls_sts_new(t->loop, t->dns, &so, why, sizeof(why));
        if (t->sts == NULL)
            snprintf(t->sts_why, sizeof(t->sts_why), "unusable: %s", why);
        else if (tls_sts_get(t->sts, t->domain, tc_sts_done, t, NULL) == 0) {
            t->looked_sts = 1;
            t->left++;
        }
    } else
        snprintf(t->sts_why, sizeof(t->sts_why), t->cfg->mta_sts.enabled ?
            "not applied (the route names its host)" :
            "off (delivery.mta_sts)");
    ev_run(t->loop);
    return 0;
}


static void
tc_print_dest(const struct tc *t)
{
    const struct dns_dest *d = t->dest;
    char                   line[DNS_NAME_MAX + 64];

    if (!t->looked_sts)
        tc_put("mta-sts:", t->sts_why);
    else if (t->have_sts && t->pol.mode != STS_MODE_NONE) {
        snprintf(line, sizeof(line), "%s, max_age %u, %zu mx pattern%s",
            sts_mode_name(t->pol.mode), (unsigned)t->pol.max_age,
            t->pol.nmx, t->pol.nmx == 1 ? "" : "s");
        tc_put("mta-sts:", line);
        for (size_t i = 0; i < t->pol.nmx; i++)
            tc_put("", t->pol.mx[i]);
    } else
        tc_put("mta-sts:", t->have_sts ? "mode none" : "no policy");
    if (t->looked_sts && t->sts_why[0] != '\0')
        tc_put("", t->sts_why);
    if (d == NULL) {
        tc_put("host:", "an address literal (no DNS)");
        return;
    }
    snprintf(line, sizeof(line), "%s%s%s", d->implicit && t->mx ?
        "no MX: " : "",
        d->name, d->secure ? " (dnssec)" : " (not dnssec)");
    tc_put(t->mx ? "mx of:" : "host:", line);
    if (d->status != DNS_OK) {
        snprintf(line, sizeof(line), "%s: ", dns_status_name(d->status));
        printf("%-12s %s", "", line);
        queue_put_text(d->why);
        putchar('\n');
    }
}


static const struct dns_host *
tc_host(const struct dns_dest *d, const char *name)
{
    for (size_t i = 0; i < d->nhost; i++)
        if (strcmp(d->host[i].name, name) == 0)
            return &d->host[i];
    return NULL;
}


/* tc_hops - the hops and their requirement before DANE; the TLSA lookups
 * of the secure ones at a DANE level (resolve.c's rs_dane_begin). */
static void
tc_hops(struct tc *t)
{
    struct resolve_self self;
    size_t              k;

    memset(&self, 0, sizeof(self));
    if (t->dest != NULL && t->dest->status == DNS_OK)
        (void)resolve_flatten(t->dest, t->port, &self, t->hop, TC_MAX_HOPS,
            &t->nhop);
    for (k = 0; k < t->nhop; k++) {
        struct tls_req        *r = &t->hop[k].tls;
        const struct dns_host *h;

        memset(r, 0, sizeof(*r));
        r->level = t->level;
        util_strlcpy(r->policy_domain, t->policy_domain,
            sizeof(r->policy_domain));
        util_strlcpy(r->verify_name, t->hop[k].name, sizeof(r->verify_name));
        if ((t->level != TLS_DANE && t->level != TLS_DANE_ONLY) ||
            t->dest == NULL || (t->mx && !t->dest->secure) ||
            (h = tc_host(t->dest, t->hop[k].name)) == NULL || !h->secure)
            continue;
        if (t->dane == NULL)
            t->dane = tls_dane_lookup_new(t->dns, tc_dane_done, t);
        tls_dane_lookup_add(t->dane, h, t->hop[k].port);
    }
    if (t->dane != NULL && tls_dane_lookup_start(t->dane)) {
        t->left = 1;
        ev_run(t->loop);
    }
}


static void
tc_print_tlsa(const struct tc *t, const struct tls_dane_host *dh)
{
    char line[300];

    if (dh == NULL) {
        tc_put("  tlsa:", t->level != TLS_DANE && t->level != TLS_DANE_ONLY ?
            "not looked up (the level is not dane)" :
            "not looked up (the MX or address answers were not dnssec)");
        return;
    }
    snprintf(line, sizeof(line), "%s", tls_dane_state_name(dh->state));
    tc_put("  tlsa:", dh->state == TLS_DANE_TEMPFAIL ? dh->why : line);
    for (size_t i = 0; dh->usable != NULL && i < dh->usable->n; i++) {
        struct dns_tlsa tl;
        size_t          j, o;

        if (dns_tlsa_parse(&dh->usable->rr[i], &tl) != 0)
            continue;
        o = (size_t)snprintf(line, sizeof(line), "%u %u %u ", tl.usage,
            tl.selector, tl.mtype);
        for (j = 0; j < tl.len && o + 3 < sizeof(line) && j < 32; j++)
            o += (size_t)snprintf(line + o, sizeof(line) - o, "%02x",
                tl.data[j]);
        if (j < tl.len)
            snprintf(line + o, sizeof(line) - o, "...");
        tc_put("", line);
    }
}


/* tc_refine - step 3 and 4 per host: what DANE and MTA-STS make of it,
 * and the probe.  Returns the number of hosts that would be tried and
 * failed their probe in *failed. */
static size_t
tc_refine(struct tc *t, int probe, size_t *failed)
{
    size_t tried = 0, k, n;
    char   why[SMTP_REPLY_MAX], addr[64];

    *failed = 0;
    for (k = 0; k < t->nhop; k++) {
        struct mta_hop          *hp = &t->hop[k];
        const struct tls_dane_host  *dh = tls_dane_lookup_find(t->dane, hp->name,
                                    hp->port);
        const char              *fail;
        int                      skip = 0;

        printf("%-12s ", "mx host:");
        queue_put_text(hp->name);
        util_sockaddr_ip((struct sockaddr *)&hp->ss, addr, sizeof(addr));
        printf(" [%s]:%u\n", addr, hp->port);
        tc_print_tlsa(t, dh);
        if (tls_dane_refine(&hp->tls, hp->name, dh, why, sizeof(why),
            &fail) != 0) {
            tc_put("  in force:", "not tried:");
            tc_put("", why);
            skip = 1;
        }
        if (!skip && t->have_sts && t->pol.mode != STS_MODE_NONE) {
            tc_put("  mta-sts:", sts_mx_match(&t->pol, hp->name) ?
                "matches the policy" : t->pol.mode == STS_MODE_ENFORCE ?
                "does not match the policy: not tried" :
                "does not match the policy (testing: tried)");
            n = 1;
            if (resolve_sts_hops(&t->pol, t->domain, hp, &n, why, sizeof(why)) < 0
                || n == 0)
                skip = 1;
        }
        if (!skip) {
            printf("%-12s %s%s%s%s\n", "  in force:",
                tls_level_name(hp->tls.level), hp->tls.tlsa != NULL ?
                " (authenticate with TLSA)" : "", hp->tls.sts_enforce ?
                " + mta-sts enforce (CA-verified name)" : "",
                tls_req_mandatory(&hp->tls) ? ", TLS required" :
                hp->tls.level == TLS_NONE ? ", no STARTTLS" :
                ", TLS when offered");
            tried++;
        }
        if (probe && tc_probe(t->cfg, hp, !skip) != 0 && !skip)
            (*failed)++;
    }
    return tried;
}


static int
tc_usage(void)
{
    fprintf(stderr, "usage: mtactl tls check DOMAIN [--no-probe]\n");
    return MTACTL_USAGE;
}


int
mtactl_tls_check(int argc, char **argv, const struct config *cfg)
{
    struct tc t;
    size_t    i, tried = 0, failed = 0;
    int       probe = 1, rc = MTACTL_FAIL;

    if (argc < 3 || argc > 4 || (argc == 4 &&
        strcmp(argv[3], "--no-probe") != 0) || argv[2][0] == '-')
        return tc_usage();
    if (argc == 4)
        probe = 0;
    memset(&t, 0, sizeof(t));
    t.cfg = cfg;
    if (strlen(argv[2]) >= sizeof(t.domain)) {
        fprintf(stderr, "mtactl: tls check: domain too long\n");
        return MTACTL_FAIL;
    }
    for (i = 0; argv[2][i]; i++)
        t.domain[i] = (char)tolower((unsigned char)argv[2][i]);
    if (i > 0 && t.domain[i - 1] == '.')
        t.domain[i - 1] = '\0';
    /* the delivery code logs what the workers log; the output says it */
    log_open("mtactl", -1, LOGL_WARN);
    tc_put("domain:", t.domain);
    if (tc_route(&t) != 0)
        return MTACTL_FAIL;
    if ((t.loop = ev_new()) == NULL) {
        fprintf(stderr, "mtactl: tls check: no event loop\n");
        return MTACTL_FAIL;
    }
    if (tc_lookup(&t) == 0 && (t.dest != NULL || t.nhop > 0)) {
        tc_print_dest(&t);
        tc_hops(&t);
        tried = tc_refine(&t, probe, &failed);
        if (t.nhop == 0)
            tc_put("result:", "no address to deliver to");
        else if (tried == 0)
            tc_put("result:", "no host would be tried: mail defers");
        else if (failed > 0)
            printf("%-12s %zu of %zu host%s mtad would try failed the "
                "probe\n", "result:", failed, tried, tried == 1 ? "" : "s");
        else {
            printf("%-12s %zu host%s would be tried%s\n", "result:", tried,
                tried == 1 ? "" : "s", probe ? ", every probe passed" : "");
            rc = MTACTL_OK;
        }
    }
    tls_dane_lookup_free(t.dane);
    tls_sts_free(t.sts);
    dns_dest_free(t.dest);
    dns_free(t.dns);
    ev_free(t.loop);
    return rc;
}
