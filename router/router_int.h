/*
 * router_int.h - what router.c shares with router_pool.c (the sender pool
 * table).  Nothing outside router/ includes this.
 *
 * CONTRACT  As router.h: the helpers never log; router_fail() records the
 *           reason in r->err and returns rc.
 */
#ifndef MTAD_ROUTER_INT_H
#define MTAD_ROUTER_INT_H

#include <limits.h>
#include <lmdb.h>

#include "router/router.h"

struct router {
    MDB_env    *env;
    MDB_dbi     dbi;
    MDB_dbi     tls_dbi;            /* ROUTER_TLS_DB, when have_tls */
    int         have_tls;
    MDB_dbi     pool_dbi;           /* ROUTER_POOL_DB, when have_pool */
    int         have_pool;
    MDB_txn    *rtxn;               /* read txn, reset between lookups */
    MDB_txn    *wtxn;               /* open batch, or NULL */
    int         has_default;
    char        default_value[ROUTE_VALUE_MAX + 1];
    struct route default_route;
    char        err[512];
};

int     router_fail(struct router *r, int rc, const char *fmt, ...)
            __attribute__((format(printf, 3, 4)));
/* An LMDB return code as ROUTER_ESYS (errno set) or ROUTER_EDB. */
int     router_mdb_rc(int mrc);
/* The read transaction, begun or renewed; reset it after use. */
int     router_rbegin(struct router *r);
/* One write or delete in table dbi (the batch's, or its own txn). */
int     router_put_in(struct router *r, MDB_dbi dbi, const char *k,
            const char *value);
int     router_del_in(struct router *r, MDB_dbi dbi, const char *k,
            const char *what);
/* fn for every entry of dbi in key order (values up to vmax bytes). */
int     router_each_in(struct router *r, MDB_dbi dbi, size_t vmax,
            int (*fn)(const char *key, const char *value, void *arg),
            void *arg);
/* 1 when main-table key k names a side table (TLS policies, pools). */
int     router_is_side(const MDB_val *k);

#endif /* MTAD_ROUTER_INT_H */
