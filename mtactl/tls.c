/*
 * tls.c - mtactl tls: the outbound TLS policy table.
 *
 * CONTRACT  mtactl tls policy set DOMAIN LEVEL | del DOMAIN | list
 *           [--json] | get DOMAIN [--json] (tls
 *           report is mtactl.c's, tls check tls_check.c's).  The
 *           table is the named database ROUTER_TLS_DB in the routes file
 *           (router.h), opened directly like `mtactl route` does; workers
 *           read it lock-free, so a change applies to the next delivery
 *           attempt without a reload.  DOMAIN is a route key: "domain",
 *           ".domain" (its subdomains' routes key) or "user@domain"; the
 *           delivery looks up the recipient's domain, then the routes key
 *           that matched, then relay.yaml's delivery.tls.  Each change is
 *           reported to the running mtad's log (audit.c).
 */
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "router/route.h"
#include "router/router.h"
#include "mtactl/mtactl.h"


void
mtactl_tls_help(void)
{
    printf(
"usage: mtactl tls policy set DOMAIN LEVEL\n"
"       mtactl tls policy del DOMAIN\n"
"       mtactl tls policy list [--json]\n"
"       mtactl tls policy get DOMAIN [--json]\n"
"  The outbound TLS level per destination, in the routes db (applies to\n"
"  the next delivery attempt; no reload).  LEVEL: none | may | encrypt |\n"
"  verify | dane | dane-only.  DOMAIN: a recipient domain, or a routes\n"
"  key (domain, .domain, user@domain).  Lookup: the recipient's domain,\n"
"  then the routes key that matched, then delivery.tls in relay.yaml.\n"
"  get: DOMAIN's own entry (exit 1: none); --json: one JSON object,\n"
"  {\"policies\":[{\"domain\",\"level\"},...]} or {\"domain\",\"level\"}.\n"
"usage: mtactl tls report [DOMAIN]\n"
"       mtactl tls report --send\n"
"  Today's TLS-RPT counts (RFC 8460, UTC day) per policy domain: the\n"
"  successful and failed sessions, the policy strings and the failure\n"
"  details, from every worker (up to a second late).  --send: send the\n"
"  reports now (else after each UTC day): each domain's counts so far go\n"
"  to its _smtp._tls rua= mailto: addresses and are then forgotten.\n"
"usage: mtactl tls check DOMAIN [--no-probe]\n"
"  The TLS that mail to DOMAIN gets now, worked out as the delivery does:\n"
"  its route, the level in force and where it comes from, the MTA-STS\n"
"  policy (fetched), the MX hosts, each one's TLSA records and what DANE\n"
"  and MTA-STS make of its level; then a live STARTTLS probe of each host\n"
"  (as posttls-finger): banner, TLS version and cipher, the certificate's\n"
"  subject, issuer and names, and the delivery's verdict.  Exit 0 when\n"
"  every host mtad would try passes, 1 when one fails or none would be\n"
"  tried.\n");
}


static int
mtactl_tls_usage(const char *msg)
{
    fprintf(stderr, "mtactl: tls: %s\n"
        "usage: mtactl tls policy set DOMAIN LEVEL | del DOMAIN |\n"
        "       list [--json] | get DOMAIN [--json]\n"
        "       (mtactl help tls)\n", msg);
    return MTACTL_USAGE;
}


/* mtactl_tls_print - router_tls_each callback; arg: NULL text, else the
 * JSON entries written so far. */
static int
mtactl_tls_print(const char *key, const char *value, void *arg)
{
    size_t *n = arg;

    if (n == NULL) {
        printf("%s\t%s\n", key, value);
        return 0;
    }
    fputs((*n)++ ? ",{\"domain\":" : "{\"domain\":", stdout);
    queue_json_str(key);
    fputs(",\"level\":", stdout);
    queue_json_str(value);
    putchar('}');
    return 0;
}


