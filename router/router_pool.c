/*
 * router_pool.c - the sender pool table of routes.mdb: which egress pool
 * mail from a sender domain leaves through (router.h; relay.yaml
 * egress.pools; edited live with mtactl pool).
 *
 * CONTRACT  As the TLS policy table (router.c): exact keys, lower case,
 *           read in the router's reset/renewed read transaction, so the
 *           workers see a change at the next snapshot they open.
 * FAILURE   Never logs.  ROUTER_OK or ROUTER_E*; router_errstr() says why.
 */
#include <stdio.h>
#include <string.h>

#include <lmdb.h>

#include "router/router.h"
#include "router/router_int.h"


int
router_pool_get(struct router *r, const char *key, char *val, size_t valsz)
{
    MDB_val mk, mv;
    size_t  n = key != NULL ? strlen(key) : 0;
    int     rc, mrc;

    if (!r->have_pool || n == 0 || n > ROUTE_KEY_MAX)
        return router_fail(r, ROUTER_ENOTFOUND, "no pool for '%.60s'",
            key != NULL ? key : "");
    if ((rc = router_rbegin(r)) != ROUTER_OK)
        return rc;
    mk.mv_data = (void *)key;
    mk.mv_size = n;
    mrc = mdb_get(r->rtxn, r->pool_dbi, &mk, &mv);
    if (mrc == 0) {
        if (mv.mv_size >= valsz || mv.mv_size > ROUTER_POOL_VALUE_MAX) {
            rc = router_fail(r, ROUTER_EINVAL, "stored pool for '%s' is too "
                "long", key);
        } else {
            memcpy(val, mv.mv_data, mv.mv_size);
            val[mv.mv_size] = '\0';
            if (!route_pool_name_ok(val))
                rc = router_fail(r, ROUTER_EINVAL, "stored pool for '%s' is "
                    "not a pool name", key);
        }
    } else if (mrc == MDB_NOTFOUND) {
        rc = router_fail(r, ROUTER_ENOTFOUND, "no pool for '%s'", key);
    } else {
        rc = router_fail(r, ROUTER_EDB, "mdb_get: %s", mdb_strerror(mrc));
    }
    mdb_txn_reset(r->rtxn);
    return rc;
}


/* router_pool_key - check and normalise a sender domain key. */
static int
router_pool_key(struct router *r, const char *key, char *kbuf, size_t kbufsz)
{
    char why[256];

    if (!r->have_pool)
        return router_fail(r, ROUTER_EDB, "the pool table does not exist "
            "(opened read-only)");
    if (route_key_check(key, why, sizeof(why)) == -1)
        return router_fail(r, ROUTER_EINVAL, "bad key: %s", why);
    if (strchr(key, '@') != NULL)
        return router_fail(r, ROUTER_EINVAL, "bad key: '%s' is an address; "
            "the pool table takes sender domains (example.org, "
            ".example.org)", key);
    snprintf(kbuf, kbufsz, "%s", key);
    route_key_normalize(kbuf);
    return ROUTER_OK;
}


int
router_pool_put(struct router *r, const char *key, const char *pool)
{
    char k[ROUTE_KEY_MAX + 1];
    int  rc;

    if ((rc = router_pool_key(r, key, k, sizeof(k))) != ROUTER_OK)
        return rc;
    if (!route_pool_name_ok(pool))
        return router_fail(r, ROUTER_EINVAL, "bad pool name '%.40s' (1-%d "
            "letters, digits, '.', '_', '-')", pool != NULL ? pool : "",
            ROUTE_POOL_MAX);
    return router_put_in(r, r->pool_dbi, k, pool);
}


int
router_pool_del(struct router *r, const char *key)
{
    char k[ROUTE_KEY_MAX + 1];
    int  rc;

    if ((rc = router_pool_key(r, key, k, sizeof(k))) != ROUTER_OK)
        return rc;
    return router_del_in(r, r->pool_dbi, k, "no pool for");
}


int
router_pool_each(struct router *r,
    int (*fn)(const char *key, const char *value, void *arg), void *arg)
{
    if (!r->have_pool)
        return ROUTER_OK;
    return router_each_in(r, r->pool_dbi, ROUTER_POOL_VALUE_MAX, fn, arg);
}
