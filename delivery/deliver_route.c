/*
 * deliver_route.c - what an attempt needs of a recipient group before its
 * transaction: the outbound TLS level in force (the policy table, the
 * route, delivery.tls) and the egress pool of its sender's domain
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/logfmt.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "router/router.h"
#include "spool/spool.h"
#include "bclass/bclass.h"
#include "delivery/delivery.h"
#include "delivery/delivery_int.h"
#include "delivery/dsn.h"
#include "delivery/maildir.h"
#include "delivery/mta.h"
#include "tlspol/tlspol.h"
#include "delivery/resolve.h"


/*
 * dl_tls_level - the outbound TLS level for rcpt (tlspol.h): the
 * policy table's entry for the recipient's domain, else for the routes
 * key that matched, else delivery.tls.  -1 when the table cannot be read:
 * the recipient is deferred rather than sent under a weaker default.
 */
int
dl_tls_level(struct deliver *d, const char *rcpt,
    const struct router_result *res)
{
    const char *at = strrchr(rcpt, '@');
    char        dom[ROUTE_KEY_MAX + 1], v[ROUTER_TLS_VALUE_MAX + 1];
    size_t      i, n;
    int         rc;

    if (at != NULL && (n = strlen(at + 1)) > 0 && n < sizeof(dom)) {
        for (i = 0; i < n; i++)
            dom[i] = (char)tolower((unsigned char)at[1 + i]);
        if (dom[n - 1] == '.')
            n--;
        dom[n] = '\0';
        rc = router_tls_get(d->router, dom, v, sizeof(v));
        if (rc == ROUTER_OK)
            return router_tls_level(v);
        if (rc != ROUTER_ENOTFOUND)
            return -1;
    }
    if (res->match != ROUTER_MATCH_DEFAULT) {
        rc = router_tls_get(d->router, res->key, v, sizeof(v));
        if (rc == ROUTER_OK)
            return router_tls_level(v);
        if (rc != ROUTER_ENOTFOUND)
            return -1;
    }
    return d->cfg->delivery_tls;
}


/*
 * dl_sender_pool - the egress pool of the sender's domain in the pool
 * table (routes.mdb, mtactl pool): the domain, then its parents as
 * ".parent" wildcards, as route keys.  "" when none (or the null
 * sender); -1 when the table cannot be read.
 */
int
dl_sender_pool(struct deliver *d, const char *sender, char *pool,
    size_t poolsz)
{
    const char *at = strrchr(sender, '@'), *p;
    char        dom[ROUTE_KEY_MAX + 1];
    size_t      i, n;
    int         rc;

    pool[0] = '\0';
    if (at == NULL || (n = strlen(at + 1)) == 0 || n >= sizeof(dom))
        return 0;
    for (i = 0; i < n; i++)
        dom[i] = (char)tolower((unsigned char)at[1 + i]);
    if (dom[n - 1] == '.')
        n--;
    dom[n] = '\0';
    /* "mail.example.org", then ".example.org", ".org" */
    for (p = dom; p != NULL; p = strchr(p + 1, '.')) {
        rc = router_pool_get(d->router, p, pool, poolsz);
        if (rc == ROUTER_OK)
            return 0;
        if (rc != ROUTER_ENOTFOUND)
            return -1;
    }
    pool[0] = '\0';
    return 0;
}