/* tls policy get DOMAIN [--json]: the entry of DOMAIN itself. */
static int
mtactl_tls_get(struct router *r, const char *key, int json)
{
    char val[ROUTER_TLS_VALUE_MAX + 1];
    int  rc = router_tls_get(r, key, val, sizeof(val));

    if (rc != ROUTER_OK && rc != ROUTER_ENOTFOUND) {
        fprintf(stderr, "mtactl: tls policy get: %s\n", router_errstr(r));
        return MTACTL_FAIL;
    }
    if (json) {
        fputs("{\"domain\":", stdout);
        queue_json_str(key);
        fputs(",\"level\":", stdout);
        queue_json_str(rc == ROUTER_OK ? val : NULL);
        fputs("}\n", stdout);
    } else if (rc == ROUTER_OK)
        printf("%s\t%s\n", key, val);
    else
        fprintf(stderr, "mtactl: tls policy get: %s: no entry\n", key);
    return rc == ROUTER_OK ? MTACTL_OK : MTACTL_FAIL;
}


static int
mtactl_tls_policy(struct router *r, const struct config *cfg, int argc,
    char **argv)
{
    const char *cmd = argv[2];
    char        key[ROUTE_KEY_MAX + 1];
    size_t      n = 0;
    int         json = strcmp(argv[argc - 1], "--json") == 0;

    if (strcmp(cmd, "list") == 0) {
        if (json)
            fputs("{\"policies\":[", stdout);
        if (router_tls_each(r, mtactl_tls_print, json ? &n : NULL) !=
            ROUTER_OK) {
            fprintf(stderr, "mtactl: tls policy list: %s\n",
                router_errstr(r));
            return MTACTL_FAIL;
        }
        if (json)
            fputs("]}\n", stdout);
        return MTACTL_OK;
    }
    if (strlen(argv[3]) >= sizeof(key)) {
        fprintf(stderr, "mtactl: tls policy %s: key too long\n", cmd);
        return MTACTL_FAIL;
    }
    memcpy(key, argv[3], strlen(argv[3]) + 1);
    route_key_normalize(key);
    if (strcmp(cmd, "get") == 0)
        return mtactl_tls_get(r, key, json);
    if (strcmp(cmd, "set") == 0) {
        if (router_tls_put(r, argv[3], argv[4]) != ROUTER_OK) {
            fprintf(stderr, "mtactl: tls policy set: %s\n", router_errstr(r));
            return MTACTL_FAIL;
        }
        printf("%s\t%s\n", key, argv[4]);
        mtactl_audit("tls_policy_set %s %s", key, argv[4]);
        return mtactl_routes_publish(cfg, "tls policy set");
    }
    if (router_tls_del(r, argv[3]) != ROUTER_OK) {
        fprintf(stderr, "mtactl: tls policy del: %s\n", router_errstr(r));
        return MTACTL_FAIL;
    }
    mtactl_audit("tls_policy_del %s", key);
    return mtactl_routes_publish(cfg, "tls policy del");
}


int
mtactl_tls(int argc, char **argv, const struct config *cfg)
{
    struct router *r = NULL;
    const char    *cmd;
    int            rc;

    if (argc < 2)
        return mtactl_tls_usage("missing command");
    if (strcmp(argv[1], "help") == 0) {
        mtactl_tls_help();
        return MTACTL_OK;
    }
    if (strcmp(argv[1], "policy") != 0 || argc < 3)
        return mtactl_tls_usage(argc < 3 && strcmp(argv[1], "policy") == 0 ?
            "policy needs set, del or list" : "unknown command");
    cmd = argv[2];
    if (!((strcmp(cmd, "set") == 0 && argc == 5) ||
        (strcmp(cmd, "del") == 0 && argc == 4) ||
        (strcmp(cmd, "list") == 0 && (argc == 3 || (argc == 4 &&
        strcmp(argv[3], "--json") == 0))) ||
        (strcmp(cmd, "get") == 0 && (argc == 4 || (argc == 5 &&
        strcmp(argv[4], "--json") == 0)))))
        return mtactl_tls_usage("policy set DOMAIN LEVEL | del DOMAIN | "
            "list [--json] | get DOMAIN [--json]");
    if (cfg == NULL) {
        fprintf(stderr, "mtactl: tls policy: no configuration loaded\n");
        return MTACTL_FAIL;
    }
    mtactl_routes_deadline();
    if (router_open(&r, cfg->routes_db, cfg->routes_default,
        strcmp(cmd, "set") == 0 ? ROUTER_OPEN_CREATE : 0) != ROUTER_OK) {
        fprintf(stderr, "mtactl: tls policy %s: %s\n", cmd, router_errstr(r));
        router_close(r);
        return MTACTL_FAIL;
    }
    rc = mtactl_tls_policy(r, cfg, argc, argv);
    router_close(r);
    return rc;
}
