/*
 * pool.c - mtactl pool: the sender pool table, which egress pool mail
 * from a sender domain leaves through.
 *
 * CONTRACT  mtactl pool set DOMAIN POOL | del DOMAIN | list.  The table is
 *           the named database ROUTER_POOL_DB in the routes file
 *           (router.h), opened directly as `mtactl tls policy` does; after
 *           a change the running mtad publishes the table to its workers,
 *           so the next delivery attempt uses it without a reload.
 *           DOMAIN: a sender domain, or ".domain" for its subdomains.
 *           POOL must be one of relay.yaml's egress.pools ("default"
 *           without an egress section), else set refuses it.  A route
 *           value's " pool=NAME" wins over this table; without either
 *           the mail goes through egress.default_pool.  Each change is
 *           reported to the running mtad's log (audit.c).
 */
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "router/route.h"
#include "router/router.h"
#include "mtactl/mtactl.h"


void
mtactl_pool_help(void)
{
    printf(
"usage: mtactl pool set DOMAIN POOL\n"
"       mtactl pool del DOMAIN\n"
"       mtactl pool list\n"
"  The egress pool per sender domain, in the routes db (applies to the\n"
"  next delivery attempt; no reload).  DOMAIN: the sender's domain, or\n"
"  .domain for its subdomains (the nearest wins).  POOL: a name from\n"
"  egress.pools in relay.yaml.  The pool of a message: its route's\n"
"  \" pool=NAME\", else this table, else egress.default_pool.\n");
}


static int
mtactl_pool_usage(const char *msg)
{
    fprintf(stderr, "mtactl: pool: %s\n"
        "usage: mtactl pool set DOMAIN POOL | del DOMAIN | list\n"
        "       (mtactl help pool)\n", msg);
    return MTACTL_USAGE;
}


static int
mtactl_pool_print(const char *key, const char *value, void *arg)
{
    (void)arg;
    printf("%s\t%s\n", key, value);
    return 0;
}


/* mtactl_pool_known - is name a pool of cfg ("default" without any)? */
static int
mtactl_pool_known(const struct config *cfg, const char *name)
{
    size_t i;

    if (cfg->negress_pools == 0)
        return strcmp(name, "default") == 0;
    for (i = 0; i < cfg->negress_pools; i++)
        if (strcmp(cfg->egress_pools[i].name, name) == 0)
            return 1;
    return 0;
}


static int
mtactl_pool_run(struct router *r, const struct config *cfg, int argc,
    char **argv)
{
    const char *cmd = argv[1];
    char        key[ROUTE_KEY_MAX + 1];

    (void)argc;
    if (strcmp(cmd, "list") == 0) {
        if (router_pool_each(r, mtactl_pool_print, NULL) != ROUTER_OK) {
            fprintf(stderr, "mtactl: pool list: %s\n", router_errstr(r));
            return MTACTL_FAIL;
        }
        return MTACTL_OK;
    }
    if (strlen(argv[2]) >= sizeof(key)) {
        fprintf(stderr, "mtactl: pool %s: key too long\n", cmd);
        return MTACTL_FAIL;
    }
    memcpy(key, argv[2], strlen(argv[2]) + 1);
    route_key_normalize(key);
    if (strcmp(cmd, "set") == 0) {
        if (router_pool_put(r, argv[2], argv[3]) != ROUTER_OK) {
            fprintf(stderr, "mtactl: pool set: %s\n", router_errstr(r));
            return MTACTL_FAIL;
        }
        printf("%s\t%s\n", key, argv[3]);
        mtactl_audit("pool_set %s %s", key, argv[3]);
        return mtactl_routes_publish(cfg, "pool set");
    }
    if (router_pool_del(r, argv[2]) != ROUTER_OK) {
        fprintf(stderr, "mtactl: pool del: %s\n", router_errstr(r));
        return MTACTL_FAIL;
    }
    mtactl_audit("pool_del %s", key);
    return mtactl_routes_publish(cfg, "pool del");
}


int
mtactl_pool(int argc, char **argv, const struct config *cfg)
{
    struct router *r = NULL;
    const char    *cmd;
    int            rc;

    if (argc < 2)
        return mtactl_pool_usage("missing command");
    cmd = argv[1];
    if (!((strcmp(cmd, "set") == 0 && argc == 4) ||
        (strcmp(cmd, "del") == 0 && argc == 3) ||
        (strcmp(cmd, "list") == 0 && argc == 2)))
        return mtactl_pool_usage("set DOMAIN POOL | del DOMAIN | list");
    if (strcmp(cmd, "set") == 0 && !route_pool_name_ok(argv[3])) {
        fprintf(stderr, "mtactl: pool set: bad pool name (1-%d letters, "
            "digits, '.', '_', '-')\n", ROUTE_POOL_MAX);
        return MTACTL_FAIL;
    }
    if (strcmp(cmd, "set") == 0 && !mtactl_pool_known(cfg, argv[3])) {
        fprintf(stderr, "mtactl: pool set: no pool %s in egress.pools of "
            "%s\n", argv[3], cfg->path);
        return MTACTL_FAIL;
    }
    mtactl_routes_deadline();
    if (router_open(&r, cfg->routes_db, cfg->routes_default,
        strcmp(cmd, "set") == 0 ? ROUTER_OPEN_CREATE : 0) != ROUTER_OK) {
        fprintf(stderr, "mtactl: pool %s: %s\n", cmd, router_errstr(r));
        router_close(r);
        return MTACTL_FAIL;
    }
    rc = mtactl_pool_run(r, cfg, argc, argv);
    router_close(r);
    return rc;
}
